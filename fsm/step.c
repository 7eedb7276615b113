/*
 * fsm/step.c - the parts of a machine step that the three dispatchers
 * share (see step.h) and that are not inline there: tracing the step and
 * its notes.
 *
 * What must stay true: the order of records is the order of calls (a
 * step's record, then the note it asked for), and each record takes the
 * next sequence number of its emitter.
 */
#include "step.h"

#include "util.h"

void xfer_step_note(const xfer_trace_sink *sink, uint64_t *seq,
                    uint64_t now_ns, unsigned note, uint64_t id,
                    uint32_t attempt, uint16_t shard, int32_t err)
{
    if (!sink->fn)
        return;
    xfer_trace_rec rec = {.time_ns = now_ns, .id = id, .attempt = attempt,
                          .shard = shard, .error = err,
                          .machine = XFER_MACHINE_NOTE,
                          .event = (uint8_t)note};
    xfer_util_emit(sink, seq, &rec);
}

void xfer_step_emit(const xfer_trace_sink *sink, uint64_t *seq,
                    const xfer_step *st, xfer_trace_rec *rec)
{
    if (!sink->fn)
        return;
    rec->time_ns = st->now_ns;
    rec->machine = st->machine;
    rec->old_state = st->from;
    rec->event = st->event;
    rec->new_state = st->to;
    rec->verdict = st->verdict;
    xfer_util_emit(sink, seq, rec);
    if (st->noted)
        xfer_step_note(sink, seq, st->now_ns, st->note, rec->id,
                       rec->attempt, rec->shard, st->note_err);
}
