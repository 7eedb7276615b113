/*
 * python/ext/core.c - the C side of one xfer.Engine: the engine, the
 * thread its libevent loop runs on, and every post into its mailbox.
 * xfer.Server and xfer.Consumer run on a core of their own, whose engine
 * has no group: its mailbox (the library's one public way into a loop
 * from another thread) carries their calls, and the core hosts their C
 * object, deleted after the engine once the loop stopped.
 *
 * What must stay true:
 *  - No call holds the GIL while it waits: every wait here (for a call to
 *    run on the loop, for a blocking submit, for shutdown, for the join)
 *    releases it first.  The loop thread never takes the GIL here.
 *  - Every post into the mailbox happens under `lock` with the state
 *    checked, and the shutdown is posted under the same lock once the
 *    state says CLOSING.  So every submit the binding posted reaches the
 *    loop before the shutdown does (the mailbox is FIFO), and is accepted
 *    and then ended by the shutdown, or refused with a completion: none is
 *    left in the mailbox when the loop stops, and none is lost (I1).
 *  - The loop stops only from the shutdown callback, after the engine
 *    delivered every completion and unregistered every pool (I9), so once
 *    the state is STOPPED no write reads a staging buffer any more (I3)
 *    and the buffers may be let go.
 *  - A blocking waiter that leaves early (a signal) marks its ticket
 *    abandoned under the lock; whichever side comes second frees it.
 */
#include "pyx.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

/* The engine, then its transports (the engine detached them), then the
 * base, after one last turn that lets libevent finish closing TCP
 * connections and drop its references to staging bytes. */
static void free_c_side(pyx_core *c)
{
    xfer_engine_del(c->e);
    c->e = NULL;
    for (uint32_t g = 0; g < c->ngroups; g++)
        if (c->tps[g].del)
            c->tps[g].del(c->tps[g].obj);
    memset(c->tps, 0, sizeof c->tps);
    if (c->hosted.del)
        c->hosted.del(c->hosted.obj);
    c->hosted = (pyx_tp_slot){0};
    if (c->base) {
        event_base_loop(c->base, EVLOOP_NONBLOCK);
        event_base_free(c->base);
        c->base = NULL;
    }
}

int pyx_core_new(const pyx_engine_opts *o, pyx_core **out)
{
    pyx_core *c = calloc(1, sizeof *c);
    if (!c)
        return XFER_ERR_NOMEM;
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return XFER_ERR_NOMEM;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int prc = pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (prc != 0) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return XFER_ERR_NOMEM;
    }
    c->base = event_base_new();
    xfer_engine_config cfg;
    pyx_config_engine(o, c->base, &cfg);
    int rc = c->base ? xfer_engine_new(&cfg, &c->e) : XFER_ERR_IO;
    if (rc) {
        if (c->base)
            event_base_free(c->base);
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return rc;
    }
    c->refs = 1;
    c->state = PYX_OPEN;
    *out = c;
    return 0;
}

void pyx_core_host(pyx_core *c, void *obj, void (*del)(void *obj))
{
    c->hosted = (pyx_tp_slot){.obj = obj, .del = del};
}

void pyx_core_ref(pyx_core *c)
{
    c->refs++;
}

void pyx_core_unref(pyx_core *c)
{
    if (!c || --c->refs)
        return;
    /* The Engine frees the engine before it lets go of the core; a core
     * whose engine never started its thread is freed here. */
    if (c->state != PYX_FREED)
        free_c_side(c);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int pyx_core_state(pyx_core *c)
{
    pthread_mutex_lock(&c->lock);
    int s = c->state;
    pthread_mutex_unlock(&c->lock);
    return s;
}

/* ---------------------------------------------------------------------- */
/* The loop thread                                                         */
/* ---------------------------------------------------------------------- */

/* Shutdown completed (loop): every completion was delivered and every
 * pool unregistered.  Keep the last stats and leave the loop. */
static void on_shutdown_done(void *ud)
{
    pyx_core *c = ud;
    xfer_engine_stats_get(c->e, &c->final);
    event_base_loopbreak(c->base);
}

static void start_shutdown(void *ud)
{
    pyx_core *c = ud;
    xfer_engine_shutdown(c->e, on_shutdown_done, c);
}

/* In the interpreter's main thread, soon after a loop stopped: let go of
 * what engines dropped while their loop ran still hold (their pools and
 * buffers), without waiting for the next Engine to be made or dropped. */
static int reap_pending(void *unused)
{
    (void)unused;
    if (pyx_engine_reap(false) < 0)
        PyErr_Clear();
    return 0;
}

static void *loop_main(void *arg)
{
    pyx_core *c = arg;
    event_base_dispatch(c->base);
    pthread_mutex_lock(&c->lock);
    c->state = PYX_STOPPED;
    pyx_ticket *closers = c->closers;
    c->closers = NULL;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    while (closers) {
        pyx_ticket *t = closers;
        closers = t->next;
        pyx_channel_push(t->chan, t);
    }
    /* Needs neither the GIL nor a thread state; fails (harmlessly) while
     * the interpreter finalizes, which reaps with a wait of its own. */
    Py_AddPendingCall(reap_pending, NULL);
    return NULL;
}

/* Signals go to the Python threads, never to the loop thread, so a
 * KeyboardInterrupt interrupts what the user is doing. */
int pyx_core_start(pyx_core *c)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->thread, NULL, loop_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return XFER_ERR_IO;
    c->thread_started = true;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Posting and calling                                                     */
/* ---------------------------------------------------------------------- */

typedef struct call_rec {
    pyx_core *core;
    pyx_loop_fn fn;
    void *arg;
    int rc;
    bool done;
} call_rec;

static void run_call(void *ud)
{
    call_rec *r = ud;
    int rc = r->fn(r->core, r->arg);
    pthread_mutex_lock(&r->core->lock);
    r->rc = rc;
    r->done = true;
    pthread_cond_broadcast(&r->core->cond);
    pthread_mutex_unlock(&r->core->lock);
}

/* The record lives on this stack: the wait below ends only once the loop
 * ran it, and the loop runs every call posted before the shutdown. */
int pyx_core_call(pyx_core *c, pyx_loop_fn fn, void *arg)
{
    call_rec r = {.core = c, .fn = fn, .arg = arg};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->lock);
    rc = c->state == PYX_OPEN ? xfer_engine_post_call(c->e, run_call, &r)
                              : XFER_ERR_SHUTDOWN;
    while (rc == 0 && !r.done)
        pthread_cond_wait(&c->cond, &c->lock);
    if (rc == 0)
        rc = r.rc;
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS
    return rc;
}

/* A full mailbox empties as the loop drains it: wait a millisecond for
 * room (lock held on entry and on return). */
static void wait_for_room(pyx_core *c)
{
    pthread_mutex_unlock(&c->lock);
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
    pthread_mutex_lock(&c->lock);
}

int pyx_core_post(pyx_core *c, xfer_call_fn fn, void *ud)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->lock);
    while ((rc = c->state == PYX_OPEN ? xfer_engine_post_call(c->e, fn, ud)
                                      : XFER_ERR_SHUTDOWN) == XFER_ERR_BUSY)
        wait_for_room(c);
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS
    return rc;
}

void pyx_ticket_complete(pyx_ticket *t, const xfer_result *res)
{
    t->res = *res;
    if (t->kind != PYX_T_WAIT) {
        pyx_channel_push(t->chan, t);
        return;
    }
    pyx_core *c = t->core;
    pthread_mutex_lock(&c->lock);
    bool gone = t->abandoned;
    t->done = 1;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    if (gone)
        free(t);
}

/* A completion (loop): to its channel, or to the thread blocked on it. */
static void on_complete(void *ud, const xfer_result *res)
{
    pyx_ticket_complete(ud, res);
}

int pyx_core_submit(pyx_core *c, const xfer_transfer_desc *d,
                    const uint32_t *crcs, pyx_ticket *t)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->lock);
    rc = c->state != PYX_OPEN ? XFER_ERR_SHUTDOWN
         : crcs ? xfer_engine_post_submit_crc(c->e, d, crcs, on_complete, t)
                : xfer_engine_post_submit(c->e, d, on_complete, t);
    if (rc == 0)
        c->posted++;
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS
    return rc;
}

int pyx_core_stream_open(pyx_core *c, const xfer_stream_desc *d,
                         pyx_ticket *t)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->lock);
    rc = c->state == PYX_OPEN
             ? xfer_engine_post_stream_open(c->e, d, on_complete, t)
             : XFER_ERR_SHUTDOWN;
    if (rc == 0)
        c->posted++;
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS
    return rc;
}

/* A part's staging was released (loop): the part number travels in
 * user_data, the transfer's id and status as a completion's would. */
static void on_part(void *ud, uint64_t id, uint32_t part, int status)
{
    xfer_result res = {.id = id, .status = status, .user_data = part,
                       .first_failed_shard = XFER_SHARD_NONE};
    pyx_ticket_complete(ud, &res);
}

int pyx_core_stream_part(pyx_core *c, const xfer_part_desc *d,
                         pyx_ticket *t)
{
    int rc;
    xfer_part_desc pd = *d;
    pd.cb = on_part;
    pd.ud = t;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->lock);
    rc = c->state == PYX_OPEN ? xfer_engine_post_stream_part(c->e, &pd)
                              : XFER_ERR_SHUTDOWN;
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS
    return rc;
}

int pyx_core_stream_seal(pyx_core *c, uint64_t id, const uint32_t *crcs,
                         uint16_t ncrcs)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->lock);
    rc = c->state != PYX_OPEN ? XFER_ERR_SHUTDOWN
         : crcs ? xfer_engine_post_stream_seal_crc(c->e, id, crcs, ncrcs,
                                                   NULL, NULL)
                : xfer_engine_post_stream_seal(c->e, id, NULL, NULL);
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS
    return rc;
}

int pyx_core_cancel(pyx_core *c, uint64_t id)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->lock);
    rc = c->state == PYX_OPEN ? xfer_engine_post_cancel(c->e, id)
                              : XFER_ERR_SHUTDOWN;
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS
    return rc;
}

void pyx_deadline_in(struct timespec *ts, double secs)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    long long ns = (long long)ts->tv_nsec + (long long)(secs * 1e9);
    ts->tv_sec += (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
}

/* Wait in slices of 100 ms; between slices, with the GIL, run the signal
 * handlers: an exception from one (KeyboardInterrupt) abandons the wait,
 * and the transfer is cancelled so that it ends soon. */
int pyx_core_wait(pyx_core *c, pyx_ticket *t)
{
    for (;;) {
        bool done;
        Py_BEGIN_ALLOW_THREADS
        struct timespec ts;
        pyx_deadline_in(&ts, 0.1);
        pthread_mutex_lock(&c->lock);
        while (!t->done &&
               pthread_cond_timedwait(&c->cond, &c->lock, &ts) == 0) {
        }
        done = t->done;
        pthread_mutex_unlock(&c->lock);
        Py_END_ALLOW_THREADS
        if (done)
            return 0;
        if (PyErr_CheckSignals() == 0)
            continue;
        uint64_t id = t->res.id; /* t may be freed once abandoned */
        pthread_mutex_lock(&c->lock);
        done = t->done;
        t->abandoned = !done;
        c->wait_abandoned += !done;
        pthread_mutex_unlock(&c->lock);
        if (done)
            free(t);
        else
            pyx_core_cancel(c, id);
        return -1;
    }
}

/* ---------------------------------------------------------------------- */
/* Shutdown                                                                */
/* ---------------------------------------------------------------------- */

int pyx_core_begin_close(pyx_core *c, pyx_ticket *closer)
{
    int rc = 0;
    bool stopped;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->lock);
    if (c->state == PYX_OPEN) {
        /* A full mailbox empties as the loop drains it. */
        while ((rc = xfer_engine_post_call(c->e, start_shutdown, c)) ==
               XFER_ERR_BUSY)
            wait_for_room(c);
        if (rc == 0)
            c->state = PYX_CLOSING;
    }
    stopped = c->state >= PYX_STOPPED;
    if (closer && !stopped) {
        closer->next = c->closers;
        c->closers = closer;
    }
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS
    if (closer && stopped)
        pyx_channel_push(closer->chan, closer);
    return rc;
}

void pyx_core_wait_stopped(pyx_core *c)
{
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->lock);
    while (c->state < PYX_STOPPED)
        pthread_cond_wait(&c->cond, &c->lock);
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS
}

bool pyx_core_close(pyx_core *c, bool *closed)
{
    if (*closed)
        return false;
    pyx_core_begin_close(c, NULL);
    pyx_core_wait_stopped(c);
    if (*closed)
        return false; /* another thread finished while this one waited */
    *closed = true;
    pyx_core_free_engine(c);
    return true;
}

void pyx_core_free_engine(pyx_core *c)
{
    if (c->thread_started) {
        Py_BEGIN_ALLOW_THREADS
        pthread_join(c->thread, NULL);
        Py_END_ALLOW_THREADS
        c->thread_started = false;
    }
    free_c_side(c);
    pthread_mutex_lock(&c->lock);
    c->state = PYX_FREED;
    pthread_mutex_unlock(&c->lock);
}
