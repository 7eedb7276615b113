/*
 * transport/rdma.c - the RDMA transport (include/xfer/rdma.h): reserve,
 * commit and cancel go over the TCP transport it owns (tcp_int.h: one
 * implementation of control connections, reconnects and replies); a WRITE
 * is one-sided RDMA WRITEs over an rdmacm RC connection per shard, from
 * the registered staging pool into the reserved region.
 *
 * What stays true:
 *  - a shard's ops go out only while both of its connections are up: the
 *    TCP transport holds them (C_GATED) after HELLO until the CM
 *    connection is ESTABLISHED (xfer_tcp_open); losing either takes both
 *    down (xfer_tcp_drop, whose link-down hook tears the endpoint down);
 *  - I3: a WRITE result is queued only when the completions of all its
 *    work requests were polled (every WR is signaled, so an error mid-way
 *    still leaves one completion per WR: success, error or flush).  An
 *    endpoint that goes down with WRs posted is disconnected (its QP to
 *    error, so they flush) and kept, as a zombie, until the last of them
 *    is polled; only then are its QP and id destroyed;
 *  - a flush is a teardown, not a failure of the write: CONN_LOST, or
 *    ABORTED for a write the engine aborted; a remote access error (the
 *    rkey was invalidated: a late write) is XFER_ERR_REMOTE and landed
 *    nothing;
 *  - the completion channel fd is a libevent event: each wakeup takes and
 *    acks its CQ events, re-arms the CQ, then drains it; every CM event is
 *    acked before its id is touched further;
 *  - results go to the engine from a deferred event (never from inside
 *    start or abort), from a queue whose room is reserved at start;
 *  - a staging pool stays registered while a posted write reads it: a
 *    pool removed with writes in flight is deregistered at the completion
 *    of the last one (the engine removes pools only when idle; this is a
 *    second line).
 */
#define _GNU_SOURCE
#include "xfer/rdma.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <event2/util.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "base_ref.h"
#include "xfer/dir.h"
#include "list.h" /* fsm/: the one intrusive list (fsm_private_dep) */
#include "rdma_devmem.h"
#include "rdma_pdata.h"
#include "tcp_int.h"
#include "util.h" /* fsm/: the injected allocator (fsm_private_dep) */

#define RD_MAX_POOLS 64
#define RD_POLL_BATCH 32
#define RD_POST_BATCH 16

enum { EP_ADDR, EP_ROUTE, EP_CONNECTING, EP_UP };

typedef struct rd_ep rd_ep;
typedef struct rd_op rd_op;

/* One rdmacm connection to one shard. */
struct rd_ep {
    xfer_rdma *r;
    uint16_t shard;
    int state;
    bool zombie;          /* down: waits for its posted WRs to flush */
    struct rdma_cm_id *id;
    xfer_rdma_pdata pdata; /* sent with the connect: group, TCP identity */
    uint32_t wr_out;      /* posted WRs whose completion was not polled */
    rd_ep *next_zombie;
};

/* One WRITE. */
struct rd_op {
    xfer_action a;
    const uint8_t *src;
    rd_ep *ep;            /* set once posted */
    xfer_list_node link;  /* in its shard's wait list, then posted list */
    uint32_t nwr, ndone;
    int32_t status;       /* the first error seen, 0 */
    bool aborted;
};

typedef struct rd_pool {
    bool used, removing;
    uint8_t *base;
    size_t len;
    struct ibv_mr *mr;
    xfer_rdma_devmem dm;       /* how mr was made (device memory: dma-buf or
                             nvidia-peermem, rdma_devmem.h) */
    uint32_t writes;      /* posted writes reading it */
} rd_pool;

typedef struct rd_shard {
    rd_ep *ep;            /* the current endpoint, or NULL */
    xfer_list wait;       /* of rd_op: no room in the send queue yet */
    xfer_list posted;     /* of rd_op: WRs posted, not all polled */
    bool broken;          /* take both connections down at the next kick */
} rd_shard;

struct xfer_rdma {
    struct event_base *base;
    xfer_rdma_config cfg;
    xfer_allocator alloc;
    xfer_tcp *tcp;
    struct xfer_engine *engine;
    bool del_pending; /* xfer_rdma_del came while attached: detach frees */
    struct ibv_context **devs;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    struct rdma_event_channel *ch;
    struct event *cq_ev, *cm_ev, *kick_ev, *async_ev;
    uint64_t max_msg;
    bool closing;
    rd_shard shards[XFER_MAX_SHARDS];
    rd_ep *zombies;
    rd_pool pools[RD_MAX_POOLS];
    xfer_shard_result *q; /* results waiting for the kick */
    uint32_t nq, qcap, writes_out;
    xfer_rdma_stats st;
};

/* ---------------------------------------------------------------------- */
/* Results                                                                 */
/* ---------------------------------------------------------------------- */

/* Room for every write outstanding plus one: a push never fails. */
static int q_reserve(xfer_rdma *r, uint32_t need)
{
    if (need <= r->qcap)
        return 0;
    uint32_t cap = r->qcap ? r->qcap * 2 : 64;
    while (cap < need)
        cap *= 2;
    xfer_shard_result *q = xfer_util_calloc(&r->alloc, cap, sizeof *q);
    if (!q)
        return XFER_ERR_NOMEM;
    if (r->nq)
        memcpy(q, r->q, r->nq * sizeof *q);
    xfer_util_free(&r->alloc, r->q);
    r->q = q;
    r->qcap = cap;
    return 0;
}

static void kick(xfer_rdma *r)
{
    if (!r->closing)
        event_active(r->kick_ev, 0, 0);
}

/* The write's result is queued and the op freed. */
static void finish(xfer_rdma *r, rd_op *op, int32_t status)
{
    if (status == 0)
        r->st.writes_ok++;
    else if (status == XFER_ERR_ABORTED)
        r->st.writes_aborted++;
    else
        r->st.writes_failed++;
    if (status == 0)
        r->st.bytes_written += op->a.len;
    if (op->ep) {
        xfer_list_remove(&r->shards[op->a.shard].posted, &op->link);
        rd_pool *p = &r->pools[op->a.pool];
        if (--p->writes == 0 && p->removing) {
            ibv_dereg_mr(p->mr);
            xfer_rdma_devmem_close(&p->dm);
            r->st.mrs_live--;
            memset(p, 0, sizeof *p);
        }
    }
    r->q[r->nq++] = (xfer_shard_result){
        .id = op->a.id, .attempt = op->a.attempt, .shard = op->a.shard,
        .op = XFER_OP_WRITE, .status = status};
    r->writes_out--;
    xfer_util_free(&r->alloc, op);
    kick(r);
}

/* ---------------------------------------------------------------------- */
/* Endpoints                                                               */
/* ---------------------------------------------------------------------- */

static void ep_destroy(rd_ep *ep)
{
    if (ep->id && ep->id->qp)
        rdma_destroy_qp(ep->id);
    if (ep->id)
        rdma_destroy_id(ep->id);
    xfer_util_free(&ep->r->alloc, ep);
}

/* The shard's connection broke: both go down at the next kick (never from
 * inside a hook of the TCP transport). */
static void break_shard(xfer_rdma *r, uint16_t shard)
{
    r->shards[shard].broken = true;
    kick(r);
}

/* TCP is up (HELLO answered): connect the data path to the same address
 * and port (rdmacm ports are a space of their own). */
static void ep_start(xfer_rdma *r, uint16_t shard, int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    rd_ep *ep = xfer_util_calloc(&r->alloc, 1, sizeof *ep);
    if (!ep) {
        break_shard(r, shard);
        return;
    }
    ep->r = r;
    ep->shard = shard;
    ep->state = EP_ADDR;
    r->shards[shard].ep = ep;
    /* the control connection's own address: the server finds this RC
     * connection's QP from it (rdma_pdata.h) */
    ep->pdata.magic = XFER_RDMA_PDATA_MAGIC;
    ep->pdata.group = xfer_tcp_group(r->tcp); /* derived from a group
                                                 name too: HELLO's */
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        ep->pdata.has_tcp = xfer_rdma_pdata_addr(&ss, &ep->pdata.tcp_port,
                                                 ep->pdata.tcp_addr);
    sl = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0 ||
        rdma_create_id(r->ch, &ep->id, ep, RDMA_PS_TCP) != 0 ||
        rdma_resolve_addr(ep->id, NULL, (struct sockaddr *)&ss,
                          (int)r->cfg.cm_timeout_ms) != 0) {
        r->st.cm_failures++;
        break_shard(r, shard);
    }
}

/* A flush or error completion of a posted WR. */
static int32_t status_of(const rd_op *op, const struct ibv_wc *wc,
                         xfer_rdma *r)
{
    if (wc->status == IBV_WC_WR_FLUSH_ERR) {
        r->st.wcs_flushed++;
        return op->aborted ? XFER_ERR_ABORTED : XFER_ERR_CONN_LOST;
    }
    if (wc->status == IBV_WC_REM_ACCESS_ERR) {
        r->st.wcs_access_err++;
        return XFER_ERR_REMOTE;
    }
    return wc->status == IBV_WC_RETRY_EXC_ERR ? XFER_ERR_CONN_LOST
                                              : XFER_ERR_IO;
}

/* How a write fails on a shard that is not up: XFER_ERR_SHARD_GONE when
 * the directory says the shard left its group (as the TCP transport fails
 * the shard's reserves and commits), else XFER_ERR_CONN_LOST. */
static int32_t down_status(const xfer_rdma *r, uint16_t shard)
{
    return xfer_tcp_gone(r->tcp, shard) ? XFER_ERR_SHARD_GONE
                                        : XFER_ERR_CONN_LOST;
}

/* Down: waiting writes fail now, posted ones when their flush is polled
 * (a gone shard's with XFER_ERR_SHARD_GONE, set here as their first
 * error, unless the engine aborted them). */
static void ep_lose(xfer_rdma *r, uint16_t shard)
{
    rd_shard *sh = &r->shards[shard];
    rd_ep *ep = sh->ep;
    int32_t why = down_status(r, shard);
    sh->ep = NULL;
    sh->broken = false;
    xfer_list_node *n;
    while ((n = xfer_list_pop_front(&sh->wait)))
        finish(r, XFER_LIST_ITEM(n, rd_op, link), why);
    if (why == XFER_ERR_SHARD_GONE)
        for (n = sh->posted.head; n; n = n->next) {
            rd_op *op = XFER_LIST_ITEM(n, rd_op, link);
            if (op->ep == ep && !op->status && !op->aborted)
                op->status = why;
        }
    if (!ep)
        return;
    if (ep->state == EP_UP)
        r->st.cm_losses++;
    if (ep->wr_out == 0) {
        ep_destroy(ep);
        return;
    }
    rdma_disconnect(ep->id); /* QP to error: every posted WR flushes */
    ep->zombie = true;
    ep->next_zombie = r->zombies;
    r->zombies = ep;
}

static void zombie_reap(xfer_rdma *r)
{
    for (rd_ep **p = &r->zombies; *p;) {
        rd_ep *ep = *p;
        if (ep->wr_out == 0) {
            *p = ep->next_zombie;
            ep_destroy(ep);
        } else {
            p = &ep->next_zombie;
        }
    }
}

/* ---------------------------------------------------------------------- */
/* Posting                                                                 */
/* ---------------------------------------------------------------------- */

static uint32_t wrs_of(const xfer_rdma *r, uint32_t len)
{
    return len == 0 ? 1 : (uint32_t)((len + r->max_msg - 1) / r->max_msg);
}

/* Post every WR of op on ep (room checked).  Each is signaled: one
 * completion per WR, whatever happens. */
static void post(xfer_rdma *r, rd_ep *ep, rd_op *op)
{
    struct ibv_send_wr wr[RD_POST_BATCH], *bad = NULL;
    struct ibv_sge sge[RD_POST_BATCH];
    rd_pool *p = &r->pools[op->a.pool];
    uint64_t done = 0;
    op->ep = ep;
    op->nwr = 0;
    p->writes++;
    /* integrity for streams: the run's CRC32C from the staging as the
     * device is about to read it (after the gate), kept on the shard's
     * TCP connection, which joins the runs into the COMMIT's CRC as for
     * its own stream WRITEs (tcp.c stream_crc).  Device staging is not
     * read by the CPU: its stream's runs are missing, so it commits
     * unchecked (docs/integrity.md). */
    if (op->a.part && p->dm.path == XFER_RDMA_DEVMEM_HOST)
        xfer_tcp_stream_run(r->tcp, &op->a, op->src);
    xfer_list_push_back(&r->shards[op->a.shard].posted, &op->link);
    do {
        int k = 0;
        for (; k < RD_POST_BATCH && (done < op->a.len || op->a.len == 0);
             k++) {
            uint64_t n = op->a.len - done < r->max_msg ? op->a.len - done
                                                       : r->max_msg;
            sge[k] = (struct ibv_sge){.addr = (uintptr_t)(op->src + done),
                                      .length = (uint32_t)n,
                                      .lkey = p->mr->lkey};
            wr[k] = (struct ibv_send_wr){
                .wr_id = (uintptr_t)op,
                .next = NULL,
                .sg_list = n ? &sge[k] : NULL,
                .num_sge = n ? 1 : 0,
                .opcode = IBV_WR_RDMA_WRITE,
                .send_flags = IBV_SEND_SIGNALED,
                .wr.rdma = {.remote_addr = op->a.remote_addr + done,
                            .rkey = op->a.rkey}};
            if (k)
                wr[k - 1].next = &wr[k];
            done += n;
            if (op->a.len == 0) {
                k++;
                break;
            }
        }
        int rc = ibv_post_send(ep->id->qp, wr, &bad);
        uint32_t posted = (uint32_t)k;
        if (rc)
            posted = (uint32_t)(bad - wr);
        op->nwr += posted;
        ep->wr_out += posted;
        r->st.wrs_posted += posted;
        if (rc) {
            op->status = XFER_ERR_IO;
            break_shard(r, ep->shard);
            break;
        }
    } while (done < op->a.len);
    if (op->nwr == 0)
        finish(r, op, op->status);
}

/* Post what waits on shard while its send queue has room. */
static void post_waiting(xfer_rdma *r, uint16_t shard)
{
    rd_shard *sh = &r->shards[shard];
    while (sh->ep && sh->ep->state == EP_UP && !xfer_list_empty(&sh->wait)) {
        rd_op *op = XFER_LIST_ITEM(sh->wait.head, rd_op, link);
        if (sh->ep->wr_out + wrs_of(r, op->a.len) > r->cfg.max_send_wr)
            return;
        xfer_list_remove(&sh->wait, &op->link);
        post(r, sh->ep, op);
    }
}

/* ---------------------------------------------------------------------- */
/* Completions                                                             */
/* ---------------------------------------------------------------------- */

static void on_wc(xfer_rdma *r, const struct ibv_wc *wc)
{
    rd_op *op = (rd_op *)(uintptr_t)wc->wr_id;
    rd_ep *ep = op->ep;
    r->st.wcs_polled++;
    ep->wr_out--;
    if (wc->status != IBV_WC_SUCCESS) {
        if (!op->status)
            op->status = status_of(op, wc, r);
        /* the QP is in error now (a flush on a live endpoint too: the
         * device moved it there) */
        if (!ep->zombie && r->shards[ep->shard].ep == ep)
            break_shard(r, ep->shard);
    }
    if (++op->ndone == op->nwr)
        finish(r, op, op->status);
}

static void on_cq(evutil_socket_t fd, short what, void *arg)
{
    xfer_rdma *r = arg;
    struct ibv_cq *cq;
    void *ctx;
    unsigned events = 0;
    while (ibv_get_cq_event(r->cc, &cq, &ctx) == 0)
        events++;
    if (events)
        ibv_ack_cq_events(r->cq, events);
    ibv_req_notify_cq(r->cq, 0); /* re-arm before draining */
    struct ibv_wc wc[RD_POLL_BATCH];
    int n;
    while ((n = ibv_poll_cq(r->cq, RD_POLL_BATCH, wc)) > 0)
        for (int i = 0; i < n; i++)
            on_wc(r, &wc[i]);
    zombie_reap(r);
    for (uint16_t k = 0; k < r->cfg.tcp.nshards; k++)
        post_waiting(r, k);
}

/* ---------------------------------------------------------------------- */
/* The connection manager                                                  */
/* ---------------------------------------------------------------------- */

static void on_route(xfer_rdma *r, rd_ep *ep)
{
    struct ibv_qp_init_attr qa = {
        .send_cq = r->cq, .recv_cq = r->cq,
        .cap = {.max_send_wr = r->cfg.max_send_wr, .max_recv_wr = 1,
                .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 1,
    };
    uint8_t pd[XFER_RDMA_PDATA_LEN];
    xfer_rdma_pdata_encode(&ep->pdata, pd);
    struct rdma_conn_param p = {.private_data = pd,
                                .private_data_len = sizeof pd,
                                .responder_resources = 1,
                                .initiator_depth = 1,
                                .retry_count = 7,
                                .rnr_retry_count = 7};
    ep->state = EP_CONNECTING;
    if (rdma_create_qp(ep->id, r->pd, &qa) != 0 ||
        rdma_connect(ep->id, &p) != 0) {
        r->st.cm_failures++;
        break_shard(r, ep->shard);
    }
}

/* One CM event (already acked) of a current endpoint. */
static void on_cm_event(xfer_rdma *r, rd_ep *ep, enum rdma_cm_event_type t)
{
    if (t == RDMA_CM_EVENT_ADDR_RESOLVED && ep->state == EP_ADDR) {
        ep->state = EP_ROUTE;
        if (ep->id->verbs != r->ctx ||
            rdma_resolve_route(ep->id, (int)r->cfg.cm_timeout_ms) != 0) {
            r->st.cm_failures++;
            break_shard(r, ep->shard);
        }
    } else if (t == RDMA_CM_EVENT_ROUTE_RESOLVED && ep->state == EP_ROUTE) {
        on_route(r, ep);
    } else if (t == RDMA_CM_EVENT_ESTABLISHED &&
               ep->state == EP_CONNECTING) {
        ep->state = EP_UP;
        r->st.cm_connects++;
        xfer_tcp_open(r->tcp, ep->shard);
    } else if (t == RDMA_CM_EVENT_DISCONNECTED ||
               t == RDMA_CM_EVENT_DEVICE_REMOVAL) {
        break_shard(r, ep->shard);
    } else if (t != RDMA_CM_EVENT_TIMEWAIT_EXIT) {
        /* ADDR/ROUTE/CONNECT_ERROR, UNREACHABLE, REJECTED, or out of turn */
        r->st.cm_failures++;
        break_shard(r, ep->shard);
    }
}

static void on_cm(evutil_socket_t fd, short what, void *arg)
{
    xfer_rdma *r = arg;
    struct rdma_cm_event *ev;
    while (rdma_get_cm_event(r->ch, &ev) == 0) {
        rd_ep *ep = ev->id ? ev->id->context : NULL;
        enum rdma_cm_event_type t = ev->event;
        rdma_ack_cm_event(ev);
        /* a zombie's events say nothing new: it is down already */
        if (ep && !ep->zombie && r->shards[ep->shard].ep == ep)
            on_cm_event(r, ep, t);
    }
}

/* Async events (QP_FATAL, a QP's access error): acked; the completions
 * of the QP's WRs say what happened to each write. */
static void on_async(evutil_socket_t fd, short what, void *arg)
{
    xfer_rdma *r = arg;
    struct ibv_async_event ev;
    while (ibv_get_async_event(r->ctx, &ev) == 0)
        ibv_ack_async_event(&ev);
}

/* Deferred work: take broken shards down, then hand results over. */
static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    xfer_rdma *r = arg;
    for (uint16_t k = 0; k < r->cfg.tcp.nshards; k++)
        if (r->shards[k].broken) {
            r->shards[k].broken = false;
            xfer_tcp_drop(r->tcp, k); /* its link-down hook: ep_lose */
            if (r->shards[k].ep) /* TCP was not up: no hook came */
                ep_lose(r, k);
        }
    zombie_reap(r);
    uint32_t n = r->nq;
    for (uint32_t i = 0; i < n && r->engine; i++) {
        xfer_shard_result res = r->q[i]; /* r->q may grow meanwhile */
        xfer_engine_deliver(r->engine, &res);
    }
    /* deliver may start writes that finish at once: they queued behind
     * (nothing to move when nothing was queued: r->q may still be NULL) */
    if (n)
        memmove(r->q, r->q + n, (r->nq - n) * sizeof *r->q);
    r->nq -= n;
    if (r->nq)
        kick(r);
}

/* ---------------------------------------------------------------------- */
/* Hooks of the TCP transport                                              */
/* ---------------------------------------------------------------------- */

static void h_deliver(void *ud, const xfer_shard_result *res)
{
    xfer_rdma *r = ud;
    if (r->engine)
        xfer_engine_deliver(r->engine, res);
}

static void h_link(void *ud, uint16_t shard, bool up, int fd)
{
    xfer_rdma *r = ud;
    if (r->closing)
        return;
    if (r->shards[shard].ep)
        ep_lose(r, shard);
    if (up)
        ep_start(r, shard, fd);
}

/* ---------------------------------------------------------------------- */
/* The ops table                                                           */
/* ---------------------------------------------------------------------- */

static uint16_t t_nshards(void *self)
{
    return ((xfer_rdma *)self)->cfg.tcp.nshards;
}

static int t_attach(void *self, struct xfer_engine *e, uint32_t group)
{
    xfer_rdma *r = self;
    (void)group;
    if (r->engine)
        return XFER_ERR_BUSY;
    r->engine = e;
    return 0;
}

static void rdma_free(xfer_rdma *r);

/* The engine lets go (xfer_engine_del); a transport the user deleted
 * while attached is freed now. */
static void t_detach(void *self)
{
    xfer_rdma *r = self;
    r->engine = NULL;
    if (r->del_pending)
        rdma_free(r);
}

static int start_write(xfer_rdma *r, const xfer_action *a, const void *src)
{
    if (a->pool >= RD_MAX_POOLS || !r->pools[a->pool].used ||
        (a->len && !src) ||
        wrs_of(r, a->len) > r->cfg.max_send_wr)
        return XFER_ERR_INVALID_ARG;
    const rd_pool *p = &r->pools[a->pool];
    const uint8_t *s = src;
    if (a->len && (s < p->base || (size_t)(s - p->base) > p->len ||
                   p->len - (size_t)(s - p->base) < a->len))
        return XFER_ERR_INVALID_ARG;
    if (q_reserve(r, r->nq + r->writes_out + 1) != 0)
        return XFER_ERR_NOMEM;
    rd_op *op = xfer_util_calloc(&r->alloc, 1, sizeof *op);
    if (!op)
        return XFER_ERR_NOMEM;
    op->a = *a;
    op->src = s;
    r->writes_out++;
    r->st.writes++;
    rd_shard *sh = &r->shards[a->shard];
    if (!sh->ep || sh->ep->state != EP_UP || sh->broken) {
        finish(r, op, down_status(r, a->shard));
        return 0;
    }
    xfer_list_push_back(&sh->wait, &op->link);
    post_waiting(r, a->shard);
    return 0;
}

static int t_start(void *self, const xfer_action *a, const void *src)
{
    xfer_rdma *r = self;
    if (a->shard >= r->cfg.tcp.nshards || a->kind > XFER_ACT_CANCEL)
        return XFER_ERR_INVALID_ARG;
    if (a->kind != XFER_ACT_WRITE)
        return xfer_tcp_start_op_src(r->tcp, a, src);
    return start_write(r, a, src);
}

/* A COMMIT with the caller's CRC goes over the TCP transport as any
 * COMMIT does (an RDMA group takes no EAGER). */
static int t_start_crc(void *self, const xfer_action *a, const void *src,
                       uint32_t crc)
{
    xfer_rdma *r = self;
    if (a->shard >= r->cfg.tcp.nshards)
        return XFER_ERR_INVALID_ARG;
    return xfer_tcp_start_op_crc(r->tcp, a, src, crc);
}

static void t_abort(void *self, const xfer_action *a)
{
    xfer_rdma *r = self;
    if (a->shard >= r->cfg.tcp.nshards)
        return;
    if (a->op != XFER_OP_WRITE) {
        xfer_tcp_abort_op(r->tcp, a);
        return;
    }
    rd_shard *sh = &r->shards[a->shard];
    for (xfer_list_node *n = sh->wait.head; n; n = n->next) {
        rd_op *op = XFER_LIST_ITEM(n, rd_op, link);
        if (op->a.id == a->id && op->a.attempt == a->attempt) {
            xfer_list_remove(&sh->wait, n);
            finish(r, op, XFER_ERR_ABORTED);
            return;
        }
    }
    /* Posted: WRs cannot be recalled.  Its result comes with its last
     * completion: the real one (the core's naming rule holds), or ABORTED
     * if it flushes. */
    for (xfer_list_node *n = sh->posted.head; n; n = n->next) {
        rd_op *op = XFER_LIST_ITEM(n, rd_op, link);
        if (op->a.id == a->id && op->a.attempt == a->attempt)
            op->aborted = true;
    }
}

static int t_pool_added(void *self, uint32_t pool, void *base, size_t len)
{
    xfer_rdma *r = self;
    if (pool >= RD_MAX_POOLS)
        return XFER_ERR_BUSY;
    rd_pool *p = &r->pools[pool];
    if (p->used)
        return XFER_ERR_EXISTS;
    /* Device staging: dma-buf, else nvidia-peermem, else refused; the
     * transport has no log callback, so its stats say which path each
     * pool took (pools_dmabuf, pools_peermem, pools_device_refused). */
    int drc = xfer_rdma_devmem_open(&p->dm, base, len ? len : 1, NULL, NULL);
    if (drc) {
        r->st.reg_failures++;
        r->st.pools_device_refused++;
        return drc;
    }
    p->mr = xfer_rdma_devmem_reg(&p->dm, r->pd, 0, len ? len : 1,
                            (uintptr_t)base, IBV_ACCESS_LOCAL_WRITE);
    if (!p->mr) {
        xfer_rdma_devmem_close(&p->dm);
        r->st.reg_failures++;
        return XFER_ERR_NOMEM;
    }
    p->used = true;
    p->base = base;
    p->len = len;
    r->st.pools_registered++;
    if (p->dm.path == XFER_RDMA_DEVMEM_DMABUF)
        r->st.pools_dmabuf++;
    else if (p->dm.path == XFER_RDMA_DEVMEM_PEERMEM)
        r->st.pools_peermem++;
    r->st.mrs_live++;
    return 0;
}

static void t_pool_removed(void *self, uint32_t pool)
{
    xfer_rdma *r = self;
    if (pool >= RD_MAX_POOLS || !r->pools[pool].used)
        return;
    rd_pool *p = &r->pools[pool];
    if (p->writes) {
        p->removing = true; /* deregistered at its last completion */
        return;
    }
    ibv_dereg_mr(p->mr);
    xfer_rdma_devmem_close(&p->dm);
    r->st.mrs_live--;
    memset(p, 0, sizeof *p);
}

/* A lease refresh goes over the shard's control connection, as a
 * RESERVE does (the one-sided shard grants it in RESERVED like any). */
static int t_refresh(void *self, uint16_t shard, uint64_t id,
                     uint32_t attempt, uint64_t resv_id, uint64_t want_ns)
{
    xfer_rdma *r = self;
    if (shard >= r->cfg.tcp.nshards)
        return XFER_ERR_INVALID_ARG;
    return xfer_tcp_refresh(r->tcp, shard, id, attempt, resv_id, want_ns);
}

static void h_refreshed(void *ud, uint64_t id, uint16_t shard,
                        uint32_t attempt, int status, uint64_t granted_ns)
{
    xfer_rdma *r = ud;
    if (r->engine)
        xfer_engine_refreshed(r->engine, id, shard, attempt, status,
                              granted_ns);
}

static const xfer_transport_ops rdma_ops = {
    .version = XFER_TRANSPORT_OPS_VERSION,
    .name = "rdma",
    .nshards = t_nshards,
    .attach = t_attach,
    .start = t_start,
    .abort = t_abort,
    .pool_added = t_pool_added,
    .pool_removed = t_pool_removed,
    .detach = t_detach,
    .refresh = t_refresh,
    .start_crc = t_start_crc,
};

xfer_transport xfer_rdma_transport(xfer_rdma *r)
{
    return (xfer_transport){.ops = &rdma_ops, .self = r};
}

/* ---------------------------------------------------------------------- */
/* New and del                                                             */
/* ---------------------------------------------------------------------- */

void xfer_rdma_config_default(xfer_rdma_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->version = XFER_RDMA_CONFIG_VERSION;
    xfer_tcp_config_default(&cfg->tcp);
    cfg->max_send_wr = 256;
    cfg->cm_timeout_ms = 2000;
}

/* The first device rdmacm knows, its PD, one CQ for every shard. */
static int open_device(xfer_rdma *r)
{
    int n = 0;
    struct ibv_port_attr pa;
    r->devs = rdma_get_devices(&n);
    if (!r->devs || n < 1)
        return XFER_ERR_NOT_SUPPORTED;
    r->ctx = r->devs[0];
    /* room for a zombie's flushes next to its successor's WRs */
    uint32_t cqe = 2 * r->cfg.max_send_wr * r->cfg.tcp.nshards + 16;
    if (ibv_query_port(r->ctx, 1, &pa) != 0 ||
        !(r->pd = ibv_alloc_pd(r->ctx)) ||
        !(r->cc = ibv_create_comp_channel(r->ctx)) ||
        !(r->cq = ibv_create_cq(r->ctx, (int)cqe, r, r->cc, 0)) ||
        evutil_make_socket_nonblocking(r->cc->fd) != 0 ||
        ibv_req_notify_cq(r->cq, 0) != 0)
        return XFER_ERR_IO;
    r->max_msg = pa.max_msg_sz ? pa.max_msg_sz : 1u << 30;
    if (!(r->ch = rdma_create_event_channel()) ||
        evutil_make_socket_nonblocking(r->ch->fd) != 0)
        return XFER_ERR_IO;
    return 0;
}

static int make_events(xfer_rdma *r)
{
    r->cq_ev = event_new(r->base, r->cc->fd, EV_READ | EV_PERSIST, on_cq, r);
    r->cm_ev = event_new(r->base, r->ch->fd, EV_READ | EV_PERSIST, on_cm, r);
    r->kick_ev = event_new(r->base, -1, 0, on_kick, r);
    r->async_ev = event_new(r->base, r->ctx->async_fd, EV_READ | EV_PERSIST,
                            on_async, r);
    if (!r->cq_ev || !r->cm_ev || !r->kick_ev || !r->async_ev ||
        evutil_make_socket_nonblocking(r->ctx->async_fd) != 0 ||
        event_add(r->cq_ev, NULL) != 0 || event_add(r->cm_ev, NULL) != 0 ||
        event_add(r->async_ev, NULL) != 0)
        return XFER_ERR_NOMEM;
    return 0;
}

int xfer_rdma_new(struct event_base *base, const xfer_rdma_config *cfg,
                  xfer_rdma **out)
{
    if (!base || !cfg || !out || cfg->version != XFER_RDMA_CONFIG_VERSION)
        return XFER_ERR_INVALID_ARG;
    xfer_rdma *r = xfer_util_calloc(&cfg->tcp.alloc, 1, sizeof *r);
    if (!r)
        return XFER_ERR_NOMEM;
    r->base = base;
    xfer_base_ref(base); /* dropped by rdma_free: see base_ref.h */
    r->cfg = *cfg;
    r->alloc = cfg->tcp.alloc;
    if (!r->cfg.max_send_wr)
        r->cfg.max_send_wr = 256;
    if (!r->cfg.cm_timeout_ms)
        r->cfg.cm_timeout_ms = 2000;
    int rc = XFER_ERR_INVALID_ARG;
    if (cfg->tcp.nshards == 0 || cfg->tcp.nshards > XFER_MAX_SHARDS)
        goto out_fail;
    rc = open_device(r);
    if (!rc)
        rc = make_events(r);
    if (rc)
        goto out_fail;
    /* Created from a group (cfg.tcp.dir): the TCP transport follows it,
     * and only entries whose server has an rdmacm listener count. */
    xfer_tcp_hooks h = {.ud = r, .deliver = h_deliver, .link = h_link,
                        .dir_transports = XFER_DIR_RDMA,
                        .refreshed = h_refreshed};
    rc = xfer_tcp_new_hooked(base, &cfg->tcp, &h, &r->tcp);
    if (rc)
        goto out_fail;
    r->cfg.tcp.addrs = NULL; /* the tcp transport copied them */
    r->cfg.tcp.dir_group = NULL; /* likewise */
    *out = r;
    return 0;
out_fail:
    xfer_rdma_del(r);
    return rc;
}

/* Deleted while attached: the engine calls into the transport until it
 * detaches, so the free waits for that detach. */
void xfer_rdma_del(xfer_rdma *r)
{
    if (!r)
        return;
    if (r->engine)
        r->del_pending = true;
    else
        rdma_free(r);
}

static void rdma_free(xfer_rdma *r)
{
    struct event_base *base = r->base;
    r->closing = true; /* hooks do nothing while the tcp transport goes */
    xfer_tcp_del(r->tcp);
    for (uint16_t k = 0; k < XFER_MAX_SHARDS; k++) {
        xfer_list_node *n;
        while ((n = xfer_list_pop_front(&r->shards[k].wait)))
            xfer_util_free(&r->alloc, XFER_LIST_ITEM(n, rd_op, link));
        while ((n = xfer_list_pop_front(&r->shards[k].posted)))
            xfer_util_free(&r->alloc, XFER_LIST_ITEM(n, rd_op, link));
        if (r->shards[k].ep)
            ep_destroy(r->shards[k].ep);
    }
    while (r->zombies) {
        rd_ep *ep = r->zombies;
        r->zombies = ep->next_zombie;
        ep_destroy(ep);
    }
    for (uint32_t p = 0; p < RD_MAX_POOLS; p++)
        if (r->pools[p].mr) {
            ibv_dereg_mr(r->pools[p].mr);
            xfer_rdma_devmem_close(&r->pools[p].dm);
        }
    if (r->cq_ev)
        event_free(r->cq_ev);
    if (r->cm_ev)
        event_free(r->cm_ev);
    if (r->kick_ev)
        event_free(r->kick_ev);
    if (r->async_ev) {
        on_async(-1, 0, r); /* ack what came last */
        event_free(r->async_ev);
    }
    if (r->cq) {
        /* take the events it still has (unacked ones keep it alive) */
        struct ibv_cq *cq;
        void *ctx;
        unsigned events = 0;
        while (r->cc && ibv_get_cq_event(r->cc, &cq, &ctx) == 0)
            events++;
        if (events)
            ibv_ack_cq_events(r->cq, events);
        ibv_destroy_cq(r->cq);
    }
    if (r->cc)
        ibv_destroy_comp_channel(r->cc);
    if (r->pd)
        ibv_dealloc_pd(r->pd);
    if (r->ch)
        rdma_destroy_event_channel(r->ch);
    if (r->devs)
        rdma_free_devices(r->devs);
    xfer_util_free(&r->alloc, r->q);
    xfer_allocator a = r->alloc;
    xfer_util_free(&a, r);
    xfer_base_unref(base); /* last: the base may go with it */
}

/* ---------------------------------------------------------------------- */
/* Queries                                                                 */
/* ---------------------------------------------------------------------- */

/* The bytes each version of xfer_rdma_stats holds (util.h). */
static const size_t stats_lens[] = {
    offsetof(xfer_rdma_stats, pools_dmabuf), /* 1 */
    sizeof(xfer_rdma_stats)};                /* 2: device staging paths */

int xfer_rdma_stats_get_versioned(const xfer_rdma *r, uint32_t version,
                                  xfer_rdma_stats *st)
{
    if (!r || !st)
        return XFER_ERR_INVALID_ARG;
    xfer_rdma_stats now = r->st;
    uint32_t out = 0;
    for (uint16_t k = 0; k < XFER_MAX_SHARDS; k++)
        if (r->shards[k].ep)
            out += r->shards[k].ep->wr_out;
    for (const rd_ep *ep = r->zombies; ep; ep = ep->next_zombie)
        out += ep->wr_out;
    now.wrs_outstanding = out;
    return xfer_util_versioned_copy(st, &now, version, stats_lens,
                                    XFER_UTIL_NVERSIONS(stats_lens));
}

bool xfer_rdma_connected(const xfer_rdma *r, uint16_t shard)
{
    return r && shard < r->cfg.tcp.nshards && r->shards[shard].ep &&
           r->shards[shard].ep->state == EP_UP &&
           xfer_tcp_connected(r->tcp, shard);
}

bool xfer_rdma_gone(const xfer_rdma *r, uint16_t shard)
{
    return r && shard < r->cfg.tcp.nshards && xfer_tcp_gone(r->tcp, shard);
}

void xfer_rdma_drop(xfer_rdma *r, uint16_t shard)
{
    if (r && shard < r->cfg.tcp.nshards)
        break_shard(r, shard);
}

int xfer_rdma_probe(char *why, size_t cap)
{
    int n = 0;
    errno = 0;
    struct ibv_device **l = ibv_get_device_list(&n);
    int err = errno;
    if (l)
        ibv_free_device_list(l);
    if (l && n > 0)
        return 0;
    if (why && cap)
        snprintf(why, cap, "no RDMA device (ibv_get_device_list: %s)",
                 l ? "0 devices" : strerror(err ? err : ENODEV));
    return XFER_ERR_NOT_SUPPORTED;
}
