/*
 * fsm/core.c - the transfer core: the container of transfer machines.
 *
 * It owns ids (live records and tombstones), the deadline heap, attempt
 * numbers and the action buffer.  Every event goes through the transfer
 * table's dispatcher (fsm/transfer.c); the core finds the id's state and
 * hands the cell what it needs: the live record, or for the NEW and
 * TOMBSTONED rows the id, the attempt and the tombstone (and for a
 * pre-emptive cancel a tombstone hold it took first).
 *
 * What must stay true here:
 *  - I6/I11: every live transfer holds a tombstone slot from submit on, so
 *    its end always tombstones without evicting anything; at the cap, submit
 *    and pre-emptive cancel get XFER_ERR_BUSY.
 *  - I7: a cancel for an unknown id leaves a tombstone.
 *  - I1: a submit that returns an error records nothing and emits nothing.
 *  - Bounded work: one call emits at most XFER_CORE_BATCH timer steps, so the
 *    action buffer sized at creation always has room.  Shutdown re-arms each
 *    transfer in a fan-out phase to fire at once, so the stops are also
 *    spread over bounded timer batches.
 *  - I10: iteration orders (timers, shutdown, foreach) depend on ids, slots
 *    assigned in submit order and times, never on pointers.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core_int.h"
#include "core_priv.h"
#include "util.h"

#define XFER_CORE_BATCH 16
#define XFER_TIMER_SHUTDOWN 3
/* Tombstone expiry wakes the driver at this granularity, not per entry. */
#define TOMB_SLACK_NS 10000000ull

/* ---------------------------------------------------------------------- */
/* Creation                                                                */
/* ---------------------------------------------------------------------- */

/* The bytes each version of the config, stats and view holds (util.h). */
static const size_t config_lens[] = {sizeof(xfer_core_config)};
static const size_t stats_lens[] = {sizeof(xfer_core_stats)};
static const size_t view_lens[] = {sizeof(xfer_transfer_view)};

void xfer_core_config_default(xfer_core_config *cfg)
{
    if (!cfg)
        return;
    *cfg = (xfer_core_config){
        .version = XFER_CORE_CONFIG_VERSION,
        .max_transfers = 65536,
        .tombstone_ttl_ns = 60ull * 1000000000ull,
        .consumer_lease_ns = 10ull * 1000000000ull,
        .net_margin_ns = 20ull * 1000000000ull,
        .default_deadline_ns = 30ull * 1000000000ull,
        .cancel_op_timeout_ns = 5ull * 1000000000ull,
        .cancel_backoff_ns = 10000000ull,
        .cancel_max_attempts = 5,
        .max_shards = XFER_MAX_SHARDS,
        .eager_max_bytes = 0};
}

/* Zero fields take their defaults (those of xfer_core_config_default, and
 * the derived max_tombstones). */
static void set_defaults(xfer_core_config *c)
{
    if (!c->max_transfers)
        c->max_transfers = 65536;
    if (!c->max_tombstones)
        c->max_tombstones = 4 * c->max_transfers;
    if (!c->tombstone_ttl_ns)
        c->tombstone_ttl_ns = 60ull * 1000000000ull;
    if (!c->consumer_lease_ns)
        c->consumer_lease_ns = 10ull * 1000000000ull;
    if (!c->net_margin_ns)
        c->net_margin_ns = 20ull * 1000000000ull;
    if (!c->default_deadline_ns)
        c->default_deadline_ns = 30ull * 1000000000ull;
    if (!c->cancel_op_timeout_ns)
        c->cancel_op_timeout_ns = 5ull * 1000000000ull;
    if (!c->cancel_backoff_ns)
        c->cancel_backoff_ns = 10000000ull;
    if (!c->cancel_max_attempts)
        c->cancel_max_attempts = 5;
    if (!c->max_shards)
        c->max_shards = XFER_MAX_SHARDS;
}

/* The caps fit their tables, and a tombstone outlives the consumer's
 * lease plus the time a message may still be in flight (DESIGN.md 2: a
 * shorter one lets a late submit recreate an id whose consumer state may
 * still live). */
static bool config_ok(const xfer_core_config *c)
{
    return c->max_shards <= XFER_MAX_SHARDS &&
           c->max_transfers <= (1u << 28) &&
           c->max_tombstones >= c->max_transfers &&
           c->max_tombstones <= (1u << 29) && c->cancel_max_attempts < 250 &&
           c->consumer_lease_ns <= UINT64_MAX - c->net_margin_ns &&
           c->tombstone_ttl_ns >= c->consumer_lease_ns + c->net_margin_ns;
}

static void emit_config(xfer_core *core)
{
    const xfer_core_config *c = &core->cfg;
    xfer_trace_rec r0 = {
        .machine = XFER_MACHINE_CONFIG, .event = 0, .shard = c->max_shards,
        .arg0 = c->max_transfers | (uint64_t)c->max_tombstones << 32,
        .arg1 = c->tombstone_ttl_ns, .arg2 = c->default_deadline_ns};
    xfer_util_emit(&core->ctx.trace, &core->ctx.seq, &r0);
    if (c->eager_max_bytes) {
        /* Only when on, so traces without the eager path stay as they
         * were; before record 1, which makes a replaying core. */
        xfer_trace_rec r2 = {.machine = XFER_MACHINE_CONFIG, .event = 2,
                             .shard = c->max_shards,
                             .arg0 = c->eager_max_bytes};
        xfer_util_emit(&core->ctx.trace, &core->ctx.seq, &r2);
    }
    xfer_trace_rec r1 = {
        .machine = XFER_MACHINE_CONFIG, .event = 1, .shard = c->max_shards,
        .arg0 = c->cancel_op_timeout_ns, .arg1 = c->cancel_backoff_ns,
        .arg2 = c->cancel_max_attempts | (uint64_t)c->attempt_base << 32};
    xfer_util_emit(&core->ctx.trace, &core->ctx.seq, &r1);
}

static int alloc_tables(xfer_core *core)
{
    const xfer_allocator *a = &core->cfg.alloc;
    uint32_t n = core->cfg.max_transfers ? core->cfg.max_transfers : 1;
    core->recs = xfer_util_calloc(a, n, sizeof *core->recs);
    core->free_slots = xfer_util_calloc(a, n, sizeof *core->free_slots);
    core->spare = xfer_util_calloc(a, n, sizeof *core->spare);
    core->ctx.cap = XFER_CORE_BATCH * ((size_t)core->cfg.max_shards + 3 +
                                       XFER_STREAM_MAX_PARTS) +
                    (size_t)core->cfg.max_shards + 8 + XFER_STREAM_MAX_PARTS;
    core->ctx.acts = xfer_util_calloc(a, core->ctx.cap, sizeof(xfer_action));
    if (!core->recs || !core->free_slots || !core->spare || !core->ctx.acts)
        return XFER_ERR_NOMEM;
    int rc = xfer_idmap_init(&core->live, n, a);
    if (!rc)
        rc = xfer_heap_init(&core->timers, n, a);
    if (!rc)
        rc = xfer_tomb_init(&core->tombs, core->cfg.max_tombstones,
                            core->cfg.tombstone_ttl_ns, a);
    /* Slots are handed out lowest first: a stack with 0 on top. */
    for (uint32_t i = 0; i < n; i++)
        core->free_slots[i] = n - 1 - i;
    core->nfree = n;
    return rc;
}

int xfer_core_new(const xfer_core_config *cfg, xfer_core **out)
{
    if (!out)
        return XFER_ERR_INVALID_ARG;
    xfer_core_config c;
    xfer_core_config_default(&c);
    if (cfg && xfer_util_versioned_copy(&c, cfg, cfg->version, config_lens,
                                        XFER_UTIL_NVERSIONS(config_lens)))
        return XFER_ERR_INVALID_ARG;
    set_defaults(&c);
    if (!config_ok(&c))
        return XFER_ERR_INVALID_ARG;
    xfer_core *core = xfer_util_calloc(&c.alloc, 1, sizeof *core);
    if (!core)
        return XFER_ERR_NOMEM;
    core->cfg = c;
    core->ctx.cfg = &core->cfg;
    core->ctx.trace = c.trace;
    core->ctx.tombs = &core->tombs;
    core->next_attempt = c.attempt_base;
    int rc = alloc_tables(core);
    if (rc) {
        xfer_core_del(core);
        return rc;
    }
    emit_config(core);
    *out = core;
    return 0;
}

/* Free a record's stream and the parts it still has. */
static void free_stream(xfer_core *core, xfer_transfer *t)
{
    if (!t->st)
        return;
    for (uint32_t i = 0; i < t->st->nparts; i++)
        xfer_util_free(&core->cfg.alloc, t->st->parts[i]);
    xfer_util_free(&core->cfg.alloc, t->st);
    t->st = NULL;
    core->streams--;
}

/* Free the parts the step released (their RELEASE_PART is out). */
static void free_released(xfer_core *core, xfer_transfer *t)
{
    xfer_stream *st = t->st;
    uint32_t k = 0;
    for (uint32_t i = 0; i < st->nparts; i++) {
        if (st->parts[i]->released)
            xfer_util_free(&core->cfg.alloc, st->parts[i]);
        else
            st->parts[k++] = st->parts[i];
    }
    st->nparts = k;
}

void xfer_core_del(xfer_core *core)
{
    if (!core)
        return;
    const xfer_allocator a = core->cfg.alloc;
    if (core->recs)
        for (uint32_t i = 0; i < core->cfg.max_transfers; i++) {
            if (core->recs[i])
                free_stream(core, core->recs[i]);
            xfer_util_free(&a, core->recs[i]);
        }
    xfer_util_free(&a, core->recs);
    xfer_util_free(&a, core->free_slots);
    for (uint32_t i = 0; i < core->nspare; i++)
        xfer_util_free(&a, core->spare[i]);
    xfer_util_free(&a, core->spare);
    xfer_util_free(&a, core->ctx.acts);
    xfer_idmap_clear(&core->live, &a);
    xfer_heap_clear(&core->timers, &a);
    xfer_tomb_clear(&core->tombs, &a);
    xfer_util_free(&a, core);
}

/* ---------------------------------------------------------------------- */
/* Tracing of inputs and notes                                             */
/* ---------------------------------------------------------------------- */

/* An input record: a result's op in old_state, or for a SUBMIT whether
 * its group allowed the eager path (0 otherwise, as before it existed;
 * 2: a stream's open, xfer_core_open). */
static void trace_input(xfer_core *core, uint64_t now, unsigned ev,
                        uint64_t id, uint16_t shard,
                        const xfer_shard_result *r, uint64_t a0,
                        uint64_t a1, uint64_t a2, unsigned eager_ok)
{
    if (!core->ctx.trace.fn)
        return;
    xfer_trace_rec rec = {.time_ns = now, .id = id, .machine = XFER_MACHINE_INPUT,
                          .event = (uint8_t)ev, .shard = shard, .arg0 = a0,
                          .arg1 = a1, .arg2 = a2,
                          .old_state = eager_ok};
    if (r) {
        rec.attempt = r->attempt;
        rec.error = r->status;
        rec.old_state = r->op;
    }
    xfer_util_emit(&core->ctx.trace, &core->ctx.seq, &rec);
}

static void note(xfer_core *core, uint64_t now, unsigned what, uint64_t id,
                 uint32_t attempt, uint16_t shard, int32_t err)
{
    xfer_step_note(&core->ctx.trace, &core->ctx.seq, now, what, id, attempt,
                   shard, err);
}

static void drop_tomb(void *ud, const xfer_tomb_entry *e)
{
    xfer_core *core = ud;
    core->st.tombstones_expired++;
    note(core, core->last_now, XFER_NOTE_TOMB_EXPIRED, e->id, e->attempt,
         XFER_SHARD_NONE, 0);
}

/* Clamp time to be monotonic and drop every tombstone due by then, so an
 * expired entry is never mistaken for a live one by the lookups that follow
 * (found by xfer-check, FINDINGS.md F1).  Dropping emits no action. */
static uint64_t clamp_now(xfer_core *core, uint64_t now)
{
    if (now < core->last_now)
        now = core->last_now;
    core->last_now = now;
    if (xfer_tomb_next_expiry(&core->tombs) <= now)
        xfer_tomb_expire(&core->tombs, now, 0, drop_tomb, core);
    return now;
}

/* ---------------------------------------------------------------------- */
/* Record lifecycle                                                        */
/* ---------------------------------------------------------------------- */

static void count_completion(xfer_core *core, const xfer_result *res)
{
    core->st.completed++;
    if (res->status == 0)
        core->st.succeeded++;
    else if (res->status == XFER_ERR_CANCELLED ||
             res->status == XFER_ERR_PEER_CANCELLED ||
             res->status == XFER_ERR_SHUTDOWN ||
             res->status == XFER_ERR_ABANDONED)
        core->st.cancelled++;
    else
        core->st.failed++;
}

/* After a step: re-arm the record's timer, or retire it if it ended. */
static void settle(xfer_core *core, xfer_transfer *t, uint64_t now,
                   size_t first_action)
{
    for (size_t i = first_action; i < core->ctx.nacts; i++)
        if (core->ctx.acts[i].kind == XFER_ACT_COMPLETE)
            count_completion(core, &core->ctx.acts[i].result);
    if (t->st)
        free_released(core, t);
    if (t->state == XFER_TRANSFER_STATE_TOMBSTONED)
        free_stream(core, t);
    if (t->state != XFER_TRANSFER_STATE_TOMBSTONED) {
        /* Most steps leave the timer alone: touch the heap only when it
         * moved (an unchanged entry keeps its place among equal ones). */
        bool armed = xfer_heap_contains(&core->timers, t->slot);
        if (t->timer_ns == UINT64_MAX)
            xfer_heap_remove(&core->timers, t->slot);
        else if (!armed || core->timers.key[t->slot] != t->timer_ns)
            xfer_heap_set(&core->timers, t->slot, t->timer_ns);
        return;
    }
    uint8_t reason = t->status == 0 ? 0 : t->fail_phase;
    xfer_tomb_insert_held(&core->tombs, now, t->id, t->attempt, reason);
    xfer_heap_remove(&core->timers, t->slot);
    xfer_idmap_del(&core->live, t->id);
    core->recs[t->slot] = NULL;
    core->free_slots[core->nfree++] = t->slot;
    if (core->nspare < core->cfg.max_transfers)
        core->spare[core->nspare++] = t; /* for the next submit */
    else
        xfer_util_free(&core->cfg.alloc, t); /* a load made more records */
    if (core->shutting_down && !core->shutdown_done &&
        core->live.n == 0) {
        core->shutdown_done = 1;
        assert(core->ctx.nacts < core->ctx.cap);
        xfer_action *a = &core->ctx.acts[core->ctx.nacts++];
        memset(a, 0, sizeof *a);
        a->kind = XFER_ACT_SHUTDOWN_DONE;
        a->shard = XFER_SHARD_NONE;
        xfer_transfer_trace_action(&core->ctx, now, a);
    }
}

/* Run a step through the table; a step of a record then settles it. */
static int step(xfer_core *core, xfer_transfer_step *e)
{
    size_t first = core->ctx.nacts;
    int rc = xfer_transfer_dispatch(&core->ctx, e);
    if (e->t)
        settle(core, e->t, e->step.now_ns, first);
    return rc;
}

/* A step of `event` on the live record t. */
static void step_record(xfer_core *core, xfer_transfer *t, uint64_t now,
                        unsigned event, const xfer_shard_result *r)
{
    xfer_transfer_step e = xfer_transfer_step_make(now, event, t->id);
    e.t = t;
    e.r = r;
    e.attempt = t->attempt;
    step(core, &e);
}

/* Room for one more step's actions (a fan-out of S ops, RELEASE_STAGING,
 * COMPLETE and SHUTDOWN_DONE).  A driver that does not clear the list
 * between calls gets XFER_ERR_BUSY instead of an overflow. */
static bool room(const xfer_core *core)
{
    return core->ctx.cap - core->ctx.nacts >=
           (size_t)core->cfg.max_shards + 4 +
               (core->streams ? XFER_STREAM_MAX_PARTS : 0);
}

static xfer_transfer *find_live(const xfer_core *core, uint64_t id)
{
    uint32_t slot;
    if (!xfer_idmap_get(&core->live, id, &slot))
        return NULL;
    return core->recs[slot];
}

/*
 * The state of e->id for the step: its live record's (returned; the
 * caller decides whether the step acts on it), TOMBSTONED with the
 * tombstone's attempt and reason, or NEW.
 */
static inline xfer_transfer *locate(const xfer_core *core,
                                    xfer_transfer_step *e)
{
    xfer_transfer *t = find_live(core, e->id);
    if (t) {
        e->step.from = t->state;
        e->attempt = t->attempt;
        return t;
    }
    const xfer_tomb_entry *te = xfer_tomb_find(&core->tombs, e->id);
    if (te) {
        e->step.from = XFER_TRANSFER_STATE_TOMBSTONED;
        e->attempt = te->attempt;
        e->tomb_reason = te->reason;
    }
    return NULL;
}

static bool submit_args_ok(const xfer_core *core, const xfer_submit_args *a)
{
    return a && a->id != 0 && a->nshards != 0 &&
           a->nshards <= core->cfg.max_shards && a->slices;
}

/* A record for a transfer over nshards: the last finished one when it has
 * as many shards (xfer_transfer_init clears it), else a new one.  A spare
 * of another size is freed first, so live + spare records stay within
 * max_transfers.  NULL when out of memory. */
static xfer_transfer *take_record(xfer_core *core, uint16_t nshards)
{
    if (core->nspare) {
        xfer_transfer *t = core->spare[--core->nspare];
        if (t->nshards == nshards)
            return t;
        xfer_util_free(&core->cfg.alloc, t);
    }
    return xfer_util_alloc(&core->cfg.alloc, xfer_transfer_size(nshards));
}

/* NEW + SUBMIT: the record the submit creates, with its tombstone hold,
 * or the error that refuses it (nothing recorded, nothing emitted but a
 * TOMB_FULL note). */
static int new_record(xfer_core *core, uint64_t now, const xfer_submit_args *a,
                      uint64_t deadline, xfer_transfer **out)
{
    if (core->live.n >= core->cfg.max_transfers || !room(core))
        return XFER_ERR_BUSY;
    if (xfer_tomb_hold(&core->tombs, now)) {
        core->st.tombstone_busy++;
        note(core, now, XFER_NOTE_TOMB_FULL, a->id, 0, XFER_SHARD_NONE,
             XFER_ERR_BUSY);
        return XFER_ERR_BUSY;
    }
    xfer_transfer *t = take_record(core, a->nshards);
    if (!t) {
        xfer_tomb_unhold(&core->tombs);
        return XFER_ERR_NOMEM;
    }
    if (++core->next_attempt == 0)
        core->next_attempt = 1;
    xfer_transfer_init(t, a, core->next_attempt, now, deadline);
    t->slot = core->free_slots[--core->nfree];
    core->recs[t->slot] = t;
    xfer_idmap_put(&core->live, t->id, t->slot);
    core->st.submitted++;
    *out = t;
    return 0;
}

int xfer_core_submit(xfer_core *core, uint64_t now_ns,
                     const xfer_submit_args *a)
{
    if (!core)
        return XFER_ERR_INVALID_ARG;
    now_ns = clamp_now(core, now_ns);
    uint64_t deadline = a && a->deadline_ns
                            ? a->deadline_ns
                            : now_ns + core->cfg.default_deadline_ns;
    if (a)
        trace_input(core, now_ns, XFER_TRANSFER_EVENT_SUBMIT, a->id,
                    a->nshards, NULL, deadline,
                    (uint64_t)a->group << 32 | a->pool, a->user_data,
                    a->eager_ok);
    if (!submit_args_ok(core, a))
        return XFER_ERR_INVALID_ARG;
    if (core->shutting_down)
        return XFER_ERR_SHUTDOWN;
    xfer_transfer_step e =
        xfer_transfer_step_make(now_ns, XFER_TRANSFER_EVENT_SUBMIT, a->id);
    /* A live id's record is not the submit's: the step gets none. */
    (void)locate(core, &e);
    if (e.step.from != XFER_TRANSFER_STATE_NEW)
        return step(core, &e); /* EXISTS, or CANCELLED (tombstoned) */
    int rc = new_record(core, now_ns, a, deadline, &e.t);
    if (rc)
        return rc;
    e.attempt = e.t->attempt;
    return step(core, &e);
}

/* ---------------------------------------------------------------------- */
/* Streams                                                                 */
/* ---------------------------------------------------------------------- */

int xfer_core_open(xfer_core *core, uint64_t now_ns, const xfer_open_args *a)
{
    xfer_slice slices[XFER_MAX_SHARDS];
    if (!core || !a || a->id == 0 || a->nshards == 0 ||
        a->nshards > core->cfg.max_shards || !a->lens)
        return XFER_ERR_INVALID_ARG;
    for (uint16_t k = 0; k < a->nshards; k++) {
        if (a->lens[k] == 0)
            return XFER_ERR_INVALID_ARG;
        slices[k] = (xfer_slice){.off = 0, .len = a->lens[k]};
    }
    now_ns = clamp_now(core, now_ns);
    uint64_t deadline = a->deadline_ns ? a->deadline_ns
                                       : now_ns + core->cfg.default_deadline_ns;
    /* A SUBMIT input marked 2: an open (xfer-trace). */
    trace_input(core, now_ns, XFER_TRANSFER_EVENT_SUBMIT, a->id, a->nshards,
                NULL, deadline, (uint64_t)a->group << 32, a->user_data, 2);
    if (core->shutting_down)
        return XFER_ERR_SHUTDOWN;
    if (core->ctx.cap - core->ctx.nacts <
        (size_t)core->cfg.max_shards + 4 + XFER_STREAM_MAX_PARTS)
        return XFER_ERR_BUSY;
    xfer_transfer_step e =
        xfer_transfer_step_make(now_ns, XFER_TRANSFER_EVENT_SUBMIT, a->id);
    (void)locate(core, &e);
    if (e.step.from != XFER_TRANSFER_STATE_NEW)
        return step(core, &e); /* EXISTS, or CANCELLED (tombstoned) */
    xfer_stream *st =
        xfer_util_calloc(&core->cfg.alloc, 1, xfer_stream_size(a->nshards));
    if (!st)
        return XFER_ERR_NOMEM;
    st->next_seq = 1;
    xfer_submit_args sa = {.id = a->id, .group = a->group,
                           .nshards = a->nshards, .slices = slices,
                           .deadline_ns = deadline, .user_data = a->user_data};
    int rc = new_record(core, now_ns, &sa, deadline, &e.t);
    if (rc) {
        xfer_util_free(&core->cfg.alloc, st);
        return rc;
    }
    e.t->st = st;
    core->streams++;
    e.attempt = e.t->attempt;
    return step(core, &e);
}

static int cmp_run(const void *x, const void *y)
{
    const xfer_range *a = x, *b = y;
    if (a->shard != b->shard)
        return a->shard < b->shard ? -1 : 1;
    if (a->resv_off != b->resv_off)
        return a->resv_off < b->resv_off ? -1 : 1;
    return 0;
}

/* The part of n ranges, checked against t's reservations, sorted and
 * joined; NULL with *rc set when refused. */
static xfer_part *make_part(xfer_core *core, const xfer_transfer *t,
                            const xfer_range *r, uint32_t n, int *rc)
{
    for (uint32_t i = 0; i < n; i++)
        if (r[i].len == 0 || r[i].shard >= t->nshards ||
            r[i].resv_off > t->shards[r[i].shard].len ||
            r[i].len > t->shards[r[i].shard].len - r[i].resv_off) {
            *rc = XFER_ERR_INVALID_ARG;
            return NULL;
        }
    xfer_part *p =
        xfer_util_alloc(&core->cfg.alloc, xfer_part_size(n, t->nshards));
    if (!p) {
        *rc = XFER_ERR_NOMEM;
        return NULL;
    }
    memset(p, 0, sizeof *p);
    memcpy(p->r, r, (size_t)n * sizeof *r);
    qsort(p->r, n, sizeof *r, cmp_run);
    /* One WRITE per run contiguous in both staging and reservation. */
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        xfer_range *q = m ? &p->r[m - 1] : NULL;
        const xfer_range *c = &p->r[i];
        if (q && q->shard == c->shard && q->pool == c->pool &&
            q->staging_off + q->len == c->staging_off &&
            q->resv_off + q->len == c->resv_off) {
            q->len += c->len;
            continue;
        }
        p->r[m++] = *c;
    }
    p->n = m;
    uint32_t *start = xfer_part_start(p);
    uint32_t at = 0;
    for (uint16_t k = 0; k <= t->nshards; k++) {
        while (at < m && p->r[at].shard < k)
            at++;
        start[k] = at;
    }
    return p;
}

int xfer_core_part(xfer_core *core, uint64_t now_ns, uint64_t id,
                   const xfer_range *r, uint32_t n, uint32_t *part)
{
    if (!core || id == 0 || !r || n == 0 || n > XFER_STREAM_MAX_RANGES)
        return XFER_ERR_INVALID_ARG;
    if (!room(core))
        return XFER_ERR_BUSY;
    now_ns = clamp_now(core, now_ns);
    /* One input record per part: its range count and the first range. */
    trace_input(core, now_ns, XFER_TRANSFER_EVENT_PART, id, r[0].shard, NULL,
                n, r[0].staging_off, (uint64_t)r[0].resv_off << 32 | r[0].len,
                false);
    xfer_transfer_step e =
        xfer_transfer_step_make(now_ns, XFER_TRANSFER_EVENT_PART, id);
    e.t = locate(core, &e);
    /* A shutdown stops every stream (from the timer, in batches): from
     * its request on, nothing more is taken, as for a submit. */
    if (core->shutting_down && e.t && !e.t->status)
        return XFER_ERR_SHUTDOWN;
    int rc = 0;
    /* The part is made for every stream that may still take parts by its
     * state; whether a failure or a stop refuses it is the machine's
     * (h_part), which the table holds, not a check beside it here. */
    if (e.t && e.t->st &&
        (e.t->state == XFER_TRANSFER_STATE_RESERVING ||
         e.t->state == XFER_TRANSFER_STATE_WRITING) &&
        !e.t->st->sealed) {
        /* Out of memory, the step still runs: a failed or stopping
         * stream answers its status, a healthy one NOMEM (h_part). */
        e.part = make_part(core, e.t, r, n, &rc);
        if (!e.part && rc != XFER_ERR_NOMEM)
            return rc;
    }
    rc = step(core, &e);
    if (e.part) /* not taken */
        xfer_util_free(&core->cfg.alloc, e.part);
    if (rc == 0 && part)
        *part = e.part_seq;
    return rc;
}

int xfer_core_seal(xfer_core *core, uint64_t now_ns, uint64_t id)
{
    if (!core || id == 0)
        return XFER_ERR_INVALID_ARG;
    if (!room(core))
        return XFER_ERR_BUSY;
    now_ns = clamp_now(core, now_ns);
    trace_input(core, now_ns, XFER_TRANSFER_EVENT_SEAL, id, XFER_SHARD_NONE,
                NULL, 0, 0, 0, false);
    xfer_transfer_step e =
        xfer_transfer_step_make(now_ns, XFER_TRANSFER_EVENT_SEAL, id);
    e.t = locate(core, &e);
    if (core->shutting_down && e.t && !e.t->status)
        return XFER_ERR_SHUTDOWN; /* as xfer_core_part */
    return step(core, &e);
}

int xfer_core_stream_ranges(const xfer_core *core, uint64_t id,
                            uint16_t shard, uint32_t (*out)[2], size_t cap,
                            size_t *n)
{
    if (!core || !n || (!out && cap))
        return XFER_ERR_INVALID_ARG;
    const xfer_transfer *t = find_live(core, id);
    if (!t || !t->st || shard >= t->nshards)
        return XFER_ERR_NOT_FOUND;
    const xfer_spans *sp = &t->st->sh[shard].spans;
    for (uint32_t i = 0; i < sp->n && i < cap; i++) {
        out[i][0] = sp->v[i][0];
        out[i][1] = sp->v[i][1] - sp->v[i][0];
    }
    *n = sp->n;
    return 0;
}

int xfer_core_cancel(xfer_core *core, uint64_t now_ns, uint64_t id)
{
    if (!core || id == 0)
        return XFER_ERR_INVALID_ARG;
    now_ns = clamp_now(core, now_ns);
    if (!room(core))
        return XFER_ERR_BUSY;
    trace_input(core, now_ns, XFER_TRANSFER_EVENT_USER_CANCEL, id, XFER_SHARD_NONE, NULL,
                0, 0, 0, false);
    xfer_transfer_step e =
        xfer_transfer_step_make(now_ns, XFER_TRANSFER_EVENT_USER_CANCEL, id);
    e.t = locate(core, &e);
    if (e.step.from == XFER_TRANSFER_STATE_NEW &&
        xfer_tomb_hold(&core->tombs, now_ns)) {
        /* The pre-emptive tombstone has no room: refused before the
         * table, so nothing of the id changes. */
        core->st.tombstone_busy++;
        note(core, now_ns, XFER_NOTE_TOMB_FULL, id, 0, XFER_SHARD_NONE,
             XFER_ERR_BUSY);
        return XFER_ERR_BUSY;
    }
    return step(core, &e);
}

int xfer_core_on_result(xfer_core *core, uint64_t now_ns,
                        const xfer_shard_result *r)
{
    if (!core || !r || r->op >= XFER_OP_COUNT_ || r->status > 0)
        return XFER_ERR_INVALID_ARG;
    if (!room(core))
        return XFER_ERR_BUSY;
    now_ns = clamp_now(core, now_ns);
    unsigned ev = xfer_transfer_result_event(r);
    trace_input(core, now_ns, ev, r->id, r->shard, r, r->resv_id,
                r->remote_addr, r->rkey, false);
    xfer_transfer_step e = xfer_transfer_step_make(now_ns, ev, r->id);
    xfer_transfer *t = locate(core, &e);
    if (t && !xfer_transfer_expects(t, r)) {
        /* An older attempt's reply for a reused id, or a duplicate: not
         * an event of the record, so it does not reach the table. */
        core->ctx.late_replies++;
        note(core, now_ns, XFER_NOTE_LATE_REPLY, r->id, r->attempt,
             r->shard, r->status);
        return 0;
    }
    e.t = t;
    e.r = r;
    e.attempt = r->attempt;
    step(core, &e);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Time and shutdown                                                       */
/* ---------------------------------------------------------------------- */

void xfer_core_on_timer(xfer_core *core, uint64_t now_ns)
{
    if (!core)
        return;
    now_ns = clamp_now(core, now_ns);
    trace_input(core, now_ns, XFER_TRANSFER_EVENT_DEADLINE, 0, XFER_SHARD_NONE, NULL, 0,
                0, 0, false);
    for (unsigned i = 0; i < XFER_CORE_BATCH && room(core); i++) {
        uint32_t slot;
        uint64_t due;
        if (!xfer_heap_peek(&core->timers, &slot, &due) || due > now_ns)
            break;
        xfer_transfer *t = core->recs[slot];
        unsigned ev = t->timer_kind == XFER_TIMER_SHUTDOWN
                          ? XFER_TRANSFER_EVENT_SHUTDOWN
                          : xfer_transfer_timer_event(t);
        t->timer_kind = XFER_TIMER_NONE;
        t->timer_ns = UINT64_MAX;
        step_record(core, t, now_ns, ev, NULL);
    }
}

uint64_t xfer_core_next_deadline(const xfer_core *core)
{
    if (!core)
        return UINT64_MAX;
    uint64_t d = xfer_heap_min(&core->timers);
    uint64_t tomb = xfer_tomb_next_expiry(&core->tombs);
    if (tomb != UINT64_MAX && tomb + TOMB_SLACK_NS > tomb)
        tomb += TOMB_SLACK_NS;
    return d < tomb ? d : tomb;
}

static void shutdown_one(xfer_core *core, xfer_transfer *t, uint64_t now)
{
    if (t->state == XFER_TRANSFER_STATE_RESERVING || t->state == XFER_TRANSFER_STATE_WRITING) {
        /* The stop aborts up to S ops: run it from the timer, in batches. */
        t->timer_kind = XFER_TIMER_SHUTDOWN;
        t->timer_ns = now;
        xfer_heap_set(&core->timers, t->slot, now);
        return;
    }
    /* COMPLETING defers, CANCELLING ignores: neither emits anything. */
    step_record(core, t, now, XFER_TRANSFER_EVENT_SHUTDOWN, NULL);
}

void xfer_core_shutdown(xfer_core *core, uint64_t now_ns)
{
    if (!core || core->shutting_down || !room(core))
        return;
    now_ns = clamp_now(core, now_ns);
    trace_input(core, now_ns, XFER_TRANSFER_EVENT_SHUTDOWN, 0, XFER_SHARD_NONE, NULL, 0,
                0, 0, false);
    core->shutting_down = 1;
    for (uint32_t s = 0; s < core->cfg.max_transfers; s++)
        if (core->recs[s])
            shutdown_one(core, core->recs[s], now_ns);
    if (core->live.n == 0 && !core->shutdown_done) {
        core->shutdown_done = 1;
        xfer_action *a = &core->ctx.acts[core->ctx.nacts++];
        memset(a, 0, sizeof *a);
        a->kind = XFER_ACT_SHUTDOWN_DONE;
        a->shard = XFER_SHARD_NONE;
        xfer_transfer_trace_action(&core->ctx, now_ns, a);
    }
}

/*
 * The shutdown deadline passed: every transfer still live ends as soon as
 * the ops it has in flight answered (the transport confirms every abort,
 * I2), with no new cancel and no retry.  The work goes through the timer
 * heap, so on_timer does it in bounded batches: a record in CANCELLING is
 * due at once (DEADLINE aborts its cancels in flight, RETRY between rounds
 * ends it); one in COMPLETING or EAGER is due at once too (DEADLINE stops
 * it); one in RESERVING or WRITING is already stopped by the shutdown.
 */
void xfer_core_abandon(xfer_core *core, uint64_t now_ns)
{
    if (!core || !core->shutting_down || core->ctx.abandoning)
        return;
    now_ns = clamp_now(core, now_ns);
    core->ctx.abandoning = 1;
    for (uint32_t s = 0; s < core->cfg.max_transfers; s++) {
        xfer_transfer *t = core->recs[s];
        if (!t)
            continue;
        uint8_t kind;
        switch (t->state) {
        case XFER_TRANSFER_STATE_CANCELLING:
            kind = t->pending ? XFER_TIMER_DEADLINE : XFER_TIMER_RETRY;
            break;
        case XFER_TRANSFER_STATE_COMPLETING:
        case XFER_TRANSFER_STATE_EAGER:
            kind = XFER_TIMER_DEADLINE;
            break;
        default:
            continue;
        }
        t->timer_kind = kind;
        t->timer_ns = now_ns;
        xfer_heap_set(&core->timers, t->slot, now_ns);
    }
}

bool xfer_core_user_data(const xfer_core *core, uint64_t id, uint64_t *out)
{
    const xfer_transfer *t = find_live(core, id);
    if (t)
        *out = t->user_data;
    return t != NULL;
}

bool xfer_core_shard_resv(const xfer_core *core, uint64_t id, uint16_t shard,
                          uint32_t *attempt, uint64_t *resv_id)
{
    const xfer_transfer *t = find_live(core, id);
    if (!t || shard >= t->nshards || t->shards[shard].resv != XFER_SUB_OK)
        return false;
    *attempt = t->attempt;
    *resv_id = t->shards[shard].resv_id;
    return true;
}

int xfer_core_submit_refusal(const xfer_core *core, uint64_t id)
{
    const xfer_tomb_entry *te = xfer_tomb_find(&core->tombs, id);
    if (find_live(core, id))
        return XFER_ERR_EXISTS;
    if (!te)
        return XFER_ERR_BUSY;
    return te->attempt == 0 ? XFER_ERR_CANCELLED : XFER_ERR_REUSED;
}

/* ---------------------------------------------------------------------- */
/* Output and introspection                                                */
/* ---------------------------------------------------------------------- */

const xfer_action *xfer_core_actions(const xfer_core *core, size_t *n)
{
    *n = core ? core->ctx.nacts : 0;
    return core ? core->ctx.acts : NULL;
}

void xfer_core_actions_clear(xfer_core *core)
{
    if (core)
        core->ctx.nacts = 0;
}

int xfer_core_stats_get_versioned(const xfer_core *core, uint32_t version,
                                  xfer_core_stats *st)
{
    if (!core || !st)
        return XFER_ERR_INVALID_ARG;
    xfer_core_stats cur = core->st;
    cur.late_submits = core->ctx.late_submits;
    cur.late_replies = core->ctx.late_replies;
    cur.unknown_replies = core->ctx.unknown_replies;
    cur.illegal = core->ctx.illegal;
    cur.cancel_retries = core->ctx.cancel_retries;
    cur.cancel_gave_up = core->ctx.cancel_gave_up;
    cur.live = core->live.n;
    cur.tombstones = xfer_tomb_live(&core->tombs);
    return xfer_util_versioned_copy(st, &cur, version, stats_lens,
                                    XFER_UTIL_NVERSIONS(stats_lens));
}

uint64_t xfer_core_cell_hits(const xfer_core *core, unsigned state,
                             unsigned event)
{
    if (!core || state >= XFER_TRANSFER_STATE_COUNT_ ||
        event >= XFER_TRANSFER_EVENT_COUNT_)
        return 0;
    return core->ctx.cells_hit[state][event];
}

xfer_transfer_state xfer_core_state(const xfer_core *core, uint64_t id)
{
    const xfer_transfer *t = find_live(core, id);
    if (t)
        return (xfer_transfer_state)t->state;
    return xfer_tomb_find(&core->tombs, id) ? XFER_TRANSFER_STATE_TOMBSTONED
                                            : XFER_TRANSFER_STATE_NEW;
}

bool xfer_core_view_versioned(const xfer_core *core, uint64_t id,
                              uint32_t version, xfer_transfer_view *out)
{
    const xfer_transfer *t = core ? find_live(core, id) : NULL;
    if (!t || !out)
        return false;
    xfer_transfer_view v;
    memset(&v, 0, sizeof v);
    v.id = t->id;
    v.attempt = t->attempt;
    v.state = t->state;
    v.nshards = t->nshards;
    v.started_ns = t->started_ns;
    v.deadline_ns = t->deadline_ns;
    v.pending = t->pending;
    for (unsigned k = 0; k < t->nshards; k++) {
        const xfer_transfer_shard *s = &t->shards[k];
        v.shards[k] = (xfer_shard_view){s->resv, s->write, s->commit,
                                        s->cancel, s->cancel_attempts,
                                        s->eager};
    }
    return xfer_util_versioned_copy(out, &v, version, view_lens,
                                    XFER_UTIL_NVERSIONS(view_lens)) == 0;
}

void xfer_core_foreach(const xfer_core *core,
                       void (*fn)(void *ud, uint64_t id), void *ud)
{
    for (uint32_t s = 0; s < core->cfg.max_transfers; s++)
        if (core->recs[s])
            fn(ud, core->recs[s]->id);
}

size_t xfer_core_transfer_bytes(unsigned nshards)
{
    /* record + slot pointer + free-slot entry + heap + id map + the
     * tombstone slot it holds. */
    return xfer_transfer_size(nshards) + sizeof(void *) + sizeof(uint32_t) +
           XFER_HEAP_BYTES_PER_SLOT + xfer_idmap_bytes_per_entry();
}

size_t xfer_core_tombstone_bytes(void)
{
    return xfer_tomb_bytes_per_entry();
}

/* The figures the model checker reads after every step (fsm/core_int.h). */
void xfer_core_health_get(const xfer_core *core, xfer_core_health *h)
{
    h->illegal = core->ctx.illegal;
    h->live = core->live.n;
    h->tombstones = xfer_tomb_live(&core->tombs);
}
