/*
 * fsm/core_priv.h - what the two halves of the transfer core share:
 * fsm/core.c (the container of transfer machines) and fsm/core_save.c (its
 * save, load and canonical form, fsm/save.h).  The core struct.
 *
 * Only those two files include it; the model checker and the tests reach
 * save and load through save.h, and everyone else through xfer/core.h.
 * Nothing here is exported from the library (hidden visibility).
 */
#ifndef XFER_FSM_CORE_PRIV_H
#define XFER_FSM_CORE_PRIV_H

#include <stdint.h>

#include "heap.h"
#include "idmap.h"
#include "tomb.h"
#include "transfer.h"
#include "xfer/core.h"

struct xfer_core {
    xfer_core_config cfg;
    xfer_transfer **recs; /* slot -> record, NULL when free */
    uint32_t *free_slots; /* stack of free slots */
    uint32_t nfree;
    /* Records of finished transfers, kept for the next submits so that the
     * hot path allocates nothing.  At most max_transfers are kept (a
     * finished record beyond that, possible after a load, is freed).  Not
     * state: save and load ignore them; freed at del. */
    xfer_transfer **spare;
    uint32_t nspare;
    xfer_idmap live;      /* id -> slot */
    xfer_heap timers;     /* slot -> timer_ns */
    xfer_tomb tombs;
    xfer_transfer_ctx ctx; /* action buffer, trace, counters */
    uint64_t last_now;
    uint32_t next_attempt;
    uint8_t shutting_down, shutdown_done;
    uint32_t streams;     /* live streams: steps then need room for their
                             RELEASE_PART actions too */
    xfer_core_stats st;   /* counters other than those in ctx */
};

#endif /* XFER_FSM_CORE_PRIV_H */
