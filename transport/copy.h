/*
 * copy.h - the copy engine: asynchronous copies between device memory and
 * host bounce buffers, whose completions reach a libevent loop as events.
 * Internal (the engine's producer side, engine_copy.c, and the shard
 * server's device pools, server_copy.c).
 *
 * One xfer_copy serves one memory kind and device on one event base.  A
 * copy is started on the loop thread and completes on the loop thread:
 * the backend (the CUDA driver's stream callback, or the test device's
 * copy thread) only queues the finished request and writes an eventfd,
 * which the loop reads; the loop never waits for a copy.
 *
 * Backends, one ops table each: CUDA (copy_cuda.c: the driver API loaded
 * at run time, one non-blocking stream the library owns per xfer_copy,
 * pinned bounce buffers from cuMemHostAlloc) and the test device
 * (copy_testdev.c).
 *
 * What must stay true: every copy started with 0 calls its done exactly
 * once, later, from the loop, unless the xfer_copy is deleted first (then
 * never, and xfer_copy_del returns only when no backend still touches
 * the request or its memory); the library never dereferences the device
 * side of a copy.
 */
#ifndef XFER_COPY_H
#define XFER_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/mem.h"

struct event_base;
typedef struct xfer_copy xfer_copy;

/* status: 0, or XFER_ERR_COPY (the device reported the copy failed: its
 * destination's bytes are unspecified). */
typedef void (*xfer_copy_done_fn)(void *ud, int status);

/* Copy engine for memory kind `mem` (not HOST) on `base` (borrowed until
 * del).  *out on 0.  XFER_ERR_NOT_SUPPORTED (CUDA absent at build or run
 * time, or its ordinal), XFER_ERR_INVALID_ARG, XFER_ERR_NOMEM,
 * XFER_ERR_IO (eventfd, libevent), XFER_ERR_COPY (stream creation). */
int xfer_copy_new(struct event_base *base, xfer_mem mem, xfer_copy **out);
/* Wait (blocking: teardown only) until no copy is in flight, then free
 * without calling the done of those that did not complete on the loop.
 * NULL ignored.  Loop thread, outside its callbacks' own copy. */
void xfer_copy_del(xfer_copy *c);

/* Wait (blocking: teardown only) until no copy is in flight; those that
 * completed and were not yet reported on the loop are dropped, their done
 * never called.  NULL ignored. */
void xfer_copy_quiesce(xfer_copy *c);

/* Copy len bytes device -> host (d2h) or host -> device.  `dev` and
 * `host` retained until done.  0: done(ud, status) called once from the
 * loop.  Else nothing will be called: XFER_ERR_INVALID_ARG (dev outside
 * memory of this kind), XFER_ERR_NOMEM, XFER_ERR_COPY (the device refused
 * it at once). */
int xfer_copy_start(xfer_copy *c, bool d2h, void *host, void *dev,
                    size_t len, xfer_copy_done_fn done, void *ud);

/* A host bounce buffer of at least len bytes (pinned for CUDA), from a
 * cache of power-of-two sizes; NULL when none can be had.  Return it with
 * xfer_copy_bounce_put and the same len. */
void *xfer_copy_bounce_get(xfer_copy *c, size_t len);
void xfer_copy_bounce_put(xfer_copy *c, void *p, size_t len);

/* Copies started and not yet completed on the loop. */
uint64_t xfer_copy_in_flight(const xfer_copy *c);

/* The backend: one per memory kind. */
typedef struct xfer_copy_ops {
    /* Per-xfer_copy state for `mem`: 0 or an error as for xfer_copy_new. */
    int (*open)(xfer_mem mem, void **state);
    /* Wait until the backend no longer runs or queues anything, then free
     * the state. */
    void (*close)(void *state);
    /* Queue a copy; 0: xfer_copy_backend_done(req, status) follows once,
     * from any thread. */
    int (*start)(void *state, bool d2h, void *host, void *dev, size_t len,
                 void *req);
    void *(*host_alloc)(void *state, size_t len);
    void (*host_free)(void *state, void *p);
} xfer_copy_ops;

extern const xfer_copy_ops xfer_copy_testdev_ops;
extern const xfer_copy_ops xfer_copy_cuda_ops;

/* A backend reports request `req` ended (any thread). */
void xfer_copy_backend_done(void *req, int status);

#endif /* XFER_COPY_H */
