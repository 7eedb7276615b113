/*
 * transport/metrics.c - the exposition of xfer/metrics.h as a library
 * object: the objects registered, the render into a caller's buffer, and
 * the HTTP side on libevent's evhttp (mounted on the caller's, or on one of
 * our own with xfer_metrics_listen).
 *
 * What must stay true: a scrape renders a fresh snapshot on the loop that
 * owns the objects, so the numbers are one consistent cut; a request that
 * is not a GET gets 405; nothing here prints.
 */
#include "xfer/metrics.h"

#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "base_ref.h"
#include "metrics_int.h"
#include "util.h" /* fsm_private_dep: the injected allocator */

#define MAX_MOUNTS 4

struct xfer_metrics {
    xfer_metrics_config cfg;
    const xfer_engine *engine;
    const xfer_server *server;
    const xfer_consumer *consumer;
    const xfer_tcp *tcp;
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

int xfer_metrics_new(const xfer_metrics_config *cfg, xfer_metrics **out)
{
    if (!cfg || !out || cfg->version != XFER_METRICS_CONFIG_VERSION ||
        !cfg->base)
        return XFER_ERR_INVALID_ARG;
    xfer_metrics *m = xfer_util_calloc(&cfg->alloc, 1, sizeof *m);
    if (!m)
        return XFER_ERR_NOMEM;
    m->cfg = *cfg;
    xfer_base_ref(cfg->base); /* dropped by xfer_metrics_del: base_ref.h */
    *out = m;
    return 0;
}

void xfer_metrics_del(xfer_metrics *m)
{
    if (!m)
        return;
    for (unsigned i = 0; i < MAX_MOUNTS; i++) {
        if (m->mounts[i] && m->mounts[i] != m->own)
            evhttp_del_cb(m->mounts[i], m->paths[i]);
        xfer_util_free(&m->cfg.alloc, m->paths[i]);
    }
    if (m->own)
        evhttp_free(m->own);
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

/* The port our own evhttp got (after port 0). */
static uint16_t bound_port(struct evhttp_bound_socket *bs)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    evutil_socket_t fd = evhttp_bound_socket_get_fd(bs);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

int xfer_metrics_listen(xfer_metrics *m, const char *addr, uint16_t port)
{
    unsigned char probe[16];
    if (!m || !addr || (evutil_inet_pton(AF_INET, addr, probe) != 1 &&
                        evutil_inet_pton(AF_INET6, addr, probe) != 1))
        return XFER_ERR_INVALID_ARG;
    if (m->own)
        return XFER_ERR_STATE;
    m->own = evhttp_new(m->cfg.base);
    if (!m->own)
        return XFER_ERR_NOMEM;
    struct evhttp_bound_socket *bs =
        evhttp_bind_socket_with_handle(m->own, addr, port);
    int rc = bs ? xfer_metrics_mount(m, m->own, "/metrics") : XFER_ERR_IO;
    if (rc) {
        int e = errno; /* XFER_ERR_IO: the caller reads why in errno */
        evhttp_free(m->own);
        m->own = NULL;
        errno = e;
        return rc;
    }
    m->port = bound_port(bs);
    return 0;
}

uint16_t xfer_metrics_port(const xfer_metrics *m)
{
    return m ? m->port : 0;
}
