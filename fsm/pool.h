/*
 * fsm/pool.h - the offset allocator behind a consumer shard's pool.
 *
 * It hands out aligned ranges of [0, size) by first fit over a list of free
 * extents sorted by offset, and coalesces on free, so the free list is always
 * exactly the complement of the live ranges (no two free extents touch).
 * The extent array is sized at init for the worst case: with at most
 * max_allocs ranges live there are at most max_allocs + 1 free extents, so
 * free never allocates and never fails.  No pointers, no hashing: the result
 * of a sequence of calls depends only on the calls (I10).
 *
 * The pool does not own memory; the shard maps offsets onto its buffer.
 */
#ifndef XFER_FSM_POOL_H
#define XFER_FSM_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "le.h"
#include "xfer/fsm.h"

typedef struct xfer_pool_ext {
    uint64_t off, len; /* both multiples of the alignment, len > 0 */
} xfer_pool_ext;

typedef struct xfer_pool {
    xfer_pool_ext *ext;   /* free extents, sorted by offset */
    uint32_t n, cap;      /* cap = max_allocs + 1 */
    uint32_t nallocs, max_allocs;
    uint64_t size;        /* usable bytes: the size rounded down to align */
    uint64_t align;       /* a power of 2 */
    uint64_t in_use;      /* bytes in live ranges (rounded sizes) */
} xfer_pool;

/*
 * Manage [0, size rounded down to align).  Errors: XFER_ERR_INVALID_ARG
 * (align not a power of 2, no usable byte, max_allocs 0 or too large),
 * XFER_ERR_NOMEM.
 */
int xfer_pool_init(xfer_pool *p, uint64_t size, uint32_t align,
                   uint32_t max_allocs, const xfer_allocator *a);
/* Free the extent array.  Accepts a zeroed or half-built pool. */
void xfer_pool_clear(xfer_pool *p, const xfer_allocator *a);

/* The bytes a range of len occupies: max(len, 1) rounded up to the
 * alignment; UINT64_MAX when that overflows. */
uint64_t xfer_pool_round(const xfer_pool *p, uint64_t len);

/* Allocate a range for len bytes; *off written on 0.
 * Errors: XFER_ERR_NO_SPACE (no free extent fits), XFER_ERR_BUSY
 * (max_allocs ranges live). */
int xfer_pool_alloc(xfer_pool *p, uint64_t len, uint64_t *off);
/* Give back a range returned by xfer_pool_alloc for the same len.  Never
 * fails; freeing something not allocated is a bug (asserted). */
void xfer_pool_free(xfer_pool *p, uint64_t off, uint64_t len);

/* Make everything free again. */
void xfer_pool_reset(xfer_pool *p);

/* The free extents, sorted by offset (for saving state and for tests). */
const xfer_pool_ext *xfer_pool_extents(const xfer_pool *p, uint32_t *n);
/*
 * Replace the free list (for loading state): ext must be sorted, aligned,
 * inside the pool, non-empty and not touching each other, n <= cap, and
 * nallocs <= max_allocs with n <= nallocs + 1.  Errors: XFER_ERR_FORMAT
 * (then the pool is unchanged).
 */
int xfer_pool_set_extents(xfer_pool *p, const xfer_pool_ext *ext, uint32_t n,
                          uint32_t nallocs);

/* Write the free list to e (borrowed): a count (u32), then per extent its
 * offset and length (u64 each), little-endian. */
void xfer_pool_save(const xfer_pool *p, xfer_le_enc *e);
/*
 * Replace the free list by one xfer_pool_save wrote, read from d
 * (borrowed), with nallocs live ranges, under the rules of
 * xfer_pool_set_extents.  Errors: XFER_ERR_FORMAT (then the pool is
 * unchanged, and d is bad or has read some of the list).
 */
int xfer_pool_restore(xfer_pool *p, xfer_le_dec *d, uint32_t nallocs);

/* Largest free extent (0 when full). */
uint64_t xfer_pool_largest(const xfer_pool *p);

#endif /* XFER_FSM_POOL_H */
