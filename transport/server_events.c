/*
 * transport/server_events.c - what the shard server does between requests:
 * shard events go to subscribers, the timer fires leases, tombstone
 * expiries and take grace periods, and a per-reservation table records
 * when each phase happened and which connection took the data.
 *
 * The table (one per hosted shard, as big as the shard's reservation cap)
 * has an entry from a reserve until the reservation ends: a CANCELLED or
 * EXPIRED event, or a release.  It gives the phase histograms (reserve ->
 * READY -> TAKEN -> released) and the take grace period, which is the
 * taking consumer session's: when the session's last connection closes,
 * its entries become orphans with a deadline in a heap; a connection of
 * the same session that comes back before it makes them its own again;
 * if no RELEASE came by the deadline, the server releases the region
 * itself.
 *
 * What must stay true:
 *  - the lease timer is armed for the earliest deadline of every shard and
 *    every grace heap after every call that may change one;
 *  - an orphan is released only while the shard still holds it TAKEN with
 *    the resv_id that was taken (a release by another connection, or a
 *    later attempt, is never undone);
 *  - the table never needs memory after creation: an entry per live
 *    reservation, and a reserve that finds the table full (entries whose
 *    reservation ended without an event we saw) first drops entries the
 *    shard no longer holds.
 */
#include "server_int.h"

#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "server_rdma.h"
#include "util.h"       /* fsm_private_dep: the injected allocator */

#define MAX_BATCH 256

/* ---------------------------------------------------------------------- */
/* The per-reservation table                                               */
/* ---------------------------------------------------------------------- */

int xfer_server_track_init(xfer_server *s, xfer_server_hosted *hs)
{
    xfer_server_track *t = &hs->track;
    const xfer_allocator *a = &s->cfg.alloc;
    uint32_t cap = s->cfg.max_reservations;
    t->cap = cap;
    t->e = xfer_util_calloc(a, cap, sizeof *t->e);
    t->free_slots = xfer_util_calloc(a, cap, sizeof *t->free_slots);
    if (!t->e || !t->free_slots)
        return XFER_ERR_NOMEM;
    for (uint32_t i = 0; i < cap; i++)
        t->free_slots[i] = cap - 1 - i;
    t->nfree = cap;
    int rc = xfer_idmap_init(&t->map, cap, a);
    if (!rc)
        rc = xfer_heap_init(&t->grace, cap, a);
    return rc;
}

void xfer_server_track_clear(xfer_server *s, xfer_server_hosted *hs)
{
    xfer_server_track *t = &hs->track;
    const xfer_allocator *a = &s->cfg.alloc;
    xfer_heap_clear(&t->grace, a);
    xfer_idmap_clear(&t->map, a);
    xfer_util_free(a, t->free_slots);
    xfer_util_free(a, t->e);
    memset(t, 0, sizeof *t);
}

static xfer_server_resv *entry(xfer_server_track *t, uint64_t id,
                               uint32_t *slot)
{
    uint32_t k;
    if (!xfer_idmap_get(&t->map, id, &k))
        return NULL;
    if (slot)
        *slot = k;
    return &t->e[k];
}

static void drop(xfer_server_track *t, uint32_t slot)
{
    xfer_server_resv *r = &t->e[slot];
    if (r->taker || r->orphaned)
        t->taken--;
    if (r->orphaned)
        t->orphaned--;
    xfer_heap_remove(&t->grace, slot);
    xfer_idmap_del(&t->map, r->id);
    memset(r, 0, sizeof *r);
    t->free_slots[t->nfree++] = slot;
}

/* The table is full: drop the entries whose reservation the shard no
 * longer holds live (it ended without an event reaching us). */
static void sweep(xfer_server_hosted *hs)
{
    xfer_server_track *t = &hs->track;
    for (uint32_t k = 0; k < t->cap; k++) {
        if (!t->e[k].id)
            continue;
        xfer_resv_state st = xfer_shard_state(hs->sh, t->e[k].id);
        if (st == XFER_RESV_STATE_NONE || st == XFER_RESV_STATE_CANCELLED ||
            st == XFER_RESV_STATE_EXPIRED || st == XFER_RESV_STATE_DONE)
            drop(t, k);
    }
}

xfer_server_resv *xfer_server_track_find(xfer_server_hosted *hs,
                                         uint64_t id)
{
    return entry(&hs->track, id, NULL);
}

void xfer_server_track_reserved(xfer_server *s, xfer_server_hosted *hs,
                                uint64_t id, uint32_t attempt,
                                uint64_t resv_id, uint32_t len,
                                uint64_t off, uint16_t owner)
{
    xfer_server_track *t = &hs->track;
    if (entry(t, id, NULL))
        return; /* an idempotent repeat */
    if (t->nfree == 0)
        sweep(hs);
    if (t->nfree == 0)
        return; /* cannot happen: one entry per live reservation */
    uint32_t slot = t->free_slots[--t->nfree];
    t->e[slot] = (xfer_server_resv){.id = id, .resv_id = resv_id,
                                    .attempt = attempt, .len = len,
                                    .off = off, .owner = owner,
                                    .t_reserved = xfer_server_now(s)};
    xfer_idmap_put(&t->map, id, slot);
}

void xfer_server_track_taken(xfer_server *s, xfer_server_hosted *hs,
                             uint64_t id, uint16_t taker)
{
    xfer_server_resv *r = entry(&hs->track, id, NULL);
    if (!r || r->taker || r->orphaned)
        return;
    r->taker = taker;
    r->t_taken = xfer_server_now(s);
    hs->track.taken++;
    if (r->t_ready)
        xfer_hist_add(&hs->h_taken, r->t_taken - r->t_ready);
}

void xfer_server_track_released(xfer_server *s, xfer_server_hosted *hs,
                                uint64_t id)
{
    uint32_t slot;
    xfer_server_resv *r = entry(&hs->track, id, &slot);
    if (!r)
        return;
    if (r->t_taken)
        xfer_hist_add(&hs->h_released, xfer_server_now(s) - r->t_taken);
    drop(&hs->track, slot);
}

void xfer_server_track_orphan(xfer_server *s, uint16_t taker)
{
    uint64_t due = xfer_server_now(s) + s->cfg.take_grace_ns;
    for (uint16_t i = 0; taker && i < s->cfg.nshards; i++) {
        xfer_server_track *t = &s->shards[i].track;
        if (t->taken == t->orphaned)
            continue;
        for (uint32_t k = 0; k < t->cap; k++) {
            xfer_server_resv *r = &t->e[k];
            if (!r->id || r->taker != taker || r->orphaned)
                continue;
            r->orphaned = true;
            t->orphaned++;
            xfer_heap_set(&t->grace, k, due);
        }
    }
}

void xfer_server_track_adopt(xfer_server *s, uint16_t taker)
{
    for (uint16_t i = 0; taker && i < s->cfg.nshards; i++) {
        xfer_server_track *t = &s->shards[i].track;
        for (uint32_t k = 0; t->orphaned && k < t->cap; k++) {
            xfer_server_resv *r = &t->e[k];
            if (!r->id || r->taker != taker || !r->orphaned)
                continue;
            r->orphaned = false;
            t->orphaned--;
            xfer_heap_remove(&t->grace, k);
        }
    }
}

void xfer_server_track_disown(xfer_server *s, uint16_t taker)
{
    for (uint16_t i = 0; taker && i < s->cfg.nshards; i++) {
        xfer_server_track *t = &s->shards[i].track;
        for (uint32_t k = 0; t->taken && k < t->cap; k++)
            if (t->e[k].id && t->e[k].taker == taker)
                t->e[k].taker = 0; /* still orphaned: its deadline holds */
    }
}

/* Release the orphans whose grace period is over. */
static void fire_grace(xfer_server *s, xfer_server_hosted *hs, uint64_t now)
{
    xfer_server_track *t = &hs->track;
    uint32_t slot;
    uint64_t due;
    for (unsigned n = 0; n < MAX_BATCH &&
                         xfer_heap_peek(&t->grace, &slot, &due) && due <= now;
         n++) {
        xfer_server_resv *r = &t->e[slot];
        uint64_t id = r->id, resv = r->resv_id;
        drop(t, slot);
        if (xfer_shard_state(hs->sh, id) == XFER_RESV_STATE_TAKEN &&
            xfer_shard_release(hs->sh, now, id, resv) == 0)
            t->grace_released++;
    }
}

/* ---------------------------------------------------------------------- */
/* Events                                                                  */
/* ---------------------------------------------------------------------- */

static void publish(xfer_server *s, xfer_server_hosted *hs,
                    const xfer_shard_event *ev)
{
    xfer_wire_msg m = {.type = XFER_WIRE_T_EVENT, .kind = ev->kind,
                       .shard = hs->index, .attempt = ev->attempt,
                       .id = ev->id, .resv_id = ev->resv_id, .len = ev->len};
    xfer_server_check_event(hs, &m);
    for (xfer_server_conn *c = xfer_server_conn_of(s->conns.head); c;
         c = xfer_server_conn_of(c->link.next)) {
        if (!c->subscribed || c->closing || c->doomed || c->hosted < 0 ||
            &s->shards[c->hosted] != hs)
            continue;
        size_t out = evbuffer_get_length(bufferevent_get_output(c->bev));
        if (out > XFER_SERVER_OUT_HIGH ||
            (s->out_bytes > s->cfg.out_max_bytes &&
             out > XFER_SERVER_OUT_LOW)) {
            s->subs_dropped++;
            xfer_server_log(s, c->serial, "subscriber too slow, dropped");
            c->subscribed = false;
            xfer_server_conn_doom(c);
            continue;
        }
        xfer_server_conn_send(c, &m, 0);
        hs->events_sent++;
    }
}

void xfer_server_replay_ready(xfer_server_conn *c, xfer_server_hosted *hs)
{
    const xfer_server_track *t = &hs->track;
    for (uint32_t k = 0; k < t->cap; k++) {
        const xfer_server_resv *r = &t->e[k];
        if (!r->id || xfer_shard_state(hs->sh, r->id) != XFER_RESV_STATE_READY)
            continue;
        xfer_wire_msg m = {.type = XFER_WIRE_T_EVENT,
                           .kind = XFER_SHARD_EV_READY, .shard = hs->index,
                           .attempt = r->attempt, .id = r->id,
                           .resv_id = r->resv_id, .len = r->len};
        xfer_server_check_event(hs, &m);
        xfer_server_conn_send(c, &m, 0);
        hs->events_sent++;
    }
}

static void replay_one_ended(void *ud, const xfer_shard_event *ev)
{
    xfer_server_conn *c = ud;
    xfer_wire_msg m = {.type = XFER_WIRE_T_EVENT, .kind = ev->kind,
                       .shard = ev->shard, .attempt = ev->attempt,
                       .id = ev->id, .resv_id = ev->resv_id, .len = ev->len};
    xfer_server_conn_send(c, &m, 0);
    c->srv->shards[c->hosted].events_sent++;
}

/* A new subscriber did not see the cancelled and expired events of ids
 * the shard still tombstones: a consumer that expects one of them would
 * otherwise wait for its own deadline (issue 23 item 7). */
void xfer_server_replay_ended(xfer_server_conn *c, xfer_server_hosted *hs)
{
    xfer_shard_foreach_ended(hs->sh, replay_one_ended, c);
}

/* What an event means for the table: READY stamps the phase, an end
 * without a take drops the entry. */
static void note_event(xfer_server *s, xfer_server_hosted *hs,
                       const xfer_shard_event *ev)
{
    uint32_t slot;
    xfer_server_resv *r = entry(&hs->track, ev->id, &slot);
    if (!r || r->resv_id != ev->resv_id)
        return;
    if (ev->kind == XFER_SHARD_EV_READY) {
        if (!r->t_ready) {
            r->t_ready = xfer_server_now(s);
            xfer_hist_add(&hs->h_ready, r->t_ready - r->t_reserved);
        }
        return;
    }
    drop(&hs->track, slot);
}

/* The consume sink: take and release READY data at once. */
static void consume(xfer_server *s, xfer_server_hosted *hs,
                    const xfer_shard_event *ev)
{
    const uint8_t *data;
    uint32_t len;
    uint64_t t = xfer_server_now(s);
    if (xfer_shard_take(hs->sh, t, ev->id, ev->resv_id, &data, &len) == 0 &&
        xfer_shard_release(hs->sh, t, ev->id, ev->resv_id) == 0)
        xfer_server_track_released(s, hs, ev->id);
}

/* Hand the shard's pending events to subscribers, in batches copied out
 * first (consume calls back into the shard). */
static void flush_events(xfer_server *s, xfer_server_hosted *hs)
{
    if (s->rdma) /* first: what it frees or publishes has events */
        xfer_server_rdma_invalidate(s->rdma, hs, xfer_server_now(s));
    size_t n;
    const xfer_shard_event *evs = xfer_shard_events(hs->sh, &n);
    xfer_shard_event copy[MAX_BATCH];
    while (n) {
        size_t k = n < MAX_BATCH ? n : MAX_BATCH;
        memcpy(copy, evs, k * sizeof copy[0]);
        if (k == n)
            xfer_shard_events_clear(hs->sh);
        else
            evs += k;
        n -= k;
        for (size_t i = 0; i < k; i++) {
            publish(s, hs, &copy[i]);
            note_event(s, hs, &copy[i]);
            if (s->cfg.consume && copy[i].kind == XFER_SHARD_EV_READY)
                consume(s, hs, &copy[i]);
        }
        if (n == 0) {
            evs = xfer_shard_events(hs->sh, &n); /* consume added some */
        }
    }
    xfer_shard_events_clear(hs->sh);
}

/* Inside a batch with the library's own clock, once at its end
 * (xfer_server_batch_end): the earliest deadline is looked up, and the
 * timer re-added if it moved, once per read instead of after every op. */
static void arm_timer(xfer_server *s)
{
    if (s->batch_depth && s->own_clock) {
        s->timer_due = true;
        return;
    }
    uint64_t next = UINT64_MAX;
    for (uint16_t i = 0; i < s->cfg.nshards; i++) {
        uint64_t d = xfer_shard_next_deadline(s->shards[i].sh);
        uint64_t g = xfer_heap_min(&s->shards[i].track.grace);
        next = d < next ? d : next;
        next = g < next ? g : next;
    }
    xfer_timer_arm(&s->timer, next, s->cfg.clock, s->cfg.clock_ud);
}

void xfer_server_flush_all(xfer_server *s)
{
    for (uint16_t i = 0; i < s->cfg.nshards; i++)
        flush_events(s, &s->shards[i]);
    arm_timer(s);
}

void xfer_server_on_timer(evutil_socket_t fd, short what, void *arg)
{
    xfer_server *s = arg;
    xfer_server_batch_begin(s);
    uint64_t t = xfer_server_now(s);
    xfer_timer_fired(&s->timer);
    for (uint16_t i = 0; i < s->cfg.nshards; i++) {
        xfer_shard_on_timer(s->shards[i].sh, t);
        fire_grace(s, &s->shards[i], t);
    }
    xfer_server_flush_all(s);
    xfer_server_batch_end(s);
}
