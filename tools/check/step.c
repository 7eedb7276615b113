/*
 * tools/check/step.c - the moves of the environment: which are enabled in a
 * state, what each does to the world, which machines it touches, and the
 * liveness phase that ends a path.
 *
 * What must stay true: ck_step_moves() depends only on the state (message
 * order is canonical, see net.c), so a move index names the same move every
 * time the state is loaded; budgets (faults, cancels, late submits, shard
 * timer fires) are part of the state, which keeps every path finite.
 */
#include <stdio.h>
#include <string.h>

#include "step.h"

#include "consumer.h"
#include "corrupt.h"
#include "stream.h"
#include "describe.h"
#include "engine.h"
#include "gone.h"
#include "staleop.h"
#include "refresh.h"
#include "monitor.h"
#include "net.h"

static bool fault_on(const ck_world *w, unsigned bit)
{
    return (w->cfg->faults & (1u << bit)) != 0;
}

/* A disturbance (fault, cancel, late submit, shutdown, crash, time jump)
 * is allowed while both its own budget and the overall one last. */
static bool calm(const ck_world *w)
{
    return w->env.disturb < w->cfg->budget;
}

static bool budget(const ck_world *w)
{
    return w->env.faults < w->cfg->max_faults && calm(w);
}

/* A transfer waiting for its cancel retry backoff: its timer is ordinary
 * progress, not a fault, so it may always fire. */
static bool retry_waiting(const ck_world *w)
{
    for (unsigned t = 0; t < w->cfg->T; t++) {
        xfer_transfer_view v;
        if (xfer_core_view(w->core, t + 1u, &v) &&
            v.state == XFER_TRANSFER_STATE_CANCELLING && v.pending == 0)
            return true;
    }
    return false;
}

/* Duplicates and stale replies (--dups): disturbances with their own
 * budget. */
static bool dup_budget(const ck_world *w)
{
    return w->env.dups < w->cfg->max_dups && calm(w);
}

/* The op a live transfer waits for in its state (the reply a stale one
 * imitates), or XFER_OP_COUNT_ when it waits for none. */
static unsigned waited_op(const xfer_transfer_view *v)
{
    switch (v->state) {
    case XFER_TRANSFER_STATE_RESERVING:
        return XFER_OP_RESERVE;
    case XFER_TRANSFER_STATE_WRITING:
        return XFER_OP_WRITE;
    case XFER_TRANSFER_STATE_COMPLETING:
        return XFER_OP_COMMIT;
    case XFER_TRANSFER_STATE_EAGER:
        return XFER_OP_EAGER;
    case XFER_TRANSFER_STATE_CANCELLING:
        return XFER_OP_CANCEL;
    default:
        return XFER_OP_COUNT_;
    }
}

static unsigned msg_moves(const ck_world *w, unsigned i, ck_move *out)
{
    const ck_msg *m = &w->msg[i];
    unsigned n = 0;
    if (i > 0 && memcmp(m, &w->msg[i - 1], sizeof *m) == 0)
        return 0; /* the same message twice: one set of moves is enough */
    if (m->kind == MK_RKEY)
        return 0; /* --rdma: a live rkey, not a message */
    out[n++] = (ck_move){MV_DELIVER, (uint8_t)i};
    /* --rdma: the driver's invalidation, an orphaned write (it lands or
     * dies, nobody hears) and a landed write's completion (it may be
     * lost) have no other fates. */
    /* --gone: a write whose bytes were landing when its connection closed
     * ends on the shard whole, or cut short (a fault) */
    if ((m->flags & (MF_ORPHAN | MF_BEGUN)) == (MF_ORPHAN | MF_BEGUN) &&
        !w->cfg->rdma && !w->cfg->copies) {
        if (budget(w) && fault_on(w, CK_FB_FAIL))
            out[n++] = (ck_move){MV_FAIL, (uint8_t)i};
        return n;
    }
    if (m->kind == MK_INV || (m->flags & MF_ORPHAN))
        return n;
    /* --copies: a copy into a device region is not aborted (the copy
     * engine finishes what it started); it may fail, or its reply be
     * lost with its connection. */
    if (m->flags & MF_D2H) { /* at the producer: never aborted or lost */
        if (budget(w) && fault_on(w, CK_FB_FAIL))
            out[n++] = (ck_move){MV_FAIL, (uint8_t)i};
        return n;
    }
    if (m->flags & MF_COPY) {
        if (budget(w) && fault_on(w, CK_FB_FAIL))
            out[n++] = (ck_move){MV_FAIL, (uint8_t)i};
        if (budget(w) && fault_on(w, CK_FB_LOST))
            out[n++] = (ck_move){MV_LOST, (uint8_t)i};
        return n;
    }
    if (m->flags & MF_LANDED) {
        if (budget(w) && fault_on(w, CK_FB_LOST))
            out[n++] = (ck_move){MV_LOST, (uint8_t)i};
        return n;
    }
    /* A retransmitted shard event (a ready, cancelled or expired seen
     * twice by the tracker).  Ops and results are not duplicated: the
     * transport reports each op exactly once (tools/check/consumer.c). */
    if (m->kind == MK_EV && dup_budget(w) && w->env.nmsg < CK_MAX_MSG)
        out[n++] = (ck_move){MV_DUP, (uint8_t)i};
    if (ck_corrupt_may(w, m))
        out[n++] = (ck_move){MV_CORRUPT, (uint8_t)i};
    /* --dups: the connection an op went out on dies while the shard has
     * not read it yet (a half-open connection): the producer hears
     * CONN_LOST and goes on (a new attempt, a reconnect in the middle of
     * a reservation), and the op may still be applied later, answering
     * nobody (issue 30 item 2).  Not a write already landing, nor a
     * one-sided write (rdma.c orphans those itself). */
    if (m->kind == MK_OP && !(m->flags & (MF_BEGUN | MF_PART)) &&
        !(w->cfg->rdma && m->op == XFER_OP_WRITE) && dup_budget(w) &&
        w->env.nmsg < CK_MAX_MSG)
        out[n++] = (ck_move){MV_ORPHAN, (uint8_t)i};
    bool b = budget(w);
    if (m->kind == MK_OP) {
        if (b && fault_on(w, CK_FB_FAIL))
            out[n++] = (ck_move){MV_FAIL, (uint8_t)i};
        if (b && fault_on(w, CK_FB_LOST))
            out[n++] = (ck_move){MV_LOST, (uint8_t)i};
        if ((m->flags & MF_ABORT) && fault_on(w, CK_FB_ABORT))
            out[n++] = (ck_move){MV_ABORT, (uint8_t)i};
    } else if (b && fault_on(w, CK_FB_DROP) &&
               (m->kind == MK_EV ||
                (m->kind == MK_RACT && m->op != XFER_READY_ACT_RELEASE))) {
        out[n++] = (ck_move){MV_FAIL, (uint8_t)i};
        if (m->kind == MK_RACT && m->op == XFER_READY_ACT_TAKE)
            out[n++] = (ck_move){MV_LOST, (uint8_t)i};
    }
    return n;
}

static unsigned env_moves(const ck_world *w, ck_move *out)
{
    const ck_config *c = w->cfg;
    const ck_env *e = &w->env;
    unsigned n = 0;
    bool up = !e->crashed;
    for (unsigned t = 0; t < c->T && up; t++) {
        if (!e->submitted[t])
            out[n++] = (ck_move){MV_SUBMIT, (uint8_t)t};
        else if (fault_on(w, CK_FB_LATE) && e->lates < c->max_lates &&
                 calm(w))
            out[n++] = (ck_move){MV_LATE, (uint8_t)t};
        if (fault_on(w, CK_FB_CANCEL) && e->cancels < c->max_cancels &&
            calm(w))
            out[n++] = (ck_move){MV_CANCEL, (uint8_t)t};
        if (ck_stream_may_part(w, t))
            out[n++] = (ck_move){MV_PART, (uint8_t)t};
        if (ck_stream_may_seal(w, t))
            out[n++] = (ck_move){MV_SEAL, (uint8_t)t};
    }
    for (unsigned t = 0; t < c->T; t++)
        if (fault_on(w, CK_FB_CONSUMER) && e->ccancels < c->max_ccancels &&
            calm(w))
            out[n++] = (ck_move){MV_CCANCEL, (uint8_t)t};
    if (up && fault_on(w, CK_FB_SHUTDOWN) && !e->shutdown && calm(w))
        out[n++] = (ck_move){MV_SHUTDOWN, 0};
    /* Timers that are ordinary progress (a cancel retry, a stop due now)
     * are free; every other timer fire is a jump in time and counts
     * against max_expiries. */
    /* No timer may move the clock past the delivery horizon of a message
     * in flight. */
    bool jump = e->expiries < c->max_expiries && calm(w);
    uint64_t hz = ck_net_horizon(w);
    uint64_t d = xfer_core_next_deadline(w->core);
    if (up && d != UINT64_MAX && (d <= hz || d <= e->now) &&
        ((fault_on(w, CK_FB_DEADLINE) && jump) || d <= e->now ||
         retry_waiting(w)))
        out[n++] = (ck_move){MV_FIRE_CORE, 0};
    for (unsigned k = 0; k < c->S; k++)
        if (fault_on(w, CK_FB_LEASE) && jump &&
            (d = xfer_shard_next_deadline(w->sh[k])) != UINT64_MAX &&
            (d <= hz || d <= e->now))
            out[n++] = (ck_move){MV_FIRE_SHARD, (uint8_t)k};
    if (fault_on(w, CK_FB_DEADLINE) && jump &&
        (d = xfer_readiness_next_deadline(w->rd)) != UINT64_MAX &&
        (d <= hz || d <= e->now))
        out[n++] = (ck_move){MV_FIRE_READY, 0};
    if (up && fault_on(w, CK_FB_CRASH) && calm(w))
        out[n++] = (ck_move){MV_CRASH, 0};
    for (unsigned k = 0; k < c->S && c->gone; k++) {
        if (ck_gone_may(w, k))
            out[n++] = (ck_move){MV_GONE, (uint8_t)k};
        if (ck_gone_may_back(w, k))
            out[n++] = (ck_move){MV_BACK, (uint8_t)k};
    }
    n += ck_staleop_moves(w, out + n);
    n += ck_refresh_moves(w, out + n);
    for (unsigned t = 0; t < c->T && up && dup_budget(w); t++) {
        xfer_transfer_view v;
        if (!xfer_core_view(w->core, t + 1u, &v) ||
            waited_op(&v) == XFER_OP_COUNT_)
            continue;
        for (unsigned k = 0; k < c->S; k++)
            out[n++] = (ck_move){MV_STALE, (uint8_t)(t * CK_MAX_S + k)};
    }
    return n;
}

unsigned ck_step_moves(const ck_world *w, ck_move *out)
{
    unsigned n = 0;
    for (unsigned i = 0; i < w->env.nmsg; i++)
        n += msg_moves(w, i, out + n);
    return n + env_moves(w, out + n);
}

/* ---------------------------------------------------------------------- */
/* Applying a move                                                         */
/* ---------------------------------------------------------------------- */

static void advance(ck_world *w, uint64_t deadline)
{
    if (deadline > w->env.now)
        w->env.now = deadline;
}

static void fire_core(ck_world *w)
{
    uint64_t d = xfer_core_next_deadline(w->core);
    if (!w->in_liveness && d > w->env.now && !retry_waiting(w)) {
        w->env.expiries++;
        w->env.disturb++;
        ck_reach_note(w, CK_R_DEADLINE);
    }
    advance(w, d);
    ck_monitor_core_timer(w);
    xfer_core_on_timer(w->core, w->env.now);
    ck_engine_drain(w);
}

static void fire_shard(ck_world *w, unsigned k)
{
    advance(w, xfer_shard_next_deadline(w->sh[k]));
    xfer_shard_on_timer(w->sh[k], w->env.now);
    ck_consumer_drain_shard(w, k);
    ck_monitor_shard_timer(w, k);
}

static void fire_ready(ck_world *w)
{
    advance(w, xfer_readiness_next_deadline(w->rd));
    xfer_readiness_on_timer(w->rd, w->env.now);
    ck_consumer_drain_ready(w);
}

static void submit(ck_world *w, unsigned t, bool late)
{
    int rc = ck_engine_submit(w, t);
    if (rc == XFER_ERR_BUSY)
        ck_reach_note(w, CK_R_CAP);
    ck_monitor_submit(w, t, rc, late);
    ck_engine_drain(w);
}

static void cancel(ck_world *w, unsigned t)
{
    xfer_transfer_state before = xfer_core_state(w->core, t + 1u);
    int rc = xfer_core_cancel(w->core, w->env.now, t + 1u);
    if (rc == XFER_ERR_BUSY)
        ck_reach_note(w, CK_R_CAP);
    ck_monitor_cancel(w, t, rc, before);
    ck_engine_drain(w);
}

static void crash(ck_world *w)
{
    /* The producer is gone: its replies are never read. */
    w->env.crashed = 1;
    ck_reach_note(w, CK_R_CRASH);
    for (unsigned i = w->env.nmsg; i-- > 0;)
        if (w->msg[i].kind == MK_RES)
            ck_net_remove(w, i);
}

/* A retransmit: message i arrives now, and its copy is still in flight
 * (sent when the original was). */
static void duplicate(ck_world *w, unsigned i)
{
    ck_msg copy = w->msg[i];
    ck_consumer_deliver(w, i, HOW_DELIVER);
    ck_net_push(w, &copy);
    if (w->env.nmsg && w->v.inv < 0)
        w->msg[w->env.nmsg - 1].sent_at = copy.sent_at;
}

/* A successful reply of an earlier attempt (or, for attempt 1, a later
 * one: a replay) for the op transfer t waits for on shard k: delayed past
 * the producer's tombstone, retransmitted or replayed.  The core must not
 * take it for its own. */
static void stale_reply(ck_world *w, unsigned t, unsigned k)
{
    xfer_transfer_view v;
    if (!xfer_core_view(w->core, t + 1u, &v))
        return;
    xfer_shard_result r = {
        .id = t + 1u,
        .attempt = v.attempt > 1 ? v.attempt - 1 : v.attempt + 1,
        .shard = (uint16_t)k,
        .op = (uint8_t)waited_op(&v),
        .status = 0,
        .resv_id = 0xbad0u + k,
        .remote_addr = 0,
    };
    xfer_core_on_result(w->core, w->env.now, &r);
    ck_engine_drain(w);
}

static void apply_env(ck_world *w, ck_move mv)
{
    int rc;
    /* A part and a seal are the scheduler's ordinary progress, as a
     * submit, and a lease refresh the engine's: no disturbance. */
    if (!w->in_liveness && mv.kind != MV_SUBMIT && mv.kind != MV_FIRE_CORE &&
        mv.kind != MV_PART && mv.kind != MV_SEAL && mv.kind != MV_BACK &&
        mv.kind != MV_REFRESH)
        w->env.disturb++;
    switch (mv.kind) {
    case MV_SUBMIT:
        w->env.submitted[mv.arg] = 1;
        submit(w, mv.arg, false);
        break;
    case MV_LATE:
        w->env.lates++;
        ck_reach_note(w, CK_R_LATE);
        submit(w, mv.arg, true);
        break;
    case MV_CANCEL:
        w->env.cancels++;
        ck_reach_note(w, CK_R_CANCEL);
        cancel(w, mv.arg);
        break;
    case MV_SHUTDOWN:
        ck_reach_note(w, CK_R_SHUTDOWN);
        ck_engine_shutdown(w);
        break;
    case MV_CCANCEL:
        /* Only a cancel the tracker took is the consumer's: one refused
         * XFER_ERR_BUSY at the tombstone cap was answered to its caller,
         * who knows the id was not cancelled (I8 does not bind it). */
        w->env.ccancels++;
        rc = xfer_readiness_cancel(w->rd, w->env.now, mv.arg + 1u);
        if (rc == 0) {
            ck_reach_note(w, CK_R_CONSUMER);
            ck_monitor_ccancel(w, mv.arg);
        } else if (rc == XFER_ERR_BUSY) {
            ck_reach_note(w, CK_R_CAP);
        }
        ck_consumer_drain_ready(w);
        break;
    case MV_FIRE_CORE:
        fire_core(w);
        break;
    case MV_FIRE_SHARD:
        if (!w->in_liveness)
            w->env.expiries++;
        ck_reach_note(w, CK_R_LEASE);
        fire_shard(w, mv.arg);
        break;
    case MV_FIRE_READY:
        if (!w->in_liveness)
            w->env.expiries++;
        ck_reach_note(w, CK_R_DEADLINE);
        fire_ready(w);
        break;
    case MV_DUP:
        w->env.dups++;
        ck_reach_note(w, CK_R_DUP);
        duplicate(w, mv.arg);
        break;
    case MV_ORPHAN:
        w->env.dups++;
        ck_consumer_orphan(w, mv.arg);
        break;
    case MV_STALE:
        w->env.dups++;
        ck_reach_note(w, CK_R_STALE);
        stale_reply(w, mv.arg / CK_MAX_S, mv.arg % CK_MAX_S);
        break;
    case MV_CORRUPT:
        ck_corrupt_apply(w, mv.arg);
        break;
    case MV_PART:
        ck_stream_part(w, mv.arg);
        break;
    case MV_SEAL:
        ck_stream_seal(w, mv.arg);
        break;
    case MV_GONE:
        ck_gone_apply(w, mv.arg);
        break;
    case MV_BACK:
        ck_gone_back(w, mv.arg);
        break;
    case MV_SOP:
        ck_staleop_apply(w, mv.arg);
        break;
    case MV_REFRESH:
        ck_refresh_apply(w, mv.arg);
        break;
    default:
        crash(w);
        break;
    }
}

/* After every move: canonical message order, then the global monitors. */
static void after_step(ck_world *w)
{
    ck_net_sort(w);
    ck_monitor_global(w);
}

void ck_step_apply(ck_world *w, ck_move mv)
{
    static const int how[] = {HOW_DELIVER, HOW_FAIL, HOW_LOST, HOW_ABORT};
    if (mv.kind <= MV_ABORT) {
        const ck_msg *m = &w->msg[mv.arg];
        if (mv.kind == MV_ABORT)
            ck_reach_note(w, CK_R_ABORT);
        else if (mv.kind != MV_DELIVER)
            ck_reach_note(w, m->kind != MK_OP && !(m->flags & MF_LANDED)
                                 ? CK_R_DROP
                             : mv.kind == MV_FAIL ? CK_R_FAIL
                                                  : CK_R_LOST);
        if (mv.kind == MV_FAIL || mv.kind == MV_LOST) {
            w->env.faults++;
            w->env.disturb++;
            if (w->cfg->e2e && w->msg[mv.arg].kind != MK_OP)
                w->env.e2e_exempt |= (uint8_t)(1u << w->msg[mv.arg].tr);
        }
        ck_consumer_deliver(w, mv.arg, how[mv.kind]);
    } else {
        apply_env(w, mv);
    }
    after_step(w);
}

/* The machines a move may call (anything but a const query): the search
 * re-saves and reloads only those.  Every call into a machine is in
 * consumer.c, engine.c or this file, and each follows the message or
 * timer the move names: an op or a take/release/cancel reaches one shard
 * (and drains that shard's events), a result reaches the core, an event
 * or take result reaches the tracker (and drains its actions); the
 * producer's submit, cancel, shutdown and timer touch the core alone.
 * Messages produced go into the plain data of the world.  A new call path
 * must be added here; --paranoid compares against full saves. */
unsigned ck_step_touches(const ck_world *w, ck_move mv)
{
    if (mv.kind <= MV_ABORT) {
        const ck_msg *m = &w->msg[mv.arg];
        if (m->kind == MK_OP || m->kind == MK_RACT)
            return CK_M_SH(m->shard);
        if (m->kind == MK_INV) /* only telling the shard calls it */
            return (m->flags & MF_INV_DONE) ? CK_M_SH(m->shard) : 0;
        return m->kind == MK_RES ? CK_M_CORE : CK_M_RD;
    }
    if (mv.kind == MV_DUP)
        return ck_step_touches(w, (ck_move){MV_DELIVER, mv.arg});
    if (mv.kind == MV_ORPHAN)
        return 0; /* a result goes out; the op stays in flight */
    switch (mv.kind) {
    case MV_CCANCEL:
    case MV_FIRE_READY:
        return CK_M_RD;
    case MV_FIRE_SHARD:
        return CK_M_SH(mv.arg);
    case MV_SOP:
        return CK_M_SH(CK_SOP_SHARD(mv.arg));
    case MV_REFRESH: /* reads the core (const), calls the shard */
        return CK_M_SH(mv.arg % CK_MAX_S);
    case MV_CRASH:
    case MV_CORRUPT: /* plain data: the region's bit */
    case MV_GONE:    /* plain data: messages and the shard's bit */
    case MV_BACK:
        return 0;
    default:
        return CK_M_CORE;
    }
}

/* ---------------------------------------------------------------------- */
/* Liveness: no more faults; deliver everything, fire every timer          */
/* ---------------------------------------------------------------------- */

/* The earliest armed timer as a move; false when none is armed. */
static bool next_timer(const ck_world *w, ck_move *mv)
{
    uint64_t best = UINT64_MAX, d;
    if (!w->env.crashed && (d = xfer_core_next_deadline(w->core)) < best) {
        best = d;
        *mv = (ck_move){MV_FIRE_CORE, 0};
    }
    for (unsigned k = 0; k < w->cfg->S; k++)
        if ((d = xfer_shard_next_deadline(w->sh[k])) < best) {
            best = d;
            *mv = (ck_move){MV_FIRE_SHARD, (uint8_t)k};
        }
    if ((d = xfer_readiness_next_deadline(w->rd)) < best) {
        best = d;
        *mv = (ck_move){MV_FIRE_READY, 0};
    }
    return best != UINT64_MAX;
}

/* Run to quiescence; false if it did not settle within the bound. */
static bool settle(ck_world *w, const ck_tracer *tr, unsigned *steps)
{
    for (; *steps < 4000; (*steps)++) {
        ck_move mv = {MV_DELIVER, 0};
        if (ck_net_pending(w) == 0 && !next_timer(w, &mv))
            return true;
        if (tr && tr->action) {
            char buf[256];
            ck_describe_move(w, mv, buf, sizeof buf);
            tr->action(tr->ud, buf);
        }
        ck_step_apply(w, mv);
        if (w->v.inv >= 0)
            return true;
    }
    return false;
}

bool ck_step_liveness(ck_world *w)
{
    const ck_tracer *tr = w->tracer;
    unsigned steps = 0;
    w->in_liveness = true;
    if (tr && tr->action)
        tr->action(tr->ud, "-- liveness phase: no more faults; deliver "
                           "everything, fire every timer --");
    bool ok = settle(w, tr, &steps);
    if (ok && w->v.inv < 0) {
        if (tr && tr->action)
            tr->action(tr->ud, "consumer application releases the data "
                               "it was handed");
        ck_consumer_release_taken(w);
        after_step(w);
        ok = w->v.inv >= 0 || settle(w, tr, &steps);
    }
    if (!ok)
        ck_monitor_fail(w, CK_LIVE, "still busy after %u liveness steps",
                        steps);
    else if (w->v.inv < 0)
        ck_monitor_final(w);
    w->in_liveness = false;
    return w->v.inv < 0;
}
