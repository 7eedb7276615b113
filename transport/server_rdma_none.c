/*
 * transport/server_rdma_none.c - server_rdma.h in a build without
 * rdma-core: no server is ever one-sided, so only new is reached, and it
 * says the build cannot.
 */
#include "server_rdma.h"

int xfer_server_rdma_new(struct xfer_server *s,
                         const xfer_server_rdma_config *cfg,
                         xfer_server_rdma **out)
{
    (void)s;
    (void)cfg;
    (void)out;
    return XFER_ERR_NOT_SUPPORTED;
}

void xfer_server_rdma_del(xfer_server_rdma *r)
{
    (void)r;
}

uint16_t xfer_server_rdma_bound_port(const xfer_server_rdma *r)
{
    (void)r;
    return 0;
}

int xfer_server_rdma_bind(xfer_server_rdma *r, struct xfer_server_hosted *hs,
                          struct xfer_server_conn *ctl, uint64_t id,
                          uint64_t resv_id, uint64_t off, uint32_t len,
                          uint32_t *rkey)
{
    (void)r, (void)hs, (void)ctl, (void)id, (void)resv_id, (void)off;
    (void)len;
    (void)rkey;
    return XFER_ERR_NOT_SUPPORTED;
}

void xfer_server_rdma_invalidate(xfer_server_rdma *r,
                                 struct xfer_server_hosted *hs, uint64_t now)
{
    (void)r, (void)hs, (void)now;
}

int xfer_server_rdma_seal(xfer_server_rdma *r, struct xfer_server_hosted *hs,
                          uint64_t id, uint64_t resv_id)
{
    (void)r, (void)hs, (void)id, (void)resv_id;
    return 0;
}

bool xfer_server_rdma_windows(const struct xfer_server *s)
{
    (void)s;
    return false;
}
