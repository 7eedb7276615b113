/*
 * tools/check/gone.c - the --gone world mode: the directory's "shard gone"
 * event and the engine's reaction, as transport/tcp.c runs it.
 *
 * What tcp.c does when the directory reports shard k gone
 * (xfer_tcp_set_shard(t, k, NULL)): it closes the connection and fails
 * both its lists, the ops sent and unanswered and the ops waiting to be
 * sent, with XFER_ERR_SHARD_GONE (results on the loop); from then on a new
 * op for k fails so at once (tcp_start, C_GONE), until an entry of a
 * higher epoch names the shard again (xfer_tcp_set_shard with an address:
 * a new connection).  The directory client drops an entry of a lower
 * epoch (transport/dir.c), so a stale entry never brings the shard back;
 * the model's MV_BACK is the newer entry.  The core sees an ordinary op
 * failure (fsm/ has no case for SHARD_GONE) and rolls back: its cancels
 * to a gone shard fail at once too, it retries them and gives up, and the
 * shard's lease reclaims what the producer could not (I12, I13).
 *
 * In the model, closing the connection does not pull back what is on the
 * wire: an op already sent may still be read and applied by the shard,
 * answering nobody (MF_ORPHAN, as --dups's MV_ORPHAN); a write whose
 * bytes were landing (MF_BEGUN) ends on the shard later, well when every
 * byte was already in the kernel, failed (MV_FAIL, a fault) when the
 * stream was cut; a reply already sent is never read (the producer hears
 * SHARD_GONE for that op instead).
 *
 * GONE, after every step while the producer lives: no op of the producer
 * is on the wire to a gone shard other than the orphans the event left
 * (the engine never sends to a gone shard: a stale entry is never used),
 * and every op of an open attempt outstanding at a gone shard has its
 * result in flight (it was failed, not left to a deadline).
 *
 * What must stay true: with --gone 0 no move here is offered, no env byte
 * changes and nothing here runs, so every other configuration keeps its
 * state counts.  env.gone is per shard and goes with the shard under the
 * shard symmetry (canon.c).
 */
#include "gone.h"

#include "monitor.h"
#include "net.h"

bool ck_gone_may(const ck_world *w, unsigned k)
{
    return w->cfg->gone && k < w->cfg->S && !w->env.crashed &&
           !w->env.gone[k] &&
           w->env.gones < w->cfg->gone &&
           w->env.disturb < w->cfg->budget;
}

bool ck_gone_may_back(const ck_world *w, unsigned k)
{
    return w->cfg->gone && k < w->cfg->S && !w->env.crashed &&
           w->env.gone[k];
}

/* The producer hears SHARD_GONE for op m (a result in flight, read on the
 * loop).  A reserve's or eager op's failure carries no reservation. */
static void fail_gone(ck_world *w, const ck_msg *op)
{
    if (w->env.crashed)
        return; /* nobody is listening */
    ck_msg r = *op;
    r.kind = MK_RES;
    r.flags = 0;
    r.status = XFER_ERR_SHARD_GONE;
    r.addr = 0;
    r.len = 0;
    r.part = 0;
    if (op->op == XFER_OP_RESERVE || op->op == XFER_OP_EAGER)
        r.resv_id = 0;
    ck_net_push(w, &r);
    ck_reach_note(w, CK_R_GFAILED);
}

void ck_gone_apply(ck_world *w, unsigned k)
{
    w->env.gone[k] = 1;
    w->env.gones++;
    ck_reach_note(w, CK_R_GONE);
    unsigned n = w->env.nmsg;
    for (unsigned i = 0; i < n && w->v.inv < 0; i++) {
        ck_msg *m = &w->msg[i];
        if (m->shard != k)
            continue;
        if (m->kind == MK_RES && !w->env.crashed) {
            /* the reply is never read: the op fails SHARD_GONE instead */
            m->status = XFER_ERR_SHARD_GONE;
            m->addr = 0;
            if (m->op == XFER_OP_RESERVE || m->op == XFER_OP_EAGER)
                m->resv_id = 0;
            ck_reach_note(w, CK_R_GFAILED);
        } else if (m->kind == MK_OP && !(m->flags & MF_ORPHAN)) {
            ck_msg op = *m;
            m->flags = (uint8_t)((m->flags & ~MF_ABORT) | MF_ORPHAN);
            fail_gone(w, &op);
        }
    }
}

void ck_gone_back(ck_world *w, unsigned k)
{
    w->env.gone[k] = 0;
    ck_reach_note(w, CK_R_BACK);
}

bool ck_gone_refuse(ck_world *w, const ck_msg *m)
{
    if (!w->cfg->gone || m->kind != MK_OP || !w->env.gone[m->shard])
        return false;
    fail_gone(w, m);
    return true;
}

void ck_gone_monitor_global(ck_world *w)
{
    if (w->env.crashed)
        return;
    for (unsigned i = 0; i < w->env.nmsg; i++) {
        const ck_msg *m = &w->msg[i];
        if (m->kind == MK_OP && w->env.gone[m->shard] &&
            !(m->flags & MF_ORPHAN)) {
            ck_monitor_fail(w, CK_GONE, "%s of id %u attempt %u is on the "
                            "wire to shard %u, whose directory entry is "
                            "gone", xfer_op_name(m->op), m->tr + 1u,
                            m->attempt, m->shard);
            return;
        }
    }
    for (unsigned t = 0; t < w->cfg->T; t++) {
        const mon_tr *mt = &w->mon.tr[t];
        if (!mt->open)
            continue;
        for (unsigned k = 0; k < w->cfg->S; k++) {
            if (!w->env.gone[k])
                continue;
            for (unsigned o = 0; o < XFER_OP_COUNT_; o++) {
                unsigned res = 0;
                for (unsigned i = 0; i < w->env.nmsg; i++) {
                    const ck_msg *m = &w->msg[i];
                    res += m->kind == MK_RES && m->tr == t &&
                           m->shard == k && m->op == o &&
                           m->attempt == mt->attempt;
                }
                if (mt->ps[k].out[o] > res) {
                    ck_monitor_fail(w, CK_GONE, "%s of id %u attempt %u "
                                    "to shard %u, whose directory entry "
                                    "is gone, has no result on its way: "
                                    "it waits for a deadline instead of "
                                    "failing SHARD_GONE", xfer_op_name(o),
                                    t + 1u, mt->attempt, k);
                    return;
                }
            }
        }
    }
}
