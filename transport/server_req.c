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
 *  - injected faults (fault rules, fault_ppm, drop_ppm: tests only) are
 *    decided only for producer-side ops (a connection whose HELLO did not
 *    say consumer), so a consumer connection is never dropped by the fault
 *    mix; a rule's fate is a real shard's (refused, applied but reported
 *    failed, lost, late), never an invariant broken: a delayed request is
 *    held on a timer (the loop runs on) and then runs as if it arrived
 *    only then, a delayed WRITE's end is held with its write still in
 *    flight on the shard (so a cancel or lease waits for it, I4), and
 *    what is held goes with its connection (a held write end ends
 *    failed);
 *  - a take is recorded with its taker (server_events.c), and a release
 *    clears it, whichever consumer connection sends it;
 *  - an EAGER is applied whole by the shard (xfer_shard_eager) or refused
 *    whole, its data (all in the input buffer: xfer_wire_frame_cut) is
 *    consumed either way, and its READY event is published before its
 *    EAGER_OK, as a commit's before its COMMIT_ACK;
 *  - a SUBSCRIBE is answered first, then followed by a CANCELLED or
 *    EXPIRED event for every id the shard ended for its producer and
 *    still tombstones, and a READY event for every reservation already
 *    READY on the shard, so a consumer that (re)connects misses no data
 *    that is waiting for it, and no id it waits for that will never
 *    come.
 */
#include "server_int.h"

#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "server_rdma.h"
#include "xfer/shard_op.h"

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
                   uint8_t ack, int32_t rc);

void xfer_server_req_answer(xfer_server_conn *c, uint32_t req,
                            const xfer_wire_msg *m, uint8_t ack, int32_t rc)
{
    answer(c, req, m, ack, rc);
}

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

/* What befalls one producer op: a fault (XFER_SERVER_F_*) with its
 * status, after a delay (0: none). */
typedef struct op_fate {
    uint8_t fault;
    int32_t err;
    uint64_t delay_ns;
} op_fate;

/* The op kind (xfer/shard_op.h) a request type is, XFER_OP_COUNT_ for
 * the rest (TAKE, RELEASE: the consumer's). */
static unsigned op_of_type(uint8_t type)
{
    switch (type) {
    case XFER_WIRE_T_RESERVE:
        return XFER_OP_RESERVE;
    case XFER_WIRE_T_WRITE:
        return XFER_OP_WRITE;
    case XFER_WIRE_T_COMMIT:
        return XFER_OP_COMMIT;
    case XFER_WIRE_T_CANCEL:
        return XFER_OP_CANCEL;
    case XFER_WIRE_T_EAGER:
        return XFER_OP_EAGER;
    default:
        return XFER_OP_COUNT_;
    }
}

/* The fate of op m of c: the fault rules' first (fault.h; a DROP rule
 * loses the request, where the seeded mix drops the connection), else the
 * seeded mix's draw.  A consumer's ops meet none. */
static op_fate decide(xfer_server_conn *c, const xfer_wire_msg *m)
{
    xfer_server *s = c->srv;
    op_fate f = {.fault = XFER_SERVER_F_NONE, .err = XFER_ERR_REMOTE};
    unsigned op = op_of_type(m->type);
    if (c->role == XFER_WIRE_ROLE_CONSUMER || op == XFER_OP_COUNT_)
        return f;
    if (s->rules.n) {
        xfer_server_hosted *hs = &s->shards[c->hosted];
        xfer_fault_fate rf;
        hs->rules_fired += xfer_faults_decide(&s->rules, op, hs->index,
                                              m->id, &rf);
        f.delay_ns = rf.delay_ns;
        f.err = rf.kind == XFER_FAULT_NONE ? XFER_ERR_REMOTE : rf.error;
        switch (rf.kind) {
        case XFER_FAULT_FAIL:
            f.fault = XFER_SERVER_F_FAIL;
            return f;
        case XFER_FAULT_APPLIED_LOST:
            f.fault = XFER_SERVER_F_APPLIED_LOST;
            return f;
        case XFER_FAULT_DROP:
            f.fault = XFER_SERVER_F_LOST;
            return f;
        default:
            break;
        }
    }
    f.fault = draw_fault(c);
    return f;
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
    case XFER_WIRE_T_REFRESH:
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
                                       info.resv_id, m->len, info.addr,
                                       c->owner);
        return rc;
    }
    case XFER_WIRE_T_COMMIT:
        a->type = XFER_WIRE_T_COMMIT_ACK;
        a->crc_set = 0;
        rc = xfer_server_check_commit(c, hs, m);
        return rc ? rc
                  : xfer_shard_commit_by(hs->sh, t, c->owner, m->id,
                                         m->attempt, m->resv_id);
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
    case XFER_WIRE_T_REFRESH:
        /* the session's own reservation only (PERM otherwise), never
         * past the shard's hold cap (BOUNDS) */
        a->type = XFER_WIRE_T_REFRESH_OK;
        a->hold_ns = 0;
        return xfer_shard_refresh_by(hs->sh, t, c->owner, m->id, m->attempt,
                                     m->resv_id, m->hold_ns, &a->hold_ns);
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

/* The end of an op (a control op or an EAGER): the fault decided for it
 * (an applied op reported failed, the request lost, or the connection
 * dropped), the events it made out before its reply (a READY before the
 * commit's OK), then the reply a (rc 0) or the error.  False: the
 * connection is gone. */
static bool end_op(xfer_server_conn *c, uint32_t req, const xfer_wire_msg *m,
                   const op_fate *f, int32_t rc, const xfer_wire_msg *a)
{
    if (f->fault == XFER_SERVER_F_APPLIED_LOST)
        rc = f->err;
    xfer_server_flush_all(c->srv);
    if (f->fault == XFER_SERVER_F_DROP) {
        xfer_server_log(c->srv, c->serial, "fault: connection dropped");
        xfer_server_conn_close(c);
        return false;
    }
    if (f->fault == XFER_SERVER_F_LOST)
        return true; /* never answered: the producer's deadline ends it */
    if (rc)
        xfer_server_req_error(c, req, m->type, m, rc);
    else
        xfer_server_conn_send(c, a, req);
    return true;
}

/* Run a control op whose fate is decided (and whose delay, if any, has
 * passed).  False: the connection is gone. */
static bool run_op(xfer_server_conn *c, uint32_t req, const xfer_wire_msg *m,
                   const op_fate *f)
{
    xfer_wire_msg a = *m;
    int32_t rc = 0;
    if (f->fault == XFER_SERVER_F_FAIL)
        rc = f->err;
    else if (f->fault != XFER_SERVER_F_LOST) {
        /* a checked COMMIT to a device shard: its answer waits for the
         * read-back of the region (server_copy.c) */
        if (m->type == XFER_WIRE_T_COMMIT &&
            xfer_server_copy_readback(c, req, m, f->fault, f->err))
            return true;
        rc = apply(c, m, &a);
    }
    return end_op(c, req, m, f, rc, &a);
}

void xfer_server_req_commit_end(xfer_server_conn *c, uint32_t req,
                                const xfer_wire_msg *m, uint8_t fault,
                                int32_t err, int32_t rc)
{
    xfer_server_hosted *hs = &c->srv->shards[c->hosted];
    op_fate f = {.fault = fault, .err = err};
    xfer_wire_msg a = *m;
    a.type = XFER_WIRE_T_COMMIT_ACK;
    a.crc_set = 0;
    if (rc == 0)
        rc = xfer_shard_commit_by(hs->sh, xfer_server_now(c->srv), c->owner,
                                  m->id, m->attempt, m->resv_id);
    end_op(c, req, m, &f, rc, &a); /* may close c */
}

static bool hold(xfer_server_conn *c, uint32_t req, const xfer_wire_msg *m,
                 const op_fate *f, const uint8_t *data);

static bool on_op(xfer_server_conn *c, uint32_t req, const xfer_wire_msg *m)
{
    bool control = m->type != XFER_WIRE_T_TAKE &&
                   m->type != XFER_WIRE_T_RELEASE;
    if (!role_may(c, m->type, m->attempt)) {
        xfer_server_req_error(c, req, m->type, m, XFER_ERR_PERM);
        return true;
    }
    op_fate f = {.fault = XFER_SERVER_F_NONE};
    if (control)
        f = decide(c, m);
    if (f.delay_ns)
        return hold(c, req, m, &f, NULL);
    return run_op(c, req, m, &f);
}

/* ---------------------------------------------------------------------- */
/* Streamed writes                                                         */
/* ---------------------------------------------------------------------- */

void xfer_server_req_end_write(xfer_server_conn *c, bool ok)
{
    xfer_server_hosted *hs = &c->srv->shards[c->hosted];
    int rc = 0;
    xfer_server_copy_abandon(c); /* a device write that never landed */
    if (c->dst)
        rc = xfer_shard_write_end(hs->sh, xfer_server_now(c->srv), c->wm.id,
                                  c->wm.resv_id, ok);
    if (c->wcrc_on) /* integrity: its landed CRC joins the region's */
        xfer_server_check_write_end(hs, &c->wm, c->wcrc,
                                    ok && rc == 0 &&
                                        c->wcrc_len == c->wm.len);
    c->wcrc_on = false;
    c->in_write = false;
    c->dst = NULL;
    if (ok)
        hs->write_bytes += c->wm.len;
    if (c->wrc == 0)
        c->wrc = rc;
}

static void hold_write_end(xfer_server_conn *c);

void xfer_server_req_finish_write(xfer_server_conn *c)
{
    /* a device shard: the data is in its bounce buffer; the write ends,
     * and is answered, when the copy into the pool did (a DELAY rule's
     * delay is not applied to it: the copy's own lateness stands in) */
    if (xfer_server_copy_land(c))
        return;
    if (c->wdelay) {
        hold_write_end(c);
        return;
    }
    xfer_server_req_end_write(c, true);
    if (c->wfault == XFER_SERVER_F_APPLIED_LOST && c->wrc == 0)
        c->wrc = c->werr;
    if (c->wfault != XFER_SERVER_F_LOST)
        answer(c, c->wreq, &c->wm, XFER_WIRE_T_WRITE_ACK, c->wrc);
    xfer_server_flush_all(c->srv);
}

/* The head of a WRITE is in: begin it on the shard (or decide to skip its
 * data and answer an error, or not at all).  Returns false when the
 * connection closed. */
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
    op_fate f = {.fault = XFER_SERVER_F_NONE};
    if (may)
        f = decide(c, m);
    c->wfault = f.fault;
    c->werr = f.err;
    c->wdelay = f.delay_ns;
    if (!may) {
        c->wrc = XFER_ERR_PERM; /* its data is skipped */
    } else if (f.fault == XFER_SERVER_F_FAIL) {
        c->wrc = f.err;
    } else if (f.fault != XFER_SERVER_F_LOST) {
        uint8_t *dst = NULL;
        int rc = xfer_shard_write_begin_by(sh, xfer_server_now(c->srv),
                                           c->owner, m->id, m->attempt,
                                           m->resv_id, m->off, m->len, &dst);
        if (rc == 0)
            c->dst = dst ? dst : (uint8_t *)"";
        if (rc == 0 && xfer_server_copy_device(c->srv, c->hosted) &&
            (rc = xfer_server_copy_begin(c, dst)) != 0) {
            xfer_shard_write_end(sh, xfer_server_now(c->srv), m->id,
                                 m->resv_id, false);
            c->dst = NULL;
        }
        c->wrc = rc;
    }
    xfer_server_check_write_begin(c);
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

/* Apply an EAGER whose data is m->len bytes at `data`: reserve, copy and
 * commit in one shard step.  0 fills *a (EAGER_OK). */
static int32_t apply_eager(xfer_server_conn *c, const xfer_wire_msg *m,
                           const uint8_t *data, xfer_wire_msg *a)
{
    xfer_server_hosted *hs = &c->srv->shards[c->hosted];
    if (c->srv->draining)
        return XFER_ERR_SHUTDOWN;
    if (xfer_server_copy_device(c->srv, c->hosted))
        return XFER_ERR_NOT_SUPPORTED; /* never offered (HELLO_ACK) */
    xfer_resv_info info;
    int rc = peer_room(c, hs, m, true);
    if (rc == 0)
        rc = xfer_server_check_eager(c, hs, m, data ? data
                                                    : (const uint8_t *)"");
    if (rc == 0)
        rc = xfer_shard_eager_by(hs->sh, xfer_server_now(c->srv), c->owner,
                                 m->id, m->attempt,
                                 data ? data : (const uint8_t *)"", m->len,
                                 &info);
    if (rc)
        return rc;
    xfer_server_track_reserved(c->srv, hs, m->id, m->attempt, info.resv_id,
                               m->len, info.addr, c->owner);
    if (c->srv->cfg.integrity != XFER_INTEGRITY_OFF)
        xfer_server_check_keep(hs, m);
    hs->write_bytes += m->len;
    *a = (xfer_wire_msg){.type = XFER_WIRE_T_EAGER_OK, .id = m->id,
                         .attempt = m->attempt, .len = m->len,
                         .resv_id = info.resv_id, .addr = info.addr};
    return 0;
}

/* Run an EAGER whose fate is decided (its delay passed), over its data
 * (NULL: no memory to read it whole).  False: the connection is gone. */
static bool run_eager(xfer_server_conn *c, uint32_t req,
                      const xfer_wire_msg *m, const uint8_t *data,
                      const op_fate *f)
{
    xfer_wire_msg a = *m;
    int32_t rc = 0;
    if (f->fault == XFER_SERVER_F_FAIL)
        rc = f->err;
    else if (f->fault != XFER_SERVER_F_LOST)
        rc = data ? apply_eager(c, m, data, &a) : XFER_ERR_NOMEM;
    return end_op(c, req, m, f, rc, &a);
}

/* An EAGER, with an injected fault if one is decided (as on_op's).  Its
 * data (at the front of the input) is consumed whatever the answer; a
 * delayed one keeps a copy.  Returns false when the connection was
 * closed. */
static bool on_eager(xfer_server_conn *c, uint32_t req, const xfer_wire_msg *m)
{
    struct evbuffer *in = c->in;
    bool ok;
    const uint8_t *data =
        m->len ? evbuffer_pullup(in, m->len) : (const uint8_t *)"";
    if (!role_may(c, m->type, m->attempt)) {
        xfer_server_req_error(c, req, m->type, m, XFER_ERR_PERM);
        ok = true;
    } else {
        op_fate f = decide(c, m);
        ok = f.delay_ns ? hold(c, req, m, &f, data)
                        : run_eager(c, req, m, data, &f);
    }
    if (ok)
        evbuffer_drain(in, m->len);
    return ok;
}

/* ---------------------------------------------------------------------- */
/* Requests a DELAY rule holds                                             */
/* ---------------------------------------------------------------------- */

static void unhold(xfer_server_conn *c, xfer_server_held *h)
{
    xfer_list_remove(&c->held, &h->link);
    c->srv->shards[c->hosted].delayed_now--;
    event_free(h->ev);
}

static void free_held(xfer_server *s, xfer_server_held *h)
{
    xfer_server_free(s, h->data);
    xfer_server_free(s, h);
}

/* Let go of a held record without running it: a held write end ends
 * failed on the shard (the producer never heard it succeed). */
static void drop_one(xfer_server_conn *c, xfer_server_held *h)
{
    unhold(c, h);
    if (h->write_end && h->began)
        xfer_shard_write_end(c->srv->shards[c->hosted].sh,
                             xfer_server_now(c->srv), h->m.id, h->m.resv_id,
                             false);
    if (h->write_end && h->wcrc_on)
        xfer_server_check_write_end(&c->srv->shards[c->hosted], &h->m, 0,
                                    false);
    free_held(c->srv, h);
}

/* A held write end runs: the write ends on the shard (as it would have
 * when its last byte came), then the answer goes. */
static void run_write_end(xfer_server_conn *c, xfer_server_held *h)
{
    xfer_server_hosted *hs = &c->srv->shards[c->hosted];
    int32_t rc = h->wrc;
    int erc = h->began ? xfer_shard_write_end(hs->sh, xfer_server_now(c->srv),
                                              h->m.id, h->m.resv_id, true)
                       : 0;
    if (h->wcrc_on)
        xfer_server_check_write_end(hs, &h->m, h->wcrc, erc == 0);
    hs->write_bytes += h->m.len;
    if (rc == 0)
        rc = erc;
    if (h->fault == XFER_SERVER_F_APPLIED_LOST && rc == 0)
        rc = h->err;
    if (h->fault != XFER_SERVER_F_LOST)
        answer(c, h->req, &h->m, XFER_WIRE_T_WRITE_ACK, rc);
    xfer_server_flush_all(c->srv);
}

static void on_held(evutil_socket_t fd, short what, void *arg)
{
    xfer_server_held *h = arg;
    xfer_server_conn *c = h->c;
    xfer_server *s = c->srv;
    xfer_server_batch_begin(s);
    uint64_t now = xfer_server_now(s);
    if (now < h->due) {
        /* libevent's clock ran ahead of ours: wait for the rest, so a
         * delay is never shorter than asked by the server's own clock */
        struct timeval tv = xfer_timer_delay(h->due - now);
        event_add(h->ev, &tv);
        goto out;
    }
    if (c->closing || c->doomed) {
        drop_one(c, h); /* its connection is on its way out */
        goto out;
    }
    unhold(c, h);
    op_fate f = {.fault = h->fault, .err = h->err};
    if (h->write_end)
        run_write_end(c, h);
    else if (h->m.type == XFER_WIRE_T_EAGER)
        run_eager(c, h->req, &h->m,
                  h->data || !h->m.len ? (h->data ? h->data
                                                  : (const uint8_t *)"")
                                       : NULL,
                  &f);
    else
        run_op(c, h->req, &h->m, &f); /* may close c */
    free_held(s, h);
out:
    xfer_server_batch_end(s);
}

/* Hold a new record for f->delay_ns (or h->wdelay); NULL when out of
 * memory. */
static xfer_server_held *new_held(xfer_server_conn *c, uint64_t delay_ns)
{
    xfer_server *s = c->srv;
    xfer_server_held *h = xfer_server_calloc(s, 1, sizeof *h);
    if (!h)
        return NULL;
    h->ev = event_new(s->base, -1, 0, on_held, h);
    if (!h->ev) {
        xfer_server_free(s, h);
        return NULL;
    }
    h->c = c;
    h->due = xfer_server_now(s) + delay_ns;
    struct timeval tv = xfer_timer_delay(delay_ns);
    event_add(h->ev, &tv);
    xfer_list_push_back(&c->held, &h->link);
    s->shards[c->hosted].ops_delayed++;
    s->shards[c->hosted].delayed_now++;
    return h;
}

/* Hold a control op or an EAGER (its m->len bytes at data, copied; data
 * NULL: the EAGER's data could not be read whole) for its delay; it runs
 * with its fate when the timer fires.  Out of memory: the op is refused
 * (XFER_ERR_NOMEM), as a shard without room would.  False: the connection
 * is gone. */
static bool hold(xfer_server_conn *c, uint32_t req, const xfer_wire_msg *m,
                 const op_fate *f, const uint8_t *data)
{
    uint8_t *copy = NULL;
    if (data && m->len && !(copy = xfer_server_calloc(c->srv, 1, m->len)))
        goto out_nomem;
    xfer_server_held *h = new_held(c, f->delay_ns);
    if (!h)
        goto out_free;
    if (copy)
        memcpy(copy, data, m->len);
    h->req = req;
    h->m = *m;
    h->fault = f->fault;
    h->err = f->err;
    h->data = copy;
    return true;
out_free:
    xfer_server_free(c->srv, copy);
out_nomem:
    xfer_server_req_error(c, req, m->type, m, XFER_ERR_NOMEM);
    return true;
}

/* A delayed WRITE's last byte landed: hold its end (the write stays in
 * flight on the shard) and free the connection for the next frame.  Out
 * of memory: it ends now, failed, and answers XFER_ERR_NOMEM. */
static void hold_write_end(xfer_server_conn *c)
{
    xfer_server_held *h = new_held(c, c->wdelay);
    if (!h) {
        xfer_server_req_end_write(c, false);
        answer(c, c->wreq, &c->wm, XFER_WIRE_T_WRITE_ACK, XFER_ERR_NOMEM);
        xfer_server_flush_all(c->srv);
        return;
    }
    h->write_end = true;
    h->req = c->wreq;
    h->m = c->wm;
    h->began = c->dst != NULL;
    /* its data is all in, and checksummed as it landed */
    h->wcrc_on = c->wcrc_on && c->wcrc_len == c->wm.len;
    h->wcrc = c->wcrc;
    if (c->wcrc_on && !h->wcrc_on)
        xfer_server_check_write_end(&c->srv->shards[c->hosted], &c->wm, 0,
                                    false);
    c->wcrc_on = false;
    h->wrc = c->wrc;
    h->fault = c->wfault;
    h->err = c->werr;
    c->in_write = false;
    c->dst = NULL;
}

void xfer_server_req_drop_held(xfer_server_conn *c)
{
    xfer_list_node *n;
    while ((n = c->held.head) != NULL)
        drop_one(c, XFER_LIST_ITEM(n, xfer_server_held, link));
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
        if (!c->subscribed) {
            xfer_server_replay_ended(c, &c->srv->shards[c->hosted]);
            xfer_server_replay_ready(c, &c->srv->shards[c->hosted]);
        }
        c->subscribed = true;
        return true;
    }
    case XFER_WIRE_T_WRITE:
        return start_write(c, h->req, m);
    case XFER_WIRE_T_EAGER:
    case XFER_WIRE_T_EAGER_CRC:
        return on_eager(c, h->req, m);
    default:
        return on_op(c, h->req, m);
    }
}
