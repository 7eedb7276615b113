/*
 * transport/engine.c - the production driver of the transfer core on one
 * libevent loop.
 *
 * Every input (a user call, a transport result, the timer, a mailbox
 * request) goes into the core, and then drain() performs the actions the
 * core produced: ops go to the group's transport, RELEASE_STAGING frees the
 * staging accounting, COMPLETE is queued for delivery.  Completions, results
 * a transport refused at start, the shutdown callback and the idle callback
 * are delivered from one deferred event, so no user callback ever runs
 * inside a call the user just made (STYLE.md 6), and the core is never
 * re-entered mid-step.
 *
 * What must stay true (docs/design.md, section 3):
 *  - I1: each accepted submit has one callback record (slot), filled by
 *    exactly one COMPLETE and freed when that completion is delivered, so
 *    the FIFO of completions never holds more slots than there are.  A
 *    posted submit carries its own completion record from the posting
 *    thread (engine_int.h): a refusal by the loop queues that record, so
 *    any number of refusals in one mailbox drain are each delivered once.
 *  - I3: staging_bytes_in_use drops when RELEASE_STAGING is performed, the
 *    moment the core says no write of the transfer is in flight.
 *  - I9: after SHUTDOWN_DONE, the deferred event first delivers every queued
 *    completion, then unregisters every pool (transport pool_removed), then
 *    calls the shutdown callback.  The pool registry, its users and that
 *    order are fsm/life.c's, which xfer-check's engine model runs too.
 *  - I10: callback slots, queues and timers are FIFO or index ordered; no
 *    pointer value reaches the core or the trace (user_data given to the core
 *    is the callback slot index).
 *  - Every allocation of the engine, its core and its mailbox goes through
 *    cfg.core.alloc (posts included, from the posting thread), so an
 *    injected allocator sees all of them.
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include <event2/event.h>

#include "base_ref.h"
#include "engine_int.h"
/* fsm_private_dep: the injected allocator with its libc default, and the
 * copy of versioned configs, shared with the pure machines. */
#include "util.h"
#include "ring.h" /* fsm/: the one ring buffer (fsm_private_dep) */
/* fsm_private_dep: the staging pool registry and the shutdown's order,
 * one piece of code with xfer-check's engine model (tools/check/engine.c),
 * so the checker's I9 monitor sees the engine's own bookkeeping. */
#include "life.h"
#include "core_int.h" /* fsm/: the core's refusal of an id (fsm_private_dep) */
#include "timer.h"
#include "copy.h"
#include "engine_copy.h"
#include "engine_gate.h"
#include "cuda_drv.h"
#include "testdev_int.h"
#include "xfer/stream.h"
#include "xfer/xfer.h"

/* A registered pool's memory; whether it is registered, and its users,
 * are in the registry beside it (fsm/life.h). */
typedef struct pool_rec {
    void *base;
    size_t len;
    xfer_mem mem;  /* HOST, or a device kind: then `cp` copies it */
    xfer_copy *cp; /* the pool's copy engine (engine_copy.c), or NULL */
} pool_rec;

typedef struct group_rec {
    xfer_transport tp;
    uint16_t nshards;
    uint8_t used;
} group_rec;

/* One accepted part of a stream, from xfer_engine_stream_part until its
 * callback is delivered: on its transfer's list, then on the engine's
 * FIFO of part releases.  One allocation through the engine's allocator. */
typedef struct part_rec {
    xfer_list_node link;
    uint64_t id;
    uint64_t bytes;     /* staging bytes of its ranges */
    uint32_t part;      /* the core's number; 0 for a posted part refused */
    int32_t status;
    xfer_part_cb cb;
    void *ud;
    uint32_t npools;
    uint32_t pools[];   /* one pool hold per range (fsm/life.h) */
} part_rec;

/* One accepted submit, from submit until its completion is delivered. */
typedef struct cb_rec {
    xfer_done done;     /* the callback, and the result once COMPLETE came */
    uint64_t user_data;
    uint64_t bytes;     /* staging bytes of the transfer */
    uint32_t pool;
    uint8_t used;       /* from submit until delivery */
    uint8_t released;   /* RELEASE_STAGING performed */
    uint8_t stream;     /* opened by xfer_engine_stream_open: no staging of
                           its own, its parts hold theirs */
    uint64_t t_submit;  /* for the latency histograms (metrics) */
    xfer_list parts;    /* a stream's parts not yet released */
    /* A stream's lease refreshes (refresh_* below): */
    uint8_t sealed;     /* xfer_engine_stream_seal took it: no more */
    uint32_t group;
    uint64_t deadline;  /* the transfer's (engine clock), 0: none */
    uint64_t rf_id;     /* the stream's transfer id */
    struct refresh_sh *rf; /* per shard, from its first RESERVE ok */
    xfer_list_node rf_link; /* on the engine's `refreshing` while rf */
    uint16_t nshards;   /* the transfer's shard count */
    uint32_t *crcs;     /* nshards CRC32Cs the caller gave
                           (xfer_engine_submit_crc, _stream_seal_crc),
                           sent with the COMMITs (and EAGERs) instead of
                           the transport's own; NULL: none.  Freed with
                           the slot (pop_done) */
} cb_rec;

/* Where one shard's reservation of an open stream stands with its lease
 * refreshes. */
enum { RF_NONE, RF_DUE, RF_SENT, RF_STOP };
typedef struct refresh_sh {
    uint64_t resv_id;
    uint64_t due;     /* RF_DUE: when the next refresh goes */
    uint32_t attempt;
    uint8_t state;
} refresh_sh;

struct xfer_engine {
    xfer_engine_config cfg;
    struct event_base *base;
    int own_base;
    xfer_timer timer;         /* the core's next deadline */
    xfer_timer stop_timer;    /* the shutdown deadline (shutdown_timeout_ns) */
    xfer_timer refresh_timer; /* the earliest refresh due (streams) */
    xfer_list refreshing;     /* cb_recs with refresh state (rf), FIFO */
    struct event *deferred;
    bool deferred_active;     /* `deferred` is on libevent's active queue */
    /* One reading of the library's own clock per batch (batch_begin). */
    bool own_clock;           /* cfg.clock is xfer_clock_monotonic */
    uint32_t batch_depth;
    uint64_t batch_now;
    bool undrained;           /* results stepped, their actions not yet
                                 performed (xfer_engine_flush) */
    xfer_core *core;
    uint32_t crcs_live;       /* slots holding caller CRCs (cb_rec.crcs):
                                 at 0 no COMMIT looks for one */
    uint32_t streams_live;    /* slots of streams (cb_rec.stream): at 0 no
                                 RESERVE answer looks for a stream to
                                 refresh */
    pool_rec *pools;
    xfer_life_pool *reg;      /* the pool registry, max_pools slots */
    xfer_ecopy *ecopy;        /* device staging's copy step; made at the
                                 first device pool */
    xfer_gates *gates;        /* the event gates; made at the first gated
                                 submit */
    group_rec *groups;
    cb_rec *cbs;
    uint32_t *cb_free, ncb_free;
    xfer_list done;             /* FIFO of completions to deliver */
    xfer_list parts_done;       /* FIFO of part releases (part_rec) */
    xfer_shard_result *refused; /* results for refused starts, */
    xfer_ring ref;              /* in a FIFO over this ring */
    xfer_mailbox *mailbox;
    xfer_engine_ctl_link *ctls; /* open control sockets (engine_ctl.c) */
    xfer_shutdown_cb shutdown_cb;
    void *shutdown_ud;
    xfer_idle_cb idle_cb;
    void *idle_ud;
    xfer_life life;           /* the shutdown's progress */
    xfer_engine_stats st;
    /* For metrics (engine_int.h): submit -> completion by outcome, and
     * failures by the phase they happened in. */
    xfer_hist lat[XFER_ENGINE_OUTCOMES];
    uint64_t failed_in_phase[XFER_PHASE_SUBMIT + 1];
};

/* ---------------------------------------------------------------------- */
/* Time and the core's timer                                               */
/* ---------------------------------------------------------------------- */

uint64_t xfer_engine_now(const xfer_engine *e)
{
    if (e->batch_depth)
        return e->batch_now;
    return e->cfg.clock(e->cfg.clock_ud);
}

/*
 * A batch is one loop callback's worth of inputs (a transport's results,
 * the deferred completions).  With the library's own clock every input of
 * the batch gets the reading taken when it began: times stay monotonic
 * (the batch reads no later than what follows it), and the per-input
 * vDSO call (6 % of xfer-bench engine's samples) goes.  An injected clock
 * is read exactly where it always was, so replays, the determinism tests
 * and the golden traces, whose clocks tick on every reading, see the same
 * sequence of times (I10).
 */
void xfer_engine_batch_begin(xfer_engine *e)
{
    if (!e->own_clock)
        return;
    if (e->batch_depth++ == 0)
        e->batch_now = e->cfg.clock(e->cfg.clock_ud);
}

static void drain(xfer_engine *e);

void xfer_engine_batch_end(xfer_engine *e)
{
    if (e->own_clock && e->batch_depth && --e->batch_depth == 0)
        xfer_engine_flush(e);
}

void xfer_engine_flush(xfer_engine *e)
{
    if (!e->undrained)
        return;
    e->undrained = false;
    drain(e);
}

static void rearm(xfer_engine *e)
{
    xfer_timer_arm(&e->timer, xfer_core_next_deadline(e->core),
                   e->cfg.clock, e->cfg.clock_ud);
}

/* Activate the deferred event once per batch: activating an active event
 * changes nothing in libevent (it keeps its place in the queue), so every
 * completion after the first of a batch skips the call.  on_deferred
 * clears the flag on entry, when libevent has taken the event off the
 * queue. */
static void kick(xfer_engine *e)
{
    if (e->deferred_active)
        return;
    e->deferred_active = true;
    event_active(e->deferred, EV_TIMEOUT, 0);
}

static void enqueue_done(xfer_engine *e, xfer_done *d)
{
    xfer_list_push_back(&e->done, &d->link);
    kick(e);
}

/* ---------------------------------------------------------------------- */
/* Performing the core's actions                                           */
/* ---------------------------------------------------------------------- */

static void refuse(xfer_engine *e, const xfer_action *a, int rc)
{
    assert(!xfer_ring_full(&e->ref));
    e->refused[xfer_ring_push(&e->ref)] =
        (xfer_shard_result){.id = a->id, .attempt = a->attempt,
                            .shard = a->shard,
                            .op = (uint8_t)xfer_action_op(a->kind),
                            .status = rc};
    e->st.ops_start_failed++;
    kick(e);
}

static void start_now(xfer_engine *e, const xfer_action *a);

/* An op the core starts: one that reads a gated transfer's bytes waits
 * for its event (engine_gate.c). */
static void start_op(xfer_engine *e, const xfer_action *a)
{
    if (e->gates &&
        (a->kind == XFER_ACT_WRITE || a->kind == XFER_ACT_EAGER)) {
        int rc = xfer_gates_hold(e->gates, a);
        if (rc == 1)
            return;
        if (rc < 0) {
            e->st.ops_started++;
            refuse(e, a, rc);
            return;
        }
    }
    start_now(e, a);
}

/* The CRC the caller gave for a's slice (a COMMIT or EAGER of a transfer
 * submitted or sealed with CRCs, on a transport that takes them: ops
 * version 3 with start_crc); NULL: the transport computes its own. */
static const uint32_t *given_crc(const xfer_engine *e, const group_rec *g,
                                 const xfer_action *a)
{
    uint64_t slot = 0;
    if (!e->crcs_live ||
        (a->kind != XFER_ACT_COMMIT && a->kind != XFER_ACT_EAGER) || !g ||
        !g->used || g->tp.ops->version < 3 || !g->tp.ops->start_crc ||
        !xfer_core_user_data(e->core, a->id, &slot) ||
        slot >= e->cfg.core.max_transfers)
        return NULL;
    const cb_rec *c = &e->cbs[slot];
    if (!c->used || !c->crcs || a->shard >= c->nshards)
        return NULL;
    return &c->crcs[a->shard];
}

static void start_now(xfer_engine *e, const xfer_action *a)
{
    group_rec *g = a->group < e->cfg.max_groups ? &e->groups[a->group] : NULL;
    const void *src = NULL;
    const pool_rec *p = NULL;
    if (a->kind == XFER_ACT_WRITE || a->kind == XFER_ACT_EAGER) {
        p = &e->pools[a->pool];
        src = (const uint8_t *)p->base + a->staging_off;
    } else if (a->kind == XFER_ACT_COMMIT && a->pool < e->cfg.max_pools) {
        /* integrity: a COMMIT names its slice for the transport's CRC32C
         * (tcp.c).  A device pool is never read here: its COMMIT goes
         * through the copy step like a WRITE, so the CRC is of the bytes a
         * D2H copy brought into a bounce buffer.  A stream's COMMIT names
         * no slice (its bytes are many staging ranges, released part by
         * part): the transport joins the CRCs it took of each run as it
         * sent it (tcp.c stream_crc; docs/integrity.md). */
        const pool_rec *cp = &e->pools[a->pool];
        uint32_t r[1][2];
        size_t n = 0;
        if (cp->base && (!cp->cp || a->len) &&
            xfer_core_stream_ranges(e->core, a->id, a->shard, r, 1, &n) ==
                XFER_ERR_NOT_FOUND) {
            src = (const uint8_t *)cp->base + a->staging_off;
            if (cp->cp)
                p = cp; /* device staging: copied first, as a WRITE */
        }
    }
    int rc = XFER_ERR_NOT_FOUND;
    const uint32_t *crc = given_crc(e, g, a);
    if (crc && (a->kind == XFER_ACT_COMMIT || !p->cp))
        /* the caller's CRC: a COMMIT reads no staging (nor copies it);
         * an EAGER still sends its bytes */
        rc = g->tp.ops->start_crc(g->tp.self, a,
                                  a->kind == XFER_ACT_EAGER ? src : NULL,
                                  *crc);
    else if (g && g->used && p && p->cp) /* device staging: copy first */
        rc = xfer_ecopy_start(e->ecopy, p->cp, a, src, g->tp);
    else if (g && g->used)
        rc = g->tp.ops->start(g->tp.self, a, src);
    e->st.ops_started++;
    if (rc)
        refuse(e, a, rc);
}

/* The staging region of slot c is released: no write of it is in flight,
 * so its pool may go and its bytes stop counting as in use. */
static void release_slot(xfer_engine *e, cb_rec *c)
{
    if (c->released)
        return;
    c->released = 1;
    if (c->stream)
        return; /* its parts held and released their staging */
    xfer_life_pool_release(e->reg, e->cfg.max_pools, c->pool);
    e->st.staging_bytes_in_use -= c->bytes;
}

/* RELEASE_STAGING carries no callback slot; the COMPLETE of the same
 * transfer, which the core puts after it in the same list (core.h), does. */
static void release_staging(xfer_engine *e, const xfer_action *acts,
                            size_t n, size_t i)
{
    const xfer_action *a = &acts[i];
    for (size_t j = i + 1; j < n; j++) {
        const xfer_action *c = &acts[j];
        if (c->kind == XFER_ACT_COMPLETE && c->id == a->id &&
            c->attempt == a->attempt) {
            release_slot(e, &e->cbs[(uint32_t)c->result.user_data]);
            return;
        }
    }
    assert(!"RELEASE_STAGING without its COMPLETE");
}

/* The slot stays taken until the completion is delivered (on_deferred). */
static void complete(xfer_engine *e, const xfer_action *a)
{
    uint32_t slot = (uint32_t)a->result.user_data;
    cb_rec *c = &e->cbs[slot];
    assert(c->used);
    release_slot(e, c); /* the core released it just before */
    if (c->rf) { /* no more refreshes */
        xfer_list_remove(&e->refreshing, &c->rf_link);
        xfer_util_free(&e->cfg.core.alloc, c->rf);
        c->rf = NULL;
    }
    xfer_gates_remove(e->gates, a->id);
    c->done.res = a->result;
    c->done.res.user_data = c->user_data;
    int32_t st = a->result.status;
    unsigned outcome = st == 0 ? 0
                       : st == XFER_ERR_CANCELLED ||
                               st == XFER_ERR_PEER_CANCELLED ||
                               st == XFER_ERR_SHUTDOWN ||
                               st == XFER_ERR_ABANDONED
                           ? 2
                           : 1;
    xfer_hist_add(&e->lat[outcome], xfer_engine_now(e) - c->t_submit);
    if (st == XFER_ERR_ABANDONED)
        e->st.abandoned++;
    if (st && a->result.phase <= XFER_PHASE_SUBMIT)
        e->failed_in_phase[a->result.phase]++;
    enqueue_done(e, &c->done);
}

/* A stream's part has no write in flight and none will be sent: its pool
 * holds and bytes go now, its callback from the deferred event. */
static void release_part(xfer_engine *e, const xfer_action *a)
{
    cb_rec *c = &e->cbs[(uint32_t)a->result.user_data];
    for (xfer_list_node *n = c->parts.head; n; n = n->next) {
        part_rec *p = XFER_LIST_ITEM(n, part_rec, link);
        if (p->part != a->part)
            continue;
        xfer_list_remove(&c->parts, &p->link);
        for (uint32_t i = 0; i < p->npools; i++)
            xfer_life_pool_release(e->reg, e->cfg.max_pools, p->pools[i]);
        e->st.staging_bytes_in_use -= p->bytes;
        p->status = a->result.status;
        xfer_list_push_back(&e->parts_done, &p->link);
        kick(e);
        return;
    }
    assert(!"RELEASE_PART of a part the engine does not hold");
}

static void perform(xfer_engine *e, const xfer_action *acts, size_t n,
                    size_t i)
{
    const xfer_action *a = &acts[i];
    switch ((xfer_action_kind)a->kind) {
    case XFER_ACT_RESERVE:
    case XFER_ACT_WRITE:
    case XFER_ACT_COMMIT:
    case XFER_ACT_CANCEL:
    case XFER_ACT_EAGER:
        start_op(e, a);
        break;
    case XFER_ACT_ABORT: {
        group_rec *g = &e->groups[a->group];
        e->st.aborts++;
        /* an op still in its copy step is not the transport's yet */
        if (g->used && !(e->gates && xfer_gates_abort(e->gates, a)) &&
            !(e->ecopy && xfer_ecopy_abort(e->ecopy, a)))
            g->tp.ops->abort(g->tp.self, a);
        break;
    }
    case XFER_ACT_RELEASE_STAGING:
        release_staging(e, acts, n, i);
        break;
    case XFER_ACT_RELEASE_PART:
        release_part(e, a);
        break;
    case XFER_ACT_COMPLETE:
        complete(e, a);
        break;
    case XFER_ACT_SHUTDOWN_DONE:
        xfer_timer_arm(&e->stop_timer, UINT64_MAX, e->cfg.clock,
                       e->cfg.clock_ud); /* nothing left to abandon */
        xfer_life_core_done(&e->life);
        kick(e);
        break;
    case XFER_ACT_COUNT_:
        break;
    }
}

/* Perform and clear the core's pending actions, then re-arm the timer.
 * Transports never answer from inside start/abort, so the core is not
 * re-entered while we walk its list. */
static void drain(xfer_engine *e)
{
    size_t n;
    e->undrained = false; /* every stepped result's actions go now */
    const xfer_action *acts = xfer_core_actions(e->core, &n);
    for (size_t i = 0; i < n; i++)
        perform(e, acts, n, i);
    xfer_core_actions_clear(e->core);
    rearm(e);
}

/* ---------------------------------------------------------------------- */
/* Loop callbacks                                                          */
/* ---------------------------------------------------------------------- */

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    xfer_engine *e = arg;
    xfer_timer_fired(&e->timer);
    xfer_engine_flush(e); /* room in the core's action list */
    xfer_core_on_timer(e->core, xfer_engine_now(e));
    drain(e);
}

/* The shutdown deadline passed with transfers still live: the core stops
 * rolling back (xfer_core_abandon) and ends each one as soon as its ops in
 * flight answered, through its own timer, which is now due. */
static void on_stop_timer(evutil_socket_t fd, short what, void *arg)
{
    xfer_engine *e = arg;
    xfer_timer_fired(&e->stop_timer);
    xfer_engine_flush(e); /* room in the core's action list */
    xfer_core_abandon(e->core, xfer_engine_now(e));
    drain(e);
}

/* The transports forget pool p, which the registry just let go. */
static void pool_gone(xfer_engine *e, uint32_t p)
{
    for (uint32_t g = 0; g < e->cfg.max_groups && !e->pools[p].cp; g++) {
        group_rec *gr = &e->groups[g];
        if (gr->used && gr->tp.ops->pool_removed)
            gr->tp.ops->pool_removed(gr->tp.self, p);
    }
    /* no copy of it is in flight: its transfers all ended (I3) */
    xfer_copy_del(e->pools[p].cp);
    e->pools[p].cp = NULL;
    e->st.pools--;
}

/* The end of a shutdown, in fsm/life.c's order: once every completion is
 * delivered, every pool is unregistered, then the callback runs. */
static void end_shutdown(xfer_engine *e)
{
    bool quiet = xfer_list_empty(&e->done) &&
                 xfer_list_empty(&e->parts_done) && xfer_ring_empty(&e->ref);
    uint32_t p;
    for (;;) {
        switch (xfer_life_next(&e->life, e->reg, e->cfg.max_pools, quiet,
                               &p)) {
        case XFER_LIFE_UNREGISTER:
            pool_gone(e, p);
            continue;
        case XFER_LIFE_REPORT:
            if (e->shutdown_cb)
                e->shutdown_cb(e->shutdown_ud);
            return;
        case XFER_LIFE_WAIT:
            return;
        }
    }
}

/* Take the oldest completion off the FIFO and free what held it: the
 * callback slot (so a submit from inside the callback finds it free) or
 * the post.  The result is copied out first. */
static void pop_done(xfer_engine *e, xfer_done *out)
{
    xfer_done *d = XFER_LIST_ITEM(xfer_list_pop_front(&e->done), xfer_done,
                                  link);
    *out = *d;
    if (d->slot == XFER_DONE_POST) {
        xfer_util_free(&e->cfg.core.alloc, d); /* the xfer_post it opens */
        return;
    }
    cb_rec *c = &e->cbs[d->slot];
    if (c->crcs) {
        xfer_util_free(&e->cfg.core.alloc, c->crcs);
        c->crcs = NULL;
        e->crcs_live--;
    }
    e->streams_live -= c->stream;
    c->used = 0;
    e->cb_free[e->ncb_free++] = d->slot;
}

bool xfer_engine_idle(const xfer_engine *e)
{
    return e && e->ncb_free == e->cfg.core.max_transfers &&
           xfer_list_empty(&e->done) && xfer_list_empty(&e->parts_done) &&
           xfer_ring_empty(&e->ref) &&
           !xfer_life_pending(&e->life) &&
           xfer_mailbox_pending(e->mailbox) == 0;
}

/* Deliver refused-op results, completions, the end of shutdown, and then
 * tell a waiting idle callback. */
static void on_deferred(evutil_socket_t fd, short what, void *arg)
{
    xfer_engine *e = arg;
    e->deferred_active = false; /* libevent took it off its active queue */
    /* Refusals are one batch; completions run user code, which may take
     * its time and then submit, so each of those reads the clock anew. */
    xfer_engine_batch_begin(e);
    while (!xfer_ring_empty(&e->ref)) {
        xfer_shard_result r = e->refused[xfer_ring_pop(&e->ref)];
        xfer_core_on_result(e->core, xfer_engine_now(e), &r);
        drain(e);
    }
    xfer_engine_batch_end(e);
    /* Part releases first: each comes before its transfer's completion. */
    while (!xfer_list_empty(&e->parts_done)) {
        part_rec *p = XFER_LIST_ITEM(xfer_list_pop_front(&e->parts_done),
                                     part_rec, link);
        part_rec copy = *p;
        xfer_util_free(&e->cfg.core.alloc, p);
        if (copy.cb)
            copy.cb(copy.ud, copy.id, copy.part, copy.status);
    }
    while (!xfer_list_empty(&e->done)) {
        xfer_done d;
        pop_done(e, &d);
        e->st.completions_delivered++;
        if (d.cb)
            d.cb(d.ud, &d.res);
    }
    end_shutdown(e);
    if (e->idle_cb && xfer_engine_idle(e)) {
        xfer_idle_cb cb = e->idle_cb;
        e->idle_cb = NULL;
        cb(e->idle_ud);
    }
}

/*
 * Inside a batch (the library's own clock: xfer_engine_batch_begin), the
 * results' actions are performed once, at xfer_engine_flush, not after
 * each result: one walk of the action list and one timer re-arm for the
 * batch.  The transport flushes before anything else it does in the batch
 * (xfer_engine_flush), so ops start in the same order as when each result
 * is drained at once.  A core whose action list is full is drained first.
 * Outside a batch, or with an injected clock (whose readings a re-arm
 * would consume), every result is drained at once, as always.
 */
static void refresh_note(xfer_engine *e, const xfer_shard_result *r,
                         uint64_t now);

void xfer_engine_deliver(struct xfer_engine *e, const xfer_shard_result *r)
{
    e->st.results_delivered++;
    if (e->ecopy) /* a bounce buffer the transport let go of */
        xfer_ecopy_on_result(e->ecopy, r);
    uint64_t now = xfer_engine_now(e);
    if (e->streams_live && r->op == XFER_OP_RESERVE && r->status == 0)
        refresh_note(e, r, now);
    int rc = xfer_core_on_result(e->core, now, r);
    if (rc == XFER_ERR_BUSY && e->undrained) {
        xfer_engine_flush(e);
        rc = xfer_core_on_result(e->core, now, r);
    }
    if (rc != 0)
        e->st.results_dropped++;
    if (e->batch_depth) {
        e->undrained = true;
        return;
    }
    drain(e);
}

/* ---------------------------------------------------------------------- */
/* Creation                                                                */
/* ---------------------------------------------------------------------- */

static void on_mail(void *ud, xfer_mail *m);
static void on_refresh_timer(evutil_socket_t fd, short what, void *arg);

static int alloc_tables(xfer_engine *e)
{
    const xfer_allocator *a = &e->cfg.core.alloc;
    uint32_t nt = e->cfg.core.max_transfers;
    e->pools = xfer_util_calloc(a, e->cfg.max_pools, sizeof *e->pools);
    e->reg = xfer_util_calloc(a, e->cfg.max_pools, sizeof *e->reg);
    e->groups = xfer_util_calloc(a, e->cfg.max_groups, sizeof *e->groups);
    e->cbs = xfer_util_calloc(a, nt, sizeof *e->cbs);
    e->cb_free = xfer_util_calloc(a, nt, sizeof *e->cb_free);
    /* Grown by add_group: see grow_refused(). */
    xfer_ring_init(&e->ref, 64);
    e->refused = xfer_util_calloc(a, e->ref.cap, sizeof *e->refused);
    if (!e->pools || !e->reg || !e->groups || !e->cbs || !e->cb_free || !e->refused)
        return XFER_ERR_NOMEM;
    for (uint32_t i = 0; i < nt; i++) {
        e->cb_free[i] = nt - 1 - i;
        e->cbs[i].done.slot = i;
    }
    e->ncb_free = nt;
    return 0;
}

static int make_loop(xfer_engine *e)
{
    if (!e->cfg.base) {
        /* A base of our own is registered with the engine's reference:
         * objects created on it keep it alive past xfer_engine_del, so
         * they may be deleted after the engine (base_ref.h). */
        struct event_base *b = event_base_new();
        if (!b)
            return XFER_ERR_IO;
        if (xfer_base_adopt(b)) {
            event_base_free(b);
            return XFER_ERR_NOMEM;
        }
        e->base = b;
        e->own_base = 1;
    } else {
        /* Another engine's own base is held like any object's. */
        e->base = e->cfg.base;
        xfer_base_ref(e->base);
    }
    int rc = xfer_timer_init(&e->timer, e->base, on_timer, e);
    if (!rc)
        rc = xfer_timer_init(&e->refresh_timer, e->base, on_refresh_timer,
                             e);
    if (!rc)
        rc = xfer_timer_init(&e->stop_timer, e->base, on_stop_timer, e);
    e->deferred = event_new(e->base, -1, 0, on_deferred, e);
    if (rc || !e->deferred)
        return XFER_ERR_IO;
    return xfer_mailbox_new(e->base, e->cfg.mailbox_cap, &e->cfg.core.alloc,
                            on_mail, e, &e->mailbox);
}

/* The bytes each version of xfer_engine_config and _stats holds (util.h). */
static const size_t config_lens[] = {
    offsetof(xfer_engine_config, shutdown_timeout_ns),
    offsetof(xfer_engine_config, copy_budget_bytes),
    sizeof(xfer_engine_config)};
static const size_t stats_lens[] = {
    offsetof(xfer_engine_stats, cancels_refused),
    offsetof(xfer_engine_stats, refreshes_sent), sizeof(xfer_engine_stats)};

void xfer_engine_config_default(xfer_engine_config *cfg)
{
    if (!cfg)
        return;
    *cfg = (xfer_engine_config){.version = XFER_ENGINE_CONFIG_VERSION,
                                .max_pools = 16, .max_groups = 16,
                                .mailbox_cap = 65536,
                                .shutdown_timeout_ns =
                                    XFER_ENGINE_SHUTDOWN_TIMEOUT_NS,
                                .copy_budget_bytes = XFER_ENGINE_COPY_BUDGET};
    xfer_core_config_default(&cfg->core);
}

int xfer_engine_new(const xfer_engine_config *cfg, xfer_engine **out)
{
    if (!out)
        return XFER_ERR_INVALID_ARG;
    xfer_engine_config c;
    xfer_engine_config_default(&c);
    if (cfg && xfer_util_versioned_copy(&c, cfg, cfg->version, config_lens,
                                        XFER_UTIL_NVERSIONS(config_lens)))
        return XFER_ERR_INVALID_ARG;
    xfer_engine *e = xfer_util_calloc(&c.core.alloc, 1, sizeof *e);
    if (!e)
        return XFER_ERR_NOMEM;
    e->cfg = c;
    if (!e->cfg.clock)
        e->cfg.clock = xfer_clock_monotonic;
    e->own_clock = e->cfg.clock == xfer_clock_monotonic;
    if (!e->cfg.max_pools)
        e->cfg.max_pools = 16;
    if (!e->cfg.max_groups)
        e->cfg.max_groups = 16;
    if (!e->cfg.mailbox_cap)
        e->cfg.mailbox_cap = 65536;
    if (!e->cfg.shutdown_timeout_ns)
        e->cfg.shutdown_timeout_ns = XFER_ENGINE_SHUTDOWN_TIMEOUT_NS;
    if (!e->cfg.copy_budget_bytes)
        e->cfg.copy_budget_bytes = XFER_ENGINE_COPY_BUDGET;
    if (!e->cfg.core.max_transfers)
        e->cfg.core.max_transfers = 65536;
    int rc = xfer_core_new(&e->cfg.core, &e->core);
    if (!rc)
        rc = alloc_tables(e);
    if (!rc)
        rc = make_loop(e);
    if (rc) {
        xfer_engine_del(e);
        return rc;
    }
    *out = e;
    return 0;
}

void xfer_engine_del(xfer_engine *e)
{
    if (!e)
        return;
    /* Control sockets still open answer with no engine from here on and
     * may be closed later (their base is held: base_ref.h). */
    for (xfer_engine_ctl_link *l = e->ctls; l; l = l->next)
        l->e = NULL;
    /* copy engines first: they wait for their backends and call nothing
     * more, so the copy step's records can go after them */
    for (uint32_t p = 0; e->pools && p < e->cfg.max_pools; p++) {
        xfer_copy_del(e->pools[p].cp);
        e->pools[p].cp = NULL;
    }
    xfer_ecopy_del(e->ecopy);
    xfer_gates_del(e->gates);
    for (uint32_t g = 0; e->groups && g < e->cfg.max_groups; g++)
        if (e->groups[g].used && e->groups[g].tp.ops->detach)
            e->groups[g].tp.ops->detach(e->groups[g].tp.self);
    xfer_mailbox_del(e->mailbox);
    xfer_timer_clear(&e->timer);
    xfer_timer_clear(&e->stop_timer);
    xfer_timer_clear(&e->refresh_timer);
    for (uint32_t i = 0; e->cbs && i < e->cfg.core.max_transfers; i++)
        xfer_util_free(&e->cfg.core.alloc, e->cbs[i].rf);
    if (e->deferred)
        event_free(e->deferred);
    /* Our reference: a base we made (or another engine made) is freed
     * here unless an object still on it (a transport, a server, a
     * consumer, another engine...) holds its own. */
    xfer_base_unref(e->base);
    xfer_core_del(e->core);
    /* Refused posts not yet delivered own their memory. */
    while (!xfer_list_empty(&e->done)) {
        xfer_done d;
        pop_done(e, &d);
    }
    /* So do parts: released and not yet delivered, or still held. */
    while (!xfer_list_empty(&e->parts_done))
        xfer_util_free(&e->cfg.core.alloc,
                       XFER_LIST_ITEM(xfer_list_pop_front(&e->parts_done),
                                      part_rec, link));
    for (uint32_t i = 0; e->cbs && i < e->cfg.core.max_transfers; i++) {
        xfer_util_free(&e->cfg.core.alloc, e->cbs[i].crcs);
        while (!xfer_list_empty(&e->cbs[i].parts))
            xfer_util_free(&e->cfg.core.alloc,
                           XFER_LIST_ITEM(xfer_list_pop_front(&e->cbs[i].parts),
                                          part_rec, link));
    }
    const xfer_allocator a = e->cfg.core.alloc;
    xfer_util_free(&a, e->pools);
    xfer_util_free(&a, e->reg);
    xfer_util_free(&a, e->groups);
    xfer_util_free(&a, e->cbs);
    xfer_util_free(&a, e->cb_free);
    xfer_util_free(&a, e->refused);
    xfer_util_free(&a, e);
}

const xfer_allocator *xfer_engine_alloc(const xfer_engine *e)
{
    return &e->cfg.core.alloc;
}

void xfer_engine_ctl_link_add(xfer_engine *e, xfer_engine_ctl_link *l)
{
    l->e = e;
    l->next = e->ctls;
    e->ctls = l;
}

void xfer_engine_ctl_link_remove(xfer_engine *e, xfer_engine_ctl_link *l)
{
    xfer_engine_ctl_link **p = &e->ctls;
    while (*p && *p != l)
        p = &(*p)->next;
    if (*p)
        *p = l->next;
}

struct event_base *xfer_engine_base(const xfer_engine *e)
{
    return e->base;
}

const xfer_core *xfer_engine_core(const xfer_engine *e)
{
    return e->core;
}

/* ---------------------------------------------------------------------- */
/* Pools and groups                                                        */
/* ---------------------------------------------------------------------- */

int xfer_engine_register_pool(xfer_engine *e, void *base, size_t len,
                              uint32_t *pool)
{
    return xfer_engine_register_pool_mem(
        e, base, len, (xfer_mem){.kind = XFER_MEM_HOST}, pool);
}

/* Whether [base, base+len) is memory of kind `mem` as far as the library
 * can tell (never by reading it). */
static bool mem_is(const void *base, size_t len, xfer_mem mem)
{
    if (mem.kind == XFER_MEM_TESTDEV)
        return xfer_testdev_contains(base, len);
    xfer_mem a = xfer_mem_of(base);
    xfer_mem b = xfer_mem_of((const uint8_t *)base + len - 1);
    return a.kind == mem.kind && a.device == mem.device &&
           b.kind == mem.kind && b.device == mem.device;
}

/* A device pool: its copy engine, and the engine's copy step at the
 * first.  The transports are not told of it (they read only the bounce
 * buffers the copy step hands them). */
static int device_pool(xfer_engine *e, void *base, size_t len, xfer_mem mem,
                       xfer_copy **cp)
{
    int rc = xfer_mem_available(mem);
    if (rc)
        return rc;
    if (!mem_is(base, len, mem))
        return XFER_ERR_INVALID_ARG;
    if (!e->ecopy &&
        (rc = xfer_ecopy_new(e, e->cfg.copy_budget_bytes, &e->ecopy)) != 0)
        return rc;
    return xfer_copy_new(e->base, mem, cp);
}

int xfer_engine_register_pool_mem(xfer_engine *e, void *base, size_t len,
                                  xfer_mem mem, uint32_t *pool)
{
    if (!e || !base || !len || !pool)
        return XFER_ERR_INVALID_ARG;
    if (mem.kind != XFER_MEM_HOST && mem.kind != XFER_MEM_CUDA &&
        mem.kind != XFER_MEM_TESTDEV)
        return XFER_ERR_INVALID_ARG;
    if (mem.kind == XFER_MEM_HOST && mem.device != 0)
        return XFER_ERR_INVALID_ARG;
    if (!xfer_life_open(&e->life))
        return XFER_ERR_SHUTDOWN;
    xfer_copy *cp = NULL;
    int rc = 0;
    if (mem.kind != XFER_MEM_HOST &&
        (rc = device_pool(e, base, len, mem, &cp)) != 0)
        return rc;
    uint32_t p;
    rc = xfer_life_pool_add(&e->life, e->reg, e->cfg.max_pools, &p);
    if (rc) {
        xfer_copy_del(cp);
        return rc;
    }
    for (uint32_t g = 0; g < e->cfg.max_groups && !cp; g++) {
        group_rec *gr = &e->groups[g];
        if (!gr->used || !gr->tp.ops->pool_added)
            continue;
        rc = gr->tp.ops->pool_added(gr->tp.self, p, base, len);
        if (rc) {
            for (uint32_t u = 0; u < g; u++)
                if (e->groups[u].used && e->groups[u].tp.ops->pool_removed)
                    e->groups[u].tp.ops->pool_removed(e->groups[u].tp.self,
                                                      p);
            xfer_life_pool_remove(e->reg, e->cfg.max_pools, p);
            return rc;
        }
    }
    e->pools[p] = (pool_rec){.base = base, .len = len, .mem = mem, .cp = cp};
    e->st.pools++;
    *pool = p;
    return 0;
}

int xfer_engine_unregister_pool(xfer_engine *e, uint32_t pool)
{
    if (!e)
        return XFER_ERR_NOT_FOUND;
    int rc = xfer_life_pool_remove(e->reg, e->cfg.max_pools, pool);
    if (rc == 0)
        pool_gone(e, pool);
    return rc;
}

/*
 * A transfer has at most one op per shard without a result, so at most
 * max_transfers x (largest group) start refusals can wait for delivery at
 * once.  The ring is sized for that when a group is added, so queueing a
 * refusal never allocates and never fails.
 */
static int grow_refused(xfer_engine *e, uint16_t nshards)
{
    size_t need = (size_t)e->cfg.core.max_transfers * nshards + 64;
    if (need <= e->ref.cap)
        return 0;
    xfer_shard_result *r =
        need > XFER_RING_MAX_CAP
            ? NULL
            : xfer_ring_grow(&e->ref, e->refused, sizeof *r, (uint32_t)need,
                             &e->cfg.core.alloc);
    if (!r)
        return XFER_ERR_NOMEM;
    e->refused = r;
    return 0;
}

int xfer_engine_add_group(xfer_engine *e, xfer_transport tp, uint32_t *group)
{
    if (!e || !tp.ops || tp.ops->version < 1 ||
        tp.ops->version > XFER_TRANSPORT_OPS_VERSION || !tp.ops->start ||
        !tp.ops->abort || !tp.ops->nshards || !group)
        return XFER_ERR_INVALID_ARG;
    if (!xfer_life_open(&e->life))
        return XFER_ERR_SHUTDOWN;
    uint32_t g = 0;
    while (g < e->cfg.max_groups && e->groups[g].used)
        g++;
    if (g == e->cfg.max_groups)
        return XFER_ERR_BUSY;
    uint16_t n = tp.ops->nshards(tp.self);
    if (n == 0 || n > XFER_MAX_SHARDS)
        return XFER_ERR_INVALID_ARG;
    int rc = grow_refused(e, n);
    if (rc)
        return rc;
    rc = tp.ops->attach ? tp.ops->attach(tp.self, e, g) : 0;
    if (rc)
        return rc;
    for (uint32_t p = 0; p < e->cfg.max_pools && tp.ops->pool_added; p++)
        if (xfer_life_pool_live(e->reg, e->cfg.max_pools, p) &&
            !e->pools[p].cp)
            tp.ops->pool_added(tp.self, p, e->pools[p].base,
                               e->pools[p].len);
    e->groups[g] = (group_rec){.tp = tp, .nshards = n, .used = 1};
    e->st.groups++;
    *group = g;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Submit, cancel, shutdown                                                */
/* ---------------------------------------------------------------------- */

/* The desc against the engine's groups and pools (its shape was checked). */
static int check_desc(const xfer_engine *e, const xfer_transfer_desc *d,
                      uint64_t *bytes)
{
    if (d->group >= e->cfg.max_groups || !e->groups[d->group].used ||
        !xfer_life_pool_live(e->reg, e->cfg.max_pools, d->pool))
        return XFER_ERR_NO_POOL; /* not "no such id": the id is fine */
    if (d->nslices != e->groups[d->group].nshards)
        return XFER_ERR_INVALID_ARG;
    const pool_rec *p = &e->pools[d->pool];
    uint64_t sum = 0;
    for (uint16_t k = 0; k < d->nslices; k++) {
        const xfer_slice *s = &d->slices[k];
        if (s->off > p->len || s->len > p->len - s->off)
            return XFER_ERR_INVALID_ARG;
        sum += s->len;
    }
    *bytes = sum;
    return 0;
}

/* No callback slot is free (every one is live or waits for delivery): the
 * id's own state gives the truer refusal, as the core would give it. */
static int refuse_full(const xfer_engine *e, uint64_t id)
{
    return xfer_core_submit_refusal(e->core, id);
}

/* The group's transport allows the eager path now (a version 2 ops table
 * that says so); the core still decides by size (eager_max_bytes). */
static bool group_eager(const xfer_engine *e, uint32_t group)
{
    const xfer_transport *tp = &e->groups[group].tp;
    return e->cfg.core.eager_max_bytes && tp->ops->version >= 2 &&
           tp->ops->eager_ok && tp->ops->eager_ok(tp->self);
}

/*
 * Refusals come in this order, so each says what is really wrong: a
 * malformed call (INVALID_ARG), then SHUTDOWN (nothing is accepted any
 * more, whatever the desc names), then the desc against the engine
 * (NOT_FOUND, INVALID_ARG), then the id and the caps (the core's order:
 * EXISTS, CANCELLED, BUSY), then NOMEM.
 */
static int submit(xfer_engine *e, const xfer_transfer_desc *d,
                  const uint32_t *crcs, xfer_complete_cb cb, void *ud,
                  void *event);

int xfer_engine_submit(xfer_engine *e, const xfer_transfer_desc *d,
                       xfer_complete_cb cb, void *ud)
{
    return submit(e, d, NULL, cb, ud, NULL);
}

int xfer_engine_submit_crc(xfer_engine *e, const xfer_transfer_desc *d,
                           const uint32_t *crcs, xfer_complete_cb cb,
                           void *ud)
{
    if (!crcs)
        return XFER_ERR_INVALID_ARG;
    return submit(e, d, crcs, cb, ud, NULL);
}

int xfer_engine_submit_gated(xfer_engine *e, const xfer_transfer_desc *d,
                             void *event, xfer_complete_cb cb, void *ud)
{
    if (!event)
        return XFER_ERR_INVALID_ARG;
    return submit(e, d, NULL, cb, ud, event);
}

int xfer_engine_submit_gated_crc(xfer_engine *e, const xfer_transfer_desc *d,
                                 void *event, const uint32_t *crcs,
                                 xfer_complete_cb cb, void *ud)
{
    if (!event || !crcs)
        return XFER_ERR_INVALID_ARG;
    return submit(e, d, crcs, cb, ud, event);
}

/* A copy of n caller CRCs, through the engine's allocator. */
static uint32_t *crcs_copy(const xfer_engine *e, const uint32_t *crcs,
                           uint16_t n)
{
    uint32_t *c = xfer_util_alloc(&e->cfg.core.alloc, (size_t)n * sizeof *c);
    if (c)
        memcpy(c, crcs, (size_t)n * sizeof *c);
    return c;
}

/* The gate kind for a transfer of pool `pool`: the test device's events
 * for its pools, CUDA events for every other pool.  <0: not available. */
static int gate_kind(const xfer_engine *e, uint32_t pool)
{
    if (e->pools[pool].mem.kind == XFER_MEM_TESTDEV)
        return XFER_GATE_TESTDEV;
    return xfer_cuda_get() ? XFER_GATE_CUDA : XFER_ERR_NOT_SUPPORTED;
}

static int submit(xfer_engine *e, const xfer_transfer_desc *d,
                  const uint32_t *crcs, xfer_complete_cb cb, void *ud,
                  void *event)
{
    if (!e || !cb || !d || d->id == 0 || !d->slices)
        return XFER_ERR_INVALID_ARG;
    if (!xfer_life_open(&e->life))
        return XFER_ERR_SHUTDOWN;
    uint64_t bytes = 0;
    int rc = check_desc(e, d, &bytes);
    if (rc)
        return rc;
    if (e->ncb_free == 0)
        return refuse_full(e, d->id);
    int kind = event ? gate_kind(e, d->pool) : 0;
    if (kind < 0)
        return kind;
    if (event && !e->gates &&
        (rc = xfer_gates_new(e, start_now, &e->gates)) != 0)
        return rc;
    /* the gate goes first, so the core's first WRITE finds it; a submit
     * the core refuses takes it away again */
    uint32_t *given = NULL;
    if (crcs && !(given = crcs_copy(e, crcs, d->nslices)))
        return XFER_ERR_NOMEM;
    if (event && (rc = xfer_gates_add(e->gates, d->id, event, kind)) != 0) {
        xfer_util_free(&e->cfg.core.alloc, given);
        return rc;
    }
    xfer_engine_flush(e); /* room in the core's action list */
    uint32_t slot = e->cb_free[e->ncb_free - 1];
    uint64_t now = xfer_engine_now(e);
    xfer_submit_args a = {
        .id = d->id, .group = d->group, .nshards = d->nslices,
        .pool = d->pool, .slices = d->slices,
        .deadline_ns = d->timeout_ns ? now + d->timeout_ns : 0,
        .user_data = slot, .eager_ok = group_eager(e, d->group)};
    rc = xfer_core_submit(e->core, now, &a);
    if (rc) {
        if (event)
            xfer_gates_remove(e->gates, d->id);
        xfer_util_free(&e->cfg.core.alloc, given);
        return rc;
    }
    e->ncb_free--;
    e->cbs[slot] = (cb_rec){.done = {.cb = cb, .ud = ud, .slot = slot},
                            .user_data = d->user_data, .bytes = bytes,
                            .pool = d->pool, .used = 1, .t_submit = now,
                            .nshards = d->nslices, .crcs = given};
    e->crcs_live += given != NULL;
    xfer_life_pool_hold(e->reg, e->cfg.max_pools, d->pool);
    e->st.staging_bytes_in_use += bytes;
    drain(e);
    return 0;
}

int xfer_engine_cancel(xfer_engine *e, uint64_t id)
{
    if (!e || id == 0)
        return XFER_ERR_INVALID_ARG;
    xfer_engine_flush(e); /* room in the core's action list */
    int rc = xfer_core_cancel(e->core, xfer_engine_now(e), id);
    if (rc == XFER_ERR_BUSY)
        e->st.cancels_refused++;
    drain(e);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Lease refreshes of open streams (docs/streaming.md)                     */
/* ---------------------------------------------------------------------- */

/* A stream may wait for its parts longer than a shard's lease: while it is
 * open and unsealed, each shard's reservation is refreshed, first as soon
 * as its reserve answered (the answer says how long the shard's lease
 * runs), then when a third of what was granted has passed, so two
 * refreshes can be lost or late before the lease ends.  Each asks for no
 * more than the time left to the transfer's deadline.  The first refusal
 * (or a transport that cannot: an older shard) ends that shard's
 * refreshes, and the lease then runs out as it always did.  Nothing here
 * is an action of the core: a refresh changes no state of the transfer,
 * only how long a shard keeps what the core already holds, and the core's
 * deadline, cancel and failure paths end the stream exactly as before
 * (after which the refreshes stop: the transfer is no longer open). */

/* The shortest wait between two refreshes of one reservation, so a shard
 * that grants almost nothing cannot make the engine spin. */
#define REFRESH_MIN_NS 1000000ull
/* After a refresh that could not reach its shard (the connection is down,
 * or the transport's table of refreshes in flight is full), the next try
 * waits this long: a reconnect keeps the session and its reservations. */
#define REFRESH_RETRY_NS 10000000ull

/* A refresh that did not reach its shard is tried again later. */
static bool refresh_retry(int rc)
{
    return rc == XFER_ERR_CONN_LOST || rc == XFER_ERR_BUSY ||
           rc == XFER_ERR_NOMEM;
}

static void refresh_arm(xfer_engine *e)
{
    uint64_t due = UINT64_MAX;
    for (const xfer_list_node *n = e->refreshing.head; n; n = n->next) {
        const cb_rec *c = XFER_LIST_ITEM(n, cb_rec, rf_link);
        if (c->sealed)
            continue;
        for (uint16_t k = 0; k < e->groups[c->group].nshards; k++)
            if (c->rf[k].state == RF_DUE && c->rf[k].due < due)
                due = c->rf[k].due;
    }
    xfer_timer_arm(&e->refresh_timer, due, e->cfg.clock, e->cfg.clock_ud);
}

/* One refresh is due at `due`: the timer goes off then at the latest
 * (the walk of every stream is the timer's, not each answer's). */
static void refresh_arm_at(xfer_engine *e, uint64_t due)
{
    xfer_timer *t = &e->refresh_timer;
    if (t->stale || due < t->armed_at)
        xfer_timer_arm(t, due, e->cfg.clock, e->cfg.clock_ud);
}

/* The live stream record of id, if the engine streams it now. */
static cb_rec *refresh_rec(xfer_engine *e, uint64_t id)
{
    uint64_t slot;
    if (!xfer_core_user_data(e->core, id, &slot) ||
        slot >= e->cfg.core.max_transfers)
        return NULL;
    cb_rec *c = &e->cbs[slot];
    return c->used && c->stream ? c : NULL;
}

/* A reserve of a stream's shard answered ok: its refreshes start. */
static void refresh_note(xfer_engine *e, const xfer_shard_result *r,
                         uint64_t now)
{
    cb_rec *c = refresh_rec(e, r->id);
    if (!c || c->sealed || c->group >= e->cfg.max_groups)
        return;
    const group_rec *g = &e->groups[c->group];
    const xfer_transport_ops *ops = g->tp.ops;
    if (ops->version < 3 || !ops->refresh || r->shard >= g->nshards)
        return;
    if (!c->rf) {
        c->rf = xfer_util_calloc(&e->cfg.core.alloc, g->nshards,
                                 sizeof *c->rf);
        if (!c->rf)
            return; /* no refreshes: the leases run as they would */
        xfer_list_push_back(&e->refreshing, &c->rf_link);
    }
    c->rf[r->shard] = (refresh_sh){.resv_id = r->resv_id, .due = now,
                                   .attempt = r->attempt, .state = RF_DUE};
    refresh_arm_at(e, now);
}

/* Still open and unsealed: RESERVING or WRITING (a failure, a cancel or a
 * deadline moved it to CANCELLING; the seal to COMPLETING). */
static bool refresh_open(const xfer_engine *e, uint64_t id, const cb_rec *c)
{
    if (c->sealed)
        return false;
    xfer_transfer_state st = xfer_core_state(e->core, id);
    return st == XFER_TRANSFER_STATE_RESERVING ||
           st == XFER_TRANSFER_STATE_WRITING;
}

static void refresh_send(xfer_engine *e, cb_rec *c, uint64_t id, uint16_t k,
                         uint64_t now)
{
    refresh_sh *f = &c->rf[k];
    uint64_t want = 0;
    if (c->deadline) {
        if (c->deadline <= now) {
            f->state = RF_STOP; /* the core's deadline ends it */
            return;
        }
        want = c->deadline - now;
    }
    const group_rec *g = &e->groups[c->group];
    f->state = RF_SENT;
    e->st.refreshes_sent++;
    int rc = g->tp.ops->refresh(g->tp.self, k, id, f->attempt, f->resv_id,
                                want);
    if (rc) { /* nothing went out, no answer will come */
        e->st.refreshes_sent--;
        f->state = refresh_retry(rc) ? RF_DUE : RF_STOP;
        f->due = now + REFRESH_RETRY_NS;
    }
}

static void on_refresh_timer(evutil_socket_t fd, short what, void *arg)
{
    xfer_engine *e = arg;
    xfer_timer_fired(&e->refresh_timer);
    uint64_t now = xfer_engine_now(e);
    for (xfer_list_node *n = e->refreshing.head; n; n = n->next) {
        cb_rec *c = XFER_LIST_ITEM(n, cb_rec, rf_link);
        for (uint16_t k = 0; k < e->groups[c->group].nshards; k++) {
            refresh_sh *f = &c->rf[k];
            if (f->state != RF_DUE || f->due > now)
                continue;
            if (!refresh_open(e, c->rf_id, c)) {
                f->state = RF_STOP;
                continue;
            }
            refresh_send(e, c, c->rf_id, k, now);
        }
    }
    refresh_arm(e);
}

void xfer_engine_refreshed(struct xfer_engine *e, uint64_t id,
                           uint16_t shard, uint32_t attempt, int status,
                           uint64_t granted_ns)
{
    if (!e)
        return;
    cb_rec *c = refresh_rec(e, id);
    if (!c || !c->rf || shard >= e->groups[c->group].nshards)
        return;
    refresh_sh *f = &c->rf[shard];
    if (f->state != RF_SENT || f->attempt != attempt)
        return;
    if (refresh_retry(status)) {
        f->due = xfer_engine_now(e) + REFRESH_RETRY_NS;
        f->state = RF_DUE;
    } else if (status) {
        e->st.refreshes_refused++;
        f->state = RF_STOP;
    } else {
        e->st.refreshes_granted++;
        uint64_t wait = granted_ns / 3;
        f->due = xfer_engine_now(e) + (wait < REFRESH_MIN_NS ? REFRESH_MIN_NS
                                                              : wait);
        f->state = RF_DUE;
    }
    if (f->state == RF_DUE)
        refresh_arm_at(e, f->due);
}

/* ---------------------------------------------------------------------- */
/* Streams (xfer/stream.h)                                                 */
/* ---------------------------------------------------------------------- */

int xfer_engine_stream_open(xfer_engine *e, const xfer_stream_desc *d,
                            xfer_complete_cb cb, void *ud)
{
    if (!e || !cb || !d || d->id == 0 || !d->lens || d->nshards == 0)
        return XFER_ERR_INVALID_ARG;
    for (uint16_t k = 0; k < d->nshards; k++)
        if (d->lens[k] == 0)
            return XFER_ERR_INVALID_ARG;
    if (!xfer_life_open(&e->life))
        return XFER_ERR_SHUTDOWN;
    if (d->group >= e->cfg.max_groups || !e->groups[d->group].used)
        return XFER_ERR_NO_POOL;
    if (d->nshards != e->groups[d->group].nshards)
        return XFER_ERR_INVALID_ARG;
    if (e->ncb_free == 0)
        return refuse_full(e, d->id);
    xfer_engine_flush(e); /* room in the core's action list */
    uint32_t slot = e->cb_free[e->ncb_free - 1];
    uint64_t now = xfer_engine_now(e);
    xfer_open_args a = {
        .id = d->id, .group = d->group, .nshards = d->nshards,
        .lens = d->lens,
        .deadline_ns = d->timeout_ns ? now + d->timeout_ns : 0,
        .user_data = slot};
    int rc = xfer_core_open(e->core, now, &a);
    if (rc)
        return rc;
    e->ncb_free--;
    e->cbs[slot] = (cb_rec){.done = {.cb = cb, .ud = ud, .slot = slot},
                            .user_data = d->user_data, .used = 1,
                            .stream = 1, .t_submit = now,
                            .group = d->group, .deadline = a.deadline_ns,
                            .rf_id = d->id,
                            .nshards = d->nshards};
    e->streams_live++;
    drain(e);
    return 0;
}

/* The callback slot of live transfer id (the core echoes it as the
 * transfer's user_data). */
static uint32_t stream_slot_of(const xfer_engine *e, uint64_t id)
{
    uint64_t slot = 0;
    bool live = xfer_core_user_data(e->core, id, &slot);
    assert(live);
    (void)live;
    return (uint32_t)slot;
}

/* The core refused a part or a seal as ended (XFER_ERR_STATE): while the
 * failed transfer's completion still waits for delivery, the caller gets
 * the transfer's status, as it would have a moment earlier. */
static int ended_status(const xfer_engine *e, uint64_t id, int rc)
{
    if (rc != XFER_ERR_STATE)
        return rc;
    for (const xfer_list_node *n = e->done.head; n; n = n->next) {
        const xfer_done *d = XFER_LIST_ITEM(n, xfer_done, link);
        if (d->slot != XFER_DONE_POST && d->res.id == id && d->res.status)
            return d->res.status;
    }
    return rc;
}

int xfer_engine_stream_part(xfer_engine *e, const xfer_part_desc *d,
                            uint32_t *part)
{
    if (!e || !d || d->id == 0 || !d->ranges || d->nranges == 0 ||
        d->nranges > XFER_STREAM_MAX_RANGES)
        return XFER_ERR_INVALID_ARG;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < d->nranges; i++) {
        const xfer_range *r = &d->ranges[i];
        if (!xfer_life_pool_live(e->reg, e->cfg.max_pools, r->pool))
            return XFER_ERR_NO_POOL;
        const pool_rec *p = &e->pools[r->pool];
        if (r->len == 0 || r->staging_off > p->len ||
            r->len > p->len - r->staging_off)
            return XFER_ERR_INVALID_ARG;
        bytes += r->len;
    }
    const xfer_allocator *al = &e->cfg.core.alloc;
    part_rec *p = xfer_util_alloc(al, sizeof *p + (size_t)d->nranges *
                                                      sizeof p->pools[0]);
    if (!p)
        return XFER_ERR_NOMEM;
    xfer_engine_flush(e); /* room in the core's action list */
    uint32_t seq = 0;
    int rc = xfer_core_part(e->core, xfer_engine_now(e), d->id, d->ranges,
                            d->nranges, &seq);
    if (rc) {
        xfer_util_free(al, p);
        return ended_status(e, d->id, rc);
    }
    /* The core took it: the transfer is a live stream of ours. */
    uint32_t slot = stream_slot_of(e, d->id);
    cb_rec *c = &e->cbs[slot];
    *p = (part_rec){.id = d->id, .bytes = bytes, .part = seq, .cb = d->cb,
                    .ud = d->ud, .npools = d->nranges};
    for (uint32_t i = 0; i < d->nranges; i++) {
        p->pools[i] = d->ranges[i].pool;
        xfer_life_pool_hold(e->reg, e->cfg.max_pools, d->ranges[i].pool);
    }
    xfer_list_push_back(&c->parts, &p->link);
    e->st.staging_bytes_in_use += bytes;
    if (part)
        *part = seq;
    drain(e);
    return 0;
}

int xfer_engine_stream_seal(xfer_engine *e, uint64_t id)
{
    if (!e || id == 0)
        return XFER_ERR_INVALID_ARG;
    xfer_engine_flush(e); /* room in the core's action list */
    int rc = xfer_core_seal(e->core, xfer_engine_now(e), id);
    uint64_t slot;
    if (rc == 0 && xfer_core_user_data(e->core, id, &slot))
        e->cbs[slot].sealed = 1; /* its refreshes stop */
    drain(e);
    return ended_status(e, id, rc);
}

int xfer_engine_stream_seal_crc(xfer_engine *e, uint64_t id,
                                const uint32_t *crcs, uint16_t ncrcs)
{
    if (!e || id == 0 || !crcs)
        return XFER_ERR_INVALID_ARG;
    uint64_t slot = 0;
    if (!xfer_core_user_data(e->core, id, &slot))
        return xfer_engine_stream_seal(e, id); /* its own refusal */
    cb_rec *c = &e->cbs[(uint32_t)slot];
    if (!c->stream || c->crcs)
        return xfer_engine_stream_seal(e, id); /* not a stream, or sealed */
    if (ncrcs != c->nshards)
        return XFER_ERR_INVALID_ARG;
    /* in place before the seal: its COMMITs may start inside it */
    if (!(c->crcs = crcs_copy(e, crcs, ncrcs)))
        return XFER_ERR_NOMEM;
    e->crcs_live++;
    int rc = xfer_engine_stream_seal(e, id);
    if (rc) {
        xfer_util_free(&e->cfg.core.alloc, c->crcs);
        c->crcs = NULL;
        e->crcs_live--;
    }
    return rc;
}

/* A posted open: its completion record first (a refusal by the loop is
 * delivered through it, as a posted submit's), then the copied desc. */
typedef struct open_post {
    xfer_done done;
    xfer_stream_desc d;
    uint32_t lens[];
} open_post;

typedef struct part_post {
    xfer_part_desc d;
    xfer_range ranges[];
} part_post;

int xfer_engine_post_stream_open(xfer_engine *e, const xfer_stream_desc *d,
                                 xfer_complete_cb cb, void *ud)
{
    if (!e || !d || !cb || d->id == 0 || !d->lens || d->nshards == 0 ||
        d->nshards > XFER_MAX_SHARDS)
        return XFER_ERR_INVALID_ARG;
    const xfer_allocator *al = &e->cfg.core.alloc;
    open_post *p = xfer_util_alloc(al, sizeof *p + (size_t)d->nshards *
                                                       sizeof p->lens[0]);
    if (!p)
        return XFER_ERR_NOMEM;
    memset(&p->done, 0, sizeof p->done);
    p->done = (xfer_done){.cb = cb, .ud = ud, .slot = XFER_DONE_POST};
    p->d = *d;
    memcpy(p->lens, d->lens, (size_t)d->nshards * sizeof p->lens[0]);
    p->d.lens = p->lens;
    xfer_mail m = {.kind = XFER_MAIL_STREAM_OPEN, .id = d->id, .blob = p};
    int rc = xfer_mailbox_post(e->mailbox, &m);
    if (rc)
        xfer_util_free(al, p);
    return rc;
}

int xfer_engine_post_stream_part(xfer_engine *e, const xfer_part_desc *d)
{
    if (!e || !d || d->id == 0 || !d->ranges || d->nranges == 0 ||
        d->nranges > XFER_STREAM_MAX_RANGES)
        return XFER_ERR_INVALID_ARG;
    const xfer_allocator *al = &e->cfg.core.alloc;
    part_post *p = xfer_util_alloc(al, sizeof *p + (size_t)d->nranges *
                                                       sizeof p->ranges[0]);
    if (!p)
        return XFER_ERR_NOMEM;
    p->d = *d;
    memcpy(p->ranges, d->ranges, (size_t)d->nranges * sizeof p->ranges[0]);
    p->d.ranges = p->ranges;
    xfer_mail m = {.kind = XFER_MAIL_STREAM_PART, .id = d->id, .blob = p};
    int rc = xfer_mailbox_post(e->mailbox, &m);
    if (rc)
        xfer_util_free(al, p);
    return rc;
}

int xfer_engine_post_stream_seal(xfer_engine *e, uint64_t id,
                                 xfer_cancel_cb cb, void *ud)
{
    if (!e || id == 0)
        return XFER_ERR_INVALID_ARG;
    xfer_mail m = {.kind = XFER_MAIL_STREAM_SEAL, .id = id, .cancel_cb = cb,
                   .ud = ud};
    return xfer_mailbox_post(e->mailbox, &m);
}

/* A posted seal's CRCs (the mail's blob). */
typedef struct seal_post {
    uint16_t n;
    uint32_t crcs[];
} seal_post;

int xfer_engine_post_stream_seal_crc(xfer_engine *e, uint64_t id,
                                     const uint32_t *crcs, uint16_t ncrcs,
                                     xfer_cancel_cb cb, void *ud)
{
    if (!e || id == 0 || !crcs || ncrcs == 0 || ncrcs > XFER_MAX_SHARDS)
        return XFER_ERR_INVALID_ARG;
    const xfer_allocator *al = &e->cfg.core.alloc;
    seal_post *p = xfer_util_alloc(al, sizeof *p + ncrcs * sizeof(uint32_t));
    if (!p)
        return XFER_ERR_NOMEM;
    p->n = ncrcs;
    memcpy(p->crcs, crcs, ncrcs * sizeof(uint32_t));
    xfer_mail m = {.kind = XFER_MAIL_STREAM_SEAL, .id = id, .cancel_cb = cb,
                   .ud = ud, .blob = p};
    int rc = xfer_mailbox_post(e->mailbox, &m);
    if (rc)
        xfer_util_free(al, p);
    return rc;
}

/* A stream's mail on the loop.  A refusal still owes the poster its
 * callback (the post returned 0): an open's through its own completion
 * record, a part's by its callback, at once (this runs from the mailbox's
 * event, never inside a user's call). */
static void on_stream_mail(xfer_engine *e, xfer_mail *m)
{
    const xfer_allocator *al = &e->cfg.core.alloc;
    if (m->kind == XFER_MAIL_STREAM_OPEN) {
        open_post *p = m->blob;
        int rc = xfer_engine_stream_open(e, &p->d, p->done.cb, p->done.ud);
        if (rc == 0) {
            xfer_util_free(al, p);
            return;
        }
        e->st.posts_refused++;
        p->done.res = (xfer_result){.id = p->d.id, .status = rc,
                                    .phase = XFER_PHASE_SUBMIT,
                                    .first_failed_shard = XFER_SHARD_NONE,
                                    .user_data = p->d.user_data};
        enqueue_done(e, &p->done); /* pop_done frees p: done is first */
        return;
    }
    if (m->kind == XFER_MAIL_STREAM_PART) {
        part_post *p = m->blob;
        int rc = xfer_engine_stream_part(e, &p->d, NULL);
        if (rc) {
            e->st.posts_refused++;
            if (p->d.cb)
                p->d.cb(p->d.ud, p->d.id, 0, rc);
        }
        xfer_util_free(al, p);
        return;
    }
    seal_post *sp = m->blob;
    int rc = sp ? xfer_engine_stream_seal_crc(e, m->id, sp->crcs, sp->n)
                : xfer_engine_stream_seal(e, m->id);
    xfer_util_free(al, sp);
    if (m->cancel_cb)
        m->cancel_cb(m->ud, m->id, rc);
}

/*
 * A mailbox submit the loop refused still owes its callback (it was
 * accepted into the mailbox): its post becomes the error completion, with
 * phase SUBMIT.  The post was allocated by the posting thread for exactly
 * this, so no refusal is ever bounded by max_transfers or lost.
 */
static void on_mail(void *ud, xfer_mail *m)
{
    xfer_engine *e = ud;
    if (m->kind >= XFER_MAIL_STREAM_OPEN && m->kind <= XFER_MAIL_STREAM_SEAL) {
        on_stream_mail(e, m);
        if (e->idle_cb)
            kick(e);
        return;
    }
    if (m->kind == XFER_MAIL_CANCEL || m->kind == XFER_MAIL_CALL) {
        if (m->kind == XFER_MAIL_CANCEL) {
            /* The loop's answer reaches the caller when it asked for it;
             * a refusal it did not ask about is still counted
             * (xfer_engine_cancel). */
            int rc = xfer_engine_cancel(e, m->id);
            if (m->cancel_cb)
                m->cancel_cb(m->ud, m->id, rc);
        } else {
            m->fn(m->ud);
        }
        if (e->idle_cb)
            kick(e); /* the last mail may leave the engine idle */
        return;
    }
    xfer_post *p = m->post;
    int rc = p->crcs ? xfer_engine_submit_crc(e, &p->desc, p->crcs,
                                              p->done.cb, p->done.ud)
                     : xfer_engine_submit(e, &p->desc, p->done.cb,
                                          p->done.ud);
    if (rc == 0) {
        xfer_util_free(&e->cfg.core.alloc, p);
        return;
    }
    e->st.posts_refused++;
    p->done.res = (xfer_result){.id = p->desc.id, .status = rc,
                                .phase = XFER_PHASE_SUBMIT,
                                .first_failed_shard = XFER_SHARD_NONE,
                                .user_data = p->desc.user_data};
    enqueue_done(e, &p->done);
}

static int post_submit(xfer_engine *e, const xfer_transfer_desc *d,
                       const uint32_t *crcs, xfer_complete_cb cb, void *ud);

int xfer_engine_post_submit(xfer_engine *e, const xfer_transfer_desc *d,
                            xfer_complete_cb cb, void *ud)
{
    if (!e || !d || !cb || d->id == 0 || d->nslices > XFER_MAX_SHARDS ||
        (d->nslices && !d->slices))
        return XFER_ERR_INVALID_ARG;
    return post_submit(e, d, NULL, cb, ud);
}

int xfer_engine_post_submit_crc(xfer_engine *e, const xfer_transfer_desc *d,
                                const uint32_t *crcs, xfer_complete_cb cb,
                                void *ud)
{
    if (!e || !d || !cb || !crcs || d->id == 0 ||
        d->nslices > XFER_MAX_SHARDS || (d->nslices && !d->slices))
        return XFER_ERR_INVALID_ARG;
    return post_submit(e, d, crcs, cb, ud);
}

static int post_submit(xfer_engine *e, const xfer_transfer_desc *d,
                       const uint32_t *crcs, xfer_complete_cb cb, void *ud)
{
    xfer_post *p = xfer_mailbox_new_post_crc(&e->cfg.core.alloc, d, crcs,
                                             cb, ud);
    if (!p)
        return XFER_ERR_NOMEM;
    xfer_mail m = {.kind = XFER_MAIL_SUBMIT, .id = d->id, .post = p};
    int rc = xfer_mailbox_post(e->mailbox, &m);
    if (rc)
        xfer_util_free(&e->cfg.core.alloc, p);
    return rc;
}

int xfer_engine_post_cancel(xfer_engine *e, uint64_t id)
{
    if (!e || id == 0)
        return XFER_ERR_INVALID_ARG;
    xfer_mail m = {.kind = XFER_MAIL_CANCEL, .id = id};
    return xfer_mailbox_post(e->mailbox, &m);
}

int xfer_engine_post_cancel_cb(xfer_engine *e, uint64_t id,
                               xfer_cancel_cb cb, void *ud)
{
    if (!e || id == 0 || !cb)
        return XFER_ERR_INVALID_ARG;
    xfer_mail m = {.kind = XFER_MAIL_CANCEL, .id = id, .cancel_cb = cb,
                   .ud = ud};
    return xfer_mailbox_post(e->mailbox, &m);
}

int xfer_engine_post_call(xfer_engine *e, xfer_call_fn fn, void *ud)
{
    if (!e || !fn)
        return XFER_ERR_INVALID_ARG;
    xfer_mail m = {.kind = XFER_MAIL_CALL, .fn = fn, .ud = ud};
    return xfer_mailbox_post(e->mailbox, &m);
}

int xfer_engine_on_idle(xfer_engine *e, xfer_idle_cb cb, void *ud)
{
    if (!e)
        return XFER_ERR_INVALID_ARG;
    e->idle_cb = cb;
    e->idle_ud = ud;
    if (cb)
        kick(e);
    return 0;
}

int xfer_engine_shutdown(xfer_engine *e, xfer_shutdown_cb cb, void *ud)
{
    if (!e)
        return XFER_ERR_INVALID_ARG;
    if (xfer_life_stop(&e->life))
        return XFER_ERR_STATE;
    e->shutdown_cb = cb;
    e->shutdown_ud = ud;
    xfer_engine_flush(e); /* room in the core's action list */
    uint64_t now = xfer_engine_now(e);
    xfer_core_shutdown(e->core, now);
    uint64_t to = e->cfg.shutdown_timeout_ns;
    if (to != UINT64_MAX) /* UINT64_MAX: no deadline */
        xfer_timer_arm(&e->stop_timer, now + to < now ? UINT64_MAX - 1 : now + to,
                       e->cfg.clock, e->cfg.clock_ud);
    drain(e); /* SHUTDOWN_DONE, if it came at once, disarms it */
    return 0;
}

const xfer_hist *xfer_engine_latency(const xfer_engine *e, unsigned outcome)
{
    return outcome < XFER_ENGINE_OUTCOMES ? &e->lat[outcome] : NULL;
}

uint64_t xfer_engine_failed_in_phase(const xfer_engine *e, unsigned phase)
{
    return phase <= XFER_PHASE_SUBMIT ? e->failed_in_phase[phase] : 0;
}

int xfer_engine_stats_get_versioned(const xfer_engine *e, uint32_t version,
                                    xfer_engine_stats *st)
{
    if (!e || !st)
        return XFER_ERR_INVALID_ARG;
    xfer_engine_stats cur = e->st;
    xfer_core_stats_get(e->core, &cur.core);
    cur.mailbox_posts = xfer_mailbox_posts(e->mailbox);
    return xfer_util_versioned_copy(st, &cur, version, stats_lens,
                                    XFER_UTIL_NVERSIONS(stats_lens));
}
