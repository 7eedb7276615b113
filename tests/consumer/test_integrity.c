/*
 * tests/consumer/test_integrity.c - end-to-end integrity (issue 27,
 * docs/integrity.md) over TCP, in one process (stack.c): shard servers
 * over the test's own memory, a producer (engine + tcp), a consumer.
 *
 *  - a relay between the producer and one shard flips one bit of a
 *    WRITE's payload: the transfer fails XFER_ERR_CORRUPT naming that
 *    shard, every shard ends empty, the consumer never sees the id
 *    available; with integrity off the same flip reaches the consumer
 *    (the check is what stops it);
 *  - a READY region scribbled on before the consumer takes it: with the
 *    consumer's check on, the id ends unavailable CORRUPT naming the shard;
 *  - raw frames: an EAGER_CRC whose data does not match is refused whole;
 *    a wrong COMMIT_CRC leaves the region unREADY; another session's
 *    COMMIT_CRC (right or wrong checksum) never makes its region READY.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "stack.h"
#include "xfer/fault.h"
#include "xfer/stream.h"
#include "testutil.h"
#include "wire.h"

#define SLICE 8192

static uint32_t crc32c(const uint8_t *p, size_t n)
{
    return tu_crc32c(p, n);
}

/* The state of id on server 0 as a consumer sees it: 0 when a TAKE
 * succeeds (it was READY; released again), else the TAKE's error. */
static int32_t take_probe(stack *s, uint64_t id, uint64_t resv)
{
    int fd = st_raw_connect_role(s, 0, XFER_WIRE_ROLE_CONSUMER);
    ck_assert_int_ge(fd, 0);
    xfer_wire_msg m = {.type = XFER_WIRE_T_TAKE, .id = id, .attempt = 1,
                       .resv_id = resv}, r;
    ck_assert_int_eq(st_raw_call(s, fd, &m, NULL, &r), 0);
    int32_t rc = r.type == XFER_WIRE_T_ERROR ? r.code : 0;
    close(fd);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* A relay that flips one bit of the first `flips` WRITE payloads          */
/* ---------------------------------------------------------------------- */

typedef struct relay {
    struct evconnlistener *lis;
    uint16_t port, to_port;
    int flips;          /* WRITEs still to corrupt */
    int flipped;
    struct event_base *base;
} relay;

typedef struct rpair {
    relay *r;
    struct bufferevent *c, *s; /* client (producer) side, server side */
} rpair;

static void pair_free(rpair *p)
{
    bufferevent_free(p->c);
    bufferevent_free(p->s);
    free(p);
}

/* Producer -> shard, whole frames: a WRITE's data gets one bit flipped. */
static void on_c_read(struct bufferevent *bev, void *arg)
{
    rpair *p = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    for (;;) {
        uint8_t h[XFER_WIRE_HDR];
        if (evbuffer_copyout(in, h, sizeof h) < (ev_ssize_t)sizeof h)
            return;
        uint32_t len = (uint32_t)h[8] | (uint32_t)h[9] << 8 |
                       (uint32_t)h[10] << 16 | (uint32_t)h[11] << 24;
        if (len < XFER_WIRE_HDR || evbuffer_get_length(in) < len)
            return;
        uint8_t *f = malloc(len);
        ck_assert_ptr_nonnull(f);
        evbuffer_remove(in, f, len);
        uint32_t head = XFER_WIRE_HDR + XFER_WIRE_WRITE_FIXED;
        if (h[5] == XFER_WIRE_T_WRITE && len > head && p->r->flips > 0) {
            f[head + (len - head) / 2] ^= 0x04;
            p->r->flips--;
            p->r->flipped++;
        }
        bufferevent_write(p->s, f, len);
        free(f);
    }
}

static void on_s_read(struct bufferevent *bev, void *arg)
{
    rpair *p = arg;
    bufferevent_write_buffer(p->c, bufferevent_get_input(bev));
}

static void on_ev(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        pair_free(arg);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd,
                      struct sockaddr *sa, int salen, void *arg)
{
    (void)l, (void)sa, (void)salen;
    relay *r = arg;
    rpair *p = calloc(1, sizeof *p);
    ck_assert_ptr_nonnull(p);
    p->r = r;
    p->c = bufferevent_socket_new(r->base, fd, BEV_OPT_CLOSE_ON_FREE);
    p->s = bufferevent_socket_new(r->base, -1, BEV_OPT_CLOSE_ON_FREE);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons(r->to_port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bufferevent_setcb(p->c, on_c_read, NULL, on_ev, p);
    bufferevent_setcb(p->s, on_s_read, NULL, on_ev, p);
    ck_assert_int_eq(bufferevent_socket_connect(p->s, (struct sockaddr *)&to,
                                                sizeof to), 0);
    bufferevent_enable(p->c, EV_READ | EV_WRITE);
    bufferevent_enable(p->s, EV_READ | EV_WRITE);
}

/* A relay in front of shard k; the stack's producer and consumer dial it
 * (so call before st_start_producer / st_start_consumer). */
static void relay_start(relay *r, stack *s, uint16_t k, int flips)
{
    memset(r, 0, sizeof *r);
    r->base = s->base;
    r->to_port = s->port[k];
    r->flips = flips;
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    r->lis = evconnlistener_new_bind(s->base, on_accept, r,
                                     LEV_OPT_CLOSE_ON_FREE |
                                         LEV_OPT_REUSEABLE,
                                     16, (struct sockaddr *)&sin, sizeof sin);
    ck_assert_ptr_nonnull(r->lis);
    struct sockaddr_in got;
    socklen_t gl = sizeof got;
    getsockname(evconnlistener_get_fd(r->lis), (struct sockaddr *)&got, &gl);
    r->port = ntohs(got.sin_port);
    snprintf(s->addr[k], sizeof s->addr[k], "127.0.0.1:%u",
             (unsigned)r->port);
}

/* ---------------------------------------------------------------------- */

static uint64_t want_id;

static bool id_done(void *ud)
{
    stack *s = ud;
    return s->done[want_id].n > 0;
}

static bool empty(void *ud)
{
    return st_bytes_in_use(ud) == 0;
}

static bool id_outcome(void *ud)
{
    stack *s = ud;
    return s->out[want_id].n > 0;
}

static uint64_t corrupt_of(stack *s, uint16_t k)
{
    xfer_server_stats st;
    ck_assert_int_eq(xfer_server_stats_get(s->srv[k], XFER_SHARD_NONE, &st),
                     0);
    return st.corrupt;
}

static void run_flip(stack *s, relay *r, uint8_t integrity)
{
    xfer_server_config sc;
    xfer_server_config_default(&sc);
    sc.session_max_bytes = 1 << 20;
    sc.integrity = integrity;
    ck_assert_int_eq(st_start_servers(s, 3, 1 << 20, 8, &sc), 0);
    relay_start(r, s, 1, 1);
    ck_assert_int_eq(st_start_producer(s, SLICE, 4, 5000000000ull), 0);
    ck_assert_int_eq(st_start_consumer(s, NULL), 0);
    ck_assert(st_run(s, st_all_up, s, 5000));
    ck_assert_int_eq(st_submit(s, 1, 0), 0);
    want_id = 1;
    ck_assert(st_run(s, id_done, s, 5000));
    ck_assert_int_eq(r->flipped, 1);
}

START_TEST(test_integrity_tcp_bit_flip_fails_corrupt)
{
    stack s;
    relay r;
    run_flip(&s, &r, XFER_INTEGRITY_SHARD);
    const xfer_result *res = &s.done[1].res;
    ck_assert_int_eq(res->status, XFER_ERR_CORRUPT);
    ck_assert_uint_eq(res->first_failed_shard, 1);
    ck_assert_uint_eq(res->phase, XFER_PHASE_COMPLETING);
    ck_assert(res->failed_shards & (1u << 1));
    ck_assert_uint_eq(corrupt_of(&s, 1), 1);
    ck_assert_uint_eq(corrupt_of(&s, 0), 0);
    /* rolled back: every shard empty; the consumer never had the id */
    ck_assert(st_run(&s, empty, &s, 5000));
    st_spin(&s, 50);
    ck_assert(!s.out[1].available);
    ck_assert_uint_eq(s.available, 0);
    /* the next transfer, unflipped, arrives whole */
    ck_assert_int_eq(st_submit(&s, 2, 1), 0);
    want_id = 2;
    ck_assert(st_run(&s, id_outcome, &s, 5000));
    ck_assert(s.out[2].available);
    ck_assert(s.out[2].bytes_ok);
    ck_assert_int_eq(s.done[2].res.status, 0);
    xfer_tcp_stats ts;
    ck_assert_int_eq(xfer_tcp_stats_get(s.tcp, &ts), 0);
    ck_assert_uint_ge(ts.crcs_sent, 6); /* 3 commits per transfer */
    st_stop(&s);
    evconnlistener_free(r.lis);
}
END_TEST

/* The same flip with integrity off on the shards: nothing checks, and the
 * consumer gets the flipped byte (what the check prevents). */
START_TEST(test_integrity_off_lets_the_flip_through)
{
    stack s;
    relay r;
    run_flip(&s, &r, XFER_INTEGRITY_OFF);
    ck_assert_int_eq(s.done[1].res.status, 0);
    want_id = 1;
    ck_assert(st_run(&s, id_outcome, &s, 5000));
    ck_assert(s.out[1].available);
    ck_assert(!s.out[1].bytes_ok);
    ck_assert_uint_eq(corrupt_of(&s, 1), 0);
    xfer_tcp_stats ts;
    ck_assert_int_eq(xfer_tcp_stats_get(s.tcp, &ts), 0);
    ck_assert_uint_eq(ts.crcs_sent, 0); /* no shard said it checks */
    st_stop(&s);
    evconnlistener_free(r.lis);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The consumer's check on take                                            */
/* ---------------------------------------------------------------------- */

/* Where id's region of shard k lies in its pool (the pattern's first
 * SLICE bytes); -1 if not found. */
static long find_region(stack *s, uint16_t k, uint64_t id)
{
    for (size_t off = 0; off + SLICE <= s->mem[k].len; off += 64) {
        bool all = true;
        for (uint32_t i = 0; i < SLICE && all; i++)
            all = s->mem[k].buf[off + i] == st_pattern(id, k, i);
        if (all)
            return (long)off;
    }
    return -1;
}

static void scribble_run(stack *s, uint8_t cons_integrity, bool scribble)
{
    ck_assert_int_eq(st_start_servers(s, 2, 1 << 20, 8, NULL), 0);
    ck_assert_int_eq(st_start_producer(s, SLICE, 4, 5000000000ull), 0);
    ck_assert_int_eq(st_submit(s, 1, 0), 0);
    want_id = 1;
    ck_assert(st_run(s, id_done, s, 5000));
    ck_assert_int_eq(s->done[1].res.status, 0); /* READY on both shards */
    if (scribble) {
        /* a stray write into shard 1's pool, after READY, before take */
        long off = find_region(s, 1, 1);
        ck_assert_int_ge(off, 0);
        s->mem[1].buf[off + 100] ^= 0xFF;
    }
    void *pools[2] = {s->mem[0].buf, s->mem[1].buf};
    xfer_consumer_config cc;
    xfer_consumer_config_default(&cc);
    cc.integrity = cons_integrity;
    cc.pools = pools;
    ck_assert_int_eq(st_start_consumer(s, &cc), 0);
    ck_assert(st_run(s, id_outcome, s, 5000));
}

START_TEST(test_integrity_consumer_catches_scribble_after_ready)
{
    stack s;
    scribble_run(&s, XFER_INTEGRITY_CONSUMER, true);
    ck_assert(!s.out[1].available);
    ck_assert_int_eq(s.out[1].reason, XFER_ERR_CORRUPT);
    ck_assert(s.out[1].missing & (1u << 1));
    xfer_consumer_stats cs;
    ck_assert_int_eq(xfer_consumer_stats_get(s.cons, &cs), 0);
    ck_assert_uint_eq(cs.corrupt, 1);
    ck_assert_uint_ge(cs.crc_checked, 1);
    /* nothing stays taken: the corrupt take was released, the other
     * shard's by the readiness machine */
    ck_assert(st_run(&s, empty, &s, 5000));
    st_stop(&s);
}
END_TEST

/* Without a scribble the check passes; with the check off a scribble
 * goes unseen (the consumer's own pattern check sees the bad byte). */
START_TEST(test_integrity_consumer_check_passes_clean_data)
{
    stack s;
    scribble_run(&s, XFER_INTEGRITY_CONSUMER, false);
    ck_assert(s.out[1].available);
    ck_assert(s.out[1].bytes_ok);
    xfer_consumer_stats cs;
    ck_assert_int_eq(xfer_consumer_stats_get(s.cons, &cs), 0);
    ck_assert_uint_eq(cs.crc_checked, 2);
    ck_assert_uint_eq(cs.corrupt, 0);
    st_stop(&s);

    scribble_run(&s, XFER_INTEGRITY_SHARD, true);
    ck_assert(s.out[1].available);
    ck_assert(!s.out[1].bytes_ok);
    st_stop(&s);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Raw frames                                                              */
/* ---------------------------------------------------------------------- */

START_TEST(test_integrity_eager_crc_mismatch_refused_whole)
{
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 1, 1 << 20, 8, NULL), 0);
    int fd = st_raw_connect(&s, 0);
    ck_assert_int_ge(fd, 0);
    uint8_t data[512];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 13);
    uint32_t good = crc32c(data, sizeof data);
    xfer_wire_msg m = {.type = XFER_WIRE_T_EAGER, .id = 7, .attempt = 1,
                       .len = sizeof data, .crc = good ^ 1, .crc_set = 1};
    xfer_wire_msg r;
    ck_assert_int_eq(st_raw_call(&s, fd, &m, data, &r), 0);
    ck_assert_uint_eq(r.type, XFER_WIRE_T_ERROR);
    ck_assert_int_eq(r.code, XFER_ERR_CORRUPT);
    ck_assert_uint_eq(r.shard, 0);
    ck_assert_uint_eq(st_bytes_in_use(&s), 0); /* nothing held */
    m.crc = good;
    ck_assert_int_eq(st_raw_call(&s, fd, &m, data, &r), 0);
    ck_assert_uint_eq(r.type, XFER_WIRE_T_EAGER_OK);
    ck_assert_uint_eq(corrupt_of(&s, 0), 1);
    st_stop(&s);
}
END_TEST

/* Hostile: a wrong checksum never makes READY; another session's COMMIT,
 * whatever checksum it carries, is refused and the region stays unREADY. */
START_TEST(test_integrity_hostile_commit_crc)
{
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 1, 1 << 20, 8, NULL), 0);
    s.slice = 1024;
    int a = st_raw_connect(&s, 0), b = st_raw_connect(&s, 0);
    ck_assert_int_ge(a, 0);
    ck_assert_int_ge(b, 0);
    uint64_t resv;
    ck_assert_int_eq(st_raw_put(&s, a, 0, 5, 1, false, &resv), 0);
    uint8_t data[1024];
    for (uint32_t i = 0; i < sizeof data; i++)
        data[i] = st_pattern(5, 0, i);
    uint32_t good = crc32c(data, sizeof data);
    xfer_wire_msg m = {.type = XFER_WIRE_T_COMMIT, .id = 5, .attempt = 1,
                       .resv_id = resv, .crc = good, .crc_set = 1};
    xfer_wire_msg r;
    /* session b, the right checksum: not its region */
    ck_assert_int_eq(st_raw_call(&s, b, &m, NULL, &r), 0);
    ck_assert_uint_eq(r.type, XFER_WIRE_T_ERROR);
    ck_assert_int_eq(r.code, XFER_ERR_PERM);
    /* session b, a wrong one: refused as well, nothing checksummed */
    m.crc = good ^ 0x100;
    ck_assert_int_eq(st_raw_call(&s, b, &m, NULL, &r), 0);
    ck_assert_int_eq(r.code, XFER_ERR_PERM);
    ck_assert_uint_eq(corrupt_of(&s, 0), 0);
    /* session a, a wrong one: CORRUPT, still not READY */
    ck_assert_int_eq(st_raw_call(&s, a, &m, NULL, &r), 0);
    ck_assert_uint_eq(r.type, XFER_WIRE_T_ERROR);
    ck_assert_int_eq(r.code, XFER_ERR_CORRUPT);
    ck_assert_int_ne(take_probe(&s, 5, resv), 0); /* not READY */
    /* session a, the right one: READY */
    m.crc = good;
    ck_assert_int_eq(st_raw_call(&s, a, &m, NULL, &r), 0);
    ck_assert_uint_eq(r.type, XFER_WIRE_T_COMMIT_ACK);
    ck_assert_int_eq(take_probe(&s, 5, resv), 0); /* READY: taken */
    st_stop(&s);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Caller CRCs (xfer_engine_submit_crc, xfer_engine_stream_seal_crc)      */
/* ---------------------------------------------------------------------- */

/* The CRC32C of the slice st_submit writes for (id, shard k). */
static uint32_t slice_crc(uint64_t id, uint16_t k, uint32_t len)
{
    uint8_t *b = malloc(len);
    ck_assert_ptr_nonnull(b);
    for (uint32_t i = 0; i < len; i++)
        b[i] = st_pattern(id, k, i);
    uint32_t c = crc32c(b, len);
    free(b);
    return c;
}

static uint64_t checked_of(stack *s, uint16_t k)
{
    xfer_server_stats st;
    ck_assert_int_eq(xfer_server_stats_get(s->srv[k], XFER_SHARD_NONE, &st),
                     0);
    return st.crc_checked;
}

/* A producer that has its slices' CRCs: with the right ones the transfer
 * arrives whole and checked, and the producer computed none (every CRC
 * it sent was the caller's); with a wrong one for shard 2 the shard
 * refuses it CORRUPT, naming shard 2, nothing is READY and every shard
 * ends empty.  Directly and through the mailbox. */
START_TEST(test_integrity_caller_crc_checked_not_computed)
{
    stack s;
    xfer_server_config sc;
    xfer_server_config_default(&sc);
    sc.session_max_bytes = 1 << 20;
    ck_assert_int_eq(st_start_servers(&s, 3, 1 << 20, 8, &sc), 0);
    ck_assert_int_eq(st_start_producer(&s, SLICE, 4, 5000000000ull), 0);
    ck_assert_int_eq(st_start_consumer(&s, NULL), 0);
    ck_assert(st_run(&s, st_all_up, &s, 5000));
    uint32_t crcs[3];
    /* a wrong caller CRC for shard 2 */
    for (uint16_t k = 0; k < 3; k++)
        crcs[k] = slice_crc(1, k, SLICE);
    crcs[2] ^= 0x10;
    ck_assert_int_eq(st_submit_crc(&s, 1, 0, crcs, false), 0);
    want_id = 1;
    ck_assert(st_run(&s, id_done, &s, 5000));
    const xfer_result *res = &s.done[1].res;
    ck_assert_int_eq(res->status, XFER_ERR_CORRUPT);
    ck_assert_uint_eq(res->first_failed_shard, 2);
    ck_assert_uint_eq(corrupt_of(&s, 2), 1);
    ck_assert_uint_eq(corrupt_of(&s, 0) + corrupt_of(&s, 1), 0);
    ck_assert(st_run(&s, empty, &s, 5000));
    st_spin(&s, 50);
    ck_assert(!s.out[1].available);
    /* the right ones, directly (2) and through the mailbox (3) */
    for (uint64_t id = 2; id <= 3; id++) {
        for (uint16_t k = 0; k < 3; k++)
            crcs[k] = slice_crc(id, k, SLICE);
        ck_assert_int_eq(st_submit_crc(&s, id, (uint32_t)id - 1, crcs,
                                       id == 3), 0);
        want_id = id;
        ck_assert(st_run(&s, id_outcome, &s, 5000));
        ck_assert_int_eq(s.done[id].res.status, 0);
        ck_assert(s.out[id].available);
        ck_assert(s.out[id].bytes_ok);
    }
    for (uint16_t k = 0; k < 3; k++)
        ck_assert_uint_eq(checked_of(&s, k), 3);
    xfer_tcp_stats ts;
    ck_assert_int_eq(xfer_tcp_stats_get(s.tcp, &ts), 0);
    ck_assert_uint_eq(ts.crcs_given, 9);
    ck_assert_uint_eq(ts.crcs_sent, ts.crcs_given); /* none computed */
    /* the synchronous refusals: no callback */
    xfer_slice sl[3] = {{0, SLICE}, {SLICE, SLICE}, {2 * SLICE, SLICE}};
    xfer_transfer_desc d = {.id = 4, .group = s.group, .pool = s.pool,
                            .nslices = 3, .slices = sl};
    ck_assert_int_eq(xfer_engine_submit_crc(s.e, &d, NULL, st_done_cb(), &s),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_engine_post_submit_crc(s.e, &d, NULL, st_done_cb(),
                                                 &s),
                     XFER_ERR_INVALID_ARG);
    st_spin(&s, 20);
    ck_assert_int_eq(s.done[4].n, 0);
    st_stop(&s);
}
END_TEST

/* Caller CRCs on the eager path over TCP: each shard's one EAGER frame
 * carries the caller's value, not one computed from staging; the right
 * ones make the transfer READY whole, a wrong one for shard 1 is refused
 * CORRUPT naming shard 1, the whole transfer rolls back (the other
 * shards' eager copies are cancelled) and nothing becomes READY. */
START_TEST(test_integrity_caller_crc_eager)
{
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 3, 1 << 20, 8, NULL), 0);
    s.eager_max_bytes = SLICE;
    ck_assert_int_eq(st_start_producer(&s, SLICE, 4, 5000000000ull), 0);
    ck_assert_int_eq(st_start_consumer(&s, NULL), 0);
    ck_assert(st_run(&s, st_all_up, &s, 5000));
    uint32_t crcs[3];
    for (uint16_t k = 0; k < 3; k++)
        crcs[k] = slice_crc(1, k, SLICE);
    ck_assert_int_eq(st_submit_crc(&s, 1, 0, crcs, false), 0);
    want_id = 1;
    ck_assert(st_run(&s, id_outcome, &s, 5000));
    ck_assert_int_eq(s.done[1].res.status, 0);
    ck_assert(s.out[1].available);
    ck_assert(s.out[1].bytes_ok);
    xfer_tcp_stats ts;
    ck_assert_int_eq(xfer_tcp_stats_get(s.tcp, &ts), 0);
    ck_assert_uint_eq(ts.ops_sent, 3); /* one EAGER per shard */
    ck_assert_uint_eq(ts.crcs_given, 3);
    ck_assert_uint_eq(ts.crcs_sent, 3);
    for (uint16_t k = 0; k < 3; k++)
        crcs[k] = slice_crc(2, k, SLICE) ^ (k == 1 ? 0x40u : 0u);
    ck_assert_int_eq(st_submit_crc(&s, 2, 1, crcs, true), 0);
    want_id = 2;
    ck_assert(st_run(&s, id_done, &s, 5000));
    ck_assert_int_eq(s.done[2].res.status, XFER_ERR_CORRUPT);
    ck_assert_uint_eq(s.done[2].res.first_failed_shard, 1);
    ck_assert_uint_eq(corrupt_of(&s, 1), 1);
    ck_assert_uint_eq(corrupt_of(&s, 0) + corrupt_of(&s, 2), 0);
    ck_assert_int_eq(xfer_tcp_stats_get(s.tcp, &ts), 0);
    ck_assert_uint_eq(ts.crcs_given, 6);
    ck_assert_uint_eq(ts.crcs_sent, ts.crcs_given); /* none computed */
    /* transfer 1 still held by the consumer; release it, then every
     * shard ends empty and transfer 2 was never available */
    ck_assert_int_eq(xfer_consumer_release(s.cons, 1), 0);
    ck_assert(st_run(&s, empty, &s, 5000));
    st_spin(&s, 50);
    ck_assert(!s.out[2].available);
    ck_assert_uint_eq(s.twice, 0);
    st_stop(&s);
}
END_TEST

/* A stream whose producer has each shard's CRC at the seal: the right
 * ones commit checked, counted as the caller's; a wrong one fails
 * CORRUPT naming the shard, every shard empty.  The seal's own refusals
 * (a count that is not the stream's) leave the stream open. */
static void stream_crc_run(stack *s, uint64_t id, int wrong_shard)
{
    uint32_t lens[3] = {SLICE, SLICE, SLICE};
    xfer_stream_desc sd = {.id = id, .group = s->group, .nshards = 3,
                           .lens = lens};
    ck_assert_int_eq(xfer_engine_stream_open(s->e, &sd, st_done_cb(), s), 0);
    xfer_range rg[3];
    uint32_t crcs[3];
    for (uint16_t k = 0; k < 3; k++) {
        uint64_t off = (uint64_t)k * SLICE;
        for (uint32_t i = 0; i < SLICE; i++)
            s->staging[off + i] = st_pattern(id, k, i);
        rg[k] = (xfer_range){.staging_off = off, .pool = s->pool,
                             .len = SLICE, .resv_off = 0, .shard = k};
        crcs[k] = slice_crc(id, k, SLICE) ^ (k == wrong_shard ? 1u : 0u);
    }
    xfer_part_desc pd = {.id = id, .ranges = rg, .nranges = 3};
    ck_assert_int_eq(xfer_engine_stream_part(s->e, &pd, NULL), 0);
    ck_assert_int_eq(xfer_engine_stream_seal_crc(s->e, id, crcs, 2),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_engine_stream_seal_crc(s->e, id, crcs, 3), 0);
    ck_assert_int_eq(xfer_engine_stream_seal_crc(s->e, id, crcs, 3),
                     XFER_ERR_STATE);
    want_id = id;
    ck_assert(st_run(s, id_done, s, 5000));
}

START_TEST(test_integrity_caller_crc_stream_seal)
{
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 3, 1 << 20, 8, NULL), 0);
    ck_assert_int_eq(st_start_producer(&s, SLICE, 4, 5000000000ull), 0);
    ck_assert_int_eq(st_start_consumer(&s, NULL), 0);
    ck_assert(st_run(&s, st_all_up, &s, 5000));
    stream_crc_run(&s, 1, 1);
    ck_assert_int_eq(s.done[1].res.status, XFER_ERR_CORRUPT);
    ck_assert_uint_eq(s.done[1].res.first_failed_shard, 1);
    ck_assert_uint_eq(corrupt_of(&s, 1), 1);
    ck_assert(st_run(&s, empty, &s, 5000));
    st_spin(&s, 50);
    ck_assert(!s.out[1].available);
    stream_crc_run(&s, 2, -1);
    ck_assert_int_eq(s.done[2].res.status, 0);
    ck_assert(st_run(&s, id_outcome, &s, 5000));
    ck_assert(s.out[2].bytes_ok);
    xfer_tcp_stats ts;
    ck_assert_int_eq(xfer_tcp_stats_get(s.tcp, &ts), 0);
    ck_assert_uint_eq(ts.crcs_given, 6);
    ck_assert_uint_eq(ts.crcs_sent, 6);
    st_stop(&s);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The CRC taken as the bytes land (shard) and as they go out (producer)   */
/* ---------------------------------------------------------------------- */

/* Raw frames on one shard (s->slice = SLICE): reserve id, then WRITE the
 * pattern's bytes [off, off + len) of it at off. */
static uint64_t raw_reserve(stack *s, int fd, uint64_t id)
{
    xfer_wire_msg m = {.type = XFER_WIRE_T_RESERVE, .id = id, .attempt = 1,
                       .len = SLICE}, r;
    ck_assert_int_eq(st_raw_call(s, fd, &m, NULL, &r), 0);
    ck_assert_uint_eq(r.type, XFER_WIRE_T_RESERVE_OK);
    return r.resv_id;
}

static void raw_write(stack *s, int fd, uint64_t id, uint64_t resv,
                      uint32_t off, uint32_t len, uint8_t junk)
{
    static uint8_t data[SLICE];
    for (uint32_t i = 0; i < len; i++)
        data[i] = (uint8_t)(st_pattern(id, 0, off + i) ^ junk);
    xfer_wire_msg m = {.type = XFER_WIRE_T_WRITE, .id = id, .attempt = 1,
                       .resv_id = resv, .off = off, .len = len}, r;
    ck_assert_int_eq(st_raw_call(s, fd, &m, data, &r), 0);
    ck_assert_uint_eq(r.type, XFER_WIRE_T_WRITE_ACK);
}

/* COMMIT id with the CRC of its pattern (the producer's bytes): the
 * answer's code (0: COMMIT_ACK). */
static int32_t raw_commit(stack *s, int fd, uint64_t id, uint64_t resv)
{
    uint8_t want[SLICE];
    for (uint32_t i = 0; i < SLICE; i++)
        want[i] = st_pattern(id, 0, i);
    xfer_wire_msg m = {.type = XFER_WIRE_T_COMMIT, .id = id, .attempt = 1,
                       .resv_id = resv, .crc = crc32c(want, SLICE),
                       .crc_set = 1}, r;
    ck_assert_int_eq(st_raw_call(s, fd, &m, NULL, &r), 0);
    if (r.type == XFER_WIRE_T_ERROR)
        return r.code;
    ck_assert_uint_eq(r.type, XFER_WIRE_T_COMMIT_ACK);
    return 0;
}

static void flip_in_pool(stack *s, uint64_t id)
{
    long off = find_region(s, 0, id);
    ck_assert_int_ge(off, 0);
    s->mem[0].buf[off + 3000] ^= 0x10;
}

/* The shard takes a write's CRC as its bytes land, so a bit flipped in the
 * pool after landing and before the COMMIT is not seen there (the design
 * trade, docs/integrity.md): the region is READY, and a consumer that
 * checks on take catches it (CORRUPT, naming the shard). */
START_TEST(test_integrity_flip_after_landing_caught_on_take)
{
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 1, 1 << 20, 8, NULL), 0);
    s.slice = SLICE;
    int fd = st_raw_connect(&s, 0);
    ck_assert_int_ge(fd, 0);
    uint64_t resv = raw_reserve(&s, fd, 5);
    raw_write(&s, fd, 5, resv, 0, SLICE, 0);
    flip_in_pool(&s, 5);
    ck_assert_int_eq(raw_commit(&s, fd, 5, resv), 0);
    ck_assert_uint_eq(corrupt_of(&s, 0), 0);
    void *pools[1] = {s.mem[0].buf};
    xfer_consumer_config cc;
    xfer_consumer_config_default(&cc);
    cc.integrity = XFER_INTEGRITY_CONSUMER;
    cc.pools = pools;
    ck_assert_int_eq(st_start_consumer(&s, &cc), 0);
    want_id = 5;
    ck_assert(st_run(&s, id_outcome, &s, 5000));
    ck_assert(!s.out[5].available);
    ck_assert_int_eq(s.out[5].reason, XFER_ERR_CORRUPT);
    ck_assert(s.out[5].missing & 1u);
    close(fd);
    st_stop(&s);
}
END_TEST

/* Writes out of order, and one that fills the gap between two others:
 * their landed CRCs join into the region's, and the COMMIT passes with
 * nothing read again (a flip after landing goes unseen, as above). */
START_TEST(test_integrity_landed_runs_join_out_of_order)
{
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 1, 1 << 20, 8, NULL), 0);
    s.slice = SLICE;
    int fd = st_raw_connect(&s, 0);
    ck_assert_int_ge(fd, 0);
    /* back to front */
    uint64_t resv = raw_reserve(&s, fd, 1);
    raw_write(&s, fd, 1, resv, 4096, 4096, 0);
    raw_write(&s, fd, 1, resv, 0, 4096, 0);
    ck_assert_int_eq(raw_commit(&s, fd, 1, resv), 0);
    /* the ends first, the middle last (it joins both sides); one bit
     * flipped after landing: the runs stand for the region */
    resv = raw_reserve(&s, fd, 2);
    raw_write(&s, fd, 2, resv, 0, 1000, 0);
    raw_write(&s, fd, 2, resv, 5000, SLICE - 5000, 0);
    raw_write(&s, fd, 2, resv, 1000, 4000, 0);
    flip_in_pool(&s, 2);
    ck_assert_int_eq(raw_commit(&s, fd, 2, resv), 0);
    /* a flip in a WRITE's payload itself is in its landed CRC */
    resv = raw_reserve(&s, fd, 3);
    raw_write(&s, fd, 3, resv, 4096, 4096, 0);
    raw_write(&s, fd, 3, resv, 0, 4096, 0x20);
    ck_assert_int_eq(raw_commit(&s, fd, 3, resv), XFER_ERR_CORRUPT);
    ck_assert_uint_eq(corrupt_of(&s, 0), 1);
    close(fd);
    st_stop(&s);
}
END_TEST

/* Where the landed CRCs cannot stand for the region the COMMIT reads it
 * whole, as before: overlapping writes (the last one's bytes are what the
 * pool holds, right or wrong), and more runs than are kept.  A bit flipped
 * in the pool after landing is then caught by the shard itself. */
START_TEST(test_integrity_overlap_and_gaps_read_whole)
{
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 1, 1 << 20, 8, NULL), 0);
    s.slice = SLICE;
    int fd = st_raw_connect(&s, 0);
    ck_assert_int_ge(fd, 0);
    /* junk first, then the right bytes over it: passes */
    uint64_t resv = raw_reserve(&s, fd, 1);
    raw_write(&s, fd, 1, resv, 0, SLICE, 0xFF);
    raw_write(&s, fd, 1, resv, 0, SLICE, 0);
    ck_assert_int_eq(raw_commit(&s, fd, 1, resv), 0);
    /* the right bytes, then junk over a part: CORRUPT */
    resv = raw_reserve(&s, fd, 2);
    raw_write(&s, fd, 2, resv, 0, SLICE, 0);
    raw_write(&s, fd, 2, resv, 2048, 1024, 0x01);
    ck_assert_int_eq(raw_commit(&s, fd, 2, resv), XFER_ERR_CORRUPT);
    /* overlapping writes of the right bytes, then a flip after landing:
     * the full pass sees it */
    resv = raw_reserve(&s, fd, 3);
    raw_write(&s, fd, 3, resv, 0, 5000, 0);
    raw_write(&s, fd, 3, resv, 4000, SLICE - 4000, 0);
    flip_in_pool(&s, 3);
    ck_assert_int_eq(raw_commit(&s, fd, 3, resv), XFER_ERR_CORRUPT);
    /* pieces of 512 bytes, 0, 2, 4, 6 and 8 first: five runs apart, more
     * than are kept; then the rest */
    resv = raw_reserve(&s, fd, 4);
    for (uint32_t i = 0; i <= 8; i += 2)
        raw_write(&s, fd, 4, resv, i * 512, 512, 0);
    for (uint32_t i = 1; i < 9; i += 2)
        raw_write(&s, fd, 4, resv, i * 512, 512, 0);
    raw_write(&s, fd, 4, resv, 9 * 512, SLICE - 9 * 512, 0);
    flip_in_pool(&s, 4);
    ck_assert_int_eq(raw_commit(&s, fd, 4, resv), XFER_ERR_CORRUPT);
    ck_assert_uint_eq(corrupt_of(&s, 0), 3);
    close(fd);
    st_stop(&s);
}
END_TEST

static xfer_result stream_res;
static bool stream_ended;

static void on_stream_done(void *ud, const xfer_result *r)
{
    (void)ud;
    stream_res = *r;
    stream_ended = true;
}

static bool stream_done(void *ud)
{
    (void)ud;
    return stream_ended;
}

/* A stream whose two parts per shard are written back to front, through
 * the relay that flips one bit of the first WRITE to shard 1: the shard's
 * landed runs join (out of order) into a CRC that is not the producer's,
 * and the stream fails CORRUPT naming shard 1, every shard empty. */
START_TEST(test_integrity_stream_out_of_order_flip_fails_corrupt)
{
    stack s;
    relay r;
    ck_assert_int_eq(st_start_servers(&s, 2, 1 << 20, 8, NULL), 0);
    relay_start(&r, &s, 1, 1);
    ck_assert_int_eq(st_start_producer(&s, SLICE, 4, 5000000000ull), 0);
    ck_assert(st_run(&s, st_all_up, &s, 5000));
    uint32_t lens[2] = {SLICE, SLICE};
    stream_ended = false;
    xfer_stream_desc d = {.id = 1, .group = s.group, .nshards = 2,
                          .lens = lens, .timeout_ns = 5000000000ull};
    ck_assert_int_eq(xfer_engine_stream_open(s.e, &d, on_stream_done, NULL),
                     0);
    for (uint32_t half = 2; half-- > 0;) {
        xfer_range rg[2];
        for (uint16_t k = 0; k < 2; k++) {
            uint64_t at = (uint64_t)k * SLICE + half * (SLICE / 2);
            for (uint32_t i = 0; i < SLICE / 2; i++)
                s.staging[at + i] = st_pattern(1, k, half * (SLICE / 2) + i);
            rg[k] = (xfer_range){.staging_off = at, .pool = s.pool,
                                 .len = SLICE / 2,
                                 .resv_off = half * (SLICE / 2), .shard = k};
        }
        xfer_part_desc p = {.id = 1, .ranges = rg, .nranges = 2};
        ck_assert_int_eq(xfer_engine_stream_part(s.e, &p, NULL), 0);
        st_spin(&s, 20); /* the back half goes first */
    }
    ck_assert_int_eq(xfer_engine_stream_seal(s.e, 1), 0);
    ck_assert(st_run(&s, stream_done, NULL, 5000));
    ck_assert_int_eq(r.flipped, 1);
    ck_assert_int_eq(stream_res.status, XFER_ERR_CORRUPT);
    ck_assert_uint_eq(stream_res.first_failed_shard, 1);
    ck_assert_uint_eq(corrupt_of(&s, 1), 1);
    ck_assert_uint_eq(corrupt_of(&s, 0), 0);
    ck_assert(st_run(&s, empty, &s, 5000));
    st_stop(&s);
    evconnlistener_free(r.lis);
}
END_TEST

static bool write_held(void *ud)
{
    stack *s = ud;
    xfer_server_stats st;
    ck_assert_int_eq(xfer_server_stats_get(s->srv[0], XFER_SHARD_NONE, &st),
                     0);
    return st.delayed_now == 1;
}

/* A one-shot's CRC is taken from its staging right after the socket took
 * its WRITE's bytes, so a caller who changes the staging after that and
 * before the COMMIT (a broken staging contract) no longer fails the
 * transfer: the shard holds, and makes READY, exactly the bytes the WRITE
 * sent, which the CRC describes (docs/integrity.md).  The WRITE's answer
 * is held on shard 0 (a DELAY rule) while the test changes the staging. */
START_TEST(test_integrity_staging_changed_after_write_ready_as_sent)
{
    stack s;
    ck_assert_int_eq(st_start_servers(&s, 2, 1 << 20, 8, NULL), 0);
    xfer_fault_rule rule = {.kind = XFER_FAULT_DELAY, .op = XFER_OP_WRITE,
                            .shard = 0, .count = 1,
                            .delay_ns = 300000000ull};
    ck_assert_int_eq(xfer_server_add_rule(s.srv[0], &rule), 0);
    ck_assert_int_eq(st_start_producer(&s, SLICE, 4, 5000000000ull), 0);
    ck_assert_int_eq(st_start_consumer(&s, NULL), 0);
    ck_assert(st_run(&s, st_all_up, &s, 5000));
    ck_assert_int_eq(st_submit(&s, 1, 0), 0);
    ck_assert(st_run(&s, write_held, &s, 5000));
    memset(s.staging, 0x5A, SLICE); /* slot 0, shard 0's slice */
    want_id = 1;
    ck_assert(st_run(&s, id_done, &s, 5000));
    ck_assert_int_eq(s.done[1].res.status, 0);
    ck_assert(st_run(&s, id_outcome, &s, 5000));
    ck_assert(s.out[1].available);
    ck_assert(s.out[1].bytes_ok); /* the bytes as sent, the pattern */
    ck_assert_uint_eq(corrupt_of(&s, 0), 0);
    st_stop(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("integrity");
    TCase *tc = tcase_create("integrity");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_integrity_tcp_bit_flip_fails_corrupt);
    tcase_add_test(tc, test_integrity_off_lets_the_flip_through);
    tcase_add_test(tc, test_integrity_consumer_catches_scribble_after_ready);
    tcase_add_test(tc, test_integrity_consumer_check_passes_clean_data);
    tcase_add_test(tc, test_integrity_eager_crc_mismatch_refused_whole);
    tcase_add_test(tc, test_integrity_caller_crc_eager);
    tcase_add_test(tc, test_integrity_hostile_commit_crc);
    tcase_add_test(tc, test_integrity_flip_after_landing_caught_on_take);
    tcase_add_test(tc, test_integrity_landed_runs_join_out_of_order);
    tcase_add_test(tc, test_integrity_overlap_and_gaps_read_whole);
    tcase_add_test(tc, test_integrity_stream_out_of_order_flip_fails_corrupt);
    tcase_add_test(tc,
                   test_integrity_staging_changed_after_write_ready_as_sent);
    tcase_add_test(tc, test_integrity_caller_crc_checked_not_computed);
    tcase_add_test(tc, test_integrity_caller_crc_stream_seal);
    suite_add_tcase(su, tc);
    return tu_run(su);
}
