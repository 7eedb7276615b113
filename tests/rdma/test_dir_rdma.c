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

#include "dirpump.h"
#include "etcd.h"
#include "mp.h"
#include "testutil.h"
#include "xfer/dir.h"
#include "xfer/rdma.h"
#include "xfer/xfer.h"
#include "xfer_fabric.h"

#define NSHARDS 2
#define SLICE 8192

/* The directory tests' producer (dirpump.h) with an RDMA transport
 * created from the group name. */
typedef struct pump {
    dir_pump d;
    xfer_rdma *rd;
} pump;

static void pump_new(pump *u, const char *eps, const char *group)
{
    dir_pump_new(&u->d, eps, NSHARDS, SLICE);
    xfer_rdma_config rc;
    xfer_rdma_config_default(&rc);
    rc.tcp.nshards = NSHARDS;
    rc.tcp.dir = u->d.dir;    /* instead of rc.tcp.addrs */
    rc.tcp.dir_group = group;
    rc.tcp.reconnect_min_ns = 2000000ull;
    rc.tcp.reconnect_max_ns = 200000000ull;
    ck_assert_int_eq(xfer_rdma_new(u->d.base, &rc, &u->rd), 0);
    dir_pump_attach(&u->d, xfer_rdma_transport(u->rd));
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

static void pump_del(pump *u)
{
    dir_pump_shutdown(&u->d);
    xfer_rdma_del(u->rd);
    dir_pump_free(&u->d);
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
    ck_assert(mp_run_while(u.d.base, all_connected, &u, 15000));
    dir_pump_start(&u.d);
    dir_pump_run_ms(&u.d, 500);
    ck_assert_uint_gt(u.d.ok, 0);
    xfer_rdma_stats rs;
    ck_assert_int_eq(xfer_rdma_stats_get(u.rd, &rs), 0);
    ck_assert_uint_gt(rs.writes_ok, 0); /* the data went by RDMA */
    uint64_t t0 = mp_now_ms();
    mp_kill(&d[1], SIGKILL);
    ck_assert(mp_run_while(u.d.base, shard1_gone, &u, 10000));
    uint64_t took = mp_now_ms() - t0;
    fprintf(stderr, "shard 1 gone %llu ms after kill -9 (lease TTL 2000)\n",
            (unsigned long long)took);
    ck_assert_uint_le(took, 3000); /* the bound: TTL + 1 s */
    ck_assert(!xfer_rdma_connected(u.rd, 1));
    uint64_t gone0 = u.d.gone;
    u.d.mark = u.d.next_id + 1;
    dir_pump_run_ms(&u.d, 300);
    ck_assert_uint_gt(u.d.gone, gone0); /* failing fast, with its status */
    /* transfers submitted while it is gone fail with that status only
     * (those in flight at the moment may end CONN_LOST) */
    ck_assert_uint_gt(u.d.next_id, u.d.mark);
    ck_assert_uint_eq(u.d.late_other, 0);
    u.d.mark = 0;
    /* Shard 1 comes back elsewhere (another port, a new epoch). */
    uint16_t old_port = d[1].port;
    start_shard(&d[1], &c, 1, "rkill", false);
    ck_assert_uint_ne(d[1].port, old_port);
    ck_assert(mp_run_while(u.d.base, all_connected, &u, 15000));
    ck_assert(!xfer_rdma_gone(u.rd, 1));
    u.d.since_ok = 0;
    uint64_t writes0 = rs.writes_ok;
    dir_pump_run_ms(&u.d, 500);
    ck_assert_uint_gt(u.d.since_ok, 0);
    dir_pump_stop(&u.d);
    ck_assert_int_eq(xfer_rdma_stats_get(u.rd, &rs), 0);
    ck_assert_uint_gt(rs.writes_ok, writes0);
    ck_assert_uint_eq(rs.wrs_outstanding, 0);
    ck_assert_uint_eq(u.d.done, u.d.submitted);
    ck_assert_uint_eq(u.d.dup, 0);
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
    ck_assert(mp_run_while(u.d.base, shard0_connected, &u, 15000));
    /* The directory has read both entries (shard 1's too, registered
     * before the producer started) by the time shard 0 is up; a second
     * more for a late registration. */
    dir_pump_run_ms(&u.d, 1000);
    ck_assert(xfer_rdma_gone(u.rd, 1));
    ck_assert(!xfer_rdma_connected(u.rd, 1));
    xfer_dir_entry e;
    ck_assert_int_eq(xfer_dir_member(u.d.dir, "rtcp", 1, &e), 0);
    ck_assert_uint_eq(e.transports, XFER_DIR_TCP);
    dir_pump_start(&u.d);
    dir_pump_run_ms(&u.d, 300);
    dir_pump_stop(&u.d);
    ck_assert_uint_gt(u.d.failed, 0);
    ck_assert_uint_eq(u.d.gone, u.d.failed);
    ck_assert_uint_eq(u.d.ok, 0);
    ck_assert_uint_eq(u.d.done, u.d.submitted);
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
    int skip = etcd_required("test_dir_rdma");
    if (skip)
        return skip;
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
