/*
 * tests/rdma/fabric/cm.c - the rdmacm objects: event channels, ids and
 * their events, address and route resolution, bind and listen, the QP of
 * an id, and the small helpers (rdma_event_str, rdma_get_devices, ports).
 * The connection handshake itself is in cm_conn.c.
 *
 * Events are delivered as librdmacm delivers them: through the channel's
 * fd (blocking unless the caller set O_NONBLOCK), each one to be acked by
 * rdma_ack_cm_event.  An event counts against one id (a CONNECT_REQUEST
 * against the listener, the rest against the id they name), and an id
 * with events taken but not acked is not destroyed: librdmacm would wait
 * forever, the fabric answers EBUSY and counts destroy_busy.
 *
 * What must stay true:
 *  - id->verbs is rdmacm's own context (set once the address is known),
 *    and a QP for an id must come from a PD of that context;
 *  - destroying an id drops its events not yet taken (and the ids of
 *    CONNECT_REQUESTs not yet taken, which are rejected), frees its port,
 *    and tells a connected peer (cm_conn.c);
 *  - only ADDR_RESOLVED, ROUTE_RESOLVED and the handshake events of
 *    cm_conn.c are ever produced, each at the moment real rdmacm would.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fab.h"

/* ---- channels and events ---------------------------------------------- */

FAB_API struct rdma_event_channel *rdma_create_event_channel(void)
{
    fab_enter();
    fab_cm_chan *ch = calloc(1, sizeof *ch);
    if (ch && fab_evq_init(&ch->q) < 0) {
        free(ch);
        ch = NULL;
    }
    if (ch) {
        ch->ch.fd = ch->q.fd;
        fab_g.ctr.cm_channels_live++;
    }
    fab_exit();
    if (!ch)
        errno = ENOMEM;
    return ch ? &ch->ch : NULL;
}

FAB_API void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
    fab_enter();
    fab_cm_chan *ch = FAB_OF(channel, fab_cm_chan, ch);
    if (ch->ids) {
        fab_g.ctr.destroy_busy++; /* ids still on it: it must stay */
    } else {
        fab_evq_close(&ch->q);
        free(ch);
        fab_g.ctr.cm_channels_live--;
    }
    fab_exit();
}

fab_cmev *fab_cm_event(fab_cm_id *id, fab_cm_id *owner,
                       enum rdma_cm_event_type type, int status,
                       const void *pdata, size_t pdlen, size_t pdmax)
{
    fab_cmev *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->owner = owner;
    e->ev.id = &id->id;
    e->ev.listen_id =
        type == RDMA_CM_EVENT_CONNECT_REQUEST ? &owner->id : NULL;
    e->ev.event = type;
    e->ev.status = status;
    if (pdmax) {
        if (pdata && pdlen)
            memcpy(e->pdata, pdata, pdlen < pdmax ? pdlen : pdmax);
        e->ev.param.conn.private_data = e->pdata;
        e->ev.param.conn.private_data_len = (uint8_t)pdmax;
    }
    fab_evq_push(&id->chan->q, &e->node);
    return e;
}

FAB_API int rdma_get_cm_event(struct rdma_event_channel *channel,
                              struct rdma_cm_event **event)
{
    fab_cm_chan *ch = FAB_OF(channel, fab_cm_chan, ch);
    for (;;) {
        if (fab_evq_wait(&ch->q) < 0)
            return -1;
        fab_enter();
        fab_evnode *n = fab_evq_pop(&ch->q);
        if (n) {
            fab_cmev *e = FAB_OF(n, fab_cmev, node);
            e->owner->unacked++;
            fab_g.ctr.cm_events++;
            fab_cmconn_taken(e);
            *event = &e->ev;
        }
        fab_exit();
        if (n)
            return 0;
    }
}

FAB_API int rdma_ack_cm_event(struct rdma_cm_event *event)
{
    fab_enter();
    fab_cmev *e = FAB_OF(event, fab_cmev, ev);
    e->owner->unacked--;
    fab_g.ctr.cm_events_acked++;
    free(e);
    fab_exit();
    return 0;
}

FAB_API const char *rdma_event_str(enum rdma_cm_event_type event)
{
    static const char *const s[] = {
        [RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
        [RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
        [RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
        [RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
        [RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
        [RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
        [RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
        [RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
        [RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
        [RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
        [RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
        [RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
        [RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
        [RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
        [RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
        [RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
    };
    if ((unsigned)event < sizeof s / sizeof s[0])
        return s[event];
    return "UNKNOWN EVENT";
}

/* ---- ids -------------------------------------------------------------- */

static fab_cm_id *id_new(fab_cm_chan *ch, void *context,
                         enum rdma_port_space ps)
{
    fab_cm_id *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->chan = ch;
    f->id.channel = &ch->ch;
    f->id.context = context;
    f->id.ps = ps;
    f->id.qp_type = IBV_QPT_RC;
    f->id.route.path_rec = &f->path;
    ch->ids++;
    f->next = fab_g.ids;
    if (fab_g.ids)
        fab_g.ids->prev = f;
    fab_g.ids = f;
    fab_g.ctr.cm_ids_live++;
    return f;
}

FAB_API int rdma_create_id(struct rdma_event_channel *channel,
                           struct rdma_cm_id **id, void *context,
                           enum rdma_port_space ps)
{
    int err = 0;
    fab_enter();
    if (!channel) /* synchronous ids are not emulated */
        err = EINVAL;
    else if (ps != RDMA_PS_TCP && ps != RDMA_PS_IB)
        err = EOPNOTSUPP; /* UD port spaces: no UD QPs here */
    fab_cm_id *f = err ? NULL
                       : id_new(FAB_OF(channel, fab_cm_chan, ch), context, ps);
    if (!err && !f)
        err = ENOMEM;
    if (f)
        *id = &f->id;
    fab_exit();
    if (err)
        errno = err;
    return err ? -1 : 0;
}

int fab_cm_attach_verbs(fab_cm_id *f)
{
    if (f->ctx)
        return 0;
    if (fab_g.cm_ctx) {
        fab_ctx_ref(fab_g.cm_ctx);
    } else if (!(fab_g.cm_ctx = fab_ctx_new(true))) {
        return -1;
    }
    f->ctx = fab_g.cm_ctx;
    f->id.verbs = &f->ctx->vctx.context;
    f->id.port_num = 1;
    return 0;
}

fab_cm_id *fab_cm_new_child(fab_cm_id *l)
{
    fab_cm_id *f = id_new(l->chan, l->id.context, l->id.ps);
    if (f && fab_cm_attach_verbs(f) < 0) {
        fab_cm_free(f);
        f = NULL;
    }
    if (f)
        f->state = FAB_CM_REQ_RCVD;
    return f;
}

void fab_cm_free(fab_cm_id *f)
{
    if (f->prev)
        f->prev->next = f->next;
    else
        fab_g.ids = f->next;
    if (f->next)
        f->next->prev = f->prev;
    if (f->ctx)
        fab_ctx_unref(f->ctx);
    f->chan->ids--;
    free(f);
    fab_g.ctr.cm_ids_live--;
}

static bool event_owned_by(fab_evnode *n, const void *f)
{
    return FAB_OF(n, fab_cmev, node)->owner == f;
}

/* A purged event; a CONNECT_REQUEST nobody took rejects its child. */
static void event_drop(fab_evnode *n)
{
    fab_cmev *e = FAB_OF(n, fab_cmev, node);
    if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        fab_cm_id *child = FAB_OF(e->ev.id, fab_cm_id, id);
        fab_cmconn_release(child);
        fab_cm_free(child);
    }
    free(e);
}

FAB_API int rdma_destroy_id(struct rdma_cm_id *id)
{
    int r = 0;
    fab_enter();
    fab_cm_id *f = FAB_OF(id, fab_cm_id, id);
    if (f->unacked) {
        fab_g.ctr.destroy_busy++;
        errno = EBUSY;
        r = -1;
    } else {
        fab_evq_purge(&f->chan->q, event_owned_by, f, event_drop);
        fab_cmconn_release(f);
        if (f->lis)
            fab_wire_unbind(f->lis);
        fab_cm_free(f);
    }
    fab_exit();
    return r;
}

/* ---- addresses -------------------------------------------------------- */

static socklen_t addr_len(const struct sockaddr *a)
{
    return a->sa_family == AF_INET    ? sizeof(struct sockaddr_in)
           : a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                      : 0;
}

static uint16_t addr_port(const struct sockaddr *a)
{
    return ntohs(a->sa_family == AF_INET
                     ? ((const struct sockaddr_in *)(const void *)a)->sin_port
                     : ((const struct sockaddr_in6 *)(const void *)a)
                           ->sin6_port);
}

static void set_port(struct sockaddr *a, uint16_t port)
{
    if (a->sa_family == AF_INET)
        ((struct sockaddr_in *)(void *)a)->sin_port = htons(port);
    else
        ((struct sockaddr_in6 *)(void *)a)->sin6_port = htons(port);
}

static bool addr_any(const struct sockaddr *a)
{
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)a)
                   ->sin_addr.s_addr == htonl(INADDR_ANY);
    return IN6_IS_ADDR_UNSPECIFIED(
        &((const struct sockaddr_in6 *)(const void *)a)->sin6_addr);
}

FAB_API int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
    int err = 0;
    fab_enter();
    fab_cm_id *f = FAB_OF(id, fab_cm_id, id);
    socklen_t len = addr ? addr_len(addr) : 0;
    uint16_t port = len ? addr_port(addr) : 0;
    fab_listener *l = NULL;
    if (!len || f->state != FAB_CM_IDLE)
        err = EINVAL;
    else if (!(l = fab_wire_bind(&port)))
        err = errno;
    else if (!addr_any(addr) && fab_cm_attach_verbs(f) < 0)
        err = ENOMEM;
    if (!err) {
        l->id = f;
        f->lis = l;
        memcpy(&id->route.addr.src_storage, addr, len);
        set_port(&id->route.addr.src_addr, port);
        f->state = FAB_CM_BOUND;
    } else if (l) {
        fab_wire_unbind(l);
    }
    fab_exit();
    if (err)
        errno = err;
    return err ? -1 : 0;
}

FAB_API int rdma_listen(struct rdma_cm_id *id, int backlog)
{
    int err = 0;
    fab_enter();
    fab_cm_id *f = FAB_OF(id, fab_cm_id, id);
    if (f->state != FAB_CM_BOUND)
        err = EINVAL;
    else if (fab_wire_listen(f->lis, backlog) < 0)
        err = errno;
    else
        f->state = FAB_CM_LISTEN;
    fab_exit();
    if (err)
        errno = err;
    return err ? -1 : 0;
}

/* Resolution is instant on one host; its event still comes through the
 * channel, and id->verbs is set when the event is taken (cm_conn.c). */
FAB_API int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src,
                              struct sockaddr *dst, int timeout_ms)
{
    int err = 0;
    (void)timeout_ms;
    fab_enter();
    fab_cm_id *f = FAB_OF(id, fab_cm_id, id);
    socklen_t dlen = dst ? addr_len(dst) : 0;
    if (!dlen || (f->state != FAB_CM_IDLE && f->state != FAB_CM_BOUND) ||
        (src && addr_len(src) != dlen)) {
        err = EINVAL;
    } else {
        if (f->state == FAB_CM_IDLE) {
            /* one host: the local address that reaches dst is dst's */
            memcpy(&id->route.addr.src_storage, src ? src : dst, dlen);
            /* The kernel would pick a source port; nothing binds it. */
            static uint16_t src_port = 40000;
            set_port(&id->route.addr.src_addr, src_port++);
            if (src_port > 60999)
                src_port = 40000;
        }
        memcpy(&id->route.addr.dst_storage, dst, dlen);
        f->state = FAB_CM_ADDR_RESOLVED;
        if (!fab_cm_event(f, f, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0, 0))
            err = ENOMEM;
    }
    fab_exit();
    if (err)
        errno = err;
    return err ? -1 : 0;
}

FAB_API int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
    int err = 0;
    (void)timeout_ms;
    fab_enter();
    fab_cm_id *f = FAB_OF(id, fab_cm_id, id);
    if (f->state != FAB_CM_ADDR_RESOLVED) {
        err = EINVAL;
    } else {
        f->state = FAB_CM_ROUTE_RESOLVED;
        id->route.num_paths = 1;
        if (!fab_cm_event(f, f, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0, 0))
            err = ENOMEM;
    }
    fab_exit();
    if (err)
        errno = err;
    return err ? -1 : 0;
}

FAB_API __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
    return htons(id->route.addr.src_addr.sa_family
                     ? addr_port(&id->route.addr.src_addr)
                     : 0);
}

FAB_API __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
    return htons(id->route.addr.dst_addr.sa_family
                     ? addr_port(&id->route.addr.dst_addr)
                     : 0);
}

FAB_API int rdma_set_option(struct rdma_cm_id *id, int level, int optname,
                            void *optval, size_t optlen)
{
    (void)id;
    (void)optval;
    (void)optlen;
    if (level == RDMA_OPTION_ID &&
        (optname == RDMA_OPTION_ID_TOS || optname == RDMA_OPTION_ID_REUSEADDR ||
         optname == RDMA_OPTION_ID_AFONLY ||
         optname == RDMA_OPTION_ID_ACK_TIMEOUT))
        return 0;
    errno = EINVAL;
    return -1;
}

FAB_API struct ibv_context **rdma_get_devices(int *num_devices)
{
    struct ibv_context **l = calloc(2, sizeof *l);
    fab_enter();
    if (l && fab_g.cm_ctx) {
        fab_ctx_ref(fab_g.cm_ctx);
    } else if (l && !(fab_g.cm_ctx = fab_ctx_new(true))) {
        free(l);
        l = NULL;
    }
    if (l)
        l[0] = &fab_g.cm_ctx->vctx.context;
    fab_exit();
    if (!l)
        errno = ENOMEM;
    else if (num_devices)
        *num_devices = 1;
    return l;
}

FAB_API void rdma_free_devices(struct ibv_context **list)
{
    fab_enter();
    for (struct ibv_context **p = list; *p; p++)
        fab_ctx_unref(fab_ctx_of(*p));
    fab_exit();
    free(list);
}

/* ---- the id's QP ------------------------------------------------------ */

FAB_API int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
                           struct ibv_qp_init_attr *attr)
{
    int err = 0;
    fab_enter();
    fab_qp *q = NULL;
    if (!id->verbs || !pd || pd->context != id->verbs || id->qp)
        err = EINVAL;
    else if ((q = fab_qp_create(fab_pd_of(pd), attr, &err)))
        q->qp.state = IBV_QPS_INIT;
    if (q)
        id->qp = &q->qp;
    fab_exit();
    if (err)
        errno = err;
    return err ? -1 : 0;
}

FAB_API int rdma_create_qp_ex(struct rdma_cm_id *id,
                              struct ibv_qp_init_attr_ex *a)
{
    if (a->comp_mask & ~(uint32_t)IBV_QP_INIT_ATTR_PD) {
        errno = EOPNOTSUPP;
        return -1;
    }
    struct ibv_qp_init_attr b = {
        .qp_context = a->qp_context,
        .send_cq = a->send_cq,
        .recv_cq = a->recv_cq,
        .srq = a->srq,
        .cap = a->cap,
        .qp_type = a->qp_type,
        .sq_sig_all = a->sq_sig_all,
    };
    int r = rdma_create_qp(id, a->pd, &b);
    a->cap = b.cap;
    return r;
}

FAB_API void rdma_destroy_qp(struct rdma_cm_id *id)
{
    fab_enter();
    if (id->qp)
        fab_qp_destroy(fab_qp_of(id->qp));
    id->qp = NULL;
    fab_exit();
}
