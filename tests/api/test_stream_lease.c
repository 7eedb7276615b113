/*
 * tests/api/test_stream_lease.c - the lease refresh of open streams
 * (issue 26, docs/streaming.md) over the loop transport, as a program
 * uses it: a stream opened before its output exists, its first part
 * added several shard leases later.
 *
 * Asserted: with refreshes the late stream succeeds and every byte of
 * every shard is the producer's; the engine counted refreshes granted and
 * none refused.  A shard's hold cap (max_hold_ms) below the wait: the
 * refresh is refused (BOUNDS) and the stream fails EXPIRED.  The
 * transfer's deadline below the wait: it fails TIMEOUT.  A transport
 * without refreshes (an ops table of version 2: an older shard) gets
 * none sent, and the stream fails EXPIRED as it did before.  Nothing
 * asserts how long anything took; the loop runs on the real clock only
 * to let leases pass.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "xfer/loop.h"
#include "xfer/stream.h"
#include "xfer/transport.h"
#include "xfer/xfer.h"

#define S 2
#define LEN 4096
#define MS 1000000ull
#define LEASE_MS 40

typedef struct rig {
    struct event_base *base;
    xfer_loop *loop;
    xfer_engine *e;
    uint32_t group, pool;
    uint8_t mem[S * LEN];
    unsigned completions;
    xfer_result res;
    uint64_t resv[S];
    unsigned ready;
    xfer_transport_ops old_ops; /* a version 2 table (no refresh) */
} rig;

static uint8_t pattern(unsigned k, uint32_t i)
{
    return (uint8_t)(k * 61u + i * 13u + (i >> 8));
}

static void on_event(void *ud, const xfer_shard_event *ev)
{
    rig *r = ud;
    if (ev->kind == XFER_SHARD_EV_READY && ev->shard < S) {
        r->resv[ev->shard] = ev->resv_id;
        r->ready++;
    }
}

static void on_done(void *ud, const xfer_result *res)
{
    rig *r = ud;
    r->completions++;
    r->res = *res;
}

/* hold_ms: the shards' hold cap (0: the default, six leases).  old: the
 * group's transport through an ops table of version 2. */
static void rig_init(rig *r, uint32_t hold_ms, bool old)
{
    memset(r, 0, sizeof *r);
    r->base = event_base_new();
    ck_assert_ptr_nonnull(r->base);
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = r->base;
    ck_assert_int_eq(xfer_engine_new(&ec, &r->e), 0);
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = S;
    lc.shard.pool_bytes = 1 << 20;
    lc.shard.lease_ttl_ns = LEASE_MS * MS;
    lc.shard.max_hold_ms = hold_ms;
    /* an ended reservation's tombstone outlives the wait, so a write
     * after the lease ended is told EXPIRED (not NOT_FOUND) */
    lc.shard.tombstone_ttl_ns = 100 * LEASE_MS * MS;
    lc.on_event = on_event;
    lc.on_event_ud = r;
    ck_assert_int_eq(xfer_loop_new(r->base, &lc, &r->loop), 0);
    xfer_transport tp = xfer_loop_transport(r->loop);
    if (old) {
        r->old_ops = *tp.ops;
        r->old_ops.version = 2;
        r->old_ops.refresh = NULL;
        tp.ops = &r->old_ops;
    }
    ck_assert_int_eq(xfer_engine_add_group(r->e, tp, &r->group), 0);
    ck_assert_int_eq(
        xfer_engine_register_pool(r->e, r->mem, sizeof r->mem, &r->pool), 0);
    for (unsigned k = 0; k < S; k++)
        for (uint32_t i = 0; i < LEN; i++)
            r->mem[k * LEN + i] = pattern(k, i);
}

/* Run the loop for ms milliseconds of the real clock. */
static void run_for(rig *r, unsigned ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = ms % 1000 * 1000};
    event_base_loopexit(r->base, &tv);
    event_base_dispatch(r->base);
}

static void on_shut(void *ud)
{
    (void)ud;
}

static void rig_end(rig *r)
{
    int rc = xfer_engine_shutdown(r->e, on_shut, r);
    ck_assert(rc == 0 || rc == XFER_ERR_STATE);
    run_for(r, 50);
    xfer_engine_del(r->e);
    xfer_loop_del(r->loop);
    event_base_free(r->base);
}

/* Open a stream of id, wait `late_ms`, then add its one part (every byte
 * of both shards, as two runs per shard, back half first) and seal; run
 * until it completed.  timeout_ms: the transfer's deadline (0: none). */
static void late_stream(rig *r, uint64_t id, unsigned late_ms,
                        unsigned timeout_ms)
{
    uint32_t lens[S] = {LEN, LEN};
    xfer_stream_desc d = {.id = id, .group = r->group, .nshards = S,
                          .lens = lens, .timeout_ns = timeout_ms * MS};
    ck_assert_int_eq(xfer_engine_stream_open(r->e, &d, on_done, r), 0);
    run_for(r, late_ms);
    xfer_range rg[2 * S];
    for (unsigned k = 0; k < S; k++)
        for (unsigned h = 0; h < 2; h++)
            rg[2 * k + h] = (xfer_range){
                .staging_off = k * LEN + (1 - h) * (LEN / 2),
                .pool = r->pool, .len = LEN / 2,
                .resv_off = (1 - h) * (LEN / 2), .shard = (uint16_t)k};
    xfer_part_desc pd = {.id = id, .ranges = rg, .nranges = 2 * S};
    int rc = xfer_engine_stream_part(r->e, &pd, NULL);
    if (rc == 0)
        xfer_engine_stream_seal(r->e, id);
    for (int i = 0; i < 400 && r->completions == 0; i++)
        run_for(r, 5);
    ck_assert_uint_eq(r->completions, 1);
}

static xfer_engine_stats stats_of(const rig *r)
{
    xfer_engine_stats st;
    ck_assert_int_eq(xfer_engine_stats_get(r->e, &st), 0);
    return st;
}

START_TEST(test_stream_lease_late_first_part_succeeds)
{
    rig r;
    rig_init(&r, 0, false);
    late_stream(&r, 5, 4 * LEASE_MS, 0); /* four leases late */
    ck_assert_int_eq(r.res.status, 0);
    ck_assert_uint_eq(r.ready, S);
    for (unsigned k = 0; k < S; k++) {
        xfer_shard *sh = xfer_loop_shard(r.loop, (uint16_t)k);
        const uint8_t *data = NULL;
        uint32_t len = 0;
        ck_assert_int_eq(xfer_shard_take(sh, xfer_clock_monotonic(NULL), 5,
                                         r.resv[k], &data, &len),
                         0);
        ck_assert_uint_eq(len, LEN);
        for (uint32_t i = 0; i < len; i++)
            if (data[i] != pattern(k, i))
                ck_abort_msg("shard %u byte %u: %u, want %u", k, i, data[i],
                             pattern(k, i));
        xfer_shard_stats sst;
        xfer_shard_stats_get(sh, &sst);
        ck_assert_uint_eq(sst.expiries, 0);
        ck_assert_uint_gt(sst.refreshes, 0);
    }
    xfer_engine_stats st = stats_of(&r);
    ck_assert_uint_ge(st.refreshes_granted, 2 * S);
    ck_assert_uint_eq(st.refreshes_refused, 0);
    ck_assert_uint_eq(st.refreshes_sent, st.refreshes_granted);
    rig_end(&r);
}
END_TEST

START_TEST(test_stream_lease_refused_at_hold_cap_fails_expired)
{
    rig r;
    rig_init(&r, 2 * LEASE_MS, false); /* held two leases at most */
    late_stream(&r, 6, 5 * LEASE_MS, 0);
    ck_assert_int_eq(r.res.status, XFER_ERR_EXPIRED);
    xfer_engine_stats st = stats_of(&r);
    ck_assert_uint_ge(st.refreshes_refused, 1);
    ck_assert_uint_gt(st.refreshes_granted, 0);
    rig_end(&r);
}
END_TEST

START_TEST(test_stream_lease_deadline_bounds_the_stream)
{
    rig r;
    rig_init(&r, 0, false);
    late_stream(&r, 7, 5 * LEASE_MS, 3 * LEASE_MS);
    ck_assert_int_eq(r.res.status, XFER_ERR_TIMEOUT);
    rig_end(&r);
}
END_TEST

START_TEST(test_stream_lease_old_transport_gets_none)
{
    rig r;
    rig_init(&r, 0, true);
    late_stream(&r, 8, 4 * LEASE_MS, 0);
    ck_assert_int_eq(r.res.status, XFER_ERR_EXPIRED);
    xfer_engine_stats st = stats_of(&r);
    ck_assert_uint_eq(st.refreshes_sent, 0);
    rig_end(&r);
}
END_TEST

/* A stream whose shards answer their reserves at different times (shard
 * 1's reserve delayed half a lease): shard 0's first refresh falls due
 * while the transfer is still RESERVING, and is sent then (engine.h's
 * "open and unsealed" is RESERVING or WRITING); the late stream succeeds
 * with no expiry on either shard.  Issue 30's engine.c:1275 mutant
 * refreshed only outside RESERVING, stopped shard 0's refreshes for good,
 * and no test saw it. */
START_TEST(test_stream_lease_refreshed_while_reserving)
{
    rig r;
    rig_init(&r, 0, false);
    xfer_fault_rule rule = {.kind = XFER_FAULT_DELAY, .op = XFER_OP_RESERVE,
                            .shard = 1, .count = 1,
                            .delay_ns = LEASE_MS / 2 * MS};
    ck_assert_int_eq(xfer_loop_add_rule(r.loop, &rule), 0);
    late_stream(&r, 9, 4 * LEASE_MS, 0);
    ck_assert_int_eq(r.res.status, 0);
    for (unsigned k = 0; k < S; k++) {
        xfer_shard_stats sst;
        xfer_shard_stats_get(xfer_loop_shard(r.loop, (uint16_t)k), &sst);
        ck_assert_uint_eq(sst.expiries, 0);
        ck_assert_uint_gt(sst.refreshes, 0);
    }
    ck_assert_uint_eq(stats_of(&r).refreshes_refused, 0);
    rig_end(&r);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("stream_lease");
    TCase *tc = tcase_create("loop");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_stream_lease_late_first_part_succeeds);
    tcase_add_test(tc, test_stream_lease_refused_at_hold_cap_fails_expired);
    tcase_add_test(tc, test_stream_lease_deadline_bounds_the_stream);
    tcase_add_test(tc, test_stream_lease_old_transport_gets_none);
    tcase_add_test(tc, test_stream_lease_refreshed_while_reserving);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
