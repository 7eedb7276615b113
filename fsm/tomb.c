/*
 * fsm/tomb.c - FIFO tombstones with one TTL; see tomb.h for why FIFO order
 * is expiry order here.
 *
 * Invariants: ring.n + held <= ring.cap; the ring's items (ents, oldest
 * first) have non-decreasing expires_ns; the map holds each id once,
 * pointing at the slot of its newest entry; the others (`dead` of them)
 * were superseded by a refresh and are popped silently.
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
    xfer_idmap_clear(&t->map, a);
    memset(t, 0, sizeof *t);
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
        uint32_t slot = xfer_ring_pop(&t->ring), at;
        xfer_tomb_entry e = t->ents[slot];
        bool live = xfer_idmap_get(&t->map, e.id, &at) && at == slot;
        if (!live) {
            t->dead--;
            continue;
        }
        xfer_idmap_del(&t->map, e.id);
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
    if (xfer_tomb_full(t))
        xfer_tomb_expire(t, now_ns, 0, NULL, NULL);
    if (xfer_tomb_full(t))
        return XFER_ERR_BUSY;
    t->held++;
    return 0;
}

void xfer_tomb_unhold(xfer_tomb *t)
{
    assert(t->held > 0);
    t->held--;
}

static void append(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                   uint32_t attempt, uint8_t reason)
{
    uint32_t at = xfer_ring_push(&t->ring);
    t->ents[at] = (xfer_tomb_entry){.id = id,
                                    .expires_ns = now_ns + t->ttl_ns,
                                    .attempt = attempt,
                                    .reason = reason};
    xfer_idmap_put(&t->map, id, at);
}

void xfer_tomb_insert_held(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                           uint32_t attempt, uint8_t reason)
{
    now_ns = clamp(t, now_ns);
    assert(t->held > 0);
    t->held--;
    if (xfer_tomb_find(t, id))
        t->dead++; /* the hold's room carries a fresh entry; the old dies */
    append(t, now_ns, id, attempt, reason);
}

int xfer_tomb_insert(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                     uint32_t attempt, uint8_t reason)
{
    if (xfer_tomb_find(t, id))
        return 0;
    int rc = xfer_tomb_hold(t, now_ns);
    if (rc)
        return rc;
    xfer_tomb_insert_held(t, now_ns, id, attempt, reason);
    return 0;
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
    if (at == xfer_ring_newest(&t->ring)) {
        /* The newest entry: a later expiry keeps the ring in order. */
        t->ents[at].expires_ns = now_ns + t->ttl_ns;
        return 0;
    }
    if (xfer_tomb_full(t))
        return XFER_ERR_BUSY;
    append(t, now_ns, id, attempt, reason); /* the map now points here */
    t->dead++;
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
    for (uint32_t i = 0; i < t->ring.n; i++) {
        uint32_t pos = xfer_ring_slot(&t->ring, i), at;
        const xfer_tomb_entry *e = &t->ents[pos];
        if (xfer_idmap_get(&t->map, e->id, &at) && at == pos)
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
}

static void save_entry(void *ud, const xfer_tomb_entry *e)
{
    xfer_le_enc *w = ud;
    xfer_le_enc_u64(w, e->id);
    xfer_le_enc_u64(w, e->expires_ns);
    xfer_le_enc_u32(w, e->attempt);
    xfer_le_enc_u8(w, e->reason);
}

void xfer_tomb_save(const xfer_tomb *t, xfer_le_enc *e)
{
    xfer_le_enc_u32(e, xfer_tomb_live(t));
    xfer_tomb_foreach(t, save_entry, e);
}

static xfer_tomb_entry get_entry(xfer_le_dec *d)
{
    xfer_tomb_entry e = {0};
    e.id = xfer_le_dec_u64(d);
    e.expires_ns = xfer_le_dec_u64(d);
    e.attempt = xfer_le_dec_u32(d);
    e.reason = xfer_le_dec_u8(d);
    return e;
}

bool xfer_tomb_check(const xfer_tomb *t, xfer_le_dec *d, uint32_t holds,
                     xfer_tomb_ok_fn ok, void *ud)
{
    uint64_t n = xfer_le_dec_u32(d), prev = 0;
    if (!xfer_le_dec_ok(d) || n + holds > t->ring.cap)
        return false;
    for (uint64_t i = 0; i < n; i++) {
        xfer_tomb_entry e = get_entry(d);
        if (!xfer_le_dec_ok(d) || e.id == 0 || e.expires_ns < prev ||
            e.expires_ns < t->ttl_ns || (ok && !ok(ud, &e)))
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
        xfer_tomb_entry e = get_entry(d);
        if (!xfer_le_dec_ok(d) || e.id == 0 || e.expires_ns < t->ttl_ns ||
            xfer_tomb_find(t, e.id))
            goto out_bad;
        uint32_t at = xfer_ring_push(&t->ring);
        t->ents[at] = e;
        xfer_idmap_put(&t->map, e.id, at);
        clamp(t, e.expires_ns - t->ttl_ns); /* its birth */
    }
    t->held = holds;
    return 0;
out_bad:
    xfer_tomb_reset(t);
    return XFER_ERR_FORMAT;
}

bool xfer_tomb_set_clock(xfer_tomb *t, uint64_t now_ns)
{
    if (!xfer_ring_empty(&t->ring) &&
        now_ns < t->ents[xfer_ring_newest(&t->ring)].expires_ns - t->ttl_ns)
        return false;
    t->last_now = now_ns;
    return true;
}
