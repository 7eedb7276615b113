/*
 * tools/check/step.h - the moves of the environment (step.c): which are
 * enabled in a state, what each does to the world, which machines it
 * touches, and the liveness phase that ends a path.
 */
#ifndef XFER_CHECK_STEP_H
#define XFER_CHECK_STEP_H

#include <stdbool.h>

#include "world.h"

/* The moves enabled in w, in their canonical order, into out (at least
 * CK_MAX_MOVES); how many. */
unsigned ck_step_moves(const ck_world *w, ck_move *out);
/* Apply mv, then sort the messages and run the global monitors. */
void ck_step_apply(ck_world *w, ck_move mv);
/* The machines (CK_M_* bits) mv may change. */
unsigned ck_step_touches(const ck_world *w, ck_move mv);
/* The liveness phase: no more faults; deliver everything, fire every
 * timer; true when every invariant still holds. */
bool ck_step_liveness(ck_world *w);

#endif /* XFER_CHECK_STEP_H */
