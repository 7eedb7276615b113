/*
 * xfer/stream.h - streamed and vectored transfers on the engine
 * (docs/streaming.md; the machine's side is docs/design.md 2.5).
 *
 * A stream is a transfer opened before its bytes exist: the reserves go
 * out to every shard at once, and the producer then adds parts as its
 * output appears (a layer of a prefill, say), each part a list of staging
 * ranges, each range written to its own offset of one shard's reservation
 * (paged blocks gather into one reservation).  Sealing says no part
 * follows; the commits go out once every part's writes succeeded, and the
 * transfer's one completion (xfer_complete_cb) comes after the commits or
 * the failure, as for xfer_engine_submit.  The consumer sees a stream as
 * it sees a one-shot transfer: ready on every shard or not at all.
 *
 * Each part's staging comes back on its own: its xfer_part_cb is called
 * once, from the loop, when none of the part's writes is in flight and
 * none will be sent (I3 per part), before the transfer's completion.  From
 * then on the producer may reuse the part's buffers, whatever the rest of
 * the stream does.
 *
 * The rule for callbacks is the library's: a call that returns an error
 * never calls its callback, and the caller keeps its staging at once
 * (nothing of it was taken); a call that returns 0 calls its callback
 * exactly once, later, from the loop.  Parts added after the transfer
 * failed or was cancelled are refused that way, with the transfer's status
 * (XFER_ERR_CANCELLED, XFER_ERR_TIMEOUT, ...).  A posted call (any thread)
 * that the loop refuses calls its callback with the refusal (a part's
 * xfer_part_cb with part 0, an open's completion with phase
 * XFER_PHASE_SUBMIT), since the post itself returned 0.
 *
 * Deadlines, xfer_engine_cancel, the loss of a shard and
 * xfer_engine_shutdown end a stream as they end a one-shot transfer: a
 * stream waiting for its next part has no write in flight and starts its
 * rollback at once; every part not yet released is released with the
 * transfer's status before the completion.
 *
 * Bounds: XFER_STREAM_MAX_PARTS parts of a stream not yet released,
 * XFER_STREAM_MAX_RANGES ranges per part, and per shard at most
 * XFER_SHARD_MAX_FRAGMENTS disjoint written ranges past the written prefix
 * at any point of the order the runs are written (each shard's runs go in
 * part order, each part's sorted by reservation offset): a part that would
 * pass it is refused XFER_ERR_BUSY.  Write a shard's reservation front to
 * back, or fill its holes before opening more than 8.
 *
 * The reservation lease: a stream must be sealed and committed within the
 * consumer group's lease (10 s by default, xfer_shard_config.lease_ns);
 * a stream that waits longer for its parts loses its reservations
 * (XFER_ERR_EXPIRED).  No lease refresh is sent yet.
 */
#ifndef XFER_STREAM_H
#define XFER_STREAM_H

#include <stdint.h>

#include "xfer/core.h"
#include "xfer/xfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A stream to open.  Copied by the call (lens too). */
typedef struct xfer_stream_desc {
    uint64_t id;          /* != 0 */
    uint32_t group;       /* from xfer_engine_add_group */
    uint16_t nshards;     /* the group's shard count */
    const uint32_t *lens; /* nshards entries, each > 0: the bytes reserved
                             on each shard; borrowed until return */
    uint64_t timeout_ns;  /* relative, for the whole stream; 0: the
                             configured default */
    uint64_t user_data;   /* echoed in the result */
} xfer_stream_desc;

/*
 * xfer_engine_stream_open - open a stream: reserve on every shard now.
 * On 0, cb is called exactly once, from the loop, with the transfer's
 * result.  Loop thread.  Errors (then cb is never called), in this order:
 * XFER_ERR_INVALID_ARG (NULL e, d, cb or lens, id 0, a zero len),
 * XFER_ERR_SHUTDOWN, XFER_ERR_NO_POOL (no such group),
 * XFER_ERR_INVALID_ARG (nshards is not the group's), and the core's:
 * XFER_ERR_EXISTS, XFER_ERR_CANCELLED, XFER_ERR_REUSED, XFER_ERR_BUSY,
 * XFER_ERR_NOMEM.
 */
XFER_API int xfer_engine_stream_open(xfer_engine *e,
                                     const xfer_stream_desc *d,
                                     xfer_complete_cb cb, void *ud);

/* A part's staging is the caller's again: status 0 when every write of
 * it succeeded, else the transfer's failure (or, for a posted part the
 * loop refused, the refusal, with part 0).  Loop thread. */
typedef void (*xfer_part_cb)(void *ud, uint64_t id, uint32_t part,
                             int status);

/* A part to add.  Copied by the call (ranges too).  Each range names its
 * own staging pool (xfer_engine_register_pool), shard and reservation
 * offset (xfer_range, xfer/core.h). */
typedef struct xfer_part_desc {
    uint64_t id;
    const xfer_range *ranges; /* nranges entries; borrowed until return */
    uint32_t nranges;         /* 1..XFER_STREAM_MAX_RANGES */
    xfer_part_cb cb;          /* NULL: no callback (the staging is still
                                 released at the same point; see stats) */
    void *ud;
} xfer_part_desc;

/*
 * xfer_engine_stream_part - add a part to open stream d->id, before or
 * after its reserves answered.  On 0, *part (may be NULL) gets its number
 * (1, 2, ... in the order added) and d->cb is called exactly once, from
 * the loop, when its staging is released.  Loop thread.
 * Errors (then cb is never called and the staging is the caller's):
 * XFER_ERR_INVALID_ARG (NULL e or d, id 0, no ranges or too many, NULL
 * ranges, a zero len, a range outside its pool, a shard outside the group,
 * a range past the shard's reservation), XFER_ERR_NO_POOL (a range's pool
 * is not registered), XFER_ERR_NOT_FOUND (no live transfer of the id),
 * XFER_ERR_STATE (not a stream, sealed, or ended), the transfer's status
 * when it failed or was stopped, XFER_ERR_BUSY (see the bounds above),
 * XFER_ERR_NOMEM.
 */
XFER_API int xfer_engine_stream_part(xfer_engine *e, const xfer_part_desc *d,
                                     uint32_t *part);

/*
 * xfer_engine_stream_seal - no part follows stream `id`; the commits go
 * out once every part's writes succeeded.  The transfer's completion
 * follows as always.  Loop thread.  Errors: XFER_ERR_INVALID_ARG,
 * XFER_ERR_NOT_FOUND, XFER_ERR_STATE (not a stream, sealed already, or
 * ended), the transfer's status when it failed or was stopped.
 */
XFER_API int xfer_engine_stream_seal(xfer_engine *e, uint64_t id);

/*
 * xfer_engine_stream_seal_crc - seal stream `id` with the CRC32C the
 * caller already has of each shard's whole reservation (crcs[k]: the
 * bytes of shard k's region, offset 0 to its len, as the parts wrote
 * them; ncrcs must be the stream's shard count).  crcs is borrowed until
 * return (copied).  Each COMMIT carries crcs[k] instead of the CRC the
 * transport joined from the runs it sent (docs/integrity.md); a wrong one
 * fails the transfer XFER_ERR_CORRUPT naming the shard at the shard's
 * check.  The runs already sent were still checksummed as they went (the
 * transport cannot know at a part that a CRC will come at the seal).
 * Loop thread.  Errors: XFER_ERR_INVALID_ARG (NULL e or crcs, id 0,
 * ncrcs not the stream's shard count), XFER_ERR_NOMEM, and
 * xfer_engine_stream_seal's.
 */
XFER_API int xfer_engine_stream_seal_crc(xfer_engine *e, uint64_t id,
                                         const uint32_t *crcs,
                                         uint16_t ncrcs);

/*
 * The mailbox versions; any thread.  The call is copied before it
 * returns and runs on the loop in mailbox order with every other post
 * (so a part posted after its open always finds it).  On 0:
 *  - post_stream_open: cb is called exactly once, from the loop: the
 *    transfer's result, or at once the loop's refusal (phase
 *    XFER_PHASE_SUBMIT, no shard named);
 *  - post_stream_part: d->cb (when not NULL) is called exactly once, from
 *    the loop: at the part's release, or with the loop's refusal and part
 *    0, its staging then the caller's again;
 *  - post_stream_seal: cb (may be NULL) gets the loop's answer, the
 *    status xfer_engine_stream_seal returned there.
 * Posts still queued at xfer_engine_del are dropped without a callback.
 * Errors (then no callback): XFER_ERR_INVALID_ARG (NULL e, d or a needed
 * cb, id 0, more than XFER_MAX_SHARDS lens or XFER_STREAM_MAX_RANGES
 * ranges), XFER_ERR_BUSY (mailbox_cap posts queued), XFER_ERR_NOMEM.
 */
XFER_API int xfer_engine_post_stream_open(xfer_engine *e,
                                          const xfer_stream_desc *d,
                                          xfer_complete_cb cb, void *ud);
XFER_API int xfer_engine_post_stream_part(xfer_engine *e,
                                          const xfer_part_desc *d);
XFER_API int xfer_engine_post_stream_seal(xfer_engine *e, uint64_t id,
                                          xfer_cancel_cb cb, void *ud);
/* The mailbox version of xfer_engine_stream_seal_crc; any thread.  crcs
 * (ncrcs entries) is copied before the call returns; cb (may be NULL)
 * gets the loop's answer, the status xfer_engine_stream_seal_crc
 * returned there.  Errors (then no callback): XFER_ERR_INVALID_ARG (NULL
 * e or crcs, id 0, ncrcs 0 or above XFER_MAX_SHARDS), XFER_ERR_BUSY,
 * XFER_ERR_NOMEM. */
XFER_API int xfer_engine_post_stream_seal_crc(xfer_engine *e, uint64_t id,
                                              const uint32_t *crcs,
                                              uint16_t ncrcs,
                                              xfer_cancel_cb cb, void *ud);

#ifdef __cplusplus
}
#endif
#endif /* XFER_STREAM_H */
