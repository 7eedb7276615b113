/*
 * tools/check/stub/stub_consumer.c - a minimal stand-in consumer for
 * xfer-check builds made before fsm/shard.c and fsm/readiness.c exist: a
 * shard that reserves, writes, commits, cancels (deferring a cancel during a
 * write), expires leases and tombstones; a readiness tracker that takes
 * nothing.  It lets the checker explore the real transfer core against a
 * plausible consumer.  It is never linked once the real machines exist.
 *
 * Invariant: only ids 1..STUB_IDS are modelled; state is plain data, so
 * save/load are memcpy.
 */
#include <stdlib.h>
#include <string.h>

#include "readiness_int.h"
#include "shard_int.h"

#define STUB_IDS 8

typedef struct ent {
    uint64_t resv_id, deadline;
    uint32_t attempt, len;
    uint8_t state, writes, pad[6];
} ent;

struct xfer_shard {
    xfer_shard_config cfg;
    ent e[STUB_IDS];
    xfer_shard_event ev[4 * STUB_IDS];
    size_t nev;
};

struct xfer_readiness {
    int unused;
};

int xfer_shard_new(const xfer_shard_config *cfg, xfer_shard **out)
{
    xfer_shard *s = calloc(1, sizeof *s);
    if (!s)
        return XFER_ERR_NOMEM;
    s->cfg = *cfg;
    *out = s;
    return 0;
}

void xfer_shard_del(xfer_shard *s)
{
    free(s);
}

static ent *get(xfer_shard *s, uint64_t id)
{
    return id >= 1 && id <= STUB_IDS ? &s->e[id - 1] : NULL;
}

static void emit(xfer_shard *s, uint8_t kind, uint64_t id, const ent *e)
{
    s->ev[s->nev++] = (xfer_shard_event){kind, s->cfg.shard_index,
                                         e->attempt, id, e->resv_id, e->len};
}

static void end(xfer_shard *s, uint64_t id, ent *e, uint8_t tomb,
                uint64_t now)
{
    if (tomb != XFER_RS_DONE)
        emit(s, tomb == XFER_RS_CANCELLED ? XFER_SHARD_EV_CANCELLED
                                          : XFER_SHARD_EV_EXPIRED, id, e);
    e->state = tomb;
    e->deadline = now + s->cfg.tombstone_ttl_ns;
}

int xfer_shard_reserve(xfer_shard *s, uint64_t now, uint64_t id,
                       uint32_t attempt, uint32_t len, xfer_resv_info *info)
{
    ent *e = get(s, id);
    if (!e)
        return XFER_ERR_INVALID_ARG;
    if (e->state == XFER_RS_NONE) {
        *e = (ent){.resv_id = s->cfg.rng.next(s->cfg.rng.ud),
                   .deadline = now + s->cfg.lease_ttl_ns, .attempt = attempt,
                   .len = len, .state = XFER_RS_RESERVED};
    } else if (e->attempt != attempt ||
               (e->state != XFER_RS_RESERVED && e->state != XFER_RS_WRITING)) {
        return XFER_ERR_CANCELLED;
    }
    *info = (xfer_resv_info){e->resv_id, (id - 1) * 256u, len};
    return 0;
}

static int match(ent *e, uint32_t attempt, uint64_t resv)
{
    if (!e || e->state == XFER_RS_NONE)
        return XFER_ERR_NOT_FOUND;
    if (e->attempt != attempt || e->resv_id != resv)
        return XFER_ERR_STALE;
    return 0;
}

int xfer_shard_write_begin(xfer_shard *s, uint64_t now, uint64_t id,
                           uint32_t attempt, uint64_t resv_id, uint64_t off,
                           uint32_t len, uint8_t **dst)
{
    ent *e = get(s, id);
    int rc = match(e, attempt, resv_id);
    if (rc)
        return rc;
    if (e->state != XFER_RS_RESERVED && e->state != XFER_RS_WRITING)
        return XFER_ERR_CANCELLED;
    e->state = XFER_RS_WRITING;
    e->writes++;
    *dst = NULL;
    return 0;
}

int xfer_shard_write_end(xfer_shard *s, uint64_t now, uint64_t id,
                         uint64_t resv_id, bool ok)
{
    ent *e = get(s, id);
    if (!e || !e->writes)
        return XFER_ERR_NOT_FOUND;
    if (--e->writes)
        return 0;
    if (e->state == XFER_RS_WRITING) {
        e->state = XFER_RS_RESERVED;
        return 0;
    }
    bool c = e->state == XFER_RS_CANCEL_PENDING;
    end(s, id, e, c ? XFER_RS_CANCELLED : XFER_RS_EXPIRED, now);
    return c ? XFER_ERR_CANCELLED : XFER_ERR_EXPIRED;
}

int xfer_shard_commit(xfer_shard *s, uint64_t now, uint64_t id,
                      uint32_t attempt, uint64_t resv_id)
{
    ent *e = get(s, id);
    int rc = match(e, attempt, resv_id);
    if (rc)
        return rc;
    if (e->state == XFER_RS_READY || e->state == XFER_RS_TAKEN)
        return 0;
    if (e->state != XFER_RS_RESERVED)
        return XFER_ERR_CANCELLED;
    e->state = XFER_RS_READY;
    emit(s, XFER_SHARD_EV_READY, id, e);
    return 0;
}

int xfer_shard_cancel(xfer_shard *s, uint64_t now, uint64_t id,
                      uint32_t attempt, uint64_t resv_id)
{
    ent *e = get(s, id);
    if (!e)
        return XFER_ERR_INVALID_ARG;
    if (e->state == XFER_RS_NONE) {
        *e = (ent){.attempt = attempt, .state = XFER_RS_CANCELLED,
                   .deadline = now + s->cfg.tombstone_ttl_ns};
        return 0;
    }
    if (e->attempt != attempt)
        return XFER_ERR_STALE;
    if (e->state == XFER_RS_TAKEN)
        return XFER_ERR_STATE;
    if (e->state == XFER_RS_WRITING || e->state == XFER_RS_EXPIRE_PENDING)
        e->state = XFER_RS_CANCEL_PENDING;
    else if (e->state == XFER_RS_RESERVED || e->state == XFER_RS_READY)
        end(s, id, e, XFER_RS_CANCELLED, now);
    return 0;
}

int xfer_shard_take(xfer_shard *s, uint64_t now, uint64_t id,
                    uint64_t resv_id, const uint8_t **data, uint32_t *len)
{
    ent *e = get(s, id);
    if (!e || e->state != XFER_RS_READY || e->resv_id != resv_id)
        return XFER_ERR_STATE;
    e->state = XFER_RS_TAKEN;
    return 0;
}

int xfer_shard_release(xfer_shard *s, uint64_t now, uint64_t id,
                       uint64_t resv_id)
{
    ent *e = get(s, id);
    if (!e || e->state != XFER_RS_TAKEN)
        return XFER_ERR_STATE;
    end(s, id, e, XFER_RS_DONE, now);
    return 0;
}

void xfer_shard_on_timer(xfer_shard *s, uint64_t now)
{
    for (uint64_t id = 1; id <= STUB_IDS; id++) {
        ent *e = get(s, id);
        if (e->state == XFER_RS_NONE || e->state == XFER_RS_TAKEN ||
            e->deadline > now)
            continue;
        if (e->state >= XFER_RS_CANCELLED)
            memset(e, 0, sizeof *e);
        else if (e->state == XFER_RS_WRITING)
            e->state = XFER_RS_EXPIRE_PENDING;
        else if (e->state == XFER_RS_RESERVED || e->state == XFER_RS_READY)
            end(s, id, e, XFER_RS_EXPIRED, now);
    }
}

uint64_t xfer_shard_next_deadline(const xfer_shard *s)
{
    uint64_t d = UINT64_MAX;
    for (unsigned i = 0; i < STUB_IDS; i++) {
        const ent *e = &s->e[i];
        bool armed = e->state != XFER_RS_NONE && e->state != XFER_RS_TAKEN &&
                     e->state != XFER_RS_CANCEL_PENDING &&
                     e->state != XFER_RS_EXPIRE_PENDING;
        if (armed && e->deadline < d)
            d = e->deadline;
    }
    return d;
}

const xfer_shard_event *xfer_shard_events(const xfer_shard *s, size_t *n)
{
    *n = s->nev;
    return s->ev;
}

void xfer_shard_events_clear(xfer_shard *s)
{
    s->nev = 0;
}

void xfer_shard_stats_get(const xfer_shard *s, xfer_shard_stats *st)
{
    memset(st, 0, sizeof *st);
    st->pool_bytes = s->cfg.pool_bytes;
    for (unsigned i = 0; i < STUB_IDS; i++)
        if (s->e[i].state >= XFER_RS_RESERVED &&
            s->e[i].state <= XFER_RS_EXPIRE_PENDING) {
            st->bytes_in_use += s->e[i].len;
            st->live++;
        }
}

xfer_resv_state xfer_shard_state(const xfer_shard *s, uint64_t id)
{
    return id >= 1 && id <= STUB_IDS ? (xfer_resv_state)s->e[id - 1].state
                                     : XFER_RS_NONE;
}

size_t xfer_shard_save(const xfer_shard *s, uint8_t *buf, size_t len)
{
    if (buf && len >= sizeof s->e)
        memcpy(buf, s->e, sizeof s->e);
    return sizeof s->e;
}

int xfer_shard_load(xfer_shard *s, const uint8_t *buf, size_t len)
{
    if (len != sizeof s->e)
        return XFER_ERR_FORMAT;
    memcpy(s->e, buf, len);
    s->nev = 0;
    return 0;
}

int xfer_readiness_new(const xfer_readiness_config *cfg, xfer_readiness **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : XFER_ERR_NOMEM;
}

void xfer_readiness_del(xfer_readiness *r)
{
    free(r);
}

int xfer_readiness_on_ready(xfer_readiness *r, uint64_t now, uint64_t id,
                            uint32_t attempt, uint16_t shard, uint64_t resv)
{
    return 0;
}

int xfer_readiness_on_take_result(xfer_readiness *r, uint64_t now,
                                  uint64_t id, uint16_t shard, int32_t st)
{
    return 0;
}

int xfer_readiness_on_shard_ended(xfer_readiness *r, uint64_t now,
                                  uint64_t id, uint32_t attempt,
                                  uint16_t shard, int32_t reason)
{
    return 0;
}

int xfer_readiness_cancel(xfer_readiness *r, uint64_t now, uint64_t id)
{
    return 0;
}

void xfer_readiness_on_timer(xfer_readiness *r, uint64_t now)
{
}

uint64_t xfer_readiness_next_deadline(const xfer_readiness *r)
{
    return UINT64_MAX;
}

const xfer_ready_action *xfer_readiness_actions(const xfer_readiness *r,
                                                size_t *n)
{
    *n = 0;
    return NULL;
}

void xfer_readiness_actions_clear(xfer_readiness *r)
{
}

void xfer_readiness_stats_get(const xfer_readiness *r,
                              xfer_readiness_stats *st)
{
    memset(st, 0, sizeof *st);
}

xfer_ready_state xfer_readiness_state(const xfer_readiness *r, uint64_t id)
{
    return XFER_YS_NONE;
}

size_t xfer_readiness_save(const xfer_readiness *r, uint8_t *buf, size_t len)
{
    return 0;
}

int xfer_readiness_load(xfer_readiness *r, const uint8_t *buf, size_t len)
{
    return 0;
}
