/*
 * tests/enginetest.h - a small harness for tests that run the engine with
 * the loop transport: an environment with S in-process shards, a consumer
 * that takes, checks and releases ready data, completion bookkeeping, and a
 * bounded loop runner.
 */
#ifndef XFER_ENGINETEST_H
#define XFER_ENGINETEST_H

#include <stdbool.h>
#include <stdint.h>

#include "xfer/loop.h"
#include "xfer/readiness.h"
#include "xfer/xfer.h"

#define ET_S 4
#define ET_BLK 256
#define ET_SLOTS 64
#define ET_MAXID 1024
#define ET_MS 1000000ull

typedef struct et_env {
    xfer_engine *e;
    xfer_loop *l;
    uint32_t group, pool;
    uint8_t staging[ET_SLOTS * ET_S * ET_BLK];
    int ncb[ET_MAXID];
    xfer_result res[ET_MAXID];
    int consumer_takes; /* take + check + release ready data */
    uint64_t bad_bytes, taken;
    int shutdown_calls;
    uint32_t pools_at_shutdown;
    int completions_at_shutdown;
    int total_cb;
    xfer_clock_fn clock;
    void *clock_ud;
    xfer_trace_sink trace;
} et_env;

typedef struct et_opts {
    uint64_t write_ns;
    uint64_t lease_ns;
    uint64_t seed;
    const xfer_fault_rule *rules;
    size_t nrules;
    xfer_allocator core_alloc;
    xfer_allocator loop_alloc; /* the loop's (and its shards') allocator */
    xfer_loop_event_cb on_event; /* NULL: the take-check-release consumer */
    uint32_t max_transfers; /* 0: 256; ET_DEFAULT: the engine's default */
    uint32_t mailbox_cap;   /* 0: the engine's default */
    uint32_t eager_max_bytes; /* the core's eager path; 0: off */
} et_opts;

/* et_opts.max_transfers: leave the engine's limits at their defaults. */
#define ET_DEFAULT UINT32_MAX

/* Build the environment; fails the test on error. */
void et_init(et_env *v, const et_opts *o);
void et_free(et_env *v);
/* Submit id using staging slot (id % ET_SLOTS); returns the engine's rc. */
int et_submit(et_env *v, uint64_t id, uint64_t timeout_ns);
/* The same with the caller's CRCs (ET_S of them; NULL: et_submit). */
int et_submit_crc(et_env *v, uint64_t id, uint64_t timeout_ns,
                  const uint32_t *crcs);
/* Run the loop until pred(v) or about max_ms of wall time pass (a bound,
 * never an assertion).  Returns pred's final value. */
bool et_run(et_env *v, bool (*pred)(et_env *), int max_ms);
/* Run the loop for about ms. */
void et_run_for(et_env *v, int ms);
/* Sum of bytes in use on every shard. */
uint64_t et_shard_bytes(et_env *v);
uint8_t et_pattern(uint64_t id, uint16_t shard, uint32_t i);
bool et_all_done(et_env *v);

#endif /* XFER_ENGINETEST_H */
