/*
 * tests/consumer/test_server.c - the shard server (xfer/server.h) embedded
 * in this process, over this process's own memory: each shard's buffer is
 * fenced by PROT_NONE guard pages (a write outside it faults the test) and
 * filled with a canary, so after the run every byte outside the reserved
 * regions must still be the canary.
 */
#include <check.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "stack.h"
#include "testutil.h"
#include "wire.h"

#define NS 4
#define N 48
#define SLICE 3000

static bool all_available(void *ud)
{
    stack *s = ud;
    return s->available + s->unavailable >= N && s->completions >= N;
}

/* Bytes from the network land exactly in the regions the consumer was
 * told about (the reserved ranges), with the producer's bytes, and nothing
 * else in the caller's memory changes; a write the shard refuses (out of
 * its reservation, or for a reservation it never made) touches nothing. */
START_TEST(test_server_writes_land_only_in_reserved_ranges)
{
    stack s;
    ck_assert_int_eq(st_start_servers(&s, NS, 256 << 10, N + 8, NULL), 0);
    ck_assert_int_eq(st_start_producer(&s, SLICE, 64, 5000000000ull), 0);
    ck_assert_int_eq(st_start_consumer(&s, NULL), 0);
    ck_assert(st_run(&s, st_all_up, &s, 5000));
    for (uint64_t id = 1; id <= N; id++)
        ck_assert_int_eq(st_submit(&s, id, (uint32_t)id), 0);
    ck_assert(st_run(&s, all_available, &s, 10000));
    /* Hostile writes: past the end of a reservation, and into one that
     * does not exist; each is refused with an ERROR. */
    int fd = st_raw_connect(&s, 1);
    ck_assert_int_ge(fd, 0);
    xfer_wire_msg m = {.type = XFER_WIRE_T_RESERVE, .id = N + 1,
                       .attempt = 1, .len = 64};
    xfer_wire_msg r;
    ck_assert_int_eq(st_raw_call(&s, fd, &m, NULL, &r), 0);
    ck_assert_int_eq(r.type, XFER_WIRE_T_RESERVE_OK);
    uint8_t junk[128];
    memset(junk, 0x5a, sizeof junk);
    xfer_wire_msg w = {.type = XFER_WIRE_T_WRITE, .id = N + 1, .attempt = 1,
                       .len = 64, .off = 32, .resv_id = r.resv_id};
    ck_assert_int_eq(st_raw_call(&s, fd, &w, junk, &r), 0);
    ck_assert_int_eq(r.type, XFER_WIRE_T_ERROR);
    ck_assert_int_eq(r.code, XFER_ERR_BOUNDS);
    w = (xfer_wire_msg){.type = XFER_WIRE_T_WRITE, .id = N + 2, .attempt = 1,
                        .len = 64, .resv_id = 12345};
    ck_assert_int_eq(st_raw_call(&s, fd, &w, junk, &r), 0);
    ck_assert_int_eq(r.type, XFER_WIRE_T_ERROR);
    /* Every region: the pattern; every other byte: the canary. */
    for (uint16_t k = 0; k < NS; k++) {
        uint8_t *mark = calloc(s.mem[k].len, 1);
        for (uint64_t id = 1; id <= N; id++) {
            ck_assert(s.out[id].available);
            ck_assert(s.out[id].bytes_ok);
            const xfer_region *g = &s.out[id].reg[k];
            ck_assert_uint_eq(g->len, SLICE);
            for (uint32_t i = 0; i < g->len; i++) {
                ck_assert(!mark[g->offset + i]); /* regions are disjoint */
                mark[g->offset + i] = 1;
            }
        }
        size_t touched = 0;
        for (size_t i = 0; i < s.mem[k].len; i++)
            touched += !mark[i] && s.mem[k].buf[i] != ST_CANARY;
        ck_assert_uint_eq(touched, 0);
        free(mark);
    }
    for (uint64_t id = 1; id <= N; id++)
        ck_assert_int_eq(xfer_consumer_release(s.cons, id), 0);
    m = (xfer_wire_msg){.type = XFER_WIRE_T_CANCEL, .id = N + 1,
                        .attempt = 1};
    ck_assert_int_eq(st_raw_call(&s, fd, &m, NULL, &r), 0);
    st_spin(&s, 50);
    ck_assert_uint_eq(st_bytes_in_use(&s), 0);
    close(fd);
    st_stop(&s);
}
END_TEST

static bool closed(void *ud)
{
    char b;
    return recv(*(int *)ud, &b, 1, MSG_DONTWAIT) == 0;
}

/* A bad frame closes its own connection only: it is counted by reason,
 * and another connection to the same shard goes on being served. */
START_TEST(test_server_bad_frame_closes_one_connection)
{
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 1, 64 << 10, 4, NULL), 0);
    s.slice = 1024;
    int good = st_raw_connect(&s, 0), bad = st_raw_connect(&s, 0);
    ck_assert_int_ge(good, 0);
    ck_assert_int_ge(bad, 0);
    uint8_t garbage[16] = "not a frame....";
    ck_assert_int_eq(send(bad, garbage, sizeof garbage, 0), 16);
    ck_assert(st_run(&s, closed, &bad, 3000));
    uint64_t resv;
    ck_assert_int_eq(st_raw_put(&s, good, 0, 1, 1, true, &resv), 0);
    xfer_server_stats st;
    ck_assert_int_eq(xfer_server_stats_get(s.srv[0], 0, &st), 0);
    ck_assert_uint_eq(st.bad_frames, 1);
    ck_assert_uint_eq(st.bad_by_reason[1], 1); /* BAD_MAGIC */
    ck_assert_str_eq(xfer_server_bad_reason_name(1), "BAD_MAGIC");
    ck_assert_uint_eq(st.commits, 1);
    ck_assert_uint_eq(st.conns, 1);
    close(good);
    close(bad);
    st_stop(&s);
}
END_TEST

/* Every frame of one read is answered in that read's own callback: 32
 * RESERVEs sent in one segment are all answered after one loop iteration
 * (a bufferevent_write per reply waited for EV_WRITE and the next turn),
 * in request order. */
START_TEST(test_server_answers_a_read_in_one_pass)
{
    enum { K = 32 };
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 1, 1 << 20, 2 * K, NULL), 0);
    int fd = st_raw_connect(&s, 0);
    ck_assert_int_ge(fd, 0);
    uint8_t buf[K * XFER_WIRE_MAX_FIXED];
    size_t n = 0;
    for (uint32_t i = 0; i < K; i++) {
        xfer_wire_msg m = {.type = XFER_WIRE_T_RESERVE, .id = 100 + i,
                           .attempt = 1, .len = 512};
        n += xfer_wire_encode(&m, 1000 + i, buf + n, sizeof buf - n);
    }
    ck_assert_int_eq(send(fd, buf, n, 0), (ssize_t)n);
    event_base_loop(s.base, EVLOOP_ONCE);
    for (uint32_t i = 0; i < K; i++) {
        uint8_t h[XFER_WIRE_MAX_FIXED];
        xfer_wire_hdr hd;
        xfer_wire_msg r;
        xfer_wire_reason why;
        ck_assert_int_eq(recv(fd, h, XFER_WIRE_HDR, MSG_DONTWAIT),
                         XFER_WIRE_HDR);
        ck_assert_int_eq(xfer_wire_decode_hdr(h, XFER_WIRE_HDR, &hd, &why), 0);
        size_t body = hd.len - XFER_WIRE_HDR;
        ck_assert_int_eq(recv(fd, h + XFER_WIRE_HDR, body, MSG_DONTWAIT),
                         (ssize_t)body);
        ck_assert_int_eq(
            xfer_wire_decode_body(&hd, h + XFER_WIRE_HDR, body, &r, &why), 0);
        ck_assert_uint_eq(hd.req, 1000 + i);
        ck_assert_int_eq(r.type, XFER_WIRE_T_RESERVE_OK);
        ck_assert_uint_eq(r.id, 100 + i);
    }
    close(fd);
    st_stop(&s);
}
END_TEST

typedef struct drain_ctx {
    int calls;
    bool drained;
} drain_ctx;

static void on_drain(void *ud, bool drained)
{
    drain_ctx *d = ud;
    d->calls++;
    d->drained = drained;
}

static bool drain_called(void *ud)
{
    return ((drain_ctx *)ud)->calls > 0;
}

/* A drain refuses new reserves and calls back once, from the loop, when
 * the last reservation was cancelled; READY data is still served. */
START_TEST(test_server_drain_waits_for_reservations)
{
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 1, 64 << 10, 4, NULL), 0);
    s.slice = 1024;
    int fd = st_raw_connect(&s, 0);
    int cfd = st_raw_connect_role(&s, 0, XFER_WIRE_ROLE_CONSUMER);
    ck_assert_int_ge(cfd, 0); /* only the consumer role takes (issue 12) */
    uint64_t r1, r2;
    ck_assert_int_eq(st_raw_put(&s, fd, 0, 1, 1, false, &r1), 0);
    ck_assert_int_eq(st_raw_put(&s, fd, 0, 2, 1, true, &r2), 0);
    drain_ctx d = {0};
    ck_assert_int_eq(xfer_server_drain(s.srv[0], on_drain, &d), 0);
    ck_assert_int_eq(d.calls, 0);
    ck_assert_int_eq(xfer_server_drain(s.srv[0], on_drain, &d),
                     XFER_ERR_STATE);
    xfer_wire_msg m = {.type = XFER_WIRE_T_RESERVE, .id = 3, .attempt = 1,
                       .len = 64};
    xfer_wire_msg r;
    ck_assert_int_eq(st_raw_call(&s, fd, &m, NULL, &r), 0);
    ck_assert_int_eq(r.type, XFER_WIRE_T_ERROR);
    ck_assert_int_eq(r.code, XFER_ERR_SHUTDOWN);
    st_spin(&s, 60);
    ck_assert_int_eq(d.calls, 0);
    ck_assert(!xfer_server_drained(s.srv[0]));
    m = (xfer_wire_msg){.type = XFER_WIRE_T_CANCEL, .id = 1, .attempt = 1,
                        .resv_id = r1};
    ck_assert_int_eq(st_raw_call(&s, fd, &m, NULL, &r), 0);
    ck_assert(st_run(&s, drain_called, &d, 3000));
    ck_assert_int_eq(d.calls, 1);
    ck_assert(d.drained);
    m = (xfer_wire_msg){.type = XFER_WIRE_T_TAKE, .id = 2, .attempt = 1,
                        .resv_id = r2};
    ck_assert_int_eq(st_raw_call(&s, cfd, &m, NULL, &r), 0);
    ck_assert_int_eq(r.type, XFER_WIRE_T_TAKE_OK);
    close(cfd);
    close(fd);
    st_stop(&s);
}
END_TEST

/* Empty (what xferd waits for after a drain) means no reservation holds
 * data: READY and TAKEN count, tombstones do not (they hold no memory and
 * live their whole TTL, far past any drain timeout). */
START_TEST(test_server_empty_ignores_tombstones)
{
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 1, 1 << 20, 8, NULL), 0);
    int fd = st_raw_connect(&s, 0);
    int cfd = st_raw_connect_role(&s, 0, XFER_WIRE_ROLE_CONSUMER);
    ck_assert_int_ge(cfd, 0);
    uint64_t r1, r2;
    ck_assert_int_eq(st_raw_put(&s, fd, 0, 1, 1, false, &r1), 0);
    ck_assert_int_eq(st_raw_put(&s, fd, 0, 2, 1, true, &r2), 0);
    xfer_wire_msg m = {.type = XFER_WIRE_T_CANCEL, .id = 1, .attempt = 1,
                       .resv_id = r1};
    xfer_wire_msg r;
    ck_assert_int_eq(st_raw_call(&s, fd, &m, NULL, &r), 0);
    ck_assert(!xfer_server_empty(s.srv[0])); /* id 2 is READY */
    m = (xfer_wire_msg){.type = XFER_WIRE_T_TAKE, .id = 2, .attempt = 1,
                        .resv_id = r2};
    ck_assert_int_eq(st_raw_call(&s, cfd, &m, NULL, &r), 0);
    ck_assert_int_eq(r.type, XFER_WIRE_T_TAKE_OK);
    ck_assert(!xfer_server_empty(s.srv[0])); /* TAKEN */
    m.type = XFER_WIRE_T_RELEASE;
    ck_assert_int_eq(st_raw_call(&s, cfd, &m, NULL, &r), 0);
    xfer_server_stats st;
    ck_assert_int_eq(xfer_server_stats_get(s.srv[0], 0, &st), 0);
    ck_assert_uint_eq(st.live, 0);
    ck_assert_uint_ge(st.tombstones, 2);
    ck_assert(xfer_server_empty(s.srv[0]));
    close(cfd);
    close(fd);
    st_stop(&s);
}
END_TEST

/* With a secret (issue 12) the library producer and consumer
 * authenticate (HELLO2, CHALLENGE, AUTH; the consumer subscribes after
 * its AUTH) and every transfer is available; a raw v1 HELLO is refused. */
typedef struct wait8 {
    stack *s;
} wait8;

static bool eight_available(void *ud)
{
    stack *s = ((wait8 *)ud)->s;
    return s->available >= 8;
}

START_TEST(test_server_authenticated_stack)
{
    static const uint8_t key[] = "a shared secret of the test stack";
    xfer_server_config c;
    xfer_server_config_default(&c);
    c.secret = key;
    c.secret_len = sizeof key - 1;
    c.session_max_bytes = 256 << 10;
    c.session_max_reservations = c.max_reservations;
    c.session_max_tombstones = c.max_tombstones;
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 2, 256 << 10, 16, &c), 0);
    ck_assert_int_eq(st_start_producer(&s, SLICE, 64, 5000000000ull), 0);
    ck_assert_int_eq(st_start_consumer(&s, NULL), 0);
    ck_assert(st_run(&s, st_all_up, &s, 5000));
    for (uint64_t id = 1; id <= 8; id++)
        ck_assert_int_eq(st_submit(&s, id, (uint32_t)id), 0);
    wait8 w = {&s};
    ck_assert(st_run(&s, eight_available, &w, 10000));
    for (uint64_t id = 1; id <= 8; id++) {
        ck_assert(s.out[id].available);
        ck_assert(s.out[id].bytes_ok);
    }
    ck_assert_int_lt(st_raw_connect(&s, 0), 0); /* v1 HELLO: ERROR AUTH */
    st_stop(&s);
}
END_TEST

/* The config is checked: an unknown version, no shards, a shard without
 * memory, duplicate indexes, and a bad address are refused, and *out is
 * left alone. */
START_TEST(test_server_config_checked)
{
    struct event_base *base = event_base_new();
    static uint8_t mem[4096];
    xfer_server_shard sh[2] = {{.index = 0, .base = mem, .len = 2048},
                               {.index = 0, .base = mem + 2048, .len = 2048}};
    xfer_server_config c;
    xfer_server_config_default(&c);
    c.base = base;
    c.port = 0;
    c.nshards = 1;
    c.shards = sh;
    xfer_server *s = (xfer_server *)&c; /* must stay untouched */
    xfer_server *keep = s;
    c.version = XFER_SERVER_CONFIG_VERSION + 1; /* a newer program's */
    ck_assert_int_eq(xfer_server_new(&c, &s), XFER_ERR_INVALID_ARG);
    c.version = 0;
    ck_assert_int_eq(xfer_server_new(&c, &s), XFER_ERR_INVALID_ARG);
    c.version = XFER_SERVER_CONFIG_VERSION;
    c.nshards = 2;
    ck_assert_int_eq(xfer_server_new(&c, &s), XFER_ERR_INVALID_ARG);
    sh[1].index = 1;
    sh[1].base = NULL;
    ck_assert_int_eq(xfer_server_new(&c, &s), XFER_ERR_INVALID_ARG);
    sh[1].base = mem + 2048;
    c.addr = "localhost";
    ck_assert_int_eq(xfer_server_new(&c, &s), XFER_ERR_INVALID_ARG);
    ck_assert_ptr_eq(s, keep);
    c.addr = NULL;
    ck_assert_int_eq(xfer_server_new(&c, &s), 0);
    ck_assert_uint_gt(xfer_server_port(s), 0);
    ck_assert_uint_eq(xfer_server_nshards(s), 2);
    ck_assert_uint_eq(xfer_server_shard_index(s, 1), 1);
    xfer_server_del(s);
    /* A program built against version 1 (before issue 24's fields): its
     * struct ends before them, and what lies past it is not read. */
    xfer_server_config v1 = c;
    v1.version = 1;
    memset(&v1.write_min_rate, 0xFF,
           sizeof v1 - offsetof(xfer_server_config, write_min_rate));
    ck_assert_int_eq(xfer_server_new(&v1, &s), 0);
    ck_assert_uint_gt(xfer_server_port(s), 0);
    xfer_server_del(s);
    event_base_free(base);
}
END_TEST

/* Every allocation of a server goes through its allocator: failing each
 * in turn gives XFER_ERR_NOMEM, leaves *out alone and leaks nothing. */
START_TEST(test_server_alloc_failure_each_allocation)
{
    struct event_base *base = event_base_new();
    static uint8_t mem[2][8192];
    xfer_server_shard sh[2] = {{.index = 0, .base = mem[0], .len = 8192},
                               {.index = 3, .base = mem[1], .len = 8192}};
    int rc = XFER_ERR_NOMEM;
    long n;
    for (n = 0; rc == XFER_ERR_NOMEM && n < 1000; n++) {
        tu_alloc ta;
        tu_alloc_init(&ta, n);
        xfer_server_config c;
        xfer_server_config_default(&c);
        c.base = base;
        c.nshards = 2;
        c.shards = sh;
        c.max_reservations = 64;
        c.alloc = tu_allocator(&ta);
        xfer_server *s = NULL;
        rc = xfer_server_new(&c, &s);
        if (rc == 0) {
            ck_assert_ptr_nonnull(s);
            xfer_server_del(s);
        } else {
            ck_assert_int_eq(rc, XFER_ERR_NOMEM);
            ck_assert_ptr_null(s);
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
    Suite *su = suite_create("server");
    TCase *tc = tcase_create("server");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_server_writes_land_only_in_reserved_ranges);
    tcase_add_test(tc, test_server_bad_frame_closes_one_connection);
    tcase_add_test(tc, test_server_answers_a_read_in_one_pass);
    tcase_add_test(tc, test_server_drain_waits_for_reservations);
    tcase_add_test(tc, test_server_empty_ignores_tombstones);
    tcase_add_test(tc, test_server_config_checked);
    tcase_add_test(tc, test_server_authenticated_stack);
    tcase_add_test(tc, test_server_alloc_failure_each_allocation);
    suite_add_tcase(su, tc);
    return tu_run(su);
}
