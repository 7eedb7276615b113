/*
 * tests/api/test_teardown.c - every object that lives on an event_base,
 * deleted in every order its header allows, whoever owns the base, with
 * its connections live (issue 23, item 1).
 *
 * The reproduction of the issue: an engine that owns its loop
 * (xfer_engine_new without a base), the TCP transport on
 * xfer_engine_base(), a connection up, and then xfer_engine_del before
 * xfer_tcp_del, the order tcp.h gives.  On 84f8aad xfer_tcp_del freed its
 * events on the base the engine had just freed and the process died.
 *
 * Each test runs once per (owner, order): _i & 1 says who owns the base
 * (0: the engine, through xfer_engine_base; 1: the test, which frees it
 * last), _i >> 1 which goes first (0: the engine, 1: the object).  After
 * the engine is gone the base must still run and the object must still be
 * connected: that is what "the base outlives every object on it" means
 * when the engine owns it.  Real xferd processes on loopback
 * (tests/multiproc/mp.h) are the shards and the peers.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <netinet/in.h>

#include "mp.h"
#include "testutil.h"
#include "xfer/consumer.h"
#include "xfer/ctl.h"
#include "xfer/loop.h"
#include "xfer/metrics.h"
#include "xfer/server.h"
#include "xfer/tcp.h"
#include "xfer/tracefile.h"
#include "xfer/xfer.h"

#define OWNER(i) ((i) & 1)
#define ORDER(i) ((i) >> 1)
enum { OWN_ENGINE = 0, OWN_CALLER = 1 };
enum { ENGINE_FIRST = 0, OBJECT_FIRST = 1 };
#define NCASES 4
#define WAIT_MS 10000

/* The engine and the base it runs on, owned by one of the two. */
typedef struct prod {
    struct event_base *base; /* xfer_engine_base(e) */
    struct event_base *mine; /* the test's own base, or NULL */
    xfer_engine *e;
    volatile bool shut;
    volatile int done;
    int32_t status;
} prod;

static void prod_new(prod *p, int owner, xfer_trace_sink trace)
{
    memset(p, 0, sizeof *p);
    signal(SIGPIPE, SIG_IGN);
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    if (owner == OWN_CALLER) {
        p->mine = event_base_new();
        ck_assert_ptr_nonnull(p->mine);
        ec.base = p->mine;
    }
    ec.core.trace = trace;
    ck_assert_int_eq(xfer_engine_new(&ec, &p->e), 0);
    p->base = xfer_engine_base(p->e);
    ck_assert_ptr_nonnull(p->base);
    if (owner == OWN_CALLER)
        ck_assert_ptr_eq(p->base, p->mine);
}

static void on_shut(void *ud)
{
    ((prod *)ud)->shut = true;
}

/* The precondition of xfer_engine_del (xfer.h): shutdown completed. */
static void prod_shutdown(prod *p)
{
    ck_assert_int_eq(xfer_engine_shutdown(p->e, on_shut, p), 0);
    ck_assert(mp_run_until(p->base, &p->shut, WAIT_MS));
}

/* The engine is gone and something still lives on its base: the base
 * must still run (on 84f8aad it was freed with an engine that owned it). */
static void base_still_runs(prod *p)
{
    ck_assert_int_ge(event_base_loop(p->base, EVLOOP_NONBLOCK), 0);
}

/* The caller's base goes last, after every object on it. */
static void base_done(prod *p)
{
    if (p->mine)
        event_base_free(p->mine);
}

static void on_complete(void *ud, const xfer_result *res)
{
    prod *p = ud;
    p->status = res->status;
    p->done++;
}

static bool got_done(void *ud)
{
    return ((prod *)ud)->done > 0;
}

/* One transfer of 4 KiB per shard of group g, which must succeed: ops
 * have run on every connection before the teardown. */
static void one_transfer(prod *p, uint32_t g, uint16_t nshards)
{
    static uint8_t staging[XFER_MAX_SHARDS * 4096];
    static uint64_t next_id = 1;
    uint32_t pool;
    ck_assert_int_eq(
        xfer_engine_register_pool(p->e, staging, sizeof staging, &pool), 0);
    xfer_slice sl[XFER_MAX_SHARDS];
    for (uint16_t k = 0; k < nshards; k++)
        sl[k] = (xfer_slice){.off = (uint64_t)k * 4096, .len = 4096};
    xfer_transfer_desc d = {.id = next_id++, .group = g, .pool = pool,
                            .nslices = nshards, .slices = sl,
                            .timeout_ns = 5000000000ull};
    p->done = 0;
    ck_assert_int_eq(xfer_engine_submit(p->e, &d, on_complete, p), 0);
    ck_assert(mp_run_while(p->base, got_done, p, WAIT_MS));
    ck_assert_int_eq(p->status, 0);
    ck_assert_int_eq(p->done, 1);
}

/* xferd serving shard `shard` on an ephemeral port; --consume takes and
 * releases every READY at once, so its pool is empty after each transfer. */
static void start_xferd(mp_proc *d, uint16_t shard, char *addr, size_t cap)
{
    char s[8];
    snprintf(s, sizeof s, "%u", (unsigned)shard);
    const char *args[] = {"--shards", s, "--pool", "1M", "--consume",
                          "--quiet", NULL};
    ck_assert_int_eq(mp_xferd(d, 0, args), 0);
    snprintf(addr, cap, "127.0.0.1:%u", (unsigned)d->port);
}

typedef struct tcp_wait {
    xfer_tcp *t;
    uint16_t n;
} tcp_wait;

static bool tcp_up(void *ud)
{
    const tcp_wait *w = ud;
    for (uint16_t k = 0; k < w->n; k++)
        if (!xfer_tcp_connected(w->t, k))
            return false;
    return true;
}

static xfer_tcp *tcp_on(struct event_base *base, const char *const *addrs,
                        uint16_t n)
{
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = n;
    tc.addrs = addrs;
    xfer_tcp *t = NULL;
    ck_assert_int_eq(xfer_tcp_new(base, &tc, &t), 0);
    tcp_wait w = {t, n};
    ck_assert(mp_run_while(base, tcp_up, &w, WAIT_MS));
    return t;
}

/* ------------------------------------------------------------------ */
/* tcp: the reproduction of issue 23 item 1, and the other order       */
/* ------------------------------------------------------------------ */

START_TEST(test_teardown_tcp_live_connection)
{
    mp_proc d;
    char addr[32];
    start_xferd(&d, 0, addr, sizeof addr);
    const char *addrs[] = {addr};
    prod p;
    prod_new(&p, OWNER(_i), (xfer_trace_sink){0});
    xfer_tcp *t = tcp_on(p.base, addrs, 1);
    uint32_t g;
    ck_assert_int_eq(xfer_engine_add_group(p.e, xfer_tcp_transport(t), &g),
                     0);
    one_transfer(&p, g, 1);
    prod_shutdown(&p);
    if (ORDER(_i) == ENGINE_FIRST) {
        xfer_engine_del(p.e); /* the order tcp.h gives */
        base_still_runs(&p);
        ck_assert(xfer_tcp_connected(t, 0));
        xfer_tcp_del(t);
    } else {
        /* Deleted while attached: freed when the engine detaches it. */
        xfer_tcp_del(t);
        xfer_engine_del(p.e);
    }
    base_done(&p);
    xfer_wire_status st;
    ck_assert_int_eq(mp_wait_pool_free(d.port, WAIT_MS, &st), 0);
    mp_kill(&d, SIGKILL);
}
END_TEST

/* An attached transport deleted while the engine still runs transfers:
 * the free waits for the engine's detach, so the engine keeps a working
 * transport until xfer_engine_del (tcp.h). */
START_TEST(test_teardown_tcp_del_while_attached_keeps_engine_working)
{
    mp_proc d;
    char addr[32];
    start_xferd(&d, 0, addr, sizeof addr);
    const char *addrs[] = {addr};
    prod p;
    prod_new(&p, OWNER(_i), (xfer_trace_sink){0});
    xfer_tcp *t = tcp_on(p.base, addrs, 1);
    uint32_t g;
    ck_assert_int_eq(xfer_engine_add_group(p.e, xfer_tcp_transport(t), &g),
                     0);
    xfer_tcp_del(t);
    one_transfer(&p, g, 1);
    prod_shutdown(&p);
    xfer_engine_del(p.e);
    base_done(&p);
    xfer_wire_status st;
    ck_assert_int_eq(mp_wait_pool_free(d.port, WAIT_MS, &st), 0);
    mp_kill(&d, SIGKILL);
}
END_TEST

/* ------------------------------------------------------------------ */
/* loop transport, with a tracefile as the engine's trace sink         */
/* ------------------------------------------------------------------ */

START_TEST(test_teardown_loop_and_tracefile)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/xfer-teardown-%d.trace", getpid());
    xfer_tracefile *tf = NULL;
    ck_assert_int_eq(xfer_tracefile_open(path, NULL, &tf), 0);
    prod p;
    prod_new(&p, OWNER(_i), xfer_tracefile_sink(tf));
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = 2;
    lc.shard.pool_bytes = 1 << 20;
    xfer_loop *l = NULL;
    ck_assert_int_eq(xfer_loop_new(p.base, &lc, &l), 0);
    uint32_t g;
    ck_assert_int_eq(xfer_engine_add_group(p.e, xfer_loop_transport(l), &g),
                     0);
    one_transfer(&p, g, 2);
    prod_shutdown(&p);
    if (ORDER(_i) == ENGINE_FIRST) {
        xfer_engine_del(p.e);
        base_still_runs(&p);
        xfer_loop_del(l);
    } else {
        xfer_loop_del(l); /* attached: freed at the engine's detach */
        xfer_engine_del(p.e);
    }
    base_done(&p);
    /* tracefile.h: close only after every emitter is gone (the one order
     * there is); the records of the transfer are all in. */
    ck_assert_uint_gt(xfer_tracefile_records(tf), 0);
    ck_assert_int_eq(xfer_tracefile_close(tf), 0);
    unlink(path);
}
END_TEST

/* ------------------------------------------------------------------ */
/* consumer: links up to real xferd shards                              */
/* ------------------------------------------------------------------ */

static void c_avail(void *ud, uint64_t id, uint32_t attempt,
                    const xfer_region *regions, uint16_t nregions)
{
    (void)ud;
    (void)id;
    (void)attempt;
    (void)regions;
    (void)nregions;
}

static void c_unavail(void *ud, uint64_t id, int32_t reason, uint64_t shards)
{
    (void)ud;
    (void)id;
    (void)reason;
    (void)shards;
}

typedef struct cons_wait {
    xfer_consumer *c;
    uint16_t n;
} cons_wait;

static bool cons_up(void *ud)
{
    const cons_wait *w = ud;
    for (uint16_t k = 0; k < w->n; k++)
        if (!xfer_consumer_connected(w->c, k))
            return false;
    return true;
}

START_TEST(test_teardown_consumer_live_links)
{
    mp_proc d[2];
    char a0[32], a1[32];
    start_xferd(&d[0], 0, a0, sizeof a0);
    start_xferd(&d[1], 1, a1, sizeof a1);
    const char *addrs[] = {a0, a1};
    prod p;
    prod_new(&p, OWNER(_i), (xfer_trace_sink){0});
    xfer_consumer_config cc;
    xfer_consumer_config_default(&cc);
    cc.base = p.base;
    cc.nshards = 2;
    cc.addrs = addrs;
    cc.available = c_avail;
    cc.unavailable = c_unavail;
    xfer_consumer *c = NULL;
    ck_assert_int_eq(xfer_consumer_new(&cc, &c), 0);
    cons_wait w = {c, 2};
    ck_assert(mp_run_while(p.base, cons_up, &w, WAIT_MS));
    prod_shutdown(&p);
    if (ORDER(_i) == ENGINE_FIRST) {
        xfer_engine_del(p.e);
        base_still_runs(&p);
        ck_assert(xfer_consumer_connected(c, 0));
        ck_assert(xfer_consumer_connected(c, 1));
        xfer_consumer_del(c);
    } else {
        xfer_consumer_del(c);
        xfer_engine_del(p.e);
    }
    base_done(&p);
    mp_kill(&d[0], SIGKILL);
    mp_kill(&d[1], SIGKILL);
}
END_TEST

/* ------------------------------------------------------------------ */
/* server: a client connected to it                                     */
/* ------------------------------------------------------------------ */

START_TEST(test_teardown_server_connected_client)
{
    prod p;
    prod_new(&p, OWNER(_i), (xfer_trace_sink){0});
    static uint8_t mem[1 << 20];
    xfer_server_shard sh = {.index = 0, .base = mem, .len = sizeof mem};
    xfer_server_config sc;
    xfer_server_config_default(&sc);
    sc.base = p.base;
    sc.nshards = 1;
    sc.shards = &sh;
    xfer_server *s = NULL;
    ck_assert_int_eq(xfer_server_new(&sc, &s), 0);
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u",
             (unsigned)xfer_server_port(s));
    const char *addrs[] = {addr};
    /* The client: a TCP transport on the same base, never attached. */
    xfer_tcp *t = tcp_on(p.base, addrs, 1);
    xfer_server_stats st;
    ck_assert_int_eq(xfer_server_stats_get(s, 0, &st), 0);
    ck_assert_uint_eq(st.conns, 1);
    prod_shutdown(&p);
    if (ORDER(_i) == ENGINE_FIRST) {
        xfer_engine_del(p.e);
        base_still_runs(&p);
        ck_assert(xfer_tcp_connected(t, 0));
        xfer_server_del(s);
        xfer_tcp_del(t);
    } else {
        xfer_server_del(s);
        xfer_tcp_del(t);
        xfer_engine_del(p.e);
    }
    base_done(&p);
}
END_TEST

/* ------------------------------------------------------------------ */
/* metrics: a scraper connected (keep-alive) when the teardown comes    */
/* ------------------------------------------------------------------ */

typedef struct scrape {
    int fd;
    char buf[4096];
    size_t n;
} scrape;

static bool scrape_answered(void *ud)
{
    scrape *sc = ud;
    ssize_t r = recv(sc->fd, sc->buf + sc->n, sizeof sc->buf - 1 - sc->n,
                     MSG_DONTWAIT);
    if (r > 0)
        sc->n += (size_t)r;
    sc->buf[sc->n] = 0;
    return strstr(sc->buf, "\r\n\r\n") != NULL;
}

START_TEST(test_teardown_metrics_connected_scraper)
{
    prod p;
    prod_new(&p, OWNER(_i), (xfer_trace_sink){0});
    xfer_metrics_config mc;
    xfer_metrics_config_default(&mc);
    mc.base = p.base;
    xfer_metrics *m = NULL;
    ck_assert_int_eq(xfer_metrics_new(&mc, &m), 0);
    ck_assert_int_eq(xfer_metrics_listen(m, "127.0.0.1", 0), 0);
    scrape sc = {.fd = -1};
    sc.fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(sc.fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(xfer_metrics_port(m)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(connect(sc.fd, (struct sockaddr *)&sa, sizeof sa), 0);
    const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    ck_assert_int_eq(send(sc.fd, req, sizeof req - 1, 0),
                     (ssize_t)(sizeof req - 1));
    ck_assert(mp_run_while(p.base, scrape_answered, &sc, WAIT_MS));
    ck_assert(strncmp(sc.buf, "HTTP/1.1 200", 12) == 0);
    /* The scraper keeps its connection open (HTTP/1.1 keep-alive). */
    prod_shutdown(&p);
    if (ORDER(_i) == ENGINE_FIRST) {
        xfer_engine_del(p.e);
        base_still_runs(&p);
        xfer_metrics_del(m);
    } else {
        xfer_metrics_del(m);
        xfer_engine_del(p.e);
    }
    base_done(&p);
    /* The delete closed the scraper's connection: it reads end of file
     * (what was left of the answer first). */
    struct timeval tv = {5, 0};
    setsockopt(sc.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char b[4096];
    ssize_t r;
    while ((r = recv(sc.fd, b, sizeof b, 0)) > 0)
        ;
    ck_assert_int_eq(r, 0);
    close(sc.fd);
}
END_TEST

/* ------------------------------------------------------------------ */
/* ctl: a client whose reply is still being written                     */
/* ------------------------------------------------------------------ */

/* A reply far larger than a Unix socket's buffer, so the connection is
 * still being answered when the teardown comes. */
static void big_snapshot(void *ud, xfer_ctl_reply *rep)
{
    (void)ud;
    for (uint64_t id = 1; id <= 20000; id++)
        (void)xfer_ctl_put_readiness(rep, id, 1, "EXPECTED", 4, 0, 15, 0,
                                     0);
}

static bool ctl_served(void *ud)
{
    return xfer_ctl_served(ud) > 0;
}

START_TEST(test_teardown_ctl_client_being_answered)
{
    prod p;
    prod_new(&p, OWNER(_i), (xfer_trace_sink){0});
    char path[64];
    snprintf(path, sizeof path, "/tmp/xfer-teardown-%d.ctl", getpid());
    unlink(path);
    xfer_ctl *ctl = NULL;
    ck_assert_int_eq(xfer_ctl_open(p.base, path, big_snapshot, NULL, &ctl),
                     0);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert(mp_run_while(p.base, ctl_served, ctl, WAIT_MS));
    prod_shutdown(&p);
    if (ORDER(_i) == ENGINE_FIRST) {
        xfer_engine_del(p.e);
        base_still_runs(&p);
        xfer_ctl_close(ctl);
    } else {
        xfer_ctl_close(ctl);
        xfer_engine_del(p.e);
    }
    base_done(&p);
    /* The close removed the socket file and dropped the client. */
    ck_assert_int_ne(access(path, F_OK), 0);
    close(fd);
}
END_TEST

static int ctl_client(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static bool ctl_served2(void *ud)
{
    return xfer_ctl_served(ud) >= 2;
}

/* The engine's own control socket borrows the engine until the ctl is
 * closed or the engine deleted, whichever comes first (ctl.h): in the
 * engine-first order the ctl still answers a new client, with no
 * transfer, and never reads the freed engine. */
START_TEST(test_teardown_engine_ctl_either_order)
{
    prod p;
    prod_new(&p, OWNER(_i), (xfer_trace_sink){0});
    char path[64];
    snprintf(path, sizeof path, "/tmp/xfer-teardown-e%d.ctl", getpid());
    unlink(path);
    xfer_ctl *ctl = NULL;
    ck_assert_int_eq(xfer_engine_ctl_open(p.e, path, &ctl), 0);
    int fd = ctl_client(path);
    ck_assert(mp_run_while(p.base, ctl_served, ctl, WAIT_MS));
    prod_shutdown(&p);
    if (ORDER(_i) == ENGINE_FIRST) {
        xfer_engine_del(p.e);
        int fd2 = ctl_client(path);
        ck_assert(mp_run_while(p.base, ctl_served2, ctl, WAIT_MS));
        close(fd2);
        xfer_ctl_close(ctl);
    } else {
        xfer_ctl_close(ctl);
        xfer_engine_del(p.e);
    }
    base_done(&p);
    ck_assert_int_ne(access(path, F_OK), 0);
    close(fd);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Everything at once on one engine-owned base, the engine first: the    */
/* base goes with the last object, whichever it is.                     */
/* ------------------------------------------------------------------ */

START_TEST(test_teardown_engine_owned_base_freed_by_last_object)
{
    mp_proc d;
    char addr[32];
    start_xferd(&d, 0, addr, sizeof addr);
    const char *addrs[] = {addr};
    prod p;
    prod_new(&p, OWN_ENGINE, (xfer_trace_sink){0});
    xfer_tcp *t = tcp_on(p.base, addrs, 1);
    uint32_t g;
    ck_assert_int_eq(xfer_engine_add_group(p.e, xfer_tcp_transport(t), &g),
                     0);
    xfer_metrics_config mc;
    xfer_metrics_config_default(&mc);
    mc.base = p.base;
    xfer_metrics *m = NULL;
    ck_assert_int_eq(xfer_metrics_new(&mc, &m), 0);
    ck_assert_int_eq(xfer_metrics_listen(m, "127.0.0.1", 0), 0);
    one_transfer(&p, g, 1);
    prod_shutdown(&p);
    xfer_engine_del(p.e);
    /* _i picks which object is deleted last (and frees the base). */
    if (_i == 0) {
        xfer_metrics_del(m);
        base_still_runs(&p);
        ck_assert(xfer_tcp_connected(t, 0));
        xfer_tcp_del(t);
    } else {
        xfer_tcp_del(t);
        base_still_runs(&p);
        xfer_metrics_del(m);
    }
    xfer_wire_status st;
    ck_assert_int_eq(mp_wait_pool_free(d.port, WAIT_MS, &st), 0);
    mp_kill(&d, SIGKILL);
}
END_TEST

/* A second engine on the first one's own base, and nothing else on it:
 * the first may be deleted while the second still runs there (_i 0: the
 * second's own reference keeps the base), or after it (_i 1). */
START_TEST(test_teardown_engine_on_another_engines_base)
{
    prod a;
    prod_new(&a, OWN_ENGINE, (xfer_trace_sink){0});
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = a.base;
    prod b = {.base = a.base};
    ck_assert_int_eq(xfer_engine_new(&ec, &b.e), 0);
    ck_assert_ptr_eq(xfer_engine_base(b.e), a.base);
    prod_shutdown(&a);
    if (_i == 0) {
        xfer_engine_del(a.e);
        prod_shutdown(&b); /* runs the base a made */
        xfer_engine_del(b.e);
    } else {
        prod_shutdown(&b);
        xfer_engine_del(b.e);
        base_still_runs(&a);
        xfer_engine_del(a.e);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("api_teardown");
    TCase *tc = tcase_create("orders");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_teardown_tcp_live_connection, 0, NCASES);
    tcase_add_loop_test(
        tc, test_teardown_tcp_del_while_attached_keeps_engine_working, 0, 2);
    tcase_add_loop_test(tc, test_teardown_loop_and_tracefile, 0, NCASES);
    tcase_add_loop_test(tc, test_teardown_consumer_live_links, 0, NCASES);
    tcase_add_loop_test(tc, test_teardown_server_connected_client, 0,
                        NCASES);
    tcase_add_loop_test(tc, test_teardown_metrics_connected_scraper, 0,
                        NCASES);
    tcase_add_loop_test(tc, test_teardown_ctl_client_being_answered, 0,
                        NCASES);
    tcase_add_loop_test(tc, test_teardown_engine_ctl_either_order, 0,
                        NCASES);
    tcase_add_loop_test(tc,
                        test_teardown_engine_owned_base_freed_by_last_object,
                        0, 2);
    tcase_add_loop_test(tc, test_teardown_engine_on_another_engines_base, 0,
                        2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
