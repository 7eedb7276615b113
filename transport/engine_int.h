/*
 * transport/engine_int.h - private pieces of the engine shared between
 * engine.c and mailbox.c.  (The monotonic clock is public, xfer/xfer.h;
 * the deadline timer is transport/timer.h.)
 */
#ifndef XFER_ENGINE_INT_H
#define XFER_ENGINE_INT_H

#include <stdint.h>

#include "list.h" /* fsm/: the one intrusive list (fsm_private_dep) */
#include "xfer/xfer.h"

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
 * slices (desc.slices points at `slices`).  One allocation, freed by one
 * free() of the post (or of its `done`, the same address). */
typedef struct xfer_post {
    xfer_done done;
    xfer_transfer_desc desc;
    xfer_slice slices[];
} xfer_post;

/* Copy a desc (and its slices) into a new post.  Any thread.  NULL when
 * out of memory. */
xfer_post *xfer_mailbox_new_post(const xfer_transfer_desc *d,
                                 xfer_complete_cb cb, void *ud);

/* The thread-safe mailbox (mailbox.c): other threads post, the loop
 * drains.  A pipe wakes the loop. */
typedef struct xfer_mailbox xfer_mailbox;

enum { XFER_MAIL_SUBMIT = 0, XFER_MAIL_CANCEL = 1 };

typedef struct xfer_mail {
    uint8_t kind;    /* XFER_MAIL_* */
    uint64_t id;     /* CANCEL */
    xfer_post *post; /* SUBMIT: owned by the mail */
} xfer_mail;

/* Called on the loop for each mail in FIFO order; takes m->post. */
typedef void (*xfer_mailbox_fn)(void *ud, xfer_mail *m);

int xfer_mailbox_new(struct event_base *base, uint32_t cap,
                     xfer_mailbox_fn fn, void *ud, xfer_mailbox **out);
/* Frees the posts of mails never drained. */
void xfer_mailbox_del(xfer_mailbox *mb);
/* Any thread.  On 0 the mailbox takes m->post; on an error the caller
 * keeps it.  Errors: XFER_ERR_BUSY (full). */
int xfer_mailbox_post(xfer_mailbox *mb, const xfer_mail *m);
uint64_t xfer_mailbox_posts(const xfer_mailbox *mb);
/* Mails queued and not yet handed to fn.  Any thread. */
uint32_t xfer_mailbox_pending(xfer_mailbox *mb);

#endif /* XFER_ENGINE_INT_H */
