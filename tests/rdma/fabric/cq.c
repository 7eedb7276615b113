/*
 * tests/rdma/fabric/cq.c - completion channels and completion queues:
 * ibv_create/destroy_comp_channel, ibv_create/destroy_cq, the
 * ibv_req_notify_cq and ibv_poll_cq ops, ibv_get_cq_event and
 * ibv_ack_cq_events, and the delay that slow completions take.
 *
 * Notification follows the verbs contract exactly, because transports get
 * it wrong: ibv_req_notify_cq arms the CQ for the *next* completion added
 * after the call (entries already queued do not fire), one event per arm.
 * So a caller that drains and then re-arms can miss a completion that
 * came in between; one that re-arms and then drains cannot.
 *
 * What must stay true:
 *  - completions of one QP reach their CQs in the order the QP produced
 *    them, whatever delay each was given;
 *  - a CQ with QPs on it, or with events taken but not acked, is not
 *    destroyed (rdma-core would wait forever; the fabric answers EBUSY and
 *    counts destroy_busy); its queued events and delayed completions die
 *    with it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fab.h"

typedef struct cq_event {
    fab_evnode node;
    fab_cq *cq;
} cq_event;

fab_cq *fab_cq_of(struct ibv_cq *cq)
{
    return FAB_OF(cq, fab_cq, cq);
}

/* ---- channels --------------------------------------------------------- */

FAB_API struct ibv_comp_channel *
ibv_create_comp_channel(struct ibv_context *context)
{
    fab_enter();
    fab_channel *ch = calloc(1, sizeof *ch);
    if (ch && fab_evq_init(&ch->q) < 0) {
        free(ch);
        ch = NULL;
    }
    if (ch) {
        ch->ctx = fab_ctx_of(context);
        fab_ctx_ref(ch->ctx);
        ch->ch.context = context;
        ch->ch.fd = ch->q.fd;
        fab_g.ctr.channels_live++;
    }
    fab_exit();
    if (!ch)
        errno = ENOMEM;
    return ch ? &ch->ch : NULL;
}

FAB_API int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    int r = 0;
    fab_enter();
    fab_channel *ch = FAB_OF(channel, fab_channel, ch);
    if (ch->cqs) {
        fab_g.ctr.destroy_busy++;
        r = EBUSY;
    } else {
        fab_evq_close(&ch->q);
        fab_ctx_unref(ch->ctx);
        free(ch);
        fab_g.ctr.channels_live--;
    }
    fab_exit();
    return r;
}

/* ---- CQs -------------------------------------------------------------- */

FAB_API struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
                                     void *cq_context,
                                     struct ibv_comp_channel *channel,
                                     int comp_vector)
{
    int err = 0;
    fab_cq *c = NULL;
    fab_enter();
    if (cqe <= 0 || cqe > FAB_MAX_CQE || comp_vector < 0 ||
        comp_vector >= context->num_comp_vectors ||
        (channel && channel->context != context)) {
        err = EINVAL;
    } else if (!(c = calloc(1, sizeof *c))) {
        err = ENOMEM;
    } else {
        c->ctx = fab_ctx_of(context);
        fab_ctx_ref(c->ctx);
        if (channel) {
            c->chan = FAB_OF(channel, fab_channel, ch);
            c->chan->cqs++;
            channel->refcnt++;
        }
        c->cq.context = context;
        c->cq.channel = channel;
        c->cq.cq_context = cq_context;
        c->cq.cqe = cqe;
        pthread_mutex_init(&c->cq.mutex, NULL);
        pthread_cond_init(&c->cq.cond, NULL);
        fab_g.ctr.cqs_live++;
    }
    fab_exit();
    if (err)
        errno = err;
    return c ? &c->cq : NULL;
}

static bool event_of_cq(fab_evnode *n, const void *cq)
{
    return FAB_OF(n, cq_event, node)->cq == cq;
}

static void event_drop(fab_evnode *n)
{
    free(FAB_OF(n, cq_event, node));
}

FAB_API int ibv_destroy_cq(struct ibv_cq *cq)
{
    int r = 0;
    fab_enter();
    fab_cq *c = fab_cq_of(cq);
    if (c->users || c->unacked) {
        fab_g.ctr.destroy_busy++;
        r = EBUSY;
        goto out;
    }
    if (c->chan) {
        fab_evq_purge(&c->chan->q, event_of_cq, c, event_drop);
        c->chan->cqs--;
        c->chan->ch.refcnt--;
    }
    for (fab_pcqe **pp = &fab_g.delayed; *pp;) {
        fab_pcqe *p = *pp;
        if (p->cq == c) {
            *pp = p->next;
            free(p);
        } else {
            pp = &p->next;
        }
    }
    pthread_mutex_destroy(&c->cq.mutex);
    pthread_cond_destroy(&c->cq.cond);
    fab_ctx_unref(c->ctx);
    free(c->ring);
    free(c);
    fab_g.ctr.cqs_live--;
out:
    fab_exit();
    return r;
}

/* Queue one entry now and fire an armed notification. */
static void cq_push(fab_cq *c, const struct ibv_wc *wc, bool solicited)
{
    if (c->n == c->cap) {
        uint32_t cap = c->cap ? c->cap * 2 : 64;
        struct ibv_wc *r = malloc(cap * sizeof *r);
        if (!r) {
            fab_g.ctr.cq_overflows++;
            return;
        }
        for (uint32_t i = 0; i < c->n; i++)
            r[i] = c->ring[(c->head + i) % c->cap];
        free(c->ring);
        c->ring = r;
        c->head = 0;
        c->cap = cap;
    }
    if (c->n >= (uint32_t)c->cq.cqe)
        fab_g.ctr.cq_overflows++; /* hardware would raise IBV_EVENT_CQ_ERR */
    c->ring[(c->head + c->n) % c->cap] = *wc;
    c->n++;
    fab_g.ctr.cqes++;
    bool fires = !c->armed_solicited || solicited ||
                 wc->status != IBV_WC_SUCCESS;
    if (c->armed && fires && c->chan) {
        cq_event *e = malloc(sizeof *e);
        c->armed = false;
        if (e) {
            e->cq = c;
            fab_evq_push(&c->chan->q, &e->node);
        }
    }
}

void fab_cq_add(fab_qp *qp, fab_cq *cq, const struct ibv_wc *wc,
                bool solicited)
{
    const xfer_fabric_opts *o = &fab_g.opts;
    uint64_t now = fab_now_ns();
    uint64_t d = o->cq_delay_us;
    if (o->cq_jitter_us)
        d += fab_rand() % (o->cq_jitter_us + 1u);
    uint64_t due = now + d * 1000u;
    if (due < qp->last_cq_due)
        due = qp->last_cq_due;
    if (due <= now) {
        cq_push(cq, wc, solicited);
        return;
    }
    fab_pcqe *p = malloc(sizeof *p);
    if (!p) {
        fab_g.ctr.cq_overflows++;
        return;
    }
    qp->last_cq_due = due;
    p->cq = cq;
    p->due = due;
    p->solicited = solicited;
    p->wc = *wc;
    fab_pcqe **pp = &fab_g.delayed;
    while (*pp && (*pp)->due <= due)
        pp = &(*pp)->next;
    p->next = *pp;
    *pp = p;
}

void fab_cq_progress(uint64_t now, uint64_t *next_due)
{
    while (fab_g.delayed && fab_g.delayed->due <= now) {
        fab_pcqe *p = fab_g.delayed;
        fab_g.delayed = p->next;
        cq_push(p->cq, &p->wc, p->solicited);
        free(p);
    }
    if (fab_g.delayed && fab_g.delayed->due < *next_due)
        *next_due = fab_g.delayed->due;
}

/* ---- the data path ---------------------------------------------------- */

int fab_cq_poll(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    int got = 0;
    if (n < 0)
        return -EINVAL;
    fab_enter();
    fab_cq *c = fab_cq_of(cq);
    while (got < n && c->n) {
        wc[got++] = c->ring[c->head];
        c->head = (c->head + 1) % c->cap;
        c->n--;
    }
    fab_exit();
    return got;
}

int fab_cq_notify(struct ibv_cq *cq, int solicited_only)
{
    fab_enter();
    fab_cq *c = fab_cq_of(cq);
    c->armed = true;
    c->armed_solicited = solicited_only != 0;
    fab_exit();
    return 0;
}

FAB_API int ibv_get_cq_event(struct ibv_comp_channel *channel,
                             struct ibv_cq **cq, void **cq_context)
{
    fab_channel *ch = FAB_OF(channel, fab_channel, ch);
    for (;;) {
        if (fab_evq_wait(&ch->q) < 0)
            return -1;
        fab_enter();
        fab_evnode *n = fab_evq_pop(&ch->q);
        if (n) {
            fab_cq *c = FAB_OF(n, cq_event, node)->cq;
            c->unacked++;
            fab_g.ctr.cq_events++;
            *cq = &c->cq;
            *cq_context = c->cq.cq_context;
            free(FAB_OF(n, cq_event, node));
        }
        fab_exit();
        if (n)
            return 0;
    }
}

FAB_API void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    fab_enter();
    fab_cq *c = fab_cq_of(cq);
    unsigned k = nevents < c->unacked ? nevents : c->unacked;
    c->unacked -= k;
    fab_g.ctr.cq_events_acked += k;
    fab_exit();
}
