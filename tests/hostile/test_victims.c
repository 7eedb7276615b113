/*
 * tests/hostile/test_victims.c - the producer as the victim of a hostile
 * or broken shard (issue 24, classes 1 and 3): a fake shard run by the
 * test on a raw socket answers HELLO as a shard would, then misbehaves.
 *
 * Class 1, every op ends whatever a shard answers:
 * test_victims_reserve_ok_without_id: RESERVE_OK naming reservation id 0
 * fails the reserve with XFER_ERR_PROTO (shard 0, RESERVING), closes the
 * connection, the transfer completes once and shutdown then completes (on
 * fdf0a61 the op was taken off its list and dropped: no completion, and
 * shutdown waited forever);
 * test_victims_reply_for_wrong_attempt: a reply of the right request but
 * another attempt fails the op the same way;
 * test_victims_fatal_code_refused: an ERROR carrying XFER_ERR_INTERNAL
 * (the fatal band, which no peer may send) is refused: the transfer
 * reports XFER_ERR_PROTO, never INTERNAL;
 * test_victims_local_code_refused: an ERROR carrying a code only the
 * producer itself gives (XFER_ERR_ABANDONED) is refused the same way;
 * test_victims_unknown_code_is_remote: an ERROR with a code in the peer
 * band that this build does not know (a newer shard's) fails the op with
 * XFER_ERR_REMOTE and keeps the connection.
 *
 * Class 2, the consumer has deadlines (a fake shard that hangs):
 * test_victims_consumer_take_never_answered: READY, then the TAKE it
 * causes is never answered; the id still ends (unavailable, CONN_LOST)
 * once request_timeout_ns takes the link down;
 * test_victims_consumer_hello_never_answered: a HELLO2 never answered is
 * dialled again after the request timeout.
 *
 * Class 3, reconnects back off:
 * test_victims_backoff_delays: the delay arithmetic (backoff.h): every
 * delay in [d/2, d], d doubling from min to max, reset only after a
 * connection that stayed up for max; seeded draws (prints the seed);
 * test_victims_flapping_shard_not_redialled_at_once: a shard that closes
 * right after its HELLO_ACK is not redialled at once (on fdf0a61 it was,
 * 240-356 times a second): with a 10 s minimum backoff, no second dial
 * arrives while the loop runs for 0.5 s, and the loss is counted (stats
 * and the xfer_tcp_* metrics);
 * test_victims_consumer_flapping_shard_not_redialled_at_once: the same
 * for the consumer's link (on fdf0a61 redialled after 1 microsecond).
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "backoff.h" /* transport/: the delay arithmetic */
#include "mp.h"
#include "testutil.h"
#include "xfer/consumer.h"
#include "xfer/metrics.h"
#include "xfer/shard.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

typedef struct victim {
    int lis, conn;
    uint16_t port;
    char addr[32];
    struct event_base *base;
    xfer_engine *e;
    xfer_tcp *tcp;
    uint32_t group, pool;
    uint8_t staging[4096];
    volatile bool done, shut;
    int ndone;
    xfer_result res;
} victim;

static void fake_listen(victim *v)
{
    v->lis = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    ck_assert_int_eq(bind(v->lis, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(v->lis, 16), 0);
    getsockname(v->lis, (struct sockaddr *)&sa, &len);
    v->port = ntohs(sa.sin_port);
    snprintf(v->addr, sizeof v->addr, "127.0.0.1:%u", (unsigned)v->port);
    v->conn = -1;
}

/* An engine and a TCP transport to the fake shard; reconnects from
 * min_ns to max_ns. */
static void victim_new(victim *v, uint64_t min_ns, uint64_t max_ns)
{
    memset(v, 0, sizeof *v);
    signal(SIGPIPE, SIG_IGN);
    fake_listen(v);
    v->base = event_base_new();
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = v->base;
    ec.core.default_deadline_ns = 30000000000ull;
    const char *addrs[1] = {v->addr};
    xfer_tcp_config tc;
    xfer_tcp_config_default(&tc);
    tc.nshards = 1;
    tc.addrs = addrs;
    tc.reconnect_min_ns = min_ns;
    tc.reconnect_max_ns = max_ns;
    ck_assert_int_eq(xfer_engine_new(&ec, &v->e), 0);
    ck_assert_int_eq(xfer_tcp_new(v->base, &tc, &v->tcp), 0);
    ck_assert_int_eq(xfer_engine_register_pool(v->e, v->staging,
                                               sizeof v->staging, &v->pool),
                     0);
    ck_assert_int_eq(
        xfer_engine_add_group(v->e, xfer_tcp_transport(v->tcp), &v->group),
        0);
}

static void on_shut(void *ud)
{
    ((victim *)ud)->shut = true;
}

/* Shutdown must complete: every op had its result. */
static void victim_del(victim *v)
{
    ck_assert_int_eq(xfer_engine_shutdown(v->e, on_shut, v), 0);
    ck_assert_msg(mp_run_until(v->base, &v->shut, 20000),
                  "shutdown did not complete");
    xfer_engine_del(v->e);
    xfer_tcp_del(v->tcp);
    event_base_loop(v->base, EVLOOP_NONBLOCK);
    event_base_free(v->base);
    if (v->conn >= 0)
        close(v->conn);
    if (v->lis >= 0)
        close(v->lis);
}

/* Turn base's loop until fd is readable (or ms pass). */
static bool pump_readable(struct event_base *base, int fd, int ms)
{
    uint64_t end = mp_now_ms() + (uint64_t)ms;
    while (mp_now_ms() < end) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 5) == 1)
            return true;
    }
    return false;
}

static bool pump_until_readable(victim *v, int fd)
{
    return pump_readable(v->base, fd, 5000);
}

/* Dials the listener saw (each accepted and closed) while base's loop ran
 * for ms. */
static int dials_within(struct event_base *base, int lis, int ms)
{
    int dials = 0;
    uint64_t end = mp_now_ms() + (uint64_t)ms;
    for (;;) {
        uint64_t now = mp_now_ms();
        if (now >= end || !pump_readable(base, lis, (int)(end - now)))
            return dials;
        int fd = accept(lis, NULL, NULL);
        if (fd >= 0)
            close(fd);
        dials++;
    }
}

/* Accept the producer's connection and answer its HELLO2. */
static void fake_accept_hello(victim *v)
{
    ck_assert(pump_until_readable(v, v->lis));
    v->conn = accept(v->lis, NULL, NULL);
    ck_assert_int_ge(v->conn, 0);
    struct timeval tv = {5, 0};
    setsockopt(v->conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ck_assert(pump_until_readable(v, v->conn));
    xfer_wire_hdr h;
    xfer_wire_msg m;
    ck_assert_int_eq(tw_recv_msg(v->conn, &h, &m), 0);
    ck_assert_int_eq(m.type, XFER_WIRE_T_HELLO2);
    xfer_wire_msg a = {.type = XFER_WIRE_T_HELLO_ACK, .version = 1,
                       .shard = 0, .max_write = XFER_WIRE_MAX_DATA};
    ck_assert_int_eq(tw_send_msg(v->conn, &a, h.req, NULL), 0);
}

static void on_done(void *ud, const xfer_result *r)
{
    victim *v = ud;
    v->res = *r;
    v->ndone++;
    v->done = true;
}

/* Submit id 1 (4 KiB) and read its RESERVE at the fake shard. */
static void submit_and_read_reserve(victim *v, xfer_wire_hdr *h,
                                    xfer_wire_msg *m)
{
    fake_accept_hello(v);
    uint64_t end = mp_now_ms() + 5000;
    while (!xfer_tcp_connected(v->tcp, 0) && mp_now_ms() < end)
        event_base_loop(v->base, EVLOOP_NONBLOCK);
    ck_assert(xfer_tcp_connected(v->tcp, 0));
    xfer_slice sl = {.off = 0, .len = sizeof v->staging};
    xfer_transfer_desc d = {.id = 1, .group = v->group, .pool = v->pool,
                            .nslices = 1, .slices = &sl};
    ck_assert_int_eq(xfer_engine_submit(v->e, &d, on_done, v), 0);
    ck_assert(pump_until_readable(v, v->conn));
    ck_assert_int_eq(tw_recv_msg(v->conn, h, m), 0);
    ck_assert_int_eq(m->type, XFER_WIRE_T_RESERVE);
}

/* The fake shard answers `a` to the reserve, then goes away (no further
 * connection is accepted), so the rollback's cancels fail fast. */
static void answer_then_vanish(victim *v, const xfer_wire_hdr *h,
                               const xfer_wire_msg *a)
{
    ck_assert_int_eq(tw_send_msg(v->conn, a, h->req, NULL), 0);
    close(v->lis);
    v->lis = -1;
    ck_assert_msg(mp_run_until(v->base, &v->done, 20000),
                  "the transfer never completed");
}

static void check_failed_on_shard0(const victim *v, int32_t status)
{
    ck_assert_int_eq(v->ndone, 1);
    ck_assert_int_eq(v->res.status, status);
    ck_assert_uint_eq(v->res.phase, XFER_PHASE_RESERVING);
    ck_assert_uint_eq(v->res.first_failed_shard, 0);
    ck_assert_uint_eq(v->res.failed_shards, 1);
}

START_TEST(test_victims_reserve_ok_without_id)
{
    static victim v;
    victim_new(&v, 10000000ull, 100000000ull);
    xfer_wire_hdr h;
    xfer_wire_msg m;
    submit_and_read_reserve(&v, &h, &m);
    xfer_wire_msg a = m;
    a.type = XFER_WIRE_T_RESERVE_OK;
    a.resv_id = XFER_RESV_NONE;
    answer_then_vanish(&v, &h, &a);
    check_failed_on_shard0(&v, XFER_ERR_PROTO);
    xfer_tcp_stats st;
    xfer_tcp_stats_get(v.tcp, &st);
    ck_assert_uint_eq(st.bad_replies, 1);
    ck_assert_uint_eq(st.bad_frames, 1);
    victim_del(&v);
}
END_TEST

START_TEST(test_victims_reply_for_wrong_attempt)
{
    static victim v;
    victim_new(&v, 10000000ull, 100000000ull);
    xfer_wire_hdr h;
    xfer_wire_msg m;
    submit_and_read_reserve(&v, &h, &m);
    xfer_wire_msg a = m;
    a.type = XFER_WIRE_T_RESERVE_OK;
    a.resv_id = 77;
    a.attempt = m.attempt + 1;
    answer_then_vanish(&v, &h, &a);
    check_failed_on_shard0(&v, XFER_ERR_PROTO);
    victim_del(&v);
}
END_TEST

START_TEST(test_victims_fatal_code_refused)
{
    static victim v;
    victim_new(&v, 10000000ull, 100000000ull);
    xfer_wire_hdr h;
    xfer_wire_msg m;
    submit_and_read_reserve(&v, &h, &m);
    xfer_wire_msg a = m;
    a.type = XFER_WIRE_T_ERROR;
    a.code = XFER_ERR_INTERNAL;
    answer_then_vanish(&v, &h, &a);
    check_failed_on_shard0(&v, XFER_ERR_PROTO);
    xfer_tcp_stats st;
    xfer_tcp_stats_get(v.tcp, &st);
    ck_assert_uint_eq(st.bad_replies, 1);
    victim_del(&v);
}
END_TEST

/* A code only the producer itself gives (its shutdown's ABANDONED) is no
 * shard's to send: refused like the fatal band. */
START_TEST(test_victims_local_code_refused)
{
    static victim v;
    victim_new(&v, 10000000ull, 100000000ull);
    xfer_wire_hdr h;
    xfer_wire_msg m;
    submit_and_read_reserve(&v, &h, &m);
    xfer_wire_msg a = m;
    a.type = XFER_WIRE_T_ERROR;
    a.code = XFER_ERR_ABANDONED;
    answer_then_vanish(&v, &h, &a);
    check_failed_on_shard0(&v, XFER_ERR_PROTO);
    victim_del(&v);
}
END_TEST

START_TEST(test_victims_unknown_code_is_remote)
{
    static victim v;
    victim_new(&v, 10000000ull, 100000000ull);
    xfer_wire_hdr h;
    xfer_wire_msg m;
    submit_and_read_reserve(&v, &h, &m);
    xfer_wire_msg a = m;
    a.type = XFER_WIRE_T_ERROR;
    a.code = -77; /* in the peer band, unknown to this build */
    ck_assert_str_eq(xfer_err_name(a.code), "UNKNOWN");
    ck_assert_int_eq(tw_send_msg(v.conn, &a, h.req, NULL), 0);
    /* The rollback's CANCEL comes on the same connection: answer it. */
    ck_assert(pump_until_readable(&v, v.conn));
    ck_assert_int_eq(tw_recv_msg(v.conn, &h, &m), 0);
    ck_assert_int_eq(m.type, XFER_WIRE_T_CANCEL);
    a = m;
    a.type = XFER_WIRE_T_CANCEL_ACK;
    ck_assert_int_eq(tw_send_msg(v.conn, &a, h.req, NULL), 0);
    ck_assert(mp_run_until(v.base, &v.done, 20000));
    check_failed_on_shard0(&v, XFER_ERR_REMOTE);
    ck_assert_uint_eq(v.res.rollback_failed, 0);
    xfer_tcp_stats st;
    xfer_tcp_stats_get(v.tcp, &st);
    ck_assert_uint_eq(st.bad_replies, 0);
    ck_assert_uint_eq(st.losses, 0);
    victim_del(&v);
}
END_TEST

START_TEST(test_victims_backoff_delays)
{
    uint64_t seed = tu_seed("test_victims_backoff_delays", 24);
    uint8_t s[8];
    for (int i = 0; i < 8; i++)
        s[i] = (uint8_t)(seed >> (8 * i));
    xfer_backoff b;
    xfer_backoff_init(&b, s, sizeof s);
    const uint64_t min = 10, max = 1000;
    uint64_t now = 1000000, d = min;
    for (int i = 0; i < 20; i++) {
        /* up for less than max, then lost: the delay grows */
        xfer_backoff_up(&b, now);
        uint64_t got = xfer_backoff_lost(&b, now + max - 1, min, max);
        ck_assert_uint_ge(got, d - d / 2);
        ck_assert_uint_le(got, d);
        d = d * 2 > max ? max : d * 2;
        now += 10 * max;
    }
    ck_assert_uint_eq(b.cur_ns, max);
    /* failed connects (never up) also grow and stay capped */
    for (int i = 0; i < 5; i++)
        ck_assert_uint_le(xfer_backoff_lost(&b, now, min, max), max);
    /* a connection that stayed up for max: redial at once, then restart
     * from min */
    xfer_backoff_up(&b, now);
    ck_assert_uint_eq(xfer_backoff_lost(&b, now + max, min, max), 0);
    uint64_t got = xfer_backoff_lost(&b, now + max, min, max);
    ck_assert_uint_ge(got, min / 2);
    ck_assert_uint_le(got, min);
    /* the jitter spreads: two generators of other seeds differ somewhere */
    xfer_backoff a, c;
    uint8_t s2[1] = {1}, s3[1] = {2};
    xfer_backoff_init(&a, s2, 1);
    xfer_backoff_init(&c, s3, 1);
    bool differ = false;
    for (int i = 0; i < 16; i++) {
        a.cur_ns = c.cur_ns = max;
        differ |= xfer_backoff_lost(&a, 0, min, 1u << 20) !=
                  xfer_backoff_lost(&c, 0, min, 1u << 20);
    }
    ck_assert(differ);
}
END_TEST

START_TEST(test_victims_flapping_shard_not_redialled_at_once)
{
    static victim v;
    victim_new(&v, 10000000000ull, 20000000000ull);
    fake_accept_hello(&v);
    /* Let the producer read the HELLO_ACK (the connection is up), then the
     * shard closes at once. */
    uint64_t end = mp_now_ms() + 5000;
    while (!xfer_tcp_connected(v.tcp, 0) && mp_now_ms() < end)
        event_base_loop(v.base, EVLOOP_NONBLOCK);
    ck_assert(xfer_tcp_connected(v.tcp, 0));
    close(v.conn);
    v.conn = -1;
    /* No second dial while the loop runs for 0.5 s (the backoff is at
     * least 5 s): the listener's queue stays empty. */
    ck_assert_int_eq(dials_within(v.base, v.lis, 500), 0);
    xfer_tcp_stats st;
    xfer_tcp_stats_get(v.tcp, &st);
    ck_assert_uint_eq(st.losses, 1);
    ck_assert_uint_eq(st.reconnects, 0);
    ck_assert(!xfer_tcp_connected(v.tcp, 0));
    /* The metrics show the loss, and no redial yet. */
    xfer_metrics_config mc;
    xfer_metrics_config_default(&mc);
    mc.base = v.base;
    xfer_metrics *mx;
    ck_assert_int_eq(xfer_metrics_new(&mc, &mx), 0);
    ck_assert_int_eq(xfer_metrics_add_tcp(mx, v.tcp), 0);
    char text[4096];
    ck_assert_uint_lt(xfer_metrics_render(mx, text, sizeof text), sizeof text);
    ck_assert_ptr_nonnull(strstr(text, "\nxfer_tcp_losses_total 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nxfer_tcp_reconnects_total 0\n"));
    xfer_metrics_del(mx);
    victim_del(&v);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The consumer as the victim (class 2: deadlines; class 3: backoff)       */
/* ---------------------------------------------------------------------- */

typedef struct cvictim {
    int lis, conn;
    uint16_t port;
    char addr[32];
    struct event_base *base;
    xfer_consumer *c;
    int noutcomes;
    uint64_t last_id;
    int32_t last_reason;
} cvictim;

static void cv_available(void *ud, uint64_t id, uint32_t attempt,
                         const xfer_region *reg, uint16_t n)
{
    cvictim *v = ud;
    v->noutcomes++;
    v->last_id = id;
    v->last_reason = 0;
}

static void cv_unavailable(void *ud, uint64_t id, int32_t reason,
                           uint64_t shards)
{
    cvictim *v = ud;
    v->noutcomes++;
    v->last_id = id;
    v->last_reason = reason;
}

static void cv_new(cvictim *v, uint64_t req_timeout_ns, uint64_t min_ns,
                   uint64_t max_ns)
{
    memset(v, 0, sizeof *v);
    signal(SIGPIPE, SIG_IGN);
    victim tmp;
    fake_listen(&tmp);
    v->lis = tmp.lis;
    v->port = tmp.port;
    memcpy(v->addr, tmp.addr, sizeof v->addr);
    v->conn = -1;
    v->base = event_base_new();
    const char *addrs[1] = {v->addr};
    xfer_consumer_config cc;
    xfer_consumer_config_default(&cc);
    cc.base = v->base;
    cc.nshards = 1;
    cc.addrs = addrs;
    cc.available = cv_available;
    cc.unavailable = cv_unavailable;
    cc.ud = v;
    cc.request_timeout_ns = req_timeout_ns;
    cc.reconnect_min_ns = min_ns;
    cc.reconnect_max_ns = max_ns;
    ck_assert_int_eq(xfer_consumer_new(&cc, &v->c), 0);
}

static void cv_del(cvictim *v)
{
    xfer_consumer_del(v->c);
    event_base_loop(v->base, EVLOOP_NONBLOCK);
    event_base_free(v->base);
    if (v->conn >= 0)
        close(v->conn);
    close(v->lis);
}

static bool cv_pump_until_readable(cvictim *v, int fd, int ms)
{
    return pump_readable(v->base, fd, ms);
}

/* Accept the consumer's link and read its HELLO2 and SUBSCRIBE; answer
 * them when `answer`. */
static void cv_accept(cvictim *v, bool answer)
{
    ck_assert(cv_pump_until_readable(v, v->lis, 5000));
    v->conn = accept(v->lis, NULL, NULL);
    ck_assert_int_ge(v->conn, 0);
    struct timeval tv = {5, 0};
    setsockopt(v->conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    xfer_wire_hdr h[2];
    xfer_wire_msg m[2];
    for (int i = 0; i < 2; i++) {
        ck_assert(cv_pump_until_readable(v, v->conn, 5000));
        ck_assert_int_eq(tw_recv_msg(v->conn, &h[i], &m[i]), 0);
    }
    ck_assert_int_eq(m[0].type, XFER_WIRE_T_HELLO2);
    ck_assert_int_eq(m[1].type, XFER_WIRE_T_SUBSCRIBE);
    if (!answer)
        return;
    xfer_wire_msg a = {.type = XFER_WIRE_T_HELLO_ACK, .version = 1,
                       .shard = 0, .pool_bytes = 1u << 20,
                       .max_write = XFER_WIRE_MAX_DATA};
    ck_assert_int_eq(tw_send_msg(v->conn, &a, h[0].req, NULL), 0);
    xfer_wire_msg b = {.type = XFER_WIRE_T_SUBSCRIBE_ACK};
    ck_assert_int_eq(tw_send_msg(v->conn, &b, h[1].req, NULL), 0);
    uint64_t end = mp_now_ms() + 5000;
    while (!xfer_consumer_connected(v->c, 0) && mp_now_ms() < end)
        event_base_loop(v->base, EVLOOP_NONBLOCK);
    ck_assert(xfer_consumer_connected(v->c, 0));
}

/* A shard that says READY and never answers the TAKE it causes: the id
 * still ends (unavailable, CONN_LOST) once the request timeout takes the
 * link down.  On fdf0a61 it had no outcome for good. */
START_TEST(test_victims_consumer_take_never_answered)
{
    static cvictim v;
    cv_new(&v, 300000000ull, 10000000ull, 100000000ull);
    cv_accept(&v, true);
    xfer_wire_msg ev = {.type = XFER_WIRE_T_EVENT,
                        .kind = XFER_SHARD_EV_READY, .shard = 0, .id = 7,
                        .attempt = 1, .resv_id = 5, .len = 64};
    ck_assert_int_eq(tw_send_msg(v.conn, &ev, 0, NULL), 0);
    ck_assert(cv_pump_until_readable(&v, v.conn, 5000));
    xfer_wire_hdr h;
    xfer_wire_msg m;
    ck_assert_int_eq(tw_recv_msg(v.conn, &h, &m), 0);
    ck_assert_int_eq(m.type, XFER_WIRE_T_TAKE);
    ck_assert_uint_eq(m.id, 7);
    /* never answered */
    uint64_t end = mp_now_ms() + 10000;
    while (v.noutcomes == 0 && mp_now_ms() < end)
        event_base_loop(v.base, EVLOOP_NONBLOCK);
    ck_assert_int_eq(v.noutcomes, 1);
    ck_assert_uint_eq(v.last_id, 7);
    ck_assert_int_eq(v.last_reason, XFER_ERR_CONN_LOST);
    xfer_consumer_stats st;
    xfer_consumer_stats_get(v.c, &st);
    ck_assert_uint_eq(st.request_timeouts, 1);
    ck_assert_uint_eq(st.losses, 1);
    cv_del(&v);
}
END_TEST

/* A shard that accepts and never answers HELLO2: the link is dialled
 * again after the request timeout.  On fdf0a61 it waited for ever. */
START_TEST(test_victims_consumer_hello_never_answered)
{
    static cvictim v;
    cv_new(&v, 300000000ull, 10000000ull, 100000000ull);
    cv_accept(&v, false);
    int first = v.conn;
    v.conn = -1;
    cv_accept(&v, false); /* the second dial */
    close(first);
    ck_assert(!xfer_consumer_connected(v.c, 0));
    xfer_consumer_stats st;
    xfer_consumer_stats_get(v.c, &st);
    ck_assert_uint_ge(st.request_timeouts, 1);
    ck_assert_uint_ge(st.reconnects, 1);
    cv_del(&v);
}
END_TEST

/* A shard that closes right after the handshake is not redialled at once
 * (on fdf0a61: after 1 microsecond): with a 10 s minimum backoff no
 * second dial comes while the loop runs for 0.5 s. */
START_TEST(test_victims_consumer_flapping_shard_not_redialled_at_once)
{
    static cvictim v;
    cv_new(&v, 5000000000ull, 10000000000ull, 20000000000ull);
    cv_accept(&v, true);
    close(v.conn);
    v.conn = -1;
    ck_assert_int_eq(dials_within(v.base, v.lis, 500), 0);
    xfer_consumer_stats st;
    xfer_consumer_stats_get(v.c, &st);
    ck_assert_uint_eq(st.losses, 1);
    ck_assert_uint_eq(st.reconnects, 0);
    char text[8192];
    ck_assert_uint_lt(xfer_consumer_metrics(v.c, text, sizeof text),
                      sizeof text);
    ck_assert_ptr_nonnull(
        strstr(text, "\nxfer_consumer_reconnects_total 0\n"));
    cv_del(&v);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("victims");
    TCase *tc = tcase_create("producer");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_victims_reserve_ok_without_id);
    tcase_add_test(tc, test_victims_reply_for_wrong_attempt);
    tcase_add_test(tc, test_victims_fatal_code_refused);
    tcase_add_test(tc, test_victims_local_code_refused);
    tcase_add_test(tc, test_victims_unknown_code_is_remote);
    tcase_add_test(tc, test_victims_backoff_delays);
    tcase_add_test(tc, test_victims_flapping_shard_not_redialled_at_once);
    suite_add_tcase(s, tc);
    TCase *tcc = tcase_create("consumer");
    tcase_set_timeout(tcc, 60);
    tcase_add_test(tcc, test_victims_consumer_take_never_answered);
    tcase_add_test(tcc, test_victims_consumer_hello_never_answered);
    tcase_add_test(tcc,
                   test_victims_consumer_flapping_shard_not_redialled_at_once);
    suite_add_tcase(s, tcc);
    return tu_run(s);
}
