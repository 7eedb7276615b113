/*
 * xfer/transport.h - the one ops table every transport implements (loop,
 * tcp, rdma), in the manner of libevent's bufferevent flavours.
 *
 * A transport carries the ops of one consumer group (S shards) for one
 * engine.  The engine calls `start` for each reserve/write/commit/cancel the
 * transfer core asks for and `abort` for each abort; the transport answers
 * every started op exactly once, later, on the engine's loop thread, through
 * xfer_engine_deliver().  It never answers from inside `start` or `abort`.
 *
 * Contract on writes (I3, docs/design.md section 3): a WRITE result (ok or
 * failed or aborted) is delivered only when the transport no longer reads
 * the staging bytes: the DMA completion was polled, or libevent dropped its
 * last reference.  A transport may answer an abort with the op's real
 * result; the core's naming rule (xfer_result in core.h) holds either way.
 */
#ifndef XFER_TRANSPORT_H
#define XFER_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/core.h"
#include "xfer/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

struct xfer_engine;

/*
 * The ops table, versioned like the configs (docs/design.md section 4.1):
 * `version` says which layout the transport was built with, and
 * xfer_engine_add_group() refuses a version it does not know.  A later
 * version only appends ops.
 */
#define XFER_TRANSPORT_OPS_VERSION 3
typedef struct xfer_transport_ops {
    uint32_t version; /* XFER_TRANSPORT_OPS_VERSION */
    const char *name;
    /* Number of shards in the group this transport carries. */
    uint16_t (*nshards)(void *self);
    /* The engine adopts the transport; results go to xfer_engine_deliver(e,
     * ...).  Returns 0 or an error. */
    int (*attach)(void *self, struct xfer_engine *e, uint32_t group);
    /* Start the op of a RESERVE/WRITE/COMMIT/CANCEL/EAGER action.  `a`
     * borrowed; `src` (WRITE, EAGER and COMMIT) points at the staging
     * bytes (a COMMIT's: its slice, a->len bytes, for a transport that
     * checksums them: docs/integrity.md) and is retained until the op's
     * result is delivered.  Returns 0 (a result will follow) or an
     * error (no result will follow; the engine reports the op failed). */
    int (*start)(void *self, const xfer_action *a, const void *src);
    /* Abort the op named by an ABORT action.  The op's result still comes,
     * once the transport has let go of it (XFER_ERR_ABORTED, or its real
     * result if it finished first). */
    void (*abort)(void *self, const xfer_action *a);
    /* A staging pool was registered / is being unregistered (no write of it
     * is in flight).  pool_added may fail (e.g. memory registration). */
    int (*pool_added)(void *self, uint32_t pool, void *base, size_t len);
    void (*pool_removed)(void *self, uint32_t pool);
    /* The engine lets go of the transport (no op outstanding). */
    void (*detach)(void *self);
    /* Version 2.  True when every shard of the group can apply an EAGER op
     * (reserve + data + commit in one, docs/design.md 2.1) now; asked at
     * every submit, so it may change (a reconnect).  NULL, or a version 1
     * table: never.  A transport that answers true and then meets a shard
     * that cannot fails that op (XFER_ERR_NOT_SUPPORTED): the transfer
     * rolls back as for any failed eager op. */
    bool (*eager_ok)(void *self);
    /* Version 3 (docs/streaming.md, lease refresh).  Ask shard `shard` to
     * extend the lease of reservation (id, attempt, resv_id) by at most
     * want_ns from now (0: one whole lease of the shard's).  Returns 0
     * when the request went out: its answer comes through
     * xfer_engine_refreshed(), exactly once, possibly from inside this
     * call (a transport with its shards in process); an error when
     * nothing went out and no answer will come: XFER_ERR_NOT_SUPPORTED
     * (the shard does not grant refreshes: its HELLO_ACK had no
     * XFER_WIRE_HELLO_REFRESH), XFER_ERR_CONN_LOST (not connected now),
     * XFER_ERR_NOMEM.  NULL, or a version 1 or 2 table: never refreshed,
     * so a stream's reservations live one lease.  Not an op of the core:
     * no result, no abort. */
    int (*refresh)(void *self, uint16_t shard, uint64_t id,
                   uint32_t attempt, uint64_t resv_id, uint64_t want_ns);
    /* Version 3.  Start a COMMIT or EAGER whose slice's CRC32C the caller
     * gave (xfer_engine_submit_crc, xfer_engine_stream_seal_crc,
     * docs/integrity.md): as start, but a transport that sends CRCs sends
     * `crc` and reads nothing to compute one; src is NULL for a COMMIT
     * and the bytes to send for an EAGER.  The rules of start hold (0: a
     * result follows; an error: none).  NULL, or an older table: the
     * engine calls start and the transport computes its own CRC (a wrong
     * caller CRC then goes unnoticed). */
    int (*start_crc)(void *self, const xfer_action *a, const void *src,
                     uint32_t crc);
} xfer_transport_ops;

typedef struct xfer_transport {
    const xfer_transport_ops *ops;
    void *self;
} xfer_transport;

/*
 * xfer_engine_deliver - a transport answers one op.  Loop thread only; `r`
 * borrowed.  Results for ops the engine does not know are counted and
 * dropped.
 */
XFER_API void xfer_engine_deliver(struct xfer_engine *e, const xfer_shard_result *r);

/*
 * xfer_engine_refreshed - a transport answers one refresh it sent
 * (xfer_transport_ops.refresh): status 0 with granted_ns, the time the
 * reservation's lease now runs from the shard's now, or the shard's
 * refusal (XFER_ERR_PERM, _STALE, _STATE, _BOUNDS at its hold cap,
 * _EXPIRED, _CANCELLED, _NOT_FOUND) or XFER_ERR_CONN_LOST.  Loop thread
 * only.  An answer for a transfer the engine no longer streams is
 * ignored.
 */
XFER_API void xfer_engine_refreshed(struct xfer_engine *e, uint64_t id,
                                    uint16_t shard, uint32_t attempt,
                                    int status, uint64_t granted_ns);

#ifdef __cplusplus
}
#endif
#endif /* XFER_TRANSPORT_H */
