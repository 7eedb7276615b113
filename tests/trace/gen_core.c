/*
 * tests/trace/gen_core.c - writes golden-trace input: a seeded scenario run
 * on the pure transfer core (no libevent, no clock), so the trace is the
 * same bit for bit on every machine.
 *
 *   gen_core [--seed N] [--format binary|jsonl] [--max-bytes N]
 *            [--keep N] OUT
 *
 * The scenario drives ten-odd transfers over 3 shards through every kind
 * of end: success, a refused reserve, a failed write, a failed commit, a
 * user cancel, a deadline with an abort, a cancel that fails once and is
 * retried, a duplicate (late) reply, a late submit, a pre-emptive cancel,
 * tombstone expiry, and one transfer left stuck on purpose: shard 1 never
 * answers its write (deadline 60 s, trace ends at 3.5 s).
 *
 * With XFER_GEN_EAGER=1 in the environment the same script runs on the
 * eager path (eager_max_bytes 4096, every group allows it): one EAGER op
 * per shard, shard 2 refusing transfer 3's, and transfer 8 stuck on shard
 * 1's EAGER that never answers.
 */
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xfer/core.h"
#include "xfer/tracefile.h"

#define NSHARDS 3
#define T0 1000000000ull
#define MAXQ 4096

enum { F_NONE, F_FAIL, F_HOLE, F_DELAY, F_DUP };

typedef struct fault {
    uint64_t id;
    uint16_t shard;
    uint8_t op, kind;
    int32_t status;
    uint32_t count; /* 0: always */
} fault;

static const fault faults[] = {
    {3, 2, XFER_OP_RESERVE, F_FAIL, XFER_ERR_NO_SPACE, 0},
    {4, 1, XFER_OP_WRITE, F_FAIL, XFER_ERR_IO, 0},
    {5, 0, XFER_OP_COMMIT, F_FAIL, XFER_ERR_CONN_LOST, 0},
    {7, 0, XFER_OP_RESERVE, F_DELAY, 0, 0},
    {8, 1, XFER_OP_WRITE, F_HOLE, 0, 0},
    {9, 0, XFER_OP_WRITE, F_FAIL, XFER_ERR_REMOTE, 0},
    {9, 1, XFER_OP_CANCEL, F_FAIL, XFER_ERR_IO, 1},
    {10, 2, XFER_OP_RESERVE, F_DUP, 0, 0},
    /* the eager path (XFER_GEN_EAGER=1) */
    {3, 2, XFER_OP_EAGER, F_FAIL, XFER_ERR_NO_SPACE, 0},
    {5, 0, XFER_OP_EAGER, F_FAIL, XFER_ERR_CONN_LOST, 0},
    {8, 1, XFER_OP_EAGER, F_HOLE, 0, 0},
};
static bool eager; /* XFER_GEN_EAGER=1 */
static uint32_t fired[sizeof faults / sizeof faults[0]];

typedef struct msg {
    uint64_t at, seq;
    xfer_shard_result r;
    int live;
} msg;

typedef struct sim {
    xfer_core *core;
    msg q[MAXQ];
    size_t nq;
    uint64_t seq, rng, now;
} sim;

static uint64_t rnd(sim *s)
{
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return s->rng * 0x2545f4914f6cdd1dull;
}

static const fault *match(uint64_t id, uint16_t shard, uint8_t op)
{
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
        const fault *f = &faults[i];
        if (f->id == id && f->shard == shard && f->op == op &&
            (f->count == 0 || fired[i] < f->count)) {
            fired[i]++;
            return f;
        }
    }
    return NULL;
}

static void enqueue(sim *s, uint64_t at, const xfer_shard_result *r)
{
    if (s->nq == MAXQ) {
        fprintf(stderr, "gen_core: queue full\n");
        exit(1);
    }
    s->q[s->nq++] = (msg){at, s->seq++, *r, 1};
}

static void start_op(sim *s, const xfer_action *a)
{
    uint8_t op = (uint8_t)xfer_action_op(a->kind);
    xfer_shard_result r = {.id = a->id, .attempt = a->attempt,
                           .shard = a->shard, .op = op};
    if (a->kind == XFER_ACT_RESERVE || a->kind == XFER_ACT_EAGER) {
        r.resv_id = (a->id << 8) | (a->shard + 1u);
        r.remote_addr = (uint64_t)a->shard << 20 | a->id << 12;
    }
    uint64_t lat = 50000 + rnd(s) % 100000;
    if (a->kind == XFER_ACT_WRITE)
        lat += 100000 + rnd(s) % 300000;
    const fault *f = match(a->id, a->shard, op);
    if (f && f->kind == F_HOLE)
        return;
    if (f && f->kind == F_FAIL)
        r.status = f->status;
    if (f && f->kind == F_DELAY)
        lat = 10000000;
    enqueue(s, s->now + lat, &r);
    if (f && f->kind == F_DUP)
        enqueue(s, s->now + lat + 5000000, &r);
}

/* The transport answers an abort with ABORTED in place of the result,
 * unless the op fell into a hole (then nothing answers at all). */
static void abort_op(sim *s, const xfer_action *a)
{
    for (size_t i = 0; i < s->nq; i++) {
        xfer_shard_result *r = &s->q[i].r;
        if (s->q[i].live && r->id == a->id && r->shard == a->shard &&
            r->op == a->op && r->attempt == a->attempt) {
            s->q[i].live = 0;
            xfer_shard_result ab = *r;
            ab.status = XFER_ERR_ABORTED;
            enqueue(s, s->now + 10000, &ab);
            return;
        }
    }
}

static void drain(sim *s)
{
    size_t n;
    const xfer_action *acts = xfer_core_actions(s->core, &n);
    xfer_action copy[256];
    if (n > 256)
        n = 256;
    memcpy(copy, acts, n * sizeof *copy);
    xfer_core_actions_clear(s->core);
    for (size_t i = 0; i < n; i++) {
        if (copy[i].kind <= XFER_ACT_CANCEL || copy[i].kind == XFER_ACT_EAGER)
            start_op(s, &copy[i]);
        else if (copy[i].kind == XFER_ACT_ABORT)
            abort_op(s, &copy[i]);
    }
}

static void submit(sim *s, uint64_t id, uint64_t deadline)
{
    xfer_slice sl[NSHARDS];
    for (unsigned k = 0; k < NSHARDS; k++)
        sl[k] = (xfer_slice){.off = (id * NSHARDS + k) * 4096, .len = 4096};
    xfer_submit_args a = {.id = id, .group = 1, .nshards = NSHARDS,
                          .pool = 2, .slices = sl, .user_data = id * 100,
                          .deadline_ns = deadline, .eager_ok = eager};
    (void)xfer_core_submit(s->core, s->now, &a);
    drain(s);
}

/* Scripted inputs: (time offset, what, id). */
typedef struct script {
    uint64_t at;
    char what; /* 's' submit, 'c' cancel, 'S' submit with short deadline,
                  'L' submit with long deadline */
    uint64_t id;
} script;

static const script steps[] = {
    {0, 's', 1},         {200000, 's', 2},   {400000, 's', 3},
    {600000, 's', 4},    {800000, 's', 5},   {1000000, 's', 6},
    {1300000, 'c', 6},   {1400000, 'S', 7},  {1600000, 'L', 8},
    {1800000, 's', 9},   {2000000, 's', 10}, {50000000, 's', 1},
    {60000000, 'c', 99}, {70000000, 's', 11},
};

static void run_script(sim *s, size_t i)
{
    const script *st = &steps[i];
    if (st->what == 'c') {
        (void)xfer_core_cancel(s->core, s->now, st->id);
        drain(s);
    } else {
        uint64_t dl = st->what == 'S'   ? s->now + 2000000
                      : st->what == 'L' ? s->now + 60000000000ull
                                        : 0;
        submit(s, st->id, dl);
    }
}

static size_t next_msg(const sim *s)
{
    size_t best = s->nq;
    for (size_t i = 0; i < s->nq; i++)
        if (s->q[i].live &&
            (best == s->nq || s->q[i].at < s->q[best].at ||
             (s->q[i].at == s->q[best].at && s->q[i].seq < s->q[best].seq)))
            best = i;
    return best;
}

static void run(sim *s, uint64_t end)
{
    size_t si = 0, nsteps = sizeof steps / sizeof steps[0];
    for (;;) {
        size_t m = next_msg(s);
        uint64_t tm = m < s->nq ? s->q[m].at : UINT64_MAX;
        uint64_t ts = si < nsteps ? T0 + steps[si].at : UINT64_MAX;
        uint64_t tt = xfer_core_next_deadline(s->core);
        uint64_t t = tm < ts ? tm : ts;
        t = tt < t ? tt : t;
        if (t > end)
            break;
        s->now = t;
        if (t == ts) {
            run_script(s, si++);
        } else if (t == tm) {
            s->q[m].live = 0;
            (void)xfer_core_on_result(s->core, s->now, &s->q[m].r);
            drain(s);
        } else {
            xfer_core_on_timer(s->core, s->now);
            drain(s);
        }
    }
}

int main(int argc, char **argv)
{
    uint64_t seed = 42;
    xfer_tracefile_opts o;
    xfer_tracefile_opts_default(&o);
    o.created_ns = 1700000000000000000ull;
    o.label = "gen_core";
    int i = 1;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (strcmp(argv[i], "--seed") == 0)
            seed = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--max-bytes") == 0)
            o.max_bytes = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--keep") == 0)
            o.keep = (uint32_t)strtoul(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--format") == 0)
            o.format = strcmp(argv[i + 1], "jsonl") == 0
                           ? XFER_TRACEFILE_JSONL
                           : XFER_TRACEFILE_BINARY;
    }
    if (i != argc - 1) {
        fprintf(stderr, "usage: gen_core [--seed N] [--format F] OUT\n");
        return 2;
    }
    fprintf(stderr, "gen_core: seed %" PRIu64 "\n", seed);
    xfer_tracefile *tf;
    if (xfer_tracefile_open(argv[i], &o, &tf))
        return 1;
    static sim s;
    s.rng = seed ? seed : 1;
    xfer_core_config cfg;
    xfer_core_config_default(&cfg);
    cfg.max_transfers = 64;
    cfg.tombstone_ttl_ns = 2000000000ull;
    cfg.consumer_lease_ns = 1000000000ull;
    cfg.net_margin_ns = 1000000000ull;
    cfg.default_deadline_ns = 1000000000ull;
    cfg.cancel_op_timeout_ns = 100000000ull;
    cfg.cancel_backoff_ns = 10000000ull;
    cfg.cancel_max_attempts = 3;
    const char *ge = getenv("XFER_GEN_EAGER");
    eager = ge && strcmp(ge, "1") == 0;
    cfg.eager_max_bytes = eager ? 4096 : 0;
    cfg.trace = xfer_tracefile_sink(tf);
    if (xfer_core_new(&cfg, &s.core))
        return 1;
    run(&s, T0 + 3500000000ull);
    xfer_core_del(s.core);
    return xfer_tracefile_close(tf) ? 1 : 0;
}
