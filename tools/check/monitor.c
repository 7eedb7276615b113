/*
 * tools/check/monitor.c - the observer monitors of invariants I1-I14.
 *
 * The monitors keep their own bookkeeping (ck_mon, part of the state): which
 * ops each transfer has outstanding, which submits were accepted, which
 * completions were reported, which regions each shard handed out and which
 * writes are landing in them, what reached the readiness tracker.  They
 * learn it only from what crosses an interface: actions the core emits,
 * return codes of calls, messages delivered, events and actions of the
 * consumer side.  They never read the machines' records; where they ask a
 * machine anything it is through its public query API, and only to compare
 * with their own view.
 *
 * The first violation wins: ck_monitor_fail() records it and later ones on the
 * same path are ignored.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core_int.h"
#include "corrupt.h"
#include "stream.h"
#include "monitor.h"
#include "copies.h"
#include "gone.h"
#include "refresh.h"
#include "rdma.h"
#include "readiness_int.h"
#include "shard_int.h"

static const char *const inv_names[] = {
#define N_(n, d) #n,
    CK_INVARIANTS(N_)
#undef N_
};
static const char *const inv_descs[] = {
#define D_(n, d) d,
    CK_INVARIANTS(D_)
#undef D_
};

const char *ck_monitor_inv_name(unsigned inv)
{
    return inv < CK_INV_COUNT_ ? inv_names[inv] : "?";
}

const char *ck_monitor_inv_desc(unsigned inv)
{
    return inv < CK_INV_COUNT_ ? inv_descs[inv] : "?";
}

void ck_monitor_fail(ck_world *w, int inv, const char *fmt, ...)
{
    if (w->v.inv >= 0)
        return;
    w->v.inv = inv;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->v.what, sizeof w->v.what, fmt, ap);
    va_end(ap);
}

static mon_tr *tr_of(ck_world *w, uint64_t id)
{
    return id >= 1 && id <= w->cfg->T ? &w->mon.tr[id - 1] : NULL;
}

static bool tomb_alive(const ck_world *w, const mon_tr *t)
{
    return t->tomb && w->env.now < t->tomb_at + CK_CORE_TOMB_TTL;
}

/* ---------------------------------------------------------------------- */
/* Producer side: submits, cancels, the action stream                      */
/* ---------------------------------------------------------------------- */

void ck_monitor_submit(ck_world *w, unsigned tr, int rc, bool late)
{
    mon_tr *t = &w->mon.tr[tr];
    uint64_t id = tr + 1u;
    if (rc != 0) {
        if (rc != XFER_ERR_EXISTS && rc != XFER_ERR_CANCELLED &&
            rc != XFER_ERR_REUSED && rc != XFER_ERR_SHUTDOWN &&
            rc != XFER_ERR_BUSY)
            ck_monitor_fail(w, CK_I11, "submit of id %llu failed with %s, not "
                            "a documented refusal", (unsigned long long)id,
                            xfer_err_name(rc));
        if (rc == XFER_ERR_EXISTS && !t->open)
            ck_monitor_fail(w, CK_I1, "submit of id %llu refused as EXISTS "
                            "but no transfer of it is open",
                            (unsigned long long)id);
        return;
    }
    if (w->mon.shutdown_req)
        ck_monitor_fail(w, CK_I9,
                        "%ssubmit of id %llu accepted after "
                        "shutdown",
                        late ? "late " : "", (unsigned long long)id);
    else if (t->open)
        ck_monitor_fail(w, CK_I1,
                        "%ssubmit of id %llu accepted while the id "
                        "is open",
                        late ? "late " : "", (unsigned long long)id);
    else if (tomb_alive(w, t))
        ck_monitor_fail(w, t->tomb == 2 ? CK_I7 : CK_I6,
                        "%ssubmit of id %llu accepted %llu ns after it was %s "
                        "(tombstone TTL %llu ns): the transfer is recreated",
                        late ? "late " : "", (unsigned long long)id,
                        (unsigned long long)(w->env.now - t->tomb_at),
                        t->tomb == 2 ? "cancelled pre-emptively" : "ended",
                        (unsigned long long)CK_CORE_TOMB_TTL);
    t->open = 1;
    t->completions = 0;
    t->attempt = 0;
    t->stopped = t->failed = 0;
    t->accepted_at = w->env.now;
    t->success = 0;
    memset(t->ps, 0, sizeof t->ps);
    if (w->env.crashed)
        t->open = 0;
}

void ck_monitor_cancel(ck_world *w, unsigned tr, int rc,
                       xfer_transfer_state before)
{
    mon_tr *t = &w->mon.tr[tr];
    if (rc != 0) {
        if (rc != XFER_ERR_BUSY)
            ck_monitor_fail(w, CK_I11, "cancel of id %u failed with %s",
                            tr + 1u, xfer_err_name(rc));
        return;
    }
    if (t->open) {
        if (!t->failed)
            t->stopped = 1;
        return;
    }
    xfer_transfer_state after = xfer_core_state(w->core, tr + 1u);
    if (after != XFER_TRANSFER_STATE_TOMBSTONED)
        ck_monitor_fail(w, CK_I7, "cancel of id %u (not open) returned 0 but "
                        "left no tombstone", tr + 1u);
    if (before == XFER_TRANSFER_STATE_NEW && !tomb_alive(w, t)) {
        t->tomb = 2;
        t->tomb_at = w->env.now;
    }
}

void ck_monitor_core_timer(ck_world *w)
{
    for (unsigned i = 0; i < w->cfg->T; i++) {
        mon_tr *t = &w->mon.tr[i];
        if (t->open && !t->failed &&
            w->env.now >= t->accepted_at + CK_DEADLINE)
            t->stopped = 1;
    }
}

void ck_monitor_shutdown(ck_world *w)
{
    w->mon.shutdown_req = 1;
    for (unsigned i = 0; i < w->cfg->T; i++)
        if (w->mon.tr[i].open && !w->mon.tr[i].failed)
            w->mon.tr[i].stopped = 1;
}

void ck_monitor_batch(ck_world *w)
{
    for (unsigned i = 0; i < w->cfg->T; i++)
        for (unsigned k = 0; k < w->cfg->S; k++)
            memcpy(w->snap_out[i][k], w->mon.tr[i].ps[k].out,
                   sizeof w->snap_out[i][k]);
}

/* Is any op of the listed kinds outstanding on any shard?  Names the first
 * in *op / *k. */
static bool outstanding(const ck_world *w, const mon_tr *t, unsigned mask,
                        bool snap, unsigned *op, unsigned *k)
{
    unsigned tr = (unsigned)(t - w->mon.tr);
    for (unsigned j = 0; j < w->cfg->S; j++)
        for (unsigned o = 0; o < XFER_OP_COUNT_; o++) {
            uint8_t n = snap ? w->snap_out[tr][j][o] : t->ps[j].out[o];
            if ((mask & (1u << o)) && n) {
                *op = o;
                *k = j;
                return true;
            }
        }
    return false;
}

/* Every op kind, as a mask of outstanding(). */
#define ALL_OPS ((1u << XFER_OP_COUNT_) - 1u)

static void act_op(ck_world *w, mon_tr *t, const xfer_action *a, unsigned op)
{
    unsigned o, k;
    mon_ps *p = &t->ps[a->shard < CK_MAX_S ? a->shard : 0];
    if (!t->open)
        ck_monitor_fail(w, CK_I1, "%s to shard %u for id %llu, which has no "
                        "accepted submit open", xfer_op_name(op), a->shard,
                        (unsigned long long)a->id);
    /* A reserve, or an eager op, opens the attempt. */
    if ((op == XFER_OP_RESERVE || op == XFER_OP_EAGER) && t->attempt == 0) {
        if (a->attempt <= t->last_attempt)
            ck_monitor_fail(w, CK_I14,
                            "a new submit of id %llu reuses attempt "
                            "%u",
                            (unsigned long long)a->id, a->attempt);
        t->attempt = t->last_attempt = a->attempt;
    } else if (a->attempt != t->attempt) {
        ck_monitor_fail(w, CK_I14,
                        "%s for id %llu carries attempt %u, the open "
                        "attempt is %u",
                        xfer_op_name(op), (unsigned long long)a->id,
                        a->attempt, t->attempt);
    }
    unsigned before = op == XFER_OP_WRITE ? 1u << XFER_OP_RESERVE
                      : op == XFER_OP_COMMIT
                          ? (1u << XFER_OP_RESERVE) | (1u << XFER_OP_WRITE)
                      : op == XFER_OP_CANCEL ? ALL_OPS : 0u;
    if (before && outstanding(w, t, before, op == XFER_OP_CANCEL, &o, &k))
        ck_monitor_fail(w, CK_I2,
                        "%s sent to shard %u of id %llu while its "
                        "%s to shard %u is still unanswered",
                        xfer_op_name(op), a->shard, (unsigned long long)a->id,
                        xfer_op_name(o), k);
    if ((op == XFER_OP_WRITE || op == XFER_OP_EAGER) &&
        !w->env.staging[a->id - 1])
        ck_monitor_fail(w, CK_I3,
                        "%s to shard %u of id %llu reads a staging "
                        "region that was already released",
                        xfer_op_name(op), a->shard, (unsigned long long)a->id);
    p->out[op]++;
    if (op == XFER_OP_EAGER) /* a reserve and a commit in one */
        p->resv_sent = p->commit_sent = p->eager = 1;
    else if (op == XFER_OP_RESERVE)
        p->resv_sent = 1;
    else if (op == XFER_OP_COMMIT)
        p->commit_sent = 1;
    else if (op == XFER_OP_CANCEL)
        p->cancels++;
}

/* I5: every shard ever sent a reserve got its rollback, retried up to the
 * bound whatever happened on the other shards. */
static void check_rollback(ck_world *w, const mon_tr *t, uint64_t id)
{
    for (unsigned k = 0; k < w->cfg->S; k++) {
        const mon_ps *p = &t->ps[k];
        if (!p->resv_sent || p->cancel_done || p->cancel_gaveup_ok)
            continue;
        if (p->cancels == 0)
            ck_monitor_fail(w, CK_I5, "id %llu failed but shard %u, which was "
                            "sent a reserve, was never sent a cancel",
                            (unsigned long long)id, k);
        else if (p->cancels < ck_world_cancel_attempts(w))
            ck_monitor_fail(w, CK_I5, "id %llu ended its rollback with shard "
                            "%u's cancel failed after %u of %u attempts",
                            (unsigned long long)id, k, p->cancels,
                            ck_world_cancel_attempts(w));
    }
}

/* I12: the completion names in rollback_failed exactly the shards whose
 * rollback never succeeded (sent a reserve, no cancel answered "nothing of
 * ours left", none refused because the consumer took the data). */
static void check_rollback_report(ck_world *w, const mon_tr *t,
                                  const xfer_result *r)
{
    for (unsigned k = 0; k < w->cfg->S; k++) {
        const mon_ps *p = &t->ps[k];
        bool failed = p->resv_sent && !p->cancel_done && !p->cancel_gaveup_ok;
        bool named = (r->rollback_failed >> k) & 1u;
        if (failed != named)
            ck_monitor_fail(w, CK_I12, "id %llu: shard %u's rollback %s but "
                            "the completion %s it in rollback_failed",
                            (unsigned long long)r->id, k,
                            failed ? "never succeeded" : "is done",
                            named ? "names" : "does not name");
    }
}

/* I12: a failure reaches the completion with its code, phase and shard. */
static void check_failure(ck_world *w, const mon_tr *t, const xfer_result *r)
{
    unsigned long long id = (unsigned long long)r->id;
    bool commits = false, held = false;
    for (unsigned k = 0; k < w->cfg->S; k++) {
        commits = commits || t->ps[k].commit_sent;
        held = held || (t->cs[k].ready && t->cs[k].attempt == t->attempt);
        if (t->ps[k].op_failed && !(r->failed_shards & (1ull << k)))
            ck_monitor_fail(w, CK_I12, "id %llu: shard %u's op failed but the "
                            "completion's failed_shards (0x%llx) omits it", id,
                            k, (unsigned long long)r->failed_shards);
    }
    /* The naming rule of xfer/core.h: first_failed_shard is one of the named
     * shards, NONE only when none is named; a deadline fires only while a
     * phase waits on some shard, so a TIMEOUT always names one. */
    if ((r->first_failed_shard == XFER_SHARD_NONE) !=
            (r->failed_shards == 0) ||
        (r->first_failed_shard < 64 &&
         !(r->failed_shards >> r->first_failed_shard & 1)))
        ck_monitor_fail(w, CK_I12,
                        "id %llu: first_failed_shard %u is not one of "
                        "failed_shards (0x%llx)",
                        id, r->first_failed_shard,
                        (unsigned long long)r->failed_shards);
    /* A stream not yet sealed may time out waiting for its producer's
     * next part, with no shard to name (docs/streaming.md). */
    bool waits_part = w->cfg->parts && w->env.sealed[r->id - 1] != 2;
    if (r->status == XFER_ERR_TIMEOUT && r->failed_shards == 0 && !waits_part)
        ck_monitor_fail(w, CK_I12,
                        "id %llu timed out but the completion names "
                        "no shard it waited on",
                        id);
    if (r->phase < XFER_PHASE_RESERVING || r->phase > XFER_PHASE_CANCELLING)
        ck_monitor_fail(w, CK_I12, "id %llu failed (%s) without a phase", id,
                        xfer_err_name(r->status));
    if (t->failed && (r->first_failed_shard != t->fail_shard ||
                      r->phase != t->fail_phase))
        ck_monitor_fail(w, CK_I12,
                        "id %llu: the first failure was shard %u in "
                        "phase %u, the completion says shard %u phase %u",
                        id, t->fail_shard, t->fail_phase,
                        r->first_failed_shard, r->phase);
    if ((commits || held) && !r->consumer_may_hold)
        ck_monitor_fail(w, CK_I12,
                        "id %llu failed after a commit was sent but "
                        "the completion says the consumer cannot hold the "
                        "data",
                        id);
    if (held && r->phase != XFER_PHASE_COMPLETING)
        ck_monitor_fail(w, CK_I12,
                        "id %llu: a shard committed the data but the "
                        "completion reports phase %u, not COMPLETING",
                        id, r->phase);
}

static void act_complete(ck_world *w, mon_tr *t, const xfer_action *a)
{
    const xfer_result *r = &a->result;
    unsigned o, k;
    if (!t->open || t->completions > 0)
        ck_monitor_fail(w, CK_I1, "%s completion of id %llu (attempt %u)",
                        t->completions ? "a second" : "an unexpected",
                        (unsigned long long)a->id, r->attempt);
    else if (r->attempt != t->attempt)
        ck_monitor_fail(w, CK_I1,
                        "completion of id %llu names attempt %u, the "
                        "open one is %u",
                        (unsigned long long)a->id, r->attempt, t->attempt);
    if (outstanding(w, t, ALL_OPS, false, &o, &k))
        ck_monitor_fail(w, CK_I2, "id %llu completed while its %s to shard %u "
                        "is still unanswered", (unsigned long long)a->id,
                        xfer_op_name(o), k);
    if (r->status == 0) {
        for (unsigned j = 0; j < w->cfg->S; j++)
            if (!t->ps[j].commit_ok)
                ck_monitor_fail(w, CK_I12,
                                "id %llu reported success but shard "
                                "%u never acked its %s",
                                (unsigned long long)a->id, j,
                                t->ps[j].eager ? "eager op" : "commit");
    } else {
        check_rollback(w, t, a->id);
        check_rollback_report(w, t, r);
        check_failure(w, t, r);
    }
    t->open = 0;
    t->completions++;
    t->success = r->status == 0;
    t->tomb = 1;
    t->tomb_at = w->env.now;
}

void ck_monitor_action(ck_world *w, const xfer_action *a)
{
    w->out_hash = (w->out_hash ^ a->kind ^ a->id << 8 ^
                   (uint64_t)a->shard << 24 ^ (uint64_t)a->attempt << 40 ^
                   (uint64_t)(uint32_t)a->result.status << 13) *
                  0x9e3779b97f4a7c15ull;
    mon_tr *t = tr_of(w, a->id);
    ck_stream_action(w, a); /* PARTS first: it names a stream's cause */
    switch ((xfer_action_kind)a->kind) {
    case XFER_ACT_RESERVE:
    case XFER_ACT_WRITE:
    case XFER_ACT_COMMIT:
    case XFER_ACT_CANCEL:
    case XFER_ACT_EAGER:
        if (t)
            act_op(w, t, a, xfer_action_op(a->kind));
        break;
    case XFER_ACT_ABORT:
        if (t && a->shard < CK_MAX_S)
            t->ps[a->shard].abort_req = 1;
        break;
    case XFER_ACT_RELEASE_STAGING: {
        unsigned o, k;
        if (t && outstanding(w, t, 1u << XFER_OP_WRITE, false, &o, &k))
            ck_monitor_fail(w, CK_I3, "staging of id %llu released while its "
                            "WRITE to shard %u is in flight",
                            (unsigned long long)a->id, k);
        else if (t && !w->env.staging[a->id - 1])
            ck_monitor_fail(w, CK_I3, "staging of id %llu released twice",
                            (unsigned long long)a->id);
        break;
    }
    case XFER_ACT_COMPLETE:
        if (t)
            act_complete(w, t, a);
        break;
    case XFER_ACT_SHUTDOWN_DONE:
        for (unsigned i = 0; i < w->cfg->T; i++)
            if (w->mon.tr[i].open)
                ck_monitor_fail(w, CK_I9, "SHUTDOWN_DONE while id %u has not "
                                "completed", i + 1u);
        w->mon.shutdown_done = 1;
        break;
    case XFER_ACT_RELEASE_PART: /* PARTS (stream.c) */
    case XFER_ACT_COUNT_:
        break;
    }
}

/* A result reaches the core. */
void ck_monitor_result_in(ck_world *w, const ck_msg *m)
{
    mon_tr *t = &w->mon.tr[m->tr];
    if (!t->open || m->attempt != t->attempt)
        return;
    mon_ps *p = &t->ps[m->shard];
    if (p->out[m->op])
        p->out[m->op]--;
    ck_stream_result_in(w, m);
    if (m->op == XFER_OP_CANCEL) {
        if (m->status == 0 || m->status == XFER_ERR_CANCELLED ||
            m->status == XFER_ERR_STALE)
            p->cancel_done = 1;
        else if (m->status == XFER_ERR_STATE)
            p->cancel_gaveup_ok = 1;
        return;
    }
    if (m->status == 0) {
        if (m->op == XFER_OP_COMMIT || m->op == XFER_OP_EAGER)
            p->commit_ok = 1;
        return;
    }
    if (m->status == XFER_ERR_ABORTED)
        return; /* our own stop aborted it: not the shard's failure */
    p->op_failed = 1;
    if (!t->failed && !t->stopped) {
        t->failed = 1;
        t->fail_shard = (uint8_t)m->shard;
        /* RESERVE..COMMIT fail in the phase after them; an eager op in
         * COMPLETING (the consumer may hold the data). */
        t->fail_phase = m->op == XFER_OP_EAGER ? (uint8_t)XFER_PHASE_COMPLETING
                                               : (uint8_t)(m->op + 1);
    }
}

void ck_monitor_staging(ck_world *w, unsigned tr, bool release)
{
    (void)w;
    (void)tr;
    (void)release;
}

void ck_monitor_pool_unregistered(ck_world *w)
{
    for (unsigned i = 0; i < w->cfg->T; i++) {
        if (w->mon.tr[i].open)
            ck_monitor_fail(w, CK_I9, "staging pool unregistered before id %u "
                            "completed", i + 1u);
        if (w->env.staging[i])
            ck_monitor_fail(w, CK_I9, "staging pool unregistered while id %u "
                            "still holds a staging region", i + 1u);
    }
    w->mon.pool_unreg = 1;
}

/* I9 at the end of a shutdown, from the registry the engine itself keeps
 * (fsm/life.h): the pool's unregistration was handed to the driver (the
 * engine's transports forget it then), no pool registered, no staging
 * region held (neither the model's regions nor the registry's holds), and
 * every accepted transfer completed, once (a second completion is I1's,
 * act_complete). */
void ck_monitor_shutdown_complete(ck_world *w)
{
    if (!w->mon.shutdown_done)
        ck_monitor_fail(w, CK_I9, "shutdown complete reported before the core "
                        "said SHUTDOWN_DONE");
    if (w->mon.shutdown_complete)
        ck_monitor_fail(w, CK_I9, "shutdown complete reported twice");
    if (!w->mon.pool_unreg)
        ck_monitor_fail(w, CK_I9, "shutdown complete reported but the "
                        "engine was never told to unregister the staging "
                        "pool");
    for (unsigned p = 0; p < CK_POOLS; p++) {
        if (w->env.pools[p].used)
            ck_monitor_fail(w, CK_I9,
                            "shutdown complete reported while staging "
                            "pool %u is still registered", p);
        if (w->env.pools[p].users)
            ck_monitor_fail(w, CK_I9,
                            "shutdown complete reported while %u submits "
                            "still hold staging in pool %u",
                            w->env.pools[p].users, p);
    }
    for (unsigned i = 0; i < w->cfg->T; i++) {
        const mon_tr *t = &w->mon.tr[i];
        if (w->env.staging[i])
            ck_monitor_fail(w, CK_I9, "shutdown complete reported while id "
                            "%u still holds a staging region", i + 1u);
        if (t->open || t->completions > 1)
            ck_monitor_fail(w, CK_I9, "shutdown complete reported after %u "
                            "completions of accepted id %u", t->completions,
                            i + 1u);
    }
    w->mon.shutdown_complete = 1;
}

/* ---------------------------------------------------------------------- */
/* Consumer side: shards and the readiness tracker                         */
/* ---------------------------------------------------------------------- */

static bool overlaps(uint64_t a, uint32_t alen, uint64_t b, uint32_t blen)
{
    return a < b + blen && b < a + alen;
}

/* A reserve succeeded on shard k: the region must be fresh memory. */
static void new_region(ck_world *w, const ck_msg *m,
                       const xfer_resv_info *info)
{
    mon_cs *c = &w->mon.tr[m->tr].cs[m->shard];
    unsigned long long id = m->tr + 1ull;
    if (c->live && c->attempt == m->attempt && c->resv_id == info->resv_id)
        return; /* idempotent repeat */
    if (c->cancelled_attempt == m->attempt &&
        w->env.now < c->cancelled_at + CK_SHARD_TOMB_TTL)
        ck_monitor_fail(w, CK_I6,
                        "shard %u created a reservation for id %llu "
                        "attempt %u after cancelling that attempt",
                        m->shard, id, m->attempt);
    if (c->live)
        ck_monitor_fail(w, CK_I14, "shard %u reserved id %llu for attempt %u "
                        "while attempt %u still holds a reservation", m->shard,
                        id, m->attempt, c->attempt);
    for (unsigned t = 0; t < w->cfg->T; t++) {
        const mon_cs *o = &w->mon.tr[t].cs[m->shard];
        if (o->live && t != m->tr &&
            overlaps(info->addr, m->len, o->addr, o->len))
            ck_monitor_fail(w, CK_I4,
                            "shard %u handed out [%llu,+%u) for id "
                            "%llu while id %u still holds [%llu,+%u)%s",
                            m->shard, (unsigned long long)info->addr, m->len,
                            id, t + 1u, (unsigned long long)o->addr, o->len,
                            o->writes ? " with a write landing" : "");
    }
    c->live = 1;
    c->attempt = m->attempt;
    c->resv_id = info->resv_id;
    c->addr = info->addr;
    c->len = m->len;
    c->reserved_at = w->env.now;
    c->refreshed_to = 0; /* a new lease */
    c->writes = c->taken = c->ready = 0;
    c->wok = c->wside = 0;
}

/* COVER: the parts a WRITE lands as (--writes), all of them. */
static uint8_t all_parts(const ck_world *w)
{
    unsigned n = w->cfg->writes > 1 ? w->cfg->writes : 1u;
    return (uint8_t)((1u << n) - 1u);
}

void ck_monitor_shard_op(ck_world *w, const ck_msg *m, int rc,
                         const xfer_resv_info *info)
{
    mon_cs *c = &w->mon.tr[m->tr].cs[m->shard];
    unsigned long long id = m->tr + 1ull;
    /* COVER, an independent account of the shard's commit rule: a
     * one-sided shard takes the producer's word; any other commits when
     * no write is landing and the parts written alone and ended well
     * cover the region (the shard's ranges, fsm/shard.c's top). */
    if (m->op == XFER_OP_COMMIT && !w->cfg->rdma && c->live &&
        c->attempt == m->attempt && !c->writes &&
        !ck_copies_into(w, m->tr, m->shard)) {
        bool full = c->wok == all_parts(w);
        if (rc == 0 && !full)
            ck_monitor_fail(w, CK_COVER, "shard %u committed id %llu with "
                            "a part never written alone and well (parts "
                            "0x%x of 0x%x)", m->shard, id, c->wok,
                            all_parts(w));
        else if (rc == XFER_ERR_INCOMPLETE && full)
            ck_monitor_fail(w, CK_COVER, "shard %u refused id %llu's commit "
                            "INCOMPLETE though every part was written alone "
                            "and well", m->shard, id);
    }
    if (rc != 0) {
        if (m->op == XFER_OP_CANCEL && rc != XFER_ERR_STATE &&
            rc != XFER_ERR_STALE && rc != XFER_ERR_BUSY)
            ck_monitor_fail(w, CK_I12, "cancel on shard %u returned %s, not a "
                            "documented answer", m->shard, xfer_err_name(rc));
        return;
    }
    switch (m->op) {
    case XFER_OP_RESERVE:
        new_region(w, m, info);
        break;
    case XFER_OP_WRITE:
        if (!c->live || c->attempt != m->attempt ||
            c->resv_id != m->resv_id)
            ck_monitor_fail(
                w, CK_I14,
                "a write of id %llu attempt %u (resv "
                "%llu) landed on shard %u, which holds %s attempt %u "
                "resv %llu",
                id, m->attempt, (unsigned long long)m->resv_id, m->shard,
                c->live ? "" : "no live reservation; last", c->attempt,
                (unsigned long long)c->resv_id);
        /* an op applied after its connection died (MF_ORPHAN) carries
         * bytes that left staging before the producer heard */
        if (!w->env.staging[m->tr] && !(m->flags & MF_ORPHAN))
            ck_monitor_fail(w, CK_I3,
                            "a write of id %llu began on shard %u after "
                            "its staging region was released",
                            id, m->shard);
        if (c->writes)
            c->wside = 1;
        c->writes++;
        break;
    case XFER_OP_COMMIT:
        if (!c->live || c->attempt != m->attempt)
            ck_monitor_fail(w, CK_I14,
                            "shard %u committed id %llu attempt %u "
                            "without a reservation of that attempt",
                            m->shard, id, m->attempt);
        c->ready = 1;
        break;
    case XFER_OP_EAGER:
        /* A fresh region (as a reserve's), written from staging and
         * committed in the same step. */
        if (!w->env.staging[m->tr] && !(m->flags & MF_ORPHAN))
            ck_monitor_fail(w, CK_I3,
                            "an eager op of id %llu applied on shard %u "
                            "after its staging region was released",
                            id, m->shard);
        new_region(w, m, info);
        c->ready = 1;
        break;
    default:
        c->cancelled_attempt = m->attempt;
        c->cancelled_at = w->env.now;
        break;
    }
}

void ck_monitor_write_end(ck_world *w, const ck_msg *m, bool ok, int rc)
{
    mon_cs *c = &w->mon.tr[m->tr].cs[m->shard];
    /* COVER: a part's bit; an orphaned WRITE (--dups) lands whole */
    bool whole = (m->flags & MF_ORPHAN) || !(m->flags & MF_PART);
    uint8_t bit = whole ? all_parts(w) : (uint8_t)(1u << m->part);
    uint8_t from = whole ? 1u : bit;
    if (rc == 0 && ok && !c->wside)
        c->wok |= bit;
    else if (rc == 0 && !ok) /* it may have clobbered from its offset on */
        c->wok &= c->wside ? 0u : (uint8_t)(from - 1u);
    if (c->writes)
        c->writes--;
    if (!c->writes)
        c->wside = 0;
    if (!w->env.staging[m->tr] && !(m->flags & MF_ORPHAN))
        ck_monitor_fail(w, CK_I3, "a write of id %u to shard %u was still "
                        "reading staging after it was released", m->tr + 1u,
                        m->shard);
    (void)rc;
}

/* --copies: a copy into the region ended (ok: its bytes all landed).
 * COVER counts the write as ending here, where its bytes reach the
 * region, not at its bounce buffer (copy_start let go of its count). */
void ck_monitor_copy_end(ck_world *w, const ck_msg *m, bool ok, int rc)
{
    mon_cs *c = &w->mon.tr[m->tr].cs[m->shard];
    if (rc == 0 && ok && !c->wside)
        c->wok |= all_parts(w);
    else if (rc == 0 && !ok) /* it may have clobbered the region */
        c->wok = 0;
    if (!c->writes)
        c->wside = 0;
}

/* The shard says a reservation ended without being taken: its memory is
 * free from now on. */
void ck_monitor_shard_event(ck_world *w, const xfer_shard_event *e)
{
    mon_tr *t = tr_of(w, e->id);
    if (!t || e->shard >= w->cfg->S)
        return;
    mon_cs *c = &t->cs[e->shard];
    if (w->cfg->rdma)
        ck_rdma_monitor_event(w, e);
    if (e->kind == XFER_SHARD_EV_READY)
        return;
    if (!c->live || c->attempt != e->attempt)
        return; /* a tombstone for an attempt that never reserved here */
    if (e->kind == XFER_SHARD_EV_EXPIRED &&
        w->env.now < ck_refresh_lease_end(c))
        ck_monitor_fail(w, CK_TIME, "shard %u expired id %llu at %llu ns, "
                        "before its lease (%llu ns from %llu ns, or as a "
                        "refresh extended it) ran out at %llu ns",
                        e->shard, (unsigned long long)e->id,
                        (unsigned long long)w->env.now,
                        (unsigned long long)CK_LEASE_TTL,
                        (unsigned long long)c->reserved_at,
                        (unsigned long long)ck_refresh_lease_end(c));
    if (c->writes)
        ck_monitor_fail(w, CK_I4, "shard %u freed id %llu's region (%s) while "
                        "a write into it is still landing", e->shard,
                        (unsigned long long)e->id,
                        e->kind == XFER_SHARD_EV_CANCELLED ? "cancelled"
                                                       : "expired");
    if (c->taken)
        ck_monitor_fail(w, CK_I8, "shard %u freed id %llu's region, which the "
                        "consumer had taken", e->shard,
                        (unsigned long long)e->id);
    c->live = 0;
    c->ready = 0;
    c->wok = c->wside = 0;
}

/* I14: a producer's cancel frees only its own attempt's region.  A region
 * another attempt held before the cancel arrived is still held after it,
 * in the state it had (a cancel of attempt 2 must not free attempt 1's
 * committed data). */
void ck_monitor_cancel_done(ck_world *w, const ck_msg *m, const mon_cs *before)
{
    if (!before->live || before->attempt == m->attempt || !m->attempt)
        return;
    xfer_resv_state rs = xfer_shard_state(w->sh[m->shard], m->tr + 1u);
    if (rs == XFER_RESV_STATE_NONE || rs == XFER_RESV_STATE_CANCELLED ||
        rs == XFER_RESV_STATE_CANCEL_PENDING || !w->mon.tr[m->tr].cs[m->shard].live)
        ck_monitor_fail(w, CK_I14, "a cancel of id %u attempt %u on shard %u "
                        "freed the region attempt %u held (now %s)",
                        m->tr + 1u, m->attempt, m->shard, before->attempt,
                        xfer_fsm_state_name(XFER_MACHINE_RESERVATION, rs));
}

void ck_monitor_consumer_cancel_applied(ck_world *w, const ck_msg *m, int rc)
{
    mon_cs *c = &w->mon.tr[m->tr].cs[m->shard];
    if (rc == 0 && m->attempt) {
        c->cancelled_attempt = m->attempt;
        c->cancelled_at = w->env.now;
    }
}

void ck_monitor_ready_event_in(ck_world *w, const ck_msg *m)
{
    mon_tr *t = &w->mon.tr[m->tr];
    if (t->ready_attempt != m->attempt) {
        t->ready_attempt = m->attempt;
        t->ready_mask_lo = t->take_mask_lo = 0;
        t->available = t->unavailable = 0;
    }
    t->ready_mask_lo |= (uint8_t)(1u << m->shard);
}

void ck_monitor_take_result(ck_world *w, unsigned tr, unsigned k, int rc,
                            uint64_t resv_id)
{
    mon_tr *t = &w->mon.tr[tr];
    if (rc != 0)
        return;
    t->take_mask_lo |= (uint8_t)(1u << k);
    t->cs[k].taken = 1;
    t->cs[k].take_resv = resv_id;
}

void ck_monitor_release(ck_world *w, unsigned tr, unsigned k, int rc)
{
    mon_cs *c = &w->mon.tr[tr].cs[k];
    if (rc == 0 && c->taken) {
        c->taken = 0;
        c->live = 0;
        c->ready = 0;
        c->wok = c->wside = 0;
        w->mon.tr[tr].take_mask_lo &= (uint8_t)~(1u << k);
    } else if (rc != 0 && w->in_liveness && w->mon.tr[tr].available) {
        ck_monitor_fail(w, CK_I8, "the consumer could not release id %u on "
                        "shard %u: %s", tr + 1u, k, xfer_err_name(rc));
    }
}

void ck_monitor_ccancel(ck_world *w, unsigned tr)
{
    w->mon.tr[tr].ccancelled = 1;
    w->mon.tr[tr].ccancel_at = w->env.now;
}

static void ready_available(ck_world *w, mon_tr *t, const xfer_ready_action *a)
{
    unsigned full = (1u << w->cfg->S) - 1u;
    unsigned long long id = (unsigned long long)a->id;
    if (t->available || t->unavailable)
        ck_monitor_fail(w, CK_I8, "id %llu reported %s after it already "
                        "reported %s", id,
                        xfer_ready_action_name(XFER_READY_ACT_AVAILABLE),
                        xfer_ready_action_name(t->available
                                               ? XFER_READY_ACT_AVAILABLE
                                               : XFER_READY_ACT_UNAVAILABLE));
    if (t->ready_mask_lo != full || t->ready_attempt != a->attempt)
        ck_monitor_fail(w, CK_I8, "id %llu AVAILABLE with ready from shards "
                        "0x%x of attempt %u only", id, t->ready_mask_lo,
                        t->ready_attempt);
    for (unsigned k = 0; k < w->cfg->S; k++)
        if (!t->cs[k].taken ||
            xfer_shard_state(w->sh[k], a->id) != XFER_RESV_STATE_TAKEN)
            ck_monitor_fail(w, CK_I8, "id %llu AVAILABLE but shard %u's data "
                            "is not taken (%s)", id, k,
                            xfer_fsm_state_name(XFER_MACHINE_RESERVATION,
                                            xfer_shard_state(w->sh[k],
                                                             a->id)));
    if (t->ccancelled && w->env.now < t->ccancel_at + CK_READY_TOMB_TTL)
        ck_monitor_fail(w, CK_I8, "id %llu AVAILABLE after the consumer "
                        "cancelled it", id);
    ck_corrupt_available(w, (unsigned)(a->id - 1));
    t->available = 1;
}

void ck_monitor_ready_action(ck_world *w, const xfer_ready_action *a)
{
    mon_tr *t = tr_of(w, a->id);
    if (!t)
        return;
    switch ((xfer_ready_action_kind)a->kind) {
    case XFER_READY_ACT_AVAILABLE:
        ready_available(w, t, a);
        break;
    case XFER_READY_ACT_UNAVAILABLE:
        /* TIME: a record's deadline runs from its first ready, which came
         * after the submit of its attempt. */
        if (a->reason == XFER_ERR_TIMEOUT && a->attempt == t->attempt &&
            w->env.now < t->accepted_at + CK_READY_DEADLINE)
            ck_monitor_fail(w, CK_TIME, "the tracker timed id %llu out at "
                            "%llu ns, before %llu ns after its submit at "
                            "%llu ns", (unsigned long long)a->id,
                            (unsigned long long)w->env.now,
                            (unsigned long long)CK_READY_DEADLINE,
                            (unsigned long long)t->accepted_at);
        if (t->available && t->ready_attempt == a->attempt)
            ck_monitor_fail(w, CK_I8,
                            "id %llu reported UNAVAILABLE after "
                            "AVAILABLE (withdrawn)",
                            (unsigned long long)a->id);
        t->unavailable = 1;
        break;
    case XFER_READY_ACT_RELEASE:
    case XFER_READY_ACT_CANCEL:
        if (t->available && a->shard < CK_MAX_S && t->cs[a->shard].taken &&
            t->ready_attempt == a->attempt)
            ck_monitor_fail(w, CK_I8, "id %llu is AVAILABLE but the tracker "
                            "sent %s to shard %u (withdrawn)",
                            (unsigned long long)a->id,
                            xfer_ready_action_name(a->kind),
                            a->shard);
        break;
    case XFER_READY_ACT_TAKE:
        if (t->ready_mask_lo != (1u << w->cfg->S) - 1u)
            ck_monitor_fail(w, CK_I8, "the tracker took id %llu on shard %u "
                            "before every shard reported ready (0x%x)",
                            (unsigned long long)a->id, a->shard,
                            t->ready_mask_lo);
        break;
    case XFER_READY_ACT_COUNT_:
        break;
    }
}

/* ---------------------------------------------------------------------- */
/* After every step, after a shard timer, and at the end of a path         */
/* ---------------------------------------------------------------------- */

static void global_core(ck_world *w)
{
    xfer_core_health st;
    xfer_core_health_get(w->core, &st);
    if (st.illegal)
        ck_monitor_fail(w, CK_ILLEGAL, "the transfer core hit %llu ILLEGAL "
                        "cell(s)", (unsigned long long)st.illegal);
    if (st.live > w->core_cfg.max_transfers ||
        st.tombstones > w->core_cfg.max_tombstones)
        ck_monitor_fail(w, CK_I11, "core holds %u transfers / %u tombstones, "
                        "caps %u / %u", st.live, st.tombstones,
                        w->core_cfg.max_transfers, w->core_cfg.max_tombstones);
}

static void global_shard(ck_world *w, unsigned k)
{
    xfer_shard_health st;
    xfer_shard_health_get(w->sh[k], &st);
    if (st.illegal)
        ck_monitor_fail(w, CK_ILLEGAL, "shard %u hit %llu ILLEGAL cell(s)", k,
                        (unsigned long long)st.illegal);
    if (st.live > w->cfg->T || st.bytes_in_use > st.pool_bytes)
        ck_monitor_fail(w, CK_I11, "shard %u holds %u reservations / %llu "
                        "bytes", k, st.live,
                        (unsigned long long)st.bytes_in_use);
    uint64_t landing = 0;
    for (unsigned t = 0; t < w->cfg->T; t++) {
        const mon_cs *c = &w->mon.tr[t].cs[k];
        if (!c->writes)
            continue;
        landing += c->len;
        xfer_resv_state rs = xfer_shard_state(w->sh[k], t + 1u);
        if (rs != XFER_RESV_STATE_WRITING &&
            rs != XFER_RESV_STATE_CANCEL_PENDING &&
            rs != XFER_RESV_STATE_EXPIRE_PENDING)
            ck_monitor_fail(w, CK_I4,
                            "a write into id %u's region on shard %u "
                            "is landing but the shard has it in %s",
                            t + 1u, k,
                            xfer_fsm_state_name(XFER_MACHINE_RESERVATION, rs));
    }
    if (st.bytes_in_use < landing)
        ck_monitor_fail(w, CK_I4, "shard %u has %llu bytes in use but writes "
                        "are landing in %llu", k,
                        (unsigned long long)st.bytes_in_use,
                        (unsigned long long)landing);
}

/* TIME: every deadline the monitors know is armed for the documented
 * time, and no machine's next timer is later than one of them (so a
 * driver that waits for next_deadline fires it on time).  The transfer
 * deadline (submit without a deadline: accepted + CK_DEADLINE) while the
 * transfer runs unstopped; the lease of every reservation that is not
 * taken (reserved + CK_LEASE_TTL, or as a refresh extended it). */
static void global_time(ck_world *w)
{
    uint64_t core_next = xfer_core_next_deadline(w->core);
    for (unsigned i = 0; i < w->cfg->T; i++) {
        const mon_tr *t = &w->mon.tr[i];
        xfer_transfer_view v;
        if (!t->open || t->stopped || t->failed || !t->attempt ||
            !xfer_core_view(w->core, i + 1u, &v) || v.attempt != t->attempt ||
            v.state == XFER_TRANSFER_STATE_CANCELLING)
            continue;
        uint64_t due = t->accepted_at + CK_DEADLINE;
        if (v.deadline_ns != due)
            ck_monitor_fail(w, CK_TIME, "id %u's deadline is armed for %llu "
                            "ns, not accepted + %llu = %llu ns", i + 1u,
                            (unsigned long long)v.deadline_ns,
                            (unsigned long long)CK_DEADLINE,
                            (unsigned long long)due);
        else if (w->env.now < due && core_next > due)
            ck_monitor_fail(w, CK_TIME, "the core's next timer is at %llu "
                            "ns, after id %u's deadline at %llu ns",
                            (unsigned long long)core_next, i + 1u,
                            (unsigned long long)due);
    }
    /* A transfer's tombstone (documented TTL, woken at most 10 ms late):
     * only on paths without a producer cancel, which may refresh it. */
    for (unsigned i = 0; i < w->cfg->T && !w->env.cancels; i++) {
        const mon_tr *t = &w->mon.tr[i];
        uint64_t due = t->tomb_at + CK_CORE_TOMB_TTL + 10000000ull;
        if (t->tomb == 1 && !t->open && w->env.now < due &&
            core_next > due &&
            xfer_core_state(w->core, i + 1u) == XFER_TRANSFER_STATE_TOMBSTONED)
            ck_monitor_fail(w, CK_TIME, "the core's next timer is at %llu "
                            "ns, after id %u's tombstone (from %llu ns) "
                            "ends", (unsigned long long)core_next, i + 1u,
                            (unsigned long long)t->tomb_at);
    }
    for (unsigned k = 0; k < w->cfg->S; k++) {
        uint64_t next = xfer_shard_next_deadline(w->sh[k]);
        for (unsigned i = 0; i < w->cfg->T; i++) {
            const mon_cs *c = &w->mon.tr[i].cs[k];
            if (!c->live || c->taken)
                continue;
            xfer_resv_state rs = xfer_shard_state(w->sh[k], i + 1u);
            uint64_t due = ck_refresh_lease_end(c);
            if ((rs == XFER_RESV_STATE_RESERVED ||
                 rs == XFER_RESV_STATE_WRITING ||
                 rs == XFER_RESV_STATE_READY) &&
                w->env.now < due && next > due)
                ck_monitor_fail(w, CK_TIME, "shard %u's next timer is at "
                                "%llu ns, after the lease of id %u ends at "
                                "%llu ns", k, (unsigned long long)next,
                                i + 1u, (unsigned long long)due);
        }
    }
}

/* TIME: a shard tombstone (cancelled, expired or released) lives its
 * documented TTL from the move that made it, and the shard's next timer
 * is no later than its end.  Shard tombstones are never refreshed, and
 * the monitors look after every move, so the first move after which the
 * shard holds the id as a tombstone is its exact start, wherever it
 * began: a cancel, a lease, a release, or a deferred free that ended
 * with a write or an invalidation. */
static void shard_tomb_time(ck_world *w, unsigned k)
{
    uint64_t next = xfer_shard_next_deadline(w->sh[k]);
    for (unsigned i = 0; i < w->cfg->T; i++) {
        mon_cs *c = &w->mon.tr[i].cs[k];
        xfer_resv_state rs = xfer_shard_state(w->sh[k], i + 1u);
        if (rs != XFER_RESV_STATE_CANCELLED && rs != XFER_RESV_STATE_EXPIRED &&
            rs != XFER_RESV_STATE_DONE) {
            c->in_tomb = 0;
            c->tomb_at = 0;
            continue;
        }
        if (!c->in_tomb) {
            c->in_tomb = 1;
            c->tomb_at = w->env.now;
        }
        uint64_t due = c->tomb_at + CK_SHARD_TOMB_TTL;
        if (w->env.now < due && next > due)
            ck_monitor_fail(w, CK_TIME, "shard %u's next timer is at %llu "
                            "ns, after id %u's tombstone (from %llu ns, TTL "
                            "%llu ns) ends", k, (unsigned long long)next,
                            i + 1u, (unsigned long long)c->tomb_at,
                            (unsigned long long)CK_SHARD_TOMB_TTL);
    }
}

/* I9: the pool registry the engine keeps (fsm/life.h) counts one hold per
 * staging region the model holds, so a pool goes only when no region in
 * it is held, whichever of the two would forget one. */
static void global_registry(ck_world *w)
{
    if (!w->env.pools[0].used)
        return;
    unsigned held = 0;
    for (unsigned t = 0; t < w->cfg->T; t++)
        held += w->env.staging[t] != 0;
    if (w->env.pools[0].users != held)
        ck_monitor_fail(w, CK_I9, "the staging pool registry counts %u "
                        "holds while %u staging regions are held",
                        w->env.pools[0].users, held);
}

void ck_monitor_global(ck_world *w)
{
    global_core(w);
    global_registry(w);
    for (unsigned k = 0; k < w->cfg->S; k++)
        global_shard(w, k);
    global_time(w);
    for (unsigned k = 0; k < w->cfg->S; k++)
        shard_tomb_time(w, k);
    xfer_readiness_health rs;
    xfer_readiness_health_get(w->rd, &rs);
    if (rs.illegal)
        ck_monitor_fail(w, CK_ILLEGAL,
                        "the readiness tracker hit %llu ILLEGAL "
                        "cell(s)",
                        (unsigned long long)rs.illegal);
    if (rs.live > w->cfg->T)
        ck_monitor_fail(w, CK_I11, "the readiness tracker holds %u records",
                        rs.live);
    if (w->cfg->rdma)
        ck_rdma_monitor_global(w);
    if (w->cfg->copies)
        ck_copies_monitor_global(w);
    if (w->cfg->gone)
        ck_gone_monitor_global(w);
}

/* I13: once a shard's timer ran past a lease, a reservation nobody writes
 * into and nobody committed is gone. */
void ck_monitor_shard_timer(ck_world *w, unsigned k)
{
    for (unsigned t = 0; t < w->cfg->T; t++) {
        const mon_cs *c = &w->mon.tr[t].cs[k];
        if (!c->live || c->writes || c->ready || c->taken ||
            w->env.now < ck_refresh_lease_end(c))
            continue;
        xfer_resv_state rs = xfer_shard_state(w->sh[k], t + 1u);
        if (rs == XFER_RESV_STATE_RESERVED)
            ck_monitor_fail(
                w, CK_I13,
                "shard %u still holds id %u (RESERVED "
                "since %llu ns) at %llu ns, past its lease of %llu "
                "ns",
                k, t + 1u, (unsigned long long)c->reserved_at,
                (unsigned long long)w->env.now,
                (unsigned long long)CK_LEASE_TTL);
    }
}

static void final_producer(ck_world *w)
{
    for (unsigned t = 0; t < w->cfg->T; t++) {
        if (w->mon.tr[t].open)
            ck_monitor_fail(w, CK_I1, "id %u was accepted but never completed",
                            t + 1u);
        if (w->env.staging[t])
            ck_monitor_fail(w, CK_I3, "id %u's staging region was never "
                            "released", t + 1u);
    }
    if (w->mon.shutdown_req && !w->mon.shutdown_complete)
        ck_monitor_fail(w, CK_I9, "shutdown was requested but never "
                        "completed");
}

/* E2E: a transfer the producer reported a success for is, on the
 * consumer, AVAILABLE or UNAVAILABLE (flagged) for that attempt, or the
 * consumer's own scheduler cancelled it.  A path that dropped one of its
 * consumer-side events is exempt: a ready event lost on the way leaves
 * the tracker nothing to flag (the shard's lease reclaims the data); so
 * is one where a shard's end of the id (a lease that ran out before the
 * ready event arrived) reached the tracker before any ready: the tracker
 * tombstones an id it never had a record of without reporting it. */
static void final_e2e(ck_world *w)
{
    for (unsigned i = 0; i < w->cfg->T; i++) {
        const mon_tr *t = &w->mon.tr[i];
        if (t->open || !t->success || t->ccancelled ||
            (w->env.e2e_exempt >> i) & 1u)
            continue;
        bool told = t->ready_attempt == t->attempt &&
                    (t->available || t->unavailable);
        if (told)
            ck_reach_note(w, CK_R_E2E);
        else
            ck_monitor_fail(w, CK_E2E, "id %u attempt %u succeeded on the "
                            "producer, but the consumer never reported it "
                            "available or unavailable", i + 1u, t->attempt);
    }
}

void ck_monitor_final(ck_world *w)
{
    if (w->cfg->e2e)
        final_e2e(w);
    if (!w->env.crashed)
        final_producer(w);
    for (unsigned k = 0; k < w->cfg->S; k++) {
        xfer_shard_stats st;
        xfer_shard_stats_get(w->sh[k], &st);
        for (unsigned t = 0; t < w->cfg->T; t++) {
            xfer_resv_state rs = xfer_shard_state(w->sh[k], t + 1u);
            if (rs != XFER_RESV_STATE_NONE)
                ck_monitor_fail(
                    w, CK_I13,
                    "shard %u still holds id %u in %s "
                    "after every message, lease and tombstone ran "
                    "out",
                    k, t + 1u,
                    xfer_fsm_state_name(XFER_MACHINE_RESERVATION, rs));
        }
        if (st.bytes_in_use)
            ck_monitor_fail(w, CK_I13,
                            "shard %u still has %llu bytes in use at "
                            "the end",
                            k, (unsigned long long)st.bytes_in_use);
    }
    if (w->cfg->rdma)
        ck_rdma_monitor_final(w);
    for (unsigned t = 0; t < w->cfg->T; t++) {
        xfer_ready_state ys = xfer_readiness_state(w->rd, t + 1u);
        if (ys == XFER_READY_STATE_WAITING || ys == XFER_READY_STATE_TAKING)
            ck_monitor_fail(w, CK_LIVE, "the readiness record of id %u is "
                            "stuck in %s", t + 1u,
                            xfer_fsm_state_name(XFER_MACHINE_READINESS, ys));
    }
}
