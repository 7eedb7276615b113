/*
 * tests/rdma/fabric/opts.c - the test-side controls (xfer_fabric.h):
 * options and faults, their XFER_FABRIC_FAULTS form, the counters and
 * their file form, reset, and the link cut.
 *
 * What must stay true:
 *  - one table names every option, so the C struct, the environment
 *    syntax and the error messages cannot drift apart;
 *  - setting options restarts every Nth count, so "the 3rd write" means
 *    the 3rd after the test said so;
 *  - a bad XFER_FABRIC_FAULTS stops the process with one line, since a
 *    child that silently ran without its fault would pass for the wrong
 *    reason.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fab.h"

enum { T_U32, T_U64, T_BOOL };

static const struct opt_def {
    const char *name;
    size_t off;
    int type;
} opt_defs[] = {
    {"max_msg_sz", offsetof(xfer_fabric_opts, max_msg_sz), T_U32},
    {"mw2", offsetof(xfer_fabric_opts, mw_type2), T_BOOL},
    {"max_mr", offsetof(xfer_fabric_opts, max_mr), T_U32},
    {"cq_delay_us", offsetof(xfer_fabric_opts, cq_delay_us), T_U32},
    {"cq_jitter_us", offsetof(xfer_fabric_opts, cq_jitter_us), T_U32},
    {"write_delay_us", offsetof(xfer_fabric_opts, write_delay_us), T_U32},
    {"seed", offsetof(xfer_fabric_opts, seed), T_U64},
    {"write_access_err", offsetof(xfer_fabric_opts, write_access_err), T_U64},
    {"write_qp_err", offsetof(xfer_fabric_opts, write_qp_err), T_U64},
    {"write_cut", offsetof(xfer_fabric_opts, write_cut), T_U64},
    {"write_corrupt", offsetof(xfer_fabric_opts, write_corrupt), T_U64},
    {"write_phantom", offsetof(xfer_fabric_opts, write_phantom), T_U64},
    {"reg_fail", offsetof(xfer_fabric_opts, reg_fail), T_U64},
    {"bind_fail", offsetof(xfer_fabric_opts, bind_fail), T_U64},
};

void xfer_fabric_default_opts(xfer_fabric_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_msg_sz = 1u << 30;
    o->mw_type2 = true;
    o->max_mr = 65536;
    o->seed = 1;
}

static int set_one(xfer_fabric_opts *o, const char *item, size_t n,
                   char *err, size_t errlen)
{
    const char *eq = memchr(item, '=', n);
    for (size_t i = 0; eq && i < sizeof opt_defs / sizeof opt_defs[0]; i++) {
        const struct opt_def *d = &opt_defs[i];
        if (strlen(d->name) != (size_t)(eq - item) ||
            memcmp(d->name, item, (size_t)(eq - item)) != 0)
            continue;
        char num[32];
        size_t vlen = n - (size_t)(eq - item) - 1;
        if (vlen == 0 || vlen >= sizeof num)
            break;
        memcpy(num, eq + 1, vlen);
        num[vlen] = '\0';
        char *end;
        errno = 0;
        unsigned long long v = strtoull(num, &end, 0);
        if (errno || *end || num[0] == '-' ||
            (d->type == T_U32 && v > UINT32_MAX) ||
            (d->type == T_BOOL && v > 1))
            break;
        char *field = (char *)o + d->off;
        if (d->type == T_U32)
            *(uint32_t *)(void *)field = (uint32_t)v;
        else if (d->type == T_U64)
            *(uint64_t *)(void *)field = v;
        else
            *(bool *)(void *)field = v != 0;
        return 0;
    }
    if (err)
        snprintf(err, errlen, "bad fabric option '%.*s'", (int)n, item);
    return -1;
}

int xfer_fabric_parse_opts(const char *spec, xfer_fabric_opts *o, char *err,
                           size_t errlen)
{
    xfer_fabric_opts t = *o;
    const char *p = spec ? spec : "";
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n && set_one(&t, p, n, err, errlen) < 0)
            return -1;
        p += n;
        if (*p == ',')
            p++;
    }
    if (t.max_msg_sz == 0 || t.max_mr == 0) {
        if (err)
            snprintf(err, errlen, "max_msg_sz and max_mr must be > 0");
        return -1;
    }
    *o = t;
    return 0;
}

static void apply_opts(const xfer_fabric_opts *o)
{
    fab_g.opts = *o;
    fab_g.nth_write = fab_g.nth_reg = fab_g.nth_bind = 0;
    fab_g.rng = o->seed;
}

void fab_opts_load(void)
{
    xfer_fabric_opts o;
    char err[160];
    xfer_fabric_default_opts(&o);
    if (xfer_fabric_parse_opts(getenv("XFER_FABRIC_FAULTS"), &o, err,
                               sizeof err) < 0) {
        fprintf(stderr, "XFER_FABRIC_FAULTS: %s\n", err);
        exit(2);
    }
    apply_opts(&o);
}

void xfer_fabric_get_opts(xfer_fabric_opts *o)
{
    fab_enter();
    *o = fab_g.opts;
    fab_exit();
}

void xfer_fabric_set_opts(const xfer_fabric_opts *o)
{
    fab_enter();
    apply_opts(o);
    fab_exit();
}

/* ---- counters --------------------------------------------------------- */

void xfer_fabric_counters_get(xfer_fabric_counters *c)
{
    fab_enter();
    *c = fab_g.ctr;
    fab_exit();
}

int xfer_fabric_counters_print(FILE *f, const xfer_fabric_counters *c)
{
    int r = 0;
#define PRINT(n)                                                             \
    if (fprintf(f, "%s %" PRIu64 "\n", #n, c->n) < 0)                        \
        r = -1;
    XFER_FABRIC_COUNTERS(PRINT)
#undef PRINT
    return fflush(f) == 0 ? r : -1;
}

static int load_line(xfer_fabric_counters *c, const char *name, uint64_t v)
{
#define LOAD(n)                                                              \
    if (strcmp(name, #n) == 0) {                                             \
        c->n = v;                                                            \
        return 0;                                                            \
    }
    XFER_FABRIC_COUNTERS(LOAD)
#undef LOAD
    return -1;
}

int xfer_fabric_counters_load(const char *path, xfer_fabric_counters *c)
{
    FILE *f = fopen(path, "r");
    char name[64];
    uint64_t v;
    int r = 0, got = 0;
    if (!f)
        return -1;
    memset(c, 0, sizeof *c);
    while ((got = fscanf(f, "%63s %" SCNu64, name, &v)) == 2)
        if (load_line(c, name, v) < 0)
            r = -1;
    if (got != EOF || ferror(f))
        r = -1;
    fclose(f);
    return r;
}

void fab_opts_at_exit(void)
{
    const char *path = getenv("XFER_FABRIC_COUNTERS");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "w");
    if (!f || xfer_fabric_counters_print(f, &fab_g.ctr) < 0)
        fprintf(stderr, "XFER_FABRIC_COUNTERS: cannot write %s\n", path);
    if (f)
        fclose(f);
}

int xfer_fabric_reset(void)
{
    int r = 0;
    fab_enter();
    if (fab_idle()) {
        memset(&fab_g.ctr, 0, sizeof fab_g.ctr);
        fab_opts_load();
    } else {
        errno = EBUSY;
        r = -1;
    }
    fab_exit();
    return r;
}

int xfer_fabric_cut(struct rdma_cm_id *id)
{
    int n = 0;
    fab_enter();
    for (fab_conn *c = fab_g.conns; c; c = c->next) {
        if (c->lost || c->cut || !c->id ||
            (id && &c->id->id != id))
            continue;
        c->cut = true;
        fab_g.ctr.links_cut++;
        n++;
    }
    fab_wake();
    fab_exit();
    return n;
}
