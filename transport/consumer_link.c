/*
 * transport/consumer_link.c - the consumer's connection to one shard
 * server: connect, HELLO (role consumer) and SUBSCRIBE pipelined, then
 * EVENTs fed to the readiness machine and replies matched to the requests
 * that are outstanding; on loss, a reconnect after a jittered backoff.
 *
 * What must stay true:
 *  - peer input is never trusted: a frame the decoder refuses, a reply
 *    that is not the answer to the oldest outstanding request (the server
 *    answers in order), an event for another shard, or a TAKE_OK whose
 *    region does not fit the pool the server announced closes the link,
 *    counted; nothing is asserted;
 *  - a link is UP only after both HELLO_ACK and SUBSCRIBE_ACK came; only
 *    then are requests sent (xfer_consumer_link_send says false before);
 *  - when a link goes down, every take outstanding on it is answered
 *    CONN_LOST to the tracker (it may have been applied: the tracker
 *    releases it), then every id waiting is turned unavailable
 *    (consumer_ready.c), then the link callback runs;
 *  - every cancel and release the consumer accepted reaches the shard
 *    (issue 23 item 2): one made while the link is not up is queued on
 *    it, one outstanding when the link goes down is queued again (a
 *    repeat is harmless: both are idempotent on the shard), and the queue
 *    is sent, oldest first, when the link is up again; the application's
 *    cancels are sent once more to a shard that comes back, which may
 *    have restarted and forgotten them (consumer_ready.c);
 *  - every request sent is answered within request_timeout_ns (issue 24):
 *    the server answers in order, so one timer per link watches the
 *    oldest outstanding request (HELLO2 and SUBSCRIBE included), and a
 *    shard that leaves it unanswered with its socket open is taken down
 *    as lost, so no take and no handshake can hang an id for good;
 *  - reconnects back off (backoff.h): a link that breaks before it stayed
 *    up for reconnect_max_ns is redialled after a jittered, doubling
 *    delay, never at once.
 */
#include "consumer_int.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "addr.h"
#include "wire_frame.h"
#include "xfer/dir.h"
#include "xfer/shard.h"

#define REQ_HELLO 1u
#define REQ_SUBSCRIBE 2u

static void link_down(xfer_consumer_link *l, bool failed_connect);

/* ---------------------------------------------------------------------- */
/* Outstanding requests                                                    */
/* ---------------------------------------------------------------------- */

/* Append r to the FIFO (*arr, ring), growing it. */
static int fifo_push(xfer_consumer_link *l, xfer_consumer_req **arr,
                     xfer_ring *ring, const xfer_consumer_req *r)
{
    if (xfer_ring_full(ring)) {
        uint32_t cap = ring->cap ? 2 * ring->cap : 64;
        xfer_consumer_req *q =
            xfer_ring_grow(ring, *arr, sizeof *q, cap, &l->c->cfg.alloc);
        if (!q)
            return XFER_ERR_NOMEM;
        *arr = q;
    }
    (*arr)[xfer_ring_push(ring)] = *r;
    return 0;
}

/* Requests sent again on the next connection when unanswered. */
static bool owes_answer(uint8_t type)
{
    return type == XFER_WIRE_T_CANCEL || type == XFER_WIRE_T_RELEASE;
}

/* Requests a close waits for (a take's answer leads to a release). */
static bool counted(uint8_t type)
{
    return owes_answer(type) || type == XFER_WIRE_T_TAKE;
}

static uint64_t now_ns(const xfer_consumer_link *l)
{
    return xfer_consumer_now(l->c);
}

/* The oldest outstanding request's deadline, if the timer is idle (a
 * running timer already watches an older one). */
static void arm_req_timer(xfer_consumer_link *l, uint64_t delay_ns)
{
    if (evtimer_pending(l->req_timer, NULL))
        return;
    struct timeval tv = xfer_timer_delay(delay_ns);
    evtimer_add(l->req_timer, &tv);
}

static int q_push_req(xfer_consumer_link *l, const xfer_consumer_req *r)
{
    xfer_consumer_req s = *r;
    s.sent_ns = now_ns(l);
    int rc = fifo_push(l, &l->q, &l->qr, &s);
    if (rc)
        return rc;
    if (counted(r->type))
        l->owed++;
    arm_req_timer(l, l->c->cfg.request_timeout_ns);
    return 0;
}

static int q_push(xfer_consumer_link *l, uint32_t req, uint8_t type,
                  uint64_t id)
{
    xfer_consumer_req r = {.req = req, .type = type, .id = id};
    return q_push_req(l, &r);
}

static bool q_pop(xfer_consumer_link *l, xfer_consumer_req *out)
{
    if (xfer_ring_empty(&l->qr))
        return false;
    *out = l->q[xfer_ring_pop(&l->qr)];
    if (counted(out->type))
        l->owed--;
    return true;
}

uint32_t xfer_consumer_link_queued(const xfer_consumer_link *l)
{
    return l->pr.n;
}

bool xfer_consumer_link_idle(const xfer_consumer_link *l)
{
    return l->pr.n == 0 && l->owed == 0;
}

static int send_frame(xfer_consumer_link *l, const xfer_wire_msg *m,
                      uint32_t req)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t n = xfer_wire_encode(m, req, buf, sizeof buf);
    if (n == 0 || bufferevent_write(l->bev, buf, n) != 0)
        return XFER_ERR_IO;
    return 0;
}

bool xfer_consumer_link_send(xfer_consumer_link *l, uint8_t type,
                             uint64_t id, uint32_t attempt, uint64_t resv_id)
{
    if (l->state != XFER_CLINK_UP || l->broken)
        return false;
    uint32_t req = ++l->next_req;
    if (req <= REQ_SUBSCRIBE)
        req = l->next_req = REQ_SUBSCRIBE + 1;
    xfer_wire_msg m = {.type = type, .id = id, .attempt = attempt,
                       .resv_id = resv_id};
    xfer_consumer_req r = {.req = req, .type = type, .attempt = attempt,
                           .id = id, .resv_id = resv_id};
    if (q_push_req(l, &r) != 0 || send_frame(l, &m, req) != 0) {
        /* Taken down from the loop, not inside the caller's call. */
        l->broken = true;
        struct timeval now = {0, 0};
        evtimer_add(l->retry, &now);
        return false;
    }
    return true;
}

bool xfer_consumer_link_request(xfer_consumer_link *l, uint8_t type,
                                uint64_t id, uint32_t attempt,
                                uint64_t resv_id)
{
    /* Behind what is queued, so the shard sees requests in order. */
    if (xfer_ring_empty(&l->pr) &&
        xfer_consumer_link_send(l, type, id, attempt, resv_id))
        return true;
    xfer_consumer_req r = {.type = type, .attempt = attempt, .id = id,
                           .resv_id = resv_id};
    if (fifo_push(l, &l->p, &l->pr, &r) != 0) {
        l->c->st.requests_dropped++;
        return false;
    }
    return true;
}

/* The link is up: send what was queued, oldest first. */
static void flush_queued(xfer_consumer_link *l)
{
    while (!xfer_ring_empty(&l->pr) && l->state == XFER_CLINK_UP &&
           !l->broken) {
        xfer_consumer_req r = l->p[xfer_ring_slot(&l->pr, 0)];
        if (!xfer_consumer_link_send(l, r.type, r.id, r.attempt, r.resv_id))
            return; /* broken: it stays queued for the next connection */
        xfer_ring_pop(&l->pr);
    }
}

/* The link went down: its cancels and releases not answered go back to
 * the front of the queue, in the order they were sent. */
static void requeue_unanswered(xfer_consumer_link *l)
{
    xfer_consumer_req *arr = NULL;
    xfer_ring ring;
    xfer_ring_init(&ring, 0);
    bool ok = true;
    for (uint32_t i = 0; i < l->qr.n; i++) {
        const xfer_consumer_req *r = &l->q[xfer_ring_slot(&l->qr, i)];
        if (owes_answer(r->type)) {
            xfer_consumer_req u = *r;
            u.req = 0;
            ok = ok && fifo_push(l, &arr, &ring, &u) == 0;
        }
    }
    if (ring.n == 0 || !ok) {
        if (!ok)
            l->c->st.requests_dropped += ring.n;
        xfer_consumer_free(l->c, arr);
        return;
    }
    for (uint32_t i = 0; ok && i < l->pr.n; i++)
        ok = fifo_push(l, &arr, &ring, &l->p[xfer_ring_slot(&l->pr, i)]) == 0;
    if (!ok) { /* keep the old queue; what was outstanding is lost */
        l->c->st.requests_dropped += ring.n;
        xfer_consumer_free(l->c, arr);
        return;
    }
    l->c->st.requests_resent += ring.n - l->pr.n;
    xfer_consumer_free(l->c, l->p);
    l->p = arr;
    l->pr = ring;
}

/* ---------------------------------------------------------------------- */
/* Frames from the server                                                  */
/* ---------------------------------------------------------------------- */

static bool on_event(xfer_consumer_link *l, const xfer_wire_msg *m)
{
    xfer_consumer *c = l->c;
    if (m->shard != l->shard)
        return false;
    c->st.events++;
    if (m->kind == XFER_SHARD_EV_READY) {
        c->st.ready_events++;
        xfer_consumer_on_ready(c, l->shard, m->id, m->attempt, m->resv_id);
        if (m->crc_set && c->check)
            xfer_consumer_note_crc(c, l->shard, m->id, m->attempt, m->crc);
    } else {
        c->st.ended_events++;
        xfer_consumer_on_ended(c, l->shard, m->id, m->attempt,
                               m->kind == XFER_SHARD_EV_EXPIRED
                                   ? XFER_ERR_EXPIRED
                                   : XFER_ERR_CANCELLED);
    }
    return true;
}

/* The shard's CHALLENGE to our HELLO2: check its proof, answer AUTH, and
 * only then SUBSCRIBE (the shard serves nothing before the AUTH). */
static bool on_challenge(xfer_consumer_link *l, const xfer_wire_hdr *h,
                         const xfer_wire_msg *m)
{
    xfer_consumer *c = l->c;
    xfer_wire_msg a, sub = {.type = XFER_WIRE_T_SUBSCRIBE};
    if (l->state != XFER_CLINK_HELLO || h->req != REQ_HELLO ||
        l->challenged ||
        xfer_auth_answer(c->secret, c->secret_len, &l->hello, m, &a) != 0)
        return false;
    l->challenged = true;
    return send_frame(l, &a, REQ_HELLO) == 0 &&
           send_frame(l, &sub, REQ_SUBSCRIBE) == 0;
}

/* The handshake's replies: HELLO_ACK then SUBSCRIBE_ACK. */
static bool on_handshake(xfer_consumer_link *l, const xfer_wire_hdr *h,
                         const xfer_wire_msg *m, const xfer_consumer_req *r)
{
    if (r->req == REQ_HELLO && h->type == XFER_WIRE_T_HELLO_ACK) {
        /* With a secret, a shard that did not prove it knows it is
         * refused. */
        if (m->shard != l->shard || m->group != l->c->cfg.group ||
            (l->c->secret_len && !l->challenged))
            return false;
        l->pool_bytes = m->pool_bytes;
        return true;
    }
    if (r->req == REQ_SUBSCRIBE && h->type == XFER_WIRE_T_SUBSCRIBE_ACK) {
        xfer_consumer *c = l->c;
        l->state = XFER_CLINK_UP;
        xfer_backoff_up(&l->bo, now_ns(l));
        c->st.connects++;
        xfer_consumer_cancels_replay(c, l->shard);
        flush_queued(l);
        xfer_consumer_close_check(c);
        if (c->cfg.link && !c->closing)
            c->cfg.link(c->cfg.ud, l->shard, true);
        return true;
    }
    return false; /* an ERROR (refused HELLO) or anything else */
}

/* A reply to the oldest outstanding request. */
static bool on_reply(xfer_consumer_link *l, const xfer_wire_hdr *h,
                     const xfer_wire_msg *m)
{
    xfer_consumer *c = l->c;
    xfer_consumer_req r;
    if (!q_pop(l, &r) || r.req != h->req)
        return false;
    if (r.req <= REQ_SUBSCRIBE)
        return on_handshake(l, h, m, &r);
    bool err = h->type == XFER_WIRE_T_ERROR;
    if (err) {
        c->st.errors_received++;
        if (m->req_type != r.type)
            return false;
    }
    if (r.type == XFER_WIRE_T_TAKE) {
        if (err) {
            xfer_consumer_on_take(c, l->shard, r.id, m->code ? m->code
                                                             : XFER_ERR_REMOTE,
                                  0, 0);
            return true;
        }
        if (h->type != XFER_WIRE_T_TAKE_OK || m->id != r.id ||
            m->addr > l->pool_bytes || m->len > l->pool_bytes - m->addr)
            return false;
        xfer_consumer_on_take(c, l->shard, r.id, 0, m->addr, m->len);
        return true;
    }
    uint8_t ack = r.type == XFER_WIRE_T_RELEASE ? XFER_WIRE_T_RELEASE_ACK
                                                : XFER_WIRE_T_CANCEL_ACK;
    if (!err && h->type != ack)
        return false;
    if (r.type == XFER_WIRE_T_CANCEL)
        xfer_consumer_cancel_answered(c, l->shard, r.id, !err);
    xfer_consumer_close_check(c);
    return true;
}

/* One decoded frame: false means bad input (close the link). */
static bool on_frame(xfer_consumer_link *l, const xfer_wire_hdr *h,
                     const xfer_wire_msg *m)
{
    if (h->type == XFER_WIRE_T_EVENT)
        return l->state == XFER_CLINK_UP && on_event(l, m);
    if (h->type == XFER_WIRE_T_CHALLENGE)
        return on_challenge(l, h, m);
    switch (h->type) {
    case XFER_WIRE_T_HELLO_ACK:
    case XFER_WIRE_T_SUBSCRIBE_ACK:
    case XFER_WIRE_T_TAKE_OK:
    case XFER_WIRE_T_RELEASE_ACK:
    case XFER_WIRE_T_CANCEL_ACK:
    case XFER_WIRE_T_ERROR:
        return on_reply(l, h, m);
    default:
        return false;
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    xfer_consumer_link *l = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (l->bev == bev) {
        xfer_wire_hdr h;
        xfer_wire_msg m;
        xfer_wire_reason why;
        int rc = xfer_wire_frame_cut(in, &h, &m, &why);
        if (rc == 0)
            return;
        if (rc < 0 || h.type == XFER_WIRE_T_WRITE || !on_frame(l, &h, &m))
            goto bad;
    }
    return;
bad:
    if (l->bev != bev)
        return; /* already taken down while handling the frame */
    l->c->st.bad_frames++;
    link_down(l, false);
}

/* ---------------------------------------------------------------------- */
/* Connecting                                                              */
/* ---------------------------------------------------------------------- */

static void start_connect(xfer_consumer_link *l);

/* The oldest request's deadline: a shard that has not answered it by then
 * is taken down as lost (its socket may stay open for ever). */
static void on_req_timer(evutil_socket_t fd, short what, void *arg)
{
    xfer_consumer_link *l = arg;
    if (xfer_ring_empty(&l->qr) || !l->bev)
        return;
    const xfer_consumer_req *r = &l->q[xfer_ring_slot(&l->qr, 0)];
    uint64_t due = r->sent_ns + l->c->cfg.request_timeout_ns, now = now_ns(l);
    if (now < due) {
        arm_req_timer(l, due - now);
        return;
    }
    l->c->st.request_timeouts++;
    link_down(l, false);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    xfer_consumer_link *l = arg;
    if (l->broken) {
        l->broken = false;
        link_down(l, false);
        return;
    }
    if (l->gone)
        return; /* the directory names no address for it now */
    start_connect(l);
}

/* The handshake, pipelined: HELLO2 and SUBSCRIBE at once; with a secret,
 * SUBSCRIBE waits for the AUTH (on_challenge). */
static void on_connected(xfer_consumer_link *l)
{
    xfer_consumer *c = l->c;
    int one = 1;
    setsockopt(bufferevent_getfd(l->bev), IPPROTO_TCP, TCP_NODELAY, &one,
               sizeof one);
    l->state = XFER_CLINK_HELLO;
    bufferevent_set_timeouts(l->bev, NULL, NULL);
    xfer_wire_msg sub = {.type = XFER_WIRE_T_SUBSCRIBE};
    l->challenged = false;
    if (xfer_auth_hello(&l->hello, XFER_WIRE_ROLE_CONSUMER, c->cfg.group,
                        l->shard, c->session) != 0 ||
        q_push(l, REQ_HELLO, XFER_WIRE_T_HELLO2, 0) != 0 ||
        q_push(l, REQ_SUBSCRIBE, XFER_WIRE_T_SUBSCRIBE, 0) != 0 ||
        send_frame(l, &l->hello, REQ_HELLO) != 0 ||
        (!c->secret_len && send_frame(l, &sub, REQ_SUBSCRIBE) != 0))
        link_down(l, false);
}

static void on_bev_event(struct bufferevent *bev, short what, void *arg)
{
    xfer_consumer_link *l = arg;
    if (what & BEV_EVENT_CONNECTED) {
        on_connected(l);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
        link_down(l, l->state == XFER_CLINK_CONNECTING);
}

static void start_connect(xfer_consumer_link *l)
{
    xfer_consumer *c = l->c;
    /* Not BEV_OPT_DEFER_CALLBACKS: a deferred callback holds a reference
     * on the bufferevent until the loop runs it, so one still queued when
     * the application leaves its loop and deletes the consumer (say the
     * loop was broken from another link's callback) would keep its socket
     * open and its buffers for ever.  Our callbacks already run from the
     * loop, never inside a call of the application's. */
    l->bev = bufferevent_socket_new(c->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!l->bev) {
        link_down(l, true);
        return;
    }
    l->state = XFER_CLINK_CONNECTING;
    c->st.reconnects += l->dialled;
    l->dialled = true;
    xfer_ring_reset(&l->qr);
    l->owed = 0;
    l->next_req = REQ_SUBSCRIBE;
    bufferevent_setcb(l->bev, on_read, NULL, on_bev_event, l);
    struct timeval tv = xfer_timer_delay(c->cfg.connect_timeout_ns);
    bufferevent_set_timeouts(l->bev, &tv, &tv);
    bufferevent_enable(l->bev, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(l->bev, (struct sockaddr *)&l->sa,
                                   l->salen) != 0)
        link_down(l, true);
}

/* The link is gone: answer its outstanding takes, end the ids that waited
 * on it, tell the application, and come back after the backoff. */
static void link_down(xfer_consumer_link *l, bool failed_connect)
{
    xfer_consumer *c = l->c;
    bool was_up = l->state == XFER_CLINK_UP;
    if (l->bev)
        bufferevent_free(l->bev);
    l->bev = NULL;
    l->state = XFER_CLINK_DOWN;
    /* The ids waiting first (so a record that is taking ends CONN_LOST),
     * then the takes outstanding here. */
    if (was_up)
        xfer_consumer_on_link_lost(c, l->shard);
    requeue_unanswered(l);
    xfer_consumer_req r;
    while (q_pop(l, &r))
        if (r.type == XFER_WIRE_T_TAKE)
            xfer_consumer_on_take(c, l->shard, r.id, XFER_ERR_CONN_LOST, 0,
                                  0);
    if (was_up) {
        c->st.losses++;
        if (c->cfg.link && !c->closing)
            c->cfg.link(c->cfg.ud, l->shard, false);
    } else if (failed_connect) {
        c->st.connect_failures++;
    }
    evtimer_del(l->req_timer);
    struct timeval tv = xfer_timer_delay(
        xfer_backoff_lost(&l->bo, now_ns(l), c->cfg.reconnect_min_ns,
                          c->cfg.reconnect_max_ns));
    evtimer_add(l->retry, &tv);
    /* The takes it answered may have been all a close waited for. */
    xfer_consumer_close_check(c);
}

int xfer_consumer_link_init(xfer_consumer *c, uint16_t k, const char *addr)
{
    xfer_consumer_link *l = &c->links[k];
    l->c = c;
    l->shard = k;
    l->salen = (int)sizeof l->sa;
    l->gone = !addr; /* the directory gives it one later */
    if (addr && xfer_addr_resolve(addr, &l->sa, &l->salen) != 0)
        return XFER_ERR_INVALID_ARG;
    uint8_t seed[sizeof c->session + 2];
    memcpy(seed, c->session, sizeof c->session);
    seed[sizeof c->session] = (uint8_t)k;
    seed[sizeof c->session + 1] = (uint8_t)(k >> 8);
    xfer_backoff_init(&l->bo, seed, sizeof seed);
    l->retry = evtimer_new(c->base, on_retry, l);
    l->req_timer = evtimer_new(c->base, on_req_timer, l);
    if (!l->retry || !l->req_timer)
        return XFER_ERR_IO;
    if (!l->gone)
        start_connect(l);
    return 0;
}

/* The directory reports shard `shard` of our group: dial a new address at
 * once (a link up elsewhere goes down as lost first); a gone shard's link
 * goes down and is not redialled until it registers again.  Runs from the
 * directory's callback on the loop, never inside an application call. */
void xfer_consumer_on_member(void *ud, const char *group, uint16_t shard,
                             const xfer_dir_entry *e)
{
    xfer_consumer *c = ud;
    if (shard >= c->cfg.nshards || c->closing)
        return;
    xfer_consumer_link *l = &c->links[shard];
    struct sockaddr_storage sa;
    int salen = 0;
    char addr[XFER_DIR_ADDR_MAX + 16];
    if (e && (e->transports & XFER_DIR_TCP)) {
        snprintf(addr, sizeof addr, strchr(e->addr, ':') ? "[%s]:%u" : "%s:%u",
                 e->addr, (unsigned)e->port);
        if (xfer_addr_resolve(addr, &sa, &salen) != 0)
            e = NULL; /* unusable: as gone */
    } else {
        e = NULL;
    }
    if (e && !l->gone && salen == l->salen &&
        !memcmp(&sa, &l->sa, (size_t)salen))
        return; /* the same place: nothing moved */
    if (l->bev || l->state != XFER_CLINK_DOWN)
        link_down(l, false);
    evtimer_del(l->retry);
    l->gone = !e;
    if (!e)
        return;
    l->sa = sa;
    l->salen = salen;
    start_connect(l);
}

void xfer_consumer_link_clear(xfer_consumer_link *l)
{
    if (!l->c)
        return;
    if (l->bev)
        bufferevent_free(l->bev);
    if (l->retry)
        event_free(l->retry);
    if (l->req_timer)
        event_free(l->req_timer);
    xfer_consumer_free(l->c, l->q);
    xfer_consumer_free(l->c, l->p);
    memset(l, 0, sizeof *l);
}
