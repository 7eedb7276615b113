/*
 * xfer/testdev.h - the test device: a memory kind for tests and CI, which
 * have no GPU.  TEST-ONLY: it is slow and process-local; never serve
 * data from it.
 *
 * It behaves as device memory does toward the library: the library cannot
 * read or write it directly.  Its pages are mapped PROT_NONE except while
 * the test device's copy engine (one thread of its own per process) copies
 * them, so a library bug that dereferences device memory is a SIGSEGV in
 * the test that meets it.  Its copies (the library's asynchronous ones,
 * and the synchronous ones below) all run on that thread, in the order of
 * their due times: a copy made late by a rule completes after copies
 * queued behind it (out of order), and a copy a rule fails reports
 * XFER_ERR_COPY without touching its destination.
 *
 * A test event (xfer_testdev_event_*) stands in for a CUDA event in
 * xfer_engine_submit_gated: it completes when the test signals it.
 *
 * Pure C11; usable from C++.
 */
#ifndef XFER_TESTDEV_H
#define XFER_TESTDEV_H

#include <stddef.h>
#include <stdint.h>

#include "xfer/errors.h"
#include "xfer/mem.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * xfer_testdev_alloc - `len` bytes (> 0) of test device memory, zeroed,
 * page aligned, mapped PROT_NONE.  *out written on 0 (owned by the
 * caller until xfer_testdev_free).  Any thread.  Errors:
 * XFER_ERR_INVALID_ARG (len 0, NULL out), XFER_ERR_BUSY (1024
 * allocations live), XFER_ERR_NOMEM (mmap or the copy thread failed).
 */
XFER_API int xfer_testdev_alloc(size_t len, void **out);

/* Unmap an allocation (p as xfer_testdev_alloc gave it; NULL and an
 * unknown pointer are ignored).  No copy of it may be in flight (the
 * caller's duty, as with cudaFree).  Any thread. */
XFER_API void xfer_testdev_free(void *p);

/*
 * Synchronous copies for tests and the binding: they go through the copy
 * thread (never a dereference by the caller) and obey the copy rules
 * below like the library's copies.  `dev` .. dev+len must lie inside one
 * live allocation; the host side is borrowed until return.  Any thread
 * but the copy thread.  Errors: XFER_ERR_INVALID_ARG (NULL, or a range
 * not inside one allocation), XFER_ERR_COPY (a rule failed it),
 * XFER_ERR_NOMEM.
 */
XFER_API int xfer_testdev_read(void *dst, const void *dev, size_t len);
XFER_API int xfer_testdev_write(void *dev, const void *src, size_t len);

/* Directions a copy rule matches. */
#define XFER_TESTDEV_D2H 1u /* device to host (the producer's reads) */
#define XFER_TESTDEV_H2D 2u /* host to device (the shard's writes) */
#define XFER_TESTDEV_ANY 3u

/*
 * A copy rule: what the test device does to the copies that match.  Rules
 * are tried in the order added; the first that matches and fires decides.
 * Synchronous copies (xfer_testdev_read/_write) never match: they are the
 * tests' own view of the memory.
 */
typedef struct xfer_testdev_rule {
    uint32_t dir;          /* XFER_TESTDEV_D2H/H2D/ANY */
    uint32_t skip;         /* let this many matching copies pass first */
    uint32_t count;        /* fire at most this many times; 0: unlimited */
    uint32_t prob_ppm;     /* chance per matching copy; 0: always */
    uint64_t delay_ns;     /* complete this much later (0: at once) */
    uint64_t delay_max_ns; /* > delay_ns: a delay drawn uniformly from
                              [delay_ns, delay_max_ns] per copy (seeded),
                              so copies complete out of order */
    int fail;              /* nonzero: the copy fails (XFER_ERR_COPY),
                              after its delay, its destination untouched */
    int flip;              /* nonzero (and fail 0): the copy succeeds but
                              flips the low bit of its destination's middle
                              byte (byte len/2), a silent corruption for
                              the integrity tests (docs/integrity.md) */
} xfer_testdev_rule;

/*
 * xfer_testdev_add_rule - add a copy rule (copied) for every asynchronous
 * copy from now on, process-wide.  Any thread.  Errors:
 * XFER_ERR_INVALID_ARG (NULL, dir 0 or > ANY), XFER_ERR_BUSY (64 rules).
 */
XFER_API int xfer_testdev_add_rule(const xfer_testdev_rule *r);
/* Remove every rule and reset the generator to `seed` (0: a fixed seed).
 * Any thread. */
XFER_API void xfer_testdev_clear_rules(uint64_t seed);

/* Counters of the copy thread, process-wide.  Any thread. */
typedef struct xfer_testdev_stats {
    uint64_t allocs_live;
    uint64_t copies_d2h, copies_h2d; /* asynchronous copies completed */
    uint64_t copies_failed;          /* of those, failed by a rule */
    uint64_t copies_delayed;         /* of those, made late by a rule */
    uint64_t copies_reordered;       /* completed before one queued
                                        earlier */
    uint64_t sync_copies;            /* xfer_testdev_read/_write */
    uint64_t in_flight;              /* queued, not yet completed */
} xfer_testdev_stats;
XFER_API void xfer_testdev_stats_get(xfer_testdev_stats *st);

/*
 * A test event: what xfer_engine_submit_gated accepts in place of a CUDA
 * event for transfers whose pool is of the TESTDEV kind.  New events are
 * not complete; xfer_testdev_event_signal completes one (any thread).
 * *out written on 0; XFER_ERR_INVALID_ARG, XFER_ERR_NOMEM.  Free an event
 * only when no gated submit borrows it any more (its result came).
 */
typedef struct xfer_testdev_event xfer_testdev_event;
XFER_API int xfer_testdev_event_new(xfer_testdev_event **out);
XFER_API void xfer_testdev_event_signal(xfer_testdev_event *ev);
/* 1 when signalled, else 0 (NULL: 1).  Any thread. */
XFER_API int xfer_testdev_event_done(const xfer_testdev_event *ev);
XFER_API void xfer_testdev_event_free(xfer_testdev_event *ev);

#ifdef __cplusplus
}
#endif
#endif /* XFER_TESTDEV_H */
