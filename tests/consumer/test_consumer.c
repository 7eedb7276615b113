/*
 * tests/consumer/test_consumer.c - the consumer client (xfer/consumer.h)
 * against real shard servers and a real producer, all in this process on
 * one event base (stack.h).
 */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <event2/event.h>

#include "stack.h"
#include "testutil.h"
#include "wire.h"

#define S4 4

typedef struct pump {
    stack *s;
    uint64_t next, last;
    uint32_t *free_slots, nfree;
} pump;

static bool all_done(void *ud)
{
    stack *s = ud;
    return s->completions >= s->max_id &&
           s->available + s->unavailable >= s->max_id;
}

static void setup_stack(stack *s, uint64_t n, uint32_t slice)
{
    ck_assert_int_eq(st_start_servers(s, S4, 1 << 20, n, NULL), 0);
    ck_assert_int_eq(st_start_producer(s, slice, 64, 5000000000ull), 0);
    ck_assert_int_eq(st_start_consumer(s, NULL), 0);
    ck_assert(st_run(s, st_all_up, s, 5000));
    ck_assert_uint_eq(s->links_up, S4);
}

/* Every transfer the producer completes is available to the consumer
 * exactly once, with the right bytes at the regions reported, and once
 * released nothing is held on any shard. */
START_TEST(test_consumer_every_done_transfer_available)
{
    stack s;
    setup_stack(&s, 40, 3000);
    s.auto_release = true;
    for (uint64_t id = 1; id <= 40; id++)
        ck_assert_int_eq(st_submit(&s, id, (uint32_t)(id % 64)), 0);
    ck_assert(st_run(&s, all_done, &s, 10000));
    for (uint64_t id = 1; id <= 40; id++) {
        ck_assert_uint_eq(s.done[id].n, 1);
        ck_assert_int_eq(s.done[id].res.status, 0);
        ck_assert_uint_eq(s.out[id].n, 1);
        ck_assert(s.out[id].available);
        ck_assert(s.out[id].bytes_ok);
    }
    ck_assert_uint_eq(s.twice, 0);
    st_spin(&s, 50);
    ck_assert_uint_eq(st_bytes_in_use(&s), 0);
    xfer_consumer_stats cs;
    ck_assert_int_eq(xfer_consumer_stats_get(s.cons, &cs), 0);
    ck_assert_uint_eq(cs.available, 40);
    ck_assert_uint_eq(cs.held, 0);
    ck_assert_uint_eq(cs.pending, 0);
    st_stop(&s);
}
END_TEST


/* A stack of S servers and a consumer, no engine: the raw producer of
 * stack.c drives one shard op at a time. */
static void setup_raw(stack *s, uint16_t S, uint64_t take_grace_ns)
{
    xfer_server_config sc;
    xfer_server_config_default(&sc);
    sc.lease_ttl_ns = 60000000000ull; /* nothing here waits for a lease */
    sc.tombstone_ttl_ns = 120000000000ull; /* never below the lease */
    if (take_grace_ns)
        sc.take_grace_ns = take_grace_ns;
    ck_assert_int_eq(st_start_servers(s, S, 1 << 20, 64, &sc), 0);
    s->slice = 2048;
    ck_assert_int_eq(st_start_consumer(s, NULL), 0);
    ck_assert(st_run(s, st_all_up, s, 5000));
}

static bool bytes_free(void *ud)
{
    return st_bytes_in_use(ud) == 0;
}

static void raw_cancel(stack *s, int fd, uint64_t id, uint64_t resv)
{
    xfer_wire_msg m = {.type = XFER_WIRE_T_CANCEL, .id = id, .attempt = 1,
                       .resv_id = resv};
    xfer_wire_msg r;
    ck_assert_int_eq(st_raw_call(s, fd, &m, NULL, &r), 0);
}

typedef struct wait_n {
    stack *s;
    uint64_t id;
} wait_n;

static bool has_outcome(void *ud)
{
    wait_n *w = ud;
    return w->s->out[w->id].n > 0;
}

/* A consumer cancel racing the producer's commits, for every order of the
 * three shards' commits (_i / 4, a permutation) and every position of the
 * cancel among them (_i % 4; at the end, half the time before the last
 * ready reached the consumer): the id has exactly one outcome; it is never
 * available once a cancel returned 0 (a cancel that finds it available
 * says XFER_ERR_STATE); and once the producer rolled back, nothing is
 * held on any shard, without waiting for a lease. */
START_TEST(test_consumer_cancel_races_commit_every_order)
{
    static const uint16_t perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                         {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    const uint16_t *perm = perms[_i / 4];
    int at = _i % 4;
    stack s;
    setup_raw(&s, 3, 0);
    const uint64_t id = 7;
    ck_assert_int_eq(xfer_consumer_expect(s.cons, id, 0), 0);
    int fd[3];
    uint64_t resv[3];
    int commit_rc[3] = {1, 1, 1};
    for (uint16_t k = 0; k < 3; k++) {
        fd[k] = st_raw_connect(&s, k);
        ck_assert_int_ge(fd[k], 0);
        ck_assert_int_eq(st_raw_put(&s, fd[k], k, id, 1, false, &resv[k]), 0);
    }
    int cancel_rc = 1;
    for (int j = 0; j <= 3; j++) {
        if (j == at)
            cancel_rc = xfer_consumer_cancel(s.cons, id);
        if (j == 3)
            break;
        uint16_t k = perm[j];
        xfer_wire_msg m = {.type = XFER_WIRE_T_COMMIT, .id = id,
                           .attempt = 1, .resv_id = resv[k]};
        xfer_wire_msg r;
        ck_assert_int_eq(st_raw_call(&s, fd[k], &m, NULL, &r), 0);
        commit_rc[k] = r.type == XFER_WIRE_T_ERROR ? r.code : 0;
        /* The ready event reaches the consumer, except that half of the
         * last-position cases cancel while the last ready and the takes
         * are still on their way. */
        if (!(j == 2 && at == 3 && (_i / 4) % 2))
            st_spin(&s, 15);
    }
    wait_n w = {&s, id};
    ck_assert(st_run(&s, has_outcome, &w, 5000));
    st_spin(&s, 20);
    ck_assert_uint_eq(s.out[id].n, 1);
    if (cancel_rc == 0)
        ck_assert(!s.out[id].available);
    else
        ck_assert_int_eq(cancel_rc, XFER_ERR_STATE);
    if (s.out[id].available) {
        ck_assert(s.out[id].bytes_ok);
        ck_assert_int_eq(xfer_consumer_release(s.cons, id), 0);
    } else {
        for (uint16_t k = 0; k < 3; k++) /* the producer rolls back */
            if (commit_rc[k] != 0)
                raw_cancel(&s, fd[k], id, resv[k]);
    }
    ck_assert(st_run(&s, bytes_free, &s, 3000));
    for (uint16_t k = 0; k < 3; k++)
        close(fd[k]);
    st_stop(&s);
}
END_TEST

/* An expected id that no shard ever reports ready ends unavailable at its
 * deadline, TIMEOUT, naming every shard. */
START_TEST(test_consumer_expect_deadline)
{
    stack s;
    setup_raw(&s, 4, 0);
    uint64_t t0 = xfer_consumer_now(s.cons);
    ck_assert_int_eq(xfer_consumer_expect(s.cons, 9, t0 + 80000000ull), 0);
    ck_assert_int_eq(xfer_consumer_expect(s.cons, 0, 0), XFER_ERR_INVALID_ARG);
    wait_n w = {&s, 9};
    ck_assert(st_run(&s, has_outcome, &w, 5000));
    ck_assert(xfer_consumer_now(s.cons) >= t0 + 80000000ull);
    ck_assert(!s.out[9].available);
    ck_assert_int_eq(s.out[9].reason, XFER_ERR_TIMEOUT);
    ck_assert_uint_eq(s.out[9].missing, 0xF);
    /* A tombstoned id cannot be expected again. */
    ck_assert_int_eq(xfer_consumer_expect(s.cons, 9, 0), XFER_ERR_CANCELLED);
    st_spin(&s, 30);
    ck_assert_uint_eq(s.out[9].n, 1);
    st_stop(&s);
}
END_TEST

/* A producer's rollback before any ready is only "cancelled" events: an
 * expected id reports unavailable, CANCELLED, at once; an id nobody
 * expected reports nothing (only a tombstone is left). */
START_TEST(test_consumer_expected_id_reports_rollback)
{
    stack s;
    setup_raw(&s, 2, 0);
    ck_assert_int_eq(xfer_consumer_expect(s.cons, 11, 0), 0);
    int fd = st_raw_connect(&s, 0);
    uint64_t r11, r12;
    ck_assert_int_eq(st_raw_put(&s, fd, 0, 11, 1, false, &r11), 0);
    ck_assert_int_eq(st_raw_put(&s, fd, 0, 12, 1, false, &r12), 0);
    raw_cancel(&s, fd, 11, r11);
    raw_cancel(&s, fd, 12, r12);
    wait_n w = {&s, 11};
    ck_assert(st_run(&s, has_outcome, &w, 5000));
    st_spin(&s, 30);
    ck_assert_int_eq(s.out[11].reason, XFER_ERR_CANCELLED);
    ck_assert_uint_eq(s.out[12].n, 0);
    ck_assert_uint_eq(s.out[11].n, 1);
    close(fd);
    st_stop(&s);
}
END_TEST

static bool links_four(void *ud)
{
    return ((stack *)ud)->links_up == 4;
}

/* A shard's connection is lost while an id waits (shards 0 and 1 ready,
 * 2 and 3 not): the id is unavailable at once, CONN_LOST, naming the lost
 * shard among the missing; the consumer reconnects with backoff when the
 * server is back, and the next id is available. */
START_TEST(test_consumer_lost_link_names_shard)
{
    stack s;
    setup_raw(&s, 4, 0);
    int fd[4];
    uint64_t resv[4];
    for (uint16_t k = 0; k < 2; k++) {
        fd[k] = st_raw_connect(&s, k);
        ck_assert_int_eq(st_raw_put(&s, fd[k], k, 5, 1, true, &resv[k]), 0);
    }
    st_spin(&s, 30);
    ck_assert_uint_eq(s.out[5].n, 0);
    st_stop_server(&s, 2);
    wait_n w = {&s, 5};
    ck_assert(st_run(&s, has_outcome, &w, 5000));
    ck_assert_int_eq(s.out[5].reason, XFER_ERR_CONN_LOST);
    ck_assert_uint_eq(s.out[5].missing, 0xC);
    ck_assert_uint_eq(s.links_up, 3);
    ck_assert_int_eq(st_restart_server(&s, 2), 0);
    ck_assert(st_run(&s, links_four, &s, 5000));
    for (uint16_t k = 2; k < 4; k++)
        fd[k] = st_raw_connect(&s, k);
    for (uint16_t k = 0; k < 4; k++)
        ck_assert_int_eq(st_raw_put(&s, fd[k], k, 6, 1, true, &resv[k]), 0);
    w.id = 6;
    ck_assert(st_run(&s, has_outcome, &w, 5000));
    ck_assert(s.out[6].available);
    ck_assert(s.out[6].bytes_ok);
    ck_assert_int_eq(xfer_consumer_release(s.cons, 6), 0);
    ck_assert(st_run(&s, bytes_free, &s, 3000));
    xfer_consumer_stats cs;
    ck_assert_int_eq(xfer_consumer_stats_get(s.cons, &cs), 0);
    ck_assert_uint_ge(cs.losses, 1);
    ck_assert_uint_eq(cs.unavailable_conn_lost, 1);
    for (uint16_t k = 0; k < 4; k++)
        close(fd[k]);
    st_stop(&s);
}
END_TEST

typedef struct grace_ctx {
    stack *s;
    uint64_t orphaned;
} grace_ctx;

static uint64_t server_sum(stack *s, int what)
{
    uint64_t v = 0;
    for (uint16_t k = 0; k < s->S; k++) {
        xfer_server_stats st;
        ck_assert_int_eq(xfer_server_stats_get(s->srv[k], k, &st), 0);
        v += what == 0 ? st.taken_now : what == 1 ? st.orphaned_now
                                                  : st.grace_released;
    }
    return v;
}

static bool four_available(void *ud)
{
    return ((stack *)ud)->available == 4;
}

/* Taken data whose consumer is gone (its connections closed without a
 * release) stays taken for the grace period, then every byte is back. */
START_TEST(test_consumer_gone_take_grace_releases)
{
    stack s;
    setup_raw(&s, 2, 150000000ull);
    int fd[2];
    uint64_t resv[2];
    for (uint16_t k = 0; k < 2; k++)
        fd[k] = st_raw_connect(&s, k);
    for (uint64_t id = 1; id <= 4; id++)
        for (uint16_t k = 0; k < 2; k++)
            ck_assert_int_eq(st_raw_put(&s, fd[k], k, id, 1, true, &resv[k]),
                             0);
    ck_assert(st_run(&s, four_available, &s, 5000));
    ck_assert_uint_eq(server_sum(&s, 0), 8);
    ck_assert_uint_eq(server_sum(&s, 1), 0);
    xfer_consumer_del(s.cons); /* gone without releasing */
    s.cons = NULL;
    st_spin(&s, 30);
    ck_assert_uint_eq(server_sum(&s, 1), 8);
    ck_assert_uint_gt(st_bytes_in_use(&s), 0);
    ck_assert(st_run(&s, bytes_free, &s, 3000));
    ck_assert_uint_eq(server_sum(&s, 2), 8);
    ck_assert_uint_eq(server_sum(&s, 0), 0);
    for (uint16_t k = 0; k < 2; k++)
        close(fd[k]);
    st_stop(&s);
}
END_TEST

typedef struct poster {
    xfer_consumer *c;
    uint64_t first, n, deadline;
    int failures;
} poster;

static void *post_expects(void *arg)
{
    poster *p = arg;
    for (uint64_t id = p->first; id < p->first + p->n; id++)
        if (xfer_consumer_post_expect(p->c, id, p->deadline) != 0)
            p->failures++;
    if (xfer_consumer_post_cancel(p->c, p->first) != 0)
        p->failures++;
    return NULL;
}

static bool all_out(void *ud)
{
    stack *s = ud;
    for (uint64_t id = 10; id < 40; id++)
        if (s->out[id].n == 0)
            return false;
    return true;
}

/* Another thread expects ids and cancels one through the mailbox: each
 * gets exactly one outcome, from the loop (the cancelled one CANCELLED,
 * the rest TIMEOUT at their deadline). */
START_TEST(test_consumer_mailbox_from_another_thread)
{
    stack s;
    setup_raw(&s, 2, 0);
    poster p = {.c = s.cons, .first = 10, .n = 30,
                .deadline = xfer_consumer_now(s.cons) + 100000000ull};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, post_expects, &p), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(p.failures, 0);
    ck_assert(st_run(&s, all_out, &s, 5000));
    st_spin(&s, 20);
    for (uint64_t id = 10; id < 40; id++) {
        ck_assert_uint_eq(s.out[id].n, 1);
        ck_assert_int_eq(s.out[id].reason, id == 10 ? XFER_ERR_CANCELLED
                                                    : XFER_ERR_TIMEOUT);
    }
    st_stop(&s);
}
END_TEST

/* Data that became READY while no consumer was subscribed (a consumer
 * that starts late, or reconnects) is not missed: a SUBSCRIBE is followed
 * by a READY event for every reservation already READY. */
START_TEST(test_consumer_late_subscriber_sees_ready)
{
    stack s;
    xfer_server_config sc;
    xfer_server_config_default(&sc);
    ck_assert_int_eq(st_start_servers(&s, 2, 1 << 20, 8, &sc), 0);
    s.slice = 2048;
    int fd[2];
    uint64_t resv;
    for (uint16_t k = 0; k < 2; k++) {
        fd[k] = st_raw_connect(&s, k);
        ck_assert_int_eq(st_raw_put(&s, fd[k], k, 3, 1, true, &resv), 0);
    }
    ck_assert_int_eq(st_start_consumer(&s, NULL), 0);
    wait_n w = {&s, 3};
    ck_assert(st_run(&s, has_outcome, &w, 5000));
    ck_assert(s.out[3].available);
    ck_assert(s.out[3].bytes_ok);
    ck_assert_int_eq(xfer_consumer_release(s.cons, 3), 0);
    ck_assert(st_run(&s, bytes_free, &s, 3000));
    for (uint16_t k = 0; k < 2; k++)
        close(fd[k]);
    st_stop(&s);
}
END_TEST

/* A raw shard for the test below: a loopback listener whose one
 * connection this test answers by hand. */
static int raw_listen(char *addr, size_t n)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(fd, 4), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    snprintf(addr, n, "127.0.0.1:%u", ntohs(sa.sin_port));
    return fd;
}

static void link_up_break(void *ud, uint16_t shard, bool up)
{
    (void)shard;
    if (up)
        event_base_loopbreak(ud);
}

/* The application may leave its loop from any callback, with the other
 * links' input still queued, then delete the consumer and free the base:
 * every connection is closed by then (nothing is left to a loop turn that
 * never comes; with libevent's deferred bufferevent callbacks, the link
 * whose input was queued behind the break kept its socket and its buffers
 * for ever: the leak the TCP demo's consumer process showed under ASan). */
START_TEST(test_consumer_del_after_break_closes_every_link)
{
    struct event_base *base = event_base_new();
    char addr[2][32];
    const char *addrs[2] = {addr[0], addr[1]};
    int lfd[2], fd[2];
    for (int k = 0; k < 2; k++)
        lfd[k] = raw_listen(addr[k], sizeof addr[k]);
    xfer_consumer_config c;
    xfer_consumer_config_default(&c);
    c.base = base;
    c.nshards = 2;
    c.addrs = addrs;
    c.available = (xfer_consumer_available_fn)1;
    c.unavailable = (xfer_consumer_unavailable_fn)1;
    c.link = link_up_break;
    c.ud = base;
    xfer_consumer *cons = NULL;
    ck_assert_int_eq(xfer_consumer_new(&c, &cons), 0);
    /* Let both links connect and send their HELLO2 and SUBSCRIBE. */
    for (int k = 0; k < 2; k++) {
        uint8_t junk[512];
        fd[k] = -1;
        for (int i = 0; i < 5000 && fd[k] < 0; i++) {
            event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
            fd[k] = accept(lfd[k], NULL, NULL);
        }
        ck_assert_int_ge(fd[k], 0);
        ssize_t got = 0;
        for (int i = 0; i < 5000 && got <= 0; i++) {
            event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
            got = recv(fd[k], junk, sizeof junk, MSG_DONTWAIT);
        }
        ck_assert_int_gt(got, 0);
    }
    /* Both shards answer at once: both links are readable in one turn,
     * and the first to come up leaves the loop. */
    for (int k = 0; k < 2; k++) {
        uint8_t buf[2 * XFER_WIRE_MAX_FIXED];
        xfer_wire_msg ack = {.type = XFER_WIRE_T_HELLO_ACK,
                             .version = XFER_WIRE_VERSION,
                             .shard = (uint16_t)k, .pool_bytes = 1 << 20};
        xfer_wire_msg sub = {.type = XFER_WIRE_T_SUBSCRIBE_ACK};
        size_t n = xfer_wire_encode(&ack, 1, buf, sizeof buf);
        ck_assert_uint_gt(n, 0);
        size_t m = xfer_wire_encode(&sub, 2, buf + n, sizeof buf - n);
        ck_assert_uint_gt(m, 0);
        ck_assert_int_eq(send(fd[k], buf, n + m, 0), (ssize_t)(n + m));
    }
    struct timespec both_sent = {0, 20000000};
    nanosleep(&both_sent, NULL);
    event_base_dispatch(base);
    xfer_consumer_stats cs;
    ck_assert_int_eq(xfer_consumer_stats_get(cons, &cs), 0);
    ck_assert_uint_eq(cs.connects, 1); /* the other's input is queued */
    xfer_consumer_del(cons);
    event_base_free(base);
    /* Each shard sees its connection closed: EOF, or a reset where the
     * consumer closed with our acks unread; not "nothing yet" (EAGAIN). */
    for (int k = 0; k < 2; k++) {
        uint8_t b;
        errno = 0;
        ssize_t r = recv(fd[k], &b, 1, MSG_DONTWAIT);
        ck_assert_msg(r == 0 || (r < 0 && errno == ECONNRESET),
                      "shard %d: link still open after del (errno %d)", k,
                      errno);
        close(fd[k]);
        close(lfd[k]);
    }
}
END_TEST

/* Configs: an unknown version and missing callbacks are refused. */
START_TEST(test_consumer_config_checked)
{
    struct event_base *base = event_base_new();
    const char *addrs[1] = {"127.0.0.1:1"};
    xfer_consumer_config c;
    xfer_consumer_config_default(&c);
    c.base = base;
    c.nshards = 1;
    c.addrs = addrs;
    xfer_consumer *out = NULL;
    ck_assert_int_eq(xfer_consumer_new(&c, &out), XFER_ERR_INVALID_ARG);
    c.available = (xfer_consumer_available_fn)1;
    c.unavailable = (xfer_consumer_unavailable_fn)1;
    c.version = 99;
    ck_assert_int_eq(xfer_consumer_new(&c, &out), XFER_ERR_INVALID_ARG);
    c.version = XFER_CONSUMER_CONFIG_VERSION;
    addrs[0] = "not an address";
    ck_assert_int_eq(xfer_consumer_new(&c, &out), XFER_ERR_INVALID_ARG);
    ck_assert_ptr_null(out);
    event_base_free(base);
}
END_TEST

/* Every allocation of a consumer (but the mailbox, the engine's, which
 * uses libc) goes through its allocator: failing each in turn gives
 * XFER_ERR_NOMEM, leaves *out alone and leaks nothing. */
START_TEST(test_consumer_alloc_failure_each_allocation)
{
    struct event_base *base = event_base_new();
    const char *addrs[2] = {"127.0.0.1:1", "127.0.0.1:2"};
    int rc = XFER_ERR_NOMEM;
    long n;
    for (n = 0; rc == XFER_ERR_NOMEM && n < 1000; n++) {
        tu_alloc ta;
        tu_alloc_init(&ta, n);
        xfer_consumer_config c;
        xfer_consumer_config_default(&c);
        c.base = base;
        c.nshards = 2;
        c.addrs = addrs;
        c.available = (xfer_consumer_available_fn)1;
        c.unavailable = (xfer_consumer_unavailable_fn)1;
        c.max_ids = 64;
        c.alloc = tu_allocator(&ta);
        xfer_consumer *out = NULL;
        rc = xfer_consumer_new(&c, &out);
        if (rc == 0) {
            xfer_consumer_del(out);
        } else {
            ck_assert_int_eq(rc, XFER_ERR_NOMEM);
            ck_assert_ptr_null(out);
        }
        ck_assert_int_eq(ta.live, 0);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(n, 4);
    event_base_free(base);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("consumer");
    TCase *tc = tcase_create("consumer");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_consumer_every_done_transfer_available);
    tcase_add_loop_test(tc, test_consumer_cancel_races_commit_every_order, 0,
                        24);
    tcase_add_test(tc, test_consumer_expect_deadline);
    tcase_add_test(tc, test_consumer_expected_id_reports_rollback);
    tcase_add_test(tc, test_consumer_lost_link_names_shard);
    tcase_add_test(tc, test_consumer_gone_take_grace_releases);
    tcase_add_test(tc, test_consumer_mailbox_from_another_thread);
    tcase_add_test(tc, test_consumer_late_subscriber_sees_ready);
    tcase_add_test(tc, test_consumer_del_after_break_closes_every_link);
    tcase_add_test(tc, test_consumer_config_checked);
    tcase_add_test(tc, test_consumer_alloc_failure_each_allocation);
    suite_add_tcase(su, tc);
    return tu_run(su);
}
