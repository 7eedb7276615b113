/*
 * tests/testdev/test_testdev.c - device memory over TCP, without a GPU
 * (issue 25): the test device's memory as producer staging and as shard
 * pools, with copies that complete late, out of order or fail.
 *
 * test_testdev_memory_closed: test device memory faults when touched
 * directly (a child dies of SIGSEGV), reads back through the copy thread
 * what was written through it, is told apart from host memory, and a CUDA
 * registration where CUDA is absent answers NOT_SUPPORTED;
 * test_testdev_producer_transfer: device staging, a copy made late so the
 * copies complete out of order: every shard receives its slice byte for
 * byte, and staging is free at the end;
 * test_testdev_producer_copy_fail: the second D2H copy fails: the
 * transfer fails COPY in WRITING naming that shard, every shard rolls
 * back, and no copy is left in flight;
 * test_testdev_producer_corrupt_copy_fails_corrupt: integrity from device
 * staging: a WRITE's D2H copy that silently flips a byte fails CORRUPT
 * naming that shard (the COMMIT's CRC is of its own D2H copy), every
 * shard empty; a clean transfer passes with a CRC per commit;
 * test_testdev_producer_cancel, _deadline, _shutdown: a cancel, the
 * transfer's deadline, or a shutdown while the copies are still in
 * flight: the transfer ends with that status only after every copy ended
 * (I3: staging held until its copies ended), every shard empty;
 * test_testdev_shard_transfer, _copy_fail, _cancel, _deadline,
 * _shutdown: the same for shards whose pools are test device memory (the
 * server's H2D copies): bytes verified through the copy thread; every
 * copy ended before the producer heard its commits (READY follows the
 * copy); a failed copy fails COPY naming one shard; a cancel, deadline or
 * shutdown while the copies run leaves each region held until its copy
 * ended (I4);
 * test_testdev_shard_corrupt_copy_fails_corrupt: integrity on device
 * shards: an H2D copy that silently flips a byte fails the transfer
 * CORRUPT (COMPLETING) naming that shard, every shard empty; the next
 * transfer passes, every region checked through a D2H read-back;
 * test_testdev_stream_crc: a stream of two parts written out of order
 * carries its runs' joined CRC per shard and passes; one whose H2D copy
 * flipped a byte fails CORRUPT naming that shard, every shard empty;
 * test_testdev_stream_overlap_unchecked: a stream whose parts overlap
 * commits without a CRC (none sent) and succeeds;
 * test_testdev_gate_holds_until_event, _cancel, _deadline: a submit gated
 * on a test event: the reserves go out, and nothing of staging is copied
 * or sent before the event completed (then every byte arrives); a cancel
 * or the deadline while gated ends it with nothing read;
 * test_testdev_kill_shard_mid_copy, _during_producer_copy: kill -9 of a
 * real xferd (--pool-mem testdev) while copies run: CONN_LOST, only once
 * the producer's copies ended, staging free.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "mp.h"
#include "testutil.h"
#include "xfer/consumer.h"
#include "xfer/server.h"
#include "xfer/stream.h"
#include "xfer/tcp.h"
#include "xfer/testdev.h"
#include "xfer/xfer.h"

#define NSH 4
#define SLICE (64u << 10)
#define POOL SLICE /* one region per shard: a transfer lands at offset 0 */

typedef struct rig {
    struct event_base *base;
    xfer_server *srv;
    uint8_t *pools[NSH];  /* host or test device memory */
    bool dev_shards;
    xfer_engine *e;
    xfer_tcp *tcp;
    uint32_t group, pool;
    uint8_t *staging;     /* test device memory, or host */
    bool dev_staging;
    uint8_t *expect;      /* what staging holds (host copy) */
    bool done;
    xfer_result res;
    xfer_testdev_stats at_done; /* the test device when the result came */
    xfer_server_stats srv_at_done[NSH]; /* and each shard */
    volatile bool shut;
    bool engine_base;     /* base is the engine's own (rig_engine_base) */
} rig;

static void on_done(void *ud, const xfer_result *r)
{
    rig *g = ud;
    g->res = *r;
    g->done = true;
    xfer_testdev_stats_get(&g->at_done);
    for (uint16_t k = 0; k < NSH; k++)
        xfer_server_stats_get(g->srv, k, &g->srv_at_done[k]);
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

/* For the next rig_new (a test that sets one puts it back): the
 * producer's table of live transfers (0: the library default), and
 * whether the engine makes the base everything runs on (cfg.base NULL)
 * instead of the rig. */
static uint32_t rig_max_transfers;
static bool rig_engine_base;
static bool rig_no_consume; /* the server keeps READY data for a consumer */
static uint64_t rig_copy_budget; /* the engine's bounce budget (0: default) */

static void engine_new(rig *g, uint64_t deadline_ns)
{
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = g->base; /* NULL: the engine's own */
    ec.core.default_deadline_ns = deadline_ns;
    if (rig_max_transfers)
        ec.core.max_transfers = rig_max_transfers;
    ec.copy_budget_bytes = rig_copy_budget;
    ck_assert_int_eq(xfer_engine_new(&ec, &g->e), 0);
}

static void producer_new(rig *g, uint16_t port, uint64_t deadline_ns)
{
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)port);
    const char *addrs[NSH] = {addr, addr, addr, addr};
    if (!g->e)
        engine_new(g, deadline_ns);
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
        ck_assert_int_eq(xfer_testdev_alloc(n, (void **)&g->staging), 0);
        ck_assert_int_eq(xfer_testdev_write(g->staging, g->expect, n), 0);
        m.kind = XFER_MEM_TESTDEV;
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
static void rig_new(rig *g, bool dev_staging, bool dev_shards,
                    uint64_t deadline_ns)
{
    memset(g, 0, sizeof *g);
    signal(SIGPIPE, SIG_IGN);
    xfer_testdev_clear_rules(0);
    g->dev_staging = dev_staging;
    g->dev_shards = dev_shards;
    g->engine_base = rig_engine_base;
    if (g->engine_base) {
        engine_new(g, deadline_ns);
        g->base = xfer_engine_base(g->e);
    } else {
        g->base = event_base_new();
    }
    ck_assert_ptr_nonnull(g->base);
    xfer_server_shard sh[NSH];
    xfer_mem mem[NSH];
    for (uint16_t k = 0; k < NSH; k++) {
        if (dev_shards)
            ck_assert_int_eq(xfer_testdev_alloc(POOL, (void **)&g->pools[k]),
                             0);
        else
            g->pools[k] = calloc(1, POOL);
        ck_assert_ptr_nonnull(g->pools[k]);
        sh[k] = (xfer_server_shard){.index = k, .base = g->pools[k],
                                    .len = POOL};
        mem[k] = (xfer_mem){.kind = dev_shards ? XFER_MEM_TESTDEV
                                               : XFER_MEM_HOST};
    }
    xfer_server_config sc;
    xfer_server_config_default(&sc);
    sc.base = g->base;
    sc.nshards = NSH;
    sc.shards = sh;
    sc.consume = !rig_no_consume;
    sc.session_max_bytes = POOL; /* one session, the whole pool */
    sc.peer_max_bytes = POOL;
    sc.shard_mem = mem;
    ck_assert_int_eq(xfer_server_new(&sc, &g->srv), 0);
    producer_new(g, xfer_server_port(g->srv), deadline_ns);
}

static void on_shut(void *ud)
{
    ((rig *)ud)->shut = true;
}

static void rig_del(rig *g)
{
    if (!g->shut) {
        ck_assert_int_eq(xfer_engine_shutdown(g->e, on_shut, g), 0);
        ck_assert(mp_run_until(g->base, &g->shut, 10000));
    }
    xfer_engine_del(g->e);
    xfer_tcp_del(g->tcp);
    xfer_server_del(g->srv); /* the engine's base goes with the last */
    if (!g->engine_base)
        event_base_free(g->base);
    for (int k = 0; k < NSH; k++) {
        if (g->dev_shards)
            xfer_testdev_free(g->pools[k]);
        else
            free(g->pools[k]);
    }
    if (g->dev_staging)
        xfer_testdev_free(g->staging);
    else
        free(g->staging);
    free(g->expect);
    xfer_testdev_stats st;
    xfer_testdev_stats_get(&st);
    ck_assert_uint_eq(st.in_flight, 0);
    xfer_testdev_clear_rules(0);
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

static bool links_up(void *ud)
{
    const rig *g = ud;
    for (uint16_t k = 0; k < NSH; k++)
        if (!xfer_tcp_connected(g->tcp, k))
            return false;
    return true;
}

/* Every shard holds its slice at offset 0, read as the consumer would:
 * from host memory, or through the test device's copy thread. */
static void check_landed(const rig *g)
{
    uint8_t *got = malloc(SLICE);
    ck_assert_ptr_nonnull(got);
    for (int k = 0; k < NSH; k++) {
        if (g->dev_shards)
            ck_assert_int_eq(xfer_testdev_read(got, g->pools[k], SLICE), 0);
        else
            memcpy(got, g->pools[k], SLICE);
        ck_assert_int_eq(memcmp(got, g->expect + (size_t)k * SLICE, SLICE),
                         0);
    }
    free(got);
}

static void check_ended_clean(rig *g)
{
    ck_assert(mp_run_while(g->base, srv_empty, g, 10000));
    xfer_engine_stats es;
    xfer_engine_stats_get(g->e, &es);
    ck_assert_uint_eq(es.staging_bytes_in_use, 0);
}

START_TEST(test_testdev_memory_closed)
{
    uint8_t *p = NULL;
    ck_assert_int_eq(xfer_testdev_alloc(10000, (void **)&p), 0);
    uint8_t in[10000], out[10000];
    fill(in, sizeof in, 7);
    ck_assert_int_eq(xfer_testdev_write(p, in, sizeof in), 0);
    memset(out, 0, sizeof out);
    ck_assert_int_eq(xfer_testdev_read(out, p, sizeof out), 0);
    ck_assert_int_eq(memcmp(in, out, sizeof in), 0);
    /* a range past the allocation is refused, never copied */
    ck_assert_int_eq(xfer_testdev_read(out, p + 1, sizeof out),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_mem_of(p + 5000).kind, XFER_MEM_TESTDEV);
    ck_assert_int_eq(xfer_mem_of(in).kind, XFER_MEM_HOST);
    ck_assert_int_eq(xfer_mem_available((xfer_mem){XFER_MEM_TESTDEV, 0}), 0);
    ck_assert_int_eq(xfer_mem_available((xfer_mem){XFER_MEM_CUDA, -1}),
                     XFER_ERR_INVALID_ARG);
    /* CUDA device 0 is a device number like any other: available where
     * the driver has it, NOT_SUPPORTED where it has none, never refused as
     * an argument (issue 30's mem.c:22 survivor); a number past every
     * device is NOT_SUPPORTED; test device memory has device 0 only */
    int r0 = xfer_mem_available((xfer_mem){XFER_MEM_CUDA, 0});
    ck_assert_msg(r0 == 0 || r0 == XFER_ERR_NOT_SUPPORTED, "cuda 0: %d", r0);
    ck_assert_int_eq(xfer_mem_available((xfer_mem){XFER_MEM_CUDA, 1 << 20}),
                     XFER_ERR_NOT_SUPPORTED);
    ck_assert_int_eq(xfer_mem_available((xfer_mem){XFER_MEM_TESTDEV, 1}),
                     XFER_ERR_INVALID_ARG);
    /* touching it directly faults */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        freopen("/dev/null", "w", stderr); /* a sanitizer's report */
        volatile uint8_t *v = p;
        _exit(v[10] == 255 ? 3 : 4);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    /* SIGSEGV; under AddressSanitizer, its report of that SEGV ends in
     * SIGABRT (abort_on_error) */
    ck_assert(WIFSIGNALED(status));
    ck_assert(WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGABRT);
    /* a CUDA pool where this process has no CUDA device is refused */
    struct event_base *b = event_base_new();
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = b;
    xfer_engine *e = NULL;
    ck_assert_int_eq(xfer_engine_new(&ec, &e), 0);
    uint32_t pool;
    if (xfer_mem_available((xfer_mem){XFER_MEM_CUDA, 0}) != 0)
        ck_assert_int_eq(xfer_engine_register_pool_mem(
                             e, in, sizeof in,
                             (xfer_mem){XFER_MEM_CUDA, 0}, &pool),
                         XFER_ERR_NOT_SUPPORTED);
    /* host memory is not test device memory */
    ck_assert_int_eq(xfer_engine_register_pool_mem(
                         e, in, sizeof in, (xfer_mem){XFER_MEM_TESTDEV, 0},
                         &pool),
                     XFER_ERR_INVALID_ARG);
    xfer_engine_del(e);
    event_base_free(b);
    xfer_testdev_free(p);
    ck_assert_int_eq(xfer_mem_of(p).kind, XFER_MEM_HOST);
}
END_TEST

/* testdev.h: 1024 allocations live at most, then XFER_ERR_BUSY; a freed
 * slot is taken again.  (Issue 30's testdev.c:348 mutant looked one slot
 * past the table and handed it out.) */
typedef struct got {
    bool available, unavailable;
    int32_t reason;
} got;

static void got_avail(void *ud, uint64_t id, uint32_t attempt,
                      const xfer_region *regions, uint16_t n)
{
    (void)id, (void)attempt, (void)regions, (void)n;
    ((got *)ud)->available = true;
}

static void got_unavail(void *ud, uint64_t id, int32_t reason,
                        uint64_t shards)
{
    (void)id, (void)shards;
    ((got *)ud)->unavailable = true;
    ((got *)ud)->reason = reason;
}

static bool got_outcome(void *ud)
{
    return ((got *)ud)->available || ((got *)ud)->unavailable;
}

/* A consumer of n shards at addrs on base that checks on take against
 * pools, its outcomes into *out. */
static void checking_consumer(xfer_consumer_config *cc,
                              struct event_base *base, uint16_t n,
                              const char **addrs, void **pools, got *out)
{
    xfer_consumer_config_default(cc);
    cc->base = base;
    cc->nshards = n;
    cc->addrs = addrs;
    cc->available = got_avail;
    cc->unavailable = got_unavail;
    cc->ud = out;
    cc->pools = pools;
    cc->integrity = XFER_INTEGRITY_CONSUMER;
}

/* The consumer's check on take reads its pools with the CPU, so a pool of
 * device memory (a TP worker's own GPU buffer) is refused when the
 * consumer is made, XFER_ERR_NOT_SUPPORTED, not dereferenced at the
 * first take (here that would be a SIGSEGV: test device pages are
 * PROT_NONE).  The same pools without the check are fine (never read),
 * and host pools with it too. */
START_TEST(test_testdev_consumer_check_refuses_device_pool)
{
    struct event_base *base = event_base_new();
    ck_assert_ptr_nonnull(base);
    void *dev = NULL, *host = calloc(1, POOL);
    ck_assert_int_eq(xfer_testdev_alloc(POOL, &dev), 0);
    ck_assert_ptr_nonnull(host);
    const char *addrs[2] = {"127.0.0.1:9", "127.0.0.1:9"};
    void *pools[2] = {host, dev};
    got out = {0};
    xfer_consumer_config cc;
    checking_consumer(&cc, base, 2, addrs, pools, &out);
    xfer_consumer *c = NULL;
    ck_assert_int_eq(xfer_consumer_new(&cc, &c), XFER_ERR_NOT_SUPPORTED);
    ck_assert_ptr_null(c);
    cc.integrity = XFER_INTEGRITY_SHARD;
    ck_assert_int_eq(xfer_consumer_new(&cc, &c), 0);
    xfer_consumer_del(c);
    c = NULL;
    pools[1] = host;
    cc.integrity = XFER_INTEGRITY_CONSUMER;
    ck_assert_int_eq(xfer_consumer_new(&cc, &c), 0);
    xfer_consumer_del(c);
    event_base_free(base);
    xfer_testdev_free(dev);
    free(host);
}
END_TEST

START_TEST(test_testdev_alloc_table_full)
{
    static void *p[1024];
    xfer_testdev_stats st0;
    xfer_testdev_stats_get(&st0);
    uint64_t room = 1024 - st0.allocs_live;
    for (uint64_t i = 0; i < room; i++)
        ck_assert_int_eq(xfer_testdev_alloc(64, &p[i]), 0);
    void *more = NULL;
    ck_assert_int_eq(xfer_testdev_alloc(64, &more), XFER_ERR_BUSY);
    ck_assert_ptr_null(more);
    xfer_testdev_free(p[0]);
    ck_assert_int_eq(xfer_testdev_alloc(64, &more), 0);
    xfer_testdev_free(more);
    for (uint64_t i = 1; i < room; i++)
        xfer_testdev_free(p[i]);
    xfer_testdev_stats st;
    xfer_testdev_stats_get(&st);
    ck_assert_uint_eq(st.allocs_live, st0.allocs_live);
}
END_TEST

START_TEST(test_testdev_producer_transfer)
{
    rig g;
    rig_new(&g, true, false, 10000000000ull);
    /* the first copy completes 50 ms late: the others pass it */
    xfer_testdev_rule r = {.dir = XFER_TESTDEV_D2H, .count = 1,
                           .delay_ns = 50000000ull};
    ck_assert_int_eq(xfer_testdev_add_rule(&r), 0);
    xfer_testdev_stats before;
    xfer_testdev_stats_get(&before);
    for (uint64_t id = 1; id <= 3; id++) {
        submit(&g, id);
        ck_assert(mp_run_while(g.base, done, &g, 10000));
        ck_assert_int_eq(g.res.status, 0);
        check_landed(&g);
    }
    /* two D2H copies per slice: its WRITE's, and its COMMIT's whose bounce
     * buffer the integrity CRC is computed from (issue 27) */
    ck_assert_uint_eq(g.at_done.copies_d2h - before.copies_d2h,
                      2 * 3 * NSH);
    ck_assert_uint_ge(g.at_done.copies_reordered - before.copies_reordered,
                      1);
    check_ended_clean(&g);
    rig_del(&g);
}
END_TEST

START_TEST(test_testdev_producer_copy_fail)
{
    rig g;
    rig_new(&g, true, false, 10000000000ull);
    xfer_testdev_rule r = {.dir = XFER_TESTDEV_D2H, .skip = 1, .count = 1,
                           .fail = 1};
    ck_assert_int_eq(xfer_testdev_add_rule(&r), 0);
    submit(&g, 5);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, XFER_ERR_COPY);
    ck_assert_int_eq(g.res.phase, XFER_PHASE_WRITING);
    ck_assert_uint_eq(g.res.first_failed_shard, 1);
    ck_assert_uint_eq(g.res.failed_shards, 1u << 1);
    ck_assert(!g.res.consumer_may_hold);
    ck_assert_uint_eq(g.at_done.in_flight, 0);
    check_ended_clean(&g);
    /* the next transfer goes through */
    submit(&g, 6);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, 0);
    check_landed(&g);
    rig_del(&g);
}
END_TEST

/* The copies of a transfer are all made 300 ms late; `what` happens
 * while they are in flight. */
enum { DO_CANCEL, DO_DEADLINE, DO_SHUTDOWN };

static void interrupted(int what, bool shard_side)
{
    rig g;
    rig_new(&g, !shard_side, shard_side,
            what == DO_DEADLINE ? 500000000ull : 10000000000ull);
    xfer_testdev_rule r = {.dir = shard_side ? XFER_TESTDEV_H2D
                                             : XFER_TESTDEV_D2H,
                           .count = NSH, .delay_ns = 1500000000ull};
    ck_assert_int_eq(xfer_testdev_add_rule(&r), 0);
    /* let the links come up first, so the copies start at once */
    ck_assert(mp_run_while(g.base, links_up, &g, 10000));
    submit(&g, 9);
    uint64_t want = NSH; /* wait until NSH copies are queued */
    xfer_testdev_stats st;
    for (int i = 0; i < 5000 && !g.done; i++) {
        xfer_testdev_stats_get(&st);
        if (st.in_flight >= want)
            break;
        event_base_loop(g.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    /* every copy queued (the deadline may come first on a loaded machine:
     * then only what follows is asserted) */
    bool queued = st.in_flight == NSH;
    ck_assert(queued || what == DO_DEADLINE);
    int want_status = XFER_ERR_TIMEOUT;
    if (what == DO_CANCEL) {
        ck_assert_int_eq(xfer_engine_cancel(g.e, 9), 0);
        want_status = XFER_ERR_CANCELLED;
    } else if (what == DO_SHUTDOWN) {
        ck_assert_int_eq(xfer_engine_shutdown(g.e, on_shut, &g), 0);
        want_status = XFER_ERR_SHUTDOWN;
    }
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, want_status);
    if (!shard_side) {
        /* the staging region came back only once its copies had ended */
        ck_assert_uint_eq(g.at_done.in_flight, 0);
    } else {
        /* the producer let go when its bytes were sent; the shards hold
         * each region whose copy still runs (I4: the cancel, or the
         * lease, waits for the copy) */
        uint64_t running = 0;
        for (uint16_t k = 0; k < NSH; k++) {
            running += g.srv_at_done[k].copies_now;
            if (g.srv_at_done[k].copies_now)
                ck_assert_uint_gt(g.srv_at_done[k].live, 0);
        }
        if (queued)
            ck_assert_uint_gt(running, 0);
        ck_assert(mp_run_while(g.base, srv_empty, &g, 10000));
        uint64_t copies = 0;
        for (uint16_t k = 0; k < NSH; k++) {
            xfer_server_stats ss;
            ck_assert_int_eq(xfer_server_stats_get(g.srv, k, &ss), 0);
            copies += ss.copies;
            ck_assert_uint_eq(ss.copies_now, 0);
        }
        if (queued)
            ck_assert_uint_eq(copies, NSH);
    }
    if (what == DO_SHUTDOWN)
        ck_assert(mp_run_until(g.base, &g.shut, 10000));
    else
        check_ended_clean(&g);
    rig_del(&g);
}

static bool one_copy_in_flight(void *ud)
{
    (void)ud;
    xfer_testdev_stats st;
    xfer_testdev_stats_get(&st);
    return st.in_flight >= 1;
}

/* The engine's bounce budget (copy_budget_bytes) of one slice: the four
 * WRITEs' device-to-host copies run one at a time (each made 100 ms slow),
 * the others waiting for the bounce buffer, and every byte still lands
 * (the COMMITs' copies for their CRCs go through the same budget).
 * A cancel while three wait answers them ABORTED without copying them:
 * the transfer ends CANCELLED, every shard empty, at most the one copy
 * that had begun made. */
START_TEST(test_testdev_copy_budget_queues_writes)
{
    rig g;
    rig_copy_budget = SLICE;
    rig_new(&g, true, false, 10000000000ull);
    rig_copy_budget = 0;
    xfer_testdev_rule r = {.dir = XFER_TESTDEV_D2H, .delay_ns = 100000000ull};
    ck_assert_int_eq(xfer_testdev_add_rule(&r), 0);
    xfer_testdev_stats before, st;
    xfer_testdev_stats_get(&before);
    submit(&g, 61);
    ck_assert(mp_run_while(g.base, one_copy_in_flight, NULL, 10000));
    for (int i = 0; i < 20; i++) { /* 20 ms: the others would have begun */
        event_base_loop(g.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    xfer_testdev_stats_get(&st);
    ck_assert_uint_eq(st.in_flight, 1);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, 0);
    check_landed(&g);
    xfer_testdev_stats_get(&st);
    /* each slice copied for its WRITE and again for its COMMIT's CRC */
    ck_assert_uint_eq(st.copies_d2h - before.copies_d2h, 2 * NSH);
    check_ended_clean(&g);
    /* a cancel while one copies and three wait */
    xfer_testdev_stats_get(&before);
    submit(&g, 62);
    ck_assert(mp_run_while(g.base, one_copy_in_flight, NULL, 10000));
    ck_assert_int_eq(xfer_engine_cancel(g.e, 62), 0);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, XFER_ERR_CANCELLED);
    check_ended_clean(&g);
    xfer_testdev_stats_get(&st);
    ck_assert_uint_le(st.copies_d2h - before.copies_d2h, 1);
    ck_assert_uint_eq(st.in_flight, 0);
    rig_del(&g);
}
END_TEST

START_TEST(test_testdev_producer_cancel)
{
    interrupted(DO_CANCEL, false);
}
END_TEST

START_TEST(test_testdev_shard_cancel)
{
    interrupted(DO_CANCEL, true);
}
END_TEST

START_TEST(test_testdev_producer_deadline)
{
    interrupted(DO_DEADLINE, false);
}
END_TEST

START_TEST(test_testdev_shard_deadline)
{
    interrupted(DO_DEADLINE, true);
}
END_TEST

START_TEST(test_testdev_producer_shutdown)
{
    interrupted(DO_SHUTDOWN, false);
}
END_TEST

START_TEST(test_testdev_shard_shutdown)
{
    interrupted(DO_SHUTDOWN, true);
}
END_TEST

START_TEST(test_testdev_shard_transfer)
{
    rig g;
    rig_new(&g, false, true, 10000000000ull);
    xfer_testdev_rule r = {.dir = XFER_TESTDEV_H2D, .count = 1,
                           .delay_ns = 50000000ull};
    ck_assert_int_eq(xfer_testdev_add_rule(&r), 0);
    xfer_testdev_stats before;
    xfer_testdev_stats_get(&before);
    for (uint64_t id = 1; id <= 3; id++) {
        submit(&g, id);
        ck_assert(mp_run_while(g.base, done, &g, 10000));
        ck_assert_int_eq(g.res.status, 0);
        /* every copy into the pools ended before the producer heard the
         * commits (READY follows the copy) */
        ck_assert_uint_eq(g.at_done.copies_h2d - before.copies_h2d,
                          id * NSH);
        check_landed(&g);
    }
    check_ended_clean(&g);
    rig_del(&g);
}
END_TEST

/* A device shard's READY carries the CRC it checked after the copy (as a
 * host shard's does), so a consumer that checks on take can hold the
 * region to it.  The consumer here reads host mirrors of the regions (it
 * cannot read test device memory, and refuses to be given it): each
 * region's check runs against the READY's CRC, and a mirror that differs
 * from what the producer sent is caught CORRUPT naming its shard. */
START_TEST(test_testdev_device_shard_ready_carries_crc)
{
    rig g;
    rig_no_consume = true;
    rig_new(&g, false, true, 10000000000ull);
    rig_no_consume = false;
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u",
             (unsigned)xfer_server_port(g.srv));
    const char *addrs[NSH];
    void *mirror[NSH];
    for (uint16_t k = 0; k < NSH; k++) {
        addrs[k] = addr;
        mirror[k] = calloc(1, POOL);
        ck_assert_ptr_nonnull(mirror[k]);
        /* the first reservation of each shard is at offset 0 */
        memcpy(mirror[k], g.expect + (size_t)k * SLICE, SLICE);
    }
    ((uint8_t *)mirror[3])[7] ^= 0x40; /* shard 3's mirror is off by a bit */
    got out = {0};
    xfer_consumer_config cc;
    checking_consumer(&cc, g.base, NSH, addrs, mirror, &out);
    xfer_consumer *c = NULL;
    ck_assert_int_eq(xfer_consumer_new(&cc, &c), 0);
    ck_assert_int_eq(xfer_consumer_expect(c, 51, 0), 0);
    submit(&g, 51);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, 0);
    ck_assert(mp_run_while(g.base, got_outcome, &out, 10000));
    ck_assert(out.unavailable);
    ck_assert_int_eq(out.reason, XFER_ERR_CORRUPT);
    xfer_consumer_stats st;
    ck_assert_int_eq(xfer_consumer_stats_get(c, &st), 0);
    ck_assert_uint_eq(st.crc_checked, NSH); /* every READY had a CRC */
    ck_assert_uint_eq(st.corrupt, 1);
    check_ended_clean(&g); /* every take released */
    xfer_consumer_del(c);
    for (uint16_t k = 0; k < NSH; k++)
        free(mirror[k]);
    rig_del(&g);
}
END_TEST

START_TEST(test_testdev_shard_copy_fail)
{
    rig g;
    rig_new(&g, false, true, 10000000000ull);
    xfer_testdev_rule r = {.dir = XFER_TESTDEV_H2D, .skip = 2, .count = 1,
                           .fail = 1};
    ck_assert_int_eq(xfer_testdev_add_rule(&r), 0);
    submit(&g, 5);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, XFER_ERR_COPY);
    ck_assert_int_eq(g.res.phase, XFER_PHASE_WRITING);
    ck_assert_int_eq(__builtin_popcountll(g.res.failed_shards), 1);
    ck_assert_uint_eq(g.res.failed_shards, 1ull << g.res.first_failed_shard);
    ck_assert(!g.res.consumer_may_hold);
    xfer_server_stats st;
    ck_assert_int_eq(xfer_server_stats_get(g.srv, g.res.first_failed_shard,
                                           &st),
                     0);
    ck_assert_uint_eq(st.copies_failed, 1);
    check_ended_clean(&g);
    submit(&g, 6);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, 0);
    check_landed(&g);
    rig_del(&g);
}
END_TEST

/* Integrity over device shards (docs/integrity.md): a COMMIT's region is
 * read back device-to-host and checksummed, so an H2D copy that silently
 * flips a byte (a test device rule) fails the transfer CORRUPT naming
 * that shard, before READY, every shard empty; clean transfers pass, each
 * region checked once through one read-back. */
START_TEST(test_testdev_shard_corrupt_copy_fails_corrupt)
{
    rig g;
    rig_new(&g, false, true, 10000000000ull);
    xfer_testdev_rule r = {.dir = XFER_TESTDEV_H2D, .skip = 1, .count = 1,
                           .flip = 1};
    ck_assert_int_eq(xfer_testdev_add_rule(&r), 0);
    xfer_testdev_stats before;
    xfer_testdev_stats_get(&before);
    submit(&g, 7);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, XFER_ERR_CORRUPT);
    ck_assert_int_eq(g.res.phase, XFER_PHASE_COMPLETING);
    ck_assert_int_eq(__builtin_popcountll(g.res.failed_shards), 1);
    ck_assert_uint_eq(g.res.failed_shards, 1ull << g.res.first_failed_shard);
    /* (the other shards' clean regions may have been READY a moment:
     * consumer_may_hold is the engine's to say) */
    uint64_t corrupt = 0;
    for (uint16_t k = 0; k < NSH; k++) {
        xfer_server_stats st;
        ck_assert_int_eq(xfer_server_stats_get(g.srv, k, &st), 0);
        ck_assert_uint_eq(st.corrupt, k == g.res.first_failed_shard);
        corrupt += st.corrupt;
    }
    ck_assert_uint_eq(corrupt, 1);
    check_ended_clean(&g);
    submit(&g, 8);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, 0);
    check_landed(&g);
    xfer_testdev_stats after;
    xfer_testdev_stats_get(&after);
    for (uint16_t k = 0; k < NSH; k++) {
        xfer_server_stats st;
        ck_assert_int_eq(xfer_server_stats_get(g.srv, k, &st), 0);
        ck_assert_uint_ge(st.crc_checked, 2);
    }
    /* the shards' read-backs are the only D2H copies (host staging) */
    ck_assert_uint_ge(after.copies_d2h - before.copies_d2h, 2 * NSH - 3);
    check_ended_clean(&g);
    rig_del(&g);
}
END_TEST

/* Integrity from device staging: the producer's COMMIT is copied D2H like
 * a WRITE and carries the CRC of that bounce buffer, so a WRITE whose D2H
 * copy silently flipped a byte (a test device rule on the second copy, a
 * WRITE's: the commits' copies come after every write ended) fails
 * CORRUPT naming that shard, every shard empty; a clean transfer then
 * passes with a CRC sent per commit. */
START_TEST(test_testdev_producer_corrupt_copy_fails_corrupt)
{
    rig g;
    rig_new(&g, true, false, 10000000000ull);
    xfer_testdev_rule r = {.dir = XFER_TESTDEV_D2H, .skip = 1, .count = 1,
                           .flip = 1};
    ck_assert_int_eq(xfer_testdev_add_rule(&r), 0);
    submit(&g, 9);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, XFER_ERR_CORRUPT);
    ck_assert_int_eq(g.res.phase, XFER_PHASE_COMPLETING);
    ck_assert_int_eq(__builtin_popcountll(g.res.failed_shards), 1);
    ck_assert_uint_eq(g.res.failed_shards, 1ull << g.res.first_failed_shard);
    xfer_server_stats st;
    ck_assert_int_eq(xfer_server_stats_get(g.srv, g.res.first_failed_shard,
                                           &st),
                     0);
    ck_assert_uint_eq(st.corrupt, 1);
    check_ended_clean(&g);
    xfer_tcp_stats ts0, ts1;
    ck_assert_int_eq(xfer_tcp_stats_get(g.tcp, &ts0), 0);
    submit(&g, 10);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, 0);
    check_landed(&g);
    ck_assert_int_eq(xfer_tcp_stats_get(g.tcp, &ts1), 0);
    ck_assert_uint_eq(ts1.crcs_sent - ts0.crcs_sent, NSH);
    check_ended_clean(&g);
    rig_del(&g);
}
END_TEST

/* A stream of two parts over every shard: the second half of each slice
 * first, then the first half, from the same staging as submit(). */
static void stream(rig *g, uint64_t id)
{
    uint32_t lens[NSH];
    for (uint16_t k = 0; k < NSH; k++)
        lens[k] = SLICE;
    xfer_stream_desc sd = {.id = id, .group = g->group, .nshards = NSH,
                           .lens = lens};
    g->done = false;
    ck_assert_int_eq(xfer_engine_stream_open(g->e, &sd, on_done, g), 0);
    for (uint32_t half = 2; half >= 1; half--) {
        xfer_range rg[NSH];
        for (uint16_t k = 0; k < NSH; k++) {
            uint32_t off = (half - 1) * (SLICE / 2);
            rg[k] = (xfer_range){.staging_off = (uint64_t)k * SLICE + off,
                                 .pool = g->pool, .len = SLICE / 2,
                                 .resv_off = off, .shard = k};
        }
        xfer_part_desc pd = {.id = id, .ranges = rg, .nranges = NSH};
        ck_assert_int_eq(xfer_engine_stream_part(g->e, &pd, NULL), 0);
    }
    ck_assert_int_eq(xfer_engine_stream_seal(g->e, id), 0);
}

/* Integrity of streams: the producer joins its runs' CRCs in reservation
 * order into the COMMIT's, so a clean stream passes the shards' check
 * (a CRC sent per shard), and one whose H2D copy flipped a byte on a
 * device shard fails CORRUPT naming that shard, every shard empty. */
START_TEST(test_testdev_stream_crc)
{
    rig g;
    rig_new(&g, false, true, 10000000000ull);
    xfer_tcp_stats ts0, ts1;
    ck_assert_int_eq(xfer_tcp_stats_get(g.tcp, &ts0), 0);
    stream(&g, 21);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, 0);
    check_landed(&g);
    ck_assert_int_eq(xfer_tcp_stats_get(g.tcp, &ts1), 0);
    ck_assert_uint_eq(ts1.crcs_sent - ts0.crcs_sent, NSH);
    check_ended_clean(&g);
    xfer_testdev_rule r = {.dir = XFER_TESTDEV_H2D, .skip = 3, .count = 1,
                           .flip = 1};
    ck_assert_int_eq(xfer_testdev_add_rule(&r), 0);
    stream(&g, 22);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, XFER_ERR_CORRUPT);
    ck_assert_int_eq(__builtin_popcountll(g.res.failed_shards), 1);
    xfer_server_stats st;
    ck_assert_int_eq(xfer_server_stats_get(g.srv, g.res.first_failed_shard,
                                           &st),
                     0);
    ck_assert_uint_eq(st.corrupt, 1);
    check_ended_clean(&g);
    rig_del(&g);
}
END_TEST

/* A stream whose parts overlap (the whole slice, then its first half
 * again): the producer cannot know which write the shard holds, so its
 * COMMITs go without a CRC (none sent), unchecked, and the stream
 * succeeds with every byte in place. */
START_TEST(test_testdev_stream_overlap_unchecked)
{
    rig g;
    rig_new(&g, false, true, 10000000000ull);
    xfer_tcp_stats ts0, ts1;
    ck_assert_int_eq(xfer_tcp_stats_get(g.tcp, &ts0), 0);
    uint32_t lens[NSH];
    for (uint16_t k = 0; k < NSH; k++)
        lens[k] = SLICE;
    xfer_stream_desc sd = {.id = 31, .group = g.group, .nshards = NSH,
                           .lens = lens};
    g.done = false;
    ck_assert_int_eq(xfer_engine_stream_open(g.e, &sd, on_done, &g), 0);
    for (uint32_t len = SLICE; len >= SLICE / 2; len /= 2) {
        xfer_range rg[NSH];
        for (uint16_t k = 0; k < NSH; k++)
            rg[k] = (xfer_range){.staging_off = (uint64_t)k * SLICE,
                                 .pool = g.pool, .len = len, .shard = k};
        xfer_part_desc pd = {.id = 31, .ranges = rg, .nranges = NSH};
        ck_assert_int_eq(xfer_engine_stream_part(g.e, &pd, NULL), 0);
    }
    ck_assert_int_eq(xfer_engine_stream_seal(g.e, 31), 0);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, 0);
    check_landed(&g);
    ck_assert_int_eq(xfer_tcp_stats_get(g.tcp, &ts1), 0);
    ck_assert_uint_eq(ts1.crcs_sent - ts0.crcs_sent, 0);
    check_ended_clean(&g);
    rig_del(&g);
}
END_TEST

/* Kill -9 a real xferd serving NSH shards while copies are in flight:
 * its pools are test device memory whose copies complete 2 s late
 * (shard_side), or the producer's D2H copies are 300 ms late.  The
 * transfer fails CONN_LOST in WRITING, only once the producer's copies
 * ended, and staging is free. */
static void killed(bool shard_side)
{
    rig g;
    memset(&g, 0, sizeof g);
    signal(SIGPIPE, SIG_IGN);
    xfer_testdev_clear_rules(0);
    g.dev_staging = true;
    g.base = event_base_new();
    ck_assert_ptr_nonnull(g.base);
    mp_proc d;
    const char *dev_args[] = {"--shards", "0,1,2,3", "--pool", "64K",
                              "--consume", "--quiet", "--pool-mem",
                              "testdev", "--testdev-delay", "2s",
                              "--session-max-bytes", "64K", NULL};
    const char *host_args[] = {"--shards", "0,1,2,3", "--pool", "64K",
                               "--consume", "--quiet",
                               "--session-max-bytes", "64K", NULL};
    ck_assert_int_eq(mp_xferd(&d, 0, shard_side ? dev_args : host_args), 0);
    producer_new(&g, d.port, 10000000000ull);
    ck_assert(mp_run_while(g.base, links_up, &g, 10000));
    if (!shard_side) {
        xfer_testdev_rule r = {.dir = XFER_TESTDEV_D2H,
                               .delay_ns = 300000000ull};
        ck_assert_int_eq(xfer_testdev_add_rule(&r), 0);
    }
    xfer_testdev_stats before;
    xfer_testdev_stats_get(&before);
    submit(&g, 11);
    /* until every D2H copy is queued (producer side) or done and the
     * writes are on their way (shard side) */
    xfer_testdev_stats st;
    for (int i = 0; i < 2000; i++) {
        xfer_testdev_stats_get(&st);
        if (shard_side ? st.copies_d2h - before.copies_d2h >= NSH
                       : st.in_flight >= NSH)
            break;
        event_base_loop(g.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    for (int i = 0; shard_side && i < 100; i++) { /* the writes go out */
        event_base_loop(g.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    ck_assert(!g.done);
    mp_kill(&d, SIGKILL);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, XFER_ERR_CONN_LOST);
    ck_assert_int_ne(g.res.failed_shards, 0);
    ck_assert_uint_eq(g.at_done.in_flight, 0);
    xfer_engine_stats es;
    xfer_engine_stats_get(g.e, &es);
    ck_assert_uint_eq(es.staging_bytes_in_use, 0);
    ck_assert_int_eq(xfer_engine_shutdown(g.e, on_shut, &g), 0);
    ck_assert(mp_run_until(g.base, &g.shut, 10000));
    xfer_engine_del(g.e);
    xfer_tcp_del(g.tcp);
    event_base_free(g.base);
    xfer_testdev_free(g.staging);
    free(g.expect);
    xfer_testdev_clear_rules(0);
}

START_TEST(test_testdev_kill_shard_mid_copy)
{
    killed(true);
}
END_TEST

START_TEST(test_testdev_kill_during_producer_copy)
{
    killed(false);
}
END_TEST

/* Every shard has answered its reserve. */
static bool reserved_all(void *ud)
{
    xfer_server_stats st;
    xfer_server_stats_get(((rig *)ud)->srv, XFER_SHARD_NONE, &st);
    return st.reserves >= NSH;
}

static void gated_submit(rig *g, uint64_t id, xfer_testdev_event *ev)
{
    xfer_slice sl[NSH];
    for (uint16_t k = 0; k < NSH; k++)
        sl[k] = (xfer_slice){.off = (uint64_t)k * SLICE, .len = SLICE};
    xfer_transfer_desc d = {.id = id, .group = g->group, .pool = g->pool,
                            .nslices = NSH, .slices = sl};
    g->done = false;
    ck_assert_int_eq(xfer_engine_submit_gated(g->e, &d, ev, on_done, g), 0);
}

/* A gated transfer (what = 0: the event comes; DO_CANCEL, DO_DEADLINE:
 * it never does): the reserves go out, no byte of staging is copied or
 * sent while the event has not completed. */
static void gated(int what)
{
    rig g;
    rig_new(&g, true, false,
            what == DO_DEADLINE ? 300000000ull : 10000000000ull);
    xfer_testdev_event *ev = NULL;
    ck_assert_int_eq(xfer_testdev_event_new(&ev), 0);
    xfer_testdev_stats before, st;
    xfer_testdev_stats_get(&before);
    gated_submit(&g, 21, ev);
    ck_assert(mp_run_while(g.base, reserved_all, &g, 10000));
    for (int i = 0; i < 50 && !g.done; i++) { /* the gate is polled */
        event_base_loop(g.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    xfer_testdev_stats_get(&st);
    xfer_server_stats ss;
    xfer_server_stats_get(g.srv, XFER_SHARD_NONE, &ss);
    if (what != DO_DEADLINE) {
        /* nothing of the transfer was read before the event */
        ck_assert(!g.done);
        ck_assert_uint_eq(st.copies_d2h, before.copies_d2h);
        ck_assert_uint_eq(st.in_flight, 0);
        ck_assert_uint_eq(ss.write_bytes, 0);
    }
    if (what == 0) {
        xfer_testdev_event_signal(ev);
        ck_assert(mp_run_while(g.base, done, &g, 10000));
        ck_assert_int_eq(g.res.status, 0);
        check_landed(&g);
    } else {
        if (what == DO_CANCEL)
            ck_assert_int_eq(xfer_engine_cancel(g.e, 21), 0);
        ck_assert(mp_run_while(g.base, done, &g, 10000));
        ck_assert_int_eq(g.res.status, what == DO_CANCEL ? XFER_ERR_CANCELLED
                                                         : XFER_ERR_TIMEOUT);
        xfer_testdev_stats_get(&st);
        ck_assert_uint_eq(st.copies_d2h, before.copies_d2h);
        xfer_server_stats_get(g.srv, XFER_SHARD_NONE, &ss);
        ck_assert_uint_eq(ss.write_bytes, 0);
    }
    check_ended_clean(&g);
    rig_del(&g);
    xfer_testdev_event_free(ev);
}

/* A gated transfer with caller CRCs whose event completed lands: each
 * slice copied device to host once since `before`, for its WRITE, and
 * every COMMIT carrying the caller's CRC (sent and given NSH times since
 * ts0), nothing left held. */
static void gated_crc_landed(rig *g, const xfer_testdev_stats *before,
                             const xfer_tcp_stats *ts0)
{
    ck_assert(mp_run_while(g->base, done, g, 10000));
    ck_assert_int_eq(g->res.status, 0);
    check_landed(g);
    xfer_testdev_stats st;
    xfer_tcp_stats ts1;
    xfer_testdev_stats_get(&st);
    ck_assert_uint_eq(st.copies_d2h - before->copies_d2h, NSH);
    ck_assert_int_eq(xfer_tcp_stats_get(g->tcp, &ts1), 0);
    ck_assert_uint_eq(ts1.crcs_sent - ts0->crcs_sent, NSH);
    ck_assert_uint_eq(ts1.crcs_given - ts0->crcs_given, NSH);
    check_ended_clean(g);
}

/* Gated with caller CRCs (xfer_engine_submit_gated_crc): nothing is
 * copied before the event; then each slice is copied device to host once,
 * for its WRITE, and its COMMIT carries the caller's CRC, not one from a
 * second D2H copy (copies_d2h grows by NSH, not 2 x NSH; every CRC sent
 * was given).  A wrong CRC for one shard fails CORRUPT naming it, every
 * shard empty.  The refusals (NULL event, NULL crcs) call nothing. */
START_TEST(test_testdev_gate_caller_crc)
{
    rig g;
    rig_new(&g, true, false, 10000000000ull);
    uint32_t crcs[NSH];
    xfer_slice sl[NSH];
    for (uint16_t k = 0; k < NSH; k++) {
        sl[k] = (xfer_slice){.off = (uint64_t)k * SLICE, .len = SLICE};
        crcs[k] = tu_crc32c(g.expect + (size_t)k * SLICE, SLICE);
    }
    xfer_transfer_desc d = {.id = 31, .group = g.group, .pool = g.pool,
                            .nslices = NSH, .slices = sl};
    xfer_testdev_event *ev = NULL;
    ck_assert_int_eq(xfer_testdev_event_new(&ev), 0);
    ck_assert_int_eq(xfer_engine_submit_gated_crc(g.e, &d, NULL, crcs,
                                                  on_done, &g),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_engine_submit_gated_crc(g.e, &d, ev, NULL,
                                                  on_done, &g),
                     XFER_ERR_INVALID_ARG);
    xfer_testdev_stats before, st;
    xfer_tcp_stats ts0;
    xfer_testdev_stats_get(&before);
    ck_assert_int_eq(xfer_tcp_stats_get(g.tcp, &ts0), 0);
    g.done = false;
    ck_assert_int_eq(xfer_engine_submit_gated_crc(g.e, &d, ev, crcs, on_done,
                                                  &g),
                     0);
    ck_assert(mp_run_while(g.base, reserved_all, &g, 10000));
    for (int i = 0; i < 20; i++) {
        event_base_loop(g.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    xfer_testdev_stats_get(&st);
    ck_assert(!g.done);
    ck_assert_uint_eq(st.copies_d2h, before.copies_d2h);
    xfer_testdev_event_signal(ev);
    gated_crc_landed(&g, &before, &ts0);
    /* a wrong one for shard 2, gated on an event already complete */
    crcs[2] ^= 0x8000u;
    d.id = 32;
    g.done = false;
    ck_assert_int_eq(xfer_engine_submit_gated_crc(g.e, &d, ev, crcs, on_done,
                                                  &g),
                     0);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, XFER_ERR_CORRUPT);
    ck_assert_uint_eq(g.res.first_failed_shard, 2);
    ck_assert_uint_eq(g.res.failed_shards, 1ull << 2);
    check_ended_clean(&g);
    rig_del(&g);
    xfer_testdev_event_free(ev);
}
END_TEST

static void on_flag(void *ud, const xfer_result *r)
{
    (void)r;
    *(bool *)ud = true;
}

/* xfer_engine_submit_gated_crc under a full table, on a base the engine
 * made (the gate's poll timer, the server and the transport all on it;
 * the base goes with the last object deleted): with room for one live
 * transfer, held by a gated one whose event never comes, the call
 * is refused XFER_ERR_BUSY and keeps nothing (its copy of the CRCs is
 * freed: ASan's leak check; no byte is copied or sent).  Once the first
 * is cancelled, the same call goes through and lands, its COMMITs
 * carrying the CRCs given. */
START_TEST(test_testdev_gate_caller_crc_table_full)
{
    rig g;
    rig_max_transfers = 1;
    rig_engine_base = true;
    rig_new(&g, true, false, 10000000000ull);
    rig_max_transfers = 0;
    rig_engine_base = false;
    uint32_t crcs[NSH];
    xfer_slice sl[NSH];
    for (uint16_t k = 0; k < NSH; k++) {
        sl[k] = (xfer_slice){.off = (uint64_t)k * SLICE, .len = SLICE};
        crcs[k] = tu_crc32c(g.expect + (size_t)k * SLICE, SLICE);
    }
    xfer_testdev_event *never = NULL, *ev = NULL;
    ck_assert_int_eq(xfer_testdev_event_new(&never), 0);
    ck_assert_int_eq(xfer_testdev_event_new(&ev), 0);
    xfer_testdev_event_signal(ev);
    gated_submit(&g, 41, never);
    xfer_transfer_desc d = {.id = 42, .group = g.group, .pool = g.pool,
                            .nslices = NSH, .slices = sl};
    bool second_done = false;
    ck_assert_int_eq(xfer_engine_submit_gated_crc(g.e, &d, ev, crcs,
                                                  on_flag, &second_done),
                     XFER_ERR_BUSY);
    xfer_testdev_stats before;
    xfer_tcp_stats ts0;
    xfer_testdev_stats_get(&before);
    ck_assert_int_eq(xfer_tcp_stats_get(g.tcp, &ts0), 0);
    ck_assert_int_eq(xfer_engine_cancel(g.e, 41), 0);
    ck_assert(mp_run_while(g.base, done, &g, 10000));
    ck_assert_int_eq(g.res.status, XFER_ERR_CANCELLED);
    ck_assert(!second_done); /* the refused call never calls back */
    check_ended_clean(&g);
    g.done = false;
    ck_assert_int_eq(xfer_engine_submit_gated_crc(g.e, &d, ev, crcs, on_done,
                                                  &g),
                     0);
    gated_crc_landed(&g, &before, &ts0);
    rig_del(&g);
    xfer_testdev_event_free(never);
    xfer_testdev_event_free(ev);
}
END_TEST

START_TEST(test_testdev_gate_holds_until_event)
{
    gated(0);
}
END_TEST

START_TEST(test_testdev_gate_cancel)
{
    gated(DO_CANCEL);
}
END_TEST

START_TEST(test_testdev_gate_deadline)
{
    gated(DO_DEADLINE);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("testdev");
    TCase *tc = tcase_create("producer");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_testdev_memory_closed);
    tcase_add_test(tc, test_testdev_alloc_table_full);
    tcase_add_test(tc, test_testdev_consumer_check_refuses_device_pool);
    tcase_add_test(tc, test_testdev_producer_transfer);
    tcase_add_test(tc, test_testdev_producer_copy_fail);
    tcase_add_test(tc, test_testdev_producer_corrupt_copy_fails_corrupt);
    tcase_add_test(tc, test_testdev_producer_cancel);
    tcase_add_test(tc, test_testdev_copy_budget_queues_writes);
    tcase_add_test(tc, test_testdev_producer_deadline);
    tcase_add_test(tc, test_testdev_producer_shutdown);
    suite_add_tcase(s, tc);
    tc = tcase_create("shard");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_testdev_shard_transfer);
    tcase_add_test(tc, test_testdev_device_shard_ready_carries_crc);
    tcase_add_test(tc, test_testdev_shard_copy_fail);
    tcase_add_test(tc, test_testdev_shard_corrupt_copy_fails_corrupt);
    tcase_add_test(tc, test_testdev_stream_crc);
    tcase_add_test(tc, test_testdev_stream_overlap_unchecked);
    tcase_add_test(tc, test_testdev_shard_cancel);
    tcase_add_test(tc, test_testdev_shard_deadline);
    tcase_add_test(tc, test_testdev_shard_shutdown);
    suite_add_tcase(s, tc);
    tc = tcase_create("gate");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_testdev_gate_holds_until_event);
    tcase_add_test(tc, test_testdev_gate_caller_crc);
    tcase_add_test(tc, test_testdev_gate_caller_crc_table_full);
    tcase_add_test(tc, test_testdev_gate_cancel);
    tcase_add_test(tc, test_testdev_gate_deadline);
    suite_add_tcase(s, tc);
    tc = tcase_create("kill");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, NULL, mp_kill_all);
    tcase_add_test(tc, test_testdev_kill_shard_mid_copy);
    tcase_add_test(tc, test_testdev_kill_during_producer_copy);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
