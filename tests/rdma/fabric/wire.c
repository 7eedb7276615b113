/*
 * tests/rdma/fabric/wire.c - the wire between fabric instances: one Unix
 * stream socket per CM connection, in the abstract namespace, so that two
 * processes on this host (or one process talking to itself) reach each
 * other, and the progress thread's poll turn that moves bytes on them.
 *
 * RDMA ports are their own namespace, as in the kernel's RDMA CM: port P
 * is the abstract socket "xfer-fabric/<XFER_FABRIC_NS or 0>/P", which
 * never collides with a TCP port P on the same host.  rdma_bind_addr binds
 * it (EADDRINUSE if taken, an unused one for port 0) and rdma_listen
 * listens on it; rdma_connect connects to it.
 *
 * Every message is a 24-byte head (type, length, sequence) and a body.
 * CM messages and write answers are handled as they arrive; data messages
 * (writes, sends) are handled in order, and one that must wait (its QP
 * not yet RTR, or no receive posted) parks, with every data message
 * behind it, while CM messages keep flowing, as CM MADs do beside a
 * stalled QP.
 *
 * What must stay true:
 *  - only the progress thread frees a link or listener, and only at the
 *    start of its turn, so what it polled is still there when poll
 *    returns, even if an application thread closed it meanwhile;
 *  - a link that fails (EOF, error, cut, bad message) is lost exactly
 *    once: its QP goes to error and its id hears of it;
 *  - nothing read from a socket is trusted: a bad head or length loses
 *    the link, never an assert.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fab.h"

typedef struct wire_hdr {
    uint32_t type;
    uint32_t pad;
    uint64_t len;
    uint64_t seq;
} wire_hdr;

#define WIRE_MAX_BODY ((1ull << 32) + 4096)
#define READ_CHUNK (256u << 10)

enum { OBJ_WAKE, OBJ_LISTENER, OBJ_CONN };

static struct {
    struct pollfd *pfd;
    void **obj;
    uint8_t *kind;
    size_t cap;
} poll_set;

static socklen_t port_addr(struct sockaddr_un *a, uint16_t port)
{
    const char *ns = getenv("XFER_FABRIC_NS");
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1,
                     "xfer-fabric/%s/%u", ns && *ns ? ns : "0", port);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* ---- listeners -------------------------------------------------------- */

static int bind_port(int fd, uint16_t port)
{
    struct sockaddr_un a;
    socklen_t len = port_addr(&a, port);
    return bind(fd, (struct sockaddr *)&a, len);
}

fab_listener *fab_wire_bind(uint16_t *port)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    fab_listener *l = calloc(1, sizeof *l);
    int r = -1;
    if (fd < 0 || !l)
        goto fail;
    if (*port) {
        r = bind_port(fd, *port);
    } else {
        if (!fab_g.next_port)
            fab_g.next_port = (uint16_t)(32768 + (getpid() * 7919 +
                                                  time(NULL)) % 28000);
        for (int tries = 0; tries < 28000 && r < 0; tries++) {
            uint16_t p = fab_g.next_port;
            fab_g.next_port = p >= 60999 ? 32768 : (uint16_t)(p + 1);
            if ((r = bind_port(fd, p)) == 0)
                *port = p;
            else if (errno != EADDRINUSE)
                break;
        }
    }
    if (r < 0)
        goto fail;
    l->fd = fd;
    l->next = fab_g.listeners;
    if (fab_g.listeners)
        fab_g.listeners->prev = l;
    fab_g.listeners = l;
    return l;
fail:
    r = errno;
    if (fd >= 0)
        close(fd);
    free(l);
    errno = r ? r : ENOMEM;
    return NULL;
}

int fab_wire_listen(fab_listener *l, int backlog)
{
    int r = listen(l->fd, backlog < 128 ? 128 : backlog);
    l->listening = r == 0;
    fab_wake();
    return r;
}

void fab_wire_unbind(fab_listener *l)
{
    close(l->fd);
    l->fd = -1;
    l->id = NULL;
    /* A poll() in progress holds the socket (and its name) open: the
     * port is free only once the thread has left it. */
    fab_await_turn();
}

/* ---- links ------------------------------------------------------------ */

static fab_conn *conn_new(int fd)
{
    fab_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    c->parked_tail = &c->parked;
    c->next = fab_g.conns;
    if (fab_g.conns)
        fab_g.conns->prev = c;
    fab_g.conns = c;
    return c;
}

fab_conn *fab_wire_connect(uint16_t port)
{
    struct sockaddr_un a;
    socklen_t len = port_addr(&a, port);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    if (connect(fd, (struct sockaddr *)&a, len) < 0) {
        int e = errno == ENOENT ? ECONNREFUSED : errno;
        close(fd);
        errno = e;
        return NULL;
    }
    fab_conn *c = conn_new(fd);
    if (!c) {
        close(fd);
        errno = ENOMEM;
    }
    fab_wake();
    return c;
}

static int buf_reserve(fab_buf *b, size_t more)
{
    if (b->off && b->off == b->len)
        b->off = b->len = 0;
    if (b->cap - b->len >= more)
        return 0;
    if (b->off) { /* compact first */
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (b->cap - b->len >= more)
            return 0;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < more)
        cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

uint8_t *fab_wire_send(fab_conn *c, uint32_t type, uint64_t seq,
                       const void *body, size_t blen, const void *data,
                       size_t dlen)
{
    wire_hdr h = {.type = type, .len = blen + dlen, .seq = seq};
    if (c->lost)
        return NULL;
    if (buf_reserve(&c->out, sizeof h + blen + dlen) < 0) {
        fab_wire_lose(c);
        return NULL;
    }
    uint8_t *p = c->out.p + c->out.len;
    memcpy(p, &h, sizeof h);
    if (blen)
        memcpy(p + sizeof h, body, blen);
    c->out.len += sizeof h + blen + dlen;
    fab_wake();
    if (data) {
        memcpy(p + sizeof h + blen, data, dlen);
        return NULL;
    }
    return dlen ? p + sizeof h + blen : NULL;
}

void fab_wire_close(fab_conn *c)
{
    c->id = NULL;
    c->closing = true;
    fab_wake();
}

static void drop_parked(fab_conn *c)
{
    while (c->parked) {
        fab_parked *p = c->parked;
        c->parked = p->next;
        free(p);
    }
    c->parked_tail = &c->parked;
}

void fab_wire_lose(fab_conn *c)
{
    if (c->lost)
        return;
    c->lost = true;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    drop_parked(c);
    if (c->qp) {
        if (c->qp->qp.state != IBV_QPS_RESET)
            fab_qp_error(c->qp, IBV_WC_RETRY_EXC_ERR);
        c->qp->conn = NULL;
        c->qp = NULL;
    }
    if (c->id)
        fab_cmconn_lost(c);
    c->id = NULL;
    fab_wake();
}

/* ---- the thread's side ------------------------------------------------ */

static void park(fab_conn *c, uint64_t seq, const uint8_t *body, size_t len)
{
    fab_parked *p = malloc(sizeof *p + len);
    if (!p) {
        fab_wire_lose(c);
        return;
    }
    p->next = NULL;
    p->seq = seq;
    p->len = len;
    memcpy(p->body, body, len);
    *c->parked_tail = p;
    c->parked_tail = &p->next;
}

static void unpark(fab_conn *c)
{
    while (c->parked && !c->lost &&
           fab_resp_data(c, c->parked->seq, c->parked->body, c->parked->len)) {
        fab_parked *p = c->parked;
        if (!(c->parked = p->next))
            c->parked_tail = &c->parked;
        free(p);
    }
}

void fab_wire_unpark(void)
{
    for (fab_conn *c = fab_g.conns; c; c = c->next)
        unpark(c);
}

static void dispatch(fab_conn *c, const wire_hdr *h, const uint8_t *body)
{
    uint32_t status;
    switch (h->type) {
    case FAB_M_DATA:
        if (c->parked || !fab_resp_data(c, h->seq, body, h->len))
            park(c, h->seq, body, h->len);
        break;
    case FAB_M_RESP:
        if (h->len != sizeof status) {
            fab_wire_lose(c);
            break;
        }
        memcpy(&status, body, sizeof status);
        if (c->qp)
            fab_qp_on_resp(c->qp, h->seq, status);
        break;
    default:
        fab_cmconn_msg(c, h->type, body, h->len);
        break;
    }
}

static void conn_process(fab_conn *c)
{
    fab_buf *b = &c->in;
    while (!c->lost && b->len - b->off >= sizeof(wire_hdr)) {
        wire_hdr h;
        memcpy(&h, b->p + b->off, sizeof h);
        if (h.type < FAB_M_REQ || h.type > FAB_M_RESP ||
            h.len > WIRE_MAX_BODY) {
            fab_wire_lose(c);
            return;
        }
        if (b->len - b->off - sizeof h < h.len) {
            if (buf_reserve(b, sizeof h + h.len) < 0)
                fab_wire_lose(c);
            return;
        }
        const uint8_t *body = b->p + b->off + sizeof h;
        b->off += sizeof h + h.len;
        dispatch(c, &h, body);
    }
}

static void conn_read(fab_conn *c)
{
    for (int round = 0; round < 64 && !c->lost; round++) {
        if (buf_reserve(&c->in, READ_CHUNK) < 0) {
            fab_wire_lose(c);
            return;
        }
        ssize_t n = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len,
                         0);
        if (n > 0 && c->closing) { /* going away: drain, never block */
            c->in.off = c->in.len = 0;
        } else if (n > 0) {
            c->in.len += (size_t)n;
            conn_process(c);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            fab_wire_lose(c);
        } else if (errno == EAGAIN) {
            break;
        }
    }
}

static void conn_flush(fab_conn *c)
{
    fab_buf *b = &c->out;
    while (!c->lost && b->len > b->off) {
        ssize_t n = send(c->fd, b->p + b->off, b->len - b->off, MSG_NOSIGNAL);
        if (n > 0)
            b->off += (size_t)n;
        else if (n < 0 && errno == EAGAIN)
            break;
        else if (!(n < 0 && errno == EINTR))
            fab_wire_lose(c);
    }
    if (b->off == b->len)
        b->off = b->len = 0;
}

static void conn_free(fab_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        fab_g.conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c->in.p);
    free(c->out.p);
    free(c);
}

/* Free what died since the last turn; cut, flush and close what asks. */
static void sweep(void)
{
    for (fab_listener *l = fab_g.listeners, *ln; l; l = ln) {
        ln = l->next;
        if (l->fd >= 0)
            continue;
        for (fab_conn *c = fab_g.conns; c; c = c->next)
            if (c->lis == l)
                c->lis = NULL;
        if (l->prev)
            l->prev->next = l->next;
        else
            fab_g.listeners = l->next;
        if (l->next)
            l->next->prev = l->prev;
        free(l);
    }
    for (fab_conn *c = fab_g.conns, *cn; c; c = cn) {
        cn = c->next;
        if (c->cut && !c->lost) {
            conn_flush(c); /* what is already sent may still land */
            if (c->fd >= 0)
                shutdown(c->fd, SHUT_RDWR);
            fab_wire_lose(c);
        }
        if (!c->lost) {
            unpark(c);
            conn_flush(c);
            if (c->closing && c->out.len == c->out.off)
                fab_wire_lose(c);
        }
        if (c->lost)
            conn_free(c);
    }
}

static int poll_add(size_t *n, int fd, short events, uint8_t kind, void *o)
{
    if (*n == poll_set.cap) {
        size_t cap = poll_set.cap ? poll_set.cap * 2 : 64;
        struct pollfd *p = realloc(poll_set.pfd, cap * sizeof *p);
        if (p)
            poll_set.pfd = p;
        void **ob = realloc(poll_set.obj, cap * sizeof *ob);
        if (ob)
            poll_set.obj = ob;
        uint8_t *k = realloc(poll_set.kind, cap);
        if (k)
            poll_set.kind = k;
        if (!p || !ob || !k)
            return -1;
        poll_set.cap = cap;
    }
    poll_set.pfd[*n] = (struct pollfd){.fd = fd, .events = events};
    poll_set.obj[*n] = o;
    poll_set.kind[*n] = kind;
    ++*n;
    return 0;
}

static void wait_events(size_t n, uint64_t due)
{
    struct timespec ts, *tp = NULL;
    if (due) {
        uint64_t now = fab_now_ns();
        uint64_t d = due > now ? due - now : 0;
        ts.tv_sec = (time_t)(d / 1000000000u);
        ts.tv_nsec = (long)(d % 1000000000u);
        tp = &ts;
    }
    fab_g.in_poll = true;
    pthread_mutex_unlock(&fab_g.lock);
    int r = ppoll(poll_set.pfd, n, tp, NULL);
    pthread_mutex_lock(&fab_g.lock);
    fab_g.in_poll = false;
    fab_g.turns++;
    pthread_cond_broadcast(&fab_g.turned);
    if (r <= 0)
        for (size_t i = 0; i < n; i++)
            poll_set.pfd[i].revents = 0;
}

static void accept_all(fab_listener *l)
{
    for (;;) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        fab_conn *c = conn_new(fd);
        if (!c) {
            close(fd);
            return;
        }
        c->lis = l;
    }
}

void fab_wire_turn(uint64_t due)
{
    size_t n = 0;
    sweep();
    int ok = poll_add(&n, fab_g.wake_fd, POLLIN, OBJ_WAKE, NULL);
    for (fab_listener *l = fab_g.listeners; l && ok == 0; l = l->next)
        if (l->fd >= 0 && l->id && l->listening)
            ok = poll_add(&n, l->fd, POLLIN, OBJ_LISTENER, l);
    for (fab_conn *c = fab_g.conns; c && ok == 0; c = c->next) {
        short ev = POLLIN;
        if (c->out.len > c->out.off)
            ev |= POLLOUT;
        ok = poll_add(&n, c->fd, ev, OBJ_CONN, c);
    }
    if (ok < 0) /* no memory for the poll set: try again shortly */
        due = fab_now_ns() + 1000000u;
    wait_events(n, due);
    for (size_t i = 0; i < n; i++) {
        short rev = poll_set.pfd[i].revents;
        if (!rev)
            continue;
        if (poll_set.kind[i] == OBJ_WAKE) {
            uint64_t v;
            (void)!read(fab_g.wake_fd, &v, sizeof v);
        } else if (poll_set.kind[i] == OBJ_LISTENER) {
            fab_listener *l = poll_set.obj[i];
            if (l->fd >= 0 && l->id)
                accept_all(l);
        } else {
            fab_conn *c = poll_set.obj[i];
            if (!c->lost && (rev & (POLLIN | POLLHUP | POLLERR)))
                conn_read(c);
            if (!c->lost && (rev & POLLOUT))
                conn_flush(c);
        }
    }
}

void fab_wire_shutdown(void)
{
    for (fab_conn *c = fab_g.conns; c; c = c->next) {
        conn_flush(c);
        fab_wire_lose(c);
    }
    sweep();
    for (fab_listener *l = fab_g.listeners; l; l = l->next)
        if (l->fd >= 0)
            fab_wire_unbind(l);
    sweep();
    free(poll_set.pfd);
    free(poll_set.obj);
    free(poll_set.kind);
    memset(&poll_set, 0, sizeof poll_set);
    if (fab_g.wake_fd >= 0)
        close(fab_g.wake_fd);
    fab_g.wake_fd = -1;
}
