/*
 * tools/xferd/server.c - the xferd daemon: consumer shards (xfer_shard) of
 * one group behind a TCP listener that speaks the wire protocol.
 *
 * Each connection names its shard with HELLO; every op on it then goes to
 * that shard.  Frames are handled strictly in order, so replies leave in
 * request order.  A WRITE is streamed: once its 48-byte head is in, the
 * write begins on the shard (the region is pinned) and its data is copied
 * into the pool as it arrives; the write ends when the last byte landed
 * (WRITE_ACK) or when the connection dies first (write_end not ok).
 *
 * What must stay true:
 *  - peer input is never trusted: a frame the decoder refuses, or a request
 *    that makes no sense on this connection, closes that connection with a
 *    counted, traced error and touches nothing else; a well-formed request
 *    the shard refuses gets an ERROR reply and the connection stays;
 *  - a write that began on a shard always ends on it (I4): on the last byte,
 *    or with ok=false when its connection goes away;
 *  - one slow reader cannot grow our memory without bound: a connection
 *    whose output passes XD_OUT_HIGH stops being read until it drains, and
 *    a subscriber that falls that far behind is dropped (counted);
 *  - the lease timer is armed for the earliest deadline of every shard
 *    after every call that may change it.
 */
#include "server.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "wire.h"
#include "xfer/ctl.h"
#include "xfer/shard.h"

#define XD_OUT_HIGH (8u << 20)
#define XD_OUT_LOW (1u << 20)
#define XD_MAX_EVENTS 256
#define XD_LOG_MAX 200

typedef struct xd_conn xd_conn;

typedef struct xd_shard {
    xfer_shard *sh;
    uint16_t index;
    uint64_t write_bytes, events_sent;
} xd_shard;

struct xd_conn {
    xd_server *srv;
    struct bufferevent *bev;
    xd_conn *prev, *next;
    uint64_t serial;
    int hosted;        /* index into srv->shards, -1 before HELLO */
    bool subscribed, closing, paused;
    bool doomed;       /* closed by the reaper, outside any callback of it */
    /* A WRITE being streamed in. */
    bool in_write;
    uint32_t wreq, wgot;
    xfer_wire_msg wm;
    uint8_t *dst;      /* NULL: the data is skipped */
    int32_t wrc;       /* the error to answer after skipping, or a fault */
    uint8_t wfault;
};

enum { F_NONE, F_FAIL, F_APPLIED_LOST, F_DROP };

struct xd_server {
    struct event_base *base;
    xd_config cfg;
    struct evconnlistener *lis;
    struct event *timer, *drain_ev, *reap_ev;
    xfer_ctl *ctl;
    xd_shard shards[XFER_MAX_SHARDS];
    xd_conn *conns;
    uint32_t nconns;
    uint64_t serial, rng, drain_deadline;
    bool draining;
    uint16_t port;
    uint64_t bad_frames, bad_by_reason[XFER_WIRE_R_COUNT_];
    uint64_t errors_sent, subs_dropped, faults, logged;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void trace(xd_server *s, const char *fmt, uint64_t serial,
                  const char *what)
{
    if (!s->cfg.log || s->logged >= XD_LOG_MAX)
        return;
    s->logged++;
    fprintf(s->cfg.log, fmt, serial, what);
    fflush(s->cfg.log);
}

/* ---------------------------------------------------------------------- */
/* Timers and events                                                       */
/* ---------------------------------------------------------------------- */

static void arm_timer(xd_server *s)
{
    uint64_t next = UINT64_MAX;
    for (uint16_t i = 0; i < s->cfg.nshards; i++) {
        uint64_t d = xfer_shard_next_deadline(s->shards[i].sh);
        next = d < next ? d : next;
    }
    if (next == UINT64_MAX) {
        evtimer_del(s->timer);
        return;
    }
    uint64_t now = now_ns(), d = next > now ? next - now : 0;
    struct timeval tv = {.tv_sec = (time_t)(d / 1000000000ull),
                         .tv_usec = (suseconds_t)(d % 1000000000ull / 1000)};
    evtimer_add(s->timer, &tv);
}

static void send_frame(xd_conn *c, const xfer_wire_msg *m, uint32_t req)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t n = xfer_wire_encode(m, req, buf, sizeof buf);
    if (n)
        bufferevent_write(c->bev, buf, n);
}

static void publish(xd_server *s, xd_shard *xs, const xfer_shard_event *ev)
{
    xfer_wire_msg m = {.type = XFER_WIRE_T_EVENT, .kind = ev->kind,
                       .shard = xs->index, .attempt = ev->attempt,
                       .id = ev->id, .resv_id = ev->resv_id, .len = ev->len};
    xd_conn *next;
    for (xd_conn *c = s->conns; c; c = next) {
        next = c->next;
        if (!c->subscribed || c->closing || c->hosted < 0 ||
            &s->shards[c->hosted] != xs)
            continue;
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) >
            XD_OUT_HIGH) {
            s->subs_dropped++;
            trace(s, "xferd: conn %" PRIu64 " %s\n", c->serial,
                  "subscriber too slow, dropped");
            c->doomed = true;
            c->subscribed = false;
            bufferevent_disable(c->bev, EV_READ);
            event_active(s->reap_ev, EV_TIMEOUT, 0);
            continue;
        }
        send_frame(c, &m, 0);
        xs->events_sent++;
    }
}

/* Hand the shard's pending events to subscribers; in consume mode take and
 * release READY data at once (a sink for tests and benchmarks). */
static void flush_events(xd_server *s, xd_shard *xs)
{
    size_t n;
    const xfer_shard_event *evs = xfer_shard_events(xs->sh, &n);
    xfer_shard_event copy[XD_MAX_EVENTS];
    while (n) {
        size_t k = n < XD_MAX_EVENTS ? n : XD_MAX_EVENTS;
        memcpy(copy, evs, k * sizeof copy[0]);
        if (k == n)
            xfer_shard_events_clear(xs->sh);
        else
            evs += k;
        n -= k;
        for (size_t i = 0; i < k; i++) {
            publish(s, xs, &copy[i]);
            if (s->cfg.consume && copy[i].kind == XFER_SHARD_EV_READY) {
                const uint8_t *data;
                uint32_t len;
                uint64_t t = now_ns();
                if (xfer_shard_take(xs->sh, t, copy[i].id, copy[i].resv_id,
                                    &data, &len) == 0)
                    xfer_shard_release(xs->sh, t, copy[i].id,
                                       copy[i].resv_id);
            }
        }
    }
    xfer_shard_events_clear(xs->sh);
}

static void flush_all(xd_server *s)
{
    for (uint16_t i = 0; i < s->cfg.nshards; i++)
        flush_events(s, &s->shards[i]);
    arm_timer(s);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    xd_server *s = arg;
    uint64_t t = now_ns();
    for (uint16_t i = 0; i < s->cfg.nshards; i++)
        xfer_shard_on_timer(s->shards[i].sh, t);
    flush_all(s);
}

/* ---------------------------------------------------------------------- */
/* Connections                                                             */
/* ---------------------------------------------------------------------- */

static void end_write(xd_conn *c, bool ok)
{
    xd_shard *xs = &c->srv->shards[c->hosted];
    int rc = 0;
    if (c->dst)
        rc = xfer_shard_write_end(xs->sh, now_ns(), c->wm.id, c->wm.resv_id,
                                  ok);
    c->in_write = false;
    c->dst = NULL;
    if (ok)
        xs->write_bytes += c->wm.len;
    if (c->wrc == 0)
        c->wrc = rc;
}

static void close_conn(xd_conn *c)
{
    xd_server *s = c->srv;
    if (c->in_write)
        end_write(c, false);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nconns--;
    bufferevent_free(c->bev);
    free(c);
    flush_all(s);
}

static void bad_frame(xd_conn *c, xfer_wire_reason why)
{
    xd_server *s = c->srv;
    s->bad_frames++;
    s->bad_by_reason[why < XFER_WIRE_R_COUNT_ ? why : 0]++;
    trace(s, "xferd: conn %" PRIu64 " bad frame (%s), closed\n", c->serial,
          xfer_wire_reason_name(why));
    close_conn(c);
}

static void send_error(xd_conn *c, uint32_t req, uint8_t type,
                       const xfer_wire_msg *m, int32_t code)
{
    xfer_wire_msg e = {.type = XFER_WIRE_T_ERROR, .code = code,
                       .req_type = type, .id = m->id, .attempt = m->attempt,
                       .shard = c->hosted >= 0
                                    ? c->srv->shards[c->hosted].index
                                    : XFER_WIRE_SHARD_ALL};
    c->srv->errors_sent++;
    send_frame(c, &e, req);
}

/* Answer an op: ack of `ack` type echoing m, or ERROR with rc. */
static void answer(xd_conn *c, uint32_t req, const xfer_wire_msg *m,
                   uint8_t ack, int32_t rc)
{
    if (rc) {
        send_error(c, req, m->type, m, rc);
        return;
    }
    xfer_wire_msg a = *m;
    a.type = ack;
    send_frame(c, &a, req);
}

static uint64_t rnd(xd_server *s)
{
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return s->rng * 0x2545f4914f6cdd1dull;
}

/* A seeded fault for one op: drop the connection (drop_ppm), or refuse /
 * apply-but-report-failure, half each (fault_ppm). */
static uint8_t draw_fault(xd_server *s)
{
    if (s->cfg.drop_ppm && rnd(s) % 1000000u < s->cfg.drop_ppm) {
        s->faults++;
        return F_DROP;
    }
    if (!s->cfg.fault_ppm || rnd(s) % 1000000u >= s->cfg.fault_ppm)
        return F_NONE;
    s->faults++;
    return (uint8_t)(F_FAIL + rnd(s) % 2);
}

/* ---------------------------------------------------------------------- */
/* Status                                                                  */
/* ---------------------------------------------------------------------- */

static void add_shard(const xd_shard *xs, xfer_wire_status *st)
{
    xfer_shard_stats ss;
    xfer_shard_stats_get(xs->sh, &ss);
    st->pool_bytes += ss.pool_bytes;
    st->bytes_in_use += ss.bytes_in_use;
    st->live += ss.live;
    st->tombstones += ss.tombstones;
    st->reserves += ss.reserves;
    st->refused += ss.refused;
    st->writes += ss.writes;
    st->commits += ss.commits;
    st->cancels += ss.cancels;
    st->expiries += ss.expiries;
    st->events_sent += xs->events_sent;
    st->write_bytes += xs->write_bytes;
}

/* Counters of hosted shard `idx`, or of every shard summed (idx < 0). */
static void fill_status(const xd_server *s, int idx, xfer_wire_status *st)
{
    memset(st, 0, sizeof *st);
    st->shard = idx < 0 ? XFER_WIRE_SHARD_ALL : s->shards[idx].index;
    st->nshards = s->cfg.nshards;
    st->conns = s->nconns;
    for (int i = 0; i < (int)s->cfg.nshards; i++)
        if (idx < 0 || idx == i)
            add_shard(&s->shards[i], st);
    st->bad_frames = s->bad_frames;
    st->errors_sent = s->errors_sent;
}

static int find_shard(const xd_server *s, uint16_t index)
{
    for (int i = 0; i < (int)s->cfg.nshards; i++)
        if (s->shards[i].index == index)
            return i;
    return -1;
}

void xd_server_print_stats(const xd_server *s, FILE *f)
{
    for (int i = -1; i < (int)s->cfg.nshards; i++) {
        xfer_wire_status st;
        fill_status(s, i, &st);
        if (i < 0)
            fprintf(f, "xferd stats: all");
        else
            fprintf(f, "xferd stats: shard=%u", (unsigned)st.shard);
        fprintf(f,
                " pool=%" PRIu64 " in_use=%" PRIu64 " live=%" PRIu64
                " tombstones=%" PRIu64 " reserves=%" PRIu64
                " refused=%" PRIu64 " writes=%" PRIu64 " commits=%" PRIu64
                " cancels=%" PRIu64 " expiries=%" PRIu64 " events=%" PRIu64
                " conns=%u bad_frames=%" PRIu64 " errors_sent=%" PRIu64
                " faults=%" PRIu64 " subs_dropped=%" PRIu64 "\n",
                st.pool_bytes, st.bytes_in_use, st.live, st.tombstones,
                st.reserves, st.refused, st.writes, st.commits, st.cancels,
                st.expiries, st.events_sent, st.conns, st.bad_frames,
                st.errors_sent, s->faults, s->subs_dropped);
    }
    fflush(f);
}

/* ---------------------------------------------------------------------- */
/* Requests                                                                */
/* ---------------------------------------------------------------------- */

/* HELLO: bind the connection to a hosted shard of our group. */
static bool on_hello(xd_conn *c, uint32_t req, const xfer_wire_msg *m)
{
    xd_server *s = c->srv;
    int idx = find_shard(s, m->shard);
    int32_t rc = idx < 0 ? XFER_ERR_NOT_FOUND
                 : m->group != s->cfg.group ? XFER_ERR_INVALID_ARG
                 : m->version != XFER_WIRE_VERSION ? XFER_ERR_NOT_SUPPORTED
                                                   : 0;
    if (rc) {
        send_error(c, req, m->type, m, rc);
        c->closing = true; /* closed once the ERROR is out */
        bufferevent_disable(c->bev, EV_READ);
        return false;
    }
    c->hosted = idx;
    xfer_wire_msg a = {.type = XFER_WIRE_T_HELLO_ACK,
                       .version = XFER_WIRE_VERSION, .shard = m->shard,
                       .group = s->cfg.group,
                       .pool_bytes = s->cfg.pool_bytes,
                       .lease_ttl_ns = s->cfg.lease_ttl_ns,
                       .max_write = XFER_WIRE_MAX_DATA};
    send_frame(c, &a, req);
    return true;
}

static void on_status(xd_conn *c, uint32_t req, const xfer_wire_msg *m)
{
    int idx = -1;
    if (m->shard != XFER_WIRE_SHARD_ALL) {
        idx = find_shard(c->srv, m->shard);
        if (idx < 0) {
            send_error(c, req, m->type, m, XFER_ERR_NOT_FOUND);
            return;
        }
    }
    xfer_wire_msg a = {.type = XFER_WIRE_T_STATUS_OK};
    fill_status(c->srv, idx, &a.st);
    send_frame(c, &a, req);
}

/* Apply a control op to the connection's shard; fills the ack. */
static int32_t apply(xd_conn *c, const xfer_wire_msg *m, xfer_wire_msg *a)
{
    xfer_shard *sh = c->srv->shards[c->hosted].sh;
    uint64_t t = now_ns();
    *a = *m;
    switch (m->type) {
    case XFER_WIRE_T_RESERVE: {
        if (c->srv->draining)
            return XFER_ERR_SHUTDOWN;
        xfer_resv_info info;
        int rc = xfer_shard_reserve(sh, t, m->id, m->attempt, m->len, &info);
        a->type = XFER_WIRE_T_RESERVE_OK;
        a->resv_id = info.resv_id;
        a->addr = info.addr;
        return rc;
    }
    case XFER_WIRE_T_COMMIT:
        a->type = XFER_WIRE_T_COMMIT_ACK;
        return xfer_shard_commit(sh, t, m->id, m->attempt, m->resv_id);
    case XFER_WIRE_T_CANCEL:
        a->type = XFER_WIRE_T_CANCEL_ACK;
        return xfer_shard_cancel(sh, t, m->id, m->attempt, m->resv_id);
    case XFER_WIRE_T_TAKE: {
        const uint8_t *data = NULL;
        a->type = XFER_WIRE_T_TAKE_OK;
        int rc = xfer_shard_take(sh, t, m->id, m->resv_id, &data, &a->len);
        if (rc == 0)
            a->addr = (uint64_t)(data - xfer_shard_pool_base(sh));
        return rc;
    }
    case XFER_WIRE_T_RELEASE:
        a->type = XFER_WIRE_T_RELEASE_ACK;
        return xfer_shard_release(sh, t, m->id, m->resv_id);
    default:
        return XFER_ERR_INTERNAL;
    }
}

/* A control op, with an injected fault if one is drawn.  Returns false when
 * the connection was closed. */
static bool on_op(xd_conn *c, uint32_t req, const xfer_wire_msg *m)
{
    bool control = m->type != XFER_WIRE_T_TAKE &&
                   m->type != XFER_WIRE_T_RELEASE;
    uint8_t fault = control ? draw_fault(c->srv) : F_NONE;
    xfer_wire_msg a;
    int32_t rc = fault == F_FAIL ? XFER_ERR_REMOTE : apply(c, m, &a);
    if (fault == F_FAIL)
        a = *m;
    if (fault == F_APPLIED_LOST)
        rc = XFER_ERR_REMOTE;
    flush_all(c->srv);
    if (fault == F_DROP) {
        trace(c->srv, "xferd: conn %" PRIu64 " %s\n", c->serial,
              "fault: connection dropped");
        close_conn(c);
        return false;
    }
    if (rc)
        send_error(c, req, m->type, m, rc);
    else
        send_frame(c, &a, req);
    return true;
}

/* ---------------------------------------------------------------------- */
/* Streaming writes                                                        */
/* ---------------------------------------------------------------------- */

static void finish_write(xd_conn *c)
{
    end_write(c, true);
    if (c->wfault == F_APPLIED_LOST && c->wrc == 0)
        c->wrc = XFER_ERR_REMOTE;
    answer(c, c->wreq, &c->wm, XFER_WIRE_T_WRITE_ACK, c->wrc);
    flush_all(c->srv);
}

/* The head of a WRITE is in: begin it on the shard (or decide to skip its
 * data and answer an error).  Returns false when the connection closed. */
static bool start_write(xd_conn *c, uint32_t req, const xfer_wire_msg *m)
{
    xfer_shard *sh = c->srv->shards[c->hosted].sh;
    c->in_write = true;
    c->wreq = req;
    c->wm = *m;
    c->wgot = 0;
    c->dst = NULL;
    c->wrc = 0;
    c->wfault = draw_fault(c->srv);
    if (c->wfault == F_FAIL) {
        c->wrc = XFER_ERR_REMOTE;
    } else {
        uint8_t *dst = NULL;
        int rc = xfer_shard_write_begin(sh, now_ns(), m->id, m->attempt,
                                        m->resv_id, m->off, m->len, &dst);
        if (rc == 0)
            c->dst = dst ? dst : (uint8_t *)"";
        c->wrc = rc;
    }
    if (c->wfault == F_DROP) {
        trace(c->srv, "xferd: conn %" PRIu64 " %s\n", c->serial,
              "fault: connection dropped mid-write");
        close_conn(c);
        return false;
    }
    if (m->len == 0)
        finish_write(c);
    return true;
}

/* Read the rest of a write's data straight from the socket into the pool
 * (the input buffer is empty, so stream order is kept): one copy instead
 * of two.  Stops at EAGAIN; EOF and errors are left for libevent to see. */
static void recv_direct(xd_conn *c)
{
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    while (c->wgot < c->wm.len) {
        ssize_t r = recv(fd, c->dst + c->wgot, c->wm.len - c->wgot, 0);
        if (r <= 0)
            return;
        c->wgot += (uint32_t)r;
    }
}

/* Move what has arrived of the write's data into the pool.  Returns 1 when
 * the write finished, 0 when more data is needed. */
static int pump_write(xd_conn *c, struct evbuffer *in)
{
    size_t have = evbuffer_get_length(in);
    size_t left = c->wm.len - c->wgot;
    size_t n = have < left ? have : left;
    if (c->dst)
        evbuffer_remove(in, c->dst + c->wgot, n);
    else
        evbuffer_drain(in, n);
    c->wgot += (uint32_t)n;
    if (c->dst && c->wgot < c->wm.len)
        recv_direct(c);
    if (c->wgot < c->wm.len)
        return 0;
    finish_write(c);
    return 1;
}

/* ---------------------------------------------------------------------- */
/* Framing                                                                 */
/* ---------------------------------------------------------------------- */

static bool is_request(uint8_t type)
{
    switch (type) {
    case XFER_WIRE_T_HELLO:
    case XFER_WIRE_T_RESERVE:
    case XFER_WIRE_T_WRITE:
    case XFER_WIRE_T_COMMIT:
    case XFER_WIRE_T_CANCEL:
    case XFER_WIRE_T_SUBSCRIBE:
    case XFER_WIRE_T_TAKE:
    case XFER_WIRE_T_RELEASE:
    case XFER_WIRE_T_STATUS:
        return true;
    default:
        return false;
    }
}

/* One decoded frame.  Returns false when the connection was closed (or is
 * closing). */
static bool handle(xd_conn *c, const xfer_wire_hdr *h, const xfer_wire_msg *m)
{
    bool needs_hello = h->type != XFER_WIRE_T_HELLO &&
                       h->type != XFER_WIRE_T_STATUS;
    if (!is_request(h->type) ||
        (h->type == XFER_WIRE_T_HELLO && c->hosted >= 0) ||
        (needs_hello && c->hosted < 0)) {
        bad_frame(c, XFER_WIRE_R_UNEXPECTED);
        return false;
    }
    switch (h->type) {
    case XFER_WIRE_T_HELLO:
        return on_hello(c, h->req, m);
    case XFER_WIRE_T_STATUS:
        on_status(c, h->req, m);
        return true;
    case XFER_WIRE_T_SUBSCRIBE: {
        c->subscribed = true;
        xfer_wire_msg a = {.type = XFER_WIRE_T_SUBSCRIBE_ACK};
        send_frame(c, &a, h->req);
        return true;
    }
    case XFER_WIRE_T_WRITE:
        return start_write(c, h->req, m);
    default:
        return on_op(c, h->req, m);
    }
}

/* Decode the next frame head from `in`.  Returns 1 with *h, *m when a frame
 * (for WRITE: its 48-byte head) was taken out, 0 when more bytes are
 * needed, -1 when the connection was closed for a bad frame. */
static int next_frame(xd_conn *c, struct evbuffer *in, xfer_wire_hdr *h,
                      xfer_wire_msg *m)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t have = evbuffer_get_length(in);
    if (have < XFER_WIRE_HDR)
        return 0;
    evbuffer_copyout(in, buf, XFER_WIRE_HDR);
    xfer_wire_reason why = XFER_WIRE_R_OK;
    if (xfer_wire_decode_hdr(buf, XFER_WIRE_HDR, h, &why) != 0) {
        bad_frame(c, why);
        return -1;
    }
    size_t need = XFER_WIRE_HDR + xfer_wire_body_size(h->type);
    if (have < need)
        return 0;
    evbuffer_remove(in, buf, need);
    if (xfer_wire_decode_body(h, buf + XFER_WIRE_HDR, need - XFER_WIRE_HDR,
                              m, &why) != 0) {
        bad_frame(c, why);
        return -1;
    }
    return 1;
}

static void on_read(struct bufferevent *bev, void *arg)
{
    xd_conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (!c->closing && !c->doomed) {
        if (c->in_write) {
            if (pump_write(c, in) == 0)
                break;
            continue;
        }
        xfer_wire_hdr h;
        xfer_wire_msg m;
        int rc = next_frame(c, in, &h, &m);
        if (rc <= 0 || !handle(c, &h, &m))
            return; /* need more, or c may be gone */
        if (evbuffer_get_length(bufferevent_get_output(bev)) > XD_OUT_HIGH) {
            c->paused = true; /* the peer does not read its replies */
            bufferevent_disable(bev, EV_READ);
            break;
        }
    }
}

static void on_write(struct bufferevent *bev, void *arg)
{
    xd_conn *c = arg;
    size_t out = evbuffer_get_length(bufferevent_get_output(bev));
    if (c->closing && out == 0) {
        close_conn(c);
        return;
    }
    if (c->paused && out <= XD_OUT_LOW) {
        c->paused = false;
        bufferevent_enable(bev, EV_READ);
        on_read(bev, c); /* frames may already be buffered */
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    xd_conn *c = arg;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    if (c->in_write || evbuffer_get_length(bufferevent_get_input(bev))) {
        bad_frame(c, XFER_WIRE_R_TRUNCATED); /* ended inside a frame */
        return;
    }
    close_conn(c);
}

/* Close connections marked doomed (from a callback of their own). */
static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    xd_server *s = arg;
    xd_conn *next;
    for (xd_conn *c = s->conns; c; c = next) {
        next = c->next;
        if (c->doomed)
            close_conn(c);
    }
}

/* ---------------------------------------------------------------------- */
/* Listening and draining                                                  */
/* ---------------------------------------------------------------------- */

static void on_accept(struct evconnlistener *lis, evutil_socket_t fd,
                      struct sockaddr *sa, int salen, void *arg)
{
    xd_server *s = arg;
    xd_conn *c = calloc(1, sizeof *c);
    struct bufferevent *bev =
        c ? bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
    if (!bev) {
        free(c);
        evutil_closesocket(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->srv = s;
    c->bev = bev;
    c->hosted = -1;
    c->serial = ++s->serial;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    bufferevent_set_max_single_read(bev, 64 << 10);
    bufferevent_set_max_single_write(bev, 1 << 20);
    bufferevent_setwatermark(bev, EV_WRITE, XD_OUT_LOW, 0);
    bufferevent_setcb(bev, on_read, on_write, on_event, c);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

static bool busy_state(xfer_resv_state st)
{
    return st == XFER_RESV_STATE_RESERVED || st == XFER_RESV_STATE_WRITING ||
           st == XFER_RESV_STATE_CANCEL_PENDING || st == XFER_RESV_STATE_EXPIRE_PENDING;
}

static void count_busy(void *ud, uint64_t id, uint32_t attempt,
                       xfer_resv_state st, uint64_t since_ns)
{
    *(uint64_t *)ud += busy_state(st);
}

bool xd_server_drained(const xd_server *s)
{
    uint64_t busy = 0;
    for (uint16_t i = 0; i < s->cfg.nshards; i++)
        xfer_shard_foreach(s->shards[i].sh, count_busy, &busy);
    for (const xd_conn *c = s->conns; c; c = c->next)
        busy += c->in_write;
    return busy == 0;
}

static void on_drain_tick(evutil_socket_t fd, short what, void *arg)
{
    xd_server *s = arg;
    if (xd_server_drained(s) || now_ns() >= s->drain_deadline) {
        struct timeval flush = {0, 100000}; /* let replies go out */
        event_del(s->drain_ev);
        event_base_loopexit(s->base, &flush);
    }
}

void xd_server_drain(xd_server *s)
{
    if (s->draining)
        return;
    s->draining = true;
    if (s->lis)
        evconnlistener_disable(s->lis);
    uint64_t t = s->cfg.drain_timeout_ns ? s->cfg.drain_timeout_ns
                                         : s->cfg.lease_ttl_ns;
    s->drain_deadline = now_ns() + t;
    struct timeval tick = {0, 20000};
    event_add(s->drain_ev, &tick);
}

uint16_t xd_server_port(const xd_server *s)
{
    return s->port;
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

/* Bind cfg->addr:port and learn the port actually bound. */
static int listen_on(xd_server *s)
{
    struct sockaddr_storage ss;
    int sl;
    if (make_addr(s->cfg.addr, s->cfg.port, &ss, &sl) != 0)
        return XFER_ERR_INVALID_ARG;
    s->lis = evconnlistener_new_bind(
        s->base, on_accept, s, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128,
        (struct sockaddr *)&ss, sl);
    if (!s->lis)
        return XFER_ERR_IO;
    socklen_t len = sizeof ss;
    if (getsockname(evconnlistener_get_fd(s->lis), (struct sockaddr *)&ss,
                    &len) != 0)
        return XFER_ERR_IO;
    s->port = ntohs(ss.ss_family == AF_INET6
                        ? ((struct sockaddr_in6 *)&ss)->sin6_port
                        : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

static int make_shards(xd_server *s)
{
    for (uint16_t i = 0; i < s->cfg.nshards; i++) {
        xfer_shard_config sc = {
            .version = XFER_SHARD_CONFIG_VERSION,
            .pool_bytes = s->cfg.pool_bytes,
            .max_reservations = s->cfg.max_resv,
            .max_tombstones = s->cfg.max_tombs,
            .lease_ttl_ns = s->cfg.lease_ttl_ns,
            .shard_index = s->cfg.shards[i],
        };
        s->shards[i].index = s->cfg.shards[i];
        int rc = xfer_shard_new(&sc, &s->shards[i].sh);
        if (rc)
            return rc;
        /* Fault the pool in now, as a registered (pinned) pool would be,
         * so no write pays for first-touch page faults. */
        memset(xfer_shard_pool_base(s->shards[i].sh), 0, s->cfg.pool_bytes);
    }
    return 0;
}

int xd_server_new(struct event_base *base, const xd_config *cfg,
                  xd_server **out)
{
    if (!base || !cfg || !out || !cfg->addr || cfg->nshards == 0 ||
        cfg->nshards > XFER_MAX_SHARDS)
        return XFER_ERR_INVALID_ARG;
    xd_server *s = calloc(1, sizeof *s);
    if (!s)
        return XFER_ERR_NOMEM;
    s->base = base;
    s->cfg = *cfg;
    s->rng = cfg->fault_seed ? cfg->fault_seed : 0x9e3779b97f4a7c15ull;
    int rc = XFER_ERR_NOMEM;
    s->timer = evtimer_new(base, on_timer, s);
    s->drain_ev = event_new(base, -1, EV_PERSIST, on_drain_tick, s);
    s->reap_ev = event_new(base, -1, 0, on_reap, s);
    if (!s->timer || !s->drain_ev || !s->reap_ev)
        goto out_fail;
    rc = make_shards(s);
    if (rc)
        goto out_fail;
    rc = listen_on(s);
    if (rc)
        goto out_fail;
    *out = s;
    return 0;
out_fail:
    xd_server_del(s);
    return rc;
}

/* The control socket's snapshot: open reservations, by real shard index
 * (tombstones are skipped by xfer_ctl_put_reservation).  A reply that runs
 * out of memory stops there, as xfer_ctl_shards_snapshot does. */
static void ctl_snapshot(void *ud, xfer_ctl_reply *rep)
{
    xd_server *s = ud;
    uint64_t now = now_ns();
    for (uint16_t i = 0; i < s->cfg.nshards; i++)
        if (xfer_ctl_put_shard(rep, s->shards[i].sh, s->shards[i].index,
                               now) != 0)
            return;
}

int xd_server_ctl_open(xd_server *s, const char *path)
{
    if (s->ctl)
        return XFER_ERR_EXISTS;
    return xfer_ctl_open(s->base, path, ctl_snapshot, s, &s->ctl);
}

void xd_server_del(xd_server *s)
{
    if (!s)
        return;
    xfer_ctl_close(s->ctl);
    while (s->conns)
        close_conn(s->conns);
    if (s->lis)
        evconnlistener_free(s->lis);
    if (s->timer)
        event_free(s->timer);
    if (s->drain_ev)
        event_free(s->drain_ev);
    if (s->reap_ev)
        event_free(s->reap_ev);
    for (uint16_t i = 0; i < s->cfg.nshards; i++)
        xfer_shard_del(s->shards[i].sh);
    free(s);
}
