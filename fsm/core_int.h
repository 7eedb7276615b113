/*
 * fsm/core_int.h - an internal entry point of the transfer core for the
 * model checker: the figures it reads after every step.  Save, load and
 * the canonical form are in fsm/save.h.
 */
#ifndef XFER_FSM_CORE_INT_H
#define XFER_FSM_CORE_INT_H

#include <stdint.h>

#include "xfer/core.h"

/* The figures the model checker reads after every step, without copying
 * every counter as xfer_core_stats_get() does. */
typedef struct xfer_core_health {
    uint64_t illegal;
    uint32_t live, tombstones;
} xfer_core_health;

void xfer_core_health_get(const xfer_core *core, xfer_core_health *h);

/* What a submit of `id` that finds no room would be refused with, as the
 * core would refuse it: XFER_ERR_EXISTS (live), XFER_ERR_CANCELLED (a
 * cancel tombstoned it before any submit), XFER_ERR_REUSED (a transfer of
 * it ended recently), else XFER_ERR_BUSY.  For the engine
 * (transport/engine.c), whose callback slots can run out first. */
int xfer_core_submit_refusal(const xfer_core *core, uint64_t id);

/* The user_data of live transfer id into *out (true), or false when the
 * id is not live.  For the engine, whose streams' parts find their
 * transfer's callback slot by it. */
bool xfer_core_user_data(const xfer_core *core, uint64_t id, uint64_t *out);

/* The attempt of live transfer id, and the reservation id shard `shard`'s
 * reserve answered in it, into *attempt and *resv_id (true); false when
 * the id is not live, the shard is not one of its group's, or its reserve
 * has not answered ok.  For the model checker's engine model, which
 * refreshes a stream's leases with them as transport/engine.c does with
 * the RESERVE results it sees. */
bool xfer_core_shard_resv(const xfer_core *core, uint64_t id, uint16_t shard,
                          uint32_t *attempt, uint64_t *resv_id);

#endif /* XFER_FSM_CORE_INT_H */
