/*
 * tools/check/consumer.c - the consumer side of a move: an op arriving at a
 * shard (applied, failed without being applied, applied with the reply
 * lost, or aborted), a write landing and ending, shard events reaching the
 * readiness tracker, and the tracker's take / release / cancel reaching the
 * shards.
 *
 * What must stay true: every call into a shard or the tracker is reported to
 * the monitors with its real return code before anything else happens, and
 * every op message yields exactly one result message back to the producer
 * (a transport reports every op as finished, never silently drops it).
 */
#include <string.h>

#include "consumer.h"

#include "corrupt.h"
#include "stream.h"
#include "engine.h"
#include "monitor.h"
#include "net.h"
#include "rdma.h"

static void reply(ck_world *w, const ck_msg *op, int32_t status,
                  const xfer_resv_info *info)
{
    if (w->env.crashed)
        return; /* nobody is listening any more */
    ck_msg r = *op;
    r.kind = MK_RES;
    r.flags = 0;
    r.status = status;
    r.resv_id = 0;
    r.addr = 0;
    if (status == 0 && info) {
        r.resv_id = info->resv_id;
        r.addr = info->addr;
    }
    if (op->op != XFER_OP_RESERVE && op->op != XFER_OP_EAGER)
        r.resv_id = op->resv_id;
    r.len = 0;
    r.part = 0;
    ck_net_push(w, &r);
}

/* Shard events go to the readiness tracker. */
void ck_consumer_drain_shard(ck_world *w, unsigned k)
{
    size_t n;
    const xfer_shard_event *ev = xfer_shard_events(w->sh[k], &n);
    for (size_t i = 0; i < n; i++) {
        ck_monitor_shard_event(w, &ev[i]);
        if (ev[i].id < 1 || ev[i].id > w->cfg->T)
            continue;
        ck_msg m;
        memset(&m, 0, sizeof m);
        m.kind = MK_EV;
        m.op = ev[i].kind;
        m.tr = (uint8_t)(ev[i].id - 1);
        m.shard = (uint16_t)k;
        m.attempt = ev[i].attempt;
        m.resv_id = ev[i].resv_id;
        ck_net_push(w, &m);
        w->out_hash = w->out_hash * 0x100000001b3ull ^ (ev[i].kind + 1u) ^
                      ev[i].id << 8 ^ (uint64_t)k << 20;
    }
    xfer_shard_events_clear(w->sh[k]);
    if (w->cfg->rdma)
        ck_rdma_drain_shard(w, k);
}

/* Readiness actions go to the shards (take/release/cancel) or are the
 * outcome the consumer application sees (available/unavailable). */
void ck_consumer_drain_ready(ck_world *w)
{
    size_t n;
    const xfer_ready_action *a = xfer_readiness_actions(w->rd, &n);
    for (size_t i = 0; i < n; i++) {
        ck_monitor_ready_action(w, &a[i]);
        w->out_hash = w->out_hash * 0x100000001b3ull ^ (a[i].kind + 1u) ^
                      a[i].id << 8 ^ (uint64_t)a[i].shard << 20;
        if (a[i].kind > XFER_READY_ACT_CANCEL || a[i].id < 1 ||
            a[i].id > w->cfg->T || a[i].shard >= w->cfg->S)
            continue;
        ck_msg m;
        memset(&m, 0, sizeof m);
        m.kind = MK_RACT;
        m.op = a[i].kind;
        m.tr = (uint8_t)(a[i].id - 1);
        m.shard = a[i].shard;
        m.attempt = a[i].attempt;
        m.resv_id = a[i].resv_id;
        ck_net_push(w, &m);
    }
    xfer_readiness_actions_clear(w->rd);
}

static int32_t apply_op(ck_world *w, const ck_msg *m, xfer_resv_info *info)
{
    xfer_shard *s = w->sh[m->shard];
    uint64_t id = m->tr + 1u;
    uint8_t *dst = NULL;
    switch (m->op) {
    case XFER_OP_RESERVE:
        return xfer_shard_reserve(s, w->env.now, id, m->attempt, m->len,
                                  info);
    case XFER_OP_WRITE:
        return xfer_shard_write_begin(s, w->env.now, id, m->attempt,
                                      m->resv_id,
                                      w->cfg->parts ? CK_STREAM_OFF(m) : 0,
                                      m->len, &dst);
    case XFER_OP_COMMIT: {
        int32_t rc = ck_corrupt_commit(w, m);
        return rc ? rc
                  : xfer_shard_commit(s, w->env.now, id, m->attempt,
                                      m->resv_id);
    }
    case XFER_OP_EAGER: {
        static const uint8_t bytes[CK_SLICE]; /* the staging slice */
        return xfer_shard_eager(s, w->env.now, id, m->attempt, bytes,
                                m->len, info);
    }
    default:
        return xfer_shard_cancel(s, w->env.now, id, m->attempt, m->resv_id);
    }
}

static int32_t end_write(ck_world *w, const ck_msg *m, bool ok)
{
    int rc = xfer_shard_write_end(w->sh[m->shard], w->env.now, m->tr + 1u,
                                  m->resv_id, ok);
    ck_monitor_write_end(w, m, ok, rc);
    return rc;
}

/* A write already begun on the shard: it ends now. */
static void write_finish(ck_world *w, const ck_msg *m, int how)
{
    bool ok = how == HOW_DELIVER || how == HOW_LOST;
    int32_t rc = end_write(w, m, ok);
    int32_t st = how == HOW_DELIVER ? rc
                 : how == HOW_LOST  ? XFER_ERR_CONN_LOST
                 : how == HOW_FAIL  ? XFER_ERR_IO
                                    : XFER_ERR_ABORTED;
    reply(w, m, st, NULL);
}

/* --copies: a copy into a device region (see copies.h).  Its connection
 * may close while it runs (LOST): the producer hears XFER_ERR_CONN_LOST at
 * once and the copy stays in flight as an orphan (MF_ORPHAN) that ends
 * later, unanswered, as server_copy.c's landings outlive their
 * connections.  Otherwise it ends ok (DELIVER) or failed (FAIL:
 * XFER_ERR_COPY), and the shard ends the write with it.  The copy reads
 * the bounce buffer, not staging, so its end is no I3 matter. */
static void copy_finish(ck_world *w, const ck_msg *m, int how)
{
    if (how == HOW_LOST) {
        ck_msg o = *m;
        o.flags = (uint8_t)((o.flags & ~MF_ABORT) | MF_ORPHAN);
        ck_net_push(w, &o);
        reply(w, m, XFER_ERR_CONN_LOST, NULL);
        return;
    }
    bool ok = how != HOW_FAIL;
    int rc = xfer_shard_copy_end(w->sh[m->shard], w->env.now, m->tr + 1u,
                                 m->resv_id, ok);
    ck_monitor_copy_end(w, m, ok, rc);
    if (!ok)
        ck_reach_note(w, CK_R_COPYFAIL);
    if (!(m->flags & MF_ORPHAN))
        reply(w, m, ok ? rc : XFER_ERR_COPY, NULL);
}

/* --copies: a begun write's bytes are in the bounce buffer; its copy into
 * the region starts, counted by the shard, and ends at a later step.  From
 * here the copy, not the write, lands in the region: I4's count of writes
 * landing lets go of it, and CREADY and CFREE (copies.c) watch the copy's
 * message instead, so a shard that ends the write early (the record
 * RESERVED under the copy, harmless until it is committed or freed) is
 * caught at the READY or the free it allows. */
static void copy_start(ck_world *w, ck_msg m)
{
    int rc = xfer_shard_copy_begin(w->sh[m.shard], w->env.now, m.tr + 1u,
                                   m.resv_id);
    if (rc) { /* the write is in flight, so the shard counts it */
        ck_monitor_fail(w, CK_ILLEGAL, "copy_begin of id %u (resv %llu) on "
                        "shard %u answered %d with its write in flight",
                        m.tr + 1u, (unsigned long long)m.resv_id, m.shard,
                        rc);
        return;
    }
    mon_cs *c = &w->mon.tr[m.tr].cs[m.shard];
    if (c->writes)
        c->writes--;
    ck_reach_note(w, CK_R_COPY);
    m.flags |= MF_COPY;
    ck_net_push(w, &m);
}

/* --copies: the device-to-host copy of a WRITE at the producer ended
 * (DELIVER) or failed (FAIL: the op's result is XFER_ERR_COPY).  An op the
 * core asked to abort meanwhile is answered ABORTED now, once the copy no
 * longer reads staging (engine_copy.c); any other goes to its shard.  A
 * copy of a crashed producer, or an orphan, ends with nobody to tell. */
static void d2h_ends(ck_world *w, ck_msg m, int how)
{
    if (w->env.crashed || (m.flags & MF_ORPHAN))
        return;
    ck_reach_note(w, how == HOW_FAIL ? CK_R_COPYFAIL : CK_R_D2H);
    if (how == HOW_FAIL || (m.flags & MF_ABORT)) {
        reply(w, &m, how == HOW_FAIL ? XFER_ERR_COPY : XFER_ERR_ABORTED,
              NULL);
        return;
    }
    m.flags = (uint8_t)(m.flags & ~MF_D2H);
    ck_net_push(w, &m);
}

/* --writes: one part of a WRITE is over (it ended, or it never began,
 * with status st).  Every part still to begin or to end inherits the
 * first error; the producer hears once, when the last part is over,
 * with the first error of any. */
static void part_over(ck_world *w, const ck_msg *m, int32_t st)
{
    int32_t status = m->status ? m->status : st;
    bool more = false;
    for (unsigned i = 0; i < w->env.nmsg; i++) {
        ck_msg *o = &w->msg[i];
        if (o->kind == MK_OP && o->op == XFER_OP_WRITE &&
            (o->flags & MF_PART) && o->tr == m->tr && o->shard == m->shard &&
            o->attempt == m->attempt && o->resv_id == m->resv_id) {
            more = true;
            if (!o->status)
                o->status = status;
        }
    }
    if (!more)
        reply(w, m, status, NULL);
}

/* --writes: one of the writes a WRITE landed as ends. */
static void part_finish(ck_world *w, const ck_msg *m, int how)
{
    bool ok = how == HOW_DELIVER || how == HOW_LOST;
    int32_t rc = end_write(w, m, ok);
    if (ok && rc == 0 && m->part > 0)
        ck_reach_note(w, CK_R_WRITE2);
    part_over(w, m, how == HOW_DELIVER ? rc
                    : how == HOW_LOST  ? XFER_ERR_CONN_LOST
                    : how == HOW_FAIL  ? XFER_ERR_IO
                                       : XFER_ERR_ABORTED);
}

/* --writes: one part of a WRITE reaches the shard and begins (its slice
 * of the region: part p of n, the last one takes the rest), or fails on
 * the way (a gap the commit must see).  Parts travel as messages of
 * their own, so they begin one after another in any order, or side by
 * side when a part arrives while another is landing (issue 30 item 2:
 * before, every part began at once, and the shard credits no coverage
 * to writes that ran side by side, so no transfer ever succeeded, F5). */
static void part_begins(ck_world *w, ck_msg m, int how)
{
    unsigned n = w->cfg->writes;
    uint32_t step = m.len / n;
    uint32_t off = m.part * step;
    if (how == HOW_FAIL || how == HOW_ABORT) {
        part_over(w, &m, how == HOW_FAIL ? XFER_ERR_CONN_LOST
                                         : XFER_ERR_ABORTED);
        return;
    }
    m.len = m.part + 1u == n ? m.len - off : step;
    uint8_t *dst = NULL;
    int rc = xfer_shard_write_begin(w->sh[m.shard], w->env.now, m.tr + 1u,
                                    m.attempt, m.resv_id, off, m.len, &dst);
    ck_monitor_shard_op(w, &m, rc, NULL);
    if (rc == XFER_ERR_BUSY)
        ck_reach_note(w, CK_R_CAP);
    if (rc == 0 && how == HOW_LOST) {
        /* the bytes landed, the reply is lost */
        if (end_write(w, &m, true) == 0 && m.part > 0)
            ck_reach_note(w, CK_R_WRITE2);
        part_over(w, &m, XFER_ERR_CONN_LOST);
        return;
    }
    if (rc == 0) {
        m.flags |= MF_BEGUN; /* the bytes are landing */
        ck_net_push(w, &m);
        return;
    }
    part_over(w, &m, rc);
}

/* --writes: a WRITE arrives as w->cfg->writes parts, each its own message
 * carrying the WRITE's whole length (part_begins cuts its slice); a WRITE
 * whose reply is lost leaves its parts to land and the producer hears
 * CONN_LOST. */
static void write_parts(ck_world *w, ck_msg m, int how)
{
    for (unsigned p = 0; p < w->cfg->writes; p++) {
        ck_msg pm = m;
        pm.part = (uint16_t)p;
        pm.flags |= MF_PART;
        pm.status = how == HOW_LOST ? XFER_ERR_CONN_LOST : 0;
        ck_net_push(w, &pm);
    }
}

/* An op whose connection died reaches its shard (a half-open connection
 * read late): applied like any, a WRITE lands whole, nobody hears. */
static void orphan_arrives(ck_world *w, ck_msg m)
{
    xfer_resv_info info;
    memset(&info, 0, sizeof info);
    int32_t rc = apply_op(w, &m, &info);
    ck_reach_note(w, CK_R_ORPHAN);
    if (m.op == XFER_OP_EAGER && rc == 0)
        ck_reach_note(w, CK_R_EAGER);
    else if (rc == XFER_ERR_BUSY)
        ck_reach_note(w, CK_R_CAP);
    ck_monitor_shard_op(w, &m, rc, &info);
    if (m.op == XFER_OP_RESERVE && rc == 0 && w->cfg->rdma)
        ck_rdma_reserved(w, &m, &info);
    if (m.op == XFER_OP_WRITE && rc == 0)
        end_write(w, &m, true);
}

void ck_consumer_orphan(ck_world *w, unsigned i)
{
    ck_msg m = w->msg[i];
    w->msg[i].flags = (uint8_t)((w->msg[i].flags & ~MF_ABORT) | MF_ORPHAN);
    reply(w, &m, XFER_ERR_CONN_LOST, NULL);
}

/* An op message reaching its shard, in one of the four ways. */
static void op_arrives(ck_world *w, ck_msg m, int how)
{
    int32_t st;
    if (m.flags & MF_D2H) {
        d2h_ends(w, m, how);
        return;
    }
    ck_rdma_op_seen(w, &m);
    if (m.op == XFER_OP_WRITE && w->cfg->rdma) {
        if (ck_rdma_write(w, &m, how, &st))
            reply(w, &m, st, NULL);
        return;
    }
    /* a copy's end, orphaned or not (MF_ORPHAN marks both kinds) */
    if (m.op == XFER_OP_WRITE && (m.flags & MF_COPY)) {
        copy_finish(w, &m, how);
        return;
    }
    /* --gone: a write landing when its connection closed ends now,
     * whole or cut short (FAIL), answering nobody */
    if ((m.flags & (MF_ORPHAN | MF_BEGUN)) == (MF_ORPHAN | MF_BEGUN)) {
        end_write(w, &m, how != HOW_FAIL);
        return;
    }
    if (m.flags & MF_ORPHAN) {
        orphan_arrives(w, m);
        return;
    }
    if (m.op == XFER_OP_WRITE && (m.flags & MF_PART)) {
        if (m.flags & MF_BEGUN)
            part_finish(w, &m, how);
        else
            part_begins(w, m, how);
        return;
    }
    if (m.op == XFER_OP_WRITE && (m.flags & MF_BEGUN) && w->cfg->copies &&
        how == HOW_DELIVER) {
        copy_start(w, m);
        return;
    }
    if (m.op == XFER_OP_WRITE && (m.flags & MF_BEGUN)) {
        write_finish(w, &m, how);
        return;
    }
    if (how == HOW_FAIL || how == HOW_ABORT) {
        reply(w, &m, how == HOW_FAIL ? XFER_ERR_CONN_LOST : XFER_ERR_ABORTED,
              NULL);
        return;
    }
    if (m.op == XFER_OP_WRITE && w->cfg->writes > 1) {
        write_parts(w, m, how);
        return;
    }
    xfer_resv_info info;
    memset(&info, 0, sizeof info);
    int32_t rc = apply_op(w, &m, &info);
    if (m.op == XFER_OP_EAGER && rc == 0)
        ck_reach_note(w, CK_R_EAGER);
    else if (rc == XFER_ERR_BUSY)
        ck_reach_note(w, CK_R_CAP);
    ck_monitor_shard_op(w, &m, rc, &info);
    if ((m.op == XFER_OP_RESERVE || m.op == XFER_OP_EAGER) && rc == 0)
        ck_corrupt_fresh(w, &m);
    if (m.op == XFER_OP_RESERVE && rc == 0 && w->cfg->rdma)
        ck_rdma_reserved(w, &m, &info);
    if (m.op == XFER_OP_WRITE && rc == 0) {
        if (how == HOW_LOST) {
            end_write(w, &m, true);
            reply(w, &m, XFER_ERR_CONN_LOST, NULL);
            return;
        }
        m.flags |= MF_BEGUN; /* the bytes are landing */
        ck_net_push(w, &m);
        return;
    }
    reply(w, &m, how == HOW_LOST ? XFER_ERR_CONN_LOST : rc, &info);
}

static void ract_arrives(ck_world *w, const ck_msg *m, int how)
{
    xfer_shard *s = w->sh[m->shard];
    uint64_t id = m->tr + 1u;
    if (m->op == XFER_READY_ACT_TAKE) {
        int32_t rc = XFER_ERR_CONN_LOST;
        if (how != HOW_FAIL) {
            const uint8_t *data;
            uint32_t len;
            int trc = xfer_shard_take(s, w->env.now, id, m->resv_id, &data,
                                      &len);
            ck_monitor_take_result(w, m->tr, m->shard, trc, m->resv_id);
            rc = how == HOW_LOST ? XFER_ERR_CONN_LOST : trc;
        }
        ck_msg r = *m;
        r.kind = MK_TRES;
        r.status = rc;
        ck_net_push(w, &r);
    } else if (how == HOW_FAIL) {
        /* lost on the way: the lease is the backstop */
    } else if (m->op == XFER_READY_ACT_RELEASE) {
        int rc = xfer_shard_release(s, w->env.now, id, m->resv_id);
        ck_monitor_release(w, m->tr, m->shard, rc);
    } else {
        int rc = xfer_shard_cancel(s, w->env.now, id, m->attempt,
                                   m->resv_id);
        ck_monitor_consumer_cancel_applied(w, m, rc);
    }
    ck_consumer_drain_shard(w, m->shard);
}

static void to_readiness(ck_world *w, const ck_msg *m, int how)
{
    if (how == HOW_FAIL)
        return; /* an event lost on the way */
    uint64_t id = m->tr + 1u;
    int rc = 0;
    if (m->kind == MK_TRES) {
        xfer_readiness_on_take_result(w->rd, w->env.now, id, m->shard,
                                      m->status);
    } else if (m->op == XFER_SHARD_EV_READY) {
        ck_monitor_ready_event_in(w, m);
        rc = xfer_readiness_on_ready(w->rd, w->env.now, id, m->attempt,
                                     m->shard, m->resv_id);
    } else {
        /* E2E: an end of an attempt no ready of which reached the tracker
         * makes a pre-emptive tombstone, reported to nobody (from NONE, or
         * over an older attempt's tombstone, F3).  Asked of the monitor's
         * record of readies, not of the tracker's state, which would show
         * an older attempt's tombstone that this very call expires (F4). */
        if (w->cfg->e2e && w->mon.tr[m->tr].ready_attempt != m->attempt)
            w->env.e2e_exempt |= (uint8_t)(1u << m->tr);
        rc = xfer_readiness_on_shard_ended(w->rd, w->env.now, id, m->attempt,
                                           m->shard,
                                           m->op == XFER_SHARD_EV_CANCELLED
                                               ? XFER_ERR_CANCELLED
                                               : XFER_ERR_EXPIRED);
    }
    /* E2E: an event the tracker refused at its cap (I11's BUSY) is lost
     * to it, like one dropped on the way. */
    if (rc == XFER_ERR_BUSY)
        ck_reach_note(w, CK_R_CAP);
    if (w->cfg->e2e && rc == XFER_ERR_BUSY)
        w->env.e2e_exempt |= (uint8_t)(1u << m->tr);
    ck_consumer_drain_ready(w);
}

static void to_producer(ck_world *w, const ck_msg *m)
{
    if (w->env.crashed)
        return;
    xfer_shard_result r = {
        .id = m->tr + 1u,
        .attempt = m->attempt,
        .shard = m->shard,
        .op = m->op,
        .status = m->status,
        .resv_id = m->resv_id,
        .remote_addr = m->addr,
    };
    ck_monitor_result_in(w, m);
    xfer_core_on_result(w->core, w->env.now, &r);
    ck_engine_drain(w);
}

/* Deliver (or fail, lose, abort) message i. */
void ck_consumer_deliver(ck_world *w, unsigned i, int how)
{
    ck_msg m = w->msg[i];
    ck_net_remove(w, i);
    switch (m.kind) {
    case MK_OP: {
        /* I14: what another attempt holds here before a cancel arrives */
        mon_cs before = w->mon.tr[m.tr].cs[m.shard];
        op_arrives(w, m, how);
        ck_consumer_drain_shard(w, m.shard);
        if (m.op == XFER_OP_CANCEL && !(m.flags & MF_ORPHAN))
            ck_monitor_cancel_done(w, &m, &before);
        break;
    }
    case MK_RES:
        to_producer(w, &m);
        break;
    case MK_RACT:
        ract_arrives(w, &m, how);
        break;
    case MK_INV:
        ck_rdma_inval(w, &m);
        break;
    default:
        to_readiness(w, &m, how);
        break;
    }
}

/* The consumer application is done with data it was handed: release every
 * shard the tracker took for an available record. */
void ck_consumer_release_taken(ck_world *w)
{
    for (unsigned t = 0; t < w->cfg->T; t++) {
        mon_tr *m = &w->mon.tr[t];
        if (!m->available)
            continue;
        for (unsigned k = 0; k < w->cfg->S; k++) {
            if (!m->cs[k].taken)
                continue;
            int rc = xfer_shard_release(w->sh[k], w->env.now, t + 1u,
                                        m->cs[k].take_resv);
            ck_monitor_release(w, t, k, rc);
            ck_consumer_drain_shard(w, k);
        }
    }
}
