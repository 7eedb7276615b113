/*
 * python/ext/configs.c - every C config the binding builds and every C
 * stats struct it reads, in this one file.
 *
 * The library's configs are versioned (docs/design.md section 4.1): each
 * starts from its xfer_<thing>_config_default() and then takes the
 * keywords given; a zero field still means "the default", which is what a
 * keyword left out of Engine(...), Loop(...) or Tcp(...) gives.  The stats
 * getters are the header's macros, so they ask for this header's version.
 */
#include "pyx.h"

#include <string.h>

void pyx_config_engine(const pyx_engine_opts *o, struct event_base *base,
                       xfer_engine_config *cfg)
{
    xfer_engine_config_default(cfg);
    cfg->base = base; /* the core's: it outlives the transports */
    cfg->core.max_transfers = o->max_transfers;
    cfg->core.max_tombstones = o->max_tombstones;
    cfg->core.default_deadline_ns = o->default_timeout_ns;
    cfg->core.tombstone_ttl_ns = o->tombstone_ttl_ns;
    cfg->core.cancel_op_timeout_ns = o->cancel_op_timeout_ns;
    cfg->core.cancel_backoff_ns = o->cancel_backoff_ns;
    cfg->core.cancel_max_attempts = o->cancel_max_attempts;
    cfg->core.eager_max_bytes = o->eager_max_bytes;
    cfg->max_pools = o->max_pools;
    cfg->mailbox_cap = o->mailbox_cap;
    cfg->shutdown_timeout_ns = o->shutdown_timeout_ns;
}

void pyx_config_loop(uint16_t nshards, uint64_t pool_bytes,
                     uint32_t max_reservations, uint64_t lease_ttl_ns,
                     uint64_t seed, uint64_t write_ns, xfer_loop_event_cb ev,
                     void *ev_ud, xfer_loop_config *cfg)
{
    xfer_loop_config_default(cfg);
    cfg->nshards = nshards;
    cfg->seed = seed;
    cfg->write_ns = write_ns;
    cfg->on_event = ev;
    cfg->on_event_ud = ev_ud;
    cfg->shard.pool_bytes = pool_bytes;
    cfg->shard.max_reservations = max_reservations;
    cfg->shard.lease_ttl_ns = lease_ttl_ns;
}

/* The bytes of a bytes-like object into dst (lo..hi of them); -1 with
 * ValueError naming `what` otherwise. */
static int take_bytes(PyObject *o, const char *what, size_t lo, size_t hi,
                      uint8_t *dst, size_t *len)
{
    Py_buffer v;
    if (PyObject_GetBuffer(o, &v, PyBUF_SIMPLE) < 0)
        return -1;
    int rc = -1;
    if ((size_t)v.len < lo || (size_t)v.len > hi) {
        if (lo == hi)
            PyErr_Format(PyExc_ValueError, "%s must be %zu bytes", what, lo);
        else
            PyErr_Format(PyExc_ValueError, "%s must be %zu..%zu bytes", what,
                         lo, hi);
    } else {
        memcpy(dst, v.buf, (size_t)v.len);
        *len = (size_t)v.len;
        rc = 0;
    }
    PyBuffer_Release(&v);
    return rc;
}

int pyx_auth_parse(PyObject *secret, PyObject *session, pyx_auth *a)
{
    size_t n;
    memset(a, 0, sizeof *a);
    if (secret && secret != Py_None &&
        take_bytes(secret, "secret", 16, sizeof a->secret, a->secret,
                   &a->secret_len))
        return -1;
    if (session && session != Py_None &&
        take_bytes(session, "session", sizeof a->session, sizeof a->session,
                   a->session, &n))
        return -1;
    return 0;
}

static void auth_secret(const pyx_auth *a, const uint8_t **secret,
                        size_t *len)
{
    *secret = a && a->secret_len ? a->secret : NULL;
    *len = a ? a->secret_len : 0;
}

void pyx_config_tcp(uint16_t nshards, const char *const *addrs,
                    uint32_t group, uint64_t connect_timeout_ns,
                    const pyx_auth *auth, xfer_tcp_config *cfg)
{
    xfer_tcp_config_default(cfg);
    cfg->nshards = nshards;
    cfg->addrs = addrs;
    cfg->group = group;
    cfg->connect_timeout_ns = connect_timeout_ns;
    memcpy(cfg->session, auth->session, sizeof cfg->session);
    auth_secret(auth, &cfg->secret, &cfg->secret_len);
}

void pyx_config_server(const pyx_server_opts *o, struct event_base *base,
                       const xfer_server_shard *shards, uint16_t nshards,
                       xfer_server_config *cfg)
{
    xfer_server_config_default(cfg);
    cfg->base = base;
    cfg->addr = o->addr;
    cfg->port = o->port;
    cfg->group = o->group;
    cfg->nshards = nshards;
    cfg->shards = shards;
    cfg->max_reservations = o->max_reservations;
    cfg->max_tombstones = o->max_tombstones;
    cfg->lease_ttl_ns = o->lease_ttl_ns;
    cfg->tombstone_ttl_ns = o->tombstone_ttl_ns;
    cfg->take_grace_ns = o->take_grace_ns;
    cfg->drain_timeout_ns = o->drain_timeout_ns;
    cfg->consume = o->consume;
    cfg->fault_ppm = o->fault_ppm;
    cfg->drop_ppm = o->drop_ppm;
    cfg->fault_seed = o->fault_seed;
    cfg->insecure = o->insecure;
    auth_secret(&o->auth, &cfg->secret, &cfg->secret_len);
}

void pyx_config_consumer(const pyx_consumer_opts *o, struct event_base *base,
                         uint16_t nshards, const char *const *addrs,
                         xfer_consumer_config *cfg)
{
    xfer_consumer_config_default(cfg);
    cfg->base = base;
    cfg->nshards = nshards;
    cfg->addrs = addrs;
    cfg->group = o->group;
    cfg->max_ids = o->max_ids;
    cfg->max_tombstones = o->max_tombstones;
    cfg->mailbox_cap = o->mailbox_cap;
    cfg->ready_deadline_ns = o->ready_deadline_ns;
    cfg->tombstone_ttl_ns = o->tombstone_ttl_ns;
    cfg->connect_timeout_ns = o->connect_timeout_ns;
    cfg->reconnect_min_ns = o->reconnect_min_ns;
    cfg->reconnect_max_ns = o->reconnect_max_ns;
    cfg->request_timeout_ns = o->request_timeout_ns;
    memcpy(cfg->session, o->auth.session, sizeof cfg->session);
    auth_secret(&o->auth, &cfg->secret, &cfg->secret_len);
}

/* ---------------------------------------------------------------------- */
/* Stats                                                                   */
/* ---------------------------------------------------------------------- */

typedef struct field {
    const char *name;
    uint64_t v;
} field;

static PyObject *dict_of(const field *f, size_t n)
{
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(f[i].v);
        if (!v || PyDict_SetItemString(d, f[i].name, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

#define F(s, name) {#name, (uint64_t)(s)->name}
#define NF(f) (sizeof(f) / sizeof((f)[0]))

PyObject *pyx_stats_engine(const xfer_engine_stats *st)
{
    const xfer_core_stats *c = &st->core;
    field f[] = {
        F(c, submitted), F(c, completed), F(c, succeeded), F(c, failed),
        F(c, cancelled), F(c, late_submits), F(c, late_replies),
        F(c, unknown_replies), F(c, tombstones_expired), F(c, tombstone_busy),
        F(c, cancel_retries), F(c, cancel_gave_up), F(c, illegal), F(c, live),
        F(c, tombstones), F(st, results_delivered), F(st, results_dropped),
        F(st, ops_started), F(st, ops_start_failed), F(st, aborts),
        F(st, pools), F(st, groups), F(st, staging_bytes_in_use),
        F(st, mailbox_posts), F(st, completions_delivered),
        F(st, posts_refused), F(st, cancels_refused), F(st, abandoned),
        F(st, refreshes_sent), F(st, refreshes_granted),
        F(st, refreshes_refused)};
    return dict_of(f, NF(f));
}

void pyx_loop_shard_totals(xfer_loop *l, uint16_t nshards, uint64_t *bytes,
                           uint64_t *resv)
{
    *bytes = *resv = 0;
    for (uint16_t k = 0; k < nshards; k++) {
        xfer_shard_stats ss;
        xfer_shard_stats_get(xfer_loop_shard(l, k), &ss);
        *bytes += ss.bytes_in_use;
        *resv += ss.live;
    }
}

PyObject *pyx_stats_loop(const xfer_loop_stats *st, uint32_t outstanding,
                         uint64_t shard_bytes, uint64_t shard_resv)
{
    field f[] = {F(st, messages), F(st, faults_fired), F(st, dropped),
                 F(st, aborted), F(st, down_failed), F(st, applied_lost),
                 {"outstanding", outstanding},
                 {"shard_bytes_in_use", shard_bytes},
                 {"shard_reservations", shard_resv}};
    return dict_of(f, NF(f));
}

PyObject *pyx_stats_tcp(const xfer_tcp_stats *st)
{
    field f[] = {F(st, connects), F(st, connect_failures), F(st, losses),
                 F(st, hello_refused), F(st, ops_started), F(st, ops_sent),
                 F(st, ops_waited), F(st, results), F(st, failed_conn_lost),
                 F(st, failed_down), F(st, aborted), F(st, refs_outstanding),
                 F(st, bytes_referenced), F(st, bad_frames), F(st, resets),
                 F(st, bad_replies), F(st, reconnects), F(st, crcs_sent),
                 F(st, crcs_given)};
    return dict_of(f, NF(f));
}

int pyx_server_stats_get(const xfer_server *s, uint16_t index,
                         xfer_server_stats *st)
{
    memset(st, 0, sizeof *st);
    return xfer_server_stats_get(s, index, st);
}

int pyx_consumer_stats_get(const xfer_consumer *c, xfer_consumer_stats *st)
{
    memset(st, 0, sizeof *st);
    return xfer_consumer_stats_get(c, st);
}

PyObject *pyx_stats_server(const xfer_server_stats *st)
{
    field f[] = {
        F(st, nshards), F(st, conns), F(st, pool_bytes), F(st, bytes_in_use),
        F(st, live), F(st, tombstones), F(st, reserves), F(st, refused),
        F(st, writes), F(st, commits), F(st, cancels), F(st, expiries),
        F(st, takes), F(st, releases), F(st, stale), F(st, illegal),
        F(st, events_sent), F(st, write_bytes), F(st, taken_now),
        F(st, orphaned_now), F(st, grace_released), F(st, bad_frames),
        F(st, errors_sent), F(st, faults), F(st, subs_dropped),
        F(st, auth_failed), F(st, conns_refused), F(st, timeouts),
        F(st, writes_stalled), F(st, out_bytes), F(st, rules_fired),
        F(st, ops_delayed), F(st, delayed_now)};
    PyObject *d = dict_of(f, NF(f));
    PyObject *bad = PyDict_New();
    for (unsigned i = 0; d && bad && i < XFER_SERVER_BAD_REASONS; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(st->bad_by_reason[i]);
        if (!v || PyDict_SetItemString(bad, xfer_server_bad_reason_name(i),
                                       v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    if (d && (!bad || PyDict_SetItemString(d, "bad_by_reason", bad) < 0))
        Py_CLEAR(d);
    Py_XDECREF(bad);
    return d;
}

PyObject *pyx_stats_shard(const xfer_shard_stats *st)
{
    field f[] = {F(st, pool_bytes), F(st, bytes_in_use), F(st, live),
                 F(st, tombstones), F(st, reserves), F(st, refused),
                 F(st, writes), F(st, commits), F(st, cancels),
                 F(st, expiries), F(st, deferred_frees), F(st, takes),
                 F(st, releases), F(st, stale), F(st, illegal)};
    return dict_of(f, NF(f));
}

static int put_str(PyObject *d, const char *k, const char *v)
{
    PyObject *o = PyUnicode_FromString(v);
    int rc = o ? PyDict_SetItemString(d, k, o) : -1;
    Py_XDECREF(o);
    return rc;
}

static PyObject *shard_view(const xfer_shard_view *sv)
{
    PyObject *d = PyDict_New();
    PyObject *n = PyLong_FromUnsignedLong(sv->cancel_attempts);
    if (!d || !n || put_str(d, "reserve", xfer_sub_name(XFER_OP_RESERVE,
                                                        sv->resv)) ||
        put_str(d, "write", xfer_sub_name(XFER_OP_WRITE, sv->write)) ||
        put_str(d, "commit", xfer_sub_name(XFER_OP_COMMIT, sv->commit)) ||
        put_str(d, "cancel", xfer_sub_name(XFER_OP_CANCEL, sv->cancel)) ||
        put_str(d, "eager", xfer_sub_name(XFER_OP_EAGER, sv->eager)) ||
        PyDict_SetItemString(d, "cancel_attempts", n) < 0)
        Py_CLEAR(d);
    Py_XDECREF(n);
    return d;
}

PyObject *pyx_transfer_view(const xfer_transfer_view *v)
{
    const char *state = xfer_fsm_state_name(XFER_MACHINE_TRANSFER, v->state);
    field f[] = {{"id", v->id}, {"attempt", v->attempt},
                 {"started_ns", v->started_ns},
                 {"deadline_ns", v->deadline_ns}, {"pending", v->pending}};
    PyObject *d = dict_of(f, NF(f));
    PyObject *shards = PyList_New(v->nshards);
    for (uint16_t k = 0; d && shards && k < v->nshards; k++) {
        PyObject *s = shard_view(&v->shards[k]);
        if (!s)
            Py_CLEAR(d);
        else
            PyList_SET_ITEM(shards, k, s);
    }
    if (d && (!shards || put_str(d, "state", state ? state : "?") ||
              PyDict_SetItemString(d, "shards", shards) < 0))
        Py_CLEAR(d);
    Py_XDECREF(shards);
    return d;
}

PyObject *pyx_stats_consumer(const xfer_consumer_stats *st)
{
    field f[] = {
        F(st, links_up), F(st, connects), F(st, connect_failures),
        F(st, losses), F(st, bad_frames), F(st, events), F(st, ready_events),
        F(st, ended_events), F(st, dropped_events), F(st, takes_sent),
        F(st, takes_failed), F(st, releases_sent), F(st, cancels_sent),
        F(st, errors_received), F(st, available), F(st, unavailable),
        F(st, unavailable_timeout), F(st, unavailable_cancelled),
        F(st, unavailable_expired), F(st, unavailable_conn_lost),
        F(st, unavailable_take_failed), F(st, late_ready),
        F(st, user_cancels), F(st, mail_refused), F(st, pending),
        F(st, held), F(st, held_bytes), F(st, tombstones),
        F(st, requests_queued), F(st, requests_resent),
        F(st, cancels_replayed), F(st, requests_dropped),
        F(st, reconnects), F(st, request_timeouts)};
    return dict_of(f, NF(f));
}
