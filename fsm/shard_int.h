/*
 * fsm/shard_int.h - an internal entry point of the consumer shard for the
 * model checker (tools/check): the figures it reads after every step.
 * Save, load and the canonical form are in fsm/save.h.
 */
#ifndef XFER_FSM_SHARD_INT_H
#define XFER_FSM_SHARD_INT_H

#include <stdint.h>

#include "xfer/shard.h"

/* The figures the model checker reads after every step, without copying
 * every counter as xfer_shard_stats_get() does. */
typedef struct xfer_shard_health {
    uint64_t illegal, pool_bytes, bytes_in_use;
    uint32_t live;
} xfer_shard_health;

void xfer_shard_health_get(const xfer_shard *s, xfer_shard_health *h);

#endif /* XFER_FSM_SHARD_INT_H */
