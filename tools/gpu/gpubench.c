/*
 * tools/gpu/gpubench.c - xfer-gpu-bench: device-to-device transfers over
 * TCP through 4 shard servers whose pools are cuMemAlloc'd, next to the
 * host-memory path and to pinned cuMemcpy device-to-host and
 * host-to-device, all measured in this one run (issue 25's figures).
 *
 * For each size (64 KiB, 1 MiB, 16 MiB per transfer, split over the 4
 * shards) it prints GB/s of: d2d-tcp (device staging -> device pools),
 * host-tcp (host staging -> host pools), memcpy-d2h and memcpy-h2d
 * (pinned host memory).  Each TCP figure is followed by a check: 4
 * transfers of a pattern of their own, each shard's pool read back with
 * cuMemcpyDtoH and searched for every byte of its slice.  Last line: the
 * issue's target, d2d-tcp at 1 MiB >= 0.8 x min(host-tcp, memcpy-d2h) at
 * 1 MiB, PASS or FAIL (exit 0 or 1).  Exit 77 with one line where there
 * is no CUDA driver or device, or the build has no device memory kinds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cu.h"
#include "gpurig.h"

#define NSHARDS 4
#define INFLIGHT 16u

static cu_api cu;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool smoke; /* --host-smoke: 64 transfers a figure */

/* Bytes of a xorshift64 stream of its own per seed: no period a misplaced
 * chunk could hide in. */
static void fill(uint8_t *p, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)(x >> 24);
    }
}

/* Transfers in flight per measurement: about 512 MiB moved, 64..4096. */
static uint32_t count_for(size_t size)
{
    if (smoke)
        return 64;
    size_t n = ((size_t)512 << 20) / size;
    return (uint32_t)(n < 64 ? 64 : n > 4096 ? 4096 : n);
}

/* GB/s of transfers of `size` bytes (size / NSHARDS per shard), then 4 checked
 * transfers; -1 on a failure (printed). */
static double tcp_rate(bool dev, size_t size, bool *verified)
{
    uint32_t slice = (uint32_t)(size / NSHARDS);
    gpurig g = {.cu = &cu, .S = NSHARDS, .dev_pools = dev,
                .dev_staging = dev, .pool_len = (size_t)slice * (INFLIGHT + 4),
                .staging_len = size * INFLIGHT, .consume = true};
    char why[256] = "";
    double rate = -1;
    uint8_t *pat = NULL;
    int rc = gpurig_start(&g, why, sizeof why);
    if (rc) {
        printf("  %s-tcp %zu: %s\n", dev ? "d2d" : "host", size, why);
        goto out;
    }
    pat = malloc(g.staging_len);
    if (!pat)
        goto out;
    fill(pat, g.staging_len, size);
    if (gpurig_fill(&g, 0, pat, g.staging_len) != 0)
        goto out;
    uint64_t id = 1;
    if ((rc = gpurig_run(&g, &id, slice, 2 * INFLIGHT, INFLIGHT)) != 0)
        goto fail; /* warm-up */
    uint32_t n = count_for(size);
    double t0 = now_s();
    if ((rc = gpurig_run(&g, &id, slice, n, INFLIGHT)) != 0)
        goto fail;
    rate = (double)n * (double)size / (now_s() - t0) / 1e9;
    /* Every byte of 4 transfers of their own pattern, found in the pools */
    *verified = true;
    for (uint32_t t = 0; t < 4 && *verified; t++) {
        fill(pat, size, 1000u + t);
        if (gpurig_fill(&g, 0, pat, size) != 0 ||
            gpurig_run(&g, &id, slice, 1, 1) != 0)
            *verified = false;
        for (uint16_t k = 0; k < NSHARDS && *verified; k++)
            *verified = gpurig_holds(&g, k, pat + (size_t)k * slice, slice);
    }
    goto out;
fail:
    printf("  %s-tcp %zu: %s\n", dev ? "d2d" : "host", size,
           xfer_strerror(rc));
    rate = -1;
out:
    free(pat);
    gpurig_stop(&g);
    return rate;
}

/* Pinned cuMemcpy of `size` bytes, repeated. */
static double memcpy_rate(bool d2h, size_t size)
{
    void *host = NULL;
    cu_ptr dev = 0;
    double rate = -1;
    if (cu.MemAllocHost(&host, size) != 0 || cu.MemAlloc(&dev, size) != 0)
        goto out;
    uint32_t n = count_for(size);
    for (int warm = 0; warm < 2; warm++) {
        double t0 = now_s();
        for (uint32_t i = 0; i < n; i++)
            if ((d2h ? cu.MemcpyDtoH(host, dev, size)
                     : cu.MemcpyHtoD(dev, host, size)) != 0)
                goto out;
        cu.CtxSynchronize();
        rate = (double)n * (double)size / (now_s() - t0) / 1e9;
    }
out:
    if (host)
        cu.MemFreeHost(host);
    if (dev)
        cu.MemFree(dev);
    return rate;
}

/* --host-smoke: the host path alone, few transfers, no CUDA: the rig's
 * own test on machines without a GPU (suite bench), so the GPU run does
 * not find its bugs first. */
static int host_smoke(void)
{
    static const size_t sizes[] = {64u << 10, 1u << 20};
    smoke = true;
    for (int i = 0; i < 2; i++) {
        bool ok = false;
        double r = tcp_rate(false, sizes[i], &ok);
        printf("host-tcp %zuK: %.2f GB/s, bytes %s\n", sizes[i] >> 10, r,
               ok ? "verified" : "NOT verified");
        if (r <= 0 || !ok)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    char why[256];
    if (argc == 2 && strcmp(argv[1], "--host-smoke") == 0)
        return host_smoke();
    if (argc > 1) {
        fprintf(stderr, "xfer-gpu-bench: unknown argument %s (only "
                "--host-smoke)\n", argv[1]);
        return 2;
    }
    if (cu_open(&cu, why, sizeof why) != 0) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    if (!GPURIG_HAVE_MEM) {
        printf("SKIP: this build has no device memory kinds "
               "(include/xfer/mem.h)\n");
        return 77;
    }
    static const size_t sizes[] = {64u << 10, 1u << 20, 16u << 20};
    double d2d[3], host[3], d2h[3], h2d[3];
    bool ok_d2d[3] = {0}, ok_host[3] = {0};
    printf("xfer-gpu-bench on %s: %d shard servers over TCP (loopback), "
           "%u in flight; GB/s (1e9 bytes/s)\n", cu.name, NSHARDS, INFLIGHT);
    printf("%10s %12s %12s %12s %12s  %s\n", "size", "d2d-tcp", "host-tcp",
           "memcpy-d2h", "memcpy-h2d", "bytes verified");
    for (int i = 0; i < 3; i++) {
        d2d[i] = tcp_rate(true, sizes[i], &ok_d2d[i]);
        host[i] = tcp_rate(false, sizes[i], &ok_host[i]);
        d2h[i] = memcpy_rate(true, sizes[i]);
        h2d[i] = memcpy_rate(false, sizes[i]);
        printf("%9zuK %12.2f %12.2f %12.2f %12.2f  d2d %s, host %s\n",
               sizes[i] >> 10, d2d[i], host[i], d2h[i], h2d[i],
               ok_d2d[i] ? "ok" : "FAILED", ok_host[i] ? "ok" : "FAILED");
    }
    double ref = host[1] < d2h[1] ? host[1] : d2h[1];
    bool pass = ok_d2d[0] && ok_d2d[1] && ok_d2d[2] && ok_host[1] &&
                d2d[1] > 0 && ref > 0 && d2d[1] >= 0.8 * ref;
    printf("target: d2d-tcp at 1 MiB %.2f >= 0.8 x min(host-tcp %.2f, "
           "memcpy-d2h %.2f) = %.2f, every byte verified: %s\n", d2d[1],
           host[1], d2h[1], 0.8 * ref, pass ? "PASS" : "FAIL");
    return pass ? 0 : 1;
}
