/*
 * xfer/consumer.h - the consumer scheduler's client: it connects to the S
 * shard servers of a group (xfer_server, xferd), subscribes to their
 * events, drives the readiness machine (xfer/readiness.h) with them,
 * takes (pins) every shard of an id, and reports each id exactly once:
 *
 *   available(id, attempt, one region per shard)  when every shard was
 *       ready for one attempt and every take succeeded.  Region k is
 *       {shard k, offset in its pool, length, reservation id}: with xferd
 *       --shm the data is at xfer_shm_pool(xfer_shm_map(NAME, k)) + offset,
 *       read in place; a TP worker serving its own buffer reads it there.
 *       The data stays pinned until xfer_consumer_release(id).
 *   unavailable(id, reason, shards)  otherwise, with the reason
 *       (XFER_ERR_TIMEOUT: a deadline; XFER_ERR_CANCELLED: a cancel, the
 *       consumer's own or a shard's; XFER_ERR_EXPIRED: a shard's lease ran
 *       out; XFER_ERR_CONN_LOST: a shard's connection was lost while the id
 *       waited; XFER_ERR_UNAVAILABLE: a take failed) and the shards that
 *       never reported ready (plus, for CONN_LOST, the lost shard).
 *
 * Which ids get an outcome: every id that reached the readiness machine
 * (a ready from some shard), and every id named by xfer_consumer_expect.
 * An id that was neither (for example a producer's rollback before any
 * ready, seen only as "cancelled" events) only leaves a tombstone.
 *
 * What it keeps true (I8, docs/design.md section 2.3): available is
 * reported only when every shard's data is taken, at most once, never
 * withdrawn; an id reported otherwise is cancelled on every shard and
 * answers a later ready with a cancel; one outcome per id.
 *
 * The consumer's cancel (xfer_consumer_cancel) cancels the id on every
 * shard (attempt 0: whatever attempt holds it, taken data excepted) and
 * leaves a tombstone that answers a later ready with a cancel, so the
 * producer's commit fails and it rolls back.  Lost connections reconnect
 * with doubling backoff; every id waiting when a shard's connection is
 * lost turns unavailable (CONN_LOST) at once.  Takes whose reply was lost
 * are released on the next connection or, if none comes, by the server's
 * take grace period.
 *
 * Threads and callbacks, as the engine's: every call below but the
 * _post_ ones is made on the loop thread of cfg.base; available,
 * unavailable and link callbacks come from that loop, never from inside a
 * call the caller just made; a callback may call expect, cancel and
 * release, but not xfer_consumer_del.  Other threads use the _post_
 * calls, a mailbox that wakes the loop.  The process must ignore SIGPIPE.
 */
#ifndef XFER_CONSUMER_H
#define XFER_CONSUMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/errors.h"
#include "xfer/fsm.h"
#include "xfer/trace.h"
#include "xfer/xfer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;
struct xfer_ctl;
typedef struct xfer_consumer xfer_consumer;

#define XFER_CONSUMER_CONFIG_VERSION 1
#define XFER_CONSUMER_STATS_VERSION 1

/* One shard's part of an available id. */
typedef struct xfer_region {
    uint16_t shard;
    uint32_t len;
    uint64_t offset;  /* in that shard's pool */
    uint64_t resv_id; /* the shard's reservation id */
} xfer_region;

/* `regions` (nregions = S, region k for shard k) is borrowed until the
 * callback returns. */
typedef void (*xfer_consumer_available_fn)(void *ud, uint64_t id,
                                           uint32_t attempt,
                                           const xfer_region *regions,
                                           uint16_t nregions);
typedef void (*xfer_consumer_unavailable_fn)(void *ud, uint64_t id,
                                             int32_t reason,
                                             uint64_t shards);
/* Shard k's connection came up (HELLO and SUBSCRIBE answered) or went
 * down.  The place to map (again) a shard's shared-memory pool. */
typedef void (*xfer_consumer_link_fn)(void *ud, uint16_t shard, bool up);

typedef struct xfer_consumer_config {
    uint32_t version;          /* XFER_CONSUMER_CONFIG_VERSION */
    struct event_base *base;   /* required; a base the caller made is
                                  borrowed until del; an engine's own base
                                  (xfer_engine_base) is held until del, so
                                  the engine may go first */
    uint16_t nshards;          /* S, 1..XFER_MAX_SHARDS */
    /* nshards numeric addresses "a.b.c.d:port" or "[v6]:port"; shard k is
     * served at addrs[k].  Copied. */
    const char *const *addrs;
    uint32_t group;            /* sent in HELLO */
    xfer_consumer_available_fn available; /* required */
    xfer_consumer_unavailable_fn unavailable; /* required */
    xfer_consumer_link_fn link; /* optional */
    void *ud;
    uint32_t max_ids;          /* ids tracked at once (waiting, expected or
                                  held by the application); 0: 65536 */
    uint32_t max_tombstones;   /* 0: 4 * max_ids */
    uint64_t ready_deadline_ns; /* from an id's first ready; 0: 30 s */
    uint64_t tombstone_ttl_ns; /* 0: 60 s */
    uint64_t connect_timeout_ns; /* 0: 2 s */
    uint64_t reconnect_min_ns; /* 0: 10 ms, doubled per failure */
    uint64_t reconnect_max_ns; /* 0: 1 s */
    uint32_t mailbox_cap;      /* 0: 65536 */
    xfer_trace_sink trace;     /* the readiness machine's records (tag them
                                  XFER_TRACE_SRC_CONSUMER) */
    xfer_clock_fn clock;       /* NULL: CLOCK_MONOTONIC */
    void *clock_ud;
    xfer_allocator alloc;      /* every allocation; zeroed: libc */
    /* Sessions and authentication (README.md, "Running xferd on a
     * network"), as xfer_tcp_config's: every link says HELLO2 with
     * `session`, the same across reconnects. */
    uint8_t session[16];       /* all zero (the default): drawn from the
                                  OS CSPRNG at creation */
    const uint8_t *secret;     /* 16..256 bytes, copied; NULL: none */
    size_t secret_len;
} xfer_consumer_config;

/* Write the version and every default into *cfg.  NULL ok. */
XFER_API void xfer_consumer_config_default(xfer_consumer_config *cfg);

/*
 * Create and start connecting to every shard.  cfg copied.  *out
 * untouched on failure.  Errors: XFER_ERR_INVALID_ARG (NULL, unknown
 * version, no base, no callbacks, a bad address, nshards), XFER_ERR_NOMEM,
 * XFER_ERR_IO (libevent).
 */
XFER_API int xfer_consumer_new(const xfer_consumer_config *cfg,
                               xfer_consumer **out);
/* Close every connection and free.  Outcomes not yet delivered are
 * dropped; data still held is released by the servers after their take
 * grace period (release it first to free it at once).  NULL ok.  Loop
 * thread, outside the consumer's callbacks.  Before or after
 * xfer_engine_del of an engine whose base it runs on. */
XFER_API void xfer_consumer_del(xfer_consumer *c);

/*
 * Expect an id: it will get exactly one outcome, even if no shard ever
 * reports it ready (then unavailable, TIMEOUT, at deadline_ns) or it is
 * only cancelled (unavailable, CANCELLED).  deadline_ns is absolute on
 * the consumer's clock (xfer_consumer_now); 0: no deadline of its own.
 * Expecting an id already waiting sets its deadline.
 * Errors: XFER_ERR_INVALID_ARG (id 0), XFER_ERR_EXISTS (already reported
 * available), XFER_ERR_CANCELLED (tombstoned: already reported
 * unavailable, or cancelled), XFER_ERR_BUSY (max_ids).
 */
XFER_API int xfer_consumer_expect(xfer_consumer *c, uint64_t id,
                                  uint64_t deadline_ns);
/*
 * The consumer-side abort: cancel id on every shard, tombstone it, and
 * report it unavailable (CANCELLED) if it was waiting or expected.
 * Idempotent.  Errors: XFER_ERR_INVALID_ARG, XFER_ERR_STATE (already
 * reported available: release it), XFER_ERR_BUSY (tombstone cap).
 */
XFER_API int xfer_consumer_cancel(xfer_consumer *c, uint64_t id);
/*
 * Return every region of an available id to its shard.  After this call
 * the data may be overwritten.  Errors: XFER_ERR_INVALID_ARG,
 * XFER_ERR_NOT_FOUND (not held), XFER_ERR_STATE (its available callback
 * has not run yet).
 */
XFER_API int xfer_consumer_release(xfer_consumer *c, uint64_t id);

/* Any thread: the same, queued for the loop (errors there are counted in
 * stats, not returned).  Errors: XFER_ERR_INVALID_ARG, XFER_ERR_BUSY
 * (mailbox full). */
XFER_API int xfer_consumer_post_expect(xfer_consumer *c, uint64_t id,
                                       uint64_t deadline_ns);
XFER_API int xfer_consumer_post_cancel(xfer_consumer *c, uint64_t id);
XFER_API int xfer_consumer_post_release(xfer_consumer *c, uint64_t id);

/* True when shard k's connection is up (HELLO and SUBSCRIBE answered). */
XFER_API bool xfer_consumer_connected(const xfer_consumer *c, uint16_t k);
/* The consumer's clock, in nanoseconds.  Any thread. */
XFER_API uint64_t xfer_consumer_now(const xfer_consumer *c);

typedef struct xfer_consumer_stats {
    uint32_t links_up;
    uint64_t connects, connect_failures, losses, bad_frames;
    uint64_t events, ready_events, ended_events, dropped_events;
    uint64_t takes_sent, takes_failed, releases_sent, cancels_sent;
    uint64_t errors_received;
    uint64_t available, unavailable;
    uint64_t unavailable_timeout, unavailable_cancelled;
    uint64_t unavailable_expired, unavailable_conn_lost;
    uint64_t unavailable_take_failed;
    uint64_t late_ready;       /* readies answered with a cancel */
    uint64_t user_cancels, mail_refused;
    uint32_t pending;          /* ids waiting or expected */
    uint32_t held;             /* ids available and not yet released */
    uint64_t held_bytes;
    uint32_t tombstones;
} xfer_consumer_stats;

/* Counters: the fields of stats version `version` are written to *st
 * (borrowed), nothing past them; call it through the macro, which passes
 * XFER_CONSUMER_STATS_VERSION (docs/design.md section 4.1).
 * Errors: XFER_ERR_INVALID_ARG (NULL, unknown version; *st untouched). */
XFER_API int xfer_consumer_stats_get_versioned(const xfer_consumer *c,
                                              uint32_t version,
                                              xfer_consumer_stats *st);
#define xfer_consumer_stats_get(c, st)                                      \
    xfer_consumer_stats_get_versioned((c), XFER_CONSUMER_STATS_VERSION, (st))

/*
 * A control socket (xfer/ctl.h) answering with every id the consumer
 * waits for: {"kind":"readiness","id":..,"attempt":..,"state":"WAITING",
 * "age_ns":..,"nshards":S,"ready":"0,1","waiting":"2,3"} (state EXPECTED:
 * no shard reported yet; TAKING: "waiting" lists the takes outstanding).
 * `xfer-trace stuck --live PATH` reads it.  Close the ctl before
 * xfer_consumer_del.  Same errors as xfer_ctl_open.  Loop thread.
 */
XFER_API int xfer_consumer_ctl_open(xfer_consumer *c, const char *path,
                                    struct xfer_ctl **out);

#ifdef __cplusplus
}
#endif
#endif /* XFER_CONSUMER_H */
