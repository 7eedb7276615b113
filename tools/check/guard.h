/*
 * tools/check/guard.h - moves that survive a machine's assertion (guard.c): a
 * SIGABRT inside a move or the liveness phase becomes an ILLEGAL violation
 * of the world instead of killing the checker.
 */
#ifndef XFER_CHECK_GUARD_H
#define XFER_CHECK_GUARD_H

#include <stdbool.h>

#include "world.h"

/* Install the SIGABRT handler (once per search; idempotent). */
void ck_guard_install(void);
/* ck_step_apply, with a machine assertion recorded as CK_ILLEGAL. */
void ck_guard_apply(ck_world *w, ck_move mv);
/* ck_step_liveness, likewise. */
bool ck_guard_liveness(ck_world *w);

#endif /* XFER_CHECK_GUARD_H */
