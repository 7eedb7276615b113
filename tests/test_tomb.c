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

START_TEST(test_tomb_owners_quota_visibility_and_room)
{
    xfer_tomb t;
    ck_assert_int_eq(xfer_tomb_init(&t, 8, 100, &A), 0);
    ck_assert_int_eq(xfer_tomb_owners_init(&t, 2, 3, &A), 0);
    ck_assert_int_eq(xfer_tomb_owners_init(&t, 2, 3, &A),
                     XFER_ERR_INVALID_ARG);
    /* Owner 1: a hold and two entries, then its quota is spent. */
    ck_assert_int_eq(xfer_tomb_hold_by(&t, 0, 1), 0);
    ck_assert_int_eq(xfer_tomb_insert_by(&t, 0, 10, 1, 0, 1, 0), 0);
    ck_assert_int_eq(xfer_tomb_insert_by(&t, 0, 11, 1, 0, 1, 0), 0);
    ck_assert_uint_eq(xfer_tomb_owned(&t, 1), 3);
    ck_assert_int_eq(xfer_tomb_insert_by(&t, 0, 12, 1, 0, 1, 0),
                     XFER_ERR_BUSY);
    ck_assert_int_eq(xfer_tomb_hold_by(&t, 0, 1), XFER_ERR_BUSY);
    /* Owner 2 and nobody in particular still have room. */
    ck_assert_int_eq(xfer_tomb_insert_by(&t, 0, 20, 1, 0, 2, 0), 0);
    ck_assert_int_eq(xfer_tomb_insert(&t, 0, 30, 1, 0), 0);
    ck_assert_uint_eq(xfer_tomb_owned(&t, 2), 1);
    ck_assert_uint_eq(xfer_tomb_owned(&t, 0), 0);
    /* Visibility: an owner's entry blocks it, nobody else but owner 0. */
    const xfer_tomb_entry *e = xfer_tomb_find(&t, 10);
    ck_assert(xfer_tomb_visible(e, 1));
    ck_assert(!xfer_tomb_visible(e, 2));
    ck_assert(xfer_tomb_visible(e, 0));
    ck_assert(xfer_tomb_visible(xfer_tomb_find(&t, 30), 2));
    /* A second owner's tombstone of the id leaves the first's as it is:
     * two owners never make one entry that blocks a third. */
    ck_assert_int_eq(xfer_tomb_insert_by(&t, 0, 10, 1, 0, 2, 0), 0);
    ck_assert(!xfer_tomb_visible(xfer_tomb_find(&t, 10), 2));
    ck_assert(!xfer_tomb_visible(xfer_tomb_find(&t, 10), 3));
    ck_assert_uint_eq(xfer_tomb_owned(&t, 2), 1); /* no new room taken */
    /* Only a GLOBAL insert (the consumer's) makes it block everyone. */
    ck_assert_int_eq(xfer_tomb_insert_by(&t, 0, 10, 1, 0, 3,
                                         XFER_TOMB_GLOBAL), 0);
    ck_assert(xfer_tomb_visible(xfer_tomb_find(&t, 10), 2));
    /* The hold of owner 1 becomes an entry of id 20 (owner 2's): the old
     * entry dies but keeps owner 2's room until it is popped. */
    xfer_tomb_insert_held_by(&t, 50, 20, 1, 0, 1, 0);
    e = xfer_tomb_find(&t, 20);
    ck_assert_uint_eq(e->owner, 1);
    ck_assert(!xfer_tomb_visible(e, 2)); /* owner 1's now, not everyone's */
    ck_assert(xfer_tomb_visible(e, 1));
    ck_assert_uint_eq(xfer_tomb_owned(&t, 1), 3);
    ck_assert_uint_eq(xfer_tomb_owned(&t, 2), 1);
    /* Expiry gives the room back, dead entries included. */
    xfer_tomb_expire(&t, 100, 0, NULL, NULL);
    ck_assert_uint_eq(xfer_tomb_owned(&t, 1), 1);
    ck_assert_uint_eq(xfer_tomb_owned(&t, 2), 0);
    xfer_tomb_expire(&t, 150, 0, NULL, NULL);
    ck_assert_uint_eq(xfer_tomb_owned(&t, 1), 0);
    xfer_tomb_clear(&t, &A);
}
END_TEST

START_TEST(test_tomb_owners_save_restore)
{
    xfer_tomb t, u;
    ck_assert_int_eq(xfer_tomb_init(&t, 8, 100, &A), 0);
    ck_assert_int_eq(xfer_tomb_owners_init(&t, 3, 4, &A), 0);
    ck_assert_int_eq(xfer_tomb_init(&u, 8, 100, &A), 0);
    ck_assert_int_eq(xfer_tomb_owners_init(&u, 3, 4, &A), 0);
    ck_assert_int_eq(xfer_tomb_insert_by(&t, 5, 1, 1, 7, 1, 0), 0);
    ck_assert_int_eq(xfer_tomb_insert_by(&t, 6, 2, 1, 7, 3,
                                         XFER_TOMB_GLOBAL),
                     0);
    uint8_t buf[256];
    xfer_le_enc w = xfer_le_enc_start(buf, sizeof buf);
    xfer_tomb_save(&t, &w);
    ck_assert_uint_eq(w.at, 4 + 2 * 24);
    xfer_le_dec d = xfer_le_dec_start(buf, w.at);
    ck_assert(xfer_tomb_check(&u, &d, 1, NULL, NULL));
    d = xfer_le_dec_start(buf, w.at);
    ck_assert_int_eq(xfer_tomb_restore(&u, &d, 1), 0);
    xfer_tomb_charge_hold(&u, 2);
    ck_assert_uint_eq(xfer_tomb_owned(&u, 1), 1);
    ck_assert_uint_eq(xfer_tomb_owned(&u, 2), 1);
    ck_assert_uint_eq(xfer_tomb_owned(&u, 3), 1);
    ck_assert_uint_eq(xfer_tomb_find(&u, 2)->flags, XFER_TOMB_GLOBAL);
    ck_assert(!xfer_tomb_visible(xfer_tomb_find(&u, 1), 2));
    /* An owner past the table's is refused. */
    buf[4 + 21] = 9;
    d = xfer_le_dec_start(buf, w.at);
    ck_assert(!xfer_tomb_check(&u, &d, 0, NULL, NULL));
    xfer_tomb_clear(&t, &A);
    xfer_tomb_clear(&u, &A);
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
    tcase_add_test(tc, test_tomb_owners_quota_visibility_and_room);
    tcase_add_test(tc, test_tomb_owners_save_restore);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
