/*
 * tests/test_determinism.c - I10: the same inputs (events with their times)
 * give the same outputs (actions, trace) bit for bit.
 *
 * Twice in one process, a seeded scenario runs and its whole trace is
 * compared byte for byte; a run with another seed must differ, so the
 * comparison can fail.  The core scenario includes timers (deadlines,
 * cancel retries); the engine scenario runs the loop transport with a
 * counter clock and faults that arm no wall-clock timer, so libevent's
 * timing cannot leak into the order of events.
 */
#include <check.h>
#include <string.h>

#include <event2/event.h>

#include "testutil.h"
#include "xfer/core.h"
#include "xfer/loop.h"
#include "xfer/xfer.h"

#define S 4

static const xfer_slice slices[S] = {{0, 16}, {16, 16}, {32, 16}, {48, 16}};

/* ---------------------------------------------------------------------- */
/* Pure core with a seeded environment                                      */
/* ---------------------------------------------------------------------- */

static void core_run(uint64_t seed, tu_trace *tr)
{
    xfer_core_config cfg;
    xfer_core_config_default(&cfg);
    cfg.max_transfers = 32;
    cfg.max_tombstones = 256;
    cfg.cancel_max_attempts = 3;
    cfg.default_deadline_ns = 50000;
    cfg.cancel_op_timeout_ns = 20000;
    cfg.cancel_backoff_ns = 1000;
    cfg.tombstone_ttl_ns = 1000000;
    cfg.consumer_lease_ns = 500000;
    cfg.net_margin_ns = 500000;
    cfg.trace = tu_trace_sink(tr);
    xfer_core *c;
    ck_assert_int_eq(xfer_core_new(&cfg, &c), 0);
    xfer_action fl[2048];
    size_t nfl = 0;
    uint64_t rng = seed, now = 0;
    for (int step = 0; step < 5000; step++) {
        now += tu_rand(&rng) % 3000;
        uint64_t r = tu_rand(&rng) % 100;
        if (r < 10) {
            xfer_submit_args a = {.id = 1 + tu_rand(&rng) % 60, .nshards = S,
                                  .slices = slices};
            xfer_core_submit(c, now, &a);
        } else if (r < 12) {
            xfer_core_cancel(c, now, 1 + tu_rand(&rng) % 60);
        } else if (r < 20 || nfl == 0) {
            xfer_core_on_timer(c, now);
        } else {
            size_t i = tu_rand(&rng) % nfl;
            xfer_action a = fl[i];
            fl[i] = fl[--nfl];
            xfer_shard_result res = {
                .id = a.id, .attempt = a.attempt, .shard = a.shard,
                .op = a.kind, .resv_id = 7 + a.shard,
                .status = tu_rand(&rng) % 5 == 0 ? XFER_ERR_IO : 0};
            xfer_core_on_result(c, now, &res);
        }
        size_t n;
        const xfer_action *acts = xfer_core_actions(c, &n);
        for (size_t i = 0; i < n && nfl < 2048; i++)
            if (acts[i].kind <= XFER_ACT_CANCEL)
                fl[nfl++] = acts[i];
        xfer_core_actions_clear(c);
    }
    xfer_core_del(c);
}

/* Run twice with one seed and once with the next: the first two traces
 * must match byte for byte and the third must not, so the test can fail. */
static void same_seed_same_trace(void (*run)(uint64_t, tu_trace *),
                                 const char *name, uint64_t fallback)
{
    uint64_t seed = tu_seed(name, fallback);
    tu_trace a = {0}, b = {0}, other = {0};
    run(seed, &a);
    run(seed, &b);
    run(seed + 1, &other);
    ck_assert_uint_gt(a.n, 1000);
    ck_assert_uint_eq(a.n, b.n);
    ck_assert_mem_eq(a.recs, b.recs, a.n * sizeof *a.recs);
    ck_assert(other.n != a.n ||
              memcmp(other.recs, a.recs, a.n * sizeof *a.recs) != 0);
    tu_trace_free(&a);
    tu_trace_free(&b);
    tu_trace_free(&other);
}

START_TEST(test_determinism_core_same_seed_same_trace)
{
    same_seed_same_trace(core_run,
                         "test_determinism_core_same_seed_same_trace", 7);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Engine + loop transport with a counter clock                            */
/* ---------------------------------------------------------------------- */

static uint64_t ticks;
static uint64_t counter_clock(void *ud)
{
    return ticks += 1000;
}

typedef struct run {
    xfer_engine *e;
    uint32_t group, pool;
    uint64_t next, done, total;
    uint8_t staging[64];
    uint64_t rng;
} run;

static void submit_next(run *r);

static void on_done(void *ud, const xfer_result *res)
{
    run *r = ud;
    r->done++;
    submit_next(r);
}

static void submit_next(run *r)
{
    while (r->next <= r->total) {
        xfer_transfer_desc d = {.id = r->next++, .group = r->group,
                                .pool = r->pool, .nslices = S,
                                .slices = slices};
        if (xfer_engine_submit(r->e, &d, on_done, r) == 0) {
            if (tu_rand(&r->rng) % 20 == 0)
                xfer_engine_cancel(r->e, d.id);
            return;
        }
        r->done++;
    }
}

static void on_event(void *ud, const xfer_shard_event *ev)
{
    xfer_loop *l = *(xfer_loop **)ud;
    if (ev->kind != XFER_SHARD_EV_READY)
        return;
    xfer_shard *s = xfer_loop_shard(l, ev->shard);
    const uint8_t *data;
    uint32_t len;
    if (xfer_shard_take(s, counter_clock(NULL), ev->id, ev->resv_id, &data,
                        &len) == 0)
        xfer_shard_release(s, counter_clock(NULL), ev->id, ev->resv_id);
}

static void engine_run(uint64_t seed, tu_trace *tr)
{
    ticks = 0;
    run r = {.total = 300, .next = 1, .rng = seed};
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.clock = counter_clock;
    ec.core.max_transfers = 64;
    ec.core.trace = tu_trace_sink(tr);
    ck_assert_int_eq(xfer_engine_new(&ec, &r.e), 0);
    static xfer_loop *l;
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = S;
    lc.seed = seed;
    lc.clock = counter_clock;
    lc.on_event = on_event;
    lc.on_event_ud = &l;
    lc.shard.pool_bytes = 1 << 16;
    lc.shard.trace = tu_trace_sink(tr);
    ck_assert_int_eq(xfer_loop_new(xfer_engine_base(r.e), &lc, &l), 0);
    const xfer_fault_rule rules[] = {
        {XFER_FAULT_FAIL, XFER_OP_RESERVE, -1, 0, 50000, 0, 0, 0},
        {XFER_FAULT_APPLIED_LOST, XFER_OP_RESERVE, -1, 0, 30000, 0, 0, 0},
        {XFER_FAULT_FAIL, XFER_OP_WRITE, -1, 0, 50000, 0, 0, XFER_ERR_IO},
        {XFER_FAULT_APPLIED_LOST, XFER_OP_COMMIT, -1, 0, 30000, 0, 0, 0},
    };
    for (size_t i = 0; i < 4; i++)
        ck_assert_int_eq(xfer_loop_add_rule(l, &rules[i]), 0);
    ck_assert_int_eq(xfer_engine_register_pool(r.e, r.staging,
                                               sizeof r.staging, &r.pool), 0);
    ck_assert_int_eq(xfer_engine_add_group(r.e, xfer_loop_transport(l),
                                           &r.group), 0);
    for (int i = 0; i < 16; i++)
        submit_next(&r);
    struct event_base *b = xfer_engine_base(r.e);
    for (int guard = 0; guard < 1000000 && r.done < r.total; guard++)
        event_base_loop(b, EVLOOP_NONBLOCK);
    ck_assert_uint_eq(r.done, r.total);
    xfer_engine_del(r.e);
    xfer_loop_del(l);
}

START_TEST(test_determinism_engine_loop_same_seed_same_trace)
{
    same_seed_same_trace(engine_run,
                         "test_determinism_engine_loop_same_seed_same_trace",
                         11);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("determinism");
    TCase *tc = tcase_create("seeded");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_determinism_core_same_seed_same_trace);
    tcase_add_test(tc, test_determinism_engine_loop_same_seed_same_trace);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
