/*
 * python/ext/result.c - xfer.Result: one transfer's outcome, as the
 * engine reported it (xfer_result in include/xfer/core.h), read-only.
 *
 * A result is made on the thread that delivers it, with the GIL, from the
 * copy the loop thread left in the ticket; it owns no engine state.
 */
#include "pyx.h"

#include <stdio.h>

#include <structmember.h>

typedef struct pyx_result {
    PyObject_HEAD
    unsigned long long id, failed_shards, rollback_failed, user_data;
    unsigned int attempt;
    int status;
    unsigned char phase;
    char consumer_may_hold;
    unsigned short first_failed_shard;
} pyx_result;

const char *pyx_phase_name(unsigned phase)
{
    static const char *const names[] = {"none", "reserving", "writing",
                                        "completing", "cancelling",
                                        "submit"};
    return phase < sizeof names / sizeof names[0] ? names[phase] : "?";
}

PyObject *pyx_result_new(const xfer_result *r)
{
    pyx_result *o = PyObject_New(pyx_result, &pyx_result_type);
    if (!o)
        return NULL;
    o->id = r->id;
    o->attempt = r->attempt;
    o->status = r->status;
    o->phase = r->phase;
    o->consumer_may_hold = r->consumer_may_hold;
    o->first_failed_shard = r->first_failed_shard;
    o->failed_shards = r->failed_shards;
    o->rollback_failed = r->rollback_failed;
    o->user_data = r->user_data;
    return (PyObject *)o;
}

static void result_dealloc(PyObject *self)
{
    PyObject_Free(self);
}

PyObject *pyx_shard_tuple(uint64_t mask)
{
    PyObject *t = PyTuple_New(__builtin_popcountll(mask));
    Py_ssize_t i = 0;
    for (unsigned k = 0; t && k < 64; k++) {
        if (!(mask >> k & 1))
            continue;
        PyObject *v = PyLong_FromUnsignedLong(k);
        if (!v) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i++, v);
    }
    return t;
}

static PyObject *get_ok(PyObject *self, void *unused)
{
    return PyBool_FromLong(((pyx_result *)self)->status == 0);
}

static PyObject *get_phase_name(PyObject *self, void *unused)
{
    return PyUnicode_FromString(pyx_phase_name(((pyx_result *)self)->phase));
}

static PyObject *get_error_name(PyObject *self, void *unused)
{
    return PyUnicode_FromString(xfer_err_name(((pyx_result *)self)->status));
}

static PyObject *get_shards(PyObject *self, void *unused)
{
    return pyx_shard_tuple(((pyx_result *)self)->failed_shards);
}

static PyObject *get_rollback_shards(PyObject *self, void *unused)
{
    return pyx_shard_tuple(((pyx_result *)self)->rollback_failed);
}

static PyObject *get_first(PyObject *self, void *unused)
{
    pyx_result *r = (pyx_result *)self;
    if (r->first_failed_shard == XFER_SHARD_NONE)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(r->first_failed_shard);
}

static PyObject *get_may_hold(PyObject *self, void *unused)
{
    return PyBool_FromLong(((pyx_result *)self)->consumer_may_hold);
}

static PyObject *result_repr(PyObject *self)
{
    pyx_result *r = (pyx_result *)self;
    if (r->status == 0)
        return PyUnicode_FromFormat("<xfer.Result id=%llu attempt=%u ok>",
                                    r->id, r->attempt);
    char mask[24];
    snprintf(mask, sizeof mask, "%#llx", r->failed_shards);
    return PyUnicode_FromFormat(
        "<xfer.Result id=%llu attempt=%u %s in %s, failed_shards=%s%s>",
        r->id, r->attempt, xfer_err_name(r->status),
        pyx_phase_name(r->phase), mask,
        r->consumer_may_hold ? ", consumer may hold" : "");
}

#define RO(name, type, doc)                                                   \
    {#name, type, offsetof(pyx_result, name), READONLY, doc}

static PyMemberDef result_members[] = {
    RO(id, T_ULONGLONG, "the transfer id"),
    RO(attempt, T_UINT, "the attempt number (0: refused at submit)"),
    RO(status, T_INT, "0, or the xfer error code that ended it"),
    RO(phase, T_UBYTE, "the phase it failed in (xfer.PHASE_*)"),
    RO(failed_shards, T_ULONGLONG,
       "bit k: shard k failed or held the transfer up"),
    RO(rollback_failed, T_ULONGLONG, "bit k: shard k's cancel never succeeded"),
    RO(user_data, T_ULONGLONG, "echoed from the submit"),
    {NULL, 0, 0, 0, NULL}};

static PyGetSetDef result_getset[] = {
    {"ok", get_ok, NULL, "True when the transfer succeeded", NULL},
    {"phase_name", get_phase_name, NULL, "the phase as a word", NULL},
    {"error_name", get_error_name, NULL, "the status as its enum name", NULL},
    {"shards", get_shards, NULL, "failed_shards as a tuple of indices", NULL},
    {"rollback_shards", get_rollback_shards, NULL,
     "rollback_failed as a tuple of indices", NULL},
    {"first_failed_shard", get_first, NULL,
     "the shard whose failure set the status, or None", NULL},
    {"consumer_may_hold", get_may_hold, NULL,
     "a commit may have been applied: the consumer may hold the data", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pyx_result_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xfer.Result",
    .tp_basicsize = sizeof(pyx_result),
    .tp_dealloc = result_dealloc,
    .tp_repr = result_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The outcome of one transfer (xfer_result), read-only.",
    .tp_members = result_members,
    .tp_getset = result_getset,
};
