/*
 * tests/cudafake/fakecuda.h - the test's side of the fake CUDA driver
 * (fakecuda.c, built as libcuda.so.1): helpers a test looks up with dlsym
 * in the library's own handle, so the library and the test share one
 * driver.  Test code only.
 *
 * "Device memory" is an address range reserved PROT_NONE (any direct
 * dereference by the library is a SIGSEGV) whose bytes live in a host
 * buffer behind it; only the fake's copies and fakecuda_read/_write reach
 * them.  Knobs, read at cuInit from the environment:
 *   FAKECUDA_COUNT      device count (default 1)
 *   FAKECUDA_COUNT_RC   cuDeviceGetCount's return (default 0; it still
 *                       writes the count)
 *   FAKECUDA_INIT_RC    cuInit's return (default 0)
 *   FAKECUDA_COPY_FAIL  the Nth async copy (1-based, both directions
 *                       counted together) copies nothing, and the next
 *                       stream callback receives CUDA_ERROR_UNKNOWN
 *   FAKECUDA_START_FAIL the Nth async copy call (1-based, both directions)
 *                       returns CUDA_ERROR_UNKNOWN at once, queueing
 *                       nothing (a copy refused at its start)
 *   FAKECUDA_COPY_DELAY_MS every copy takes this long on its stream
 */
#ifndef XFER_TEST_FAKECUDA_H
#define XFER_TEST_FAKECUDA_H

#include <stddef.h>
#include <stdint.h>

typedef struct fakecuda_stats {
    uint64_t inits;       /* cuInit calls */
    uint64_t counts;      /* cuDeviceGetCount calls */
    uint64_t d2h, h2d;    /* async copies queued, by direction */
    uint64_t done;        /* async copies the stream threads ran */
    uint64_t failed;      /* of which failed (FAKECUDA_COPY_FAIL) */
    uint64_t start_failed; /* async copy calls refused (FAKECUDA_START_FAIL) */
    uint64_t callbacks;   /* stream callbacks run */
    uint64_t streams;     /* streams alive now */
    uint64_t pinned;      /* cuMemHostAlloc buffers alive now */
} fakecuda_stats;

/* The helpers' types, for dlsym; their names are the type names without
 * _fn.  alloc: device memory on `device`, zeroed (NULL: out of memory);
 * read/write: copy from or into it (-1: not inside one allocation). */
typedef void *(*fakecuda_alloc_fn)(int device, size_t len);
typedef void (*fakecuda_free_fn)(void *dev);
typedef int (*fakecuda_read_fn)(void *dst, const void *dev, size_t len);
typedef int (*fakecuda_write_fn)(void *dev, const void *src, size_t len);
typedef void (*fakecuda_stats_get_fn)(fakecuda_stats *out);
/* An event (CUevent) that cuEventQuery finds NOT_READY until signalled,
 * then complete; fail: cuEventQuery answers an error from then on. */
typedef void *(*fakecuda_event_new_fn)(void);
typedef void (*fakecuda_event_signal_fn)(void *ev);
typedef void (*fakecuda_event_fail_fn)(void *ev);
typedef void (*fakecuda_event_free_fn)(void *ev);

#endif /* XFER_TEST_FAKECUDA_H */
