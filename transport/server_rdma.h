/*
 * transport/server_rdma.h - the RDMA side of the shard server
 * (server_rdma.c; include/xfer/rdma.h is the API), reached from the
 * server's files through these few hooks only:
 *
 *   server.c         new (after the TCP listener is bound) and del;
 *   server_req.c     a reserve succeeded: give it its own rkey (through
 *                    the reserving connection's QP, for a window);
 *   server_events.c  before the shards' events are published: invalidate
 *                    every rkey the shards asked for, then tell them.
 *
 * A server without RDMA has s->rdma == NULL and every hook is a no-op, so
 * TCP behaviour is exactly what it was.  The build without rdma-core
 * compiles server_rdma_none.c instead (new answers NOT_SUPPORTED).
 */
#ifndef XFER_SERVER_RDMA_H
#define XFER_SERVER_RDMA_H

#include <stdint.h>

#include "xfer/rdma.h"

struct xfer_server;
struct xfer_server_conn;
struct xfer_server_hosted;
typedef struct xfer_server_rdma xfer_server_rdma;

/* The listener on the server's address, the device's PD, and the CM
 * channel on the loop.  0, XFER_ERR_NOT_SUPPORTED, XFER_ERR_NOMEM or
 * XFER_ERR_IO; *out untouched on failure. */
int xfer_server_rdma_new(struct xfer_server *s,
                         const xfer_server_rdma_config *cfg,
                         xfer_server_rdma **out);
/* Close every RDMA connection and deregister every region.  NULL ok. */
void xfer_server_rdma_del(xfer_server_rdma *r);
uint16_t xfer_server_rdma_bound_port(const xfer_server_rdma *r);

/* Reservation (id, resv_id) of hs, reserved over control connection ctl
 * (borrowed), holds [off, off + len) of its pool: give it its own rkey
 * unless it has one, and *rkey gets it.  With type 2 windows, a window
 * bound through the QP of ctl's RC connection, the bind's completion
 * polled before this returns.  0, XFER_ERR_NOMEM (no window or
 * registration) or XFER_ERR_REMOTE (ctl has no RC connection, or the bind
 * failed); on error the caller cancels the reservation. */
int xfer_server_rdma_bind(xfer_server_rdma *r, struct xfer_server_hosted *hs,
                          struct xfer_server_conn *ctl, uint64_t id,
                          uint64_t resv_id, uint64_t off, uint32_t len,
                          uint32_t *rkey);
/* Kill the rkey of every region hs's shard asked to invalidate (a window:
 * local invalidation on its QP, its completion polled, then dealloc; a
 * registration: deregistration), then tell the shard
 * (xfer_shard_invalidated): when that is called, no write can land there
 * any more. */
void xfer_server_rdma_invalidate(xfer_server_rdma *r,
                                 struct xfer_server_hosted *hs, uint64_t now);
/* Integrity: kill the rkey of (id, resv_id) now, before its region is
 * checksummed (server_check.c), so what is checked is what stays: no
 * write can land there once this returned 0.  Its slot stays until the
 * shard's invalidation, which then finds nothing more to kill.  0 (also
 * when it has no rkey), or -1 when the rkey may still be alive (the
 * region must not be checked, nor made READY). */
int xfer_server_rdma_seal(xfer_server_rdma *r, struct xfer_server_hosted *hs,
                          uint64_t id, uint64_t resv_id);

#endif /* XFER_SERVER_RDMA_H */
