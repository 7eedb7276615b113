/*
 * transport/engine_int.h - private pieces of the engine shared between
 * engine.c and mailbox.c, and the monotonic clock of clock.c.
 */
#ifndef XFER_ENGINE_INT_H
#define XFER_ENGINE_INT_H

#include <stdint.h>
#include <sys/time.h>

#include "xfer/xfer.h"

/* CLOCK_MONOTONIC in nanoseconds (clock.c).  `ud` unused. */
uint64_t xfer_clock_monotonic(void *ud);

/* A libevent delay from nanoseconds; a non-zero delay shorter than a
 * microsecond becomes one microsecond, so it is not mistaken for "now". */
static inline struct timeval xfer_timeval_of(uint64_t ns)
{
    struct timeval tv = {.tv_sec = (time_t)(ns / 1000000000ull),
                         .tv_usec = (suseconds_t)(ns % 1000000000ull / 1000)};
    if (ns && tv.tv_sec == 0 && tv.tv_usec == 0)
        tv.tv_usec = 1;
    return tv;
}

/* The thread-safe mailbox (mailbox.c): other threads post, the loop
 * drains.  A pipe wakes the loop. */
typedef struct xfer_mailbox xfer_mailbox;

typedef struct xfer_mail {
    uint8_t kind; /* 0 submit, 1 cancel */
    uint64_t id;
    xfer_transfer_desc desc; /* slices point into `slices` */
    xfer_slice *slices;
    xfer_complete_cb cb;
    void *ud;
} xfer_mail;

typedef void (*xfer_mailbox_fn)(void *ud, xfer_mail *m);

int xfer_mailbox_new(struct event_base *base, uint32_t cap,
                     xfer_mailbox_fn fn, void *ud, xfer_mailbox **out);
void xfer_mailbox_del(xfer_mailbox *mb);
/* Any thread.  Copies the desc and its slices.  Errors: XFER_ERR_BUSY,
 * XFER_ERR_NOMEM, XFER_ERR_INVALID_ARG. */
int xfer_mailbox_post(xfer_mailbox *mb, const xfer_mail *m);
uint64_t xfer_mailbox_posts(const xfer_mailbox *mb);

#endif /* XFER_ENGINE_INT_H */
