/*
 * tools/demo.c - xfer-demo: one producer, a consumer group of S shards on
 * the loop transport (or, with --tcp, S xferd processes), a few thousand
 * transfers with a seeded fault mix, a live progress line, and a closing
 * summary.
 *
 * The consumer side runs a real consumer scheduler: every shard event feeds
 * an xfer_readiness tracker, whose actions (take, release, cancel) the demo
 * performs on the shards; data that becomes available is checked byte for
 * byte against what the producer staged, then released.  Some transfers are
 * cancelled by the producer, some by the consumer, some ids are submitted
 * again after they ended (late submits, which must be refused).
 *
 * With --tcp both sides are real processes: one `xferd --shm` per shard
 * (demo_tcp.c; pools in POSIX shared memory, seeded faults of its own) over
 * the tcp transport, and a consumer-scheduler process (demo_consumer.c, on
 * xfer_consumer) that maps the pools, checks every byte of every available
 * transfer in place, releases it, and cancels a seeded share of ids
 * itself.  Shard 2 is killed with SIGKILL after 40 % of the transfers and
 * restarted.  At the end the producer's and the consumer's outcomes are
 * compared id by id (demo_agree.c), and the pools are asked for through
 * STATUS.
 *
 * --rdma is --tcp with the data moved by one-sided RDMA WRITE (xfer/rdma.h:
 * each xferd runs with --rdma, the producer's transport is xfer_rdma);
 * without an RDMA device it prints one line saying so and exits 77.
 *
 * The run passes (exit 0) when every accepted transfer completed exactly
 * once, every available transfer carried the right bytes, and at the end no
 * byte is held: producer staging, and every shard pool (over tcp, also
 * the consumer holds nothing, both sides agree on every id, and every
 * xferd exits 0 on SIGTERM: a crash or a sanitizer report fails).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "cli.h"
#include "demo_agree.h"
#include "demo_consumer.h"
#include "demo_tcp.h"
#include "timer.h" /* transport/: the one deadline timer (wire_private_dep) */
#include "xfer/dir.h"
#include "xfer/loop.h"
#include "xfer/readiness.h"
#include "xfer/tracefile.h"
#include "xfer/xfer.h"

#define MS 1000000ull
/* xferd leases in --tcp mode: long enough for a 300 ms transfer, short
 * enough that a reservation whose rollback was lost is reclaimed soon. */
#define TCP_LEASE_MS 1000
#define TCP_CONNECT_MS 5000
#define TCP_GRACE_MS 1000     /* xferd --take-grace */
#define TCP_KILLED_SHARD 2
#define CONSUMER_CANCEL_PPM 15000

typedef struct opts {
    uint32_t transfers, inflight, block;
    uint16_t shards;
    uint64_t seed;
    uint32_t fault_ppm;
    const char *trace;
    int quiet;
    int tcp;           /* --tcp: xferd processes instead of the loop */
    int rdma;          /* --rdma: over tcp, data by RDMA WRITE */
    const char *xferd; /* --xferd PATH; NULL: next to argv0 */
    const char *etcd;  /* --etcd URLS: shards found through etcd */
    const char *argv0;
} opts;

typedef struct demo {
    opts o;
    struct event_base *base;
    xfer_engine *engine;
    xfer_loop *loop;       /* loop mode */
    xfer_readiness *ready; /* loop mode */
    struct event_base *own_base; /* tcp mode: outlives engine and transport */
    xfer_tcp *tcp;         /* tcp mode */
    xfer_rdma *rdma;       /* tcp mode with --rdma: instead of tcp */
    demo_tcp *kids;        /* tcp mode: the xferd processes */
    demo_consumer *cons;   /* tcp mode: the consumer process */
    demo_consumer_report rep; /* tcp mode: what it saw */
    demo_produced *prod;   /* tcp mode: what the producer saw, per id */
    bool have_report;
    int killed;            /* tcp mode: the shard was killed, restarted */
    struct event *kill_ev;
    xfer_dir *dir;         /* --etcd: the directory the transport follows */
    struct event *gone_ev; /* --etcd: polls for the killed shard gone */
    uint64_t killed_at;    /* --etcd: when the shard was killed (ns) */
    uint64_t gone_ms;      /* --etcd: kill to "gone" (0: never seen) */
    char shm[64];
    xfer_tracefile *tf;
    uint8_t *staging;
    uint32_t pool, group;
    uint32_t *free_slots, nfree;
    uint64_t *slot_id;     /* which id a staging slot holds */
    uint8_t *completed;    /* per id: completions seen */
    uint64_t *rids;        /* per id and shard: resv id taken */
    uint8_t *bad;          /* per id: a taken byte differed */
    uint32_t next_id, submitted, ended;
    uint64_t ok, failed, cancelled, refused_sync, late_rejected;
    uint64_t available, unavailable, verified, corrupt, consumer_cancels;
    uint64_t rng;
    struct event *progress, *settle;
    xfer_timer ready_timer; /* the tracker's next deadline */
    int shutdown_done, tty;
    uint64_t t0, settle_until;
    char err[320]; /* why setup failed, when it says */
} demo;

static uint64_t rnd(demo *d)
{
    d->rng ^= d->rng >> 12;
    d->rng ^= d->rng << 25;
    d->rng ^= d->rng >> 27;
    return d->rng * 0x2545f4914f6cdd1dull;
}

static uint8_t pattern(const demo *d, uint64_t id, uint16_t shard,
                       uint32_t i)
{
    return demo_pattern(d->o.seed, id, shard, i);
}

/* ---------------------------------------------------------------------- */
/* Consumer scheduler: readiness actions performed on the shards           */
/* ---------------------------------------------------------------------- */

static void feed_shard_events(demo *d, xfer_shard *s);

static void run_ready_actions(demo *d);

static void do_take(demo *d, const xfer_ready_action *a)
{
    xfer_shard *s = xfer_loop_shard(d->loop, a->shard);
    const uint8_t *data = NULL;
    uint32_t len = 0;
    uint64_t now = xfer_engine_now(d->engine);
    int rc = xfer_shard_take(s, now, a->id, a->resv_id, &data, &len);
    if (rc == 0) {
        d->rids[a->id * d->o.shards + a->shard] = a->resv_id;
        for (uint32_t i = 0; i < len; i++)
            if (data[i] != pattern(d, a->id, a->shard, i)) {
                d->bad[a->id] = 1;
                break;
            }
    }
    feed_shard_events(d, s);
    xfer_readiness_on_take_result(d->ready, now, a->id, a->shard, rc);
}

/* The consumer application is done with available data: release it. */
static void release_all(demo *d, uint64_t id)
{
    uint64_t now = xfer_engine_now(d->engine);
    for (uint16_t k = 0; k < d->o.shards; k++) {
        xfer_shard *s = xfer_loop_shard(d->loop, k);
        xfer_shard_release(s, now, id, d->rids[id * d->o.shards + k]);
        feed_shard_events(d, s);
    }
}

static void perform_ready(demo *d, const xfer_ready_action *a)
{
    xfer_shard *s = a->shard < d->o.shards ? xfer_loop_shard(d->loop, a->shard)
                                           : NULL;
    uint64_t now = xfer_engine_now(d->engine);
    switch ((xfer_ready_action_kind)a->kind) {
    case XFER_READY_ACT_TAKE:
        do_take(d, a);
        break;
    case XFER_READY_ACT_RELEASE:
        xfer_shard_release(s, now, a->id, a->resv_id);
        feed_shard_events(d, s);
        break;
    case XFER_READY_ACT_CANCEL:
        xfer_shard_cancel(s, now, a->id, a->attempt, a->resv_id);
        feed_shard_events(d, s);
        break;
    case XFER_READY_ACT_AVAILABLE:
        d->available++;
        if (d->bad[a->id])
            d->corrupt++;
        else
            d->verified++;
        release_all(d, a->id);
        break;
    case XFER_READY_ACT_UNAVAILABLE:
        d->unavailable++;
        break;
    case XFER_READY_ACT_COUNT_:
        break;
    }
}

/* The engine's clock, for the tracker's timer. */
static uint64_t demo_now(void *ud)
{
    const demo *d = ud;
    return xfer_engine_now(d->engine);
}

/* Actions may produce more actions (a take result ends the record): loop
 * until the tracker is quiet.  Each batch is copied first because
 * performing an action feeds the tracker again. */
static void run_ready_actions(demo *d)
{
    static int depth;
    if (depth)
        return; /* the outer call picks up what an inner one added */
    depth++;
    for (;;) {
        size_t n;
        const xfer_ready_action *acts = xfer_readiness_actions(d->ready, &n);
        if (n == 0)
            break;
        xfer_ready_action *copy = malloc(n * sizeof *copy);
        if (!copy)
            break;
        memcpy(copy, acts, n * sizeof *copy);
        xfer_readiness_actions_clear(d->ready);
        for (size_t i = 0; i < n; i++)
            perform_ready(d, &copy[i]);
        free(copy);
    }
    depth--;
    xfer_timer_arm(&d->ready_timer, xfer_readiness_next_deadline(d->ready),
                   demo_now, d);
}

static void on_shard_event(void *ud, const xfer_shard_event *ev)
{
    demo *d = ud;
    uint64_t now = xfer_engine_now(d->engine);
    if (ev->kind == XFER_SHARD_EV_READY)
        xfer_readiness_on_ready(d->ready, now, ev->id, ev->attempt, ev->shard,
                                ev->resv_id);
    else
        xfer_readiness_on_shard_ended(d->ready, now, ev->id, ev->attempt,
                                      ev->shard,
                                      ev->kind == XFER_SHARD_EV_EXPIRED
                                          ? XFER_ERR_EXPIRED
                                          : XFER_ERR_CANCELLED);
    run_ready_actions(d);
}

static void feed_shard_events(demo *d, xfer_shard *s)
{
    size_t n;
    const xfer_shard_event *ev = xfer_shard_events(s, &n);
    xfer_shard_event copy[64];
    while (n) {
        size_t m = n < 64 ? n : 64;
        memcpy(copy, ev, m * sizeof *copy);
        xfer_shard_events_clear(s);
        for (size_t i = 0; i < m; i++)
            on_shard_event(d, &copy[i]);
        ev = xfer_shard_events(s, &n);
    }
}

static void on_ready_timer(evutil_socket_t fd, short what, void *arg)
{
    demo *d = arg;
    xfer_timer_fired(&d->ready_timer);
    xfer_readiness_on_timer(d->ready, xfer_engine_now(d->engine));
    run_ready_actions(d);
}

/* ---------------------------------------------------------------------- */
/* Producer: keep `inflight` transfers going                               */
/* ---------------------------------------------------------------------- */

static void submit_more(demo *d);

static void on_complete(void *ud, const xfer_result *res)
{
    demo *d = ud;
    uint64_t id = res->id;
    d->completed[id]++;
    d->ended++;
    if (res->status == 0)
        d->ok++;
    else if (res->status == XFER_ERR_CANCELLED ||
             res->status == XFER_ERR_SHUTDOWN)
        d->cancelled++;
    else
        d->failed++;
    uint32_t slot = (uint32_t)res->user_data;
    d->free_slots[d->nfree++] = slot;
    if (d->prod && id <= d->o.transfers) {
        demo_produced *p = &d->prod[id];
        p->completions++;
        p->status = res->status;
        p->phase = res->phase;
        p->may_hold = res->consumer_may_hold;
    }
    if (d->kill_ev && !d->killed && d->ended >= d->o.transfers * 2 / 5) {
        d->killed = 1;
        event_active(d->kill_ev, EV_TIMEOUT, 0);
    }
    /* Now and then, submit an id that already ended: it must be refused
     * synchronously (tombstone), never accepted, never called back. */
    if (rnd(d) % 50 == 0) {
        xfer_slice sl[XFER_MAX_SHARDS] = {{0, 0}};
        xfer_transfer_desc desc = {.id = id, .group = d->group,
                                   .pool = d->pool, .nslices = d->o.shards,
                                   .slices = sl};
        if (xfer_engine_submit(d->engine, &desc, on_complete, d) ==
            XFER_ERR_CANCELLED)
            d->late_rejected++;
    }
    submit_more(d);
}

static int submit_one(demo *d)
{
    uint32_t slot = d->free_slots[--d->nfree];
    uint64_t id = ++d->next_id;
    size_t per = d->o.block;
    xfer_slice sl[XFER_MAX_SHARDS];
    for (uint16_t k = 0; k < d->o.shards; k++) {
        size_t off = ((size_t)slot * d->o.shards + k) * per;
        sl[k] = (xfer_slice){off, (uint32_t)per};
        for (size_t i = 0; i < per; i++)
            d->staging[off + i] = pattern(d, id, k, (uint32_t)i);
    }
    xfer_transfer_desc desc = {.id = id, .group = d->group, .pool = d->pool,
                               .nslices = d->o.shards, .slices = sl,
                               .timeout_ns = 300 * MS, .user_data = slot};
    int rc = xfer_engine_submit(d->engine, &desc, on_complete, d);
    if (rc) {
        d->free_slots[d->nfree++] = slot;
        d->refused_sync++;
        return rc;
    }
    d->submitted++;
    uint64_t r = rnd(d) % 1000;
    if (r < 15)
        xfer_engine_cancel(d->engine, id); /* producer changes its mind */
    else if (r < 30 && d->ready) {
        /* the consumer aborts the request (over tcp the consumer process
         * cancels ids of its own) */
        xfer_readiness_cancel(d->ready, xfer_engine_now(d->engine), id);
        d->consumer_cancels++;
        run_ready_actions(d);
    }
    return 0;
}

/* Tcp mode: the producer is done; the consumer process gets its last
 * outcomes (ids never submitted end at a pulled-in deadline) and reports. */
static void finish_consumer(demo *d)
{
    if (!d->cons)
        return;
    if (demo_consumer_finish(d->cons, 30000, &d->rep, d->err,
                             sizeof d->err) == 0)
        d->have_report = true;
    else
        fprintf(stderr, "xfer-demo: %s\n", d->err);
}

/* Tcp mode: SIGKILL one shard in the middle of the run and start it again
 * (same port, same shm name: its stale objects are replaced). */
static void on_kill(evutil_socket_t fd, short what, void *arg)
{
    demo *d = arg;
    char err[320];
    if (d->dir) {
        /* Through etcd: kill, let the producer notice through the
         * shard's lease (no goodbye was said), then restart. */
        if (demo_tcp_kill(d->kids, TCP_KILLED_SHARD, err, sizeof err)) {
            fprintf(stderr, "xfer-demo: %s\n", err);
            return;
        }
        d->killed_at = xfer_engine_now(d->engine);
        struct timeval tv = {0, 10000};
        event_add(d->gone_ev, &tv);
        return;
    }
    if (demo_tcp_kill_restart(d->kids, TCP_KILLED_SHARD, err, sizeof err))
        fprintf(stderr, "xfer-demo: %s\n", err);
    else
        d->killed = 2;
}

static void submit_more(demo *d);

/* --etcd: the killed shard's entry left etcd with its lease; the
 * transport failed its ops with XFER_ERR_SHARD_GONE.  Start it again:
 * it registers with a new epoch and the transport redials it. */
static void on_gone_poll(evutil_socket_t fd, short what, void *arg)
{
    demo *d = arg;
    char err[320];
    uint64_t waited = xfer_engine_now(d->engine) - d->killed_at;
    if (!xfer_tcp_gone(d->tcp, TCP_KILLED_SHARD) && waited < 15000 * MS)
        return;
    event_del(d->gone_ev);
    if (!xfer_tcp_gone(d->tcp, TCP_KILLED_SHARD))
        fprintf(stderr, "xfer-demo: shard %u was not reported gone within "
                "15 s\n", TCP_KILLED_SHARD);
    else
        d->gone_ms = waited / MS;
    if (demo_tcp_restart(d->kids, TCP_KILLED_SHARD, err, sizeof err))
        fprintf(stderr, "xfer-demo: %s\n", err);
    else
        d->killed = 2;
    submit_more(d);
}

static void on_shutdown(void *ud)
{
    demo *d = ud;
    d->shutdown_done = 1;
    finish_consumer(d);
    /* Leases reclaim what a lost rollback left: wait for them, bounded. */
    d->settle_until = xfer_engine_now(d->engine) +
                      (d->o.tcp ? (TCP_LEASE_MS + TCP_GRACE_MS + 3000) * MS
                                : 4000 * MS);
    struct timeval tv = {0, 1000};
    evtimer_add(d->settle, &tv);
}

static void submit_more(demo *d)
{
    /* --etcd: nothing new while the killed shard is down (each would
     * fail at once); its in-flight ops fail and roll back meanwhile. */
    if (d->dir && d->killed_at && d->killed != 2)
        return;
    while (d->nfree && d->next_id < d->o.transfers)
        if (submit_one(d) != 0)
            break;
    if (d->ended == d->submitted && d->next_id >= d->o.transfers &&
        !d->shutdown_done && d->nfree == d->o.inflight) {
        static int asked;
        if (!asked++)
            xfer_engine_shutdown(d->engine, on_shutdown, d);
    }
}

/* ---------------------------------------------------------------------- */
/* Progress, settling and the summary                                      */
/* ---------------------------------------------------------------------- */

/* Bytes the consumer group holds: every shard pool (loop), or every
 * xferd's STATUS summed (tcp).  False when an xferd did not answer. */
static bool consumer_held(demo *d, uint64_t *bytes)
{
    if (d->o.tcp)
        return demo_tcp_bytes_in_use(d->kids, bytes) == 0;
    *bytes = 0;
    for (uint16_t k = 0; k < d->o.shards; k++) {
        xfer_shard_stats st;
        xfer_shard_stats_get(xfer_loop_shard(d->loop, k), &st);
        *bytes += st.bytes_in_use;
    }
    return true;
}

static void on_progress(evutil_socket_t fd, short what, void *arg)
{
    demo *d = arg;
    if (d->o.quiet)
        return;
    char avail[40] = "", held[24] = "?";
    uint64_t bytes;
    if (!d->o.tcp)
        snprintf(avail, sizeof avail, "  available %" PRIu64, d->available);
    if (consumer_held(d, &bytes))
        snprintf(held, sizeof held, "%" PRIu64, bytes);
    printf("%s[%6.2fs] submitted %u  ok %" PRIu64 "  failed %" PRIu64
           "  cancelled %" PRIu64 "%s  held %s B%s",
           d->tty ? "\r" : "",
           (double)(xfer_engine_now(d->engine) - d->t0) / 1e9, d->submitted,
           d->ok, d->failed, d->cancelled, avail, held, d->tty ? "" : "\n");
    fflush(stdout);
}

/* After shutdown: let leases and tombstones run out so every reservation
 * the consumer never took is reclaimed, then stop the loop.  Over tcp each
 * poll is a STATUS round to every xferd, hence the slower pace. */
static void on_settle(evutil_socket_t fd, short what, void *arg)
{
    demo *d = arg;
    uint64_t bytes;
    bool known = consumer_held(d, &bytes);
    if ((known && bytes == 0) ||
        xfer_engine_now(d->engine) >= d->settle_until) {
        event_base_loopbreak(d->base);
        return;
    }
    struct timeval tv = {0, d->o.tcp ? 20000 : 10000};
    evtimer_add(d->settle, &tv);
}

/* Every flag, its value and its help: getopt_long's options and --help
 * are both built from this table (tools/cli.h). */
enum { F_TRANSFERS = 256, F_INFLIGHT, F_SHARDS, F_BLOCK, F_SEED, F_FAULTS,
       F_TRACE, F_QUIET, F_TCP, F_XFERD, F_RDMA, F_ETCD };
static const cli_flag flags[] = {
    {"transfers", 0, "N", "transfers to run (5000)", F_TRANSFERS},
    {"inflight", 0, "N", "transfers in flight at once, 1..4096 (64)",
     F_INFLIGHT},
    {"shards", 0, "N", "shards per transfer (4)", F_SHARDS},
    {"block", 0, "BYTES", "bytes per shard of a transfer (4096)", F_BLOCK},
    {"seed", 0, "N", "seed of the faults and the data (1)", F_SEED},
    {"fault-ppm", 0, "N", "faults injected per million ops (20000)",
     F_FAULTS},
    {"trace", 0, "FILE", "the producer's trace (xfer-demo.trace)", F_TRACE},
    {"quiet", 0, NULL, "only the final report", F_QUIET},
    {"tcp", 0, NULL,
     "one xferd process per shard over TCP (default: in-process loop)",
     F_TCP},
    {"xferd", 0, "PATH", "with --tcp: the xferd to run (default: next to "
     "xfer-demo)", F_XFERD},
    {"rdma", 0, NULL, "--tcp with the data moved by RDMA WRITE (no device: "
     "exit 77)", F_RDMA},
    {"etcd", 0, "URLS", "with --tcp: the shards register in etcd (lease "
     "2 s) and the producer finds them there; the killed shard is noticed "
     "through its lease (docs/discovery.md)", F_ETCD},
    CLI_HELP,
    CLI_VERSION,
    {NULL, 0, NULL, NULL, 0}};

static const cli demo_cli = {
    .prog = "xfer-demo",
    .summary = "the xfer demonstration: transfers, faults and consumers in one run",
    .synopsis = "[flags]",
    .intro = "a producer, S shards and a consumer moving transfers under "
             "injected faults;\nevery byte is checked and both sides must "
             "agree on every id\n",
    .flags = flags};

static void usage_error(const char *msg, const char *arg)
{
    if (arg)
        exit(cli_bad(&demo_cli, msg, arg));
    fprintf(stderr, "xfer-demo: %s (try xfer-demo --help)\n", msg);
    exit(2);
}

static uint64_t parse_num(const char *flag, const char *s, uint64_t max)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (!*s || *s == '-' || *end || errno || v > max) {
        char what[64];
        snprintf(what, sizeof what, "value for %s", flag);
        usage_error(what, s);
    }
    return v;
}

static void parse(opts *o, int argc, char **argv)
{
    *o = (opts){.transfers = 5000, .inflight = 64, .block = 4096,
                .shards = 4, .seed = 1, .fault_ppm = 20000,
                .trace = "xfer-demo.trace", .argv0 = argv[0]};
    const char *v;
    int k;
    while ((k = cli_next(&demo_cli, argc, argv, &v)) != CLI_END) {
        switch (k) {
        case F_QUIET: o->quiet = 1; break;
        case F_TCP: o->tcp = 1; break;
        case F_RDMA: o->tcp = o->rdma = 1; break;
        case F_TRANSFERS:
            o->transfers = (uint32_t)parse_num("--transfers", v, 10000000);
            break;
        case F_INFLIGHT:
            o->inflight = (uint32_t)parse_num("--inflight", v, 4096);
            break;
        case F_SHARDS:
            o->shards = (uint16_t)parse_num("--shards", v, XFER_MAX_SHARDS);
            break;
        case F_BLOCK:
            o->block = (uint32_t)parse_num("--block", v, 1u << 20);
            break;
        case F_SEED: o->seed = parse_num("--seed", v, UINT64_MAX); break;
        case F_FAULTS:
            o->fault_ppm = (uint32_t)parse_num("--fault-ppm", v, 1000000);
            break;
        case F_TRACE: o->trace = v; break;
        case F_XFERD: o->xferd = v; break;
        case F_ETCD: o->etcd = v; break;
        default: exit(2); /* CLI_ERR: the line is printed */
        }
    }
    if (optind < argc)
        usage_error("argument", argv[optind]);
    if (!o->shards || !o->inflight || !o->transfers)
        usage_error("--shards, --inflight and --transfers must be > 0", NULL);
    if (o->xferd && !o->tcp)
        usage_error("--xferd needs --tcp", NULL);
    if (o->etcd && (!o->tcp || o->rdma))
        usage_error("--etcd needs --tcp (and not --rdma)", NULL);
}

static void add_faults(demo *d)
{
    uint32_t p = d->o.fault_ppm;
    if (!p)
        return;
    const xfer_fault_rule rules[] = {
        {XFER_FAULT_DELAY, XFER_FAULT_ANY_OP, -1, 0, p, 0, 2 * MS, 0},
        {XFER_FAULT_FAIL, XFER_OP_RESERVE, -1, 0, p, 0, 0, XFER_ERR_NO_SPACE},
        {XFER_FAULT_FAIL, XFER_OP_WRITE, -1, 0, p, 0, 0, XFER_ERR_IO},
        {XFER_FAULT_APPLIED_LOST, XFER_OP_RESERVE, -1, 0, p / 2, 0, 0,
         XFER_ERR_CONN_LOST},
        {XFER_FAULT_APPLIED_LOST, XFER_OP_COMMIT, -1, 0, p / 2, 0, 0,
         XFER_ERR_CONN_LOST},
        {XFER_FAULT_APPLIED_LOST, XFER_OP_CANCEL, -1, 0, p * 5, 0, 0,
         XFER_ERR_IO},
        {XFER_FAULT_FAIL, XFER_OP_CANCEL, -1, 0, p * 5, 0, 0, XFER_ERR_IO},
        {XFER_FAULT_DROP, XFER_FAULT_ANY_OP, -1, 0, p / 10, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        xfer_fault_rule r = rules[i];
        if (r.prob_ppm > 1000000)
            r.prob_ppm = 1000000;
        if (r.prob_ppm == 0)
            continue;
        xfer_loop_add_rule(d->loop, &r);
    }
}

/* The producer both modes share: staging, the trace file, the engine
 * (over tcp on a base of our own, which must outlive the transport). */
static int setup_producer(demo *d)
{
    const opts *o = &d->o;
    size_t staging_len = (size_t)o->inflight * o->shards * o->block;
    d->staging = calloc(staging_len ? staging_len : 1, 1);
    d->free_slots = calloc(o->inflight, sizeof *d->free_slots);
    d->completed = calloc((size_t)o->transfers + 1, 1);
    d->bad = calloc((size_t)o->transfers + 1, 1);
    d->rids = calloc(((size_t)o->transfers + 1) * o->shards, 8);
    if (o->tcp)
        d->own_base = event_base_new();
    if (!d->staging || !d->free_slots || !d->completed || !d->bad ||
        !d->rids || (o->tcp && !d->own_base))
        return XFER_ERR_NOMEM;
    for (uint32_t i = 0; i < o->inflight; i++)
        d->free_slots[d->nfree++] = o->inflight - 1 - i;
    xfer_tracefile_opts topts;
    xfer_tracefile_opts_default(&topts);
    topts.label = "xfer-demo";
    errno = 0;
    int rc = xfer_tracefile_open(o->trace, &topts, &d->tf);
    if (rc) {
        snprintf(d->err, sizeof d->err, "cannot open trace %s: %s", o->trace,
                 rc == XFER_ERR_IO && errno ? strerror(errno)
                                            : xfer_strerror(rc));
        return rc;
    }
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = d->own_base;
    ec.core.max_transfers = o->inflight * 2;
    ec.core.max_tombstones = o->transfers * 2 + 1024;
    ec.core.tombstone_ttl_ns = 2000 * MS;
    ec.core.consumer_lease_ns = 1000 * MS; /* loop 400 ms, tcp below */
    ec.core.net_margin_ns = 1000 * MS;
    ec.core.cancel_op_timeout_ns = 100 * MS;
    ec.core.cancel_backoff_ns = 5 * MS;
    ec.core.cancel_max_attempts = 4;
    ec.core.trace = xfer_tracefile_sink(d->tf);
    rc = xfer_engine_new(&ec, &d->engine);
    if (rc)
        return rc;
    d->base = xfer_engine_base(d->engine);
    return xfer_engine_register_pool(d->engine, d->staging, staging_len,
                                     &d->pool);
}

/* Loop mode: in-process shards with the loop's fault rules, and the
 * consumer scheduler's readiness tracker. */
static int setup_loop(demo *d)
{
    const opts *o = &d->o;
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = o->shards;
    lc.seed = o->seed;
    lc.on_event = on_shard_event;
    lc.on_event_ud = d;
    lc.shard.pool_bytes = (uint64_t)o->inflight * o->block * 4;
    lc.shard.max_reservations = o->inflight * 4;
    /* every id leaves a tombstone on every shard for 1.5 s */
    lc.shard.max_tombstones = o->transfers + 4096;
    lc.shard.lease_ttl_ns = 400 * MS;
    lc.shard.tombstone_ttl_ns = 1500 * MS;
    lc.shard.trace = xfer_tracefile_sink_tagged(d->tf, 1);
    int rc = xfer_loop_new(d->base, &lc, &d->loop);
    if (rc)
        return rc;
    add_faults(d);
    xfer_readiness_config rcfg;
    xfer_readiness_config_default(&rcfg);
    rcfg.nshards = o->shards;
    rcfg.max_records = o->inflight * 8;
    rcfg.max_tombstones = o->transfers * 2 + 1024;
    rcfg.deadline_ns = 300 * MS;
    rcfg.tombstone_ttl_ns = 2000 * MS;
    rcfg.trace = xfer_tracefile_sink_tagged(d->tf, 2);
    rc = xfer_readiness_new(&rcfg, &d->ready);
    if (!rc)
        rc = xfer_engine_add_group(d->engine, xfer_loop_transport(d->loop),
                                   &d->group);
    return rc;
}

/* Tcp mode, before anything is opened (the children inherit nothing): one
 * xferd per shard, sized like the loop shards, faults seeded per shard. */
static int start_xferds(demo *d)
{
    const opts *o = &d->o;
    char path[4096];
    if (o->xferd)
        snprintf(path, sizeof path, "%s", o->xferd);
    else if (demo_tcp_find_xferd(o->argv0, path, sizeof path) != 0) {
        snprintf(d->err, sizeof d->err, "no xferd next to xfer-demo "
                 "(looked for %.200s); use --xferd PATH", path);
        return XFER_ERR_NOT_FOUND;
    }
    /* READY data waits for the consumer process to take it, so the pools
     * hold more than the inflight window. */
    uint64_t pool = (uint64_t)o->inflight * o->block * 16;
    demo_tcp_config c = {
        .xferd = path, .nshards = o->shards,
        .pool_bytes = pool < (64u << 10) ? 64u << 10 : pool,
        .max_resv = o->inflight * 16,
        /* every id leaves a tombstone on every shard for 2 lease TTLs */
        .max_tombs = o->transfers + 4096,
        .lease_ttl_ms = TCP_LEASE_MS,
        .fault_ppm = o->fault_ppm, .drop_ppm = o->fault_ppm / 200,
        .seed = o->seed, .shm = d->shm, .trace = o->trace,
        .take_grace_ms = TCP_GRACE_MS, .rdma = o->rdma != 0,
        .etcd = o->etcd};
    signal(SIGPIPE, SIG_IGN); /* libevent writes to sockets (xfer/tcp.h) */
    return demo_tcp_start(&c, &d->kids, d->err, sizeof d->err);
}

/* Tcp mode, also before anything is opened: the consumer process, this
 * executable again (--consumer-role), connected to every xferd. */
static int start_consumer(demo *d)
{
    const opts *o = &d->o;
    char self[4096], trace[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(d->err, sizeof d->err, "cannot find this executable");
        return XFER_ERR_IO;
    }
    self[n] = '\0';
    snprintf(trace, sizeof trace, "%s.consumer", o->trace);
    const char *addrs[XFER_MAX_SHARDS];
    for (uint16_t k = 0; k < o->shards; k++)
        addrs[k] = demo_tcp_addr(d->kids, k);
    demo_consumer_config cc = {
        .self = self, .nshards = o->shards, .addrs = addrs, .shm = d->shm,
        .transfers = o->transfers, .block = o->block, .seed = o->seed,
        .cancel_ppm = CONSUMER_CANCEL_PPM, .trace = trace};
    d->prod = calloc((size_t)o->transfers + 1, sizeof *d->prod);
    if (!d->prod)
        return XFER_ERR_NOMEM;
    return demo_consumer_start(&cc, &d->cons, d->err, sizeof d->err);
}

/* Tcp mode, once the engine exists: connect to every xferd, add the group. */
static int setup_tcp(demo *d)
{
    if (d->o.rdma) {
        int rc = demo_tcp_connect_rdma(d->kids, d->base, TCP_CONNECT_MS,
                                       &d->rdma, d->err, sizeof d->err);
        return rc ? rc
                  : xfer_engine_add_group(d->engine,
                                          xfer_rdma_transport(d->rdma),
                                          &d->group);
    }
    int rc;
    if (d->o.etcd) {
        xfer_dir_config dc;
        xfer_dir_config_default(&dc);
        dc.endpoints = d->o.etcd;
        dc.lease_ttl_s = 2;
        rc = xfer_dir_new(d->base, &dc, &d->dir);
        if (rc) {
            snprintf(d->err, sizeof d->err, "--etcd %.200s: %s", d->o.etcd,
                     xfer_strerror(rc));
            return rc;
        }
        d->gone_ev = event_new(d->base, -1, EV_PERSIST, on_gone_poll, d);
        if (!d->gone_ev)
            return XFER_ERR_NOMEM;
        rc = demo_tcp_connect_dir(d->kids, d->base, d->dir, TCP_CONNECT_MS,
                                  &d->tcp, d->err, sizeof d->err);
    } else {
        rc = demo_tcp_connect(d->kids, d->base, TCP_CONNECT_MS, &d->tcp,
                              d->err, sizeof d->err);
    }
    if (!rc)
        rc = xfer_engine_add_group(d->engine, xfer_tcp_transport(d->tcp),
                                   &d->group);
    return rc;
}

static int setup(demo *d)
{
    snprintf(d->shm, sizeof d->shm, "xfer-demo-%d", (int)getpid());
    int rc = d->o.tcp ? start_xferds(d) : 0;
    if (!rc && d->o.tcp)
        rc = start_consumer(d);
    if (!rc)
        rc = setup_producer(d);
    if (!rc)
        rc = d->o.tcp ? setup_tcp(d) : setup_loop(d);
    if (!rc && d->o.tcp && d->o.shards > TCP_KILLED_SHARD &&
        !(d->kill_ev = event_new(d->base, -1, 0, on_kill, d)))
        rc = XFER_ERR_NOMEM;
    if (!rc) {
        d->progress = event_new(d->base, -1, EV_PERSIST, on_progress, d);
        d->settle = evtimer_new(d->base, on_settle, d);
        if (xfer_timer_init(&d->ready_timer, d->base, on_ready_timer, d) ||
            !d->progress || !d->settle)
            rc = XFER_ERR_NOMEM;
    }
    return rc;
}

/* What the summary reports, gathered while the consumer group still
 * answers (over tcp the xferds are stopped before it is printed). */
typedef struct tally {
    xfer_engine_stats es;
    xfer_readiness_stats rs; /* loop mode */
    uint64_t twice, never, producer_leak, consumer_leak;
    bool consumer_known;     /* every xferd answered STATUS */
    int xferd_unclean;       /* xferds that did not exit 0 on SIGTERM */
    demo_agreement agree;    /* tcp mode */
} tally;

static void collect(demo *d, tally *t)
{
    *t = (tally){0};
    xfer_engine_stats_get(d->engine, &t->es);
    if (d->ready)
        xfer_readiness_stats_get(d->ready, &t->rs);
    for (uint32_t id = 1; id <= d->next_id; id++) {
        t->twice += d->completed[id] > 1;
        t->never += d->completed[id] == 0;
    }
    t->never -= d->refused_sync;
    t->producer_leak = t->es.staging_bytes_in_use;
    t->consumer_known = consumer_held(d, &t->consumer_leak);
    if (d->have_report)
        demo_agree(d->prod, &d->rep, d->o.transfers, &t->agree);
}

/* Tcp mode: the consumer process and what both sides agree on. */
static void print_tcp(const demo *d, const tally *t)
{
    const demo_consumer_report *r = &d->rep;
    const demo_agreement *a = &t->agree;
    if (!d->have_report) {
        printf("  consumer process: no report (%s)\n", d->err);
        return;
    }
    printf("  consumer process (xfer_consumer, pools mapped from shared "
           "memory): available %" PRIu64 " (bytes verified in place %" PRIu64
           ", corrupt %" PRIu64 ")\n",
           r->available, r->verified, r->corrupt);
    printf("    unavailable %" PRIu64 " (timeout %" PRIu64 ", cancelled %"
           PRIu64 ", expired %" PRIu64 ", conn lost %" PRIu64
           ", take failed %" PRIu64 "), consumer cancels %" PRIu64
           ", held at exit %" PRIu64 " B, exit %d\n",
           r->unavailable, r->by_reason[0], r->by_reason[1], r->by_reason[2],
           r->by_reason[3], r->by_reason[4], r->cancels, r->held_bytes,
           r->exit_status);
    printf("  both sides: done and available %" PRIu64 ", done then "
           "cancelled by the consumer %" PRIu64 ", done but lost to the "
           "shard kill %" PRIu64 " (conn lost %" PRIu64 ", expired %" PRIu64
           ")\n",
           a->done_available, a->done_cancelled,
           a->done_lost_conn + a->done_lost_expired, a->done_lost_conn,
           a->done_lost_expired);
    printf("    \"consumer may hold\": available %" PRIu64
           ", unavailable %" PRIu64 "; violations: done yet unavailable %"
           PRIu64 ", failed before COMPLETING yet available %" PRIu64
           ", not one outcome (producer %" PRIu64 ", consumer %" PRIu64
           "), bad bytes %" PRIu64 "%s\n",
           a->may_hold_available, a->may_hold_unavailable, a->done_bad,
           a->early_available, a->producer_not_once, a->consumer_not_once,
           a->unverified, demo_agreed(a) ? "" : " (FIRST BAD ID BELOW)");
    if (!demo_agreed(a))
        printf("    first bad id: %" PRIu64 "\n", a->first_bad_id);
    printf("  shard %u %s; %u xferd --shm processes (%d did not exit "
           "cleanly)\n",
           TCP_KILLED_SHARD,
           d->killed == 2 ? "killed with SIGKILL mid-run and restarted"
                          : "NOT killed and restarted",
           d->o.shards, t->xferd_unclean);
    if (d->dir) {
        xfer_tcp_stats ts;
        xfer_dir_state ds;
        xfer_tcp_stats_get(d->tcp, &ts);
        xfer_dir_state_get(d->dir, &ds);
        printf("  etcd: shard %u gone %" PRIu64 " ms after its kill -9 "
               "(its lease: 2 s), ops failed as gone %" PRIu64
               "; directory revision %lld, members %u, requests failed %"
               PRIu64 "\n",
               TCP_KILLED_SHARD, d->gone_ms, ts.failed_gone,
               (long long)ds.revision, ds.members, ds.failures);
    }
}

static void print_consumer(const demo *d, const tally *t)
{
    if (d->o.tcp) {
        print_tcp(d, t);
        printf("  late events rejected %" PRIu64 " (late submits %" PRIu64
               ", late replies %" PRIu64 ")\n",
               t->es.core.late_submits + t->es.core.late_replies,
               t->es.core.late_submits, t->es.core.late_replies);
        return;
    }
    printf("  consumer: available %" PRIu64 " (bytes verified %" PRIu64
           ", corrupt %" PRIu64 ")  unavailable %" PRIu64
           "  consumer cancels %" PRIu64 "\n",
           d->available, d->verified, d->corrupt, d->unavailable,
           d->consumer_cancels);
    printf("  late events rejected %" PRIu64 " (late submits %" PRIu64
           ", late replies %" PRIu64 ", late ready %" PRIu64 ")\n",
           t->es.core.late_submits + t->es.core.late_replies +
               t->rs.late_ready,
           t->es.core.late_submits, t->es.core.late_replies,
           t->rs.late_ready);
}

static int summary(demo *d, const tally *t)
{
    char cons[48] = "unknown (an xferd did not answer STATUS)";
    if (t->consumer_known)
        snprintf(cons, sizeof cons, "%" PRIu64, t->consumer_leak);
    printf("%s", d->tty && !d->o.quiet ? "\n" : "");
    printf("xfer-demo: %u transfers, %u shards (%s), seed %" PRIu64
           ", fault rate %u ppm\n",
           d->submitted, d->o.shards,
           d->o.rdma  ? "rdma: xferd --shm --rdma per shard, a consumer "
                        "process"
           : d->o.tcp ? "tcp: xferd --shm per shard, a consumer process"
                      : "loop",
           d->o.seed, d->o.fault_ppm);
    printf("  done %" PRIu64 "  failed %" PRIu64 "  cancelled %" PRIu64
           "  (completed twice %" PRIu64 ", never %" PRIu64 ")\n",
           d->ok, d->failed, d->cancelled, t->twice, t->never);
    print_consumer(d, t);
    printf("  cancel retries %" PRIu64 ", rollbacks given up %" PRIu64
           ", staging pools still registered %u\n",
           t->es.core.cancel_retries, t->es.core.cancel_gave_up,
           t->es.pools);
    if (d->o.tcp)
        printf("  leaked bytes: producer %" PRIu64 ", shards %s, consumer "
               "%" PRIu64 "\n",
               t->producer_leak, cons, d->rep.held_bytes);
    else
        printf("  leaked bytes: producer %" PRIu64 ", consumers %s\n",
               t->producer_leak, cons);
    printf("  trace: %s (%" PRIu64 " records)\n", d->o.trace,
           xfer_tracefile_records(d->tf));
    if (d->o.tcp)
        printf("  merged: xfer-trace stuck %s %s.shard* %s.consumer\n",
               d->o.trace, d->o.trace, d->o.trace);
    int ok = t->twice == 0 && t->never == 0 && t->producer_leak == 0 &&
             t->consumer_known && t->consumer_leak == 0 && d->corrupt == 0 &&
             t->es.pools == 0 && d->shutdown_done && t->xferd_unclean == 0;
    if (d->o.tcp)
        ok = ok && d->have_report && demo_agreed(&t->agree) &&
             d->rep.exit_status == 0 && d->rep.held_bytes == 0 &&
             d->rep.unreported == 0 && d->killed == 2 &&
             (!d->dir || d->gone_ms > 0);
    printf("xfer-demo: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

/* Undo setup in reverse, whatever part of it was done.  Over tcp the
 * engine borrows our base and the transport outlives the engine: free the
 * engine, then the transport, then let the base finish closing sockets. */
static void teardown(demo *d)
{
    if (d->progress)
        event_free(d->progress);
    xfer_timer_clear(&d->ready_timer);
    if (d->settle)
        event_free(d->settle);
    if (d->kill_ev)
        event_free(d->kill_ev);
    if (d->gone_ev)
        event_free(d->gone_ev);
    xfer_engine_del(d->engine);
    xfer_loop_del(d->loop);
    xfer_tcp_del(d->tcp);
    xfer_dir_del(d->dir); /* after the transport that follows it */
    xfer_rdma_del(d->rdma);
    if (d->own_base) {
        event_base_loop(d->own_base, EVLOOP_NONBLOCK);
        event_base_free(d->own_base);
    }
    demo_consumer_stop(d->cons);
    demo_tcp_stop(d->kids);
    xfer_readiness_del(d->ready);
    xfer_tracefile_close(d->tf);
    free(d->staging);
    free(d->free_slots);
    free(d->completed);
    free(d->bad);
    free(d->rids);
    free(d->prod);
    free(d->rep.out);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--consumer-role") == 0)
        return demo_consumer_main(argc - 2, argv + 2);
    demo d = {0};
    parse(&d.o, argc, argv);
    char why[160];
    if (d.o.rdma && xfer_rdma_probe(why, sizeof why) != 0) {
        fprintf(stderr, "xfer-demo: --rdma: %s; nothing run\n", why);
        return 77;
    }
    d.rng = d.o.seed * 0x9e3779b97f4a7c15ull + 1;
    d.tty = isatty(STDOUT_FILENO);
    int status = 1, rc = setup(&d);
    if (rc) {
        if (d.err[0])
            fprintf(stderr, "xfer-demo: %s\n", d.err);
        else
            fprintf(stderr, "xfer-demo: setup failed: %s\n",
                    xfer_strerror(rc));
        goto out;
    }
    struct timeval tick = {0, 250000};
    event_add(d.progress, &tick);
    d.t0 = xfer_engine_now(d.engine);
    submit_more(&d);
    event_base_dispatch(d.base);
    on_progress(-1, 0, &d);
    tally t;
    collect(&d, &t);
    if (d.kids) {
        t.xferd_unclean = demo_tcp_stop(d.kids);
        d.kids = NULL;
    }
    status = summary(&d, &t);
out:
    teardown(&d);
    return status;
}
