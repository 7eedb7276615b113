/*
 * transport/rdma_none.c - include/xfer/rdma.h in a build without
 * rdma-core (meson -Drdma=disabled, or no libibverbs/librdmacm): every
 * constructor says the build cannot (XFER_ERR_NOT_SUPPORTED), so a tool
 * prints one line and exits, and nothing else is ever reached.
 */
#include <stdio.h>
#include <string.h>

#include "xfer/rdma.h"

void xfer_rdma_config_default(xfer_rdma_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->version = XFER_RDMA_CONFIG_VERSION;
    xfer_tcp_config_default(&cfg->tcp);
}

int xfer_rdma_new(struct event_base *base, const xfer_rdma_config *cfg,
                  xfer_rdma **out)
{
    (void)base, (void)cfg, (void)out;
    return XFER_ERR_NOT_SUPPORTED;
}

void xfer_rdma_del(xfer_rdma *r)
{
    (void)r;
}

xfer_transport xfer_rdma_transport(xfer_rdma *r)
{
    return (xfer_transport){.ops = NULL, .self = r};
}

int xfer_rdma_stats_get_versioned(const xfer_rdma *r, uint32_t version,
                                  xfer_rdma_stats *st)
{
    (void)r, (void)version, (void)st;
    return XFER_ERR_INVALID_ARG;
}

bool xfer_rdma_connected(const xfer_rdma *r, uint16_t shard)
{
    (void)r, (void)shard;
    return false;
}

bool xfer_rdma_gone(const xfer_rdma *r, uint16_t shard)
{
    (void)r, (void)shard;
    return false;
}

void xfer_rdma_drop(xfer_rdma *r, uint16_t shard)
{
    (void)r, (void)shard;
}

int xfer_rdma_probe(char *why, size_t cap)
{
    if (why && cap)
        snprintf(why, cap, "built without RDMA (meson option rdma)");
    return XFER_ERR_NOT_SUPPORTED;
}
