/*
 * fsm/names.c - the names of the enums of the public headers, each
 * generated from the X-macro list its enum comes from (the error names
 * live in errors.c, the machines' states and events in tables.c), so a
 * name can never drift from its value.
 *
 * What must stay true: every function returns a static string, never
 * NULL, "?" for a value outside its list; values never change (they are
 * in trace files and on the wire), so the lists only grow.  Each table is
 * indexed by the values the list writes out.
 */
#include <stddef.h>

#include "xfer/core.h"
#include "xfer/readiness.h"
#include "xfer/shard.h"
#include "xfer/shard_op.h"
#include "xfer/integrity.h"
#include "xfer/trace.h"

#define NAME_AT_(name, value) [value] = #name,
#define STRING_AT_(name, value, str) [value] = str,
#define NELEM_(a) (sizeof(a) / sizeof((a)[0]))

static const char *const machine_names[] = {XFER_MACHINES(STRING_AT_)};
static const char *const verdict_names[] = {XFER_VERDICTS(NAME_AT_)};
static const char *const note_names[] = {XFER_NOTES(NAME_AT_)};
static const char *const phase_names[] = {XFER_PHASES(NAME_AT_)};
static const char *const action_names[] = {XFER_ACTION_KINDS(NAME_AT_)};
static const char *const op_names[] = {XFER_OP_KINDS(NAME_AT_)};
static const char *const ready_action_names[] = {
    XFER_READY_ACTION_KINDS(NAME_AT_)};
static const char *const shard_event_names[] = {
    XFER_SHARD_EVENT_KINDS(NAME_AT_)};

/* The words of each op's column, in sub-state order (NULL: not a state of
 * that op). */
static const char *const sub_words[XFER_OP_COUNT_][XFER_SUB_COUNT_] = {
#define SUB_AT_(name, value, r, w, c, x, g)                                   \
    [XFER_OP_RESERVE][value] = r, [XFER_OP_WRITE][value] = w,                 \
    [XFER_OP_COMMIT][value] = c, [XFER_OP_CANCEL][value] = x,                 \
    [XFER_OP_EAGER][value] = g,
    XFER_SUB_STATES(SUB_AT_)
#undef SUB_AT_
};

/* names[v] of a table of n, or "?" past it or in a gap. */
static const char *pick(const char *const *names, size_t n, unsigned v)
{
    return v < n && names[v] ? names[v] : "?";
}

const char *xfer_machine_name(unsigned m)
{
    return pick(machine_names, NELEM_(machine_names), m);
}

const char *xfer_verdict_name(unsigned v)
{
    return pick(verdict_names, NELEM_(verdict_names), v);
}

const char *xfer_note_name(unsigned n)
{
    return pick(note_names, NELEM_(note_names), n);
}

const char *xfer_integrity_name(unsigned mode)
{
    static const char *const names[] = {"default", "off", "shard",
                                        "consumer"};
    return pick(names, NELEM_(names), mode);
}

const char *xfer_phase_name(unsigned phase)
{
    return pick(phase_names, NELEM_(phase_names), phase);
}

const char *xfer_action_name(unsigned kind)
{
    return pick(action_names, NELEM_(action_names), kind);
}

const char *xfer_op_name(unsigned op)
{
    return pick(op_names, NELEM_(op_names), op);
}

const char *xfer_ready_action_name(unsigned kind)
{
    return pick(ready_action_names, NELEM_(ready_action_names), kind);
}

const char *xfer_shard_event_name(unsigned kind)
{
    return pick(shard_event_names, NELEM_(shard_event_names), kind);
}

const char *xfer_sub_name(unsigned op, unsigned sub)
{
    return op < XFER_OP_COUNT_ ? pick(sub_words[op], XFER_SUB_COUNT_, sub)
                               : "?";
}
