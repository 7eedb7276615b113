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
 * Every cancel and release the consumer accepted reaches every shard it
 * concerns: made before a shard's connection is up, or while it is down,
 * it waits in that shard's queue (at most max_ids requests per shard; a
 * call that finds a queue at that cap fails XFER_ERR_BUSY and changes
 * nothing) and is sent when the connection is up; one sent and not
 * answered when the connection is lost is sent again on the next.  A
 * cancel the application made is sent again to a shard whose connection
 * comes back within tombstone_ttl_ns (it may be a restarted process that
 * forgot it); xfer_consumer_cancel_shards says which shards acknowledged
 * it.  To end with nothing left behind, xfer_consumer_close, wait for its
 * callback, then xfer_consumer_del.
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
#include "xfer/integrity.h"
#include "xfer/fsm.h"
#include "xfer/trace.h"
#include "xfer/xfer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;
struct xfer_dir;
struct xfer_ctl;
typedef struct xfer_consumer xfer_consumer;

#define XFER_CONSUMER_CONFIG_VERSION 3
#define XFER_CONSUMER_STATS_VERSION 3

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
    /* nshards addresses "a.b.c.d:port", "[v6]:port" or "host:port" (a
     * name resolved with getaddrinfo at creation); shard k is served at
     * addrs[k].  Copied.  Required unless `dir` is set. */
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
    /* Reconnects: the delay doubles from min to max per failure, each
     * drawn in [d/2, d]; a link that breaks before it stayed up for max
     * (a shard that closes after HELLO) does not reset it; one that
     * stayed up longer is redialled at once. */
    uint64_t reconnect_min_ns; /* 0: 10 ms */
    uint64_t reconnect_max_ns; /* 0: 1 s */
    uint32_t mailbox_cap;      /* 0: 65536 */
    xfer_trace_sink trace;     /* the readiness machine's records (tag them
                                  XFER_TRACE_SRC_CONSUMER) */
    xfer_clock_fn clock;       /* NULL: CLOCK_MONOTONIC */
    void *clock_ud;
    xfer_allocator alloc;      /* every allocation; zeroed: libc */
    /* Sessions and authentication (docs/operating.md, "On a
     * network"), as xfer_tcp_config's: every link says HELLO2 with
     * `session`, the same across reconnects. */
    uint8_t session[16];       /* all zero (the default): drawn from the
                                  OS CSPRNG at creation */
    const uint8_t *secret;     /* 16..256 bytes, copied; NULL: none */
    size_t secret_len;
    /* Version 2.  Every request a link sends (HELLO2 and SUBSCRIBE, TAKE,
     * RELEASE, CANCEL) is answered within this, or the link is taken
     * down as lost (takes outstanding fail XFER_ERR_CONN_LOST, so their
     * ids end unavailable; cancels and releases are sent again on the
     * next connection) and redialled: a shard that hangs with its socket
     * open cannot hold an id without an outcome.  0: 5 s. */
    uint64_t request_timeout_ns;
    /* Version 3 (issue 27): the consumer's own check on take
     * (docs/integrity.md).  With integrity XFER_INTEGRITY_CONSUMER and
     * pools set, every region taken whose READY event carried a CRC (its
     * shard checked it before READY) is checksummed again in
     * pools[k] + offset before the id is reported available: a region
     * that no longer matches (a stray write into the pool after READY)
     * is released and the id ends unavailable, reason XFER_ERR_CORRUPT,
     * naming the shard.  Any other value, or pools NULL: no check (a
     * version 2 config gets that).  The check reads the pools with the
     * CPU: a pool of a device kind (xfer_mem_of: CUDA or the test kind)
     * is refused by xfer_consumer_new, XFER_ERR_NOT_SUPPORTED; a device
     * shard checks its region after the copy, before READY. */
    uint8_t integrity;         /* xfer_integrity */
    void *const *pools;        /* nshards pointers: shard k's pool as
                                  mapped in this process (xfer_shm_pool
                                  of xferd --shm, or a TP worker's own
                                  buffer), at least its pool_bytes long;
                                  the array is copied, the memory
                                  borrowed until del; NULL: none */
    /* Version 3: the group found through the directory (xfer/dir.h,
     * docs/discovery.md).  With `dir` set, `addrs` may be NULL: the
     * consumer watches `dir_group` on `dir` (borrowed: it must outlive
     * the consumer); a shard's link dials where its entry says, and
     * moves (a lost link, redialled at once) when the shard registers at
     * a new address; a shard whose entry is gone is not redialled until
     * it registers again (its link goes down as a lost one).  `group` 0
     * takes xfer_dir_group_id(dir_group). */
    struct xfer_dir *dir;
    const char *dir_group;     /* copied */
} xfer_consumer_config;

/* Write the version and every default into *cfg.  NULL ok. */
XFER_API void xfer_consumer_config_default(xfer_consumer_config *cfg);

/*
 * Create and start connecting to every shard.  cfg copied.  *out
 * untouched on failure.  Errors: XFER_ERR_INVALID_ARG (NULL, unknown
 * version, no base, no callbacks, a bad address, nshards),
 * XFER_ERR_NOT_SUPPORTED (integrity CONSUMER with a pool of device
 * memory), XFER_ERR_NOMEM, XFER_ERR_IO (libevent).
 */
XFER_API int xfer_consumer_new(const xfer_consumer_config *cfg,
                               xfer_consumer **out);
/* Close every connection and free, at once.  Outcomes not yet delivered
 * are dropped; requests not yet sent or answered (the releases and
 * cancels of this loop turn included) are dropped too: data still held
 * is released by the servers after their take grace period, a cancel
 * never reaches its shard.  xfer_consumer_close first delivers them.  A
 * close not completed is dropped (its callback never runs).  NULL ok.
 * Loop thread, outside the consumer's callbacks (the close's excepted).
 * Before or after xfer_engine_del of an engine whose base it runs on. */
XFER_API void xfer_consumer_del(xfer_consumer *c);

/* The end of xfer_consumer_close: status 0 when every shard answered
 * every request the consumer had accepted, XFER_ERR_TIMEOUT when the
 * timeout came first, with `shards` (bit k: shard k) naming those that
 * still owed an answer (their link down, or the shard silent).  From the
 * loop; it may call xfer_consumer_del. */
typedef void (*xfer_consumer_closed_fn)(void *ud, int status,
                                        uint64_t shards);

/*
 * Close: end the consumer's use of every shard and deliver what it
 * accepted.  At once: no outcome is delivered any more and no link
 * callback runs; every id waiting or expected is cancelled on every shard
 * (without an outcome); every region the consumer holds is released,
 * those the application was told about and not yet released included
 * (stop reading them before this call), as is everything a take still in
 * flight pins when its answer comes.  Then `done` runs once, from the
 * loop, when every shard answered every cancel, release and take (shards
 * whose link is down are waited for, reconnecting as usual) or when
 * timeout_ns (relative; 0: none) passed.  Afterwards expect, cancel and
 * release fail XFER_ERR_SHUTDOWN (posted ones are refused on the loop,
 * counted in mail_refused); the connections stay until
 * xfer_consumer_del.  Errors (done is then never called):
 * XFER_ERR_INVALID_ARG (NULL c or done), XFER_ERR_SHUTDOWN (already
 * closed), XFER_ERR_IO (libevent).  Loop thread; also from an available
 * or unavailable callback (the outcomes queued behind it are then not
 * delivered: what they took is released).
 */
XFER_API int xfer_consumer_close(xfer_consumer *c, uint64_t timeout_ns,
                                 xfer_consumer_closed_fn done, void *ud);

/*
 * Expect an id: it will get exactly one outcome, even if no shard ever
 * reports it ready (then unavailable, TIMEOUT, at deadline_ns) or it is
 * only cancelled (unavailable, CANCELLED).  deadline_ns is absolute on
 * the consumer's clock (xfer_consumer_now); 0: no deadline of its own.
 * Expecting an id already waiting sets its deadline.  Nothing is sent:
 * made before the links are up it holds all the same.
 * Errors: XFER_ERR_INVALID_ARG (id 0), XFER_ERR_EXISTS (already reported
 * available), XFER_ERR_CANCELLED (tombstoned: already reported
 * unavailable, or cancelled), XFER_ERR_BUSY (max_ids), XFER_ERR_SHUTDOWN
 * (after close).
 */
XFER_API int xfer_consumer_expect(xfer_consumer *c, uint64_t id,
                                  uint64_t deadline_ns);
/*
 * The consumer-side abort: cancel id on every shard, tombstone it, and
 * report it unavailable (CANCELLED) if it was waiting or expected.
 * Idempotent (a repeat is sent to the shards that did not acknowledge
 * it yet).  Errors: XFER_ERR_INVALID_ARG, XFER_ERR_STATE (already
 * reported available: release it), XFER_ERR_BUSY (tombstone cap, a
 * shard's queue at its cap, or max_ids cancels remembered none of which
 * every shard answered yet), XFER_ERR_SHUTDOWN (after close).
 */
XFER_API int xfer_consumer_cancel(xfer_consumer *c, uint64_t id);
/*
 * Where the application's cancel of id stands on each shard (bit k: shard
 * k): *acked, the shards that acknowledged it (the id is cancelled there,
 * or tombstoned against any later reserve); *refused, those that answered
 * an error (XFER_ERR_BUSY: their tombstone table was full; the cancel is
 * not retried there until the application cancels again or the link comes
 * back).  A shard in neither has not answered yet: its link is not up, or
 * the cancel is on the wire.  A shard whose link comes back is asked again
 * and leaves *acked until it answers.  Either pointer may be NULL.
 * Errors: XFER_ERR_INVALID_ARG (NULL c, id 0), XFER_ERR_NOT_FOUND (no
 * cancel of id remembered: never made, or forgotten once every shard
 * answered it and newer cancels needed the room, or after
 * tombstone_ttl_ns).  Loop thread.
 */
XFER_API int xfer_consumer_cancel_shards(const xfer_consumer *c, uint64_t id,
                                         uint64_t *acked, uint64_t *refused);
/*
 * Return every region of an available id to its shard.  After this call
 * the data may be overwritten.  Errors: XFER_ERR_INVALID_ARG,
 * XFER_ERR_NOT_FOUND (not held), XFER_ERR_STATE (its available callback
 * has not run yet), XFER_ERR_BUSY (a shard's queue at its cap: still
 * held), XFER_ERR_SHUTDOWN (after close, which released it).
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
    /* Version 2 (issue 23): */
    uint64_t requests_queued;  /* cancels and releases waiting for a link
                                  to be up, every shard summed */
    uint64_t requests_resent;  /* queued again after a connection loss */
    uint64_t cancels_replayed; /* sent again to a shard that came back */
    uint64_t requests_dropped; /* could be neither sent nor queued (no
                                  memory) */
    uint64_t reconnects;       /* dials after a link's first */
    uint64_t request_timeouts; /* links taken down for a request that
                                  was not answered within
                                  request_timeout_ns */
    /* Version 3: the check on take (integrity CONSUMER). */
    uint64_t crc_checked;      /* regions checksummed on take */
    uint64_t corrupt;          /* of them, no longer the producer's bytes:
                                  released, the id unavailable CORRUPT */
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
