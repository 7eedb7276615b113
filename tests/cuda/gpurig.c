/*
 * tests/cuda/gpurig.c - see gpurig.h.
 */
#define _GNU_SOURCE
#include "gpurig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

typedef struct srv_thread {
    gpurig *g;
    uint16_t k;
} srv_thread;

static srv_thread thr[GPURIG_MAX_S];

static void stop_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    srv_thread *t = arg;
    if (atomic_load(&t->g->stop))
        event_base_loopbreak(t->g->sbase[t->k]);
}

static void *server_main(void *arg)
{
    srv_thread *t = arg;
    cu_bind_thread(); /* the H2D copies into a device pool, if any */
    struct event *tick =
        event_new(t->g->sbase[t->k], -1, EV_PERSIST, stop_tick, t);
    struct timeval tv = {0, 10000};
    event_add(tick, &tv);
    event_base_loop(t->g->sbase[t->k], 0);
    event_free(tick);
    return NULL;
}

static void *mem_alloc(gpurig *g, bool dev, size_t len)
{
    if (!dev)
        return calloc(len, 1);
    cu_ptr p = 0;
    if (g->cu->MemAlloc(&p, len) != 0)
        return NULL;
    g->cu->MemsetD8(p, 0, len);
    return (void *)(uintptr_t)p;
}

static void mem_free(gpurig *g, bool dev, void *p)
{
    if (!p)
        return;
    if (dev)
        g->cu->MemFree((cu_ptr)(uintptr_t)p);
    else
        free(p);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int gpurig_start(gpurig *g, char *why, size_t cap)
{
    int rc = XFER_ERR_NOMEM;
#if !GPURIG_HAVE_MEM
    if (g->dev_pools || g->dev_staging) {
        snprintf(why, cap, "this tree has no device memory kinds "
                 "(include/xfer/mem.h)");
        return XFER_ERR_NOT_SUPPORTED;
    }
#endif
    for (uint16_t k = 0; k < g->S; k++) {
        g->pool[k] = mem_alloc(g, g->dev_pools, g->pool_len);
        g->sbase[k] = event_base_new();
        if (!g->pool[k] || !g->sbase[k]) {
            snprintf(why, cap, "allocating shard %u's pool", k);
            return rc;
        }
        xfer_server_shard sh = {.index = k, .base = g->pool[k],
                                .len = g->pool_len};
        xfer_server_config c;
        xfer_server_config_default(&c);
        c.base = g->sbase[k];
        c.nshards = 1;
        c.shards = &sh;
        c.consume = g->consume;
        /* one producer session, every id a tombstone for a while: the
         * whole pool and tables are its quota (as xfer-bench rdma's) */
        c.max_reservations = 1024;
        c.max_tombstones = 1u << 16;
        c.session_max_bytes = g->pool_len;
        c.session_max_reservations = c.max_reservations;
        c.session_max_tombstones = c.max_tombstones;
#if GPURIG_HAVE_MEM
        xfer_mem m = {.kind = g->dev_pools ? XFER_MEM_CUDA : XFER_MEM_HOST};
        if (g->dev_pools)
            c.shard_mem = &m;
#endif
        if ((rc = xfer_server_new(&c, &g->srv[k])) != 0) {
            snprintf(why, cap, "xfer_server_new (shard %u): %s", k,
                     xfer_strerror(rc));
            return rc;
        }
        snprintf(g->addr[k], sizeof g->addr[k], "127.0.0.1:%u",
                 (unsigned)xfer_server_port(g->srv[k]));
        g->addrs[k] = g->addr[k];
        thr[k] = (srv_thread){.g = g, .k = k};
        if (pthread_create(&g->th[k], NULL, server_main, &thr[k]) != 0)
            return XFER_ERR_IO;
        g->started[k] = true;
    }
    g->base = event_base_new();
    g->staging = mem_alloc(g, g->dev_staging, g->staging_len);
    if (!g->base || !g->staging) {
        snprintf(why, cap, "allocating the staging");
        return XFER_ERR_NOMEM;
    }
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = g->base;
    ec.core.max_transfers = 4096;
    ec.core.max_tombstones = 1u << 16; /* one per id of the run */
    ec.core.default_deadline_ns = 30000000000ull;
    if ((rc = xfer_engine_new(&ec, &g->e)) != 0)
        goto fail;
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = g->S;
    tc.addrs = g->addrs;
    if ((rc = xfer_tcp_new(g->base, &tc, &g->tcp)) != 0 ||
        (rc = xfer_engine_add_group(g->e, xfer_tcp_transport(g->tcp),
                                    &g->group)) != 0)
        goto fail;
#if GPURIG_HAVE_MEM
    xfer_mem sm = {.kind = g->dev_staging ? XFER_MEM_CUDA : XFER_MEM_HOST};
    rc = xfer_engine_register_pool_mem(g->e, g->staging, g->staging_len, sm,
                                       &g->poolid);
#else
    rc = xfer_engine_register_pool(g->e, g->staging, g->staging_len,
                                   &g->poolid);
#endif
    if (rc)
        goto fail;
    uint64_t end = now_ms() + 10000;
    for (uint16_t k = 0; k < g->S; k++)
        while (!xfer_tcp_connected(g->tcp, k) && now_ms() < end)
            event_base_loop(g->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    for (uint16_t k = 0; k < g->S; k++)
        if (!xfer_tcp_connected(g->tcp, k)) {
            snprintf(why, cap, "shard %u never connected", k);
            return XFER_ERR_TIMEOUT;
        }
    return 0;
fail:
    snprintf(why, cap, "producer setup: %s", xfer_strerror(rc));
    return rc;
}

int gpurig_fill(gpurig *g, size_t off, const void *src, size_t len)
{
    if (!g->dev_staging) {
        memcpy((uint8_t *)g->staging + off, src, len);
        return 0;
    }
    return g->cu->MemcpyHtoD((cu_ptr)(uintptr_t)g->staging + off, src, len);
}

static void on_done(void *ud, const xfer_result *r)
{
    gpurig *g = ud;
    g->done++;
    if (r->status) {
        if (!g->failed)
            g->first_status = r->status;
        g->failed++;
    }
}

int gpurig_run(gpurig *g, uint64_t *next_id, uint32_t slice, uint32_t count,
               uint32_t inflight)
{
    size_t per = (size_t)slice * g->S;
    uint32_t slots = (uint32_t)(g->staging_len / per);
    if (!slots)
        return XFER_ERR_INVALID_ARG;
    uint64_t base_done = g->done, base_failed = g->failed;
    uint32_t sent = 0;
    xfer_slice sl[GPURIG_MAX_S];
    uint64_t end = now_ms() + 120000;
    while (g->done - base_done < count && now_ms() < end) {
        while (sent < count && sent - (g->done - base_done) < inflight) {
            size_t off = (size_t)(sent % slots) * per;
            for (uint16_t k = 0; k < g->S; k++)
                sl[k] = (xfer_slice){.off = off + (size_t)k * slice,
                                     .len = slice};
            xfer_transfer_desc d = {.id = (*next_id)++, .group = g->group,
                                    .pool = g->poolid, .nslices = g->S,
                                    .slices = sl};
            int rc = xfer_engine_submit(g->e, &d, on_done, g);
            if (rc)
                return rc;
            sent++;
        }
        event_base_loop(g->base, EVLOOP_ONCE);
    }
    if (g->done - base_done < count)
        return XFER_ERR_TIMEOUT;
    return g->failed > base_failed ? g->first_status : 0;
}

bool gpurig_holds(gpurig *g, uint16_t k, const uint8_t *want, size_t len)
{
    const uint8_t *hay = g->pool[k];
    uint8_t *copy = NULL;
    if (g->dev_pools) {
        copy = malloc(g->pool_len);
        if (!copy || g->cu->MemcpyDtoH(copy, (cu_ptr)(uintptr_t)g->pool[k],
                                       g->pool_len) != 0) {
            free(copy);
            return false;
        }
        hay = copy;
    }
    bool ok = memmem(hay, g->pool_len, want, len) != NULL;
    free(copy);
    return ok;
}

static bool shut;
static void on_shut(void *ud)
{
    (void)ud;
    shut = true;
}

void gpurig_stop(gpurig *g)
{
    if (g->e) {
        shut = false;
        if (xfer_engine_shutdown(g->e, on_shut, NULL) == 0) {
            uint64_t end = now_ms() + 10000;
            while (!shut && now_ms() < end)
                event_base_loop(g->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        }
    }
    xfer_engine_del(g->e);
    xfer_tcp_del(g->tcp);
    if (g->base)
        event_base_free(g->base);
    atomic_store(&g->stop, true);
    for (uint16_t k = 0; k < g->S; k++) {
        if (g->started[k])
            pthread_join(g->th[k], NULL);
        xfer_server_del(g->srv[k]);
        if (g->sbase[k])
            event_base_free(g->sbase[k]);
        mem_free(g, g->dev_pools, g->pool[k]);
    }
    mem_free(g, g->dev_staging, g->staging);
    memset(g, 0, sizeof *g);
}
