/*
 * transport/server_rdma.c - the RDMA side of the shard server: an rdmacm
 * listener next to the TCP one, a PD on its device, one RC QP per producer
 * connection, and one memory registration per reservation (server_rdma.h
 * says where the server reaches it).
 *
 * What stays true:
 *  - no rkey ever covers more than one live reservation's region: each
 *    reservation gets a registration of exactly [off, off + len) with
 *    iova = off, so RESERVE_OK's address is the region's offset as over
 *    TCP, and a write outside it is refused by the device;
 *  - a region is freed or made READY only after its registration is gone
 *    (the shard is one-sided: it asks, xfer_server_rdma_invalidate
 *    deregisters and answers).  ibv_dereg_mr returns only once the device
 *    no longer accepts the rkey, so a write that arrives later lands
 *    nothing and fails at the producer (remote access error; RC then takes
 *    that connection down, and the producer reconnects);
 *  - every CM event and every async event is acked, each on the loop;
 *    an id is destroyed only after its event was acked, its QP first.
 * Type 2 memory windows are not used (per-reservation registrations work
 * on every device, and need no QP to bind through); docs/design.md
 * section 5 says what a window-based variant would add.
 */
#define _GNU_SOURCE
#include "server_rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "idmap.h" /* fsm_private_dep: id -> registration slot */
#include "server_int.h"
#include "util.h"  /* fsm_private_dep: the injected allocator */
#include "xfer/shard.h"

#define RDMA_BACKLOG 64
#define RDMA_PDATA_MAGIC 0x58464552u /* "XFER" */

typedef struct srv_conn srv_conn;
struct srv_conn {
    struct rdma_cm_id *id;
    srv_conn *prev, *next;
};

/* The registrations of one hosted shard, by reservation id. */
typedef struct srv_regs {
    xfer_idmap map;           /* id -> slot */
    struct ibv_mr **mr;       /* cap slots */
    uint64_t *resv;           /* the reservation id each slot holds */
    uint32_t *free_slots, nfree, cap;
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
    srv_regs regs[XFER_MAX_SHARDS];
};

/* ---------------------------------------------------------------------- */
/* Registrations                                                           */
/* ---------------------------------------------------------------------- */

static int regs_init(xfer_server_rdma *r, srv_regs *g, uint32_t cap)
{
    g->cap = cap;
    g->mr = xfer_server_calloc(r->srv, cap, sizeof *g->mr);
    g->resv = xfer_server_calloc(r->srv, cap, sizeof *g->resv);
    g->free_slots = xfer_server_calloc(r->srv, cap, sizeof *g->free_slots);
    if (!g->mr || !g->resv || !g->free_slots)
        return XFER_ERR_NOMEM;
    for (uint32_t i = 0; i < cap; i++)
        g->free_slots[i] = cap - 1 - i;
    g->nfree = cap;
    return xfer_idmap_init(&g->map, cap, &r->srv->cfg.alloc);
}

static void regs_clear(xfer_server_rdma *r, srv_regs *g)
{
    for (uint32_t i = 0; g->mr && i < g->cap; i++)
        if (g->mr[i])
            ibv_dereg_mr(g->mr[i]);
    xfer_idmap_clear(&g->map, &r->srv->cfg.alloc);
    xfer_server_free(r->srv, g->mr);
    xfer_server_free(r->srv, g->resv);
    xfer_server_free(r->srv, g->free_slots);
    memset(g, 0, sizeof *g);
}

static srv_regs *regs_of(xfer_server_rdma *r, xfer_server_hosted *hs)
{
    return &r->regs[hs - r->srv->shards];
}

int xfer_server_rdma_bind(xfer_server_rdma *r, xfer_server_hosted *hs,
                          uint64_t id, uint64_t resv_id, uint64_t off,
                          uint32_t len, uint32_t *rkey)
{
    srv_regs *g = regs_of(r, hs);
    uint32_t slot;
    if (xfer_idmap_get(&g->map, id, &slot) && g->resv[slot] == resv_id) {
        *rkey = g->mr[slot]->rkey; /* a repeated reserve: the same rkey */
        return 0;
    }
    if (g->nfree == 0)
        return XFER_ERR_NOMEM;
    uint8_t *base = xfer_shard_pool_base(hs->sh);
    struct ibv_mr *mr = ibv_reg_mr_iova(
        r->pd, base + off, len ? len : 1, off,
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr)
        return XFER_ERR_NOMEM;
    slot = g->free_slots[--g->nfree];
    g->mr[slot] = mr;
    g->resv[slot] = resv_id;
    xfer_idmap_put(&g->map, id, slot);
    *rkey = mr->rkey;
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
            if (ibv_dereg_mr(g->mr[slot]) != 0) {
                /* still registered: the region must stay unfreed */
                xfer_server_log(r->srv, 0, "rdma: dereg_mr failed");
                continue;
            }
            g->mr[slot] = NULL;
            xfer_idmap_del(&g->map, q[i].id);
            g->free_slots[g->nfree++] = slot;
        }
        /* without a registration (it failed at reserve) nothing can land */
        xfer_shard_invalidated(hs->sh, now, q[i].id, q[i].resv_id);
    }
    xfer_shard_invalidations_clear(hs->sh);
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
    if (c->id->qp)
        rdma_destroy_qp(c->id);
    rdma_destroy_id(c->id);
    xfer_server_free(r->srv, c);
}

/* A producer asks to connect: its private data names the group. */
static void on_request(xfer_server_rdma *r, struct rdma_cm_id *id,
                       const struct rdma_conn_param *p)
{
    uint8_t pd[8] = {0};
    if (p->private_data && p->private_data_len >= sizeof pd)
        memcpy(pd, p->private_data, sizeof pd);
    uint32_t magic = (uint32_t)pd[0] | (uint32_t)pd[1] << 8 |
                     (uint32_t)pd[2] << 16 | (uint32_t)pd[3] << 24;
    uint32_t group = (uint32_t)pd[4] | (uint32_t)pd[5] << 8 |
                     (uint32_t)pd[6] << 16 | (uint32_t)pd[7] << 24;
    srv_conn *c = NULL;
    struct ibv_qp_init_attr qa = {
        .send_cq = r->cq, .recv_cq = r->cq,
        .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
                .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    struct rdma_conn_param cp = {.responder_resources = 1,
                                 .initiator_depth = 1,
                                 .rnr_retry_count = 7};
    if (magic != RDMA_PDATA_MAGIC || group != r->srv->cfg.group ||
        id->verbs != r->ctx || r->srv->draining)
        goto out_reject;
    c = xfer_server_calloc(r->srv, 1, sizeof *c);
    if (!c || rdma_create_qp(id, r->pd, &qa) != 0)
        goto out_reject;
    c->id = id;
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

static int nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -1 : 0;
}

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
    if (nonblock(r->ch->fd) != 0 ||
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
    if (!(r->pd = ibv_alloc_pd(r->ctx)) ||
        !(r->cq = ibv_create_cq(r->ctx, 16, r, NULL, 0)) ||
        nonblock(r->ctx->async_fd) != 0)
        return XFER_ERR_IO;
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
        rc = regs_init(r, &r->regs[i], s->cfg.max_reservations);
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
