/*
 * tests/test_ring.c - the ring buffer (fsm/ring.h): FIFO order across the
 * wrap, slots that stay put until popped, and moving the items into a
 * larger array.  Randomised against a plain array queue; prints its seed.
 */
#include <check.h>
#include <stdlib.h>

#include "ring.h"
#include "testutil.h"

START_TEST(test_ring_fifo_across_the_wrap)
{
    uint32_t a[3];
    xfer_ring r;
    xfer_ring_init(&r, 3);
    ck_assert(xfer_ring_empty(&r));
    a[xfer_ring_push(&r)] = 10;
    a[xfer_ring_push(&r)] = 11;
    ck_assert_uint_eq(a[xfer_ring_pop(&r)], 10);
    a[xfer_ring_push(&r)] = 12;
    uint32_t s13 = xfer_ring_push(&r); /* wraps to slot 0 */
    a[s13] = 13;
    ck_assert_uint_eq(s13, 0);
    ck_assert(xfer_ring_full(&r));
    ck_assert_uint_eq(a[xfer_ring_newest(&r)], 13);
    ck_assert_uint_eq(a[xfer_ring_slot(&r, 0)], 11);
    ck_assert_uint_eq(a[xfer_ring_slot(&r, 2)], 13);
    ck_assert_uint_eq(a[xfer_ring_pop(&r)], 11);
    ck_assert_uint_eq(a[xfer_ring_pop(&r)], 12);
    ck_assert_uint_eq(a[xfer_ring_pop(&r)], 13);
    ck_assert(xfer_ring_empty(&r));
    xfer_ring_reset(&r);
    ck_assert_uint_eq(xfer_ring_push(&r), 0);
}
END_TEST

/* A wrapped ring moved into a larger array keeps its order, oldest at
 * slot 0. */
START_TEST(test_ring_move_keeps_order)
{
    uint64_t from[4], to[8];
    xfer_ring r;
    xfer_ring_init(&r, 4);
    for (uint64_t v = 1; v <= 4; v++)
        from[xfer_ring_push(&r)] = v;
    xfer_ring_pop(&r);
    xfer_ring_pop(&r);
    from[xfer_ring_push(&r)] = 5;
    from[xfer_ring_push(&r)] = 6; /* items 3 4 5 6, head at slot 2 */
    xfer_ring_move(&r, to, 8, from, sizeof from[0]);
    ck_assert_uint_eq(r.head, 0);
    ck_assert_uint_eq(r.cap, 8);
    for (uint32_t i = 0; i < 4; i++)
        ck_assert_uint_eq(to[i], 3 + i);
    to[xfer_ring_push(&r)] = 7;
    ck_assert_uint_eq(to[4], 7);
    for (uint64_t v = 3; v <= 7; v++)
        ck_assert_uint_eq(to[xfer_ring_pop(&r)], v);
}
END_TEST

/* Growing through the allocator: out of memory changes nothing; else the
 * items move, oldest first, and the old array goes back. */
START_TEST(test_ring_grow_moves_or_changes_nothing)
{
    tu_alloc ta;
    tu_alloc_init(&ta, 1);
    ta.fail_once = 1; /* only the second allocation fails */
    xfer_allocator a = tu_allocator(&ta);
    xfer_ring r;
    xfer_ring_init(&r, 0);
    uint32_t *v = xfer_ring_grow(&r, NULL, sizeof *v, 2, &a);
    ck_assert_ptr_nonnull(v);
    v[xfer_ring_push(&r)] = 1;
    v[xfer_ring_push(&r)] = 2;
    xfer_ring_pop(&r);
    v[xfer_ring_push(&r)] = 3; /* wrapped: 2 3, the oldest in slot 1 */
    ck_assert_ptr_null(xfer_ring_grow(&r, v, sizeof *v, 4, &a));
    ck_assert_uint_eq(r.cap, 2);
    ck_assert_uint_eq(v[xfer_ring_slot(&r, 0)], 2);
    ck_assert_ptr_null(xfer_ring_grow(&r, v, sizeof *v, 1, &a)); /* < n */
    ck_assert_int_eq(ta.live, 1);
    uint32_t *w = xfer_ring_grow(&r, v, sizeof *w, 4, &a);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(ta.live, 1); /* v went back */
    ck_assert_uint_eq(r.cap, 4);
    ck_assert_uint_eq(r.head, 0);
    ck_assert_uint_eq(w[0], 2);
    ck_assert_uint_eq(w[1], 3);
    w[xfer_ring_push(&r)] = 4;
    for (uint32_t x = 2; x <= 4; x++)
        ck_assert_uint_eq(w[xfer_ring_pop(&r)], x);
    a.free(a.ud, w);
    ck_assert_int_eq(ta.live, 0);
    ck_assert_int_eq(ta.failures, 1);
}
END_TEST

START_TEST(test_ring_random_against_array_queue)
{
    uint64_t rng = tu_seed("test_ring_random_against_array_queue", 11);
    enum { OPS = 20000, MAXCAP = 64 };
    uint32_t cap = 1, *items = malloc(cap * sizeof *items);
    uint32_t want[OPS], wh = 0, wn = 0, next = 1;
    xfer_ring r;
    xfer_ring_init(&r, cap);
    for (int i = 0; i < OPS; i++) {
        uint64_t x = tu_rand(&rng) % 10;
        if (x < 5 && xfer_ring_full(&r) && cap < MAXCAP) {
            uint32_t *bigger = malloc(2 * cap * sizeof *bigger);
            xfer_ring_move(&r, bigger, 2 * cap, items, sizeof *items);
            free(items);
            items = bigger;
            cap *= 2;
        }
        if (x < 5 && !xfer_ring_full(&r)) {
            items[xfer_ring_push(&r)] = next;
            want[wh + wn++] = next++;
        } else if (!xfer_ring_empty(&r)) {
            ck_assert_uint_eq(items[xfer_ring_pop(&r)], want[wh]);
            wh++;
            wn--;
        }
        ck_assert_uint_eq(r.n, wn);
        for (uint32_t k = 0; k < wn; k++)
            ck_assert_uint_eq(items[xfer_ring_slot(&r, k)], want[wh + k]);
    }
    free(items);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ring");
    TCase *tc = tcase_create("ring");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_ring_fifo_across_the_wrap);
    tcase_add_test(tc, test_ring_move_keeps_order);
    tcase_add_test(tc, test_ring_grow_moves_or_changes_nothing);
    tcase_add_test(tc, test_ring_random_against_array_queue);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
