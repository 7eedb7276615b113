/*
 * python/ext/tensor.c - memory handed over by Python, in place: the one
 * parser behind Engine.register_pool, xfer.Server's shard buffers and
 * Consumer(buffers=), for
 *   - a raw (pointer, nbytes, device) tuple (device: "host"/"cpu",
 *     "cuda"/"cuda:N", "testdev", or DLPack's (device_type, id) pair);
 *   - an object with __cuda_array_interface__ (version 2 or 3): CUDA
 *     memory, or test-device memory where xfer_mem_of says so;
 *   - an object with __dlpack__/__dlpack_device__ (kDLCPU, kDLCUDA,
 *     kDLCUDAHost): the "dltensor" capsule is renamed "used_dltensor"
 *     (so its own destructor leaves it alone) and its deleter is called
 *     when the binding lets go of the memory;
 *   - the buffer protocol, as before (host memory).
 * Never a copy: the pointer registered is the object's data pointer.
 *
 * What must stay true:
 *  - the memory stays where it is until pyx_tensor_release: a buffer's
 *    Py_buffer is held, a DLPack tensor's DLManagedTensor is not deleted,
 *    and the object itself is referenced (for the array interface, the
 *    object is what keeps its memory; a raw tuple's memory is the
 *    caller's to keep, which the docs say);
 *  - only contiguous memory is taken: a strided array is refused with
 *    BufferError, never registered with holes.
 *
 * The memory kinds are include/xfer/mem.h's (helper device's API); in a
 * tree without that header only host memory can be registered, and a
 * device kind is refused with xfer.NotSupportedError.
 */
#include "pyx.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* DLPack's ABI (dlpack.h v0.8, the "dltensor" capsule's contents): the    */
/* structs are the exchange format itself, not a library.                  */
/* ---------------------------------------------------------------------- */

enum { DL_CPU = 1, DL_CUDA = 2, DL_CUDA_HOST = 3 };

typedef struct {
    int32_t device_type;
    int32_t device_id;
} dl_device;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} dl_dtype;

typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape;
    int64_t *strides; /* NULL: compact row-major */
    uint64_t byte_offset;
} dl_tensor;

typedef struct dl_managed {
    dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct dl_managed *self);
} dl_managed;

/* ---------------------------------------------------------------------- */
/* Memory kinds                                                            */
/* ---------------------------------------------------------------------- */

int pyx_mem_kind_of(const void *ptr, int32_t *device)
{
#if PYX_HAVE_MEM
    xfer_mem m = xfer_mem_of(ptr);
    *device = m.device;
    return (int)m.kind;
#else
    (void)ptr;
    *device = 0;
    return PYX_MEM_HOST;
#endif
}

const char *pyx_mem_kind_name(int kind)
{
    switch (kind) {
    case PYX_MEM_HOST: return "host";
    case PYX_MEM_CUDA: return "cuda";
    case PYX_MEM_TESTDEV: return "testdev";
    default: return "?";
    }
}

/* "host", "cpu", "cuda", "cuda:N", "testdev", None, or (dl type, id). */
static int parse_device(PyObject *d, int *kind, int32_t *dev)
{
    *dev = 0;
    if (d == Py_None) {
        *kind = PYX_MEM_HOST;
        return 0;
    }
    if (PyUnicode_Check(d)) {
        const char *s = PyUnicode_AsUTF8(d);
        if (!s)
            return -1;
        if (!strcmp(s, "host") || !strcmp(s, "cpu")) {
            *kind = PYX_MEM_HOST;
            return 0;
        }
        if (!strcmp(s, "testdev")) {
            *kind = PYX_MEM_TESTDEV;
            return 0;
        }
        if (!strcmp(s, "cuda")) {
            *kind = PYX_MEM_CUDA;
            return 0;
        }
        if (!strncmp(s, "cuda:", 5) && s[5]) {
            char *end;
            long n = strtol(s + 5, &end, 10);
            if (!*end && n >= 0 && n < 1 << 16) {
                *kind = PYX_MEM_CUDA;
                *dev = (int32_t)n;
                return 0;
            }
        }
        PyErr_Format(PyExc_ValueError, "device %R: host, cpu, cuda, cuda:N "
                     "or testdev", d);
        return -1;
    }
    long t, id;
    if (PyTuple_Check(d) && PyTuple_GET_SIZE(d) == 2 &&
        PyArg_ParseTuple(d, "ll", &t, &id)) {
        if (id < 0 || id >= 1 << 16) {
            PyErr_Format(PyExc_ValueError, "device id %ld", id);
            return -1;
        }
        *dev = (int32_t)id;
        if (t == DL_CPU || t == DL_CUDA_HOST) {
            *kind = PYX_MEM_HOST;
            *dev = 0;
            return 0;
        }
        if (t == DL_CUDA) {
            *kind = PYX_MEM_CUDA;
            return 0;
        }
        PyErr_Format(PyExc_BufferError, "DLPack device type %ld: only "
                     "kDLCPU (1), kDLCUDA (2) and kDLCUDAHost (3)", t);
        return -1;
    }
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_TypeError, "device %R: a string or a (DLPack "
                     "device type, id) pair", d);
    return -1;
}

/* ---------------------------------------------------------------------- */
/* The four forms                                                          */
/* ---------------------------------------------------------------------- */

static int from_raw(PyObject *tup, pyx_tensor *t)
{
    PyObject *dev;
    unsigned long long ptr, n;
    if (!PyArg_ParseTuple(tup, "KKO", &ptr, &n, &dev)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "a raw memory tuple is (pointer, "
                        "nbytes, device)");
        return -1;
    }
    if (parse_device(dev, &t->kind, &t->device) < 0)
        return -1;
    if (!ptr) {
        PyErr_SetString(PyExc_ValueError, "a NULL pointer");
        return -1;
    }
    t->ptr = (void *)(uintptr_t)ptr;
    t->nbytes = (size_t)n;
    t->form = "raw";
    return 0;
}

/* Bytes per element of an array-interface typestr ("<f4", "|u1", ...). */
static int typestr_size(PyObject *ts, size_t *size)
{
    const char *s = ts && PyUnicode_Check(ts) ? PyUnicode_AsUTF8(ts) : NULL;
    if (!s || strlen(s) < 3) {
        PyErr_Format(PyExc_BufferError, "__cuda_array_interface__: bad "
                     "typestr %R", ts ? ts : Py_None);
        return -1;
    }
    char *end;
    long n = strtol(s + 2, &end, 10);
    if (*end || n <= 0 || n > 1024) {
        PyErr_Format(PyExc_BufferError, "__cuda_array_interface__: bad "
                     "typestr %R", ts);
        return -1;
    }
    *size = (size_t)n;
    return 0;
}

/* shape (a tuple of ints) times itemsize; strides None or C-contiguous. */
static int cai_extent(PyObject *shape, PyObject *strides, size_t item,
                      size_t *nbytes)
{
    if (!shape || !PyTuple_Check(shape)) {
        PyErr_SetString(PyExc_BufferError, "__cuda_array_interface__: "
                        "shape must be a tuple");
        return -1;
    }
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    bool have_strides = strides && strides != Py_None;
    if (have_strides &&
        (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != nd)) {
        PyErr_SetString(PyExc_BufferError, "__cuda_array_interface__: "
                        "strides must be None or one per dimension");
        return -1;
    }
    size_t total = item;
    for (Py_ssize_t k = nd - 1; k >= 0; k--) {
        long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, k));
        if (d == -1 && PyErr_Occurred())
            return -1;
        if (d < 0) {
            PyErr_SetString(PyExc_BufferError, "__cuda_array_interface__: "
                            "a negative dimension");
            return -1;
        }
        if (have_strides && d > 1) {
            long long s = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, k));
            if (s == -1 && PyErr_Occurred())
                return -1;
            if (s != (long long)total) {
                PyErr_SetString(PyExc_BufferError, "__cuda_array_interface__:"
                                " the array is not contiguous (C order); "
                                "pass a contiguous copy");
                return -1;
            }
        }
        if (d && total > SIZE_MAX / (size_t)d) {
            PyErr_SetString(PyExc_OverflowError, "array too large");
            return -1;
        }
        total *= (size_t)d;
    }
    *nbytes = total;
    return 0;
}

static int from_cai(PyObject *obj, PyObject *cai, pyx_tensor *t)
{
    int rc = -1;
    if (!PyDict_Check(cai)) {
        PyErr_SetString(PyExc_BufferError, "__cuda_array_interface__ is "
                        "not a dict");
        return -1;
    }
    PyObject *ver = PyDict_GetItemString(cai, "version");
    long v = ver ? PyLong_AsLong(ver) : -1;
    if (v < 2) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_BufferError, "__cuda_array_interface__ "
                         "version %ld: 2 or 3 needed", v);
        return -1;
    }
    PyObject *mask = PyDict_GetItemString(cai, "mask");
    if (mask && mask != Py_None) {
        PyErr_SetString(PyExc_BufferError, "__cuda_array_interface__: a "
                        "masked array");
        return -1;
    }
    PyObject *data = PyDict_GetItemString(cai, "data");
    unsigned long long ptr;
    int ro;
    if (!data || !PyTuple_Check(data) ||
        !PyArg_ParseTuple(data, "Kp", &ptr, &ro)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_BufferError, "__cuda_array_interface__: data "
                        "must be (pointer, readonly)");
        return -1;
    }
    size_t item;
    if (typestr_size(PyDict_GetItemString(cai, "typestr"), &item) < 0 ||
        cai_extent(PyDict_GetItemString(cai, "shape"),
                   PyDict_GetItemString(cai, "strides"), item,
                   &t->nbytes) < 0)
        goto out;
    if (!ptr && t->nbytes) {
        PyErr_SetString(PyExc_BufferError, "__cuda_array_interface__: a "
                        "NULL pointer");
        goto out;
    }
    t->ptr = (void *)(uintptr_t)ptr;
    t->readonly = ro;
    /* The interface says CUDA; where the library knows the pointer
     * better (a test-device allocation, or CUDA's own ordinal), it wins. */
    t->kind = pyx_mem_kind_of(t->ptr, &t->device);
    if (t->kind == PYX_MEM_HOST) {
        t->kind = PYX_MEM_CUDA;
        t->device = 0;
    }
    t->form = "cuda_array_interface";
    t->obj = obj;
    Py_INCREF(obj);
    rc = 0;
out:
    return rc;
}

static int from_dlpack(PyObject *obj, pyx_tensor *t)
{
    int rc = -1;
    PyObject *cap = NULL;
    PyObject *devt = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (!devt)
        return -1;
    int kind;
    int32_t dev;
    if (parse_device(devt, &kind, &dev) < 0)
        goto out;
    cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
    if (!cap)
        goto out;
    dl_managed *m = PyCapsule_IsValid(cap, "dltensor")
                        ? PyCapsule_GetPointer(cap, "dltensor")
                        : NULL;
    if (!m) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_BufferError, "__dlpack__ did not return "
                            "an unused \"dltensor\" capsule");
        goto out;
    }
    /* Ours from now on: renamed, the capsule's destructor skips it, and
     * our release calls its deleter. */
    if (PyCapsule_SetName(cap, "used_dltensor") < 0)
        goto out;
    t->dl = m;
    const dl_tensor *d = &m->dl_tensor;
    size_t item = ((size_t)d->dtype.bits * d->dtype.lanes + 7) / 8;
    size_t total = item ? item : 1;
    for (int32_t k = d->ndim - 1; k >= 0; k--) {
        int64_t n = d->shape[k];
        if (n < 0) {
            PyErr_SetString(PyExc_BufferError, "DLPack: negative dimension");
            goto out;
        }
        if (d->strides && n > 1 && d->strides[k] * (int64_t)item !=
                                       (int64_t)total) {
            PyErr_SetString(PyExc_BufferError, "DLPack: the tensor is not "
                            "contiguous (row-major); pass a contiguous "
                            "copy (.contiguous(), numpy.ascontiguousarray)");
            goto out;
        }
        if (n && total > SIZE_MAX / (size_t)n) {
            PyErr_SetString(PyExc_OverflowError, "tensor too large");
            goto out;
        }
        total *= (size_t)n;
    }
    if (!item)
        total = 0;
    t->nbytes = total;
    t->ptr = (uint8_t *)d->data + d->byte_offset;
    /* The capsule's device wins over __dlpack_device__'s on a mismatch. */
    PyObject *cdev = Py_BuildValue("(ii)", d->device.device_type,
                                   d->device.device_id);
    int prc = cdev ? parse_device(cdev, &t->kind, &t->device) : -1;
    Py_XDECREF(cdev);
    if (prc < 0)
        goto out;
    (void)kind;
    (void)dev;
    t->form = "dlpack";
    t->obj = obj;
    Py_INCREF(obj);
    rc = 0;
out:
    Py_XDECREF(cap);
    Py_DECREF(devt);
    return rc;
}

static int from_buffer(PyObject *obj, bool writable, pyx_tensor *t)
{
    int flags = writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS
                         : PyBUF_ANY_CONTIGUOUS;
    if (PyObject_GetBuffer(obj, &t->view, flags) < 0) {
        t->view.obj = NULL;
        return -1;
    }
    t->ptr = t->view.buf;
    t->nbytes = (size_t)t->view.len;
    t->readonly = t->view.readonly;
    t->kind = PYX_MEM_HOST;
    t->form = "buffer";
    t->obj = obj;
    Py_INCREF(obj);
    return 0;
}

int pyx_tensor_get(PyObject *obj, bool writable, pyx_tensor *t)
{
    memset(t, 0, sizeof *t);
    int rc;
    if (PyTuple_Check(obj)) {
        rc = from_raw(obj, t);
    } else if (PyObject_HasAttrString(obj, "__cuda_array_interface__")) {
        PyObject *cai = PyObject_GetAttrString(obj,
                                               "__cuda_array_interface__");
        rc = cai ? from_cai(obj, cai, t) : -1;
        Py_XDECREF(cai);
    } else if (PyObject_HasAttrString(obj, "__dlpack__") &&
               PyObject_HasAttrString(obj, "__dlpack_device__")) {
        rc = from_dlpack(obj, t);
        /* numpy refuses to export a read-only array through DLPack, which
         * has no read-only flag: host memory still has its buffer. */
        if (rc < 0 && !writable && PyObject_CheckBuffer(obj) &&
            PyErr_ExceptionMatches(PyExc_BufferError)) {
            PyErr_Clear();
            pyx_tensor_release(t);
            memset(t, 0, sizeof *t);
            rc = from_buffer(obj, writable, t);
        }
    } else {
        rc = from_buffer(obj, writable, t);
    }
    if (rc == 0 && writable && t->readonly) {
        PyErr_SetString(PyExc_BufferError, "the memory is read-only");
        rc = -1;
    }
    if (rc < 0)
        pyx_tensor_release(t);
    return rc;
}

void pyx_tensor_release(pyx_tensor *t)
{
    if (t->view.obj)
        PyBuffer_Release(&t->view);
    t->view.obj = NULL;
    if (t->dl && t->dl->deleter) {
        /* The deleter may be Python code (a ctypes exporter), which must
         * not run with an exception set: a refusal's is kept aside. */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        t->dl->deleter(t->dl);
        if (PyErr_Occurred())
            PyErr_WriteUnraisable(NULL);
        PyErr_Restore(et, ev, tb);
    }
    t->dl = NULL;
    Py_CLEAR(t->obj);
}

int pyx_tensor_check_kind(const pyx_tensor *t)
{
#if PYX_HAVE_MEM
    if (t->kind == PYX_MEM_HOST)
        return 0;
    return xfer_mem_available((xfer_mem){.kind = (xfer_mem_kind)t->kind,
                                         .device = t->device});
#else
    return t->kind == PYX_MEM_HOST ? 0 : XFER_ERR_NOT_SUPPORTED;
#endif
}

/* ---------------------------------------------------------------------- */
/* xfer._DeviceView: device memory handed back by the binding               */
/* ---------------------------------------------------------------------- */

typedef struct pyx_devview {
    PyObject_HEAD
    void *ptr;
    size_t nbytes;
    int kind;
    int32_t device;
    bool readonly;
    PyObject *owner;   /* keeps the memory (an outcome's region, a test
                          allocation); NULL once invalid */
    PyObject *(*valid)(PyObject *owner); /* NULL: valid while owned;
                          else returns Py_True/Py_False (borrowed) */
} pyx_devview;

PyObject *pyx_devview_new(void *ptr, size_t nbytes, int kind, int32_t device,
                          bool readonly, PyObject *owner,
                          PyObject *(*valid)(PyObject *owner))
{
    pyx_devview *v = PyObject_New(pyx_devview, &pyx_devview_type);
    if (!v)
        return NULL;
    v->ptr = ptr;
    v->nbytes = nbytes;
    v->kind = kind;
    v->device = device;
    v->readonly = readonly;
    v->owner = owner;
    Py_XINCREF(owner);
    v->valid = valid;
    return (PyObject *)v;
}

void pyx_devview_invalidate(PyObject *obj)
{
    Py_CLEAR(((pyx_devview *)obj)->owner);
}

static bool devview_ok(pyx_devview *v)
{
    if (!v->owner || (v->valid && v->valid(v->owner) != Py_True)) {
        PyErr_SetString(PyExc_ValueError, "the memory was released");
        return false;
    }
    return true;
}

static void devview_dealloc(PyObject *obj)
{
    Py_XDECREF(((pyx_devview *)obj)->owner);
    PyObject_Free(obj);
}

static PyObject *devview_cai(PyObject *obj, void *unused)
{
    pyx_devview *v = (pyx_devview *)obj;
    if (!devview_ok(v))
        return NULL;
    return Py_BuildValue("{s:(n),s:s,s:(KO),s:O,s:i,s:O}", "shape",
                         (Py_ssize_t)v->nbytes, "typestr", "|u1", "data",
                         (unsigned long long)(uintptr_t)v->ptr,
                         v->readonly ? Py_True : Py_False, "strides",
                         Py_None, "version", 3, "stream", Py_None);
}

static PyObject *devview_ptr(PyObject *obj, void *unused)
{
    pyx_devview *v = (pyx_devview *)obj;
    if (!devview_ok(v))
        return NULL;
    return PyLong_FromUnsignedLongLong((uintptr_t)v->ptr);
}

static PyObject *devview_nbytes(PyObject *obj, void *unused)
{
    return PyLong_FromSize_t(((pyx_devview *)obj)->nbytes);
}

static PyObject *devview_device(PyObject *obj, void *unused)
{
    pyx_devview *v = (pyx_devview *)obj;
    if (v->kind == PYX_MEM_CUDA)
        return PyUnicode_FromFormat("cuda:%d", (int)v->device);
    return PyUnicode_FromString(pyx_mem_kind_name(v->kind));
}

static PyObject *devview_dlpack_device(PyObject *obj, PyObject *unused)
{
    pyx_devview *v = (pyx_devview *)obj;
    if (v->kind != PYX_MEM_CUDA) {
        PyErr_SetString(PyExc_BufferError, "DLPack has no device type for "
                        "test-device memory");
        return NULL;
    }
    return Py_BuildValue("(ii)", DL_CUDA, (int)v->device);
}

/* __dlpack__: a "dltensor" capsule of bytes over the view's CUDA memory,
 * holding the view's owner (the region stays given out) until the
 * consumer's deleter runs, or the capsule goes unused. */
typedef struct dl_export {
    dl_managed m;
    int64_t shape[1];
    PyObject *owner;
} dl_export;

static void dl_export_delete(dl_managed *m)
{
    dl_export *x = (dl_export *)m;
    PyGILState_STATE st = PyGILState_Ensure();
    Py_XDECREF(x->owner);
    PyGILState_Release(st);
    PyMem_RawFree(x);
}

static void dl_capsule_gone(PyObject *cap)
{
    /* renamed "used_dltensor" by a consumer that took it: its deleter */
    if (PyCapsule_IsValid(cap, "dltensor"))
        dl_export_delete(PyCapsule_GetPointer(cap, "dltensor"));
}

static PyObject *devview_dlpack(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"stream", "max_version", "dl_device", "copy",
                          NULL};
    PyObject *stream = NULL, *maxv = NULL, *dldev = NULL, *copy = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", kwl, &stream,
                                     &maxv, &dldev, &copy))
        return NULL;
    pyx_devview *v = (pyx_devview *)obj;
    if (!devview_ok(v))
        return NULL;
    if (v->kind != PYX_MEM_CUDA) {
        PyErr_SetString(PyExc_BufferError, "DLPack has no device type for "
                        "test-device memory");
        return NULL;
    }
    /* No stream to order against: the bytes were complete (the copy into
     * the pool ended) before the region was handed out. */
    dl_export *x = PyMem_RawCalloc(1, sizeof *x);
    if (!x)
        return PyErr_NoMemory();
    x->shape[0] = (int64_t)v->nbytes;
    x->m.dl_tensor = (dl_tensor){
        .data = v->ptr, .device = {DL_CUDA, v->device}, .ndim = 1,
        .dtype = {.code = 1 /* kDLUInt */, .bits = 8, .lanes = 1},
        .shape = x->shape};
    x->m.deleter = dl_export_delete;
    x->owner = v->owner;
    Py_INCREF(x->owner);
    PyObject *cap = PyCapsule_New(&x->m, "dltensor", dl_capsule_gone);
    if (!cap) {
        Py_DECREF(x->owner);
        PyMem_RawFree(x);
    }
    return cap;
}

/* Test-device memory through the test device's copy engine (never a
 * direct read: the pages are PROT_NONE). */
static PyObject *devview_read(PyObject *obj, PyObject *unused)
{
    pyx_devview *v = (pyx_devview *)obj;
    if (!devview_ok(v))
        return NULL;
#if PYX_HAVE_TESTDEV
    if (v->kind == PYX_MEM_TESTDEV) {
        PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)v->nbytes);
        if (!b)
            return NULL;
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = xfer_testdev_read(PyBytes_AS_STRING(b), v->ptr, v->nbytes);
        Py_END_ALLOW_THREADS
        if (rc) {
            Py_DECREF(b);
            return pyx_raise(rc);
        }
        return b;
    }
#endif
    return pyx_raise(XFER_ERR_NOT_SUPPORTED);
}

static PyObject *devview_write(PyObject *obj, PyObject *args)
{
    pyx_devview *v = (pyx_devview *)obj;
    Py_buffer src;
    Py_ssize_t off = 0;
    if (!PyArg_ParseTuple(args, "y*|n", &src, &off))
        return NULL;
    PyObject *ret = NULL;
    if (!devview_ok(v))
        goto out;
    if (v->readonly) {
        PyErr_SetString(PyExc_BufferError, "read-only memory");
        goto out;
    }
    if (off < 0 || (size_t)off > v->nbytes ||
        (size_t)src.len > v->nbytes - (size_t)off) {
        PyErr_SetString(PyExc_ValueError, "outside the memory");
        goto out;
    }
#if PYX_HAVE_TESTDEV
    if (v->kind == PYX_MEM_TESTDEV) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = xfer_testdev_write((uint8_t *)v->ptr + off, src.buf,
                                (size_t)src.len);
        Py_END_ALLOW_THREADS
        if (rc) {
            pyx_raise(rc);
            goto out;
        }
        ret = Py_None;
        Py_INCREF(ret);
        goto out;
    }
#endif
    pyx_raise(XFER_ERR_NOT_SUPPORTED);
out:
    PyBuffer_Release(&src);
    return ret;
}

static PyObject *devview_repr(PyObject *obj)
{
    pyx_devview *v = (pyx_devview *)obj;
    PyObject *dev = devview_device(obj, NULL);
    PyObject *r = PyUnicode_FromFormat("<xfer.DeviceView %zu bytes at %p on "
                                       "%S%s>", v->nbytes, v->ptr, dev,
                                       v->owner ? "" : " (released)");
    Py_XDECREF(dev);
    return r;
}

static PyGetSetDef devview_getset[] = {
    {"__cuda_array_interface__", devview_cai, NULL,
     "version 3: bytes (|u1), contiguous; valid until released", NULL},
    {"ptr", devview_ptr, NULL, "the device pointer", NULL},
    {"nbytes", devview_nbytes, NULL, "its length in bytes", NULL},
    {"device", devview_device, NULL, "'cuda:N' or 'testdev'", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef devview_methods[] = {
    {"__dlpack_device__", devview_dlpack_device, METH_NOARGS,
     "(kDLCUDA, ordinal)"},
    {"__dlpack__", (PyCFunction)(void (*)(void))devview_dlpack,
     METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, ...) -> a 'dltensor' capsule of bytes "
     "(CUDA memory only); like the array interface, valid until the "
     "region is released"},
    {"read", devview_read, METH_NOARGS,
     "read($self, /)\n--\n\n"
     "read() -> bytes: test-device memory, through its copy engine"},
    {"write", devview_write, METH_VARARGS,
     "write($self, data, offset=0, /)\n--\n\n"
     "write(data, offset=0): test-device memory, through its copy engine"},
    {NULL, NULL, 0, NULL}};

PyTypeObject pyx_devview_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xfer.DeviceView",
    .tp_basicsize = sizeof(pyx_devview),
    .tp_dealloc = devview_dealloc,
    .tp_repr = devview_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Device memory (CUDA or the test device) the binding hands "
              "back: __cuda_array_interface__ (v3), valid until released.",
    .tp_getset = devview_getset,
    .tp_methods = devview_methods,
};

/* ---------------------------------------------------------------------- */
/* Test helpers: test-device memory as an array-interface object           */
/* ---------------------------------------------------------------------- */

#if PYX_HAVE_TESTDEV
/* The owner of a test allocation: freed with its last reference. */
typedef struct pyx_tdalloc {
    PyObject_HEAD
    void *p;
} pyx_tdalloc;

static void tdalloc_dealloc(PyObject *obj)
{
    pyx_tdalloc *a = (pyx_tdalloc *)obj;
    if (a->p)
        xfer_testdev_free(a->p);
    PyObject_Free(obj);
}

static PyTypeObject pyx_tdalloc_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xfer._xfer._TestdevAlloc",
    .tp_basicsize = sizeof(pyx_tdalloc),
    .tp_dealloc = tdalloc_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};
#endif

static PyObject *mod_testdev_alloc(PyObject *m, PyObject *arg)
{
#if PYX_HAVE_TESTDEV
    Py_ssize_t n = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n <= 0) {
        PyErr_SetString(PyExc_ValueError, "at least one byte");
        return NULL;
    }
    pyx_tdalloc *a = PyObject_New(pyx_tdalloc, &pyx_tdalloc_type);
    if (!a)
        return NULL;
    a->p = NULL;
    int rc = xfer_testdev_alloc((size_t)n, &a->p);
    if (rc) {
        Py_DECREF(a);
        return pyx_raise(rc);
    }
    PyObject *v = pyx_devview_new(a->p, (size_t)n, PYX_MEM_TESTDEV, 0, false,
                                  (PyObject *)a, NULL);
    Py_DECREF(a);
    return v;
#else
    (void)arg;
    return pyx_raise(XFER_ERR_NOT_SUPPORTED);
#endif
}

static PyObject *mod_mem_of(PyObject *m, PyObject *arg)
{
    unsigned long long p = PyLong_AsUnsignedLongLong(arg);
    if (p == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    int32_t dev;
    int kind = pyx_mem_kind_of((const void *)(uintptr_t)p, &dev);
    if (kind == PYX_MEM_CUDA)
        return PyUnicode_FromFormat("cuda:%d", (int)dev);
    return PyUnicode_FromString(pyx_mem_kind_name(kind));
}

/* _memory(obj, writable=False) -> (pointer, nbytes, device, form): what
 * the binding would register for obj, for tests and diagnostics. */
static PyObject *mod_memory(PyObject *m, PyObject *args)
{
    PyObject *obj;
    int writable = 0;
    if (!PyArg_ParseTuple(args, "O|p", &obj, &writable))
        return NULL;
    pyx_tensor t;
    if (pyx_tensor_get(obj, writable, &t) < 0)
        return NULL;
    PyObject *dev = t.kind == PYX_MEM_CUDA
                        ? PyUnicode_FromFormat("cuda:%d", (int)t.device)
                        : PyUnicode_FromString(pyx_mem_kind_name(t.kind));
    PyObject *r = dev ? Py_BuildValue("(KnNs)",
                                      (unsigned long long)(uintptr_t)t.ptr,
                                      (Py_ssize_t)t.nbytes, dev, t.form)
                      : NULL;
    pyx_tensor_release(&t);
    return r;
}

/* _device_view(owner, pointer, nbytes, device) -> a DeviceView over
 * memory owner keeps (tests of the view itself). */
static PyObject *mod_device_view(PyObject *m, PyObject *args)
{
    PyObject *owner, *dev;
    unsigned long long ptr, n;
    if (!PyArg_ParseTuple(args, "OKKO", &owner, &ptr, &n, &dev))
        return NULL;
    int kind;
    int32_t d;
    if (parse_device(dev, &kind, &d) < 0)
        return NULL;
    return pyx_devview_new((void *)(uintptr_t)ptr, (size_t)n, kind, d, false,
                           owner, NULL);
}

/* _mem_available(device) -> bool: can memory of that kind be registered
 * in this process (xfer_mem_available)? */
static PyObject *mod_mem_available(PyObject *m, PyObject *dev)
{
    pyx_tensor t = {0};
    if (parse_device(dev, &t.kind, &t.device) < 0)
        return NULL;
    return PyBool_FromLong(pyx_tensor_check_kind(&t) == 0);
}

PyMethodDef pyx_tensor_methods[] = {
    {"_mem_available", mod_mem_available, METH_O,
     "_mem_available(device) -> True when memory of that kind registers "
     "here (xfer_mem_available)"},
    {"_device_view", mod_device_view, METH_VARARGS,
     "_device_view(owner, pointer, nbytes, device) -> DeviceView (tests)"},
    {"_testdev_alloc", mod_testdev_alloc, METH_O,
     "_testdev_alloc(n) -> DeviceView over n bytes of test-device memory "
     "(tests only; NotSupportedError in a build without the test device)"},
    {"_mem_of", mod_mem_of, METH_O,
     "_mem_of(pointer) -> 'host', 'cuda:N' or 'testdev' (xfer_mem_of)"},
    {"_memory", mod_memory, METH_VARARGS,
     "_memory(obj, writable=False) -> (pointer, nbytes, device, form)"},
    {NULL, NULL, 0, NULL}};

int pyx_tensor_init(PyObject *m)
{
    if (PyType_Ready(&pyx_devview_type) < 0)
        return -1;
#if PYX_HAVE_TESTDEV
    if (PyType_Ready(&pyx_tdalloc_type) < 0)
        return -1;
#endif
    Py_INCREF(&pyx_devview_type);
    if (PyModule_AddObject(m, "DeviceView", (PyObject *)&pyx_devview_type) <
        0) {
        Py_DECREF(&pyx_devview_type);
        return -1;
    }
    return PyModule_AddIntConstant(m, "HAVE_TESTDEV", PYX_HAVE_TESTDEV);
}
