/*
 * xfer/server.h - the shard server: one or more consumer shards
 * (xfer/shard.h) of one group, served over TCP with the wire protocol
 * (README.md, "Wire protocol"), on the caller's event_base, over memory
 * the caller provides.
 *
 * A tensor-parallel worker embeds it over its own buffer (examples/
 * server.c); xferd is a thin command line over it, serving pools it
 * places in POSIX shared memory (xfer/shm.h) so consumer processes on the
 * host read taken data in place.
 *
 * What it keeps true (docs/design.md sections 2.2 and 5):
 *  - peer input is never trusted: a frame the decoder refuses, or a request
 *    that makes no sense on its connection, closes that connection (counted
 *    per reason, reported through the log callback) and touches nothing
 *    else; a well-formed request the shard refuses gets an ERROR reply and
 *    the connection stays;
 *  - a write that began on a shard always ends on it (I4): with its last
 *    byte, or failed when its connection goes first;
 *  - bytes from the network land only inside the reserved region they were
 *    written to; nothing outside the caller's shard memory is ever written;
 *  - TAKEN data belongs to the consumer that took it.  When that consumer's
 *    connection closes, the data stays TAKEN for take_grace_ns (any
 *    connection may still RELEASE it meanwhile); then the server releases
 *    it itself, so a consumer killed with kill -9 leaks nothing for good;
 *  - a subscriber misses nothing that waits for it: after SUBSCRIBE_ACK
 *    the server sends a READY event for every reservation already READY
 *    on the shard (a consumer that reconnects sees them again; its
 *    readiness machine absorbs a repeat);
 *  - a connection whose unread replies pass 8 MiB stops being read until
 *    they drain, and a subscriber that falls that far behind is dropped.
 *
 * Memory lifetime: each shard's memory {base, len} is borrowed.  It must
 * stay valid, and the caller must not write to it, until xfer_server_del
 * returns.  Once a drain has completed (the drain callback ran with
 * drained true) no byte from the network lands in it any more, so the
 * caller may write it again, at the price of the data consumers still hold
 * there (READY, TAKEN).  The server never frees or unmaps it.
 *
 * Threads: everything here runs on the loop thread of cfg.base, and every
 * callback (log, drain) comes from that loop, never from inside a call the
 * caller made.  The process must ignore SIGPIPE (libevent writes with
 * writev); the library never changes signal dispositions.
 */
#ifndef XFER_SERVER_H
#define XFER_SERVER_H

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
typedef struct xfer_server xfer_server;

#define XFER_SERVER_CONFIG_VERSION 1
#define XFER_SERVER_STATS_VERSION 1

/* One line about bad input or a dropped connection ("conn 3 bad frame
 * (BAD_MAGIC), closed"), without a newline; `line` is borrowed until
 * return.  Loop thread.  The server reports at most 200 lines. */
typedef void (*xfer_server_log_fn)(void *ud, const char *line);
/* A drain ended: drained is true when no reservation was being reserved or
 * written any more, false when drain_timeout_ns passed first. */
typedef void (*xfer_server_drain_cb)(void *ud, bool drained);

/* One hosted shard over the caller's memory. */
typedef struct xfer_server_shard {
    uint16_t index;        /* the shard's index in the group (< 64) */
    void *base;            /* its pool: borrowed (see "Memory lifetime") */
    uint64_t len;          /* bytes at base; > 0 */
    xfer_trace_sink trace; /* fn NULL: the config's trace sink */
} xfer_server_shard;

typedef struct xfer_server_config {
    uint32_t version;           /* XFER_SERVER_CONFIG_VERSION */
    struct event_base *base;    /* required; borrowed until del */
    const char *addr;           /* numeric IPv4/IPv6 to bind; copied;
                                   NULL: "127.0.0.1" */
    uint16_t port;              /* 0: an ephemeral port (xfer_server_port) */
    uint32_t group;             /* a HELLO must name it */
    uint16_t nshards;           /* 1..XFER_MAX_SHARDS */
    const xfer_server_shard *shards; /* nshards entries, distinct indexes;
                                        copied (the memory is borrowed) */
    uint32_t max_reservations;  /* per shard; 0: 4096 */
    uint32_t max_tombstones;    /* per shard; 0: 4 * max_reservations */
    uint64_t lease_ttl_ns;      /* 0: 10 s */
    uint64_t tombstone_ttl_ns;  /* 0: 2 * lease_ttl_ns */
    uint64_t take_grace_ns;     /* TAKEN data of a closed consumer
                                   connection is released after this;
                                   0: 30 s */
    uint64_t drain_timeout_ns;  /* 0: lease_ttl_ns */
    bool consume;               /* a sink for tests and benchmarks: take
                                   and release every READY at once */
    uint32_t fault_ppm;         /* tests: per op of a producer connection,
                                   the chance (in a million) of a refusal
                                   or an "applied, reported failed" */
    uint32_t drop_ppm;          /* tests: per op of a producer connection,
                                   the chance of dropping it */
    uint64_t fault_seed;        /* 0: a fixed seed */
    xfer_trace_sink trace;      /* for shards without their own sink */
    xfer_server_log_fn log;     /* NULL: quiet */
    void *log_ud;
    xfer_clock_fn clock;        /* NULL: CLOCK_MONOTONIC */
    void *clock_ud;
    xfer_allocator alloc;       /* every allocation of the server and its
                                   shards; zeroed: libc */
} xfer_server_config;

/* Write the version and every default into *cfg (base, shards and nshards
 * stay to be set).  NULL ok. */
XFER_API void xfer_server_config_default(xfer_server_config *cfg);

/*
 * Create the shards, bind and listen.  cfg and its shard table are copied.
 * On success writes *out and returns 0; *out untouched on failure.
 * Errors: XFER_ERR_INVALID_ARG (NULL, an unknown version, no base, a bad
 * address, nshards out of range, a shard without memory, duplicate or
 * out-of-range indexes), XFER_ERR_NOMEM, XFER_ERR_IO (bind or listen
 * failed: errno tells why).
 */
XFER_API int xfer_server_new(const xfer_server_config *cfg,
                             xfer_server **out);
/* Close every connection (writes in flight end failed), free the shards
 * and the server.  The shard memory is left as it is.  NULL ok.  Loop
 * thread, outside any callback of the server. */
XFER_API void xfer_server_del(xfer_server *s);

/* The port bound (the ephemeral one after port 0). */
XFER_API uint16_t xfer_server_port(const xfer_server *s);

/*
 * Drain: stop accepting, refuse new reserves (XFER_ERR_SHUTDOWN), and call
 * cb(ud, drained) once, from the loop, when no reservation is reserved or
 * being written, or when drain_timeout_ns passed.  READY and TAKEN data
 * stay served (take, release).  Errors: XFER_ERR_INVALID_ARG,
 * XFER_ERR_STATE (already draining).
 */
XFER_API int xfer_server_drain(xfer_server *s, xfer_server_drain_cb cb,
                               void *ud);
/* True when no reservation of any hosted shard is RESERVED, WRITING or
 * waiting for a write to end. */
XFER_API bool xfer_server_drained(const xfer_server *s);

/* Counters: of hosted shard `index` (its index in the group), or of every
 * hosted shard summed with index XFER_SHARD_NONE.  Versioned like the
 * config (docs/design.md section 4.1): the fields of stats version
 * `version` are written to *st (borrowed), nothing past them; call it
 * through the macro, which passes XFER_SERVER_STATS_VERSION.
 * Errors: XFER_ERR_INVALID_ARG (NULL, unknown version; *st untouched),
 * XFER_ERR_NOT_FOUND (no such hosted shard). */
#define XFER_SERVER_BAD_REASONS 9
typedef struct xfer_server_stats {
    uint16_t nshards;           /* hosted shards counted */
    uint32_t conns;             /* connections open (whole server) */
    uint64_t pool_bytes, bytes_in_use;
    uint64_t live, tombstones;
    uint64_t reserves, refused, writes, commits, cancels, expiries;
    uint64_t takes, releases, stale, illegal;
    uint64_t events_sent, write_bytes;
    uint64_t taken_now;          /* TAKEN regions held by consumers */
    uint64_t orphaned_now;       /* of them, whose taker's connection is
                                    gone (grace timer running) */
    uint64_t grace_released;     /* released by the grace timer */
    /* whole server: */
    uint64_t bad_frames;
    uint64_t bad_by_reason[XFER_SERVER_BAD_REASONS];
    uint64_t errors_sent, faults, subs_dropped;
} xfer_server_stats;

XFER_API int xfer_server_stats_get_versioned(const xfer_server *s,
                                            uint16_t index, uint32_t version,
                                            xfer_server_stats *st);
#define xfer_server_stats_get(s, index, st)                                 \
    xfer_server_stats_get_versioned((s), (index), XFER_SERVER_STATS_VERSION, \
                                    (st))
/* The name of bad-frame reason i ("BAD_MAGIC", ...), never NULL. */
XFER_API const char *xfer_server_bad_reason_name(unsigned i);

/* The hosted shards: their count, and the group index of the i-th. */
XFER_API uint16_t xfer_server_nshards(const xfer_server *s);
XFER_API uint16_t xfer_server_shard_index(const xfer_server *s, uint16_t i);

/*
 * A control socket (xfer/ctl.h) answering with every open reservation of
 * every hosted shard.  `s` is borrowed: close the ctl (xfer_ctl_close)
 * before xfer_server_del.  Same errors as xfer_ctl_open.  Loop thread.
 */
XFER_API int xfer_server_ctl_open(xfer_server *s, const char *path,
                                  struct xfer_ctl **out);

#ifdef __cplusplus
}
#endif
#endif /* XFER_SERVER_H */
