/*
 * python/ext/outcome.c - what an xfer.Consumer yields: xfer.Available (every
 * shard's data is in place and pinned for this process) and
 * xfer.Unavailable (it never will be: the reason and the shards that never
 * reported), and the memory an Available's views show (pyx_mem).
 *
 * An Available's views are read-only memoryviews, one per shard, straight
 * over the shard's memory: the mapped shared-memory pool of `xferd --shm`,
 * or the buffers of an xfer.Server in this process.  Each is made over a
 * small exporter (_Region) that counts the buffer exports of its outcome.
 *
 * What must stay true:
 *  - a view never reads memory that is gone: every export holds its
 *    outcome, which holds a reference to the mapping (or buffer) it reads,
 *    so a shm pool stays mapped while any view over it (a slice, a numpy
 *    array) lives, even after its shard restarted or the consumer closed;
 *  - the data is given back to the shards (released, I8) only once it was
 *    released (release(), the context manager, or the Available dropped)
 *    and no export of it is left: release() releases the views it handed
 *    out (accessing them raises ValueError from then on) and, if a view
 *    derived from them still lives, the release waits for it; a dropped
 *    Available leaves the views the caller kept as they are and waits for
 *    them: no view's bytes are overwritten under it while the consumer is
 *    open;
 *  - every outcome popped is reported once, and an available one is given
 *    back exactly once (by its release, or by the consumer's close).
 */
#include "pyx.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Memory                                                                  */
/* ---------------------------------------------------------------------- */

struct pyx_mem {
    atomic_uint refs;
    xfer_shm *shm;      /* or NULL: a buffer */
    pyx_tensor t;       /* a buffer's or tensor's (tensor.c); zero for shm */
    const uint8_t *base;
    uint64_t len;
};

pyx_mem *pyx_mem_of_shm(xfer_shm *m)
{
    pyx_mem *p = calloc(1, sizeof *p);
    if (!p) {
        xfer_shm_close(m);
        return NULL;
    }
    atomic_init(&p->refs, 1);
    p->shm = m;
    p->base = xfer_shm_pool(m);
    p->len = xfer_shm_len(m);
    return p;
}

pyx_mem *pyx_mem_of_buffer(PyObject *obj)
{
    pyx_mem *p = calloc(1, sizeof *p);
    if (!p)
        return (pyx_mem *)PyErr_NoMemory();
    if (pyx_tensor_get(obj, false, &p->t) < 0) {
        free(p);
        return NULL;
    }
    atomic_init(&p->refs, 1);
    p->base = p->t.ptr;
    p->len = (uint64_t)p->t.nbytes;
    return p;
}

uint64_t pyx_mem_generation(const pyx_mem *m)
{
    return m->shm ? xfer_shm_generation(m->shm) : 0;
}

void pyx_mem_ref(pyx_mem *m)
{
    if (m)
        atomic_fetch_add(&m->refs, 1);
}

void pyx_mem_unref(pyx_mem *m)
{
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1)
        return;
    if (m->shm)
        xfer_shm_close(m->shm);
    else
        pyx_tensor_release(&m->t);
    free(m);
}

/* ---------------------------------------------------------------------- */
/* Outcome records                                                         */
/* ---------------------------------------------------------------------- */

pyx_outcome *pyx_outcome_alloc(uint16_t n)
{
    return calloc(1, sizeof(pyx_outcome) + n * sizeof(pyx_oregion));
}

void pyx_outcome_free(pyx_outcome *o)
{
    for (uint16_t k = 0; k < o->n; k++)
        pyx_mem_unref(o->reg[k].mem);
    free(o);
}

/* Released and nothing exports its memory any more: give it back. */
static void maybe_give_back(pyx_outcome *o)
{
    if (!o->release_asked || o->exports || o->release_sent)
        return;
    o->release_sent = true;
    pyx_cside_unhold(o->cs, o);
    pyx_cside_release(o->cs, o->id);
}

static void outcome_unref(pyx_outcome *o)
{
    if (--o->refs)
        return;
    pyx_cside *cs = o->cs;
    if (!o->release_sent) /* cannot happen: its Available asked */
        pyx_cside_unhold(cs, o);
    pyx_outcome_free(o);
    pyx_cside_unref(cs);
}

/* ---------------------------------------------------------------------- */
/* _Region: the exporter under one view                                    */
/* ---------------------------------------------------------------------- */

typedef struct pyx_region {
    PyObject_HEAD
    pyx_outcome *o; /* a reference */
    uint16_t k;
} pyx_region;

static PyTypeObject pyx_region_type;

/* A DeviceView over region r may be used until its outcome's release. */
static PyObject *region_valid(PyObject *r)
{
    return ((pyx_region *)r)->o->release_asked ? Py_False : Py_True;
}

static int region_getbuffer(PyObject *obj, Py_buffer *view, int flags)
{
    pyx_region *r = (pyx_region *)obj;
    const pyx_oregion *g = &r->o->reg[r->k];
    if (r->o->release_asked) {
        PyErr_SetString(PyExc_BufferError, "the outcome was released");
        view->obj = NULL;
        return -1;
    }
    if (PyBuffer_FillInfo(view, obj, (void *)(g->mem->base + g->r.offset),
                          g->r.len, 1, flags) < 0)
        return -1;
    r->o->exports++;
    return 0;
}

static void region_releasebuffer(PyObject *obj, Py_buffer *view)
{
    pyx_region *r = (pyx_region *)obj;
    r->o->exports--;
    maybe_give_back(r->o);
}

static void region_dealloc(PyObject *obj)
{
    outcome_unref(((pyx_region *)obj)->o);
    PyObject_Free(obj);
}

static PyBufferProcs region_as_buffer = {
    .bf_getbuffer = region_getbuffer,
    .bf_releasebuffer = region_releasebuffer,
};

static PyTypeObject pyx_region_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xfer._xfer._Region",
    .tp_basicsize = sizeof(pyx_region),
    .tp_dealloc = region_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One shard's region of an available outcome (a buffer).",
    .tp_as_buffer = &region_as_buffer,
};

/* ---------------------------------------------------------------------- */
/* xfer.Available                                                          */
/* ---------------------------------------------------------------------- */

typedef struct pyx_available {
    PyObject_HEAD
    pyx_outcome *o;     /* a reference */
    PyObject *consumer; /* kept open while its data is held */
    PyObject *views;    /* a tuple, made on first use; NULL once released */
} pyx_available;

/* A memoryview over region k, checked against the memory it reads: a
 * region the server placed outside its pool is refused, never read. */
static PyObject *view_of(pyx_outcome *o, uint16_t k)
{
    const pyx_oregion *g = &o->reg[k];
    if (!g->mem) {
        PyErr_Format(PyExc_BufferError, "shard %u's memory is not mapped "
                     "in this process (Consumer(shm=...) or buffers=...)",
                     (unsigned)g->r.shard);
        return NULL;
    }
    if (g->r.offset > g->mem->len || g->r.len > g->mem->len - g->r.offset) {
        PyErr_Format(PyExc_BufferError, "shard %u's region (%llu, %u) is "
                     "outside its %llu bytes", (unsigned)g->r.shard,
                     (unsigned long long)g->r.offset, (unsigned)g->r.len,
                     (unsigned long long)g->mem->len);
        return NULL;
    }
    pyx_region *r = PyObject_New(pyx_region, &pyx_region_type);
    if (!r)
        return NULL;
    r->o = o;
    r->k = k;
    o->refs++;
    PyObject *v;
    if (g->mem->t.kind != PYX_MEM_HOST)
        /* Device memory: never read here; handed back as a
         * DeviceView (__cuda_array_interface__), valid until release. */
        v = pyx_devview_new((void *)(g->mem->base + g->r.offset), g->r.len,
                            g->mem->t.kind, g->mem->t.device, true,
                            (PyObject *)r, region_valid);
    else
        v = PyMemoryView_FromObject((PyObject *)r);
    Py_DECREF(r); /* the view's buffer holds it */
    return v;
}

static PyObject *get_views(PyObject *obj, void *unused)
{
    pyx_available *a = (pyx_available *)obj;
    if (a->o->release_asked) {
        PyErr_SetString(PyExc_ValueError, "the outcome was released");
        return NULL;
    }
    if (!a->views) {
        PyObject *t = PyTuple_New(a->o->n);
        for (uint16_t k = 0; t && k < a->o->n; k++) {
            PyObject *v = view_of(a->o, k);
            if (!v)
                Py_CLEAR(t);
            else
                PyTuple_SET_ITEM(t, k, v);
        }
        if (!t)
            return NULL;
        a->views = t;
    }
    Py_INCREF(a->views);
    return a->views;
}

/* Release the views handed out; one with exports of its own (a numpy
 * array over it) stays until they go, and the give-back waits for it. */
static void release_views(pyx_available *a)
{
    PyObject *views = a->views;
    a->views = NULL;
    for (Py_ssize_t k = 0; views && k < PyTuple_GET_SIZE(views); k++) {
        PyObject *v = PyTuple_GET_ITEM(views, k);
        if (PyObject_TypeCheck(v, &pyx_devview_type)) {
            pyx_devview_invalidate(v); /* device memory: no exports */
            continue;
        }
        PyObject *r = PyObject_CallMethod(v, "release", NULL);
        if (!r)
            PyErr_Clear(); /* BufferError: exported; released later */
        Py_XDECREF(r);
    }
    Py_XDECREF(views);
}

/* release() (invalidate: the views handed out are released), or the
 * Available dropped (a view the caller still holds stays good, and the
 * give-back waits for it). */
static void ask_release(pyx_available *a, bool invalidate)
{
    if (a->o->release_asked)
        return;
    a->o->release_asked = true;
    if (invalidate)
        release_views(a);
    else
        Py_CLEAR(a->views);
    maybe_give_back(a->o);
}

void pyx_available_drop_views(PyObject *avail)
{
    release_views((pyx_available *)avail);
}

static PyObject *avail_release(PyObject *obj, PyObject *unused)
{
    ask_release((pyx_available *)obj, true);
    Py_RETURN_NONE;
}

static PyObject *avail_enter(PyObject *obj, PyObject *unused)
{
    Py_INCREF(obj);
    return obj;
}

static PyObject *avail_exit(PyObject *obj, PyObject *args)
{
    ask_release((pyx_available *)obj, true);
    Py_RETURN_FALSE;
}

static void avail_dealloc(PyObject *obj)
{
    pyx_available *a = (pyx_available *)obj;
    a->o->avail = NULL;
    ask_release(a, false); /* dropped without release() */
    outcome_unref(a->o);
    Py_XDECREF(a->consumer);
    PyObject_Free(obj);
}

static PyObject *get_regions(PyObject *obj, void *unused)
{
    pyx_outcome *o = ((pyx_available *)obj)->o;
    PyObject *t = PyTuple_New(o->n);
    for (uint16_t k = 0; t && k < o->n; k++) {
        PyObject *v = Py_BuildValue("(HKI)", o->reg[k].r.shard,
                                    (unsigned long long)o->reg[k].r.offset,
                                    o->reg[k].r.len);
        if (!v) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, k, v);
    }
    return t;
}

static PyObject *get_nbytes(PyObject *obj, void *unused)
{
    pyx_outcome *o = ((pyx_available *)obj)->o;
    unsigned long long n = 0;
    for (uint16_t k = 0; k < o->n; k++)
        n += o->reg[k].r.len;
    return PyLong_FromUnsignedLongLong(n);
}

static PyObject *get_avail_id(PyObject *obj, void *unused)
{
    return PyLong_FromUnsignedLongLong(((pyx_available *)obj)->o->id);
}

static PyObject *get_attempt(PyObject *obj, void *unused)
{
    return PyLong_FromUnsignedLong(((pyx_available *)obj)->o->attempt);
}

static PyObject *get_released(PyObject *obj, void *unused)
{
    return PyBool_FromLong(((pyx_available *)obj)->o->release_asked);
}

static PyObject *get_given_back(PyObject *obj, void *unused)
{
    return PyBool_FromLong(((pyx_available *)obj)->o->release_sent);
}

static PyObject *get_true(PyObject *obj, void *unused)
{
    Py_RETURN_TRUE;
}

static PyObject *avail_repr(PyObject *obj)
{
    pyx_outcome *o = ((pyx_available *)obj)->o;
    return PyUnicode_FromFormat("<xfer.Available id=%llu attempt=%u, %u "
                                "shards%s>", (unsigned long long)o->id,
                                (unsigned)o->attempt, (unsigned)o->n,
                                o->release_asked ? ", released" : "");
}

static PyMethodDef avail_methods[] = {
    {"release", avail_release, METH_NOARGS,
     "release($self, /)\n--\n\n"
     "release(): done with the data.  The views handed out are released "
     "(using them raises ValueError) and the data goes back to the shards "
     "once no view derived from them is left.  Idempotent."},
    {"__enter__", avail_enter, METH_NOARGS, "__enter__($self, /)\n--\n\n"},
    {"__exit__", avail_exit, METH_VARARGS,
     "__exit__($self, *exc_info)\n--\n\nrelease()"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef avail_getset[] = {
    {"id", get_avail_id, NULL, "the transfer id", NULL},
    {"attempt", get_attempt, NULL, "the producer's attempt that landed",
     NULL},
    {"regions", get_regions, NULL,
     "per shard (shard, offset, length) in that shard's memory", NULL},
    {"views", get_views, NULL,
     "per shard a read-only memoryview of its data, in place (no copy); "
     "valid until release()", NULL},
    {"nbytes", get_nbytes, NULL, "bytes over every shard", NULL},
    {"released", get_released, NULL, "True once release() was called",
     NULL},
    {"given_back", get_given_back, NULL,
     "True once the data went back to the shards", NULL},
    {"ok", get_true, NULL, "True: the data is available", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pyx_available_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xfer.Available",
    .tp_basicsize = sizeof(pyx_available),
    .tp_dealloc = avail_dealloc,
    .tp_repr = avail_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Every shard's data of one id, in place and pinned until "
              "release().",
    .tp_methods = avail_methods,
    .tp_getset = avail_getset,
};

/* ---------------------------------------------------------------------- */
/* xfer.Unavailable                                                        */
/* ---------------------------------------------------------------------- */

typedef struct pyx_unavailable {
    PyObject_HEAD
    uint64_t id, shards;
    int32_t reason;
} pyx_unavailable;

static PyObject *get_un_id(PyObject *obj, void *unused)
{
    return PyLong_FromUnsignedLongLong(((pyx_unavailable *)obj)->id);
}

static PyObject *get_reason(PyObject *obj, void *unused)
{
    return PyLong_FromLong(((pyx_unavailable *)obj)->reason);
}

static PyObject *get_name(PyObject *obj, void *unused)
{
    return PyUnicode_FromString(
        xfer_err_name(((pyx_unavailable *)obj)->reason));
}

static PyObject *get_shards(PyObject *obj, void *unused)
{
    return pyx_shard_tuple(((pyx_unavailable *)obj)->shards);
}

static PyObject *get_false(PyObject *obj, void *unused)
{
    Py_RETURN_FALSE;
}

/* The xfer.Error subclass of the reason, as an instance. */
static PyObject *get_error(PyObject *obj, void *unused)
{
    pyx_unavailable *u = (pyx_unavailable *)obj;
    pyx_raise(u->reason); /* sets it; then take the instance back */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    Py_XDECREF(et);
    Py_XDECREF(tb);
    return ev;
}

static PyObject *un_repr(PyObject *obj)
{
    pyx_unavailable *u = (pyx_unavailable *)obj;
    PyObject *shards = pyx_shard_tuple(u->shards);
    PyObject *r = shards ? PyUnicode_FromFormat(
                               "<xfer.Unavailable id=%llu %s, shards %S>",
                               (unsigned long long)u->id,
                               xfer_err_name(u->reason), shards)
                         : NULL;
    Py_XDECREF(shards);
    return r;
}

static PyGetSetDef un_getset[] = {
    {"id", get_un_id, NULL, "the transfer id", NULL},
    {"reason", get_reason, NULL, "the xfer error code of the reason",
     NULL},
    {"name", get_name, NULL, "the reason's name (\"TIMEOUT\", ...)", NULL},
    {"shards", get_shards, NULL,
     "the shards that never reported ready (and a lost one)", NULL},
    {"error", get_error, NULL, "the reason as an xfer.Error instance",
     NULL},
    {"ok", get_false, NULL, "False: it will never be available", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pyx_unavailable_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xfer.Unavailable",
    .tp_basicsize = sizeof(pyx_unavailable),
    .tp_dealloc = (destructor)PyObject_Free,
    .tp_repr = un_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An id that will never be available: the reason, and the "
              "shards that never reported.",
    .tp_getset = un_getset,
};

/* ---------------------------------------------------------------------- */
/* Wrapping                                                                */
/* ---------------------------------------------------------------------- */

static PyObject *wrap_unavailable(pyx_outcome *o)
{
    pyx_unavailable *u = PyObject_New(pyx_unavailable, &pyx_unavailable_type);
    if (u) {
        u->id = o->id;
        u->shards = o->shards;
        u->reason = o->reason;
    }
    pyx_outcome_free(o);
    return (PyObject *)u;
}

PyObject *pyx_outcome_wrap(pyx_outcome *o, pyx_cside *cs, PyObject *consumer)
{
    if (o->reason)
        return wrap_unavailable(o);
    o->refs = 1;
    o->cs = cs;
    pyx_cside_ref(cs);
    pyx_cside_hold(cs, o);
    pyx_available *a = PyObject_New(pyx_available, &pyx_available_type);
    if (!a) {
        o->release_asked = true;
        maybe_give_back(o);
        outcome_unref(o);
        return NULL;
    }
    a->o = o;
    a->views = NULL;
    a->consumer = consumer;
    Py_INCREF(consumer);
    o->avail = (PyObject *)a;
    return (PyObject *)a;
}
