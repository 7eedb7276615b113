/*
 * fsm/heap.h - a deadline-ordered binary min-heap over record slots.
 *
 * Each slot (a record index in a caller's table) holds at most one deadline.
 * Ties are broken by the order deadlines were set, so the pop order depends
 * only on inputs, never on pointers (I10).  Capacity is fixed at init: after
 * that, set/remove/pop never allocate and never fail.  This is the structure
 * leases and transfer deadlines live in; insertion order is never assumed to
 * be expiry order.
 */
#ifndef XFER_FSM_HEAP_H
#define XFER_FSM_HEAP_H

#include <stdbool.h>
#include <stdint.h>

#include "xfer/fsm.h"

typedef struct xfer_heap {
    uint32_t *heap; /* slot ids in heap order */
    uint32_t *pos;  /* pos[slot]: index in heap + 1, 0 when absent */
    uint64_t *key;  /* key[slot]: deadline */
    uint64_t *tie;  /* tie[slot]: set order */
    uint32_t n, cap;
    uint64_t seq;
} xfer_heap;

/* Errors: XFER_ERR_NOMEM.  cap slots, ids 0..cap-1. */
int xfer_heap_init(xfer_heap *h, uint32_t cap, const xfer_allocator *a);
void xfer_heap_clear(xfer_heap *h, const xfer_allocator *a);
/* Insert slot, or move it to a new deadline. */
void xfer_heap_set(xfer_heap *h, uint32_t slot, uint64_t deadline);
/* Remove slot if present. */
void xfer_heap_remove(xfer_heap *h, uint32_t slot);
bool xfer_heap_contains(const xfer_heap *h, uint32_t slot);
/* The earliest entry; false when empty. */
bool xfer_heap_peek(const xfer_heap *h, uint32_t *slot, uint64_t *deadline);
/* Earliest deadline or UINT64_MAX. */
uint64_t xfer_heap_min(const xfer_heap *h);
/* Entries in the heap, and the slot of the i-th (i < count) in heap
 * order, which is not pop order: for walking every entry (saves). */
static inline uint32_t xfer_heap_count(const xfer_heap *h)
{
    return h->n;
}

static inline uint32_t xfer_heap_slot_at(const xfer_heap *h, uint32_t i)
{
    return h->heap[i];
}

/* A slot's deadline and set order: entries pop in (deadline, order)
 * order.  False (nothing written) when the slot is not in the heap. */
static inline bool xfer_heap_get(const xfer_heap *h, uint32_t slot,
                                 uint64_t *deadline, uint64_t *order)
{
    if (slot >= h->cap || !h->pos[slot])
        return false;
    *deadline = h->key[slot];
    *order = h->tie[slot];
    return true;
}
/* Bytes used per slot (for memory accounting). */
#define XFER_HEAP_BYTES_PER_SLOT (4 + 4 + 8 + 8)

#endif /* XFER_FSM_HEAP_H */
