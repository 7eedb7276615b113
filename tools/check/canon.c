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
 *
 * Symmetry reduction over transfers (T >= 2, unless
 * --no-transfer-symmetry): the driver treats every transfer id alike, so
 * renaming the transfers of a state by a permutation gives a state with
 * the same future, renamed.  The machines write their canonical forms with
 * the ids renamed (xfer_canon.ids, xfer_shard_canon), the messages and
 * the driver's and monitors' per-transfer data are renamed here, and the
 * key is the least key of the renamed state (shard-sorted as above) over
 * the renamings that sort the transfers by their data outside the
 * machines (transfer_key).  Every renaming of a state gives the same set
 * of keys, so the same least one.  Parts of a renaming other than the
 * identity are computed afresh (one more canonical form of every machine
 * for a state whose transfers are out of order).
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

/* What the monitors keep of transfer m about shard k, in a signature. */
static void put_tr_shard(kbuf *o, const mon_tr *m, unsigned k)
{
    uint8_t b[3] = {(uint8_t)(m->ready_mask_lo >> k & 1),
                    (uint8_t)(m->take_mask_lo >> k & 1),
                    (uint8_t)(m->failed && m->fail_shard == k)};
    kput(o, &m->ps[k], sizeof m->ps[k]);
    kput(o, &m->cs[k], sizeof m->cs[k]);
    kput(o, b, sizeof b);
}

/* Everything about shard k, without its index. */
static void shard_sig(const ck_world *w, const ck_parts *p, unsigned k,
                      uint64_t sig[2])
{
    kbuf o;
    o.at = 0;
    kput(&o, p->sh[k], 16);
    kput(&o, &w->env.rng[k], 8);
    if (w->cfg->gone) /* --gone: the shard's own bit (off: no byte) */
        kput(&o, &w->env.gone[k], 1);
    for (unsigned i = 0; i < w->env.nmsg; i++) {
        ck_msg m = w->msg[i];
        if (m.shard != k)
            continue;
        m.shard = 0;
        kput(&o, &m, sizeof m);
    }
    for (unsigned t = 0; t < w->cfg->T; t++)
        put_tr_shard(&o, &w->mon.tr[t], k);
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
    memset(env.gone, 0, sizeof env.gone); /* with each shard's signature */
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

/* ---------------------------------------------------------------------- */
/* Symmetry over transfers                                                 */
/* ---------------------------------------------------------------------- */

/* The scratch of the renamed keys (per thread, like g_form): a shard's
 * form with renamed ids, and the parts of a renamed state. */
static _Thread_local struct {
    uint8_t form[CK_SAVE_MAX];
    ck_parts parts;
} g_tsym;

/* The parts of the state held by w's machines with transfer t renamed
 * pi[t], computed afresh (a renaming changes every machine that holds
 * an id, so nothing is cached).  False when a machine gives none. */
static bool parts_renamed(ck_parts *q, const ck_world *w, const uint8_t *pi)
{
    unsigned S = w->cfg->S;
    xfer_canon_ids ids = {.n = w->cfg->T};
    for (unsigned t = 0; t < w->cfg->T; t++) {
        ids.from[t] = t + 1u;
        ids.to[t] = pi[t] + 1u;
    }
    xfer_canon c = {.buf = g_form, .stride = CK_SAVE_MAX, .ids = &ids};
    if (!take_form(xfer_core_canon(w->core, (uint16_t)S, &c), &c, S, 0xc03e,
                   q->core, q->cps, q->ncps))
        return false;
    xfer_canon r = {.buf = g_form, .stride = CK_SAVE_MAX, .ids = &ids};
    if (!take_form(xfer_readiness_canon(w->rd, &r), &r, S, 0x4ead, q->rd,
                   q->rps, q->nrps))
        return false;
    for (unsigned k = 0; k < S; k++) {
        size_t need = 0;
        if (xfer_shard_canon(w->sh[k], &ids, g_tsym.form,
                             sizeof g_tsym.form, &need) != 0)
            return false;
        hash128(g_tsym.form, need, 7, q->sh[k]);
    }
    q->ok_core = q->ok_rd = true;
    return true;
}

/* Shard k's signature (the bytes of shard_sig) in the world renamed by pi
 * (inv its inverse): its messages with their transfers renamed, in the
 * order the renamed net would sort them; the monitors' per-shard data of
 * renamed transfer u from transfer inv[u]. */
static void shard_sig_renamed(const ck_world *w, const ck_parts *q, unsigned k,
                              const uint8_t *pi, const uint8_t *inv,
                              uint64_t sig[2])
{
    kbuf o;
    o.at = 0;
    kput(&o, q->sh[k], 16);
    kput(&o, &w->env.rng[k], 8);
    if (w->cfg->gone)
        kput(&o, &w->env.gone[k], 1);
    ck_msg ms[CK_MAX_MSG];
    unsigned n = 0;
    for (unsigned i = 0; i < w->env.nmsg; i++) {
        ck_msg m;
        memcpy(&m, &w->msg[i], sizeof m); /* padding too (zero, net.c) */
        if (m.shard != k)
            continue;
        m.shard = 0;
        m.tr = m.tr < w->cfg->T ? pi[m.tr] : m.tr;
        unsigned j = n++;
        while (j > 0 && memcmp(&ms[j - 1], &m, sizeof m) > 0) {
            ms[j] = ms[j - 1];
            j--;
        }
        ms[j] = m;
    }
    kput(&o, ms, n * sizeof ms[0]);
    for (unsigned u = 0; u < w->cfg->T; u++)
        put_tr_shard(&o, &w->mon.tr[inv[u]], k);
    kput(&o, q->cps[k], q->ncps[k]);
    kput(&o, q->rps[k], q->nrps[k]);
    hash128(o.b, o.at, 0x516, sig);
}

/* rest() of the world renamed by inv (renamed transfer u is inv[u]). */
static void rest_renamed(const ck_world *w, const ck_parts *q,
                         const uint8_t *inv, kbuf *o)
{
    unsigned S = w->cfg->S, T = w->cfg->T;
    ck_env env = w->env;
    memset(env.rng, 0, sizeof env.rng);
    memset(env.gone, 0, sizeof env.gone);
    env.e2e_exempt = 0;
    for (unsigned u = 0; u < T; u++) {
        env.submitted[u] = w->env.submitted[inv[u]];
        env.staging[u] = w->env.staging[inv[u]];
        env.e2e_exempt |= (uint8_t)((w->env.e2e_exempt >> inv[u] & 1u) << u);
    }
    env.e2e_exempt |= (uint8_t)(w->env.e2e_exempt & ~((1u << T) - 1u));
    kput(o, &env, sizeof env);
    for (unsigned u = 0; u < T; u++) {
        mon_tr m;
        memcpy(&m, &w->mon.tr[inv[u]], offsetof(mon_tr, ps));
        m.ready_mask_lo = (uint8_t)(m.ready_mask_lo & ~low_bits(S));
        m.take_mask_lo = (uint8_t)(m.take_mask_lo & ~low_bits(S));
        if (m.failed && m.fail_shard < S)
            m.fail_shard = 0;
        kput(o, &m, offsetof(mon_tr, ps));
    }
    kput(o, &w->mon.shutdown_req, 4);
    kput(o, q->core, 16);
    kput(o, q->rd, 16);
}

/* The key of the world renamed by pi: its rest, then the shard
 * signatures, sorted when the shard symmetry is on.  False when a machine
 * gives no form for it. */
static bool key_renamed(const ck_world *w, const ck_parts *p,
                        const uint8_t *pi, bool identity, uint64_t key[2])
{
    unsigned S = w->cfg->S;
    uint8_t inv[CK_MAX_T];
    for (unsigned t = 0; t < w->cfg->T; t++)
        inv[pi[t]] = (uint8_t)t;
    const ck_parts *use = p;
    if (!identity) {
        if (!parts_renamed(&g_tsym.parts, w, pi))
            return false;
        use = &g_tsym.parts;
    }
    bool sort = w->cfg->symmetry && S > 1;
    uint64_t sig[CK_MAX_S][2];
    uint8_t perm[CK_MAX_S];
    for (unsigned k = 0; k < S; k++) {
        if (identity)
            shard_sig(w, use, k, sig[k]);
        else
            shard_sig_renamed(w, use, k, pi, inv, sig[k]);
        unsigned j = k;
        while (sort && j > 0 && memcmp(sig[perm[j - 1]], sig[k], 16) > 0) {
            perm[j] = perm[j - 1];
            j--;
        }
        perm[j] = (uint8_t)k;
    }
    kbuf o;
    o.at = 0;
    rest_renamed(w, use, inv, &o);
    for (unsigned j = 0; j < S; j++)
        kput(&o, sig[perm[j]], 16);
    hash128(o.b, o.at, sort ? 0xc4a1 : 0xc4a2, key);
    return true;
}

/* The next permutation of pi[0..n-1] in lexicographic order; false after
 * the last. */
static bool next_perm(uint8_t *pi, unsigned n)
{
    unsigned i = n - 1;
    while (i > 0 && pi[i - 1] >= pi[i])
        i--;
    if (i == 0)
        return false;
    unsigned j = n - 1;
    while (pi[j] <= pi[i - 1])
        j--;
    uint8_t x = pi[i - 1];
    pi[i - 1] = pi[j];
    pi[j] = x;
    for (unsigned a = i, b = n - 1; a < b; a++, b--) {
        x = pi[a];
        pi[a] = pi[b];
        pi[b] = x;
    }
    return true;
}

/* What the world holds about transfer t outside the machines, shard
 * references taken out (as rest() writes it): a datum that a renaming of
 * the transfers moves with t and a renaming of the shards leaves alone. */
#define TSIG_LEN (offsetof(mon_tr, ps) + 3u)
static void transfer_sig(const ck_world *w, unsigned t, uint8_t *b)
{
    mon_tr m;
    memcpy(&m, &w->mon.tr[t], offsetof(mon_tr, ps));
    m.ready_mask_lo = (uint8_t)(m.ready_mask_lo & ~low_bits(w->cfg->S));
    m.take_mask_lo = (uint8_t)(m.take_mask_lo & ~low_bits(w->cfg->S));
    if (m.failed && m.fail_shard < w->cfg->S)
        m.fail_shard = 0;
    memcpy(b, &m, offsetof(mon_tr, ps));
    b[offsetof(mon_tr, ps)] = w->env.submitted[t];
    b[offsetof(mon_tr, ps) + 1] = w->env.staging[t];
    b[offsetof(mon_tr, ps) + 2] = (uint8_t)(w->env.e2e_exempt >> t & 1u);
}

/* Symmetry over transfers: the transfers are interchangeable (the driver
 * treats every id alike: same slices, user data, deadlines and moves), so
 * a state and its copy with the ids renamed have the same future up to
 * that renaming.  The key is the least key of the renamed state over the
 * renamings that put the transfers in the order of their signatures
 * (transfer_sig; ties in any order), with the shard sorting inside each.
 * Renaming a state renames its signatures, so every renaming of one state
 * gives the same set of renamed states and the same least key; and a key
 * is always that of some renaming of the state, so two states share one
 * only when one is the other renamed (up to hash collisions).  Most states
 * have distinct signatures (attempt numbers are unique): one renaming,
 * often the identity, whose parts are cached.  False when a machine gives
 * no form, and the caller then keys the blob itself. */
static bool transfer_key(const ck_world *w, const ck_parts *p,
                         uint64_t key[2])
{
    unsigned T = w->cfg->T;
    uint8_t pi[CK_MAX_T], sig[CK_MAX_T][TSIG_LEN];
    for (unsigned t = 0; t < T; t++) {
        pi[t] = (uint8_t)t;
        transfer_sig(w, t, sig[t]);
    }
    bool identity = true, any = false;
    do {
        uint8_t inv[CK_MAX_T];
        for (unsigned t = 0; t < T; t++)
            inv[pi[t]] = (uint8_t)t;
        bool sorted = true;
        for (unsigned u = 1; u < T && sorted; u++)
            sorted = memcmp(sig[inv[u - 1]], sig[inv[u]], TSIG_LEN) <= 0;
        if (!sorted) {
            identity = false;
            continue;
        }
        uint64_t k[2];
        if (!key_renamed(w, p, pi, identity, k))
            return false;
        if (!any || k[0] < key[0] || (k[0] == key[0] && k[1] < key[1])) {
            key[0] = k[0];
            key[1] = k[1];
        }
        any = true;
        identity = false;
    } while (next_perm(pi, T));
    return true;
}

void ck_canon_key(const ck_world *w, const ck_parts *p, const uint8_t *blob,
                  size_t len, uint64_t key[2])
{
    unsigned S = w->cfg->S;
    if (w->cfg->transfer_symmetry && w->cfg->T > 1 && p->ok_core &&
        p->ok_rd && transfer_key(w, p, key))
        return;
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
