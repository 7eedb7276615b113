/*
 * tests/rdma/fabric/qp.c - RC queue pairs on the initiator side:
 * ibv_create_qp / ibv_modify_qp / ibv_query_qp / ibv_destroy_qp, the
 * ibv_post_send and ibv_post_recv ops, the execution of the send queue by
 * the progress thread, and the flush that follows any error.
 *
 * The send queue runs as on an RC QP: RDMA WRITE and SEND WRs are read
 * from their (checked) local SGEs and put on the wire in posting order,
 * pipelined; a WR completes when the responder's answer comes back, and
 * completions are produced strictly in posting order.  Bind and local
 * invalidate WRs execute only once every earlier WR has completed (as if
 * fenced), so their effect is never ahead of the writes before them.
 *
 * What must stay true:
 *  - every posted WR completes exactly once, except those still posted
 *    when their QP is destroyed (counted as wrs_dropped);
 *  - an error completion moves the QP to error; from then on every posted
 *    and every newly posted WR completes with IBV_WC_WR_FLUSH_ERR, the
 *    receive queue included, as real RC does;
 *  - in an error completion only wr_id, status, qp_num and vendor_err are
 *    valid, so the fabric poisons opcode (0xff) and byte_len (0) there;
 *  - a successful unsignaled WR produces no completion but is retired.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fab.h"

fab_qp *fab_qp_of(struct ibv_qp *qp)
{
    return FAB_OF(qp, fab_qp, qp);
}

static fab_swr *sq_at(fab_qp *q, uint64_t i)
{
    return &q->sq[i % q->cap.max_send_wr];
}

/* ---- objects ---------------------------------------------------------- */

static bool caps_ok(const struct ibv_qp_cap *c)
{
    return c->max_send_wr >= 1 && c->max_send_wr <= FAB_MAX_QP_WR &&
           c->max_recv_wr <= FAB_MAX_QP_WR && c->max_send_sge <= FAB_MAX_SGE &&
           c->max_recv_sge <= FAB_MAX_SGE &&
           c->max_inline_data <= FAB_MAX_INLINE;
}

/* A QP with its send and receive rings (each WR with its SGE slots). */
static fab_qp *qp_alloc(const struct ibv_qp_cap *cap)
{
    fab_qp *q = calloc(1, sizeof *q);
    uint32_t ssge = cap->max_send_sge ? cap->max_send_sge : 1;
    uint32_t rsge = cap->max_recv_sge ? cap->max_recv_sge : 1;
    uint32_t rwr = cap->max_recv_wr ? cap->max_recv_wr : 1;
    if (!q || !(q->sq = calloc(cap->max_send_wr, sizeof *q->sq)) ||
        !(q->sq_sge = calloc((size_t)cap->max_send_wr * ssge,
                             sizeof *q->sq_sge)) ||
        !(q->rq = calloc(rwr, sizeof *q->rq)) ||
        !(q->rq_sge = calloc((size_t)rwr * rsge, sizeof *q->rq_sge)))
        goto out_free;
    for (uint32_t i = 0; i < cap->max_send_wr; i++)
        q->sq[i].sge = &q->sq_sge[(size_t)i * ssge];
    for (uint32_t i = 0; i < rwr; i++)
        q->rq[i].sge = &q->rq_sge[(size_t)i * rsge];
    return q;
out_free:
    if (q) {
        free(q->sq);
        free(q->sq_sge);
        free(q->rq);
    }
    free(q);
    return NULL;
}

fab_qp *fab_qp_create(fab_pd *pd, struct ibv_qp_init_attr *a, int *err)
{
    *err = EINVAL;
    if (!a->send_cq || !a->recv_cq ||
        a->send_cq->context != pd->pd.context ||
        a->recv_cq->context != pd->pd.context || !caps_ok(&a->cap))
        return NULL;
    *err = EOPNOTSUPP;
    if (a->qp_type != IBV_QPT_RC || a->srq)
        return NULL;
    *err = ENOMEM;
    fab_qp *q = NULL;
    if (fab_g.ctr.qps_live >= FAB_MAX_QP || !(q = qp_alloc(&a->cap)))
        return NULL;
    q->pd = pd;
    q->scq = fab_cq_of(a->send_cq);
    q->rcq = fab_cq_of(a->recv_cq);
    q->cap = a->cap;
    q->sig_all = a->sq_sig_all != 0;
    q->lost_status = IBV_WC_WR_FLUSH_ERR;
    q->qp.context = pd->pd.context;
    q->qp.qp_context = a->qp_context;
    q->qp.pd = &pd->pd;
    q->qp.send_cq = a->send_cq;
    q->qp.recv_cq = a->recv_cq;
    q->qp.qp_num = fab_g.next_qpn++ & 0xffffff;
    q->qp.handle = q->qp.qp_num;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = IBV_QPT_RC;
    pthread_mutex_init(&q->qp.mutex, NULL);
    pthread_cond_init(&q->qp.cond, NULL);
    pd->users++;
    q->scq->users++;
    q->rcq->users++;
    q->next = fab_g.qps;
    if (fab_g.qps)
        fab_g.qps->prev = q;
    fab_g.qps = q;
    fab_g.ctr.qps_live++;
    *err = 0;
    return q;
}

FAB_API struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
                                     struct ibv_qp_init_attr *attr)
{
    int err;
    fab_enter();
    fab_qp *q = fab_qp_create(fab_pd_of(pd), attr, &err);
    fab_exit();
    if (!q)
        errno = err;
    return q ? &q->qp : NULL;
}

/* Forget every posted WR without completing it (destroy, reset). */
static void qp_discard(fab_qp *q)
{
    for (uint64_t i = q->sq_head; i < q->sq_tail; i++)
        free(sq_at(q, i)->inl);
    fab_g.ctr.wrs_dropped += (q->sq_tail - q->sq_head) +
                             (q->rq_tail - q->rq_head);
    q->sq_head = q->sq_exec = q->sq_tail;
    q->rq_head = q->rq_tail;
    q->flush = q->sq_blocked = false;
}

void fab_qp_destroy(fab_qp *q)
{
    qp_discard(q);
    if (q->conn)
        q->conn->qp = NULL;
    fab_async_purge(q);
    if (q->prev)
        q->prev->next = q->next;
    else
        fab_g.qps = q->next;
    if (q->next)
        q->next->prev = q->prev;
    q->pd->users--;
    q->scq->users--;
    q->rcq->users--;
    pthread_mutex_destroy(&q->qp.mutex);
    pthread_cond_destroy(&q->qp.cond);
    free(q->sq);
    free(q->sq_sge);
    free(q->rq);
    free(q->rq_sge);
    free(q);
    fab_g.ctr.qps_live--;
}

FAB_API int ibv_destroy_qp(struct ibv_qp *qp)
{
    fab_enter();
    fab_qp_destroy(fab_qp_of(qp));
    fab_exit();
    return 0;
}

void fab_qp_set_state(fab_qp *q, enum ibv_qp_state s)
{
    q->qp.state = s;
    fab_wake();
}

void fab_qp_error(fab_qp *q, enum ibv_wc_status inflight)
{
    if (q->qp.state != IBV_QPS_ERR)
        q->lost_status = inflight;
    q->qp.state = IBV_QPS_ERR;
    q->flush = true;
    fab_wake();
}

/* Only the moves an application makes itself are accepted: to error (a
 * flush), to reset, reset to init.  RTR and RTS belong to the CM. */
FAB_API int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                          int attr_mask)
{
    int r = 0;
    fab_enter();
    fab_qp *q = fab_qp_of(qp);
    if (attr_mask & IBV_QP_STATE) {
        enum ibv_qp_state to = attr->qp_state;
        if (to == IBV_QPS_ERR) {
            fab_qp_error(q, IBV_WC_WR_FLUSH_ERR);
        } else if (to == IBV_QPS_RESET) {
            qp_discard(q);
            q->qp.state = IBV_QPS_RESET;
        } else if (to == IBV_QPS_INIT && q->qp.state == IBV_QPS_RESET) {
            q->qp.state = IBV_QPS_INIT;
        } else if (to != q->qp.state) {
            r = EINVAL;
        }
    }
    fab_exit();
    return r;
}

FAB_API int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                         int attr_mask, struct ibv_qp_init_attr *init)
{
    (void)attr_mask;
    fab_enter();
    fab_qp *q = fab_qp_of(qp);
    memset(attr, 0, sizeof *attr);
    attr->qp_state = attr->cur_qp_state = q->qp.state;
    attr->path_mtu = IBV_MTU_4096;
    attr->dest_qp_num = q->dest_qpn;
    attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    attr->cap = q->cap;
    attr->port_num = 1;
    attr->timeout = 14;
    attr->retry_cnt = 7;
    attr->rnr_retry = 7;
    memset(init, 0, sizeof *init);
    init->qp_context = q->qp.qp_context;
    init->send_cq = q->qp.send_cq;
    init->recv_cq = q->qp.recv_cq;
    init->cap = q->cap;
    init->qp_type = IBV_QPT_RC;
    init->sq_sig_all = q->sig_all;
    fab_exit();
    return 0;
}

/* ---- posting ---------------------------------------------------------- */

static bool is_data(enum ibv_wr_opcode op)
{
    return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM ||
           op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM;
}

/* The SQ slot for a new WR, or an errno. */
static int sq_slot(fab_qp *q, fab_swr **out)
{
    if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR)
        return EINVAL;
    if (q->sq_tail - q->sq_head >= q->cap.max_send_wr)
        return ENOMEM;
    fab_swr *w = sq_at(q, q->sq_tail);
    struct ibv_sge *sge = w->sge;
    memset(w, 0, sizeof *w);
    w->sge = sge;
    *out = w;
    return 0;
}

static void sq_commit(fab_qp *q, fab_swr *w)
{
    w->state = FAB_W_QUEUED;
    q->sq_tail++;
    fab_g.ctr.wrs_posted++;
    if (q->qp.state == IBV_QPS_ERR)
        q->flush = true;
}

static int copy_inline(fab_qp *q, fab_swr *w, const struct ibv_send_wr *wr)
{
    uint64_t total = 0;
    for (int i = 0; i < wr->num_sge; i++)
        total += wr->sg_list[i].length;
    if (total > q->cap.max_inline_data)
        return EINVAL;
    if (total && !(w->inl = malloc(total)))
        return ENOMEM;
    size_t off = 0;
    for (int i = 0; i < wr->num_sge; i++) {
        memcpy(w->inl + off, (const void *)(uintptr_t)wr->sg_list[i].addr,
               wr->sg_list[i].length);
        off += wr->sg_list[i].length;
    }
    w->inl_len = (uint32_t)total;
    return 0;
}

static int post_one(fab_qp *q, const struct ibv_send_wr *wr)
{
    fab_swr *w;
    int r = sq_slot(q, &w);
    if (r)
        return r;
    if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_send_sge ||
        (!is_data(wr->opcode) && wr->opcode != IBV_WR_LOCAL_INV &&
         wr->opcode != IBV_WR_BIND_MW))
        return EINVAL;
    w->wr_id = wr->wr_id;
    w->op = wr->opcode;
    w->signaled = q->sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
    w->solicited = (wr->send_flags & IBV_SEND_SOLICITED) != 0;
    if (wr->opcode == IBV_WR_BIND_MW) {
        const struct ibv_mw *mw = wr->bind_mw.mw;
        const struct ibv_mw_bind_info *bi = &wr->bind_mw.bind_info;
        if (!mw || mw->type != IBV_MW_TYPE_2)
            return EINVAL;
        const fab_mw *fw = FAB_OF(mw, fab_mw, mw);
        w->bind = (fab_bind){
            .mw_index = fw->index,
            .mw_gen = fw->gen,
            .type = IBV_MW_TYPE_2,
            .new_rkey = wr->bind_mw.rkey,
            .mr_lkey = bi->mr ? bi->mr->lkey : 0,
            .addr = bi->addr,
            .len = bi->length,
            .access = bi->mw_access_flags,
        };
    } else if (wr->opcode == IBV_WR_LOCAL_INV) {
        w->inv_rkey = wr->invalidate_rkey;
    } else {
        if (wr->send_flags & IBV_SEND_INLINE) {
            if ((r = copy_inline(q, w, wr)))
                return r;
        } else {
            w->nsge = (uint32_t)wr->num_sge;
            memcpy(w->sge, wr->sg_list, w->nsge * sizeof *w->sge);
        }
        w->raddr = wr->wr.rdma.remote_addr;
        w->rkey = wr->wr.rdma.rkey;
        w->imm = wr->imm_data;
        uint64_t due = fab_now_ns() + fab_g.opts.write_delay_us * 1000ull;
        w->due = due > q->last_due ? due : q->last_due;
        q->last_due = w->due;
    }
    sq_commit(q, w);
    return 0;
}

int fab_qp_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                     struct ibv_send_wr **bad)
{
    int r = 0;
    fab_enter();
    fab_qp *q = fab_qp_of(qp);
    for (; wr; wr = wr->next)
        if ((r = post_one(q, wr))) {
            *bad = wr;
            break;
        }
    fab_wake();
    fab_exit();
    return r;
}

int fab_qp_post_bind(fab_qp *q, uint64_t wr_id, unsigned flags,
                     const fab_bind *b)
{
    fab_swr *w;
    int r = sq_slot(q, &w);
    if (r)
        return r;
    w->wr_id = wr_id;
    w->op = IBV_WR_BIND_MW;
    w->signaled = q->sig_all || (flags & IBV_SEND_SIGNALED);
    w->bind = *b;
    sq_commit(q, w);
    fab_wake();
    return 0;
}

int fab_qp_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                     struct ibv_recv_wr **bad)
{
    int r = 0;
    fab_enter();
    fab_qp *q = fab_qp_of(qp);
    uint32_t cap = q->cap.max_recv_wr;
    for (; wr; wr = wr->next) {
        if (q->qp.state == IBV_QPS_RESET || wr->num_sge < 0 ||
            (uint32_t)wr->num_sge > q->cap.max_recv_sge)
            r = EINVAL;
        else if (q->rq_tail - q->rq_head >= cap)
            r = ENOMEM;
        if (r) {
            *bad = wr;
            break;
        }
        fab_rwr *w = &q->rq[q->rq_tail % cap];
        w->wr_id = wr->wr_id;
        w->nsge = (uint32_t)wr->num_sge;
        memcpy(w->sge, wr->sg_list, w->nsge * sizeof *w->sge);
        q->rq_tail++;
        fab_g.ctr.wrs_posted++;
        if (q->qp.state == IBV_QPS_ERR)
            q->flush = true;
    }
    fab_wake();
    fab_exit();
    return r;
}

bool fab_qp_take_recv(fab_qp *q, fab_rwr *out)
{
    if (q->rq_head == q->rq_tail)
        return false;
    *out = q->rq[q->rq_head % q->cap.max_recv_wr];
    q->rq_head++;
    return true;
}

uint32_t fab_qp_recvs(const fab_qp *q)
{
    return (uint32_t)(q->rq_tail - q->rq_head);
}

/* ---- completions ------------------------------------------------------ */

static enum ibv_wc_opcode wc_opcode(enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        return IBV_WC_RDMA_WRITE;
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        return IBV_WC_SEND;
    case IBV_WR_LOCAL_INV:
        return IBV_WC_LOCAL_INV;
    case IBV_WR_BIND_MW:
        return IBV_WC_BIND_MW;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_TSO:
    case IBV_WR_DRIVER1:
    case IBV_WR_ATOMIC_WRITE:
        break;
    }
    return FAB_WC_POISON;
}

/* Complete w with st (success: only when signaled) and count it. */
static void complete(fab_qp *q, fab_swr *w, enum ibv_wc_status st)
{
    if (st == IBV_WC_SUCCESS)
        fab_g.ctr.wrs_completed++;
    else if (st == IBV_WC_WR_FLUSH_ERR)
        fab_g.ctr.wrs_flushed++;
    else
        fab_g.ctr.wrs_failed++;
    if (st != IBV_WC_SUCCESS || w->signaled) {
        struct ibv_wc wc = {
            .wr_id = w->wr_id,
            .status = st,
            .opcode = st ? FAB_WC_POISON : wc_opcode(w->op),
            .vendor_err = st ? FAB_VENDOR_ERR : 0,
            .byte_len = st ? 0 : (uint32_t)w->len,
            .qp_num = q->qp.qp_num,
        };
        fab_cq_add(q, q->scq, &wc, false);
    }
    free(w->inl);
    w->inl = NULL;
}

/* Error: complete everything posted, in order; the oldest WR on the wire
 * takes lost_status (a retry failure when the link died under it). */
static void qp_flush(fab_qp *q)
{
    bool first = true;
    for (; q->sq_head < q->sq_tail; q->sq_head++) {
        fab_swr *w = sq_at(q, q->sq_head);
        enum ibv_wc_status st = IBV_WC_WR_FLUSH_ERR;
        if (w->state == FAB_W_DONE)
            st = w->status;
        else if (w->state == FAB_W_SENT && first)
            st = q->lost_status;
        if (w->state == FAB_W_SENT)
            first = false;
        complete(q, w, st);
    }
    q->sq_exec = q->sq_head;
    fab_rwr r;
    while (fab_qp_take_recv(q, &r)) {
        struct ibv_wc wc = {
            .wr_id = r.wr_id,
            .status = IBV_WC_WR_FLUSH_ERR,
            .opcode = FAB_WC_POISON,
            .vendor_err = FAB_VENDOR_ERR,
            .qp_num = q->qp.qp_num,
        };
        fab_g.ctr.wrs_flushed++;
        fab_cq_add(q, q->rcq, &wc, false);
    }
    q->flush = q->sq_blocked = false;
    q->lost_status = IBV_WC_WR_FLUSH_ERR;
}

/* Retire finished WRs from the head; an error moves the QP to error. */
static void sq_retire(fab_qp *q)
{
    while (q->sq_head < q->sq_exec && !q->flush) {
        fab_swr *w = sq_at(q, q->sq_head);
        if (w->state != FAB_W_DONE)
            break;
        q->sq_head++;
        complete(q, w, w->status);
        if (w->status != IBV_WC_SUCCESS)
            fab_qp_error(q, IBV_WC_WR_FLUSH_ERR);
    }
}

void fab_qp_on_resp(fab_qp *q, uint64_t seq, uint32_t status)
{
    for (uint64_t i = q->sq_head; i < q->sq_exec; i++) {
        fab_swr *w = sq_at(q, i);
        if (w->state == FAB_W_DONE && w->status != IBV_WC_SUCCESS)
            return; /* after an error nothing more is heard: a flush */
        if (w->state != FAB_W_SENT)
            continue;
        if (w->seq == seq) { /* else it was flushed: the answer is late */
            w->state = FAB_W_DONE;
            w->status = fab_resp_status(status);
            if (w->status != IBV_WC_SUCCESS)
                q->sq_blocked = true;
        }
        return;
    }
}

/* ---- execution -------------------------------------------------------- */

static void fail_wr(fab_qp *q, fab_swr *w, enum ibv_wc_status st)
{
    w->state = FAB_W_DONE;
    w->status = st;
    q->sq_blocked = true;
}

static uint8_t data_kind(enum ibv_wr_opcode op)
{
    return op == IBV_WR_RDMA_WRITE          ? FAB_D_WRITE
           : op == IBV_WR_RDMA_WRITE_WITH_IMM ? FAB_D_WRITE_IMM
           : op == IBV_WR_SEND                ? FAB_D_SEND
                                              : FAB_D_SEND_IMM;
}

/* Read w's source and put it on the wire (the write faults strike here).
 * Returns false when the queue must stop executing. */
static bool send_data(fab_qp *q, fab_swr *w)
{
    const xfer_fabric_opts *o = &fab_g.opts;
    bool write = w->op == IBV_WR_RDMA_WRITE ||
                 w->op == IBV_WR_RDMA_WRITE_WITH_IMM;
    uint64_t nth = write ? ++fab_g.nth_write : 0;
    uint8_t *host[FAB_MAX_SGE];
    uint64_t len = w->inl_len;
    enum ibv_wc_status st = IBV_WC_SUCCESS;
    if (!w->inl)
        st = fab_mr_local(q->pd, w->sge, w->nsge, false, host, &len);
    if (st == IBV_WC_SUCCESS && len > fab_max_msg())
        st = IBV_WC_LOC_LEN_ERR;
    if (st == IBV_WC_SUCCESS && (!q->conn || q->conn->lost))
        st = IBV_WC_RETRY_EXC_ERR; /* nobody at the other end */
    if (st != IBV_WC_SUCCESS) {
        fail_wr(q, w, st);
        return false;
    }
    bool qp_err = write && nth == o->write_qp_err;
    bool cut = write && nth == o->write_cut;
    uint64_t send_len = qp_err ? len / 2 : len;
    fab_data_hdr h = {
        .raddr = w->raddr,
        .len = send_len,
        .rkey = w->rkey,
        .imm = w->imm,
        .kind = data_kind(w->op),
        .inject = write && nth == o->write_access_err,
        .solicited = w->solicited,
        .mangle = !write                     ? FAB_MANGLE_NONE
                  : nth == o->write_corrupt ? FAB_MANGLE_FLIP
                  : nth == o->write_phantom ? FAB_MANGLE_DROP
                                            : FAB_MANGLE_NONE,
    };
    w->len = len;
    w->seq = q->next_seq++;
    w->state = FAB_W_SENT;
    uint8_t *dst = fab_wire_send(q->conn, FAB_M_DATA, w->seq, &h, sizeof h,
                                 NULL, send_len);
    if (dst && w->inl) {
        memcpy(dst, w->inl, send_len);
    } else if (dst) {
        for (uint32_t i = 0; i < w->nsge && send_len; i++) {
            uint64_t n = w->sge[i].length < send_len ? w->sge[i].length
                                                     : send_len;
            memcpy(dst, host[i], n);
            dst += n;
            send_len -= n;
        }
    }
    if (write)
        fab_g.ctr.writes_sent++;
    if (qp_err) {
        fab_qp_error(q, IBV_WC_WR_FLUSH_ERR);
        fab_async_qp(q, IBV_EVENT_QP_FATAL);
    } else if (cut && q->conn) {
        q->conn->cut = true;
        fab_g.ctr.links_cut++;
        q->sq_blocked = true;
    }
    return !qp_err && !cut;
}

static void sq_execute(fab_qp *q, uint64_t now, uint64_t *next_due)
{
    while (q->sq_exec < q->sq_tail && !q->sq_blocked && !q->flush) {
        fab_swr *w = sq_at(q, q->sq_exec);
        if (!is_data(w->op)) {
            if (q->sq_exec != q->sq_head)
                break; /* fenced behind the WRs before it */
            w->status = w->op == IBV_WR_LOCAL_INV
                            ? fab_mr_exec_inval(q, w->inv_rkey)
                            : fab_mr_exec_bind(q, &w->bind);
            w->state = FAB_W_DONE;
            q->sq_exec++;
            sq_retire(q);
            continue;
        }
        if (w->due > now) {
            if (w->due < *next_due)
                *next_due = w->due;
            break;
        }
        bool go_on = send_data(q, w);
        q->sq_exec++;
        if (!go_on)
            break;
    }
}

void fab_qp_progress(uint64_t now, uint64_t *next_due)
{
    for (fab_qp *q = fab_g.qps; q; q = q->next) {
        if (!q->flush && q->qp.state == IBV_QPS_RTS) {
            sq_execute(q, now, next_due);
            sq_retire(q);
        }
        if (q->flush)
            qp_flush(q);
    }
}
