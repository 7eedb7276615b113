/*
 * tests/rdma/test_rdma.c - the RDMA transport and the server's RDMA side
 * (xfer/rdma.h) on the software fabric (suite rdma-sim): an engine with an
 * xfer_rdma group and S shard servers (xfer_server_new_rdma) on one event
 * base in one process, linked against tests/rdma/fabric instead of
 * rdma-core.
 *
 * Every test starts with xfer_fabric_reset() (it fails unless the previous
 * test left nothing of the fabric alive) and ends by tearing everything
 * down and checking the fabric's counters: every MR deregistered, every QP
 * and id destroyed, every CQ and CM event acked.  The shards' memory is
 * read back: what a transfer wrote must be there, and a write refused or
 * cancelled must leave the canary bytes as they were.  No assertion is
 * about time; waits are bounded only so that a hang fails.
 */
#define _GNU_SOURCE
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "testutil.h"
#include "xfer/rdma.h"
#include "xfer/server.h"
#include "xfer/shm.h"
#include "xfer/stream.h"
#include "xfer/xfer.h"
#ifdef XFER_RDMA_HW
/* The hardware suite: the same program on a real device, where there is
 * no fabric to reset, inject faults into or count (those checks are the
 * fabric's only, and so are the tests that need a fault). */
#define HAVE_FABRIC 0
#else
#define HAVE_FABRIC 1
#include "xfer_fabric.h"
#endif

#define MAX_S 4
#define MAX_ID 64
#define CANARY 0xC5
#define WAIT_MS 20000

typedef struct rig {
    struct event_base *base;
    uint16_t S;
    uint32_t slice, slots;
    uint8_t *mem[MAX_S];
    size_t mem_len;
    xfer_server *srv[MAX_S];
    char addr[MAX_S][32];
    const char *addrs[MAX_S];
    xfer_engine *e;
    xfer_rdma *rd;
    uint8_t *staging;
    uint32_t pool, group;
    int ndone[MAX_ID + 1];
    xfer_result res[MAX_ID + 1];
    int completions;
    uint32_t wrs_out_at_done; /* summed over completions (I3 check) */
} rig;

static uint8_t pattern(uint64_t id, uint16_t k, uint32_t i)
{
    return (uint8_t)(id * 131u + k * 31u + i * 7u + 1u);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
}

static bool run(rig *g, bool (*fn)(rig *), int ms)
{
    struct event *tick = event_new(g->base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval tv = {0, 2000};
    event_add(tick, &tv);
    uint64_t end = now_ms() + (uint64_t)ms;
    bool ok;
    while (!(ok = fn(g)) && now_ms() < end)
        event_base_loop(g->base, EVLOOP_ONCE);
    event_free(tick);
    return ok;
}

static bool never(rig *g)
{
    (void)g;
    return false;
}

static bool all_up(rig *g)
{
    for (uint16_t k = 0; k < g->S; k++)
        if (!xfer_rdma_connected(g->rd, k))
            return false;
    return true;
}

static bool writes_posted(rig *g)
{
    xfer_rdma_stats st;
    xfer_rdma_stats_get(g->rd, &st);
    return st.wrs_outstanding > 0;
}

static bool servers_drained(rig *g)
{
    for (uint16_t k = 0; k < g->S; k++)
        if (!xfer_server_drained(g->srv[k]))
            return false;
    return true;
}

static bool not_up(rig *g)
{
    return !all_up(g);
}

static void set_faults(const char *spec)
{
    (void)spec;
#if HAVE_FABRIC
    xfer_fabric_opts o;
    char err[128];
    xfer_fabric_default_opts(&o);
    /* the run's own options first (XFER_FABRIC_FAULTS: mw2=0 runs every
     * test on the registration path), then the test's */
    ck_assert_msg(xfer_fabric_parse_opts(getenv("XFER_FABRIC_FAULTS"), &o,
                                         err, sizeof err) == 0,
                  "%s", err);
    ck_assert_msg(xfer_fabric_parse_opts(spec, &o, err, sizeof err) == 0,
                  "%s", err);
    xfer_fabric_set_opts(&o);
#endif
}

/* The address servers bind and producers dial: XFER_RDMA_ADDR (on
 * hardware, an address of the RDMA device's interface), else loopback. */
static const char *host(void)
{
    const char *a = getenv("XFER_RDMA_ADDR");
    return a && *a ? a : "127.0.0.1";
}

/* Per-server knobs a test may set before servers(). */
static uint32_t srv_fault_ppm, srv_drop_ppm;
static uint64_t srv_fault_seed;
static size_t srv_small_len; /* nonzero: the last shard's pool is this */

/* S shard servers on `base` (NULL: a new base of the test's own). */
static void servers_on(rig *g, struct event_base *base, uint16_t S,
                       size_t mem_len, uint64_t lease_ns)
{
    memset(g, 0, sizeof *g);
    signal(SIGPIPE, SIG_IGN);
    g->S = S;
    g->mem_len = mem_len;
    g->base = base ? base : event_base_new();
    ck_assert_ptr_nonnull(g->base);
    for (uint16_t k = 0; k < S; k++) {
        g->mem[k] = malloc(mem_len);
        ck_assert_ptr_nonnull(g->mem[k]);
        memset(g->mem[k], CANARY, mem_len);
        xfer_server_shard sh = {
            .index = k, .base = g->mem[k],
            .len = srv_small_len && k == S - 1 ? srv_small_len : mem_len};
        xfer_server_config c;
        xfer_server_config_default(&c);
        c.base = g->base;
        c.addr = host();
        c.nshards = 1;
        c.shards = &sh;
        c.lease_ttl_ns = lease_ns;
        c.fault_ppm = srv_fault_ppm;
        c.drop_ppm = srv_drop_ppm;
        c.fault_seed = srv_fault_seed + k;
        ck_assert_int_eq(xfer_server_new_rdma(&c, NULL, &g->srv[k]), 0);
        ck_assert_uint_eq(xfer_server_rdma_port(g->srv[k]),
                          xfer_server_port(g->srv[k]));
        snprintf(g->addr[k], sizeof g->addr[k], "%s:%u", host(),
                 (unsigned)xfer_server_port(g->srv[k]));
        g->addrs[k] = g->addr[k];
    }
}

static void servers(rig *g, uint16_t S, size_t mem_len, uint64_t lease_ns)
{
    servers_on(g, NULL, S, mem_len, lease_ns);
}

/* The producer: engine, rdma transport, one staging pool of `slots`
 * transfers.  Returns add_group's / register_pool's code. */
static int producer(rig *g, uint32_t slice, uint32_t slots,
                    uint64_t deadline_ns)
{
    g->slice = slice;
    g->slots = slots;
    size_t len = (size_t)slice * g->S * slots;
    g->staging = calloc(len, 1);
    ck_assert_ptr_nonnull(g->staging);
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = g->base;
    ec.core.default_deadline_ns = deadline_ns;
    ec.core.max_transfers = 2 * slots;
    xfer_rdma_config rc;
    xfer_rdma_config_default(&rc);
    rc.tcp.nshards = g->S;
    rc.tcp.addrs = g->addrs;
    rc.tcp.reconnect_min_ns = 2000000ull;
    rc.tcp.reconnect_max_ns = 50000000ull;
    if (!g->e) /* else made by the test, owning the base */
        ck_assert_int_eq(xfer_engine_new(&ec, &g->e), 0);
    ck_assert_int_eq(xfer_rdma_new(g->base, &rc, &g->rd), 0);
    int r = xfer_engine_add_group(g->e, xfer_rdma_transport(g->rd),
                                  &g->group);
    if (r)
        return r;
    return xfer_engine_register_pool(g->e, g->staging, len, &g->pool);
}

static void on_done(void *ud, const xfer_result *r)
{
    rig *g = ud;
    xfer_rdma_stats st;
    xfer_rdma_stats_get(g->rd, &st);
    g->wrs_out_at_done += st.wrs_outstanding;
    g->completions++;
    if (r->id <= MAX_ID) {
        g->ndone[r->id]++;
        g->res[r->id] = *r;
    }
}

static int submit(rig *g, uint64_t id, uint32_t slot)
{
    xfer_slice sl[MAX_S];
    for (uint16_t k = 0; k < g->S; k++) {
        uint64_t off = ((uint64_t)slot * g->S + k) * g->slice;
        sl[k] = (xfer_slice){.off = off, .len = g->slice};
        for (uint32_t i = 0; i < g->slice; i++)
            g->staging[off + i] = pattern(id, k, i);
    }
    xfer_transfer_desc d = {.id = id, .group = g->group, .pool = g->pool,
                            .nslices = g->S, .slices = sl};
    return xfer_engine_submit(g->e, &d, on_done, g);
}

static int want_done;
static bool done_enough(rig *g)
{
    return g->completions >= want_done;
}

/* Does shard k's memory hold transfer id's slice somewhere? */
static bool landed(const rig *g, uint16_t k, uint64_t id)
{
    uint8_t *want = malloc(g->slice);
    for (uint32_t i = 0; i < g->slice; i++)
        want[i] = pattern(id, k, i);
    bool ok = memmem(g->mem[k], g->mem_len, want, g->slice) != NULL;
    free(want);
    return ok;
}

#if HAVE_FABRIC
static bool untouched(const rig *g, uint16_t k)
{
    for (size_t i = 0; i < g->mem_len; i++)
        if (g->mem[k][i] != CANARY)
            return false;
    return true;
}
#endif

static bool shut;
static void on_shut(void *ud)
{
    (void)ud;
    shut = true;
}
static bool is_shut(rig *g)
{
    (void)g;
    return shut;
}

static void fabric_empty(rig *g);

/* Shut everything down and check that the fabric has nothing left. */
static void teardown(rig *g)
{
    if (g->e) {
        shut = false;
        ck_assert_int_eq(xfer_engine_shutdown(g->e, on_shut, NULL), 0);
        ck_assert(run(g, is_shut, WAIT_MS));
    }
    if (g->rd) {
        xfer_rdma_stats st;
        ck_assert_int_eq(xfer_rdma_stats_get(g->rd, &st), 0);
        ck_assert_uint_eq(st.wrs_outstanding, 0);
        ck_assert_uint_eq(st.mrs_live, 0); /* every pool deregistered */
    }
    xfer_engine_del(g->e);
    xfer_rdma_del(g->rd);
    for (uint16_t k = 0; k < g->S; k++)
        xfer_server_del(g->srv[k]);
    event_base_loop(g->base, EVLOOP_NONBLOCK);
    event_base_free(g->base);
    fabric_empty(g);
}

/* After the teardown: the memory goes, and the fabric holds nothing. */
static void fabric_empty(rig *g)
{
    for (uint16_t k = 0; k < g->S; k++)
        free(g->mem[k]);
    free(g->staging);
#if HAVE_FABRIC
    xfer_fabric_counters c;
    xfer_fabric_counters_get(&c);
    ck_assert_uint_eq(c.mrs_live, 0);
    ck_assert_uint_eq(c.mrs_created, c.mrs_destroyed);
    ck_assert_uint_eq(c.mws_live, 0); /* every window deallocated */
    ck_assert_uint_eq(c.mws_created, c.mws_destroyed);
    ck_assert_uint_eq(c.qps_live, 0);
    ck_assert_uint_eq(c.cm_ids_live, 0);
    ck_assert_uint_eq(c.cq_events, c.cq_events_acked);
    ck_assert_uint_eq(c.cm_events, c.cm_events_acked);
    ck_assert_uint_eq(c.async_events, c.async_events_acked);
    ck_assert_uint_eq(c.destroy_busy, 0);
    ck_assert_int_eq(xfer_fabric_reset(), 0);
#endif
}

static void begin(const char *faults)
{
#if HAVE_FABRIC
    ck_assert_int_eq(xfer_fabric_reset(), 0);
#endif
    set_faults(faults);
}

/* ---------------------------------------------------------------------- */

START_TEST(test_rdma_transfers_land)
{
    rig g;
    begin("");
    servers(&g, 2, 1 << 20, 0);
    ck_assert_int_eq(producer(&g, 8192, 8, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    for (uint64_t id = 1; id <= 8; id++)
        ck_assert_int_eq(submit(&g, id, (uint32_t)(id - 1)), 0);
    want_done = 8;
    ck_assert(run(&g, done_enough, WAIT_MS));
    for (uint64_t id = 1; id <= 8; id++) {
        ck_assert_int_eq(g.ndone[id], 1);
        ck_assert_int_eq(g.res[id].status, 0);
        for (uint16_t k = 0; k < g.S; k++)
            ck_assert_msg(landed(&g, k, id), "id %llu shard %u",
                          (unsigned long long)id, k);
    }
    xfer_rdma_stats st;
    xfer_rdma_stats_get(g.rd, &st);
    ck_assert_uint_eq(st.writes_ok, 16);
    ck_assert_uint_eq(st.wrs_posted, st.wcs_polled);
    ck_assert_uint_eq(st.mrs_live, 1);
#if HAVE_FABRIC
    xfer_fabric_counters c;
    xfer_fabric_counters_get(&c);
    ck_assert_uint_eq(c.writes_landed, 16);
    ck_assert_uint_eq(c.bytes_landed, 16 * 8192);
#endif
    teardown(&g);
}
END_TEST

/* A stream over RDMA (issue 26): four layers, each a part gathering four
 * blocks per shard that lie in reverse order in staging, the first added
 * before the reserves answered; every block is its own one-sided WRITE at
 * its reservation offset, and every byte lands where the layer goes. */
#define ST_LAYERS 4
#define ST_BLOCKS 4
static unsigned st_parts_back;
static void st_part_back(void *ud, uint64_t id, uint32_t part, int status)
{
    (void)ud;
    (void)id;
    (void)part;
    ck_assert_int_eq(status, 0);
    st_parts_back++;
}

static int st_layer(rig *g, uint64_t id, unsigned l)
{
    uint32_t layer = g->slice / ST_LAYERS, blk = layer / ST_BLOCKS;
    xfer_range rg[MAX_S * ST_BLOCKS];
    uint32_t n = 0;
    for (uint16_t k = 0; k < g->S; k++)
        for (unsigned b = 0; b < ST_BLOCKS; b++) {
            uint32_t roff = l * layer + b * blk;
            uint64_t soff = (uint64_t)k * g->slice + l * layer +
                            (ST_BLOCKS - 1 - b) * blk;
            for (uint32_t i = 0; i < blk; i++)
                g->staging[soff + i] = pattern(id, k, roff + i);
            rg[n++] = (xfer_range){.staging_off = soff, .pool = g->pool,
                                   .len = blk, .resv_off = roff,
                                   .shard = k};
        }
    xfer_part_desc d = {.id = id, .ranges = rg, .nranges = n,
                        .cb = st_part_back};
    return xfer_engine_stream_part(g->e, &d, NULL);
}

START_TEST(test_rdma_stream_gathers_land)
{
    rig g;
    begin("");
    servers(&g, 2, 1 << 20, 0);
    ck_assert_int_eq(producer(&g, 8192, 1, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    uint32_t lens[MAX_S] = {8192, 8192};
    xfer_stream_desc d = {.id = 5, .group = g.group, .nshards = g.S,
                          .lens = lens};
    st_parts_back = 0;
    ck_assert_int_eq(xfer_engine_stream_open(g.e, &d, on_done, &g), 0);
    for (unsigned l = 0; l < ST_LAYERS; l++)
        ck_assert_int_eq(st_layer(&g, 5, l), 0);
    ck_assert_int_eq(xfer_engine_stream_seal(g.e, 5), 0);
    want_done = 1;
    ck_assert(run(&g, done_enough, WAIT_MS));
    ck_assert_int_eq(g.ndone[5], 1);
    ck_assert_int_eq(g.res[5].status, 0);
    ck_assert_uint_eq(st_parts_back, ST_LAYERS);
    for (uint16_t k = 0; k < g.S; k++)
        ck_assert_msg(landed(&g, k, 5), "shard %u", k);
    xfer_rdma_stats st;
    xfer_rdma_stats_get(g.rd, &st);
    ck_assert_uint_eq(st.writes_ok, ST_LAYERS * ST_BLOCKS * 2);
    ck_assert_uint_eq(st.wrs_posted, st.wcs_polled);
#if HAVE_FABRIC
    xfer_fabric_counters c;
    xfer_fabric_counters_get(&c);
    ck_assert_uint_eq(c.writes_landed, ST_LAYERS * ST_BLOCKS * 2);
    ck_assert_uint_eq(c.bytes_landed, 2 * 8192);
#endif
    /* issue 27: the runs' CRCs, taken as each was posted, joined into the
     * COMMIT's, which each shard checked against its own memory */
    for (uint16_t k = 0; k < g.S; k++) {
        xfer_server_stats ss;
        ck_assert_int_eq(xfer_server_stats_get(g.srv[k], XFER_SHARD_NONE,
                                               &ss), 0);
        ck_assert_uint_eq(ss.crc_checked, 1);
        ck_assert_uint_eq(ss.corrupt, 0);
    }
    teardown(&g);
}
END_TEST

/* Issue 23 item 1 on RDMA: an engine that owns its base (no base in its
 * config), the transport and the shard servers on xfer_engine_base, the
 * connections up and transfers landed; then both teardown orders
 * (_i 0: xfer_engine_del first, as rdma.h gives; 1: xfer_rdma_del first,
 * while attached, which the engine's detach completes).  The base is
 * freed with the last object on it, and the fabric holds nothing after. */
START_TEST(test_rdma_teardown_engine_owned_base)
{
    rig g;
    begin("");
    xfer_engine *e = NULL;
    ck_assert_int_eq(xfer_engine_new(NULL, &e), 0);
    servers_on(&g, xfer_engine_base(e), 2, 1 << 20, 0);
    g.e = e;
    ck_assert_int_eq(producer(&g, 8192, 2, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    for (uint64_t id = 1; id <= 2; id++)
        ck_assert_int_eq(submit(&g, id, (uint32_t)(id - 1)), 0);
    want_done = 2;
    ck_assert(run(&g, done_enough, WAIT_MS));
    for (uint64_t id = 1; id <= 2; id++) {
        ck_assert_int_eq(g.res[id].status, 0);
        for (uint16_t k = 0; k < g.S; k++)
            ck_assert(landed(&g, k, id));
    }
    shut = false;
    ck_assert_int_eq(xfer_engine_shutdown(g.e, on_shut, NULL), 0);
    ck_assert(run(&g, is_shut, WAIT_MS));
    if (_i == 0) {
        xfer_engine_del(g.e);
        /* The engine is gone; its base lives on under the transport. */
        ck_assert_int_ge(event_base_loop(g.base, EVLOOP_NONBLOCK), 0);
        xfer_rdma_del(g.rd);
    } else {
        xfer_rdma_del(g.rd);
        xfer_engine_del(g.e);
    }
    ck_assert_int_ge(event_base_loop(g.base, EVLOOP_NONBLOCK), 0);
    for (uint16_t k = 0; k < g.S; k++)
        xfer_server_del(g.srv[k]); /* the last frees the base */
    fabric_empty(&g);
}
END_TEST

/* Configs: an unknown version, no config, no shards are refused; the
 * server's RDMA config is versioned too. */
START_TEST(test_rdma_config_checks)
{
    rig g;
    begin("");
    servers(&g, 1, 1 << 16, 0);
    xfer_rdma *r = NULL;
    xfer_rdma_config rc;
    xfer_rdma_config_default(&rc);
    ck_assert_uint_eq(rc.version, XFER_RDMA_CONFIG_VERSION);
    ck_assert_uint_eq(rc.tcp.version, XFER_TCP_CONFIG_VERSION);
    ck_assert_int_eq(xfer_rdma_new(g.base, NULL, &r), XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_rdma_new(g.base, &rc, &r), XFER_ERR_INVALID_ARG);
    rc.tcp.nshards = 1;
    rc.tcp.addrs = g.addrs;
    rc.version = XFER_RDMA_CONFIG_VERSION + 1;
    ck_assert_int_eq(xfer_rdma_new(g.base, &rc, &r), XFER_ERR_INVALID_ARG);
    ck_assert_ptr_null(r);
    xfer_server_rdma_config sc;
    xfer_server_rdma_config_default(&sc);
    ck_assert_uint_eq(sc.version, XFER_SERVER_RDMA_CONFIG_VERSION);
    sc.version++;
    xfer_server *s = NULL;
    xfer_server_shard sh = {.index = 0, .base = g.mem[0], .len = 4096};
    xfer_server_config c;
    xfer_server_config_default(&c);
    c.base = g.base;
    c.nshards = 1;
    c.shards = &sh;
    ck_assert_int_eq(xfer_server_new_rdma(&c, &sc, &s), XFER_ERR_INVALID_ARG);
    ck_assert_ptr_null(s);
    teardown(&g);
}
END_TEST

/* Slow completions: the transfer's result (and with it the staging
 * slice) comes only once its write's completion was polled (I3). */
START_TEST(test_rdma_staging_released_after_completion_polled)
{
    rig g;
    begin("cq_delay_us=100000");
    servers(&g, 1, 1 << 16, 0);
    ck_assert_int_eq(producer(&g, 4096, 1, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    ck_assert_int_eq(submit(&g, 1, 0), 0);
    ck_assert(run(&g, writes_posted, WAIT_MS));
    ck_assert_int_eq(g.completions, 0);
    want_done = 1;
    ck_assert(run(&g, done_enough, WAIT_MS));
    ck_assert_int_eq(g.res[1].status, 0);
    ck_assert_uint_eq(g.wrs_out_at_done, 0);
    xfer_rdma_stats st;
    xfer_rdma_stats_get(g.rd, &st);
    ck_assert_uint_eq(st.wcs_polled, 1);
    teardown(&g);
}
END_TEST

#if HAVE_FABRIC /* needs an injected fault */
/* A write longer than the port's max_msg_sz is split. */
START_TEST(test_rdma_write_split_at_max_msg)
{
    rig g;
    begin("max_msg_sz=4096");
    servers(&g, 1, 1 << 20, 0);
    ck_assert_int_eq(producer(&g, 65536 + 100, 2, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    ck_assert_int_eq(submit(&g, 1, 0), 0);
    want_done = 1;
    ck_assert(run(&g, done_enough, WAIT_MS));
    ck_assert_int_eq(g.res[1].status, 0);
    ck_assert(landed(&g, 0, 1));
    xfer_rdma_stats st;
    xfer_rdma_stats_get(g.rd, &st);
    ck_assert_uint_eq(st.wrs_posted, 17);
    ck_assert_uint_eq(st.wcs_polled, 17);
    teardown(&g);
}
END_TEST
#endif

#if HAVE_FABRIC /* each needs an injected fault */
/* A write refused by the responder fails the transfer and lands nothing;
 * the shard reconnects and the next transfer goes through. */
static void fault_then_recover(const char *faults, bool half_lands)
{
    rig g;
    begin(faults);
    servers(&g, 1, 1 << 20, 0);
    ck_assert_int_eq(producer(&g, 4096, 2, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    ck_assert_int_eq(submit(&g, 1, 0), 0);
    want_done = 1;
    ck_assert(run(&g, done_enough, WAIT_MS));
    ck_assert_int_ne(g.res[1].status, 0);
    if (!half_lands)
        ck_assert(untouched(&g, 0));
    ck_assert(run(&g, all_up, WAIT_MS)); /* reconnected */
    ck_assert_int_eq(submit(&g, 2, 1), 0);
    want_done = 2;
    ck_assert(run(&g, done_enough, WAIT_MS));
    ck_assert_int_eq(g.res[2].status, 0);
    ck_assert(landed(&g, 0, 2));
    ck_assert_uint_eq(g.wrs_out_at_done, 0);
    xfer_rdma_stats st;
    xfer_rdma_stats_get(g.rd, &st);
    ck_assert_uint_ge(st.cm_losses, 1);
    ck_assert_uint_ge(st.cm_connects, 2);
    teardown(&g);
}

START_TEST(test_rdma_remote_access_error_fails_write)
{
    fault_then_recover("write_access_err=1", false);
}
END_TEST

START_TEST(test_rdma_qp_error_mid_write_flushes)
{
    fault_then_recover("write_qp_err=1", true);
}
END_TEST

START_TEST(test_rdma_cut_link_mid_write)
{
    fault_then_recover("write_cut=1", true);
}
END_TEST

static bool shards_empty(rig *g)
{
    for (uint16_t k = 0; k < g->S; k++) {
        xfer_server_stats st;
        if (xfer_server_stats_get(g->srv[k], XFER_SHARD_NONE, &st) != 0 ||
            st.bytes_in_use != 0)
            return false;
    }
    return true;
}

/* Issue 27: the fabric lands one write wrong (a bit flipped, or nothing
 * at all) and still completes it with success, so the producer commits.
 * The shard kills the region's rkey, checksums its own memory and refuses
 * the commit: the transfer fails CORRUPT naming that shard (the one whose
 * server counted it), nothing is READY, every shard ends empty, and the
 * next transfer lands. */
static void landed_wrong(const char *faults)
{
    rig g;
    begin(faults);
    servers(&g, 2, 1 << 20, 0);
    ck_assert_int_eq(producer(&g, 4096, 2, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    ck_assert_int_eq(submit(&g, 1, 0), 0);
    want_done = 1;
    ck_assert(run(&g, done_enough, WAIT_MS));
    ck_assert_int_eq(g.res[1].status, XFER_ERR_CORRUPT);
    uint16_t bad = g.res[1].first_failed_shard;
    ck_assert_uint_lt(bad, 2);
    ck_assert_uint_eq(g.res[1].failed_shards, 1u << bad);
    for (uint16_t k = 0; k < 2; k++) {
        xfer_server_stats st;
        ck_assert_int_eq(xfer_server_stats_get(g.srv[k], XFER_SHARD_NONE,
                                               &st), 0);
        ck_assert_uint_eq(st.corrupt, k == bad);
        ck_assert_uint_eq(st.crc_checked, 1);
    }
    ck_assert(run(&g, shards_empty, WAIT_MS));
    ck_assert_int_eq(submit(&g, 2, 1), 0);
    want_done = 2;
    ck_assert(run(&g, done_enough, WAIT_MS));
    ck_assert_int_eq(g.res[2].status, 0);
    ck_assert(landed(&g, 0, 2));
    ck_assert(landed(&g, 1, 2));
    xfer_fabric_counters c;
    xfer_fabric_counters_get(&c);
    ck_assert_uint_eq(c.writes_mangled, 1);
    teardown(&g);
}

START_TEST(test_rdma_corrupt_landed_write_refused)
{
    landed_wrong("write_corrupt=1");
}
END_TEST

START_TEST(test_rdma_phantom_write_refused)
{
    landed_wrong("write_phantom=2");
}
END_TEST

/* The same for a stream (issue 27): one of its 32 one-sided WRITEs lands
 * wrong and completes with success; the COMMIT carries its runs' CRCs
 * joined, so the shard's check after the invalidation refuses it: CORRUPT
 * naming that shard, every shard empty, and the next transfer lands. */
static void stream_landed_wrong(const char *faults)
{
    rig g;
    begin(faults);
    servers(&g, 2, 1 << 20, 0);
    ck_assert_int_eq(producer(&g, 8192, 1, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    uint32_t lens[MAX_S] = {8192, 8192};
    xfer_stream_desc d = {.id = 5, .group = g.group, .nshards = g.S,
                          .lens = lens};
    st_parts_back = 0;
    ck_assert_int_eq(xfer_engine_stream_open(g.e, &d, on_done, &g), 0);
    for (unsigned l = 0; l < ST_LAYERS; l++)
        ck_assert_int_eq(st_layer(&g, 5, l), 0);
    ck_assert_int_eq(xfer_engine_stream_seal(g.e, 5), 0);
    want_done = 1;
    ck_assert(run(&g, done_enough, WAIT_MS));
    ck_assert_int_eq(g.res[5].status, XFER_ERR_CORRUPT);
    uint16_t bad = g.res[5].first_failed_shard;
    ck_assert_uint_lt(bad, 2);
    ck_assert_uint_eq(g.res[5].failed_shards, 1u << bad);
    for (uint16_t k = 0; k < 2; k++) {
        xfer_server_stats st;
        ck_assert_int_eq(xfer_server_stats_get(g.srv[k], XFER_SHARD_NONE,
                                               &st), 0);
        ck_assert_uint_eq(st.corrupt, k == bad);
        ck_assert_uint_eq(st.crc_checked, 1);
    }
    ck_assert(run(&g, shards_empty, WAIT_MS));
    ck_assert_int_eq(submit(&g, 6, 0), 0);
    want_done = 2;
    ck_assert(run(&g, done_enough, WAIT_MS));
    ck_assert_int_eq(g.res[6].status, 0);
    ck_assert(landed(&g, 0, 6));
    ck_assert(landed(&g, 1, 6));
    xfer_fabric_counters c;
    xfer_fabric_counters_get(&c);
    ck_assert_uint_eq(c.writes_mangled, 1);
    teardown(&g);
}

/* A stream over RDMA sealed with the caller's CRCs (issue 27): the right
 * ones commit; a wrong one for shard 0 fails CORRUPT naming shard 0 at
 * the shard's check after the invalidation, every shard empty. */
START_TEST(test_rdma_stream_caller_crc)
{
    rig g;
    begin("");
    servers(&g, 2, 1 << 20, 0);
    ck_assert_int_eq(producer(&g, 8192, 1, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    uint32_t lens[MAX_S] = {8192, 8192};
    for (uint64_t id = 5; id <= 6; id++) {
        xfer_stream_desc d = {.id = id, .group = g.group, .nshards = g.S,
                              .lens = lens};
        ck_assert_int_eq(xfer_engine_stream_open(g.e, &d, on_done, &g), 0);
        for (unsigned l = 0; l < ST_LAYERS; l++)
            ck_assert_int_eq(st_layer(&g, id, l), 0);
        uint32_t crcs[2];
        uint8_t want[8192];
        for (uint16_t k = 0; k < 2; k++) {
            for (uint32_t i = 0; i < sizeof want; i++)
                want[i] = pattern(id, k, i);
            crcs[k] = tu_crc32c(want, sizeof want) ^ (id == 5 && k == 0);
        }
        ck_assert_int_eq(xfer_engine_stream_seal_crc(g.e, id, crcs, 2), 0);
        want_done = (int)id - 4;
        ck_assert(run(&g, done_enough, WAIT_MS));
        if (id == 5) {
            ck_assert_int_eq(g.res[5].status, XFER_ERR_CORRUPT);
            ck_assert_uint_eq(g.res[5].first_failed_shard, 0);
            ck_assert(run(&g, shards_empty, WAIT_MS));
        } else {
            ck_assert_int_eq(g.res[6].status, 0);
            ck_assert(landed(&g, 0, 6) && landed(&g, 1, 6));
        }
    }
    teardown(&g);
}
END_TEST

START_TEST(test_rdma_stream_corrupt_landed_write_refused)
{
    stream_landed_wrong("write_corrupt=7");
}
END_TEST

START_TEST(test_rdma_stream_phantom_write_refused)
{
    stream_landed_wrong("write_phantom=20");
}
END_TEST

/* The staging pool's registration fails: a clean error, nothing leaks. */
START_TEST(test_rdma_registration_failure_is_clean)
{
    rig g;
    begin("");
    servers(&g, 1, 1 << 16, 0);
    set_faults("reg_fail=1"); /* after the server's (its pool, windows) */
    ck_assert_int_eq(producer(&g, 4096, 1, 0), XFER_ERR_NOMEM);
    xfer_rdma_stats st;
    xfer_rdma_stats_get(g.rd, &st);
    ck_assert_uint_eq(st.reg_failures, 1);
    ck_assert_uint_eq(st.mrs_live, 0);
    teardown(&g);
}
END_TEST

/* Every shard connected again after a loss. */
static bool reconnected(rig *g)
{
    xfer_rdma_stats st;
    xfer_rdma_stats_get(g->rd, &st);
    return st.cm_connects > g->S && all_up(g);
}

/* The server's per-reservation rkey fails (its window's bind, or its
 * registration without windows): that reserve is refused, the region
 * goes back, the next transfer goes through. */
START_TEST(test_rdma_server_rkey_failure_refuses_reserve)
{
    rig g;
    begin("");
    servers(&g, 1, 1 << 16, 0);
    ck_assert_int_eq(producer(&g, 4096, 2, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    bool windows = xfer_server_rdma_windows(g.srv[0]);
    /* the next bind, or the next registration: the server's */
    set_faults(windows ? "bind_fail=1" : "reg_fail=1");
    ck_assert_int_eq(submit(&g, 1, 0), 0);
    want_done = 1;
    ck_assert(run(&g, done_enough, WAIT_MS));
    ck_assert_int_ne(g.res[1].status, 0);
    xfer_fabric_counters fc;
    xfer_fabric_counters_get(&fc);
    ck_assert_uint_eq(windows ? fc.bind_errors : fc.reg_failed, 1);
    ck_assert_uint_eq(fc.mws_live, 0);
    /* a failed bind put the server's QP in error (RC): it took the
     * connection down, and the producer reconnected both */
    if (windows)
        ck_assert(run(&g, reconnected, WAIT_MS));
    ck_assert(untouched(&g, 0));
    xfer_server_stats ss;
    ck_assert_int_eq(xfer_server_stats_get(g.srv[0], XFER_SHARD_NONE, &ss),
                     0);
    ck_assert_uint_eq(ss.bytes_in_use, 0);
    ck_assert_int_eq(submit(&g, 2, 1), 0);
    want_done = 2;
    ck_assert(run(&g, done_enough, WAIT_MS));
    ck_assert_int_eq(g.res[2].status, 0);
    ck_assert(landed(&g, 0, 2));
    teardown(&g);
}
END_TEST
#endif

/* A shard's connections killed while writes are posted: every transfer
 * ends once, no result before its completions were polled. */
START_TEST(test_rdma_kill_shard_connection)
{
    rig g;
    begin("write_delay_us=20000");
    servers(&g, 2, 1 << 20, 0);
    ck_assert_int_eq(producer(&g, 4096, 8, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    for (uint64_t id = 1; id <= 8; id++)
        ck_assert_int_eq(submit(&g, id, (uint32_t)(id - 1)), 0);
    ck_assert(run(&g, writes_posted, WAIT_MS));
    xfer_rdma_drop(g.rd, 1);
    ck_assert(run(&g, not_up, WAIT_MS)); /* the drop is deferred */
    want_done = 8;
    ck_assert(run(&g, done_enough, WAIT_MS));
    for (uint64_t id = 1; id <= 8; id++)
        ck_assert_int_eq(g.ndone[id], 1);
    /* the engine may retry a write lost with its connection: the loss is
     * seen in the transport's counters, not necessarily in the results */
    xfer_rdma_stats st;
    xfer_rdma_stats_get(g.rd, &st);
    ck_assert_uint_ge(st.cm_losses, 1);
    ck_assert_uint_gt(st.writes_failed + st.writes_aborted, 0);
    ck_assert_uint_eq(st.wcs_polled, st.wrs_posted);
    ck_assert(run(&g, all_up, WAIT_MS));
    ck_assert_int_eq(submit(&g, 9, 0), 0);
    want_done = 9;
    ck_assert(run(&g, done_enough, WAIT_MS));
    ck_assert_int_eq(g.res[9].status, 0);
    teardown(&g);
}
END_TEST

/* The deadline passes while a write sits in the send queue: the engine
 * aborts it, but a posted WR cannot be recalled, so the result (and the
 * cancel after it) waits for its completion (I3); then the region is
 * freed. */
START_TEST(test_rdma_deadline_in_write_waits_for_completion)
{
    rig g;
    begin("write_delay_us=300000");
    servers(&g, 1, 1 << 16, 0);
    ck_assert_int_eq(producer(&g, 4096, 1, 50000000ull), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    ck_assert_int_eq(submit(&g, 1, 0), 0);
    want_done = 1;
    ck_assert(run(&g, done_enough, WAIT_MS));
    ck_assert_int_eq(g.res[1].status, XFER_ERR_TIMEOUT);
    ck_assert_uint_eq(g.wrs_out_at_done, 0);
#if HAVE_FABRIC
    xfer_fabric_counters c;
    xfer_fabric_counters_get(&c);
    ck_assert_uint_eq(c.writes_sent, 1); /* it was executed before the end */
#endif
    run(&g, never, 20);
    xfer_server_stats ss;
    xfer_server_stats_get(g.srv[0], XFER_SHARD_NONE, &ss);
    ck_assert_uint_eq(ss.bytes_in_use, 0);
    ck_assert_uint_eq(ss.live, 0);
    teardown(&g);
}
END_TEST

/* Shutdown with writes posted and completions slow: the engine waits for
 * them, the pool is deregistered after the last completion, and nothing
 * of the fabric is left (teardown checks). */
START_TEST(test_rdma_shutdown_with_writes_posted)
{
    rig g;
    begin("cq_delay_us=50000");
    servers(&g, 2, 1 << 20, 0);
    ck_assert_int_eq(producer(&g, 4096, 4, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    for (uint64_t id = 1; id <= 4; id++)
        ck_assert_int_eq(submit(&g, id, (uint32_t)(id - 1)), 0);
    ck_assert(run(&g, writes_posted, WAIT_MS));
    teardown(&g); /* shutdown first; checks every WR polled, MR gone */
    for (uint64_t id = 1; id <= 4; id++)
        ck_assert_int_eq(g.ndone[id], 1);
}
END_TEST

/* Partial reserve: the last shard has no room, so every transfer fails
 * at reserve there and the reservations made on the others are rolled
 * back (cancelled, their rkeys invalidated): nothing stays held. */
START_TEST(test_rdma_partial_reserve_rolls_back)
{
    rig g;
    begin("");
    srv_small_len = 1024;
    servers(&g, 3, 1 << 20, 0);
    srv_small_len = 0;
    ck_assert_int_eq(producer(&g, 4096, 4, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    for (uint64_t id = 1; id <= 4; id++)
        ck_assert_int_eq(submit(&g, id, (uint32_t)(id - 1)), 0);
    want_done = 4;
    ck_assert(run(&g, done_enough, WAIT_MS));
    for (uint64_t id = 1; id <= 4; id++) {
        ck_assert_int_eq(g.ndone[id], 1);
        ck_assert_int_eq(g.res[id].status, XFER_ERR_NO_SPACE);
        ck_assert_uint_eq(g.res[id].first_failed_shard, 2);
    }
    ck_assert(run(&g, servers_drained, WAIT_MS));
    for (uint16_t k = 0; k < 3; k++) {
        xfer_server_stats ss;
        xfer_server_stats_get(g.srv[k], XFER_SHARD_NONE, &ss);
        ck_assert_uint_eq(ss.bytes_in_use, 0);
    }
    teardown(&g);
}
END_TEST

/* Seeded server faults on every shard: refusals, ops applied but reported
 * failed (a commit that did happen: a late READY; a cancel that did), and
 * dropped connections, under many transfers.  Every transfer ends once,
 * every one reported done landed whole on every shard, and once the
 * leases ran out nothing is held anywhere. */
START_TEST(test_rdma_server_faults_every_transfer_ends_once)
{
    uint64_t seed = tu_seed("test_rdma_server_faults_every_transfer_ends_once",
                            11);
    rig g;
    begin("");
    srv_fault_ppm = 60000;
    srv_drop_ppm = 8000;
    srv_fault_seed = seed;
    servers(&g, 3, 1 << 20, 200000000ull);
    srv_fault_ppm = srv_drop_ppm = 0;
    ck_assert_int_eq(producer(&g, 2048, 48, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    uint64_t next = 1;
    int ok = 0;
    for (int wave = 0; wave < 6; wave++) { /* 8 in flight at a time */
        uint64_t first = next;
        for (int i = 0; i < 8; i++, next++)
            ck_assert_int_eq(submit(&g, next, (uint32_t)(next - 1)), 0);
        want_done = (int)next - 1;
        ck_assert(run(&g, done_enough, WAIT_MS));
        /* Look for the wave's data before the next wave reserves: once a
         * lease (200 ms) ran out, a later reserve may reuse the region,
         * and on a loaded machine six waves can outlast a lease. */
        for (uint64_t id = first; id < next; id++) {
            if (g.res[id].status != 0)
                continue;
            ok++;
            for (uint16_t k = 0; k < g.S; k++)
                ck_assert(landed(&g, k, id));
        }
    }
    for (uint64_t id = 1; id < next; id++)
        ck_assert_int_eq(g.ndone[id], 1);
    ck_assert_int_gt(ok, 0);
    ck_assert(run(&g, servers_drained, WAIT_MS));
    uint64_t faults = 0;
    for (uint16_t k = 0; k < g.S; k++) {
        xfer_server_stats ss;
        xfer_server_stats_get(g.srv[k], XFER_SHARD_NONE, &ss);
        faults += ss.faults;
    }
    ck_assert_uint_gt(faults, 0); /* the faults did fire */
    teardown(&g);
}
END_TEST

/* Deadline in every phase: with slow completions and short deadlines
 * every transfer still ends exactly once, and the shards free all. */
START_TEST(test_rdma_deadlines_every_phase)
{
    uint64_t seed = tu_seed("test_rdma_deadlines_every_phase", 7);
    char spec[96];
    snprintf(spec, sizeof spec, "cq_delay_us=3000,cq_jitter_us=6000,seed=%llu",
             (unsigned long long)seed);
    rig g;
    begin(spec);
    servers(&g, 2, 1 << 20, 0);
    ck_assert_int_eq(producer(&g, 4096, 16, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    uint64_t rng = seed;
    for (uint64_t id = 1; id <= 16; id++) {
        xfer_slice sl[2] = {{.off = (id - 1) * 2 * 4096, .len = 4096},
                            {.off = (id - 1) * 2 * 4096 + 4096, .len = 4096}};
        xfer_transfer_desc d = {.id = id, .group = g.group, .pool = g.pool,
                                .nslices = 2, .slices = sl,
                                .timeout_ns = (1 + tu_rand(&rng) % 15) *
                                              1000000ull};
        ck_assert_int_eq(xfer_engine_submit(g.e, &d, on_done, &g), 0);
    }
    want_done = 16;
    ck_assert(run(&g, done_enough, WAIT_MS));
    for (uint64_t id = 1; id <= 16; id++)
        ck_assert_int_eq(g.ndone[id], 1);
    /* the cancels of the last ones: then no region is reserved, being
     * written or waiting for its invalidation on any shard */
    ck_assert(run(&g, servers_drained, WAIT_MS));
    teardown(&g);
}
END_TEST

#if HAVE_FABRIC /* xferd-sim is the fabric's */
/* Across processes: xferd --rdma (built on the fabric: XFERD_SIM) serves
 * a shard from a POSIX shared-memory pool; the producer here writes into
 * it one-sidedly, and the test maps the pool to read what landed. */
START_TEST(test_rdma_xferd_cross_process)
{
    const char *xferd = getenv("XFERD_SIM");
    ck_assert_ptr_nonnull(xferd);
    char pf[64], shm[32];
    snprintf(pf, sizeof pf, "/tmp/xfer-rdma-port.%d", (int)getpid());
    snprintf(shm, sizeof shm, "xfer-rdma-%d", (int)getpid());
    unlink(pf);
#if HAVE_FABRIC
    ck_assert_int_eq(xfer_fabric_reset(), 0);
#endif
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        execl(xferd, xferd, "--rdma", "--port", "0", "--port-file", pf,
              "--shm", shm, "--pool", "1M", "--quiet", (char *)NULL);
        _exit(127);
    }
    unsigned port = 0;
    for (int i = 0; i < 2000 && !port; i++) {
        FILE *f = fopen(pf, "r");
        if (f) {
            if (fscanf(f, "%u", &port) != 1)
                port = 0;
            fclose(f);
        }
        if (!port)
            usleep(5000);
    }
    ck_assert_uint_ne(port, 0);
    rig g;
    memset(&g, 0, sizeof g);
    g.S = 1;
    g.base = event_base_new();
    snprintf(g.addr[0], sizeof g.addr[0], "127.0.0.1:%u", port);
    g.addrs[0] = g.addr[0];
    ck_assert_int_eq(producer(&g, 8192, 4, 0), 0);
    ck_assert(run(&g, all_up, WAIT_MS));
    for (uint64_t id = 1; id <= 4; id++)
        ck_assert_int_eq(submit(&g, id, (uint32_t)(id - 1)), 0);
    want_done = 4;
    ck_assert(run(&g, done_enough, WAIT_MS));
    xfer_shm *m;
    xfer_allocator libc = {0};
    ck_assert_int_eq(xfer_shm_map(shm, 0, &libc, &m), 0);
    g.mem[0] = xfer_shm_pool(m);
    g.mem_len = xfer_shm_len(m);
    for (uint64_t id = 1; id <= 4; id++) {
        ck_assert_int_eq(g.res[id].status, 0);
        ck_assert(landed(&g, 0, id));
    }
    g.mem[0] = NULL;
    g.S = 0; /* no in-process servers to free */
    teardown(&g);
    xfer_shm_close(m);
    kill(pid, SIGTERM);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    unlink(pf);
}
END_TEST
#endif

static Suite *suite(void)
{
    Suite *s = suite_create("rdma");
    TCase *tc = tcase_create("fabric");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_rdma_transfers_land);
    tcase_add_test(tc, test_rdma_stream_gathers_land);
    tcase_add_loop_test(tc, test_rdma_teardown_engine_owned_base, 0, 2);
    tcase_add_test(tc, test_rdma_config_checks);
    tcase_add_test(tc, test_rdma_kill_shard_connection);
    tcase_add_test(tc, test_rdma_shutdown_with_writes_posted);
    tcase_add_test(tc, test_rdma_deadlines_every_phase);
    tcase_add_test(tc, test_rdma_staging_released_after_completion_polled);
    tcase_add_test(tc, test_rdma_deadline_in_write_waits_for_completion);
    tcase_add_test(tc, test_rdma_partial_reserve_rolls_back);
    tcase_add_test(tc, test_rdma_server_faults_every_transfer_ends_once);
#if HAVE_FABRIC
    tcase_add_test(tc, test_rdma_write_split_at_max_msg);
    tcase_add_test(tc, test_rdma_remote_access_error_fails_write);
    tcase_add_test(tc, test_rdma_qp_error_mid_write_flushes);
    tcase_add_test(tc, test_rdma_cut_link_mid_write);
    tcase_add_test(tc, test_rdma_corrupt_landed_write_refused);
    tcase_add_test(tc, test_rdma_phantom_write_refused);
    tcase_add_test(tc, test_rdma_stream_corrupt_landed_write_refused);
    tcase_add_test(tc, test_rdma_stream_phantom_write_refused);
    tcase_add_test(tc, test_rdma_stream_caller_crc);
    tcase_add_test(tc, test_rdma_registration_failure_is_clean);
    tcase_add_test(tc, test_rdma_server_rkey_failure_refuses_reserve);
    if (getenv("XFERD_SIM"))
        tcase_add_test(tc, test_rdma_xferd_cross_process);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
#if !HAVE_FABRIC
    char why[160];
    if (xfer_rdma_probe(why, sizeof why) != 0) {
        printf("SKIP: %s\n", why);
        return 77;
    }
#endif
    return tu_run(suite());
}
