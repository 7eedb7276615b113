/*
 * fsm/shard_int.h - internal entry points of the consumer shard for the
 * model checker (tools/check) and the tests: a canonical encoding of a
 * shard's dynamic state, and loading it back.
 *
 * The encoding holds everything that decides what the shard does next: the
 * live records in id order (state, attempt, reservation id, region, writes
 * in flight, creation time, lease deadline and its rank among equal
 * deadlines), the pool's free extents, the tombstones oldest first, the
 * pending shard events and the internal RNG state.  It leaves out counters,
 * stats, cells_hit, the trace sequence number, slot numbers, the heap's
 * insertion counter and the bytes in the pool (data, not machine state), so
 * two shards that behave alike encode alike.  It assumes time never runs
 * backwards across save and load (the tombstone table's clamp is rebuilt
 * from the newest tombstone).
 */
#ifndef XFER_FSM_SHARD_INT_H
#define XFER_FSM_SHARD_INT_H

#include <stddef.h>
#include <stdint.h>

#include "xfer/shard.h"

/*
 * Write the encoding of s into buf (at most len bytes; nothing is written
 * past len).  Returns the bytes the whole encoding needs, like snprintf.
 * Deterministic: the same dynamic state gives the same bytes.  Not
 * reentrant with xfer_shard_foreach (both use the shard's scratch array).
 */
size_t xfer_shard_save(const xfer_shard *s, uint8_t *buf, size_t len);

/*
 * Replace the dynamic state of s (created with the same config as the saved
 * shard) with the one encoded in buf; afterwards s answers every call like
 * the saved shard did.  Counters and stats are kept.  Pending shard events
 * are part of the state.  Returns 0, XFER_ERR_INVALID_ARG (NULL argument) or
 * XFER_ERR_FORMAT (bad magic, other config, or an encoding that breaks an
 * invariant).  On XFER_ERR_FORMAT s is unchanged, except for a duplicate
 * tombstone id, which is found only while loading: then s is left empty
 * (as if new).
 */
int xfer_shard_load(xfer_shard *s, const uint8_t *buf, size_t len);

/* The figures the model checker reads after every step, without copying
 * every counter as xfer_shard_stats_get() does. */
typedef struct xfer_shard_health {
    uint64_t illegal, pool_bytes, bytes_in_use;
    uint32_t live;
} xfer_shard_health;

void xfer_shard_health_get(const xfer_shard *s, xfer_shard_health *h);

#endif /* XFER_FSM_SHARD_INT_H */
