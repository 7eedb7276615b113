/*
 * tests/trace/gen_loop.c - golden-trace input from the real driver: the
 * engine on libevent with the loop transport (3 in-process shards), every
 * emitter writing into one trace file (core tag 0, shards tag 1).
 *
 *   gen_loop [--seed N] [--format binary|jsonl] OUT
 *
 * Time is a counting clock (each read advances it 1 us) shared by engine
 * and shards, and every message is due at once, so the run needs no wall
 * time and the order of records is the same on every run.  Scenario:
 * transfer 1 succeeds (the consumer takes and releases its data); 2 has a
 * reserve refused by shard 1; 3 has a commit applied on shard 2 whose reply
 * is lost; 4 has a failed write on shard 0; 5 is left stuck on purpose:
 * shard 1 never answers its write (XFER_FAULT_DROP, deadline 60 s); 6 is
 * cancelled by the user right after its submit.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "xfer/loop.h"
#include "xfer/tracefile.h"
#include "xfer/xfer.h"

#define NS 3
#define BLK 512

static uint64_t now_ns = 1000000000ull;
static uint64_t tick_clock(void *ud)
{
    (void)ud;
    return now_ns += 1000;
}

static int completions;
static xfer_loop *loop;
static xfer_engine *eng;

static void on_done(void *ud, const xfer_result *r)
{
    (void)ud;
    (void)r;
    completions++;
}

/* The consumer: take ready data and release it at once. */
static void on_event(void *ud, const xfer_shard_event *ev)
{
    (void)ud;
    if (ev->kind != XFER_SHARD_EV_READY)
        return;
    xfer_shard *s = xfer_loop_shard(loop, ev->shard);
    const uint8_t *data;
    uint32_t len;
    uint64_t t = tick_clock(NULL);
    if (xfer_shard_take(s, t, ev->id, ev->resv_id, &data, &len) == 0)
        (void)xfer_shard_release(s, t, ev->id, ev->resv_id);
}

static const xfer_fault_rule rules[] = {
    {.kind = XFER_FAULT_FAIL, .op = XFER_OP_RESERVE, .shard = 1, .id = 2,
     .error = XFER_ERR_NO_SPACE},
    {.kind = XFER_FAULT_APPLIED_LOST, .op = XFER_OP_COMMIT, .shard = 2,
     .id = 3},
    {.kind = XFER_FAULT_FAIL, .op = XFER_OP_WRITE, .shard = 0, .id = 4,
     .error = XFER_ERR_IO},
    {.kind = XFER_FAULT_DROP, .op = XFER_OP_WRITE, .shard = 1, .id = 5},
};

static int setup(xfer_tracefile *tf, uint64_t seed, uint32_t *group,
                 uint32_t *pool, struct event_base *base, void *mem)
{
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = base;
    ec.clock = tick_clock;
    ec.core.max_transfers = 64;
    ec.core.default_deadline_ns = 60000000000ull;
    ec.core.trace = xfer_tracefile_sink(tf);
    if (xfer_engine_new(&ec, &eng))
        return -1;
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = NS;
    lc.seed = seed;
    lc.clock = tick_clock;
    lc.on_event = on_event;
    lc.shard.pool_bytes = 1 << 20;
    lc.shard.trace = xfer_tracefile_sink_tagged(tf, 1);
    if (xfer_loop_new(base, &lc, &loop))
        return -1;
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (xfer_loop_add_rule(loop, &rules[i]))
            return -1;
    if (xfer_engine_add_group(eng, xfer_loop_transport(loop), group) ||
        xfer_engine_register_pool(eng, mem, 6 * NS * BLK, pool))
        return -1;
    return 0;
}

static int submit_all(uint32_t group, uint32_t pool)
{
    for (uint64_t id = 1; id <= 6; id++) {
        xfer_slice sl[NS];
        for (unsigned k = 0; k < NS; k++)
            sl[k] = (xfer_slice){((id - 1) * NS + k) * BLK, BLK};
        xfer_transfer_desc d = {.id = id, .group = group, .pool = pool,
                                .nslices = NS, .slices = sl,
                                .user_data = id};
        if (xfer_engine_submit(eng, &d, on_done, NULL))
            return -1;
        if (id == 6 && xfer_engine_cancel(eng, 6))
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t seed = 42;
    xfer_tracefile_opts o;
    xfer_tracefile_opts_default(&o);
    o.created_ns = 1700000000000000000ull;
    o.label = "gen_loop";
    int i = 1;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (strcmp(argv[i], "--seed") == 0)
            seed = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--format") == 0)
            o.format = strcmp(argv[i + 1], "jsonl") == 0
                           ? XFER_TRACEFILE_JSONL
                           : XFER_TRACEFILE_BINARY;
    }
    if (i != argc - 1) {
        fprintf(stderr, "usage: gen_loop [--seed N] [--format F] OUT\n");
        return 2;
    }
    fprintf(stderr, "gen_loop: seed %" PRIu64 "\n", seed);
    static uint8_t mem[6 * NS * BLK];
    xfer_tracefile *tf;
    struct event_base *base = event_base_new();
    uint32_t group, pool;
    if (!base || xfer_tracefile_open(argv[i], &o, &tf) ||
        setup(tf, seed, &group, &pool, base, mem) ||
        submit_all(group, pool))
        return 1;
    for (int spin = 0; spin < 100000; spin++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        if (completions == 5 && xfer_loop_outstanding(loop) == 1)
            break;
    }
    for (int spin = 0; spin < 100; spin++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    int rc = completions == 5 ? 0 : 1;
    if (rc)
        fprintf(stderr, "gen_loop: %d completions, expected 5\n",
                completions);
    /* Leave transfer 5 stuck: free without shutting down. */
    xfer_engine_del(eng);
    xfer_loop_del(loop);
    event_base_free(base);
    return xfer_tracefile_close(tf) || rc;
}
