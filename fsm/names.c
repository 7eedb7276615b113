/*
 * fsm/names.c - the names of the enums of the public headers, each
 * generated from the X-macro list its enum comes from (the error names
 * live in errors.c, the machines' states and events in tables.c), so a
 * name can never drift from its value.
 *
 * What must stay true: every function returns a static string, never
 * NULL, "?" for a value outside its list; values never change (they are
 * in trace files and on the wire), so the lists only grow.
 */
#include <stddef.h>

#include "xfer/core.h"
#include "xfer/readiness.h"
#include "xfer/shard.h"
#include "xfer/shard_op.h"
#include "xfer/trace.h"

/* case VALUE: return "NAME"; for an X(NAME, value, ...) list */
#define NAME_CASE_(prefix, name, value)                                       \
    case prefix##name:                                                        \
        return #name;

const char *xfer_machine_name(unsigned m)
{
    switch (m) {
#define X_(name, value, str)                                                  \
    case XFER_MACHINE_##name:                                                 \
        return str;
        XFER_MACHINES(X_)
#undef X_
    default:
        return "?";
    }
}

const char *xfer_verdict_name(unsigned v)
{
    switch (v) {
#define X_(name, value) NAME_CASE_(XFER_VERDICT_, name, value)
        XFER_VERDICTS(X_)
#undef X_
    default:
        return "?";
    }
}

const char *xfer_note_name(unsigned n)
{
    switch (n) {
#define X_(name, value) NAME_CASE_(XFER_NOTE_, name, value)
        XFER_NOTES(X_)
#undef X_
    default:
        return "?";
    }
}

const char *xfer_phase_name(unsigned phase)
{
    switch (phase) {
#define X_(name, value) NAME_CASE_(XFER_PHASE_, name, value)
        XFER_PHASES(X_)
#undef X_
    default:
        return "?";
    }
}

const char *xfer_action_name(unsigned kind)
{
    switch (kind) {
#define X_(name, value) NAME_CASE_(XFER_ACT_, name, value)
        XFER_ACTION_KINDS(X_)
#undef X_
    default:
        return "?";
    }
}

const char *xfer_op_name(unsigned op)
{
    switch (op) {
#define X_(name, value) NAME_CASE_(XFER_OP_, name, value)
        XFER_OP_KINDS(X_)
#undef X_
    default:
        return "?";
    }
}

const char *xfer_ready_action_name(unsigned kind)
{
    switch (kind) {
#define X_(name, value) NAME_CASE_(XFER_READY_ACT_, name, value)
        XFER_READY_ACTION_KINDS(X_)
#undef X_
    default:
        return "?";
    }
}

const char *xfer_shard_event_name(unsigned kind)
{
    switch (kind) {
#define X_(name, value) NAME_CASE_(XFER_SHARD_EV_, name, value)
        XFER_SHARD_EVENT_KINDS(X_)
#undef X_
    default:
        return "?";
    }
}

/* The words of one op's column, in sub-state order (NULL: not a state of
 * that op). */
static const char *const sub_words[XFER_OP_COUNT_][XFER_SUB_COUNT_] = {
#define X_(name, value, r, w, c, x)                                           \
    [XFER_OP_RESERVE][value] = r, [XFER_OP_WRITE][value] = w,                 \
    [XFER_OP_COMMIT][value] = c, [XFER_OP_CANCEL][value] = x,
    XFER_SUB_STATES(X_)
#undef X_
};

const char *xfer_sub_name(unsigned op, unsigned sub)
{
    const char *w = op < XFER_OP_COUNT_ && sub < XFER_SUB_COUNT_
                        ? sub_words[op][sub]
                        : NULL;
    return w ? w : "?";
}
