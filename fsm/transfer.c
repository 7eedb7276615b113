/*
 * fsm/transfer.c - the producer transfer machine: one record, one table,
 * one small handler per transition.
 *
 * What must stay true here:
 *  - I2 wait for all: a phase (RESERVING, WRITING, COMPLETING, a cancel
 *    round) is left only when `pending` reaches 0, i.e. every op started in
 *    it has a result (ok, failed, or aborted and confirmed).
 *  - I3 staging safety: RELEASE_STAGING is emitted only at the end, after the
 *    WRITING phase drained, so no write of the transfer is in flight.
 *  - I5 complete rollback: CANCELLING sends a cancel to every shard that was
 *    ever sent a reserve, whatever happens to the other shards' cancels;
 *    failed cancels are retried in rounds with doubling backoff up to
 *    cfg->cancel_max_attempts, then given up (and reported).
 *  - I1 exactly once: COMPLETE is emitted exactly once, in finish() or in the
 *    success path of commit_result(), and both leave the state TOMBSTONED.
 *  - A stop (user cancel, deadline, shutdown) starts nothing new and aborts
 *    what is in flight; the phase is still left only when every op answered.
 *  - I12: the result names shards by the rule written at xfer_result in
 *    xfer/core.h: failed ops, and after a deadline every shard it waited
 *    on; first_failed_shard is NONE only when failed_shards is 0.
 *  - The eager path (EAGER): one op per shard carries reserve + data +
 *    commit.  It is left only when every eager op answered (I2); success
 *    only when every shard applied it (so every shard holds the data and
 *    has emitted READY); any failure sets may_hold exactly as a failed
 *    commit does (the op may have been applied with its reply lost) and
 *    rolls back through CANCELLING, which sends a cancel to every shard
 *    the eager op went to (I5).  A stop there behaves as in COMPLETING.
 *  - Streams (t->st, docs/design.md 2.5): WRITING lasts while parts come;
 *    `pending` counts the writes in flight, at most one per shard.  A
 *    part is released (RELEASE_PART) only when none of its writes is in
 *    flight and none will be sent (I3 per part): all sent and answered, or
 *    the transfer failed or stopped.  The commits go out only once the
 *    stream is sealed, every part's runs were sent and every write
 *    answered ok (pending 0, every part released).  A failure or stop
 *    sends no further write; the phase drains as for a one-shot write,
 *    and a stop that finds no write in flight leaves at once.  Every part
 *    is released before CANCELLING's cancels and the COMPLETE.
 *  - Every cell runs through xfer_transfer_dispatch() and a handler named
 *    by its token (step.h), the rows NEW and TOMBSTONED included: the
 *    container (fsm/core.c) owns ids and tombstones and hands those rows
 *    the id, the attempt and the tombstone instead of a record; their
 *    handlers count, note, refuse, or make and refresh the tombstone.
 */
#include "transfer.h"

#include <assert.h>
#include <string.h>

#include "util.h"

typedef int (*handler_fn)(xfer_transfer_ctx *c, xfer_transfer_step *e);

/* ---------------------------------------------------------------------- */
/* Small helpers                                                           */
/* ---------------------------------------------------------------------- */

size_t xfer_transfer_size(unsigned nshards)
{
    return sizeof(xfer_transfer) +
           (size_t)nshards * sizeof(xfer_transfer_shard);
}

void xfer_transfer_init(xfer_transfer *t, const xfer_submit_args *a,
                        uint32_t attempt, uint64_t now_ns,
                        uint64_t deadline_ns)
{
    memset(t, 0, xfer_transfer_size(a->nshards));
    t->id = a->id;
    t->user_data = a->user_data;
    t->started_ns = now_ns;
    t->deadline_ns = deadline_ns;
    t->timer_ns = UINT64_MAX;
    t->attempt = attempt;
    t->group = a->group;
    t->pool = a->pool;
    t->nshards = a->nshards;
    t->first_failed = XFER_SHARD_NONE;
    t->state = XFER_TRANSFER_STATE_NEW;
    t->eager = a->eager_ok;
    for (unsigned k = 0; k < a->nshards; k++) {
        t->shards[k].staging_off = a->slices[k].off;
        t->shards[k].len = a->slices[k].len;
    }
}

static xfer_action *push(xfer_transfer_ctx *c, const xfer_transfer *t,
                         uint8_t kind, uint16_t shard)
{
    assert(c->nacts < c->cap);
    xfer_action *a = &c->acts[c->nacts++];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->shard = shard;
    a->attempt = t->attempt;
    a->id = t->id;
    a->group = t->group;
    a->pool = t->pool;
    return a;
}

static void send_op(xfer_transfer_ctx *c, const xfer_transfer *t, uint8_t kind,
                    uint16_t k)
{
    const xfer_transfer_shard *s = &t->shards[k];
    xfer_action *a = push(c, t, kind, k);
    a->len = s->len;
    a->resv_id = s->resv == XFER_SUB_OK || s->eager == XFER_SUB_OK
                     ? s->resv_id
                     : XFER_RESV_NONE;
    /* A COMMIT names its staging slice too: a transport with integrity
     * on checksums it (docs/integrity.md); the staging is held until the
     * transfer ends (I3), so the bytes are those the writes sent. */
    if (kind == XFER_ACT_EAGER || kind == XFER_ACT_COMMIT)
        a->staging_off = s->staging_off;
    if (kind == XFER_ACT_WRITE) {
        a->remote_addr = s->remote_addr;
        a->staging_off = s->staging_off;
        a->rkey = s->rkey;
    }
}

static void abort_op(xfer_transfer_ctx *c, const xfer_transfer *t, uint8_t op,
                     uint16_t k)
{
    xfer_action *a = push(c, t, XFER_ACT_ABORT, k);
    a->op = op;
    a->resv_id = t->shards[k].resv == XFER_SUB_OK ? t->shards[k].resv_id
                                                  : XFER_RESV_NONE;
}

/*
 * The result names the shards that failed or held the transfer up: bit k
 * of failed_shards.  Only the mask lives in the record; which named shard
 * the result calls the first is decided at the end (first_named()), so the
 * record does not depend on shard numbers beyond the mask.
 */
static void name_shard(xfer_transfer *t, uint16_t k)
{
    if (k < t->nshards && k < 64)
        t->failed_shards |= UINT64_C(1) << k;
}

/*
 * A shard's op failed.  The first failure sets the status, the phase and
 * first_failed; a later one (after another failure or a stop) only names
 * its shard.  An ABORTED answer to our own stop is not the shard's failure:
 * a user cancel or shutdown names nobody, and a deadline named every shard
 * it waited on when it fired (h_stop), whatever the transport answers
 * afterwards.
 */
static void note_failure(xfer_transfer *t, uint16_t k, int32_t status,
                         uint8_t phase)
{
    if (status == XFER_ERR_ABORTED && t->stopping)
        return;
    /* A shard answers CANCELLED to an op of ours only when someone else
     * cancelled the id there (a consumer, or the shard itself): our own
     * cancels set the status before any is sent (h_stop) and their
     * answers never come here.  Say so: the user's own cancel stays
     * XFER_ERR_CANCELLED. */
    if (status == XFER_ERR_CANCELLED)
        status = XFER_ERR_PEER_CANCELLED;
    if (t->status == 0) {
        t->status = status ? status : XFER_ERR_REMOTE;
        t->fail_phase = phase;
        t->first_failed = k;
    }
    name_shard(t, k);
}

/* first_failed_shard of a failed result: the shard whose failure set the
 * status; when a stop set it, the lowest-numbered shard named (a deadline
 * names all the shards it waited on at once), or NONE when none is named. */
static uint16_t first_named(const xfer_transfer *t)
{
    if (t->first_failed != XFER_SHARD_NONE)
        return t->first_failed;
    for (uint16_t k = 0; k < t->nshards && k < 64; k++)
        if (t->failed_shards >> k & 1)
            return k;
    return XFER_SHARD_NONE;
}

static void trace_note(xfer_transfer_ctx *c, uint64_t now,
                       const xfer_transfer *t, uint16_t shard, unsigned what,
                       int32_t err)
{
    xfer_step_note(&c->trace, &c->seq, now, what, t->id, t->attempt, shard,
                   err);
}

static void set_timer(xfer_transfer *t, uint8_t kind, uint64_t at)
{
    t->timer_kind = kind;
    t->timer_ns = kind == XFER_TIMER_NONE ? UINT64_MAX : at;
}

static bool failed(const xfer_transfer *t)
{
    return t->status != 0;
}

/* ---------------------------------------------------------------------- */
/* Streams                                                                 */
/* ---------------------------------------------------------------------- */

bool xfer_spans_add(xfer_spans *t, uint32_t a, uint32_t b)
{
    xfer_spans u = {0};
    bool placed = false;
    if (a >= b)
        return true;
    for (uint32_t i = 0; i < t->n; i++) {
        uint32_t x = t->v[i][0], y = t->v[i][1];
        if (y < a || (x > b && placed)) { /* apart, before or after */
            u.v[u.n][0] = x;
            u.v[u.n++][1] = y;
        } else if (x > b) { /* the first one wholly after [a, b) */
            u.v[u.n][0] = a;
            u.v[u.n++][1] = b;
            placed = true;
            u.v[u.n][0] = x;
            u.v[u.n++][1] = y;
        } else { /* overlaps or touches: grow [a, b) */
            a = x < a ? x : a;
            b = y > b ? y : b;
        }
    }
    if (!placed) {
        u.v[u.n][0] = a;
        u.v[u.n++][1] = b;
    }
    /* The shard keeps a prefix from 0 and XFER_SHARD_MAX_FRAGMENTS more. */
    uint32_t frags = u.n && u.v[0][0] == 0 ? u.n - 1 : u.n;
    if (frags > XFER_SHARD_MAX_FRAGMENTS)
        return false;
    *t = u;
    return true;
}

static xfer_part *part_of(const xfer_stream *st, uint32_t seq)
{
    for (uint32_t i = 0; i < st->nparts; i++)
        if (st->parts[i]->seq == seq)
            return st->parts[i];
    return NULL;
}

static void release_part(xfer_transfer_ctx *c, const xfer_transfer *t,
                         xfer_part *p)
{
    xfer_action *a = push(c, t, XFER_ACT_RELEASE_PART, XFER_SHARD_NONE);
    a->part = p->seq;
    a->pool = 0;
    a->result.id = t->id;
    a->result.attempt = t->attempt;
    a->result.status = p->failed || p->unsent ? (t->status ? t->status
                                                           : XFER_ERR_REMOTE)
                                              : 0;
    a->result.user_data = t->user_data;
    a->result.first_failed_shard = XFER_SHARD_NONE;
    p->released = 1;
}

/* Release every part none of whose writes is in flight: all of them when
 * nothing more is sent (a failure or stop, `all_idle`), else those whose
 * runs were all sent and answered. */
static void release_parts(xfer_transfer_ctx *c, const xfer_transfer *t,
                          bool stopped)
{
    xfer_stream *st = t->st;
    for (uint32_t i = 0; i < st->nparts; i++) {
        xfer_part *p = st->parts[i];
        if (!p->released && p->inflight == 0 && (stopped || p->unsent == 0))
            release_part(c, t, p);
    }
}

/* Shard k's next run: the first unsent run of k in the parts, in order. */
static xfer_part *next_run(xfer_stream *st, uint16_t k, uint32_t *idx)
{
    xfer_stream_shard *sh = &st->sh[k];
    for (uint32_t i = 0; i < st->nparts; i++) {
        xfer_part *p = st->parts[i];
        if (p->seq < sh->cur_seq)
            continue;
        uint32_t *start = xfer_part_start(p);
        uint32_t at = p->seq == sh->cur_seq ? sh->cur_idx : start[k];
        if (at < start[k + 1]) {
            *idx = at;
            return p;
        }
    }
    return NULL;
}

static void send_run(xfer_transfer_ctx *c, xfer_transfer *t, uint16_t k,
                     xfer_part *p, uint32_t idx)
{
    const xfer_range *r = &p->r[idx];
    xfer_transfer_shard *s = &t->shards[k];
    xfer_action *a = push(c, t, XFER_ACT_WRITE, k);
    a->len = r->len;
    a->resv_id = s->resv_id;
    a->remote_addr = s->remote_addr + r->resv_off;
    a->staging_off = r->staging_off;
    a->rkey = s->rkey;
    a->pool = r->pool;
    a->part = p->seq;
    a->resv_off = r->resv_off;
    s->write = XFER_SUB_PENDING;
    t->st->sh[k].cur_seq = p->seq;
    t->st->sh[k].cur_idx = idx + 1;
    t->st->sh[k].fly_seq = p->seq;
    p->unsent--;
    p->inflight++;
    t->pending++;
}

static bool parts_left(const xfer_stream *st)
{
    for (uint32_t i = 0; i < st->nparts; i++)
        if (!st->parts[i]->released)
            return true;
    return false;
}

static void enter_phase(xfer_transfer *t, xfer_transfer_ctx *c, uint8_t state,
                        uint8_t kind);

/* WRITING of a healthy stream: a write to every idle shard that has a run
 * waiting, release what is done, and commit once sealed and done. */
static void pump(xfer_transfer *t, xfer_transfer_ctx *c)
{
    xfer_stream *st = t->st;
    if (t->state != XFER_TRANSFER_STATE_WRITING || failed(t) || t->stopping)
        return;
    for (uint16_t k = 0; k < t->nshards; k++) {
        uint32_t idx;
        xfer_part *p;
        if (st->sh[k].fly_seq == 0 && (p = next_run(st, k, &idx)) != NULL)
            send_run(c, t, k, p, idx);
    }
    release_parts(c, t, false);
    if (st->sealed && t->pending == 0 && !parts_left(st))
        enter_phase(t, c, XFER_TRANSFER_STATE_COMPLETING, XFER_ACT_COMMIT);
}

/* ---------------------------------------------------------------------- */
/* Phase entries                                                           */
/* ---------------------------------------------------------------------- */

static void finish(xfer_transfer *t, xfer_transfer_ctx *c)
{
    push(c, t, XFER_ACT_RELEASE_STAGING, XFER_SHARD_NONE);
    xfer_action *a = push(c, t, XFER_ACT_COMPLETE, XFER_SHARD_NONE);
    a->result = (xfer_result){
        .id = t->id,
        .attempt = t->attempt,
        .status = t->status,
        .phase = t->status ? t->fail_phase : XFER_PHASE_NONE,
        .consumer_may_hold = t->may_hold != 0,
        .first_failed_shard = t->status ? first_named(t) : XFER_SHARD_NONE,
        .failed_shards = t->failed_shards,
        .rollback_failed = t->rollback_failed,
        .user_data = t->user_data,
    };
    t->state = XFER_TRANSFER_STATE_TOMBSTONED;
    set_timer(t, XFER_TIMER_NONE, 0);
}

/* Send the cancels of one round to every shard whose cancel is `from`
 * among those ever sent a reserve or an eager op. */
static uint16_t send_cancels(xfer_transfer *t, xfer_transfer_ctx *c,
                             uint8_t from)
{
    uint16_t n = 0;
    for (uint16_t k = 0; k < t->nshards; k++) {
        xfer_transfer_shard *s = &t->shards[k];
        if ((s->resv == XFER_SUB_NONE && s->eager == XFER_SUB_NONE) ||
            s->cancel != from)
            continue;
        s->cancel = XFER_SUB_PENDING;
        s->cancel_attempts++;
        send_op(c, t, XFER_ACT_CANCEL, k);
        n++;
    }
    return n;
}

/*
 * The shutdown deadline passed (xfer_core_abandon): the rollback still to
 * do is left to the shards' leases.  Every shard that was sent a reserve
 * or an eager op and whose cancel has not succeeded is named in
 * rollback_failed, and the result says ABANDONED.  Only between rounds
 * (no op in flight, I2), so nothing of the transfer is in flight when it
 * finishes (I3).
 */
static void abandon_rest(xfer_transfer *t, xfer_transfer_ctx *c, uint64_t now)
{
    assert(t->pending == 0);
    for (uint16_t k = 0; k < t->nshards; k++) {
        xfer_transfer_shard *s = &t->shards[k];
        if ((s->resv == XFER_SUB_NONE && s->eager == XFER_SUB_NONE) ||
            s->cancel == XFER_SUB_OK || s->cancel == XFER_SUB_GAVE_UP)
            continue;
        s->cancel = XFER_SUB_GAVE_UP;
        t->rollback_failed |= UINT64_C(1) << k;
        t->status = XFER_ERR_ABANDONED;
        c->cancel_gave_up++;
        trace_note(c, now, t, k, XFER_NOTE_CANCEL_GAVE_UP, XFER_ERR_ABANDONED);
    }
    finish(t, c);
}

static void enter_cancelling(xfer_transfer *t, xfer_transfer_ctx *c,
                             uint64_t now)
{
    if (t->st)
        release_parts(c, t, true); /* nothing more is sent */
    assert(t->pending == 0);
    t->state = XFER_TRANSFER_STATE_CANCELLING;
    if (c->abandoning) {
        /* Send nothing; the RETRY the container fires at once ends it
         * (abandon_rest), so the edge taken is CANCELLING -> TOMBSTONED. */
        set_timer(t, XFER_TIMER_RETRY, now);
        return;
    }
    t->pending = send_cancels(t, c, XFER_SUB_NONE);
    if (t->pending == 0) {
        finish(t, c);
        return;
    }
    set_timer(t, XFER_TIMER_DEADLINE, now + c->cfg->cancel_op_timeout_ns);
}

static void enter_phase(xfer_transfer *t, xfer_transfer_ctx *c, uint8_t state,
                        uint8_t kind)
{
    t->state = state;
    for (uint16_t k = 0; k < t->nshards; k++) {
        if (kind == XFER_ACT_WRITE)
            t->shards[k].write = XFER_SUB_PENDING;
        else
            t->shards[k].commit = XFER_SUB_PENDING;
        send_op(c, t, kind, k);
    }
    t->pending = t->nshards;
}

/* Called when the last op of RESERVING or WRITING answered. */
static void phase_drained(xfer_transfer *t, xfer_transfer_ctx *c, uint64_t now)
{
    if (failed(t) || t->stopping) {
        enter_cancelling(t, c, now);
        return;
    }
    if (t->state == XFER_TRANSFER_STATE_RESERVING && t->st) {
        t->state = XFER_TRANSFER_STATE_WRITING; /* the parts' turn */
        t->pending = 0;
        pump(t, c);
    } else if (t->state == XFER_TRANSFER_STATE_RESERVING)
        enter_phase(t, c, XFER_TRANSFER_STATE_WRITING, XFER_ACT_WRITE);
    else
        enter_phase(t, c, XFER_TRANSFER_STATE_COMPLETING, XFER_ACT_COMMIT);
}

/* ---------------------------------------------------------------------- */
/* Handlers of the record rows, one per handler token                      */
/* ---------------------------------------------------------------------- */

/* The submit takes the eager path: the group allows it, the core has it
 * on, and every shard's slice fits. */
static bool goes_eager(const xfer_transfer_ctx *c, const xfer_transfer *t)
{
    uint32_t max = c->cfg->eager_max_bytes;
    if (!t->eager || max == 0)
        return false;
    for (uint16_t k = 0; k < t->nshards; k++)
        if (t->shards[k].len > max)
            return false;
    return true;
}

/* NEW + SUBMIT: the container made the record; send every reserve, or on
 * the eager path every eager op. */
static int h_submit(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    xfer_transfer *t = e->t;
    if (!goes_eager(c, t)) {
        t->eager = 0;
    } else {
        t->state = XFER_TRANSFER_STATE_EAGER;
        for (uint16_t k = 0; k < t->nshards; k++) {
            t->shards[k].eager = XFER_SUB_PENDING;
            send_op(c, t, XFER_ACT_EAGER, k);
        }
        t->pending = t->nshards;
        set_timer(t, XFER_TIMER_DEADLINE, t->deadline_ns);
        return 0;
    }
    t->state = XFER_TRANSFER_STATE_RESERVING;
    for (uint16_t k = 0; k < t->nshards; k++) {
        t->shards[k].resv = XFER_SUB_PENDING;
        send_op(c, t, XFER_ACT_RESERVE, k);
    }
    t->pending = t->nshards;
    set_timer(t, XFER_TIMER_DEADLINE, t->deadline_ns);
    return 0;
}

static int h_reserve_result(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    xfer_transfer *t = e->t;
    const xfer_shard_result *r = e->r;
    xfer_transfer_shard *s = &t->shards[r->shard];
    if (e->step.event == XFER_TRANSFER_EVENT_RESERVE_OK) {
        s->resv = XFER_SUB_OK;
        s->resv_id = r->resv_id;
        s->remote_addr = r->remote_addr;
        s->rkey = r->rkey;
    } else {
        s->resv = XFER_SUB_FAILED;
        note_failure(t, r->shard, r->status, XFER_PHASE_RESERVING);
    }
    if (--t->pending == 0)
        phase_drained(t, c, e->step.now_ns);
    return 0;
}

static int h_write_result(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    xfer_transfer *t = e->t;
    const xfer_shard_result *r = e->r;
    xfer_transfer_shard *s = &t->shards[r->shard];
    if (e->step.event == XFER_TRANSFER_EVENT_WRITE_OK) {
        s->write = XFER_SUB_OK;
    } else {
        s->write = XFER_SUB_FAILED;
        note_failure(t, r->shard, r->status, XFER_PHASE_WRITING);
    }
    if (t->st) {
        xfer_part *p = part_of(t->st, t->st->sh[r->shard].fly_seq);
        t->st->sh[r->shard].fly_seq = 0;
        assert(p && p->inflight > 0);
        p->inflight--;
        if (e->step.event != XFER_TRANSFER_EVENT_WRITE_OK)
            p->failed = 1;
        t->pending--;
        if (!failed(t) && !t->stopping) {
            pump(t, c);
            return 0;
        }
        release_parts(c, t, true);
        if (t->pending == 0)
            phase_drained(t, c, e->step.now_ns);
        return 0;
    }
    if (--t->pending == 0)
        phase_drained(t, c, e->step.now_ns);
    return 0;
}

/* The last commit (or eager op) answered.  Every shard acked: success,
 * even if a stop came meanwhile.  Otherwise roll back every shard. */
static void end_wait(xfer_transfer *t, xfer_transfer_ctx *c, uint64_t now,
                     bool all_acked)
{
    if (all_acked) {
        t->status = 0;
        t->failed_shards = 0;
        finish(t, c);
        return;
    }
    enter_cancelling(t, c, now);
}

static int h_commit_result(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    xfer_transfer *t = e->t;
    const xfer_shard_result *r = e->r;
    xfer_transfer_shard *s = &t->shards[r->shard];
    if (e->step.event == XFER_TRANSFER_EVENT_COMMIT_OK) {
        s->commit = XFER_SUB_OK;
    } else {
        /* A commit whose reply failed may still have been applied. */
        s->commit = XFER_SUB_FAILED;
        t->may_hold = 1;
        note_failure(t, r->shard, r->status, XFER_PHASE_COMPLETING);
    }
    if (--t->pending != 0)
        return 0;
    bool all_acked = true;
    for (uint16_t k = 0; k < t->nshards; k++)
        all_acked = all_acked && t->shards[k].commit == XFER_SUB_OK;
    end_wait(t, c, e->step.now_ns, all_acked);
    return 0;
}

/* EAGER + a shard's answer.  Success only when every shard applied it;
 * a failed eager op may have been applied (its reply lost), so the result
 * says the consumer may hold the data, exactly as for a failed commit, and
 * the transfer rolls back every shard. */
static int h_eager_result(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    xfer_transfer *t = e->t;
    const xfer_shard_result *r = e->r;
    xfer_transfer_shard *s = &t->shards[r->shard];
    if (e->step.event == XFER_TRANSFER_EVENT_EAGER_OK) {
        s->eager = XFER_SUB_OK;
        s->resv_id = r->resv_id;
    } else {
        s->eager = XFER_SUB_FAILED;
        t->may_hold = 1;
        note_failure(t, r->shard, r->status, XFER_PHASE_COMPLETING);
    }
    if (--t->pending != 0)
        return 0;
    bool all_applied = true;
    for (uint16_t k = 0; k < t->nshards; k++)
        all_applied = all_applied && t->shards[k].eager == XFER_SUB_OK;
    end_wait(t, c, e->step.now_ns, all_applied);
    return 0;
}

static int32_t stop_status(unsigned ev)
{
    switch (ev) {
    case XFER_TRANSFER_EVENT_USER_CANCEL:
        return XFER_ERR_CANCELLED;
    case XFER_TRANSFER_EVENT_DEADLINE:
        return XFER_ERR_TIMEOUT;
    default:
        return XFER_ERR_SHUTDOWN;
    }
}

static uint8_t phase_of(uint8_t state)
{
    switch (state) {
    case XFER_TRANSFER_STATE_RESERVING:
        return XFER_PHASE_RESERVING;
    case XFER_TRANSFER_STATE_WRITING:
        return XFER_PHASE_WRITING;
    case XFER_TRANSFER_STATE_COMPLETING:
    case XFER_TRANSFER_STATE_EAGER: /* the consumer may hold the data */
        return XFER_PHASE_COMPLETING;
    default:
        return XFER_PHASE_CANCELLING;
    }
}

/* The op of shard k that the current phase waits for, or XFER_OP_COUNT_. */
static uint8_t pending_op(const xfer_transfer *t, uint16_t k)
{
    const xfer_transfer_shard *s = &t->shards[k];
    if (t->state == XFER_TRANSFER_STATE_RESERVING && s->resv == XFER_SUB_PENDING)
        return XFER_OP_RESERVE;
    if (t->state == XFER_TRANSFER_STATE_WRITING && s->write == XFER_SUB_PENDING)
        return XFER_OP_WRITE;
    if (t->state == XFER_TRANSFER_STATE_COMPLETING &&
        s->commit == XFER_SUB_PENDING)
        return XFER_OP_COMMIT;
    if (t->state == XFER_TRANSFER_STATE_EAGER && s->eager == XFER_SUB_PENDING)
        return XFER_OP_EAGER;
    return XFER_OP_COUNT_;
}

/* User cancel, deadline or shutdown while ops of a phase are in flight:
 * start nothing new, abort what is in flight, leave when all answered.  A
 * deadline names every shard it aborts: those held the transfer up. */
static int h_stop(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    xfer_transfer *t = e->t;
    unsigned ev = e->step.event;
    if (t->stopping)
        return 0;
    t->stopping = 1;
    if (!failed(t)) {
        t->status = stop_status(ev);
        t->fail_phase = phase_of(t->state);
    }
    for (uint16_t k = 0; k < t->nshards; k++) {
        uint8_t op = pending_op(t, k);
        if (op == XFER_OP_COUNT_)
            continue;
        abort_op(c, t, op, k);
        if (ev == XFER_TRANSFER_EVENT_DEADLINE)
            name_shard(t, k);
    }
    set_timer(t, XFER_TIMER_NONE, 0);
    if (t->st && t->state == XFER_TRANSFER_STATE_WRITING) {
        /* A stream waiting for its next part has nothing in flight to
         * wait for: the parts with no write in flight go back now, and
         * with none in flight at all the rollback starts at once. */
        release_parts(c, t, true);
        if (t->pending == 0)
            phase_drained(t, c, e->step.now_ns);
    }
    return 0;
}

/* COMPLETING and EAGER: a user cancel or shutdown starts nothing; if every
 * commit (eager op) is acked the transfer still succeeds (docs/design.md,
 * section 2.1). */
static int h_defer_stop(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    e->t->stop_deferred = 1;
    return 0;
}

static int h_cancel_result(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    xfer_transfer *t = e->t;
    const xfer_shard_result *r = e->r;
    uint64_t now = e->step.now_ns;
    xfer_transfer_shard *s = &t->shards[r->shard];
    bool done = e->step.event == XFER_TRANSFER_EVENT_CANCEL_OK ||
                r->status == XFER_ERR_CANCELLED ||
                r->status == XFER_ERR_STALE || r->status == XFER_ERR_STATE ||
                r->status == XFER_ERR_PERM;
    if (done) {
        /* CANCELLED: already tombstoned there; STALE: the shard holds only
         * another attempt, and PERM only another session's record, so
         * nothing of ours remains; STATE: the consumer took the data, so
         * it is the consumer's to free, not ours. */
        s->cancel = XFER_SUB_OK;
        if (r->status == XFER_ERR_STATE)
            t->may_hold = 1;
    } else if (s->cancel_attempts < c->cfg->cancel_max_attempts &&
               !c->abandoning) {
        s->cancel = XFER_SUB_FAILED;
    } else {
        /* Out of attempts, or past the shutdown deadline: no retry. */
        s->cancel = XFER_SUB_GAVE_UP;
        t->rollback_failed |= UINT64_C(1) << r->shard;
        if (c->abandoning)
            t->status = XFER_ERR_ABANDONED;
        c->cancel_gave_up++;
        trace_note(c, now, t, r->shard, XFER_NOTE_CANCEL_GAVE_UP, r->status);
    }
    if (--t->pending != 0)
        return 0;
    bool retry = false;
    for (uint16_t k = 0; k < t->nshards; k++)
        retry = retry || t->shards[k].cancel == XFER_SUB_FAILED;
    if (!retry) {
        finish(t, c);
        return 0;
    }
    /* Doubling, capped (core.h: cancel_backoff_ns), so a shard that never
     * answers costs each round at most the cap plus the op timeout. */
    uint64_t first = c->cfg->cancel_backoff_ns;
    uint64_t cap = first > XFER_CORE_CANCEL_BACKOFF_CAP_NS
                       ? first
                       : XFER_CORE_CANCEL_BACKOFF_CAP_NS;
    uint64_t backoff = first << (t->cancel_round < 20 ? t->cancel_round : 20);
    if (backoff > cap || backoff < first)
        backoff = cap;
    t->cancel_round++;
    set_timer(t, XFER_TIMER_RETRY, now + backoff);
    return 0;
}

static int h_cancel_retry(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    xfer_transfer *t = e->t;
    if (c->abandoning) {
        abandon_rest(t, c, e->step.now_ns);
        return 0;
    }
    t->pending = send_cancels(t, c, XFER_SUB_FAILED);
    c->cancel_retries += t->pending;
    assert(t->pending > 0);
    set_timer(t, XFER_TIMER_DEADLINE,
              e->step.now_ns + c->cfg->cancel_op_timeout_ns);
    return 0;
}

/* A cancel round took too long: abort the cancels still in flight; their
 * results (ABORTED) then count as failed attempts. */
static int h_cancel_timeout(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    xfer_transfer *t = e->t;
    for (uint16_t k = 0; k < t->nshards; k++)
        if (t->shards[k].cancel == XFER_SUB_PENDING)
            abort_op(c, t, XFER_OP_CANCEL, k);
    set_timer(t, XFER_TIMER_NONE, 0);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Handlers of the rows without a record (the container's ids)             */
/* ---------------------------------------------------------------------- */

/* Cells that absorb an event without acting on it, and ILLEGAL ones
 * (whose handler the dispatcher never calls). */
static int h_none(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    return 0;
}

/* NEW + a shard result: a reply for an id this core does not know (never
 * seen, or its tombstone has expired).  Absorbed, counted, noted. */
static int h_unknown_reply(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    c->unknown_replies++;
    xfer_step_note_after(&e->step, XFER_NOTE_UNKNOWN_REPLY, e->r->status);
    return 0;
}

/* TOMBSTONED + a reserve or cancel result: a late reply, absorbed. */
static int h_late_reply(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    c->late_replies++;
    xfer_step_note_after(&e->step, XFER_NOTE_LATE_REPLY, e->r->status);
    return 0;
}

/* A live state + SUBMIT: the id is in use.  The submit is refused and the
 * record is not touched (the container passes none). */
static int h_live_submit(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    return XFER_ERR_EXISTS;
}

/* TOMBSTONED + SUBMIT: nothing recreates a tombstoned id (I6); the submit
 * fails at once and no completion follows. */
static int h_late_submit(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    /* Which tombstone says why: a cancel of an id never submitted leaves
     * attempt 0 (h_preempt); a transfer that ended leaves its own attempt,
     * which is never 0 (fsm/core.c skips it). */
    int rc = e->attempt == 0 ? XFER_ERR_CANCELLED : XFER_ERR_REUSED;
    c->late_submits++;
    xfer_step_note_after(&e->step, XFER_NOTE_LATE_SUBMIT, rc);
    return rc;
}

/* NEW + USER_CANCEL: a cancel of an unknown id leaves a tombstone (I7),
 * made from the hold the container took (at the cap it refused the cancel
 * before the table). */
static int h_preempt(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    xfer_tomb_insert_held(c->tombs, e->step.now_ns, e->id, 0,
                          XFER_PHASE_NONE);
    e->step.to = XFER_TRANSFER_STATE_TOMBSTONED;
    xfer_step_note_after(&e->step, XFER_NOTE_PREEMPTIVE, 0);
    return 0;
}

/* TOMBSTONED + USER_CANCEL: a repeated cancel gives the tombstone a full
 * TTL from now; at the cap the old entry keeps its expiry (BUSY). */
static int h_refresh(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    return xfer_tomb_refresh(c->tombs, e->step.now_ns, e->id, e->attempt,
                             e->tomb_reason);
}

/* ---------------------------------------------------------------------- */
/* Stream handlers (PART, SEAL)                                            */
/* ---------------------------------------------------------------------- */

/* Why a live record refuses a part or a seal: not a stream, sealed, or
 * its failure or stop. */
static int stream_refusal(const xfer_transfer *t)
{
    if (!t->st || t->st->sealed)
        return XFER_ERR_STATE;
    if (failed(t))
        return t->status;
    return t->stopping ? XFER_ERR_STATE : 0;
}

/* NEW + PART / SEAL: no live transfer of the id. */
static int h_no_stream(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    return XFER_ERR_NOT_FOUND;
}

/* TOMBSTONED + PART / SEAL: the transfer ended (its completion is out). */
static int h_part_ended(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    return XFER_ERR_STATE;
}

/* COMPLETING / CANCELLING / EAGER + PART / SEAL: sealed already, rolling
 * back, or not a stream.  The record is not touched. */
static int h_part_refused(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    int rc = stream_refusal(e->t);
    return rc ? rc : XFER_ERR_STATE;
}

/* RESERVING / WRITING + PART: take the part unless the transfer refuses
 * it, or it would leave a shard more written ranges than the shard keeps
 * (checked run by run, in the order the runs will be written). */
static int h_part(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    xfer_transfer *t = e->t;
    xfer_part *p = e->part;
    int rc = stream_refusal(t);
    if (rc)
        return rc;
    if (!p)
        return XFER_ERR_NOMEM; /* the container could not make it */
    xfer_stream *st = t->st;
    if (st->nparts >= XFER_STREAM_MAX_PARTS)
        return XFER_ERR_BUSY;
    uint32_t *start = xfer_part_start(p);
    for (uint16_t k = 0; k < t->nshards; k++) {
        xfer_spans sp = st->sh[k].spans;
        for (uint32_t i = start[k]; i < start[k + 1]; i++)
            if (!xfer_spans_add(&sp, p->r[i].resv_off,
                                p->r[i].resv_off + p->r[i].len))
                return XFER_ERR_BUSY;
    }
    for (uint16_t k = 0; k < t->nshards; k++)
        for (uint32_t i = start[k]; i < start[k + 1]; i++)
            (void)xfer_spans_add(&st->sh[k].spans, p->r[i].resv_off,
                                 p->r[i].resv_off + p->r[i].len);
    p->seq = st->next_seq++;
    p->unsent = p->n;
    st->parts[st->nparts++] = p;
    e->part = NULL;
    e->part_seq = p->seq;
    pump(t, c);
    return 0;
}

/* RESERVING / WRITING + SEAL: no part follows; in WRITING with every part
 * done the commits go out now. */
static int h_seal(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    xfer_transfer *t = e->t;
    int rc = stream_refusal(t);
    if (rc)
        return rc;
    t->st->sealed = 1;
    pump(t, c);
    return 0;
}

typedef struct cell {
    uint8_t verdict;
    handler_fn fn;
    const char *name;
} cell;

static const cell table[XFER_TRANSFER_STATE_COUNT_][XFER_TRANSFER_EVENT_COUNT_] = {
#define C_(s, e, v, h)                                                        \
    [XFER_TRANSFER_STATE_##s][XFER_TRANSFER_EVENT_##e] = {XFER_VERDICT_##v,   \
                                                          h_##h, #h},
    XFER_TRANSFER_TABLE(C_)
#undef C_
};

bool xfer_transfer_cell(unsigned state, unsigned event, xfer_step_cell *out)
{
    if (state >= XFER_TRANSFER_STATE_COUNT_ ||
        event >= XFER_TRANSFER_EVENT_COUNT_)
        return false;
    const cell *c = &table[state][event];
    *out = (xfer_step_cell){c->verdict, c->fn ? c->name : NULL};
    return true;
}

/* ---------------------------------------------------------------------- */
/* Dispatch                                                                */
/* ---------------------------------------------------------------------- */

unsigned xfer_transfer_result_event(const xfer_shard_result *r)
{
    bool ok = r->status == 0;
    switch (r->op) {
    case XFER_OP_RESERVE:
        return ok ? XFER_TRANSFER_EVENT_RESERVE_OK : XFER_TRANSFER_EVENT_RESERVE_FAIL;
    case XFER_OP_WRITE:
        return ok ? XFER_TRANSFER_EVENT_WRITE_OK : XFER_TRANSFER_EVENT_WRITE_FAIL;
    case XFER_OP_COMMIT:
        return ok ? XFER_TRANSFER_EVENT_COMMIT_OK : XFER_TRANSFER_EVENT_COMMIT_FAIL;
    case XFER_OP_EAGER:
        return ok ? XFER_TRANSFER_EVENT_EAGER_OK : XFER_TRANSFER_EVENT_EAGER_FAIL;
    default:
        return ok ? XFER_TRANSFER_EVENT_CANCEL_OK : XFER_TRANSFER_EVENT_CANCEL_FAIL;
    }
}

bool xfer_transfer_expects(const xfer_transfer *t, const xfer_shard_result *r)
{
    if (r->shard >= t->nshards || r->attempt != t->attempt)
        return false;
    const xfer_transfer_shard *s = &t->shards[r->shard];
    switch (r->op) {
    case XFER_OP_RESERVE:
        return t->state == XFER_TRANSFER_STATE_RESERVING && s->resv == XFER_SUB_PENDING;
    case XFER_OP_WRITE:
        return t->state == XFER_TRANSFER_STATE_WRITING && s->write == XFER_SUB_PENDING;
    case XFER_OP_COMMIT:
        return t->state == XFER_TRANSFER_STATE_COMPLETING &&
               s->commit == XFER_SUB_PENDING;
    case XFER_OP_CANCEL:
        return t->state == XFER_TRANSFER_STATE_CANCELLING &&
               s->cancel == XFER_SUB_PENDING;
    case XFER_OP_EAGER:
        return t->state == XFER_TRANSFER_STATE_EAGER &&
               s->eager == XFER_SUB_PENDING;
    default:
        return false;
    }
}

unsigned xfer_transfer_timer_event(const xfer_transfer *t)
{
    return t->timer_kind == XFER_TIMER_RETRY ? XFER_TRANSFER_EVENT_RETRY
                                             : XFER_TRANSFER_EVENT_DEADLINE;
}

/* The step's record: a record's step shows its pending count and failed
 * mask after the handler; a row without a record shows only the event. */
static void trace_step(xfer_transfer_ctx *c, const xfer_transfer_step *e,
                       int rc)
{
    if (!c->trace.fn)
        return;
    const xfer_shard_result *r = e->r;
    xfer_trace_rec rec = {
        .id = e->id,
        .attempt = e->attempt,
        .error = rc ? rc : r ? r->status : 0, /* the event's own status */
        .shard = r ? r->shard : XFER_SHARD_NONE,
    };
    if (e->t) {
        rec.arg0 = r ? r->resv_id : 0;
        rec.arg1 = e->t->pending;
        rec.arg2 = e->t->failed_shards;
    }
    xfer_step_emit(&c->trace, &c->seq, &e->step, &rec);
}

void xfer_transfer_trace_action(xfer_transfer_ctx *c, uint64_t now_ns,
                                const xfer_action *a)
{
    if (!c->trace.fn)
        return;
    xfer_trace_rec rec = {
        .time_ns = now_ns,
        .id = a->id,
        .arg0 = a->resv_id,
        /* a stream's part number above the length (0 otherwise, so the
         * records of one-shot transfers are as they were) */
        .arg1 = a->len | (uint64_t)a->part << 32,
        .arg2 = a->kind == XFER_ACT_COMPLETE ? a->result.failed_shards
                : a->kind == XFER_ACT_COMMIT ? 0
                                             : a->staging_off,
        .attempt = a->attempt,
        .error = a->kind == XFER_ACT_COMPLETE ||
                         a->kind == XFER_ACT_RELEASE_PART
                     ? a->result.status
                     : 0,
        .shard = a->shard,
        .machine = XFER_MACHINE_ACTION,
        .old_state = a->op,
        .event = a->kind,
        .new_state = a->kind == XFER_ACT_COMPLETE ? a->result.phase : 0,
    };
    xfer_util_emit(&c->trace, &c->seq, &rec);
}

int xfer_transfer_dispatch(xfer_transfer_ctx *c, xfer_transfer_step *e)
{
    if (e->t)
        e->step.from = e->t->state;
    unsigned from = e->step.from, ev = e->step.event;
    assert(from < XFER_TRANSFER_STATE_COUNT_ &&
           ev < XFER_TRANSFER_EVENT_COUNT_);
    const cell *cl = &table[from][ev];
    size_t first_action = c->nacts;
    int rc = XFER_ERR_STATE;
    if (xfer_step_enter(&e->step, cl->verdict, &c->cells_hit[from][ev],
                        &c->illegal))
        rc = cl->fn(c, e);
    if (e->t)
        e->step.to = e->t->state;
    xfer_step_leave(&e->step, &c->illegal);
    trace_step(c, e, rc);
    for (size_t i = first_action; i < c->nacts; i++)
        xfer_transfer_trace_action(c, e->step.now_ns, &c->acts[i]);
    return rc;
}
