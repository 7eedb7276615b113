/*
 * tests/rdma/test_dir_rdma.c - the RDMA transport created from a group
 * name (xfer_rdma_config.tcp.dir, issue 28) on the software fabric: real
 * xferd-sim processes serving --rdma, registered in a real etcd started
 * here on loopback (lease 2 s).
 *
 * test_dir_rdma_kill_shard: under load, shard 1 is killed with -9.  The
 * producer sees it gone within the lease TTL plus one second, and from
 * then its transfers fail at once with XFER_ERR_SHARD_GONE; a new xferd
 * for shard 1 on another port registers, the transport reconnects both
 * of its connections there, and transfers succeed again.  Every
 * transfer completes exactly once; at the end no shard holds a byte and
 * nothing of the fabric is left alive in the producer.
 * test_dir_rdma_needs_rdma_entry: a shard registered without RDMA (an
 * xferd without --rdma: transports 1) is never used by the RDMA
 * transport: it stays gone, and transfers fail fast with
 * XFER_ERR_SHARD_GONE while the other shard is connected.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "etcd.h"
#include "mp.h"
#include "testutil.h"
#include "xfer/dir.h"
#include "xfer/rdma.h"
#include "xfer/xfer.h"
#include "xfer_fabric.h"

#define NSHARDS 2
#define SLOTS 16
#define SLICE 8192

typedef struct pump {
    struct event_base *base;
    xfer_engine *e;
    xfer_rdma *rd;
    xfer_dir *dir;
    uint32_t group, pool;
    uint8_t *staging;
    uint32_t free_slots[SLOTS], nfree;
    uint64_t next_id, submitted, done, ok, failed, gone, dup;
    uint64_t since_ok;
    uint64_t mark;           /* ids from here on: submitted while gone */
    uint64_t late_other;     /* of those, failed other than SHARD_GONE */
    uint8_t *seen;           /* completions per id */
    uint64_t seen_cap;
    bool stop;
    struct event *tick;
    volatile bool shut;
} pump;

static void pump_done(void *ud, const xfer_result *res)
{
    pump *u = ud;
    if (res->id < u->seen_cap && u->seen[res->id]++)
        u->dup++;
    u->done++;
    u->free_slots[u->nfree++] = (uint32_t)res->user_data;
    if (res->status == 0) {
        u->ok++;
        u->since_ok++;
        return;
    }
    if (u->failed < 3)
        fprintf(stderr, "transfer %llu failed: %s (shards 0x%llx)\n",
                (unsigned long long)res->id, xfer_strerror(res->status),
                (unsigned long long)res->failed_shards);
    u->failed++;
    if (res->status == XFER_ERR_SHARD_GONE)
        u->gone++;
    else if (u->mark && res->id >= u->mark)
        u->late_other++;
}

/* Refill every 5 ms, at most 4 a tick: a gone shard fails transfers at
 * once, and a resubmit from the completion would spin. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    pump *u = arg;
    for (int n = 0; n < 4 && !u->stop && u->nfree &&
                    u->next_id + 1 < u->seen_cap; n++) {
        uint32_t slot = u->free_slots[--u->nfree];
        xfer_slice sl[NSHARDS];
        for (int k = 0; k < NSHARDS; k++) {
            sl[k].off = ((uint64_t)slot * NSHARDS + (uint64_t)k) * SLICE;
            sl[k].len = SLICE;
        }
        xfer_transfer_desc d = {.id = ++u->next_id, .group = u->group,
                                .pool = u->pool, .nslices = NSHARDS,
                                .slices = sl, .user_data = slot};
        ck_assert_int_eq(xfer_engine_submit(u->e, &d, pump_done, u), 0);
        u->submitted++;
    }
}

static void on_log(void *ud, const char *line)
{
    fprintf(stderr, "producer dir: %s\n", line);
}

static void pump_new(pump *u, const char *eps, const char *group)
{
    memset(u, 0, sizeof *u);
    signal(SIGPIPE, SIG_IGN);
    u->base = event_base_new();
    xfer_dir_config dc;
    xfer_dir_config_default(&dc);
    dc.endpoints = eps;
    dc.request_timeout_ns = 1000000000ull;
    dc.reconnect_min_ns = 50000000ull;
    dc.reconnect_max_ns = 500000000ull;
    dc.log = on_log;
    ck_assert_int_eq(xfer_dir_new(u->base, &dc, &u->dir), 0);
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = u->base;
    ec.core.default_deadline_ns = 5000000000ull;
    ck_assert_int_eq(xfer_engine_new(&ec, &u->e), 0);
    xfer_rdma_config rc;
    xfer_rdma_config_default(&rc);
    rc.tcp.nshards = NSHARDS;
    rc.tcp.dir = u->dir;      /* instead of rc.tcp.addrs */
    rc.tcp.dir_group = group;
    rc.tcp.reconnect_min_ns = 2000000ull;
    rc.tcp.reconnect_max_ns = 200000000ull;
    ck_assert_int_eq(xfer_rdma_new(u->base, &rc, &u->rd), 0);
    ck_assert_int_eq(xfer_engine_add_group(u->e, xfer_rdma_transport(u->rd),
                                           &u->group), 0);
    u->staging = calloc(SLOTS * NSHARDS, SLICE);
    ck_assert_int_eq(xfer_engine_register_pool(u->e, u->staging,
                                               SLOTS * NSHARDS * SLICE,
                                               &u->pool), 0);
    for (uint32_t i = 0; i < SLOTS; i++)
        u->free_slots[u->nfree++] = i;
    u->seen_cap = 1u << 20;
    u->seen = calloc(u->seen_cap, 1);
    u->tick = event_new(u->base, -1, EV_PERSIST, on_tick, u);
}

static bool all_connected(void *ud)
{
    pump *u = ud;
    for (uint16_t k = 0; k < NSHARDS; k++)
        if (!xfer_rdma_connected(u->rd, k))
            return false;
    return true;
}

static bool shard0_connected(void *ud)
{
    return xfer_rdma_connected(((pump *)ud)->rd, 0);
}

static bool shard1_gone(void *ud)
{
    return xfer_rdma_gone(((pump *)ud)->rd, 1);
}

static bool pump_idle(void *ud)
{
    return ((pump *)ud)->nfree == SLOTS;
}

static void pump_start(pump *u)
{
    u->stop = false;
    struct timeval tv = {0, 5000};
    event_add(u->tick, &tv);
}

static void pump_stop(pump *u)
{
    u->stop = true;
    ck_assert(mp_run_while(u->base, pump_idle, u, 20000));
    event_del(u->tick);
}

static void run_ms(pump *u, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_base_loopexit(u->base, &tv);
    event_base_dispatch(u->base);
}

static void on_shut(void *ud)
{
    ((pump *)ud)->shut = true;
}

static void pump_del(pump *u)
{
    ck_assert_int_eq(xfer_engine_shutdown(u->e, on_shut, u), 0);
    ck_assert(mp_run_until(u->base, &u->shut, 20000));
    xfer_engine_del(u->e);
    xfer_rdma_del(u->rd);
    xfer_dir_del(u->dir);
    event_free(u->tick);
    event_base_loop(u->base, EVLOOP_NONBLOCK);
    event_base_free(u->base);
    free(u->staging);
    free(u->seen);
    /* Every QP, CQ, MR and id the producer had is gone. */
    ck_assert_int_eq(xfer_fabric_reset(), 0);
}

/* xferd-sim (XFERD) serving shard k of `group`, registered in etcd with a
 * 2 s lease; over RDMA too unless `tcp_only`. */
static void start_shard(mp_proc *p, const etcd_cluster *c, int k,
                        const char *group, bool tcp_only)
{
    char shard[16];
    snprintf(shard, sizeof shard, "%d", k);
    const char *args[24] = {"--shard", shard, "--pool", "16M",
                            "--lease-ttl", "2s", "--group", group,
                            "--quiet", "--consume", "--etcd", c->endpoints,
                            "--etcd-ttl", "2", tcp_only ? NULL : "--rdma",
                            NULL};
    ck_assert_int_eq(mp_xferd(p, 0, args), 0);
}

static void assert_empty(uint16_t port)
{
    xfer_wire_status st;
    ck_assert_int_eq(mp_wait_pool_free(port, 15000, &st), 0);
}

START_TEST(test_dir_rdma_kill_shard)
{
    ck_assert_int_eq(xfer_fabric_reset(), 0);
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    mp_proc d[NSHARDS];
    for (int k = 0; k < NSHARDS; k++)
        start_shard(&d[k], &c, k, "rkill", false);
    pump u;
    pump_new(&u, c.endpoints, "rkill");
    ck_assert(mp_run_while(u.base, all_connected, &u, 15000));
    pump_start(&u);
    run_ms(&u, 500);
    ck_assert_uint_gt(u.ok, 0);
    xfer_rdma_stats rs;
    ck_assert_int_eq(xfer_rdma_stats_get(u.rd, &rs), 0);
    ck_assert_uint_gt(rs.writes_ok, 0); /* the data went by RDMA */
    uint64_t t0 = mp_now_ms();
    mp_kill(&d[1], SIGKILL);
    ck_assert(mp_run_while(u.base, shard1_gone, &u, 10000));
    uint64_t took = mp_now_ms() - t0;
    fprintf(stderr, "shard 1 gone %llu ms after kill -9 (lease TTL 2000)\n",
            (unsigned long long)took);
    ck_assert_uint_le(took, 3000); /* the bound: TTL + 1 s */
    ck_assert(!xfer_rdma_connected(u.rd, 1));
    uint64_t gone0 = u.gone;
    u.mark = u.next_id + 1;
    run_ms(&u, 300);
    ck_assert_uint_gt(u.gone, gone0); /* failing fast, with its status */
    /* transfers submitted while it is gone fail with that status only
     * (those in flight at the moment may end CONN_LOST) */
    ck_assert_uint_gt(u.next_id, u.mark);
    ck_assert_uint_eq(u.late_other, 0);
    u.mark = 0;
    /* Shard 1 comes back elsewhere (another port, a new epoch). */
    uint16_t old_port = d[1].port;
    start_shard(&d[1], &c, 1, "rkill", false);
    ck_assert_uint_ne(d[1].port, old_port);
    ck_assert(mp_run_while(u.base, all_connected, &u, 15000));
    ck_assert(!xfer_rdma_gone(u.rd, 1));
    u.since_ok = 0;
    uint64_t writes0 = rs.writes_ok;
    run_ms(&u, 500);
    ck_assert_uint_gt(u.since_ok, 0);
    pump_stop(&u);
    ck_assert_int_eq(xfer_rdma_stats_get(u.rd, &rs), 0);
    ck_assert_uint_gt(rs.writes_ok, writes0);
    ck_assert_uint_eq(rs.wrs_outstanding, 0);
    ck_assert_uint_eq(u.done, u.submitted);
    ck_assert_uint_eq(u.dup, 0);
    pump_del(&u);
    for (int k = 0; k < NSHARDS; k++) {
        assert_empty(d[k].port);
        mp_kill(&d[k], SIGTERM);
    }
    etcd_stop(&c);
}
END_TEST

START_TEST(test_dir_rdma_needs_rdma_entry)
{
    ck_assert_int_eq(xfer_fabric_reset(), 0);
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    mp_proc d[NSHARDS];
    start_shard(&d[0], &c, 0, "rtcp", false);
    start_shard(&d[1], &c, 1, "rtcp", true); /* transports 1: TCP only */
    pump u;
    pump_new(&u, c.endpoints, "rtcp");
    ck_assert(mp_run_while(u.base, shard0_connected, &u, 15000));
    /* The directory has read both entries (shard 1's too, registered
     * before the producer started) by the time shard 0 is up; a second
     * more for a late registration. */
    run_ms(&u, 1000);
    ck_assert(xfer_rdma_gone(u.rd, 1));
    ck_assert(!xfer_rdma_connected(u.rd, 1));
    xfer_dir_entry e;
    ck_assert_int_eq(xfer_dir_member(u.dir, "rtcp", 1, &e), 0);
    ck_assert_uint_eq(e.transports, XFER_DIR_TCP);
    pump_start(&u);
    run_ms(&u, 300);
    pump_stop(&u);
    ck_assert_uint_gt(u.failed, 0);
    ck_assert_uint_eq(u.gone, u.failed);
    ck_assert_uint_eq(u.ok, 0);
    ck_assert_uint_eq(u.done, u.submitted);
    pump_del(&u);
    for (int k = 0; k < NSHARDS; k++) {
        assert_empty(d[k].port);
        mp_kill(&d[k], SIGTERM);
    }
    etcd_stop(&c);
}
END_TEST

int main(void)
{
    if (!etcd_binary()) {
        const char *ci = getenv("CI");
        fprintf(stderr, "test_dir_rdma: no etcd binary (etcd-server)%s\n",
                ci && *ci ? ": required in CI" : ", skipped");
        return ci && *ci ? 1 : 77;
    }
    Suite *s = suite_create("dir_rdma");
    TCase *tc = tcase_create("dir_rdma");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_dir_rdma_kill_shard);
    tcase_add_test(tc, test_dir_rdma_needs_rdma_entry);
    suite_add_tcase(s, tc);
    int rc = tu_run(s);
    mp_kill_all();
    return rc;
}
