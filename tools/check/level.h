/*
 * tools/check/level.h - one level of the breadth-first search, stored
 * compactly: the states found at one depth, in the order found.
 *
 * A state is stored part by part (the plain data, each machine's blob, the
 * messages: the parts a ck_layout names), each part as its XOR with the
 * same part of the state stored before it, in 8-byte words, zero words
 * squeezed out.  States found one after the other are mostly siblings,
 * which differ in the few machines a move touched, so a level takes a
 * small fraction of its raw size; aligning part by part keeps a machine
 * whose blob changed length from spoiling the parts after it.
 */
#ifndef XFER_CHECK_LEVEL_H
#define XFER_CHECK_LEVEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "world.h"

#define CK_PARTS_MAX (CK_SLOTS + 2)

typedef struct ck_level {
    uint8_t *buf; /* the encoded states */
    size_t len, cap;
    size_t n;       /* states */
    uint32_t first; /* node id of the first; the others follow in order */
    uint8_t *prev;  /* the state added last, raw, and its parts */
    size_t poff[CK_PARTS_MAX], pn[CK_PARTS_MAX];
    unsigned pparts;
} ck_level;

/* Add the state `b` (len bytes, laid out as `lay` says) with node id `id`;
 * ids of one level must be consecutive.  `verify` decodes it back and
 * aborts unless it is the same bytes (--paranoid). */
void ck_level_add(ck_level *l, uint32_t id, const uint8_t *b, size_t len,
                  const ck_layout *lay, unsigned S, bool verify);
void ck_level_clear(ck_level *l);
void ck_level_free(ck_level *l);

/* Reading a level back in order.  The state returned stays valid until
 * the call after next (the one before it is the base of the next). */
typedef struct ck_lreader {
    const ck_level *l;
    size_t at;
    uint8_t *buf[2];
    size_t blen[2], off[2][CK_PARTS_MAX], pn[2][CK_PARTS_MAX];
    unsigned parts[2];
    unsigned last; /* buf[last] holds the state decoded last */
} ck_lreader;

int ck_lreader_init(ck_lreader *r);
void ck_lreader_start(ck_lreader *r, const ck_level *l);
const uint8_t *ck_lreader_next(ck_lreader *r, size_t *len);
void ck_lreader_free(ck_lreader *r);

#endif /* XFER_CHECK_LEVEL_H */
