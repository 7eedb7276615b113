/*
 * tests/rdma/rc.c - see rc.h.  Plain rdma-core calls, as rping makes them:
 * wait for each CM event and ack it, re-arm the CQ before draining it,
 * check wc.status first, destroy the QP before its id.
 */
#define _GNU_SOURCE
#include "rc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

static int wait_fd(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r;
    do
        r = poll(&p, 1, RC_WAIT_MS);
    while (r < 0 && errno == EINTR);
    return r == 1 ? 0 : -1;
}

int rc_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
              rc_event *out)
{
    struct rdma_cm_event *ev;
    if (wait_fd(ch->fd) < 0 || rdma_get_cm_event(ch, &ev) < 0) {
        fprintf(stderr, "rc: no CM event (wanted %s)\n", rdma_event_str(want));
        return -1;
    }
    rc_event e = {
        .type = ev->event,
        .status = ev->status,
        .id = ev->id,
        .qp_num = ev->param.conn.qp_num,
        .pdlen = ev->param.conn.private_data_len,
    };
    if (ev->param.conn.private_data && e.pdlen)
        memcpy(e.pdata, ev->param.conn.private_data, e.pdlen);
    rdma_ack_cm_event(ev);
    if (out)
        *out = e;
    if (e.type != want) {
        fprintf(stderr, "rc: got %s (status %d), wanted %s\n",
                rdma_event_str(e.type), e.status, rdma_event_str(want));
        return -1;
    }
    return 0;
}

static int parse(const char *addr, uint16_t port, struct sockaddr_in *sin)
{
    memset(sin, 0, sizeof *sin);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    return inet_pton(AF_INET, addr, &sin->sin_addr) == 1 ? 0 : -1;
}

int rc_listen(rc_side *s, const char *addr, uint16_t *port)
{
    struct sockaddr_in sin;
    memset(s, 0, sizeof *s);
    if (parse(addr, *port, &sin) < 0 || !(s->ch = rdma_create_event_channel()) ||
        rdma_create_id(s->ch, &s->listen, NULL, RDMA_PS_TCP) < 0 ||
        rdma_bind_addr(s->listen, (struct sockaddr *)&sin) < 0 ||
        rdma_listen(s->listen, 8) < 0) {
        perror("rc_listen");
        return -1;
    }
    *port = ntohs(rdma_get_src_port(s->listen));
    return 0;
}

/* PD, completion channel, CQ and QP on id's device. */
static int make_qp(rc_side *e, struct rdma_cm_id *id)
{
    struct ibv_qp_init_attr qa = {
        .cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 4,
                .max_recv_sge = 4, .max_inline_data = 64},
        .qp_type = IBV_QPT_RC,
    };
    if ((!e->pd && !(e->pd = ibv_alloc_pd(id->verbs))) ||
        !(e->cc = ibv_create_comp_channel(id->verbs)) ||
        !(e->cq = ibv_create_cq(id->verbs, 256, e, e->cc, 0)) ||
        fcntl(e->cc->fd, F_SETFL, O_NONBLOCK) < 0)
        return -1;
    qa.send_cq = qa.recv_cq = e->cq;
    return rdma_create_qp(id, e->pd, &qa);
}

int rc_connect(rc_side *c, const char *addr, uint16_t port, const void *pdata,
               uint8_t len)
{
    struct sockaddr_in sin;
    struct rdma_conn_param p = {
        .private_data = pdata,
        .private_data_len = len,
        .responder_resources = 1,
        .initiator_depth = 1,
        .retry_count = 7,
        .rnr_retry_count = 7,
    };
    memset(c, 0, sizeof *c);
    if (parse(addr, port, &sin) < 0 || !(c->ch = rdma_create_event_channel()) ||
        rdma_create_id(c->ch, &c->id, NULL, RDMA_PS_TCP) < 0 ||
        rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&sin, 2000) < 0 ||
        rc_expect(c->ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL) < 0 ||
        rdma_resolve_route(c->id, 2000) < 0 ||
        rc_expect(c->ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL) < 0 ||
        make_qp(c, c->id) < 0 || rdma_connect(c->id, &p) < 0) {
        perror("rc_connect");
        return -1;
    }
    return 0;
}

int rc_request(rc_side *s, rc_side *l, rc_event *req)
{
    rc_event r;
    if (s != l) {
        memset(s, 0, sizeof *s);
        s->ch = l->ch;
        s->pd = l->pd;
        s->borrowed = true;
    }
    if (rc_expect(s->ch, RDMA_CM_EVENT_CONNECT_REQUEST, &r) < 0)
        return -1;
    if (req)
        *req = r;
    s->id = r.id;
    if (make_qp(s, s->id) < 0) {
        perror("rc_request");
        return -1;
    }
    return 0;
}

int rc_accept(rc_side *s, const void *pdata, uint8_t len)
{
    struct rdma_conn_param p = {
        .private_data = pdata,
        .private_data_len = len,
        .responder_resources = 1,
        .initiator_depth = 1,
        .rnr_retry_count = 7,
    };
    if (rdma_accept(s->id, &p) < 0) {
        perror("rc_accept");
        return -1;
    }
    return 0;
}

int rc_cqe(rc_side *e, struct ibv_wc *wc)
{
    for (;;) {
        struct ibv_cq *cq;
        void *ctx;
        if (ibv_req_notify_cq(e->cq, 0) != 0)
            return -1;
        int n = ibv_poll_cq(e->cq, 1, wc);
        if (n != 0)
            return n == 1 ? 0 : -1;
        if (wait_fd(e->cc->fd) < 0 ||
            ibv_get_cq_event(e->cc, &cq, &ctx) < 0) {
            fprintf(stderr, "rc: no completion\n");
            return -1;
        }
        ibv_ack_cq_events(cq, 1);
    }
}

int rc_write(rc_side *e, uint64_t wr_id, struct ibv_sge *sge, int n,
             uint64_t raddr, uint32_t rkey)
{
    struct ibv_send_wr wr = {
        .wr_id = wr_id,
        .sg_list = sge,
        .num_sge = n,
        .opcode = IBV_WR_RDMA_WRITE,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = {.remote_addr = raddr, .rkey = rkey},
    }, *bad;
    return ibv_post_send(e->id->qp, &wr, &bad);
}

void rc_close(rc_side *e)
{
    if (e->id && e->id->qp)
        rdma_destroy_qp(e->id);
    if (e->id)
        rdma_destroy_id(e->id);
    if (e->listen)
        rdma_destroy_id(e->listen);
    if (e->cq)
        ibv_destroy_cq(e->cq);
    if (e->cc)
        ibv_destroy_comp_channel(e->cc);
    if (e->pd && !e->borrowed)
        ibv_dealloc_pd(e->pd);
    if (e->ch && !e->borrowed)
        rdma_destroy_event_channel(e->ch);
    memset(e, 0, sizeof *e);
}
