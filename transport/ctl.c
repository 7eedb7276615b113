/*
 * transport/ctl.c - the control socket of include/xfer/ctl.h: a Unix
 * listener on a libevent loop; each connection gets one snapshot (JSON
 * lines) and is closed.
 *
 * What must stay true:
 *  - the snapshot is built in one go on the loop thread, when the
 *    connection is accepted, so it is one consistent cut of the state;
 *  - the reply is sent with send(MSG_NOSIGNAL): a client that goes away
 *    costs its connection, never a SIGPIPE for the embedding process;
 *  - a slow client cannot stall the loop (non-blocking writes driven by
 *    EV_WRITE) or pile up memory without bound (at most MAX_CONNS replies
 *    in flight; more connections are closed at once);
 *  - nothing here prints; close frees every connection and removes the
 *    socket file;
 *  - the ctl and its connections are allocated through cfg.alloc
 *    (libevent's own allocations, the reply buffers among them, excepted).
 */
#include "xfer/ctl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>

/* fsm_private_dep: the injected allocator with its libc default, and the
 * copy of versioned configs, shared with the pure machines. */
#include "base_ref.h"
#include "ctl_int.h"
#include "util.h"
#include "xfer/dir.h"

#define MAX_CONNS 32

typedef struct conn {
    struct xfer_ctl *ctl;
    evutil_socket_t fd;
    struct event *ev;
    struct evbuffer *out;
} conn;

struct xfer_ctl {
    xfer_ctl_config cfg;
    struct event_base *base;
    struct evconnlistener *lis;
    char *path;
    xfer_ctl_snapshot_fn fn;
    void *ud;
    void (*on_close)(void *ud); /* ctl_int.h */
    const xfer_dir *dir;        /* xfer_ctl_set_dir; NULL: none */
    conn *conns[MAX_CONNS];
    uint64_t served;
};

struct xfer_ctl_reply {
    struct evbuffer *out;
    uint64_t transfers, reservations;
    int err;
};

/* ---------------------------------------------------------------------- */
/* Reply lines                                                             */
/* ---------------------------------------------------------------------- */

static void add(xfer_ctl_reply *rep, const char *fmt, ...)
{
    if (rep->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (evbuffer_add_vprintf(rep->out, fmt, ap) < 0)
        rep->err = XFER_ERR_NOMEM;
    va_end(ap);
}

/* A name of xfer/ in the lower case the snapshot's JSON uses ("pending",
 * "reserve"), into buf (len bytes, NUL-terminated). */
static const char *lower(char *buf, size_t len, const char *name)
{
    size_t i = 0;
    for (; name[i] && i + 1 < len; i++)
        buf[i] = name[i] >= 'A' && name[i] <= 'Z' ? (char)(name[i] + 32)
                                                  : name[i];
    buf[i] = '\0';
    return buf;
}

/* The op each sub-state of a shard view belongs to, in view order (the
 * eager op last: it is shown only on the eager path). */
#define VIEW_OPS 5
static const uint8_t view_ops[VIEW_OPS] = {XFER_OP_RESERVE, XFER_OP_WRITE,
                                           XFER_OP_COMMIT, XFER_OP_CANCEL,
                                           XFER_OP_EAGER};

static void view_subs(const xfer_shard_view *s, uint8_t sub[VIEW_OPS])
{
    sub[0] = s->resv;
    sub[1] = s->write;
    sub[2] = s->commit;
    sub[3] = s->cancel;
    sub[4] = s->eager;
}

/* The op that shard view `s` has in flight, or XFER_OP_COUNT_. */
static unsigned op_in_flight(const xfer_shard_view *s)
{
    uint8_t sub[VIEW_OPS];
    view_subs(s, sub);
    for (unsigned i = 0; i < VIEW_OPS; i++)
        if (sub[i] == XFER_SUB_PENDING)
            return view_ops[i];
    return XFER_OP_COUNT_;
}

/* What shard view `s` of a transfer in `state` waits for ("reserve", ...,
 * "cancel retry"), or "", into buf. */
static const char *shard_waits(const xfer_shard_view *s, unsigned state,
                               char *buf, size_t len)
{
    unsigned op = op_in_flight(s);
    if (op != XFER_OP_COUNT_)
        return lower(buf, len, xfer_op_name(op));
    if (s->cancel == XFER_SUB_FAILED &&
        state == XFER_TRANSFER_STATE_CANCELLING) {
        lower(buf, len, xfer_op_name(XFER_OP_CANCEL));
        size_t n = strlen(buf);
        snprintf(buf + n, len - n, " retry");
        return buf;
    }
    return "";
}

static void put_shard(xfer_ctl_reply *rep, const xfer_shard_view *s,
                      unsigned k, unsigned state)
{
    uint8_t sub[VIEW_OPS];
    char w[VIEW_OPS][16], waits[32], eager[32] = "";
    view_subs(s, sub);
    for (unsigned i = 0; i < VIEW_OPS; i++)
        lower(w[i], sizeof w[i], xfer_sub_name(view_ops[i], sub[i]));
    if (s->eager != XFER_SUB_NONE) /* the eager path only */
        snprintf(eager, sizeof eager, ",\"eager\":\"%s\"", w[4]);
    add(rep,
        "%s{\"shard\":%u,\"resv\":\"%s\",\"write\":\"%s\","
        "\"commit\":\"%s\",\"cancel\":\"%s\"%s,\"cancel_attempts\":%u,"
        "\"waits\":\"%s\"}",
        k ? "," : "", k, w[0], w[1], w[2], w[3], eager,
        (unsigned)s->cancel_attempts,
        shard_waits(s, state, waits, sizeof waits));
}

static void put_shards(xfer_ctl_reply *rep, const xfer_transfer_view *v)
{
    add(rep, ",\"waiting\":\"");
    unsigned nw = 0;
    for (unsigned k = 0; k < v->nshards && k < XFER_MAX_SHARDS; k++)
        if (op_in_flight(&v->shards[k]) != XFER_OP_COUNT_)
            add(rep, "%s%u", nw++ ? "," : "", k);
    add(rep, "\",\"shards\":[");
    for (unsigned k = 0; k < v->nshards && k < XFER_MAX_SHARDS; k++)
        put_shard(rep, &v->shards[k], k, v->state);
    add(rep, "]}\n");
}

/* The bytes each version of xfer_transfer_view holds (util.h). */
static const size_t view_lens[] = {sizeof(xfer_transfer_view)};

int xfer_ctl_put_transfer_versioned(xfer_ctl_reply *rep, uint32_t version,
                                    const xfer_transfer_view *view,
                                    uint64_t now_ns)
{
    xfer_transfer_view latest, *v = &latest;
    memset(&latest, 0, sizeof latest);
    if (!rep || !view ||
        xfer_util_versioned_copy(&latest, view, version, view_lens,
                                 XFER_UTIL_NVERSIONS(view_lens)))
        return XFER_ERR_INVALID_ARG;
    uint64_t age = now_ns > v->started_ns ? now_ns - v->started_ns : 0;
    int64_t dl = (int64_t)(v->deadline_ns - now_ns);
    add(rep,
        "{\"kind\":\"transfer\",\"id\":%" PRIu64 ",\"attempt\":%" PRIu32
        ",\"state\":\"%s\",\"age_ns\":%" PRIu64 ",\"deadline_in_ns\":%" PRId64
        ",\"pending\":%" PRIu32 ",\"nshards\":%u",
        v->id, v->attempt, xfer_fsm_state_name(XFER_MACHINE_TRANSFER, v->state),
        age, dl, v->pending, (unsigned)v->nshards);
    put_shards(rep, v);
    rep->transfers++;
    return rep->err;
}

static const char *resv_waits(xfer_resv_state st)
{
    switch (st) {
    case XFER_RESV_STATE_RESERVED:
        return "write or commit";
    case XFER_RESV_STATE_WRITING:
        return "write end";
    case XFER_RESV_STATE_READY:
        return "take";
    case XFER_RESV_STATE_TAKEN:
        return "release";
    case XFER_RESV_STATE_CANCEL_PENDING:
    case XFER_RESV_STATE_EXPIRE_PENDING:
        return "write end (free deferred)";
    case XFER_RESV_STATE_COMMIT_INVAL:
    case XFER_RESV_STATE_CANCEL_INVAL:
    case XFER_RESV_STATE_EXPIRE_INVAL:
        return "rkey invalidation";
    case XFER_RESV_STATE_NONE:
    case XFER_RESV_STATE_CANCELLED:
    case XFER_RESV_STATE_EXPIRED:
    case XFER_RESV_STATE_DONE:
    case XFER_RESV_STATE_COUNT_:
    default:
        return NULL;
    }
}

int xfer_ctl_put_reservation(xfer_ctl_reply *rep, uint16_t shard,
                             uint64_t id, uint32_t attempt,
                             xfer_resv_state st, uint64_t since_ns,
                             uint64_t now_ns)
{
    if (!rep)
        return XFER_ERR_INVALID_ARG;
    const char *waits = resv_waits(st);
    if (!waits)
        return 0;
    add(rep,
        "{\"kind\":\"reservation\",\"shard\":%u,\"id\":%" PRIu64
        ",\"attempt\":%" PRIu32 ",\"state\":\"%s\",\"age_ns\":%" PRIu64
        ",\"waits\":\"%s\"}\n",
        (unsigned)shard, id, attempt,
        xfer_fsm_state_name(XFER_MACHINE_RESERVATION, st),
        now_ns > since_ns ? now_ns - since_ns : 0, waits);
    rep->reservations++;
    return rep->err;
}

/* "0,2,5": the shards in mask (of n). */
static void add_list(xfer_ctl_reply *rep, uint64_t mask, uint16_t n)
{
    unsigned w = 0;
    for (unsigned k = 0; k < n && k < XFER_MAX_SHARDS; k++)
        if (mask & (UINT64_C(1) << k))
            add(rep, "%s%u", w++ ? "," : "", k);
}

int xfer_ctl_put_readiness(xfer_ctl_reply *rep, uint64_t id,
                           uint32_t attempt, const char *state,
                           uint16_t nshards, uint64_t ready, uint64_t waiting,
                           uint64_t since_ns, uint64_t now_ns)
{
    if (!rep || !state)
        return XFER_ERR_INVALID_ARG;
    add(rep,
        "{\"kind\":\"readiness\",\"id\":%" PRIu64 ",\"attempt\":%" PRIu32
        ",\"state\":\"%s\",\"age_ns\":%" PRIu64 ",\"nshards\":%u,"
        "\"ready\":\"",
        id, attempt, state, now_ns > since_ns ? now_ns - since_ns : 0,
        (unsigned)nshards);
    add_list(rep, ready, nshards);
    add(rep, "\",\"waiting\":\"");
    add_list(rep, waiting, nshards);
    add(rep, "\"}\n");
    return rep->err;
}

/* ---------------------------------------------------------------------- */
/* Connections                                                             */
/* ---------------------------------------------------------------------- */

static void conn_free(conn *c)
{
    xfer_ctl *ctl = c->ctl;
    for (unsigned i = 0; i < MAX_CONNS; i++)
        if (ctl->conns[i] == c)
            ctl->conns[i] = NULL;
    if (c->ev)
        event_free(c->ev);
    if (c->out)
        evbuffer_free(c->out);
    evutil_closesocket(c->fd);
    xfer_util_free(&ctl->cfg.alloc, c);
}

/* Send what the socket takes now; free the connection when all is sent
 * or the client is gone. */
static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    conn *c = arg;
    while (evbuffer_get_length(c->out) > 0) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(c->out, -1, NULL, &v, 1) < 1)
            break;
        ssize_t n = send(fd, v.iov_base, v.iov_len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return; /* EV_PERSIST: called again when writable */
        if (n <= 0)
            break;
        evbuffer_drain(c->out, (size_t)n);
    }
    conn_free(c);
}

/* One "member" or "registered" line of the directory. */
static void put_entry(xfer_ctl_reply *rep, const char *kind,
                      const xfer_dir_member_info *m, uint64_t now_ns)
{
    /* group and addr are of [A-Za-z0-9._:-] (dir.h validates both on
     * the way in): nothing to escape. */
    add(rep,
        "{\"kind\":\"%s\",\"group\":\"%s\",\"shard\":%u,\"addr\":\"%s\","
        "\"port\":%u,\"epoch\":%" PRIu64 ",\"transports\":%" PRIu32
        ",\"age_ns\":%" PRIu64 "}\n",
        kind, m->group, (unsigned)m->e.shard, m->e.addr,
        (unsigned)m->e.port, m->e.epoch, m->e.transports,
        now_ns > m->since_ns ? now_ns - m->since_ns : 0);
}

typedef int (*dir_list_fn)(const xfer_dir *d, xfer_dir_member_info *out,
                           size_t cap, size_t *n, size_t *total);

static void put_dir_list(xfer_ctl *ctl, xfer_ctl_reply *rep, dir_list_fn fn,
                         const char *kind, uint64_t now_ns)
{
    size_t total = 0, n = 0;
    if (fn(ctl->dir, NULL, 0, NULL, &total) || total == 0)
        return;
    xfer_dir_member_info *m =
        xfer_util_calloc(&ctl->cfg.alloc, total, sizeof *m);
    if (!m) {
        rep->err = XFER_ERR_NOMEM;
        return;
    }
    fn(ctl->dir, m, total, &n, NULL);
    for (size_t i = 0; i < n; i++)
        put_entry(rep, kind, &m[i], now_ns);
    xfer_util_free(&ctl->cfg.alloc, m);
}

/* The directory's state, its members and its registrations. */
static void put_dir(xfer_ctl *ctl, xfer_ctl_reply *rep)
{
    xfer_dir_state st;
    if (xfer_dir_state_get_latest(ctl->dir, &st))
        return;
    uint64_t now = xfer_clock_monotonic(NULL);
    add(rep,
        "{\"kind\":\"dir\",\"connected\":%u,\"endpoint\":%" PRIu32
        ",\"revision\":%" PRId64 ",\"members\":%" PRIu32
        ",\"registered\":%" PRIu32 ",\"requests\":%" PRIu64
        ",\"failures\":%" PRIu64 ",\"reconnects\":%" PRIu64
        ",\"watch_timeouts\":%" PRIu64 ",\"bad_entries\":%" PRIu64
        ",\"stale_entries\":%" PRIu64 "}\n",
        st.connected ? 1u : 0u, st.endpoint, st.revision, st.members,
        st.registered, st.requests, st.failures, st.reconnects,
        st.watch_timeouts, st.bad_entries, st.stale_entries);
    put_dir_list(ctl, rep, xfer_dir_members_get, "member", now);
    put_dir_list(ctl, rep, xfer_dir_registered_get, "registered", now);
}

static int build_reply(xfer_ctl *ctl, struct evbuffer *out)
{
    xfer_ctl_reply rep = {.out = out};
    add(&rep, "{\"xfer_ctl\":1}\n");
    ctl->fn(ctl->ud, &rep);
    if (ctl->dir)
        put_dir(ctl, &rep);
    add(&rep, "{\"kind\":\"end\",\"transfers\":%" PRIu64
              ",\"reservations\":%" PRIu64 "}\n",
        rep.transfers, rep.reservations);
    return rep.err;
}

static void on_accept(struct evconnlistener *lis, evutil_socket_t fd,
                      struct sockaddr *sa, int salen, void *arg)
{
    xfer_ctl *ctl = arg;
    unsigned slot = 0;
    while (slot < MAX_CONNS && ctl->conns[slot])
        slot++;
    conn *c = NULL;
    if (slot < MAX_CONNS)
        c = xfer_util_calloc(&ctl->cfg.alloc, 1, sizeof *c);
    if (!c) {
        evutil_closesocket(fd);
        return;
    }
    c->ctl = ctl;
    c->fd = fd;
    ctl->conns[slot] = c;
    c->out = evbuffer_new();
    c->ev = event_new(ctl->base, fd, EV_WRITE | EV_PERSIST, on_writable, c);
    if (!c->out || !c->ev || build_reply(ctl, c->out) ||
        event_add(c->ev, NULL) != 0) {
        conn_free(c);
        return;
    }
    ctl->served++;
}

/* ---------------------------------------------------------------------- */
/* Open and close                                                          */
/* ---------------------------------------------------------------------- */

/* A stale socket at path is removed; any other file is left alone. */
static int clear_path(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : XFER_ERR_IO;
    if (!S_ISSOCK(st.st_mode))
        return XFER_ERR_EXISTS;
    return unlink(path) == 0 ? 0 : XFER_ERR_IO;
}

static int listen_on(xfer_ctl *ctl, const char *path)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int rc = clear_path(path);
    if (rc)
        return rc;
    ctl->lis = evconnlistener_new_bind(
        ctl->base, on_accept, ctl,
        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 16,
        (struct sockaddr *)&sa, (int)sizeof sa);
    if (!ctl->lis)
        return XFER_ERR_IO;
    if (chmod(path, 0600) != 0)
        return XFER_ERR_IO;
    return 0;
}

/* The bytes each version of xfer_ctl_config holds (util.h). */
static const size_t config_lens[] = {sizeof(xfer_ctl_config)};

void xfer_ctl_config_default(xfer_ctl_config *cfg)
{
    if (cfg)
        *cfg = (xfer_ctl_config){.version = XFER_CTL_CONFIG_VERSION};
}

/* Free a ctl whose listener is gone (or never came). */
static void free_ctl(xfer_ctl *ctl)
{
    xfer_allocator a = ctl->cfg.alloc;
    xfer_util_free(&a, ctl->path);
    xfer_util_free(&a, ctl);
}

int xfer_ctl_open_config(struct event_base *base, const char *path,
                         xfer_ctl_snapshot_fn fn, void *ud,
                         const xfer_ctl_config *cfg, xfer_ctl **out)
{
    struct sockaddr_un sa;
    xfer_ctl_config c;
    xfer_ctl_config_default(&c);
    if (!base || !path || !*path || !fn || !out ||
        strlen(path) >= sizeof sa.sun_path ||
        (cfg && xfer_util_versioned_copy(&c, cfg, cfg->version, config_lens,
                                         XFER_UTIL_NVERSIONS(config_lens))))
        return XFER_ERR_INVALID_ARG;
    xfer_ctl *ctl = xfer_util_calloc(&c.alloc, 1, sizeof *ctl);
    if (!ctl)
        return XFER_ERR_NOMEM;
    ctl->cfg = c;
    ctl->base = base;
    ctl->fn = fn;
    ctl->ud = ud;
    size_t n = strlen(path) + 1;
    ctl->path = xfer_util_alloc(&c.alloc, n);
    if (ctl->path)
        memcpy(ctl->path, path, n);
    int rc = ctl->path ? listen_on(ctl, path) : XFER_ERR_NOMEM;
    if (rc) {
        int e = errno; /* XFER_ERR_IO: the caller reads why in errno */
        bool bound = ctl->lis != NULL;
        if (ctl->lis)
            evconnlistener_free(ctl->lis);
        if (bound)
            unlink(path);
        free_ctl(ctl);
        errno = e;
        return rc;
    }
    xfer_base_ref(base); /* dropped by xfer_ctl_close: base_ref.h */
    *out = ctl;
    return 0;
}

int xfer_ctl_open(struct event_base *base, const char *path,
                  xfer_ctl_snapshot_fn fn, void *ud, xfer_ctl **out)
{
    return xfer_ctl_open_config(base, path, fn, ud, NULL, out);
}

void xfer_ctl_close(xfer_ctl *ctl)
{
    if (!ctl)
        return;
    for (unsigned i = 0; i < MAX_CONNS; i++)
        if (ctl->conns[i])
            conn_free(ctl->conns[i]);
    if (ctl->lis) {
        evconnlistener_free(ctl->lis);
        unlink(ctl->path);
    }
    if (ctl->on_close)
        ctl->on_close(ctl->ud);
    struct event_base *base = ctl->base;
    free_ctl(ctl);
    xfer_base_unref(base); /* last: the base may go with it */
}

void xfer_ctl_on_close(xfer_ctl *ctl, void (*fn)(void *ud))
{
    ctl->on_close = fn;
}

int xfer_ctl_set_dir(xfer_ctl *ctl, const xfer_dir *d)
{
    if (!ctl)
        return XFER_ERR_INVALID_ARG;
    ctl->dir = d;
    return 0;
}

uint64_t xfer_ctl_served(const xfer_ctl *ctl)
{
    return ctl ? ctl->served : 0;
}
