/*
 * transport/backoff.h - reconnect delays of the clients (the producer's
 * TCP and RDMA control connections, the consumer's links): exponential,
 * capped, with jitter, and reset only by a connection that stayed up.
 *
 * What must stay true:
 *  - every delay lies in [cur/2, cur], where cur doubles from `min` per
 *    failure up to `max` ("equal jitter"): many clients that lost the same
 *    shard at once do not redial it in step, and none waits longer than
 *    `max`;
 *  - a connection that comes up and breaks before it was up for `max`
 *    (a shard that closes right after HELLO) does not reset the delay:
 *    a flapping peer is redialled at most about once per `max`, never in
 *    a tight loop; one that stayed up longer is redialled at once;
 *  - no clock and no OS randomness inside: the caller passes the time,
 *    and the jitter comes from a generator seeded by the caller (the
 *    session id, itself from the OS CSPRNG).
 */
#ifndef XFER_TRANSPORT_BACKOFF_H
#define XFER_TRANSPORT_BACKOFF_H

#include <stdbool.h>
#include <stdint.h>

typedef struct xfer_backoff {
    uint64_t cur_ns;   /* 0: the next failure waits `min` (jittered) */
    uint64_t up_at_ns; /* when the connection came up; 0: not up */
    uint64_t rng;      /* xorshift64 state, never 0 */
} xfer_backoff;

/* Seed from `seed` bytes (any length; all zero is fine). */
void xfer_backoff_init(xfer_backoff *b, const uint8_t *seed, size_t n);

/* The connection came up at `now_ns`. */
void xfer_backoff_up(xfer_backoff *b, uint64_t now_ns);

/* The connection was lost at `now_ns` (or a connect failed: then it was
 * not up).  Returns 0 when the peer is to be redialled at once (it had
 * stayed up for at least `max_ns`), else the delay before the redial. */
uint64_t xfer_backoff_lost(xfer_backoff *b, uint64_t now_ns,
                           uint64_t min_ns, uint64_t max_ns);

#endif
