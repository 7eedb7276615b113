/*
 * transport/mailbox.c - the engine's thread-safe mailbox.
 *
 * Other threads append requests under a mutex and write one byte to a pipe;
 * the loop reads the pipe and drains the queue in FIFO order, so the order
 * the loop sees is the order the posts took the lock, and that is the order
 * the trace records.  The queue is bounded (XFER_ERR_BUSY at the cap).
 * Posting never touches libevent state, so libevent needs no thread
 * support.
 *
 * A submit travels as one xfer_post allocated by the posting thread; the
 * loop's handler takes it, and keeps it as the completion record if the
 * submit is refused, so every accepted post owns the memory of its own
 * completion.  The mailbox and the posts use the engine's allocator.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "engine_int.h"
/* fsm_private_dep: the injected allocator with its libc default. */
#include "util.h"
#include "ring.h" /* fsm/: the one ring buffer (fsm_private_dep) */

struct xfer_mailbox {
    const xfer_allocator *alloc; /* the engine's */
    pthread_mutex_t lock;
    xfer_mail *q;     /* the ring's array; both guarded by lock */
    xfer_ring ring;
    int fds[2];       /* pipe: [0] read by the loop, [1] written by posts */
    int wake_pending; /* a byte is in the pipe; guarded by lock */
    struct event *ev;
    xfer_mailbox_fn fn;
    void *ud;
    uint64_t posts;
};

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    xfer_mailbox *mb = arg;
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0) {
    }
    pthread_mutex_lock(&mb->lock);
    mb->wake_pending = 0;
    pthread_mutex_unlock(&mb->lock);
    for (;;) {
        xfer_mail m;
        pthread_mutex_lock(&mb->lock);
        if (xfer_ring_empty(&mb->ring)) {
            pthread_mutex_unlock(&mb->lock);
            break;
        }
        m = mb->q[xfer_ring_pop(&mb->ring)];
        pthread_mutex_unlock(&mb->lock);
        mb->fn(mb->ud, &m);
    }
}

int xfer_mailbox_new(struct event_base *base, uint32_t cap,
                     const xfer_allocator *a, xfer_mailbox_fn fn, void *ud,
                     xfer_mailbox **out)
{
    xfer_mailbox *mb = xfer_util_calloc(a, 1, sizeof *mb);
    if (!mb)
        return XFER_ERR_NOMEM;
    mb->alloc = a;
    mb->fds[0] = mb->fds[1] = -1;
    cap = cap ? cap : 1;
    mb->q = cap <= XFER_RING_MAX_CAP ? xfer_util_calloc(a, cap, sizeof *mb->q) : NULL;
    if (!mb->q || pthread_mutex_init(&mb->lock, NULL) != 0) {
        xfer_util_free(a, mb->q);
        xfer_util_free(a, mb);
        return XFER_ERR_NOMEM;
    }
    xfer_ring_init(&mb->ring, cap);
    mb->fn = fn;
    mb->ud = ud;
    int rc = XFER_ERR_IO;
    if (pipe(mb->fds) != 0)
        goto out_fail;
    for (int i = 0; i < 2; i++) {
        fcntl(mb->fds[i], F_SETFL, fcntl(mb->fds[i], F_GETFL) | O_NONBLOCK);
        fcntl(mb->fds[i], F_SETFD, FD_CLOEXEC);
    }
    mb->ev = event_new(base, mb->fds[0], EV_READ | EV_PERSIST, on_wake, mb);
    if (!mb->ev || event_add(mb->ev, NULL) != 0)
        goto out_fail;
    *out = mb;
    return 0;
out_fail:
    xfer_mailbox_del(mb);
    return rc;
}

void xfer_mailbox_del(xfer_mailbox *mb)
{
    if (!mb)
        return;
    if (mb->ev)
        event_free(mb->ev);
    for (uint32_t i = 0; i < mb->ring.n; i++) {
        xfer_util_free(mb->alloc, mb->q[xfer_ring_slot(&mb->ring, i)].post);
        xfer_util_free(mb->alloc, mb->q[xfer_ring_slot(&mb->ring, i)].blob);
    }
    for (int i = 0; i < 2; i++)
        if (mb->fds[i] >= 0)
            close(mb->fds[i]);
    pthread_mutex_destroy(&mb->lock);
    xfer_util_free(mb->alloc, mb->q);
    xfer_util_free(mb->alloc, mb);
}

xfer_post *xfer_mailbox_new_post(const xfer_allocator *a,
                                 const xfer_transfer_desc *d,
                                 xfer_complete_cb cb, void *ud)
{
    return xfer_mailbox_new_post_crc(a, d, NULL, cb, ud);
}

xfer_post *xfer_mailbox_new_post_crc(const xfer_allocator *a,
                                     const xfer_transfer_desc *d,
                                     const uint32_t *crcs,
                                     xfer_complete_cb cb, void *ud)
{
    size_t n = d->nslices;
    size_t room = sizeof(xfer_post) + n * sizeof(xfer_slice) +
                  (crcs ? n * sizeof(uint32_t) : 0);
    xfer_post *p = xfer_util_alloc(a, room);
    if (!p)
        return NULL;
    memset(&p->done, 0, sizeof p->done);
    p->done.cb = cb;
    p->done.ud = ud;
    p->done.slot = XFER_DONE_POST;
    p->desc = *d;
    p->crcs = NULL;
    if (n)
        memcpy(p->slices, d->slices, n * sizeof p->slices[0]);
    p->desc.slices = p->slices;
    if (crcs && n) {
        /* after the slices (xfer_slice's alignment covers uint32_t) */
        uint32_t *c = (uint32_t *)(void *)(p->slices + n);
        memcpy(c, crcs, n * sizeof *c);
        p->crcs = c;
    }
    return p;
}

int xfer_mailbox_post(xfer_mailbox *mb, const xfer_mail *m)
{
    pthread_mutex_lock(&mb->lock);
    if (xfer_ring_full(&mb->ring)) {
        pthread_mutex_unlock(&mb->lock);
        return XFER_ERR_BUSY;
    }
    mb->q[xfer_ring_push(&mb->ring)] = *m;
    mb->posts++;
    int wake = !mb->wake_pending;
    mb->wake_pending = 1;
    pthread_mutex_unlock(&mb->lock);
    if (wake) {
        char b = 1;
        ssize_t w;
        do {
            w = write(mb->fds[1], &b, 1);
        } while (w < 0 && errno == EINTR);
    }
    return 0;
}

uint64_t xfer_mailbox_posts(const xfer_mailbox *mb)
{
    return mb ? mb->posts : 0;
}

uint32_t xfer_mailbox_pending(xfer_mailbox *mb)
{
    if (!mb)
        return 0;
    pthread_mutex_lock(&mb->lock);
    uint32_t n = mb->ring.n;
    pthread_mutex_unlock(&mb->lock);
    return n;
}
