/*
 * engine_copy.c - the producer's copy step (engine_copy.h).
 *
 * What must stay true: an op's bounce buffer goes back to its copy engine
 * only when neither its D2H copy nor the transport can touch it (copy
 * ended, and the op either never sent or its result delivered); every op
 * taken is answered exactly once, through xfer_engine_deliver, from a
 * loop callback (a copy's completion, or a transport's result), never
 * from inside xfer_ecopy_start or _abort.
 */
#include "engine_copy.h"

#include <event2/event.h>
#include <stdlib.h>

#include "engine_int.h"

#include "list.h" /* fsm/: the one intrusive list (fsm_private_dep) */
#include "xfer/xfer.h"

/* OP_ANSWER: its answer (status) waits for the deferred event, so no
 * answer is ever given from inside a call of the engine into here. */
typedef enum { OP_WAITING, OP_COPYING, OP_SENT, OP_ANSWER } op_state;

typedef struct ecop {
    xfer_list_node link;
    xfer_ecopy *ec;
    xfer_action a;
    xfer_transport tp;
    xfer_copy *cp;
    const void *dev;
    void *bounce;
    op_state state;
    bool aborted;
    int status; /* OP_ANSWER */
} ecop;

struct xfer_ecopy {
    struct xfer_engine *e;
    struct event *later; /* answers ops in OP_ANSWER */
    xfer_list ops;     /* every op held, in start order */
    uint64_t held, budget_used, failed;
    uint64_t budget; /* bounce bytes at once (at least one op's) */
};

static void on_later(evutil_socket_t fd, short what, void *arg);

/* Whether an op of len bytes must wait: some budget is in use and it
 * would take more than the rest (a first op goes whatever its size). */
static bool over_budget(const xfer_ecopy *ec, uint64_t len)
{
    return ec->budget_used && ec->budget_used + len > ec->budget;
}

int xfer_ecopy_new(struct xfer_engine *e, uint64_t budget, xfer_ecopy **out)
{
    xfer_ecopy *ec = calloc(1, sizeof *ec);
    if (!ec)
        return XFER_ERR_NOMEM;
    ec->e = e;
    ec->budget = budget;
    ec->later = event_new(xfer_engine_base(e), -1, 0, on_later, ec);
    if (!ec->later) {
        free(ec);
        return XFER_ERR_IO;
    }
    *out = ec;
    return 0;
}

void xfer_ecopy_del(xfer_ecopy *ec)
{
    if (!ec)
        return;
    /* ops still here belong to transfers the engine drops without a
     * callback (xfer_engine_del before shutdown ended): their copy
     * engines wait for their copies when they are deleted */
    while (ec->ops.head) {
        ecop *o = XFER_LIST_ITEM(ec->ops.head, ecop, link);
        xfer_list_remove(&ec->ops, &o->link);
        free(o);
    }
    event_free(ec->later);
    free(ec);
}

/* Answer o's op with `status` and forget it.  o is freed first, so the
 * core's reaction (which may start or abort ops here) sees it gone. */
static void answer_drop(ecop *o, int status)
{
    xfer_ecopy *ec = o->ec;
    xfer_shard_result r = {.id = o->a.id, .attempt = o->a.attempt,
                           .shard = o->a.shard,
                           .op = (uint8_t)xfer_action_op(o->a.kind),
                           .status = status};
    if (o->bounce) {
        xfer_copy_bounce_put(o->cp, o->bounce, o->a.len);
        ec->budget_used -= o->a.len;
    }
    xfer_list_remove(&ec->ops, &o->link);
    ec->held--;
    free(o);
    xfer_engine_deliver(ec->e, &r);
}

static void copied(void *ud, int status);

/* Start the copies of waiting ops while the bounce budget allows (always
 * at least one op's, however large). */
static void pump(xfer_ecopy *ec)
{
    xfer_list_node *n = ec->ops.head;
    while (n) {
        ecop *o = XFER_LIST_ITEM(n, ecop, link);
        n = n->next;
        if (o->state != OP_WAITING)
            continue;
        if (over_budget(ec, o->a.len))
            break; /* in start order: a large op is not passed forever */
        int rc = XFER_ERR_NOMEM;
        o->bounce = xfer_copy_bounce_get(o->cp, o->a.len);
        if (o->bounce) {
            ec->budget_used += o->a.len;
            rc = xfer_copy_start(o->cp, true, o->bounce, (void *)o->dev,
                                 o->a.len, copied, o);
        }
        if (rc == 0) {
            o->state = OP_COPYING;
            continue;
        }
        if (o->bounce) {
            xfer_copy_bounce_put(o->cp, o->bounce, o->a.len);
            ec->budget_used -= o->a.len;
            o->bounce = NULL;
        }
        o->state = OP_ANSWER;
        o->status = rc;
        event_active(ec->later, EV_TIMEOUT, 0);
    }
}

/* Answer every op in OP_ANSWER, in start order. */
static void on_later(evutil_socket_t fd, short what, void *arg)
{
    xfer_ecopy *ec = arg;
    xfer_engine_batch_begin(ec->e);
    for (xfer_list_node *n = ec->ops.head; n;) {
        ecop *o = XFER_LIST_ITEM(n, ecop, link);
        n = n->next;
        if (o->state == OP_ANSWER) {
            answer_drop(o, o->status);
            n = ec->ops.head; /* the core may have changed the list */
        }
    }
    pump(ec);
    xfer_engine_batch_end(ec->e);
}

/* The D2H copy of o ended (loop thread, the copy engine's event): send
 * the op out of its bounce buffer, or answer it. */
static void copied(void *ud, int status)
{
    ecop *o = ud;
    xfer_ecopy *ec = o->ec;
    xfer_engine_batch_begin(ec->e);
    if (status)
        ec->failed++;
    if (status || o->aborted) {
        answer_drop(o, o->aborted ? XFER_ERR_ABORTED : status);
    } else {
        o->state = OP_SENT;
        int rc = o->tp.ops->start(o->tp.self, &o->a, o->bounce);
        if (rc)
            answer_drop(o, rc);
    }
    pump(ec);
    xfer_engine_batch_end(ec->e);
}

int xfer_ecopy_start(xfer_ecopy *ec, xfer_copy *cp, const xfer_action *a,
                     const void *dev, xfer_transport tp)
{
    ecop *o = calloc(1, sizeof *o);
    if (!o)
        return XFER_ERR_NOMEM;
    *o = (ecop){.ec = ec, .a = *a, .tp = tp, .cp = cp, .dev = dev,
                .state = OP_WAITING};
    if (over_budget(ec, a->len)) {
        xfer_list_push_back(&ec->ops, &o->link);
        ec->held++;
        return 0; /* a copy's end or a result pumps it */
    }
    int rc = XFER_ERR_NOMEM;
    o->bounce = xfer_copy_bounce_get(cp, a->len);
    if (o->bounce)
        rc = xfer_copy_start(cp, true, o->bounce, (void *)dev, a->len,
                             copied, o);
    if (rc) {
        if (o->bounce)
            xfer_copy_bounce_put(cp, o->bounce, a->len);
        free(o);
        return rc;
    }
    ec->budget_used += a->len;
    o->state = OP_COPYING;
    xfer_list_push_back(&ec->ops, &o->link);
    ec->held++;
    return 0;
}

static ecop *find(xfer_ecopy *ec, uint64_t id, uint32_t attempt,
                  uint16_t shard, int op)
{
    for (xfer_list_node *n = ec->ops.head; n; n = n->next) {
        ecop *o = XFER_LIST_ITEM(n, ecop, link);
        if (o->a.id == id && o->a.attempt == attempt &&
            o->a.shard == shard &&
            (op < 0 || (int)xfer_action_op(o->a.kind) == op))
            return o;
    }
    return NULL;
}

bool xfer_ecopy_abort(xfer_ecopy *ec, const xfer_action *a)
{
    ecop *o = find(ec, a->id, a->attempt, a->shard, -1);
    if (!o || o->state == OP_SENT)
        return false;
    /* COPYING: answered when the copy ended (the copy still writes its
     * bounce buffer).  WAITING: no copy yet; answered from the deferred
     * event, never from inside the core's step. */
    if (o->state == OP_WAITING) {
        o->state = OP_ANSWER;
        o->status = XFER_ERR_ABORTED;
        event_active(ec->later, EV_TIMEOUT, 0);
    } else if (o->state == OP_COPYING) {
        o->aborted = true;
    }
    return true;
}

void xfer_ecopy_on_result(xfer_ecopy *ec, const xfer_shard_result *r)
{
    ecop *o = find(ec, r->id, r->attempt, r->shard, r->op);
    if (!o || o->state != OP_SENT)
        return;
    xfer_copy_bounce_put(o->cp, o->bounce, o->a.len);
    ec->budget_used -= o->a.len;
    xfer_list_remove(&ec->ops, &o->link);
    ec->held--;
    free(o);
    pump(ec);
}

uint64_t xfer_ecopy_held(const xfer_ecopy *ec)
{
    return ec ? ec->held : 0;
}

uint64_t xfer_ecopy_failed(const xfer_ecopy *ec)
{
    return ec ? ec->failed : 0;
}
