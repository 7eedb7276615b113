/*
 * fsm/shard.c - one consumer shard: the reservation machine of fsm.h over a
 * pool, with leases and tombstones.  Its save and load for the model checker
 * live in shard_save.c; the struct and the helpers both files use are in
 * shard_priv.h.
 *
 * Every public call becomes one event on the state of its id (the live
 * record's state, else the tombstone's reason, else NONE) and goes through
 * dispatch(), which counts the cell, runs its handler, checks any state
 * change against XFER_RESV_EDGES and emits one trace record.  Handlers are
 * small and named after the handler tokens of XFER_RESV_TABLE.
 *
 * What must stay true:
 *  - I4: a region is freed only when its record has no write in flight; a
 *    cancel or lease expiry during a write parks the record in
 *    CANCEL_PENDING / EXPIRE_PENDING and the last write_end frees it.
 *  - TAKEN memory is the consumer's: no lease runs in TAKEN and a cancel is
 *    refused; only release frees it.
 *  - A commit needs the whole region written: the written ranges (the
 *    prefix `covered` and at most XFER_SHARD_MAX_FRAGMENTS fragments past
 *    it) only grow by a write that ended ok while it ran alone, wherever
 *    it landed, and are cut from a failed write's offset (to nothing when
 *    writes ran side by side), so covered == len means every byte came
 *    from a completed write of this reservation.  A write that would make
 *    more fragments is refused at its begin (the set stays bounded).
 *  - Owners (shard.h): a call made for an owner that finds another owner's
 *    record is refused with XFER_ERR_PERM before dispatch, like a stray
 *    write_end (the consumer's cancel excepted); a tombstone the caller may
 *    not see is looked through (lookup); use[] counts each owner's live
 *    records and pool bytes, the tombstone table its tombstone slots (a
 *    tombstone the consumer's release or cancel made is nobody's: owner
 *    0, GLOBAL, on no producer's quota).
 *  - I14: a call carrying another attempt or another reservation id than the
 *    record's is refused with XFER_ERR_STALE before anything is touched.
 *  - Peer input never reaches an ILLEGAL cell: write_end is checked against
 *    the writes in flight before dispatch; leases and tombstone expiries are
 *    generated here only for states whose cells allow them.
 *  - Every live record holds a tombstone slot (xfer_tomb_hold), so ending it
 *    never fails and never evicts a young tombstone (I6, I11).
 *  - ev_reserved counts records in CANCEL_PENDING / EXPIRE_PENDING and in
 *    the three *_INVAL states, each of which will append one event when its
 *    last write ends or its invalidation completes; nev + ev_reserved <=
 *    ev_cap always, so an append never overflows or allocates.
 *  - One-sided shards (cfg.one_sided): a region whose rkey may still let a
 *    write in is never freed or made READY.  Every way out of RESERVED
 *    (commit, cancel, lease) and out of the deferred states (the last
 *    write end) goes through COMMIT_INVAL / CANCEL_INVAL / EXPIRE_INVAL,
 *    which asks the driver for one invalidation (the invals list, one
 *    entry per record, room guaranteed by dropping entries that are no
 *    longer waited for), and only INVALIDATED frees or publishes.  A
 *    two-sided shard never enters those states, so its behaviour, its
 *    traces and its saves are those it had before they existed.
 *  - Leases live in a deadline heap; nothing depends on slot numbers or
 *    pointers (foreach and save order by id), so a shard loaded from a save
 *    behaves exactly like the one saved (I10).  Whatever is added to the
 *    shard's dynamic state must be added to shard_save.c's encoding too.
 *
 * One thread drives a shard.  Time should not run backwards; leases use the
 * `now` given, the tombstone table clamps its own clock.
 */
#include "shard_priv.h"

#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "step.h"
#include "util.h"
#include "xfer/core.h"

/* The bytes each version of xfer_shard_config and _stats holds (util.h). */
/* Version 2 added one_sided in what was padding of version 1, so both
 * versions have one size; version 1 reads one_sided as false. */
/* Version 3 added max_hold_ms in version 1's tail padding: one size. */
static const size_t config_lens[] = {sizeof(xfer_shard_config),
                                     sizeof(xfer_shard_config),
                                     sizeof(xfer_shard_config)};
_Static_assert(offsetof(xfer_shard_config, max_hold_ms) ==
                   offsetof(xfer_shard_config, owner_max_tombstones) +
                       sizeof(uint32_t) &&
               sizeof(xfer_shard_config) ==
                   (offsetof(xfer_shard_config, owner_max_tombstones) +
                    sizeof(uint32_t) + _Alignof(uint64_t) - 1) /
                       _Alignof(uint64_t) * _Alignof(uint64_t),
               "max_hold_ms must sit in version 2's tail padding");
_Static_assert(offsetof(xfer_shard_config, one_sided) ==
                       offsetof(xfer_shard_config, shard_index) +
                           sizeof(uint16_t) &&
                   offsetof(xfer_shard_config, pool_memory) ==
                       (offsetof(xfer_shard_config, shard_index) +
                        sizeof(uint16_t) + _Alignof(void *) - 1) /
                           _Alignof(void *) * _Alignof(void *),
               "one_sided must sit in version 1's padding");
static const size_t stats_lens[] = {offsetof(xfer_shard_stats, refreshes),
                                    sizeof(xfer_shard_stats)};

#define MAX_RECORDS (1u << 24)
#define MAX_TOMBS (1u << 30)
#define MAX_TTL (1ull << 62) /* now + ttl never wraps in practice */
#define EVENT_SLACK 16u
#define RNG_SEED 0x7866657273686172ull /* "xfershar" */

/* One event on one id (a step of the reservation machine), with what the
 * call carried and what it returns. */
typedef struct resv_step {
    xfer_step step; /* now, event, from, to (step.h) */
    uint64_t id, resv_id, off; /* off: write offset or region addr */
    uint32_t attempt, len;
    uint16_t owner; /* who the call is made for; 0: nobody in particular */
    bool has_attempt, has_resv, has_region;
    bool consumer;  /* the consumer's cancel (attempt 0) */
    xfer_shard_resv *rec; /* the live record, or NULL */
    uint32_t slot;
    xfer_resv_info *info;
    uint8_t **dst;
    const uint8_t **data;
    uint32_t *data_len;
    uint64_t want_ns;     /* REFRESH: the most the owner asks for */
    uint64_t *granted_ns; /* REFRESH: what the lease now runs for */
    const void *src; /* EAGER: the len bytes to copy in */
} resv_step;

/* A step of `event` at now on the reservation machine; lookup() finds the
 * state it starts from. */
static xfer_step step_of(uint64_t now, unsigned event)
{
    return xfer_step_make(XFER_MACHINE_RESERVATION, now, XFER_RESV_STATE_NONE,
                          event);
}

/* ---------------------------------------------------------------------- */
/* Small helpers                                                           */
/* ---------------------------------------------------------------------- */

/* The call names another attempt or reservation than the record's. */
static bool mismatch(const resv_step *o)
{
    return o->rec && ((o->has_attempt && o->attempt != o->rec->attempt) ||
                      (o->has_resv && o->resv_id != o->rec->resv_id));
}

static bool ev_room(const xfer_shard *s)
{
    return s->nev + s->ev_reserved < s->ev_cap;
}

/* Ask the driver to invalidate r's rkey.  Entries no record waits for
 * any more are dropped first when the list is full, so there is always
 * room: every live record in an *_INVAL state holds at most one entry and
 * r holds none yet. */
static void ask_invalidation(xfer_shard *s, const xfer_shard_resv *r)
{
    if (s->ninval == s->cfg.max_reservations) {
        uint32_t k = 0;
        for (uint32_t i = 0; i < s->ninval; i++) {
            uint32_t slot;
            const xfer_shard_inval *q = &s->invals[i];
            if (xfer_idmap_get(&s->ids, q->id, &slot) &&
                s->recs[slot].resv_id == q->resv_id &&
                xfer_shard_is_inval(s->recs[slot].state))
                s->invals[k++] = *q;
        }
        s->ninval = k;
    }
    assert(s->ninval < s->cfg.max_reservations);
    s->invals[s->ninval++] = (xfer_shard_inval){
        .id = r->id, .resv_id = r->resv_id, .attempt = r->attempt};
}

/* A record that will only be freed: what was written no longer matters,
 * so two such records save alike (canonical, fsm/save.h). */
static void forget_writes(xfer_shard_resv *r)
{
    r->covered = r->woff = r->wlen = 0;
    r->nfrag = 0;
    memset(r->frag, 0, sizeof r->frag);
    r->flags &= (uint8_t)~XFER_SHARD_F_MULTI;
}

/* One-sided: r leaves RESERVED (or its deferred state) for `to`, one of
 * the *_INVAL states; its event comes when the invalidation completes.
 * `reserve` is false when the record already holds an event slot (a
 * deferred cancel or expiry). */
static void start_invalidation(xfer_shard *s, resv_step *o, uint8_t to,
                               bool reserve)
{
    if (reserve)
        s->ev_reserved++;
    if (to != XFER_RESV_STATE_COMMIT_INVAL)
        forget_writes(o->rec);
    o->rec->state = to;
    o->step.to = to;
    ask_invalidation(s, o->rec);
}

static void push_event(xfer_shard *s, uint8_t kind, const xfer_shard_resv *r)
{
    assert(s->nev < s->ev_cap);
    s->evs[s->nev++] = (xfer_shard_event){.kind = kind,
                                          .shard = s->cfg.shard_index,
                                          .attempt = r->attempt,
                                          .id = r->id,
                                          .resv_id = r->resv_id,
                                          .len = r->len};
}

static uint64_t draw_resv_id(xfer_shard *s)
{
    uint64_t v;
    if (s->cfg.rng.next) {
        v = s->cfg.rng.next(s->cfg.rng.ud);
    } else {
        v = xfer_util_mix64(s->rng_state);
        s->rng_state += 0x9e3779b97f4a7c15ull;
    }
    return v ? v : 1; /* 0 is XFER_RESV_NONE */
}

static uint64_t lease_deadline(const xfer_shard *s, uint64_t now)
{
    uint64_t ttl = s->cfg.lease_ttl_ns;
    return now > UINT64_MAX - ttl ? UINT64_MAX : now + ttl;
}

/* Find the state of o->id and fill what the call did not carry. */
static void lookup(xfer_shard *s, resv_step *o)
{
    uint32_t slot;
    o->rec = NULL;
    if (xfer_idmap_get(&s->ids, o->id, &slot)) {
        o->rec = &s->recs[slot];
        o->slot = slot;
        o->step.from = o->rec->state;
        if (!o->has_attempt)
            o->attempt = o->rec->attempt;
        if (!o->has_region) {
            o->off = o->rec->off;
            o->len = o->rec->len;
        }
        return;
    }
    const xfer_tomb_entry *e = xfer_tomb_find(&s->tombs, o->id);
    if (e && !xfer_tomb_visible(e, o->consumer ? 0 : o->owner))
        e = NULL; /* another owner's: it does not block this one */
    o->step.from = e ? e->reason : XFER_RESV_STATE_NONE;
    if (e && !o->has_attempt)
        o->attempt = e->attempt;
}

/* The call is made for an owner, and the record is another owner's. */
static bool foreign(const resv_step *o)
{
    return o->owner && o->rec && !o->consumer && o->rec->owner != o->owner;
}

/* Whom the tombstone of a record ended now blocks: everyone when the
 * consumer ended it (its cancel, a release), else its owner. */
static uint8_t tomb_flags(const resv_step *o, uint8_t reason)
{
    const xfer_shard_resv *r = o->rec;
    bool consumer = reason == XFER_RESV_STATE_DONE ||
                    (reason == XFER_RESV_STATE_CANCELLED &&
                     (o->consumer || (r->flags & XFER_SHARD_F_CONSUMER)));
    return consumer ? XFER_TOMB_GLOBAL : 0;
}

/* End a live record: free its region, stop its lease, tombstone it with
 * `reason`, and emit `kind` unless it is negative. */
static void end_record(xfer_shard *s, resv_step *o, uint8_t reason, int kind)
{
    xfer_shard_resv *r = o->rec;
    assert(r && r->writes == 0 && r->copies == 0);
    if (kind >= 0)
        push_event(s, (uint8_t)kind, r);
    if (r->owner) {
        s->use[r->owner].live--;
        s->use[r->owner].bytes -= xfer_pool_round(&s->pool, r->len);
    }
    xfer_pool_free(&s->pool, r->off, r->len);
    xfer_heap_remove(&s->leases, o->slot);
    xfer_idmap_del(&s->ids, r->id);
    /* The consumer's end (a release, its cancel) leaves a tombstone of
     * everyone's that no producer's quota pays for. */
    uint8_t flags = tomb_flags(o, reason);
    uint16_t tomb_owner = r->owner;
    if ((flags & XFER_TOMB_GLOBAL) && tomb_owner) {
        xfer_tomb_uncharge_hold(&s->tombs, tomb_owner);
        tomb_owner = 0;
    }
    xfer_tomb_insert_held_by(&s->tombs, o->step.now_ns, r->id, r->attempt,
                             reason, tomb_owner, flags);
    memset(r, 0, sizeof *r);
    s->free_slots[s->nfree++] = o->slot;
    s->live--;
    o->rec = NULL;
    o->step.to = reason;
}

/* ---------------------------------------------------------------------- */
/* Handlers, one per handler token of XFER_RESV_TABLE                      */
/* ---------------------------------------------------------------------- */

typedef int (*handler_fn)(xfer_shard *s, resv_step *o);

static void give_info(resv_step *o, const xfer_shard_resv *r)
{
    *o->info = (xfer_resv_info){.resv_id = r->resv_id, .addr = r->off,
                                .len = r->len};
    o->resv_id = r->resv_id;
    o->off = r->off;
}

/* The owner of the call may take one more record of len bytes. */
static bool within_quota(const xfer_shard *s, const resv_step *o)
{
    if (!o->owner)
        return true;
    const xfer_shard_use *u = &s->use[o->owner];
    uint64_t size = xfer_pool_round(&s->pool, o->len);
    return u->live < s->cfg.owner_max_reservations &&
           u->bytes <= s->cfg.owner_max_bytes &&
           size <= s->cfg.owner_max_bytes - u->bytes;
}

/* NONE + RESERVE: a tombstone hold, a region and a lease, or nothing. */
static int h_reserve(xfer_shard *s, resv_step *o)
{
    uint64_t off;
    /* A region larger than the pool never fits (NO_SPACE, whoever asks);
     * one that could is refused at a cap or the owner's quota (BUSY). */
    if (xfer_pool_round(&s->pool, o->len) > s->pool.size)
        return XFER_ERR_NO_SPACE;
    if (s->live >= s->cfg.max_reservations || !within_quota(s, o) ||
        xfer_tomb_hold_by(&s->tombs, o->step.now_ns, o->owner) != 0)
        return XFER_ERR_BUSY;
    if (xfer_pool_alloc(&s->pool, o->len, &off) != 0) {
        xfer_tomb_unhold_by(&s->tombs, o->owner);
        return XFER_ERR_NO_SPACE;
    }
    uint32_t slot = s->free_slots[--s->nfree];
    xfer_shard_resv *r = &s->recs[slot];
    *r = (xfer_shard_resv){.id = o->id, .resv_id = draw_resv_id(s),
                           .off = off, .created_ns = o->step.now_ns,
                           .attempt = o->attempt, .len = o->len,
                           .owner = o->owner,
                           .state = XFER_RESV_STATE_RESERVED};
    if (r->owner) {
        s->use[r->owner].live++;
        s->use[r->owner].bytes += xfer_pool_round(&s->pool, r->len);
    }
    xfer_idmap_put(&s->ids, r->id, slot);
    xfer_heap_set(&s->leases, slot, lease_deadline(s, o->step.now_ns));
    s->live++;
    s->st.reserves++;
    o->rec = r;
    o->slot = slot;
    o->step.to = XFER_RESV_STATE_RESERVED;
    give_info(o, r);
    return 0;
}

/* NONE + EAGER: reserve, copy and commit in one step, or refuse whole
 * with nothing held (the refusal of a reserve: no tombstone is left).  A
 * one-sided shard never allows it: its commit needs an invalidation, so
 * the data could not be READY in the same step. */
static int h_eager(xfer_shard *s, resv_step *o)
{
    if (s->cfg.one_sided)
        return XFER_ERR_NOT_SUPPORTED;
    if (!ev_room(s))
        return XFER_ERR_BUSY;
    int rc = h_reserve(s, o);
    if (rc)
        return rc;
    xfer_shard_resv *r = o->rec;
    if (r->len)
        memcpy(s->mem + r->off, o->src, r->len);
    r->covered = r->len;
    r->state = XFER_RESV_STATE_READY;
    o->step.to = XFER_RESV_STATE_READY;
    push_event(s, XFER_SHARD_EV_READY, r);
    s->st.writes++;
    s->st.commits++;
    return 0;
}

/* Refusals: the error says why (stale, unknown, cancelled, expired, or not
 * in a state that allows it). */
static int h_refuse(xfer_shard *s, resv_step *o)
{
    if (mismatch(o))
        return XFER_ERR_STALE;
    /* A reserve (or an eager op, which starts with one) of an id held,
     * or tombstoned in any way. */
    if (o->step.event == XFER_RESV_EVENT_RESERVE ||
        o->step.event == XFER_RESV_EVENT_EAGER)
        return xfer_shard_is_tomb(o->step.from) ? XFER_ERR_CANCELLED
                                                : XFER_ERR_STATE;
    switch ((xfer_resv_state)o->step.from) {
    case XFER_RESV_STATE_NONE:
        return XFER_ERR_NOT_FOUND;
    case XFER_RESV_STATE_CANCEL_PENDING:
    case XFER_RESV_STATE_CANCEL_INVAL:
    case XFER_RESV_STATE_CANCELLED:
        return XFER_ERR_CANCELLED;
    case XFER_RESV_STATE_EXPIRE_PENDING:
    case XFER_RESV_STATE_EXPIRE_INVAL:
    case XFER_RESV_STATE_EXPIRED:
        return XFER_ERR_EXPIRED;
    case XFER_RESV_STATE_RESERVED:
    case XFER_RESV_STATE_WRITING:
    case XFER_RESV_STATE_READY:
    case XFER_RESV_STATE_TAKEN:
    case XFER_RESV_STATE_DONE:
    case XFER_RESV_STATE_COMMIT_INVAL:
    case XFER_RESV_STATE_COUNT_:
        break;
    }
    return XFER_ERR_STATE;
}

/* NONE + CANCEL: a pre-emptive (id, attempt) tombstone, so a later reserve
 * for the id is refused (I7). */
static int h_preempt(xfer_shard *s, resv_step *o)
{
    if (xfer_tomb_insert_by(&s->tombs, o->step.now_ns, o->id, o->attempt,
                            XFER_RESV_STATE_CANCELLED, o->owner,
                            o->consumer ? XFER_TOMB_GLOBAL
                                        : XFER_TOMB_PREEMPT) != 0)
        return XFER_ERR_BUSY;
    s->st.cancels++;
    o->step.to = XFER_RESV_STATE_CANCELLED;
    return 0;
}

/* RESERVED/WRITING + RESERVE: the same request again gets the same answer;
 * another attempt, or another length, is not the same request. */
static int h_reserve_again(xfer_shard *s, resv_step *o)
{
    if (mismatch(o))
        return XFER_ERR_STALE;
    if (o->len != o->rec->len)
        return XFER_ERR_INVALID_ARG;
    give_info(o, o->rec);
    return 0;
}

/* A reservation's written ranges, the prefix first when there is one:
 * sorted, disjoint, none touching the next.  Room for what one add or
 * truncation can make of the prefix and XFER_SHARD_MAX_FRAGMENTS
 * fragments. */
typedef struct span_set {
    uint32_t n;
    uint32_t v[XFER_SHARD_MAX_FRAGMENTS + 2][2];
} span_set;

static void spans_of(const xfer_shard_resv *r, span_set *t)
{
    t->n = 0;
    if (r->covered) {
        t->v[0][0] = 0;
        t->v[0][1] = r->covered;
        t->n = 1;
    }
    for (uint32_t i = 0; i < r->nfrag; i++) {
        t->v[t->n][0] = r->frag[i][0];
        t->v[t->n][1] = r->frag[i][1];
        t->n++;
    }
}

/* Add [a, b) to t, merging what it overlaps or touches. */
static void spans_add(span_set *t, uint32_t a, uint32_t b)
{
    span_set u = {0};
    bool placed = false;
    if (a >= b)
        return;
    for (uint32_t i = 0; i < t->n; i++) {
        uint32_t x = t->v[i][0], y = t->v[i][1];
        if (y < a) { /* wholly before, not touching */
            u.v[u.n][0] = x;
            u.v[u.n++][1] = y;
        } else if (x > b) { /* wholly after */
            if (!placed) {
                u.v[u.n][0] = a;
                u.v[u.n++][1] = b;
                placed = true;
            }
            u.v[u.n][0] = x;
            u.v[u.n++][1] = y;
        } else { /* overlaps or touches: grow [a, b) */
            a = x < a ? x : a;
            b = y > b ? y : b;
        }
    }
    if (!placed) {
        u.v[u.n][0] = a;
        u.v[u.n++][1] = b;
    }
    *t = u;
}

/* Drop everything from a on (never adds a range). */
static void spans_cut(span_set *t, uint32_t a)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < t->n && t->v[i][0] < a; i++, k++)
        if (t->v[i][1] > a)
            t->v[i][1] = a;
    t->n = k;
}

/* The fragments t would leave past the prefix. */
static uint32_t spans_frags(const span_set *t)
{
    return t->n && t->v[0][0] == 0 ? t->n - 1 : t->n;
}

/* Store t (within the cap) as r's prefix and fragments. */
static void spans_put(xfer_shard_resv *r, const span_set *t)
{
    uint32_t i = 0;
    assert(spans_frags(t) <= XFER_SHARD_MAX_FRAGMENTS);
    r->covered = 0;
    if (t->n && t->v[0][0] == 0)
        r->covered = t->v[i++][1];
    r->nfrag = 0;
    memset(r->frag, 0, sizeof r->frag);
    for (; i < t->n; i++, r->nfrag++) {
        r->frag[r->nfrag][0] = t->v[i][0];
        r->frag[r->nfrag][1] = t->v[i][1];
    }
}

/* A write of [off, off + len) starting alone on r would fit the cap when
 * it ends ok (a failed one only cuts). */
static bool spans_room(const xfer_shard_resv *r, uint32_t off, uint32_t len)
{
    span_set t;
    spans_of(r, &t);
    spans_add(&t, off, off + len);
    return spans_frags(&t) <= XFER_SHARD_MAX_FRAGMENTS;
}

static int h_write_begin(xfer_shard *s, resv_step *o)
{
    xfer_shard_resv *r = o->rec;
    if (mismatch(o))
        return XFER_ERR_STALE;
    if (o->off > r->len || o->len > r->len - o->off)
        return XFER_ERR_BOUNDS;
    if (r->writes == UINT32_MAX)
        return XFER_ERR_BUSY;
    /* the written ranges stay bounded: refuse the write, not the shard */
    if (r->writes == 0 && !spans_room(r, (uint32_t)o->off, o->len))
        return XFER_ERR_BUSY;
    if (r->writes == 0) {
        r->woff = (uint32_t)o->off; /* within len, so within 32 bits */
        r->wlen = o->len;
    } else {
        r->flags |= XFER_SHARD_F_MULTI; /* side by side: no credit */
        r->woff = r->wlen = 0;
    }
    r->writes++;
    r->state = XFER_RESV_STATE_WRITING;
    o->step.to = XFER_RESV_STATE_WRITING;
    *o->dst = s->mem + r->off + o->off;
    s->st.writes++;
    return 0;
}

static int h_commit(xfer_shard *s, resv_step *o)
{
    if (mismatch(o))
        return XFER_ERR_STALE;
    /* A one-sided shard never sees the RDMA writes that fill a region, so
     * it cannot check what was written: the commit is the producer's word
     * (the region's registration is this reservation's alone). */
    if (!s->cfg.one_sided && o->rec->covered < o->rec->len)
        return XFER_ERR_INCOMPLETE;
    if (!ev_room(s))
        return XFER_ERR_BUSY;
    if (s->cfg.one_sided) {
        o->rec->covered = o->rec->len; /* as a committed record's is */
        o->rec->nfrag = 0;
        memset(o->rec->frag, 0, sizeof o->rec->frag);
        start_invalidation(s, o, XFER_RESV_STATE_COMMIT_INVAL, true);
        s->st.commits++;
        return 0;
    }
    o->rec->state = XFER_RESV_STATE_READY;
    o->step.to = XFER_RESV_STATE_READY;
    push_event(s, XFER_SHARD_EV_READY, o->rec);
    s->st.commits++;
    return 0;
}

/* RESERVED/READY + CANCEL: nothing can land, free now. */
static int h_free_cancelled(xfer_shard *s, resv_step *o)
{
    if (mismatch(o))
        return XFER_ERR_STALE;
    if (!ev_room(s))
        return XFER_ERR_BUSY;
    if (s->cfg.one_sided && o->step.from == XFER_RESV_STATE_RESERVED) {
        start_invalidation(s, o, XFER_RESV_STATE_CANCEL_INVAL, true);
        if (o->consumer) /* its tombstone will block everyone */
            o->rec->flags |= XFER_SHARD_F_CONSUMER;
    } else
        end_record(s, o, XFER_RESV_STATE_CANCELLED, XFER_SHARD_EV_CANCELLED);
    s->st.cancels++;
    return 0;
}

/* RESERVED/READY + LEASE_EXPIRE (the caller made room for the event). */
static int h_free_expired(xfer_shard *s, resv_step *o)
{
    if (s->cfg.one_sided && o->step.from == XFER_RESV_STATE_RESERVED)
        start_invalidation(s, o, XFER_RESV_STATE_EXPIRE_INVAL, true);
    else
        end_record(s, o, XFER_RESV_STATE_EXPIRED, XFER_SHARD_EV_EXPIRED);
    s->st.expiries++;
    return 0;
}

/* What a write that ends does to the written ranges (see the top). */
static void cover(xfer_shard_resv *r, bool ok)
{
    bool alone = !(r->flags & XFER_SHARD_F_MULTI);
    span_set t;
    spans_of(r, &t);
    if (!ok)
        spans_cut(&t, alone ? r->woff : 0);
    else if (alone)
        spans_add(&t, r->woff, r->woff + r->wlen);
    spans_put(r, &t);
}

static int h_write_end(xfer_shard *s, resv_step *o)
{
    xfer_shard_resv *r = o->rec;
    assert(r->writes > 0);
    cover(r, o->step.event == XFER_RESV_EVENT_WRITE_END_OK);
    if (--r->writes == 0) {
        r->flags &= (uint8_t)~XFER_SHARD_F_MULTI;
        r->woff = r->wlen = 0;
        r->state = XFER_RESV_STATE_RESERVED;
        o->step.to = XFER_RESV_STATE_RESERVED;
    }
    return 0;
}

/* WRITING + CANCEL: a write may still land, so free when the last one
 * ends; keep an event slot for that moment. */
static int h_defer_cancel(xfer_shard *s, resv_step *o)
{
    if (mismatch(o))
        return XFER_ERR_STALE;
    if (!ev_room(s))
        return XFER_ERR_BUSY;
    s->ev_reserved++;
    forget_writes(o->rec);
    if (o->consumer)
        o->rec->flags |= XFER_SHARD_F_CONSUMER;
    o->rec->state = XFER_RESV_STATE_CANCEL_PENDING;
    o->step.to = XFER_RESV_STATE_CANCEL_PENDING;
    s->st.cancels++;
    return 0;
}

static int h_defer_expire(xfer_shard *s, resv_step *o)
{
    s->ev_reserved++;
    forget_writes(o->rec);
    o->rec->state = XFER_RESV_STATE_EXPIRE_PENDING;
    o->step.to = XFER_RESV_STATE_EXPIRE_PENDING;
    s->st.expiries++;
    return 0;
}

/* A repeat of something already done (commit in READY/TAKEN, cancel of a
 * record already cancelled or expiring). */
static int h_ack(xfer_shard *s, resv_step *o)
{
    return mismatch(o) ? XFER_ERR_STALE : 0;
}

/* CANCELLED/EXPIRED + CANCEL: already ended.  The consumer's cancel makes
 * the tombstone block every reserve of the id, whoever made it. */
static int h_tomb_cancel(xfer_shard *s, resv_step *o)
{
    if (o->consumer)
        xfer_tomb_make_global(&s->tombs, o->id);
    return 0;
}

static int h_take(xfer_shard *s, resv_step *o)
{
    xfer_shard_resv *r = o->rec;
    if (mismatch(o))
        return XFER_ERR_STALE;
    xfer_heap_remove(&s->leases, o->slot); /* TAKEN has no lease */
    r->state = XFER_RESV_STATE_TAKEN;
    o->step.to = XFER_RESV_STATE_TAKEN;
    *o->data = s->mem + r->off;
    *o->data_len = r->len;
    s->st.takes++;
    return 0;
}

static int h_release(xfer_shard *s, resv_step *o)
{
    if (mismatch(o))
        return XFER_ERR_STALE;
    end_record(s, o, XFER_RESV_STATE_DONE, -1);
    s->st.releases++;
    return 0;
}

/* A write ends in CANCEL_PENDING / EXPIRE_PENDING: the last one frees. */
static int h_write_end_pending(xfer_shard *s, resv_step *o)
{
    xfer_shard_resv *r = o->rec;
    bool cancelled = o->step.from == XFER_RESV_STATE_CANCEL_PENDING;
    assert(r->writes > 0 && s->ev_reserved > 0);
    if (--r->writes == 0 && s->cfg.one_sided) {
        /* the rkey may still let a write in: invalidate first (the event
         * slot held since the deferral serves) */
        start_invalidation(s, o,
                           cancelled ? XFER_RESV_STATE_CANCEL_INVAL
                                     : XFER_RESV_STATE_EXPIRE_INVAL,
                           false);
    } else if (r->writes == 0) {
        s->ev_reserved--;
        end_record(s, o, cancelled ? XFER_RESV_STATE_CANCELLED : XFER_RESV_STATE_EXPIRED,
                   cancelled ? XFER_SHARD_EV_CANCELLED
                             : XFER_SHARD_EV_EXPIRED);
        s->st.deferred_frees++;
    }
    return cancelled ? XFER_ERR_CANCELLED : XFER_ERR_EXPIRED;
}

/* COMMIT_INVAL + CANCEL / LEASE_EXPIRE: the commit will not be
 * published; free once the invalidation already asked for completes (the
 * event slot held since the commit serves). */
static int h_defer_cancel_inval(xfer_shard *s, resv_step *o)
{
    if (mismatch(o))
        return XFER_ERR_STALE;
    forget_writes(o->rec);
    if (o->consumer) /* its tombstone will block everyone */
        o->rec->flags |= XFER_SHARD_F_CONSUMER;
    o->rec->state = XFER_RESV_STATE_CANCEL_INVAL;
    o->step.to = XFER_RESV_STATE_CANCEL_INVAL;
    s->st.cancels++;
    return 0;
}

static int h_defer_expire_inval(xfer_shard *s, resv_step *o)
{
    forget_writes(o->rec);
    o->rec->state = XFER_RESV_STATE_EXPIRE_INVAL;
    o->step.to = XFER_RESV_STATE_EXPIRE_INVAL;
    s->st.expiries++;
    return 0;
}

/* *_INVAL + INVALIDATED: no write can land any more.  The commit is
 * published (READY, its lease still running), or the region is freed. */
static int h_invalidated(xfer_shard *s, resv_step *o)
{
    xfer_shard_resv *r = o->rec;
    assert(s->ev_reserved > 0);
    s->ev_reserved--;
    if (o->step.from == XFER_RESV_STATE_COMMIT_INVAL) {
        r->state = XFER_RESV_STATE_READY;
        o->step.to = XFER_RESV_STATE_READY;
        push_event(s, XFER_SHARD_EV_READY, r);
        return 0;
    }
    bool cancelled = o->step.from == XFER_RESV_STATE_CANCEL_INVAL;
    assert(cancelled || o->step.from == XFER_RESV_STATE_EXPIRE_INVAL);
    end_record(s, o,
               cancelled ? XFER_RESV_STATE_CANCELLED : XFER_RESV_STATE_EXPIRED,
               cancelled ? XFER_SHARD_EV_CANCELLED : XFER_SHARD_EV_EXPIRED);
    s->st.deferred_frees++;
    return 0;
}

/* A tombstone outlived its TTL (the tomb table already dropped it). */
/* RESERVED/WRITING + REFRESH: the owner extends the lease, never past one
 * lease from now, what it asked for, or max_hold_ns after the reserve
 * (shard.h); a refresh never shortens a lease.  The state is unchanged:
 * only the lease heap moves, so every invariant of the state holds as it
 * did (a write in flight still defers an expiry, I4). */
static int h_refresh(xfer_shard *s, resv_step *o)
{
    if (mismatch(o))
        return XFER_ERR_STALE;
    const xfer_shard_resv *r = o->rec;
    uint64_t now = o->step.now_ns;
    if (!xfer_heap_contains(&s->leases, o->slot))
        return XFER_ERR_STATE; /* cannot happen: RESERVED/WRITING lease */
    uint64_t cur = s->leases.key[o->slot];
    uint64_t hold = xfer_shard_hold_ns(s);
    uint64_t cap = r->created_ns > UINT64_MAX - hold ? UINT64_MAX
                                                     : r->created_ns + hold;
    if (cap <= cur)
        return XFER_ERR_BOUNDS;
    uint64_t want = o->want_ns && o->want_ns < s->cfg.lease_ttl_ns
                        ? o->want_ns
                        : s->cfg.lease_ttl_ns;
    uint64_t to = now > UINT64_MAX - want ? UINT64_MAX : now + want;
    if (to > cap)
        to = cap;
    if (to > cur)
        xfer_heap_set(&s->leases, o->slot, to);
    else
        to = cur;
    if (o->granted_ns)
        *o->granted_ns = to > now ? to - now : 0;
    s->st.refreshes++;
    return 0;
}

static int h_drop(xfer_shard *s, resv_step *o)
{
    o->step.to = XFER_RESV_STATE_NONE;
    return 0;
}

/* Cells that absorb an event without acting on it, and ILLEGAL ones
 * (whose handler the dispatcher never calls). */
static int h_none(xfer_shard *s, resv_step *o)
{
    return 0;
}

typedef struct cell {
    uint8_t verdict;
    handler_fn fn;
    const char *name;
} cell;

static const cell table[XFER_RESV_STATE_COUNT_][XFER_RESV_EVENT_COUNT_] = {
#define C_(st, ev, v, h)                                                      \
    [XFER_RESV_STATE_##st][XFER_RESV_EVENT_##ev] = {XFER_VERDICT_##v, h_##h, \
                                                    #h},
    XFER_RESV_TABLE(C_)
#undef C_
};

bool xfer_shard_cell(unsigned state, unsigned event, xfer_step_cell *out)
{
    if (state >= XFER_RESV_STATE_COUNT_ || event >= XFER_RESV_EVENT_COUNT_)
        return false;
    const cell *c = &table[state][event];
    *out = (xfer_step_cell){c->verdict, c->fn ? c->name : NULL};
    return true;
}

/* ---------------------------------------------------------------------- */
/* Dispatch                                                                */
/* ---------------------------------------------------------------------- */

static void trace_step(xfer_shard *s, const resv_step *o, int rc)
{
    if (!s->cfg.trace.fn)
        return;
    xfer_trace_rec rec = {
        .id = o->id,
        .arg0 = o->resv_id,
        .arg1 = o->off,
        .arg2 = o->len,
        .attempt = o->attempt,
        .error = rc,
        .shard = s->cfg.shard_index,
    };
    xfer_step_emit(&s->cfg.trace, &s->seq, &o->step, &rec);
}

/* Run one event through the table (step.h): count the cell, run its
 * handler, check the edge, trace the step.  Returns the handler's answer,
 * or XFER_ERR_STATE for an ILLEGAL cell. */
static int dispatch(xfer_shard *s, resv_step *o)
{
    unsigned from = o->step.from, ev = o->step.event;
    assert(from < XFER_RESV_STATE_COUNT_ && ev < XFER_RESV_EVENT_COUNT_);
    const cell *c = &table[from][ev];
    int rc = XFER_ERR_STATE;
    if (xfer_step_enter(&o->step, c->verdict, &s->cells_hit[from][ev],
                        &s->st.illegal))
        rc = c->fn(s, o);
    xfer_step_leave(&o->step, &s->st.illegal);
    trace_step(s, o, rc);
    return rc;
}

/* Count a public call's refusal. */
static int counted(xfer_shard *s, int rc)
{
    if (rc == XFER_ERR_STALE)
        s->st.stale++;
    else if (rc < 0)
        s->st.refused++;
    return rc;
}

static int run(xfer_shard *s, resv_step *o)
{
    if (o->owner > s->cfg.max_owners)
        return XFER_ERR_INVALID_ARG;
    lookup(s, o);
    /* Another owner's record: refused before the machine sees it (peer
     * input, like a stray write_end). */
    if (foreign(o))
        return counted(s, XFER_ERR_PERM);
    return counted(s, dispatch(s, o));
}

typedef struct drop_ctx {
    xfer_shard *s;
    uint64_t now;
} drop_ctx;

static void on_tomb_drop(void *ud, const xfer_tomb_entry *e)
{
    drop_ctx *d = ud;
    resv_step o = {.step = xfer_step_make(XFER_MACHINE_RESERVATION, d->now,
                                        e->reason,
                                        XFER_RESV_EVENT_TOMB_EXPIRE),
                   .id = e->id, .attempt = e->attempt};
    dispatch(d->s, &o);
}

static void expire_tombs(xfer_shard *s, uint64_t now)
{
    drop_ctx d = {s, now};
    xfer_tomb_expire(&s->tombs, now, 0, on_tomb_drop, &d);
}

/* At the tombstone cap, drop what has outlived its TTL (traced) before a
 * call that needs a tombstone slot; a young one is never dropped. */
static void make_tomb_room(xfer_shard *s, uint64_t now)
{
    if (xfer_tomb_full(&s->tombs))
        expire_tombs(s, now);
}

/* Fire due leases while an event can still be appended; what is left
 * keeps next_deadline in the past, so the driver calls again. */
static void fire_leases(xfer_shard *s, uint64_t now)
{
    uint32_t slot;
    uint64_t dl;
    while (ev_room(s) && xfer_heap_peek(&s->leases, &slot, &dl) &&
           dl <= now) {
        xfer_heap_remove(&s->leases, slot);
        resv_step o = {.step = step_of(now, XFER_RESV_EVENT_LEASE_EXPIRE),
                       .id = s->recs[slot].id};
        lookup(s, &o);
        dispatch(s, &o);
    }
}

/* ---------------------------------------------------------------------- */
/* Public calls                                                            */
/* ---------------------------------------------------------------------- */

int xfer_shard_reserve(xfer_shard *s, uint64_t now_ns, uint64_t id,
                       uint32_t attempt, uint32_t len, xfer_resv_info *info)
{
    return xfer_shard_reserve_by(s, now_ns, 0, id, attempt, len, info);
}

int xfer_shard_reserve_by(xfer_shard *s, uint64_t now_ns, uint16_t owner,
                          uint64_t id, uint32_t attempt, uint32_t len,
                          xfer_resv_info *info)
{
    if (!s || id == 0 || !info)
        return XFER_ERR_INVALID_ARG;
    make_tomb_room(s, now_ns);
    resv_step o = {.step = step_of(now_ns, XFER_RESV_EVENT_RESERVE), .id = id,
                   .attempt = attempt, .len = len, .owner = owner,
                   .has_attempt = true, .has_region = true, .info = info};
    return run(s, &o);
}

int xfer_shard_eager(xfer_shard *s, uint64_t now_ns, uint64_t id,
                     uint32_t attempt, const void *data, uint32_t len,
                     xfer_resv_info *info)
{
    return xfer_shard_eager_by(s, now_ns, 0, id, attempt, data, len, info);
}

int xfer_shard_eager_by(xfer_shard *s, uint64_t now_ns, uint16_t owner,
                        uint64_t id, uint32_t attempt, const void *data,
                        uint32_t len, xfer_resv_info *info)
{
    if (!s || id == 0 || !info || (!data && len))
        return XFER_ERR_INVALID_ARG;
    make_tomb_room(s, now_ns);
    resv_step o = {.step = step_of(now_ns, XFER_RESV_EVENT_EAGER), .id = id,
                   .attempt = attempt, .len = len, .owner = owner,
                   .has_attempt = true, .has_region = true, .info = info,
                   .src = data};
    return run(s, &o);
}

int xfer_shard_write_begin(xfer_shard *s, uint64_t now_ns, uint64_t id,
                           uint32_t attempt, uint64_t resv_id, uint64_t off,
                           uint32_t len, uint8_t **dst)
{
    return xfer_shard_write_begin_by(s, now_ns, 0, id, attempt, resv_id, off,
                                     len, dst);
}

int xfer_shard_write_begin_by(xfer_shard *s, uint64_t now_ns,
                              uint16_t owner, uint64_t id, uint32_t attempt,
                              uint64_t resv_id, uint64_t off, uint32_t len,
                              uint8_t **dst)
{
    if (!s || id == 0 || !dst)
        return XFER_ERR_INVALID_ARG;
    resv_step o = {.step = step_of(now_ns, XFER_RESV_EVENT_WRITE_BEGIN),
                   .id = id, .resv_id = resv_id, .off = off,
                   .attempt = attempt, .len = len, .owner = owner,
                   .has_attempt = true, .has_resv = true, .has_region = true,
                   .dst = dst};
    return run(s, &o);
}

int xfer_shard_refresh(xfer_shard *s, uint64_t now_ns, uint64_t id,
                       uint32_t attempt, uint64_t resv_id, uint64_t want_ns,
                       uint64_t *granted_ns)
{
    return xfer_shard_refresh_by(s, now_ns, 0, id, attempt, resv_id, want_ns,
                                 granted_ns);
}

int xfer_shard_refresh_by(xfer_shard *s, uint64_t now_ns, uint16_t owner,
                          uint64_t id, uint32_t attempt, uint64_t resv_id,
                          uint64_t want_ns, uint64_t *granted_ns)
{
    if (!s || id == 0)
        return XFER_ERR_INVALID_ARG;
    resv_step o = {.step = step_of(now_ns, XFER_RESV_EVENT_REFRESH),
                   .id = id, .resv_id = resv_id, .attempt = attempt,
                   .owner = owner, .has_attempt = true, .has_resv = true,
                   .want_ns = want_ns, .granted_ns = granted_ns};
    int rc = run(s, &o);
    if (rc)
        s->st.refreshes_refused++;
    return rc;
}

int xfer_shard_write_end(xfer_shard *s, uint64_t now_ns, uint64_t id,
                         uint64_t resv_id, bool ok)
{
    if (!s || id == 0)
        return XFER_ERR_INVALID_ARG;
    resv_step o = {.step = step_of(now_ns, ok ? XFER_RESV_EVENT_WRITE_END_OK
                                            : XFER_RESV_EVENT_WRITE_END_FAIL),
                   .id = id, .resv_id = resv_id, .has_resv = true};
    lookup(s, &o);
    /* Only a write actually in flight may reach the table: the
     * write-end cells of states without writes are ILLEGAL. */
    if (!o.rec)
        return counted(s, XFER_ERR_NOT_FOUND);
    if (o.rec->resv_id != resv_id || o.rec->writes == 0)
        return counted(s, XFER_ERR_STALE);
    return dispatch(s, &o);
}

int xfer_shard_copy_begin(xfer_shard *s, uint64_t now_ns, uint64_t id,
                          uint64_t resv_id)
{
    if (!s || id == 0)
        return XFER_ERR_INVALID_ARG;
    resv_step o = {.step = step_of(now_ns, XFER_RESV_EVENT_WRITE_BEGIN),
                   .id = id, .resv_id = resv_id, .has_resv = true};
    lookup(s, &o);
    if (!o.rec)
        return XFER_ERR_NOT_FOUND;
    if (o.rec->resv_id != resv_id)
        return XFER_ERR_STALE;
    /* each copy is one write's: the write stays in flight until it ends */
    if (o.rec->copies >= o.rec->writes)
        return XFER_ERR_STATE;
    o.rec->copies++;
    return 0;
}

int xfer_shard_copy_end(xfer_shard *s, uint64_t now_ns, uint64_t id,
                        uint64_t resv_id, bool ok)
{
    if (!s || id == 0)
        return XFER_ERR_INVALID_ARG;
    resv_step o = {.step = step_of(now_ns, ok ? XFER_RESV_EVENT_WRITE_END_OK
                                            : XFER_RESV_EVENT_WRITE_END_FAIL),
                   .id = id, .resv_id = resv_id, .has_resv = true};
    lookup(s, &o);
    if (!o.rec)
        return counted(s, XFER_ERR_NOT_FOUND);
    if (o.rec->resv_id != resv_id || o.rec->copies == 0)
        return counted(s, XFER_ERR_STALE);
    o.rec->copies--; /* copies <= writes: the write is still in flight */
    return dispatch(s, &o);
}

uint32_t xfer_shard_copies(const xfer_shard *s, uint64_t id)
{
    uint32_t slot;
    if (!s || !xfer_idmap_get(&s->ids, id, &slot))
        return 0;
    return s->recs[slot].copies;
}

int xfer_shard_invalidated(xfer_shard *s, uint64_t now_ns, uint64_t id,
                           uint64_t resv_id)
{
    if (!s || id == 0)
        return XFER_ERR_INVALID_ARG;
    resv_step o = {.step = step_of(now_ns, XFER_RESV_EVENT_INVALIDATED),
                   .id = id, .resv_id = resv_id, .has_resv = true};
    lookup(s, &o);
    /* Only a record waiting for its invalidation may reach the table: the
     * INVALIDATED cells of every other state are ILLEGAL. */
    if (!o.rec)
        return counted(s, XFER_ERR_NOT_FOUND);
    if (o.rec->resv_id != resv_id || !xfer_shard_is_inval(o.rec->state))
        return counted(s, XFER_ERR_STALE);
    return dispatch(s, &o);
}

const xfer_shard_inval *xfer_shard_invalidations(const xfer_shard *s,
                                                 size_t *n)
{
    if (n)
        *n = s ? s->ninval : 0;
    return s ? s->invals : NULL;
}

void xfer_shard_invalidations_clear(xfer_shard *s)
{
    if (s)
        s->ninval = 0;
}

int xfer_shard_write(xfer_shard *s, uint64_t now_ns, uint64_t id,
                     uint32_t attempt, uint64_t resv_id, uint64_t off,
                     const void *data, uint32_t len)
{
    uint8_t *dst = NULL;
    if (!s || (!data && len))
        return XFER_ERR_INVALID_ARG;
    int rc = xfer_shard_write_begin(s, now_ns, id, attempt, resv_id, off,
                                    len, &dst);
    if (rc == 0) {
        if (len)
            memcpy(dst, data, len);
        rc = xfer_shard_write_end(s, now_ns, id, resv_id, true);
    }
    return rc;
}

int xfer_shard_commit(xfer_shard *s, uint64_t now_ns, uint64_t id,
                      uint32_t attempt, uint64_t resv_id)
{
    return xfer_shard_commit_by(s, now_ns, 0, id, attempt, resv_id);
}

int xfer_shard_commit_by(xfer_shard *s, uint64_t now_ns, uint16_t owner,
                         uint64_t id, uint32_t attempt, uint64_t resv_id)
{
    if (!s || id == 0)
        return XFER_ERR_INVALID_ARG;
    resv_step o = {.step = step_of(now_ns, XFER_RESV_EVENT_COMMIT), .id = id,
                   .resv_id = resv_id, .attempt = attempt, .owner = owner,
                   .has_attempt = true, .has_resv = true};
    return run(s, &o);
}

int xfer_shard_cancel(xfer_shard *s, uint64_t now_ns, uint64_t id,
                      uint32_t attempt, uint64_t resv_id)
{
    return xfer_shard_cancel_by(s, now_ns, 0, id, attempt, resv_id);
}

int xfer_shard_cancel_by(xfer_shard *s, uint64_t now_ns, uint16_t owner,
                         uint64_t id, uint32_t attempt, uint64_t resv_id)
{
    if (!s || id == 0)
        return XFER_ERR_INVALID_ARG;
    make_tomb_room(s, now_ns);
    /* Attempt 0 is never a producer attempt: it is the consumer
     * scheduler's cancel of the id, whatever attempt holds it. */
    resv_step o = {.step = step_of(now_ns, XFER_RESV_EVENT_CANCEL), .id = id,
                   .resv_id = resv_id, .attempt = attempt, .owner = owner,
                   .has_attempt = attempt != 0,
                   .has_resv = resv_id != XFER_RESV_NONE,
                   .consumer = attempt == 0};
    return run(s, &o);
}

int xfer_shard_cancel_consumer_by(xfer_shard *s, uint64_t now_ns,
                                  uint16_t owner, uint64_t id,
                                  uint32_t attempt, uint64_t resv_id)
{
    if (!s || id == 0)
        return XFER_ERR_INVALID_ARG;
    make_tomb_room(s, now_ns);
    resv_step o = {.step = step_of(now_ns, XFER_RESV_EVENT_CANCEL), .id = id,
                   .resv_id = resv_id, .attempt = attempt, .owner = owner,
                   .has_attempt = attempt > 0, /* 0: any attempt */
                   .has_resv = resv_id != XFER_RESV_NONE, .consumer = true};
    return run(s, &o);
}

int xfer_shard_take(xfer_shard *s, uint64_t now_ns, uint64_t id,
                    uint64_t resv_id, const uint8_t **data, uint32_t *len)
{
    if (!s || id == 0 || !data || !len)
        return XFER_ERR_INVALID_ARG;
    resv_step o = {.step = step_of(now_ns, XFER_RESV_EVENT_TAKE), .id = id,
                   .resv_id = resv_id, .has_resv = true, .data = data,
                   .data_len = len};
    return run(s, &o);
}

int xfer_shard_release(xfer_shard *s, uint64_t now_ns, uint64_t id,
                       uint64_t resv_id)
{
    if (!s || id == 0)
        return XFER_ERR_INVALID_ARG;
    resv_step o = {.step = step_of(now_ns, XFER_RESV_EVENT_RELEASE), .id = id,
                   .resv_id = resv_id, .has_resv = true};
    return run(s, &o);
}

void xfer_shard_on_timer(xfer_shard *s, uint64_t now_ns)
{
    if (!s)
        return;
    fire_leases(s, now_ns);
    expire_tombs(s, now_ns);
}

uint64_t xfer_shard_next_deadline(const xfer_shard *s)
{
    if (!s)
        return UINT64_MAX;
    uint64_t a = xfer_heap_min(&s->leases);
    uint64_t b = xfer_tomb_next_expiry(&s->tombs);
    return a < b ? a : b;
}

const xfer_shard_event *xfer_shard_events(const xfer_shard *s, size_t *n)
{
    if (n)
        *n = s ? s->nev : 0;
    return s ? s->evs : NULL;
}

void xfer_shard_events_clear(xfer_shard *s)
{
    if (s)
        s->nev = 0;
}

int xfer_shard_stats_get_versioned(const xfer_shard *s, uint32_t version,
                                   xfer_shard_stats *st)
{
    if (!s || !st)
        return XFER_ERR_INVALID_ARG;
    xfer_shard_stats cur = s->st;
    cur.pool_bytes = s->cfg.pool_bytes;
    cur.bytes_in_use = s->pool.in_use;
    cur.live = s->live;
    cur.tombstones = xfer_tomb_entries(&s->tombs);
    return xfer_util_versioned_copy(st, &cur, version, stats_lens,
                                    XFER_UTIL_NVERSIONS(stats_lens));
}

int xfer_shard_owner_get(const xfer_shard *s, uint16_t owner,
                         xfer_shard_owner_use *out)
{
    if (!s || !out || owner == 0 || owner > s->cfg.max_owners)
        return XFER_ERR_INVALID_ARG;
    *out = (xfer_shard_owner_use){
        .live = s->use[owner].live, .bytes = s->use[owner].bytes,
        .tombstones = xfer_tomb_owned(&s->tombs, owner)};
    return 0;
}

uint64_t xfer_shard_cell_hits(const xfer_shard *s, unsigned state,
                              unsigned event)
{
    if (!s || state >= XFER_RESV_STATE_COUNT_ ||
        event >= XFER_RESV_EVENT_COUNT_)
        return 0;
    return s->cells_hit[state][event];
}

xfer_resv_state xfer_shard_state(const xfer_shard *s, uint64_t id)
{
    uint32_t slot;
    if (!s || id == 0)
        return XFER_RESV_STATE_NONE;
    if (xfer_idmap_get(&s->ids, id, &slot))
        return (xfer_resv_state)s->recs[slot].state;
    const xfer_tomb_entry *e = xfer_tomb_find(&s->tombs, id);
    return e ? (xfer_resv_state)e->reason : XFER_RESV_STATE_NONE;
}

typedef struct ended_visit {
    const xfer_shard *s;
    void (*fn)(void *ud, const xfer_shard_event *e);
    void *ud;
} ended_visit;

static void visit_ended(void *ud, const xfer_tomb_entry *t)
{
    const ended_visit *v = ud;
    /* Global tombstones are the consumer's (its cancel, a release):
     * consumers know of those themselves.  A producer's pre-emptive one
     * says nothing of another session's transfer of the id: replaying it
     * would let any producer session make the consumer give up an id it
     * never held (the soak's tombstone attack did exactly that). */
    if (t->flags & (XFER_TOMB_GLOBAL | XFER_TOMB_PREEMPT))
        return;
    if (t->reason != XFER_RESV_STATE_CANCELLED &&
        t->reason != XFER_RESV_STATE_EXPIRED)
        return;
    xfer_shard_event e = {
        .kind = t->reason == XFER_RESV_STATE_CANCELLED
                    ? XFER_SHARD_EV_CANCELLED
                    : XFER_SHARD_EV_EXPIRED,
        .shard = v->s->cfg.shard_index, .attempt = t->attempt, .id = t->id,
        .resv_id = XFER_RESV_NONE, .len = 0};
    v->fn(v->ud, &e);
}

void xfer_shard_foreach_ended(const xfer_shard *s,
                              void (*fn)(void *ud, const xfer_shard_event *e),
                              void *ud)
{
    if (!s || !fn)
        return;
    ended_visit v = {s, fn, ud};
    xfer_tomb_foreach(&s->tombs, visit_ended, &v);
}

uint8_t *xfer_shard_pool_base(const xfer_shard *s)
{
    return s ? s->mem : NULL;
}

/* ---------------------------------------------------------------------- */
/* Sorted views (foreach, save, load)                                      */
/* ---------------------------------------------------------------------- */

int xfer_shard_cmp_ent(const void *a, const void *b)
{
    const xfer_shard_sort_ent *x = a, *y = b;
    if (x->k1 != y->k1)
        return x->k1 < y->k1 ? -1 : 1;
    if (x->k2 != y->k2)
        return x->k2 < y->k2 ? -1 : 1;
    return 0;
}

/* Fill the scratch array with the live slots sorted by id; each entry's
 * k2 is the lease deadline and rank its position among leases with the
 * same deadline (the heap pops those in set order), XFER_SHARD_NO_LEASE
 * for none. */
uint32_t xfer_shard_sorted_live(const xfer_shard *s)
{
    xfer_shard_sort_ent *v = s->scratch;
    uint32_t n = 0;
    for (uint32_t slot = 0; slot < s->cfg.max_reservations; slot++) {
        if (s->recs[slot].state == XFER_RESV_STATE_NONE)
            continue;
        bool leased = xfer_heap_contains(&s->leases, slot);
        v[n++] = (xfer_shard_sort_ent){
            .k1 = leased ? s->leases.key[slot] : UINT64_MAX,
            .k2 = leased ? s->leases.tie[slot] : UINT64_MAX,
            .slot = slot, .rank = leased ? 0 : XFER_SHARD_NO_LEASE};
    }
    qsort(v, n, sizeof *v, xfer_shard_cmp_ent); /* by (deadline, set order) */
    for (uint32_t i = 1; i < n && v[i].rank != XFER_SHARD_NO_LEASE; i++)
        if (v[i].k1 == v[i - 1].k1)
            v[i].rank = v[i - 1].rank + 1;
    for (uint32_t i = 0; i < n; i++) {
        v[i].k2 = v[i].k1;
        v[i].k1 = s->recs[v[i].slot].id;
    }
    qsort(v, n, sizeof *v, xfer_shard_cmp_ent);
    return n;
}

typedef struct foreach_ctx {
    void (*fn)(void *ud, uint64_t id, uint32_t attempt, xfer_resv_state st,
               uint64_t since_ns);
    void *ud;
    uint64_t ttl;
} foreach_ctx;

static void foreach_tomb(void *ud, const xfer_tomb_entry *e)
{
    foreach_ctx *c = ud;
    c->fn(c->ud, e->id, e->attempt, (xfer_resv_state)e->reason,
          e->expires_ns - c->ttl);
}

/* Live records by id (since = reserve time), then tombstones oldest first
 * (since = when tombstoned).  fn must not call into the shard. */
void xfer_shard_foreach(const xfer_shard *s,
                        void (*fn)(void *ud, uint64_t id, uint32_t attempt,
                                   xfer_resv_state st, uint64_t since_ns),
                        void *ud)
{
    if (!s || !fn)
        return;
    uint32_t n = xfer_shard_sorted_live(s);
    for (uint32_t i = 0; i < n; i++) {
        const xfer_shard_resv *r = &s->recs[s->scratch[i].slot];
        fn(ud, r->id, r->attempt, (xfer_resv_state)r->state, r->created_ns);
    }
    foreach_ctx c = {fn, ud, s->tombs.ttl_ns};
    xfer_tomb_foreach(&s->tombs, foreach_tomb, &c);
}

/* ---------------------------------------------------------------------- */
/* Creation                                                                */
/* ---------------------------------------------------------------------- */

void xfer_shard_config_default(xfer_shard_config *cfg)
{
    if (!cfg)
        return;
    *cfg = (xfer_shard_config){.version = XFER_SHARD_CONFIG_VERSION,
                               .max_reservations = 4096,
                               .lease_ttl_ns = 10ull * 1000000000ull,
                               .align = 64};
}

/* The caller's config (NULL: the defaults) in the latest layout, its zero
 * fields given their defaults, then checked. */
static int apply_defaults(const xfer_shard_config *in, xfer_shard_config *c)
{
    xfer_shard_config_default(c);
    if (in && xfer_util_versioned_copy(c, in, in->version, config_lens,
                                       XFER_UTIL_NVERSIONS(config_lens)))
        return XFER_ERR_INVALID_ARG;
    if (in && in->version < 2)
        c->one_sided = false; /* padding in version 1: never read */
    if (in && in->version < 3)
        c->max_hold_ms = 0; /* padding before version 3: never read */
    if (!c->max_reservations)
        c->max_reservations = 4096;
    if (!c->max_tombstones && c->max_reservations <= MAX_TOMBS / 4)
        c->max_tombstones = 4 * c->max_reservations;
    if (!c->lease_ttl_ns)
        c->lease_ttl_ns = 10ull * 1000000000ull;
    if (!c->tombstone_ttl_ns)
        c->tombstone_ttl_ns = c->lease_ttl_ns > UINT64_MAX / 2
                                  ? UINT64_MAX
                                  : 2 * c->lease_ttl_ns;
    if (!c->align)
        c->align = 64;
    /* the hold cap in ns, kept in the shard (hold_ns) */
    if (c->max_owners) {
        /* A fair share each, at least one of everything. */
        if (!c->owner_max_reservations)
            c->owner_max_reservations = c->max_reservations / c->max_owners;
        if (!c->owner_max_bytes)
            c->owner_max_bytes = c->pool_bytes / c->max_owners;
        if (!c->owner_max_tombstones)
            c->owner_max_tombstones = c->max_tombstones / c->max_owners;
        c->owner_max_reservations += !c->owner_max_reservations;
        c->owner_max_bytes += !c->owner_max_bytes;
        c->owner_max_tombstones += !c->owner_max_tombstones;
    }
    bool bad = c->pool_bytes < c->align ||
               c->max_reservations > MAX_RECORDS || !c->max_tombstones ||
               c->max_tombstones > MAX_TOMBS || c->lease_ttl_ns > MAX_TTL ||
               c->tombstone_ttl_ns > MAX_TTL ||
               c->tombstone_ttl_ns < c->lease_ttl_ns ||
               (c->max_hold_ms &&
                (uint64_t)c->max_hold_ms * 1000000ull < c->lease_ttl_ns) ||
               (c->align & (c->align - 1)) != 0 ||
               (!c->alloc.alloc != !c->alloc.free) ||
               (!c->pool_memory && c->pool_bytes > SIZE_MAX - c->align);
    return bad ? XFER_ERR_INVALID_ARG : 0;
}

/* The pool buffer, aligned to cfg.align when we allocate it. */
static int alloc_memory(xfer_shard *s)
{
    if (s->cfg.pool_memory) {
        s->mem = s->cfg.pool_memory;
        return 0;
    }
    size_t size = (size_t)s->cfg.pool_bytes + s->cfg.align - 1;
    s->mem_block = xfer_util_alloc(&s->cfg.alloc, size);
    if (!s->mem_block)
        return XFER_ERR_NOMEM;
    uintptr_t p = (uintptr_t)s->mem_block;
    p = (p + s->cfg.align - 1) & ~(uintptr_t)(s->cfg.align - 1);
    s->mem = (uint8_t *)p;
    return 0;
}

/* Every slot free, slot 0 handed out first. */
void xfer_shard_reset_slots(xfer_shard *s)
{
    uint32_t n = s->cfg.max_reservations;
    memset(s->recs, 0, (size_t)n * sizeof *s->recs);
    for (uint32_t i = 0; i < n; i++)
        s->free_slots[i] = n - 1 - i;
    s->nfree = n;
    s->live = 0;
}

static int build(xfer_shard *s)
{
    const xfer_allocator *a = &s->cfg.alloc;
    uint32_t n = s->cfg.max_reservations;
    int rc = 0;
    s->ev_cap = n + EVENT_SLACK;
    s->recs = xfer_util_calloc(a, n, sizeof *s->recs);
    s->free_slots = xfer_util_calloc(a, n, sizeof *s->free_slots);
    s->scratch = xfer_util_calloc(a, n, sizeof *s->scratch);
    s->evs = xfer_util_calloc(a, s->ev_cap, sizeof *s->evs);
    if (s->cfg.one_sided)
        s->invals = xfer_util_calloc(a, n, sizeof *s->invals);
    if (!s->recs || !s->free_slots || !s->scratch || !s->evs ||
        (s->cfg.one_sided && !s->invals))
        rc = XFER_ERR_NOMEM;
    if (!rc)
        rc = xfer_idmap_init(&s->ids, n, a);
    if (!rc)
        rc = xfer_heap_init(&s->leases, n, a);
    if (!rc)
        rc = xfer_tomb_init(&s->tombs, s->cfg.max_tombstones,
                            s->cfg.tombstone_ttl_ns, a);
    if (!rc)
        rc = xfer_pool_init(&s->pool, s->cfg.pool_bytes, s->cfg.align, n, a);
    if (!rc)
        rc = alloc_memory(s);
    if (!rc && s->cfg.max_owners) {
        s->use = xfer_util_calloc(a, (size_t)s->cfg.max_owners + 1,
                                  sizeof *s->use);
        rc = s->use ? xfer_tomb_owners_init(&s->tombs, s->cfg.max_owners,
                                            s->cfg.owner_max_tombstones, a)
                    : XFER_ERR_NOMEM;
    }
    if (!rc) {
        xfer_shard_reset_slots(s);
        s->rng_state = RNG_SEED ^ s->cfg.shard_index;
    }
    return rc;
}

int xfer_shard_new(const xfer_shard_config *cfg, xfer_shard **out)
{
    xfer_shard_config c;
    if (!out)
        return XFER_ERR_INVALID_ARG;
    int rc = apply_defaults(cfg, &c);
    if (rc)
        return rc;
    xfer_shard *s = xfer_util_calloc(&c.alloc, 1, sizeof *s);
    if (!s)
        return XFER_ERR_NOMEM;
    s->cfg = c;
    rc = build(s);
    if (rc) {
        xfer_shard_del(s);
        return rc;
    }
    *out = s;
    return 0;
}

void xfer_shard_del(xfer_shard *s)
{
    if (!s)
        return;
    xfer_allocator a = s->cfg.alloc;
    xfer_pool_clear(&s->pool, &a);
    xfer_tomb_clear(&s->tombs, &a);
    xfer_heap_clear(&s->leases, &a);
    xfer_idmap_clear(&s->ids, &a);
    xfer_util_free(&a, s->use);
    xfer_util_free(&a, s->mem_block);
    xfer_util_free(&a, s->evs);
    xfer_util_free(&a, s->invals);
    xfer_util_free(&a, s->scratch);
    xfer_util_free(&a, s->free_slots);
    xfer_util_free(&a, s->recs);
    xfer_util_free(&a, s);
}
