/*
 * tools/bench/figure.c - figures from /proc samples and latencies, and
 * medians over runs.  See figure.h.
 *
 * "other_cpus" is the machine's busy time in the window (/proc/stat, every
 * CPU) minus what the measured processes used: a figure taken while
 * something else ran is visible as such (on a quiet machine it is near 0).
 */
#include "figure.h"

#include <stdlib.h>
#include <unistd.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void bench_fig_make(bench_fig *f, const bench_sample *a,
                    const bench_sample *b, uint64_t ok, uint64_t failed,
                    uint64_t bytes, uint64_t *lat, size_t n)
{
    *f = (bench_fig){.units = (double)ok, .failed = (double)failed};
    f->secs = (double)(b->wall_ns - a->wall_ns) / 1e9;
    if (f->secs <= 0)
        return;
    f->per_s = (double)ok / f->secs;
    f->gbps = (double)bytes / f->secs / 1e9;
    if (n) {
        qsort(lat, n, sizeof lat[0], cmp_u64);
        f->p50_us = (double)lat[n / 2] / 1e3;
        f->p99_us = (double)lat[n * 99 / 100] / 1e3;
    }
    double drv = (double)(b->driver.run_ns - a->driver.run_ns);
    double peers = (double)(b->peers.run_ns - a->peers.run_ns);
    double ticks = (double)(b->driver.user_ticks - a->driver.user_ticks +
                            b->peers.user_ticks - a->peers.user_ticks);
    double sys = (double)(b->driver.sys_ticks - a->driver.sys_ticks +
                          b->peers.sys_ticks - a->peers.sys_ticks);
    double hz = (double)sysconf(_SC_CLK_TCK);
    double busy = (double)(b->machine_busy_ticks - a->machine_busy_ticks) /
                  (hz > 0 ? hz : 100);
    f->other_cpus = (busy - (drv + peers) / 1e9) / f->secs;
    if (f->other_cpus < 0)
        f->other_cpus = 0; /* tick sampling against exact ns */
    if (ticks + sys > 0)
        f->sys_pct = 100.0 * sys / (ticks + sys);
    if (!ok)
        return;
    f->driver_us = drv / 1e3 / (double)ok;
    f->peers_us = peers / 1e3 / (double)ok;
    f->cpu_us = f->driver_us + f->peers_us;
    f->csw = (double)(b->driver.csw - a->driver.csw + b->peers.csw -
                      a->peers.csw) / (double)ok;
    f->driver_r = (double)(b->driver.rcalls - a->driver.rcalls) / (double)ok;
    f->driver_w = (double)(b->driver.wcalls - a->driver.wcalls) / (double)ok;
    f->peers_r = (double)(b->peers.rcalls - a->peers.rcalls) / (double)ok;
    f->peers_w = (double)(b->peers.wcalls - a->peers.wcalls) / (double)ok;
}

void bench_fig_median(const bench_fig *runs, int n, bench_fig *out)
{
    double v[64];
    if (n > 64)
        n = 64;
    *out = (bench_fig){0};
    if (n <= 0)
        return;
#define BENCH_FIG_MEDIAN_(name, what)                                         \
    for (int i = 0; i < n; i++)                                               \
        v[i] = runs[i].name;                                                  \
    qsort(v, (size_t)n, sizeof v[0], cmp_double);                             \
    out->name = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    BENCH_FIG_FIELDS(BENCH_FIG_MEDIAN_)
#undef BENCH_FIG_MEDIAN_
}

double bench_ratio(double a, double b)
{
    return a > 0 && b > 0 ? a / b : 0;
}
