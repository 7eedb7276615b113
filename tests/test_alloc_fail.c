/*
 * tests/test_alloc_fail.c - allocation failure, in the manner of nghttp2
 * and SQLite: run the main scenarios once to count the allocations made
 * through the injected allocator, then again failing each one in turn.
 * Every run must leak nothing, and every accepted transfer must complete
 * exactly once (a submit that fails synchronously never calls back).
 */
#include <check.h>
#include <stdio.h>

#include "enginetest.h"
#include "testutil.h"

#define MS ET_MS

static et_env V;

/* One run of the scenario mix with allocation number `fail_at` failing
 * (-1: none).  Returns the allocations made; checks I1 and leaks. */
static long scenario(long fail_at)
{
    tu_alloc ta;
    tu_alloc_init(&ta, fail_at);
    ta.fail_once = 1;
    xfer_fault_rule r[] = {
        {XFER_FAULT_FAIL, XFER_OP_RESERVE, 1, 2, 0, 0, 0, XFER_ERR_REMOTE},
        {XFER_FAULT_FAIL, XFER_OP_WRITE, 2, 3, 0, 0, 0, XFER_ERR_IO},
        {XFER_FAULT_FAIL, XFER_OP_CANCEL, 0, 3, 0, 1, 0, XFER_ERR_IO},
    };
    xfer_engine_config probe = {.core = {.alloc = tu_allocator(&ta)}};
    xfer_engine *e = (xfer_engine *)&ta;
    int rc = xfer_engine_new(&probe, &e);
    if (rc) {
        /* creation failed: nothing written, nothing leaked */
        ck_assert_int_eq(rc, XFER_ERR_NOMEM);
        ck_assert_ptr_eq(e, (xfer_engine *)&ta);
        ck_assert_int_eq(ta.live, 0);
        return ta.calls;
    }
    xfer_engine_del(e);
    ck_assert_int_eq(ta.live, 0);
    /* Creation makes the same allocations every time and they all passed:
     * run the scenario on a fresh count, so the failure lands after it. */
    tu_alloc_init(&ta, fail_at);
    ta.fail_once = 1;
    et_init(&V, &(et_opts){.rules = r, .nrules = 3,
                           .core_alloc = tu_allocator(&ta)});
    int accepted[8] = {0};
    for (uint64_t id = 1; id <= 5; id++) {
        rc = et_submit(&V, id, 0);
        ck_assert(rc == 0 || rc == XFER_ERR_NOMEM);
        accepted[id] = rc == 0;
        if (id == 4 && rc == 0)
            xfer_engine_cancel(V.e, 4);
    }
    et_run(&V, et_all_done, 5000);
    for (uint64_t id = 1; id <= 5; id++)
        ck_assert_int_eq(V.ncb[id], accepted[id]);
    et_free(&V);
    ck_assert_int_eq(ta.live, 0);
    return ta.calls;
}

START_TEST(test_alloc_fail_each_allocation_in_turn)
{
    long total = scenario(-1);
    ck_assert_int_gt(total, 5);
    for (long n = 0; n < total; n++)
        scenario(n);
    printf("alloc_fail: %ld allocations, each failed in turn\n", total);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("alloc_fail");
    TCase *tc = tcase_create("each");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_alloc_fail_each_allocation_in_turn);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
