/*
 * tools/bench/pump.c - the closed loop of xfer transfers over TCP.  See
 * pump.h.
 *
 * Each in-flight slot owns its own slice of the staging pool (slot k,
 * shard j at (k * nshards + j) * slice), so no two live transfers share
 * staging bytes.  The latency of a transfer runs from its submit to its
 * completion callback.
 *
 * What must stay true: a run ends only when every transfer it submitted
 * has completed (the loop breaks at live == 0), so the next run starts
 * from an idle engine and the CPU window holds whole transfers.
 */
#include "pump.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "xfer/dir.h"
#include "xfer/xfer.h"

#define STAGING (64u << 20)
#define LAT_CAP (1u << 21)

struct bench_pump {
    const demo_tcp *g;
    struct event_base *base;
    xfer_engine *e;
    xfer_tcp *tcp_all, *tcp_one;
    uint32_t g_all, g_one, pool;
    xfer_dir *dir;             /* bench_pump_add_dir: etcd */
    xfer_tcp *tcp_dir;         /* ... and every shard found through it */
    uint32_t g_dir;
    uint16_t nshards;
    uint8_t *staging;
    /* The run in progress. */
    const bench_pump_params *p;
    bench_pump_counts *c;
    uint16_t shards;           /* of the group in use */
    uint32_t group, live;
    uint64_t next_id, stop_at, bytes;
    uint64_t started[BENCH_PUMP_MAX_INFLIGHT];
    uint32_t free_slots[BENCH_PUMP_MAX_INFLIGHT], nfree;
    uint64_t *lat;
    size_t nlat;
};

/* ---------------------------------------------------------------------- */
/* The loop                                                                */
/* ---------------------------------------------------------------------- */

static void submit(bench_pump *u);

static void on_done(void *ud, const xfer_result *res)
{
    bench_pump *u = ud;
    uint32_t slot = (uint32_t)res->user_data;
    uint64_t t = xfer_clock_monotonic(NULL);
    u->live--;
    u->free_slots[u->nfree++] = slot;
    if (res->status == 0) {
        u->c->done++;
        u->bytes += (uint64_t)u->p->slice * u->shards;
        if (u->nlat < LAT_CAP)
            u->lat[u->nlat++] = t - u->started[slot];
    } else if (u->c->failed++ == 0 && getenv("XFER_BENCH_DEBUG")) {
        fprintf(stderr, "first failure: %s phase %u shard %u\n",
                xfer_strerror(res->status), (unsigned)res->phase,
                (unsigned)res->first_failed_shard);
    }
    if (t < u->stop_at &&
        (!u->p->max_units || u->c->submitted < u->p->max_units))
        submit(u);
    else if (u->live == 0)
        event_base_loopbreak(u->base);
}

static void submit(bench_pump *u)
{
    uint32_t slot = u->free_slots[--u->nfree];
    xfer_slice sl[XFER_MAX_SHARDS];
    for (uint16_t k = 0; k < u->shards; k++) {
        sl[k].off = ((uint64_t)slot * u->shards + k) * u->p->slice;
        sl[k].len = u->p->slice;
    }
    xfer_transfer_desc d = {.id = ++u->next_id, .group = u->group,
                            .pool = u->pool, .nslices = u->shards,
                            .slices = sl, .user_data = slot};
    u->started[slot] = xfer_clock_monotonic(NULL);
    u->c->submitted++;
    if (xfer_engine_submit(u->e, &d, on_done, u) != 0) {
        u->c->refused++;
        u->free_slots[u->nfree++] = slot;
        if (u->live == 0)
            event_base_loopbreak(u->base); /* nothing left to wait for */
        return;
    }
    u->live++;
}

static uint64_t ops_sent(const bench_pump *u)
{
    xfer_tcp_stats a, b, d = {0};
    xfer_tcp_stats_get(u->tcp_all, &a);
    xfer_tcp_stats_get(u->tcp_one, &b);
    if (u->tcp_dir)
        xfer_tcp_stats_get(u->tcp_dir, &d);
    return a.ops_sent + b.ops_sent + d.ops_sent;
}

int bench_pump_run(bench_pump *u, const bench_pump_params *p, bench_fig *f,
                   bench_pump_counts *c, char *err, size_t cap)
{
    u->shards = p->one_shard && !p->via_dir ? 1 : u->nshards;
    if (p->via_dir && !u->tcp_dir) {
        snprintf(err, cap, "pump: no group through etcd");
        return -1;
    }
    if (p->inflight == 0 || p->inflight > BENCH_PUMP_MAX_INFLIGHT ||
        (uint64_t)p->inflight * u->shards * p->slice > STAGING) {
        snprintf(err, cap, "pump: %u in flight of %u bytes on %u shards "
                 "does not fit the %u MiB staging pool", p->inflight,
                 p->slice, u->shards, STAGING >> 20);
        return -1;
    }
    pid_t pids[XFER_MAX_SHARDS];
    for (uint16_t k = 0; k < u->nshards; k++)
        pids[k] = demo_tcp_pid(u->g, k);
    *c = (bench_pump_counts){0};
    u->p = p;
    u->c = c;
    u->group = p->via_dir ? u->g_dir : p->one_shard ? u->g_one : u->g_all;
    u->bytes = u->nlat = u->nfree = 0;
    for (uint32_t i = 0; i < p->inflight; i++)
        u->free_slots[u->nfree++] = p->inflight - 1 - i;
    uint64_t sent0 = ops_sent(u);
    bench_sample a, b;
    bench_proc_sample(0, pids, u->nshards, &a);
    u->stop_at = a.wall_ns + p->ns;
    for (uint32_t i = 0; i < p->inflight; i++)
        if (!p->max_units || c->submitted < p->max_units)
            submit(u);
    if (u->live)
        event_base_dispatch(u->base);
    bench_proc_sample(0, pids, u->nshards, &b);
    c->ops_sent = ops_sent(u) - sent0;
    bench_fig_make(f, &a, &b, c->done, c->failed + c->refused, u->bytes,
                   u->lat, u->nlat);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Setup                                                                   */
/* ---------------------------------------------------------------------- */

static int make_tcp(bench_pump *u, uint16_t n, xfer_tcp **tcp,
                    uint32_t *group)
{
    const char *addrs[XFER_MAX_SHARDS];
    for (uint16_t k = 0; k < n; k++)
        addrs[k] = demo_tcp_addr(u->g, k);
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = n;
    tc.addrs = addrs;
    if (xfer_tcp_new(u->base, &tc, tcp) != 0)
        return -1;
    return xfer_engine_add_group(u->e, xfer_tcp_transport(*tcp), group);
}

static bool connected(const bench_pump *u)
{
    for (uint16_t k = 0; k < u->nshards; k++)
        if (!xfer_tcp_connected(u->tcp_all, k))
            return false;
    return xfer_tcp_connected(u->tcp_one, 0);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
}

uint32_t bench_pump_eager_max_bytes;

int bench_pump_new(const demo_tcp *g, uint16_t nshards, bench_pump **out,
                   char *err, size_t cap)
{
    bench_pump *u = calloc(1, sizeof *u);
    if (!u || nshards == 0 || nshards > XFER_MAX_SHARDS) {
        free(u);
        snprintf(err, cap, "pump: bad shard count or out of memory");
        return -1;
    }
    u->g = g;
    u->nshards = nshards;
    u->base = event_base_new();
    u->lat = malloc(LAT_CAP * sizeof *u->lat);
    u->staging = malloc(STAGING);
    /* At 100 k transfers/s the producer makes 100 k tombstones a second:
     * keep them as long as the shards' leases plus a margin, and room for
     * that many. */
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = u->base;
    ec.core.default_deadline_ns = 30000000000ull;
    ec.core.tombstone_ttl_ns = 5000000000ull;
    ec.core.consumer_lease_ns = 2500000000ull;
    ec.core.net_margin_ns = 2500000000ull;
    ec.core.max_tombstones = 1u << 22;
    ec.core.eager_max_bytes = bench_pump_eager_max_bytes;
    if (!u->base || !u->lat || !u->staging ||
        xfer_engine_new(&ec, &u->e) != 0)
        goto out_fail;
    memset(u->staging, 0x5A, STAGING); /* touch every page once */
    if (xfer_engine_register_pool(u->e, u->staging, STAGING, &u->pool) ||
        make_tcp(u, nshards, &u->tcp_all, &u->g_all) ||
        make_tcp(u, 1, &u->tcp_one, &u->g_one))
        goto out_fail;
    /* A tick so that EVLOOP_ONCE returns while nothing else happens. */
    struct event *tick = event_new(u->base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval tv = {0, 10000};
    uint64_t end = xfer_clock_monotonic(NULL) + 10000000000ull;
    if (!tick || event_add(tick, &tv) != 0)
        end = 0;
    while (!connected(u) && xfer_clock_monotonic(NULL) < end)
        event_base_loop(u->base, EVLOOP_ONCE);
    if (tick)
        event_free(tick);
    if (!connected(u))
        goto out_fail;
    *out = u;
    return 0;
out_fail:
    snprintf(err, cap, "pump: cannot set up the engine or connect to "
             "every xferd");
    bench_pump_del(u);
    return -1;
}

int bench_pump_add_dir(bench_pump *u, const char *endpoints, char *err,
                       size_t cap)
{
    xfer_dir_config dc;
    xfer_dir_config_default(&dc);
    dc.endpoints = endpoints;
    int rc = u->tcp_dir ? XFER_ERR_EXISTS
                        : xfer_dir_new(u->base, &dc, &u->dir);
    if (rc) {
        snprintf(err, cap, "pump: --etcd %s: %s", endpoints,
                 xfer_strerror(rc));
        return -1;
    }
    if (demo_tcp_connect_dir(u->g, u->base, u->dir, 10000, &u->tcp_dir, err,
                             cap) != 0)
        return -1;
    rc = xfer_engine_add_group(u->e, xfer_tcp_transport(u->tcp_dir),
                               &u->g_dir);
    if (rc) {
        snprintf(err, cap, "pump: %s", xfer_strerror(rc));
        return -1;
    }
    return 0;
}

static void on_shut(void *ud)
{
    event_base_loopbreak(ud);
}

void bench_pump_del(bench_pump *u)
{
    if (!u)
        return;
    if (u->e && xfer_engine_shutdown(u->e, on_shut, u->base) == 0)
        event_base_dispatch(u->base);
    xfer_engine_del(u->e);
    xfer_tcp_del(u->tcp_all);
    xfer_tcp_del(u->tcp_one);
    xfer_tcp_del(u->tcp_dir);
    xfer_dir_del(u->dir); /* after the transport that follows it */
    if (u->base) {
        event_base_loop(u->base, EVLOOP_NONBLOCK);
        event_base_free(u->base);
    }
    free(u->staging);
    free(u->lat);
    free(u);
}
