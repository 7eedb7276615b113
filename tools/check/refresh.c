/*
 * tools/check/refresh.c - the --refresh world option: lease refreshes of
 * open streams reaching their shards (issue 30 item 2).
 *
 * transport/engine.c refreshes each shard's reservation of a stream that
 * is open and unsealed (the core RESERVING or WRITING), from the moment
 * that shard's reserve answered ok, asking for no more than the time left
 * to the transfer's deadline; a refresh changes no state of the core.  So
 * the move MV_REFRESH (t, k) is enabled while the engine would send one:
 * the stream is unsealed, the core RESERVING or WRITING, shard k's reserve
 * of this attempt answered ok, the deadline not passed.  It reaches the
 * shard at once, and the shard's reservation is in whatever state the
 * rest of the world left it: still RESERVED, WRITING under a write,
 * EXPIRED by its lease, CANCELLED by the consumer, pending either, or its
 * tombstone gone.  (A refresh late enough to reach a shard after the
 * stream's seal is not modelled: the core's view stops the move at the
 * seal.  Every such cell refuses, as do the ones modelled.)
 *
 * RFRESH, on each answer (xfer/shard.h, xfer_shard_refresh): a refresh
 * of a RESERVED or WRITING reservation of that attempt and reservation id
 * whose lease has not reached its hold cap (reserved + CK_MAX_HOLD) is
 * granted, and only such a refresh: the lease then ends at the later of
 * its end and min(now + min(asked, lease), cap), never earlier than it
 * did, and the granted time is that end less now; no refresh changes the
 * reservation's state; the shard's counters count it once, granted or
 * refused.  The monitors' lease end moves with a granted refresh
 * (mon_cs.refreshed_to), so TIME and I13 hold the shard to the new end.
 * An ILLEGAL answer is the ILLEGAL monitor's.
 *
 * What must stay true: with --refresh 0 no move here is offered and
 * mon_cs.refreshed_to stays 0, so every other configuration keeps its
 * state counts; the move touches one shard (ck_step_touches).
 */
#include <stdio.h>

#include "refresh.h"

#include "consumer.h"
#include "monitor.h"
#include "core_int.h"
#include "shard_int.h"

uint64_t ck_refresh_lease_end(const mon_cs *c)
{
    uint64_t end = c->reserved_at + CK_LEASE_TTL;
    return c->refreshed_to > end ? c->refreshed_to : end;
}

/* What the engine would send for transfer t to shard k now: its attempt,
 * reservation id and the time it asks for (the time left to the
 * deadline); false when it sends nothing. */
static bool would_send(const ck_world *w, unsigned t, unsigned k,
                       uint32_t *att, uint64_t *resv, uint64_t *want)
{
    xfer_transfer_view v;
    if (w->env.sealed[t] == 2 || !xfer_core_view(w->core, t + 1u, &v) ||
        (v.state != XFER_TRANSFER_STATE_RESERVING &&
         v.state != XFER_TRANSFER_STATE_WRITING) ||
        !xfer_core_shard_resv(w->core, t + 1u, (uint16_t)k, att, resv))
        return false;
    if (v.deadline_ns && v.deadline_ns <= w->env.now)
        return false; /* the core's deadline ends it (RF_STOP) */
    *want = v.deadline_ns ? v.deadline_ns - w->env.now : 0;
    return true;
}

unsigned ck_refresh_moves(const ck_world *w, ck_move *out)
{
    const ck_config *c = w->cfg;
    unsigned n = 0;
    if (!c->refresh || w->env.refreshes >= c->refresh || w->env.crashed)
        return 0;
    for (unsigned t = 0; t < c->T; t++)
        for (unsigned k = 0; k < c->S; k++) {
            uint32_t att;
            uint64_t resv, want;
            if (would_send(w, t, k, &att, &resv, &want))
                out[n++] = (ck_move){MV_REFRESH, (uint8_t)(t * CK_MAX_S + k)};
        }
    return n;
}

static bool live_state(xfer_resv_state rs)
{
    return rs == XFER_RESV_STATE_RESERVED || rs == XFER_RESV_STATE_WRITING;
}

void ck_refresh_apply(ck_world *w, unsigned arg)
{
    unsigned t = arg / CK_MAX_S, k = arg % CK_MAX_S;
    uint32_t att;
    uint64_t resv, want, granted = 0;
    if (!would_send(w, t, k, &att, &resv, &want))
        return; /* not offered (ck_refresh_moves) */
    xfer_shard *s = w->sh[k];
    uint64_t id = t + 1u, now = w->env.now;
    mon_cs *c = &w->mon.tr[t].cs[k];
    xfer_resv_state before = xfer_shard_state(s, id);
    xfer_shard_stats st0, st1;
    xfer_shard_health h0, h1;
    xfer_shard_stats_get(s, &st0);
    xfer_shard_health_get(s, &h0);
    w->env.refreshes++;
    int rc = xfer_shard_refresh_by(s, now, 0, id, att, resv, want, &granted);
    xfer_shard_stats_get(s, &st1);
    xfer_shard_health_get(s, &h1);
    xfer_resv_state after = xfer_shard_state(s, id);
    const char *bs = xfer_fsm_state_name(XFER_MACHINE_RESERVATION, before);
    ck_reach_note(w, rc == 0 ? CK_R_RFGRANTED : CK_R_RFREFUSED);
    /* The documented answer, from the monitors' own bookkeeping. */
    uint64_t cur = ck_refresh_lease_end(c);
    uint64_t cap = c->reserved_at + CK_MAX_HOLD;
    bool mine = live_state(before) && c->live && c->attempt == att &&
                c->resv_id == resv;
    bool grant = mine && cap > cur;
    uint64_t ask = want && want < CK_LEASE_TTL ? want : CK_LEASE_TTL;
    uint64_t to = now + ask < cap ? now + ask : cap;
    uint64_t end = to > cur ? to : cur;
    if (h1.illegal != h0.illegal)
        ; /* an ILLEGAL cell: the ILLEGAL monitor reports it */
    else if (after != before)
        ck_monitor_fail(w, CK_RFRESH, "a refresh of id %llu moved shard %u's "
                        "reservation from %s to %s",
                        (unsigned long long)id, k, bs,
                        xfer_fsm_state_name(XFER_MACHINE_RESERVATION, after));
    else if (rc == 0 && !grant)
        ck_monitor_fail(w, CK_RFRESH, "shard %u granted a refresh of id %llu "
                        "attempt %u resv %llu in %s (%s); only a RESERVED or "
                        "WRITING reservation of that attempt and id under "
                        "its hold cap is refreshed", k,
                        (unsigned long long)id, att,
                        (unsigned long long)resv, bs,
                        !mine ? "not that live reservation"
                              : "its lease already at the cap");
    else if (rc != 0 && grant)
        ck_monitor_fail(w, CK_RFRESH, "shard %u refused (%s) a refresh of "
                        "its %s reservation of id %llu attempt %u, whose "
                        "lease ends at %llu ns, under its cap at %llu ns",
                        k, xfer_strerror(rc), bs, (unsigned long long)id,
                        att, (unsigned long long)cur,
                        (unsigned long long)cap);
    else if (rc == 0 && granted != end - now)
        ck_monitor_fail(w, CK_RFRESH, "shard %u granted id %llu's lease %llu "
                        "ns from %llu ns; the lease ending at %llu ns, asked "
                        "for %llu ns and capped at %llu ns must end at %llu "
                        "ns (never earlier than before)", k,
                        (unsigned long long)id, (unsigned long long)granted,
                        (unsigned long long)now, (unsigned long long)cur,
                        (unsigned long long)want, (unsigned long long)cap,
                        (unsigned long long)end);
    else if (st1.refreshes - st0.refreshes != (rc == 0) ||
             st1.refreshes_refused - st0.refreshes_refused != (rc != 0))
        ck_monitor_fail(w, CK_RFRESH, "shard %u's counters moved by %llu "
                        "granted and %llu refused for one refresh answered "
                        "%s", k,
                        (unsigned long long)(st1.refreshes - st0.refreshes),
                        (unsigned long long)(st1.refreshes_refused -
                                             st0.refreshes_refused),
                        xfer_strerror(rc));
    if (rc == 0 && end > cur)
        c->refreshed_to = end;
    ck_consumer_drain_shard(w, k);
}

void ck_refresh_describe(const ck_world *w, unsigned arg, char *b, size_t n)
{
    unsigned t = arg / CK_MAX_S, k = arg % CK_MAX_S;
    uint32_t att = 0;
    uint64_t resv = 0, want = 0;
    would_send(w, t, k, &att, &resv, &want);
    snprintf(b, n, "the engine's lease refresh of id %u attempt %u (resv "
             "%llu, asking %llu ns) reaches shard %u", t + 1u, att,
             (unsigned long long)resv, (unsigned long long)want, k);
}
