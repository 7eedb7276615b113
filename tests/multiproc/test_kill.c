/*
 * tests/multiproc/test_kill.c - processes die with kill -9.
 *
 * test_kill_shard: one of 4 xferd is killed while transfers are in flight.
 * Every transfer that fails names that shard (bit set in failed_shards);
 * the surviving shards are rolled back by cancels, well before any lease
 * could expire (TTL 60 s), so their pools are full again; after a restart
 * on the same port, new transfers succeed.
 *
 * test_kill_producer: a producer process is killed while its transfers are
 * in flight; every reservation on every shard is freed within the lease TTL
 * (plus timer slack).  And a write in flight holds its region past the TTL
 * until the write ends: a raw client that sent half a write and stalls
 * keeps the region pinned after the TTL; killing it ends the write and
 * frees the region.
 */
#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "mp.h"
#include "testutil.h"

#define NSHARDS 4
#define VICTIM 2

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void start_daemons(mp_proc *d, uint16_t *ports, const char *ttl,
                          bool consume)
{
    for (int k = 0; k < NSHARDS; k++) {
        char shard[8];
        snprintf(shard, sizeof shard, "%d", k);
        const char *args[] = {"--shards", shard, "--pool", "64M",
                              "--lease-ttl", ttl, "--quiet",
                              consume ? "--consume" : NULL, NULL};
        ck_assert_int_eq(mp_xferd(&d[k], ports ? ports[k] : 0, args), 0);
        if (ports)
            ports[k] = d[k].port;
    }
}

/* ---------------------------------------------------------------------- */
/* A transfer pump                                                         */
/* ---------------------------------------------------------------------- */

typedef struct pump {
    mp_producer p;
    uint32_t slice, inflight, live;
    uint64_t next_id;
    bool stop;
    uint32_t ok, failed, unnamed, bad_mask;
    uint32_t *free_slots, nfree;
    int notify_fd;       /* write a byte after notify_after completions */
    uint32_t notify_after;
} pump;

static void pump_submit(pump *u);

static void pump_done(void *ud, const xfer_result *res)
{
    pump *u = ud;
    u->live--;
    u->free_slots[u->nfree++] = (uint32_t)res->user_data;
    if (res->status == 0) {
        u->ok++;
    } else {
        u->failed++;
        if (!(res->failed_shards & (1u << VICTIM)))
            u->unnamed++;
        u->bad_mask |= (uint32_t)res->failed_shards;
    }
    if (u->notify_fd >= 0 && u->ok + u->failed == u->notify_after) {
        (void)!write(u->notify_fd, "x", 1);
    }
    if (!u->stop)
        pump_submit(u);
}

static void pump_submit(pump *u)
{
    uint32_t slot = u->free_slots[--u->nfree];
    xfer_slice sl[NSHARDS];
    for (int k = 0; k < NSHARDS; k++) {
        sl[k].off = ((uint64_t)slot * NSHARDS + (uint64_t)k) * u->slice;
        sl[k].len = u->slice;
    }
    xfer_transfer_desc d = {.id = ++u->next_id, .group = u->p.group,
                            .pool = u->p.pool, .nslices = NSHARDS,
                            .slices = sl, .user_data = slot};
    ck_assert_int_eq(xfer_engine_submit(u->p.e, &d, pump_done, u), 0);
    u->live++;
}

static void pump_init(pump *u, const uint16_t *ports, uint32_t slice,
                      uint32_t inflight)
{
    memset(u, 0, sizeof *u);
    u->slice = slice;
    u->inflight = inflight;
    u->notify_fd = -1;
    u->free_slots = calloc(inflight, sizeof *u->free_slots);
    for (uint32_t i = 0; i < inflight; i++)
        u->free_slots[u->nfree++] = i;
    ck_assert_int_eq(mp_producer_new(&u->p, ports, NSHARDS,
                                     (size_t)inflight * NSHARDS * slice,
                                     10000000000ull), 0);
    ck_assert(mp_producer_wait_connected(&u->p, 10000));
}

static void pump_start(pump *u)
{
    u->stop = false;
    while (u->nfree)
        pump_submit(u);
}

static bool pump_progress(void *ud)
{
    pump *u = ud;
    return u->ok + u->failed >= u->notify_after;
}

static bool pump_idle(void *ud)
{
    return ((pump *)ud)->live == 0;
}

START_TEST(test_kill_shard)
{
    mp_proc d[NSHARDS];
    uint16_t ports[NSHARDS] = {0};
    start_daemons(d, ports, "60s", true);
    static pump u;
    pump_init(&u, ports, 256u << 10, 32);
    u.notify_after = 200;
    pump_start(&u);
    ck_assert(mp_run_while(u.p.base, pump_progress, &u, 60000));
    ck_assert_uint_eq(u.failed, 0);
    mp_kill(&d[VICTIM], SIGKILL);
    /* Keep going a little on the dead shard, then let everything end. */
    u.notify_after = u.ok + u.failed + 100;
    ck_assert(mp_run_while(u.p.base, pump_progress, &u, 60000));
    u.stop = true;
    ck_assert(mp_run_while(u.p.base, pump_idle, &u, 60000));
    printf("kill shard: %u ok, %u failed, %u without the shard named\n",
           u.ok, u.failed, u.unnamed);
    ck_assert_uint_gt(u.failed, 0);
    ck_assert_uint_eq(u.unnamed, 0);
    ck_assert_uint_eq(u.bad_mask & ~(1u << VICTIM), 0);
    for (int k = 0; k < NSHARDS; k++) {
        if (k == VICTIM)
            continue;
        xfer_wire_status st;
        ck_assert_int_eq(mp_wait_pool_free(ports[k], 10000, &st), 0);
        ck_assert_uint_eq(st.expiries, 0); /* rolled back, not expired */
    }
    /* Restart the victim on its port: new transfers succeed. */
    const char *args[] = {"--shards", "2", "--pool", "64M", "--lease-ttl",
                          "60s", "--quiet", "--consume", NULL};
    ck_assert_int_eq(mp_xferd(&d[VICTIM], ports[VICTIM], args), 0);
    ck_assert(mp_producer_wait_connected(&u.p, 20000));
    uint32_t ok0 = u.ok;
    u.failed = 0;
    u.notify_after = u.ok + 100;
    pump_start(&u);
    ck_assert(mp_run_while(u.p.base, pump_progress, &u, 60000));
    u.stop = true;
    ck_assert(mp_run_while(u.p.base, pump_idle, &u, 60000));
    ck_assert_uint_ge(u.ok - ok0, 100);
    ck_assert_uint_eq(u.failed, 0);
    ck_assert(mp_producer_del(&u.p, 30000));
    for (int k = 0; k < NSHARDS; k++) {
        xfer_wire_status st;
        ck_assert_int_eq(mp_wait_pool_free(ports[k], 10000, &st), 0);
    }
    free(u.free_slots);
    mp_kill_all();
}
END_TEST

/* The producer child: pump transfers forever; signal after 50 done. */
static void producer_child(const uint16_t *ports, int fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    static pump u;
    pump_init(&u, ports, 1u << 20, 16);
    u.notify_fd = fd;
    u.notify_after = 50;
    pump_start(&u);
    event_base_dispatch(u.p.base);
    _exit(0);
}

/* A raw client that reserves, sends half a write, and stalls. */
static void stalled_writer(uint16_t port, int fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int c = mp_connect(port);
    if (c < 0 || mp_hello(c, 0) != 0)
        _exit(1);
    xfer_wire_msg m = {.type = XFER_WIRE_T_RESERVE, .id = 4242,
                       .attempt = 1, .len = 1u << 20};
    xfer_wire_hdr h;
    xfer_wire_msg r;
    if (tw_send_msg(c, &m, 2, NULL) || tw_recv_msg(c, &h, &r) ||
        r.type != XFER_WIRE_T_RESERVE_OK)
        _exit(1);
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    static uint8_t half[1u << 19];
    xfer_wire_msg w = {.type = XFER_WIRE_T_WRITE, .id = 4242, .attempt = 1,
                       .len = 1u << 20, .resv_id = r.resv_id};
    size_t n = xfer_wire_encode(&w, 3, buf, sizeof buf);
    if (tw_send_all(c, buf, n) || tw_send_all(c, half, sizeof half))
        _exit(1);
    (void)!write(fd, "x", 1);
    for (;;)
        pause();
}

static pid_t spawn(void (*fn)(const uint16_t *, int), const uint16_t *ports,
                   int *rfd)
{
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(pfd[0]);
        fn(ports, pfd[1]);
    }
    close(pfd[1]);
    mp_track(pid);
    *rfd = pfd[0];
    return pid;
}

static void stalled_entry(const uint16_t *ports, int fd)
{
    stalled_writer(ports[0], fd);
}

START_TEST(test_kill_producer)
{
    mp_proc d[NSHARDS];
    uint16_t ports[NSHARDS] = {0};
    const int ttl_ms = 2000;
    start_daemons(d, ports, "2s", false);
    int rfd;
    char b;
    pid_t prod = spawn(producer_child, ports, &rfd);
    ck_assert_int_eq(read(rfd, &b, 1), 1); /* transfers are flowing */
    close(rfd);
    kill(prod, SIGKILL);
    waitpid(prod, NULL, 0);
    uint64_t killed = mp_now_ms();
    xfer_wire_status st;
    ck_assert_int_eq(mp_status(ports[0], &st), 0);
    ck_assert_uint_gt(st.live, 0); /* it left reservations behind */
    for (int k = 0; k < NSHARDS; k++) {
        uint64_t left = killed + (uint64_t)ttl_ms + 1500 - mp_now_ms();
        ck_assert_int_eq(mp_wait_pool_free(ports[k], (int)left, &st), 0);
    }
    /* A write in flight holds its region past the TTL. */
    ck_assert_int_eq(mp_status(ports[0], &st), 0);
    uint64_t expired0 = st.expiries;
    pid_t w = spawn(stalled_entry, ports, &rfd);
    ck_assert_int_eq(read(rfd, &b, 1), 1);
    close(rfd);
    sleep_ms(ttl_ms + 700);
    ck_assert_int_eq(mp_status(ports[0], &st), 0);
    ck_assert_uint_ge(st.bytes_in_use, 1u << 20);
    ck_assert_uint_ge(st.live, 1); /* lease ran out, region still pinned */
    kill(w, SIGKILL);
    waitpid(w, NULL, 0);
    ck_assert_int_eq(mp_wait_pool_free(ports[0], 3000, &st), 0);
    ck_assert_uint_le(st.expiries, expired0 + 1);
    mp_kill_all();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kill");
    TCase *tc = tcase_create("kill");
    tcase_set_timeout(tc, 200);
    tcase_add_test(tc, test_kill_shard);
    tcase_add_test(tc, test_kill_producer);
    suite_add_tcase(s, tc);
    int rc = tu_run(s);
    mp_kill_all();
    return rc;
}
