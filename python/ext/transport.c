/*
 * python/ext/transport.c - xfer.Loop (in-process shards with fault rules)
 * and xfer.Tcp (shards served by xferd), the transports an Engine carries
 * its consumer groups over.
 *
 * A transport object is a config until an Engine attaches it; then it
 * names its C transport, which lives on the engine's loop, and every
 * method runs there (pyx_core_call).  The engine frees the C transport
 * after itself (core.c), so a transport object that outlives its engine
 * raises ShutdownError.
 *
 * The loop transport's shards have no consumer of their own; with
 * consume=True (the default) a consumer on the loop takes every ready
 * transfer, records each shard's length and CRC-32 (the last 4096
 * (id, shard) pairs, for tests: Loop.received), and releases it, as
 * `xferd --consume` does.
 */
#include "pyx.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#define RECV_RING 4096
#define MAX_RULES 64

typedef struct recv_rec {
    uint64_t id;
    uint16_t shard;
    uint32_t len, crc;
} recv_rec;

/* The C side of a Loop: the transport and its consumer (loop thread). */
typedef struct loopside {
    xfer_loop *l;
    xfer_engine *e;
    bool consume;
    recv_rec ring[RECV_RING];
    uint32_t next;
    uint64_t taken, take_failed;
} loopside;

typedef struct pyx_loop {
    PyObject_HEAD
    uint16_t nshards;
    uint64_t pool_bytes, lease_ns, seed, write_ns;
    uint32_t max_resv;
    bool consume;
    xfer_fault_rule rules[MAX_RULES]; /* added before the attach */
    uint32_t nrules;
    pyx_core *core;  /* a reference once attached */
    loopside *side;
    uint32_t group;
} pyx_loop;

typedef struct pyx_tcp {
    PyObject_HEAD
    char **addrs;
    uint16_t nshards;
    uint32_t wire_group;
    uint64_t connect_ns;
    pyx_auth auth;
    pyx_core *core;
    xfer_tcp *t;
    uint32_t group;
} pyx_tcp;

/* ---------------------------------------------------------------------- */
/* The loop transport's consumer (loop thread)                             */
/* ---------------------------------------------------------------------- */

static uint32_t crc32_of(const uint8_t *p, uint32_t n)
{
    static uint32_t table[256];
    if (!table[1]) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    }
    uint32_t c = 0xFFFFFFFFu;
    for (uint32_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static void on_shard_event(void *ud, const xfer_shard_event *ev)
{
    loopside *s = ud;
    if (ev->kind != XFER_SHARD_EV_READY || !s->consume || !s->e)
        return;
    xfer_shard *sh = xfer_loop_shard(s->l, ev->shard);
    uint64_t now = xfer_engine_now(s->e);
    const uint8_t *data;
    uint32_t len;
    if (xfer_shard_take(sh, now, ev->id, ev->resv_id, &data, &len) != 0) {
        s->take_failed++;
        return;
    }
    s->ring[s->next++ % RECV_RING] = (recv_rec){
        .id = ev->id, .shard = ev->shard, .len = len,
        .crc = crc32_of(data, len)};
    s->taken++;
    xfer_shard_release(sh, now, ev->id, ev->resv_id);
}

static void loopside_del(void *obj)
{
    loopside *s = obj;
    xfer_loop_del(s->l);
    free(s);
}

static void tcp_del(void *obj)
{
    xfer_tcp_del(obj);
}

/* ---------------------------------------------------------------------- */
/* Attaching                                                               */
/* ---------------------------------------------------------------------- */

typedef struct attach_args {
    bool is_loop;
    void *obj; /* the pyx_loop or pyx_tcp; only its C fields are read */
    uint32_t group;
} attach_args;

static int add_group(pyx_core *c, xfer_transport tr, void *obj,
                     void (*del)(void *), uint16_t nshards, uint32_t *group)
{
    int rc = xfer_engine_add_group(c->e, tr, group);
    if (rc) {
        del(obj);
        return rc;
    }
    c->tps[c->ngroups] = (pyx_tp_slot){.obj = obj, .del = del};
    c->nshards[*group] = nshards;
    c->ngroups++;
    return 0;
}

static int attach_loop(pyx_core *c, pyx_loop *lo, uint32_t *group)
{
    loopside *s = calloc(1, sizeof *s);
    if (!s)
        return XFER_ERR_NOMEM;
    s->consume = lo->consume;
    xfer_loop_config cfg;
    pyx_config_loop(lo->nshards, lo->pool_bytes, lo->max_resv, lo->lease_ns,
                    lo->seed, lo->write_ns, on_shard_event, s, &cfg);
    int rc = xfer_loop_new(xfer_engine_base(c->e), &cfg, &s->l);
    for (uint32_t i = 0; rc == 0 && i < lo->nrules; i++)
        rc = xfer_loop_add_rule(s->l, &lo->rules[i]);
    if (rc) {
        xfer_loop_del(s->l);
        free(s);
        return rc;
    }
    s->e = c->e;
    rc = add_group(c, xfer_loop_transport(s->l), s, loopside_del,
                   lo->nshards, group);
    if (rc == 0)
        lo->side = s;
    return rc;
}

static int attach_tcp(pyx_core *c, pyx_tcp *tc, uint32_t *group)
{
    xfer_tcp_config cfg;
    pyx_config_tcp(tc->nshards, (const char *const *)tc->addrs,
                   tc->wire_group, tc->connect_ns, &tc->auth, &cfg);
    xfer_tcp *t;
    int rc = xfer_tcp_new(xfer_engine_base(c->e), &cfg, &t);
    if (rc)
        return rc;
    rc = add_group(c, xfer_tcp_transport(t), t, tcp_del, tc->nshards, group);
    if (rc == 0)
        tc->t = t;
    return rc;
}

static int attach_fn(pyx_core *c, void *arg)
{
    attach_args *a = arg;
    if (c->ngroups == PYX_MAX_GROUPS)
        return XFER_ERR_BUSY;
    if (a->is_loop)
        return attach_loop(c, a->obj, &a->group);
    return attach_tcp(c, a->obj, &a->group);
}

bool pyx_transport_check(PyObject *tp)
{
    return PyObject_TypeCheck(tp, &pyx_loop_type) ||
           PyObject_TypeCheck(tp, &pyx_tcp_type);
}

/* The loop function reads only C fields of the transport object, which
 * nothing else writes while the caller waits. */
int pyx_transport_attach(PyObject *tp, pyx_core *c, uint32_t *group,
                         bool on_loop)
{
    bool is_loop = PyObject_TypeCheck(tp, &pyx_loop_type);
    pyx_core **owner = is_loop ? &((pyx_loop *)tp)->core
                               : &((pyx_tcp *)tp)->core;
    if (*owner) {
        PyErr_SetString(PyExc_ValueError,
                        "this transport is attached to an engine already");
        return -1;
    }
    attach_args a = {.is_loop = is_loop, .obj = tp};
    int rc = on_loop ? pyx_core_call(c, attach_fn, &a) : attach_fn(c, &a);
    if (rc) {
        pyx_raise(rc);
        return -1;
    }
    *owner = c;
    pyx_core_ref(c);
    if (is_loop)
        ((pyx_loop *)tp)->group = a.group;
    else
        ((pyx_tcp *)tp)->group = a.group;
    *group = a.group;
    return 0;
}

/* An attached transport whose engine still runs, or an exception. */
static int live(pyx_core *c)
{
    if (!c) {
        PyErr_SetString(PyExc_ValueError,
                        "not attached to an engine yet (Engine(transport))");
        return -1;
    }
    if (pyx_core_state(c) != PYX_OPEN) {
        pyx_raise(XFER_ERR_SHUTDOWN);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* xfer.Loop                                                               */
/* ---------------------------------------------------------------------- */

static int loop_init(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"nshards", "pool_bytes", "max_reservations",
                          "lease_ttl", "seed", "write_time", "consume",
                          NULL};
    pyx_loop *lo = (pyx_loop *)self;
    int nshards;
    unsigned long long pool = 16u << 20, seed = 0;
    unsigned int max_resv = 0;
    PyObject *lease = NULL, *write = NULL;
    int consume = 1;
    if (lo->core) {
        PyErr_SetString(PyExc_ValueError, "attached already");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|$KIOKOp:Loop", kwl,
                                     &nshards, &pool, &max_resv, &lease,
                                     &seed, &write, &consume))
        return -1;
    if (nshards < 1 || nshards > XFER_MAX_SHARDS || pool == 0) {
        PyErr_Format(PyExc_ValueError, "nshards must be 1..%d and pool_bytes "
                     "at least 1", XFER_MAX_SHARDS);
        return -1;
    }
    if (pyx_ns_of(lease, &lo->lease_ns) || pyx_ns_of(write, &lo->write_ns))
        return -1;
    lo->nshards = (uint16_t)nshards;
    lo->pool_bytes = pool;
    lo->max_resv = max_resv;
    lo->seed = seed;
    lo->consume = consume;
    lo->nrules = 0;
    return 0;
}

typedef struct rule_args {
    loopside *s;
    xfer_fault_rule rule;
    uint16_t shard;
    bool down;
} rule_args;

static int add_rule_fn(pyx_core *c, void *arg)
{
    rule_args *a = arg;
    return xfer_loop_add_rule(a->s->l, &a->rule);
}

int pyx_fault_rule_of(PyObject *args, PyObject *kw, int nshards,
                      xfer_fault_rule *rule)
{
    static char *kwl[] = {"kind", "op", "shard", "id", "prob", "count",
                          "delay", "error", NULL};
    int kind, op = XFER_FAULT_ANY_OP, shard = XFER_FAULT_ANY_SHARD, err = 0;
    unsigned long long id = 0;
    double prob = 0;
    unsigned int count = 0;
    PyObject *delay = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|$iiKdIOi:add_fault", kwl,
                                     &kind, &op, &shard, &id, &prob, &count,
                                     &delay, &err))
        return -1;
    if (kind < 0 || kind >= XFER_FAULT_COUNT_ ||
        (op != XFER_FAULT_ANY_OP && (op < 0 || op >= XFER_OP_COUNT_)) ||
        shard < -1 || shard >= nshards || !(prob >= 0 && prob <= 1) ||
        err > 0) {
        PyErr_SetString(PyExc_ValueError, "bad fault rule");
        return -1;
    }
    memset(rule, 0, sizeof *rule);
    if (pyx_ns_of(delay, &rule->delay_ns))
        return -1;
    rule->kind = (uint8_t)kind;
    rule->op = (uint8_t)op;
    rule->shard = (int16_t)shard;
    rule->id = id;
    rule->prob_ppm = (uint32_t)(prob * 1e6 + 0.5);
    if (prob > 0 && rule->prob_ppm == 0)
        rule->prob_ppm = 1; /* 0 would mean "always" */
    rule->count = count;
    rule->error = err;
    return 0;
}

static PyObject *loop_add_fault(PyObject *self, PyObject *args, PyObject *kw)
{
    pyx_loop *lo = (pyx_loop *)self;
    rule_args a = {.s = lo->side};
    if (pyx_fault_rule_of(args, kw, lo->nshards, &a.rule) < 0)
        return NULL;
    if (!lo->core) {
        if (lo->nrules == MAX_RULES)
            return pyx_raise(XFER_ERR_BUSY);
        lo->rules[lo->nrules++] = a.rule;
        Py_RETURN_NONE;
    }
    if (live(lo->core))
        return NULL;
    int rc = pyx_core_call(lo->core, add_rule_fn, &a);
    return rc ? pyx_raise(rc) : (Py_INCREF(Py_None), Py_None);
}

static int clear_fn(pyx_core *c, void *arg)
{
    xfer_loop_clear_rules(((rule_args *)arg)->s->l);
    return 0;
}

static PyObject *loop_clear_faults(PyObject *self, PyObject *unused)
{
    pyx_loop *lo = (pyx_loop *)self;
    if (!lo->core) {
        lo->nrules = 0;
        Py_RETURN_NONE;
    }
    if (live(lo->core))
        return NULL;
    rule_args a = {.s = lo->side};
    int rc = pyx_core_call(lo->core, clear_fn, &a);
    return rc ? pyx_raise(rc) : (Py_INCREF(Py_None), Py_None);
}

static int down_fn(pyx_core *c, void *arg)
{
    rule_args *a = arg;
    xfer_loop_set_down(a->s->l, a->shard, a->down);
    return 0;
}

static PyObject *loop_set_down(PyObject *self, PyObject *args)
{
    pyx_loop *lo = (pyx_loop *)self;
    int shard, down = 1;
    if (!PyArg_ParseTuple(args, "i|p:set_down", &shard, &down))
        return NULL;
    if (live(lo->core))
        return NULL;
    if (shard < 0 || shard >= lo->nshards) {
        PyErr_SetString(PyExc_ValueError, "no such shard");
        return NULL;
    }
    rule_args a = {.s = lo->side, .shard = (uint16_t)shard, .down = down};
    int rc = pyx_core_call(lo->core, down_fn, &a);
    return rc ? pyx_raise(rc) : (Py_INCREF(Py_None), Py_None);
}

typedef struct loop_snap {
    loopside *s;
    uint16_t nshards;
    xfer_loop_stats st;
    xfer_shard_stats shard;
    uint32_t outstanding;
    uint64_t bytes, resv, taken, take_failed;
    uint64_t id;
    recv_rec found[XFER_MAX_SHARDS];
    uint8_t have[XFER_MAX_SHARDS];
} loop_snap;

static int snap_fn(pyx_core *c, void *arg)
{
    loop_snap *a = arg;
    xfer_loop_stats_get(a->s->l, &a->st);
    a->outstanding = xfer_loop_outstanding(a->s->l);
    pyx_loop_shard_totals(a->s->l, a->nshards, &a->bytes, &a->resv);
    a->taken = a->s->taken;
    a->take_failed = a->s->take_failed;
    return 0;
}

static int shard_snap_fn(pyx_core *c, void *arg)
{
    loop_snap *a = arg;
    return xfer_shard_stats_get(xfer_loop_shard(a->s->l, (uint16_t)a->id),
                                &a->shard);
}

/* stats(shard=None): the transport's counters, or shard k's own (its
 * xfer_shard_stats: reserves, commits, live, tombstones, ...). */
static PyObject *loop_stats(PyObject *self, PyObject *args)
{
    pyx_loop *lo = (pyx_loop *)self;
    PyObject *shard = Py_None;
    if (!PyArg_ParseTuple(args, "|O:stats", &shard) || live(lo->core))
        return NULL;
    loop_snap a = {.s = lo->side, .nshards = lo->nshards};
    if (shard != Py_None) {
        long k = PyLong_AsLong(shard);
        if (k == -1 && PyErr_Occurred())
            return NULL;
        if (k < 0 || k >= lo->nshards)
            return pyx_raise(XFER_ERR_NOT_FOUND);
        a.id = (uint64_t)k;
        int rc = pyx_core_call(lo->core, shard_snap_fn, &a);
        return rc ? pyx_raise(rc) : pyx_stats_shard(&a.shard);
    }
    int rc = pyx_core_call(lo->core, snap_fn, &a);
    if (rc)
        return pyx_raise(rc);
    PyObject *d = pyx_stats_loop(&a.st, a.outstanding, a.bytes, a.resv);
    PyObject *t = PyLong_FromUnsignedLongLong(a.taken);
    PyObject *f = PyLong_FromUnsignedLongLong(a.take_failed);
    if (!d || !t || !f || PyDict_SetItemString(d, "taken", t) < 0 ||
        PyDict_SetItemString(d, "take_failed", f) < 0)
        Py_CLEAR(d);
    Py_XDECREF(t);
    Py_XDECREF(f);
    return d;
}

/* The newest record of each shard for the id. */
static int recv_fn(pyx_core *c, void *arg)
{
    loop_snap *a = arg;
    loopside *s = a->s;
    uint32_t n = s->next < RECV_RING ? s->next : RECV_RING;
    for (uint32_t i = 0; i < n; i++) {
        const recv_rec *r = &s->ring[(s->next - 1 - i) % RECV_RING];
        if (r->id == a->id && r->shard < a->nshards && !a->have[r->shard]) {
            a->have[r->shard] = 1;
            a->found[r->shard] = *r;
        }
    }
    return 0;
}

static PyObject *loop_received(PyObject *self, PyObject *arg)
{
    pyx_loop *lo = (pyx_loop *)self;
    loop_snap a = {.s = lo->side, .nshards = lo->nshards};
    a.id = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred() || live(lo->core))
        return NULL;
    int rc = pyx_core_call(lo->core, recv_fn, &a);
    if (rc)
        return pyx_raise(rc);
    PyObject *l = PyList_New(lo->nshards);
    for (uint16_t k = 0; l && k < lo->nshards; k++) {
        PyObject *v = a.have[k] ? Py_BuildValue("(II)", a.found[k].len,
                                                a.found[k].crc)
                                : (Py_INCREF(Py_None), Py_None);
        if (!v) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, k, v);
    }
    return l;
}

static PyObject *loop_get_nshards(PyObject *self, void *unused)
{
    return PyLong_FromLong(((pyx_loop *)self)->nshards);
}

static PyObject *loop_get_group(PyObject *self, void *unused)
{
    pyx_loop *lo = (pyx_loop *)self;
    if (!lo->core)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(lo->group);
}

static void loop_dealloc(PyObject *self)
{
    pyx_loop *lo = (pyx_loop *)self;
    if (lo->core)
        pyx_core_unref(lo->core); /* the core frees the C transport */
    Py_TYPE(self)->tp_free(self);
}

static PyMethodDef loop_methods[] = {
    {"add_fault", (PyCFunction)(void (*)(void))loop_add_fault,
     METH_VARARGS | METH_KEYWORDS,
     "add_fault($self, kind, *, op=-1, shard=-1, id=0, prob=0.0, count=0, "
     "delay=None, error=0)\n--\n\n"
     "add_fault(kind, *, op, shard, id, prob, count, delay, error): append "
     "a fault rule (xfer/loop.h explains how rules combine)."},
    {"clear_faults", loop_clear_faults, METH_NOARGS,
     "clear_faults($self, /)\n--\n\ndrop every rule"},
    {"set_down", loop_set_down, METH_VARARGS,
     "set_down($self, shard, down=True, /)\n--\n\n"
     "set_down(shard, down=True): take a shard down or bring it up"},
    {"stats", loop_stats, METH_VARARGS,
     "stats($self, shard=None, /)\n--\n\n"
     "stats(shard=None) -> the transport's counters (dict), or shard k's "
     "own (reserves, commits, live, ...)"},
    {"received", loop_received, METH_O,
     "received($self, id, /)\n--\n\n"
     "received(id) -> per shard (len, crc32) of the data the consumer took "
     "for id, or None (the last 4096 pairs are kept)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef loop_getset[] = {
    {"nshards", loop_get_nshards, NULL, "shards in the group", NULL},
    {"group", loop_get_group, NULL, "the engine's group index, or None",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pyx_loop_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xfer._xfer.Loop",
    .tp_basicsize = sizeof(pyx_loop),
    .tp_dealloc = loop_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "In-process shards on the engine's loop (the loop transport).",
    .tp_methods = loop_methods,
    .tp_getset = loop_getset,
    .tp_init = loop_init,
    .tp_new = PyType_GenericNew,
};

/* ---------------------------------------------------------------------- */
/* xfer.Tcp                                                                */
/* ---------------------------------------------------------------------- */

static void free_addrs(pyx_tcp *tc)
{
    for (uint16_t k = 0; tc->addrs && k < tc->nshards; k++)
        free(tc->addrs[k]);
    free(tc->addrs);
    tc->addrs = NULL;
}

static int tcp_init(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"addrs", "group", "connect_timeout", "secret",
                          "session", NULL};
    pyx_tcp *tc = (pyx_tcp *)self;
    PyObject *addrs, *ct = NULL, *secret = NULL, *session = NULL;
    unsigned int group = 0;
    if (tc->core) {
        PyErr_SetString(PyExc_ValueError, "attached already");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$IOOO:Tcp", kwl, &addrs,
                                     &group, &ct, &secret, &session) ||
        pyx_auth_parse(secret, session, &tc->auth))
        return -1;
    PyObject *seq = PySequence_Fast(addrs, "addrs must be a sequence of "
                                           "'host:port' strings");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = -1;
    free_addrs(tc);
    if (n < 1 || n > XFER_MAX_SHARDS) {
        PyErr_Format(PyExc_ValueError, "1..%d addresses", XFER_MAX_SHARDS);
        goto out;
    }
    tc->addrs = calloc((size_t)n, sizeof *tc->addrs);
    tc->nshards = (uint16_t)n;
    for (Py_ssize_t k = 0; tc->addrs && k < n; k++) {
        const char *s = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, k));
        if (!s)
            goto out;
        if (!(tc->addrs[k] = strdup(s)))
            break;
    }
    if (!tc->addrs || !tc->addrs[n - 1]) {
        PyErr_NoMemory();
        goto out;
    }
    if (pyx_ns_of(ct, &tc->connect_ns))
        goto out;
    tc->wire_group = group;
    rc = 0;
out:
    Py_DECREF(seq);
    return rc;
}

typedef struct tcp_snap {
    xfer_tcp *t;
    uint16_t nshards;
    xfer_tcp_stats st;
    uint8_t up[XFER_MAX_SHARDS];
    uint32_t outstanding;
    uint16_t drop;
} tcp_snap;

static int tcp_snap_fn(pyx_core *c, void *arg)
{
    tcp_snap *a = arg;
    xfer_tcp_stats_get(a->t, &a->st);
    for (uint16_t k = 0; k < a->nshards; k++)
        a->up[k] = xfer_tcp_connected(a->t, k);
    a->outstanding = xfer_tcp_outstanding(a->t);
    return 0;
}

static PyObject *tcp_connected(PyObject *self, PyObject *args)
{
    pyx_tcp *tc = (pyx_tcp *)self;
    int shard = -1;
    if (!PyArg_ParseTuple(args, "|i:connected", &shard) || live(tc->core))
        return NULL;
    if (shard >= tc->nshards) {
        PyErr_SetString(PyExc_ValueError, "no such shard");
        return NULL;
    }
    tcp_snap a = {.t = tc->t, .nshards = tc->nshards};
    int rc = pyx_core_call(tc->core, tcp_snap_fn, &a);
    if (rc)
        return pyx_raise(rc);
    bool all = true;
    for (uint16_t k = 0; k < tc->nshards; k++)
        all = all && a.up[k];
    return PyBool_FromLong(shard < 0 ? all : a.up[shard]);
}

static PyObject *tcp_stats(PyObject *self, PyObject *unused)
{
    pyx_tcp *tc = (pyx_tcp *)self;
    if (live(tc->core))
        return NULL;
    tcp_snap a = {.t = tc->t, .nshards = tc->nshards};
    int rc = pyx_core_call(tc->core, tcp_snap_fn, &a);
    if (rc)
        return pyx_raise(rc);
    PyObject *d = pyx_stats_tcp(&a.st);
    PyObject *o = PyLong_FromUnsignedLong(a.outstanding);
    if (!d || !o || PyDict_SetItemString(d, "outstanding", o) < 0)
        Py_CLEAR(d);
    Py_XDECREF(o);
    return d;
}

static int tcp_drop_fn(pyx_core *c, void *arg)
{
    tcp_snap *a = arg;
    xfer_tcp_drop(a->t, a->drop);
    return 0;
}

static PyObject *tcp_drop(PyObject *self, PyObject *arg)
{
    pyx_tcp *tc = (pyx_tcp *)self;
    long shard = PyLong_AsLong(arg);
    if ((shard == -1 && PyErr_Occurred()) || live(tc->core))
        return NULL;
    if (shard < 0 || shard >= tc->nshards) {
        PyErr_SetString(PyExc_ValueError, "no such shard");
        return NULL;
    }
    tcp_snap a = {.t = tc->t, .drop = (uint16_t)shard};
    int rc = pyx_core_call(tc->core, tcp_drop_fn, &a);
    return rc ? pyx_raise(rc) : (Py_INCREF(Py_None), Py_None);
}

static PyObject *tcp_get_nshards(PyObject *self, void *unused)
{
    return PyLong_FromLong(((pyx_tcp *)self)->nshards);
}

static PyObject *tcp_get_addrs(PyObject *self, void *unused)
{
    pyx_tcp *tc = (pyx_tcp *)self;
    PyObject *t = PyTuple_New(tc->addrs ? tc->nshards : 0);
    for (uint16_t k = 0; t && tc->addrs && k < tc->nshards; k++) {
        PyObject *s = PyUnicode_FromString(tc->addrs[k]);
        if (!s) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, k, s);
    }
    return t;
}

static PyObject *tcp_get_group(PyObject *self, void *unused)
{
    pyx_tcp *tc = (pyx_tcp *)self;
    if (!tc->core)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(tc->group);
}

static void tcp_dealloc(PyObject *self)
{
    pyx_tcp *tc = (pyx_tcp *)self;
    free_addrs(tc);
    if (tc->core)
        pyx_core_unref(tc->core);
    Py_TYPE(self)->tp_free(self);
}

static PyMethodDef tcp_methods[] = {
    {"connected", tcp_connected, METH_VARARGS,
     "connected($self, shard=None, /)\n--\n\n"
     "connected(shard=None): is that shard's (or every) connection up"},
    {"stats", tcp_stats, METH_NOARGS,
     "stats($self, /)\n--\n\nthe transport's counters (dict)"},
    {"drop", tcp_drop, METH_O,
     "drop($self, shard, /)\n--\n\n"
     "drop(shard): drop that connection as if the network lost it (tests)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef tcp_getset[] = {
    {"nshards", tcp_get_nshards, NULL, "shards in the group", NULL},
    {"addrs", tcp_get_addrs, NULL, "the shard addresses", NULL},
    {"group", tcp_get_group, NULL, "the engine's group index, or None",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pyx_tcp_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xfer._xfer.Tcp",
    .tp_basicsize = sizeof(pyx_tcp),
    .tp_dealloc = tcp_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Shards served over TCP by xferd, one address per shard.",
    .tp_methods = tcp_methods,
    .tp_getset = tcp_getset,
    .tp_init = tcp_init,
    .tp_new = PyType_GenericNew,
};
