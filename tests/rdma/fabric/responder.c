/*
 * tests/rdma/fabric/responder.c - the responder side of an RC QP: what a
 * WRITE, WRITE_WITH_IMM or SEND arriving from the peer does to this
 * process's memory, its receive queue and its QP.
 *
 * Memory is real: a write that passes the checks is copied into the
 * registered address of the target process.  The check, the copy and the
 * answer happen under the fabric lock, so an MR deregistration or MW
 * dealloc by an application thread is either wholly before a write
 * (which is then refused) or wholly after it; an IBV_WR_LOCAL_INV runs on
 * the same progress thread, so it too is ordered against every write.
 * (Hardware may land a prefix of a write that races an invalidation; the
 * fabric lands all or nothing.)
 *
 * What must stay true:
 *  - a refused write lands nothing, answers a remote access error, and
 *    moves this QP to error too (IBV_EVENT_QP_ACCESS_ERR), as RC does;
 *  - data meant for a QP not yet RTR waits, as does a message that needs
 *    a receive when none is posted (RC's RNR retry, retried forever);
 *  - data for a QP in error, reset or gone is dropped and answered so,
 *    and the sender fails it as a transport retry error.
 */
#include <string.h>

#include "fab.h"

enum ibv_wc_status fab_resp_status(uint32_t resp)
{
    switch (resp) {
    case FAB_RESP_OK:
        return IBV_WC_SUCCESS;
    case FAB_RESP_REM_ACCESS:
        return IBV_WC_REM_ACCESS_ERR;
    case FAB_RESP_REM_INV_REQ:
        return IBV_WC_REM_INV_REQ_ERR;
    case FAB_RESP_REM_OP:
        return IBV_WC_REM_OP_ERR;
    default:
        return IBV_WC_RETRY_EXC_ERR;
    }
}

static void answer(fab_conn *c, uint64_t seq, uint32_t resp)
{
    fab_wire_send(c, FAB_M_RESP, seq, &resp, sizeof resp, NULL, 0);
}

static void count_reject(int why)
{
    xfer_fabric_counters *k = &fab_g.ctr;
    switch (why) {
    case FAB_REJ_NO_KEY:
        k->rej_no_key++;
        break;
    case FAB_REJ_STALE_KEY:
        k->rej_stale_key++;
        break;
    case FAB_REJ_WRONG_QP:
        k->rej_wrong_qp++;
        break;
    case FAB_REJ_PD:
        k->rej_pd++;
        break;
    case FAB_REJ_ACCESS:
        k->rej_access++;
        break;
    case FAB_REJ_BOUNDS:
        k->rej_bounds++;
        break;
    default:
        k->rej_injected++;
        break;
    }
}

/* Complete the oldest receive for a message of len bytes. */
static void recv_done(fab_qp *q, const fab_rwr *r, enum ibv_wc_status st,
                      const fab_data_hdr *h)
{
    bool imm = h->kind == FAB_D_WRITE_IMM || h->kind == FAB_D_SEND_IMM;
    struct ibv_wc wc = {
        .wr_id = r->wr_id,
        .status = st,
        .qp_num = q->qp.qp_num,
        .src_qp = q->dest_qpn,
    };
    if (st == IBV_WC_SUCCESS) {
        wc.opcode = h->kind == FAB_D_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM
                                               : IBV_WC_RECV;
        wc.byte_len = (uint32_t)h->len;
        wc.imm_data = imm ? h->imm : 0;
        wc.wc_flags = imm ? IBV_WC_WITH_IMM : 0;
        fab_g.ctr.wrs_completed++;
        fab_g.ctr.sends_landed++;
    } else {
        wc.opcode = FAB_WC_POISON;
        wc.vendor_err = FAB_VENDOR_ERR;
        fab_g.ctr.wrs_failed++;
    }
    fab_cq_add(q, q->rcq, &wc, h->solicited);
}

/* A WRITE or WRITE_WITH_IMM: check the rkey, land, answer. */
static void land_write(fab_conn *c, fab_qp *q, uint64_t seq,
                       const fab_data_hdr *h, const uint8_t *data)
{
    uint8_t *host = NULL;
    int why = h->inject ? -1 : FAB_REJ_OK;
    /* A zero-length write checks no key (IB). */
    if (!why && h->len)
        why = fab_mr_remote(q, h->raddr, h->rkey, h->len, &host);
    if (why) {
        count_reject(why);
        answer(c, seq, FAB_RESP_REM_ACCESS);
        fab_qp_error(q, IBV_WC_WR_FLUSH_ERR);
        fab_async_qp(q, IBV_EVENT_QP_ACCESS_ERR);
        return;
    }
    if (h->len && h->mangle != FAB_MANGLE_DROP)
        memcpy(host, data, h->len);
    if (h->len && h->mangle == FAB_MANGLE_FLIP)
        host[h->len / 2] ^= 0x10;
    if (h->mangle != FAB_MANGLE_NONE)
        fab_g.ctr.writes_mangled++;
    fab_g.ctr.writes_landed++;
    fab_g.ctr.bytes_landed += h->len;
    if (h->kind == FAB_D_WRITE_IMM) {
        fab_rwr r;
        fab_qp_take_recv(q, &r); /* present: checked by the caller */
        recv_done(q, &r, IBV_WC_SUCCESS, h);
    }
    answer(c, seq, FAB_RESP_OK);
}

/* A SEND: scatter into the oldest receive. */
static void land_send(fab_conn *c, fab_qp *q, uint64_t seq,
                      const fab_data_hdr *h, const uint8_t *data)
{
    fab_rwr r;
    uint8_t *host[FAB_MAX_SGE];
    uint64_t room = 0;
    fab_qp_take_recv(q, &r);
    enum ibv_wc_status st =
        fab_mr_local(q->pd, r.sge, r.nsge, true, host, &room);
    if (st == IBV_WC_SUCCESS && room < h->len)
        st = IBV_WC_LOC_LEN_ERR;
    if (st != IBV_WC_SUCCESS) {
        recv_done(q, &r, st, h);
        answer(c, seq, st == IBV_WC_LOC_LEN_ERR ? FAB_RESP_REM_INV_REQ
                                                : FAB_RESP_REM_OP);
        fab_qp_error(q, IBV_WC_WR_FLUSH_ERR);
        return;
    }
    uint64_t left = h->len;
    for (uint32_t i = 0; i < r.nsge && left; i++) {
        uint64_t n = r.sge[i].length < left ? r.sge[i].length : left;
        memcpy(host[i], data, n);
        data += n;
        left -= n;
    }
    recv_done(q, &r, IBV_WC_SUCCESS, h);
    answer(c, seq, FAB_RESP_OK);
}

bool fab_resp_data(fab_conn *c, uint64_t seq, const uint8_t *body,
                   size_t len)
{
    fab_data_hdr h;
    if (len < sizeof h) {
        fab_wire_lose(c);
        return true;
    }
    memcpy(&h, body, sizeof h);
    if (h.len != len - sizeof h || h.kind > FAB_D_SEND_IMM) {
        fab_wire_lose(c);
        return true;
    }
    fab_qp *q = c->qp;
    if (q && q->qp.state == IBV_QPS_INIT && !c->lost)
        return false; /* not RTR yet: the sender's retries will get in */
    if (!q || q->qp.state == IBV_QPS_ERR || q->qp.state == IBV_QPS_RESET) {
        fab_g.ctr.rej_qp_state++;
        answer(c, seq, FAB_RESP_DROPPED);
        return true;
    }
    if (h.kind != FAB_D_WRITE && fab_qp_recvs(q) == 0)
        return false; /* receiver not ready: RNR, retry */
    if (h.kind == FAB_D_WRITE || h.kind == FAB_D_WRITE_IMM)
        land_write(c, q, seq, &h, body + sizeof h);
    else
        land_send(c, q, seq, &h, body + sizeof h);
    return true;
}
