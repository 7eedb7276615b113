/*
 * python/ext/consumer.c - xfer.Consumer: the consumer scheduler's client
 * (xfer/consumer.h) from Python.  It connects to the S shard servers of a
 * group, and every id it learns of gets exactly one outcome, which waits
 * in a queue until Python pops it: `async for` (the package's wrapper,
 * woken through the queue's eventfd) or get() (blocking, without the
 * GIL).  An available outcome (outcome.c) shows each shard's data in
 * place: the shard's shared-memory pool (shm=NAME, mapped here, again
 * whenever a shard's link comes back up) or the buffers of a Server in
 * this process (buffers=).
 *
 * The C consumer runs on a loop thread of its own: a pyx_core (core.c)
 * whose engine has no group, whose mailbox carries every call (expect,
 * cancel, a give-back, the close), in order.
 *
 * What must stay true:
 *  - I1 on this side: every outcome the C consumer reports is queued
 *    once and popped at most once; the queue is the only place outcomes
 *    wait, so a waiter that gives up (a cancelled task, a timeout) loses
 *    none.  An outcome that cannot be queued (out of memory) is counted
 *    and its data given back at once.
 *  - Every available outcome's data goes back to its shards exactly once:
 *    released by Python (outcome.c), or by the close, which gives back
 *    everything held and everything still queued, and every later one at
 *    once, before the C consumer is deleted (the loop's pending writes
 *    are flushed first; what a lost connection kept from arriving the
 *    servers release after their take grace period).
 *  - The loop thread never takes the GIL: it fills records, writes the
 *    eventfd and signals the condition, under the queue's lock.
 */
#include "pyx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

struct pyx_cside {
    unsigned refs;            /* GIL: the Consumer and every held outcome */
    pyx_core *core;           /* a reference */
    xfer_consumer *c;         /* loop; NULL once deleted */
    uint16_t nshards;
    bool use_shm;
    char shm[XFER_SHM_NAME_MAX + 1];
    pyx_mem *mem[XFER_MAX_SHARDS]; /* loop: shm replaced on link up */
    /* Loop only (read through a call): */
    bool closing;             /* give every new available back at once */
    uint64_t map_failures, dropped, late_given_back, given_back;
    uint64_t give_back_refused;
    /* The queue, under lock: */
    pthread_mutex_t lock;
    pthread_cond_t cond;      /* wakes get() */
    pyx_outcome *head, **tail;
    uint64_t queued;
    bool wake_pending;        /* the eventfd was written, not yet acked */
    bool q_closed;
    int efd;
    /* xfer_consumer_close's end, under lock: */
    bool c_closed;
    int c_close_status;
    uint64_t c_close_shards;
    /* GIL: */
    bool closed;              /* close began: no pops, no give-backs */
    bool c_close_asked;       /* xfer_consumer_close was called */
    pyx_outcome *held;        /* popped available, not yet given back */
    uint64_t popped, nheld;
};

typedef struct pyx_consumer {
    PyObject_HEAD
    pyx_cside *cs;
    bool core_closed;         /* pyx_core_close's flag */
    PyObject *weakrefs;
} pyx_consumer;

/* ---------------------------------------------------------------------- */
/* The C side's lifetime (GIL)                                             */
/* ---------------------------------------------------------------------- */

void pyx_cside_ref(pyx_cside *cs)
{
    cs->refs++;
}

static void cside_free(pyx_cside *cs)
{
    if (cs->core)
        pyx_core_unref(cs->core); /* deletes the C consumer if still there */
    while (cs->head) {
        pyx_outcome *o = cs->head;
        cs->head = o->next;
        pyx_outcome_free(o);
    }
    for (uint16_t k = 0; k < XFER_MAX_SHARDS; k++)
        pyx_mem_unref(cs->mem[k]);
    if (cs->efd >= 0)
        close(cs->efd);
    pthread_cond_destroy(&cs->cond);
    pthread_mutex_destroy(&cs->lock);
    free(cs);
}

void pyx_cside_unref(pyx_cside *cs)
{
    if (cs && --cs->refs == 0)
        cside_free(cs);
}

void pyx_cside_hold(pyx_cside *cs, pyx_outcome *o)
{
    o->hprev = NULL;
    o->hnext = cs->held;
    if (cs->held)
        cs->held->hprev = o;
    cs->held = o;
    cs->nheld++;
}

void pyx_cside_unhold(pyx_cside *cs, pyx_outcome *o)
{
    if (!o->hprev && cs->held != o)
        return; /* not in the list */
    if (o->hprev)
        o->hprev->hnext = o->hnext;
    else
        cs->held = o->hnext;
    if (o->hnext)
        o->hnext->hprev = o->hprev;
    o->hprev = o->hnext = NULL;
    cs->nheld--;
}

typedef struct give_back {
    pyx_cside *cs;
    uint64_t id;
} give_back;

static void give_back_fn(void *ud)
{
    give_back *g = ud;
    pyx_cside *cs = g->cs;
    if (cs->c && xfer_consumer_release(cs->c, g->id) == 0)
        cs->given_back++;
    else
        cs->give_back_refused++;
    free(g);
}

void pyx_cside_release(pyx_cside *cs, uint64_t id)
{
    if (cs->closed)
        return;
    give_back *g = malloc(sizeof *g);
    if (!g) {
        /* Never lost for good: the close gives back what it holds, and
         * the servers' take grace what no one gives back. */
        return;
    }
    *g = (give_back){.cs = cs, .id = id};
    if (pyx_core_post(cs->core, give_back_fn, g) != 0)
        free(g);
}

/* ---------------------------------------------------------------------- */
/* The loop's side                                                         */
/* ---------------------------------------------------------------------- */

static void push(pyx_cside *cs, pyx_outcome *o)
{
    o->next = NULL;
    pthread_mutex_lock(&cs->lock);
    *cs->tail = o;
    cs->tail = &o->next;
    cs->queued++;
    if (!cs->wake_pending) {
        uint64_t one = 1;
        cs->wake_pending = true;
        while (write(cs->efd, &one, sizeof one) < 0 && errno == EINTR) {
        }
    }
    pthread_cond_broadcast(&cs->cond);
    pthread_mutex_unlock(&cs->lock);
}

static void on_available(void *ud, uint64_t id, uint32_t attempt,
                         const xfer_region *regs, uint16_t n)
{
    pyx_cside *cs = ud;
    pyx_outcome *o = cs->closing ? NULL : pyx_outcome_alloc(n);
    if (!o) {
        cs->dropped += !cs->closing;
        cs->late_given_back += cs->closing;
        xfer_consumer_release(cs->c, id);
        return;
    }
    o->id = id;
    o->attempt = attempt;
    o->n = n;
    for (uint16_t k = 0; k < n; k++) {
        o->reg[k].r = regs[k];
        if (regs[k].shard < XFER_MAX_SHARDS) {
            o->reg[k].mem = cs->mem[regs[k].shard];
            pyx_mem_ref(o->reg[k].mem);
        }
    }
    push(cs, o);
}

static void on_unavailable(void *ud, uint64_t id, int32_t reason,
                           uint64_t shards)
{
    pyx_cside *cs = ud;
    pyx_outcome *o = cs->closing ? NULL : pyx_outcome_alloc(0);
    if (!o) {
        cs->dropped += !cs->closing;
        return;
    }
    o->id = id;
    o->reason = reason ? reason : XFER_ERR_UNAVAILABLE;
    o->shards = shards;
    push(cs, o);
}

/* Map shard k's pool again when its link comes up: after a restart it is
 * a new object.  The mapping an outcome reads stays with the outcome. */
static void on_link(void *ud, uint16_t k, bool up)
{
    pyx_cside *cs = ud;
    if (!up || !cs->use_shm || k >= XFER_MAX_SHARDS)
        return;
    xfer_shm *m = NULL;
    pyx_mem *old = cs->mem[k];
    if (xfer_shm_map(cs->shm, k, NULL, &m) != 0) {
        cs->map_failures++;
        cs->mem[k] = NULL; /* not the old object's bytes for new data */
        pyx_mem_unref(old);
        return;
    }
    if (old && pyx_mem_generation(old) == xfer_shm_generation(m)) {
        xfer_shm_close(m); /* the same object: keep its mapping */
        return;
    }
    cs->mem[k] = pyx_mem_of_shm(m);
    cs->map_failures += !cs->mem[k];
    pyx_mem_unref(old);
}

/* The core deletes it once the loop stopped: first a last turn or two,
 * so that the give-backs of the close leave their sockets. */
static void cside_loop_del(void *obj)
{
    pyx_cside *cs = obj;
    if (!cs->c)
        return;
    struct event_base *base = cs->core->base;
    cs->closing = true;
    event_base_loop(base, EVLOOP_NONBLOCK);
    event_base_loop(base, EVLOOP_NONBLOCK);
    xfer_consumer_del(cs->c);
    cs->c = NULL;
}

/* ---------------------------------------------------------------------- */
/* Construction                                                            */
/* ---------------------------------------------------------------------- */

static pyx_cside *cside_new(void)
{
    pyx_cside *cs = calloc(1, sizeof *cs);
    if (!cs)
        return (pyx_cside *)PyErr_NoMemory();
    cs->refs = 1;
    cs->tail = &cs->head;
    pthread_mutex_init(&cs->lock, NULL);
    pthread_condattr_t ca; /* deadlines are on CLOCK_MONOTONIC */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cs->cond, &ca);
    pthread_condattr_destroy(&ca);
    cs->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (cs->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        cside_free(cs);
        return NULL;
    }
    return cs;
}

/* shm: a name; every shard that exists already is mapped now (the rest
 * when its link comes up).  A bad name is refused here. */
static int take_shm(pyx_cside *cs, const char *name)
{
    if (strlen(name) > XFER_SHM_NAME_MAX) {
        PyErr_SetString(PyExc_ValueError, "shm name too long");
        return -1;
    }
    strcpy(cs->shm, name);
    cs->use_shm = true;
    for (uint16_t k = 0; k < cs->nshards; k++) {
        xfer_shm *m = NULL;
        int rc = xfer_shm_map(name, k, NULL, &m);
        if (rc == XFER_ERR_INVALID_ARG) {
            PyErr_SetString(PyExc_ValueError, "bad shm name: 1 to 200 of "
                                              "[A-Za-z0-9_.-]");
            return -1;
        }
        if (rc == 0 && !(cs->mem[k] = pyx_mem_of_shm(m))) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

/* buffers: shard k's memory is buffers[k] (None: not readable here). */
static int take_buffers(pyx_cside *cs, PyObject *buffers)
{
    PyObject *seq = PySequence_Fast(buffers, "buffers must be a sequence");
    if (!seq)
        return -1;
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(seq) != cs->nshards) {
        PyErr_SetString(PyExc_ValueError, "one buffer per shard");
        rc = -1;
    }
    for (uint16_t k = 0; rc == 0 && k < cs->nshards; k++) {
        PyObject *b = PySequence_Fast_GET_ITEM(seq, k);
        if (b != Py_None && !(cs->mem[k] = pyx_mem_of_buffer(b)))
            rc = -1;
    }
    Py_DECREF(seq);
    return rc;
}

static int parse_durations(PyObject *d[6], pyx_consumer_opts *o)
{
    return pyx_ns_of(d[0], &o->ready_deadline_ns) ||
           pyx_ns_of(d[1], &o->tombstone_ttl_ns) ||
           pyx_ns_of(d[2], &o->connect_timeout_ns) ||
           pyx_ns_of(d[3], &o->reconnect_min_ns) ||
           pyx_ns_of(d[4], &o->reconnect_max_ns) ||
           pyx_ns_of(d[5], &o->request_timeout_ns);
}

/* The addresses as C strings, borrowed from the sequence's str objects. */
static int take_addrs(PyObject *seq, const char **addrs, uint16_t *n)
{
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    if (len < 1 || len > XFER_MAX_SHARDS) {
        PyErr_Format(PyExc_ValueError, "1..%d addresses", XFER_MAX_SHARDS);
        return -1;
    }
    for (Py_ssize_t k = 0; k < len; k++)
        if (!(addrs[k] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, k))))
            return -1;
    *n = (uint16_t)len;
    return 0;
}

static int start(pyx_cside *cs, const pyx_consumer_opts *o,
                 const char *const *addrs)
{
    pyx_engine_opts eo = {0};
    pyx_core *c;
    int rc = pyx_core_new(&eo, &c);
    if (rc)
        return rc;
    xfer_consumer_config cfg;
    pyx_config_consumer(o, c->base, cs->nshards, addrs, &cfg);
    cfg.available = on_available;
    cfg.unavailable = on_unavailable;
    cfg.link = on_link;
    cfg.ud = cs;
    cs->core = c;
    rc = xfer_consumer_new(&cfg, &cs->c);
    if (rc == 0) {
        pyx_core_host(c, cs, cside_loop_del);
        rc = pyx_core_start(c);
    }
    return rc; /* on an error cside_free deletes what was made */
}

static int consumer_init(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"addrs", "shm", "buffers", "group", "max_ids",
                          "max_tombstones", "mailbox_cap", "ready_deadline",
                          "tombstone_ttl", "connect_timeout",
                          "reconnect_min", "reconnect_max", "secret",
                          "session", "request_timeout", NULL};
    pyx_consumer *self = (pyx_consumer *)obj;
    PyObject *addrs, *buffers = Py_None, *d[6] = {0};
    PyObject *secret = NULL, *session = NULL;
    const char *shm = NULL;
    pyx_consumer_opts o = {0};
    const char *a[XFER_MAX_SHARDS];
    if (self->cs) {
        PyErr_SetString(PyExc_RuntimeError, "Consumer.__init__ called twice");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$zOIIIIOOOOOOOO:Consumer",
                                     kwl, &addrs, &shm, &buffers, &o.group,
                                     &o.max_ids, &o.max_tombstones,
                                     &o.mailbox_cap, &d[0], &d[1], &d[2],
                                     &d[3], &d[4], &secret, &session,
                                     &d[5]) ||
        pyx_auth_parse(secret, session, &o.auth))
        return -1;
    if (shm && buffers != Py_None) {
        PyErr_SetString(PyExc_ValueError, "shm= or buffers=, not both");
        return -1;
    }
    PyObject *seq = PySequence_Fast(addrs, "addrs must be a sequence of "
                                           "'host:port' strings");
    if (!seq)
        return -1;
    pyx_cside *cs = NULL;
    int rc = -1;
    uint16_t n;
    if (parse_durations(d, &o) || take_addrs(seq, a, &n) ||
        !(cs = cside_new()))
        goto out;
    cs->nshards = n;
    if ((shm && take_shm(cs, shm)) ||
        (buffers != Py_None && take_buffers(cs, buffers)))
        goto out;
    int xrc = start(cs, &o, a);
    if (xrc) {
        pyx_raise(xrc);
        goto out;
    }
    self->cs = cs;
    cs = NULL;
    rc = 0;
out:
    if (cs) {
        cs->closed = true;
        cside_free(cs);
    }
    Py_DECREF(seq);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Popping (GIL)                                                           */
/* ---------------------------------------------------------------------- */

static pyx_outcome *pop_locked(pyx_cside *cs)
{
    pyx_outcome *o = cs->head;
    if (o) {
        cs->head = o->next;
        if (!cs->head)
            cs->tail = &cs->head;
        cs->queued--;
    }
    return o;
}

static PyObject *wrap(pyx_consumer *self, pyx_outcome *o)
{
    self->cs->popped++;
    return pyx_outcome_wrap(o, self->cs, (PyObject *)self);
}

/* _pop() -> the next outcome, or None when none is queued (or closed). */
static PyObject *consumer_pop(PyObject *obj, PyObject *unused)
{
    pyx_consumer *self = (pyx_consumer *)obj;
    pyx_cside *cs = self->cs;
    if (!cs || cs->closed)
        Py_RETURN_NONE;
    pthread_mutex_lock(&cs->lock);
    pyx_outcome *o = pop_locked(cs);
    pthread_mutex_unlock(&cs->lock);
    if (!o)
        Py_RETURN_NONE;
    return wrap(self, o);
}

/* _ack(): the eventfd was seen; the next outcome writes it again. */
static PyObject *consumer_ack(PyObject *obj, PyObject *unused)
{
    pyx_cside *cs = ((pyx_consumer *)obj)->cs;
    if (!cs)
        Py_RETURN_NONE;
    uint64_t v;
    pthread_mutex_lock(&cs->lock);
    while (read(cs->efd, &v, sizeof v) < 0 && errno == EINTR) {
    }
    cs->wake_pending = false;
    pthread_mutex_unlock(&cs->lock);
    Py_RETURN_NONE;
}


/* Wait up to `slice` seconds, without the GIL, until an outcome is
 * queued or the consumer closes.  The pop itself is made with the GIL,
 * so that a close, which runs with it, sees every outcome popped before
 * it as held, and none after it. */
static void wait_slice(pyx_cside *cs, double slice)
{
    Py_BEGIN_ALLOW_THREADS
    struct timespec ts;
    pyx_deadline_in(&ts, slice);
    pthread_mutex_lock(&cs->lock);
    while (!cs->head && !cs->q_closed &&
           pthread_cond_timedwait(&cs->cond, &cs->lock, &ts) == 0) {
    }
    pthread_mutex_unlock(&cs->lock);
    Py_END_ALLOW_THREADS
}

/* get(timeout=None) -> the next outcome; blocks without the GIL, in
 * slices of 100 ms between which signal handlers run.  TimeoutError after
 * timeout seconds; ShutdownError once the consumer is closed. */
static PyObject *consumer_get(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"timeout", NULL};
    pyx_consumer *self = (pyx_consumer *)obj;
    PyObject *tmo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:get", kwl, &tmo))
        return NULL;
    uint64_t tns = 0;
    if (pyx_ns_of(tmo, &tns))
        return NULL;
    double left = tmo == Py_None ? -1 : (double)tns / 1e9;
    pyx_cside *cs = self->cs;
    for (;;) {
        if (!cs || cs->closed)
            return pyx_raise(XFER_ERR_SHUTDOWN);
        pthread_mutex_lock(&cs->lock);
        pyx_outcome *o = pop_locked(cs);
        pthread_mutex_unlock(&cs->lock);
        if (o)
            return wrap(self, o);
        if (left == 0) {
            PyErr_SetString(PyExc_TimeoutError, "no outcome in time");
            return NULL;
        }
        double slice = left >= 0 && left < 0.1 ? left : 0.1;
        wait_slice(cs, slice);
        if (left > 0 && (left -= slice) <= 0)
            left = 0; /* one last look, then TimeoutError */
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }
}

/* ---------------------------------------------------------------------- */
/* Calls on the loop                                                       */
/* ---------------------------------------------------------------------- */

typedef struct call_args {
    pyx_cside *cs;
    uint64_t id, deadline_ns;
    uint64_t *ids;
    size_t nids;
    int16_t shard;
    bool up;
    uint64_t timeout_ns, acked, nrefused;
    xfer_consumer_stats st;
    uint64_t map_failures, dropped, late, given_back, refused;
} call_args;

static int open_or_raise(pyx_consumer *self)
{
    if (!self->cs || self->cs->closed) {
        pyx_raise(XFER_ERR_SHUTDOWN);
        return -1;
    }
    return 0;
}

static int call(pyx_consumer *self, pyx_loop_fn fn, call_args *a)
{
    if (open_or_raise(self))
        return -1;
    a->cs = self->cs;
    int rc = pyx_core_call(self->cs->core, fn, a);
    if (rc)
        pyx_raise(rc);
    return rc ? -1 : 0;
}

static int parse_id(PyObject *o, uint64_t *id)
{
    *id = PyLong_AsUnsignedLongLong(o);
    if (*id == (uint64_t)-1 && PyErr_Occurred())
        return -1;
    if (*id == 0) {
        PyErr_SetString(PyExc_ValueError, "id 0 is reserved");
        return -1;
    }
    return 0;
}

static int expect_fn(pyx_core *c, void *arg)
{
    call_args *a = arg;
    return xfer_consumer_expect(a->cs->c, a->id, a->deadline_ns);
}

/* expect(id, timeout=None, *, deadline=None): id gets exactly one
 * outcome, unavailable (TIMEOUT) at the latest after timeout seconds or
 * at deadline (seconds on time.monotonic()'s clock, the consumer's). */
static PyObject *consumer_expect(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"id", "timeout", "deadline", NULL};
    pyx_consumer *self = (pyx_consumer *)obj;
    PyObject *ido, *tmo = Py_None, *dl = Py_None;
    call_args a = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O$O:expect", kwl, &ido,
                                     &tmo, &dl) ||
        parse_id(ido, &a.id))
        return NULL;
    if (tmo != Py_None && dl != Py_None) {
        PyErr_SetString(PyExc_ValueError, "timeout or deadline, not both");
        return NULL;
    }
    uint64_t ns = 0;
    if (pyx_ns_of(tmo != Py_None ? tmo : dl, &ns) || open_or_raise(self))
        return NULL;
    if (tmo != Py_None)
        a.deadline_ns = xfer_consumer_now(self->cs->c) + ns;
    else if (dl != Py_None)
        a.deadline_ns = ns ? ns : 1;
    if (call(self, expect_fn, &a) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int cancel_fn(pyx_core *c, void *arg)
{
    call_args *a = arg;
    return xfer_consumer_cancel(a->cs->c, a->id);
}

/* cancel(id): the consumer-side abort (idempotent).  StateError when the
 * id was already delivered available: release that instead. */
static PyObject *consumer_cancel(PyObject *obj, PyObject *arg)
{
    call_args a = {0};
    if (parse_id(arg, &a.id) || call((pyx_consumer *)obj, cancel_fn, &a) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* release(id): release the held Available of id (see Available.release).
 * NotFoundError when none is held. */
static PyObject *consumer_release(PyObject *obj, PyObject *arg)
{
    pyx_consumer *self = (pyx_consumer *)obj;
    uint64_t id;
    if (parse_id(arg, &id) || open_or_raise(self))
        return NULL;
    for (pyx_outcome *o = self->cs->held; o; o = o->hnext)
        if (o->id == id && o->avail && !o->release_asked)
            return PyObject_CallMethod(o->avail, "release", NULL);
    return pyx_raise(XFER_ERR_NOT_FOUND);
}

static int connected_fn(pyx_core *c, void *arg)
{
    call_args *a = arg;
    a->up = true;
    for (uint16_t k = 0; k < a->cs->nshards; k++)
        if (a->shard < 0 || a->shard == k)
            a->up = a->up && xfer_consumer_connected(a->cs->c, k);
    return 0;
}

static PyObject *consumer_connected(PyObject *obj, PyObject *args)
{
    pyx_consumer *self = (pyx_consumer *)obj;
    int shard = -1;
    call_args a = {0};
    if (!PyArg_ParseTuple(args, "|i:connected", &shard))
        return NULL;
    if (self->cs && (shard < -1 || shard >= self->cs->nshards)) {
        PyErr_SetString(PyExc_ValueError, "no such shard");
        return NULL;
    }
    a.shard = (int16_t)shard;
    if (call(self, connected_fn, &a) < 0)
        return NULL;
    return PyBool_FromLong(a.up);
}

static int stats_fn(pyx_core *c, void *arg)
{
    call_args *a = arg;
    pyx_cside *cs = a->cs;
    a->map_failures = cs->map_failures;
    a->dropped = cs->dropped;
    a->late = cs->late_given_back;
    a->given_back = cs->given_back;
    a->refused = cs->give_back_refused;
    return pyx_consumer_stats_get(cs->c, &a->st);
}

static int put(PyObject *d, const char *k, uint64_t v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    int rc = o ? PyDict_SetItemString(d, k, o) : -1;
    Py_XDECREF(o);
    return rc;
}

/* stats() -> the C consumer's counters and the binding's own (py_*). */
static PyObject *consumer_stats(PyObject *obj, PyObject *unused)
{
    pyx_consumer *self = (pyx_consumer *)obj;
    call_args a = {0};
    if (call(self, stats_fn, &a) < 0)
        return NULL;
    pyx_cside *cs = self->cs;
    pthread_mutex_lock(&cs->lock);
    uint64_t queued = cs->queued;
    pthread_mutex_unlock(&cs->lock);
    PyObject *d = pyx_stats_consumer(&a.st);
    if (d && (put(d, "py_queued", queued) || put(d, "py_popped", cs->popped) ||
              put(d, "py_held", cs->nheld) ||
              put(d, "py_given_back", a.given_back) ||
              put(d, "py_give_back_refused", a.refused) ||
              put(d, "py_dropped", a.dropped) ||
              put(d, "py_map_failures", a.map_failures)))
        Py_CLEAR(d);
    return d;
}

static PyObject *consumer_now(PyObject *obj, PyObject *unused)
{
    pyx_consumer *self = (pyx_consumer *)obj;
    if (open_or_raise(self))
        return NULL;
    return PyFloat_FromDouble((double)xfer_consumer_now(self->cs->c) / 1e9);
}

static PyObject *consumer_fileno(PyObject *obj, PyObject *unused)
{
    pyx_cside *cs = ((pyx_consumer *)obj)->cs;
    if (!cs)
        return pyx_raise(XFER_ERR_SHUTDOWN);
    return PyLong_FromLong(cs->efd);
}

/* ---------------------------------------------------------------------- */
/* Closing                                                                 */
/* ---------------------------------------------------------------------- */

/* On the loop: from now on every available is given back at once; give
 * back what Python held and what is still queued. */
static int close_fn(pyx_core *c, void *arg)
{
    call_args *a = arg;
    pyx_cside *cs = a->cs;
    cs->closing = true;
    for (size_t i = 0; i < a->nids; i++)
        if (xfer_consumer_release(cs->c, a->ids[i]) == 0)
            cs->given_back++;
    pthread_mutex_lock(&cs->lock);
    for (pyx_outcome *o = cs->head; o; o = o->next)
        if (!o->reason && xfer_consumer_release(cs->c, o->id) == 0)
            cs->late_given_back++;
    pthread_mutex_unlock(&cs->lock);
    return 0;
}

/* The first step of every close (GIL): no more pops or give-backs; the
 * views of every held outcome are released; waiters wake; the loop gives
 * everything back. */
static void begin_close(pyx_consumer *self)
{
    pyx_cside *cs = self->cs;
    if (!cs || cs->closed)
        return;
    cs->closed = true;
    call_args a = {.cs = cs};
    a.ids = cs->nheld ? malloc(cs->nheld * sizeof *a.ids) : NULL;
    while (cs->held) {
        pyx_outcome *o = cs->held;
        if (o->avail)
            pyx_available_drop_views(o->avail);
        o->release_asked = o->release_sent = true;
        if (a.ids)
            a.ids[a.nids++] = o->id;
        pyx_cside_unhold(cs, o);
    }
    pthread_mutex_lock(&cs->lock);
    cs->q_closed = true;
    if (!cs->wake_pending) {
        uint64_t one = 1;
        cs->wake_pending = true;
        while (write(cs->efd, &one, sizeof one) < 0 && errno == EINTR) {
        }
    }
    pthread_cond_broadcast(&cs->cond);
    pthread_mutex_unlock(&cs->lock);
    pyx_core_call(cs->core, close_fn, &a);
    free(a.ids);
}

/* From the loop: every shard answered (or the timeout came). */
static void on_c_closed(void *ud, int status, uint64_t shards)
{
    pyx_cside *cs = ud;
    pthread_mutex_lock(&cs->lock);
    cs->c_closed = true;
    cs->c_close_status = status;
    cs->c_close_shards = shards;
    pthread_cond_broadcast(&cs->cond);
    pthread_mutex_unlock(&cs->lock);
}

static int c_close_fn(pyx_core *c, void *arg)
{
    call_args *a = arg;
    return xfer_consumer_close(a->cs->c, a->timeout_ns, on_c_closed, a->cs);
}

/* After begin_close (GIL): xfer_consumer_close, and wait (without the
 * GIL) until every shard answered what the consumer accepted, the give-
 * backs of the close included, or timeout_ns passed.  The shards that
 * still owed an answer go to *owing. */
static void flush_close(pyx_consumer *self, uint64_t timeout_ns,
                        uint64_t *owing)
{
    pyx_cside *cs = self->cs;
    *owing = 0;
    if (!cs || cs->c_close_asked || self->core_closed)
        return;
    cs->c_close_asked = true;
    call_args a = {.cs = cs, .timeout_ns = timeout_ns};
    if (pyx_core_call(cs->core, c_close_fn, &a) != 0)
        return;
    Py_BEGIN_ALLOW_THREADS
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    /* The C close's own timeout ends it; a second more, to be sure. */
    uint64_t ns = (uint64_t)end.tv_nsec + timeout_ns + 1000000000ull;
    end.tv_sec += (time_t)(ns / 1000000000ull);
    end.tv_nsec = (long)(ns % 1000000000ull);
    pthread_mutex_lock(&cs->lock);
    while (!cs->c_closed &&
           pthread_cond_timedwait(&cs->cond, &cs->lock, &end) != ETIMEDOUT) {
    }
    *owing = cs->c_closed ? cs->c_close_shards
                          : (cs->nshards == 64
                                 ? UINT64_MAX
                                 : (UINT64_C(1) << cs->nshards) - 1);
    pthread_mutex_unlock(&cs->lock);
    Py_END_ALLOW_THREADS
}

static void finish_close(pyx_consumer *self)
{
    begin_close(self);
    if (self->cs)
        pyx_core_close(self->cs->core, &self->core_closed);
}

static PyObject *shard_list(uint64_t mask, uint16_t n)
{
    PyObject *l = PyList_New(0);
    for (uint16_t k = 0; l && k < n; k++) {
        if (!(mask & (UINT64_C(1) << k)))
            continue;
        PyObject *v = PyLong_FromLong(k);
        if (!v || PyList_Append(l, v) < 0)
            Py_CLEAR(l);
        Py_XDECREF(v);
    }
    return l;
}

/* close(timeout=5.0) -> the shards that did not answer in time: give
 * everything back, deliver every cancel and release accepted (waiting up
 * to timeout seconds for the shards to answer, reconnecting as usual),
 * then close the connections.  [] when everything was delivered. */
static PyObject *consumer_close(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"timeout", NULL};
    pyx_consumer *self = (pyx_consumer *)obj;
    double timeout = 5.0;
    uint64_t owing = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|d:close", kwl, &timeout))
        return NULL;
    if (timeout < 0 || timeout > 1e6) {
        PyErr_SetString(PyExc_ValueError, "timeout out of range");
        return NULL;
    }
    uint16_t n = self->cs ? self->cs->nshards : 0;
    begin_close(self);
    flush_close(self, (uint64_t)(timeout * 1e9), &owing);
    finish_close(self);
    return shard_list(owing, n);
}

static PyObject *consumer_finish_close(PyObject *obj, PyObject *unused)
{
    finish_close((pyx_consumer *)obj);
    Py_RETURN_NONE;
}

static int cancel_shards_fn(pyx_core *c, void *arg)
{
    call_args *a = arg;
    return xfer_consumer_cancel_shards(a->cs->c, a->id, &a->acked,
                                       &a->nrefused);
}

/* cancel_shards(id) -> (acked, refused): the shards that acknowledged the
 * consumer's cancel of id, and those that refused it; a shard in neither
 * has not answered yet (its link is down).  NotFoundError when no cancel
 * of id is remembered. */
static PyObject *consumer_cancel_shards(PyObject *obj, PyObject *arg)
{
    pyx_consumer *self = (pyx_consumer *)obj;
    call_args a = {0};
    if (parse_id(arg, &a.id) || call(self, cancel_shards_fn, &a) < 0)
        return NULL;
    PyObject *acked = shard_list(a.acked, self->cs->nshards);
    PyObject *refused = acked ? shard_list(a.nrefused, self->cs->nshards)
                              : NULL;
    PyObject *t = refused ? PyTuple_Pack(2, acked, refused) : NULL;
    Py_XDECREF(acked);
    Py_XDECREF(refused);
    return t;
}

static PyObject *consumer_begin_aclose(PyObject *obj, PyObject *unused)
{
    pyx_consumer *self = (pyx_consumer *)obj;
    pyx_ticket *t;
    PyObject *fut = pyx_channel_oneshot(PYX_T_CLOSED, &t);
    if (!fut)
        return NULL;
    begin_close(self);
    if (!self->cs || self->core_closed)
        pyx_ticket_complete(t, &(xfer_result){0});
    else
        pyx_core_begin_close(self->cs->core, t);
    return fut;
}

static PyObject *get_closed(PyObject *obj, void *unused)
{
    pyx_cside *cs = ((pyx_consumer *)obj)->cs;
    return PyBool_FromLong(!cs || cs->closed);
}

static PyObject *get_nshards(PyObject *obj, void *unused)
{
    pyx_cside *cs = ((pyx_consumer *)obj)->cs;
    return PyLong_FromLong(cs ? cs->nshards : 0);
}

static PyObject *get_shm(PyObject *obj, void *unused)
{
    pyx_cside *cs = ((pyx_consumer *)obj)->cs;
    if (!cs || !cs->use_shm)
        Py_RETURN_NONE;
    return PyUnicode_FromString(cs->shm);
}

static void consumer_dealloc(PyObject *obj)
{
    pyx_consumer *self = (pyx_consumer *)obj;
    if (self->weakrefs)
        PyObject_ClearWeakRefs(obj);
    finish_close(self);
    pyx_cside_unref(self->cs);
    Py_TYPE(obj)->tp_free(obj);
}

#define KW (METH_VARARGS | METH_KEYWORDS)

static PyMethodDef consumer_methods[] = {
    {"get", (PyCFunction)(void (*)(void))consumer_get, KW,
     "get($self, timeout=None)\n--\n\n"
     "get(timeout=None) -> Available or Unavailable; blocks without the "
     "GIL (TimeoutError after timeout, ShutdownError once closed)"},
    {"expect", (PyCFunction)(void (*)(void))consumer_expect, KW,
     "expect($self, id, timeout=None, *, deadline=None)\n--\n\n"
     "expect(id, timeout=None, *, deadline=None): id gets exactly one "
     "outcome, unavailable (TIMEOUT) at the latest at its deadline"},
    {"cancel", consumer_cancel, METH_O,
     "cancel($self, id, /)\n--\n\n"
     "cancel(id): cancel id on every shard (the producer's commit fails); "
     "idempotent"},
    {"release", consumer_release, METH_O,
     "release($self, id, /)\n--\n\n"
     "release(id): release the held Available of id"},
    {"connected", consumer_connected, METH_VARARGS,
     "connected($self, shard=None, /)\n--\n\n"
     "connected(shard=None): is that shard's (or every) link up"},
    {"stats", consumer_stats, METH_NOARGS,
     "stats($self, /)\n--\n\nstats() -> dict of counters"},
    {"now", consumer_now, METH_NOARGS,
     "now($self, /)\n--\n\n"
     "now() -> the consumer's clock in seconds (time.monotonic()'s)"},
    {"fileno", consumer_fileno, METH_NOARGS,
     "fileno($self, /)\n--\n\n"
     "the eventfd that becomes readable when an outcome is queued"},
    {"cancel_shards", consumer_cancel_shards, METH_O,
     "cancel_shards($self, id, /)\n--\n\n"
     "cancel_shards(id) -> (acked, refused) lists of shards"},
    {"close", (PyCFunction)(void (*)(void))consumer_close, KW,
     "close($self, timeout=5.0)\n--\n\n"
     "close(timeout=5.0) -> shards that did not answer in time: give back "
     "every held and queued outcome's data, deliver every cancel and "
     "release accepted, close the connections; blocks without the GIL"},
    {"_pop", consumer_pop, METH_NOARGS, NULL},
    {"_ack", consumer_ack, METH_NOARGS, NULL},
    {"_begin_aclose", consumer_begin_aclose, METH_NOARGS, NULL},
    {"_finish_close", consumer_finish_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef consumer_getset[] = {
    {"closed", get_closed, NULL, "True once closing began", NULL},
    {"nshards", get_nshards, NULL, "shards in the group", NULL},
    {"shm", get_shm, NULL, "the shared-memory name, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pyx_consumer_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xfer._xfer.Consumer",
    .tp_basicsize = sizeof(pyx_consumer),
    .tp_dealloc = consumer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The consumer scheduler's client, on a loop thread of its own.",
    .tp_weaklistoffset = offsetof(pyx_consumer, weakrefs),
    .tp_methods = consumer_methods,
    .tp_getset = consumer_getset,
    .tp_init = consumer_init,
    .tp_new = PyType_GenericNew,
};
