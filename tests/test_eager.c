/*
 * tests/test_eager.c - the eager path end to end: the engine with the loop
 * transport, real shards and real bytes, small blocks sent as one EAGER op
 * per shard (reserve + data + commit) instead of three rounds.
 *
 * What it checks: one op per shard and the same bytes on every shard as
 * the three rounds would land; a shard that refuses, or whose reply is
 * lost after it applied the op, rolls every shard back, with the result
 * saying the consumer may hold the data; the consumer's READY events come
 * from every shard; nothing is left on any shard after a rollback.
 * Waiting is bounded by wall time, but no assertion is about time.
 */
#include <check.h>
#include <string.h>

#include "enginetest.h"
#include "testutil.h"

#define MS ET_MS
#define RULE(kind, op, shard, id, ppm, count, delay, err)                     \
    {(kind), (op), (shard), (id), (ppm), (count), (delay), (err)}

static et_env V;
static uint64_t want_id;

static bool got_want(et_env *v)
{
    return v->ncb[want_id] > 0;
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

static xfer_engine_stats engine_stats(void)
{
    xfer_engine_stats st;
    xfer_engine_stats_get(V.e, &st);
    return st;
}

/* ET_BLK-byte slices fit: one op per shard, the consumer takes the right
 * bytes from every shard, and nothing was reserved, written or committed
 * on its own. */
START_TEST(test_eager_one_op_per_shard_data_lands)
{
    et_init(&V, &(et_opts){.eager_max_bytes = ET_BLK});
    ck_assert_int_eq(et_submit(&V, 1, 0), 0);
    ck_assert_int_eq(V.ncb[1], 0); /* never from inside submit */
    run_to_end(1);
    ck_assert_int_eq(V.res[1].status, 0);
    ck_assert(!V.res[1].consumer_may_hold);
    ck_assert_uint_eq(engine_stats().ops_started, ET_S);
    ck_assert_uint_eq(V.taken, ET_S);
    ck_assert_uint_eq(V.bad_bytes, 0);
    for (uint16_t k = 0; k < ET_S; k++) {
        ck_assert_uint_eq(shard_stats(k).reserves, 1);
        ck_assert_uint_eq(shard_stats(k).commits, 1);
    }
    ck_assert(et_run(&V, shards_empty, 1000));
    et_free(&V);
}
END_TEST

/* A slice over the limit takes the three rounds (3 ops per shard), with
 * the same outcome on the consumer. */
START_TEST(test_eager_large_block_three_rounds)
{
    et_init(&V, &(et_opts){.eager_max_bytes = ET_BLK - 1});
    ck_assert_int_eq(et_submit(&V, 2, 0), 0);
    run_to_end(2);
    ck_assert_int_eq(V.res[2].status, 0);
    ck_assert_uint_eq(engine_stats().ops_started, 3 * ET_S);
    ck_assert_uint_eq(V.taken, ET_S);
    ck_assert_uint_eq(V.bad_bytes, 0);
    et_free(&V);
}
END_TEST

/* _i 0: shard 2 refuses (nothing held there); _i 1: shard 2 applied it
 * but the reply was lost.  Either way the transfer waits for every shard,
 * cancels every shard, and the result carries the "consumer may hold"
 * flag and phase COMPLETING, as a failed commit's does. */
START_TEST(test_eager_failure_rolls_back_every_shard)
{
    xfer_fault_rule r[] = {
        RULE(_i == 0 ? XFER_FAULT_FAIL : XFER_FAULT_APPLIED_LOST,
             XFER_OP_EAGER, 2, 0, 0, 1, 0, XFER_ERR_CONN_LOST),
        RULE(XFER_FAULT_DELAY, XFER_OP_EAGER, 0, 0, 0, 0, 20 * MS, 0),
    };
    et_opts o = {.rules = r, .nrules = 2, .eager_max_bytes = ET_BLK};
    et_init(&V, &o);
    V.consumer_takes = 0; /* READY data stays for the rollback to free */
    ck_assert_int_eq(et_submit(&V, 5, 0), 0);
    run_to_end(5);
    const xfer_result *res = &V.res[5];
    ck_assert_int_eq(res->status, XFER_ERR_CONN_LOST);
    ck_assert_int_eq(res->phase, XFER_PHASE_COMPLETING);
    ck_assert(res->consumer_may_hold);
    ck_assert_uint_eq(res->first_failed_shard, 2);
    ck_assert_uint_eq(res->failed_shards, 1u << 2);
    ck_assert_uint_eq(res->rollback_failed, 0);
    /* I5: every shard got its cancel, the refusing one included. */
    for (uint16_t k = 0; k < ET_S; k++)
        ck_assert_uint_ge(shard_stats(k).cancels, 1);
    ck_assert(et_run(&V, shards_empty, 1000));
    ck_assert_int_eq(et_submit(&V, 5, 0), XFER_ERR_REUSED);
    et_free(&V);
}
END_TEST

static void on_done(void *ud, const xfer_result *r)
{
    et_env *v = ud;
    v->ncb[r->id]++;
    v->res[r->id] = *r;
}

/* A transport that does not say yes (here a version 1 ops table, which
 * has no eager_ok) never gets an EAGER op, whatever the core allows: the
 * same submit takes the three rounds there. */
START_TEST(test_eager_needs_the_transports_word)
{
    et_init(&V, &(et_opts){.eager_max_bytes = ET_BLK});
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = ET_S;
    lc.shard.pool_bytes = 64 * ET_BLK;
    xfer_loop *l2;
    ck_assert_int_eq(xfer_loop_new(xfer_engine_base(V.e), &lc, &l2), 0);
    xfer_transport tp = xfer_loop_transport(l2);
    xfer_transport_ops ops = *tp.ops;
    ops.version = 1;
    uint32_t g;
    ck_assert_int_eq(
        xfer_engine_add_group(V.e, (xfer_transport){&ops, tp.self}, &g), 0);
    xfer_slice sl[ET_S];
    for (uint16_t k = 0; k < ET_S; k++)
        sl[k] = (xfer_slice){(uint64_t)k * ET_BLK, ET_BLK};
    xfer_transfer_desc d = {.id = 9, .group = g, .pool = V.pool,
                            .nslices = ET_S, .slices = sl};
    ck_assert_int_eq(xfer_engine_submit(V.e, &d, on_done, &V), 0);
    run_to_end(9);
    ck_assert_int_eq(V.res[9].status, 0);
    ck_assert_uint_eq(engine_stats().ops_started, 3 * ET_S);
    /* The loop group still says yes. */
    ck_assert_int_eq(et_submit(&V, 3, 0), 0);
    run_to_end(3);
    ck_assert_uint_eq(engine_stats().ops_started, 4 * ET_S);
    et_free(&V);
    xfer_loop_del(l2);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("eager");
    TCase *tc = tcase_create("engine_loop");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_eager_one_op_per_shard_data_lands);
    tcase_add_test(tc, test_eager_large_block_three_rounds);
    tcase_add_loop_test(tc, test_eager_failure_rolls_back_every_shard, 0, 2);
    tcase_add_test(tc, test_eager_needs_the_transports_word);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
