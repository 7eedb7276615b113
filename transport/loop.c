/*
 * transport/loop.c - the in-process transport: S xfer_shard objects on the
 * engine's event base, every message delivered through a deferred callback,
 * with deterministic fault injection.
 *
 * An op travels as messages: ARRIVE (the request reaches the shard and is
 * applied), WRITE_END (a write that began on the shard finishes), REPLY (the
 * answer reaches the engine).  Messages sit in one heap ordered by (due
 * time, sequence number) and are run from one libevent event, so a seeded
 * run delivers in the same order every time (I10).
 *
 * What must stay true:
 *  - every started op gets exactly one REPLY to the engine (the contract of
 *    xfer/transport.h), including aborted, dropped and shard-down ops;
 *  - a WRITE's staging bytes are read only at ARRIVE, before its REPLY, so
 *    the engine may release staging once the result came (I3);
 *  - a write that began on a shard always gets its write_end on that shard,
 *    even if the producer already got a failure (connection lost), so the
 *    shard never frees memory under it (I4);
 *  - every allocation goes through cfg.alloc (the shards' through theirs,
 *    which defaults to it), and running out of memory delays a reply but
 *    never loses one.
 */
#include <assert.h>
#include <string.h>

#include <event2/event.h>

#include "base_ref.h"
#include "crc.h"
#include "engine_int.h"
/* fsm_private_dep: the injected allocator with its libc default, and the
 * copy of versioned configs, shared with the pure machines. */
#include "util.h"
#include "fault.h" /* fsm/: the fault rules' one matcher (fsm_private_dep) */
#include "list.h" /* fsm/: the one intrusive list (fsm_private_dep) */
#include "ring.h" /* fsm/: the one ring buffer (fsm_private_dep) */
#include "timer.h"
#include "xfer/loop.h"

#define LOOP_BATCH 512
/* Finished op records kept for reuse, at most (the rest go back to the
 * allocator): 64 transfers in flight on 4 shards keep 256 ops busy. */
#define LOOP_SPARE_OPS 1024

enum { MSG_ARRIVE, MSG_WRITE_END, MSG_REPLY };
enum { OP_QUEUED, OP_DROPPED, OP_WRITING, OP_REPLYING };

typedef struct loop_op loop_op;

typedef struct loop_msg {
    uint64_t due, seq;
    loop_op *op; /* NULL: cancelled */
    struct loop_msg *spare_next; /* on the spare list */
    uint8_t kind;
} loop_msg;

struct loop_op {
    xfer_action a;
    const uint8_t *src;
    xfer_shard_result res;
    loop_msg *msg;   /* the op's pending message, if any */
    xfer_list_node link; /* on the list of outstanding ops */
    loop_op *retry_next; /* on the retry list: REPLY not yet queued; on
                            the spare list once finished */
    uint8_t state, fault, replied;
    uint8_t lost; /* its shard went down mid-write, and there was no memory
                     to answer at once: WRITE_END answers CONN_LOST */
    int32_t fault_err;
    bool crc_given;  /* a COMMIT with the caller's CRC (start_crc): crc */
    uint32_t crc;
};

/* A reservation the loop's shards granted, where it lies in the pool: for
 * the check of a COMMIT that carries the caller's CRC (start_crc).  Kept
 * from RESERVE to COMMIT or CANCEL; past LOOP_REGIONS_MAX outstanding, a
 * region is not kept and its commit goes unchecked (never wrongly
 * refused). */
typedef struct loop_region {
    uint64_t id, resv_id, addr;
    uint32_t attempt, len;
    uint16_t shard;
} loop_region;
#define LOOP_REGIONS_MAX 65536u

struct xfer_loop {
    struct event_base *base;
    xfer_loop_config cfg;
    xfer_shard *shards[XFER_MAX_SHARDS];
    uint8_t down[XFER_MAX_SHARDS];
    struct xfer_engine *engine;
    bool del_pending; /* xfer_loop_del came while attached: detach frees */
    struct event *run_ev;
    xfer_timer shard_timer; /* the shards' earliest deadline */
    loop_msg **heap;     /* delayed messages, by (due, seq) */
    size_t nheap, capheap;
    loop_msg **fifo;     /* messages due at once, in seq order, */
    xfer_ring fring;     /* in a FIFO over this ring */
    loop_msg *spare;     /* recycled messages */
    loop_op *spare_ops;  /* recycled op records, at most LOOP_SPARE_OPS */
    uint32_t nspare_ops;
    bool run_active;     /* run_ev is on libevent's active queue */
    uint64_t last_now;   /* the latest clock reading */
    uint64_t seq;
    xfer_list ops;       /* outstanding, oldest first */
    loop_op *retry; /* replies that could not be queued (no memory) */
    xfer_faults faults;  /* the rules, their firings, their generator */
    xfer_loop_stats st;
    loop_region *regions; /* outstanding reservations (loop_region) */
    uint32_t nregions, capregions;
};

static uint64_t now_of(xfer_loop *l)
{
    uint64_t now = l->cfg.clock(l->cfg.clock_ud);
    if (now > l->last_now)
        l->last_now = now;
    return l->last_now;
}

/* now_of as an xfer_clock_fn, for the shard timer. */
static uint64_t loop_clock(void *ud)
{
    return now_of(ud);
}

static loop_op *op_of(xfer_list_node *n)
{
    return n ? XFER_LIST_ITEM(n, loop_op, link) : NULL;
}

/* ---------------------------------------------------------------------- */
/* The message heap                                                        */
/* ---------------------------------------------------------------------- */

static int before(const loop_msg *a, const loop_msg *b)
{
    return a->due != b->due ? a->due < b->due : a->seq < b->seq;
}

static void heap_swap(xfer_loop *l, size_t i, size_t j)
{
    loop_msg *t = l->heap[i];
    l->heap[i] = l->heap[j];
    l->heap[j] = t;
}

static int heap_push(xfer_loop *l, loop_msg *m)
{
    if (l->nheap == l->capheap) {
        size_t cap = l->capheap ? 2 * l->capheap : 256;
        loop_msg **h = xfer_util_calloc(&l->cfg.alloc, cap, sizeof *h);
        if (!h)
            return XFER_ERR_NOMEM;
        if (l->nheap)
            memcpy(h, l->heap, l->nheap * sizeof *h);
        xfer_util_free(&l->cfg.alloc, l->heap);
        l->heap = h;
        l->capheap = cap;
    }
    size_t i = l->nheap++;
    l->heap[i] = m;
    while (i > 0 && before(l->heap[i], l->heap[(i - 1) / 2])) {
        heap_swap(l, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    return 0;
}

static loop_msg *heap_pop(xfer_loop *l)
{
    loop_msg *top = l->heap[0];
    l->heap[0] = l->heap[--l->nheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= l->nheap)
            break;
        if (c + 1 < l->nheap && before(l->heap[c + 1], l->heap[c]))
            c++;
        if (!before(l->heap[c], l->heap[i]))
            break;
        heap_swap(l, i, c);
        i = c;
    }
    return top;
}

static int fifo_push(xfer_loop *l, loop_msg *m)
{
    if (xfer_ring_full(&l->fring)) {
        uint32_t cap = l->fring.cap ? 2 * l->fring.cap : 256;
        loop_msg **q = xfer_ring_grow(&l->fring, l->fifo, sizeof *q, cap,
                                      &l->cfg.alloc);
        if (!q)
            return XFER_ERR_NOMEM;
        l->fifo = q;
    }
    l->fifo[xfer_ring_push(&l->fring)] = m;
    return 0;
}

/* The next message due at `now`, from the FIFO or the heap, in (due, seq)
 * order; NULL when none is due. */
static loop_msg *next_due(xfer_loop *l, uint64_t now)
{
    loop_msg *f = xfer_ring_empty(&l->fring) ? NULL
                                             : l->fifo[l->fring.head];
    loop_msg *h = l->nheap && l->heap[0]->due <= now ? l->heap[0] : NULL;
    if (h && (!f || before(h, f)))
        return heap_pop(l);
    if (!f)
        return NULL;
    xfer_ring_pop(&l->fring);
    return f;
}

static void recycle(xfer_loop *l, loop_msg *m)
{
    m->spare_next = l->spare;
    l->spare = m;
}

/* Put run_ev on the active queue, once: activating an event that is
 * already active changes nothing in libevent (it keeps its place in the
 * queue), so every message posted after the first of a batch skips the
 * call.  on_run clears the flag on entry, when libevent has taken the
 * event off the queue. */
static void activate_run(xfer_loop *l)
{
    if (l->run_active)
        return;
    l->run_active = true;
    event_active(l->run_ev, EV_TIMEOUT, 0);
}

static void schedule_run(xfer_loop *l)
{
    if (!l->run_ev)
        return;
    if (!xfer_ring_empty(&l->fring)) {
        activate_run(l);
        return;
    }
    if (l->nheap == 0)
        return;
    uint64_t now = now_of(l), due = l->heap[0]->due;
    if (due <= now) {
        activate_run(l);
        return;
    }
    struct timeval tv = xfer_timer_delay(due - now);
    event_add(l->run_ev, &tv);
    /* Adding a timeout to an event activated with EV_TIMEOUT takes it off
     * libevent's active queue: the next message due at once must activate
     * it again. */
    l->run_active = false;
}

/* Queue a message for op; the op remembers it so it can be cancelled. */
static int post(xfer_loop *l, loop_op *op, uint8_t kind, uint64_t delay)
{
    loop_msg *m = l->spare;
    if (m)
        l->spare = m->spare_next;
    else if (!(m = xfer_util_alloc(&l->cfg.alloc, sizeof *m)))
        return XFER_ERR_NOMEM;
    /* A message due at once needs no clock reading: it runs after every
     * message already queued, at the latest time seen. */
    *m = (loop_msg){.due = delay ? now_of(l) + delay : l->last_now,
                    .seq = l->seq++, .op = op, .kind = kind};
    if ((delay ? heap_push(l, m) : fifo_push(l, m)) != 0) {
        recycle(l, m);
        return XFER_ERR_NOMEM;
    }
    op->msg = m;
    l->st.messages++;
    schedule_run(l);
    return 0;
}

static void cancel_msg(loop_op *op)
{
    if (op->msg)
        op->msg->op = NULL;
    op->msg = NULL;
}

/* ---------------------------------------------------------------------- */
/* Ops                                                                     */
/* ---------------------------------------------------------------------- */

static void unlink_op(xfer_loop *l, loop_op *op)
{
    xfer_list_remove(&l->ops, &op->link);
}

/* A zeroed op record: a recycled one, else one from cfg.alloc.  NULL when
 * out of memory. */
static loop_op *new_op(xfer_loop *l)
{
    loop_op *op = l->spare_ops;
    if (!op)
        return xfer_util_calloc(&l->cfg.alloc, 1, sizeof *op);
    l->spare_ops = op->retry_next;
    l->nspare_ops--;
    memset(op, 0, sizeof *op);
    return op;
}

/* An op that is off every list: keep it for the next start, or free it
 * when LOOP_SPARE_OPS are kept already. */
static void free_op(xfer_loop *l, loop_op *op)
{
    if (l->nspare_ops == LOOP_SPARE_OPS) {
        xfer_util_free(&l->cfg.alloc, op);
        return;
    }
    op->retry_next = l->spare_ops;
    l->spare_ops = op;
    l->nspare_ops++;
}

static void reply(xfer_loop *l, loop_op *op, int32_t status)
{
    cancel_msg(op);
    op->res.status = status;
    op->state = OP_REPLYING;
    if (post(l, op, MSG_REPLY, 0) != 0) {
        /* No memory for the message: keep the op on a retry list that the
         * run callback re-posts, so the reply is late but never lost. */
        op->retry_next = l->retry;
        l->retry = op;
        if (l->run_ev)
            activate_run(l);
    }
}

static void repost_retries(xfer_loop *l)
{
    loop_op *list = l->retry;
    l->retry = NULL;
    while (list) {
        loop_op *op = list;
        list = op->retry_next;
        op->retry_next = NULL;
        reply(l, op, op->res.status);
    }
}

/* The user's event callback runs outside the engine's batch (engine_int.h):
 * it may take its time and call the engine, which then reads its clock. */
static void emit_events(xfer_loop *l, xfer_shard *s)
{
    size_t n;
    const xfer_shard_event *ev = xfer_shard_events(s, &n);
    if (n && l->cfg.on_event) {
        if (l->engine)
            xfer_engine_batch_end(l->engine);
        for (size_t i = 0; i < n; i++)
            l->cfg.on_event(l->cfg.on_event_ud, &ev[i]);
        if (l->engine)
            xfer_engine_batch_begin(l->engine);
    }
    xfer_shard_events_clear(s);
}

/* Keep a granted region (no memory, or too many: not kept). */
static void region_keep(xfer_loop *l, const xfer_action *a,
                        const xfer_resv_info *info)
{
    if (l->nregions == LOOP_REGIONS_MAX) {
        /* regions whose reservation ended without a COMMIT or CANCEL
         * here (a lease expired): swept when the table is full */
        uint32_t k = 0;
        for (uint32_t i = 0; i < l->nregions; i++)
            if (xfer_shard_state(l->shards[l->regions[i].shard],
                                 l->regions[i].id) ==
                XFER_RESV_STATE_RESERVED)
                l->regions[k++] = l->regions[i];
        l->nregions = k;
    }
    if (l->nregions == l->capregions) {
        uint32_t cap = l->capregions ? l->capregions * 2 : 64;
        if (cap > LOOP_REGIONS_MAX)
            return;
        loop_region *r = xfer_util_calloc(&l->cfg.alloc, cap, sizeof *r);
        if (!r)
            return;
        if (l->nregions)
            memcpy(r, l->regions, l->nregions * sizeof *r);
        xfer_util_free(&l->cfg.alloc, l->regions);
        l->regions = r;
        l->capregions = cap;
    }
    l->regions[l->nregions++] = (loop_region){
        .id = a->id, .resv_id = info->resv_id, .addr = info->addr,
        .attempt = a->attempt, .len = info->len, .shard = a->shard};
}

/* The region of a's reservation, taken off the table (NULL: not kept). */
static bool region_take(xfer_loop *l, const xfer_action *a, loop_region *out)
{
    for (uint32_t i = 0; i < l->nregions; i++) {
        loop_region *r = &l->regions[i];
        if (r->id == a->id && r->shard == a->shard &&
            (a->resv_id == XFER_RESV_NONE || r->resv_id == a->resv_id)) {
            *out = *r;
            *r = l->regions[--l->nregions];
            return true;
        }
    }
    return false;
}

/* A COMMIT with the caller's CRC: the shard's region against it before
 * the commit applies (xfer_shard_check: CORRUPT leaves it unapplied, the
 * producer rolls back).  0: commit. */
static int32_t check_commit(xfer_loop *l, const loop_op *op,
                            const loop_region *r, uint64_t now)
{
    xfer_shard *s = l->shards[op->a.shard];
    if (!op->crc_given || r->attempt != op->a.attempt ||
        xfer_shard_state(s, op->a.id) != XFER_RESV_STATE_RESERVED)
        return 0; /* the shard's own answer */
    uint32_t got = xfer_crc32c(0, xfer_shard_pool_base(s) + r->addr, r->len);
    return xfer_shard_check(s, now, op->a.id, op->a.attempt, op->crc, got);
}

static int32_t apply_op(xfer_loop *l, loop_op *op, uint64_t now)
{
    xfer_shard *s = l->shards[op->a.shard];
    const xfer_action *a = &op->a;
    loop_region r;
    switch ((xfer_action_kind)a->kind) {
    case XFER_ACT_RESERVE: {
        xfer_resv_info info;
        int rc = xfer_shard_reserve(s, now, a->id, a->attempt, a->len, &info);
        if (rc == 0) {
            op->res.resv_id = info.resv_id;
            op->res.remote_addr = info.addr;
            region_keep(l, a, &info);
        }
        return rc;
    }
    case XFER_ACT_COMMIT: {
        if (region_take(l, a, &r)) {
            int32_t rc = check_commit(l, op, &r, now);
            if (rc)
                return rc;
        }
        return xfer_shard_commit(s, now, a->id, a->attempt, a->resv_id);
    }
    case XFER_ACT_CANCEL:
        region_take(l, a, &r);
        return xfer_shard_cancel(s, now, a->id, a->attempt, a->resv_id);
    case XFER_ACT_EAGER: {
        /* Reserve, copy and commit in one: the staging bytes are read
         * here, at ARRIVE, before the REPLY (I3). */
        xfer_resv_info info;
        int rc = xfer_shard_eager(s, now, a->id, a->attempt, op->src, a->len,
                                  &info);
        if (rc == 0) {
            op->res.resv_id = info.resv_id;
            op->res.remote_addr = info.addr;
        }
        return rc;
    }
    case XFER_ACT_WRITE:
    case XFER_ACT_ABORT:
    case XFER_ACT_RELEASE_STAGING:
    case XFER_ACT_COMPLETE:
    case XFER_ACT_SHUTDOWN_DONE:
    case XFER_ACT_RELEASE_PART:
    case XFER_ACT_COUNT_:
        break;
    }
    return XFER_ERR_INTERNAL;
}

/* A write lands on the shard: begin, copy the staging bytes, and stay in
 * flight until WRITE_END. */
static void arrive_write(xfer_loop *l, loop_op *op, uint64_t now)
{
    uint8_t *dst = NULL;
    xfer_shard *s = l->shards[op->a.shard];
    int rc = xfer_shard_write_begin(s, now, op->a.id, op->a.attempt,
                                    op->a.resv_id, op->a.resv_off, op->a.len,
                                    &dst);
    if (rc) {
        reply(l, op, rc);
        return;
    }
    if (op->a.len)
        memcpy(dst, op->src, op->a.len);
    op->state = OP_WRITING;
    if (post(l, op, MSG_WRITE_END, l->cfg.write_ns) != 0) {
        xfer_shard_write_end(s, now, op->a.id, op->a.resv_id, false);
        reply(l, op, XFER_ERR_NOMEM);
    }
}

static void on_arrive(xfer_loop *l, loop_op *op, uint64_t now)
{
    op->msg = NULL;
    uint16_t k = op->a.shard;
    if (l->down[k]) {
        l->st.down_failed++;
        reply(l, op, XFER_ERR_CONN_LOST);
        return;
    }
    if (op->fault == XFER_FAULT_DROP) {
        op->state = OP_DROPPED; /* lost: waits for an abort */
        l->st.dropped++;
        return;
    }
    if (op->fault == XFER_FAULT_FAIL) {
        reply(l, op, op->fault_err);
        return;
    }
    if (op->a.kind == XFER_ACT_WRITE) {
        arrive_write(l, op, now);
    } else {
        int32_t rc = apply_op(l, op, now);
        if (op->fault == XFER_FAULT_APPLIED_LOST) {
            l->st.applied_lost++;
            rc = op->fault_err;
        }
        reply(l, op, rc);
    }
    emit_events(l, l->shards[k]);
}

static void on_write_end(xfer_loop *l, loop_op *op, uint64_t now)
{
    op->msg = NULL;
    xfer_shard *s = l->shards[op->a.shard];
    int rc = xfer_shard_write_end(s, now, op->a.id, op->a.resv_id, true);
    emit_events(l, s);
    if (op->replied) {
        /* The producer already heard "connection lost"; the shard side of
         * the write is now over too. */
        unlink_op(l, op);
        free_op(l, op);
        return;
    }
    if (op->lost)
        rc = XFER_ERR_CONN_LOST;
    else if (rc == 0 && op->fault == XFER_FAULT_APPLIED_LOST) {
        l->st.applied_lost++;
        rc = op->fault_err;
    }
    reply(l, op, rc);
}

static void on_reply(xfer_loop *l, loop_op *op)
{
    op->msg = NULL;
    xfer_shard_result r = op->res;
    unlink_op(l, op);
    free_op(l, op);
    if (l->engine)
        xfer_engine_deliver(l->engine, &r);
}

static void arm_shard_timer(xfer_loop *l)
{
    if (!l->shard_timer.ev)
        return;
    uint64_t next = UINT64_MAX;
    for (uint16_t k = 0; k < l->cfg.nshards; k++) {
        uint64_t d = xfer_shard_next_deadline(l->shards[k]);
        next = d < next ? d : next;
    }
    xfer_timer_arm(&l->shard_timer, next, loop_clock, l);
}

static void on_run(evutil_socket_t fd, short what, void *arg)
{
    xfer_loop *l = arg;
    l->run_active = false; /* libevent took run_ev off its active queue */
    uint64_t now = now_of(l);
    /* The replies of this run are one batch for the engine's clock. */
    if (l->engine)
        xfer_engine_batch_begin(l->engine);
    repost_retries(l);
    loop_msg *m;
    for (int i = 0; i < LOOP_BATCH && (m = next_due(l, now)) != NULL; i++) {
        loop_op *op = m->op;
        uint8_t kind = m->kind;
        recycle(l, m);
        if (!op)
            continue;
        /* Replies in a row are one batch of results for the engine; the
         * ops they start are posted before any other message runs. */
        if (kind != MSG_REPLY && l->engine)
            xfer_engine_flush(l->engine);
        if (kind == MSG_ARRIVE)
            on_arrive(l, op, now);
        else if (kind == MSG_WRITE_END)
            on_write_end(l, op, now);
        else
            on_reply(l, op);
    }
    if (l->engine)
        xfer_engine_batch_end(l->engine);
    schedule_run(l);
    arm_shard_timer(l);
}

static void on_shard_timer(evutil_socket_t fd, short what, void *arg)
{
    xfer_loop *l = arg;
    xfer_timer_fired(&l->shard_timer); /* re-arm whatever comes next */
    uint64_t now = now_of(l);
    if (l->engine)
        xfer_engine_batch_begin(l->engine); /* emit_events pauses it */
    for (uint16_t k = 0; k < l->cfg.nshards; k++) {
        xfer_shard_on_timer(l->shards[k], now);
        emit_events(l, l->shards[k]);
    }
    if (l->engine)
        xfer_engine_batch_end(l->engine);
    arm_shard_timer(l);
}

/* ---------------------------------------------------------------------- */
/* Faults                                                                  */
/* ---------------------------------------------------------------------- */

/* Decide an op's fate when it starts (fault.h); returns the ARRIVE
 * delay. */
static uint64_t decide(xfer_loop *l, loop_op *op)
{
    xfer_fault_fate f;
    l->st.faults_fired += xfer_faults_decide(
        &l->faults, xfer_action_op(op->a.kind), op->a.shard, op->a.id, &f);
    if (f.kind != XFER_FAULT_NONE) {
        op->fault = f.kind;
        op->fault_err = f.error;
    }
    return f.delay_ns;
}

/* ---------------------------------------------------------------------- */
/* The ops table                                                           */
/* ---------------------------------------------------------------------- */

static uint16_t t_nshards(void *self)
{
    return ((xfer_loop *)self)->cfg.nshards;
}

static int t_attach(void *self, struct xfer_engine *e, uint32_t group)
{
    xfer_loop *l = self;
    if (l->engine)
        return XFER_ERR_BUSY;
    l->engine = e;
    return 0;
}

static int start_op(xfer_loop *l, const xfer_action *a, const void *src,
                    bool given, uint32_t crc);

static int t_start(void *self, const xfer_action *a, const void *src)
{
    return start_op(self, a, src, false, 0);
}

/* The caller's CRC is checked at a COMMIT (check_commit); an EAGER's is
 * not: its bytes are READY as they land, so it goes as a plain EAGER. */
static int t_start_crc(void *self, const xfer_action *a, const void *src,
                       uint32_t crc)
{
    if (a->kind != XFER_ACT_COMMIT && a->kind != XFER_ACT_EAGER)
        return XFER_ERR_INVALID_ARG;
    return start_op(self, a, src, a->kind == XFER_ACT_COMMIT, crc);
}

static int start_op(xfer_loop *l, const xfer_action *a, const void *src,
                    bool given, uint32_t crc)
{
    if (a->shard >= l->cfg.nshards ||
        xfer_action_op(a->kind) == XFER_OP_COUNT_)
        return XFER_ERR_INVALID_ARG;
    loop_op *op = new_op(l);
    if (!op)
        return XFER_ERR_NOMEM;
    op->a = *a;
    op->src = src;
    op->crc_given = given;
    op->crc = crc;
    op->fault = XFER_FAULT_NONE;
    op->res = (xfer_shard_result){.id = a->id, .attempt = a->attempt,
                                  .shard = a->shard,
                                  .op = (uint8_t)xfer_action_op(a->kind)};
    uint64_t delay = decide(l, op);
    if (post(l, op, MSG_ARRIVE, delay) != 0) {
        free_op(l, op);
        return XFER_ERR_NOMEM;
    }
    xfer_list_push_back(&l->ops, &op->link);
    return 0;
}

static loop_op *find_op(xfer_loop *l, const xfer_action *a)
{
    for (loop_op *op = op_of(l->ops.head); op; op = op_of(op->link.next))
        if (op->a.id == a->id && op->a.attempt == a->attempt &&
            op->a.shard == a->shard && xfer_action_op(op->a.kind) == a->op &&
            !op->replied &&
            op->state != OP_REPLYING)
            return op;
    return NULL;
}

static void t_abort(void *self, const xfer_action *a)
{
    xfer_loop *l = self;
    loop_op *op = find_op(l, a);
    if (!op || op->state == OP_WRITING)
        return; /* answered already, or its real result is on the way */
    l->st.aborted++;
    reply(l, op, XFER_ERR_ABORTED);
}

/* The engine lets go, and may free its event base right after: free our
 * events on that base now, so xfer_loop_del never touches a dead base.
 * Messages still queued are dropped with the loop. */
static void loop_free(xfer_loop *l);

static void t_detach(void *self)
{
    xfer_loop *l = self;
    l->engine = NULL;
    if (l->run_ev)
        event_free(l->run_ev);
    xfer_timer_clear(&l->shard_timer);
    l->run_ev = NULL;
    if (l->del_pending)
        loop_free(l); /* the user deleted it while attached */
}

/* In-process shards are two-sided unless configured one-sided, and a
 * two-sided shard applies an eager op whole (xfer_shard_eager). */
static bool t_eager_ok(void *self)
{
    return !((xfer_loop *)self)->cfg.shard.one_sided;
}

/* A lease refresh applies at once on the in-process shard and is
 * answered from inside the call (xfer/transport.h allows it); a shard
 * that is down is not connected. */
static int t_refresh(void *self, uint16_t shard, uint64_t id,
                     uint32_t attempt, uint64_t resv_id, uint64_t want_ns)
{
    xfer_loop *l = self;
    if (shard >= l->cfg.nshards || !l->engine)
        return XFER_ERR_INVALID_ARG;
    if (l->down[shard])
        return XFER_ERR_CONN_LOST;
    uint64_t granted = 0;
    int rc = xfer_shard_refresh(l->shards[shard], now_of(l), id, attempt,
                                resv_id, want_ns, &granted);
    arm_shard_timer(l); /* the lease moved */
    xfer_engine_refreshed(l->engine, id, shard, attempt, rc, granted);
    return 0;
}

static const xfer_transport_ops loop_ops = {
    .version = XFER_TRANSPORT_OPS_VERSION,
    .name = "loop",
    .nshards = t_nshards,
    .attach = t_attach,
    .start = t_start,
    .abort = t_abort,
    .detach = t_detach,
    .eager_ok = t_eager_ok,
    .refresh = t_refresh,
    .start_crc = t_start_crc,
};

xfer_transport xfer_loop_transport(xfer_loop *l)
{
    return (xfer_transport){.ops = &loop_ops, .self = l};
}

/* ---------------------------------------------------------------------- */
/* Public API                                                              */
/* ---------------------------------------------------------------------- */

/* The bytes each version of xfer_loop_config and _stats holds (util.h). */
static const size_t config_lens[] = {sizeof(xfer_loop_config)};
static const size_t stats_lens[] = {sizeof(xfer_loop_stats)};

void xfer_loop_config_default(xfer_loop_config *cfg)
{
    if (!cfg)
        return;
    *cfg = (xfer_loop_config){.version = XFER_LOOP_CONFIG_VERSION};
    xfer_shard_config_default(&cfg->shard);
}

int xfer_loop_new(struct event_base *base, const xfer_loop_config *cfg,
                  xfer_loop **out)
{
    xfer_loop_config c;
    xfer_loop_config_default(&c);
    if (!base || !out ||
        (cfg && xfer_util_versioned_copy(&c, cfg, cfg->version, config_lens,
                                         XFER_UTIL_NVERSIONS(config_lens))) ||
        c.nshards == 0 || c.nshards > XFER_MAX_SHARDS)
        return XFER_ERR_INVALID_ARG;
    xfer_loop *l = xfer_util_calloc(&c.alloc, 1, sizeof *l);
    if (!l)
        return XFER_ERR_NOMEM;
    l->base = base;
    xfer_base_ref(base); /* dropped by loop_free: see base_ref.h */
    l->cfg = c;
    if (!l->cfg.clock)
        l->cfg.clock = xfer_clock_monotonic;
    if (!l->cfg.shard.alloc.alloc && !l->cfg.shard.alloc.free)
        l->cfg.shard.alloc = l->cfg.alloc;
    xfer_faults_init(&l->faults, c.seed);
    int rc = XFER_ERR_IO;
    l->run_ev = event_new(base, -1, 0, on_run, l);
    if (xfer_timer_init(&l->shard_timer, base, on_shard_timer, l) != 0 ||
        !l->run_ev)
        goto out_fail;
    for (uint16_t k = 0; k < l->cfg.nshards; k++) {
        xfer_shard_config sc = l->cfg.shard;
        sc.shard_index = k;
        rc = xfer_shard_new(&sc, &l->shards[k]);
        if (rc)
            goto out_fail;
    }
    *out = l;
    return 0;
out_fail:
    xfer_loop_del(l);
    return rc;
}

/* Deleted while attached: the engine calls into the loop transport until
 * it detaches, so the free waits for that detach. */
void xfer_loop_del(xfer_loop *l)
{
    if (!l)
        return;
    if (l->engine)
        l->del_pending = true;
    else
        loop_free(l);
}

static void loop_free(xfer_loop *l)
{
    struct event_base *base = l->base;
    const xfer_allocator *a = &l->cfg.alloc;
    while (l->nheap)
        xfer_util_free(a, heap_pop(l));
    xfer_util_free(a, l->heap);
    for (uint32_t i = 0; i < l->fring.n; i++)
        xfer_util_free(a, l->fifo[xfer_ring_slot(&l->fring, i)]);
    xfer_util_free(a, l->fifo);
    while (l->spare) {
        loop_msg *m = l->spare;
        l->spare = m->spare_next;
        xfer_util_free(a, m);
    }
    for (loop_op *op; (op = op_of(xfer_list_pop_front(&l->ops))) != NULL;)
        xfer_util_free(a, op);
    xfer_util_free(a, l->regions);
    while (l->spare_ops) {
        loop_op *op = l->spare_ops;
        l->spare_ops = op->retry_next;
        xfer_util_free(a, op);
    }
    if (l->run_ev)
        event_free(l->run_ev);
    xfer_timer_clear(&l->shard_timer);
    for (uint16_t k = 0; k < l->cfg.nshards; k++)
        xfer_shard_del(l->shards[k]);
    xfer_allocator la = l->cfg.alloc;
    xfer_util_free(&la, l);
    xfer_base_unref(base); /* last: the base may go with it */
}

int xfer_loop_add_rule(xfer_loop *l, const xfer_fault_rule *rule)
{
    if (!l)
        return XFER_ERR_INVALID_ARG;
    return xfer_faults_add(&l->faults, rule);
}

void xfer_loop_clear_rules(xfer_loop *l)
{
    xfer_faults_clear(&l->faults);
}

/* A write in flight on a shard that went down.  The shard still ends it
 * (WRITE_END stays queued); the producer hears of the loss now, through a
 * reply op of its own, or, when there is no memory for one, as soon as the
 * write ends (never not at all). */
static void lose_write(xfer_loop *l, loop_op *op)
{
    loop_op *rep = new_op(l);
    if (!rep) {
        op->lost = 1;
        return;
    }
    op->replied = 1;
    rep->a = op->a;
    rep->res = op->res;
    rep->res.status = XFER_ERR_CONN_LOST;
    xfer_list_push_back(&l->ops, &rep->link);
    reply(l, rep, XFER_ERR_CONN_LOST);
}

void xfer_loop_set_down(xfer_loop *l, uint16_t shard, bool down)
{
    if (!l || shard >= l->cfg.nshards)
        return;
    l->down[shard] = down;
    if (!down)
        return;
    /* Every op outstanding on the shard fails now, as results. */
    for (loop_op *op = op_of(l->ops.head); op; op = op_of(op->link.next)) {
        if (op->a.shard != shard || op->replied || op->lost)
            continue;
        l->st.down_failed++;
        if (op->state == OP_WRITING) {
            lose_write(l, op);
            continue;
        }
        if (op->state == OP_REPLYING && op->res.status == 0)
            op->res.status = XFER_ERR_CONN_LOST;
        else if (op->state != OP_REPLYING)
            reply(l, op, XFER_ERR_CONN_LOST);
    }
}

xfer_shard *xfer_loop_shard(xfer_loop *l, uint16_t shard)
{
    return l && shard < l->cfg.nshards ? l->shards[shard] : NULL;
}

int xfer_loop_stats_get_versioned(const xfer_loop *l, uint32_t version,
                                  xfer_loop_stats *st)
{
    if (!l || !st)
        return XFER_ERR_INVALID_ARG;
    return xfer_util_versioned_copy(st, &l->st, version, stats_lens,
                                    XFER_UTIL_NVERSIONS(stats_lens));
}

uint32_t xfer_loop_outstanding(const xfer_loop *l)
{
    uint32_t n = 0;
    for (const xfer_list_node *e = l->ops.head; e; e = e->next)
        n += !XFER_LIST_ITEM(e, const loop_op, link)->replied;
    return n;
}
