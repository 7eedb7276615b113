/*
 * fsm/step.h - what the dispatchers of the three machines share: the head
 * of a step, the checks around a cell's handler, the emission of the
 * step's trace record and of notes, and the cell views fsm/tables.c reads
 * from each dispatcher.
 *
 * Every machine (transfer.c, shard.c, readiness.c) runs an event through
 * its table the same way, in a function named dispatch:
 *
 *     const cell *c = &table[e->step.from][e->step.event];
 *     int rc = XFER_ERR_STATE;
 *     if (xfer_step_enter(&e->step, c->verdict, &cells_hit[from][event],
 *                         &illegal))
 *         rc = c->fn(machine, e);
 *     xfer_step_leave(&e->step, &illegal);
 *     ... fill the machine's fields of a trace record, xfer_step_emit() ...
 *
 * and every handler has one shape: `static int h_<token>(M *m, E *e)`,
 * where M is the machine's context (the core's transfer context, the
 * shard, the tracker) and E the machine's step, which begins with an
 * xfer_step `step` and carries what the handler needs (a record, or the id,
 * attempt and tombstone for rows without one).  A handler returns 0 or an
 * xfer_err (what the public call returns) and writes e->step.to when it
 * changes the state.  The handler of each cell is generated from the
 * table's handler token (h_##token), so a token that names no function
 * does not compile; `none` is a real function that does nothing.
 *
 * What must stay true: a step is counted in its cell before its handler
 * runs; an ILLEGAL cell runs no handler, counts as illegal and asserts in
 * a debug build; a change of state that is not a declared edge counts as
 * illegal and asserts.  Nothing here allocates or reads a clock.
 */
#ifndef XFER_FSM_STEP_H
#define XFER_FSM_STEP_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>

#include "xfer/fsm.h"
#include "xfer/trace.h"

/* The head of every machine's step. */
typedef struct xfer_step {
    uint64_t now_ns;
    uint8_t machine; /* XFER_MACHINE_TRANSFER, _RESERVATION or _READINESS */
    uint8_t from;    /* the state the event found */
    uint8_t event;
    uint8_t to;      /* the state it leaves behind: handlers write it */
    uint8_t verdict; /* the cell's, set by xfer_step_enter */
    bool noted;      /* a note follows the step's record (note, note_err) */
    uint8_t note;    /* xfer_note */
    int32_t note_err;
} xfer_step;

/* A fresh step head: `event` at now_ns on `machine`, from state `from`. */
static inline xfer_step xfer_step_make(unsigned machine, uint64_t now_ns,
                                       unsigned from, unsigned event)
{
    xfer_step st = {.now_ns = now_ns, .machine = (uint8_t)machine,
                    .from = (uint8_t)from, .event = (uint8_t)event,
                    .to = (uint8_t)from};
    return st;
}

/*
 * Enter the cell (st->from, st->event) whose verdict is `verdict`: count
 * it in *hit, set st->to to st->from.  Returns true when the cell's
 * handler must run; false for an ILLEGAL cell, counted in *illegal (and
 * asserted in a debug build: peer input never reaches one).  Inline: it
 * runs on every event of every machine.
 */
static inline bool xfer_step_enter(xfer_step *st, unsigned verdict,
                                   uint64_t *hit, uint64_t *illegal)
{
    st->verdict = (uint8_t)verdict;
    st->to = st->from;
    (*hit)++;
    if (verdict != XFER_VERDICT_ILLEGAL)
        return true;
    /* A bug in a machine, its container or a transport: peer input is
     * filtered before it reaches a table. */
    (*illegal)++;
    assert(!"illegal cell");
    return false;
}

/* After the handler: a change of state must be a declared edge of the
 * machine (xfer_fsm_edge_ok), else it counts in *illegal and asserts. */
static inline void xfer_step_leave(const xfer_step *st, uint64_t *illegal)
{
    if (st->to == st->from ||
        xfer_fsm_edge_ok(st->machine, st->from, st->event, st->to))
        return;
    (*illegal)++;
    assert(!"undeclared edge");
}

/* Ask for a note of kind `note` (xfer_note) with error `err` right after
 * the step's own record, naming the same id, attempt and shard. */
static inline void xfer_step_note_after(xfer_step *st, unsigned note,
                                        int32_t err)
{
    st->noted = true;
    st->note = (uint8_t)note;
    st->note_err = err;
}

/*
 * Emit the step's record: `rec` (borrowed) carries the machine's own
 * fields (id, args, attempt, error, shard); this fills time, machine, old
 * and new state, event and verdict from `st`, gives it the next sequence
 * number of *seq and passes it to `sink`; then the note asked for with
 * xfer_step_note_after, if any.  Callers skip building `rec` when the
 * sink has no function (nothing is observable then).
 */
void xfer_step_emit(const xfer_trace_sink *sink, uint64_t *seq,
                    const xfer_step *st, xfer_trace_rec *rec);

/* A note record (machine XFER_MACHINE_NOTE, event `note`), if the sink
 * has a function. */
void xfer_step_note(const xfer_trace_sink *sink, uint64_t *seq,
                    uint64_t now_ns, unsigned note, uint64_t id,
                    uint32_t attempt, uint16_t shard, int32_t err);

/* One cell of a dispatch table as the table views report it. */
typedef struct xfer_step_cell {
    uint8_t verdict;     /* xfer_verdict */
    const char *handler; /* the handler's token; NULL: no function */
} xfer_step_cell;

/*
 * The cell (state, event) of each machine's dispatch table, read from the
 * table the dispatcher runs (fsm/transfer.c, shard.c, readiness.c), so
 * what xfer_fsm_handler_name() reports is what the code calls.  False
 * when state or event is out of range.
 */
bool xfer_transfer_cell(unsigned state, unsigned event, xfer_step_cell *out);
bool xfer_shard_cell(unsigned state, unsigned event, xfer_step_cell *out);
bool xfer_readiness_cell(unsigned state, unsigned event,
                         xfer_step_cell *out);

#endif /* XFER_FSM_STEP_H */
