/*
 * xfer/loop.h - the in-process transport: S shards (xfer_shard) on the
 * engine's event base, messages delivered through deferred callbacks, with
 * deterministic fault injection.  The test workhorse and the embedded
 * default; modelled on libevent's bufferevent_pair.
 *
 * Every message (an op to a shard, a reply to the engine) goes through one
 * FIFO per loop transport, ordered by (due time, sequence), so a seeded run
 * gives the same order every time.  Faults are the rules of xfer/fault.h
 * (the shard server takes the same ones), decided when an op starts: a
 * DELAY holds the op's arrival at the shard, and the op then meets the
 * fate the rules gave it.
 */
#ifndef XFER_LOOP_H
#define XFER_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "xfer/fault.h"
#include "xfer/shard.h"
#include "xfer/transport.h"
#include "xfer/xfer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;
typedef struct xfer_loop xfer_loop;

/* Consumer-side events (ready/cancelled/expired) for a consumer scheduler.
 * Called from the loop; `ev` borrowed. */
typedef void (*xfer_loop_event_cb)(void *ud, const xfer_shard_event *ev);

/*
 * Configuration; copied at creation.  Start from xfer_loop_config_default()
 * and set what differs (nshards, shard.pool_bytes at least).  `version`
 * says which layout the caller was built with (docs/design.md section
 * 4.1): xfer_loop_new() reads only the fields of that version.  The
 * embedded shard template carries its own version (the default sets it)
 * and grows only with a new loop version.
 */
#define XFER_LOOP_CONFIG_VERSION 1
typedef struct xfer_loop_config {
    uint32_t version;          /* XFER_LOOP_CONFIG_VERSION */
    uint16_t nshards;          /* 1..XFER_MAX_SHARDS; required (default 0) */
    xfer_shard_config shard;   /* template for every shard (index set;
                                  defaults: xfer_shard_config_default); a
                                  zeroed shard.alloc means `alloc` below */
    uint64_t seed;             /* fault RNG; printed by tests; 0 (the
                                  default): a fixed seed */
    uint64_t write_ns;         /* time a write stays in flight; 0 (the
                                  default): a tick */
    xfer_loop_event_cb on_event; /* NULL (the default): events dropped */
    void *on_event_ud;
    xfer_clock_fn clock;       /* NULL (the default): CLOCK_MONOTONIC */
    void *clock_ud;
    xfer_allocator alloc;      /* every allocation of the loop transport
                                  (and of its shards, unless shard.alloc
                                  is set); zeroed (the default): libc */
} xfer_loop_config;

/* Write version 1 and every default above into *cfg (shard through
 * xfer_shard_config_default).  `cfg` borrowed; NULL is ignored. */
XFER_API void xfer_loop_config_default(xfer_loop_config *cfg);

/* Counters, read with xfer_loop_stats_get(); versioned like the config
 * (the macro passes XFER_LOOP_STATS_VERSION). */
#define XFER_LOOP_STATS_VERSION 1
typedef struct xfer_loop_stats {
    uint64_t messages, faults_fired, dropped, aborted, down_failed;
    uint64_t applied_lost;
} xfer_loop_stats;

/* Create on `base`: a base the caller made is borrowed and must outlive
 * the loop transport; the base of an engine that made its own
 * (xfer_engine_base) is held until xfer_loop_del.  cfg
 * copied; NULL means all defaults (and so fails: nshards is required).
 * *out untouched on failure.  Errors: XFER_ERR_INVALID_ARG (a version of
 * the config or of its shard template this library does not know, bad
 * config), XFER_ERR_NOMEM, XFER_ERR_IO. */
XFER_API int xfer_loop_new(struct event_base *base, const xfer_loop_config *cfg,
                  xfer_loop **out);
/* Free: the shards and every queued message.  NULL ok.  After the engine
 * detached it (xfer_engine_del) or if never attached, freed now; while
 * still attached, it keeps serving the engine and xfer_engine_del's
 * detach frees it (do not use `l` after this call either way). */
XFER_API void xfer_loop_del(xfer_loop *l);

/* The ops table + self, to hand to xfer_engine_add_group().  The engine
 * does not free the loop transport; the caller still calls xfer_loop_del,
 * before or after xfer_engine_del (see xfer_loop_del). */
XFER_API xfer_transport xfer_loop_transport(xfer_loop *l);

/* Append a fault rule (copied).  Errors: XFER_ERR_INVALID_ARG,
 * XFER_ERR_BUSY (at most 64 rules). */
XFER_API int xfer_loop_add_rule(xfer_loop *l, const xfer_fault_rule *rule);
XFER_API void xfer_loop_clear_rules(xfer_loop *l);
/* Take a shard down (every op to it fails with XFER_ERR_CONN_LOST, and
 * every op outstanding on it fails at once, as events) or bring it up. */
XFER_API void xfer_loop_set_down(xfer_loop *l, uint16_t shard, bool down);

/* The shard objects (for take/release by a consumer scheduler, stats). */
XFER_API xfer_shard *xfer_loop_shard(xfer_loop *l, uint16_t shard);
/* Counters: the fields of stats version `version` are copied into *st
 * (borrowed), nothing past them is written.  Call it through the macro.
 * Errors: XFER_ERR_INVALID_ARG (NULL argument, unknown version; *st
 * untouched). */
XFER_API int xfer_loop_stats_get_versioned(const xfer_loop *l,
                                           uint32_t version,
                                           xfer_loop_stats *st);
#define xfer_loop_stats_get(l, st)                                          \
    xfer_loop_stats_get_versioned((l), XFER_LOOP_STATS_VERSION, (st))
/* Ops started and not yet answered. */
XFER_API uint32_t xfer_loop_outstanding(const xfer_loop *l);

#ifdef __cplusplus
}
#endif
#endif /* XFER_LOOP_H */
