/*
 * transport/consumer_stats.c - the consumer's counters and its control
 * socket: every id it waits for, with the shards that reported and the
 * shards it waits on (`xfer-trace stuck --live`).
 *
 * Only reads: nothing here changes a record, a link or the tracker.
 */
#include "consumer_int.h"

#include <stddef.h>

#include "util.h" /* fsm_private_dep: the versioned copy */
#include "xfer/ctl.h"

/* The bytes each version of xfer_consumer_stats holds (fsm/util.h). */
static const size_t stats_lens[] = {
    offsetof(xfer_consumer_stats, requests_queued),
    offsetof(xfer_consumer_stats, crc_checked),
    sizeof(xfer_consumer_stats)};

int xfer_consumer_stats_get_versioned(const xfer_consumer *c,
                                      uint32_t version,
                                      xfer_consumer_stats *st)
{
    if (!c || !st)
        return XFER_ERR_INVALID_ARG;
    xfer_consumer_stats cur = c->st;
    cur.links_up = 0;
    cur.requests_queued = 0;
    for (uint16_t k = 0; k < c->cfg.nshards; k++) {
        cur.links_up += c->links[k].state == XFER_CLINK_UP;
        cur.requests_queued += xfer_consumer_link_queued(&c->links[k]);
    }
    xfer_readiness_stats rs;
    xfer_readiness_stats_get(c->rd, &rs);
    cur.late_ready = rs.late_ready;
    cur.tombstones = rs.tombstones;
    return xfer_util_versioned_copy(st, &cur, version, stats_lens,
                                    XFER_UTIL_NVERSIONS(stats_lens));
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
