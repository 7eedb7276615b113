/*
 * fsm/canon.h - the writer behind both a machine's save and its canonical
 * form (fsm/save.h), so that the two can never disagree about which
 * fields a state has: a machine's save code walks its state once, through
 * these calls, and the writer either puts everything into one save or
 * splits it into the part that names no shard and one part per shard.
 *
 * A field is written as one of:
 *  - plain data (xfer_canon_rest, any xfer_le_enc_* call): the same in both;
 *  - data about shard k (xfer_canon_shard(o, k)): in a save, in place; in
 *    a canonical form, into shard k's part;
 *  - a mask with one bit per shard (xfer_canon_mask): in a save the u64; in
 *    a canonical form the u64 without the group's bits, and bit k as a u8
 *    in shard k's part;
 *  - a shard reference (xfer_canon_ref): in a save the u16; in a canonical
 *    form XFER_CANON_REF_SHARD for a shard of the group (else the value),
 *    and in every shard's part a u8 saying whether it is that shard;
 *  - a transfer id (xfer_canon_id): in a save the id; in a canonical form
 *    that renames ids (xfer_canon.ids), the renamed id.
 * Only the save files of fsm/ include this; everything else uses save.h.
 */
#ifndef XFER_FSM_CANON_H
#define XFER_FSM_CANON_H

#include <stdint.h>

#include "le.h"
#include "save.h"
#include "tomb.h"

/* What a canonical form writes for a reference to a shard of the group. */
#define XFER_CANON_REF_SHARD UINT16_C(0xFFFE)

typedef struct xfer_canon_out {
    xfer_le_enc main;                  /* the save, or part 0 */
    xfer_le_enc part[XFER_MAX_SHARDS]; /* canonical form: shard k's part */
    uint16_t nshards;                  /* 0: a save */
    const xfer_canon_ids *ids;         /* transfer ids renamed; NULL: none */
} xfer_canon_out;

/* Write a save into buf (len bytes). */
static inline void xfer_canon_begin_save(xfer_canon_out *o, uint8_t *buf,
                                         size_t len)
{
    o->main = xfer_le_enc_start(buf, len);
    o->nshards = 0;
    o->ids = NULL;
}

/* Write the canonical form of a group of nshards (1..XFER_MAX_SHARDS)
 * shards into c. */
static inline void xfer_canon_begin(xfer_canon_out *o, xfer_canon *c,
                                    uint16_t nshards)
{
    o->main = xfer_le_enc_start(c->buf, c->buf ? c->stride : 0);
    for (uint16_t k = 0; k < nshards; k++)
        o->part[k] = xfer_le_enc_start(
            c->buf ? c->buf + (size_t)(k + 1) * c->stride : NULL,
            c->buf ? c->stride : 0);
    o->nshards = nshards;
    o->ids = c->ids;
}

/* The end of a canonical form: c->len[] set; 0 or XFER_ERR_TOO_SMALL. */
static inline int xfer_canon_end(const xfer_canon_out *o, xfer_canon *c)
{
    int rc = xfer_le_enc_fits(&o->main) ? 0 : XFER_ERR_TOO_SMALL;
    c->len[0] = o->main.at;
    for (uint16_t k = 0; k < o->nshards; k++) {
        c->len[k + 1] = o->part[k].at;
        if (!xfer_le_enc_fits(&o->part[k]))
            rc = XFER_ERR_TOO_SMALL;
    }
    return rc;
}

/* A transfer id as the form writes it (renamed, in a canonical form that
 * renames ids). */
static inline uint64_t xfer_canon_id(const xfer_canon_out *o, uint64_t id)
{
    return xfer_canon_ids_map(o->ids, id);
}

static inline uint64_t xfer_canon_tomb_id_(const void *ids, uint64_t id)
{
    return xfer_canon_ids_map(ids, id);
}

/* A tombstone table (xfer_tomb_save) into e, its ids through xfer_canon_id. */
static inline void xfer_canon_tombs(const xfer_canon_out *o,
                                    const xfer_tomb *t, xfer_le_enc *e)
{
    if (o->ids)
        xfer_tomb_save_map(t, e, xfer_canon_tomb_id_, o->ids);
    else
        xfer_tomb_save(t, e);
}

/* Where data that names no shard goes. */
static inline xfer_le_enc *xfer_canon_rest(xfer_canon_out *o)
{
    return &o->main;
}

/* Where data about shard k (k < nshards of a canonical form) goes. */
static inline xfer_le_enc *xfer_canon_shard(xfer_canon_out *o, uint16_t k)
{
    return o->nshards ? &o->part[k] : &o->main;
}

/* A mask with bit k for shard k; what names no shard goes to `rest`
 * (xfer_canon_rest(o), or a span of it the caller took). */
static inline void xfer_canon_mask(xfer_canon_out *o, xfer_le_enc *rest,
                                   uint64_t m)
{
    uint16_t n = o->nshards;
    if (n == 0) {
        xfer_le_enc_u64(rest, m);
        return;
    }
    uint64_t group = n >= 64 ? UINT64_MAX : (UINT64_C(1) << n) - 1u;
    xfer_le_enc_u64(rest, m & ~group);
    for (uint16_t k = 0; k < n; k++)
        xfer_le_enc_u8(&o->part[k], (uint8_t)(m >> k & 1u));
}

/* A reference to a shard (or a value such as XFER_SHARD_NONE); the rest
 * as for xfer_canon_mask. */
static inline void xfer_canon_ref(xfer_canon_out *o, xfer_le_enc *rest,
                                  uint16_t ref)
{
    uint16_t n = o->nshards;
    if (n == 0) {
        xfer_le_enc_u16(rest, ref);
        return;
    }
    xfer_le_enc_u16(rest, ref < n ? XFER_CANON_REF_SHARD : ref);
    for (uint16_t k = 0; k < n; k++)
        xfer_le_enc_u8(&o->part[k], ref == k);
}

#endif /* XFER_FSM_CANON_H */
