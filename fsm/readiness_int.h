/*
 * fsm/readiness_int.h - internal entry points of the readiness tracker for
 * the model checker (tools/check) and the tests: a canonical encoding of a
 * tracker's dynamic state, and loading it back.
 *
 * The encoding holds everything that decides what the tracker does next:
 * the live records in id order (state, attempt, ready mask, reservation ids,
 * take results, deferred give-up reason, deadline), the armed deadlines in
 * the order they will fire (which keeps the rank among equal deadlines), the
 * tombstones oldest first (id, expiry, attempt, state) and the pending
 * actions.  It leaves out counters, stats, cells_hit, the trace sequence
 * number, slot numbers and the heap's insertion counter, so two trackers that
 * behave alike encode alike.  Like the shard's, it assumes time never runs
 * backwards across save and load (the tombstone table's clamp is rebuilt
 * from the newest tombstone).  All integers are little-endian.
 */
#ifndef XFER_FSM_READINESS_INT_H
#define XFER_FSM_READINESS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "xfer/readiness.h"

/*
 * Write the encoding of r into buf (at most len bytes; nothing is written
 * past len; buf may be NULL when len is 0).  Returns the bytes the whole
 * encoding needs, like snprintf.  Deterministic: the same dynamic state gives
 * the same bytes.  r is borrowed; its internal scratch array is used, so
 * two saves of one tracker must not run at the same time.
 */
size_t xfer_readiness_save(const xfer_readiness *r, uint8_t *buf, size_t len);

/*
 * Replace the dynamic state of r (created with the same config as the saved
 * tracker) with the one encoded in buf (borrowed); afterwards r answers
 * every call like the saved tracker did.  Counters and stats are kept.
 * Returns 0, XFER_ERR_INVALID_ARG (NULL argument) or XFER_ERR_FORMAT (bad
 * magic, other config, or an encoding that breaks an invariant).  On
 * XFER_ERR_FORMAT r is unchanged, except for a duplicate tombstone id, which
 * is found only while loading: then r is left empty (as if new).
 */
int xfer_readiness_load(xfer_readiness *r, const uint8_t *buf, size_t len);

/* The figures the model checker reads after every step, without copying
 * every counter as xfer_readiness_stats_get() does. */
typedef struct xfer_readiness_health {
    uint64_t illegal;
    uint32_t live;
} xfer_readiness_health;

void xfer_readiness_health_get(const xfer_readiness *r,
                               xfer_readiness_health *h);

#endif /* XFER_FSM_READINESS_INT_H */
