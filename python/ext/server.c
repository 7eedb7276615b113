/*
 * python/ext/server.c - xfer.Server: the shard server (xfer/server.h) of a
 * tensor-parallel worker, serving its own memory over TCP: each buffer
 * given is one shard's pool, and the producer's bytes land in it, with no
 * copy and no daemon.
 *
 * The server runs on a loop thread of its own: a pyx_core (core.c) whose
 * engine has no group, so calls from Python go through the engine's
 * mailbox as they do for an Engine, and the core deletes the C server
 * once its loop stopped.
 *
 * What must stay true:
 *  - I3 for the worker's memory: every buffer's memory (writable,
 *    C-contiguous: a Py_buffer, a DLPack tensor, an object with
 *    __cuda_array_interface__ or a raw tuple, tensor.c) is held from the constructor until the C server was
 *    deleted after its loop stopped, so every connection is gone and no
 *    byte from the network can land in it any more; only then is the
 *    exporter free to resize, close or free it.  Dropping the last
 *    reference to a Server closes it the same way.
 *  - A drain's outcome is reported exactly once: by the server's drain
 *    callback, or, when the server is closed first, by the close (drained
 *    False).
 */
#include "pyx.h"

#include <stdlib.h>
#include <string.h>

/* The C side, read and written on the loop (or once it stopped). */
typedef struct srvside {
    xfer_server *s;
    pyx_ticket *drain; /* the drain waiting for its callback */
} srvside;

typedef struct pyx_server {
    PyObject_HEAD
    pyx_core *core;
    srvside *side;
    pyx_tensor *views; /* nshards, held until closed (I3) */
    uint16_t nshards;
    uint16_t index[XFER_MAX_SHARDS];
    uint16_t port;
    bool closed;
    PyObject *buffers; /* tuple: the objects, for Consumer(buffers=) */
    PyObject *weakrefs;
} pyx_server;

static void srvside_del(void *obj)
{
    srvside *side = obj;
    xfer_server_del(side->s); /* closes every connection */
    side->s = NULL;
}

/* ---------------------------------------------------------------------- */
/* Construction                                                            */
/* ---------------------------------------------------------------------- */

static PyObject *server_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    pyx_server *self = (pyx_server *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->side = calloc(1, sizeof *self->side);
    if (!self->side) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->closed = true; /* until __init__ started it */
    return (PyObject *)self;
}

static void release_views(pyx_server *self)
{
    for (uint16_t k = 0; self->views && k < self->nshards; k++)
        pyx_tensor_release(&self->views[k]);
    free(self->views);
    self->views = NULL;
}

/* Every buffer's memory, writable and in one C-contiguous block. */
static int take_buffers(pyx_server *self, PyObject *buffers)
{
    PyObject *seq = PySequence_Fast(buffers, "buffers must be a sequence "
                                             "of buffer objects");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = -1;
    if (n < 1 || n > XFER_MAX_SHARDS) {
        PyErr_Format(PyExc_ValueError, "1..%d buffers", XFER_MAX_SHARDS);
        goto out;
    }
    self->views = calloc((size_t)n, sizeof *self->views);
    if (!self->views) {
        PyErr_NoMemory();
        goto out;
    }
    self->nshards = (uint16_t)n;
    for (Py_ssize_t k = 0; k < n; k++) {
        pyx_tensor *v = &self->views[k];
        if (pyx_tensor_get(PySequence_Fast_GET_ITEM(seq, k), true, v) < 0)
            goto out;
        if (v->nbytes == 0) {
            PyErr_SetString(PyExc_ValueError, "a shard's buffer needs at "
                                              "least one byte");
            goto out;
        }
        int krc = pyx_tensor_check_kind(v);
        if (krc) {
            pyx_raise(krc);
            goto out;
        }
    }
    self->buffers = PySequence_Tuple(seq);
    rc = self->buffers ? 0 : -1;
out:
    Py_DECREF(seq);
    return rc;
}

/* shards: None (0..n-1) or one distinct index < 64 per buffer. */
static int take_indexes(pyx_server *self, PyObject *shards)
{
    for (uint16_t k = 0; k < self->nshards; k++)
        self->index[k] = k;
    if (!shards || shards == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(shards, "shards must be a sequence");
    if (!seq)
        return -1;
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(seq) != self->nshards) {
        PyErr_SetString(PyExc_ValueError, "one shard index per buffer");
        rc = -1;
    }
    for (uint16_t k = 0; rc == 0 && k < self->nshards; k++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, k));
        if (v == -1 && PyErr_Occurred()) {
            rc = -1;
        } else if (v < 0 || v >= XFER_MAX_SHARDS) {
            PyErr_Format(PyExc_ValueError, "shard index %ld is not in "
                         "0..%d", v, XFER_MAX_SHARDS - 1);
            rc = -1;
        } else {
            self->index[k] = (uint16_t)v;
        }
    }
    Py_DECREF(seq);
    return rc;
}

static int parse_durations(PyObject *d[4], pyx_server_opts *o)
{
    return pyx_ns_of(d[0], &o->lease_ttl_ns) ||
           pyx_ns_of(d[1], &o->tombstone_ttl_ns) ||
           pyx_ns_of(d[2], &o->take_grace_ns) ||
           pyx_ns_of(d[3], &o->drain_timeout_ns);
}

/* Create the C server on the core's base, before its thread starts. */
static int start(pyx_server *self, const pyx_server_opts *o)
{
    pyx_engine_opts eo = {0};
    xfer_server_shard sh[XFER_MAX_SHARDS];
    for (uint16_t k = 0; k < self->nshards; k++)
        sh[k] = (xfer_server_shard){.index = self->index[k],
                                    .base = self->views[k].ptr,
                                    .len = (uint64_t)self->views[k].nbytes};
    pyx_core *c;
    int rc = pyx_core_new(&eo, &c);
    if (rc)
        return rc;
    xfer_server_config cfg;
    pyx_config_server(o, c->base, sh, self->nshards, &cfg);
#if PYX_HAVE_MEM
    /* Device pools: each shard's kind (mem.h's next server config). */
    xfer_mem sm[XFER_MAX_SHARDS];
    bool device = false;
    for (uint16_t k = 0; k < self->nshards; k++) {
        sm[k] = (xfer_mem){.kind = (xfer_mem_kind)self->views[k].kind,
                           .device = self->views[k].device};
        device |= self->views[k].kind != PYX_MEM_HOST;
    }
    if (device)
        cfg.shard_mem = sm;
#endif
    rc = xfer_server_new(&cfg, &self->side->s);
    if (rc == 0 && o->etcd) { /* on the loop, before its thread starts */
        xfer_dir_config dc;
        xfer_dir_config_default(&dc);
        dc.endpoints = o->etcd;
        dc.lease_ttl_s = o->etcd_ttl ? o->etcd_ttl : 10;
        rc = xfer_server_register(self->side->s, &dc,
                                  o->etcd_group ? o->etcd_group : "0",
                                  o->advertise, 0);
        if (rc) {
            xfer_server_del(self->side->s);
            self->side->s = NULL;
        }
    }
    if (rc == 0) {
        pyx_core_host(c, self->side, srvside_del);
        self->port = xfer_server_port(self->side->s);
        rc = pyx_core_start(c);
    }
    if (rc) {
        pyx_core_unref(c); /* deletes the server it hosts */
        return rc;
    }
    self->core = c;
    return 0;
}

static int server_init(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"buffers", "shards", "addr", "port", "group",
                          "max_reservations", "max_tombstones", "lease_ttl",
                          "tombstone_ttl", "take_grace", "drain_timeout",
                          "consume", "fault_ppm", "drop_ppm", "fault_seed",
                          "secret", "insecure", "etcd", "etcd_group",
                          "etcd_ttl", "advertise", NULL};
    pyx_server *self = (pyx_server *)obj;
    PyObject *buffers, *shards = NULL, *d[4] = {NULL, NULL, NULL, NULL};
    PyObject *secret = NULL;
    pyx_server_opts o = {0};
    unsigned short port = 0;
    int consume = 0, insecure = 0;
    if (self->core || self->views) {
        PyErr_SetString(PyExc_RuntimeError, "Server.__init__ called twice");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "O|$OzHIIIOOOOpIIKOpzzIz:Server", kwl, &buffers,
            &shards, &o.addr, &port, &o.group, &o.max_reservations,
            &o.max_tombstones, &d[0], &d[1], &d[2], &d[3], &consume,
            &o.fault_ppm, &o.drop_ppm, &o.fault_seed, &secret, &insecure,
            &o.etcd, &o.etcd_group, &o.etcd_ttl, &o.advertise) ||
        pyx_auth_parse(secret, NULL, &o.auth))
        return -1;
    /* A group named for etcd: its HELLO number, unless given. */
    if (o.etcd && o.group == 0)
        o.group = xfer_dir_group_id(o.etcd_group ? o.etcd_group : "0");
    o.port = port;
    o.consume = consume;
    o.insecure = insecure;
    if (parse_durations(d, &o) || take_buffers(self, buffers) ||
        take_indexes(self, shards))
        goto fail;
    int rc = start(self, &o);
    if (rc) {
        pyx_raise(rc);
        goto fail;
    }
    self->closed = false;
    return 0;
fail:
    release_views(self);
    Py_CLEAR(self->buffers);
    return -1;
}

/* ---------------------------------------------------------------------- */
/* Draining and closing                                                    */
/* ---------------------------------------------------------------------- */

static int open_or_raise(pyx_server *self)
{
    if (self->closed || pyx_core_state(self->core) != PYX_OPEN) {
        pyx_raise(XFER_ERR_SHUTDOWN);
        return -1;
    }
    return 0;
}

static void drained_cb(void *ud, bool drained)
{
    srvside *side = ud;
    pyx_ticket *t = side->drain;
    side->drain = NULL;
    pyx_ticket_complete(t, &(xfer_result){
                               .status = drained ? 0 : XFER_ERR_TIMEOUT});
}

typedef struct drain_args {
    srvside *side;
    pyx_ticket *t;
} drain_args;

static int drain_fn(pyx_core *c, void *arg)
{
    drain_args *a = arg;
    if (!a->side->s)
        return XFER_ERR_SHUTDOWN;
    int rc = xfer_server_drain(a->side->s, drained_cb, a->side);
    if (rc == 0)
        a->side->drain = a->t;
    return rc;
}

/* Hand t to the loop as the drain's ticket; on an error, t is freed. */
static int post_drain(pyx_server *self, pyx_ticket *t)
{
    drain_args a = {.side = self->side, .t = t};
    if (open_or_raise(self))
        return -1;
    int rc = pyx_core_call(self->core, drain_fn, &a);
    if (rc)
        pyx_raise(rc);
    return rc ? -1 : 0;
}

/* drain() -> True when nothing was being reserved or written any more,
 * False when drain_timeout passed first; blocks without the GIL. */
static PyObject *server_drain(PyObject *obj, PyObject *unused)
{
    pyx_server *self = (pyx_server *)obj;
    pyx_ticket *t = calloc(1, sizeof *t);
    if (!t)
        return PyErr_NoMemory();
    t->kind = PYX_T_WAIT;
    t->core = self->core;
    if (post_drain(self, t) < 0) {
        free(t);
        return NULL;
    }
    if (pyx_core_wait(self->core, t) < 0)
        return NULL; /* interrupted: the loop (or the close) frees t */
    int status = t->res.status;
    free(t);
    return PyBool_FromLong(status == 0);
}

/* A future of the running loop resolved with drain()'s answer. */
static PyObject *server_begin_drain(PyObject *obj, PyObject *unused)
{
    pyx_server *self = (pyx_server *)obj;
    pyx_ticket *t;
    PyObject *fut = pyx_channel_oneshot(PYX_T_BOOL, &t);
    if (!fut)
        return NULL;
    if (post_drain(self, t) < 0) {
        /* Resolve it anyway, so its one-shot channel is let go. */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        pyx_ticket_complete(t, &(xfer_result){.status = XFER_ERR_SHUTDOWN});
        PyErr_Restore(et, ev, tb);
        Py_DECREF(fut);
        return NULL;
    }
    return fut;
}

/* After the server was deleted: a drain still waiting ends undrained. */
static void end_drain(pyx_server *self)
{
    pyx_ticket *t = self->side->drain;
    self->side->drain = NULL;
    if (t)
        pyx_ticket_complete(t, &(xfer_result){.status = XFER_ERR_SHUTDOWN});
}

static void finish_close(pyx_server *self)
{
    if (!self->core || !pyx_core_close(self->core, &self->closed))
        return;
    end_drain(self);
    release_views(self); /* every connection is gone: nothing lands */
}

static PyObject *server_close(PyObject *obj, PyObject *unused)
{
    finish_close((pyx_server *)obj);
    Py_RETURN_NONE;
}

/* A future resolved once the loop stopped; then _finish_close(). */
static PyObject *server_begin_aclose(PyObject *obj, PyObject *unused)
{
    pyx_server *self = (pyx_server *)obj;
    pyx_ticket *t;
    PyObject *fut = pyx_channel_oneshot(PYX_T_CLOSED, &t);
    if (!fut)
        return NULL;
    if (self->closed || !self->core) {
        pyx_ticket_complete(t, &(xfer_result){0});
        return fut;
    }
    pyx_core_begin_close(self->core, t);
    return fut;
}

static void server_dealloc(PyObject *obj)
{
    pyx_server *self = (pyx_server *)obj;
    if (self->weakrefs)
        PyObject_ClearWeakRefs(obj);
    finish_close(self); /* blocks until the server is deleted */
    if (self->core)
        pyx_core_unref(self->core);
    release_views(self);
    free(self->side);
    Py_XDECREF(self->buffers);
    Py_TYPE(obj)->tp_free(obj);
}

/* ---------------------------------------------------------------------- */
/* Introspection                                                           */
/* ---------------------------------------------------------------------- */

typedef struct srv_query {
    srvside *side;
    uint16_t index;
    xfer_server_stats st;
    bool drained;
} srv_query;

static int query_fn(pyx_core *c, void *arg)
{
    srv_query *q = arg;
    if (!q->side->s)
        return XFER_ERR_SHUTDOWN;
    q->drained = xfer_server_drained(q->side->s);
    return pyx_server_stats_get(q->side->s, q->index, &q->st);
}

static int query(pyx_server *self, srv_query *q)
{
    q->side = self->side;
    if (open_or_raise(self))
        return -1;
    int rc = pyx_core_call(self->core, query_fn, q);
    if (rc)
        pyx_raise(rc);
    return rc ? -1 : 0;
}

/* stats(shard=None) -> dict: of one hosted shard, or of every one summed */
static PyObject *server_stats(PyObject *obj, PyObject *args)
{
    PyObject *shard = Py_None;
    if (!PyArg_ParseTuple(args, "|O:stats", &shard))
        return NULL;
    srv_query q = {.index = XFER_SHARD_NONE};
    if (shard != Py_None) {
        long v = PyLong_AsLong(shard);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        if (v < 0 || v >= XFER_MAX_SHARDS)
            return pyx_raise(XFER_ERR_NOT_FOUND);
        q.index = (uint16_t)v;
    }
    if (query((pyx_server *)obj, &q) < 0)
        return NULL;
    return pyx_stats_server(&q.st);
}

typedef struct rule_call {
    srvside *side;
    xfer_fault_rule rule;
    bool clear;
} rule_call;

static int rule_fn(pyx_core *c, void *arg)
{
    rule_call *r = arg;
    if (!r->side->s)
        return XFER_ERR_SHUTDOWN;
    if (r->clear) {
        xfer_server_clear_rules(r->side->s);
        return 0;
    }
    return xfer_server_add_rule(r->side->s, &r->rule);
}

/* add_fault(kind, op=, shard=, id=, prob=, count=, delay=, error=): the
 * Loop's rule (xfer/fault.h) on this server's shards; shard is the index
 * in the group. */
static PyObject *server_add_fault(PyObject *obj, PyObject *args,
                                  PyObject *kw)
{
    pyx_server *self = (pyx_server *)obj;
    rule_call r = {.side = self->side};
    if (pyx_fault_rule_of(args, kw, XFER_MAX_SHARDS, &r.rule) < 0 ||
        open_or_raise(self))
        return NULL;
    int rc = pyx_core_call(self->core, rule_fn, &r);
    return rc ? pyx_raise(rc) : (Py_INCREF(Py_None), Py_None);
}

static PyObject *server_clear_faults(PyObject *obj, PyObject *unused)
{
    pyx_server *self = (pyx_server *)obj;
    rule_call r = {.side = self->side, .clear = true};
    if (open_or_raise(self))
        return NULL;
    int rc = pyx_core_call(self->core, rule_fn, &r);
    return rc ? pyx_raise(rc) : (Py_INCREF(Py_None), Py_None);
}

static PyObject *get_drained(PyObject *obj, void *unused)
{
    srv_query q = {.index = XFER_SHARD_NONE};
    if (query((pyx_server *)obj, &q) < 0)
        return NULL;
    return PyBool_FromLong(q.drained);
}

static PyObject *get_port(PyObject *obj, void *unused)
{
    return PyLong_FromLong(((pyx_server *)obj)->port);
}

static PyObject *get_shards(PyObject *obj, void *unused)
{
    pyx_server *self = (pyx_server *)obj;
    PyObject *t = PyTuple_New(self->nshards);
    for (uint16_t k = 0; t && k < self->nshards; k++) {
        PyObject *v = PyLong_FromLong(self->index[k]);
        if (!v) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, k, v);
    }
    return t;
}

static PyObject *get_buffers(PyObject *obj, void *unused)
{
    pyx_server *self = (pyx_server *)obj;
    PyObject *b = self->buffers ? self->buffers : Py_None;
    Py_INCREF(b);
    return b;
}

static PyObject *get_closed(PyObject *obj, void *unused)
{
    return PyBool_FromLong(((pyx_server *)obj)->closed);
}

static PyMethodDef server_methods[] = {
    {"stats", server_stats, METH_VARARGS,
     "stats($self, shard=None, /)\n--\n\n"
     "stats(shard=None) -> dict of counters: of one hosted shard, or of "
     "every one summed"},
    {"add_fault", (PyCFunction)(void (*)(void))server_add_fault,
     METH_VARARGS | METH_KEYWORDS,
     "add_fault($self, kind, *, op=-1, shard=-1, id=0, prob=0.0, count=0, "
     "delay=None, error=0)\n--\n\n"
     "add_fault(kind, op=, shard=, id=, prob=, count=, delay=, error=): "
     "append a fault rule on the producers' ops"},
    {"clear_faults", server_clear_faults, METH_NOARGS,
     "clear_faults($self, /)\n--\n\ndrop every rule"},
    {"drain", server_drain, METH_NOARGS,
     "drain($self, /)\n--\n\n"
     "drain() -> bool: refuse new reserves and wait (without the GIL) "
     "until nothing is reserved or being written (True) or drain_timeout "
     "passed (False); READY and TAKEN data stay served"},
    {"close", server_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "close(): close every connection, delete the server, let go of the "
     "buffers; blocks without the GIL"},
    {"_begin_drain", server_begin_drain, METH_NOARGS, NULL},
    {"_begin_aclose", server_begin_aclose, METH_NOARGS, NULL},
    {"_finish_close", server_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef server_getset[] = {
    {"port", get_port, NULL, "the TCP port it listens on", NULL},
    {"shards", get_shards, NULL, "the hosted shards' indexes, by buffer",
     NULL},
    {"buffers", get_buffers, NULL, "the buffer objects, one per shard",
     NULL},
    {"drained", get_drained, NULL,
     "True when nothing is being reserved or written", NULL},
    {"closed", get_closed, NULL, "True once closed", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pyx_server_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xfer._xfer.Server",
    .tp_basicsize = sizeof(pyx_server),
    .tp_dealloc = server_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A shard server over the caller's buffers, on a loop thread "
              "of its own.",
    .tp_weaklistoffset = offsetof(pyx_server, weakrefs),
    .tp_methods = server_methods,
    .tp_getset = server_getset,
    .tp_init = server_init,
    .tp_new = server_new,
};
