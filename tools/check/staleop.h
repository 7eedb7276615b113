/*
 * tools/check/staleop.h - the --stale-ops world option (staleop.c): an op
 * of another attempt of the same id reaches a one-sided shard whose
 * record waits for its invalidation (COMMIT_INVAL, CANCEL_INVAL,
 * EXPIRE_INVAL), and the shard must refuse it XFER_ERR_STALE, touching
 * nothing (I14); or a consumer's TAKE or RELEASE of the reservation
 * arrives there (a hostile or confused consumer: the record is not
 * READY), and the shard must refuse it, touching nothing.  Issue 30
 * item 2.
 */
#ifndef XFER_CHECK_STALEOP_H
#define XFER_CHECK_STALEOP_H

#include <stdbool.h>

#include "world.h"

/* The op kinds a stale op may be (the arg of MV_SOP: its index here,
 * then the transfer, then the shard): the producer's RESERVE, COMMIT,
 * CANCEL, WRITE and EAGER of another attempt, and a consumer's TAKE and
 * RELEASE of the record's reservation. */
#define CK_SOP_KINDS 7u
#define CK_SOP_ARG(kind, tr, k) \
    ((uint8_t)(((kind) * CK_MAX_T + (tr)) * CK_MAX_S + (k)))
#define CK_SOP_SHARD(arg) ((unsigned)(arg) % CK_MAX_S)

/* The MV_SOP moves enabled now, into out; how many. */
unsigned ck_staleop_moves(const ck_world *w, ck_move *out);
/* Deliver the stale op arg names; I14 when it was not refused STALE or
 * it changed the record. */
void ck_staleop_apply(ck_world *w, unsigned arg);
/* The op arg names, for a counterexample. */
void ck_staleop_describe(const ck_world *w, unsigned arg, char *b, size_t n);

#endif /* XFER_CHECK_STALEOP_H */
