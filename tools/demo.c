/*
 * tools/demo.c - xfer-demo: one producer, a consumer group of S shards on
 * the loop transport, a few thousand transfers with a seeded fault mix, a
 * live progress line, and a closing summary.
 *
 * The consumer side runs a real consumer scheduler: every shard event feeds
 * an xfer_readiness tracker, whose actions (take, release, cancel) the demo
 * performs on the shards; data that becomes available is checked byte for
 * byte against what the producer staged, then released.  Some transfers are
 * cancelled by the producer, some by the consumer, some ids are submitted
 * again after they ended (late submits, which must be refused).
 *
 * The run passes (exit 0) when every accepted transfer completed exactly
 * once, every available transfer carried the right bytes, and at the end no
 * byte is held: producer staging, and every shard pool.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "xfer/loop.h"
#include "xfer/readiness.h"
#include "xfer/tracefile.h"
#include "xfer/xfer.h"

#define MS 1000000ull

typedef struct opts {
    uint32_t transfers, inflight, block;
    uint16_t shards;
    uint64_t seed;
    uint32_t fault_ppm;
    const char *trace;
    int quiet;
} opts;

typedef struct demo {
    opts o;
    struct event_base *base;
    xfer_engine *engine;
    xfer_loop *loop;
    xfer_readiness *ready;
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
    struct event *progress, *ready_timer, *settle;
    int shutdown_done, tty;
    uint64_t t0;
} demo;

static uint64_t rnd(demo *d)
{
    d->rng ^= d->rng >> 12;
    d->rng ^= d->rng << 25;
    d->rng ^= d->rng >> 27;
    return d->rng * 0x2545f4914f6cdd1dull;
}

static uint8_t pattern(uint64_t id, uint16_t shard, uint32_t i)
{
    return (uint8_t)(id * 131 + shard * 31 + i * 7);
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
            if (data[i] != pattern(a->id, a->shard, i)) {
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
    case XFER_RA_TAKE:
        do_take(d, a);
        break;
    case XFER_RA_RELEASE:
        xfer_shard_release(s, now, a->id, a->resv_id);
        feed_shard_events(d, s);
        break;
    case XFER_RA_CANCEL:
        xfer_shard_cancel(s, now, a->id, a->attempt, a->resv_id);
        feed_shard_events(d, s);
        break;
    case XFER_RA_AVAILABLE:
        d->available++;
        if (d->bad[a->id])
            d->corrupt++;
        else
            d->verified++;
        release_all(d, a->id);
        break;
    case XFER_RA_UNAVAILABLE:
        d->unavailable++;
        break;
    case XFER_RA_COUNT_:
        break;
    }
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
    uint64_t next = xfer_readiness_next_deadline(d->ready);
    if (next != UINT64_MAX) {
        uint64_t now = xfer_engine_now(d->engine);
        uint64_t dl = next > now ? next - now : 0;
        struct timeval tv = {(time_t)(dl / 1000000000ull),
                             (suseconds_t)(dl % 1000000000ull / 1000)};
        evtimer_add(d->ready_timer, &tv);
    }
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
            d->staging[off + i] = pattern(id, k, (uint32_t)i);
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
    else if (r < 30) {
        /* the consumer aborts the request */
        xfer_readiness_cancel(d->ready, xfer_engine_now(d->engine), id);
        d->consumer_cancels++;
        run_ready_actions(d);
    }
    return 0;
}

static void on_shutdown(void *ud)
{
    demo *d = ud;
    d->shutdown_done = 1;
    struct timeval tv = {0, 1000};
    evtimer_add(d->settle, &tv);
}

static void submit_more(demo *d)
{
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

static uint64_t consumer_bytes(demo *d)
{
    uint64_t sum = 0;
    for (uint16_t k = 0; k < d->o.shards; k++) {
        xfer_shard_stats st;
        xfer_shard_stats_get(xfer_loop_shard(d->loop, k), &st);
        sum += st.bytes_in_use;
    }
    return sum;
}

static void on_progress(evutil_socket_t fd, short what, void *arg)
{
    demo *d = arg;
    if (d->o.quiet)
        return;
    printf("%s[%6.2fs] submitted %u  ok %" PRIu64 "  failed %" PRIu64
           "  cancelled %" PRIu64 "  available %" PRIu64 "  held %" PRIu64
           " B%s",
           d->tty ? "\r" : "",
           (double)(xfer_engine_now(d->engine) - d->t0) / 1e9, d->submitted,
           d->ok, d->failed, d->cancelled, d->available, consumer_bytes(d),
           d->tty ? "" : "\n");
    fflush(stdout);
}

/* After shutdown: let leases and tombstones run out so every reservation
 * the consumer never took is reclaimed, then stop the loop. */
static void on_settle(evutil_socket_t fd, short what, void *arg)
{
    demo *d = arg;
    static int rounds;
    if (consumer_bytes(d) == 0 || ++rounds > 400) {
        event_base_loopbreak(d->base);
        return;
    }
    struct timeval tv = {0, 10000};
    evtimer_add(d->settle, &tv);
}

static void usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "xfer-demo: %s%s%s (try --help)\n", msg, arg ? ": " : "",
            arg ? arg : "");
    exit(2);
}

static uint64_t parse_num(const char *flag, const char *s, uint64_t max)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (!*s || *end || v > max)
        usage_error("bad value for", flag);
    return v;
}

static void parse(opts *o, int argc, char **argv)
{
    *o = (opts){.transfers = 5000, .inflight = 64, .block = 4096,
                .shards = 4, .seed = 1, .fault_ppm = 20000,
                .trace = "xfer-demo.trace"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            printf("usage: xfer-demo [--transfers N] [--inflight N] "
                   "[--shards N] [--block BYTES] [--seed N] "
                   "[--fault-ppm N] [--trace FILE] [--quiet]\n");
            exit(0);
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
            continue;
        }
        if (!v)
            usage_error("unknown flag or missing value", a);
        i++;
        if (!strcmp(a, "--transfers"))
            o->transfers = (uint32_t)parse_num(a, v, 10000000);
        else if (!strcmp(a, "--inflight"))
            o->inflight = (uint32_t)parse_num(a, v, 4096);
        else if (!strcmp(a, "--shards"))
            o->shards = (uint16_t)parse_num(a, v, XFER_MAX_SHARDS);
        else if (!strcmp(a, "--block"))
            o->block = (uint32_t)parse_num(a, v, 1u << 20);
        else if (!strcmp(a, "--seed"))
            o->seed = parse_num(a, v, UINT64_MAX);
        else if (!strcmp(a, "--fault-ppm"))
            o->fault_ppm = (uint32_t)parse_num(a, v, 1000000);
        else if (!strcmp(a, "--trace"))
            o->trace = v;
        else
            usage_error("unknown flag", a);
    }
    if (!o->shards || !o->inflight || !o->transfers)
        usage_error("--shards, --inflight and --transfers must be > 0", NULL);
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

static int setup(demo *d)
{
    const opts *o = &d->o;
    size_t staging_len = (size_t)o->inflight * o->shards * o->block;
    d->staging = calloc(staging_len ? staging_len : 1, 1);
    d->free_slots = calloc(o->inflight, sizeof *d->free_slots);
    d->completed = calloc((size_t)o->transfers + 1, 1);
    d->bad = calloc((size_t)o->transfers + 1, 1);
    d->rids = calloc(((size_t)o->transfers + 1) * o->shards, 8);
    if (!d->staging || !d->free_slots || !d->completed || !d->bad || !d->rids)
        return XFER_ERR_NOMEM;
    for (uint32_t i = 0; i < o->inflight; i++)
        d->free_slots[d->nfree++] = o->inflight - 1 - i;
    xfer_tracefile_opts topts = {.format = XFER_TRACEFILE_BINARY,
                                 .label = "xfer-demo"};
    int rc = xfer_tracefile_open(o->trace, &topts, &d->tf);
    if (rc)
        return rc;
    xfer_engine_config ec = {
        .core = {.max_transfers = o->inflight * 2,
                 .max_tombstones = o->transfers * 2 + 1024,
                 .tombstone_ttl_ns = 2000 * MS,
                 .cancel_op_timeout_ns = 100 * MS,
                 .cancel_backoff_ns = 5 * MS,
                 .cancel_max_attempts = 4,
                 .trace = xfer_tracefile_sink(d->tf)}};
    rc = xfer_engine_new(&ec, &d->engine);
    if (rc)
        return rc;
    d->base = xfer_engine_base(d->engine);
    xfer_loop_config lc = {
        .nshards = o->shards, .seed = o->seed, .on_event = on_shard_event,
        .on_event_ud = d,
        .shard = {.pool_bytes = (uint64_t)o->inflight * o->block * 4,
                  .max_reservations = o->inflight * 4,
                  /* every id leaves a tombstone on every shard for 1.5 s */
                  .max_tombstones = o->transfers + 4096,
                  .lease_ttl_ns = 400 * MS,
                  .tombstone_ttl_ns = 1500 * MS,
                  .trace = xfer_tracefile_sink_tagged(d->tf, 1)}};
    rc = xfer_loop_new(d->base, &lc, &d->loop);
    if (rc)
        return rc;
    add_faults(d);
    xfer_readiness_config rcfg = {
        .nshards = o->shards, .max_records = o->inflight * 8,
        .max_tombstones = o->transfers * 2 + 1024, .deadline_ns = 300 * MS,
        .tombstone_ttl_ns = 2000 * MS,
        .trace = xfer_tracefile_sink_tagged(d->tf, 2)};
    rc = xfer_readiness_new(&rcfg, &d->ready);
    if (!rc)
        rc = xfer_engine_register_pool(d->engine, d->staging, staging_len,
                                       &d->pool);
    if (!rc)
        rc = xfer_engine_add_group(d->engine, xfer_loop_transport(d->loop),
                                   &d->group);
    return rc;
}

static int summary(demo *d)
{
    xfer_engine_stats es;
    xfer_engine_stats_get(d->engine, &es);
    xfer_readiness_stats rs;
    xfer_readiness_stats_get(d->ready, &rs);
    uint64_t twice = 0, never = 0;
    for (uint32_t id = 1; id <= d->next_id; id++) {
        twice += d->completed[id] > 1;
        never += d->completed[id] == 0;
    }
    never -= d->refused_sync;
    uint64_t producer_leak = es.staging_bytes_in_use;
    uint64_t consumer_leak = consumer_bytes(d);
    uint64_t late = es.core.late_submits + es.core.late_replies +
                    rs.late_ready;
    printf("%s", d->tty && !d->o.quiet ? "\n" : "");
    printf("xfer-demo: %u transfers, %u shards, seed %" PRIu64
           ", fault rate %u ppm\n",
           d->submitted, d->o.shards, d->o.seed, d->o.fault_ppm);
    printf("  done %" PRIu64 "  failed %" PRIu64 "  cancelled %" PRIu64
           "  (completed twice %" PRIu64 ", never %" PRIu64 ")\n",
           d->ok, d->failed, d->cancelled, twice, never);
    printf("  consumer: available %" PRIu64 " (bytes verified %" PRIu64
           ", corrupt %" PRIu64 ")  unavailable %" PRIu64
           "  consumer cancels %" PRIu64 "\n",
           d->available, d->verified, d->corrupt, d->unavailable,
           d->consumer_cancels);
    printf("  late events rejected %" PRIu64 " (late submits %" PRIu64
           ", late replies %" PRIu64 ", late ready %" PRIu64 ")\n",
           late, es.core.late_submits, es.core.late_replies, rs.late_ready);
    printf("  cancel retries %" PRIu64 ", rollbacks given up %" PRIu64
           ", staging pools still registered %u\n",
           es.core.cancel_retries, es.core.cancel_gave_up, es.pools);
    printf("  leaked bytes: producer %" PRIu64 ", consumers %" PRIu64 "\n",
           producer_leak, consumer_leak);
    printf("  trace: %s (%" PRIu64 " records)\n", d->o.trace,
           xfer_tracefile_records(d->tf));
    int ok = twice == 0 && never == 0 && producer_leak == 0 &&
             consumer_leak == 0 && d->corrupt == 0 && es.pools == 0 &&
             d->shutdown_done;
    printf("xfer-demo: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    demo d = {0};
    parse(&d.o, argc, argv);
    d.rng = d.o.seed * 0x9e3779b97f4a7c15ull + 1;
    d.tty = isatty(STDOUT_FILENO);
    int rc = setup(&d);
    if (rc) {
        fprintf(stderr, "xfer-demo: setup failed: %s\n", xfer_strerror(rc));
        return 1;
    }
    d.progress = event_new(d.base, -1, EV_PERSIST, on_progress, &d);
    d.ready_timer = evtimer_new(d.base, on_ready_timer, &d);
    d.settle = evtimer_new(d.base, on_settle, &d);
    struct timeval tick = {0, 250000};
    event_add(d.progress, &tick);
    d.t0 = xfer_engine_now(d.engine);
    submit_more(&d);
    event_base_dispatch(d.base);
    on_progress(-1, 0, &d);
    int status = summary(&d);
    event_free(d.progress);
    event_free(d.ready_timer);
    event_free(d.settle);
    xfer_engine_del(d.engine);
    xfer_loop_del(d.loop);
    xfer_readiness_del(d.ready);
    xfer_tracefile_close(d.tf);
    free(d.staging);
    free(d.free_slots);
    free(d.completed);
    free(d.bad);
    free(d.rids);
    return status;
}
