/*
 * examples/discovery.c - a producer that finds its shards through etcd:
 * N transfers of 4 KiB per shard to the S shards of group GROUP, whose
 * xferd processes registered with `xferd --etcd URLS --group GROUP`.
 *
 *   discovery N S GROUP URLS
 *
 * The directory (xfer/dir.h) watches the group; the tcp transport follows
 * it, dialling each shard where its entry says and failing a shard's ops
 * with XFER_ERR_SHARD_GONE as soon as its entry is gone.  The loop
 * outlives the transport, and the directory outlives the transport that
 * follows it: free the engine, the transport, the directory, the loop.
 * Exit status: 0 when every transfer succeeded.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <xfer/dir.h>
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

/* Run the loop until the directory has named every shard and each is
 * connected (at most 10 s): before that a shard is "gone". */
static int wait_connected(struct event_base *base, xfer_tcp *t, uint16_t n)
{
    struct event *ev = event_new(base, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 10000};
    event_add(ev, &tv);
    int rc = XFER_ERR_SHARD_GONE;
    for (int i = 0; i < 1000 && rc; i++) {
        uint16_t up = 0;
        for (uint16_t k = 0; k < n; k++)
            up += xfer_tcp_connected(t, k);
        rc = up == n ? 0 : XFER_ERR_SHARD_GONE;
        if (rc)
            event_base_loop(base, EVLOOP_ONCE);
    }
    event_free(ev);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 5 || atoi(argv[2]) < 1 || atoi(argv[2]) > MAXS) {
        fprintf(stderr, "usage: discovery N S GROUP URLS\n");
        return 2;
    }
    unsigned n = (unsigned)atoi(argv[1]);
    uint16_t nshards = (uint16_t)atoi(argv[2]);
    static uint8_t staging[MAXS * SLICE];
    xfer_engine *e = NULL;
    xfer_tcp *tcp = NULL;
    xfer_dir *dir = NULL;
    uint32_t group, pool;
    signal(SIGPIPE, SIG_IGN); /* libevent writes with writev */
    struct event_base *base = event_base_new();
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = base;
    int rc = base ? xfer_engine_new(&ec, &e) : XFER_ERR_NOMEM;
    xfer_dir_config dc;
    xfer_dir_config_default(&dc);
    dc.endpoints = argv[4]; /* several members: "http://a:2379,http://b:2379" */
    if (!rc)
        rc = xfer_dir_new(base, &dc, &dir);
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = nshards;
    tc.dir = dir;           /* instead of tc.addrs */
    tc.dir_group = argv[3]; /* the HELLO group: xfer_dir_group_id(GROUP) */
    if (!rc)
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
    if (rc)
        fprintf(stderr, "discovery: %s\n", xfer_strerror(rc));
    xfer_engine_del(e);
    xfer_tcp_del(tcp);
    xfer_dir_del(dir);
    if (base) {
        event_base_loop(base, EVLOOP_NONBLOCK); /* sockets finish closing */
        event_base_free(base);
    }
    printf("%u transfers done, %u failed\n", ok, failed);
    return rc == 0 && ok == n ? 0 : 1;
}
