/*
 * tests/api/test_stream_api.c - streamed and vectored transfers
 * (xfer/stream.h, issue 26) over the loop transport, as a program uses
 * them: a stream opened before its bytes exist, layers added as parts
 * (before the reserves answered, from the loop in a part's callback, and
 * posted from another thread), each part a gather of blocks scattered in
 * staging to their own offsets of each shard's reservation, then sealed.
 *
 * Every run, whatever its fault, checks: exactly one completion; every
 * accepted part's callback exactly once, before the completion (I3 per
 * part: staging_bytes_in_use is 0 at the completion); a part added after
 * the transfer failed or was stopped is refused at once with the
 * transfer's status and never called back; on success every byte of every
 * shard is the producer's (taken from the shard and compared).
 *
 * The fault classes are drawn from a seed (XFER_SEED, printed): each of
 * fail, applied_lost, drop and delay on a reserve, a write or a commit of
 * a random shard, and the stops between parts: a user cancel, a deadline
 * while the producer is late with its next part, a shutdown, a shard lost.
 * Nothing asserts how long anything took.
 */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "xfer/loop.h"
#include "xfer/stream.h"
#include "xfer/xfer.h"

#define S 4
#define L 4            /* layers: one part each */
#define LAYER 256      /* bytes of a layer on one shard */
#define BLOCKS 4       /* a layer's blocks on one shard, gathered */
#define BLK (LAYER / BLOCKS)
#define GUARD_MS 20000 /* a wait that never ends fails here */

/* How a run is disturbed. */
enum {
    K_NONE, K_FAULT, K_CANCEL, K_DEADLINE, K_SHUTDOWN, K_SHARD_DOWN, K_COUNT
};

typedef struct rig {
    struct event_base *base;
    xfer_loop *loop;
    xfer_engine *e;
    uint32_t group, pool;
    uint8_t mem[L * S * LAYER];
    uint64_t id;
    unsigned kind;
    unsigned stop_after; /* the stop comes after this part's callback */
    unsigned added;      /* parts accepted */
    unsigned refused;    /* parts refused after a failure or stop */
    int refusals[8];     /* their codes: the transfer's status each */
    unsigned next_layer; /* the layer the next part carries */
    unsigned posted_refused; /* posted parts the loop refused (part 0) */
    unsigned cbs[L + 2]; /* callbacks per part number */
    int part_status[L + 2];
    unsigned completions;
    xfer_result res;
    bool late;            /* K_DEADLINE: the next part is never added */
    bool shut;
    uint64_t resv[S];     /* READY events' reservation ids */
    unsigned ready;
} rig;

static uint8_t pattern(uint64_t id, unsigned k, uint32_t off)
{
    return (uint8_t)(id * 131u + k * 29u + off * 7u + (off >> 8));
}

/* Staging of layer l on shard k: its blocks in reverse order, so every
 * block is its own run. */
static uint64_t staging_of(unsigned l, unsigned k, unsigned b)
{
    return ((uint64_t)l * S + k) * LAYER + (uint64_t)(BLOCKS - 1 - b) * BLK;
}

static void fill(rig *r)
{
    for (unsigned l = 0; l < L; l++)
        for (unsigned k = 0; k < S; k++)
            for (unsigned b = 0; b < BLOCKS; b++)
                for (unsigned i = 0; i < BLK; i++)
                    r->mem[staging_of(l, k, b) + i] =
                        pattern(r->id, k, l * LAYER + b * BLK + i);
}

static void on_event(void *ud, const xfer_shard_event *ev)
{
    rig *r = ud;
    if (ev->kind == XFER_SHARD_EV_READY && ev->id == r->id && ev->shard < S) {
        r->resv[ev->shard] = ev->resv_id;
        r->ready++;
    }
}

static void on_part(void *ud, uint64_t id, uint32_t part, int status);

/* Layer l as a part: the blocks of every shard, in a scrambled order. */
static int add_layer(rig *r, unsigned l)
{
    xfer_range rg[S * BLOCKS];
    unsigned n = 0;
    for (unsigned b = 0; b < BLOCKS; b++)
        for (unsigned k = 0; k < S; k++) {
            unsigned bb = (b + k) % BLOCKS;
            rg[n++] = (xfer_range){.staging_off = staging_of(l, k, bb),
                                   .pool = r->pool, .len = BLK,
                                   .resv_off = l * LAYER + bb * BLK,
                                   .shard = (uint16_t)k};
        }
    xfer_part_desc d = {.id = r->id, .ranges = rg, .nranges = n,
                        .cb = on_part, .ud = r};
    uint32_t part = 0;
    int rc = xfer_engine_stream_part(r->e, &d, &part);
    if (rc == 0) {
        r->added++;
        ck_assert_uint_eq(part, r->added); /* numbered in order */
    }
    return rc;
}

static void stop(rig *r);
static void on_shut(void *ud);

static void note_refusal(rig *r, int rc)
{
    ck_assert_int_ne(rc, 0);
    if (r->refused < 8)
        r->refusals[r->refused] = rc;
    r->refused++;
}

/* The next layer goes out from the loop when the last one came back; the
 * last one seals. */
static void on_part(void *ud, uint64_t id, uint32_t part, int status)
{
    rig *r = ud;
    ck_assert_uint_eq(id, r->id);
    if (part == 0) {
        /* a posted part the loop refused: the transfer had failed */
        note_refusal(r, status);
        r->posted_refused++;
        return;
    }
    ck_assert_uint_le(part, L + 1);
    ck_assert_uint_eq(r->completions, 0); /* before the completion */
    r->cbs[part]++;
    r->part_status[part] = status;
    if (part == r->stop_after && r->kind >= K_CANCEL)
        stop(r);
    if (r->late || part != r->added || r->next_layer >= L)
        return;
    int rc = add_layer(r, r->next_layer);
    if (rc != 0) {
        /* the transfer failed or stopped: refused at once, with its
         * status (checked against the completion's) */
        note_refusal(r, rc);
        return;
    }
    if (++r->next_layer == L)
        ck_assert_int_eq(xfer_engine_stream_seal(r->e, r->id), 0);
}

static void stop(rig *r)
{
    switch (r->kind) {
    case K_CANCEL: {
        ck_assert_int_eq(xfer_engine_cancel(r->e, r->id), 0);
        /* refused at once, with the transfer's status, no callback */
        int rc = add_layer(r, L - 1);
        note_refusal(r, rc);
        ck_assert_int_eq(xfer_engine_stream_seal(r->e, r->id), rc);
        break;
    }
    case K_DEADLINE:
        r->late = true; /* the producer never comes back in time */
        break;
    case K_SHUTDOWN:
        ck_assert_int_eq(xfer_engine_shutdown(r->e, on_shut, r), 0);
        break;
    case K_SHARD_DOWN:
        xfer_loop_set_down(r->loop, 1, true);
        r->late = true;
        break;
    default:
        break;
    }
}

static void on_done(void *ud, const xfer_result *res)
{
    rig *r = ud;
    r->completions++;
    r->res = *res;
    /* every part came back first, and nothing reads staging any more */
    for (unsigned p = 1; p <= r->added - r->posted_refused; p++)
        ck_assert_uint_eq(r->cbs[p], 1);
    xfer_engine_stats st;
    ck_assert_int_eq(xfer_engine_stats_get(r->e, &st), 0);
    ck_assert_uint_eq(st.staging_bytes_in_use, 0);
}

static void on_shut(void *ud)
{
    rig *r = ud;
    r->shut = true;
}

/* A part posted from another thread lands in mailbox order. */
typedef struct poster {
    rig *r;
    int rc;
} poster;

static void *post_layer(void *arg)
{
    poster *p = arg;
    rig *r = p->r;
    xfer_range rg[S];
    for (unsigned k = 0; k < S; k++) /* layer 1, block by block below */
        rg[k] = (xfer_range){.staging_off = staging_of(1, k, 0),
                             .pool = r->pool, .len = BLK,
                             .resv_off = LAYER, .shard = (uint16_t)k};
    xfer_part_desc d = {.id = r->id, .ranges = rg, .nranges = S,
                        .cb = on_part, .ud = r};
    p->rc = xfer_engine_post_stream_part(r->e, &d);
    return NULL;
}

typedef bool (*pred_fn)(rig *r);
typedef struct waiter {
    rig *r;
    pred_fn pred;
    unsigned ticks;
    bool held;
} waiter;

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    waiter *w = arg;
    w->ticks++;
    if (w->pred(w->r)) {
        w->held = true;
        event_base_loopbreak(w->r->base);
    } else if (w->ticks > GUARD_MS) {
        event_base_loopbreak(w->r->base);
    }
}

static void run_until(rig *r, pred_fn pred)
{
    waiter w = {.r = r, .pred = pred};
    struct event *ev = event_new(r->base, -1, EV_PERSIST, on_tick, &w);
    struct timeval ms = {0, 1000};
    event_add(ev, &ms);
    event_base_dispatch(r->base);
    event_free(ev);
    ck_assert_msg(w.held, "the loop never reached the state waited for");
}

static bool completed(rig *r)
{
    return r->completions > 0;
}

static bool shut(rig *r)
{
    return r->shut;
}

static uint64_t seed_of(const char *name)
{
    const char *s = getenv("XFER_SEED");
    uint64_t seed = s && *s ? strtoull(s, NULL, 0) : 20261205u;
    printf("%s: seed %" PRIu64 " (set XFER_SEED to repeat)\n", name, seed);
    fflush(stdout);
    return seed;
}

static uint64_t next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void rig_init(rig *r, uint64_t id, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    r->id = id;
    r->base = event_base_new();
    ck_assert_ptr_nonnull(r->base);
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = r->base;
    ec.shutdown_timeout_ns = 5000000000ull;
    ck_assert_int_eq(xfer_engine_new(&ec, &r->e), 0);
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = S;
    lc.shard.pool_bytes = 1 << 20;
    lc.seed = seed;
    lc.on_event = on_event;
    lc.on_event_ud = r;
    ck_assert_int_eq(xfer_loop_new(r->base, &lc, &r->loop), 0);
    ck_assert_int_eq(
        xfer_engine_add_group(r->e, xfer_loop_transport(r->loop), &r->group),
        0);
    ck_assert_int_eq(
        xfer_engine_register_pool(r->e, r->mem, sizeof r->mem, &r->pool), 0);
    fill(r);
}

/* Every byte of every shard's reservation is the producer's. */
static void verify(rig *r)
{
    ck_assert_uint_eq(r->ready, S);
    for (unsigned k = 0; k < S; k++) {
        xfer_shard *sh = xfer_loop_shard(r->loop, (uint16_t)k);
        const uint8_t *data = NULL;
        uint32_t len = 0;
        ck_assert_int_eq(xfer_shard_take(sh, xfer_clock_monotonic(NULL),
                                         r->id, r->resv[k], &data, &len),
                         0);
        ck_assert_uint_eq(len, L * LAYER);
        for (uint32_t i = 0; i < len; i++)
            if (data[i] != pattern(r->id, k, i))
                ck_abort_msg("shard %u byte %u: %u, want %u", k, i, data[i],
                             pattern(r->id, k, i));
        ck_assert_int_eq(xfer_shard_release(sh, xfer_clock_monotonic(NULL),
                                            r->id, r->resv[k]),
                         0);
    }
}

static void rig_end(rig *r)
{
    if (!r->shut) {
        int rc = xfer_engine_shutdown(r->e, on_shut, r);
        ck_assert(rc == 0 || rc == XFER_ERR_STATE); /* STATE: the run's */
        run_until(r, shut);
    }
    xfer_engine_del(r->e);
    xfer_loop_del(r->loop);
    event_base_free(r->base);
}

/* One run: open, layer 0 before the reserves answer, layer 1 posted from
 * another thread, the rest from the loop as each part comes back. */
static void run(rig *r, uint64_t timeout_ns)
{
    uint32_t lens[S];
    for (unsigned k = 0; k < S; k++)
        lens[k] = L * LAYER;
    xfer_stream_desc d = {.id = r->id, .group = r->group, .nshards = S,
                          .lens = lens, .timeout_ns = timeout_ns,
                          .user_data = 77};
    ck_assert_int_eq(xfer_engine_stream_open(r->e, &d, on_done, r), 0);
    ck_assert_int_eq(add_layer(r, 0), 0);
    /* layer 1 in two parts: its block 0 posted from a thread, then the
     * rest from here (the loop's thread, before the loop runs) */
    poster p = {.r = r};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, post_layer, &p), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(p.rc, 0);
    r->added++; /* the posted part is number 2 once the loop runs it */
    r->next_layer = 2;
    xfer_range rg[S * (BLOCKS - 1)];
    unsigned n = 0;
    for (unsigned k = 0; k < S; k++)
        for (unsigned b = 1; b < BLOCKS; b++)
            rg[n++] = (xfer_range){.staging_off = staging_of(1, k, b),
                                   .pool = r->pool, .len = BLK,
                                   .resv_off = LAYER + b * BLK,
                                   .shard = (uint16_t)k};
    /* posted too, so it follows the thread's part in mailbox order */
    xfer_part_desc pd = {.id = r->id, .ranges = rg, .nranges = n,
                         .cb = on_part, .ud = r};
    ck_assert_int_eq(xfer_engine_post_stream_part(r->e, &pd), 0);
    r->added++;
    run_until(r, completed);
    ck_assert_uint_eq(r->completions, 1);
    ck_assert_uint_eq(r->res.id, r->id);
    ck_assert_uint_eq(r->res.user_data, 77);
    for (unsigned p2 = 1; p2 <= r->added - r->posted_refused; p2++)
        ck_assert_uint_eq(r->cbs[p2], 1);
    for (unsigned i = 0; i < r->refused && i < 8; i++)
        ck_assert_int_eq(r->refusals[i], r->res.status);
    /* after the completion: refused, no callback */
    ck_assert_int_ne(add_layer(r, L - 1), 0);
}

/* The layers' own numbering: parts 1 (layer 0), 2 and 3 (layer 1), then
 * one per layer from 2 on, so L + 1 parts in all. */
START_TEST(test_stream_api_layers_every_byte)
{
    rig r;
    rig_init(&r, 11, 1);
    r.kind = K_NONE;
    run(&r, 0);
    ck_assert_int_eq(r.res.status, 0);
    ck_assert_uint_eq(r.added, L + 1);
    for (unsigned p = 1; p <= r.added; p++)
        ck_assert_int_eq(r.part_status[p], 0);
    verify(&r);
    rig_end(&r);
}
END_TEST

static const uint8_t fault_ops[] = {XFER_OP_RESERVE, XFER_OP_WRITE,
                                    XFER_OP_COMMIT};
static const uint8_t fault_kinds[] = {XFER_FAULT_FAIL,
                                      XFER_FAULT_APPLIED_LOST,
                                      XFER_FAULT_DROP, XFER_FAULT_DELAY};

/* Every fault class on every op kind, and every stop between parts, on
 * shards and parts drawn from the seed. */
START_TEST(test_stream_api_every_fault_class)
{
    uint64_t x = seed_of("test_stream_api_every_fault_class") | 1;
    unsigned runs = 0, ok = 0, failed = 0;
    for (unsigned kind = K_FAULT; kind < K_COUNT; kind++) {
        unsigned nf = kind == K_FAULT ? sizeof fault_kinds * sizeof fault_ops
                                      : 2;
        for (unsigned f = 0; f < nf; f++) {
            rig r;
            rig_init(&r, 100 + runs, next(&x));
            r.kind = kind;
            r.stop_after = 1 + (unsigned)(next(&x) % 3);
            uint64_t timeout = 400000000ull; /* a DROP ends by it */
            if (kind == K_FAULT) {
                xfer_fault_rule rule = {
                    .kind = fault_kinds[f / sizeof fault_ops],
                    .op = fault_ops[f % sizeof fault_ops],
                    .shard = (int16_t)(next(&x) % S), .count = 1,
                    .delay_ns = 2000000, .error = XFER_ERR_IO};
                ck_assert_int_eq(xfer_loop_add_rule(r.loop, &rule), 0);
            }
            if (kind == K_DEADLINE)
                timeout = 100000000ull;
            printf("run %u: kind %u f %u stop_after %u\n", runs, kind, f, r.stop_after);
            run(&r, timeout);
            int st = r.res.status;
            if (kind == K_FAULT &&
                fault_kinds[f / sizeof fault_ops] == XFER_FAULT_DELAY) {
                ck_assert_int_eq(st, 0);
            } else if (kind == K_FAULT) {
                ck_assert_int_ne(st, 0);
            } else {
                int want[] = {[K_CANCEL] = XFER_ERR_CANCELLED,
                              [K_DEADLINE] = XFER_ERR_TIMEOUT,
                              [K_SHUTDOWN] = XFER_ERR_SHUTDOWN,
                              [K_SHARD_DOWN] = XFER_ERR_TIMEOUT};
                if (kind == K_SHARD_DOWN)
                    ck_assert(st == XFER_ERR_TIMEOUT ||
                              st == XFER_ERR_CONN_LOST);
                else
                    ck_assert_int_eq(st, want[kind]);
            }
            if (st == 0) {
                verify(&r);
                ok++;
            } else {
                failed++;
                /* a failed part said so; one that finished first may not */
                for (unsigned p = 1; p <= r.added; p++)
                    ck_assert(r.part_status[p] == 0 ||
                              r.part_status[p] == st ||
                              r.part_status[p] == XFER_ERR_IO ||
                              r.part_status[p] == XFER_ERR_ABORTED ||
                              r.part_status[p] == XFER_ERR_CONN_LOST);
            }
            rig_end(&r);
            runs++;
        }
    }
    /* the classes reached both ends */
    ck_assert_uint_gt(ok, 0);
    ck_assert_uint_gt(failed, 0);
}
END_TEST

/* The mailbox calls' own refusals (stream.h: "Errors (then no
 * callback)"): a malformed open, part, seal or seal_crc is refused at the
 * call, synchronously, and never calls back; a well-formed open the loop
 * refuses (no such group) calls back once, from the loop, phase SUBMIT.
 * (Issue 30: a mutant that let an open of 0 or XFER_MAX_SHARDS + 1
 * shards into the mailbox was seen by no test.) */
typedef struct posted {
    unsigned done;
    xfer_result res;
} posted;

static void on_posted(void *ud, const xfer_result *res)
{
    posted *p = ud;
    p->done++;
    p->res = *res;
}

static void on_posted_seal(void *ud, uint64_t id, int status)
{
    (void)id;
    (void)status;
    ((posted *)ud)->done++;
}

START_TEST(test_stream_api_posted_refusals)
{
    struct event_base *base = event_base_new();
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = base;
    xfer_engine *e = NULL;
    ck_assert_int_eq(xfer_engine_new(&ec, &e), 0);
    posted p = {0};
    uint32_t lens[XFER_MAX_SHARDS + 1];
    for (unsigned k = 0; k <= XFER_MAX_SHARDS; k++)
        lens[k] = 64;
    xfer_stream_desc d = {.id = 9, .group = 77, .nshards = 2, .lens = lens};
    const uint16_t bad_counts[] = {0, XFER_MAX_SHARDS + 1};
    for (unsigned i = 0; i < 2; i++) {
        d.nshards = bad_counts[i];
        ck_assert_int_eq(xfer_engine_post_stream_open(e, &d, on_posted, &p),
                         XFER_ERR_INVALID_ARG);
    }
    d.nshards = 2;
    d.lens = NULL;
    ck_assert_int_eq(xfer_engine_post_stream_open(e, &d, on_posted, &p),
                     XFER_ERR_INVALID_ARG);
    d.lens = lens;
    d.id = 0;
    ck_assert_int_eq(xfer_engine_post_stream_open(e, &d, on_posted, &p),
                     XFER_ERR_INVALID_ARG);
    d.id = 9;
    ck_assert_int_eq(xfer_engine_post_stream_open(e, &d, NULL, &p),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_engine_post_stream_open(e, NULL, on_posted, &p),
                     XFER_ERR_INVALID_ARG);
    xfer_range rg = {.staging_off = 0, .pool = 0, .len = 64, .shard = 0};
    xfer_part_desc pd = {.id = 9, .ranges = &rg, .nranges = 0};
    ck_assert_int_eq(xfer_engine_post_stream_part(e, &pd),
                     XFER_ERR_INVALID_ARG);
    pd.nranges = XFER_STREAM_MAX_RANGES + 1;
    ck_assert_int_eq(xfer_engine_post_stream_part(e, &pd),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_engine_post_stream_seal(e, 0, on_posted_seal, &p),
                     XFER_ERR_INVALID_ARG);
    uint32_t crcs[XFER_MAX_SHARDS + 1] = {0};
    ck_assert_int_eq(xfer_engine_post_stream_seal_crc(e, 9, crcs, 0,
                                                      on_posted_seal, &p),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_engine_post_stream_seal_crc(
                         e, 9, crcs, XFER_MAX_SHARDS + 1, on_posted_seal, &p),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_engine_post_stream_seal_crc(e, 9, NULL, 2,
                                                      on_posted_seal, &p),
                     XFER_ERR_INVALID_ARG);
    for (int i = 0; i < 20; i++)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    ck_assert_uint_eq(p.done, 0); /* none of them called back */
    /* well formed: the loop refuses it (group 77 does not exist), once */
    ck_assert_int_eq(xfer_engine_post_stream_open(e, &d, on_posted, &p), 0);
    for (int i = 0; i < 200 && p.done == 0; i++)
        event_base_loop(base, EVLOOP_ONCE);
    ck_assert_uint_eq(p.done, 1);
    ck_assert_int_ne(p.res.status, 0);
    ck_assert_uint_eq(p.res.id, 9);
    ck_assert_int_eq(p.res.phase, XFER_PHASE_SUBMIT);
    for (int i = 0; i < 20; i++)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    ck_assert_uint_eq(p.done, 1);
    xfer_engine_del(e);
    event_base_free(base);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("stream_api");
    TCase *tc = tcase_create("loop");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_stream_api_layers_every_byte);
    tcase_add_test(tc, test_stream_api_every_fault_class);
    tcase_add_test(tc, test_stream_api_posted_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
