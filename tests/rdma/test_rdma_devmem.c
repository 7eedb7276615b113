/*
 * tests/rdma/test_rdma_devmem.c - RDMA registrations of device memory
 * (transport/rdma_devmem.c, issue 25 item 5) on the software fabric
 * (suite rdma-sim): the choice between DMA-BUF and nvidia-peermem, and
 * the one log line that says which path was taken and why DMA-BUF failed.
 *
 * The CUDA calls are replaced through xfer_rdma_devmem_set_hooks: "device
 * memory" is a memfd mapped shared, the DMA-BUF hook hands out a dup of
 * that memfd (or fails, as a driver without dma-buf support does), and the
 * fabric's ibv_reg_dmabuf_mr maps the fd it is given, so a write through
 * a dma-buf MR lands in the fd's pages: the bytes are checked in the
 * test's own mapping of them.
 */
#define _GNU_SOURCE
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "rdma_devmem.h"
#include "testutil.h"
#include "xfer/rdma.h"
#include "xfer/server.h"
#include "xfer/testdev.h"
#include "xfer/xfer.h"
#include "xfer_fabric.h"

#define LEN (1u << 20)
#define SLICE 8192u
#define WAIT_MS 20000

/* ---- the fake CUDA ---------------------------------------------------- */

typedef struct fake_dev {
    int fd;        /* memfd */
    uint8_t *base; /* its mapping, LEN bytes */
} fake_dev;

static struct {
    fake_dev dev[2];
    int ndev;
    bool dmabuf_ok, peermem;
    int dmabuf_calls, dmabuf_given;
} fake;

static fake_dev *dev_of(const void *p)
{
    for (int i = 0; i < fake.ndev; i++)
        if ((const uint8_t *)p >= fake.dev[i].base &&
            (const uint8_t *)p < fake.dev[i].base + LEN)
            return &fake.dev[i];
    return NULL;
}

static int fake_is_device(void *ud, const void *ptr, int *dev)
{
    (void)ud;
    fake_dev *d = dev_of(ptr);
    if (!d)
        return 0;
    *dev = (int)(d - fake.dev);
    return 1;
}

static int fake_dmabuf_fd(void *ud, void *base, size_t len, int *fd,
                          char *why, size_t cap)
{
    (void)ud;
    fake.dmabuf_calls++;
    fake_dev *d = dev_of(base);
    if (!fake.dmabuf_ok) {
        snprintf(why, cap, "injected: CUDA_ERROR_NOT_SUPPORTED");
        return -1;
    }
    /* the whole allocation, page aligned: the fd's offset 0 is base */
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_eq(base, d->base);
    ck_assert_uint_eq(len, LEN);
    *fd = dup(d->fd);
    ck_assert_int_ge(*fd, 0);
    fake.dmabuf_given++;
    return 0;
}

static bool fake_peermem(void *ud)
{
    (void)ud;
    return fake.peermem;
}

static fake_dev *fake_alloc(void)
{
    fake_dev *d = &fake.dev[fake.ndev++];
    d->fd = memfd_create("xfer-fake-gpu", MFD_CLOEXEC);
    ck_assert_int_ge(d->fd, 0);
    ck_assert_int_eq(ftruncate(d->fd, LEN), 0);
    d->base = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, d->fd, 0);
    ck_assert_ptr_ne(d->base, MAP_FAILED);
    return d;
}

static void fake_begin(bool dmabuf_ok, bool peermem)
{
    memset(&fake, 0, sizeof fake);
    fake.dmabuf_ok = dmabuf_ok;
    fake.peermem = peermem;
    xfer_rdma_devmem_hooks h = {.is_device = fake_is_device,
                           .dmabuf_fd = fake_dmabuf_fd,
                           .peermem_loaded = fake_peermem};
    xfer_rdma_devmem_set_hooks(&h);
    xfer_fabric_opts o;
    xfer_fabric_default_opts(&o);
    char err[128];
    ck_assert_msg(xfer_fabric_parse_opts(getenv("XFER_FABRIC_FAULTS"), &o,
                                         err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(xfer_fabric_reset(), 0);
    xfer_fabric_set_opts(&o);
    signal(SIGPIPE, SIG_IGN);
}

static void fake_end(void)
{
    for (int i = 0; i < fake.ndev; i++) {
        munmap(fake.dev[i].base, LEN);
        close(fake.dev[i].fd);
    }
    xfer_rdma_devmem_set_hooks(NULL);
}

/* ---- the server's log ------------------------------------------------- */

static char logged[8][512];
static int nlogged;

static void on_log(void *ud, const char *line)
{
    (void)ud;
    if (nlogged < 8)
        snprintf(logged[nlogged++], sizeof logged[0], "%s", line);
}

/* The one line about the pool's registration. */
static const char *devmem_line(void)
{
    const char *found = NULL;
    int n = 0;
    for (int i = 0; i < nlogged; i++)
        if (strstr(logged[i], "rdma: cuda:")) {
            found = logged[i];
            n++;
        }
    ck_assert_int_eq(n, 1);
    return found;
}

/* ---- a shard server and a producer over the fabric -------------------- */

typedef struct rig {
    struct event_base *base;
    xfer_server *srv;
    char addr[32];
    const char *addrs[1];
    xfer_engine *e;
    xfer_rdma *rd;
    uint8_t *staging;
    uint32_t pool, group;
    int done, status;
} rig;

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

static bool run(rig *g, bool (*fn)(rig *))
{
    struct event *tick = event_new(g->base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval tv = {0, 2000};
    event_add(tick, &tv);
    uint64_t end = now_ms() + WAIT_MS;
    bool ok;
    while (!(ok = fn(g)) && now_ms() < end)
        event_base_loop(g->base, EVLOOP_ONCE);
    event_free(tick);
    return ok;
}

static bool up(rig *g)
{
    return xfer_rdma_connected(g->rd, 0);
}

static bool finished(rig *g)
{
    return g->done > 0;
}

static void on_done(void *ud, const xfer_result *r)
{
    rig *g = ud;
    g->done++;
    g->status = r->status;
}

static int server_on(rig *g, uint8_t *pool)
{
    memset(g, 0, sizeof *g);
    nlogged = 0;
    g->base = event_base_new();
    ck_assert_ptr_nonnull(g->base);
    xfer_server_shard sh = {.index = 0, .base = pool, .len = LEN};
    xfer_server_config c;
    xfer_server_config_default(&c);
    c.base = g->base;
    c.addr = "127.0.0.1";
    c.nshards = 1;
    c.shards = &sh;
    c.log = on_log;
    int rc = xfer_server_new_rdma(&c, NULL, &g->srv);
    if (rc == 0) {
        snprintf(g->addr, sizeof g->addr, "127.0.0.1:%u",
                 (unsigned)xfer_server_port(g->srv));
        g->addrs[0] = g->addr;
    }
    return rc;
}

/* The producer; staging NULL: host memory of its own. */
static int producer(rig *g, uint8_t *staging)
{
    g->staging = staging;
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = g->base;
    ck_assert_int_eq(xfer_engine_new(&ec, &g->e), 0);
    xfer_rdma_config rc;
    xfer_rdma_config_default(&rc);
    rc.tcp.nshards = 1;
    rc.tcp.addrs = g->addrs;
    ck_assert_int_eq(xfer_rdma_new(g->base, &rc, &g->rd), 0);
    ck_assert_int_eq(xfer_engine_add_group(g->e, xfer_rdma_transport(g->rd),
                                           &g->group), 0);
    return xfer_engine_register_pool(g->e, g->staging, LEN, &g->pool);
}

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

static void teardown(rig *g)
{
    if (g->e) {
        shut = false;
        ck_assert_int_eq(xfer_engine_shutdown(g->e, on_shut, NULL), 0);
        ck_assert(run(g, is_shut));
    }
    xfer_engine_del(g->e);
    xfer_rdma_del(g->rd);
    xfer_server_del(g->srv);
    event_base_loop(g->base, EVLOOP_NONBLOCK);
    event_base_free(g->base);
    xfer_fabric_counters c;
    xfer_fabric_counters_get(&c);
    ck_assert_uint_eq(c.mrs_live, 0); /* dma-buf MRs too */
    ck_assert_uint_eq(c.mrs_created, c.mrs_destroyed);
    ck_assert_int_eq(xfer_fabric_reset(), 0);
}

/* One transfer of SLICE bytes from staging offset 0; true when it ended
 * OK and its bytes are in shard memory `mem` somewhere. */
static bool transfer_lands(rig *g, const uint8_t *mem)
{
    for (uint32_t i = 0; i < SLICE; i++)
        g->staging[i] = (uint8_t)(i * 7u + 3u);
    xfer_slice sl = {.off = 0, .len = SLICE};
    xfer_transfer_desc d = {.id = 1, .group = g->group, .pool = g->pool,
                            .nslices = 1, .slices = &sl};
    ck_assert_int_eq(xfer_engine_submit(g->e, &d, on_done, g), 0);
    ck_assert(run(g, finished));
    ck_assert_int_eq(g->status, 0);
    return memmem(mem, LEN, g->staging, SLICE) != NULL;
}

/* ---------------------------------------------------------------------- */

/* DMA-BUF works: the shard's device pool and the producer's device
 * staging are both registered through it (ibv_reg_dmabuf_mr on the
 * driver's fd), the log says so, and a transfer lands in the device
 * pages. */
START_TEST(test_rdma_devmem_dmabuf_path_taken)
{
    rig g;
    fake_begin(true, true); /* peermem loaded too: dma-buf still first */
    fake_dev *pool = fake_alloc(), *stage = fake_alloc();
    memset(pool->base, 0xC5, LEN);
    ck_assert_int_eq(server_on(&g, pool->base), 0);
    const char *line = devmem_line();
    ck_assert_msg(strstr(line, "via dma-buf") != NULL, "%s", line);
    ck_assert_int_eq(producer(&g, stage->base), 0);
    ck_assert_int_eq(fake.dmabuf_given, 2); /* the pool and the staging */
    xfer_rdma_stats st;
    ck_assert_int_eq(xfer_rdma_stats_get(g.rd, &st), 0);
    ck_assert_uint_eq(st.pools_dmabuf, 1);
    ck_assert_uint_eq(st.pools_peermem, 0);
    ck_assert(run(&g, up));
    ck_assert(transfer_lands(&g, pool->base));
    teardown(&g);
    fake_end();
}
END_TEST

/* DMA-BUF fails (a driver without it): nvidia-peermem is loaded, so the
 * plain registration is taken, and the line says why dma-buf was not. */
START_TEST(test_rdma_devmem_peermem_fallback_logged)
{
    rig g;
    fake_begin(false, true);
    fake_dev *pool = fake_alloc(), *stage = fake_alloc();
    ck_assert_int_eq(server_on(&g, pool->base), 0);
    const char *line = devmem_line();
    ck_assert_msg(strstr(line, "via nvidia-peermem") != NULL, "%s", line);
    ck_assert_msg(strstr(line, "dma-buf failed: injected: "
                               "CUDA_ERROR_NOT_SUPPORTED") != NULL,
                  "%s", line);
    ck_assert_int_eq(producer(&g, stage->base), 0);
    ck_assert_int_eq(fake.dmabuf_calls, 2);
    ck_assert_int_eq(fake.dmabuf_given, 0);
    xfer_rdma_stats st;
    ck_assert_int_eq(xfer_rdma_stats_get(g.rd, &st), 0);
    ck_assert_uint_eq(st.pools_peermem, 1);
    ck_assert_uint_eq(st.pools_dmabuf, 0);
    ck_assert(run(&g, up));
    ck_assert(transfer_lands(&g, pool->base));
    teardown(&g);
    fake_end();
}
END_TEST

/* Neither path: the server refuses to start (NOT_SUPPORTED) with one line
 * naming both reasons; a producer's device staging is refused the same
 * way, and host memory still works beside it. */
START_TEST(test_rdma_devmem_neither_path_refused)
{
    rig g;
    fake_begin(false, false);
    fake_dev *pool = fake_alloc();
    ck_assert_int_eq(server_on(&g, pool->base), XFER_ERR_NOT_SUPPORTED);
    const char *line = devmem_line();
    ck_assert_msg(strstr(line, "not registrable") != NULL &&
                      strstr(line, "CUDA_ERROR_NOT_SUPPORTED") != NULL &&
                      strstr(line, "nvidia-peermem is not loaded") != NULL,
                  "%s", line);
    event_base_free(g.base);
    /* a host pool for the server; the producer's device staging refused */
    uint8_t *host = calloc(LEN, 1);
    ck_assert_int_eq(server_on(&g, host), 0);
    for (int i = 0; i < nlogged; i++) /* host memory: nothing to say */
        ck_assert_ptr_null(strstr(logged[i], "rdma: cuda:"));
    ck_assert_int_eq(producer(&g, fake_alloc()->base),
                     XFER_ERR_NOT_SUPPORTED);
    uint8_t *hstage = calloc(LEN, 1);
    ck_assert_int_eq(xfer_engine_register_pool(g.e, hstage, LEN, &g.pool),
                     0);
    xfer_rdma_stats st;
    ck_assert_int_eq(xfer_rdma_stats_get(g.rd, &st), 0);
    ck_assert_uint_eq(st.pools_device_refused, 1);
    ck_assert_uint_eq(st.reg_failures, 1);
    ck_assert_uint_eq(st.pools_registered, 1); /* the host one */
    ck_assert_uint_eq(st.pools_dmabuf + st.pools_peermem, 0);
    /* a version 1 caller gets the fields it knows, nothing past them */
    xfer_rdma_stats v1;
    memset(&v1, 0xAB, sizeof v1);
    ck_assert_int_eq(xfer_rdma_stats_get_versioned(g.rd, 1, &v1), 0);
    ck_assert_uint_eq(v1.pools_registered, 1);
    ck_assert_uint_eq(v1.pools_dmabuf, 0xABABABABABABABABull);
    g.staging = hstage;
    ck_assert(run(&g, up));
    ck_assert(transfer_lands(&g, host));
    teardown(&g);
    free(host);
    free(hstage);
    fake_end();
}
END_TEST

/* Test-device memory (PROT_NONE to all but its copy thread) has no RDMA
 * path: a shard pool and a producer's staging of it are refused with one
 * line (the server's) and a count (the producer's), never registered for
 * a NIC to write. */
START_TEST(test_rdma_devmem_testdev_refused)
{
    rig g;
    fake_begin(true, true);
    void *pool = NULL, *stage = NULL;
    ck_assert_int_eq(xfer_testdev_alloc(LEN, &pool), 0);
    ck_assert_int_eq(xfer_testdev_alloc(LEN, &stage), 0);
    ck_assert_int_eq(server_on(&g, pool), XFER_ERR_NOT_SUPPORTED);
    int n = 0;
    for (int i = 0; i < nlogged; i++)
        n += strstr(logged[i], "testdev pool of 1048576 bytes not "
                               "registrable") != NULL;
    ck_assert_int_eq(n, 1);
    event_base_free(g.base);
    uint8_t *host = calloc(LEN, 1);
    ck_assert_int_eq(server_on(&g, host), 0);
    ck_assert_int_eq(producer(&g, stage), XFER_ERR_NOT_SUPPORTED);
    ck_assert_int_eq(fake.dmabuf_calls, 0);
    xfer_rdma_stats st;
    ck_assert_int_eq(xfer_rdma_stats_get(g.rd, &st), 0);
    ck_assert_uint_eq(st.pools_device_refused, 1);
    teardown(&g);
    free(host);
    xfer_testdev_free(pool);
    xfer_testdev_free(stage);
    fake_end();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("rdma_devmem");
    TCase *tc = tcase_create("devmem");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rdma_devmem_dmabuf_path_taken);
    tcase_add_test(tc, test_rdma_devmem_peermem_fallback_logged);
    tcase_add_test(tc, test_rdma_devmem_neither_path_refused);
    tcase_add_test(tc, test_rdma_devmem_testdev_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
