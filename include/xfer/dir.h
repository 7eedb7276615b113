/*
 * xfer/dir.h - the directory of groups: where each shard of a group is
 * served, kept in etcd (v3 API) so producers and consumers find shards by
 * group name instead of a static address list (docs/discovery.md).
 *
 * A shard server registers one entry per hosted shard under
 *   <prefix><group>/<shard>      (prefix default "/xfer/groups/")
 * with the JSON value {"shard":K,"addr":"A","port":P,"transports":T,
 * "epoch":E}, attached to a lease it keeps alive; a draining server
 * deletes its entries first (xfer_dir_unregister); a crashed one
 * disappears when its lease expires (lease_ttl_s).  A client watches a
 * group: every change of a member is reported through the member
 * callback, a vanished entry as "gone".  An entry whose epoch is lower
 * than the one already known for that shard is never used.  Entries that
 * do not parse, or whose fields are out of range, are ignored with one
 * line through the log callback each (once per put of the entry: reading
 * the group again after a lost stream counts it, xfer_dir_state
 * .bad_entries, without a new line; past 256 such entries one line says
 * the rest are only counted).
 *
 * etcd is reached through its v3 JSON gateway (HTTP/1.1, base64 keys and
 * values) with libevent's HTTP client on the caller's event base, JSON
 * through json-c: Debian ships no C gRPC stack, and the gateway is etcd's
 * documented HTTP interface.  etcd is not in the data path: while no
 * endpoint answers, the last known membership stays in force, and the
 * client redials with jittered, capped backoff, trying the endpoints in
 * turn.
 *
 * One thread: the loop thread of `base`.  Callbacks run on the loop,
 * never from inside a call into the directory.
 */
#ifndef XFER_DIR_H
#define XFER_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;
typedef struct xfer_dir xfer_dir;

#define XFER_DIR_GROUP_MAX 64 /* bytes of a group name, NUL included */
#define XFER_DIR_ADDR_MAX 64  /* bytes of an address, NUL included */

/* Transports a shard serves (xfer_dir_entry.transports). */
#define XFER_DIR_TCP 1u
#define XFER_DIR_RDMA 2u

/* One member of a group as the directory knows it. */
typedef struct xfer_dir_entry {
    uint16_t shard;                 /* index in the group, < 64 */
    uint16_t port;                  /* 1..65535 */
    uint32_t transports;            /* XFER_DIR_TCP | XFER_DIR_RDMA */
    uint64_t epoch;                 /* grows at every start of the shard */
    char addr[XFER_DIR_ADDR_MAX];   /* host name or numeric address */
} xfer_dir_entry;

/* One log line (no newline); `line` borrowed for the call. */
typedef void (*xfer_dir_log_fn)(void *ud, const char *line);

/*
 * Configuration; copied at creation.  Start from xfer_dir_config_default().
 */
#define XFER_DIR_CONFIG_VERSION 2
typedef struct xfer_dir_config {
    uint32_t version;           /* XFER_DIR_CONFIG_VERSION */
    /* "http://host:port,https://host:port,..." (the members' client
     * URLs); copied.  Required. */
    const char *endpoints;
    const char *prefix;         /* default "/xfer/groups/"; copied */
    uint32_t lease_ttl_s;       /* registrations' lease; default 10 */
    uint64_t request_timeout_ns; /* one HTTP request; default 2 s */
    uint64_t reconnect_min_ns;  /* default 100 ms, doubled per failure */
    uint64_t reconnect_max_ns;  /* default 2 s */
    /* etcd authentication (/v3/auth/authenticate); NULL: none.  Copied. */
    const char *user, *password;
    /* TLS for https:// endpoints: the CA file the server certificate is
     * checked against, and an optional client certificate and key (PEM).
     * NULL ca_file: the system's default CA paths.  Copied. */
    const char *ca_file, *cert_file, *key_file;
    xfer_dir_log_fn log;        /* NULL: quiet */
    void *log_ud;
    /* Version 2.  A watch stream that brings nothing (no event, no
     * progress notification) for this long is taken for dead (a hung
     * etcd, a half-open connection, a proxy that swallows the stream):
     * it is closed, counted (xfer_dir_state.watch_timeouts), and the
     * group is read again after the backoff.  Every watch asks etcd for
     * progress notifications, which etcd sends at its
     * --experimental-watch-progress-notify-interval (10 min by default):
     * set this to a few times that interval.  Default 30 min (three
     * times etcd's default; 0 also); UINT64_MAX: never. */
    uint64_t watch_timeout_ns;
} xfer_dir_config;

/* Write the latest version and the defaults into *cfg (borrowed; NULL
 * ignored).  A version 1 config gets the version 2 defaults. */
XFER_API void xfer_dir_config_default(xfer_dir_config *cfg);

/*
 * Create on `base`: a base the caller made is borrowed and must outlive
 * the directory; an engine's own base (xfer_engine_base) is held until
 * xfer_dir_del, so the engine may be deleted first.  Nothing is
 * sent until a register or a watch.  *out untouched on failure.
 * Errors: XFER_ERR_INVALID_ARG (no endpoint, a URL that does not parse,
 * an unknown version, a prefix that is empty or longer than 128 bytes),
 * XFER_ERR_NOMEM, XFER_ERR_NOT_SUPPORTED (https without TLS support),
 * XFER_ERR_IO (TLS files that do not load).
 */
XFER_API int xfer_dir_new(struct event_base *base, const xfer_dir_config *cfg,
                          xfer_dir **out);
/* Stop everything (no callback after this returns) and free; NULL ok.
 * Entries registered stay in etcd until their lease expires: call
 * xfer_dir_unregister first to remove them at once.
 * Teardown orders: what watches or shows through the directory borrows
 * it, so delete it first: a TCP transport (xfer_tcp_del stops its watch
 * at once, even while an engine still holds the transport, so "transport,
 * directory, engine" works), a consumer (xfer_consumer_del), a metrics
 * exposition (xfer_metrics_del) and a ctl (xfer_ctl_close, or
 * xfer_ctl_set_dir(ctl, NULL)).  The engine may go before or after the
 * directory; on an engine's own base the directory may be deleted last
 * of all (tests/api/test_dir_api.c runs these orders). */
XFER_API void xfer_dir_del(xfer_dir *d);

/*
 * Register `e` (copied) as a member of `group` (copied; 1..63 bytes of
 * [A-Za-z0-9._-]) and keep it registered: the entry is put under a lease
 * that is kept alive, and put again (under a new lease) whenever the
 * lease was lost (etcd unreachable for longer than the TTL).  Several
 * entries (shards) may be registered on one directory.
 * Errors: XFER_ERR_INVALID_ARG (bad group, shard >= 64, port 0, empty
 * address, or after xfer_dir_unregister: a drained directory registers
 * no more), XFER_ERR_BUSY (64 entries already), XFER_ERR_NOMEM.
 */
XFER_API int xfer_dir_register(xfer_dir *d, const char *group,
                               const xfer_dir_entry *e);

/* Called once when every entry's delete has been answered by etcd, or
 * when that could not be done (ok false): the entries then vanish with
 * their lease. */
typedef void (*xfer_dir_done_fn)(void *ud, bool ok);
/*
 * Delete every registered entry now (a draining server leaves first) and
 * stop keeping them alive; `done` (may be NULL) is called on the loop.
 * Errors: XFER_ERR_STATE (nothing registered; done not called).
 */
XFER_API int xfer_dir_unregister(xfer_dir *d, xfer_dir_done_fn done,
                                 void *ud);

/*
 * A member changed: `e` is its entry now (borrowed for the call), or NULL
 * when the shard left the group (its entry was deleted or its lease
 * expired).  Only entries with an epoch at least the known one are
 * reported.
 */
typedef void (*xfer_dir_member_fn)(void *ud, const char *group,
                                   uint16_t shard, const xfer_dir_entry *e);
/*
 * Watch `group` (copied): read its members, report each, then follow
 * every change from that revision on (after a lost watch: read again and
 * report the differences).  At most 16 watches per directory; a group
 * may be watched by several (fn, ud) pairs (a producer and a consumer in
 * one process), each with its own stream.
 * Errors: XFER_ERR_INVALID_ARG (bad group, NULL fn), XFER_ERR_EXISTS
 * (this group, fn and ud already), XFER_ERR_BUSY, XFER_ERR_NOMEM.
 */
XFER_API int xfer_dir_watch(xfer_dir *d, const char *group,
                            xfer_dir_member_fn fn, void *ud);

/* Stop the watch of `group` by (fn, ud): no callback of it after this
 * returns.  Not from inside its own member callback.
 * Errors: XFER_ERR_NOT_FOUND. */
XFER_API int xfer_dir_unwatch(xfer_dir *d, const char *group,
                              xfer_dir_member_fn fn, void *ud);

/*
 * The known member `shard` of a watched `group` into *e (borrowed), as
 * the group's first watch knows it.
 * Errors: XFER_ERR_NOT_FOUND (no such watched group, or no member),
 * XFER_ERR_INVALID_ARG.
 */
XFER_API int xfer_dir_member(const xfer_dir *d, const char *group,
                             uint16_t shard, xfer_dir_entry *e);

/* The directory's state (metrics, ctl). */
typedef struct xfer_dir_state {
    bool connected;        /* the last request to etcd was answered */
    uint32_t endpoint;     /* index of the endpoint in use */
    int64_t revision;      /* last etcd revision seen */
    uint32_t members;      /* members known over every watched group */
    uint32_t registered;   /* entries this directory keeps registered */
    uint64_t requests, failures, reconnects, events, bad_entries,
        stale_entries, lease_grants;
    /* Version 2: watch streams closed for silence (watch_timeout_ns). */
    uint64_t watch_timeouts;
} xfer_dir_state;
#define XFER_DIR_STATE_VERSION 2
/* The state into *st, filling only the fields of `version` (a caller
 * built with an older header passes its version).  Call it through
 * xfer_dir_state_get_latest.
 * Errors: XFER_ERR_INVALID_ARG (NULL, unknown version). */
XFER_API int xfer_dir_state_get_versioned(const xfer_dir *d, uint32_t version,
                                          xfer_dir_state *st);
#define xfer_dir_state_get_latest(d, st) \
    xfer_dir_state_get_versioned((d), XFER_DIR_STATE_VERSION, (st))
/* The version 1 fields only (everything up to lease_grants), as before
 * version 2.  Errors: XFER_ERR_INVALID_ARG (NULL). */
XFER_API int xfer_dir_state_get(const xfer_dir *d, xfer_dir_state *st);

/* One member of a watched group with the time it was learned, for a
 * listing (xfer_dir_members_get). */
typedef struct xfer_dir_member_info {
    char group[XFER_DIR_GROUP_MAX];
    xfer_dir_entry e;
    uint64_t since_ns;  /* CLOCK_MONOTONIC when this entry was learned */
} xfer_dir_member_info;
/*
 * Every member known over the watched groups (each group once, as its
 * first watch knows it), in group-watch then shard order, into out (at
 * most cap, borrowed); *n the number written, *total the number known
 * (may be more than cap; either pointer may be NULL).
 * Errors: XFER_ERR_INVALID_ARG (NULL d, or out NULL with cap > 0).
 */
XFER_API int xfer_dir_members_get(const xfer_dir *d, xfer_dir_member_info *out,
                                  size_t cap, size_t *n, size_t *total);
/*
 * The entries this directory keeps registered (xfer_dir_register), in
 * registration order, into out (at most cap, borrowed), `since_ns` the
 * time of the register call.  *n / *total as for xfer_dir_members_get.
 * Errors: XFER_ERR_INVALID_ARG.
 */
XFER_API int xfer_dir_registered_get(const xfer_dir *d,
                                     xfer_dir_member_info *out, size_t cap,
                                     size_t *n, size_t *total);

/* The HELLO group number of a group name: the decimal value of a name of
 * digits only (below 2^32), else the 32-bit FNV-1a hash of the name, so
 * xferd --group NAME and a producer of that group agree. */
XFER_API uint32_t xfer_dir_group_id(const char *group);

#ifdef __cplusplus
}
#endif
#endif /* XFER_DIR_H */
