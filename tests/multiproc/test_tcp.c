/*
 * tests/tcp/test_tcp.c - the tcp transport against a fake shard run by the
 * test itself (a raw socket), to reach states a real xferd does not: a
 * shard that stops reading, so a write's staging bytes stay queued.
 *
 * test_tcp_abort_waits_for_reference: a cancelled transfer whose 32 MiB
 * write is stuck in the output buffer completes only after the transport
 * reset the connection and libevent released the staging reference (I3):
 * at completion no reference is outstanding and the reset was counted.
 * test_tcp_lost_connection_fails_ops: the fake shard closes after the
 * reserve; the transfer fails naming shard 0 with CONN_LOST or rolls back.
 *
 * The batched hot path (issue 13), on a hooked transport (tcp_int.h) whose
 * deliver hook starts a COMMIT for every RESERVE_OK, as the engine would:
 * test_tcp_batch_answered_in_one_turn: 64 replies sent in one segment are
 * read once and delivered in one loop iteration, from the read callback
 * (no deferred-event wake-up), and the 64 COMMITs they cause are on the
 * socket before the loop turns again, sent with one write (a bufferevent
 * would register EV_WRITE and write on the next turn);
 * test_tcp_reuses_op_records: a second round of 64 ops allocates nothing
 * (op records come back from the free list);
 * test_tcp_split_reply_then_bad_frame: a reply cut across three reads is
 * delivered once whole; a bad frame after it drops the connection.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "mp.h"
/* wire_private_dep: the hooked transport and its hot-path counters, to
 * drive the transport without an engine and count its writes. */
#include "tcp_int.h"
#include "testutil.h"

typedef struct fake {
    int lis, conn;
    uint16_t port;
} fake;

static void fake_listen(fake *f)
{
    f->lis = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    ck_assert_int_eq(bind(f->lis, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(f->lis, 4), 0);
    getsockname(f->lis, (struct sockaddr *)&sa, &len);
    f->port = ntohs(sa.sin_port);
    f->conn = -1;
}

typedef struct ctx {
    mp_producer p;
    fake f;
    volatile bool done;
    xfer_result res;
    xfer_tcp_stats at_done;
} ctx;

static void on_done(void *ud, const xfer_result *r)
{
    ctx *c = ud;
    c->res = *r;
    xfer_tcp_stats_get(c->p.tcp, &c->at_done);
    c->done = true;
}

/* Accept the producer's connection and answer its HELLO (blocking). */
static void fake_accept_hello(ctx *c)
{
    /* The connect completes in the kernel; accept, then let the loop send
     * HELLO and read it here. */
    c->f.conn = accept(c->f.lis, NULL, NULL);
    ck_assert_int_ge(c->f.conn, 0);
    struct timeval tv = {5, 0};
    setsockopt(c->f.conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    xfer_wire_hdr h;
    xfer_wire_msg m;
    for (int i = 0; i < 200; i++) {
        event_base_loop(c->p.base, EVLOOP_NONBLOCK);
        uint8_t b;
        if (recv(c->f.conn, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1)
            break;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    ck_assert_int_eq(tw_recv_msg(c->f.conn, &h, &m), 0);
    ck_assert_int_eq(m.type, XFER_WIRE_T_HELLO2); /* sessions: issue 12 */
    xfer_wire_msg a = {.type = XFER_WIRE_T_HELLO_ACK, .version = 1,
                       .shard = 0, .max_write = XFER_WIRE_MAX_DATA};
    ck_assert_int_eq(tw_send_msg(c->f.conn, &a, h.req, NULL), 0);
    ck_assert(mp_producer_wait_connected(&c->p, 5000));
}

/* Read the RESERVE and answer it. */
static void fake_reserve_ok(ctx *c, uint32_t len)
{
    xfer_wire_hdr h;
    xfer_wire_msg m;
    for (int i = 0; i < 100; i++)
        event_base_loop(c->p.base, EVLOOP_NONBLOCK);
    ck_assert_int_eq(tw_recv_msg(c->f.conn, &h, &m), 0);
    ck_assert_int_eq(m.type, XFER_WIRE_T_RESERVE);
    ck_assert_uint_eq(m.len, len);
    xfer_wire_msg a = m;
    a.type = XFER_WIRE_T_RESERVE_OK;
    a.resv_id = 99;
    ck_assert_int_eq(tw_send_msg(c->f.conn, &a, h.req, NULL), 0);
}

static void start(ctx *c, uint32_t len)
{
    signal(SIGPIPE, SIG_IGN);
    fake_listen(&c->f);
    ck_assert_int_eq(mp_producer_new(&c->p, &c->f.port, 1, len,
                                     30000000000ull), 0);
    fake_accept_hello(c);
    xfer_slice sl = {.off = 0, .len = len};
    xfer_transfer_desc d = {.id = 1, .group = c->p.group, .pool = c->p.pool,
                            .nslices = 1, .slices = &sl};
    ck_assert_int_eq(xfer_engine_submit(c->p.e, &d, on_done, c), 0);
    fake_reserve_ok(c, len);
}

START_TEST(test_tcp_abort_waits_for_reference)
{
    static ctx c;
    const uint32_t len = 32u << 20;
    start(&c, len);
    /* Let the write go out until the socket buffers are full. */
    for (int i = 0; i < 200; i++)
        event_base_loop(c.p.base, EVLOOP_NONBLOCK);
    xfer_tcp_stats st;
    xfer_tcp_stats_get(c.p.tcp, &st);
    ck_assert_uint_eq(st.refs_outstanding, 1);
    close(c.f.lis); /* no reconnect will succeed: cancels fail fast */
    ck_assert_int_eq(xfer_engine_cancel(c.p.e, 1), 0);
    ck_assert(mp_run_until(c.p.base, &c.done, 30000));
    ck_assert_int_ne(c.res.status, 0);
    ck_assert_uint_eq(c.at_done.refs_outstanding, 0);
    ck_assert_uint_eq(c.at_done.resets, 1);
    close(c.f.conn);
    ck_assert(mp_producer_del(&c.p, 30000));
}
END_TEST

START_TEST(test_tcp_lost_connection_fails_ops)
{
    static ctx c;
    start(&c, 4096);
    close(c.f.lis);
    close(c.f.conn); /* the shard dies after reserving */
    ck_assert(mp_run_until(c.p.base, &c.done, 30000));
    ck_assert_int_ne(c.res.status, 0);
    ck_assert_uint_eq(c.res.failed_shards, 1);
    ck_assert_uint_eq(c.res.first_failed_shard, 0);
    ck_assert_uint_eq(c.at_done.refs_outstanding, 0);
    ck_assert_uint_ge(c.at_done.losses + c.at_done.failed_down, 1);
    ck_assert(mp_producer_del(&c.p, 30000));
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The batched hot path, on a hooked transport                             */
/* ---------------------------------------------------------------------- */

#define HK_N 64

typedef struct hk {
    struct event_base *base;
    xfer_tcp *t;
    fake f;
    tu_alloc ta;
    bool linked;
    int got;        /* results delivered */
    int commits_ok; /* COMMIT starts from the hook that were accepted */
} hk;

static void hk_deliver(void *ud, const xfer_shard_result *r)
{
    hk *h = ud;
    h->got++;
    if (r->op != XFER_ACT_RESERVE || r->status != 0)
        return;
    xfer_action a = {.kind = XFER_ACT_COMMIT, .id = r->id,
                     .attempt = r->attempt, .shard = r->shard,
                     .resv_id = r->resv_id};
    h->commits_ok += xfer_tcp_start_op(h->t, &a) == 0;
}

static void hk_link(void *ud, uint16_t shard, bool up, int fd)
{
    ((hk *)ud)->linked = up;
}

static void hk_start(hk *h)
{
    signal(SIGPIPE, SIG_IGN);
    memset(h, 0, sizeof *h);
    fake_listen(&h->f);
    tu_alloc_init(&h->ta, -1);
    h->base = event_base_new();
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)h->f.port);
    const char *addrs[1] = {addr};
    xfer_tcp_config cfg;
    xfer_tcp_config_default(&cfg);
    cfg.nshards = 1;
    cfg.addrs = addrs;
    cfg.alloc = tu_allocator(&h->ta);
    xfer_tcp_hooks hooks = {.ud = h, .deliver = hk_deliver, .link = hk_link};
    ck_assert_int_eq(xfer_tcp_new_hooked(h->base, &cfg, &hooks, &h->t), 0);
    h->f.conn = accept(h->f.lis, NULL, NULL);
    ck_assert_int_ge(h->f.conn, 0);
    struct timeval tv = {5, 0};
    setsockopt(h->f.conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1; /* each piece of a cut reply leaves at once */
    setsockopt(h->f.conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (int i = 0; i < 50; i++)
        event_base_loop(h->base, EVLOOP_NONBLOCK);
    xfer_wire_hdr wh;
    xfer_wire_msg m;
    ck_assert_int_eq(tw_recv_msg(h->f.conn, &wh, &m), 0);
    ck_assert_int_eq(m.type, XFER_WIRE_T_HELLO2);
    xfer_wire_msg a = {.type = XFER_WIRE_T_HELLO_ACK, .version = 1,
                       .shard = 0, .max_write = XFER_WIRE_MAX_DATA};
    ck_assert_int_eq(tw_send_msg(h->f.conn, &a, wh.req, NULL), 0);
    for (int i = 0; i < 1000 && !h->linked; i++)
        event_base_loop(h->base, EVLOOP_ONCE);
    ck_assert(h->linked);
    xfer_tcp_open(h->t, 0);
}

/* Start HK_N reserves (ids from `first`), read them on the fake shard and
 * answer all of them with one send. */
static void hk_reserve_round(hk *h, uint64_t first)
{
    for (uint64_t i = 0; i < HK_N; i++) {
        xfer_action a = {.kind = XFER_ACT_RESERVE, .id = first + i,
                         .attempt = 1, .shard = 0, .len = 4096};
        ck_assert_int_eq(xfer_tcp_start_op(h->t, &a), 0);
    }
    static uint8_t buf[HK_N * XFER_WIRE_MAX_FIXED];
    size_t n = 0;
    for (int i = 0; i < HK_N; i++) {
        xfer_wire_hdr wh;
        xfer_wire_msg m;
        while (recv(h->f.conn, buf, 1, MSG_PEEK | MSG_DONTWAIT) != 1)
            event_base_loop(h->base, EVLOOP_NONBLOCK);
        ck_assert_int_eq(tw_recv_msg(h->f.conn, &wh, &m), 0);
        ck_assert_int_eq(m.type, XFER_WIRE_T_RESERVE);
        m.type = XFER_WIRE_T_RESERVE_OK;
        m.resv_id = 1000 + m.id;
        n += xfer_wire_encode(&m, wh.req, buf + n, sizeof buf - n);
    }
    ck_assert_int_eq(tw_send_all(h->f.conn, buf, n), 0);
}

/* Read HK_N commits, answer them, and run the loop until they are in. */
static void hk_commit_round(hk *h, int want_got)
{
    for (int i = 0; i < HK_N; i++) {
        xfer_wire_hdr wh;
        xfer_wire_msg m;
        uint8_t b;
        while (recv(h->f.conn, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 1)
            event_base_loop(h->base, EVLOOP_NONBLOCK);
        ck_assert_int_eq(tw_recv_msg(h->f.conn, &wh, &m), 0);
        ck_assert_int_eq(m.type, XFER_WIRE_T_COMMIT);
        m.type = XFER_WIRE_T_COMMIT_ACK;
        ck_assert_int_eq(tw_send_msg(h->f.conn, &m, wh.req, NULL), 0);
    }
    for (int i = 0; i < 10000 && h->got < want_got; i++)
        event_base_loop(h->base, EVLOOP_ONCE);
    ck_assert_int_eq(h->got, want_got);
}

static void hk_stop(hk *h)
{
    ck_assert_uint_eq(xfer_tcp_outstanding(h->t), 0);
    xfer_tcp_del(h->t);
    event_base_free(h->base);
    close(h->f.conn);
    close(h->f.lis);
    ck_assert_int_eq(h->ta.live, 0);
}

START_TEST(test_tcp_batch_answered_in_one_turn)
{
    static hk h;
    hk_start(&h);
    hk_reserve_round(&h, 1);
    xfer_tcp_io before, after;
    xfer_tcp_io_get(h.t, &before);
    /* One iteration: the replies are read and delivered, the hook starts
     * a COMMIT for each, and those are written before the loop goes
     * round again. */
    event_base_loop(h.base, EVLOOP_ONCE);
    xfer_tcp_io_get(h.t, &after);
    ck_assert_int_eq(h.got, HK_N);
    ck_assert_int_eq(h.commits_ok, HK_N);
    ck_assert_uint_eq(after.reads - before.reads, 1);
    ck_assert_uint_eq(after.deliver_wakeups - before.deliver_wakeups, 0);
    ck_assert_uint_eq(after.writes - before.writes, 1);
    uint8_t b;
    ck_assert_int_eq(recv(h.f.conn, &b, 1, MSG_PEEK | MSG_DONTWAIT), 1);
    hk_commit_round(&h, 2 * HK_N);
    hk_stop(&h);
}
END_TEST

START_TEST(test_tcp_reuses_op_records)
{
    static hk h;
    hk_start(&h);
    hk_reserve_round(&h, 1);
    hk_commit_round(&h, 2 * HK_N);
    long calls = h.ta.calls;
    xfer_tcp_io io;
    xfer_tcp_io_get(h.t, &io);
    uint64_t allocs = io.op_allocs;
    ck_assert_uint_le(allocs, 2 * HK_N);
    hk_reserve_round(&h, 1 + HK_N);
    hk_commit_round(&h, 4 * HK_N);
    xfer_tcp_io_get(h.t, &io);
    ck_assert_uint_eq(io.op_allocs, allocs);
    ck_assert_int_eq(h.ta.calls, calls);
    hk_stop(&h);
}
END_TEST

/* Replies are parsed in place across reads: one cut in three pieces at
 * odd offsets (the loop reads each piece on its own) is delivered once
 * whole; then a frame the decoder refuses drops the connection, failing
 * the op still sent with CONN_LOST and counting one bad frame. */
START_TEST(test_tcp_split_reply_then_bad_frame)
{
    static hk h;
    hk_start(&h);
    for (uint64_t id = 1; id <= 2; id++) {
        xfer_action a = {.kind = XFER_ACT_CANCEL, .id = id, .attempt = 1,
                         .shard = 0};
        ck_assert_int_eq(xfer_tcp_start_op(h.t, &a), 0);
    }
    uint8_t buf[2 * XFER_WIRE_MAX_FIXED];
    xfer_wire_hdr wh;
    xfer_wire_msg m;
    for (int i = 0; i < 1000 &&
                    recv(h.f.conn, buf, 1, MSG_PEEK | MSG_DONTWAIT) != 1;
         i++)
        event_base_loop(h.base, EVLOOP_NONBLOCK);
    ck_assert_int_eq(tw_recv_msg(h.f.conn, &wh, &m), 0);
    m.type = XFER_WIRE_T_CANCEL_ACK;
    size_t n = xfer_wire_encode(&m, wh.req, buf, sizeof buf);
    size_t cut[4] = {0, 5, 23, n};
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(tw_send_all(h.f.conn, buf + cut[k], cut[k + 1] - cut[k]),
                         0);
        xfer_tcp_io before, after;
        xfer_tcp_io_get(h.t, &before);
        uint64_t until = mp_now_ms() + 5000;
        do {
            event_base_loop(h.base, EVLOOP_NONBLOCK);
            xfer_tcp_io_get(h.t, &after);
        } while (after.reads == before.reads && mp_now_ms() < until);
        ck_assert_uint_gt(after.reads, before.reads);
        ck_assert_int_eq(h.got, k == 2 ? 1 : 0);
    }
    ck_assert_int_eq(tw_recv_msg(h.f.conn, &wh, &m), 0); /* the 2nd */
    uint8_t garbage[XFER_WIRE_HDR] = "not a frame....";
    ck_assert_int_eq(tw_send_all(h.f.conn, garbage, sizeof garbage), 0);
    uint64_t until = mp_now_ms() + 5000;
    while (h.got < 2 && mp_now_ms() < until)
        event_base_loop(h.base, EVLOOP_NONBLOCK);
    ck_assert_int_eq(h.got, 2);
    xfer_tcp_stats st;
    xfer_tcp_stats_get(h.t, &st);
    ck_assert_uint_eq(st.bad_frames, 1);
    ck_assert_uint_eq(st.failed_conn_lost, 1);
    ck_assert(!h.linked);
    hk_stop(&h);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tcp");
    TCase *tc = tcase_create("fake shard");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_tcp_abort_waits_for_reference);
    tcase_add_test(tc, test_tcp_lost_connection_fails_ops);
    tcase_add_test(tc, test_tcp_batch_answered_in_one_turn);
    tcase_add_test(tc, test_tcp_reuses_op_records);
    tcase_add_test(tc, test_tcp_split_reply_then_bad_frame);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
