/*
 * tools/check/canon.h - the key of a state in the visited set (canon.c): a
 * 128-bit hash of its canonical encoding, with symmetry over shards, from
 * per-part hashes cached so that a move re-hashes only what it touched.
 */
#ifndef XFER_CHECK_CANON_H
#define XFER_CHECK_CANON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "world.h"

/* Cached hashes of the parts of one saved state. */
typedef struct ck_parts {
    bool ok_core, ok_rd;           /* layouts understood: symmetry usable */
    uint64_t sh[CK_MAX_S][2];      /* each shard blob */
    uint64_t core[2], rd[2];       /* core / tracker minus per-shard data */
    uint16_t ncore, nrd;           /* per-shard bytes of core / tracker */
    uint8_t cps[CK_MAX_S][CK_MAX_T * 64];
    uint8_t rps[CK_MAX_S][CK_MAX_T * 16];
} ck_parts;

/* Recompute the parts of the machines in `which` (CK_M_* bits) from the
 * saved state blob (laid out as w->lay). */
void ck_canon_parts(ck_parts *p, const ck_world *w, const uint8_t *blob,
                    unsigned which);
void ck_canon_parts_copy(ck_parts *dst, const ck_parts *src, unsigned S);
/* Compute every part of blob. */
void ck_canon_prime(ck_parts *p, const ck_world *w, const uint8_t *blob);
/* The key of the state blob (len bytes) whose parts are p. */
void ck_canon_key(const ck_world *w, const ck_parts *p, const uint8_t *blob,
                  size_t len, uint64_t key[2]);

#endif /* XFER_CHECK_CANON_H */
