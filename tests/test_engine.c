/*
 * tests/test_engine.c - the engine with the loop transport: the scenarios
 * of the core engine issue end to end, with real shards, real bytes, real
 * leases and real libevent timers.  Waiting is bounded by wall time, but no
 * assertion is about time.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "enginetest.h"
#include "testutil.h"

#define MS ET_MS
#define ANY XFER_FAULT_ANY_SHARD
#define RULE(kind, op, shard, id, ppm, count, delay, err)                     \
    {(kind), (op), (shard), (id), (ppm), (count), (delay), (err)}

static et_env V;

static bool got(et_env *v, uint64_t id)
{
    return v->ncb[id] > 0;
}

static uint64_t want_id;
static bool got_want(et_env *v)
{
    return got(v, want_id);
}

static bool shards_empty(et_env *v)
{
    return et_shard_bytes(v) == 0;
}

static void run_to_end(uint64_t id)
{
    want_id = id;
    ck_assert(et_run(&V, got_want, 5000));
    ck_assert_int_eq(V.ncb[id], 1);
}

static xfer_shard_stats shard_stats(uint16_t k)
{
    xfer_shard_stats st;
    xfer_shard_stats_get(xfer_loop_shard(V.l, k), &st);
    return st;
}

START_TEST(test_engine_success_data_lands)
{
    et_init(&V, &(et_opts){0});
    ck_assert_int_eq(et_submit(&V, 1, 0), 0);
    ck_assert_int_eq(V.ncb[1], 0); /* never from inside submit */
    run_to_end(1);
    ck_assert_int_eq(V.res[1].status, 0);
    ck_assert_uint_eq(V.res[1].user_data, 1);
    ck_assert_uint_eq(V.taken, ET_S);
    ck_assert_uint_eq(V.bad_bytes, 0);
    ck_assert(et_run(&V, shards_empty, 1000));
    et_free(&V);
}
END_TEST

/* Shard 2's reserve fails; shard 1 answers before it, 0 and 3 after. */
START_TEST(test_engine_partial_reservation_failure)
{
    xfer_fault_rule r[] = {
        RULE(XFER_FAULT_DELAY, XFER_OP_RESERVE, 2, 0, 0, 0, 5 * MS, 0),
        RULE(XFER_FAULT_DELAY, XFER_OP_RESERVE, 0, 0, 0, 0, 30 * MS, 0),
        RULE(XFER_FAULT_DELAY, XFER_OP_RESERVE, 3, 0, 0, 0, 30 * MS, 0),
        RULE(XFER_FAULT_FAIL, XFER_OP_RESERVE, 2, 0, 0, 1, 0,
             XFER_ERR_NO_SPACE),
    };
    et_init(&V, &(et_opts){.rules = r, .nrules = 4});
    ck_assert_int_eq(et_submit(&V, 7, 0), 0);
    run_to_end(7);
    ck_assert_int_eq(V.res[7].status, XFER_ERR_NO_SPACE);
    ck_assert_int_eq(V.res[7].phase, XFER_PHASE_RESERVING);
    ck_assert_int_eq(V.res[7].first_failed_shard, 2);
    ck_assert_uint_eq(V.res[7].failed_shards, 1u << 2);
    /* Every shard rolled back by id, including the late successes. */
    for (uint16_t k = 0; k < ET_S; k++)
        ck_assert_uint_ge(shard_stats(k).cancels, 1);
    ck_assert_uint_eq(et_shard_bytes(&V), 0);
    et_run_for(&V, 20);
    ck_assert_int_eq(V.ncb[7], 1);
    et_free(&V);
}
END_TEST

static int unregister_in_cb_rc = 1;
static void cb_unregister(void *ud, const xfer_result *r)
{
    et_env *v = ud;
    v->ncb[r->id]++;
    v->res[r->id] = *r;
    /* I3: the staging is released by now, so the pool can go. */
    unregister_in_cb_rc = xfer_engine_unregister_pool(v->e, v->pool);
}

START_TEST(test_engine_partial_write_failure)
{
    xfer_fault_rule r[] = {
        RULE(XFER_FAULT_FAIL, XFER_OP_WRITE, 1, 0, 0, 0, 0, XFER_ERR_IO),
    };
    et_init(&V, &(et_opts){.rules = r, .nrules = 1, .write_ns = 30 * MS});
    xfer_slice sl[ET_S] = {{0, 64}, {64, 64}, {128, 64}, {192, 64}};
    xfer_transfer_desc d = {.id = 3, .group = V.group, .pool = V.pool,
                            .nslices = ET_S, .slices = sl};
    ck_assert_int_eq(xfer_engine_submit(V.e, &d, cb_unregister, &V), 0);
    /* While writes are in flight the pool is in use. */
    ck_assert_int_eq(xfer_engine_unregister_pool(V.e, V.pool), XFER_ERR_BUSY);
    want_id = 3;
    ck_assert(et_run(&V, got_want, 5000));
    ck_assert_int_eq(V.res[3].status, XFER_ERR_IO);
    ck_assert_int_eq(V.res[3].phase, XFER_PHASE_WRITING);
    ck_assert_int_eq(unregister_in_cb_rc, 0);
    ck_assert(et_run(&V, shards_empty, 1000));
    et_free(&V);
}
END_TEST

/* A cancel RPC fails twice on shard 2: the other shards get theirs, shard 2
 * is retried and finally succeeds; the tombstone stays. */
START_TEST(test_engine_cancel_rpc_failure_retried)
{
    xfer_fault_rule r[] = {
        RULE(XFER_FAULT_FAIL, XFER_OP_RESERVE, 0, 0, 0, 0, 0, XFER_ERR_REMOTE),
        RULE(XFER_FAULT_FAIL, XFER_OP_CANCEL, 2, 0, 0, 2, 0, XFER_ERR_IO),
    };
    et_init(&V, &(et_opts){.rules = r, .nrules = 2});
    ck_assert_int_eq(et_submit(&V, 9, 0), 0);
    run_to_end(9);
    ck_assert_uint_eq(V.res[9].rollback_failed, 0);
    xfer_engine_stats es;
    xfer_engine_stats_get(V.e, &es);
    ck_assert_uint_eq(es.core.cancel_retries, 2);
    ck_assert_uint_eq(shard_stats(2).cancels, 1); /* applied once */
    ck_assert_uint_eq(et_shard_bytes(&V), 0);
    ck_assert_int_eq(et_submit(&V, 9, 0), XFER_ERR_CANCELLED);
    et_free(&V);
}
END_TEST

/* The cancel RPC fails on shard 1 every time although the shard applied
 * it; then a late submit (ready) for the id: refused, nothing allocated. */
START_TEST(test_engine_cancel_failure_then_late_submit)
{
    xfer_fault_rule r[] = {
        RULE(XFER_FAULT_FAIL, XFER_OP_RESERVE, 0, 0, 0, 0, 0, XFER_ERR_REMOTE),
        RULE(XFER_FAULT_APPLIED_LOST, XFER_OP_CANCEL, 1, 0, 0, 0, 0,
             XFER_ERR_IO),
    };
    et_init(&V, &(et_opts){.rules = r, .nrules = 2});
    ck_assert_int_eq(et_submit(&V, 12, 0), 0);
    run_to_end(12);
    ck_assert_uint_eq(V.res[12].rollback_failed, 1u << 1);
    uint64_t reserves[ET_S];
    for (uint16_t k = 0; k < ET_S; k++)
        reserves[k] = shard_stats(k).reserves;
    ck_assert_int_eq(et_submit(&V, 12, 0), XFER_ERR_CANCELLED);
    et_run_for(&V, 20);
    for (uint16_t k = 0; k < ET_S; k++)
        ck_assert_uint_eq(shard_stats(k).reserves, reserves[k]);
    xfer_engine_stats es;
    xfer_engine_stats_get(V.e, &es);
    ck_assert_uint_eq(es.core.late_submits, 1);
    ck_assert_int_eq(V.ncb[12], 1);
    ck_assert_uint_eq(et_shard_bytes(&V), 0);
    et_free(&V);
}
END_TEST

START_TEST(test_engine_unknown_cancel_then_submit)
{
    et_init(&V, &(et_opts){0});
    ck_assert_int_eq(xfer_engine_cancel(V.e, 33), 0);
    ck_assert_int_eq(xfer_engine_cancel(V.e, 33), 0);
    ck_assert_int_eq(et_submit(&V, 33, 0), XFER_ERR_CANCELLED);
    et_run_for(&V, 10);
    ck_assert_int_eq(V.ncb[33], 0);
    for (uint16_t k = 0; k < ET_S; k++)
        ck_assert_uint_eq(shard_stats(k).reserves, 0);
    et_free(&V);
}
END_TEST

/* The lease runs out while a write is in flight: the memory stays until the
 * write ends, then it is freed and the producer rolls back. */
START_TEST(test_engine_lease_expiry_during_write)
{
    et_init(&V, &(et_opts){.write_ns = 150 * MS, .lease_ns = 40 * MS});
    ck_assert_int_eq(et_submit(&V, 5, 0), 0);
    et_run_for(&V, 80); /* lease ran out, write still in flight */
    ck_assert_int_eq(xfer_shard_state(xfer_loop_shard(V.l, 0), 5),
                     XFER_RESV_STATE_EXPIRE_PENDING);
    ck_assert_uint_eq(et_shard_bytes(&V), ET_S * ET_BLK);
    run_to_end(5);
    ck_assert_int_ne(V.res[5].status, 0);
    ck_assert_uint_eq(et_shard_bytes(&V), 0);
    ck_assert_int_eq(xfer_shard_state(xfer_loop_shard(V.l, 0), 5),
                     XFER_RESV_STATE_EXPIRED);
    et_free(&V);
}
END_TEST

/* Committed data nobody takes: the READY lease frees it at once. */
START_TEST(test_engine_lease_expiry_no_write)
{
    et_init(&V, &(et_opts){.lease_ns = 40 * MS});
    V.consumer_takes = 0;
    ck_assert_int_eq(et_submit(&V, 6, 0), 0);
    run_to_end(6);
    ck_assert_int_eq(V.res[6].status, 0);
    ck_assert_uint_eq(et_shard_bytes(&V), ET_S * ET_BLK);
    ck_assert(et_run(&V, shards_empty, 2000));
    ck_assert_int_eq(xfer_shard_state(xfer_loop_shard(V.l, 1), 6),
                     XFER_RESV_STATE_EXPIRED);
    et_free(&V);
}
END_TEST

/* Exactly one completion on every exit path. */
START_TEST(test_engine_completion_exactly_once_every_path)
{
    xfer_fault_rule r[] = {
        RULE(XFER_FAULT_FAIL, XFER_OP_RESERVE, 1, 2, 0, 0, 0, XFER_ERR_REMOTE),
        RULE(XFER_FAULT_FAIL, XFER_OP_WRITE, 2, 3, 0, 0, 0, XFER_ERR_IO),
        RULE(XFER_FAULT_FAIL, XFER_OP_COMMIT, 3, 4, 0, 0, 0, XFER_ERR_IO),
        RULE(XFER_FAULT_DELAY, XFER_OP_RESERVE, ANY, 5, 0, 0, 50 * MS, 0),
        RULE(XFER_FAULT_DROP, XFER_OP_WRITE, 0, 6, 0, 0, 0, 0),
        RULE(XFER_FAULT_DELAY, XFER_OP_RESERVE, ANY, 7, 0, 0, 200 * MS, 0),
    };
    et_init(&V, &(et_opts){.rules = r, .nrules = 6});
    for (uint64_t id = 1; id <= 7; id++)
        ck_assert_int_eq(et_submit(&V, id, id == 6 ? 60 * MS : 0), 0);
    ck_assert_int_eq(xfer_engine_cancel(V.e, 5), 0);
    /* a submit that fails synchronously never calls back */
    xfer_slice sl[ET_S] = {{0, 1}, {1, 1}, {2, 1}, {3, 1}};
    xfer_transfer_desc bad = {.id = 8, .group = 99, .pool = V.pool,
                              .nslices = ET_S, .slices = sl};
    ck_assert_int_eq(xfer_engine_submit(V.e, &bad, NULL, NULL),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(et_submit(&V, 1, 0), XFER_ERR_EXISTS);
    want_id = 6;
    ck_assert(et_run(&V, got_want, 5000));
    ck_assert_int_eq(xfer_engine_shutdown(V.e, NULL, NULL), 0); /* id 7 */
    ck_assert(et_run(&V, et_all_done, 5000));
    int expect[] = {0, 0, XFER_ERR_REMOTE, XFER_ERR_IO, XFER_ERR_IO,
                    XFER_ERR_CANCELLED, XFER_ERR_TIMEOUT, XFER_ERR_SHUTDOWN};
    for (uint64_t id = 1; id <= 7; id++) {
        ck_assert_int_eq(V.ncb[id], 1);
        ck_assert_int_eq(V.res[id].status, expect[id]);
    }
    ck_assert(V.res[4].consumer_may_hold);
    ck_assert_int_eq(V.ncb[8], 0);
    et_run_for(&V, 30);
    ck_assert_int_eq(V.total_cb, 7);
    et_free(&V);
}
END_TEST

static void on_shutdown(void *ud)
{
    et_env *v = ud;
    xfer_engine_stats es;
    xfer_engine_stats_get(v->e, &es);
    v->shutdown_calls++;
    v->pools_at_shutdown = es.pools;
    v->completions_at_shutdown = v->total_cb;
}

static bool shut(et_env *v)
{
    return v->shutdown_calls > 0;
}

/* Shutdown with one transfer in each state: all complete, then every pool
 * is unregistered, then the shutdown callback runs. */
START_TEST(test_engine_shutdown_every_state)
{
    xfer_fault_rule r[] = {
        RULE(XFER_FAULT_DROP, XFER_OP_RESERVE, 0, 1, 0, 0, 0, 0),
        RULE(XFER_FAULT_DELAY, XFER_OP_WRITE, ANY, 2, 0, 0, 2000 * MS, 0),
        RULE(XFER_FAULT_DELAY, XFER_OP_COMMIT, 1, 3, 0, 0, 100 * MS, 0),
        RULE(XFER_FAULT_FAIL, XFER_OP_RESERVE, 0, 4, 0, 0, 0, XFER_ERR_REMOTE),
        RULE(XFER_FAULT_DELAY, XFER_OP_CANCEL, ANY, 4, 0, 0, 100 * MS, 0),
    };
    et_init(&V, &(et_opts){.rules = r, .nrules = 5});
    for (uint64_t id = 1; id <= 4; id++)
        ck_assert_int_eq(et_submit(&V, id, 0), 0);
    et_run_for(&V, 30);
    ck_assert_int_eq(xfer_core_state(xfer_engine_core(V.e), 1),
                     XFER_TRANSFER_STATE_RESERVING);
    ck_assert_int_eq(xfer_core_state(xfer_engine_core(V.e), 2),
                     XFER_TRANSFER_STATE_WRITING);
    ck_assert_int_eq(xfer_core_state(xfer_engine_core(V.e), 3),
                     XFER_TRANSFER_STATE_COMPLETING);
    ck_assert_int_eq(xfer_core_state(xfer_engine_core(V.e), 4),
                     XFER_TRANSFER_STATE_CANCELLING);
    ck_assert_int_eq(xfer_engine_shutdown(V.e, on_shutdown, &V), 0);
    ck_assert_int_eq(xfer_engine_shutdown(V.e, on_shutdown, &V),
                     XFER_ERR_STATE);
    ck_assert_int_eq(et_submit(&V, 10, 0), XFER_ERR_SHUTDOWN);
    ck_assert(et_run(&V, shut, 5000));
    for (uint64_t id = 1; id <= 4; id++)
        ck_assert_int_eq(V.ncb[id], 1);
    ck_assert_int_eq(V.res[3].status, 0); /* commits were in flight */
    ck_assert_int_eq(V.res[1].status, XFER_ERR_SHUTDOWN);
    ck_assert_int_eq(V.completions_at_shutdown, 4);
    ck_assert_uint_eq(V.pools_at_shutdown, 0);
    ck_assert_int_eq(V.shutdown_calls, 1);
    et_free(&V);
}
END_TEST

/* The readiness tracker as the consumer scheduler: S ready events give one
 * AVAILABLE, after every shard was taken. */
static xfer_readiness *RT;
static int available, unavailable;

/* Perform the tracker's actions until it is quiet (a take result may
 * produce more). */
static void ready_drain(void)
{
    for (;;) {
        size_t n;
        const xfer_ready_action *a = xfer_readiness_actions(RT, &n);
        if (n == 0)
            return;
        xfer_ready_action acts[64];
        ck_assert_uint_le(n, 64);
        memcpy(acts, a, n * sizeof *acts);
        xfer_readiness_actions_clear(RT);
        for (size_t i = 0; i < n; i++) {
            available += acts[i].kind == XFER_READY_ACT_AVAILABLE;
            unavailable += acts[i].kind == XFER_READY_ACT_UNAVAILABLE;
            if (acts[i].kind != XFER_READY_ACT_TAKE)
                continue;
            const uint8_t *data;
            uint32_t len;
            xfer_shard *s = xfer_loop_shard(V.l, acts[i].shard);
            int rc = xfer_shard_take(s, 0, acts[i].id, acts[i].resv_id, &data,
                                     &len);
            xfer_readiness_on_take_result(RT, 0, acts[i].id, acts[i].shard,
                                          rc);
        }
    }
}

static void ready_event(void *ud, const xfer_shard_event *ev)
{
    if (ev->kind == XFER_SHARD_EV_READY)
        xfer_readiness_on_ready(RT, 0, ev->id, ev->attempt, ev->shard,
                                ev->resv_id);
    ready_drain();
}

START_TEST(test_engine_readiness_available_once)
{
    xfer_readiness_config rc = {.nshards = ET_S};
    ck_assert_int_eq(xfer_readiness_new(&rc, &RT), 0);
    et_init(&V, &(et_opts){.on_event = ready_event});
    ck_assert_int_eq(et_submit(&V, 2, 0), 0);
    run_to_end(2);
    et_run_for(&V, 20);
    ck_assert_int_eq(available, 1);
    ck_assert_int_eq(unavailable, 0);
    ck_assert_int_eq(xfer_readiness_state(RT, 2), XFER_READY_STATE_AVAILABLE);
    for (uint16_t k = 0; k < ET_S; k++)
        ck_assert_int_eq(xfer_shard_state(xfer_loop_shard(V.l, k), 2),
                         XFER_RESV_STATE_TAKEN);
    xfer_readiness_del(RT);
    et_free(&V);
}
END_TEST

/* Submits posted from another thread through the mailbox. */
static int mail_done;
static void et_mail_done(void *ud, const xfer_result *r)
{
    et_env *v = ud;
    v->ncb[r->id]++;
    mail_done++;
}

static void *poster(void *arg)
{
    et_env *v = arg;
    static xfer_slice sl[ET_S] = {{0, 8}, {8, 8}, {16, 8}, {24, 8}};
    for (uint64_t id = 100; id < 200; id++) {
        xfer_transfer_desc d = {.id = id, .group = v->group, .pool = v->pool,
                                .nslices = ET_S, .slices = sl};
        while (xfer_engine_post_submit(v->e, &d, et_mail_done, v) ==
               XFER_ERR_BUSY) {
        }
    }
    return NULL;
}

static bool all_mail(et_env *v)
{
    return mail_done == 100;
}

START_TEST(test_engine_mailbox_from_another_thread)
{
    et_init(&V, &(et_opts){0});
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, poster, &V), 0);
    ck_assert(et_run(&V, all_mail, 10000));
    pthread_join(th, NULL);
    for (uint64_t id = 100; id < 200; id++)
        ck_assert_int_eq(V.ncb[id], 1);
    et_free(&V);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("loop");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_engine_success_data_lands);
    tcase_add_test(tc, test_engine_partial_reservation_failure);
    tcase_add_test(tc, test_engine_partial_write_failure);
    tcase_add_test(tc, test_engine_cancel_rpc_failure_retried);
    tcase_add_test(tc, test_engine_cancel_failure_then_late_submit);
    tcase_add_test(tc, test_engine_unknown_cancel_then_submit);
    tcase_add_test(tc, test_engine_lease_expiry_during_write);
    tcase_add_test(tc, test_engine_lease_expiry_no_write);
    tcase_add_test(tc, test_engine_completion_exactly_once_every_path);
    tcase_add_test(tc, test_engine_shutdown_every_state);
    tcase_add_test(tc, test_engine_readiness_available_once);
    tcase_add_test(tc, test_engine_mailbox_from_another_thread);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
