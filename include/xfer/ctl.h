/*
 * xfer/ctl.h - live inspection: a Unix-domain control socket on a libevent
 * loop that answers every connection with a snapshot of what is open right
 * now (transfers of an engine, reservations of xferd's shards): id, state,
 * age, per-shard sub-states and what each waits for.  `xfer-trace stuck
 * --live SOCK` reads it; so does `socat - UNIX-CONNECT:SOCK`.
 *
 * Off by default: nothing listens until xfer_ctl_open (or
 * xfer_engine_ctl_open / a shard snapshot) is called.  The client sends
 * nothing; the server writes the snapshot and closes.  The reply is JSON
 * lines (version 1), each one flat object, written in one loop turn:
 *
 *   {"xfer_ctl":1}
 *   {"kind":"transfer","id":7,"attempt":7,"state":"WRITING",
 *    "age_ns":N,"deadline_in_ns":N (negative: passed),"pending":1,
 *    "nshards":3,"waiting":"1",             (shards with an op in flight)
 *    "shards":[{"shard":0,"resv":"ok","write":"done","commit":"none",
 *               "cancel":"none","cancel_attempts":0,"waits":""}, ...]}
 *   {"kind":"reservation","shard":1,"id":7,"attempt":7,"state":"WRITING",
 *    "age_ns":N,"waits":"write end"}
 *   {"kind":"readiness","id":7,"attempt":7,"state":"WAITING","age_ns":N,
 *    "nshards":4,"ready":"0,1,3","waiting":"2"}   (a consumer's ids)
 *   {"kind":"dir","connected":1,"endpoint":0,"revision":R,"members":N,
 *    "registered":N,"requests":N,"failures":N,"reconnects":N,
 *    "watch_timeouts":N,"bad_entries":N,"stale_entries":N}
 *   {"kind":"member","group":"kv","shard":0,"addr":"10.0.0.7","port":P,
 *    "epoch":E,"transports":1,"age_ns":N}      (as the directory knows it)
 *   {"kind":"registered", same fields}         (entries it keeps in etcd)
 *   {"kind":"end","transfers":N,"reservations":N}
 *
 * Sub-state words: resv none|pending|ok|failed; write
 * none|pending|done|failed; commit none|pending|acked|failed; cancel
 * none|pending|ok|failed|gave_up.  "waits" names the op in flight
 * (reserve|write|commit|cancel), "cancel retry" for a failed cancel
 * waiting for its backoff, or "" when the shard waits for nothing.  A
 * reply without the "end" line was cut short.  The "dir", "member" and
 * "registered" lines come only from a ctl given a directory
 * (xfer_ctl_set_dir): "connected" 1 when etcd answered the last request,
 * "revision" the last etcd revision seen, "age_ns" how long ago the entry
 * was learned (member) or registered; `xfer-trace members --ctl SOCK`
 * prints them.  Readers skip kinds they do not know.
 *
 * The socket file is created mode 0600; a stale socket file at the path is
 * replaced, any other file is not.  Everything here runs on the loop
 * thread of `base`; snapshot callbacks are called from that loop.
 */
#ifndef XFER_CTL_H
#define XFER_CTL_H

#include <stdint.h>

#include "xfer/core.h"
#include "xfer/errors.h"
#include "xfer/fsm.h"
#include "xfer/shard.h"
#include "xfer/xfer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;
typedef struct xfer_ctl xfer_ctl;
/* A reply being built (valid only during the snapshot callback). */
typedef struct xfer_ctl_reply xfer_ctl_reply;

/* Fill one snapshot with xfer_ctl_put_*.  `rep` is borrowed until return.
 * Called on the loop thread, once per connection. */
typedef void (*xfer_ctl_snapshot_fn)(void *ud, xfer_ctl_reply *rep);

/*
 * Configuration of a control socket; copied at open.  Start from
 * xfer_ctl_config_default().  `version` says which layout the caller was
 * built with (docs/design.md section 4.1): xfer_ctl_open_config() reads
 * only the fields of that version.
 */
#define XFER_CTL_CONFIG_VERSION 1
typedef struct xfer_ctl_config {
    uint32_t version;     /* XFER_CTL_CONFIG_VERSION */
    xfer_allocator alloc; /* every allocation of the ctl and its
                             connections (libevent's own, the reply
                             buffers among them, excepted); zeroed (the
                             default): libc */
} xfer_ctl_config;

/* Write version 1 and every default above into *cfg.  `cfg` borrowed;
 * NULL is ignored. */
XFER_API void xfer_ctl_config_default(xfer_ctl_config *cfg);

/*
 * xfer_ctl_open_config - listen on the Unix socket `path` (copied) on
 * `base` (a base the caller made is borrowed and must outlive the ctl; an
 * engine's own base, xfer_engine_base, is held until xfer_ctl_close, so
 * the engine may be deleted first).  `fn` and `ud` are retained
 * until xfer_ctl_close; `cfg` is copied (NULL: the defaults).  On success
 * writes *out and returns 0; on failure *out is untouched.  Loop thread
 * only.
 * Errors: XFER_ERR_INVALID_ARG (NULL argument, a config version this
 * library does not know, path too long for a Unix socket),
 * XFER_ERR_EXISTS (a file that is not a socket is at path), XFER_ERR_IO
 * (socket, bind or listen failed; errno tells why), XFER_ERR_NOMEM.
 *
 * xfer_ctl_open - the same with the default config.
 */
XFER_API int xfer_ctl_open_config(struct event_base *base, const char *path,
                                  xfer_ctl_snapshot_fn fn, void *ud,
                                  const xfer_ctl_config *cfg,
                                  xfer_ctl **out);
XFER_API int xfer_ctl_open(struct event_base *base, const char *path,
                           xfer_ctl_snapshot_fn fn, void *ud,
                           xfer_ctl **out);

/* Stop listening, drop connections still being answered, remove the
 * socket file, free.  Accepts NULL.  Loop thread only. */
XFER_API void xfer_ctl_close(xfer_ctl *ctl);

/*
 * Answer every snapshot with the state of directory `d` too (xfer/dir.h:
 * connected, last revision, the members of every group it watches, the
 * entries it registers): a producer's engine ctl with the directory its
 * TCP transport follows, xferd's ctl with its registration, a consumer's
 * ctl.  `d` is borrowed until xfer_ctl_close or xfer_ctl_set_dir(ctl,
 * NULL): delete the directory only after one of those (the ctl may go
 * before or after every other object).  NULL `d` stops it.  Loop thread.
 * Errors: XFER_ERR_INVALID_ARG (NULL ctl).
 */
struct xfer_dir;
XFER_API int xfer_ctl_set_dir(xfer_ctl *ctl, const struct xfer_dir *d);

/* Connections answered so far. */
XFER_API uint64_t xfer_ctl_served(const xfer_ctl *ctl);

/*
 * Append one open transfer (`v` borrowed, a view of version `version`: only
 * its fields are read) as seen at now_ns.  Call it through the macro, with
 * a view from xfer_core_view().
 * Returns 0, XFER_ERR_INVALID_ARG (NULL argument, unknown version), or
 * XFER_ERR_NOMEM.
 */
XFER_API int xfer_ctl_put_transfer_versioned(xfer_ctl_reply *rep,
                                             uint32_t version,
                                             const xfer_transfer_view *v,
                                             uint64_t now_ns);
#define xfer_ctl_put_transfer(rep, v, now_ns)                               \
    xfer_ctl_put_transfer_versioned((rep), XFER_TRANSFER_VIEW_VERSION, (v), \
                                    (now_ns))

/*
 * Append one reservation of shard `shard`, in state `st` since since_ns.
 * Tombstones (CANCELLED, EXPIRED, DONE) and NONE are not open: they are
 * skipped (returns 0).  Returns 0, XFER_ERR_INVALID_ARG, XFER_ERR_NOMEM.
 */
XFER_API int xfer_ctl_put_reservation(xfer_ctl_reply *rep, uint16_t shard,
                                      uint64_t id, uint32_t attempt,
                                      xfer_resv_state st, uint64_t since_ns,
                                      uint64_t now_ns);

/*
 * Append one id a consumer scheduler waits for (xfer/consumer.h), in
 * `state` (a readiness state name, or "EXPECTED") since since_ns, of a
 * group of nshards: `ready` the shards that reported ready, `waiting` the
 * shards it waits on.  Returns 0, XFER_ERR_INVALID_ARG, XFER_ERR_NOMEM.
 */
XFER_API int xfer_ctl_put_readiness(xfer_ctl_reply *rep, uint64_t id,
                                    uint32_t attempt, const char *state,
                                    uint16_t nshards, uint64_t ready,
                                    uint64_t waiting, uint64_t since_ns,
                                    uint64_t now_ns);

/*
 * xfer_engine_ctl_open - a control socket answering with every live
 * transfer of engine `e` (borrowed until xfer_ctl_close or
 * xfer_engine_del, whichever comes first: the two may come in either
 * order; after xfer_engine_del the ctl answers with no transfer),
 * allocating through the engine's allocator (core.alloc).  Same errors as
 * xfer_ctl_open.  Loop thread of the engine.
 */
XFER_API int xfer_engine_ctl_open(xfer_engine *e, const char *path,
                                  xfer_ctl **out);

/*
 * Shards (for xferd): a ready-made snapshot callback answering with every
 * open reservation of `nshards` shards.  Pass xfer_ctl_shards_snapshot as
 * `fn` and a pointer to an xfer_ctl_shards (retained until xfer_ctl_close)
 * as `ud` to xfer_ctl_open.  `clock` NULL means CLOCK_MONOTONIC; it must be
 * the clock the shards are driven with.
 */
typedef struct xfer_ctl_shards {
    xfer_shard *const *shards; /* nshards shards; k answers as index k */
    uint16_t nshards;
    xfer_clock_fn clock;
    void *clock_ud;
} xfer_ctl_shards;

XFER_API void xfer_ctl_shards_snapshot(void *ud, xfer_ctl_reply *rep);

/* Append every open reservation of one shard `s` (borrowed), answering as
 * shard index `shard`.  Returns 0 or XFER_ERR_NOMEM. */
XFER_API int xfer_ctl_put_shard(xfer_ctl_reply *rep, const xfer_shard *s,
                                uint16_t shard, uint64_t now_ns);

#ifdef __cplusplus
}
#endif
#endif /* XFER_CTL_H */
