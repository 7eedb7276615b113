/*
 * tools/check/report.c - how moves and machine steps read in a
 * counterexample, and the two files a violation leaves behind: the trace
 * (the project's trace file format, readable by xfer-trace) and the list of
 * choices that `xfer-check --replay` runs again.
 *
 * What must stay true: printing never changes what a replay does; the
 * printed steps are produced by replaying the choices on a fresh world with
 * a tracer attached.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "report.h"
#include "world.h"

#include "xfer/tracefile.h"

static const char *const op_names[] = {"RESERVE", "WRITE", "COMMIT",
                                       "CANCEL"};
static const char *const ev_names[] = {"ready", "cancelled", "expired"};
static const char *const ract_names[] = {"TAKE", "RELEASE", "CANCEL"};

static const char *st(int32_t s)
{
    return s == 0 ? "ok" : xfer_err_name(s);
}

static void describe_msg(const ck_msg *m, const char *verb, char *b,
                         size_t n)
{
    unsigned id = m->tr + 1u;
    switch (m->kind) {
    case MK_OP:
        if (m->op == XFER_OP_WRITE && (m->flags & MF_BEGUN))
            snprintf(b, n, "%s end of the WRITE landing on shard %u (id %u "
                     "att %" PRIu32 ")", verb, m->shard, id, m->attempt);
        else
            snprintf(b, n, "%s %s(id %u, att %" PRIu32 ", resv %" PRIu64
                     ")%s producer -> shard %u", verb, op_names[m->op & 3], id,
                     m->attempt, m->resv_id,
                     (m->flags & MF_ABORT) ? " [abort asked]" : "", m->shard);
        break;
    case MK_RES:
        snprintf(b, n, "%s %s result %s (id %u, att %" PRIu32 ", resv %"
                 PRIu64 ") shard %u -> producer", verb, op_names[m->op & 3],
                 st(m->status), id, m->attempt, m->resv_id, m->shard);
        break;
    case MK_EV:
        snprintf(b, n, "%s event %s(id %u, att %" PRIu32 ") shard %u -> "
                 "readiness", verb, ev_names[m->op % 3], id, m->attempt,
                 m->shard);
        break;
    case MK_RACT:
        snprintf(b, n, "%s %s(id %u, resv %" PRIu64 ") readiness -> shard "
                 "%u", verb, ract_names[m->op % 3], id, m->resv_id, m->shard);
        break;
    default:
        snprintf(b, n, "%s take result %s (id %u) shard %u -> readiness",
                 verb, st(m->status), id, m->shard);
        break;
    }
}

void ck_world_describe(const ck_world *w, ck_move mv, char *b, size_t n)
{
    static const char *const verbs[] = {
        "deliver", "FAIL (not applied)", "LOSE REPLY (applied)", "ABORT"};
    if (mv.kind <= MV_ABORT) {
        const ck_msg *m = &w->msg[mv.arg];
        const char *verb = verbs[mv.kind];
        if (m->kind != MK_OP && mv.kind == MV_FAIL)
            verb = "DROP";
        describe_msg(m, verb, b, n);
        return;
    }
    switch (mv.kind) {
    case MV_SUBMIT:
        snprintf(b, n, "scheduler submits id %u", mv.arg + 1u);
        break;
    case MV_LATE:
        snprintf(b, n, "scheduler submits id %u again (late ready)",
                 mv.arg + 1u);
        break;
    case MV_CANCEL:
        snprintf(b, n, "scheduler cancels id %u", mv.arg + 1u);
        break;
    case MV_SHUTDOWN:
        snprintf(b, n, "engine shutdown");
        break;
    case MV_CCANCEL:
        snprintf(b, n, "consumer scheduler cancels id %u", mv.arg + 1u);
        break;
    case MV_FIRE_CORE:
        snprintf(b, n, "core timer fires at %" PRIu64 " ns",
                 xfer_core_next_deadline(w->core));
        break;
    case MV_FIRE_SHARD:
        snprintf(b, n, "shard %u timer fires at %" PRIu64 " ns (lease / "
                 "tombstone)", mv.arg, xfer_shard_next_deadline(w->sh[mv.arg]));
        break;
    case MV_FIRE_READY:
        snprintf(b, n, "readiness timer fires at %" PRIu64 " ns",
                 xfer_readiness_next_deadline(w->rd));
        break;
    default:
        snprintf(b, n, "the producer crashes");
        break;
    }
}

/* One trace record as a line of a counterexample. */
void ck_report_rec(FILE *f, const xfer_trace_rec *r, uint8_t src)
{
    char who[16];
    if (src == 0)
        snprintf(who, sizeof who, "core");
    else if (src <= CK_MAX_S)
        snprintf(who, sizeof who, "shard%u", src - 1u);
    else
        snprintf(who, sizeof who, "ready");
    switch (r->machine) {
    case XFER_MACHINE_TRANSFER:
    case XFER_MACHINE_RESERVATION:
    case XFER_MACHINE_READINESS:
        fprintf(f, "      %-6s id %" PRIu64 " att %" PRIu32 ": %s --%s--> %s "
                "[%s]%s%s\n", who, r->id, r->attempt,
                xfer_fsm_state_name(r->machine, r->old_state),
                xfer_fsm_event_name(r->machine, r->event),
                xfer_fsm_state_name(r->machine, r->new_state),
                xfer_verdict_name(r->verdict), r->error ? " " : "",
                r->error ? xfer_err_name(r->error) : "");
        break;
    case XFER_MACHINE_ACTION: {
        static const char *const acts[] = {
            "RESERVE", "WRITE", "COMMIT", "CANCEL", "ABORT",
            "RELEASE_STAGING", "COMPLETE", "SHUTDOWN_DONE"};
        fprintf(f, "      %-6s action %s id %" PRIu64 " att %" PRIu32, who,
                r->event < 8 ? acts[r->event] : "?", r->id, r->attempt);
        if (r->shard != XFER_SHARD_NONE)
            fprintf(f, " shard %u", r->shard);
        if (r->event == XFER_ACT_COMPLETE)
            fprintf(f, " status %s phase %u failed_shards 0x%" PRIx64,
                    st(r->error), r->new_state, r->arg2);
        fprintf(f, "\n");
        break;
    }
    case XFER_MACHINE_NOTE:
        fprintf(f, "      %-6s note %s id %" PRIu64 "\n", who,
                xfer_note_name(r->event), r->id);
        break;
    default:
        break;
    }
}

/* ---------------------------------------------------------------------- */
/* Trace file                                                              */
/* ---------------------------------------------------------------------- */

typedef struct tw {
    xfer_tracefile *tf;
    uint64_t n;
} tw;

static bool tw_open(tw *t, const char *path)
{
    memset(t, 0, sizeof *t);
    xfer_tracefile_opts o = {.format = XFER_TRACEFILE_BINARY,
                             .created_ns = 1,
                             .label = "xfer-check"};
    return xfer_tracefile_open(path, &o, &t->tf) == 0;
}

static void tw_rec(tw *t, const xfer_trace_rec *r, uint8_t src)
{
    xfer_trace_rec c = *r;
    c.flags = src;
    t->n++;
    if (t->tf)
        xfer_tracefile_write(t->tf, &c);
}

static int tw_close(tw *t)
{
    return xfer_tracefile_close(t->tf);
}

/* ---------------------------------------------------------------------- */
/* Printing a counterexample                                               */
/* ---------------------------------------------------------------------- */

typedef struct printer {
    FILE *f;
    tw t;
    unsigned step;
} printer;

static void pr_rec(void *ud, const xfer_trace_rec *r, uint8_t src)
{
    printer *p = ud;
    tw_rec(&p->t, r, src);
    if (r->machine != XFER_MACHINE_CONFIG && r->machine != XFER_MACHINE_INPUT)
        ck_report_rec(p->f, r, src);
}

static void pr_action(void *ud, const char *text)
{
    printer *p = ud;
    if (text[0] == '-')
        fprintf(p->f, "  %s\n", text);
    else
        fprintf(p->f, "  %3u. %s\n", ++p->step, text);
}

static int write_choices(const char *path, const ck_outcome *o,
                         const char *args)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return XFER_ERR_IO;
    fprintf(f, "# xfer-check choices v1: move indices, replay with "
               "xfer-check --replay %s\nargs %s\nliveness %d\nchoices %zu\n",
            path, args, o->path.liveness ? 1 : 0, o->path.n);
    for (size_t i = 0; i < o->path.n; i++)
        fprintf(f, "%u%c", o->path.c[i], (i % 20 == 19) ? '\n' : ' ');
    fprintf(f, "\n");
    return fclose(f) == 0 ? 0 : XFER_ERR_IO;
}

void ck_report_cex(const ck_config *cfg, const ck_outcome *o,
                   const char *prefix, const char *args)
{
    char path[1024];
    printer p = {stdout, {0}, 0};
    snprintf(path, sizeof path, "%s.trace", prefix);
    bool traced = tw_open(&p.t, path);
    printf("VIOLATION %s (%s): %s\n", ck_inv_name((unsigned)o->inv),
           ck_inv_desc((unsigned)o->inv), o->what);
    printf("counterexample: %zu steps%s\n", o->path.n,
           o->path.liveness ? ", then the liveness phase" : "");
    ck_tracer tr = {pr_rec, pr_action, &p};
    ck_violation v;
    uint64_t h;
    int inv = ck_run_path(cfg, &o->path, &tr, &v, &h, false);
    if (inv >= 0)
        printf("  => %s: %s\n", ck_inv_name((unsigned)inv), v.what);
    else
        printf("  (the replay did not reproduce the violation)\n");
    int rc = traced ? tw_close(&p.t) : XFER_ERR_IO;
    printf("trace: %s (%s)\n", path, rc ? "could not be written" : "ok");
    snprintf(path, sizeof path, "%s.choices", prefix);
    rc = write_choices(path, o, args);
    printf("choices: %s (%s)\n", path, rc ? "could not be written" : "ok");
    (void)cfg;
}

int ck_read_choices(const char *file, char *args, size_t len, ck_path *p,
                    char *why, size_t whylen)
{
    FILE *f = fopen(file, "r");
    char line[4096];
    int liv = 0;
    size_t n = 0;
    if (!f) {
        snprintf(why, whylen, "cannot open %s", file);
        return XFER_ERR_IO;
    }
    bool ok = fgets(line, sizeof line, f) && line[0] == '#' &&
              fgets(line, sizeof line, f) && !strncmp(line, "args ", 5);
    if (ok) {
        line[strcspn(line, "\n")] = 0;
        snprintf(args, len, "%s", line + 5);
        ok = fscanf(f, " liveness %d choices %zu", &liv, &n) == 2;
    }
    for (size_t i = 0; ok && i < n; i++) {
        unsigned c;
        ok = fscanf(f, "%u", &c) == 1 && c < CK_MAX_MOVES;
        if (ok)
            ck_path_push(p, (uint16_t)c);
    }
    fclose(f);
    p->liveness = liv != 0;
    if (!ok)
        snprintf(why, whylen, "%s is not an xfer-check choices file", file);
    return ok ? 0 : XFER_ERR_FORMAT;
}
