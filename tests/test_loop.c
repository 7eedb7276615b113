/*
 * tests/test_loop.c - the loop transport's fault injection: rules by op,
 * shard, id and count; seeded probabilities that repeat; "applied but the
 * reply lost"; drop then abort; a shard taken down with ops in flight.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "enginetest.h"
#include "testutil.h"

#define MS ET_MS

static et_env V;
static uint64_t want;

static bool got_want(et_env *v)
{
    return v->ncb[want] > 0;
}

static bool one_done(et_env *v)
{
    return v->total_cb == 1;
}

static bool shards_empty(et_env *v)
{
    return et_shard_bytes(v) == 0;
}

static void pattern_crcs(uint64_t id, uint32_t *crcs)
{
    uint8_t b[ET_BLK];
    for (uint16_t k = 0; k < ET_S; k++) {
        for (uint32_t i = 0; i < ET_BLK; i++)
            b[i] = et_pattern(id, k, i);
        crcs[k] = tu_crc32c(b, ET_BLK);
    }
}

static bool no_bytes(et_env *v)
{
    return et_shard_bytes(v) == 0;
}

static unsigned crc_ready[4][ET_S]; /* READY events by id, shard */
static void crc_on_event(void *ud, const xfer_shard_event *ev)
{
    (void)ud;
    if (ev->kind == XFER_SHARD_EV_READY && ev->id < 4 && ev->shard < ET_S)
        crc_ready[ev->id][ev->shard]++;
}

/* Issue 27, caller CRCs over the loop: its shards check a COMMIT that
 * carries the caller's CRC against the region before it applies.  The
 * right CRCs commit (the consumer takes whole data); a wrong one for
 * shard 2 fails CORRUPT naming shard 2, nothing READY, every shard empty
 * once the rollback ran; the next transfer commits. */
START_TEST(test_loop_caller_crc_checked_at_commit)
{
    memset(crc_ready, 0, sizeof crc_ready);
    et_init(&V, &(et_opts){.on_event = crc_on_event});
    uint32_t crcs[ET_S];
    pattern_crcs(1, crcs);
    crcs[2] ^= 0x8000;
    ck_assert_int_eq(et_submit_crc(&V, 1, 0, crcs), 0);
    ck_assert(et_run(&V, et_all_done, 5000));
    ck_assert_int_eq(V.res[1].status, XFER_ERR_CORRUPT);
    ck_assert_uint_eq(V.res[1].first_failed_shard, 2);
    ck_assert(et_run(&V, no_bytes, 5000));
    ck_assert_uint_eq(crc_ready[1][2], 0); /* never READY */
    for (uint64_t id = 2; id <= 3; id++) {
        pattern_crcs(id, crcs);
        ck_assert_int_eq(et_submit_crc(&V, id, 0, crcs), 0);
    }
    ck_assert(et_run(&V, et_all_done, 5000));
    ck_assert_int_eq(V.res[2].status, 0);
    ck_assert_int_eq(V.res[3].status, 0);
    for (uint16_t k = 0; k < ET_S; k++)
        ck_assert_uint_eq(crc_ready[2][k] + crc_ready[3][k], 2);
    et_free(&V);
}
END_TEST

START_TEST(test_loop_rule_by_id_and_count)
{
    xfer_fault_rule r[] = {
        {XFER_FAULT_FAIL, XFER_OP_COMMIT, 2, 5, 0, 1, 0, XFER_ERR_IO},
    };
    et_init(&V, &(et_opts){.rules = r, .nrules = 1});
    ck_assert_int_eq(et_submit(&V, 4, 0), 0);
    ck_assert_int_eq(et_submit(&V, 5, 0), 0);
    ck_assert(et_run(&V, et_all_done, 5000));
    ck_assert_int_eq(V.res[4].status, 0);       /* other id: untouched */
    ck_assert_int_eq(V.res[5].status, XFER_ERR_IO);
    ck_assert_int_eq(V.res[5].first_failed_shard, 2);
    xfer_loop_stats st;
    xfer_loop_stats_get(V.l, &st);
    ck_assert_uint_eq(st.faults_fired, 1);
    et_free(&V);
}
END_TEST

static uint64_t fired_with(uint64_t seed)
{
    xfer_fault_rule r[] = {
        {XFER_FAULT_FAIL, XFER_FAULT_ANY_OP, -1, 0, 100000, 0, 0, 0},
    };
    et_init(&V, &(et_opts){.rules = r, .nrules = 1, .seed = seed});
    for (uint64_t id = 1; id <= 40; id++)
        ck_assert_int_eq(et_submit(&V, id, 0), 0);
    ck_assert(et_run(&V, et_all_done, 10000));
    xfer_loop_stats st;
    xfer_loop_stats_get(V.l, &st);
    uint64_t sig = st.faults_fired;
    for (uint64_t id = 1; id <= 40; id++)
        sig = sig * 31 + (uint64_t)(V.res[id].status + 100) +
              V.res[id].failed_shards;
    et_free(&V);
    return sig;
}

START_TEST(test_loop_seeded_probability_repeats)
{
    uint64_t seed = tu_seed("test_loop_seeded_probability_repeats", 3);
    uint64_t a = fired_with(seed), b = fired_with(seed);
    ck_assert_uint_eq(a, b);
    int differs = 0;
    for (uint64_t s = 1; s <= 4 && !differs; s++)
        differs = fired_with(seed + s) != a;
    ck_assert(differs);
}
END_TEST

/* The reserve is applied on the shard but the reply says it failed: the
 * producer's cancel (without a reservation id) frees it by attempt. */
START_TEST(test_loop_applied_but_reply_lost)
{
    xfer_fault_rule r[] = {
        {XFER_FAULT_APPLIED_LOST, XFER_OP_RESERVE, 3, 0, 0, 0, 0,
         XFER_ERR_CONN_LOST},
    };
    et_init(&V, &(et_opts){.rules = r, .nrules = 1});
    ck_assert_int_eq(et_submit(&V, 8, 0), 0);
    want = 8;
    ck_assert(et_run(&V, got_want, 5000));
    ck_assert_int_eq(V.res[8].status, XFER_ERR_CONN_LOST);
    ck_assert_uint_eq(et_shard_bytes(&V), 0);
    ck_assert_int_eq(xfer_shard_state(xfer_loop_shard(V.l, 3), 8),
                     XFER_RESV_STATE_CANCELLED);
    et_free(&V);
}
END_TEST

/* Once a transfer has run, later ones reuse the loop's op records and
 * messages: the loop (and its shards) allocate nothing more per op, and
 * del frees what was kept. */
START_TEST(test_loop_reuses_op_records)
{
    tu_alloc ta;
    tu_alloc_init(&ta, -1);
    et_init(&V, &(et_opts){.loop_alloc = tu_allocator(&ta)});
    ck_assert_int_eq(et_submit(&V, 1, 0), 0);
    ck_assert(et_run(&V, one_done, 5000));
    long calls = ta.calls;
    for (uint64_t id = 2; id <= 5; id++) {
        ck_assert_int_eq(et_submit(&V, id, 0), 0);
        want = id;
        ck_assert(et_run(&V, got_want, 5000));
        ck_assert_int_eq(V.res[id].status, 0);
    }
    ck_assert_int_eq(ta.calls, calls);
    et_free(&V);
    ck_assert_int_eq(ta.live, 0);
}
END_TEST

/* A dropped write is never answered until the deadline aborts it. */
START_TEST(test_loop_drop_then_abort)
{
    xfer_fault_rule r[] = {
        {XFER_FAULT_DROP, XFER_OP_WRITE, 1, 0, 0, 0, 0, 0},
    };
    et_init(&V, &(et_opts){.rules = r, .nrules = 1});
    ck_assert_int_eq(et_submit(&V, 9, 30 * MS), 0);
    et_run_for(&V, 10);
    ck_assert_int_eq(V.ncb[9], 0);
    ck_assert_uint_ge(xfer_loop_outstanding(V.l), 1);
    want = 9;
    ck_assert(et_run(&V, got_want, 5000));
    ck_assert_int_eq(V.res[9].status, XFER_ERR_TIMEOUT);
    ck_assert_int_eq(V.res[9].phase, XFER_PHASE_WRITING);
    ck_assert_uint_eq(xfer_loop_outstanding(V.l), 0);
    ck_assert(et_run(&V, shards_empty, 1000));
    et_free(&V);
}
END_TEST

/* Shard 1 goes down with writes in flight: the transfer fails naming shard
 * 1, the other shards are rolled back, and shard 1's memory comes back
 * through its lease once the write it still had in flight ended. */
START_TEST(test_loop_shard_down_mid_write)
{
    et_init(&V, &(et_opts){.write_ns = 50 * MS, .lease_ns = 150 * MS});
    ck_assert_int_eq(et_submit(&V, 11, 0), 0);
    et_run_for(&V, 15);
    ck_assert_int_eq(xfer_core_state(xfer_engine_core(V.e), 11),
                     XFER_TRANSFER_STATE_WRITING);
    xfer_loop_set_down(V.l, 1, true);
    want = 11;
    ck_assert(et_run(&V, got_want, 5000));
    ck_assert_int_eq(V.res[11].status, XFER_ERR_CONN_LOST);
    ck_assert_int_eq(V.res[11].first_failed_shard, 1);
    ck_assert_uint_eq(V.res[11].rollback_failed, 1u << 1);
    for (uint16_t k = 0; k < ET_S; k++) {
        if (k == 1)
            continue;
        xfer_shard_stats st;
        xfer_shard_stats_get(xfer_loop_shard(V.l, k), &st);
        ck_assert_uint_eq(st.bytes_in_use, 0);
    }
    ck_assert(et_run(&V, shards_empty, 3000)); /* lease reclaims shard 1 */
    xfer_loop_set_down(V.l, 1, false);
    ck_assert_int_eq(et_submit(&V, 12, 0), 0);
    want = 12;
    ck_assert(et_run(&V, got_want, 5000));
    ck_assert_int_eq(V.res[12].status, 0);
    et_free(&V);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("loop");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_loop_rule_by_id_and_count);
    tcase_add_test(tc, test_loop_seeded_probability_repeats);
    tcase_add_test(tc, test_loop_applied_but_reply_lost);
    tcase_add_test(tc, test_loop_drop_then_abort);
    tcase_add_test(tc, test_loop_reuses_op_records);
    tcase_add_test(tc, test_loop_caller_crc_checked_at_commit);
    tcase_add_test(tc, test_loop_shard_down_mid_write);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
