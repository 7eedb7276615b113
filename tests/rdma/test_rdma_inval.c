/*
 * tests/rdma/test_rdma_inval.c - the server's per-reservation rkeys on the
 * software fabric (suite rdma-sim), driven by hand: a raw producer speaks
 * wire frames on TCP (reserve, commit, cancel) and writes with its own RC
 * connection (tests/rdma/rc.c), so a write can be posted at any moment,
 * including after the cancel the engine would never let it race.
 *
 * What it proves, reading the shard's memory back each time: a write with
 * a reservation's rkey lands inside that region only; once the
 * reservation's cancel (or commit) was answered, its rkey is dead and a
 * write with it is refused (remote access error) and lands nothing; a new
 * reservation of the same bytes gets another rkey.  The server and this
 * raw producer share one thread: the server's loop runs while a reply or
 * CM event is awaited.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "rawwire.h"
#include "rc.h"
#include "testutil.h"
#include "wire.h"
#include "xfer/rdma.h"
#include "xfer/server.h"
#include "xfer_fabric.h"

#define MEM 65536
#define CANARY 0xC5
#define LEN 4096
#define PDATA_LEN 28

typedef struct raw {
    struct event_base *base;
    uint8_t *mem;
    xfer_server *srv;
    int fd;
    uint32_t req;
    rc_side c;
    uint8_t *src;
    struct ibv_mr *mr;
    char log[512];  /* the server's log lines, joined */
} raw;

static void grab_log(void *ud, const char *line)
{
    raw *w = ud;
    size_t n = strlen(w->log);
    snprintf(w->log + n, sizeof w->log - n, "%s\n", line);
}

/* Add spec's options to those in force (the run's XFER_FABRIC_FAULTS). */
static void fabric_also(const char *spec)
{
    xfer_fabric_opts o;
    char err[128];
    xfer_fabric_get_opts(&o);
    ck_assert_msg(xfer_fabric_parse_opts(spec, &o, err, sizeof err) == 0,
                  "%s", err);
    xfer_fabric_set_opts(&o);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Run the server's loop until fd is readable (bounded). */
static bool wait_readable(raw *w, int fd)
{
    uint64_t end = now_ms() + 10000;
    while (now_ms() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) > 0)
            return true;
        event_base_loop(w->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        poll(NULL, 0, 1);
    }
    return false;
}

/* One request, its reply. */
static void call(raw *w, const xfer_wire_msg *m, xfer_wire_msg *reply)
{
    xfer_wire_hdr h;
    ck_assert_int_eq(tw_send_msg(w->fd, m, ++w->req, NULL), 0);
    ck_assert(wait_readable(w, w->fd));
    ck_assert_int_eq(tw_recv_msg(w->fd, &h, reply), 0);
}

static void reserve(raw *w, uint64_t id, xfer_wire_msg *r)
{
    xfer_wire_msg m = {.type = XFER_WIRE_T_RESERVE, .id = id, .attempt = 1,
                       .len = LEN};
    call(w, &m, r);
    ck_assert_uint_eq(r->type, XFER_WIRE_T_RESERVE_OK);
    ck_assert_uint_ne(r->rkey, 0);
    ck_assert_uint_le(r->addr + LEN, MEM);
}

static void end_resv(raw *w, uint8_t type, uint64_t id, uint64_t resv)
{
    xfer_wire_msg m = {.type = type, .id = id, .attempt = 1,
                       .resv_id = resv}, r;
    call(w, &m, &r);
    ck_assert_uint_ne(r.type, XFER_WIRE_T_ERROR);
}

/* The transport's private data (transport/rdma_pdata.h): "XFER", the
 * group (0), then the control connection fd's local port and address
 * (IPv4 as ::ffff:a.b.c.d), which the server maps to this RC connection's
 * QP to bind windows through it. */
static void ctl_pdata(int fd, uint8_t *pd)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    memset(pd, 0, PDATA_LEN);
    memcpy(pd, (const uint8_t[]){0x52, 0x45, 0x46, 0x58}, 4);
    uint16_t port = ntohs(sa.sin_port);
    pd[8] = (uint8_t)(port & 0xff);
    pd[9] = (uint8_t)(port >> 8);
    pd[22] = pd[23] = 0xff;
    memcpy(pd + 24, &sa.sin_addr, 4);
}

/* An RC connection to the server with pdata, established. */
static void connect_rc(raw *w, rc_side *c, const uint8_t *pd, uint8_t len)
{
    ck_assert_int_eq(rc_connect(c, "127.0.0.1", xfer_server_rdma_port(w->srv),
                                pd, len), 0);
    ck_assert(wait_readable(w, c->ch->fd));
    ck_assert_int_eq(rc_expect(c->ch, RDMA_CM_EVENT_ESTABLISHED, NULL), 0);
}

/* A producer's control connection to the server, HELLO answered. */
static int control(raw *w)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(xfer_server_port(w->srv))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    int keep = w->fd;
    w->fd = fd;
    xfer_wire_msg m = {.type = XFER_WIRE_T_HELLO,
                       .version = XFER_WIRE_VERSION,
                       .role = XFER_WIRE_ROLE_PRODUCER}, r;
    call(w, &m, &r);
    ck_assert_uint_eq(r.type, XFER_WIRE_T_HELLO_ACK);
    w->fd = keep;
    return fd;
}

/* The raw producer's control connection, then its RC connection naming
 * it, and its source buffer registered there. */
static void connect_producer(raw *w)
{
    w->fd = control(w);
    uint8_t pd[PDATA_LEN];
    ctl_pdata(w->fd, pd);
    connect_rc(w, &w->c, pd, sizeof pd);
    w->mr = ibv_reg_mr(w->c.pd, w->src, LEN, IBV_ACCESS_LOCAL_WRITE);
    ck_assert_ptr_nonnull(w->mr);
}

static void drop_producer(raw *w)
{
    ibv_dereg_mr(w->mr);
    rc_close(&w->c);
    close(w->fd);
}

/* Server, raw TCP producer (HELLO done), RC connection established. */
static void start(raw *w)
{
    memset(w, 0, sizeof *w);
    signal(SIGPIPE, SIG_IGN);
    ck_assert_int_eq(xfer_fabric_reset(), 0);
    w->base = event_base_new();
    w->mem = malloc(MEM);
    memset(w->mem, CANARY, MEM);
    xfer_server_shard sh = {.index = 0, .base = w->mem, .len = MEM};
    xfer_server_config c;
    xfer_server_config_default(&c);
    c.base = w->base;
    c.nshards = 1;
    c.shards = &sh;
    c.log = grab_log;
    c.log_ud = w;
    ck_assert_int_eq(xfer_server_new_rdma(&c, NULL, &w->srv), 0);
    w->src = malloc(LEN);
    connect_producer(w);
}

/* Write LEN bytes of `fill` to (addr, rkey); the completion's status. */
static enum ibv_wc_status write_fill(raw *w, uint64_t addr, uint32_t rkey,
                                     uint8_t fill)
{
    memset(w->src, fill, LEN);
    struct ibv_sge sge = {.addr = (uintptr_t)w->src, .length = LEN,
                          .lkey = w->mr->lkey};
    struct ibv_wc wc;
    ck_assert_int_eq(rc_write(&w->c, 1, &sge, 1, addr, rkey), 0);
    ck_assert_int_eq(rc_cqe(&w->c, &wc), 0);
    return wc.status;
}

static bool all(const uint8_t *p, size_t n, uint8_t v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return false;
    return true;
}

static void stop(raw *w)
{
    drop_producer(w);
    for (int i = 0; i < 20; i++) {
        event_base_loop(w->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        poll(NULL, 0, 1);
    }
    xfer_server_del(w->srv);
    event_base_free(w->base);
    free(w->mem);
    free(w->src);
    xfer_fabric_counters c;
    xfer_fabric_counters_get(&c);
    ck_assert_uint_eq(c.mrs_live, 0);
    ck_assert_uint_eq(c.mrs_created, c.mrs_destroyed);
    ck_assert_uint_eq(c.mws_live, 0); /* every window deallocated */
    ck_assert_uint_eq(c.mws_created, c.mws_destroyed);
    ck_assert_uint_eq(c.destroy_busy, 0);
    ck_assert_uint_eq(c.cm_events, c.cm_events_acked);
    ck_assert_uint_eq(c.async_events, c.async_events_acked);
    ck_assert_int_eq(xfer_fabric_reset(), 0);
}

START_TEST(test_rdma_inval_late_write_after_cancel_lands_nothing)
{
    raw w;
    start(&w);
    xfer_wire_msg r;
    reserve(&w, 1, &r);
    /* the rkey works, for exactly its region */
    ck_assert_int_eq(write_fill(&w, r.addr, r.rkey, 0xA1), IBV_WC_SUCCESS);
    ck_assert(all(w.mem + r.addr, LEN, 0xA1));
    ck_assert(all(w.mem + r.addr + LEN, MEM - r.addr - LEN, CANARY));
    end_resv(&w, XFER_WIRE_T_CANCEL, 1, r.resv_id);
    /* the cancel was answered: the rkey is dead, the write lands nothing */
    ck_assert_int_eq(write_fill(&w, r.addr, r.rkey, 0xB2),
                     IBV_WC_REM_ACCESS_ERR);
    ck_assert(all(w.mem + r.addr, LEN, 0xA1));
    xfer_fabric_counters c;
    xfer_fabric_counters_get(&c);
    ck_assert_uint_eq(c.writes_landed, 1);
    stop(&w);
}
END_TEST

/* A committed region is READY only after its rkey died: a write after
 * the commit's answer cannot change what the consumer will read. */
START_TEST(test_rdma_inval_write_after_commit_lands_nothing)
{
    raw w;
    start(&w);
    xfer_wire_msg r;
    reserve(&w, 1, &r);
    ck_assert_int_eq(write_fill(&w, r.addr, r.rkey, 0xA1), IBV_WC_SUCCESS);
    end_resv(&w, XFER_WIRE_T_COMMIT, 1, r.resv_id);
    ck_assert_int_eq(write_fill(&w, r.addr, r.rkey, 0xB2),
                     IBV_WC_REM_ACCESS_ERR);
    ck_assert(all(w.mem + r.addr, LEN, 0xA1));
    stop(&w);
}
END_TEST

/* An rkey covers its region only: a write one byte past it is refused. */
START_TEST(test_rdma_inval_rkey_bounded_to_region)
{
    raw w;
    start(&w);
    xfer_wire_msg r;
    reserve(&w, 1, &r);
    ck_assert_int_eq(write_fill(&w, r.addr + 1, r.rkey, 0xA1),
                     IBV_WC_REM_ACCESS_ERR);
    ck_assert(all(w.mem, MEM, CANARY));
    stop(&w);
}
END_TEST

/* The same bytes reserved again (after a cancel) carry another rkey, and
 * the old one does not reach the new reservation. */
START_TEST(test_rdma_inval_reuse_gets_new_rkey)
{
    raw w;
    start(&w);
    xfer_wire_msg r1, r2;
    reserve(&w, 1, &r1);
    end_resv(&w, XFER_WIRE_T_CANCEL, 1, r1.resv_id);
    reserve(&w, 2, &r2);
    ck_assert_uint_eq(r2.addr, r1.addr); /* the region came back */
    ck_assert_uint_ne(r2.rkey, r1.rkey);
    ck_assert_int_eq(write_fill(&w, r1.addr, r1.rkey, 0xB2),
                     IBV_WC_REM_ACCESS_ERR);
    ck_assert(all(w.mem, MEM, CANARY));
    stop(&w);
}
END_TEST

/* A connection request that does not name the server's group (or is not
 * the transport's at all) is rejected, and the server keeps serving: a
 * proper producer connects and writes right after. */
START_TEST(test_rdma_inval_bad_connect_request_rejected)
{
    raw w;
    start(&w);
    static const uint8_t bad[][8] = {
        {0x52, 0x45, 0x46, 0x58, 7, 0, 0, 0}, /* group 7, not 0 */
        {1, 2, 3, 4, 0, 0, 0, 0},             /* no magic */
    };
    for (int i = 0; i < 2; i++) {
        rc_side c;
        ck_assert_int_eq(rc_connect(&c, "127.0.0.1",
                                    xfer_server_rdma_port(w.srv), bad[i], 8),
                         0);
        ck_assert(wait_readable(&w, c.ch->fd));
        ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_REJECTED, NULL), 0);
        rc_close(&c);
    }
    rc_side c;
    ck_assert_int_eq(rc_connect(&c, "127.0.0.1",
                                xfer_server_rdma_port(w.srv), NULL, 0), 0);
    ck_assert(wait_readable(&w, c.ch->fd));
    ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_REJECTED, NULL), 0);
    rc_close(&c);
    xfer_wire_msg r;
    reserve(&w, 1, &r); /* the established producer still works */
    ck_assert_int_eq(write_fill(&w, r.addr, r.rkey, 0xA1), IBV_WC_SUCCESS);
    ck_assert(all(w.mem + r.addr, LEN, 0xA1));
    stop(&w);
}
END_TEST

static void drained_cb(void *ud, bool drained)
{
    (void)drained;
    *(bool *)ud = true;
}

/* A draining server refuses new RC connections, even one whose private
 * data names its group and a control connection it serves (a connection
 * made before the drain keeps working: the drain waits for its writes). */
START_TEST(test_rdma_inval_connect_refused_while_draining)
{
    raw w;
    start(&w);
    uint8_t pd[PDATA_LEN];
    ctl_pdata(w.fd, pd);
    bool drained = false;
    ck_assert_int_eq(xfer_server_drain(w.srv, drained_cb, &drained), 0);
    rc_side c;
    ck_assert_int_eq(rc_connect(&c, "127.0.0.1", xfer_server_rdma_port(w.srv),
                                pd, PDATA_LEN),
                     0);
    ck_assert(wait_readable(&w, c.ch->fd));
    ck_assert_int_eq(rc_expect(c.ch, RDMA_CM_EVENT_REJECTED, NULL), 0);
    rc_close(&c);
    for (int i = 0; i < 50 && !drained; i++) {
        event_base_loop(w.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        poll(NULL, 0, 1);
    }
    ck_assert(drained); /* nothing was reserved: it drains at once */
    stop(&w);
}
END_TEST

/* The server uses type 2 windows exactly when the device has them (the
 * fabric's mw2 option; the rdma_inval_no_type2 run turns it off), says
 * which at start, and each reservation then costs a window, not a
 * registration. */
START_TEST(test_rdma_inval_rkey_kind_follows_device)
{
    raw w;
    start(&w);
    xfer_fabric_opts o;
    xfer_fabric_get_opts(&o);
    ck_assert(xfer_server_rdma_windows(w.srv) == o.mw_type2);
    ck_assert_ptr_nonnull(strstr(
        w.log, o.mw_type2 ? "rdma: per-reservation rkeys via type-2 memory "
                            "windows"
                          : "rdma: per-reservation rkeys via registrations "
                            "(device has no type-2 windows)"));
    xfer_fabric_counters c0, c1;
    xfer_fabric_counters_get(&c0);
    xfer_wire_msg r;
    reserve(&w, 1, &r);
    xfer_fabric_counters_get(&c1);
    ck_assert_uint_eq(c1.mws_created - c0.mws_created, o.mw_type2 ? 1 : 0);
    ck_assert_uint_eq(c1.binds - c0.binds, o.mw_type2 ? 1 : 0);
    ck_assert_uint_eq(c1.mrs_created - c0.mrs_created, o.mw_type2 ? 0 : 1);
    end_resv(&w, XFER_WIRE_T_CANCEL, 1, r.resv_id);
    xfer_fabric_counters_get(&c1);
    /* a window dies by local invalidation (completion polled), then
     * dealloc; a registration by deregistration */
    ck_assert_uint_eq(c1.invalidations - c0.invalidations,
                      o.mw_type2 ? 1 : 0);
    ck_assert_uint_eq(c1.mws_live, 0);
    ck_assert_uint_eq(c1.mrs_live, o.mw_type2 ? 2 : 1); /* pool?, src */
    stop(&w);
}
END_TEST

/* A window's rkey works through the QP that bound it only: a write with
 * it through another RC connection of the same producer host is refused
 * and lands nothing.  (A registration's rkey is good on any QP of the
 * PD: the reason windows are bound per connection.) */
START_TEST(test_rdma_inval_window_refused_on_other_qp)
{
    raw w;
    start(&w);
    xfer_wire_msg r;
    reserve(&w, 1, &r);
    static const uint8_t shortpd[8] = {0x52, 0x45, 0x46, 0x58, 0, 0, 0, 0};
    rc_side other;
    connect_rc(&w, &other, shortpd, sizeof shortpd);
    struct ibv_mr *omr = ibv_reg_mr(other.pd, w.src, LEN,
                                    IBV_ACCESS_LOCAL_WRITE);
    ck_assert_ptr_nonnull(omr);
    memset(w.src, 0xD4, LEN);
    struct ibv_sge sge = {.addr = (uintptr_t)w.src, .length = LEN,
                          .lkey = omr->lkey};
    struct ibv_wc wc;
    ck_assert_int_eq(rc_write(&other, 1, &sge, 1, r.addr, r.rkey), 0);
    ck_assert_int_eq(rc_cqe(&other, &wc), 0);
    xfer_fabric_counters c;
    xfer_fabric_counters_get(&c);
    if (xfer_server_rdma_windows(w.srv)) {
        ck_assert_int_eq(wc.status, IBV_WC_REM_ACCESS_ERR);
        ck_assert_uint_eq(c.rej_wrong_qp, 1);
        ck_assert(all(w.mem, MEM, CANARY));
    } else {
        ck_assert_int_eq(wc.status, IBV_WC_SUCCESS);
        ck_assert(all(w.mem + r.addr, LEN, 0xD4));
    }
    /* the QP that reserved still writes with it */
    ck_assert_int_eq(write_fill(&w, r.addr, r.rkey, 0xA1), IBV_WC_SUCCESS);
    ck_assert(all(w.mem + r.addr, LEN, 0xA1));
    ibv_dereg_mr(omr);
    rc_close(&other);
    stop(&w);
}
END_TEST

/* The rkey cannot be made (the window's bind completes with an error, or
 * the registration fails): that reserve is answered with an error, its
 * region goes back, nothing leaks, and the next reserve is served. */
START_TEST(test_rdma_inval_rkey_failure_answers_error)
{
    raw w;
    start(&w);
    bool windows = xfer_server_rdma_windows(w.srv);
    fabric_also(windows ? "bind_fail=1" : "reg_fail=1");
    xfer_wire_msg m = {.type = XFER_WIRE_T_RESERVE, .id = 1, .attempt = 1,
                       .len = LEN}, r;
    call(&w, &m, &r);
    ck_assert_uint_eq(r.type, XFER_WIRE_T_ERROR);
    ck_assert_int_ne(r.code, 0);
    xfer_fabric_counters c;
    xfer_fabric_counters_get(&c);
    ck_assert_uint_eq(windows ? c.bind_errors : c.reg_failed, 1);
    ck_assert_uint_eq(c.mws_live, 0); /* the failed window is gone */
    xfer_server_stats ss;
    ck_assert_int_eq(xfer_server_stats_get(w.srv, XFER_SHARD_NONE, &ss), 0);
    ck_assert_uint_eq(ss.bytes_in_use, 0);
    if (windows) {
        /* the failed bind put the server's QP in error (RC): it took the
         * connection down; the producer connects again */
        ck_assert(wait_readable(&w, w.c.ch->fd));
        ck_assert_int_eq(rc_expect(w.c.ch, RDMA_CM_EVENT_DISCONNECTED, NULL),
                         0);
        drop_producer(&w);
        connect_producer(&w);
    }
    reserve(&w, 2, &r);
    ck_assert_int_eq(write_fill(&w, r.addr, r.rkey, 0xA1), IBV_WC_SUCCESS);
    ck_assert(all(w.mem + r.addr, LEN, 0xA1));
    stop(&w);
}
END_TEST

/* With windows, a reserve over a control connection that has no RC
 * connection (none named it in its connect) has no QP to bind through:
 * refused cleanly, the region given back.  Registrations need no QP. */
START_TEST(test_rdma_inval_reserve_without_rc_connection)
{
    raw w;
    start(&w);
    int keep = w.fd;
    w.fd = control(&w); /* a second producer connection, TCP only */
    xfer_wire_msg m = {.type = XFER_WIRE_T_RESERVE, .id = 1, .attempt = 1,
                       .len = LEN}, r;
    call(&w, &m, &r);
    ck_assert_uint_eq(r.type, xfer_server_rdma_windows(w.srv)
                                  ? XFER_WIRE_T_ERROR
                                  : XFER_WIRE_T_RESERVE_OK);
    if (r.type == XFER_WIRE_T_ERROR) {
        xfer_server_stats ss;
        ck_assert_int_eq(
            xfer_server_stats_get(w.srv, XFER_SHARD_NONE, &ss), 0);
        ck_assert_uint_eq(ss.bytes_in_use, 0);
        ck_assert_ptr_nonnull(
            strstr(w.log, "reserve without its RC connection refused"));
    }
    close(w.fd);
    w.fd = keep;
    stop(&w);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("rdma_inval");
    TCase *tc = tcase_create("raw");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_rdma_inval_late_write_after_cancel_lands_nothing);
    tcase_add_test(tc, test_rdma_inval_write_after_commit_lands_nothing);
    tcase_add_test(tc, test_rdma_inval_rkey_bounded_to_region);
    tcase_add_test(tc, test_rdma_inval_reuse_gets_new_rkey);
    tcase_add_test(tc, test_rdma_inval_bad_connect_request_rejected);
    tcase_add_test(tc, test_rdma_inval_rkey_kind_follows_device);
    tcase_add_test(tc, test_rdma_inval_window_refused_on_other_qp);
    tcase_add_test(tc, test_rdma_inval_rkey_failure_answers_error);
    tcase_add_test(tc, test_rdma_inval_reserve_without_rc_connection);
    tcase_add_test(tc, test_rdma_inval_connect_refused_while_draining);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
