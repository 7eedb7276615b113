/*
 * tests/test_pool.c - the shard's offset allocator (fsm/pool.c): alignment,
 * first fit, coalescing, exhaustion, full reuse, a seeded random workload
 * checked against the free-list invariants, and failing allocation.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "testutil.h"

static xfer_allocator libc_alloc = {0};

/* The invariants of pool.c, checked from outside. */
static void check_invariants(const xfer_pool *p)
{
    uint32_t n;
    const xfer_pool_ext *e = xfer_pool_extents(p, &n);
    uint64_t free_bytes = 0;
    ck_assert_uint_le(n, p->nallocs + 1);
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_uint_gt(e[i].len, 0);
        ck_assert_uint_eq(e[i].off % p->align, 0);
        ck_assert_uint_eq(e[i].len % p->align, 0);
        ck_assert_uint_le(e[i].off + e[i].len, p->size);
        if (i > 0) /* sorted and coalesced: never touching */
            ck_assert_uint_gt(e[i].off, e[i - 1].off + e[i - 1].len);
        free_bytes += e[i].len;
    }
    ck_assert_uint_eq(p->in_use, p->size - free_bytes);
}

START_TEST(test_pool_alignment)
{
    xfer_pool p;
    ck_assert_int_eq(xfer_pool_init(&p, 4096 + 50, 64, 16, &libc_alloc), 0);
    ck_assert_uint_eq(p.size, 4096); /* rounded down to the alignment */
    uint64_t off[5];
    const uint32_t lens[5] = {1, 63, 64, 65, 0};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(xfer_pool_alloc(&p, lens[i], &off[i]), 0);
        ck_assert_uint_eq(off[i] % 64, 0);
    }
    /* 1 -> 64, 63 -> 64, 64 -> 64, 65 -> 128, 0 -> 64 */
    ck_assert_uint_eq(off[1], 64);
    ck_assert_uint_eq(off[3], 192);
    ck_assert_uint_eq(off[4], 320);
    ck_assert_uint_eq(p.in_use, 64 * 6);
    ck_assert_uint_eq(xfer_pool_round(&p, 65), 128);
    ck_assert_uint_eq(xfer_pool_round(&p, UINT64_MAX), UINT64_MAX);
    check_invariants(&p);
    xfer_pool_clear(&p, &libc_alloc);

    ck_assert_int_eq(xfer_pool_init(&p, 4096, 48, 16, &libc_alloc),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_pool_init(&p, 32, 64, 16, &libc_alloc),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_pool_init(&p, 4096, 64, 0, &libc_alloc),
                     XFER_ERR_INVALID_ARG);
}
END_TEST

START_TEST(test_pool_first_fit)
{
    xfer_pool p;
    uint64_t a, b, c, d, x;
    ck_assert_int_eq(xfer_pool_init(&p, 1024, 64, 8, &libc_alloc), 0);
    ck_assert_int_eq(xfer_pool_alloc(&p, 128, &a), 0); /* [0,128) */
    ck_assert_int_eq(xfer_pool_alloc(&p, 64, &b), 0);  /* [128,192) */
    ck_assert_int_eq(xfer_pool_alloc(&p, 256, &c), 0); /* [192,448) */
    ck_assert_int_eq(xfer_pool_alloc(&p, 64, &d), 0);  /* [448,512) */
    xfer_pool_free(&p, a, 128);
    xfer_pool_free(&p, c, 256);
    /* Free: [0,128) [192,448) [512,1024).  64 fits the first hole. */
    ck_assert_int_eq(xfer_pool_alloc(&p, 64, &x), 0);
    ck_assert_uint_eq(x, 0);
    /* 192 does not fit [64,128): first fit is [192,448). */
    ck_assert_int_eq(xfer_pool_alloc(&p, 192, &x), 0);
    ck_assert_uint_eq(x, 192);
    /* 300 -> 320 fits only the tail. */
    ck_assert_int_eq(xfer_pool_alloc(&p, 300, &x), 0);
    ck_assert_uint_eq(x, 512);
    check_invariants(&p);
    (void)b;
    (void)d;
    xfer_pool_clear(&p, &libc_alloc);
}
END_TEST

START_TEST(test_pool_coalescing)
{
    xfer_pool p;
    uint64_t o[4];
    uint32_t n;
    ck_assert_int_eq(xfer_pool_init(&p, 256, 64, 4, &libc_alloc), 0);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(xfer_pool_alloc(&p, 64, &o[i]), 0);
    xfer_pool_extents(&p, &n);
    ck_assert_uint_eq(n, 0);
    xfer_pool_free(&p, o[0], 64); /* alone */
    xfer_pool_free(&p, o[2], 64); /* alone */
    xfer_pool_extents(&p, &n);
    ck_assert_uint_eq(n, 2);
    xfer_pool_free(&p, o[1], 64); /* joins both neighbours */
    const xfer_pool_ext *e = xfer_pool_extents(&p, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(e[0].off, 0);
    ck_assert_uint_eq(e[0].len, 192);
    xfer_pool_free(&p, o[3], 64); /* joins the previous one */
    e = xfer_pool_extents(&p, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(e[0].len, 256);
    ck_assert_uint_eq(p.in_use, 0);
    /* Joining only the next extent. */
    ck_assert_int_eq(xfer_pool_alloc(&p, 128, &o[0]), 0);
    xfer_pool_free(&p, o[0], 128);
    e = xfer_pool_extents(&p, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(e[0].len, 256);
    check_invariants(&p);
    xfer_pool_clear(&p, &libc_alloc);
}
END_TEST

START_TEST(test_pool_exhaustion)
{
    xfer_pool p;
    uint64_t o, keep[3];
    ck_assert_int_eq(xfer_pool_init(&p, 512, 64, 3, &libc_alloc), 0);
    ck_assert_int_eq(xfer_pool_alloc(&p, 1024, &o), XFER_ERR_NO_SPACE);
    ck_assert_int_eq(xfer_pool_alloc(&p, 128, &keep[0]), 0);
    ck_assert_int_eq(xfer_pool_alloc(&p, 128, &keep[1]), 0);
    ck_assert_int_eq(xfer_pool_alloc(&p, 256, &keep[2]), 0);
    ck_assert_uint_eq(p.in_use, 512);
    ck_assert_int_eq(xfer_pool_alloc(&p, 1, &o), XFER_ERR_BUSY);
    xfer_pool_free(&p, keep[0], 128);
    xfer_pool_free(&p, keep[2], 256);
    /* 384 bytes free but in two pieces: no room for 320. */
    ck_assert_int_eq(xfer_pool_alloc(&p, 320, &o), XFER_ERR_NO_SPACE);
    ck_assert_uint_eq(xfer_pool_largest(&p), 256);
    check_invariants(&p);
    xfer_pool_clear(&p, &libc_alloc);
}
END_TEST

START_TEST(test_pool_full_reuse_after_free_all)
{
    enum { N = 64 };
    xfer_pool p;
    uint64_t o[N], x;
    uint32_t n;
    ck_assert_int_eq(xfer_pool_init(&p, N * 64, 64, N, &libc_alloc), 0);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++)
            ck_assert_int_eq(xfer_pool_alloc(&p, 64, &o[i]), 0);
        ck_assert_int_eq(xfer_pool_alloc(&p, 1, &x), XFER_ERR_BUSY);
        /* Free in a scattered order: evens then odds. */
        for (int i = 0; i < N; i += 2)
            xfer_pool_free(&p, o[i], 64);
        check_invariants(&p);
        for (int i = 1; i < N; i += 2)
            xfer_pool_free(&p, o[i], 64);
        const xfer_pool_ext *e = xfer_pool_extents(&p, &n);
        ck_assert_uint_eq(n, 1);
        ck_assert_uint_eq(e[0].len, N * 64);
        ck_assert_uint_eq(p.in_use, 0);
    }
    ck_assert_int_eq(xfer_pool_alloc(&p, N * 64, &x), 0);
    ck_assert_uint_eq(x, 0);
    xfer_pool_clear(&p, &libc_alloc);
}
END_TEST

START_TEST(test_pool_random_invariants)
{
    enum { N = 32, OPS = 20000 };
    uint64_t seed = tu_seed("test_pool_random_invariants", 0x9001);
    uint64_t rng = seed;
    xfer_pool p;
    uint64_t off[N], len[N];
    bool live[N] = {false};
    ck_assert_int_eq(xfer_pool_init(&p, 8192, 64, N, &libc_alloc), 0);
    for (int op = 0; op < OPS; op++) {
        int i = (int)(tu_rand(&rng) % N);
        if (live[i]) {
            xfer_pool_free(&p, off[i], len[i]);
            live[i] = false;
        } else {
            len[i] = tu_rand(&rng) % 700;
            live[i] = xfer_pool_alloc(&p, len[i], &off[i]) == 0;
        }
        /* No two live ranges overlap; in_use is their total. */
        uint64_t sum = 0;
        for (int a = 0; a < N; a++) {
            if (!live[a])
                continue;
            uint64_t ea = off[a] + xfer_pool_round(&p, len[a]);
            sum += xfer_pool_round(&p, len[a]);
            for (int b = a + 1; b < N; b++)
                if (live[b])
                    ck_assert(ea <= off[b] ||
                              off[b] + xfer_pool_round(&p, len[b]) <= off[a]);
        }
        ck_assert_uint_eq(p.in_use, sum);
        check_invariants(&p);
    }
    xfer_pool_clear(&p, &libc_alloc);
}
END_TEST

START_TEST(test_pool_set_extents_validates)
{
    xfer_pool p;
    uint64_t a, b;
    ck_assert_int_eq(xfer_pool_init(&p, 1024, 64, 4, &libc_alloc), 0);
    ck_assert_int_eq(xfer_pool_alloc(&p, 64, &a), 0);
    ck_assert_int_eq(xfer_pool_alloc(&p, 64, &b), 0);
    xfer_pool_free(&p, a, 64);
    uint32_t n;
    xfer_pool_ext saved[5];
    const xfer_pool_ext *cur = xfer_pool_extents(&p, &n);
    memcpy(saved, cur, n * sizeof saved[0]);
    ck_assert_uint_eq(n, 2);
    xfer_pool_reset(&p);
    ck_assert_int_eq(xfer_pool_set_extents(&p, saved, n, 1), 0);
    ck_assert_uint_eq(p.in_use, 64);
    /* Touching, unsorted, unaligned, outside: refused, pool unchanged. */
    xfer_pool_ext touch[2] = {{0, 64}, {64, 64}};
    xfer_pool_ext unsorted[2] = {{512, 64}, {0, 64}};
    xfer_pool_ext unaligned[1] = {{8, 64}};
    xfer_pool_ext outside[1] = {{1024, 64}};
    ck_assert_int_eq(xfer_pool_set_extents(&p, touch, 2, 2), XFER_ERR_FORMAT);
    ck_assert_int_eq(xfer_pool_set_extents(&p, unsorted, 2, 2),
                     XFER_ERR_FORMAT);
    ck_assert_int_eq(xfer_pool_set_extents(&p, unaligned, 1, 1),
                     XFER_ERR_FORMAT);
    ck_assert_int_eq(xfer_pool_set_extents(&p, outside, 1, 1),
                     XFER_ERR_FORMAT);
    ck_assert_uint_eq(p.in_use, 64);
    xfer_pool_clear(&p, &libc_alloc);
}
END_TEST

START_TEST(test_pool_alloc_failure)
{
    tu_alloc ta;
    tu_alloc_init(&ta, 0);
    xfer_allocator a = tu_allocator(&ta);
    xfer_pool p;
    ck_assert_int_eq(xfer_pool_init(&p, 4096, 64, 8, &a), XFER_ERR_NOMEM);
    ck_assert_int_eq(ta.live, 0);
    tu_alloc_init(&ta, 1);
    ck_assert_int_eq(xfer_pool_init(&p, 4096, 64, 8, &a), 0);
    ck_assert_int_eq(ta.live, 1);
    /* After init, alloc and free never allocate. */
    uint64_t o[8];
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(xfer_pool_alloc(&p, 64, &o[i]), 0);
    for (int i = 0; i < 8; i += 2)
        xfer_pool_free(&p, o[i], 64);
    ck_assert_int_eq(ta.calls, 1);
    xfer_pool_clear(&p, &a);
    ck_assert_int_eq(ta.live, 0);
}
END_TEST

/* Freeing a range that was never allocated is a bug of the caller: the
 * guard catches a misaligned offset inside an allocation (an assert in a
 * debug build; in a release build the free is refused and nothing
 * changes).  tools/mutate: the guard with "||" weakened to "&&" between
 * its alignment and size tests passed every net before this test. */
START_TEST(test_pool_free_misaligned_is_refused)
{
    xfer_pool p;
    uint64_t off;
    ck_assert_int_eq(xfer_pool_init(&p, 4096, 64, 16, &libc_alloc), 0);
    ck_assert_int_eq(xfer_pool_alloc(&p, 256, &off), 0);
    ck_assert_uint_eq(off, 0);
    xfer_pool_free(&p, off + 8, 64); /* inside it, but not a block */
#ifdef NDEBUG
    ck_assert_uint_eq(p.in_use, 256); /* refused: nothing freed */
    check_invariants(&p);
    xfer_pool_clear(&p, &libc_alloc);
#else
    ck_abort_msg("the guard let a misaligned free through");
#endif
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_pool_alignment);
    tcase_add_test(tc, test_pool_first_fit);
    tcase_add_test(tc, test_pool_coalescing);
    tcase_add_test(tc, test_pool_exhaustion);
    tcase_add_test(tc, test_pool_full_reuse_after_free_all);
    tcase_add_test(tc, test_pool_random_invariants);
    tcase_add_test(tc, test_pool_set_extents_validates);
    tcase_add_test(tc, test_pool_alloc_failure);
#ifdef NDEBUG
    tcase_add_test(tc, test_pool_free_misaligned_is_refused);
#else
    tcase_add_test_raise_signal(tc, test_pool_free_misaligned_is_refused,
                                SIGABRT);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
