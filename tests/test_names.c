/*
 * tests/test_names.c - the names of the public enums (fsm/names.c): each
 * list's name function returns the list's own token for every value, "?"
 * outside it, and the values of every list run 0, 1, ... in order up to
 * its COUNT_, so nothing has been renumbered or left out.
 *
 * The test expands the same X-macro lists itself, so it checks the names
 * as the headers write them.  Public API only (libxfer.so).
 */
#include <check.h>
#include <limits.h>
#include <string.h>

#include "testutil.h"
#include "xfer/core.h"
#include "xfer/readiness.h"
#include "xfer/shard.h"
#include "xfer/shard_op.h"
#include "xfer/trace.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

typedef struct entry {
    unsigned value;
    const char *name;
} entry;

static const entry phases[] = {
#define X_(n, v) {v, #n},
    XFER_PHASES(X_)
#undef X_
};
static const entry actions[] = {
#define X_(n, v) {v, #n},
    XFER_ACTION_KINDS(X_)
#undef X_
};
static const entry ops[] = {
#define X_(n, v) {v, #n},
    XFER_OP_KINDS(X_)
#undef X_
};
static const entry ready_actions[] = {
#define X_(n, v) {v, #n},
    XFER_READY_ACTION_KINDS(X_)
#undef X_
};
static const entry shard_events[] = {
#define X_(n, v) {v, #n},
    XFER_SHARD_EVENT_KINDS(X_)
#undef X_
};
static const entry verdicts[] = {
#define X_(n, v) {v, #n},
    XFER_VERDICTS(X_)
#undef X_
};
static const entry notes[] = {
#define X_(n, v) {v, #n},
    XFER_NOTES(X_)
#undef X_
};
static const entry machines[] = {
#define X_(n, v, s) {v, s},
    XFER_MACHINES(X_)
#undef X_
};

typedef struct list {
    const char *what;
    const entry *e;
    size_t n;
    unsigned count; /* the enum's COUNT_ */
    const char *(*name)(unsigned);
} list;

static const list lists[] = {
    {"phase", phases, NELEM(phases), XFER_PHASE_COUNT_, xfer_phase_name},
    {"action", actions, NELEM(actions), XFER_ACT_COUNT_, xfer_action_name},
    {"op", ops, NELEM(ops), XFER_OP_COUNT_, xfer_op_name},
    {"ready action", ready_actions, NELEM(ready_actions),
     XFER_READY_ACT_COUNT_, xfer_ready_action_name},
    {"shard event", shard_events, NELEM(shard_events), XFER_SHARD_EV_COUNT_,
     xfer_shard_event_name},
    {"verdict", verdicts, NELEM(verdicts), XFER_VERDICT_COUNT_,
     xfer_verdict_name},
    {"note", notes, NELEM(notes), XFER_NOTE_COUNT_, xfer_note_name},
    {"machine", machines, NELEM(machines), XFER_MACHINE_COUNT_,
     xfer_machine_name},
};

START_TEST(test_names_every_value_named_by_its_list)
{
    for (size_t l = 0; l < NELEM(lists); l++) {
        const list *L = &lists[l];
        ck_assert_uint_eq(L->n, L->count);
        for (size_t i = 0; i < L->n; i++) {
            /* values run 0, 1, ... in list order: none renumbered */
            if (L->e[i].value != i)
                ck_abort_msg("%s %s has value %u at position %zu", L->what,
                             L->e[i].name, L->e[i].value, i);
            ck_assert_str_eq(L->name(L->e[i].value), L->e[i].name);
            for (size_t j = 0; j < i; j++)
                ck_assert_str_ne(L->name(L->e[j].value), L->e[i].name);
        }
        ck_assert_str_eq(L->name(L->count), "?");
        ck_assert_str_eq(L->name(UINT_MAX), "?");
    }
}
END_TEST

/* Values written into trace files and onto the wire, spelled out: a list
 * that was reordered fails here even if it stays dense. */
START_TEST(test_names_values_never_change)
{
    ck_assert_int_eq(XFER_ACT_RELEASE_STAGING, 5);
    ck_assert_int_eq(XFER_ACT_SHUTDOWN_DONE, 7);
    ck_assert_str_eq(xfer_action_name(6), "COMPLETE");
    ck_assert_int_eq(XFER_PHASE_COMPLETING, 3);
    ck_assert_int_eq(XFER_PHASE_SUBMIT, 5);
    ck_assert_str_eq(xfer_phase_name(5), "SUBMIT");
    ck_assert_int_eq(XFER_OP_CANCEL, 3);
    ck_assert_str_eq(xfer_op_name(1), "WRITE");
    /* an action that sends an op has that op's value */
    ck_assert_int_eq(XFER_ACT_RESERVE, XFER_OP_RESERVE);
    ck_assert_int_eq(XFER_ACT_CANCEL, XFER_OP_CANCEL);
    ck_assert_int_eq(XFER_READY_ACT_CANCEL, 2);
    ck_assert_int_eq(XFER_SHARD_EV_EXPIRED, 2);
    ck_assert_int_eq(XFER_NOTE_UNKNOWN_REPLY, 6);
    ck_assert_int_eq(XFER_MACHINE_CONFIG, 6);
    ck_assert_str_eq(xfer_machine_name(XFER_MACHINE_RESERVATION),
                     "reservation");
    ck_assert_int_eq(XFER_SUB_GAVE_UP, 4);
}
END_TEST

/* The words of a transfer view's columns: one list, a word per op. */
START_TEST(test_names_sub_states_per_op)
{
    static const struct {
        unsigned op, sub;
        const char *word;
    } want[] = {
        {XFER_OP_RESERVE, XFER_SUB_NONE, "NONE"},
        {XFER_OP_RESERVE, XFER_SUB_PENDING, "PENDING"},
        {XFER_OP_RESERVE, XFER_SUB_OK, "OK"},
        {XFER_OP_WRITE, XFER_SUB_OK, "DONE"},
        {XFER_OP_COMMIT, XFER_SUB_OK, "ACKED"},
        {XFER_OP_CANCEL, XFER_SUB_OK, "OK"},
        {XFER_OP_COMMIT, XFER_SUB_FAILED, "FAILED"},
        {XFER_OP_CANCEL, XFER_SUB_GAVE_UP, "GAVE_UP"},
        /* only a cancel gives up */
        {XFER_OP_RESERVE, XFER_SUB_GAVE_UP, "?"},
        {XFER_OP_WRITE, XFER_SUB_GAVE_UP, "?"},
        {XFER_OP_COMMIT, XFER_SUB_GAVE_UP, "?"},
        /* out of range */
        {XFER_OP_CANCEL, XFER_SUB_COUNT_, "?"},
        {XFER_OP_COUNT_, XFER_SUB_OK, "?"},
        {UINT_MAX, UINT_MAX, "?"},
    };
    for (size_t i = 0; i < NELEM(want); i++)
        ck_assert_str_eq(xfer_sub_name(want[i].op, want[i].sub),
                         want[i].word);
    /* within one op's column the words are distinct */
    for (unsigned op = 0; op < XFER_OP_COUNT_; op++)
        for (unsigned a = 0; a < XFER_SUB_COUNT_; a++)
            for (unsigned b = 0; b < a; b++)
                if (strcmp(xfer_sub_name(op, a), "?") != 0)
                    ck_assert_str_ne(xfer_sub_name(op, a),
                                     xfer_sub_name(op, b));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("names");
    TCase *tc = tcase_create("names");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_names_every_value_named_by_its_list);
    tcase_add_test(tc, test_names_values_never_change);
    tcase_add_test(tc, test_names_sub_states_per_op);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
