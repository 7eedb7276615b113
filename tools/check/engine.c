/*
 * tools/check/engine.c - the engine model xfer-check wraps around the real
 * transfer core: what xfer_engine does with the core's actions, without
 * libevent.  It owns the staging regions of the modelled producer, turns
 * RESERVE/WRITE/COMMIT/CANCEL actions into messages in flight, and marks
 * ops the core asked to abort.  The staging pool registry (which pool is
 * registered, how many submits hold staging in it) and the end of a
 * shutdown (SHUTDOWN_DONE, then every pool unregistered, then shutdown
 * complete) are not modelled here: they are fsm/life.c, the code
 * transport/engine.c runs, kept in the world's env as plain bytes.
 *
 * What must stay true: every action is shown to the monitors before the
 * model acts on it, so a monitor sees the stream exactly as the core emitted
 * it.  The mutant engine_keeps_pools patches fsm/life.c (the shutdown skips
 * the unregister); the I9 monitor (monitor.c) notices it here, and
 * test_engine_shutdown_every_state in the real engine.
 */
#include <assert.h>
#include <string.h>

#include "engine.h"

#include "gone.h"
#include "monitor.h"
#include "net.h"
#include "stream.h"

/* The one staging pool: the first slot the registry hands out. */
#define POOL 0u

void ck_engine_start(ck_world *w)
{
    uint32_t p = CK_POOLS;
    int rc = xfer_life_pool_add(&w->env.life, w->env.pools, CK_POOLS, &p);
    assert(rc == 0 && p == POOL);
    (void)rc;
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
 * unless the transfer still holds one; a refused submit gives it back, an
 * accepted one holds the pool (as xfer_engine_submit does).  Unlike the
 * engine, the model asks the core even after the shutdown began, so that
 * the core's own refusal stays under the monitors (I9). */
int ck_engine_submit(ck_world *w, unsigned tr)
{
    xfer_slice sl[CK_MAX_S];
    slices(w, sl);
    xfer_submit_args a = {
        .id = tr + 1u,
        .group = 7,
        .nshards = (uint16_t)w->cfg->S,
        .pool = POOL,
        .slices = sl,
        .user_data = 100u, /* alike for every id, as the slices */
        .eager_ok = w->cfg->eager,
    };
    bool took = !w->env.staging[tr];
    if (took)
        w->env.staging[tr] = 1;
    int rc;
    if (w->cfg->parts) {
        /* A stream: opened with its sizes; its parts bring the staging
         * (stream.c), the region above stands for the pool's hold. */
        uint32_t lens[CK_MAX_S];
        for (unsigned k = 0; k < w->cfg->S; k++)
            lens[k] = CK_SLICE;
        xfer_open_args o = {.id = a.id, .group = a.group,
                            .nshards = a.nshards, .lens = lens,
                            .user_data = a.user_data};
        rc = xfer_core_open(w->core, w->env.now, &o);
        if (rc == 0)
            ck_stream_opened(w, tr);
    } else {
        rc = xfer_core_submit(w->core, w->env.now, &a);
    }
    if (rc && took)
        w->env.staging[tr] = 0;
    else if (took && xfer_life_pool_live(w->env.pools, CK_POOLS, POOL))
        xfer_life_pool_hold(w->env.pools, CK_POOLS, POOL);
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
    /* --copies: staging is device memory; engine_copy.c copies the slice
     * into a bounce buffer first and hands the op to the transport only
     * when that copy ended (its delivery, consumer.c) */
    if (w->cfg->copies && m.op == XFER_OP_WRITE)
        m.flags |= MF_D2H;
    if (a->kind == XFER_ACT_WRITE && w->cfg->parts)
        m.part = CK_STREAM_PART(a->part, a->resv_off);
    /* --gone: the transport fails an op for a gone shard at once */
    if (ck_gone_refuse(w, &m))
        return;
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

/* RELEASE_STAGING: the transfer's region goes back, and its hold on the
 * pool with it.  A second release (I3 says so) or one after the pool went
 * (I9) has nothing to give back. */
static void release_staging(ck_world *w, uint64_t id)
{
    if (id < 1 || id > w->cfg->T || !w->env.staging[id - 1])
        return;
    w->env.staging[id - 1] = 0;
    if (xfer_life_pool_live(w->env.pools, CK_POOLS, POOL) &&
        w->env.pools[POOL].users > 0)
        xfer_life_pool_release(w->env.pools, CK_POOLS, POOL);
}

/* The registry's end of the shutdown, after every drain, as the engine
 * runs it after every deferred event: the model reports each COMPLETE as
 * it performs it, so nothing is left to deliver.  It does nothing before
 * SHUTDOWN_DONE nor after the report; a registry that reported twice
 * would be seen by I9. */
static void end_shutdown(ck_world *w)
{
    uint32_t p;
    for (;;) {
        switch (xfer_life_next(&w->env.life, w->env.pools, CK_POOLS, true,
                               &p)) {
        case XFER_LIFE_UNREGISTER:
            ck_monitor_pool_unregistered(w);
            continue;
        case XFER_LIFE_REPORT:
            ck_monitor_shutdown_complete(w);
            return;
        case XFER_LIFE_WAIT:
            return;
        }
    }
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
        release_staging(w, a->id);
        break;
    case XFER_ACT_COMPLETE:
        break;
    case XFER_ACT_SHUTDOWN_DONE:
        xfer_life_core_done(&w->env.life);
        break;
    case XFER_ACT_RELEASE_PART:
        ck_stream_release(w, a);
        break;
    case XFER_ACT_COUNT_:
        break;
    }
}

/* The engine shuts down: the registry stops taking pools and submits,
 * then the core cancels every live transfer. */
void ck_engine_shutdown(ck_world *w)
{
    w->env.shutdown = 1;
    ck_monitor_shutdown(w);
    if (xfer_life_stop(&w->env.life) != 0)
        ck_monitor_fail(w, CK_I9, "the engine model shut down twice");
    xfer_core_shutdown(w->core, w->env.now);
    ck_engine_drain(w);
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
    end_shutdown(w);
}
