/*
 * transport/dir.c - the directory client (xfer/dir.h): unary requests to
 * etcd's v3 JSON gateway over libevent's HTTP client, endpoint failover,
 * user/password authentication, TLS, and the registration of a shard
 * server's entries under one lease that is kept alive.
 *
 * What must stay true:
 *  - no callback of the user runs after xfer_dir_del, nor from inside a
 *    call into the directory (unregister's done is deferred);
 *  - every request in flight is on d->reqs, so del frees what evhttp
 *    drops without calling back;
 *  - etcd is never waited on: a failed request moves to the next
 *    endpoint, and what was being done is retried after a jittered,
 *    capped backoff (backoff.h); the registration is put again under a
 *    new lease whenever the old one was lost.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <json-c/json.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include "base_ref.h"
#include "dir_int.h"
#include "timer.h"
#include "util.h" /* fsm/: the versioned config copy (fsm_private_dep) */
#include "xfer/xfer.h"

/* ---------------------------------------------------------------------- */
/* Helpers                                                                 */
/* ---------------------------------------------------------------------- */

uint64_t xfer_dir_now(void)
{
    return xfer_clock_monotonic(NULL);
}

void xfer_dir_logf(xfer_dir *d, const char *fmt, ...)
{
    if (!d->cfg.log)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    d->cfg.log(d->cfg.log_ud, line);
}

char *xfer_dir_b64(const void *src, size_t n)
{
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    if (out)
        EVP_EncodeBlock((unsigned char *)out, src, (int)n);
    return out;
}

/* Decode base64 `s` into out (cap bytes, NUL added).  EVP_DecodeBlock
 * counts padding as zero bytes: they are taken off again. */
int xfer_dir_unb64(const char *s, char *out, size_t cap, size_t *len)
{
    size_t n = strlen(s);
    if (n % 4 || (n / 4) * 3 + 1 > cap)
        return XFER_ERR_INVALID_ARG;
    int m = EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)s,
                            (int)n);
    if (m < 0)
        return XFER_ERR_INVALID_ARG;
    if (n && s[n - 1] == '=')
        m--;
    if (n > 1 && s[n - 2] == '=')
        m--;
    out[m] = '\0';
    *len = (size_t)m;
    return 0;
}

/* The gateway writes 64-bit integers as JSON strings (and leaves out a
 * field whose value is 0). */
bool xfer_dir_i64(json_object *o, const char *field, int64_t *v)
{
    json_object *f;
    *v = 0;
    if (!o || !json_object_object_get_ex(o, field, &f))
        return false;
    if (json_object_is_type(f, json_type_int)) {
        *v = json_object_get_int64(f);
        return true;
    }
    if (!json_object_is_type(f, json_type_string))
        return false;
    const char *s = json_object_get_string(f);
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return false;
    *v = x;
    return true;
}

static json_object *jstr_i64(int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return json_object_new_string(buf);
}

/* ---------------------------------------------------------------------- */
/* Connections and requests                                                */
/* ---------------------------------------------------------------------- */

void xfer_dir_failover(xfer_dir *d)
{
    d->st.failures++;
    d->st.connected = false;
    d->token[0] = '\0'; /* a new member may want a new token */
    if (d->neps > 1) {
        d->ep = (d->ep + 1) % d->neps;
        d->st.reconnects++;
    }
    d->st.endpoint = d->ep;
}

struct evhttp_connection *xfer_dir_connect(xfer_dir *d)
{
    const dir_ep *ep = &d->eps[d->ep];
    struct bufferevent *bev = NULL;
    if (ep->tls) {
        SSL *ssl = SSL_new(d->ssl_ctx);
        if (!ssl)
            return NULL;
        /* The certificate must name the endpoint: an IP address against
         * its IP SANs, a host name against its DNS names (and as SNI). */
        unsigned char ip[16];
        if (evutil_inet_pton(AF_INET, ep->host, ip) == 1 ||
            evutil_inet_pton(AF_INET6, ep->host, ip) == 1) {
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), ep->host);
        } else {
            SSL_set_tlsext_host_name(ssl, ep->host);
            SSL_set1_host(ssl, ep->host);
        }
        bev = bufferevent_openssl_socket_new(d->base, -1, ssl,
                                             BUFFEREVENT_SSL_CONNECTING,
                                             BEV_OPT_CLOSE_ON_FREE);
        if (!bev) {
            SSL_free(ssl);
            return NULL;
        }
    }
    struct evhttp_connection *c =
        evhttp_connection_base_bufferevent_new(d->base, NULL, bev, ep->host,
                                               ep->port);
    if (!c) {
        if (bev)
            bufferevent_free(bev);
        return NULL;
    }
    struct timeval tv = xfer_timer_delay(d->cfg.request_timeout_ns);
    evhttp_connection_set_timeout_tv(c, &tv);
    evhttp_connection_set_max_body_size(c, DIR_MSG_MAX);
    evhttp_connection_set_max_headers_size(c, 64 << 10);
    return c;
}

void xfer_dir_add_auth(xfer_dir *d, struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", d->eps[d->ep].host);
    evhttp_add_header(h, "Content-Type", "application/json");
    if (d->token[0])
        evhttp_add_header(h, "Authorization", d->token);
}

static void req_unlink(xfer_dir *d, dir_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        d->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
}

static json_object *parse_body(struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (n == 0 || n > DIR_MSG_MAX)
        return NULL;
    const char *p = (const char *)evbuffer_pullup(in, (ssize_t)n);
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return NULL;
    json_object *o = json_tokener_parse_ex(tok, p, (int)n);
    json_tokener_free(tok);
    if (o && !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        o = NULL;
    }
    return o;
}

static void on_reply(struct evhttp_request *req, void *arg)
{
    dir_req *r = arg;
    xfer_dir *d = r->d;
    req_unlink(d, r);
    json_object *o = NULL;
    int code = req ? evhttp_request_get_response_code(req) : 0;
    if (code == 200) {
        o = parse_body(req);
    } else if (code == 401 || code == 403) {
        d->token[0] = '\0';
        xfer_dir_logf(d, "dir: etcd refused the request (HTTP %d)", code);
    }
    if (o) {
        json_object *h;
        int64_t rev;
        d->st.connected = true;
        /* Every answer carries the store's revision: a registering
         * directory shows one too (ctl, metrics). */
        if (json_object_object_get_ex(o, "header", &h) &&
            xfer_dir_i64(h, "revision", &rev) && rev > d->st.revision)
            d->st.revision = rev;
        xfer_backoff_up(&d->bo, xfer_dir_now());
    } else {
        xfer_dir_failover(d);
    }
    r->fn(d, o, r->arg);
    if (o)
        json_object_put(o);
    free(r);
}

static void reply_ignored(xfer_dir *d, json_object *o, void *arg)
{
}

void xfer_dir_forget_arg(xfer_dir *d, void *arg)
{
    for (dir_req *r = d->reqs; r; r = r->next)
        if (r->arg == arg) {
            r->fn = reply_ignored;
            r->arg = NULL;
        }
}

/* POST `body` (taken: put here) to `path` on the current endpoint. */
int xfer_dir_post(xfer_dir *d, const char *path, json_object *body,
                  dir_reply_fn fn, void *arg)
{
    int rc = XFER_ERR_NOMEM;
    dir_req *r = calloc(1, sizeof *r);
    if (!r || !body)
        goto out;
    if (!d->conn[d->ep]) {
        d->conn[d->ep] = xfer_dir_connect(d);
        rc = XFER_ERR_IO;
        if (!d->conn[d->ep])
            goto out;
    }
    rc = XFER_ERR_NOMEM;
    r->d = d;
    r->fn = fn;
    r->arg = arg;
    struct evhttp_request *req = evhttp_request_new(on_reply, r);
    if (!req)
        goto out;
    xfer_dir_add_auth(d, req);
    const char *s = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
    evbuffer_add(evhttp_request_get_output_buffer(req), s, strlen(s));
    if (evhttp_make_request(d->conn[d->ep], req, EVHTTP_REQ_POST, path) != 0) {
        rc = XFER_ERR_IO; /* evhttp freed req */
        goto out;
    }
    r->next = d->reqs;
    if (d->reqs)
        d->reqs->prev = r;
    d->reqs = r;
    d->st.requests++;
    r = NULL;
    rc = 0;
out:
    free(r);
    json_object_put(body);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Authentication                                                          */
/* ---------------------------------------------------------------------- */

static void reg_step(xfer_dir *d);

static void on_auth(xfer_dir *d, json_object *o, void *arg)
{
    json_object *t;
    d->authing = false;
    if (o && json_object_object_get_ex(o, "token", &t) &&
        json_object_is_type(t, json_type_string) &&
        strlen(json_object_get_string(t)) < sizeof d->token)
        strcpy(d->token, json_object_get_string(t));
    else if (o)
        xfer_dir_logf(d, "dir: etcd authentication failed");
}

/* Before a request: true when a token is needed and is being fetched
 * (the caller retries after the backoff). */
static bool need_auth(xfer_dir *d)
{
    if (!d->cfg.user || d->token[0])
        return false;
    if (!d->authing) {
        json_object *b = json_object_new_object();
        json_object_object_add(b, "name", json_object_new_string(d->cfg.user));
        json_object_object_add(b, "password",
                               json_object_new_string(d->cfg.password
                                                          ? d->cfg.password
                                                          : ""));
        d->authing = xfer_dir_post(d, "/v3/auth/authenticate", b, on_auth,
                                   NULL) == 0;
    }
    return true;
}

bool xfer_dir_need_auth(xfer_dir *d)
{
    return need_auth(d);
}

/* ---------------------------------------------------------------------- */
/* Registration                                                            */
/* ---------------------------------------------------------------------- */

static void reg_arm(xfer_dir *d, uint64_t delay_ns)
{
    struct timeval tv = xfer_timer_delay(delay_ns);
    evtimer_add(d->reg_ev, &tv);
}

static void reg_retry(xfer_dir *d)
{
    uint64_t delay = xfer_backoff_lost(&d->bo, xfer_dir_now(),
                                       d->cfg.reconnect_min_ns,
                                       d->cfg.reconnect_max_ns);
    reg_arm(d, delay ? delay : d->cfg.reconnect_min_ns);
}

static void on_put(xfer_dir *d, json_object *o, void *arg)
{
    dir_reg *r = arg;
    d->reg_busy = false;
    if (!o) {
        reg_retry(d);
        return;
    }
    r->put = true;
    reg_step(d);
}

static void on_grant(xfer_dir *d, json_object *o, void *arg)
{
    int64_t id = 0, ttl = 0;
    d->reg_busy = false;
    if (!o || !xfer_dir_i64(o, "ID", &id) || id == 0 ||
        !xfer_dir_i64(o, "TTL", &ttl) || ttl <= 0) {
        reg_retry(d);
        return;
    }
    d->lease = id;
    d->st.lease_grants++;
    for (uint32_t i = 0; i < d->nregs; i++)
        d->regs[i].put = false;
    reg_step(d);
}

static void on_keepalive(xfer_dir *d, json_object *o, void *arg)
{
    json_object *res = NULL;
    int64_t ttl = 0;
    d->reg_busy = false;
    if (!o) {
        reg_retry(d);
        return;
    }
    if (!json_object_object_get_ex(o, "result", &res) ||
        !xfer_dir_i64(res, "TTL", &ttl) || ttl <= 0) {
        /* The lease expired while etcd was out of reach: a new one. */
        xfer_dir_logf(d, "dir: lease %lld lost, registering again",
                      (long long)d->lease);
        d->lease = 0;
    }
    reg_step(d);
}

/* Do the next thing the registration needs: a lease, the puts of the
 * entries not yet put under it, or the next keepalive. */
static void reg_step(xfer_dir *d)
{
    if (d->reg_busy || d->unregistering || d->nregs == 0)
        return;
    evtimer_del(d->reg_ev);
    if (need_auth(d)) {
        reg_retry(d);
        return;
    }
    json_object *b = json_object_new_object();
    int rc;
    if (d->lease == 0) {
        json_object_object_add(b, "TTL", jstr_i64(d->cfg.lease_ttl_s));
        rc = xfer_dir_post(d, "/v3/lease/grant", b, on_grant, NULL);
    } else {
        uint32_t i = 0;
        while (i < d->nregs && d->regs[i].put)
            i++;
        if (i == d->nregs) {
            /* Everything is put: keep the lease alive at a third of its
             * TTL, so two keepalives may fail before it expires. */
            json_object_put(b);
            reg_arm(d, (uint64_t)d->cfg.lease_ttl_s * 1000000000ull / 3);
            return;
        }
        dir_reg *r = &d->regs[i];
        char *k = xfer_dir_b64(r->key, strlen(r->key));
        char *v = xfer_dir_b64(r->value, strlen(r->value));
        if (k && v) {
            json_object_object_add(b, "key", json_object_new_string(k));
            json_object_object_add(b, "value", json_object_new_string(v));
            json_object_object_add(b, "lease", jstr_i64(d->lease));
        }
        free(k);
        free(v);
        rc = xfer_dir_post(d, "/v3/kv/put", b, on_put, r);
    }
    d->reg_busy = rc == 0;
    if (rc)
        reg_retry(d);
}

static void on_reg_timer(evutil_socket_t fd, short what, void *arg)
{
    xfer_dir *d = arg;
    uint32_t i = 0;
    while (i < d->nregs && d->regs[i].put)
        i++;
    if (d->reg_busy || d->unregistering)
        return;
    if (d->lease && i == d->nregs && !need_auth(d)) {
        json_object *b = json_object_new_object();
        json_object_object_add(b, "ID", jstr_i64(d->lease));
        d->reg_busy = xfer_dir_post(d, "/v3/lease/keepalive", b,
                                    on_keepalive, NULL) == 0;
        if (!d->reg_busy)
            reg_retry(d);
        return;
    }
    reg_step(d);
}

int xfer_dir_register(xfer_dir *d, const char *group, const xfer_dir_entry *e)
{
    if (!d || !e || xfer_dir_group_ok(group) != 0 ||
        e->shard >= DIR_MAX_SHARDS || e->port == 0 || !e->addr[0] ||
        d->unregistering)
        return XFER_ERR_INVALID_ARG;
    if (d->nregs == DIR_MAX_REGS)
        return XFER_ERR_BUSY;
    dir_reg *r = &d->regs[d->nregs];
    memset(r, 0, sizeof *r);
    if (snprintf(r->key, sizeof r->key, "%s%s/%u", d->cfg.prefix, group,
                 (unsigned)e->shard) >= (int)sizeof r->key ||
        xfer_dir_entry_json(e, r->value, sizeof r->value) != 0)
        return XFER_ERR_INVALID_ARG;
    strcpy(r->group, group);
    r->e = *e;
    r->since_ns = xfer_dir_now();
    d->nregs++;
    d->st.registered = d->nregs;
    reg_arm(d, 0); /* on the loop, not inside this call */
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Unregistration                                                          */
/* ---------------------------------------------------------------------- */

static void on_done_ev(evutil_socket_t fd, short what, void *arg)
{
    xfer_dir *d = arg;
    xfer_dir_done_fn fn = d->unreg_done;
    d->unreg_done = NULL;
    if (fn)
        fn(d->unreg_ud, d->unreg_ok);
}

static void unreg_one_done(xfer_dir *d, json_object *o, void *arg)
{
    if (!o)
        d->unreg_ok = false;
    if (--d->unreg_left == 0)
        event_active(d->done_ev, 0, 0);
}

int xfer_dir_unregister(xfer_dir *d, xfer_dir_done_fn done, void *ud)
{
    if (!d || d->nregs == 0 || d->unregistering)
        return XFER_ERR_STATE;
    d->unregistering = true;
    evtimer_del(d->reg_ev);
    d->unreg_done = done;
    d->unreg_ud = ud;
    d->unreg_ok = true;
    d->unreg_left = 1; /* held until every request went out */
    for (uint32_t i = 0; i < d->nregs; i++) {
        json_object *b = json_object_new_object();
        char *k = xfer_dir_b64(d->regs[i].key, strlen(d->regs[i].key));
        if (k)
            json_object_object_add(b, "key", json_object_new_string(k));
        free(k);
        if (xfer_dir_post(d, "/v3/kv/deleterange", b, unreg_one_done,
                          NULL) == 0)
            d->unreg_left++;
        else
            d->unreg_ok = false;
    }
    if (d->lease) {
        json_object *b = json_object_new_object();
        json_object_object_add(b, "ID", jstr_i64(d->lease));
        if (xfer_dir_post(d, "/v3/lease/revoke", b, unreg_one_done,
                          NULL) == 0)
            d->unreg_left++;
    }
    if (--d->unreg_left == 0) /* every request answered already */
        event_active(d->done_ev, 0, 0);
    d->nregs = 0;
    d->st.registered = 0;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Life                                                                    */
/* ---------------------------------------------------------------------- */

static const size_t config_lens[] = {
    offsetof(xfer_dir_config, watch_timeout_ns), sizeof(xfer_dir_config)};

void xfer_dir_config_default(xfer_dir_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->version = XFER_DIR_CONFIG_VERSION;
    cfg->prefix = "/xfer/groups/";
    cfg->lease_ttl_s = 10;
    cfg->request_timeout_ns = 2000000000ull;
    cfg->reconnect_min_ns = 100000000ull;
    cfg->reconnect_max_ns = 2000000000ull;
    cfg->watch_timeout_ns = 1800000000000ull; /* 3 x etcd's 10 min */
}

static int dup_str(const char *s, char **out)
{
    *out = NULL;
    if (!s)
        return 0;
    *out = strdup(s);
    return *out ? 0 : XFER_ERR_NOMEM;
}

/* "http://host:port,https://host:port": at least one, at most 8. */
static int parse_endpoints(xfer_dir *d)
{
    char *save = NULL;
    for (char *p = strtok_r(d->endpoints, ",", &save); p;
         p = strtok_r(NULL, ",", &save)) {
        if (d->neps == DIR_MAX_EPS)
            return XFER_ERR_INVALID_ARG;
        struct evhttp_uri *u = evhttp_uri_parse(p);
        if (!u)
            return XFER_ERR_INVALID_ARG;
        const char *scheme = evhttp_uri_get_scheme(u);
        const char *host = evhttp_uri_get_host(u);
        int port = evhttp_uri_get_port(u);
        dir_ep *ep = &d->eps[d->neps];
        int rc = XFER_ERR_INVALID_ARG;
        if (scheme && host && *host && strlen(host) < sizeof ep->host &&
            (!strcmp(scheme, "http") || !strcmp(scheme, "https"))) {
            ep->tls = !strcmp(scheme, "https");
            strcpy(ep->host, host);
            ep->port = port > 0 ? (uint16_t)port : 2379;
            d->neps++;
            rc = 0;
        }
        evhttp_uri_free(u);
        if (rc)
            return rc;
    }
    return d->neps ? 0 : XFER_ERR_INVALID_ARG;
}

static int tls_init(xfer_dir *d)
{
    bool any = false;
    for (uint32_t i = 0; i < d->neps; i++)
        any |= d->eps[i].tls;
    if (!any)
        return 0;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx)
        return XFER_ERR_NOMEM;
    d->ssl_ctx = ctx;
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if ((d->ca ? SSL_CTX_load_verify_locations(ctx, d->ca, NULL)
               : SSL_CTX_set_default_verify_paths(ctx)) != 1)
        return XFER_ERR_IO;
    if (d->cert && (SSL_CTX_use_certificate_chain_file(ctx, d->cert) != 1 ||
                    SSL_CTX_use_PrivateKey_file(ctx, d->key ? d->key : d->cert,
                                                SSL_FILETYPE_PEM) != 1))
        return XFER_ERR_IO;
    return 0;
}

int xfer_dir_new(struct event_base *base, const xfer_dir_config *cfg,
                 xfer_dir **out)
{
    xfer_dir_config c;
    xfer_dir_config_default(&c);
    if (!base || !out || !cfg ||
        xfer_util_versioned_copy(&c, cfg, cfg->version, config_lens,
                                 XFER_UTIL_NVERSIONS(config_lens)) ||
        !c.endpoints || !c.prefix || !c.prefix[0] ||
        strlen(c.prefix) >= DIR_PREFIX_MAX || c.lease_ttl_s == 0)
        return XFER_ERR_INVALID_ARG;
    xfer_dir *d = calloc(1, sizeof *d);
    if (!d)
        return XFER_ERR_NOMEM;
    d->base = base;
    /* An engine's own base is held until xfer_dir_del, so the engine and
     * every other object on it may be deleted before the directory
     * (base_ref.h; a caller's base is left to the caller). */
    xfer_base_ref(base);
    d->cfg = c;
    int rc = XFER_ERR_NOMEM;
    if (dup_str(c.endpoints, &d->endpoints) || dup_str(c.prefix, &d->prefix) ||
        dup_str(c.user, &d->user) || dup_str(c.password, &d->password) ||
        dup_str(c.ca_file, &d->ca) || dup_str(c.cert_file, &d->cert) ||
        dup_str(c.key_file, &d->key))
        goto out_fail;
    d->cfg.endpoints = d->endpoints;
    d->cfg.prefix = d->prefix;
    d->cfg.user = d->user;
    d->cfg.password = d->password;
    d->cfg.ca_file = d->ca;
    d->cfg.cert_file = d->cert;
    d->cfg.key_file = d->key;
    if (!d->cfg.request_timeout_ns)
        d->cfg.request_timeout_ns = 2000000000ull;
    if (!d->cfg.reconnect_min_ns)
        d->cfg.reconnect_min_ns = 100000000ull;
    if (!d->cfg.watch_timeout_ns)
        d->cfg.watch_timeout_ns = 1800000000000ull;
    if (d->cfg.reconnect_max_ns < d->cfg.reconnect_min_ns)
        d->cfg.reconnect_max_ns = d->cfg.reconnect_min_ns;
    char *eps = strdup(d->endpoints); /* strtok_r cuts its copy */
    if (!eps)
        goto out_fail;
    free(d->endpoints);
    d->endpoints = eps;
    rc = parse_endpoints(d);
    d->cfg.endpoints = NULL; /* cut by strtok_r: use eps[] */
    if (rc)
        goto out_fail;
    rc = tls_init(d);
    if (rc)
        goto out_fail;
    uint8_t seed[16];
    RAND_bytes(seed, sizeof seed);
    xfer_backoff_init(&d->bo, seed, sizeof seed);
    rc = XFER_ERR_IO;
    d->reg_ev = evtimer_new(base, on_reg_timer, d);
    d->done_ev = event_new(base, -1, 0, on_done_ev, d);
    if (!d->reg_ev || !d->done_ev)
        goto out_fail;
    *out = d;
    return 0;
out_fail:
    xfer_dir_del(d);
    return rc;
}

void xfer_dir_del(xfer_dir *d)
{
    if (!d)
        return;
    for (uint32_t i = 0; i < d->nwatches; i++)
        xfer_dir_watch_free(d->watches[i]);
    for (uint32_t i = 0; i < DIR_MAX_EPS; i++)
        if (d->conn[i])
            evhttp_connection_free(d->conn[i]); /* drops requests, no cb */
    while (d->reqs) {
        dir_req *r = d->reqs;
        d->reqs = r->next;
        free(r);
    }
    if (d->reg_ev)
        event_free(d->reg_ev);
    if (d->done_ev)
        event_free(d->done_ev);
    if (d->ssl_ctx)
        SSL_CTX_free(d->ssl_ctx);
    free(d->endpoints);
    free(d->prefix);
    free(d->user);
    free(d->password);
    free(d->ca);
    free(d->cert);
    free(d->key);
    struct event_base *base = d->base;
    free(d);
    xfer_base_unref(base); /* last: the base may go with it */
}

static const size_t state_lens[] = {
    offsetof(xfer_dir_state, watch_timeouts), sizeof(xfer_dir_state)};

int xfer_dir_state_get_versioned(const xfer_dir *d, uint32_t version,
                                 xfer_dir_state *st)
{
    if (!d || !st)
        return XFER_ERR_INVALID_ARG;
    xfer_dir_state now = d->st;
    uint32_t n = 0;
    for (uint32_t i = 0; i < d->nwatches; i++)
        n += (uint32_t)__builtin_popcountll(d->watches[i]->have);
    now.members = n;
    return xfer_util_versioned_copy(st, &now, version, state_lens,
                                    XFER_UTIL_NVERSIONS(state_lens))
               ? XFER_ERR_INVALID_ARG
               : 0;
}

int xfer_dir_state_get(const xfer_dir *d, xfer_dir_state *st)
{
    return xfer_dir_state_get_versioned(d, 1, st);
}

int xfer_dir_registered_get(const xfer_dir *d, xfer_dir_member_info *out,
                            size_t cap, size_t *n, size_t *total)
{
    if (!d || (!out && cap))
        return XFER_ERR_INVALID_ARG;
    size_t w = 0;
    for (uint32_t i = 0; i < d->nregs && w < cap; i++, w++) {
        memset(&out[w], 0, sizeof out[w]);
        strcpy(out[w].group, d->regs[i].group);
        out[w].e = d->regs[i].e;
        out[w].since_ns = d->regs[i].since_ns;
    }
    if (n)
        *n = w;
    if (total)
        *total = d->nregs;
    return 0;
}

uint32_t xfer_dir_group_id(const char *group)
{
    if (!group)
        return 0;
    uint64_t v = 0;
    const char *p = group;
    while (*p >= '0' && *p <= '9' && v <= 0xffffffffull)
        v = v * 10 + (uint64_t)(*p++ - '0');
    if (*group && !*p && v <= 0xffffffffull)
        return (uint32_t)v;
    uint32_t h = 2166136261u;
    for (p = group; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    return h;
}
