/*
 * tools/bench/figure.h - one measured figure of the TCP bench (a closed
 * loop of "units": xfer transfers, echo fan-outs, Python transfers) and the
 * median of several runs of it.
 *
 * A figure is made from two /proc samples (proc.h) around the measured
 * window and the latencies of the units that completed in it.  Every field
 * is a double so that the median of N runs is taken field by field.
 */
#ifndef XFER_BENCH_FIGURE_H
#define XFER_BENCH_FIGURE_H

#include <stddef.h>
#include <stdint.h>

#include "proc.h"

/* X(name, what it is). */
#define BENCH_FIG_FIELDS(X)                                                   \
    X(units, "units completed ok")                                            \
    X(failed, "units that failed")                                            \
    X(secs, "wall seconds of the window")                                     \
    X(per_s, "units per second")                                              \
    X(p50_us, "median latency of a unit, us")                                 \
    X(p99_us, "99th percentile latency, us")                                  \
    X(gbps, "payload GB/s (data figures)")                                    \
    X(cpu_us, "CPU us per unit, driver + peers")                              \
    X(driver_us, "CPU us per unit, the driver (producer, echo client)")       \
    X(peers_us, "CPU us per unit, all peers (shards, echo processes)")        \
    X(sys_pct, "share of that CPU spent in the kernel, %")                    \
    X(csw, "context switches per unit, driver + peers")                       \
    X(calls, "driver syscalls per unit, where the driver counts them")        \
    X(driver_r, "read-type syscalls per unit, the driver")                    \
    X(driver_w, "write-type syscalls per unit, the driver")                   \
    X(peers_r, "read-type syscalls per unit, all peers")                      \
    X(peers_w, "write-type syscalls per unit, all peers")                     \
    X(other_cpus, "CPUs busy with other processes meanwhile")

typedef struct bench_fig {
#define BENCH_FIG_FIELD_(name, what) double name;
    BENCH_FIG_FIELDS(BENCH_FIG_FIELD_)
#undef BENCH_FIG_FIELD_
} bench_fig;

/*
 * Fill *f from the samples a (before) and b (after) of the window, the ok
 * and failed unit counts, payload bytes moved, and the n latencies in ns
 * (lat, sorted in place; n may be 0).
 */
void bench_fig_make(bench_fig *f, const bench_sample *a,
                    const bench_sample *b, uint64_t ok, uint64_t failed,
                    uint64_t bytes, uint64_t *lat, size_t n);

/* The field-by-field median of n figures (runs; not modified) into *out. */
void bench_fig_median(const bench_fig *runs, int n, bench_fig *out);

/* a / b, or 0 when either is 0 (a figure that was not measured). */
double bench_ratio(double a, double b);

#endif /* XFER_BENCH_FIGURE_H */
