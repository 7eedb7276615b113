/*
 * tests/consumer/roles.h - the producer and the consumer of a deployment
 * as processes of their own (forked from the test, which itself runs no
 * event loop), each writing one line per outcome to a pipe the test
 * reads, so a test can kill any of them with kill -9 and check what the
 * survivors saw:
 *
 *   producer  "P id status phase may_hold" per completion, "END" when its
 *             n transfers are done (then it shuts down and exits 0);
 *   consumer  "C id A verified" or "C id U reason" per outcome; it reads
 *             every available transfer in place from the shards' shared
 *             memory (xferd --shm NAME), releases it, and runs until
 *             SIGTERM.
 */
#ifndef XFER_TEST_ROLES_H
#define XFER_TEST_ROLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct role {
    pid_t pid;
    int fd;       /* the pipe's read end */
    char *buf;
    size_t n, cap;
    bool eof;
} role;

/* What both sides said of one id. */
typedef struct role_out {
    uint8_t pn, cn;      /* outcomes reported by each side */
    int32_t pstatus, creason;
    uint8_t pphase, hold, cavail, cver;
} role_out;

uint8_t role_pattern(uint64_t seed, uint64_t id, uint16_t k, uint32_t i);
int role_producer(role *r, const uint16_t *ports, uint16_t S, uint64_t n,
                  uint32_t inflight, uint64_t seed);
/* The same producer, each id a stream (xfer/stream.h): four layers, each
 * a part gathering four blocks per shard, two added at the open and two,
 * out of order, when the first part is back, then sealed.  The consumer
 * checks the bytes the same way. */
int role_producer_stream(role *r, const uint16_t *ports, uint16_t S,
                         uint64_t n, uint32_t inflight, uint64_t seed);
/* The same streams, each with its first parts late_ms after its open (a
 * producer that reserves before its output exists: the lease refresh,
 * docs/streaming.md); the deadline grows by late_ms. */
int role_producer_stream_late(role *r, const uint16_t *ports, uint16_t S,
                              uint64_t n, uint32_t inflight, uint64_t seed,
                              uint64_t late_ms);
int role_consumer(role *r, const uint16_t *ports, uint16_t S,
                  const char *shm, uint64_t seed);
/* Read what the role wrote so far (waiting at most ms for more). */
void role_poll(role *r, int ms);
/* Lines so far that start with `prefix`. */
size_t role_count(const role *r, const char *prefix);
/* Signal, reap, and read the rest. */
int role_kill(role *r, int sig);
/* Both sides' lines, per id 1..n (out: n + 1 entries). */
void role_parse(const role *p, const role *c, role_out *out, uint64_t n);
void role_free(role *r);

#endif /* XFER_TEST_ROLES_H */
