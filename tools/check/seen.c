/*
 * tools/check/seen.c - the sharded visited set of the BFS (see seen.h):
 * open addressing over 128-bit keys, one table and one lock per shard.
 *
 * What must stay true: a key lives in exactly one shard (chosen by bits of
 * key[1], while the bucket comes from key[0]); a claim holds its shard's
 * lock for the whole probe, insert or tag change, and a table grows under
 * that lock; the owner of a key in a level is the lowest tag that claimed
 * it in that level, independent of the order of the claims.
 */
#include "seen.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define INIT_BUCKETS 256u

static unsigned shard_of(const uint64_t key[2])
{
    return (unsigned)(key[1] >> 56) % CK_SEEN_SHARDS;
}

static uint64_t *find(const ck_seen_shard *h, const uint64_t key[2])
{
    for (size_t i = key[0] & h->mask;; i = (i + 1) & h->mask) {
        uint64_t *b = &h->k[3 * i];
        if ((b[0] == 0 && b[1] == 0) || (b[0] == key[0] && b[1] == key[1]))
            return b;
    }
}

static void grow(ck_seen *s, ck_seen_shard *h)
{
    ck_seen_shard big = {.mask = 2 * (h->mask + 1) - 1, .n = h->n};
    big.k = calloc(3 * (big.mask + 1), sizeof *big.k);
    if (!big.k)
        abort();
    for (size_t i = 0; i <= h->mask; i++) {
        const uint64_t *b = &h->k[3 * i];
        if (b[0] || b[1])
            memcpy(find(&big, b), b, 3 * sizeof *b);
    }
    free(h->k);
    atomic_fetch_add(&s->bytes, 24 * (uint64_t)(h->mask + 1));
    h->k = big.k;
    h->mask = big.mask;
}

int ck_seen_init(ck_seen *s, bool shared)
{
    unsigned i;
    memset(s, 0, sizeof *s);
    s->unlocked = !shared;
    for (i = 0; i < CK_SEEN_SHARDS; i++) {
        ck_seen_shard *h = &s->sh[i];
        h->mask = INIT_BUCKETS - 1;
        h->k = calloc(3 * INIT_BUCKETS, sizeof *h->k);
        if (!h->k || pthread_mutex_init(&h->mu, NULL) != 0)
            goto out_free;
    }
    atomic_store(&s->bytes, 24ull * INIT_BUCKETS * CK_SEEN_SHARDS);
    return 0;
out_free:
    free(s->sh[i].k);
    while (i-- > 0) {
        pthread_mutex_destroy(&s->sh[i].mu);
        free(s->sh[i].k);
    }
    return -1;
}

void ck_seen_free(ck_seen *s)
{
    for (unsigned i = 0; i < CK_SEEN_SHARDS; i++) {
        pthread_mutex_destroy(&s->sh[i].mu);
        free(s->sh[i].k);
    }
    memset(s, 0, sizeof *s);
}

bool ck_seen_claim(ck_seen *s, const uint64_t key[2], uint64_t tag)
{
    ck_seen_shard *h = &s->sh[shard_of(key)];
    bool mine = false;
    if (!s->unlocked)
        pthread_mutex_lock(&h->mu);
    if (4 * (h->n + 1) > 3 * (h->mask + 1))
        grow(s, h);
    uint64_t *b = find(h, key);
    if (b[0] == 0 && b[1] == 0) {
        b[0] = key[0];
        b[1] = key[1];
        b[2] = tag;
        h->n++;
        mine = true;
    } else if (b[2] >> 48 == tag >> 48 && tag < b[2]) {
        b[2] = tag;
        mine = true;
    }
    if (!s->unlocked)
        pthread_mutex_unlock(&h->mu);
    return mine;
}

bool ck_seen_owns(const ck_seen *s, const uint64_t key[2], uint64_t tag)
{
    const uint64_t *b = find(&s->sh[shard_of(key)], key);
    return b[0] == key[0] && b[1] == key[1] && b[2] == tag;
}

uint64_t ck_seen_count(const ck_seen *s)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < CK_SEEN_SHARDS; i++)
        n += s->sh[i].n;
    return n;
}

uint64_t ck_seen_bytes(const ck_seen *s)
{
    return atomic_load(&s->bytes);
}
