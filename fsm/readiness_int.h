/*
 * fsm/readiness_int.h - an internal entry point of the readiness tracker
 * for the model checker (tools/check): the figures it reads after every
 * step.  Save, load and the canonical form are in fsm/save.h.
 */
#ifndef XFER_FSM_READINESS_INT_H
#define XFER_FSM_READINESS_INT_H

#include <stdint.h>

#include "xfer/readiness.h"

/* The figures the model checker reads after every step, without copying
 * every counter as xfer_readiness_stats_get() does. */
typedef struct xfer_readiness_health {
    uint64_t illegal;
    uint32_t live;
} xfer_readiness_health;

void xfer_readiness_health_get(const xfer_readiness *r,
                               xfer_readiness_health *h);

#endif /* XFER_FSM_READINESS_INT_H */
