/*
 * tests/check/test_seen.c - the parallel BFS's visited set
 * (tools/check/seen.c) on its own: claims from two threads, racing in
 * every order, give each key the owner one thread gives it (its lowest
 * (parent, move)), while the tables grow under the claims.
 */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seen.h"
#include "testutil.h"

#define KEYS 40000u   /* distinct keys of the level */
#define OLD 20000u    /* keys of earlier levels among them */
#define CLAIMS 200000u /* entries: each key claimed 5 times on average */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Key number i, as canon.c makes them: the top byte of key[1] names the
 * shard, and no key is (0, 0). */
static void key_of(uint32_t i, uint64_t k[2])
{
    k[0] = mix(2 * (uint64_t)i + 1) | 1;
    k[1] = mix(2 * (uint64_t)i + 2);
}

typedef struct racer {
    ck_seen *s;
    ck_seen_ref *e;
    uint8_t *won;
    size_t n;
    pthread_t th;
} racer;

static void *claim_all(void *arg)
{
    racer *r = arg;
    for (size_t i = 0; i < r->n; i++)
        r->won[i] = ck_seen_claim(r->s, &r->e[i]);
    return NULL;
}

/* Two threads claim 200 000 entries for 40 000 keys, half of them keys of
 * earlier levels (put first): a key of an earlier level is never owned;
 * every other key claimed has exactly one live owner, its lowest
 * (parent, move), whatever the threads' order, and every other entry
 * that claimed it is dead once settled; settled, the set holds every key
 * once.  The tables start at 256 buckets a shard, so they grow
 * under the claims. */
START_TEST(test_seen_two_threads_lowest_owner)
{
    uint64_t seed = tu_seed("test_seen_two_threads_lowest_owner", 1) + _i;
    ck_seen *s = aligned_alloc(64, sizeof *s);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(ck_seen_init(s), 0);
    uint64_t k[2];
    for (uint32_t i = 0; i < OLD; i++) {
        key_of(i, k);
        ck_assert(ck_seen_put(s, k));
    }
    ck_seen_ref *e = calloc(CLAIMS, sizeof *e);
    uint32_t *key_no = malloc(CLAIMS * sizeof *key_no);
    uint8_t *won = calloc(CLAIMS, 1);
    uint64_t *low = malloc(KEYS * sizeof *low);
    uint32_t *owners = calloc(KEYS, sizeof *owners);
    ck_assert(e && key_no && won && low && owners);
    for (uint32_t i = 0; i < KEYS; i++)
        low[i] = UINT64_MAX;
    uint64_t rng = seed;
    for (uint32_t c = 0; c < CLAIMS; c++) {
        rng = mix(rng + c);
        uint32_t i = key_no[c] = (uint32_t)(rng % KEYS);
        key_of(i, e[c].key);
        /* Distinct tags in an order unrelated to the threads': the
         * parent's high bits from the hash, the rest from c. */
        e[c].parent = ((uint32_t)(rng >> 42) << 10) | (c >> 8);
        e[c].move = (uint16_t)(c & 0xff);
        uint64_t tag = CK_SEEN_TAG(e[c].parent, e[c].move);
        if (i >= OLD && tag < low[i])
            low[i] = tag;
    }
    racer r[2] = {{s, e, won, CLAIMS / 2, 0},
                  {s, e + CLAIMS / 2, won + CLAIMS / 2, CLAIMS / 2, 0}};
    ck_assert_int_eq(pthread_create(&r[1].th, NULL, claim_all, &r[1]), 0);
    claim_all(&r[0]);
    ck_assert_int_eq(pthread_join(r[1].th, NULL), 0);
    for (uint32_t c = 0; c < CLAIMS; c++) {
        if (won[c])
            ck_seen_settle(s, &e[c]);
        else
            ck_assert_msg(key_no[c] < OLD || low[key_no[c]] !=
                              CK_SEEN_TAG(e[c].parent, e[c].move),
                          "seed %" PRIu64 ": the lowest entry lost", seed);
    }
    for (uint32_t c = 0; c < CLAIMS; c++) {
        uint32_t i = key_no[c];
        if (!won[c] || e[c].dead)
            continue;
        ck_assert_msg(i >= OLD, "seed %" PRIu64 ": key %u of an earlier "
                      "level owned in this one", seed, i);
        ck_assert_msg(CK_SEEN_TAG(e[c].parent, e[c].move) == low[i],
                      "seed %" PRIu64 ": key %u owned by a higher entry",
                      seed, i);
        owners[i]++;
    }
    uint64_t claimed = 0;
    for (uint32_t i = OLD; i < KEYS; i++) {
        claimed += low[i] != UINT64_MAX;
        ck_assert_uint_eq(owners[i], low[i] != UINT64_MAX);
    }
    ck_assert_uint_gt(claimed, KEYS - OLD - 500); /* e^-5 of them not */
    ck_assert_uint_eq(ck_seen_count(s), OLD + claimed);
    for (uint32_t i = 0; i < KEYS; i++) {
        key_of(i, k);
        ck_assert(ck_seen_put(s, k) == (i >= OLD && low[i] == UINT64_MAX));
    }
    free(owners);
    free(low);
    free(won);
    free(key_no);
    free(e);
    ck_seen_free(s);
    free(s);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("seen");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_seen_two_threads_lowest_owner, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
