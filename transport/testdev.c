/*
 * testdev.c - the test device (xfer/testdev.h): memory the library cannot
 * touch, and the one thread that copies it.
 *
 * Allocations are mmap'd PROT_NONE.  Every copy, asynchronous (the copy
 * engine's) or synchronous (xfer_testdev_read/_write), is a job on one
 * queue served by one thread, which opens the device pages of the job
 * (mprotect READ|WRITE), copies, and closes them again; a dereference by
 * any other code, at any other time, faults.  Jobs are served in the order
 * of (due time, queue order): a copy made late by a rule lets later ones
 * pass it, which is how copies complete out of order.
 *
 * What must stay true: only the copy thread changes a page's protection,
 * and it restores PROT_NONE before it reports the job; every accepted
 * asynchronous job calls its done exactly once; rules and the generator
 * are read and written under the lock.  After fork() the child starts
 * with no thread and an empty queue (pthread_atfork), its allocations
 * still mapped and closed.
 */
/* MAP_ANONYMOUS */
#define _DEFAULT_SOURCE
#include "testdev_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_ALLOCS 1024
#define MAX_RULES 64

typedef struct job {
    struct job *next;
    unsigned dir; /* XFER_TESTDEV_D2H/H2D */
    uint8_t *host, *dev;
    size_t len;
    uint64_t due_ns, seq;
    bool fail, delayed, sync;
    bool flip; /* a rule flips one byte of the destination */
    int status;    /* sync: the result */
    bool finished; /* sync: the caller may go */
    xfer_testdev_done_fn done;
    void *ud;
} job;

typedef struct rule_rec {
    xfer_testdev_rule r;
    uint32_t seen, fired;
} rule_rec;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* the thread waits for work */
    pthread_cond_t sync_cv; /* synchronous callers wait for their job */
    bool started;
    pthread_t th;
    struct { uint8_t *base; size_t len; } allocs[MAX_ALLOCS];
    job *q;
    uint64_t seq;
    rule_rec rules[MAX_RULES];
    unsigned nrules;
    uint64_t rng;
    xfer_testdev_stats st;
    size_t page;
} td = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
    .sync_cv = PTHREAD_COND_INITIALIZER,
    .rng = 0x9E3779B97F4A7C15ull,
};
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(void)
{
    uint64_t x = td.rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    td.rng = x;
    return x;
}

/* The child of a fork has no copy thread: it starts one at its first
 * copy; the parent's queued jobs are not the child's to finish. */
static void after_fork_child(void)
{
    pthread_mutex_init(&td.mu, NULL);
    pthread_cond_init(&td.cv, NULL);
    pthread_cond_init(&td.sync_cv, NULL);
    td.started = false;
    td.q = NULL;
    td.st.in_flight = 0;
}

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
}

/* The allocation holding [p, p+len), or -1.  Under the lock. */
static int find_alloc(const uint8_t *p, size_t len)
{
    for (int i = 0; i < MAX_ALLOCS; i++) {
        uint8_t *b = td.allocs[i].base;
        if (b && p >= b && (size_t)(p - b) <= td.allocs[i].len &&
            td.allocs[i].len - (size_t)(p - b) >= len &&
            (len || (size_t)(p - b) < td.allocs[i].len))
            return i;
    }
    return -1;
}

bool xfer_testdev_contains(const void *p, size_t len)
{
    pthread_mutex_lock(&td.mu);
    bool in = p && find_alloc(p, len) >= 0;
    pthread_mutex_unlock(&td.mu);
    return in;
}

/* Copy one job with its device pages open, then closed again. */
static int run_copy(job *j)
{
    if (j->fail)
        return XFER_ERR_COPY;
    if (!j->len)
        return 0;
    uintptr_t lo = (uintptr_t)j->dev & ~(uintptr_t)(td.page - 1);
    uintptr_t hi = ((uintptr_t)j->dev + j->len + td.page - 1) &
                   ~(uintptr_t)(td.page - 1);
    if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE) != 0)
        return XFER_ERR_COPY;
    if (j->dir == XFER_TESTDEV_D2H)
        memcpy(j->host, j->dev, j->len);
    else
        memcpy(j->dev, j->host, j->len);
    if (j->flip) /* silent corruption: the copy still says it succeeded */
        (j->dir == XFER_TESTDEV_D2H ? j->host : j->dev)[j->len / 2] ^= 0x01;
    mprotect((void *)lo, hi - lo, PROT_NONE);
    return 0;
}

/* The queued job due first (ties: queued first), unlinked; NULL when
 * none is due yet (*wait_until then says when one is). */
static job *take_due(uint64_t now, uint64_t *wait_until)
{
    job **best = NULL;
    for (job **p = &td.q; *p; p = &(*p)->next)
        if (!best || (*p)->due_ns < (*best)->due_ns ||
            ((*p)->due_ns == (*best)->due_ns && (*p)->seq < (*best)->seq))
            best = p;
    if (!best)
        return NULL;
    job *j = *best;
    if (j->due_ns > now) {
        *wait_until = j->due_ns;
        return NULL;
    }
    *best = j->next;
    for (job *o = td.q; o; o = o->next)
        if (!o->sync && !j->sync && o->seq < j->seq) {
            td.st.copies_reordered++;
            break;
        }
    return j;
}

static void *copy_thread(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&td.mu);
    for (;;) {
        uint64_t until = 0;
        job *j = take_due(now_ns(), &until);
        if (!j) {
            if (until) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t d = until - now_ns();
                if (until < now_ns())
                    d = 0;
                ts.tv_sec += (time_t)(d / 1000000000ull);
                ts.tv_nsec += (long)(d % 1000000000ull);
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&td.cv, &td.mu, &ts);
            } else {
                pthread_cond_wait(&td.cv, &td.mu);
            }
            continue;
        }
        pthread_mutex_unlock(&td.mu);
        int st = run_copy(j);
        pthread_mutex_lock(&td.mu);
        if (j->sync) {
            td.st.sync_copies++;
            j->status = st;
            j->finished = true;
            pthread_cond_broadcast(&td.sync_cv);
            continue;
        }
        td.st.in_flight--;
        if (j->dir == XFER_TESTDEV_D2H)
            td.st.copies_d2h++;
        else
            td.st.copies_h2d++;
        td.st.copies_failed += st != 0;
        td.st.copies_delayed += j->delayed;
        pthread_mutex_unlock(&td.mu);
        j->done(j->ud, st);
        free(j);
        pthread_mutex_lock(&td.mu);
    }
    return NULL;
}

/* Start the copy thread if this process has none.  Under the lock. */
static int ensure_thread(void)
{
    if (td.started)
        return 0;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&td.th, &at, copy_thread, NULL);
    pthread_attr_destroy(&at);
    if (rc != 0)
        return XFER_ERR_NOMEM;
    td.started = true;
    return 0;
}

/* Decide a job's fate by the rules.  Under the lock. */
static void apply_rules(job *j)
{
    for (unsigned i = 0; i < td.nrules; i++) {
        rule_rec *rr = &td.rules[i];
        if (!(rr->r.dir & j->dir))
            continue;
        if (rr->seen++ < rr->r.skip)
            continue;
        if (rr->r.count && rr->fired >= rr->r.count)
            continue;
        if (rr->r.prob_ppm && rnd() % 1000000u >= rr->r.prob_ppm)
            continue;
        rr->fired++;
        uint64_t d = rr->r.delay_ns;
        if (rr->r.delay_max_ns > d)
            d += rnd() % (rr->r.delay_max_ns - d + 1);
        j->due_ns += d;
        j->delayed = d != 0;
        j->fail = rr->r.fail != 0;
        j->flip = rr->r.flip != 0;
        return;
    }
}

/* Queue j.  Under the lock. */
static int enqueue(job *j)
{
    int rc = ensure_thread();
    if (rc)
        return rc;
    j->seq = ++td.seq;
    j->next = td.q;
    td.q = j;
    pthread_cond_signal(&td.cv);
    return 0;
}

int xfer_testdev_copy_async(unsigned dir, void *host, void *dev, size_t len,
                            xfer_testdev_done_fn done, void *ud)
{
    if ((dir != XFER_TESTDEV_D2H && dir != XFER_TESTDEV_H2D) || !done ||
        (len && !host) || !dev)
        return XFER_ERR_INVALID_ARG;
    job *j = calloc(1, sizeof *j);
    if (!j)
        return XFER_ERR_NOMEM;
    *j = (job){.dir = dir, .host = host, .dev = dev, .len = len,
               .due_ns = now_ns(), .done = done, .ud = ud};
    pthread_mutex_lock(&td.mu);
    int rc = find_alloc(dev, len) >= 0 ? 0 : XFER_ERR_INVALID_ARG;
    if (rc == 0) {
        apply_rules(j);
        rc = enqueue(j);
    }
    if (rc == 0)
        td.st.in_flight++;
    pthread_mutex_unlock(&td.mu);
    if (rc)
        free(j);
    return rc;
}

/* A synchronous copy: queued like the others (so it is served by the one
 * thread that may open pages), never matched by rules. */
static int sync_copy(unsigned dir, void *host, void *dev, size_t len)
{
    if (!dev || (len && !host))
        return XFER_ERR_INVALID_ARG;
    job j = {.dir = dir, .host = host, .dev = dev, .len = len,
             .due_ns = 0, .sync = true};
    pthread_mutex_lock(&td.mu);
    int rc = find_alloc(dev, len) >= 0 ? 0 : XFER_ERR_INVALID_ARG;
    if (rc == 0)
        rc = enqueue(&j);
    while (rc == 0 && !j.finished)
        pthread_cond_wait(&td.sync_cv, &td.mu);
    if (rc == 0)
        rc = j.status;
    pthread_mutex_unlock(&td.mu);
    return rc;
}

int xfer_testdev_read(void *dst, const void *dev, size_t len)
{
    return sync_copy(XFER_TESTDEV_D2H, dst, (void *)(uintptr_t)dev, len);
}

int xfer_testdev_write(void *dev, const void *src, size_t len)
{
    return sync_copy(XFER_TESTDEV_H2D, (void *)(uintptr_t)src, dev, len);
}

int xfer_testdev_alloc(size_t len, void **out)
{
    if (!len || !out)
        return XFER_ERR_INVALID_ARG;
    pthread_once(&atfork_once, install_atfork);
    pthread_mutex_lock(&td.mu);
    if (!td.page)
        td.page = (size_t)sysconf(_SC_PAGESIZE);
    int rc = XFER_ERR_BUSY;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (td.allocs[i].base)
            continue;
        size_t span = (len + td.page - 1) & ~(td.page - 1);
        void *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED) {
            rc = XFER_ERR_NOMEM;
            break;
        }
        td.allocs[i].base = p;
        td.allocs[i].len = len;
        td.st.allocs_live++;
        *out = p;
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&td.mu);
    return rc;
}

void xfer_testdev_free(void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&td.mu);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (td.allocs[i].base != p)
            continue;
        size_t span = (td.allocs[i].len + td.page - 1) & ~(td.page - 1);
        munmap(p, span);
        td.allocs[i].base = NULL;
        td.allocs[i].len = 0;
        td.st.allocs_live--;
        break;
    }
    pthread_mutex_unlock(&td.mu);
}

int xfer_testdev_add_rule(const xfer_testdev_rule *r)
{
    if (!r || r->dir == 0 || r->dir > XFER_TESTDEV_ANY)
        return XFER_ERR_INVALID_ARG;
    pthread_mutex_lock(&td.mu);
    int rc = XFER_ERR_BUSY;
    if (td.nrules < MAX_RULES) {
        td.rules[td.nrules++] = (rule_rec){.r = *r};
        rc = 0;
    }
    pthread_mutex_unlock(&td.mu);
    return rc;
}

void xfer_testdev_clear_rules(uint64_t seed)
{
    pthread_mutex_lock(&td.mu);
    td.nrules = 0;
    td.rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    pthread_mutex_unlock(&td.mu);
}

void xfer_testdev_stats_get(xfer_testdev_stats *st)
{
    if (!st)
        return;
    pthread_mutex_lock(&td.mu);
    *st = td.st;
    pthread_mutex_unlock(&td.mu);
}

struct xfer_testdev_event {
    atomic_int done;
};

int xfer_testdev_event_new(xfer_testdev_event **out)
{
    if (!out)
        return XFER_ERR_INVALID_ARG;
    xfer_testdev_event *ev = calloc(1, sizeof *ev);
    if (!ev)
        return XFER_ERR_NOMEM;
    atomic_init(&ev->done, 0);
    *out = ev;
    return 0;
}

void xfer_testdev_event_signal(xfer_testdev_event *ev)
{
    if (ev)
        atomic_store(&ev->done, 1);
}

int xfer_testdev_event_done(const xfer_testdev_event *ev)
{
    return ev ? atomic_load(&((xfer_testdev_event *)ev)->done) : 1;
}

void xfer_testdev_event_free(xfer_testdev_event *ev)
{
    free(ev);
}
