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

#include "dirpump.h"
#include "etcd.h"
#include "mp.h"
#include "testutil.h"
#include "xfer/consumer.h"
#include "xfer/dir.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

#define NSHARDS 2
#define SLICE 4096

/* The directory tests' producer (dirpump.h) with a TCP transport
 * created from the group name. */
typedef struct pump {
    dir_pump d;
    xfer_tcp *tcp;
} pump;

static void pump_new(pump *u, const char *eps, const char *group,
                     const void *secret, size_t secret_len)
{
    dir_pump_new(&u->d, eps, NSHARDS, SLICE);
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = NSHARDS;
    tc.dir = u->d.dir;
    tc.dir_group = group;
    tc.reconnect_max_ns = 200000000ull;
    tc.secret = secret;
    tc.secret_len = secret_len;
    ck_assert_int_eq(xfer_tcp_new(u->d.base, &tc, &u->tcp), 0);
    dir_pump_attach(&u->d, xfer_tcp_transport(u->tcp));
}

static bool all_connected(void *ud)
{
    pump *u = ud;
    for (uint16_t k = 0; k < NSHARDS; k++)
        if (!xfer_tcp_connected(u->tcp, k))
            return false;
    return true;
}

static void pump_del(pump *u)
{
    dir_pump_shutdown(&u->d);
    xfer_tcp_del(u->tcp);
    dir_pump_free(&u->d);
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
    ck_assert(mp_run_while(u.d.base, all_connected, &u, 15000));
    dir_pump_start(&u.d);
    dir_pump_run_ms(&u.d, 500);
    ck_assert_uint_gt(u.d.ok, 0);
    uint64_t t0 = mp_now_ms();
    mp_kill(&d[1], SIGKILL);
    ck_assert(mp_run_while(u.d.base, shard_gone, &u, 10000));
    uint64_t took = mp_now_ms() - t0;
    fprintf(stderr, "shard 1 gone %llu ms after kill -9 (lease TTL 2000)\n",
            (unsigned long long)took);
    ck_assert_uint_le(took, 3000); /* the bound: TTL + 1 s */
    uint64_t gone0 = u.d.gone;
    dir_pump_run_ms(&u.d, 300);
    ck_assert_uint_gt(u.d.gone, gone0); /* failing fast, with its status */
    xfer_tcp_stats ts;
    ck_assert_int_eq(xfer_tcp_stats_get(u.tcp, &ts), 0);
    ck_assert_uint_eq(ts.gones, 1);
    /* Shard 1 comes back elsewhere (another port, a new epoch). */
    uint16_t old_port = d[1].port;
    start_shard(&d[1], &c, 1, "kill", NULL);
    ck_assert_uint_ne(d[1].port, old_port);
    ck_assert(mp_run_while(u.d.base, all_connected, &u, 15000));
    u.d.since_ok = 0;
    dir_pump_run_ms(&u.d, 500);
    ck_assert_uint_gt(u.d.since_ok, 0);
    dir_pump_stop(&u.d);
    ck_assert_uint_eq(u.d.done, u.d.submitted);
    ck_assert_uint_eq(u.d.dup, 0);
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
    ck_assert(mp_run_while(u.d.base, all_connected, &u, 15000));
    dir_pump_start(&u.d);
    dir_pump_run_ms(&u.d, 300);
    etcd_signal(&c, 0, SIGKILL);
    dir_pump_run_ms(&u.d, 10000);
    ck_assert_int_eq(etcd_restart(&c, 0), 0);
    dir_pump_run_ms(&u.d, 3000);
    dir_pump_stop(&u.d);
    fprintf(stderr, "%llu transfers while etcd was stopped and after\n",
            (unsigned long long)u.d.ok);
    ck_assert_uint_gt(u.d.ok, 100);
    ck_assert_uint_eq(u.d.failed, 0);
    ck_assert_uint_eq(u.d.done, u.d.submitted);
    ck_assert_uint_eq(u.d.dup, 0);
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
    bool up = mp_run_while(u.d.base, all_connected, &u, 15000);
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
    dir_pump_start(&u.d);
    dir_pump_run_ms(&u.d, 2000);
    dir_pump_stop(&u.d);
    ck_assert_int_eq(xfer_tcp_stats_get(u.tcp, &ts), 0);
    ck_assert_uint_gt(ts.hello_refused, 0);
    ck_assert(!xfer_tcp_connected(u.tcp, 1));
    ck_assert_uint_gt(u.d.failed, 0);
    ck_assert_uint_eq(u.d.done, u.d.submitted);
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

/* Pump transfers a while: some succeed, and the consumer is told of
 * each success available (it takes and releases them). */
static void pump_and_take(pump *u, taker *t)
{
    uint64_t ok0 = u->d.ok, avail0 = t->available;
    dir_pump_start(&u->d);
    dir_pump_run_ms(&u->d, 500);
    dir_pump_stop(&u->d);
    dir_pump_run_ms(&u->d, 300);
    ck_assert_uint_gt(u->d.ok, ok0);
    ck_assert_uint_eq(t->available - avail0, u->d.ok - ok0);
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
    cc.base = u.d.base;
    cc.nshards = NSHARDS;
    cc.dir = u.d.dir;
    cc.dir_group = "cons";
    cc.available = took;
    cc.unavailable = not_taken;
    cc.ud = &t;
    cc.ready_deadline_ns = 2000000000ull;
    ck_assert_int_eq(xfer_consumer_new(&cc, &t.c), 0);
    ck_assert(mp_run_while(u.d.base, all_connected, &u, 15000));
    ck_assert(mp_run_while(u.d.base, consumer_up, &t, 15000));
    dir_pump_start(&u.d);
    dir_pump_run_ms(&u.d, 500);
    dir_pump_stop(&u.d);
    ck_assert_uint_gt(u.d.ok, 0);
    dir_pump_run_ms(&u.d, 300);
    ck_assert_uint_eq(t.available, u.d.ok);
    /* Shard 1 moves: killed, back on another port. */
    uint16_t old_port = d[1].port;
    mp_kill(&d[1], SIGKILL);
    ck_assert(mp_run_while(u.d.base, shard_gone, &u, 10000));
    start_shard(&d[1], &c, 1, "cons", NULL);
    ck_assert_uint_ne(d[1].port, old_port);
    ck_assert(mp_run_while(u.d.base, all_connected, &u, 15000));
    ck_assert(mp_run_while(u.d.base, consumer_up, &t, 15000));
    pump_and_take(&u, &t);
    /* Shard 0 moves in place: killed and back on another port well
     * within its 2 s lease, so its key is put again with the new address
     * and never deleted: the consumer must follow an entry that changed
     * without going gone (the same address family and length, another
     * port). */
    old_port = d[0].port;
    mp_kill(&d[0], SIGKILL);
    start_shard(&d[0], &c, 0, "cons", NULL);
    ck_assert_uint_ne(d[0].port, old_port);
    ck_assert(mp_run_while(u.d.base, all_connected, &u, 15000));
    ck_assert(mp_run_while(u.d.base, consumer_up, &t, 15000));
    pump_and_take(&u, &t);
    ck_assert_uint_eq(u.d.done, u.d.submitted);
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
    int skip = etcd_required("test_dir_tcp");
    if (skip)
        return skip;
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
