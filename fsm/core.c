/*
 * fsm/core.c - the transfer core: the container of transfer machines.
 *
 * It owns ids (live records and tombstones), the deadline heap, attempt
 * numbers and the action buffer, and runs the NEW and TOMBSTONED rows of the
 * transfer table itself; fsm/transfer.c runs the rest.
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

static void set_defaults(xfer_core_config *c)
{
    if (!c->max_transfers)
        c->max_transfers = 65536;
    if (!c->max_tombstones)
        c->max_tombstones = 4 * c->max_transfers;
    if (!c->tombstone_ttl_ns)
        c->tombstone_ttl_ns = 60ull * 1000000000ull;
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

static bool config_ok(const xfer_core_config *c)
{
    return c->max_shards <= XFER_MAX_SHARDS &&
           c->max_transfers <= (1u << 28) &&
           c->max_tombstones >= c->max_transfers &&
           c->max_tombstones <= (1u << 29) && c->cancel_max_attempts < 250;
}

static void emit_config(xfer_core *core)
{
    const xfer_core_config *c = &core->cfg;
    xfer_trace_rec r0 = {
        .machine = XFER_MACHINE_CONFIG, .event = 0, .shard = c->max_shards,
        .arg0 = c->max_transfers | (uint64_t)c->max_tombstones << 32,
        .arg1 = c->tombstone_ttl_ns, .arg2 = c->default_deadline_ns};
    xfer_util_emit(&core->ctx.trace, &core->ctx.seq, &r0);
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
    core->ctx.cap = XFER_CORE_BATCH * ((size_t)core->cfg.max_shards + 3) +
                    (size_t)core->cfg.max_shards + 8;
    core->ctx.acts = xfer_util_calloc(a, core->ctx.cap, sizeof(xfer_action));
    if (!core->recs || !core->free_slots || !core->ctx.acts)
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
    xfer_core_config c = {0};
    if (cfg)
        c = *cfg;
    set_defaults(&c);
    if (!config_ok(&c))
        return XFER_ERR_INVALID_ARG;
    xfer_core *core = xfer_util_calloc(&c.alloc, 1, sizeof *core);
    if (!core)
        return XFER_ERR_NOMEM;
    core->cfg = c;
    core->ctx.cfg = &core->cfg;
    core->ctx.trace = c.trace;
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

void xfer_core_del(xfer_core *core)
{
    if (!core)
        return;
    const xfer_allocator a = core->cfg.alloc;
    if (core->recs)
        for (uint32_t i = 0; i < core->cfg.max_transfers; i++)
            xfer_util_free(&a, core->recs[i]);
    xfer_util_free(&a, core->recs);
    xfer_util_free(&a, core->free_slots);
    xfer_util_free(&a, core->ctx.acts);
    xfer_idmap_clear(&core->live, &a);
    xfer_heap_clear(&core->timers, &a);
    xfer_tomb_clear(&core->tombs, &a);
    xfer_util_free(&a, core);
}

/* ---------------------------------------------------------------------- */
/* Tracing of inputs and notes                                             */
/* ---------------------------------------------------------------------- */

static void trace_input(xfer_core *core, uint64_t now, unsigned ev,
                        uint64_t id, uint16_t shard,
                        const xfer_shard_result *r, uint64_t a0,
                        uint64_t a1, uint64_t a2)
{
    if (!core->ctx.trace.fn)
        return;
    xfer_trace_rec rec = {.time_ns = now, .id = id, .machine = XFER_MACHINE_INPUT,
                          .event = (uint8_t)ev, .shard = shard, .arg0 = a0,
                          .arg1 = a1, .arg2 = a2};
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
    if (!core->ctx.trace.fn)
        return;
    xfer_trace_rec rec = {.time_ns = now, .id = id, .attempt = attempt,
                          .shard = shard, .error = err,
                          .machine = XFER_MACHINE_NOTE, .event = (uint8_t)what};
    xfer_util_emit(&core->ctx.trace, &core->ctx.seq, &rec);
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
             res->status == XFER_ERR_SHUTDOWN)
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
    xfer_util_free(&core->cfg.alloc, t);
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

static void step(xfer_core *core, xfer_transfer *t, uint64_t now,
                 unsigned ev, const xfer_shard_result *r)
{
    size_t first = core->ctx.nacts;
    xfer_transfer_step(t, &core->ctx, now, ev, r);
    settle(core, t, now, first);
}

/* Room for one more step's actions (a fan-out of S ops, RELEASE_STAGING,
 * COMPLETE and SHUTDOWN_DONE).  A driver that does not clear the list
 * between calls gets XFER_ERR_BUSY instead of an overflow. */
static bool room(const xfer_core *core)
{
    return core->ctx.cap - core->ctx.nacts >=
           (size_t)core->cfg.max_shards + 4;
}

static xfer_transfer *find_live(const xfer_core *core, uint64_t id)
{
    uint32_t slot;
    if (!xfer_idmap_get(&core->live, id, &slot))
        return NULL;
    return core->recs[slot];
}

static int submit_check(xfer_core *core, uint64_t now,
                        const xfer_submit_args *a)
{
    if (!a || a->id == 0 || a->nshards == 0 ||
        a->nshards > core->cfg.max_shards || !a->slices)
        return XFER_ERR_INVALID_ARG;
    if (core->shutting_down)
        return XFER_ERR_SHUTDOWN;
    xfer_transfer *t = find_live(core, a->id);
    if (t) {
        xfer_transfer_trace_cell(&core->ctx, now, a->id, t->attempt,
                                 XFER_SHARD_NONE, t->state, XFER_TRANSFER_EVENT_SUBMIT,
                                 XFER_ERR_EXISTS);
        return XFER_ERR_EXISTS;
    }
    const xfer_tomb_entry *e = xfer_tomb_find(&core->tombs, a->id);
    if (e) {
        xfer_transfer_trace_cell(&core->ctx, now, a->id, e->attempt,
                                 XFER_SHARD_NONE, XFER_TRANSFER_STATE_TOMBSTONED,
                                 XFER_TRANSFER_EVENT_SUBMIT, XFER_ERR_CANCELLED);
        note(core, now, XFER_NOTE_LATE_SUBMIT, a->id, e->attempt,
             XFER_SHARD_NONE, XFER_ERR_CANCELLED);
        core->st.late_submits++;
        return XFER_ERR_CANCELLED;
    }
    if (core->live.n >= core->cfg.max_transfers)
        return XFER_ERR_BUSY;
    return 0;
}

int xfer_core_submit(xfer_core *core, uint64_t now_ns,
                     const xfer_submit_args *a)
{
    if (!core)
        return XFER_ERR_INVALID_ARG;
    now_ns = clamp_now(core, now_ns);
    uint64_t deadline = a && a->deadline_ns ? a->deadline_ns
                                            : now_ns +
                                                  core->cfg.default_deadline_ns;
    if (a)
        trace_input(core, now_ns, XFER_TRANSFER_EVENT_SUBMIT, a->id, a->nshards, NULL,
                    deadline, (uint64_t)a->group << 32 | a->pool,
                    a->user_data);
    int rc = submit_check(core, now_ns, a);
    if (rc)
        return rc;
    if (!room(core))
        return XFER_ERR_BUSY;
    if (xfer_tomb_hold(&core->tombs, now_ns)) {
        core->st.tombstone_busy++;
        note(core, now_ns, XFER_NOTE_TOMB_FULL, a->id, 0, XFER_SHARD_NONE,
             XFER_ERR_BUSY);
        return XFER_ERR_BUSY;
    }
    xfer_transfer *t = xfer_util_alloc(&core->cfg.alloc,
                                       xfer_transfer_size(a->nshards));
    if (!t) {
        xfer_tomb_unhold(&core->tombs);
        return XFER_ERR_NOMEM;
    }
    if (++core->next_attempt == 0)
        core->next_attempt = 1;
    xfer_transfer_init(t, a, core->next_attempt, now_ns, deadline);
    t->slot = core->free_slots[--core->nfree];
    core->recs[t->slot] = t;
    xfer_idmap_put(&core->live, t->id, t->slot);
    core->st.submitted++;
    step(core, t, now_ns, XFER_TRANSFER_EVENT_SUBMIT, NULL);
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
                0, 0, 0);
    xfer_transfer *t = find_live(core, id);
    if (t) {
        step(core, t, now_ns, XFER_TRANSFER_EVENT_USER_CANCEL, NULL);
        return 0;
    }
    const xfer_tomb_entry *e = xfer_tomb_find(&core->tombs, id);
    if (e) {
        /* A repeated cancel gives the tombstone a full TTL from now. */
        uint32_t att = e->attempt;
        int rc = xfer_tomb_refresh(&core->tombs, now_ns, id, att, e->reason);
        xfer_transfer_trace_cell(&core->ctx, now_ns, id, att,
                                 XFER_SHARD_NONE, XFER_TRANSFER_STATE_TOMBSTONED,
                                 XFER_TRANSFER_EVENT_USER_CANCEL, rc);
        return rc;
    }
    if (xfer_tomb_insert(&core->tombs, now_ns, id, 0, XFER_PHASE_NONE)) {
        core->st.tombstone_busy++;
        note(core, now_ns, XFER_NOTE_TOMB_FULL, id, 0, XFER_SHARD_NONE,
             XFER_ERR_BUSY);
        return XFER_ERR_BUSY;
    }
    xfer_transfer_trace_cell(&core->ctx, now_ns, id, 0, XFER_SHARD_NONE,
                             XFER_TRANSFER_STATE_NEW, XFER_TRANSFER_EVENT_USER_CANCEL, 0);
    note(core, now_ns, XFER_NOTE_PREEMPTIVE, id, 0, XFER_SHARD_NONE, 0);
    return 0;
}

/* A result for an id that has no live record. */
static void result_without_record(xfer_core *core, uint64_t now,
                                  const xfer_shard_result *r, unsigned ev)
{
    const xfer_tomb_entry *e = xfer_tomb_find(&core->tombs, r->id);
    unsigned state = e ? XFER_TRANSFER_STATE_TOMBSTONED : XFER_TRANSFER_STATE_NEW;
    xfer_transfer_trace_cell(&core->ctx, now, r->id, r->attempt, r->shard,
                             state, ev, r->status);
    assert(xfer_fsm_verdict(XFER_MACHINE_TRANSFER, state, ev) != XFER_VERDICT_ILLEGAL);
    if (e) {
        core->st.late_replies++;
        note(core, now, XFER_NOTE_LATE_REPLY, r->id, r->attempt, r->shard,
             r->status);
    } else {
        core->st.unknown_replies++;
        note(core, now, XFER_NOTE_UNKNOWN_REPLY, r->id, r->attempt,
             r->shard, r->status);
    }
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
                r->remote_addr, r->rkey);
    xfer_transfer *t = find_live(core, r->id);
    if (!t) {
        result_without_record(core, now_ns, r, ev);
        return 0;
    }
    if (!xfer_transfer_expects(t, r)) {
        /* An older attempt's reply for a reused id, or a duplicate. */
        core->st.late_replies++;
        note(core, now_ns, XFER_NOTE_LATE_REPLY, r->id, r->attempt,
             r->shard, r->status);
        return 0;
    }
    step(core, t, now_ns, ev, r);
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
                0, 0);
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
        step(core, t, now_ns, ev, NULL);
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
    step(core, t, now, XFER_TRANSFER_EVENT_SHUTDOWN, NULL);
}

void xfer_core_shutdown(xfer_core *core, uint64_t now_ns)
{
    if (!core || core->shutting_down || !room(core))
        return;
    now_ns = clamp_now(core, now_ns);
    trace_input(core, now_ns, XFER_TRANSFER_EVENT_SHUTDOWN, 0, XFER_SHARD_NONE, NULL, 0,
                0, 0);
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

void xfer_core_stats_get(const xfer_core *core, xfer_core_stats *st)
{
    *st = core->st;
    st->illegal = core->ctx.illegal;
    st->cancel_retries = core->ctx.cancel_retries;
    st->cancel_gave_up = core->ctx.cancel_gave_up;
    st->live = core->live.n;
    st->tombstones = xfer_tomb_live(&core->tombs);
    memcpy(st->cells_hit, core->ctx.cells_hit, sizeof st->cells_hit);
}

xfer_transfer_state xfer_core_state(const xfer_core *core, uint64_t id)
{
    const xfer_transfer *t = find_live(core, id);
    if (t)
        return (xfer_transfer_state)t->state;
    return xfer_tomb_find(&core->tombs, id) ? XFER_TRANSFER_STATE_TOMBSTONED
                                            : XFER_TRANSFER_STATE_NEW;
}

bool xfer_core_view(const xfer_core *core, uint64_t id,
                    xfer_transfer_view *out)
{
    const xfer_transfer *t = find_live(core, id);
    if (!t || !out)
        return false;
    memset(out, 0, sizeof *out);
    out->id = t->id;
    out->attempt = t->attempt;
    out->state = t->state;
    out->nshards = t->nshards;
    out->started_ns = t->started_ns;
    out->deadline_ns = t->deadline_ns;
    out->pending = t->pending;
    for (unsigned k = 0; k < t->nshards; k++) {
        const xfer_tshard *s = &t->shards[k];
        out->shards[k] = (xfer_shard_view){s->resv, s->write, s->commit,
                                           s->cancel, s->cancel_attempts};
    }
    return true;
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
