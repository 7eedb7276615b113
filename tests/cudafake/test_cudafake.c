/*
 * tests/cudafake/test_cudafake.c - the library's CUDA paths (cuda_drv.c,
 * mem.c, copy_cuda.c, engine_gate.c) over a fake driver (fakecuda.c,
 * loaded as libcuda.so.1 through LD_LIBRARY_PATH), without a GPU.  The
 * library loads the driver once per process, so each test runs in its
 * own forked child (Check's default) and sets the fake's knobs
 * (fakecuda.h) before its first CUDA question.
 *
 * test_cudafake_count_rc_is_absent: a driver whose cuDeviceGetCount fails
 * (while writing a count of 1) counts as absent;
 * test_cudafake_no_device, _init_fails: no device, or cuInit failing:
 * absent, and the count is never asked after a failed cuInit;
 * test_cudafake_two_devices: devices 0 and 1 available, 2 not, -1 an
 * invalid argument; xfer_mem_of names a fake device pointer's kind and
 * ordinal; a pool registration checks both ends of its range;
 * test_cudafake_producer_transfer, _shard_transfer, _device_to_device:
 * CUDA staging and/or CUDA shard pools (an in-process server) over TCP,
 * every byte checked where it landed, the copies counted by the fake,
 * and no stream or pinned buffer left at the end;
 * test_cudafake_producer_copy_fail, _shard_copy_fail: a copy whose stream
 * callback reports an error fails the transfer COPY in WRITING naming one
 * shard, every shard ends empty, and the next transfer goes through;
 * test_cudafake_gate_holds_until_event: a submit gated on a (fake) CUDA
 * event copies and sends nothing before the event completed, then every
 * byte arrives; test_cudafake_gate_event_fails: an event whose query
 * fails fails the transfer COPY with nothing read;
 * test_cudafake_xferd_cuda_pool: a real xferd --pool-mem cuda:0 takes a
 * transfer from CUDA staging (its pool bytes are in xferd's fake memory,
 * out of this process's reach: only the outcome is checked).
 */
#define _DEFAULT_SOURCE /* setenv */
#include <check.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "fakecuda.h"
#include "mp.h"
#include "xfer/server.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

#define NSH 4
#define SLICE (64u << 10)
#define POOL SLICE /* one region per shard: a transfer lands at offset 0 */

/* The fake's helpers, looked up in the driver the library loads. */
static struct {
    fakecuda_alloc_fn alloc;
    fakecuda_free_fn free;
    fakecuda_read_fn read;
    fakecuda_write_fn write;
    fakecuda_stats_get_fn stats;
    fakecuda_event_new_fn event_new;
    fakecuda_event_signal_fn event_signal;
    fakecuda_event_fail_fn event_fail;
    fakecuda_event_free_fn event_free;
} fk;

static void lookup(void *h, void *slot, const char *name)
{
    void *f = dlsym(h, name);
    ck_assert_msg(f != NULL, "the fake driver has no %s", name);
    *(void **)slot = f;
}

/* Load the fake with these knobs (NULL: unset) before the library asks
 * anything of CUDA.  The handle stays open for the process. */
static void fake_load(const char *count, const char *count_rc,
                      const char *init_rc, const char *copy_fail)
{
    const char *names[] = {"FAKECUDA_COUNT", "FAKECUDA_COUNT_RC",
                           "FAKECUDA_INIT_RC", "FAKECUDA_COPY_FAIL"};
    const char *vals[] = {count, count_rc, init_rc, copy_fail};
    for (int i = 0; i < 4; i++) {
        if (vals[i])
            setenv(names[i], vals[i], 1);
        else
            unsetenv(names[i]);
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(h != NULL, "libcuda.so.1: %s", dlerror());
    /* the fake, not a real driver ahead of it on the search path */
    lookup(h, &fk.alloc, "fakecuda_alloc");
    lookup(h, &fk.free, "fakecuda_free");
    lookup(h, &fk.read, "fakecuda_read");
    lookup(h, &fk.write, "fakecuda_write");
    lookup(h, &fk.stats, "fakecuda_stats_get");
    lookup(h, &fk.event_new, "fakecuda_event_new");
    lookup(h, &fk.event_signal, "fakecuda_event_signal");
    lookup(h, &fk.event_fail, "fakecuda_event_fail");
    lookup(h, &fk.event_free, "fakecuda_event_free");
}

static fakecuda_stats stats_now(void)
{
    fakecuda_stats st;
    fk.stats(&st);
    return st;
}

/* ---------------------------------------------------------------------- */
/* Loading the driver, devices, pointers                                   */
/* ---------------------------------------------------------------------- */

START_TEST(test_cudafake_count_rc_is_absent)
{
    /* cuDeviceGetCount fails, yet writes n = 1: the driver is unusable,
     * whatever the count it wrote */
    fake_load("1", "1", NULL, NULL);
    ck_assert_int_eq(xfer_mem_available((xfer_mem){XFER_MEM_CUDA, 0}),
                     XFER_ERR_NOT_SUPPORTED);
    fakecuda_stats st = stats_now();
    ck_assert_uint_eq(st.inits, 1);
    ck_assert_uint_eq(st.counts, 1); /* absent for that answer alone */
    /* and no pointer is taken for CUDA memory */
    void *p = fk.alloc(0, 4096);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(xfer_mem_of(p).kind, XFER_MEM_HOST);
    fk.free(p);
}
END_TEST

START_TEST(test_cudafake_no_device)
{
    fake_load("0", NULL, NULL, NULL);
    ck_assert_int_eq(xfer_mem_available((xfer_mem){XFER_MEM_CUDA, 0}),
                     XFER_ERR_NOT_SUPPORTED);
    ck_assert_uint_eq(stats_now().counts, 1);
}
END_TEST

START_TEST(test_cudafake_init_fails)
{
    fake_load("1", NULL, "1", NULL);
    ck_assert_int_eq(xfer_mem_available((xfer_mem){XFER_MEM_CUDA, 0}),
                     XFER_ERR_NOT_SUPPORTED);
    fakecuda_stats st = stats_now();
    ck_assert_uint_eq(st.inits, 1);
    ck_assert_uint_eq(st.counts, 0);
}
END_TEST

START_TEST(test_cudafake_two_devices)
{
    fake_load("2", NULL, NULL, NULL);
    ck_assert_int_eq(xfer_mem_available((xfer_mem){XFER_MEM_CUDA, 0}), 0);
    ck_assert_int_eq(xfer_mem_available((xfer_mem){XFER_MEM_CUDA, 1}), 0);
    ck_assert_int_eq(xfer_mem_available((xfer_mem){XFER_MEM_CUDA, 2}),
                     XFER_ERR_NOT_SUPPORTED);
    ck_assert_int_eq(xfer_mem_available((xfer_mem){XFER_MEM_CUDA, -1}),
                     XFER_ERR_INVALID_ARG);
    uint8_t *d0 = fk.alloc(0, 8192), *d1 = fk.alloc(1, 8192);
    ck_assert_ptr_nonnull(d0);
    ck_assert_ptr_nonnull(d1);
    xfer_mem m = xfer_mem_of(d0 + 8191);
    ck_assert_int_eq(m.kind, XFER_MEM_CUDA);
    ck_assert_int_eq(m.device, 0);
    m = xfer_mem_of(d1);
    ck_assert_int_eq(m.kind, XFER_MEM_CUDA);
    ck_assert_int_eq(m.device, 1);
    uint8_t host[64];
    ck_assert_int_eq(xfer_mem_of(host).kind, XFER_MEM_HOST);
    /* a registration: the right device, and the whole range inside */
    struct event_base *b = event_base_new();
    ck_assert_ptr_nonnull(b);
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = b;
    xfer_engine *e = NULL;
    ck_assert_int_eq(xfer_engine_new(&ec, &e), 0);
    uint32_t pool;
    xfer_mem cuda0 = {XFER_MEM_CUDA, 0};
    ck_assert_int_eq(xfer_engine_register_pool_mem(e, d1, 8192, cuda0, &pool),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_engine_register_pool_mem(e, host, sizeof host,
                                                   cuda0, &pool),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_engine_register_pool_mem(e, d0, 8193, cuda0, &pool),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_engine_register_pool_mem(e, d0, 8192, cuda0, &pool),
                     0);
    ck_assert_uint_eq(stats_now().streams, 1); /* its copy engine's */
    xfer_engine_del(e);
    event_base_free(b);
    ck_assert_uint_eq(stats_now().streams, 0);
    fk.free(d0);
    fk.free(d1);
    ck_assert_int_eq(xfer_mem_of(d0).kind, XFER_MEM_HOST);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Transfers over TCP (test_testdev.c's rig, on fake CUDA memory)          */
/* ---------------------------------------------------------------------- */

typedef struct rig {
    struct event_base *base;
    xfer_server *srv;
    uint8_t *pools[NSH]; /* host or fake CUDA memory */
    bool dev_shards;
    xfer_engine *e;
    xfer_tcp *tcp;
    uint32_t group, pool;
    uint8_t *staging; /* fake CUDA memory, or host */
    bool dev_staging;
    uint8_t *expect;  /* what staging holds */
    bool done;
    xfer_result res;
    fakecuda_stats at_done; /* the fake when the result came */
    volatile bool shut;
} rig;

static void on_done(void *ud, const xfer_result *r)
{
    rig *g = ud;
    g->res = *r;
    g->done = true;
    fk.stats(&g->at_done);
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed | 1u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

static void producer_new(rig *g, uint16_t port)
{
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)port);
    const char *addrs[NSH] = {addr, addr, addr, addr};
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = g->base;
    ec.core.default_deadline_ns = 10000000000ull;
    ck_assert_int_eq(xfer_engine_new(&ec, &g->e), 0);
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = NSH;
    tc.addrs = addrs;
    ck_assert_int_eq(xfer_tcp_new(g->base, &tc, &g->tcp), 0);
    ck_assert_int_eq(xfer_engine_add_group(g->e, xfer_tcp_transport(g->tcp),
                                           &g->group),
                     0);
    size_t n = NSH * (size_t)SLICE;
    g->expect = malloc(n);
    ck_assert_ptr_nonnull(g->expect);
    fill(g->expect, n, 2463534242u);
    xfer_mem m = {.kind = XFER_MEM_HOST};
    if (g->dev_staging) {
        g->staging = fk.alloc(0, n);
        ck_assert_ptr_nonnull(g->staging);
        ck_assert_int_eq(fk.write(g->staging, g->expect, n), 0);
        m.kind = XFER_MEM_CUDA;
    } else {
        g->staging = malloc(n);
        ck_assert_ptr_nonnull(g->staging);
        memcpy(g->staging, g->expect, n);
    }
    ck_assert_int_eq(xfer_engine_register_pool_mem(g->e, g->staging, n, m,
                                                   &g->pool),
                     0);
}

/* An in-process server of NSH shards (a sink: every READY is taken and
 * released at once, so each transfer lands at offset 0), then the
 * producer. */
static void rig_new(rig *g, bool dev_staging, bool dev_shards)
{
    memset(g, 0, sizeof *g);
    signal(SIGPIPE, SIG_IGN);
    g->dev_staging = dev_staging;
    g->dev_shards = dev_shards;
    g->base = event_base_new();
    ck_assert_ptr_nonnull(g->base);
    xfer_server_shard sh[NSH];
    xfer_mem mem[NSH];
    for (uint16_t k = 0; k < NSH; k++) {
        g->pools[k] = dev_shards ? fk.alloc(0, POOL) : calloc(1, POOL);
        ck_assert_ptr_nonnull(g->pools[k]);
        sh[k] = (xfer_server_shard){.index = k, .base = g->pools[k],
                                    .len = POOL};
        mem[k] = (xfer_mem){.kind = dev_shards ? XFER_MEM_CUDA
                                               : XFER_MEM_HOST};
    }
    xfer_server_config sc;
    xfer_server_config_default(&sc);
    sc.base = g->base;
    sc.nshards = NSH;
    sc.shards = sh;
    sc.consume = true;
    sc.session_max_bytes = POOL;
    sc.peer_max_bytes = POOL;
    sc.shard_mem = mem;
    ck_assert_int_eq(xfer_server_new(&sc, &g->srv), 0);
    producer_new(g, xfer_server_port(g->srv));
}

static void on_shut(void *ud)
{
    ((rig *)ud)->shut = true;
}

/* Tear down; every stream and pinned buffer of the library is gone. */
static void rig_del(rig *g)
{
    if (!g->shut) {
        ck_assert_int_eq(xfer_engine_shutdown(g->e, on_shut, g), 0);
        ck_assert(mp_run_until(g->base, &g->shut, 10000));
    }
    xfer_engine_del(g->e);
    xfer_tcp_del(g->tcp);
    xfer_server_del(g->srv);
    event_base_free(g->base);
    for (int k = 0; k < NSH; k++) {
        if (g->dev_shards)
            fk.free(g->pools[k]);
        else
            free(g->pools[k]);
    }
    if (g->dev_staging)
        fk.free(g->staging);
    else
        free(g->staging);
    free(g->expect);
    fakecuda_stats st = stats_now();
    ck_assert_uint_eq(st.streams, 0);
    ck_assert_uint_eq(st.pinned, 0);
}

static void submit(rig *g, uint64_t id)
{
    xfer_slice sl[NSH];
    for (uint16_t k = 0; k < NSH; k++)
        sl[k] = (xfer_slice){.off = (uint64_t)k * SLICE, .len = SLICE};
    xfer_transfer_desc d = {.id = id, .group = g->group, .pool = g->pool,
                            .nslices = NSH, .slices = sl};
    g->done = false;
    ck_assert_int_eq(xfer_engine_submit(g->e, &d, on_done, g), 0);
}

static bool done(void *ud)
{
    return ((rig *)ud)->done;
}

static bool srv_empty(void *ud)
{
    return xfer_server_empty(((rig *)ud)->srv);
}

/* Every shard holds its slice at offset 0: from host memory, or from the
 * fake device memory behind the pool. */
static void check_landed(const rig *g)
{
    uint8_t *got = malloc(SLICE);
    ck_assert_ptr_nonnull(got);
    for (int k = 0; k < NSH; k++) {
        memset(got, 0, SLICE);
        if (g->dev_shards)
            ck_assert_int_eq(fk.read(got, g->pools[k], SLICE), 0);
        else
            memcpy(got, g->pools[k], SLICE);
        ck_assert_int_eq(memcmp(got, g->expect + (size_t)k * SLICE, SLICE),
                         0);
    }
    free(got);
}

/* Zero every pool, so the next transfer must write each byte again. */
static void clear_pools(const rig *g)
{
    uint8_t *zero = calloc(1, POOL);
    ck_assert_ptr_nonnull(zero);
    for (int k = 0; k < NSH; k++) {
        if (g->dev_shards)
            ck_assert_int_eq(fk.write(g->pools[k], zero, POOL), 0);
        else
            memset(g->pools[k], 0, POOL);
    }
    free(zero);
}

static void check_ended_clean(rig *g)
{
    ck_assert(mp_run_while(g->base, srv_empty, g, 10000));
    xfer_engine_stats es;
    xfer_engine_stats_get(g->e, &es);
    ck_assert_uint_eq(es.staging_bytes_in_use, 0);
}

/* Three transfers, each verified byte for byte where it landed; the
 * fake's copies counted per direction. */
static void transfers(bool dev_staging, bool dev_shards)
{
    fake_load("1", NULL, NULL, NULL);
    rig g;
    rig_new(&g, dev_staging, dev_shards);
    fakecuda_stats before = stats_now();
    for (uint64_t id = 1; id <= 3; id++) {
        submit(&g, id);
        ck_assert(mp_run_while(g.base, done, &g, 10000));
        ck_assert_int_eq(g.res.status, 0);
        /* producer: two D2H copies per slice, its WRITE's and its
         * COMMIT's (the CRC is taken of a copy of its own); shard: an H2D
         * copy per slice, and a D2H read-back of it for the commit's CRC
         * check; every one of them ran before the producer heard READY */
        uint64_t d2h = id * NSH * ((dev_staging ? 2 : 0) + dev_shards);
        uint64_t h2d = dev_shards ? id * NSH : 0;
        ck_assert_uint_eq(g.at_done.d2h - before.d2h, d2h);
        ck_assert_uint_eq(g.at_done.h2d - before.h2d, h2d);
        ck_assert_uint_eq(g.at_done.done - before.done, d2h + h2d);
        ck_assert_uint_eq(g.at_done.failed, 0);
        check_landed(&g);
        clear_pools(&g);
    }
    check_ended_clean(&g);
    rig_del(&g);
}

START_TEST(test_cudafake_producer_transfer)
{
    transfers(true, false);
}
END_TEST

START_TEST(test_cudafake_shard_transfer)
{
    transfers(false, true);
}
END_TEST

START_TEST(test_cudafake_device_to_device)
{
    transfers(true, true);
}
END_TEST

/* The second copy (of either side) fails through its stream callback. */
static void copy_fail(bool shard_side)
{
    fake_load("1", NULL, NULL, "2");
    rig g;
    rig_new(&g, !shard_side, shard_side);
    submit(&g, 5);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, XFER_ERR_COPY);
    ck_assert_int_eq(g.res.phase, XFER_PHASE_WRITING);
    ck_assert_uint_lt(g.res.first_failed_shard, NSH);
    ck_assert_uint_eq(g.res.failed_shards, 1u << g.res.first_failed_shard);
    ck_assert(!g.res.consumer_may_hold);
    ck_assert_uint_eq(g.at_done.failed, 1);
    check_ended_clean(&g);
    /* the next transfer goes through */
    clear_pools(&g);
    submit(&g, 6);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, 0);
    check_landed(&g);
    rig_del(&g);
}

/* One transfer whose copy the fake refuses at its call fails COPY naming
 * one shard, in WRITING, every shard ending empty; the next lands.  The
 * rig is made by the caller (device staging or device shards). */
static void refused_then_lands(rig *g, uint64_t id)
{
    submit(g, id);
    ck_assert(mp_run_while(g->base, done, g, 10000));
    ck_assert_int_eq(g->res.status, XFER_ERR_COPY);
    ck_assert_int_eq(g->res.phase, XFER_PHASE_WRITING);
    ck_assert_uint_lt(g->res.first_failed_shard, NSH);
    ck_assert_uint_eq(g->res.failed_shards, 1u << g->res.first_failed_shard);
    ck_assert_uint_eq(stats_now().start_failed, 1);
    check_ended_clean(g);
    clear_pools(g);
    submit(g, id + 1);
    ck_assert(mp_run_while(g->base, done, g, 10000));
    ck_assert_int_eq(g->res.status, 0);
    check_landed(g);
}

/* A D2H copy the driver refuses at its call (nothing queued) while the
 * transfer's first copy is still on its stream: the copy engine reports
 * the refusal as that copy's failure, the transfer fails COPY naming
 * that op's shard, every shard ends empty (the slow first copy's bounce
 * buffer is given back only after its copy ended), and the next transfer
 * goes through. */
START_TEST(test_cudafake_copy_refused_while_another_copies)
{
    setenv("FAKECUDA_START_FAIL", "2", 1);
    setenv("FAKECUDA_COPY_DELAY_MS", "100", 1);
    fake_load("1", NULL, NULL, NULL);
    rig g;
    rig_new(&g, true, false);
    refused_then_lands(&g, 7);
    rig_del(&g);
}
END_TEST

/* The shard's first copy into its device pool refused at the call (no
 * other copy on the stream, so the refusal is the call's return): that
 * write ends failed at once, the transfer fails COPY naming the shard,
 * and every shard ends empty (a write left open would hold its region
 * forever: its lease waits for the write); the next transfer lands. */
START_TEST(test_cudafake_shard_copy_refused_at_start)
{
    setenv("FAKECUDA_START_FAIL", "1", 1);
    fake_load("1", NULL, NULL, NULL);
    rig g;
    rig_new(&g, false, true);
    refused_then_lands(&g, 9);
    rig_del(&g);
}
END_TEST

START_TEST(test_cudafake_producer_copy_fail)
{
    copy_fail(false);
}
END_TEST

START_TEST(test_cudafake_shard_copy_fail)
{
    copy_fail(true);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The gate on a CUDA event                                                */
/* ---------------------------------------------------------------------- */

static bool reserved_all(void *ud)
{
    xfer_server_stats st;
    xfer_server_stats_get(((rig *)ud)->srv, XFER_SHARD_NONE, &st);
    return st.reserves >= NSH;
}

/* Submit gated on a fake event, let the gate be polled for 50 ms: nothing
 * of staging was copied or sent.  `fail`: the event's query then fails,
 * else it completes. */
static void gated(bool fail)
{
    fake_load("1", NULL, NULL, NULL);
    rig g;
    rig_new(&g, true, false);
    void *ev = fk.event_new();
    ck_assert_ptr_nonnull(ev);
    fakecuda_stats before = stats_now();
    xfer_slice sl[NSH];
    for (uint16_t k = 0; k < NSH; k++)
        sl[k] = (xfer_slice){.off = (uint64_t)k * SLICE, .len = SLICE};
    xfer_transfer_desc d = {.id = 21, .group = g.group, .pool = g.pool,
                            .nslices = NSH, .slices = sl};
    ck_assert_int_eq(xfer_engine_submit_gated(g.e, &d, ev, on_done, &g), 0);
    ck_assert(mp_run_while(g.base, reserved_all, &g, 10000));
    for (int i = 0; i < 50 && !g.done; i++) { /* the gate is polled */
        event_base_loop(g.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    xfer_server_stats ss;
    xfer_server_stats_get(g.srv, XFER_SHARD_NONE, &ss);
    ck_assert(!g.done);
    ck_assert_uint_eq(stats_now().d2h, before.d2h);
    ck_assert_uint_eq(ss.write_bytes, 0);
    if (fail)
        fk.event_fail(ev);
    else
        fk.event_signal(ev);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    if (fail) {
        ck_assert_int_eq(g.res.status, XFER_ERR_COPY);
        ck_assert_uint_eq(g.at_done.d2h, before.d2h);
        xfer_server_stats_get(g.srv, XFER_SHARD_NONE, &ss);
        ck_assert_uint_eq(ss.write_bytes, 0);
    } else {
        ck_assert_int_eq(g.res.status, 0);
        ck_assert_uint_eq(g.at_done.d2h - before.d2h, 2 * NSH);
        check_landed(&g);
    }
    check_ended_clean(&g);
    rig_del(&g);
    fk.event_free(ev);
}

START_TEST(test_cudafake_gate_holds_until_event)
{
    gated(false);
}
END_TEST

START_TEST(test_cudafake_gate_event_fails)
{
    gated(true);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* A real xferd whose pools are (fake) CUDA memory                         */
/* ---------------------------------------------------------------------- */

START_TEST(test_cudafake_xferd_cuda_pool)
{
    /* the knobs reach xferd through the environment it inherits */
    fake_load("1", NULL, NULL, NULL);
    rig g;
    memset(&g, 0, sizeof g);
    signal(SIGPIPE, SIG_IGN);
    g.dev_staging = true;
    g.base = event_base_new();
    ck_assert_ptr_nonnull(g.base);
    mp_proc d;
    const char *args[] = {"--shards", "0,1,2,3", "--pool", "64K",
                          "--consume", "--quiet", "--pool-mem", "cuda:0",
                          "--session-max-bytes", "64K", NULL};
    ck_assert_int_eq(mp_xferd(&d, 0, args), 0);
    producer_new(&g, d.port);
    for (uint64_t id = 1; id <= 2; id++) {
        submit(&g, id);
        ck_assert(mp_run_while(g.base, done, &g, 10000));
        ck_assert_int_eq(g.res.status, 0);
    }
    xfer_wire_status st;
    ck_assert_int_eq(mp_wait_pool_free(d.port, 10000, &st), 0);
    ck_assert_int_eq(xfer_engine_shutdown(g.e, on_shut, &g), 0);
    ck_assert(mp_run_until(g.base, &g.shut, 10000));
    xfer_engine_del(g.e);
    xfer_tcp_del(g.tcp);
    event_base_free(g.base);
    fk.free(g.staging);
    free(g.expect);
    ck_assert_uint_eq(stats_now().streams, 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cudafake");
    TCase *tc = tcase_create("driver");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cudafake_count_rc_is_absent);
    tcase_add_test(tc, test_cudafake_no_device);
    tcase_add_test(tc, test_cudafake_init_fails);
    tcase_add_test(tc, test_cudafake_two_devices);
    suite_add_tcase(s, tc);
    tc = tcase_create("transfer");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cudafake_producer_transfer);
    tcase_add_test(tc, test_cudafake_shard_transfer);
    tcase_add_test(tc, test_cudafake_device_to_device);
    tcase_add_test(tc, test_cudafake_producer_copy_fail);
    tcase_add_test(tc, test_cudafake_copy_refused_while_another_copies);
    tcase_add_test(tc, test_cudafake_shard_copy_refused_at_start);
    tcase_add_test(tc, test_cudafake_shard_copy_fail);
    suite_add_tcase(s, tc);
    tc = tcase_create("gate");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cudafake_gate_holds_until_event);
    tcase_add_test(tc, test_cudafake_gate_event_fails);
    suite_add_tcase(s, tc);
    tc = tcase_create("xferd");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, NULL, mp_kill_all);
    tcase_add_test(tc, test_cudafake_xferd_cuda_pool);
    suite_add_tcase(s, tc);
    return s;
}

/* Nothing here asks the library about CUDA: the driver is loaded once per
 * process, and each test's child must load it with its own knobs. */
int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
