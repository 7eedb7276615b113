/*
 * fsm/tomb.c - FIFO tombstones with one TTL; see tomb.h for why FIFO order
 * is expiry order here.
 *
 * Invariants: n + held <= cap; ring[(head + i) % cap] for i < n are the
 * entries, oldest first, with non-decreasing expires_ns; the map holds each
 * id once, pointing at its newest entry; the others (`dead` of them) were
 * superseded by a refresh and are popped silently.
 */
#include "tomb.h"

#include <assert.h>
#include <string.h>

#include "util.h"

int xfer_tomb_init(xfer_tomb *t, uint32_t cap, uint64_t ttl_ns,
                   const xfer_allocator *a)
{
    memset(t, 0, sizeof *t);
    if (cap == 0)
        return XFER_ERR_INVALID_ARG;
    t->ring = xfer_util_calloc(a, cap, sizeof *t->ring);
    if (!t->ring)
        return XFER_ERR_NOMEM;
    int rc = xfer_idmap_init(&t->map, cap, a);
    if (rc) {
        xfer_util_free(a, t->ring);
        t->ring = NULL;
        return rc;
    }
    t->cap = cap;
    t->ttl_ns = ttl_ns;
    return 0;
}

void xfer_tomb_clear(xfer_tomb *t, const xfer_allocator *a)
{
    xfer_util_free(a, t->ring);
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
    while (t->n && t->ring[t->head].expires_ns <= now_ns &&
           (max == 0 || dropped < max)) {
        xfer_tomb_entry e = t->ring[t->head];
        uint32_t at;
        bool live = xfer_idmap_get(&t->map, e.id, &at) && at == t->head;
        t->head = (t->head + 1) % t->cap;
        t->n--;
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
    return &t->ring[at];
}

int xfer_tomb_hold(xfer_tomb *t, uint64_t now_ns)
{
    if (t->n + t->held >= t->cap)
        xfer_tomb_expire(t, now_ns, 0, NULL, NULL);
    if (t->n + t->held >= t->cap)
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
    uint32_t at = (t->head + t->n) % t->cap;
    t->ring[at] = (xfer_tomb_entry){.id = id,
                                    .expires_ns = now_ns + t->ttl_ns,
                                    .attempt = attempt,
                                    .reason = reason};
    xfer_idmap_put(&t->map, id, at);
    t->n++;
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
    if (t->n + t->held >= t->cap)
        xfer_tomb_expire(t, now_ns, 0, NULL, NULL);
    uint32_t at;
    if (!xfer_idmap_get(&t->map, id, &at))
        return xfer_tomb_insert(t, now_ns, id, attempt, reason);
    if (at == (t->head + t->n - 1) % t->cap) {
        /* The newest entry: a later expiry keeps the ring in order. */
        t->ring[at].expires_ns = now_ns + t->ttl_ns;
        return 0;
    }
    if (t->n + t->held >= t->cap)
        return XFER_ERR_BUSY;
    append(t, now_ns, id, attempt, reason); /* the map now points here */
    t->dead++;
    return 0;
}

uint32_t xfer_tomb_live(const xfer_tomb *t)
{
    return t->n - t->dead;
}

uint64_t xfer_tomb_next_expiry(const xfer_tomb *t)
{
    return t->n ? t->ring[t->head].expires_ns : UINT64_MAX;
}

void xfer_tomb_foreach(const xfer_tomb *t,
                       void (*fn)(void *ud, const xfer_tomb_entry *e),
                       void *ud)
{
    for (uint32_t i = 0; i < t->n; i++) {
        uint32_t pos = (t->head + i) % t->cap, at;
        const xfer_tomb_entry *e = &t->ring[pos];
        if (xfer_idmap_get(&t->map, e->id, &at) && at == pos)
            fn(ud, e);
    }
}

size_t xfer_tomb_bytes_per_entry(void)
{
    return sizeof(xfer_tomb_entry) + xfer_idmap_bytes_per_entry();
}
