/*
 * transport/engine_ctl.c - the engine's control socket: xfer_ctl answering
 * with every live transfer of one engine.
 *
 * It uses only the engine's public API (xfer_engine_core, xfer_core_foreach,
 * xfer_core_view, xfer_engine_now), so it sees exactly what a tool could,
 * and it runs on the engine's loop, so the snapshot is one consistent cut:
 * no transfer changes state while it is written.  Transfers come in the
 * core's slot order (deterministic, never pointer order).  The socket
 * allocates through the engine's allocator (engine_int.h).
 */
#include "engine_int.h"
#include "xfer/ctl.h"

typedef struct visit_ctx {
    const xfer_core *core;
    xfer_ctl_reply *rep;
    uint64_t now;
} visit_ctx;

static void visit(void *ud, uint64_t id)
{
    visit_ctx *v = ud;
    xfer_transfer_view view;
    if (xfer_core_view(v->core, id, &view))
        (void)xfer_ctl_put_transfer(v->rep, &view, v->now);
}

static void engine_snapshot(void *ud, xfer_ctl_reply *rep)
{
    const xfer_engine *e = ud;
    visit_ctx v = {xfer_engine_core(e), rep, xfer_engine_now(e)};
    if (v.core)
        xfer_core_foreach(v.core, visit, &v);
}

int xfer_engine_ctl_open(xfer_engine *e, const char *path, xfer_ctl **out)
{
    if (!e)
        return XFER_ERR_INVALID_ARG;
    xfer_ctl_config cfg;
    xfer_ctl_config_default(&cfg);
    cfg.alloc = *xfer_engine_alloc(e);
    return xfer_ctl_open_config(xfer_engine_base(e), path, engine_snapshot, e,
                                &cfg, out);
}
