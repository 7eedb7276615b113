/*
 * transport/server_conn.c - one connection of the shard server: frames
 * cut from the byte stream, WRITE data streamed into the pool, back
 * pressure, and the close.
 *
 * Frames are handled strictly in order, so replies leave in request order.
 * A WRITE is streamed: once its 48-byte head is in, the write begins on
 * the shard (the region is pinned) and its data is copied into the pool as
 * it arrives; the write ends when the last byte landed (WRITE_ACK) or when
 * the connection dies first (write_end not ok).
 *
 * What must stay true:
 *  - a frame head the decoder refuses closes the connection, counted by
 *    reason; nothing else is touched;
 *  - the bytes of a write land only at [dst, dst + len), the region the
 *    shard handed out for it; data of a refused write is drained, never
 *    stored;
 *  - a write that began always ends (close_conn ends it failed, and a
 *    write end a DELAY rule holds);
 *  - a connection whose output passes OUT_HIGH stops being read until it
 *    drains below OUT_LOW;
 *  - a connection is freed only outside its own callbacks' use of it: from
 *    a callback, the request code marks it doomed and the reaper (a
 *    deferred event) closes it;
 *  - nothing a peer does holds a connection for good (the sweep): no
 *    finished HELLO within hello_timeout_ns, a frame begun and not finished
 *    (or replies a closing peer does not take) within header_timeout_ns,
 *    a streamed write without a byte for write_timeout_ns (it ends
 *    failed), no request for idle_timeout_ns (subscribers excepted) each
 *    close it;
 *  - srv->out_bytes is the output queued on every connection (an evbuffer
 *    callback per connection); past out_max_bytes, a connection with more
 *    than OUT_LOW unread stops being read;
 *  - on a half-close (EOF) the replies already queued are sent before the
 *    connection closes;
 *  - the socket is read by the connection's own EV_READ event, one recv per
 *    readiness straight into the free space of its own input evbuffer (no
 *    ioctl(FIONREAD) and readv per read, as a bufferevent's read costs);
 *    the bufferevent only writes;
 *  - replies and events are queued in the connection's flat buffer during
 *    the callback (or loop turn) that makes them and written once at its
 *    end (xfer_server_batch_end, or the flush event for output made
 *    outside one): straight to the socket when the bufferevent holds
 *    nothing, else behind its output, so stream order is kept and EV_WRITE
 *    is registered only for what the socket did not take.
 */
#include "server_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "wire_frame.h"

/* ---------------------------------------------------------------------- */
/* Output: queued during the turn, written once                            */
/* ---------------------------------------------------------------------- */

/* Room for n more bytes in c's queued output.  False: out of memory (the
 * reply is then lost, as a bufferevent_write that fails loses it). */
static bool obuf_room(xfer_server_conn *c, uint32_t n)
{
    if (c->olen + n <= c->ocap)
        return true;
    uint32_t cap = c->ocap ? 2 * c->ocap : 4096;
    while (cap < c->olen + n)
        cap *= 2;
    uint8_t *b = xfer_server_calloc(c->srv, 1, cap);
    if (!b)
        return false;
    if (c->olen)
        memcpy(b, c->obuf, c->olen);
    xfer_server_free(c->srv, c->obuf);
    c->obuf = b;
    c->ocap = cap;
    return true;
}

void xfer_server_conn_send(xfer_server_conn *c, const xfer_wire_msg *m,
                           uint32_t req)
{
    xfer_server *s = c->srv;
    if (!obuf_room(c, XFER_WIRE_MAX_FIXED))
        return;
    size_t n = xfer_wire_encode(m, req, c->obuf + c->olen, XFER_WIRE_MAX_FIXED);
    c->olen += (uint32_t)n;
    if (!n || c->odirty)
        return;
    c->odirty = true;
    xfer_list_push_back(&s->dirty, &c->dlink);
    if (!s->batch_depth && !s->flush_armed) {
        s->flush_armed = true; /* queued outside a callback's batch */
        event_active(s->flush_ev, EV_TIMEOUT, 0);
    }
}

/*
 * Write c's queued output: straight to the socket with one send when its
 * bufferevent holds nothing (no EV_WRITE registration, no extra loop
 * turn), and what the socket did not take, or all of it while the
 * bufferevent still writes, behind the bufferevent's output.  A closing
 * connection whose replies are all out is reaped; one whose socket
 * failed too (the read side sees the error).
 */
static void conn_flush(xfer_server_conn *c)
{
    xfer_server *s = c->srv;
    xfer_list_remove(&s->dirty, &c->dlink);
    c->odirty = false;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t w = 0;
    if (evbuffer_get_length(out) == 0) {
        ssize_t r = send(bufferevent_getfd(c->bev), c->obuf, c->olen,
                         MSG_NOSIGNAL);
        s->sends++;
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
            errno != EINTR) {
            c->olen = 0;
            xfer_server_conn_doom(c);
            return;
        }
        w = r > 0 ? (size_t)r : 0;
    }
    if (w < c->olen)
        evbuffer_add(out, c->obuf + w, c->olen - w);
    c->olen = 0;
    if (c->closing && evbuffer_get_length(out) == 0)
        xfer_server_conn_doom(c);
}

void xfer_server_conn_flush_all(xfer_server *s)
{
    while (!xfer_list_empty(&s->dirty))
        conn_flush(XFER_LIST_ITEM(s->dirty.head, xfer_server_conn, dlink));
}

void xfer_server_conn_on_flush(evutil_socket_t fd, short what, void *arg)
{
    xfer_server *s = arg;
    s->flush_armed = false;
    xfer_server_conn_flush_all(s);
}

uint64_t xfer_server_sends(const xfer_server *s)
{
    return s->sends;
}

/* What c has queued: this turn's and the bufferevent's. */
static size_t out_len(xfer_server_conn *c)
{
    return c->olen + evbuffer_get_length(bufferevent_get_output(c->bev));
}

/* The output buffer of a connection grew or shrank. */
static void on_out_change(struct evbuffer *b,
                          const struct evbuffer_cb_info *info, void *arg)
{
    xfer_server_conn *c = arg;
    c->srv->out_bytes += info->n_added;
    c->srv->out_bytes -= info->n_deleted;
}

void xfer_server_conn_close(xfer_server_conn *c)
{
    xfer_server *s = c->srv;
    if (c->in_write)
        xfer_server_req_end_write(c, false);
    xfer_server_req_drop_held(c);
    xfer_server_copy_conn_gone(c);
    if (c->out_cb) {
        struct evbuffer *out = bufferevent_get_output(c->bev);
        evbuffer_remove_cb_entry(out, c->out_cb);
        s->out_bytes -= evbuffer_get_length(out);
    }
    xfer_list_remove(&s->conns, &c->link);
    if (c->odirty)
        xfer_list_remove(&s->dirty, &c->dlink);
    xfer_server_free(s, c->obuf);
    xfer_server_sess_unbind(c); /* the last of a session orphans its takes */
    event_free(c->rev);
    evbuffer_free(c->in);
    bufferevent_free(c->bev);
    xfer_server_free(s, c);
    xfer_server_flush_all(s);
}

void xfer_server_conn_doom(xfer_server_conn *c)
{
    c->doomed = true;
    xfer_server_conn_stop_reading(c);
    event_active(c->srv->reap_ev, EV_TIMEOUT, 0);
}

void xfer_server_conn_stop_reading(xfer_server_conn *c)
{
    event_del(c->rev);
}

void xfer_server_conn_reap(xfer_server *s)
{
    xfer_server_conn *next;
    for (xfer_server_conn *c = xfer_server_conn_of(s->conns.head); c;
         c = next) {
        next = xfer_server_conn_of(c->link.next);
        if (c->doomed)
            xfer_server_conn_close(c);
    }
}

static void bad_frame(xfer_server_conn *c, xfer_wire_reason why)
{
    xfer_server *s = c->srv;
    char what[64];
    s->bad_frames++;
    s->bad_by_reason[why < XFER_WIRE_R_COUNT_ ? why : 0]++;
    snprintf(what, sizeof what, "bad frame (%s), closed",
             xfer_wire_reason_name(why));
    xfer_server_log(s, c->serial, what);
    xfer_server_conn_close(c);
}

/* ---------------------------------------------------------------------- */
/* Streaming writes                                                        */
/* ---------------------------------------------------------------------- */

/* Read the rest of a write's data straight from the socket into the pool
 * (the input buffer is empty, so stream order is kept): one copy instead
 * of two.  Stops at EAGAIN; EOF and errors are left for on_sock_read to
 * see (the socket stays readable). */
static void recv_direct(xfer_server_conn *c)
{
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    while (c->wgot < c->wm.len) {
        ssize_t r = recv(fd, c->dst + c->wgot, c->wm.len - c->wgot, 0);
        if (r <= 0)
            return;
        c->wgot += (uint32_t)r;
        xfer_server_check_landed(c); /* integrity: while it is hot */
    }
}

/* Move what has arrived of the write's data into the pool.  Returns 1 when
 * the write finished, 0 when more data is needed. */
static int pump_write(xfer_server_conn *c, struct evbuffer *in)
{
    uint32_t before = c->wgot;
    size_t have = evbuffer_get_length(in);
    size_t left = c->wm.len - c->wgot;
    size_t n = have < left ? have : left;
    if (c->dst)
        evbuffer_remove(in, c->dst + c->wgot, n);
    else
        evbuffer_drain(in, n);
    c->wgot += (uint32_t)n;
    xfer_server_check_landed(c);
    if (c->dst && c->wgot < c->wm.len)
        recv_direct(c);
    if (c->wgot > before)
        c->t_active = xfer_server_now(c->srv);
    if (c->wgot < c->wm.len)
        return 0;
    xfer_server_req_finish_write(c);
    return 1;
}

/* ---------------------------------------------------------------------- */
/* Framing                                                                 */
/* ---------------------------------------------------------------------- */

/* Cut the next frame head from `in`.  Returns 1 with *h, *m when a frame
 * (for WRITE: its 48-byte head) was taken out, 0 when more bytes are
 * needed, -1 when the connection was closed for a bad frame. */
static int next_frame(xfer_server_conn *c, struct evbuffer *in,
                      xfer_wire_hdr *h, xfer_wire_msg *m)
{
    xfer_wire_reason why = XFER_WIRE_R_OK;
    int rc = xfer_wire_frame_cut(in, h, m, &why);
    if (rc < 0)
        bad_frame(c, why);
    return rc;
}

static bool is_request(uint8_t type)
{
    switch (type) {
    case XFER_WIRE_T_HELLO:
    case XFER_WIRE_T_RESERVE:
    case XFER_WIRE_T_WRITE:
    case XFER_WIRE_T_EAGER:
    case XFER_WIRE_T_EAGER_CRC:
    case XFER_WIRE_T_COMMIT:
    case XFER_WIRE_T_COMMIT_CRC:
    case XFER_WIRE_T_CANCEL:
    case XFER_WIRE_T_REFRESH:
    case XFER_WIRE_T_SUBSCRIBE:
    case XFER_WIRE_T_TAKE:
    case XFER_WIRE_T_RELEASE:
    case XFER_WIRE_T_STATUS:
    case XFER_WIRE_T_STATUS_BAD:
    case XFER_WIRE_T_HELLO2:
    case XFER_WIRE_T_AUTH:
        return true;
    default:
        return false;
    }
}

/* A frame that makes no sense on this connection (a reply type, a second
 * HELLO, an op before HELLO, anything but AUTH while one is awaited, an
 * AUTH that is not, a STATUS before HELLO on a server with a secret) is
 * bad input: close. */
static bool acceptable(xfer_server_conn *c, const xfer_wire_hdr *h)
{
    bool hello = h->type == XFER_WIRE_T_HELLO ||
                 h->type == XFER_WIRE_T_HELLO2;
    bool open_status = (h->type == XFER_WIRE_T_STATUS ||
                        h->type == XFER_WIRE_T_STATUS_BAD) &&
                       !c->srv->cfg.secret;
    bool needs_hello = !hello && !open_status;
    if (!is_request(h->type) || (hello && c->hosted >= 0) ||
        (c->await_auth != (h->type == XFER_WIRE_T_AUTH)) ||
        (hello && c->await_auth) ||
        (needs_hello && c->hosted < 0 && h->type != XFER_WIRE_T_AUTH)) {
        bad_frame(c, XFER_WIRE_R_UNEXPECTED);
        return false;
    }
    return true;
}

/* Stop reading c: its peer does not read its replies (OUT_HIGH), or
 * every connection's together are past out_max_bytes and c has more
 * than OUT_LOW of them. */
static bool must_pause(const xfer_server_conn *c, size_t out)
{
    return out > XFER_SERVER_OUT_HIGH ||
           (c->srv->out_bytes > c->srv->cfg.out_max_bytes &&
            out > XFER_SERVER_OUT_LOW);
}

static void read_frames(xfer_server_conn *c)
{
    struct evbuffer *in = c->in;
    while (!c->closing && !c->doomed) {
        if (c->in_write) {
            if (pump_write(c, in) == 0)
                break;
            continue;
        }
        xfer_wire_hdr h;
        xfer_wire_msg m;
        int rc = next_frame(c, in, &h, &m);
        if (rc < 0)
            return; /* closed */
        if (rc == 0) {
            /* a frame begun: the header timeout runs from now */
            if (evbuffer_get_length(in) && !c->t_partial)
                c->t_partial = xfer_server_now(c->srv);
            break;
        }
        c->t_partial = 0;
        c->t_active = xfer_server_now(c->srv);
        if (!acceptable(c, &h) || !xfer_server_req_handle(c, &h, &m))
            return; /* c may be gone */
        if (must_pause(c, out_len(c))) {
            c->paused = true;
            xfer_server_conn_stop_reading(c);
            break;
        }
    }
}

/* Every frame of the read is answered in one pass, under one clock
 * reading, and every connection's replies leave in one write each at the
 * batch's end (c may be gone by then). */
static void on_read(xfer_server_conn *c)
{
    xfer_server *s = c->srv;
    xfer_server_batch_begin(s);
    read_frames(c);
    xfer_server_batch_end(s);
}

/* The peer's end of the stream: EOF (a half-close) or a socket error. */
static void on_end(xfer_server_conn *c, bool error)
{
    if (c->in_write || evbuffer_get_length(c->in)) {
        bad_frame(c, XFER_WIRE_R_TRUNCATED); /* ended inside a frame */
        return;
    }
    size_t out = out_len(c);
    if (error || out == 0) {
        xfer_server_conn_close(c);
        return;
    }
    /* A half-close: the replies already queued go out first (on_write
     * closes once they are; the header timeout bounds the wait). */
    c->closing = true;
    c->t_active = xfer_server_now(c->srv);
    xfer_server_conn_stop_reading(c);
}

/* The socket is readable: one recv into the input buffer's free space
 * (at most 64 KiB), or straight into the pool inside a streamed write,
 * then every whole frame of it is answered. */
static void on_sock_read(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    xfer_server_conn *c = arg;
    struct evbuffer *in = c->in;
    /* Inside a streamed write with nothing buffered the bytes go straight
     * into the pool (one copy, as recv_direct's), else into the buffer. */
    bool direct = c->in_write && c->dst && evbuffer_get_length(in) == 0;
    struct evbuffer_iovec v;
    if (direct) {
        v.iov_base = c->dst + c->wgot;
        v.iov_len = c->wm.len - c->wgot;
    } else if (evbuffer_reserve_space(in, 64 << 10, &v, 1) < 1) {
        xfer_server_conn_close(c); /* out of memory: this one goes */
        return;
    }
    ssize_t r = recv(fd, v.iov_base, v.iov_len, 0);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (r <= 0) {
        on_end(c, r < 0);
        return;
    }
    if (direct) {
        c->wgot += (uint32_t)r;
        xfer_server_check_landed(c);
        c->t_active = xfer_server_now(c->srv);
    } else {
        v.iov_len = (size_t)r;
        evbuffer_commit_space(in, &v, 1);
    }
    on_read(c); /* a write may be whole now, and frames follow */
}

static void on_write(struct bufferevent *bev, void *arg)
{
    xfer_server_conn *c = arg;
    size_t out = evbuffer_get_length(bufferevent_get_output(bev));
    if (c->closing && out == 0) {
        xfer_server_conn_close(c);
        return;
    }
    if (c->paused && out <= XFER_SERVER_OUT_LOW) {
        c->paused = false;
        event_add(c->rev, NULL);
        on_read(c); /* frames may already be buffered */
    }
}

/* The bufferevent only writes, so what it reports is a write error. */
static void on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    xfer_server_conn *c = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        on_end(c, true);
}

/* ---------------------------------------------------------------------- */
/* Timeouts                                                                */
/* ---------------------------------------------------------------------- */

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

struct timeval xfer_server_sweep_tick(const xfer_server *s)
{
    const xfer_server_config *k = &s->cfg;
    uint64_t t = min_u64(min_u64(k->hello_timeout_ns, k->header_timeout_ns),
                         min_u64(k->idle_timeout_ns, k->write_timeout_ns)) /
                 4;
    t = t < 1000000ull ? 1000000ull : min_u64(t, 250000000ull);
    return (struct timeval){.tv_sec = 0, .tv_usec = (long)(t / 1000)};
}

/* A streamed write below the rate floor: over the window that just
 * ended (write_timeout_ns long) it got fewer than write_min_rate bytes a
 * second, and fewer than the rest of its data.  A write that keeps up
 * starts a new window. */
static bool too_slow(xfer_server_conn *c, uint64_t now)
{
    const xfer_server_config *k = &c->srv->cfg;
    uint64_t win = k->write_timeout_ns;
    if (now - c->w_win_ns < win)
        return false;
    /* rate * window in bytes, without overflow for any sane window */
    uint64_t want = (uint64_t)((double)k->write_min_rate * (double)win / 1e9);
    uint64_t rest = c->wm.len - c->w_win_got;
    uint64_t got = c->wgot - c->w_win_got;
    if (got < (want < rest ? want : rest))
        return true;
    c->w_win_ns = now;
    c->w_win_got = c->wgot;
    return false;
}

/* Why c is to be closed now, or NULL. */
static const char *expired(xfer_server_conn *c, uint64_t now)
{
    const xfer_server_config *k = &c->srv->cfg;
    if (c->closing)
        return now - c->t_active >= k->header_timeout_ns
                   ? "replies not read after close, closed"
                   : NULL;
    if (c->in_write && now - c->t_active >= k->write_timeout_ns)
        return "write stalled, ended failed, closed";
    if (c->in_write)
        return too_slow(c, now)
                   ? "write below the rate floor, ended failed, closed"
                   : NULL;
    if (c->hosted < 0 && now - c->t_accept >= k->hello_timeout_ns)
        return "no HELLO in time, closed";
    if (c->t_partial && !c->paused &&
        now - c->t_partial >= k->header_timeout_ns)
        return "frame not finished in time, closed";
    if (!c->subscribed && now - c->t_active >= k->idle_timeout_ns)
        return "idle, closed";
    return NULL;
}

void xfer_server_conn_sweep(evutil_socket_t fd, short what, void *arg)
{
    xfer_server *s = arg;
    uint64_t now = xfer_server_now(s);
    xfer_server_conn *next;
    for (xfer_server_conn *c = xfer_server_conn_of(s->conns.head); c;
         c = next) {
        next = xfer_server_conn_of(c->link.next);
        const char *why = c->doomed ? NULL : expired(c, now);
        if (!why)
            continue;
        if (c->in_write)
            s->writes_stalled++;
        else
            s->timeouts++;
        xfer_server_log(s, c->serial, why);
        xfer_server_conn_close(c);
    }
}

/* The peer address of fd as 16 bytes (IPv4 mapped into IPv6); zeros
 * when the socket says nothing (every such peer then counts as one). */
static void peer_of(evutil_socket_t fd, uint8_t out[16])
{
    struct sockaddr_storage ss;
    socklen_t n = sizeof ss;
    memset(out, 0, 16);
    if (getpeername(fd, (struct sockaddr *)&ss, &n) != 0)
        return;
    if (ss.ss_family == AF_INET6) {
        memcpy(out, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
    } else if (ss.ss_family == AF_INET) {
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    }
}

void xfer_server_conn_accept(xfer_server *s, evutil_socket_t fd)
{
    xfer_server_conn *c = xfer_server_calloc(s, 1, sizeof *c);
    struct bufferevent *bev =
        c ? bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
    struct event *rev =
        bev ? event_new(s->base, fd, EV_READ | EV_PERSIST, on_sock_read, c)
            : NULL;
    struct evbuffer *in = rev ? evbuffer_new() : NULL;
    if (!in) {
        if (rev)
            event_free(rev);
        if (bev)
            bufferevent_free(bev); /* closes fd */
        else
            evutil_closesocket(fd);
        xfer_server_free(s, c);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    peer_of(fd, c->peer);
    c->srv = s;
    c->bev = bev;
    c->rev = rev;
    c->in = in;
    c->hosted = -1;
    c->serial = ++s->serial;
    c->t_accept = c->t_active = xfer_server_now(s);
    xfer_list_push_front(&s->conns, &c->link);
    c->out_cb = evbuffer_add_cb(bufferevent_get_output(bev), on_out_change,
                                c);
    bufferevent_set_max_single_write(bev, 1 << 20);
    bufferevent_setwatermark(bev, EV_WRITE, XFER_SERVER_OUT_LOW, 0);
    bufferevent_setcb(bev, NULL, on_write, on_event, c);
    bufferevent_enable(bev, EV_WRITE);
    event_add(rev, NULL);
}
