/*
 * fsm/tables.c - read-only views of the three machine tables of
 * xfer/fsm.h: names, verdicts, handler names and the Graphviz diagram.
 *
 * Names and edges are generated from the X-macro lists; verdicts and
 * handler names are read from the dispatch tables that transfer.c,
 * shard.c and readiness.c run (step.h), so what the tools show is what
 * the code does, and a cell whose dispatcher holds no function shows
 * "(missing)".  The diagram is assembled by plain string appends (no
 * stdio: fsm/ is pure), measuring the whole text as snprintf would so a
 * caller can size its buffer.
 */
#include <string.h>

#include "step.h"
#include "xfer/fsm.h"
#include "xfer/trace.h"

#define STR_(x) #x

static const char *const transfer_states[] = {
#define S_(s) STR_(s),
    XFER_TRANSFER_STATES(S_)
#undef S_
};
static const char *const transfer_events[] = {
#define E_(e) STR_(e),
    XFER_TRANSFER_EVENTS(E_)
#undef E_
};
static const char *const resv_states[] = {
#define S_(s) STR_(s),
    XFER_RESV_STATES(S_)
#undef S_
};
static const char *const resv_events[] = {
#define E_(e) STR_(e),
    XFER_RESV_EVENTS(E_)
#undef E_
};
static const char *const ready_states[] = {
#define S_(s) STR_(s),
    XFER_READY_STATES(S_)
#undef S_
};
static const char *const ready_events[] = {
#define E_(e) STR_(e),
    XFER_READY_EVENTS(E_)
#undef E_
};

/* Every (state, event) pair exactly once: the static assertions below fail
 * the build when a table has more or fewer cells than states x events, and
 * -Woverride-init (in -Wextra) warns about a pair listed twice in these
 * designated initialisers (which, with the count right, also means some
 * pair is missing). */
#define ONE_(s, e, v, h) +1
_Static_assert(0 XFER_TRANSFER_TABLE(ONE_) ==
                   XFER_TRANSFER_STATE_COUNT_ * XFER_TRANSFER_EVENT_COUNT_,
               "transfer table: not one cell per (state, event)");
_Static_assert(0 XFER_RESV_TABLE(ONE_) ==
                   XFER_RESV_STATE_COUNT_ * XFER_RESV_EVENT_COUNT_,
               "reservation table: not one cell per (state, event)");
_Static_assert(0 XFER_READY_TABLE(ONE_) ==
                   XFER_READY_STATE_COUNT_ * XFER_READY_EVENT_COUNT_,
               "readiness table: not one cell per (state, event)");
#undef ONE_

typedef struct machine_desc {
    unsigned nstates, nevents;
    const char *const *states;
    const char *const *events;
    /* the machine's dispatch table (step.h) */
    bool (*cell)(unsigned state, unsigned event, xfer_step_cell *out);
} machine_desc;

static const machine_desc machines[] = {
    [XFER_MACHINE_TRANSFER] = {XFER_TRANSFER_STATE_COUNT_,
                               XFER_TRANSFER_EVENT_COUNT_, transfer_states,
                               transfer_events, xfer_transfer_cell},
    [XFER_MACHINE_RESERVATION] = {XFER_RESV_STATE_COUNT_,
                                  XFER_RESV_EVENT_COUNT_, resv_states,
                                  resv_events, xfer_shard_cell},
    [XFER_MACHINE_READINESS] = {XFER_READY_STATE_COUNT_,
                                XFER_READY_EVENT_COUNT_, ready_states,
                                ready_events, xfer_readiness_cell},
};

static const machine_desc *desc(unsigned machine)
{
    return machine <= XFER_MACHINE_READINESS ? &machines[machine] : NULL;
}

unsigned xfer_fsm_nstates(unsigned machine)
{
    const machine_desc *d = desc(machine);
    return d ? d->nstates : 0;
}

unsigned xfer_fsm_nevents(unsigned machine)
{
    const machine_desc *d = desc(machine);
    return d ? d->nevents : 0;
}

const char *xfer_fsm_state_name(unsigned machine, unsigned state)
{
    const machine_desc *d = desc(machine);
    return d && state < d->nstates ? d->states[state] : "?";
}

const char *xfer_fsm_event_name(unsigned machine, unsigned event)
{
    const machine_desc *d = desc(machine);
    return d && event < d->nevents ? d->events[event] : "?";
}

/* The cell as the machine's dispatcher holds it; false out of range. */
static bool cell_at(unsigned machine, unsigned state, unsigned event,
                    xfer_step_cell *out)
{
    const machine_desc *d = desc(machine);
    return d && d->cell(state, event, out);
}

unsigned xfer_fsm_verdict(unsigned machine, unsigned state, unsigned event)
{
    xfer_step_cell c;
    return cell_at(machine, state, event, &c) && c.handler
               ? c.verdict
               : XFER_VERDICT_ILLEGAL;
}

const char *xfer_fsm_handler_name(unsigned machine, unsigned state,
                                  unsigned event)
{
    xfer_step_cell c;
    return cell_at(machine, state, event, &c) && c.handler ? c.handler
                                                           : "(missing)";
}

/* The text being built: buf holds at most len bytes; at counts every byte
 * the whole text needs, written or not. */
typedef struct text {
    char *buf;
    size_t len, at;
} text;

static void put(text *t, const char *s)
{
    size_t n = strlen(s);
    if (t->at < t->len) {
        size_t room = t->len - t->at;
        memcpy(t->buf + t->at, s, n < room ? n : room);
    }
    t->at += n;
}

/* One edge line: `  FROM -> TO [ATTRlabel="LABEL"];` */
static void put_edge(text *t, const char *from, const char *to,
                     const char *attr, const char *label)
{
    put(t, "  ");
    put(t, from);
    put(t, " -> ");
    put(t, to);
    put(t, " [");
    put(t, attr);
    put(t, "label=\"");
    put(t, label);
    put(t, "\"];\n");
}

typedef struct edge {
    unsigned char from, event, to;
} edge;

static const edge transfer_edges[] = {
#define G_(f, e, t) {XFER_TRANSFER_STATE_##f, XFER_TRANSFER_EVENT_##e, XFER_TRANSFER_STATE_##t},
    XFER_TRANSFER_EDGES(G_)
#undef G_
};
static const edge resv_edges[] = {
#define G_(f, e, t) {XFER_RESV_STATE_##f, XFER_RESV_EVENT_##e, XFER_RESV_STATE_##t},
    XFER_RESV_EDGES(G_)
#undef G_
};
static const edge ready_edges[] = {
#define G_(f, e, t) {XFER_READY_STATE_##f, XFER_READY_EVENT_##e, XFER_READY_STATE_##t},
    XFER_READY_EDGES(G_)
#undef G_
};

static const edge *edges_of(unsigned machine, size_t *n)
{
    switch (machine) {
    case XFER_MACHINE_TRANSFER:
        *n = sizeof transfer_edges / sizeof transfer_edges[0];
        return transfer_edges;
    case XFER_MACHINE_RESERVATION:
        *n = sizeof resv_edges / sizeof resv_edges[0];
        return resv_edges;
    case XFER_MACHINE_READINESS:
        *n = sizeof ready_edges / sizeof ready_edges[0];
        return ready_edges;
    default:
        *n = 0;
        return NULL;
    }
}

/*
 * The edge check runs after every step that changes state (step.h), so it
 * is one switch per machine over (from, event, to) keys, generated from
 * the same X-macro lists as the arrays above, rather than a walk of an
 * array: the compiler builds a jump table or a bit test, and a duplicate
 * edge in a list fails the build.  States and events fit in a byte (the
 * arrays above store them as unsigned char).
 */
#define EDGE_KEY(f, e, t) (((unsigned)(f) << 16) | ((unsigned)(e) << 8) | (unsigned)(t))

static bool transfer_edge(unsigned key)
{
    switch (key) {
#define G_(f, e, t) case EDGE_KEY(XFER_TRANSFER_STATE_##f, XFER_TRANSFER_EVENT_##e, XFER_TRANSFER_STATE_##t):
    XFER_TRANSFER_EDGES(G_)
#undef G_
        return true;
    default:
        return false;
    }
}

static bool resv_edge(unsigned key)
{
    switch (key) {
#define G_(f, e, t) case EDGE_KEY(XFER_RESV_STATE_##f, XFER_RESV_EVENT_##e, XFER_RESV_STATE_##t):
    XFER_RESV_EDGES(G_)
#undef G_
        return true;
    default:
        return false;
    }
}

static bool ready_edge(unsigned key)
{
    switch (key) {
#define G_(f, e, t) case EDGE_KEY(XFER_READY_STATE_##f, XFER_READY_EVENT_##e, XFER_READY_STATE_##t):
    XFER_READY_EDGES(G_)
#undef G_
        return true;
    default:
        return false;
    }
}

bool xfer_fsm_edge_ok(unsigned machine, unsigned from, unsigned event,
                      unsigned to)
{
    if (from > 0xFF || event > 0xFF || to > 0xFF)
        return false;
    unsigned key = EDGE_KEY(from, event, to);
    switch (machine) {
    case XFER_MACHINE_TRANSFER:
        return transfer_edge(key);
    case XFER_MACHINE_RESERVATION:
        return resv_edge(key);
    case XFER_MACHINE_READINESS:
        return ready_edge(key);
    default:
        return false;
    }
}

int xfer_fsm_dot(unsigned machine, char *buf, size_t len)
{
    const machine_desc *d = desc(machine);
    if (!d || (!buf && len))
        return XFER_ERR_INVALID_ARG;
    text t = {buf, len, 0};
    size_t ng;
    const edge *g = edges_of(machine, &ng);
    put(&t, "digraph ");
    put(&t, xfer_machine_name(machine));
    put(&t, " {\n  rankdir=LR;\n  node [shape=box];\n");
    for (unsigned s = 0; s < d->nstates; s++) {
        put(&t, "  ");
        put(&t, d->states[s]);
        put(&t, ";\n");
    }
    /* Solid edges: declared state changes.  Dashed self-loops: events a
     * state absorbs or defers (IGNORE/DEFER) or handles without leaving. */
    for (size_t i = 0; i < ng; i++)
        put_edge(&t, d->states[g[i].from], d->states[g[i].to], "",
                 d->events[g[i].event]);
    for (unsigned s = 0; s < d->nstates; s++) {
        for (unsigned e = 0; e < d->nevents; e++) {
            xfer_step_cell c;
            if (!d->cell(s, e, &c) || !c.handler ||
                c.verdict == XFER_VERDICT_ILLEGAL)
                continue;
            put_edge(&t, d->states[s], d->states[s], "style=dashed,",
                     d->events[e]);
        }
    }
    put(&t, "}\n");
    if (len)
        buf[t.at < len ? t.at : len - 1] = '\0';
    return (int)t.at;
}
