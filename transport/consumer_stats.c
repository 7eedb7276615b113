/*
 * transport/consumer_stats.c - the consumer's counters and its control
 * socket: every id it waits for, with the shards that reported and the
 * shards it waits on (`xfer-trace stuck --live`).
 *
 * Only reads: nothing here changes a record, a link or the tracker.
 */
#include "consumer_int.h"

#include "xfer/ctl.h"

int xfer_consumer_stats_get(const xfer_consumer *c, xfer_consumer_stats *st)
{
    if (!c || !st || st->version != XFER_CONSUMER_STATS_VERSION)
        return XFER_ERR_INVALID_ARG;
    *st = c->st;
    st->version = XFER_CONSUMER_STATS_VERSION;
    st->links_up = 0;
    for (uint16_t k = 0; k < c->cfg.nshards; k++)
        st->links_up += c->links[k].state == XFER_CLINK_UP;
    xfer_readiness_stats rs;
    xfer_readiness_stats_get(c->rd, &rs);
    st->late_ready = rs.late_ready;
    st->tombstones = rs.tombstones;
    return 0;
}

static void snapshot(void *ud, xfer_ctl_reply *rep)
{
    const xfer_consumer *c = ud;
    uint64_t now = xfer_consumer_now(c);
    uint64_t all = c->cfg.nshards == 64 ? UINT64_MAX
                                        : (UINT64_C(1) << c->cfg.nshards) - 1;
    for (uint32_t slot = 0; slot < c->cap; slot++) {
        const xfer_consumer_rec *r = &c->recs[slot];
        if (r->state != XFER_CREC_PENDING)
            continue;
        xfer_ready_state st = xfer_readiness_state(c->rd, r->id);
        const char *name =
            st == XFER_READY_STATE_NONE
                ? "EXPECTED"
                : xfer_fsm_state_name(XFER_MACHINE_READINESS, st);
        uint64_t waiting =
            st == XFER_READY_STATE_TAKING ? r->taking : all & ~r->ready;
        if (xfer_ctl_put_readiness(rep, r->id, r->attempt, name,
                                   c->cfg.nshards, r->ready, waiting,
                                   r->t_first, now) != 0)
            return;
    }
}

int xfer_consumer_ctl_open(xfer_consumer *c, const char *path,
                           struct xfer_ctl **out)
{
    if (!c)
        return XFER_ERR_INVALID_ARG;
    return xfer_ctl_open(c->base, path, snapshot, c, out);
}
