/*
 * tools/trace/summary.c - `xfer-trace summary FILE`: what happened in a
 * trace, in counts: transfers per final state, per error and per shard,
 * late events rejected, tombstones dropped, consumer-side machines.
 *
 * Every list is printed in enum order (never hash order), so the output of
 * one trace is the same on every run and can be compared with a golden
 * file.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "xtrace.h"

#define NERR 128 /* error codes 0..-127 (fatal band folded in) */

typedef struct shard_counts {
    uint64_t sent[XFER_OP_COUNT_], failed[XFER_OP_COUNT_], aborts;
} shard_counts;

typedef struct summary {
    uint64_t per_machine[XFER_MACHINE_COUNT_ + 1];
    uint64_t notes[XFER_NOTE_COUNT_];
    uint64_t illegal[3], ignored[3];
    uint64_t resv_into[XFER_RESV_STATE_COUNT_], ready_into[XFER_READY_STATE_COUNT_];
    uint64_t op_errors[NERR];
    uint64_t rejected_submits;
    shard_counts shards[XFER_MAX_SHARDS];
} summary;

static unsigned err_slot(int32_t err)
{
    return err <= 0 && err > -NERR ? (unsigned)-err : NERR - 1;
}

static void count_step(summary *s, const xfer_trace_rec *r)
{
    unsigned m = r->machine;
    if (r->verdict == XFER_VERDICT_ILLEGAL)
        s->illegal[m]++;
    if (r->verdict == XFER_VERDICT_IGNORE)
        s->ignored[m]++;
    if (r->old_state == r->new_state)
        return;
    if (m == XFER_MACHINE_RESERVATION && r->new_state < XFER_RESV_STATE_COUNT_)
        s->resv_into[r->new_state]++;
    if (m == XFER_MACHINE_READINESS && r->new_state < XFER_READY_STATE_COUNT_)
        s->ready_into[r->new_state]++;
}

static void count_rec(summary *s, const xfer_trace_rec *r)
{
    s->per_machine[r->machine < XFER_MACHINE_COUNT_ ? r->machine
                                              : XFER_MACHINE_COUNT_]++;
    if (r->machine <= XFER_MACHINE_READINESS)
        count_step(s, r);
    if (r->machine == XFER_MACHINE_TRANSFER && r->event == XFER_TRANSFER_EVENT_SUBMIT &&
        r->error != 0)
        s->rejected_submits++;
    if (r->machine == XFER_MACHINE_NOTE && r->event < XFER_NOTE_COUNT_)
        s->notes[r->event]++;
    if (r->shard >= XFER_MAX_SHARDS)
        return;
    shard_counts *sc = &s->shards[r->shard];
    if (r->machine == XFER_MACHINE_ACTION &&
        xfer_action_op(r->event) < XFER_OP_COUNT_)
        sc->sent[xfer_action_op(r->event)]++;
    if (r->machine == XFER_MACHINE_ACTION && r->event == XFER_ACT_ABORT)
        sc->aborts++;
    if (r->machine == XFER_MACHINE_INPUT && xt_result_event(r->event) &&
        r->error != 0 && r->old_state < XFER_OP_COUNT_) {
        sc->failed[r->old_state]++;
        s->op_errors[err_slot(r->error)]++;
    }
}

static void print_header(const xt_file *f, const summary *s)
{
    char span[32];
    xt_fmt_dur(span, sizeof span, f->t_last - f->t_first);
    printf("trace %s: %s v%u, label \"%s\", file index %" PRIu32 "%s\n",
           f->path, f->info.format ? "jsonl" : "binary",
           (unsigned)f->info.version, f->info.label, f->info.file_index,
           f->first_index ? " (continuation of a rotated trace)" : "");
    if (f->nfiles > 1)
        printf("read %" PRIu32 " files: %s.%" PRIu32 " (index %" PRIu32
               ") .. %s\n",
               f->nfiles, f->path, f->nfiles - 1, f->first_index, f->path);
    printf("records: %zu over %s\n", f->n, span);
    for (unsigned m = 0; m <= XFER_MACHINE_COUNT_; m++)
        if (s->per_machine[m])
            printf("  %-12s %" PRIu64 "\n",
                   m < XFER_MACHINE_COUNT_ ? xfer_machine_name(m) : "unknown",
                   s->per_machine[m]);
}

/* Final state of one transfer as a label: "ok", "TIMEOUT in WRITING",
 * "open in RESERVING". */
static void final_label(const xt_xfer *x, char *buf, size_t len)
{
    if (!x->ended)
        snprintf(buf, len, "open in %s",
                 xfer_fsm_state_name(XFER_MACHINE_TRANSFER, x->state));
    else if (x->status == 0)
        snprintf(buf, len, "ok");
    else
        snprintf(buf, len, "%s in %s", xfer_err_name(x->status),
                 xfer_phase_name(x->phase));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void print_transfers(const xt_model *m)
{
    uint64_t ok = 0, bad = 0, open = 0;
    char **labels = calloc(m->n ? m->n : 1, sizeof *labels);
    for (size_t i = 0; labels && i < m->n; i++) {
        const xt_xfer *x = m->x[i];
        open += !x->ended;
        ok += x->ended && x->status == 0;
        bad += x->ended && x->status != 0;
        labels[i] = malloc(64);
        if (labels[i])
            final_label(x, labels[i], 64);
        else
            labels[i] = strdup("?");
    }
    printf("transfers: %zu submitted, %" PRIu64 " ok, %" PRIu64
           " failed or cancelled, %" PRIu64 " open\n",
           m->n, ok, bad, open);
    if (!labels || m->n == 0) {
        free(labels);
        return;
    }
    printf("final state:\n");
    qsort(labels, m->n, sizeof *labels, cmp_str);
    for (size_t i = 0, run = 1; i < m->n; i++, run++) {
        if (i + 1 < m->n && labels[i] && labels[i + 1] &&
            strcmp(labels[i], labels[i + 1]) == 0)
            continue;
        printf("  %-28s %zu\n", labels[i] ? labels[i] : "?", run);
        run = 0;
    }
    for (size_t i = 0; i < m->n; i++)
        free(labels[i]);
    free(labels);
}

static void print_errors(const xt_model *m, const summary *s)
{
    uint64_t st[NERR] = {0};
    for (size_t i = 0; i < m->n; i++)
        if (m->x[i]->ended && m->x[i]->status)
            st[err_slot(m->x[i]->status)]++;
    printf("completion errors:\n");
    for (unsigned e = 1; e < NERR; e++)
        if (st[e])
            printf("  %-28s %" PRIu64 "\n", xfer_err_name(-(int)e), st[e]);
    printf("shard op errors:\n");
    for (unsigned e = 1; e < NERR; e++)
        if (s->op_errors[e])
            printf("  %-28s %" PRIu64 "\n", xfer_err_name(-(int)e),
                   s->op_errors[e]);
}

/* The eager column is printed only for a trace that has eager ops, so
 * the table of every other trace reads as it did. */
static bool any_eager(const summary *s)
{
    for (unsigned k = 0; k < XFER_MAX_SHARDS; k++)
        if (s->shards[k].sent[XFER_OP_EAGER])
            return true;
    return false;
}

static void print_shards(const summary *s)
{
    bool eager = any_eager(s);
    printf("per shard:   reserve   write  commit  cancel  failed  aborts%s\n",
           eager ? "   eager" : "");
    for (unsigned k = 0; k < XFER_MAX_SHARDS; k++) {
        const shard_counts *c = &s->shards[k];
        uint64_t any = c->aborts, failed = 0;
        for (unsigned o = 0; o < XFER_OP_COUNT_; o++) {
            any += c->sent[o];
            failed += c->failed[o];
        }
        if (!any)
            continue;
        printf("  shard %-3u %9" PRIu64 " %7" PRIu64 " %7" PRIu64
               " %7" PRIu64 " %7" PRIu64 " %7" PRIu64,
               k, c->sent[0], c->sent[1], c->sent[2], c->sent[3], failed,
               c->aborts);
        if (eager)
            printf(" %7" PRIu64, c->sent[XFER_OP_EAGER]);
        printf("\n");
    }
}

static void print_rest(const summary *s)
{
    printf("late events rejected: %" PRIu64 " late replies, %" PRIu64
           " late submits, %" PRIu64 " unknown replies, %" PRIu64
           " submits refused\n",
           s->notes[XFER_NOTE_LATE_REPLY], s->notes[XFER_NOTE_LATE_SUBMIT],
           s->notes[XFER_NOTE_UNKNOWN_REPLY], s->rejected_submits);
    printf("tombstones dropped: %" PRIu64 " (producer), %" PRIu64
           " (shards), %" PRIu64 " (readiness); cap hits %" PRIu64 "\n",
           s->notes[XFER_NOTE_TOMB_EXPIRED], s->resv_into[XFER_RESV_STATE_NONE],
           s->ready_into[XFER_READY_STATE_NONE], s->notes[XFER_NOTE_TOMB_FULL]);
    printf("pre-emptive cancels: %" PRIu64 ", cancels given up: %" PRIu64
           "\n",
           s->notes[XFER_NOTE_PREEMPTIVE], s->notes[XFER_NOTE_CANCEL_GAVE_UP]);
    printf("ignored steps: transfer %" PRIu64 ", reservation %" PRIu64
           ", readiness %" PRIu64 "; illegal steps: %" PRIu64 "\n",
           s->ignored[0], s->ignored[1], s->ignored[2],
           s->illegal[0] + s->illegal[1] + s->illegal[2]);
    if (s->per_machine[XFER_MACHINE_RESERVATION]) {
        printf("reservations reached:");
        for (unsigned st = 1; st < XFER_RESV_STATE_COUNT_; st++)
            printf(" %s %" PRIu64, xfer_fsm_state_name(XFER_MACHINE_RESERVATION, st),
                   s->resv_into[st]);
        printf("\n");
    }
    if (s->per_machine[XFER_MACHINE_READINESS]) {
        printf("readiness reached:");
        for (unsigned st = 1; st < XFER_READY_STATE_COUNT_; st++)
            printf(" %s %" PRIu64, xfer_fsm_state_name(XFER_MACHINE_READINESS, st),
                   s->ready_into[st]);
        printf("\n");
    }
}

static const cli_flag xt_cmd_summary_flags[] = {CLI_HELP, {NULL, 0, NULL, NULL, 0}};
static const cli xt_cmd_summary_cli = {.prog = "xfer-trace summary", .synopsis = "FILE",
                           .intro = "counts per final state, error and shard\n",
                           .flags = xt_cmd_summary_flags};

int xt_cmd_summary(int argc, char **argv)
{
    if (xt_args(&xt_cmd_summary_cli, &argc, &argv))
        return XT_USAGE;
    if (argc != 1)
        return xt_usage("%s", "summary takes one FILE");
    if (argv[0][0] == '-')
        return xt_usage("unknown flag '%s'", argv[0]);
    xt_file f;
    if (xt_load(argv[0], &f))
        return XT_BADINPUT;
    summary *s = calloc(1, sizeof *s);
    xt_model m;
    if (!s || xt_model_build(&m, &f)) {
        fprintf(stderr, "xfer-trace: out of memory\n");
        free(s);
        xt_file_free(&f);
        return XT_BADINPUT;
    }
    for (size_t i = 0; i < f.n; i++)
        count_rec(s, &f.recs[i]);
    print_header(&f, s);
    print_transfers(&m);
    print_errors(&m, s);
    print_shards(s);
    print_rest(s);
    free(s);
    xt_model_free(&m);
    xt_file_free(&f);
    return XT_OK;
}
