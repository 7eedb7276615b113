/*
 * fsm/core_int.h - internal entry points of the transfer core for the model
 * checker: a canonical save of the whole dynamic state and its load.
 */
#ifndef XFER_FSM_CORE_INT_H
#define XFER_FSM_CORE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "xfer/core.h"

/*
 * Write a canonical byte encoding of the core's dynamic state into buf (at
 * most len bytes); return the bytes the whole encoding needs (like
 * snprintf).  Live records go in id order with their slot numbers left out,
 * timers as their rank among equal deadlines, tombstones oldest first; the
 * counters and cells_hit are not part of it.  The action list must be empty
 * (drain it first); if not, returns 0.
 */
size_t xfer_core_save(const xfer_core *core, uint8_t *buf, size_t len);

/*
 * Replace the dynamic state of `core` (created with the same config) by a
 * saved one.  Afterwards it answers every input as the saved core would.
 * Errors: XFER_ERR_FORMAT (bad bytes), XFER_ERR_NOMEM (then the core is
 * empty but valid).
 */
int xfer_core_load(xfer_core *core, const uint8_t *buf, size_t len);

/* The figures the model checker reads after every step, without copying
 * every counter as xfer_core_stats_get() does. */
typedef struct xfer_core_health {
    uint64_t illegal;
    uint32_t live, tombstones;
} xfer_core_health;

void xfer_core_health_get(const xfer_core *core, xfer_core_health *h);

#endif /* XFER_FSM_CORE_INT_H */
