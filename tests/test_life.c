/*
 * tests/test_life.c - the engine's staging pool registry and the end of a
 * shutdown (fsm/life.h): the lowest free slot, refusals by their cause,
 * and the order SHUTDOWN_DONE, every completion delivered, every free pool
 * unregistered, then one report.  The engine's own shutdown test
 * (test_engine_shutdown_every_state) and xfer-check's I9 monitor run the
 * same code through their drivers.
 */
#include <check.h>
#include <string.h>

#include "life.h"
#include "testutil.h"

START_TEST(test_life_pool_add_takes_lowest_free_then_busy)
{
    xfer_life l = {0};
    xfer_life_pool pools[3];
    memset(pools, 0, sizeof pools);
    uint32_t p = 99;
    for (uint32_t want = 0; want < 3; want++) {
        ck_assert_int_eq(xfer_life_pool_add(&l, pools, 3, &p), 0);
        ck_assert_uint_eq(p, want);
    }
    p = 99;
    ck_assert_int_eq(xfer_life_pool_add(&l, pools, 3, &p), XFER_ERR_BUSY);
    ck_assert_uint_eq(p, 99);
    ck_assert_int_eq(xfer_life_pool_remove(pools, 3, 1), 0);
    ck_assert(!xfer_life_pool_live(pools, 3, 1));
    ck_assert_int_eq(xfer_life_pool_add(&l, pools, 3, &p), 0);
    ck_assert_uint_eq(p, 1);
    ck_assert(!xfer_life_pool_live(pools, 3, 3)); /* past the table */
}
END_TEST

START_TEST(test_life_pool_remove_refuses_held_and_unknown)
{
    xfer_life l = {0};
    xfer_life_pool pools[2];
    memset(pools, 0, sizeof pools);
    uint32_t p;
    ck_assert_int_eq(xfer_life_pool_remove(pools, 2, 0), XFER_ERR_NOT_FOUND);
    ck_assert_int_eq(xfer_life_pool_remove(pools, 2, 7), XFER_ERR_NOT_FOUND);
    ck_assert_int_eq(xfer_life_pool_add(&l, pools, 2, &p), 0);
    xfer_life_pool_hold(pools, 2, p);
    xfer_life_pool_hold(pools, 2, p);
    ck_assert_int_eq(xfer_life_pool_remove(pools, 2, p), XFER_ERR_BUSY);
    xfer_life_pool_release(pools, 2, p);
    ck_assert_int_eq(xfer_life_pool_remove(pools, 2, p), XFER_ERR_BUSY);
    xfer_life_pool_release(pools, 2, p);
    ck_assert_int_eq(xfer_life_pool_remove(pools, 2, p), 0);
    ck_assert_int_eq(xfer_life_pool_remove(pools, 2, p), XFER_ERR_NOT_FOUND);
}
END_TEST

START_TEST(test_life_stop_refuses_new_pools_and_a_second_stop)
{
    xfer_life l = {0};
    xfer_life_pool pools[2];
    memset(pools, 0, sizeof pools);
    uint32_t p = 99;
    ck_assert(xfer_life_open(&l));
    ck_assert(!xfer_life_pending(&l));
    ck_assert_int_eq(xfer_life_stop(&l), 0);
    ck_assert(!xfer_life_open(&l));
    ck_assert(xfer_life_pending(&l));
    ck_assert_int_eq(xfer_life_stop(&l), XFER_ERR_STATE);
    ck_assert_int_eq(xfer_life_pool_add(&l, pools, 2, &p), XFER_ERR_SHUTDOWN);
    ck_assert_uint_eq(p, 99);
}
END_TEST

/* Pools 0 and 2 are registered, 1 is free: after the core's SHUTDOWN_DONE
 * and only once nothing is left to deliver, 0 and 2 go, in that order,
 * then one report, then nothing more. */
START_TEST(test_life_shutdown_unregisters_every_pool_then_reports_once)
{
    xfer_life l = {0};
    xfer_life_pool pools[3];
    memset(pools, 0, sizeof pools);
    uint32_t p;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(xfer_life_pool_add(&l, pools, 3, &p), 0);
    ck_assert_int_eq(xfer_life_pool_remove(pools, 3, 1), 0);
    xfer_life_pool_hold(pools, 3, 2);
    ck_assert_int_eq(xfer_life_next(&l, pools, 3, true, &p), XFER_LIFE_WAIT);
    ck_assert_int_eq(xfer_life_stop(&l), 0);
    ck_assert_int_eq(xfer_life_next(&l, pools, 3, true, &p), XFER_LIFE_WAIT);
    xfer_life_pool_release(pools, 3, 2); /* the core's RELEASE_STAGING */
    xfer_life_core_done(&l);
    /* A completion still waits for delivery. */
    ck_assert_int_eq(xfer_life_next(&l, pools, 3, false, &p), XFER_LIFE_WAIT);
    ck_assert(xfer_life_pool_live(pools, 3, 0));
    p = 99;
    ck_assert_int_eq(xfer_life_next(&l, pools, 3, true, &p),
                     XFER_LIFE_UNREGISTER);
    ck_assert_uint_eq(p, 0);
    ck_assert(!xfer_life_pool_live(pools, 3, 0));
    ck_assert(xfer_life_pending(&l));
    ck_assert_int_eq(xfer_life_next(&l, pools, 3, true, &p),
                     XFER_LIFE_UNREGISTER);
    ck_assert_uint_eq(p, 2);
    ck_assert_int_eq(xfer_life_next(&l, pools, 3, true, &p),
                     XFER_LIFE_REPORT);
    ck_assert(!xfer_life_pending(&l));
    for (int i = 0; i < 3; i++)
        ck_assert(!xfer_life_pool_live(pools, 3, (uint32_t)i));
    ck_assert_int_eq(xfer_life_next(&l, pools, 3, true, &p), XFER_LIFE_WAIT);
}
END_TEST

/* SHUTDOWN_DONE without a shutdown (a broken core) ends nothing: the
 * pools stay and no report comes. */
START_TEST(test_life_core_done_without_stop_reports_nothing)
{
    xfer_life l = {0};
    xfer_life_pool pools[1];
    memset(pools, 0, sizeof pools);
    uint32_t p;
    ck_assert_int_eq(xfer_life_pool_add(&l, pools, 1, &p), 0);
    xfer_life_core_done(&l);
    ck_assert_int_eq(xfer_life_next(&l, pools, 1, true, &p), XFER_LIFE_WAIT);
    ck_assert(xfer_life_pool_live(pools, 1, 0));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("life");
    TCase *tc = tcase_create("life");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_life_pool_add_takes_lowest_free_then_busy);
    tcase_add_test(tc, test_life_pool_remove_refuses_held_and_unknown);
    tcase_add_test(tc, test_life_stop_refuses_new_pools_and_a_second_stop);
    tcase_add_test(tc,
                   test_life_shutdown_unregisters_every_pool_then_reports_once);
    tcase_add_test(tc, test_life_core_done_without_stop_reports_nothing);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
