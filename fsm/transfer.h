/*
 * fsm/transfer.h - one transfer machine (producer side) as a plain record
 * and a step function, without any container.
 *
 * xfer_core (fsm/core.c) keeps these records in a table with tombstones and
 * deadlines; the model checker steps them directly.  A record never
 * allocates, never reads a clock and never calls out except through the
 * action buffer and the trace sink of its context.
 */
#ifndef XFER_FSM_TRANSFER_H
#define XFER_FSM_TRANSFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/core.h"
#include "xfer/fsm.h"
#include "xfer/trace.h"

/* Per-shard sub-states (also the values of xfer_shard_view). */
enum { XFER_SUB_NONE = 0, XFER_SUB_PENDING = 1, XFER_SUB_OK = 2,
       XFER_SUB_FAILED = 3, XFER_SUB_GAVE_UP = 4 };

/* What the record's single timer means when it fires. */
enum { XFER_TIMER_NONE = 0, XFER_TIMER_DEADLINE = 1, XFER_TIMER_RETRY = 2 };

typedef struct xfer_tshard {
    uint64_t resv_id;     /* from the reserve reply, XFER_RESV_NONE before */
    uint64_t remote_addr;
    uint64_t staging_off;
    uint32_t len;
    uint32_t rkey;
    uint8_t resv, write, commit, cancel; /* XFER_SUB_* */
    uint8_t cancel_attempts;
    uint8_t pad_[3];
} xfer_tshard;

typedef struct xfer_transfer {
    uint64_t id;
    uint64_t user_data;
    uint64_t started_ns;
    uint64_t deadline_ns;
    uint64_t timer_ns;        /* UINT64_MAX: no timer */
    uint64_t failed_shards;   /* ops that failed, any phase */
    uint64_t rollback_failed; /* cancels that never succeeded */
    uint32_t attempt, group, pool, slot;
    int32_t status;           /* first failure or stop reason; 0 while ok */
    uint16_t nshards;
    uint16_t pending;         /* ops of the current phase without result */
    uint16_t first_failed;    /* XFER_SHARD_NONE until a shard fails */
    uint8_t state;            /* xfer_transfer_state */
    uint8_t fail_phase;       /* xfer_phase of `status` */
    uint8_t timer_kind;       /* XFER_TIMER_* */
    uint8_t stopping;         /* a stop was requested: start nothing new */
    uint8_t may_hold;         /* consumer may hold the data */
    uint8_t stop_deferred;    /* user cancel / shutdown seen in COMPLETING */
    uint8_t cancel_round;     /* retry rounds so far */
    uint8_t pad_[5];
    xfer_tshard shards[];
} xfer_transfer;

/*
 * The context a step runs in: configuration, where actions go, the trace
 * sink and counters.  Owned by the container.  The action buffer must have
 * room for nshards + 3 more actions on every step (the container sizes it).
 */
typedef struct xfer_tctx {
    const xfer_core_config *cfg;
    xfer_action *acts;
    size_t nacts, cap;
    xfer_trace_sink trace;
    uint64_t seq;
    uint64_t illegal, cancel_retries, cancel_gave_up;
    uint64_t cells_hit[XFER_TRANSFER_STATE_COUNT_][XFER_TRANSFER_EVENT_COUNT_];
} xfer_tctx;

/* Bytes of a record with n shards. */
size_t xfer_transfer_size(unsigned nshards);

/* Fill a fresh record (state NEW) from a submit; the SUBMIT step then sends
 * the reserves. */
void xfer_transfer_init(xfer_transfer *t, const xfer_submit_args *a,
                        uint32_t attempt, uint64_t now_ns,
                        uint64_t deadline_ns);

/* The event a shard result maps to (RESERVE_OK, ..., CANCEL_FAIL). */
unsigned xfer_transfer_result_event(const xfer_shard_result *r);

/* True when the record has that shard's op of that kind in flight, i.e. the
 * result is one it is waiting for. */
bool xfer_transfer_expects(const xfer_transfer *t, const xfer_shard_result *r);

/* The event the record's timer stands for (DEADLINE or RETRY). */
unsigned xfer_transfer_timer_event(const xfer_transfer *t);

/*
 * Run one event through the table.  `r` is the shard result for result
 * events, NULL otherwise.  Emits the trace record and appends actions.
 * Returns the verdict of the cell.  On return, t->state may be
 * XFER_TRANSFER_STATE_TOMBSTONED: the container then tombstones the id and frees t.
 */
unsigned xfer_transfer_step(xfer_transfer *t, xfer_tctx *c, uint64_t now_ns,
                            unsigned event, const xfer_shard_result *r);

/* Trace one step of a row the container handles itself (NEW, TOMBSTONED),
 * counting the cell. */
void xfer_transfer_trace_cell(xfer_tctx *c, uint64_t now_ns, uint64_t id,
                              uint32_t attempt, uint16_t shard,
                              unsigned state, unsigned event, int32_t error);

/* A trace record of an action (machine XFER_MACHINE_ACTION). */
void xfer_transfer_trace_action(xfer_tctx *c, uint64_t now_ns,
                                const xfer_action *a);

#endif /* XFER_FSM_TRANSFER_H */
