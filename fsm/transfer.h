/*
 * fsm/transfer.h - the transfer machine (producer side): its record, its
 * step, and the dispatcher that runs every cell of XFER_TRANSFER_TABLE.
 *
 * xfer_core (fsm/core.c) is the container: it keeps the records in a table
 * with tombstones and deadlines, and for every event builds a step with
 * what the cell's handler needs (step.h): the live record, or for the rows
 * without one (NEW, TOMBSTONED, and a SUBMIT of a live id, which must not
 * touch the record it is refused for) the id, the attempt and the
 * tombstone.  A handler never allocates, never reads a clock and never
 * calls out except through the action buffer, the trace sink and the
 * tombstone table of its context.
 */
#ifndef XFER_FSM_TRANSFER_H
#define XFER_FSM_TRANSFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "step.h"
#include "stream.h"
#include "tomb.h"
#include "xfer/core.h"
#include "xfer/fsm.h"
#include "xfer/trace.h"

/* What the record's single timer means when it fires. */
enum { XFER_TIMER_NONE = 0, XFER_TIMER_DEADLINE = 1, XFER_TIMER_RETRY = 2 };

/* The record's part for one shard of the group. */
typedef struct xfer_transfer_shard {
    uint64_t resv_id;     /* from the reserve reply, XFER_RESV_NONE before */
    uint64_t remote_addr;
    uint64_t staging_off;
    uint32_t len;
    uint32_t rkey;
    uint8_t resv, write, commit, cancel; /* xfer_sub_state (shard_op.h) */
    uint8_t cancel_attempts;
    uint8_t eager;  /* xfer_sub_state of the eager op (eager path) */
    uint8_t pad_[2];
} xfer_transfer_shard;

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
    uint8_t eager;            /* the submit allowed eager; after SUBMIT:
                                 the transfer took the eager path */
    uint8_t pad_[4];
    xfer_stream *st;          /* a stream's parts (xfer_core_open); NULL
                                 for a one-shot submit */
    xfer_transfer_shard shards[];
} xfer_transfer;

/*
 * The context a step runs in: configuration, where actions go, the trace
 * sink, the container's tombstone table (the NEW and TOMBSTONED rows make
 * and refresh tombstones) and counters.  Owned by the container.  The
 * action buffer must have room for nshards + 3 more actions on every step
 * (the container sizes it), plus XFER_STREAM_MAX_PARTS RELEASE_PART
 * actions on a step of a stream.
 */
typedef struct xfer_transfer_ctx {
    const xfer_core_config *cfg;
    xfer_action *acts;
    size_t nacts, cap;
    xfer_trace_sink trace;
    uint64_t seq;
    xfer_tomb *tombs; /* borrowed from the container */
    uint64_t illegal, cancel_retries, cancel_gave_up;
    uint64_t late_submits, late_replies, unknown_replies;
    /* Set by xfer_core_abandon (the shutdown deadline passed): no cancel
     * is retried or sent any more.  Not saved (fsm/save.h): the model
     * checker never abandons. */
    uint8_t abandoning;
    uint64_t cells_hit[XFER_TRANSFER_STATE_COUNT_][XFER_TRANSFER_EVENT_COUNT_];
} xfer_transfer_ctx;

/*
 * One event for one id on its way through the table.  The container fills
 * it (xfer_transfer_step_make, then what the row needs) and passes it to
 * xfer_transfer_dispatch.
 */
typedef struct xfer_transfer_step {
    xfer_step step; /* now, event, from, to (step.h) */
    xfer_transfer *t; /* the live record the event acts on, or NULL */
    const xfer_shard_result *r; /* result events (their shard and status);
                                   NULL otherwise */
    uint64_t id;
    uint32_t attempt; /* the record's, the tombstone's or the result's */
    uint8_t tomb_reason; /* TOMBSTONED row: the tombstone's reason */
    xfer_part *part;  /* PART: the part the container made; a handler that
                         takes it sets this NULL (else the container frees
                         it) and its number in part_seq */
    uint32_t part_seq;
} xfer_transfer_step;

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

/* A step of `event` at now_ns for `id`, from state NEW, with no record,
 * no result and no attempt yet: the container sets the rest. */
static inline xfer_transfer_step xfer_transfer_step_make(uint64_t now_ns,
                                                         unsigned event,
                                                         uint64_t id)
{
    xfer_transfer_step e = {
        .step = xfer_step_make(XFER_MACHINE_TRANSFER, now_ns,
                               XFER_TRANSFER_STATE_NEW, event),
        .id = id};
    return e;
}

/*
 * Run one event through the table (step.h): count the cell, run its
 * handler, check the edge it took, and trace the step, its note and the
 * actions it appended.  When e->t is set the step starts from e->t->state.
 * Returns the handler's answer: 0, or the error the public call returns
 * (XFER_ERR_EXISTS, XFER_ERR_CANCELLED, XFER_ERR_BUSY from a tombstone
 * refresh), XFER_ERR_STATE for an ILLEGAL cell.  On return, e->t->state
 * may be XFER_TRANSFER_STATE_TOMBSTONED: the container then tombstones
 * the id and frees the record.  The NEW + USER_CANCEL handler turns a
 * tombstone hold the container took into the id's tombstone.
 */
int xfer_transfer_dispatch(xfer_transfer_ctx *c, xfer_transfer_step *e);

/* A trace record of an action (machine XFER_MACHINE_ACTION). */
void xfer_transfer_trace_action(xfer_transfer_ctx *c, uint64_t now_ns,
                                const xfer_action *a);

#endif /* XFER_FSM_TRANSFER_H */
