/*
 * tools/check/stream.c - the stream mode (stream.h).
 *
 * The scheduler's side lives in env (parts added, the parts whose staging
 * the model holds, the parts the core took, whether the seal was taken),
 * the monitors' side in mon_ps (the part of the write unanswered on each
 * shard, the parts whose write each shard answered well); both are
 * encoded, and both are zero in every other mode, so the other spaces
 * keep their state counts.  Part j of N is slice j of every shard's
 * reservation (the last takes the rest), from staging at the same offset,
 * so shards and transfers stay interchangeable.
 */
#include "stream.h"

#include "engine.h"
#include "monitor.h"
#include "reach.h"

bool ck_stream_may_part(const ck_world *w, unsigned t)
{
    return w->cfg->parts && w->env.submitted[t] && !w->env.crashed &&
           w->env.parts[t] < w->cfg->parts;
}

bool ck_stream_may_seal(const ck_world *w, unsigned t)
{
    return w->cfg->parts && w->env.submitted[t] && !w->env.crashed &&
           w->env.parts[t] == w->cfg->parts && !w->env.sealed[t];
}

void ck_stream_opened(ck_world *w, unsigned t)
{
    w->env.parts[t] = 0;
    w->env.pheld[t] = 0;
    w->env.ptaken[t] = 0;
    w->env.sealed[t] = 0;
}

void ck_stream_part(ck_world *w, unsigned t)
{
    unsigned n = w->cfg->parts, j = w->env.parts[t]++;
    uint32_t step = CK_SLICE / n, off = j * step;
    xfer_range r[CK_MAX_S];
    for (unsigned k = 0; k < w->cfg->S; k++)
        r[k] = (xfer_range){.staging_off = off, .pool = 0,
                            .len = j + 1 == n ? CK_SLICE - off : step,
                            .resv_off = off, .shard = (uint16_t)k};
    uint32_t seq = 0;
    int rc = xfer_core_part(w->core, w->env.now, t + 1u, r, w->cfg->S, &seq);
    const mon_tr *m = &w->mon.tr[t];
    bool over = m->failed || m->stopped || !m->open;
    if (rc == 0) {
        ck_reach_note(w, CK_R_PADDED);
        if (over)
            ck_monitor_fail(w, CK_PARTS, "part %u of id %u accepted after "
                            "the transfer %s", seq, t + 1u,
                            m->failed ? "failed"
                            : m->stopped ? "was stopped" : "ended");
        if (seq < 1 || seq > CK_MAX_PARTS)
            ck_monitor_fail(w, CK_PARTS, "part of id %u numbered %u", t + 1u,
                            seq);
        else {
            w->env.pheld[t] |= (uint8_t)(1u << (seq - 1));
            w->env.ptaken[t] |= (uint8_t)(1u << (seq - 1));
        }
    } else if (over) {
        /* refused: its staging is handed back at once (held by nobody) */
        ck_reach_note(w, CK_R_PREFUSED);
    }
    ck_engine_drain(w);
}

void ck_stream_seal(ck_world *w, unsigned t)
{
    int rc = xfer_core_seal(w->core, w->env.now, t + 1u);
    w->env.sealed[t] = rc == 0 ? 2 : 1;
    ck_engine_drain(w);
}

void ck_stream_release(ck_world *w, const xfer_action *a)
{
    if (a->id >= 1 && a->id <= w->cfg->T && a->part >= 1 &&
        a->part <= CK_MAX_PARTS) {
        w->env.pheld[a->id - 1] &= (uint8_t)~(1u << (a->part - 1));
        ck_reach_note(w, CK_R_PRELEASED);
    }
}

/* I3 per part: no write of part seq unanswered or still in flight (an
 * orphaned one, MF_ORPHAN, left staging before the producer heard). */
static void check_release(ck_world *w, unsigned t, unsigned seq)
{
    const mon_tr *m = &w->mon.tr[t];
    if (!(w->env.pheld[t] >> (seq - 1) & 1u))
        ck_monitor_fail(w, CK_PARTS, "RELEASE_PART %u of id %u, whose "
                        "staging is not held (released twice)", seq, t + 1u);
    for (unsigned k = 0; k < w->cfg->S; k++)
        if (m->ps[k].fly == seq)
            ck_monitor_fail(w, CK_PARTS, "staging of part %u of id %u "
                            "released while its WRITE to shard %u is "
                            "unanswered", seq, t + 1u, k);
    for (unsigned i = 0; i < w->env.nmsg; i++) {
        const ck_msg *o = &w->msg[i];
        if (o->kind == MK_OP && o->op == XFER_OP_WRITE && o->tr == t &&
            CK_STREAM_SEQ(o) == seq && !(o->flags & MF_ORPHAN))
            ck_monitor_fail(w, CK_PARTS, "staging of part %u of id %u "
                            "released while its WRITE to shard %u is in "
                            "flight", seq, t + 1u, o->shard);
    }
}

/* A commit only once sealed and every part the core took was written
 * well on every shard, with no write unanswered. */
static void check_commit(ck_world *w, unsigned t, unsigned shard)
{
    const mon_tr *m = &w->mon.tr[t];
    if (w->env.sealed[t] != 2)
        ck_monitor_fail(w, CK_PARTS, "COMMIT to shard %u of id %u before "
                        "the stream was sealed", shard, t + 1u);
    for (unsigned k = 0; k < w->cfg->S; k++) {
        const mon_ps *p = &m->ps[k];
        uint8_t miss = (uint8_t)(w->env.ptaken[t] & ~p->wdone);
        if (p->fly || miss)
            ck_monitor_fail(w, CK_PARTS, "COMMIT to shard %u of id %u while "
                            "shard %u has %s", shard, t + 1u, k,
                            p->fly ? "a WRITE unanswered"
                                   : "a part's WRITE not answered well");
    }
}

void ck_stream_action(ck_world *w, const xfer_action *a)
{
    if (!w->cfg->parts || a->id < 1 || a->id > w->cfg->T)
        return;
    unsigned t = (unsigned)(a->id - 1);
    if (a->kind == XFER_ACT_RELEASE_PART) {
        if (a->part >= 1 && a->part <= CK_MAX_PARTS)
            check_release(w, t, a->part);
        return;
    }
    if (a->shard >= w->cfg->S)
        return;
    mon_ps *p = &w->mon.tr[t].ps[a->shard];
    switch (a->kind) {
    case XFER_ACT_WRITE:
        if (a->part < 1 || a->part > CK_MAX_PARTS ||
            !(w->env.pheld[t] >> (a->part - 1) & 1u))
            ck_monitor_fail(w, CK_PARTS, "WRITE of part %u of id %u to "
                            "shard %u reads staging not held", a->part,
                            t + 1u, a->shard);
        if (p->fly)
            ck_monitor_fail(w, CK_PARTS, "a second WRITE of id %u to shard "
                            "%u while part %u's is unanswered", t + 1u,
                            a->shard, p->fly);
        p->fly = (uint8_t)a->part;
        break;
    case XFER_ACT_COMMIT:
        check_commit(w, t, a->shard);
        break;
    default:
        break;
    }
}

void ck_stream_result_in(ck_world *w, const ck_msg *m)
{
    if (!w->cfg->parts || m->op != XFER_OP_WRITE)
        return;
    mon_ps *p = &w->mon.tr[m->tr].ps[m->shard];
    if (m->status == 0 && p->fly)
        p->wdone |= (uint8_t)(1u << (p->fly - 1));
    p->fly = 0;
}
