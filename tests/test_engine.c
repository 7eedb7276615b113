/*
 * tests/test_engine.c - the engine with the loop transport: the scenarios
 * of the core engine issue end to end, with real shards, real bytes, real
 * leases and real libevent timers.  Waiting is bounded by wall time, but no
 * assertion is about time.
 */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

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
    ck_assert_int_eq(et_submit(&V, 9, 0), XFER_ERR_REUSED);
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
    ck_assert_int_eq(et_submit(&V, 12, 0), XFER_ERR_REUSED);
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
    xfer_readiness_config rc;
    xfer_readiness_config_default(&rc);
    rc.nshards = ET_S;
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

/* ---------------------------------------------------------------------- */
/* Posted submits the loop refuses: exactly one callback each (I1)         */
/* ---------------------------------------------------------------------- */

/* What one post is, and so which completion it must get. */
enum { FK_TOMB, FK_GROUP, FK_SHAPE, FK_VALID, FK_COUNT_ };

typedef struct flood {
    uint64_t nids;      /* ids 1..nids may be posted */
    uint8_t *kind;      /* per id: FK_*; 0xff: never posted */
    uint32_t *ncb;      /* per id: callbacks */
    xfer_result *res;   /* per id: the last result */
    uint64_t posted, delivered, refused_seen, busy, accepted;
    bool after_shutdown;
    uint64_t bad; /* callbacks with a wrong id, status or phase */
} flood;

static flood F;

static void flood_cb(void *ud, const xfer_result *r)
{
    flood *f = ud;
    if (r->id == 0 || r->id > f->nids || r->user_data != r->id) {
        f->bad++;
        return;
    }
    f->ncb[r->id]++;
    f->res[r->id] = *r;
    f->delivered++;
    if (r->phase == XFER_PHASE_SUBMIT)
        f->refused_seen++;
}

static bool flood_delivered(et_env *v)
{
    return F.delivered == F.posted;
}

static uint64_t refused_want;
static bool flood_refusals_in(et_env *v)
{
    return F.refused_seen >= refused_want;
}

static void flood_post(uint64_t id, unsigned kind)
{
    static xfer_slice sl[ET_S] = {{0, 64}, {64, 64}, {128, 64}, {192, 64}};
    xfer_transfer_desc d = {.id = id, .group = V.group, .pool = V.pool,
                            .nslices = ET_S, .slices = sl, .user_data = id};
    if (kind == FK_TOMB)
        ck_assert_int_eq(xfer_engine_cancel(V.e, id), 0);
    else if (kind == FK_GROUP)
        d.group = 99;
    else if (kind == FK_SHAPE)
        d.nslices = 1;
    F.kind[id] = (uint8_t)kind;
    ck_assert_int_eq(xfer_engine_post_submit(V.e, &d, flood_cb, &F), 0);
    F.posted++;
}

/* The completion a post must get. */
static void flood_check(uint64_t id)
{
    const xfer_result *r = &F.res[id];
    ck_assert_uint_eq(F.ncb[id], 1);
    if (F.kind[id] == FK_VALID && r->phase != XFER_PHASE_SUBMIT) {
        F.accepted++; /* a live transfer: it ended its own way */
        ck_assert_uint_ne(r->attempt, 0);
        return;
    }
    ck_assert_int_eq(r->phase, XFER_PHASE_SUBMIT);
    ck_assert_uint_eq(r->attempt, 0);
    ck_assert_uint_eq(r->failed_shards, 0);
    ck_assert_uint_eq(r->first_failed_shard, XFER_SHARD_NONE);
    static const int expect[FK_COUNT_] = {
        XFER_ERR_CANCELLED, XFER_ERR_NO_POOL, XFER_ERR_INVALID_ARG,
        XFER_ERR_BUSY};
    ck_assert_int_eq(r->status, expect[F.kind[id]]);
    F.busy += F.kind[id] == FK_VALID;
}

/*
 * Flood the mailbox: `drains` batches of `per_drain` posts, each batch
 * drained by one mailbox wake-up, three in four of them refused (a
 * tombstoned id, an unknown group, a wrong slice count) and one in four
 * valid (accepted while a slot is free, else refused BUSY).  Writes stay
 * in flight for 20 ms, so live transfers of one batch complete while the
 * refusals of the next are delivered.  Then shutdown, and one more batch:
 * every one of those is refused SHUTDOWN, whatever its desc says.
 */
static void flood_run(uint32_t max_transfers, uint32_t per_drain,
                      unsigned drains)
{
    et_init(&V, &(et_opts){.write_ns = 20 * MS,
                           .max_transfers = max_transfers,
                           .mailbox_cap = per_drain + 16});
    memset(&F, 0, sizeof F);
    F.nids = (uint64_t)per_drain * (drains + 1);
    F.kind = malloc(F.nids + 1);
    F.ncb = calloc(F.nids + 1, sizeof *F.ncb);
    F.res = calloc(F.nids + 1, sizeof *F.res);
    ck_assert(F.kind && F.ncb && F.res);
    memset(F.kind, 0xff, F.nids + 1);
    uint64_t id = 0;
    for (unsigned b = 0; b < drains; b++) {
        for (uint32_t i = 0; i < per_drain; i++, id++)
            flood_post(id + 1, (unsigned)((id + 1) % FK_COUNT_));
        /* One wake-up drains the batch; let some live transfers end
         * before the next one. */
        refused_want = F.refused_seen + per_drain / 4 * 3;
        ck_assert(et_run(&V, flood_refusals_in, 10000));
        et_run_for(&V, 8);
    }
    ck_assert(et_run(&V, flood_delivered, 30000));
    ck_assert_int_eq(xfer_engine_shutdown(V.e, NULL, NULL), 0);
    et_run_for(&V, 5);
    for (uint32_t i = 0; i < per_drain; i++, id++)
        flood_post(id + 1, (unsigned)((id + 1) % FK_COUNT_));
    ck_assert(et_run(&V, flood_delivered, 30000));
    et_run_for(&V, 30); /* nothing more may come */

    ck_assert_uint_eq(F.bad, 0);
    ck_assert_uint_eq(F.delivered, F.posted);
    uint64_t before_shutdown = (uint64_t)per_drain * drains;
    for (uint64_t i = 1; i <= before_shutdown; i++)
        flood_check(i);
    for (uint64_t i = before_shutdown + 1; i <= id; i++) {
        ck_assert_uint_eq(F.ncb[i], 1);
        ck_assert_int_eq(F.res[i].status, XFER_ERR_SHUTDOWN);
        ck_assert_int_eq(F.res[i].phase, XFER_PHASE_SUBMIT);
    }
    xfer_engine_stats es;
    xfer_engine_stats_get(V.e, &es);
    ck_assert_uint_eq(es.completions_delivered, F.posted);
    ck_assert_uint_eq(es.posts_refused, F.posted - F.accepted);
    ck_assert_uint_eq(es.staging_bytes_in_use, 0);
    ck_assert_uint_gt(F.accepted, 0);
    if (max_transfers != ET_DEFAULT)
        ck_assert_uint_gt(F.busy, 0); /* the cap was hit */
    printf("flood max_transfers %s: %" PRIu64 " posts, %" PRIu64
           " accepted, %" PRIu64 " refused BUSY, each completed once\n",
           max_transfers == ET_DEFAULT ? "default" : "4", F.posted,
           F.accepted, F.busy);
    free(F.kind);
    free(F.ncb);
    free(F.res);
    et_free(&V);
}

/* max_transfers 4: 12 posts per drain, 9 refused, more than the cap. */
START_TEST(test_engine_refused_posts_complete_once_small_cap)
{
    flood_run(4, 12, 6);
}
END_TEST

/* The default cap (65536): 90 000 posts in one drain, 67 500 refused, then
 * a second drain, with thousands of live transfers among them. */
START_TEST(test_engine_refused_posts_complete_once_default_cap)
{
    flood_run(ET_DEFAULT, 90000, 2);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Refusal codes, the deadline's names, the staging figure, idleness        */
/* ---------------------------------------------------------------------- */

/* After shutdown every submit says SHUTDOWN, even one whose pool the
 * shutdown already unregistered or whose group does not exist. */
START_TEST(test_engine_submit_after_shutdown_says_shutdown)
{
    et_init(&V, &(et_opts){0});
    ck_assert_int_eq(xfer_engine_shutdown(V.e, on_shutdown, &V), 0);
    ck_assert(et_run(&V, shut, 5000));
    ck_assert_uint_eq(V.pools_at_shutdown, 0);
    xfer_slice sl[ET_S] = {{0, 8}, {8, 8}, {16, 8}, {24, 8}};
    xfer_transfer_desc d = {.id = 3, .group = V.group, .pool = V.pool,
                            .nslices = ET_S, .slices = sl};
    ck_assert_int_eq(xfer_engine_submit(V.e, &d, et_mail_done, &V),
                     XFER_ERR_SHUTDOWN);
    d.group = 99;
    ck_assert_int_eq(xfer_engine_submit(V.e, &d, et_mail_done, &V),
                     XFER_ERR_SHUTDOWN);
    ck_assert_int_eq(xfer_engine_submit(V.e, NULL, et_mail_done, &V),
                     XFER_ERR_INVALID_ARG);
    et_run_for(&V, 10);
    ck_assert_int_eq(V.ncb[3], 0);
    et_free(&V);
}
END_TEST

/*
 * The deadline fires in each phase while some shards have not answered;
 * the loop transport answers the aborts its own way: ABORTED for an op
 * still queued (shards 1 and 3 are delayed), the real result for a write
 * that has begun (in WRITING, shard 0's write succeeds and shard 2's fails
 * through an APPLIED_LOST rule, both after the deadline).  The result
 * names exactly the shards that had not answered when it fired, whatever
 * they answered.  _i: 0 RESERVING, 1 WRITING, 2 COMPLETING.
 */
START_TEST(test_engine_deadline_names_waited_shards)
{
    static const uint8_t ops[] = {XFER_OP_RESERVE, XFER_OP_WRITE,
                                  XFER_OP_COMMIT};
    uint8_t op = ops[_i];
    xfer_fault_rule r[] = {
        RULE(XFER_FAULT_DELAY, op, 1, 0, 0, 0, 1000 * MS, 0),
        RULE(XFER_FAULT_DELAY, op, 3, 0, 0, 0, 1000 * MS, 0),
        RULE(XFER_FAULT_APPLIED_LOST, XFER_OP_WRITE, 2, 0, 0, 0, 0,
             XFER_ERR_IO),
    };
    /* WRITING: a begun write stays in flight well past the deadline (the
     * margins are wide so that a loaded machine keeps the order). */
    et_init(&V, &(et_opts){.rules = r, .nrules = _i == 1 ? 3 : 2,
                           .write_ns = _i == 1 ? 1000 * MS : 0});
    ck_assert_int_eq(et_submit(&V, 4, 60 * MS), 0);
    run_to_end(4);
    const xfer_result *res = &V.res[4];
    ck_assert_int_eq(res->status, XFER_ERR_TIMEOUT);
    ck_assert_int_eq(res->phase, XFER_PHASE_RESERVING + _i);
    uint64_t waited = _i == 1 ? 0xf : (1u << 1) | (1u << 3);
    ck_assert_uint_eq(res->failed_shards, waited);
    ck_assert_uint_eq(res->first_failed_shard, _i == 1 ? 0 : 1);
    ck_assert_int_eq(res->consumer_may_hold, _i == 2);
    ck_assert(et_run(&V, shards_empty, 2000));
    et_free(&V);
}
END_TEST

/* The staging figure of the engine stats, sampled in every callback. */
static uint64_t staging_in_cb[ET_MAXID];
static int unreg_in_cb[ET_MAXID];
static void cb_staging(void *ud, const xfer_result *r)
{
    et_env *v = ud;
    xfer_engine_stats es;
    xfer_engine_stats_get(v->e, &es);
    v->ncb[r->id]++;
    v->res[r->id] = *r;
    staging_in_cb[r->id] = es.staging_bytes_in_use;
    unreg_in_cb[r->id] = xfer_engine_unregister_pool(v->e, v->pool);
    v->total_cb++;
}

static uint64_t staging_now(void)
{
    xfer_engine_stats es;
    xfer_engine_stats_get(V.e, &es);
    return es.staging_bytes_in_use;
}

static void submit_staging(uint64_t id, uint32_t len)
{
    xfer_slice sl[ET_S];
    for (uint16_t k = 0; k < ET_S; k++)
        sl[k] = (xfer_slice){(id * ET_S + k) * ET_BLK, len};
    xfer_transfer_desc d = {.id = id, .group = V.group, .pool = V.pool,
                            .nslices = ET_S, .slices = sl};
    ck_assert_int_eq(xfer_engine_submit(V.e, &d, cb_staging, &V), 0);
}

static bool state_is_cancelling(et_env *v)
{
    return xfer_core_state(xfer_engine_core(v->e), want_id) ==
           XFER_TRANSFER_STATE_CANCELLING;
}

/*
 * staging_bytes_in_use counts a transfer's slices from its submit until
 * its staging region is released, and only then: while writes are in
 * flight, and while the roll-back of a failed write still runs, the bytes
 * count and the pool is busy; in the completion callback they are gone
 * and (with no other transfer) the pool can go.
 */
START_TEST(test_engine_staging_figure_is_release)
{
    xfer_fault_rule r[] = {
        RULE(XFER_FAULT_FAIL, XFER_OP_WRITE, 1, 2, 0, 0, 0, XFER_ERR_IO),
        RULE(XFER_FAULT_DELAY, XFER_OP_CANCEL, ANY, 2, 0, 0, 600 * MS, 0),
    };
    et_init(&V, &(et_opts){.rules = r, .nrules = 2, .write_ns = 30 * MS});
    submit_staging(1, 100);
    submit_staging(2, 50);
    ck_assert_uint_eq(staging_now(), ET_S * 150);
    want_id = 2;
    ck_assert(et_run(&V, state_is_cancelling, 5000));
    /* 2's writes drained, its region is not released: still counted. */
    ck_assert_uint_ge(staging_now(), ET_S * 50);
    ck_assert_int_eq(xfer_engine_unregister_pool(V.e, V.pool),
                     XFER_ERR_BUSY);
    want_id = 2;
    ck_assert(et_run(&V, got_want, 5000));
    ck_assert_int_eq(V.res[1].status, 0);
    ck_assert_int_eq(V.res[2].status, XFER_ERR_IO);
    /* 1 ended first (2's cancels were delayed): 2 still counted then. */
    ck_assert_uint_eq(staging_in_cb[1], ET_S * 50);
    ck_assert_int_eq(unreg_in_cb[1], XFER_ERR_BUSY);
    ck_assert_uint_eq(staging_in_cb[2], 0);
    ck_assert_int_eq(unreg_in_cb[2], 0);
    ck_assert_uint_eq(staging_now(), 0);
    et_free(&V);
}
END_TEST

static int idle_calls, idle_seen_cb;
static bool idle_seen_idle;
static void on_idle_cb(void *ud)
{
    et_env *v = ud;
    idle_calls++;
    idle_seen_cb = v->total_cb;
    idle_seen_idle = xfer_engine_idle(v->e);
}

static bool idled(et_env *v)
{
    return idle_calls > 0;
}

/* The idle signal: a query, and a one-shot callback from the loop once no
 * transfer is live and nothing is queued (completions delivered first). */
START_TEST(test_engine_idle_signal)
{
    et_init(&V, &(et_opts){.write_ns = 10 * MS});
    ck_assert(xfer_engine_idle(V.e));
    ck_assert_int_eq(xfer_engine_on_idle(V.e, on_idle_cb, &V), 0);
    ck_assert_int_eq(idle_calls, 0); /* never from inside the call */
    ck_assert(et_run(&V, idled, 1000));
    ck_assert_int_eq(idle_calls, 1);

    idle_calls = 0;
    for (uint64_t id = 1; id <= 5; id++)
        ck_assert_int_eq(et_submit(&V, id, 0), 0);
    ck_assert(!xfer_engine_idle(V.e));
    ck_assert_int_eq(xfer_engine_on_idle(V.e, on_idle_cb, &V), 0);
    ck_assert(et_run(&V, idled, 5000));
    ck_assert_int_eq(idle_seen_cb, 5); /* after every completion */
    ck_assert(idle_seen_idle);
    et_run_for(&V, 20);
    ck_assert_int_eq(idle_calls, 1); /* one-shot */

    /* A posted submit keeps the engine busy until its completion is
     * delivered; a posted cancel until it is drained. */
    idle_calls = 0;
    xfer_slice sl[ET_S] = {{0, 8}, {8, 8}, {16, 8}, {24, 8}};
    xfer_transfer_desc d = {.id = 6, .group = V.group, .pool = V.pool,
                            .nslices = ET_S, .slices = sl};
    ck_assert_int_eq(xfer_engine_post_submit(V.e, &d, et_mail_done, &V), 0);
    ck_assert(!xfer_engine_idle(V.e));
    ck_assert_int_eq(xfer_engine_on_idle(V.e, on_idle_cb, &V), 0);
    ck_assert(et_run(&V, idled, 5000));
    ck_assert_int_eq(V.ncb[6], 1);
    idle_calls = 0;
    ck_assert_int_eq(xfer_engine_post_cancel(V.e, 7), 0);
    ck_assert(!xfer_engine_idle(V.e));
    ck_assert_int_eq(xfer_engine_on_idle(V.e, on_idle_cb, &V), 0);
    ck_assert(et_run(&V, idled, 5000));
    ck_assert_int_eq(xfer_core_state(xfer_engine_core(V.e), 7),
                     XFER_TRANSFER_STATE_TOMBSTONED);

    /* Removed before it fires: never called. */
    idle_calls = 0;
    ck_assert_int_eq(et_submit(&V, 8, 0), 0);
    ck_assert_int_eq(xfer_engine_on_idle(V.e, on_idle_cb, &V), 0);
    ck_assert_int_eq(xfer_engine_on_idle(V.e, NULL, NULL), 0);
    ck_assert(et_run(&V, et_all_done, 5000));
    et_run_for(&V, 20);
    ck_assert_int_eq(idle_calls, 0);
    ck_assert_int_eq(xfer_engine_on_idle(NULL, on_idle_cb, &V),
                     XFER_ERR_INVALID_ARG);
    et_free(&V);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Calls posted to the loop (xfer_engine_post_call)                        */
/* ---------------------------------------------------------------------- */

/* What each posted call saw when it ran. */
typedef struct call_rec {
    int runs;
    int on_loop;           /* ran on the thread that runs the loop */
    uint8_t state_of_id;   /* xfer_core_state of id 300 when it ran */
    int order;             /* its rank among the calls that ran */
} call_rec;

static pthread_t loop_thread;
static int calls_ran, shut_done;
static call_rec calls[3];
static xfer_result call_res;

static void call_submit_done(void *ud, const xfer_result *r)
{
    et_env *v = ud;
    v->ncb[r->id]++;
    call_res = *r;
}

static void posted_call(void *ud)
{
    call_rec *c = ud;
    c->runs++;
    c->on_loop = pthread_equal(pthread_self(), loop_thread);
    c->state_of_id = (uint8_t)xfer_core_state(xfer_engine_core(V.e), 300);
    c->order = calls_ran++;
}

/* Posts call, submit 300, call, cancel 300, call from another thread. */
static void *call_poster(void *arg)
{
    et_env *v = arg;
    static xfer_slice sl[ET_S] = {{0, 8}, {8, 8}, {16, 8}, {24, 8}};
    xfer_transfer_desc d = {.id = 300, .group = v->group, .pool = v->pool,
                            .nslices = ET_S, .slices = sl};
    ck_assert_int_eq(xfer_engine_post_call(v->e, posted_call, &calls[0]), 0);
    ck_assert_int_eq(xfer_engine_post_submit(v->e, &d, call_submit_done, v),
                     0);
    ck_assert_int_eq(xfer_engine_post_call(v->e, posted_call, &calls[1]), 0);
    ck_assert_int_eq(xfer_engine_post_cancel(v->e, 300), 0);
    ck_assert_int_eq(xfer_engine_post_call(v->e, posted_call, &calls[2]), 0);
    return NULL;
}

static bool calls_done(et_env *v)
{
    return calls_ran == 3 && v->ncb[300] == 1;
}

static void call_shut_done(void *ud)
{
    shut_done++;
}

static void shutdown_from_call(void *ud)
{
    et_env *v = ud;
    ck_assert_int_eq(xfer_engine_shutdown(v->e, call_shut_done, v), 0);
}

static bool call_shut(et_env *v)
{
    return shut_done > 0;
}

static void never_runs(void *ud)
{
    (*(int *)ud)++;
}

/* A posted call runs once, on the loop, in mailbox order with posted
 * submits and cancels; it may call loop-thread functions (shutdown); it
 * keeps the engine busy until it ran; refusals never call it. */
START_TEST(test_engine_post_call_runs_once_on_loop_in_order)
{
    et_init(&V, &(et_opts){.write_ns = 20 * MS});
    loop_thread = pthread_self();
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, call_poster, &V), 0);
    pthread_join(th, NULL);
    ck_assert_int_eq(calls_ran, 0); /* nothing runs until the loop does */
    ck_assert(!xfer_engine_idle(V.e));
    ck_assert(et_run(&V, calls_done, 5000));
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(calls[i].runs, 1);
        ck_assert(calls[i].on_loop);
        ck_assert_int_eq(calls[i].order, i);
    }
    ck_assert_uint_eq(calls[0].state_of_id, XFER_TRANSFER_STATE_NEW);
    ck_assert_uint_eq(calls[1].state_of_id, XFER_TRANSFER_STATE_RESERVING);
    ck_assert_uint_ne(calls[2].state_of_id, XFER_TRANSFER_STATE_NEW);
    ck_assert_int_eq(call_res.status, XFER_ERR_CANCELLED);

    int ran = 0;
    ck_assert_int_eq(xfer_engine_post_call(NULL, never_runs, &ran),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_engine_post_call(V.e, NULL, &ran),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_engine_post_call(V.e, shutdown_from_call, &V), 0);
    ck_assert(et_run(&V, call_shut, 5000));
    et_run_for(&V, 20);
    ck_assert_int_eq(shut_done, 1);
    ck_assert_int_eq(V.ncb[300], 1);
    ck_assert_int_eq(ran, 0);
    et_free(&V);
}
END_TEST

/* A full mailbox refuses a call (BUSY, never called); a call still queued
 * when the engine is deleted is dropped without being called (and without
 * a leak, under ASan). */
START_TEST(test_engine_post_call_full_and_dropped)
{
    et_init(&V, &(et_opts){.mailbox_cap = 2});
    int ran = 0;
    ck_assert_int_eq(xfer_engine_post_call(V.e, never_runs, &ran), 0);
    ck_assert_int_eq(xfer_engine_post_cancel(V.e, 9), 0);
    ck_assert_int_eq(xfer_engine_post_call(V.e, never_runs, &ran),
                     XFER_ERR_BUSY);
    et_run_for(&V, 20);
    ck_assert_int_eq(ran, 1);
    ck_assert_int_eq(xfer_engine_post_call(V.e, never_runs, &ran), 0);
    et_free(&V); /* still queued: dropped */
    ck_assert_int_eq(ran, 1);
}
END_TEST

/* With the library's own clock, the replies one loop run hands the engine
 * are one batch with one clock reading: several inputs carry the same
 * time, and times never go backwards.  (An injected clock is read on every
 * input, as the golden traces and test_determinism check.) */
static int batch_done;
static void on_batch_done(void *ud, const xfer_result *r)
{
    (void)ud;
    ck_assert_int_eq(r->status, 0);
    batch_done++;
}

START_TEST(test_engine_own_clock_read_once_per_batch)
{
    tu_trace tr = {0};
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.core.trace = tu_trace_sink(&tr);
    xfer_engine *e = NULL;
    ck_assert_int_eq(xfer_engine_new(&ec, &e), 0);
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = 4;
    lc.shard.pool_bytes = 1 << 16;
    xfer_loop *l = NULL;
    ck_assert_int_eq(xfer_loop_new(xfer_engine_base(e), &lc, &l), 0);
    static uint8_t staging[4 * 64];
    uint32_t pool, group;
    ck_assert_int_eq(xfer_engine_register_pool(e, staging, sizeof staging,
                                               &pool), 0);
    ck_assert_int_eq(xfer_engine_add_group(e, xfer_loop_transport(l),
                                           &group), 0);
    const xfer_slice sl[4] = {{0, 64}, {64, 64}, {128, 64}, {192, 64}};
    batch_done = 0;
    for (uint64_t id = 1; id <= 8; id++) {
        xfer_transfer_desc d = {.id = id, .group = group, .pool = pool,
                                .nslices = 4, .slices = sl};
        ck_assert_int_eq(xfer_engine_submit(e, &d, on_batch_done, NULL), 0);
    }
    for (int guard = 0; guard < 100000 && batch_done < 8; guard++)
        event_base_loop(xfer_engine_base(e), EVLOOP_NONBLOCK);
    ck_assert_int_eq(batch_done, 8);
    uint64_t last = 0;
    size_t inputs = 0, shared = 0;
    for (size_t i = 0; i < tr.n; i++) {
        const xfer_trace_rec *r = &tr.recs[i];
        ck_assert_uint_ge(r->time_ns, last);
        if (r->machine == XFER_MACHINE_INPUT) {
            shared += inputs && r->time_ns == last;
            inputs++;
        }
        last = r->time_ns;
    }
    ck_assert_uint_ge(inputs, 8 * 13); /* 8 submits, 96 results */
    ck_assert_uint_gt(shared, 0);
    xfer_engine_del(e);
    xfer_loop_del(l);
    tu_trace_free(&tr);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("loop");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_engine_success_data_lands);
    tcase_add_test(tc, test_engine_own_clock_read_once_per_batch);
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
    tcase_add_test(tc, test_engine_refused_posts_complete_once_small_cap);
    tcase_add_test(tc, test_engine_refused_posts_complete_once_default_cap);
    tcase_add_test(tc, test_engine_submit_after_shutdown_says_shutdown);
    tcase_add_loop_test(tc, test_engine_deadline_names_waited_shards, 0, 3);
    tcase_add_test(tc, test_engine_staging_figure_is_release);
    tcase_add_test(tc, test_engine_idle_signal);
    tcase_add_test(tc, test_engine_post_call_runs_once_on_loop_in_order);
    tcase_add_test(tc, test_engine_post_call_full_and_dropped);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
