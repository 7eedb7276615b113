/*
 * fsm/idmap.h - an open-addressing map from a 64-bit id (never 0) to a
 * 32-bit slot, with linear probing and backward-shift deletion.
 *
 * Each bucket holds its key and its value side by side (16 B with the
 * key's home bucket, four to a 64-byte line, the array aligned to a line),
 * so a hit costs one cache miss, not one for the key and one for the
 * value.  Ids from one producer
 * are mostly sequential, so the home bucket keeps runs of ids together:
 * ids 4k .. 4k+3 go to the four buckets of one line, in order, the line
 * chosen by Fibonacci hashing of k (reduced to the line count by a
 * multiply, not a mask).  Sequential inserts, lookups and expiries then
 * touch one line per four ids instead of four random lines of a large
 * table, and the runs of the ids in flight spread evenly over the lines.
 *
 * The table is sized at init for a fixed number of entries at a load of at
 * most 2/3 (the bucket count is not a power of two: 1.5 buckets per entry,
 * rounded up to whole lines), so put never allocates and never fails below
 * the cap; lookup is O(1) expected.  Placement depends only on the ids, not
 * on pointers.  The hash is not keyed (neither was splitmix64 before it,
 * which is invertible): ids chosen to collide make probes long, never
 * wrong.
 */
#ifndef XFER_FSM_IDMAP_H
#define XFER_FSM_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/fsm.h"

/* log2 of the ids that share a line (4 buckets of 16 B = 64 B). */
#define XFER_IDMAP_RUN_BITS 2u
#define XFER_IDMAP_RUN (1u << XFER_IDMAP_RUN_BITS)

typedef struct xfer_idmap_bucket {
    uint64_t key; /* 0 = empty */
    uint32_t val;
    uint32_t home; /* xfer_idmap_home(key), kept in what was padding so
                    * that a delete's backward shift need not rehash */
} xfer_idmap_bucket;

typedef struct xfer_idmap {
    xfer_idmap_bucket *b; /* nb buckets, aligned to 64 bytes inside raw */
    void *raw;            /* the allocation (b plus the alignment slack) */
    uint32_t nb;          /* buckets: a multiple of XFER_IDMAP_RUN */
    uint32_t n, cap;
    /* No key above it: the largest put since init or the last reset (an
     * upper bound, never lowered by del).  Ids mostly grow, so most
     * lookups of a new id answer "absent" here instead of with a cache
     * miss into a random bucket of a large table. */
    uint64_t max_id;
} xfer_idmap;

/* Room for `cap` entries; a borrows the allocator (copied by the caller's
 * object, passed again to clear).  Errors: XFER_ERR_NOMEM,
 * XFER_ERR_INVALID_ARG (cap 0 or above 2^30).  On failure m is zeroed. */
int xfer_idmap_init(xfer_idmap *m, uint32_t cap, const xfer_allocator *a);
void xfer_idmap_clear(xfer_idmap *m, const xfer_allocator *a);
/* The value for id; false when absent (at once for an id above max_id). */
bool xfer_idmap_get(const xfer_idmap *m, uint64_t id, uint32_t *val);
/* Insert or overwrite.  The caller keeps n < cap (asserted). */
void xfer_idmap_put(xfer_idmap *m, uint64_t id, uint32_t val);
bool xfer_idmap_del(xfer_idmap *m, uint64_t id);
/* Delete id only when it maps to val (one probe for "get, compare, del").
 * Returns whether it was deleted. */
bool xfer_idmap_del_if(xfer_idmap *m, uint64_t id, uint32_t val);
/* Remove every entry (the table keeps its size).  Never fails. */
void xfer_idmap_reset(xfer_idmap *m);
/* Bytes used per entry of capacity (at the table's 2/3 load). */
size_t xfer_idmap_bytes_per_entry(void);
/* The bucket id would go to if nothing were in the way (for tests of the
 * layout: collisions, wrap). */
uint32_t xfer_idmap_home(const xfer_idmap *m, uint64_t id);

#endif /* XFER_FSM_IDMAP_H */
