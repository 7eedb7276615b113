/*
 * fsm/pool.c - first-fit offset allocator with a sorted, coalesced free
 * list (see pool.h).
 *
 * Invariants: ext[0..n) is sorted by offset; every extent is non-empty,
 * aligned at both ends and inside [0, size); no two extents touch or
 * overlap (free coalesces both ways); in_use == size - sum(ext[].len);
 * n <= nallocs + 1 <= cap.  Alloc only shrinks or removes an extent, free
 * adds at most one, so the array preallocated at init always has room.
 */
#include "pool.h"

#include <assert.h>
#include <string.h>

#include "util.h"

int xfer_pool_init(xfer_pool *p, uint64_t size, uint32_t align,
                   uint32_t max_allocs, const xfer_allocator *a)
{
    memset(p, 0, sizeof *p);
    if (align == 0 || (align & (align - 1)) != 0 || max_allocs == 0 ||
        max_allocs >= UINT32_MAX / 2)
        return XFER_ERR_INVALID_ARG;
    uint64_t usable = size & ~((uint64_t)align - 1);
    if (usable == 0)
        return XFER_ERR_INVALID_ARG;
    p->ext = xfer_util_calloc(a, (size_t)max_allocs + 1, sizeof *p->ext);
    if (!p->ext)
        return XFER_ERR_NOMEM;
    p->cap = max_allocs + 1;
    p->max_allocs = max_allocs;
    p->size = usable;
    p->align = align;
    xfer_pool_reset(p);
    return 0;
}

void xfer_pool_clear(xfer_pool *p, const xfer_allocator *a)
{
    xfer_util_free(a, p->ext);
    memset(p, 0, sizeof *p);
}

void xfer_pool_reset(xfer_pool *p)
{
    p->ext[0] = (xfer_pool_ext){.off = 0, .len = p->size};
    p->n = 1;
    p->nallocs = 0;
    p->in_use = 0;
}

uint64_t xfer_pool_round(const xfer_pool *p, uint64_t len)
{
    if (len == 0)
        len = 1;
    if (len > UINT64_MAX - (p->align - 1))
        return UINT64_MAX;
    return (len + p->align - 1) & ~(p->align - 1);
}

static void remove_at(xfer_pool *p, uint32_t i)
{
    memmove(&p->ext[i], &p->ext[i + 1], (p->n - i - 1) * sizeof *p->ext);
    p->n--;
}

int xfer_pool_alloc(xfer_pool *p, uint64_t len, uint64_t *off)
{
    if (p->nallocs >= p->max_allocs)
        return XFER_ERR_BUSY;
    uint64_t need = xfer_pool_round(p, len);
    for (uint32_t i = 0; i < p->n; i++) {
        xfer_pool_ext *e = &p->ext[i];
        if (e->len < need)
            continue;
        *off = e->off;
        e->off += need;
        e->len -= need;
        if (e->len == 0)
            remove_at(p, i);
        p->nallocs++;
        p->in_use += need;
        return 0;
    }
    return XFER_ERR_NO_SPACE;
}

/* Index of the first extent that starts after off. */
static uint32_t upper(const xfer_pool *p, uint64_t off)
{
    uint32_t lo = 0, hi = p->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (p->ext[mid].off <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void xfer_pool_free(xfer_pool *p, uint64_t off, uint64_t len)
{
    uint64_t size = xfer_pool_round(p, len);
    uint32_t i = upper(p, off);
    xfer_pool_ext *prev = i > 0 ? &p->ext[i - 1] : NULL;
    xfer_pool_ext *next = i < p->n ? &p->ext[i] : NULL;
    /* A range that overlaps free space was never allocated: a bug. */
    if (XFER_NEVER(p->nallocs == 0 || off % p->align != 0 ||
                   size > p->size || off > p->size - size ||
                   (prev && prev->off + prev->len > off) ||
                   (next && off + size > next->off)))
        return;
    bool join_prev = prev && prev->off + prev->len == off;
    bool join_next = next && off + size == next->off;
    if (join_prev && join_next) {
        prev->len += size + next->len;
        remove_at(p, i);
    } else if (join_prev) {
        prev->len += size;
    } else if (join_next) {
        next->off = off;
        next->len += size;
    } else {
        assert(p->n < p->cap);
        memmove(&p->ext[i + 1], &p->ext[i], (p->n - i) * sizeof *p->ext);
        p->ext[i] = (xfer_pool_ext){.off = off, .len = size};
        p->n++;
    }
    p->nallocs--;
    p->in_use -= size;
}

const xfer_pool_ext *xfer_pool_extents(const xfer_pool *p, uint32_t *n)
{
    *n = p->n;
    return p->ext;
}

/* One extent of a candidate free list, after one ending at `end` (none
 * before it when first), against the invariants of this file. */
static bool ext_ok(const xfer_pool *p, const xfer_pool_ext *e, bool first,
                   uint64_t end)
{
    if (e->len == 0 || (e->off | e->len) % p->align != 0 ||
        e->len > p->size || e->off > p->size - e->len)
        return false;
    return first || e->off > end; /* else unsorted, overlapping, touching */
}

/* Check a candidate free list against the invariants of this file; on
 * success *free_bytes is its total. */
static bool valid_list(const xfer_pool *p, const xfer_pool_ext *ext,
                       uint32_t n, uint64_t *free_bytes)
{
    uint64_t total = 0, end = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!ext_ok(p, &ext[i], i == 0, end))
            return false;
        end = ext[i].off + ext[i].len;
        total += ext[i].len;
    }
    *free_bytes = total;
    return true;
}

/* The counts and the free bytes of a valid list fit together. */
static bool counts_ok(const xfer_pool *p, uint32_t n, uint32_t nallocs,
                      uint64_t free_bytes)
{
    /* Live ranges are at least one alignment unit each. */
    return n <= p->cap && nallocs <= p->max_allocs && n <= nallocs + 1 &&
           (p->size - free_bytes) / p->align >= nallocs &&
           (nallocs != 0 || free_bytes == p->size);
}

int xfer_pool_set_extents(xfer_pool *p, const xfer_pool_ext *ext, uint32_t n,
                          uint32_t nallocs)
{
    uint64_t free_bytes;
    if (n > p->cap || !valid_list(p, ext, n, &free_bytes) ||
        !counts_ok(p, n, nallocs, free_bytes))
        return XFER_ERR_FORMAT;
    if (n)
        memcpy(p->ext, ext, n * sizeof *ext);
    p->n = n;
    p->nallocs = nallocs;
    p->in_use = p->size - free_bytes;
    return 0;
}

void xfer_pool_save(const xfer_pool *p, xfer_le_enc *e)
{
    xfer_le_enc_u32(e, p->n);
    for (uint32_t i = 0; i < p->n; i++) {
        xfer_le_enc_u64(e, p->ext[i].off);
        xfer_le_enc_u64(e, p->ext[i].len);
    }
}

static xfer_pool_ext get_ext(xfer_le_dec *d)
{
    xfer_pool_ext e;
    e.off = xfer_le_dec_u64(d);
    e.len = xfer_le_dec_u64(d);
    return e;
}

int xfer_pool_restore(xfer_pool *p, xfer_le_dec *d, uint32_t nallocs)
{
    /* Check on a copy of the reader, then read again into the list. */
    xfer_le_dec peek = *d;
    uint32_t n = xfer_le_dec_u32(&peek);
    uint64_t total = 0, end = 0;
    if (!xfer_le_dec_ok(&peek) || n > p->cap)
        return XFER_ERR_FORMAT;
    for (uint32_t i = 0; i < n; i++) {
        xfer_pool_ext e = get_ext(&peek);
        if (!xfer_le_dec_ok(&peek) || !ext_ok(p, &e, i == 0, end))
            return XFER_ERR_FORMAT;
        end = e.off + e.len;
        total += e.len;
    }
    if (!counts_ok(p, n, nallocs, total))
        return XFER_ERR_FORMAT;
    (void)xfer_le_dec_u32(d);
    for (uint32_t i = 0; i < n; i++)
        p->ext[i] = get_ext(d);
    p->n = n;
    p->nallocs = nallocs;
    p->in_use = p->size - total;
    return 0;
}

uint64_t xfer_pool_largest(const xfer_pool *p)
{
    uint64_t best = 0;
    for (uint32_t i = 0; i < p->n; i++)
        if (p->ext[i].len > best)
            best = p->ext[i].len;
    return best;
}
