/*
 * xfer/tcp.h - the TCP transport: the producer side of the wire protocol
 * (see docs/wire.md), talking to consumer shards served by
 * xferd, one connection per shard, on the engine's event base.
 *
 * Write payloads leave by reference from the staging pool (no copy on the
 * producer); a write completes only when the shard acknowledges that its
 * bytes were applied, and its result (any result) is delivered only once
 * libevent no longer references the staging bytes.  Ops wait on a
 * connection whose output is above the high watermark until it drains
 * below the low one.  A lost connection fails every op outstanding on that
 * shard with XFER_ERR_CONN_LOST (as results on the loop), and the
 * transport reconnects: at once after the loss of a connection that had
 * stayed up for reconnect_max_ns, else after a backoff that doubles from
 * reconnect_min_ns to reconnect_max_ns per failure, each delay drawn in
 * [d/2, d] (jitter), so a shard that closes right after HELLO is redialled
 * about once per reconnect_max_ns, not in a loop; while a shard is down
 * (the backoff runs) its ops fail at once with XFER_ERR_CONN_LOST.  A
 * reply the transport refuses (the wrong kind, id or attempt for its
 * request, a reservation without an id, an error code outside the band
 * shards may send) fails its op with XFER_ERR_PROTO and closes that
 * connection: every started op ends, whatever a shard answers.  Aborting a
 * write whose bytes are still queued waits up to abort_grace_ns for
 * libevent to let go of them, then resets that connection (the only way to
 * take queued bytes back).
 *
 * One thread: the loop thread of `base`.  libevent writes to sockets with
 * writev(), so the process must ignore SIGPIPE (signal(SIGPIPE, SIG_IGN))
 * before a peer can close a connection; the library never changes signal
 * dispositions itself.
 */
#ifndef XFER_TCP_H
#define XFER_TCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/errors.h"
#include "xfer/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;
struct xfer_dir;
typedef struct xfer_tcp xfer_tcp;

/*
 * Configuration; copied at creation.  Start from xfer_tcp_config_default()
 * and set what differs (nshards and addrs at least).  `version` says which
 * layout the caller was built with (docs/design.md section 4.1):
 * xfer_tcp_new() reads only the fields of that version.  Zero fields take
 * defaults too.
 */
#define XFER_TCP_CONFIG_VERSION 2
typedef struct xfer_tcp_config {
    uint32_t version;          /* XFER_TCP_CONFIG_VERSION */
    uint16_t nshards;          /* 1..XFER_MAX_SHARDS; required (default 0) */
    /* nshards addresses "a.b.c.d:port", "[v6]:port" or "host:port" (a
     * name is resolved with getaddrinfo once, at creation); shard k is
     * served at addrs[k] (an xferd hosting shard k).  The array and
     * strings are copied.  Required unless `dir` is set (default NULL). */
    const char *const *addrs;
    uint32_t group;            /* sent in HELLO; xferd --group must match;
                                  default 0 */
    uint64_t connect_timeout_ns; /* default 2 s */
    uint64_t reconnect_min_ns;   /* first retry after a failed connect;
                                    default 10 ms, doubled per failure */
    uint64_t reconnect_max_ns;   /* default 1 s */
    size_t high_watermark;     /* queued output bytes per connection above
                                  which new ops wait; default 32 MiB */
    size_t low_watermark;      /* waiting ops go out below this; 0 (the
                                  default): high / 4 */
    uint64_t abort_grace_ns;   /* default 1 s (see above) */
    xfer_allocator alloc;      /* every allocation of the transport
                                  (libevent's own excepted); zeroed (the
                                  default): libc */
    /* Sessions and authentication (docs/operating.md, "On a
     * network").  Every connection says HELLO2 with `session`, the same
     * across reconnects, so the shards keep our reservations ours. */
    uint8_t session[16];       /* all zero (the default): drawn from the
                                  OS CSPRNG at creation */
    const uint8_t *secret;     /* the shards' shared secret, 16..256 bytes,
                                  copied; NULL (the default): none, and a
                                  shard that challenges us is refused */
    size_t secret_len;
    /* Version 2: the group found through the directory (xfer/dir.h,
     * docs/discovery.md).  With `dir` set, `addrs` may be NULL: the
     * transport watches `dir_group` on `dir` (borrowed: it must outlive
     * the transport) and follows it.  A shard registered at a new
     * address is redialled there (its outstanding ops fail with
     * XFER_ERR_CONN_LOST, as at a lost connection); a shard whose entry
     * vanished is gone: its outstanding ops fail at once with
     * XFER_ERR_SHARD_GONE, and so do new ops until it registers again
     * (before the first entry arrives, every shard is gone).  `group` 0
     * takes xfer_dir_group_id(dir_group).  Entries of shards >= nshards
     * are ignored. */
    struct xfer_dir *dir;
    const char *dir_group;     /* copied */
} xfer_tcp_config;

/* Write version 1 and every default above into *cfg (the derived one as
 * 0).  `cfg` borrowed; NULL is ignored. */
XFER_API void xfer_tcp_config_default(xfer_tcp_config *cfg);

/* Counters, read with xfer_tcp_stats_get(); versioned like the config
 * (the macro passes XFER_TCP_STATS_VERSION). */
#define XFER_TCP_STATS_VERSION 4
typedef struct xfer_tcp_stats {
    uint64_t connects, connect_failures, losses, hello_refused;
    uint64_t ops_started, ops_sent, ops_waited; /* waited: watermark/connect */
    uint64_t results, failed_conn_lost, failed_down, aborted;
    uint64_t refs_outstanding; /* staging references libevent still holds */
    uint64_t bytes_referenced, bad_frames, resets;
    /* Version 2.  bad_replies: well-framed replies refused (the wrong kind,
     * id or attempt for their request, a reservation without an id, an
     * error code outside the band shards may send); each failed its op
     * with XFER_ERR_PROTO and closed its connection.  reconnects: dials
     * after a connection's first (each after the backoff, or at once
     * when the lost connection had stayed up for reconnect_max_ns). */
    uint64_t bad_replies, reconnects;
    /* Version 3 (integrity, docs/integrity.md): COMMITs and EAGERs sent
     * with the slice's CRC32C, to shards whose HELLO_ACK said they check
     * (a shard without integrity gets none: that link is unchecked). */
    uint64_t crcs_sent;
    /* failed_gone: ops failed with XFER_ERR_SHARD_GONE; moves: shards
     * given a new address (xfer_tcp_set_shard); gones: shards that left
     * (the directory, docs/discovery.md). */
    uint64_t failed_gone, moves, gones;
    /* Version 4.  crcs_given: of crcs_sent, those the caller gave
     * (xfer_engine_submit_crc, xfer_engine_stream_seal_crc), sent without
     * reading the staging; crcs_sent - crcs_given were computed here. */
    uint64_t crcs_given;
} xfer_tcp_stats;

/*
 * Create on `base` and start
 * connecting to every shard.  cfg copied; NULL means all defaults (and so
 * fails: nshards and addrs are required).  *out untouched on failure.
 * `base`: a base the caller made is borrowed and must outlive the
 * transport; the base of an engine that made its own (xfer_engine_base) is
 * held by the transport until xfer_tcp_del, so the engine and the
 * transport may be deleted in either order.
 * Errors: XFER_ERR_INVALID_ARG (a version this library does not know, a
 * bad address, counts), XFER_ERR_NOMEM, XFER_ERR_IO (libevent).
 */
XFER_API int xfer_tcp_new(struct event_base *base, const xfer_tcp_config *cfg,
                 xfer_tcp **out);
/* Close every connection and free.  NULL ok.  Loop thread, outside the
 * loop's callbacks.  Either order with the engine works: after
 * xfer_engine_del (the engine detached it) or if never attached, it is
 * freed now; while still attached, the transport keeps serving the engine
 * and is freed by xfer_engine_del's detach (do not use `t` after this
 * call either way).  A transport following a directory (cfg.dir) stops
 * its watch here in both cases, so the directory may be deleted right
 * after this call.  Staging references libevent still holds are released
 * when the base finishes closing the connections. */
XFER_API void xfer_tcp_del(xfer_tcp *t);

/* The ops table + self for xfer_engine_add_group().  The engine does not
 * free the transport; call xfer_tcp_del, before or after xfer_engine_del
 * (see xfer_tcp_del). */
XFER_API xfer_transport xfer_tcp_transport(xfer_tcp *t);

/* Counters: the fields of stats version `version` are copied into *st
 * (borrowed), nothing past them is written.  Call it through the macro.
 * Errors: XFER_ERR_INVALID_ARG (NULL argument, unknown version; *st
 * untouched). */
XFER_API int xfer_tcp_stats_get_versioned(const xfer_tcp *t, uint32_t version,
                                          xfer_tcp_stats *st);
#define xfer_tcp_stats_get(t, st)                                           \
    xfer_tcp_stats_get_versioned((t), XFER_TCP_STATS_VERSION, (st))
/* True when shard's connection is up (HELLO answered). */
XFER_API bool xfer_tcp_connected(const xfer_tcp *t, uint16_t shard);
/*
 * Shard `shard` is now served at `addr` ("ip:port", "[v6]:port" or
 * "host:port", copied), or, with addr NULL, left its group: what the
 * directory binding calls, and callable by an embedder that keeps its own
 * membership.  A new address closes the connection (its ops fail with
 * XFER_ERR_CONN_LOST) and dials the new one at once; the same address
 * changes nothing, except that a gone shard is dialled again.  Gone: the
 * connection closes, every op outstanding on it fails with
 * XFER_ERR_SHARD_GONE (results on the loop), and new ops fail so at once,
 * until an address is set again.  Loop thread.
 * Errors: XFER_ERR_INVALID_ARG (NULL t, shard out of range, an address
 * that does not parse or resolve).
 */
XFER_API int xfer_tcp_set_shard(xfer_tcp *t, uint16_t shard, const char *addr);
/* True when shard `shard` is gone (xfer_tcp_set_shard with NULL, or not
 * registered yet in a directory-driven transport). */
XFER_API bool xfer_tcp_gone(const xfer_tcp *t, uint16_t shard);

/* Ops started and not yet answered (every shard). */
XFER_API uint32_t xfer_tcp_outstanding(const xfer_tcp *t);
/* Test hook: drop shard's connection as if the network lost it. */
XFER_API void xfer_tcp_drop(xfer_tcp *t, uint16_t shard);

/*
 * Parse "host:port,host:port,..." (numeric addresses or host names) into `addrs`, an
 * array of `max` pointers into `buf` (a copy of `list` of `cap` bytes that
 * the caller keeps alive).  Returns the number of addresses (>= 1) or
 * XFER_ERR_INVALID_ARG.  Helper for tools (demo, bench): pass the result
 * as xfer_tcp_config.addrs / nshards.
 */
XFER_API int xfer_tcp_split_addrs(const char *list, char *buf, size_t cap,
                         const char **addrs, int max);

#ifdef __cplusplus
}
#endif
#endif /* XFER_TCP_H */
