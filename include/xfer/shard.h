/*
 * xfer/shard.h - one consumer shard: a pool, reservations, leases and
 * tombstones (the reservation machine of fsm.h, one per transfer id).
 *
 * Pure: no I/O, no clock (every call takes now_ns), injected allocator, RNG
 * (reservation ids) and trace sink.  Transports (loop, tcp, rdma) and xferd
 * drive it and deliver its replies and events.
 *
 * What must stay true:
 *  - memory is never freed while a write into it may still land: a cancel or
 *    a lease expiry during a write is deferred until the last write ends;
 *  - TAKEN memory belongs to the consumer application until it releases it:
 *    no cancel and no lease frees it;
 *  - every op of one attempt of an id touches only state of that attempt
 *    (reserve, write, commit carry (id, attempt, resv_id));
 *  - a commit is refused (XFER_ERR_INCOMPLETE) unless every byte of the
 *    reservation was written by completed writes of it;
 *  - with owners (max_owners > 0: the sessions of a shard server), a
 *    reservation belongs to the owner that reserved it: write, commit and
 *    cancel from another owner are refused (XFER_ERR_PERM), a tombstone
 *    blocks only what its maker may block, and each owner's reservations,
 *    bytes and tombstones count against its own quota (XFER_ERR_BUSY for
 *    it, room kept for the others);
 *  - a tombstone (CANCELLED, EXPIRED, DONE) lives tombstone_ttl_ns, which
 *    must outlive every message still in flight to the shard;
 *  - leases are kept in a deadline-ordered heap, never in insertion order.
 *
 * One thread drives a shard.
 */
#ifndef XFER_SHARD_H
#define XFER_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/errors.h"
#include "xfer/fsm.h"
#include "xfer/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xfer_shard xfer_shard;

/*
 * Configuration; copied at creation.  Start from
 * xfer_shard_config_default() and set what differs (pool_bytes at least).
 * `version` says which layout the caller was built with (docs/design.md
 * section 4.1): xfer_shard_new() reads only the fields of that version.
 * Zero fields take defaults too.
 */
#define XFER_SHARD_CONFIG_VERSION 3
typedef struct xfer_shard_config {
    uint32_t version;           /* XFER_SHARD_CONFIG_VERSION */
    uint64_t pool_bytes;        /* size of the pool; required (default 0) */
    uint32_t max_reservations;  /* live reservations; default 4096 */
    uint32_t max_tombstones;    /* 0 (the default): 4 * max_reservations */
    uint64_t lease_ttl_ns;      /* default 10 s */
    uint64_t tombstone_ttl_ns;  /* 0 (the default): 2 * lease_ttl_ns;
                                   never below lease_ttl_ns (checked) */
    uint32_t align;             /* allocation alignment, power of 2; 64 */
    uint16_t shard_index;       /* echoed in events and traces; default 0 */
    /* Version 2 (in what was padding in version 1, so the layout and the
     * size stay those of version 1; version 1 reads it as false): */
    bool one_sided;             /* the pool is also written one-sidedly
                                   (RDMA WRITE through a per-reservation
                                   rkey), which the shard cannot see: a
                                   reservation leaves RESERVED (commit,
                                   cancel, lease) only through an
                                   invalidation of its rkey (see "One-sided
                                   shards" below).  Default false. */
    void *pool_memory;          /* NULL (the default): the shard allocates
                                   pool_bytes */
    xfer_allocator alloc;       /* every allocation of the shard (the pool
                                   included); zeroed (the default): libc */
    xfer_rng rng;               /* zeroed (the default): a fixed-seed
                                   internal generator */
    xfer_trace_sink trace;      /* zeroed (the default): no trace */
    /* Owners 1..max_owners (see "Owners" below); 0 (the default): none,
     * and every call acts for nobody in particular. */
    uint16_t max_owners;
    uint32_t owner_max_reservations; /* 0: max_reservations / max_owners */
    uint64_t owner_max_bytes;        /* pool bytes; 0: pool / max_owners */
    uint32_t owner_max_tombstones;   /* tombstones and the slots live
                                        records hold; 0: max_tombstones /
                                        max_owners */
    /* Version 3 (in what was tail padding, so the size stays that of
     * versions 1 and 2, and xfer_loop_config, which holds this struct,
     * keeps its layout; versions 1 and 2 read it as 0): the longest, in
     * milliseconds, a reservation is held from its reserve while its
     * owner refreshes its lease (xfer_shard_refresh): no refresh grants a
     * lease past created + max_hold, so an owner that keeps refreshing
     * cannot pin pool memory for ever.  0 (the default): 6 leases (60 s
     * at the default lease: a prefill of a long prompt takes seconds, so
     * a stream opened before its first layer has a wide margin, and a
     * hostile owner's hold, already bounded in bytes by its quota, ends
     * within a minute).  Never below the lease (checked). */
    uint32_t max_hold_ms;
} xfer_shard_config;

/* Write the latest version and every default above into *cfg (the derived
 * ones as 0).  `cfg` borrowed; NULL is ignored. */
XFER_API void xfer_shard_config_default(xfer_shard_config *cfg);

/* X(NAME, value): events a shard emits for the consumer scheduler.  Never
 * renumbered (they are on the wire). */
#define XFER_SHARD_EVENT_KINDS(X)                                             \
    X(READY, 0)     /* committed: data ready to take */                      \
    X(CANCELLED, 1) /* ended by cancel, never taken */                       \
    X(EXPIRED, 2)   /* ended by lease expiry, never taken */

typedef enum xfer_shard_event_kind {
#define XFER_SHARD_EV_ENUM_(name, value) XFER_SHARD_EV_##name = (value),
    XFER_SHARD_EVENT_KINDS(XFER_SHARD_EV_ENUM_)
#undef XFER_SHARD_EV_ENUM_
    XFER_SHARD_EV_COUNT_
} xfer_shard_event_kind;

/* The event kind's name ("READY"), or "?" out of range.  Never NULL; any
 * thread. */
XFER_API const char *xfer_shard_event_name(unsigned kind);

typedef struct xfer_shard_event {
    uint8_t kind; /* xfer_shard_event_kind */
    uint16_t shard;
    uint32_t attempt;
    uint64_t id;
    uint64_t resv_id;
    uint32_t len;
} xfer_shard_event;

/* What a successful reserve hands back to the producer. */
typedef struct xfer_resv_info {
    uint64_t resv_id; /* never XFER_RESV_NONE (0) */
    uint64_t addr;    /* offset of the region in the pool */
    uint32_t len;
} xfer_resv_info;

/* A one-sided shard asks its driver to invalidate the rkey of the
 * reservation (id, attempt, resv_id): see "One-sided shards" below. */
typedef struct xfer_shard_inval {
    uint64_t id;
    uint64_t resv_id;
    uint32_t attempt;
} xfer_shard_inval;

/* Counters, read with xfer_shard_stats_get(); versioned like the config
 * (the macro passes XFER_SHARD_STATS_VERSION).  The per-cell coverage is
 * not here: xfer_shard_cell_hits(). */
#define XFER_SHARD_STATS_VERSION 2
typedef struct xfer_shard_stats {
    uint64_t pool_bytes, bytes_in_use;
    uint32_t live, tombstones;
    uint64_t reserves, refused, writes, commits, cancels, expiries;
    uint64_t deferred_frees, takes, releases, stale, illegal;
    /* Version 2: lease refreshes granted, and refused (any error: also
     * counted in refused or stale). */
    uint64_t refreshes, refreshes_refused;
} xfer_shard_stats;

/* Create.  cfg copied; NULL means all defaults (and so fails: pool_bytes
 * is required).  *out untouched on failure.
 * Errors: XFER_ERR_INVALID_ARG (a version this library does not know, bad
 * config: among others a tombstone TTL shorter than the lease, which would
 * let a message still in flight for a reservation the lease ended recreate
 * it), XFER_ERR_NOMEM. */
XFER_API int xfer_shard_new(const xfer_shard_config *cfg, xfer_shard **out);
/* Free everything (pool memory only if the shard allocated it).  NULL ok. */
XFER_API void xfer_shard_del(xfer_shard *s);

/*
 * Owners.  A shard server gives each of its sessions an owner number
 * (1..max_owners) and makes the calls below through their _by forms; the
 * plain calls act for owner 0, nobody in particular, who is never refused
 * for ownership and sees every tombstone (the loop transport, the model
 * checker, tests).  With an owner:
 *  - reserve, write, commit and cancel of a record another owner made
 *    answer XFER_ERR_PERM and touch nothing (the consumer's cancel,
 *    attempt 0, excepted: it applies to every owner's record);
 *  - a tombstone of the owner's making (its cancel of an unknown id, the
 *    end of its record by its cancel or its lease) blocks only that
 *    owner's later reserves of the id; one the consumer made (its cancel,
 *    a release of taken data) blocks every reserve of it.  One tombstone
 *    per id: when a second owner tombstones an id another owner's
 *    tombstone holds, it stays the first's (a cancel of an unknown id) or
 *    becomes the second's (its record ended); two owners never block a
 *    third (a late reserve the first owner no longer blocks is freed by
 *    its lease);
 *  - an owner over owner_max_reservations or owner_max_bytes gets
 *    XFER_ERR_BUSY from reserve, and over owner_max_tombstones (its
 *    tombstones plus the slots its live records hold) from reserve and
 *    from a cancel that needs a new tombstone.  An owner within its quota
 *    never meets a cap the others filled while the quotas add up to at
 *    most the caps (the pool can still be fragmented: NO_SPACE).
 *
 * Reserve len bytes for (id, attempt).  Idempotent while RESERVED/WRITING for
 * the same attempt (the same info comes back).  *info written on 0.
 * Errors: XFER_ERR_INVALID_ARG, XFER_ERR_NO_SPACE (pool), XFER_ERR_BUSY
 * (reservation or tombstone cap, or the owner's quota), XFER_ERR_CANCELLED
 * (tombstoned), XFER_ERR_STALE (held by another attempt), XFER_ERR_STATE
 * (held, not RESERVED/WRITING), XFER_ERR_PERM (held by another owner).
 */
XFER_API int xfer_shard_reserve(xfer_shard *s, uint64_t now_ns, uint64_t id,
                       uint32_t attempt, uint32_t len, xfer_resv_info *info);
XFER_API int xfer_shard_reserve_by(xfer_shard *s, uint64_t now_ns,
                                   uint16_t owner, uint64_t id,
                                   uint32_t attempt, uint32_t len,
                                   xfer_resv_info *info);

/*
 * The eager path: reserve len bytes for (id, attempt), copy `data` (borrowed
 * until return) into them and commit, in one step: on 0 the reservation is
 * READY, its READY event is in the event list and *info is written, as a
 * reserve, a write of every byte and a commit would leave it.  On an error
 * nothing is held and no tombstone is left (a refused reserve's rule): the
 * errors of reserve, and XFER_ERR_BUSY when the event list is full,
 * XFER_ERR_NOT_SUPPORTED on a one-sided shard (its commit waits for an
 * invalidation).  An id the shard holds in any state is refused
 * (XFER_ERR_STATE, XFER_ERR_STALE for another attempt, XFER_ERR_CANCELLED
 * when tombstoned), so a repeated eager op is never applied twice.
 */
XFER_API int xfer_shard_eager(xfer_shard *s, uint64_t now_ns, uint64_t id,
                              uint32_t attempt, const void *data,
                              uint32_t len, xfer_resv_info *info);
XFER_API int xfer_shard_eager_by(xfer_shard *s, uint64_t now_ns,
                                 uint16_t owner, uint64_t id,
                                 uint32_t attempt, const void *data,
                                 uint32_t len, xfer_resv_info *info);

/* The most disjoint written ranges a reservation keeps past its written
 * prefix (see write_begin): a write that would make more is refused. */
#define XFER_SHARD_MAX_FRAGMENTS 8

/*
 * Begin a write of len bytes at off inside the reservation.  On 0, *dst
 * points into the pool (valid until the matching write_end) and the write
 * is in flight: the memory is pinned until write_end.
 * Errors: XFER_ERR_INVALID_ARG, XFER_ERR_NOT_FOUND, XFER_ERR_STALE (attempt
 * or resv_id mismatch), XFER_ERR_BOUNDS, XFER_ERR_CANCELLED, XFER_ERR_EXPIRED,
 * XFER_ERR_STATE, XFER_ERR_BUSY (2^32 - 1 writes already in flight, or
 * the write alone would leave more than XFER_SHARD_MAX_FRAGMENTS written
 * ranges past the prefix), XFER_ERR_PERM (_by: another owner's record).
 *
 * What a write counts for the commit: the bytes of a write that ends ok
 * while it was the only one in flight on its reservation are marked
 * written, wherever they lie in the region, in any order, overlapping
 * what is already written or not; a write that fails unmarks its range
 * (or everything, if it ran next to another write); writes that ran next
 * to each other mark nothing.  The written bytes are kept as a set of at
 * most XFER_SHARD_MAX_FRAGMENTS ranges past the written prefix: a write
 * that would leave more is refused (XFER_ERR_BUSY, nothing touched), so
 * the set is bounded whatever a peer sends.
 */
XFER_API int xfer_shard_write_begin(xfer_shard *s, uint64_t now_ns, uint64_t id,
                           uint32_t attempt, uint64_t resv_id, uint64_t off,
                           uint32_t len, uint8_t **dst);
XFER_API int xfer_shard_write_begin_by(xfer_shard *s, uint64_t now_ns,
                                       uint16_t owner, uint64_t id,
                                       uint32_t attempt, uint64_t resv_id,
                                       uint64_t off, uint32_t len,
                                       uint8_t **dst);
/* End a write begun with write_begin.  ok=false: the bytes are garbage.
 * Returns 0, or XFER_ERR_CANCELLED / XFER_ERR_EXPIRED when the reservation
 * was cancelled or expired meanwhile (the memory is now freed), or
 * XFER_ERR_NOT_FOUND / XFER_ERR_STALE for a write that was never begun. */
XFER_API int xfer_shard_write_end(xfer_shard *s, uint64_t now_ns, uint64_t id,
                         uint64_t resv_id, bool ok);

/*
 * The copy step of a device pool (transport/server_copy.c).  A write into
 * device memory lands in a host bounce buffer; copy_begin says that one of
 * the record's writes in flight now has its bytes there and its copy into
 * the region started; copy_end ends that copy and, with it, the write (as
 * write_end does, ok only when the copy was).  A write with its copy in
 * flight is a write in flight: the record stays WRITING (or CANCEL_PENDING
 * / EXPIRE_PENDING), so no commit makes it READY and no cancel or expiry
 * frees or reuses the region until every copy into it ended.  The count of
 * copies in flight is the record's (at most its writes in flight); it is
 * not an event of the table, which sees the copy's end as the write's end.
 *
 * copy_begin returns 0, XFER_ERR_INVALID_ARG (s NULL, id 0),
 * XFER_ERR_NOT_FOUND (no record of id), XFER_ERR_STALE (another
 * reservation) or XFER_ERR_STATE (every write in flight already has its
 * copy: nothing counted).  copy_end returns what write_end returns, and
 * XFER_ERR_STALE when no copy of that reservation is in flight.  s is
 * borrowed; the shard's thread only.
 */
XFER_API int xfer_shard_copy_begin(xfer_shard *s, uint64_t now_ns,
                                   uint64_t id, uint64_t resv_id);
XFER_API int xfer_shard_copy_end(xfer_shard *s, uint64_t now_ns, uint64_t id,
                                 uint64_t resv_id, bool ok);
/* Copies in flight into the region of id's record (0 when none or no
 * record).  s is borrowed. */
XFER_API uint32_t xfer_shard_copies(const xfer_shard *s, uint64_t id);
/* write_begin + memcpy + write_end.  `data` borrowed. */
XFER_API int xfer_shard_write(xfer_shard *s, uint64_t now_ns, uint64_t id,
                     uint32_t attempt, uint64_t resv_id, uint64_t off,
                     const void *data, uint32_t len);

/* Commit: RESERVED -> READY, emits READY.  Idempotent in READY/TAKEN.
 * Errors: XFER_ERR_NOT_FOUND, XFER_ERR_STALE, XFER_ERR_CANCELLED,
 * XFER_ERR_EXPIRED, XFER_ERR_STATE (a write still in flight),
 * XFER_ERR_INCOMPLETE (not every byte of the reservation was written by
 * completed writes of it), XFER_ERR_BUSY (the event list is full: the
 * driver did not drain it), XFER_ERR_PERM (_by: another owner's). */
XFER_API int xfer_shard_commit(xfer_shard *s, uint64_t now_ns, uint64_t id,
                      uint32_t attempt, uint64_t resv_id);
XFER_API int xfer_shard_commit_by(xfer_shard *s, uint64_t now_ns,
                                  uint16_t owner, uint64_t id,
                                  uint32_t attempt, uint64_t resv_id);

/*
 * Cancel (id, attempt[, resv_id]).  resv_id XFER_RESV_NONE: frees only a
 * reservation of that attempt, or leaves a tombstone for (id, attempt).
 * Never touches READY/TAKEN state of another attempt.  Returns 0 when the
 * shard holds nothing of that attempt any more (or will free it when the
 * write in flight ends); XFER_ERR_STATE when the data is TAKEN (it belongs to
 * the consumer); XFER_ERR_STALE when the id is held by another attempt
 * (nothing touched); XFER_ERR_BUSY when a tombstone cannot be recorded or
 * the event list is full.
 *
 * attempt 0 (never a producer attempt) is the consumer scheduler's cancel
 * of the id: it applies to whatever attempt holds the id (TAKEN data still
 * excepted), or leaves a tombstone that refuses every later reserve of it.
 * With _by, XFER_ERR_PERM for another owner's record (attempt 0 excepted;
 * whoever makes that call decides who may), and the owner's tombstone
 * quota applies (XFER_ERR_BUSY).
 */
XFER_API int xfer_shard_cancel(xfer_shard *s, uint64_t now_ns, uint64_t id,
                      uint32_t attempt, uint64_t resv_id);
XFER_API int xfer_shard_cancel_by(xfer_shard *s, uint64_t now_ns,
                                  uint16_t owner, uint64_t id,
                                  uint32_t attempt, uint64_t resv_id);
/* The consumer's cancel of one attempt (attempt != 0; 0 is the same as
 * xfer_shard_cancel_by's), made by consumer session `owner`: like a
 * consumer's cancel it applies to whichever owner's record holds that
 * attempt (never PERM) and its tombstone blocks every reserve of the id;
 * a tombstone it must make anew (an id the shard does not hold) is
 * charged to `owner`'s tombstone quota (XFER_ERR_BUSY past it), so a
 * consumer session cannot fill the table with tombstones nobody pays
 * for.  Other errors: those of xfer_shard_cancel. */
XFER_API int xfer_shard_cancel_consumer_by(xfer_shard *s, uint64_t now_ns,
                                           uint16_t owner, uint64_t id,
                                           uint32_t attempt,
                                           uint64_t resv_id);

/*
 * Refresh the lease of (id, attempt, resv_id) while its owner still
 * writes it (a stream whose parts come later than the lease: docs/
 * streaming.md).  The lease deadline becomes
 *     max(current, min(now + min(want_ns, lease_ttl_ns), created + max_hold_ns))
 * (want_ns 0: the whole lease), so a refresh never shortens a lease, never
 * grants more than one lease from now, and never holds the reservation
 * past max_hold_ns after its reserve; the producer passes the time left to
 * its transfer's deadline as want_ns, so it bounds the grant too.  On 0,
 * *granted_ns (may be NULL) is the time from now_ns to the lease deadline.
 * Only in RESERVED or WRITING (writes in flight are the owner's own).
 * Errors: XFER_ERR_INVALID_ARG, XFER_ERR_NOT_FOUND, XFER_ERR_STALE (another
 * attempt or reservation id), XFER_ERR_CANCELLED, XFER_ERR_EXPIRED,
 * XFER_ERR_STATE (committed, taken, or ended otherwise), XFER_ERR_BOUNDS
 * (the hold cap is reached: the lease already runs to created +
 * max_hold_ns, nothing more can be granted), XFER_ERR_PERM (_by: another
 * owner's record); nothing changes then.
 */
XFER_API int xfer_shard_refresh(xfer_shard *s, uint64_t now_ns, uint64_t id,
                                uint32_t attempt, uint64_t resv_id,
                                uint64_t want_ns, uint64_t *granted_ns);
XFER_API int xfer_shard_refresh_by(xfer_shard *s, uint64_t now_ns,
                                   uint16_t owner, uint64_t id,
                                   uint32_t attempt, uint64_t resv_id,
                                   uint64_t want_ns, uint64_t *granted_ns);

/* Take (pin) READY data for the consumer.  *data and *len written on 0.
 * Errors: XFER_ERR_NOT_FOUND, XFER_ERR_STALE, XFER_ERR_CANCELLED,
 * XFER_ERR_EXPIRED, XFER_ERR_STATE. */
XFER_API int xfer_shard_take(xfer_shard *s, uint64_t now_ns, uint64_t id,
                    uint64_t resv_id, const uint8_t **data, uint32_t *len);
/* Release TAKEN data: memory freed, id tombstoned (DONE).
 * Errors: XFER_ERR_INVALID_ARG, XFER_ERR_NOT_FOUND, XFER_ERR_STALE,
 * XFER_ERR_CANCELLED, XFER_ERR_EXPIRED, XFER_ERR_STATE (not TAKEN). */
XFER_API int xfer_shard_release(xfer_shard *s, uint64_t now_ns, uint64_t id,
                       uint64_t resv_id);

/* Fire due leases and tombstone expiries. */
XFER_API void xfer_shard_on_timer(xfer_shard *s, uint64_t now_ns);
/* Earliest deadline, or UINT64_MAX. */
XFER_API uint64_t xfer_shard_next_deadline(const xfer_shard *s);

/* Pending events, in order; valid until the next call into the shard.
 * The list holds max_reservations + 16 events and never grows: drain it
 * after every call (while it is full, commit and cancel return
 * XFER_ERR_BUSY and due leases wait, keeping next_deadline in the past). */
XFER_API const xfer_shard_event *xfer_shard_events(const xfer_shard *s, size_t *n);
XFER_API void xfer_shard_events_clear(xfer_shard *s);
/* Every id the shard ended without a consumer's doing and still
 * tombstones, oldest first: fn(ud, e) with e's kind CANCELLED (a
 * producer's cancel of its reservation) or EXPIRED, its attempt
 * and id (resv_id XFER_RESV_NONE, len 0).  What a subscriber that came
 * after those events needs to learn that the id will never be ready
 * (xfer_server replays them at SUBSCRIBE).  `e` is borrowed for the call;
 * fn must not call into the shard.  NULL s: nothing. */
XFER_API void xfer_shard_foreach_ended(
    const xfer_shard *s, void (*fn)(void *ud, const xfer_shard_event *e),
    void *ud);

/*
 * One-sided shards (cfg.one_sided).  A one-sided write lands without the
 * shard's CPU seeing it, so "free when the last write ends" cannot work:
 * the driver gives each reservation its own rkey (a memory window bound at
 * reserve, or a registration of its own) and the shard never frees or
 * publishes a region while that rkey may still let a write in.  A commit,
 * cancel or lease expiry of a RESERVED reservation (or the end of the last
 * two-sided write of a CANCEL_PENDING / EXPIRE_PENDING one) moves it to
 * COMMIT_INVAL / CANCEL_INVAL / EXPIRE_INVAL and appends a request to the
 * invalidation list; the call itself answers as it would on a two-sided
 * shard (0 for the commit and the cancel).  The driver invalidates the
 * rkey, waits until the invalidation is complete (its completion polled),
 * and then calls xfer_shard_invalidated(): only then is the region READY
 * (the READY event goes out) or freed (CANCELLED / EXPIRED, with their
 * events).  A cancel or lease expiry while COMMIT_INVAL turns it into
 * CANCEL_INVAL / EXPIRE_INVAL; the invalidation already asked for serves.
 * READY data was invalidated before it became READY, so its later cancel,
 * expiry or release frees at once, as on a two-sided shard.
 */

/* The pending invalidation requests, oldest first; valid until the next
 * call into the shard.  Each reservation is asked for once.  The list
 * never grows past max_reservations and never fails: drain it after every
 * call, as the events.  Empty on a two-sided shard.  `n` may be NULL. */
XFER_API const xfer_shard_inval *xfer_shard_invalidations(const xfer_shard *s,
                                                          size_t *n);
XFER_API void xfer_shard_invalidations_clear(xfer_shard *s);
/* The rkey of (id, resv_id) is invalidated: no write can land in its
 * region any more.  COMMIT_INVAL becomes READY (READY event), CANCEL_INVAL
 * and EXPIRE_INVAL free the region (CANCELLED / EXPIRED event).
 * Errors: XFER_ERR_INVALID_ARG, XFER_ERR_NOT_FOUND (no live reservation
 * of id), XFER_ERR_STALE (another reservation id, or one not waiting for
 * an invalidation); nothing changes then. */
XFER_API int xfer_shard_invalidated(xfer_shard *s, uint64_t now_ns,
                                    uint64_t id, uint64_t resv_id);

/* Counters: the fields of stats version `version` are copied into *st
 * (borrowed), nothing past them is written.  Call it through the macro.
 * Errors: XFER_ERR_INVALID_ARG (NULL argument, unknown version; *st
 * untouched). */
XFER_API int xfer_shard_stats_get_versioned(const xfer_shard *s,
                                            uint32_t version,
                                            xfer_shard_stats *st);
#define xfer_shard_stats_get(s, st)                                         \
    xfer_shard_stats_get_versioned((s), XFER_SHARD_STATS_VERSION, (st))
/* What owner (1..max_owners) holds: live records, their pool bytes (as
 * allocated, rounded to the alignment) and tombstone slots (its
 * tombstones, live or superseded, plus one per live record). */
typedef struct xfer_shard_owner_use {
    uint32_t live;
    uint32_t tombstones;
    uint64_t bytes;
} xfer_shard_owner_use;
/* Errors: XFER_ERR_INVALID_ARG (NULL, owner 0 or past max_owners). */
XFER_API int xfer_shard_owner_get(const xfer_shard *s, uint16_t owner,
                                  xfer_shard_owner_use *out);
/* How many times the reservation table's cell (state, event) was
 * dispatched; 0 outside the table. */
XFER_API uint64_t xfer_shard_cell_hits(const xfer_shard *s, unsigned state,
                                       unsigned event);
/*
 * Integrity (docs/integrity.md): the verdict on a region whose bytes the
 * caller checksummed (CRC32C) to `got`, against the `expected` CRC the
 * producer sent with its commit.  A driver asks before it commits (over
 * a one-sided transport, once the region's rkey is dead) and commits only
 * on 0, so no region whose bytes differ from the producer's is ever
 * READY.  Returns 0 when they match; XFER_ERR_CORRUPT when they differ,
 * traced as a note (XFER_NOTE_CORRUPT, error CORRUPT, this shard's
 * index), the record untouched (the producer rolls back with a cancel,
 * the lease is the backstop); XFER_ERR_INVALID_ARG for a NULL shard.
 */
XFER_API int xfer_shard_check(xfer_shard *s, uint64_t now_ns, uint64_t id,
                              uint32_t attempt, uint32_t expected,
                              uint32_t got);

/* The reservation state of id (XFER_RESV_STATE_NONE when unknown). */
XFER_API xfer_resv_state xfer_shard_state(const xfer_shard *s, uint64_t id);
/* The pool's base pointer (for transports that write into it). */
XFER_API uint8_t *xfer_shard_pool_base(const xfer_shard *s);

/* Visit every held id (live or tombstoned) in a deterministic order: live
 * records by id (since_ns: when reserved), then tombstones oldest first
 * (since_ns: when tombstoned).  fn must not call into the shard. */
XFER_API void xfer_shard_foreach(const xfer_shard *s,
                        void (*fn)(void *ud, uint64_t id, uint32_t attempt,
                                   xfer_resv_state st, uint64_t since_ns),
                        void *ud);

#ifdef __cplusplus
}
#endif
#endif /* XFER_SHARD_H */
