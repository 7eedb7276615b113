/*
 * tools/check/level.c - a BFS level stored part by part as XOR deltas (see
 * level.h).
 *
 * One state: varint number of parts, then per part a varint length in
 * bytes and segments (varint zero words, varint literal words, the literal
 * words) until the part's words are covered.  A word of part i is XORed
 * with word i of the same part of the state before (zero past its end, and
 * for the first state of a level).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "level.h"

static inline uint64_t word(const uint8_t *b, size_t n, size_t k)
{
    uint64_t v = 0;
    size_t at = 8 * k;
    if (at + 8 <= n)
        memcpy(&v, b + at, 8);
    else if (at < n)
        memcpy(&v, b + at, n - at);
    return v;
}

static void put_var(ck_level *l, size_t v)
{
    for (; v >= 0x80; v >>= 7)
        l->buf[l->len++] = (uint8_t)(v | 0x80);
    l->buf[l->len++] = (uint8_t)v;
}

static size_t get_var(const uint8_t *buf, size_t *at)
{
    size_t v = 0;
    for (unsigned sh = 0;; sh += 7) {
        uint8_t c = buf[(*at)++];
        v |= (size_t)(c & 0x7f) << sh;
        if (!(c & 0x80))
            return v;
    }
}

/* The parts of a saved world: the boundaries are where each machine's
 * blob starts, where the last one ends, and the end. */
static unsigned parts_of(const ck_layout *lay, unsigned S, size_t len,
                         size_t off[], size_t n[])
{
    size_t cut[CK_PARTS_MAX + 1];
    unsigned c = 0;
    cut[c++] = 0;
    cut[c++] = lay->off[CK_SLOT_CORE];
    for (unsigned k = 0; k < S; k++)
        cut[c++] = lay->off[CK_SLOT_SH(k)];
    cut[c++] = lay->off[CK_SLOT_RD];
    cut[c++] = lay->off[CK_SLOT_RD] + lay->len[CK_SLOT_RD];
    cut[c++] = len;
    for (unsigned i = 0; i + 1 < c; i++) {
        if (cut[i + 1] < cut[i] || cut[i + 1] > len)
            abort(); /* a layout that does not describe this state */
        off[i] = cut[i];
        n[i] = cut[i + 1] - cut[i];
    }
    return c - 1;
}

/* The XOR of part c (n bytes) with part p (pn bytes), in words, zero
 * padded; the number of words. */
static size_t xor_words(const uint8_t *c, size_t n, const uint8_t *p,
                        size_t pn, uint64_t *x)
{
    size_t nw = (n + 7) / 8, full = n / 8, both = (n < pn ? n : pn) / 8;
    size_t k = 0;
    for (; k < both; k++) {
        uint64_t u, v;
        memcpy(&u, c + 8 * k, 8);
        memcpy(&v, p + 8 * k, 8);
        x[k] = u ^ v;
    }
    for (; k < full; k++) {
        memcpy(&x[k], c + 8 * k, 8);
        x[k] ^= word(p, pn, k);
    }
    if (k < nw)
        x[k] = word(c, n, k) ^ word(p, pn, k);
    return nw;
}

static void put_part(ck_level *l, const uint8_t *c, size_t n,
                     const uint8_t *p, size_t pn)
{
    static _Thread_local uint64_t x[(CK_SAVE_MAX + 7) / 8];
    size_t nw = xor_words(c, n, p, pn, x);
    put_var(l, n);
    for (size_t i = 0; i < nw;) {
        size_t s = i, e;
        while (s < nw && x[s] == 0)
            s++;
        for (e = s; e < nw && x[e] != 0; e++)
            ;
        put_var(l, s - i);
        put_var(l, e - s);
        memcpy(l->buf + l->len, x + s, 8 * (e - s));
        l->len += 8 * (e - s);
        i = e;
    }
}

/* Decode one part against p (pn bytes) into out; its length. */
static size_t get_part(const uint8_t *buf, size_t *at, const uint8_t *p,
                       size_t pn, uint8_t *out, size_t room)
{
    size_t n = get_var(buf, at), nw = (n + 7) / 8;
    if (n > room)
        abort();
    /* start from the base: its bytes, zeros past its end */
    size_t keep = n < pn ? n : pn;
    if (keep)
        memcpy(out, p, keep);
    memset(out + keep, 0, n - keep);
    for (size_t i = 0; i < nw;) {
        size_t z = get_var(buf, at), lit = get_var(buf, at);
        if (i + z + lit > nw)
            abort();
        for (i += z; lit > 0; lit--, i++) {
            size_t b = 8 * i, m = b + 8 <= n ? 8 : n - b;
            uint64_t v, x;
            memcpy(&x, buf + *at, 8);
            *at += 8;
            v = 0;
            memcpy(&v, out + b, m);
            v ^= x;
            memcpy(out + b, &v, m);
        }
    }
    return n;
}

/* Decode the state at buf + *at against prev into out. */
static size_t get_state(const uint8_t *buf, size_t *at, const uint8_t *prev,
                        const size_t *poff, const size_t *pn, unsigned pparts,
                        uint8_t *out, size_t *off, size_t *n,
                        unsigned *parts)
{
    unsigned np = (unsigned)get_var(buf, at);
    size_t len = 0;
    if (np > CK_PARTS_MAX)
        abort();
    for (unsigned i = 0; i < np; i++) {
        const uint8_t *p = i < pparts ? prev + poff[i] : NULL;
        off[i] = len;
        n[i] = get_part(buf, at, p, i < pparts ? pn[i] : 0, out + len,
                        CK_SAVE_MAX - len);
        len += n[i];
    }
    *parts = np;
    return len;
}

void ck_level_add(ck_level *l, uint32_t id, const uint8_t *b, size_t len,
                  const ck_layout *lay, unsigned S, bool verify)
{
    size_t off[CK_PARTS_MAX], n[CK_PARTS_MAX];
    unsigned np = parts_of(lay, S, len, off, n);
    /* worst case: per word a segment of two varint bytes and the word;
     * per part a length and a partial word */
    size_t need = l->len + 10 * (len / 8) + 24 * (np + 1);
    if (need > l->cap) {
        l->cap = 2 * need + 65536;
        l->buf = realloc(l->buf, l->cap);
    }
    if (!l->prev)
        l->prev = malloc(CK_SAVE_MAX);
    if (!l->buf || !l->prev || len > CK_SAVE_MAX)
        abort();
    if (l->n == 0) {
        l->first = id;
        l->pparts = 0;
    }
    size_t start = l->len;
    put_var(l, np);
    for (unsigned i = 0; i < np; i++) {
        const uint8_t *p = i < l->pparts ? l->prev + l->poff[i] : NULL;
        put_part(l, b + off[i], n[i], p, i < l->pparts ? l->pn[i] : 0);
    }
    if (verify) {
        static _Thread_local uint8_t back[CK_SAVE_MAX];
        size_t boff[CK_PARTS_MAX], bn[CK_PARTS_MAX];
        unsigned bp;
        size_t blen = get_state(l->buf, &start, l->prev, l->poff, l->pn,
                                l->pparts, back, boff, bn, &bp);
        if (blen != len || start != l->len || memcmp(back, b, len) != 0) {
            fprintf(stderr, "xfer-check: --paranoid: a queued state did "
                    "not decode back to itself\n");
            abort();
        }
    }
    memcpy(l->prev, b, len);
    memcpy(l->poff, off, sizeof off);
    memcpy(l->pn, n, sizeof n);
    l->pparts = np;
    l->n++;
}

void ck_level_clear(ck_level *l)
{
    l->len = l->n = 0;
    l->pparts = 0;
}

void ck_level_free(ck_level *l)
{
    free(l->buf);
    free(l->prev);
    memset(l, 0, sizeof *l);
}

int ck_lreader_init(ck_lreader *r)
{
    memset(r, 0, sizeof *r);
    r->buf[0] = malloc(CK_SAVE_MAX);
    r->buf[1] = malloc(CK_SAVE_MAX);
    return r->buf[0] && r->buf[1] ? 0 : -1;
}

void ck_lreader_start(ck_lreader *r, const ck_level *l)
{
    r->l = l;
    r->at = 0;
    r->parts[0] = r->parts[1] = 0;
    r->last = 0;
}

const uint8_t *ck_lreader_next(ck_lreader *r, size_t *len)
{
    unsigned p = r->last, o = p ^ 1u;
    r->blen[o] = get_state(r->l->buf, &r->at, r->buf[p], r->off[p], r->pn[p],
                           r->parts[p], r->buf[o], r->off[o], r->pn[o],
                           &r->parts[o]);
    r->last = o;
    *len = r->blen[o];
    return r->buf[o];
}

void ck_lreader_free(ck_lreader *r)
{
    free(r->buf[0]);
    free(r->buf[1]);
    memset(r, 0, sizeof *r);
}
