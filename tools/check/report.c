/*
 * tools/check/report.c - what a violation leaves behind: the
 * counterexample printed step by step (describe.c words each line), the
 * trace (the project's trace file format, readable by xfer-trace) and the
 * list of choices that `xfer-check --replay` runs again.
 *
 * What must stay true: printing never changes what a replay does; the
 * printed steps are produced by replaying the choices on a fresh world with
 * a tracer attached.
 */
#include "report.h"

#include <stdio.h>
#include <string.h>

#include "describe.h"
#include "monitor.h"
#include "path.h"
#include "xfer/tracefile.h"

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
    xfer_tracefile_opts o;
    xfer_tracefile_opts_default(&o);
    o.created_ns = 1;
    o.label = "xfer-check";
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
        ck_describe_rec(p->f, r, src);
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
    printf("VIOLATION %s (%s): %s\n", ck_monitor_inv_name((unsigned)o->inv),
           ck_monitor_inv_desc((unsigned)o->inv), o->what);
    printf("counterexample: %zu steps%s\n", o->path.n,
           o->path.liveness ? ", then the liveness phase" : "");
    ck_tracer tr = {pr_rec, pr_action, &p};
    ck_violation v;
    uint64_t h;
    int inv = ck_path_run(cfg, &o->path, &tr, &v, &h, false);
    if (inv >= 0)
        printf("  => %s: %s\n", ck_monitor_inv_name((unsigned)inv), v.what);
    else
        printf("  (the replay did not reproduce the violation)\n");
    int rc = traced ? tw_close(&p.t) : XFER_ERR_IO;
    printf("trace: %s (%s)\n", path, rc ? "could not be written" : "ok");
    snprintf(path, sizeof path, "%s.choices", prefix);
    rc = write_choices(path, o, args);
    printf("choices: %s (%s)\n", path, rc ? "could not be written" : "ok");
    (void)cfg;
}

int ck_report_read_choices(const char *file, char *args, size_t len,
                           ck_path *p, char *why, size_t whylen)
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
