/*
 * engine_gate.c - the CUDA-event gate (engine_gate.h).
 *
 * What must stay true: a parked op is started, or answered, exactly once;
 * no parked op starts before its gate's event was seen complete; answers
 * and starts happen from the poll timer or the deferred event (loop
 * callbacks), never from inside a call of the engine into here.
 */
#include "engine_gate.h"

#include <event2/event.h>
#include <stdlib.h>

#include "cuda_drv.h"
#include "engine_int.h"
#include "list.h" /* fsm/: the one intrusive list (fsm_private_dep) */
#include "timer.h"
#include "xfer/testdev.h"
#include "xfer/xfer.h"

typedef struct parked {
    xfer_list_node link;
    xfer_action a;
    int status; /* 0: waiting for the gate; else: answer this */
} parked;

typedef struct gate {
    xfer_list_node link;
    uint64_t id;
    void *event;
    int kind;
    bool open;   /* the event was seen complete */
    int failed;  /* the event's query failed: XFER_ERR_COPY */
    xfer_list ops; /* parked ops, in start order */
} gate;

struct xfer_gates {
    struct xfer_engine *e;
    xfer_gate_start_fn start;
    struct event *tick;  /* the poll timer */
    struct event *later; /* answers aborted ops */
    xfer_list gates;
    uint64_t parked_total;
};

static void on_tick(evutil_socket_t fd, short what, void *arg);
static void on_later(evutil_socket_t fd, short what, void *arg);

int xfer_gates_new(struct xfer_engine *e, xfer_gate_start_fn start,
                   xfer_gates **out)
{
    xfer_gates *g = calloc(1, sizeof *g);
    if (!g)
        return XFER_ERR_NOMEM;
    g->e = e;
    g->start = start;
    g->tick = event_new(xfer_engine_base(e), -1, 0, on_tick, g);
    g->later = event_new(xfer_engine_base(e), -1, 0, on_later, g);
    if (!g->tick || !g->later) {
        xfer_gates_del(g);
        return XFER_ERR_IO;
    }
    *out = g;
    return 0;
}

static void free_gate(gate *t)
{
    while (t->ops.head) {
        parked *p = XFER_LIST_ITEM(t->ops.head, parked, link);
        xfer_list_remove(&t->ops, &p->link);
        free(p);
    }
    free(t);
}

void xfer_gates_del(xfer_gates *g)
{
    if (!g)
        return;
    while (g->gates.head) {
        gate *t = XFER_LIST_ITEM(g->gates.head, gate, link);
        xfer_list_remove(&g->gates, &t->link);
        free_gate(t);
    }
    if (g->tick)
        event_free(g->tick);
    if (g->later)
        event_free(g->later);
    free(g);
}

static gate *find(xfer_gates *g, uint64_t id)
{
    for (xfer_list_node *n = g->gates.head; n; n = n->next) {
        gate *t = XFER_LIST_ITEM(n, gate, link);
        if (t->id == id)
            return t;
    }
    return NULL;
}

int xfer_gates_add(xfer_gates *g, uint64_t id, void *event, int kind)
{
    gate *t = calloc(1, sizeof *t);
    if (!t)
        return XFER_ERR_NOMEM;
    t->id = id;
    t->event = event;
    t->kind = kind;
    /* at the front: a refused submit of an id that is live removes its
     * own gate (found first), not the live transfer's */
    xfer_list_push_front(&g->gates, &t->link);
    return 0;
}

void xfer_gates_remove(xfer_gates *g, uint64_t id)
{
    gate *t = g ? find(g, id) : NULL;
    if (!t)
        return;
    xfer_list_remove(&g->gates, &t->link);
    free_gate(t);
}

/* Poll t's event: 1 complete, 0 not yet, <0 the query failed. */
static int poll_event(gate *t)
{
    if (t->kind == XFER_GATE_TESTDEV)
        return xfer_testdev_event_done(t->event) ? 1 : 0;
    const xfer_cuda_api *a = xfer_cuda_get();
    if (!a)
        return -1;
    xfer_cu_result r = a->EventQuery((xfer_cu_event)t->event);
    return r == 0 ? 1 : r == XFER_CU_ERROR_NOT_READY ? 0 : -1;
}

static void arm(xfer_gates *g)
{
    if (!evtimer_pending(g->tick, NULL)) {
        struct timeval tv = xfer_timer_delay(XFER_GATE_POLL_NS);
        evtimer_add(g->tick, &tv);
    }
}

int xfer_gates_hold(xfer_gates *g, const xfer_action *a)
{
    gate *t = g ? find(g, a->id) : NULL;
    if (!t || t->open)
        return 0;
    if (!t->failed) {
        int st = poll_event(t);
        if (st > 0) {
            t->open = true;
            return 0;
        }
        if (st < 0)
            t->failed = XFER_ERR_COPY;
    }
    parked *p = calloc(1, sizeof *p);
    if (!p)
        return XFER_ERR_NOMEM; /* refused: the op fails, never ungated */
    p->a = *a;
    p->status = t->failed;
    xfer_list_push_back(&t->ops, &p->link);
    g->parked_total++;
    if (p->status)
        event_active(g->later, EV_TIMEOUT, 0);
    else
        arm(g);
    return 1;
}

bool xfer_gates_abort(xfer_gates *g, const xfer_action *a)
{
    gate *t = g ? find(g, a->id) : NULL;
    if (!t)
        return false;
    for (xfer_list_node *n = t->ops.head; n; n = n->next) {
        parked *p = XFER_LIST_ITEM(n, parked, link);
        if (p->a.attempt == a->attempt && p->a.shard == a->shard) {
            if (!p->status)
                p->status = XFER_ERR_ABORTED;
            event_active(g->later, EV_TIMEOUT, 0);
            return true;
        }
    }
    return false;
}

/* Answer the parked ops that have a status, in order. */
static void on_later(evutil_socket_t fd, short what, void *arg)
{
    xfer_gates *g = arg;
    xfer_engine_batch_begin(g->e);
    bool again = true;
    while (again) {
        again = false;
        for (xfer_list_node *n = g->gates.head; n && !again; n = n->next) {
            gate *t = XFER_LIST_ITEM(n, gate, link);
            for (xfer_list_node *m = t->ops.head; m; m = m->next) {
                parked *p = XFER_LIST_ITEM(m, parked, link);
                if (!p->status)
                    continue;
                xfer_shard_result r = {
                    .id = p->a.id, .attempt = p->a.attempt,
                    .shard = p->a.shard,
                    .op = (uint8_t)xfer_action_op(p->a.kind),
                    .status = p->status};
                xfer_list_remove(&t->ops, &p->link);
                free(p);
                xfer_engine_deliver(g->e, &r); /* may change the lists */
                again = true;
                break;
            }
        }
    }
    xfer_engine_batch_end(g->e);
}

/* Poll every gate with parked ops; start those whose event completed. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    xfer_gates *g = arg;
    bool waiting = false, answer = false;
    xfer_engine_batch_begin(g->e);
    for (xfer_list_node *n = g->gates.head; n;) {
        gate *t = XFER_LIST_ITEM(n, gate, link);
        n = n->next;
        if (!t->ops.head || t->open)
            continue;
        int st = poll_event(t);
        if (st == 0) {
            waiting = true;
            continue;
        }
        if (st < 0) {
            t->failed = XFER_ERR_COPY;
            for (xfer_list_node *m = t->ops.head; m; m = m->next)
                XFER_LIST_ITEM(m, parked, link)->status = XFER_ERR_COPY;
            answer = true;
            continue;
        }
        t->open = true;
        /* start its parked ops (aborted ones are answered by on_later) */
        for (xfer_list_node *m = t->ops.head; m;) {
            parked *p = XFER_LIST_ITEM(m, parked, link);
            m = m->next;
            if (p->status) {
                answer = true;
                continue;
            }
            xfer_list_remove(&t->ops, &p->link);
            xfer_action a = p->a;
            free(p);
            g->start(g->e, &a); /* never answers from inside: transports
                                   and the copy step defer */
        }
    }
    if (waiting)
        arm(g);
    if (answer)
        event_active(g->later, EV_TIMEOUT, 0);
    xfer_engine_batch_end(g->e);
}

uint64_t xfer_gates_parked_total(const xfer_gates *g)
{
    return g ? g->parked_total : 0;
}
