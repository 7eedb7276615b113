/*
 * tools/check/canon.c - the key of a state in the visited set: a 128-bit
 * hash of its canonical encoding.
 *
 * Symmetry reduction over shards: shards are interchangeable (same
 * configuration, same counter-based reservation ids), so two states that
 * differ only by a renaming of shards have the same future up to that
 * renaming.  A state splits into per-shard data (a shard's blob, its rng
 * counter, the messages to and from it, the core's and the tracker's
 * per-shard sub-records and mask bits, the monitors' per-shard
 * bookkeeping), written without the shard's index, and the rest, in which
 * every shard-indexed datum has been taken out.  The machines make that
 * split themselves (their canonical form, fsm/save.h): this file reads no
 * machine's bytes.  The key hashes the rest and then the per-shard
 * signatures (128-bit hashes of the per-shard data) in sorted order.  Two
 * states with one key therefore have equal rests and, shard for shard in
 * sorted order, equal per-shard data: one is the other renamed (up to hash
 * collisions).  Ties in the order need no care: tied shards carry equal
 * data.  A machine that cannot give its canonical form for a state (the
 * tracker with actions pending) switches the reduction off for that state
 * rather than risk merging unequal states.
 *
 * The parts are cached (ck_parts) so that a move re-hashes only the
 * machines it touched; the plain data (messages, monitors) is re-read for
 * every key.
 */
#include <string.h>

#include "canon.h"
#include "save.h"

__extension__ typedef unsigned __int128 u128;

static inline uint64_t mum(uint64_t a, uint64_t b)
{
    u128 r = (u128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static void hash128(const void *p, size_t n, uint64_t seed,
                    uint64_t out[2])
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
/* Parts of a state                                                        */
/* ---------------------------------------------------------------------- */

/* Where the machines write their canonical forms: part 0 (the rest) and
 * one part per shard, each up to a whole saved state. */
static _Thread_local uint8_t g_form[(CK_MAX_S + 1) * CK_SAVE_MAX];

/* Take a machine's canonical form (rc its result): hash part 0 into h
 * and keep the per-shard parts.  False when there is none. */
static bool take_form(int rc, const xfer_canon *c, unsigned S, uint64_t seed,
                      uint64_t h[2], uint8_t (*parts)[CK_PART_MAX],
                      uint16_t *n)
{
    if (rc != 0)
        return false;
    for (unsigned k = 0; k < S; k++)
        if (c->len[1 + k] > CK_PART_MAX)
            return false;
    hash128(xfer_canon_part(c, 0), c->len[0], seed, h);
    for (unsigned k = 0; k < S; k++) {
        n[k] = (uint16_t)c->len[1 + k];
        memcpy(parts[k], xfer_canon_part(c, 1 + k), n[k]);
    }
    return true;
}

static bool parts_core(ck_parts *p, const ck_world *w, unsigned S)
{
    xfer_canon c = {.buf = g_form, .stride = CK_SAVE_MAX};
    int rc = xfer_core_canon(w->core, (uint16_t)S, &c);
    return take_form(rc, &c, S, 0xc03e, p->core, p->cps, p->ncps);
}

static bool parts_rd(ck_parts *p, const ck_world *w, unsigned S)
{
    xfer_canon c = {.buf = g_form, .stride = CK_SAVE_MAX};
    int rc = xfer_readiness_canon(w->rd, &c);
    return take_form(rc, &c, S, 0x4ead, p->rd, p->rps, p->nrps);
}

/* Memo of each shard's blob hash and signature in the state being
 * expanded (ck_canon_prime), by the bytes hashed: a move leaves most of
 * them as they were in the state it was made from, and comparing bytes
 * costs a fraction of hashing them.  Equal bytes give the equal hash, so
 * the memo changes no key. */
typedef struct memo {
    size_t n;
    uint64_t h[2];
    uint8_t b[CK_SAVE_MAX];
} memo;

static _Thread_local bool g_prime; /* store into the memo (the state being expanded) */

static void memo_hash(memo *m, const uint8_t *b, size_t n, uint64_t seed,
                      uint64_t out[2])
{
    if (m->n == n && n <= sizeof m->b && memcmp(m->b, b, n) == 0) {
        out[0] = m->h[0];
        out[1] = m->h[1];
        return;
    }
    hash128(b, n, seed, out);
    if (g_prime && n <= sizeof m->b) {
        memcpy(m->b, b, n);
        m->n = n;
        m->h[0] = out[0];
        m->h[1] = out[1];
    }
}

static _Thread_local memo g_blob[CK_MAX_S], g_sig[CK_MAX_S];

/* Re-hash the machines in `which` of the state saved in blob (laid out as
 * w->lay says), which the machines of w hold now.  A shard's save is its
 * canonical form; the core and the tracker give theirs. */
void ck_canon_parts(ck_parts *p, const ck_world *w, const uint8_t *blob,
                    unsigned which)
{
    unsigned S = w->cfg->S;
    const ck_layout *l = &w->lay;
    if (which & CK_M_CORE)
        p->ok_core = parts_core(p, w, S);
    for (unsigned k = 0; k < S; k++)
        if (which & CK_M_SH(k))
            memo_hash(&g_blob[k], blob + l->off[CK_SLOT_SH(k)],
                      l->len[CK_SLOT_SH(k)], 7, p->sh[k]);
    if (which & CK_M_RD)
        p->ok_rd = parts_rd(p, w, S);
}

/* Copy the parts of an S-shard world (the arrays only as far as used). */
void ck_canon_parts_copy(ck_parts *dst, const ck_parts *src, unsigned S)
{
    dst->ok_core = src->ok_core;
    dst->ok_rd = src->ok_rd;
    memcpy(dst->sh, src->sh, S * sizeof src->sh[0]);
    memcpy(dst->core, src->core, sizeof src->core);
    memcpy(dst->rd, src->rd, sizeof src->rd);
    for (unsigned k = 0; k < S; k++) {
        dst->ncps[k] = src->ncps[k];
        dst->nrps[k] = src->nrps[k];
        memcpy(dst->cps[k], src->cps[k], src->ncps[k]);
        memcpy(dst->rps[k], src->rps[k], src->nrps[k]);
    }
}

/* ---------------------------------------------------------------------- */
/* The key                                                                 */
/* ---------------------------------------------------------------------- */

typedef struct kbuf {
    uint8_t b[CK_MAX_MSG * sizeof(ck_msg) + sizeof(ck_mon) + 1024];
    size_t at;
} kbuf;

static void kput(kbuf *o, const void *p, size_t n)
{
    memcpy(o->b + o->at, p, n);
    o->at += n;
}

/* Everything about shard k, without its index. */
static void shard_sig(const ck_world *w, const ck_parts *p, unsigned k,
                      uint64_t sig[2])
{
    kbuf o;
    o.at = 0;
    kput(&o, p->sh[k], 16);
    kput(&o, &w->env.rng[k], 8);
    for (unsigned i = 0; i < w->env.nmsg; i++) {
        ck_msg m = w->msg[i];
        if (m.shard != k)
            continue;
        m.shard = 0;
        kput(&o, &m, sizeof m);
    }
    for (unsigned t = 0; t < w->cfg->T; t++) {
        const mon_tr *m = &w->mon.tr[t];
        uint8_t b[3] = {(uint8_t)(m->ready_mask_lo >> k & 1),
                        (uint8_t)(m->take_mask_lo >> k & 1),
                        (uint8_t)(m->failed && m->fail_shard == k)};
        kput(&o, &m->ps[k], sizeof m->ps[k]);
        kput(&o, &m->cs[k], sizeof m->cs[k]);
        kput(&o, b, sizeof b);
    }
    kput(&o, p->cps[k], p->ncps[k]);
    kput(&o, p->rps[k], p->nrps[k]);
    memo_hash(&g_sig[k], o.b, o.at, 0x516, sig);
}

static uint64_t low_bits(unsigned S)
{
    return (1ull << S) - 1u;
}

/* Everything that is not per-shard, shard references taken out. */
static void rest(const ck_world *w, const ck_parts *p, kbuf *o)
{
    unsigned S = w->cfg->S;
    ck_env env = w->env;
    memset(env.rng, 0, sizeof env.rng);
    kput(o, &env, sizeof env);
    for (unsigned t = 0; t < w->cfg->T; t++) {
        mon_tr m;
        memcpy(&m, &w->mon.tr[t], offsetof(mon_tr, ps));
        m.ready_mask_lo = (uint8_t)(m.ready_mask_lo & ~low_bits(S));
        m.take_mask_lo = (uint8_t)(m.take_mask_lo & ~low_bits(S));
        if (m.failed && m.fail_shard < S)
            m.fail_shard = 0;
        kput(o, &m, offsetof(mon_tr, ps));
    }
    kput(o, &w->mon.shutdown_req, 4);
    kput(o, p->core, 16);
    kput(o, p->rd, 16);
}

void ck_canon_key(const ck_world *w, const ck_parts *p, const uint8_t *blob,
                  size_t len, uint64_t key[2])
{
    unsigned S = w->cfg->S;
    if (!w->cfg->symmetry || S == 1 || !p->ok_core || !p->ok_rd) {
        hash128(blob, len, 0x5eed, key);
        return;
    }
    uint64_t sig[CK_MAX_S][2];
    uint8_t perm[CK_MAX_S];
    for (unsigned k = 0; k < S; k++) {
        shard_sig(w, p, k, sig[k]);
        unsigned j = k;
        while (j > 0 && memcmp(sig[perm[j - 1]], sig[k], 16) > 0) {
            perm[j] = perm[j - 1];
            j--;
        }
        perm[j] = (uint8_t)k;
    }
    kbuf o;
    o.at = 0;
    rest(w, p, &o);
    for (unsigned j = 0; j < S; j++)
        kput(&o, sig[perm[j]], 16);
    hash128(o.b, o.at, 0xc4a0, key);
}

/* The parts of the state about to be expanded, remembered in the memo so
 * that its children re-hash only what their move changed. */
void ck_canon_prime(ck_parts *p, const ck_world *w, const uint8_t *blob)
{
    g_prime = true;
    ck_canon_parts(p, w, blob, CK_M_ALL);
    if (w->cfg->symmetry && p->ok_core && p->ok_rd)
        for (unsigned k = 0; k < w->cfg->S; k++) {
            uint64_t sig[2];
            shard_sig(w, p, k, sig);
        }
    g_prime = false;
}
