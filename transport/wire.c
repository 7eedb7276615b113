/*
 * transport/wire.c - pure encode/decode of the xfer wire protocol (see
 * wire.h for the frame layout and the message table).
 *
 * What must stay true: decoding reads only bytes inside [buf, buf + n),
 * whatever they hold: the header is checked (magic, version, flags, type,
 * exact length for the type) before any body byte is looked at, and a body
 * is read only when the caller proves it has the type's fixed size, through
 * a decoder bounded by that size.  Every integer goes through the one
 * little-endian codec (fsm/le.h), byte by byte, so the code is independent
 * of host endianness and alignment.  Nothing here allocates,
 * asserts on input, or keeps state.
 */
#include "wire.h"

#include <stdbool.h>
#include <string.h>

#include "le.h" /* fsm/: the one little-endian codec (fsm_private_dep) */
#include "xfer/errors.h"
#include "xfer/shard.h"

/* ---------------------------------------------------------------------- */
/* Tables                                                                  */
/* ---------------------------------------------------------------------- */

/* The types whose body is the common 24-byte op body alone (get_op,
 * put_op): one list for the decoder and the encoder. */
#define OP_BODY_TYPES(X)                                                      \
    X(WRITE_ACK) X(COMMIT) X(COMMIT_ACK) X(CANCEL) X(CANCEL_ACK) X(TAKE)      \
    X(RELEASE) X(RELEASE_ACK)
#define OP_BODY_CASE_(t) case XFER_WIRE_T_##t:

size_t xfer_wire_body_size(unsigned type)
{
    switch (type) {
#define XFER_WIRE_SIZE_(name, val, body)                                      \
    case (val):                                                               \
        return (body);
        XFER_WIRE_TYPES(XFER_WIRE_SIZE_)
#undef XFER_WIRE_SIZE_
    default:
        return 0;
    }
}

const char *xfer_wire_type_name(unsigned type)
{
    switch (type) {
#define XFER_WIRE_NAME_(name, val, body)                                      \
    case (val):                                                               \
        return #name;
        XFER_WIRE_TYPES(XFER_WIRE_NAME_)
#undef XFER_WIRE_NAME_
    default:
        return "?";
    }
}

const char *xfer_wire_reason_name(unsigned reason)
{
    static const char *const names[] = {
#define XFER_WIRE_RNAME_(name) #name,
        XFER_WIRE_REASONS(XFER_WIRE_RNAME_)
#undef XFER_WIRE_RNAME_
    };
    return reason < XFER_WIRE_R_COUNT_ ? names[reason] : "?";
}

/* ---------------------------------------------------------------------- */
/* Decoding                                                                */
/* ---------------------------------------------------------------------- */

static int refuse(xfer_wire_reason *reason, xfer_wire_reason why)
{
    if (reason)
        *reason = why;
    return XFER_ERR_PROTO;
}

int xfer_wire_decode_hdr(const void *buf, size_t n, xfer_wire_hdr *h,
                         xfer_wire_reason *reason)
{
    if (n < XFER_WIRE_HDR)
        return XFER_WIRE_NEED_MORE;
    xfer_le_dec r = xfer_le_dec_start(buf, XFER_WIRE_HDR);
    uint32_t magic = xfer_le_dec_u32(&r);
    uint8_t version = xfer_le_dec_u8(&r), type = xfer_le_dec_u8(&r);
    uint16_t flags = xfer_le_dec_u16(&r);
    uint32_t len = xfer_le_dec_u32(&r), req = xfer_le_dec_u32(&r);
    if (magic != XFER_WIRE_MAGIC)
        return refuse(reason, XFER_WIRE_R_BAD_MAGIC);
    if (version != XFER_WIRE_VERSION)
        return refuse(reason, XFER_WIRE_R_BAD_VERSION);
    if (flags != 0)
        return refuse(reason, XFER_WIRE_R_BAD_FLAGS);
    size_t body = xfer_wire_body_size(type);
    if (body == 0)
        return refuse(reason, XFER_WIRE_R_BAD_TYPE);
    if (xfer_wire_has_data(type)) {
        uint32_t max = xfer_wire_is_eager(type) ? XFER_WIRE_MAX_EAGER
                                                : XFER_WIRE_MAX_DATA;
        if (len < XFER_WIRE_HDR + body || len - XFER_WIRE_HDR - body > max)
            return refuse(reason, XFER_WIRE_R_BAD_LENGTH);
    } else if (len != XFER_WIRE_HDR + body) {
        return refuse(reason, XFER_WIRE_R_BAD_LENGTH);
    }
    h->type = type;
    h->len = len;
    h->req = req;
    if (reason)
        *reason = XFER_WIRE_R_OK;
    return 0;
}

/* id, attempt, u32 (len or rsv), resv_id: the common 24-byte body. */
static void get_op(xfer_le_dec *r, xfer_wire_msg *m)
{
    m->id = xfer_le_dec_u64(r);
    m->attempt = xfer_le_dec_u32(r);
    m->len = xfer_le_dec_u32(r);
    m->resv_id = xfer_le_dec_u64(r);
}

static void get_status(xfer_le_dec *r, xfer_wire_status *s)
{
    s->shard = xfer_le_dec_u16(r);
    s->nshards = xfer_le_dec_u16(r);
    s->conns = xfer_le_dec_u32(r);
    uint64_t *f[] = {&s->pool_bytes, &s->bytes_in_use, &s->live,
                     &s->tombstones, &s->reserves, &s->refused, &s->writes,
                     &s->commits, &s->cancels, &s->expiries, &s->bad_frames,
                     &s->errors_sent, &s->events_sent, &s->write_bytes};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        *f[i] = xfer_le_dec_u64(r);
}

static int get_hello(xfer_le_dec *r, xfer_wire_msg *m, bool ack)
{
    m->version = xfer_le_dec_u16(r);
    if (ack) {
        m->shard = xfer_le_dec_u16(r);
        m->group = xfer_le_dec_u32(r);
        m->pool_bytes = xfer_le_dec_u64(r);
        m->lease_ttl_ns = xfer_le_dec_u64(r);
        m->max_write = xfer_le_dec_u32(r);
        m->hello_flags = xfer_le_dec_u32(r);
        return 0;
    }
    m->role = xfer_le_dec_u8(r);
    (void)xfer_le_dec_u8(r);
    m->group = xfer_le_dec_u32(r);
    m->shard = xfer_le_dec_u16(r);
    return m->role >= XFER_WIRE_ROLE_PRODUCER &&
                   m->role <= XFER_WIRE_ROLE_ADMIN && m->shard != 0xFFFFu
               ? 0
               : -1;
}

static void get_bytes(xfer_le_dec *r, uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = xfer_le_dec_u8(r);
}

static void put_bytes(xfer_le_enc *w, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        xfer_le_enc_u8(w, p[i]);
}

_Static_assert(XFER_WIRE_BAD_SLOTS == XFER_WIRE_R_COUNT_,
               "STATUS_BAD_OK carries every reason");

/* The fields of a STATUS_BAD_OK, in wire order. */
static void bad_fields(xfer_wire_bad *b, uint64_t *f[14])
{
    for (unsigned i = 0; i < XFER_WIRE_BAD_SLOTS; i++)
        f[i] = &b->by_reason[i];
    f[9] = &b->auth_failed;
    f[10] = &b->conns_refused;
    f[11] = &b->timeouts;
    f[12] = &b->writes_stalled;
    f[13] = &b->subs_dropped;
}

static void get_bad(xfer_le_dec *r, xfer_wire_bad *b)
{
    uint64_t *f[14];
    b->n = xfer_le_dec_u32(r);
    (void)xfer_le_dec_u32(r);
    bad_fields(b, f);
    for (int i = 0; i < 14; i++)
        *f[i] = xfer_le_dec_u64(r);
}

static void put_bad(xfer_le_enc *w, const xfer_wire_bad *b)
{
    uint64_t *f[14];
    xfer_wire_bad copy = *b;
    xfer_le_enc_u32(w, XFER_WIRE_BAD_SLOTS);
    xfer_le_enc_u32(w, 0);
    bad_fields(&copy, f);
    for (int i = 0; i < 14; i++)
        xfer_le_enc_u64(w, *f[i]);
}

static int get_hello2(xfer_le_dec *r, xfer_wire_msg *m)
{
    int rc = get_hello(r, m, false);
    (void)xfer_le_dec_u16(r);
    get_bytes(r, m->session, sizeof m->session);
    get_bytes(r, m->nonce, sizeof m->nonce);
    return rc;
}

static int get_event(xfer_le_dec *r, xfer_wire_msg *m)
{
    m->kind = xfer_le_dec_u8(r);
    /* flags: bits other than CRC are a newer peer's, ignored */
    m->crc_set = (xfer_le_dec_u8(r) & XFER_WIRE_EVENT_CRC) != 0;
    m->shard = xfer_le_dec_u16(r);
    m->attempt = xfer_le_dec_u32(r);
    m->id = xfer_le_dec_u64(r);
    m->resv_id = xfer_le_dec_u64(r);
    m->len = xfer_le_dec_u32(r);
    m->crc = m->crc_set ? xfer_le_dec_u32(r) : 0;
    return m->kind < XFER_SHARD_EV_COUNT_ ? 0 : -1;
}

static int get_write(xfer_le_dec *r, const xfer_wire_hdr *h, xfer_wire_msg *m)
{
    get_op(r, m);
    m->off = xfer_le_dec_u64(r);
    uint64_t data = (uint64_t)h->len - XFER_WIRE_HDR - XFER_WIRE_WRITE_FIXED;
    if (m->len != data || m->off > UINT64_MAX - m->len)
        return -1;
    return 0;
}

/* EAGER: its data follows the 16-byte fixed part, len bytes exactly;
 * EAGER_CRC: the same after its 24-byte one, and it decodes as an EAGER
 * with its crc. */
static int get_eager(xfer_le_dec *r, const xfer_wire_hdr *h,
                     xfer_wire_msg *m)
{
    m->id = xfer_le_dec_u64(r);
    m->attempt = xfer_le_dec_u32(r);
    m->len = xfer_le_dec_u32(r);
    if (h->type == XFER_WIRE_T_EAGER_CRC) {
        m->type = XFER_WIRE_T_EAGER;
        m->crc = xfer_le_dec_u32(r);
        m->crc_set = 1;
    }
    uint64_t data = (uint64_t)h->len - XFER_WIRE_HDR -
                    xfer_wire_body_size(h->type);
    return m->len == data ? 0 : -1;
}

static int get_error(xfer_le_dec *r, xfer_wire_msg *m)
{
    m->code = (int32_t)xfer_le_dec_u32(r);
    m->req_type = xfer_le_dec_u8(r);
    (void)xfer_le_dec_u8(r);
    m->shard = xfer_le_dec_u16(r);
    m->id = xfer_le_dec_u64(r);
    m->attempt = xfer_le_dec_u32(r);
    return m->code < 0 ? 0 : -1;
}

/* Dispatch on the type; returns 0 or -1 for a field out of range. */
static int get_body(xfer_le_dec *r, const xfer_wire_hdr *h, xfer_wire_msg *m)
{
    switch ((xfer_wire_type)h->type) {
    case XFER_WIRE_T_HELLO:
        return get_hello(r, m, false);
    case XFER_WIRE_T_HELLO_ACK:
        return get_hello(r, m, true);
    case XFER_WIRE_T_RESERVE:
        m->id = xfer_le_dec_u64(r);
        m->attempt = xfer_le_dec_u32(r);
        m->len = xfer_le_dec_u32(r);
        return 0;
    case XFER_WIRE_T_RESERVE_OK:
    case XFER_WIRE_T_EAGER_OK:
        get_op(r, m);
        m->addr = xfer_le_dec_u64(r);
        m->rkey = xfer_le_dec_u32(r);
        return 0;
    case XFER_WIRE_T_WRITE:
        return get_write(r, h, m);
    case XFER_WIRE_T_EAGER:
    case XFER_WIRE_T_EAGER_CRC:
        return get_eager(r, h, m);
    case XFER_WIRE_T_COMMIT_CRC:
        get_op(r, m); /* the crc sits where COMMIT's rsv does */
        m->type = XFER_WIRE_T_COMMIT;
        m->crc = m->len;
        m->len = 0;
        m->crc_set = 1;
        return 0;
    case XFER_WIRE_T_TAKE_OK:
        get_op(r, m);
        m->addr = xfer_le_dec_u64(r);
        return 0;
    case XFER_WIRE_T_REFRESH:
    case XFER_WIRE_T_REFRESH_OK:
        get_op(r, m); /* its u32 len is the rsv: sent 0, ignored */
        m->len = 0;
        m->hold_ns = xfer_le_dec_u64(r);
        return 0;
    OP_BODY_TYPES(OP_BODY_CASE_)
        get_op(r, m);
        return 0;
    case XFER_WIRE_T_EVENT:
        return get_event(r, m);
    case XFER_WIRE_T_SUBSCRIBE:
    case XFER_WIRE_T_SUBSCRIBE_ACK:
        return 0;
    case XFER_WIRE_T_STATUS:
        m->shard = xfer_le_dec_u16(r);
        return 0;
    case XFER_WIRE_T_STATUS_OK:
        get_status(r, &m->st);
        return 0;
    case XFER_WIRE_T_ERROR:
        return get_error(r, m);
    case XFER_WIRE_T_HELLO2:
        return get_hello2(r, m);
    case XFER_WIRE_T_CHALLENGE:
        get_bytes(r, m->nonce, sizeof m->nonce);
        get_bytes(r, m->mac, sizeof m->mac);
        return 0;
    case XFER_WIRE_T_AUTH:
        get_bytes(r, m->mac, sizeof m->mac);
        return 0;
    case XFER_WIRE_T_STATUS_BAD:
        return 0;
    case XFER_WIRE_T_STATUS_BAD_OK:
        get_bad(r, &m->bad);
        return m->bad.n == XFER_WIRE_BAD_SLOTS ? 0 : -1;
    case XFER_WIRE_T_INVALID:
    case XFER_WIRE_T_COUNT_:
        break;
    }
    return -1;
}

static bool known_code(int32_t code)
{
    switch (code) {
#define XFER_WIRE_KNOWN_(name, value, msg) case (value):
        XFER_ERRNO_MAP(XFER_WIRE_KNOWN_)
#undef XFER_WIRE_KNOWN_
        return true;
    default:
        return false;
    }
}

/* Codes that name the producer's own view of a transfer (its transport,
 * its deadline, its shutdown, its id table, a consumer's outcome): a shard
 * never has a reason to send them, and one that does would make the
 * transfer report a cause that did not happen. */
static bool local_code(int32_t code)
{
    switch (code) {
    case XFER_ERR_CONN_LOST:
    case XFER_ERR_ABORTED:
    case XFER_ERR_TIMEOUT:
    case XFER_ERR_UNAVAILABLE:
    case XFER_ERR_ABANDONED:
    case XFER_ERR_REUSED:
    case XFER_ERR_NO_POOL:
    case XFER_ERR_PEER_CANCELLED:
        return true;
    default:
        return false;
    }
}

int32_t xfer_wire_peer_code(int32_t code)
{
    if (code >= 0 || code <= XFER_ERR_FATAL_BAND || local_code(code))
        return 0;
    return known_code(code) ? code : XFER_ERR_REMOTE;
}

/* Whether get_body can refuse a body of this type (a field with a range):
 * only those are decoded through a copy, so that a refused frame leaves
 * *m as it was.  Must name every type whose get_body case can fail. */
static bool may_refuse(unsigned type)
{
    switch (type) {
    case XFER_WIRE_T_HELLO:
    case XFER_WIRE_T_HELLO_ACK:
    case XFER_WIRE_T_WRITE:
    case XFER_WIRE_T_EAGER:
    case XFER_WIRE_T_EAGER_CRC:
    case XFER_WIRE_T_EVENT:
    case XFER_WIRE_T_ERROR:
    case XFER_WIRE_T_HELLO2:
    case XFER_WIRE_T_STATUS_BAD_OK:
        return true;
    default:
        return false;
    }
}

int xfer_wire_decode_body(const xfer_wire_hdr *h, const void *body, size_t n,
                          xfer_wire_msg *m, xfer_wire_reason *reason)
{
    size_t need = xfer_wire_body_size(h->type);
    if (need == 0)
        return refuse(reason, XFER_WIRE_R_BAD_TYPE);
    if (n < need || h->len < XFER_WIRE_HDR + need)
        return refuse(reason, XFER_WIRE_R_BAD_LENGTH);
    xfer_le_dec r = xfer_le_dec_start(body, need);
    if (!may_refuse(h->type)) {
        /* Nothing in the body to refuse: straight into *m, without a copy
         * of the whole message (mostly the STATUS counters) per frame. */
        memset(m, 0, sizeof *m);
        m->type = h->type;
        if (get_body(&r, h, m) != 0) /* cannot happen: may_refuse is exact */
            return refuse(reason, XFER_WIRE_R_BAD_FIELD);
    } else {
        xfer_wire_msg tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.type = h->type;
        if (get_body(&r, h, &tmp) != 0)
            return refuse(reason, XFER_WIRE_R_BAD_FIELD);
        *m = tmp;
    }
    if (reason)
        *reason = XFER_WIRE_R_OK;
    return 0;
}

int xfer_wire_decode(const void *buf, size_t n, xfer_wire_hdr *h,
                     xfer_wire_msg *m, xfer_wire_reason *reason)
{
    int rc = xfer_wire_decode_hdr(buf, n, h, reason);
    if (rc != 0)
        return rc;
    size_t need = XFER_WIRE_HDR + xfer_wire_body_size(h->type);
    if (n < need)
        return XFER_WIRE_NEED_MORE;
    return xfer_wire_decode_body(h, (const uint8_t *)buf + XFER_WIRE_HDR,
                                 n - XFER_WIRE_HDR, m, reason);
}

/* ---------------------------------------------------------------------- */
/* Encoding                                                                */
/* ---------------------------------------------------------------------- */

static void put_op(xfer_le_enc *w, const xfer_wire_msg *m)
{
    xfer_le_enc_u64(w, m->id);
    xfer_le_enc_u32(w, m->attempt);
    xfer_le_enc_u32(w, m->len);
    xfer_le_enc_u64(w, m->resv_id);
}

static void put_status(xfer_le_enc *w, const xfer_wire_status *s)
{
    xfer_le_enc_u16(w, s->shard);
    xfer_le_enc_u16(w, s->nshards);
    xfer_le_enc_u32(w, s->conns);
    const uint64_t f[] = {s->pool_bytes, s->bytes_in_use, s->live,
                          s->tombstones, s->reserves, s->refused, s->writes,
                          s->commits, s->cancels, s->expiries, s->bad_frames,
                          s->errors_sent, s->events_sent, s->write_bytes};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        xfer_le_enc_u64(w, f[i]);
}

static void put_hello(xfer_le_enc *w, const xfer_wire_msg *m, bool ack)
{
    xfer_le_enc_u16(w, m->version ? m->version : XFER_WIRE_VERSION);
    if (ack) {
        xfer_le_enc_u16(w, m->shard);
        xfer_le_enc_u32(w, m->group);
        xfer_le_enc_u64(w, m->pool_bytes);
        xfer_le_enc_u64(w, m->lease_ttl_ns);
        xfer_le_enc_u32(w, m->max_write);
        xfer_le_enc_u32(w, m->hello_flags);
        return;
    }
    xfer_le_enc_u8(w, m->role);
    xfer_le_enc_u8(w, 0);
    xfer_le_enc_u32(w, m->group);
    xfer_le_enc_u16(w, m->shard);
}

static void put_event(xfer_le_enc *w, const xfer_wire_msg *m)
{
    xfer_le_enc_u8(w, m->kind);
    xfer_le_enc_u8(w, m->crc_set ? XFER_WIRE_EVENT_CRC : 0);
    xfer_le_enc_u16(w, m->shard);
    xfer_le_enc_u32(w, m->attempt);
    xfer_le_enc_u64(w, m->id);
    xfer_le_enc_u64(w, m->resv_id);
    xfer_le_enc_u32(w, m->len);
    xfer_le_enc_u32(w, m->crc_set ? m->crc : 0);
}

/* The frame type a message goes out as: a COMMIT or EAGER with crc_set
 * as COMMIT_CRC or EAGER_CRC. */
static unsigned wire_type(const xfer_wire_msg *m)
{
    if (m->crc_set && m->type == XFER_WIRE_T_COMMIT)
        return XFER_WIRE_T_COMMIT_CRC;
    if (m->crc_set && m->type == XFER_WIRE_T_EAGER)
        return XFER_WIRE_T_EAGER_CRC;
    return m->type;
}

static void put_body(xfer_le_enc *w, const xfer_wire_msg *m)
{
    switch ((xfer_wire_type)wire_type(m)) {
    case XFER_WIRE_T_HELLO:
    case XFER_WIRE_T_HELLO_ACK:
        put_hello(w, m, m->type == XFER_WIRE_T_HELLO_ACK);
        break;
    case XFER_WIRE_T_RESERVE:
    case XFER_WIRE_T_EAGER:
        xfer_le_enc_u64(w, m->id);
        xfer_le_enc_u32(w, m->attempt);
        xfer_le_enc_u32(w, m->len);
        break;
    case XFER_WIRE_T_EAGER_CRC:
        xfer_le_enc_u64(w, m->id);
        xfer_le_enc_u32(w, m->attempt);
        xfer_le_enc_u32(w, m->len);
        xfer_le_enc_u32(w, m->crc);
        break;
    case XFER_WIRE_T_COMMIT_CRC:
        xfer_le_enc_u64(w, m->id);
        xfer_le_enc_u32(w, m->attempt);
        xfer_le_enc_u32(w, m->crc);
        xfer_le_enc_u64(w, m->resv_id);
        break;
    case XFER_WIRE_T_RESERVE_OK:
    case XFER_WIRE_T_EAGER_OK:
        put_op(w, m);
        xfer_le_enc_u64(w, m->addr);
        xfer_le_enc_u32(w, m->rkey);
        break;
    case XFER_WIRE_T_WRITE:
        put_op(w, m);
        xfer_le_enc_u64(w, m->off);
        break;
    case XFER_WIRE_T_TAKE_OK:
        put_op(w, m);
        xfer_le_enc_u64(w, m->addr);
        break;
    case XFER_WIRE_T_REFRESH:
    case XFER_WIRE_T_REFRESH_OK:
        xfer_le_enc_u64(w, m->id);
        xfer_le_enc_u32(w, m->attempt);
        xfer_le_enc_u32(w, 0);
        xfer_le_enc_u64(w, m->resv_id);
        xfer_le_enc_u64(w, m->hold_ns);
        break;
    OP_BODY_TYPES(OP_BODY_CASE_)
        put_op(w, m);
        break;
    case XFER_WIRE_T_EVENT:
        put_event(w, m);
        break;
    case XFER_WIRE_T_STATUS:
        xfer_le_enc_u16(w, m->shard);
        break;
    case XFER_WIRE_T_STATUS_OK:
        put_status(w, &m->st);
        break;
    case XFER_WIRE_T_ERROR:
        xfer_le_enc_u32(w, (uint32_t)m->code);
        xfer_le_enc_u8(w, m->req_type);
        xfer_le_enc_u8(w, 0);
        xfer_le_enc_u16(w, m->shard);
        xfer_le_enc_u64(w, m->id);
        xfer_le_enc_u32(w, m->attempt);
        break;
    case XFER_WIRE_T_HELLO2:
        put_hello(w, m, false);
        xfer_le_enc_u16(w, 0);
        put_bytes(w, m->session, sizeof m->session);
        put_bytes(w, m->nonce, sizeof m->nonce);
        break;
    case XFER_WIRE_T_CHALLENGE:
        put_bytes(w, m->nonce, sizeof m->nonce);
        put_bytes(w, m->mac, sizeof m->mac);
        break;
    case XFER_WIRE_T_AUTH:
        put_bytes(w, m->mac, sizeof m->mac);
        break;
    case XFER_WIRE_T_STATUS_BAD_OK:
        put_bad(w, &m->bad);
        break;
    case XFER_WIRE_T_STATUS_BAD:
    case XFER_WIRE_T_SUBSCRIBE:
    case XFER_WIRE_T_SUBSCRIBE_ACK:
    case XFER_WIRE_T_INVALID:
    case XFER_WIRE_T_COUNT_:
        break;
    }
}

size_t xfer_wire_encode(const xfer_wire_msg *m, uint32_t req, void *buf,
                        size_t cap)
{
    unsigned type = wire_type(m);
    size_t body = xfer_wire_body_size(type);
    size_t n = XFER_WIRE_HDR + body;
    if (body == 0 || cap < n)
        return 0;
    uint64_t len = n;
    if (xfer_wire_has_data(type)) {
        if (m->len > (xfer_wire_is_eager(type) ? XFER_WIRE_MAX_EAGER
                                               : XFER_WIRE_MAX_DATA))
            return 0;
        len += m->len;
    }
    memset(buf, 0, n); /* reserved fields are 0 */
    xfer_le_enc w = xfer_le_enc_start(buf, n);
    xfer_le_enc_u32(&w, XFER_WIRE_MAGIC);
    xfer_le_enc_u8(&w, XFER_WIRE_VERSION);
    xfer_le_enc_u8(&w, (uint8_t)type);
    xfer_le_enc_u16(&w, 0);
    xfer_le_enc_u32(&w, (uint32_t)len);
    xfer_le_enc_u32(&w, req);
    put_body(&w, m);
    return n;
}
