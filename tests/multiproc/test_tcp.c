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
 */
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "mp.h"
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
    ck_assert_int_eq(mp_recv_msg(c->f.conn, &h, &m), 0);
    ck_assert_int_eq(m.type, XFER_WIRE_T_HELLO2); /* sessions: issue 12 */
    xfer_wire_msg a = {.type = XFER_WIRE_T_HELLO_ACK, .version = 1,
                       .shard = 0, .max_write = XFER_WIRE_MAX_DATA};
    ck_assert_int_eq(mp_send_msg(c->f.conn, &a, h.req, NULL), 0);
    ck_assert(mp_producer_wait_connected(&c->p, 5000));
}

/* Read the RESERVE and answer it. */
static void fake_reserve_ok(ctx *c, uint32_t len)
{
    xfer_wire_hdr h;
    xfer_wire_msg m;
    for (int i = 0; i < 100; i++)
        event_base_loop(c->p.base, EVLOOP_NONBLOCK);
    ck_assert_int_eq(mp_recv_msg(c->f.conn, &h, &m), 0);
    ck_assert_int_eq(m.type, XFER_WIRE_T_RESERVE);
    ck_assert_uint_eq(m.len, len);
    xfer_wire_msg a = m;
    a.type = XFER_WIRE_T_RESERVE_OK;
    a.resv_id = 99;
    ck_assert_int_eq(mp_send_msg(c->f.conn, &a, h.req, NULL), 0);
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

int main(void)
{
    Suite *s = suite_create("tcp");
    TCase *tc = tcase_create("fake shard");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_tcp_abort_waits_for_reference);
    tcase_add_test(tc, test_tcp_lost_connection_fails_ops);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
