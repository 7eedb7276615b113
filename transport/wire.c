/*
 * transport/wire.c - pure encode/decode of the xfer wire protocol (see
 * wire.h for the frame layout and the message table).
 *
 * What must stay true: decoding reads only bytes inside [buf, buf + n),
 * whatever they hold: the header is checked (magic, version, flags, type,
 * exact length for the type) before any body byte is looked at, and a body
 * is read only when the caller proves it has the type's fixed size.  Every
 * integer is assembled byte by byte in little-endian order, so the code is
 * independent of host endianness and alignment.  Nothing here allocates,
 * asserts on input, or keeps state.
 */
#include "wire.h"

#include <stdbool.h>
#include <string.h>

#include "xfer/errors.h"
#include "xfer/shard.h"

/* ---------------------------------------------------------------------- */
/* Little-endian cursors                                                   */
/* ---------------------------------------------------------------------- */

typedef struct rd {
    const uint8_t *p;
} rd;

typedef struct wr {
    uint8_t *p;
} wr;

static uint8_t get8(rd *r)
{
    return *r->p++;
}

static uint16_t get16(rd *r)
{
    uint16_t v = (uint16_t)(r->p[0] | (unsigned)r->p[1] << 8);
    r->p += 2;
    return v;
}

static uint32_t get32(rd *r)
{
    uint32_t v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 |
                 (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
    r->p += 4;
    return v;
}

static uint64_t get64(rd *r)
{
    uint64_t lo = get32(r);
    return lo | (uint64_t)get32(r) << 32;
}

static void put8(wr *w, uint8_t v)
{
    *w->p++ = v;
}

static void put16(wr *w, uint16_t v)
{
    put8(w, (uint8_t)v);
    put8(w, (uint8_t)(v >> 8));
}

static void put32(wr *w, uint32_t v)
{
    put16(w, (uint16_t)v);
    put16(w, (uint16_t)(v >> 16));
}

static void put64(wr *w, uint64_t v)
{
    put32(w, (uint32_t)v);
    put32(w, (uint32_t)(v >> 32));
}

/* ---------------------------------------------------------------------- */
/* Tables                                                                  */
/* ---------------------------------------------------------------------- */

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
    rd r = {buf};
    uint32_t magic = get32(&r);
    uint8_t version = get8(&r), type = get8(&r);
    uint16_t flags = get16(&r);
    uint32_t len = get32(&r), req = get32(&r);
    if (magic != XFER_WIRE_MAGIC)
        return refuse(reason, XFER_WIRE_R_BAD_MAGIC);
    if (version != XFER_WIRE_VERSION)
        return refuse(reason, XFER_WIRE_R_BAD_VERSION);
    if (flags != 0)
        return refuse(reason, XFER_WIRE_R_BAD_FLAGS);
    size_t body = xfer_wire_body_size(type);
    if (body == 0)
        return refuse(reason, XFER_WIRE_R_BAD_TYPE);
    if (type == XFER_WIRE_T_WRITE) {
        if (len < XFER_WIRE_HDR + body || len > XFER_WIRE_MAX_FRAME)
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
static void get_op(rd *r, xfer_wire_msg *m)
{
    m->id = get64(r);
    m->attempt = get32(r);
    m->len = get32(r);
    m->resv_id = get64(r);
}

static void get_status(rd *r, xfer_wire_status *s)
{
    s->shard = get16(r);
    s->nshards = get16(r);
    s->conns = get32(r);
    uint64_t *f[] = {&s->pool_bytes, &s->bytes_in_use, &s->live,
                     &s->tombstones, &s->reserves, &s->refused, &s->writes,
                     &s->commits, &s->cancels, &s->expiries, &s->bad_frames,
                     &s->errors_sent, &s->events_sent, &s->write_bytes};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        *f[i] = get64(r);
}

static int get_hello(rd *r, xfer_wire_msg *m, bool ack)
{
    m->version = get16(r);
    if (ack) {
        m->shard = get16(r);
        m->group = get32(r);
        m->pool_bytes = get64(r);
        m->lease_ttl_ns = get64(r);
        m->max_write = get32(r);
        return 0;
    }
    m->role = get8(r);
    (void)get8(r);
    m->group = get32(r);
    m->shard = get16(r);
    return m->role >= XFER_WIRE_ROLE_PRODUCER &&
                   m->role <= XFER_WIRE_ROLE_ADMIN && m->shard != 0xFFFFu
               ? 0
               : -1;
}

static int get_event(rd *r, xfer_wire_msg *m)
{
    m->kind = get8(r);
    (void)get8(r);
    m->shard = get16(r);
    m->attempt = get32(r);
    m->id = get64(r);
    m->resv_id = get64(r);
    m->len = get32(r);
    return m->kind < XFER_SHARD_EV_COUNT_ ? 0 : -1;
}

static int get_write(rd *r, const xfer_wire_hdr *h, xfer_wire_msg *m)
{
    get_op(r, m);
    m->off = get64(r);
    uint64_t data = (uint64_t)h->len - XFER_WIRE_HDR - XFER_WIRE_WRITE_FIXED;
    if (m->len != data || m->off > UINT64_MAX - m->len)
        return -1;
    return 0;
}

static int get_error(rd *r, xfer_wire_msg *m)
{
    m->code = (int32_t)get32(r);
    m->req_type = get8(r);
    (void)get8(r);
    m->shard = get16(r);
    m->id = get64(r);
    m->attempt = get32(r);
    return m->code < 0 ? 0 : -1;
}

/* Dispatch on the type; returns 0 or -1 for a field out of range. */
static int get_body(rd *r, const xfer_wire_hdr *h, xfer_wire_msg *m)
{
    switch ((xfer_wire_type)h->type) {
    case XFER_WIRE_T_HELLO:
        return get_hello(r, m, false);
    case XFER_WIRE_T_HELLO_ACK:
        return get_hello(r, m, true);
    case XFER_WIRE_T_RESERVE:
        m->id = get64(r);
        m->attempt = get32(r);
        m->len = get32(r);
        return 0;
    case XFER_WIRE_T_RESERVE_OK:
        get_op(r, m);
        m->addr = get64(r);
        m->rkey = get32(r);
        return 0;
    case XFER_WIRE_T_WRITE:
        return get_write(r, h, m);
    case XFER_WIRE_T_TAKE_OK:
        get_op(r, m);
        m->addr = get64(r);
        return 0;
    case XFER_WIRE_T_WRITE_ACK:
    case XFER_WIRE_T_COMMIT:
    case XFER_WIRE_T_COMMIT_ACK:
    case XFER_WIRE_T_CANCEL:
    case XFER_WIRE_T_CANCEL_ACK:
    case XFER_WIRE_T_TAKE:
    case XFER_WIRE_T_RELEASE:
    case XFER_WIRE_T_RELEASE_ACK:
        get_op(r, m);
        return 0;
    case XFER_WIRE_T_EVENT:
        return get_event(r, m);
    case XFER_WIRE_T_SUBSCRIBE:
    case XFER_WIRE_T_SUBSCRIBE_ACK:
        return 0;
    case XFER_WIRE_T_STATUS:
        m->shard = get16(r);
        return 0;
    case XFER_WIRE_T_STATUS_OK:
        get_status(r, &m->st);
        return 0;
    case XFER_WIRE_T_ERROR:
        return get_error(r, m);
    case XFER_WIRE_T_INVALID:
    case XFER_WIRE_T_COUNT_:
        break;
    }
    return -1;
}

int xfer_wire_decode_body(const xfer_wire_hdr *h, const void *body, size_t n,
                          xfer_wire_msg *m, xfer_wire_reason *reason)
{
    size_t need = xfer_wire_body_size(h->type);
    if (need == 0)
        return refuse(reason, XFER_WIRE_R_BAD_TYPE);
    if (n < need || h->len < XFER_WIRE_HDR + need)
        return refuse(reason, XFER_WIRE_R_BAD_LENGTH);
    xfer_wire_msg tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.type = h->type;
    rd r = {body};
    if (get_body(&r, h, &tmp) != 0)
        return refuse(reason, XFER_WIRE_R_BAD_FIELD);
    *m = tmp;
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

static void put_op(wr *w, const xfer_wire_msg *m)
{
    put64(w, m->id);
    put32(w, m->attempt);
    put32(w, m->len);
    put64(w, m->resv_id);
}

static void put_status(wr *w, const xfer_wire_status *s)
{
    put16(w, s->shard);
    put16(w, s->nshards);
    put32(w, s->conns);
    const uint64_t f[] = {s->pool_bytes, s->bytes_in_use, s->live,
                          s->tombstones, s->reserves, s->refused, s->writes,
                          s->commits, s->cancels, s->expiries, s->bad_frames,
                          s->errors_sent, s->events_sent, s->write_bytes};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        put64(w, f[i]);
}

static void put_hello(wr *w, const xfer_wire_msg *m, bool ack)
{
    put16(w, m->version ? m->version : XFER_WIRE_VERSION);
    if (ack) {
        put16(w, m->shard);
        put32(w, m->group);
        put64(w, m->pool_bytes);
        put64(w, m->lease_ttl_ns);
        put32(w, m->max_write);
        return;
    }
    put8(w, m->role);
    put8(w, 0);
    put32(w, m->group);
    put16(w, m->shard);
}

static void put_event(wr *w, const xfer_wire_msg *m)
{
    put8(w, m->kind);
    put8(w, 0);
    put16(w, m->shard);
    put32(w, m->attempt);
    put64(w, m->id);
    put64(w, m->resv_id);
    put32(w, m->len);
}

static void put_body(wr *w, const xfer_wire_msg *m)
{
    switch ((xfer_wire_type)m->type) {
    case XFER_WIRE_T_HELLO:
    case XFER_WIRE_T_HELLO_ACK:
        put_hello(w, m, m->type == XFER_WIRE_T_HELLO_ACK);
        break;
    case XFER_WIRE_T_RESERVE:
        put64(w, m->id);
        put32(w, m->attempt);
        put32(w, m->len);
        break;
    case XFER_WIRE_T_RESERVE_OK:
        put_op(w, m);
        put64(w, m->addr);
        put32(w, m->rkey);
        break;
    case XFER_WIRE_T_WRITE:
        put_op(w, m);
        put64(w, m->off);
        break;
    case XFER_WIRE_T_TAKE_OK:
        put_op(w, m);
        put64(w, m->addr);
        break;
    case XFER_WIRE_T_WRITE_ACK:
    case XFER_WIRE_T_COMMIT:
    case XFER_WIRE_T_COMMIT_ACK:
    case XFER_WIRE_T_CANCEL:
    case XFER_WIRE_T_CANCEL_ACK:
    case XFER_WIRE_T_TAKE:
    case XFER_WIRE_T_RELEASE:
    case XFER_WIRE_T_RELEASE_ACK:
        put_op(w, m);
        break;
    case XFER_WIRE_T_EVENT:
        put_event(w, m);
        break;
    case XFER_WIRE_T_STATUS:
        put16(w, m->shard);
        break;
    case XFER_WIRE_T_STATUS_OK:
        put_status(w, &m->st);
        break;
    case XFER_WIRE_T_ERROR:
        put32(w, (uint32_t)m->code);
        put8(w, m->req_type);
        put8(w, 0);
        put16(w, m->shard);
        put64(w, m->id);
        put32(w, m->attempt);
        break;
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
    size_t body = xfer_wire_body_size(m->type);
    size_t n = XFER_WIRE_HDR + body;
    if (body == 0 || cap < n)
        return 0;
    uint64_t len = n;
    if (m->type == XFER_WIRE_T_WRITE) {
        if (m->len > XFER_WIRE_MAX_DATA)
            return 0;
        len += m->len;
    }
    memset(buf, 0, n); /* reserved fields are 0 */
    wr w = {buf};
    put32(&w, XFER_WIRE_MAGIC);
    put8(&w, XFER_WIRE_VERSION);
    put8(&w, m->type);
    put16(&w, 0);
    put32(&w, (uint32_t)len);
    put32(&w, req);
    put_body(&w, m);
    return n;
}
