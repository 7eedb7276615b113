/*
 * fsm/shard_save.c - save and load of a consumer shard's dynamic state, for
 * the model checker (tools/check) and the tests; the encoding is described
 * in shard_int.h.  All integers are little-endian.
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
#include "shard_int.h"
#include "shard_priv.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "xfer/core.h"

#define SAVE_MAGIC 0x01485358u /* "XSH" 1, little-endian */
#define REC_BYTES 57u

static bool is_pending(unsigned st)
{
    return st == XFER_RESV_STATE_CANCEL_PENDING || st == XFER_RESV_STATE_EXPIRE_PENDING;
}

typedef struct wbuf {
    uint8_t *p;
    size_t len, at;
} wbuf;

typedef struct rbuf {
    const uint8_t *p;
    size_t len, at;
    bool bad;
} rbuf;

static void put(wbuf *w, uint64_t v, unsigned bytes)
{
    for (unsigned i = 0; i < bytes; i++, w->at++)
        if (w->at < w->len)
            w->p[w->at] = (uint8_t)(v >> (8 * i));
}

static void skip(rbuf *r, size_t bytes)
{
    if (r->bad || r->len - r->at < bytes)
        r->bad = true;
    else
        r->at += bytes;
}

static uint64_t get(rbuf *r, unsigned bytes)
{
    uint64_t v = 0;
    if (r->bad || r->len - r->at < bytes) {
        r->bad = true;
        return 0;
    }
    for (unsigned i = 0; i < bytes; i++)
        v |= (uint64_t)r->p[r->at + i] << (8 * i);
    r->at += bytes;
    return v;
}

/* What must match between the saving and the loading shard.  Not the
 * shard index: shards of a group are interchangeable, and the model
 * checker compares and swaps their encodings (symmetry reduction). */
static uint64_t fingerprint(const xfer_shard *s)
{
    const uint64_t v[] = {s->pool.size, s->cfg.align,
                          s->cfg.max_reservations, s->cfg.max_tombstones,
                          s->cfg.lease_ttl_ns, s->cfg.tombstone_ttl_ns,
                          s->cfg.rng.next != NULL};
    uint64_t h = SAVE_MAGIC;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        h = xfer_util_mix64(h ^ v[i]);
    return h;
}

static void save_record(wbuf *w, const xfer_shard_resv *r,
                        const xfer_shard_sort_ent *e)
{
    put(w, r->id, 8);
    put(w, r->attempt, 4);
    put(w, r->resv_id, 8);
    put(w, r->off, 8);
    put(w, r->len, 4);
    put(w, r->state, 1);
    put(w, r->writes, 4);
    put(w, r->created_ns, 8);
    put(w, e->rank == XFER_SHARD_NO_LEASE ? 0 : e->k2, 8); /* lease deadline */
    put(w, e->rank, 4);
}

static void save_tomb(void *ud, const xfer_tomb_entry *e)
{
    wbuf *w = ud;
    put(w, e->id, 8);
    put(w, e->attempt, 4);
    put(w, e->reason, 1);
    put(w, e->expires_ns, 8);
}

size_t xfer_shard_save(const xfer_shard *s, uint8_t *buf, size_t len)
{
    if (!s)
        return 0;
    wbuf w = {buf, buf ? len : 0, 0};
    put(&w, SAVE_MAGIC, 4);
    put(&w, fingerprint(s), 8);
    put(&w, s->cfg.rng.next ? 0 : s->rng_state, 8);
    uint32_t n = xfer_shard_sorted_live(s);
    put(&w, n, 4);
    for (uint32_t i = 0; i < n; i++)
        save_record(&w, &s->recs[s->scratch[i].slot], &s->scratch[i]);
    uint32_t ne;
    const xfer_pool_ext *ext = xfer_pool_extents(&s->pool, &ne);
    put(&w, ne, 4);
    for (uint32_t i = 0; i < ne; i++) {
        put(&w, ext[i].off, 8);
        put(&w, ext[i].len, 8);
    }
    put(&w, xfer_tomb_live(&s->tombs), 4);
    xfer_tomb_foreach(&s->tombs, save_tomb, &w);
    put(&w, s->nev, 4);
    for (uint32_t i = 0; i < s->nev; i++) {
        const xfer_shard_event *e = &s->evs[i];
        put(&w, e->kind, 1);
        put(&w, e->attempt, 4);
        put(&w, e->id, 8);
        put(&w, e->resv_id, 8);
        put(&w, e->len, 4);
    }
    return w.at;
}

typedef struct saved_rec {
    xfer_shard_resv r;
    uint64_t lease;
    uint32_t rank;
} saved_rec;

static saved_rec get_record(rbuf *b)
{
    saved_rec x;
    memset(&x, 0, sizeof x);
    x.r.id = get(b, 8);
    x.r.attempt = (uint32_t)get(b, 4);
    x.r.resv_id = get(b, 8);
    x.r.off = get(b, 8);
    x.r.len = (uint32_t)get(b, 4);
    x.r.state = (uint8_t)get(b, 1);
    x.r.writes = (uint32_t)get(b, 4);
    x.r.created_ns = get(b, 8);
    x.lease = get(b, 8);
    x.rank = (uint32_t)get(b, 4);
    return x;
}

/* The heap key of a saved record's lease; no lease sorts last. */
static uint64_t lease_key(const saved_rec *x)
{
    return x->rank == XFER_SHARD_NO_LEASE ? UINT64_MAX : x->lease;
}

/* A saved record that the machine could have produced. */
static bool record_ok(const xfer_shard *s, const saved_rec *x, uint64_t prev)
{
    const xfer_shard_resv *r = &x->r;
    unsigned st = r->state;
    bool writing = st == XFER_RESV_STATE_WRITING || is_pending(st);
    bool leased = x->rank != XFER_SHARD_NO_LEASE;
    bool may_lease = st == XFER_RESV_STATE_CANCEL_PENDING ||
                     (st != XFER_RESV_STATE_TAKEN && st != XFER_RESV_STATE_EXPIRE_PENDING);
    bool must_lease = st == XFER_RESV_STATE_RESERVED || st == XFER_RESV_STATE_WRITING ||
                      st == XFER_RESV_STATE_READY;
    uint64_t size = xfer_pool_round(&s->pool, r->len);
    return r->id > prev && r->resv_id != XFER_RESV_NONE &&
           st >= XFER_RESV_STATE_RESERVED && st <= XFER_RESV_STATE_EXPIRE_PENDING &&
           (r->writes > 0) == writing && (leased ? may_lease : !must_lease) &&
           (leased || x->lease == 0) && r->off % s->pool.align == 0 &&
           size <= s->pool.size && r->off <= s->pool.size - size;
}

/* Read n records into the scratch array, keyed by region (k1 = offset,
 * k2 = size) or by lease (k1 = deadline, k2 = rank), sorted by key. */
static bool scan_records(const xfer_shard *s, rbuf *b, uint32_t n,
                         bool by_lease, uint32_t *pending)
{
    uint64_t prev = 0;
    *pending = 0;
    for (uint32_t i = 0; i < n; i++) {
        saved_rec x = get_record(b);
        if (b->bad || !record_ok(s, &x, prev))
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
static bool tiling_ok(const xfer_shard *s, rbuf *b, uint32_t nrec)
{
    uint32_t ne = (uint32_t)get(b, 4), i = 0, j = 0;
    uint64_t pos = 0, eoff = 0, elen = 0;
    bool have = false, last_free = false;
    if (b->bad || ne > s->pool.cap)
        return false;
    for (;;) {
        if (!have && j < ne) {
            eoff = get(b, 8);
            elen = get(b, 8);
            have = !b->bad;
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
    return !b->bad && !have && i == nrec && j == ne && pos == s->pool.size;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Is id among the saved records (sorted by id, REC_BYTES each)? */
static bool saved_live(const uint8_t *recs, uint32_t n, uint64_t id)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint64_t v = le64(recs + (size_t)mid * REC_BYTES);
        if (v == id)
            return true;
        if (v < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

static bool tombs_ok(const xfer_shard *s, rbuf *b, const uint8_t *recs,
                     uint32_t nrec)
{
    uint64_t n = get(b, 4), prev = 0;
    if (b->bad || n + nrec > s->tombs.cap)
        return false;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t id = get(b, 8);
        skip(b, 4);
        unsigned reason = (unsigned)get(b, 1);
        uint64_t expires = get(b, 8);
        if (b->bad || id == 0 || !xfer_shard_is_tomb(reason) ||
            expires < prev || expires < s->tombs.ttl_ns ||
            saved_live(recs, nrec, id))
            return false;
        prev = expires;
    }
    return true;
}

static bool events_ok(const xfer_shard *s, rbuf *b, uint32_t pending)
{
    uint64_t n = get(b, 4);
    if (b->bad || n + pending > s->ev_cap)
        return false;
    for (uint64_t i = 0; i < n && !b->bad; i++) {
        if (get(b, 1) >= XFER_SHARD_EV_COUNT_)
            return false;
        skip(b, 4 + 8 + 8 + 4);
    }
    return !b->bad;
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
    xfer_pool_reset(&s->pool);
    xfer_tomb_expire(&s->tombs, UINT64_MAX, 0, NULL, NULL);
    s->tombs.head = 0;
    s->tombs.held = 0;
    s->tombs.last_now = 0;
    s->nev = 0;
    s->ev_reserved = 0;
}

/* Records (at b) into slots 0..n-1; leases in (deadline, rank) order so
 * the heap pops ties as the saved shard did; then the free extents. */
static void apply_records(xfer_shard *s, rbuf *b, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        saved_rec x = get_record(b);
        uint32_t slot = s->free_slots[--s->nfree];
        s->recs[slot] = x.r;
        xfer_idmap_put(&s->ids, x.r.id, slot);
        s->live++;
        s->ev_reserved += is_pending(x.r.state);
        s->scratch[i] = (xfer_shard_sort_ent){
            .k1 = lease_key(&x), .k2 = x.rank, .slot = slot, .rank = x.rank};
    }
    const xfer_shard_sort_ent *v = s->scratch;
    qsort(s->scratch, n, sizeof *s->scratch, xfer_shard_cmp_ent);
    for (uint32_t i = 0; i < n && v[i].rank != XFER_SHARD_NO_LEASE; i++)
        xfer_heap_set(&s->leases, v[i].slot, v[i].k1);
    uint32_t ne = (uint32_t)get(b, 4);
    for (uint32_t j = 0; j < ne; j++) {
        s->pool.ext[j].off = get(b, 8);
        s->pool.ext[j].len = get(b, 8);
    }
    int rc = xfer_pool_set_extents(&s->pool, s->pool.ext, ne, n);
    assert(rc == 0); /* tiling_ok() checked it */
    (void)rc;
}

/* Tombstones oldest first; false on a duplicate id (s is then reset). */
static bool apply_tombs(xfer_shard *s, rbuf *b, uint32_t nrec)
{
    uint32_t n = (uint32_t)get(b, 4);
    uint64_t ttl = s->tombs.ttl_ns;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t id = get(b, 8);
        uint32_t attempt = (uint32_t)get(b, 4);
        uint8_t reason = (uint8_t)get(b, 1);
        uint64_t born = get(b, 8) - ttl;
        if (xfer_tomb_find(&s->tombs, id) ||
            xfer_tomb_insert(&s->tombs, born, id, attempt, reason) != 0) {
            reset_dynamic(s);
            return false;
        }
    }
    s->tombs.held = nrec; /* every live record holds a slot */
    return true;
}

static void apply_events(xfer_shard *s, rbuf *b)
{
    s->nev = (uint32_t)get(b, 4);
    for (uint32_t i = 0; i < s->nev; i++) {
        xfer_shard_event *e = &s->evs[i];
        e->kind = (uint8_t)get(b, 1);
        e->shard = s->cfg.shard_index;
        e->attempt = (uint32_t)get(b, 4);
        e->id = get(b, 8);
        e->resv_id = get(b, 8);
        e->len = (uint32_t)get(b, 4);
    }
}

int xfer_shard_load(xfer_shard *s, const uint8_t *buf, size_t len)
{
    if (!s || !buf)
        return XFER_ERR_INVALID_ARG;
    rbuf b = {buf, len, 0, false};
    uint32_t pending;
    bool ok = get(&b, 4) == SAVE_MAGIC && get(&b, 8) == fingerprint(s);
    uint64_t rng = get(&b, 8);
    uint64_t nrec = get(&b, 4);
    size_t recs_at = b.at;
    ok = ok && !b.bad && nrec <= s->cfg.max_reservations &&
         nrec <= s->tombs.cap && len - recs_at >= nrec * REC_BYTES;
    /* Pass 1: validate everything without touching s. */
    ok = ok && scan_records(s, &b, (uint32_t)nrec, false, &pending) &&
         tiling_ok(s, &b, (uint32_t)nrec) &&
         tombs_ok(s, &b, buf + recs_at, (uint32_t)nrec) &&
         events_ok(s, &b, pending) && b.at == len;
    rbuf again = {buf, len, recs_at, false};
    ok = ok && scan_records(s, &again, (uint32_t)nrec, true, &pending) &&
         ranks_ok(s, (uint32_t)nrec);
    if (!ok)
        return XFER_ERR_FORMAT;
    /* Pass 2: apply. */
    reset_dynamic(s);
    if (!s->cfg.rng.next)
        s->rng_state = rng;
    b = (rbuf){buf, len, recs_at, false};
    apply_records(s, &b, (uint32_t)nrec);
    if (!apply_tombs(s, &b, (uint32_t)nrec))
        return XFER_ERR_FORMAT;
    apply_events(s, &b);
    assert(!b.bad && b.at == len);
    return 0;
}

void xfer_shard_health_get(const xfer_shard *s, xfer_shard_health *h)
{
    h->illegal = s->st.illegal;
    h->pool_bytes = s->cfg.pool_bytes;
    h->bytes_in_use = s->pool.in_use;
    h->live = s->live;
}
