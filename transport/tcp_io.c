/*
 * transport/tcp_io.c - the TCP transport's bytes on the hot path: each
 * connection's output, queued during the loop turn and written once, and
 * its input once HELLO is answered, read with one recv and decoded in
 * place.
 *
 * Output: frames are queued on their connection (a flat buffer of heads,
 * and segments pointing into it or into a WRITE's staging) and each
 * connection is written once, at the end of the read callback whose
 * replies produced them or from one deferred flush event: straight to the
 * socket with one sendmsg when the bufferevent holds nothing, so that
 * EV_WRITE is registered only when the socket did not take it all; the
 * rest goes to the bufferevent, staging bytes by reference (no copy),
 * whose cleanup callback tells tcp.c when libevent has let go of them.
 *
 * Input: after HELLO the connection reads its socket itself (its own
 * EV_READ event): one recv per readiness into a flat 64 KiB buffer, every
 * whole frame decoded where it lies, the tail of an incomplete one kept
 * at the front (no ioctl(FIONREAD), no copy-out and removal per frame).
 *
 * What must stay true:
 *  - queued output is in stream order: the bufferevent's output comes
 *    first, so nothing is written past it while it holds bytes;
 *  - a connection is in t->dirty exactly while its `dirty` flag is up, so
 *    the list never holds more than nshards entries;
 *  - a WRITE's staging reference is released exactly once: when the
 *    kernel took its bytes, by libevent's cleanup for what went to the
 *    bufferevent, or unsent when the connection drops its queue;
 *  - a frame the decoder refuses drops only its connection.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "tcp_conn.h"
/* fsm_private_dep: the injected allocator with its libc default. */
#include "util.h"

/* Grow *p (of *cap elements of `size` bytes) to hold `need`. */
static bool grow(xfer_tcp *t, void **p, uint32_t *cap, uint32_t need,
                 size_t size)
{
    if (need <= *cap)
        return true;
    uint32_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *q = xfer_util_alloc(&t->cfg.alloc, (size_t)n * size);
    if (!q)
        return false;
    if (*p)
        memcpy(q, *p, (size_t)*cap * size);
    xfer_util_free(&t->cfg.alloc, *p);
    *p = q;
    *cap = n;
    return true;
}

static void arm_flush(xfer_tcp *t)
{
    if (t->flush_armed || t->in_read)
        return; /* the read callback flushes at its end */
    t->flush_armed = true;
    event_active(t->flush_ev, EV_TIMEOUT, 0);
}

bool xfer_tcp_io_queue_ref(tcp_conn *c, tcp_op *op, uint32_t off, uint32_t len)
{
    xfer_tcp *t = c->t;
    if (!grow(t, (void **)&c->segs, &c->segs_cap, c->nsegs + 1,
              sizeof *c->segs))
        return false;
    c->segs[c->nsegs++] = (tcp_seg){.op = op, .off = off, .len = len};
    c->pending += len;
    if (!c->dirty) {
        c->dirty = true;
        t->dirty[t->ndirty++] = c->shard;
    }
    arm_flush(t);
    return true;
}

/* Queue n bytes (copied) for this turn's write.  False: out of memory. */
bool xfer_tcp_io_queue(tcp_conn *c, const uint8_t *b, size_t n)
{
    if (!grow(c->t, (void **)&c->flat, &c->flat_cap,
              c->flat_len + (uint32_t)n, 1))
        return false;
    memcpy(c->flat + c->flat_len, b, n);
    tcp_seg *last = c->nsegs ? &c->segs[c->nsegs - 1] : NULL;
    if (last && !last->op && last->off + last->len == c->flat_len) {
        last->len += (uint32_t)n;
        c->pending += n;
        c->flat_len += (uint32_t)n;
        return true;
    }
    uint32_t off = c->flat_len;
    c->flat_len += (uint32_t)n;
    return xfer_tcp_io_queue_ref(c, NULL, off, (uint32_t)n);
}

/* Forget the queued output; staging bytes in it are released. */
void xfer_tcp_io_drop(tcp_conn *c)
{
    uint32_t n = c->nsegs;
    c->nsegs = 0;
    c->flat_len = 0;
    c->pending = 0;
    for (uint32_t i = 0; i < n; i++)
        if (c->segs[i].op)
            xfer_tcp_release_ref(c->segs[i].op);
}

/* Write the queued segments from the first straight to the socket, one
 * writev per TCP_IOV of them, until all are out or the socket is full.
 * Returns how many segments went out whole (segs[done].off advanced past
 * what went of the next one); -1 on a socket error. */
static int write_direct(tcp_conn *c)
{
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    uint32_t done = 0;
    while (done < c->nsegs) {
        struct iovec iov[TCP_IOV];
        int k = 0;
        for (uint32_t i = done; i < c->nsegs && k < TCP_IOV; i++, k++) {
            tcp_seg *g = &c->segs[i];
            iov[k].iov_base = g->op ? (void *)(g->op->src + g->off)
                                    : (void *)(c->flat + g->off);
            iov[k].iov_len = g->len;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)k};
        c->t->io.writes++;
        ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (w < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
                       ? (int)done
                       : -1;
        size_t left = (size_t)w;
        while (done < c->nsegs && left >= c->segs[done].len) {
            left -= c->segs[done].len;
            c->pending -= c->segs[done].len;
            done++;
        }
        if (done < c->nsegs && left) {
            tcp_seg *g = &c->segs[done];
            g->off += (uint32_t)left;
            g->len -= (uint32_t)left;
            c->pending -= left;
            return (int)done; /* a short write: the socket is full */
        }
        if (k < TCP_IOV && done < c->nsegs)
            return (int)done;
    }
    return (int)done;
}

/* Hand segments [from, nsegs) to the bufferevent, which writes them when
 * the socket takes more (EV_WRITE).  False when the connection must be
 * dropped. */
static bool hand_to_bev(tcp_conn *c, uint32_t from)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    for (uint32_t i = from; i < c->nsegs; i++) {
        tcp_seg *g = &c->segs[i];
        int rc = g->op
                     ? evbuffer_add_reference(out, g->op->src + g->off, g->len,
                                              xfer_tcp_ref_done, g->op)
                     : evbuffer_add(out, c->flat + g->off, g->len);
        if (rc != 0) {
            c->nsegs -= i;
            memmove(c->segs, c->segs + i, c->nsegs * sizeof *c->segs);
            return false;
        }
        c->pending -= g->len;
    }
    c->nsegs = 0;
    c->flat_len = 0;
    return true;
}


/*
 * Write the connection's queued output: straight to the socket when the
 * bufferevent holds nothing (so no EV_WRITE registration and no extra
 * loop turn), and what the socket did not take, or everything when the
 * bufferevent is still writing, goes to the bufferevent behind what it
 * holds (by reference for staging bytes: no copy).  A WRITE whose data
 * went out whole is released at once.
 */
static void flush_conn(tcp_conn *c)
{
    c->dirty = false;
    if (!c->nsegs || !c->bev)
        return;
    int done = 0;
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
        done = write_direct(c);
    if (done < 0) {
        xfer_tcp_conn_lost(c, false);
        return;
    }
    for (int i = 0; i < done; i++)
        if (c->segs[i].op)
            xfer_tcp_release_ref(c->segs[i].op);
    if (!hand_to_bev(c, (uint32_t)done)) {
        xfer_tcp_conn_lost(c, false);
        return;
    }
    xfer_tcp_flush_wait(c); /* ops the watermark held: the socket took it */
}

/* A connection is in t->dirty exactly while its flag is up: taken out
 * before it is flushed, so one queued again meanwhile comes back. */
void xfer_tcp_io_flush_dirty(xfer_tcp *t)
{
    while (t->ndirty)
        flush_conn(&t->conns[t->dirty[--t->ndirty]]);
}

void xfer_tcp_io_on_flush(evutil_socket_t fd, short what, void *arg)
{
    xfer_tcp *t = arg;
    t->flush_armed = false;
    xfer_tcp_io_flush_dirty(t);
}

static void parse_in(tcp_conn *c);
static void on_sock_read(evutil_socket_t fd, short what, void *arg);

/*
 * HELLO is answered: read the socket ourselves from now on (one recv per
 * readiness into the connection's flat buffer, frames decoded in place)
 * instead of through the bufferevent (an ioctl(FIONREAD), a readv into
 * its chains, and a copy-out and removal per frame).  The bufferevent
 * keeps connecting and writing.  Bytes it already read are moved over.
 * False: out of memory or libevent refused (the caller drops).
 */
bool xfer_tcp_io_take_reads(tcp_conn *c, struct bufferevent *bev)
{
    xfer_tcp *t = c->t;
    c->own_read = false;
    if (!c->in)
        c->in = xfer_util_alloc(&t->cfg.alloc, TCP_IN_CAP);
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t left = evbuffer_get_length(in);
    if (!c->in || left > TCP_IN_CAP)
        return false;
    c->in_len = (uint32_t)evbuffer_remove(in, c->in, left);
    bufferevent_disable(bev, EV_READ);
    c->rd_ev = event_new(t->base, bufferevent_getfd(bev), EV_READ | EV_PERSIST,
                         on_sock_read, c);
    if (!c->rd_ev || event_add(c->rd_ev, NULL) != 0)
        return false;
    if (c->in_len)
        parse_in(c);
    return true;
}

/* Decode the frames in c->in in place; keep an incomplete one's bytes at
 * the front.  A frame the decoder refuses, or that is not a reply we can
 * take, drops the connection (its ops fail with CONN_LOST). */
static void parse_in(tcp_conn *c)
{
    struct event *ev = c->rd_ev;
    size_t off = 0;
    while (c->in_len - off >= XFER_WIRE_HDR) {
        xfer_wire_hdr h;
        xfer_wire_msg m;
        xfer_wire_reason why;
        const uint8_t *p = c->in + off;
        if (xfer_wire_decode_hdr(p, XFER_WIRE_HDR, &h, &why) != 0) {
            xfer_tcp_conn_lost(c, true);
            return;
        }
        size_t need = XFER_WIRE_HDR + xfer_wire_body_size(h.type);
        if (c->in_len - off < need)
            break;
        if (xfer_wire_decode_body(&h, p + XFER_WIRE_HDR, need - XFER_WIRE_HDR,
                                  &m, &why) != 0 ||
            h.type == XFER_WIRE_T_WRITE || !xfer_tcp_on_frame(c, &h, &m)) {
            xfer_tcp_conn_lost(c, true);
            return;
        }
        off += need;
        if (c->rd_ev != ev)
            return; /* the connection was replaced meanwhile */
    }
    c->in_len -= (uint32_t)off;
    if (off && c->in_len)
        memmove(c->in, c->in + off, c->in_len);
}

static void on_sock_read(evutil_socket_t fd, short what, void *arg)
{
    tcp_conn *c = arg;
    xfer_tcp *t = c->t;
    t->io.reads++;
    ssize_t r = recv(fd, c->in + c->in_len, TCP_IN_CAP - c->in_len, 0);
    if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
                      errno == EINTR))
            return;
        xfer_tcp_conn_lost(c, false); /* EOF or a socket error */
        return;
    }
    c->in_len += (uint32_t)r;
    t->in_read++;
    parse_in(c);
    t->in_read--;
    if (!t->in_read)
        xfer_tcp_deliver_queued(t);
}

void xfer_tcp_io_get(const xfer_tcp *t, xfer_tcp_io *out)
{
    *out = t->io;
}
