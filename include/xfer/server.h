/*
 * xfer/server.h - the shard server: one or more consumer shards
 * (xfer/shard.h) of one group, served over TCP with the wire protocol
 * (docs/wire.md), on the caller's event_base, over memory
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
 *  - every reservation belongs to the producer session that made it (the
 *    session a HELLO2 names, which survives the client's reconnects; a v1
 *    HELLO's session is its connection's alone): write, commit and cancel
 *    from another session answer XFER_ERR_PERM.  Only a producer may
 *    reserve, write and commit (and cancel its own); only a consumer may
 *    subscribe, take, release and cancel as the consumer (attempt 0);
 *    anything else answers XFER_ERR_PERM.  Each session's reservations,
 *    bytes and tombstones count against its own quota per shard
 *    (session_max_*: XFER_ERR_BUSY for it alone), and those of every
 *    session of one peer address together against that peer's quota
 *    (peer_max_*), a consumer's cancels included; one address holds at
 *    most max_peer_sessions sessions;
 *  - with a secret, a peer is served only after HELLO2's challenge-
 *    response (wire.h): a v1 HELLO, a bad proof or a STATUS before it
 *    answers ERROR (XFER_ERR_AUTH) or closes; reservation ids and
 *    session nonces come from the OS CSPRNG;
 *  - TAKEN data belongs to the consumer session that took it.  When that
 *    session's last connection closes, the data stays TAKEN for
 *    take_grace_ns (a consumer connection may still RELEASE it meanwhile;
 *    a connection of the same session back in time keeps it TAKEN); then
 *    the server releases it itself, so a consumer killed with kill -9
 *    leaks nothing for good;
 *  - a subscriber misses nothing that waits for it: after SUBSCRIBE_ACK
 *    the server sends a READY event for every reservation already READY
 *    on the shard (a consumer that reconnects sees them again; its
 *    readiness machine absorbs a repeat);
 *  - a connection whose unread replies pass 8 MiB stops being read until
 *    they drain, and a subscriber that falls that far behind is dropped;
 *    so is one with more than 1 MiB unread while every connection's
 *    output together passes out_max_bytes;
 *  - nothing a peer does holds a connection or a region for good: the
 *    HELLO, header, idle and write timeouts close it (a stalled write, or
 *    one below the rate floor write_min_rate, ends failed), at most max_conns are open (more are closed at once),
 *    and at the fd limit accepting pauses for accept_retry_ns while the
 *    open connections are served;
 *  - a peer's half-close lets the replies already queued go out first.
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

#include "xfer/dir.h"
#include "xfer/errors.h"
#include "xfer/fault.h"
#include "xfer/fsm.h"
#include "xfer/mem.h"
#include "xfer/integrity.h"
#include "xfer/trace.h"
#include "xfer/xfer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;
struct xfer_ctl;
typedef struct xfer_server xfer_server;

#define XFER_SERVER_CONFIG_VERSION 4
#define XFER_SERVER_STATS_VERSION 3

/* One line about bad input or a dropped connection ("conn 3 bad frame
 * (BAD_MAGIC), closed"), without a newline; `line` is borrowed until
 * return.  Loop thread.  Rate-limited (log_interval_ns), never cut off:
 * lines over the limit are counted and the count is reported. */
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
    struct event_base *base;    /* required; a base the caller made is
                                   borrowed until del; an engine's own
                                   base (xfer_engine_base) is held until
                                   del, so the engine may go first */
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
    uint64_t take_grace_ns;     /* TAKEN data of a consumer session
                                   with no connection is released after
                                   this; 0: 30 s */
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
    /* Sessions, authentication, quotas, timeouts and caps (docs/
     * operating.md; every 0 means the default). */
    const uint8_t *secret;      /* the shared secret of HELLO2's challenge-
                                   response; copied; NULL: none (then only
                                   a loopback address may be bound unless
                                   insecure) */
    size_t secret_len;          /* 16..256 bytes when secret is set */
    bool insecure;              /* bind a non-loopback address without a
                                   secret */
    uint16_t max_sessions;      /* 0: 1024 */
    uint64_t session_grace_ns;  /* a session without a connection is kept
                                   (its reconnect finds it) this long;
                                   0: take_grace_ns */
    uint32_t session_max_reservations; /* per session and shard; 0: a
                                          quarter of max_reservations */
    uint64_t session_max_bytes; /* per session and shard; 0: a quarter of
                                   the shard's pool */
    uint32_t session_max_tombstones; /* per session and shard, counting
                                        the slots its live records hold;
                                        0: a quarter of max_tombstones */
    uint64_t hello_timeout_ns;  /* a connection without a finished HELLO
                                   (and AUTH) is closed after this; 0: 5 s */
    uint64_t header_timeout_ns; /* a frame begun and not finished, or
                                   replies a closing peer does not read;
                                   0: 10 s */
    uint64_t idle_timeout_ns;   /* no request for this long (subscribers
                                   excepted): closed; 0: 300 s */
    uint64_t write_timeout_ns;  /* a streamed WRITE that receives no byte
                                   for this long ends failed and its
                                   connection closes; 0: 10 s */
    uint32_t max_conns;         /* more are closed at accept; 0: 4096 */
    uint64_t out_max_bytes;     /* replies and events queued on every
                                   connection together: past it, a peer
                                   with more than 1 MiB unread stops being
                                   read, a subscriber is dropped;
                                   0: 64 MiB */
    uint64_t accept_retry_ns;   /* at the fd limit, accepting pauses this
                                   long; 0: 100 ms */
    uint64_t log_interval_ns;   /* at most 20 log lines per interval, the
                                   rest counted and reported; 0: 1 s */
    /* Version 2 (issue 24): slow peers and quotas per peer.  A version 1
     * config gets their defaults. */
    uint64_t write_min_rate;    /* bytes/s a streamed WRITE must receive
                                   over each write_timeout_ns window (or
                                   the rest of its data, if less): a
                                   write slower than this ends failed and
                                   its connection closes, so a trickle
                                   cannot hold a region past its lease;
                                   0: 64 KiB/s */
    uint16_t max_peer_sessions; /* sessions one peer address may hold
                                   (bound, or kept for their grace, or
                                   whose records and tombstones have not
                                   all ended): past it a new session of
                                   that address answers XFER_ERR_BUSY,
                                   so one client cannot fill the session
                                   table; 0: max_sessions / 16, at least
                                   1 */
    /* What the sessions of one peer address hold together per shard
     * (each session's own quota still applies): past it a reserve, or a
     * cancel that needs a new tombstone, answers XFER_ERR_BUSY for that
     * peer's sessions only.  0: half of max_reservations, of the shard's
     * pool, of max_tombstones, or the session's quota if that is more. */
    uint32_t peer_max_reservations;
    uint64_t peer_max_bytes;
    uint32_t peer_max_tombstones;
    /* Version 3 (issue 25; docs/gpu.md): the memory kind of each shard's
     * pool, nshards entries parallel to shards (copied); NULL (and a
     * version 1 or 2 config): every pool host memory.  A device pool
     * (CUDA, TESTDEV) is never read or written by the server directly:
     * a WRITE lands in a host bounce buffer and is copied host -> device
     * on a stream the server owns; the write ends, and is acknowledged,
     * only once that copy completed, so READY (at commit) always follows
     * it and a region is never freed under a copy into it.  A failed copy
     * fails the write (XFER_ERR_COPY).  Such a shard does not offer the
     * eager path.  xfer_server_new answers XFER_ERR_NOT_SUPPORTED where
     * the kind is not available here (xfer_mem_available) and
     * XFER_ERR_INVALID_ARG for a pool that is not memory of its kind. */
    const xfer_mem *shard_mem;
    /* Version 3 (issue 27): end-to-end integrity (xfer/integrity.h,
     * docs/integrity.md).  A version 2 config gets the default. */
    uint8_t integrity;          /* xfer_integrity: SHARD or CONSUMER: the
                                   hosted shards say so in HELLO_ACK and
                                   check every COMMIT_CRC / EAGER_CRC
                                   before READY (a mismatch answers
                                   XFER_ERR_CORRUPT and commits nothing),
                                   and READY events carry the CRC; OFF:
                                   neither (a producer's CRC is then
                                   ignored); 0: XFER_INTEGRITY_DEFAULT_MODE */
    /* Version 4 (issue 26): lease refreshes (docs/streaming.md).  The
     * hosted shards grant a producer's REFRESH of its own reservation
     * (HELLO_ACK flag XFER_WIRE_HELLO_REFRESH) up to this long after its
     * reserve (xfer_shard_config.max_hold_ms: whole milliseconds, rounded
     * up); 0: 6 * lease_ttl_ns.  At least lease_ttl_ns and at most
     * 2^32 - 1 ms (else XFER_ERR_INVALID_ARG). */
    uint64_t max_hold_ns;
} xfer_server_config;

/* Write the version and every default into *cfg (base, shards and nshards
 * stay to be set).  NULL ok. */
XFER_API void xfer_server_config_default(xfer_server_config *cfg);

/*
 * Create the shards, bind and listen.  cfg and its shard table are copied.
 * On success writes *out and returns 0; *out untouched on failure.
 * Errors: XFER_ERR_INVALID_ARG (NULL, an unknown version, no base, a bad
 * address, nshards out of range, a shard without memory, duplicate or
 * out-of-range indexes, a secret of a bad length), XFER_ERR_AUTH (a
 * non-loopback address without a secret, and not insecure), XFER_ERR_NOMEM,
 * XFER_ERR_IO (bind or listen failed: errno tells why, and the log callback
 * gets one line naming the call, the address and the OS's reason, e.g.
 * "bind 127.0.0.1:7470: Address already in use"; or the OS CSPRNG gave
 * nothing).
 */
XFER_API int xfer_server_new(const xfer_server_config *cfg,
                             xfer_server **out);
/* Close every connection (writes in flight end failed), free the shards
 * and the server.  The shard memory is left as it is.  NULL ok.  Loop
 * thread, outside any callback of the server.  Before or after
 * xfer_engine_del of an engine whose base it runs on. */
XFER_API void xfer_server_del(xfer_server *s);

/*
 * Fault rules (xfer/fault.h, the loop transport's, matched by the same
 * code), for testing a producer against a shard that fails: each op a
 * producer connection sends (RESERVE, WRITE, COMMIT, CANCEL, EAGER; a
 * consumer's ops meet no rule) is matched by its op, the shard it is for
 * (its index in the group), its transfer id, and the rule's count and
 * probability (drawn from fault_seed) when it arrives.  Its fate is a
 * real shard's, and no invariant above is broken for it:
 *  - FAIL: not applied; answered ERROR with the rule's status (a WRITE's
 *    data is read and dropped), so the producer rolls back;
 *  - APPLIED_LOST: applied, answered ERROR with the rule's status;
 *  - DROP: not applied and never answered (the connection stays): the
 *    producer's deadline, or its connection's loss, ends the op;
 *  - DELAY: a RESERVE, COMMIT, CANCEL or EAGER is held on a timer of the
 *    loop (which runs on) and applied only when it passes, as if it
 *    arrived then; later requests on the connection are not held behind
 *    it.  A WRITE's data lands as it comes, but its end (the shard's
 *    write end and the WRITE_ACK) is held: meanwhile the write is in
 *    flight on the shard, so a cancel or a lease waits for it (I4).
 *    Delays run by the server's clock (cfg.clock).  What a connection
 *    has held goes with it when it closes (a held write end then ends
 *    failed), as a request in flight on a lost connection would.
 * Over RDMA the server never sees a write: a WRITE rule fires there
 * never.  The seeded mix (fault_ppm, drop_ppm) is drawn only for an op
 * no rule gave a fate.  The counters rules_fired, ops_delayed and
 * delayed_now (stats version 2) follow them, per shard.
 *
 * xfer_server_add_rule - append a copy of `rule` (borrowed); it applies
 * from the next op that arrives.  Loop thread.  Errors:
 * XFER_ERR_INVALID_ARG (NULL, a bad kind, op, probability or a positive
 * status), XFER_ERR_BUSY (XFER_FAULT_MAX_RULES held).
 *
 * xfer_server_clear_rules - drop every rule; ops held already run as
 * decided.  NULL ok.  Loop thread.
 */
XFER_API int xfer_server_add_rule(xfer_server *s,
                                  const xfer_fault_rule *rule);
XFER_API void xfer_server_clear_rules(xfer_server *s);

/* The port bound (the ephemeral one after port 0). */
XFER_API uint16_t xfer_server_port(const xfer_server *s);

/*
 * Register every hosted shard of s in the directory of groups in etcd
 * (xfer/dir.h, docs/discovery.md) as a member of `group`, so producers
 * and consumers created from the group name find it: one entry per
 * hosted shard {index, addr, xfer_server_port, transports: TCP, and RDMA
 * for a server of xfer_server_new_rdma, epoch} under one lease of
 * dc->lease_ttl_s seconds kept alive on the server's loop (the server
 * owns the directory client: xfer_server_dir).  addr: `advertise` (a host
 * name or numeric address peers reach s at), else the address bound.
 * epoch: it must grow at every start of the shard; 0: the time now in
 * microseconds (CLOCK_REALTIME).  dc (its strings too), group and
 * advertise are copied.
 *
 * From then on xfer_server_drain leaves the group first: the entries are
 * deleted, and only once etcd answered (or the directory's request
 * timeout passed: the entries then go with their lease, and one line is
 * logged) does the drain close the listener.  xfer_server_del without a
 * drain leaves the entries to their lease, as a crash does.
 * Once per server, before any drain.  Loop thread.
 * The server's cfg.group must be the group's HELLO number,
 * xfer_dir_group_id(group), as the producers created from it say.
 * Errors: XFER_ERR_INVALID_ARG (NULL s, dc or group; a group whose
 * xfer_dir_group_id is not cfg.group; no advertise while
 * bound to a wildcard address; an address of XFER_DIR_ADDR_MAX bytes or
 * more), XFER_ERR_STATE (registered already, or draining), and those of
 * xfer_dir_new and xfer_dir_register (a bad group name, dc's endpoints).
 */
XFER_API int xfer_server_register(xfer_server *s, const xfer_dir_config *dc,
                                  const char *group, const char *advertise,
                                  uint64_t epoch);
/* The directory client xfer_server_register made (borrowed: it lives
 * until xfer_server_del), for its state and metrics
 * (xfer_dir_state_get, xfer_metrics_add_dir); NULL when not registered. */
XFER_API xfer_dir *xfer_server_dir(const xfer_server *s);

/*
 * Drain: close the listener, refuse new reserves (XFER_ERR_SHUTDOWN), and call
 * cb(ud, drained) once, from the loop, when no reservation is reserved or
 * being written, or when drain_timeout_ns passed.  READY and TAKEN data
 * stay served (take, release).  A server registered in a group
 * (xfer_server_register) first deletes its entries and closes the
 * listener only once etcd answered.  Errors: XFER_ERR_INVALID_ARG,
 * XFER_ERR_STATE (already draining).
 */
XFER_API int xfer_server_drain(xfer_server *s, xfer_server_drain_cb cb,
                               void *ud);
/* True when no reservation of any hosted shard is RESERVED, WRITING or
 * waiting for a write to end. */
XFER_API bool xfer_server_drained(const xfer_server *s);
/* True when no hosted shard holds any reservation at all (READY and TAKEN
 * included): after a drain, the moment a daemon may exit with nothing
 * lost.  READY data ends by its lease, TAKEN data by its release or the
 * take grace, so this comes in bounded time. */
XFER_API bool xfer_server_empty(const xfer_server *s);

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
    uint64_t auth_failed;        /* bad proofs, v1 HELLOs under a secret */
    uint64_t conns_refused;      /* over max_conns, or the session table
                                    full */
    uint64_t timeouts;           /* closed by a HELLO, header or idle
                                    timeout */
    uint64_t writes_stalled;     /* ended by the write timeout */
    uint64_t out_bytes;          /* queued output now, all connections */
    /* version 2: fault rules (xfer_server_add_rule), of the shard(s) */
    uint64_t rules_fired;        /* rule firings (DELAY rules included) */
    uint64_t ops_delayed;        /* ops a DELAY rule held */
    uint64_t delayed_now;        /* of them, held right now */
    /* version 3: copies into device pools (shard_mem), of the shard(s) */
    uint64_t copies;             /* host -> device copies started */
    uint64_t copies_failed;      /* of them, failed (writes failed COPY) */
    uint64_t copies_now;         /* in flight right now (integrity
                                    read-backs, device to host, included) */
    /* version 3: integrity, of the shard(s) */
    uint64_t crc_checked;        /* regions checksummed before READY */
    uint64_t corrupt;            /* of them, refused: XFER_ERR_CORRUPT */
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
