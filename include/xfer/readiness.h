/*
 * xfer/readiness.h - the readiness tracker of a consumer scheduler (the
 * readiness machine of fsm.h, one record per transfer id, one group of S
 * shards per tracker).
 *
 * Pure: no I/O, no clock, injected allocator and trace sink.  The scheduler
 * feeds it ready / cancelled / expired events from the shards and its own
 * cancels, performs the actions it emits (take, release, cancel to shard k),
 * feeds back take results, and reads the AVAILABLE / UNAVAILABLE outcomes.
 *
 * What must stay true (I8, docs/design.md section 3): AVAILABLE is
 * reported only when all S shards reported ready for one attempt and every
 * take succeeded, at most once per record, never for a tombstoned id, and
 * is never withdrawn.  A record that
 * ends otherwise sends a cancel to every shard of the group and answers a
 * later ready for the id with a cancel to that shard.  A cancel for an
 * unknown id inserts a tombstone.  A deadline turns a waiting record
 * UNAVAILABLE with the mask of shards that never reported.
 *
 * One thread drives a tracker.
 */
#ifndef XFER_READINESS_H
#define XFER_READINESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/errors.h"
#include "xfer/fsm.h"
#include "xfer/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xfer_readiness xfer_readiness;

/*
 * Configuration; copied at creation.  Start from
 * xfer_readiness_config_default() and set what differs (nshards at least).
 * `version` says which layout the caller was built with (docs/design.md
 * section 4.1): xfer_readiness_new() reads only the fields of that
 * version.  Zero fields take defaults too.
 */
#define XFER_READINESS_CONFIG_VERSION 1
typedef struct xfer_readiness_config {
    uint32_t version;          /* XFER_READINESS_CONFIG_VERSION */
    uint16_t nshards;          /* S, 1..XFER_MAX_SHARDS; required
                                  (default 0) */
    uint32_t max_records;      /* live records; default 65536 */
    uint32_t max_tombstones;   /* 0 (the default): 4 * max_records */
    uint64_t deadline_ns;      /* from the first ready; default 30 s */
    uint64_t tombstone_ttl_ns; /* default 60 s */
    xfer_allocator alloc;      /* every allocation of the tracker; zeroed
                                  (the default): libc */
    xfer_trace_sink trace;     /* zeroed (the default): no trace */
} xfer_readiness_config;

/* Write version 1 and every default above into *cfg (the derived one as
 * 0).  `cfg` borrowed; NULL is ignored. */
XFER_API void xfer_readiness_config_default(xfer_readiness_config *cfg);

/* X(NAME, value): kinds of readiness actions.  Never renumbered. */
#define XFER_READY_ACTION_KINDS(X)                                            \
    X(TAKE, 0)        /* take (pin) (id, resv_id) on shard */                \
    X(RELEASE, 1)     /* release a take made on shard */                     \
    X(CANCEL, 2)      /* cancel (id, attempt, resv_id) on shard; attempt 0:  \
                         unknown (a pre-emptive cancel) */                   \
    X(AVAILABLE, 3)   /* every shard taken: the data is usable */            \
    X(UNAVAILABLE, 4) /* the record ended without data */

typedef enum xfer_ready_action_kind {
#define XFER_READY_ACT_ENUM_(name, value) XFER_READY_ACT_##name = (value),
    XFER_READY_ACTION_KINDS(XFER_READY_ACT_ENUM_)
#undef XFER_READY_ACT_ENUM_
    XFER_READY_ACT_COUNT_
} xfer_ready_action_kind;

/* The action kind's name ("TAKE"), or "?" out of range.  Never NULL; any
 * thread. */
XFER_API const char *xfer_ready_action_name(unsigned kind);

typedef struct xfer_ready_action {
    uint8_t kind;    /* xfer_ready_action_kind */
    uint16_t shard;  /* TAKE/RELEASE/CANCEL; XFER_SHARD_NONE otherwise */
    uint32_t attempt;
    uint64_t id;
    uint64_t resv_id; /* TAKE/RELEASE/CANCEL: XFER_RESV_NONE if unknown */
    int32_t reason;   /* UNAVAILABLE: XFER_ERR_TIMEOUT / _CANCELLED /
                         _EXPIRED / _UNAVAILABLE (a take failed) */
    uint64_t missing; /* UNAVAILABLE: bit k = shard k never reported */
} xfer_ready_action;

/* Counters, read with xfer_readiness_stats_get(); versioned like the
 * config (the macro passes XFER_READINESS_STATS_VERSION).  The per-cell
 * coverage is not here: xfer_readiness_cell_hits(). */
#define XFER_READINESS_STATS_VERSION 1
typedef struct xfer_readiness_stats {
    uint64_t available, unavailable, late_ready, duplicate_ready;
    uint64_t preemptive, take_failed, illegal;
    uint32_t live, tombstones;
} xfer_readiness_stats;

/* Create (cfg copied; NULL means all defaults, and so fails: nshards is
 * required) / free (NULL ok).  *out untouched on failure.
 * Errors: XFER_ERR_INVALID_ARG (a version this library does not know, bad
 * config), XFER_ERR_NOMEM. */
XFER_API int xfer_readiness_new(const xfer_readiness_config *cfg,
                       xfer_readiness **out);
XFER_API void xfer_readiness_del(xfer_readiness *r);

/*
 * Every input below may append actions; the caller performs and clears them
 * (xfer_readiness_actions_clear) after every call.  An input that finds less
 * room than one step may need (2 * S + 1 actions) returns XFER_ERR_BUSY and
 * changes nothing.  Peer input is checked, never asserted.
 */

/* Feed ready(id, attempt, resv_id) from shard.  Errors:
 * XFER_ERR_INVALID_ARG (id 0, attempt 0, resv_id XFER_RESV_NONE, shard >= S),
 * XFER_ERR_BUSY (record or tombstone cap, actions not cleared),
 * XFER_ERR_NOMEM (never: everything is preallocated). */
XFER_API int xfer_readiness_on_ready(xfer_readiness *r, uint64_t now_ns, uint64_t id,
                            uint32_t attempt, uint16_t shard,
                            uint64_t resv_id);
/* Feed the result of a TAKE action (status 0 or an error).  Errors:
 * XFER_ERR_INVALID_ARG (id 0, shard >= S, status > 0), XFER_ERR_NOT_FOUND
 * (unknown id), XFER_ERR_STATE (no take outstanding on that shard),
 * XFER_ERR_BUSY (actions not cleared). */
XFER_API int xfer_readiness_on_take_result(xfer_readiness *r, uint64_t now_ns,
                                  uint64_t id, uint16_t shard,
                                  int32_t status);
/* Feed cancelled(id)/expired(id) from shard (reason XFER_ERR_CANCELLED or
 * XFER_ERR_EXPIRED).  An event of another attempt than the record's is
 * absorbed; for an unknown id it leaves a tombstone.  Errors:
 * XFER_ERR_INVALID_ARG, XFER_ERR_BUSY (tombstone cap, actions not
 * cleared). */
XFER_API int xfer_readiness_on_shard_ended(xfer_readiness *r, uint64_t now_ns,
                                  uint64_t id, uint32_t attempt,
                                  uint16_t shard, int32_t reason);
/* The consumer scheduler's own cancel.  Idempotent; unknown id: tombstone
 * (no outcome is reported for it).
 * Errors: XFER_ERR_INVALID_ARG, XFER_ERR_BUSY (tombstone cap, actions not
 * cleared). */
XFER_API int xfer_readiness_cancel(xfer_readiness *r, uint64_t now_ns, uint64_t id);

/* Fire due deadlines and drop expired tombstones, a bounded batch per call
 * (and only while the action buffer has room): if work remains,
 * xfer_readiness_next_deadline() stays <= now_ns. */
XFER_API void xfer_readiness_on_timer(xfer_readiness *r, uint64_t now_ns);
/* Earliest deadline or tombstone expiry, or UINT64_MAX. */
XFER_API uint64_t xfer_readiness_next_deadline(const xfer_readiness *r);

/* The pending actions, in order; valid until the next call into r. */
XFER_API const xfer_ready_action *xfer_readiness_actions(const xfer_readiness *r,
                                                size_t *n);
XFER_API void xfer_readiness_actions_clear(xfer_readiness *r);

/* Counters: the fields of stats version `version` are copied into *st
 * (borrowed), nothing past them is written.  Call it through the macro.
 * Errors: XFER_ERR_INVALID_ARG (NULL argument, unknown version; *st
 * untouched). */
XFER_API int xfer_readiness_stats_get_versioned(const xfer_readiness *r,
                                                uint32_t version,
                                                xfer_readiness_stats *st);
#define xfer_readiness_stats_get(r, st)                                     \
    xfer_readiness_stats_get_versioned((r), XFER_READINESS_STATS_VERSION,   \
                                       (st))
/* How many times the readiness table's cell (state, event) was
 * dispatched; 0 outside the table. */
XFER_API uint64_t xfer_readiness_cell_hits(const xfer_readiness *r,
                                           unsigned state, unsigned event);
XFER_API xfer_ready_state xfer_readiness_state(const xfer_readiness *r, uint64_t id);

#ifdef __cplusplus
}
#endif
#endif /* XFER_READINESS_H */
