/* examples/gpu_testdev.c - moving device memory from C (docs/gpu.md).
 * A producer whose staging is device memory sends one block to a shard
 * whose pool is device memory, over TCP.  It uses the test device
 * (XFER_MEM_TESTDEV), so it runs where there is no GPU; with a GPU,
 * allocate with cudaMalloc and say {XFER_MEM_CUDA, ordinal} instead. */
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "xfer/server.h"
#include "xfer/tcp.h"
#include "xfer/testdev.h"
#include "xfer/xfer.h"

#define LEN (1u << 20)

static int status = 1;
static void on_done(void *ud, const xfer_result *r)
{
    status = r->status;
    event_base_loopbreak(ud);
}

static void on_shut(void *ud)
{
    event_base_loopbreak(ud);
}

int main(void)
{
    static unsigned char host[LEN], back[LEN];
    void *staging = NULL, *pool = NULL;
    xfer_mem dev = {.kind = XFER_MEM_TESTDEV, .device = 0};
    struct event_base *base = event_base_new();
    for (size_t i = 0; i < LEN; i++)
        host[i] = (unsigned char)(i * 7);
    /* device memory on both sides; the bytes reach it by a copy */
    if (!base || xfer_testdev_alloc(LEN, &staging) ||
        xfer_testdev_alloc(LEN, &pool) ||
        xfer_testdev_write(staging, host, LEN))
        return 1;

    /* the shard: its pool is device memory (shard_mem) */
    xfer_server_shard sh = {.index = 0, .base = pool, .len = LEN};
    xfer_server_config sc;
    xfer_server_config_default(&sc);
    sc.base = base;
    sc.nshards = 1;
    sc.shards = &sh;
    sc.shard_mem = &dev;
    sc.session_max_bytes = LEN;
    xfer_server *srv = NULL;
    if (xfer_server_new(&sc, &srv))
        return 1;

    /* the producer: an engine, TCP to the shard, device staging */
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u",
             (unsigned)xfer_server_port(srv));
    const char *addrs[1] = {addr};
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = base;
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = 1;
    tc.addrs = addrs;
    xfer_engine *e = NULL;
    xfer_tcp *tcp = NULL;
    uint32_t group, spool;
    if (xfer_engine_new(&ec, &e) || xfer_tcp_new(base, &tc, &tcp) ||
        xfer_engine_add_group(e, xfer_tcp_transport(tcp), &group) ||
        xfer_engine_register_pool_mem(e, staging, LEN, dev, &spool))
        return 1;

    xfer_slice sl = {.off = 0, .len = LEN};
    xfer_transfer_desc d = {.id = 1, .group = group, .pool = spool,
                            .nslices = 1, .slices = &sl};
    if (xfer_engine_submit(e, &d, on_done, base))
        return 1;
    event_base_dispatch(base);

    /* READY came after the copy into the pool: read it back */
    int same = status == 0 && xfer_testdev_read(back, pool, LEN) == 0 &&
               memcmp(host, back, LEN) == 0;
    printf("transfer: %s, bytes %s\n", xfer_strerror(status),
           same ? "identical" : "DIFFERENT");
    xfer_engine_shutdown(e, on_shut, base); /* unregisters the staging */
    event_base_dispatch(base);
    xfer_engine_del(e);
    xfer_tcp_del(tcp);
    xfer_server_del(srv);
    event_base_free(base);
    xfer_testdev_free(staging);
    xfer_testdev_free(pool);
    return same ? 0 : 1;
}
