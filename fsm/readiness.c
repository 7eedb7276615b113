/*
 * fsm/readiness.c - the readiness tracker of a consumer scheduler: one
 * record per transfer id for a group of S shards, driven through
 * XFER_READY_TABLE (one small handler per handler token, one dispatcher).
 * Its save and load for the model checker live in readiness_save.c; the
 * struct and the helpers both files use are in readiness_priv.h.
 *
 * A record is created by the first ready of an id and belongs to that
 * ready's attempt.  When every shard reported ready it takes (pins) every
 * shard and waits for every take result; then it reports exactly one
 * outcome (AVAILABLE or UNAVAILABLE) and becomes a tombstone of that state,
 * which answers later events for the id until tombstone_ttl_ns passed.
 *
 * What must stay true here:
 *  - I8: AVAILABLE is emitted only from take_result, when all S shards
 *    reported ready for the record's attempt, every take succeeded and no
 *    give-up was deferred; a record ends exactly once (end_record), so at
 *    most one outcome per record, and a tombstone never emits an outcome.
 *    A tombstoned id never gets a record for its tombstone's attempt or an
 *    older one: such a ready is answered with a CANCEL, or absorbed when it
 *    repeats the attempt that was AVAILABLE.  A consumer's cancel leaves a
 *    tombstone of attempt 0, which covers every attempt.
 *  - A newer attempt is a new transfer (xfer-check finding F3): the
 *    producer's tombstone may end before the tracker's, and the producer
 *    then numbers a resubmit of the id above every earlier attempt (one
 *    counter per core, fsm/core.c).  Its ready or shard's end on an
 *    UNAVAILABLE tombstone of an older attempt leaves the tombstone and runs
 *    as from NONE (a record that ends AVAILABLE or reports UNAVAILABLE, or a
 *    pre-emptive tombstone of the new attempt), never a silent cancel.
 *  - Wait for all: a TAKING record ends only when every take has a result;
 *    a give-up during TAKING is deferred until then.  A record that ends
 *    other than AVAILABLE releases what it took, and every take that failed
 *    with a transport error (it may have been applied, its reply lost:
 *    TAKEN memory has no lease), then cancels every shard.
 *  - I11: every live record holds a tombstone slot from creation, so its
 *    end never fails; at the record or tombstone cap callers get
 *    XFER_ERR_BUSY and no tombstone younger than its TTL is evicted.
 *  - Peer input (ready, take results, ended events) is checked before it
 *    reaches the table: a result for a take that is not outstanding, an
 *    out-of-range shard or a bad reason is rejected with an error, never
 *    asserted.
 *  - Bounded work: one input emits at most 2 * S + 1 actions; on_timer runs
 *    at most TIMER_BATCH deadlines and TOMB_BATCH drops, and only while the
 *    action buffer (sized at creation) has room for one more step.
 *  - I10: nothing depends on pointers or hash order; deadlines tie-break by
 *    the order they were set, tombstones expire in insertion order.
 *    Whatever is added to the tracker's dynamic state must be added to
 *    readiness_save.c's encoding too.
 *
 * Choices where the design is silent:
 *  - A pre-emptive tombstone (cancel or shard-ended for an unknown id)
 *    reports no UNAVAILABLE: no record was waiting, so nobody expects an
 *    outcome.  It is counted (`preemptive`), traced (XFER_NOTE_PREEMPTIVE)
 *    and sends CANCEL to every shard.  A consumer cancel does not know the
 *    attempt: its CANCEL actions carry attempt 0 ("any attempt").
 *  - A shard-ended event of another attempt than the record's is absorbed
 *    (attempts are isolated, I14); attempt 0 applies to any attempt.
 *  - A ready of another attempt is answered with a CANCEL for that attempt
 *    in WAITING, TAKING and AVAILABLE alike (the `stale_ready` token of the
 *    TAKING and AVAILABLE rows); a repeated ready of the record's attempt
 *    is counted as a duplicate and absorbed.
 *  - The first deferred give-up reason wins; a failed take reports
 *    XFER_ERR_UNAVAILABLE only when nothing was deferred.  `missing` is 0
 *    for an outcome of TAKING (every shard reported).
 *  - The caller drains the actions after every call (like xfer_core); an
 *    input that finds too little room returns XFER_ERR_BUSY, changing
 *    nothing.  Rejected peer input is traced as a note (UNKNOWN_REPLY,
 *    LATE_REPLY, TOMB_FULL); readiness.h lists every error.
 */
#include "readiness_priv.h"

#include <assert.h>
#include <string.h>

#include "step.h"
#include "util.h"
#include "xfer/core.h" /* XFER_RESV_NONE */

#define TIMER_BATCH 16u  /* deadlines fired per on_timer call */
#define TOMB_BATCH 256u  /* tombstones dropped per on_timer call */
#define NO_SLOT UINT32_MAX

/* One event on its way through the table: a step of the readiness
 * machine. */
typedef struct ready_step {
    xfer_step step; /* now, event, from, to (step.h) */
    uint64_t id, resv_id;
    uint32_t attempt; /* the event's attempt (ready, ended); 0 if none */
    int32_t err;      /* take status, ended / give-up reason */
    uint16_t shard;
    uint32_t slot;         /* live record, or NO_SLOT */
    uint32_t tomb_attempt; /* the tombstone's attempt (tombstone states) */
    /* What the trace record shows (the record before it is freed). */
    uint32_t shown_attempt;
    uint64_t shown_ready, shown_missing;
} ready_step;

typedef int (*handler_fn)(xfer_readiness *r, ready_step *e);

/* ---------------------------------------------------------------------- */
/* Small helpers                                                           */
/* ---------------------------------------------------------------------- */

static xfer_readiness_rec *rec_of(xfer_readiness *r, const ready_step *e)
{
    assert(e->slot != NO_SLOT);
    return &r->recs[e->slot];
}

static void snap(const xfer_readiness *r, ready_step *e,
                 const xfer_readiness_rec *rec)
{
    e->shown_attempt = rec->attempt;
    e->shown_ready = rec->ready;
    e->shown_missing = r->full & ~rec->ready;
}

static void ev_init(ready_step *e, uint64_t now, uint64_t id, unsigned event)
{
    memset(e, 0, sizeof *e);
    e->step = xfer_step_make(XFER_MACHINE_READINESS, now,
                             XFER_READY_STATE_NONE, event);
    e->id = id;
    e->shard = XFER_SHARD_NONE;
    e->slot = NO_SLOT;
}

static void drop_tomb(void *ud, const xfer_tomb_entry *t);

/* Find the id: a live record, a tombstone, or nothing (NONE). */
static void find_state(const xfer_readiness *r, ready_step *e)
{
    uint32_t slot;
    if (xfer_idmap_get(&r->live, e->id, &slot)) {
        e->slot = slot;
        e->step.from = r->recs[slot].state;
        snap(r, e, &r->recs[slot]);
        return;
    }
    const xfer_tomb_entry *t = xfer_tomb_find(&r->tombs, e->id);
    e->step.from = t ? t->reason : XFER_READY_STATE_NONE;
    e->tomb_attempt = t ? t->attempt : 0;
    e->shown_attempt = t ? t->attempt : e->attempt;
}

/* find_state() after dropping the tombstones due by now, so an expired
 * entry is never mistaken for a live one (xfer-check finding F1). */
static void locate(xfer_readiness *r, ready_step *e)
{
    if (xfer_tomb_next_expiry(&r->tombs) <= e->step.now_ns)
        xfer_tomb_expire(&r->tombs, e->step.now_ns, 0, drop_tomb, r);
    find_state(r, e);
}

static xfer_ready_action *push(xfer_readiness *r, unsigned kind,
                               uint16_t shard, uint32_t attempt, uint64_t id,
                               uint64_t resv_id)
{
    xfer_ready_action *a = &r->spare;
    /* Callers check room_ok() before any step, so this cannot overflow. */
    if (XFER_ALWAYS(r->nacts < r->cap))
        a = &r->acts[r->nacts++];
    memset(a, 0, sizeof *a);
    a->kind = (uint8_t)kind;
    a->shard = shard;
    a->attempt = attempt;
    a->id = id;
    a->resv_id = resv_id;
    return a;
}

static bool room_ok(const xfer_readiness *r)
{
    return r->cap - r->nacts >= r->room_one;
}

static void note(xfer_readiness *r, uint64_t now, unsigned what, uint64_t id,
                 uint32_t attempt, uint16_t shard, int32_t err)
{
    xfer_step_note(&r->cfg.trace, &r->seq, now, what, id, attempt, shard,
                   err);
}

/* ---------------------------------------------------------------------- */
/* Record lifecycle                                                        */
/* ---------------------------------------------------------------------- */

/* Turn the record into a tombstone of `state` (its hold becomes the
 * entry, so this never fails) and free its slot. */
static void end_record(xfer_readiness *r, ready_step *e, uint8_t state)
{
    xfer_readiness_rec *rec = rec_of(r, e);
    snap(r, e, rec);
    xfer_tomb_insert_held(&r->tombs, e->step.now_ns, rec->id,
                          rec->ccancel ? 0 : rec->attempt, state);
    xfer_heap_remove(&r->deadlines, e->slot);
    xfer_idmap_del(&r->live, rec->id);
    memset(rec, 0, sizeof *rec);
    memset(xfer_readiness_resv_of(r, e->slot), 0,
           r->cfg.nshards * sizeof(uint64_t));
    r->free_slots[r->nfree++] = e->slot;
    e->slot = NO_SLOT;
    e->step.to = state;
}

/* CANCEL to every shard of the group, with the reservation id where the
 * shard reported one. */
static void cancel_all(xfer_readiness *r, uint64_t id, uint32_t attempt,
                       uint64_t ready, const uint64_t *resv)
{
    for (uint16_t k = 0; k < r->cfg.nshards; k++)
        push(r, XFER_READY_ACT_CANCEL, k, attempt, id,
             resv && (ready & xfer_readiness_bit(k)) ? resv[k]
                                                     : XFER_RESV_NONE);
}

static void report_unavailable(xfer_readiness *r, ready_step *e,
                               int32_t reason)
{
    xfer_readiness_rec *rec = rec_of(r, e);
    xfer_ready_action *a = push(r, XFER_READY_ACT_UNAVAILABLE, XFER_SHARD_NONE,
                                rec->attempt, rec->id, XFER_RESV_NONE);
    a->reason = reason;
    a->missing = r->full & ~rec->ready;
    r->st.unavailable++;
    end_record(r, e, XFER_READY_STATE_UNAVAILABLE);
}

static void report_available(xfer_readiness *r, ready_step *e)
{
    xfer_readiness_rec *rec = rec_of(r, e);
    push(r, XFER_READY_ACT_AVAILABLE, XFER_SHARD_NONE, rec->attempt, rec->id,
         XFER_RESV_NONE);
    r->st.available++;
    end_record(r, e, XFER_READY_STATE_AVAILABLE);
}

/* Every take answered but the record cannot be AVAILABLE: give back what
 * was taken (or may have been), cancel every shard, report UNAVAILABLE. */
static void roll_back(xfer_readiness *r, ready_step *e)
{
    xfer_readiness_rec *rec = rec_of(r, e);
    const uint64_t *resv = xfer_readiness_resv_of(r, e->slot);
    for (uint16_t k = 0; k < r->cfg.nshards; k++)
        if ((rec->take_ok | rec->unsure) & xfer_readiness_bit(k))
            push(r, XFER_READY_ACT_RELEASE, k, rec->attempt, rec->id, resv[k]);
    cancel_all(r, rec->id, rec->attempt, rec->ready, resv);
    report_unavailable(r, e,
                       rec->deferred ? rec->deferred : XFER_ERR_UNAVAILABLE);
}

/* Record a ready of the record's attempt; all S in: take every shard. */
static void mark_ready(xfer_readiness *r, ready_step *e,
                       xfer_readiness_rec *rec)
{
    uint64_t *resv = xfer_readiness_resv_of(r, e->slot);
    rec->ready |= xfer_readiness_bit(e->shard);
    resv[e->shard] = e->resv_id;
    if (rec->ready != r->full)
        return;
    rec->state = XFER_READY_STATE_TAKING;
    e->step.to = XFER_READY_STATE_TAKING;
    for (uint16_t k = 0; k < r->cfg.nshards; k++)
        push(r, XFER_READY_ACT_TAKE, k, rec->attempt, rec->id, resv[k]);
}

/* Is attempt a newer than the tombstone attempt b?  Attempts come from one
 * counter per producer core that skips 0 when it wraps, so they are
 * compared as serial numbers (RFC 1982): a is newer when it is 1 .. 2^31 - 1
 * ahead of b.  Attempt 0 (the consumer's cancel) covers every attempt:
 * nothing is newer. */
static bool newer_attempt(uint32_t a, uint32_t b)
{
    return b != 0 && a - b - 1u < UINT32_C(0x7fffffff);
}

/* Does the event start a new transfer over the id's tombstone (F3)? */
static bool takes_over(const ready_step *e)
{
    return e->step.from == XFER_READY_STATE_UNAVAILABLE &&
           e->step.event != XFER_READY_EVENT_CANCEL &&
           newer_attempt(e->attempt, e->tomb_attempt);
}

/* A ready the record cannot use: cancel that attempt's data on the shard. */
static void answer_stale(xfer_readiness *r, const ready_step *e)
{
    push(r, XFER_READY_ACT_CANCEL, e->shard, e->attempt, e->id, e->resv_id);
    r->st.late_ready++;
}

/* Does a give-up event concern the record?  A shard-ended event of another
 * attempt does not (I14). */
static bool applies(const ready_step *e, const xfer_readiness_rec *rec)
{
    return e->step.event != XFER_READY_EVENT_SHARD_ENDED || e->attempt == 0 ||
           e->attempt == rec->attempt;
}

/* ---------------------------------------------------------------------- */
/* Handlers, one per handler token of XFER_READY_TABLE                     */
/* ---------------------------------------------------------------------- */

/* NONE + READY.  The caller reserved e->slot and a tombstone hold. */
static int h_first_ready(xfer_readiness *r, ready_step *e)
{
    xfer_readiness_rec *rec = rec_of(r, e);
    memset(rec, 0, sizeof *rec);
    rec->id = e->id;
    rec->attempt = e->attempt;
    rec->state = XFER_READY_STATE_WAITING;
    rec->deadline_ns = e->step.now_ns + r->cfg.deadline_ns < e->step.now_ns
                           ? UINT64_MAX - 1
                           : e->step.now_ns + r->cfg.deadline_ns;
    xfer_idmap_put(&r->live, e->id, e->slot);
    xfer_heap_set(&r->deadlines, e->slot, rec->deadline_ns);
    e->step.to = XFER_READY_STATE_WAITING;
    mark_ready(r, e, rec);
    return 0;
}

/* WAITING + READY. */
static int h_ready(xfer_readiness *r, ready_step *e)
{
    xfer_readiness_rec *rec = rec_of(r, e);
    if (e->attempt != rec->attempt)
        answer_stale(r, e);
    else if (rec->ready & xfer_readiness_bit(e->shard))
        r->st.duplicate_ready++;
    else
        mark_ready(r, e, rec);
    return 0;
}

/* TAKING / AVAILABLE + READY: nothing changes; another attempt's data is
 * cancelled on that shard. */
static int h_stale_ready(xfer_readiness *r, ready_step *e)
{
    uint32_t attempt = e->slot != NO_SLOT ? rec_of(r, e)->attempt
                                          : e->tomb_attempt;
    if (e->attempt != attempt)
        answer_stale(r, e);
    else
        r->st.duplicate_ready++;
    return 0;
}

/* UNAVAILABLE + READY: a newer attempt is a new transfer of the id (F3;
 * the caller took over the tombstone's room and reserved a slot); the
 * tombstone's own or an older attempt is late: cancel its data on the
 * shard. */
static int h_tomb_ready(xfer_readiness *r, ready_step *e)
{
    if (takes_over(e))
        return h_first_ready(r, e);
    answer_stale(r, e);
    return 0;
}

/* UNAVAILABLE + CANCEL / SHARD_ENDED: the id is still wanted gone, so its
 * tombstone gets a full TTL from now (xfer-check finding F1: a repeated
 * consumer cancel must protect the id for a TTL after the last cancel).
 * The consumer's cancel makes it cover every attempt (attempt 0), even at
 * the cap, where the old entry keeps its expiry and the miss is noted. */
static int h_refresh(xfer_readiness *r, ready_step *e)
{
    uint32_t attempt =
        e->step.event == XFER_READY_EVENT_CANCEL ? 0 : e->tomb_attempt;
    if (xfer_tomb_refresh(&r->tombs, e->step.now_ns, e->id, attempt,
                          XFER_READY_STATE_UNAVAILABLE) != 0)
        note(r, e->step.now_ns, XFER_NOTE_TOMB_FULL, e->id, e->tomb_attempt,
             XFER_SHARD_NONE, XFER_ERR_BUSY);
    return 0;
}

/* NONE + CANCEL / SHARD_ENDED.  The caller reserved a tombstone hold.
 * The PREEMPTIVE note follows the step's record. */
static int h_preempt(xfer_readiness *r, ready_step *e)
{
    xfer_tomb_insert_held(&r->tombs, e->step.now_ns, e->id, e->attempt,
                          XFER_READY_STATE_UNAVAILABLE);
    cancel_all(r, e->id, e->attempt, 0, NULL);
    r->st.preemptive++;
    e->step.to = XFER_READY_STATE_UNAVAILABLE;
    xfer_step_note_after(&e->step, XFER_NOTE_PREEMPTIVE, e->err);
    return 0;
}

/* UNAVAILABLE + SHARD_ENDED: a newer attempt's end is a new transfer's
 * end before any ready (F3; the caller took over the tombstone's room):
 * a pre-emptive tombstone of that attempt.  Its own or an older attempt's
 * refreshes the tombstone. */
static int h_tomb_ended(xfer_readiness *r, ready_step *e)
{
    if (takes_over(e))
        return h_preempt(r, e);
    return h_refresh(r, e);
}

/* WAITING + CANCEL / SHARD_ENDED / DEADLINE. */
static int h_give_up(xfer_readiness *r, ready_step *e)
{
    xfer_readiness_rec *rec = rec_of(r, e);
    if (!applies(e, rec))
        return 0;
    rec->ccancel = e->step.event == XFER_READY_EVENT_CANCEL;
    cancel_all(r, rec->id, rec->attempt, rec->ready,
               xfer_readiness_resv_of(r, e->slot));
    report_unavailable(r, e, e->err);
    return 0;
}

/* TAKING + CANCEL / SHARD_ENDED / DEADLINE: acted on when every take
 * answered. */
static int h_defer_give_up(xfer_readiness *r, ready_step *e)
{
    xfer_readiness_rec *rec = rec_of(r, e);
    if (applies(e, rec) && rec->deferred == 0)
        rec->deferred = e->err;
    if (e->step.event == XFER_READY_EVENT_CANCEL)
        rec->ccancel = 1;
    return 0;
}

/* Did a failed take surely leave the shard's data unpinned?  Only the
 * shard's own refusals say so; a transport error (CONN_LOST, IO, TIMEOUT,
 * ABORTED, ...) may hide a take that was applied and whose reply was lost,
 * and TAKEN memory has no lease: it must be released. */
static bool take_surely_refused(int32_t status)
{
    return status == XFER_ERR_NOT_FOUND || status == XFER_ERR_STALE ||
           status == XFER_ERR_CANCELLED || status == XFER_ERR_EXPIRED ||
           status == XFER_ERR_INVALID_ARG;
}

/* TAKING + TAKE_OK / TAKE_FAIL.  The caller checked the take is
 * outstanding. */
static int h_take_result(xfer_readiness *r, ready_step *e)
{
    xfer_readiness_rec *rec = rec_of(r, e);
    if (e->step.event == XFER_READY_EVENT_TAKE_OK) {
        rec->take_ok |= xfer_readiness_bit(e->shard);
    } else {
        rec->take_fail |= xfer_readiness_bit(e->shard);
        if (!take_surely_refused(e->err))
            rec->unsure |= xfer_readiness_bit(e->shard);
        r->st.take_failed++;
    }
    if ((rec->take_ok | rec->take_fail) != r->full)
        return 0;
    if (rec->take_fail == 0 && rec->deferred == 0)
        report_available(r, e);
    else
        roll_back(r, e);
    return 0;
}

/* AVAILABLE / UNAVAILABLE + TOMB_EXPIRE: the tombstone table already
 * dropped the entry. */
static int h_drop(xfer_readiness *r, ready_step *e)
{
    e->step.to = XFER_READY_STATE_NONE;
    return 0;
}

/* Cells that absorb an event without acting on it, and ILLEGAL ones
 * (whose handler the dispatcher never calls). */
static int h_none(xfer_readiness *r, ready_step *e)
{
    return 0;
}

typedef struct cell {
    uint8_t verdict;
    handler_fn fn;
    const char *name;
} cell;

static const cell table[XFER_READY_STATE_COUNT_][XFER_READY_EVENT_COUNT_] = {
#define C_(s, e, v, h)                                                        \
    [XFER_READY_STATE_##s][XFER_READY_EVENT_##e] = {XFER_VERDICT_##v, h_##h,  \
                                                    #h},
    XFER_READY_TABLE(C_)
#undef C_
};

bool xfer_readiness_cell(unsigned state, unsigned event, xfer_step_cell *out)
{
    if (state >= XFER_READY_STATE_COUNT_ || event >= XFER_READY_EVENT_COUNT_)
        return false;
    const cell *c = &table[state][event];
    *out = (xfer_step_cell){c->verdict, c->fn ? c->name : NULL};
    return true;
}

/* ---------------------------------------------------------------------- */
/* Dispatch                                                                */
/* ---------------------------------------------------------------------- */

/* The step's record shows the record as the step left it (or as it was
 * before the step freed it: snap()). */
static void trace_step(xfer_readiness *r, const ready_step *e, int rc)
{
    if (!r->cfg.trace.fn)
        return;
    xfer_trace_rec rec = {
        .id = e->id,
        .arg0 = e->resv_id,
        .arg1 = e->shown_ready,
        .arg2 = e->shown_missing,
        .attempt = e->shown_attempt,
        .error = rc ? rc : e->err,
        .shard = e->shard,
    };
    xfer_step_emit(&r->cfg.trace, &r->seq, &e->step, &rec);
}

/* Run one event through the table (step.h): count the cell, run its
 * handler, check the edge, trace the step.  0, or XFER_ERR_STATE for an
 * ILLEGAL cell. */
static int dispatch(xfer_readiness *r, ready_step *e)
{
    unsigned from = e->step.from, ev = e->step.event;
    assert(from < XFER_READY_STATE_COUNT_ && ev < XFER_READY_EVENT_COUNT_);
    const cell *c = &table[from][ev];
    int rc = XFER_ERR_STATE;
    if (xfer_step_enter(&e->step, c->verdict, &r->cells_hit[from][ev],
                        &r->st.illegal))
        rc = c->fn(r, e);
    if (e->slot != NO_SLOT)
        snap(r, e, &r->recs[e->slot]);
    xfer_step_leave(&e->step, &r->st.illegal);
    trace_step(r, e, rc);
    return rc;
}

/* xfer_tomb_expire callback: run TOMB_EXPIRE for the dropped entry. */
static void drop_tomb(void *ud, const xfer_tomb_entry *t)
{
    xfer_readiness *r = ud;
    ready_step e;
    ev_init(&e, xfer_tomb_clock(&r->tombs), t->id, XFER_READY_EVENT_TOMB_EXPIRE);
    e.step.from = t->reason;
    e.attempt = e.tomb_attempt = e.shown_attempt = t->attempt;
    dispatch(r, &e);
}

/* Reserve a tombstone slot for a new record or a pre-emptive tombstone,
 * dropping one expired tombstone (through the table) if that makes room. */
static int tomb_room(xfer_readiness *r, uint64_t now, uint64_t id)
{
    xfer_tomb *t = &r->tombs;
    if (xfer_tomb_full(t))
        xfer_tomb_expire(t, now, 1, drop_tomb, r);
    if (xfer_tomb_hold(t, now) == 0)
        return 0;
    note(r, now, XFER_NOTE_TOMB_FULL, id, 0, XFER_SHARD_NONE, XFER_ERR_BUSY);
    return XFER_ERR_BUSY;
}

/* ---------------------------------------------------------------------- */
/* Creation                                                                */
/* ---------------------------------------------------------------------- */

/* The bytes each version of xfer_readiness_config and _stats holds
 * (util.h). */
static const size_t config_lens[] = {sizeof(xfer_readiness_config)};
static const size_t stats_lens[] = {sizeof(xfer_readiness_stats)};

void xfer_readiness_config_default(xfer_readiness_config *cfg)
{
    if (!cfg)
        return;
    *cfg = (xfer_readiness_config){
        .version = XFER_READINESS_CONFIG_VERSION,
        .max_records = 65536,
        .deadline_ns = 30ull * 1000000000ull,
        .tombstone_ttl_ns = 60ull * 1000000000ull};
}

/* Zero fields take their defaults (those of the function above, and the
 * derived max_tombstones). */
static void set_defaults(xfer_readiness_config *c)
{
    if (!c->max_records)
        c->max_records = 65536;
    if (!c->max_tombstones) {
        uint64_t t = 4ull * c->max_records;
        c->max_tombstones = t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
    }
    if (!c->deadline_ns)
        c->deadline_ns = 30ull * 1000000000ull;
    if (!c->tombstone_ttl_ns)
        c->tombstone_ttl_ns = 60ull * 1000000000ull;
}

static bool config_ok(const xfer_readiness_config *c)
{
    return c->nshards >= 1 && c->nshards <= XFER_MAX_SHARDS &&
           c->max_records <= (1u << 28) && c->max_tombstones <= (1u << 29);
}

static int alloc_tables(xfer_readiness *r)
{
    const xfer_allocator *a = &r->cfg.alloc;
    uint32_t n = r->cfg.max_records;
    r->recs = xfer_util_calloc(a, n, sizeof *r->recs);
    r->resv = xfer_util_calloc(a, n, r->cfg.nshards * sizeof(uint64_t));
    r->free_slots = xfer_util_calloc(a, n, sizeof *r->free_slots);
    r->scratch = xfer_util_calloc(a, n, sizeof *r->scratch);
    r->room_one = 2u * r->cfg.nshards + 1u;
    r->cap = TIMER_BATCH * r->room_one;
    r->acts = xfer_util_calloc(a, r->cap, sizeof *r->acts);
    if (!r->recs || !r->resv || !r->free_slots || !r->scratch || !r->acts)
        return XFER_ERR_NOMEM;
    int rc = xfer_idmap_init(&r->live, n, a);
    if (!rc)
        rc = xfer_heap_init(&r->deadlines, n, a);
    if (!rc)
        rc = xfer_tomb_init(&r->tombs, r->cfg.max_tombstones,
                            r->cfg.tombstone_ttl_ns, a);
    for (uint32_t i = 0; i < n; i++)
        r->free_slots[i] = n - 1 - i;
    r->nfree = n;
    return rc;
}

int xfer_readiness_new(const xfer_readiness_config *cfg, xfer_readiness **out)
{
    if (!out)
        return XFER_ERR_INVALID_ARG;
    xfer_readiness_config c;
    xfer_readiness_config_default(&c);
    if (cfg && xfer_util_versioned_copy(&c, cfg, cfg->version, config_lens,
                                        XFER_UTIL_NVERSIONS(config_lens)))
        return XFER_ERR_INVALID_ARG;
    set_defaults(&c);
    if (!config_ok(&c))
        return XFER_ERR_INVALID_ARG;
    xfer_readiness *r = xfer_util_calloc(&c.alloc, 1, sizeof *r);
    if (!r)
        return XFER_ERR_NOMEM;
    r->cfg = c;
    r->full = c.nshards == 64 ? UINT64_MAX : xfer_readiness_bit(c.nshards) - 1;
    int rc = alloc_tables(r);
    if (rc) {
        xfer_readiness_del(r);
        return rc;
    }
    *out = r;
    return 0;
}

void xfer_readiness_del(xfer_readiness *r)
{
    if (!r)
        return;
    const xfer_allocator a = r->cfg.alloc;
    xfer_tomb_clear(&r->tombs, &a);
    xfer_heap_clear(&r->deadlines, &a);
    xfer_idmap_clear(&r->live, &a);
    xfer_util_free(&a, r->acts);
    xfer_util_free(&a, r->scratch);
    xfer_util_free(&a, r->free_slots);
    xfer_util_free(&a, r->resv);
    xfer_util_free(&a, r->recs);
    xfer_util_free(&a, r);
}

/* ---------------------------------------------------------------------- */
/* Inputs                                                                  */
/* ---------------------------------------------------------------------- */

/* A newer attempt leaves the id's tombstone (F3): the tombstone's room
 * becomes the hold of what the attempt makes (a record, or its own
 * tombstone). */
static int over_room(xfer_readiness *r, const ready_step *e)
{
    int rc = xfer_tomb_hold_over(&r->tombs, e->step.now_ns, e->id);
    if (rc)
        note(r, e->step.now_ns, XFER_NOTE_TOMB_FULL, e->id, e->attempt,
             XFER_SHARD_NONE, XFER_ERR_BUSY);
    return rc;
}

/* A ready for an id with neither record nor tombstone, or of an attempt
 * newer than its tombstone's: find a slot and a tombstone hold for the
 * record it will create. */
static int new_record_room(xfer_readiness *r, ready_step *e)
{
    if (r->nfree == 0)
        return XFER_ERR_BUSY;
    int rc = e->step.from == XFER_READY_STATE_NONE
                 ? tomb_room(r, e->step.now_ns, e->id)
                 : over_room(r, e);
    if (rc)
        return rc;
    e->slot = r->free_slots[--r->nfree];
    return 0;
}

int xfer_readiness_on_ready(xfer_readiness *r, uint64_t now_ns, uint64_t id,
                            uint32_t attempt, uint16_t shard,
                            uint64_t resv_id)
{
    if (!r || id == 0 || attempt == 0 || resv_id == XFER_RESV_NONE ||
        shard >= r->cfg.nshards)
        return XFER_ERR_INVALID_ARG;
    if (!room_ok(r))
        return XFER_ERR_BUSY;
    ready_step e;
    ev_init(&e, now_ns, id, XFER_READY_EVENT_READY);
    e.attempt = attempt;
    e.shard = shard;
    e.resv_id = resv_id;
    locate(r, &e);
    if (e.step.from == XFER_READY_STATE_NONE || takes_over(&e)) {
        int rc = new_record_room(r, &e);
        if (rc)
            return rc;
    }
    return dispatch(r, &e);
}

/* Is this take result one the record waits for?  Peer input: an answer,
 * never an assert. */
static int take_expected(xfer_readiness *r, const ready_step *e)
{
    if (e->step.from == XFER_READY_STATE_NONE) {
        note(r, e->step.now_ns, XFER_NOTE_UNKNOWN_REPLY, e->id, 0, e->shard,
             e->err);
        return XFER_ERR_NOT_FOUND;
    }
    if (e->step.from != XFER_READY_STATE_TAKING ||
        ((r->recs[e->slot].take_ok | r->recs[e->slot].take_fail) &
         xfer_readiness_bit(e->shard))) {
        note(r, e->step.now_ns, XFER_NOTE_LATE_REPLY, e->id, e->shown_attempt,
             e->shard, e->err);
        return XFER_ERR_STATE;
    }
    return 0;
}

int xfer_readiness_on_take_result(xfer_readiness *r, uint64_t now_ns,
                                  uint64_t id, uint16_t shard, int32_t status)
{
    if (!r || id == 0 || shard >= r->cfg.nshards || status > 0)
        return XFER_ERR_INVALID_ARG;
    if (!room_ok(r))
        return XFER_ERR_BUSY;
    ready_step e;
    ev_init(&e, now_ns, id,
            status == 0 ? XFER_READY_EVENT_TAKE_OK : XFER_READY_EVENT_TAKE_FAIL);
    e.shard = shard;
    e.err = status;
    locate(r, &e);
    int rc = take_expected(r, &e);
    if (rc)
        return rc;
    e.resv_id = xfer_readiness_resv_of(r, e.slot)[shard];
    return dispatch(r, &e);
}

/* CANCEL or SHARD_ENDED: an unknown id needs a tombstone slot first, and
 * a newer attempt's end the room of the tombstone it leaves. */
static int give_up_input(xfer_readiness *r, ready_step *e)
{
    locate(r, e);
    if (takes_over(e)) {
        int rc = over_room(r, e);
        return rc ? rc : dispatch(r, e);
    }
    if (e->step.from != XFER_READY_STATE_NONE)
        return dispatch(r, e);
    int rc = tomb_room(r, e->step.now_ns, e->id);
    if (!rc)
        rc = dispatch(r, e);
    return rc;
}

int xfer_readiness_on_shard_ended(xfer_readiness *r, uint64_t now_ns,
                                  uint64_t id, uint32_t attempt,
                                  uint16_t shard, int32_t reason)
{
    if (!r || id == 0 || shard >= r->cfg.nshards ||
        (reason != XFER_ERR_CANCELLED && reason != XFER_ERR_EXPIRED))
        return XFER_ERR_INVALID_ARG;
    if (!room_ok(r))
        return XFER_ERR_BUSY;
    ready_step e;
    ev_init(&e, now_ns, id, XFER_READY_EVENT_SHARD_ENDED);
    e.attempt = attempt;
    e.shard = shard;
    e.err = reason;
    return give_up_input(r, &e);
}

int xfer_readiness_cancel(xfer_readiness *r, uint64_t now_ns, uint64_t id)
{
    if (!r || id == 0)
        return XFER_ERR_INVALID_ARG;
    if (!room_ok(r))
        return XFER_ERR_BUSY;
    ready_step e;
    ev_init(&e, now_ns, id, XFER_READY_EVENT_CANCEL);
    e.err = XFER_ERR_CANCELLED;
    return give_up_input(r, &e);
}

void xfer_readiness_on_timer(xfer_readiness *r, uint64_t now_ns)
{
    if (!r)
        return;
    xfer_tomb_expire(&r->tombs, now_ns, TOMB_BATCH, drop_tomb, r);
    for (unsigned i = 0; i < TIMER_BATCH && room_ok(r); i++) {
        uint32_t slot;
        uint64_t due;
        if (!xfer_heap_peek(&r->deadlines, &slot, &due) || due > now_ns)
            break;
        xfer_heap_remove(&r->deadlines, slot);
        ready_step e;
        ev_init(&e, now_ns, r->recs[slot].id, XFER_READY_EVENT_DEADLINE);
        e.err = XFER_ERR_TIMEOUT;
        locate(r, &e);
        dispatch(r, &e);
    }
}

uint64_t xfer_readiness_next_deadline(const xfer_readiness *r)
{
    if (!r)
        return UINT64_MAX;
    uint64_t d = xfer_heap_min(&r->deadlines);
    uint64_t t = xfer_tomb_next_expiry(&r->tombs);
    return d < t ? d : t;
}

/* ---------------------------------------------------------------------- */
/* Output and introspection                                                */
/* ---------------------------------------------------------------------- */

const xfer_ready_action *xfer_readiness_actions(const xfer_readiness *r,
                                                size_t *n)
{
    if (n)
        *n = r ? r->nacts : 0;
    return r ? r->acts : NULL;
}

void xfer_readiness_actions_clear(xfer_readiness *r)
{
    if (r)
        r->nacts = 0;
}

int xfer_readiness_stats_get_versioned(const xfer_readiness *r,
                                       uint32_t version,
                                       xfer_readiness_stats *st)
{
    if (!r || !st)
        return XFER_ERR_INVALID_ARG;
    xfer_readiness_stats cur = r->st;
    cur.live = r->live.n;
    cur.tombstones = xfer_tomb_live(&r->tombs);
    return xfer_util_versioned_copy(st, &cur, version, stats_lens,
                                    XFER_UTIL_NVERSIONS(stats_lens));
}

uint64_t xfer_readiness_cell_hits(const xfer_readiness *r, unsigned state,
                                  unsigned event)
{
    if (!r || state >= XFER_READY_STATE_COUNT_ ||
        event >= XFER_READY_EVENT_COUNT_)
        return 0;
    return r->cells_hit[state][event];
}

xfer_ready_state xfer_readiness_state(const xfer_readiness *r, uint64_t id)
{
    if (!r || id == 0)
        return XFER_READY_STATE_NONE;
    ready_step e;
    ev_init(&e, 0, id, XFER_READY_EVENT_READY);
    find_state(r, &e);
    return (xfer_ready_state)e.step.from;
}
