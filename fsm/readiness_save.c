/*
 * fsm/readiness_save.c - save and load of a readiness tracker's dynamic
 * state, for the model checker (tools/check) and the tests; the encoding is
 * described in readiness_int.h.  All integers are little-endian.
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
#include "readiness_int.h"
#include "readiness_priv.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "xfer/core.h" /* XFER_RESV_NONE */

#define SAVE_MAGIC 0x31445258u /* "XRD1" */

typedef struct wbuf {
    uint8_t *p;
    size_t len, at;
} wbuf;

static void put(wbuf *w, uint64_t v, unsigned nbytes)
{
    for (unsigned i = 0; i < nbytes; i++, w->at++)
        if (w->at < w->len)
            w->p[w->at] = (uint8_t)(v >> (8 * i));
}

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

static void put_record(wbuf *w, const xfer_readiness *r, uint32_t slot)
{
    const xfer_readiness_rec *rec = &r->recs[slot];
    const uint64_t *resv = xfer_readiness_resv_of(r, slot);
    put(w, rec->id, 8);
    put(w, rec->attempt, 4);
    put(w, rec->state, 1);
    put(w, (uint32_t)rec->deferred, 4);
    put(w, rec->ready, 8);
    put(w, rec->take_ok, 8);
    put(w, rec->take_fail, 8);
    put(w, rec->unsure, 8);
    put(w, rec->deadline_ns, 8);
    for (uint16_t k = 0; k < r->cfg.nshards; k++)
        put(w, resv[k], 8);
}

/* Live records in id order. */
static void put_records(wbuf *w, const xfer_readiness *r)
{
    uint32_t n = 0;
    for (uint32_t s = 0; s < r->cfg.max_records; s++)
        if (r->recs[s].id)
            r->scratch[n++] = (xfer_readiness_sortkey){r->recs[s].id, 0, s};
    qsort(r->scratch, n, sizeof *r->scratch, cmp_key);
    for (uint32_t i = 0; i < n; i++)
        put_record(w, r, r->scratch[i].slot);
}

/* Armed deadlines in the order they fire (deadline, then set order). */
static void put_heap(wbuf *w, const xfer_readiness *r)
{
    const xfer_heap *h = &r->deadlines;
    for (uint32_t i = 0; i < h->n; i++) {
        uint32_t s = h->heap[i];
        r->scratch[i] = (xfer_readiness_sortkey){h->key[s], h->tie[s], s};
    }
    qsort(r->scratch, h->n, sizeof *r->scratch, cmp_key);
    for (uint32_t i = 0; i < h->n; i++)
        put(w, r->recs[r->scratch[i].slot].id, 8);
}

static void put_tomb(void *ud, const xfer_tomb_entry *t)
{
    wbuf *w = ud;
    put(w, t->id, 8);
    put(w, t->expires_ns, 8);
    put(w, t->attempt, 4);
    put(w, t->reason, 1);
}

static void put_action(wbuf *w, const xfer_ready_action *a)
{
    put(w, a->kind, 1);
    put(w, a->shard, 2);
    put(w, a->attempt, 4);
    put(w, a->id, 8);
    put(w, a->resv_id, 8);
    put(w, (uint32_t)a->reason, 4);
    put(w, a->missing, 8);
}

size_t xfer_readiness_save(const xfer_readiness *r, uint8_t *buf, size_t len)
{
    if (!r)
        return 0;
    wbuf w = {buf, buf ? len : 0, 0};
    const xfer_readiness_config *c = &r->cfg;
    put(&w, SAVE_MAGIC, 4);
    put(&w, c->nshards, 2);
    put(&w, c->max_records, 4);
    put(&w, c->max_tombstones, 4);
    put(&w, c->deadline_ns, 8);
    put(&w, c->tombstone_ttl_ns, 8);
    put(&w, r->live.n, 4);
    put(&w, r->deadlines.n, 4);
    put(&w, xfer_tomb_live(&r->tombs), 4);
    put(&w, r->nacts, 4);
    put_records(&w, r);
    put_heap(&w, r);
    xfer_tomb_foreach(&r->tombs, put_tomb, &w);
    for (size_t i = 0; i < r->nacts; i++)
        put_action(&w, &r->acts[i]);
    return w.at;
}

typedef struct rbuf {
    const uint8_t *p;
    size_t len, at;
    bool ok;
} rbuf;

static uint64_t get(rbuf *b, unsigned nbytes)
{
    uint64_t v = 0;
    if (!b->ok || b->len - b->at < nbytes) {
        b->ok = false;
        return 0;
    }
    for (unsigned i = 0; i < nbytes; i++)
        v |= (uint64_t)b->p[b->at + i] << (8 * i);
    b->at += nbytes;
    return v;
}

static void skip(rbuf *b, size_t nbytes)
{
    if (!b->ok || b->len - b->at < nbytes)
        b->ok = false;
    else
        b->at += nbytes;
}

/* The counts that follow the configuration in the header. */
typedef struct hdr {
    uint32_t nrec, nheap, ntomb, nacts;
    size_t rec_at; /* where the records start */
} hdr;

static bool get_header(rbuf *b, const xfer_readiness *r, hdr *h)
{
    const xfer_readiness_config *c = &r->cfg;
    bool same = get(b, 4) == SAVE_MAGIC && get(b, 2) == c->nshards &&
                get(b, 4) == c->max_records &&
                get(b, 4) == c->max_tombstones &&
                get(b, 8) == c->deadline_ns &&
                get(b, 8) == c->tombstone_ttl_ns;
    h->nrec = (uint32_t)get(b, 4);
    h->nheap = (uint32_t)get(b, 4);
    h->ntomb = (uint32_t)get(b, 4);
    h->nacts = (uint32_t)get(b, 4);
    h->rec_at = b->at;
    return b->ok && same && h->nrec <= c->max_records && h->nheap <= h->nrec &&
           (uint64_t)h->ntomb + h->nrec <= c->max_tombstones &&
           h->nacts <= r->cap;
}

static bool deferred_ok(int32_t d)
{
    return d == 0 || d == XFER_ERR_CANCELLED || d == XFER_ERR_EXPIRED ||
           d == XFER_ERR_TIMEOUT;
}

/* Read one record and check it could have been made by the handlers. */
static bool get_record(rbuf *b, const xfer_readiness *r,
                       xfer_readiness_rec *rec, uint64_t *resv)
{
    rec->id = get(b, 8);
    rec->attempt = (uint32_t)get(b, 4);
    rec->state = (uint8_t)get(b, 1);
    rec->deferred = (int32_t)(uint32_t)get(b, 4);
    rec->ready = get(b, 8);
    rec->take_ok = get(b, 8);
    rec->take_fail = get(b, 8);
    rec->unsure = get(b, 8);
    rec->deadline_ns = get(b, 8);
    bool ok = b->ok && rec->id && rec->attempt && rec->ready &&
              !(rec->ready & ~r->full) && !(rec->unsure & ~rec->take_fail) &&
              deferred_ok(rec->deferred);
    for (uint16_t k = 0; k < r->cfg.nshards; k++) {
        resv[k] = get(b, 8);
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
static bool check_records(rbuf *b, const xfer_readiness *r, const hdr *h)
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
static bool check_heap(rbuf *b, const xfer_readiness *r, const hdr *h)
{
    uint64_t prev = 0;
    for (uint32_t i = 0; i < h->nheap; i++) {
        xfer_readiness_sortkey *k = find_saved(r, h, get(b, 8));
        if (!b->ok || !k || (k->slot & ARMED) || k->b < prev)
            return false;
        prev = k->b;
        k->slot |= ARMED;
    }
    for (uint32_t i = 0; i < h->nrec; i++)
        if (r->scratch[i].slot == NEEDS_DEADLINE)
            return false;
    return true;
}

static bool check_rest(rbuf *b, const xfer_readiness *r, const hdr *h)
{
    uint64_t prev = 0;
    for (uint32_t i = 0; i < h->ntomb; i++) {
        uint64_t id = get(b, 8), exp = get(b, 8);
        skip(b, 4);
        uint8_t reason = (uint8_t)get(b, 1);
        if (!b->ok || !id || exp < prev || exp < r->cfg.tombstone_ttl_ns ||
            find_saved(r, h, id) ||
            (reason != XFER_READY_STATE_AVAILABLE && reason != XFER_READY_STATE_UNAVAILABLE))
            return false;
        prev = exp;
    }
    for (uint32_t i = 0; i < h->nacts; i++) {
        if (get(b, 1) >= XFER_READY_ACT_COUNT_)
            return false;
        skip(b, 2 + 4 + 8 + 8 + 4 + 8);
    }
    return b->ok && b->at == b->len;
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
    xfer_tomb_expire(&r->tombs, UINT64_MAX, 0, NULL, NULL);
    r->tombs.head = 0;
    r->tombs.held = 0;
    r->tombs.last_now = 0;
    r->nacts = 0;
}

/* Second pass over a checked buffer: records take slots 0..nrec-1. */
static void apply_records(rbuf *b, xfer_readiness *r, const hdr *h)
{
    for (uint32_t i = 0; i < h->nrec; i++) {
        get_record(b, r, &r->recs[i], xfer_readiness_resv_of(r, i));
        xfer_idmap_put(&r->live, r->recs[i].id, i);
    }
    r->nfree = r->cfg.max_records - h->nrec;
    for (uint32_t i = 0; i < h->nheap; i++) {
        uint32_t slot = 0;
        xfer_idmap_get(&r->live, get(b, 8), &slot);
        xfer_heap_set(&r->deadlines, slot, r->recs[slot].deadline_ns);
    }
}

static bool apply_rest(rbuf *b, xfer_readiness *r, const hdr *h)
{
    for (uint32_t i = 0; i < h->ntomb; i++) {
        uint64_t id = get(b, 8), exp = get(b, 8);
        uint32_t attempt = (uint32_t)get(b, 4);
        uint8_t reason = (uint8_t)get(b, 1);
        if (xfer_tomb_find(&r->tombs, id))
            return false;
        xfer_tomb_insert(&r->tombs, exp - r->cfg.tombstone_ttl_ns, id,
                         attempt, reason);
    }
    r->tombs.held = h->nrec;
    for (uint32_t i = 0; i < h->nacts; i++) {
        xfer_ready_action *a = &r->acts[r->nacts++];
        memset(a, 0, sizeof *a);
        a->kind = (uint8_t)get(b, 1);
        a->shard = (uint16_t)get(b, 2);
        a->attempt = (uint32_t)get(b, 4);
        a->id = get(b, 8);
        a->resv_id = get(b, 8);
        a->reason = (int32_t)(uint32_t)get(b, 4);
        a->missing = get(b, 8);
    }
    return true;
}

int xfer_readiness_load(xfer_readiness *r, const uint8_t *buf, size_t len)
{
    if (!r || (!buf && len))
        return XFER_ERR_INVALID_ARG;
    rbuf b = {buf, len, 0, true};
    hdr h;
    if (!get_header(&b, r, &h) || !check_records(&b, r, &h) ||
        !check_heap(&b, r, &h) || !check_rest(&b, r, &h))
        return XFER_ERR_FORMAT;
    reset(r);
    b = (rbuf){buf, len, h.rec_at, true};
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
