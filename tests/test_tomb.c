/*
 * tests/test_tomb.c - the bounded tombstone table (fsm/tomb.c): TTL, cap,
 * holds, FIFO expiry, and refresh (a repeated cancel gives a full TTL).
 */
#include <check.h>

#include "testutil.h"
#include "tomb.h"

static const xfer_allocator A = {0};

static int dropped;
static void on_drop(void *ud, const xfer_tomb_entry *e)
{
    dropped++;
}

START_TEST(test_tomb_ttl_and_fifo_expiry)
{
    xfer_tomb t;
    ck_assert_int_eq(xfer_tomb_init(&t, 4, 100, &A), 0);
    ck_assert_int_eq(xfer_tomb_insert(&t, 0, 1, 1, 0), 0);
    ck_assert_int_eq(xfer_tomb_insert(&t, 50, 2, 1, 0), 0);
    ck_assert_uint_eq(xfer_tomb_next_expiry(&t), 100);
    dropped = 0;
    ck_assert_uint_eq(xfer_tomb_expire(&t, 99, 0, on_drop, NULL), 0);
    ck_assert_uint_eq(xfer_tomb_expire(&t, 100, 0, on_drop, NULL), 1);
    ck_assert_ptr_null(xfer_tomb_find(&t, 1));
    ck_assert_ptr_nonnull(xfer_tomb_find(&t, 2));
    /* time never goes back: an earlier now is the latest seen */
    ck_assert_int_eq(xfer_tomb_insert(&t, 10, 3, 1, 0), 0);
    ck_assert_uint_eq(xfer_tomb_find(&t, 3)->expires_ns, 200);
    xfer_tomb_clear(&t, &A);
}
END_TEST

START_TEST(test_tomb_cap_never_evicts_young)
{
    xfer_tomb t;
    ck_assert_int_eq(xfer_tomb_init(&t, 3, 100, &A), 0);
    ck_assert_int_eq(xfer_tomb_hold(&t, 0), 0);
    ck_assert_int_eq(xfer_tomb_insert(&t, 0, 1, 1, 0), 0);
    ck_assert_int_eq(xfer_tomb_insert(&t, 0, 2, 1, 0), 0);
    ck_assert_int_eq(xfer_tomb_insert(&t, 10, 3, 1, 0), XFER_ERR_BUSY);
    ck_assert_int_eq(xfer_tomb_hold(&t, 10), XFER_ERR_BUSY);
    ck_assert_ptr_nonnull(xfer_tomb_find(&t, 1));
    /* the hold always becomes an entry */
    xfer_tomb_insert_held(&t, 20, 4, 2, 1);
    ck_assert_ptr_nonnull(xfer_tomb_find(&t, 4));
    ck_assert_int_eq(xfer_tomb_insert(&t, 100, 3, 1, 0), 0); /* room now */
    ck_assert_ptr_null(xfer_tomb_find(&t, 1));
    xfer_tomb_clear(&t, &A);
}
END_TEST

START_TEST(test_tomb_refresh_gives_full_ttl)
{
    xfer_tomb t;
    ck_assert_int_eq(xfer_tomb_init(&t, 4, 100, &A), 0);
    ck_assert_int_eq(xfer_tomb_insert(&t, 0, 1, 1, 7), 0);
    ck_assert_int_eq(xfer_tomb_insert(&t, 10, 2, 1, 7), 0);
    /* id 1 is not the newest: a new entry supersedes the old one */
    ck_assert_int_eq(xfer_tomb_refresh(&t, 50, 1, 1, 7), 0);
    ck_assert_uint_eq(xfer_tomb_find(&t, 1)->expires_ns, 150);
    ck_assert_uint_eq(xfer_tomb_live(&t), 2);
    dropped = 0;
    xfer_tomb_expire(&t, 120, 0, on_drop, NULL);
    ck_assert_int_eq(dropped, 1); /* id 2 only; the dead entry is silent */
    ck_assert_ptr_nonnull(xfer_tomb_find(&t, 1));
    /* the newest entry is extended in place */
    ck_assert_int_eq(xfer_tomb_refresh(&t, 140, 1, 1, 7), 0);
    ck_assert_uint_eq(xfer_tomb_find(&t, 1)->expires_ns, 240);
    ck_assert_uint_eq(xfer_tomb_expire(&t, 239, 0, on_drop, NULL), 0);
    ck_assert_ptr_nonnull(xfer_tomb_find(&t, 1));
    ck_assert_uint_eq(xfer_tomb_expire(&t, 240, 0, on_drop, NULL), 1);
    ck_assert_uint_eq(xfer_tomb_live(&t), 0);
    ck_assert_uint_eq(xfer_tomb_entries(&t), 0);
    /* refresh of an unknown id inserts it */
    ck_assert_int_eq(xfer_tomb_refresh(&t, 300, 9, 2, 7), 0);
    ck_assert_uint_eq(xfer_tomb_find(&t, 9)->attempt, 2);
    xfer_tomb_clear(&t, &A);
}
END_TEST

/* Ids in any order, a reset and a restore: find answers from the map
 * whatever the quick "above every id" bound says (tomb.h, max_id). */
START_TEST(test_tomb_find_any_order_after_reset_and_restore)
{
    xfer_tomb t;
    ck_assert_int_eq(xfer_tomb_init(&t, 8, 100, &A), 0);
    ck_assert_int_eq(xfer_tomb_insert(&t, 0, 100, 1, 0), 0);
    ck_assert_int_eq(xfer_tomb_insert(&t, 1, 50, 1, 0), 0);
    ck_assert_ptr_nonnull(xfer_tomb_find(&t, 50));
    ck_assert_ptr_nonnull(xfer_tomb_find(&t, 100));
    ck_assert_ptr_null(xfer_tomb_find(&t, 75));
    ck_assert_ptr_null(xfer_tomb_find(&t, 101));
    uint8_t buf[256];
    xfer_le_enc e = xfer_le_enc_start(buf, sizeof buf);
    xfer_tomb_save(&t, &e);
    xfer_tomb_reset(&t);
    ck_assert_ptr_null(xfer_tomb_find(&t, 100));
    ck_assert_int_eq(xfer_tomb_insert(&t, 0, 7, 1, 0), 0);
    ck_assert_ptr_nonnull(xfer_tomb_find(&t, 7));
    xfer_le_dec d = xfer_le_dec_start(buf, e.at);
    ck_assert_int_eq(xfer_tomb_restore(&t, &d, 0), 0);
    ck_assert_ptr_null(xfer_tomb_find(&t, 7));
    ck_assert_ptr_nonnull(xfer_tomb_find(&t, 50));
    ck_assert_uint_eq(xfer_tomb_find(&t, 100)->expires_ns, 100);
    xfer_tomb_clear(&t, &A);
}
END_TEST

START_TEST(test_tomb_alloc_failure)
{
    for (long n = 0; n < 4; n++) {
        tu_alloc ta;
        tu_alloc_init(&ta, n);
        xfer_allocator a = tu_allocator(&ta);
        xfer_tomb t;
        int rc = xfer_tomb_init(&t, 16, 1, &a);
        if (rc == 0) {
            xfer_tomb_clear(&t, &a);
        } else {
            ck_assert_int_eq(rc, XFER_ERR_NOMEM);
        }
        ck_assert_int_eq(ta.live, 0);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tomb");
    TCase *tc = tcase_create("tomb");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_tomb_ttl_and_fifo_expiry);
    tcase_add_test(tc, test_tomb_cap_never_evicts_young);
    tcase_add_test(tc, test_tomb_refresh_gives_full_ttl);
    tcase_add_test(tc, test_tomb_find_any_order_after_reset_and_restore);
    tcase_add_test(tc, test_tomb_alloc_failure);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
