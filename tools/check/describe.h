/*
 * tools/check/describe.h - how a move of the environment and a machine step read
 * in a counterexample, one line each (describe.c).
 */
#ifndef XFER_CHECK_DESCRIBE_H
#define XFER_CHECK_DESCRIBE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "world.h"
#include "xfer/trace.h"

/* The move mv of w in words, into b (n bytes). */
void ck_describe_move(const ck_world *w, ck_move mv, char *b, size_t n);
/* One trace record from src (0 the core, 1..S shard src-1, S+1 the
 * readiness tracker) as an indented line of f. */
void ck_describe_rec(FILE *f, const xfer_trace_rec *r, uint8_t src);

#endif /* XFER_CHECK_DESCRIBE_H */
