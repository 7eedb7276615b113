/*
 * tests/rdma/fabric/core.c - the fabric's process-wide state: its lock,
 * its progress thread, the clock and the seeded generator, and the event
 * queue behind every pollable fd it hands out (completion channels, CM
 * event channels, async events).
 *
 * What must stay true:
 *  - every fabric object is touched only with fab_g.lock held; the lock is
 *    never held across a call that can block on the application (an
 *    event read), only across non-blocking socket I/O;
 *  - an event queue's eventfd holds exactly one unit per queued event, so
 *    poll() on it tells the truth and a read never returns without one;
 *  - the progress thread starts at the first fabric call and is joined at
 *    exit, after which the counters file (if asked for) is written.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "fab.h"

fab_global fab_g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .turned = PTHREAD_COND_INITIALIZER,
    .wake_fd = -1,
    .next_qpn = 0x100,
};

/* ---- event queues ----------------------------------------------------- */

int fab_evq_init(fab_evq *q)
{
    q->fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
    q->head = NULL;
    q->tail = &q->head;
    return q->fd < 0 ? -1 : 0;
}

void fab_evq_close(fab_evq *q)
{
    if (q->fd >= 0)
        close(q->fd);
    q->fd = -1;
}

void fab_evq_push(fab_evq *q, fab_evnode *n)
{
    uint64_t one = 1;
    n->next = NULL;
    *q->tail = n;
    q->tail = &n->next;
    /* An eventfd write cannot block or fail below 2^64 - 1 units. */
    if (write(q->fd, &one, sizeof one) < 0)
        abort();
}

int fab_evq_wait(fab_evq *q)
{
    uint64_t v;
    ssize_t r;
    do
        r = read(q->fd, &v, sizeof v);
    while (r < 0 && errno == EINTR);
    return r == (ssize_t)sizeof v ? 0 : -1;
}

fab_evnode *fab_evq_pop(fab_evq *q)
{
    fab_evnode *n = q->head;
    if (n) {
        q->head = n->next;
        if (!q->head)
            q->tail = &q->head;
    }
    return n;
}

/* Take back the unit of a purged event, unless a reader already took it
 * (it then finds the queue short and reads again). */
static void evq_unit_back(fab_evq *q)
{
    struct pollfd p = {.fd = q->fd, .events = POLLIN};
    uint64_t v;
    if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN))
        (void)!read(q->fd, &v, sizeof v);
}

void fab_evq_purge(fab_evq *q, bool (*match)(fab_evnode *, const void *),
                   const void *arg, void (*drop)(fab_evnode *))
{
    fab_evnode **pp = &q->head;
    while (*pp) {
        fab_evnode *n = *pp;
        if (match(n, arg)) {
            *pp = n->next;
            evq_unit_back(q);
            drop(n);
        } else {
            pp = &n->next;
        }
    }
    q->tail = pp;
}

/* ---- clock, generator, faults ----------------------------------------- */

uint64_t fab_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t fab_rand(void)
{
    uint64_t x = fab_g.rng ? fab_g.rng : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    fab_g.rng = x;
    return x * 0x2545f4914f6cdd1dull;
}

bool fab_fault_fires(uint64_t *count, uint64_t nth)
{
    ++*count;
    return nth != 0 && *count == nth;
}

bool fab_idle(void)
{
    const xfer_fabric_counters *c = &fab_g.ctr;
    return c->contexts_live == 0 && c->pds_live == 0 && c->mrs_live == 0 &&
           c->mws_live == 0 && c->channels_live == 0 && c->cqs_live == 0 &&
           c->qps_live == 0 && c->cm_channels_live == 0 &&
           c->cm_ids_live == 0;
}

/* ---- the progress thread ---------------------------------------------- */

static void *progress_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&fab_g.lock);
    while (!fab_g.stop) {
        uint64_t now = fab_now_ns();
        uint64_t due = UINT64_MAX;
        fab_qp_progress(now, &due);
        fab_cq_progress(now, &due);
        fab_wire_turn(due == UINT64_MAX ? 0 : due);
    }
    pthread_mutex_unlock(&fab_g.lock);
    return NULL;
}

static void fab_at_exit(void)
{
    pthread_mutex_lock(&fab_g.lock);
    bool started = fab_g.started;
    fab_g.stop = true;
    pthread_mutex_unlock(&fab_g.lock);
    if (started) {
        fab_wake();
        pthread_join(fab_g.thread, NULL);
        pthread_mutex_lock(&fab_g.lock);
        fab_wire_shutdown();
        fab_g.started = false;
        pthread_mutex_unlock(&fab_g.lock);
    }
    fab_opts_at_exit();
}

/* Start the thread; a fabric that cannot start is unusable, so it says
 * why and stops the process, like a missing device would. */
static void start_thread(void)
{
    fab_g.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fab_g.wake_fd < 0 ||
        pthread_create(&fab_g.thread, NULL, progress_main, NULL) != 0) {
        static const char msg[] = "xfer_fabric: cannot start\n";
        (void)!write(2, msg, sizeof msg - 1);
        abort();
    }
    fab_g.started = true;
}

void fab_enter(void)
{
    pthread_mutex_lock(&fab_g.lock);
    if (!fab_g.loaded) {
        fab_g.loaded = true;
        fab_opts_load();
        atexit(fab_at_exit);
    }
    if (!fab_g.started && !fab_g.stop)
        start_thread();
}

void fab_exit(void)
{
    pthread_mutex_unlock(&fab_g.lock);
}

void fab_wake(void)
{
    uint64_t one = 1;
    /* The thread itself needs no wake-up: it turns again anyway. */
    if (fab_g.started && pthread_equal(pthread_self(), fab_g.thread))
        return;
    if (fab_g.wake_fd >= 0)
        (void)!write(fab_g.wake_fd, &one, sizeof one);
}

void fab_await_turn(void)
{
    uint64_t t = fab_g.turns;
    if (!fab_g.in_poll || pthread_equal(pthread_self(), fab_g.thread))
        return;
    fab_wake();
    while (fab_g.in_poll && fab_g.turns == t)
        pthread_cond_wait(&fab_g.turned, &fab_g.lock);
}
