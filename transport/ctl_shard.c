/*
 * transport/ctl_shard.c - control-socket snapshots of consumer shards (for
 * xferd): every open reservation of every shard, with its state, age and
 * what it waits for.
 *
 * Uses only the shard's public iteration (xfer_shard_foreach: live records
 * by id, then tombstones, which xfer_ctl_put_reservation skips), so the
 * order is deterministic and the snapshot is one cut taken on the loop that
 * drives the shards.
 */
#include "xfer/ctl.h"
#include "xfer/xfer.h"

typedef struct visit_ctx {
    xfer_ctl_reply *rep;
    uint16_t shard;
    uint64_t now;
    int err;
} visit_ctx;

static void visit(void *ud, uint64_t id, uint32_t attempt,
                  xfer_resv_state st, uint64_t since_ns)
{
    visit_ctx *v = ud;
    if (!v->err)
        v->err = xfer_ctl_put_reservation(v->rep, v->shard, id, attempt, st,
                                          since_ns, v->now);
}

int xfer_ctl_put_shard(xfer_ctl_reply *rep, const xfer_shard *s,
                       uint16_t shard, uint64_t now_ns)
{
    if (!rep || !s)
        return XFER_ERR_INVALID_ARG;
    visit_ctx v = {rep, shard, now_ns, 0};
    xfer_shard_foreach(s, visit, &v);
    return v.err;
}

void xfer_ctl_shards_snapshot(void *ud, xfer_ctl_reply *rep)
{
    const xfer_ctl_shards *cs = ud;
    if (!cs)
        return;
    xfer_clock_fn clock = cs->clock ? cs->clock : xfer_clock_monotonic;
    uint64_t now = clock(cs->clock_ud);
    for (uint16_t k = 0; k < cs->nshards; k++)
        if (cs->shards[k] &&
            xfer_ctl_put_shard(rep, cs->shards[k], k, now) != 0)
            return;
}
