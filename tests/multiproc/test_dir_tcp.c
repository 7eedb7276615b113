/*
 * tests/multiproc/test_dir_tcp.c - producers that find their shards
 * through etcd: real xferd processes registered with --etcd (lease 2 s),
 * a TCP transport created from the group name (xfer_tcp_config.dir).
 *
 * test_dir_tcp_kill_shard: under load, shard 1 is killed with -9.  The
 * producer sees it gone (its entry's lease expired) within the TTL plus
 * one second, and from then its transfers fail at once with
 * XFER_ERR_SHARD_GONE naming shard 1; a new xferd for shard 1 on another
 * port registers, and transfers succeed again there.  Every transfer
 * completes exactly once; at the end no shard holds a byte.
 * test_dir_tcp_etcd_down: etcd stopped (kill, then restarted on its data) for 10 s mid-run: not
 * one transfer fails, and the producer reads the group again after.
 * test_dir_tcp_consumer: a consumer created from the group name takes
 * what a producer created from it sends; after shard 1 is killed and
 * comes back on another port, the consumer's link follows it there and
 * the transfers after that are available again.
 * test_dir_tcp_forged_entry: with a secret, a forged entry of a higher
 * epoch points shard 1 at a rogue listener (an xferd with another
 * secret): the connection is refused by HELLO2's mutual authentication,
 * transfers fail, and the rogue never holds a reservation.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "etcd.h"
#include "mp.h"
#include "testutil.h"
#include "xfer/consumer.h"
#include "xfer/dir.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

#define NSHARDS 2
#define SLOTS 16
#define SLICE 4096

typedef struct pump {
    struct event_base *base;
    xfer_engine *e;
    xfer_tcp *tcp;
    xfer_dir *dir;
    uint32_t group, pool;
    uint8_t *staging;
    uint32_t free_slots[SLOTS], nfree;
    uint64_t next_id, submitted, done, ok, failed, gone, dup;
    uint64_t since_ok;       /* successes since the counter was zeroed */
    uint8_t *seen;           /* completions per id */
    uint64_t seen_cap;
    bool stop;
    struct event *tick;
    volatile bool shut;
} pump;

static void pump_done(void *ud, const xfer_result *res)
{
    pump *u = ud;
    if (res->id < u->seen_cap && u->seen[res->id]++)
        u->dup++;
    u->done++;
    u->free_slots[u->nfree++] = (uint32_t)res->user_data;
    if (res->status == 0) {
        u->ok++;
        u->since_ok++;
    } else {
        if (u->failed < 3 || getenv("DIR_TCP_VERBOSE"))
            fprintf(stderr, "transfer %llu failed: %s (shards 0x%llx, "
                    "phase %u)\n", (unsigned long long)res->id,
                    xfer_strerror(res->status),
                    (unsigned long long)res->failed_shards,
                    (unsigned)res->phase);
        u->failed++;
        if (res->status == XFER_ERR_SHARD_GONE)
            u->gone++;
    }
}

/* Refill every 5 ms: a shard that is gone fails transfers at once, and a
 * resubmit from the completion would spin. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    pump *u = arg;
    /* At most 4 a tick (800/s): the shards' tombstones (2 lease TTLs)
     * stay far below their cap. */
    for (int n = 0; n < 4 && !u->stop && u->nfree &&
                    u->next_id + 1 < u->seen_cap; n++) {
        uint32_t slot = u->free_slots[--u->nfree];
        xfer_slice sl[NSHARDS];
        for (int k = 0; k < NSHARDS; k++) {
            sl[k].off = ((uint64_t)slot * NSHARDS + (uint64_t)k) * SLICE;
            sl[k].len = SLICE;
        }
        xfer_transfer_desc d = {.id = ++u->next_id, .group = u->group,
                                .pool = u->pool, .nslices = NSHARDS,
                                .slices = sl, .user_data = slot};
        ck_assert_int_eq(xfer_engine_submit(u->e, &d, pump_done, u), 0);
        u->submitted++;
    }
}

static void on_log(void *ud, const char *line)
{
    fprintf(stderr, "producer dir: %s\n", line);
}

static void pump_new(pump *u, const char *eps, const char *group,
                     const void *secret, size_t secret_len)
{
    memset(u, 0, sizeof *u);
    signal(SIGPIPE, SIG_IGN);
    u->base = event_base_new();
    xfer_dir_config dc;
    xfer_dir_config_default(&dc);
    dc.endpoints = eps;
    dc.request_timeout_ns = 1000000000ull;
    dc.reconnect_min_ns = 50000000ull;
    dc.reconnect_max_ns = 500000000ull;
    dc.log = on_log;
    ck_assert_int_eq(xfer_dir_new(u->base, &dc, &u->dir), 0);
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = u->base;
    ec.core.default_deadline_ns = 5000000000ull;
    ck_assert_int_eq(xfer_engine_new(&ec, &u->e), 0);
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = NSHARDS;
    tc.dir = u->dir;
    tc.dir_group = group;
    tc.reconnect_max_ns = 200000000ull;
    tc.secret = secret;
    tc.secret_len = secret_len;
    ck_assert_int_eq(xfer_tcp_new(u->base, &tc, &u->tcp), 0);
    u->staging = calloc(SLOTS * NSHARDS, SLICE);
    ck_assert_int_eq(xfer_engine_register_pool(u->e, u->staging,
                                               SLOTS * NSHARDS * SLICE,
                                               &u->pool), 0);
    ck_assert_int_eq(xfer_engine_add_group(u->e, xfer_tcp_transport(u->tcp),
                                           &u->group), 0);
    for (uint32_t i = 0; i < SLOTS; i++)
        u->free_slots[u->nfree++] = i;
    u->seen_cap = 1u << 20;
    u->seen = calloc(u->seen_cap, 1);
    u->tick = event_new(u->base, -1, EV_PERSIST, on_tick, u);
}

static bool all_connected(void *ud)
{
    pump *u = ud;
    for (uint16_t k = 0; k < NSHARDS; k++)
        if (!xfer_tcp_connected(u->tcp, k))
            return false;
    return true;
}

static void pump_start(pump *u)
{
    u->stop = false;
    struct timeval tv = {0, 5000};
    event_add(u->tick, &tv);
}

static bool pump_idle(void *ud)
{
    pump *u = ud;
    return u->nfree == SLOTS;
}

static void pump_stop(pump *u)
{
    u->stop = true;
    ck_assert(mp_run_while(u->base, pump_idle, u, 20000));
    event_del(u->tick);
}

static void on_shut(void *ud)
{
    ((pump *)ud)->shut = true;
}

static void pump_del(pump *u)
{
    ck_assert_int_eq(xfer_engine_shutdown(u->e, on_shut, u), 0);
    ck_assert(mp_run_until(u->base, &u->shut, 20000));
    xfer_engine_del(u->e);
    xfer_tcp_del(u->tcp);
    xfer_dir_del(u->dir);
    event_free(u->tick);
    event_base_loop(u->base, EVLOOP_NONBLOCK);
    event_base_free(u->base);
    free(u->staging);
    free(u->seen);
}

static void run_ms(pump *u, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_base_loopexit(u->base, &tv);
    event_base_dispatch(u->base);
}

static bool shard_consume = true;

/* xferd serving shard k of `group`, registered in etcd unless c is NULL. */
static void start_shard(mp_proc *p, const etcd_cluster *c, int k,
                        const char *group, const char *secret_file)
{
    char shard[16];
    snprintf(shard, sizeof shard, "%d", k);
    const char *args[24] = {"--shard", shard, "--pool", "16M",
                            "--lease-ttl", "2s", "--group", group,
                            "--quiet", shard_consume ? "--consume" : NULL};
    int n = shard_consume ? 10 : 9;
    if (secret_file) {
        args[n++] = "--secret-file";
        args[n++] = secret_file;
    }
    if (c) {
        args[n++] = "--etcd";
        args[n++] = c->endpoints;
        args[n++] = "--etcd-ttl";
        args[n++] = "2";
    }
    args[n] = NULL;
    ck_assert_int_eq(mp_xferd(p, 0, args), 0);
}

/* SIGTERM (a drain: the entry leaves etcd first), then the daemon's own
 * last stats line: field `name` of "xferd stats: all". */
static uint64_t stat_at_exit(mp_proc *p, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s", p->log);
    mp_kill(p, SIGTERM);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[1024], key[64];
    snprintf(key, sizeof key, " %s=", name);
    uint64_t v = UINT64_MAX;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "xferd stats: all") && strstr(line, key))
            v = strtoull(strstr(line, key) + strlen(key), NULL, 10);
    fclose(f);
    return v;
}

static bool shard_gone(void *ud)
{
    pump *u = ud;
    return xfer_tcp_gone(u->tcp, 1);
}

static void assert_empty(uint16_t port)
{
    xfer_wire_status st;
    ck_assert_int_eq(mp_wait_pool_free(port, 15000, &st), 0);
}

START_TEST(test_dir_tcp_kill_shard)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    mp_proc d[NSHARDS];
    for (int k = 0; k < NSHARDS; k++)
        start_shard(&d[k], &c, k, "kill", NULL);
    pump u;
    pump_new(&u, c.endpoints, "kill", NULL, 0);
    ck_assert(mp_run_while(u.base, all_connected, &u, 15000));
    pump_start(&u);
    run_ms(&u, 500);
    ck_assert_uint_gt(u.ok, 0);
    uint64_t t0 = mp_now_ms();
    mp_kill(&d[1], SIGKILL);
    ck_assert(mp_run_while(u.base, shard_gone, &u, 10000));
    uint64_t took = mp_now_ms() - t0;
    fprintf(stderr, "shard 1 gone %llu ms after kill -9 (lease TTL 2000)\n",
            (unsigned long long)took);
    ck_assert_uint_le(took, 3000); /* the bound: TTL + 1 s */
    uint64_t gone0 = u.gone;
    run_ms(&u, 300);
    ck_assert_uint_gt(u.gone, gone0); /* failing fast, with its status */
    xfer_tcp_stats ts;
    ck_assert_int_eq(xfer_tcp_stats_get(u.tcp, &ts), 0);
    ck_assert_uint_eq(ts.gones, 1);
    /* Shard 1 comes back elsewhere (another port, a new epoch). */
    uint16_t old_port = d[1].port;
    start_shard(&d[1], &c, 1, "kill", NULL);
    ck_assert_uint_ne(d[1].port, old_port);
    ck_assert(mp_run_while(u.base, all_connected, &u, 15000));
    u.since_ok = 0;
    run_ms(&u, 500);
    ck_assert_uint_gt(u.since_ok, 0);
    pump_stop(&u);
    ck_assert_uint_eq(u.done, u.submitted);
    ck_assert_uint_eq(u.dup, 0);
    pump_del(&u);
    for (int k = 0; k < NSHARDS; k++) {
        assert_empty(d[k].port);
        mp_kill(&d[k], SIGTERM);
    }
    etcd_stop(&c);
}
END_TEST

START_TEST(test_dir_tcp_etcd_down)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    mp_proc d[NSHARDS];
    for (int k = 0; k < NSHARDS; k++)
        start_shard(&d[k], &c, k, "down", NULL);
    pump u;
    pump_new(&u, c.endpoints, "down", NULL, 0);
    ck_assert(mp_run_while(u.base, all_connected, &u, 15000));
    pump_start(&u);
    run_ms(&u, 300);
    etcd_signal(&c, 0, SIGKILL);
    run_ms(&u, 10000);
    ck_assert_int_eq(etcd_restart(&c, 0), 0);
    run_ms(&u, 3000);
    pump_stop(&u);
    fprintf(stderr, "%llu transfers while etcd was stopped and after\n",
            (unsigned long long)u.ok);
    ck_assert_uint_gt(u.ok, 100);
    ck_assert_uint_eq(u.failed, 0);
    ck_assert_uint_eq(u.done, u.submitted);
    ck_assert_uint_eq(u.dup, 0);
    ck_assert(all_connected(&u));
    pump_del(&u);
    for (int k = 0; k < NSHARDS; k++) {
        assert_empty(d[k].port);
        mp_kill(&d[k], SIGTERM);
    }
    etcd_stop(&c);
}
END_TEST

static void write_secret(const char *path, const char *bytes)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(bytes, f);
    fclose(f);
    chmod(path, 0600);
}

START_TEST(test_dir_tcp_forged_entry)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    char good[256], evil[256];
    snprintf(good, sizeof good, "%s/good.key", c.dir);
    snprintf(evil, sizeof evil, "%s/evil.key", c.dir);
    const char *secret = "0123456789abcdef0123456789abcdef";
    write_secret(good, secret);
    write_secret(evil, "this is not the secret of the group");
    mp_proc d[NSHARDS], rogue;
    for (int k = 0; k < NSHARDS; k++)
        start_shard(&d[k], &c, k, "sec", good);
    /* The rogue serves shard 1 of the same group, unregistered, with a
     * secret that is not the group's. */
    start_shard(&rogue, NULL, 1, "sec", evil);
    pump u;
    pump_new(&u, c.endpoints, "sec", secret, strlen(secret));
    bool up = mp_run_while(u.base, all_connected, &u, 15000);
    xfer_tcp_stats ts;
    ck_assert_int_eq(xfer_tcp_stats_get(u.tcp, &ts), 0);
    fprintf(stderr, "connects %llu failures %llu refused %llu gone %d %d\n",
            (unsigned long long)ts.connects,
            (unsigned long long)ts.connect_failures,
            (unsigned long long)ts.hello_refused, xfer_tcp_gone(u.tcp, 0),
            xfer_tcp_gone(u.tcp, 1));
    ck_assert(up);
    /* The forged entry: shard 1 of group sec at the rogue's port, with
     * the highest epoch there is. */
    char value[256];
    snprintf(value, sizeof value,
             "{\"shard\":1,\"addr\":\"127.0.0.1\",\"port\":%u,"
             "\"transports\":1,\"epoch\":9223372036854775807}",
             (unsigned)rogue.port);
    ck_assert_int_eq(etcd_put(&c, 0, "/xfer/groups/sec/1", value), 0);
    pump_start(&u);
    run_ms(&u, 2000);
    pump_stop(&u);
    ck_assert_int_eq(xfer_tcp_stats_get(u.tcp, &ts), 0);
    ck_assert_uint_gt(ts.hello_refused, 0);
    ck_assert(!xfer_tcp_connected(u.tcp, 1));
    ck_assert_uint_gt(u.failed, 0);
    ck_assert_uint_eq(u.done, u.submitted);
    pump_del(&u);
    ck_assert_uint_eq(stat_at_exit(&rogue, "reserves"), 0);
    for (int k = 0; k < NSHARDS; k++)
        ck_assert_uint_eq(stat_at_exit(&d[k], "in_use"), 0);
    etcd_stop(&c);
}
END_TEST

typedef struct taker {
    xfer_consumer *c;
    uint64_t available, unavailable;
} taker;

static void took(void *ud, uint64_t id, uint32_t attempt,
                 const xfer_region *regions, uint16_t n)
{
    taker *t = ud;
    t->available++;
    ck_assert_int_eq(n, NSHARDS);
    ck_assert_int_eq(xfer_consumer_release(t->c, id), 0);
}

static void not_taken(void *ud, uint64_t id, int32_t reason, uint64_t shards)
{
    ((taker *)ud)->unavailable++;
}

static bool consumer_up(void *ud)
{
    taker *t = ud;
    for (uint16_t k = 0; k < NSHARDS; k++)
        if (!xfer_consumer_connected(t->c, k))
            return false;
    return true;
}

START_TEST(test_dir_tcp_consumer)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    shard_consume = false; /* the consumer takes and releases */
    mp_proc d[NSHARDS];
    for (int k = 0; k < NSHARDS; k++)
        start_shard(&d[k], &c, k, "cons", NULL);
    pump u;
    pump_new(&u, c.endpoints, "cons", NULL, 0);
    taker t = {0};
    xfer_consumer_config cc;
    xfer_consumer_config_default(&cc);
    cc.base = u.base;
    cc.nshards = NSHARDS;
    cc.dir = u.dir;
    cc.dir_group = "cons";
    cc.available = took;
    cc.unavailable = not_taken;
    cc.ud = &t;
    cc.ready_deadline_ns = 2000000000ull;
    ck_assert_int_eq(xfer_consumer_new(&cc, &t.c), 0);
    ck_assert(mp_run_while(u.base, all_connected, &u, 15000));
    ck_assert(mp_run_while(u.base, consumer_up, &t, 15000));
    pump_start(&u);
    run_ms(&u, 500);
    pump_stop(&u);
    ck_assert_uint_gt(u.ok, 0);
    run_ms(&u, 300);
    ck_assert_uint_eq(t.available, u.ok);
    /* Shard 1 moves: killed, back on another port. */
    uint16_t old_port = d[1].port;
    mp_kill(&d[1], SIGKILL);
    ck_assert(mp_run_while(u.base, shard_gone, &u, 10000));
    start_shard(&d[1], &c, 1, "cons", NULL);
    ck_assert_uint_ne(d[1].port, old_port);
    ck_assert(mp_run_while(u.base, all_connected, &u, 15000));
    ck_assert(mp_run_while(u.base, consumer_up, &t, 15000));
    uint64_t ok0 = u.ok, avail0 = t.available;
    pump_start(&u);
    run_ms(&u, 500);
    pump_stop(&u);
    run_ms(&u, 300);
    ck_assert_uint_gt(u.ok, ok0);
    ck_assert_uint_eq(t.available - avail0, u.ok - ok0);
    ck_assert_uint_eq(u.done, u.submitted);
    xfer_consumer_del(t.c);
    pump_del(&u);
    for (int k = 0; k < NSHARDS; k++)
        ck_assert_uint_eq(stat_at_exit(&d[k], "in_use"), 0);
    shard_consume = true;
    etcd_stop(&c);
}
END_TEST

int main(void)
{
    if (!etcd_binary()) {
        const char *ci = getenv("CI");
        fprintf(stderr, "test_dir_tcp: no etcd binary (etcd-server)%s\n",
                ci && *ci ? ": required in CI" : ", skipped");
        return ci && *ci ? 1 : 77;
    }
    Suite *s = suite_create("dir_tcp");
    TCase *tc = tcase_create("dir_tcp");
    tcase_set_timeout(tc, 120);
    const char *only = getenv("DIR_TCP_ONLY");
    if (!only || !strcmp(only, "kill"))
        tcase_add_test(tc, test_dir_tcp_kill_shard);
    if (!only || !strcmp(only, "down"))
        tcase_add_test(tc, test_dir_tcp_etcd_down);
    if (!only || !strcmp(only, "consumer"))
        tcase_add_test(tc, test_dir_tcp_consumer);
    if (!only || !strcmp(only, "forged"))
        tcase_add_test(tc, test_dir_tcp_forged_entry);
    suite_add_tcase(s, tc);
    int rc = tu_run(s);
    mp_kill_all();
    return rc;
}
