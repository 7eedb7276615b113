/*
 * fsm/util.h - small private helpers shared by the pure machines (and,
 * through fsm_private_dep, by the drivers of transport/): the injected
 * allocator with its libc default (util.c), versioned structs, trace
 * emission, and a seedable splitmix64 for ids.  Nothing here reads a clock
 * or draws randomness on its own; everything comes in through arguments.
 */
#ifndef XFER_FSM_UTIL_H
#define XFER_FSM_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "xfer/fsm.h"
#include "xfer/trace.h"

/*
 * The injected allocator, with the libc default a zeroed xfer_allocator
 * means.  These live in util.c, the one file of fsm/ that may name malloc
 * and free (the build's wall checks that every other object reaches memory
 * only through these).
 */
/* Allocate size bytes through `a` (borrowed), or malloc when `a` has no
 * alloc function.  NULL on failure. */
void *xfer_util_alloc(const xfer_allocator *a, size_t size);
/* n * size zeroed bytes through `a`; NULL on failure or overflow. */
void *xfer_util_calloc(const xfer_allocator *a, size_t n, size_t size);
/* Free p (NULL is fine) through `a`, or free() when `a` has no free. */
void xfer_util_free(const xfer_allocator *a, void *p);

/*
 * Versioned public structs (configs and stats, docs/design.md section
 * 4.1).  Version v of a struct is the first lens[v - 1] bytes of its latest
 * layout: a version only ever appends fields.  Copy the bytes `version`
 * defines from src to dst (at most the latest size; both borrowed).
 * Returns 0, or XFER_ERR_INVALID_ARG (nothing copied) when `version` is not
 * one of the nversions known.  A config is read with dst = the defaults
 * and src = the caller's struct, so the fields its version lacks keep their
 * defaults and nothing past its end is read; stats go out with src = the
 * latest figures and dst = the caller's struct, so nothing past its end is
 * written.
 */
int xfer_util_versioned_copy(void *dst, const void *src, uint32_t version,
                             const size_t *lens, uint32_t nversions);
/* The number of versions in a `lens` array. */
#define XFER_UTIL_NVERSIONS(lens)                                           \
    ((uint32_t)(sizeof(lens) / sizeof((lens)[0])))

/* Give a record its sequence number and pass it to the sink, if any. */
static inline void xfer_util_emit(const xfer_trace_sink *sink, uint64_t *seq,
                                  xfer_trace_rec *rec)
{
    rec->seq = (*seq)++;
    if (sink->fn)
        sink->fn(sink->ud, rec);
}

/* splitmix64: a bijective mixer, used for hashing ids and as a fixed-seed
 * generator where no RNG was injected. */
static inline uint64_t xfer_util_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ALWAYS/NEVER in the SQLite manner: mark "cannot happen" branches.  In
 * debug builds they assert; in release they let the code take the safe
 * branch. */
#include <assert.h>
#ifdef NDEBUG
#define XFER_ALWAYS(x) (x)
#define XFER_NEVER(x) (x)
#else
#define XFER_ALWAYS(x) ((x) ? 1 : (assert(0), 0))
#define XFER_NEVER(x) ((x) ? (assert(0), 1) : 0)
#endif

#endif /* XFER_FSM_UTIL_H */
