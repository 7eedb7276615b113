/*
 * tests/trace/test_ctl.c - the control socket: a snapshot per connection
 * (fake snapshot first, then a running engine whose shards never answer),
 * `xfer-trace stuck --live` reading it, and the socket's bad cases (path
 * too long, a non-socket file in the way, a stale socket, a client that
 * leaves without reading).
 *
 * The loop is pumped with EVLOOP_NONBLOCK while the client (this process,
 * or an xfer-trace child) talks to it, so no test needs a thread or a
 * wall-clock wait.  argv[1] is the xfer-trace binary.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "ctlclient.h"
#include "testutil.h"
#include "xfer/ctl.h"
#include "xfer/xfer.h"

static const char *xfer_trace_bin;
static char sock[64];

static void setup(void)
{
    snprintf(sock, sizeof sock, "/tmp/xfer-ctl-%ld.sock", (long)getpid());
    unlink(sock);
}

static void teardown(void)
{
    unlink(sock);
}

static xfer_transfer_view fake_view(uint64_t id, uint8_t state)
{
    xfer_transfer_view v = {.id = id, .attempt = (uint32_t)id,
                            .state = state, .nshards = 3,
                            .started_ns = 1000, .deadline_ns = 5000,
                            .pending = 1};
    for (unsigned k = 0; k < 3; k++)
        v.shards[k] = (xfer_shard_view){.resv = XFER_SUB_OK,
                                        .write = XFER_SUB_OK};
    v.shards[1].write = XFER_SUB_PENDING;
    return v;
}

static void fake_snapshot(void *ud, xfer_ctl_reply *rep)
{
    int *calls = ud;
    (*calls)++;
    xfer_transfer_view v = fake_view(7, XFER_TRANSFER_STATE_WRITING);
    ck_assert_int_eq(xfer_ctl_put_transfer(rep, &v, 3000), 0);
    v = fake_view(9, XFER_TRANSFER_STATE_WRITING);
    ck_assert_int_eq(xfer_ctl_put_transfer(rep, &v, 1500), 0);
    ck_assert_int_eq(xfer_ctl_put_reservation(rep, 2, 11, 4, XFER_RESV_STATE_READY,
                                              100, 2100),
                     0);
    ck_assert_int_eq(xfer_ctl_put_reservation(rep, 2, 12, 4,
                                              XFER_RESV_STATE_CANCELLED, 100, 2100),
                     0);
}

START_TEST(test_ctl_fake_snapshot)
{
    struct event_base *base = event_base_new();
    int calls = 0;
    xfer_ctl *ctl;
    ck_assert_int_eq(xfer_ctl_open(base, sock, fake_snapshot, &calls, &ctl),
                     0);
    char *r = ctl_fetch(base, sock);
    ck_assert_int_eq(calls, 1);
    ck_assert_ptr_eq(strstr(r, "{\"xfer_ctl\":1}\n"), r);
    ck_assert_ptr_nonnull(strstr(
        r, "{\"kind\":\"transfer\",\"id\":7,\"attempt\":7,\"state\":"
           "\"WRITING\",\"age_ns\":2000,\"deadline_in_ns\":2000,"
           "\"pending\":1,\"nshards\":3,\"waiting\":\"1\""));
    ck_assert_ptr_nonnull(strstr(r, "\"deadline_in_ns\":3500"));
    ck_assert_ptr_nonnull(strstr(
        r, "{\"shard\":1,\"resv\":\"ok\",\"write\":\"pending\",\"commit\":"
           "\"none\",\"cancel\":\"none\",\"cancel_attempts\":0,\"waits\":"
           "\"write\"}"));
    ck_assert_ptr_nonnull(strstr(
        r, "{\"kind\":\"reservation\",\"shard\":2,\"id\":11,\"attempt\":4,"
           "\"state\":\"READY\",\"age_ns\":2000,\"waits\":\"take\"}"));
    ck_assert_ptr_null(strstr(r, "\"id\":12"));
    ck_assert_ptr_nonnull(
        strstr(r, "{\"kind\":\"end\",\"transfers\":2,\"reservations\":1}\n"));
    free(r);
    r = ctl_fetch(base, sock);
    ck_assert_int_eq(calls, 2);
    ck_assert_uint_eq(xfer_ctl_served(ctl), 2);
    free(r);
    xfer_ctl_close(ctl);
    ck_assert_int_ne(access(sock, F_OK), 0);
    event_base_free(base);
}
END_TEST

/* Run xfer-trace with args while pumping the loop; return its stdout. */
static char *run_tool(struct event_base *base, char *const argv[], int *rc)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    size_t n = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    for (;;) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        poll(&pf, 1, 1);
        ssize_t got = read(p[0], buf + n, cap - n - 1);
        if (got == 0)
            break;
        if (got > 0)
            n += (size_t)got;
    }
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    buf[n] = '\0';
    return buf;
}

START_TEST(test_ctl_stuck_live_tool)
{
    struct event_base *base = event_base_new();
    int calls = 0, rc;
    xfer_ctl *ctl;
    ck_assert_int_eq(xfer_ctl_open(base, sock, fake_snapshot, &calls, &ctl),
                     0);
    char *const argv[] = {(char *)xfer_trace_bin, "stuck", "--live", sock,
                          "--older-than", "1us", NULL};
    char *out = run_tool(base, argv, &rc);
    ck_assert_int_eq(rc, 0);
    char want[256];
    snprintf(want, sizeof want,
             "2 open transfers or reservations older than 0.000001s "
             "(live %s)\n",
             sock);
    ck_assert_str_eq(strncmp(out, want, strlen(want)) == 0 ? want : out,
                     want);
    ck_assert_ptr_nonnull(strstr(
        out, "transfer 7 attempt 7: WRITING for 0.000002s (deadline in "
             "0.000002s), waits on 1 of 3 shards: 1\n  shard 1: write in "
             "flight"));
    ck_assert_ptr_nonnull(strstr(
        out, "reservation 11 attempt 4 on shard 2: READY for 0.000002s, "
             "waits on take\n"));
    /* transfer 9 is 0.5 us old: left out; equal ages go by id */
    ck_assert_ptr_null(strstr(out, "transfer 9 "));
    const char *t7 = strstr(out, "transfer 7 ");
    const char *r11 = strstr(out, "reservation 11 ");
    ck_assert(t7 && r11 && t7 < r11);
    free(out);
    xfer_ctl_close(ctl);
    event_base_free(base);
}
END_TEST

START_TEST(test_ctl_bad_paths)
{
    struct event_base *base = event_base_new();
    int calls = 0;
    xfer_ctl *ctl = (xfer_ctl *)&ctl;
    char longp[200];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    ck_assert_int_eq(xfer_ctl_open(base, longp, fake_snapshot, &calls, &ctl),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_ctl_open(NULL, sock, fake_snapshot, &calls, &ctl),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_ctl_open(base, sock, NULL, &calls, &ctl),
                     XFER_ERR_INVALID_ARG);
    FILE *f = fopen(sock, "w");
    fclose(f);
    ck_assert_int_eq(xfer_ctl_open(base, sock, fake_snapshot, &calls, &ctl),
                     XFER_ERR_EXISTS);
    ck_assert_int_eq(access(sock, F_OK), 0); /* not removed */
    ck_assert_ptr_eq(ctl, (xfer_ctl *)&ctl);
    unlink(sock);
    ck_assert_int_eq(xfer_ctl_open(base, "/nonexistent/dir/s", fake_snapshot,
                                   &calls, &ctl),
                     XFER_ERR_IO);
    /* a stale socket (its owner died without closing) is replaced */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, sock);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    close(fd);
    ck_assert_int_eq(xfer_ctl_open(base, sock, fake_snapshot, &calls, &ctl),
                     0);
    free(ctl_fetch(base, sock));
    ck_assert_int_eq(calls, 1);
    xfer_ctl_close(ctl);
    xfer_ctl_close(NULL);
    event_base_free(base);
}
END_TEST

static void big_snapshot(void *ud, xfer_ctl_reply *rep)
{
    for (uint64_t id = 1; id <= 20000; id++) {
        xfer_transfer_view v = fake_view(id, XFER_TRANSFER_STATE_RESERVING);
        xfer_ctl_put_transfer(rep, &v, 2000);
    }
}

/* A client that leaves without reading must cost nothing but its
 * connection: no SIGPIPE (the default action would kill this process). */
START_TEST(test_ctl_client_leaves_early)
{
    struct event_base *base = event_base_new();
    xfer_ctl *ctl;
    ck_assert_int_eq(xfer_ctl_open(base, sock, big_snapshot, NULL, &ctl), 0);
    for (int i = 0; i < 3; i++) {
        int fd = ctl_connect(sock);
        event_base_loop(base, EVLOOP_NONBLOCK);
        close(fd);
        for (int s = 0; s < 100; s++)
            event_base_loop(base, EVLOOP_NONBLOCK);
    }
    ck_assert_uint_eq(xfer_ctl_served(ctl), 3);
    char *r = ctl_fetch(base, sock);
    ck_assert_ptr_nonnull(strstr(r, "\"transfers\":20000"));
    free(r);
    xfer_ctl_close(ctl);
    event_base_free(base);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* A running engine whose shards never answer                              */
/* ---------------------------------------------------------------------- */

typedef struct mute_tp {
    xfer_engine *e;
    uint32_t started;
    xfer_action ops[16]; /* started, not yet answered */
    uint8_t aborted[16];
    unsigned n;
} mute_tp;

static uint16_t mute_nshards(void *self)
{
    return 2;
}

static int mute_attach(void *self, struct xfer_engine *e, uint32_t group)
{
    ((mute_tp *)self)->e = e;
    return 0;
}

static int mute_start(void *self, const xfer_action *a, const void *src)
{
    mute_tp *t = self;
    ck_assert_uint_lt(t->n, 16);
    t->aborted[t->n] = 0;
    t->ops[t->n++] = *a;
    t->started++;
    return 0;
}

static void mute_abort(void *self, const xfer_action *a)
{
    mute_tp *t = self;
    for (unsigned i = 0; i < t->n; i++)
        if (t->ops[i].shard == a->shard && t->ops[i].kind == a->op)
            t->aborted[i] = 1;
}

/* Answer every outstanding op (outside any engine call): aborted ones
 * with ABORTED, the others with success. */
static void answer_all(mute_tp *t)
{
    unsigned n = t->n;
    xfer_action ops[16];
    uint8_t ab[16];
    memcpy(ops, t->ops, sizeof ops);
    memcpy(ab, t->aborted, sizeof ab);
    t->n = 0;
    for (unsigned i = 0; i < n; i++) {
        xfer_shard_result r = {.id = ops[i].id, .attempt = ops[i].attempt,
                               .shard = ops[i].shard, .op = ops[i].kind,
                               .status = ab[i] ? XFER_ERR_ABORTED : 0,
                               .resv_id = 5};
        xfer_engine_deliver(t->e, &r);
    }
}

static int mute_pool_added(void *self, uint32_t pool, void *b, size_t l)
{
    return 0;
}
static void mute_pool_removed(void *self, uint32_t pool) {}
static void mute_detach(void *self) {}

static const xfer_transport_ops mute_ops = {
    XFER_TRANSPORT_OPS_VERSION, "mute", mute_nshards, mute_attach,
    mute_start, mute_abort, mute_pool_added, mute_pool_removed, mute_detach};

static uint64_t fake_now;
static uint64_t fake_clock(void *ud)
{
    return fake_now;
}

static void never_cb(void *ud, const xfer_result *res)
{
    (*(int *)ud)++;
}

static void shutdown_cb(void *ud)
{
    *(int *)ud = 1;
}

START_TEST(test_ctl_engine_live_snapshot)
{
    struct event_base *base = event_base_new();
    fake_now = 1000000000ull;
    xfer_engine_config cfg;
    xfer_engine_config_default(&cfg);
    cfg.base = base;
    cfg.clock = fake_clock;
    xfer_engine *e;
    ck_assert_int_eq(xfer_engine_new(&cfg, &e), 0);
    static uint8_t mem[8192];
    uint32_t pool, group;
    ck_assert_int_eq(xfer_engine_register_pool(e, mem, sizeof mem, &pool), 0);
    mute_tp tp = {0};
    ck_assert_int_eq(
        xfer_engine_add_group(e, (xfer_transport){&mute_ops, &tp}, &group),
        0);
    xfer_slice sl[2] = {{0, 100}, {4096, 100}};
    int done = 0;
    xfer_transfer_desc d = {.id = 42, .group = group, .pool = pool,
                            .nslices = 2, .slices = sl};
    ck_assert_int_eq(xfer_engine_submit(e, &d, never_cb, &done), 0);
    event_base_loop(base, EVLOOP_NONBLOCK);
    ck_assert_uint_eq(tp.started, 2);
    xfer_ctl *ctl;
    ck_assert_int_eq(xfer_engine_ctl_open(e, sock, &ctl), 0);
    fake_now += 3000000000ull;
    char *r = ctl_fetch(base, sock);
    ck_assert_ptr_nonnull(strstr(
        r, "{\"kind\":\"transfer\",\"id\":42,\"attempt\":1,\"state\":"
           "\"RESERVING\",\"age_ns\":3000000000,"));
    ck_assert_ptr_nonnull(strstr(r, "\"waiting\":\"0,1\""));
    free(r);
    /* shard 0 answers its reserve; only shard 1 is still waited for */
    xfer_shard_result res = {.id = 42, .attempt = tp.ops[0].attempt,
                             .shard = tp.ops[0].shard, .op = XFER_OP_RESERVE,
                             .resv_id = 5};
    ck_assert_uint_eq(tp.ops[0].shard, 0);
    tp.ops[0] = tp.ops[1];
    tp.n = 1;
    xfer_engine_deliver(e, &res);
    r = ctl_fetch(base, sock);
    ck_assert_ptr_nonnull(strstr(r, "\"waiting\":\"1\""));
    ck_assert_ptr_nonnull(strstr(
        r, "{\"shard\":0,\"resv\":\"ok\",\"write\":\"none\""));
    ck_assert_ptr_nonnull(strstr(r, "\"transfers\":1,"));
    free(r);
    xfer_ctl_close(ctl);
    ck_assert_int_eq(done, 0);
    int down = 0;
    ck_assert_int_eq(xfer_engine_shutdown(e, shutdown_cb, &down), 0);
    for (int i = 0; i < 1000 && !down; i++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        answer_all(&tp);
    }
    ck_assert_int_eq(down, 1);
    ck_assert_int_eq(done, 1);
    xfer_engine_del(e);
    event_base_free(base);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ctl");
    TCase *tc = tcase_create("ctl");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_ctl_fake_snapshot);
    tcase_add_test(tc, test_ctl_stuck_live_tool);
    tcase_add_test(tc, test_ctl_bad_paths);
    tcase_add_test(tc, test_ctl_client_leaves_early);
    tcase_add_test(tc, test_ctl_engine_live_snapshot);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    xfer_trace_bin = argc > 1 ? argv[1] : "xfer-trace";
    return tu_run(suite());
}
