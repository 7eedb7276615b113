/*
 * python/ext/module.c - the extension module xfer._xfer: its types, its
 * constants, and the error space of include/xfer/errors.h as Python sees
 * it.
 *
 * The exception classes and the Transfer future class are written in
 * Python (python/xfer/__init__.py) and handed to this module by
 * _setup(); until then an error raises RuntimeError.  Error codes come
 * from XFER_ERRNO_MAP, so the Python side never keeps a list of its own.
 */
#include "pyx.h"

#include <math.h>

static PyObject *error_base;     /* xfer.Error */
static PyObject *error_classes;  /* dict: code -> subclass of xfer.Error */
static PyObject *transfer_class; /* xfer.Transfer (an asyncio.Future) */
static PyObject *get_running_loop; /* asyncio.get_running_loop */

/* ---------------------------------------------------------------------- */
/* Shared helpers                                                          */
/* ---------------------------------------------------------------------- */

static PyObject *class_of(int code)
{
    PyObject *key = PyLong_FromLong(code);
    PyObject *cls = key && error_classes
                        ? PyDict_GetItemWithError(error_classes, key)
                        : NULL;
    Py_XDECREF(key);
    if (!cls && !PyErr_Occurred())
        cls = error_base;
    return cls;
}

PyObject *pyx_raise(int code)
{
    PyObject *cls = class_of(code);
    if (!cls) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_RuntimeError, "xfer error %d: %s", code,
                         xfer_strerror(code));
        return NULL;
    }
    PyObject *exc = PyObject_CallFunction(cls, "i", code);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

PyObject *pyx_error_for(PyObject *result, int code)
{
    PyObject *cls = class_of(code);
    if (!cls) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "xfer._setup() not called");
        return NULL;
    }
    return PyObject_CallOneArg(cls, result);
}

PyObject *pyx_running_loop(void)
{
    return PyObject_CallNoArgs(get_running_loop);
}

PyObject *pyx_new_transfer(void)
{
    if (!transfer_class) {
        PyErr_SetString(PyExc_RuntimeError, "xfer._setup() not called");
        return NULL;
    }
    return PyObject_CallNoArgs(transfer_class);
}

int pyx_ns_of(PyObject *secs, uint64_t *ns)
{
    if (!secs || secs == Py_None) {
        *ns = 0;
        return 0;
    }
    double s = PyFloat_AsDouble(secs);
    if (s == -1.0 && PyErr_Occurred())
        return -1;
    if (!(s >= 0) || s > 1e9 || isnan(s)) {
        PyErr_SetString(PyExc_ValueError,
                        "a duration must be between 0 and 1e9 seconds");
        return -1;
    }
    *ns = (uint64_t)(s * 1e9 + 0.5);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Module functions                                                        */
/* ---------------------------------------------------------------------- */

static PyObject *mod_setup(PyObject *mod, PyObject *args)
{
    PyObject *transfer, *base, *classes;
    if (!PyArg_ParseTuple(args, "OOO!:_setup", &transfer, &base, &PyDict_Type,
                          &classes))
        return NULL;
    Py_INCREF(transfer);
    Py_INCREF(base);
    Py_INCREF(classes);
    Py_XSETREF(transfer_class, transfer);
    Py_XSETREF(error_base, base);
    Py_XSETREF(error_classes, classes);
    Py_RETURN_NONE;
}

static PyObject *mod_reap(PyObject *mod, PyObject *block)
{
    int b = PyObject_IsTrue(block);
    if (b < 0 || pyx_engine_reap(b != 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* [(code, name, message)] for every error but OK, from XFER_ERRNO_MAP. */
static PyObject *mod_error_codes(PyObject *mod, PyObject *unused)
{
    PyObject *l = PyList_New(0);
#define PYX_ERR_ITEM_(name, value, msg)                                       \
    if (l && (value) != 0) {                                                  \
        PyObject *it = Py_BuildValue("(iss)", (value), #name, (msg));         \
        if (!it || PyList_Append(l, it) < 0)                                  \
            Py_CLEAR(l);                                                      \
        Py_XDECREF(it);                                                       \
    }
    XFER_ERRNO_MAP(PYX_ERR_ITEM_)
#undef PYX_ERR_ITEM_
    return l;
}

static PyObject *mod_strerror(PyObject *mod, PyObject *arg)
{
    int code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(xfer_strerror(code));
}

static PyObject *mod_err_name(PyObject *mod, PyObject *arg)
{
    int code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(xfer_err_name(code));
}

static PyObject *mod_phase_name(PyObject *mod, PyObject *arg)
{
    long p = PyLong_AsLong(arg);
    if (p == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(p < 0 ? "?" : pyx_phase_name((unsigned)p));
}

static PyObject *mod_state_name(PyObject *mod, PyObject *arg)
{
    long s = PyLong_AsLong(arg);
    if (s == -1 && PyErr_Occurred())
        return NULL;
    const char *n = s >= 0 && s < XFER_TRANSFER_STATE_COUNT_
                        ? xfer_fsm_state_name(XFER_MACHINE_TRANSFER,
                                              (unsigned)s)
                        : "?";
    return PyUnicode_FromString(n ? n : "?");
}

/* fault_parse(text) -> (kind, op, shard, id, prob_ppm, count, delay_ns,
 * error): xfer_fault_rule_parse's rule (xferd --fault's form). */
static PyObject *mod_fault_parse(PyObject *mod, PyObject *arg)
{
    const char *text = PyUnicode_AsUTF8(arg);
    if (!text)
        return NULL;
    xfer_fault_rule r;
    const char *bad = NULL;
    if (xfer_fault_rule_parse(text, &r, &bad) != 0) {
        PyErr_Format(PyExc_ValueError, "bad fault rule '%s' (at '%s')", text,
                     bad ? bad : text);
        return NULL;
    }
    return Py_BuildValue("(iiiKIIKi)", (int)r.kind,
                         r.op == XFER_FAULT_ANY_OP ? -1 : (int)r.op,
                         (int)r.shard, (unsigned long long)r.id, r.prob_ppm,
                         r.count, (unsigned long long)r.delay_ns,
                         (int)r.error);
}

static PyMethodDef mod_methods[] = {
    {"fault_parse", mod_fault_parse, METH_O,
     "fault_parse($module, text, /)\n--\n\n"
     "fault_parse(text) -> (kind, op (-1: any), shard (-1: any), id, "
     "prob_ppm, count, delay_ns, error)"},
    {"_setup", mod_setup, METH_VARARGS,
     "_setup(Transfer, Error, {code: class}): the Python half's classes."},
    {"_reap", mod_reap, METH_O,
     "_reap(block): finish the Engines dropped while their loop ran, once "
     "it stopped (block: wait for it; atexit)."},
    {"error_codes", mod_error_codes, METH_NOARGS,
     "error_codes($module, /)\n--\n\n"
     "error_codes() -> [(code, name, message)] for every xfer error."},
    {"strerror", mod_strerror, METH_O,
     "strerror($module, code, /)\n--\n\nstrerror(code) -> message"},
    {"err_name", mod_err_name, METH_O,
     "err_name($module, code, /)\n--\n\nerr_name(code) -> 'BUSY', ..."},
    {"phase_name", mod_phase_name, METH_O,
     "phase_name($module, phase, /)\n--\n\nphase_name(phase) -> word"},
    {"state_name", mod_state_name, METH_O,
     "state_name($module, state, /)\n--\n\n"
     "state_name(state) -> the transfer machine's state name"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "xfer._xfer",
    .m_doc = "The C half of the xfer binding (use the package xfer).",
    .m_size = -1,
    .m_methods = mod_methods,
};

static int add_int(PyObject *m, const char *name, long v)
{
    return PyModule_AddIntConstant(m, name, v);
}

static int add_constants(PyObject *m)
{
    int rc = 0;
    rc |= add_int(m, "PHASE_NONE", XFER_PHASE_NONE);
    rc |= add_int(m, "PHASE_RESERVING", XFER_PHASE_RESERVING);
    rc |= add_int(m, "PHASE_WRITING", XFER_PHASE_WRITING);
    rc |= add_int(m, "PHASE_COMPLETING", XFER_PHASE_COMPLETING);
    rc |= add_int(m, "PHASE_CANCELLING", XFER_PHASE_CANCELLING);
    rc |= add_int(m, "PHASE_SUBMIT", XFER_PHASE_SUBMIT);
    rc |= add_int(m, "FAULT_FAIL", XFER_FAULT_FAIL);
    rc |= add_int(m, "FAULT_APPLIED_LOST", XFER_FAULT_APPLIED_LOST);
    rc |= add_int(m, "FAULT_DROP", XFER_FAULT_DROP);
    rc |= add_int(m, "FAULT_DELAY", XFER_FAULT_DELAY);
    rc |= add_int(m, "OP_RESERVE", XFER_OP_RESERVE);
    rc |= add_int(m, "OP_WRITE", XFER_OP_WRITE);
    rc |= add_int(m, "OP_COMMIT", XFER_OP_COMMIT);
    rc |= add_int(m, "OP_CANCEL", XFER_OP_CANCEL);
    rc |= add_int(m, "OP_EAGER", XFER_OP_EAGER);
    rc |= add_int(m, "OP_ANY", XFER_FAULT_ANY_OP);
    rc |= add_int(m, "MAX_SHARDS", XFER_MAX_SHARDS);
    rc |= add_int(m, "NOTIFY_FD", PYX_NOTIFY_FD);
    rc |= add_int(m, "NOTIFY_CALL_SOON", PYX_NOTIFY_CALL_SOON);
    return rc;
}

static int add_type(PyObject *m, PyTypeObject *t, const char *name)
{
    if (PyType_Ready(t) < 0)
        return -1;
    if (!name)
        return 0;
    Py_INCREF(t);
    if (PyModule_AddObject(m, name, (PyObject *)t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__xfer(void);

PyMODINIT_FUNC PyInit__xfer(void)
{
    PyObject *asyncio = PyImport_ImportModule("asyncio");
    if (!asyncio)
        return NULL;
    get_running_loop = PyObject_GetAttrString(asyncio, "get_running_loop");
    Py_DECREF(asyncio);
    if (!get_running_loop)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (add_type(m, &pyx_result_type, "Result") < 0 ||
        add_type(m, &pyx_channel_type, NULL) < 0 ||
        add_type(m, &pyx_pool_type, "Pool") < 0 ||
        add_type(m, &pyx_loop_type, "Loop") < 0 ||
        add_type(m, &pyx_tcp_type, "Tcp") < 0 ||
        add_type(m, &pyx_engine_type, "Engine") < 0 ||
        add_type(m, &pyx_server_type, "Server") < 0 ||
        add_type(m, &pyx_consumer_type, "Consumer") < 0 ||
        add_type(m, &pyx_available_type, "Available") < 0 ||
        add_type(m, &pyx_unavailable_type, "Unavailable") < 0 ||
        add_constants(m) || pyx_tensor_init(m) < 0 ||
        PyModule_AddFunctions(m, pyx_tensor_methods) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
