/*
 * tests/api/test_server_dir.c - an embedded shard server (xfer/server.h,
 * a program serving its own memory) that registers itself in a group in
 * etcd through the library (xfer_server_register), against a real etcd
 * started here on loopback, with both owners of the event base.
 *
 * test_server_dir_found_and_drain_leaves_first: a producer created from
 * the group name finds the server at the port it bound and moves
 * transfers through it; a drain deletes the entries before the listener
 * closes: at every turn of the loop, a closed listener implies the entry
 * is gone from etcd already, and right after xfer_server_drain returned
 * the server still accepts.
 * test_server_dir_del_leaves_entry_to_lease: xfer_server_del without a
 * drain (a crash, for the directory) leaves the entry in etcd, until its
 * 2 s lease expired.
 * test_server_dir_register_errors: a second registration, a wildcard
 * bound address without an advertised one, a bad group name, a name
 * whose HELLO group is not the server's, and a registration after a
 * drain are refused.
 *
 * _i & 1 says who owns the base: 0 the engine (xfer_engine_base; the
 * server holds it, and the engine is deleted first), 1 the test.
 */
#define _GNU_SOURCE /* usleep */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "etcd.h"
#include "mp.h"
#include "testutil.h"
#include "xfer/dir.h"
#include "xfer/server.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

#define NSH 2
#define POOL (1u << 20)
#define SLICE 4096
#define WAIT_MS 15000
#define OWN_ENGINE 0

typedef struct rig {
    int owner;
    etcd_cluster etcd;
    struct event_base *mine, *base;
    xfer_engine *e;
    xfer_server *srv;
    uint8_t *pools[NSH];
    xfer_dir *dir;     /* the producer's */
    xfer_tcp *tcp;
    uint32_t group, pool;
    uint8_t staging[NSH * SLICE];
    int done, ok;
    volatile bool shut, drained_cb;
    bool drained;
} rig;

static void on_log(void *ud, const char *line)
{
    fprintf(stderr, "%s: %s\n", (const char *)ud, line);
}

static void dir_config(const rig *g, xfer_dir_config *dc)
{
    xfer_dir_config_default(dc);
    dc->endpoints = g->etcd.endpoints;
    dc->lease_ttl_s = 2;
    dc->request_timeout_ns = 1000000000ull;
    dc->reconnect_min_ns = 50000000ull;
    dc->reconnect_max_ns = 500000000ull;
}

/* etcd, the engine (and so the base), the server on addr:0 serving the
 * HELLO group of `group`'s name. */
static void rig_new(rig *g, int owner, const char *addr, const char *group)
{
    memset(g, 0, sizeof *g);
    signal(SIGPIPE, SIG_IGN);
    g->owner = owner;
    ck_assert_int_eq(etcd_start(&g->etcd, 1), 0);
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    if (owner != OWN_ENGINE) {
        g->mine = event_base_new();
        ck_assert_ptr_nonnull(g->mine);
        ec.base = g->mine;
    }
    ec.core.default_deadline_ns = 5000000000ull;
    ck_assert_int_eq(xfer_engine_new(&ec, &g->e), 0);
    g->base = xfer_engine_base(g->e);
    xfer_server_shard sh[NSH];
    for (uint16_t k = 0; k < NSH; k++) {
        g->pools[k] = calloc(1, POOL);
        sh[k] = (xfer_server_shard){.index = k, .base = g->pools[k],
                                    .len = POOL};
    }
    xfer_server_config sc;
    xfer_server_config_default(&sc);
    sc.base = g->base;
    sc.addr = addr;
    sc.group = xfer_dir_group_id(group);
    sc.insecure = true; /* a wildcard address in the errors test */
    sc.nshards = NSH;
    sc.shards = sh;
    sc.consume = true;
    sc.lease_ttl_ns = 2000000000ull;
    sc.log = on_log;
    sc.log_ud = "server";
    ck_assert_int_eq(xfer_server_new(&sc, &g->srv), 0);
}

/* A producer on the same engine, created from the group name. */
static void producer_new(rig *g, const char *group)
{
    xfer_dir_config dc;
    dir_config(g, &dc);
    dc.log = on_log;
    dc.log_ud = "producer dir";
    ck_assert_int_eq(xfer_dir_new(g->base, &dc, &g->dir), 0);
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = NSH;
    tc.dir = g->dir;
    tc.dir_group = group;
    tc.reconnect_max_ns = 200000000ull;
    ck_assert_int_eq(xfer_tcp_new(g->base, &tc, &g->tcp), 0);
    ck_assert_int_eq(xfer_engine_add_group(g->e, xfer_tcp_transport(g->tcp),
                                           &g->group), 0);
    ck_assert_int_eq(xfer_engine_register_pool(g->e, g->staging,
                                               sizeof g->staging, &g->pool),
                     0);
}

static bool all_connected(void *ud)
{
    rig *g = ud;
    for (uint16_t k = 0; k < NSH; k++)
        if (!xfer_tcp_connected(g->tcp, k))
            return false;
    return true;
}

static bool shard0_gone(void *ud)
{
    return xfer_tcp_gone(((rig *)ud)->tcp, 0);
}

static void on_done(void *ud, const xfer_result *r)
{
    rig *g = ud;
    g->done++;
    g->ok += r->status == 0;
}

/* Runs the loop for the whole timeout (mp_run_while runs while false). */
static bool never(void *ud)
{
    return false;
}

static bool all_done(void *ud)
{
    return ((rig *)ud)->done == 4;
}

static void on_shut(void *ud)
{
    ((rig *)ud)->shut = true;
}

/* The engine first (the server holds an engine-owned base), then the
 * transport and its directory, the server, the base.  The producer's
 * directory borrows the base: with an engine-owned base, the server
 * (still alive here) keeps it until the directory is gone. */
static void rig_del(rig *g)
{
    if (g->e) {
        ck_assert_int_eq(xfer_engine_shutdown(g->e, on_shut, g), 0);
        ck_assert(mp_run_until(g->base, &g->shut, WAIT_MS));
        xfer_engine_del(g->e);
    }
    xfer_tcp_del(g->tcp);
    xfer_dir_del(g->dir);
    xfer_server_del(g->srv);
    if (g->mine) {
        event_base_loop(g->mine, EVLOOP_NONBLOCK);
        event_base_free(g->mine);
    }
    for (uint16_t k = 0; k < NSH; k++)
        free(g->pools[k]);
    etcd_stop(&g->etcd);
}

/* Is key `b64` in etcd now?  (A blocking range read.) */
static bool in_etcd(const rig *g, const char *b64)
{
    char body[128], out[4096];
    snprintf(body, sizeof body, "{\"key\":\"%s\"}", b64);
    ck_assert_int_eq(etcd_post(&g->etcd, 0, "/v3/kv/range", body, out,
                               sizeof out), 200);
    return strstr(out, "\"kvs\"") != NULL;
}

/* Does the server's port accept a connection now (its listener open)? */
static bool accepting(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    bool ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

static void on_drained(void *ud, bool drained)
{
    rig *g = ud;
    g->drained = drained;
    g->drained_cb = true;
}

#define KEY_EMB_0 "L3hmZXIvZ3JvdXBzL2VtYi8w"      /* /xfer/groups/emb/0 */
#define KEY_EMB2_0 "L3hmZXIvZ3JvdXBzL2VtYjIvMA==" /* /xfer/groups/emb2/0 */

START_TEST(test_server_dir_found_and_drain_leaves_first)
{
    rig g;
    rig_new(&g, _i & 1, "127.0.0.1", "emb");
    xfer_dir_config dc;
    dir_config(&g, &dc);
    ck_assert_ptr_null(xfer_server_dir(g.srv));
    ck_assert_int_eq(xfer_server_register(g.srv, &dc, "emb", NULL, 0), 0);
    ck_assert_ptr_nonnull(xfer_server_dir(g.srv));
    producer_new(&g, "emb");
    ck_assert(mp_run_while(g.base, all_connected, &g, WAIT_MS));
    uint16_t port = xfer_server_port(g.srv);
    for (uint16_t k = 0; k < NSH; k++) {
        xfer_dir_entry e;
        ck_assert_int_eq(xfer_dir_member(g.dir, "emb", k, &e), 0);
        ck_assert_uint_eq(e.port, port);
        ck_assert_str_eq(e.addr, "127.0.0.1");
        ck_assert_uint_eq(e.transports, XFER_DIR_TCP);
        ck_assert_uint_gt(e.epoch, 0);
    }
    xfer_dir_state st;
    ck_assert_int_eq(xfer_dir_state_get(xfer_server_dir(g.srv), &st), 0);
    ck_assert_uint_eq(st.registered, NSH);
    xfer_slice sl[NSH];
    for (uint16_t k = 0; k < NSH; k++)
        sl[k] = (xfer_slice){.off = k * SLICE, .len = SLICE};
    for (uint64_t id = 1; id <= 4; id++) {
        xfer_transfer_desc d = {.id = id, .group = g.group, .pool = g.pool,
                                .nslices = NSH, .slices = sl};
        ck_assert_int_eq(xfer_engine_submit(g.e, &d, on_done, &g), 0);
    }
    ck_assert(mp_run_while(g.base, all_done, &g, WAIT_MS));
    ck_assert_int_eq(g.ok, 4);
    /* The drain: the entries leave etcd, then the listener closes. */
    ck_assert(in_etcd(&g, KEY_EMB_0));
    ck_assert_int_eq(xfer_server_drain(g.srv, on_drained, &g), 0);
    ck_assert_int_eq(xfer_server_drain(g.srv, on_drained, &g),
                     XFER_ERR_STATE);
    ck_assert(accepting(port)); /* still: etcd has not answered yet */
    bool closed = false;
    for (int turn = 0; turn < 100000 && !g.drained_cb; turn++) {
        event_base_loop(g.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        if (!closed && !accepting(port)) {
            closed = true;
            ck_assert(!in_etcd(&g, KEY_EMB_0)); /* left before closing */
        }
        if (!closed)
            usleep(1000);
    }
    ck_assert(g.drained_cb);
    ck_assert(g.drained);
    ck_assert(closed);
    ck_assert(!in_etcd(&g, KEY_EMB_0));
    /* The producer sees the shard gone through its watch. */
    ck_assert(mp_run_while(g.base, shard0_gone, &g, WAIT_MS));
    ck_assert_int_eq(xfer_dir_state_get(xfer_server_dir(g.srv), &st), 0);
    ck_assert_uint_eq(st.registered, 0);
    rig_del(&g);
}
END_TEST

START_TEST(test_server_dir_del_leaves_entry_to_lease)
{
    rig g;
    rig_new(&g, _i & 1, "127.0.0.1", "emb2");
    xfer_dir_config dc;
    dir_config(&g, &dc);
    ck_assert_int_eq(xfer_server_register(g.srv, &dc, "emb2", NULL, 0), 0);
    /* No producer here: its directory would borrow a base that, owned by
     * the engine, goes with the server and the engine. */
    bool in = false;
    for (int i = 0; i < 1000 && !in; i++) {
        mp_run_while(g.base, never, NULL, 10);
        in = in_etcd(&g, KEY_EMB2_0);
    }
    ck_assert(in);
    uint64_t t0 = mp_now_ms();
    xfer_server_del(g.srv);
    g.srv = NULL;
    ck_assert(in_etcd(&g, KEY_EMB2_0)); /* no goodbye: the lease decides */
    for (int i = 0; i < 1000 && in; i++) {
        mp_run_while(g.base, never, NULL, 10);
        in = in_etcd(&g, KEY_EMB2_0);
    }
    ck_assert(!in);
    fprintf(stderr, "entry gone %llu ms after del (lease 2000 ms)\n",
            (unsigned long long)(mp_now_ms() - t0));
    rig_del(&g);
}
END_TEST

START_TEST(test_server_dir_register_errors)
{
    rig g;
    rig_new(&g, _i & 1, "0.0.0.0", "emb3");
    xfer_dir_config dc;
    dir_config(&g, &dc);
    /* A wildcard bind is no address to dial: advertise one. */
    ck_assert_int_eq(xfer_server_register(g.srv, &dc, "emb3", NULL, 0),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_server_register(g.srv, &dc, "bad group!",
                                          "127.0.0.1", 0),
                     XFER_ERR_INVALID_ARG);
    /* A name whose HELLO group is not the server's: nobody created from
     * it could connect. */
    ck_assert_int_eq(xfer_server_register(g.srv, &dc, "emb4", "127.0.0.1",
                                          0),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_server_register(NULL, &dc, "emb3", NULL, 0),
                     XFER_ERR_INVALID_ARG);
    /* each refusal for its own reason: with an address to advertise, so
     * the wildcard bind is not what refuses them (issue 30's
     * server_dir.c:33 mutant let a NULL config through unseen) */
    ck_assert_int_eq(xfer_server_register(g.srv, NULL, "emb3", "127.0.0.1",
                                          0),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_server_register(g.srv, &dc, NULL, "127.0.0.1", 0),
                     XFER_ERR_INVALID_ARG);
    ck_assert_ptr_null(xfer_server_dir(g.srv));
    ck_assert_int_eq(xfer_server_register(g.srv, &dc, "emb3", "127.0.0.1",
                                          7),
                     0);
    ck_assert_int_eq(xfer_server_register(g.srv, &dc, "emb3", "127.0.0.1",
                                          8),
                     XFER_ERR_STATE);
    ck_assert_int_eq(xfer_server_drain(g.srv, on_drained, &g), 0);
    ck_assert(mp_run_until(g.base, &g.drained_cb, WAIT_MS));
    ck_assert_int_eq(xfer_server_register(g.srv, &dc, "emb3", "127.0.0.1",
                                          9),
                     XFER_ERR_STATE);
    rig_del(&g);
}
END_TEST

int main(void)
{
    int skip = etcd_required("test_api_server_dir");
    if (skip)
        return skip;
    Suite *s = suite_create("server_dir");
    TCase *tc = tcase_create("server_dir");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_server_dir_found_and_drain_leaves_first, 0,
                        2);
    tcase_add_loop_test(tc, test_server_dir_del_leaves_entry_to_lease, 0, 2);
    tcase_add_loop_test(tc, test_server_dir_register_errors, 0, 2);
    suite_add_tcase(s, tc);
    int rc = tu_run(s);
    mp_kill_all();
    return rc;
}
