/*
 * transport/metrics.c - the exposition of xfer/metrics.h as a library
 * object: the objects registered, the render into a caller's buffer, and
 * the HTTP side on libevent's evhttp (mounted on the caller's, or on one of
 * our own with xfer_metrics_listen).
 *
 * What must stay true: a scrape renders a fresh snapshot on the loop that
 * owns the objects, so the numbers are one consistent cut; a request that
 * is not a GET gets 405; nothing here prints.  Our own listener is as
 * bounded as the shard port (issue 24): header and body sizes, methods,
 * idle time (evhttp's settings), open connections (counted here: evhttp
 * 2.1 has no cap of its own) and the fd limit (accepting pauses on a
 * timer instead of spinning), so a hostile scraper costs a bounded amount
 * of memory, fds and CPU and never starves the shard port of the loop.
 */
#include "xfer/metrics.h"

#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>

#include "base_ref.h"
#include "metrics_int.h"
#include "util.h" /* fsm_private_dep: the injected allocator */

#define MAX_MOUNTS 4

/* The defaults of the listener's bounds (xfer/metrics.h). */
#define DEF_HEADER_BYTES 8192u
#define DEF_BODY_BYTES 1024u
#define DEF_CONNS 64u
#define DEF_IDLE_NS 10000000000ull
#define DEF_RETRY_NS 100000000ull

struct xfer_metrics {
    xfer_metrics_config cfg;
    struct evconnlistener *lis;      /* our listener (evhttp's after bind) */
    struct event *retry_ev;          /* re-enables it after an accept error */
    struct event *adopt_ev;          /* runs adopt() after an accept */
    struct bufferevent **fresh;      /* accepted, not yet adopted: each
                                      * with a reference of ours */
    uint32_t nfresh, live;           /* live: open connections */
    bool at_cap, paused_err;         /* why accepting is off */
    bool closing;                    /* in xfer_metrics_del */
    xfer_metrics *next;              /* in `registry` while listening */
    const xfer_engine *engine;
    const xfer_server *server;
    const xfer_consumer *consumer;
    const xfer_tcp *tcp;
    const xfer_dir *dir;
    struct evhttp *own;              /* from xfer_metrics_listen */
    struct evhttp *mounts[MAX_MOUNTS];
    char *paths[MAX_MOUNTS];
    uint16_t port;
};

/* Render the whole exposition into a new evbuffer (NULL: out of memory). */
static struct evbuffer *render(const xfer_metrics *m)
{
    xfer_metrics_text t = {.b = evbuffer_new()};
    if (!t.b)
        return NULL;
    if (m->engine)
        xfer_metrics_engine(&t, m->engine);
    if (m->server)
        xfer_metrics_server(&t, m->server);
    if (m->consumer)
        xfer_metrics_consumer(&t, m->consumer);
    if (m->tcp)
        xfer_metrics_tcp(&t, m->tcp);
    if (m->dir)
        xfer_metrics_dir(&t, m->dir);
    if (t.err) {
        evbuffer_free(t.b);
        return NULL;
    }
    return t.b;
}

/* Copy b into buf like snprintf; returns the full length. */
static size_t copy_out(struct evbuffer *b, char *buf, size_t cap)
{
    if (!b)
        return 0;
    size_t n = evbuffer_get_length(b);
    if (cap) {
        size_t k = n < cap - 1 ? n : cap - 1;
        evbuffer_copyout(b, buf, k);
        buf[k] = '\0';
    }
    evbuffer_free(b);
    return n;
}

size_t xfer_metrics_render(const xfer_metrics *m, char *buf, size_t cap)
{
    return m ? copy_out(render(m), buf, cap) : 0;
}

static size_t one_object(int kind, const void *obj, char *buf, size_t cap)
{
    xfer_metrics_text t = {.b = evbuffer_new()};
    if (!t.b || !obj) {
        if (t.b)
            evbuffer_free(t.b);
        return 0;
    }
    if (kind == 0)
        xfer_metrics_engine(&t, obj);
    else if (kind == 1)
        xfer_metrics_server(&t, obj);
    else
        xfer_metrics_consumer(&t, obj);
    if (t.err) {
        evbuffer_free(t.b);
        return 0;
    }
    return copy_out(t.b, buf, cap);
}

size_t xfer_engine_metrics(const xfer_engine *e, char *buf, size_t cap)
{
    return one_object(0, e, buf, cap);
}

size_t xfer_server_metrics(const xfer_server *s, char *buf, size_t cap)
{
    return one_object(1, s, buf, cap);
}

size_t xfer_consumer_metrics(const xfer_consumer *c, char *buf, size_t cap)
{
    return one_object(2, c, buf, cap);
}

/* ---------------------------------------------------------------------- */
/* The object                                                              */
/* ---------------------------------------------------------------------- */

void xfer_metrics_config_default(xfer_metrics_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->version = XFER_METRICS_CONFIG_VERSION;
}

/* Version 1 ended after alloc; version 2 added the listener's bounds. */
static const size_t cfg_lens[] = {
    offsetof(xfer_metrics_config, max_header_bytes),
    sizeof(xfer_metrics_config)};

int xfer_metrics_new(const xfer_metrics_config *cfg, xfer_metrics **out)
{
    xfer_metrics_config c;
    xfer_metrics_config_default(&c);
    if (!cfg || !out ||
        xfer_util_versioned_copy(&c, cfg, cfg->version, cfg_lens,
                                 XFER_UTIL_NVERSIONS(cfg_lens)) ||
        !c.base)
        return XFER_ERR_INVALID_ARG;
    c.version = XFER_METRICS_CONFIG_VERSION;
    if (!c.max_header_bytes)
        c.max_header_bytes = DEF_HEADER_BYTES;
    if (!c.max_body_bytes)
        c.max_body_bytes = DEF_BODY_BYTES;
    if (!c.max_conns)
        c.max_conns = DEF_CONNS;
    if (!c.idle_timeout_ns)
        c.idle_timeout_ns = DEF_IDLE_NS;
    if (!c.accept_retry_ns)
        c.accept_retry_ns = DEF_RETRY_NS;
    xfer_metrics *m = xfer_util_calloc(&c.alloc, 1, sizeof *m);
    if (!m)
        return XFER_ERR_NOMEM;
    m->cfg = c;
    xfer_base_ref(c.base); /* dropped by xfer_metrics_del: base_ref.h */
    *out = m;
    return 0;
}

/* Every object that listens, so the accept error callback can find its
 * object: evhttp_bind_listener takes the listener's one user pointer for
 * the evhttp, and libevent 2.1 hands the error callback that pointer.
 * Any thread creates and deletes objects, hence the lock. */
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static xfer_metrics *registry;

static void registry_add(xfer_metrics *m)
{
    pthread_mutex_lock(&registry_mu);
    m->next = registry;
    registry = m;
    pthread_mutex_unlock(&registry_mu);
}

static void registry_remove(xfer_metrics *m)
{
    pthread_mutex_lock(&registry_mu);
    for (xfer_metrics **p = &registry; *p; p = &(*p)->next)
        if (*p == m) {
            *p = m->next;
            break;
        }
    pthread_mutex_unlock(&registry_mu);
}

static xfer_metrics *registry_find(const struct evconnlistener *lis)
{
    pthread_mutex_lock(&registry_mu);
    xfer_metrics *m = registry;
    while (m && m->lis != lis)
        m = m->next;
    pthread_mutex_unlock(&registry_mu);
    return m;
}

void xfer_metrics_del(xfer_metrics *m)
{
    if (!m)
        return;
    registry_remove(m);
    for (unsigned i = 0; i < MAX_MOUNTS; i++) {
        if (m->mounts[i] && m->mounts[i] != m->own)
            evhttp_del_cb(m->mounts[i], m->paths[i]);
        xfer_util_free(&m->cfg.alloc, m->paths[i]);
    }
    m->closing = true; /* evhttp_free closes connections: count only */
    if (m->own)
        evhttp_free(m->own); /* frees m->lis too */
    if (m->retry_ev)
        event_free(m->retry_ev);
    if (m->adopt_ev)
        event_free(m->adopt_ev);
    for (uint32_t i = 0; i < m->nfresh; i++)
        bufferevent_decref(m->fresh[i]);
    xfer_util_free(&m->cfg.alloc, m->fresh);
    struct event_base *base = m->cfg.base;
    xfer_allocator a = m->cfg.alloc;
    xfer_util_free(&a, m);
    xfer_base_unref(base); /* last: the base may go with it */
}

int xfer_metrics_add_engine(xfer_metrics *m, const xfer_engine *e)
{
    if (!m || !e)
        return XFER_ERR_INVALID_ARG;
    if (m->engine)
        return XFER_ERR_EXISTS;
    m->engine = e;
    return 0;
}

int xfer_metrics_add_server(xfer_metrics *m, const xfer_server *s)
{
    if (!m || !s)
        return XFER_ERR_INVALID_ARG;
    if (m->server)
        return XFER_ERR_EXISTS;
    m->server = s;
    return 0;
}

int xfer_metrics_add_consumer(xfer_metrics *m, const xfer_consumer *c)
{
    if (!m || !c)
        return XFER_ERR_INVALID_ARG;
    if (m->consumer)
        return XFER_ERR_EXISTS;
    m->consumer = c;
    return 0;
}

int xfer_metrics_add_tcp(xfer_metrics *m, const xfer_tcp *t)
{
    if (!m || !t)
        return XFER_ERR_INVALID_ARG;
    if (m->tcp)
        return XFER_ERR_EXISTS;
    m->tcp = t;
    return 0;
}

int xfer_metrics_add_dir(xfer_metrics *m, const xfer_dir *d)
{
    if (!m || !d)
        return XFER_ERR_INVALID_ARG;
    if (m->dir)
        return XFER_ERR_EXISTS;
    m->dir = d;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* HTTP                                                                    */
/* ---------------------------------------------------------------------- */

static void on_request(struct evhttp_request *req, void *arg)
{
    xfer_metrics *m = arg;
    if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
        evhttp_send_error(req, 405, "Method Not Allowed");
        return;
    }
    struct evbuffer *b = render(m);
    if (!b) {
        evhttp_send_error(req, 500, "Out of memory");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

int xfer_metrics_mount(xfer_metrics *m, struct evhttp *http, const char *path)
{
    if (!m || !http || !path || path[0] != '/')
        return XFER_ERR_INVALID_ARG;
    unsigned i = 0;
    while (i < MAX_MOUNTS && m->mounts[i])
        i++;
    if (i == MAX_MOUNTS)
        return XFER_ERR_BUSY;
    size_t n = strlen(path) + 1;
    char *p = xfer_util_alloc(&m->cfg.alloc, n);
    if (!p)
        return XFER_ERR_NOMEM;
    memcpy(p, path, n);
    if (evhttp_set_cb(http, p, on_request, m) != 0) {
        xfer_util_free(&m->cfg.alloc, p);
        return XFER_ERR_EXISTS;
    }
    m->mounts[i] = http;
    m->paths[i] = p;
    return 0;
}

/* The port our own listener got (after port 0). */
static uint16_t bound_port(struct evconnlistener *lis)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    evutil_socket_t fd = evconnlistener_get_fd(lis);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* Accept again if nothing holds it off: called when a connection closed
 * or the retry timer fired. */
static void maybe_resume(xfer_metrics *m)
{
    if (!m->at_cap && !m->paused_err)
        evconnlistener_enable(m->lis);
}

/* A connection closed (evhttp calls this once, when it closes the
 * socket). */
static void conn_closed(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    xfer_metrics *m = arg;
    m->live--;
    if (!m->closing && m->at_cap && m->live < m->cfg.max_conns) {
        m->at_cap = false;
        maybe_resume(m);
    }
}

/* evhttp asks for each accepted connection's bufferevent before it builds
 * the connection; evhttp 2.1 has no connection cap and no callback for a
 * new connection, so the count is kept here: counted now, and the
 * connection's close callback set by adopt() once evhttp has built it
 * (it runs from the active queue before the loop polls again, so before
 * any of the connection's I/O).  At the cap the listener stops accepting
 * (evhttp's accept loop checks after each accept), so the count never
 * passes the cap.  NULL (out of memory) makes evhttp build a plain one,
 * uncounted: no worse than without a cap. */
static struct bufferevent *new_conn(struct event_base *base, void *arg)
{
    xfer_metrics *m = arg;
    if (m->nfresh >= m->cfg.max_conns)
        return NULL; /* cannot happen: the cap stops accepting first */
    struct bufferevent *b = bufferevent_socket_new(base, -1,
                                                   BEV_OPT_CLOSE_ON_FREE);
    if (!b)
        return NULL;
    bufferevent_incref(b); /* so adopt() may look at it whatever evhttp
                            * did with it meanwhile */
    m->fresh[m->nfresh++] = b;
    event_active(m->adopt_ev, EV_TIMEOUT, 0);
    if (++m->live >= m->cfg.max_conns) {
        m->at_cap = true;
        evconnlistener_disable(m->lis);
    }
    return b;
}

/* Give each freshly accepted connection our close callback.  evhttp set
 * the bufferevent's callbacks with the connection as their argument; a
 * bufferevent evhttp already freed (its connection failed to start) has
 * none, and its connection is no longer counted. */
static void adopt(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    xfer_metrics *m = arg;
    for (uint32_t i = 0; i < m->nfresh; i++) {
        bufferevent_data_cb rd = NULL;
        void *evcon = NULL;
        bufferevent_getcb(m->fresh[i], &rd, NULL, NULL, &evcon);
        if (rd && evcon)
            evhttp_connection_set_closecb(evcon, conn_closed, m);
        else
            conn_closed(NULL, m);
        bufferevent_decref(m->fresh[i]);
    }
    m->nfresh = 0;
}

/* accept failed (EMFILE, ENFILE, ENOBUFS...): the waiting connection
 * keeps the socket readable, so without a pause the loop would spin on it
 * (and libevent would warn at every turn).  Pause, retry on a timer. */
static void on_accept_error(struct evconnlistener *lis, void *arg)
{
    (void)arg; /* evhttp's */
    xfer_metrics *m = registry_find(lis);
    evconnlistener_disable(lis);
    if (!m)
        return; /* cannot happen: listening objects are registered */
    m->paused_err = true;
    struct timeval tv = {
        .tv_sec = (long)(m->cfg.accept_retry_ns / 1000000000ull),
        .tv_usec = (long)(m->cfg.accept_retry_ns % 1000000000ull / 1000)};
    event_add(m->retry_ev, &tv);
}

static void on_accept_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    xfer_metrics *m = arg;
    m->paused_err = false;
    maybe_resume(m);
}

/* The listener on addr:port, bound to m->own, with evhttp's bounds set. */
static int own_listener(xfer_metrics *m, const char *addr, uint16_t port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (evutil_inet_pton(AF_INET, addr, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons(port);
        len = sizeof *in4;
    } else {
        evutil_inet_pton(AF_INET6, addr, &in6->sin6_addr);
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        len = sizeof *in6;
    }
    m->lis = evconnlistener_new_bind(
        m->cfg.base, NULL, NULL,
        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE,
        -1, (struct sockaddr *)&ss, (int)len);
    if (!m->lis)
        return XFER_ERR_IO;
    if (!evhttp_bind_listener(m->own, m->lis)) {
        evconnlistener_free(m->lis);
        m->lis = NULL;
        return XFER_ERR_NOMEM;
    }
    evconnlistener_set_error_cb(m->lis, on_accept_error);
    evhttp_set_max_headers_size(m->own, (ev_ssize_t)m->cfg.max_header_bytes);
    evhttp_set_max_body_size(m->own, (ev_ssize_t)m->cfg.max_body_bytes);
    evhttp_set_allowed_methods(
        m->own, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                    EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                    EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    struct timeval tv = {
        .tv_sec = (long)(m->cfg.idle_timeout_ns / 1000000000ull),
        .tv_usec = (long)(m->cfg.idle_timeout_ns % 1000000000ull / 1000)};
    evhttp_set_timeout_tv(m->own, &tv);
    evhttp_set_bevcb(m->own, new_conn, m);
    return 0;
}

int xfer_metrics_listen(xfer_metrics *m, const char *addr, uint16_t port)
{
    unsigned char probe[16];
    if (!m || !addr || (evutil_inet_pton(AF_INET, addr, probe) != 1 &&
                        evutil_inet_pton(AF_INET6, addr, probe) != 1))
        return XFER_ERR_INVALID_ARG;
    if (m->own)
        return XFER_ERR_STATE;
    int rc = XFER_ERR_NOMEM;
    m->own = evhttp_new(m->cfg.base);
    m->retry_ev = event_new(m->cfg.base, -1, 0, on_accept_retry, m);
    m->adopt_ev = event_new(m->cfg.base, -1, 0, adopt, m);
    m->fresh = xfer_util_calloc(&m->cfg.alloc, m->cfg.max_conns,
                                sizeof *m->fresh);
    if (!m->own || !m->retry_ev || !m->adopt_ev || !m->fresh)
        goto fail;
    rc = own_listener(m, addr, port);
    if (rc)
        goto fail;
    rc = xfer_metrics_mount(m, m->own, "/metrics");
    if (rc)
        goto fail;
    m->port = bound_port(m->lis);
    registry_add(m);
    return 0;
fail:;
    int e = errno; /* XFER_ERR_IO: the caller reads why in errno */
    if (m->own)
        evhttp_free(m->own); /* and the listener, if bound */
    if (m->retry_ev)
        event_free(m->retry_ev);
    if (m->adopt_ev)
        event_free(m->adopt_ev);
    xfer_util_free(&m->cfg.alloc, m->fresh);
    m->own = NULL;
    m->lis = NULL;
    m->retry_ev = NULL;
    m->adopt_ev = NULL;
    m->fresh = NULL;
    errno = e;
    return rc;
}

uint16_t xfer_metrics_port(const xfer_metrics *m)
{
    return m ? m->port : 0;
}
