/*
 * transport/consumer_ready.c - the consumer's decisions: shard events and
 * take results go into the readiness machine (xfer/readiness.h), which
 * makes every decision; its actions are performed here (TAKE, RELEASE and
 * CANCEL sent on the shard's link, AVAILABLE and UNAVAILABLE queued for
 * delivery), and a record per id keeps what the machine does not: the
 * regions taken, the expect deadline, and why a give-up the consumer
 * started happened (a deadline, a lost link).
 *
 * What must stay true:
 *  - one outcome per id: a record is queued at most once (PENDING ->
 *    QUEUED), from the tracker's own AVAILABLE or UNAVAILABLE, or, for an
 *    expected id the tracker tombstoned without a record (a cancel or a
 *    shard's end before any ready), once by settle();
 *  - available is queued only from the tracker's AVAILABLE (I8), so every
 *    region it carries was taken;
 *  - every id the tracker has a live record for has a record here: a ready
 *    for a new id is fed to the tracker only when a record could be made
 *    (otherwise it is dropped and counted; the shard's READY lease then
 *    reclaims the data);
 *  - a cancel or a release the application made is accepted only when
 *    every shard's link can take it (its queue below the cap of max_ids
 *    requests: XFER_ERR_BUSY otherwise), and is then sent on every link,
 *    now or when it is up (consumer_link.c); the application's cancels are
 *    remembered (a ring of max_ids, the oldest forgotten first once every
 *    shard answered or tombstone_ttl_ns passed) with the shards that
 *    acknowledged them (xfer_consumer_cancel_shards);
 *  - actions are performed in the order the tracker produced them; an
 *    action may feed the tracker again (a take on a link that is down is
 *    answered CONN_LOST at once), and the loop in run() picks up what that
 *    added, so the tracker is never re-entered from inside its own call.
 */
#include "consumer_int.h"

#include <string.h>

#include <event2/event.h>

#include "crc.h"
#include "wire.h"
#include "xfer/core.h" /* XFER_RESV_NONE */

#define BATCH 64
#define EXPECT_BATCH 256

static uint64_t bit(uint16_t k)
{
    return UINT64_C(1) << k;
}

static uint64_t all_shards(const xfer_consumer *c)
{
    return c->cfg.nshards == 64 ? UINT64_MAX : bit(c->cfg.nshards) - 1;
}

static xfer_region *regions_of(const xfer_consumer *c, uint32_t slot)
{
    return &c->regions[(size_t)slot * c->cfg.nshards];
}

/* ---------------------------------------------------------------------- */
/* Records                                                                 */
/* ---------------------------------------------------------------------- */

int xfer_consumer_ready_init(xfer_consumer *c)
{
    xfer_readiness_config rc = {
        .version = XFER_READINESS_CONFIG_VERSION,
        .nshards = c->cfg.nshards, .max_records = c->cfg.max_ids,
        .max_tombstones = c->cfg.max_tombstones,
        .deadline_ns = c->cfg.ready_deadline_ns,
        .tombstone_ttl_ns = c->cfg.tombstone_ttl_ns,
        .alloc = c->cfg.alloc, .trace = c->cfg.trace};
    int rc_ = xfer_readiness_new(&rc, &c->rd);
    if (rc_)
        return rc_;
    uint32_t cap = c->cfg.max_ids;
    c->cap = cap;
    c->recs = xfer_consumer_calloc(c, cap, sizeof *c->recs);
    c->regions = xfer_consumer_calloc(c, cap, c->cfg.nshards *
                                                  sizeof *c->regions);
    c->crcs = c->check ? xfer_consumer_calloc(c, cap, c->cfg.nshards *
                                                          sizeof *c->crcs)
                       : NULL;
    if (c->check && !c->crcs)
        return XFER_ERR_NOMEM;
    c->free_slots = xfer_consumer_calloc(c, cap, sizeof *c->free_slots);
    if (!c->recs || !c->regions || !c->free_slots)
        return XFER_ERR_NOMEM;
    for (uint32_t i = 0; i < cap; i++)
        c->free_slots[i] = cap - 1 - i;
    c->nfree = cap;
    c->dq_head = c->dq_tail = XFER_CREC_NONE;
    rc_ = xfer_idmap_init(&c->ids, cap, &c->cfg.alloc);
    if (!rc_)
        rc_ = xfer_heap_init(&c->expects, cap, &c->cfg.alloc);
    if (!rc_)
        rc_ = xfer_idmap_init(&c->ccl_ids, cap, &c->cfg.alloc);
    if (rc_)
        return rc_;
    c->ccl = xfer_consumer_calloc(c, cap, sizeof *c->ccl);
    if (!c->ccl)
        return XFER_ERR_NOMEM;
    xfer_ring_init(&c->cclr, cap);
    return 0;
}

void xfer_consumer_ready_clear(xfer_consumer *c)
{
    xfer_heap_clear(&c->expects, &c->cfg.alloc);
    xfer_idmap_clear(&c->ids, &c->cfg.alloc);
    xfer_idmap_clear(&c->ccl_ids, &c->cfg.alloc);
    xfer_consumer_free(c, c->ccl);
    xfer_consumer_free(c, c->scratch);
    xfer_consumer_free(c, c->free_slots);
    xfer_consumer_free(c, c->regions);
    xfer_consumer_free(c, c->crcs);
    xfer_consumer_free(c, c->recs);
    xfer_readiness_del(c->rd);
}

xfer_consumer_rec *xfer_consumer_find(const xfer_consumer *c, uint64_t id,
                                      uint32_t *slot)
{
    uint32_t k;
    if (!c->recs || !xfer_idmap_get(&c->ids, id, &k))
        return NULL;
    if (slot)
        *slot = k;
    return &c->recs[k];
}

static xfer_consumer_rec *rec_new(xfer_consumer *c, uint64_t id,
                                  uint32_t *slot)
{
    if (c->nfree == 0)
        return NULL;
    uint32_t k = c->free_slots[--c->nfree];
    xfer_consumer_rec *r = &c->recs[k];
    *r = (xfer_consumer_rec){.id = id, .state = XFER_CREC_PENDING,
                             .t_first = xfer_consumer_now(c),
                             .next = XFER_CREC_NONE};
    xfer_region *g = regions_of(c, k);
    for (uint16_t s = 0; s < c->cfg.nshards; s++)
        g[s] = (xfer_region){.shard = s};
    xfer_idmap_put(&c->ids, id, k);
    c->st.pending++;
    *slot = k;
    return r;
}

static void rec_free(xfer_consumer *c, uint32_t slot)
{
    xfer_consumer_rec *r = &c->recs[slot];
    if (r->state == XFER_CREC_PENDING)
        c->st.pending--;
    xfer_heap_remove(&c->expects, slot);
    xfer_idmap_del(&c->ids, r->id);
    memset(r, 0, sizeof *r);
    c->free_slots[c->nfree++] = slot;
}

/* ---------------------------------------------------------------------- */
/* Outcomes                                                                */
/* ---------------------------------------------------------------------- */

static void count_unavailable(xfer_consumer *c, int32_t reason)
{
    c->st.unavailable++;
    switch (reason) {
    case XFER_ERR_TIMEOUT: c->st.unavailable_timeout++; break;
    case XFER_ERR_CANCELLED: c->st.unavailable_cancelled++; break;
    case XFER_ERR_EXPIRED: c->st.unavailable_expired++; break;
    case XFER_ERR_CONN_LOST: c->st.unavailable_conn_lost++; break;
    default: c->st.unavailable_take_failed++; break;
    }
}

/* PENDING -> QUEUED, once. */
static void queue(xfer_consumer *c, uint32_t slot, bool available,
                  int32_t reason, uint64_t missing)
{
    xfer_consumer_rec *r = &c->recs[slot];
    if (r->state != XFER_CREC_PENDING)
        return;
    c->st.pending--;
    r->state = XFER_CREC_QUEUED;
    r->available = available;
    r->reason = available ? 0 : (r->override ? r->override : reason);
    r->missing = available ? 0 : (missing | r->extra);
    xfer_heap_remove(&c->expects, slot);
    if (available)
        c->st.available++;
    else
        count_unavailable(c, r->reason);
    xfer_hist_add(&c->h_outcome, xfer_consumer_now(c) - r->t_first);
    r->next = XFER_CREC_NONE;
    if (c->dq_tail == XFER_CREC_NONE)
        c->dq_head = slot;
    else
        c->recs[c->dq_tail].next = slot;
    c->dq_tail = slot;
    xfer_consumer_kick(c);
}

bool xfer_consumer_pop(xfer_consumer *c, xfer_consumer_rec *out,
                       const xfer_region **regions)
{
    uint32_t slot = c->dq_head;
    if (slot == XFER_CREC_NONE)
        return false;
    xfer_consumer_rec *r = &c->recs[slot];
    c->dq_head = r->next;
    if (c->dq_head == XFER_CREC_NONE)
        c->dq_tail = XFER_CREC_NONE;
    *out = *r;
    *regions = regions_of(c, slot);
    if (!r->available) {
        rec_free(c, slot);
        return true;
    }
    r->state = XFER_CREC_HELD;
    c->st.held++;
    for (uint16_t k = 0; k < c->cfg.nshards; k++)
        c->st.held_bytes += regions_of(c, slot)[k].len;
    return true;
}

/* ---------------------------------------------------------------------- */
/* Performing the tracker's actions                                        */
/* ---------------------------------------------------------------------- */

static void do_take(xfer_consumer *c, const xfer_ready_action *a,
                    uint64_t now)
{
    uint32_t slot;
    xfer_consumer_rec *r = xfer_consumer_find(c, a->id, &slot);
    if (r) {
        r->attempt = a->attempt;
        r->taking |= bit(a->shard);
        r->t_take = now;
        regions_of(c, slot)[a->shard].resv_id = a->resv_id;
    }
    c->st.takes_sent++;
    if (xfer_consumer_link_send(&c->links[a->shard], XFER_WIRE_T_TAKE, a->id,
                                a->attempt, a->resv_id))
        return;
    if (r)
        r->taking &= ~bit(a->shard);
    c->st.takes_failed++;
    xfer_readiness_on_take_result(c->rd, now, a->id, a->shard,
                                  XFER_ERR_CONN_LOST);
}

static void perform(xfer_consumer *c, const xfer_ready_action *a,
                    uint64_t now)
{
    uint32_t slot;
    switch ((xfer_ready_action_kind)a->kind) {
    case XFER_READY_ACT_TAKE:
        do_take(c, a, now);
        break;
    case XFER_READY_ACT_RELEASE:
        c->st.releases_sent += xfer_consumer_link_request(
            &c->links[a->shard], XFER_WIRE_T_RELEASE, a->id, a->attempt,
            a->resv_id);
        break;
    case XFER_READY_ACT_CANCEL:
        if (a->id == c->cancel_id)
            c->cancel_sent |= bit(a->shard);
        c->st.cancels_sent += xfer_consumer_link_request(
            &c->links[a->shard], XFER_WIRE_T_CANCEL, a->id, a->attempt,
            a->resv_id);
        break;
    case XFER_READY_ACT_AVAILABLE:
        if (xfer_consumer_find(c, a->id, &slot)) {
            c->recs[slot].attempt = a->attempt;
            queue(c, slot, true, 0, 0);
        }
        break;
    case XFER_READY_ACT_UNAVAILABLE:
        if (xfer_consumer_find(c, a->id, &slot))
            queue(c, slot, false, a->reason, a->missing);
        break;
    case XFER_READY_ACT_COUNT_:
        break;
    }
}

static void rearm(xfer_consumer *c)
{
    uint64_t next = xfer_readiness_next_deadline(c->rd);
    uint64_t e = xfer_heap_min(&c->expects);
    next = e < next ? e : next;
    xfer_timer_arm(&c->timer, next, c->cfg.clock, c->cfg.clock_ud);
}

/* Room for n actions in the scratch copy. */
static bool scratch_room(xfer_consumer *c, size_t n)
{
    if (n <= c->nscratch)
        return true;
    size_t cap = c->nscratch ? 2 * c->nscratch : BATCH;
    while (cap < n)
        cap *= 2;
    xfer_ready_action *p = xfer_consumer_calloc(c, cap, sizeof *p);
    if (!p)
        return false;
    xfer_consumer_free(c, c->scratch);
    c->scratch = p;
    c->nscratch = cap;
    return true;
}

/* Perform the tracker's actions until it is quiet.  Each batch is copied
 * out and the list cleared first, because performing one may feed the
 * tracker again. */
static void run(xfer_consumer *c)
{
    if (c->running)
        return; /* the outer call picks up what an inner one added */
    c->running = 1;
    for (;;) {
        size_t n;
        const xfer_ready_action *acts = xfer_readiness_actions(c->rd, &n);
        if (n == 0 || !scratch_room(c, n))
            break; /* out of memory: the list waits for the next input */
        xfer_ready_action *copy = c->scratch;
        memcpy(copy, acts, n * sizeof copy[0]);
        xfer_readiness_actions_clear(c->rd);
        uint64_t now = xfer_consumer_now(c);
        for (size_t i = 0; i < n; i++)
            perform(c, &copy[i], now);
    }
    c->running = 0;
    rearm(c);
}

/* After an input for id: an expected id that the tracker tombstoned
 * without a record gets its outcome; a record made for a ready the tracker
 * did not keep is dropped. */
static void settle(xfer_consumer *c, uint64_t id, int32_t reason)
{
    uint32_t slot;
    xfer_consumer_rec *r = xfer_consumer_find(c, id, &slot);
    if (!r || r->state != XFER_CREC_PENDING)
        return;
    xfer_ready_state st = xfer_readiness_state(c->rd, id);
    if (st == XFER_READY_STATE_WAITING || st == XFER_READY_STATE_TAKING)
        return;
    if (r->expected && st == XFER_READY_STATE_UNAVAILABLE)
        queue(c, slot, false, reason, all_shards(c) & ~r->ready);
    else if (!r->expected)
        rec_free(c, slot);
}

/* ---------------------------------------------------------------------- */
/* Inputs from the links                                                   */
/* ---------------------------------------------------------------------- */

void xfer_consumer_on_ready(xfer_consumer *c, uint16_t k, uint64_t id,
                            uint32_t attempt, uint64_t resv_id)
{
    uint32_t slot;
    if (c->closing) {
        /* Closed: nothing new is taken (the READY lease reclaims it). */
        c->st.dropped_events++;
        return;
    }
    xfer_consumer_rec *r = xfer_consumer_find(c, id, &slot);
    if (!r && xfer_readiness_state(c->rd, id) == XFER_READY_STATE_NONE) {
        r = rec_new(c, id, &slot);
        if (!r) {
            c->st.dropped_events++;
            return;
        }
    }
    if (r && r->state == XFER_CREC_PENDING) {
        if (!r->attempt)
            r->attempt = attempt; /* the tracker's record belongs to it */
        if (attempt == r->attempt)
            r->ready |= bit(k);
    }
    uint64_t now = xfer_consumer_now(c);
    if (xfer_readiness_on_ready(c->rd, now, id, attempt, k, resv_id) != 0)
        c->st.dropped_events++;
    run(c);
    settle(c, id, XFER_ERR_CANCELLED);
}

void xfer_consumer_note_crc(xfer_consumer *c, uint16_t k, uint64_t id,
                            uint32_t attempt, uint32_t crc)
{
    uint32_t slot;
    xfer_consumer_rec *r = xfer_consumer_find(c, id, &slot);
    /* the record may already be decided (its takes answered at once):
     * then there is nothing left to check */
    if (!r || r->state != XFER_CREC_PENDING || r->attempt != attempt)
        return;
    c->crcs[(size_t)slot * c->cfg.nshards + k] = crc;
    r->crc_set |= bit(k);
}

/* Integrity CONSUMER: a region shard k's take pinned is checksummed
 * against the CRC its READY carried.  0, or XFER_ERR_CORRUPT: the region
 * was released here (it is TAKEN on the shard, and the tracker releases
 * only takes it counts as done) and the id's outcome will name k. */
static int32_t check_take(xfer_consumer *c, xfer_consumer_rec *r,
                          uint32_t slot, uint16_t k, uint64_t offset,
                          uint32_t len)
{
    if (!c->check || !(r->crc_set & bit(k)))
        return 0;
    c->st.crc_checked++;
    uint32_t want = c->crcs[(size_t)slot * c->cfg.nshards + k];
    if (xfer_crc32c(0, c->pools[k] + offset, len) == want)
        return 0;
    c->st.corrupt++;
    c->st.releases_sent += xfer_consumer_link_request(
        &c->links[k], XFER_WIRE_T_RELEASE, r->id, r->attempt,
        regions_of(c, slot)[k].resv_id);
    r->override = XFER_ERR_CORRUPT;
    r->extra |= bit(k);
    return XFER_ERR_CORRUPT;
}

void xfer_consumer_on_ended(xfer_consumer *c, uint16_t k, uint64_t id,
                            uint32_t attempt, int32_t reason)
{
    uint64_t now = xfer_consumer_now(c);
    if (xfer_readiness_on_shard_ended(c->rd, now, id, attempt, k, reason))
        c->st.dropped_events++;
    run(c);
    settle(c, id, reason);
}

void xfer_consumer_on_take(xfer_consumer *c, uint16_t k, uint64_t id,
                           int32_t status, uint64_t offset, uint32_t len)
{
    uint32_t slot;
    xfer_consumer_rec *r = xfer_consumer_find(c, id, &slot);
    uint64_t now = xfer_consumer_now(c);
    if (r && (r->taking & bit(k))) {
        r->taking &= ~bit(k);
        xfer_hist_add(&c->h_take, now - r->t_take);
        if (status == 0)
            status = check_take(c, r, slot, k, offset, len);
        if (status == 0) {
            regions_of(c, slot)[k].offset = offset;
            regions_of(c, slot)[k].len = len;
        }
    }
    if (status)
        c->st.takes_failed++;
    /* A result the tracker does not wait for is refused there (peer
     * input): nothing else to do. */
    xfer_readiness_on_take_result(c->rd, now, id, k, status);
    run(c);
    settle(c, id, XFER_ERR_UNAVAILABLE);
}

/* Every id waiting (a ready seen, not decided yet) when shard k's link
 * went down ends unavailable, CONN_LOST, naming k: the consumer cancels it
 * on every shard, and a record that is taking ends when its takes answer. */
void xfer_consumer_on_link_lost(xfer_consumer *c, uint16_t k)
{
    uint64_t now = xfer_consumer_now(c);
    for (uint32_t slot = 0; slot < c->cap; slot++) {
        xfer_consumer_rec *r = &c->recs[slot];
        if (r->state != XFER_CREC_PENDING)
            continue;
        xfer_ready_state st = xfer_readiness_state(c->rd, r->id);
        if (st != XFER_READY_STATE_WAITING && st != XFER_READY_STATE_TAKING)
            continue;
        if (!r->override) {
            r->override = XFER_ERR_CONN_LOST;
            r->extra |= bit(k);
        }
        uint64_t id = r->id;
        xfer_readiness_cancel(c->rd, now, id);
        run(c);
        settle(c, id, XFER_ERR_CONN_LOST);
    }
}

/* ---------------------------------------------------------------------- */
/* The public calls                                                        */
/* ---------------------------------------------------------------------- */

int xfer_consumer_do_expect(xfer_consumer *c, uint64_t id, uint64_t dl)
{
    uint32_t slot;
    if (c->closing)
        return XFER_ERR_SHUTDOWN;
    xfer_consumer_rec *r = xfer_consumer_find(c, id, &slot);
    if (r && r->state != XFER_CREC_PENDING)
        return r->available ? XFER_ERR_EXISTS : XFER_ERR_CANCELLED;
    if (!r) {
        xfer_ready_state st = xfer_readiness_state(c->rd, id);
        if (st == XFER_READY_STATE_UNAVAILABLE)
            return XFER_ERR_CANCELLED;
        if (st == XFER_READY_STATE_AVAILABLE)
            return XFER_ERR_EXISTS;
        r = rec_new(c, id, &slot);
        if (!r)
            return XFER_ERR_BUSY;
    }
    r->expected = true;
    if (dl)
        xfer_heap_set(&c->expects, slot, dl);
    else
        xfer_heap_remove(&c->expects, slot);
    rearm(c);
    return 0;
}

/* Every link can queue one more request of the application's. */
static bool links_have_room(const xfer_consumer *c)
{
    for (uint16_t k = 0; k < c->cfg.nshards; k++)
        if (xfer_consumer_link_queued(&c->links[k]) >= c->cap)
            return false;
    return true;
}

/* ---------------------------------------------------------------------- */
/* The application's cancels                                               */
/* ---------------------------------------------------------------------- */

static xfer_consumer_ccl *ccl_find(const xfer_consumer *c, uint64_t id)
{
    uint32_t k;
    if (!c->ccl || !xfer_idmap_get(&c->ccl_ids, id, &k))
        return NULL;
    return &c->ccl[k];
}

/* The oldest entry may go: every shard answered it, or it is older than
 * the consumer's tombstones. */
static bool ccl_may_forget(const xfer_consumer *c, const xfer_consumer_ccl *e,
                           uint64_t now)
{
    return ((e->acked | e->refused) & all_shards(c)) == all_shards(c) ||
           now - e->t >= c->cfg.tombstone_ttl_ns;
}

/* Room for one more entry (forgetting the oldest if it may go). */
static bool ccl_room(xfer_consumer *c, uint64_t now)
{
    if (!xfer_ring_full(&c->cclr))
        return true;
    xfer_consumer_ccl *e = &c->ccl[xfer_ring_slot(&c->cclr, 0)];
    if (!ccl_may_forget(c, e, now))
        return false;
    xfer_idmap_del(&c->ccl_ids, e->id);
    xfer_ring_pop(&c->cclr);
    return true;
}

static xfer_consumer_ccl *ccl_add(xfer_consumer *c, uint64_t id, uint64_t now)
{
    uint32_t k = xfer_ring_push(&c->cclr);
    c->ccl[k] = (xfer_consumer_ccl){.id = id, .t = now};
    xfer_idmap_put(&c->ccl_ids, id, k);
    return &c->ccl[k];
}

void xfer_consumer_cancel_answered(xfer_consumer *c, uint16_t k, uint64_t id,
                                   bool ok)
{
    xfer_consumer_ccl *e = ccl_find(c, id);
    if (!e)
        return;
    if (ok) {
        e->acked |= bit(k);
        e->refused &= ~bit(k);
    } else if (!(e->acked & bit(k))) {
        e->refused |= bit(k);
    }
}

/* Shard k's link came up: it may be a new process that forgot every
 * cancel it acknowledged, so those still within the consumer's tombstone
 * TTL are sent to it again (idempotent on a shard that remembers).  Those
 * not answered yet are already queued on the link. */
void xfer_consumer_cancels_replay(xfer_consumer *c, uint16_t k)
{
    uint64_t now = xfer_consumer_now(c);
    for (uint32_t i = 0; i < c->cclr.n; i++) {
        xfer_consumer_ccl *e = &c->ccl[xfer_ring_slot(&c->cclr, i)];
        if (!((e->acked | e->refused) & bit(k)) ||
            now - e->t >= c->cfg.tombstone_ttl_ns)
            continue;
        e->acked &= ~bit(k);
        e->refused &= ~bit(k);
        c->st.cancels_replayed++;
        c->st.cancels_sent += xfer_consumer_link_request(
            &c->links[k], XFER_WIRE_T_CANCEL, e->id, 0, XFER_RESV_NONE);
    }
}

int xfer_consumer_cancel_shards(const xfer_consumer *c, uint64_t id,
                                uint64_t *acked, uint64_t *refused)
{
    if (!c || id == 0)
        return XFER_ERR_INVALID_ARG;
    const xfer_consumer_ccl *e = ccl_find(c, id);
    if (!e)
        return XFER_ERR_NOT_FOUND;
    if (acked)
        *acked = e->acked;
    if (refused)
        *refused = e->refused;
    return 0;
}

int xfer_consumer_do_cancel(xfer_consumer *c, uint64_t id)
{
    uint32_t slot;
    if (c->closing)
        return XFER_ERR_SHUTDOWN;
    xfer_consumer_rec *r = xfer_consumer_find(c, id, &slot);
    if (r && r->state != XFER_CREC_PENDING && r->available)
        return XFER_ERR_STATE;
    uint64_t now = xfer_consumer_now(c);
    xfer_consumer_ccl *e = ccl_find(c, id);
    if (!links_have_room(c) || (!e && !ccl_room(c, now)))
        return XFER_ERR_BUSY;
    c->cancel_id = id;
    c->cancel_sent = 0;
    int rc = xfer_readiness_cancel(c->rd, now, id);
    run(c);
    c->cancel_id = 0;
    settle(c, id, XFER_ERR_CANCELLED);
    if (rc)
        return rc;
    if (!e)
        e = ccl_add(c, id, now);
    e->t = now;
    /* Every shard the tracker did not cancel it on (an id it had already
     * given up, say) gets the consumer's cancel of every attempt. */
    uint64_t need = all_shards(c) & ~c->cancel_sent & ~e->acked;
    for (uint16_t k = 0; k < c->cfg.nshards; k++) {
        if (!(need & bit(k)))
            continue;
        e->refused &= ~bit(k);
        c->st.cancels_sent += xfer_consumer_link_request(
            &c->links[k], XFER_WIRE_T_CANCEL, id, 0, XFER_RESV_NONE);
    }
    return 0;
}

/* Release a held record (the application's call, or the close). */
static void release_slot(xfer_consumer *c, uint32_t slot)
{
    xfer_consumer_rec *r = &c->recs[slot];
    const xfer_region *g = regions_of(c, slot);
    for (uint16_t k = 0; k < c->cfg.nshards; k++) {
        c->st.releases_sent += xfer_consumer_link_request(
            &c->links[k], XFER_WIRE_T_RELEASE, r->id, r->attempt,
            g[k].resv_id);
        c->st.held_bytes -= g[k].len;
    }
    c->st.held--;
    rec_free(c, slot);
}

int xfer_consumer_do_release(xfer_consumer *c, uint64_t id)
{
    uint32_t slot;
    if (c->closing)
        return XFER_ERR_SHUTDOWN;
    xfer_consumer_rec *r = xfer_consumer_find(c, id, &slot);
    if (!r || r->state == XFER_CREC_PENDING || !r->available)
        return XFER_ERR_NOT_FOUND;
    if (r->state != XFER_CREC_HELD)
        return XFER_ERR_STATE;
    if (!links_have_room(c))
        return XFER_ERR_BUSY;
    release_slot(c, slot);
    return 0;
}

/* The close: every id waiting is given up (cancelled on every shard), and
 * every record taken is released, whether its outcome was delivered
 * (HELD) or not (queued, or a take still answering: released as it
 * arrives, xfer_consumer_drop_queued). */
void xfer_consumer_ready_close(xfer_consumer *c)
{
    uint64_t now = xfer_consumer_now(c);
    for (uint32_t slot = 0; slot < c->cap; slot++) {
        xfer_consumer_rec *r = &c->recs[slot];
        if (r->state != XFER_CREC_PENDING)
            continue;
        uint64_t id = r->id;
        xfer_readiness_cancel(c->rd, now, id);
        run(c);
        settle(c, id, XFER_ERR_CANCELLED);
    }
    xfer_consumer_drop_queued(c);
    for (uint32_t slot = 0; slot < c->cap; slot++)
        if (c->recs[slot].state == XFER_CREC_HELD)
            release_slot(c, slot);
}

/* Closed: the outcomes queued are not delivered; what they took is
 * released. */
void xfer_consumer_drop_queued(xfer_consumer *c)
{
    xfer_consumer_rec r;
    const xfer_region *regions;
    while (xfer_consumer_pop(c, &r, &regions)) {
        uint32_t slot;
        if (r.available && xfer_consumer_find(c, r.id, &slot))
            release_slot(c, slot);
    }
}

/* Fire the tracker's deadlines, then the expect deadlines: an expected id
 * past its deadline is cancelled, reported TIMEOUT. */
void xfer_consumer_on_timer(evutil_socket_t fd, short what, void *arg)
{
    xfer_consumer *c = arg;
    uint64_t now = xfer_consumer_now(c);
    xfer_timer_fired(&c->timer);
    xfer_readiness_on_timer(c->rd, now);
    run(c);
    uint32_t slot;
    uint64_t due;
    for (unsigned n = 0; n < EXPECT_BATCH &&
                         xfer_heap_peek(&c->expects, &slot, &due) &&
                         due <= now;
         n++) {
        xfer_heap_remove(&c->expects, slot);
        xfer_consumer_rec *r = &c->recs[slot];
        if (r->state != XFER_CREC_PENDING)
            continue;
        uint64_t id = r->id;
        if (!r->override)
            r->override = XFER_ERR_TIMEOUT;
        xfer_readiness_cancel(c->rd, now, id);
        run(c);
        settle(c, id, XFER_ERR_TIMEOUT);
    }
    rearm(c);
}
