/*
 * transport/clock.c - the default clock of the engine and the loop
 * transport: CLOCK_MONOTONIC in nanoseconds.  The pure core never reads a
 * clock; only drivers do, through an injectable xfer_clock_fn.
 */
#include <time.h>

#include "engine_int.h"

uint64_t xfer_clock_monotonic(void *ud)
{
    (void)ud;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
