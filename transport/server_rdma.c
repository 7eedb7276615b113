/*
 * transport/server_rdma.c - the RDMA side of the shard server: an rdmacm
 * listener next to the TCP one, a PD on its device, one RC QP per producer
 * connection, and one rkey per reservation (server_rdma.h says where the
 * server reaches it).  The rkey is, where the device has type 2 memory
 * windows (IBV_DEVICE_MEM_WINDOW_TYPE_2B), a window bound over the region
 * through the QP of the producer connection that reserved; otherwise a
 * registration of the region.  The start logs which, and
 * xfer_server_rdma_windows() says it.
 *
 * What stays true:
 *  - no rkey ever covers more than one live reservation's region: a window
 *    (or a registration) of exactly [off, off + len) with address off, so
 *    RESERVE_OK's address is the region's offset as over TCP, and a write
 *    outside it is refused by the device.  With windows, each shard's pool
 *    is registered once, with IBV_ACCESS_MW_BIND and no remote access: its
 *    own rkey opens nothing;
 *  - a window is bound through the QP of the reserving control
 *    connection's RC connection (the CM private data names the control
 *    connection: rdma_pdata.h), since a type 2 window's rkey is valid on
 *    that QP only; a reserve with no such QP is refused (XFER_ERR_REMOTE)
 *    and its region given back;
 *  - RESERVE_OK carries an rkey only after the bind's completion was
 *    polled with success; a failed bind answers the reserve with an error
 *    and gives the region back.  The completion is waited for inside the
 *    reserve (bounded, RDMA_WC_WAIT_NS): the loop stalls for one local
 *    completion, which keeps the server's reply path as it is;
 *  - a region is freed or made READY only after its rkey is dead (the
 *    shard is one-sided: it asks, xfer_server_rdma_invalidate kills and
 *    answers).  A window: IBV_WR_LOCAL_INV on its QP, that completion
 *    polled, then ibv_dealloc_mw; if the QP is in error (the completion is
 *    a flush, or the QP is gone) the window died with it, and the dealloc
 *    still comes first.  A registration: ibv_dereg_mr, which returns only
 *    once the device no longer accepts the rkey.  A write that arrives
 *    later lands nothing and fails at the producer (remote access error;
 *    RC then takes that connection down, and the producer reconnects);
 *  - a connection that goes takes its windows with it (deallocated before
 *    its QP is destroyed); their regions stay reserved until the shard
 *    asks, and then need nothing more;
 *  - every CM event and every async event is acked, each on the loop;
 *    an id is destroyed only after its event was acked, its QP first.
 */
#define _GNU_SOURCE
#include "server_rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "idmap.h" /* fsm_private_dep: id -> registration slot */
#include "rdma_devmem.h"
#include "rdma_pdata.h"
#include "server_int.h"
#include "util.h"  /* fsm_private_dep: the injected allocator */
#include "xfer/shard.h"

#define RDMA_BACKLOG 64
#define RDMA_SEND_WR 16
/* How long a bind or a local invalidation may take to complete before it
 * counts as failed (a bound on a spin, not a behaviour: a device
 * completes a local WR in microseconds). */
#define RDMA_WC_WAIT_NS 2000000000ull

typedef struct srv_conn srv_conn;
struct srv_conn {
    struct rdma_cm_id *id;
    xfer_rdma_pdata pd;   /* from its connect: the control connection */
    bool broken;          /* its QP went to error: disconnected, no binds */
    srv_conn *prev, *next;
};

/* The rkeys of one hosted shard, by reservation id: a registration
 * (mr[slot]) or a window (mw[slot], bound through via[slot]'s QP). */
typedef struct srv_regs {
    xfer_idmap map;           /* id -> slot */
    struct ibv_mr *pool_mr;   /* windows: the whole pool, MW_BIND only */
    struct ibv_mr **mr;       /* registrations: cap slots */
    struct ibv_mw **mw;       /* windows: cap slots */
    srv_conn **via;           /* windows: the connection that bound it */
    uint32_t *rkey;           /* the rkey each slot gave */
    uint64_t *resv;           /* the reservation id each slot holds */
    uint32_t *free_slots, nfree, cap;
    xfer_rdma_devmem dm;           /* how the pool is registered (device
                                 memory: dma-buf or nvidia-peermem) */
} srv_regs;

struct xfer_server_rdma {
    xfer_server *srv;
    struct ibv_context **devs;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct rdma_event_channel *ch;
    struct rdma_cm_id *listen;
    struct event *cm_ev, *async_ev;
    srv_conn *conns;
    uint16_t port;
    bool windows;             /* type 2 windows, else registrations */
    uint64_t wr_seq;          /* wr_id of the last WR posted */
    srv_regs regs[XFER_MAX_SHARDS];
};

/* ---------------------------------------------------------------------- */
/* Local work requests                                                     */
/* ---------------------------------------------------------------------- */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Post wr (signaled) on qp and poll the CQ until its completion; another
 * completion seen meanwhile is a WR that an earlier wait gave up on, and
 * is dropped.  0 with *st, or -1: the post failed, or no completion came
 * in time. */
static int post_wait(xfer_server_rdma *r, struct ibv_qp *qp,
                     struct ibv_send_wr *wr, enum ibv_wc_status *st)
{
    struct ibv_send_wr *bad;
    wr->wr_id = ++r->wr_seq;
    wr->send_flags = IBV_SEND_SIGNALED;
    if (ibv_post_send(qp, wr, &bad) != 0)
        return -1;
    uint64_t end = mono_ns() + RDMA_WC_WAIT_NS;
    for (;;) {
        struct ibv_wc wc;
        int n = ibv_poll_cq(r->cq, 1, &wc);
        if (n < 0)
            return -1;
        if (n == 1 && wc.wr_id == wr->wr_id) {
            *st = wc.status;
            return 0;
        }
        if (n == 0) {
            if (mono_ns() > end)
                return -1;
            sched_yield();
        }
    }
}

/* ---------------------------------------------------------------------- */
/* Per-reservation rkeys                                                   */
/* ---------------------------------------------------------------------- */

static void devmem_log(void *ud, const char *line)
{
    xfer_server_log(ud, 0, line);
}

static int regs_init(xfer_server_rdma *r, uint16_t i)
{
    srv_regs *g = &r->regs[i];
    uint32_t cap = r->srv->cfg.max_reservations;
    g->cap = cap;
    g->resv = xfer_server_calloc(r->srv, cap, sizeof *g->resv);
    g->rkey = xfer_server_calloc(r->srv, cap, sizeof *g->rkey);
    g->free_slots = xfer_server_calloc(r->srv, cap, sizeof *g->free_slots);
    if (r->windows) {
        g->mw = xfer_server_calloc(r->srv, cap, sizeof *g->mw);
        g->via = xfer_server_calloc(r->srv, cap, sizeof *g->via);
    } else {
        g->mr = xfer_server_calloc(r->srv, cap, sizeof *g->mr);
    }
    if (!g->resv || !g->rkey || !g->free_slots ||
        (r->windows ? !g->mw || !g->via : !g->mr))
        return XFER_ERR_NOMEM;
    for (uint32_t k = 0; k < cap; k++)
        g->free_slots[k] = cap - 1 - k;
    g->nfree = cap;
    int rc = xfer_idmap_init(&g->map, cap, &r->srv->cfg.alloc);
    if (rc)
        return rc;
    /* Device memory: dma-buf or nvidia-peermem, logged either way. */
    rc = xfer_rdma_devmem_open(&g->dm, xfer_shard_pool_base(r->srv->shards[i].sh),
                          r->srv->shard_cfg[i].len, devmem_log, r->srv);
    if (rc || !r->windows)
        return rc;
    /* iova 0: a window's address is the region's offset in the pool */
    g->pool_mr = xfer_rdma_devmem_reg(&g->dm, r->pd, 0, r->srv->shard_cfg[i].len,
                                 0, IBV_ACCESS_LOCAL_WRITE |
                                        IBV_ACCESS_MW_BIND);
    return g->pool_mr ? 0 : XFER_ERR_IO;
}

static void regs_clear(xfer_server_rdma *r, srv_regs *g)
{
    for (uint32_t i = 0; g->mw && i < g->cap; i++)
        if (g->mw[i])
            ibv_dealloc_mw(g->mw[i]);
    for (uint32_t i = 0; g->mr && i < g->cap; i++)
        if (g->mr[i])
            ibv_dereg_mr(g->mr[i]);
    if (g->pool_mr)
        ibv_dereg_mr(g->pool_mr); /* after its windows */
    xfer_rdma_devmem_close(&g->dm);
    xfer_idmap_clear(&g->map, &r->srv->cfg.alloc);
    xfer_server_free(r->srv, g->mr);
    xfer_server_free(r->srv, g->mw);
    xfer_server_free(r->srv, g->via);
    xfer_server_free(r->srv, g->rkey);
    xfer_server_free(r->srv, g->resv);
    xfer_server_free(r->srv, g->free_slots);
    memset(g, 0, sizeof *g);
}

static srv_regs *regs_of(xfer_server_rdma *r, xfer_server_hosted *hs)
{
    return &r->regs[hs - r->srv->shards];
}

/* The RC connection of control connection ctl (the newest that names it),
 * with its QP; NULL when there is none. */
static srv_conn *conn_of_ctl(xfer_server_rdma *r, xfer_server_conn *ctl)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    uint16_t port;
    uint8_t addr[16];
    evutil_socket_t fd = bufferevent_getfd(ctl->bev);
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &sl) != 0 ||
        !xfer_rdma_pdata_addr(&ss, &port, addr))
        return NULL;
    for (srv_conn *c = r->conns; c; c = c->next)
        if (c->pd.has_tcp && c->pd.tcp_port == port &&
            memcmp(c->pd.tcp_addr, addr, sizeof addr) == 0 && c->id->qp &&
            !c->broken)
            return c;
    return NULL;
}

/* A local WR of c's failed, so its QP is in error (RC): take the
 * connection down, so the producer reconnects both of its connections;
 * it goes at its DISCONNECTED event. */
static void conn_break(xfer_server_rdma *r, srv_conn *c)
{
    if (c->broken)
        return;
    c->broken = true;
    xfer_server_log(r->srv, 0, "rdma: QP in error, connection taken down");
    rdma_disconnect(c->id);
}

/* A window over [off, off + len) through c's QP, its bind's completion
 * polled; 0 with *mw and *rkey, or XFER_ERR_NOMEM / XFER_ERR_REMOTE. */
static int window_bind(xfer_server_rdma *r, srv_regs *g, srv_conn *c,
                       uint64_t off, uint32_t len, struct ibv_mw **mw,
                       uint32_t *rkey)
{
    struct ibv_mw *w = ibv_alloc_mw(r->pd, IBV_MW_TYPE_2);
    if (!w)
        return XFER_ERR_NOMEM;
    uint32_t key = ibv_inc_rkey(w->rkey);
    struct ibv_send_wr wr = {
        .opcode = IBV_WR_BIND_MW,
        .bind_mw = {.mw = w, .rkey = key,
                    .bind_info = {.mr = g->pool_mr, .addr = off,
                                  .length = len ? len : 1,
                                  .mw_access_flags =
                                      IBV_ACCESS_REMOTE_WRITE}},
    };
    enum ibv_wc_status st;
    if (post_wait(r, c->id->qp, &wr, &st) != 0 || st != IBV_WC_SUCCESS) {
        xfer_server_log(r->srv, 0, "rdma: window bind failed");
        ibv_dealloc_mw(w); /* bound or not, its rkey dies here */
        conn_break(r, c);
        return XFER_ERR_REMOTE;
    }
    *mw = w;
    *rkey = key;
    return 0;
}

/* Kill slot's window: invalidated on its QP (the completion polled), then
 * deallocated.  A QP in error or gone: the window is dead with it, and
 * the dealloc makes sure.  0, or -1: the dealloc failed (the window may
 * live; the region must stay unfreed). */
static int window_kill(xfer_server_rdma *r, srv_regs *g, uint32_t slot)
{
    srv_conn *c = g->via[slot];
    if (!g->mw[slot])
        return 0;
    if (c && c->id->qp && !c->broken) {
        struct ibv_send_wr wr = {.opcode = IBV_WR_LOCAL_INV,
                                 .invalidate_rkey = g->rkey[slot]};
        enum ibv_wc_status st;
        if (post_wait(r, c->id->qp, &wr, &st) != 0 || st != IBV_WC_SUCCESS)
            conn_break(r, c); /* flushed: the window died with the QP */
    }
    if (ibv_dealloc_mw(g->mw[slot]) != 0) {
        xfer_server_log(r->srv, 0, "rdma: dealloc_mw failed");
        return -1;
    }
    g->mw[slot] = NULL;
    g->via[slot] = NULL;
    return 0;
}

/* A registration of exactly [off, off + len), iova off. */
static int region_register(xfer_server_rdma *r, xfer_server_hosted *hs,
                           uint64_t off, uint32_t len, struct ibv_mr **out)
{
    *out = xfer_rdma_devmem_reg(&regs_of(r, hs)->dm, r->pd, off, len ? len : 1,
                           off,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    return *out ? 0 : XFER_ERR_NOMEM;
}

int xfer_server_rdma_bind(xfer_server_rdma *r, xfer_server_hosted *hs,
                          xfer_server_conn *ctl, uint64_t id,
                          uint64_t resv_id, uint64_t off, uint32_t len,
                          uint32_t *rkey)
{
    srv_regs *g = regs_of(r, hs);
    srv_conn *c = r->windows ? conn_of_ctl(r, ctl) : NULL;
    if (r->windows && !c) {
        xfer_server_log(r->srv, ctl->serial,
                        "rdma: reserve without its RC connection refused");
        return XFER_ERR_REMOTE;
    }
    uint32_t slot;
    bool again =
        xfer_idmap_get(&g->map, id, &slot) && g->resv[slot] == resv_id;
    if (again && (!r->windows || g->via[slot] == c)) {
        *rkey = g->rkey[slot]; /* a repeated reserve: the same rkey */
        return 0;
    }
    if (again) {
        /* repeated over another connection: a window through the old QP
         * would refuse the new one's writes; kill it, bind anew */
        if (window_kill(r, g, slot) != 0)
            return XFER_ERR_REMOTE;
    } else if (g->nfree == 0) {
        return XFER_ERR_NOMEM;
    } else {
        slot = g->free_slots[g->nfree - 1];
    }
    int rc = r->windows
                 ? window_bind(r, g, c, off, len, &g->mw[slot], &g->rkey[slot])
                 : region_register(r, hs, off, len, &g->mr[slot]);
    if (rc)
        return rc; /* a repeat's slot stays, windowless: invalidate frees */
    if (r->windows)
        g->via[slot] = c;
    else
        g->rkey[slot] = g->mr[slot]->rkey;
    if (!again) {
        g->nfree--;
        g->resv[slot] = resv_id;
        xfer_idmap_put(&g->map, id, slot);
    }
    *rkey = g->rkey[slot];
    return 0;
}

/* Kill slot's rkey; 0, or -1 when it may still be alive. */
static int rkey_kill(xfer_server_rdma *r, srv_regs *g, uint32_t slot)
{
    if (r->windows)
        return window_kill(r, g, slot);
    if (g->mr[slot] && ibv_dereg_mr(g->mr[slot]) != 0) {
        xfer_server_log(r->srv, 0, "rdma: dereg_mr failed");
        return -1;
    }
    g->mr[slot] = NULL;
    return 0;
}

void xfer_server_rdma_invalidate(xfer_server_rdma *r, xfer_server_hosted *hs,
                                 uint64_t now)
{
    srv_regs *g = regs_of(r, hs);
    size_t n;
    /* xfer_shard_invalidated only publishes or frees: it asks for no new
     * invalidation, so the list stays as it is while we walk it */
    const xfer_shard_inval *q = xfer_shard_invalidations(hs->sh, &n);
    for (size_t i = 0; i < n; i++) {
        uint32_t slot;
        if (xfer_idmap_get(&g->map, q[i].id, &slot) &&
            g->resv[slot] == q[i].resv_id) {
            if (rkey_kill(r, g, slot) != 0)
                continue; /* still alive: the region must stay unfreed */
            xfer_idmap_del(&g->map, q[i].id);
            g->free_slots[g->nfree++] = slot;
        }
        /* without an rkey (it failed at reserve) nothing can land */
        xfer_shard_invalidated(hs->sh, now, q[i].id, q[i].resv_id);
    }
    xfer_shard_invalidations_clear(hs->sh);
}

int xfer_server_rdma_seal(xfer_server_rdma *r, xfer_server_hosted *hs,
                          uint64_t id, uint64_t resv_id)
{
    srv_regs *g = regs_of(r, hs);
    uint32_t slot;
    if (!xfer_idmap_get(&g->map, id, &slot) || g->resv[slot] != resv_id)
        return 0; /* no rkey was ever given out: nothing can land */
    return rkey_kill(r, g, slot);
}

bool xfer_server_rdma_windows(const xfer_server *s)
{
    return s && s->rdma && s->rdma->windows;
}

/* ---------------------------------------------------------------------- */
/* Connections                                                             */
/* ---------------------------------------------------------------------- */

static void conn_free(xfer_server_rdma *r, srv_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        r->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    /* its windows go first: dead with its QP, deallocated before it */
    for (uint16_t i = 0; r->windows && i < r->srv->cfg.nshards; i++) {
        srv_regs *g = &r->regs[i];
        for (uint32_t k = 0; g->via && k < g->cap; k++)
            if (g->via[k] == c && ibv_dealloc_mw(g->mw[k]) == 0) {
                g->mw[k] = NULL;
                g->via[k] = NULL;
            }
    }
    if (c->id->qp)
        rdma_destroy_qp(c->id);
    rdma_destroy_id(c->id);
    xfer_server_free(r->srv, c);
}

/* A producer asks to connect: its private data names the group. */
static void on_request(xfer_server_rdma *r, struct rdma_cm_id *id,
                       const struct rdma_conn_param *p)
{
    xfer_rdma_pdata pd;
    xfer_rdma_pdata_decode(p->private_data, p->private_data_len, &pd);
    srv_conn *c = NULL;
    struct ibv_qp_init_attr qa = {
        .send_cq = r->cq, .recv_cq = r->cq,
        .cap = {.max_send_wr = RDMA_SEND_WR, .max_recv_wr = 1,
                .max_send_sge = 1,
                .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    struct rdma_conn_param cp = {.responder_resources = 1,
                                 .initiator_depth = 1,
                                 .rnr_retry_count = 7};
    if (pd.magic != XFER_RDMA_PDATA_MAGIC || pd.group != r->srv->cfg.group ||
        id->verbs != r->ctx || r->srv->draining)
        goto out_reject;
    c = xfer_server_calloc(r->srv, 1, sizeof *c);
    if (!c || rdma_create_qp(id, r->pd, &qa) != 0)
        goto out_reject;
    c->id = id;
    c->pd = pd;
    id->context = c;
    c->next = r->conns;
    if (r->conns)
        r->conns->prev = c;
    r->conns = c;
    if (rdma_accept(id, &cp) != 0)
        conn_free(r, c);
    return;
out_reject:
    xfer_server_log(r->srv, 0, "rdma: connection request refused");
    if (id->qp)
        rdma_destroy_qp(id);
    xfer_server_free(r->srv, c);
    rdma_reject(id, NULL, 0);
    rdma_destroy_id(id);
}

static void on_cm(evutil_socket_t fd, short what, void *arg)
{
    xfer_server_rdma *r = arg;
    struct rdma_cm_event *ev;
    while (rdma_get_cm_event(r->ch, &ev) == 0) {
        struct rdma_cm_id *id = ev->id;
        enum rdma_cm_event_type type = ev->event;
        if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            struct rdma_conn_param p = ev->param.conn;
            uint8_t copy[56];
            size_t n = p.private_data_len < sizeof copy ? p.private_data_len
                                                        : sizeof copy;
            if (p.private_data)
                memcpy(copy, p.private_data, n);
            p.private_data = p.private_data ? copy : NULL;
            p.private_data_len = (uint8_t)n;
            rdma_ack_cm_event(ev);
            on_request(r, id, &p);
            continue;
        }
        rdma_ack_cm_event(ev);
        srv_conn *c = id != r->listen ? id->context : NULL;
        /* ESTABLISHED, TIMEWAIT_EXIT: nothing to do; a connection that
         * ends or never came up goes */
        if (c && (type == RDMA_CM_EVENT_DISCONNECTED ||
                  type == RDMA_CM_EVENT_CONNECT_ERROR ||
                  type == RDMA_CM_EVENT_UNREACHABLE ||
                  type == RDMA_CM_EVENT_REJECTED ||
                  type == RDMA_CM_EVENT_DEVICE_REMOVAL))
            conn_free(r, c);
    }
}

/* Async events (a refused late write moves our QP to error): ack each. */
static void on_async(evutil_socket_t fd, short what, void *arg)
{
    xfer_server_rdma *r = arg;
    struct ibv_async_event ev;
    while (ibv_get_async_event(r->ctx, &ev) == 0)
        ibv_ack_async_event(&ev);
}

/* ---------------------------------------------------------------------- */
/* New and del                                                             */
/* ---------------------------------------------------------------------- */

/* The listener on the server's address: its device is the one we use. */
static int listen_rdma(xfer_server_rdma *r, uint16_t port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, r->srv->cfg.addr, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
    } else if (inet_pton(AF_INET6, r->srv->cfg.addr, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
    } else {
        return XFER_ERR_INVALID_ARG;
    }
    if (!(r->ch = rdma_create_event_channel()))
        return errno == ENODEV || errno == ENOSYS ? XFER_ERR_NOT_SUPPORTED
                                                  : XFER_ERR_IO;
    if (evutil_make_socket_nonblocking(r->ch->fd) != 0 ||
        rdma_create_id(r->ch, &r->listen, r, RDMA_PS_TCP) != 0 ||
        rdma_bind_addr(r->listen, (struct sockaddr *)&ss) != 0 ||
        rdma_listen(r->listen, RDMA_BACKLOG) != 0)
        return XFER_ERR_IO;
    r->port = ntohs(rdma_get_src_port(r->listen));
    return 0;
}

/* The device: the listener's, or the first rdmacm knows (any address). */
static int open_device(xfer_server_rdma *r)
{
    r->ctx = r->listen->verbs;
    if (!r->ctx) {
        int n = 0;
        r->devs = rdma_get_devices(&n);
        if (!r->devs || n < 1)
            return XFER_ERR_NOT_SUPPORTED;
        r->ctx = r->devs[0];
    }
    struct ibv_device_attr da;
    if (ibv_query_device(r->ctx, &da) != 0 ||
        !(r->pd = ibv_alloc_pd(r->ctx)) ||
        !(r->cq = ibv_create_cq(r->ctx, 16, r, NULL, 0)) ||
        evutil_make_socket_nonblocking(r->ctx->async_fd) != 0)
        return XFER_ERR_IO;
    r->windows = (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0;
    xfer_server_log(r->srv, 0,
                    r->windows
                        ? "rdma: per-reservation rkeys via type-2 memory "
                          "windows"
                        : "rdma: per-reservation rkeys via registrations "
                          "(device has no type-2 windows)");
    return 0;
}

int xfer_server_rdma_new(xfer_server *s, const xfer_server_rdma_config *cfg,
                         xfer_server_rdma **out)
{
    if (cfg && cfg->version != XFER_SERVER_RDMA_CONFIG_VERSION)
        return XFER_ERR_INVALID_ARG;
    xfer_server_rdma *r = xfer_server_calloc(s, 1, sizeof *r);
    if (!r)
        return XFER_ERR_NOMEM;
    r->srv = s;
    int rc = listen_rdma(r, cfg && cfg->port ? cfg->port : s->port);
    if (!rc)
        rc = open_device(r);
    for (uint16_t i = 0; !rc && i < s->cfg.nshards; i++)
        rc = regs_init(r, i);
    if (rc)
        goto out_fail;
    rc = XFER_ERR_NOMEM;
    r->cm_ev = event_new(s->base, r->ch->fd, EV_READ | EV_PERSIST, on_cm, r);
    r->async_ev = event_new(s->base, r->ctx->async_fd, EV_READ | EV_PERSIST,
                            on_async, r);
    if (!r->cm_ev || !r->async_ev || event_add(r->cm_ev, NULL) != 0 ||
        event_add(r->async_ev, NULL) != 0)
        goto out_fail;
    *out = r;
    return 0;
out_fail:
    xfer_server_rdma_del(r);
    return rc;
}

void xfer_server_rdma_del(xfer_server_rdma *r)
{
    if (!r)
        return;
    if (r->cm_ev)
        event_free(r->cm_ev);
    if (r->async_ev)
        event_free(r->async_ev);
    while (r->conns)
        conn_free(r, r->conns);
    for (uint16_t i = 0; i < XFER_MAX_SHARDS; i++)
        regs_clear(r, &r->regs[i]);
    if (r->listen)
        rdma_destroy_id(r->listen);
    if (r->cq)
        ibv_destroy_cq(r->cq);
    if (r->pd)
        ibv_dealloc_pd(r->pd);
    if (r->ch)
        rdma_destroy_event_channel(r->ch);
    if (r->devs)
        rdma_free_devices(r->devs);
    xfer_server_free(r->srv, r);
}

uint16_t xfer_server_rdma_bound_port(const xfer_server_rdma *r)
{
    return r ? r->port : 0;
}
