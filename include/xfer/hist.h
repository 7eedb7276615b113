/*
 * xfer/hist.h - a fixed-bucket latency histogram, the shape Prometheus
 * histograms are exposed in (xfer/metrics.h).
 *
 * Buckets have fixed upper bounds from 10 us to 30 s (xfer_hist_bound_ns);
 * an observation above the last bound counts only in `count` and `sum_ns`
 * (the +Inf bucket).  `bucket[i]` is not cumulative: it counts the
 * observations in (bound(i-1), bound(i)].  Plain data, no allocation; one
 * thread updates a histogram (the loop that owns the object keeping it).
 */
#ifndef XFER_HIST_H
#define XFER_HIST_H

#include <stdint.h>

#include "xfer/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define XFER_HIST_BUCKETS 20

typedef struct xfer_hist {
    uint64_t count;
    uint64_t sum_ns;
    uint64_t bucket[XFER_HIST_BUCKETS];
} xfer_hist;

/* The upper bound of bucket i in nanoseconds (i < XFER_HIST_BUCKETS), or
 * UINT64_MAX for any other i. */
XFER_API uint64_t xfer_hist_bound_ns(unsigned i);
/* Count one observation of ns nanoseconds.  `h` borrowed. */
XFER_API void xfer_hist_add(xfer_hist *h, uint64_t ns);

#ifdef __cplusplus
}
#endif
#endif /* XFER_HIST_H */
