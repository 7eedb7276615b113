/*
 * tools/trace/model.c - load a trace file and rebuild every transfer from
 * its records: state, per-shard op in flight, end, staging bytes and writes
 * in flight.  An EAGER op (the eager path) is one op per shard like any
 * other: it opens at its action and closes at its result.
 *
 * What must stay true: the model is built from the producer core's records
 * only (INPUT, TRANSFER, ACTION); reservation and readiness records are
 * shown by the commands but never change it.  A transfer is one attempt of
 * an id: it starts at its SUBMIT step (NEW -> RESERVING, or NEW -> EAGER on
 * the eager path) and ends at its
 * COMPLETE action; it is open in between.  A shard waits while an op sent to
 * it (RESERVE/WRITE/COMMIT/CANCEL action) has no result input yet.
 * A transfer whose submit was rotated out of the file is picked up at its
 * first step or action that shows it live (partial: its age is a lower
 * bound).  Iteration orders are first-seen order, never hash order.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xtrace.h"

/* ---------------------------------------------------------------------- */
/* Loading                                                                 */
/* ---------------------------------------------------------------------- */

static int push_rec(xt_file *f, const xfer_trace_rec *r)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 1024;
        xfer_trace_rec *p = realloc(f->recs, cap * sizeof *p);
        if (!p)
            return -1;
        f->recs = p;
        f->cap = cap;
    }
    f->recs[f->n++] = *r;
    if (r->machine != XFER_MACHINE_CONFIG) {
        if (f->t_first == 0 || r->time_ns < f->t_first)
            f->t_first = r->time_ns;
        if (r->time_ns > f->t_last)
            f->t_last = r->time_ns;
    }
    return 0;
}

/* Append every record of one file; prints the error itself. */
static int load_one(const char *path, xt_file *f, xfer_tracefile_info *info)
{
    char why[256] = "";
    xfer_tracefile_reader *rd = NULL;
    int rc = xfer_tracefile_reader_open(path, &rd, why, sizeof why);
    if (rc) {
        fprintf(stderr, "xfer-trace: %s: %s\n", path, why);
        return XT_BADINPUT;
    }
    *info = *xfer_tracefile_reader_info(rd);
    xfer_trace_rec r;
    while ((rc = xfer_tracefile_reader_next(rd, &r)) == 1) {
        if (push_rec(f, &r)) {
            rc = XFER_ERR_NOMEM;
            break;
        }
    }
    if (rc < 0)
        fprintf(stderr, "xfer-trace: %s: %s\n", path,
                rc == XFER_ERR_NOMEM ? "out of memory"
                                     : xfer_tracefile_reader_why(rd));
    xfer_tracefile_reader_close(rd);
    return rc < 0 ? XT_BADINPUT : XT_OK;
}

/* File index of path.k, or -1 when it is absent or unreadable. */
static long index_of(const char *path, uint32_t k)
{
    char p[4096];
    snprintf(p, sizeof p, "%s.%" PRIu32, path, k);
    xfer_tracefile_reader *rd;
    if (xfer_tracefile_reader_open(p, &rd, NULL, 0))
        return -1;
    long idx = (long)xfer_tracefile_reader_info(rd)->file_index;
    xfer_tracefile_reader_close(rd);
    return idx;
}

int xt_load(const char *path, xt_file *f)
{
    memset(f, 0, sizeof *f);
    f->path = path;
    xfer_tracefile_reader *rd;
    char why[256] = "";
    if (xfer_tracefile_reader_open(path, &rd, why, sizeof why)) {
        fprintf(stderr, "xfer-trace: %s: %s\n", path, why);
        return XT_BADINPUT;
    }
    f->info = *xfer_tracefile_reader_info(rd);
    xfer_tracefile_reader_close(rd);
    uint32_t older = 0;
    while (older < f->info.file_index &&
           index_of(path, older + 1) == (long)(f->info.file_index - older - 1))
        older++;
    int rc = XT_OK;
    xfer_tracefile_info info;
    for (uint32_t k = older; k >= 1 && rc == XT_OK; k--) {
        char p[4096];
        snprintf(p, sizeof p, "%s.%" PRIu32, path, k);
        rc = load_one(p, f, &info);
    }
    if (rc == XT_OK)
        rc = load_one(path, f, &info);
    f->nfiles = older + 1;
    f->first_index = f->info.file_index - older;
    if (rc)
        xt_file_free(f);
    return rc;
}

void xt_file_free(xt_file *f)
{
    free(f->recs);
    f->recs = NULL;
    f->n = f->cap = 0;
}

/* ---------------------------------------------------------------------- */
/* Id index                                                                */
/* ---------------------------------------------------------------------- */

static size_t hash_id(uint64_t id, size_t mask)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (size_t)id & mask;
}

static int index_grow(xt_model *m)
{
    size_t cap = m->mask ? 2 * (m->mask + 1) : 1024;
    uint64_t *keys = calloc(cap, sizeof *keys);
    size_t *vals = calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -1;
    }
    for (size_t i = 0; m->mask && i <= m->mask; i++) {
        if (!m->vals[i])
            continue;
        size_t j = hash_id(m->keys[i], cap - 1);
        while (vals[j])
            j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->mask = cap - 1;
    return 0;
}

static int index_put(xt_model *m, uint64_t id, size_t val)
{
    if ((m->used + 1) * 2 > m->mask + 1 && index_grow(m))
        return -1;
    size_t j = hash_id(id, m->mask);
    while (m->vals[j] && m->keys[j] != id)
        j = (j + 1) & m->mask;
    if (!m->vals[j])
        m->used++;
    m->keys[j] = id;
    m->vals[j] = val + 1;
    return 0;
}

xt_xfer *xt_model_find(const xt_model *m, uint64_t id)
{
    if (!m->mask)
        return NULL;
    size_t j = hash_id(id, m->mask);
    while (m->vals[j]) {
        if (m->keys[j] == id)
            return m->x[m->vals[j] - 1];
        j = (j + 1) & m->mask;
    }
    return NULL;
}

void xt_model_init(xt_model *m)
{
    memset(m, 0, sizeof *m);
}

void xt_model_free(xt_model *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->x[i]);
    free(m->x);
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------------- */
/* Applying records                                                        */
/* ---------------------------------------------------------------------- */

static xt_xfer *create(xt_model *m, const xfer_trace_rec *r)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 256;
        xt_xfer **p = realloc(m->x, cap * sizeof *p);
        if (!p)
            return NULL;
        m->x = p;
        m->cap = cap;
    }
    xt_xfer *x = calloc(1, sizeof *x);
    if (!x || index_put(m, r->id, m->n)) {
        free(x);
        return NULL;
    }
    x->id = r->id;
    x->attempt = r->attempt;
    x->start_ns = r->time_ns;
    x->index = m->n;
    x->state = r->new_state;
    if (m->sub_id == r->id) {
        x->nshards = m->sub_nshards <= XFER_MAX_SHARDS ? m->sub_nshards
                                                       : XFER_MAX_SHARDS;
        x->deadline_ns = m->sub_deadline;
    }
    m->x[m->n++] = x;
    return x;
}

/* A record of a live transfer never seen submitted: its submit is in a
 * file rotated away.  Steps of the container rows (NEW, TOMBSTONED) and
 * COMPLETE do not show a live transfer. */
static xt_xfer *adopt(xt_model *m, const xfer_trace_rec *r)
{
    bool live = r->machine == XFER_MACHINE_TRANSFER
                    ? r->old_state != XFER_TRANSFER_STATE_NEW &&
                          r->old_state != XFER_TRANSFER_STATE_TOMBSTONED &&
                          r->new_state != XFER_TRANSFER_STATE_TOMBSTONED
                    : r->event <= XFER_ACT_ABORT || r->event == XFER_ACT_EAGER;
    if (!live || r->attempt == 0)
        return NULL;
    xt_xfer *x = create(m, r);
    if (x) {
        x->partial = true;
        x->state = r->machine == XFER_MACHINE_TRANSFER ? r->new_state
                                                 : XFER_TRANSFER_STATE_RESERVING;
    }
    return x;
}

/* Partial transfers learn their shard count from the shards they use. */
static void see_shard(xt_xfer *x, uint16_t shard)
{
    if (x->partial && shard < XFER_MAX_SHARDS && shard >= x->nshards)
        x->nshards = (uint16_t)(shard + 1);
}

static void on_transfer(xt_model *m, const xfer_trace_rec *r, xt_effect *e)
{
    xt_xfer *x = xt_model_find(m, r->id);
    bool submit = xt_submit_step(r);
    if (submit || !x || x->attempt != r->attempt) {
        x = submit ? create(m, r) : adopt(m, r);
        e->x = x;
        e->created = x != NULL;
        e->state_changed = x != NULL;
        e->prev_state = XFER_TRANSFER_STATE_NEW;
        if (x)
            see_shard(x, r->shard);
        return;
    }
    if (x->ended)
        return;
    see_shard(x, r->shard);
    e->x = x;
    e->prev_state = x->state;
    e->state_changed = x->state != r->new_state;
    x->state = r->new_state;
}

static void on_action(xt_model *m, const xfer_trace_rec *r, xt_effect *e)
{
    xt_xfer *x = xt_model_find(m, r->id);
    if (!x || x->attempt != r->attempt) {
        x = adopt(m, r);
        e->created = x != NULL;
        e->state_changed = x != NULL;
    }
    if (!x)
        return;
    see_shard(x, r->shard);
    e->x = x;
    e->shard = r->shard;
    xt_op *op = r->shard < x->nshards ? &x->shards[r->shard] : NULL;
    switch (r->event) {
    case XFER_ACT_RESERVE:
    case XFER_ACT_WRITE:
    case XFER_ACT_COMMIT:
    case XFER_ACT_CANCEL:
    case XFER_ACT_EAGER:
        if (!op)
            return;
        *op = (xt_op){.open = 1, .kind = (uint8_t)xfer_action_op(r->event),
                      .sent_ns = r->time_ns, .len = op->len};
        if (r->event == XFER_ACT_RESERVE || r->event == XFER_ACT_EAGER) {
            op->len = (uint32_t)r->arg1;
            m->staging_in_use += op->len;
        }
        if (r->event == XFER_ACT_WRITE || r->event == XFER_ACT_EAGER)
            m->writes_in_flight++; /* both read staging until answered */
        e->op_started = true;
        return;
    case XFER_ACT_ABORT:
        if (op && op->open)
            op->aborted = 1;
        return;
    case XFER_ACT_RELEASE_STAGING:
        for (unsigned k = 0; k < x->nshards; k++) {
            m->staging_in_use -= x->shards[k].len;
            x->shards[k].len = 0;
        }
        return;
    case XFER_ACT_RELEASE_PART:
        x->stream = true;
        x->parts_back++;
        return;
    case XFER_ACT_COMPLETE:
        x->ended = true;
        x->end_ns = r->time_ns;
        x->status = r->error;
        x->phase = r->new_state;
        x->failed_shards = r->arg2;
        e->ended = true;
        return;
    default:
        return;
    }
}

static void on_input(xt_model *m, const xfer_trace_rec *r, xt_effect *e)
{
    if (r->event == XFER_TRANSFER_EVENT_SUBMIT) {
        m->sub_id = r->id;
        m->sub_nshards = r->shard;
        m->sub_deadline = r->arg0;
        return;
    }
    if (r->event == XFER_TRANSFER_EVENT_PART ||
        r->event == XFER_TRANSFER_EVENT_SEAL) {
        /* a stream's part or seal (refused ones too: the step says) */
        xt_xfer *s = xt_model_find(m, r->id);
        if (s && !s->ended) {
            s->stream = true;
            if (r->event == XFER_TRANSFER_EVENT_SEAL) {
                s->sealed = true;
            } else {
                s->parts_added++;
                s->last_part_ns = r->time_ns;
            }
        }
        return;
    }
    if (!xt_result_event(r->event))
        return; /* user cancel, timer, shutdown: no shard op */
    xt_xfer *x = xt_model_find(m, r->id);
    if (!x || x->attempt != r->attempt || r->shard >= x->nshards)
        return;
    xt_op *op = &x->shards[r->shard];
    if (!op->open || op->kind != r->old_state)
        return;
    op->open = 0;
    op->last_ok = r->error == 0;
    if ((op->kind == XFER_OP_WRITE || op->kind == XFER_OP_EAGER) &&
        m->writes_in_flight)
        m->writes_in_flight--;
    e->x = x;
    e->shard = r->shard;
    e->op_ended = true;
}

int xt_model_apply(xt_model *m, const xfer_trace_rec *r, xt_effect *eff)
{
    xt_effect scratch;
    xt_effect *e = eff ? eff : &scratch;
    memset(e, 0, sizeof *e);
    switch (r->machine) {
    case XFER_MACHINE_TRANSFER:
        on_transfer(m, r, e);
        if (xt_submit_step(r) && !e->x)
            return -1;
        return 0;
    case XFER_MACHINE_ACTION:
        on_action(m, r, e);
        return 0;
    case XFER_MACHINE_INPUT:
        on_input(m, r, e);
        return 0;
    default:
        return 0;
    }
}

int xt_model_build(xt_model *m, const xt_file *f)
{
    xt_model_init(m);
    for (size_t i = 0; i < f->n; i++)
        if (xt_model_apply(m, &f->recs[i], NULL))
            return -1;
    return 0;
}
