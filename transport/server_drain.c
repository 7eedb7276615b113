/*
 * transport/server_drain.c - the shard server's drain: close the
 * listener, refuse new reserves, and tell the caller once nothing can
 * land in the shard memory any more (or the drain timeout passed); READY
 * data stays until taken and released or its lease ends (its subscribers
 * get the EXPIRED event), which xfer_server_empty tells.
 *
 * What must stay true: "drained" means no reservation of any hosted shard
 * is RESERVED, WRITING or waiting for its write to end, and no connection
 * is in the middle of a streamed write; READY and TAKEN data stay served.
 * The drain callback runs once, from a timer on the loop.
 */
#include "server_int.h"

#include <event2/event.h>
#include <event2/listener.h>

/* A write may still land (one-sided shards: until the rkey's
 * invalidation completed). */
static bool busy_state(xfer_resv_state st)
{
    return st == XFER_RESV_STATE_RESERVED || st == XFER_RESV_STATE_WRITING ||
           st == XFER_RESV_STATE_CANCEL_PENDING ||
           st == XFER_RESV_STATE_EXPIRE_PENDING ||
           st == XFER_RESV_STATE_COMMIT_INVAL ||
           st == XFER_RESV_STATE_CANCEL_INVAL ||
           st == XFER_RESV_STATE_EXPIRE_INVAL;
}

static void count_busy(void *ud, uint64_t id, uint32_t attempt,
                       xfer_resv_state st, uint64_t since_ns)
{
    *(uint64_t *)ud += busy_state(st);
}

bool xfer_server_drained(const xfer_server *s)
{
    if (!s)
        return true;
    uint64_t busy = 0;
    for (uint16_t i = 0; i < s->cfg.nshards; i++)
        xfer_shard_foreach(s->shards[i].sh, count_busy, &busy);
    for (const xfer_server_conn *c = xfer_server_conn_of(s->conns.head); c;
         c = xfer_server_conn_of(c->link.next))
        busy += c->in_write;
    return busy == 0;
}

/* Live records only: a tombstone holds no memory and lives its whole TTL
 * (xfer_shard_foreach would count those too, and sort, every tick). */
bool xfer_server_empty(const xfer_server *s)
{
    if (!s)
        return true;
    for (uint16_t i = 0; i < s->cfg.nshards; i++) {
        xfer_shard_stats st;
        if (xfer_shard_stats_get(s->shards[i].sh, &st) != 0 || st.live)
            return false;
    }
    return xfer_server_drained(s);
}

void xfer_server_on_drain_tick(evutil_socket_t fd, short what, void *arg)
{
    xfer_server *s = arg;
    bool drained = xfer_server_drained(s);
    if (!drained && xfer_server_now(s) < s->drain_deadline)
        return;
    event_del(s->drain_ev);
    if (s->drain_cb)
        s->drain_cb(s->drain_ud, drained);
}

int xfer_server_drain(xfer_server *s, xfer_server_drain_cb cb, void *ud)
{
    if (!s)
        return XFER_ERR_INVALID_ARG;
    if (s->draining || s->leaving)
        return XFER_ERR_STATE;
    s->drain_cb = cb;
    s->drain_ud = ud;
    /* Registered in a group: leave it first (producers stop sending
     * here), and drain once etcd answered. */
    if (xfer_server_dir_leave(s) != 0)
        xfer_server_drain_begin(s);
    return 0;
}

void xfer_server_drain_begin(xfer_server *s)
{
    s->draining = true;
    if (s->lis) { /* closed: the kernel refuses new peers, none hang */
        evconnlistener_free(s->lis);
        s->lis = NULL;
    }
    event_del(s->accept_ev);
    s->drain_deadline = xfer_server_now(s) + s->cfg.drain_timeout_ns;
    struct timeval tick = {0, 20000};
    event_add(s->drain_ev, &tick);
}
