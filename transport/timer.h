/*
 * transport/timer.h - the one deadline timer of xfer: a libevent timer that
 * follows a pure machine's next deadline (the core's, a group of shards',
 * a readiness tracker's), and the libevent delay of a span of nanoseconds.
 *
 * A driver calls xfer_timer_arm after every call into its machine with the
 * machine's next deadline; the timer is re-added only when that deadline
 * changed, removed at UINT64_MAX, and the clock is read only when the
 * timer is re-added (a clock with side effects, such as the loop
 * transport's clamp, is read exactly as often as before).  The callback
 * calls xfer_timer_fired first, so the next arm re-adds the timer even for
 * the deadline that just fired.
 *
 * Header only (static inline): the library's drivers include it, and so
 * do tools that drive a machine themselves and link only the shared
 * library (through wire_private_dep, which exports this folder).  Loop
 * thread only.
 */
#ifndef XFER_TRANSPORT_TIMER_H
#define XFER_TRANSPORT_TIMER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/time.h>

#include <event2/event.h>

#include "xfer/xfer.h"

/* A libevent delay from nanoseconds; a non-zero delay shorter than a
 * microsecond becomes one microsecond, so it is not mistaken for "now". */
static inline struct timeval xfer_timer_delay(uint64_t ns)
{
    struct timeval tv = {.tv_sec = (time_t)(ns / 1000000000ull),
                         .tv_usec = (suseconds_t)(ns % 1000000000ull / 1000)};
    if (ns && tv.tv_sec == 0 && tv.tv_usec == 0)
        tv.tv_usec = 1;
    return tv;
}

typedef struct xfer_timer {
    struct event *ev;  /* owned; NULL before init or after clear */
    uint64_t armed_at; /* the deadline it is added for; UINT64_MAX: none */
    bool stale;        /* fired (or never armed): the next arm re-adds */
} xfer_timer;

/* Make the timer's event on base; fn(fd, what, arg) runs when it fires.
 * Errors: XFER_ERR_IO (libevent could not make the event). */
static inline int xfer_timer_init(xfer_timer *t, struct event_base *base,
                                  event_callback_fn fn, void *arg)
{
    t->ev = evtimer_new(base, fn, arg);
    t->armed_at = UINT64_MAX;
    t->stale = true;
    return t->ev ? 0 : XFER_ERR_IO;
}

/* Free the event (a zeroed or cleared timer is fine). */
static inline void xfer_timer_clear(xfer_timer *t)
{
    if (t->ev)
        event_free(t->ev);
    t->ev = NULL;
}

/*
 * Follow `deadline_ns` (UINT64_MAX: none): remove the timer, or add it to
 * fire that far after clock(ud) (at once for a deadline already past),
 * unless it is already added for exactly that deadline.  A cleared timer
 * does nothing.
 */
static inline void xfer_timer_arm(xfer_timer *t, uint64_t deadline_ns,
                                  xfer_clock_fn clock, void *ud)
{
    if (!t->ev || (!t->stale && deadline_ns == t->armed_at))
        return;
    t->stale = false;
    t->armed_at = deadline_ns;
    if (deadline_ns == UINT64_MAX) {
        evtimer_del(t->ev);
        return;
    }
    uint64_t now = clock(ud);
    struct timeval tv =
        xfer_timer_delay(deadline_ns > now ? deadline_ns - now : 0);
    evtimer_add(t->ev, &tv);
}

/* The timer fired: the next arm adds it again whatever the deadline. */
static inline void xfer_timer_fired(xfer_timer *t)
{
    t->stale = true;
}

#endif /* XFER_TRANSPORT_TIMER_H */
