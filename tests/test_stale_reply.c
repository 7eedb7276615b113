/*
 * tests/test_stale_reply.c - a live transfer fed the replies of another
 * attempt (issue 14, class 2), through the shared library.
 *
 * A reply delayed past the producer's tombstone, a retransmit, or a replay
 * can carry the id of a live transfer and an attempt that is not its own.
 * Such a reply must change nothing: no action, the same state, counted as
 * a late reply; the transfer's own replies still drive it to the end.
 * Each phase (reserve, write, commit, cancel) is probed with an earlier
 * and a later attempt, ok and failed.
 */
#include <check.h>
#include <string.h>

#include "testutil.h"
#include "xfer/core.h"

#define MS 1000000ull
#define SEC 1000000000ull
#define S 2

typedef struct rig {
    xfer_core *c;
    uint32_t attempt;
    uint64_t now;
} rig;

static size_t count(xfer_core *c, unsigned kind, xfer_result *res)
{
    size_t n, k = 0;
    const xfer_action *a = xfer_core_actions(c, &n);
    for (size_t i = 0; i < n; i++)
        if (a[i].kind == kind) {
            k++;
            if (res)
                *res = a[i].result;
        }
    return k;
}

static size_t pending(xfer_core *c)
{
    size_t n;
    xfer_core_actions(c, &n);
    return n;
}

static void feed(rig *g, uint8_t op, uint32_t attempt, uint16_t shard,
                 int32_t status)
{
    xfer_shard_result r = {.id = 1, .attempt = attempt, .shard = shard,
                           .op = op, .status = status,
                           .resv_id = 10u + shard, .remote_addr = 0};
    ck_assert_int_eq(xfer_core_on_result(g->c, g->now, &r), 0);
}

/* Feed every wrong-attempt reply of `op` to both shards and check that
 * nothing happened. */
static void stale_all(rig *g, uint8_t op)
{
    xfer_core_stats before, after;
    ck_assert_int_eq(xfer_core_stats_get(g->c, &before), 0);
    xfer_transfer_state st = xfer_core_state(g->c, 1);
    const uint32_t others[] = {g->attempt - 1, g->attempt + 1, 0x7fffffffu};
    const int32_t statuses[] = {0, XFER_ERR_NO_SPACE};
    unsigned fed = 0;
    for (unsigned i = 0; i < 3; i++)
        for (unsigned j = 0; j < 2; j++)
            for (uint16_t k = 0; k < S; k++) {
                feed(g, op, others[i], k, statuses[j]);
                fed++;
                ck_assert_uint_eq(pending(g->c), 0);
                ck_assert_int_eq(xfer_core_state(g->c, 1), st);
            }
    ck_assert_int_eq(xfer_core_stats_get(g->c, &after), 0);
    ck_assert_uint_eq(after.late_replies, before.late_replies + fed);
    ck_assert_uint_eq(after.completed, before.completed);
}

static void rig_init(rig *g)
{
    memset(g, 0, sizeof *g);
    xfer_core_config cfg;
    xfer_core_config_default(&cfg);
    cfg.attempt_base = 40; /* attempts around it are all valid numbers */
    ck_assert_int_eq(xfer_core_new(&cfg, &g->c), 0);
    xfer_slice sl[S] = {{0, 64}, {64, 64}};
    xfer_submit_args a = {.id = 1, .group = 1, .nshards = S, .pool = 1,
                          .slices = sl, .user_data = 5};
    ck_assert_int_eq(xfer_core_submit(g->c, 0, &a), 0);
    size_t n;
    const xfer_action *acts = xfer_core_actions(g->c, &n);
    ck_assert_uint_eq(n, S);
    g->attempt = acts[0].attempt;
    xfer_core_actions_clear(g->c);
    g->now = 1 * MS;
}

START_TEST(test_stale_reply_ignored_in_every_phase)
{
    rig g;
    rig_init(&g);
    stale_all(&g, XFER_OP_RESERVE);
    stale_all(&g, XFER_OP_WRITE);
    stale_all(&g, XFER_OP_COMMIT);
    stale_all(&g, XFER_OP_CANCEL);
    for (uint16_t k = 0; k < S; k++)
        feed(&g, XFER_OP_RESERVE, g.attempt, k, 0);
    ck_assert_uint_eq(count(g.c, XFER_ACT_WRITE, NULL), S);
    xfer_core_actions_clear(g.c);
    ck_assert_int_eq(xfer_core_state(g.c, 1), XFER_TRANSFER_STATE_WRITING);
    stale_all(&g, XFER_OP_WRITE);
    stale_all(&g, XFER_OP_RESERVE);
    for (uint16_t k = 0; k < S; k++)
        feed(&g, XFER_OP_WRITE, g.attempt, k, 0);
    ck_assert_uint_eq(count(g.c, XFER_ACT_COMMIT, NULL), S);
    xfer_core_actions_clear(g.c);
    stale_all(&g, XFER_OP_COMMIT);
    feed(&g, XFER_OP_COMMIT, g.attempt, 0, 0);
    stale_all(&g, XFER_OP_COMMIT);
    feed(&g, XFER_OP_COMMIT, g.attempt, 1, 0);
    xfer_result res;
    ck_assert_uint_eq(count(g.c, XFER_ACT_COMPLETE, &res), 1);
    ck_assert_int_eq(res.status, 0);
    ck_assert_uint_eq(res.attempt, g.attempt);
    xfer_core_actions_clear(g.c);
    xfer_core_del(g.c);
}
END_TEST

/* In the rollback: another attempt's cancel result must not end the
 * cancel round (the transfer would report its rollback done while this
 * attempt's reservation still lives). */
START_TEST(test_stale_reply_does_not_end_rollback)
{
    rig g;
    rig_init(&g);
    feed(&g, XFER_OP_RESERVE, g.attempt, 0, 0);
    feed(&g, XFER_OP_RESERVE, g.attempt, 1, XFER_ERR_NO_SPACE);
    ck_assert_uint_eq(count(g.c, XFER_ACT_CANCEL, NULL), S);
    xfer_core_actions_clear(g.c);
    ck_assert_int_eq(xfer_core_state(g.c, 1), XFER_TRANSFER_STATE_CANCELLING);
    stale_all(&g, XFER_OP_CANCEL);
    stale_all(&g, XFER_OP_RESERVE);
    feed(&g, XFER_OP_CANCEL, g.attempt, 0, 0);
    stale_all(&g, XFER_OP_CANCEL);
    ck_assert_uint_eq(count(g.c, XFER_ACT_COMPLETE, NULL), 0);
    feed(&g, XFER_OP_CANCEL, g.attempt, 1, 0);
    xfer_result res;
    ck_assert_uint_eq(count(g.c, XFER_ACT_COMPLETE, &res), 1);
    ck_assert_int_eq(res.status, XFER_ERR_NO_SPACE);
    ck_assert_uint_eq(res.rollback_failed, 0);
    xfer_core_actions_clear(g.c);
    xfer_core_del(g.c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stale_reply");
    TCase *tc = tcase_create("stale_reply");
    tcase_add_test(tc, test_stale_reply_ignored_in_every_phase);
    tcase_add_test(tc, test_stale_reply_does_not_end_rollback);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
