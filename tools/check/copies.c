/*
 * tools/check/copies.c - the monitors of the --copies world mode (device
 * shard pools, docs/design.md section 5.2).
 *
 * A copy in flight is an MK_OP WRITE message with MF_COPY: its write began
 * on the shard, its bytes are in the bounce buffer, and the copy into the
 * region runs until the message is delivered (or failed, or its reply
 * lost).  While it runs, the region must stay its reservation's and must
 * not be published:
 *   CREADY: the shard never has the record READY or TAKEN (or committing)
 *           while a copy into its region is in flight;
 *   CFREE:  the record is live and of the copy's reservation: never
 *           freed (a tombstone), never reused by another reservation, while
 *           a copy into it is in flight.
 * The machine keeps the record WRITING (or *_PENDING) until the copy
 * ended; RESERVED under a copy is a bug the monitors let pass until the
 * READY or the free it allows (a producer commits only after the WRITE's
 * ack), so each mutant is reported as the harm it does.  The copy lands
 * through the MF_COPY message, not mon_cs.writes (I4), from its start.
 *
 * What must stay true: with --copies off no message carries MF_COPY and
 * nothing here runs, so the other configurations keep their counts.
 */
#include "copies.h"

#include "monitor.h"

static const char *rs_name(xfer_resv_state rs)
{
    return xfer_fsm_state_name(XFER_MACHINE_RESERVATION, rs);
}

bool ck_copies_into(const ck_world *w, unsigned tr, unsigned shard)
{
    for (unsigned i = 0; i < w->env.nmsg; i++) {
        const ck_msg *m = &w->msg[i];
        if (m->kind == MK_OP && (m->flags & MF_COPY) && m->tr == tr &&
            m->shard == shard)
            return true;
    }
    return false;
}

void ck_copies_monitor_global(ck_world *w)
{
    for (unsigned i = 0; i < w->env.nmsg; i++) {
        const ck_msg *m = &w->msg[i];
        if (m->kind == MK_OP && (m->flags & MF_D2H) && !w->env.crashed &&
            !w->env.staging[m->tr]) {
            ck_monitor_fail(w, CK_I3, "the device-to-host copy of a WRITE "
                            "of id %u attempt %u to shard %u still reads "
                            "staging, which was released", m->tr + 1u,
                            m->attempt, m->shard);
            return;
        }
        if (m->kind != MK_OP || !(m->flags & MF_COPY))
            continue;
        const mon_cs *c = &w->mon.tr[m->tr].cs[m->shard];
        xfer_resv_state rs = xfer_shard_state(w->sh[m->shard], m->tr + 1u);
        bool ours = c->live && c->resv_id == m->resv_id;
        /* RESERVED: the shard ended the write before its copy (a bug, but
         * no harm until the commit or free it allows, caught there) */
        if (ours && (rs == XFER_RESV_STATE_WRITING ||
                     rs == XFER_RESV_STATE_CANCEL_PENDING ||
                     rs == XFER_RESV_STATE_EXPIRE_PENDING ||
                     rs == XFER_RESV_STATE_RESERVED))
            continue;
        if (ours && (rs == XFER_RESV_STATE_READY ||
                     rs == XFER_RESV_STATE_TAKEN ||
                     rs == XFER_RESV_STATE_COMMIT_INVAL))
            ck_monitor_fail(w, CK_CREADY, "id %u attempt %u (resv %llu) is "
                            "%s on shard %u while a copy into its region "
                            "is still in flight", m->tr + 1u, m->attempt,
                            (unsigned long long)m->resv_id, rs_name(rs),
                            m->shard);
        else
            ck_monitor_fail(w, CK_CFREE, "a copy into the region of id %u "
                            "attempt %u (resv %llu) is in flight on shard "
                            "%u, where %s (id %u is %s)", m->tr + 1u,
                            m->attempt, (unsigned long long)m->resv_id,
                            m->shard,
                            ours ? "its record no longer holds the region "
                                   "for a write"
                                 : "its reservation was freed",
                            m->tr + 1u, rs_name(rs));
        return; /* one failure per step is enough */
    }
}
