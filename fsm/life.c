/*
 * fsm/life.c - the staging pool registry and the end of a shutdown, shared
 * by the engine and xfer-check's engine model (life.h).
 *
 * Invariants: a pool's users count the accepted submits whose staging
 * region in it is not released, so a pool with users is never
 * unregistered (I3); XFER_LIFE_REPORT comes once, after the core's
 * SHUTDOWN_DONE, after every completion was delivered, and after every
 * pool that can go was unregistered (I9).
 */
#include "life.h"

#include <assert.h>
#include <stddef.h>

#include "xfer/fsm.h"

int xfer_life_pool_add(const xfer_life *l, xfer_life_pool *pools, uint32_t n,
                       uint32_t *pool)
{
    if (l->stopping)
        return XFER_ERR_SHUTDOWN;
    uint32_t p = 0;
    while (p < n && pools[p].used)
        p++;
    if (p == n)
        return XFER_ERR_BUSY;
    pools[p].users = 0;
    pools[p].used = 1;
    *pool = p;
    return 0;
}

int xfer_life_pool_remove(xfer_life_pool *pools, uint32_t n, uint32_t p)
{
    if (!xfer_life_pool_live(pools, n, p))
        return XFER_ERR_NOT_FOUND;
    if (pools[p].users)
        return XFER_ERR_BUSY;
    pools[p].used = 0;
    return 0;
}

bool xfer_life_pool_live(const xfer_life_pool *pools, uint32_t n, uint32_t p)
{
    return p < n && pools[p].used;
}

void xfer_life_pool_hold(xfer_life_pool *pools, uint32_t n, uint32_t p)
{
    assert(xfer_life_pool_live(pools, n, p));
    pools[p].users++;
}

void xfer_life_pool_release(xfer_life_pool *pools, uint32_t n, uint32_t p)
{
    assert(xfer_life_pool_live(pools, n, p) && pools[p].users > 0);
    pools[p].users--;
}

bool xfer_life_open(const xfer_life *l)
{
    return !l->stopping;
}

int xfer_life_stop(xfer_life *l)
{
    if (l->stopping)
        return XFER_ERR_STATE;
    l->stopping = 1;
    return 0;
}

void xfer_life_core_done(xfer_life *l)
{
    l->done = 1;
}

bool xfer_life_pending(const xfer_life *l)
{
    return l->stopping && !l->reported;
}

/* A pool some submit still holds staging in stays registered: the core
 * released every region before SHUTDOWN_DONE (I3), so that is a bug the
 * I9 monitor and the engine's tests report, not one to hide here. */
xfer_life_step xfer_life_next(xfer_life *l, xfer_life_pool *pools, uint32_t n,
                              bool quiet, uint32_t *pool)
{
    if (!l->stopping || !l->done || l->reported || !quiet)
        return XFER_LIFE_WAIT;
    for (uint32_t p = 0; p < n; p++) {
        if (xfer_life_pool_remove(pools, n, p) == 0) {
            *pool = p;
            return XFER_LIFE_UNREGISTER;
        }
    }
    l->reported = 1;
    return XFER_LIFE_REPORT;
}
