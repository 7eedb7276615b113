/*
 * tests/rdma/rc.h - one RC endpoint over rdmacm, written against the plain
 * libibverbs / librdmacm API only, so the same helper drives the software
 * fabric (suite rdma-sim) and a real device (suite rdma).
 *
 * Every wait is bounded (RC_WAIT_MS) so a test that would hang fails
 * instead; no result depends on how long anything took.  Failures print
 * one line on stderr saying what was expected and what came.
 */
#ifndef XFER_TEST_RC_H
#define XFER_TEST_RC_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

enum { RC_WAIT_MS = 20000, RC_PDATA_MAX = 196 };

typedef struct rc_side {
    struct rdma_event_channel *ch;
    struct rdma_cm_id *listen; /* server: the listening id */
    struct rdma_cm_id *id;     /* the connection's id */
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    bool borrowed;             /* ch and pd belong to another side */
} rc_side;

/* What an awaited CM event carried (the event itself is acked). */
typedef struct rc_event {
    enum rdma_cm_event_type type;
    int status;
    struct rdma_cm_id *id;
    uint32_t qp_num;
    uint8_t pdlen;
    uint8_t pdata[RC_PDATA_MAX];
} rc_event;

/* Take the next CM event of ch; -1 unless it is `want` (then *out, which
 * may be NULL, holds it).  The event is acked either way. */
int rc_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
              rc_event *out);

/* Server: channel, id bound to addr:port (port 0: any; *port gets it),
 * listening. */
int rc_listen(rc_side *s, const char *addr, uint16_t *port);
/* Client: channel, id, address and route resolved, PD/CQ/QP made,
 * rdma_connect sent with pdata (len bytes). */
int rc_connect(rc_side *c, const char *addr, uint16_t port, const void *pdata,
               uint8_t len);
/* Server: take a CONNECT_REQUEST from l's channel (into *req, may be
 * NULL) and make a CQ and QP on its id in s.  s == l for the first
 * connection; another side borrows l's channel and PD (one PD for every
 * connection of the listener). */
int rc_request(rc_side *s, rc_side *l, rc_event *req);
/* Server: accept s's request with pdata (len bytes). */
int rc_accept(rc_side *s, const void *pdata, uint8_t len);
/* The next completion of e's CQ: re-arm, drain, wait on the channel fd,
 * ack.  Returns 0 or -1 (nothing in RC_WAIT_MS). */
int rc_cqe(rc_side *e, struct ibv_wc *wc);
/* Post one RDMA WRITE (signaled) of sge[0..n) to raddr/rkey. */
int rc_write(rc_side *e, uint64_t wr_id, struct ibv_sge *sge, int n,
             uint64_t raddr, uint32_t rkey);
/* Destroy what e holds, in the order rdma-core wants. */
void rc_close(rc_side *e);

#endif /* XFER_TEST_RC_H */
