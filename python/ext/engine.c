/*
 * python/ext/engine.c - xfer.Engine: the producer.  The libevent loop runs
 * on a thread the engine owns (core.c); every call from Python goes
 * through the engine's mailbox, and completions come back through
 * channels (channel.c) to the asyncio loop that awaited them, to a thread
 * blocked in submit_wait, or to the engine's callback thread.
 *
 * What must stay true:
 *  - I1: every submit that returned normally completes exactly once: its
 *    ticket holds the future (or callback) until a channel delivers the
 *    result.  Dropping the Transfer, the Engine or the pool changes
 *    nothing about that: the ticket and the engine's tables hold what the
 *    completion needs.  A submit that raised never completes.
 *  - I3: a pool's buffer is let go only after the loop unregistered it
 *    (no transfer uses it) or after the loop stopped (shutdown ended every
 *    transfer first).  The Engine holds every registered pool.
 *  - Closing (shutdown(), aclose(), or the last reference going) ends
 *    every transfer through the engine's own shutdown, waits for the loop
 *    to stop without holding the GIL, and only then frees the C engine
 *    and the buffers.
 */
#include "pyx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct pyx_engine {
    PyObject_HEAD
    pyx_core *core;
    int notify;              /* PYX_NOTIFY_*: how asyncio loops are woken */
    PyObject *pools;         /* dict: pool id -> Pool (registered) */
    PyObject *channels;      /* dict: asyncio loop -> channel */
    PyObject *all_channels;  /* list: every channel ever made, for stats */
    PyObject *last_loop;     /* borrowed: the key of last_chan */
    pyx_channel *last_chan;  /* borrowed from channels */
    pyx_channel *cb_chan;    /* the callback thread's, made on first use */
    PyObject *transports;    /* list: the attached transport objects */
    uint16_t gshards[PYX_MAX_GROUPS]; /* shards per group, for checks */
    uint32_t ngroups;
    bool closed;             /* engine freed, buffers let go */
    uint64_t submits, refused;
    PyObject *weakrefs;
} pyx_engine;

static PyObject *s_id, *s_engine;

/* ---------------------------------------------------------------------- */
/* Construction                                                            */
/* ---------------------------------------------------------------------- */

static PyObject *engine_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    pyx_engine *self = (pyx_engine *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->pools = PyDict_New();
    self->channels = PyDict_New();
    self->all_channels = PyList_New(0);
    self->transports = PyList_New(0);
    if (!s_id) {
        s_id = PyUnicode_InternFromString("id");
        s_engine = PyUnicode_InternFromString("_engine");
    }
    if (!self->pools || !self->channels || !self->all_channels ||
        !self->transports || !s_id || !s_engine) {
        Py_DECREF(self);
        return NULL;
    }
    self->closed = true; /* until __init__ made the engine */
    return (PyObject *)self;
}

static int parse_opts(PyObject *kw_cfg[], pyx_engine_opts *o)
{
    if (pyx_ns_of(kw_cfg[0], &o->default_timeout_ns) ||
        pyx_ns_of(kw_cfg[1], &o->tombstone_ttl_ns) ||
        pyx_ns_of(kw_cfg[2], &o->cancel_op_timeout_ns) ||
        pyx_ns_of(kw_cfg[3], &o->cancel_backoff_ns))
        return -1;
    /* shutdown_timeout: None or 0, the library's 10 s; math.inf, none. */
    PyObject *st = kw_cfg[4];
    if (st && PyFloat_Check(st) && isinf(PyFloat_AS_DOUBLE(st)) &&
        PyFloat_AS_DOUBLE(st) > 0) {
        o->shutdown_timeout_ns = UINT64_MAX;
        return 0;
    }
    return pyx_ns_of(st, &o->shutdown_timeout_ns);
}

static int remember_group(pyx_engine *self, PyObject *tp, uint32_t group)
{
    PyObject *n = PyObject_GetAttrString(tp, "nshards");
    long shards = n ? PyLong_AsLong(n) : -1;
    Py_XDECREF(n);
    if (shards < 0)
        return -1;
    self->gshards[group] = (uint16_t)shards;
    if (group + 1 > self->ngroups)
        self->ngroups = group + 1;
    return PyList_Append(self->transports, tp);
}

static int engine_init(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"transport", "max_transfers", "max_tombstones",
                          "max_pools", "mailbox_cap", "default_timeout",
                          "tombstone_ttl", "cancel_op_timeout",
                          "cancel_backoff", "cancel_max_attempts",
                          "eager_max_bytes", "notify", "shutdown_timeout",
                          NULL};
    pyx_engine *self = (pyx_engine *)obj;
    PyObject *tp, *t[5] = {NULL, NULL, NULL, NULL, NULL};
    pyx_engine_opts o = {0};
    int notify = PYX_NOTIFY_FD;
    if (self->core) {
        PyErr_SetString(PyExc_RuntimeError, "Engine.__init__ called twice");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$IIIIOOOOIIiO:Engine", kwl,
                                     &tp, &o.max_transfers,
                                     &o.max_tombstones, &o.max_pools,
                                     &o.mailbox_cap, &t[0], &t[1], &t[2],
                                     &t[3], &o.cancel_max_attempts,
                                     &o.eager_max_bytes, &notify, &t[4]))
        return -1;
    pyx_engine_reap(false); /* engines dropped earlier whose loop stopped */
    if (!pyx_transport_check(tp)) {
        PyErr_SetString(PyExc_TypeError, "transport must be xfer.Loop or "
                                         "xfer.Tcp");
        return -1;
    }
    if (notify != PYX_NOTIFY_FD && notify != PYX_NOTIFY_CALL_SOON) {
        PyErr_SetString(PyExc_ValueError, "notify must be NOTIFY_FD or "
                                          "NOTIFY_CALL_SOON");
        return -1;
    }
    if (parse_opts(t, &o))
        return -1;
    pyx_core *c;
    int rc = pyx_core_new(&o, &c);
    if (rc) {
        pyx_raise(rc);
        return -1;
    }
    uint32_t group;
    if (pyx_transport_attach(tp, c, &group, false) < 0 ||
        remember_group(self, tp, group) < 0) {
        pyx_core_unref(c);
        return -1;
    }
    rc = pyx_core_start(c);
    if (rc) {
        pyx_core_unref(c);
        pyx_raise(rc);
        return -1;
    }
    self->core = c;
    self->notify = notify;
    self->closed = false;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Closing                                                                 */
/* ---------------------------------------------------------------------- */

static void retire_channels(pyx_engine *self)
{
    Py_ssize_t n = PyList_GET_SIZE(self->all_channels);
    for (Py_ssize_t i = 0; i < n; i++)
        pyx_channel_retire(
            (pyx_channel *)PyList_GET_ITEM(self->all_channels, i));
    PyDict_Clear(self->channels);
    self->last_loop = NULL;
    self->last_chan = NULL;
}

/* After the loop stopped: free the engine, then let go of the buffers
 * (nothing reads them any more), then retire the channels. */
static void finish_close(pyx_engine *self)
{
    if (!pyx_core_close(self->core, &self->closed))
        return;
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(self->pools, &pos, &key, &val))
        pyx_pool_released((pyx_pool *)val);
    PyDict_Clear(self->pools);
    retire_channels(self);
}

static PyObject *engine_shutdown(PyObject *obj, PyObject *unused)
{
    pyx_engine *self = (pyx_engine *)obj;
    if (self->core)
        finish_close(self);
    Py_RETURN_NONE;
}

static PyObject *engine_finish_close(PyObject *obj, PyObject *unused)
{
    return engine_shutdown(obj, unused);
}

static pyx_channel *channel_for(pyx_engine *self, PyObject *loop);

/* A future of the running loop that is resolved once the loop stopped;
 * the Python side awaits it and then calls _finish_close(). */
static PyObject *engine_begin_aclose(PyObject *obj, PyObject *unused)
{
    pyx_engine *self = (pyx_engine *)obj;
    PyObject *loop = pyx_running_loop();
    if (!loop)
        return NULL;
    pyx_channel *chan = self->closed ? NULL : channel_for(self, loop);
    PyObject *fut = PyObject_CallMethod(loop, "create_future", NULL);
    Py_DECREF(loop);
    if (!fut)
        return NULL;
    if (!chan) {
        if (PyErr_Occurred()) {
            Py_DECREF(fut);
            return NULL;
        }
        PyObject *r = PyObject_CallMethod(fut, "set_result", "O", Py_None);
        Py_XDECREF(r);
        return r ? fut : (Py_DECREF(fut), NULL);
    }
    pyx_ticket *t = calloc(1, sizeof *t);
    if (!t) {
        Py_DECREF(fut);
        return PyErr_NoMemory();
    }
    t->kind = PYX_T_CLOSED;
    t->target = fut;
    Py_INCREF(fut);
    t->chan = chan;
    Py_INCREF(chan);
    pyx_channel_expect(chan, 1);
    pyx_core_begin_close(self->core, t);
    return fut;
}

/*
 * Engines the last reference left while their loop still ran (a finalizer
 * must not wait: the garbage collector may run it on any thread, holding
 * the GIL, and the loop may take up to the shutdown deadline).  Each is a
 * tuple (core capsule, pools, channels) holding what finish_close lets go
 * once the loop stopped; pyx_engine_reap does that then.
 */
static PyObject *orphans; /* list, GIL */

static void orphan_free(pyx_core *c, PyObject *pools, PyObject *channels)
{
    pyx_core_free_engine(c); /* the loop stopped: the join is at once */
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(pools, &pos, &key, &val))
        pyx_pool_released((pyx_pool *)val);
    PyDict_Clear(pools);
    Py_ssize_t n = PyList_GET_SIZE(channels);
    for (Py_ssize_t i = 0; i < n; i++)
        pyx_channel_retire((pyx_channel *)PyList_GET_ITEM(channels, i));
    pyx_core_unref(c);
}

int pyx_engine_reap(bool block)
{
    Py_ssize_t i = 0;
    while (orphans && i < PyList_GET_SIZE(orphans)) {
        PyObject *o = PyList_GET_ITEM(orphans, i);
        pyx_core *c = PyCapsule_GetPointer(PyTuple_GET_ITEM(o, 0), NULL);
        if (block)
            pyx_core_wait_stopped(c);
        else if (pyx_core_state(c) < PYX_STOPPED) {
            i++;
            continue;
        }
        Py_INCREF(o);
        if (PySequence_DelItem(orphans, i) < 0) {
            Py_DECREF(o);
            return -1;
        }
        orphan_free(c, PyTuple_GET_ITEM(o, 1), PyTuple_GET_ITEM(o, 2));
        Py_DECREF(o);
    }
    return 0;
}

/* The loop still runs: start the shutdown without waiting and leave the
 * rest to pyx_engine_reap.  False when that cannot be arranged (no
 * memory): then the caller waits, as before. */
static bool orphan(pyx_engine *self)
{
    if (pyx_core_state(self->core) >= PYX_STOPPED)
        return false;
    if (!orphans && !(orphans = PyList_New(0)))
        return false;
    PyObject *cap = PyCapsule_New(self->core, NULL, NULL);
    PyObject *o = cap ? PyTuple_Pack(3, cap, self->pools, self->all_channels)
                      : NULL;
    Py_XDECREF(cap);
    if (!o || PyList_Append(orphans, o) < 0) {
        Py_XDECREF(o);
        PyErr_Clear();
        return false;
    }
    Py_DECREF(o);
    pyx_core_begin_close(self->core, NULL);
    self->closed = true;
    return true;
}

static void engine_dealloc(PyObject *obj)
{
    pyx_engine *self = (pyx_engine *)obj;
    if (self->weakrefs)
        PyObject_ClearWeakRefs(obj);
    if (self->core) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (self->closed || !orphan(self)) {
            finish_close(self); /* the loop stopped already (or no memory) */
            pyx_core_unref(self->core);
        }
        pyx_engine_reap(false);
        PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    Py_XDECREF(self->cb_chan);
    Py_XDECREF(self->pools);
    Py_XDECREF(self->channels);
    Py_XDECREF(self->all_channels);
    Py_XDECREF(self->transports);
    Py_TYPE(obj)->tp_free(obj);
}

/* ---------------------------------------------------------------------- */
/* Channels                                                                */
/* ---------------------------------------------------------------------- */

static int keep_channel(pyx_engine *self, PyObject *key, pyx_channel *c)
{
    if (key && PyDict_SetItem(self->channels, key, (PyObject *)c) < 0)
        return -1;
    return PyList_Append(self->all_channels, (PyObject *)c);
}

static pyx_channel *channel_for(pyx_engine *self, PyObject *loop)
{
    if (loop == self->last_loop)
        return self->last_chan;
    PyObject *c = PyDict_GetItemWithError(self->channels, loop);
    if (!c) {
        if (PyErr_Occurred())
            return NULL;
        c = (PyObject *)pyx_channel_for_loop(loop, self->notify);
        if (!c)
            return NULL;
        int rc = keep_channel(self, loop, (pyx_channel *)c);
        Py_DECREF(c); /* the dict and the list hold it */
        if (rc < 0)
            return NULL;
    }
    self->last_loop = loop;
    self->last_chan = (pyx_channel *)c;
    return self->last_chan;
}

static pyx_channel *callback_channel(pyx_engine *self)
{
    if (self->cb_chan)
        return self->cb_chan;
    pyx_channel *c = pyx_channel_thread();
    if (!c)
        return NULL;
    if (keep_channel(self, NULL, c) < 0) {
        pyx_channel_retire(c);
        Py_DECREF(c);
        return NULL;
    }
    self->cb_chan = c;
    return c;
}

/* ---------------------------------------------------------------------- */
/* Submitting                                                              */
/* ---------------------------------------------------------------------- */

typedef struct sub_args {
    uint64_t id;
    pyx_pool *pool;
    PyObject *slices;
    PyObject *callback;
    uint32_t group;
    uint64_t timeout_ns;
    uint64_t user_data;
    uint16_t nslices;
    PyObject *crcs;      /* crcs=: the caller's CRC32Cs, or NULL / None */
    xfer_slice sl[XFER_MAX_SHARDS];
    uint32_t crc[XFER_MAX_SHARDS]; /* parsed from crcs */
} sub_args;

static int open_or_raise(pyx_engine *self)
{
    if (!self->core || self->closed ||
        pyx_core_state(self->core) != PYX_OPEN) {
        pyx_raise(XFER_ERR_SHUTDOWN);
        return -1;
    }
    return 0;
}

static int parse_u64(PyObject *o, uint64_t *v, const char *what)
{
    *v = PyLong_AsUnsignedLongLong(o);
    if (*v == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "%s must be an integer in 0..2**64-1",
                     what);
        return -1;
    }
    return 0;
}

static int parse_keyword(sub_args *a, PyObject *name, PyObject *v)
{
    uint64_t g;
    if (PyUnicode_CompareWithASCIIString(name, "group") == 0) {
        if (parse_u64(v, &g, "group"))
            return -1;
        a->group = g > UINT32_MAX ? UINT32_MAX : (uint32_t)g;
        return 0;
    }
    if (PyUnicode_CompareWithASCIIString(name, "timeout") == 0)
        return pyx_ns_of(v, &a->timeout_ns);
    if (PyUnicode_CompareWithASCIIString(name, "user_data") == 0)
        return parse_u64(v, &a->user_data, "user_data");
    if (PyUnicode_CompareWithASCIIString(name, "crcs") == 0) {
        a->crcs = v == Py_None ? NULL : v;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "unexpected keyword argument '%U'", name);
    return -1;
}

/* One slice: an (offset, length) pair inside the pool. */
static int parse_slice(PyObject *item, const pyx_pool *p, xfer_slice *s)
{
    uint64_t off, len;
    if (!PyTuple_Check(item) && !PyList_Check(item))
        goto bad;
    if (PySequence_Fast_GET_SIZE(item) != 2)
        goto bad;
    if (parse_u64(PySequence_Fast_GET_ITEM(item, 0), &off, "an offset") ||
        parse_u64(PySequence_Fast_GET_ITEM(item, 1), &len, "a length"))
        return -1;
    if (len > UINT32_MAX || off > (uint64_t)p->mem.nbytes ||
        len > (uint64_t)p->mem.nbytes - off) {
        PyErr_Format(PyExc_ValueError, "slice (%llu, %llu) is outside the "
                     "pool's %zu bytes", (unsigned long long)off,
                     (unsigned long long)len, p->mem.nbytes);
        return -1;
    }
    *s = (xfer_slice){.off = off, .len = (uint32_t)len};
    return 0;
bad:
    PyErr_SetString(PyExc_TypeError,
                    "slices must be (offset, length) pairs, one per shard");
    return -1;
}

static int parse_slices(pyx_engine *self, sub_args *a)
{
    if (a->group >= self->ngroups) {
        pyx_raise(XFER_ERR_NOT_FOUND);
        return -1;
    }
    PyObject *seq = PySequence_Fast(a->slices, "slices must be a sequence");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = 0;
    if (n != self->gshards[a->group]) {
        PyErr_Format(PyExc_ValueError, "%zd slices for a group of %u shards",
                     n, (unsigned)self->gshards[a->group]);
        rc = -1;
    }
    for (Py_ssize_t k = 0; rc == 0 && k < n; k++)
        rc = parse_slice(PySequence_Fast_GET_ITEM(seq, k), a->pool,
                         &a->sl[k]);
    a->nslices = (uint16_t)n;
    Py_DECREF(seq);
    return rc;
}

/* crcs=: n CRC32Cs (ints 0..2**32-1), one per shard, into out. */
static int parse_crcs(PyObject *v, uint16_t n, uint32_t *out)
{
    PyObject *seq = PySequence_Fast(v, "crcs must be a sequence of ints");
    if (!seq)
        return -1;
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "%zd crcs for %u shards",
                     PySequence_Fast_GET_SIZE(seq), (unsigned)n);
        rc = -1;
    }
    for (uint16_t k = 0; rc == 0 && k < n; k++) {
        uint64_t c;
        if (parse_u64(PySequence_Fast_GET_ITEM(seq, k), &c, "a crc"))
            rc = -1;
        else if (c > UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "a crc is a 32-bit value");
            rc = -1;
        } else {
            out[k] = (uint32_t)c;
        }
    }
    Py_DECREF(seq);
    return rc;
}

/* submit(id, pool, slices[, callback], *, group=0, timeout=None,
 * user_data=0, crcs=None) */
static int parse_submit(pyx_engine *self, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *kwnames, int npos,
                        sub_args *a)
{
    memset(a, 0, offsetof(sub_args, sl));
    a->crcs = NULL;
    if (nargs != npos) {
        PyErr_Format(PyExc_TypeError, "takes %d positional arguments (%zd "
                     "given)", npos, nargs);
        return -1;
    }
    if (parse_u64(args[0], &a->id, "id"))
        return -1;
    if (a->id == 0) {
        PyErr_SetString(PyExc_ValueError, "id 0 is reserved");
        return -1;
    }
    if (!PyObject_TypeCheck(args[1], &pyx_pool_type) ||
        ((pyx_pool *)args[1])->core != self->core) {
        PyErr_SetString(PyExc_TypeError, "pool must be a Pool of this "
                                         "engine");
        return -1;
    }
    a->pool = (pyx_pool *)args[1];
    if (!a->pool->registered) {
        pyx_raise(XFER_ERR_NOT_FOUND);
        return -1;
    }
    a->slices = args[2];
    a->callback = npos > 3 ? args[3] : NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++)
        if (parse_keyword(a, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]))
            return -1;
    if (parse_slices(self, a))
        return -1;
    return a->crcs ? parse_crcs(a->crcs, a->nslices, a->crc) : 0;
}

static void make_desc(const sub_args *a, xfer_transfer_desc *d)
{
    *d = (xfer_transfer_desc){
        .id = a->id, .group = a->group, .pool = a->pool->id,
        .nslices = a->nslices, .slices = a->sl,
        .timeout_ns = a->timeout_ns, .user_data = a->user_data};
}

/* Post a ticket for a future or a callback; on an error undo it all. */
static int post_ticket(pyx_engine *self, const sub_args *a, int kind,
                       PyObject *target, pyx_channel *chan)
{
    pyx_ticket *t = calloc(1, sizeof *t);
    if (!t) {
        PyErr_NoMemory();
        return -1;
    }
    t->kind = (uint8_t)kind;
    t->res.id = a->id;
    t->target = target;
    Py_INCREF(target);
    t->chan = chan;
    Py_INCREF(chan);
    pyx_channel_expect(chan, 1);
    xfer_transfer_desc d;
    make_desc(a, &d);
    int rc = pyx_core_submit(self->core, &d, a->crcs ? a->crc : NULL, t);
    if (rc == 0) {
        self->submits++;
        return 0;
    }
    self->refused++;
    pyx_channel_expect(chan, -1);
    Py_DECREF(chan);
    Py_DECREF(target);
    free(t);
    pyx_raise(rc);
    return -1;
}

static PyObject *engine_submit(PyObject *obj, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    pyx_engine *self = (pyx_engine *)obj;
    sub_args a;
    if (open_or_raise(self) ||
        parse_submit(self, args, nargs, kwnames, 3, &a))
        return NULL;
    PyObject *loop = pyx_running_loop();
    if (!loop)
        return NULL;
    pyx_channel *chan = channel_for(self, loop);
    Py_DECREF(loop); /* the channel dict holds it */
    if (!chan)
        return NULL;
    PyObject *fut = pyx_new_transfer();
    if (!fut)
        return NULL;
    PyObject *id = PyLong_FromUnsignedLongLong(a.id);
    if (!id || PyObject_SetAttr(fut, s_id, id) < 0 ||
        PyObject_SetAttr(fut, s_engine, obj) < 0 ||
        post_ticket(self, &a, PYX_T_FUTURE, fut, chan) < 0) {
        Py_XDECREF(id);
        Py_DECREF(fut);
        return NULL;
    }
    Py_DECREF(id);
    return fut;
}

/* ---------------------------------------------------------------------- */
/* Streams (xfer/stream.h): the C half of Engine.stream()                  */
/* ---------------------------------------------------------------------- */

/* _stream_open(id, lens, group, timeout_ns) -> Transfer */
static PyObject *engine_stream_open(PyObject *obj, PyObject *args)
{
    pyx_engine *self = (pyx_engine *)obj;
    unsigned long long id, timeout;
    unsigned group;
    PyObject *lens_o;
    if (open_or_raise(self) ||
        !PyArg_ParseTuple(args, "KOIK", &id, &lens_o, &group, &timeout))
        return NULL;
    if (id == 0) {
        PyErr_SetString(PyExc_ValueError, "id 0 is reserved");
        return NULL;
    }
    if (group >= self->ngroups) {
        pyx_raise(XFER_ERR_NOT_FOUND);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(lens_o, "lens must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    uint32_t lens[XFER_MAX_SHARDS];
    int bad = n != self->gshards[group];
    for (Py_ssize_t k = 0; !bad && k < n; k++) {
        uint64_t v;
        if (parse_u64(PySequence_Fast_GET_ITEM(seq, k), &v, "a length")) {
            Py_DECREF(seq);
            return NULL;
        }
        bad = v == 0 || v > UINT32_MAX;
        lens[k] = (uint32_t)v;
    }
    Py_DECREF(seq);
    if (bad) {
        PyErr_Format(PyExc_ValueError, "lens: one length in 1..2**32-1 per "
                     "shard of the group (%u)",
                     (unsigned)self->gshards[group]);
        return NULL;
    }
    PyObject *loop = pyx_running_loop();
    if (!loop)
        return NULL;
    pyx_channel *chan = channel_for(self, loop);
    Py_DECREF(loop);
    if (!chan)
        return NULL;
    PyObject *fut = pyx_new_transfer();
    if (!fut)
        return NULL;
    PyObject *ido = PyLong_FromUnsignedLongLong(id);
    pyx_ticket *t = calloc(1, sizeof *t);
    if (!ido || !t || PyObject_SetAttr(fut, s_id, ido) < 0 ||
        PyObject_SetAttr(fut, s_engine, obj) < 0) {
        if (!t)
            PyErr_NoMemory();
        free(t);
        Py_XDECREF(ido);
        Py_DECREF(fut);
        return NULL;
    }
    Py_DECREF(ido);
    t->kind = PYX_T_FUTURE;
    t->res.id = id;
    t->target = fut;
    Py_INCREF(fut);
    t->chan = chan;
    Py_INCREF(chan);
    pyx_channel_expect(chan, 1);
    xfer_stream_desc d = {.id = id, .group = group, .nshards = (uint16_t)n,
                          .lens = lens, .timeout_ns = timeout};
    int rc = pyx_core_stream_open(self->core, &d, t);
    if (rc != 0) {
        self->refused++;
        pyx_channel_expect(chan, -1);
        Py_DECREF(chan);
        Py_DECREF(fut); /* the ticket's */
        free(t);
        Py_DECREF(fut);
        pyx_raise(rc);
        return NULL;
    }
    self->submits++;
    return fut;
}

/* _stream_part(id, pool, ranges): ranges of (shard, offset, length,
 * resv_offset), offset and length inside the pool.  Returns a future of
 * the running loop that resolves to the part number once the part's
 * staging was released, or holds the error of the status it was released
 * with (already marked retrieved).  The pool stays in self->pools, and
 * registered (unregister is refused while a stream may read it), until the
 * engine closed, after every part's release. */
static PyObject *engine_stream_part(PyObject *obj, PyObject *args)
{
    pyx_engine *self = (pyx_engine *)obj;
    unsigned long long id;
    PyObject *pool_o, *ranges_o;
    if (open_or_raise(self) ||
        !PyArg_ParseTuple(args, "KOO", &id, &pool_o, &ranges_o))
        return NULL;
    if (!PyObject_TypeCheck(pool_o, &pyx_pool_type) ||
        ((pyx_pool *)pool_o)->core != self->core) {
        PyErr_SetString(PyExc_TypeError, "pool must be a Pool of this "
                                         "engine");
        return NULL;
    }
    pyx_pool *p = (pyx_pool *)pool_o;
    if (!p->registered) {
        pyx_raise(XFER_ERR_NOT_FOUND);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(ranges_o, "ranges must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    xfer_range *r = n > 0 && n <= XFER_STREAM_MAX_RANGES
                        ? calloc((size_t)n, sizeof *r)
                        : NULL;
    int rc = r ? 0 : -1;
    if (!r)
        PyErr_Format(PyExc_ValueError, "a part has 1..%d ranges",
                     XFER_STREAM_MAX_RANGES);
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
        uint64_t v[4];
        if ((!PyTuple_Check(it) && !PyList_Check(it)) ||
            PySequence_Fast_GET_SIZE(it) != 4) {
            PyErr_SetString(PyExc_TypeError, "a range is (shard, offset, "
                                             "length, resv_offset)");
            rc = -1;
            break;
        }
        for (int j = 0; rc == 0 && j < 4; j++)
            rc = parse_u64(PySequence_Fast_GET_ITEM(it, j), &v[j],
                           "a range field");
        if (rc == 0 && (v[0] >= XFER_MAX_SHARDS || v[2] == 0 ||
                        v[2] > UINT32_MAX || v[3] > UINT32_MAX ||
                        v[1] > (uint64_t)p->mem.nbytes ||
                        v[2] > (uint64_t)p->mem.nbytes - v[1])) {
            PyErr_Format(PyExc_ValueError, "range %zd is outside the pool's "
                         "%zd bytes or the shards", i, (Py_ssize_t)p->mem.nbytes);
            rc = -1;
        }
        if (rc == 0)
            r[i] = (xfer_range){.staging_off = v[1], .pool = p->id,
                                .len = (uint32_t)v[2],
                                .resv_off = (uint32_t)v[3],
                                .shard = (uint16_t)v[0]};
    }
    Py_DECREF(seq);
    PyObject *fut = NULL;
    pyx_ticket *t = NULL;
    pyx_channel *chan = NULL;
    if (rc == 0) {
        PyObject *loop = pyx_running_loop();
        chan = loop ? channel_for(self, loop) : NULL;
        fut = chan ? PyObject_CallMethod(loop, "create_future", NULL) : NULL;
        Py_XDECREF(loop);
        t = fut ? calloc(1, sizeof *t) : NULL;
        if (fut && !t)
            PyErr_NoMemory();
        rc = t ? 0 : -1;
    }
    if (rc == 0) {
        t->kind = PYX_T_PART;
        t->target = fut;
        Py_INCREF(fut);
        t->chan = chan;
        Py_INCREF(chan);
        pyx_channel_expect(chan, 1);
        xfer_part_desc d = {.id = id, .ranges = r, .nranges = (uint32_t)n};
        int xrc = pyx_core_stream_part(self->core, &d, t);
        if (xrc != 0) {
            pyx_channel_expect(chan, -1);
            Py_DECREF(chan);
            Py_DECREF(fut); /* the ticket's */
            free(t);
            pyx_raise(xrc);
            rc = -1;
        }
    }
    free(r);
    if (rc) {
        Py_XDECREF(fut);
        return NULL;
    }
    return fut;
}

/* _stream_seal(id, crcs=None): crcs, one per shard of the stream, the
 * caller's CRC32C of each shard's whole reservation. */
static PyObject *engine_stream_seal(PyObject *obj, PyObject *args)
{
    pyx_engine *self = (pyx_engine *)obj;
    uint64_t id;
    PyObject *idobj, *crcs = Py_None;
    uint32_t crc[XFER_MAX_SHARDS];
    Py_ssize_t n = 0;
    if (!PyArg_ParseTuple(args, "O|O:_stream_seal", &idobj, &crcs) ||
        open_or_raise(self) || parse_u64(idobj, &id, "id"))
        return NULL;
    if (crcs != Py_None) {
        n = PySequence_Length(crcs);
        if (n < 0)
            return NULL;
        if (n == 0 || n > XFER_MAX_SHARDS) {
            PyErr_SetString(PyExc_ValueError, "crcs: one per shard");
            return NULL;
        }
        if (parse_crcs(crcs, (uint16_t)n, crc))
            return NULL;
    }
    int rc = pyx_core_stream_seal(self->core, id, n ? crc : NULL,
                                  (uint16_t)n);
    if (rc != 0) {
        pyx_raise(rc);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *engine_submit_callback(PyObject *obj, PyObject *const *args,
                                        Py_ssize_t nargs, PyObject *kwnames)
{
    pyx_engine *self = (pyx_engine *)obj;
    sub_args a;
    if (open_or_raise(self) ||
        parse_submit(self, args, nargs, kwnames, 4, &a))
        return NULL;
    if (!PyCallable_Check(a.callback)) {
        PyErr_SetString(PyExc_TypeError, "callback must be callable");
        return NULL;
    }
    pyx_channel *chan = callback_channel(self);
    if (!chan || post_ticket(self, &a, PYX_T_CALLBACK, a.callback, chan) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *engine_submit_wait(PyObject *obj, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames)
{
    pyx_engine *self = (pyx_engine *)obj;
    sub_args a;
    if (open_or_raise(self) ||
        parse_submit(self, args, nargs, kwnames, 3, &a))
        return NULL;
    pyx_ticket *t = calloc(1, sizeof *t);
    if (!t)
        return PyErr_NoMemory();
    t->kind = PYX_T_WAIT;
    t->core = self->core;
    t->res.id = a.id;
    xfer_transfer_desc d;
    make_desc(&a, &d);
    int rc = pyx_core_submit(self->core, &d, a.crcs ? a.crc : NULL, t);
    if (rc) {
        self->refused++;
        free(t);
        return pyx_raise(rc);
    }
    self->submits++;
    if (pyx_core_wait(self->core, t) < 0)
        return NULL; /* interrupted: the loop frees t */
    xfer_result res = t->res;
    free(t);
    PyObject *r = pyx_result_new(&res);
    if (!r || res.status == 0)
        return r;
    PyObject *exc = pyx_error_for(r, res.status);
    Py_DECREF(r);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static int cancel_on_loop(pyx_core *c, void *arg)
{
    return xfer_engine_cancel(c->e, *(const uint64_t *)arg);
}

static PyObject *engine_cancel(PyObject *obj, PyObject *arg)
{
    pyx_engine *self = (pyx_engine *)obj;
    uint64_t id;
    if (parse_u64(arg, &id, "id"))
        return NULL;
    if (id == 0) {
        PyErr_SetString(PyExc_ValueError, "id 0 is reserved");
        return NULL;
    }
    if (open_or_raise(self))
        return NULL;
    /* On the loop, waited for (without the GIL): the loop's own answer,
     * BUSY when the tombstone table is full, is the caller's to see; a
     * cancel that only queued would leave the id without a tombstone
     * and the caller none the wiser (issue 23 item 4). */
    int rc = pyx_core_call(self->core, cancel_on_loop, &id);
    return rc ? pyx_raise(rc) : (Py_INCREF(Py_None), Py_None);
}

/* ---------------------------------------------------------------------- */
/* Pools, groups, introspection                                            */
/* ---------------------------------------------------------------------- */

static PyObject *engine_register_pool(PyObject *obj, PyObject *buffer)
{
    pyx_engine *self = (pyx_engine *)obj;
    if (open_or_raise(self))
        return NULL;
    pyx_pool *p = pyx_pool_register(self->core, buffer);
    if (!p)
        return NULL;
    PyObject *key = PyLong_FromUnsignedLong(p->id);
    if (!key || PyDict_SetItem(self->pools, key, (PyObject *)p) < 0) {
        /* Registered but not kept: the engine still holds the buffer's
         * address, so the buffer must stay: leak the pool, never free. */
        Py_XDECREF(key);
        return NULL;
    }
    Py_DECREF(key);
    return (PyObject *)p;
}

static int unreg_fn(pyx_core *c, void *arg)
{
    return xfer_engine_unregister_pool(c->e, *(uint32_t *)arg);
}

static PyObject *engine_unregister_pool(PyObject *obj, PyObject *arg)
{
    pyx_engine *self = (pyx_engine *)obj;
    if (!PyObject_TypeCheck(arg, &pyx_pool_type) ||
        ((pyx_pool *)arg)->core != self->core) {
        PyErr_SetString(PyExc_TypeError, "not a Pool of this engine");
        return NULL;
    }
    pyx_pool *p = (pyx_pool *)arg;
    if (!p->registered)
        return pyx_raise(XFER_ERR_NOT_FOUND);
    if (open_or_raise(self))
        return NULL;
    uint32_t id = p->id;
    int rc = pyx_core_call(self->core, unreg_fn, &id);
    if (rc)
        return pyx_raise(rc);
    PyObject *key = PyLong_FromUnsignedLong(id);
    Py_INCREF(p);
    int drc = key ? PyDict_DelItem(self->pools, key) : -1;
    Py_XDECREF(key);
    pyx_pool_released(p);
    Py_DECREF(p);
    return drc < 0 ? NULL : (Py_INCREF(Py_None), Py_None);
}

static PyObject *engine_add_group(PyObject *obj, PyObject *tp)
{
    pyx_engine *self = (pyx_engine *)obj;
    if (!pyx_transport_check(tp)) {
        PyErr_SetString(PyExc_TypeError, "transport must be xfer.Loop or "
                                         "xfer.Tcp");
        return NULL;
    }
    if (open_or_raise(self))
        return NULL;
    uint32_t group;
    if (pyx_transport_attach(tp, self->core, &group, true) < 0 ||
        remember_group(self, tp, group) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(group);
}

typedef struct query_args {
    uint64_t id;
    uint8_t state;
    bool idle;
    xfer_engine_stats st;
} query_args;

static int query_fn(pyx_core *c, void *arg)
{
    query_args *q = arg;
    q->state = (uint8_t)xfer_core_state(xfer_engine_core(c->e), q->id);
    q->idle = xfer_engine_idle(c->e);
    xfer_engine_stats_get(c->e, &q->st);
    return 0;
}

static int query(pyx_engine *self, query_args *q)
{
    if (open_or_raise(self))
        return -1;
    int rc = pyx_core_call(self->core, query_fn, q);
    if (rc)
        pyx_raise(rc);
    return rc ? -1 : 0;
}

static PyObject *engine_state(PyObject *obj, PyObject *arg)
{
    query_args q = {0};
    if (parse_u64(arg, &q.id, "id") || query((pyx_engine *)obj, &q))
        return NULL;
    const char *n = xfer_fsm_state_name(XFER_MACHINE_TRANSFER, q.state);
    return PyUnicode_FromString(n ? n : "?");
}

typedef struct view_args {
    uint64_t id;
    bool live;
    xfer_transfer_view v;
} view_args;

static int view_fn(pyx_core *c, void *arg)
{
    view_args *a = arg;
    a->live = xfer_core_view(xfer_engine_core(c->e), a->id, &a->v);
    return 0;
}

/* view(id) -> the live transfer's per-shard view (dict), or None when
 * the id is not live (never submitted, or ended). */
static PyObject *engine_view(PyObject *obj, PyObject *arg)
{
    pyx_engine *self = (pyx_engine *)obj;
    view_args a = {0};
    if (parse_u64(arg, &a.id, "id") || open_or_raise(self))
        return NULL;
    int rc = pyx_core_call(self->core, view_fn, &a);
    if (rc)
        return pyx_raise(rc);
    if (!a.live)
        Py_RETURN_NONE;
    return pyx_transfer_view(&a.v);
}

static PyObject *engine_idle(PyObject *obj, PyObject *unused)
{
    query_args q = {.id = 1};
    if (query((pyx_engine *)obj, &q))
        return NULL;
    return PyBool_FromLong(q.idle);
}

static int put_u64(PyObject *d, const char *k, uint64_t v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    int rc = o ? PyDict_SetItemString(d, k, o) : -1;
    Py_XDECREF(o);
    return rc;
}

/* The binding's own counters next to the engine's. */
static int add_binding_stats(pyx_engine *self, PyObject *d)
{
    uint64_t del = 0, unc = 0, err = 0;
    Py_ssize_t n = PyList_GET_SIZE(self->all_channels);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t a, b, c;
        pyx_channel_counts(
            (pyx_channel *)PyList_GET_ITEM(self->all_channels, i), &a, &b,
            &c);
        del += a;
        unc += b;
        err += c;
    }
    return put_u64(d, "py_submits", self->submits) ||
           put_u64(d, "py_refused", self->refused) ||
           put_u64(d, "py_delivered", del) ||
           put_u64(d, "py_unclaimed", unc) ||
           put_u64(d, "py_delivery_errors", err) ||
           put_u64(d, "py_wait_abandoned", self->core->wait_abandoned) ||
           put_u64(d, "py_channels", (uint64_t)n);
}

static PyObject *engine_stats(PyObject *obj, PyObject *unused)
{
    pyx_engine *self = (pyx_engine *)obj;
    query_args q = {.id = 1};
    if (!self->core)
        return pyx_raise(XFER_ERR_SHUTDOWN);
    if (pyx_core_state(self->core) == PYX_OPEN) {
        int rc = pyx_core_call(self->core, query_fn, &q);
        if (rc && rc != XFER_ERR_SHUTDOWN)
            return pyx_raise(rc);
        if (rc == 0)
            goto have;
    }
    pyx_core_wait_stopped(self->core);
    q.st = self->core->final;
have:;
    PyObject *d = pyx_stats_engine(&q.st);
    if (d && add_binding_stats(self, d) < 0)
        Py_CLEAR(d);
    return d;
}

static PyObject *get_closed(PyObject *obj, void *unused)
{
    return PyBool_FromLong(((pyx_engine *)obj)->closed);
}

static PyObject *get_notify(PyObject *obj, void *unused)
{
    return PyLong_FromLong(((pyx_engine *)obj)->notify);
}

static PyObject *get_transports(PyObject *obj, void *unused)
{
    return PyList_AsTuple(((pyx_engine *)obj)->transports);
}

#define FASTKW (METH_FASTCALL | METH_KEYWORDS)

static PyMethodDef engine_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))engine_submit, FASTKW,
     "submit($self, id, pool, slices, /, *, group=0, timeout=None, "
     "user_data=0, crcs=None)\n--\n\n"
     "submit(id, pool, slices, *, group=0, timeout=None, user_data=0, "
     "crcs=None) -> Transfer, an awaitable of the running asyncio loop.  "
     "crcs: the CRC32C of each slice, when the caller has them "
     "(docs/integrity.md): sent instead of computed; a wrong one fails "
     "the transfer CorruptError"},
    {"submit_wait", (PyCFunction)(void (*)(void))engine_submit_wait, FASTKW,
     "submit_wait($self, id, pool, slices, /, *, group=0, timeout=None, "
     "user_data=0, crcs=None)\n--\n\n"
     "submit_wait(id, pool, slices, ...) -> Result; blocks without the GIL"},
    {"submit_callback", (PyCFunction)(void (*)(void))engine_submit_callback,
     FASTKW,
     "submit_callback($self, id, pool, slices, callback, /, *, group=0, "
     "timeout=None, user_data=0, crcs=None)\n--\n\n"
     "submit_callback(id, pool, slices, callback, ...): callback(result) "
     "runs on the engine's callback thread"},
    {"_stream_open", engine_stream_open, METH_VARARGS, NULL},
    {"_stream_part", engine_stream_part, METH_VARARGS,
     "_stream_part($self, id, pool, ranges, /)\n--\n\n"
     "_stream_part(id, pool, ranges) -> Future: Stream.write's; resolves "
     "to the part number once its staging was released"},
    {"_stream_seal", engine_stream_seal, METH_VARARGS, NULL},
    {"cancel", engine_cancel, METH_O,
     "cancel($self, id, /)\n--\n\n"
     "cancel(id): idempotent; waits for the loop's answer: BusyError when "
     "the tombstone table is full (the id is then not cancelled)"},
    {"register_pool", engine_register_pool, METH_O,
     "register_pool($self, buffer, /)\n--\n\n"
     "register_pool(buffer) -> Pool; no copy"},
    {"unregister_pool", engine_unregister_pool, METH_O,
     "unregister_pool($self, pool, /)\n--\n\n"
     "unregister_pool(pool); BusyError while a transfer uses it"},
    {"add_group", engine_add_group, METH_O,
     "add_group($self, transport, /)\n--\n\n"
     "add_group(transport) -> group index"},
    {"state", engine_state, METH_O,
     "state($self, id, /)\n--\n\n"
     "state(id) -> the transfer machine's state name"},
    {"view", engine_view, METH_O,
     "view($self, id, /)\n--\n\n"
     "view(id) -> dict: a live transfer's state, attempt, ops in flight "
     "and per shard the reserve, write, commit, cancel and eager "
     "sub-states and the cancels sent; None when the id is not live"},
    {"idle", engine_idle, METH_NOARGS,
     "idle($self, /)\n--\n\n"
     "idle() -> True when nothing is live or queued"},
    {"stats", engine_stats, METH_NOARGS,
     "stats($self, /)\n--\n\nstats() -> dict of counters"},
    {"shutdown", engine_shutdown, METH_NOARGS,
     "shutdown($self, /)\n--\n\n"
     "shutdown(): end every transfer, deliver every completion, let go of "
     "every pool; blocks without the GIL"},
    {"_begin_aclose", engine_begin_aclose, METH_NOARGS, NULL},
    {"_finish_close", engine_finish_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef engine_getset[] = {
    {"closed", get_closed, NULL, "True once shut down", NULL},
    {"notify", get_notify, NULL, "how asyncio loops are woken", NULL},
    {"transports", get_transports, NULL, "the transports, by group", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pyx_engine_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xfer._xfer.Engine",
    .tp_basicsize = sizeof(pyx_engine),
    .tp_dealloc = engine_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The producer engine; its loop runs on a thread of its own.",
    .tp_weaklistoffset = offsetof(pyx_engine, weakrefs),
    .tp_methods = engine_methods,
    .tp_getset = engine_getset,
    .tp_init = engine_init,
    .tp_new = engine_new,
};
