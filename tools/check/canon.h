/*
 * tools/check/canon.h - the key of a state in the visited set (canon.c): a
 * 128-bit hash of its canonical encoding, with symmetry over shards and
 * (T >= 2) over transfers, from per-part hashes cached so that a move
 * re-hashes only what it touched.
 */
#ifndef XFER_CHECK_CANON_H
#define XFER_CHECK_CANON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "world.h"

/* The most bytes a machine writes about one shard in its canonical form
 * (fsm/save.h): the core 40 and the tracker 12 per live record. */
#define CK_PART_MAX (CK_MAX_T * 64)

/* Cached hashes of the parts of one saved state. */
typedef struct ck_parts {
    bool ok_core, ok_rd;           /* canonical forms given: symmetry usable */
    uint64_t sh[CK_MAX_S][2];      /* each shard blob */
    uint64_t core[2], rd[2];       /* core / tracker minus per-shard data */
    uint16_t ncps[CK_MAX_S], nrps[CK_MAX_S]; /* bytes of cps[k], rps[k] */
    uint8_t cps[CK_MAX_S][CK_PART_MAX]; /* the core's part for shard k */
    uint8_t rps[CK_MAX_S][CK_PART_MAX]; /* the tracker's part for shard k */
} ck_parts;

/* Recompute the parts of the machines in `which` (CK_M_* bits) of the
 * saved state blob (laid out as w->lay), which w's machines hold now. */
void ck_canon_parts(ck_parts *p, const ck_world *w, const uint8_t *blob,
                    unsigned which);
void ck_canon_parts_copy(ck_parts *dst, const ck_parts *src, unsigned S);
/* Compute every part of blob. */
void ck_canon_prime(ck_parts *p, const ck_world *w, const uint8_t *blob);
/* The key of the state blob (len bytes) whose parts are p. */
void ck_canon_key(const ck_world *w, const ck_parts *p, const uint8_t *blob,
                  size_t len, uint64_t key[2]);

#endif /* XFER_CHECK_CANON_H */
