/*
 * tests/multiproc/test_dir.c - the directory of groups (xfer/dir.h)
 * against a real etcd on loopback ports (etcd.h).
 *
 * test_dir_register_resolve: two shards registered by one directory are
 * reported to a watcher of the group with their address, port, transports
 * and epoch; a drain (unregister) reports both gone.
 * test_dir_lease_expiry: a registering directory freed without
 * unregistering (a crash) is reported gone once its lease (2 s) expired,
 * within the TTL plus one second.
 * test_dir_epoch: an entry with a lower epoch than the known one is never
 * used; a higher one (a restart on another port) replaces it.
 * test_dir_hostile: malformed and hostile entries are ignored with one log
 * line each, and a good entry among them is still reported.
 * test_dir_etcd_down: etcd stopped for a while: the member stays known
 * (nothing is reported gone), the state says disconnected; after etcd
 * comes back the registration is kept alive (or put again) and a change
 * made after the restart is seen.
 * test_dir_auth: with etcd's authentication on, a directory with the
 * user's password registers and watches; one without credentials never
 * gets its entry into etcd.
 * test_dir_tls: etcd serving clients over https: a directory given the
 * CA registers and watches through TLS; one given another CA (the
 * server's certificate does not verify) never connects.
 * test_dir_cluster_failover: a three-member cluster with the member in
 * use killed: the registration survives past its TTL through the other
 * members, and a watcher still sees changes.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "etcd.h"
#include "mp.h"
#include "testutil.h"
#include "xfer/dir.h"
#include "xfer/metrics.h"

typedef struct seen {
    int reports[64], gones[64];
    bool have[64];
    xfer_dir_entry e[64];
    int log_lines;
    uint64_t gone_at_ms[64];
} seen;

static void on_member(void *ud, const char *group, uint16_t shard,
                      const xfer_dir_entry *e)
{
    seen *s = ud;
    if (e) {
        s->reports[shard]++;
        s->have[shard] = true;
        s->e[shard] = *e;
    } else {
        s->gones[shard]++;
        s->have[shard] = false;
        s->gone_at_ms[shard] = mp_now_ms();
    }
}

static void on_log(void *ud, const char *line)
{
    seen *s = ud;
    s->log_lines++;
    fprintf(stderr, "log: %s\n", line);
}

static xfer_dir *dir_new(struct event_base *base, const char *eps,
                         uint32_t ttl, seen *logs)
{
    xfer_dir_config cfg;
    xfer_dir_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.lease_ttl_s = ttl;
    cfg.request_timeout_ns = 1000000000ull;
    cfg.reconnect_min_ns = 50000000ull;
    cfg.reconnect_max_ns = 500000000ull;
    cfg.log = logs ? on_log : NULL;
    cfg.log_ud = logs;
    xfer_dir *d = NULL;
    ck_assert_int_eq(xfer_dir_new(base, &cfg, &d), 0);
    return d;
}

static xfer_dir_entry entry(uint16_t shard, uint16_t port, uint64_t epoch)
{
    xfer_dir_entry e = {.shard = shard, .port = port,
                        .transports = XFER_DIR_TCP, .epoch = epoch};
    strcpy(e.addr, "127.0.0.1");
    return e;
}

typedef struct want {
    seen *s;
    int shard;
    uint16_t port;   /* 0: gone */
} want;

static bool is_wanted(void *ud)
{
    want *w = ud;
    if (w->port == 0)
        return !w->s->have[w->shard];
    return w->s->have[w->shard] && w->s->e[w->shard].port == w->port;
}

static bool wait_for(struct event_base *base, seen *s, int shard,
                     uint16_t port, int ms)
{
    want w = {s, shard, port};
    return mp_run_while(base, is_wanted, &w, ms) || is_wanted(&w);
}

static void run_ms(struct event_base *base, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
}

static volatile bool unreg_done;
static bool unreg_ok;
static void on_unreg(void *ud, bool ok)
{
    unreg_done = true;
    unreg_ok = ok;
}

START_TEST(test_dir_register_resolve)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    struct event_base *base = event_base_new();
    seen s = {0};
    xfer_dir *srv = dir_new(base, c.endpoints, 5, NULL);
    xfer_dir *cli = dir_new(base, c.endpoints, 5, &s);
    xfer_dir_entry e0 = entry(0, 7000, 11), e1 = entry(1, 7001, 12);
    e1.transports = XFER_DIR_TCP | XFER_DIR_RDMA;
    ck_assert_int_eq(xfer_dir_register(srv, "g1", &e0), 0);
    ck_assert_int_eq(xfer_dir_register(srv, "g1", &e1), 0);
    ck_assert_int_eq(xfer_dir_watch(cli, "g1", on_member, &s), 0);
    ck_assert_int_eq(xfer_dir_watch(cli, "g1", on_member, &s),
                     XFER_ERR_EXISTS);
    /* A second watcher of the group (another fn/ud) hears it too. */
    seen s2 = {0};
    ck_assert_int_eq(xfer_dir_watch(cli, "g1", on_member, &s2), 0);
    ck_assert(wait_for(base, &s, 0, 7000, 10000));
    ck_assert(wait_for(base, &s, 1, 7001, 10000));
    ck_assert(wait_for(base, &s2, 1, 7001, 10000));
    ck_assert_int_eq(xfer_dir_unwatch(cli, "g1", on_member, &s2), 0);
    ck_assert_int_eq(xfer_dir_unwatch(cli, "g1", on_member, &s2),
                     XFER_ERR_NOT_FOUND);
    ck_assert_str_eq(s.e[0].addr, "127.0.0.1");
    ck_assert_uint_eq(s.e[0].epoch, 11);
    ck_assert_uint_eq(s.e[1].transports, XFER_DIR_TCP | XFER_DIR_RDMA);
    xfer_dir_entry got;
    ck_assert_int_eq(xfer_dir_member(cli, "g1", 1, &got), 0);
    ck_assert_uint_eq(got.port, 7001);
    ck_assert_int_eq(xfer_dir_member(cli, "g1", 2, &got), XFER_ERR_NOT_FOUND);
    xfer_dir_state st;
    ck_assert_int_eq(xfer_dir_state_get(cli, &st), 0);
    ck_assert(st.connected);
    ck_assert_uint_eq(st.members, 2);
    ck_assert_int_gt(st.revision, 0);
    /* The state in the metrics exposition. */
    xfer_metrics_config mc;
    xfer_metrics_config_default(&mc);
    mc.base = base;
    xfer_metrics *m = NULL;
    ck_assert_int_eq(xfer_metrics_new(&mc, &m), 0);
    ck_assert_int_eq(xfer_metrics_add_dir(m, cli), 0);
    ck_assert_int_eq(xfer_metrics_add_dir(m, cli), XFER_ERR_EXISTS);
    static char text[1 << 16];
    ck_assert_uint_gt(xfer_metrics_render(m, text, sizeof text), 0);
    ck_assert_ptr_nonnull(strstr(text, "\nxfer_dir_members 2\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nxfer_dir_connected 1\n"));
    xfer_metrics_del(m);
    /* A drain: the entries go first, and the watcher hears it. */
    unreg_done = false;
    ck_assert_int_eq(xfer_dir_unregister(srv, on_unreg, NULL), 0);
    ck_assert(!unreg_done); /* never from inside the call */
    ck_assert(wait_for(base, &s, 0, 0, 10000));
    ck_assert(wait_for(base, &s, 1, 0, 10000));
    ck_assert(mp_run_until(base, &unreg_done, 10000) || unreg_done);
    ck_assert(unreg_ok);
    ck_assert_int_eq(s.gones[0], 1);
    ck_assert_int_eq(s.reports[0], 1);
    ck_assert_int_eq(s.log_lines, 0);
    xfer_dir_del(srv);
    xfer_dir_del(cli);
    event_base_free(base);
    etcd_stop(&c);
}
END_TEST

START_TEST(test_dir_lease_expiry)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    struct event_base *base = event_base_new();
    seen s = {0};
    xfer_dir *srv = dir_new(base, c.endpoints, 2, NULL);
    xfer_dir *cli = dir_new(base, c.endpoints, 2, &s);
    xfer_dir_entry e0 = entry(3, 7003, 1);
    ck_assert_int_eq(xfer_dir_register(srv, "crash", &e0), 0);
    ck_assert_int_eq(xfer_dir_watch(cli, "crash", on_member, &s), 0);
    ck_assert(wait_for(base, &s, 3, 7003, 10000));
    /* Kept alive well past its TTL. */
    run_ms(base, 3000);
    ck_assert(s.have[3]);
    /* The "crash": no unregister, no more keepalives. */
    uint64_t t0 = mp_now_ms();
    xfer_dir_del(srv);
    ck_assert(wait_for(base, &s, 3, 0, 10000));
    uint64_t took = s.gone_at_ms[3] - t0;
    fprintf(stderr, "lease expiry noticed after %llu ms (TTL 2000)\n",
            (unsigned long long)took);
    ck_assert_uint_le(took, 3000); /* the bound: TTL + 1 s */
    xfer_dir_del(cli);
    event_base_free(base);
    etcd_stop(&c);
}
END_TEST

START_TEST(test_dir_epoch)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    struct event_base *base = event_base_new();
    seen s = {0};
    xfer_dir *cli = dir_new(base, c.endpoints, 2, &s);
    ck_assert_int_eq(xfer_dir_watch(cli, "ep", on_member, &s), 0);
    xfer_dir *a = dir_new(base, c.endpoints, 2, NULL);
    xfer_dir_entry e = entry(0, 7100, 50);
    ck_assert_int_eq(xfer_dir_register(a, "ep", &e), 0);
    ck_assert(wait_for(base, &s, 0, 7100, 10000));
    /* The old server (epoch 40) comes back late and overwrites the key:
     * never used. */
    ck_assert_int_eq(etcd_put(&c, 0, "/xfer/groups/ep/0",
                              "{\"shard\":0,\"addr\":\"127.0.0.1\","
                              "\"port\":7099,\"transports\":1,\"epoch\":40}"),
                     0);
    run_ms(base, 500);
    ck_assert_uint_eq(s.e[0].port, 7100);
    ck_assert_int_eq(s.reports[0], 1);
    xfer_dir_state st;
    xfer_dir_state_get(cli, &st);
    ck_assert_uint_eq(st.stale_entries, 1);
    ck_assert_int_eq(s.log_lines, 1);
    /* A restart with a higher epoch on another port replaces it. */
    xfer_dir *b = dir_new(base, c.endpoints, 2, NULL);
    xfer_dir_entry e2 = entry(0, 7200, 60);
    ck_assert_int_eq(xfer_dir_register(b, "ep", &e2), 0);
    ck_assert(wait_for(base, &s, 0, 7200, 10000));
    ck_assert_uint_eq(s.e[0].epoch, 60);
    /* The old lease expiring does not take the new entry away. */
    xfer_dir_del(a);
    run_ms(base, 3500);
    ck_assert(s.have[0]);
    ck_assert_uint_eq(s.e[0].port, 7200);
    xfer_dir_del(b);
    xfer_dir_del(cli);
    event_base_free(base);
    etcd_stop(&c);
}
END_TEST

START_TEST(test_dir_hostile)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    static const char *const bad[][2] = {
        {"/xfer/groups/h/1", "not json"},
        {"/xfer/groups/h/2", "{\"shard\":2}"},
        {"/xfer/groups/h/3", "{\"shard\":4,\"addr\":\"127.0.0.1\",\"port\":1,"
                             "\"transports\":1,\"epoch\":1}"},
        {"/xfer/groups/h/64", "{\"shard\":64,\"addr\":\"127.0.0.1\","
                              "\"port\":1,\"transports\":1,\"epoch\":1}"},
        {"/xfer/groups/h/5", "{\"shard\":5,\"addr\":\"a b;rm -rf\","
                             "\"port\":1,\"transports\":1,\"epoch\":1}"},
        {"/xfer/groups/h/6", "{\"shard\":6,\"addr\":\"127.0.0.1\","
                             "\"port\":70000,\"transports\":1,\"epoch\":1}"},
        {"/xfer/groups/h/7", "[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]"},
        {"/xfer/groups/h/x\x01y", "{}"},
        {"/xfer/groups/h/08", "{\"shard\":8,\"addr\":\"127.0.0.1\","
                              "\"port\":1,\"transports\":1,\"epoch\":1}"},
        {"/xfer/groups/h/9", "{\"shard\":9,\"addr\":\"127.0.0.1\","
                             "\"port\":1,\"transports\":9,\"epoch\":1}"},
        {"/xfer/groups/h/10", "{\"shard\":10,\"addr\":\"127.0.0.1\","
                              "\"port\":1,\"transports\":1,\"epoch\":-5}"},
        {"/xfer/groups/h/11", "{\"shard\":11,\"addr\":\"127.0.0.1\","
                              "\"port\":1,\"transports\":1,\"epoch\":1} x"},
        /* an empty address, and one of XFER_DIR_ADDR_MAX characters (no
         * room for its NUL in an entry: copied, it would overflow) */
        {"/xfer/groups/h/12", "{\"shard\":12,\"addr\":\"\","
                              "\"port\":1,\"transports\":1,\"epoch\":1}"},
        {"/xfer/groups/h/13", "{\"shard\":13,\"addr\":\""
                              "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                              "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
                              "\"port\":1,\"transports\":1,\"epoch\":1}"},
    };
    int nbad = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < nbad; i++)
        ck_assert_int_eq(etcd_put(&c, 0, bad[i][0], bad[i][1]), 0);
    ck_assert_int_eq(etcd_put(&c, 0, "/xfer/groups/h/0",
                              "{\"shard\":0,\"addr\":\"localhost\","
                              "\"port\":7300,\"transports\":1,\"epoch\":1}"),
                     0);
    struct event_base *base = event_base_new();
    seen s = {0};
    xfer_dir *cli = dir_new(base, c.endpoints, 2, &s);
    ck_assert_int_eq(xfer_dir_watch(cli, "h", on_member, &s), 0);
    ck_assert(wait_for(base, &s, 0, 7300, 10000));
    run_ms(base, 200);
    ck_assert_int_eq(s.log_lines, nbad);
    /* The same through the watch stream (after the initial read). */
    for (int i = 0; i < nbad; i++)
        ck_assert_int_eq(etcd_put(&c, 0, bad[i][0], bad[i][1]), 0);
    run_ms(base, 1000);
    ck_assert_int_eq(s.log_lines, 2 * nbad);
    xfer_dir_state st;
    xfer_dir_state_get(cli, &st);
    ck_assert_uint_eq(st.bad_entries, 2 * (uint64_t)nbad);
    ck_assert_uint_eq(st.members, 1);
    for (int k = 1; k < 64; k++)
        ck_assert_int_eq(s.reports[k], 0);
    ck_assert_str_eq(s.e[0].addr, "localhost");
    /* Among the characters an address may hold are ':' (IPv6) and '_'
     * (host names of some clusters): those entries are members. */
    ck_assert_int_eq(etcd_put(&c, 0, "/xfer/groups/h/14",
                              "{\"shard\":14,\"addr\":\"fd00::1\","
                              "\"port\":7314,\"transports\":1,"
                              "\"epoch\":1}"), 0);
    ck_assert_int_eq(etcd_put(&c, 0, "/xfer/groups/h/15",
                              "{\"shard\":15,\"addr\":\"node_15.rack-2\","
                              "\"port\":7315,\"transports\":1,"
                              "\"epoch\":1}"), 0);
    ck_assert(wait_for(base, &s, 14, 7314, 10000));
    ck_assert(wait_for(base, &s, 15, 7315, 10000));
    ck_assert_str_eq(s.e[14].addr, "fd00::1");
    ck_assert_str_eq(s.e[15].addr, "node_15.rack-2");
    xfer_dir_state_get(cli, &st);
    ck_assert_uint_eq(st.members, 3);
    ck_assert_uint_eq(st.bad_entries, 2 * (uint64_t)nbad);
    xfer_dir_del(cli);
    event_base_free(base);
    etcd_stop(&c);
}
END_TEST

START_TEST(test_dir_etcd_down)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    struct event_base *base = event_base_new();
    seen s = {0};
    xfer_dir *srv = dir_new(base, c.endpoints, 2, NULL);
    xfer_dir *cli = dir_new(base, c.endpoints, 2, &s);
    xfer_dir_entry e = entry(0, 7400, 1);
    ck_assert_int_eq(xfer_dir_register(srv, "down", &e), 0);
    ck_assert_int_eq(xfer_dir_watch(cli, "down", on_member, &s), 0);
    ck_assert(wait_for(base, &s, 0, 7400, 10000));
    etcd_signal(&c, 0, SIGKILL);
    run_ms(base, 4000);
    ck_assert(s.have[0]); /* the last known membership stays */
    ck_assert_int_eq(s.gones[0], 0);
    xfer_dir_state st;
    xfer_dir_state_get(srv, &st);
    ck_assert(!st.connected);
    ck_assert_int_eq(etcd_restart(&c, 0), 0);
    ck_assert_int_eq(etcd_wait_up(&c, 0, 20000), 0);
    /* The lease expired while etcd was down (after its restart, the old
     * lease's TTL runs again): the server puts its entry again, and the
     * watcher never loses it for longer than a lease.  A change after
     * the restart is seen. */
    run_ms(base, 4000);
    xfer_dir *b = dir_new(base, c.endpoints, 2, NULL);
    xfer_dir_entry e1 = entry(1, 7401, 1);
    ck_assert_int_eq(xfer_dir_register(b, "down", &e1), 0);
    ck_assert(wait_for(base, &s, 1, 7401, 10000));
    ck_assert(wait_for(base, &s, 0, 7400, 10000));
    xfer_dir_state_get(srv, &st);
    ck_assert(st.connected);
    xfer_dir_del(b);
    xfer_dir_del(srv);
    xfer_dir_del(cli);
    event_base_free(base);
    etcd_stop(&c);
}
END_TEST

START_TEST(test_dir_cluster_failover)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 3), 0);
    struct event_base *base = event_base_new();
    seen s = {0};
    xfer_dir *srv = dir_new(base, c.endpoints, 2, NULL);
    xfer_dir *cli = dir_new(base, c.endpoints, 2, &s);
    xfer_dir_entry e = entry(0, 7500, 1);
    ck_assert_int_eq(xfer_dir_register(srv, "cl", &e), 0);
    ck_assert_int_eq(xfer_dir_watch(cli, "cl", on_member, &s), 0);
    ck_assert(wait_for(base, &s, 0, 7500, 10000));
    etcd_signal(&c, 0, SIGKILL); /* the member both were using */
    run_ms(base, 5000);          /* more than two TTLs */
    ck_assert(s.have[0]);
    ck_assert_int_eq(s.gones[0], 0);
    xfer_dir *b = dir_new(base, c.endpoints, 2, NULL);
    xfer_dir_entry e1 = entry(1, 7501, 1);
    ck_assert_int_eq(xfer_dir_register(b, "cl", &e1), 0);
    ck_assert(wait_for(base, &s, 1, 7501, 10000));
    xfer_dir_state st;
    xfer_dir_state_get(srv, &st);
    ck_assert(st.connected);
    ck_assert_uint_ne(st.endpoint, 0);
    xfer_dir_del(b);
    xfer_dir_del(srv);
    xfer_dir_del(cli);
    event_base_free(base);
    etcd_stop(&c);
}
END_TEST

START_TEST(test_dir_auth)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    char out[1024];
    ck_assert_int_eq(etcd_post(&c, 0, "/v3/auth/user/add",
                               "{\"name\":\"root\",\"password\":\"pw\"}",
                               out, sizeof out), 200);
    ck_assert_int_eq(etcd_post(&c, 0, "/v3/auth/role/add",
                               "{\"name\":\"root\"}", out, sizeof out),
                     200);
    ck_assert_int_eq(etcd_post(&c, 0, "/v3/auth/user/grant",
                               "{\"user\":\"root\",\"role\":\"root\"}",
                               out, sizeof out), 200);
    ck_assert_int_eq(etcd_post(&c, 0, "/v3/auth/enable", "{}", out,
                               sizeof out), 200);
    struct event_base *base = event_base_new();
    seen s = {0}, nobody = {0};
    xfer_dir_config cfg;
    xfer_dir_config_default(&cfg);
    cfg.endpoints = c.endpoints;
    cfg.lease_ttl_s = 2;
    cfg.reconnect_min_ns = 50000000ull;
    cfg.reconnect_max_ns = 200000000ull;
    cfg.user = "root";
    cfg.password = "pw";
    xfer_dir *srv = NULL, *cli = NULL, *anon = NULL;
    ck_assert_int_eq(xfer_dir_new(base, &cfg, &srv), 0);
    ck_assert_int_eq(xfer_dir_new(base, &cfg, &cli), 0);
    xfer_dir *anon_cli = dir_new(base, c.endpoints, 2, &nobody);
    anon = dir_new(base, c.endpoints, 2, NULL);
    xfer_dir_entry e = entry(0, 7600, 1), e1 = entry(1, 7601, 1);
    ck_assert_int_eq(xfer_dir_register(srv, "auth", &e), 0);
    ck_assert_int_eq(xfer_dir_register(anon, "auth", &e1), 0);
    ck_assert_int_eq(xfer_dir_watch(cli, "auth", on_member, &s), 0);
    ck_assert_int_eq(xfer_dir_watch(anon_cli, "auth", on_member, &nobody),
                     0);
    ck_assert(wait_for(base, &s, 0, 7600, 10000));
    run_ms(base, 1000);
    ck_assert(!s.have[1]);       /* the anonymous put never landed */
    ck_assert(!nobody.have[0]);  /* nor does an anonymous watch read */
    xfer_dir_state st;
    xfer_dir_state_get(anon, &st);
    ck_assert(!st.connected);
    ck_assert_uint_gt(st.failures, 0);
    xfer_dir_del(anon);
    xfer_dir_del(anon_cli);
    xfer_dir_del(srv);
    xfer_dir_del(cli);
    event_base_free(base);
    etcd_stop(&c);
}
END_TEST

START_TEST(test_dir_tls)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start_tls(&c), 0);
    struct event_base *base = event_base_new();
    seen s = {0}, wrong = {0};
    xfer_dir_config cfg;
    xfer_dir_config_default(&cfg);
    cfg.endpoints = c.endpoints;
    cfg.lease_ttl_s = 2;
    cfg.reconnect_min_ns = 50000000ull;
    cfg.reconnect_max_ns = 300000000ull;
    cfg.ca_file = c.tls_ca;
    xfer_dir *srv = NULL, *cli = NULL, *bad = NULL;
    ck_assert_int_eq(xfer_dir_new(base, &cfg, &srv), 0);
    ck_assert_int_eq(xfer_dir_new(base, &cfg, &cli), 0);
    /* The system's CAs do not know ours. */
    cfg.ca_file = NULL;
    ck_assert_int_eq(xfer_dir_new(base, &cfg, &bad), 0);
    xfer_dir_entry e = entry(0, 7700, 1);
    ck_assert_int_eq(xfer_dir_register(srv, "tls", &e), 0);
    ck_assert_int_eq(xfer_dir_watch(cli, "tls", on_member, &s), 0);
    ck_assert_int_eq(xfer_dir_watch(bad, "tls", on_member, &wrong), 0);
    ck_assert(wait_for(base, &s, 0, 7700, 15000));
    run_ms(base, 500);
    ck_assert(!wrong.have[0]);
    xfer_dir_state st;
    xfer_dir_state_get(bad, &st);
    ck_assert(!st.connected);
    ck_assert_uint_gt(st.failures, 0);
    xfer_dir_del(bad);
    xfer_dir_del(srv);
    xfer_dir_del(cli);
    event_base_free(base);
    etcd_stop(&c);
}
END_TEST

/* xferd --members lists the group as etcd sees it. */
START_TEST(test_dir_xferd_members)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    mp_proc d[2];
    for (int k = 0; k < 2; k++) {
        char shard[16];
        snprintf(shard, sizeof shard, "%d", k);
        const char *args[] = {"--shard", shard, "--pool", "1M", "--etcd",
                              c.endpoints, "--etcd-ttl", "2", "--group",
                              "listed", "--quiet", NULL};
        ck_assert_int_eq(mp_xferd(&d[k], 0, args), 0);
    }
    char cmd[1024], out[4096] = "", line[64];
    snprintf(cmd, sizeof cmd, "%s --etcd %s --group listed --members",
             getenv("XFERD"), c.endpoints);
    /* The registrations are put right after the listen: poll. */
    for (int i = 0; i < 100; i++) {
        FILE *f = popen(cmd, "r");
        ck_assert_ptr_nonnull(f);
        size_t n = fread(out, 1, sizeof out - 1, f);
        out[n] = '\0';
        pclose(f);
        if (strstr(out, ": 2 members"))
            break;
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, ": 2 members"));
    for (int k = 0; k < 2; k++) {
        snprintf(line, sizeof line, "shard %d 127.0.0.1:%u transports tcp",
                 k, (unsigned)d[k].port);
        ck_assert_ptr_nonnull(strstr(out, line));
    }
    for (int k = 0; k < 2; k++)
        mp_kill(&d[k], SIGTERM);
    etcd_stop(&c);
}
END_TEST

int main(void)
{
    int skip = etcd_required("test_dir");
    if (skip)
        return skip;
    Suite *s = suite_create("dir");
    TCase *tc = tcase_create("dir");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_dir_register_resolve);
    tcase_add_test(tc, test_dir_lease_expiry);
    tcase_add_test(tc, test_dir_epoch);
    tcase_add_test(tc, test_dir_hostile);
    tcase_add_test(tc, test_dir_etcd_down);
    tcase_add_test(tc, test_dir_cluster_failover);
    tcase_add_test(tc, test_dir_xferd_members);
    tcase_add_test(tc, test_dir_auth);
    tcase_add_test(tc, test_dir_tls);
    suite_add_tcase(s, tc);
    int rc = tu_run(s);
    mp_kill_all();
    return rc;
}
