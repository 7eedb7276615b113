/*
 * transport/hist.c - the fixed-bucket latency histogram of xfer/hist.h.
 *
 * The bounds are a 1-2.5-5 ladder from 10 us to 30 s: wide enough for a
 * loopback round trip and for a lease, few enough that one histogram is
 * 176 bytes.  Finding the bucket is a short linear scan from the bottom,
 * since most observations are small.
 */
#include "xfer/hist.h"

static const uint64_t bounds[XFER_HIST_BUCKETS] = {
    10000ull,      25000ull,      50000ull,      100000ull,
    250000ull,     500000ull,     1000000ull,    2500000ull,
    5000000ull,    10000000ull,   25000000ull,   50000000ull,
    100000000ull,  250000000ull,  500000000ull,  1000000000ull,
    2500000000ull, 5000000000ull, 10000000000ull, 30000000000ull,
};

uint64_t xfer_hist_bound_ns(unsigned i)
{
    return i < XFER_HIST_BUCKETS ? bounds[i] : UINT64_MAX;
}

void xfer_hist_add(xfer_hist *h, uint64_t ns)
{
    if (!h)
        return;
    h->count++;
    h->sum_ns += ns;
    for (unsigned i = 0; i < XFER_HIST_BUCKETS; i++)
        if (ns <= bounds[i]) {
            h->bucket[i]++;
            return;
        }
}
