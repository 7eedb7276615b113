/*
 * fsm/readiness_save.c - save, load and canonical form of a readiness
 * tracker's dynamic state (fsm/save.h), format version 2, for the model
 * checker (tools/check) and the tests.
 *
 * The save holds everything that decides what the tracker does next: the
 * header (the config the load must match, the counts), the live records
 * in id order (state, attempt, ready mask, reservation ids, take results,
 * deferred give-up reason and whether the consumer's cancel was among
 * them, deadline), the armed deadlines as ids in the
 * order they fire (which keeps the rank among equal deadlines), the
 * tombstones oldest first (xfer_tomb_save) and the pending actions.  It
 * leaves out counters, stats, cells_hit, the trace sequence number, slot
 * numbers and the heap's insertion counter, so two trackers that behave
 * alike encode alike.  Like the shard's, it assumes time never runs
 * backwards across save and load (the tombstone table's clock is rebuilt
 * from the newest tombstone).  All integers are little-endian (fsm/le.h).
 * One walk of the state (put_tracker, through fsm/canon.h) writes both the
 * save and the canonical form, so the two cannot disagree; a form that
 * renames transfer ids writes every id renamed and the records in the
 * order of the renamed ids (the pending actions, which would name ids in
 * an order, never reach a canonical form).
 *
 * What must stay true:
 *  - Save is canonical: live records go in id order, armed deadlines in the
 *    order they fire (deadline, then set order), tombstones oldest first,
 *    then the pending actions; slot numbers, counters, stats and the heap's
 *    insertion counter are left out, so two trackers that behave alike save
 *    alike.
 *  - Load runs in two passes.  Pass 1 validates the whole buffer without
 *    touching the tracker (using only its scratch array): the header matches
 *    the tracker's config and caps, each record is one the handlers could
 *    have produced (ids increasing), every deadline names a saved record
 *    once and in firing order and every record that still needs one has
 *    one, tombstones are ordered, ended and not live, actions are of known
 *    kinds, and nothing is left over.  Pass 2 applies, and may fail only on
 *    a duplicate tombstone id, which leaves the tracker empty.
 *  - After a load the tracker's invariants (see readiness.c) hold again:
 *    records sit in slots 0..n-1 with the rest free, every live record
 *    holds a tombstone slot (I11), and deadlines are set in firing order so
 *    the heap breaks ties as the saved tracker would have (I10).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "le.h"
#include "readiness_int.h"
#include "readiness_priv.h"
#include "save.h"
#include "xfer/core.h" /* XFER_RESV_NONE */

/* A field added to a record must be saved and loaded below. */
_Static_assert(sizeof(xfer_readiness_rec) == 64,
               "save the new xfer_readiness_rec field");

static const uint8_t MAGIC[XFER_SAVE_HDR] = {'X', XFER_SAVE_READINESS, 'S',
                                             XFER_READINESS_SAVE_VERSION};
/* A saved record's fixed part (put_record, before one reservation id per
 * shard). */
#define REC_FIXED 58u

static int cmp_key(const void *pa, const void *pb)
{
    const xfer_readiness_sortkey *a = pa, *b = pb;
    if (a->a != b->a)
        return a->a < b->a ? -1 : 1;
    return a->b < b->b ? -1 : a->b > b->b;
}

static int cmp_id(const void *pa, const void *pb)
{
    const xfer_readiness_sortkey *a = pa, *b = pb;
    return a->a < b->a ? -1 : a->a > b->a;
}

static void put_record(xfer_canon_out *o, const xfer_readiness *r,
                       uint32_t slot)
{
    const xfer_readiness_rec *rec = &r->recs[slot];
    const uint64_t *resv = xfer_readiness_resv_of(r, slot);
    /* the fixed part at once (masks keep their width in the rest) */
    xfer_le_enc span = xfer_le_enc_span(xfer_canon_rest(o), REC_FIXED);
    xfer_le_enc *e = &span;
    xfer_le_enc_u64(e, xfer_canon_id(o, rec->id));
    xfer_le_enc_u32(e, rec->attempt);
    xfer_le_enc_u8(e, rec->state);
    xfer_le_enc_u8(e, rec->ccancel);
    xfer_le_enc_u32(e, (uint32_t)rec->deferred);
    xfer_canon_mask(o, e, rec->ready);
    xfer_canon_mask(o, e, rec->take_ok);
    xfer_canon_mask(o, e, rec->take_fail);
    xfer_canon_mask(o, e, rec->unsure);
    xfer_le_enc_u64(e, rec->deadline_ns);
    for (uint16_t k = 0; k < r->cfg.nshards; k++)
        xfer_le_enc_u64(xfer_canon_shard(o, k), resv[k]);
}

/* Live records in id order (of the ids as o writes them). */
static void put_records(xfer_canon_out *o, const xfer_readiness *r)
{
    uint32_t n = 0;
    for (uint32_t s = 0; s < r->cfg.max_records; s++)
        if (r->recs[s].id)
            r->scratch[n++] = (xfer_readiness_sortkey){
                xfer_canon_id(o, r->recs[s].id), 0, s};
    qsort(r->scratch, n, sizeof *r->scratch, cmp_key);
    for (uint32_t i = 0; i < n; i++)
        put_record(o, r, r->scratch[i].slot);
}

/* Armed deadlines in the order they fire (deadline, then set order). */
static void put_heap(const xfer_canon_out *o, xfer_le_enc *w,
                     const xfer_readiness *r)
{
    const xfer_heap *h = &r->deadlines;
    uint32_t n = xfer_heap_count(h);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t s = xfer_heap_slot_at(h, i);
        uint64_t key = 0, order = 0;
        xfer_heap_get(h, s, &key, &order);
        r->scratch[i] = (xfer_readiness_sortkey){key, order, s};
    }
    qsort(r->scratch, n, sizeof *r->scratch, cmp_key);
    for (uint32_t i = 0; i < n; i++)
        xfer_le_enc_u64(w, xfer_canon_id(o, r->recs[r->scratch[i].slot].id));
}

static void put_action(xfer_le_enc *w, const xfer_ready_action *a)
{
    xfer_le_enc_u8(w, a->kind);
    xfer_le_enc_u16(w, a->shard);
    xfer_le_enc_u32(w, a->attempt);
    xfer_le_enc_u64(w, a->id);
    xfer_le_enc_u64(w, a->resv_id);
    xfer_le_enc_u32(w, (uint32_t)a->reason);
    xfer_le_enc_u64(w, a->missing);
}

/* The whole state, through o (a save or a canonical form). */
static void put_tracker(xfer_canon_out *o, const xfer_readiness *r)
{
    const xfer_readiness_config *c = &r->cfg;
    xfer_le_enc *w = xfer_canon_rest(o);
    xfer_le_enc_bytes(w, MAGIC, sizeof MAGIC);
    xfer_le_enc_u16(w, c->nshards);
    xfer_le_enc_u32(w, c->max_records);
    xfer_le_enc_u32(w, c->max_tombstones);
    xfer_le_enc_u64(w, c->deadline_ns);
    xfer_le_enc_u64(w, c->tombstone_ttl_ns);
    xfer_le_enc_u32(w, r->live.n);
    xfer_le_enc_u32(w, xfer_heap_count(&r->deadlines));
    xfer_le_enc_u32(w, (uint32_t)r->nacts);
    put_records(o, r);
    put_heap(o, w, r);
    xfer_canon_tombs(o, &r->tombs, w);
    for (size_t i = 0; i < r->nacts; i++)
        put_action(w, &r->acts[i]);
}

int xfer_readiness_save(const xfer_readiness *r, uint8_t *buf, size_t len,
                        size_t *need)
{
    if (!r || !need || (!buf && len))
        return XFER_ERR_INVALID_ARG;
    xfer_canon_out o;
    xfer_canon_begin_save(&o, buf, len);
    put_tracker(&o, r);
    *need = o.main.at;
    return xfer_le_enc_fits(&o.main) ? 0 : XFER_ERR_TOO_SMALL;
}

int xfer_readiness_canon(const xfer_readiness *r, xfer_canon *out)
{
    if (!r || !out)
        return XFER_ERR_INVALID_ARG;
    if (r->nacts)
        return XFER_ERR_STATE;
    xfer_canon_out o;
    xfer_canon_begin(&o, out, r->cfg.nshards);
    put_tracker(&o, r);
    return xfer_canon_end(&o, out);
}

/* The counts that follow the configuration in the header. */
typedef struct hdr {
    uint32_t nrec, nheap, nacts;
    size_t rec_at; /* where the records start */
} hdr;

static bool get_header(xfer_le_dec *b, const xfer_readiness *r, hdr *h)
{
    const xfer_readiness_config *c = &r->cfg;
    const uint8_t *m = xfer_le_dec_take(b, sizeof MAGIC);
    bool same = m && memcmp(m, MAGIC, sizeof MAGIC) == 0;
    same = same && xfer_le_dec_u16(b) == c->nshards;
    same = same && xfer_le_dec_u32(b) == c->max_records;
    same = same && xfer_le_dec_u32(b) == c->max_tombstones;
    same = same && xfer_le_dec_u64(b) == c->deadline_ns;
    same = same && xfer_le_dec_u64(b) == c->tombstone_ttl_ns;
    h->nrec = xfer_le_dec_u32(b);
    h->nheap = xfer_le_dec_u32(b);
    h->nacts = xfer_le_dec_u32(b);
    h->rec_at = b->at;
    return xfer_le_dec_ok(b) && same && h->nrec <= c->max_records &&
           h->nheap <= h->nrec && h->nrec <= c->max_tombstones &&
           h->nacts <= r->cap;
}

static bool deferred_ok(int32_t d)
{
    return d == 0 || d == XFER_ERR_CANCELLED || d == XFER_ERR_EXPIRED ||
           d == XFER_ERR_TIMEOUT;
}

/* Read one record and check it could have been made by the handlers. */
static bool get_record(xfer_le_dec *b, const xfer_readiness *r,
                       xfer_readiness_rec *rec, uint64_t *resv)
{
    xfer_le_dec span = xfer_le_dec_span(b, REC_FIXED), *f = &span;
    rec->id = xfer_le_dec_u64(f);
    rec->attempt = xfer_le_dec_u32(f);
    rec->state = xfer_le_dec_u8(f);
    rec->ccancel = xfer_le_dec_u8(f);
    rec->deferred = (int32_t)xfer_le_dec_u32(f);
    rec->ready = xfer_le_dec_u64(f);
    rec->take_ok = xfer_le_dec_u64(f);
    rec->take_fail = xfer_le_dec_u64(f);
    rec->unsure = xfer_le_dec_u64(f);
    rec->deadline_ns = xfer_le_dec_u64(f);
    bool ok = xfer_le_dec_ok(b) && rec->id && rec->attempt && rec->ready &&
              !(rec->ready & ~r->full) && !(rec->unsure & ~rec->take_fail) &&
              deferred_ok(rec->deferred) && rec->ccancel <= 1 &&
              (!rec->ccancel || rec->deferred);
    for (uint16_t k = 0; k < r->cfg.nshards; k++) {
        resv[k] = xfer_le_dec_u64(b);
        ok = ok && (resv[k] != XFER_RESV_NONE) ==
                      !!(rec->ready & xfer_readiness_bit(k));
    }
    uint64_t answered = rec->take_ok | rec->take_fail;
    if (rec->state == XFER_READY_STATE_WAITING)
        return ok && rec->ready != r->full && answered == 0 &&
               rec->deferred == 0;
    return ok && rec->state == XFER_READY_STATE_TAKING && rec->ready == r->full &&
           !(rec->take_ok & rec->take_fail) && answered != r->full;
}

/* Pass 1 keeps, per saved record i, scratch[i] = {id, deadline, flags}. */
enum { NEEDS_DEADLINE = 1, ARMED = 2 };

static xfer_readiness_sortkey *find_saved(const xfer_readiness *r,
                                          const hdr *h, uint64_t id)
{
    xfer_readiness_sortkey key = {id, 0, 0};
    return bsearch(&key, r->scratch, h->nrec, sizeof key, cmp_id);
}

/* Records: ids increasing, each well-formed. */
static bool check_records(xfer_le_dec *b, const xfer_readiness *r, const hdr *h)
{
    uint64_t prev = 0, resv[XFER_MAX_SHARDS];
    for (uint32_t i = 0; i < h->nrec; i++) {
        xfer_readiness_rec rec;
        if (!get_record(b, r, &rec, resv) || rec.id <= prev)
            return false;
        prev = rec.id;
        bool needs = rec.state == XFER_READY_STATE_WAITING || rec.deferred == 0;
        r->scratch[i] = (xfer_readiness_sortkey){rec.id, rec.deadline_ns,
                                  needs ? NEEDS_DEADLINE : 0};
    }
    return true;
}

/* Deadlines: saved records, each once, in firing order; every record that
 * still needs its deadline has one. */
static bool check_heap(xfer_le_dec *b, const xfer_readiness *r,
                       const hdr *h)
{
    uint64_t prev = 0;
    for (uint32_t i = 0; i < h->nheap; i++) {
        xfer_readiness_sortkey *k = find_saved(r, h, xfer_le_dec_u64(b));
        if (!xfer_le_dec_ok(b) || !k || (k->slot & ARMED) || k->b < prev)
            return false;
        prev = k->b;
        k->slot |= ARMED;
    }
    for (uint32_t i = 0; i < h->nrec; i++)
        if (r->scratch[i].slot == NEEDS_DEADLINE)
            return false;
    return true;
}

typedef struct tomb_ctx {
    const xfer_readiness *r;
    const hdr *h;
} tomb_ctx;

/* A saved tombstone holds an outcome and no live record's id. */
static bool tomb_ok(void *ud, const xfer_tomb_entry *e)
{
    const tomb_ctx *c = ud;
    return !find_saved(c->r, c->h, e->id) &&
           (e->reason == XFER_READY_STATE_AVAILABLE ||
            e->reason == XFER_READY_STATE_UNAVAILABLE);
}

static bool check_rest(xfer_le_dec *b, const xfer_readiness *r, const hdr *h)
{
    tomb_ctx c = {r, h};
    if (!xfer_tomb_check(&r->tombs, b, h->nrec, tomb_ok, &c))
        return false;
    for (uint32_t i = 0; i < h->nacts; i++) {
        if (xfer_le_dec_u8(b) >= XFER_READY_ACT_COUNT_)
            return false;
        xfer_le_dec_skip(b, 2 + 4 + 8 + 8 + 4 + 8);
    }
    return xfer_le_dec_done(b);
}

/* Forget every record, deadline, tombstone and action. */
static void reset(xfer_readiness *r)
{
    uint32_t n = r->cfg.max_records;
    for (uint32_t s = 0; s < n; s++) {
        if (!r->recs[s].id)
            continue;
        xfer_idmap_del(&r->live, r->recs[s].id);
        xfer_heap_remove(&r->deadlines, s);
    }
    memset(r->recs, 0, (size_t)n * sizeof *r->recs);
    memset(r->resv, 0, (size_t)n * r->cfg.nshards * sizeof *r->resv);
    for (uint32_t i = 0; i < n; i++)
        r->free_slots[i] = n - 1 - i;
    r->nfree = n;
    xfer_tomb_reset(&r->tombs);
    r->nacts = 0;
}

/* Second pass over a checked buffer: records take slots 0..nrec-1. */
static void apply_records(xfer_le_dec *b, xfer_readiness *r, const hdr *h)
{
    for (uint32_t i = 0; i < h->nrec; i++) {
        get_record(b, r, &r->recs[i], xfer_readiness_resv_of(r, i));
        xfer_idmap_put(&r->live, r->recs[i].id, i);
    }
    r->nfree = r->cfg.max_records - h->nrec;
    for (uint32_t i = 0; i < h->nheap; i++) {
        uint32_t slot = 0;
        xfer_idmap_get(&r->live, xfer_le_dec_u64(b), &slot);
        xfer_heap_set(&r->deadlines, slot, r->recs[slot].deadline_ns);
    }
}

static bool apply_rest(xfer_le_dec *b, xfer_readiness *r, const hdr *h)
{
    if (xfer_tomb_restore(&r->tombs, b, h->nrec) != 0)
        return false;
    for (uint32_t i = 0; i < h->nacts; i++) {
        xfer_ready_action *a = &r->acts[r->nacts++];
        memset(a, 0, sizeof *a);
        a->kind = xfer_le_dec_u8(b);
        a->shard = xfer_le_dec_u16(b);
        a->attempt = xfer_le_dec_u32(b);
        a->id = xfer_le_dec_u64(b);
        a->resv_id = xfer_le_dec_u64(b);
        a->reason = (int32_t)xfer_le_dec_u32(b);
        a->missing = xfer_le_dec_u64(b);
    }
    return true;
}

int xfer_readiness_load(xfer_readiness *r, const uint8_t *buf, size_t len)
{
    if (!r || (!buf && len))
        return XFER_ERR_INVALID_ARG;
    xfer_le_dec b = xfer_le_dec_start(buf, len);
    hdr h;
    if (!get_header(&b, r, &h) || !check_records(&b, r, &h) ||
        !check_heap(&b, r, &h) || !check_rest(&b, r, &h))
        return XFER_ERR_FORMAT;
    reset(r);
    b = xfer_le_dec_start(buf, len);
    b.at = h.rec_at;
    apply_records(&b, r, &h);
    if (!apply_rest(&b, r, &h)) {
        reset(r);
        return XFER_ERR_FORMAT;
    }
    return 0;
}

void xfer_readiness_health_get(const xfer_readiness *r,
                               xfer_readiness_health *h)
{
    h->illegal = r->st.illegal;
    h->live = r->live.n;
}
