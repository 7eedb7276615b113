/*
 * fsm/readiness_priv.h - what the two halves of the readiness tracker
 * share: fsm/readiness.c (the machine) and fsm/readiness_save.c (its save
 * and load for the model checker).  The tracker struct, the live record,
 * the scratch entry used to sort and mark records, and the two small
 * helpers both call.
 *
 * Only those two files include it; the model checker and the tests reach
 * save and load through save.h, and everyone else through
 * xfer/readiness.h.  Nothing here is exported from the library (hidden
 * visibility).
 */
#ifndef XFER_FSM_READINESS_PRIV_H
#define XFER_FSM_READINESS_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "heap.h"
#include "idmap.h"
#include "tomb.h"
#include "xfer/readiness.h"

/* A live record (WAITING or TAKING). */
typedef struct xfer_readiness_rec {
    uint64_t id; /* 0: free slot */
    uint64_t deadline_ns;
    uint64_t ready;     /* shards that reported ready for `attempt` */
    uint64_t take_ok;   /* TAKING: takes that succeeded */
    uint64_t take_fail; /* TAKING: takes that failed */
    uint64_t unsure;    /* failed takes that may have been applied */
    uint32_t attempt;
    int32_t deferred; /* give-up reason seen in TAKING; 0: none */
    uint8_t state;    /* xfer_ready_state */
    uint8_t ccancel;  /* TAKING: the consumer's cancel was deferred, so the
                         tombstone will cover every attempt (attempt 0) */
} xfer_readiness_rec;

/* Scratch entry for sorting (save) and marking (load). */
typedef struct xfer_readiness_sortkey {
    uint64_t a, b;
    uint32_t slot;
} xfer_readiness_sortkey;

struct xfer_readiness {
    xfer_readiness_config cfg;
    uint64_t full;            /* mask of all S shards */
    xfer_readiness_rec *recs; /* max_records slots */
    uint64_t *resv;       /* resv[slot * S + k]: reservation id of shard k */
    uint32_t *free_slots; /* stack, lowest slot on top */
    uint32_t nfree;
    xfer_idmap live; /* id -> slot */
    xfer_heap deadlines;
    xfer_tomb tombs; /* reason = xfer_ready_state */
    xfer_ready_action *acts;
    size_t nacts, cap, room_one;
    xfer_ready_action spare;         /* written only if a bug overflows acts */
    xfer_readiness_sortkey *scratch; /* max_records entries */
    uint64_t seq;
    xfer_readiness_stats st;
    uint64_t cells_hit[XFER_READY_STATE_COUNT_][XFER_READY_EVENT_COUNT_];
};

/* The reservation ids of a slot's record, one per shard.  r is borrowed;
 * the pointer is valid while r lives. */
static inline uint64_t *xfer_readiness_resv_of(const xfer_readiness *r,
                                               uint32_t slot)
{
    return &r->resv[(size_t)slot * r->cfg.nshards];
}

/* The mask bit of shard k (k < 64). */
static inline uint64_t xfer_readiness_bit(uint16_t k)
{
    return UINT64_C(1) << k;
}

#endif /* XFER_FSM_READINESS_PRIV_H */
