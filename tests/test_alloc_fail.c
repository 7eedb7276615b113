/*
 * tests/test_alloc_fail.c - allocation failure through the whole stack, in
 * the manner of nghttp2's failmalloc tests and SQLite's: one scenario of
 * the engine with the loop transport (and its trace file and control
 * socket) runs with allocation number N failing, for N = 1, 2, ... until a
 * run makes fewer than N allocations, so that no failure was injected.
 * Every allocation of every object goes through one counting allocator
 * (the engine's core.alloc, the loop's alloc, which its shards inherit,
 * the trace file's and, through the engine, the control socket's).
 *
 * The scenario covers creation, direct and posted submits (the posting
 * side of the mailbox and a refusal by the loop), the fault paths (failed
 * reserve, write and cancel, an applied commit whose reply is lost, a
 * dropped commit ended by the deadline, a user cancel, a pre-emptive
 * posted cancel, a shard going down under a write), shutdown and deletion.
 * Each run asserts: no crash, nothing leaked (allocations minus frees is
 * 0), every accepted submit completed exactly once, the shutdown callback
 * came once, and a constructor that failed returned XFER_ERR_NOMEM and left
 * its out-pointer untouched.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "testutil.h"
#include "xfer/ctl.h"
#include "xfer/loop.h"
#include "xfer/tracefile.h"
#include "xfer/xfer.h"

#define MS 1000000ull
#define NS 4
#define BLK 128
#define NID 16
#define DOWN_ID 10 /* the transfer whose write a shard going down cuts */

typedef struct run {
    tu_alloc ta;
    xfer_engine *e;
    xfer_loop *l;
    xfer_ctl *ctl;
    xfer_tracefile *tf;
    uint32_t group, pool;
    bool attached; /* the engine took the loop (add_group) */
    uint8_t staging[NID * NS * BLK];
    int accepted[NID]; /* submits (or posts) that returned 0 */
    int ncb[NID];      /* callbacks per id */
    int shutdowns;
} run;

static run R;
static char trace_path[128];
static char sock_path[108];
static int untouched_mark;
#define UNTOUCHED ((void *)&untouched_mark)

/* Counted by user_data: the key of the submit (a refused post of an id
 * that is live completes with that id, and its own key). */
static void on_done(void *ud, const xfer_result *r)
{
    run *u = ud;
    ck_assert_uint_lt(r->user_data, NID);
    u->ncb[r->user_data]++;
}

static void on_shutdown(void *ud)
{
    ((run *)ud)->shutdowns++;
}

static double wall_ms(void)
{
    return (double)xfer_clock_monotonic(NULL) / 1e6;
}

static void tick(evutil_socket_t fd, short what, void *arg)
{
}

/* Run the loop until pred() or about max_ms of wall time (a bound, never
 * an assertion). */
static bool pump(bool (*pred)(void), int max_ms)
{
    struct event_base *b = xfer_engine_base(R.e);
    struct event *t = event_new(b, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 1000};
    event_add(t, &tv);
    double end = wall_ms() + max_ms;
    while (!pred() && wall_ms() < end)
        event_base_loop(b, EVLOOP_ONCE);
    event_free(t);
    return pred();
}

static bool all_done(void)
{
    for (int id = 0; id < NID; id++)
        if (R.ncb[id] < R.accepted[id])
            return false;
    return true;
}

static bool shut_down(void)
{
    return R.shutdowns > 0;
}

/* DOWN_ID's write is in flight on shard NS - 1, or it is over (or was
 * never accepted). */
static bool down_write_in_flight(void)
{
    xfer_shard *s = xfer_loop_shard(R.l, NS - 1);
    return xfer_shard_state(s, DOWN_ID) == XFER_RESV_STATE_WRITING ||
           R.ncb[DOWN_ID] > 0 || !R.accepted[DOWN_ID];
}

static xfer_transfer_desc desc(uint64_t id, uint64_t key, xfer_slice *sl)
{
    for (uint16_t k = 0; k < NS; k++)
        sl[k] = (xfer_slice){(key * NS + k) * BLK, BLK};
    return (xfer_transfer_desc){.id = id, .group = R.group, .pool = R.pool,
                                .nslices = NS, .slices = sl,
                                .timeout_ns = id == 5 ? 20 * MS : 0,
                                .user_data = key};
}

static void submit(uint64_t id)
{
    xfer_slice sl[NS];
    xfer_transfer_desc d = desc(id, id, sl);
    int rc = xfer_engine_submit(R.e, &d, on_done, &R);
    ck_assert_msg(rc == 0 || rc == XFER_ERR_NOMEM, "submit %d", rc);
    R.accepted[id] += rc == 0;
}

/* Post a submit of `id`, counted under `key`. */
static void post(uint64_t key, uint64_t id)
{
    xfer_slice sl[NS];
    xfer_transfer_desc d = desc(id, key, sl);
    int rc = xfer_engine_post_submit(R.e, &d, on_done, &R);
    ck_assert_msg(rc == 0 || rc == XFER_ERR_NOMEM, "post %d", rc);
    R.accepted[key] += rc == 0;
}

/* ---------------------------------------------------------------------- */
/* Creation                                                                */
/* ---------------------------------------------------------------------- */

static const xfer_fault_rule rules[] = {
    {XFER_FAULT_FAIL, XFER_OP_RESERVE, 1, 2, 0, 0, 0, XFER_ERR_REMOTE},
    {XFER_FAULT_FAIL, XFER_OP_WRITE, 2, 3, 0, 0, 0, XFER_ERR_IO},
    {XFER_FAULT_FAIL, XFER_OP_CANCEL, 0, 3, 0, 1, 0, XFER_ERR_IO},
    {XFER_FAULT_APPLIED_LOST, XFER_OP_COMMIT, 1, 6, 0, 0, 0, 0},
    {XFER_FAULT_DROP, XFER_OP_COMMIT, 3, 5, 0, 0, 0, 0},
};

/* A failed constructor: out of memory, nothing written, nothing left. */
static void expect_nomem(int rc, void *out)
{
    ck_assert_int_eq(rc, XFER_ERR_NOMEM);
    ck_assert_ptr_eq(out, UNTOUCHED);
    ck_assert_int_eq(R.ta.failures, 1);
}

/* Build everything; false when a constructor failed (the rest is not
 * built, what was built is freed by teardown()). */
static bool build(void)
{
    xfer_allocator a = tu_allocator(&R.ta);
    xfer_tracefile_opts to;
    xfer_tracefile_opts_default(&to);
    to.alloc = a;
    R.tf = UNTOUCHED;
    int rc = xfer_tracefile_open(trace_path, &to, &R.tf);
    if (rc) {
        expect_nomem(rc, R.tf);
        R.tf = NULL;
        return false;
    }
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.core.max_transfers = 32;
    ec.core.max_tombstones = 256;
    ec.core.cancel_op_timeout_ns = 50 * MS;
    ec.core.cancel_backoff_ns = 1 * MS;
    ec.core.cancel_max_attempts = 2;
    ec.core.alloc = a;
    ec.core.trace = xfer_tracefile_sink(R.tf);
    ec.mailbox_cap = 8;
    R.e = UNTOUCHED;
    rc = xfer_engine_new(&ec, &R.e);
    if (rc) {
        expect_nomem(rc, R.e);
        R.e = NULL;
        return false;
    }
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = NS;
    lc.write_ns = 2 * MS;
    lc.alloc = a;
    lc.shard.pool_bytes = 1 << 16;
    lc.shard.max_reservations = 64;
    lc.shard.trace = xfer_tracefile_sink_tagged(R.tf, 1);
    R.l = UNTOUCHED;
    rc = xfer_loop_new(xfer_engine_base(R.e), &lc, &R.l);
    if (rc) {
        expect_nomem(rc, R.l);
        R.l = NULL;
        return false;
    }
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        ck_assert_int_eq(xfer_loop_add_rule(R.l, &rules[i]), 0);
    ck_assert_int_eq(xfer_engine_register_pool(R.e, R.staging,
                                               sizeof R.staging, &R.pool),
                     0);
    rc = xfer_engine_add_group(R.e, xfer_loop_transport(R.l), &R.group);
    if (rc) {
        ck_assert_int_eq(rc, XFER_ERR_NOMEM);
        return false;
    }
    R.attached = true;
    R.ctl = UNTOUCHED;
    rc = xfer_engine_ctl_open(R.e, sock_path, &R.ctl);
    if (rc) {
        expect_nomem(rc, R.ctl);
        R.ctl = NULL; /* the scenario runs on without it */
    }
    return true;
}

/* A loop the engine took goes after the engine (which detaches it); one it
 * never took goes first, while the engine's base still exists. */
static void teardown(void)
{
    xfer_ctl_close(R.ctl);
    if (!R.attached) {
        xfer_loop_del(R.l);
        R.l = NULL;
    }
    xfer_engine_del(R.e);
    xfer_loop_del(R.l);
    ck_assert_int_eq(xfer_tracefile_close(R.tf), 0);
    unlink(trace_path);
}

/* ---------------------------------------------------------------------- */
/* The scenario                                                            */
/* ---------------------------------------------------------------------- */

/* Every accepted submit completes, or the test fails saying which did
 * not. */
static void expect_all_done(void)
{
    if (pump(all_done, 5000))
        return;
    for (int id = 0; id < NID; id++)
        if (R.accepted[id] != R.ncb[id])
            printf("key %d: %d accepted, %d callbacks\n", id,
                   R.accepted[id], R.ncb[id]);
    fflush(stdout);
    ck_abort_msg("not every accepted submit completed (fail at %ld)",
                 R.ta.fail_after + 1);
}

static void transfers(void)
{
    for (uint64_t id = 1; id <= 6; id++)
        submit(id);
    ck_assert_int_eq(xfer_engine_cancel(R.e, 4), 0);
    post(7, 7); /* accepted by the loop */
    post(8, 1); /* id 1 again: the loop refuses it, with a callback */
    int rc = xfer_engine_post_cancel(R.e, 9); /* pre-emptive */
    ck_assert_msg(rc == 0 || rc == XFER_ERR_NOMEM, "post cancel %d", rc);
    expect_all_done();
}

/* A shard goes down while DOWN_ID's write is in flight on it. */
static void shard_down(void)
{
    submit(DOWN_ID);
    pump(down_write_in_flight, 2000);
    xfer_loop_set_down(R.l, NS - 1, true);
    expect_all_done();
    xfer_loop_set_down(R.l, NS - 1, false);
}

static void check_once(void)
{
    for (int id = 0; id < NID; id++)
        ck_assert_msg(R.ncb[id] == R.accepted[id],
                      "id %d: %d callbacks for %d accepted submits (fail at "
                      "%ld)",
                      id, R.ncb[id], R.accepted[id], R.ta.fail_after + 1);
}

/* One run with allocation number n failing (0: none).  Returns the
 * allocations the run made. */
static long scenario(long n)
{
    memset(&R, 0, sizeof R);
    tu_alloc_init(&R.ta, n ? n - 1 : -1);
    R.ta.fail_once = 1;
    if (build()) {
        transfers();
        shard_down();
        ck_assert_int_eq(xfer_engine_shutdown(R.e, on_shutdown, &R), 0);
        ck_assert(pump(shut_down, 5000));
        pump(shut_down, 5); /* nothing more may come */
        ck_assert_int_eq(R.shutdowns, 1);
        check_once();
        xfer_engine_stats st;
        xfer_engine_stats_get(R.e, &st);
        ck_assert_uint_eq(st.pools, 0);
        ck_assert_uint_eq(st.staging_bytes_in_use, 0);
    }
    teardown();
    ck_assert_msg(R.ta.live == 0, "%ld allocations leaked (fail at %ld)",
                  R.ta.live, n);
    return R.ta.calls;
}

START_TEST(test_alloc_fail_each_allocation_in_turn)
{
    snprintf(trace_path, sizeof trace_path, "/tmp/xfer-af-%ld.trace",
             (long)getpid());
    snprintf(sock_path, sizeof sock_path, "/tmp/xfer-af-%ld.sock",
             (long)getpid());
    long plain = scenario(0);
    ck_assert_int_eq(R.ta.failures, 0);
    /* The plain run had every submit and post accepted. */
    for (int id = 1; id <= 8; id++)
        ck_assert_int_eq(R.accepted[id], 1);
    ck_assert_int_eq(R.accepted[DOWN_ID], 1);
    ck_assert_int_gt(plain, 50);
    long n = 1, failed = 0;
    for (;; n++) {
        long calls = scenario(n);
        if (R.ta.failures == 0) {
            ck_assert_int_lt(calls, n);
            break;
        }
        failed++;
    }
    printf("alloc_fail: the plain run made %ld allocations; failed each of "
           "N = 1..%ld in turn (%ld runs), then N = %ld ran with none "
           "failing\n",
           plain, n - 1, failed, n);
    fflush(stdout);
    /* The runs made about as many allocations as the plain one. */
    ck_assert_int_gt(n, plain / 2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("alloc_fail");
    TCase *tc = tcase_create("each");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_alloc_fail_each_allocation_in_turn);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
