/*
 * tests/test_idmap.c - the id map (fsm/idmap.c): put, get, overwrite and
 * backward-shift delete, and reset, randomised against a plain array (ids
 * in any order, so the "above every key" bound is exercised); prints its
 * seed.
 */
#include <check.h>
#include <string.h>

#include "idmap.h"
#include "testutil.h"

static const xfer_allocator A = {0};

START_TEST(test_idmap_random_against_array)
{
    uint64_t rng = tu_seed("test_idmap_random_against_array", 9);
    enum { N = 200, CAP = 150 };
    xfer_idmap m;
    ck_assert_int_eq(xfer_idmap_init(&m, CAP, &A), 0);
    uint32_t val[N + 1];
    int in[N + 1] = {0};
    uint32_t count = 0;
    for (int step = 0; step < 50000; step++) {
        uint64_t id = 1 + tu_rand(&rng) % N;
        if (tu_rand(&rng) % 2 && (in[id] || count < CAP)) {
            val[id] = (uint32_t)tu_rand(&rng);
            count += !in[id];
            in[id] = 1;
            xfer_idmap_put(&m, id, val[id]);
        } else {
            ck_assert_int_eq(xfer_idmap_del(&m, id), in[id]);
            count -= in[id];
            in[id] = 0;
        }
        uint64_t probe = 1 + tu_rand(&rng) % N;
        uint32_t v = 0;
        ck_assert_int_eq(xfer_idmap_get(&m, probe, &v), in[probe]);
        if (in[probe])
            ck_assert_uint_eq(v, val[probe]);
        ck_assert_uint_eq(m.n, count);
        if (step % 10000 == 9999) { /* reset: empty, and the bound with it */
            xfer_idmap_reset(&m);
            memset(in, 0, sizeof in);
            count = 0;
            ck_assert_uint_eq(m.max_id, 0);
        }
    }
    ck_assert(!xfer_idmap_get(&m, 0, &(uint32_t){0}));
    xfer_idmap_clear(&m, &A);
}
END_TEST

START_TEST(test_idmap_bad_capacity)
{
    xfer_idmap m;
    ck_assert_int_eq(xfer_idmap_init(&m, 0, &A), XFER_ERR_INVALID_ARG);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("idmap");
    TCase *tc = tcase_create("idmap");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_idmap_random_against_array);
    tcase_add_test(tc, test_idmap_bad_capacity);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
