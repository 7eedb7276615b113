/*
 * tools/bench/pyref.h - the Python reference under the TCP bench: nshards
 * shard processes and one producer process of pyref.py (same folder),
 * driven over the producer's stdin and stdout (the protocol is in
 * pyref.py's docstring), their CPU read from /proc like xfer's.
 *
 * One thread.  Every process dies with the bench (PR_SET_PDEATHSIG; the
 * shards also exit when their stdin closes).
 */
#ifndef XFER_BENCH_PYREF_H
#define XFER_BENCH_PYREF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "figure.h"

#define BENCH_PYREF_MAX_SHARDS 16

typedef struct bench_pyref bench_pyref;

/*
 * Start the shards and the producer with `python` (a path or a name in
 * PATH) running `script` (both borrowed until return); stdlib forces
 * asyncio + json.  Waits until the producer is connected to every shard.
 * *out untouched on failure.  Returns 0, or -1 with one line in err (cap
 * bytes): python missing, the script failing, or a process silent for
 * 20 s.
 */
int bench_pyref_start(const char *python, const char *script,
                      uint16_t nshards, bool stdlib, bench_pyref **out,
                      char *err, size_t cap);

/* What the reference runs on, as the producer said: "uvloop + msgpack",
 * "asyncio + json", ... (borrowed: lives as long as r). */
const char *bench_pyref_kind(const bench_pyref *r);

/*
 * One closed loop of 0-byte transfers: inflight workers for ns (or
 * max_units transfers, 0: no limit).  Fills *f (CPU of the producer and
 * every shard process; latency percentiles as the producer measured them).
 * Returns 0, or -1 with one line in err when the producer did not answer.
 */
int bench_pyref_run(bench_pyref *r, uint32_t inflight, uint64_t ns,
                    uint64_t max_units, bench_fig *f, char *err, size_t cap);

/* Stop every process, free.  NULL ok. */
void bench_pyref_stop(bench_pyref *r);

#endif /* XFER_BENCH_PYREF_H */
