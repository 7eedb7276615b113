/*
 * fsm/idmap.h - an open-addressing map from a 64-bit id (never 0) to a
 * 32-bit slot, with linear probing and backward-shift deletion.
 *
 * The table is sized at init for a fixed number of entries at a load of at
 * most 1/2, so put never allocates and never fails below the cap; lookup is
 * O(1) expected.  The hash is splitmix64 of the id: iteration order, if a
 * caller ever needed one, depends only on the ids, not on pointers.
 */
#ifndef XFER_FSM_IDMAP_H
#define XFER_FSM_IDMAP_H

#include <stdbool.h>
#include <stdint.h>

#include "xfer/fsm.h"

typedef struct xfer_idmap {
    uint64_t *keys; /* 0 = empty */
    uint32_t *vals;
    uint32_t mask;  /* buckets - 1 */
    uint32_t n, cap;
    /* No key above it: the largest put since init or the last reset (an
     * upper bound, never lowered by del).  Ids mostly grow, so most
     * lookups of a new id answer "absent" here instead of with a cache
     * miss into a random bucket of a large table. */
    uint64_t max_id;
} xfer_idmap;

/* Room for `cap` entries.  Errors: XFER_ERR_NOMEM, XFER_ERR_INVALID_ARG. */
int xfer_idmap_init(xfer_idmap *m, uint32_t cap, const xfer_allocator *a);
void xfer_idmap_clear(xfer_idmap *m, const xfer_allocator *a);
/* The value for id; false when absent (at once for an id above max_id). */
bool xfer_idmap_get(const xfer_idmap *m, uint64_t id, uint32_t *val);
/* Insert or overwrite.  The caller keeps n < cap (asserted). */
void xfer_idmap_put(xfer_idmap *m, uint64_t id, uint32_t val);
bool xfer_idmap_del(xfer_idmap *m, uint64_t id);
/* Remove every entry (the table keeps its size).  Never fails. */
void xfer_idmap_reset(xfer_idmap *m);
/* Bytes used per entry of capacity. */
size_t xfer_idmap_bytes_per_entry(void);

#endif /* XFER_FSM_IDMAP_H */
