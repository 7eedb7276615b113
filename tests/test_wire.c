/*
 * tests/test_wire.c - the wire codec (transport/wire.c) as a unit, on byte
 * buffers, no sockets: every frame type encodes and decodes back to the
 * same message, the header layout is the documented little-endian one,
 * every length and limit is checked, and bad magic, version, flags, type,
 * length and field values are refused with their reason, leaving the
 * output untouched.  Randomised parts print their seed (XFER_SEED).
 *
 * White-box: wire.h is a private header (linked through wire_private_dep).
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "wire.h"
#include "xfer/errors.h"
#include "xfer/shard.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const unsigned all_types[] = {
#define T_(name, val, body) XFER_WIRE_T_##name,
    XFER_WIRE_TYPES(T_)
#undef T_
};
static const char *const all_type_names[] = {
#define T_(name, val, body) #name,
    XFER_WIRE_TYPES(T_)
#undef T_
};
static const size_t all_bodies[] = {
#define T_(name, val, body) (body),
    XFER_WIRE_TYPES(T_)
#undef T_
};

/* The fields of xfer_wire_msg, as bits: which ones a type carries. */
enum {
    F_VERSION = 1u << 0, F_ROLE = 1u << 1, F_KIND = 1u << 2,
    F_REQTYPE = 1u << 3, F_SHARD = 1u << 4, F_GROUP = 1u << 5,
    F_ATTEMPT = 1u << 6, F_LEN = 1u << 7, F_RKEY = 1u << 8,
    F_MAXW = 1u << 9, F_CODE = 1u << 10, F_ID = 1u << 11, F_RESV = 1u << 12,
    F_ADDR = 1u << 13, F_OFF = 1u << 14, F_POOL = 1u << 15,
    F_LEASE = 1u << 16, F_ST = 1u << 17, F_SESS = 1u << 18,
    F_NONCE = 1u << 19, F_MAC = 1u << 20, F_BAD = 1u << 21,
    F_HFLAGS = 1u << 22, F_CRC = 1u << 23, F_MAYCRC = 1u << 24,
    F_HOLD = 1u << 25
};
#define F_OP (F_ID | F_ATTEMPT | F_LEN | F_RESV)

/* The fields each type carries (wire.h's message table). */
static unsigned fields_of(unsigned type)
{
    switch (type) {
    case XFER_WIRE_T_HELLO:
        return F_VERSION | F_ROLE | F_GROUP | F_SHARD;
    case XFER_WIRE_T_HELLO_ACK:
        return F_VERSION | F_SHARD | F_GROUP | F_POOL | F_LEASE | F_MAXW |
               F_HFLAGS;
    case XFER_WIRE_T_RESERVE:
    case XFER_WIRE_T_EAGER:
        return F_ID | F_ATTEMPT | F_LEN;
    case XFER_WIRE_T_RESERVE_OK:
    case XFER_WIRE_T_EAGER_OK:
        return F_OP | F_ADDR | F_RKEY;
    case XFER_WIRE_T_WRITE:
        return F_OP | F_OFF;
    case XFER_WIRE_T_TAKE_OK:
        return F_OP | F_ADDR;
    case XFER_WIRE_T_EVENT:
        return F_KIND | F_SHARD | F_ATTEMPT | F_ID | F_RESV | F_LEN |
               F_MAYCRC;
    case XFER_WIRE_T_COMMIT_CRC:
        return F_ID | F_ATTEMPT | F_RESV | F_CRC;
    case XFER_WIRE_T_EAGER_CRC:
        return F_ID | F_ATTEMPT | F_LEN | F_CRC;
    case XFER_WIRE_T_REFRESH:
    case XFER_WIRE_T_REFRESH_OK:
        return F_ID | F_ATTEMPT | F_RESV | F_HOLD;
    case XFER_WIRE_T_STATUS:
        return F_SHARD;
    case XFER_WIRE_T_STATUS_OK:
        return F_ST;
    case XFER_WIRE_T_ERROR:
        return F_CODE | F_REQTYPE | F_SHARD | F_ID | F_ATTEMPT;
    case XFER_WIRE_T_HELLO2:
        return F_VERSION | F_ROLE | F_GROUP | F_SHARD | F_SESS | F_NONCE;
    case XFER_WIRE_T_CHALLENGE:
        return F_NONCE | F_MAC;
    case XFER_WIRE_T_AUTH:
        return F_MAC;
    case XFER_WIRE_T_STATUS_BAD_OK:
        return F_BAD;
    case XFER_WIRE_T_STATUS_BAD:
    case XFER_WIRE_T_SUBSCRIBE:
    case XFER_WIRE_T_SUBSCRIBE_ACK:
        return 0;
    default: /* the op-shaped ones: WRITE_ACK, COMMIT, CANCEL, TAKE, ... */
        return F_OP;
    }
}

/* A random message of `type` with every carried field set to a value the
 * decoder accepts, the others 0. */
static xfer_wire_msg random_msg(unsigned type, uint64_t *rng)
{
    xfer_wire_msg m;
    memset(&m, 0, sizeof m);
    m.type = (uint8_t)type;
    unsigned f = fields_of(type);
    if (f & F_VERSION)
        m.version = (uint16_t)(1 + tu_rand(rng) % 0xFFFF);
    if (f & F_ROLE)
        m.role = (uint8_t)(XFER_WIRE_ROLE_PRODUCER + tu_rand(rng) % 3);
    if (f & F_KIND)
        m.kind = (uint8_t)(tu_rand(rng) % XFER_SHARD_EV_COUNT_);
    if (f & F_REQTYPE)
        m.req_type = (uint8_t)tu_rand(rng);
    if (f & F_SHARD)
        m.shard = (uint16_t)(tu_rand(rng) % 0xFFFF); /* not SHARD_ALL */
    if (f & F_GROUP)
        m.group = (uint32_t)tu_rand(rng);
    if (f & F_ATTEMPT)
        m.attempt = (uint32_t)tu_rand(rng);
    if (f & F_LEN)
        m.len = xfer_wire_has_data(type) ? (uint32_t)(tu_rand(rng) % 4096)
                                         : (uint32_t)tu_rand(rng);
    if (f & F_RKEY)
        m.rkey = (uint32_t)tu_rand(rng);
    /* COMMIT_CRC and EAGER_CRC are COMMIT and EAGER with a CRC (wire.h);
     * an EVENT carries one or not */
    if ((f & F_CRC) || ((f & F_MAYCRC) && tu_rand(rng) % 2)) {
        m.crc_set = 1;
        m.crc = (uint32_t)tu_rand(rng);
    }
    if (type == XFER_WIRE_T_COMMIT_CRC)
        m.type = XFER_WIRE_T_COMMIT;
    if (type == XFER_WIRE_T_EAGER_CRC)
        m.type = XFER_WIRE_T_EAGER;
    if (f & F_MAXW)
        m.max_write = (uint32_t)tu_rand(rng);
    if (f & F_HFLAGS)
        m.hello_flags = (uint32_t)tu_rand(rng);
    if (f & F_CODE)
        m.code = -1 - (int32_t)(tu_rand(rng) % 0x7FFFFFFF);
    if (f & F_ID)
        m.id = tu_rand(rng);
    if (f & F_RESV)
        m.resv_id = tu_rand(rng);
    if (f & F_ADDR)
        m.addr = tu_rand(rng);
    if (f & F_OFF)
        m.off = tu_rand(rng) % (UINT64_MAX - m.len);
    if (f & F_POOL)
        m.pool_bytes = tu_rand(rng);
    if (f & F_LEASE)
        m.lease_ttl_ns = tu_rand(rng);
    if (f & F_HOLD)
        m.hold_ns = tu_rand(rng);
    if (f & F_ST) {
        xfer_wire_status *s = &m.st;
        s->shard = (uint16_t)tu_rand(rng);
        s->nshards = (uint16_t)tu_rand(rng);
        s->conns = (uint32_t)tu_rand(rng);
        uint64_t *c[] = {&s->pool_bytes, &s->bytes_in_use, &s->live,
                         &s->tombstones, &s->reserves, &s->refused,
                         &s->writes, &s->commits, &s->cancels, &s->expiries,
                         &s->bad_frames, &s->errors_sent, &s->events_sent,
                         &s->write_bytes};
        for (size_t i = 0; i < NELEM(c); i++)
            *c[i] = tu_rand(rng);
    }
    if (f & F_BAD) {
        xfer_wire_bad *b = &m.bad;
        b->n = XFER_WIRE_BAD_SLOTS;
        for (size_t i = 0; i < XFER_WIRE_BAD_SLOTS; i++)
            b->by_reason[i] = tu_rand(rng);
        b->auth_failed = tu_rand(rng);
        b->conns_refused = tu_rand(rng);
        b->timeouts = tu_rand(rng);
        b->writes_stalled = tu_rand(rng);
        b->subs_dropped = tu_rand(rng);
    }
    for (size_t i = 0; i < sizeof m.mac; i++) {
        if ((f & F_SESS) && i < sizeof m.session)
            m.session[i] = (uint8_t)tu_rand(rng);
        if ((f & F_NONCE) && i < sizeof m.nonce)
            m.nonce[i] = (uint8_t)tu_rand(rng);
        if (f & F_MAC)
            m.mac[i] = (uint8_t)tu_rand(rng);
    }
    return m;
}

/* Field by field (no memcmp: the struct has padding). */
static void assert_same_msg(const xfer_wire_msg *a, const xfer_wire_msg *b)
{
    ck_assert_uint_eq(a->type, b->type);
    ck_assert_uint_eq(a->role, b->role);
    ck_assert_uint_eq(a->kind, b->kind);
    ck_assert_uint_eq(a->req_type, b->req_type);
    ck_assert_uint_eq(a->version, b->version);
    ck_assert_uint_eq(a->shard, b->shard);
    ck_assert_uint_eq(a->group, b->group);
    ck_assert_uint_eq(a->attempt, b->attempt);
    ck_assert_uint_eq(a->len, b->len);
    ck_assert_uint_eq(a->rkey, b->rkey);
    ck_assert_uint_eq(a->max_write, b->max_write);
    ck_assert_uint_eq(a->hello_flags, b->hello_flags);
    ck_assert_uint_eq(a->crc_set, b->crc_set);
    ck_assert_uint_eq(a->crc, b->crc);
    ck_assert_int_eq(a->code, b->code);
    ck_assert_uint_eq(a->id, b->id);
    ck_assert_uint_eq(a->resv_id, b->resv_id);
    ck_assert_uint_eq(a->addr, b->addr);
    ck_assert_uint_eq(a->off, b->off);
    ck_assert_uint_eq(a->pool_bytes, b->pool_bytes);
    ck_assert_uint_eq(a->lease_ttl_ns, b->lease_ttl_ns);
    ck_assert_uint_eq(a->hold_ns, b->hold_ns);
    ck_assert(memcmp(a->session, b->session, sizeof a->session) == 0);
    ck_assert(memcmp(a->nonce, b->nonce, sizeof a->nonce) == 0);
    ck_assert(memcmp(a->mac, b->mac, sizeof a->mac) == 0);
    ck_assert(memcmp(&a->bad, &b->bad, sizeof a->bad) == 0);
    const xfer_wire_status *x = &a->st, *y = &b->st;
    ck_assert_uint_eq(x->shard, y->shard);
    ck_assert_uint_eq(x->nshards, y->nshards);
    ck_assert_uint_eq(x->conns, y->conns);
    ck_assert_uint_eq(x->pool_bytes, y->pool_bytes);
    ck_assert_uint_eq(x->bytes_in_use, y->bytes_in_use);
    ck_assert_uint_eq(x->live, y->live);
    ck_assert_uint_eq(x->tombstones, y->tombstones);
    ck_assert_uint_eq(x->reserves, y->reserves);
    ck_assert_uint_eq(x->refused, y->refused);
    ck_assert_uint_eq(x->writes, y->writes);
    ck_assert_uint_eq(x->commits, y->commits);
    ck_assert_uint_eq(x->cancels, y->cancels);
    ck_assert_uint_eq(x->expiries, y->expiries);
    ck_assert_uint_eq(x->bad_frames, y->bad_frames);
    ck_assert_uint_eq(x->errors_sent, y->errors_sent);
    ck_assert_uint_eq(x->events_sent, y->events_sent);
    ck_assert_uint_eq(x->write_bytes, y->write_bytes);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static void set_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A valid frame of `type` (fields from seed 1), its length in *n. */
static void valid_frame(unsigned type, uint8_t *buf, size_t *n)
{
    uint64_t rng = 1;
    xfer_wire_msg m = random_msg(type, &rng);
    *n = xfer_wire_encode(&m, 77, buf, XFER_WIRE_MAX_FIXED);
    ck_assert_uint_eq(*n, XFER_WIRE_HDR + xfer_wire_body_size(type));
}

/* Decoding buf must fail with XFER_ERR_PROTO and `want`, and leave the
 * outputs as they were. */
static void assert_refused(const uint8_t *buf, size_t n,
                           xfer_wire_reason want)
{
    xfer_wire_hdr h = {.type = 0xEE, .len = 0xEEEE, .req = 0xEEEE};
    xfer_wire_msg m;
    memset(&m, 0, sizeof m);
    m.id = 0xDEAD;
    xfer_wire_reason why = XFER_WIRE_R_OK;
    int rc = xfer_wire_decode(buf, n, &h, &m, &why);
    ck_assert_int_eq(rc, XFER_ERR_PROTO);
    ck_assert_str_eq(xfer_wire_reason_name(why), xfer_wire_reason_name(want));
    ck_assert_uint_eq(m.id, 0xDEAD);
    ck_assert_uint_eq(m.type, 0);
}

START_TEST(test_wire_every_type_round_trips)
{
    uint64_t rng = tu_seed("test_wire_every_type_round_trips", 11);
    for (size_t t = 0; t < NELEM(all_types); t++) {
        unsigned type = all_types[t];
        for (int rep = 0; rep < 200; rep++) {
            xfer_wire_msg in = random_msg(type, &rng);
            uint32_t req = (uint32_t)tu_rand(&rng);
            uint8_t buf[XFER_WIRE_MAX_FIXED + 8];
            memset(buf, 0xA5, sizeof buf);
            size_t n = xfer_wire_encode(&in, req, buf, XFER_WIRE_MAX_FIXED);
            ck_assert_uint_eq(n, XFER_WIRE_HDR + all_bodies[t]);
            for (size_t i = n; i < sizeof buf; i++)
                ck_assert_uint_eq(buf[i], 0xA5); /* nothing past the frame */
            /* the header, byte by byte */
            ck_assert(memcmp(buf, "XFRW", 4) == 0);
            ck_assert_uint_eq(buf[4], XFER_WIRE_VERSION);
            ck_assert_uint_eq(buf[5], type);
            ck_assert_uint_eq(buf[6] | buf[7], 0);
            uint32_t want_len = (uint32_t)n;
            if (xfer_wire_has_data(type))
                want_len += in.len; /* the data the caller sends next */
            ck_assert_uint_eq(le32(buf + 8), want_len);
            ck_assert_uint_eq(le32(buf + 12), req);

            xfer_wire_hdr h;
            xfer_wire_msg out;
            xfer_wire_reason why = XFER_WIRE_R_BAD_FIELD;
            ck_assert_int_eq(xfer_wire_decode(buf, n, &h, &out, &why), 0);
            ck_assert_uint_eq(why, XFER_WIRE_R_OK);
            ck_assert_uint_eq(h.type, type);
            ck_assert_uint_eq(h.len, want_len);
            ck_assert_uint_eq(h.req, req);
            assert_same_msg(&out, &in);
        }
    }
}
END_TEST

START_TEST(test_wire_layout_is_little_endian)
{
    /* A RESERVE written by hand: id 0x0102030405060708, attempt 9,
     * len 0x1000, request id 0x0A0B0C0D. */
    static const uint8_t frame[32] = {
        0x58, 0x46, 0x52, 0x57, 1, XFER_WIRE_T_RESERVE, 0, 0,
        32, 0, 0, 0, 0x0D, 0x0C, 0x0B, 0x0A,
        8, 7, 6, 5, 4, 3, 2, 1, 9, 0, 0, 0, 0x00, 0x10, 0, 0};
    xfer_wire_hdr h;
    xfer_wire_msg m;
    xfer_wire_reason why;
    ck_assert_int_eq(xfer_wire_decode(frame, sizeof frame, &h, &m, &why), 0);
    ck_assert_uint_eq(h.type, XFER_WIRE_T_RESERVE);
    ck_assert_uint_eq(h.len, 32);
    ck_assert_uint_eq(h.req, 0x0A0B0C0Du);
    ck_assert_uint_eq(m.id, 0x0102030405060708ull);
    ck_assert_uint_eq(m.attempt, 9);
    ck_assert_uint_eq(m.len, 0x1000);
    uint8_t again[XFER_WIRE_MAX_FIXED];
    ck_assert_uint_eq(xfer_wire_encode(&m, h.req, again, sizeof again), 32);
    ck_assert(memcmp(again, frame, sizeof frame) == 0);

    /* Reserved fields go out as 0 and are ignored on receipt. */
    xfer_wire_msg hello;
    memset(&hello, 0, sizeof hello);
    hello.type = XFER_WIRE_T_HELLO;
    hello.role = XFER_WIRE_ROLE_CONSUMER;
    hello.shard = 3;
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    memset(buf, 0xFF, sizeof buf);
    size_t n = xfer_wire_encode(&hello, 0, buf, sizeof buf);
    ck_assert_uint_eq(n, XFER_WIRE_HDR + 12);
    ck_assert_uint_eq(buf[16] | buf[17] << 8, XFER_WIRE_VERSION); /* 0: v1 */
    ck_assert_uint_eq(buf[16 + 3], 0);
    ck_assert_uint_eq(buf[16 + 10] | buf[16 + 11], 0);
    buf[16 + 3] = 0x7F;
    buf[16 + 10] = 0x7F;
    ck_assert_int_eq(xfer_wire_decode(buf, n, &h, &m, &why), 0);
    ck_assert_uint_eq(m.role, XFER_WIRE_ROLE_CONSUMER);
    ck_assert_uint_eq(m.shard, 3);
}
END_TEST

START_TEST(test_wire_bad_header_refused)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t n;
    valid_frame(XFER_WIRE_T_COMMIT, buf, &n);

    buf[0] ^= 1;
    assert_refused(buf, n, XFER_WIRE_R_BAD_MAGIC);
    buf[4] = 0; /* a bad magic is reported before a bad version */
    assert_refused(buf, n, XFER_WIRE_R_BAD_MAGIC);
    buf[0] ^= 1;
    const uint8_t versions[] = {0, 2, 0xFF};
    for (size_t i = 0; i < NELEM(versions); i++) {
        buf[4] = versions[i];
        assert_refused(buf, n, XFER_WIRE_R_BAD_VERSION);
    }
    buf[4] = XFER_WIRE_VERSION;
    buf[6] = 1;
    assert_refused(buf, n, XFER_WIRE_R_BAD_FLAGS);
    buf[6] = 0;
    buf[7] = 0x80;
    assert_refused(buf, n, XFER_WIRE_R_BAD_FLAGS);
    buf[7] = 0;
    const uint8_t types[] = {XFER_WIRE_T_INVALID, XFER_WIRE_T_COUNT_, 0x80,
                             0xFF};
    for (size_t i = 0; i < NELEM(types); i++) {
        buf[5] = types[i];
        assert_refused(buf, n, XFER_WIRE_R_BAD_TYPE);
    }
    buf[5] = XFER_WIRE_T_COMMIT;
    xfer_wire_hdr h;
    xfer_wire_msg m;
    xfer_wire_reason why;
    ck_assert_int_eq(xfer_wire_decode(buf, n, &h, &m, &why), 0);
}
END_TEST

START_TEST(test_wire_length_exact_per_type)
{
    for (size_t t = 0; t < NELEM(all_types); t++) {
        unsigned type = all_types[t];
        if (xfer_wire_has_data(type))
            continue;
        uint8_t buf[XFER_WIRE_MAX_FIXED];
        size_t n;
        valid_frame(type, buf, &n);
        const uint32_t lens[] = {0, XFER_WIRE_HDR, (uint32_t)n - 1,
                                 (uint32_t)n + 1, XFER_WIRE_MAX_FRAME,
                                 UINT32_MAX};
        for (size_t i = 0; i < NELEM(lens); i++) {
            set_le32(buf + 8, lens[i]);
            assert_refused(buf, n, XFER_WIRE_R_BAD_LENGTH);
        }
        set_le32(buf + 8, (uint32_t)n);
        xfer_wire_hdr h;
        xfer_wire_reason why;
        ck_assert_int_eq(xfer_wire_decode_hdr(buf, n, &h, &why), 0);
    }
}
END_TEST

START_TEST(test_wire_write_length_limits)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    xfer_wire_msg w;
    memset(&w, 0, sizeof w);
    w.type = XFER_WIRE_T_WRITE;
    xfer_wire_hdr h;
    xfer_wire_reason why;

    /* the largest WRITE there is: 64 MiB of data */
    w.len = XFER_WIRE_MAX_DATA;
    size_t n = xfer_wire_encode(&w, 1, buf, sizeof buf);
    ck_assert_uint_eq(n, XFER_WIRE_HDR + XFER_WIRE_WRITE_FIXED);
    ck_assert_uint_eq(le32(buf + 8), XFER_WIRE_MAX_FRAME);
    ck_assert_int_eq(xfer_wire_decode_hdr(buf, n, &h, &why), 0);
    ck_assert_uint_eq(h.len, XFER_WIRE_MAX_FRAME);
    /* one byte more cannot be encoded, and is refused on sight */
    w.len = XFER_WIRE_MAX_DATA + 1;
    ck_assert_uint_eq(xfer_wire_encode(&w, 1, buf, sizeof buf), 0);
    w.len = XFER_WIRE_MAX_DATA;
    n = xfer_wire_encode(&w, 1, buf, sizeof buf);
    set_le32(buf + 8, XFER_WIRE_MAX_FRAME + 1);
    assert_refused(buf, n, XFER_WIRE_R_BAD_LENGTH);
    set_le32(buf + 8, UINT32_MAX);
    assert_refused(buf, n, XFER_WIRE_R_BAD_LENGTH);
    /* shorter than its fixed part */
    set_le32(buf + 8, XFER_WIRE_HDR + XFER_WIRE_WRITE_FIXED - 1);
    assert_refused(buf, n, XFER_WIRE_R_BAD_LENGTH);
    /* no data at all is a frame */
    w.len = 0;
    n = xfer_wire_encode(&w, 1, buf, sizeof buf);
    xfer_wire_msg m;
    ck_assert_int_eq(xfer_wire_decode(buf, n, &h, &m, &why), 0);
    ck_assert_uint_eq(h.len, XFER_WIRE_HDR + XFER_WIRE_WRITE_FIXED);
}
END_TEST

START_TEST(test_wire_short_input_needs_more)
{
    for (size_t t = 0; t < NELEM(all_types); t++) {
        uint8_t buf[XFER_WIRE_MAX_FIXED];
        size_t n;
        valid_frame(all_types[t], buf, &n);
        xfer_wire_hdr h;
        xfer_wire_msg m;
        xfer_wire_reason why;
        for (size_t k = 0; k < XFER_WIRE_HDR; k++)
            ck_assert_int_eq(xfer_wire_decode_hdr(buf, k, &h, &why),
                             XFER_WIRE_NEED_MORE);
        for (size_t k = 0; k < n; k++)
            ck_assert_int_eq(xfer_wire_decode(buf, k, &h, &m, &why),
                             XFER_WIRE_NEED_MORE);
        ck_assert_int_eq(xfer_wire_decode(buf, n, &h, &m, &why), 0);
        /* a body shorter than the type's fixed size is refused */
        if (all_bodies[t] > 0)
            ck_assert_int_eq(xfer_wire_decode_body(&h, buf + XFER_WIRE_HDR,
                                                   all_bodies[t] - 1, &m,
                                                   &why), XFER_ERR_PROTO);
    }
}
END_TEST

START_TEST(test_wire_decode_body_checks_its_header)
{
    uint8_t body[XFER_WIRE_MAX_FIXED] = {0};
    xfer_wire_msg m;
    xfer_wire_reason why;
    xfer_wire_hdr h = {.type = XFER_WIRE_T_INVALID, .len = 40};
    ck_assert_int_eq(xfer_wire_decode_body(&h, body, sizeof body, &m, &why),
                     XFER_ERR_PROTO);
    ck_assert_uint_eq(why, XFER_WIRE_R_BAD_TYPE);
    h.type = XFER_WIRE_T_COUNT_;
    ck_assert_int_eq(xfer_wire_decode_body(&h, body, sizeof body, &m, &why),
                     XFER_ERR_PROTO);
    ck_assert_uint_eq(why, XFER_WIRE_R_BAD_TYPE);
    /* a header whose length cannot hold the body it names */
    h.type = XFER_WIRE_T_RESERVE_OK;
    h.len = XFER_WIRE_HDR + 40 - 1;
    ck_assert_int_eq(xfer_wire_decode_body(&h, body, sizeof body, &m, &why),
                     XFER_ERR_PROTO);
    ck_assert_uint_eq(why, XFER_WIRE_R_BAD_LENGTH);
    ck_assert_int_eq(xfer_wire_decode_body(&h, body, 39, &m, &why),
                     XFER_ERR_PROTO);
    h.len = XFER_WIRE_HDR + 40;
    ck_assert_int_eq(xfer_wire_decode_body(&h, body, 40, &m, &why), 0);
    ck_assert_uint_eq(m.type, XFER_WIRE_T_RESERVE_OK);
}
END_TEST

/* Overwrite bytes [at, at + len) of a valid `type` frame's body and expect
 * BAD_FIELD. */
static void assert_bad_field(unsigned type, size_t at, const void *bytes,
                             size_t len)
{
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t n;
    valid_frame(type, buf, &n);
    memcpy(buf + XFER_WIRE_HDR + at, bytes, len);
    assert_refused(buf, n, XFER_WIRE_R_BAD_FIELD);
}

START_TEST(test_wire_field_ranges_checked)
{
    /* HELLO: role (body byte 2) 1..3, shard (bytes 8..9) not 0xFFFF */
    const uint8_t role0 = 0, role4 = XFER_WIRE_ROLE_ADMIN + 1, ff[2] = {0xFF,
                                                                        0xFF};
    assert_bad_field(XFER_WIRE_T_HELLO, 2, &role0, 1);
    assert_bad_field(XFER_WIRE_T_HELLO, 2, &role4, 1);
    assert_bad_field(XFER_WIRE_T_HELLO, 8, ff, 2);
    /* EVENT: kind (byte 0) below XFER_SHARD_EV_COUNT_ */
    const uint8_t kind = XFER_SHARD_EV_COUNT_;
    assert_bad_field(XFER_WIRE_T_EVENT, 0, &kind, 1);
    /* ERROR: code (bytes 0..3) negative */
    const uint8_t zero[4] = {0}, pos[4] = {1, 0, 0, 0};
    assert_bad_field(XFER_WIRE_T_ERROR, 0, zero, 4);
    assert_bad_field(XFER_WIRE_T_ERROR, 0, pos, 4);

    /* WRITE: len (bytes 12..15) must be the header's data length, and
     * off + len must not wrap */
    xfer_wire_msg w;
    memset(&w, 0, sizeof w);
    w.type = XFER_WIRE_T_WRITE;
    w.len = 10;
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t n = xfer_wire_encode(&w, 1, buf, sizeof buf);
    set_le32(buf + XFER_WIRE_HDR + 12, 9);
    assert_refused(buf, n, XFER_WIRE_R_BAD_FIELD);
    set_le32(buf + XFER_WIRE_HDR + 12, 11);
    assert_refused(buf, n, XFER_WIRE_R_BAD_FIELD);
    w.off = UINT64_MAX - 9;
    n = xfer_wire_encode(&w, 1, buf, sizeof buf);
    assert_refused(buf, n, XFER_WIRE_R_BAD_FIELD);
    w.off = UINT64_MAX - 10; /* the last byte is UINT64_MAX - 1: fine */
    n = xfer_wire_encode(&w, 1, buf, sizeof buf);
    xfer_wire_hdr h;
    xfer_wire_msg m;
    xfer_wire_reason why;
    ck_assert_int_eq(xfer_wire_decode(buf, n, &h, &m, &why), 0);
    ck_assert_uint_eq(m.off, UINT64_MAX - 10);
}
END_TEST

START_TEST(test_wire_encode_limits)
{
    for (size_t t = 0; t < NELEM(all_types); t++) {
        uint64_t rng = 3;
        xfer_wire_msg m = random_msg(all_types[t], &rng);
        size_t need = XFER_WIRE_HDR + all_bodies[t];
        ck_assert_uint_le(need, XFER_WIRE_MAX_FIXED);
        uint8_t buf[XFER_WIRE_MAX_FIXED];
        memset(buf, 0x3C, sizeof buf);
        ck_assert_uint_eq(xfer_wire_encode(&m, 5, buf, need - 1), 0);
        for (size_t i = 0; i < sizeof buf; i++)
            ck_assert_uint_eq(buf[i], 0x3C); /* refused: nothing written */
        ck_assert_uint_eq(xfer_wire_encode(&m, 5, buf, need), need);
    }
    xfer_wire_msg bad;
    memset(&bad, 0, sizeof bad);
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    const unsigned types[] = {XFER_WIRE_T_INVALID, XFER_WIRE_T_COUNT_, 0xFF};
    for (size_t i = 0; i < NELEM(types); i++) {
        bad.type = (uint8_t)types[i];
        ck_assert_uint_eq(xfer_wire_encode(&bad, 1, buf, sizeof buf), 0);
    }
}
END_TEST

START_TEST(test_wire_names_and_sizes)
{
    for (size_t t = 0; t < NELEM(all_types); t++) {
        ck_assert_str_eq(xfer_wire_type_name(all_types[t]), all_type_names[t]);
        ck_assert_uint_eq(xfer_wire_body_size(all_types[t]), all_bodies[t]);
        /* 1.., never renumbered; 28 and 29 are the lease refresh's
         * (issue 26) */
        ck_assert_uint_eq(all_types[t], t + 1);
    }
    ck_assert_uint_eq(NELEM(all_types), XFER_WIRE_T_COUNT_ - 1);
    ck_assert_str_eq(xfer_wire_type_name(XFER_WIRE_T_INVALID), "?");
    ck_assert_str_eq(xfer_wire_type_name(XFER_WIRE_T_COUNT_), "?");
    ck_assert_uint_eq(xfer_wire_body_size(XFER_WIRE_T_INVALID), 0);
    ck_assert_uint_eq(xfer_wire_body_size(XFER_WIRE_T_COUNT_), 0);
    static const char *const reasons[] = {
#define R_(name) #name,
        XFER_WIRE_REASONS(R_)
#undef R_
    };
    for (unsigned r = 0; r < XFER_WIRE_R_COUNT_; r++)
        ck_assert_str_eq(xfer_wire_reason_name(r), reasons[r]);
    ck_assert_str_eq(xfer_wire_reason_name(XFER_WIRE_R_COUNT_), "?");
    ck_assert_uint_eq(XFER_WIRE_MAX_FIXED,
                      XFER_WIRE_HDR + xfer_wire_body_size(
                                          XFER_WIRE_T_STATUS_OK));
}
END_TEST

/* EAGER carries its data after a 16-byte fixed part: the frame is 32 +
 * len long, a len field that disagrees with the frame is refused, and so
 * is data over the limit; HELLO_ACK's flags word says whether the shard
 * takes it. */
START_TEST(test_wire_eager_frame)
{
    xfer_wire_msg m = {.type = XFER_WIRE_T_EAGER, .id = 0x1122334455667788u,
                       .attempt = 7, .len = 100};
    uint8_t buf[XFER_WIRE_MAX_FIXED];
    size_t n = xfer_wire_encode(&m, 9, buf, sizeof buf);
    ck_assert_uint_eq(n, 32);
    ck_assert_uint_eq(le32(buf + 8), 132);
    xfer_wire_hdr h;
    xfer_wire_msg out;
    xfer_wire_reason why;
    ck_assert_int_eq(xfer_wire_decode(buf, n, &h, &out, &why), 0);
    ck_assert_uint_eq(h.len, 132);
    ck_assert_uint_eq(out.id, m.id);
    ck_assert_uint_eq(out.attempt, 7);
    ck_assert_uint_eq(out.len, 100);
    set_le32(buf + 8, 131); /* one data byte fewer than len says */
    assert_refused(buf, n, XFER_WIRE_R_BAD_FIELD);
    set_le32(buf + 8, 31); /* shorter than the fixed part */
    assert_refused(buf, n, XFER_WIRE_R_BAD_LENGTH);
    set_le32(buf + 8, 32 + XFER_WIRE_MAX_DATA + 1);
    assert_refused(buf, n, XFER_WIRE_R_BAD_LENGTH);
    m.len = XFER_WIRE_MAX_DATA + 1;
    ck_assert_uint_eq(xfer_wire_encode(&m, 9, buf, sizeof buf), 0);
    xfer_wire_msg ack = {.type = XFER_WIRE_T_HELLO_ACK, .shard = 2,
                         .hello_flags = XFER_WIRE_HELLO_EAGER};
    n = xfer_wire_encode(&ack, 1, buf, sizeof buf);
    ck_assert_uint_eq(le32(buf + 44), XFER_WIRE_HELLO_EAGER);
    ck_assert_int_eq(xfer_wire_decode(buf, n, &h, &out, &why), 0);
    ck_assert_uint_eq(out.hello_flags, XFER_WIRE_HELLO_EAGER);
}
END_TEST

/* Flipped bytes in valid frames: every decode either refuses with a reason
 * or yields a message that re-encodes and decodes to itself. */
START_TEST(test_wire_mutated_frames_refused_or_stable)
{
    uint64_t rng = tu_seed("test_wire_mutated_frames_refused_or_stable", 23);
    unsigned refused = 0, accepted = 0;
    for (int rep = 0; rep < 20000; rep++) {
        unsigned type = all_types[tu_rand(&rng) % NELEM(all_types)];
        xfer_wire_msg in = random_msg(type, &rng);
        uint8_t buf[XFER_WIRE_MAX_FIXED];
        size_t n = xfer_wire_encode(&in, (uint32_t)rep, buf, sizeof buf);
        ck_assert_uint_gt(n, 0);
        for (int flips = 1 + (int)(tu_rand(&rng) % 3); flips > 0; flips--)
            buf[tu_rand(&rng) % n] ^= (uint8_t)(1u << (tu_rand(&rng) % 8));
        size_t give = n - tu_rand(&rng) % 2; /* sometimes one byte short */
        xfer_wire_hdr h;
        xfer_wire_msg m;
        xfer_wire_reason why = XFER_WIRE_R_OK;
        int rc = xfer_wire_decode(buf, give, &h, &m, &why);
        if (rc == XFER_WIRE_NEED_MORE)
            continue;
        if (rc != 0) {
            ck_assert_int_eq(rc, XFER_ERR_PROTO);
            ck_assert_uint_ne(why, XFER_WIRE_R_OK);
            ck_assert_uint_lt(why, XFER_WIRE_R_COUNT_);
            refused++;
            continue;
        }
        accepted++;
        uint8_t again[XFER_WIRE_MAX_FIXED];
        size_t n2 = xfer_wire_encode(&m, h.req, again, sizeof again);
        ck_assert_uint_eq(n2, XFER_WIRE_HDR + xfer_wire_body_size(h.type));
        xfer_wire_hdr h2;
        xfer_wire_msg m2;
        ck_assert_int_eq(xfer_wire_decode(again, n2, &h2, &m2, &why), 0);
        ck_assert_uint_eq(h2.len, h.len);
        /* the one field that does not come back: a HELLO version 0 is
         * sent as the current version */
        if ((h.type == XFER_WIRE_T_HELLO || h.type == XFER_WIRE_T_HELLO_ACK) &&
            m.version == 0) {
            ck_assert_uint_eq(m2.version, XFER_WIRE_VERSION);
            m.version = XFER_WIRE_VERSION;
        }
        assert_same_msg(&m2, &m);
    }
    /* both outcomes happened, so both branches were checked */
    ck_assert_uint_gt(refused, 0);
    ck_assert_uint_gt(accepted, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("wire");
    TCase *tc = tcase_create("wire");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_wire_every_type_round_trips);
    tcase_add_test(tc, test_wire_layout_is_little_endian);
    tcase_add_test(tc, test_wire_bad_header_refused);
    tcase_add_test(tc, test_wire_length_exact_per_type);
    tcase_add_test(tc, test_wire_write_length_limits);
    tcase_add_test(tc, test_wire_short_input_needs_more);
    tcase_add_test(tc, test_wire_decode_body_checks_its_header);
    tcase_add_test(tc, test_wire_field_ranges_checked);
    tcase_add_test(tc, test_wire_encode_limits);
    tcase_add_test(tc, test_wire_names_and_sizes);
    tcase_add_test(tc, test_wire_mutated_frames_refused_or_stable);
    tcase_add_test(tc, test_wire_eager_frame);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
