/*
 * tools/check/path.h - a path through the world (path.c): the move index
 * chosen in each state, and running one from the initial state.
 */
#ifndef XFER_CHECK_PATH_H
#define XFER_CHECK_PATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "world.h"

/* The move index chosen in each state, then (liveness) whether the
 * liveness phase ran at its end. */
typedef struct ck_path {
    uint16_t *c;
    size_t n, cap;
    bool liveness;
} ck_path;

void ck_path_push(ck_path *p, uint16_t c);
void ck_path_free(ck_path *p);
/* Run p on a fresh world; returns the violated invariant or -1, with *v
 * and the I10 output hash.  With a tracer, every step is described to it.
 * modulo: an index past the moves of a state wraps (shrinking) instead of
 * ending the path. */
int ck_path_run(const ck_config *cfg, const ck_path *p, const ck_tracer *tr,
                ck_violation *v, uint64_t *out_hash, bool modulo);

#endif /* XFER_CHECK_PATH_H */
