/*
 * fsm/ring.c - growing a ring's array (fsm/ring.h) through the injected
 * allocator: the one copy of the allocate, move, free sequence that every
 * growable FIFO of the library needs.  The rest of the ring is header only.
 */
#include "ring.h"

#include "util.h"

void *xfer_ring_grow(xfer_ring *r, void *arr, size_t elem, uint32_t cap,
                     const xfer_allocator *a)
{
    if (cap < r->n || cap > XFER_RING_MAX_CAP)
        return NULL;
    void *to = xfer_util_calloc(a, cap, elem);
    if (!to)
        return NULL;
    xfer_ring_move(r, to, cap, arr, elem);
    xfer_util_free(a, arr);
    return to;
}
