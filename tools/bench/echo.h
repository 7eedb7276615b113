/*
 * tools/bench/echo.h - the machine's floor for the TCP bench: a minimal C
 * fan-out echo over the same kind of sockets xfer uses (loopback TCP,
 * TCP_NODELAY, one connection per peer).
 *
 * npeers echo processes each read whatever arrived and write it straight
 * back (blocking read, blocking write).  The client keeps `inflight` units
 * going in a closed loop; a unit is `rounds` sequential fan-outs, each one
 * BENCH_ECHO_FRAME-byte frame to every peer and every peer's echo back
 * before the next round.  The client is the batched design at its
 * simplest: one epoll_wait per loop turn, one read per readable
 * connection, one write per connection per turn carrying every frame that
 * turn produced.  So a 3-round unit is what a transfer (reserve, write,
 * commit on every shard) costs when nothing but the sockets is paid for.
 *
 * One thread.  The echo processes die with the bench.
 */
#ifndef XFER_BENCH_ECHO_H
#define XFER_BENCH_ECHO_H

#include <stdint.h>
#include <sys/types.h>

#include "figure.h"

/* The size of one echo frame: that of a COMMIT frame of the wire
 * protocol (16-byte header + 24-byte body). */
#define BENCH_ECHO_FRAME 40u
#define BENCH_ECHO_MAX_PEERS 16
#define BENCH_ECHO_MAX_INFLIGHT 256

typedef struct bench_echo bench_echo;

typedef struct bench_echo_params {
    uint32_t rounds;    /* fan-outs per unit, >= 1 */
    uint32_t inflight;  /* units in flight, 1..BENCH_ECHO_MAX_INFLIGHT */
    uint64_t ns;        /* stop starting units after this long */
    uint64_t max_units; /* ... or after this many (0: no limit) */
} bench_echo_params;

/* What the client did in one run (for the smoke checks and the profile). */
typedef struct bench_echo_counts {
    uint64_t started, done;
    uint64_t frames_sent, frames_received;
    uint64_t turns, reads, writes; /* epoll_wait, read, write calls */
} bench_echo_counts;

/*
 * Fork npeers (1..BENCH_ECHO_MAX_PEERS) echo processes and connect to each.
 * *out untouched on failure.  Returns 0, or -1 with one line in err (cap
 * bytes).
 */
int bench_echo_start(uint16_t npeers, bench_echo **out, char *err,
                     size_t cap);

/*
 * The same client, speaking the wire protocol to real shard servers
 * instead: connect to addrs[k] ("a.b.c.d:port", borrowed until return;
 * pids[k] its process, copied) for k < npeers and say HELLO for shard k of
 * group 0.  Each unit is then one 0-byte transfer: RESERVE, WRITE, COMMIT
 * on every shard, one round each (rounds must be 3), with ids from 2^40 up
 * so that they never meet the engine's.  This is a producer with nothing
 * but the sockets (no engine, no state machine, no libevent), so against
 * the echo it shows what the shard servers add, and against xfer what the
 * producer adds.  The servers are not stopped by bench_echo_stop.
 * Returns 0, or -1 with one line in err.
 */
int bench_echo_connect_wire(uint16_t npeers, const char *const *addrs,
                            const pid_t *pids, bench_echo **out, char *err,
                            size_t cap);

/* The peers' pids (for CPU samples); *n set to their count. */
const pid_t *bench_echo_pids(const bench_echo *e, int *n);

/*
 * Run one closed loop; fill *f (CPU of the client and every peer) and *c.
 * Returns 0, or -1 with one line in err when a peer broke, sent a frame
 * that matches no outstanding round (or, over the wire protocol, refused
 * an op), or went silent for 2 s.
 */
int bench_echo_run(bench_echo *e, const bench_echo_params *p, bench_fig *f,
                   bench_echo_counts *c, char *err, size_t cap);

/* Close every connection, kill the echo processes (if this module forked
 * them), free.  NULL ok. */
void bench_echo_stop(bench_echo *e);

#endif /* XFER_BENCH_ECHO_H */
