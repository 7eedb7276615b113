/*
 * tools/check/corrupt.c - the corruption mode (corrupt.h).
 *
 * The model of the bytes is one bit per (transfer, shard): the live
 * region's bytes are the producer's, or not (mon_cs.corrupt).  A write
 * landing (a WRITE begun on its shard, MF_BEGUN, one write per WRITE)
 * may land corrupt, at most max_corrupt times per path, each a
 * disturbance.  The shard's check is the library's own verdict,
 * xfer_shard_check, fed the CRC the producer sent (the clean one, 0) and
 * the one the shard would compute (1 when the region is corrupt), exactly
 * as the shard server feeds it (transport/server_check.c) and only where
 * the server checks: a commit the shard would apply (the record RESERVED,
 * of the commit's reservation).  A mutant of the verdict
 * (tests/check/mutate.py: check_skipped) makes a corrupt region READY and
 * then available, which INTEG reports.
 */
#include "corrupt.h"

#include "monitor.h"
#include "reach.h"
#include "xfer/integrity.h"

bool ck_corrupt_may(const ck_world *w, const ck_msg *m)
{
    return w->cfg->max_corrupt && m->kind == MK_OP &&
           m->op == XFER_OP_WRITE && (m->flags & MF_BEGUN) &&
           !(m->flags & MF_PART) && m->len > 0 &&
           w->env.corrupts < w->cfg->max_corrupt &&
           w->env.disturb < w->cfg->budget &&
           !w->mon.tr[m->tr].cs[m->shard].corrupt;
}

void ck_corrupt_apply(ck_world *w, unsigned i)
{
    const ck_msg *m = &w->msg[i];
    w->env.corrupts++;
    w->mon.tr[m->tr].cs[m->shard].corrupt = 1;
    ck_reach_note(w, CK_R_CORRUPT);
}

void ck_corrupt_fresh(ck_world *w, const ck_msg *m)
{
    if (w->cfg->max_corrupt)
        w->mon.tr[m->tr].cs[m->shard].corrupt = 0;
}

int32_t ck_corrupt_commit(ck_world *w, const ck_msg *m)
{
    if (!w->cfg->max_corrupt)
        return 0;
    uint64_t id = m->tr + 1u;
    const mon_cs *cs = &w->mon.tr[m->tr].cs[m->shard];
    if (xfer_shard_state(w->sh[m->shard], id) != XFER_RESV_STATE_RESERVED ||
        cs->resv_id != m->resv_id)
        return 0; /* the shard refuses it on its own */
    int32_t rc = xfer_shard_check(w->sh[m->shard], w->env.now, id,
                                  m->attempt, 0, cs->corrupt ? 1u : 0u);
    if (rc == XFER_ERR_CORRUPT)
        ck_reach_note(w, CK_R_CREFUSED);
    return rc;
}

void ck_corrupt_available(ck_world *w, unsigned t)
{
    if (!w->cfg->max_corrupt)
        return;
    for (unsigned k = 0; k < w->cfg->S; k++)
        if (w->mon.tr[t].cs[k].corrupt)
            ck_monitor_fail(w, CK_INTEG, "id %u AVAILABLE with shard %u's "
                            "region corrupt (a write landed wrong and the "
                            "commit was not refused)", t + 1u, k);
}
