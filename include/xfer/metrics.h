/*
 * xfer/metrics.h - what a cluster operator scrapes: the counters, gauges
 * and latency histograms of an engine, a shard server and a consumer, in
 * the Prometheus text exposition format 0.0.4, rendered by a call and
 * served over HTTP with libevent's evhttp.
 *
 * Families (every name starts with its object's prefix):
 *   xfer_engine_*    transfers by outcome and by the phase they failed in,
 *                    late events rejected, tombstones, cancel retries,
 *                    staging bytes in use, submit -> completion seconds;
 *   xfer_server_*    per shard (label shard="k"): pool bytes and bytes in
 *                    use, reservations, tombstones, ops, taken and
 *                    orphaned regions, phase seconds (reserved -> ready ->
 *                    taken -> released); for the whole server: bad frames
 *                    by reason, errors sent, connections;
 *   xfer_consumer_*  outcomes (available, unavailable by reason), links,
 *                    events, requests, late readies, tombstones, ids
 *                    pending and held, first ready -> outcome seconds;
 *   xfer_tcp_*       the producer's TCP transport: connections
 *                    established, lost, redialled (reconnects) and
 *                    failed, replies refused.
 * Counters end in _total; histograms have _bucket{le=...} (cumulative),
 * _sum and _count, in seconds.  The counters are the ones the objects'
 * stats calls and the wire STATUS report.
 *
 * One object of each kind per exposition: two servers added to one
 * xfer_metrics would repeat their families (register each process's one
 * server, engine and consumer).
 *
 * Threads: the loop thread of the objects (the renders read their state);
 * the HTTP server runs on cfg.base, which must be that loop.
 */
#ifndef XFER_METRICS_H
#define XFER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "xfer/consumer.h"
#include "xfer/errors.h"
#include "xfer/fsm.h"
#include "xfer/server.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;
struct evhttp;
typedef struct xfer_metrics xfer_metrics;

#define XFER_METRICS_CONFIG_VERSION 2

/* Render one object's families into buf (cap bytes, NUL-terminated when
 * cap > 0; buf may be NULL when cap is 0).  Returns the length the whole
 * text needs, like snprintf, or 0 when out of memory.  The object is
 * borrowed. */
XFER_API size_t xfer_engine_metrics(const xfer_engine *e, char *buf,
                                    size_t cap);
XFER_API size_t xfer_server_metrics(const xfer_server *s, char *buf,
                                    size_t cap);
XFER_API size_t xfer_consumer_metrics(const xfer_consumer *c, char *buf,
                                      size_t cap);

/*
 * The bounds of the HTTP server of xfer_metrics_listen (version 2; a
 * version 1 config gets the defaults).  A mounted evhttp is the caller's:
 * these do not touch it.  0 in any field: its default.
 *   max_header_bytes  request line and headers together (default 8 KiB):
 *                     over it the connection is answered 4xx and closed
 *                     as soon as that many bytes arrived without the end;
 *   max_body_bytes    a request body (default 1 KiB; a scrape has none):
 *                     a longer Content-Length is answered 413 at once,
 *                     before any of it is read;
 *   max_conns         open connections (default 64): at the cap accepting
 *                     pauses (new ones wait in the kernel's backlog) until
 *                     one closes;
 *   idle_timeout_ns   a connection with a request unfinished, or none,
 *                     for this long is closed (default 10 s);
 *   accept_retry_ns   when accept fails (the fd limit: EMFILE, ENFILE)
 *                     accepting pauses this long instead of spinning
 *                     (default 100 ms), as the shard server's does.
 * Methods: GET is answered; HEAD, POST, PUT, DELETE, OPTIONS and PATCH
 * get 405; any other method is refused by evhttp (501).
 */
typedef struct xfer_metrics_config {
    uint32_t version;          /* XFER_METRICS_CONFIG_VERSION */
    struct event_base *base;   /* required: the objects' loop.  A base
                                  the caller made must outlive the
                                  metrics; an engine's own base
                                  (xfer_engine_base) is held until del */
    xfer_allocator alloc;      /* zeroed: libc */
    /* version 2 */
    uint32_t max_header_bytes;
    uint32_t max_body_bytes;
    uint32_t max_conns;
    uint64_t idle_timeout_ns;
    uint64_t accept_retry_ns;
} xfer_metrics_config;

XFER_API void xfer_metrics_config_default(xfer_metrics_config *cfg);
/* cfg is copied (a version 1 or 2 struct).  Errors: XFER_ERR_INVALID_ARG
 * (no base, an unknown version), XFER_ERR_NOMEM.  *out untouched on
 * failure. */
XFER_API int xfer_metrics_new(const xfer_metrics_config *cfg,
                              xfer_metrics **out);
/* Stop serving, close the scrapers' connections and free (the objects
 * are not touched).  NULL ok.  Loop thread.  Before or after
 * xfer_engine_del when the engine is not added (an added object is
 * borrowed until this call: delete the metrics first). */
XFER_API void xfer_metrics_del(xfer_metrics *m);

/* Add an object to the exposition; each is borrowed until
 * xfer_metrics_del.  Errors: XFER_ERR_INVALID_ARG, XFER_ERR_EXISTS (one of
 * that kind is already added). */
XFER_API int xfer_metrics_add_engine(xfer_metrics *m, const xfer_engine *e);
XFER_API int xfer_metrics_add_server(xfer_metrics *m, const xfer_server *s);
XFER_API int xfer_metrics_add_consumer(xfer_metrics *m,
                                       const xfer_consumer *c);
XFER_API int xfer_metrics_add_tcp(xfer_metrics *m, const xfer_tcp *t);
/* The directory's state (xfer/dir.h): connected, last revision, members
 * known, entries registered, and its counters. */
XFER_API int xfer_metrics_add_dir(xfer_metrics *m, const struct xfer_dir *d);

/* Every added object's families, as xfer_engine_metrics renders one. */
XFER_API size_t xfer_metrics_render(const xfer_metrics *m, char *buf,
                                    size_t cap);

/*
 * Mount the exposition at `path` (copied, e.g. "/metrics") of the
 * caller's own evhttp (borrowed: unmounted by xfer_metrics_del, which must
 * come before evhttp_free).  GET answers 200 with Content-Type
 * "text/plain; version=0.0.4"; other methods 405.
 * Errors: XFER_ERR_INVALID_ARG, XFER_ERR_EXISTS (path taken).
 */
XFER_API int xfer_metrics_mount(xfer_metrics *m, struct evhttp *http,
                                const char *path);
/*
 * Serve /metrics on an evhttp of our own bound to addr:port (numeric;
 * port 0: ephemeral, see xfer_metrics_port), within the config's bounds
 * (above).  Nothing here prints, libevent's accept warning included.
 * Errors: XFER_ERR_INVALID_ARG, XFER_ERR_STATE (already listening),
 * XFER_ERR_NOMEM, XFER_ERR_IO (bind; errno tells why).
 */
XFER_API int xfer_metrics_listen(xfer_metrics *m, const char *addr,
                                 uint16_t port);
XFER_API uint16_t xfer_metrics_port(const xfer_metrics *m);

#ifdef __cplusplus
}
#endif
#endif /* XFER_METRICS_H */
