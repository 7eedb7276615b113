/*
 * python/ext/pool.c - xfer.Pool: a staging pool made of any object with
 * the buffer protocol (bytearray, bytes, mmap, array.array, a memoryview
 * or a slice of one, a numpy array, a tensor's buffer), with
 * __cuda_array_interface__ or DLPack (a GPU tensor, a host tensor), or a
 * raw (pointer, nbytes, device) tuple, without a copy (tensor.c).
 *
 * What is required of the memory: one contiguous block (C or Fortran
 * order for a buffer, row-major for a tensor; a strided view is refused
 * with BufferError) of at least one byte.  It need not be writable: the
 * producer only reads staging memory.  Device memory is registered with
 * its kind (xfer_engine_register_pool_mem).
 *
 * What must stay true (I3): the memory is held (a Py_buffer, a DLPack
 * tensor not yet deleted, the object referenced), so the exporter keeps
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
    int kind;
    int32_t device;
    uint32_t id;
} reg_args;

static int reg_on_loop(pyx_core *c, void *arg)
{
    reg_args *a = arg;
    if (a->kind == PYX_MEM_HOST)
        return xfer_engine_register_pool(c->e, a->base, a->len, &a->id);
#if PYX_HAVE_MEM
    return xfer_engine_register_pool_mem(
        c->e, a->base, a->len,
        (xfer_mem){.kind = (xfer_mem_kind)a->kind, .device = a->device},
        &a->id);
#else
    return XFER_ERR_NOT_SUPPORTED;
#endif
}

pyx_pool *pyx_pool_register(pyx_core *c, PyObject *obj)
{
    pyx_pool *p = PyObject_New(pyx_pool, &pyx_pool_type);
    if (!p)
        return NULL;
    p->core = NULL;
    p->registered = false;
    if (pyx_tensor_get(obj, false, &p->mem) < 0) {
        Py_DECREF(p);
        return NULL;
    }
    if (p->mem.nbytes == 0) {
        PyErr_SetString(PyExc_ValueError, "a staging pool needs at least "
                                          "one byte");
        Py_DECREF(p);
        return NULL;
    }
    reg_args a = {.base = p->mem.ptr, .len = p->mem.nbytes,
                  .kind = p->mem.kind, .device = p->mem.device};
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
    pyx_tensor_release(&p->mem);
}

static void pool_dealloc(PyObject *self)
{
    pyx_pool *p = (pyx_pool *)self;
    /* A registered pool is kept alive by its Engine: only a released or
     * never registered one gets here. */
    pyx_tensor_release(&p->mem);
    if (p->core)
        pyx_core_unref(p->core);
    PyObject_Free(self);
}

static PyObject *pool_repr(PyObject *self)
{
    pyx_pool *p = (pyx_pool *)self;
    if (!p->registered)
        return PyUnicode_FromString("<xfer.Pool unregistered>");
    return PyUnicode_FromFormat("<xfer.Pool id=%u nbytes=%zu %s over %s>",
                                (unsigned)p->id, p->mem.nbytes,
                                pyx_mem_kind_name(p->mem.kind),
                                p->mem.obj ? Py_TYPE(p->mem.obj)->tp_name
                                           : "a raw pointer");
}

static PyObject *get_id(PyObject *self, void *unused)
{
    return PyLong_FromUnsignedLong(((pyx_pool *)self)->id);
}

static PyObject *get_nbytes(PyObject *self, void *unused)
{
    pyx_pool *p = (pyx_pool *)self;
    return PyLong_FromSize_t(p->registered ? p->mem.nbytes : 0);
}

static PyObject *get_ptr(PyObject *self, void *unused)
{
    pyx_pool *p = (pyx_pool *)self;
    return PyLong_FromUnsignedLongLong(
        p->registered ? (uintptr_t)p->mem.ptr : 0);
}

static PyObject *get_device(PyObject *self, void *unused)
{
    pyx_pool *p = (pyx_pool *)self;
    if (p->mem.kind == PYX_MEM_CUDA)
        return PyUnicode_FromFormat("cuda:%d", (int)p->mem.device);
    return PyUnicode_FromString(pyx_mem_kind_name(p->mem.kind));
}

static PyObject *get_form(PyObject *self, void *unused)
{
    pyx_pool *p = (pyx_pool *)self;
    return PyUnicode_FromString(p->mem.form ? p->mem.form : "none");
}

static PyObject *get_registered(PyObject *self, void *unused)
{
    return PyBool_FromLong(((pyx_pool *)self)->registered);
}

static PyObject *get_obj(PyObject *self, void *unused)
{
    pyx_pool *p = (pyx_pool *)self;
    PyObject *o = p->registered && p->mem.obj ? p->mem.obj : Py_None;
    Py_INCREF(o);
    return o;
}

static PyGetSetDef pool_getset[] = {
    {"id", get_id, NULL, "the engine's pool handle", NULL},
    {"nbytes", get_nbytes, NULL, "bytes of the buffer (0 once released)",
     NULL},
    {"registered", get_registered, NULL,
     "True until unregistered or the engine stopped", NULL},
    {"ptr", get_ptr, NULL, "the address registered (0 once released)",
     NULL},
    {"device", get_device, NULL, "'host', 'cuda:N' or 'testdev'", NULL},
    {"form", get_form, NULL, "how the memory was handed over: 'buffer', "
                             "'dlpack', 'cuda_array_interface' or 'raw'",
     NULL},
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
