/*
 * tools/bench/pump.h - xfer itself under the TCP bench: one engine on its
 * own event base, a tcp group over every xferd of a demo_tcp consumer
 * group and a 1-shard group over its first, and a closed loop of transfers
 * (a finished transfer starts the next one in its slot).
 *
 * One thread: everything runs on the pump's event base.
 */
#ifndef XFER_BENCH_PUMP_H
#define XFER_BENCH_PUMP_H

#include <stdint.h>

#include "../demo_tcp.h"
#include "figure.h"

#define BENCH_PUMP_MAX_INFLIGHT 256

typedef struct bench_pump bench_pump;

typedef struct bench_pump_params {
    bool one_shard;     /* the 1-shard group, else every shard */
    uint32_t slice;     /* bytes per shard per transfer */
    uint32_t inflight;  /* 1..BENCH_PUMP_MAX_INFLIGHT */
    uint64_t ns;        /* stop submitting after this long */
    uint64_t max_units; /* ... or after this many (0: no limit) */
    bool via_dir;       /* the group found through etcd (every shard;
                           bench_pump_add_dir), else by static address */
} bench_pump_params;

/* What one run did (for the smoke checks). */
typedef struct bench_pump_counts {
    uint64_t submitted, done, failed, refused; /* refused: submit failed */
    uint64_t ops_sent;  /* tcp transport frames sent, both groups */
} bench_pump_counts;

/*
 * Connect to the first nshards children of g (borrowed; must outlive the
 * pump), with a 64 MiB staging pool: a run needs inflight x shards x slice
 * bytes of it.  *out untouched on failure.  Returns 0, or -1 with one line
 * in err (cap bytes).
 */
int bench_pump_new(const demo_tcp *g, uint16_t nshards, bench_pump **out,
                   char *err, size_t cap);
/*
 * A third group on the pump's engine: every shard again, found through
 * etcd at `endpoints` (borrowed for the call) as group "0", which the
 * children of g registered in (demo_tcp_config.etcd); waits (at most
 * 10 s) until each is connected.  The data path is the same as the
 * static group's: only how the addresses were learnt differs.  Returns
 * 0, or -1 with one line in err.
 */
int bench_pump_add_dir(bench_pump *u, const char *endpoints, char *err,
                       size_t cap);

/* The engine's eager_max_bytes for pumps made after it is set (0, the
 * default: three rounds; `xfer-bench tcp --eager` sets 4096). */
extern uint32_t bench_pump_eager_max_bytes;

/*
 * One closed loop; fill *f (CPU of this process and every xferd; payload
 * GB/s counts slice bytes on every shard of every transfer that succeeded)
 * and *c.  Returns 0, or -1 with one line in err for bad parameters.
 * Failed transfers are counted, not fatal.
 */
int bench_pump_run(bench_pump *u, const bench_pump_params *p, bench_fig *f,
                   bench_pump_counts *c, char *err, size_t cap);

/* Shut the engine down (every transfer reported), free.  NULL ok. */
void bench_pump_del(bench_pump *u);

#endif /* XFER_BENCH_PUMP_H */
