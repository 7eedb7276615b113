/*
 * tests/api/test_engine_api.c - the engine used as a program that is not
 * ours uses it (issue 23 items 4, 5 and 7): a posted cancel the loop
 * refuses reaches its caller, a shutdown against a shard that never
 * answers its cancels ends by its deadline with every transfer completed
 * once and reported abandoned, and each status names its cause.
 *
 * Public API only (xfer_dep).  The loop transport stands in for the
 * shards; its fault rules (xfer/loop.h) hold them where each test needs.
 * Every wait on the loop has a guard (GUARD_MS) that fails the test
 * instead of hanging; nothing asserts how long anything took.
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "xfer/loop.h"
#include "xfer/xfer.h"

#define S 2
#define SLICE 256
#define GUARD_MS 20000 /* a wait that never ends fails here */
#define MAXID 128

/* One engine on a caller-owned base with the loop transport. */
typedef struct rig {
    struct event_base *base;
    xfer_loop *loop;
    xfer_engine *e;
    uint32_t group, pool;
    uint8_t mem[S * SLICE];
    xfer_slice slices[S];
    unsigned calls[MAXID];  /* completions per id */
    xfer_result res[MAXID]; /* the last of each */
    bool shut;              /* shutdown callback ran */
} rig;

static void rig_init(rig *r, const xfer_engine_config *ec,
                     const xfer_loop_config *lc)
{
    memset(r, 0, sizeof *r);
    r->base = event_base_new();
    ck_assert_ptr_nonnull(r->base);
    xfer_engine_config c = *ec;
    c.base = r->base;
    ck_assert_int_eq(xfer_engine_new(&c, &r->e), 0);
    xfer_loop_config l = *lc;
    ck_assert_int_eq(xfer_loop_new(r->base, &l, &r->loop), 0);
    ck_assert_int_eq(
        xfer_engine_add_group(r->e, xfer_loop_transport(r->loop), &r->group),
        0);
    ck_assert_int_eq(
        xfer_engine_register_pool(r->e, r->mem, sizeof r->mem, &r->pool), 0);
    for (unsigned k = 0; k < S; k++)
        r->slices[k] = (xfer_slice){.off = k * SLICE, .len = SLICE};
}

static void engine_defaults(xfer_engine_config *ec)
{
    xfer_engine_config_default(ec);
}

static void loop_defaults(xfer_loop_config *lc)
{
    xfer_loop_config_default(lc);
    lc->nshards = S;
    lc->shard.pool_bytes = 1 << 20;
}

static void on_done(void *ud, const xfer_result *res)
{
    rig *r = ud;
    ck_assert_uint_lt(res->id, MAXID);
    r->calls[res->id]++;
    r->res[res->id] = *res;
}

static int submit(rig *r, uint64_t id, uint32_t pool)
{
    xfer_transfer_desc d = {.id = id, .group = r->group, .pool = pool,
                            .nslices = S, .slices = r->slices};
    return xfer_engine_submit(r->e, &d, on_done, r);
}

/* Run the loop until pred(r) holds; fail after GUARD_MS. */
typedef bool (*pred_fn)(rig *r);
typedef struct waiter {
    rig *r;
    pred_fn pred;
    unsigned ticks;
    bool held;
} waiter;

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    waiter *w = arg;
    w->ticks++;
    if (w->pred(w->r)) {
        w->held = true;
        event_base_loopbreak(w->r->base);
    } else if (w->ticks > GUARD_MS) {
        event_base_loopbreak(w->r->base);
    }
}

static void run_until(rig *r, pred_fn pred)
{
    waiter w = {.r = r, .pred = pred};
    struct event *ev = event_new(r->base, -1, EV_PERSIST, on_tick, &w);
    struct timeval ms = {0, 1000};
    event_add(ev, &ms);
    event_base_dispatch(r->base);
    event_free(ev);
    ck_assert_msg(w.held, "the loop never reached the state waited for");
}

static void on_shut(void *ud)
{
    ((rig *)ud)->shut = true;
}

static bool shut(rig *r)
{
    return r->shut;
}

static void rig_free(rig *r)
{
    if (!r->shut) {
        ck_assert_int_eq(xfer_engine_shutdown(r->e, on_shut, r), 0);
        run_until(r, shut);
    }
    xfer_engine_del(r->e);
    xfer_loop_del(r->loop);
    event_base_free(r->base);
}

/* ---------------------------------------------------------------------- */
/* Item 4: a refused posted cancel reaches its caller                      */
/* ---------------------------------------------------------------------- */

typedef struct posted {
    xfer_engine *e;
    uint64_t id;
    int post_rc;
    int status;   /* the loop's answer */
    unsigned calls;
    pthread_mutex_t lock;
} posted;

static void on_cancel_answer(void *ud, uint64_t id, int status)
{
    posted *p = ud;
    pthread_mutex_lock(&p->lock);
    ck_assert_uint_eq(id, p->id);
    p->status = status;
    p->calls++;
    pthread_mutex_unlock(&p->lock);
}

static void *post_from_thread(void *arg)
{
    posted *p = arg;
    p->post_rc = xfer_engine_post_cancel_cb(p->e, p->id, on_cancel_answer, p);
    return NULL;
}

static posted *g_posted;
static bool answered(rig *r)
{
    pthread_mutex_lock(&g_posted->lock);
    bool done = g_posted->calls > 0;
    pthread_mutex_unlock(&g_posted->lock);
    return done;
}

START_TEST(test_engine_api_refused_posted_cancel_reaches_caller)
{
    xfer_engine_config ec;
    engine_defaults(&ec);
    ec.core.max_transfers = 4;
    ec.core.max_tombstones = 4;
    xfer_loop_config lc;
    loop_defaults(&lc);
    rig *r = calloc(1, sizeof *r);
    rig_init(r, &ec, &lc);
    /* An accepted posted cancel answers 0 (and tombstones the id). */
    posted p = {.e = r->e, .id = 1, .status = 1};
    pthread_mutex_init(&p.lock, NULL);
    g_posted = &p;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, post_from_thread, &p), 0);
    pthread_join(th, NULL);
    ck_assert_int_eq(p.post_rc, 0);
    run_until(r, answered);
    ck_assert_int_eq(p.status, 0);
    ck_assert_int_eq(xfer_core_state(xfer_engine_core(r->e), 1),
                     XFER_TRANSFER_STATE_TOMBSTONED);

    /* Fill the tombstone table with cancels of ids never submitted. */
    uint64_t id = 2;
    while (xfer_engine_cancel(r->e, id) == 0)
        id++;
    ck_assert_uint_eq(id, 5); /* four tombstones, the fifth refused */

    p.calls = 0;
    p.id = 77;
    ck_assert_int_eq(pthread_create(&th, NULL, post_from_thread, &p), 0);
    pthread_join(th, NULL);
    ck_assert_int_eq(p.post_rc, 0); /* queued */
    run_until(r, answered);
    ck_assert_uint_eq(p.calls, 1);
    ck_assert_int_eq(p.status, XFER_ERR_BUSY); /* the caller learns it */
    /* ... and the id indeed has no tombstone (I7 is the caller's now). */
    ck_assert_int_eq(xfer_core_state(xfer_engine_core(r->e), 77),
                     XFER_TRANSFER_STATE_NEW);

    /* A plain posted cancel's refusal is not silent either: counted. */
    ck_assert_int_eq(xfer_engine_post_cancel(r->e, 78), 0);
    p.calls = 0;
    p.id = 79;
    ck_assert_int_eq(xfer_engine_post_cancel_cb(r->e, 79, on_cancel_answer,
                                                &p), 0);
    run_until(r, answered);
    xfer_engine_stats st;
    ck_assert_int_eq(xfer_engine_stats_get(r->e, &st), 0);
    ck_assert_uint_eq(st.cancels_refused, 4); /* the direct one too */

    ck_assert_int_eq(xfer_engine_post_cancel_cb(r->e, 41, NULL, NULL),
                     XFER_ERR_INVALID_ARG);
    rig_free(r);
    pthread_mutex_destroy(&p.lock);
    free(r);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Item 5: shutdown is bounded                                             */
/* ---------------------------------------------------------------------- */

#define NFAIL 4      /* ids 1..4: a write fails, shard 1 never answers
                        the cancel */
#define HELD_ID 100  /* shard commits never answered */

static bool all_stuck(rig *r)
{
    const xfer_core *c = xfer_engine_core(r->e);
    for (uint64_t id = 1; id <= NFAIL; id++)
        if (xfer_core_state(c, id) != XFER_TRANSFER_STATE_CANCELLING)
            return false;
    return xfer_core_state(c, HELD_ID) == XFER_TRANSFER_STATE_COMPLETING;
}

START_TEST(test_engine_api_shutdown_deadline_abandons_unanswered_cancels)
{
    xfer_engine_config ec;
    engine_defaults(&ec);
    /* Without the deadline each transfer would wait an hour per cancel
     * round: the shutdown could not end by itself within the test. */
    ec.core.cancel_op_timeout_ns = 3600ull * 1000000000ull;
    ec.core.default_deadline_ns = 3600ull * 1000000000ull;
    ec.shutdown_timeout_ns = 100 * 1000000ull;
    xfer_loop_config lc;
    loop_defaults(&lc);
    rig *r = calloc(1, sizeof *r);
    rig_init(r, &ec, &lc);
    for (uint64_t id = 1; id <= NFAIL; id++) {
        xfer_fault_rule f = {.kind = XFER_FAULT_FAIL, .op = XFER_OP_WRITE,
                             .shard = 0, .id = id, .error = XFER_ERR_IO};
        ck_assert_int_eq(xfer_loop_add_rule(r->loop, &f), 0);
    }
    xfer_fault_rule never_cancel = {.kind = XFER_FAULT_DROP,
                                    .op = XFER_OP_CANCEL, .shard = 1};
    xfer_fault_rule never_commit = {.kind = XFER_FAULT_DROP,
                                    .op = XFER_OP_COMMIT,
                                    .shard = XFER_FAULT_ANY_SHARD,
                                    .id = HELD_ID};
    ck_assert_int_eq(xfer_loop_add_rule(r->loop, &never_cancel), 0);
    ck_assert_int_eq(xfer_loop_add_rule(r->loop, &never_commit), 0);
    for (uint64_t id = 1; id <= NFAIL; id++)
        ck_assert_int_eq(submit(r, id, r->pool), 0);
    ck_assert_int_eq(submit(r, HELD_ID, r->pool), 0);
    run_until(r, all_stuck);

    ck_assert_int_eq(xfer_engine_shutdown(r->e, on_shut, r), 0);
    run_until(r, shut); /* ends: the deadline abandoned what was left */
    for (uint64_t id = 1; id <= NFAIL; id++) {
        ck_assert_uint_eq(r->calls[id], 1); /* exactly once */
        ck_assert_int_eq(r->res[id].status, XFER_ERR_ABANDONED);
        /* shard 1's cancel never succeeded: left to its lease */
        ck_assert_uint_eq(r->res[id].rollback_failed, 1u << 1);
    }
    ck_assert_uint_eq(r->calls[HELD_ID], 1);
    ck_assert_int_eq(r->res[HELD_ID].status, XFER_ERR_ABANDONED);
    ck_assert(r->res[HELD_ID].consumer_may_hold);
    ck_assert_uint_eq(r->res[HELD_ID].rollback_failed, (1u << S) - 1);
    xfer_engine_stats st;
    ck_assert_int_eq(xfer_engine_stats_get(r->e, &st), 0);
    ck_assert_uint_eq(st.abandoned, NFAIL + 1);
    ck_assert_uint_eq(st.staging_bytes_in_use, 0); /* I3 */
    ck_assert_uint_eq(st.completions_delivered, NFAIL + 1);
    rig_free(r);
    free(r);
}
END_TEST

/* A shutdown whose transfers all end in time reports no abandonment. */
START_TEST(test_engine_api_shutdown_in_time_abandons_nothing)
{
    xfer_engine_config ec;
    engine_defaults(&ec);
    ec.shutdown_timeout_ns = UINT64_MAX; /* no deadline */
    xfer_loop_config lc;
    loop_defaults(&lc);
    rig *r = calloc(1, sizeof *r);
    rig_init(r, &ec, &lc);
    xfer_fault_rule f = {.kind = XFER_FAULT_FAIL, .op = XFER_OP_WRITE,
                         .shard = 0, .error = XFER_ERR_IO};
    ck_assert_int_eq(xfer_loop_add_rule(r->loop, &f), 0);
    ck_assert_int_eq(submit(r, 1, r->pool), 0);
    ck_assert_int_eq(xfer_engine_shutdown(r->e, on_shut, r), 0);
    run_until(r, shut);
    ck_assert_uint_eq(r->calls[1], 1);
    ck_assert_int_ne(r->res[1].status, XFER_ERR_ABANDONED);
    ck_assert_uint_eq(r->res[1].rollback_failed, 0);
    rig_free(r);
    free(r);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Item 7: each status names its cause                                     */
/* ---------------------------------------------------------------------- */

static bool id_done_1(rig *r) { return r->calls[1] > 0; }
static bool id_done_2(rig *r) { return r->calls[2] > 0; }
static bool id_done_3(rig *r) { return r->calls[3] > 0; }
static bool id_done_4(rig *r) { return r->calls[4] > 0; }

START_TEST(test_engine_api_status_names_its_cause)
{
    xfer_engine_config ec;
    engine_defaults(&ec);
    xfer_loop_config lc;
    loop_defaults(&lc);
    rig *r = calloc(1, sizeof *r);
    rig_init(r, &ec, &lc);

    /* A missing pool is not a missing id. */
    ck_assert_int_eq(submit(r, 9, r->pool + 7), XFER_ERR_NO_POOL);

    /* An id finished recently vs one cancelled before its submit. */
    ck_assert_int_eq(submit(r, 1, r->pool), 0);
    run_until(r, id_done_1);
    ck_assert_int_eq(r->res[1].status, 0);
    ck_assert_int_eq(submit(r, 1, r->pool), XFER_ERR_REUSED);
    ck_assert_int_eq(xfer_engine_cancel(r->e, 5), 0);
    ck_assert_int_eq(submit(r, 5, r->pool), XFER_ERR_CANCELLED);

    /* The user's own cancel. */
    xfer_fault_rule hold = {.kind = XFER_FAULT_DELAY, .op = XFER_OP_RESERVE,
                            .shard = XFER_FAULT_ANY_SHARD, .id = 2,
                            .delay_ns = 50 * 1000000ull};
    ck_assert_int_eq(xfer_loop_add_rule(r->loop, &hold), 0);
    ck_assert_int_eq(submit(r, 2, r->pool), 0);
    ck_assert_int_eq(xfer_engine_cancel(r->e, 2), 0);
    run_until(r, id_done_2);
    ck_assert_int_eq(r->res[2].status, XFER_ERR_CANCELLED);
    ck_assert_uint_eq(r->res[2].failed_shards, 0);

    /* A cancel by someone else: the consumer cancelled id 3 on shard 1
     * before the producer's reserve came. */
    uint64_t now = xfer_clock_monotonic(NULL);
    ck_assert_int_eq(xfer_shard_cancel(xfer_loop_shard(r->loop, 1), now, 3,
                                       0, XFER_RESV_NONE), 0);
    ck_assert_int_eq(submit(r, 3, r->pool), 0);
    run_until(r, id_done_3);
    ck_assert_int_eq(r->res[3].status, XFER_ERR_PEER_CANCELLED);
    ck_assert_uint_eq(r->res[3].first_failed_shard, 1);

    /* A lease that expired on the shards while the writes were in
     * flight (a rig whose writes outlast its leases: the lease timer is
     * due before the write ends on the same loop, whatever the load). */
    rig *x = calloc(1, sizeof *x);
    xfer_loop_config slow = lc;
    slow.shard.lease_ttl_ns = 20 * 1000000ull;
    slow.write_ns = 200 * 1000000ull;
    rig_init(x, &ec, &slow);
    ck_assert_int_eq(submit(x, 4, x->pool), 0);
    run_until(x, id_done_4);
    ck_assert_int_eq(x->res[4].status, XFER_ERR_EXPIRED);
    ck_assert_uint_ne(x->res[4].first_failed_shard, XFER_SHARD_NONE);
    rig_free(x);
    free(x);

    /* Five causes, five codes. */
    const int codes[] = {XFER_ERR_REUSED, XFER_ERR_CANCELLED,
                         XFER_ERR_PEER_CANCELLED, XFER_ERR_EXPIRED,
                         XFER_ERR_NO_POOL, XFER_ERR_NOT_FOUND,
                         XFER_ERR_ABANDONED, XFER_ERR_SHUTDOWN};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        for (size_t j = i + 1; j < sizeof codes / sizeof codes[0]; j++) {
            ck_assert_int_ne(codes[i], codes[j]);
            ck_assert_str_ne(xfer_strerror(codes[i]),
                             xfer_strerror(codes[j]));
        }
    rig_free(r);
    free(r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("engine_api");
    TCase *tc = tcase_create("engine_api");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_engine_api_refused_posted_cancel_reaches_caller);
    tcase_add_test(tc,
                   test_engine_api_shutdown_deadline_abandons_unanswered_cancels);
    tcase_add_test(tc, test_engine_api_shutdown_in_time_abandons_nothing);
    tcase_add_test(tc, test_engine_api_status_names_its_cause);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
