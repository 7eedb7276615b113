/*
 * tests/rdma/fabric/device.c - the simulated device "xfer_sim0": device
 * list, contexts, device and port queries, protection domains,
 * asynchronous events, and the status strings.
 *
 * A context is a real struct verbs_context (abi_compat set to
 * __VERBS_ABI_IS_EXTENDED), so the inline verbs of <infiniband/verbs.h>
 * find their ops: ibv_poll_cq, ibv_req_notify_cq, ibv_post_send,
 * ibv_post_recv, ibv_alloc_mw, ibv_dealloc_mw, ibv_bind_mw through
 * context->ops, and ibv_query_port through verbs_context.query_port.
 *
 * What must stay true:
 *  - a context lives while it is open or any object made on it lives
 *    (refs), so closing it early never frees what a CQ still points to;
 *  - rdmacm's own context (the one id->verbs names) is never closed by
 *    ibv_close_device; it goes with the last thing that uses it;
 *  - the capabilities reported follow the options in force: max_msg_sz,
 *    type 2 windows, max_mr.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fab.h"

static struct ibv_device fab_device = {
    .node_type = IBV_NODE_CA,
    .transport_type = IBV_TRANSPORT_IB,
    .name = "xfer_sim0",
    .dev_name = "uverbs0",
    .dev_path = "/sys/class/infiniband_verbs/uverbs0",
    .ibdev_path = "/sys/class/infiniband/xfer_sim0",
};

#define FAB_GUID 0x0002c9fffe584631ull

static int query_port_ex(struct ibv_context *ctx, uint8_t port,
                         struct ibv_port_attr *attr, size_t len);

static const struct ibv_context_ops fab_ops = {
    .alloc_mw = fab_mw_alloc,
    .bind_mw = fab_mw_bind,
    .dealloc_mw = fab_mw_dealloc,
    .poll_cq = fab_cq_poll,
    .req_notify_cq = fab_cq_notify,
    .post_send = fab_qp_post_send,
    .post_recv = fab_qp_post_recv,
};

uint32_t fab_max_msg(void)
{
    return fab_g.opts.max_msg_sz;
}

/* ---- device list ------------------------------------------------------ */

FAB_API struct ibv_device **ibv_get_device_list(int *num_devices)
{
    struct ibv_device **l = calloc(2, sizeof *l);
    if (!l) {
        errno = ENOMEM;
        return NULL;
    }
    l[0] = &fab_device;
    if (num_devices)
        *num_devices = 1;
    return l;
}

FAB_API void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

FAB_API const char *ibv_get_device_name(struct ibv_device *device)
{
    return device->name;
}

FAB_API __be64 ibv_get_device_guid(struct ibv_device *device)
{
    (void)device;
    return htobe64(FAB_GUID);
}

/* ---- contexts --------------------------------------------------------- */

fab_ctx *fab_ctx_of(struct ibv_context *c)
{
    return FAB_OF(c, fab_ctx, vctx.context);
}

fab_ctx *fab_ctx_new(bool cm_owned)
{
    fab_ctx *c = calloc(1, sizeof *c);
    if (!c || fab_evq_init(&c->async) < 0) {
        free(c);
        errno = ENOMEM;
        return NULL;
    }
    c->vctx.sz = sizeof c->vctx;
    c->vctx.query_port = query_port_ex;
    c->vctx.context.device = &fab_device;
    c->vctx.context.ops = fab_ops;
    c->vctx.context.cmd_fd = -1;
    c->vctx.context.async_fd = c->async.fd;
    c->vctx.context.num_comp_vectors = 1;
    c->vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
    pthread_mutex_init(&c->vctx.context.mutex, NULL);
    c->refs = 1;
    c->open = !cm_owned;
    c->cm_owned = cm_owned;
    fab_g.ctr.contexts_live++;
    return c;
}

void fab_ctx_ref(fab_ctx *c)
{
    c->refs++;
}

static bool async_any(fab_evnode *n, const void *arg)
{
    (void)n;
    (void)arg;
    return true;
}

static void async_drop(fab_evnode *n)
{
    free(FAB_OF(n, fab_async, node));
}

void fab_ctx_unref(fab_ctx *c)
{
    if (--c->refs > 0)
        return;
    fab_evq_purge(&c->async, async_any, NULL, async_drop);
    fab_evq_close(&c->async);
    pthread_mutex_destroy(&c->vctx.context.mutex);
    if (fab_g.cm_ctx == c)
        fab_g.cm_ctx = NULL;
    free(c);
    fab_g.ctr.contexts_live--;
}

FAB_API struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    if (device != &fab_device) {
        errno = ENODEV;
        return NULL;
    }
    fab_enter();
    fab_ctx *c = fab_ctx_new(false);
    fab_exit();
    return c ? &c->vctx.context : NULL;
}

FAB_API int ibv_close_device(struct ibv_context *context)
{
    int r = 0;
    fab_enter();
    fab_ctx *c = fab_ctx_of(context);
    if (!c->open) {
        errno = EINVAL;
        r = -1;
    } else {
        c->open = false;
        if (c->refs > 1)
            fab_g.ctr.destroy_busy++; /* objects left: they keep it */
        fab_ctx_unref(c);
    }
    fab_exit();
    return r;
}

/* ---- queries ---------------------------------------------------------- */

FAB_API int ibv_query_device(struct ibv_context *context,
                             struct ibv_device_attr *a)
{
    (void)context;
    fab_enter();
    memset(a, 0, sizeof *a);
    strcpy(a->fw_ver, "1.0 xfer-fabric");
    a->node_guid = a->sys_image_guid = htobe64(FAB_GUID);
    a->max_mr_size = UINT64_MAX;
    a->page_size_cap = 0xfffff000u;
    a->vendor_id = 0x5846;
    a->vendor_part_id = 1;
    a->max_qp = FAB_MAX_QP;
    a->max_qp_wr = FAB_MAX_QP_WR;
    a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_MEM_WINDOW |
                          IBV_DEVICE_PORT_ACTIVE_EVENT;
    if (fab_g.opts.mw_type2)
        a->device_cap_flags |= IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    a->max_sge = FAB_MAX_SGE;
    a->max_cq = FAB_MAX_QP;
    a->max_cqe = FAB_MAX_CQE;
    a->max_mr = (int)fab_g.opts.max_mr;
    a->max_mw = (int)fab_g.opts.max_mr;
    a->max_pd = FAB_MAX_PD;
    a->max_qp_rd_atom = a->max_qp_init_rd_atom = 16;
    a->max_res_rd_atom = 16 * FAB_MAX_QP;
    a->atomic_cap = IBV_ATOMIC_NONE;
    a->max_pkeys = 1;
    a->local_ca_ack_delay = 16;
    a->phys_port_cnt = 1;
    fab_exit();
    return 0;
}

static int query_port_ex(struct ibv_context *ctx, uint8_t port,
                         struct ibv_port_attr *attr, size_t len)
{
    struct ibv_port_attr a;
    (void)ctx;
    if (port != 1)
        return EINVAL;
    memset(&a, 0, sizeof a);
    a.state = IBV_PORT_ACTIVE;
    a.max_mtu = a.active_mtu = IBV_MTU_4096;
    a.gid_tbl_len = 1;
    fab_enter();
    a.max_msg_sz = fab_max_msg();
    fab_exit();
    a.pkey_tbl_len = 1;
    a.lid = 1;
    a.sm_lid = 1;
    a.max_vl_num = 1;
    a.active_width = 2; /* 4x */
    a.active_speed = 64;
    a.phys_state = 5; /* LinkUp */
    a.link_layer = IBV_LINK_LAYER_INFINIBAND;
    memcpy(attr, &a, len < sizeof a ? len : sizeof a);
    return 0;
}

/* The exported fallback, for code that reaches it without the macro. */
#undef ibv_query_port
FAB_API int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                           struct _compat_ibv_port_attr *port_attr);
FAB_API int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                           struct _compat_ibv_port_attr *port_attr)
{
    return query_port_ex(context, port_num, (struct ibv_port_attr *)port_attr,
                         offsetof(struct ibv_port_attr, flags));
}

/* ---- protection domains ----------------------------------------------- */

fab_pd *fab_pd_of(struct ibv_pd *pd)
{
    return FAB_OF(pd, fab_pd, pd);
}

FAB_API struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    static uint32_t handles;
    fab_enter();
    fab_pd *p = fab_g.ctr.pds_live < FAB_MAX_PD ? calloc(1, sizeof *p) : NULL;
    if (p) {
        p->ctx = fab_ctx_of(context);
        fab_ctx_ref(p->ctx);
        p->pd.context = context;
        p->pd.handle = ++handles;
        fab_g.ctr.pds_live++;
    }
    fab_exit();
    if (!p)
        errno = ENOMEM;
    return p ? &p->pd : NULL;
}

FAB_API int ibv_dealloc_pd(struct ibv_pd *pd)
{
    int r = 0;
    fab_enter();
    fab_pd *p = fab_pd_of(pd);
    if (p->users) {
        fab_g.ctr.destroy_busy++;
        r = EBUSY;
    } else {
        fab_ctx_unref(p->ctx);
        free(p);
        fab_g.ctr.pds_live--;
    }
    fab_exit();
    return r;
}

/* ---- asynchronous events ---------------------------------------------- */

void fab_async_qp(fab_qp *qp, enum ibv_event_type type)
{
    fab_async *a = calloc(1, sizeof *a);
    if (!a)
        return;
    a->ev.element.qp = &qp->qp;
    a->ev.event_type = type;
    a->ctx = qp->pd->ctx;
    fab_evq_push(&a->ctx->async, &a->node);
}

static bool async_of_qp(fab_evnode *n, const void *qp)
{
    return FAB_OF(n, fab_async, node)->ev.element.qp == qp;
}

void fab_async_purge(fab_qp *qp)
{
    fab_evq_purge(&qp->pd->ctx->async, async_of_qp, &qp->qp, async_drop);
}

FAB_API int ibv_get_async_event(struct ibv_context *context,
                                struct ibv_async_event *event)
{
    fab_ctx *c = fab_ctx_of(context);
    for (;;) {
        if (fab_evq_wait(&c->async) < 0)
            return -1;
        fab_enter();
        fab_evnode *n = fab_evq_pop(&c->async);
        if (n) {
            *event = FAB_OF(n, fab_async, node)->ev;
            fab_g.ctr.async_events++;
            free(FAB_OF(n, fab_async, node));
        }
        fab_exit();
        if (n)
            return 0;
    }
}

FAB_API void ibv_ack_async_event(struct ibv_async_event *event)
{
    (void)event;
    fab_enter();
    fab_g.ctr.async_events_acked++;
    fab_exit();
}

/* ---- strings ---------------------------------------------------------- */

FAB_API const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    static const char *const s[] = {
        [IBV_WC_SUCCESS] = "success",
        [IBV_WC_LOC_LEN_ERR] = "local length error",
        [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
        [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
        [IBV_WC_LOC_PROT_ERR] = "local protection error",
        [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
        [IBV_WC_MW_BIND_ERR] = "memory management operation error",
        [IBV_WC_BAD_RESP_ERR] = "bad response error",
        [IBV_WC_LOC_ACCESS_ERR] = "local access error",
        [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR] = "remote access error",
        [IBV_WC_REM_OP_ERR] = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
        [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
        [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
        [IBV_WC_REM_ABORT_ERR] = "aborted error",
        [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
        [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
        [IBV_WC_FATAL_ERR] = "fatal error",
        [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
        [IBV_WC_GENERAL_ERR] = "general error",
        [IBV_WC_TM_ERR] = "TM error",
        [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
    };
    if ((unsigned)status < sizeof s / sizeof s[0] && s[status])
        return s[status];
    return "unknown";
}

FAB_API const char *ibv_event_type_str(enum ibv_event_type event)
{
    static const char *const s[] = {
        [IBV_EVENT_CQ_ERR] = "CQ error",
        [IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
        [IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
        [IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
        [IBV_EVENT_COMM_EST] = "communication established",
        [IBV_EVENT_SQ_DRAINED] = "send queue drained",
        [IBV_EVENT_PATH_MIG] = "path migrated",
        [IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
        [IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
        [IBV_EVENT_PORT_ACTIVE] = "port active",
        [IBV_EVENT_PORT_ERR] = "port error",
        [IBV_EVENT_LID_CHANGE] = "LID change",
        [IBV_EVENT_PKEY_CHANGE] = "P_Key change",
        [IBV_EVENT_SM_CHANGE] = "SM change",
        [IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
        [IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
        [IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
        [IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
        [IBV_EVENT_GID_CHANGE] = "GID table change",
        [IBV_EVENT_WQ_FATAL] = "WQ fatal",
    };
    if ((unsigned)event < sizeof s / sizeof s[0] && s[event])
        return s[event];
    return "unknown";
}

FAB_API const char *ibv_port_state_str(enum ibv_port_state state)
{
    static const char *const s[] = {
        [IBV_PORT_NOP] = "no state change (NOP)",
        [IBV_PORT_DOWN] = "down",
        [IBV_PORT_INIT] = "init",
        [IBV_PORT_ARMED] = "armed",
        [IBV_PORT_ACTIVE] = "active",
        [IBV_PORT_ACTIVE_DEFER] = "active defer",
    };
    if ((unsigned)state < sizeof s / sizeof s[0] && s[state])
        return s[state];
    return "unknown";
}
