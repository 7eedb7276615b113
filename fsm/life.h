/*
 * fsm/life.h - the engine's life around the transfer core, pure: the
 * staging pool registry (which pools are registered, how many accepted
 * submits still hold a staging region in each, when one may go) and the
 * order in which a shutdown ends.
 *
 * Two drivers keep their registry and their shutdown here, so a bug in
 * either is seen by both nets: the production engine (transport/engine.c,
 * the unit tests) and xfer-check's engine model (tools/check/engine.c,
 * the I9 monitor).  The driver does what the calls say (tell its
 * transports a pool went, call the shutdown callback); this file decides
 * when.
 *
 * The shutdown sequence, each step only after the one before:
 *  1. xfer_life_stop: no new submit, pool or group is accepted (the
 *     driver then asks the core to cancel every live transfer);
 *  2. xfer_life_core_done: the core's SHUTDOWN_DONE was performed (every
 *     transfer has its COMPLETE);
 *  3. xfer_life_next with `quiet` (every completion delivered): one
 *     XFER_LIFE_UNREGISTER per registered pool with no staging held, then
 *     XFER_LIFE_REPORT exactly once, then XFER_LIFE_WAIT for ever.
 *
 * The registry is caller storage: an array of `n` xfer_life_pool, zeroed
 * at start, with no pointers inside, so xfer-check saves it with its world
 * as plain bytes.  Nothing here allocates, reads a clock or prints.
 * Every pointer argument is borrowed until the call returns; one thread
 * (the driver's: the engine's loop) calls all of it.
 */
#ifndef XFER_FSM_LIFE_H
#define XFER_FSM_LIFE_H

#include <stdbool.h>
#include <stdint.h>

/* One slot of the registry. */
typedef struct xfer_life_pool {
    uint32_t users; /* accepted submits whose staging is not released */
    uint8_t used;   /* registered */
    uint8_t pad[3];
} xfer_life_pool;

/* The shutdown's progress; zeroed: running. */
typedef struct xfer_life {
    uint8_t stopping; /* xfer_life_stop was called */
    uint8_t done;     /* the core's SHUTDOWN_DONE was performed */
    uint8_t reported; /* XFER_LIFE_REPORT was returned */
    uint8_t pad;
} xfer_life;

/* What xfer_life_next asks the driver to do. */
typedef enum xfer_life_step {
    XFER_LIFE_WAIT = 0,   /* nothing now */
    XFER_LIFE_UNREGISTER, /* *pool was just unregistered: tell the transports */
    XFER_LIFE_REPORT      /* the shutdown is complete: call its callback */
} xfer_life_step;

/* Take the lowest free slot of pools[0..n) for a new pool, registered with
 * no users, into *pool.  Errors: XFER_ERR_SHUTDOWN (stopping),
 * XFER_ERR_BUSY (every slot is registered); *pool untouched then. */
int xfer_life_pool_add(const xfer_life *l, xfer_life_pool *pools, uint32_t n,
                       uint32_t *pool);
/* Unregister pool p.  Errors: XFER_ERR_NOT_FOUND (not registered),
 * XFER_ERR_BUSY (a submit still holds staging in it). */
int xfer_life_pool_remove(xfer_life_pool *pools, uint32_t n, uint32_t p);
/* Whether pool p is registered. */
bool xfer_life_pool_live(const xfer_life_pool *pools, uint32_t n, uint32_t p);
/* An accepted submit took a staging region of registered pool p (asserted:
 * the engine checked the pool before the core accepted) ... */
void xfer_life_pool_hold(xfer_life_pool *pools, uint32_t n, uint32_t p);
/* ... and gave it back (the core's RELEASE_STAGING; asserted: a hold of
 * p is outstanding). */
void xfer_life_pool_release(xfer_life_pool *pools, uint32_t n, uint32_t p);
/* Whether a submit, a pool or a group may still be accepted. */
bool xfer_life_open(const xfer_life *l);
/* Begin the shutdown.  Errors: XFER_ERR_STATE (already begun). */
int xfer_life_stop(xfer_life *l);
/* The core's SHUTDOWN_DONE was performed (xfer_life_next acts on it only
 * after xfer_life_stop). */
void xfer_life_core_done(xfer_life *l);
/* Whether the shutdown began and was not yet reported. */
bool xfer_life_pending(const xfer_life *l);
/* The next step of the shutdown's end (see the top of this file): call it
 * until it says XFER_LIFE_WAIT.  `quiet`: the driver holds no completion
 * or result still to deliver.  *pool is written on XFER_LIFE_UNREGISTER. */
xfer_life_step xfer_life_next(xfer_life *l, xfer_life_pool *pools, uint32_t n,
                              bool quiet, uint32_t *pool);

#endif /* XFER_FSM_LIFE_H */
