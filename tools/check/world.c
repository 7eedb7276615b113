/*
 * tools/check/world.c - building, saving, loading and stepping the world
 * xfer-check explores (see world.h).
 *
 * What must stay true:
 *  - a state is exactly its encoding: load(save(w)) answers every move as w
 *    does (the machines' declared save and load, fsm/save.h, guarantee
 *    this for them; the rest is the checker's own plain data, copied as it
 *    is in memory), so BFS can expand a state long after it was found;
 *  - the moves of a state, and their order, depend on the state alone;
 *  - time only moves when the environment fires a timer, and then to that
 *    timer's deadline (never backwards).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "le.h"
#include "save.h"
#include "world.h"

/* ---------------------------------------------------------------------- */
/* Construction                                                            */
/* ---------------------------------------------------------------------- */

static uint64_t counter_rng(void *ud)
{
    uint64_t *c = ud;
    return ++*c;
}

static bool tr_on(const ck_world *w)
{
    return w->tracer && w->tracer->rec;
}

static void trace_fn(void *ud, const xfer_trace_rec *r)
{
    const ck_src *s = ud;
    if (s->w->tracer && s->w->tracer->rec)
        s->w->tracer->rec(s->w->tracer->ud, r, s->src);
}

static xfer_trace_sink sink(ck_world *w, unsigned src)
{
    xfer_trace_sink t = {0};
    if (!tr_on(w))
        return t;
    w->srcs[src] = (ck_src){w, (uint8_t)src};
    t.fn = trace_fn;
    t.ud = &w->srcs[src];
    return t;
}

/* With --defaults every timing is 0, "the library's default": what a
 * deployment that sets nothing (xferd) runs. */
static uint64_t timing(const ck_world *w, uint64_t v)
{
    return w->cfg->defaults ? 0 : v;
}

static int make_consumer(ck_world *w)
{
    const ck_config *c = w->cfg;
    for (unsigned k = 0; k < c->S; k++) {
        xfer_shard_config sc;
        xfer_shard_config_default(&sc);
        sc.pool_bytes = CK_POOL_BYTES;
        sc.max_reservations = w->caps;
        sc.max_tombstones = w->caps;
        sc.lease_ttl_ns = timing(w, CK_LEASE_TTL);
        sc.tombstone_ttl_ns = timing(w, CK_SHARD_TOMB_TTL);
        sc.align = 64;
        sc.one_sided = c->rdma;
        sc.shard_index = (uint16_t)k;
        sc.rng = (xfer_rng){counter_rng, &w->env.rng[k]};
        sc.trace = sink(w, 1 + k);
        int rc = xfer_shard_new(&sc, &w->sh[k]);
        if (rc)
            return rc;
    }
    xfer_readiness_config rc;
    xfer_readiness_config_default(&rc);
    rc.nshards = (uint16_t)c->S;
    rc.max_records = w->caps;
    rc.max_tombstones = w->caps;
    rc.deadline_ns = timing(w, CK_READY_DEADLINE);
    rc.tombstone_ttl_ns = timing(w, CK_READY_TOMB_TTL);
    rc.trace = sink(w, CK_MAX_S + 1);
    return xfer_readiness_new(&rc, &w->rd);
}

/* The producer core's config: caps from the world, timings as above.
 * The deployment modelled: consumer leases of CK_LEASE_TTL, every message
 * delivered within max_delay (the core's check of its tombstone TTL). */
static void core_config(ck_world *w, xfer_core_config *cc)
{
    const ck_config *cfg = w->cfg;
    xfer_core_config_default(cc);
    cc->max_transfers = w->caps;
    cc->max_tombstones = w->caps;
    cc->tombstone_ttl_ns = timing(w, CK_CORE_TOMB_TTL);
    cc->consumer_lease_ns = timing(w, CK_LEASE_TTL);
    cc->net_margin_ns = cfg->defaults ? 0 : cfg->max_delay;
    cc->default_deadline_ns = timing(w, CK_DEADLINE);
    cc->cancel_op_timeout_ns = timing(w, CK_CANCEL_TIMEOUT);
    cc->cancel_backoff_ns = timing(w, CK_BACKOFF);
    cc->cancel_max_attempts = cfg->defaults ? 0 : cfg->cancel_max_attempts;
    cc->max_shards = (uint16_t)cfg->S;
    cc->trace = sink(w, 0);
}

unsigned ck_world_cancel_attempts(const ck_world *w)
{
    return w->cfg->defaults ? CK_DEFAULT_CANCEL_ATTEMPTS
                            : w->cfg->cancel_max_attempts;
}

int ck_world_init(ck_world *w, const ck_config *cfg, const ck_tracer *tr)
{
    memset(w, 0, sizeof *w);
    w->cfg = cfg;
    w->tracer = tr;
    w->v.inv = -1;
    w->caps = cfg->caps ? cfg->caps : cfg->T;
    core_config(w, &w->core_cfg);
    int rc = xfer_core_new(&w->core_cfg, &w->core);
    if (!rc)
        rc = make_consumer(w);
    if (rc) {
        ck_world_free(w);
        return rc;
    }
    ck_engine_start(w);
    return 0;
}

void ck_world_free(ck_world *w)
{
    xfer_core_del(w->core);
    for (unsigned k = 0; k < CK_MAX_S; k++)
        xfer_shard_del(w->sh[k]);
    xfer_readiness_del(w->rd);
    w->core = NULL;
    w->rd = NULL;
    memset(w->sh, 0, sizeof w->sh);
}

/* ---------------------------------------------------------------------- */
/* Save and load                                                           */
/* ---------------------------------------------------------------------- */

typedef struct obuf {
    uint8_t *p;
    size_t len, at;
} obuf;

static void put(obuf *o, const void *src, size_t n)
{
    if (o->at + n <= o->len)
        memcpy(o->p + o->at, src, n);
    o->at += n;
}

/* A machine's blob behind a 4-byte length. */
static void put_blob(obuf *o, size_t n)
{
    if (o->at + 4 <= o->len)
        xfer_le_put32(o->p + o->at, (uint32_t)n);
    o->at += 4 + n;
}

static uint8_t *room(obuf *o, size_t *left)
{
    size_t at = o->at + 4;
    *left = at <= o->len ? o->len - at : 0;
    return *left ? o->p + at : NULL;
}

static void put_mon(obuf *o, const ck_world *w)
{
    const ck_config *c = w->cfg;
    for (unsigned t = 0; t < c->T; t++) {
        const mon_tr *m = &w->mon.tr[t];
        put(o, m, offsetof(mon_tr, ps));
        put(o, m->ps, c->S * sizeof m->ps[0]);
        put(o, m->cs, c->S * sizeof m->cs[0]);
    }
    put(o, &w->mon.shutdown_req, 4);
}

/* A machine's save into p (n bytes): the bytes it takes, which may be
 * more than n (then nothing past n is written).  A machine that refuses to
 * save is a bug of the checker (it saves only between moves). */
static size_t save_slot(ck_world *w, unsigned slot, uint8_t *p, size_t n)
{
    size_t need = 0;
    int rc;
    if (slot == CK_SLOT_CORE)
        rc = xfer_core_save(w->core, p, n, &need);
    else if (slot == CK_SLOT_RD)
        rc = xfer_readiness_save(w->rd, p, n, &need);
    else
        rc = xfer_shard_save(w->sh[slot - 1], p, n, &need);
    if (rc != 0 && rc != XFER_ERR_TOO_SMALL) {
        fprintf(stderr, "xfer-check: machine %u refused to save: %s\n", slot,
                xfer_strerror(rc));
        abort();
    }
    return need;
}

/* One machine's blob: saved afresh when it is in `which`, else copied from
 * the previous encoding (the machine has not been called since). */
static void put_slot(ck_world *w, obuf *o, unsigned slot, const uint8_t *prev,
                     const ck_layout *pl, unsigned which)
{
    size_t left, n;
    uint8_t *r = room(o, &left);
    w->lay.off[slot] = o->at + 4;
    if (!prev || (which & (1u << slot))) {
        n = save_slot(w, slot, r, left);
    } else {
        n = pl->len[slot];
        if (n <= left)
            memcpy(r, prev + pl->off[slot], n);
    }
    w->lay.len[slot] = n;
    put_blob(o, n);
}

/* Save the world; machines outside `which` are taken from `prev` (laid
 * out as `pl`), which must encode them as they are now.  prev NULL: save
 * every machine. */
size_t ck_world_save_some(ck_world *w, uint8_t *buf, size_t len,
                          const uint8_t *prev, const ck_layout *pl,
                          unsigned which)
{
    obuf o = {buf, buf ? len : 0, 0};
    put(&o, &w->env, sizeof w->env);
    put_mon(&o, w);
    put_slot(w, &o, CK_SLOT_CORE, prev, pl, which);
    for (unsigned k = 0; k < w->cfg->S; k++)
        put_slot(w, &o, CK_SLOT_SH(k), prev, pl, which);
    put_slot(w, &o, CK_SLOT_RD, prev, pl, which);
    /* the messages last: their number varies most, and what follows a
     * change of length is stored less compactly (level.c) */
    put(&o, w->msg, w->env.nmsg * sizeof w->msg[0]);
    return o.at;
}

size_t ck_world_save(ck_world *w, uint8_t *buf, size_t len)
{
    return ck_world_save_some(w, buf, len, NULL, NULL, CK_M_ALL);
}

typedef struct ibuf {
    const uint8_t *p;
    size_t len, at;
} ibuf;

static bool get(ibuf *b, void *dst, size_t n)
{
    if (b->at + n > b->len)
        return false;
    memcpy(dst, b->p + b->at, n);
    b->at += n;
    return true;
}

static const uint8_t *get_blob(ibuf *b, size_t *n)
{
    if (b->at + 4 > b->len)
        return NULL;
    uint32_t n32 = xfer_le_get32(b->p + b->at);
    b->at += 4;
    if (b->at + n32 > b->len)
        return NULL;
    const uint8_t *p = b->p + b->at;
    b->at += n32;
    *n = n32;
    return p;
}

static bool get_mon(ibuf *b, ck_world *w)
{
    const ck_config *c = w->cfg;
    for (unsigned t = 0; t < c->T; t++) {
        mon_tr *m = &w->mon.tr[t];
        if (!get(b, m, offsetof(mon_tr, ps)) ||
            !get(b, m->ps, c->S * sizeof m->ps[0]) ||
            !get(b, m->cs, c->S * sizeof m->cs[0]))
            return false;
    }
    return get(b, &w->mon.shutdown_req, 4);
}

static int load_slot(ck_world *w, unsigned slot, const uint8_t *p, size_t n)
{
    if (slot == CK_SLOT_CORE)
        return xfer_core_load(w->core, p, n);
    if (slot == CK_SLOT_RD)
        return xfer_readiness_load(w->rd, p, n);
    return xfer_shard_load(w->sh[slot - 1], p, n);
}

/* Which machines a load must restore: those in `which`, and, when `prev`
 * (laid out as `pl`) is what the machines hold now, only those whose blob
 * differs from it. */
typedef struct lsel {
    unsigned which;
    const uint8_t *prev;
    const ck_layout *pl;
} lsel;

static bool must_load(const lsel *l, unsigned slot, const uint8_t *p,
                      size_t n)
{
    if (!(l->which & (1u << slot)))
        return false;
    return !l->prev || l->pl->len[slot] != n ||
           memcmp(l->prev + l->pl->off[slot], p, n) != 0;
}

static bool get_slot(ck_world *w, ibuf *b, unsigned slot, const lsel *l)
{
    size_t n;
    const uint8_t *p = get_blob(b, &n);
    if (!p)
        return false;
    w->lay.off[slot] = (size_t)(p - b->p);
    w->lay.len[slot] = n;
    return !must_load(l, slot, p, n) || load_slot(w, slot, p, n) == 0;
}

static int load_sel(ck_world *w, const uint8_t *buf, size_t len,
                    const lsel *l)
{
    ibuf b = {buf, len, 0};
    w->v.inv = -1;
    w->in_liveness = false;
    if (!get(&b, &w->env, sizeof w->env) || w->env.nmsg > CK_MAX_MSG ||
        !get_mon(&b, w))
        return XFER_ERR_FORMAT;
    if (!get_slot(w, &b, CK_SLOT_CORE, l))
        return XFER_ERR_FORMAT;
    for (unsigned k = 0; k < w->cfg->S; k++)
        if (!get_slot(w, &b, CK_SLOT_SH(k), l))
            return XFER_ERR_FORMAT;
    if (!get_slot(w, &b, CK_SLOT_RD, l) ||
        !get(&b, w->msg, w->env.nmsg * sizeof w->msg[0]))
        return XFER_ERR_FORMAT;
    return b.at == len ? 0 : XFER_ERR_FORMAT;
}

/* Load the plain data of an encoding and the machines in `which`; the
 * others must already be in the state the encoding holds. */
int ck_world_load_some(ck_world *w, const uint8_t *buf, size_t len,
                       unsigned which)
{
    lsel l = {which, NULL, NULL};
    return load_sel(w, buf, len, &l);
}

/* Load an encoding into a world whose machines hold `prev` (laid out as
 * pl): only the machines whose blobs differ are loaded. */
int ck_world_load_diff(ck_world *w, const uint8_t *buf, size_t len,
                       const uint8_t *prev, const ck_layout *pl)
{
    lsel l = {CK_M_ALL, prev, pl};
    return load_sel(w, buf, len, &l);
}

int ck_world_load(ck_world *w, const uint8_t *buf, size_t len)
{
    return ck_world_load_some(w, buf, len, CK_M_ALL);
}
