/*
 * tests/testutil.h - shared test helpers: the seed every randomised test
 * prints (and takes from XFER_SEED), an allocator that fails after N
 * successful allocations and counts what is still live, and a trace
 * recorder.
 */
#ifndef XFER_TESTUTIL_H
#define XFER_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include <check.h>

#include "xfer/fsm.h"
#include "xfer/trace.h"

/* Run a Check suite (forked unless CK_FORK=no) and return the exit status
 * for main(): 0 when every test passed. */
int tu_run(Suite *s);

/* The seed for this run: XFER_SEED if set, else `fallback`.  Printed. */
uint64_t tu_seed(const char *test_name, uint64_t fallback);
/* xorshift64* step. */
uint64_t tu_rand(uint64_t *state);
/* CRC32C from its definition (bit by bit, reflected 0x82F63B78), apart
 * from the library's: what tests pass as a caller's CRC, or expect. */
uint32_t tu_crc32c(const void *buf, size_t n);

/* A failing, counting allocator. */
typedef struct tu_alloc {
    long fail_after; /* -1: never fail; else fail the (fail_after+1)-th */
    int fail_once;   /* fail only that one call, not every later one */
    long calls, failures;
    long live;       /* allocations not yet freed */
} tu_alloc;
void tu_alloc_init(tu_alloc *ta, long fail_after);
xfer_allocator tu_allocator(tu_alloc *ta);

/* A growable in-memory trace. */
typedef struct tu_trace {
    xfer_trace_rec *recs;
    size_t n, cap;
} tu_trace;
xfer_trace_sink tu_trace_sink(tu_trace *t);
void tu_trace_free(tu_trace *t);
/* Count records of a machine with a given verdict (or any: verdict < 0). */
size_t tu_trace_count(const tu_trace *t, int machine, int verdict);

#endif /* XFER_TESTUTIL_H */
