/*
 * tools/check/rdma.c - the --rdma world mode: the shards are one-sided
 * (cfg.one_sided), as a consumer reached over RDMA runs them.
 *
 * A WRITE never reaches the shard's state machine.  It is posted at the
 * producer (the MK_OP message in flight), lands - its bytes reach the
 * region - at a step of its own while the reservation's rkey is live, and
 * then completes at the producer: 0 when it landed, XFER_ERR_REMOTE with
 * nothing landed when the rkey died first.  A lost connection or an abort
 * does not retract a posted write: the producer hears at once, and the
 * write stays in flight as an orphan that may still land.  A write that
 * fails (MV_FAIL) was never posted.  The rkey is bound when a reserve
 * succeeds and dies when the driver's invalidation completes; the shard
 * asks for invalidations (xfer_shard_invalidations) and the driver's work
 * is an MK_INV message: its first delivery completes the invalidation (the
 * rkey dies, so writes may land until then), its second tells the shard
 * (xfer_shard_invalidated), strictly afterwards.  Live rkeys are MK_RKEY
 * entries of the message multiset (world.h).
 *
 * Monitors: RLAND (a landing touches only its own reservation's region
 * while the shard has it RESERVED or in an *_INVAL state: never a freed,
 * reused, READY or TAKEN one), RREADY (a region is READY only once its
 * rkey is dead, and no write lands in a READY or TAKEN region), RINVAL
 * (every record in an *_INVAL state has its invalidation pending, the
 * shard accepts every invalidation it asked for, and no rkey is live at
 * the end of a path).
 *
 * What must stay true: with --rdma off nothing here runs and no message
 * of its kinds or flags exists, so the default spaces keep their counts.
 */
#include <stdio.h>
#include <string.h>

#include "rdma.h"

#include "consumer.h"
#include "monitor.h"
#include "net.h"

static bool is_inval(xfer_resv_state rs)
{
    return rs == XFER_RESV_STATE_COMMIT_INVAL ||
           rs == XFER_RESV_STATE_CANCEL_INVAL ||
           rs == XFER_RESV_STATE_EXPIRE_INVAL;
}

void ck_rdma_op_seen(ck_world *w, const ck_msg *m)
{
    if (!w->cfg->rdma || m->kind != MK_OP)
        return;
    xfer_resv_state rs = xfer_shard_state(w->sh[m->shard], m->tr + 1u);
    if (is_inval(rs) && m->attempt != w->mon.tr[m->tr].cs[m->shard].attempt)
        ck_reach_note(w, CK_R_RSTALE);
}

static const char *rs_name(xfer_resv_state rs)
{
    return xfer_fsm_state_name(XFER_MACHINE_RESERVATION, rs);
}

/* The MK_RKEY entry of resv_id on shard k, or -1. */
static int rkey_find(const ck_world *w, unsigned k, uint64_t resv_id)
{
    for (unsigned i = 0; i < w->env.nmsg; i++) {
        const ck_msg *m = &w->msg[i];
        if (m->kind == MK_RKEY && m->shard == k && m->resv_id == resv_id)
            return (int)i;
    }
    return -1;
}

bool ck_rdma_rkey_live(const ck_world *w, unsigned k, uint64_t resv_id)
{
    return rkey_find(w, k, resv_id) >= 0;
}

void ck_rdma_reserved(ck_world *w, const ck_msg *m,
                      const xfer_resv_info *info)
{
    if (ck_rdma_rkey_live(w, m->shard, info->resv_id))
        return; /* an idempotent repeat of the reserve */
    ck_msg r;
    memset(&r, 0, sizeof r);
    r.kind = MK_RKEY;
    r.tr = m->tr;
    r.shard = m->shard;
    r.attempt = m->attempt;
    r.resv_id = info->resv_id;
    ck_net_push(w, &r);
}

/* Another live reservation of shard k whose region overlaps m's target
 * (the freed region was handed out again): its id, or 0. */
static unsigned reused_by(const ck_world *w, const ck_msg *m)
{
    for (unsigned t = 0; t < w->cfg->T; t++) {
        const mon_cs *o = &w->mon.tr[t].cs[m->shard];
        if (o->live && o->resv_id != m->resv_id && m->addr < o->addr + o->len &&
            o->addr < m->addr + (m->len ? m->len : 1u))
            return t + 1u;
    }
    return 0;
}

/* RLAND, RREADY (and I3): the bytes of write m reach the region now. */
static void landing(ck_world *w, const ck_msg *m)
{
    const mon_cs *c = &w->mon.tr[m->tr].cs[m->shard];
    xfer_resv_state rs = xfer_shard_state(w->sh[m->shard], m->tr + 1u);
    bool ours = c->live && c->resv_id == m->resv_id;
    unsigned other = reused_by(w, m);
    ck_reach_note(w, CK_R_RLAND);
    if (ours && (rs == XFER_RESV_STATE_READY || rs == XFER_RESV_STATE_TAKEN))
        ck_monitor_fail(w, CK_RREADY, "a one-sided write of id %u attempt %u "
                        "(resv %llu) landed on shard %u in a %s region: READY "
                        "bytes changed", m->tr + 1u, m->attempt,
                        (unsigned long long)m->resv_id, m->shard, rs_name(rs));
    else if (!ours || (rs != XFER_RESV_STATE_RESERVED && !is_inval(rs)))
        ck_monitor_fail(w, CK_RLAND, "a one-sided write of id %u attempt %u "
                        "(resv %llu) landed on shard %u, where %s (id %u is "
                        "%s)%s", m->tr + 1u, m->attempt,
                        (unsigned long long)m->resv_id, m->shard,
                        ours ? "its reservation is in a state no write may "
                               "reach"
                             : "its reservation was freed",
                        m->tr + 1u, rs_name(rs),
                        other ? " and the region belongs to another "
                                "reservation now" : "");
    else if (other)
        ck_monitor_fail(w, CK_I4, "a one-sided write of id %u landed on "
                        "shard %u in a region id %u also holds", m->tr + 1u,
                        m->shard, other);
    if (!(m->flags & MF_ORPHAN) && !w->env.staging[m->tr])
        ck_monitor_fail(w, CK_I3, "a one-sided write of id %u to shard %u "
                        "read staging after it was released", m->tr + 1u,
                        m->shard);
}

bool ck_rdma_write(ck_world *w, const ck_msg *m, int how, int32_t *status)
{
    ck_msg p = *m;
    bool live = ck_rdma_rkey_live(w, m->shard, m->resv_id);
    if (m->flags & MF_ORPHAN) {
        if (live)
            landing(w, m);
        return false; /* nobody waits for it */
    }
    if (m->flags & MF_LANDED) {
        *status = how == HOW_DELIVER ? 0 : XFER_ERR_CONN_LOST;
        return true;
    }
    if (how == HOW_FAIL) {
        *status = XFER_ERR_CONN_LOST; /* never posted */
        return true;
    }
    if (how == HOW_LOST || how == HOW_ABORT) {
        p.flags = (uint8_t)((p.flags & ~MF_ABORT) | MF_ORPHAN);
        ck_net_push(w, &p);
        *status = how == HOW_LOST ? XFER_ERR_CONN_LOST : XFER_ERR_ABORTED;
        return true;
    }
    if (!live) {
        *status = XFER_ERR_REMOTE; /* remote access error, nothing landed */
        return true;
    }
    landing(w, m);
    p.flags |= MF_LANDED;
    ck_net_push(w, &p);
    return false;
}

void ck_rdma_drain_shard(ck_world *w, unsigned k)
{
    size_t n;
    const xfer_shard_inval *q = xfer_shard_invalidations(w->sh[k], &n);
    for (size_t i = 0; i < n; i++) {
        if (q[i].id < 1 || q[i].id > w->cfg->T)
            continue;
        ck_msg m;
        memset(&m, 0, sizeof m);
        m.kind = MK_INV;
        m.tr = (uint8_t)(q[i].id - 1);
        m.shard = (uint16_t)k;
        m.attempt = q[i].attempt;
        m.resv_id = q[i].resv_id;
        ck_net_push(w, &m);
    }
    xfer_shard_invalidations_clear(w->sh[k]);
}

void ck_rdma_inval(ck_world *w, const ck_msg *m)
{
    if (!(m->flags & MF_INV_DONE)) {
        int r = rkey_find(w, m->shard, m->resv_id);
        if (r >= 0)
            ck_net_remove(w, (unsigned)r);
        ck_msg p = *m;
        p.flags |= MF_INV_DONE;
        ck_net_push(w, &p);
        return;
    }
    int rc = xfer_shard_invalidated(w->sh[m->shard], w->env.now, m->tr + 1u,
                                    m->resv_id);
    if (rc == 0)
        ck_reach_note(w, CK_R_RINVAL);
    else
        ck_monitor_fail(w, CK_RINVAL, "shard %u refused the invalidation of "
                        "id %u (resv %llu) it asked for: %s", m->shard,
                        m->tr + 1u, (unsigned long long)m->resv_id,
                        xfer_err_name(rc));
    ck_consumer_drain_shard(w, m->shard);
}

void ck_rdma_monitor_event(ck_world *w, const xfer_shard_event *e)
{
    if (e->kind == XFER_SHARD_EV_READY &&
        ck_rdma_rkey_live(w, e->shard, e->resv_id))
        ck_monitor_fail(w, CK_RREADY, "shard %u published id %llu attempt %u "
                        "READY while its rkey is live: a write can still "
                        "change the bytes", e->shard,
                        (unsigned long long)e->id, e->attempt);
}

/* Whether the invalidation of id tr + 1 on shard k is in the driver's
 * hands. */
static bool inval_pending(const ck_world *w, unsigned k, unsigned tr)
{
    for (unsigned i = 0; i < w->env.nmsg; i++) {
        const ck_msg *m = &w->msg[i];
        if (m->kind == MK_INV && m->shard == k && m->tr == tr)
            return true;
    }
    return false;
}

void ck_rdma_monitor_global(ck_world *w)
{
    for (unsigned k = 0; k < w->cfg->S; k++)
        for (unsigned t = 0; t < w->cfg->T; t++) {
            xfer_resv_state rs = xfer_shard_state(w->sh[k], t + 1u);
            if (is_inval(rs) && !inval_pending(w, k, t))
                ck_monitor_fail(w, CK_RINVAL, "shard %u holds id %u in %s, "
                                "but no invalidation of it is pending", k,
                                t + 1u, rs_name(rs));
        }
}

void ck_rdma_monitor_final(ck_world *w)
{
    for (unsigned i = 0; i < w->env.nmsg; i++) {
        const ck_msg *m = &w->msg[i];
        if (m->kind == MK_RKEY)
            ck_monitor_fail(w, CK_RINVAL, "the rkey of id %u attempt %u "
                            "(resv %llu) on shard %u is still live after "
                            "every reservation ended", m->tr + 1u,
                            m->attempt, (unsigned long long)m->resv_id,
                            m->shard);
    }
}
