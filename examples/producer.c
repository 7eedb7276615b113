/*
 * examples/producer.c - the producer side over TCP, for the two programs
 * above: N transfers of 4 KiB per shard from a staging buffer to the
 * shards at ADDR... (shard k at the k-th), each completing once.
 *
 *   producer N ADDR...
 *
 * Like examples/hello.c, with the tcp transport instead of in-process
 * shards: the transport connects (and reconnects) by itself; a transfer
 * submitted before its shards are up fails with XFER_ERR_CONN_LOST, so
 * this program waits for every connection first.  The transport outlives
 * the engine and the loop outlives both, so the loop is ours: free the
 * engine, then the transport, then the loop.
 * Exit status: 0 when every transfer succeeded.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <xfer/tcp.h>
#include <xfer/xfer.h>

#define SLICE 4096
#define MAXS 8

static unsigned ok, failed;

static void done(void *ud, const xfer_result *r)
{
    (void)ud;
    if (r->status == 0)
        ok++;
    else
        failed++;
}

static void stopped(void *ud)
{
    event_base_loopbreak(ud);
}

static void idle(void *ud)
{
    xfer_engine *e = ud;
    xfer_engine_shutdown(e, stopped, xfer_engine_base(e));
}

static void tick(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    (void)ud;
}

/* Run the loop until every shard is connected (at most 5 s). */
static int wait_connected(struct event_base *base, xfer_tcp *t, uint16_t n)
{
    struct event *ev = event_new(base, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 10000};
    event_add(ev, &tv);
    int rc = XFER_ERR_CONN_LOST;
    for (int i = 0; i < 500 && rc; i++) {
        uint16_t up = 0;
        for (uint16_t k = 0; k < n; k++)
            up += xfer_tcp_connected(t, k);
        rc = up == n ? 0 : XFER_ERR_CONN_LOST;
        if (rc)
            event_base_loop(base, EVLOOP_ONCE);
    }
    event_free(ev);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc - 2 > MAXS) {
        fprintf(stderr, "usage: producer N ADDR...\n");
        return 2;
    }
    unsigned n = (unsigned)atoi(argv[1]);
    uint16_t nshards = (uint16_t)(argc - 2);
    static uint8_t staging[MAXS * SLICE];
    xfer_engine *e = NULL;
    xfer_tcp *tcp = NULL;
    uint32_t group, pool;
    signal(SIGPIPE, SIG_IGN); /* libevent writes with writev */
    struct event_base *base = event_base_new();
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = base;
    int rc = base ? xfer_engine_new(&ec, &e) : XFER_ERR_NOMEM;
    if (rc)
        goto out;
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = nshards;
    tc.addrs = (const char *const *)argv + 2;
    rc = xfer_tcp_new(base, &tc, &tcp);
    if (!rc)
        rc = xfer_engine_add_group(e, xfer_tcp_transport(tcp), &group);
    if (!rc)
        rc = xfer_engine_register_pool(e, staging, sizeof staging, &pool);
    if (!rc)
        rc = wait_connected(base, tcp, nshards);
    xfer_slice slices[MAXS];
    for (uint16_t k = 0; k < nshards; k++)
        slices[k] = (xfer_slice){.off = k * SLICE, .len = SLICE};
    memset(staging, 'x', sizeof staging);
    for (unsigned id = 1; id <= n && !rc; id++) {
        xfer_transfer_desc d = {.id = id, .group = group, .pool = pool,
                                .nslices = nshards, .slices = slices};
        rc = xfer_engine_submit(e, &d, done, NULL);
    }
    if (!rc)
        rc = xfer_engine_on_idle(e, idle, e);
    if (!rc)
        event_base_dispatch(base);
out:
    if (rc)
        fprintf(stderr, "producer: %s\n", xfer_strerror(rc));
    xfer_engine_del(e);
    xfer_tcp_del(tcp);
    if (base) {
        event_base_loop(base, EVLOOP_NONBLOCK); /* sockets finish closing */
        event_base_free(base);
    }
    printf("%u transfers done, %u failed\n", ok, failed);
    return rc || ok != n ? 1 : 0;
}
