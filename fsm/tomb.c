/*
 * fsm/tomb.c - FIFO tombstones with one TTL; see tomb.h for why FIFO order
 * is expiry order here.
 *
 * Invariants: ring.n + held <= ring.cap; the ring's items (ents, oldest
 * first) have non-decreasing expires_ns; the map holds each id once,
 * pointing at the slot of its newest entry; the others (`dead` of them,
 * exactly the entries flagged XFER_TOMB_DEAD_) were superseded by a
 * refresh and are popped silently.  With owners,
 * owned[o] is the holds of owner o plus the ring entries (live or dead)
 * that name o, so the owners' counts add up to at most ring.n + held; every
 * pop of the ring goes through pop_head, which gives the entry's room back
 * to its owner.
 */
#include "tomb.h"

#include <assert.h>
#include <string.h>

#include "util.h"

int xfer_tomb_init(xfer_tomb *t, uint32_t cap, uint64_t ttl_ns,
                   const xfer_allocator *a)
{
    memset(t, 0, sizeof *t);
    if (cap == 0 || cap > XFER_RING_MAX_CAP)
        return XFER_ERR_INVALID_ARG;
    t->ents = xfer_util_calloc(a, cap, sizeof *t->ents);
    if (!t->ents)
        return XFER_ERR_NOMEM;
    int rc = xfer_idmap_init(&t->map, cap, a);
    if (rc) {
        xfer_util_free(a, t->ents);
        t->ents = NULL;
        return rc;
    }
    xfer_ring_init(&t->ring, cap);
    t->ttl_ns = ttl_ns;
    return 0;
}

void xfer_tomb_clear(xfer_tomb *t, const xfer_allocator *a)
{
    xfer_util_free(a, t->ents);
    xfer_util_free(a, t->owned);
    xfer_idmap_clear(&t->map, a);
    memset(t, 0, sizeof *t);
}

int xfer_tomb_owners_init(xfer_tomb *t, uint16_t nowners, uint32_t quota,
                          const xfer_allocator *a)
{
    if (nowners == 0 || quota == 0 || t->owned || t->ring.n || t->held)
        return XFER_ERR_INVALID_ARG;
    t->owned = xfer_util_calloc(a, (size_t)nowners + 1, sizeof *t->owned);
    if (!t->owned)
        return XFER_ERR_NOMEM;
    t->nowners = nowners;
    t->owner_quota = quota;
    return 0;
}

uint32_t xfer_tomb_owned(const xfer_tomb *t, uint16_t owner)
{
    return owner && owner <= t->nowners ? t->owned[owner] : 0;
}

/* Count (+1) or give back (-1) room of owner; nobody in particular (0) and
 * a table without owners count nothing. */
static void charge(xfer_tomb *t, uint16_t owner, int delta)
{
    if (!owner || owner > t->nowners)
        return;
    assert(delta > 0 || t->owned[owner] > 0);
    t->owned[owner] += (uint32_t)delta;
}

/* Remove the oldest ring entry, giving its room back to its owner. */
static xfer_tomb_entry pop_head(xfer_tomb *t)
{
    xfer_tomb_entry e = t->ents[xfer_ring_pop(&t->ring)];
    charge(t, e.owner, -1);
    return e;
}

static uint64_t clamp(xfer_tomb *t, uint64_t now_ns)
{
    if (now_ns < t->last_now)
        return t->last_now;
    t->last_now = now_ns;
    return now_ns;
}

uint32_t xfer_tomb_expire(xfer_tomb *t, uint64_t now_ns, uint32_t max,
                          xfer_tomb_drop_fn drop, void *ud)
{
    now_ns = clamp(t, now_ns);
    uint32_t dropped = 0;
    while (!xfer_ring_empty(&t->ring) &&
           t->ents[t->ring.head].expires_ns <= now_ns &&
           (max == 0 || dropped < max)) {
        uint32_t slot = t->ring.head;
        xfer_tomb_entry e = pop_head(t);
        if (e.flags & XFER_TOMB_DEAD_) {
            t->dead--; /* superseded: the map points at a newer entry */
            continue;
        }
        bool gone = xfer_idmap_del_if(&t->map, e.id, slot);
        assert(gone); /* a live entry is the one its id maps to */
        (void)gone;
        dropped++;
        if (drop)
            drop(ud, &e);
    }
    return dropped;
}

const xfer_tomb_entry *xfer_tomb_find(const xfer_tomb *t, uint64_t id)
{
    uint32_t at;
    if (!xfer_idmap_get(&t->map, id, &at))
        return NULL;
    return &t->ents[at];
}

int xfer_tomb_hold(xfer_tomb *t, uint64_t now_ns)
{
    return xfer_tomb_hold_by(t, now_ns, 0);
}

int xfer_tomb_hold_by(xfer_tomb *t, uint64_t now_ns, uint16_t owner)
{
    if (owner && owner <= t->nowners && t->owned[owner] >= t->owner_quota)
        return XFER_ERR_BUSY; /* what the owner holds is its own to free */
    if (xfer_tomb_full(t))
        xfer_tomb_expire(t, now_ns, 0, NULL, NULL);
    if (xfer_tomb_full(t))
        return XFER_ERR_BUSY;
    t->held++;
    charge(t, owner, 1);
    return 0;
}

void xfer_tomb_unhold(xfer_tomb *t)
{
    xfer_tomb_unhold_by(t, 0);
}

void xfer_tomb_unhold_by(xfer_tomb *t, uint16_t owner)
{
    assert(t->held > 0);
    t->held--;
    charge(t, owner, -1);
}

static void append(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                   uint32_t attempt, uint8_t reason, uint16_t owner,
                   uint8_t flags)
{
    uint32_t at = xfer_ring_push(&t->ring);
    t->ents[at] = (xfer_tomb_entry){.id = id,
                                    .expires_ns = now_ns + t->ttl_ns,
                                    .attempt = attempt,
                                    .owner = owner,
                                    .reason = reason,
                                    .flags = flags};
    xfer_idmap_put(&t->map, id, at);
}

void xfer_tomb_insert_held(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                           uint32_t attempt, uint8_t reason)
{
    xfer_tomb_insert_held_by(t, now_ns, id, attempt, reason, 0, 0);
}

void xfer_tomb_insert_held_by(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                              uint32_t attempt, uint8_t reason,
                              uint16_t owner, uint8_t flags)
{
    now_ns = clamp(t, now_ns);
    assert(t->held > 0);
    t->held--;
    uint32_t at;
    if (xfer_idmap_get(&t->map, id, &at)) {
        xfer_tomb_entry *old = &t->ents[at];
        /* The hold's room carries a fresh entry; the old dies (its room
         * stays its owner's until it is popped).  A block of everyone
         * survives it; another owner's block does not become everyone's
         * (that would let two owners block a third): it is lost, and a
         * late reserve of that owner is freed by its lease. */
        if (old->owner == 0 || (old->flags & XFER_TOMB_GLOBAL))
            flags |= XFER_TOMB_GLOBAL;
        old->flags |= XFER_TOMB_DEAD_;
        t->dead++;
    }
    append(t, now_ns, id, attempt, reason, owner, flags);
}

int xfer_tomb_insert(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                     uint32_t attempt, uint8_t reason)
{
    return xfer_tomb_insert_by(t, now_ns, id, attempt, reason, 0, 0);
}

int xfer_tomb_insert_by(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                        uint32_t attempt, uint8_t reason, uint16_t owner,
                        uint8_t flags)
{
    uint32_t at;
    if (xfer_idmap_get(&t->map, id, &at)) {
        /* Another owner's entry stays its own unless flags make it
         * everyone's (the consumer): two owners' tombstones never block a
         * third.  This owner's late reserve of the id is then not refused
         * by it; its lease frees it.  Only "everyone's" carries over: the
         * entry's other flags say how its own owner made it. */
        t->ents[at].flags |= flags & XFER_TOMB_GLOBAL;
        return 0;
    }
    int rc = xfer_tomb_hold_by(t, now_ns, owner);
    if (rc)
        return rc;
    xfer_tomb_insert_held_by(t, now_ns, id, attempt, reason, owner, flags);
    return 0;
}

void xfer_tomb_make_global(xfer_tomb *t, uint64_t id)
{
    uint32_t at;
    if (xfer_idmap_get(&t->map, id, &at))
        t->ents[at].flags |= XFER_TOMB_GLOBAL;
}

int xfer_tomb_refresh(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                      uint32_t attempt, uint8_t reason)
{
    if (!xfer_tomb_find(t, id))
        return xfer_tomb_insert(t, now_ns, id, attempt, reason);
    now_ns = clamp(t, now_ns);
    if (xfer_tomb_full(t))
        xfer_tomb_expire(t, now_ns, 0, NULL, NULL);
    uint32_t at;
    if (!xfer_idmap_get(&t->map, id, &at))
        return xfer_tomb_insert(t, now_ns, id, attempt, reason);
    /* The entry that stays (in place, or until a full table has room)
     * says what the latest refresh says. */
    t->ents[at].attempt = attempt;
    t->ents[at].reason = reason;
    if (at == xfer_ring_newest(&t->ring)) {
        /* The newest entry: a later expiry keeps the ring in order. */
        t->ents[at].expires_ns = now_ns + t->ttl_ns;
        return 0;
    }
    if (xfer_tomb_full(t))
        return XFER_ERR_BUSY;
    t->ents[at].flags |= XFER_TOMB_DEAD_;
    /* the map now points here */
    append(t, now_ns, id, attempt, reason, 0, 0);
    t->dead++;
    return 0;
}

int xfer_tomb_hold_over(xfer_tomb *t, uint64_t now_ns, uint64_t id)
{
    uint32_t at;
    if (!xfer_idmap_get(&t->map, id, &at))
        return XFER_ERR_NOT_FOUND;
    if (at == t->ring.head) {
        /* the oldest entry: its slot is free at once, for the hold */
        xfer_tomb_entry e = pop_head(t);
        xfer_idmap_del(&t->map, id);
        t->held++;
        charge(t, e.owner, 1);
        return 0;
    }
    int rc = xfer_tomb_hold_by(t, now_ns, t->ents[at].owner);
    if (rc)
        return rc;
    /* The hold may have dropped expired entries, this one among them
     * (then it is gone already); else it dies where it is. */
    uint32_t still;
    if (xfer_idmap_get(&t->map, id, &still) && still == at) {
        xfer_idmap_del(&t->map, id);
        t->ents[at].flags |= XFER_TOMB_DEAD_; /* expiry pops it unprobed */
        t->dead++;
    }
    return 0;
}

uint32_t xfer_tomb_live(const xfer_tomb *t)
{
    return t->ring.n - t->dead;
}

uint32_t xfer_tomb_entries(const xfer_tomb *t)
{
    return t->ring.n;
}

bool xfer_tomb_full(const xfer_tomb *t)
{
    return t->ring.n + t->held >= t->ring.cap;
}

uint64_t xfer_tomb_clock(const xfer_tomb *t)
{
    return t->last_now;
}

uint64_t xfer_tomb_next_expiry(const xfer_tomb *t)
{
    return xfer_ring_empty(&t->ring) ? UINT64_MAX
                                     : t->ents[t->ring.head].expires_ns;
}

void xfer_tomb_foreach(const xfer_tomb *t,
                       void (*fn)(void *ud, const xfer_tomb_entry *e),
                       void *ud)
{
    /* The dead flag, not the map: a sequential walk of the ring (this
     * runs over every tombstone, e.g. at each of xferd's empty ticks). */
    for (uint32_t i = 0; i < t->ring.n; i++) {
        const xfer_tomb_entry *e = &t->ents[xfer_ring_slot(&t->ring, i)];
        if (!(e->flags & XFER_TOMB_DEAD_))
            fn(ud, e);
    }
}

size_t xfer_tomb_bytes_per_entry(void)
{
    return sizeof(xfer_tomb_entry) + xfer_idmap_bytes_per_entry();
}

/* ---------------------------------------------------------------------- */
/* Reset, save and restore (for the machines' saves, fsm/save.h)           */
/* ---------------------------------------------------------------------- */

void xfer_tomb_reset(xfer_tomb *t)
{
    xfer_ring_reset(&t->ring);
    xfer_idmap_reset(&t->map);
    t->held = 0;
    t->dead = 0;
    t->last_now = 0;
    if (t->owned)
        memset(t->owned, 0, ((size_t)t->nowners + 1) * sizeof *t->owned);
}

typedef struct save_ctx {
    xfer_le_enc *w;
    bool owners;
    xfer_tomb_map_fn map;
    const void *map_ud;
} save_ctx;

static void save_entry(void *ud, const xfer_tomb_entry *e)
{
    const save_ctx *c = ud;
    xfer_le_enc_u64(c->w, c->map ? c->map(c->map_ud, e->id) : e->id);
    xfer_le_enc_u64(c->w, e->expires_ns);
    xfer_le_enc_u32(c->w, e->attempt);
    xfer_le_enc_u8(c->w, e->reason);
    if (c->owners) {
        xfer_le_enc_u16(c->w, e->owner);
        xfer_le_enc_u8(c->w, e->flags);
    }
}

void xfer_tomb_save_map(const xfer_tomb *t, xfer_le_enc *e,
                        xfer_tomb_map_fn map, const void *ud)
{
    save_ctx c = {e, t->nowners > 0, map, ud};
    xfer_le_enc_u32(e, xfer_tomb_live(t));
    xfer_tomb_foreach(t, save_entry, &c);
}

void xfer_tomb_save(const xfer_tomb *t, xfer_le_enc *e)
{
    xfer_tomb_save_map(t, e, NULL, NULL);
}

static xfer_tomb_entry get_entry(const xfer_tomb *t, xfer_le_dec *d)
{
    xfer_tomb_entry e = {0};
    e.id = xfer_le_dec_u64(d);
    e.expires_ns = xfer_le_dec_u64(d);
    e.attempt = xfer_le_dec_u32(d);
    e.reason = xfer_le_dec_u8(d);
    if (t->nowners) {
        e.owner = xfer_le_dec_u16(d);
        e.flags = xfer_le_dec_u8(d);
    }
    return e;
}

bool xfer_tomb_check(const xfer_tomb *t, xfer_le_dec *d, uint32_t holds,
                     xfer_tomb_ok_fn ok, void *ud)
{
    uint64_t n = xfer_le_dec_u32(d), prev = 0;
    if (!xfer_le_dec_ok(d) || n + holds > t->ring.cap)
        return false;
    for (uint64_t i = 0; i < n; i++) {
        xfer_tomb_entry e = get_entry(t, d);
        if (!xfer_le_dec_ok(d) || e.id == 0 || e.expires_ns < prev ||
            e.expires_ns < t->ttl_ns || e.owner > t->nowners ||
            (e.flags & ~XFER_TOMB_SAVED_FLAGS) || (ok && !ok(ud, &e)))
            return false;
        prev = e.expires_ns;
    }
    return true;
}

int xfer_tomb_restore(xfer_tomb *t, xfer_le_dec *d, uint32_t holds)
{
    xfer_tomb_reset(t);
    uint32_t n = xfer_le_dec_u32(d);
    if (!xfer_le_dec_ok(d) || (uint64_t)n + holds > t->ring.cap)
        goto out_bad;
    for (uint32_t i = 0; i < n; i++) {
        xfer_tomb_entry e = get_entry(t, d);
        if (!xfer_le_dec_ok(d) || e.id == 0 || e.expires_ns < t->ttl_ns ||
            e.owner > t->nowners || (e.flags & ~XFER_TOMB_SAVED_FLAGS) ||
            xfer_tomb_find(t, e.id))
            goto out_bad;
        uint32_t at = xfer_ring_push(&t->ring);
        t->ents[at] = e;
        xfer_idmap_put(&t->map, e.id, at);
        charge(t, e.owner, 1);
        clamp(t, e.expires_ns - t->ttl_ns); /* its birth */
    }
    t->held = holds;
    return 0;
out_bad:
    xfer_tomb_reset(t);
    return XFER_ERR_FORMAT;
}

void xfer_tomb_uncharge_hold(xfer_tomb *t, uint16_t owner)
{
    assert(t->held > 0);
    charge(t, owner, -1);
}

void xfer_tomb_charge_hold(xfer_tomb *t, uint16_t owner)
{
    charge(t, owner, 1);
}

bool xfer_tomb_set_clock(xfer_tomb *t, uint64_t now_ns)
{
    if (!xfer_ring_empty(&t->ring) &&
        now_ns < t->ents[xfer_ring_newest(&t->ring)].expires_ns - t->ttl_ns)
        return false;
    t->last_now = now_ns;
    return true;
}
