/*
 * fsm/ring.h - the one ring buffer of xfer: the indices of a FIFO over a
 * caller's array.
 *
 * The ring holds no items, only where they are: the caller keeps a typed
 * array of `cap` slots and asks the ring which slot to write (push), which
 * to read (pop, slot), and moves the items when it grows the array
 * (xfer_ring_move).  So one ring serves every item type without casts, and
 * a slot number stays valid for an item until it is popped (the tombstone
 * table keys its id map by it).  Header only (static inline, libc only),
 * but for growing the array through an injected allocator (ring.c): fsm/
 * uses it, and transport/ and the tools reach it through fsm_private_dep.
 *
 * What must stay true: n <= cap <= XFER_RING_MAX_CAP, head < cap (or 0
 * when cap is 0), and the items are the slots head, head + 1, ... (mod cap),
 * oldest first.  Nothing here allocates, and nothing is thread-safe: a
 * ring shared between threads is guarded by its owner (the mailbox's lock).
 */
#ifndef XFER_FSM_RING_H
#define XFER_FSM_RING_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "xfer/fsm.h"

/* Larger rings would overflow head + i in 32 bits. */
#define XFER_RING_MAX_CAP (UINT32_C(1) << 31)

typedef struct xfer_ring {
    uint32_t head; /* slot of the oldest item */
    uint32_t n;    /* items */
    uint32_t cap;  /* slots of the caller's array */
} xfer_ring;

/* An empty ring over an array of cap slots (cap <= XFER_RING_MAX_CAP). */
static inline void xfer_ring_init(xfer_ring *r, uint32_t cap)
{
    assert(cap <= XFER_RING_MAX_CAP);
    r->head = r->n = 0;
    r->cap = cap;
}

/* Forget every item (the array stays). */
static inline void xfer_ring_reset(xfer_ring *r)
{
    r->head = r->n = 0;
}

static inline bool xfer_ring_empty(const xfer_ring *r)
{
    return r->n == 0;
}

static inline bool xfer_ring_full(const xfer_ring *r)
{
    return r->n == r->cap;
}

/* The slot of the i-th oldest item (i < n), or for i == n the slot the
 * next push takes. */
static inline uint32_t xfer_ring_slot(const xfer_ring *r, uint32_t i)
{
    assert(i < r->cap);
    uint32_t s = r->head + i;
    return s >= r->cap ? s - r->cap : s;
}

/* The newest item's slot (the ring must not be empty). */
static inline uint32_t xfer_ring_newest(const xfer_ring *r)
{
    assert(r->n > 0);
    return xfer_ring_slot(r, r->n - 1);
}

/* Append an item: returns the slot to write it to.  The ring must not be
 * full. */
static inline uint32_t xfer_ring_push(xfer_ring *r)
{
    assert(r->n < r->cap);
    uint32_t s = xfer_ring_slot(r, r->n);
    r->n++;
    return s;
}

/* Remove the oldest item: returns its slot, valid to read until the next
 * push.  The ring must not be empty. */
static inline uint32_t xfer_ring_pop(xfer_ring *r)
{
    assert(r->n > 0);
    uint32_t s = r->head;
    r->head = s + 1 == r->cap ? 0 : s + 1;
    r->n--;
    return s;
}

/*
 * Copy the items, oldest first, from the ring's array `from` to slots
 * 0..n-1 of `to` (elem bytes each), which becomes the ring's array with
 * cap slots (n <= cap <= XFER_RING_MAX_CAP).  The caller allocated `to`
 * and frees `from` afterwards; they must not overlap.
 */
static inline void xfer_ring_move(xfer_ring *r, void *to, uint32_t cap,
                                  const void *from, size_t elem)
{
    assert(r->n <= cap && cap <= XFER_RING_MAX_CAP);
    if (r->n) {
        uint32_t first = r->cap - r->head < r->n ? r->cap - r->head : r->n;
        memcpy(to, (const uint8_t *)from + (size_t)r->head * elem,
               (size_t)first * elem);
        memcpy((uint8_t *)to + (size_t)first * elem, from,
               (size_t)(r->n - first) * elem);
    }
    r->head = 0;
    r->cap = cap;
}

/*
 * Grow the ring to a new array of cap slots (n <= cap <=
 * XFER_RING_MAX_CAP) of elem bytes, allocated through `a` (borrowed;
 * zeroed: libc): the items move to it (xfer_ring_move) and `arr`, the old
 * array, is freed through `a`.  Returns the new array, or NULL when out of
 * memory (then nothing changed).
 */
void *xfer_ring_grow(xfer_ring *r, void *arr, size_t elem, uint32_t cap,
                     const xfer_allocator *a);

#endif /* XFER_FSM_RING_H */
