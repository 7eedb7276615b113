/*
 * tools/bench/bench_tcp.c - `xfer-bench tcp`: xfer over TCP against the
 * machine's own floor, all measured in one process and one run.  Prints
 * figures and their ratios to references; asserts nothing about time.
 *
 *   xfer-bench-tcp [--only PARTS] [--runs N] [--seconds S]
 *                  [--inflight N[,N...]] [--warmup S] [--xferd PATH]
 *                  [--python PATH] [--pyref PATH] [--py-stdlib] [--smoke]
 *                  [--verbose] [--pause-ms MS] [--eager]
 *                  [--etcd | --etcd-url URLS]
 *
 * Parts (--only takes a comma list; default all):
 *   echo    the floor: a minimal C fan-out echo to 4 echo processes over
 *           loopback TCP (echo.h), 1 and 3 rounds per unit;
 *   wire    the same minimal client speaking the wire protocol to the 4
 *           xferd (reserve, write, commit): what the shard servers cost,
 *           with the producer reduced to its sockets;
 *   xfer    0-byte transfers (reserve, write, commit on every shard) through
 *           the engine and the tcp transport to 4 xferd processes;
 *   python  the pure-Python reference of the same 3-round protocol
 *           (pyref.py: uvloop + msgpack when importable, else asyncio +
 *           json), 4 shard processes and a producer process;
 *   data    iperf3 -l 1M (one stream, loopback) and 1 MiB blocks through
 *           xfer over 1 and over 4 shards;
 *   blocks  payload GB/s for 64 KiB, 256 KiB and 4 MiB blocks;
 *   integrity  the same transfers with end-to-end integrity off and on
 *           (docs/integrity.md), in one run: 4 xferd started with
 *           --integrity off, then 4 with shard (order alternating): GB/s
 *           at 64 KiB, 1 MiB and 16 MiB per shard over 4 shards, and CPU
 *           per 4 KiB transfer (64 in flight).
 * Each of echo, wire, xfer and python runs at every --inflight level (default
 * 1,64) and reports units/s, p50/p99 latency, and CPU per unit summed over
 * every process involved (/proc: the bench for the producer and the echo
 * client, the children for the rest), with the kernel's share and context
 * switches per unit.  --runs N repeats every part N times and prints the
 * field-by-field median.  --smoke runs a few hundred units of each part
 * instead of timed figures and checks that the counts add up (exit 1 if
 * not): the suite's test of this program.
 *
 * --etcd (an etcd of its own on loopback: `etcd` on PATH) or --etcd-url
 * URLS (one running): the 4 xferd also register in etcd (group "0",
 * lease 2 s), and the xfer figures are measured a second time with the
 * tcp transport created from the group name (docs/discovery.md) on the
 * same engine and the same xferd, right after each static-address
 * figure: what the directory costs.  It is meant to cost nothing on the
 * data path (etcd is read once and watched; the ops go to the same
 * sockets), so the two lines should agree within the run's noise.
 *
 * --eager: the xfer engine sends blocks up to 4 KiB (the 0-byte transfers
 * of `xfer`) as one EAGER frame per shard, so the 1-in-flight figure
 * compares with the 1-round echo.
 *
 * For profilers (tools/bench/profile.sh): --verbose prints the pids of
 * the bench (the producer and the clients) and of every xferd, and each
 * figure's unit count, on stderr; --pause-ms waits that long after the
 * pids so that a profiler can attach; --warmup 0 drops the 64-in-flight
 * warm-up (default --seconds / 4) before the xfer figures.
 *
 * Invariant: every child process is killed before exit, and dies with us
 * (PR_SET_PDEATHSIG) if we die first.
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../demo_tcp.h"
#include "xfer/integrity.h"
#include "cli.h"
#include "echo.h"
#include "etcd_run.h"
#include "figure.h"
#include "proc.h"
#include "pump.h"
#include "pyref.h"
#include "wire.h"

#define NSHARDS 4
#define MAX_RUNS 32
#define MAX_LEVELS 4
#define MIB (1u << 20)

#ifndef XFER_BENCH_PYREF
#define XFER_BENCH_PYREF "pyref.py"
#endif
#ifndef XFER_BENCH_PYREF_INSTALLED
#define XFER_BENCH_PYREF_INSTALLED "/usr/local/share/xfer/pyref.py"
#endif

enum { P_ECHO = 1, P_WIRE = 2, P_XFER = 4, P_PYTHON = 8, P_DATA = 16,
       P_BLOCKS = 32, P_INTEG = 64 };
#define PART_NAMES                                                          \
    {"echo", "wire", "xfer", "python", "data", "blocks", "integrity"}
#define NPARTS 7

typedef struct opts {
    unsigned parts;
    int runs;
    double seconds, warmup; /* warmup < 0: seconds / 4 */
    int pause_ms;
    uint32_t level[MAX_LEVELS];
    int nlevels;
    const char *xferd, *python, *pyref;
    bool py_stdlib, smoke, verbose;
    bool only_given;     /* --only: --smoke keeps to those parts */
    bool etcd_own;       /* --etcd: start an etcd on loopback */
    const char *etcd_url; /* --etcd-url URLS */
} opts;

/* Every figure of one run (and, after the runs, their medians). */
typedef struct figs {
    bench_fig echo[2][MAX_LEVELS]; /* [0]: 1 round, [1]: 3 rounds */
    bench_fig wire[MAX_LEVELS], xfer[MAX_LEVELS], py[MAX_LEVELS];
    bench_fig iperf, mib[2];       /* 1 MiB: [0] 1 shard, [1] 4 shards */
    bench_fig blocks[3][2];        /* 64 KiB, 256 KiB, 4 MiB x 1/4 shards */
    bench_fig integ[5][2];         /* 64 KiB, 1 MiB, 16 MiB, 4 KiB, 1 KiB (64 in
                                      flight) x integrity off / on */
    bench_fig dir[MAX_LEVELS];     /* --etcd: xfer through the directory */
} figs;

static const uint32_t echo_rounds[2] = {1, 3};
static const uint32_t block_bytes[3] = {64u << 10, 256u << 10, 4u << 20};
static const uint32_t block_depth[3] = {32, 16, 4};

/* The processes and connections every run uses. */
typedef struct world {
    bench_echo *echo, *wire;
    demo_tcp *group;
    bench_pump *pump;
    demo_tcp_config integ_gc; /* P_INTEG: how to start a group of 4 */
    char xferd[PATH_MAX];
    bench_pyref *py;
    char py_why[256];
    char etcd[256];     /* --etcd/--etcd-url: the endpoints; "" none */
} world;

/* ---------------------------------------------------------------------- */
/* iperf3                                                                  */
/* ---------------------------------------------------------------------- */

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    uint16_t port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* iperf3 -l 1M, one stream, receiver GB/s; 0 when iperf3 is missing. */
static double iperf3_gbps(int seconds)
{
    char port[16], cmd[256];
    snprintf(port, sizeof port, "%u", (unsigned)free_port());
    const char *srv[] = {"iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", port,
                         NULL};
    int to, from;
    pid_t pid = bench_proc_spawn(srv, true, &to, &from);
    if (pid < 0)
        return 0;
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    snprintf(cmd, sizeof cmd,
             "timeout %d iperf3 -c 127.0.0.1 -p %s -l 1M -P 1 -t %d -J "
             "2>/dev/null",
             seconds + 10, port, seconds);
    FILE *p = popen(cmd, "r");
    static char out[1 << 16];
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    if (p)
        pclose(p);
    out[n] = '\0';
    double bps = 0;
    const char *s = strstr(out, "\"sum_received\"");
    s = s ? strstr(s, "\"bits_per_second\":") : NULL;
    if (s)
        bps = strtod(s + strlen("\"bits_per_second\":"), NULL);
    close(to);
    close(from);
    bench_proc_kill(pid);
    return bps / 8e9;
}

/* ---------------------------------------------------------------------- */
/* One run                                                                 */
/* ---------------------------------------------------------------------- */

static uint64_t ns_of(const opts *o)
{
    return (uint64_t)(o->seconds * 1e9);
}

static void say_units(const opts *o, const char *part, uint32_t inflight,
                      const bench_fig *f)
{
    if (o->verbose)
        fprintf(stderr, "figure %s %u in flight: %.0f units ok, %.0f "
                "failed, %.3f s\n", part, inflight, f->units, f->failed,
                f->secs);
}

/* One closed loop of a fan-out client (the echo or the wire one). */
static int client(const opts *o, bench_echo *e, const char *name,
                  uint32_t rounds, uint32_t inflight, bench_fig *f)
{
    char err[256];
    bench_echo_params p = {.rounds = rounds, .inflight = inflight,
                           .ns = ns_of(o)};
    bench_echo_counts c;
    if (bench_echo_run(e, &p, f, &c, err, sizeof err) != 0) {
        fprintf(stderr, "xfer-bench-tcp: %s\n", err);
        return -1;
    }
    say_units(o, name, inflight, f);
    return 0;
}

static int run_echo(world *w, const opts *o, figs *f)
{
    for (int r = 0; r < 2; r++)
        for (int li = 0; li < o->nlevels; li++)
            if (client(o, w->echo, r ? "echo-3" : "echo-1", echo_rounds[r],
                       o->level[li], &f->echo[r][li]) != 0)
                return -1;
    return 0;
}

static int run_wire(world *w, const opts *o, figs *f)
{
    for (int li = 0; li < o->nlevels; li++)
        if (client(o, w->wire, "wire", 3, o->level[li], &f->wire[li]) != 0)
            return -1;
    return 0;
}

static int pump_via(world *w, bool one, bool dir, uint32_t slice,
                    uint32_t inflight, uint64_t ns, bench_fig *f)
{
    char err[256];
    bench_pump_params p = {.one_shard = one, .slice = slice,
                           .inflight = inflight, .ns = ns, .via_dir = dir};
    bench_pump_counts c;
    if (bench_pump_run(w->pump, &p, f, &c, err, sizeof err) != 0) {
        fprintf(stderr, "xfer-bench-tcp: %s\n", err);
        return -1;
    }
    return 0;
}

static int pump(world *w, bool one, uint32_t slice, uint32_t inflight,
                uint64_t ns, bench_fig *f)
{
    return pump_via(w, one, false, slice, inflight, ns, f);
}

static int run_xfer(world *w, const opts *o, figs *f)
{
    bench_fig warm;
    double wsecs = o->warmup < 0 ? o->seconds / 4 : o->warmup;
    if (wsecs > 0 &&
        pump(w, false, 0, 64, (uint64_t)(wsecs * 1e9), &warm) != 0)
        return -1;
    static unsigned turn; /* --etcd: which of the pair goes first */
    for (int li = 0; li < o->nlevels; li++) {
        /* --etcd: the same level at once through the directory, so both
         * figures see the same machine; the order alternates from one
         * level (and run) to the next, so neither always runs warmer */
        bool dir_first = w->etcd[0] && (turn++ & 1);
        if (dir_first && pump_via(w, false, true, 0, o->level[li],
                                  ns_of(o), &f->dir[li]) != 0)
            return -1;
        if (pump(w, false, 0, o->level[li], ns_of(o), &f->xfer[li]) != 0)
            return -1;
        say_units(o, "xfer", o->level[li], &f->xfer[li]);
        if (w->etcd[0] && !dir_first &&
            pump_via(w, false, true, 0, o->level[li], ns_of(o),
                     &f->dir[li]) != 0)
            return -1;
    }
    return 0;
}

static int run_python(world *w, const opts *o, figs *f)
{
    char err[256];
    if (!w->py)
        return 0;
    for (int li = 0; li < o->nlevels; li++) {
        if (bench_pyref_run(w->py, o->level[li], ns_of(o), 0, &f->py[li],
                            err, sizeof err) != 0) {
            fprintf(stderr, "xfer-bench-tcp: %s\n", err);
            return -1;
        }
        say_units(o, "python", o->level[li], &f->py[li]);
    }
    return 0;
}

static int run_data(world *w, const opts *o, figs *f)
{
    int secs = o->seconds < 1 ? 1 : (int)(o->seconds + 0.5);
    f->iperf.gbps = iperf3_gbps(secs);
    for (int j = 0; j < 2; j++)
        if (pump(w, j == 0, MIB, 8, ns_of(o), &f->mib[j]) != 0)
            return -1;
    return 0;
}

static int run_blocks(world *w, const opts *o, figs *f)
{
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++)
            if (pump(w, j == 0, block_bytes[i], block_depth[i], ns_of(o),
                     &f->blocks[i][j]) != 0)
                return -1;
    return 0;
}

/* The integrity part: each figure off, then on, back to back. */
static const uint32_t integ_bytes[5] = {64u << 10, 1u << 20, 16u << 20,
                                        4u << 10, 1u << 10};
static const uint32_t integ_depth[5] = {32, 8, 1, 64, 64};

static int run_integ(world *w, const opts *o, figs *f)
{
    char err[256];
    /* Each mode on a group and a producer of its own, started afresh
     * (two groups side by side measured apart by up to 2x with the same
     * setting on both); off first in odd runs, on first in even ones. */
    static int turn;
    int first = turn++ % 2;
    int rc = 0;
    for (int j = 0; j < 2 && rc == 0; j++) {
        int on = j ^ first;
        demo_tcp_config gc = w->integ_gc;
        gc.integrity = on ? XFER_INTEGRITY_SHARD : XFER_INTEGRITY_OFF;
        demo_tcp *g = NULL;
        bench_pump *u = NULL;
        rc = demo_tcp_start(&gc, &g, err, sizeof err);
        if (rc == 0)
            rc = bench_pump_new(g, NSHARDS, &u, err, sizeof err);
        for (int i = 0; i < 5 && rc == 0; i++) {
            bench_pump_params p = {.slice = integ_bytes[i],
                                   .inflight = integ_depth[i],
                                   .ns = ns_of(o)};
            bench_pump_counts c;
            rc = bench_pump_run(u, &p, &f->integ[i][on], &c, err,
                                sizeof err);
        }
        bench_pump_del(u);
        demo_tcp_stop(g);
    }
    if (rc)
        fprintf(stderr, "xfer-bench-tcp: %s\n", err);
    return rc ? -1 : 0;
}

static int run_once(world *w, const opts *o, figs *f)
{
    *f = (figs){0};
    if ((o->parts & P_ECHO) && run_echo(w, o, f))
        return -1;
    if ((o->parts & P_WIRE) && run_wire(w, o, f))
        return -1;
    if ((o->parts & P_XFER) && run_xfer(w, o, f))
        return -1;
    if ((o->parts & P_PYTHON) && run_python(w, o, f))
        return -1;
    if ((o->parts & P_DATA) && run_data(w, o, f))
        return -1;
    if ((o->parts & P_BLOCKS) && run_blocks(w, o, f))
        return -1;
    if ((o->parts & P_INTEG) && run_integ(w, o, f))
        return -1;
    return 0;
}

/* figs is an array of bench_fig in all but name. */
enum { NF = sizeof(figs) / sizeof(bench_fig) };
_Static_assert(sizeof(figs) == NF * sizeof(bench_fig),
               "figs holds only bench_fig members");

/* The median of every figure over n runs. */
static void median_figs(const figs *runs, int n, figs *out)
{
    const bench_fig *in = (const bench_fig *)runs;
    bench_fig col[MAX_RUNS];
    for (size_t k = 0; k < NF; k++) {
        for (int r = 0; r < n; r++)
            col[r] = in[(size_t)r * NF + k];
        bench_fig_median(col, n, &((bench_fig *)out)[k]);
    }
}

/* ---------------------------------------------------------------------- */
/* Printing                                                                */
/* ---------------------------------------------------------------------- */

static void print_head(const char *unit)
{
    printf("  %-22s %10s %9s %9s %8s %9s %9s %7s\n", "", unit, "p50 us",
           "p99 us", "CPU us", "driver", "peers", "kernel");
}

/* One figure in two lines; rounds > 0 for the echo (CPU per round). */
static void print_fig(const char *what, const bench_fig *f, uint32_t rounds)
{
    printf("  %-22s %10.0f %9.1f %9.1f %8.2f %9.2f %9.2f %6.0f%%", what,
           f->per_s, f->p50_us, f->p99_us, f->cpu_us, f->driver_us,
           f->peers_us, f->sys_pct);
    if (f->failed > 0)
        printf("  (%.0f failed!)", f->failed);
    printf("\n  %-22s per unit: %.2f context switches; read/write calls: "
           "driver %.2f/%.2f, peers %.2f/%.2f", "", f->csw, f->driver_r,
           f->driver_w, f->peers_r, f->peers_w);
    if (f->calls > 0)
        printf("; driver syscalls %.2f", f->calls);
    if (rounds > 0)
        printf("; CPU per round %.2f us", f->cpu_us / rounds);
    if (f->other_cpus > 0.1)
        printf("; %.2f CPUs busy elsewhere", f->other_cpus);
    printf("\n");
}

static void print_echo(const opts *o, const figs *f)
{
    char what[64];
    printf("\nthe machine's floor: C fan-out echo to 4 echo processes, "
           "%u-byte frames,\none epoll_wait per turn, one read and one "
           "write per connection per turn\n", BENCH_ECHO_FRAME);
    printf("  CPU us per unit: every process, the driver (the client or "
           "producer), the peers;\n  kernel: the share of that CPU spent "
           "in the kernel\n");
    print_head("units/s");
    for (int r = 0; r < 2; r++)
        for (int li = 0; li < o->nlevels; li++) {
            snprintf(what, sizeof what, "%u round%s, %3u in flight",
                     echo_rounds[r], echo_rounds[r] > 1 ? "s" : "",
                     o->level[li]);
            print_fig(what, &f->echo[r][li], echo_rounds[r]);
        }
}

static void print_levels(const char *title, const opts *o,
                         const bench_fig *fig)
{
    char what[64];
    printf("\n%s\n", title);
    print_head("transfers/s");
    for (int li = 0; li < o->nlevels; li++) {
        snprintf(what, sizeof what, "%3u in flight", o->level[li]);
        print_fig(what, &fig[li], 0);
    }
}

static int level_index(const opts *o, uint32_t n)
{
    for (int li = 0; li < o->nlevels; li++)
        if (o->level[li] == n)
            return li;
    return -1;
}

/* One ratio line; target > 0: at least, < 0: at most -target. */
static void ratio(const char *what, double v, double target)
{
    if (v <= 0) {
        printf("  %-64s %9s\n", what, "-");
        return;
    }
    printf("  %-64s %8.2fx", what, v);
    if (target > 0)
        printf("   target >= %4.2fx  %s", target,
               v >= target ? "met" : "MISSED");
    else if (target < 0)
        printf("   target <= %4.2fx  %s", -target,
               v <= -target ? "met" : "MISSED");
    printf("\n");
}

static void print_ratios(const opts *o, const figs *f)
{
    int l1 = level_index(o, 1), l64 = level_index(o, 64);
    const bench_fig none = {0};
    const bench_fig *x1 = l1 >= 0 ? &f->xfer[l1] : &none;
    const bench_fig *x64 = l64 >= 0 ? &f->xfer[l64] : &none;
    const bench_fig *e1r1 = l1 >= 0 ? &f->echo[0][l1] : &none;
    const bench_fig *e1r3 = l1 >= 0 ? &f->echo[1][l1] : &none;
    const bench_fig *e64r3 = l64 >= 0 ? &f->echo[1][l64] : &none;
    const bench_fig *w1 = l1 >= 0 ? &f->wire[l1] : &none;
    const bench_fig *w64 = l64 >= 0 ? &f->wire[l64] : &none;
    const bench_fig *p1 = l1 >= 0 ? &f->py[l1] : &none;
    const bench_fig *p64 = l64 >= 0 ? &f->py[l64] : &none;
    printf("\nratios, each against a reference measured in this run\n");
    ratio("1 in flight: p50 / 3-round echo p50", bench_ratio(x1->p50_us,
          e1r3->p50_us), -1.2);
    ratio("1 in flight: p50 / 1-round echo p50 (the eager path)",
          bench_ratio(x1->p50_us, e1r1->p50_us), -1.5);
    ratio("1 in flight: p99 / 3-round echo p99",
          bench_ratio(x1->p99_us, e1r3->p99_us), 0);
    ratio("1 in flight: p50, minimal C producer / 3-round echo (xferd)",
          bench_ratio(w1->p50_us, e1r3->p50_us), 0);
    ratio("1 in flight: p50, xfer / minimal C producer (the producer)",
          bench_ratio(x1->p50_us, w1->p50_us), 0);
    ratio("64 in flight: producer CPU per transfer / minimal C producer's",
          bench_ratio(x64->driver_us, w64->driver_us), 0);
    ratio("64 in flight: xferd CPU per transfer, under xfer / under it",
          bench_ratio(x64->peers_us, w64->peers_us), 0);
    ratio("64 in flight: xferd CPU per transfer / echo processes' per unit",
          bench_ratio(w64->peers_us, e64r3->peers_us), 0);
    ratio("64 in flight: transfers/s / 3-round echo units/s",
          bench_ratio(x64->per_s, e64r3->per_s), 0);
    ratio("64 in flight: CPU per transfer / 3-round echo CPU per unit",
          bench_ratio(x64->cpu_us, e64r3->cpu_us), 0);
    ratio("64 in flight: transfers/s / Python's", bench_ratio(x64->per_s,
          p64->per_s), 20);
    ratio("1 in flight: transfers/s / Python's", bench_ratio(x1->per_s,
          p1->per_s), 0);
    ratio("64 in flight: Python's CPU per transfer / xfer's",
          bench_ratio(p64->cpu_us, x64->cpu_us), 0);
    ratio("1 MiB blocks, 1 shard: GB/s / iperf3 -l 1M",
          bench_ratio(f->mib[0].gbps, f->iperf.gbps), 0.95);
    if (x64->per_s > 0)
        printf("  %-64s %8.0f/s   target >= 150000/s  %s\n",
               "64 in flight: transfers/s", x64->per_s,
               x64->per_s >= 150000 ? "met" : "MISSED");
    if (x64->cpu_us > 0)
        printf("  %-64s %8.2f us  target <= 13 us  %s\n",
               "64 in flight: CPU per transfer, every process", x64->cpu_us,
               x64->cpu_us <= 13 ? "met" : "MISSED");
}

/* What CPU alone allows: every CPU of the machine busy with this. */
static void print_ceiling(const opts *o, const figs *f)
{
    int l64 = level_index(o, 64);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (l64 < 0 || ncpu <= 0)
        return;
    printf("\nCPU ceiling at 64 in flight (%ld CPUs / CPU per unit):", ncpu);
    if (f->xfer[l64].cpu_us > 0)
        printf(" xfer %.0f transfers/s;", 1e6 * (double)ncpu /
               f->xfer[l64].cpu_us);
    if (f->echo[1][l64].cpu_us > 0)
        printf(" 3-round echo %.0f units/s;", 1e6 * (double)ncpu /
               f->echo[1][l64].cpu_us);
    if (f->py[l64].cpu_us > 0)
        printf(" Python %.0f transfers/s", 1e6 * (double)ncpu /
               f->py[l64].cpu_us);
    printf("\n");
}

static double max_other(const figs *f)
{
    const bench_fig *all = (const bench_fig *)f;
    double m = 0;
    for (size_t k = 0; k < NF; k++)
        if (all[k].other_cpus > m)
            m = all[k].other_cpus;
    return m;
}

static void print_data(const opts *o, const figs *f)
{
    printf("\npayload GB/s (block = bytes per shard per transfer)\n");
    printf("  %-22s %12s %12s\n", "block", "1 shard", "4 shards");
    if (o->parts & P_DATA) {
        if (f->iperf.gbps > 0)
            printf("  %-22s %7.2f GB/s\n", "iperf3 -l 1M (1 stream)",
                   f->iperf.gbps);
        else
            printf("  iperf3 -l 1M: not available (apt-get install "
                   "iperf3)\n");
        printf("  %-22s %7.2f GB/s %7.2f GB/s\n", "1 MiB", f->mib[0].gbps,
               f->mib[1].gbps);
    }
    for (int i = 0; (o->parts & P_BLOCKS) && i < 3; i++) {
        char what[32];
        snprintf(what, sizeof what, "%u KiB", block_bytes[i] >> 10);
        printf("  %-22s %7.2f GB/s %7.2f GB/s\n", what, f->blocks[i][0].gbps,
               f->blocks[i][1].gbps);
    }
}

static void print_integ(const figs *f)
{
    printf("\nintegrity (docs/integrity.md): the same transfers to 4 xferd "
           "with --integrity off,\nthen to 4 with shard (the default: CRC32C "
           "by the producer, checked before READY)\n");
    printf("  %-22s %12s %12s %8s\n", "block per shard", "off", "on",
           "on/off");
    for (int i = 0; i < 3; i++) {
        char what[32];
        snprintf(what, sizeof what, "%u KiB x 4 shards",
                 integ_bytes[i] >> 10);
        printf("  %-22s %7.2f GB/s %7.2f GB/s %8.3f\n", what,
               f->integ[i][0].gbps, f->integ[i][1].gbps,
               bench_ratio(f->integ[i][1].gbps, f->integ[i][0].gbps));
    }
    /* CPU per transfer: 4 KiB per shard (16 KiB a transfer), and a 4 KiB
     * transfer (1 KiB per shard).  Two CRC passes over the transfer's
     * bytes are part of it: at ISA-L's 4 KiB speed on this CPU (about 32
     * GB/s) 16 KiB twice is about 1 us, 4 KiB twice about 0.25 us. */
    for (int i = 3; i < 5; i++) {
        char what[40];
        snprintf(what, sizeof what, "%u KiB x 4: CPU / transfer",
                 integ_bytes[i] >> 10);
        printf("  %-22s %9.2f us %9.2f us %+8.2f us\n", what,
               f->integ[i][0].cpu_us, f->integ[i][1].cpu_us,
               f->integ[i][1].cpu_us - f->integ[i][0].cpu_us);
        printf("  %-22s %9.2f us %9.2f us %+8.2f us\n",
               "  of it, the producer", f->integ[i][0].driver_us,
               f->integ[i][1].driver_us,
               f->integ[i][1].driver_us - f->integ[i][0].driver_us);
        printf("  %-22s %9.2f us %9.2f us %+8.2f us\n", "  of it, the shards",
               f->integ[i][0].peers_us, f->integ[i][1].peers_us,
               f->integ[i][1].peers_us - f->integ[i][0].peers_us);
    }
}

static void print_all(const opts *o, const world *w, const figs *f)
{
    if (o->parts & P_ECHO)
        print_echo(o, f);
    if (o->parts & P_WIRE)
        print_levels("minimal C producer -> the same 4 xferd (epoll, the "
                     "wire protocol, one write\nper connection per turn; "
                     "no engine): what the shard servers cost", o, f->wire);
    if (o->parts & P_XFER)
        print_levels(bench_pump_eager_max_bytes
                         ? "xfer: engine + tcp transport -> 4 xferd processes "
                           "(--eager: one EAGER op on every shard)"
                         : "xfer: engine + tcp transport -> 4 xferd processes "
                           "(reserve, write, commit on every shard)",
                     o, f->xfer);
    if ((o->parts & P_XFER) && w->etcd[0]) {
        print_levels("xfer through etcd: the same, the tcp transport created "
                     "from the group name", o, f->dir);
        int l1 = level_index(o, 1);
        if (l1 >= 0 && f->xfer[l1].per_s > 0)
            printf("  directory cost at 1 in flight: static addresses "
                   "%.0f/s p50 %.1f us, through etcd %.0f/s p50 %.1f us "
                   "(%.2fx the transfers/s)\n", f->xfer[l1].per_s,
                   f->xfer[l1].p50_us, f->dir[l1].per_s, f->dir[l1].p50_us,
                   f->dir[l1].per_s / f->xfer[l1].per_s);
    }
    if ((o->parts & P_PYTHON) && w->py) {
        char title[160];
        snprintf(title, sizeof title, "Python reference (%s, the same "
                 "3-round protocol, 4 shard processes)",
                 bench_pyref_kind(w->py));
        print_levels(title, o, f->py);
    } else if (o->parts & P_PYTHON) {
        printf("\nPython reference: not run (%s)\n", w->py_why);
    }
    if (o->parts & (P_DATA | P_BLOCKS))
        print_data(o, f);
    if (o->parts & P_INTEG)
        print_integ(f);
    print_ratios(o, f);
    print_ceiling(o, f);
    double other = max_other(f);
    printf("\nother load: up to %.2f CPUs were busy with other processes "
           "during a figure%s\n", other,
           other > 0.1 ? " (the machine was not quiet: rerun)" : "");
}

/* ---------------------------------------------------------------------- */
/* Smoke: counts that must add up                                          */
/* ---------------------------------------------------------------------- */

static int check(bool ok, const char *what)
{
    printf("  %-64s %s\n", what, ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}

static int status_sum(const world *w, xfer_wire_status *sum)
{
    *sum = (xfer_wire_status){0};
    for (uint16_t k = 0; k < NSHARDS; k++) {
        xfer_wire_status st;
        if (demo_tcp_status(w->group, k, &st) != 0)
            return -1;
        sum->reserves += st.reserves;
        sum->commits += st.commits;
        sum->writes += st.writes;
        sum->write_bytes += st.write_bytes;
        sum->bytes_in_use += st.bytes_in_use;
    }
    return 0;
}

/* Units of `rounds` through e at 1 and at 64 in flight. */
static int smoke_client(world *w, bench_echo *e, const char *name,
                        uint32_t rounds)
{
    static const uint32_t inflight[2] = {1, 64}, units[2] = {100, 300};
    char err[256], what[128];
    int bad = 0;
    for (int i = 0; i < 2; i++) {
        bench_echo_params p = {.rounds = rounds, .inflight = inflight[i],
                               .ns = UINT64_MAX / 4, .max_units = units[i]};
        bench_echo_counts c;
        bench_fig f;
        xfer_wire_status s0, s1;
        int st = e == w->wire ? status_sum(w, &s0) : 0;
        int rc = bench_echo_run(e, &p, &f, &c, err, sizeof err);
        if (e == w->wire)
            st |= status_sum(w, &s1);
        snprintf(what, sizeof what, "%s %u round(s), %u in flight: "
                 "%" PRIu64 " of %u units", name, rounds, inflight[i],
                 c.done, units[i]);
        bad += check(rc == 0 && c.done == units[i] &&
                     c.started == units[i] && f.units == units[i], what);
        bad += check(c.frames_sent == c.frames_received &&
                     c.frames_sent == (uint64_t)units[i] * NSHARDS * rounds,
                     "  every frame answered once, rounds x peers each");
        if (e == w->wire)
            bad += check(st == 0 &&
                         s1.commits - s0.commits ==
                             (uint64_t)units[i] * NSHARDS &&
                         s1.bytes_in_use == 0,
                         "  the shards counted one commit per shard each");
        bad += check(f.p50_us > 0 && f.p99_us >= f.p50_us && f.cpu_us > 0,
                     "  latency and CPU measured");
        if (rc)
            printf("  (%s)\n", err);
    }
    return bad;
}

static int smoke_pump(world *w, bool one, uint32_t slice, uint32_t inflight,
                      uint32_t units, bool dir)
{
    char err[256], what[128];
    uint16_t shards = one ? 1 : NSHARDS;
    xfer_wire_status s0, s1;
    bench_pump_params p = {.one_shard = one, .slice = slice,
                           .inflight = inflight, .ns = UINT64_MAX / 4,
                           .max_units = units, .via_dir = dir};
    bench_pump_counts c;
    bench_fig f;
    int st0 = status_sum(w, &s0);
    int rc = bench_pump_run(w->pump, &p, &f, &c, err, sizeof err);
    int st1 = status_sum(w, &s1);
    int bad = 0;
    snprintf(what, sizeof what, "xfer %u B x %u shard(s), %u in flight%s: "
             "%" PRIu64 " of %u ok", slice, shards, inflight,
             dir ? " through etcd" : "", c.done, units);
    bad += check(rc == 0 && c.done == units && c.submitted == units &&
                 c.failed == 0 && c.refused == 0 && f.units == units, what);
    bad += check(c.ops_sent == (uint64_t)units * shards * 3,
                 "  3 frames (reserve, write, commit) per shard per transfer");
    bad += check(st0 == 0 && st1 == 0 &&
                 s1.reserves - s0.reserves == (uint64_t)units * shards &&
                 s1.commits - s0.commits == (uint64_t)units * shards,
                 "  the shards counted one reserve and one commit each");
    bad += check(st1 == 0 && s1.write_bytes - s0.write_bytes ==
                 (uint64_t)units * shards * slice &&
                 s1.bytes_in_use == 0,
                 "  every payload byte landed; nothing left reserved");
    bad += check(f.p50_us > 0 && f.cpu_us > 0 && f.peers_us > 0,
                 "  latency and CPU (producer and shards) measured");
    return bad;
}

static int smoke_python(world *w)
{
    static const uint32_t inflight[2] = {1, 64}, units[2] = {50, 200};
    char err[256], what[128];
    int bad = 0;
    if (!w->py) {
        printf("  python reference: not run (%s)\n", w->py_why);
        return 0;
    }
    for (int i = 0; i < 2; i++) {
        bench_fig f;
        int rc = bench_pyref_run(w->py, inflight[i], 60000000000ull,
                                 units[i], &f, err, sizeof err);
        snprintf(what, sizeof what, "python (%s), %u in flight: %.0f of %u "
                 "ok", bench_pyref_kind(w->py), inflight[i], f.units,
                 units[i]);
        bad += check(rc == 0 && f.units == units[i] && f.failed == 0, what);
        bad += check(f.p50_us > 0 && f.cpu_us > 0,
                     "  latency and CPU measured");
    }
    return bad;
}

static int smoke(world *w, const opts *o)
{
    printf("xfer-bench tcp --smoke: counts that must add up\n");
    int bad = 0;
    if (o->parts & P_ECHO)
        bad += smoke_client(w, w->echo, "echo", 1) +
               smoke_client(w, w->echo, "echo", 3);
    if (o->parts & P_WIRE)
        bad += smoke_client(w, w->wire, "wire", 3);
    if (o->parts & P_XFER) {
        bad += smoke_pump(w, false, 0, 1, 100, false);
        bad += smoke_pump(w, false, 0, 64, 300, false);
        bad += smoke_pump(w, true, MIB, 8, 16, false);
    }
    if ((o->parts & P_XFER) && w->etcd[0]) {
        bad += smoke_pump(w, false, 0, 1, 100, true);
        bad += smoke_pump(w, false, 0, 64, 300, true);
    }
    if (o->parts & P_PYTHON)
        bad += smoke_python(w);
    printf("%s\n", bad ? "smoke: FAILED" : "smoke: ok");
    return bad ? 1 : 0;
}

/* ---------------------------------------------------------------------- */
/* Setup and main                                                          */
/* ---------------------------------------------------------------------- */

/* xferd next to us (an install), else in the build tree: we live in
 * tools/bench/, xferd in tools/xferd/. */
static void find_xferd(const char *argv0, char *buf, size_t cap)
{
    char up[PATH_MAX];
    if (demo_tcp_find_xferd(argv0, buf, cap) == 0)
        return;
    const char *slash = strrchr(argv0, '/');
    snprintf(up, sizeof up, "%.*s../xfer-bench-tcp",
             slash ? (int)(slash + 1 - argv0) : 0, argv0);
    if (demo_tcp_find_xferd(up, buf, cap) != 0)
        demo_tcp_find_xferd(argv0, buf, cap); /* for the message */
}

static int connect_wire(world *w, char *err, size_t cap)
{
    const char *addrs[NSHARDS];
    pid_t pids[NSHARDS];
    for (uint16_t k = 0; k < NSHARDS; k++) {
        addrs[k] = demo_tcp_addr(w->group, k);
        pids[k] = demo_tcp_pid(w->group, k);
    }
    return bench_echo_connect_wire(NSHARDS, addrs, pids, &w->wire, err, cap);
}

static int start_world(world *w, const opts *o, const char *argv0)
{
    char err[256], xferd[PATH_MAX];
    /* The echo processes fork first: they inherit nothing else. */
    if ((o->parts & P_ECHO) &&
        bench_echo_start(NSHARDS, &w->echo, err, sizeof err) != 0)
        goto out_err;
    if (o->parts & (P_WIRE | P_XFER | P_DATA | P_BLOCKS | P_INTEG)) {
        if (o->xferd)
            snprintf(xferd, sizeof xferd, "%s", o->xferd);
        else if (getenv("XFERD"))
            snprintf(xferd, sizeof xferd, "%s", getenv("XFERD"));
        else
            find_xferd(argv0, xferd, sizeof xferd);
        /* Shard tombstones live 2 x the lease: a 1 s lease leaves room
         * for 500 k transfers/s per shard in 1 M tombstones. */
        if (o->etcd_url)
            snprintf(w->etcd, sizeof w->etcd, "%s", o->etcd_url);
        else if (o->etcd_own &&
                 bench_etcd_start(w->etcd, sizeof w->etcd, err, sizeof err))
            goto out_err;
        demo_tcp_config gc = {.xferd = xferd, .nshards = NSHARDS,
                              .pool_bytes = o->smoke ? 64u << 20
                                                     : 256u << 20,
                              .max_resv = 65536,
                              .max_tombs = 1u << 20, .lease_ttl_ms = 1000,
                              .etcd = w->etcd[0] ? w->etcd : NULL};
        if (demo_tcp_start(&gc, &w->group, err, sizeof err) != 0 ||
            bench_pump_new(w->group, NSHARDS, &w->pump, err, sizeof err) ||
            (w->etcd[0] &&
             bench_pump_add_dir(w->pump, w->etcd, err, sizeof err)))
            goto out_err;
        snprintf(w->xferd, sizeof w->xferd, "%s", xferd);
        w->integ_gc = gc;
        w->integ_gc.xferd = w->xferd;
        w->integ_gc.etcd = NULL; /* those groups are static */
    }
    if ((o->parts & P_WIRE) && connect_wire(w, err, sizeof err) != 0)
        goto out_err;
    if ((o->parts & P_PYTHON) &&
        bench_pyref_start(o->python, o->pyref, NSHARDS, o->py_stdlib, &w->py,
                          w->py_why, sizeof w->py_why) != 0)
        w->py = NULL; /* reported, not fatal */
    if (o->verbose) {
        fprintf(stderr, "pids: bench %d xferd", getpid());
        for (uint16_t k = 0; w->group && k < NSHARDS; k++)
            fprintf(stderr, " %d", (int)demo_tcp_pid(w->group, k));
        fprintf(stderr, "\n");
    }
    if (o->pause_ms > 0) {
        struct timespec ts = {o->pause_ms / 1000,
                              (long)(o->pause_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
out_err:
    fprintf(stderr, "xfer-bench-tcp: %s\n", err);
    return -1;
}

static void stop_world(world *w)
{
    bench_pyref_stop(w->py);
    bench_pump_del(w->pump);

    bench_echo_stop(w->wire);
    demo_tcp_stop(w->group);
    bench_echo_stop(w->echo);
}

/* Every flag, its value and its help: getopt_long's options and --help
 * are both built from this table (tools/cli.h). */
enum { F_ONLY = 256, F_RUNS, F_SECONDS, F_INFLIGHT, F_WARMUP, F_XFERD,
       F_PYTHON, F_PYREF, F_PYSTDLIB, F_SMOKE, F_VERBOSE, F_PAUSE, F_EAGER,
       F_ETCD, F_ETCD_URL };
static const cli_flag flags[] = {
    {"only", 0, "PARTS", "a comma list of echo,wire,xfer,python,data,blocks,"
     "integrity (all)", F_ONLY},
    {"runs", 0, "N", "repeat every part N times, print the medians, 1..32 "
     "(1)", F_RUNS},
    {"seconds", 0, "S", "seconds per figure (2)", F_SECONDS},
    {"inflight", 0, "N[,N...]", "in-flight levels, 1..256, at most 4 "
     "(1,64)", F_INFLIGHT},
    {"warmup", 0, "S", "64-in-flight warm-up before the xfer figures "
     "(seconds / 4)", F_WARMUP},
    {"xferd", 0, "PATH", "the xferd to run (default: next to this program, "
     "or $XFERD)", F_XFERD},
    {"python", 0, "PATH", "the interpreter of the Python reference "
     "(/usr/bin/python3)", F_PYTHON},
    {"pyref", 0, "PATH", "the Python reference (pyref.py of the source "
     "tree, else the installed one)", F_PYREF},
    {"py-stdlib", 0, NULL, "the Python reference on asyncio + json, not "
     "uvloop + msgpack", F_PYSTDLIB},
    {"smoke", 0, NULL, "a few hundred units per part, and check the counts "
     "add up (exit 1 if not)", F_SMOKE},
    {"verbose", 0, NULL, "pids and unit counts on stderr (for profilers)",
     F_VERBOSE},
    {"pause-ms", 0, "MS", "wait after printing the pids, so a profiler can "
     "attach (0)", F_PAUSE},
    {"eager", 0, NULL, "blocks up to 4 KiB go as one EAGER frame per shard",
     F_EAGER},
    {"etcd", 0, NULL, "the xfer figures again with the shards found through "
     "an etcd started on loopback (etcd on PATH)", F_ETCD},
    {"etcd-url", 0, "URLS", "the same through a running etcd (its client "
     "URLs)", F_ETCD_URL},
    CLI_HELP,
    CLI_VERSION,
    {NULL, 0, NULL, NULL, 0}};

static const cli tcp_cli = {
    .prog = "xfer-bench-tcp",
    .summary = "the xfer TCP benchmark (run by xfer-bench tcp)",
    .synopsis = "[flags]",
    .intro = "xfer over TCP against the machine's own floor (a C echo), "
             "its wire and a\nPython reference, all in one run "
             "(`xfer-bench tcp` runs it)\n",
    .flags = flags};

static int bad_arg(const char *what, const char *arg)
{
    return cli_bad(&tcp_cli, what, arg);
}

static int parse_parts(const char *s, unsigned *parts)
{
    static const char *const names[] = PART_NAMES;
    char buf[128];
    *parts = 0;
    if (strlen(s) >= sizeof buf)
        return -1;
    strcpy(buf, s);
    for (char *save, *t = strtok_r(buf, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        unsigned bit = 0;
        for (unsigned i = 0; i < NPARTS; i++)
            if (!strcmp(t, names[i]))
                bit = 1u << i;
        if (!bit)
            return -1;
        *parts |= bit;
    }
    return *parts ? 0 : -1;
}

static int parse_levels(const char *s, opts *o)
{
    char *end;
    o->nlevels = 0;
    do {
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || v == 0 || v > BENCH_ECHO_MAX_INFLIGHT ||
            v > BENCH_PUMP_MAX_INFLIGHT || o->nlevels == MAX_LEVELS ||
            (*end && *end != ','))
            return -1;
        o->level[o->nlevels++] = (uint32_t)v;
        s = end + 1;
    } while (*end);
    return 0;
}

static int parse(int argc, char **argv, opts *o)
{
    const char *v;
    char *end;
    for (int k; (k = cli_next(&tcp_cli, argc, argv, &v)) != CLI_END;) {
        switch (k) {
        case F_SMOKE: o->smoke = true; break;
        case F_VERBOSE: o->verbose = true; break;
        case F_PYSTDLIB: o->py_stdlib = true; break;
        case F_EAGER: bench_pump_eager_max_bytes = 4096; break;
        case F_ETCD: o->etcd_own = true; break;
        case F_ETCD_URL: o->etcd_url = v; break;
        case F_ONLY:
            o->only_given = true;
            if (parse_parts(v, &o->parts))
                return bad_arg("part list (echo,wire,xfer,python,data,"
                               "blocks)", v);
            break;
        case F_RUNS: {
            long n = strtol(v, &end, 10);
            if (!*v || *end || n < 1 || n > MAX_RUNS)
                return bad_arg("run count (1..32)", v);
            o->runs = (int)n;
            break;
        }
        case F_SECONDS:
            o->seconds = strtod(v, &end);
            if (!*v || *end || !(o->seconds > 0 && o->seconds <= 3600))
                return bad_arg("duration", v);
            break;
        case F_WARMUP:
            o->warmup = strtod(v, &end);
            if (!*v || *end || !(o->warmup >= 0 && o->warmup <= 3600))
                return bad_arg("warm-up duration", v);
            break;
        case F_PAUSE: {
            long n = strtol(v, &end, 10);
            if (!*v || *end || n < 0 || n > 600000)
                return bad_arg("pause", v);
            o->pause_ms = (int)n;
            break;
        }
        case F_INFLIGHT:
            if (parse_levels(v, o))
                return bad_arg("in-flight list (1..256, at most 4)", v);
            break;
        case F_XFERD: o->xferd = v; break;
        case F_PYTHON: o->python = v; break;
        case F_PYREF: o->pyref = v; break;
        default: return 2; /* CLI_ERR: the line is printed */
        }
    }
    if (optind < argc)
        return bad_arg("argument", argv[optind]);
    if (o->etcd_own && o->etcd_url)
        return bad_arg("flag (--etcd or --etcd-url, not both)", "--etcd-url");
    return 0;
}

int main(int argc, char **argv)
{
    opts o = {.parts = (1u << NPARTS) - 1,
              .runs = 1, .seconds = 2, .warmup = -1, .level = {1, 64},
              .nlevels = 2,
              .python = "/usr/bin/python3", .pyref = XFER_BENCH_PYREF};
    if (access(o.pyref, R_OK) != 0) /* an install without its sources */
        o.pyref = XFER_BENCH_PYREF_INSTALLED;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc;
    if (o.smoke) /* of --only's parts, those that have a smoke run */
        o.parts = (o.only_given ? o.parts : ~0u) &
                  (P_ECHO | P_WIRE | P_XFER | P_PYTHON);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    atexit(bench_proc_kill_all);
    world w = {0};
    static figs runs[MAX_RUNS];
    figs med;
    rc = 1;
    if (start_world(&w, &o, argv[0]) != 0)
        goto out;
    if (o.smoke) {
        rc = smoke(&w, &o);
        goto out;
    }
    printf("xfer-bench tcp: 4 shard processes on 127.0.0.1, 0-byte "
           "transfers, %.1f s per figure, %s%d run%s\n", o.seconds,
           o.runs > 1 ? "median of " : "", o.runs, o.runs > 1 ? "s" : "");
    for (int r = 0; r < o.runs; r++) {
        fprintf(stderr, "xfer-bench-tcp: run %d of %d\n", r + 1, o.runs);
        if (run_once(&w, &o, &runs[r]) != 0)
            goto out;
    }
    median_figs(runs, o.runs, &med);
    print_all(&o, &w, &med);
    rc = 0;
out:
    stop_world(&w);
    return rc;
}
