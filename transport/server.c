/*
 * transport/server.c - the shard server's lifecycle (xfer/server.h): the
 * config and its defaults, the hosted shards over the caller's memory, the
 * TCP listener, and teardown.  The connections, requests, events, drain
 * and counters live in the other server_*.c files (server_int.h).
 *
 * What must stay true:
 *  - the server never allocates, frees or maps shard memory: every shard is
 *    created with pool_memory = the caller's base, and del leaves it as it
 *    is;
 *  - every allocation of the server and of its shards goes through
 *    cfg.alloc;
 *  - new either returns a complete server or undoes everything it did
 *    (del accepts a half-built server), and *out stays untouched.
 */
#include "base_ref.h"
#include "server_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <event2/listener.h>

#include <openssl/crypto.h>

#include "auth.h"
#include "server_rdma.h"
#include "util.h"       /* fsm_private_dep: the injected allocator */

void xfer_server_config_default(xfer_server_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->version = XFER_SERVER_CONFIG_VERSION;
    cfg->addr = "127.0.0.1";
    cfg->max_reservations = 4096;
    cfg->max_tombstones = 4 * 4096;
    cfg->lease_ttl_ns = 10000000000ull;
    cfg->tombstone_ttl_ns = 20000000000ull;
    cfg->take_grace_ns = 30000000000ull;
    cfg->drain_timeout_ns = 10000000000ull;
    cfg->max_sessions = 1024;
    cfg->session_grace_ns = cfg->take_grace_ns;
    cfg->hello_timeout_ns = 5000000000ull;
    cfg->header_timeout_ns = 10000000000ull;
    cfg->idle_timeout_ns = 300000000000ull;
    cfg->write_timeout_ns = 10000000000ull;
    cfg->max_conns = 4096;
    cfg->out_max_bytes = 64ull << 20;
    cfg->accept_retry_ns = 100000000ull;
    cfg->log_interval_ns = 1000000000ull;
    cfg->write_min_rate = 64u << 10;
    cfg->max_peer_sessions = 1024 / 16;
}

static uint32_t u32_max(uint32_t a, uint32_t b)
{
    return a > b ? a : b;
}

uint64_t xfer_server_now(const xfer_server *s)
{
    if (s->batch_depth && s->own_clock)
        return s->batch_now;
    return s->cfg.clock(s->cfg.clock_ud);
}

void xfer_server_batch_begin(xfer_server *s)
{
    if (s->batch_depth++ == 0 && s->own_clock)
        s->batch_now = s->cfg.clock(s->cfg.clock_ud);
}

void xfer_server_batch_end(xfer_server *s)
{
    if (s->batch_depth > 1) {
        s->batch_depth--;
        return;
    }
    xfer_server_conn_flush_all(s);
    s->batch_depth = 0;
    if (s->timer_due) {
        s->timer_due = false;
        xfer_server_flush_all(s); /* arms the timer, once per batch */
    }
}

void *xfer_server_calloc(const xfer_server *s, size_t n, size_t size)
{
    return xfer_util_calloc(&s->cfg.alloc, n, size);
}

void xfer_server_free(const xfer_server *s, void *p)
{
    xfer_util_free(&s->cfg.alloc, p);
}

/* One line for the log callback: "conn N what" (serial 0: "what", a line
 * about the listener or the server itself), at most LOG_BURST lines
 * per log_interval_ns; the lines dropped are counted and said first in
 * the next interval that logs. */
void xfer_server_log(xfer_server *s, uint64_t serial, const char *what)
{
    if (!s->cfg.log)
        return;
    uint64_t now = xfer_server_now(s);
    if (now - s->log_window >= s->cfg.log_interval_ns) {
        s->log_window = now;
        s->logged = 0;
    }
    if (s->logged >= XFER_SERVER_LOG_BURST) {
        s->log_dropped++;
        return;
    }
    s->logged++;
    char line[256];
    if (s->log_dropped) {
        snprintf(line, sizeof line, "(%llu log lines dropped by the rate "
                 "limit)", (unsigned long long)s->log_dropped);
        s->log_dropped = 0;
        s->cfg.log(s->cfg.log_ud, line);
    }
    if (serial)
        snprintf(line, sizeof line, "conn %llu %s",
                 (unsigned long long)serial, what);
    else /* not about one connection: the listener, the server */
        snprintf(line, sizeof line, "%s", what);
    s->cfg.log(s->cfg.log_ud, line);
}

/* ---------------------------------------------------------------------- */
/* Config                                                                  */
/* ---------------------------------------------------------------------- */

static bool shards_ok(const xfer_server_config *c)
{
    uint64_t seen = 0;
    if (!c->shards || c->nshards == 0 || c->nshards > XFER_MAX_SHARDS)
        return false;
    for (uint16_t i = 0; i < c->nshards; i++) {
        const xfer_server_shard *h = &c->shards[i];
        if (h->index >= XFER_MAX_SHARDS || !h->base || h->len == 0 ||
            (seen & (1ull << h->index)))
            return false;
        seen |= 1ull << h->index;
    }
    return true;
}

static int make_addr(const char *addr, uint16_t port,
                     struct sockaddr_storage *ss, int *sl);

/* A numeric address of the loopback interface (127/8, ::1). */
static bool is_loopback(const char *addr)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (evutil_inet_pton(AF_INET, addr, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    return evutil_inet_pton(AF_INET6, addr, &a6) == 1 &&
           IN6_IS_ADDR_LOOPBACK(&a6);
}

/* The secret, copied; a non-loopback bind needs one unless insecure. */
static int take_secret(xfer_server *s, const xfer_server_config *cfg)
{
    s->cfg.secret = NULL;
    struct sockaddr_storage ss;
    int sl;
    if (make_addr(s->addr, 0, &ss, &sl) != 0)
        return XFER_ERR_INVALID_ARG;
    if (!cfg->secret)
        return cfg->insecure || is_loopback(s->addr) ? 0 : XFER_ERR_AUTH;
    if (cfg->secret_len < XFER_AUTH_SECRET_MIN ||
        cfg->secret_len > XFER_AUTH_SECRET_MAX)
        return XFER_ERR_INVALID_ARG;
    memcpy(s->secret, cfg->secret, cfg->secret_len);
    s->cfg.secret = s->secret;
    return 0;
}

/* The bytes each version of xfer_server_config holds (fsm/util.h). */
static const size_t config_lens[] = {
    offsetof(xfer_server_config, write_min_rate),
    offsetof(xfer_server_config, shard_mem),
    offsetof(xfer_server_config, max_hold_ns),
    sizeof(xfer_server_config)};

/* Copy cfg into s with every "0 means the default" filled in. */
static int take_config(xfer_server *s, const xfer_server_config *cfg)
{
    xfer_server_config *c = &s->cfg;
    memset(c, 0, sizeof *c); /* a version 1 config: the rest defaults */
    if (xfer_util_versioned_copy(c, cfg, cfg->version, config_lens,
                                 XFER_UTIL_NVERSIONS(config_lens)) ||
        !c->base || !shards_ok(c))
        return XFER_ERR_INVALID_ARG;
    c->version = XFER_SERVER_CONFIG_VERSION;
    const char *addr = cfg->addr ? cfg->addr : "127.0.0.1";
    if (strlen(addr) >= sizeof s->addr)
        return XFER_ERR_INVALID_ARG;
    memcpy(s->addr, addr, strlen(addr) + 1);
    c->addr = s->addr;
    memcpy(s->shard_cfg, cfg->shards, cfg->nshards * sizeof *cfg->shards);
    c->shards = s->shard_cfg;
    if (c->integrity >= XFER_INTEGRITY_COUNT_)
        return XFER_ERR_INVALID_ARG;
    if (!c->integrity)
        c->integrity = XFER_INTEGRITY_DEFAULT_MODE;
    if (!c->max_reservations)
        c->max_reservations = 4096;
    if (!c->max_tombstones)
        c->max_tombstones = 4 * c->max_reservations;
    if (!c->lease_ttl_ns)
        c->lease_ttl_ns = 10000000000ull;
    if (!c->tombstone_ttl_ns)
        c->tombstone_ttl_ns = 2 * c->lease_ttl_ns;
    if (!c->take_grace_ns)
        c->take_grace_ns = 30000000000ull;
    if (!c->drain_timeout_ns)
        c->drain_timeout_ns = c->lease_ttl_ns;
    if (c->max_hold_ns && (c->max_hold_ns < c->lease_ttl_ns ||
                           c->max_hold_ns > UINT32_MAX * 1000000ull))
        return XFER_ERR_INVALID_ARG;
    s->own_clock = !c->clock;
    if (!c->clock)
        c->clock = xfer_clock_monotonic;
    if (!c->max_sessions)
        c->max_sessions = 1024;
    if (!c->session_grace_ns)
        c->session_grace_ns = c->take_grace_ns;
    if (!c->session_max_reservations)
        c->session_max_reservations = c->max_reservations / 4;
    if (!c->session_max_tombstones)
        c->session_max_tombstones = c->max_tombstones / 4;
    if (!c->hello_timeout_ns)
        c->hello_timeout_ns = 5000000000ull;
    if (!c->header_timeout_ns)
        c->header_timeout_ns = 10000000000ull;
    if (!c->idle_timeout_ns)
        c->idle_timeout_ns = 300000000000ull;
    if (!c->write_timeout_ns)
        c->write_timeout_ns = 10000000000ull;
    if (!c->max_conns)
        c->max_conns = 4096;
    if (!c->out_max_bytes)
        c->out_max_bytes = 64ull << 20;
    if (!c->accept_retry_ns)
        c->accept_retry_ns = 100000000ull;
    if (!c->log_interval_ns)
        c->log_interval_ns = 1000000000ull;
    if (!c->write_min_rate)
        c->write_min_rate = 64u << 10;
    /* a peer may always hold what one of its sessions may */
    if (!c->peer_max_reservations)
        c->peer_max_reservations =
            u32_max(c->max_reservations / 2, c->session_max_reservations);
    if (!c->peer_max_tombstones)
        c->peer_max_tombstones =
            u32_max(c->max_tombstones / 2, c->session_max_tombstones);
    if (!c->max_peer_sessions)
        c->max_peer_sessions =
            c->max_sessions >= 16 ? (uint16_t)(c->max_sessions / 16) : 1;
    return take_secret(s, cfg);
}

/* ---------------------------------------------------------------------- */
/* Shards                                                                  */
/* ---------------------------------------------------------------------- */

static int make_shards(xfer_server *s)
{
    for (uint16_t i = 0; i < s->cfg.nshards; i++) {
        const xfer_server_shard *h = &s->shard_cfg[i];
        xfer_server_hosted *hs = &s->shards[i];
        xfer_shard_config sc = {
            .version = XFER_SHARD_CONFIG_VERSION,
            .pool_bytes = h->len,
            .max_reservations = s->cfg.max_reservations,
            .max_tombstones = s->cfg.max_tombstones,
            .lease_ttl_ns = s->cfg.lease_ttl_ns,
            .tombstone_ttl_ns = s->cfg.tombstone_ttl_ns,
            /* in whole ms, rounded up (never below the lease) */
            .max_hold_ms = (uint32_t)((s->cfg.max_hold_ns + 999999ull) /
                                      1000000ull),
            .shard_index = h->index,
            .pool_memory = h->base,
            .one_sided = s->one_sided,
            .alloc = s->cfg.alloc,
            .trace = h->trace.fn ? h->trace : s->cfg.trace,
            /* ids nobody can predict, and one owner per session */
            .rng = {.next = xfer_auth_rng_next, .ud = &s->idrng},
            .max_owners = s->cfg.max_sessions,
            .owner_max_reservations = s->cfg.session_max_reservations,
            .owner_max_bytes = s->cfg.session_max_bytes
                                   ? s->cfg.session_max_bytes
                                   : h->len / 4,
            .owner_max_tombstones = s->cfg.session_max_tombstones,
        };
        hs->index = h->index;
        int rc = xfer_shard_new(&sc, &hs->sh);
        if (!rc)
            rc = xfer_server_track_init(s, hs);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Listening                                                               */
/* ---------------------------------------------------------------------- */

static void on_accept(struct evconnlistener *lis, evutil_socket_t fd,
                      struct sockaddr *sa, int salen, void *arg)
{
    xfer_server *s = arg;
    if (s->conns.n >= s->cfg.max_conns) {
        s->conns_refused++;
        xfer_server_log(s, 0, "connection cap reached, refused");
        evutil_closesocket(fd);
        return;
    }
    xfer_server_conn_accept(s, fd);
}

/* accept failed (EMFILE, ENFILE, ENOBUFS...): pause accepting instead of
 * spinning on a listener that stays readable, and retry on a timer; the
 * peers already connected keep being served.  One line per log interval
 * says so, with the pauses since the last one. */
static void on_accept_error(struct evconnlistener *lis, void *arg)
{
    xfer_server *s = arg;
    uint64_t now = xfer_server_now(s);
    s->accept_pauses++;
    if (!s->accept_logged || now - s->accept_log_ns >= s->cfg.log_interval_ns) {
        char what[128];
        snprintf(what, sizeof what, "accept failed (%s), paused (%llu times)",
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()),
                 (unsigned long long)s->accept_pauses);
        xfer_server_log(s, 0, what);
        s->accept_logged = true;
        s->accept_log_ns = now;
        s->accept_pauses = 0;
    }
    evconnlistener_disable(lis);
    struct timeval tv = {
        .tv_sec = (long)(s->cfg.accept_retry_ns / 1000000000ull),
        .tv_usec = (long)(s->cfg.accept_retry_ns % 1000000000ull / 1000)};
    event_add(s->accept_ev, &tv);
}

static void on_accept_retry(evutil_socket_t fd, short what, void *arg)
{
    xfer_server *s = arg;
    if (s->lis && !s->draining)
        evconnlistener_enable(s->lis);
}

/* Parse a numeric IPv4 or IPv6 address with a port (0 allowed). */
static int make_addr(const char *addr, uint16_t port,
                     struct sockaddr_storage *ss, int *sl)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (evutil_inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        *sl = sizeof *v4;
        return 0;
    }
    if (evutil_inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        *sl = sizeof *v6;
        return 0;
    }
    return XFER_ERR_INVALID_ARG;
}

/* An OS call of the listener failed: say which, where and the OS's
 * reason through the log ("bind 127.0.0.1:7470: Address already in
 * use"), and keep errno for the caller (xfer_server_new's XFER_ERR_IO). */
static int listen_failed(xfer_server *s, const char *call)
{
    int e = errno;
    char what[200];
    snprintf(what, sizeof what, "%s %s%s%s:%u: %s", call,
             strchr(s->cfg.addr, ':') ? "[" : "", s->cfg.addr,
             strchr(s->cfg.addr, ':') ? "]" : "", (unsigned)s->cfg.port,
             strerror(e));
    xfer_server_log(s, 0, what);
    errno = e;
    return XFER_ERR_IO;
}

/* Bind addr:port and learn the port actually bound. */
static int listen_on(xfer_server *s)
{
    struct sockaddr_storage ss;
    int sl;
    if (make_addr(s->cfg.addr, s->cfg.port, &ss, &sl) != 0)
        return XFER_ERR_INVALID_ARG;
    errno = 0;
    s->lis = evconnlistener_new_bind(
        s->base, on_accept, s,
        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
        128, (struct sockaddr *)&ss, sl);
    if (!s->lis) /* bind, or listen, or the socket itself: errno says */
        return listen_failed(s, "bind");
    evconnlistener_set_error_cb(s->lis, on_accept_error);
    socklen_t len = sizeof ss;
    if (getsockname(evconnlistener_get_fd(s->lis), (struct sockaddr *)&ss,
                    &len) != 0)
        return listen_failed(s, "getsockname");
    s->port = ntohs(ss.ss_family == AF_INET6
                        ? ((struct sockaddr_in6 *)&ss)->sin6_port
                        : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    xfer_server_conn_reap(arg);
}

/* ---------------------------------------------------------------------- */
/* New and del                                                             */
/* ---------------------------------------------------------------------- */

/* rdma: also serve the shards over RDMA (server_rdma.h) */
static int server_new(const xfer_server_config *cfg, bool rdma,
                      const xfer_server_rdma_config *rcfg, xfer_server **out)
{
    if (!cfg || !out)
        return XFER_ERR_INVALID_ARG;
    xfer_server *s = xfer_util_calloc(&cfg->alloc, 1, sizeof *s);
    if (!s)
        return XFER_ERR_NOMEM;
    int rc = take_config(s, cfg);
    if (rc) {
        xfer_util_free(&cfg->alloc, s);
        return rc;
    }
    s->base = cfg->base;
    xfer_base_ref(s->base); /* dropped by xfer_server_del: base_ref.h */
    s->rng = cfg->fault_seed ? cfg->fault_seed : 0x9e3779b97f4a7c15ull;
    xfer_faults_init(&s->rules, cfg->fault_seed);
    rc = XFER_ERR_NOMEM;
    int trc = xfer_timer_init(&s->timer, s->base, xfer_server_on_timer, s);
    s->drain_ev =
        event_new(s->base, -1, EV_PERSIST, xfer_server_on_drain_tick, s);
    s->reap_ev = event_new(s->base, -1, 0, on_reap, s);
    s->flush_ev = event_new(s->base, -1, 0, xfer_server_conn_on_flush, s);
    s->accept_ev = event_new(s->base, -1, 0, on_accept_retry, s);
    s->sweep_ev = event_new(s->base, -1, EV_PERSIST, xfer_server_conn_sweep,
                            s);
    if (trc || !s->drain_ev || !s->reap_ev || !s->accept_ev ||
        !s->sweep_ev || !s->flush_ev)
        goto out_fail;
    s->one_sided = rdma;
    uint64_t probe;
    rc = xfer_auth_random(&probe, sizeof probe); /* the CSPRNG answers */
    if (!rc)
        rc = xfer_server_sess_init(s);
    if (!rc)
        rc = make_shards(s);
    if (!rc)
        rc = xfer_server_copy_init(s, s->cfg.shard_mem);
    s->cfg.shard_mem = NULL; /* borrowed only until here */
    if (rc)
        goto out_fail;
    rc = listen_on(s);
    if (!rc && rdma)
        rc = xfer_server_rdma_new(s, rcfg, &s->rdma);
    if (rc)
        goto out_fail;
    struct timeval tick = xfer_server_sweep_tick(s);
    event_add(s->sweep_ev, &tick);
    *out = s;
    return 0;
out_fail: {
    int e = errno; /* XFER_ERR_IO: the caller reads why in errno */
    xfer_server_del(s);
    errno = e;
    return rc;
}
}

int xfer_server_new(const xfer_server_config *cfg, xfer_server **out)
{
    return server_new(cfg, false, NULL, out);
}

void xfer_server_rdma_config_default(xfer_server_rdma_config *cfg)
{
    if (cfg)
        *cfg = (xfer_server_rdma_config){
            .version = XFER_SERVER_RDMA_CONFIG_VERSION};
}

int xfer_server_new_rdma(const xfer_server_config *cfg,
                         const xfer_server_rdma_config *rcfg,
                         xfer_server **out)
{
    return server_new(cfg, true, rcfg, out);
}

uint16_t xfer_server_rdma_port(const xfer_server *s)
{
    return s ? xfer_server_rdma_bound_port(s->rdma) : 0;
}

void xfer_server_del(xfer_server *s)
{
    if (!s)
        return;
    xfer_dir_del(s->dir); /* entries left registered go with their lease */
    while (!xfer_list_empty(&s->conns))
        xfer_server_conn_close(xfer_server_conn_of(s->conns.head));
    xfer_server_rdma_del(s->rdma); /* before the shards it registered */
    xfer_server_copy_clear(s);     /* before the shards it writes */
    if (s->lis)
        evconnlistener_free(s->lis);
    xfer_timer_clear(&s->timer);
    if (s->drain_ev)
        event_free(s->drain_ev);
    if (s->reap_ev)
        event_free(s->reap_ev);
    if (s->flush_ev)
        event_free(s->flush_ev);
    if (s->accept_ev)
        event_free(s->accept_ev);
    if (s->sweep_ev)
        event_free(s->sweep_ev);
    for (uint16_t i = 0; i < s->cfg.nshards; i++) {
        xfer_server_track_clear(s, &s->shards[i]);
        xfer_shard_del(s->shards[i].sh);
    }
    xfer_server_sess_clear(s);
    OPENSSL_cleanse(s->secret, sizeof s->secret);
    struct event_base *base = s->base;
    xfer_allocator a = s->cfg.alloc;
    xfer_util_free(&a, s);
    xfer_base_unref(base); /* last: the base may go with it */
}

int xfer_server_add_rule(xfer_server *s, const xfer_fault_rule *rule)
{
    if (!s)
        return XFER_ERR_INVALID_ARG;
    return xfer_faults_add(&s->rules, rule);
}

void xfer_server_clear_rules(xfer_server *s)
{
    if (s)
        xfer_faults_clear(&s->rules);
}

uint16_t xfer_server_port(const xfer_server *s)
{
    return s ? s->port : 0;
}

uint16_t xfer_server_nshards(const xfer_server *s)
{
    return s ? s->cfg.nshards : 0;
}

uint16_t xfer_server_shard_index(const xfer_server *s, uint16_t i)
{
    return s && i < s->cfg.nshards ? s->shards[i].index : XFER_SHARD_NONE;
}
