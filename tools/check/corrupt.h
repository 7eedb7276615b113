/*
 * tools/check/corrupt.h - the corruption mode (--corrupt N, issue 27):
 * the world may make a landing write land wrong, the shards run with
 * integrity on (a commit is judged by xfer_shard_check first), and the
 * INTEG monitor asserts that no region a write corrupted is ever
 * available.  The hooks below are called from step.c, consumer.c and
 * monitor.c; everything of the mode is here.
 */
#ifndef XFER_CHECK_CORRUPT_H
#define XFER_CHECK_CORRUPT_H

#include <stdbool.h>
#include <stdint.h>

#include "world.h"

/* Whether message m may land corrupt now (a move MV_CORRUPT). */
bool ck_corrupt_may(const ck_world *w, const ck_msg *m);
/* MV_CORRUPT: landing write i lands wrong: its region's bytes differ
 * from the producer's from now on. */
void ck_corrupt_apply(ck_world *w, unsigned i);
/* A reserve or eager op of m succeeded: the new region is clean. */
void ck_corrupt_fresh(ck_world *w, const ck_msg *m);
/* The shard's integrity check before commit m: 0, or XFER_ERR_CORRUPT
 * (the commit must not be applied). */
int32_t ck_corrupt_commit(ck_world *w, const ck_msg *m);
/* INTEG: the tracker reports transfer t available. */
void ck_corrupt_available(ck_world *w, unsigned t);

#endif /* XFER_CHECK_CORRUPT_H */
