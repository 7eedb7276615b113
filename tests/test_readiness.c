/*
 * tests/test_readiness.c - the readiness tracker (fsm/readiness.c) driven
 * directly: each rule of the readiness machine (docs/design.md section
 * 2.3, I8) checked on the action stream, plus caps, peer-input rejection, a seeded
 * random walk with an independent I8 bookkeeping, allocation failure,
 * transition coverage and save/load.
 *
 * Times are small integers (ns); every tracker here has a deadline of
 * DEADLINE and a tombstone TTL of TTL unless a test says otherwise.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "save.h"
#include "testutil.h"
#include "xfer/core.h"
#include "xfer/readiness.h"

#define DEADLINE 1000u
#define TTL 5000u
#define MAXA 4096

/* ---------------------------------------------------------------------- */
/* Harness                                                                 */
/* ---------------------------------------------------------------------- */

typedef struct out {
    xfer_ready_action a[MAXA];
    size_t n;
} out;

static out O; /* actions collected since the last reset */

static void collect(xfer_readiness *r)
{
    size_t n;
    const xfer_ready_action *a = xfer_readiness_actions(r, &n);
    ck_assert_uint_le(O.n + n, MAXA);
    memcpy(&O.a[O.n], a, n * sizeof *a);
    O.n += n;
    xfer_readiness_actions_clear(r);
}

static void reset(void)
{
    O.n = 0;
}

static size_t count(unsigned kind, int shard)
{
    size_t c = 0;
    for (size_t i = 0; i < O.n; i++)
        if (O.a[i].kind == kind && (shard < 0 || O.a[i].shard == shard))
            c++;
    return c;
}

static const xfer_ready_action *find(unsigned kind, int shard)
{
    for (size_t i = 0; i < O.n; i++)
        if (O.a[i].kind == kind && (shard < 0 || O.a[i].shard == shard))
            return &O.a[i];
    return NULL;
}

static long index_of(unsigned kind)
{
    for (size_t i = 0; i < O.n; i++)
        if (O.a[i].kind == kind)
            return (long)i;
    return -1;
}

static uint64_t rid(uint64_t id, uint32_t attempt, unsigned k)
{
    return (id << 20) ^ ((uint64_t)attempt << 8) ^ (k + 1u);
}

/* The defaults for a group of nshards. */
static xfer_readiness_config rcfg(uint16_t nshards)
{
    xfer_readiness_config c;
    xfer_readiness_config_default(&c);
    c.nshards = nshards;
    return c;
}

static xfer_readiness *mk_cfg(const xfer_readiness_config *c)
{
    xfer_readiness *r = NULL;
    ck_assert_int_eq(xfer_readiness_new(c, &r), 0);
    ck_assert_ptr_nonnull(r);
    reset();
    return r;
}

static xfer_readiness *mk(uint16_t s)
{
    xfer_readiness_config c = rcfg(s);
    c.max_records = 64;
    c.max_tombstones = 256;
    c.deadline_ns = DEADLINE;
    c.tombstone_ttl_ns = TTL;
    return mk_cfg(&c);
}

static void ready(xfer_readiness *r, uint64_t now, uint64_t id,
                  uint32_t attempt, unsigned k)
{
    ck_assert_int_eq(xfer_readiness_on_ready(r, now, id, attempt,
                                             (uint16_t)k,
                                             rid(id, attempt, k)),
                     0);
    collect(r);
}

static void take(xfer_readiness *r, uint64_t now, uint64_t id, unsigned k,
                 int32_t status)
{
    ck_assert_int_eq(xfer_readiness_on_take_result(r, now, id, (uint16_t)k,
                                                   status),
                     0);
    collect(r);
}

static void all_ready(xfer_readiness *r, uint64_t now, uint64_t id,
                      uint32_t attempt, unsigned s)
{
    for (unsigned k = 0; k < s; k++)
        ready(r, now, id, attempt, k);
}

static void all_take(xfer_readiness *r, uint64_t now, uint64_t id,
                     unsigned s)
{
    for (unsigned k = 0; k < s; k++)
        take(r, now, id, k, 0);
}

static xfer_readiness_stats stats(const xfer_readiness *r)
{
    xfer_readiness_stats st;
    xfer_readiness_stats_get(r, &st);
    return st;
}

/* Every shard got a CANCEL for (id, attempt); returns the mask of shards
 * whose CANCEL carried a reservation id. */
static uint64_t assert_cancel_all(uint64_t id, uint32_t attempt, unsigned s)
{
    uint64_t with_resv = 0;
    for (unsigned k = 0; k < s; k++) {
        size_t c = 0;
        for (size_t i = 0; i < O.n; i++) {
            const xfer_ready_action *a = &O.a[i];
            if (a->kind != XFER_READY_ACT_CANCEL || a->shard != k || a->id != id)
                continue;
            ck_assert_uint_eq(a->attempt, attempt);
            if (a->resv_id != XFER_RESV_NONE) {
                ck_assert_uint_eq(a->resv_id, rid(id, attempt, k));
                with_resv |= UINT64_C(1) << k;
            }
            c++;
        }
        ck_assert_uint_eq(c, 1);
    }
    return with_resv;
}

/* ---------------------------------------------------------------------- */
/* The rules                                                               */
/* ---------------------------------------------------------------------- */

START_TEST(test_readiness_all_ready_gives_one_available)
{
    xfer_readiness *r = mk(4);
    for (unsigned k = 0; k < 3; k++) {
        ready(r, 10, 7, 1, k);
        ck_assert_uint_eq(O.n, 0); /* nothing until every shard is in */
        ck_assert_int_eq(xfer_readiness_state(r, 7), XFER_READY_STATE_WAITING);
    }
    ready(r, 11, 7, 1, 3);
    ck_assert_int_eq(xfer_readiness_state(r, 7), XFER_READY_STATE_TAKING);
    ck_assert_uint_eq(O.n, 4);
    for (unsigned k = 0; k < 4; k++) {
        const xfer_ready_action *a = find(XFER_READY_ACT_TAKE, (int)k);
        ck_assert_ptr_nonnull(a);
        ck_assert_uint_eq(a->id, 7);
        ck_assert_uint_eq(a->attempt, 1);
        ck_assert_uint_eq(a->resv_id, rid(7, 1, k));
    }
    for (unsigned k = 0; k < 4; k++) {
        reset();
        take(r, 12, 7, k, 0);
        ck_assert_uint_eq(count(XFER_READY_ACT_AVAILABLE, -1), k == 3 ? 1 : 0);
    }
    ck_assert_uint_eq(O.n, 1);
    ck_assert_uint_eq(O.a[0].id, 7);
    ck_assert_uint_eq(O.a[0].attempt, 1);
    ck_assert_int_eq(xfer_readiness_state(r, 7), XFER_READY_STATE_AVAILABLE);
    xfer_readiness_stats st = stats(r);
    ck_assert_uint_eq(st.available, 1);
    ck_assert_uint_eq(st.live, 0);
    ck_assert_uint_eq(st.tombstones, 1);
    ck_assert_uint_eq(st.illegal, 0);
    xfer_readiness_del(r);
}
END_TEST

START_TEST(test_readiness_single_shard_takes_at_once)
{
    xfer_readiness *r = mk(1);
    ready(r, 1, 3, 2, 0);
    ck_assert_int_eq(xfer_readiness_state(r, 3), XFER_READY_STATE_TAKING);
    ck_assert_uint_eq(count(XFER_READY_ACT_TAKE, 0), 1);
    reset();
    take(r, 2, 3, 0, 0);
    ck_assert_uint_eq(count(XFER_READY_ACT_AVAILABLE, -1), 1);
    xfer_readiness_del(r);
}
END_TEST

START_TEST(test_readiness_late_ready_after_cancel_dropped)
{
    xfer_readiness *r = mk(4);
    ready(r, 1, 9, 1, 0);
    ready(r, 1, 9, 1, 2);
    reset();
    ck_assert_int_eq(xfer_readiness_cancel(r, 2, 9), 0);
    collect(r);
    ck_assert_uint_eq(assert_cancel_all(9, 1, 4), 0x5);
    const xfer_ready_action *u = find(XFER_READY_ACT_UNAVAILABLE, -1);
    ck_assert_ptr_nonnull(u);
    ck_assert_int_eq(u->reason, XFER_ERR_CANCELLED);
    ck_assert_uint_eq(u->missing, 0xA);
    ck_assert_int_eq(xfer_readiness_state(r, 9), XFER_READY_STATE_UNAVAILABLE);
    /* The late ones: each answered with a CANCEL to that shard only. */
    for (unsigned k = 1; k < 4; k += 2) {
        reset();
        ready(r, 3, 9, 1, k);
        ck_assert_uint_eq(O.n, 1);
        ck_assert_uint_eq(O.a[0].kind, XFER_READY_ACT_CANCEL);
        ck_assert_uint_eq(O.a[0].shard, k);
        ck_assert_uint_eq(O.a[0].attempt, 1);
        ck_assert_uint_eq(O.a[0].resv_id, rid(9, 1, k));
    }
    ck_assert_int_eq(xfer_readiness_state(r, 9), XFER_READY_STATE_UNAVAILABLE);
    xfer_readiness_stats st = stats(r);
    ck_assert_uint_eq(st.late_ready, 2);
    ck_assert_uint_eq(st.available, 0);
    ck_assert_uint_eq(st.live, 0);
    xfer_readiness_del(r);
}
END_TEST

START_TEST(test_readiness_deadline_names_missing_shards)
{
    xfer_readiness *r = mk(4);
    ready(r, 100, 5, 3, 1);
    ready(r, 150, 5, 3, 2);
    ck_assert_uint_eq(xfer_readiness_next_deadline(r), 100 + DEADLINE);
    xfer_readiness_on_timer(r, 100 + DEADLINE - 1);
    collect(r);
    ck_assert_uint_eq(O.n, 0);
    xfer_readiness_on_timer(r, 100 + DEADLINE);
    collect(r);
    ck_assert_uint_eq(assert_cancel_all(5, 3, 4), 0x6);
    const xfer_ready_action *u = find(XFER_READY_ACT_UNAVAILABLE, -1);
    ck_assert_ptr_nonnull(u);
    ck_assert_int_eq(u->reason, XFER_ERR_TIMEOUT);
    ck_assert_uint_eq(u->missing, 0x9);
    ck_assert_uint_eq(u->attempt, 3);
    ck_assert_int_eq(index_of(XFER_READY_ACT_UNAVAILABLE), (long)O.n - 1);
    ck_assert_int_eq(xfer_readiness_state(r, 5), XFER_READY_STATE_UNAVAILABLE);
    ck_assert_uint_eq(xfer_readiness_next_deadline(r),
                      100 + DEADLINE + TTL);
    xfer_readiness_del(r);
}
END_TEST

START_TEST(test_readiness_take_failure_rolls_back)
{
    xfer_readiness *r = mk(4);
    all_ready(r, 1, 4, 1, 4);
    reset();
    take(r, 2, 4, 0, 0);
    take(r, 2, 4, 1, XFER_ERR_EXPIRED);
    take(r, 2, 4, 2, 0);
    ck_assert_uint_eq(O.n, 0); /* shard 3 has not answered yet */
    ck_assert_int_eq(xfer_readiness_state(r, 4), XFER_READY_STATE_TAKING);
    take(r, 3, 4, 3, 0);
    ck_assert_uint_eq(count(XFER_READY_ACT_AVAILABLE, -1), 0);
    ck_assert_uint_eq(count(XFER_READY_ACT_RELEASE, -1), 3);
    for (unsigned k = 0; k < 4; k++) {
        const xfer_ready_action *a = find(XFER_READY_ACT_RELEASE, (int)k);
        if (k == 1) {
            ck_assert_ptr_null(a);
            continue;
        }
        ck_assert_ptr_nonnull(a);
        ck_assert_uint_eq(a->resv_id, rid(4, 1, k));
    }
    ck_assert_uint_eq(assert_cancel_all(4, 1, 4), 0xF);
    const xfer_ready_action *u = find(XFER_READY_ACT_UNAVAILABLE, -1);
    ck_assert_ptr_nonnull(u);
    ck_assert_int_eq(u->reason, XFER_ERR_UNAVAILABLE);
    ck_assert_uint_eq(u->missing, 0);
    ck_assert_int_eq(index_of(XFER_READY_ACT_UNAVAILABLE), (long)O.n - 1);
    ck_assert_int_lt(index_of(XFER_READY_ACT_RELEASE), index_of(XFER_READY_ACT_CANCEL));
    ck_assert_uint_eq(stats(r).take_failed, 1);
    ck_assert_uint_eq(stats(r).unavailable, 1);
    ck_assert_int_eq(xfer_readiness_state(r, 4), XFER_READY_STATE_UNAVAILABLE);
    xfer_readiness_del(r);
}
END_TEST

/* A take that failed with a transport error may have been applied (its
 * reply lost): it is released too, since TAKEN memory has no lease. */
START_TEST(test_readiness_unsure_take_failure_released)
{
    xfer_readiness *r = mk(3);
    all_ready(r, 1, 14, 1, 3);
    reset();
    take(r, 2, 14, 0, XFER_ERR_CONN_LOST);
    take(r, 2, 14, 1, XFER_ERR_STALE);
    take(r, 2, 14, 2, XFER_ERR_IO);
    ck_assert_uint_eq(count(XFER_READY_ACT_RELEASE, -1), 2);
    ck_assert_uint_eq(find(XFER_READY_ACT_RELEASE, 0)->resv_id, rid(14, 1, 0));
    ck_assert_uint_eq(find(XFER_READY_ACT_RELEASE, 2)->resv_id, rid(14, 1, 2));
    ck_assert_ptr_null(find(XFER_READY_ACT_RELEASE, 1));
    assert_cancel_all(14, 1, 3);
    ck_assert_int_eq(find(XFER_READY_ACT_UNAVAILABLE, -1)->reason,
                     XFER_ERR_UNAVAILABLE);
    ck_assert_uint_eq(stats(r).take_failed, 3);
    xfer_readiness_del(r);
}
END_TEST

/* _i: 0 the consumer's cancel, 1 a shard ended, 2 the deadline. */
START_TEST(test_readiness_give_up_during_taking_deferred)
{
    static const int32_t reasons[] = {XFER_ERR_CANCELLED, XFER_ERR_EXPIRED,
                                      XFER_ERR_TIMEOUT};
    xfer_readiness *r = mk(3);
    all_ready(r, 10, 8, 2, 3);
    take(r, 11, 8, 0, 0);
    reset();
    if (_i == 0)
        ck_assert_int_eq(xfer_readiness_cancel(r, 12, 8), 0);
    else if (_i == 1)
        ck_assert_int_eq(xfer_readiness_on_shard_ended(r, 12, 8, 2, 1,
                                                       XFER_ERR_EXPIRED),
                         0);
    else
        xfer_readiness_on_timer(r, 10 + DEADLINE);
    collect(r);
    ck_assert_uint_eq(O.n, 0); /* deferred: two takes still out */
    ck_assert_int_eq(xfer_readiness_state(r, 8), XFER_READY_STATE_TAKING);
    take(r, 13, 8, 1, _i == 1 ? XFER_ERR_EXPIRED : 0);
    ck_assert_uint_eq(O.n, 0);
    take(r, 14, 8, 2, 0);
    ck_assert_uint_eq(count(XFER_READY_ACT_AVAILABLE, -1), 0);
    ck_assert_ptr_nonnull(find(XFER_READY_ACT_RELEASE, 0));
    ck_assert_ptr_nonnull(find(XFER_READY_ACT_RELEASE, 2));
    ck_assert_uint_eq(count(XFER_READY_ACT_RELEASE, 1), _i == 1 ? 0 : 1);
    assert_cancel_all(8, 2, 3);
    const xfer_ready_action *u = find(XFER_READY_ACT_UNAVAILABLE, -1);
    ck_assert_ptr_nonnull(u);
    ck_assert_int_eq(u->reason, reasons[_i]);
    ck_assert_int_eq(index_of(XFER_READY_ACT_UNAVAILABLE), (long)O.n - 1);
    ck_assert_int_eq(xfer_readiness_state(r, 8), XFER_READY_STATE_UNAVAILABLE);
    static const unsigned events[] = {XFER_READY_EVENT_CANCEL, XFER_READY_EVENT_SHARD_ENDED,
                                      XFER_READY_EVENT_DEADLINE};
    ck_assert_uint_eq(
        xfer_readiness_cell_hits(r, XFER_READY_STATE_TAKING, events[_i]), 1);
    xfer_readiness_del(r);
}
END_TEST

/* A repeated consumer cancel gives the tombstone a full TTL from the last
 * cancel (xfer-check finding F1), so a ready that comes after the first
 * cancel's TTL but within the last one's is still refused. */
START_TEST(test_readiness_repeated_cancel_extends_tombstone)
{
    xfer_readiness *r = mk(1);
    ck_assert_int_eq(xfer_readiness_cancel(r, 0, 5), 0);
    xfer_readiness_actions_clear(r);
    ck_assert_int_eq(xfer_readiness_cancel(r, TTL / 2, 5), 0);
    xfer_readiness_actions_clear(r);
    xfer_readiness_on_timer(r, TTL);
    ck_assert_int_eq(xfer_readiness_state(r, 5), XFER_READY_STATE_UNAVAILABLE);
    ck_assert_int_eq(xfer_readiness_on_ready(r, TTL + 1, 5, 1, 0, 77), 0);
    ck_assert_int_eq(xfer_readiness_state(r, 5), XFER_READY_STATE_UNAVAILABLE);
    size_t n;
    const xfer_ready_action *a = xfer_readiness_actions(r, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(a[0].kind, XFER_READY_ACT_CANCEL);
    xfer_readiness_actions_clear(r);
    /* after the last cancel's TTL the id is free again */
    ck_assert_int_eq(xfer_readiness_on_ready(r, TTL / 2 + TTL, 6, 1, 0, 78),
                     0);
    ck_assert_int_eq(xfer_readiness_state(r, 5), XFER_READY_STATE_NONE);
    xfer_readiness_del(r);
}
END_TEST

START_TEST(test_readiness_cancel_unknown_then_ready)
{
    xfer_readiness *r = mk(2);
    ck_assert_int_eq(xfer_readiness_cancel(r, 1, 77), 0);
    collect(r);
    /* Pre-emptive: CANCEL (attempt unknown) to every shard, no outcome. */
    ck_assert_uint_eq(assert_cancel_all(77, 0, 2), 0);
    ck_assert_uint_eq(count(XFER_READY_ACT_UNAVAILABLE, -1), 0);
    ck_assert_int_eq(xfer_readiness_state(r, 77), XFER_READY_STATE_UNAVAILABLE);
    ck_assert_int_eq(xfer_readiness_cancel(r, 2, 77), 0); /* idempotent */
    collect(r);
    ck_assert_uint_eq(O.n, 2);
    for (unsigned k = 0; k < 2; k++) {
        reset();
        ready(r, 3, 77, 1, k);
        ck_assert_uint_eq(O.n, 1);
        ck_assert_uint_eq(O.a[0].kind, XFER_READY_ACT_CANCEL);
        ck_assert_uint_eq(O.a[0].shard, k);
        ck_assert_uint_eq(O.a[0].resv_id, rid(77, 1, k));
    }
    xfer_readiness_stats st = stats(r);
    ck_assert_uint_eq(st.live, 0);
    ck_assert_uint_eq(st.available, 0);
    ck_assert_uint_eq(st.preemptive, 1);
    ck_assert_uint_eq(st.late_ready, 2);
    /* A shard's ended event for an unknown id tombstones it too. */
    reset();
    ck_assert_int_eq(xfer_readiness_on_shard_ended(r, 4, 78, 5, 1,
                                                   XFER_ERR_EXPIRED),
                     0);
    collect(r);
    assert_cancel_all(78, 5, 2);
    ck_assert_int_eq(xfer_readiness_state(r, 78), XFER_READY_STATE_UNAVAILABLE);
    xfer_readiness_del(r);
}
END_TEST

START_TEST(test_readiness_other_attempt_not_counted)
{
    xfer_readiness *r = mk(2);
    ready(r, 1, 6, 1, 0);
    reset();
    ready(r, 2, 6, 2, 1); /* another attempt: not ours */
    ck_assert_uint_eq(O.n, 1);
    ck_assert_uint_eq(O.a[0].kind, XFER_READY_ACT_CANCEL);
    ck_assert_uint_eq(O.a[0].shard, 1);
    ck_assert_uint_eq(O.a[0].attempt, 2);
    ck_assert_uint_eq(O.a[0].resv_id, rid(6, 2, 1));
    ck_assert_int_eq(xfer_readiness_state(r, 6), XFER_READY_STATE_WAITING);
    ck_assert_uint_eq(stats(r).late_ready, 1);
    /* A duplicate of our own attempt counts once. */
    reset();
    ready(r, 3, 6, 1, 0);
    ck_assert_uint_eq(O.n, 0);
    ck_assert_uint_eq(stats(r).duplicate_ready, 1);
    ck_assert_int_eq(xfer_readiness_state(r, 6), XFER_READY_STATE_WAITING);
    /* A shard-ended of the other attempt does not end our record. */
    ck_assert_int_eq(xfer_readiness_on_shard_ended(r, 4, 6, 2, 1,
                                                   XFER_ERR_CANCELLED),
                     0);
    collect(r);
    ck_assert_uint_eq(O.n, 0);
    ck_assert_int_eq(xfer_readiness_state(r, 6), XFER_READY_STATE_WAITING);
    ready(r, 5, 6, 1, 1);
    ck_assert_uint_eq(count(XFER_READY_ACT_TAKE, -1), 2);
    ck_assert_uint_eq(find(XFER_READY_ACT_TAKE, 1)->attempt, 1);
    ck_assert_uint_eq(find(XFER_READY_ACT_TAKE, 1)->resv_id, rid(6, 1, 1));
    /* In TAKING, another attempt's ready is cancelled, ours absorbed. */
    reset();
    ready(r, 6, 6, 3, 0);
    ready(r, 6, 6, 1, 0);
    ck_assert_uint_eq(O.n, 1);
    ck_assert_uint_eq(O.a[0].attempt, 3);
    ck_assert_int_eq(xfer_readiness_state(r, 6), XFER_READY_STATE_TAKING);
    xfer_readiness_del(r);
}
END_TEST

START_TEST(test_readiness_available_never_withdrawn)
{
    xfer_readiness *r = mk(2);
    all_ready(r, 1, 12, 1, 2);
    all_take(r, 2, 12, 2);
    ck_assert_uint_eq(count(XFER_READY_ACT_AVAILABLE, -1), 1);
    reset();
    ck_assert_int_eq(xfer_readiness_cancel(r, 3, 12), 0);
    ck_assert_int_eq(xfer_readiness_on_shard_ended(r, 3, 12, 1, 0,
                                                   XFER_ERR_EXPIRED),
                     0);
    ready(r, 4, 12, 1, 1);
    collect(r);
    ck_assert_uint_eq(O.n, 0);
    ck_assert_int_eq(xfer_readiness_state(r, 12), XFER_READY_STATE_AVAILABLE);
    /* Another attempt's ready: cancel that attempt only. */
    ready(r, 5, 12, 2, 0);
    ck_assert_uint_eq(O.n, 1);
    ck_assert_uint_eq(O.a[0].kind, XFER_READY_ACT_CANCEL);
    ck_assert_uint_eq(O.a[0].attempt, 2);
    ck_assert_int_eq(xfer_readiness_on_take_result(r, 6, 12, 0, 0),
                     XFER_ERR_STATE);
    xfer_readiness_on_timer(r, 2 + TTL - 1);
    collect(r);
    ck_assert_uint_eq(O.n, 1);
    ck_assert_int_eq(xfer_readiness_state(r, 12), XFER_READY_STATE_AVAILABLE);
    xfer_readiness_stats st = stats(r);
    ck_assert_uint_eq(st.available, 1);
    ck_assert_uint_eq(st.unavailable, 0);
    xfer_readiness_del(r);
}
END_TEST

START_TEST(test_readiness_caps_busy_and_ttl)
{
    xfer_readiness_config c = rcfg(2);
    c.max_records = 2;
    c.max_tombstones = 3;
    c.deadline_ns = DEADLINE;
    c.tombstone_ttl_ns = TTL;
    xfer_readiness *r = mk_cfg(&c);
    ready(r, 0, 1, 1, 0);
    ready(r, 0, 2, 1, 0);
    /* Record cap. */
    ck_assert_int_eq(xfer_readiness_on_ready(r, 1, 3, 1, 0, 5),
                     XFER_ERR_BUSY);
    ck_assert_int_eq(xfer_readiness_state(r, 3), XFER_READY_STATE_NONE);
    /* Two holds + one pre-emptive tombstone fill the tombstone table. */
    ck_assert_int_eq(xfer_readiness_cancel(r, 1, 10), 0);
    ck_assert_int_eq(xfer_readiness_cancel(r, 2, 11), XFER_ERR_BUSY);
    ck_assert_int_eq(xfer_readiness_state(r, 11), XFER_READY_STATE_NONE);
    /* End record 1: its hold becomes a tombstone; still full. */
    ck_assert_int_eq(xfer_readiness_cancel(r, 3, 1), 0);
    collect(r);
    ck_assert_int_eq(xfer_readiness_on_ready(r, 4, 3, 1, 0, 5),
                     XFER_ERR_BUSY);
    ck_assert_int_eq(xfer_readiness_on_shard_ended(r, 4, 12, 1, 0,
                                                   XFER_ERR_EXPIRED),
                     XFER_ERR_BUSY);
    /* Nothing young was evicted. */
    ck_assert_int_eq(xfer_readiness_state(r, 10), XFER_READY_STATE_UNAVAILABLE);
    ck_assert_int_eq(xfer_readiness_state(r, 1), XFER_READY_STATE_UNAVAILABLE);
    ck_assert_int_eq(xfer_readiness_state(r, 2), XFER_READY_STATE_WAITING);
    ck_assert_uint_eq(stats(r).tombstones, 2);
    /* After the TTL the first tombstone makes room, through the table. */
    ck_assert_int_eq(xfer_readiness_cancel(r, 1 + TTL, 11), 0);
    collect(r);
    ck_assert_int_eq(xfer_readiness_state(r, 10), XFER_READY_STATE_NONE);
    ck_assert_uint_eq(xfer_readiness_cell_hits(r, XFER_READY_STATE_UNAVAILABLE,
                                               XFER_READY_EVENT_TOMB_EXPIRE),
                      1);
    /* on_timer drops the rest; the ids are NONE again. */
    xfer_readiness_on_timer(r, 3 + TTL);
    collect(r);
    ck_assert_int_eq(xfer_readiness_state(r, 1), XFER_READY_STATE_NONE);
    ck_assert_int_eq(xfer_readiness_state(r, 11), XFER_READY_STATE_UNAVAILABLE);
    reset();
    ready(r, 4 + TTL, 1, 2, 0); /* a fresh record, no CANCEL */
    ck_assert_uint_eq(O.n, 0);
    ck_assert_int_eq(xfer_readiness_state(r, 1), XFER_READY_STATE_WAITING);
    xfer_readiness_del(r);
}
END_TEST

START_TEST(test_readiness_peer_input_rejected)
{
    xfer_readiness *r = mk(2);
    /* A take result nobody asked for. */
    ck_assert_int_eq(xfer_readiness_on_take_result(r, 1, 40, 0, 0),
                     XFER_ERR_NOT_FOUND);
    ready(r, 1, 40, 1, 0);
    ck_assert_int_eq(xfer_readiness_on_take_result(r, 1, 40, 0, 0),
                     XFER_ERR_STATE);
    ready(r, 1, 40, 1, 1);
    take(r, 2, 40, 0, 0);
    reset();
    /* The same take answered twice, a shard out of range, bad values. */
    ck_assert_int_eq(xfer_readiness_on_take_result(r, 2, 40, 0, 0),
                     XFER_ERR_STATE);
    ck_assert_int_eq(xfer_readiness_on_take_result(r, 2, 40, 2, 0),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_readiness_on_take_result(r, 2, 40, 1, 5),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_readiness_on_ready(r, 2, 41, 1, 2, 9),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_readiness_on_ready(r, 2, 41, 1, 0,
                                             XFER_RESV_NONE),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_readiness_on_ready(r, 2, 41, 0, 0, 9),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_readiness_on_ready(r, 2, 0, 1, 0, 9),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_readiness_on_shard_ended(r, 2, 40, 1, 0,
                                                   XFER_ERR_IO),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_readiness_on_shard_ended(r, 2, 40, 1, 9,
                                                   XFER_ERR_EXPIRED),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_readiness_cancel(r, 2, 0), XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_readiness_cancel(NULL, 2, 1),
                     XFER_ERR_INVALID_ARG);
    collect(r);
    ck_assert_uint_eq(O.n, 0);
    ck_assert_int_eq(xfer_readiness_state(r, 40), XFER_READY_STATE_TAKING);
    ck_assert_int_eq(xfer_readiness_state(r, 41), XFER_READY_STATE_NONE);
    ck_assert_uint_eq(stats(r).illegal, 0);
    take(r, 3, 40, 1, 0);
    ck_assert_uint_eq(count(XFER_READY_ACT_AVAILABLE, -1), 1);
    xfer_readiness_del(r);
}
END_TEST

START_TEST(test_readiness_undrained_actions_busy)
{
    xfer_readiness *r = mk(2);
    size_t n = 0;
    uint64_t id = 1;
    int rc = 0;
    /* Never drained: the buffer fills up, then inputs are refused. */
    for (; id < 1000; id++) {
        rc = xfer_readiness_cancel(r, 1, id);
        if (rc)
            break;
    }
    ck_assert_int_eq(rc, XFER_ERR_BUSY);
    ck_assert_int_eq(xfer_readiness_state(r, id), XFER_READY_STATE_NONE);
    xfer_readiness_actions(r, &n);
    ck_assert_uint_gt(n, 0);
    xfer_readiness_actions_clear(r);
    ck_assert_int_eq(xfer_readiness_cancel(r, 1, id), 0);
    xfer_readiness_del(r);
}
END_TEST

START_TEST(test_readiness_timer_work_bounded)
{
    xfer_readiness_config c = rcfg(2);
    c.max_records = 100;
    c.deadline_ns = DEADLINE;
    c.tombstone_ttl_ns = TTL;
    xfer_readiness *r = mk_cfg(&c);
    for (uint64_t id = 1; id <= 100; id++)
        ready(r, 0, id, 1, 0);
    unsigned calls = 0;
    size_t last = 0;
    while (xfer_readiness_next_deadline(r) <= DEADLINE) {
        xfer_readiness_on_timer(r, DEADLINE);
        size_t before = O.n;
        collect(r);
        ck_assert_uint_gt(O.n, before); /* progress on every call */
        last = O.n - before;
        ck_assert_uint_le(last, 16 * 5);
        calls++;
    }
    ck_assert_uint_gt(calls, 1);
    ck_assert_uint_eq(count(XFER_READY_ACT_UNAVAILABLE, -1), 100);
    ck_assert_uint_eq(stats(r).live, 0);
    xfer_readiness_del(r);
}
END_TEST

START_TEST(test_readiness_trace_records_steps)
{
    tu_trace tr = {0};
    xfer_readiness_config c = rcfg(2);
    c.deadline_ns = DEADLINE;
    c.tombstone_ttl_ns = TTL;
    c.trace = tu_trace_sink(&tr);
    xfer_readiness *r = mk_cfg(&c);
    ready(r, 5, 21, 4, 1);
    ready(r, 6, 21, 4, 0);
    take(r, 7, 21, 0, XFER_ERR_CANCELLED);
    ck_assert_uint_eq(tu_trace_count(&tr, XFER_MACHINE_READINESS, -1), 3);
    for (size_t i = 0; i < tr.n; i++)
        ck_assert_uint_eq(tr.recs[i].seq, i);
    const xfer_trace_rec *a = &tr.recs[0];
    ck_assert_uint_eq(a->machine, XFER_MACHINE_READINESS);
    ck_assert_uint_eq(a->old_state, XFER_READY_STATE_NONE);
    ck_assert_uint_eq(a->new_state, XFER_READY_STATE_WAITING);
    ck_assert_uint_eq(a->event, XFER_READY_EVENT_READY);
    ck_assert_uint_eq(a->verdict, XFER_VERDICT_TRANSITION);
    ck_assert_uint_eq(a->id, 21);
    ck_assert_uint_eq(a->attempt, 4);
    ck_assert_uint_eq(a->shard, 1);
    ck_assert_uint_eq(a->time_ns, 5);
    ck_assert_uint_eq(a->arg0, rid(21, 4, 1));
    ck_assert_uint_eq(a->arg1, 0x2);
    ck_assert_uint_eq(a->arg2, 0x1);
    ck_assert_uint_eq(tr.recs[1].new_state, XFER_READY_STATE_TAKING);
    ck_assert_uint_eq(tr.recs[2].error, XFER_ERR_CANCELLED);
    ck_assert_uint_eq(tr.recs[2].event, XFER_READY_EVENT_TAKE_FAIL);
    xfer_readiness_del(r);
    tu_trace_free(&tr);
}
END_TEST

START_TEST(test_readiness_invalid_config)
{
    xfer_readiness *r = (xfer_readiness *)&O;
    xfer_readiness_config c = rcfg(0);
    ck_assert_int_eq(xfer_readiness_new(&c, &r), XFER_ERR_INVALID_ARG);
    c.nshards = XFER_MAX_SHARDS + 1;
    ck_assert_int_eq(xfer_readiness_new(&c, &r), XFER_ERR_INVALID_ARG);
    c.nshards = 2;
    c.max_records = (1u << 28) + 1;
    ck_assert_int_eq(xfer_readiness_new(&c, &r), XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_readiness_new(NULL, &r), XFER_ERR_INVALID_ARG);
    ck_assert_ptr_eq(r, (xfer_readiness *)&O);
    c.max_records = 8;
    ck_assert_int_eq(xfer_readiness_new(&c, NULL), XFER_ERR_INVALID_ARG);
    /* 64 shards: the full mask is every bit. */
    c.nshards = XFER_MAX_SHARDS;
    r = mk_cfg(&c);
    all_ready(r, 1, 3, 1, XFER_MAX_SHARDS);
    ck_assert_uint_eq(count(XFER_READY_ACT_TAKE, -1), XFER_MAX_SHARDS);
    reset();
    all_take(r, 2, 3, XFER_MAX_SHARDS);
    ck_assert_uint_eq(count(XFER_READY_ACT_AVAILABLE, -1), 1);
    xfer_readiness_del(r);
    xfer_readiness_del(NULL);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* A newer attempt after a tombstone (xfer-check finding F3)               */
/* ---------------------------------------------------------------------- */

static void ended(xfer_readiness *r, uint64_t now, uint64_t id,
                  uint32_t attempt, unsigned k)
{
    ck_assert_int_eq(xfer_readiness_on_shard_ended(r, now, id, attempt,
                                                   (uint16_t)k,
                                                   XFER_ERR_EXPIRED),
                     0);
    collect(r);
}

/* Attempt 1 of id 9 ends UNAVAILABLE (a lease ran out on shard 1). */
static xfer_readiness *unavailable_attempt_1(void)
{
    xfer_readiness *r = mk(2);
    ready(r, 10, 9, 1, 0);
    ended(r, 11, 9, 1, 1);
    ck_assert_uint_eq(count(XFER_READY_ACT_UNAVAILABLE, -1), 1);
    ck_assert_int_eq(xfer_readiness_state(r, 9),
                     XFER_READY_STATE_UNAVAILABLE);
    reset();
    return r;
}

/* The producer's tombstone may end before the tracker's, and a resubmit
 * is then attempt 2: its data is a new transfer, reported like a first
 * attempt, never cancelled silently. */
START_TEST(test_readiness_newer_attempt_after_unavailable_is_new_transfer)
{
    xfer_readiness *r = unavailable_attempt_1();
    ready(r, 20, 9, 2, 0);
    ck_assert_int_eq(xfer_readiness_state(r, 9), XFER_READY_STATE_WAITING);
    ck_assert_uint_eq(O.n, 0); /* no cancel of attempt 2's data */
    /* attempt 1's late ready is still late */
    ready(r, 21, 9, 1, 1);
    ck_assert_uint_eq(count(XFER_READY_ACT_CANCEL, 1), 1);
    ck_assert_uint_eq(find(XFER_READY_ACT_CANCEL, 1)->attempt, 1);
    ck_assert_uint_eq(stats(r).late_ready, 1);
    reset();
    ready(r, 22, 9, 2, 1);
    ck_assert_uint_eq(count(XFER_READY_ACT_TAKE, -1), 2);
    ck_assert_uint_eq(find(XFER_READY_ACT_TAKE, 1)->attempt, 2);
    reset();
    all_take(r, 23, 9, 2);
    ck_assert_uint_eq(O.n, 1);
    ck_assert_uint_eq(O.a[0].kind, XFER_READY_ACT_AVAILABLE);
    ck_assert_uint_eq(O.a[0].attempt, 2);
    xfer_readiness_stats st = stats(r);
    ck_assert_uint_eq(st.available, 1);
    ck_assert_uint_eq(st.unavailable, 1);
    ck_assert_uint_eq(st.tombstones, 1); /* attempt 2's; attempt 1's left */
    ck_assert_uint_eq(st.illegal, 0);
    /* attempt 2's first ready left the tombstone; attempt 1's met the
     * record of attempt 2 */
    ck_assert_uint_eq(xfer_readiness_cell_hits(r, XFER_READY_STATE_UNAVAILABLE,
                                               XFER_READY_EVENT_READY),
                      1);
    /* the new record's deadline runs from its own first ready */
    xfer_readiness_del(r);
    r = unavailable_attempt_1();
    ready(r, 20, 9, 2, 0);
    ck_assert_uint_eq(xfer_readiness_next_deadline(r), 20 + DEADLINE);
    xfer_readiness_on_timer(r, 20 + DEADLINE);
    collect(r);
    ck_assert_uint_eq(count(XFER_READY_ACT_UNAVAILABLE, -1), 1);
    ck_assert_uint_eq(find(XFER_READY_ACT_UNAVAILABLE, -1)->attempt, 2);
    ck_assert_uint_eq(find(XFER_READY_ACT_UNAVAILABLE, -1)->missing, 2);
    assert_cancel_all(9, 2, 2);
    xfer_readiness_del(r);
}
END_TEST

/* A newer attempt's end before any ready of it: a pre-emptive tombstone
 * of that attempt (its CANCELs name it); then that attempt is late, and a
 * newer one again is new. */
START_TEST(test_readiness_newer_attempt_end_is_preemptive)
{
    xfer_readiness *r = unavailable_attempt_1();
    ended(r, 20, 9, 1, 0); /* attempt 1 again: a refresh, nothing sent */
    ck_assert_uint_eq(O.n, 0);
    ck_assert_uint_eq(stats(r).preemptive, 0);
    ended(r, 21, 9, 2, 0);
    ck_assert_uint_eq(stats(r).preemptive, 1);
    assert_cancel_all(9, 2, 2);
    ck_assert_uint_eq(count(XFER_READY_ACT_UNAVAILABLE, -1), 0);
    reset();
    ready(r, 22, 9, 2, 1);
    ck_assert_uint_eq(count(XFER_READY_ACT_CANCEL, 1), 1);
    ck_assert_uint_eq(stats(r).late_ready, 1);
    ck_assert_int_eq(xfer_readiness_state(r, 9),
                     XFER_READY_STATE_UNAVAILABLE);
    reset();
    ready(r, 23, 9, 3, 1);
    ck_assert_int_eq(xfer_readiness_state(r, 9), XFER_READY_STATE_WAITING);
    ck_assert_uint_eq(O.n, 0);
    /* the refreshed tombstone of attempt 2 was left: one tombstone slot
     * (the new record's hold), none live */
    ck_assert_uint_eq(stats(r).tombstones, 0);
    ck_assert_uint_eq(stats(r).live, 1);
    xfer_readiness_del(r);
}
END_TEST

/* The consumer's own cancel covers every attempt of the id for the
 * tombstone's life: on an unknown id, on a WAITING record, deferred in
 * TAKING, and on an UNAVAILABLE tombstone of an older attempt. */
START_TEST(test_readiness_consumer_cancel_covers_every_attempt)
{
    for (unsigned how = 0; how < 4; how++) {
        xfer_readiness *r = how == 3 ? unavailable_attempt_1() : mk(2);
        if (how == 1)
            ready(r, 10, 9, 1, 0);
        if (how == 2) {
            all_ready(r, 10, 9, 1, 2);
            take(r, 11, 9, 0, 0);
        }
        ck_assert_int_eq(xfer_readiness_cancel(r, 12, 9), 0);
        collect(r);
        if (how == 2)
            take(r, 13, 9, 1, 0);
        ck_assert_int_eq(xfer_readiness_state(r, 9),
                         XFER_READY_STATE_UNAVAILABLE);
        reset();
        ready(r, 14, 9, 2, 0);
        ready(r, 15, 9, 7, 1);
        ck_assert_int_eq(xfer_readiness_state(r, 9),
                         XFER_READY_STATE_UNAVAILABLE);
        ck_assert_uint_eq(count(XFER_READY_ACT_CANCEL, -1), 2);
        ck_assert_uint_eq(count(XFER_READY_ACT_TAKE, -1), 0);
        ck_assert_uint_eq(stats(r).late_ready, 2);
        /* nor does a newer attempt's end leave it */
        reset();
        ended(r, 16, 9, 8, 0);
        ck_assert_uint_eq(stats(r).preemptive, how == 0 ? 1 : 0);
        ck_assert_uint_eq(count(XFER_READY_ACT_CANCEL, -1), 0);
        /* once it expired, the id is new again */
        xfer_readiness_on_timer(r, 16 + TTL);
        collect(r);
        ck_assert_int_eq(xfer_readiness_state(r, 9), XFER_READY_STATE_NONE);
        ready(r, 16 + TTL, 9, 8, 0);
        ck_assert_int_eq(xfer_readiness_state(r, 9),
                         XFER_READY_STATE_WAITING);
        xfer_readiness_del(r);
    }
}
END_TEST

/* Attempts are one counter per producer core that skips 0 when it wraps:
 * newer is serial order, so attempt 1 after 0xffffffff is newer, and an
 * attempt 2^31 or more ahead is not. */
START_TEST(test_readiness_newer_attempt_is_serial_order)
{
    static const struct {
        uint32_t old, next;
        bool newer;
    } c[] = {{UINT32_MAX, 1, true},   {UINT32_MAX - 1, UINT32_MAX, true},
             {5, 4, false},           {5, 5, false},
             {5, 6, true},            {1, UINT32_C(0x80000000), true},
             {1, UINT32_C(0x80000001), false}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        xfer_readiness *r = mk(1);
        ended(r, 10, 4, c[i].old, 0);
        reset();
        ready(r, 11, 4, c[i].next, 0);
        ck_assert_int_eq(xfer_readiness_state(r, 4) == XFER_READY_STATE_TAKING,
                         c[i].newer);
        ck_assert_uint_eq(count(XFER_READY_ACT_CANCEL, 0), !c[i].newer);
        xfer_readiness_del(r);
    }
}
END_TEST

/* A table that is full with the tombstone the newer attempt leaves: its
 * room becomes the new record's (a cap equal to the number of ids never
 * binds); a full table without that room answers BUSY and changes
 * nothing. */
START_TEST(test_readiness_newer_attempt_takes_the_tombstone_room)
{
    xfer_readiness_config c = rcfg(1);
    c.max_records = 1;
    c.max_tombstones = 1;
    c.deadline_ns = DEADLINE;
    c.tombstone_ttl_ns = TTL;
    xfer_readiness *r = mk_cfg(&c);
    ended(r, 10, 4, 1, 0);
    ck_assert_uint_eq(stats(r).tombstones, 1);
    reset();
    ready(r, 11, 4, 2, 0);
    ck_assert_int_eq(xfer_readiness_state(r, 4), XFER_READY_STATE_TAKING);
    take(r, 12, 4, 0, 0);
    ck_assert_uint_eq(count(XFER_READY_ACT_AVAILABLE, -1), 1);
    ck_assert_uint_eq(stats(r).tombstones, 1);
    xfer_readiness_del(r);
    /* two tombstones, one slot each, the older one is not the id's */
    c.max_tombstones = 2;
    r = mk_cfg(&c);
    ended(r, 10, 3, 1, 0);
    ended(r, 11, 4, 1, 0);
    reset();
    ck_assert_int_eq(xfer_readiness_on_ready(r, 12, 4, 2, 0, rid(4, 2, 0)),
                     XFER_ERR_BUSY);
    ck_assert_int_eq(xfer_readiness_state(r, 4),
                     XFER_READY_STATE_UNAVAILABLE);
    ck_assert_int_eq(xfer_readiness_on_shard_ended(r, 12, 4, 2, 0,
                                                   XFER_ERR_EXPIRED),
                     XFER_ERR_BUSY);
    collect(r);
    ck_assert_uint_eq(O.n, 0);
    ck_assert_uint_eq(stats(r).tombstones, 2);
    /* id 3's tombstone is the oldest: its newer attempt takes its room */
    ready(r, 12, 3, 2, 0);
    ck_assert_int_eq(xfer_readiness_state(r, 3), XFER_READY_STATE_TAKING);
    xfer_readiness_del(r);
}
END_TEST

/* A TAKING record whose consumer cancel was deferred keeps that across a
 * save and a load: its tombstone still covers every attempt. */
START_TEST(test_readiness_deferred_consumer_cancel_saved)
{
    xfer_readiness *a = mk(2), *b = mk(2);
    all_ready(a, 10, 9, 1, 2);
    ck_assert_int_eq(xfer_readiness_cancel(a, 11, 9), 0);
    xfer_readiness_actions_clear(a);
    uint8_t buf[4096];
    size_t n = 0;
    ck_assert_int_eq(xfer_readiness_save(a, buf, sizeof buf, &n), 0);
    ck_assert_int_eq(xfer_readiness_load(b, buf, n), 0);
    xfer_readiness *m[2] = {a, b};
    for (unsigned i = 0; i < 2; i++) {
        reset();
        all_take(m[i], 12, 9, 2);
        ck_assert_uint_eq(count(XFER_READY_ACT_UNAVAILABLE, -1), 1);
        reset();
        ready(m[i], 13, 9, 2, 0);
        ck_assert_uint_eq(count(XFER_READY_ACT_CANCEL, 0), 1);
        ck_assert_int_eq(xfer_readiness_state(m[i], 9),
                         XFER_READY_STATE_UNAVAILABLE);
    }
    /* a saved flag without a deferred give-up is no state the handlers
     * make: the load refuses it */
    xfer_readiness *c = mk(2);
    all_ready(c, 10, 9, 1, 2);
    xfer_readiness_actions_clear(c);
    size_t nc = 0;
    ck_assert_int_eq(xfer_readiness_save(c, buf, sizeof buf, &nc), 0);
    ck_assert_int_eq(xfer_readiness_load(b, buf, nc), 0);
    /* the record's fixed part: magic 4, nshards 2, 3 x u32, 2 x u64,
     * 3 x u32 counts = 46 bytes; then id 8, attempt 4, state 1, flag */
    size_t flag = 46 + 8 + 4 + 1;
    ck_assert_uint_eq(buf[flag], 0);
    buf[flag] = 1;
    ck_assert_int_eq(xfer_readiness_load(b, buf, nc), XFER_ERR_FORMAT);
    xfer_readiness_del(a);
    xfer_readiness_del(b);
    xfer_readiness_del(c);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Random walk with independent I8 bookkeeping                             */
/* ---------------------------------------------------------------------- */

#define RS 4
#define RIDS 24

typedef struct model {
    uint8_t ready[3];      /* readies fed per attempt 1..2 (bit per shard) */
    uint8_t took;          /* TAKE_OK fed since the TAKE actions */
    uint8_t taking;        /* TAKE actions seen, attempt */
    uint8_t outcome;       /* 0, 1 AVAILABLE, 2 UNAVAILABLE */
    uint8_t cancelled;     /* the consumer cancelled in this lifetime */
    uint8_t avail_attempt;
    uint8_t pending;       /* takes outstanding (bit per shard) */
    uint8_t tomb_attempt;  /* UNAVAILABLE: the attempt it ended (0: all) */
} model;

typedef struct walk {
    xfer_readiness *r;
    model m[RIDS + 1];
    uint64_t now;
} walk;

static void check_action(walk *w, const xfer_ready_action *a)
{
    ck_assert_uint_ge(a->id, 1);
    ck_assert_uint_le(a->id, RIDS);
    model *m = &w->m[a->id];
    unsigned full = (1u << RS) - 1u;
    switch ((xfer_ready_action_kind)a->kind) {
    case XFER_READY_ACT_TAKE:
        ck_assert_uint_le(a->attempt, 2);
        ck_assert_uint_eq(m->ready[a->attempt], full);
        ck_assert_uint_eq(m->pending & (1u << a->shard), 0);
        m->taking = (uint8_t)a->attempt;
        m->pending |= (uint8_t)(1u << a->shard);
        m->took = 0;
        break;
    case XFER_READY_ACT_AVAILABLE:
        ck_assert_uint_eq(m->outcome, 0);
        ck_assert_uint_eq(m->cancelled, 0);
        ck_assert_uint_eq(m->ready[a->attempt], full);
        ck_assert_uint_eq(m->taking, a->attempt);
        ck_assert_uint_eq(m->took, full);
        ck_assert_uint_eq(m->pending, 0);
        m->outcome = 1;
        m->avail_attempt = (uint8_t)a->attempt;
        break;
    case XFER_READY_ACT_UNAVAILABLE:
        ck_assert_uint_eq(m->outcome, 0);
        ck_assert_uint_eq(m->pending, 0);
        m->outcome = 2;
        m->tomb_attempt = m->cancelled ? 0 : (uint8_t)a->attempt;
        break;
    case XFER_READY_ACT_RELEASE:
    case XFER_READY_ACT_CANCEL:
        ck_assert(!(m->outcome == 1 && a->attempt == m->avail_attempt));
        ck_assert_uint_lt(a->shard, RS);
        break;
    case XFER_READY_ACT_COUNT_:
        ck_abort_msg("bad action kind");
        break;
    }
}

static void drain(walk *w)
{
    size_t n;
    const xfer_ready_action *a = xfer_readiness_actions(w->r, &n);
    for (size_t i = 0; i < n; i++)
        check_action(w, &a[i]);
    xfer_readiness_actions_clear(w->r);
    for (uint64_t id = 1; id <= RIDS; id++) {
        xfer_ready_state s = xfer_readiness_state(w->r, id);
        if (s == XFER_READY_STATE_NONE)
            memset(&w->m[id], 0, sizeof w->m[id]); /* a new lifetime */
        if (s == XFER_READY_STATE_AVAILABLE)
            ck_assert_uint_eq(w->m[id].outcome, 1);
        if (s == XFER_READY_STATE_WAITING || s == XFER_READY_STATE_TAKING)
            ck_assert_uint_eq(w->m[id].outcome, 0);
    }
}

/* Feed the result of one outstanding take, if any. */
static void feed_take(walk *w, uint64_t *rng)
{
    uint64_t start = tu_rand(rng) % RIDS;
    for (uint64_t i = 0; i < RIDS; i++) {
        uint64_t id = 1 + (start + i) % RIDS;
        model *m = &w->m[id];
        if (!m->pending)
            continue;
        unsigned k = (unsigned)__builtin_ctz(m->pending);
        uint64_t roll = tu_rand(rng) % 16;
        bool ok = roll > 1;
        ck_assert_int_eq(xfer_readiness_on_take_result(
                             w->r, w->now, id, (uint16_t)k,
                             ok ? 0
                             : roll ? XFER_ERR_EXPIRED
                                    : XFER_ERR_CONN_LOST),
                         0);
        m->pending &= (uint8_t)~(1u << k);
        if (ok)
            m->took |= (uint8_t)(1u << k);
        return;
    }
}

/* F3: may an event of `attempt` leave the id's UNAVAILABLE tombstone and
 * start a new lifetime?  Only when it is newer than the attempt the
 * tombstone ended and the consumer did not cancel the id. */
static bool may_take_over(const model *m, uint32_t attempt)
{
    return !m->cancelled && m->tomb_attempt != 0 &&
           attempt > m->tomb_attempt;
}

/* A shard's end of `attempt`: a pre-emptive tombstone of that attempt when
 * the id was unknown, or when it leaves an older attempt's tombstone (F3:
 * counted as pre-emptive exactly then). */
static void feed_ended(walk *w, uint64_t id, uint32_t attempt, uint16_t k)
{
    model *m = &w->m[id];
    xfer_ready_state before = xfer_readiness_state(w->r, id);
    uint64_t pre = stats(w->r).preemptive;
    int rc = xfer_readiness_on_shard_ended(w->r, w->now, id, attempt, k,
                                           XFER_ERR_EXPIRED);
    ck_assert(rc == 0 || rc == XFER_ERR_BUSY);
    if (rc != 0 || before != XFER_READY_STATE_UNAVAILABLE) {
        if (rc == 0 && before == XFER_READY_STATE_NONE)
            m->tomb_attempt = (uint8_t)attempt;
        return;
    }
    bool over = stats(w->r).preemptive != pre;
    ck_assert_int_eq(over, may_take_over(m, attempt));
    if (over) {
        memset(m, 0, sizeof *m); /* a new transfer of the id */
        m->tomb_attempt = (uint8_t)attempt;
    }
}

/* A ready: on an UNAVAILABLE tombstone it starts a record exactly when the
 * rule says so (F3), and the model a new lifetime then. */
static void feed_ready(walk *w, uint64_t id, uint32_t attempt, uint16_t k)
{
    model *m = &w->m[id];
    xfer_ready_state before = xfer_readiness_state(w->r, id);
    int rc = xfer_readiness_on_ready(w->r, w->now, id, attempt, k,
                                     rid(id, attempt, k));
    ck_assert(rc == 0 || rc == XFER_ERR_BUSY);
    if (rc != 0)
        return;
    if (before == XFER_READY_STATE_UNAVAILABLE) {
        bool over =
            xfer_readiness_state(w->r, id) != XFER_READY_STATE_UNAVAILABLE;
        ck_assert_int_eq(over, may_take_over(m, attempt));
        if (over)
            memset(m, 0, sizeof *m);
    }
    m->ready[attempt] |= (uint8_t)(1u << k);
}

static void walk_step(walk *w, uint64_t *rng)
{
    uint64_t id = 1 + tu_rand(rng) % RIDS;
    uint32_t attempt = 1 + (uint32_t)(tu_rand(rng) % 8 == 0);
    uint16_t k = (uint16_t)(tu_rand(rng) % RS);
    switch (tu_rand(rng) % 32) {
    case 0:
        if (xfer_readiness_cancel(w->r, w->now, id) == 0)
            w->m[id].cancelled = 1;
        break;
    case 1:
        feed_ended(w, id, attempt, k);
        break;
    case 2:
    case 3:
        w->now += tu_rand(rng) % (DEADLINE / 8);
        xfer_readiness_on_timer(w->r, w->now);
        break;
    case 4:
        /* Bogus peer input: a take nobody waits for is refused. */
        if (!(w->m[id].pending & (1u << k)))
            ck_assert_int_ne(xfer_readiness_on_take_result(w->r, w->now,
                                                           id, k, 0),
                             0);
        break;
    case 5:
    case 6:
    case 7:
    case 8:
    case 9:
    case 10:
        feed_take(w, rng);
        break;
    default:
        feed_ready(w, id, attempt, k);
        break;
    }
    drain(w);
}

START_TEST(test_readiness_random_walk_keeps_i8)
{
    uint64_t rng = tu_seed("test_readiness_random_walk_keeps_i8",
                           0x5eed0001u + (uint64_t)_i);
    walk w;
    memset(&w, 0, sizeof w);
    xfer_readiness_config c = rcfg(RS);
    c.max_records = 12;
    c.max_tombstones = 20;
    c.deadline_ns = DEADLINE;
    c.tombstone_ttl_ns = DEADLINE;
    w.r = mk_cfg(&c);
    for (unsigned i = 0; i < 20000; i++)
        walk_step(&w, &rng);
    /* Drain: answer every take, let deadlines and tombstones run out. */
    for (unsigned i = 0; i < 4 * RIDS * RS; i++) {
        feed_take(&w, &rng);
        drain(&w);
    }
    for (uint64_t d; (d = xfer_readiness_next_deadline(w.r)) != UINT64_MAX;) {
        w.now = d > w.now ? d : w.now;
        xfer_readiness_on_timer(w.r, w.now);
        drain(&w);
    }
    xfer_readiness_stats st = stats(w.r);
    printf("random walk: %" PRIu64 " available, %" PRIu64 " unavailable, "
           "%" PRIu64 " late ready, %" PRIu64 " pre-emptive, %" PRIu64
           " take failures\n",
           st.available, st.unavailable, st.late_ready, st.preemptive,
           st.take_failed);
    fflush(stdout);
    ck_assert_uint_eq(st.illegal, 0);
    ck_assert_uint_eq(st.live, 0);
    ck_assert_uint_eq(st.tombstones, 0);
    ck_assert_uint_gt(st.available, 0);
    ck_assert_uint_gt(st.unavailable, 0);
    ck_assert_uint_gt(st.late_ready, 0);
    xfer_readiness_del(w.r);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Allocation failure                                                      */
/* ---------------------------------------------------------------------- */

START_TEST(test_readiness_alloc_failure_each_allocation)
{
    long n;
    for (n = 0; n < 100; n++) {
        tu_alloc ta;
        tu_alloc_init(&ta, n);
        xfer_readiness_config c = rcfg(4);
        c.max_records = 16;
        c.alloc = tu_allocator(&ta);
        xfer_readiness *r = (xfer_readiness *)&O;
        int rc = xfer_readiness_new(&c, &r);
        if (rc == 0) {
            ck_assert_ptr_ne(r, (xfer_readiness *)&O);
            ck_assert_int_eq(ta.failures, 0);
            ck_assert_int_eq(xfer_readiness_on_ready(r, 1, 1, 1, 0, 1), 0);
            xfer_readiness_del(r);
            ck_assert_int_eq(ta.live, 0);
            break;
        }
        ck_assert_int_eq(rc, XFER_ERR_NOMEM);
        ck_assert_ptr_eq(r, (xfer_readiness *)&O);
        ck_assert_int_ge(ta.failures, 1);
        ck_assert_int_eq(ta.live, 0);
    }
    ck_assert_int_ge(n, 8); /* every table was failed once */
    ck_assert_int_lt(n, 100);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Transition coverage                                                     */
/* ---------------------------------------------------------------------- */

/* One scenario that visits every non-ILLEGAL cell of XFER_READY_TABLE. */
static void covering_scenario(xfer_readiness *r)
{
    ready(r, 0, 1, 1, 0);                                /* NONE READY */
    ready(r, 0, 1, 1, 0);                                /* WAITING READY */
    xfer_readiness_cancel(r, 1, 1);                      /* WAITING CANCEL */
    ready(r, 1, 2, 1, 0);
    xfer_readiness_on_shard_ended(r, 1, 2, 1, 1, XFER_ERR_EXPIRED);
    ready(r, 1, 3, 1, 0);
    xfer_readiness_on_timer(r, 1 + DEADLINE);            /* WAITING DEADLINE */
    all_ready(r, 2 + DEADLINE, 4, 1, 2);
    ready(r, 3 + DEADLINE, 4, 1, 1);                     /* TAKING READY */
    xfer_readiness_cancel(r, 3 + DEADLINE, 4);           /* TAKING CANCEL */
    xfer_readiness_on_shard_ended(r, 3 + DEADLINE, 4, 1, 0,
                                  XFER_ERR_CANCELLED);   /* TAKING ENDED */
    xfer_readiness_on_timer(r, 2 + 2 * DEADLINE);        /* TAKING DEADLINE */
    take(r, 3 + 2 * DEADLINE, 4, 0, 0);                  /* TAKE_OK */
    take(r, 3 + 2 * DEADLINE, 4, 1, XFER_ERR_STATE);     /* TAKE_FAIL */
    ready(r, 4 + 2 * DEADLINE, 4, 1, 0);                 /* UNAVAIL READY */
    xfer_readiness_cancel(r, 4 + 2 * DEADLINE, 4);       /* UNAVAIL CANCEL */
    xfer_readiness_on_shard_ended(r, 4 + 2 * DEADLINE, 4, 1, 0,
                                  XFER_ERR_EXPIRED);     /* UNAVAIL ENDED */
    all_ready(r, 5 + 2 * DEADLINE, 5, 1, 2);
    all_take(r, 5 + 2 * DEADLINE, 5, 2);
    ready(r, 6 + 2 * DEADLINE, 5, 1, 0);                 /* AVAIL READY */
    xfer_readiness_cancel(r, 6 + 2 * DEADLINE, 5);       /* AVAIL CANCEL */
    xfer_readiness_on_shard_ended(r, 6 + 2 * DEADLINE, 5, 1, 1,
                                  XFER_ERR_EXPIRED);     /* AVAIL ENDED */
    xfer_readiness_cancel(r, 7 + 2 * DEADLINE, 6);       /* NONE CANCEL */
    xfer_readiness_on_shard_ended(r, 7 + 2 * DEADLINE, 7, 1, 0,
                                  XFER_ERR_EXPIRED);     /* NONE ENDED */
    xfer_readiness_on_timer(r, 10 * DEADLINE + 2 * TTL); /* TOMB_EXPIRE */
    collect(r);
}

START_TEST(test_readiness_transition_coverage)
{
    xfer_readiness *r = mk(2);
    covering_scenario(r);
    xfer_readiness_stats st = stats(r);
    unsigned missing = 0;
    for (unsigned s = 0; s < XFER_READY_STATE_COUNT_; s++) {
        for (unsigned e = 0; e < XFER_READY_EVENT_COUNT_; e++) {
            unsigned v = xfer_fsm_verdict(XFER_MACHINE_READINESS, s, e);
            if (v == XFER_VERDICT_ILLEGAL) {
                ck_assert_uint_eq(xfer_readiness_cell_hits(r, s, e), 0);
                continue;
            }
            if (xfer_readiness_cell_hits(r, s, e))
                continue;
            printf("readiness cell not covered: %s x %s (%s)\n",
                   xfer_fsm_state_name(XFER_MACHINE_READINESS, s),
                   xfer_fsm_event_name(XFER_MACHINE_READINESS, e),
                   xfer_fsm_handler_name(XFER_MACHINE_READINESS, s, e));
            missing++;
        }
    }
    fflush(stdout);
    ck_assert_uint_eq(missing, 0);
    ck_assert_uint_eq(st.illegal, 0);
    ck_assert_uint_eq(st.live, 0);
    ck_assert_uint_eq(st.tombstones, 0);
    xfer_readiness_del(r);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Save and load                                                           */
/* ---------------------------------------------------------------------- */

static size_t save(const xfer_readiness *r, uint8_t *buf, size_t len)
{
    size_t n = 0;
    ck_assert_int_eq(xfer_readiness_save(r, buf, len, &n), 0);
    ck_assert_uint_le(n, len);
    return n;
}

/* A tracker with every kind of dynamic state: waiting records with equal
 * deadlines whose id order differs from their firing order, a taking
 * record with a deferred cancel and one take failed with a transport error,
 * tombstones of both kinds and pending actions. */
static void rich_state(xfer_readiness *r)
{
    ready(r, 10, 30, 1, 0);
    ready(r, 10, 20, 1, 1);
    ready(r, 10, 25, 2, 2);
    all_ready(r, 11, 40, 1, 3);
    take(r, 12, 40, 1, XFER_ERR_CONN_LOST); /* may have been applied */
    xfer_readiness_cancel(r, 12, 40);
    all_ready(r, 13, 50, 1, 3);
    all_take(r, 13, 50, 3);
    xfer_readiness_cancel(r, 14, 60);
    collect(r);
    ck_assert_int_eq(xfer_readiness_on_ready(r, 15, 35, 1, 0, 7), 0);
    ck_assert_int_eq(xfer_readiness_cancel(r, 15, 61), 0); /* pending */
}

static void same_future(xfer_readiness *a, xfer_readiness *b)
{
    uint8_t ba[8192], bb[8192];
    xfer_ready_action acts[2][MAXA];
    size_t n[2];
    xfer_readiness *t[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        xfer_readiness *r = t[i];
        reset();
        collect(r);
        take(r, 20, 40, 0, 0);
        take(r, 20, 40, 2, 0);
        ready(r, 21, 30, 1, 1);
        ready(r, 21, 60, 1, 1);
        xfer_readiness_on_timer(r, 10 + DEADLINE);
        collect(r);
        xfer_readiness_on_timer(r, 13 + TTL);
        collect(r);
        n[i] = O.n;
        memcpy(acts[i], O.a, O.n * sizeof O.a[0]);
    }
    ck_assert_uint_eq(n[0], n[1]);
    ck_assert_uint_gt(n[0], 10);
    bool released_unsure = false;
    for (size_t i = 0; i < n[1]; i++)
        released_unsure |= acts[1][i].kind == XFER_READY_ACT_RELEASE &&
                           acts[1][i].id == 40 && acts[1][i].shard == 1;
    ck_assert(released_unsure);
    ck_assert_int_eq(memcmp(acts[0], acts[1], n[0] * sizeof acts[0][0]), 0);
    size_t la = save(a, ba, sizeof ba), lb = save(b, bb, sizeof bb);
    ck_assert_uint_eq(la, lb);
    ck_assert_int_eq(memcmp(ba, bb, la), 0);
}

START_TEST(test_readiness_save_load_round_trip)
{
    uint8_t b1[8192], b2[8192];
    xfer_readiness *a = mk(3), *b = mk(3);
    rich_state(a);
    size_t n1 = save(a, b1, sizeof b1);
    size_t need = 0;
    ck_assert_int_eq(xfer_readiness_save(a, NULL, 0, &need),
                     XFER_ERR_TOO_SMALL);
    ck_assert_uint_eq(need, n1);
    /* A short buffer: nothing written past it, the full size returned. */
    memset(b2, 0xAB, sizeof b2);
    ck_assert_int_eq(xfer_readiness_save(a, b2, 40, &need),
                     XFER_ERR_TOO_SMALL);
    ck_assert_uint_eq(need, n1);
    ck_assert_uint_eq(b2[40], 0xAB);
    ck_assert_int_eq(xfer_readiness_load(b, b1, n1), 0);
    size_t n2 = save(b, b2, sizeof b2);
    ck_assert_uint_eq(n1, n2);
    ck_assert_int_eq(memcmp(b1, b2, n1), 0);
    ck_assert_int_eq(xfer_readiness_state(b, 40), XFER_READY_STATE_TAKING);
    ck_assert_int_eq(xfer_readiness_state(b, 50), XFER_READY_STATE_AVAILABLE);
    ck_assert_int_eq(xfer_readiness_state(b, 60), XFER_READY_STATE_UNAVAILABLE);
    ck_assert_uint_eq(xfer_readiness_next_deadline(b),
                      xfer_readiness_next_deadline(a));
    same_future(a, b);
    xfer_readiness_del(a);
    xfer_readiness_del(b);
}
END_TEST

START_TEST(test_readiness_load_rejects_bad_input)
{
    uint8_t good[8192], bad[8192], before[8192], after[8192];
    xfer_readiness *a = mk(3), *b = mk(3), *other = mk(2);
    rich_state(a);
    size_t n = save(a, good, sizeof good);
    ready(b, 1, 99, 1, 0);
    size_t nb = save(b, before, sizeof before);
    ck_assert_int_eq(xfer_readiness_load(other, good, n), XFER_ERR_FORMAT);
    ck_assert_int_eq(xfer_readiness_load(b, good, n - 1), XFER_ERR_FORMAT);
    memcpy(bad, good, n);
    bad[n] = 0;
    ck_assert_int_eq(xfer_readiness_load(b, bad, n + 1), XFER_ERR_FORMAT);
    /* Flip every byte in turn: each load either fails or succeeds into a
     * state that saves back to the same bytes. */
    for (size_t i = 0; i < n; i++) {
        memcpy(bad, good, n);
        bad[i] ^= 0x40;
        int rc = xfer_readiness_load(b, bad, n);
        if (rc == 0) {
            size_t m = save(b, after, sizeof after);
            ck_assert_uint_eq(m, n);
            ck_assert_int_eq(memcmp(after, bad, n), 0);
            ck_assert_int_eq(xfer_readiness_load(b, before, nb), 0);
            continue;
        }
        ck_assert_int_eq(rc, XFER_ERR_FORMAT);
        size_t m = save(b, after, sizeof after);
        ck_assert_uint_eq(m, nb);
        ck_assert_int_eq(memcmp(after, before, nb), 0);
    }
    ck_assert_int_eq(xfer_readiness_load(NULL, good, n),
                     XFER_ERR_INVALID_ARG);
    /* Two tombstones with one id: found only while loading, which leaves
     * the tracker empty.  The encoding: a 46-byte header, then 21 bytes
     * per tombstone (id first). */
    xfer_readiness *d = mk(3);
    ck_assert_int_eq(xfer_readiness_cancel(d, 1, 70), 0);
    ck_assert_int_eq(xfer_readiness_cancel(d, 2, 71), 0);
    xfer_readiness_actions_clear(d);
    size_t nd = save(d, bad, sizeof bad);
    ck_assert_uint_eq(nd, 46 + 2 * 21);
    memcpy(&bad[46 + 21], &bad[46], 8);
    ck_assert_int_eq(xfer_readiness_load(b, bad, nd), XFER_ERR_FORMAT);
    ck_assert_int_eq(xfer_readiness_state(b, 99), XFER_READY_STATE_NONE);
    ck_assert_uint_eq(stats(b).live, 0);
    ck_assert_uint_eq(stats(b).tombstones, 0);
    ck_assert_uint_eq(xfer_readiness_next_deadline(b), UINT64_MAX);
    xfer_readiness_del(d);
    xfer_readiness_del(a);
    xfer_readiness_del(b);
    xfer_readiness_del(other);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("readiness");
    TCase *tc = tcase_create("readiness");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_readiness_all_ready_gives_one_available);
    tcase_add_test(tc, test_readiness_single_shard_takes_at_once);
    tcase_add_test(tc, test_readiness_late_ready_after_cancel_dropped);
    tcase_add_test(tc, test_readiness_newer_attempt_after_unavailable_is_new_transfer);
    tcase_add_test(tc, test_readiness_newer_attempt_end_is_preemptive);
    tcase_add_test(tc, test_readiness_consumer_cancel_covers_every_attempt);
    tcase_add_test(tc, test_readiness_newer_attempt_is_serial_order);
    tcase_add_test(tc, test_readiness_newer_attempt_takes_the_tombstone_room);
    tcase_add_test(tc, test_readiness_deferred_consumer_cancel_saved);
    tcase_add_test(tc, test_readiness_deadline_names_missing_shards);
    tcase_add_test(tc, test_readiness_take_failure_rolls_back);
    tcase_add_test(tc, test_readiness_unsure_take_failure_released);
    tcase_add_loop_test(tc, test_readiness_give_up_during_taking_deferred, 0,
                        3);
    tcase_add_test(tc, test_readiness_cancel_unknown_then_ready);
    tcase_add_test(tc, test_readiness_repeated_cancel_extends_tombstone);
    tcase_add_test(tc, test_readiness_other_attempt_not_counted);
    tcase_add_test(tc, test_readiness_available_never_withdrawn);
    tcase_add_test(tc, test_readiness_caps_busy_and_ttl);
    tcase_add_test(tc, test_readiness_peer_input_rejected);
    tcase_add_test(tc, test_readiness_undrained_actions_busy);
    tcase_add_test(tc, test_readiness_timer_work_bounded);
    tcase_add_test(tc, test_readiness_trace_records_steps);
    tcase_add_test(tc, test_readiness_invalid_config);
    tcase_add_loop_test(tc, test_readiness_random_walk_keeps_i8, 0, 4);
    tcase_add_test(tc, test_readiness_alloc_failure_each_allocation);
    tcase_add_test(tc, test_readiness_transition_coverage);
    tcase_add_test(tc, test_readiness_save_load_round_trip);
    tcase_add_test(tc, test_readiness_load_rejects_bad_input);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
