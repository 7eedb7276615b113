/*
 * tools/check/engine.c - the engine model xfer-check wraps around the real
 * transfer core: what xfer_engine does with the core's actions, without
 * libevent.  It owns the staging pool registry and the staging regions of
 * the modelled producer, turns RESERVE/WRITE/COMMIT/CANCEL actions into
 * messages in flight, marks ops the core asked to abort, and on
 * SHUTDOWN_DONE unregisters the staging pool and then reports shutdown
 * complete.
 *
 * What must stay true: every action is shown to the monitors before the
 * model acts on it, so a monitor sees the stream exactly as the core emitted
 * it.  The mutant "pool not unregistered at shutdown" patches this file;
 * the I9 monitor (monitor.c), not this file, is what notices.
 */
#include <string.h>

#include "engine.h"

#include "monitor.h"
#include "net.h"

void ck_engine_start(ck_world *w)
{
    w->env.pool_registered = 1;
}

/* Every shard gets the same slice of the transfer's staging region (the
 * same bytes go to every rank), so shards stay interchangeable; and every
 * transfer the same offset (the model holds a flag per region, never its
 * bytes), so transfers stay interchangeable too (symmetry over transfers,
 * canon.c): an offset per transfer would be a datum that tells the ids
 * apart in the core's records. */
static void slices(const ck_world *w, xfer_slice *out)
{
    for (unsigned k = 0; k < w->cfg->S; k++) {
        out[k].off = 0;
        out[k].len = CK_SLICE;
    }
}

/* A submit from the modelled scheduler: a staging region is taken for it
 * unless the transfer still holds one; a refused submit gives it back. */
int ck_engine_submit(ck_world *w, unsigned tr)
{
    xfer_slice sl[CK_MAX_S];
    slices(w, sl);
    xfer_submit_args a = {
        .id = tr + 1u,
        .group = 7,
        .nshards = (uint16_t)w->cfg->S,
        .pool = 1,
        .slices = sl,
        .user_data = 100u, /* alike for every id, as the slices */
        .eager_ok = w->cfg->eager,
    };
    bool took = !w->env.staging[tr];
    if (took)
        w->env.staging[tr] = 1;
    int rc = xfer_core_submit(w->core, w->env.now, &a);
    if (rc && took)
        w->env.staging[tr] = 0;
    return rc;
}

static void send_op(ck_world *w, const xfer_action *a)
{
    ck_msg m;
    memset(&m, 0, sizeof m);
    m.kind = MK_OP;
    m.op = (uint8_t)xfer_action_op(a->kind);
    m.tr = (uint8_t)(a->id - 1);
    m.shard = a->shard;
    m.attempt = a->attempt;
    m.len = a->len;
    m.resv_id = a->resv_id;
    m.addr = a->remote_addr;
    ck_net_push(w, &m);
}

/* ABORT: mark the op if it is still in flight; an op already answered (its
 * result is on its way back) needs nothing. */
static void mark_abort(ck_world *w, const xfer_action *a)
{
    for (unsigned i = 0; i < w->env.nmsg; i++) {
        ck_msg *m = &w->msg[i];
        if (m->kind == MK_OP && m->op == a->op && m->tr == a->id - 1 &&
            m->shard == a->shard && m->attempt == a->attempt)
            m->flags |= MF_ABORT;
    }
}

static void shutdown_done(ck_world *w)
{
    /* Every completion has been reported: unregister the staging pool,
     * then report shutdown complete. */
    w->env.pool_registered = 0;
    ck_monitor_pool_unregistered(w);
    ck_monitor_shutdown_complete(w);
}

static void act(ck_world *w, const xfer_action *a)
{
    switch ((xfer_action_kind)a->kind) {
    case XFER_ACT_RESERVE:
    case XFER_ACT_WRITE:
    case XFER_ACT_COMMIT:
    case XFER_ACT_CANCEL:
    case XFER_ACT_EAGER:
        send_op(w, a);
        break;
    case XFER_ACT_ABORT:
        mark_abort(w, a);
        break;
    case XFER_ACT_RELEASE_STAGING:
        if (a->id >= 1 && a->id <= w->cfg->T)
            w->env.staging[a->id - 1] = 0;
        break;
    case XFER_ACT_COMPLETE:
        break;
    case XFER_ACT_SHUTDOWN_DONE:
        shutdown_done(w);
        break;
    case XFER_ACT_COUNT_:
        break;
    }
}

/* Take every pending action of the core, in order. */
void ck_engine_drain(ck_world *w)
{
    size_t n;
    const xfer_action *acts = xfer_core_actions(w->core, &n);
    ck_monitor_batch(w);
    for (size_t i = 0; i < n; i++) {
        ck_monitor_action(w, &acts[i]);
        act(w, &acts[i]);
    }
    xfer_core_actions_clear(w->core);
}
