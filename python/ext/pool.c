/*
 * python/ext/pool.c - xfer.Pool: a staging pool made of any object with
 * the buffer protocol (bytearray, bytes, mmap, array.array, a memoryview
 * or a slice of one, a numpy array, a tensor's buffer), without a copy.
 *
 * What is required of the buffer: one contiguous block (C or Fortran
 * order; a strided view is refused with BufferError) of at least one
 * byte.  It need not be writable: the producer only reads staging memory.
 *
 * What must stay true (I3): the Py_buffer is held, so the exporter keeps
 * the memory where it is (a bytearray cannot resize, an mmap cannot close)
 * from the registration until the engine's loop unregistered the pool,
 * which it does only when no transfer uses it any more, or until the
 * engine stopped (every write ended).  The Engine keeps every registered
 * pool alive, so dropping the last user reference to a pool changes
 * nothing while it is registered.
 */
#include "pyx.h"

typedef struct reg_args {
    void *base;
    size_t len;
    uint32_t id;
} reg_args;

static int reg_on_loop(pyx_core *c, void *arg)
{
    reg_args *a = arg;
    return xfer_engine_register_pool(c->e, a->base, a->len, &a->id);
}

pyx_pool *pyx_pool_register(pyx_core *c, PyObject *obj)
{
    pyx_pool *p = PyObject_New(pyx_pool, &pyx_pool_type);
    if (!p)
        return NULL;
    p->core = NULL;
    p->registered = false;
    if (PyObject_GetBuffer(obj, &p->view, PyBUF_ANY_CONTIGUOUS) < 0) {
        p->view.obj = NULL;
        Py_DECREF(p);
        return NULL;
    }
    if (p->view.len <= 0) {
        PyErr_SetString(PyExc_ValueError, "a staging pool needs at least "
                                          "one byte");
        Py_DECREF(p);
        return NULL;
    }
    reg_args a = {.base = p->view.buf, .len = (size_t)p->view.len};
    int rc = pyx_core_call(c, reg_on_loop, &a);
    if (rc) {
        Py_DECREF(p);
        return (pyx_pool *)pyx_raise(rc);
    }
    p->id = a.id;
    p->registered = true;
    p->core = c;
    pyx_core_ref(c);
    return p;
}

void pyx_pool_released(pyx_pool *p)
{
    if (!p->registered)
        return;
    p->registered = false;
    PyBuffer_Release(&p->view);
    p->view.obj = NULL;
}

static void pool_dealloc(PyObject *self)
{
    pyx_pool *p = (pyx_pool *)self;
    /* A registered pool is kept alive by its Engine: only a released or
     * never registered one gets here. */
    if (p->view.obj)
        PyBuffer_Release(&p->view);
    if (p->core)
        pyx_core_unref(p->core);
    PyObject_Free(self);
}

static PyObject *pool_repr(PyObject *self)
{
    pyx_pool *p = (pyx_pool *)self;
    if (!p->registered)
        return PyUnicode_FromString("<xfer.Pool unregistered>");
    return PyUnicode_FromFormat("<xfer.Pool id=%u nbytes=%zd over %s>",
                                (unsigned)p->id, p->view.len,
                                Py_TYPE(p->view.obj)->tp_name);
}

static PyObject *get_id(PyObject *self, void *unused)
{
    return PyLong_FromUnsignedLong(((pyx_pool *)self)->id);
}

static PyObject *get_nbytes(PyObject *self, void *unused)
{
    pyx_pool *p = (pyx_pool *)self;
    return PyLong_FromSsize_t(p->registered ? p->view.len : 0);
}

static PyObject *get_registered(PyObject *self, void *unused)
{
    return PyBool_FromLong(((pyx_pool *)self)->registered);
}

static PyObject *get_obj(PyObject *self, void *unused)
{
    pyx_pool *p = (pyx_pool *)self;
    PyObject *o = p->registered && p->view.obj ? p->view.obj : Py_None;
    Py_INCREF(o);
    return o;
}

static PyGetSetDef pool_getset[] = {
    {"id", get_id, NULL, "the engine's pool handle", NULL},
    {"nbytes", get_nbytes, NULL, "bytes of the buffer (0 once released)",
     NULL},
    {"registered", get_registered, NULL,
     "True until unregistered or the engine stopped", NULL},
    {"obj", get_obj, NULL, "the object whose buffer this is (None once "
                           "released)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pyx_pool_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xfer.Pool",
    .tp_basicsize = sizeof(pyx_pool),
    .tp_dealloc = pool_dealloc,
    .tp_repr = pool_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A staging pool: a registered buffer (Engine.register_pool).",
    .tp_getset = pool_getset,
};
