/*
 * tests/test_heap.c - the deadline heap (fsm/heap.c): pops in (deadline,
 * set order) whatever the insertion order, moves and removes keep the heap
 * valid.  Randomised against a brute-force minimum; prints its seed.
 */
#include <check.h>

#include "heap.h"
#include "testutil.h"

static const xfer_allocator A = {0};

START_TEST(test_heap_ties_pop_in_set_order)
{
    xfer_heap h;
    ck_assert_int_eq(xfer_heap_init(&h, 8, &A), 0);
    xfer_heap_set(&h, 5, 100);
    xfer_heap_set(&h, 2, 100);
    xfer_heap_set(&h, 7, 50);
    uint32_t slot;
    uint64_t due;
    uint32_t want[] = {7, 5, 2};
    for (int i = 0; i < 3; i++) {
        ck_assert(xfer_heap_peek(&h, &slot, &due));
        ck_assert_uint_eq(slot, want[i]);
        xfer_heap_remove(&h, slot);
    }
    ck_assert(!xfer_heap_peek(&h, &slot, &due));
    ck_assert_uint_eq(xfer_heap_min(&h), UINT64_MAX);
    xfer_heap_clear(&h, &A);
}
END_TEST

START_TEST(test_heap_random_against_brute_force)
{
    uint64_t rng = tu_seed("test_heap_random_against_brute_force", 5);
    enum { N = 64 };
    xfer_heap h;
    ck_assert_int_eq(xfer_heap_init(&h, N, &A), 0);
    uint64_t key[N];
    int in[N] = {0};
    for (int step = 0; step < 20000; step++) {
        uint32_t s = (uint32_t)(tu_rand(&rng) % N);
        if (tu_rand(&rng) % 3) {
            key[s] = tu_rand(&rng) % 1000;
            xfer_heap_set(&h, s, key[s]);
            in[s] = 1;
        } else {
            xfer_heap_remove(&h, s);
            in[s] = 0;
        }
        uint64_t min = UINT64_MAX;
        for (int i = 0; i < N; i++)
            if (in[i] && key[i] < min)
                min = key[i];
        ck_assert_uint_eq(xfer_heap_min(&h), min);
        ck_assert_int_eq(xfer_heap_contains(&h, s), in[s]);
    }
    xfer_heap_clear(&h, &A);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("heap");
    TCase *tc = tcase_create("heap");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_heap_ties_pop_in_set_order);
    tcase_add_test(tc, test_heap_random_against_brute_force);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
