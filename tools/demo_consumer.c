/*
 * tools/demo_consumer.c - the consumer-scheduler process of `xfer-demo
 * --tcp` (see demo_consumer.h): the child, which is a real consumer
 * scheduler on xfer_consumer reading the shards' shared-memory pools in
 * place, and the parent's side that starts it and reads its report.
 *
 * What must stay true:
 *  - every id 1..transfers is expected, so each gets exactly one outcome:
 *    available (bytes checked in place, then released) or unavailable;
 *    ids the producer never got to end at their expect deadline, which is
 *    pulled in once the parent says "done";
 *  - a shard's pool is mapped again each time its link comes up, so after
 *    a shard was killed and restarted the new object is read (a mapping
 *    of the old one stays valid for data taken from it);
 *  - the child dies with the parent (PR_SET_PDEATHSIG), and EOF on its
 *    stdin (the parent gone) ends it too.
 */
#include "demo_consumer.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "demo_tcp.h"
#include "xfer/consumer.h"
#include "xfer/shm.h"
#include "xfer/tracefile.h"
#include "xfer/xfer.h"

#define EXPECT_FIRST_NS 120000000000ull /* until "done" pulls it in */
#define EXPECT_AFTER_DONE_NS 3000000000ull

/* ---------------------------------------------------------------------- */
/* The child                                                               */
/* ---------------------------------------------------------------------- */

typedef struct child {
    struct event_base *base;
    xfer_consumer *c;
    xfer_shm *map[XFER_MAX_SHARDS];
    uint16_t nshards;
    const char *shm;
    uint32_t n, cancel_ppm;
    uint64_t seed, rng;
    demo_outcome *out;
    uint64_t reported, held_bytes, corrupt, twice, cancels;
    bool done, announced;
    uint32_t up;
    xfer_tracefile *tf;
    struct event *in_ev, *tick;
    int status;
} child;

static uint64_t rnd(child *d)
{
    d->rng ^= d->rng >> 12;
    d->rng ^= d->rng << 25;
    d->rng ^= d->rng >> 27;
    return d->rng * 0x2545f4914f6cdd1dull;
}

static void finish_if_done(child *d)
{
    if (d->done && d->reported >= d->n && d->held_bytes == 0)
        event_base_loopbreak(d->base);
}

/* Now and then the consumer aborts a request of its own: one a few ids
 * ahead, likely still in flight. */
static void maybe_cancel(child *d, uint64_t id)
{
    if (!d->cancel_ppm || rnd(d) % 1000000u >= d->cancel_ppm)
        return;
    uint64_t victim = id + 4;
    if (victim > d->n || d->out[victim].n)
        return;
    if (xfer_consumer_cancel(d->c, victim) == 0 && !d->out[victim].n) {
        d->out[victim].cancelled = 1;
        d->cancels++;
    }
}

static void on_available(void *ud, uint64_t id, uint32_t attempt,
                         const xfer_region *reg, uint16_t n)
{
    child *d = ud;
    if (id == 0 || id > d->n)
        return;
    demo_outcome *o = &d->out[id];
    d->twice += o->n++ > 0;
    d->reported++;
    o->available = 1;
    o->verified = n == d->nshards;
    for (uint16_t k = 0; k < n && o->verified; k++) {
        const xfer_shm *m = d->map[reg[k].shard];
        const uint8_t *pool = m ? xfer_shm_pool(m) : NULL;
        if (!pool || reg[k].offset > xfer_shm_len(m) ||
            reg[k].len > xfer_shm_len(m) - reg[k].offset) {
            o->verified = 0;
            break;
        }
        for (uint32_t i = 0; i < reg[k].len; i++)
            if (pool[reg[k].offset + i] !=
                demo_pattern(d->seed, id, reg[k].shard, i)) {
                o->verified = 0;
                break;
            }
    }
    d->corrupt += !o->verified;
    xfer_consumer_release(d->c, id);
    maybe_cancel(d, id);
    finish_if_done(d);
}

static void on_unavailable(void *ud, uint64_t id, int32_t reason,
                           uint64_t shards)
{
    child *d = ud;
    if (id == 0 || id > d->n)
        return;
    demo_outcome *o = &d->out[id];
    d->twice += o->n++ > 0;
    d->reported++;
    o->reason = reason;
    maybe_cancel(d, id);
    finish_if_done(d);
}

/* A link came up: map that shard's pool (again: after a restart it is a
 * new object). */
static void on_link(void *ud, uint16_t k, bool up)
{
    child *d = ud;
    if (!up)
        return;
    xfer_shm *m = NULL;
    if (xfer_shm_map(d->shm, k, NULL, &m) == 0) {
        xfer_shm_close(d->map[k]);
        d->map[k] = m;
    }
    if (!d->announced && ++d->up >= d->nshards) {
        d->announced = true;
        printf("up\n");
        fflush(stdout);
    }
}

/* "done" on stdin: the producer is finished, so an id still unreported
 * will get nothing more than its deadline. */
static void on_stdin(evutil_socket_t fd, short what, void *arg)
{
    child *d = arg;
    char buf[64];
    ssize_t r = read(fd, buf, sizeof buf);
    if (r <= 0) {
        d->status = 1; /* the parent is gone */
        event_base_loopbreak(d->base);
        return;
    }
    if (d->done)
        return;
    d->done = true;
    uint64_t dl = xfer_consumer_now(d->c) + EXPECT_AFTER_DONE_NS;
    for (uint64_t id = 1; id <= d->n; id++)
        if (!d->out[id].n)
            xfer_consumer_expect(d->c, id, dl);
    finish_if_done(d);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    child *d = arg;
    xfer_consumer_stats st;
    if (xfer_consumer_stats_get(d->c, &st) == 0)
        d->held_bytes = st.held_bytes;
    if (d->tf)
        xfer_tracefile_flush(d->tf);
    finish_if_done(d);
}

static int split_addrs(char *list, const char **addrs, uint16_t *n)
{
    *n = 0;
    for (char *a = strtok(list, ","); a; a = strtok(NULL, ","))
        if (*n < XFER_MAX_SHARDS)
            addrs[(*n)++] = a;
    return *n ? 0 : -1;
}

static int child_setup(child *d, char *addrlist, const char *trace)
{
    const char *addrs[XFER_MAX_SHARDS];
    if (split_addrs(addrlist, addrs, &d->nshards))
        return XFER_ERR_INVALID_ARG;
    d->base = event_base_new();
    d->out = calloc((size_t)d->n + 1, sizeof *d->out);
    if (!d->base || !d->out)
        return XFER_ERR_NOMEM;
    if (trace) {
        xfer_tracefile_opts to;
        xfer_tracefile_opts_default(&to);
        to.label = "xfer-demo consumer";
        errno = 0;
        int rc = xfer_tracefile_open(trace, &to, &d->tf);
        if (rc) {
            fprintf(stderr, "xfer-demo consumer: cannot open trace %s: %s\n",
                    trace, rc == XFER_ERR_IO && errno ? strerror(errno)
                                                      : xfer_strerror(rc));
            return rc;
        }
    }
    xfer_consumer_config cc;
    xfer_consumer_config_default(&cc);
    cc.base = d->base;
    cc.nshards = d->nshards;
    cc.addrs = addrs;
    cc.available = on_available;
    cc.unavailable = on_unavailable;
    cc.link = on_link;
    cc.ud = d;
    cc.max_ids = d->n + 1024;
    cc.max_tombstones = 2 * d->n + 4096;
    cc.tombstone_ttl_ns = 5000000000ull;
    cc.reconnect_max_ns = 200000000ull;
    cc.trace = xfer_tracefile_sink_tagged(d->tf, XFER_TRACE_SRC_CONSUMER);
    int rc = xfer_consumer_new(&cc, &d->c);
    if (rc)
        return rc;
    uint64_t dl = xfer_consumer_now(d->c) + EXPECT_FIRST_NS;
    for (uint64_t id = 1; id <= d->n && !rc; id++)
        rc = xfer_consumer_expect(d->c, id, dl);
    d->in_ev = event_new(d->base, STDIN_FILENO, EV_READ | EV_PERSIST,
                         on_stdin, d);
    d->tick = event_new(d->base, -1, EV_PERSIST, on_tick, d);
    struct timeval tv = {0, 100000};
    if (!rc && (!d->in_ev || !d->tick || event_add(d->in_ev, NULL) ||
                event_add(d->tick, &tv)))
        rc = XFER_ERR_NOMEM;
    return rc;
}

static void child_report(const child *d)
{
    uint64_t avail = 0, verified = 0, unreported = 0;
    for (uint64_t id = 1; id <= d->n; id++) {
        const demo_outcome *o = &d->out[id];
        avail += o->available;
        verified += o->verified;
        unreported += o->n == 0;
        if (o->n)
            printf("O %" PRIu64 " %c %d %u %u %u\n", id,
                   o->available ? 'A' : 'U', (int)o->reason,
                   (unsigned)o->cancelled, (unsigned)o->verified,
                   (unsigned)o->n);
    }
    printf("END %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
           " %" PRIu64 " %" PRIu64 "\n",
           avail, verified, d->corrupt, d->twice, d->held_bytes, unreported,
           d->cancels);
    fflush(stdout);
}

int demo_consumer_main(int argc, char **argv)
{
    child d = {0};
    char *addrs = NULL;
    const char *trace = NULL;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--addrs"))
            addrs = argv[i + 1];
        else if (!strcmp(a, "--shm"))
            d.shm = v;
        else if (!strcmp(a, "--transfers"))
            d.n = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--seed"))
            d.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--cancel-ppm"))
            d.cancel_ppm = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--trace"))
            trace = v;
    }
    d.rng = d.seed * 0x9e3779b97f4a7c15ull + 7;
    int rc = addrs && d.shm && d.n ? child_setup(&d, addrs, trace)
                                   : XFER_ERR_INVALID_ARG;
    if (rc) {
        fprintf(stderr, "xfer-demo consumer: setup failed: %s\n",
                xfer_strerror(rc));
        return 1;
    }
    event_base_dispatch(d.base);
    child_report(&d);
    int status = d.status || d.corrupt || d.twice || d.held_bytes;
    xfer_consumer_del(d.c);
    if (d.in_ev)
        event_free(d.in_ev);
    if (d.tick)
        event_free(d.tick);
    for (uint16_t k = 0; k < XFER_MAX_SHARDS; k++)
        xfer_shm_close(d.map[k]);
    event_base_free(d.base);
    xfer_tracefile_close(d.tf);
    free(d.out);
    return status;
}

/* ---------------------------------------------------------------------- */
/* The parent's side                                                       */
/* ---------------------------------------------------------------------- */

struct demo_consumer {
    pid_t pid;
    int to, from; /* its stdin, its stdout */
    uint32_t n;
    char *buf;    /* what it wrote */
    size_t len, cap;
};

static uint64_t now_ms(void)
{
    return xfer_clock_monotonic(NULL) / 1000000;
}

/* Read what the child wrote until `want` is in it, EOF, or the deadline.
 * Returns 1 found, 0 EOF, -1 timeout or error. */
static int read_until(demo_consumer *c, const char *want, uint64_t end)
{
    for (;;) {
        if (c->buf && want && strstr(c->buf, want))
            return 1;
        uint64_t now = now_ms();
        if (now >= end)
            return -1;
        struct pollfd p = {.fd = c->from, .events = POLLIN};
        int r = poll(&p, 1, (int)(end - now));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        if (c->len + 4097 > c->cap) {
            size_t cap = c->cap ? 2 * c->cap : 65536;
            char *nb = realloc(c->buf, cap);
            if (!nb)
                return -1;
            c->buf = nb;
            c->cap = cap;
        }
        ssize_t got = read(c->from, c->buf + c->len, 4096);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return 0;
        c->len += (size_t)got;
        c->buf[c->len] = '\0';
    }
}

static void exec_child(const demo_consumer_config *cfg, int in, int out)
{
    char addrs[XFER_MAX_SHARDS * 24] = "", n[16], seed[24], ppm[16];
    size_t at = 0;
    for (uint16_t k = 0; k < cfg->nshards; k++)
        at += (size_t)snprintf(addrs + at, sizeof addrs - at, "%s%s",
                               k ? "," : "", cfg->addrs[k]);
    snprintf(n, sizeof n, "%" PRIu32, cfg->transfers);
    snprintf(seed, sizeof seed, "%" PRIu64, cfg->seed);
    snprintf(ppm, sizeof ppm, "%" PRIu32, cfg->cancel_ppm);
    const char *argv[] = {cfg->self, "--consumer-role", "--addrs", addrs,
                          "--shm", cfg->shm, "--transfers", n, "--seed",
                          seed, "--cancel-ppm", ppm,
                          cfg->trace ? "--trace" : NULL, cfg->trace, NULL};
    dup2(in, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    execv(cfg->self, (char *const *)argv);
    dprintf(STDERR_FILENO, "cannot run %s: %s\n", cfg->self, strerror(errno));
    _exit(127);
}

int demo_consumer_start(const demo_consumer_config *cfg, demo_consumer **out,
                        char *err, size_t cap)
{
    int in[2], outp[2];
    demo_consumer *c = calloc(1, sizeof *c);
    if (!c || pipe(in) != 0) {
        free(c);
        snprintf(err, cap, "cannot start the consumer process");
        return XFER_ERR_IO;
    }
    if (pipe(outp) != 0) {
        close(in[0]);
        close(in[1]);
        free(c);
        snprintf(err, cap, "cannot start the consumer process");
        return XFER_ERR_IO;
    }
    c->n = cfg->transfers;
    c->pid = fork();
    if (c->pid == 0) {
        close(in[1]);
        close(outp[0]);
        exec_child(cfg, in[0], outp[1]);
    }
    close(in[0]);
    close(outp[1]);
    c->to = in[1];
    c->from = outp[0];
    if (c->pid < 0 || read_until(c, "up\n", now_ms() + 10000) != 1) {
        snprintf(err, cap, "the consumer process did not connect to every "
                 "shard within 10 s");
        demo_consumer_stop(c);
        return XFER_ERR_IO;
    }
    *out = c;
    return 0;
}

static int parse_report(const demo_consumer *c, demo_consumer_report *r)
{
    r->out = calloc((size_t)c->n + 1, sizeof *r->out);
    if (!r->out)
        return -1;
    bool end = false;
    for (const char *l = c->buf; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : l) {
        uint64_t id;
        char kind;
        int reason;
        unsigned canc, ver, n;
        if (sscanf(l, "O %" SCNu64 " %c %d %u %u %u", &id, &kind, &reason,
                   &canc, &ver, &n) == 6 &&
            id >= 1 && id <= c->n) {
            demo_outcome *o = &r->out[id];
            *o = (demo_outcome){.n = (uint8_t)n, .available = kind == 'A',
                                .verified = (uint8_t)ver,
                                .cancelled = (uint8_t)canc,
                                .reason = reason};
            if (kind == 'A')
                r->available++;
            else
                r->unavailable++;
            int b = reason == XFER_ERR_TIMEOUT ? 0
                    : reason == XFER_ERR_CANCELLED ? 1
                    : reason == XFER_ERR_EXPIRED ? 2
                    : reason == XFER_ERR_CONN_LOST ? 3
                                                   : 4;
            if (kind != 'A')
                r->by_reason[b]++;
        } else if (sscanf(l, "END %*u %" SCNu64 " %" SCNu64 " %" SCNu64
                          " %" SCNu64 " %" SCNu64 " %" SCNu64,
                          &r->verified, &r->corrupt, &r->twice,
                          &r->held_bytes, &r->unreported, &r->cancels) == 6) {
            end = true;
        }
    }
    return end ? 0 : -1;
}

int demo_consumer_finish(demo_consumer *c, uint64_t timeout_ms,
                         demo_consumer_report *r, char *err, size_t cap)
{
    memset(r, 0, sizeof *r);
    r->exit_status = -1;
    if (write(c->to, "done\n", 5) != 5) {
        snprintf(err, cap, "the consumer process is gone");
        return XFER_ERR_IO;
    }
    int got = read_until(c, NULL, now_ms() + timeout_ms);
    int status = 0;
    if (got == 0 && waitpid(c->pid, &status, 0) == c->pid) {
        c->pid = 0;
        r->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    }
    if (got != 0 || parse_report(c, r) != 0) {
        snprintf(err, cap, "no complete report from the consumer process "
                 "within %" PRIu64 " ms", timeout_ms);
        return XFER_ERR_IO;
    }
    return 0;
}

void demo_consumer_stop(demo_consumer *c)
{
    if (!c)
        return;
    if (c->pid > 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
    }
    if (c->to >= 0)
        close(c->to);
    if (c->from >= 0)
        close(c->from);
    free(c->buf);
    free(c);
}
