/*
 * tests/test_transfer.c - the producer transfer core (fsm/core.c +
 * fsm/transfer.c) driven directly: every scenario of the core engine issue
 * that the core alone decides, checked on the action stream.
 *
 * Each scenario is a function that creates its own core, asserts its rule,
 * and adds its cells_hit to a total, so the coverage test can run them all
 * in one process and fail on any non-ILLEGAL cell that none of them hits.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "save.h"
#include "testutil.h"
#include "xfer/core.h"

#define S 4
#define MS 1000000ull

static uint64_t cells_total[XFER_TRANSFER_STATE_COUNT_][XFER_TRANSFER_EVENT_COUNT_];

/* ---------------------------------------------------------------------- */
/* Harness                                                                 */
/* ---------------------------------------------------------------------- */

typedef struct out {
    xfer_action a[8192];
    size_t n;
} out;

static out O; /* actions collected since the last reset */

static void collect(xfer_core *c)
{
    size_t n;
    const xfer_action *a = xfer_core_actions(c, &n);
    ck_assert_uint_le(O.n + n, 8192);
    memcpy(&O.a[O.n], a, n * sizeof *a);
    O.n += n;
    xfer_core_actions_clear(c);
}

static void reset(void)
{
    O.n = 0;
}

static size_t count(uint8_t kind, int shard)
{
    size_t c = 0;
    for (size_t i = 0; i < O.n; i++)
        if (O.a[i].kind == kind && (shard < 0 || O.a[i].shard == shard))
            c++;
    return c;
}

static const xfer_action *find(uint8_t kind, int shard)
{
    for (size_t i = 0; i < O.n; i++)
        if (O.a[i].kind == kind && (shard < 0 || O.a[i].shard == shard))
            return &O.a[i];
    return NULL;
}

static ssize_t index_of(uint8_t kind)
{
    for (size_t i = 0; i < O.n; i++)
        if (O.a[i].kind == kind)
            return (ssize_t)i;
    return -1;
}

/* The defaults with the given limits (the other fields as the default). */
static xfer_core_config limits(uint32_t transfers, uint32_t tombstones)
{
    xfer_core_config cfg;
    xfer_core_config_default(&cfg);
    cfg.max_transfers = transfers;
    cfg.max_tombstones = tombstones;
    /* The consumer these cores talk to: tombstones of 100 ms outlive it. */
    cfg.consumer_lease_ns = 50 * MS;
    cfg.net_margin_ns = 50 * MS;
    return cfg;
}

/* The config of the scenarios' cores (mk(NULL)). */
static xfer_core_config scenario_cfg(void)
{
    xfer_core_config cfg = limits(64, 256);
    cfg.tombstone_ttl_ns = 1000 * MS;
    cfg.default_deadline_ns = 500 * MS;
    cfg.cancel_op_timeout_ns = 100 * MS;
    cfg.cancel_backoff_ns = 10 * MS;
    cfg.cancel_max_attempts = 3;
    return cfg;
}

static xfer_core *mk(const xfer_core_config *over)
{
    xfer_core_config cfg = scenario_cfg();
    if (over)
        cfg = *over;
    xfer_core *c = NULL;
    ck_assert_int_eq(xfer_core_new(&cfg, &c), 0);
    collect(c);
    reset();
    return c;
}

static void done(xfer_core *c)
{
    xfer_core_stats st;
    xfer_core_stats_get(c, &st);
    for (int s = 0; s < XFER_TRANSFER_STATE_COUNT_; s++)
        for (int e = 0; e < XFER_TRANSFER_EVENT_COUNT_; e++)
            cells_total[s][e] += xfer_core_cell_hits(c, s, e);
    ck_assert_uint_eq(st.illegal, 0);
    xfer_core_del(c);
}

static xfer_slice slices[S] = {{0, 100}, {100, 100}, {200, 100}, {300, 100}};

static int submit(xfer_core *c, uint64_t now, uint64_t id)
{
    xfer_submit_args a = {.id = id, .group = 7, .nshards = S, .pool = 1,
                          .slices = slices, .user_data = id * 10};
    int rc = xfer_core_submit(c, now, &a);
    collect(c);
    return rc;
}

static uint32_t attempt_of(uint64_t id)
{
    for (size_t i = 0; i < O.n; i++)
        if (O.a[i].id == id && O.a[i].attempt)
            return O.a[i].attempt;
    return 0;
}

static void answer(xfer_core *c, uint64_t now, uint64_t id, uint32_t att,
                   uint16_t k, uint8_t op, int32_t status)
{
    xfer_shard_result r = {.id = id, .attempt = att, .shard = k, .op = op,
                           .status = status};
    if ((op == XFER_OP_RESERVE || op == XFER_OP_EAGER) && status == 0) {
        r.resv_id = 1000 + k;
        r.remote_addr = 64 * k;
    }
    ck_assert_int_eq(xfer_core_on_result(c, now, &r), 0);
    collect(c);
}

static void answer_all(xfer_core *c, uint64_t now, uint64_t id, uint32_t att,
                       uint8_t op, int32_t status)
{
    for (uint16_t k = 0; k < S; k++)
        answer(c, now, id, att, k, op, status);
}

/* Drive a transfer to WRITING (all reserves ok). */
static uint32_t to_writing(xfer_core *c, uint64_t id)
{
    ck_assert_int_eq(submit(c, 0, id), 0);
    uint32_t att = attempt_of(id);
    answer_all(c, 1, id, att, XFER_OP_RESERVE, 0);
    ck_assert_int_eq(xfer_core_state(c, id), XFER_TRANSFER_STATE_WRITING);
    return att;
}

static uint32_t to_completing(xfer_core *c, uint64_t id)
{
    uint32_t att = to_writing(c, id);
    answer_all(c, 2, id, att, XFER_OP_WRITE, 0);
    ck_assert_int_eq(xfer_core_state(c, id), XFER_TRANSFER_STATE_COMPLETING);
    return att;
}

static const xfer_result *result_of(uint64_t id)
{
    const xfer_result *r = NULL;
    int n = 0;
    for (size_t i = 0; i < O.n; i++)
        if (O.a[i].kind == XFER_ACT_COMPLETE && O.a[i].id == id) {
            r = &O.a[i].result;
            n++;
        }
    ck_assert_int_le(n, 1); /* I1: never twice */
    return r;
}

/* ---------------------------------------------------------------------- */
/* Scenarios                                                               */
/* ---------------------------------------------------------------------- */

static void sc_success(void)
{
    xfer_core *c = mk(NULL);
    uint32_t att = to_completing(c, 1);
    ck_assert_uint_eq(count(XFER_ACT_RESERVE, -1), S);
    ck_assert_uint_eq(count(XFER_ACT_WRITE, -1), S);
    ck_assert_uint_eq(count(XFER_ACT_COMMIT, -1), S);
    const xfer_action *w = find(XFER_ACT_WRITE, 2);
    ck_assert_uint_eq(w->resv_id, 1002);
    ck_assert_uint_eq(w->staging_off, 200);
    answer_all(c, 3, 1, att, XFER_OP_COMMIT, 0);
    const xfer_result *r = result_of(1);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->status, 0);
    ck_assert_uint_eq(r->user_data, 10);
    ck_assert_int_lt(index_of(XFER_ACT_RELEASE_STAGING),
                     index_of(XFER_ACT_COMPLETE));
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), 0);
    ck_assert_int_eq(xfer_core_state(c, 1), XFER_TRANSFER_STATE_TOMBSTONED);
    ck_assert_int_eq(submit(c, 4, 1), XFER_ERR_REUSED); /* ended, not cancelled */
    done(c);
}

/* 1 of 4 reservations fails, with other replies before and after it. */
static void sc_partial_reserve_failure(void)
{
    xfer_core *c = mk(NULL);
    ck_assert_int_eq(submit(c, 0, 5), 0);
    uint32_t att = attempt_of(5);
    answer(c, 1, 5, att, 0, XFER_OP_RESERVE, 0);
    answer(c, 1, 5, att, 2, XFER_OP_RESERVE, XFER_ERR_NO_SPACE);
    /* I2: nothing moves while shards 1 and 3 are outstanding. */
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), 0);
    ck_assert_int_eq(xfer_core_state(c, 5), XFER_TRANSFER_STATE_RESERVING);
    answer(c, 2, 5, att, 1, XFER_OP_RESERVE, 0);
    answer(c, 3, 5, att, 3, XFER_OP_RESERVE, 0); /* success after failure */
    ck_assert_int_eq(xfer_core_state(c, 5), XFER_TRANSFER_STATE_CANCELLING);
    ck_assert_uint_eq(count(XFER_ACT_WRITE, -1), 0);
    for (int k = 0; k < S; k++)
        ck_assert_uint_eq(count(XFER_ACT_CANCEL, k), 1);
    ck_assert_uint_eq(find(XFER_ACT_CANCEL, 3)->resv_id, 1003);
    ck_assert_uint_eq(find(XFER_ACT_CANCEL, 2)->resv_id, XFER_RESV_NONE);
    ck_assert_ptr_null(result_of(5));
    answer_all(c, 4, 5, att, XFER_OP_CANCEL, 0);
    const xfer_result *r = result_of(5);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->status, XFER_ERR_NO_SPACE);
    ck_assert_int_eq(r->phase, XFER_PHASE_RESERVING);
    ck_assert_int_eq(r->first_failed_shard, 2);
    ck_assert_uint_eq(r->failed_shards, 1u << 2);
    ck_assert(!r->consumer_may_hold);
    done(c);
}

static void sc_partial_write_failure(void)
{
    xfer_core *c = mk(NULL);
    uint32_t att = to_writing(c, 9);
    reset();
    answer(c, 2, 9, att, 1, XFER_OP_WRITE, XFER_ERR_IO);
    answer(c, 2, 9, att, 0, XFER_OP_WRITE, 0);
    /* I3: two writes still in flight: no release, no cancel yet. */
    ck_assert_uint_eq(count(XFER_ACT_RELEASE_STAGING, -1), 0);
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), 0);
    answer(c, 3, 9, att, 3, XFER_OP_WRITE, 0);
    answer(c, 3, 9, att, 2, XFER_OP_WRITE, 0);
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), S);
    ck_assert_uint_eq(count(XFER_ACT_RELEASE_STAGING, -1), 0);
    answer_all(c, 4, 9, att, XFER_OP_CANCEL, 0);
    ck_assert_uint_eq(count(XFER_ACT_RELEASE_STAGING, -1), 1);
    const xfer_result *r = result_of(9);
    ck_assert_int_eq(r->status, XFER_ERR_IO);
    ck_assert_int_eq(r->phase, XFER_PHASE_WRITING);
    ck_assert_int_eq(r->first_failed_shard, 1);
    done(c);
}

/* A cancel RPC fails on one shard: the others still get theirs, the failed
 * one is retried with backoff up to the bound, the tombstone stays, and a
 * late submit is refused without a reserve anywhere. */
static void sc_cancel_rpc_fails(void)
{
    xfer_core *c = mk(NULL);
    ck_assert_int_eq(submit(c, 0, 11), 0);
    uint32_t att = attempt_of(11);
    answer(c, 1, 11, att, 0, XFER_OP_RESERVE, XFER_ERR_REMOTE);
    for (uint16_t k = 1; k < S; k++)
        answer(c, 1, 11, att, k, XFER_OP_RESERVE, 0);
    reset();
    answer(c, 2, 11, att, 2, XFER_OP_CANCEL, XFER_ERR_IO);
    answer(c, 2, 11, att, 0, XFER_OP_CANCEL, 0);
    answer(c, 2, 11, att, 1, XFER_OP_CANCEL, 0);
    answer(c, 2, 11, att, 3, XFER_OP_CANCEL, 0);
    ck_assert_ptr_null(result_of(11));
    uint64_t t = 2;
    for (int round = 1; round < 3; round++) {
        uint64_t due = xfer_core_next_deadline(c);
        ck_assert_uint_gt(due, t);
        reset();
        xfer_core_on_timer(c, due);
        collect(c);
        ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), 1);
        ck_assert_uint_eq(count(XFER_ACT_CANCEL, 2), 1);
        t = due;
        answer(c, t, 11, att, 2, XFER_OP_CANCEL, XFER_ERR_CONN_LOST);
    }
    const xfer_result *r = result_of(11);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->rollback_failed, 1u << 2);
    ck_assert_int_eq(xfer_core_state(c, 11), XFER_TRANSFER_STATE_TOMBSTONED);
    reset();
    ck_assert_int_eq(submit(c, t + 1, 11), XFER_ERR_REUSED);
    ck_assert_uint_eq(O.n, 0); /* nothing reserved anywhere */
    xfer_core_stats st;
    xfer_core_stats_get(c, &st);
    ck_assert_uint_eq(st.late_submits, 1);
    ck_assert_uint_eq(st.cancel_gave_up, 1);
    done(c);
}

static void sc_preemptive_cancel(void)
{
    xfer_core *c = mk(NULL);
    ck_assert_int_eq(xfer_core_cancel(c, 0, 77), 0);
    collect(c);
    ck_assert_int_eq(xfer_core_state(c, 77), XFER_TRANSFER_STATE_TOMBSTONED);
    ck_assert_int_eq(submit(c, 1, 77), XFER_ERR_CANCELLED);
    ck_assert_uint_eq(O.n, 0);
    ck_assert_int_eq(xfer_core_cancel(c, 2, 77), 0); /* idempotent */
    /* A reply for an id never seen, and a late one, are absorbed. */
    answer(c, 3, 78, 9, 0, XFER_OP_RESERVE, 0);
    answer(c, 3, 77, 9, 0, XFER_OP_CANCEL, 0);
    answer(c, 3, 77, 9, 0, XFER_OP_RESERVE, 0);
    xfer_core_stats st;
    xfer_core_stats_get(c, &st);
    ck_assert_uint_eq(st.unknown_replies, 1);
    ck_assert_uint_eq(st.late_replies, 2);
    ck_assert_uint_eq(O.n, 0);
    done(c);
}

static void sc_cancel_reserving(void)
{
    xfer_core *c = mk(NULL);
    ck_assert_int_eq(submit(c, 0, 21), 0);
    uint32_t att = attempt_of(21);
    answer(c, 1, 21, att, 0, XFER_OP_RESERVE, 0);
    answer(c, 1, 21, att, 1, XFER_OP_RESERVE, 0);
    reset();
    ck_assert_int_eq(xfer_core_cancel(c, 2, 21), 0);
    collect(c);
    ck_assert_uint_eq(count(XFER_ACT_ABORT, -1), 2);
    ck_assert_uint_eq(find(XFER_ACT_ABORT, 2)->op, XFER_OP_RESERVE);
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), 0);
    ck_assert_int_eq(xfer_core_cancel(c, 2, 21), 0); /* idempotent */
    answer(c, 3, 21, att, 2, XFER_OP_RESERVE, XFER_ERR_ABORTED);
    answer(c, 3, 21, att, 3, XFER_OP_RESERVE, 0); /* won the race */
    ck_assert_uint_eq(count(XFER_ACT_WRITE, -1), 0);
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), S);
    answer_all(c, 4, 21, att, XFER_OP_CANCEL, 0);
    const xfer_result *r = result_of(21);
    ck_assert_int_eq(r->status, XFER_ERR_CANCELLED);
    ck_assert_int_eq(r->phase, XFER_PHASE_RESERVING);
    done(c);
}

/* Cancel in WRITING when k of S writes already finished. */
static void sc_cancel_writing(int k_done)
{
    xfer_core *c = mk(NULL);
    uint64_t id = 30 + (uint64_t)k_done;
    uint32_t att = to_writing(c, id);
    for (int k = 0; k < k_done; k++)
        answer(c, 2, id, att, (uint16_t)k, XFER_OP_WRITE, 0);
    reset();
    ck_assert_int_eq(xfer_core_cancel(c, 3, id), 0);
    collect(c);
    ck_assert_uint_eq(count(XFER_ACT_ABORT, -1), (size_t)(S - k_done));
    ck_assert_uint_eq(count(XFER_ACT_RELEASE_STAGING, -1), 0);
    for (int k = k_done; k < S; k++) {
        ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), 0);
        answer(c, 4, id, att, (uint16_t)k, XFER_OP_WRITE,
               k % 2 ? XFER_ERR_ABORTED : 0);
    }
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), S);
    ck_assert_uint_eq(count(XFER_ACT_RELEASE_STAGING, -1), 0);
    answer_all(c, 5, id, att, XFER_OP_CANCEL, 0);
    const xfer_result *r = result_of(id);
    ck_assert_int_eq(r->status, XFER_ERR_CANCELLED);
    ck_assert_int_eq(r->phase, XFER_PHASE_WRITING);
    ck_assert_uint_eq(count(XFER_ACT_RELEASE_STAGING, -1), 1);
    done(c);
}

static void sc_cancel_completing(bool commit_fails)
{
    xfer_core *c = mk(NULL);
    uint32_t att = to_completing(c, 40);
    reset();
    ck_assert_int_eq(xfer_core_cancel(c, 3, 40), 0);
    xfer_core_shutdown(c, 3);
    collect(c);
    ck_assert_uint_eq(count(XFER_ACT_ABORT, -1), 0); /* nothing new */
    answer(c, 4, 40, att, 0, XFER_OP_COMMIT, 0);
    answer(c, 4, 40, att, 1, XFER_OP_COMMIT, 0);
    answer(c, 4, 40, att, 2, XFER_OP_COMMIT,
           commit_fails ? XFER_ERR_CONN_LOST : 0);
    answer(c, 4, 40, att, 3, XFER_OP_COMMIT, 0);
    if (!commit_fails) {
        ck_assert_int_eq(result_of(40)->status, 0);
        ck_assert_ptr_nonnull(find(XFER_ACT_SHUTDOWN_DONE, -1));
        done(c);
        return;
    }
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), S);
    answer_all(c, 5, 40, att, XFER_OP_CANCEL, 0);
    const xfer_result *r = result_of(40);
    ck_assert_int_eq(r->status, XFER_ERR_CONN_LOST);
    ck_assert_int_eq(r->phase, XFER_PHASE_COMPLETING);
    ck_assert(r->consumer_may_hold);
    ck_assert_int_lt(index_of(XFER_ACT_COMPLETE),
                     index_of(XFER_ACT_SHUTDOWN_DONE));
    done(c);
}

/* The deadline fires in RESERVING (one shard silent) and in COMPLETING. */
static void sc_deadline(void)
{
    xfer_core *c = mk(NULL);
    ck_assert_int_eq(submit(c, 0, 50), 0);
    uint32_t att = attempt_of(50);
    for (uint16_t k = 0; k < 3; k++)
        answer(c, 1, 50, att, k, XFER_OP_RESERVE, 0);
    ck_assert_uint_eq(xfer_core_next_deadline(c), 500 * MS);
    reset();
    xfer_core_on_timer(c, 500 * MS);
    collect(c);
    ck_assert_uint_eq(count(XFER_ACT_ABORT, 3), 1);
    answer(c, 501 * MS, 50, att, 3, XFER_OP_RESERVE, XFER_ERR_ABORTED);
    answer_all(c, 502 * MS, 50, att, XFER_OP_CANCEL, 0);
    ck_assert_int_eq(result_of(50)->status, XFER_ERR_TIMEOUT);
    ck_assert_int_eq(result_of(50)->phase, XFER_PHASE_RESERVING);

    reset();
    uint64_t t0 = 600 * MS;
    xfer_submit_args a = {.id = 51, .nshards = S, .slices = slices,
                          .deadline_ns = t0 + 50 * MS};
    ck_assert_int_eq(xfer_core_submit(c, t0, &a), 0);
    collect(c);
    att = attempt_of(51);
    answer_all(c, t0 + 1, 51, att, XFER_OP_RESERVE, 0);
    answer_all(c, t0 + 2, 51, att, XFER_OP_WRITE, 0);
    answer(c, t0 + 3, 51, att, 0, XFER_OP_COMMIT, 0);
    xfer_core_on_timer(c, t0 + 50 * MS);
    collect(c);
    ck_assert_uint_eq(count(XFER_ACT_ABORT, -1), 3);
    for (uint16_t k = 1; k < S; k++)
        answer(c, t0 + 51 * MS, 51, att, k, XFER_OP_COMMIT,
               XFER_ERR_ABORTED);
    answer_all(c, t0 + 52 * MS, 51, att, XFER_OP_CANCEL, 0);
    ck_assert_int_eq(result_of(51)->status, XFER_ERR_TIMEOUT);
    ck_assert(result_of(51)->consumer_may_hold);
    done(c);
}

/* The naming rule of xfer/core.h: first_failed_shard is one of
 * failed_shards, NONE only when none is named, and a TIMEOUT names the
 * shards it waited on. */
static void check_naming(const xfer_result *r)
{
    if (r->status == 0) {
        ck_assert_uint_eq(r->failed_shards, 0);
        ck_assert_uint_eq(r->first_failed_shard, XFER_SHARD_NONE);
        return;
    }
    ck_assert_int_eq(r->first_failed_shard == XFER_SHARD_NONE,
                     r->failed_shards == 0);
    if (r->first_failed_shard != XFER_SHARD_NONE)
        ck_assert(r->failed_shards >> r->first_failed_shard & 1);
    if (r->status == XFER_ERR_TIMEOUT)
        ck_assert_uint_ne(r->failed_shards, 0);
}

/* What a transport answers to the abort of an op the deadline stopped. */
static const int32_t abort_answers[] = {XFER_ERR_ABORTED, 0, XFER_ERR_IO};
static const uint8_t phase_ops[] = {XFER_OP_RESERVE, XFER_OP_WRITE,
                                    XFER_OP_COMMIT};

/*
 * The deadline fires in phase `ph` (0 RESERVING, 1 WRITING, 2 COMPLETING)
 * while shards 1 and 3 have not answered; their ops are aborted and answer
 * `how` (ABORTED, their real success, or a failure).  The result names
 * exactly shards 1 and 3, with shard 1 first, whatever they answered;
 * the one exception is every commit acked, which is a success.
 */
static void sc_deadline_names(unsigned ph, unsigned how)
{
    xfer_core *c = mk(NULL);
    uint64_t id = 80 + 3 * ph + how;
    uint8_t op = phase_ops[ph];
    uint32_t att;
    if (ph == 0) {
        ck_assert_int_eq(submit(c, 0, id), 0);
        att = attempt_of(id);
    } else {
        att = ph == 1 ? to_writing(c, id) : to_completing(c, id);
    }
    answer(c, 3, id, att, 0, op, 0);
    answer(c, 3, id, att, 2, op, 0);
    reset();
    ck_assert_uint_eq(xfer_core_next_deadline(c), 500 * MS);
    xfer_core_on_timer(c, 500 * MS);
    collect(c);
    ck_assert_uint_eq(count(XFER_ACT_ABORT, -1), 2);
    ck_assert_uint_eq(find(XFER_ACT_ABORT, 1)->op, op);
    ck_assert_uint_eq(find(XFER_ACT_ABORT, 3)->op, op);
    answer(c, 501 * MS, id, att, 3, op, abort_answers[how]);
    answer(c, 501 * MS, id, att, 1, op, abort_answers[how]);
    if (ph == 2 && abort_answers[how] == 0) {
        /* Every commit acked: the data is ready everywhere. */
        ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), 0);
        ck_assert_int_eq(result_of(id)->status, 0);
        check_naming(result_of(id));
        done(c);
        return;
    }
    ck_assert_uint_eq(count(XFER_ACT_WRITE, -1), 0);
    ck_assert_uint_eq(count(XFER_ACT_COMMIT, -1), 0);
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), S);
    answer_all(c, 502 * MS, id, att, XFER_OP_CANCEL, 0);
    const xfer_result *r = result_of(id);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->status, XFER_ERR_TIMEOUT);
    ck_assert_int_eq(r->phase, XFER_PHASE_RESERVING + ph);
    ck_assert_uint_eq(r->failed_shards, (1u << 1) | (1u << 3));
    ck_assert_uint_eq(r->first_failed_shard, 1);
    ck_assert_int_eq(r->consumer_may_hold, ph == 2);
    check_naming(r);
    done(c);
}

/* A failure before the deadline keeps its status and its shard first; the
 * deadline adds the shards still outstanding.  A user cancel names nobody
 * it aborted, but a write that then fails is named, and first. */
static void sc_failure_then_stop_names(void)
{
    xfer_core *c = mk(NULL);
    uint32_t att = to_writing(c, 90);
    answer(c, 3, 90, att, 2, XFER_OP_WRITE, XFER_ERR_NO_SPACE);
    answer(c, 3, 90, att, 0, XFER_OP_WRITE, 0);
    xfer_core_on_timer(c, 500 * MS);
    collect(c);
    answer(c, 501 * MS, 90, att, 1, XFER_OP_WRITE, 0);
    answer(c, 501 * MS, 90, att, 3, XFER_OP_WRITE, XFER_ERR_ABORTED);
    answer_all(c, 502 * MS, 90, att, XFER_OP_CANCEL, 0);
    const xfer_result *r = result_of(90);
    ck_assert_int_eq(r->status, XFER_ERR_NO_SPACE);
    ck_assert_int_eq(r->phase, XFER_PHASE_WRITING);
    ck_assert_uint_eq(r->first_failed_shard, 2);
    ck_assert_uint_eq(r->failed_shards, (1u << 1) | (1u << 2) | (1u << 3));
    check_naming(r);

    reset();
    att = to_writing(c, 91);
    ck_assert_int_eq(xfer_core_cancel(c, 3, 91), 0);
    collect(c);
    answer(c, 4, 91, att, 0, XFER_OP_WRITE, XFER_ERR_ABORTED);
    answer(c, 4, 91, att, 1, XFER_OP_WRITE, 0);
    answer(c, 4, 91, att, 3, XFER_OP_WRITE, XFER_ERR_CONN_LOST);
    answer(c, 4, 91, att, 2, XFER_OP_WRITE, XFER_ERR_IO);
    answer_all(c, 5, 91, att, XFER_OP_CANCEL, 0);
    r = result_of(91);
    ck_assert_int_eq(r->status, XFER_ERR_CANCELLED);
    ck_assert_uint_eq(r->failed_shards, (1u << 2) | (1u << 3));
    ck_assert_uint_eq(r->first_failed_shard, 2);
    check_naming(r);

    reset();
    att = to_writing(c, 92);
    ck_assert_int_eq(xfer_core_cancel(c, 3, 92), 0);
    collect(c);
    answer_all(c, 4, 92, att, XFER_OP_WRITE, XFER_ERR_ABORTED);
    answer_all(c, 5, 92, att, XFER_OP_CANCEL, 0);
    ck_assert_uint_eq(result_of(92)->failed_shards, 0);
    ck_assert_uint_eq(result_of(92)->first_failed_shard, XFER_SHARD_NONE);
    done(c);
}

/* A cancel that never answers is aborted after cancel_op_timeout, and the
 * abort result counts as a failed attempt. */
static void sc_cancel_timeout(void)
{
    xfer_core *c = mk(NULL);
    ck_assert_int_eq(submit(c, 0, 60), 0);
    uint32_t att = attempt_of(60);
    answer_all(c, 1, 60, att, XFER_OP_RESERVE, XFER_ERR_REMOTE);
    for (uint16_t k = 0; k < 3; k++)
        answer(c, 2, 60, att, k, XFER_OP_CANCEL, 0);
    reset();
    xfer_core_on_timer(c, 1 + 100 * MS);
    collect(c);
    ck_assert_uint_eq(count(XFER_ACT_ABORT, 3), 1);
    /* only shard 3's: the acked cancels are done, not aborted again
     * (tools/mutate: an ack that left the cancel PENDING passed before) */
    ck_assert_uint_eq(count(XFER_ACT_ABORT, -1), 1);
    answer(c, 2 + 100 * MS, 60, att, 3, XFER_OP_CANCEL, XFER_ERR_ABORTED);
    uint64_t due = xfer_core_next_deadline(c);
    xfer_core_on_timer(c, due);
    collect(c);
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, 3), 1);
    answer(c, due + 1, 60, att, 3, XFER_OP_CANCEL, 0);
    ck_assert_int_eq(result_of(60)->rollback_failed, 0);
    done(c);
}

/* Shutdown with transfers in every state. */
static void sc_shutdown(void)
{
    xfer_core *c = mk(NULL);
    ck_assert_int_eq(submit(c, 0, 70), 0);          /* RESERVING */
    uint32_t a71 = to_writing(c, 71);               /* WRITING */
    uint32_t a72 = to_completing(c, 72);            /* COMPLETING */
    ck_assert_int_eq(submit(c, 0, 73), 0);          /* CANCELLING */
    uint32_t a73 = attempt_of(73);
    answer_all(c, 1, 73, a73, XFER_OP_RESERVE, XFER_ERR_REMOTE);
    uint32_t a70 = attempt_of(70);
    reset();
    xfer_core_shutdown(c, 10);
    collect(c);
    ck_assert_int_eq(submit(c, 10, 74), XFER_ERR_SHUTDOWN);
    xfer_core_on_timer(c, 10);
    collect(c);
    ck_assert_uint_eq(count(XFER_ACT_ABORT, -1), 2 * S);
    answer_all(c, 11, 70, a70, XFER_OP_RESERVE, XFER_ERR_ABORTED);
    answer_all(c, 11, 71, a71, XFER_OP_WRITE, XFER_ERR_ABORTED);
    answer_all(c, 11, 72, a72, XFER_OP_COMMIT, 0);
    for (uint64_t id = 70; id <= 73; id++) {
        uint32_t att = id == 70 ? a70 : id == 71 ? a71 : id == 72 ? a72 : a73;
        if (id != 72)
            answer_all(c, 12, id, att, XFER_OP_CANCEL, 0);
        ck_assert_ptr_nonnull(result_of(id));
    }
    ck_assert_int_eq(result_of(70)->status, XFER_ERR_SHUTDOWN);
    ck_assert_int_eq(result_of(72)->status, 0);
    ck_assert_int_eq(result_of(73)->status, XFER_ERR_REMOTE);
    ck_assert_uint_eq(count(XFER_ACT_SHUTDOWN_DONE, -1), 1);
    ck_assert_int_eq(O.a[O.n - 1].kind, XFER_ACT_SHUTDOWN_DONE);
    done(c);
}

static void sc_sync_failures(void)
{
    xfer_core_config cfg = limits(2, 3);
    cfg.tombstone_ttl_ns = 100 * MS;
    xfer_core *c = mk(&cfg);
    xfer_submit_args bad = {.id = 0, .nshards = S, .slices = slices};
    ck_assert_int_eq(xfer_core_submit(c, 0, &bad), XFER_ERR_INVALID_ARG);
    bad.id = 1;
    bad.nshards = 0;
    ck_assert_int_eq(xfer_core_submit(c, 0, &bad), XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(submit(c, 0, 1), 0);
    ck_assert_int_eq(submit(c, 0, 1), XFER_ERR_EXISTS);
    ck_assert_int_eq(submit(c, 0, 2), 0);
    ck_assert_int_eq(submit(c, 0, 3), XFER_ERR_BUSY); /* transfer cap */
    ck_assert_int_eq(xfer_core_cancel(c, 0, 9), 0);   /* 3rd tomb slot */
    ck_assert_int_eq(xfer_core_cancel(c, 0, 10), XFER_ERR_BUSY);
    /* Two live transfers hold slots: none of the three is evicted. */
    ck_assert_int_eq(xfer_core_state(c, 9), XFER_TRANSFER_STATE_TOMBSTONED);
    xfer_core_cancel(c, 1, 1);
    xfer_core_cancel(c, 1, 2);
    collect(c);
    reset();
    ck_assert_int_eq(count(XFER_ACT_COMPLETE, -1), 0);
    /* After the TTL the pre-emptive tombstone makes room again. */
    ck_assert_int_eq(xfer_core_cancel(c, 101 * MS, 10), 0);
    ck_assert_int_eq(xfer_core_state(c, 9), XFER_TRANSFER_STATE_NEW);
    done(c);
}

/* Inputs a transfer must absorb: replies of every kind for an id never
 * seen or already tombstoned, a submit of a live id in every phase, a user
 * cancel while cancelling, the deadline while writing. */
static void sc_absorbed_inputs(void)
{
    xfer_core *c = mk(NULL);
    for (uint8_t op = 0; op < XFER_OP_COUNT_; op++) {
        answer(c, 1, 500, 1, 0, op, 0);
        answer(c, 1, 500, 1, 0, op, XFER_ERR_IO);
    }
    uint32_t att = to_writing(c, 501);
    ck_assert_int_eq(submit(c, 2, 501), XFER_ERR_EXISTS);
    reset();
    ck_assert_uint_eq(xfer_core_next_deadline(c), 1 + 500 * MS);
    xfer_core_on_timer(c, 1 + 500 * MS);
    collect(c);
    ck_assert_uint_eq(count(XFER_ACT_ABORT, -1), S);
    answer_all(c, 501 * MS, 501, att, XFER_OP_WRITE, XFER_ERR_ABORTED);
    ck_assert_int_eq(submit(c, 501 * MS, 501), XFER_ERR_EXISTS);
    ck_assert_int_eq(xfer_core_cancel(c, 501 * MS, 501), 0);
    answer_all(c, 502 * MS, 501, att, XFER_OP_CANCEL, 0);
    ck_assert_int_eq(result_of(501)->status, XFER_ERR_TIMEOUT);
    ck_assert_int_eq(result_of(501)->phase, XFER_PHASE_WRITING);
    answer(c, 503 * MS, 501, att, 0, XFER_OP_RESERVE, XFER_ERR_ABORTED);
    answer(c, 503 * MS, 501, att, 0, XFER_OP_CANCEL, XFER_ERR_IO);
    uint32_t a2 = to_completing(c, 502);
    ck_assert_int_eq(submit(c, 3, 502), XFER_ERR_EXISTS);
    answer_all(c, 4, 502, a2, XFER_OP_COMMIT, 0);
    xfer_core_stats st;
    xfer_core_stats_get(c, &st);
    ck_assert_uint_eq(st.unknown_replies, 2 * XFER_OP_COUNT_);
    ck_assert_uint_eq(st.late_replies, 2);
    done(c);
}

/* ---------------------------------------------------------------------- */
/* Randomised: exactly once under every interleaving we can generate       */
/* ---------------------------------------------------------------------- */

typedef struct inflight {
    xfer_action a;
    bool aborted;
} inflight;

static inflight fl[4096];
static size_t nfl;

static void track(const xfer_action *a)
{
    if (a->kind <= XFER_ACT_CANCEL) {
        ck_assert_uint_lt(nfl, 4096);
        fl[nfl++] = (inflight){*a, false};
    } else if (a->kind == XFER_ACT_ABORT) {
        for (size_t i = 0; i < nfl; i++)
            if (fl[i].a.id == a->id && fl[i].a.shard == a->shard &&
                fl[i].a.kind == a->op)
                fl[i].aborted = true;
    }
}

static void random_run(uint64_t seed, int ntransfers, int *completions)
{
    xfer_core *c = mk(NULL);
    uint64_t rng = seed, now = 0;
    int submitted = 0;
    nfl = 0;
    for (int step = 0; step < 20000; step++) {
        size_t before = O.n;
        uint64_t r = tu_rand(&rng) % 100;
        now += tu_rand(&rng) % (5 * MS);
        if (r < 10 && submitted < ntransfers) {
            uint64_t id = 1 + tu_rand(&rng) % (uint64_t)(ntransfers + 5);
            if (submit(c, now, id) == 0)
                submitted++;
        } else if (r < 13) {
            xfer_core_cancel(c, now, 1 + tu_rand(&rng) % 40);
            collect(c);
        } else if (r < 18 || nfl == 0) {
            xfer_core_on_timer(c, xfer_core_next_deadline(c) != UINT64_MAX
                                      ? xfer_core_next_deadline(c) : now);
            collect(c);
        } else {
            size_t i = tu_rand(&rng) % nfl;
            inflight f = fl[i];
            fl[i] = fl[--nfl];
            int32_t st = f.aborted && tu_rand(&rng) % 2 ? XFER_ERR_ABORTED
                         : tu_rand(&rng) % 6 == 0       ? XFER_ERR_IO
                                                        : 0;
            answer(c, now, f.a.id, f.a.attempt, f.a.shard, f.a.kind, st);
        }
        for (size_t i = before; i < O.n; i++) {
            track(&O.a[i]);
            if (O.a[i].kind == XFER_ACT_COMPLETE) {
                completions[O.a[i].result.attempt]++;
                check_naming(&O.a[i].result);
            }
        }
        if (O.n > 7000)
            reset();
    }
    /* Liveness: answer everything, fire every timer, until quiet. */
    for (int guard = 0; guard < 100000 && (nfl || xfer_core_next_deadline(c)
                                                      != UINT64_MAX); guard++) {
        size_t before = O.n;
        if (nfl) {
            inflight f = fl[--nfl];
            answer(c, now, f.a.id, f.a.attempt, f.a.shard, f.a.kind, 0);
        } else {
            uint64_t d = xfer_core_next_deadline(c);
            now = d > now ? d : now;
            xfer_core_on_timer(c, now);
            collect(c);
        }
        for (size_t i = before; i < O.n; i++) {
            track(&O.a[i]);
            if (O.a[i].kind == XFER_ACT_COMPLETE) {
                completions[O.a[i].result.attempt]++;
                check_naming(&O.a[i].result);
            }
        }
        if (O.n > 7000)
            reset();
    }
    xfer_core_stats st;
    xfer_core_stats_get(c, &st);
    ck_assert_uint_eq(st.live, 0);
    ck_assert_uint_eq(st.completed, st.submitted);
    done(c);
}

/* ---------------------------------------------------------------------- */
/* Test cases                                                              */
/* ---------------------------------------------------------------------- */

START_TEST(test_transfer_success_path) { sc_success(); }
END_TEST

START_TEST(test_transfer_partial_reservation_failure)
{
    sc_partial_reserve_failure();
}
END_TEST

START_TEST(test_transfer_partial_write_failure) { sc_partial_write_failure(); }
END_TEST

START_TEST(test_transfer_cancel_rpc_failure_retried_tombstone_kept)
{
    sc_cancel_rpc_fails();
}
END_TEST

/* The cancel retry delay doubles up to its cap (issue 23 item 5): a shard
 * that never takes its cancel costs each round at most the cap. */
START_TEST(test_transfer_cancel_backoff_capped)
{
    xfer_core_config cfg = scenario_cfg();
    cfg.cancel_backoff_ns = 300 * MS;
    cfg.cancel_max_attempts = 6;
    xfer_core *c = mk(&cfg);
    ck_assert_int_eq(submit(c, 0, 21), 0);
    uint32_t att = attempt_of(21);
    answer(c, 1, 21, att, 0, XFER_OP_RESERVE, XFER_ERR_REMOTE);
    for (uint16_t k = 1; k < S; k++)
        answer(c, 1, 21, att, k, XFER_OP_RESERVE, 0);
    for (uint16_t k = 0; k < S; k++)
        answer(c, 2, 21, att, k, XFER_OP_CANCEL, k == 2 ? XFER_ERR_IO : 0);
    const uint64_t want[] = {300 * MS, 600 * MS, 1000 * MS, 1000 * MS,
                             1000 * MS};
    uint64_t t = 2;
    for (size_t round = 0; round < sizeof want / sizeof want[0]; round++) {
        uint64_t due = xfer_core_next_deadline(c);
        ck_assert_uint_eq(due - t, want[round]);
        ck_assert_uint_le(due - t, XFER_CORE_CANCEL_BACKOFF_CAP_NS);
        reset();
        xfer_core_on_timer(c, due);
        collect(c);
        ck_assert_uint_eq(count(XFER_ACT_CANCEL, 2), 1);
        t = due;
        answer(c, t, 21, att, 2, XFER_OP_CANCEL, XFER_ERR_IO);
    }
    const xfer_result *r = result_of(21);
    ck_assert_ptr_nonnull(r); /* out of attempts: given up, reported */
    ck_assert_uint_eq(r->rollback_failed, 1u << 2);
    done(c);
}
END_TEST

START_TEST(test_transfer_preemptive_cancel_rejects_submit)
{
    sc_preemptive_cancel();
}
END_TEST

START_TEST(test_transfer_user_cancel_reserving) { sc_cancel_reserving(); }
END_TEST

START_TEST(test_transfer_user_cancel_writing)
{
    sc_cancel_writing(_i); /* _i: writes already finished, 0..S-1 */
}
END_TEST

START_TEST(test_transfer_user_cancel_completing)
{
    sc_cancel_completing(_i != 0);
}
END_TEST

START_TEST(test_transfer_deadline) { sc_deadline(); }
END_TEST

START_TEST(test_transfer_cancel_op_timeout) { sc_cancel_timeout(); }
END_TEST

/* _i: phase (0..2) x what the aborted ops answer (ABORTED, ok, failed). */
START_TEST(test_transfer_deadline_names_waited_shards)
{
    sc_deadline_names((unsigned)_i / 3, (unsigned)_i % 3);
}
END_TEST

START_TEST(test_transfer_failure_then_stop_names_shards)
{
    sc_failure_then_stop_names();
}
END_TEST

START_TEST(test_transfer_shutdown_every_state) { sc_shutdown(); }
END_TEST

START_TEST(test_transfer_sync_failure_never_completes) { sc_sync_failures(); }
END_TEST

/* A result the core cannot take (a positive status, an op out of range)
 * is refused whole: INVALID_ARG, no action, the transfer where it was.
 * (tools/mutate: the guard of xfer_core_on_result weakened to "status >
 * 1", or its "||" to "&&", passed every net before this test.) */
START_TEST(test_transfer_on_result_refuses_bad_results)
{
    xfer_core *c = mk(NULL);
    ck_assert_int_eq(submit(c, 0, 1), 0);
    uint32_t att = attempt_of(1);
    reset();
    const xfer_shard_result bad[] = {
        {.id = 1, .attempt = att, .shard = 0, .op = XFER_OP_RESERVE,
         .status = 1, .resv_id = 1000},
        {.id = 1, .attempt = att, .shard = 0, .op = XFER_OP_COUNT_,
         .status = 0},
        {.id = 1, .attempt = att, .shard = 0, .op = XFER_OP_COUNT_,
         .status = XFER_ERR_IO},
        {.id = 1, .attempt = att, .shard = 0, .op = 0xff, .status = 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(xfer_core_on_result(c, 1, &bad[i]),
                         XFER_ERR_INVALID_ARG);
        collect(c);
        ck_assert_uint_eq(O.n, 0);
        ck_assert_int_eq(xfer_core_state(c, 1),
                         XFER_TRANSFER_STATE_RESERVING);
    }
    /* the good answers still move it on */
    answer_all(c, 2, 1, att, XFER_OP_RESERVE, 0);
    ck_assert_int_eq(xfer_core_state(c, 1), XFER_TRANSFER_STATE_WRITING);
    done(c);
}
END_TEST

START_TEST(test_transfer_absorbs_late_and_unknown_inputs)
{
    sc_absorbed_inputs();
}
END_TEST

START_TEST(test_transfer_exactly_once_random)
{
    uint64_t seed = tu_seed("test_transfer_exactly_once_random", 20261130);
    for (int run = 0; run < 20; run++) {
        int completions[64] = {0};
        reset();
        random_run(seed + (uint64_t)run, 30, completions);
        /* Attempts number accepted submits 1..n: each completes once. */
        for (int att = 1; att < 64; att++)
            ck_assert_int_le(completions[att], 1);
        ck_assert_int_eq(completions[0], 0);
    }
}
END_TEST

START_TEST(test_transfer_alloc_failure_each_allocation)
{
    for (long n = 0;; n++) {
        tu_alloc ta;
        tu_alloc_init(&ta, n);
        xfer_core_config cfg = limits(8, 0);
        cfg.alloc = tu_allocator(&ta);
        xfer_core *c = (xfer_core *)&ta; /* must stay untouched */
        int rc = xfer_core_new(&cfg, &c);
        if (rc) {
            ck_assert_int_eq(rc, XFER_ERR_NOMEM);
            ck_assert_ptr_eq(c, (xfer_core *)&ta);
            ck_assert_int_eq(ta.live, 0);
            continue;
        }
        /* Creation succeeded: now the record allocation at submit fails. */
        ta.fail_after = ta.calls;
        reset();
        ck_assert_int_eq(submit(c, 0, 1), XFER_ERR_NOMEM);
        ck_assert_uint_eq(O.n, 0);
        ck_assert_int_eq(xfer_core_state(c, 1), XFER_TRANSFER_STATE_NEW);
        ta.fail_after = -1;
        ck_assert_int_eq(submit(c, 0, 1), 0);
        xfer_core_del(c);
        ck_assert_int_eq(ta.live, 0);
        break;
    }
}
END_TEST

/* A finished transfer's record is reused by the next submit of the same
 * width (no allocation on the hot path); a submit of another width frees
 * the spare and allocates its own; del frees every spare. */
START_TEST(test_transfer_record_reused_after_completion)
{
    tu_alloc ta;
    tu_alloc_init(&ta, -1);
    xfer_core_config cfg = limits(8, 64);
    cfg.alloc = tu_allocator(&ta);
    xfer_core *c = mk(&cfg);
    uint32_t att = to_completing(c, 1);
    answer_all(c, 3, 1, att, XFER_OP_COMMIT, 0);
    ck_assert_int_eq(result_of(1)->status, 0);
    long calls = ta.calls, live = ta.live;
    att = to_completing(c, 2); /* the same width: the spare record */
    ck_assert_int_eq(ta.calls, calls);
    ck_assert_int_eq(ta.live, live);
    answer_all(c, 3, 2, att, XFER_OP_COMMIT, 0);
    reset();
    xfer_submit_args a = {.id = 3, .group = 7, .nshards = 2, .pool = 1,
                          .slices = slices};
    ck_assert_int_eq(xfer_core_submit(c, 4, &a), 0); /* another width */
    collect(c);
    ck_assert_int_eq(ta.calls, calls + 1);
    ck_assert_int_eq(ta.live, live); /* the spare went, a record came */
    done(c);
    ck_assert_int_eq(ta.live, 0);
}
END_TEST

/* A second cancel of a tombstoned id gives it a full TTL from then; an
 * expired tombstone is never mistaken for a live one. */
START_TEST(test_transfer_repeated_cancel_extends_tombstone)
{
    xfer_core_config cfg = limits(4, 8);
    cfg.tombstone_ttl_ns = 100 * MS;
    xfer_core *c = mk(&cfg);
    ck_assert_int_eq(xfer_core_cancel(c, 0, 5), 0);
    ck_assert_int_eq(xfer_core_cancel(c, 60 * MS, 5), 0);
    ck_assert_int_eq(submit(c, 120 * MS, 5), XFER_ERR_CANCELLED);
    ck_assert_int_eq(xfer_core_state(c, 5), XFER_TRANSFER_STATE_TOMBSTONED);
    ck_assert_int_eq(submit(c, 160 * MS, 5), 0);
    xfer_core_del(c);
}
END_TEST

START_TEST(test_transfer_save_load_roundtrip)
{
    xfer_core_config cfg = limits(8, 16);
    xfer_core *a = mk(&cfg), *b = mk(&cfg);
    uint32_t att = to_writing(a, 3);
    ck_assert_int_eq(submit(a, 0, 4), 0);
    xfer_core_cancel(a, 5, 99);
    collect(a);
    uint8_t buf[4096], buf2[4096];
    size_t n = 0, n2 = 0;
    ck_assert_int_eq(xfer_core_save(a, buf, sizeof buf, &n), 0);
    ck_assert_uint_gt(n, 0);
    ck_assert_uint_le(n, sizeof buf);
    ck_assert_int_eq(xfer_core_load(b, buf, n), 0);
    ck_assert_int_eq(xfer_core_save(b, buf2, sizeof buf2, &n2), 0);
    ck_assert_uint_eq(n2, n);
    ck_assert_mem_eq(buf, buf2, n);
    /* Both answer the next input the same way. */
    reset();
    answer(a, 6, 3, att, 1, XFER_OP_WRITE, XFER_ERR_IO);
    size_t na = O.n;
    xfer_action first = O.a[0];
    reset();
    answer(b, 6, 3, att, 1, XFER_OP_WRITE, XFER_ERR_IO);
    ck_assert_uint_eq(O.n, na);
    ck_assert_mem_eq(&O.a[0], &first, sizeof first);
    ck_assert_int_eq(xfer_core_state(b, 99), XFER_TRANSFER_STATE_TOMBSTONED);
    buf[0] ^= 0xff;
    ck_assert_int_eq(xfer_core_load(b, buf, n), XFER_ERR_FORMAT);
    done(a);
    done(b);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The eager path (docs/design.md 2.1)                                     */
/* ---------------------------------------------------------------------- */

/* A core with the eager path on for slices of up to `max` bytes. */
static xfer_core *mk_eager(uint32_t max)
{
    xfer_core_config cfg = scenario_cfg();
    cfg.eager_max_bytes = max;
    return mk(&cfg);
}

static int submit_eager(xfer_core *c, uint64_t now, uint64_t id, bool ok)
{
    xfer_submit_args a = {.id = id, .group = 7, .nshards = S, .pool = 1,
                          .slices = slices, .user_data = id * 10,
                          .eager_ok = ok};
    int rc = xfer_core_submit(c, now, &a);
    collect(c);
    return rc;
}

/* One EAGER op per shard, carrying the slice; every shard applied it:
 * success, staging released first, and nothing else was ever sent. */
static void sc_eager_success(void)
{
    xfer_core *c = mk_eager(100);
    ck_assert_int_eq(submit_eager(c, 0, 300, true), 0);
    ck_assert_int_eq(xfer_core_state(c, 300), XFER_TRANSFER_STATE_EAGER);
    ck_assert_uint_eq(count(XFER_ACT_EAGER, -1), S);
    ck_assert_uint_eq(count(XFER_ACT_RESERVE, -1), 0);
    const xfer_action *a = find(XFER_ACT_EAGER, 3);
    ck_assert_uint_eq(a->staging_off, 300);
    ck_assert_uint_eq(a->len, 100);
    ck_assert_uint_eq(a->pool, 1);
    uint32_t att = attempt_of(300);
    ck_assert_int_eq(submit_eager(c, 1, 300, true), XFER_ERR_EXISTS);
    /* not a stream: a part or a seal is refused, the record untouched */
    xfer_range one = {.staging_off = 0, .pool = 1, .len = 10, .shard = 0};
    ck_assert_int_eq(xfer_core_part(c, 1, 300, &one, 1, NULL), XFER_ERR_STATE);
    ck_assert_int_eq(xfer_core_seal(c, 1, 300), XFER_ERR_STATE);
    collect(c);
    ck_assert_uint_eq(count(XFER_ACT_RELEASE_PART, -1), 0);
    xfer_transfer_view v;
    ck_assert(xfer_core_view(c, 300, &v));
    ck_assert_uint_eq(v.shards[1].eager, XFER_SUB_PENDING);
    ck_assert_uint_eq(v.pending, S);
    for (uint16_t k = 0; k + 1 < S; k++)
        answer(c, 2, 300, att, k, XFER_OP_EAGER, 0);
    /* I2: no result while one shard has not answered. */
    ck_assert_ptr_null(result_of(300));
    ck_assert(xfer_core_view(c, 300, &v));
    ck_assert_uint_eq(v.shards[0].eager, XFER_SUB_OK);
    answer(c, 3, 300, att, S - 1, XFER_OP_EAGER, 0);
    const xfer_result *r = result_of(300);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->status, 0);
    ck_assert(!r->consumer_may_hold);
    ck_assert_uint_eq(r->first_failed_shard, XFER_SHARD_NONE);
    ck_assert_int_lt(index_of(XFER_ACT_RELEASE_STAGING),
                     index_of(XFER_ACT_COMPLETE));
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1) + count(XFER_ACT_WRITE, -1) +
                          count(XFER_ACT_COMMIT, -1),
                      0);
    ck_assert_int_eq(xfer_core_state(c, 300), XFER_TRANSFER_STATE_TOMBSTONED);
    done(c);
}

/* The eager path needs all three: the core's size limit, every slice
 * within it, and the group's consent; otherwise the three rounds. */
static void sc_eager_not_taken(void)
{
    const struct {
        uint32_t max;
        bool ok;
    } cases[] = {{0, true}, {99, true}, {100, false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        xfer_core *c = mk_eager(cases[i].max);
        reset();
        ck_assert_int_eq(submit_eager(c, 0, 310, cases[i].ok), 0);
        ck_assert_int_eq(xfer_core_state(c, 310),
                         XFER_TRANSFER_STATE_RESERVING);
        ck_assert_uint_eq(count(XFER_ACT_EAGER, -1), 0);
        ck_assert_uint_eq(count(XFER_ACT_RESERVE, -1), S);
        done(c);
    }
}

/* One shard refuses (or its reply is lost): the result waits for every
 * shard, then every shard the eager op went to gets a cancel, naming the
 * reservation where its reply gave one; the consumer may hold the data. */
static void sc_eager_partial_failure(int32_t err)
{
    xfer_core *c = mk_eager(100);
    ck_assert_int_eq(submit_eager(c, 0, 320, true), 0);
    uint32_t att = attempt_of(320);
    reset();
    answer(c, 1, 320, att, 2, XFER_OP_EAGER, err);
    answer(c, 1, 320, att, 0, XFER_OP_EAGER, 0);
    answer(c, 1, 320, att, 1, XFER_OP_EAGER, 0);
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), 0); /* I2 */
    answer(c, 1, 320, att, 3, XFER_OP_EAGER, 0);
    ck_assert_int_eq(xfer_core_state(c, 320), XFER_TRANSFER_STATE_CANCELLING);
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), S); /* I5 */
    ck_assert_uint_eq(find(XFER_ACT_CANCEL, 1)->resv_id, 1001);
    ck_assert_uint_eq(find(XFER_ACT_CANCEL, 2)->resv_id, XFER_RESV_NONE);
    ck_assert_ptr_null(result_of(320));
    answer_all(c, 2, 320, att, XFER_OP_CANCEL, 0);
    const xfer_result *r = result_of(320);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->status, err);
    ck_assert_int_eq(r->phase, XFER_PHASE_COMPLETING);
    ck_assert(r->consumer_may_hold);
    ck_assert_uint_eq(r->first_failed_shard, 2);
    ck_assert_uint_eq(r->failed_shards, 1u << 2);
    ck_assert_uint_eq(r->rollback_failed, 0);
    done(c);
}

/* A user cancel or shutdown in EAGER starts nothing (the ops may be
 * applied): all applied still succeeds; a deadline aborts every op in
 * flight, names those shards, and rolls back with the flag set. */
static void sc_eager_stops(bool deadline)
{
    xfer_core *c = mk_eager(100);
    ck_assert_int_eq(submit_eager(c, 0, 330, true), 0);
    uint32_t att = attempt_of(330);
    answer(c, 1, 330, att, 0, XFER_OP_EAGER, 0);
    reset();
    if (!deadline) {
        ck_assert_int_eq(xfer_core_cancel(c, 2, 330), 0);
        xfer_core_shutdown(c, 2);
        collect(c);
        ck_assert_uint_eq(O.n, 0); /* nothing new, nothing aborted */
        for (uint16_t k = 1; k < S; k++)
            answer(c, 3, 330, att, k, XFER_OP_EAGER, 0);
        ck_assert_int_eq(result_of(330)->status, 0);
        ck_assert_ptr_nonnull(find(XFER_ACT_SHUTDOWN_DONE, -1));
        done(c);
        return;
    }
    ck_assert_uint_eq(xfer_core_next_deadline(c), 500 * MS);
    xfer_core_on_timer(c, 500 * MS);
    collect(c);
    ck_assert_uint_eq(count(XFER_ACT_ABORT, -1), S - 1);
    ck_assert_uint_eq(find(XFER_ACT_ABORT, 2)->op, XFER_OP_EAGER);
    for (uint16_t k = 1; k < S; k++)
        answer(c, 501 * MS, 330, att, k, XFER_OP_EAGER, XFER_ERR_ABORTED);
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), S);
    answer_all(c, 502 * MS, 330, att, XFER_OP_CANCEL, 0);
    const xfer_result *r = result_of(330);
    ck_assert_int_eq(r->status, XFER_ERR_TIMEOUT);
    ck_assert_int_eq(r->phase, XFER_PHASE_COMPLETING);
    ck_assert(r->consumer_may_hold);
    ck_assert_uint_eq(r->failed_shards, 0xeu); /* those it waited on */
    done(c);
}

START_TEST(test_transfer_eager_success)
{
    sc_eager_success();
}
END_TEST

START_TEST(test_transfer_eager_needs_size_and_group)
{
    sc_eager_not_taken();
}
END_TEST

START_TEST(test_transfer_eager_failure_rolls_back_every_shard)
{
    sc_eager_partial_failure(_i == 0 ? XFER_ERR_NO_SPACE : XFER_ERR_CONN_LOST);
}
END_TEST

START_TEST(test_transfer_eager_stops)
{
    sc_eager_stops(_i == 1);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Streams (xfer_core_open / part / seal)                                  */
/* ---------------------------------------------------------------------- */

static const uint32_t stream_lens[S] = {100, 100, 100, 100};

static int open_stream(xfer_core *c, uint64_t now, uint64_t id,
                       uint64_t deadline)
{
    xfer_open_args a = {.id = id, .group = 7, .nshards = S,
                        .lens = stream_lens, .deadline_ns = deadline,
                        .user_data = id * 10};
    int rc = xfer_core_open(c, now, &a);
    collect(c);
    return rc;
}

/* A part of one range per shard: shard k gets staging [base + 100k, +len)
 * at reservation offset off. */
static int add_part(xfer_core *c, uint64_t now, uint64_t id, uint32_t off,
                    uint32_t len, uint32_t *part)
{
    xfer_range r[S];
    for (uint16_t k = 0; k < S; k++)
        r[k] = (xfer_range){.staging_off = 1000 * (off + 1) + 100 * k,
                            .pool = 2, .len = len, .resv_off = off,
                            .shard = k};
    int rc = xfer_core_part(c, now, id, r, S, part);
    collect(c);
    return rc;
}

static size_t count_part(uint8_t kind, uint32_t part)
{
    size_t n = 0;
    for (size_t i = 0; i < O.n; i++)
        if (O.a[i].kind == kind && O.a[i].part == part)
            n++;
    return n;
}

/* Parts before the reserves answered wait; writes go one per shard at a
 * time; a part comes back only once its writes all answered; the commits
 * only once sealed and every write answered; every RELEASE_PART precedes
 * the COMPLETE. */
static void sc_stream_success(void)
{
    xfer_core *c = mk(NULL);
    uint32_t p1 = 0, p2 = 0, p3 = 0;
    ck_assert_int_eq(xfer_core_part(c, 0, 400, (xfer_range[]){{.len = 1}},
                                    1, NULL),
                     XFER_ERR_NOT_FOUND);
    ck_assert_int_eq(xfer_core_seal(c, 0, 400), XFER_ERR_NOT_FOUND);
    ck_assert_int_eq(open_stream(c, 0, 400, 0), 0);
    ck_assert_uint_eq(count(XFER_ACT_RESERVE, -1), S);
    ck_assert_uint_eq(find(XFER_ACT_RESERVE, 2)->len, 100);
    uint32_t att = attempt_of(400);
    ck_assert_int_eq(add_part(c, 1, 400, 0, 40, &p1), 0);
    ck_assert_uint_eq(p1, 1);
    ck_assert_uint_eq(count(XFER_ACT_WRITE, -1), 0); /* waits */
    /* past the reservation: refused, nothing taken */
    ck_assert_int_eq(add_part(c, 1, 400, 90, 20, NULL), XFER_ERR_INVALID_ARG);
    reset();
    answer_all(c, 2, 400, att, XFER_OP_RESERVE, 0);
    ck_assert_int_eq(xfer_core_state(c, 400), XFER_TRANSFER_STATE_WRITING);
    ck_assert_uint_eq(count_part(XFER_ACT_WRITE, 1), S);
    const xfer_action *w = find(XFER_ACT_WRITE, 3);
    ck_assert_uint_eq(w->resv_off, 0);
    ck_assert_uint_eq(w->len, 40);
    ck_assert_uint_eq(w->staging_off, 1300);
    ck_assert_uint_eq(w->pool, 2);
    ck_assert_uint_eq(w->remote_addr, 64 * 3);
    /* Part 2: two ranges per shard, contiguous in staging and in the
     * reservation, join into one run; it waits behind part 1's write. */
    xfer_range r2[2 * S];
    for (uint16_t k = 0; k < S; k++) {
        r2[2 * k] = (xfer_range){.staging_off = 5000 + 100 * k + 20,
                                 .pool = 2, .len = 30, .resv_off = 60,
                                 .shard = k};
        r2[2 * k + 1] = (xfer_range){.staging_off = 5000 + 100 * k,
                                     .pool = 2, .len = 20, .resv_off = 40,
                                     .shard = k};
    }
    reset();
    ck_assert_int_eq(xfer_core_part(c, 3, 400, r2, 2 * S, &p2), 0);
    collect(c);
    ck_assert_uint_eq(p2, 2);
    ck_assert_uint_eq(count(XFER_ACT_WRITE, -1), 0);
    ck_assert_int_eq(xfer_core_seal(c, 3, 400), 0);
    collect(c);
    ck_assert_int_eq(xfer_core_seal(c, 3, 400), XFER_ERR_STATE);
    ck_assert_int_eq(add_part(c, 3, 400, 90, 10, &p3), XFER_ERR_STATE);
    for (uint16_t k = 0; k < S; k++) {
        reset();
        answer(c, 4, 400, att, k, XFER_OP_WRITE, 0);
        ck_assert_uint_eq(count_part(XFER_ACT_WRITE, 2), 1);
        w = find(XFER_ACT_WRITE, k);
        ck_assert_uint_eq(w->len, 50);
        ck_assert_uint_eq(w->resv_off, 40);
        ck_assert_uint_eq(w->staging_off, 5000 + 100 * k);
        /* I3 per part: part 1 back only with its last write answered */
        ck_assert_uint_eq(count(XFER_ACT_RELEASE_PART, -1), k + 1 == S);
    }
    ck_assert_uint_eq(find(XFER_ACT_RELEASE_PART, -1)->part, 1);
    ck_assert_int_eq(find(XFER_ACT_RELEASE_PART, -1)->result.status, 0);
    size_t nr;
    uint32_t spans[XFER_SHARD_MAX_FRAGMENTS + 1][2];
    ck_assert_int_eq(xfer_core_stream_ranges(c, 400, 1, spans, 10, &nr), 0);
    ck_assert_uint_eq(nr, 1);
    ck_assert_uint_eq(spans[0][0], 0);
    ck_assert_uint_eq(spans[0][1], 90);
    reset();
    for (uint16_t k = 0; k + 1 < S; k++)
        answer(c, 5, 400, att, k, XFER_OP_WRITE, 0);
    /* a commit before every part's writes answered: never */
    ck_assert_uint_eq(count(XFER_ACT_COMMIT, -1), 0);
    ck_assert_uint_eq(count(XFER_ACT_RELEASE_PART, -1), 0);
    answer(c, 5, 400, att, S - 1, XFER_OP_WRITE, 0);
    ck_assert_uint_eq(count(XFER_ACT_COMMIT, -1), S);
    ck_assert_int_lt(index_of(XFER_ACT_RELEASE_PART), index_of(XFER_ACT_COMMIT));
    ck_assert_int_eq(xfer_core_state(c, 400), XFER_TRANSFER_STATE_COMPLETING);
    ck_assert_int_eq(add_part(c, 6, 400, 90, 10, NULL), XFER_ERR_STATE);
    ck_assert_int_eq(xfer_core_seal(c, 6, 400), XFER_ERR_STATE);
    answer_all(c, 7, 400, att, XFER_OP_COMMIT, 0);
    ck_assert_int_eq(result_of(400)->status, 0);
    ck_assert_uint_eq(result_of(400)->user_data, 4000);
    ck_assert_int_eq(add_part(c, 8, 400, 90, 10, NULL), XFER_ERR_STATE);
    ck_assert_int_eq(xfer_core_seal(c, 8, 400), XFER_ERR_STATE);
    done(c);
}

/* A failed write fails the stream: no new write, every part back once its
 * writes ended (with the failure), every shard rolled back, later parts and
 * seals refused with the transfer's status. */
static void sc_stream_write_failure(void)
{
    xfer_core *c = mk(NULL);
    uint32_t p;
    ck_assert_int_eq(open_stream(c, 0, 401, 0), 0);
    uint32_t att = attempt_of(401);
    answer_all(c, 1, 401, att, XFER_OP_RESERVE, 0);
    ck_assert_int_eq(add_part(c, 2, 401, 0, 50, &p), 0);
    ck_assert_int_eq(add_part(c, 2, 401, 50, 50, &p), 0);
    reset();
    answer(c, 3, 401, att, 1, XFER_OP_WRITE, XFER_ERR_IO);
    ck_assert_uint_eq(count(XFER_ACT_WRITE, -1), 0);
    ck_assert_uint_eq(count(XFER_ACT_RELEASE_PART, -1), 1); /* part 2 */
    ck_assert_uint_eq(find(XFER_ACT_RELEASE_PART, -1)->part, 2);
    ck_assert_int_eq(find(XFER_ACT_RELEASE_PART, -1)->result.status,
                     XFER_ERR_IO);
    ck_assert_int_eq(add_part(c, 3, 401, 0, 10, NULL), XFER_ERR_IO);
    ck_assert_int_eq(xfer_core_seal(c, 3, 401), XFER_ERR_IO);
    answer(c, 4, 401, att, 0, XFER_OP_WRITE, 0);
    answer(c, 4, 401, att, 2, XFER_OP_WRITE, 0);
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), 0);
    reset();
    answer(c, 4, 401, att, 3, XFER_OP_WRITE, 0);
    ck_assert_uint_eq(count(XFER_ACT_RELEASE_PART, -1), 1);
    ck_assert_int_eq(find(XFER_ACT_RELEASE_PART, -1)->result.status,
                     XFER_ERR_IO);
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), S);
    ck_assert_int_lt(index_of(XFER_ACT_RELEASE_PART), index_of(XFER_ACT_CANCEL));
    ck_assert_int_eq(xfer_core_state(c, 401), XFER_TRANSFER_STATE_CANCELLING);
    ck_assert_int_eq(add_part(c, 5, 401, 0, 10, NULL), XFER_ERR_IO);
    ck_assert_int_eq(xfer_core_seal(c, 5, 401), XFER_ERR_IO);
    answer_all(c, 6, 401, att, XFER_OP_CANCEL, 0);
    const xfer_result *r = result_of(401);
    ck_assert_int_eq(r->status, XFER_ERR_IO);
    ck_assert_int_eq(r->phase, XFER_PHASE_WRITING);
    ck_assert_uint_eq(r->first_failed_shard, 1);
    done(c);
}

/* A stop while the stream waits for its next part (no write in flight)
 * starts the rollback at once: a deadline, a user cancel, a shutdown. */
static void sc_stream_stop_idle(unsigned how)
{
    xfer_core *c = mk(NULL);
    uint64_t id = 410 + how;
    uint32_t p;
    ck_assert_int_eq(open_stream(c, 0, id, 100 * MS), 0);
    uint32_t att = attempt_of(id);
    ck_assert_int_eq(add_part(c, 1, id, 0, 50, &p), 0);
    answer_all(c, 2, id, att, XFER_OP_RESERVE, 0);
    answer_all(c, 3, id, att, XFER_OP_WRITE, 0);
    ck_assert_uint_eq(count(XFER_ACT_RELEASE_PART, -1), 1);
    ck_assert_int_eq(add_part(c, 4, id, 50, 50, &p), 0);
    reset();
    int32_t want = XFER_ERR_TIMEOUT;
    if (how == 0) {
        /* part 2 in flight on shard 0 only: the others idle */
        for (uint16_t k = 1; k < S; k++)
            answer(c, 5, id, att, k, XFER_OP_WRITE, 0);
        xfer_core_on_timer(c, 100 * MS);
        collect(c);
        ck_assert_uint_eq(count(XFER_ACT_ABORT, -1), 1);
        ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), 0);
        answer(c, 101 * MS, id, att, 0, XFER_OP_WRITE, XFER_ERR_ABORTED);
    } else {
        answer_all(c, 5, id, att, XFER_OP_WRITE, 0);
        ck_assert_uint_eq(count(XFER_ACT_RELEASE_PART, -1), 1);
        reset();
        if (how == 1) {
            ck_assert_int_eq(xfer_core_cancel(c, 6, id), 0);
            want = XFER_ERR_CANCELLED;
        } else {
            xfer_core_shutdown(c, 6);
            xfer_core_on_timer(c, 6);
            want = XFER_ERR_SHUTDOWN;
        }
        collect(c);
        ck_assert_uint_eq(count(XFER_ACT_ABORT, -1), 0);
    }
    ck_assert_uint_eq(count(XFER_ACT_CANCEL, -1), S);
    ck_assert_int_eq(xfer_core_state(c, id), XFER_TRANSFER_STATE_CANCELLING);
    ck_assert_int_eq(add_part(c, 102 * MS, id, 0, 10, NULL), want);
    answer_all(c, 103 * MS, id, att, XFER_OP_CANCEL, 0);
    ck_assert_int_lt(index_of(XFER_ACT_RELEASE_PART),
                     index_of(XFER_ACT_COMPLETE));
    ck_assert_int_eq(result_of(id)->status, want);
    done(c);
}

/* A part that would leave a shard more disjoint written ranges than the
 * shard keeps is refused whole; one that fills the holes is taken. */
static void sc_stream_fragments(void)
{
    xfer_core *c = mk(NULL);
    ck_assert_int_eq(open_stream(c, 0, 420, 0), 0);
    xfer_range r[XFER_SHARD_MAX_FRAGMENTS + 1];
    for (uint32_t i = 0; i <= XFER_SHARD_MAX_FRAGMENTS; i++)
        r[i] = (xfer_range){.staging_off = 8 * i, .pool = 2, .len = 4,
                            .resv_off = 10 * i + 5, .shard = 1};
    ck_assert_int_eq(xfer_core_part(c, 1, 420, r, XFER_SHARD_MAX_FRAGMENTS + 1,
                                    NULL),
                     XFER_ERR_BUSY);
    ck_assert_int_eq(xfer_core_part(c, 1, 420, r, XFER_SHARD_MAX_FRAGMENTS,
                                    NULL),
                     0);
    xfer_range fill = {.staging_off = 0, .pool = 2, .len = 100, .shard = 1};
    ck_assert_int_eq(xfer_core_part(c, 1, 420, &fill, 1, NULL), 0);
    ck_assert_int_eq(xfer_core_part(c, 1, 420, r, XFER_SHARD_MAX_FRAGMENTS + 1,
                                    NULL),
                     0);
    ck_assert_int_eq(xfer_core_seal(c, 1, 420), 0); /* in RESERVING */
    ck_assert_int_eq(xfer_core_seal(c, 1, 420), XFER_ERR_STATE);
    collect(c);
    ck_assert_int_eq(xfer_core_cancel(c, 2, 420), 0);
    collect(c);
    uint32_t att = attempt_of(420);
    answer_all(c, 3, 420, att, XFER_OP_RESERVE, 0);
    ck_assert_uint_eq(count(XFER_ACT_RELEASE_PART, -1), 3);
    answer_all(c, 4, 420, att, XFER_OP_CANCEL, 0);
    ck_assert_int_eq(result_of(420)->status, XFER_ERR_CANCELLED);
    done(c);
}

/* The machine alone refuses a part of a failed stream (the container
 * makes the part for every stream that may take one by its state): with
 * no memory left, a failed stream still answers its status and a healthy
 * one NOMEM; neither takes the part (no RELEASE_PART follows). */
START_TEST(test_transfer_stream_part_refused_without_memory)
{
    tu_alloc ta;
    tu_alloc_init(&ta, -1);
    xfer_core_config cfg = scenario_cfg();
    cfg.alloc = tu_allocator(&ta);
    xfer_core *c = mk(&cfg);
    uint32_t p;
    ck_assert_int_eq(open_stream(c, 0, 401, 0), 0);
    ck_assert_int_eq(open_stream(c, 0, 402, 0), 0);
    uint32_t att = attempt_of(401);
    answer_all(c, 1, 401, att, XFER_OP_RESERVE, 0);
    ck_assert_int_eq(add_part(c, 2, 401, 0, 50, &p), 0);
    answer(c, 3, 401, att, 1, XFER_OP_WRITE, XFER_ERR_IO);
    reset();
    ta.fail_after = ta.calls; /* every allocation from here fails */
    ck_assert_int_eq(add_part(c, 3, 401, 0, 10, NULL), XFER_ERR_IO);
    ck_assert_int_eq(add_part(c, 3, 402, 0, 10, NULL), XFER_ERR_NOMEM);
    ck_assert_uint_eq(count(XFER_ACT_RELEASE_PART, -1), 0);
    ta.fail_after = -1;
    ck_assert_int_eq(add_part(c, 3, 402, 0, 10, &p), 0);
    ck_assert_uint_eq(p, 1);
    xfer_core_del(c);
    ck_assert_int_eq(ta.live, 0);
}
END_TEST

START_TEST(test_transfer_stream_success)
{
    sc_stream_success();
}
END_TEST

START_TEST(test_transfer_stream_write_failure)
{
    sc_stream_write_failure();
}
END_TEST

START_TEST(test_transfer_stream_stop_while_idle)
{
    sc_stream_stop_idle((unsigned)_i);
}
END_TEST

START_TEST(test_transfer_stream_fragments_bounded)
{
    sc_stream_fragments();
}
END_TEST

/* Every non-ILLEGAL cell of the transfer table is hit by the scenarios
 * above; a cell no scenario reaches fails here by name. */
START_TEST(test_transfer_transition_coverage)
{
    memset(cells_total, 0, sizeof cells_total);
    sc_success();
    sc_partial_reserve_failure();
    sc_partial_write_failure();
    sc_cancel_rpc_fails();
    sc_preemptive_cancel();
    sc_cancel_reserving();
    for (int k = 0; k < S; k++)
        sc_cancel_writing(k);
    sc_cancel_completing(false);
    sc_cancel_completing(true);
    sc_deadline();
    sc_cancel_timeout();
    sc_shutdown();
    sc_sync_failures();
    sc_absorbed_inputs();
    sc_eager_success();
    sc_eager_not_taken();
    sc_eager_partial_failure(XFER_ERR_NO_SPACE);
    sc_eager_stops(false);
    sc_eager_stops(true);
    sc_stream_success();
    sc_stream_write_failure();
    for (unsigned how = 0; how < 3; how++)
        sc_stream_stop_idle(how);
    sc_stream_fragments();
    int missing = 0;
    for (unsigned s = 0; s < XFER_TRANSFER_STATE_COUNT_; s++)
        for (unsigned e = 0; e < XFER_TRANSFER_EVENT_COUNT_; e++) {
            if (xfer_fsm_verdict(XFER_MACHINE_TRANSFER, s, e) == XFER_VERDICT_ILLEGAL)
                continue;
            if (cells_total[s][e] == 0) {
                printf("transfer cell never hit: %s x %s\n",
                       xfer_fsm_state_name(XFER_MACHINE_TRANSFER, s),
                       xfer_fsm_event_name(XFER_MACHINE_TRANSFER, e));
                missing++;
            }
        }
    ck_assert_int_eq(missing, 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("transfer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_transfer_success_path);
    tcase_add_test(tc, test_transfer_record_reused_after_completion);
    tcase_add_test(tc, test_transfer_partial_reservation_failure);
    tcase_add_test(tc, test_transfer_partial_write_failure);
    tcase_add_test(tc, test_transfer_cancel_rpc_failure_retried_tombstone_kept);
    tcase_add_test(tc, test_transfer_cancel_backoff_capped);
    tcase_add_test(tc, test_transfer_preemptive_cancel_rejects_submit);
    tcase_add_test(tc, test_transfer_user_cancel_reserving);
    tcase_add_loop_test(tc, test_transfer_user_cancel_writing, 0, S);
    tcase_add_loop_test(tc, test_transfer_user_cancel_completing, 0, 2);
    tcase_add_test(tc, test_transfer_deadline);
    tcase_add_test(tc, test_transfer_cancel_op_timeout);
    tcase_add_loop_test(tc, test_transfer_deadline_names_waited_shards, 0, 9);
    tcase_add_test(tc, test_transfer_failure_then_stop_names_shards);
    tcase_add_test(tc, test_transfer_shutdown_every_state);
    tcase_add_test(tc, test_transfer_sync_failure_never_completes);
    tcase_add_test(tc, test_transfer_on_result_refuses_bad_results);
    tcase_add_test(tc, test_transfer_absorbs_late_and_unknown_inputs);
    tcase_add_test(tc, test_transfer_exactly_once_random);
    tcase_add_test(tc, test_transfer_alloc_failure_each_allocation);
    tcase_add_test(tc, test_transfer_save_load_roundtrip);
    tcase_add_test(tc, test_transfer_repeated_cancel_extends_tombstone);
    tcase_add_test(tc, test_transfer_eager_success);
    tcase_add_test(tc, test_transfer_eager_needs_size_and_group);
    tcase_add_loop_test(tc, test_transfer_eager_failure_rolls_back_every_shard,
                        0, 2);
    tcase_add_loop_test(tc, test_transfer_eager_stops, 0, 2);
    tcase_add_test(tc, test_transfer_stream_success);
    tcase_add_test(tc, test_transfer_stream_part_refused_without_memory);
    tcase_add_test(tc, test_transfer_stream_write_failure);
    tcase_add_loop_test(tc, test_transfer_stream_stop_while_idle, 0, 3);
    tcase_add_test(tc, test_transfer_stream_fragments_bounded);
    tcase_add_test(tc, test_transfer_transition_coverage);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
