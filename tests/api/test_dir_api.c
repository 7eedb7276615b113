/*
 * tests/api/test_dir_api.c - the directory (xfer/dir.h) as programs use
 * it: a TCP transport and a consumer created from a group name, on an
 * engine-owned event_base and on the caller's own, torn down in every
 * order the headers allow with the watch live; calls made before the
 * first entry arrives, during an etcd outage and after unregister; and
 * the bounds of its tables.  A real etcd and real xferd processes
 * registered in it (tests/multiproc/etcd.h, mp.h).
 *
 * test_dir_api_teardown: for each owner of the base (the engine, the
 * caller) and each order (engine, transport, dir / transport, engine,
 * dir / transport, dir, engine), a transport connected through the
 * directory with transfers done, then freed in that order; then a
 * consumer of the group with its own ctl and an engine ctl, both showing
 * the directory: engine, consumer ctl, consumer, engine ctl, transport,
 * dir.  On 4d686eb the engine-owned runs freed the directory's
 * events on the base the engine and transport had already freed, and
 * "transport, dir, engine" unwatched through the freed directory at the
 * engine's detach (both seen under ASan: heap-use-after-free).
 * test_dir_api_calls: before the first entry every shard is gone (a
 * submit fails with XFER_ERR_SHARD_GONE, member NOT_FOUND); during an
 * outage every call still answers and the last known member stays;
 * after unregister, unregister says XFER_ERR_STATE and register
 * XFER_ERR_INVALID_ARG; after unwatch, unwatch says NOT_FOUND and the
 * transport's own watch still answers xfer_dir_member.
 * test_dir_api_full_tables: the 17th watch, the 65th registration are
 * refused with XFER_ERR_BUSY; a group with entries for shards 0..69 keeps
 * the 64 it can hold and ignores the rest with one log line each, and
 * reading the group again counts them again but logs nothing more (on
 * 4d686eb every read logged them again).
 */
#include <check.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "etcd.h"
#include "mp.h"
#include "testutil.h"
#include "xfer/consumer.h"
#include "xfer/ctl.h"
#include "xfer/dir.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

#define WAIT_MS 10000
#define SLICE 4096

enum { OWN_ENGINE = 0, OWN_CALLER = 1 };
enum { ENGINE_TCP_DIR, TCP_ENGINE_DIR, TCP_DIR_ENGINE, NORDERS };

static int log_lines;

static void on_log(void *ud, const char *line)
{
    (void)ud;
    log_lines++;
    fprintf(stderr, "dir: %s\n", line);
}

static xfer_dir *dir_new(struct event_base *base, const char *eps)
{
    xfer_dir_config cfg;
    xfer_dir_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.lease_ttl_s = 2;
    cfg.request_timeout_ns = 1000000000ull;
    cfg.reconnect_min_ns = 50000000ull;
    cfg.reconnect_max_ns = 300000000ull;
    /* The test etcd sends progress notifications every 500 ms: a
     * stopped one is noticed through the silent watch. */
    cfg.watch_timeout_ns = 1500000000ull;
    cfg.log = on_log;
    xfer_dir *d = NULL;
    ck_assert_int_eq(xfer_dir_new(base, &cfg, &d), 0);
    return d;
}

/* xferd serving shard 0 of `group`, registered in etcd. */
static void shard_start(mp_proc *p, const etcd_cluster *c, const char *group)
{
    const char *args[] = {"--shard", "0", "--pool", "4M", "--group", group,
                          "--consume", "--quiet", "--etcd", c->endpoints,
                          "--etcd-ttl", "2", NULL};
    ck_assert_int_eq(mp_xferd(p, 0, args), 0);
}

typedef struct prod {
    struct event_base *base, *mine;
    xfer_engine *e;
    xfer_tcp *tcp;
    xfer_dir *dir;
    uint32_t group, pool;
    uint8_t staging[4 * SLICE];
    int done, ok, gone;
} prod;

static void on_done(void *ud, const xfer_result *r)
{
    prod *p = ud;
    p->done++;
    p->ok += r->status == 0;
    p->gone += r->status == XFER_ERR_SHARD_GONE;
}

static void prod_new(prod *p, int owner, const char *eps, const char *group)
{
    memset(p, 0, sizeof *p);
    signal(SIGPIPE, SIG_IGN);
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    if (owner == OWN_CALLER) {
        p->mine = event_base_new();
        ec.base = p->mine;
    }
    ck_assert_int_eq(xfer_engine_new(&ec, &p->e), 0);
    p->base = xfer_engine_base(p->e);
    p->dir = dir_new(p->base, eps);
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = 1;
    tc.dir = p->dir;
    tc.dir_group = group;
    tc.reconnect_max_ns = 200000000ull;
    ck_assert_int_eq(xfer_tcp_new(p->base, &tc, &p->tcp), 0);
    ck_assert_int_eq(xfer_engine_register_pool(p->e, p->staging,
                                               sizeof p->staging, &p->pool),
                     0);
    ck_assert_int_eq(xfer_engine_add_group(p->e, xfer_tcp_transport(p->tcp),
                                           &p->group), 0);
}

static bool tcp_up(void *ud)
{
    return xfer_tcp_connected(ud, 0);
}

static bool n_done(void *ud)
{
    prod *p = ud;
    return p->done == 4;
}

static void submit4(prod *p, uint64_t first)
{
    p->done = p->ok = p->gone = 0;
    for (uint64_t i = 0; i < 4; i++) {
        xfer_slice sl = {.off = i * SLICE, .len = SLICE};
        xfer_transfer_desc d = {.id = first + i, .group = p->group,
                                .pool = p->pool, .nslices = 1,
                                .slices = &sl};
        ck_assert_int_eq(xfer_engine_submit(p->e, &d, on_done, p), 0);
    }
    ck_assert(mp_run_while(p->base, n_done, p, WAIT_MS));
}

/* Free in `order`; the base (if the caller's) last. */
static void prod_free(prod *p, int order)
{
    struct event_base *mine = p->mine;
    switch (order) {
    case ENGINE_TCP_DIR:
        xfer_engine_del(p->e);
        xfer_tcp_del(p->tcp);
        xfer_dir_del(p->dir);
        break;
    case TCP_ENGINE_DIR:
        xfer_tcp_del(p->tcp);
        xfer_engine_del(p->e);
        xfer_dir_del(p->dir);
        break;
    default: /* TCP_DIR_ENGINE: the transport is deleted, then its dir */
        xfer_tcp_del(p->tcp);
        xfer_dir_del(p->dir);
        xfer_engine_del(p->e);
        break;
    }
    if (mine) {
        event_base_loop(mine, EVLOOP_NONBLOCK);
        event_base_free(mine);
    }
}

typedef struct cons {
    xfer_consumer *c;
    int available;
} cons;

static void took(void *ud, uint64_t id, uint32_t attempt,
                 const xfer_region *r, uint16_t n)
{
    (void)id;
    (void)attempt;
    (void)r;
    (void)n;
    ((cons *)ud)->available++;
}

static void not_taken(void *ud, uint64_t id, int32_t reason, uint64_t shards)
{
    (void)ud;
    (void)id;
    (void)reason;
    (void)shards;
}

static bool cons_up(void *ud)
{
    return xfer_consumer_connected(((cons *)ud)->c, 0);
}

/* One ctl snapshot, read on the loop (the ctl answers from it). */
typedef struct snap {
    int fd;
    size_t n;
    char buf[16384];
} snap;

static bool snap_done(void *ud)
{
    snap *s = ud;
    ssize_t r;
    while ((r = recv(s->fd, s->buf + s->n, sizeof s->buf - 1 - s->n,
                     MSG_DONTWAIT)) > 0)
        s->n += (size_t)r;
    s->buf[s->n] = '\0';
    return r == 0 || strstr(s->buf, "\"kind\":\"end\"") != NULL;
}

static void ctl_snapshot(struct event_base *b, const char *path, snap *s)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    s->n = 0;
    s->fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(s->fd, 0);
    ck_assert_int_eq(connect(s->fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert(mp_run_while(b, snap_done, s, WAIT_MS));
    close(s->fd);
}

START_TEST(test_dir_api_teardown)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    mp_proc x;
    shard_start(&x, &c, "td");
    uint64_t id = 1;
    for (int owner = 0; owner < 2; owner++)
        for (int order = 0; order < NORDERS; order++) {
            fprintf(stderr, "owner %d order %d\n", owner, order);
            prod p;
            prod_new(&p, owner, c.endpoints, "td");
            ck_assert(mp_run_while(p.base, tcp_up, p.tcp, WAIT_MS));
            submit4(&p, id);
            id += 4;
            ck_assert_int_eq(p.ok, 4);
            prod_free(&p, order);
        }
    /* A consumer of the group, and a ctl showing the directory: each
     * deleted with the watch live, then the directory, for both owners
     * of the base. */
    for (int owner = 0; owner < 2; owner++) {
        prod p;
        prod_new(&p, owner, c.endpoints, "td");
        cons k = {0};
        xfer_consumer_config cc;
        xfer_consumer_config_default(&cc);
        cc.base = p.base;
        cc.nshards = 1;
        cc.dir = p.dir;
        cc.dir_group = "td";
        cc.available = took;
        cc.unavailable = not_taken;
        cc.ud = &k;
        ck_assert_int_eq(xfer_consumer_new(&cc, &k.c), 0);
        char path[200];
        snprintf(path, sizeof path, "%s/td.sock", c.dir);
        xfer_ctl *ctl = NULL;
        ck_assert_int_eq(xfer_engine_ctl_open(p.e, path, &ctl), 0);
        ck_assert_int_eq(xfer_ctl_set_dir(ctl, p.dir), 0);
        /* The consumer's own ctl shows the directory too. */
        char cpath[200];
        snprintf(cpath, sizeof cpath, "%s/tdc.sock", c.dir);
        xfer_ctl *cctl = NULL;
        ck_assert_int_eq(xfer_consumer_ctl_open(k.c, cpath, &cctl), 0);
        ck_assert_int_eq(xfer_ctl_set_dir(cctl, p.dir), 0);
        ck_assert(mp_run_while(p.base, cons_up, &k, WAIT_MS));
        ck_assert(mp_run_while(p.base, tcp_up, p.tcp, WAIT_MS));
        snap sn;
        ctl_snapshot(p.base, path, &sn);
        ck_assert_ptr_nonnull(strstr(sn.buf, "\"kind\":\"dir\""));
        xfer_engine_del(p.e);  /* the engine first: the rest still runs */
        xfer_ctl_close(cctl);  /* consumer.h: before the consumer */
        xfer_consumer_del(k.c);
        if (owner == 0) {
            xfer_ctl_close(ctl); /* before the directory it shows */
            xfer_tcp_del(p.tcp);
            xfer_dir_del(p.dir);
        } else {
            /* ctl.h's other order: detached, the ctl outlives the
             * directory and still answers, without its lines */
            ck_assert_int_eq(xfer_ctl_set_dir(ctl, NULL), 0);
            xfer_tcp_del(p.tcp);
            xfer_dir_del(p.dir);
            ctl_snapshot(p.base, path, &sn);
            ck_assert_ptr_nonnull(strstr(sn.buf, "\"kind\":\"end\""));
            ck_assert_ptr_null(strstr(sn.buf, "\"kind\":\"dir\""));
            xfer_ctl_close(ctl);
        }
        if (p.mine) {
            event_base_loop(p.mine, EVLOOP_NONBLOCK);
            event_base_free(p.mine);
        }
    }
    mp_kill(&x, SIGTERM);
    etcd_stop(&c);
}
END_TEST

typedef struct member_seen {
    int reports, gones;
    bool have;
} member_seen;

static void on_member(void *ud, const char *group, uint16_t shard,
                      const xfer_dir_entry *e)
{
    member_seen *m = ud;
    (void)group;
    (void)shard;
    if (e) {
        m->reports++;
        m->have = true;
    } else {
        m->gones++;
        m->have = false;
    }
}

static bool have_member(void *ud)
{
    return ((member_seen *)ud)->have;
}

static bool dir_down(void *ud)
{
    xfer_dir_state st;
    xfer_dir_state_get_latest(ud, &st);
    return !st.connected;
}

static volatile bool unreg_called;
static void on_unreg(void *ud, bool ok)
{
    (void)ud;
    (void)ok;
    unreg_called = true;
}

START_TEST(test_dir_api_calls)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    for (int owner = 0; owner < 2; owner++) {
        /* Before the first entry: nothing registered in the group yet. */
        const char *late = owner ? "late1" : "late0";
        prod p;
        prod_new(&p, owner, c.endpoints, late);
        xfer_dir_entry e;
        ck_assert_int_eq(xfer_dir_member(p.dir, late, 0, &e),
                         XFER_ERR_NOT_FOUND);
        xfer_dir_state st;
        ck_assert_int_eq(xfer_dir_state_get_latest(p.dir, &st), 0);
        ck_assert_uint_eq(st.members, 0);
        ck_assert(xfer_tcp_gone(p.tcp, 0));
        submit4(&p, 1);
        ck_assert_int_eq(p.gone, 4);
        /* The shard registers: the transport follows. */
        mp_proc x;
        shard_start(&x, &c, late);
        ck_assert(mp_run_while(p.base, tcp_up, p.tcp, WAIT_MS));
        submit4(&p, 5);
        ck_assert_int_eq(p.ok, 4);
        member_seen m = {0};
        ck_assert_int_eq(xfer_dir_watch(p.dir, late, on_member, &m), 0);
        ck_assert(mp_run_while(p.base, have_member, &m, WAIT_MS));
        /* An outage: etcd stopped.  Every call still answers, the member
         * stays, and transfers flow. */
        etcd_signal(&c, 0, SIGSTOP);
        ck_assert(mp_run_while(p.base, dir_down, p.dir, WAIT_MS));
        ck_assert_int_eq(xfer_dir_member(p.dir, late, 0, &e), 0);
        ck_assert_uint_eq(e.port, x.port);
        ck_assert_int_eq(xfer_dir_unwatch(p.dir, late, on_member, &m), 0);
        ck_assert_int_eq(xfer_dir_watch(p.dir, late, on_member, &m), 0);
        xfer_dir_entry mine = {.shard = 3, .port = 9, .epoch = 1,
                               .transports = XFER_DIR_TCP};
        strcpy(mine.addr, "127.0.0.1");
        ck_assert_int_eq(xfer_dir_register(p.dir, "other", &mine), 0);
        submit4(&p, 9);
        ck_assert_int_eq(p.ok, 4);
        ck_assert(!xfer_tcp_gone(p.tcp, 0));
        /* Unregister during the outage: done comes (not ok), once. */
        unreg_called = false;
        ck_assert_int_eq(xfer_dir_unregister(p.dir, on_unreg, NULL), 0);
        ck_assert(!unreg_called);
        ck_assert_int_eq(xfer_dir_unregister(p.dir, on_unreg, NULL),
                         XFER_ERR_STATE);
        ck_assert_int_eq(xfer_dir_register(p.dir, "other", &mine),
                         XFER_ERR_INVALID_ARG);
        etcd_signal(&c, 0, SIGCONT);
        ck_assert(mp_run_until(p.base, &unreg_called, WAIT_MS));
        /* After unwatch: the watch is gone, the transport's stays. */
        ck_assert_int_eq(xfer_dir_unwatch(p.dir, late, on_member, &m), 0);
        ck_assert_int_eq(xfer_dir_unwatch(p.dir, late, on_member, &m),
                         XFER_ERR_NOT_FOUND);
        ck_assert_int_eq(xfer_dir_member(p.dir, late, 0, &e), 0);
        ck_assert_int_eq(xfer_dir_member(p.dir, "never", 0, &e),
                         XFER_ERR_NOT_FOUND);
        ck_assert_int_eq(xfer_dir_state_get_latest(p.dir, &st), 0);
        ck_assert_uint_eq(st.registered, 0);
        ck_assert_uint_eq(st.members, 1);
        mp_kill(&x, SIGKILL);
        prod_free(&p, owner ? TCP_ENGINE_DIR : ENGINE_TCP_DIR);
    }
    etcd_stop(&c);
}
END_TEST

START_TEST(test_dir_api_full_tables)
{
    etcd_cluster c;
    ck_assert_int_eq(etcd_start(&c, 1), 0);
    struct event_base *base = event_base_new();
    /* A version 1 config (before watch_timeout_ns) still works; an
     * unknown version is refused. */
    xfer_dir_config v;
    xfer_dir_config_default(&v);
    ck_assert_uint_eq(v.version, XFER_DIR_CONFIG_VERSION);
    ck_assert_uint_eq(v.watch_timeout_ns, 1800000000000ull);
    v.endpoints = c.endpoints;
    v.version = 1;
    xfer_dir *old = NULL;
    ck_assert_int_eq(xfer_dir_new(base, &v, &old), 0);
    xfer_dir_del(old);
    v.version = XFER_DIR_CONFIG_VERSION + 1;
    ck_assert_int_eq(xfer_dir_new(base, &v, &old), XFER_ERR_INVALID_ARG);
    /* dir.h: a prefix "empty or longer than 128 bytes" is refused, 128 is
     * not (issue 30's dir.c:648 survivor took 129); so is a lease of 0 s */
    v.version = XFER_DIR_CONFIG_VERSION;
    char prefix[131];
    memset(prefix, 'p', sizeof prefix - 1);
    prefix[0] = '/';
    prefix[128] = '\0';
    v.prefix = prefix;
    ck_assert_int_eq(xfer_dir_new(base, &v, &old), 0);
    xfer_dir_del(old);
    prefix[128] = 'p';
    prefix[129] = '\0';
    ck_assert_int_eq(xfer_dir_new(base, &v, &old), XFER_ERR_INVALID_ARG);
    v.prefix = "";
    ck_assert_int_eq(xfer_dir_new(base, &v, &old), XFER_ERR_INVALID_ARG);
    v.prefix = "/xfer/groups/";
    v.lease_ttl_s = 0;
    ck_assert_int_eq(xfer_dir_new(base, &v, &old), XFER_ERR_INVALID_ARG);
    xfer_dir *d = dir_new(base, c.endpoints);
    member_seen m[17];
    memset(m, 0, sizeof m);
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(xfer_dir_watch(d, "full", on_member, &m[i]), 0);
    ck_assert_int_eq(xfer_dir_watch(d, "full", on_member, &m[16]),
                     XFER_ERR_BUSY);
    for (int i = 1; i < 16; i++)
        ck_assert_int_eq(xfer_dir_unwatch(d, "full", on_member, &m[i]), 0);
    xfer_dir_entry e = {.port = 9, .epoch = 1, .transports = XFER_DIR_TCP};
    strcpy(e.addr, "127.0.0.1");
    for (int i = 0; i < 64; i++) {
        e.shard = (uint16_t)i;
        ck_assert_int_eq(xfer_dir_register(d, "regs", &e), 0);
    }
    ck_assert_int_eq(xfer_dir_register(d, "regs", &e), XFER_ERR_BUSY);
    e.shard = 64;
    ck_assert_int_eq(xfer_dir_register(d, "regs", &e), XFER_ERR_INVALID_ARG);
    /* 70 entries in etcd: 64 kept, 6 ignored with one line each. */
    for (int k = 0; k < 70; k++) {
        char key[64], val[160];
        snprintf(key, sizeof key, "/xfer/groups/full/%d", k);
        snprintf(val, sizeof val, "{\"shard\":%d,\"addr\":\"127.0.0.1\","
                 "\"port\":%d,\"transports\":1,\"epoch\":1}", k, 1000 + k);
        ck_assert_int_eq(etcd_put(&c, 0, key, val), 0);
    }
    log_lines = 0;
    xfer_dir_state st = {0};
    for (int i = 0; i < 200 && st.members < 64; i++) {
        struct timeval tv = {0, 50000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
        xfer_dir_state_get_latest(d, &st);
    }
    struct timeval tv = {0, 300000}; /* the rest of the events */
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
    xfer_dir_state_get_latest(d, &st);
    ck_assert_uint_eq(st.members, 64);
    ck_assert_int_eq(m[0].reports, 64);
    ck_assert_uint_eq(st.bad_entries, 6);
    ck_assert_int_eq(log_lines, 6);
    xfer_dir_member_info info[70];
    size_t n = 0, total = 0;
    ck_assert_int_eq(xfer_dir_members_get(d, info, 10, &n, &total), 0);
    ck_assert_uint_eq(n, 10);
    ck_assert_uint_eq(total, 64);
    ck_assert_uint_eq(info[9].e.port, 1009);
    ck_assert_int_eq(xfer_dir_members_get(d, NULL, 1, &n, &total),
                     XFER_ERR_INVALID_ARG);
    /* The group read again (a new watch, as after a lost or silent
     * stream): the refused entries are counted again, not logged again. */
    ck_assert_int_eq(xfer_dir_unwatch(d, "full", on_member, &m[0]), 0);
    memset(&m[0], 0, sizeof m[0]);
    ck_assert_int_eq(xfer_dir_watch(d, "full", on_member, &m[0]), 0);
    for (int i = 0; i < 200 && m[0].reports < 64; i++) {
        struct timeval t2 = {0, 50000};
        event_base_loopexit(base, &t2);
        event_base_dispatch(base);
    }
    ck_assert_int_eq(m[0].reports, 64);
    xfer_dir_state_get_latest(d, &st);
    ck_assert_uint_eq(st.bad_entries, 12);
    ck_assert_int_eq(log_lines, 6);
    ck_assert_int_eq(xfer_dir_registered_get(d, info, 70, &n, &total), 0);
    ck_assert_uint_eq(n, 64);
    ck_assert_str_eq(info[63].group, "regs");
    xfer_dir_del(d);
    event_base_free(base);
    etcd_stop(&c);
}
END_TEST

/* dir.h: a group name of digits below 2^32 is its own number, any other
 * name its 32-bit FNV-1a hash (so xferd --group NAME and a producer
 * agree).  The bound is exact: 4294967295 is a number, 4294967296 a name
 * (issue 30's dir.c:790 mutant made it 0). */
static uint32_t fnv1a(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

START_TEST(test_dir_api_group_id)
{
    ck_assert_uint_eq(xfer_dir_group_id("0"), 0);
    ck_assert_uint_eq(xfer_dir_group_id("12"), 12);
    ck_assert_uint_eq(xfer_dir_group_id("007"), 7);
    ck_assert_uint_eq(xfer_dir_group_id("4294967295"), 4294967295u);
    const char *names[] = {"4294967296", "99999999999999999999", "", "a",
                           "prefill-0", "12a", "-1"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        ck_assert_msg(xfer_dir_group_id(names[i]) == fnv1a(names[i]),
                      "group '%s'", names[i]);
    ck_assert_uint_eq(xfer_dir_group_id(NULL), 0);
}
END_TEST

int main(void)
{
    if (!etcd_binary()) {
        const char *ci = getenv("CI");
        fprintf(stderr, "test_dir_api: no etcd binary (Debian's "
                "etcd-server)%s\n", ci && *ci ? ": required in CI"
                                             : ", skipped");
        return ci && *ci ? 1 : 77;
    }
    Suite *s = suite_create("dir_api");
    TCase *tc = tcase_create("dir_api");
    tcase_set_timeout(tc, 200);
    tcase_add_test(tc, test_dir_api_teardown);
    tcase_add_test(tc, test_dir_api_calls);
    tcase_add_test(tc, test_dir_api_full_tables);
    tcase_add_test(tc, test_dir_api_group_id);
    suite_add_tcase(s, tc);
    int rc = tu_run(s);
    mp_kill_all();
    return rc;
}
