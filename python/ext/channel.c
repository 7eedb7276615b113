/*
 * python/ext/channel.c - how completions get from the engine's loop
 * thread to Python: one FIFO of tickets per destination, drained with the
 * GIL by the thread that owns the destination.
 *
 * Three kinds of channel:
 *  - FD: an asyncio loop watches an eventfd (loop.add_reader); the loop
 *    thread appends a ticket and writes the eventfd when the queue was
 *    idle; the reader callback, on the asyncio loop's own thread, drains
 *    every ticket queued so far.  The loop thread never takes the GIL.
 *  - CALL_SOON: the same queue, but the loop thread takes the GIL and calls
 *    loop.call_soon_threadsafe(drain) when the queue was idle (kept to
 *    measure against FD: tools/bench/pybench.py).
 *  - THREAD: a thread of the channel's own waits on a condition and calls
 *    the callbacks of callback tickets with the GIL.
 *
 * What must stay true:
 *  - every ticket pushed is delivered exactly once, in push order, with
 *    the GIL, on the destination's thread (I1);
 *  - a future that is already done (its loop's code set it, or the user
 *    did) is left alone: that completion is counted as unclaimed;
 *  - an exception raised while delivering (a callback that raises, a
 *    future that refuses its result) is reported through
 *    sys.unraisablehook and delivery goes on with the next ticket;
 *  - a retired channel stops watching its fd only when every ticket made
 *    for it was delivered, so no completion is stranded (a one-shot
 *    channel, for one future of a Server or Consumer, is retired at once
 *    and so lives exactly until its one ticket was delivered).
 */
#include "pyx.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

enum { CH_FD = PYX_NOTIFY_FD, CH_CALL_SOON = PYX_NOTIFY_CALL_SOON,
       CH_THREAD = 2 };

struct pyx_channel {
    PyObject_HEAD
    pthread_mutex_t lock;   /* head, tail, wake_pending, stop */
    pthread_cond_t cond;    /* THREAD: wakes its thread */
    pyx_ticket *head, **tail;
    int wake_pending;       /* a wake-up is on its way */
    int kind;
    int efd;                /* FD: -1 otherwise */
    PyObject *loop;         /* FD, CALL_SOON: the asyncio loop */
    pthread_t thread;       /* THREAD */
    bool thread_started, stop, retired, unwatched;
    uint64_t expected;      /* tickets made for it, not yet delivered */
    uint64_t delivered, unclaimed, errors;
};

/* ---------------------------------------------------------------------- */
/* Delivery (GIL)                                                          */
/* ---------------------------------------------------------------------- */

static void report(PyObject *where)
{
    PyErr_WriteUnraisable(where);
}

/* Method names, interned once (GIL). */
static PyObject *s_done, *s_set_result, *s_set_exception, *s_exception;

static int intern_names(void)
{
    if (s_done)
        return 0;
    s_done = PyUnicode_InternFromString("done");
    s_set_result = PyUnicode_InternFromString("set_result");
    s_set_exception = PyUnicode_InternFromString("set_exception");
    s_exception = PyUnicode_InternFromString("exception");
    return s_done && s_set_result && s_set_exception && s_exception ? 0
                                                                     : -1;
}

/* 1 when fut is already done, 0 when not, -1 with an exception. */
static int future_done(PyObject *fut)
{
    PyObject *r = PyObject_CallMethodNoArgs(fut, s_done);
    if (!r)
        return -1;
    int d = PyObject_IsTrue(r);
    Py_DECREF(r);
    return d;
}

static void deliver_future(pyx_channel *c, pyx_ticket *t)
{
    int d = future_done(t->target);
    if (d != 0) {
        if (d < 0) {
            c->errors++;
            report(t->target);
        } else {
            c->unclaimed++;
        }
        return;
    }
    PyObject *r = NULL;
    if (t->kind == PYX_T_CLOSED) {
        r = PyObject_CallMethodOneArg(t->target, s_set_result, Py_None);
    } else if (t->kind == PYX_T_PART && !t->res.status) {
        PyObject *n = PyLong_FromUnsignedLongLong(t->res.user_data);
        r = n ? PyObject_CallMethodOneArg(t->target, s_set_result, n) : NULL;
        Py_XDECREF(n);
    } else if (t->kind == PYX_T_PART) {
        /* A failed part's future is marked retrieved (exception() read
         * once): the stream's outcome carries the failure, and a producer
         * that never awaits its parts must not be warned about each. */
        t->res.user_data = 0;
        PyObject *res = pyx_result_new(&t->res);
        PyObject *exc = res ? pyx_error_for(res, t->res.status) : NULL;
        r = exc ? PyObject_CallMethodOneArg(t->target, s_set_exception, exc)
                : NULL;
        if (r) {
            Py_DECREF(r);
            r = PyObject_CallMethodNoArgs(t->target, s_exception);
        }
        Py_XDECREF(exc);
        Py_XDECREF(res);
    } else if (t->kind == PYX_T_BOOL) {
        r = PyObject_CallMethodOneArg(t->target, s_set_result,
                                      t->res.status ? Py_False : Py_True);
    } else {
        PyObject *res = pyx_result_new(&t->res);
        PyObject *exc = res && t->res.status ? pyx_error_for(res,
                                                             t->res.status)
                                             : NULL;
        if (res && !t->res.status)
            r = PyObject_CallMethodOneArg(t->target, s_set_result, res);
        else if (exc)
            r = PyObject_CallMethodOneArg(t->target, s_set_exception, exc);
        Py_XDECREF(exc);
        Py_XDECREF(res);
    }
    if (!r) {
        c->errors++;
        report(t->target);
    }
    Py_XDECREF(r);
}

static void deliver_callback(pyx_channel *c, pyx_ticket *t)
{
    PyObject *res = pyx_result_new(&t->res);
    PyObject *r = res ? PyObject_CallOneArg(t->target, res) : NULL;
    if (!r) {
        c->errors++;
        report(t->target);
    }
    Py_XDECREF(r);
    Py_XDECREF(res);
}

static void finish_retire(pyx_channel *c);

static void deliver_all(pyx_channel *c)
{
    pthread_mutex_lock(&c->lock);
    pyx_ticket *t = c->head;
    c->head = NULL;
    c->tail = &c->head;
    c->wake_pending = 0;
    pthread_mutex_unlock(&c->lock);
    while (t) {
        pyx_ticket *next = t->next;
        if (t->kind == PYX_T_CALLBACK)
            deliver_callback(c, t);
        else
            deliver_future(c, t);
        c->delivered++;
        c->expected--;
        Py_DECREF(t->target);
        free(t);
        Py_DECREF(c); /* the ticket's reference; the caller holds one */
        t = next;
    }
    if (c->retired && c->expected == 0)
        finish_retire(c);
}

/* The reader callback of an FD channel and the call_soon target. */
static PyObject *channel_drain(PyObject *self, PyObject *unused)
{
    pyx_channel *c = (pyx_channel *)self;
    if (c->efd >= 0) {
        uint64_t v;
        while (read(c->efd, &v, sizeof v) < 0 && errno == EINTR) {
        }
    }
    Py_INCREF(c);
    deliver_all(c);
    Py_DECREF(c);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------- */
/* Pushing (loop thread, or any thread)                                    */
/* ---------------------------------------------------------------------- */

static void wake_call_soon(pyx_channel *c)
{
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *drain = PyObject_GetAttrString((PyObject *)c, "drain");
    PyObject *name = PyUnicode_FromString("call_soon_threadsafe");
    PyObject *r = drain && name
                      ? PyObject_CallMethodOneArg(c->loop, name, drain)
                      : NULL;
    Py_XDECREF(name);
    if (!r)
        PyErr_Clear(); /* a closed loop: nothing can be delivered there */
    Py_XDECREF(r);
    Py_XDECREF(drain);
    PyGILState_Release(g);
}

void pyx_channel_push(pyx_channel *c, pyx_ticket *t)
{
    t->next = NULL;
    pthread_mutex_lock(&c->lock);
    *c->tail = t;
    c->tail = &t->next;
    int wake = !c->wake_pending;
    c->wake_pending = 1;
    if (c->kind == CH_THREAD && wake)
        pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
    if (!wake)
        return;
    if (c->kind == CH_FD) {
        uint64_t one = 1;
        while (write(c->efd, &one, sizeof one) < 0 && errno == EINTR) {
        }
    } else if (c->kind == CH_CALL_SOON) {
        wake_call_soon(c);
    }
}

/* ---------------------------------------------------------------------- */
/* The callback thread                                                     */
/* ---------------------------------------------------------------------- */

static void *thread_main(void *arg)
{
    pyx_channel *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->lock);
        while (!c->head && !c->stop)
            pthread_cond_wait(&c->cond, &c->lock);
        bool end = !c->head;
        pthread_mutex_unlock(&c->lock);
        if (end)
            break;
        PyGILState_STATE g = PyGILState_Ensure();
        deliver_all(c);
        PyGILState_Release(g);
    }
    PyGILState_STATE g = PyGILState_Ensure();
    Py_DECREF(c); /* the thread's own reference */
    PyGILState_Release(g);
    return NULL;
}

/* ---------------------------------------------------------------------- */
/* Creation and retirement (GIL)                                           */
/* ---------------------------------------------------------------------- */

static pyx_channel *channel_alloc(int kind)
{
    if (intern_names())
        return NULL;
    pyx_channel *c = PyObject_New(pyx_channel, &pyx_channel_type);
    if (!c)
        return NULL;
    c->head = NULL;
    c->tail = &c->head;
    c->wake_pending = 0;
    c->kind = kind;
    c->efd = -1;
    c->loop = NULL;
    c->thread_started = c->stop = c->retired = c->unwatched = false;
    c->expected = c->delivered = c->unclaimed = c->errors = 0;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    return c;
}

pyx_channel *pyx_channel_for_loop(PyObject *loop, int notify)
{
    pyx_channel *c = channel_alloc(notify);
    if (!c)
        return NULL;
    Py_INCREF(loop);
    c->loop = loop;
    if (notify != CH_FD)
        return c;
    c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(c);
        return NULL;
    }
    PyObject *drain = PyObject_GetAttrString((PyObject *)c, "drain");
    PyObject *r = drain ? PyObject_CallMethod(loop, "add_reader", "iO",
                                              c->efd, drain)
                        : NULL;
    Py_XDECREF(drain);
    if (!r) {
        Py_DECREF(c);
        return NULL;
    }
    Py_DECREF(r);
    return c;
}

pyx_channel *pyx_channel_thread(void)
{
    pyx_channel *c = channel_alloc(CH_THREAD);
    if (!c)
        return NULL;
    Py_INCREF(c); /* the thread's */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->thread, NULL, thread_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        Py_DECREF(c);
        Py_DECREF(c);
        PyErr_SetString(PyExc_RuntimeError, "cannot start a thread");
        return NULL;
    }
    c->thread_started = true;
    return c;
}

PyObject *pyx_channel_oneshot(int kind, pyx_ticket **out)
{
    PyObject *loop = pyx_running_loop();
    if (!loop)
        return NULL;
    PyObject *fut = PyObject_CallMethod(loop, "create_future", NULL);
    pyx_channel *c = fut ? pyx_channel_for_loop(loop, CH_FD) : NULL;
    Py_DECREF(loop);
    pyx_ticket *t = c ? calloc(1, sizeof *t) : NULL;
    if (!t) {
        if (c && !PyErr_Occurred())
            PyErr_NoMemory();
        if (c)
            pyx_channel_retire(c);
        Py_XDECREF(c);
        Py_XDECREF(fut);
        return NULL;
    }
    t->kind = (uint8_t)kind;
    t->target = fut;
    Py_INCREF(fut);
    t->chan = c; /* the ticket's reference */
    pyx_channel_expect(c, 1);
    pyx_channel_retire(c); /* unwatched once t was delivered */
    *out = t;
    return fut;
}

void pyx_channel_expect(pyx_channel *c, int delta)
{
    c->expected += (uint64_t)(int64_t)delta;
}

bool pyx_channel_serves(const pyx_channel *c, PyObject *loop, int notify)
{
    return !c->retired && c->loop == loop && c->kind == notify;
}

void pyx_channel_counts(const pyx_channel *c, uint64_t *delivered,
                        uint64_t *unclaimed, uint64_t *errors)
{
    *delivered = c->delivered;
    *unclaimed = c->unclaimed;
    *errors = c->errors;
}

/* Stop watching the fd: from the loop's own thread directly, else through
 * call_soon_threadsafe (add_reader/remove_reader are not thread-safe).  A
 * closed loop watches nothing any more. */
static void unwatch(pyx_channel *c)
{
    if (c->kind != CH_FD || c->unwatched)
        return;
    c->unwatched = true;
    PyObject *closed = PyObject_CallMethod(c->loop, "is_closed", NULL);
    int is_closed = closed ? PyObject_IsTrue(closed) : -1;
    Py_XDECREF(closed);
    if (is_closed != 0) {
        PyErr_Clear();
        return;
    }
    PyObject *running = PyObject_CallMethod(c->loop, "is_running", NULL);
    PyObject *cur = pyx_running_loop();
    PyErr_Clear();
    PyObject *r;
    if (cur == c->loop || (running && !PyObject_IsTrue(running)))
        r = PyObject_CallMethod(c->loop, "remove_reader", "i", c->efd);
    else {
        PyObject *rm = PyObject_GetAttrString(c->loop, "remove_reader");
        r = rm ? PyObject_CallMethod(c->loop, "call_soon_threadsafe", "Oi",
                                     rm, c->efd)
               : NULL;
        Py_XDECREF(rm);
    }
    if (!r)
        report(c->loop);
    Py_XDECREF(r);
    Py_XDECREF(cur);
    Py_XDECREF(running);
}

static void finish_retire(pyx_channel *c)
{
    if (c->kind != CH_THREAD) {
        unwatch(c);
        return;
    }
    if (!c->thread_started)
        return;
    pthread_mutex_lock(&c->lock);
    c->stop = true;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
    c->thread_started = false;
    if (pthread_equal(pthread_self(), c->thread)) {
        pthread_detach(c->thread); /* a callback shut the engine down */
        return;
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_join(c->thread, NULL);
    Py_END_ALLOW_THREADS
}

void pyx_channel_retire(pyx_channel *c)
{
    if (c->retired)
        return;
    c->retired = true;
    if (c->kind == CH_THREAD || c->expected == 0)
        finish_retire(c);
}

static void channel_dealloc(PyObject *self)
{
    pyx_channel *c = (pyx_channel *)self;
    /* Every ticket holds a reference, so none is left here. */
    if (c->efd >= 0)
        close(c->efd);
    Py_XDECREF(c->loop);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    PyObject_Free(self);
}

static PyMethodDef channel_methods[] = {
    {"drain", channel_drain, METH_NOARGS,
     "drain($self, /)\n--\n\n"
     "Deliver every completion queued so far (the loop's reader)."},
    {NULL, NULL, 0, NULL}};

PyTypeObject pyx_channel_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xfer._xfer._Channel",
    .tp_basicsize = sizeof(pyx_channel),
    .tp_dealloc = channel_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Where the engine's completions for one destination go.",
    .tp_methods = channel_methods,
};
