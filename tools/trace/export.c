/*
 * tools/trace/export.c - `xfer-trace export --perfetto|--chrome FILE -o
 * OUT.json`: the trace as Chrome trace-event JSON, which Perfetto
 * (ui.perfetto.dev) and chrome://tracing open.
 *
 * Track scheme: pid 1 is "xfer" and holds the counters ("staging bytes in
 * use", "writes in flight"); transfer number i (in submit order) is pid
 * i + 2, named "transfer ID (attempt A)", with thread 0 "transfer" (one
 * slice for the whole transfer, one nested slice per phase) and thread
 * k + 1 "shard k" (one slice per op sent to shard k, instants for aborts
 * and for the shard's reservation steps).  A transfer or op that never
 * ended keeps its "B" event without an "E": an open slice.  Timestamps are
 * microseconds since the first timed record.
 *
 * What must stay true: every "E" closes a "B" on the same track, in LIFO
 * order (phase before transfer); the output is valid JSON whatever the
 * input (names come from tables; the file path is escaped).
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "xtrace.h"

typedef struct exporter {
    FILE *out;
    const xt_file *f;
    xt_model m;
    uint64_t *open_ops; /* per transfer index: bit k = shard k slice open */
    uint64_t *named;    /* per transfer index: bit k = shard k track named */
    size_t nopen;
    bool first;
    uint64_t staging, writes;
} exporter;

static void begin_event(exporter *x)
{
    fputs(x->first ? "\n" : ",\n", x->out);
    x->first = false;
}

static void ts(exporter *x, uint64_t t)
{
    uint64_t rel = t > x->f->t_first ? t - x->f->t_first : 0;
    fprintf(x->out, "\"ts\":%" PRIu64 ".%03" PRIu64, rel / 1000, rel % 1000);
}

static void meta(exporter *x, const char *what, size_t pid, long tid,
                 const char *key, const char *val, size_t num)
{
    begin_event(x);
    fprintf(x->out, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%zu", what, pid);
    if (tid >= 0)
        fprintf(x->out, ",\"tid\":%ld", tid);
    if (val)
        fprintf(x->out, ",\"args\":{\"%s\":\"%s\"}}", key, val);
    else
        fprintf(x->out, ",\"args\":{\"%s\":%zu}}", key, num);
}

/* Name shard k's track the first time it is used (a transfer picked up
 * from a rotated trace learns its shards as it goes). */
static void name_shard(exporter *x, const xt_xfer *t, unsigned tid)
{
    uint64_t bit = UINT64_C(1) << ((tid - 1) & 63);
    if (tid == 0 || (x->named[t->index] & bit))
        return;
    x->named[t->index] |= bit;
    char sn[32];
    snprintf(sn, sizeof sn, "shard %u", tid - 1);
    meta(x, "thread_name", t->index + 2, (long)tid, "name", sn, 0);
}

static void slice(exporter *x, char ph, const xt_xfer *t, unsigned tid,
                  const char *name, uint64_t time, const char *args)
{
    name_shard(x, t, tid);
    begin_event(x);
    fprintf(x->out, "{\"ph\":\"%c\",\"pid\":%zu,\"tid\":%u,", ph,
            t->index + 2, tid);
    ts(x, time);
    if (name)
        fprintf(x->out, ",\"name\":\"%s\"", name);
    if (ph == 'i')
        fputs(",\"s\":\"t\"", x->out);
    if (args)
        fprintf(x->out, ",\"args\":{%s}", args);
    fputs("}", x->out);
}

static void counter(exporter *x, const char *name, const char *key,
                    uint64_t v, uint64_t time)
{
    begin_event(x);
    fprintf(x->out, "{\"ph\":\"C\",\"pid\":1,\"tid\":0,\"name\":\"%s\",",
            name);
    ts(x, time);
    fprintf(x->out, ",\"args\":{\"%s\":%" PRIu64 "}}", key, v);
}

static void on_created(exporter *x, const xt_xfer *t, uint64_t time)
{
    char name[64];
    snprintf(name, sizeof name, "transfer %" PRIu64 " (attempt %" PRIu32 ")",
             t->id, t->attempt);
    meta(x, "process_name", t->index + 2, -1, "name", name, 0);
    meta(x, "process_sort_index", t->index + 2, -1, "sort_index", NULL,
         t->index + 2);
    meta(x, "thread_name", t->index + 2, 0, "name", "transfer", 0);
    for (unsigned k = 0; k < t->nshards; k++)
        name_shard(x, t, k + 1);
    snprintf(name, sizeof name, "transfer %" PRIu64, t->id);
    slice(x, 'B', t, 0, name, time, NULL);
}

static int grow_open(exporter *x, size_t index)
{
    if (index < x->nopen)
        return 0;
    size_t n = x->nopen ? 2 * x->nopen : 256;
    while (n <= index)
        n *= 2;
    uint64_t *p = realloc(x->open_ops, n * sizeof *p);
    if (p)
        x->open_ops = p;
    uint64_t *q = p ? realloc(x->named, n * sizeof *q) : NULL;
    if (!q)
        return -1;
    x->named = q;
    memset(p + x->nopen, 0, (n - x->nopen) * sizeof *p);
    memset(q + x->nopen, 0, (n - x->nopen) * sizeof *q);
    x->nopen = n;
    return 0;
}

static void on_ops(exporter *x, const xfer_trace_rec *r, const xt_effect *e)
{
    const xt_xfer *t = e->x;
    uint64_t bit = UINT64_C(1) << (e->shard & 63);
    uint64_t *open = &x->open_ops[t->index];
    char args[96];
    if (e->op_ended && (*open & bit)) {
        snprintf(args, sizeof args, "\"status\":\"%s\"",
                 xfer_err_name(r->error));
        slice(x, 'E', t, e->shard + 1u, NULL, r->time_ns, args);
        *open &= ~bit;
    }
    if (e->op_started) {
        if (*open & bit)
            slice(x, 'E', t, e->shard + 1u, NULL, r->time_ns,
                  "\"status\":\"no result\"");
        snprintf(args, sizeof args, "\"len\":%" PRIu64 ",\"resv\":%" PRIu64,
                 r->arg1, r->arg0);
        slice(x, 'B', t, e->shard + 1u, xt_op_name(r->event), r->time_ns,
              args);
        *open |= bit;
    }
}

static void on_phase(exporter *x, const xfer_trace_rec *r, const xt_effect *e)
{
    const xt_xfer *t = e->x;
    if (!e->created)
        slice(x, 'E', t, 0, NULL, r->time_ns, NULL);
    if (t->state != XFER_TRANSFER_STATE_TOMBSTONED)
        slice(x, 'B', t, 0, xfer_fsm_state_name(XFER_MACHINE_TRANSFER, t->state),
              r->time_ns, NULL);
}

/* Instants: aborts, notes, and the consumer-side steps of the id. */
static void on_instant(exporter *x, const xfer_trace_rec *r)
{
    xt_xfer *t = xt_model_find(&x->m, r->id);
    if (!t || t->ended)
        return;
    char name[96];
    unsigned tid = r->shard < t->nshards ? r->shard + 1u : 0;
    if (r->machine == XFER_MACHINE_ACTION && r->event == XFER_ACT_ABORT)
        snprintf(name, sizeof name, "abort %s", xt_op_name(r->old_state));
    else if (r->machine == XFER_MACHINE_NOTE)
        snprintf(name, sizeof name, "note %s", xfer_note_name(r->event));
    else if (r->machine == XFER_MACHINE_RESERVATION ||
             r->machine == XFER_MACHINE_READINESS)
        snprintf(name, sizeof name, "%s %s -> %s on %s",
                 xfer_machine_name(r->machine),
                 xfer_fsm_state_name(r->machine, r->old_state),
                 xfer_fsm_state_name(r->machine, r->new_state),
                 xfer_fsm_event_name(r->machine, r->event));
    else
        return;
    if (r->machine == XFER_MACHINE_READINESS)
        tid = 0;
    slice(x, 'i', t, tid, name, r->time_ns, NULL);
}

static int export_rec(exporter *x, const xfer_trace_rec *r)
{
    xt_effect e;
    if (xt_model_apply(&x->m, r, &e))
        return -1;
    if (e.x && grow_open(x, e.x->index))
        return -1;
    if (e.created)
        on_created(x, e.x, r->time_ns);
    if (e.state_changed)
        on_phase(x, r, &e);
    if (e.op_started || e.op_ended)
        on_ops(x, r, &e);
    if (e.ended) {
        char args[96];
        snprintf(args, sizeof args, "\"status\":\"%s\",\"phase\":\"%s\"",
                 xfer_err_name(r->error), xfer_phase_name(r->new_state));
        slice(x, 'E', e.x, 0, NULL, r->time_ns, args);
    }
    on_instant(x, r);
    if (x->m.staging_in_use != x->staging)
        counter(x, "staging bytes in use", "bytes",
                x->staging = x->m.staging_in_use, r->time_ns);
    if (x->m.writes_in_flight != x->writes)
        counter(x, "writes in flight", "writes",
                x->writes = x->m.writes_in_flight, r->time_ns);
    return 0;
}

static void put_escaped(FILE *out, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
}

static int run_export(const xt_file *f, FILE *out)
{
    exporter x = {.out = out, .f = f, .first = true};
    xt_model_init(&x.m);
    fputs("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"source\":\"xfer-trace"
          "\",\"file\":\"", out);
    put_escaped(out, f->path);
    fputs("\"},\"traceEvents\":[", out);
    meta(&x, "process_name", 1, -1, "name", "xfer", 0);
    meta(&x, "process_sort_index", 1, -1, "sort_index", NULL, 0);
    counter(&x, "staging bytes in use", "bytes", 0, f->t_first);
    counter(&x, "writes in flight", "writes", 0, f->t_first);
    int rc = 0;
    for (size_t i = 0; i < f->n && rc == 0; i++)
        rc = export_rec(&x, &f->recs[i]);
    fputs("\n]}\n", out);
    xt_model_free(&x.m);
    free(x.open_ops);
    free(x.named);
    return rc;
}

static const cli_flag export_flags[] = {
    {"perfetto", 0, NULL, "Chrome trace-event JSON (Perfetto opens it)", 1},
    {"chrome", 0, NULL, "the same format, for chrome://tracing", 2},
    {"output", 'o', "OUT", "write to OUT (-: stdout)", 0},
    CLI_HELP,
    {NULL, 0, NULL, NULL, 0}};
static const cli export_cli = {
    .prog = "xfer-trace export",
    .synopsis = "--perfetto|--chrome FILE -o OUT.json",
    .flags = export_flags};

int xt_cmd_export(int argc, char **argv)
{
    const char *file = NULL, *outp = NULL, *arg;
    bool fmt = false;
    for (int k; (k = cli_next(&export_cli, argc, argv, &arg)) != CLI_END;) {
        if (k == CLI_ERR)
            return XT_USAGE;
        if (k == 'o')
            outp = arg;
        else
            fmt = true;
    }
    for (int i = optind; i < argc; i++) {
        if (!file)
            file = argv[i];
        else
            return xt_usage("unexpected argument '%s'", argv[i]);
    }
    if (!fmt || !file || !outp)
        return xt_usage("%s", "export takes --perfetto|--chrome FILE -o OUT");
    xt_file f;
    if (xt_load(file, &f))
        return XT_BADINPUT;
    bool to_stdout = strcmp(outp, "-") == 0;
    FILE *out = to_stdout ? stdout : fopen(outp, "w");
    int rc = XT_OK;
    if (!out) {
        fprintf(stderr, "xfer-trace: %s: cannot create\n", outp);
        rc = XT_BADINPUT;
    } else if (run_export(&f, out) != 0) {
        fprintf(stderr, "xfer-trace: out of memory\n");
        rc = XT_BADINPUT;
    }
    if (out && !to_stdout && fclose(out) != 0 && rc == XT_OK) {
        fprintf(stderr, "xfer-trace: %s: write failed\n", outp);
        rc = XT_BADINPUT;
    }
    xt_file_free(&f);
    return rc;
}
