/*
 * transport/server_rdma.h - the RDMA side of the shard server
 * (server_rdma.c; include/xfer/rdma.h is the API), reached from the
 * server's files through these few hooks only:
 *
 *   server.c         new (after the TCP listener is bound) and del;
 *   server_req.c     a reserve succeeded: give it its own rkey;
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

/* Reservation (id, resv_id) of hs holds [off, off + len) of its pool:
 * register it (iova = off) unless it already is; *rkey gets its rkey.
 * 0 or XFER_ERR_NOMEM (the registration failed: the caller cancels the
 * reservation). */
int xfer_server_rdma_bind(xfer_server_rdma *r, struct xfer_server_hosted *hs,
                          uint64_t id, uint64_t resv_id, uint64_t off,
                          uint32_t len, uint32_t *rkey);
/* Deregister every region hs's shard asked to invalidate and tell the
 * shard (xfer_shard_invalidated): the deregistration is synchronous, so
 * when it returns no write can land there any more. */
void xfer_server_rdma_invalidate(xfer_server_rdma *r,
                                 struct xfer_server_hosted *hs, uint64_t now);

#endif /* XFER_SERVER_RDMA_H */
