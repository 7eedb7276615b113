/*
 * transport/clock.c - the one monotonic clock of xfer (xfer/xfer.h): the
 * default of the engine, the loop transport and the control socket, and
 * what the tools time themselves with.  CLOCK_MONOTONIC in nanoseconds.
 * The pure core never reads a clock; only drivers do, through an
 * injectable xfer_clock_fn.
 */
#include <time.h>

#include "xfer/xfer.h"

uint64_t xfer_clock_monotonic(void *ud)
{
    (void)ud;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
