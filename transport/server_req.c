/*
 * transport/server_req.c - the shard server's requests (HELLO and its kin
 * are server_sess.c's): STATUS reports counters, RESERVE, COMMIT,
 * CANCEL, TAKE and RELEASE go to the connection's shard, SUBSCRIBE turns
 * on its events, and a streamed WRITE begins and ends here.
 *
 * What must stay true:
 *  - a well-formed request the shard refuses gets an ERROR with the
 *    shard's code, and the connection stays; so does one its role may not
 *    make (XFER_ERR_PERM: role_may); every op acts for the connection's
 *    session (its owner number on the shard);
 *  - the shard's pending events are published (server_events.c) before an
 *    op's reply is queued, so a subscriber sees READY no later than the
 *    producer sees the COMMIT_ACK's bytes leave;
 *  - injected faults (fault_ppm, drop_ppm: tests only) are drawn only for
 *    producer-side ops (a connection whose HELLO did not say consumer), so
 *    a consumer connection is never dropped by the fault mix;
 *  - a take is recorded with its taker (server_events.c), and a release
 *    clears it, whichever consumer connection sends it;
 *  - an EAGER is applied whole by the shard (xfer_shard_eager) or refused
 *    whole, its data (all in the input buffer: xfer_wire_frame_cut) is
 *    consumed either way, and its READY event is published before its
 *    EAGER_OK, as a commit's before its COMMIT_ACK;
 *  - a SUBSCRIBE is answered first, then followed by a READY event for
 *    every reservation already READY on the shard, so a consumer that
 *    (re)connects misses no data that is waiting for it.
 */
#include "server_int.h"

#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "server_rdma.h"

/* ---------------------------------------------------------------------- */
/* Replies and faults                                                      */
/* ---------------------------------------------------------------------- */

void xfer_server_req_error(xfer_server_conn *c, uint32_t req, uint8_t type,
                           const xfer_wire_msg *m, int32_t code)
{
    xfer_wire_msg e = {.type = XFER_WIRE_T_ERROR, .code = code,
                       .req_type = type, .id = m->id, .attempt = m->attempt,
                       .shard = c->hosted >= 0
                                    ? c->srv->shards[c->hosted].index
                                    : XFER_WIRE_SHARD_ALL};
    c->srv->errors_sent++;
    xfer_server_conn_send(c, &e, req);
}

/* Answer an op: ack of `ack` type echoing m, or ERROR with rc. */
static void answer(xfer_server_conn *c, uint32_t req, const xfer_wire_msg *m,
                   uint8_t ack, int32_t rc)
{
    if (rc) {
        xfer_server_req_error(c, req, m->type, m, rc);
        return;
    }
    xfer_wire_msg a = *m;
    a.type = ack;
    xfer_server_conn_send(c, &a, req);
}

static uint64_t rnd(xfer_server *s)
{
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return s->rng * 0x2545f4914f6cdd1dull;
}

/* A seeded fault for one op of connection c: drop the connection
 * (drop_ppm), or refuse / apply-but-report-failure, half each
 * (fault_ppm). */
static uint8_t draw_fault(xfer_server_conn *c)
{
    xfer_server *s = c->srv;
    if (c->role == XFER_WIRE_ROLE_CONSUMER)
        return XFER_SERVER_F_NONE;
    if (s->cfg.drop_ppm && rnd(s) % 1000000u < s->cfg.drop_ppm) {
        s->faults++;
        return XFER_SERVER_F_DROP;
    }
    if (!s->cfg.fault_ppm || rnd(s) % 1000000u >= s->cfg.fault_ppm)
        return XFER_SERVER_F_NONE;
    s->faults++;
    return (uint8_t)(XFER_SERVER_F_FAIL + rnd(s) % 2);
}

int xfer_server_find_shard(const xfer_server *s, uint16_t index)
{
    for (int i = 0; i < (int)s->cfg.nshards; i++)
        if (s->shards[i].index == index)
            return i;
    return -1;
}

/* ---------------------------------------------------------------------- */
/* HELLO, STATUS, SUBSCRIBE                                                */
/* ---------------------------------------------------------------------- */

/* The counters a STATUS_OK carries: of hosted shard `idx`, or of every
 * hosted shard summed (idx < 0). */
static void fill_status(const xfer_server *s, int idx, xfer_wire_status *st)
{
    xfer_server_stats ss;
    xfer_server_stats_get(s, idx < 0 ? XFER_SHARD_NONE : s->shards[idx].index,
                          &ss);
    *st = (xfer_wire_status){
        .shard = idx < 0 ? XFER_WIRE_SHARD_ALL : s->shards[idx].index,
        .nshards = s->cfg.nshards, .conns = s->conns.n,
        .pool_bytes = ss.pool_bytes, .bytes_in_use = ss.bytes_in_use,
        .live = ss.live, .tombstones = ss.tombstones,
        .reserves = ss.reserves, .refused = ss.refused, .writes = ss.writes,
        .commits = ss.commits, .cancels = ss.cancels,
        .expiries = ss.expiries, .bad_frames = ss.bad_frames,
        .errors_sent = ss.errors_sent, .events_sent = ss.events_sent,
        .write_bytes = ss.write_bytes};
}

static void on_status(xfer_server_conn *c, uint32_t req,
                      const xfer_wire_msg *m)
{
    int idx = -1;
    if (m->shard != XFER_WIRE_SHARD_ALL) {
        idx = xfer_server_find_shard(c->srv, m->shard);
        if (idx < 0) {
            xfer_server_req_error(c, req, m->type, m, XFER_ERR_NOT_FOUND);
            return;
        }
    }
    xfer_wire_msg a = {.type = XFER_WIRE_T_STATUS_OK};
    fill_status(c->srv, idx, &a.st);
    xfer_server_conn_send(c, &a, req);
}

/* The whole server's refusals: bad frames by reason, and the rest. */
static void on_status_bad(xfer_server_conn *c, uint32_t req)
{
    xfer_server_stats ss;
    xfer_server_stats_get(c->srv, XFER_SHARD_NONE, &ss);
    xfer_wire_msg a = {.type = XFER_WIRE_T_STATUS_BAD_OK};
    a.bad.n = XFER_WIRE_BAD_SLOTS;
    memcpy(a.bad.by_reason, ss.bad_by_reason, sizeof a.bad.by_reason);
    a.bad.auth_failed = ss.auth_failed;
    a.bad.conns_refused = ss.conns_refused;
    a.bad.timeouts = ss.timeouts;
    a.bad.writes_stalled = ss.writes_stalled;
    a.bad.subs_dropped = ss.subs_dropped;
    xfer_server_conn_send(c, &a, req);
}

/* ---------------------------------------------------------------------- */
/* Control ops                                                             */
/* ---------------------------------------------------------------------- */

static int32_t do_take(xfer_server_conn *c, xfer_server_hosted *hs,
                       uint64_t t, const xfer_wire_msg *m, xfer_wire_msg *a)
{
    const uint8_t *data = NULL;
    a->type = XFER_WIRE_T_TAKE_OK;
    int rc = xfer_shard_take(hs->sh, t, m->id, m->resv_id, &data, &a->len);
    if (rc == 0) {
        a->addr = (uint64_t)(data - xfer_shard_pool_base(hs->sh));
        xfer_server_track_taken(c->srv, hs, m->id, c->owner);
    }
    return rc;
}

/* May c's role send op `type` (attempt: a CANCEL's)?  A producer
 * reserves, writes, commits and cancels its own attempts; a consumer
 * takes, releases and cancels as the consumer (any attempt, any
 * session's record); an admin only asks for STATUS. */
static bool role_may(const xfer_server_conn *c, uint8_t type,
                     uint32_t attempt)
{
    bool consumer = c->role == XFER_WIRE_ROLE_CONSUMER;
    switch (type) {
    case XFER_WIRE_T_RESERVE:
    case XFER_WIRE_T_WRITE:
    case XFER_WIRE_T_COMMIT:
    case XFER_WIRE_T_EAGER:
        return c->role == XFER_WIRE_ROLE_PRODUCER;
    case XFER_WIRE_T_CANCEL:
        return consumer || (c->role == XFER_WIRE_ROLE_PRODUCER && attempt);
    case XFER_WIRE_T_TAKE:
    case XFER_WIRE_T_RELEASE:
    case XFER_WIRE_T_SUBSCRIBE:
        return consumer;
    default:
        return false;
    }
}

/* The peer quota (server_sess.c) before an op that would hold something
 * new: a reserve or eager op (a record and its tombstone slot) or a
 * cancel (a tombstone) of an id the shard does not hold yet.  An op on an
 * id held already takes nothing new, so it is never refused for it; nor
 * is a region larger than the pool, which the shard refuses NO_SPACE
 * whoever asks (the answer a producer acts on: it can never fit). */
static int32_t peer_room(xfer_server_conn *c, xfer_server_hosted *hs,
                         const xfer_wire_msg *m, bool record)
{
    if (xfer_shard_state(hs->sh, m->id) != XFER_RESV_STATE_NONE ||
        (record && m->len > c->srv->shard_cfg[c->hosted].len))
        return 0;
    return xfer_server_peer_room(c, hs, record ? m->len : 0, record);
}

/* Apply a control op to the connection's shard; fills the ack. */
static int32_t apply(xfer_server_conn *c, const xfer_wire_msg *m,
                     xfer_wire_msg *a)
{
    xfer_server_hosted *hs = &c->srv->shards[c->hosted];
    uint64_t t = xfer_server_now(c->srv);
    int rc;
    *a = *m;
    switch (m->type) {
    case XFER_WIRE_T_RESERVE: {
        if (c->srv->draining)
            return XFER_ERR_SHUTDOWN;
        xfer_resv_info info;
        rc = peer_room(c, hs, m, true);
        if (rc == 0)
            rc = xfer_shard_reserve_by(hs->sh, t, c->owner, m->id,
                                       m->attempt, m->len, &info);
        a->type = XFER_WIRE_T_RESERVE_OK;
        a->resv_id = rc ? 0 : info.resv_id;
        a->addr = rc ? 0 : info.addr;
        a->rkey = 0;
        int brc = rc == 0 && c->srv->rdma
                      ? xfer_server_rdma_bind(c->srv->rdma, hs, c, m->id,
                                              info.resv_id, info.addr,
                                              m->len, &a->rkey)
                      : 0;
        if (brc != 0) {
            /* no rkey, no reservation: give the region back, as the
             * session that reserved it (its quota, its tombstone) */
            xfer_shard_cancel_by(hs->sh, t, c->owner, m->id, m->attempt,
                                 info.resv_id);
            rc = brc;
        }
        if (rc == 0)
            xfer_server_track_reserved(c->srv, hs, m->id, m->attempt,
                                       info.resv_id, m->len);
        return rc;
    }
    case XFER_WIRE_T_COMMIT:
        a->type = XFER_WIRE_T_COMMIT_ACK;
        return xfer_shard_commit_by(hs->sh, t, c->owner, m->id, m->attempt,
                                    m->resv_id);
    case XFER_WIRE_T_CANCEL:
        a->type = XFER_WIRE_T_CANCEL_ACK;
        rc = peer_room(c, hs, m, false);
        if (rc)
            return rc;
        /* The consumer's cancel, of one attempt or of any (0), applies
         * to whoever made the record and its tombstone blocks every
         * reserve; a tombstone it makes anew is its session's to pay
         * for (issue 24: one of attempt 1 was nobody's, and filled the
         * table). */
        if (c->role == XFER_WIRE_ROLE_CONSUMER)
            return xfer_shard_cancel_consumer_by(hs->sh, t, c->owner, m->id,
                                                 m->attempt, m->resv_id);
        return xfer_shard_cancel_by(hs->sh, t, c->owner, m->id, m->attempt,
                                    m->resv_id);
    case XFER_WIRE_T_TAKE:
        return do_take(c, hs, t, m, a);
    case XFER_WIRE_T_RELEASE:
        a->type = XFER_WIRE_T_RELEASE_ACK;
        rc = xfer_shard_release(hs->sh, t, m->id, m->resv_id);
        if (rc == 0)
            xfer_server_track_released(c->srv, hs, m->id);
        return rc;
    default:
        return XFER_ERR_INTERNAL;
    }
}

/* A control op, with an injected fault if one is drawn.  Returns false when
 * the connection was closed. */
/* The end of an op (a control op or an EAGER): the seeded fault drawn for
 * it (an applied op reported failed, or the connection dropped), the
 * events it made out before its reply (a READY before the commit's OK),
 * then the reply a (rc 0) or the error.  False: the connection is gone. */
static bool end_op(xfer_server_conn *c, uint32_t req, const xfer_wire_msg *m,
                   uint8_t fault, int32_t rc, const xfer_wire_msg *a)
{
    if (fault == XFER_SERVER_F_APPLIED_LOST)
        rc = XFER_ERR_REMOTE;
    xfer_server_flush_all(c->srv);
    if (fault == XFER_SERVER_F_DROP) {
        xfer_server_log(c->srv, c->serial, "fault: connection dropped");
        xfer_server_conn_close(c);
        return false;
    }
    if (rc)
        xfer_server_req_error(c, req, m->type, m, rc);
    else
        xfer_server_conn_send(c, a, req);
    return true;
}

static bool on_op(xfer_server_conn *c, uint32_t req, const xfer_wire_msg *m)
{
    bool control = m->type != XFER_WIRE_T_TAKE &&
                   m->type != XFER_WIRE_T_RELEASE;
    if (!role_may(c, m->type, m->attempt)) {
        xfer_server_req_error(c, req, m->type, m, XFER_ERR_PERM);
        return true;
    }
    uint8_t fault = control ? draw_fault(c) : XFER_SERVER_F_NONE;
    xfer_wire_msg a;
    int32_t rc = fault == XFER_SERVER_F_FAIL ? XFER_ERR_REMOTE
                                              : apply(c, m, &a);
    if (fault == XFER_SERVER_F_FAIL)
        a = *m;
    return end_op(c, req, m, fault, rc, &a);
}

/* ---------------------------------------------------------------------- */
/* Streamed writes                                                         */
/* ---------------------------------------------------------------------- */

void xfer_server_req_end_write(xfer_server_conn *c, bool ok)
{
    xfer_server_hosted *hs = &c->srv->shards[c->hosted];
    int rc = 0;
    if (c->dst)
        rc = xfer_shard_write_end(hs->sh, xfer_server_now(c->srv), c->wm.id,
                                  c->wm.resv_id, ok);
    c->in_write = false;
    c->dst = NULL;
    if (ok)
        hs->write_bytes += c->wm.len;
    if (c->wrc == 0)
        c->wrc = rc;
}

void xfer_server_req_finish_write(xfer_server_conn *c)
{
    xfer_server_req_end_write(c, true);
    if (c->wfault == XFER_SERVER_F_APPLIED_LOST && c->wrc == 0)
        c->wrc = XFER_ERR_REMOTE;
    answer(c, c->wreq, &c->wm, XFER_WIRE_T_WRITE_ACK, c->wrc);
    xfer_server_flush_all(c->srv);
}

/* The head of a WRITE is in: begin it on the shard (or decide to skip its
 * data and answer an error).  Returns false when the connection closed. */
static bool start_write(xfer_server_conn *c, uint32_t req,
                        const xfer_wire_msg *m)
{
    xfer_shard *sh = c->srv->shards[c->hosted].sh;
    c->in_write = true;
    c->wreq = req;
    c->wm = *m;
    c->wgot = 0;
    c->w_win_ns = xfer_server_now(c->srv);
    c->w_win_got = 0;
    c->dst = NULL;
    c->wrc = 0;
    bool may = role_may(c, m->type, m->attempt);
    c->wfault = may ? draw_fault(c) : XFER_SERVER_F_NONE;
    if (!may) {
        c->wrc = XFER_ERR_PERM; /* its data is skipped */
    } else if (c->wfault == XFER_SERVER_F_FAIL) {
        c->wrc = XFER_ERR_REMOTE;
    } else {
        uint8_t *dst = NULL;
        int rc = xfer_shard_write_begin_by(sh, xfer_server_now(c->srv),
                                           c->owner, m->id, m->attempt,
                                           m->resv_id, m->off, m->len, &dst);
        if (rc == 0)
            c->dst = dst ? dst : (uint8_t *)"";
        c->wrc = rc;
    }
    if (c->wfault == XFER_SERVER_F_DROP) {
        xfer_server_log(c->srv, c->serial,
                        "fault: connection dropped mid-write");
        xfer_server_conn_close(c);
        return false;
    }
    if (m->len == 0)
        xfer_server_req_finish_write(c);
    return true;
}

/* ---------------------------------------------------------------------- */
/* The eager path                                                          */
/* ---------------------------------------------------------------------- */

/* Apply an EAGER whose data (m->len bytes) is at the front of `in`:
 * reserve, copy and commit in one shard step.  0 fills *a (EAGER_OK). */
static int32_t apply_eager(xfer_server_conn *c, const xfer_wire_msg *m,
                           struct evbuffer *in, xfer_wire_msg *a)
{
    xfer_server_hosted *hs = &c->srv->shards[c->hosted];
    if (c->srv->draining)
        return XFER_ERR_SHUTDOWN;
    const uint8_t *data = m->len ? evbuffer_pullup(in, m->len) : NULL;
    if (m->len && !data)
        return XFER_ERR_NOMEM;
    xfer_resv_info info;
    int rc = peer_room(c, hs, m, true);
    if (rc == 0)
        rc = xfer_shard_eager_by(hs->sh, xfer_server_now(c->srv), c->owner,
                                 m->id, m->attempt,
                                 data ? data : (const uint8_t *)"", m->len,
                                 &info);
    if (rc)
        return rc;
    xfer_server_track_reserved(c->srv, hs, m->id, m->attempt, info.resv_id,
                               m->len);
    hs->write_bytes += m->len;
    *a = (xfer_wire_msg){.type = XFER_WIRE_T_EAGER_OK, .id = m->id,
                         .attempt = m->attempt, .len = m->len,
                         .resv_id = info.resv_id, .addr = info.addr};
    return 0;
}

/* An EAGER, with an injected fault if one is drawn (as on_op's).  Its
 * data is consumed whatever the answer.  Returns false when the
 * connection was closed. */
static bool on_eager(xfer_server_conn *c, uint32_t req, const xfer_wire_msg *m)
{
    struct evbuffer *in = c->in;
    bool may = role_may(c, m->type, m->attempt);
    uint8_t fault = may ? draw_fault(c) : XFER_SERVER_F_NONE;
    xfer_wire_msg a;
    int32_t rc = !may                         ? XFER_ERR_PERM
                 : fault == XFER_SERVER_F_FAIL ? XFER_ERR_REMOTE
                                               : apply_eager(c, m, in, &a);
    evbuffer_drain(in, m->len);
    return end_op(c, req, m, fault, rc, &a);
}

/* ---------------------------------------------------------------------- */
/* Dispatch                                                                */
/* ---------------------------------------------------------------------- */

bool xfer_server_req_handle(xfer_server_conn *c, const xfer_wire_hdr *h,
                            const xfer_wire_msg *m)
{
    switch (h->type) {
    case XFER_WIRE_T_HELLO:
    case XFER_WIRE_T_HELLO2:
    case XFER_WIRE_T_AUTH:
        return xfer_server_sess_hello(c, h, m);
    case XFER_WIRE_T_STATUS:
        on_status(c, h->req, m);
        return true;
    case XFER_WIRE_T_STATUS_BAD:
        on_status_bad(c, h->req);
        return true;
    case XFER_WIRE_T_SUBSCRIBE: {
        if (!role_may(c, h->type, 0)) {
            xfer_server_req_error(c, h->req, h->type, m, XFER_ERR_PERM);
            return true;
        }
        xfer_wire_msg a = {.type = XFER_WIRE_T_SUBSCRIBE_ACK};
        xfer_server_conn_send(c, &a, h->req);
        if (!c->subscribed)
            xfer_server_replay_ready(c, &c->srv->shards[c->hosted]);
        c->subscribed = true;
        return true;
    }
    case XFER_WIRE_T_WRITE:
        return start_write(c, h->req, m);
    case XFER_WIRE_T_EAGER:
        return on_eager(c, h->req, m);
    default:
        return on_op(c, h->req, m);
    }
}
