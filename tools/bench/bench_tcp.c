/*
 * tools/bench/bench_tcp.c - `xfer-bench tcp`: the tcp transport against 4
 * xferd shard processes on loopback, side by side with iperf3 measured in
 * the same run.  Prints figures and the targets of docs/design.md section
 * 8; it asserts nothing about time.
 *
 *   xfer-bench-tcp [--xferd PATH] [--seconds S]
 *
 * Phases: (1) iperf3 -l 1M, one stream, on 127.0.0.1 (the reference);
 * (2) transfers with no payload (0-byte slices: reserve, write, commit on
 * every shard) at 1 and 64 in flight, with p50/p99 latency from submit to
 * completion; (3) GB/s of payload for 64 KiB, 256 KiB, 1 MiB and 4 MiB
 * blocks per shard, over 1 shard and over 4 shards.
 *
 * Invariant: every child process (xferd, iperf3) is killed before exit,
 * and dies with us (PR_SET_PDEATHSIG) if we die first.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "xfer/tcp.h"
#include "xfer/xfer.h"

#define NSHARDS 4
#define STAGING (64u << 20)

static pid_t kids[8];
static int nkids;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void kill_kids(void)
{
    for (int i = 0; i < nkids; i++)
        if (kids[i] > 0) {
            kill(kids[i], SIGKILL);
            waitpid(kids[i], NULL, 0);
            kids[i] = 0;
        }
}

static pid_t spawn(const char *const *argv, bool quiet)
{
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0 && quiet) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (pid > 0 && nkids < 8)
        kids[nkids++] = pid;
    return pid;
}

/* Start xferd for shard k; returns its port, or 0. */
static uint16_t start_xferd(const char *bin, int k)
{
    char shard[8], pf[128];
    snprintf(shard, sizeof shard, "%d", k);
    snprintf(pf, sizeof pf, "/tmp/xfer-bench-%d-%d.port", getpid(), k);
    unlink(pf);
    const char *argv[] = {bin, "--port", "0", "--port-file", pf, "--shards",
                          shard, "--pool", "256M", "--max-resv", "65536",
                          "--max-tombs", "1048576", "--lease-ttl", "2s", "--consume", "--quiet",
                          NULL};
    if (spawn(argv, true) < 0)
        return 0;
    for (int i = 0; i < 1000; i++) {
        FILE *f = fopen(pf, "r");
        unsigned port = 0;
        if (f) {
            int ok = fscanf(f, "%u", &port) == 1;
            fclose(f);
            if (ok && port) {
                unlink(pf);
                return (uint16_t)port;
            }
        }
        sleep_ms(5);
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* iperf3 reference                                                        */
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
    pid_t pid = spawn(srv, true);
    if (pid < 0)
        return 0;
    sleep_ms(300);
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
    kill(pid, SIGKILL);
    return bps / 8e9;
}

/* ---------------------------------------------------------------------- */
/* A closed-loop transfer pump                                             */
/* ---------------------------------------------------------------------- */

typedef struct pump {
    xfer_engine *e;
    struct event_base *base;
    uint32_t group, pool;
    uint16_t nshards;
    uint32_t slice, inflight, live;
    uint64_t next_id, done, failed, bytes, stop_at;
    uint64_t started[256];
    uint32_t free_slots[256], nfree;
    uint64_t *lat;
    size_t nlat, caplat;
} pump;

static void submit(pump *u);

static void on_done(void *ud, const xfer_result *res)
{
    pump *u = ud;
    uint32_t slot = (uint32_t)res->user_data;
    uint64_t t = now_ns();
    u->live--;
    u->free_slots[u->nfree++] = slot;
    if (res->status == 0) {
        u->done++;
        u->bytes += (uint64_t)u->slice * u->nshards;
        if (u->nlat < u->caplat)
            u->lat[u->nlat++] = t - u->started[slot];
    } else {
        if (u->failed++ == 0 && getenv("XFER_BENCH_DEBUG"))
            fprintf(stderr, "first failure: %s phase %u shard %u\n",
                    xfer_strerror(res->status), (unsigned)res->phase,
                    (unsigned)res->first_failed_shard);
    }
    if (t < u->stop_at)
        submit(u);
    else if (u->live == 0)
        event_base_loopbreak(u->base);
}

static void submit(pump *u)
{
    uint32_t slot = u->free_slots[--u->nfree];
    xfer_slice sl[NSHARDS];
    for (uint16_t k = 0; k < u->nshards; k++) {
        sl[k].off = ((uint64_t)slot * u->nshards + k) * u->slice;
        sl[k].len = u->slice;
    }
    xfer_transfer_desc d = {.id = ++u->next_id, .group = u->group,
                            .pool = u->pool, .nslices = u->nshards,
                            .slices = sl, .user_data = slot};
    u->started[slot] = now_ns();
    if (xfer_engine_submit(u->e, &d, on_done, u) != 0) {
        u->failed++;
        u->free_slots[u->nfree++] = slot;
        if (u->live == 0)
            event_base_loopbreak(u->base); /* nothing left to wait for */
        return;
    }
    u->live++;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct figures {
    double per_s, gbps, p50_us, p99_us;
    uint64_t failed;
} figures;

/* Run for `ns` with `inflight` transfers of `slice` bytes per shard. */
static figures run(pump *u, uint32_t slice, uint32_t inflight, uint64_t ns)
{
    u->slice = slice;
    u->inflight = inflight;
    u->done = u->failed = u->bytes = 0;
    u->nlat = 0;
    u->nfree = 0;
    for (uint32_t i = 0; i < inflight; i++)
        u->free_slots[u->nfree++] = inflight - 1 - i;
    uint64_t t0 = now_ns();
    u->stop_at = t0 + ns;
    for (uint32_t i = 0; i < inflight; i++)
        submit(u);
    event_base_dispatch(u->base);
    double secs = (double)(now_ns() - t0) / 1e9;
    figures f = {.per_s = (double)u->done / secs,
                 .gbps = (double)u->bytes / secs / 1e9, .failed = u->failed};
    if (u->nlat) {
        qsort(u->lat, u->nlat, sizeof u->lat[0], cmp_u64);
        f.p50_us = (double)u->lat[u->nlat / 2] / 1e3;
        f.p99_us = (double)u->lat[u->nlat * 99 / 100] / 1e3;
    }
    return f;
}

/* ---------------------------------------------------------------------- */
/* Setup                                                                   */
/* ---------------------------------------------------------------------- */

typedef struct setup {
    struct event_base *base;
    xfer_engine *e;
    xfer_tcp *tcp4, *tcp1;
    uint32_t g4, g1, pool;
    uint8_t *staging;
} setup;

static int make_tcp(setup *s, const uint16_t *ports, uint16_t n,
                    xfer_tcp **tcp, uint32_t *group)
{
    static char buf[NSHARDS][32];
    const char *addrs[NSHARDS];
    for (uint16_t k = 0; k < n; k++) {
        snprintf(buf[k], sizeof buf[k], "127.0.0.1:%u", (unsigned)ports[k]);
        addrs[k] = buf[k];
    }
    xfer_tcp_config tc = {.nshards = n, .addrs = addrs};
    if (xfer_tcp_new(s->base, &tc, tcp) != 0)
        return -1;
    return xfer_engine_add_group(s->e, xfer_tcp_transport(*tcp), group);
}

static bool connected(const setup *s)
{
    for (uint16_t k = 0; k < NSHARDS; k++)
        if (!xfer_tcp_connected(s->tcp4, k))
            return false;
    return xfer_tcp_connected(s->tcp1, 0);
}

static int make_setup(setup *s, const uint16_t *ports)
{
    s->base = event_base_new();
    xfer_engine_config ec = {.base = s->base};
    ec.core.default_deadline_ns = 30000000000ull;
    /* At 100 k transfers/s the producer makes 100 k tombstones a second:
     * keep them as long as the shards' leases (2 s) plus a margin, and
     * room for that many. */
    ec.core.tombstone_ttl_ns = 5000000000ull;
    ec.core.max_tombstones = 1u << 22;
    s->staging = malloc(STAGING);
    if (!s->base || !s->staging || xfer_engine_new(&ec, &s->e) != 0)
        return -1;
    memset(s->staging, 0x5A, STAGING); /* touch every page once */
    if (xfer_engine_register_pool(s->e, s->staging, STAGING, &s->pool) ||
        make_tcp(s, ports, NSHARDS, &s->tcp4, &s->g4) ||
        make_tcp(s, ports, 1, &s->tcp1, &s->g1))
        return -1;
    uint64_t end = now_ns() + 10000000000ull;
    while (!connected(s) && now_ns() < end)
        event_base_loop(s->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    return connected(s) ? 0 : -1;
}

static void on_shut(void *ud)
{
    event_base_loopbreak(ud);
}

static void free_setup(setup *s)
{
    if (s->e && xfer_engine_shutdown(s->e, on_shut, s->base) == 0)
        event_base_dispatch(s->base);
    xfer_engine_del(s->e);
    xfer_tcp_del(s->tcp4);
    xfer_tcp_del(s->tcp1);
    if (s->base) {
        event_base_loop(s->base, EVLOOP_NONBLOCK);
        event_base_free(s->base);
    }
    free(s->staging);
}

/* ---------------------------------------------------------------------- */
/* Main                                                                    */
/* ---------------------------------------------------------------------- */

static const char *find_xferd(const char *arg)
{
    static char path[PATH_MAX];
    if (arg)
        return arg;
    if (getenv("XFERD"))
        return getenv("XFERD");
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n <= 0)
        return "xferd";
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    strcpy(slash ? slash + 1 : path, "../xferd/xferd");
    return access(path, X_OK) == 0 ? path : "xferd";
}

static void print_latency(const char *what, figures f)
{
    printf("  %-34s %10.0f transfers/s   p50 %7.1f us   p99 %7.1f us%s\n",
           what, f.per_s, f.p50_us, f.p99_us, f.failed ? "  (failures!)" : "");
}

static void data_phase(setup *s, pump *u, uint64_t ns, double iperf)
{
    static const uint32_t blocks[] = {64u << 10, 256u << 10, 1u << 20,
                                      4u << 20};
    static const uint32_t depth[] = {32, 16, 8, 4};
    printf("\n  payload GB/s (block = bytes per shard per transfer)\n");
    printf("  %-10s %12s %12s\n", "block", "1 shard", "4 shards");
    double one_mib = 0;
    for (int i = 0; i < 4; i++) {
        double g[2];
        for (int j = 0; j < 2; j++) {
            u->group = j ? s->g4 : s->g1;
            u->nshards = j ? NSHARDS : 1;
            figures f = run(u, blocks[i], depth[i], ns);
            g[j] = f.gbps;
        }
        if (blocks[i] == (1u << 20))
            one_mib = g[0];
        printf("  %-10u %9.2f GB/s %7.2f GB/s\n", blocks[i] >> 10 << 10 ==
               blocks[i] ? blocks[i] : 0, g[0], g[1]);
    }
    if (iperf > 0)
        printf("\n  1 MiB over 1 shard = %.0f %% of iperf3 -l 1M "
               "(target >= 90 %%)\n", 100.0 * one_mib / iperf);
}

int main(int argc, char **argv)
{
    const char *xferd_arg = NULL;
    double seconds = 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--xferd") == 0 && i + 1 < argc)
            xferd_arg = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc &&
                 (seconds = atof(argv[++i])) > 0)
            continue;
        else {
            fprintf(stderr, "xfer-bench-tcp: bad argument '%s'\n", argv[i]);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    atexit(kill_kids);
    const char *xferd = find_xferd(xferd_arg);
    uint16_t ports[NSHARDS];
    for (int k = 0; k < NSHARDS; k++)
        if (!(ports[k] = start_xferd(xferd, k))) {
            fprintf(stderr, "xfer-bench-tcp: cannot start %s\n", xferd);
            return 1;
        }
    printf("xfer-bench tcp: 4 xferd shard processes on 127.0.0.1, %.1f s "
           "per figure\n", seconds);
    double iperf = iperf3_gbps((int)(seconds + 0.5) < 1 ? 1
                                                         : (int)(seconds + 0.5));
    if (iperf > 0)
        printf("  reference: iperf3 -l 1M, 1 stream:  %.2f GB/s\n", iperf);
    else
        printf("  reference: iperf3 not available\n");
    setup s = {0};
    if (make_setup(&s, ports) != 0) {
        fprintf(stderr, "xfer-bench-tcp: cannot connect to the shards\n");
        return 1;
    }
    static uint64_t lat[1 << 22];
    pump u = {.e = s.e, .base = s.base, .group = s.g4, .pool = s.pool,
              .nshards = NSHARDS, .lat = lat, .caplat = 1 << 22};
    uint64_t ns = (uint64_t)(seconds * 1e9);
    run(&u, 0, 64, ns / 4); /* warm-up */
    printf("\n  no payload, 4 shards (reserve + write + commit on each)\n");
    print_latency("1 in flight", run(&u, 0, 1, ns));
    print_latency("64 in flight", run(&u, 0, 64, ns));
    printf("  targets: >= 100 k transfers/s at 64 in flight; p50 < 150 us "
           "at 1\n  (references: Python asyncio ~10 k/s, Mooncake TCP "
           "~14 k/s)\n");
    data_phase(&s, &u, ns, iperf);
    free_setup(&s);
    kill_kids();
    return 0;
}
