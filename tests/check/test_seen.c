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
    ck_seen_local *me;
    ck_seen_ref *e;
    uint8_t *won;
    uint64_t *gone; /* the tags its claims displaced */
    size_t n, ngone;
    pthread_t th;
} racer;

static void *claim_all(void *arg)
{
    racer *r = arg;
    for (size_t i = 0; i < r->n; i++) {
        uint64_t d;
        r->won[i] = ck_seen_claim(r->s, r->me, &r->e[i], &d);
        if (d != CK_SEEN_NONE)
            r->gone[r->ngone++] = d;
    }
    ck_seen_leave(r->s);
    return NULL;
}

/* Entry c's (parent, move): parent's high bits from the hash, the rest
 * from c, so that tags are distinct and their order is not the threads';
 * entry_no inverts it. */
static void tag_entry(ck_seen_ref *e, uint32_t c, uint64_t rng, uint32_t level)
{
    e->parent = (level << 31) | ((uint32_t)(rng >> 43) << 10) | (c >> 8);
    e->move = (uint16_t)(c & 0xff);
}

static uint32_t entry_no(uint64_t claim_tag)
{
    uint32_t parent = (uint32_t)(claim_tag >> 8);
    return ((parent & 0x3ffu) << 8) | (uint32_t)(claim_tag & 0xff);
}

/* Two threads (four in odd rounds: more threads than the machine's two
 * cores, so that a thread is descheduled inside a claim or while it waits
 * for a table to grow) claim 200 000 entries for 40 000 keys, half of
 * them put before (a one-thread level): a key put before is never owned; every
 * other key claimed has exactly one owner left, its lowest (parent,
 * move), whatever the threads' order, once the entries the claims name
 * as displaced are marked dead; a later level's claims (higher parents)
 * of those keys all fail, and the set holds every key once.  The tables
 * start at 256 buckets a shard, so they grow under the claims. */
START_TEST(test_seen_two_threads_lowest_owner)
{
    uint64_t seed = tu_seed("test_seen_two_threads_lowest_owner", 1) + _i;
    unsigned nt = _i % 2 ? 4 : 2;
    ck_seen *s = aligned_alloc(64, sizeof *s);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(ck_seen_init(s), 0);
    uint64_t k[2];
    for (uint32_t i = 0; i < OLD; i++) {
        key_of(i, k);
        ck_assert(ck_seen_put(s, k));
    }
    uint64_t bytes_before = ck_seen_bytes(s); /* the puts grew nothing */
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
        tag_entry(&e[c], c, rng, 0);
        uint64_t tag = CK_SEEN_TAG(e[c].parent, e[c].move);
        if (i >= OLD && tag < low[i])
            low[i] = tag;
    }
    uint64_t *gone = malloc(CLAIMS * sizeof *gone);
    ck_assert_ptr_nonnull(gone);
    ck_seen_local *loc = aligned_alloc(64, 4 * sizeof *loc);
    ck_assert_ptr_nonnull(loc);
    memset(loc, 0, 4 * sizeof *loc);
    racer r[4];
    size_t per = CLAIMS / nt;
    for (unsigned t = 0; t < nt; t++)
        r[t] = (racer){s, &loc[t], e + t * per, won + t * per,
                       gone + t * per, per, 0, 0};
    ck_seen_begin(s, loc, nt, 0);
    for (unsigned t = 1; t < nt; t++)
        ck_assert_int_eq(pthread_create(&r[t].th, NULL, claim_all, &r[t]),
                         0);
    claim_all(&r[0]);
    for (unsigned t = 1; t < nt; t++)
        ck_assert_int_eq(pthread_join(r[t].th, NULL), 0);
    ck_seen_end(s);
    ck_assert_uint_gt(ck_seen_bytes(s), bytes_before); /* under the claims */
    for (unsigned t = 0; t < nt; t++)
        for (size_t g = 0; g < r[t].ngone; g++) {
            uint32_t c = entry_no(r[t].gone[g]);
            ck_assert_msg(c < CLAIMS && won[c] && !e[c].dead,
                          "seed %" PRIu64 ": displaced a non-owner", seed);
            e[c].dead = 1;
        }
    for (uint32_t c = 0; c < CLAIMS; c++)
        ck_assert_msg(won[c] || key_no[c] < OLD ||
                          low[key_no[c]] != CK_SEEN_TAG(e[c].parent,
                                                        e[c].move),
                      "seed %" PRIu64 ": the lowest entry lost", seed);
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
    /* The next level: every key claimed in this one stays its owner's
     * (no rewriting between levels). */
    ck_seen_begin(s, loc, 1, 0);
    for (uint32_t i = OLD; i < KEYS; i++) {
        ck_seen_ref n = {.parent = 1u << 31};
        uint64_t d;
        key_of(i, n.key);
        ck_assert(ck_seen_claim(s, &loc[0], &n, &d) == (low[i] == UINT64_MAX));
        ck_assert_uint_eq(d, CK_SEEN_NONE);
        low[i] = 0;
    }
    ck_seen_leave(s);
    ck_seen_end(s);
    for (uint32_t i = 0; i < KEYS; i++) {
        key_of(i, k);
        ck_assert(!ck_seen_put(s, k));
    }
    ck_assert_uint_eq(ck_seen_count(s), KEYS);
    free(loc);
    free(gone);
    free(owners);
    free(low);
    free(won);
    free(key_no);
    free(e);
    ck_seen_free(s);
    free(s);
}
END_TEST

/* A zero word marks an empty bucket, so a key with one is stored with 1
 * there: it is found again, by a put and by a claim, and counted once. */
START_TEST(test_seen_zero_words)
{
    ck_seen *s = aligned_alloc(64, sizeof *s);
    ck_seen_local *loc = aligned_alloc(64, sizeof *loc);
    ck_assert(s && loc);
    memset(loc, 0, sizeof *loc);
    ck_assert_int_eq(ck_seen_init(s), 0);
    const uint64_t put[2] = {0x1234, 0}, claimed[2] = {0, UINT64_C(7) << 56};
    ck_assert(ck_seen_put(s, put));
    ck_assert(!ck_seen_put(s, put));
    ck_seen_begin(s, loc, 1, 0);
    ck_seen_ref a = {{claimed[0], claimed[1]}, 9, 0, 0};
    ck_seen_ref b = {{claimed[0], claimed[1]}, 10, 0, 0};
    ck_seen_ref c = {{put[0], put[1]}, 1, 0, 0};
    uint64_t d;
    ck_assert(ck_seen_claim(s, loc, &a, &d));
    ck_assert(!ck_seen_claim(s, loc, &b, &d)); /* a higher entry */
    ck_assert(!ck_seen_claim(s, loc, &c, &d)); /* an earlier level's */
    ck_seen_leave(s);
    ck_seen_end(s);
    ck_assert_uint_eq(ck_seen_count(s), 2);
    ck_seen_free(s);
    free(s);
    free(loc);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("seen");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_seen_two_threads_lowest_owner, 0, 4);
    tcase_add_test(tc, test_seen_zero_words);
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
