/*
 * fsm/core_save.c - save, load and canonical form of the transfer core
 * (fsm/save.h), format version 4 (3 had no streams, 2 no eager fields).
 *
 * The save, little-endian (fsm/le.h): the header ('X' 'C' 'S' 2); a
 * fingerprint of the config; next attempt (u32), shutting down and
 * shutdown done (u8 each), the core's clock (u64); the live transfers in
 * id order (a count, then per record its shard count, its fields, and one
 * section per shard); the armed timers as ids in the order they fire (a
 * count, then the ids); the tombstone table's clock (u64) and its entries
 * (xfer_tomb_save).  One walk of the state (put_record, through
 * fsm/canon.h) writes both the save and the canonical form; a form that
 * renames transfer ids writes every id renamed and the records in the
 * order of the renamed ids.
 *
 * What must stay true:
 *  - every field of xfer_transfer and xfer_transfer_shard but `slot` and the pads
 *    is written (the static asserts below fail when a field is added, so
 *    it cannot be forgotten here); the slot is left out because it is not
 *    state, and the timers' order stands in for the heap's set order;
 *  - nothing is truncated: a save that does not fit says so and how much
 *    it needs (version 1 silently dropped the records past 256);
 *  - load checks the whole save before it changes the core (pass 1), then
 *    applies it (pass 2), which can fail only on an allocation (the core
 *    is then empty but valid) or on two tombstones with one id (empty).
 * Records are found in id order and timers in firing order by selection,
 * so a save costs O(live x slots): it serves the model checker and tests,
 * whose cores are small, never a production-size core's hot path.
 */
#include <assert.h>
#include <string.h>

#include "canon.h"
#include "core_priv.h"
#include "le.h"
#include "save.h"
#include "stream.h"
#include "util.h"

/* A field added to a record must be saved and loaded below. */
/* `st` (a stream's parts) is saved after the record's shards when the
 * head's stream flag is 1 (put_stream); its size is asserted beside it. */
_Static_assert(sizeof(xfer_transfer) == 104, "save the new xfer_transfer field");
_Static_assert(sizeof(xfer_transfer_shard) == 40, "save the new xfer_transfer_shard field");

#define SHARD_BYTES 38u /* one saved xfer_transfer_shard (put_shard) */
/* A saved record's head (put_record without its shards): its length, and
 * where its id and timer sit, for walking a checked save quickly. */
#define HEAD_BYTES 87u
#define HEAD_ID_AT 2u
#define HEAD_TIMER_AT 34u

static const uint8_t MAGIC[XFER_SAVE_HDR] = {'X', XFER_SAVE_CORE, 'S',
                                             XFER_CORE_SAVE_VERSION};

/* What must match between the saving and the loading core. */
static uint64_t fingerprint(const xfer_core *core)
{
    const xfer_core_config *c = &core->cfg;
    const uint64_t v[] = {c->max_transfers, c->max_tombstones,
                          c->tombstone_ttl_ns, c->default_deadline_ns,
                          c->cancel_op_timeout_ns, c->cancel_backoff_ns,
                          c->cancel_max_attempts, c->attempt_base,
                          c->max_shards, c->eager_max_bytes};
    uint64_t h = XFER_CORE_SAVE_VERSION;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        h = xfer_util_mix64(h ^ v[i]);
    return h;
}

/* ---------------------------------------------------------------------- */
/* Saving                                                                  */
/* ---------------------------------------------------------------------- */

/* The live slot with the smallest id as o writes it (xfer_canon_id)
 * above `after`, or UINT32_MAX. */
static uint32_t next_by_id(const xfer_canon_out *o, const xfer_core *core,
                           uint64_t after)
{
    uint32_t best = UINT32_MAX;
    uint64_t best_id = 0;
    for (uint32_t s = 0; s < core->cfg.max_transfers; s++) {
        const xfer_transfer *t = core->recs[s];
        uint64_t id = t ? xfer_canon_id(o, t->id) : 0;
        if (t && id > after && (best == UINT32_MAX || id < best_id)) {
            best = s;
            best_id = id;
        }
    }
    return best;
}

/* The armed slot that fires next after (key, order), or UINT32_MAX. */
static uint32_t next_timer(const xfer_core *core, uint64_t key,
                           uint64_t order, bool first)
{
    const xfer_heap *h = &core->timers;
    uint32_t best = UINT32_MAX;
    uint64_t bk = 0, bo = 0;
    for (uint32_t i = 0; i < xfer_heap_count(h); i++) {
        uint32_t s = xfer_heap_slot_at(h, i);
        uint64_t k = 0, o = 0;
        xfer_heap_get(h, s, &k, &o);
        bool after = first || k > key || (k == key && o > order);
        if (after && (best == UINT32_MAX || k < bk || (k == bk && o < bo))) {
            best = s;
            bk = k;
            bo = o;
        }
    }
    return best;
}

static void put_shard(xfer_le_enc *to, const xfer_transfer_shard *s)
{
    xfer_le_enc span = xfer_le_enc_span(to, SHARD_BYTES), *e = &span;
    xfer_le_enc_u64(e, s->resv_id);
    xfer_le_enc_u64(e, s->remote_addr);
    xfer_le_enc_u64(e, s->staging_off);
    xfer_le_enc_u32(e, s->len);
    xfer_le_enc_u32(e, s->rkey);
    xfer_le_enc_u8(e, s->resv);
    xfer_le_enc_u8(e, s->write);
    xfer_le_enc_u8(e, s->commit);
    xfer_le_enc_u8(e, s->cancel);
    xfer_le_enc_u8(e, s->cancel_attempts);
    xfer_le_enc_u8(e, s->eager);
}

/* A stream (fsm/stream.h): what names no shard into the rest; each part's
 * runs on shard k and shard k's cursor and spans into shard k's data, the
 * run's shard field left implied, so a canonical form can reorder shards
 * with them.  A part is its head, then per shard a run count and its runs;
 * a shard's cursor is three u32 and its spans a count and the pairs. */
_Static_assert(sizeof(xfer_stream) == 16 + 8 * XFER_STREAM_MAX_PARTS,
               "save the new xfer_stream field");
_Static_assert(sizeof(xfer_part) == 16, "save the new xfer_part field");
_Static_assert(sizeof(xfer_stream_shard) == 16 + sizeof(xfer_spans),
               "save the new xfer_stream_shard field");
#define PART_HEAD_BYTES 16u

/* Shard k's cursor index as saved: relative to k's first run of the part
 * it is in while that part lives (so a canonical form is free of the
 * other shards' run counts); else, meaning nothing, raw in a save and 0
 * in a canonical form. */
static uint32_t cursor_idx(const xfer_canon_out *o, const xfer_stream *st,
                           uint16_t k)
{
    const xfer_stream_shard *c = &st->sh[k];
    for (uint32_t i = 0; i < st->nparts; i++)
        if (st->parts[i]->seq == c->cur_seq)
            return c->cur_idx - xfer_part_start(st->parts[i])[k];
    return o->nshards ? 0 : c->cur_idx;
}

static void put_stream(xfer_canon_out *o, const xfer_stream *st,
                       uint16_t nshards)
{
    xfer_le_enc *e = xfer_canon_rest(o);
    xfer_le_enc_u32(e, st->next_seq);
    xfer_le_enc_u32(e, st->nparts);
    xfer_le_enc_u8(e, st->sealed);
    for (uint16_t k = 0; k < nshards; k++) {
        xfer_le_enc *s = xfer_canon_shard(o, k);
        const xfer_stream_shard *c = &st->sh[k];
        xfer_le_enc_u32(s, c->cur_seq);
        xfer_le_enc_u32(s, cursor_idx(o, st, k));
        xfer_le_enc_u32(s, c->fly_seq);
        xfer_le_enc_u32(s, c->spans.n);
        for (uint32_t i = 0; i < c->spans.n; i++) {
            xfer_le_enc_u32(s, c->spans.v[i][0]);
            xfer_le_enc_u32(s, c->spans.v[i][1]);
        }
    }
    for (uint32_t i = 0; i < st->nparts; i++) {
        xfer_part *p = st->parts[i];
        xfer_le_enc_u32(e, p->seq);
        xfer_le_enc_u32(e, p->n);
        xfer_le_enc_u32(e, p->unsent);
        xfer_le_enc_u16(e, p->inflight);
        xfer_le_enc_u8(e, p->released);
        xfer_le_enc_u8(e, p->failed);
        const uint32_t *start = xfer_part_start(p);
        for (uint16_t k = 0; k < nshards; k++) {
            xfer_le_enc *s = xfer_canon_shard(o, k);
            xfer_le_enc_u32(s, start[k + 1] - start[k]);
            for (uint32_t j = start[k]; j < start[k + 1]; j++) {
                xfer_le_enc_u64(s, p->r[j].staging_off);
                xfer_le_enc_u32(s, p->r[j].pool);
                xfer_le_enc_u32(s, p->r[j].len);
                xfer_le_enc_u32(s, p->r[j].resv_off);
            }
        }
    }
}

static void put_record(xfer_canon_out *o, const xfer_transfer *t)
{
    /* Masks and the reference keep their width in the rest, so the head
     * is HEAD_BYTES in a save and in a canonical form alike. */
    xfer_le_enc span = xfer_le_enc_span(xfer_canon_rest(o), HEAD_BYTES);
    xfer_le_enc *e = &span;
    xfer_le_enc_u16(e, t->nshards);
    xfer_le_enc_u64(e, xfer_canon_id(o, t->id));
    xfer_le_enc_u64(e, t->user_data);
    xfer_le_enc_u64(e, t->started_ns);
    xfer_le_enc_u64(e, t->deadline_ns);
    xfer_le_enc_u64(e, t->timer_ns);
    xfer_canon_mask(o, e, t->failed_shards);
    xfer_canon_mask(o, e, t->rollback_failed);
    xfer_le_enc_u32(e, t->attempt);
    xfer_le_enc_u32(e, t->group);
    xfer_le_enc_u32(e, t->pool);
    xfer_le_enc_u32(e, (uint32_t)t->status);
    xfer_le_enc_u16(e, t->pending);
    xfer_canon_ref(o, e, t->first_failed);
    xfer_le_enc_u8(e, t->state);
    xfer_le_enc_u8(e, t->fail_phase);
    xfer_le_enc_u8(e, t->timer_kind);
    xfer_le_enc_u8(e, t->stopping);
    xfer_le_enc_u8(e, t->may_hold);
    xfer_le_enc_u8(e, t->stop_deferred);
    xfer_le_enc_u8(e, t->cancel_round);
    xfer_le_enc_u8(e, t->eager);
    xfer_le_enc_u8(e, t->st != NULL);
    for (uint16_t k = 0; k < t->nshards; k++)
        put_shard(xfer_canon_shard(o, k), &t->shards[k]);
    if (t->st)
        put_stream(o, t->st, t->nshards);
}

/* The whole state, through o (a save or a canonical form). */
static void put_core(xfer_canon_out *o, const xfer_core *core)
{
    xfer_le_enc *e = xfer_canon_rest(o);
    xfer_le_enc_bytes(e, MAGIC, sizeof MAGIC);
    /* A canonical form is compared only with those of the same core. */
    xfer_le_enc_u64(e, o->nshards ? 0 : fingerprint(core));
    xfer_le_enc_u32(e, core->next_attempt);
    xfer_le_enc_u8(e, core->shutting_down);
    xfer_le_enc_u8(e, core->shutdown_done);
    xfer_le_enc_u64(e, core->last_now);
    xfer_le_enc_u32(e, core->live.n);
    uint64_t id = 0;
    for (uint32_t s; (s = next_by_id(o, core, id)) != UINT32_MAX;) {
        put_record(o, core->recs[s]);
        id = xfer_canon_id(o, core->recs[s]->id);
    }
    xfer_le_enc_u32(e, xfer_heap_count(&core->timers));
    uint64_t key = 0, order = 0;
    bool first = true;
    for (uint32_t s; (s = next_timer(core, key, order, first)) != UINT32_MAX;
         first = false) {
        xfer_heap_get(&core->timers, s, &key, &order);
        xfer_le_enc_u64(e, xfer_canon_id(o, core->recs[s]->id));
    }
    xfer_le_enc_u64(e, xfer_tomb_clock(&core->tombs));
    xfer_canon_tombs(o, &core->tombs, e);
}

int xfer_core_save(const xfer_core *core, uint8_t *buf, size_t len,
                   size_t *need)
{
    if (!core || !need || (!buf && len))
        return XFER_ERR_INVALID_ARG;
    if (core->ctx.nacts)
        return XFER_ERR_STATE;
    xfer_canon_out o;
    xfer_canon_begin_save(&o, buf, len);
    put_core(&o, core);
    *need = o.main.at;
    return xfer_le_enc_fits(&o.main) ? 0 : XFER_ERR_TOO_SMALL;
}

int xfer_core_canon(const xfer_core *core, uint16_t nshards, xfer_canon *out)
{
    if (!core || !out || nshards == 0 || nshards > core->cfg.max_shards)
        return XFER_ERR_INVALID_ARG;
    if (core->ctx.nacts)
        return XFER_ERR_STATE;
    for (uint32_t s = 0; s < core->cfg.max_transfers; s++)
        if (core->recs[s] && core->recs[s]->nshards != nshards)
            return XFER_ERR_STATE;
    xfer_canon_out o;
    xfer_canon_begin(&o, out, nshards);
    put_core(&o, core);
    return xfer_canon_end(&o, out);
}

/* ---------------------------------------------------------------------- */
/* Loading                                                                 */
/* ---------------------------------------------------------------------- */

/* Records are read, and written, a fixed-size part at a time through a
 * span (fsm/le.h): one bounds check per part instead of one per field. */

static void get_shard(xfer_le_dec *from, xfer_transfer_shard *s)
{
    xfer_le_dec span = xfer_le_dec_span(from, SHARD_BYTES), *d = &span;
    memset(s, 0, sizeof *s);
    s->resv_id = xfer_le_dec_u64(d);
    s->remote_addr = xfer_le_dec_u64(d);
    s->staging_off = xfer_le_dec_u64(d);
    s->len = xfer_le_dec_u32(d);
    s->rkey = xfer_le_dec_u32(d);
    s->resv = xfer_le_dec_u8(d);
    s->write = xfer_le_dec_u8(d);
    s->commit = xfer_le_dec_u8(d);
    s->cancel = xfer_le_dec_u8(d);
    s->cancel_attempts = xfer_le_dec_u8(d);
    s->eager = xfer_le_dec_u8(d);
    assert(!xfer_le_dec_ok(from) || xfer_le_dec_done(d)); /* SHARD_BYTES */
}

/* A record's fields (not its shards) into t, its shard count first;
 * *stream: the stream flag (a stream section follows the shards). */
static void get_head(xfer_le_dec *from, xfer_transfer *t, uint8_t *stream)
{
    xfer_le_dec span = xfer_le_dec_span(from, HEAD_BYTES), *d = &span;
    memset(t, 0, sizeof *t);
    t->nshards = xfer_le_dec_u16(d);
    t->id = xfer_le_dec_u64(d);
    t->user_data = xfer_le_dec_u64(d);
    t->started_ns = xfer_le_dec_u64(d);
    t->deadline_ns = xfer_le_dec_u64(d);
    t->timer_ns = xfer_le_dec_u64(d);
    t->failed_shards = xfer_le_dec_u64(d);
    t->rollback_failed = xfer_le_dec_u64(d);
    t->attempt = xfer_le_dec_u32(d);
    t->group = xfer_le_dec_u32(d);
    t->pool = xfer_le_dec_u32(d);
    t->status = (int32_t)xfer_le_dec_u32(d);
    t->pending = xfer_le_dec_u16(d);
    t->first_failed = xfer_le_dec_u16(d);
    t->state = xfer_le_dec_u8(d);
    t->fail_phase = xfer_le_dec_u8(d);
    t->timer_kind = xfer_le_dec_u8(d);
    t->stopping = xfer_le_dec_u8(d);
    t->may_hold = xfer_le_dec_u8(d);
    t->stop_deferred = xfer_le_dec_u8(d);
    t->cancel_round = xfer_le_dec_u8(d);
    t->eager = xfer_le_dec_u8(d);
    *stream = xfer_le_dec_u8(d);
    assert(!xfer_le_dec_ok(from) || xfer_le_dec_done(d)); /* HEAD_BYTES */
}

/* A saved stream at d, checked (core NULL) or loaded into *out, allocated
 * from core's allocator (false with *out NULL on a bad save; on an
 * allocation failure *nomem is set and what was made is freed).  Checked:
 * the counts within the bounds of fsm/stream.h, each part's runs adding
 * up to its run count, flags 0 or 1, runs not empty and on the shard's
 * reservation, the spans within their cap. */
static bool read_stream(xfer_core *core, xfer_le_dec *d,
                        const xfer_transfer *t, xfer_stream **out,
                        bool *nomem)
{
    const xfer_allocator *a = core ? &core->cfg.alloc : NULL;
    uint16_t ns = t->nshards;
    xfer_stream *st = NULL;
    bool ok = false;
    if (core && !(st = xfer_util_calloc(a, 1, xfer_stream_size(ns)))) {
        *nomem = true;
        goto out;
    }
    uint32_t next_seq = xfer_le_dec_u32(d), nparts = xfer_le_dec_u32(d);
    uint8_t sealed = xfer_le_dec_u8(d);
    if (!xfer_le_dec_ok(d) || nparts > XFER_STREAM_MAX_PARTS || sealed > 1 ||
        next_seq == 0)
        goto out;
    if (st) {
        st->next_seq = next_seq;
        st->sealed = sealed;
    }
    /* The cursors come first, so each part can check those in it. */
    xfer_stream_shard cur[XFER_MAX_SHARDS];
    for (uint16_t k = 0; k < ns; k++) {
        xfer_stream_shard *c = &cur[k];
        memset(c, 0, sizeof *c);
        c->cur_seq = xfer_le_dec_u32(d);
        c->cur_idx = xfer_le_dec_u32(d);
        c->fly_seq = xfer_le_dec_u32(d);
        c->spans.n = xfer_le_dec_u32(d);
        if (!xfer_le_dec_ok(d) || c->spans.n > XFER_STREAM_SPANS ||
            c->cur_seq >= next_seq || c->fly_seq >= next_seq)
            goto out;
        for (uint32_t i = 0; i < c->spans.n; i++) {
            c->spans.v[i][0] = xfer_le_dec_u32(d);
            c->spans.v[i][1] = xfer_le_dec_u32(d);
        }
        if (!xfer_le_dec_ok(d))
            goto out;
    }
    uint32_t prev_seq = 0;
    for (uint32_t i = 0; i < nparts; i++) {
        xfer_le_dec ph = xfer_le_dec_span(d, PART_HEAD_BYTES);
        xfer_part h;
        h.seq = xfer_le_dec_u32(&ph);
        h.n = xfer_le_dec_u32(&ph);
        h.unsent = xfer_le_dec_u32(&ph);
        h.inflight = xfer_le_dec_u16(&ph);
        h.released = xfer_le_dec_u8(&ph);
        h.failed = xfer_le_dec_u8(&ph);
        if (!xfer_le_dec_ok(d) || h.seq <= prev_seq || h.seq >= next_seq ||
            h.n == 0 || h.n > XFER_STREAM_MAX_RANGES || h.unsent > h.n ||
            h.inflight > ns || h.released > 1 || h.failed > 1)
            goto out;
        prev_seq = h.seq;
        xfer_part *p = NULL;
        if (st) {
            p = xfer_util_alloc(a, xfer_part_size(h.n, ns));
            if (!p) {
                *nomem = true;
                goto out;
            }
            memcpy(p, &h, sizeof h);
            st->parts[st->nparts++] = p;
        }
        uint32_t at = 0;
        for (uint16_t k = 0; k < ns; k++) {
            uint32_t c = xfer_le_dec_u32(d);
            if (!xfer_le_dec_ok(d) || c > h.n - at)
                goto out;
            if (p)
                xfer_part_start(p)[k] = at;
            /* A cursor in this part: saved relative to k's first run. */
            if (cur[k].cur_seq == h.seq) {
                if (cur[k].cur_idx > c)
                    goto out;
                cur[k].cur_idx += at;
            }
            for (uint32_t j = 0; j < c; j++, at++) {
                xfer_range r = {.shard = k};
                r.staging_off = xfer_le_dec_u64(d);
                r.pool = xfer_le_dec_u32(d);
                r.len = xfer_le_dec_u32(d);
                r.resv_off = xfer_le_dec_u32(d);
                if (!xfer_le_dec_ok(d) || r.len == 0 ||
                    r.resv_off > t->shards[k].len ||
                    r.len > t->shards[k].len - r.resv_off)
                    goto out;
                if (p)
                    p->r[at] = r;
            }
        }
        if (at != h.n)
            goto out;
        if (p)
            xfer_part_start(p)[ns] = at;
    }
    if (st)
        memcpy(st->sh, cur, (size_t)ns * sizeof cur[0]);
    ok = true;
out:
    if (!ok && st) {
        for (uint32_t i = 0; i < st->nparts; i++)
            xfer_util_free(a, st->parts[i]);
        xfer_util_free(a, st);
        st = NULL;
    }
    if (out)
        *out = st;
    return ok;
}

static bool head_ok(const xfer_core *core, const xfer_transfer *t,
                    uint64_t prev)
{
    return t->nshards >= 1 && t->nshards <= core->cfg.max_shards &&
           t->id > prev && t->state < XFER_TRANSFER_STATE_COUNT_ &&
           t->state != XFER_TRANSFER_STATE_TOMBSTONED;
}

/* The counts and the header, and where the records start. */
typedef struct saved {
    uint64_t ttl; /* the tombstones' (from the config) */
    uint32_t next_attempt, nrec;
    uint8_t shutting_down, shutdown_done;
    uint64_t last_now;
    size_t recs_at;
    size_t len;               /* the save's */
    const xfer_core *core;    /* the loading core */
} saved;

static bool get_header(const xfer_core *core, xfer_le_dec *d, saved *h)
{
    const uint8_t *m = xfer_le_dec_take(d, sizeof MAGIC);
    bool same = m && memcmp(m, MAGIC, sizeof MAGIC) == 0 &&
                xfer_le_dec_u64(d) == fingerprint(core);
    h->next_attempt = xfer_le_dec_u32(d);
    h->shutting_down = xfer_le_dec_u8(d);
    h->shutdown_done = xfer_le_dec_u8(d);
    h->last_now = xfer_le_dec_u64(d);
    h->nrec = xfer_le_dec_u32(d);
    h->recs_at = d->at;
    h->len = d->len;
    h->core = core;
    h->ttl = core->cfg.tombstone_ttl_ns;
    return xfer_le_dec_ok(d) && same && h->nrec <= core->cfg.max_transfers &&
           h->shutting_down <= 1 && h->shutdown_done <= 1;
}

/* One saved record at d, checked and passed over (its id > *prev, then
 * set in *prev; *timer its timer_ns when timer is not NULL). */
static bool skip_record(const xfer_core *core, xfer_le_dec *d,
                        uint64_t *prev)
{
    xfer_transfer *t = &(xfer_transfer){0};
    uint8_t stream = 0;
    get_head(d, t, &stream);
    if (!xfer_le_dec_ok(d) || !head_ok(core, t, *prev) || stream > 1 ||
        t->nshards > XFER_MAX_SHARDS)
        return false;
    /* read_stream checks runs against the shards' lengths. */
    xfer_transfer_shard sh[XFER_MAX_SHARDS];
    for (uint16_t k = 0; k < t->nshards; k++)
        get_shard(d, &sh[k]);
    bool ok = xfer_le_dec_ok(d);
    if (ok && stream) {
        xfer_transfer *full = NULL;
        /* read_stream reads only nshards and shards[k].len. */
        _Alignas(xfer_transfer) uint8_t mem[sizeof(xfer_transfer) +
                    XFER_MAX_SHARDS * sizeof(xfer_transfer_shard)];
        full = (xfer_transfer *)(void *)mem;
        memcpy(full, t, sizeof *t);
        memcpy(full->shards, sh, (size_t)t->nshards * sizeof sh[0]);
        ok = read_stream(NULL, d, full, NULL, NULL);
    }
    *prev = t->id;
    return ok;
}

/* Walk the saved records at d: each well formed, ids increasing. */
static bool check_records(const xfer_core *core, xfer_le_dec *d, uint32_t n)
{
    uint64_t prev = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!skip_record(core, d, &prev))
            return false;
    }
    return xfer_le_dec_ok(d);
}

/* The saved record with id `id` (its timer_ns in *timer), by walking the
 * records from `recs_at`, which check_records found whole. */
static bool find_saved(const uint8_t *buf, const saved *h, uint64_t id,
                       uint64_t *timer)
{
    xfer_le_dec d = xfer_le_dec_start(buf, h->len);
    d.at = h->recs_at;
    uint64_t prev = 0;
    for (uint32_t i = 0; i < h->nrec; i++) {
        const uint8_t *p = buf + d.at;
        if (xfer_le_get64(p + HEAD_ID_AT) == id) {
            *timer = xfer_le_get64(p + HEAD_TIMER_AT);
            return true;
        }
        if (!skip_record(h->core, &d, &prev))
            return false;
    }
    return false;
}

/* The timers: saved records, each once, with deadlines in firing order. */
static bool check_timers(const uint8_t *buf, const saved *h, xfer_le_dec *d)
{
    uint32_t n = xfer_le_dec_u32(d);
    size_t ids_at = d->at;
    uint64_t prev = 0;
    if (!xfer_le_dec_ok(d) || n > h->nrec)
        return false;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t id = xfer_le_dec_u64(d), timer;
        if (!xfer_le_dec_ok(d) || !find_saved(buf, h, id, &timer) ||
            timer < prev)
            return false;
        for (uint32_t j = 0; j < i; j++)
            if (xfer_le_get64(buf + ids_at + 8 * (size_t)j) == id)
                return false;
        prev = timer;
    }
    return true;
}

typedef struct tomb_ctx {
    const uint8_t *buf;
    const saved *h;
    uint64_t clock; /* the saved clock of the table */
} tomb_ctx;

/* A tombstone's id is not one of a live transfer, and it was born no
 * later than the table's clock says. */
static bool tomb_ok(void *ud, const xfer_tomb_entry *e)
{
    const tomb_ctx *c = ud;
    uint64_t timer;
    return e->expires_ns - c->h->ttl <= c->clock &&
           !find_saved(c->buf, c->h, e->id, &timer);
}

/* Pass 1: the whole save, without touching the core. */
static bool check_save(const xfer_core *core, const uint8_t *buf, size_t len,
                       saved *h)
{
    xfer_le_dec d = xfer_le_dec_start(buf, len);
    if (!get_header(core, &d, h) || !check_records(core, &d, h->nrec) ||
        !check_timers(buf, h, &d))
        return false;
    tomb_ctx c = {buf, h, xfer_le_dec_u64(&d)};
    return xfer_le_dec_ok(&d) &&
           xfer_tomb_check(&core->tombs, &d, h->nrec, tomb_ok, &c) &&
           xfer_le_dec_done(&d);
}

/* Forget every record, timer, tombstone and pending action. */
static void reset_state(xfer_core *core)
{
    const xfer_allocator *a = &core->cfg.alloc;
    uint32_t n = core->cfg.max_transfers;
    for (uint32_t s = 0; s < n; s++) {
        xfer_stream *st = core->recs[s] ? core->recs[s]->st : NULL;
        for (uint32_t i = 0; st && i < st->nparts; i++)
            xfer_util_free(a, st->parts[i]);
        xfer_util_free(a, st);
        xfer_util_free(a, core->recs[s]);
        core->recs[s] = NULL;
        xfer_heap_remove(&core->timers, s);
        core->free_slots[s] = n - 1 - s;
    }
    core->nfree = n;
    core->streams = 0;
    xfer_idmap_reset(&core->live);
    xfer_tomb_reset(&core->tombs);
    core->ctx.nacts = 0;
}

/* One checked record into the next free slot. */
static int apply_record(xfer_core *core, xfer_le_dec *d)
{
    xfer_transfer head;
    uint8_t stream = 0;
    get_head(d, &head, &stream);
    xfer_transfer *t = xfer_util_alloc(&core->cfg.alloc,
                                       xfer_transfer_size(head.nshards));
    if (!t)
        return XFER_ERR_NOMEM;
    memcpy(t, &head, sizeof head);
    for (uint16_t k = 0; k < head.nshards; k++)
        get_shard(d, &t->shards[k]);
    if (stream) {
        bool nomem = false;
        if (!read_stream(core, d, t, &t->st, &nomem)) {
            xfer_util_free(&core->cfg.alloc, t);
            return nomem ? XFER_ERR_NOMEM : XFER_ERR_FORMAT;
        }
        core->streams++;
    }
    t->slot = core->free_slots[--core->nfree];
    core->recs[t->slot] = t;
    xfer_idmap_put(&core->live, t->id, t->slot);
    return 0;
}

/* Pass 2 over a checked save. */
static int apply_save(xfer_core *core, const uint8_t *buf, size_t len,
                      const saved *h)
{
    xfer_le_dec d = xfer_le_dec_start(buf, len);
    d.at = h->recs_at;
    reset_state(core);
    core->next_attempt = h->next_attempt;
    core->shutting_down = h->shutting_down;
    core->shutdown_done = h->shutdown_done;
    core->last_now = h->last_now;
    for (uint32_t i = 0; i < h->nrec; i++) {
        int rc = apply_record(core, &d);
        if (rc)
            return rc;
    }
    /* Timers set in firing order, so ties fire as they would have. */
    uint32_t n = xfer_le_dec_u32(&d);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t slot = 0;
        xfer_idmap_get(&core->live, xfer_le_dec_u64(&d), &slot);
        xfer_heap_set(&core->timers, slot, core->recs[slot]->timer_ns);
    }
    uint64_t clock = xfer_le_dec_u64(&d);
    if (xfer_tomb_restore(&core->tombs, &d, h->nrec) != 0 ||
        !xfer_tomb_set_clock(&core->tombs, clock))
        return XFER_ERR_FORMAT;
    return 0;
}

int xfer_core_load(xfer_core *core, const uint8_t *buf, size_t len)
{
    if (!core || !buf)
        return XFER_ERR_INVALID_ARG;
    saved h;
    if (!check_save(core, buf, len, &h))
        return XFER_ERR_FORMAT;
    int rc = apply_save(core, buf, len, &h);
    if (rc)
        reset_state(core);
    return rc;
}
