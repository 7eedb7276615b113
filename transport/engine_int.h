/*
 * transport/engine_int.h - private pieces of the engine shared between
 * engine.c and mailbox.c.  (The monotonic clock is public, xfer/xfer.h;
 * the deadline timer is transport/timer.h.)
 */
#ifndef XFER_ENGINE_INT_H
#define XFER_ENGINE_INT_H

#include <stdint.h>

#include "list.h" /* fsm/: the one intrusive list (fsm_private_dep) */
#include "xfer/hist.h"
#include "xfer/xfer.h"

/* What the engine keeps for metrics (transport/metrics.c): the latency
 * from an accepted submit to its completion, by outcome (0 ok, 1 failed,
 * 2 cancelled or shut down), and the failures by the phase they happened
 * in (xfer_phase).  Loop thread. */
#define XFER_ENGINE_OUTCOMES 3
const xfer_hist *xfer_engine_latency(const xfer_engine *e, unsigned outcome);
uint64_t xfer_engine_failed_in_phase(const xfer_engine *e, unsigned phase);

/*
 * A completion waiting for the engine's deferred event, in one FIFO.  A
 * live transfer's is part of its callback slot; a posted submit carries its
 * own from the moment it is posted (xfer_post), so a refusal by the loop
 * needs no memory and no room in anything sized by max_transfers.
 */
#define XFER_DONE_POST UINT32_MAX

typedef struct xfer_done {
    xfer_list_node link; /* on the engine's FIFO of completions */
    xfer_result res;
    xfer_complete_cb cb;
    void *ud;
    uint32_t slot; /* callback slot, or XFER_DONE_POST (an xfer_post) */
} xfer_done;

/* A posted submit: its completion record first, then the copied desc and
 * slices (desc.slices points at `slices`).  One allocation through the
 * engine's allocator, freed by one free of the post (or of its `done`, the
 * same address). */
typedef struct xfer_post {
    xfer_done done;
    xfer_transfer_desc desc;
    const uint32_t *crcs; /* xfer_engine_post_submit_crc: the caller's CRCs
                             (desc.nslices, in the same allocation, after
                             the slices); NULL: none */
    xfer_slice slices[];
} xfer_post;

/* Bracket one loop callback's batch of inputs (a transport's results):
 * with the library's own clock, xfer_engine_now returns one reading for
 * the whole batch; with an injected clock both are no-ops.  Pairs nest.
 * End the batch before running user code (which may take its time and
 * then call the engine) and begin a new one after.  Loop thread. */
void xfer_engine_batch_begin(xfer_engine *e);
void xfer_engine_batch_end(xfer_engine *e);
/* Inside a batch xfer_engine_deliver steps the core but leaves the
 * actions of the results for later: perform them now.  A transport calls
 * it before anything in the batch that is not a delivery and could start
 * or order ops (its own messages), so ops start in the same order as when
 * every result is drained at once; batch_end calls it too.  Loop thread. */
void xfer_engine_flush(xfer_engine *e);

/* The engine's allocator (cfg.core.alloc), for the objects it hands out
 * (engine_ctl.c).  Borrowed: valid while e lives. */
const xfer_allocator *xfer_engine_alloc(const xfer_engine *e);

/* An engine control socket's hold on its engine (engine_ctl.c).  The
 * engine keeps the links of its open control sockets and clears `e` in
 * each at xfer_engine_del, so a ctl closed after the engine (or answering
 * after it) sees no engine instead of a freed one.  Loop thread. */
typedef struct xfer_engine_ctl_link {
    xfer_engine *e;                      /* NULL: the engine is gone */
    struct xfer_engine_ctl_link *next;   /* the engine's list */
    xfer_allocator alloc;                /* the link's own */
} xfer_engine_ctl_link;
void xfer_engine_ctl_link_add(xfer_engine *e, xfer_engine_ctl_link *l);
void xfer_engine_ctl_link_remove(xfer_engine *e, xfer_engine_ctl_link *l);

/* Copy a desc (and its slices) into a new post allocated through `a` (the
 * engine's allocator, borrowed; freed through it too).  Any thread.  NULL
 * when out of memory. */
xfer_post *xfer_mailbox_new_post(const xfer_allocator *a,
                                 const xfer_transfer_desc *d,
                                 xfer_complete_cb cb, void *ud);
/* The same with the caller's CRCs (d->nslices entries, borrowed until
 * return) copied into the post; crcs NULL: as xfer_mailbox_new_post. */
xfer_post *xfer_mailbox_new_post_crc(const xfer_allocator *a,
                                     const xfer_transfer_desc *d,
                                     const uint32_t *crcs,
                                     xfer_complete_cb cb, void *ud);

/* The thread-safe mailbox (mailbox.c): other threads post, the loop
 * drains.  A pipe wakes the loop. */
typedef struct xfer_mailbox xfer_mailbox;

/* The consumer client (consumer.c) posts through the same mailbox:
 * CANCEL, EXPECT (arg: the deadline) and RELEASE, with no post. */
enum { XFER_MAIL_SUBMIT = 0, XFER_MAIL_CANCEL = 1, XFER_MAIL_CALL = 2,
       XFER_MAIL_EXPECT = 3, XFER_MAIL_RELEASE = 4,
       /* streams (xfer/stream.h): blob is the copied call */
       XFER_MAIL_STREAM_OPEN = 5, XFER_MAIL_STREAM_PART = 6,
       XFER_MAIL_STREAM_SEAL = 7 };

typedef struct xfer_mail {
    uint8_t kind;    /* XFER_MAIL_* */
    uint64_t id;     /* CANCEL, EXPECT, RELEASE */
    uint64_t arg;    /* EXPECT: the deadline */
    xfer_post *post; /* SUBMIT: owned by the mail; NULL otherwise */
    xfer_call_fn fn; /* CALL: fn(ud) on the loop */
    xfer_cancel_cb cancel_cb; /* CANCEL: the loop's answer; NULL: none */
    void *ud;        /* CALL, and CANCEL or STREAM_SEAL with a cancel_cb */
    void *blob;      /* STREAM_OPEN, STREAM_PART, and STREAM_SEAL with the
                        caller's CRCs (uint32_t[nshards], NULL: none):
                        owned by the mail (one
                        allocation through the mailbox's allocator, freed
                        with the mail when never drained) */
} xfer_mail;

/* Called on the loop for each mail in FIFO order; takes m->post. */
typedef void (*xfer_mailbox_fn)(void *ud, xfer_mail *m);

/* `a` (the engine's allocator) is retained until xfer_mailbox_del: the
 * mailbox, its queue and the posts of mails never drained are allocated
 * and freed through it.  *out untouched on failure.
 * Errors: XFER_ERR_NOMEM, XFER_ERR_IO (pipe, libevent). */
int xfer_mailbox_new(struct event_base *base, uint32_t cap,
                     const xfer_allocator *a, xfer_mailbox_fn fn, void *ud,
                     xfer_mailbox **out);
/* Frees the posts of mails never drained. */
void xfer_mailbox_del(xfer_mailbox *mb);
/* Any thread.  On 0 the mailbox takes m->post; on an error the caller
 * keeps it.  Errors: XFER_ERR_BUSY (full). */
int xfer_mailbox_post(xfer_mailbox *mb, const xfer_mail *m);
uint64_t xfer_mailbox_posts(const xfer_mailbox *mb);
/* Mails queued and not yet handed to fn.  Any thread. */
uint32_t xfer_mailbox_pending(xfer_mailbox *mb);

#endif /* XFER_ENGINE_INT_H */
