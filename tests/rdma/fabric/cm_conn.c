/*
 * tests/rdma/fabric/cm_conn.c - the RC connection handshake and teardown
 * of rdmacm over the fabric's wire: rdma_connect, rdma_accept,
 * rdma_reject, rdma_disconnect, the REQ/REP/REJ/RTU/DREQ/DREP messages,
 * and what a lost link does to an id.
 *
 * The event flow is the one librdmacm gives over IB:
 *   active:  ADDR_RESOLVED, ROUTE_RESOLVED, then ESTABLISHED (the REP's
 *            private data, 196 bytes) or REJECTED (status: the reject
 *            reason, 28 for rdma_reject, 8 when nobody listens; 148 bytes)
 *            or UNREACHABLE (-ETIMEDOUT);
 *   passive: CONNECT_REQUEST (a new id, 56 bytes of private data), then
 *            ESTABLISHED once the RTU arrives;
 *   both:    DISCONNECTED (once), then TIMEWAIT_EXIT.
 * Private data arrives padded with zeroes to those IB sizes, so a caller
 * must carry its own lengths, as on hardware.
 *
 * QP states follow librdmacm: rdma_create_qp leaves INIT; the passive QP
 * goes to RTS in rdma_accept; the active QP goes to RTS when the
 * application takes ESTABLISHED (librdmacm does it inside
 * rdma_get_cm_event) and only then is the RTU sent; rdma_disconnect and a
 * REJ move the QP to error, which flushes it.
 *
 * What must stay true:
 *  - DISCONNECTED is delivered at most once per id, and only to an id that
 *    got (or had queued) ESTABLISHED;
 *  - a lost link ends the handshake wherever it stood, with the event real
 *    rdmacm gives there, and never leaves an id waiting forever.
 */
#include <errno.h>
#include <string.h>

#include "fab.h"

typedef struct cm_req {
    uint32_t qpn;
    uint8_t resp_res, init_depth, retry, rnr_retry;
    uint8_t pdlen, pad[7];
    struct sockaddr_storage src, dst;
    uint8_t pdata[FAB_REQ_PDATA];
} cm_req;

typedef struct cm_rep {
    uint32_t qpn;
    uint8_t resp_res, init_depth, rnr_retry, pdlen;
    uint8_t pdata[FAB_REP_PDATA];
} cm_rep;

typedef struct cm_rej {
    int32_t status;
    uint8_t pdlen, pad[3];
    uint8_t pdata[FAB_REJ_PDATA];
} cm_rej;

static void send_rej(fab_conn *c, int status, const void *pdata,
                     uint8_t pdlen)
{
    cm_rej rej = {.status = status, .pdlen = pdlen};
    if (pdlen)
        memcpy(rej.pdata, pdata, pdlen);
    fab_wire_send(c, FAB_M_REJ, 0, &rej, sizeof rej, NULL, 0);
}

/* The id lets go of its link (it is closed once its output is out). */
static void drop_link(fab_cm_id *f)
{
    if (f->conn)
        fab_wire_close(f->conn);
    f->conn = NULL;
}

static void disconnected(fab_cm_id *f)
{
    if (!f->disc_queued)
        fab_cm_event(f, f, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0, 0);
    f->disc_queued = true;
}

static void timewait(fab_cm_id *f)
{
    fab_cm_event(f, f, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, NULL, 0, 0);
    f->state = FAB_CM_DONE;
}

/* An attempt that ends before it connected. */
static void failed(fab_cm_id *f, enum rdma_cm_event_type type, int status,
                   const void *pdata, size_t pdlen, size_t pdmax)
{
    fab_cm_event(f, f, type, status, pdata, pdlen, pdmax);
    if (f->id.qp)
        fab_qp_error(fab_qp_of(f->id.qp), IBV_WC_WR_FLUSH_ERR);
    f->state = FAB_CM_DONE;
}

/* ---- the calls -------------------------------------------------------- */

FAB_API int rdma_connect(struct rdma_cm_id *id,
                         struct rdma_conn_param *param)
{
    static const struct rdma_conn_param none = {.retry_count = 7,
                                                 .rnr_retry_count = 7};
    int err = 0;
    fab_enter();
    fab_cm_id *f = FAB_OF(id, fab_cm_id, id);
    const struct rdma_conn_param *p = param ? param : &none;
    if (f->state != FAB_CM_ROUTE_RESOLVED || !id->qp ||
        p->private_data_len > FAB_REQ_PDATA) {
        err = EINVAL;
        goto out;
    }
    uint16_t port = ntohs(id->route.addr.dst_addr.sa_family == AF_INET
                              ? id->route.addr.dst_sin.sin_port
                              : id->route.addr.dst_sin6.sin6_port);
    fab_conn *c = fab_wire_connect(port);
    if (!c) {
        if (errno == ECONNREFUSED) /* nobody listens: IB CM rejects */
            failed(f, RDMA_CM_EVENT_REJECTED, FAB_REJ_NO_SERVICE, NULL, 0,
                   FAB_REJ_PDATA);
        else
            failed(f, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL, 0, 0);
        goto out;
    }
    fab_qp *q = fab_qp_of(id->qp);
    cm_req req = {
        .qpn = q->qp.qp_num,
        .resp_res = p->responder_resources,
        .init_depth = p->initiator_depth,
        .retry = p->retry_count,
        .rnr_retry = p->rnr_retry_count,
        .pdlen = p->private_data_len,
        .src = id->route.addr.src_storage,
        .dst = id->route.addr.dst_storage,
    };
    if (p->private_data_len)
        memcpy(req.pdata, p->private_data, p->private_data_len);
    c->id = f;
    c->qp = q;
    q->conn = c;
    f->conn = c;
    f->state = FAB_CM_CONNECT;
    fab_wire_send(c, FAB_M_REQ, 0, &req, sizeof req, NULL, 0);
out:
    fab_exit();
    if (err)
        errno = err;
    return err ? -1 : 0;
}

FAB_API int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
    int err = 0;
    fab_enter();
    fab_cm_id *f = FAB_OF(id, fab_cm_id, id);
    if (f->state != FAB_CM_REQ_RCVD || !id->qp ||
        (p && p->private_data_len > FAB_REP_PDATA)) {
        err = EINVAL;
        goto out;
    }
    if (f->lost || !f->conn) { /* the peer went away: the REP times out */
        failed(f, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL, 0, 0);
        goto out;
    }
    fab_qp *q = fab_qp_of(id->qp);
    cm_rep rep = {.qpn = q->qp.qp_num};
    if (p) {
        rep.resp_res = p->responder_resources;
        rep.init_depth = p->initiator_depth;
        rep.rnr_retry = p->rnr_retry_count;
        rep.pdlen = p->private_data_len;
        if (p->private_data_len)
            memcpy(rep.pdata, p->private_data, p->private_data_len);
    }
    q->dest_qpn = f->peer_qpn;
    q->conn = f->conn;
    f->conn->qp = q;
    fab_qp_set_state(q, IBV_QPS_RTS); /* via RTR, as librdmacm does */
    f->state = FAB_CM_ACCEPTED;
    fab_wire_send(f->conn, FAB_M_REP, 0, &rep, sizeof rep, NULL, 0);
out:
    fab_exit();
    if (err)
        errno = err;
    return err ? -1 : 0;
}

FAB_API int rdma_reject(struct rdma_cm_id *id, const void *private_data,
                        uint8_t private_data_len)
{
    int err = 0;
    fab_enter();
    fab_cm_id *f = FAB_OF(id, fab_cm_id, id);
    if (f->state != FAB_CM_REQ_RCVD || private_data_len > FAB_REJ_PDATA) {
        err = EINVAL;
    } else {
        if (f->conn && !f->lost)
            send_rej(f->conn, FAB_REJ_CONSUMER, private_data,
                     private_data_len);
        drop_link(f);
        f->state = FAB_CM_DONE;
    }
    fab_exit();
    if (err)
        errno = err;
    return err ? -1 : 0;
}

FAB_API int rdma_disconnect(struct rdma_cm_id *id)
{
    int err = 0;
    fab_enter();
    fab_cm_id *f = FAB_OF(id, fab_cm_id, id);
    switch (f->state) {
    case FAB_CM_REP_RCVD:
    case FAB_CM_ACCEPTED:
    case FAB_CM_ESTABLISHED:
    case FAB_CM_DISCONNECT:
    case FAB_CM_DONE:
        break;
    case FAB_CM_IDLE:
    case FAB_CM_BOUND:
    case FAB_CM_LISTEN:
    case FAB_CM_ADDR_QUERY:
    case FAB_CM_ADDR_RESOLVED:
    case FAB_CM_ROUTE_QUERY:
    case FAB_CM_ROUTE_RESOLVED:
    case FAB_CM_CONNECT:
    case FAB_CM_REQ_RCVD:
        err = EINVAL;
        goto out;
    }
    if (id->qp) /* IB: the QP goes to error first, flushing it */
        fab_qp_error(fab_qp_of(id->qp), IBV_WC_WR_FLUSH_ERR);
    if (!f->conn || f->lost)
        goto out;
    if (f->dreq_rcvd) { /* answer the peer's DREQ */
        fab_wire_send(f->conn, FAB_M_DREP, 0, NULL, 0, NULL, 0);
        drop_link(f);
        timewait(f);
    } else if (!f->dreq_sent) {
        fab_wire_send(f->conn, FAB_M_DREQ, 0, NULL, 0, NULL, 0);
        f->dreq_sent = true;
        f->state = FAB_CM_DISCONNECT;
    }
out:
    fab_exit();
    if (err)
        errno = err;
    return err ? -1 : 0;
}

/* ---- messages --------------------------------------------------------- */

static void on_req(fab_conn *c, const uint8_t *body, size_t len)
{
    cm_req req;
    fab_listener *l = c->lis;
    fab_cm_id *child = NULL;
    if (len != sizeof req) {
        fab_wire_lose(c);
        return;
    }
    memcpy(&req, body, sizeof req);
    if (!l || !l->id || !(child = fab_cm_new_child(l->id))) {
        send_rej(c, l && l->id ? FAB_REJ_CONSUMER : FAB_REJ_NO_SERVICE,
                 NULL, 0);
        fab_wire_close(c);
        return;
    }
    c->lis = NULL;
    c->id = child;
    child->conn = c;
    child->peer_qpn = req.qpn;
    child->id.route.addr.src_storage = req.dst;
    child->id.route.addr.dst_storage = req.src;
    child->id.route.num_paths = 1;
    fab_cmev *e = fab_cm_event(child, l->id, RDMA_CM_EVENT_CONNECT_REQUEST, 0,
                               req.pdata, req.pdlen, FAB_REQ_PDATA);
    if (e) {
        e->ev.param.conn.responder_resources = req.init_depth;
        e->ev.param.conn.initiator_depth = req.resp_res;
        e->ev.param.conn.retry_count = req.retry;
        e->ev.param.conn.rnr_retry_count = req.rnr_retry;
        e->ev.param.conn.qp_num = req.qpn;
    }
}

static void on_rep(fab_cm_id *f, const uint8_t *body, size_t len)
{
    cm_rep rep;
    if (len != sizeof rep || f->state != FAB_CM_CONNECT)
        return;
    memcpy(&rep, body, sizeof rep);
    f->peer_qpn = rep.qpn;
    if (f->id.qp)
        fab_qp_of(f->id.qp)->dest_qpn = rep.qpn;
    f->state = FAB_CM_REP_RCVD;
    fab_cmev *e = fab_cm_event(f, f, RDMA_CM_EVENT_ESTABLISHED, 0, rep.pdata,
                               rep.pdlen, FAB_REP_PDATA);
    if (e) {
        e->ev.param.conn.responder_resources = rep.init_depth;
        e->ev.param.conn.initiator_depth = rep.resp_res;
        e->ev.param.conn.rnr_retry_count = rep.rnr_retry;
        e->ev.param.conn.qp_num = rep.qpn;
    }
}

static void on_rej(fab_cm_id *f, const uint8_t *body, size_t len)
{
    cm_rej rej;
    if (len != sizeof rej || f->state != FAB_CM_CONNECT)
        return;
    memcpy(&rej, body, sizeof rej);
    drop_link(f);
    failed(f, RDMA_CM_EVENT_REJECTED, rej.status, rej.pdata,
           rej.pdlen, FAB_REJ_PDATA);
}

static void on_dreq(fab_cm_id *f)
{
    if (f->state != FAB_CM_REP_RCVD && f->state != FAB_CM_ACCEPTED &&
        f->state != FAB_CM_ESTABLISHED && f->state != FAB_CM_DISCONNECT)
        return;
    if (f->state == FAB_CM_ACCEPTED) /* data flowed: the RTU is implied */
        fab_cm_event(f, f, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0, 0);
    disconnected(f);
    if (f->dreq_sent) { /* both sides asked at once: each answers */
        fab_wire_send(f->conn, FAB_M_DREP, 0, NULL, 0, NULL, 0);
        drop_link(f);
        timewait(f);
    } else {
        f->dreq_rcvd = true;
        f->state = FAB_CM_DISCONNECT;
    }
}

void fab_cmconn_msg(fab_conn *c, uint32_t type, const uint8_t *body,
                    size_t len)
{
    fab_cm_id *f = c->id;
    if (type == FAB_M_REQ) {
        if (!f && c->lis)
            on_req(c, body, len);
        return;
    }
    if (!f)
        return; /* a link being closed: nothing more matters */
    switch (type) {
    case FAB_M_REP:
        on_rep(f, body, len);
        break;
    case FAB_M_REJ:
        on_rej(f, body, len);
        break;
    case FAB_M_RTU:
        if (f->state == FAB_CM_ACCEPTED) {
            f->state = FAB_CM_ESTABLISHED;
            fab_cm_event(f, f, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0, 0);
        }
        break;
    case FAB_M_DREQ:
        on_dreq(f);
        break;
    case FAB_M_DREP:
        if (f->dreq_sent && f->state == FAB_CM_DISCONNECT) {
            disconnected(f);
            drop_link(f);
            timewait(f);
        }
        break;
    default:
        break;
    }
}

void fab_cmconn_lost(fab_conn *c)
{
    fab_cm_id *f = c->id;
    f->conn = NULL;
    f->lost = true;
    switch (f->state) {
    case FAB_CM_CONNECT:
    case FAB_CM_ACCEPTED:
        failed(f, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL, 0, 0);
        break;
    case FAB_CM_REP_RCVD:
    case FAB_CM_ESTABLISHED:
    case FAB_CM_DISCONNECT:
        disconnected(f);
        timewait(f);
        break;
    case FAB_CM_IDLE:
    case FAB_CM_BOUND:
    case FAB_CM_LISTEN:
    case FAB_CM_ADDR_QUERY:
    case FAB_CM_ADDR_RESOLVED:
    case FAB_CM_ROUTE_QUERY:
    case FAB_CM_ROUTE_RESOLVED:
    case FAB_CM_REQ_RCVD: /* rdma_accept will find it gone */
    case FAB_CM_DONE:
        break;
    }
}

void fab_cmconn_taken(fab_cmev *e)
{
    fab_cm_id *f = FAB_OF(e->ev.id, fab_cm_id, id);
    enum rdma_cm_event_type t = e->ev.event;
    if (t == RDMA_CM_EVENT_ADDR_RESOLVED && fab_cm_attach_verbs(f) < 0)
        e->ev.status = -ENOMEM;
    if (t == RDMA_CM_EVENT_REJECTED)
        fab_g.ctr.rejects++;
    if (t == RDMA_CM_EVENT_DISCONNECTED)
        fab_g.ctr.disconnects++;
    if (t != RDMA_CM_EVENT_ESTABLISHED)
        return;
    fab_g.ctr.connections++;
    if (f->state == FAB_CM_REP_RCVD) { /* the active side: RTR, RTS, RTU */
        fab_qp *q = f->id.qp ? fab_qp_of(f->id.qp) : NULL;
        if (q && q->qp.state == IBV_QPS_INIT)
            fab_qp_set_state(q, IBV_QPS_RTS);
        f->state = FAB_CM_ESTABLISHED;
        if (f->conn)
            fab_wire_send(f->conn, FAB_M_RTU, 0, NULL, 0, NULL, 0);
    }
}

void fab_cmconn_release(fab_cm_id *f)
{
    fab_conn *c = f->conn;
    if (c && !c->lost) {
        if (f->state == FAB_CM_REQ_RCVD)
            send_rej(c, FAB_REJ_CONSUMER, NULL, 0);
        else if (f->dreq_rcvd)
            fab_wire_send(c, FAB_M_DREP, 0, NULL, 0, NULL, 0);
        else if (!f->dreq_sent && f->state != FAB_CM_CONNECT)
            fab_wire_send(c, FAB_M_DREQ, 0, NULL, 0, NULL, 0);
    }
    drop_link(f);
}
