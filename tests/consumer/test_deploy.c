/*
 * tests/consumer/test_deploy.c - a deployment of separate processes seen
 * from outside, the way an operator sees it.
 *
 * test_deploy_merged_trace_names_stuck_shard: 4 xferd --shm --trace
 *   processes, a producer and a consumer (in this process, each with its
 *   own trace file).  Shard 2 is stopped (SIGSTOP): transfer 1 hangs in
 *   RESERVING on it, and id 2, committed by hand on shards 0, 1 and 3,
 *   leaves the consumer waiting for shard 2.  `xfer-trace stuck` over the
 *   six files names shard 2 for both, from the producer's, the shards' and
 *   the consumer's records; `stuck --live` on the consumer's control
 *   socket names it too.
 * test_deploy_metrics_match_status: `xferd --metrics` answers with valid
 *   exposition text whose counters are the ones STATUS reports.
 */
#define _DEFAULT_SOURCE
#include <check.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "mp.h"
#include "prom.h"
#include "testutil.h"
#include "xfer/consumer.h"
#include "xfer/ctl.h"
#include "xfer/shm.h"
#include "xfer/tcp.h"
#include "xfer/tracefile.h"
#include "xfer/xfer.h"

#define S 4

static char dir[256], shm[64];
static mp_proc d[S];
static uint16_t ports[S];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/xfer-deploy-%d", (int)getpid());
    snprintf(shm, sizeof shm, "xfer-deploy-%d", (int)getpid());
    mkdir(dir, 0700);
}

static void teardown(void)
{
    for (int k = 0; k < S; k++)
        if (d[k].pid > 0)
            kill(d[k].pid, SIGCONT);
    mp_kill_all();
    for (uint16_t k = 0; k < S; k++)
        xfer_shm_unlink(shm, k);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    (void)!system(cmd);
}

static void start_shard(int k, const char *extra1, const char *extra2)
{
    char shard[8], trace[300];
    snprintf(shard, sizeof shard, "%d", k);
    snprintf(trace, sizeof trace, "%s/shard%d.xtr", dir, k);
    const char *args[] = {"--shards", shard, "--pool", "8M", "--lease-ttl",
                          "30s", "--shm", shm, "--trace", trace, "--quiet",
                          extra1, extra2, NULL};
    ck_assert_int_eq(mp_xferd(&d[k], 0, args), 0);
    ports[k] = d[k].port;
}

/* Run `argv` with stdout to `out` while `base` keeps running (the
 * consumer's control socket is served by it).  Returns the exit status. */
static int run_tool(struct event_base *base, const char *const *argv,
                    const char *out)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    for (uint64_t end = mp_now_ms() + 20000; mp_now_ms() < end;) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        event_base_loop(base, EVLOOP_NONBLOCK);
        usleep(2000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void spin(struct event_base *base, int ms)
{
    for (uint64_t end = mp_now_ms() + (uint64_t)ms; mp_now_ms() < end;) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        usleep(2000);
    }
}

static void on_done(void *ud, const xfer_result *r)
{
}

static void on_avail(void *ud, uint64_t id, uint32_t a, const xfer_region *g,
                     uint16_t n)
{
}

static void on_unavail(void *ud, uint64_t id, int32_t r, uint64_t m)
{
}

/* Reserve, write and commit id on shard k by hand. */
static void raw_put(int k, uint64_t id)
{
    int fd = mp_connect(ports[k]);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(mp_hello(fd, (uint16_t)k), 0);
    uint8_t data[1024];
    memset(data, 7, sizeof data);
    xfer_wire_msg m = {.type = XFER_WIRE_T_RESERVE, .id = id, .attempt = 1,
                       .len = sizeof data};
    xfer_wire_hdr h;
    xfer_wire_msg r;
    ck_assert_int_eq(tw_send_msg(fd, &m, 2, NULL), 0);
    ck_assert_int_eq(tw_recv_msg(fd, &h, &r), 0);
    ck_assert_int_eq(r.type, XFER_WIRE_T_RESERVE_OK);
    uint64_t resv = r.resv_id;
    m = (xfer_wire_msg){.type = XFER_WIRE_T_WRITE, .id = id, .attempt = 1,
                        .len = sizeof data, .resv_id = resv};
    ck_assert_int_eq(tw_send_msg(fd, &m, 3, data), 0);
    ck_assert_int_eq(tw_recv_msg(fd, &h, &r), 0);
    m = (xfer_wire_msg){.type = XFER_WIRE_T_COMMIT, .id = id, .attempt = 1,
                        .resv_id = resv};
    ck_assert_int_eq(tw_send_msg(fd, &m, 4, NULL), 0);
    ck_assert_int_eq(tw_recv_msg(fd, &h, &r), 0);
    ck_assert_int_eq(r.type, XFER_WIRE_T_COMMIT_ACK);
    close(fd);
}

START_TEST(test_deploy_merged_trace_names_stuck_shard)
{
    for (int k = 0; k < S; k++)
        start_shard(k, NULL, NULL);
    char addr[S][32];
    const char *addrs[S];
    for (int k = 0; k < S; k++) {
        snprintf(addr[k], sizeof addr[k], "127.0.0.1:%u", (unsigned)ports[k]);
        addrs[k] = addr[k];
    }
    signal(SIGPIPE, SIG_IGN);
    struct event_base *base = event_base_new();
    char ptrace[300], ctrace[300], sock[300];
    snprintf(ptrace, sizeof ptrace, "%s/producer.xtr", dir);
    snprintf(ctrace, sizeof ctrace, "%s/consumer.xtr", dir);
    snprintf(sock, sizeof sock, "%s/consumer.sock", dir);
    xfer_tracefile *ptf, *ctf;
    ck_assert_int_eq(xfer_tracefile_open(ptrace, NULL, &ptf), 0);
    ck_assert_int_eq(xfer_tracefile_open(ctrace, NULL, &ctf), 0);
    /* The consumer, with its trace and control socket. */
    xfer_consumer_config cc;
    xfer_consumer_config_default(&cc);
    cc.base = base;
    cc.nshards = S;
    cc.addrs = addrs;
    cc.available = on_avail;
    cc.unavailable = on_unavail;
    cc.trace = xfer_tracefile_sink_tagged(ctf, XFER_TRACE_SRC_CONSUMER);
    xfer_consumer *cons;
    ck_assert_int_eq(xfer_consumer_new(&cc, &cons), 0);
    xfer_ctl *ctl;
    ck_assert_int_eq(xfer_consumer_ctl_open(cons, sock, &ctl), 0);
    /* The producer. */
    static uint8_t staging[S * 4096];
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = base;
    ec.core.trace = xfer_tracefile_sink(ptf);
    xfer_engine *e;
    xfer_tcp *tcp;
    uint32_t group, pool;
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = S;
    tc.addrs = addrs;
    ck_assert_int_eq(xfer_engine_new(&ec, &e), 0);
    ck_assert_int_eq(xfer_tcp_new(base, &tc, &tcp), 0);
    ck_assert_int_eq(xfer_engine_register_pool(e, staging, sizeof staging,
                                               &pool), 0);
    ck_assert_int_eq(xfer_engine_add_group(e, xfer_tcp_transport(tcp),
                                           &group), 0);
    for (uint64_t end = mp_now_ms() + 5000; mp_now_ms() < end;) {
        int up = 0;
        for (uint16_t k = 0; k < S; k++)
            up += xfer_tcp_connected(tcp, k) + xfer_consumer_connected(cons, k);
        if (up == 2 * S)
            break;
        spin(base, 10);
    }
    /* Stop shard 2, then: transfer 1 waits on it in RESERVING; id 2 is
     * ready everywhere else, so the consumer waits on it too. */
    kill(d[2].pid, SIGSTOP);
    xfer_slice sl[S];
    for (int k = 0; k < S; k++)
        sl[k] = (xfer_slice){.off = (uint64_t)k * 4096, .len = 4096};
    xfer_transfer_desc td = {.id = 1, .group = group, .pool = pool,
                             .nslices = S, .slices = sl,
                             .timeout_ns = 60000000000ull};
    ck_assert_int_eq(xfer_engine_submit(e, &td, on_done, NULL), 0);
    for (int k = 0; k < S; k++)
        if (k != 2)
            raw_put(k, 2);
    spin(base, 400);
    xfer_tracefile_flush(ptf);
    xfer_tracefile_flush(ctf);
    usleep(300000); /* the running xferds flush every 100 ms */

    const char *tool = getenv("XFER_TRACE_BIN");
    ck_assert_ptr_nonnull(tool);
    char s0[300], s1[300], s2[300], s3[300], out[300];
    snprintf(s0, sizeof s0, "%s/shard0.xtr", dir);
    snprintf(s1, sizeof s1, "%s/shard1.xtr", dir);
    snprintf(s2, sizeof s2, "%s/shard2.xtr", dir);
    snprintf(s3, sizeof s3, "%s/shard3.xtr", dir);
    snprintf(out, sizeof out, "%s/stuck.txt", dir);
    /* From files, "now" is the newest record (nothing happens in a stuck
     * system), so every open item counts. */
    const char *argv[] = {tool, "stuck", ptrace, s0, s1, s2, s3, ctrace,
                          NULL};
    ck_assert_int_eq(run_tool(base, argv, out), 0);
    char *text = slurp(out);
    printf("%s", text);
    ck_assert_ptr_nonnull(strstr(text, "2 open transfers or consumer waits"));
    ck_assert_ptr_nonnull(strstr(text, "transfer 1 attempt 1: RESERVING"));
    ck_assert_ptr_nonnull(strstr(text, "waits on 1 of 4 shards: 2\n"));
    ck_assert_ptr_nonnull(strstr(text, "shard 2: reserve sent"));
    ck_assert_ptr_nonnull(strstr(text, "shard 2's trace: no record of this "
                                       "id"));
    ck_assert_ptr_nonnull(strstr(text, "shard 0's trace: RESERVED"));
    ck_assert_ptr_nonnull(strstr(text, "consumer waits for 2 attempt 1: "
                                       "WAITING"));
    ck_assert_ptr_nonnull(strstr(text, "shard 3's trace: READY"));
    free(text);

    const char *live[] = {tool, "stuck", "--live", sock, NULL};
    ck_assert_int_eq(run_tool(base, live, out), 0);
    text = slurp(out);
    printf("%s", text);
    ck_assert_ptr_nonnull(strstr(text, "consumer waits for 2 attempt 1: "
                                       "WAITING"));
    ck_assert_ptr_nonnull(strstr(text, "waits on 1 of 4 shards: 2 (ready "
                                       "from 0,1,3)"));
    free(text);

    kill(d[2].pid, SIGCONT);
    xfer_ctl_close(ctl);
    xfer_engine_del(e);
    xfer_tcp_del(tcp);
    xfer_consumer_del(cons);
    event_base_loop(base, EVLOOP_NONBLOCK);
    event_base_free(base);
    xfer_tracefile_close(ptf);
    xfer_tracefile_close(ctf);
}
END_TEST

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    getsockname(fd, (struct sockaddr *)&sa, &len);
    close(fd);
    return ntohs(sa.sin_port);
}

static char *http_get(uint16_t port)
{
    int fd = mp_connect(port);
    ck_assert_int_ge(fd, 0);
    const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                       "Connection: close\r\n\r\n";
    ck_assert_int_eq(tw_send_all(fd, req, sizeof req - 1), 0);
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    close(fd);
    return buf;
}

START_TEST(test_deploy_metrics_match_status)
{
    char maddr[32];
    uint16_t mport = free_port();
    snprintf(maddr, sizeof maddr, "127.0.0.1:%u", (unsigned)mport);
    start_shard(0, "--metrics", maddr);
    for (uint64_t id = 1; id <= 5; id++)
        raw_put(0, id);
    char *resp = http_get(mport);
    ck_assert_msg(strncmp(resp, "HTTP/1.1 200", 12) == 0, "%.80s", resp);
    const char *body = strstr(resp, "\r\n\r\n");
    ck_assert_ptr_nonnull(body);
    prom p;
    ck_assert_msg(prom_parse(body + 4, &p) == 0, "%s", p.err);
    xfer_wire_status st;
    ck_assert_int_eq(mp_status(ports[0], &st), 0);
    bool f;
    ck_assert_double_eq(prom_get(&p, "xfer_server_ops_total",
                                 "shard=\"0\",op=\"reserve\"", &f),
                        st.reserves);
    ck_assert(f);
    ck_assert_uint_eq(st.reserves, 5);
    ck_assert_double_eq(prom_get(&p, "xfer_server_ops_total",
                                 "shard=\"0\",op=\"commit\"", &f),
                        st.commits);
    ck_assert_double_eq(prom_get(&p, "xfer_server_pool_bytes_in_use",
                                 "shard=\"0\"", &f), st.bytes_in_use);
    ck_assert(f);
    ck_assert_double_eq(prom_get(&p, "xfer_server_reservations_live",
                                 "shard=\"0\"", &f), st.live);
    ck_assert_double_eq(prom_sum(&p, "xfer_server_bad_frames_total", ""),
                        st.bad_frames);
    prom_free(&p);
    free(resp);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("deploy");
    TCase *tc = tcase_create("deploy");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_deploy_merged_trace_names_stuck_shard);
    tcase_add_test(tc, test_deploy_metrics_match_status);
    suite_add_tcase(su, tc);
    int rc = tu_run(su);
    mp_kill_all();
    return rc;
}
