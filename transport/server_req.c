/*
 * transport/server_req.c - the shard server's requests: HELLO binds a
 * connection to a hosted shard, STATUS reports counters, RESERVE, COMMIT,
 * CANCEL, TAKE and RELEASE go to the connection's shard, SUBSCRIBE turns
 * on its events, and a streamed WRITE begins and ends here.
 *
 * What must stay true:
 *  - a well-formed request the shard refuses gets an ERROR with the
 *    shard's code, and the connection stays; a HELLO for another group,
 *    version or shard is answered with ERROR and the connection closes
 *    once it is sent;
 *  - the shard's pending events are published (server_events.c) before an
 *    op's reply is queued, so a subscriber sees READY no later than the
 *    producer sees the COMMIT_ACK's bytes leave;
 *  - injected faults (fault_ppm, drop_ppm: tests only) are drawn only for
 *    producer-side ops (a connection whose HELLO did not say consumer), so
 *    a consumer connection is never dropped by the fault mix;
 *  - a take is recorded with its taker (server_events.c), and a release
 *    clears it, whichever connection sends it;
 *  - a SUBSCRIBE is answered first, then followed by a READY event for
 *    every reservation already READY on the shard, so a consumer that
 *    (re)connects misses no data that is waiting for it.
 */
#include "server_int.h"

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "server_rdma.h"

/* ---------------------------------------------------------------------- */
/* Replies and faults                                                      */
/* ---------------------------------------------------------------------- */

static void send_error(xfer_server_conn *c, uint32_t req, uint8_t type,
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
        send_error(c, req, m->type, m, rc);
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

static int find_shard(const xfer_server *s, uint16_t index)
{
    for (int i = 0; i < (int)s->cfg.nshards; i++)
        if (s->shards[i].index == index)
            return i;
    return -1;
}

/* ---------------------------------------------------------------------- */
/* HELLO, STATUS, SUBSCRIBE                                                */
/* ---------------------------------------------------------------------- */

/* HELLO: bind the connection to a hosted shard of our group. */
static bool on_hello(xfer_server_conn *c, uint32_t req,
                     const xfer_wire_msg *m)
{
    xfer_server *s = c->srv;
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
    c->role = m->role;
    xfer_wire_msg a = {.type = XFER_WIRE_T_HELLO_ACK,
                       .version = XFER_WIRE_VERSION, .shard = m->shard,
                       .group = s->cfg.group,
                       .pool_bytes = s->shard_cfg[idx].len,
                       .lease_ttl_ns = s->cfg.lease_ttl_ns,
                       .max_write = XFER_WIRE_MAX_DATA};
    xfer_server_conn_send(c, &a, req);
    return true;
}

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
        idx = find_shard(c->srv, m->shard);
        if (idx < 0) {
            send_error(c, req, m->type, m, XFER_ERR_NOT_FOUND);
            return;
        }
    }
    xfer_wire_msg a = {.type = XFER_WIRE_T_STATUS_OK};
    fill_status(c->srv, idx, &a.st);
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
        xfer_server_track_taken(c->srv, hs, m->id, c->serial);
    }
    return rc;
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
        rc = xfer_shard_reserve(hs->sh, t, m->id, m->attempt, m->len, &info);
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
            /* no rkey, no reservation: give the region back */
            xfer_shard_cancel(hs->sh, t, m->id, m->attempt, info.resv_id);
            rc = brc;
        }
        if (rc == 0)
            xfer_server_track_reserved(c->srv, hs, m->id, m->attempt,
                                       info.resv_id, m->len);
        return rc;
    }
    case XFER_WIRE_T_COMMIT:
        a->type = XFER_WIRE_T_COMMIT_ACK;
        return xfer_shard_commit(hs->sh, t, m->id, m->attempt, m->resv_id);
    case XFER_WIRE_T_CANCEL:
        a->type = XFER_WIRE_T_CANCEL_ACK;
        return xfer_shard_cancel(hs->sh, t, m->id, m->attempt, m->resv_id);
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
static bool on_op(xfer_server_conn *c, uint32_t req, const xfer_wire_msg *m)
{
    bool control = m->type != XFER_WIRE_T_TAKE &&
                   m->type != XFER_WIRE_T_RELEASE;
    uint8_t fault = control ? draw_fault(c) : XFER_SERVER_F_NONE;
    xfer_wire_msg a;
    int32_t rc = fault == XFER_SERVER_F_FAIL ? XFER_ERR_REMOTE
                                              : apply(c, m, &a);
    if (fault == XFER_SERVER_F_FAIL)
        a = *m;
    if (fault == XFER_SERVER_F_APPLIED_LOST)
        rc = XFER_ERR_REMOTE;
    xfer_server_flush_all(c->srv);
    if (fault == XFER_SERVER_F_DROP) {
        xfer_server_log(c->srv, c->serial, "fault: connection dropped");
        xfer_server_conn_close(c);
        return false;
    }
    if (rc)
        send_error(c, req, m->type, m, rc);
    else
        xfer_server_conn_send(c, &a, req);
    return true;
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
    c->dst = NULL;
    c->wrc = 0;
    c->wfault = draw_fault(c);
    if (c->wfault == XFER_SERVER_F_FAIL) {
        c->wrc = XFER_ERR_REMOTE;
    } else {
        uint8_t *dst = NULL;
        int rc = xfer_shard_write_begin(sh, xfer_server_now(c->srv), m->id,
                                        m->attempt, m->resv_id, m->off,
                                        m->len, &dst);
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
/* Dispatch                                                                */
/* ---------------------------------------------------------------------- */

bool xfer_server_req_handle(xfer_server_conn *c, const xfer_wire_hdr *h,
                            const xfer_wire_msg *m)
{
    switch (h->type) {
    case XFER_WIRE_T_HELLO:
        return on_hello(c, h->req, m);
    case XFER_WIRE_T_STATUS:
        on_status(c, h->req, m);
        return true;
    case XFER_WIRE_T_SUBSCRIBE: {
        xfer_wire_msg a = {.type = XFER_WIRE_T_SUBSCRIBE_ACK};
        xfer_server_conn_send(c, &a, h->req);
        if (!c->subscribed)
            xfer_server_replay_ready(c, &c->srv->shards[c->hosted]);
        c->subscribed = true;
        return true;
    }
    case XFER_WIRE_T_WRITE:
        return start_write(c, h->req, m);
    default:
        return on_op(c, h->req, m);
    }
}
