/*
 * fsm/shard_save.c - save and load of a consumer shard's dynamic state
 * (fsm/save.h), format version 3 (3: the copies in flight of each record), for the model checker (tools/check) and
 * the tests.
 *
 * The save holds everything that decides what the shard does next: the
 * live records in id order (state, attempt, reservation id, region, writes
 * in flight, what is written of it and the range of its one write in
 * flight, its owner and flags, creation time, lease deadline and its rank
 * among equal deadlines), the pool's free extents (xfer_pool_save), the
 * tombstones oldest first (xfer_tomb_save), the pending shard events, the
 * internal RNG state and, on a one-sided shard only, the pending
 * invalidation requests (so a two-sided shard saves exactly what version 2
 * saved before one-sided shards existed).  It leaves out counters, stats,
 * cells_hit, the trace sequence
 * number, slot numbers, the heap's insertion counter, the shard's index
 * and the bytes in the pool (data, not machine state), so two shards that
 * behave alike save alike, and it names no shard: it is its own canonical
 * form, but for transfer ids: xfer_shard_canon writes the same bytes with
 * every id renamed and the records in the order of the renamed ids.  It assumes time never runs backwards across save and load (the
 * tombstone table's clock is rebuilt from the newest tombstone).  All
 * integers are little-endian (fsm/le.h).
 *
 * What must stay true:
 *  - Save is canonical: records go in id order (via xfer_shard_sorted_live),
 *    leases as (deadline, rank among equal deadlines), tombstones oldest
 *    first; slot numbers, counters, stats and pool bytes are left out, so
 *    two shards that behave alike save alike.
 *  - Load runs in two passes.  Pass 1 validates the whole buffer without
 *    touching the shard (using only its scratch array): each record is one
 *    the machine could have produced, the live regions and the free extents
 *    tile the pool, lease ranks run 0, 1, 2, ... per deadline, tombstones
 *    are ordered and not live, events fit next to the pending records.
 *    Pass 2 applies, and may fail only on a duplicate tombstone id, which
 *    leaves the shard empty.
 *  - After a load the shard's invariants (see shard.c) hold again: every
 *    live record holds a tombstone slot, ev_reserved counts the pending
 *    records, and leases are set in (deadline, rank) order so the heap pops
 *    ties as the saved shard would have.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h" /* xfer_canon_tomb_id_ */
#include "le.h"
#include "save.h"
#include "shard_int.h"
#include "shard_priv.h"
#include "util.h"
#include "xfer/core.h"

/* A field added to a record must be saved and loaded below. */
_Static_assert(sizeof(xfer_shard_resv) ==
                   72 + 8 * XFER_SHARD_MAX_FRAGMENTS,
               "save the new xfer_shard_resv field");

static const uint8_t MAGIC[XFER_SAVE_HDR] = {'X', XFER_SAVE_SHARD, 'S',
                                             XFER_SHARD_SAVE_VERSION};
#define REC_BYTES 76u

/* A record holding an event slot for later (ev_reserved). */
static bool is_pending(unsigned st)
{
    return st == XFER_RESV_STATE_CANCEL_PENDING ||
           st == XFER_RESV_STATE_EXPIRE_PENDING || xfer_shard_is_inval(st);
}

/* What must match between the saving and the loading shard.  Not the
 * shard index: shards of a group are interchangeable, and the model
 * checker compares and swaps their encodings (symmetry reduction). */
static uint64_t fingerprint(const xfer_shard *s)
{
    const uint64_t v[] = {s->pool.size, s->cfg.align,
                          s->cfg.max_reservations, s->cfg.max_tombstones,
                          s->cfg.lease_ttl_ns, s->cfg.tombstone_ttl_ns,
                          s->cfg.rng.next != NULL, s->cfg.max_owners,
                          s->cfg.owner_max_reservations,
                          s->cfg.owner_max_bytes,
                          s->cfg.owner_max_tombstones};
    uint64_t h = xfer_le_get32(MAGIC);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        h = xfer_util_mix64(h ^ v[i]);
    /* only when set, so saves made before the hold cap existed keep
     * their fingerprint */
    if (s->cfg.max_hold_ms)
        h = xfer_util_mix64(h ^ s->cfg.max_hold_ms);
    /* only when set: a two-sided shard's fingerprint is what it was */
    return s->cfg.one_sided ? xfer_util_mix64(h ^ 0x31736964ull) : h;
}

static void save_record(xfer_le_enc *to, const xfer_canon_ids *ids,
                        const xfer_shard_resv *r,
                        const xfer_shard_sort_ent *e)
{
    xfer_le_enc span = xfer_le_enc_span(to, REC_BYTES), *w = &span;
    xfer_le_enc_u64(w, xfer_canon_ids_map(ids, r->id));
    xfer_le_enc_u32(w, r->attempt);
    xfer_le_enc_u64(w, r->resv_id);
    xfer_le_enc_u64(w, r->off);
    xfer_le_enc_u32(w, r->len);
    xfer_le_enc_u8(w, r->state);
    xfer_le_enc_u32(w, r->writes);
    xfer_le_enc_u32(w, r->covered);
    xfer_le_enc_u32(w, r->woff);
    xfer_le_enc_u32(w, r->wlen);
    xfer_le_enc_u32(w, r->copies);
    xfer_le_enc_u16(w, r->owner);
    xfer_le_enc_u8(w, r->flags);
    xfer_le_enc_u64(w, r->created_ns);
    /* the lease deadline, and its rank among equal deadlines */
    xfer_le_enc_u64(w, e->rank == XFER_SHARD_NO_LEASE ? 0 : e->k2);
    xfer_le_enc_u32(w, e->rank);
}

/* The live records in the order of their ids renamed by ids (the scratch
 * array, as xfer_shard_sorted_live leaves it for ids NULL); their count. */
static uint32_t sorted_renamed(const xfer_shard *s, const xfer_canon_ids *ids)
{
    uint32_t n = xfer_shard_sorted_live(s);
    if (!ids)
        return n;
    for (uint32_t i = 0; i < n; i++)
        s->scratch[i].k1 = xfer_canon_ids_map(ids, s->scratch[i].k1);
    qsort(s->scratch, n, sizeof *s->scratch, xfer_shard_cmp_ent);
    return n;
}

/* The fragments past the written prefixes (records in saved order,
 * s->scratch), a section of its own only when some record has one, so a
 * shard whose writes all came in order saves as it did before ranges. */
static void save_frags(xfer_le_enc *w, const xfer_shard *s, uint32_t n)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        k += s->recs[s->scratch[i].slot].nfrag > 0;
    if (!k)
        return;
    xfer_le_enc_u32(w, k);
    for (uint32_t i = 0; i < n; i++) {
        const xfer_shard_resv *r = &s->recs[s->scratch[i].slot];
        if (!r->nfrag)
            continue;
        xfer_le_enc_u32(w, i);
        xfer_le_enc_u8(w, r->nfrag);
        for (uint32_t j = 0; j < r->nfrag; j++) {
            xfer_le_enc_u32(w, r->frag[j][0]);
            xfer_le_enc_u32(w, r->frag[j][1]);
        }
    }
}

/* The save (ids NULL) or the canonical form with ids renamed. */
static int put_shard(const xfer_shard *s, const xfer_canon_ids *ids,
                     uint8_t *buf, size_t len, size_t *need)
{
    if (!s || !need || (!buf && len))
        return XFER_ERR_INVALID_ARG;
    xfer_le_enc w = xfer_le_enc_start(buf, len);
    xfer_le_enc_bytes(&w, MAGIC, sizeof MAGIC);
    xfer_le_enc_u64(&w, fingerprint(s));
    xfer_le_enc_u64(&w, s->cfg.rng.next ? 0 : s->rng_state);
    uint32_t n = sorted_renamed(s, ids);
    xfer_le_enc_u32(&w, n);
    for (uint32_t i = 0; i < n; i++)
        save_record(&w, ids, &s->recs[s->scratch[i].slot], &s->scratch[i]);
    xfer_pool_save(&s->pool, &w);
    if (ids)
        xfer_tomb_save_map(&s->tombs, &w, xfer_canon_tomb_id_, ids);
    else
        xfer_tomb_save(&s->tombs, &w);
    xfer_le_enc_u32(&w, s->nev);
    for (uint32_t i = 0; i < s->nev; i++) {
        const xfer_shard_event *e = &s->evs[i];
        xfer_le_enc_u8(&w, e->kind);
        xfer_le_enc_u32(&w, e->attempt);
        xfer_le_enc_u64(&w, xfer_canon_ids_map(ids, e->id));
        xfer_le_enc_u64(&w, e->resv_id);
        xfer_le_enc_u32(&w, e->len);
    }
    if (s->cfg.one_sided) {
        xfer_le_enc_u32(&w, s->ninval);
        for (uint32_t i = 0; i < s->ninval; i++) {
            xfer_le_enc_u64(&w, xfer_canon_ids_map(ids, s->invals[i].id));
            xfer_le_enc_u64(&w, s->invals[i].resv_id);
            xfer_le_enc_u32(&w, s->invals[i].attempt);
        }
    }
    save_frags(&w, s, n);
    *need = w.at;
    return xfer_le_enc_fits(&w) ? 0 : XFER_ERR_TOO_SMALL;
}

int xfer_shard_save(const xfer_shard *s, uint8_t *buf, size_t len,
                    size_t *need)
{
    return put_shard(s, NULL, buf, len, need);
}

int xfer_shard_canon(const xfer_shard *s, const xfer_canon_ids *ids,
                     uint8_t *buf, size_t len, size_t *need)
{
    return put_shard(s, ids, buf, len, need);
}

typedef struct saved_rec {
    xfer_shard_resv r;
    uint64_t lease;
    uint32_t rank;
} saved_rec;

static saved_rec get_record(xfer_le_dec *from)
{
    xfer_le_dec span = xfer_le_dec_span(from, REC_BYTES), *b = &span;
    saved_rec x;
    memset(&x, 0, sizeof x);
    x.r.id = xfer_le_dec_u64(b);
    x.r.attempt = xfer_le_dec_u32(b);
    x.r.resv_id = xfer_le_dec_u64(b);
    x.r.off = xfer_le_dec_u64(b);
    x.r.len = xfer_le_dec_u32(b);
    x.r.state = xfer_le_dec_u8(b);
    x.r.writes = xfer_le_dec_u32(b);
    x.r.covered = xfer_le_dec_u32(b);
    x.r.woff = xfer_le_dec_u32(b);
    x.r.wlen = xfer_le_dec_u32(b);
    x.r.copies = xfer_le_dec_u32(b);
    x.r.owner = xfer_le_dec_u16(b);
    x.r.flags = xfer_le_dec_u8(b);
    x.r.created_ns = xfer_le_dec_u64(b);
    x.lease = xfer_le_dec_u64(b);
    x.rank = xfer_le_dec_u32(b);
    return x;
}

/* The heap key of a saved record's lease; no lease sorts last. */
static uint64_t lease_key(const saved_rec *x)
{
    return x->rank == XFER_SHARD_NO_LEASE ? UINT64_MAX : x->lease;
}

/* What is written of a saved record, and its flags, as the machine
 * leaves them: whole once committed; nothing kept once it only waits to
 * be freed; the one write's range inside the region, and only while that
 * write runs alone; the consumer's mark only on its pending cancel (of
 * writes, or, one-sided, of the invalidation). */
static bool writes_ok(const xfer_shard_resv *r)
{
    unsigned st = r->state;
    bool multi = r->flags & XFER_SHARD_F_MULTI;
    bool solo = r->writes > 0 && !multi;
    if (r->flags & ~(XFER_SHARD_F_MULTI | XFER_SHARD_F_CONSUMER) ||
        r->covered > r->len || (multi && r->writes == 0) ||
        ((r->flags & XFER_SHARD_F_CONSUMER) &&
         st != XFER_RESV_STATE_CANCEL_PENDING &&
         st != XFER_RESV_STATE_CANCEL_INVAL))
        return false;
    if (st == XFER_RESV_STATE_READY || st == XFER_RESV_STATE_TAKEN ||
        st == XFER_RESV_STATE_COMMIT_INVAL)
        return r->covered == r->len && r->writes == 0 && r->woff == 0 &&
               r->wlen == 0 && !multi;
    if (is_pending(st))
        return r->covered == 0 && r->woff == 0 && r->wlen == 0 && !multi;
    if (!solo)
        return r->woff == 0 && r->wlen == 0;
    return r->woff <= r->len && r->wlen <= r->len - r->woff;
}

/* A saved record that the machine could have produced. */
static bool record_ok(const xfer_shard *s, const saved_rec *x, uint64_t prev)
{
    const xfer_shard_resv *r = &x->r;
    unsigned st = r->state;
    bool inval = xfer_shard_is_inval(st);
    bool writing = st == XFER_RESV_STATE_WRITING ||
                   (is_pending(st) && !inval);
    bool leased = x->rank != XFER_SHARD_NO_LEASE;
    bool may_lease = st == XFER_RESV_STATE_CANCEL_PENDING ||
                     (st != XFER_RESV_STATE_TAKEN && st != XFER_RESV_STATE_EXPIRE_PENDING &&
                      st != XFER_RESV_STATE_EXPIRE_INVAL);
    bool must_lease = st == XFER_RESV_STATE_RESERVED || st == XFER_RESV_STATE_WRITING ||
                      st == XFER_RESV_STATE_READY ||
                      st == XFER_RESV_STATE_COMMIT_INVAL;
    bool known = (st >= XFER_RESV_STATE_RESERVED &&
                  st <= XFER_RESV_STATE_EXPIRE_PENDING) ||
                 (inval && s->cfg.one_sided);
    uint64_t size = xfer_pool_round(&s->pool, r->len);
    return r->id > prev && r->resv_id != XFER_RESV_NONE && known &&
           writes_ok(r) && r->copies <= r->writes &&
           r->owner <= s->cfg.max_owners &&
           (r->writes > 0) == writing && (leased ? may_lease : !must_lease) &&
           (leased || x->lease == 0) && r->off % s->pool.align == 0 &&
           size <= s->pool.size && r->off <= s->pool.size - size;
}

/* Read n records into the scratch array, keyed by region (k1 = offset,
 * k2 = size) or by lease (k1 = deadline, k2 = rank), sorted by key. */
static bool scan_records(const xfer_shard *s, xfer_le_dec *b, uint32_t n,
                         bool by_lease, uint32_t *pending)
{
    uint64_t prev = 0;
    *pending = 0;
    for (uint32_t i = 0; i < n; i++) {
        saved_rec x = get_record(b);
        if (!xfer_le_dec_ok(b) || !record_ok(s, &x, prev))
            return false;
        prev = x.r.id;
        *pending += is_pending(x.r.state);
        s->scratch[i] = by_lease
            ? (xfer_shard_sort_ent){.k1 = lease_key(&x), .k2 = x.rank,
                                    .slot = i, .rank = x.rank}
            : (xfer_shard_sort_ent){.k1 = x.r.off,
                                    .k2 = xfer_pool_round(&s->pool, x.r.len),
                                    .slot = i};
    }
    qsort(s->scratch, n, sizeof *s->scratch, xfer_shard_cmp_ent);
    return true;
}

/* Leases with one deadline must carry ranks 0, 1, 2, ... */
static bool ranks_ok(const xfer_shard *s, uint32_t n)
{
    const xfer_shard_sort_ent *v = s->scratch;
    for (uint32_t i = 0; i < n && v[i].rank != XFER_SHARD_NO_LEASE; i++) {
        bool tie = i > 0 && v[i - 1].k1 == v[i].k1;
        if (v[i].rank != (tie ? v[i - 1].rank + 1 : 0))
            return false;
    }
    return true;
}

/* The live regions (scratch, sorted by offset) and the saved free extents
 * must tile the pool exactly, with no two free extents touching. */
static bool tiling_ok(const xfer_shard *s, xfer_le_dec *b, uint32_t nrec)
{
    uint32_t ne = xfer_le_dec_u32(b), i = 0, j = 0;
    uint64_t pos = 0, eoff = 0, elen = 0;
    bool have = false, last_free = false;
    if (!xfer_le_dec_ok(b) || ne > s->pool.cap)
        return false;
    for (;;) {
        if (!have && j < ne) {
            eoff = xfer_le_dec_u64(b);
            elen = xfer_le_dec_u64(b);
            have = xfer_le_dec_ok(b);
            j++;
        }
        if (i < nrec && s->scratch[i].k1 == pos) {
            pos += s->scratch[i++].k2;
            last_free = false;
        } else if (have && eoff == pos && !last_free && elen > 0 &&
                   elen % s->pool.align == 0 && elen <= s->pool.size - pos) {
            pos += elen;
            have = false;
            last_free = true;
        } else {
            break;
        }
    }
    return xfer_le_dec_ok(b) && !have && i == nrec && j == ne &&
           pos == s->pool.size;
}

/* Where id sits among the saved records (sorted by id, REC_BYTES each),
 * or -1. */
static int64_t saved_at(const uint8_t *recs, uint32_t n, uint64_t id)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint64_t v = xfer_le_get64(recs + (size_t)mid * REC_BYTES);
        if (v == id)
            return mid;
        if (v < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

typedef struct tomb_ctx {
    const uint8_t *recs;
    uint32_t nrec;
} tomb_ctx;

/* A saved tombstone holds an ended state and no live record's id. */
static bool tomb_ok(void *ud, const xfer_tomb_entry *e)
{
    const tomb_ctx *c = ud;
    return xfer_shard_is_tomb(e->reason) &&
           saved_at(c->recs, c->nrec, e->id) < 0;
}

static bool events_ok(const xfer_shard *s, xfer_le_dec *b, uint32_t pending)
{
    uint64_t n = xfer_le_dec_u32(b);
    if (!xfer_le_dec_ok(b) || n + pending > s->ev_cap)
        return false;
    for (uint64_t i = 0; i < n && xfer_le_dec_ok(b); i++) {
        if (xfer_le_dec_u8(b) >= XFER_SHARD_EV_COUNT_)
            return false;
        xfer_le_dec_skip(b, 4 + 8 + 8 + 4);
    }
    return xfer_le_dec_ok(b);
}

/* One-sided: each saved request names a saved record waiting for its
 * invalidation (same attempt and reservation id), at most once.  The
 * scratch array marks the records seen (it is rebuilt after this). */
static bool invals_ok(const xfer_shard *s, xfer_le_dec *b,
                      const uint8_t *recs, uint32_t nrec)
{
    if (!s->cfg.one_sided)
        return true;
    uint64_t n = xfer_le_dec_u32(b);
    if (!xfer_le_dec_ok(b) || n > nrec)
        return false;
    for (uint32_t i = 0; i < nrec; i++)
        s->scratch[i].rank = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t id = xfer_le_dec_u64(b), resv = xfer_le_dec_u64(b);
        uint32_t attempt = xfer_le_dec_u32(b);
        int64_t at = saved_at(recs, nrec, id);
        if (!xfer_le_dec_ok(b) || at < 0 || s->scratch[at].rank)
            return false;
        /* the record's id u64, attempt u32, resv_id u64, off u64, len
         * u32, state u8 (save_record) */
        const uint8_t *r = recs + (size_t)at * REC_BYTES;
        if (xfer_le_get32(r + 8) != attempt || xfer_le_get64(r + 12) != resv ||
            !xfer_shard_is_inval(r[32]))
            return false;
        s->scratch[at].rank = 1;
    }
    return true;
}

/* The fragments section, when there is one (b not at its end): records
 * in increasing saved order, each RESERVED or WRITING, 1..the cap
 * fragments, sorted, each after a gap past the prefix and the previous
 * one, inside the region.  Offsets of the record's bytes: save_record. */
static bool frags_ok(xfer_le_dec *b, const uint8_t *recs, uint32_t nrec)
{
    if (xfer_le_dec_done(b))
        return true;
    uint64_t k = xfer_le_dec_u32(b);
    int64_t prev = -1;
    if (!xfer_le_dec_ok(b) || k == 0 || k > nrec)
        return false;
    for (uint64_t i = 0; i < k; i++) {
        uint32_t at = xfer_le_dec_u32(b);
        uint8_t n = xfer_le_dec_u8(b);
        if (!xfer_le_dec_ok(b) || (int64_t)at <= prev || at >= nrec ||
            n == 0 || n > XFER_SHARD_MAX_FRAGMENTS)
            return false;
        prev = at;
        const uint8_t *r = recs + (size_t)at * REC_BYTES;
        uint32_t len = xfer_le_get32(r + 28), end = xfer_le_get32(r + 37);
        if (r[32] != XFER_RESV_STATE_RESERVED &&
            r[32] != XFER_RESV_STATE_WRITING)
            return false;
        for (uint8_t j = 0; j < n; j++) {
            uint32_t x = xfer_le_dec_u32(b), y = xfer_le_dec_u32(b);
            if (!xfer_le_dec_ok(b) || x <= end || y <= x || y > len)
                return false;
            end = y;
        }
    }
    return true;
}

static void apply_frags(xfer_shard *s, xfer_le_dec *b, const uint8_t *recs)
{
    if (xfer_le_dec_done(b))
        return;
    uint32_t k = xfer_le_dec_u32(b);
    for (uint32_t i = 0; i < k; i++) {
        uint32_t at = xfer_le_dec_u32(b), slot = 0;
        bool found = xfer_idmap_get(
            &s->ids, xfer_le_get64(recs + (size_t)at * REC_BYTES), &slot);
        assert(found); /* frags_ok checked it */
        (void)found;
        xfer_shard_resv *r = &s->recs[slot];
        r->nfrag = xfer_le_dec_u8(b);
        for (uint32_t j = 0; j < r->nfrag; j++) {
            r->frag[j][0] = xfer_le_dec_u32(b);
            r->frag[j][1] = xfer_le_dec_u32(b);
        }
    }
}

/* Forget every record, region, tombstone and event (slots from 0). */
static void reset_dynamic(xfer_shard *s)
{
    for (uint32_t slot = 0; slot < s->cfg.max_reservations; slot++) {
        if (s->recs[slot].state == XFER_RESV_STATE_NONE)
            continue;
        xfer_idmap_del(&s->ids, s->recs[slot].id);
        xfer_heap_remove(&s->leases, slot);
    }
    xfer_shard_reset_slots(s);
    if (s->use)
        memset(s->use, 0, ((size_t)s->cfg.max_owners + 1) * sizeof *s->use);
    xfer_pool_reset(&s->pool);
    xfer_tomb_reset(&s->tombs);
    s->nev = 0;
    s->ev_reserved = 0;
    s->ninval = 0;
}

/* Records (at b) into slots 0..n-1; leases in (deadline, rank) order so
 * the heap pops ties as the saved shard did; then the free extents. */
static void apply_records(xfer_shard *s, xfer_le_dec *b, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        saved_rec x = get_record(b);
        uint32_t slot = s->free_slots[--s->nfree];
        s->recs[slot] = x.r;
        xfer_idmap_put(&s->ids, x.r.id, slot);
        s->live++;
        if (x.r.owner) {
            s->use[x.r.owner].live++;
            s->use[x.r.owner].bytes += xfer_pool_round(&s->pool, x.r.len);
        }
        s->ev_reserved += is_pending(x.r.state);
        s->scratch[i] = (xfer_shard_sort_ent){
            .k1 = lease_key(&x), .k2 = x.rank, .slot = slot, .rank = x.rank};
    }
    const xfer_shard_sort_ent *v = s->scratch;
    qsort(s->scratch, n, sizeof *s->scratch, xfer_shard_cmp_ent);
    for (uint32_t i = 0; i < n && v[i].rank != XFER_SHARD_NO_LEASE; i++)
        xfer_heap_set(&s->leases, v[i].slot, v[i].k1);
    int rc = xfer_pool_restore(&s->pool, b, n);
    assert(rc == 0); /* tiling_ok() checked it */
    (void)rc;
}

/* Tombstones oldest first, every live record holding a slot; false on a
 * duplicate id (s is then reset). */
static bool apply_tombs(xfer_shard *s, xfer_le_dec *b, uint32_t nrec)
{
    if (xfer_tomb_restore(&s->tombs, b, nrec) == 0) {
        for (uint32_t slot = 0; slot < s->cfg.max_reservations; slot++)
            if (s->recs[slot].state != XFER_RESV_STATE_NONE)
                xfer_tomb_charge_hold(&s->tombs, s->recs[slot].owner);
        return true;
    }
    reset_dynamic(s);
    return false;
}

static void apply_invals(xfer_shard *s, xfer_le_dec *b)
{
    s->ninval = 0;
    if (!s->cfg.one_sided)
        return;
    s->ninval = xfer_le_dec_u32(b);
    for (uint32_t i = 0; i < s->ninval; i++) {
        xfer_shard_inval *q = &s->invals[i];
        q->id = xfer_le_dec_u64(b);
        q->resv_id = xfer_le_dec_u64(b);
        q->attempt = xfer_le_dec_u32(b);
    }
}

static void apply_events(xfer_shard *s, xfer_le_dec *b)
{
    s->nev = xfer_le_dec_u32(b);
    for (uint32_t i = 0; i < s->nev; i++) {
        xfer_shard_event *e = &s->evs[i];
        e->kind = xfer_le_dec_u8(b);
        e->shard = s->cfg.shard_index;
        e->attempt = xfer_le_dec_u32(b);
        e->id = xfer_le_dec_u64(b);
        e->resv_id = xfer_le_dec_u64(b);
        e->len = xfer_le_dec_u32(b);
    }
}

int xfer_shard_load(xfer_shard *s, const uint8_t *buf, size_t len)
{
    if (!s || !buf)
        return XFER_ERR_INVALID_ARG;
    xfer_le_dec b = xfer_le_dec_start(buf, len);
    uint32_t pending;
    const uint8_t *m = xfer_le_dec_take(&b, sizeof MAGIC);
    bool ok = m && memcmp(m, MAGIC, sizeof MAGIC) == 0 &&
              xfer_le_dec_u64(&b) == fingerprint(s);
    uint64_t rng = xfer_le_dec_u64(&b);
    uint64_t nrec = xfer_le_dec_u32(&b);
    size_t recs_at = b.at;
    ok = ok && xfer_le_dec_ok(&b) && nrec <= s->cfg.max_reservations &&
         len - recs_at >= nrec * REC_BYTES;
    /* Pass 1: validate everything without touching s. */
    tomb_ctx tc = {buf + recs_at, (uint32_t)nrec};
    ok = ok && scan_records(s, &b, (uint32_t)nrec, false, &pending) &&
         tiling_ok(s, &b, (uint32_t)nrec) &&
         xfer_tomb_check(&s->tombs, &b, (uint32_t)nrec, tomb_ok, &tc) &&
         events_ok(s, &b, pending) &&
         invals_ok(s, &b, buf + recs_at, (uint32_t)nrec) &&
         frags_ok(&b, buf + recs_at, (uint32_t)nrec) && b.at == len;
    xfer_le_dec again = xfer_le_dec_start(buf, len);
    again.at = recs_at;
    ok = ok && scan_records(s, &again, (uint32_t)nrec, true, &pending) &&
         ranks_ok(s, (uint32_t)nrec);
    if (!ok)
        return XFER_ERR_FORMAT;
    /* Pass 2: apply. */
    reset_dynamic(s);
    if (!s->cfg.rng.next)
        s->rng_state = rng;
    b = xfer_le_dec_start(buf, len);
    b.at = recs_at;
    apply_records(s, &b, (uint32_t)nrec);
    if (!apply_tombs(s, &b, (uint32_t)nrec))
        return XFER_ERR_FORMAT;
    apply_events(s, &b);
    apply_invals(s, &b);
    apply_frags(s, &b, buf + recs_at);
    assert(xfer_le_dec_done(&b));
    return 0;
}

void xfer_shard_health_get(const xfer_shard *s, xfer_shard_health *h)
{
    h->illegal = s->st.illegal;
    h->pool_bytes = s->cfg.pool_bytes;
    h->bytes_in_use = s->pool.in_use;
    h->live = s->live;
}
