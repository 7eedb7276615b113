/*
 * xfer/xfer.h - the engine: the production driver of the transfer core on
 * one libevent loop.  Include this header to use xfer.
 *
 * The engine owns (or borrows) an event_base, one timer for the core's next
 * deadline, the staging pools, and the consumer groups (one transport each).
 * Shard results arrive from transports on the same loop; completions are
 * delivered from the loop, never from inside a call the user just made.
 * Other threads submit through xfer_engine_post_submit()/_post_cancel(),
 * a mailbox that wakes the loop, and run anything else on the loop through
 * xfer_engine_post_call(); the order the loop drains it is the order the
 * trace records.
 *
 * What must stay true (the invariants of docs/design.md): every accepted
 * submit completes exactly once, posted or not, however many are refused
 * at once (I1); a staging pool is unregistered only when none of its
 * writes is in flight (I3); shutdown refuses new submits, ends every
 * transfer, reports every completion, unregisters every staging pool, and
 * only then calls the shutdown callback (I9).
 *
 * A program's life (examples/hello.c):
 *
 *     xfer_engine_new -> xfer_loop_new on xfer_engine_base -> add_group,
 *     register_pool -> submit ... -> event_base_dispatch
 *       ... completions ...
 *       xfer_engine_on_idle callback: xfer_engine_shutdown
 *       shutdown callback: event_base_loopbreak
 *     (dispatch returns) -> xfer_engine_del -> xfer_loop_del
 *
 * Teardown orders (docs/design.md 4, "Who owns the base"): every object
 * of this library created on the engine's base (transports, servers,
 * consumers, metrics, control sockets) may be deleted before or after
 * xfer_engine_del.  A base the engine made (cfg.base NULL) is freed with
 * the last of them, whichever is deleted last; a base the caller made is
 * the caller's to free, after every object on it.
 *
 * The engine keeps events armed on its base for its whole life (the
 * mailbox's pipe, the core's timer, tombstone expiry), so
 * event_base_dispatch() does not return by itself: break the loop from the
 * shutdown callback.
 */
#ifndef XFER_XFER_H
#define XFER_XFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/core.h"
#include "xfer/errors.h"
#include "xfer/fsm.h"
#include "xfer/mem.h"
#include "xfer/trace.h"
#include "xfer/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;
typedef struct xfer_engine xfer_engine;

/* Completion: `res` is borrowed for the duration of the call.  Loop thread.
 * The transfer no longer counts against max_transfers inside the call, so
 * the callback may submit again. */
typedef void (*xfer_complete_cb)(void *ud, const xfer_result *res);
typedef void (*xfer_shutdown_cb)(void *ud);
/* The engine became idle (xfer_engine_on_idle).  Loop thread. */
typedef void (*xfer_idle_cb)(void *ud);
/* A clock in nanoseconds; must not go backwards. */
typedef uint64_t (*xfer_clock_fn)(void *ud);

/*
 * xfer_clock_monotonic - the default xfer_clock_fn of the engine, the loop
 * transport and the control socket: CLOCK_MONOTONIC in nanoseconds.  `ud`
 * is ignored (NULL is fine).  Any thread; never fails.
 */
XFER_API uint64_t xfer_clock_monotonic(void *ud);

/*
 * Configuration; copied at creation.  Start from
 * xfer_engine_config_default() and set what differs.  `version` says which
 * layout the caller was built with (docs/design.md section 4.1):
 * xfer_engine_new() reads only the fields of that version.  The embedded
 * `core` carries its own version (the default sets it), and grows only
 * with a new engine version.  Zero fields take defaults too.
 *
 * core.alloc is the engine's allocator: the engine, its core and its
 * mailbox allocate through it and nothing else (libevent's own
 * allocations excepted).  xfer_engine_post_submit() calls it from the
 * posting thread, so an engine that takes posts from other threads needs
 * a thread-safe allocator (libc's is).
 */
#define XFER_ENGINE_CONFIG_VERSION 3
/* The default shutdown deadline (xfer_engine_config.shutdown_timeout_ns). */
#define XFER_ENGINE_SHUTDOWN_TIMEOUT_NS (10ull * 1000000000ull)
/* The default bounce budget (xfer_engine_config.copy_budget_bytes). */
#define XFER_ENGINE_COPY_BUDGET (256ull << 20)
typedef struct xfer_engine_config {
    uint32_t version;        /* XFER_ENGINE_CONFIG_VERSION */
    struct event_base *base; /* NULL (the default): the engine makes and
                                owns its own, freed at xfer_engine_del or
                                with the last object on it, whichever
                                comes last.  Else a base the caller
                                made is borrowed (it must outlive the
                                engine and every object on it), and
                                another engine's own base is held until
                                xfer_engine_del */
    xfer_core_config core;   /* limits, timeouts, allocator, trace sink
                                (defaults: xfer_core_config_default);
                                core.max_transfers also bounds the engine:
                                a transfer counts from its accepted submit
                                until its callback is called */
    xfer_clock_fn clock;     /* NULL (the default): CLOCK_MONOTONIC */
    void *clock_ud;
    uint32_t max_pools;      /* default 16 */
    uint32_t max_groups;     /* default 16 */
    uint32_t mailbox_cap;    /* default 65536 */
    /* Version 2.  How long xfer_engine_shutdown() may take: when it
     * passes with transfers still live, their rollback is abandoned to
     * the shards' leases (xfer_core_abandon): no cancel is sent or
     * retried any more, each still completes exactly once, once its ops
     * in flight answered, with XFER_ERR_ABANDONED when a shard was left
     * (rollback_failed names them).  0 (the default):
     * XFER_ENGINE_SHUTDOWN_TIMEOUT_NS, 10 s; UINT64_MAX: no deadline. */
    uint64_t shutdown_timeout_ns;
    /* Version 3.  Device staging (docs/gpu.md): the pinned host bounce
     * buffers that WRITEs' device-to-host copies may hold at once, in
     * bytes.  Past it, further WRITEs wait for a copy's buffer to come
     * back (an op larger than the budget still goes, alone).  It bounds
     * the pinned memory one engine takes.  0 (the default):
     * XFER_ENGINE_COPY_BUDGET, 256 MiB. */
    uint64_t copy_budget_bytes;
} xfer_engine_config;

/* Write version 3 and every default above into *cfg (core through
 * xfer_core_config_default).  `cfg` borrowed; NULL is ignored. */
XFER_API void xfer_engine_config_default(xfer_engine_config *cfg);

/* A transfer request.  Copied by submit. */
typedef struct xfer_transfer_desc {
    uint64_t id;        /* != 0 */
    uint32_t group;     /* from xfer_engine_add_group */
    uint32_t pool;      /* from xfer_engine_register_pool */
    uint16_t nslices;   /* must equal the group's shard count */
    const xfer_slice *slices; /* one per shard, inside the pool; borrowed */
    uint64_t timeout_ns; /* relative; 0: the configured default */
    uint64_t user_data;  /* echoed in the result */
} xfer_transfer_desc;

/* Counters, read with xfer_engine_stats_get(); versioned like the config
 * (the macro passes XFER_ENGINE_STATS_VERSION; the embedded core stats
 * grow only with a new engine stats version). */
#define XFER_ENGINE_STATS_VERSION 3
typedef struct xfer_engine_stats {
    xfer_core_stats core;
    uint64_t results_delivered, results_dropped;
    uint64_t ops_started, ops_start_failed, aborts;
    uint32_t pools, groups;
    /* Bytes of the staging slices of accepted transfers whose staging
     * region is not yet released: from the submit until the core's
     * RELEASE_STAGING, when no write of the transfer is in flight any more.
     * At 0 no transfer reads staging memory (I3). */
    uint64_t staging_bytes_in_use;
    uint64_t mailbox_posts;
    uint64_t completions_delivered; /* callbacks called, refusals included */
    uint64_t posts_refused; /* posted submits the loop refused (I1: each
                               still completes, with phase SUBMIT) */
    /* Version 2. */
    uint64_t cancels_refused; /* cancels refused BUSY (the id left without
                                 a tombstone): direct, or posted whether or
                                 not the poster asked for the answer
                                 (xfer_engine_post_cancel_cb) */
    uint64_t abandoned;       /* transfers completed XFER_ERR_ABANDONED */
    /* Version 3 (docs/streaming.md): lease refreshes of open streams'
     * reservations sent to shards, granted, and refused (any answer but
     * a grant; the stream's lease then runs out as it would have). */
    uint64_t refreshes_sent, refreshes_granted, refreshes_refused;
} xfer_engine_stats;

/* Create.  cfg copied (NULL: defaults).  *out untouched on failure.
 * Errors: XFER_ERR_INVALID_ARG (a version of the config or of its core
 * this library does not know, bad config), XFER_ERR_NOMEM, XFER_ERR_IO
 * (libevent). */
XFER_API int xfer_engine_new(const xfer_engine_config *cfg, xfer_engine **out);
/* Free.  Accepts NULL.  Call after shutdown completed, from outside the
 * loop (after event_base_dispatch returned); transfers still live, posts
 * still queued and completions not yet delivered are dropped without a
 * callback (a bug in the caller).  The group transports are detached: free
 * each after this (one the caller already deleted while attached is freed
 * here).  A base the engine made is freed here unless an object created on
 * it is still alive; then with the last such object. */
XFER_API void xfer_engine_del(xfer_engine *e);
/* The loop the engine runs on.  A base the engine made stays valid until
 * the engine and every object created on it are deleted. */
XFER_API struct event_base *xfer_engine_base(const xfer_engine *e);

/* Register caller memory as a staging pool.  `base` is retained until the
 * pool is unregistered.  Errors: XFER_ERR_INVALID_ARG, XFER_ERR_BUSY (cap),
 * XFER_ERR_SHUTDOWN, or what a transport's pool_added returned. */
XFER_API int xfer_engine_register_pool(xfer_engine *e, void *base, size_t len,
                              uint32_t *pool);
/* Unregister a pool.  Errors: XFER_ERR_NOT_FOUND, XFER_ERR_BUSY (a live
 * transfer still uses it). */
XFER_API int xfer_engine_unregister_pool(xfer_engine *e, uint32_t pool);

/*
 * Register staging memory of any kind (xfer/mem.h; docs/gpu.md).  HOST is
 * xfer_engine_register_pool.  A device kind (CUDA, TESTDEV) is never read
 * by the library or a transport: each WRITE or EAGER from it first copies
 * its slice device -> pinned host bounce buffer on a stream the engine
 * owns (the copy step), and goes out of that buffer; the staging region
 * is released (and the pool may go) only when every such copy and every
 * write it fed ended (I3).  A failed copy fails its op with
 * XFER_ERR_COPY, its shard and phase named, and the transfer rolls back
 * as for any failed write.  The transports are not told of a device pool
 * (pool_added is not called for it): they see only host bounce buffers.
 * `base` .. base+len must be memory of that kind (CUDA: one allocation
 * the driver knows on that device; TESTDEV: one xfer_testdev_alloc); it
 * is retained until the pool is unregistered.  Loop thread.
 * Errors: XFER_ERR_INVALID_ARG (NULL, len 0, an unknown kind, memory not
 * of the kind), XFER_ERR_NOT_SUPPORTED (CUDA absent from the build or
 * this machine, or no such device), XFER_ERR_SHUTDOWN, XFER_ERR_BUSY
 * (cap), XFER_ERR_NOMEM, XFER_ERR_IO, XFER_ERR_COPY (the device refused a
 * stream), or what a transport's pool_added returned (HOST).
 */
XFER_API int xfer_engine_register_pool_mem(xfer_engine *e, void *base,
                                           size_t len, xfer_mem mem,
                                           uint32_t *pool);

/*
 * Submit a transfer whose bytes must not be read before `event` completed:
 * the kernel that produced the cache may still run.  `event` is a CUDA
 * event (CUevent / cudaEvent_t) for host and CUDA pools, an
 * xfer_testdev_event for TESTDEV pools; borrowed until the result.  The
 * reserves go out at once (they read no byte); every WRITE or EAGER of the
 * transfer waits until a poll of the event (cuEventQuery on a 100 us loop
 * timer, never blocking the loop) finds it complete.  An event whose query
 * fails fails those ops with XFER_ERR_COPY (the transfer rolls back).
 * Otherwise as xfer_engine_submit (cb, ud, errors, exactly one callback),
 * plus XFER_ERR_INVALID_ARG (NULL event) and XFER_ERR_NOT_SUPPORTED (a
 * CUDA event where the driver is not loaded).  DEVICE_API.md's sketch had
 * no cb and ud; a submit needs them.  Loop thread.
 */
XFER_API int xfer_engine_submit_gated(xfer_engine *e,
                                      const xfer_transfer_desc *d,
                                      void *event, xfer_complete_cb cb,
                                      void *ud);

/* Add a consumer group carried by `tp`; the engine takes the transport and
 * detaches it at xfer_engine_del.  Errors: XFER_ERR_INVALID_ARG (a missing
 * op, an ops table version this library does not know, a shard count
 * outside 1..XFER_MAX_SHARDS), XFER_ERR_BUSY, XFER_ERR_SHUTDOWN,
 * XFER_ERR_NOMEM, or what attach returned. */
XFER_API int xfer_engine_add_group(xfer_engine *e, xfer_transport tp,
                          uint32_t *group);

/*
 * A transfer id nobody without `key` can predict (issue 24; docs/design.md
 * section 5.1, "Who owns an id"): the first 8 bytes of HMAC-SHA256 under
 * key of "xfer-id" and `name` (a request's name, say), little-endian, 0
 * mapped to 1.  A producer and the consumers it serves derive the same id
 * from the same key and name; another producer session of the group (who
 * holds the group secret, not this key) cannot reserve it first, because
 * it cannot name it.  key (16..256 bytes) and name (name_len bytes, at
 * most XFER_ID_NAME_MAX, may be empty) are borrowed until return.  *out
 * written on 0.  Any thread.
 * Errors: XFER_ERR_INVALID_ARG (NULL key or out, a key of a bad length,
 * NULL name with name_len > 0, a name too long), XFER_ERR_INTERNAL (the
 * HMAC failed).
 */
#define XFER_ID_NAME_MAX 1024
XFER_API int xfer_id_keyed(const void *key, size_t key_len, const void *name,
                           size_t name_len, uint64_t *out);

/*
 * Submit a transfer.  `d` and its slices are copied.  On 0, cb is called
 * exactly once, later, from the loop.  On an error cb is never called.
 * Loop thread only.
 * Errors, checked in this order: XFER_ERR_INVALID_ARG (NULL d or cb, id 0,
 * no slices), XFER_ERR_SHUTDOWN (after xfer_engine_shutdown, whatever the
 * desc), XFER_ERR_NO_POOL (no such group or pool), XFER_ERR_INVALID_ARG
 * (slice count or bounds), XFER_ERR_EXISTS (id live), XFER_ERR_CANCELLED
 * (the id was cancelled before it was submitted: a cancel's tombstone),
 * XFER_ERR_REUSED (a transfer of the id ended within the tombstone TTL),
 * XFER_ERR_BUSY (max_transfers, or the tombstone cap), XFER_ERR_NOMEM.
 *
 * What a completion's status says (docs/design.md, "Statuses and their
 * causes"): XFER_ERR_CANCELLED, this engine's own xfer_engine_cancel or
 * post_cancel; XFER_ERR_PEER_CANCELLED, a shard refused an op because
 * the id was cancelled there (a consumer's cancel, or the shard's own),
 * first_failed_shard names it; XFER_ERR_EXPIRED, the reservation's lease
 * expired on that shard; XFER_ERR_TIMEOUT, the transfer's deadline;
 * XFER_ERR_SHUTDOWN, xfer_engine_shutdown; XFER_ERR_ABANDONED, the
 * shutdown deadline cut its rollback short.
 */
XFER_API int xfer_engine_submit(xfer_engine *e, const xfer_transfer_desc *d,
                       xfer_complete_cb cb, void *ud);
/*
 * xfer_engine_submit_crc - submit a transfer whose slices' CRC32Cs the
 * caller already has (computed on the GPU, say, or kept with its cache
 * blocks; docs/integrity.md, "Caller CRCs"): crcs[k] is the CRC32C
 * (Castagnoli, the standard value: "123456789" gives 0xE3069283) of
 * slice k's bytes, d->nslices entries, borrowed until
 * return (copied).  The producer then reads none of its staging for a
 * checksum: each COMMIT (or EAGER) carries crcs[k] as it is to a shard
 * that checks.  The shard checks it as it checks the producer's own: a
 * wrong one fails the transfer XFER_ERR_CORRUPT naming that shard, and
 * nothing of it becomes READY.  A shard without integrity, or a transport
 * that does not take caller CRCs (ops version < 3), ignores them (the
 * transport then computes its own, or none).  Loop thread only.
 * Otherwise as xfer_engine_submit (cb, ud, exactly one callback); errors:
 * XFER_ERR_INVALID_ARG (NULL crcs), xfer_engine_submit's, and
 * XFER_ERR_NOMEM for the copy.
 */
XFER_API int xfer_engine_submit_crc(xfer_engine *e,
                                    const xfer_transfer_desc *d,
                                    const uint32_t *crcs,
                                    xfer_complete_cb cb, void *ud);
/*
 * xfer_engine_submit_gated_crc - xfer_engine_submit_gated with the slices'
 * CRC32Cs given, as xfer_engine_submit_crc gives them: for staging whose
 * bytes a device is still writing at submit time but whose checksums the
 * caller already holds (cache blocks loaded with their CRCs, the copy into
 * staging still on its stream).  The gate holds every WRITE until `event`
 * completes; each COMMIT (or EAGER) then carries crcs[k], and the producer
 * reads no staging for a checksum (a device pool's COMMIT is not copied
 * device to host again).  crcs (d->nslices entries) is copied.  Loop
 * thread only.  Errors: XFER_ERR_INVALID_ARG (NULL event or crcs), and
 * xfer_engine_submit_gated's.
 */
XFER_API int xfer_engine_submit_gated_crc(xfer_engine *e,
                                          const xfer_transfer_desc *d,
                                          void *event, const uint32_t *crcs,
                                          xfer_complete_cb cb, void *ud);
/* Cancel by id; idempotent; an unknown id leaves a tombstone.  Loop thread.
 * Errors: XFER_ERR_INVALID_ARG, XFER_ERR_BUSY (tombstone cap: the id is
 * left without a tombstone, so a later submit of it may be accepted). */
XFER_API int xfer_engine_cancel(xfer_engine *e, uint64_t id);

/*
 * Thread-safe mailbox versions; any thread.  `d` and its slices are copied
 * before the call returns.  On 0 the request is queued; a posted submit
 * then completes exactly once through cb, from the loop: as a transfer if
 * the loop's xfer_engine_submit accepted it, or else at once with that
 * refusal's status (the codes of xfer_engine_submit), phase
 * XFER_PHASE_SUBMIT, attempt 0 and no shard named.  Any number of
 * refusals may be pending at once: each post carries its own completion.
 * Errors (then cb is never called): XFER_ERR_BUSY (mailbox_cap posts
 * queued), XFER_ERR_INVALID_ARG (NULL d or cb, id 0, more than
 * XFER_MAX_SHARDS slices, NULL slices), XFER_ERR_NOMEM.
 */
XFER_API int xfer_engine_post_submit(xfer_engine *e, const xfer_transfer_desc *d,
                            xfer_complete_cb cb, void *ud);
/* The mailbox version of xfer_engine_submit_crc; any thread.  crcs
 * (d->nslices entries) is copied with d before the call returns; the loop
 * then calls xfer_engine_submit_crc, and completes a refusal through cb
 * as xfer_engine_post_submit does.  Errors (then cb is never called):
 * xfer_engine_post_submit's, and XFER_ERR_INVALID_ARG for NULL crcs. */
XFER_API int xfer_engine_post_submit_crc(xfer_engine *e,
                                         const xfer_transfer_desc *d,
                                         const uint32_t *crcs,
                                         xfer_complete_cb cb, void *ud);
/* xfer_engine_post_cancel: 0 says only that the cancel was queued; the
 * loop's own answer (xfer_engine_cancel's) is not reported to the caller,
 * only counted (stats cancels_refused).  A caller that must know whether
 * the id was cancelled (BUSY leaves it without a tombstone, I7) uses
 * xfer_engine_post_cancel_cb. */
XFER_API int xfer_engine_post_cancel(xfer_engine *e, uint64_t id);

/*
 * The loop's answer to a posted cancel: status is what xfer_engine_cancel
 * returned on the loop (0, or XFER_ERR_BUSY: the tombstone table was
 * full, the id has no tombstone and a later submit of it may be
 * accepted).  Called from the loop thread; `id` is the cancelled id.
 */
typedef void (*xfer_cancel_cb)(void *ud, uint64_t id, int status);

/*
 * xfer_engine_post_cancel_cb - xfer_engine_post_cancel whose result
 * reaches the caller: on 0, cb(ud, id, status) is called exactly once,
 * from the loop, when the loop ran the cancel (in mailbox order), unless
 * the engine is deleted first (the rule of xfer_engine_post_call).  `ud`
 * is retained until then.  Any thread.  Errors (then cb is never called):
 * XFER_ERR_INVALID_ARG (NULL e or cb, id 0), XFER_ERR_BUSY (mailbox_cap
 * posts queued).
 */
XFER_API int xfer_engine_post_cancel_cb(xfer_engine *e, uint64_t id,
                                        xfer_cancel_cb cb, void *ud);

/*
 * Run fn(ud) on the loop; any thread.  The call takes its turn in the
 * mailbox, in order with posted submits and cancels, and runs from the
 * loop as a mailbox request does, so fn may call every loop-thread
 * function of the engine (register or unregister a pool, shutdown, stats,
 * xfer_engine_idle) and of its transports: it is how a program whose loop
 * runs on a thread of its own does everything but submit and cancel.
 * On 0, fn is called exactly once, from the loop, unless the engine is
 * deleted first (calls still queued at xfer_engine_del are dropped, fn not
 * called; the same rule as for posted submits).  `ud` is retained until fn
 * runs.  A queued call keeps the engine from being idle until it ran.
 * Errors (then fn is never called): XFER_ERR_INVALID_ARG (NULL e or fn),
 * XFER_ERR_BUSY (mailbox_cap posts queued).
 */
typedef void (*xfer_call_fn)(void *ud);
XFER_API int xfer_engine_post_call(xfer_engine *e, xfer_call_fn fn, void *ud);

/*
 * Shut down: refuse new submits, end every transfer (completions reported),
 * unregister every staging pool, then call cb from the loop.  Loop thread.
 * Bounded by cfg.shutdown_timeout_ns (10 s by default): past it, what is
 * still rolling back is abandoned to the shards' leases and completes
 * XFER_ERR_ABANDONED (see the config).  The bound assumes the transports
 * confirm every abort, as xfer/transport.h requires.
 * Errors: XFER_ERR_STATE (already shutting down).
 */
XFER_API int xfer_engine_shutdown(xfer_engine *e, xfer_shutdown_cb cb, void *ud);

/*
 * The idle signal.  The engine is idle when no transfer is live, no
 * completion or refusal waits for delivery, no shutdown callback is
 * pending, and the mailbox is empty.  Transports may still have timers of
 * their own (leases, tombstones): idle is about the engine's work.
 *
 * xfer_engine_idle - true when idle now.  Loop thread.
 *
 * xfer_engine_on_idle - call cb(ud) once, from the loop, as soon as the
 * engine is idle after this call (on the next loop iteration if it is idle
 * already), after every completion delivered so far.  One-shot: register
 * again to be told again.  A new registration replaces one not yet called;
 * cb NULL removes it.  Loop thread.  Errors: XFER_ERR_INVALID_ARG.
 */
XFER_API bool xfer_engine_idle(const xfer_engine *e);
XFER_API int xfer_engine_on_idle(xfer_engine *e, xfer_idle_cb cb, void *ud);

/* Counters: the fields of stats version `version` are copied into *st
 * (borrowed), nothing past them is written.  Call it through the macro.
 * Loop thread.  Errors: XFER_ERR_INVALID_ARG (NULL argument, unknown
 * version; *st untouched). */
XFER_API int xfer_engine_stats_get_versioned(const xfer_engine *e,
                                             uint32_t version,
                                             xfer_engine_stats *st);
#define xfer_engine_stats_get(e, st)                                        \
    xfer_engine_stats_get_versioned((e), XFER_ENGINE_STATS_VERSION, (st))
/* The pure core (read-only use: views, stats). */
XFER_API const xfer_core *xfer_engine_core(const xfer_engine *e);
/* The engine's current time (its clock).  With the default clock, every
 * call within one batch of inputs the loop hands the engine (a transport's
 * results, the delivery of completions) returns the reading taken when the
 * batch began; an injected clock is read on every call. */
XFER_API uint64_t xfer_engine_now(const xfer_engine *e);

#ifdef __cplusplus
}
#endif
#endif /* XFER_XFER_H */
