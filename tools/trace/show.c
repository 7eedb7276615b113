/*
 * tools/trace/show.c - `xfer-trace show ID FILE...`: the timeline of one
 * transfer id, one line per step, action or note, with the shard it
 * concerns, across every machine (producer transfer, consumer reservation
 * per shard, readiness) and every attempt of the id.
 *
 * Several files (one per process: producer, each shard, consumer) are
 * merged by time (merge.c), and each line then says which process wrote
 * it (a "from" column).  One file prints as it always did.
 *
 * Times are relative to the first record of the id.  The inputs are left
 * out: each one is shown by the step it caused.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "xtrace.h"

static void step_text(const xfer_trace_rec *r, char *buf, size_t len)
{
    unsigned m = r->machine;
    const char *old = xfer_fsm_state_name(m, r->old_state);
    const char *nw = xfer_fsm_state_name(m, r->new_state);
    const char *ev = xfer_fsm_event_name(m, r->event);
    int n;
    if (r->old_state != r->new_state)
        n = snprintf(buf, len, "%s -> %s on %s", old, nw, ev);
    else
        n = snprintf(buf, len, "%s on %s", old, ev);
    size_t at = n > 0 ? (size_t)n : 0;
    if (r->verdict != XFER_VERDICT_TRANSITION && at < len)
        at += (size_t)snprintf(buf + at, len - at, " [%s]",
                               xfer_verdict_name(r->verdict));
    if (m == XFER_MACHINE_TRANSFER && r->verdict == XFER_VERDICT_TRANSITION && at < len)
        at += (size_t)snprintf(buf + at, len - at, ", pending %" PRIu64,
                               r->arg1);
    if (r->error && at < len)
        snprintf(buf + at, len - at, ", error %s", xfer_err_name(r->error));
}

static void action_text(const xfer_trace_rec *r, char *buf, size_t len)
{
    switch (r->event) {
    case XFER_ACT_RESERVE:
    case XFER_ACT_WRITE:
    case XFER_ACT_COMMIT:
    case XFER_ACT_CANCEL:
    case XFER_ACT_EAGER:
        if (r->arg1 >> 32) /* a stream's run */
            snprintf(buf, len,
                     "send %s, part %" PRIu64 ", len %" PRIu64
                     ", resv %" PRIu64,
                     xt_op_name(xfer_action_op(r->event)), r->arg1 >> 32,
                     r->arg1 & 0xffffffffu, r->arg0);
        else
            snprintf(buf, len, "send %s, len %" PRIu64 ", resv %" PRIu64,
                     xt_op_name(xfer_action_op(r->event)), r->arg1, r->arg0);
        return;
    case XFER_ACT_RELEASE_PART:
        if (r->error == 0)
            snprintf(buf, len, "release part %" PRIu64, r->arg1 >> 32);
        else
            snprintf(buf, len, "release part %" PRIu64 ", %s",
                     r->arg1 >> 32, xfer_err_name(r->error));
        return;
    case XFER_ACT_ABORT:
        snprintf(buf, len, "abort %s", xt_op_name(r->old_state));
        return;
    case XFER_ACT_COMPLETE:
        if (r->error == 0)
            snprintf(buf, len, "complete OK");
        else
            snprintf(buf, len,
                     "complete %s in %s, failed shards 0x%" PRIx64,
                     xfer_err_name(r->error), xfer_phase_name(r->new_state),
                     r->arg2);
        return;
    default:
        snprintf(buf, len, "%s", xfer_action_name(r->event));
        return;
    }
}

static bool show_line(const xfer_trace_rec *r, uint64_t t0, bool from)
{
    char what[256], d[32], shard[8];
    const char *kind = xfer_machine_name(r->machine);
    switch (r->machine) {
    case XFER_MACHINE_TRANSFER:
    case XFER_MACHINE_RESERVATION:
    case XFER_MACHINE_READINESS:
        step_text(r, what, sizeof what);
        break;
    case XFER_MACHINE_ACTION:
        action_text(r, what, sizeof what);
        break;
    case XFER_MACHINE_NOTE:
        snprintf(what, sizeof what, "%s%s%s", xfer_note_name(r->event),
                 r->error ? ", error " : "",
                 r->error ? xfer_err_name(r->error) : "");
        break;
    default:
        return false;
    }
    if (r->shard == XFER_SHARD_NONE)
        snprintf(shard, sizeof shard, "-");
    else
        snprintf(shard, sizeof shard, "%u", (unsigned)r->shard);
    xt_fmt_dur(d, sizeof d, r->time_ns - t0);
    if (from) {
        char src[24];
        printf("  +%-14s %-9s %-5s %-7" PRIu32 " %-11s %s\n", d,
               xt_src_name(r, src, sizeof src), shard, r->attempt, kind,
               what);
        return true;
    }
    printf("  +%-14s %-5s %-7" PRIu32 " %-11s %s\n", d, shard, r->attempt,
           kind, what);
    return true;
}

static void show_header(const xt_file *f, uint64_t id, uint64_t t0,
                        bool from)
{
    xt_model m;
    char at[32];
    xt_fmt_dur(at, sizeof at, t0);
    printf("transfer %" PRIu64 ", first record at trace time %s\n", id, at);
    if (xt_model_build(&m, f) == 0) {
        for (size_t i = 0; i < m.n; i++) {
            const xt_xfer *x = m.x[i];
            if (x->id != id)
                continue;
            char dur[32];
            xt_fmt_dur(dur, sizeof dur,
                       (x->ended ? x->end_ns : f->t_last) - x->start_ns);
            printf("  attempt %" PRIu32 ": %u shards, %s %s after %s\n",
                   x->attempt, (unsigned)x->nshards,
                   x->ended ? (x->status ? "failed" : "ok") : "open in",
                   x->ended ? (x->status ? xfer_err_name(x->status) : "")
                            : xfer_fsm_state_name(XFER_MACHINE_TRANSFER, x->state),
                   dur);
        }
    }
    xt_model_free(&m);
    if (from)
        printf("  %-15s %-9s %-5s %-7s %-11s %s\n", "time", "from", "shard",
               "attempt", "machine", "what");
    else
        printf("  %-15s %-5s %-7s %-11s %s\n", "time", "shard", "attempt",
               "machine", "what");
}

static bool parse_id(const char *s, uint64_t *id)
{
    char *end;
    if (!*s || *s == '-')
        return false;
    *id = strtoull(s, &end, 0);
    return *end == '\0' && *id != 0;
}

static const cli_flag xt_cmd_show_flags[] = {CLI_HELP, {NULL, 0, NULL, NULL, 0}};
static const cli xt_cmd_show_cli = {.prog = "xfer-trace show", .synopsis = "ID FILE...",
                           .intro = "the timeline of one transfer, merged over the files\n",
                           .flags = xt_cmd_show_flags};

int xt_cmd_show(int argc, char **argv)
{
    if (xt_args(&xt_cmd_show_cli, &argc, &argv))
        return XT_USAGE;
    if (argc < 2)
        return xt_usage("%s", "show takes ID FILE...");
    for (int i = 0; i < argc; i++)
        if (argv[i][0] == '-')
            return xt_usage("unknown flag '%s'", argv[i]);
    uint64_t id;
    if (!parse_id(argv[0], &id))
        return xt_usage("bad transfer id '%s'", argv[0]);
    xt_file f;
    bool from = argc > 2;
    if (xt_load_many(argc - 1, argv + 1, &f))
        return XT_BADINPUT;
    size_t first = f.n;
    for (size_t i = 0; i < f.n && first == f.n; i++)
        if (f.recs[i].id == id && f.recs[i].machine != XFER_MACHINE_INPUT &&
            f.recs[i].machine != XFER_MACHINE_CONFIG)
            first = i;
    if (first == f.n) {
        fprintf(stderr, "xfer-trace: %s%s: no records of transfer %" PRIu64
                "\n", argv[1], from ? " and the other files" : "", id);
        xt_file_free(&f);
        return XT_BADINPUT;
    }
    uint64_t t0 = f.recs[first].time_ns;
    show_header(&f, id, t0, from);
    for (size_t i = first; i < f.n; i++)
        if (f.recs[i].id == id)
            show_line(&f.recs[i], t0, from);
    xt_file_free(&f);
    return XT_OK;
}
