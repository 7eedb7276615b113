/*
 * tools/trace/merge.c - the trace files of every process of a deployment
 * (the producer, each shard server, the consumer) as one timeline: each
 * file is loaded with its rotated set, and the records are merged by time,
 * so `show` and `stuck` see a request from all sides at once.
 *
 * What must stay true: each file's own order is kept (a k-way merge that
 * takes, at each step, the file whose next record is earliest; ties go to
 * the file named first), so a file whose clock steps back is never
 * reordered within itself.  Times are only comparable between processes
 * of one host (CLOCK_MONOTONIC), which is where they are written.  The
 * emitter tag of every record (its `src`, in flags) says who wrote it.
 */
#include <stdlib.h>
#include <string.h>

#include "xtrace.h"

/* The shards an xferd trace serves, from its label "xferd shards 0,1". */
static uint64_t label_shards(const char *label)
{
    const char *p = strncmp(label, "xferd shards ", 13) == 0 ? label + 13
                                                              : NULL;
    uint64_t mask = 0;
    while (p && *p >= '0' && *p <= '9') {
        char *end;
        unsigned long k = strtoul(p, &end, 10);
        if (k < 64)
            mask |= UINT64_C(1) << k;
        p = *end == ',' ? end + 1 : NULL;
    }
    return mask;
}

int xt_load_many(int n, char **paths, xt_file *out)
{
    if (n == 1)
        return xt_load(paths[0], out);
    memset(out, 0, sizeof *out);
    xt_file *fs = calloc((size_t)n, sizeof *fs);
    size_t *at = calloc((size_t)n, sizeof *at);
    int rc = fs && at ? XT_OK : XT_BADINPUT;
    size_t total = 0;
    for (int i = 0; i < n && rc == XT_OK; i++) {
        rc = xt_load(paths[i], &fs[i]);
        total += rc == XT_OK ? fs[i].n : 0;
    }
    if (rc == XT_OK && !(out->recs = malloc((total ? total : 1) *
                                            sizeof *out->recs))) {
        fprintf(stderr, "xfer-trace: out of memory\n");
        rc = XT_BADINPUT;
    }
    for (size_t k = 0; rc == XT_OK && k < total; k++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (at[i] < fs[i].n &&
                (best < 0 || fs[i].recs[at[i]].time_ns <
                                 fs[best].recs[at[best]].time_ns))
                best = i;
        out->recs[out->n++] = fs[best].recs[at[best]++];
    }
    if (rc == XT_OK) {
        out->path = paths[0];
        out->info = fs[0].info;
        out->cap = total;
        for (int i = 0; i < n; i++) {
            out->nfiles += fs[i].nfiles;
            out->shards_given |= label_shards(fs[i].info.label);
            if (fs[i].t_first &&
                (out->t_first == 0 || fs[i].t_first < out->t_first))
                out->t_first = fs[i].t_first;
            if (fs[i].t_last > out->t_last)
                out->t_last = fs[i].t_last;
        }
    }
    for (int i = 0; fs && i < n; i++)
        xt_file_free(&fs[i]);
    free(fs);
    free(at);
    if (rc)
        xt_file_free(out);
    return rc;
}

const char *xt_src_name(const xfer_trace_rec *r, char *buf, size_t len)
{
    switch (r->machine) {
    case XFER_MACHINE_TRANSFER:
    case XFER_MACHINE_INPUT:
    case XFER_MACHINE_ACTION:
    case XFER_MACHINE_CONFIG:
        return "producer";
    case XFER_MACHINE_RESERVATION:
        snprintf(buf, len, "shard %u", (unsigned)r->shard);
        return buf;
    case XFER_MACHINE_READINESS:
        return "consumer";
    default:
        break;
    }
    unsigned src = r->flags;
    if (src == XFER_TRACE_SRC_PRODUCER)
        return "producer";
    if (src == XFER_TRACE_SRC_CONSUMER)
        return "consumer";
    if (src >= XFER_TRACE_SRC_SHARD(0) && src <= XFER_TRACE_SRC_SHARD(63)) {
        snprintf(buf, len, "shard %u", src - XFER_TRACE_SRC_SHARD(0));
        return buf;
    }
    snprintf(buf, len, "src %u", src);
    return buf;
}
