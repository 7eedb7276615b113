/*
 * tools/bench/pyref.c - runs pyref.py's shard and producer processes for
 * the TCP bench.  See pyref.h.
 *
 * Shards write their port to a file in a private temp folder (atomically:
 * pyref.py renames it into place); the producer prints "ready ..." once it
 * is connected to every shard and one "result ..." line per "run" command.
 *
 * What must stay true: every read from a child is bounded by a timeout,
 * so a Python that hangs or dies fails the figure with one line instead of
 * hanging the bench; every process started is killed and reaped by
 * bench_pyref_stop, also when bench_pyref_start fails half-way.
 */
#include "pyref.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"
#include "xfer/xfer.h"

#define WAIT_MS 20000

typedef struct child {
    pid_t pid;
    int to, from; /* its stdin, its stdout; -1 when closed */
} child;

struct bench_pyref {
    uint16_t n;
    child shard[BENCH_PYREF_MAX_SHARDS], prod;
    pid_t pids[BENCH_PYREF_MAX_SHARDS];
    char dir[256];
    char kind[80];
    char line[512];
};

static void close_child(child *c)
{
    if (c->to >= 0)
        close(c->to);
    if (c->from >= 0)
        close(c->from);
    bench_proc_kill(c->pid);
    *c = (child){.pid = 0, .to = -1, .from = -1};
}

/* Read one line from c into r->line within ms.  Returns 0 or -1. */
static int read_line(bench_pyref *r, child *c, int ms)
{
    size_t n = 0;
    uint64_t end = xfer_clock_monotonic(NULL) + (uint64_t)ms * 1000000ull;
    while (n + 1 < sizeof r->line) {
        struct pollfd pfd = {.fd = c->from, .events = POLLIN};
        int left = (int)((end - xfer_clock_monotonic(NULL)) / 1000000ull);
        if (xfer_clock_monotonic(NULL) >= end || poll(&pfd, 1, left) <= 0)
            return -1;
        ssize_t got = read(c->from, r->line + n, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        if (r->line[n] == '\n') {
            r->line[n] = '\0';
            return 0;
        }
        n++;
    }
    return -1;
}

static int spawn(child *c, const char *const *argv)
{
    c->pid = bench_proc_spawn(argv, false, &c->to, &c->from);
    return c->pid > 0 ? 0 : -1;
}

static int start_shard(bench_pyref *r, const char *python, const char *script,
                       uint16_t k, bool stdlib)
{
    char pf[320];
    snprintf(pf, sizeof pf, "%s/shard-%u.port", r->dir, (unsigned)k);
    const char *argv[] = {python, script, "shard", "--port-file", pf,
                          "--watch-stdin", stdlib ? "--stdlib" : NULL, NULL};
    int rc = spawn(&r->shard[k], argv);
    r->pids[k] = r->shard[k].pid;
    r->n = (uint16_t)(k + 1);
    return rc;
}

/* Wait for shard k's port file; append "port," to ports. */
static int wait_port(bench_pyref *r, uint16_t k, char *ports, size_t cap)
{
    char pf[320];
    snprintf(pf, sizeof pf, "%s/shard-%u.port", r->dir, (unsigned)k);
    uint64_t end = xfer_clock_monotonic(NULL) + WAIT_MS * 1000000ull;
    while (xfer_clock_monotonic(NULL) < end) {
        FILE *f = fopen(pf, "r");
        unsigned port = 0;
        if (f) {
            int ok = fscanf(f, "%u", &port) == 1;
            fclose(f);
            unlink(pf);
            if (!ok || !port)
                return -1;
            size_t len = strlen(ports);
            snprintf(ports + len, cap - len, "%s%u", len ? "," : "", port);
            return 0;
        }
        siginfo_t si = {0};
        if (waitid(P_PID, (id_t)r->shard[k].pid, &si,
                   WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid)
            return -1; /* it died (bench_pyref_stop reaps it) */
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static int start_producer(bench_pyref *r, const char *python,
                          const char *script, const char *ports, bool stdlib)
{
    const char *argv[] = {python, script, "producer", "--ports", ports,
                          stdlib ? "--stdlib" : NULL, NULL};
    char loop[32], codec[32];
    if (spawn(&r->prod, argv) != 0 || read_line(r, &r->prod, WAIT_MS) ||
        sscanf(r->line, "ready loop=%31s codec=%31s", loop, codec) != 2)
        return -1;
    snprintf(r->kind, sizeof r->kind, "%s + %s", loop, codec);
    return 0;
}

int bench_pyref_start(const char *python, const char *script,
                      uint16_t nshards, bool stdlib, bench_pyref **out,
                      char *err, size_t cap)
{
    bench_pyref *r = calloc(1, sizeof *r);
    if (!r || nshards == 0 || nshards > BENCH_PYREF_MAX_SHARDS) {
        free(r);
        snprintf(err, cap, "python: bad shard count or out of memory");
        return -1;
    }
    r->prod = (child){.to = -1, .from = -1};
    const char *tmp = getenv("TMPDIR");
    snprintf(r->dir, sizeof r->dir, "%s/xfer-pyref-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    char ports[16 * BENCH_PYREF_MAX_SHARDS] = "";
    int rc = mkdtemp(r->dir) ? 0 : -1;
    if (rc)
        r->dir[0] = '\0';
    for (uint16_t k = 0; k < nshards && !rc; k++)
        rc = start_shard(r, python, script, k, stdlib);
    for (uint16_t k = 0; k < nshards && !rc; k++)
        rc = wait_port(r, k, ports, sizeof ports);
    if (!rc)
        rc = start_producer(r, python, script, ports, stdlib);
    if (rc) {
        snprintf(err, cap, "python: cannot start %s %s (see its message "
                 "above, if any)", python, script);
        bench_pyref_stop(r);
        return -1;
    }
    *out = r;
    return 0;
}

const char *bench_pyref_kind(const bench_pyref *r)
{
    return r->kind;
}

/* How long a run of ns may take to answer, in ms. */
static int wait_ms(uint64_t ns)
{
    uint64_t ms = ns / 1000000ull + WAIT_MS;
    return ms < INT_MAX ? (int)ms : INT_MAX;
}

int bench_pyref_run(bench_pyref *r, uint32_t inflight, uint64_t ns,
                    uint64_t max_units, bench_fig *f, char *err, size_t cap)
{
    char cmd[128];
    int len = snprintf(cmd, sizeof cmd, "run %u %.3f %" PRIu64 " 0\n",
                       inflight, (double)ns / 1e9, max_units);
    bench_sample a, b;
    bench_proc_sample(r->prod.pid, r->pids, r->n, &a);
    unsigned long long done = 0, failed = 0;
    double secs, p50 = 0, p99 = 0;
    if (write(r->prod.to, cmd, (size_t)len) != len ||
        read_line(r, &r->prod, wait_ms(ns)) != 0 ||
        sscanf(r->line, "result done=%llu failed=%llu secs=%lf p50_us=%lf "
               "p99_us=%lf", &done, &failed, &secs, &p50, &p99) != 5) {
        snprintf(err, cap, "python: the producer did not answer");
        return -1;
    }
    bench_proc_sample(r->prod.pid, r->pids, r->n, &b);
    bench_fig_make(f, &a, &b, done, failed, 0, NULL, 0);
    f->p50_us = p50;
    f->p99_us = p99;
    return 0;
}

void bench_pyref_stop(bench_pyref *r)
{
    if (!r)
        return;
    close_child(&r->prod);
    for (uint16_t k = 0; k < r->n; k++)
        close_child(&r->shard[k]);
    if (r->dir[0])
        rmdir(r->dir);
    free(r);
}
