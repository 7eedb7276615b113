/*
 * tests/test_fsm_tables.c - the three machine tables of xfer/fsm.h and
 * their read-only views (fsm/tables.c): every (state, event) cell listed
 * exactly once with the verdict and handler the views report, every
 * declared edge between two real states and out of a cell that acts
 * (TRANSITION, or DEFER into a pending state),
 * every state reachable from the start, names that round-trip, the
 * Graphviz text, and queries out of range.
 *
 * The test expands the same X-macro tables itself, so it checks the lists
 * as written, not only what tables.c made of them.  Public API only.
 *
 * Handlers: each machine's dispatcher builds its table from the same
 * X-macro with h_##token, so a token that names no function does not
 * compile; tables.c reports each cell's handler from that dispatch table,
 * so a cell whose dispatcher holds no function (a NULL stand-in) reads
 * "(missing)" here and fails test_fsm_tables_every_cell_has_a_handler.
 */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "xfer/fsm.h"
#include "xfer/trace.h"

#define STR_(x) #x
#define MAX_STATES 16
#define MAX_EVENTS 20

typedef struct tcell {
    unsigned state, event, verdict;
    const char *handler;
} tcell;

typedef struct tedge {
    unsigned from, event, to;
} tedge;

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
static const tcell transfer_cells[] = {
#define C_(s, e, v, h)                                                        \
    {XFER_TRANSFER_STATE_##s, XFER_TRANSFER_EVENT_##e, XFER_VERDICT_##v,    \
     STR_(h)},
    XFER_TRANSFER_TABLE(C_)
#undef C_
};
static const tedge transfer_edges[] = {
#define G_(f, e, t)                                                           \
    {XFER_TRANSFER_STATE_##f, XFER_TRANSFER_EVENT_##e, XFER_TRANSFER_STATE_##t},
    XFER_TRANSFER_EDGES(G_)
#undef G_
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
static const tcell resv_cells[] = {
#define C_(s, e, v, h)                                                        \
    {XFER_RESV_STATE_##s, XFER_RESV_EVENT_##e, XFER_VERDICT_##v, STR_(h)},
    XFER_RESV_TABLE(C_)
#undef C_
};
static const tedge resv_edges[] = {
#define G_(f, e, t)                                                           \
    {XFER_RESV_STATE_##f, XFER_RESV_EVENT_##e, XFER_RESV_STATE_##t},
    XFER_RESV_EDGES(G_)
#undef G_
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
static const tcell ready_cells[] = {
#define C_(s, e, v, h)                                                        \
    {XFER_READY_STATE_##s, XFER_READY_EVENT_##e, XFER_VERDICT_##v, STR_(h)},
    XFER_READY_TABLE(C_)
#undef C_
};
static const tedge ready_edges[] = {
#define G_(f, e, t)                                                           \
    {XFER_READY_STATE_##f, XFER_READY_EVENT_##e, XFER_READY_STATE_##t},
    XFER_READY_EDGES(G_)
#undef G_
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* One machine as the header lists it. */
typedef struct tmachine {
    unsigned id;
    const char *name;
    unsigned nstates, nevents;
    const char *const *states, *const *events;
    const tcell *cells;
    size_t ncells;
    const tedge *edges;
    size_t nedges;
} tmachine;

static const tmachine M[] = {
    {XFER_MACHINE_TRANSFER, "transfer", XFER_TRANSFER_STATE_COUNT_,
     XFER_TRANSFER_EVENT_COUNT_, transfer_states, transfer_events,
     transfer_cells, NELEM(transfer_cells), transfer_edges,
     NELEM(transfer_edges)},
    {XFER_MACHINE_RESERVATION, "reservation", XFER_RESV_STATE_COUNT_,
     XFER_RESV_EVENT_COUNT_, resv_states, resv_events, resv_cells,
     NELEM(resv_cells), resv_edges, NELEM(resv_edges)},
    {XFER_MACHINE_READINESS, "readiness", XFER_READY_STATE_COUNT_,
     XFER_READY_EVENT_COUNT_, ready_states, ready_events, ready_cells,
     NELEM(ready_cells), ready_edges, NELEM(ready_edges)},
};

static bool listed_edge(const tmachine *m, unsigned f, unsigned e, unsigned t)
{
    for (size_t i = 0; i < m->nedges; i++)
        if (m->edges[i].from == f && m->edges[i].event == e &&
            m->edges[i].to == t)
            return true;
    return false;
}

static unsigned listed_verdict(const tmachine *m, unsigned s, unsigned e)
{
    for (size_t i = 0; i < m->ncells; i++)
        if (m->cells[i].state == s && m->cells[i].event == e)
            return m->cells[i].verdict;
    return XFER_VERDICT_COUNT_;
}

/* Occurrences of `needle` in `hay`. */
static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p;
         p = strstr(p + strlen(needle), needle))
        n++;
    return n;
}

/* The whole diagram of machine `m`, malloc'ed; *n its length. */
static char *dot_of(unsigned m, int *n)
{
    *n = xfer_fsm_dot(m, NULL, 0);
    ck_assert_int_gt(*n, 0);
    char *buf = malloc((size_t)*n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(xfer_fsm_dot(m, buf, (size_t)*n + 1), *n);
    return buf;
}

START_TEST(test_fsm_tables_every_cell_once)
{
    for (size_t k = 0; k < NELEM(M); k++) {
        const tmachine *m = &M[k];
        unsigned seen[MAX_STATES][MAX_EVENTS] = {{0}};
        ck_assert_uint_le(m->nstates, MAX_STATES);
        ck_assert_uint_le(m->nevents, MAX_EVENTS);
        ck_assert_uint_eq(xfer_fsm_nstates(m->id), m->nstates);
        ck_assert_uint_eq(xfer_fsm_nevents(m->id), m->nevents);
        for (size_t i = 0; i < m->ncells; i++) {
            const tcell *c = &m->cells[i];
            ck_assert_uint_lt(c->state, m->nstates);
            ck_assert_uint_lt(c->event, m->nevents);
            seen[c->state][c->event]++;
            /* what the views report is what the table says */
            ck_assert_uint_eq(xfer_fsm_verdict(m->id, c->state, c->event),
                              c->verdict);
            ck_assert_str_eq(xfer_fsm_handler_name(m->id, c->state, c->event),
                             c->handler);
            /* a TRANSITION runs a handler; an ILLEGAL cell runs none */
            if (c->verdict == XFER_VERDICT_TRANSITION)
                ck_assert_str_ne(c->handler, "none");
            if (c->verdict == XFER_VERDICT_ILLEGAL)
                ck_assert_str_eq(c->handler, "none");
        }
        for (unsigned s = 0; s < m->nstates; s++)
            for (unsigned e = 0; e < m->nevents; e++) {
                if (seen[s][e] != 1)
                    ck_abort_msg("%s: cell (%s, %s) listed %u times",
                                 m->name, m->states[s], m->events[e],
                                 seen[s][e]);
                ck_assert_str_ne(xfer_fsm_handler_name(m->id, s, e),
                                 "(missing)");
            }
        ck_assert_uint_eq(m->ncells, (size_t)m->nstates * m->nevents);
    }
}
END_TEST

/* Every cell of every machine, ILLEGAL ones included, is run by a real
 * function of its dispatcher, the one its token names; a token stands for
 * one handler per machine (cells sharing a token share the function). */
START_TEST(test_fsm_tables_every_cell_has_a_handler)
{
    for (size_t k = 0; k < NELEM(M); k++) {
        const tmachine *m = &M[k];
        unsigned running = 0;
        for (size_t i = 0; i < m->ncells; i++) {
            const tcell *c = &m->cells[i];
            const char *h = xfer_fsm_handler_name(m->id, c->state, c->event);
            if (strcmp(h, "(missing)") == 0)
                ck_abort_msg("%s: cell (%s, %s) has no handler function "
                             "(token %s)", m->name, m->states[c->state],
                             m->events[c->event], c->handler);
            ck_assert_str_eq(h, c->handler);
            /* a token is a C identifier: h_<token> is the function */
            ck_assert(strspn(h, "abcdefghijklmnopqrstuvwxyz_") == strlen(h));
            if (strcmp(h, "none") != 0)
                running++;
        }
        /* the machine acts somewhere: not every cell is a no-op */
        ck_assert_uint_gt(running, 0);
    }
    /* the transfer machine's rows without a record (NEW, TOMBSTONED) run
     * handlers of their own, not the container inline */
    ck_assert_str_eq(xfer_fsm_handler_name(XFER_MACHINE_TRANSFER,
                                           XFER_TRANSFER_STATE_TOMBSTONED,
                                           XFER_TRANSFER_EVENT_USER_CANCEL),
                     "refresh");
    ck_assert_str_eq(xfer_fsm_handler_name(XFER_MACHINE_TRANSFER,
                                           XFER_TRANSFER_STATE_NEW,
                                           XFER_TRANSFER_EVENT_USER_CANCEL),
                     "preempt");
}
END_TEST

START_TEST(test_fsm_tables_edges_between_real_states)
{
    for (size_t k = 0; k < NELEM(M); k++) {
        const tmachine *m = &M[k];
        for (size_t i = 0; i < m->nedges; i++) {
            const tedge *g = &m->edges[i];
            ck_assert_uint_lt(g->from, m->nstates);
            ck_assert_uint_lt(g->to, m->nstates);
            ck_assert_uint_lt(g->event, m->nevents);
            ck_assert_uint_ne(g->from, g->to); /* self-loops are not edges */
            /* only a cell that acts can change the state: TRANSITION, or
             * DEFER into a pending state; IGNORE and ILLEGAL never do */
            unsigned v = listed_verdict(m, g->from, g->event);
            if (v != XFER_VERDICT_TRANSITION && v != XFER_VERDICT_DEFER)
                ck_abort_msg("%s: edge %s --%s--> %s leaves a cell that is "
                             "neither TRANSITION nor DEFER", m->name,
                             m->states[g->from],
                             m->events[g->event], m->states[g->to]);
            for (size_t j = 0; j < i; j++)
                ck_assert(memcmp(&m->edges[j], g, sizeof *g) != 0);
        }
        /* xfer_fsm_edge_ok says yes exactly for the listed edges */
        for (unsigned f = 0; f < m->nstates; f++)
            for (unsigned e = 0; e < m->nevents; e++)
                for (unsigned t = 0; t < m->nstates; t++)
                    ck_assert_int_eq(xfer_fsm_edge_ok(m->id, f, e, t),
                                     listed_edge(m, f, e, t));
    }
}
END_TEST

START_TEST(test_fsm_tables_every_state_reachable)
{
    for (size_t k = 0; k < NELEM(M); k++) {
        const tmachine *m = &M[k];
        bool reached[MAX_STATES] = {true}; /* state 0: the implicit start */
        for (bool grew = true; grew;) {
            grew = false;
            for (size_t i = 0; i < m->nedges; i++)
                if (reached[m->edges[i].from] && !reached[m->edges[i].to])
                    reached[m->edges[i].to] = grew = true;
        }
        for (unsigned s = 0; s < m->nstates; s++)
            if (!reached[s])
                ck_abort_msg("%s: state %s cannot be reached from %s",
                             m->name, m->states[s], m->states[0]);
    }
}
END_TEST

START_TEST(test_fsm_tables_names_round_trip)
{
    for (size_t k = 0; k < NELEM(M); k++) {
        const tmachine *m = &M[k];
        ck_assert_str_eq(xfer_machine_name(m->id), m->name);
        for (unsigned s = 0; s < m->nstates; s++) {
            const char *n = xfer_fsm_state_name(m->id, s);
            ck_assert_str_eq(n, m->states[s]);
            for (unsigned o = 0; o < m->nstates; o++)
                ck_assert_int_eq(!strcmp(n, xfer_fsm_state_name(m->id, o)),
                                 o == s);
        }
        for (unsigned e = 0; e < m->nevents; e++) {
            const char *n = xfer_fsm_event_name(m->id, e);
            ck_assert_str_eq(n, m->events[e]);
            for (unsigned o = 0; o < m->nevents; o++)
                ck_assert_int_eq(!strcmp(n, xfer_fsm_event_name(m->id, o)),
                                 o == e);
        }
    }
    static const char *const verdicts[] = {"TRANSITION", "IGNORE", "DEFER",
                                           "ILLEGAL"};
    ck_assert_uint_eq(NELEM(verdicts), XFER_VERDICT_COUNT_);
    for (unsigned v = 0; v < XFER_VERDICT_COUNT_; v++)
        ck_assert_str_eq(xfer_verdict_name(v), verdicts[v]);
    for (unsigned a = 0; a < XFER_MACHINE_COUNT_; a++)
        for (unsigned b = 0; b < XFER_MACHINE_COUNT_; b++)
            ck_assert_int_eq(!strcmp(xfer_machine_name(a),
                                     xfer_machine_name(b)), a == b);
    for (unsigned a = 0; a < XFER_NOTE_COUNT_; a++) {
        ck_assert_str_ne(xfer_note_name(a), "?");
        for (unsigned b = 0; b < XFER_NOTE_COUNT_; b++)
            ck_assert_int_eq(!strcmp(xfer_note_name(a), xfer_note_name(b)),
                             a == b);
    }
}
END_TEST

START_TEST(test_fsm_tables_dot_draws_the_table)
{
    for (size_t k = 0; k < NELEM(M); k++) {
        const tmachine *m = &M[k];
        int n;
        char *dot = dot_of(m->id, &n);
        ck_assert_uint_eq(strlen(dot), (size_t)n);
        char line[160];
        snprintf(line, sizeof line, "digraph %s {\n", m->name);
        ck_assert(strncmp(dot, line, strlen(line)) == 0);
        ck_assert_str_eq(dot + n - 2, "}\n");
        for (unsigned s = 0; s < m->nstates; s++) {
            snprintf(line, sizeof line, "\n  %s;\n", m->states[s]);
            ck_assert_uint_eq(count_of(dot, line), 1);
        }
        for (size_t i = 0; i < m->nedges; i++) {
            const tedge *g = &m->edges[i];
            snprintf(line, sizeof line, "\n  %s -> %s [label=\"%s\"];\n",
                     m->states[g->from], m->states[g->to],
                     m->events[g->event]);
            ck_assert_uint_eq(count_of(dot, line), 1);
        }
        size_t dashed = 0;
        for (size_t i = 0; i < m->ncells; i++) {
            const tcell *c = &m->cells[i];
            if (c->verdict == XFER_VERDICT_ILLEGAL)
                continue;
            dashed++;
            snprintf(line, sizeof line,
                     "\n  %s -> %s [style=dashed,label=\"%s\"];\n",
                     m->states[c->state], m->states[c->state],
                     m->events[c->event]);
            ck_assert_uint_eq(count_of(dot, line), 1);
        }
        ck_assert_uint_eq(count_of(dot, "style=dashed"), dashed);
        ck_assert_uint_eq(count_of(dot, " -> "), dashed + m->nedges);
        free(dot);
    }
}
END_TEST

START_TEST(test_fsm_tables_dot_truncates_like_snprintf)
{
    int n;
    char *full = dot_of(XFER_MACHINE_RESERVATION, &n);
    size_t lens[] = {1, 2, 17, (size_t)n / 2, (size_t)n, (size_t)n + 1};
    for (size_t i = 0; i < NELEM(lens); i++) {
        size_t len = lens[i];
        char *buf = malloc(len + 8);
        ck_assert_ptr_nonnull(buf);
        memset(buf, 0x5a, len + 8);
        ck_assert_int_eq(xfer_fsm_dot(XFER_MACHINE_RESERVATION, buf, len), n);
        size_t want = len - 1 < (size_t)n ? len - 1 : (size_t)n;
        ck_assert_uint_eq(strlen(buf), want);
        ck_assert(memcmp(buf, full, want) == 0);
        for (size_t j = len; j < len + 8; j++)
            ck_assert_int_eq(buf[j], 0x5a); /* nothing past len */
        free(buf);
    }
    free(full);
}
END_TEST

START_TEST(test_fsm_tables_out_of_range)
{
    const unsigned bad[] = {XFER_MACHINE_INPUT, XFER_MACHINE_COUNT_, 99,
                            UINT_MAX};
    char buf[32];
    for (size_t i = 0; i < NELEM(bad); i++) {
        unsigned m = bad[i];
        ck_assert_uint_eq(xfer_fsm_nstates(m), 0);
        ck_assert_uint_eq(xfer_fsm_nevents(m), 0);
        ck_assert_str_eq(xfer_fsm_state_name(m, 0), "?");
        ck_assert_str_eq(xfer_fsm_event_name(m, 0), "?");
        ck_assert_uint_eq(xfer_fsm_verdict(m, 0, 0), XFER_VERDICT_ILLEGAL);
        ck_assert_str_eq(xfer_fsm_handler_name(m, 0, 0), "(missing)");
        ck_assert(!xfer_fsm_edge_ok(m, 0, 0, 1));
        ck_assert_int_eq(xfer_fsm_dot(m, buf, sizeof buf),
                         XFER_ERR_INVALID_ARG);
    }
    for (size_t k = 0; k < NELEM(M); k++) {
        const tmachine *m = &M[k];
        ck_assert_str_eq(xfer_fsm_state_name(m->id, m->nstates), "?");
        ck_assert_str_eq(xfer_fsm_event_name(m->id, m->nevents), "?");
        ck_assert_str_eq(xfer_fsm_state_name(m->id, UINT_MAX), "?");
        ck_assert_uint_eq(xfer_fsm_verdict(m->id, m->nstates, 0),
                          XFER_VERDICT_ILLEGAL);
        ck_assert_uint_eq(xfer_fsm_verdict(m->id, 0, m->nevents),
                          XFER_VERDICT_ILLEGAL);
        ck_assert_str_eq(xfer_fsm_handler_name(m->id, 0, m->nevents),
                         "(missing)");
        /* edge lookups past the table, also ones that alias a listed edge
         * modulo 256 */
        const tedge *g = &m->edges[0];
        ck_assert(xfer_fsm_edge_ok(m->id, g->from, g->event, g->to));
        ck_assert(!xfer_fsm_edge_ok(m->id, g->from + 256, g->event, g->to));
        ck_assert(!xfer_fsm_edge_ok(m->id, g->from, g->event + 256, g->to));
        ck_assert(!xfer_fsm_edge_ok(m->id, g->from, g->event, g->to + 256));
        ck_assert_int_eq(xfer_fsm_dot(m->id, NULL, 5), XFER_ERR_INVALID_ARG);
    }
    ck_assert_str_eq(xfer_machine_name(XFER_MACHINE_COUNT_), "?");
    ck_assert_str_eq(xfer_verdict_name(XFER_VERDICT_COUNT_), "?");
    ck_assert_str_eq(xfer_note_name(XFER_NOTE_COUNT_), "?");
    ck_assert_str_eq(xfer_note_name(UINT_MAX), "?");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fsm_tables");
    TCase *tc = tcase_create("fsm_tables");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_fsm_tables_every_cell_once);
    tcase_add_test(tc, test_fsm_tables_every_cell_has_a_handler);
    tcase_add_test(tc, test_fsm_tables_edges_between_real_states);
    tcase_add_test(tc, test_fsm_tables_every_state_reachable);
    tcase_add_test(tc, test_fsm_tables_names_round_trip);
    tcase_add_test(tc, test_fsm_tables_dot_draws_the_table);
    tcase_add_test(tc, test_fsm_tables_dot_truncates_like_snprintf);
    tcase_add_test(tc, test_fsm_tables_out_of_range);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
