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
 *
 * The ctl holds the engine through a link the engine clears at
 * xfer_engine_del, so the ctl may be closed before or after the engine:
 * after, it answers with no transfer.
 */
#include "ctl_int.h"
#include "engine_int.h"
#include "util.h" /* fsm_private_dep: the injected allocator */
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
    const xfer_engine *e = ((const xfer_engine_ctl_link *)ud)->e;
    if (!e)
        return; /* the engine was deleted first */
    visit_ctx v = {xfer_engine_core(e), rep, xfer_engine_now(e)};
    if (v.core)
        xfer_core_foreach(v.core, visit, &v);
}

/* xfer_ctl_close: the engine, if still there, forgets the link. */
static void link_closed(void *ud)
{
    xfer_engine_ctl_link *l = ud;
    if (l->e)
        xfer_engine_ctl_link_remove(l->e, l);
    xfer_allocator a = l->alloc;
    xfer_util_free(&a, l);
}

int xfer_engine_ctl_open(xfer_engine *e, const char *path, xfer_ctl **out)
{
    if (!e)
        return XFER_ERR_INVALID_ARG;
    xfer_ctl_config cfg;
    xfer_ctl_config_default(&cfg);
    cfg.alloc = *xfer_engine_alloc(e);
    xfer_engine_ctl_link *l = xfer_util_calloc(&cfg.alloc, 1, sizeof *l);
    if (!l)
        return XFER_ERR_NOMEM;
    l->alloc = cfg.alloc;
    int rc = xfer_ctl_open_config(xfer_engine_base(e), path, engine_snapshot,
                                  l, &cfg, out);
    if (rc) {
        xfer_util_free(&l->alloc, l);
        return rc;
    }
    xfer_engine_ctl_link_add(e, l);
    xfer_ctl_on_close(*out, link_closed);
    return 0;
}
