/*
 * xfer/core.h - the sans-I/O transfer core (producer side).
 *
 * xfer_core holds every transfer machine of one producer, its tombstones and
 * its deadlines.  It does no I/O and reads no clock: every entry point takes
 * the current time and one event, updates state, and appends actions (send
 * reserve/write/commit/cancel to shard k, abort an op, release staging,
 * complete) to its action list, which the driver drains with
 * xfer_core_actions() and xfer_core_actions_clear().  xfer_core_next_deadline()
 * says when the driver must call xfer_core_on_timer().
 *
 * Memory is bounded: transfers and tombstones have caps fixed at creation,
 * and every live transfer holds a tombstone slot from its submit on, so the
 * transition to TOMBSTONED never needs memory and never evicts a tombstone
 * younger than its TTL.  The action list is sized at creation for the worst
 * single call, so appending an action never allocates; the driver must
 * clear the list after every call (an entry point that finds too little
 * room returns XFER_ERR_BUSY and changes nothing; on_timer then does less,
 * shutdown nothing).  The only allocation
 * after creation is the transfer record at submit; when it fails, submit
 * returns XFER_ERR_NOMEM and nothing else happens.
 *
 * One thread drives a core.  Time must not go backwards; a smaller `now` is
 * treated as the largest seen so far.
 */
#ifndef XFER_CORE_H
#define XFER_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/errors.h"
#include "xfer/fsm.h"
#include "xfer/shard_op.h"
#include "xfer/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xfer_core xfer_core;

/* X(NAME, value): the phases reported in a completion (the phase a
 * transfer failed in).  Never renumbered. */
#define XFER_PHASES(X)                                                        \
    X(NONE, 0)       /* success (status 0) */                                \
    X(RESERVING, 1)                                                           \
    X(WRITING, 2)                                                             \
    X(COMPLETING, 3) /* the consumer may hold the data */                    \
    X(CANCELLING, 4)                                                          \
    X(SUBMIT, 5)     /* refused before it started: a posted submit the       \
                        engine's loop refused (xfer.h); no shard was ever    \
                        sent anything, no shard is named */

typedef enum xfer_phase {
#define XFER_PHASE_ENUM_(name, value) XFER_PHASE_##name = (value),
    XFER_PHASES(XFER_PHASE_ENUM_)
#undef XFER_PHASE_ENUM_
    XFER_PHASE_COUNT_
} xfer_phase;

/* The phase's name ("RESERVING"), or "?" out of range.  Never NULL; any
 * thread. */
XFER_API const char *xfer_phase_name(unsigned phase);

/*
 * The result of one transfer, delivered exactly once per accepted submit.
 *
 * Which shards a failed result names (failed_shards, first_failed_shard):
 *  - a shard whose reserve, write or commit failed is named, in any phase
 *    and even after a stop;
 *  - a deadline names every shard whose op of the phase it stopped had not
 *    answered when it fired, whatever the transport answers afterwards
 *    (XFER_ERR_ABORTED, the op's real success, or a failure): those shards
 *    held the transfer up;
 *  - a user cancel or shutdown names none of the shards it aborted;
 *  - first_failed_shard is the shard whose failure set `status`; when a
 *    stop set it, the lowest-numbered shard named.  It is XFER_SHARD_NONE
 *    exactly when failed_shards is 0, and always on success;
 *  - a transfer whose every commit was acked succeeds, even after a
 *    deadline or a stop in COMPLETING, and names no shard.
 * Cancels name no shard here: a cancel that never succeeded is in
 * rollback_failed.
 */
typedef struct xfer_result {
    uint64_t id;
    uint32_t attempt;
    int32_t status;         /* 0, or the xfer_err that ended the transfer */
    uint8_t phase;          /* xfer_phase the failure happened in */
    bool consumer_may_hold; /* a commit may have been applied (COMPLETING) */
    uint16_t first_failed_shard; /* see above; XFER_SHARD_NONE: none */
    uint64_t failed_shards;      /* bit k: shard k failed or held it up */
    uint64_t rollback_failed;    /* bit k: shard k's cancel never succeeded */
    uint64_t user_data;          /* echoed from the submit */
} xfer_result;

/* X(NAME, value): kinds of actions the core asks its driver to perform.
 * Never renumbered.  The first four have the values of the xfer_op_kind
 * they send. */
#define XFER_ACTION_KINDS(X)                                                  \
    X(RESERVE, 0)         /* reserve `len` bytes on shard */                 \
    X(WRITE, 1)           /* write staging[off, len) to remote region */     \
    X(COMMIT, 2)          /* mark the data ready on shard */                 \
    X(CANCEL, 3)          /* cancel (id, attempt[, resv_id]) on shard */     \
    X(ABORT, 4)           /* abort the op `op` in flight on shard */         \
    X(RELEASE_STAGING, 5) /* no write of this transfer in flight; the        \
                             COMPLETE of the same transfer follows in the    \
                             same action list */                             \
    X(COMPLETE, 6)        /* report `result` to the user */                  \
    X(SHUTDOWN_DONE, 7)   /* shutdown requested and no transfer left */  \
    X(EAGER, 8)           /* reserve `len` bytes, copy staging[off, len)     \
                             into them and commit, all in one op on shard    \
                             (op XFER_OP_EAGER; the eager path) */          \
    X(RELEASE_PART, 9)    /* a stream's part `part` has no write in flight   \
                             and none will be sent: its staging goes back    \
                             to the user; result.status says how its writes  \
                             ended, result.user_data is the transfer's */

typedef enum xfer_action_kind {
#define XFER_ACT_ENUM_(name, value) XFER_ACT_##name = (value),
    XFER_ACTION_KINDS(XFER_ACT_ENUM_)
#undef XFER_ACT_ENUM_
    XFER_ACT_COUNT_
} xfer_action_kind;

/* The action kind's name ("RELEASE_STAGING"), or "?" out of range.  Never
 * NULL; any thread. */
XFER_API const char *xfer_action_name(unsigned kind);

/* The op (xfer_op_kind) an action of kind `kind` starts on a shard:
 * RESERVE..CANCEL have its value, EAGER is XFER_OP_EAGER; XFER_OP_COUNT_
 * for a kind that starts none.  Any thread. */
static inline unsigned xfer_action_op(unsigned kind)
{
    if (kind <= XFER_ACT_CANCEL)
        return kind;
    return kind == XFER_ACT_EAGER ? (unsigned)XFER_OP_EAGER
                                  : (unsigned)XFER_OP_COUNT_;
}

/*
 * One action.  Fields not used by a kind are 0.  Pointers: none, so an action
 * can be copied, queued and compared bit for bit.
 */
typedef struct xfer_action {
    uint8_t kind;   /* xfer_action_kind */
    uint8_t op;     /* ABORT: xfer_op_kind to abort */
    uint16_t shard; /* shard index within the group */
    uint32_t attempt;
    uint64_t id;
    uint32_t group;
    uint32_t len;         /* RESERVE/WRITE/EAGER: bytes */
    uint64_t resv_id;     /* WRITE/COMMIT/CANCEL: XFER_RESV_NONE if unknown */
    uint64_t remote_addr; /* WRITE: from the reserve reply */
    uint64_t staging_off; /* WRITE/EAGER/COMMIT: offset in the staging
                             pool (a COMMIT's: for its checksum) */
    uint32_t rkey;        /* WRITE: from the reserve reply (rdma) */
    uint32_t pool;        /* WRITE/EAGER/RELEASE_STAGING: staging pool */
    xfer_result result;   /* COMPLETE; RELEASE_PART: status, user_data */
    uint32_t part;        /* WRITE of a stream, RELEASE_PART: the part's
                             number (xfer_core_part); 0 otherwise */
    uint32_t resv_off;    /* WRITE: where in the reservation the bytes go
                             (a stream's run; 0 for a one-shot write).
                             remote_addr already includes it */
} xfer_action;

/* Per-shard part of a submit: the staging slice for that shard. */
typedef struct xfer_slice {
    uint64_t off; /* offset in the staging pool */
    uint32_t len; /* bytes; also the size reserved on the shard */
} xfer_slice;

/* A submit, copied by the core. */
typedef struct xfer_submit_args {
    uint64_t id;       /* caller's transfer id, any value but 0 */
    uint32_t group;    /* consumer group, echoed in actions */
    uint16_t nshards;  /* 1..XFER_MAX_SHARDS */
    uint32_t pool;     /* staging pool handle, echoed in actions */
    const xfer_slice *slices; /* nshards entries; borrowed until return */
    uint64_t deadline_ns; /* absolute; 0: now + config default */
    uint64_t user_data;   /* echoed in the result */
    bool eager_ok;        /* the group allows the eager path (every shard
                             said so, none is one-sided): with
                             eager_max_bytes set and every slice at most
                             that long, the transfer sends one EAGER op per
                             shard instead of reserve, write and commit.
                             false (zeroed args): never eager */
} xfer_submit_args;

/*
 * Configuration; copied at creation.  Start from xfer_core_config_default()
 * and set what differs.  `version` says which layout the caller was built
 * with (docs/design.md section 4.1): xfer_core_new() reads only the fields
 * of that version and gives the rest their defaults.  Zero fields take
 * defaults too.
 */
#define XFER_CORE_CONFIG_VERSION 1
typedef struct xfer_core_config {
    uint32_t version;         /* XFER_CORE_CONFIG_VERSION */
    uint32_t max_transfers;   /* live transfers; default 65536 */
    uint32_t max_tombstones;  /* tombstones incl. slots held by live ones;
                                 0 (the default): 4 * max_transfers */
    uint64_t tombstone_ttl_ns;    /* >= consumer_lease_ns + net_margin_ns
                                     (checked); default 60 s */
    uint64_t consumer_lease_ns;   /* the longest lease TTL of the consumer
                                     groups this core sends to; 0 (the
                                     default): 10 s, the shard's default */
    uint64_t net_margin_ns;       /* the longest a message may stay in
                                     flight; 0 (the default): 20 s, the
                                     shard's default tombstone TTL, which
                                     must outlive it (docs/design.md 2.2) */
    uint64_t default_deadline_ns; /* relative; default 30 s */
    uint64_t cancel_op_timeout_ns; /* abort a cancel not answered; 5 s */
    uint64_t cancel_backoff_ns;   /* first retry delay, doubled each round
                                     up to the larger of itself and
                                     XFER_CORE_CANCEL_BACKOFF_CAP_NS;
                                     10 ms */
    uint32_t cancel_max_attempts; /* per shard, incl. the first; 5;
                                     at most 249 */
    uint32_t attempt_base;        /* first attempt number - 1; default 0 */
    uint16_t max_shards;          /* largest group; default XFER_MAX_SHARDS */
    xfer_allocator alloc;         /* every allocation of the core; zeroed
                                     (the default): libc */
    xfer_trace_sink trace;        /* zeroed (the default): no trace */
    uint32_t eager_max_bytes;     /* the eager path: a submit whose group
                                     allows it (xfer_submit_args.eager_ok)
                                     and whose every slice is at most this
                                     long sends one EAGER op per shard
                                     (docs/design.md 2.1); 0 (the default):
                                     off, every transfer takes 3 rounds */
} xfer_core_config;

/* The cap on the doubling of the cancel retry delay (1 s); a
 * cancel_backoff_ns above it is used as it is, never doubled. */
#define XFER_CORE_CANCEL_BACKOFF_CAP_NS 1000000000ull

/* Write version 1 and every default above into *cfg (a derived default,
 * max_tombstones, as 0).  `cfg` borrowed; NULL is ignored. */
XFER_API void xfer_core_config_default(xfer_core_config *cfg);

/*
 * Counters, read with xfer_core_stats_get().  Versioned like the config:
 * the macro passes the XFER_CORE_STATS_VERSION this header has, and the
 * library writes only the fields of that version.  The per-cell coverage
 * is not here: xfer_core_cell_hits().
 */
#define XFER_CORE_STATS_VERSION 1
typedef struct xfer_core_stats {
    uint64_t submitted, completed, succeeded, failed, cancelled;
    uint64_t late_submits, late_replies, unknown_replies;
    uint64_t tombstones_expired, tombstone_busy;
    uint64_t cancel_retries, cancel_gave_up;
    uint64_t illegal;
    uint32_t live, tombstones;
} xfer_core_stats;

/*
 * xfer_core_new - create a core.  `cfg` is copied; NULL means all defaults.
 * On success writes *out and returns 0; on failure *out is untouched.
 * Errors: XFER_ERR_INVALID_ARG (out NULL, a version this library does not
 * know, bad config: among others a tombstone TTL shorter than
 * consumer_lease_ns + net_margin_ns, which would let a late submit recreate
 * a transfer whose consumer state may still live), XFER_ERR_NOMEM.
 */
XFER_API int xfer_core_new(const xfer_core_config *cfg, xfer_core **out);

/* xfer_core_del - free a core and every record.  Accepts NULL.  Emits no
 * completions: call xfer_core_shutdown() and drain first. */
XFER_API void xfer_core_del(xfer_core *core);

/*
 * xfer_core_submit - start a transfer.  On 0 the transfer is accepted and
 * exactly one COMPLETE action will follow, in this call or a later one.  On
 * an error nothing is recorded and no COMPLETE ever follows.
 * Errors: XFER_ERR_INVALID_ARG, XFER_ERR_CANCELLED (id tombstoned: counted
 * as a late submit), XFER_ERR_EXISTS (id live), XFER_ERR_BUSY (transfer or
 * tombstone cap, or the action list was not cleared), XFER_ERR_NOMEM,
 * XFER_ERR_SHUTDOWN.
 */
XFER_API int xfer_core_submit(xfer_core *core, uint64_t now_ns,
                     const xfer_submit_args *args);

/*
 * Streams (docs/streaming.md, docs/design.md 2.5): a transfer opened with
 * its per-shard reservation sizes and written part by part.
 *
 * xfer_core_open - like xfer_core_submit, but no staging yet: `lens`
 * (nshards entries, borrowed until return) are the bytes reserved on each
 * shard.  The reserves go out at once; the transfer waits in RESERVING,
 * then in WRITING, for parts and the seal.  Never eager.  Exactly one
 * COMPLETE follows a 0, as for a submit.  Errors: those of
 * xfer_core_submit (a zero len or NULL lens is XFER_ERR_INVALID_ARG), and
 * XFER_ERR_NOMEM for the stream's own record.
 */
typedef struct xfer_open_args {
    uint64_t id;
    uint32_t group;
    uint16_t nshards;
    const uint32_t *lens; /* nshards entries */
    uint64_t deadline_ns; /* absolute; 0: now + config default */
    uint64_t user_data;
} xfer_open_args;
XFER_API int xfer_core_open(xfer_core *core, uint64_t now_ns,
                            const xfer_open_args *args);

/* One contiguous run of a part: len bytes of staging pool `pool` at
 * staging_off go to shard `shard`'s reservation at resv_off. */
typedef struct xfer_range {
    uint64_t staging_off;
    uint32_t pool;
    uint32_t len;      /* > 0 */
    uint32_t resv_off; /* resv_off + len <= the shard's reserved len */
    uint16_t shard;
    uint16_t pad_;
} xfer_range;

/* The most parts of one stream not yet released (RELEASE_PART), and the
 * most ranges in one part. */
#define XFER_STREAM_MAX_PARTS 64
#define XFER_STREAM_MAX_RANGES 4096

/*
 * xfer_core_part - add a part to open stream `id`: n ranges (borrowed
 * until return), any shards, any order.  The core sorts each shard's
 * ranges by reservation offset and joins the runs that are contiguous in
 * both staging and reservation (one WRITE each); a shard has one write of
 * the stream in flight at a time (the shard counts only bytes of a write
 * that ran alone on its reservation, shard.h).  On 0, *part (may be NULL)
 * gets the part's number (1, 2, ...) and exactly one RELEASE_PART of it
 * follows, once none of its writes is in flight and none will be sent:
 * status 0 when all of them succeeded, else the transfer's failure; always
 * before the transfer's COMPLETE.  On an error the part is not taken: no
 * RELEASE_PART follows and its staging is the caller's at once.
 * Errors: XFER_ERR_INVALID_ARG (id 0, n 0 or above XFER_STREAM_MAX_RANGES,
 * NULL r, a zero len, a shard outside the group, a range past the shard's
 * reservation), XFER_ERR_NOT_FOUND (no live transfer of the id),
 * XFER_ERR_STATE (not a stream, sealed, or ended), the transfer's status
 * when it failed or is stopping (XFER_ERR_CANCELLED, XFER_ERR_TIMEOUT,
 * ...), XFER_ERR_SHUTDOWN (xfer_core_shutdown was called and the stream
 * had not failed yet), XFER_ERR_BUSY (XFER_STREAM_MAX_PARTS parts unreleased, the action
 * list not cleared, or the part would leave a shard more than
 * XFER_SHARD_MAX_FRAGMENTS written ranges past its written prefix on the
 * way), XFER_ERR_NOMEM.
 */
XFER_API int xfer_core_part(xfer_core *core, uint64_t now_ns, uint64_t id,
                            const xfer_range *r, uint32_t n, uint32_t *part);

/*
 * xfer_core_seal - no part follows: the commits go out once every part's
 * writes succeeded (at once when they have).  Errors: XFER_ERR_INVALID_ARG,
 * XFER_ERR_NOT_FOUND, XFER_ERR_STATE (not a stream, sealed already, or
 * ended), the transfer's status when it failed or is stopping,
 * XFER_ERR_SHUTDOWN (as for a part), XFER_ERR_BUSY (the action list was
 * not cleared).
 */
XFER_API int xfer_core_seal(xfer_core *core, uint64_t now_ns, uint64_t id);

/*
 * xfer_core_stream_ranges - the byte ranges of shard `shard` that the
 * accepted parts of live stream `id` write, joined and sorted: what the
 * shard holds written once they all succeeded (for a checksum over the
 * whole reservation at seal time).  Up to `cap` pairs {off, len} go to
 * out (borrowed); *n gets how many there are.  At most
 * XFER_SHARD_MAX_FRAGMENTS + 1.  Errors: XFER_ERR_INVALID_ARG,
 * XFER_ERR_NOT_FOUND (no live stream of the id, or no such shard).
 */
XFER_API int xfer_core_stream_ranges(const xfer_core *core, uint64_t id,
                                     uint16_t shard, uint32_t (*out)[2],
                                     size_t cap, size_t *n);

/*
 * xfer_core_cancel - cancel a transfer.  Idempotent.  An unknown id gets a
 * pre-emptive tombstone.  Returns 0, or XFER_ERR_BUSY when an unknown id
 * cannot be tombstoned (cap reached) or the action list was not cleared,
 * XFER_ERR_INVALID_ARG for id 0.
 */
XFER_API int xfer_core_cancel(xfer_core *core, uint64_t now_ns, uint64_t id);

/* xfer_core_on_result - feed one shard result.  `r` is borrowed.
 * Returns 0, XFER_ERR_INVALID_ARG for a malformed result, or XFER_ERR_BUSY
 * when the action list was not cleared (nothing done: feed it again). */
XFER_API int xfer_core_on_result(xfer_core *core, uint64_t now_ns,
                        const xfer_shard_result *r);

/* xfer_core_on_timer - fire every deadline due at now_ns (bounded work per
 * call: if more remain, next_deadline() returns now_ns). */
XFER_API void xfer_core_on_timer(xfer_core *core, uint64_t now_ns);

/* xfer_core_next_deadline - the earliest time on_timer must run, or
 * UINT64_MAX when nothing is pending. */
XFER_API uint64_t xfer_core_next_deadline(const xfer_core *core);

/* xfer_core_shutdown - refuse new submits and drive every transfer to an
 * end.  A SHUTDOWN_DONE action follows once no transfer is live (at once if
 * none is).  Idempotent. */
XFER_API void xfer_core_shutdown(xfer_core *core, uint64_t now_ns);

/*
 * xfer_core_abandon - after xfer_core_shutdown, stop rolling back: the
 * driver's shutdown deadline passed.  No cancel is sent or retried any
 * more; each live transfer ends once the ops it has in flight answered
 * (aborts are issued from on_timer, which is due at once), and one whose
 * rollback was cut short completes with XFER_ERR_ABANDONED, the shards
 * left to their leases named in rollback_failed.  A transfer whose every
 * commit is acked still succeeds.  Each transfer still completes exactly
 * once.  No-op before a shutdown, or when called again.
 */
XFER_API void xfer_core_abandon(xfer_core *core, uint64_t now_ns);

/* The pending actions, in order; valid until the next call into the core. */
XFER_API const xfer_action *xfer_core_actions(const xfer_core *core, size_t *n);
XFER_API void xfer_core_actions_clear(xfer_core *core);

/*
 * Counters: the fields of stats version `version` are copied into *st
 * (borrowed), nothing past them is written.  Call it through the macro.
 * Errors: XFER_ERR_INVALID_ARG (NULL argument, unknown version; *st
 * untouched).
 */
XFER_API int xfer_core_stats_get_versioned(const xfer_core *core,
                                           uint32_t version,
                                           xfer_core_stats *st);
#define xfer_core_stats_get(core, st)                                       \
    xfer_core_stats_get_versioned((core), XFER_CORE_STATS_VERSION, (st))

/* How many times the transfer table's cell (state, event) was dispatched
 * (the transition coverage tests check); 0 outside the table. */
XFER_API uint64_t xfer_core_cell_hits(const xfer_core *core, unsigned state,
                                      unsigned event);

/* The state of an id: a transfer state, XFER_TRANSFER_STATE_TOMBSTONED, or XFER_TRANSFER_STATE_NEW
 * when unknown. */
XFER_API xfer_transfer_state xfer_core_state(const xfer_core *core, uint64_t id);

/*
 * Introspection for tools (stuck transfers) and the model checker: a read-only
 * view of one live transfer (per shard: xfer_shard_view, xfer/shard_op.h).
 * Versioned like the stats: the macro passes the XFER_TRANSFER_VIEW_VERSION
 * this header has, and the library writes only the fields of that version.
 */
#define XFER_TRANSFER_VIEW_VERSION 1
typedef struct xfer_transfer_view {
    uint64_t id;
    uint32_t attempt;
    uint8_t state;  /* xfer_transfer_state */
    uint16_t nshards;
    uint64_t started_ns, deadline_ns;
    uint32_t pending; /* shard ops in flight */
    xfer_shard_view shards[XFER_MAX_SHARDS];
} xfer_transfer_view;

/* Copy the view (the fields of version `version`) of live transfer `id`
 * into *out (borrowed).  Returns false, with *out untouched, when the id is
 * not live, an argument is NULL or the version is unknown.  Call it
 * through the macro. */
XFER_API bool xfer_core_view_versioned(const xfer_core *core, uint64_t id,
                                       uint32_t version,
                                       xfer_transfer_view *out);
#define xfer_core_view(core, id, out)                                       \
    xfer_core_view_versioned((core), (id), XFER_TRANSFER_VIEW_VERSION, (out))

/* Visit every live transfer id in a deterministic order (slot order). */
XFER_API void xfer_core_foreach(const xfer_core *core,
                       void (*fn)(void *ud, uint64_t id), void *ud);

/* Bytes the core uses per live transfer of n shards (for the benchmark). */
XFER_API size_t xfer_core_transfer_bytes(unsigned nshards);
XFER_API size_t xfer_core_tombstone_bytes(void);

#ifdef __cplusplus
}
#endif
#endif /* XFER_CORE_H */
