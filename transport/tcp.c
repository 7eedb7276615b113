/*
 * transport/tcp.c - the TCP transport (producer side of the wire protocol):
 * one bufferevent per consumer shard on the engine's event base.
 *
 * An op is started into its shard's connection: queued (`wait` list) while
 * the connection is being set up or its output is above the high
 * watermark, else encoded and sent (`sent` list, in request order, which is
 * also reply order since xferd answers each connection's frames in order).
 * A WRITE goes out as its 48-byte head (copied) followed by the staging
 * bytes by reference.
 *
 * The hot path's bytes are tcp_io.c's: each connection's output is
 * queued during the loop turn and written once (straight to the socket
 * when the bufferevent holds nothing; the bufferevent, which also
 * connects, takes only what the socket did not), and once HELLO is
 * answered the connection reads its socket itself and decodes frames in
 * place.  The records both files share are in tcp_conn.h.
 *
 * What must stay true:
 *  - every started op gets exactly one result, never from inside
 *    start/abort (transport.h): the results of one read's replies are
 *    delivered at the end of that read callback, as one engine batch
 *    (xfer_engine_batch_begin/_end: one clock reading, one drain of the
 *    core's next ops); any other from a deferred event, activated once
 *    per batch (never once per result);
 *  - a WRITE result is queued only when its reply (or failure) is known AND
 *    its staging reference was released (I3): `done` records the outcome,
 *    `ref_held` the reference (held from queueing until the kernel took
 *    the bytes, the bufferevent let go of them, or the connection dropped
 *    them unsent), and the result leaves when both allow;
 *  - an op's memory lives until it is on no list, holds no reference, and
 *    its result is queued; then it goes to a free list (at most
 *    TCP_FREE_MAX records, from cfg.alloc, freed at del), so the hot path
 *    allocates nothing once warm; an op whose transport is gone is freed
 *    by its reference cleanup (orphan);
 *  - a lost connection fails every op on its `sent` list with CONN_LOST;
 *    ops still waiting survive an immediate reconnect and fail only when a
 *    connect fails;
 *  - peer input is checked: a frame the decoder refuses, a reply that
 *    matches no request or not its request's kind, closes the connection
 *    (counted as bad_frames) exactly like a loss;
 *  - every allocation goes through cfg.alloc; an orphan carries a copy of
 *    it, since its cleanup runs after the transport is gone;
 *  - the eager path: the group allows it (eager_ok) only while every
 *    connection is up and its shard's HELLO_ACK said XFER_WIRE_HELLO_EAGER;
 *    an EAGER goes out like a WRITE (head copied, staging bytes by
 *    reference, the same I3 rule) and one that meets a connection whose
 *    shard does not take it fails with XFER_ERR_NOT_SUPPORTED, unsent.
 *
 * As the control channel of another transport (tcp_int.h: the RDMA
 * transport), results go to the owner's deliver hook instead of the
 * engine, the owner hears each connection come up (HELLO answered) and go
 * down, and a connection that is up holds its ops (state C_GATED) until
 * the owner opens it: its data path is up too.
 */
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "addr.h"
#include "auth.h"
#include "crc.h"
#include "base_ref.h"
#include "engine_int.h"
/* fsm_private_dep: the injected allocator with its libc default, and the
 * copy of versioned configs, shared with the pure machines. */
#include "util.h"
#include "tcp_conn.h"
#include "timer.h"
#include "wire_frame.h"
#include "xfer/dir.h"

/* ---------------------------------------------------------------------- */
/* Lists                                                                   */
/* ---------------------------------------------------------------------- */

static tcp_op *op_of(xfer_list_node *n)
{
    return n ? XFER_LIST_ITEM(n, tcp_op, link) : NULL;
}

/* Put op on list l, which is its `which` (L_WAIT or L_SENT). */
static void list_push(xfer_list *l, tcp_op *op, uint8_t which)
{
    xfer_list_push_back(l, &op->link);
    op->list = which;
}

static void list_unlink(xfer_list *l, tcp_op *op)
{
    xfer_list_remove(l, &op->link);
    op->list = L_NONE;
}

/* ---------------------------------------------------------------------- */
/* Results                                                                 */
/* ---------------------------------------------------------------------- */

/* Room for every outstanding op's result, grown at start so that queueing
 * a result never fails. */
static int q_reserve(xfer_tcp *t, size_t need)
{
    if (need <= t->qring.cap)
        return 0;
    size_t cap = t->qring.cap ? 2 * (size_t)t->qring.cap : 256;
    while (cap < need)
        cap *= 2;
    xfer_shard_result *q =
        cap > XFER_RING_MAX_CAP
            ? NULL
            : xfer_ring_grow(&t->qring, t->q, sizeof *q, (uint32_t)cap, &t->cfg.alloc);
    if (!q)
        return XFER_ERR_NOMEM;
    t->q = q;
    return 0;
}

/* Activate the deliver event once until it runs (activating an active
 * event changes nothing in libevent). */
static void arm_deliver(xfer_tcp *t)
{
    if (t->deliver_armed)
        return;
    t->deliver_armed = true;
    t->io.deliver_wakeups++;
    event_active(t->deliver_ev, EV_TIMEOUT, 0);
}

/* A result queued inside a read callback is delivered at its end, with
 * the read's other results (xfer_tcp_deliver_queued); any other leaves
 * from the deferred event, never from inside start/abort. */
static void q_push(xfer_tcp *t, const xfer_shard_result *r)
{
    t->q[xfer_ring_push(&t->qring)] = *r;
    if (!t->in_read)
        arm_deliver(t);
}

/* An op record: one kept from an earlier op, else a new one. */
static tcp_op *op_get(xfer_tcp *t)
{
    tcp_op *op = t->free_ops;
    if (!op) {
        t->io.op_allocs++;
        return xfer_util_calloc(&t->cfg.alloc, 1, sizeof *op);
    }
    t->free_ops = op->next_free;
    t->nfree--;
    memset(op, 0, sizeof *op);
    return op;
}

static void op_put(xfer_tcp *t, tcp_op *op)
{
    if (t->nfree >= TCP_FREE_MAX) {
        xfer_util_free(&t->cfg.alloc, op);
        return;
    }
    op->next_free = t->free_ops;
    t->free_ops = op;
    t->nfree++;
}

static void maybe_free(tcp_op *op)
{
    if (op->list == L_NONE && !op->ref_held && op->queued)
        op_put(op->conn->t, op);
}

/* Queue op's result if its outcome is known and its staging bytes are no
 * longer referenced (the ring has room: q_reserve at start). */
static void try_queue(xfer_tcp *t, tcp_op *op)
{
    if (!op->done || op->queued || op->ref_held)
        return;
    q_push(t, &op->res);
    op->queued = true;
    t->outstanding--;
    t->st.results++;
}

/* Record op's outcome (once); the result leaves when try_queue allows. */
static void finish(xfer_tcp *t, tcp_op *op, int32_t status)
{
    if (op->done)
        return;
    op->done = true;
    op->res.status = status;
    try_queue(t, op);
}


/*
 * Hand the queued results to the engine (or the owner's hook) as one
 * batch: one clock reading, and the core's next ops produced in one drain
 * at batch_end (engine_int.h).  Results queued meanwhile (an op that
 * fails at start, from that drain) wait for the deferred event: in_read
 * stays up so that they do not arm it twice.
 */
void xfer_tcp_deliver_queued(xfer_tcp *t)
{
    xfer_engine *e = t->hooks.deliver ? NULL : t->engine;
    t->in_read++;
    if (e)
        xfer_engine_batch_begin(e);
    for (int i = 0; i < TCP_DELIVER_BATCH && !xfer_ring_empty(&t->qring);
         i++) {
        xfer_shard_result r = t->q[xfer_ring_pop(&t->qring)];
        if (t->hooks.deliver)
            t->hooks.deliver(t->hooks.ud, &r);
        else if (e)
            xfer_engine_deliver(e, &r);
    }
    if (e)
        xfer_engine_batch_end(e);
    t->in_read--;
    if (t->in_read)
        return;
    if (!xfer_ring_empty(&t->qring))
        arm_deliver(t);
    xfer_tcp_io_flush_dirty(t); /* the batch's new ops: one write each */
}

static void on_deliver(evutil_socket_t fd, short what, void *arg)
{
    xfer_tcp *t = arg;
    t->deliver_armed = false;
    xfer_tcp_deliver_queued(t);
}

static void stream_run(tcp_conn *c, const xfer_action *a, const void *src);

/* The staging bytes of a WRITE are no longer referenced: written, or
 * dropped with their connection. */
void xfer_tcp_release_ref(tcp_op *op)
{
    xfer_tcp *t = op->conn->t;
    op->ref_held = false;
    t->st.refs_outstanding--;
    if (op->run_pending) {
        /* integrity: the bytes were just read for the socket (or dropped
         * with it), so they are read again while in cache; the WRITE's
         * result, and so its COMMIT, come only after this */
        op->run_pending = false;
        if (op->conn->crc)
            stream_run(op->conn, &op->a, op->src);
    }
    try_queue(t, op);
    maybe_free(op);
}

/* libevent let go of a WRITE's staging bytes. */
void xfer_tcp_ref_done(const void *data, size_t len, void *extra)
{
    tcp_op *op = extra;
    if (op->orphan) {
        xfer_allocator a = op->orphan_alloc;
        xfer_util_free(&a, op);
        return;
    }
    xfer_tcp_release_ref(op);
}

/* ---------------------------------------------------------------------- */
/* Sending                                                                 */
/* ---------------------------------------------------------------------- */


static uint8_t wire_type_of(uint8_t kind)
{
    switch (kind) {
    case XFER_ACT_RESERVE: return XFER_WIRE_T_RESERVE;
    case XFER_ACT_WRITE: return XFER_WIRE_T_WRITE;
    case XFER_ACT_COMMIT: return XFER_WIRE_T_COMMIT;
    case XFER_ACT_EAGER: return XFER_WIRE_T_EAGER;
    default: return XFER_WIRE_T_CANCEL;
    }
}

static bool above_high(const tcp_conn *c)
{
    return c->pending +
               evbuffer_get_length(bufferevent_get_output(c->bev)) >
           c->t->cfg.high_watermark;
}

/* Integrity: remember the CRC of a WRITE's run, read from the staging
 * right after the socket took its bytes (xfer_tcp_release_ref: after the
 * gate, before the WRITE's result; they were just read for the socket,
 * so they are in cache, and the WRITE's bytes never wait for the CRC), or,
 * for a stream run the RDMA transport posted, as it posts it
 * (xfer_tcp_stream_run).  A stream's runs join at its COMMIT; a one-shot's
 * one run is its COMMIT's CRC.  A full table, or no memory: a stream goes
 * unchecked, never wrongly refused; a one-shot's COMMIT reads its slice
 * again. */
static void stream_run(tcp_conn *c, const xfer_action *a, const void *src)
{
    if (!c->runs)
        c->runs = xfer_util_calloc(&c->t->cfg.alloc, TCP_RUNS_MAX,
                                   sizeof *c->runs);
    if (!c->runs || c->nruns >= TCP_RUNS_MAX)
        return;
    c->runs[c->nruns++] = (tcp_run){.id = a->id, .resv_id = a->resv_id,
                                    .attempt = a->attempt,
                                    .off = a->resv_off, .len = a->len,
                                    .crc = xfer_crc32c(0, src, a->len)};
}

void xfer_tcp_stream_run(xfer_tcp *t, const xfer_action *a, const void *src)
{
    if (a->shard >= t->cfg.nshards)
        return;
    tcp_conn *c = &t->conns[a->shard];
    /* the same test as a stream WRITE sent here (send_op) */
    if (c->crc && a->kind == XFER_ACT_WRITE && a->part && src && a->len)
        stream_run(c, a, src);
}

/* Drop the runs of (id, attempt) (attempt 0: of any), keeping the order
 * of the rest. */
static void runs_drop(tcp_conn *c, uint64_t id, uint32_t attempt)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < c->nruns; i++)
        if (c->runs[i].id != id ||
            (attempt && c->runs[i].attempt != attempt))
            c->runs[k++] = c->runs[i];
    c->nruns = k;
}

/* A stream's COMMIT (or a one-shot's): the runs its WRITEs sent on this
 * connection, in reservation order, must tile [0, end) exactly (no gap,
 * no overlap); then their CRCs join (xfer_crc32c_combine) into the
 * region's, *crc.  False: it cannot be known (overlapping or missing
 * runs): a stream's COMMIT goes without a CRC, unchecked; a one-shot's
 * reads its slice again.  The runs are dropped either way. */
static bool stream_crc(tcp_conn *c, const xfer_action *a, uint32_t *crc)
{
    /* One run of (id, attempt), as every one-shot and a one-run stream
     * leave: taken in one pass and one move of the runs after it (the
     * join below costs three passes and a copy of the table, four COMMITs
     * per transfer, about 64 runs per connection at 64 in flight). */
    uint32_t at = UINT32_MAX, n = 0;
    for (uint32_t i = 0; i < c->nruns && n < 2; i++)
        if (c->runs[i].id == a->id && c->runs[i].attempt == a->attempt) {
            at = n ? at : i;
            n++;
        }
    if (n == 0)
        return false;
    if (n == 1) {
        const tcp_run r = c->runs[at];
        memmove(&c->runs[at], &c->runs[at + 1],
                (c->nruns - at - 1) * sizeof *c->runs);
        c->nruns--;
        if (r.resv_id != a->resv_id || r.off != 0 ||
            (a->len && r.len != a->len))
            return false;
        *crc = r.crc;
        return true;
    }
    uint32_t pos = 0, acc = 0;
    bool ok = true, any = false;
    while (ok) {
        const tcp_run *next = NULL;
        bool dup = false;
        for (uint32_t i = 0; i < c->nruns; i++) {
            const tcp_run *r = &c->runs[i];
            if (r->id != a->id || r->attempt != a->attempt ||
                r->resv_id != a->resv_id || r->off + (uint64_t)r->len <= pos)
                continue;
            if (r->off < pos) {
                ok = false; /* overlaps what is joined already */
                break;
            }
            if (next && r->off == next->off)
                dup = true;
            if (!next || r->off < next->off)
                next = r, dup = false;
        }
        if (!ok || !next)
            break;
        if (dup || next->off != pos) {
            ok = false; /* overlapping runs, or a gap */
            break;
        }
        acc = any ? xfer_crc32c_combine(acc, next->crc, next->len)
                  : next->crc;
        any = true;
        pos += next->len;
    }
    runs_drop(c, a->id, a->attempt);
    if (!ok || !any || (a->len && pos != a->len))
        return false;
    *crc = acc;
    return true;
}

/* A one-shot WRITE's bytes are the engine's host staging (pool_added),
 * not a bounce buffer of a device pool's D2H copy: then its COMMIT may
 * use the CRC taken as it went out. */
static bool host_staged(const xfer_tcp *t, const xfer_action *a,
                        const void *src)
{
    if (a->pool >= TCP_POOLS_MAX || !t->pools[a->pool].base)
        return false;
    const uint8_t *b = t->pools[a->pool].base, *p = src;
    return p >= b && (size_t)(p - b) <= t->pools[a->pool].len &&
           a->len <= t->pools[a->pool].len - (size_t)(p - b);
}

/* Encode op onto the connection.  Returns false when the connection had
 * to be dropped (a staging reference could not be added). */

static bool send_op(tcp_conn *c, tcp_op *op)
{
    const xfer_action *a = &op->a;
    bool data = a->kind == XFER_ACT_WRITE || a->kind == XFER_ACT_EAGER;
    if (a->kind == XFER_ACT_EAGER && !c->eager) {
        /* a reconnect found a shard that does not take it */
        finish(c->t, op, XFER_ERR_NOT_SUPPORTED);
        maybe_free(op);
        return true;
    }
    xfer_wire_msg m = {.type = wire_type_of(a->kind), .id = a->id,
                       .attempt = a->attempt, .resv_id = a->resv_id,
                       .len = a->kind == XFER_ACT_RESERVE || data ? a->len
                                                                 : 0,
                       /* a stream's run lands at its reservation offset */
                       .off = a->kind == XFER_ACT_WRITE ? a->resv_off : 0};
    if (c->crc && op->crc_given) {
        /* the caller's CRC (xfer_engine_submit_crc, _stream_seal_crc):
         * sent as given; the runs kept for it are not needed */
        m.crc = op->crc;
        m.crc_set = 1;
        c->t->st.crcs_sent++;
        c->t->st.crcs_given++;
        if (c->nruns)
            runs_drop(c, a->id, a->attempt);
    } else if (c->crc && (a->kind == XFER_ACT_EAGER ||
                          (a->kind == XFER_ACT_COMMIT && op->src))) {
        /* integrity: the slice's CRC32C: a one-shot's taken once its
         * WRITE's bytes were sent (stream_run), else from the staging as
         * it is now (after the gate; a COMMIT's after its write ended, I3
         * holds the staging; a device slice's D2H copy) */
        if (a->kind == XFER_ACT_EAGER || !c->nruns ||
            !stream_crc(c, a, &m.crc))
            m.crc = xfer_crc32c(0, op->src, a->len);
        m.crc_set = 1;
        c->t->st.crcs_sent++;
    } else if (c->crc && a->kind == XFER_ACT_COMMIT && c->nruns &&
               stream_crc(c, a, &m.crc)) {
        m.crc_set = 1; /* a stream's: its runs' CRCs joined */
        c->t->st.crcs_sent++;
    } else if (c->crc && a->kind == XFER_ACT_WRITE && op->src && a->len &&
               (a->part || host_staged(c->t, a, op->src))) {
        op->run_pending = true; /* stream_run once the socket read it */
    } else if (c->nruns && a->kind == XFER_ACT_CANCEL) {
        runs_drop(c, a->id, 0);
    }
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t n = xfer_wire_encode(&m, c->next_req, buf, sizeof buf);
    op->req = c->next_req++;
    list_push(&c->sent, op, L_SENT);
    c->t->st.ops_sent++;
    if (!n || !xfer_tcp_io_queue(c, buf, n)) {
        xfer_tcp_conn_lost(c, false);
        return false;
    }
    if (data && a->len) {
        /* the staging bytes by reference, released once written */
        op->ref_held = true;
        c->t->st.refs_outstanding++;
        if (!xfer_tcp_io_queue_ref(c, op, 0, a->len)) {
            op->ref_held = false; /* never queued: nothing releases it */
            c->t->st.refs_outstanding--;
            xfer_tcp_conn_lost(c, false);
            return false;
        }
        c->t->st.bytes_referenced += a->len;
    }
    return true;
}

/* Send waiting ops while the connection is up and below the watermark. */
void xfer_tcp_flush_wait(tcp_conn *c)
{
    while (c->state == C_UP && !xfer_list_empty(&c->wait) && !above_high(c)) {
        tcp_op *op = op_of(c->wait.head);
        list_unlink(&c->wait, op);
        if (!send_op(c, op))
            return;
    }
}

/* ---------------------------------------------------------------------- */
/* Replies                                                                 */
/* ---------------------------------------------------------------------- */

static bool reply_fits(const tcp_op *op, const xfer_wire_msg *m)
{
    static const uint8_t ack[] = {
        [XFER_ACT_RESERVE] = XFER_WIRE_T_RESERVE_OK,
        [XFER_ACT_WRITE] = XFER_WIRE_T_WRITE_ACK,
        [XFER_ACT_COMMIT] = XFER_WIRE_T_COMMIT_ACK,
        [XFER_ACT_CANCEL] = XFER_WIRE_T_CANCEL_ACK,
        [XFER_ACT_EAGER] = XFER_WIRE_T_EAGER_OK};
    if (m->type != XFER_WIRE_T_ERROR && m->type != ack[op->a.kind])
        return false;
    if (m->id != op->a.id || m->attempt != op->a.attempt)
        return false;
    /* A reservation the shard made is named by a reservation id; one
     * without it could never be written, committed or cancelled. */
    if ((m->type == XFER_WIRE_T_RESERVE_OK ||
         m->type == XFER_WIRE_T_EAGER_OK) &&
        m->resv_id == XFER_RESV_NONE)
        return false;
    return m->type != XFER_WIRE_T_ERROR || xfer_wire_peer_code(m->code) != 0;
}

static tcp_op *find_sent(tcp_conn *c, uint32_t req)
{
    for (tcp_op *op = op_of(c->sent.head); op; op = op_of(op->link.next))
        if (op->req == req)
            return op;
    return NULL;
}

/* A reply to a request of ours.  Returns false when it was not acceptable
 * (the connection is then dropped).  A refused reply that names one of
 * our requests fails that op with XFER_ERR_PROTO first: the op has its
 * result even though the shard's answer was not one (every started op
 * ends, whatever a shard sends); the connection's other ops then fail as
 * a lost connection's do. */
static bool on_reply(tcp_conn *c, const xfer_wire_hdr *h,
                     const xfer_wire_msg *m)
{
    tcp_op *op = find_sent(c, h->req);
    if (!op)
        return false;
    list_unlink(&c->sent, op);
    if (!reply_fits(op, m)) {
        c->t->st.bad_replies++;
        finish(c->t, op, XFER_ERR_PROTO);
        maybe_free(op);
        return false;
    }
    if (m->type == XFER_WIRE_T_RESERVE_OK ||
        m->type == XFER_WIRE_T_EAGER_OK) {
        op->res.resv_id = m->resv_id;
        op->res.remote_addr = m->addr;
        if (m->type == XFER_WIRE_T_RESERVE_OK)
            op->res.rkey = m->rkey;
    }
    finish(c->t, op,
           m->type == XFER_WIRE_T_ERROR ? xfer_wire_peer_code(m->code) : 0);
    maybe_free(op);
    return true;
}

/* The shard's CHALLENGE: check its proof and answer ours (AUTH). */
static bool on_challenge(tcp_conn *c, const xfer_wire_msg *m)
{
    xfer_wire_msg a;
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    if (c->challenged ||
        xfer_auth_answer(c->t->secret, c->t->secret_len, &c->hello, m,
                         &a) != 0) {
        c->t->st.hello_refused++;
        return false;
    }
    c->challenged = true;
    size_t n = xfer_wire_encode(&a, c->hello_req, buf, sizeof buf);
    return n && xfer_tcp_io_queue(c, buf, n);
}

static bool on_hello_ack(tcp_conn *c, const xfer_wire_hdr *h,
                         const xfer_wire_msg *m)
{
    if (c->state != C_HELLO || h->req != c->hello_req)
        return false;
    if (m->type == XFER_WIRE_T_CHALLENGE)
        return on_challenge(c, m);
    /* With a secret, a shard that did not prove it knows it is refused. */
    if (m->type == XFER_WIRE_T_ERROR || m->shard != c->shard ||
        m->group != c->t->cfg.group ||
        (c->t->secret_len && !c->challenged)) {
        c->t->st.hello_refused++;
        return false;
    }
    xfer_backoff_up(&c->bo, xfer_clock_monotonic(NULL));
    c->eager = (m->hello_flags & XFER_WIRE_HELLO_EAGER) != 0;
    c->crc = (m->hello_flags & XFER_WIRE_HELLO_CRC) != 0;
    c->refresh = (m->hello_flags & XFER_WIRE_HELLO_REFRESH) != 0;
    c->nruns = 0; /* runs of the connection before are not this one's */
    c->t->st.connects++;
    bufferevent_set_timeouts(c->bev, NULL, NULL);
    c->own_read = true; /* cut_frames hands the reads over (tcp_io.c) */
    if (c->t->hooks.link) {
        /* the owner sets up the rest and opens the connection */
        c->state = C_GATED;
        c->told_up = true;
        c->t->hooks.link(c->t->hooks.ud, c->shard, true,
                         bufferevent_getfd(c->bev));
        return true;
    }
    c->state = C_UP;
    xfer_tcp_flush_wait(c);
    return true;
}

/* ---------------------------------------------------------------------- */
/* The eager path                                                          */
/* ---------------------------------------------------------------------- */

/* Every shard's connection is up and takes EAGER. */
static bool t_eager_ok(void *self)
{
    const xfer_tcp *t = self;
    for (uint16_t k = 0; k < t->cfg.nshards; k++)
        if (t->conns[k].state != C_UP || !t->conns[k].eager)
            return false;
    return t->cfg.nshards > 0;
}

/* ---------------------------------------------------------------------- */
/* Lease refreshes (docs/streaming.md)                                     */
/* ---------------------------------------------------------------------- */

/* The refresh sent with request id req, or NULL. */
static tcp_refresh *find_refresh(tcp_conn *c, uint32_t req)
{
    for (uint32_t i = 0; c->nrfs && i < TCP_REFRESH_MAX; i++)
        if (c->rfs[i].used && c->rfs[i].req == req)
            return &c->rfs[i];
    return NULL;
}

/* Answer one refresh to the engine and free its entry. */
static void end_refresh(tcp_conn *c, tcp_refresh *f, int status,
                        uint64_t granted)
{
    tcp_refresh r = *f;
    f->used = 0;
    c->nrfs--;
    if (c->t->hooks.refreshed)
        c->t->hooks.refreshed(c->t->hooks.ud, r.id, c->shard, r.attempt,
                              status, granted);
    else if (c->t->engine)
        xfer_engine_refreshed(c->t->engine, r.id, c->shard, r.attempt,
                              status, granted);
}

/* The connection is gone: every refresh on it is answered CONN_LOST. */
static void fail_refreshes(tcp_conn *c)
{
    for (uint32_t i = 0; c->nrfs && i < TCP_REFRESH_MAX; i++)
        if (c->rfs[i].used)
            end_refresh(c, &c->rfs[i], XFER_ERR_CONN_LOST, 0);
}

/* A REFRESH_OK, or an ERROR answering a refresh.  False: not acceptable
 * (the connection is dropped). */
static bool on_refresh_reply(tcp_conn *c, tcp_refresh *f,
                             const xfer_wire_msg *m)
{
    int32_t code = m->type == XFER_WIRE_T_ERROR ? xfer_wire_peer_code(m->code)
                                                : 0;
    if (m->id != f->id || m->attempt != f->attempt ||
        (m->type == XFER_WIRE_T_ERROR && code == 0)) {
        c->t->st.bad_replies++;
        end_refresh(c, f, XFER_ERR_PROTO, 0);
        return false;
    }
    end_refresh(c, f, code, code ? 0 : m->hold_ns);
    return true;
}

static int t_refresh(void *self, uint16_t shard, uint64_t id,
                     uint32_t attempt, uint64_t resv_id, uint64_t want_ns)
{
    xfer_tcp *t = self;
    if (shard >= t->cfg.nshards)
        return XFER_ERR_INVALID_ARG;
    tcp_conn *c = &t->conns[shard];
    if (c->state != C_UP)
        return XFER_ERR_CONN_LOST;
    if (!c->refresh)
        return XFER_ERR_NOT_SUPPORTED;
    if (!c->rfs)
        c->rfs = xfer_util_calloc(&t->cfg.alloc, TCP_REFRESH_MAX,
                                  sizeof *c->rfs);
    if (!c->rfs)
        return XFER_ERR_NOMEM;
    if (c->nrfs >= TCP_REFRESH_MAX)
        return XFER_ERR_BUSY;
    uint32_t i = 0;
    while (c->rfs[i].used)
        i++;
    xfer_wire_msg m = {.type = XFER_WIRE_T_REFRESH, .id = id,
                       .attempt = attempt, .resv_id = resv_id,
                       .hold_ns = want_ns};
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t n = xfer_wire_encode(&m, c->next_req, buf, sizeof buf);
    c->rfs[i] = (tcp_refresh){.id = id, .req = c->next_req++,
                              .attempt = attempt, .used = 1};
    c->nrfs++;
    if (!n || !xfer_tcp_io_queue(c, buf, n)) {
        /* answered CONN_LOST as the connection goes */
        xfer_tcp_conn_lost(c, false);
    }
    return 0;
}

bool xfer_tcp_on_frame(tcp_conn *c, const xfer_wire_hdr *h,
                     const xfer_wire_msg *m)
{
    if (c->state == C_HELLO)
        return on_hello_ack(c, h, m);
    if (c->state == C_GATED)
        return false; /* nothing was sent: no reply can be due */
    if (m->type == XFER_WIRE_T_REFRESH_OK || m->type == XFER_WIRE_T_ERROR) {
        tcp_refresh *f = find_refresh(c, h->req);
        if (f)
            return on_refresh_reply(c, f, m);
        if (m->type == XFER_WIRE_T_REFRESH_OK)
            return false; /* answers nothing we asked */
    }
    switch (m->type) {
    case XFER_WIRE_T_RESERVE_OK:
    case XFER_WIRE_T_WRITE_ACK:
    case XFER_WIRE_T_COMMIT_ACK:
    case XFER_WIRE_T_CANCEL_ACK:
    case XFER_WIRE_T_ERROR:
    case XFER_WIRE_T_EAGER_OK: /* the reservation it names is what a
                                  rollback cancels */
        return on_reply(c, h, m);
    default:
        return false;
    }
}

/* Every frame the read brought, then their results as one batch. */
static void cut_frames(tcp_conn *c, struct bufferevent *bev)
{
    struct evbuffer *in = bufferevent_get_input(bev);
    for (;;) {
        xfer_wire_hdr h;
        xfer_wire_msg m;
        xfer_wire_reason why;
        int rc = xfer_wire_frame_cut(in, &h, &m, &why);
        if (rc == 0)
            return;
        if (rc < 0 || h.type == XFER_WIRE_T_WRITE ||
            !xfer_tcp_on_frame(c, &h, &m)) {
            xfer_tcp_conn_lost(c, true);
            return;
        }
        if (c->bev != bev)
            return; /* the connection was replaced meanwhile */
        if (c->own_read) {
            if (!xfer_tcp_io_take_reads(c, bev))
                xfer_tcp_conn_lost(c, false);
            return;
        }
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    tcp_conn *c = arg;
    xfer_tcp *t = c->t;
    t->io.reads++;
    t->in_read++;
    cut_frames(c, bev);
    t->in_read--;
    if (!t->in_read)
        xfer_tcp_deliver_queued(t);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    /* Output fell below the low watermark; what this queues goes out
     * from the flush event. */
    xfer_tcp_flush_wait(arg);
}

/* ---------------------------------------------------------------------- */
/* Connection life                                                         */
/* ---------------------------------------------------------------------- */

static void start_connect(tcp_conn *c);

static void fail_list(tcp_conn *c, xfer_list *l, int32_t status)
{
    while (!xfer_list_empty(l)) {
        tcp_op *op = op_of(l->head);
        list_unlink(l, op);
        if (!op->done)
            c->t->st.failed_conn_lost++;
        finish(c->t, op, status);
        maybe_free(op);
    }
}

static void close_bev(tcp_conn *c)
{
    if (c->told_up) {
        c->told_up = false;
        c->t->hooks.link(c->t->hooks.ud, c->shard, false, -1);
    }
    if (c->rd_ev) {
        event_free(c->rd_ev);
        c->rd_ev = NULL;
    }
    c->in_len = 0;
    c->own_read = false;
    fail_refreshes(c);
    if (!c->bev)
        return;
    xfer_tcp_io_drop(c);
    /* Freeing the bufferevent releases its output; the staging references
     * in it are let go (their cleanups run) when libevent finalizes it. */
    bufferevent_free(c->bev);
    c->bev = NULL;
    evtimer_del(c->grace_ev);
}

/* Dial again after `delay_ns` (backoff.h), or at once when it is 0. */
static void redial(tcp_conn *c, uint64_t delay_ns)
{
    if (delay_ns == 0) {
        start_connect(c);
        return;
    }
    struct timeval tv = xfer_timer_delay(delay_ns);
    evtimer_add(c->retry_ev, &tv);
}

static uint64_t next_delay(tcp_conn *c)
{
    return xfer_backoff_lost(&c->bo, xfer_clock_monotonic(NULL),
                             c->t->cfg.reconnect_min_ns,
                             c->t->cfg.reconnect_max_ns);
}

/* Down after a failed connect (or a connection that broke before it was
 * up): every waiting op fails; retry after the backoff. */
static void go_down(tcp_conn *c)
{
    xfer_tcp *t = c->t;
    close_bev(c);
    c->state = C_DOWN;
    t->st.connect_failures++;
    fail_list(c, &c->sent, XFER_ERR_CONN_LOST);
    fail_list(c, &c->wait, XFER_ERR_CONN_LOST);
    redial(c, next_delay(c));
}

/* The connection broke (or the peer misbehaved): fail what was sent.  A
 * connection that had stayed up is redialled at once, and ops still
 * waiting go out on the new one; one that broke soon after it came up (a
 * shard that closes right after HELLO) is redialled after the backoff,
 * and its waiting ops fail now, as while a shard is down. */
void xfer_tcp_conn_lost(tcp_conn *c, bool bad_peer)
{
    if (c->state != C_UP) {
        go_down(c);
        return;
    }
    c->t->st.losses++;
    c->t->st.bad_frames += bad_peer;
    close_bev(c);
    c->state = C_DOWN;
    fail_list(c, &c->sent, XFER_ERR_CONN_LOST);
    uint64_t delay = next_delay(c);
    if (delay)
        fail_list(c, &c->wait, XFER_ERR_CONN_LOST);
    redial(c, delay);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    tcp_conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        int one = 1;
        evutil_socket_t fd = bufferevent_getfd(bev);
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        uint8_t buf[XFER_WIRE_MAX_FIXED];
        c->challenged = false;
        if (xfer_auth_hello(&c->hello, XFER_WIRE_ROLE_PRODUCER,
                            c->t->cfg.group, c->shard, c->t->session) != 0) {
            xfer_tcp_conn_lost(c, false);
            return;
        }
        size_t n = xfer_wire_encode(&c->hello, c->next_req, buf, sizeof buf);
        c->hello_req = c->next_req++;
        c->state = C_HELLO;
        if (!xfer_tcp_io_queue(c, buf, n))
            xfer_tcp_conn_lost(c, false);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
        xfer_tcp_conn_lost(c, false);
}

static void start_connect(tcp_conn *c)
{
    xfer_tcp *t = c->t;
    t->st.reconnects += c->dialled;
    c->dialled = true;
    c->state = C_CONNECTING;
    c->bev = bufferevent_socket_new(t->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!c->bev) {
        go_down(c);
        return;
    }
    bufferevent_set_max_single_write(c->bev, 4 << 20);
    bufferevent_set_max_single_read(c->bev, 1 << 20);
    bufferevent_setwatermark(c->bev, EV_WRITE, t->cfg.low_watermark, 0);
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    struct timeval tv = xfer_timer_delay(t->cfg.connect_timeout_ns);
    bufferevent_set_timeouts(c->bev, &tv, &tv);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(c->bev, (struct sockaddr *)&c->sa,
                                   c->salen) != 0)
        go_down(c);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    start_connect(arg);
}

/* An aborted write still referenced after the grace period: reset. */
static void on_grace(evutil_socket_t fd, short what, void *arg)
{
    tcp_conn *c = arg;
    for (tcp_op *op = op_of(c->sent.head); op; op = op_of(op->link.next))
        if (op->done && op->ref_held) {
            c->t->st.resets++;
            xfer_tcp_conn_lost(c, false);
            return;
        }
}

/* ---------------------------------------------------------------------- */
/* The ops table                                                           */
/* ---------------------------------------------------------------------- */

static uint16_t t_nshards(void *self)
{
    return ((xfer_tcp *)self)->cfg.nshards;
}

static int t_attach(void *self, struct xfer_engine *e, uint32_t group)
{
    xfer_tcp *t = self;
    if (t->engine)
        return XFER_ERR_BUSY;
    t->engine = e;
    return 0;
}

static void tcp_free(xfer_tcp *t);

/* The engine lets go (xfer_engine_del).  A transport the user deleted
 * while it was attached is freed now: from here on nothing uses it. */
static void t_detach(void *self)
{
    xfer_tcp *t = self;
    t->engine = NULL;
    memset(t->pools, 0, sizeof t->pools); /* that engine's pools */
    if (t->del_pending)
        tcp_free(t);
}

/* Start op a; given: with the caller's CRC `crc` (a COMMIT or EAGER). */
static int start_op(xfer_tcp *t, const xfer_action *a, const void *src,
                    bool given, uint32_t crc)
{
    bool data = a->kind == XFER_ACT_WRITE || a->kind == XFER_ACT_EAGER;
    uint32_t max = a->kind == XFER_ACT_EAGER ? XFER_WIRE_MAX_EAGER
                                             : XFER_WIRE_MAX_DATA;
    if (a->shard >= t->cfg.nshards ||
        xfer_action_op(a->kind) == XFER_OP_COUNT_ ||
        (data && (a->len > max || (a->len && !src))))
        return XFER_ERR_INVALID_ARG;
    if (q_reserve(t, (size_t)t->qring.n + t->outstanding + 1) != 0)
        return XFER_ERR_NOMEM;
    tcp_op *op = op_get(t);
    if (!op)
        return XFER_ERR_NOMEM;
    tcp_conn *c = &t->conns[a->shard];
    op->a = *a;
    op->src = src;
    op->crc_given = given;
    op->crc = crc;
    op->conn = c;
    op->res = (xfer_shard_result){.id = a->id, .attempt = a->attempt,
                                  .shard = a->shard,
                                  .op = (uint8_t)xfer_action_op(a->kind)};
    t->outstanding++;
    t->st.ops_started++;
    if (c->state == C_GONE) {
        t->st.failed_gone++;
        finish(t, op, XFER_ERR_SHARD_GONE);
        maybe_free(op);
    } else if (c->state == C_DOWN) {
        t->st.failed_down++;
        finish(t, op, XFER_ERR_CONN_LOST);
        maybe_free(op);
    } else if (c->state != C_UP || !xfer_list_empty(&c->wait) ||
               above_high(c)) {
        t->st.ops_waited++;
        list_push(&c->wait, op, L_WAIT);
    } else {
        send_op(c, op);
    }
    return 0;
}

static int t_start(void *self, const xfer_action *a, const void *src)
{
    return start_op(self, a, src, false, 0);
}

static int t_start_crc(void *self, const xfer_action *a, const void *src,
                       uint32_t crc)
{
    if (a->kind != XFER_ACT_COMMIT && a->kind != XFER_ACT_EAGER)
        return XFER_ERR_INVALID_ARG;
    return start_op(self, a, src, true, crc);
}

static tcp_op *find_abortable(tcp_conn *c, const xfer_action *a)
{
    xfer_list *ls[2] = {&c->wait, &c->sent};
    for (int i = 0; i < 2; i++)
        for (tcp_op *op = op_of(ls[i]->head); op; op = op_of(op->link.next))
            if (op->a.id == a->id && op->a.attempt == a->attempt &&
                xfer_action_op(op->a.kind) == a->op && !op->done)
                return op;
    return NULL;
}

static void t_abort(void *self, const xfer_action *a)
{
    xfer_tcp *t = self;
    if (a->shard >= t->cfg.nshards)
        return;
    tcp_conn *c = &t->conns[a->shard];
    tcp_op *op = find_abortable(c, a);
    if (!op)
        return; /* answered already: its result is on the way */
    t->st.aborted++;
    if (op->list == L_WAIT) {
        list_unlink(&c->wait, op);
        finish(t, op, XFER_ERR_ABORTED);
        maybe_free(op);
        return;
    }
    /* Sent: its reply, when it comes, is absorbed.  A write whose bytes
     * are still referenced answers once libevent lets go of them. */
    finish(t, op, XFER_ERR_ABORTED);
    if (op->ref_held && !evtimer_pending(c->grace_ev, NULL)) {
        struct timeval tv = xfer_timer_delay(t->cfg.abort_grace_ns);
        evtimer_add(c->grace_ev, &tv);
    }
}

/* The engine's staging pools: host ones only (a device pool is never
 * added), kept for host_staged. */
static int t_pool_added(void *self, uint32_t pool, void *base, size_t len)
{
    xfer_tcp *t = self;
    if (pool < TCP_POOLS_MAX) {
        t->pools[pool].base = base;
        t->pools[pool].len = len;
    }
    return 0;
}

static void t_pool_removed(void *self, uint32_t pool)
{
    xfer_tcp *t = self;
    if (pool < TCP_POOLS_MAX) {
        t->pools[pool].base = NULL;
        t->pools[pool].len = 0;
    }
}

static const xfer_transport_ops tcp_ops = {
    .version = XFER_TRANSPORT_OPS_VERSION,
    .name = "tcp",
    .nshards = t_nshards,
    .attach = t_attach,
    .start = t_start,
    .abort = t_abort,
    .pool_added = t_pool_added,
    .pool_removed = t_pool_removed,
    .detach = t_detach,
    .eager_ok = t_eager_ok,
    .refresh = t_refresh,
    .start_crc = t_start_crc,
};

xfer_transport xfer_tcp_transport(xfer_tcp *t)
{
    return (xfer_transport){.ops = &tcp_ops, .self = t};
}

/* ---------------------------------------------------------------------- */
/* Public API                                                              */
/* ---------------------------------------------------------------------- */

/* The bytes each version of xfer_tcp_config and _stats holds (util.h). */
static const size_t config_lens[] = {offsetof(xfer_tcp_config, dir),
                                     sizeof(xfer_tcp_config)};
static const size_t stats_lens[] = {
    offsetof(xfer_tcp_stats, bad_replies),
    offsetof(xfer_tcp_stats, crcs_sent),
    offsetof(xfer_tcp_stats, crcs_given), sizeof(xfer_tcp_stats)};

void xfer_tcp_config_default(xfer_tcp_config *cfg)
{
    if (!cfg)
        return;
    *cfg = (xfer_tcp_config){.version = XFER_TCP_CONFIG_VERSION,
                             .connect_timeout_ns = 2000000000ull,
                             .reconnect_min_ns = 10000000ull,
                             .reconnect_max_ns = 1000000000ull,
                             .high_watermark = 32u << 20,
                             .abort_grace_ns = 1000000000ull};
}

/* Zero fields take their defaults (those of the function above, and the
 * derived low watermark). */
static void set_defaults(xfer_tcp_config *c)
{
    if (!c->connect_timeout_ns)
        c->connect_timeout_ns = 2000000000ull;
    if (!c->reconnect_min_ns)
        c->reconnect_min_ns = 10000000ull;
    if (!c->reconnect_max_ns)
        c->reconnect_max_ns = 1000000000ull;
    if (c->reconnect_max_ns < c->reconnect_min_ns)
        c->reconnect_max_ns = c->reconnect_min_ns;
    if (!c->high_watermark)
        c->high_watermark = 32u << 20;
    if (!c->low_watermark || c->low_watermark > c->high_watermark)
        c->low_watermark = c->high_watermark / 4;
    if (!c->abort_grace_ns)
        c->abort_grace_ns = 1000000000ull;
    c->addrs = NULL; /* copied into the connections */
    c->dir_group = NULL; /* copied into t->dir_group */
}

static int init_conn(xfer_tcp *t, uint16_t k, const char *addr)
{
    tcp_conn *c = &t->conns[k];
    c->t = t;
    c->shard = k;
    if (addr) {
        if (xfer_addr_resolve(addr, &c->sa, &c->salen) != 0)
            return XFER_ERR_INVALID_ARG;
    } else {
        c->state = C_GONE; /* until the directory names it */
    }
    uint8_t seed[sizeof t->session + 2];
    memcpy(seed, t->session, sizeof t->session);
    seed[sizeof t->session] = (uint8_t)k;
    seed[sizeof t->session + 1] = (uint8_t)(k >> 8);
    xfer_backoff_init(&c->bo, seed, sizeof seed);
    c->retry_ev = evtimer_new(t->base, on_retry, c);
    c->grace_ev = evtimer_new(t->base, on_grace, c);
    return c->retry_ev && c->grace_ev ? 0 : XFER_ERR_IO;
}

static void on_member(void *ud, const char *group, uint16_t shard,
                      const xfer_dir_entry *e);

int xfer_tcp_new(struct event_base *base, const xfer_tcp_config *cfg,
                 xfer_tcp **out)
{
    return xfer_tcp_new_hooked(base, cfg, NULL, out);
}

int xfer_tcp_new_hooked(struct event_base *base, const xfer_tcp_config *cfg,
                        const xfer_tcp_hooks *hooks, xfer_tcp **out)
{
    xfer_tcp_config c;
    xfer_tcp_config_default(&c);
    if (!base || !out ||
        (cfg && xfer_util_versioned_copy(&c, cfg, cfg->version, config_lens,
                                         XFER_UTIL_NVERSIONS(config_lens))) ||
        (!c.addrs && !c.dir) || c.nshards == 0 ||
        c.nshards > XFER_MAX_SHARDS ||
        (c.dir && (!c.dir_group || strlen(c.dir_group) >= 64)))
        return XFER_ERR_INVALID_ARG;
    if (c.dir && c.group == 0)
        c.group = xfer_dir_group_id(c.dir_group);
    xfer_tcp *t = xfer_util_calloc(&c.alloc, 1, sizeof *t);
    if (!t)
        return XFER_ERR_NOMEM;
    t->base = base;
    t->cfg = c;
    if (hooks)
        t->hooks = *hooks;
    set_defaults(&t->cfg);
    int rc = xfer_auth_client_init(c.secret, c.secret_len, c.session,
                                   t->secret, &t->secret_len, t->session);
    t->cfg.secret = NULL; /* copied */
    if (rc) {
        xfer_util_free(&c.alloc, t);
        return rc;
    }
    xfer_base_ref(base); /* dropped by tcp_free: see base_ref.h */
    rc = XFER_ERR_IO;
    t->deliver_ev = event_new(base, -1, 0, on_deliver, t);
    t->flush_ev = event_new(base, -1, 0, xfer_tcp_io_on_flush, t);
    if (!t->deliver_ev || !t->flush_ev)
        goto out_fail;
    for (uint16_t k = 0; k < c.nshards; k++) {
        rc = init_conn(t, k, c.addrs ? c.addrs[k] : NULL);
        if (rc)
            goto out_fail;
    }
    if (c.dir) {
        rc = xfer_dir_watch(c.dir, c.dir_group, on_member, t);
        if (rc)
            goto out_fail;
        strcpy(t->dir_group, c.dir_group);
    }
    for (uint16_t k = 0; k < c.nshards; k++)
        if (t->conns[k].state != C_GONE)
            start_connect(&t->conns[k]);
    *out = t;
    return 0;
out_fail:
    xfer_tcp_del(t);
    return rc;
}

/* Ops still alive at del: those holding a reference become orphans that
 * their cleanup frees (with a copy of the allocator: `a` goes with the
 * transport); the rest are freed now. */
static void drop_list(xfer_list *l, const xfer_allocator *a)
{
    while (!xfer_list_empty(l)) {
        tcp_op *op = op_of(l->head);
        list_unlink(l, op);
        if (op->ref_held) {
            op->orphan = true;
            op->orphan_alloc = *a;
        } else {
            xfer_util_free(a, op);
        }
    }
}

/* Deleted while attached: the engine still calls into the transport until
 * it detaches (a running loop, xfer_engine_del's detach), so the free
 * waits for that detach. */
void xfer_tcp_del(xfer_tcp *t)
{
    if (!t)
        return;
    if (t->engine) {
        /* The free waits for the engine's detach, but the caller may
         * delete the directory as soon as this returns (tcp.h: it must
         * outlive the transport, which is gone for the caller now): stop
         * the watch here, and the membership stays as it is meanwhile. */
        if (t->dir_group[0])
            xfer_dir_unwatch(t->cfg.dir, t->dir_group, on_member, t);
        t->dir_group[0] = '\0';
        t->del_pending = true;
    } else {
        tcp_free(t);
    }
}

static void tcp_free(xfer_tcp *t)
{
    struct event_base *base = t->base;
    if (t->dir_group[0])
        xfer_dir_unwatch(t->cfg.dir, t->dir_group, on_member, t);
    for (uint16_t k = 0; k < t->cfg.nshards; k++) {
        tcp_conn *c = &t->conns[k];
        for (uint32_t i = 0; i < c->nsegs; i++)
            if (c->segs[i].op)
                c->segs[i].op->ref_held = false; /* never written */
        drop_list(&c->wait, &t->cfg.alloc);
        drop_list(&c->sent, &t->cfg.alloc);
        xfer_util_free(&t->cfg.alloc, c->flat);
        xfer_util_free(&t->cfg.alloc, c->segs);
        xfer_util_free(&t->cfg.alloc, c->runs);
        xfer_util_free(&t->cfg.alloc, c->rfs);
        xfer_util_free(&t->cfg.alloc, c->in);
        if (c->rd_ev)
            event_free(c->rd_ev);
        if (c->bev)
            bufferevent_free(c->bev);
        if (c->retry_ev)
            event_free(c->retry_ev);
        if (c->grace_ev)
            event_free(c->grace_ev);
    }
    if (t->deliver_ev)
        event_free(t->deliver_ev);
    if (t->flush_ev)
        event_free(t->flush_ev);
    xfer_allocator a = t->cfg.alloc;
    while (t->free_ops) {
        tcp_op *op = t->free_ops;
        t->free_ops = op->next_free;
        xfer_util_free(&a, op);
    }
    xfer_util_free(&a, t->q);
    xfer_util_free(&a, t);
    /* Last: an engine-owned base may be freed here, and its pending
     * finalizers (the bufferevents above) still run on it. */
    xfer_base_unref(base);
}

int xfer_tcp_stats_get_versioned(const xfer_tcp *t, uint32_t version,
                                 xfer_tcp_stats *st)
{
    if (!t || !st)
        return XFER_ERR_INVALID_ARG;
    return xfer_util_versioned_copy(st, &t->st, version, stats_lens,
                                    XFER_UTIL_NVERSIONS(stats_lens));
}

bool xfer_tcp_connected(const xfer_tcp *t, uint16_t shard)
{
    return t && shard < t->cfg.nshards && t->conns[shard].state == C_UP;
}

int xfer_tcp_set_shard(xfer_tcp *t, uint16_t shard, const char *addr)
{
    if (!t || shard >= t->cfg.nshards)
        return XFER_ERR_INVALID_ARG;
    tcp_conn *c = &t->conns[shard];
    if (!addr) {
        if (c->state == C_GONE)
            return 0;
        t->st.gones++;
        c->state = C_GONE; /* first: the link-down hook sees it gone */
        close_bev(c);
        evtimer_del(c->retry_ev);
        fail_list(c, &c->sent, XFER_ERR_SHARD_GONE);
        fail_list(c, &c->wait, XFER_ERR_SHARD_GONE);
        return 0;
    }
    struct sockaddr_storage sa;
    int salen;
    if (xfer_addr_resolve(addr, &sa, &salen) != 0)
        return XFER_ERR_INVALID_ARG;
    bool same = salen == c->salen && !memcmp(&sa, &c->sa, (size_t)salen);
    if (same && c->state != C_GONE)
        return 0;
    t->st.moves++;
    if (c->state != C_GONE) {
        close_bev(c);
        evtimer_del(c->retry_ev);
        fail_list(c, &c->sent, XFER_ERR_CONN_LOST);
        fail_list(c, &c->wait, XFER_ERR_CONN_LOST);
    }
    c->sa = sa;
    c->salen = salen;
    c->state = C_DOWN;
    c->bo.cur_ns = 0; /* a new home: no backoff carried over */
    start_connect(c);
    return 0;
}

uint32_t xfer_tcp_group(const xfer_tcp *t)
{
    return t->cfg.group;
}

bool xfer_tcp_gone(const xfer_tcp *t, uint16_t shard)
{
    return t && shard < t->cfg.nshards && t->conns[shard].state == C_GONE;
}

/* The directory reports a member of our group (dir_group on cfg.dir). */
static void on_member(void *ud, const char *group, uint16_t shard,
                      const xfer_dir_entry *e)
{
    xfer_tcp *t = ud;
    uint32_t need = t->hooks.dir_transports ? t->hooks.dir_transports
                                            : XFER_DIR_TCP;
    if (shard >= t->cfg.nshards)
        return;
    if (!e || (e->transports & need) != need) {
        xfer_tcp_set_shard(t, shard, NULL);
        return;
    }
    char addr[XFER_DIR_ADDR_MAX + 16];
    bool v6 = strchr(e->addr, ':') != NULL;
    snprintf(addr, sizeof addr, v6 ? "[%s]:%u" : "%s:%u", e->addr,
             (unsigned)e->port);
    if (xfer_tcp_set_shard(t, shard, addr) != 0)
        xfer_tcp_set_shard(t, shard, NULL); /* unresolvable: not usable */
}

uint32_t xfer_tcp_outstanding(const xfer_tcp *t)
{
    return t ? t->outstanding : 0;
}

void xfer_tcp_drop(xfer_tcp *t, uint16_t shard)
{
    if (t && shard < t->cfg.nshards && t->conns[shard].bev)
        xfer_tcp_conn_lost(&t->conns[shard], false);
}

void xfer_tcp_open(xfer_tcp *t, uint16_t shard)
{
    tcp_conn *c = &t->conns[shard];
    if (c->state != C_GATED)
        return;
    c->state = C_UP;
    xfer_tcp_flush_wait(c);
}

int xfer_tcp_start_op(xfer_tcp *t, const xfer_action *a)
{
    return xfer_tcp_start_op_src(t, a, NULL);
}

int xfer_tcp_start_op_src(xfer_tcp *t, const xfer_action *a, const void *src)
{
    return a->kind == XFER_ACT_WRITE ? XFER_ERR_INVALID_ARG
                                     : t_start(t, a, src);
}

int xfer_tcp_refresh(xfer_tcp *t, uint16_t shard, uint64_t id,
                     uint32_t attempt, uint64_t resv_id, uint64_t want_ns)
{
    return t_refresh(t, shard, id, attempt, resv_id, want_ns);
}

int xfer_tcp_start_op_crc(xfer_tcp *t, const xfer_action *a,
                          const void *src, uint32_t crc)
{
    return t_start_crc(t, a, src, crc);
}

void xfer_tcp_abort_op(xfer_tcp *t, const xfer_action *a)
{
    t_abort(t, a);
}

int xfer_tcp_split_addrs(const char *list, char *buf, size_t cap,
                         const char **addrs, int max)
{
    if (!list || !buf || !addrs || max <= 0 || strlen(list) >= cap)
        return XFER_ERR_INVALID_ARG;
    memcpy(buf, list, strlen(list) + 1);
    int n = 0;
    for (char *p = buf; *p;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        struct sockaddr_storage ss;
        int sl;
        if (n == max || !*p || xfer_addr_resolve(p, &ss, &sl) != 0)
            return XFER_ERR_INVALID_ARG;
        addrs[n++] = p;
        p = comma ? comma + 1 : p + strlen(p);
    }
    return n ? n : XFER_ERR_INVALID_ARG;
}
