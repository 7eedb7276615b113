/*
 * tests/api/test_producer_api.c - the producer (an engine and its TCP
 * transport) used the way a scheduler that is not ours uses it (issue 23
 * item 11): calls made before its connections are up, to a shard that is
 * not there yet, during a shard's restart, and after shutdown.  Real xferd
 * processes on loopback (mp.h), each a sink (--consume), so every shard
 * must end empty.
 *
 * test_producer_api_submit_before_links_up: a submit made right after
 * xfer_tcp_new, before any HELLO was answered, waits for the connections
 * and succeeds;
 * test_producer_api_shard_not_there_yet: a submit to a port where no
 * shard listens fails at once with CONN_LOST naming that shard (it never
 * hangs), and once a shard listens there the transport finds it and the
 * next submit succeeds;
 * test_producer_api_shard_restart: transfers in flight while one shard is
 * killed (-9) and restarted on its port: each completes exactly once, the
 * ones after the restart succeed, and every shard ends empty;
 * test_producer_api_after_shutdown: after shutdown completed, submit,
 * post_submit's loop refusal, cancel and post_cancel_cb answer as the
 * header says (SHUTDOWN, never a callback for a refused call), and the
 * transport deleted after the engine leaves nothing running;
 * test_producer_api_caller_crc: a producer that has its slices' CRC32Cs
 * (xfer_engine_submit_crc, issue 27): a wrong one for shard 1 fails the
 * transfer CORRUPT naming shard 1 at real xferd and every shard ends
 * empty; the right ones succeed, every CRC the transport sent being the
 * caller's (none read from staging).
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "mp.h"
#include "testutil.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

#define S 2
#define MAXDONE 64

static mp_proc d[S];
static uint16_t ports[S];

typedef struct done_log {
    int n;
    xfer_result r[MAXDONE];
} done_log;

static void on_done(void *ud, const xfer_result *r)
{
    done_log *l = ud;
    if (l->n < MAXDONE)
        l->r[l->n] = *r;
    l->n++;
}

static bool reached(void *ud)
{
    const int *want = ((const int **)ud)[0];
    const done_log *l = ((done_log **)ud)[1];
    return l->n >= *want;
}

static bool run_until_done(mp_producer *p, done_log *l, int want, int ms)
{
    const void *arg[2] = {&want, l};
    return mp_run_while(p->base, reached, (void *)arg, ms);
}

static void start_shard(int k, uint16_t port)
{
    char shard[12];
    snprintf(shard, sizeof shard, "%d", k);
    const char *args[] = {"--shards", shard, "--pool", "4M", "--consume",
                          "--quiet", "--lease-ttl", "2s", NULL};
    ck_assert_int_eq(mp_xferd(&d[k], port, args), 0);
    ports[k] = d[k].port;
}

static void teardown(void)
{
    mp_kill_all();
}

static int submit(mp_producer *p, uint64_t id, done_log *l)
{
    xfer_slice sl[S];
    for (int k = 0; k < S; k++)
        sl[k] = (xfer_slice){.off = (uint64_t)k * 4096, .len = 4096};
    xfer_transfer_desc desc = {.id = id, .group = p->group, .pool = p->pool,
                               .nslices = S, .slices = sl};
    return xfer_engine_submit(p->e, &desc, on_done, l);
}

static void check_shards_empty(void)
{
    for (int k = 0; k < S; k++) {
        xfer_wire_status st;
        ck_assert_int_eq(mp_wait_pool_free(ports[k], 10000, &st), 0);
        ck_assert_uint_eq(st.live, 0);
    }
}

START_TEST(test_producer_api_caller_crc)
{
    for (int k = 0; k < S; k++)
        start_shard(k, 0);
    static mp_producer p;
    static done_log l;
    ck_assert_int_eq(mp_producer_new(&p, ports, S, 2 * 4096,
                                     10000000000ull), 0);
    for (size_t i = 0; i < 2 * 4096; i++)
        p.staging[i] = (uint8_t)(i * 13 + 5);
    xfer_slice sl[S];
    uint32_t crcs[S];
    for (int k = 0; k < S; k++) {
        sl[k] = (xfer_slice){.off = (uint64_t)k * 4096, .len = 4096};
        crcs[k] = tu_crc32c(p.staging + sl[k].off, 4096);
    }
    xfer_transfer_desc desc = {.id = 1, .group = p.group, .pool = p.pool,
                               .nslices = S, .slices = sl};
    crcs[1] ^= 0x2;
    ck_assert_int_eq(xfer_engine_submit_crc(p.e, &desc, crcs, on_done, &l),
                     0);
    ck_assert(run_until_done(&p, &l, 1, 10000));
    ck_assert_int_eq(l.r[0].status, XFER_ERR_CORRUPT);
    ck_assert_uint_eq(l.r[0].first_failed_shard, 1);
    check_shards_empty();
    crcs[1] ^= 0x2;
    desc.id = 2;
    ck_assert_int_eq(xfer_engine_submit_crc(p.e, &desc, crcs, on_done, &l),
                     0);
    ck_assert(run_until_done(&p, &l, 2, 10000));
    ck_assert_int_eq(l.r[1].status, 0);
    xfer_tcp_stats ts;
    ck_assert_int_eq(xfer_tcp_stats_get(p.tcp, &ts), 0);
    ck_assert_uint_eq(ts.crcs_given, 2 * S);
    ck_assert_uint_eq(ts.crcs_sent, ts.crcs_given); /* none computed */
    ck_assert(mp_producer_del(&p, 10000));
    check_shards_empty();
}
END_TEST

START_TEST(test_producer_api_submit_before_links_up)
{
    for (int k = 0; k < S; k++)
        start_shard(k, 0);
    static mp_producer p;
    static done_log l;
    ck_assert_int_eq(mp_producer_new(&p, ports, S, 2 * 4096,
                                     10000000000ull), 0);
    ck_assert(!xfer_tcp_connected(p.tcp, 0)); /* nothing answered yet */
    ck_assert_int_eq(submit(&p, 1, &l), 0);
    ck_assert(run_until_done(&p, &l, 1, 10000));
    ck_assert_int_eq(l.n, 1);
    ck_assert_int_eq(l.r[0].status, 0);
    ck_assert(mp_producer_del(&p, 10000));
    check_shards_empty();
}
END_TEST

START_TEST(test_producer_api_shard_not_there_yet)
{
    start_shard(0, 0);
    /* shard 1's port: bound once to learn a free one, then released */
    start_shard(1, 0);
    uint16_t port1 = ports[1];
    mp_kill(&d[1], SIGKILL);
    static mp_producer p;
    static done_log l;
    ck_assert_int_eq(mp_producer_new(&p, ports, S, 2 * 4096,
                                     10000000000ull), 0);
    ck_assert_int_eq(submit(&p, 1, &l), 0);
    ck_assert(run_until_done(&p, &l, 1, 10000));
    ck_assert_int_eq(l.r[0].status, XFER_ERR_CONN_LOST);
    ck_assert_uint_ne(l.r[0].failed_shards & (1u << 1), 0);
    /* the shard comes; the transport redials it (backoff at most 200 ms
     * in mp's producers) */
    start_shard(1, port1);
    ck_assert(mp_producer_wait_connected(&p, 10000));
    ck_assert_int_eq(submit(&p, 2, &l), 0);
    ck_assert(run_until_done(&p, &l, 2, 10000));
    ck_assert_int_eq(l.r[1].status, 0);
    ck_assert(mp_producer_del(&p, 10000));
    check_shards_empty();
}
END_TEST

/* Shard 1's old connection was lost and a new one is up. */
static bool redialled(void *ud)
{
    mp_producer *p = ud;
    xfer_tcp_stats st;
    xfer_tcp_stats_get(p->tcp, &st);
    return st.losses >= 1 && st.reconnects >= 1 &&
           xfer_tcp_connected(p->tcp, 0) && xfer_tcp_connected(p->tcp, 1);
}

START_TEST(test_producer_api_shard_restart)
{
    for (int k = 0; k < S; k++)
        start_shard(k, 0);
    static mp_producer p;
    static done_log l;
    ck_assert_int_eq(mp_producer_new(&p, ports, S, 16 * 2 * 4096,
                                     10000000000ull), 0);
    ck_assert(mp_producer_wait_connected(&p, 10000));
    /* 16 in flight, then shard 1 dies and comes back on its port */
    for (uint64_t id = 1; id <= 16; id++) {
        xfer_slice sl[S];
        for (int k = 0; k < S; k++)
            sl[k] = (xfer_slice){.off = ((id - 1) * S + (uint64_t)k) * 4096,
                                 .len = 4096};
        xfer_transfer_desc desc = {.id = id, .group = p.group,
                                   .pool = p.pool, .nslices = S,
                                   .slices = sl};
        ck_assert_int_eq(xfer_engine_submit(p.e, &desc, on_done, &l), 0);
    }
    event_base_loop(p.base, EVLOOP_NONBLOCK);
    uint16_t port1 = ports[1];
    mp_kill(&d[1], SIGKILL);
    start_shard(1, port1);
    ck_assert(run_until_done(&p, &l, 16, 30000));
    ck_assert_int_eq(l.n, 16);
    bool seen[17] = {false};
    for (int i = 0; i < 16; i++) {
        ck_assert_uint_ge(l.r[i].id, 1);
        ck_assert_uint_le(l.r[i].id, 16);
        ck_assert(!seen[l.r[i].id]); /* exactly once */
        seen[l.r[i].id] = true;
        /* a failure names shard 1 or is a rollback's abort */
        if (l.r[i].status != 0)
            ck_assert_uint_ne(l.r[i].failed_shards, 0);
    }
    /* after the restart, transfers succeed: once the producer noticed the
     * old connection's end and dialled the new shard (the 16 may all have
     * ended before it read the old one's end, and its connection then
     * still counts as up) */
    ck_assert(mp_run_while(p.base, redialled, &p, 10000));
    for (uint64_t id = 101; id <= 104; id++)
        ck_assert_int_eq(submit(&p, id, &l), 0);
    ck_assert(run_until_done(&p, &l, 20, 10000));
    for (int i = 16; i < 20; i++)
        ck_assert_int_eq(l.r[i].status, 0);
    ck_assert(mp_producer_del(&p, 10000));
    check_shards_empty();
}
END_TEST

static void on_shut(void *ud)
{
    ((mp_producer *)ud)->shut = true;
}

static void on_cancel(void *ud, uint64_t id, int status)
{
    int *got = ud;
    *got = status == 0 ? 1 : 2;
}

START_TEST(test_producer_api_after_shutdown)
{
    for (int k = 0; k < S; k++)
        start_shard(k, 0);
    static mp_producer p;
    static done_log l;
    ck_assert_int_eq(mp_producer_new(&p, ports, S, 2 * 4096,
                                     10000000000ull), 0);
    ck_assert(mp_producer_wait_connected(&p, 10000));
    ck_assert_int_eq(submit(&p, 1, &l), 0);
    ck_assert(run_until_done(&p, &l, 1, 10000));
    ck_assert_int_eq(xfer_engine_shutdown(p.e, on_shut, &p), 0);
    ck_assert(mp_run_until(p.base, &p.shut, 10000));
    /* after shutdown: a submit is refused, its callback never runs */
    ck_assert_int_eq(submit(&p, 2, &l), XFER_ERR_SHUTDOWN);
    /* a posted submit is refused on the loop through its callback */
    xfer_slice sl[S];
    for (int k = 0; k < S; k++)
        sl[k] = (xfer_slice){.off = (uint64_t)k * 4096, .len = 4096};
    xfer_transfer_desc desc = {.id = 3, .group = p.group, .pool = p.pool,
                               .nslices = S, .slices = sl};
    ck_assert_int_eq(xfer_engine_post_submit(p.e, &desc, on_done, &l), 0);
    ck_assert(run_until_done(&p, &l, 2, 10000));
    ck_assert_int_eq(l.r[1].status, XFER_ERR_SHUTDOWN);
    ck_assert_uint_eq(l.r[1].id, 3);
    /* a posted cancel's answer still reaches its caller */
    int got = 0;
    ck_assert_int_eq(xfer_engine_post_cancel_cb(p.e, 9, on_cancel, &got), 0);
    for (int i = 0; i < 200 && !got; i++)
        event_base_loop(p.base, EVLOOP_NONBLOCK);
    ck_assert_int_ne(got, 0);
    ck_assert_int_eq(l.n, 2); /* nothing else completed */
    /* a second shutdown is refused, not run twice */
    ck_assert_int_ne(xfer_engine_shutdown(p.e, on_shut, &p), 0);
    /* engine first, then the transport (both orders work: test_teardown) */
    xfer_engine_del(p.e);
    xfer_tcp_del(p.tcp);
    event_base_loop(p.base, EVLOOP_NONBLOCK);
    event_base_free(p.base);
    free(p.staging);
    check_shards_empty();
}
END_TEST

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("producer_api");
    TCase *tc = tcase_create("producer");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_producer_api_submit_before_links_up);
    tcase_add_test(tc, test_producer_api_shard_not_there_yet);
    tcase_add_test(tc, test_producer_api_shard_restart);
    tcase_add_test(tc, test_producer_api_after_shutdown);
    tcase_add_test(tc, test_producer_api_caller_crc);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
