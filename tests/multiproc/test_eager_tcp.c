/*
 * tests/multiproc/test_eager_tcp.c - the eager path over TCP: 4 real
 * xferd processes, whose HELLO_ACK says they take EAGER, and a producer
 * whose core sends small blocks as one EAGER frame per shard.
 *
 * Asserts: a clean run sends exactly one op per shard per transfer (the
 * three rounds would send three), every transfer succeeds and the shards
 * saw one reserve and one commit each; with xferd's seeded fault mix
 * (refuse, apply-then-report-failure, drop the connection) every
 * transfer still completes exactly once, a failure carries
 * consumer_may_hold, and at the end every shard pool is back to full and
 * the producer's staging is free.  Raw clients: HELLO_ACK carries the
 * eager flag; an EAGER from a consumer connection is refused (PERM) with
 * its data consumed and the connection kept; an EAGER whose header claims
 * more than XFER_WIRE_MAX_EAGER closes the connection.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mp.h"
#include "testutil.h"

#define NSHARDS 4
#define SLICE 1024u
#define INFLIGHT 16

typedef struct run {
    mp_producer p;
    uint32_t total, submitted, completed, succeeded, dup, no_flag;
    uint8_t seen[4096];
} run;

static void submit_next(run *r);

static void on_done(void *ud, const xfer_result *res)
{
    run *r = ud;
    if (res->id == 0 || res->id > r->total || r->seen[res->id]++) {
        r->dup++;
        return;
    }
    r->completed++;
    if (res->status == 0)
        r->succeeded++;
    else if (res->phase == XFER_PHASE_COMPLETING && !res->consumer_may_hold)
        r->no_flag++; /* a failed eager op may have been applied */
    if (r->submitted < r->total)
        submit_next(r);
}

static void submit_next(run *r)
{
    uint64_t id = ++r->submitted;
    uint32_t slot = (uint32_t)(id % INFLIGHT);
    xfer_slice sl[NSHARDS];
    for (int k = 0; k < NSHARDS; k++) {
        sl[k].off = ((uint64_t)slot * NSHARDS + (uint64_t)k) * SLICE;
        sl[k].len = SLICE;
        memset(r->p.staging + sl[k].off, (int)(id + (uint64_t)k), SLICE);
    }
    xfer_transfer_desc d = {.id = id, .group = r->p.group, .pool = r->p.pool,
                            .nslices = NSHARDS, .slices = sl};
    ck_assert_int_eq(xfer_engine_submit(r->p.e, &d, on_done, r), 0);
}

static bool all_done(void *ud)
{
    run *r = ud;
    return r->completed + r->dup >= r->total;
}

/* Start 4 xferd (faults: "PPM:SEED" or NULL) and a connected producer. */
static void start(run *r, mp_proc *d, uint16_t *ports, const char *faults,
                  uint64_t seed)
{
    for (int k = 0; k < NSHARDS; k++) {
        char shard[8], f[48];
        snprintf(shard, sizeof shard, "%d", k);
        snprintf(f, sizeof f, "%s:%" PRIu64, faults ? faults : "0",
                 seed + (uint64_t)k);
        const char *args[] = {"--shards", shard, "--pool", "16M",
                              "--lease-ttl", "2s", "--consume", "--quiet",
                              faults ? "--faults" : NULL, f, NULL};
        ck_assert_int_eq(mp_xferd(&d[k], 0, args), 0);
        ports[k] = d[k].port;
    }
    mp_eager_max_bytes = SLICE;
    ck_assert_int_eq(mp_producer_new(&r->p, ports, NSHARDS,
                                     (size_t)INFLIGHT * NSHARDS * SLICE,
                                     5000000000ull),
                     0);
    ck_assert(mp_producer_wait_connected(&r->p, 10000));
}

static void run_all(run *r, uint32_t total)
{
    r->total = total;
    for (uint32_t i = 0; i < INFLIGHT && r->submitted < total; i++)
        submit_next(r);
    ck_assert(mp_run_while(r->p.base, all_done, r, 60000));
    ck_assert_uint_eq(r->dup, 0);
    ck_assert_uint_eq(r->completed, total);
    for (uint32_t id = 1; id <= total; id++)
        ck_assert_uint_eq(r->seen[id], 1);
}

START_TEST(test_eager_tcp_one_frame_per_shard)
{
    static run r;
    memset(&r, 0, sizeof r);
    mp_proc d[NSHARDS];
    uint16_t ports[NSHARDS];
    start(&r, d, ports, NULL, 1);
    run_all(&r, 500);
    ck_assert_uint_eq(r.succeeded, 500);
    xfer_tcp_stats ts;
    xfer_tcp_stats_get(r.p.tcp, &ts);
    ck_assert_uint_eq(ts.ops_sent, 500u * NSHARDS); /* not 3 x */
    ck_assert(mp_producer_del(&r.p, 30000));
    for (int k = 0; k < NSHARDS; k++) {
        xfer_wire_status st;
        ck_assert_int_eq(mp_wait_pool_free(ports[k], 20000, &st), 0);
        ck_assert_uint_eq(st.reserves, 500);
        ck_assert_uint_eq(st.commits, 500);
    }
    mp_kill_all();
}
END_TEST

START_TEST(test_eager_tcp_faults_roll_back)
{
    uint64_t seed = tu_seed("test_eager_tcp_faults_roll_back", 0xea6e5);
    static run r;
    memset(&r, 0, sizeof r);
    mp_proc d[NSHARDS];
    uint16_t ports[NSHARDS];
    start(&r, d, ports, "30000", seed);
    run_all(&r, 2000);
    printf("eager over tcp with faults: %u of %u ok\n", r.succeeded,
           r.completed);
    ck_assert_uint_gt(r.succeeded, 0);
    ck_assert_uint_lt(r.succeeded, 2000); /* faults fired */
    ck_assert_uint_eq(r.no_flag, 0);
    xfer_engine_stats es;
    xfer_engine_stats_get(r.p.e, &es);
    ck_assert_uint_eq(es.staging_bytes_in_use, 0);
    ck_assert(mp_producer_del(&r.p, 30000));
    for (int k = 0; k < NSHARDS; k++) {
        xfer_wire_status st;
        ck_assert_int_eq(mp_wait_pool_free(ports[k], 20000, &st), 0);
    }
    mp_kill_all();
}
END_TEST

START_TEST(test_eager_tcp_hostile_frames)
{
    mp_proc d;
    const char *args[] = {"--shards", "0", "--pool", "4M", "--quiet", NULL};
    ck_assert_int_eq(mp_xferd(&d, 0, args), 0);
    /* HELLO_ACK says the shard takes EAGER */
    int fd = mp_connect(d.port);
    ck_assert_int_ge(fd, 0);
    xfer_wire_msg hello = {.type = XFER_WIRE_T_HELLO, .version = 1,
                           .role = XFER_WIRE_ROLE_PRODUCER, .shard = 0};
    ck_assert_int_eq(tw_send_msg(fd, &hello, 1, NULL), 0);
    xfer_wire_hdr h;
    xfer_wire_msg m;
    ck_assert_int_eq(tw_recv_msg(fd, &h, &m), 0);
    ck_assert_uint_eq(m.type, XFER_WIRE_T_HELLO_ACK);
    ck_assert_uint_eq(m.hello_flags & XFER_WIRE_HELLO_EAGER,
                      XFER_WIRE_HELLO_EAGER);
    /* applied whole: EAGER_OK with a reservation id */
    static uint8_t data[512];
    xfer_wire_msg e = {.type = XFER_WIRE_T_EAGER, .id = 7, .attempt = 1,
                       .len = sizeof data};
    ck_assert_int_eq(tw_send_msg(fd, &e, 2, data), 0);
    ck_assert_int_eq(tw_recv_msg(fd, &h, &m), 0);
    ck_assert_uint_eq(m.type, XFER_WIRE_T_EAGER_OK);
    ck_assert_uint_eq(h.req, 2);
    ck_assert_uint_ne(m.resv_id, 0);
    close(fd);
    /* a consumer may not: PERM, its data skipped, the connection stays */
    fd = mp_connect(d.port);
    ck_assert_int_eq(mp_hello_role(fd, 0, XFER_WIRE_ROLE_CONSUMER), 0);
    e.id = 8;
    ck_assert_int_eq(tw_send_msg(fd, &e, 3, data), 0);
    ck_assert_int_eq(tw_recv_msg(fd, &h, &m), 0);
    ck_assert_uint_eq(m.type, XFER_WIRE_T_ERROR);
    ck_assert_int_eq(m.code, XFER_ERR_PERM);
    xfer_wire_msg st = {.type = XFER_WIRE_T_STATUS, .shard = 0};
    ck_assert_int_eq(tw_send_msg(fd, &st, 4, NULL), 0);
    ck_assert_int_eq(tw_recv_msg(fd, &h, &m), 0);
    ck_assert_uint_eq(m.type, XFER_WIRE_T_STATUS_OK);
    ck_assert_uint_eq(h.req, 4);
    close(fd);
    /* a header claiming more than the limit: closed on sight */
    fd = mp_connect(d.port);
    ck_assert_int_eq(mp_hello_role(fd, 0, XFER_WIRE_ROLE_PRODUCER), 0);
    uint8_t frame[32];
    e.len = 16;
    ck_assert_uint_eq(xfer_wire_encode(&e, 5, frame, sizeof frame), 32);
    uint32_t big = 32 + XFER_WIRE_MAX_EAGER + 1;
    for (int i = 0; i < 4; i++)
        frame[8 + i] = (uint8_t)(big >> (8 * i));
    ck_assert_int_eq(tw_send_all(fd, frame, sizeof frame), 0);
    ck_assert(mp_closed(fd));
    close(fd);
    mp_kill_all();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("eager_tcp");
    TCase *tc = tcase_create("xferd");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_eager_tcp_one_frame_per_shard);
    tcase_add_test(tc, test_eager_tcp_faults_roll_back);
    tcase_add_test(tc, test_eager_tcp_hostile_frames);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
