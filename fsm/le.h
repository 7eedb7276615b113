/*
 * fsm/le.h - the one little-endian codec of xfer: fixed-width integers to
 * and from bytes, either at a pointer (fixed layouts such as the trace
 * file's header and records) or through a bounded cursor (the machines'
 * saves, wire frames).
 *
 * Every integer is assembled byte by byte, so the bytes are the same on
 * every host whatever its endianness or alignment.  Header only (static
 * inline, libc only): fsm/ uses it, and transport/ and the tools reach it
 * through fsm_private_dep without linking anything.
 *
 * What must stay true:
 *  - an encoder never stores outside [buf, buf + len): a write that does
 *    not fit is counted (`at` still grows) and dropped, so one pass both
 *    encodes into a buffer that is large enough and measures the size a
 *    buffer that was not needs (xfer_le_enc_fits, `at`);
 *  - a decoder never reads outside [buf, buf + len): a read that does not
 *    fit returns 0 and marks the decoder bad, and every later read does the
 *    same, so a caller checks once, at the end.
 */
#ifndef XFER_FSM_LE_H
#define XFER_FSM_LE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* At a pointer (the caller knows the bytes are there)                     */
/* ---------------------------------------------------------------------- */

static inline void xfer_le_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void xfer_le_put32(uint8_t *p, uint32_t v)
{
    xfer_le_put16(p, (uint16_t)v);
    xfer_le_put16(p + 2, (uint16_t)(v >> 16));
}

static inline void xfer_le_put64(uint8_t *p, uint64_t v)
{
    xfer_le_put32(p, (uint32_t)v);
    xfer_le_put32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t xfer_le_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}

static inline uint32_t xfer_le_get32(const uint8_t *p)
{
    return (uint32_t)xfer_le_get16(p) | (uint32_t)xfer_le_get16(p + 2) << 16;
}

static inline uint64_t xfer_le_get64(const uint8_t *p)
{
    return (uint64_t)xfer_le_get32(p) | (uint64_t)xfer_le_get32(p + 4) << 32;
}

/* ---------------------------------------------------------------------- */
/* The bounded encoder                                                     */
/* ---------------------------------------------------------------------- */

typedef struct xfer_le_enc {
    uint8_t *p; /* borrowed; NULL when len is 0 */
    size_t len; /* room at p */
    size_t at;  /* bytes written so far, counting those that did not fit */
} xfer_le_enc;

/* An encoder writing into buf (len bytes, borrowed; NULL with len 0 only
 * measures). */
static inline xfer_le_enc xfer_le_enc_start(uint8_t *buf, size_t len)
{
    xfer_le_enc e = {buf, buf ? len : 0, 0};
    return e;
}

/* Where the next n bytes go, or NULL when they do not fit (they are
 * counted either way). */
static inline uint8_t *xfer_le_enc_take(xfer_le_enc *e, size_t n)
{
    uint8_t *p = e->at <= e->len && e->len - e->at >= n ? e->p + e->at : NULL;
    e->at += n;
    return p;
}

static inline void xfer_le_enc_u8(xfer_le_enc *e, uint8_t v)
{
    uint8_t *p = xfer_le_enc_take(e, 1);
    if (p)
        *p = v;
}

static inline void xfer_le_enc_u16(xfer_le_enc *e, uint16_t v)
{
    uint8_t *p = xfer_le_enc_take(e, 2);
    if (p)
        xfer_le_put16(p, v);
}

static inline void xfer_le_enc_u32(xfer_le_enc *e, uint32_t v)
{
    uint8_t *p = xfer_le_enc_take(e, 4);
    if (p)
        xfer_le_put32(p, v);
}

static inline void xfer_le_enc_u64(xfer_le_enc *e, uint64_t v)
{
    uint8_t *p = xfer_le_enc_take(e, 8);
    if (p)
        xfer_le_put64(p, v);
}

/* n raw bytes from src (borrowed). */
static inline void xfer_le_enc_bytes(xfer_le_enc *e, const void *src,
                                     size_t n)
{
    uint8_t *p = xfer_le_enc_take(e, n);
    if (p && n)
        memcpy(p, src, n);
}

/* The next n bytes of e, taken now, as an encoder of their own: a group
 * of fixed-size fields written with one bounds check (the span's own
 * checks fold away, since the compiler keeps a local span in registers).
 * A span that does not fit stores nothing; e counts it either way. */
static inline xfer_le_enc xfer_le_enc_span(xfer_le_enc *e, size_t n)
{
    uint8_t *p = xfer_le_enc_take(e, n);
    return xfer_le_enc_start(p, p ? n : 0);
}

/* True when everything written so far fitted. */
static inline bool xfer_le_enc_fits(const xfer_le_enc *e)
{
    return e->at <= e->len;
}

/* ---------------------------------------------------------------------- */
/* The bounded decoder                                                     */
/* ---------------------------------------------------------------------- */

typedef struct xfer_le_dec {
    const uint8_t *p; /* borrowed */
    size_t len, at;
    bool bad;         /* a read went past the end */
} xfer_le_dec;

static inline xfer_le_dec xfer_le_dec_start(const uint8_t *buf, size_t len)
{
    xfer_le_dec d = {buf, buf ? len : 0, 0, false};
    return d;
}

/* The next n bytes, or NULL (and the decoder bad) when they are not all
 * there. */
static inline const uint8_t *xfer_le_dec_take(xfer_le_dec *d, size_t n)
{
    if (d->bad || d->len - d->at < n) {
        d->bad = true;
        return NULL;
    }
    const uint8_t *p = d->p + d->at;
    d->at += n;
    return p;
}

static inline uint8_t xfer_le_dec_u8(xfer_le_dec *d)
{
    const uint8_t *p = xfer_le_dec_take(d, 1);
    return p ? *p : 0;
}

static inline uint16_t xfer_le_dec_u16(xfer_le_dec *d)
{
    const uint8_t *p = xfer_le_dec_take(d, 2);
    return p ? xfer_le_get16(p) : 0;
}

static inline uint32_t xfer_le_dec_u32(xfer_le_dec *d)
{
    const uint8_t *p = xfer_le_dec_take(d, 4);
    return p ? xfer_le_get32(p) : 0;
}

static inline uint64_t xfer_le_dec_u64(xfer_le_dec *d)
{
    const uint8_t *p = xfer_le_dec_take(d, 8);
    return p ? xfer_le_get64(p) : 0;
}

/* The next n bytes of d as a decoder of their own (see xfer_le_enc_span);
 * when they are not all there, d is bad and the span reads zeros. */
static inline xfer_le_dec xfer_le_dec_span(xfer_le_dec *d, size_t n)
{
    const uint8_t *p = xfer_le_dec_take(d, n);
    return xfer_le_dec_start(p, p ? n : 0);
}

static inline void xfer_le_dec_skip(xfer_le_dec *d, size_t n)
{
    (void)xfer_le_dec_take(d, n);
}

/* No read so far went past the end. */
static inline bool xfer_le_dec_ok(const xfer_le_dec *d)
{
    return !d->bad;
}

/* Every byte was read, and nothing past the end. */
static inline bool xfer_le_dec_done(const xfer_le_dec *d)
{
    return !d->bad && d->at == d->len;
}

#endif /* XFER_FSM_LE_H */
