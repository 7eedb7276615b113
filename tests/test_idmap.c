/*
 * tests/test_idmap.c - the id map (fsm/idmap.c): put, get, overwrite,
 * backward-shift delete and reset, randomised against a plain array (ids
 * in any order, so the "above every key" bound is exercised, and ids in
 * sequential runs from several producers, the layout's common case); and
 * the layout itself: a run of ids in one aligned line, collisions that
 * probe on and shift back, a probe run that wraps past the last bucket,
 * the table filled to its cap, the allocator's failure.  The randomised
 * tests print their seed and check the probing invariant after every step.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "idmap.h"
#include "testutil.h"

static const xfer_allocator A = {0};

/* Every key is reachable from its home without crossing an empty bucket,
 * and n counts the keys. */
static void check_invariant(const xfer_idmap *m)
{
    uint32_t keys = 0;
    for (uint32_t i = 0; i < m->nb; i++) {
        if (!m->b[i].key)
            continue;
        keys++;
        ck_assert_uint_le(m->b[i].key, m->max_id);
        ck_assert_uint_eq(m->b[i].home, xfer_idmap_home(m, m->b[i].key));
        for (uint32_t j = xfer_idmap_home(m, m->b[i].key); j != i;
             j = (j + 1) % m->nb)
            ck_assert_uint_ne(m->b[j].key, 0);
    }
    ck_assert_uint_eq(keys, m->n);
}

/* A random walk of puts and deletes against an array indexed by id - 1
 * (nids of them), ids drawn by `draw`. */
typedef uint64_t (*draw_fn)(uint64_t *rng, uint64_t nids);

static void against_array(const char *name, uint32_t cap, uint64_t nids,
                          draw_fn draw, int steps)
{
    uint64_t rng = tu_seed(name, 9);
    xfer_idmap m;
    ck_assert_int_eq(xfer_idmap_init(&m, cap, &A), 0);
    uint32_t *val = calloc(nids + 1, sizeof *val);
    char *in = calloc(nids + 1, 1);
    ck_assert(val && in);
    uint32_t count = 0;
    for (int step = 0; step < steps; step++) {
        uint64_t id = draw(&rng, nids);
        if (tu_rand(&rng) % 2 && (in[id] || count < cap)) {
            val[id] = (uint32_t)tu_rand(&rng);
            count += !in[id];
            in[id] = 1;
            xfer_idmap_put(&m, id, val[id]);
        } else {
            ck_assert_int_eq(xfer_idmap_del(&m, id), in[id]);
            count -= in[id];
            in[id] = 0;
        }
        uint64_t probe = draw(&rng, nids);
        uint32_t v = 0;
        ck_assert_int_eq(xfer_idmap_get(&m, probe, &v), in[probe]);
        if (in[probe])
            ck_assert_uint_eq(v, val[probe]);
        ck_assert_uint_eq(m.n, count);
        if (step % 1000 == 0)
            check_invariant(&m);
        if (step % 10000 == 9999) { /* reset: empty, and the bound with it */
            xfer_idmap_reset(&m);
            memset(in, 0, nids + 1);
            count = 0;
            ck_assert_uint_eq(m.max_id, 0);
        }
    }
    check_invariant(&m);
    for (uint64_t id = 1; id <= nids; id++) {
        uint32_t v = 0;
        ck_assert_int_eq(xfer_idmap_get(&m, id, &v), in[id]);
        if (in[id])
            ck_assert_uint_eq(v, val[id]);
    }
    ck_assert(!xfer_idmap_get(&m, 0, &(uint32_t){0}));
    xfer_idmap_clear(&m, &A);
    free(val);
    free(in);
}

static uint64_t draw_uniform(uint64_t *rng, uint64_t nids)
{
    return 1 + tu_rand(rng) % nids;
}

/* Four producers, each near the end of its own block of ids: the runs the
 * layout keeps in one line, interleaved. */
static uint64_t draw_runs(uint64_t *rng, uint64_t nids)
{
    uint64_t block = nids / 4, r = tu_rand(rng);
    uint64_t base = (r % 4) * block;
    return 1 + base + (block - 1 - (r >> 8) % 24 % block);
}

START_TEST(test_idmap_random_against_array)
{
    against_array("test_idmap_random_against_array", 150, 200, draw_uniform,
                  50000);
}
END_TEST

START_TEST(test_idmap_runs_against_array)
{
    /* caps that are not a multiple of a line, and one of a single entry */
    static const uint32_t caps[] = {1, 3, 37, 96};
    for (unsigned i = 0; i < sizeof caps / sizeof caps[0]; i++)
        against_array("test_idmap_runs_against_array", caps[i], 400,
                      draw_runs, 20000);
}
END_TEST

START_TEST(test_idmap_bad_capacity)
{
    xfer_idmap m;
    ck_assert_int_eq(xfer_idmap_init(&m, 0, &A), XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_idmap_init(&m, (1u << 30) + 1, &A),
                     XFER_ERR_INVALID_ARG);
    ck_assert_ptr_null(m.b);
}
END_TEST

/* Ids 4k .. 4k+3 go, in order, to the four buckets of one 64-byte line,
 * and the table has 1.5 buckets per entry in whole lines. */
START_TEST(test_idmap_run_fills_one_line)
{
    xfer_idmap m;
    ck_assert_int_eq(xfer_idmap_init(&m, 1000, &A), 0);
    ck_assert_uint_eq(m.nb % XFER_IDMAP_RUN, 0);
    ck_assert_uint_le(m.nb, 1000 + 500 + XFER_IDMAP_RUN);
    ck_assert_uint_gt(m.nb, 1000);
    uint32_t lines_seen = 0;
    for (uint64_t k = 1; k < 200; k++) {
        uint32_t h0 = xfer_idmap_home(&m, 4 * k);
        ck_assert_uint_eq(h0 % 4, 0);
        for (uint64_t d = 1; d < 4; d++)
            ck_assert_uint_eq(xfer_idmap_home(&m, 4 * k + d), h0 + d);
        lines_seen += h0 != xfer_idmap_home(&m, 4 * (k - 1));
    }
    ck_assert_uint_gt(lines_seen, 150); /* runs spread over the lines */
    /* An empty table puts each id of a run in its home bucket, and the
     * four share one line of memory. */
    for (uint64_t id = 40; id < 44; id++)
        xfer_idmap_put(&m, id, (uint32_t)id * 3);
    uint32_t h = xfer_idmap_home(&m, 40);
    for (uint64_t d = 0; d < 4; d++) {
        ck_assert_uint_eq(m.b[h + d].key, 40 + d);
        ck_assert_uint_eq(m.b[h + d].val, (40 + d) * 3);
    }
    ck_assert_uint_eq((uintptr_t)&m.b[h] / 64,
                      (uintptr_t)&m.b[h + 3] / 64);
    xfer_idmap_clear(&m, &A);
}
END_TEST

/* An allocator whose blocks are only 8-byte aligned: the map aligns its
 * buckets to a line itself, and frees what it was given. */
static long misaligned_live;

static void *misaligned_alloc(void *ud, size_t size)
{
    (void)ud;
    char *p = malloc(size + 72);
    if (!p)
        return NULL;
    misaligned_live++;
    size_t off = (8 + 64 - (uintptr_t)p % 64) % 64; /* q % 64 == 8 */
    if (off < sizeof p)
        off += 64;
    char *q = p + off;
    memcpy(q - sizeof p, &p, sizeof p);
    return q;
}

static void misaligned_free(void *ud, void *q)
{
    (void)ud;
    if (!q)
        return;
    char *p;
    memcpy(&p, (char *)q - sizeof p, sizeof p);
    misaligned_live--;
    free(p);
}

START_TEST(test_idmap_aligns_buckets_to_a_line)
{
    xfer_allocator a = {.alloc = misaligned_alloc, .free = misaligned_free};
    xfer_idmap m;
    ck_assert_int_eq(xfer_idmap_init(&m, 77, &a), 0);
    ck_assert_uint_eq((uintptr_t)m.raw % 64, 8);
    ck_assert_uint_eq((uintptr_t)m.b % 64, 0);
    ck_assert((char *)m.b >= (char *)m.raw);
    /* every bucket is inside the allocation: write them all */
    for (uint64_t id = 1; id <= 77; id++)
        xfer_idmap_put(&m, id, (uint32_t)id);
    check_invariant(&m);
    ck_assert_int_eq(misaligned_live, 1);
    xfer_idmap_clear(&m, &a);
    ck_assert_int_eq(misaligned_live, 0);
    ck_assert_ptr_null(m.b);
}
END_TEST

START_TEST(test_idmap_nomem)
{
    tu_alloc ta;
    tu_alloc_init(&ta, 0);
    xfer_allocator a = tu_allocator(&ta);
    xfer_idmap m;
    ck_assert_int_eq(xfer_idmap_init(&m, 10, &a), XFER_ERR_NOMEM);
    ck_assert_ptr_null(m.b);
    ck_assert_int_eq(ta.live, 0);
}
END_TEST

/* The first id found from `from` on whose home is `h`. */
static uint64_t id_with_home(const xfer_idmap *m, uint32_t h, uint64_t from)
{
    for (uint64_t id = from;; id++)
        if (xfer_idmap_home(m, id) == h)
            return id;
}

/* Three ids with one home: they sit in home, home+1, home+2; deleting the
 * first pulls the others back, each one bucket, and all stay found. */
START_TEST(test_idmap_collision_shifts_back)
{
    xfer_idmap m;
    ck_assert_int_eq(xfer_idmap_init(&m, 64, &A), 0);
    uint32_t h = 4 * 5 + 1;
    uint64_t a = id_with_home(&m, h, 1);
    uint64_t b = id_with_home(&m, h, a + 1);
    uint64_t c = id_with_home(&m, h, b + 1);
    xfer_idmap_put(&m, a, 1);
    xfer_idmap_put(&m, b, 2);
    xfer_idmap_put(&m, c, 3);
    ck_assert_uint_eq(m.b[h].key, a);
    ck_assert_uint_eq(m.b[h + 1].key, b);
    ck_assert_uint_eq(m.b[h + 2].key, c);
    /* an id whose home is h+1 lands after the run and stays there when
     * the hole opens at h (its home is not before the hole) */
    uint64_t d = id_with_home(&m, h + 1, 1);
    xfer_idmap_put(&m, d, 4);
    ck_assert_uint_eq(m.b[h + 3].key, d);
    ck_assert(xfer_idmap_del(&m, a));
    ck_assert_uint_eq(m.b[h].key, b);
    ck_assert_uint_eq(m.b[h + 1].key, c);
    ck_assert_uint_eq(m.b[h + 2].key, d); /* pulled to its home + 1 */
    ck_assert_uint_eq(m.b[h + 3].key, 0);
    uint32_t v;
    ck_assert(xfer_idmap_get(&m, b, &v) && v == 2);
    ck_assert(xfer_idmap_get(&m, c, &v) && v == 3);
    ck_assert(xfer_idmap_get(&m, d, &v) && v == 4);
    ck_assert(!xfer_idmap_get(&m, a, &v));
    check_invariant(&m);
    xfer_idmap_clear(&m, &A);
}
END_TEST

/* A probe run that passes the last bucket goes on at bucket 0; a delete
 * before the wrap pulls the wrapped key back across it. */
START_TEST(test_idmap_probe_wraps)
{
    xfer_idmap m;
    ck_assert_int_eq(xfer_idmap_init(&m, 6, &A), 0); /* 12 buckets */
    uint32_t last = m.nb - 1;
    uint64_t a = id_with_home(&m, last, 1);
    uint64_t b = id_with_home(&m, last, a + 1);
    xfer_idmap_put(&m, a, 10);
    xfer_idmap_put(&m, b, 20);
    ck_assert_uint_eq(m.b[last].key, a);
    ck_assert_uint_eq(m.b[0].key, b);
    /* an id at home 0 goes after the wrapped one */
    uint64_t c = id_with_home(&m, 0, 1);
    xfer_idmap_put(&m, c, 30);
    ck_assert_uint_eq(m.b[1].key, c);
    check_invariant(&m);
    ck_assert(xfer_idmap_del(&m, a));
    ck_assert_uint_eq(m.b[last].key, b);
    ck_assert_uint_eq(m.b[0].key, c);
    ck_assert_uint_eq(m.b[1].key, 0);
    uint32_t v;
    ck_assert(xfer_idmap_get(&m, b, &v) && v == 20);
    ck_assert(xfer_idmap_get(&m, c, &v) && v == 30);
    check_invariant(&m);
    xfer_idmap_clear(&m, &A);
}
END_TEST

/* Filled to its cap (ids that all collide in few lines included), every
 * entry is found, and emptying it in another order leaves every bucket
 * empty. */
START_TEST(test_idmap_full_to_cap)
{
    enum { CAP = 101 };
    xfer_idmap m;
    ck_assert_int_eq(xfer_idmap_init(&m, CAP, &A), 0);
    uint64_t ids[CAP];
    for (uint32_t i = 0; i < CAP; i++) { /* homes in the first 3 lines */
        uint64_t from = i ? ids[i - 1] + 1 : 1;
        for (ids[i] = from; xfer_idmap_home(&m, ids[i]) >= 12; ids[i]++)
            ;
        xfer_idmap_put(&m, ids[i], i);
    }
    ck_assert_uint_eq(m.n, CAP);
    check_invariant(&m);
    for (uint32_t i = 0; i < CAP; i++) {
        uint32_t v;
        ck_assert(xfer_idmap_get(&m, ids[i], &v));
        ck_assert_uint_eq(v, i);
    }
    for (uint32_t i = 0; i < CAP; i++) {
        uint32_t k = (i * 37) % CAP; /* 37 is prime to 101 */
        ck_assert(xfer_idmap_del(&m, ids[k]));
        ck_assert(!xfer_idmap_del(&m, ids[k]));
        if (i % 10 == 0)
            check_invariant(&m);
    }
    for (uint32_t i = 0; i < m.nb; i++)
        ck_assert_uint_eq(m.b[i].key, 0);
    ck_assert_uint_eq(m.n, 0);
    xfer_idmap_clear(&m, &A);
}
END_TEST

START_TEST(test_idmap_del_if_checks_the_value)
{
    xfer_idmap m;
    ck_assert_int_eq(xfer_idmap_init(&m, 8, &A), 0);
    xfer_idmap_put(&m, 5, 50);
    ck_assert(!xfer_idmap_del_if(&m, 5, 51));
    ck_assert(!xfer_idmap_del_if(&m, 6, 50));
    ck_assert(!xfer_idmap_del_if(&m, 0, 0));
    ck_assert_uint_eq(m.n, 1);
    ck_assert(xfer_idmap_del_if(&m, 5, 50));
    ck_assert_uint_eq(m.n, 0);
    ck_assert(!xfer_idmap_get(&m, 5, &(uint32_t){0}));
    xfer_idmap_clear(&m, &A);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("idmap");
    TCase *tc = tcase_create("idmap");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_idmap_random_against_array);
    tcase_add_test(tc, test_idmap_runs_against_array);
    tcase_add_test(tc, test_idmap_bad_capacity);
    tcase_add_test(tc, test_idmap_run_fills_one_line);
    tcase_add_test(tc, test_idmap_aligns_buckets_to_a_line);
    tcase_add_test(tc, test_idmap_nomem);
    tcase_add_test(tc, test_idmap_collision_shifts_back);
    tcase_add_test(tc, test_idmap_probe_wraps);
    tcase_add_test(tc, test_idmap_full_to_cap);
    tcase_add_test(tc, test_idmap_del_if_checks_the_value);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
