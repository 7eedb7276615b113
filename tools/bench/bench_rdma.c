/*
 * tools/bench/bench_rdma.c - xfer-bench-rdma (`xfer-bench rdma` execs it):
 * GB/s and transfers/s of transfers through the engine and the RDMA
 * transport into a shard server on this host (xfer_server_new_rdma, a
 * consuming sink), printed next to a reference measured in the same run.
 *
 *   xfer-bench-rdma [--size BYTES] [--transfers N] [--inflight N]
 *                   [--addr A] [--smoke]
 *
 * --addr: a numeric address of the RDMA device's interface (default
 * 127.0.0.1, which a real device may not serve).
 *
 * On a device the reference is perftest's ib_write_bw (a server and a
 * client over loopback, the same message size): the wire's own rate,
 * without reserve, commit or invalidation.  Without a device it prints one
 * line saying so (ib_write_bw cannot run either) and exits 77.
 *
 * Built a second time on the software fabric (tests/rdma, -DXFER_BENCH_FABRIC)
 * it runs there instead, and says on every line that the figure is the
 * fabric's (a socket copy between threads), not a measurement of RDMA; its
 * reference is then memcpy of the same bytes in the same run.
 *
 * --smoke: a few hundred transfers, and exit 1 unless every one of them
 * completed and the transport's counters add up.  No time is asserted.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "cli.h"
#include "xfer/rdma.h"
#include "xfer/server.h"
#include "xfer/xfer.h"

typedef struct bench {
    uint32_t size, transfers, inflight;
    const char *addr;           /* --addr: the device's interface */
    bool smoke;
    struct event_base *base;
    uint8_t *pool, *staging;
    xfer_server *srv;
    xfer_engine *e;
    xfer_rdma *rd;
    uint32_t group, spool;
    uint32_t submitted, done, failed;
    int32_t first_err;          /* the first failure's status */
    bool shut;
} bench;

static double now_s(void)
{
    return (double)xfer_clock_monotonic(NULL) / 1e9;
}

/* Every flag, its value and its help: getopt_long's options and --help
 * are both built from this table (tools/cli.h). */
enum { F_SIZE = 256, F_TRANSFERS, F_INFLIGHT, F_ADDR, F_SMOKE };
static const cli_flag flags[] = {
    {"size", 0, "BYTES", "bytes per transfer, 1..2^30 (1 MiB)", F_SIZE},
    {"transfers", 0, "N", "transfers to run, 1..2^30 (2000)", F_TRANSFERS},
    {"inflight", 0, "N", "transfers in flight, 1..2^30 (16)", F_INFLIGHT},
    {"addr", 0, "A", "numeric address of the RDMA device's interface "
     "(127.0.0.1)", F_ADDR},
    {"smoke", 0, NULL, "a few hundred 64 KiB transfers; exit 1 unless the "
     "counters add up", F_SMOKE},
    CLI_HELP,
    CLI_VERSION,
    {NULL, 0, NULL, NULL, 0}};

static const cli rdma_cli = {
    .prog = "xfer-bench-rdma",
    .summary = "the xfer RDMA benchmark (run by xfer-bench rdma)",
    .synopsis = "[flags]",
    .intro = "GB/s and transfers/s through the engine and the RDMA transport "
             "into a shard\nserver on this host, next to ib_write_bw "
             "(`xfer-bench rdma` runs it; no\ndevice: one line, exit 77)\n",
    .flags = flags};

static int parse(bench *b, int argc, char **argv)
{
    *b = (bench){.size = 1u << 20, .transfers = 2000, .inflight = 16,
                 .addr = "127.0.0.1"};
    uint32_t size = 0, transfers = 0;
    const char *v;
    for (int k; (k = cli_next(&rdma_cli, argc, argv, &v)) != CLI_END;) {
        if (k == CLI_ERR)
            return 2;
        if (k == F_SMOKE) {
            b->smoke = true;
            continue;
        }
        if (k == F_ADDR) {
            unsigned char probe[16];
            if (inet_pton(AF_INET, v, probe) != 1 &&
                inet_pton(AF_INET6, v, probe) != 1)
                return cli_bad(&rdma_cli, "address (numeric)", v);
            b->addr = v;
            continue;
        }
        uint32_t *dst = k == F_SIZE ? &size
                        : k == F_TRANSFERS ? &transfers : &b->inflight;
        char *end;
        errno = 0;
        unsigned long n = strtoul(v, &end, 10);
        if (!*v || *v == '-' || *end || errno || n == 0 || n > (1ul << 30))
            return cli_bad(&rdma_cli, "value", v);
        *dst = (uint32_t)n;
    }
    if (optind < argc)
        return cli_bad(&rdma_cli, "argument", argv[optind]);
    if (b->smoke) { /* the smoke sizes, unless --size/--transfers say */
        b->size = 65536;
        b->transfers = 300;
    }
    if (size)
        b->size = size;
    if (transfers)
        b->transfers = transfers;
    return 0;
}

static void on_done(void *ud, const xfer_result *r);

static void on_shut(void *ud);

static void count(bench *b, int32_t status)
{
    b->done++;
    if (status && !b->failed++)
        b->first_err = status;
}

/* Submit the next transfer (into a free staging slot: at most inflight
 * are live); a refused submit counts as a failed transfer. */
static void submit_next(bench *b)
{
    while (b->submitted < b->transfers) {
        uint32_t slot = b->submitted % b->inflight;
        xfer_slice sl = {.off = (uint64_t)slot * b->size, .len = b->size};
        xfer_transfer_desc d = {.id = ++b->submitted, .group = b->group,
                                .pool = b->spool, .nslices = 1,
                                .slices = &sl};
        int rc = xfer_engine_submit(b->e, &d, on_done, b);
        if (rc == 0)
            return;
        count(b, rc);
    }
    if (b->done == b->transfers)
        xfer_engine_shutdown(b->e, on_shut, b);
}

static void on_shut(void *ud)
{
    bench *b = ud;
    b->shut = true;
    event_base_loopbreak(b->base);
}

static void on_done(void *ud, const xfer_result *r)
{
    bench *b = ud;
    count(b, r->status);
    submit_next(b);
}

/* The sink server and the producer, connected. */
static int setup(bench *b)
{
    size_t pool = (size_t)b->size * b->inflight * 2;
    b->base = event_base_new();
    b->pool = calloc(pool, 1);
    b->staging = calloc((size_t)b->size * b->inflight, 1);
    if (!b->base || !b->pool || !b->staging)
        return XFER_ERR_NOMEM;
    memset(b->staging, 0x5a, (size_t)b->size * b->inflight);
    xfer_server_shard sh = {.index = 0, .base = b->pool, .len = pool};
    xfer_server_config sc;
    xfer_server_config_default(&sc);
    sc.base = b->base;
    sc.nshards = 1;
    sc.shards = &sh;
    sc.consume = true;
    sc.addr = b->addr;
    /* one producer session: the whole pool and table are its quota */
    sc.session_max_bytes = pool;
    sc.session_max_reservations = sc.max_reservations;
    sc.session_max_tombstones = sc.max_tombstones;
    int rc = xfer_server_new_rdma(&sc, NULL, &b->srv);
    if (rc)
        return rc;
    char addr[80];
    const char *addrs[1] = {addr};
    snprintf(addr, sizeof addr, strchr(b->addr, ':') ? "[%s]:%u" : "%s:%u",
             b->addr,
             (unsigned)xfer_server_port(b->srv));
    xfer_rdma_config rc_;
    xfer_rdma_config_default(&rc_);
    rc_.tcp.nshards = 1;
    rc_.tcp.addrs = addrs;
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = b->base;
    ec.core.max_transfers = 2 * b->inflight;
    ec.core.max_tombstones = b->transfers + 4096; /* one per id */
    if ((rc = xfer_engine_new(&ec, &b->e)) != 0 ||
        (rc = xfer_rdma_new(b->base, &rc_, &b->rd)) != 0 ||
        (rc = xfer_engine_add_group(b->e, xfer_rdma_transport(b->rd),
                                    &b->group)) != 0)
        return rc;
    rc = xfer_engine_register_pool(b->e, b->staging,
                                   (size_t)b->size * b->inflight, &b->spool);
    for (int i = 0; !rc && i < 20000 && !xfer_rdma_connected(b->rd, 0); i++)
        event_base_loop(b->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    return rc ? rc : xfer_rdma_connected(b->rd, 0) ? 0 : XFER_ERR_CONN_LOST;
}

static void teardown(bench *b)
{
    xfer_engine_del(b->e);
    xfer_rdma_del(b->rd);
    xfer_server_del(b->srv);
    if (b->base) {
        event_base_loop(b->base, EVLOOP_NONBLOCK);
        event_base_free(b->base);
    }
    free(b->pool);
    free(b->staging);
}

/* The reference: ib_write_bw on the device, memcpy on the fabric.
 * Returns GB/s, or a negative value with why[] saying why not. */
#ifdef XFER_BENCH_FABRIC
static double reference(const bench *b, char *why, size_t cap)
{
    size_t n = (size_t)b->size;
    uint8_t *src = malloc(n), *dst = malloc(n);
    double gbs = -1;
    if (!src || !dst) {
        snprintf(why, cap, "out of memory");
        goto out;
    }
    memset(src, 1, n);
    double t0 = now_s();
    for (uint32_t i = 0; i < b->transfers; i++) {
        src[i % n] = (uint8_t)i;
        memcpy(dst, src, n);
    }
    double t = now_s() - t0;
    gbs = t > 0 ? (double)n * b->transfers / t / 1e9 : 0;
    volatile uint8_t keep = dst[n / 2]; /* the copies are used */
    (void)keep;
out:
    free(src);
    free(dst);
    return gbs;
}
#else
/* ib_write_bw's data row: "#bytes #iterations BW peak BW average ...". */
static double parse_perftest(FILE *f, uint32_t size)
{
    char line[512];
    double avg = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long bytes, iters;
        double peak, av;
        if (sscanf(line, " %lu %lu %lf %lf", &bytes, &iters, &peak, &av) ==
                4 &&
            bytes == size)
            avg = av;
    }
    return avg;
}

static double reference(const bench *b, char *why, size_t cap)
{
    char sz[16], it[16], cmd[256];
    snprintf(sz, sizeof sz, "%u", b->size);
    snprintf(it, sizeof it, "%u", b->transfers < 5000 ? 5000 : b->transfers);
    pid_t srv = fork();
    if (srv < 0) {
        snprintf(why, cap, "fork failed");
        return -1;
    }
    if (srv == 0) {
        if (!freopen("/dev/null", "w", stdout))
            _exit(127);
        execlp("ib_write_bw", "ib_write_bw", "-s", sz, "-n", it, "-F",
               (char *)NULL);
        _exit(127);
    }
    usleep(500000);
    snprintf(cmd, sizeof cmd, "ib_write_bw -s %s -n %s -F %s", sz, it,
             b->addr);
    FILE *f = popen(cmd, "r");
    double mbs = f ? parse_perftest(f, b->size) : -1;
    int st = f ? pclose(f) : -1;
    kill(srv, SIGTERM);
    waitpid(srv, NULL, 0);
    if (mbs < 0)
        snprintf(why, cap, "ib_write_bw (perftest) gave no figure (exit %d)",
                 st);
    return mbs < 0 ? -1 : mbs / 1000.0; /* MB/s (10^6) -> GB/s */
}
#endif

#ifdef XFER_BENCH_FABRIC
#define LABEL "SOFTWARE FABRIC (tests/rdma/fabric: a socket copy between " \
              "threads), NOT a measurement of RDMA"
#define REF_NAME "memcpy of the same bytes (same run)"
#else
#define LABEL "RDMA device, loopback"
#define REF_NAME "ib_write_bw (perftest, same run, same size)"
#endif

int main(int argc, char **argv)
{
    bench b;
    int rc = parse(&b, argc, argv);
    if (rc)
        return rc;
    signal(SIGPIPE, SIG_IGN);
#ifndef XFER_BENCH_FABRIC
    char why0[160];
    if (xfer_rdma_probe(why0, sizeof why0) != 0) {
        printf("xfer-bench rdma: %s: nothing measured (ib_write_bw needs a "
               "device too).  The software fabric's figure, which is not "
               "RDMA: tests/rdma/xfer-bench-rdma-sim\n", why0);
        return 77;
    }
#endif
    int status = 1;
    rc = setup(&b);
    if (rc) {
        fprintf(stderr, "xfer-bench-rdma: setup failed: %s\n",
                xfer_strerror(rc));
        goto out;
    }
    double t0 = now_s();
    for (uint32_t i = 0; i < b.inflight && b.submitted < b.transfers; i++)
        submit_next(&b);
    while (!b.shut)
        event_base_loop(b.base, EVLOOP_ONCE);
    double t = now_s() - t0;
    xfer_rdma_stats st;
    xfer_rdma_stats_get(b.rd, &st);
    double gbs = t > 0 ? (double)b.size * (b.done - b.failed) / t / 1e9 : 0;
    printf("xfer-bench rdma [%s]\n", LABEL);
    printf("  xfer: %u transfers of %u B, %u in flight: %.3f GB/s, %.0f "
           "transfers/s (%u failed%s%s; %" PRIu64 " WRs posted, %" PRIu64
           " polled)\n",
           b.done, b.size, b.inflight, gbs, t > 0 ? b.done / t : 0,
           b.failed, b.failed ? ", first: " : "",
           b.failed ? xfer_strerror(b.first_err) : "", st.wrs_posted,
           st.wcs_polled);
    char why[160] = "";
    double ref = reference(&b, why, sizeof why);
    if (ref < 0)
        printf("  reference %s: not measured: %s\n", REF_NAME, why);
    else
        printf("  reference %s: %.3f GB/s (xfer at %.0f %% of it)\n",
               REF_NAME, ref, ref > 0 ? 100.0 * gbs / ref : 0);
    status = 0;
    if (b.smoke && (b.done != b.transfers || b.failed ||
                    st.writes_ok != b.transfers ||
                    st.wrs_posted != st.wcs_polled)) {
        fprintf(stderr, "xfer-bench-rdma: smoke: %u of %u done, %u failed, "
                "%" PRIu64 " writes ok\n", b.done, b.transfers, b.failed,
                st.writes_ok);
        status = 1;
    }
out:
    teardown(&b);
    return status;
}
