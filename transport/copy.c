/*
 * copy.c - the copy engine's common part (copy.h): requests, the eventfd
 * that brings completions to the loop, and the bounce buffer cache.
 *
 * A backend thread (the test device's copy thread, a CUDA driver thread)
 * ends a request by appending it to `done` under the lock and, when the
 * list was empty, writing the eventfd; the loop's read event takes the
 * whole list and calls each request's done in the order they ended.  The
 * loop never blocks on a copy: only xfer_copy_del waits (teardown).
 *
 * What must stay true: `outstanding` counts requests a backend still
 * holds; del waits for it to reach 0 before it frees anything a backend
 * could touch.
 */
#include "copy.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "xfer/errors.h"

typedef struct copy_req {
    struct copy_req *next;
    xfer_copy *owner;
    xfer_copy_done_fn done;
    void *ud;
    int status;
} copy_req;

/* Cached bounce buffers: one free list per power of two from 4 KiB. */
#define NCLASS 40
#define MIN_SHIFT 12
#define CACHE_MAX (256ull << 20)

typedef struct bounce {
    struct bounce *next;
    void *p;
} bounce;

struct xfer_copy {
    const xfer_copy_ops *ops;
    void *state;
    struct event *ev;
    int efd;
    pthread_mutex_t mu;
    pthread_cond_t idle;   /* outstanding reached 0 */
    copy_req *done_head, *done_tail;
    uint64_t outstanding;  /* held by the backend (under mu) */
    uint64_t in_flight;    /* started, done not yet called (loop) */
    bounce *cache[NCLASS];
    uint64_t cached_bytes;
};

static unsigned class_of(size_t len)
{
    unsigned k = MIN_SHIFT;
    while (k < NCLASS - 1 + MIN_SHIFT && ((size_t)1 << k) < len)
        k++;
    return k - MIN_SHIFT;
}

void xfer_copy_backend_done(void *r, int status)
{
    copy_req *req = r;
    xfer_copy *c = req->owner;
    req->status = status;
    req->next = NULL;
    pthread_mutex_lock(&c->mu);
    bool was_empty = !c->done_head;
    if (c->done_tail)
        c->done_tail->next = req;
    else
        c->done_head = req;
    c->done_tail = req;
    c->outstanding--;
    if (was_empty) {
        uint64_t one = 1;
        ssize_t n = write(c->efd, &one, sizeof one);
        (void)n; /* a full counter still wakes the loop */
    }
    if (!c->outstanding)
        pthread_cond_broadcast(&c->idle);
    pthread_mutex_unlock(&c->mu);
}

/* The eventfd is readable: run every ended request's done, in order. */
static void on_done(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    xfer_copy *c = arg;
    uint64_t n;
    ssize_t got = read(fd, &n, sizeof n);
    (void)got;
    pthread_mutex_lock(&c->mu);
    copy_req *list = c->done_head;
    c->done_head = c->done_tail = NULL;
    pthread_mutex_unlock(&c->mu);
    while (list) {
        copy_req *r = list;
        list = r->next;
        c->in_flight--;
        r->done(r->ud, r->status);
        free(r);
    }
}

int xfer_copy_new(struct event_base *base, xfer_mem mem, xfer_copy **out)
{
    const xfer_copy_ops *ops = NULL;
    if (!base || !out)
        return XFER_ERR_INVALID_ARG;
    if (mem.kind == XFER_MEM_TESTDEV)
        ops = &xfer_copy_testdev_ops;
    else if (mem.kind == XFER_MEM_CUDA)
        ops = &xfer_copy_cuda_ops;
    else
        return XFER_ERR_INVALID_ARG;
    int rc = XFER_ERR_NOMEM;
    xfer_copy *c = calloc(1, sizeof *c);
    if (!c)
        goto out;
    c->ops = ops;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->idle, NULL);
    rc = XFER_ERR_IO;
    c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->efd < 0)
        goto out_free;
    c->ev = event_new(base, c->efd, EV_READ | EV_PERSIST, on_done, c);
    if (!c->ev || event_add(c->ev, NULL) != 0)
        goto out_close;
    rc = ops->open(mem, &c->state);
    if (rc)
        goto out_close;
    *out = c;
    return 0;
out_close:
    if (c->ev)
        event_free(c->ev);
    close(c->efd);
out_free:
    pthread_cond_destroy(&c->idle);
    pthread_mutex_destroy(&c->mu);
    free(c);
out:
    return rc;
}

void xfer_copy_quiesce(xfer_copy *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    while (c->outstanding)
        pthread_cond_wait(&c->idle, &c->mu);
    copy_req *list = c->done_head;
    c->done_head = c->done_tail = NULL;
    pthread_mutex_unlock(&c->mu);
    while (list) {
        copy_req *r = list;
        list = r->next;
        c->in_flight--;
        free(r);
    }
}

void xfer_copy_del(xfer_copy *c)
{
    if (!c)
        return;
    xfer_copy_quiesce(c);
    /* The cached bounce buffers go back through the kind's host_free,
     * which needs its state: close it only after (CUDA's close frees the
     * state, and its pinned buffers were read from freed memory, or
     * leaked; tests/cudafake found it). */
    for (unsigned k = 0; k < NCLASS; k++)
        while (c->cache[k]) {
            bounce *b = c->cache[k];
            c->cache[k] = b->next;
            c->ops->host_free(c->state, b->p);
            free(b);
        }
    c->ops->close(c->state);
    event_free(c->ev);
    close(c->efd);
    pthread_cond_destroy(&c->idle);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int xfer_copy_start(xfer_copy *c, bool d2h, void *host, void *dev,
                    size_t len, xfer_copy_done_fn done, void *ud)
{
    if (!c || !dev || !done || (len && !host))
        return XFER_ERR_INVALID_ARG;
    copy_req *r = calloc(1, sizeof *r);
    if (!r)
        return XFER_ERR_NOMEM;
    *r = (copy_req){.owner = c, .done = done, .ud = ud};
    pthread_mutex_lock(&c->mu);
    c->outstanding++;
    pthread_mutex_unlock(&c->mu);
    int rc = c->ops->start(c->state, d2h, host, dev, len, r);
    if (rc) {
        pthread_mutex_lock(&c->mu);
        c->outstanding--;
        if (!c->outstanding)
            pthread_cond_broadcast(&c->idle);
        pthread_mutex_unlock(&c->mu);
        free(r);
        return rc;
    }
    c->in_flight++;
    return 0;
}

void *xfer_copy_bounce_get(xfer_copy *c, size_t len)
{
    unsigned k = class_of(len ? len : 1);
    size_t sz = (size_t)1 << (k + MIN_SHIFT);
    if (sz < len)
        return NULL; /* beyond the largest class */
    if (c->cache[k]) {
        bounce *b = c->cache[k];
        c->cache[k] = b->next;
        c->cached_bytes -= sz;
        void *p = b->p;
        free(b);
        return p;
    }
    return c->ops->host_alloc(c->state, sz);
}

void xfer_copy_bounce_put(xfer_copy *c, void *p, size_t len)
{
    if (!p)
        return;
    unsigned k = class_of(len ? len : 1);
    size_t sz = (size_t)1 << (k + MIN_SHIFT);
    bounce *b = c->cached_bytes + sz <= CACHE_MAX ? malloc(sizeof *b) : NULL;
    if (!b) {
        c->ops->host_free(c->state, p);
        return;
    }
    b->p = p;
    b->next = c->cache[k];
    c->cache[k] = b;
    c->cached_bytes += sz;
}

uint64_t xfer_copy_in_flight(const xfer_copy *c)
{
    return c ? c->in_flight : 0;
}
