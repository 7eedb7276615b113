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

/* The readiness blob (fsm/readiness_save.c): a 46-byte header, then each
 * live record: id 8, attempt 4, state 1, deferred 4, the masks ready,
 * take_ok, take_fail, unsure (8 each, little-endian), deadline 8, then one
 * reservation id per shard. */
#define RD_HDR 46
#define RD_MASKS 17
#define RD_RESV 57

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void st64(uint8_t *p, uint64_t v)
{
    for (unsigned i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Number of readiness records, or -1 when the blob is not understood. */
static int rd_records(const uint8_t *p, size_t n, unsigned S)
{
    if (n < RD_HDR)
        return -1;
    uint32_t live, nacts;
    memcpy(&live, p + 30, 4);
    memcpy(&nacts, p + 42, 4);
    if (nacts || p[4] != (S & 0xff) || RD_HDR + live * (RD_RESV + 8 * S) > n)
        return -1;
    return (int)live;
}

static void sig_rd(const uint8_t *p, int nrec, sigctx *c)
{
    for (int i = 0; i < nrec; i++) {
        const uint8_t *r = p + RD_HDR + (size_t)i * (RD_RESV + 8 * c->S);
        for (unsigned k = 0; k < c->S; k++) {
            uint8_t b[12];
            for (unsigned m = 0; m < 4; m++)
                b[m] = (uint8_t)(le64(r + RD_MASKS + 8 * m) >> k & 1);
            memcpy(b + 4, r + RD_RESV + 8 * k, 8);
            mixin(c->sig[k], b, sizeof b);
        }
    }
}

static void perm_rd(uint8_t *p, int nrec, const sigctx *c)
{
    for (int i = 0; i < nrec; i++) {
        uint8_t *r = p + RD_HDR + (size_t)i * (RD_RESV + 8 * c->S);
        uint8_t old[8 * CK_MAX_S];
        for (unsigned m = 0; m < 4; m++)
            st64(r + RD_MASKS + 8 * m,
                 remap_mask(le64(r + RD_MASKS + 8 * m), c->inv, c->S));
        memcpy(old, r + RD_RESV, 8 * c->S);
        for (unsigned k = 0; k < c->S; k++)
            memcpy(r + RD_RESV + 8 * c->inv[k], old + 8 * k, 8);
    }
}

/* Per-shard data of the environment, the messages and the monitors. */
static void sig_world(const ck_world *w, sigctx *c)
{
    for (unsigned k = 0; k < c->S; k++) {
        mixin(c->sig[k], &w->env.rng[k], 8);
        for (unsigned i = 0; i < w->env.nmsg; i++) {
            ck_msg m = w->msg[i];
            if (m.shard != k)
                continue;
            m.shard = 0;
            mixin(c->sig[k], &m, sizeof m);
        }
        for (unsigned t = 0; t < w->cfg->T; t++) {
            const mon_tr *m = &w->mon.tr[t];
            uint8_t b[3] = {(uint8_t)(m->ready_mask_lo >> k & 1),
                            (uint8_t)(m->take_mask_lo >> k & 1),
                            (uint8_t)(m->failed && m->fail_shard == k)};
            mixin(c->sig[k], &m->ps[k], sizeof m->ps[k]);
            mixin(c->sig[k], &m->cs[k], sizeof m->cs[k]);
            mixin(c->sig[k], b, sizeof b);
        }
    }
}

static void perm_mon(ck_mon *m, const ck_world *w, const sigctx *c)
{
    for (unsigned t = 0; t < w->cfg->T; t++) {
        mon_tr *x = &m->tr[t];
        const mon_tr *o = &w->mon.tr[t];
        for (unsigned k = 0; k < c->S; k++) {
            x->ps[c->inv[k]] = o->ps[k];
            x->cs[c->inv[k]] = o->cs[k];
        }
        x->ready_mask_lo = (uint8_t)remap_mask(o->ready_mask_lo, c->inv, c->S);
        x->take_mask_lo = (uint8_t)remap_mask(o->take_mask_lo, c->inv, c->S);
        if (o->failed && o->fail_shard < c->S)
            x->fail_shard = c->inv[o->fail_shard];
    }
}

typedef struct cbuf {
    uint8_t b[CK_SAVE_MAX + sizeof(ck_mon) + 64];
    size_t at;
} cbuf;

static void cput(cbuf *o, const void *p, size_t n)
{
    if (o->at + n <= sizeof o->b)
        memcpy(o->b + o->at, p, n);
    o->at += n;
}

/* The renamed state, written out in a fixed order. */
static void canon_write(const ck_world *w, const uint8_t *blob,
                        const sigctx *c, const uint8_t *perm, int nrec,
                        cbuf *o)
{
    static ck_env env;
    static ck_msg msgs[CK_MAX_MSG];
    static ck_mon mon;
    env = w->env;
    for (unsigned k = 0; k < c->S; k++)
        env.rng[c->inv[k]] = w->env.rng[k];
    for (unsigned i = 0; i < w->env.nmsg; i++) {
        ck_msg m = w->msg[i];
        m.shard = c->inv[m.shard < c->S ? m.shard : 0];
        unsigned j = i;
        while (j > 0 && memcmp(&msgs[j - 1], &m, sizeof m) > 0) {
            msgs[j] = msgs[j - 1];
            j--;
        }
        msgs[j] = m;
    }
    mon = w->mon;
    perm_mon(&mon, w, c);
    cput(o, &env, sizeof env);
    cput(o, msgs, w->env.nmsg * sizeof msgs[0]);
    cput(o, &mon, sizeof mon);
    size_t at = o->at;
    cput(o, blob + w->off_core, w->len_core);
    core_records(o->b + at, w->len_core, c->S, perm_core, (void *)c);
    for (unsigned j = 0; j < c->S; j++)
        cput(o, blob + w->off_sh[perm[j]], w->len_sh[perm[j]]);
    at = o->at;
    cput(o, blob + w->off_rd, w->len_rd);
    perm_rd(o->b + at, nrec, c);
}

void ck_canon_key(const ck_world *w, const uint8_t *blob, size_t len,
                  uint64_t key[2])
{
    static cbuf o;
    static uint8_t core[CK_SAVE_MAX];
    unsigned S = w->cfg->S;
    int nrec = rd_records(blob + w->off_rd, w->len_rd, S);
    if (!w->cfg->symmetry || S == 1 || nrec < 0 || w->len_core > sizeof core) {
        ck_hash128(blob, len, 0x5eed, key);
        return;
    }
    sigctx c;
    memset(&c, 0, sizeof c);
    c.S = S;
    for (unsigned k = 0; k < S; k++)
        ck_hash128(blob + w->off_sh[k], w->len_sh[k], 7, c.sig[k]);
    sig_world(w, &c);
    memcpy(core, blob + w->off_core, w->len_core);
    core_records(core, w->len_core, S, sig_core, &c);
    sig_rd(blob + w->off_rd, nrec, &c);
    uint8_t perm[CK_MAX_S], inv[CK_MAX_S];
    for (unsigned k = 0; k < S; k++) {
        unsigned j = k;
        while (j > 0 && memcmp(c.sig[perm[j - 1]], c.sig[k], 16) > 0) {
            perm[j] = perm[j - 1];
            j--;
        }
        perm[j] = (uint8_t)k;
    }
    for (unsigned j = 0; j < S; j++)
        inv[perm[j]] = (uint8_t)j;
    c.inv = inv;
    o.at = 0;
    canon_write(w, blob, &c, perm, nrec, &o);
    ck_hash128(o.b, o.at, 0xc4a0, key);
}
