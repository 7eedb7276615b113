/*
 * transport/server_dir.c - a shard server that registers itself in the
 * directory of groups (xfer/dir.h, docs/discovery.md): xfer_server_register
 * puts one entry per hosted shard under one lease kept alive on the
 * server's loop, and a drain leaves the group before it closes the
 * listener, so producers stop sending here before they would be refused.
 *
 * What must stay true: the entries are deleted (or etcd's answer given
 * up on: the request timeout of the directory) before the drain proper
 * starts; a server deleted without a drain leaves them to their lease,
 * as a crash would; no callback of the directory after xfer_server_del.
 */
#include "server_int.h"

#include <arpa/inet.h>
#include <string.h>
#include <time.h>

/* An address peers cannot dial: the wildcard bind. */
static bool wildcard(const char *addr)
{
    uint8_t a[16];
    static const uint8_t zero[16];
    if (inet_pton(AF_INET, addr, a) == 1)
        return !memcmp(a, zero, 4);
    return inet_pton(AF_INET6, addr, a) == 1 && !memcmp(a, zero, 16);
}

int xfer_server_register(xfer_server *s, const xfer_dir_config *dc,
                         const char *group, const char *advertise,
                         uint64_t epoch)
{
    if (!s || !dc || !group)
        return XFER_ERR_INVALID_ARG;
    if (s->dir || s->draining || s->leaving)
        return XFER_ERR_STATE;
    /* Producers created from the name say its HELLO group: another
     * number here, and none of them could connect. */
    if (xfer_dir_group_id(group) != s->cfg.group)
        return XFER_ERR_INVALID_ARG;
    const char *addr = advertise ? advertise : s->addr;
    if (!*addr || strlen(addr) >= XFER_DIR_ADDR_MAX ||
        (!advertise && wildcard(addr)))
        return XFER_ERR_INVALID_ARG;
    if (!epoch) { /* the start time: it grows at every start */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        epoch = (uint64_t)ts.tv_sec * 1000000u +
                (uint64_t)ts.tv_nsec / 1000u;
    }
    xfer_dir_entry e = {
        .port = s->port,
        .transports = XFER_DIR_TCP | (s->rdma ? XFER_DIR_RDMA : 0),
        .epoch = epoch};
    memcpy(e.addr, addr, strlen(addr) + 1);
    xfer_dir *d = NULL;
    int rc = xfer_dir_new(s->base, dc, &d);
    for (uint16_t i = 0; i < s->cfg.nshards && rc == 0; i++) {
        e.shard = s->shard_cfg[i].index;
        rc = xfer_dir_register(d, group, &e);
    }
    if (rc) {
        xfer_dir_del(d);
        return rc;
    }
    s->dir = d;
    return 0;
}

xfer_dir *xfer_server_dir(const xfer_server *s)
{
    return s ? s->dir : NULL;
}

static void left(void *ud, bool ok)
{
    xfer_server *s = ud;
    s->leaving = false;
    if (!ok)
        xfer_server_log(s, 0, "etcd did not confirm the removal of our "
                              "entries: they go with their lease");
    xfer_server_drain_begin(s);
}

int xfer_server_dir_leave(xfer_server *s)
{
    if (!s->dir || xfer_dir_unregister(s->dir, left, s) != 0)
        return XFER_ERR_STATE;
    s->leaving = true;
    return 0;
}
