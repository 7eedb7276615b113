/*
 * tools/bench/bench_scale.c - xfer-bench-scale (`xfer-bench scale`): how
 * the cost grows with the cluster.  One run prints a table and writes the
 * data and gnuplot PNGs (docs/scale_*.png with --plots DIR):
 *
 *   shards     1, 2, 4, 8, 16 xferd (one process per shard, --consume),
 *              64 in flight, 4 KiB per shard;
 *   producers  1, 2, 4, 8 producer processes against the same 4 shards;
 *   inflight   1 .. 1024 transfers in flight, 4 shards;
 *   live ids   1 k .. 1 M ids held by the producer's tables (pre-emptive
 *              tombstones of cancelled ids) while the loop runs;
 *   groups     membership-change latency: a registered shard stops its
 *              keepalives (a crash) until the producer's directory says it
 *              is gone, with 1, 10, 100, 1000 groups registered in the same
 *              etcd (needs etcd on PATH; skipped with a line otherwise).
 *
 * Each point reports transfers/s, CPU per transfer (the producers' and
 * every xferd's, from /proc), that CPU per shard, and the p99 latency of
 * a transfer (each point: the median of three runs by CPU per transfer).
 * The reference of the shard and producer curves is their
 * first point, measured in the same run: the target is CPU per transfer
 * per shard within 1.3x of it.  Nothing is asserted about time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "../demo_tcp.h"
#include "../cli.h"
#include "etcd_run.h"
#include "proc.h"
#include "xfer/dir.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

#define MAXS 16
#define SLICE 4096
#define MAX_INFLIGHT 1024
#define LAT_CAP (1u << 21)

typedef struct point {
    double x, tps, cpu_us, cpu_us_shard, p99_us;
    uint64_t done, failed;
    int32_t why; /* the first failure's status */
} point;

static int32_t first_fail; /* of the run in this process */

static double secs = 1.5; /* per point */

static uint64_t now_ns(void)
{
    return xfer_clock_monotonic(NULL);
}

/* ---------------------------------------------------------------------- */
/* One producer: a closed loop of transfers over S shards                  */
/* ---------------------------------------------------------------------- */

typedef struct loop_run {
    struct event_base *base;
    xfer_engine *e;
    xfer_tcp *tcp;
    uint32_t group, pool;
    uint8_t *staging;
    uint16_t S;
    uint32_t inflight;
    uint64_t next_id, done, failed;
    uint64_t *start; /* per slot */
    uint32_t *lat_us;
    size_t nlat;
    bool stop;
    uint32_t live;
} loop_run;

static void submit(loop_run *r, uint32_t slot);

static void on_done(void *ud, const xfer_result *res)
{
    loop_run *r = ud;
    uint32_t slot = (uint32_t)res->user_data;
    r->live--;
    if (res->status == 0) {
        r->done++;
        if (r->nlat < LAT_CAP)
            r->lat_us[r->nlat++] =
                (uint32_t)((now_ns() - r->start[slot]) / 1000);
    } else {
        if (!r->failed && !first_fail)
            first_fail = res->status;
        r->failed++;
    }
    if (!r->stop)
        submit(r, slot);
}

static void submit(loop_run *r, uint32_t slot)
{
    xfer_slice sl[MAXS];
    for (uint16_t k = 0; k < r->S; k++)
        sl[k] = (xfer_slice){.off = ((uint64_t)slot * r->S + k) * SLICE,
                             .len = SLICE};
    xfer_transfer_desc d = {.id = ++r->next_id, .group = r->group,
                            .pool = r->pool, .nslices = r->S, .slices = sl,
                            .user_data = slot};
    r->start[slot] = now_ns();
    int rc = xfer_engine_submit(r->e, &d, on_done, r);
    if (rc == 0) {
        r->live++;
    } else {
        if (!r->failed && !first_fail)
            first_fail = rc; /* refused at the submit */
        r->failed++;
    }
}

static bool all_up(loop_run *r)
{
    for (uint16_t k = 0; k < r->S; k++)
        if (!xfer_tcp_connected(r->tcp, k))
            return false;
    return true;
}

static void run_for(struct event_base *b, uint64_t ns)
{
    struct timeval tv = {(time_t)(ns / 1000000000u),
                         (suseconds_t)(ns % 1000000000u / 1000)};
    event_base_loopexit(b, &tv);
    event_base_dispatch(b);
}

static void on_shut(void *ud)
{
    *(bool *)ud = true;
}

/* Build a producer over the first S children, `live_ids` pre-emptive
 * tombstones in its tables; run `inflight` transfers for `secs`. */
static int produce(const char *const *addrs, uint16_t S, uint32_t inflight,
                   uint32_t live_ids, uint64_t first_id, loop_run *r)
{
    memset(r, 0, sizeof *r);
    r->next_id = first_id; /* ids are the group's: the shards' tombstones
                              of earlier points must not meet them */
    r->S = S;
    r->inflight = inflight;
    r->base = event_base_new();
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = r->base;
    ec.core.max_transfers = 4096;
    /* every finished transfer holds a tombstone for its TTL: room for a
     * whole point at any rate */
    ec.core.max_tombstones = live_ids + (1u << 20);
    ec.core.default_deadline_ns = 10000000000ull;
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = S;
    tc.addrs = addrs;
    size_t len = (size_t)inflight * S * SLICE;
    r->staging = calloc(1, len);
    r->start = calloc(inflight, sizeof *r->start);
    r->lat_us = malloc(LAT_CAP * sizeof *r->lat_us);
    if (!r->base || !r->staging || !r->start || !r->lat_us ||
        xfer_engine_new(&ec, &r->e) || xfer_tcp_new(r->base, &tc, &r->tcp) ||
        xfer_engine_register_pool(r->e, r->staging, len, &r->pool) ||
        xfer_engine_add_group(r->e, xfer_tcp_transport(r->tcp), &r->group))
        return -1;
    /* Ids the tables hold: cancelled before use, so each is a tombstone
     * (a range far above the loop's ids). */
    for (uint32_t i = 0; i < live_ids; i++)
        if (xfer_engine_cancel(r->e, first_id + (1ull << 30) + i) != 0)
            return -1;
    for (int i = 0; i < 500 && !all_up(r); i++)
        run_for(r->base, 10000000);
    if (!all_up(r))
        return -1;
    for (uint32_t s = 0; s < inflight; s++)
        submit(r, s);
    run_for(r->base, (uint64_t)(secs * 1e9));
    r->stop = true;
    for (int i = 0; i < 1000 && r->live; i++)
        run_for(r->base, 10000000);
    return 0;
}

static void produce_free(loop_run *r)
{
    bool shut = false;
    if (r->e && xfer_engine_shutdown(r->e, on_shut, &shut) == 0)
        for (int i = 0; i < 500 && !shut; i++)
            run_for(r->base, 10000000);
    xfer_engine_del(r->e);
    xfer_tcp_del(r->tcp);
    if (r->base) {
        event_base_loop(r->base, EVLOOP_NONBLOCK);
        event_base_free(r->base);
    }
    free(r->staging);
    free(r->start);
    free(r->lat_us);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double p99(uint32_t *v, size_t n)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_u32);
    return v[(size_t)((double)n * 0.99) < n ? (size_t)((double)n * 0.99)
                                            : n - 1];
}

/* ---------------------------------------------------------------------- */
/* Points                                                                  */
/* ---------------------------------------------------------------------- */

typedef struct shared_res {
    int32_t why;
    uint64_t done, failed;
    double p99_us;
    int ok;
} shared_res;

typedef struct child_arg {
    uint64_t first_id;
    const char *const *addrs;
    uint16_t S;
    uint32_t inflight;
    shared_res *out;
} child_arg;

static int child_main(void *arg)
{
    child_arg *a = arg;
    loop_run r;
    int rc = produce(a->addrs, a->S, a->inflight, 0, a->first_id, &r);
    a->out->done = r.done;
    a->out->failed = r.failed;
    a->out->p99_us = p99(r.lat_us, r.nlat);
    a->out->ok = rc == 0;
    a->out->why = first_fail;
    produce_free(&r);
    return rc ? 1 : 0;
}

/* The xferd processes a point charges: one per shard (demo_tcp), or a
 * few processes hosting the shards in turn (shard k on host k % nhosts). */
typedef struct peers {
    const demo_tcp *g; /* one xferd per shard; NULL: hosts[] */
    pid_t hosts[2];
    uint16_t nhosts;
} peers;

static uint64_t peers_cpu_ns(const peers *p, uint16_t n)
{
    bench_cpu c = {0};
    if (p->g) {
        for (uint16_t k = 0; k < n; k++)
            bench_proc_cpu(demo_tcp_pid(p->g, k), &c);
    } else {
        for (uint16_t h = 0; h < p->nhosts && h < n; h++)
            bench_proc_cpu(p->hosts[h], &c);
    }
    return c.run_ns;
}

/* P producer processes (P 0: one, in this process) over S shards. */
static int measure(const peers *g, const char *const *addrs, uint16_t S,
                   uint16_t P, uint32_t inflight, uint32_t live_ids,
                   point *pt)
{
    static uint64_t next_base = 1;
    uint64_t base = next_base;
    next_base += 1ull << 36;
    uint64_t cpu0 = peers_cpu_ns(g, S), t0 = now_ns();
    uint64_t done = 0, failed = 0, prod_cpu = 0;
    first_fail = 0;
    double lat = 0;
    if (P == 0) {
        bench_cpu self0 = {0}, self1 = {0};
        bench_proc_cpu(0, &self0);
        loop_run r;
        int rc = produce(addrs, S, inflight, live_ids, base, &r);
        bench_proc_cpu(0, &self1);
        done = r.done;
        failed = r.failed;
        lat = p99(r.lat_us, r.nlat);
        prod_cpu = self1.run_ns - self0.run_ns;
        produce_free(&r);
        if (rc)
            return -1;
    } else {
        shared_res *res = mmap(NULL, P * sizeof *res, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (res == MAP_FAILED)
            return -1;
        memset(res, 0, P * sizeof *res);
        pid_t pids[8];
        child_arg args[8];
        for (uint16_t i = 0; i < P; i++) {
            args[i] = (child_arg){base + ((uint64_t)i << 32), addrs, S,
                                  inflight, &res[i]};
            pids[i] = bench_proc_fork(child_main, &args[i]);
        }
        /* Their CPU, read just before each is reaped. */
        for (uint16_t i = 0; i < P; i++) {
            int st;
            bench_cpu c = {0};
            while (waitid(P_PID, pids[i], NULL, WEXITED | WNOWAIT) != 0 &&
                   errno == EINTR)
                ;
            bench_proc_cpu(pids[i], &c);
            prod_cpu += c.run_ns;
            waitpid(pids[i], &st, 0);
            done += res[i].done;
            failed += res[i].failed;
            if (res[i].p99_us > lat)
                lat = res[i].p99_us;
            if (res[i].why && !first_fail)
                first_fail = res[i].why;
        }
        munmap(res, P * sizeof *res);
    }
    double wall = (double)(now_ns() - t0) / 1e9;
    uint64_t cpu = prod_cpu + peers_cpu_ns(g, S) - cpu0;
    pt->done = done;
    pt->failed = failed;
    pt->tps = (double)done / (wall > secs ? secs : wall);
    pt->cpu_us = done ? (double)cpu / 1e3 / (double)done : 0;
    pt->cpu_us_shard = pt->cpu_us / S;
    pt->p99_us = lat;
    pt->why = first_fail;
    return 0;
}

static int cmp_cpu(const void *a, const void *b)
{
    double x = ((const point *)a)->cpu_us, y = ((const point *)b)->cpu_us;
    return x < y ? -1 : x > y;
}

/* Three runs of a point, the one of median CPU per transfer kept: the
 * machine is shared, and one run can land on a busy moment. */
static int measure3(const peers *g, const char *const *addrs, uint16_t S,
                    uint16_t P, uint32_t inflight, uint32_t live_ids,
                    point *pt)
{
    point r[3];
    for (int i = 0; i < 3; i++) {
        r[i].x = pt->x;
        if (measure(g, addrs, S, P, inflight, live_ids, &r[i]) != 0)
            return -1;
    }
    qsort(r, 3, sizeof r[0], cmp_cpu);
    *pt = r[1];
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Membership-change latency vs registered groups                          */
/* ---------------------------------------------------------------------- */

typedef struct gone_watch {
    volatile bool gone, seen;
} gone_watch;

static void on_member(void *ud, const char *group, uint16_t shard,
                      const xfer_dir_entry *e)
{
    gone_watch *w = ud;
    if (e)
        w->seen = true;
    else
        w->gone = true;
}

/* Register groups g0..g{n-1} (one shard each) from filler directories,
 * then time a crash of group "victim"'s shard (its directory freed, no
 * more keepalives) until the watcher reports it gone, and a drain (an
 * unregister) likewise. */
static int groups_point(struct event_base *b, const char *url, int ngroups,
                        xfer_dir **fill, int *nfill, double *crash_ms,
                        double *drain_ms)
{
    xfer_dir_config dc;
    xfer_dir_config_default(&dc);
    dc.endpoints = url;
    dc.lease_ttl_s = 2;
    dc.reconnect_min_ns = 20000000ull;
    int have = 0;
    for (int i = 0; i < *nfill; i++) {
        xfer_dir_state st;
        xfer_dir_state_get(fill[i], &st);
        have += (int)st.registered;
    }
    while (have < ngroups - 1) {
        if (xfer_dir_new(b, &dc, &fill[*nfill]) != 0)
            return -1;
        for (int j = 0; j < 64 && have < ngroups - 1; j++, have++) {
            char g[32];
            snprintf(g, sizeof g, "g%d", have);
            xfer_dir_entry e = {.shard = 0, .port = 7000, .epoch = 1,
                                .transports = XFER_DIR_TCP};
            strcpy(e.addr, "127.0.0.1");
            xfer_dir_register(fill[*nfill], g, &e);
        }
        (*nfill)++;
    }
    run_for(b, 500000000ull); /* the fillers' puts land */
    for (int mode = 0; mode < 2; mode++) {
        xfer_dir *victim = NULL, *watcher = NULL;
        gone_watch w = {0};
        if (xfer_dir_new(b, &dc, &victim) || xfer_dir_new(b, &dc, &watcher))
            return -1;
        xfer_dir_entry e = {.shard = 0, .port = 7999, .epoch = 1,
                            .transports = XFER_DIR_TCP};
        strcpy(e.addr, "127.0.0.1");
        xfer_dir_register(victim, "victim", &e);
        xfer_dir_watch(watcher, "victim", on_member, &w);
        for (int i = 0; i < 500 && !w.seen; i++)
            run_for(b, 10000000);
        uint64_t t0 = now_ns();
        if (mode == 0) {
            xfer_dir_del(victim); /* a crash: the lease must expire */
            victim = NULL;
        } else {
            xfer_dir_unregister(victim, NULL, NULL);
        }
        for (int i = 0; i < 2000 && !w.gone; i++)
            run_for(b, 1000000);
        double ms = w.gone ? (double)(now_ns() - t0) / 1e6 : -1;
        *(mode == 0 ? crash_ms : drain_ms) = ms;
        xfer_dir_del(victim);
        xfer_dir_del(watcher);
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Output                                                                  */
/* ---------------------------------------------------------------------- */

static void print_curve(FILE *dat, const char *name, const char *xname,
                        const point *p, int n)
{
    printf("\n%s\n  %10s %12s %14s %18s %10s %8s\n", name, xname,
           "transfers/s", "CPU us/xfer", "CPU us/xfer/shard", "p99 us",
           "failed");
    for (int i = 0; i < n; i++) {
        if (p[i].failed)
            printf("  (%g: first failure %s)\n", p[i].x,
                   xfer_strerror(p[i].why));
        printf("  %10.0f %12.0f %14.1f %18.2f %10.0f %8" PRIu64 "%s\n",
               p[i].x, p[i].tps, p[i].cpu_us, p[i].cpu_us_shard, p[i].p99_us,
               p[i].failed,
               i && p[0].cpu_us_shard > 0
                   ? (p[i].cpu_us_shard / p[0].cpu_us_shard <= 1.3
                          ? "  (per shard within 1.3x of the first)"
                          : "  (per shard above 1.3x of the first)")
                   : "");
        fprintf(dat, "%g %g %g %g %g\n", p[i].x, p[i].tps, p[i].cpu_us,
                p[i].cpu_us_shard, p[i].p99_us);
    }
    fprintf(dat, "\n\n");
}

static void plot(const char *dir, const char *datpath)
{
    char script[8192];
    snprintf(script, sizeof script,
             "set terminal pngcairo size 900,600 noenhanced\n"
             "set grid\nset key top left\n"
             "set style data linespoints\n"
             "set logscale x 2\n"
             "set ylabel 'transfers/s'\nset y2label 'CPU us per transfer "
             "per shard'\nset y2tics\nset ytics nomirror\n"
             "set output '%s/scale_shards.png'\n"
             "set title 'xfer over TCP: shards per group (64 in flight, 4 KiB "
             "per shard)'\nset xlabel 'shards'\n"
             "plot '%s' index 0 using 1:2 title 'transfers/s', '' index 0 "
             "using 1:4 axes x1y2 title 'CPU us/transfer/shard', '' index 1 "
             "using 1:4 axes x1y2 title 'CPU us/transfer/shard, 2 xferd "
             "processes'\n"
             "set output '%s/scale_producers.png'\n"
             "set title 'producers against the same 4 shards'\n"
             "set xlabel 'producer processes'\n"
             "plot '%s' index 2 using 1:2 title 'transfers/s', '' index 2 "
             "using 1:4 axes x1y2 title 'CPU us/transfer/shard'\n"
             "set output '%s/scale_inflight.png'\n"
             "set title 'in flight (4 shards)'\nset xlabel 'in flight'\n"
             "set y2label 'p99 latency, us'\nset logscale y2\n"
             "plot '%s' index 3 using 1:2 title 'transfers/s', '' index 3 "
             "using 1:5 axes x1y2 title 'p99 us'\n"
             "unset logscale y2\nset y2label 'CPU us per transfer'\n"
             "set logscale x 10\n"
             "set output '%s/scale_live_ids.png'\n"
             "set title 'ids held by the producer (4 shards, 64 in flight)'\n"
             "set xlabel 'live ids'\n"
             "plot '%s' index 4 using 1:2 title 'transfers/s', '' index 4 "
             "using 1:3 axes x1y2 title 'CPU us/transfer'\n"
             "set output '%s/scale_groups.png'\n"
             "set title 'membership change: shard gone, seen by a producer'\n"
             "set xlabel 'groups registered in etcd'\n"
             "set ylabel 'ms'\nunset y2tics\nunset y2label\n"
             "plot '%s' index 5 using 1:2 title 'crash (lease TTL 2 s)', "
             "'' index 5 using 1:3 title 'drain (entry deleted)'\n",
             dir, datpath, dir, datpath, dir, datpath, dir, datpath, dir,
             datpath);
    FILE *g = popen("gnuplot", "w");
    if (!g) {
        printf("gnuplot not found: no plots\n");
        return;
    }
    fputs(script, g);
    if (pclose(g) != 0)
        printf("gnuplot failed: no plots\n");
    else
        printf("\nplots: %s/scale_{shards,producers,inflight,live_ids,"
               "groups}.png\n", dir);
}

/* ---------------------------------------------------------------------- */
/* The shards curve again, hosted by two xferd processes                    */
/* ---------------------------------------------------------------------- */

/* Two xferd --consume processes, host h serving shards h, h+2, ... of 16
 * on one port each, with the shard curve's settings (demo_tcp.c).  Fills
 * pids and ports; 0, or -1 with whatever started killed. */
static int start_hosts(const char *xferd, pid_t pids[2], uint16_t ports[2])
{
    char dir[] = "/tmp/xfer-scale-hosts-XXXXXX";
    if (!mkdtemp(dir))
        return -1;
    int rc = 0;
    for (int h = 0; h < 2 && !rc; h++) {
        char list[64] = "", pf[96], pool[32];
        size_t n = 0;
        for (int k = h; k < MAXS; k += 2)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%d",
                                  n ? "," : "", k);
        snprintf(pf, sizeof pf, "%s/port%d", dir, h);
        snprintf(pool, sizeof pool, "%u", 8u << 20);
        pid_t pid = fork();
        if (pid < 0) {
            rc = -1;
            break;
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            execl(xferd, xferd, "--addr", "127.0.0.1", "--port", "0",
                  "--port-file", pf, "--shards", list, "--pool", pool,
                  "--max-resv", "4096", "--max-tombs", "524288",
                  "--lease-ttl", "1000ms", "--consume", "--quiet",
                  (char *)NULL);
            _exit(127);
        }
        pids[h] = pid;
        ports[h] = 0;
        for (int i = 0; i < 500 && !ports[h]; i++)
            if (demo_tcp_read_port(pf, &ports[h]) != 0)
                usleep(10000);
        unlink(pf);
        if (!ports[h])
            rc = -1;
    }
    rmdir(dir);
    if (rc)
        for (int h = 0; h < 2; h++)
            if (pids[h] > 0)
                kill(pids[h], SIGKILL);
    return rc;
}

static void stop_hosts(const pid_t pids[2])
{
    for (int h = 0; h < 2; h++) {
        if (pids[h] <= 0)
            continue;
        kill(pids[h], SIGKILL);
        waitpid(pids[h], NULL, 0);
    }
}

static const cli_flag flags[] = {
    {"xferd", 0, "PATH", "the xferd to run (default: next to this program)",
     'x'},
    {"plots", 0, "DIR", "write scale.dat and the gnuplot PNGs into DIR",
     'p'},
    {"quick", 0, NULL, "0.3 s per point (a smoke run)", 'q'},
    {"only", 0, "CURVE", "only this curve: shards, hosts, producers, "
     "inflight, live or groups (no plots)", 'o'},
    CLI_HELP,
    CLI_VERSION,
    {NULL, 0, NULL, NULL, 0}};

static const cli scale_cli = {
    .prog = "xfer-bench-scale",
    .summary = "the xfer scaling benchmark (run by xfer-bench scale)",
    .synopsis = "[flags]",
    .intro = "how the cost grows with shards, producers, transfers in "
             "flight, live ids\nand (etcd on PATH) groups registered in "
             "etcd; a table, and PNG plots\n",
    .flags = flags};

int main(int argc, char **argv)
{
    const char *xferd = NULL, *plots = NULL, *only = NULL, *v;
    bool quick = false;
    int k;
    while ((k = cli_next(&scale_cli, argc, argv, &v)) != CLI_END) {
        if (k == CLI_ERR)
            return 2;
        if (k == 'x')
            xferd = v;
        else if (k == 'p')
            plots = v;
        else if (k == 'q')
            quick = true;
        else if (k == 'o')
            only = v;
    }
    static const char *const curves[] = {"shards", "hosts", "producers",
                                         "inflight", "live", "groups"};
    bool run[6];
    bool known = !only;
    for (int i = 0; i < 6; i++) {
        run[i] = !only || strcmp(only, curves[i]) == 0;
        known = known || run[i];
    }
    if (!known)
        return cli_bad(&scale_cli, "--only", only);
    if (only)
        plots = NULL;
    if (optind < argc)
        return cli_bad(&scale_cli, "argument", argv[optind]);
    if (quick)
        secs = 0.3;
    signal(SIGPIPE, SIG_IGN);
    char path[4096];
    if (!xferd) {
        if (demo_tcp_find_xferd(argv[0], path, sizeof path) != 0) {
            /* tools/bench/xfer-bench-scale: xferd is one folder up */
            char up[4200];
            const char *slash = strrchr(argv[0], '/');
            snprintf(up, sizeof up, "%.*s/../x",
                     slash ? (int)(slash - argv[0]) : 1,
                     slash ? argv[0] : ".");
            if (demo_tcp_find_xferd(up, path, sizeof path) != 0) {
                fprintf(stderr, "xfer-bench-scale: no xferd; --xferd PATH\n");
                return 2;
            }
        }
        xferd = path;
    }
    /* Before anything is opened: the 16 shards, each its own xferd. */
    demo_tcp_config c = {.xferd = xferd, .nshards = MAXS,
                         .pool_bytes = 8u << 20, .max_resv = 4096,
                         .max_tombs = 1u << 19, .lease_ttl_ms = 1000,
                         .seed = 1};
    demo_tcp *g = NULL;
    char err[320];
    if (demo_tcp_start(&c, &g, err, sizeof err) != 0) {
        fprintf(stderr, "xfer-bench-scale: %s\n", err);
        return 1;
    }
    const char *addrs[MAXS];
    for (uint16_t j = 0; j < MAXS; j++)
        addrs[j] = demo_tcp_addr(g, j);
    char datpath[256];
    snprintf(datpath, sizeof datpath, "%s/scale.dat", plots ? plots : "/tmp");
    FILE *dat = fopen(datpath, "w");
    if (!dat) {
        fprintf(stderr, "xfer-bench-scale: cannot write %s\n", datpath);
        demo_tcp_stop(g);
        return 1;
    }
    printf("xfer-bench scale: %.1f s per point, 4 KiB per shard, xferd "
           "--consume per shard on loopback, %ld CPUs\n", secs,
           sysconf(_SC_NPROCESSORS_ONLN));
    static const uint16_t shards[] = {1, 2, 4, 8, 16};
    static const uint16_t prods[] = {1, 2, 4, 8};
    static const uint32_t infl[] = {1, 4, 16, 64, 256, 1024};
    static const uint32_t live[] = {1000, 10000, 100000, 1000000};
    point p[8];
    int rc = 0;
    peers one = {.g = g};
    for (int i = 0; i < 5 && !rc && run[0]; i++) {
        p[i].x = shards[i];
        rc = measure3(&one, addrs, shards[i], 0, 64, 0, &p[i]);
    }
    if (!rc && run[0])
        print_curve(dat, "shards per group (one producer, 64 in flight)",
                    "shards", p, 5);
    /* What bounds the shards curve: the same points with the shards in two
     * processes (no more xferd than this machine's 2 CPUs), so a point's
     * fan-out wakes at most two processes. */
    peers two = {.nhosts = 2};
    uint16_t hport[2];
    char haddr[MAXS][32];
    const char *haddrs[MAXS];
    if (!rc && run[1] && start_hosts(xferd, two.hosts, hport) != 0) {
        fprintf(stderr, "xfer-bench-scale: two xferd hosts did not start\n");
        rc = -1;
    }
    for (int i = 0; i < MAXS && !rc && run[1]; i++) {
        snprintf(haddr[i], sizeof haddr[i], "127.0.0.1:%u", hport[i % 2]);
        haddrs[i] = haddr[i];
    }
    for (int i = 0; i < 5 && !rc && run[1]; i++) {
        p[i].x = shards[i];
        rc = measure3(&two, haddrs, shards[i], 0, 64, 0, &p[i]);
    }
    if (run[1] && two.hosts[0] > 0)
        stop_hosts(two.hosts);
    if (!rc && run[1])
        print_curve(dat, "the same shards hosted by 2 xferd processes "
                    "(shard k in process k % 2)", "shards", p, 5);
    for (int i = 0; i < 4 && !rc && run[2]; i++) {
        p[i].x = prods[i];
        rc = measure3(&one, addrs, 4, prods[i], 64, 0, &p[i]);
    }
    if (!rc && run[2])
        print_curve(dat, "producer processes against the same 4 shards "
                    "(64 in flight each)", "producers", p, 4);
    for (int i = 0; i < 6 && !rc && run[3]; i++) {
        p[i].x = infl[i];
        rc = measure3(&one, addrs, 4, 0, infl[i], 0, &p[i]);
    }
    if (!rc && run[3])
        print_curve(dat, "in flight (4 shards)", "in flight", p, 6);
    for (int i = 0; i < 4 && !rc && run[4]; i++) {
        p[i].x = live[i];
        rc = measure3(&one, addrs, 4, 0, 64, live[i], &p[i]);
    }
    if (!rc && run[4])
        print_curve(dat, "ids held by the producer's tables (4 shards, 64 in "
                    "flight)", "live ids", p, 4);
    if (rc)
        fprintf(stderr, "xfer-bench-scale: a point failed to run\n");
    demo_tcp_stop(g);
    /* Membership-change latency. */
    char url[64], why[128];
    if (!rc && run[5] &&
        bench_etcd_start(url, sizeof url, why, sizeof why) == 0) {
        struct event_base *b = event_base_new();
        run_for(b, 1500000000ull); /* etcd starts */
        static const int groups[] = {1, 10, 100, 1000};
        xfer_dir *fill[32];
        int nfill = 0;
        printf("\nmembership change: registered shard gone -> producer's "
               "directory reports it\n  %8s %22s %22s\n", "groups",
               "crash (lease 2 s) ms", "drain (delete) ms");
        for (int i = 0; i < 4; i++) {
            double crash = -1, drain = -1;
            if (groups_point(b, url, groups[i], fill, &nfill, &crash,
                             &drain) != 0)
                break;
            printf("  %8d %22.1f %22.1f\n", groups[i], crash, drain);
            fprintf(dat, "%d %g %g\n", groups[i], crash, drain);
        }
        fprintf(dat, "\n\n");
        for (int i = 0; i < nfill; i++)
            xfer_dir_del(fill[i]);
        event_base_free(b);
    } else if (!rc && run[5]) {
        printf("\nmembership change: not measured (%s)\n", why);
    }
    fclose(dat);
    if (plots && !rc)
        plot(plots, datpath);
    return rc ? 1 : 0;
}
