/*
 * tools/check/staleop.c - the --stale-ops world option: messages of
 * another attempt arriving during the invalidation states (issue 30 item
 * 2).
 *
 * No other world reaches them: an id gets a new attempt only when it is
 * submitted again, after its tombstones, which outlive every message in
 * flight (tests/check/FINDINGS.md), so an op of an older attempt is gone
 * before a newer attempt's reservation exists.  A peer that breaks that
 * assumption (a delayed retransmit, a replayed op, a second producer of
 * the same id) still must not touch a reservation of another attempt.
 * So, as --dups makes up replies of another attempt for the core, this
 * option makes up ops of another attempt for a shard, at the moment that
 * is hardest to get right: the record is COMMIT_INVAL, CANCEL_INVAL or
 * EXPIRE_INVAL, its rkey's invalidation asked for and not yet reported.
 * The op is a RESERVE, a COMMIT, a CANCEL, a WRITE or an EAGER (a one-sided
 * producer's writes never reach the machine, but the server takes a TCP
 * WRITE or EAGER frame from any producer peer) of attempt a - 1 (a + 1 for
 * attempt 1) and, but for RESERVE, the record's own reservation id, so
 * the attempt alone tells it apart.  Its sender is not the producer:
 * nobody hears the reply.  I14 (fsm/shard.c's rule): the shard refuses it
 * XFER_ERR_STALE (an EAGER: refused, whatever the code; its cell refuses
 * before any attempt is compared) and the record keeps its state and
 * reservation.  The other two kinds are a consumer's TAKE and RELEASE of
 * the record's reservation (a consumer peer may send them for any id at
 * any time; the tracker never does before READY): the shard refuses them
 * (any error) and the record keeps its state.  The WRITE, EAGER, TAKE
 * and RELEASE kinds reach table cells no other world does: (*_INVAL,
 * WRITE_BEGIN), (*_INVAL, EAGER), (*_INVAL, TAKE), (*_INVAL, RELEASE).
 *
 * What must stay true: with --stale-ops 0 no move here is offered, so
 * every other configuration keeps its state counts; the move touches one
 * shard (ck_step_touches).
 */
#include <stdio.h>

#include "staleop.h"

#include "consumer.h"
#include "monitor.h"

/* XFER_OP_* for the producer's; the consumer's two past them. */
enum { SOP_TAKE = XFER_OP_COUNT_, SOP_RELEASE };
static const uint8_t kinds[CK_SOP_KINDS] = {XFER_OP_RESERVE, XFER_OP_COMMIT,
                                            XFER_OP_CANCEL, XFER_OP_WRITE,
                                            XFER_OP_EAGER, SOP_TAKE,
                                            SOP_RELEASE};

static bool consumer_op(unsigned op)
{
    return op == SOP_TAKE || op == SOP_RELEASE;
}

static const char *kind_name(unsigned op)
{
    return op == SOP_TAKE      ? "TAKE"
           : op == SOP_RELEASE ? "RELEASE"
                               : xfer_op_name(op);
}

static bool is_inval(xfer_resv_state rs)
{
    return rs == XFER_RESV_STATE_COMMIT_INVAL ||
           rs == XFER_RESV_STATE_CANCEL_INVAL ||
           rs == XFER_RESV_STATE_EXPIRE_INVAL;
}

unsigned ck_staleop_moves(const ck_world *w, ck_move *out)
{
    const ck_config *c = w->cfg;
    unsigned n = 0;
    if (!c->stale_ops || w->env.sops >= c->stale_ops ||
        w->env.disturb >= c->budget)
        return 0;
    for (unsigned t = 0; t < c->T; t++)
        for (unsigned k = 0; k < c->S; k++) {
            if (!is_inval(xfer_shard_state(w->sh[k], t + 1u)) ||
                !w->mon.tr[t].cs[k].live)
                continue;
            for (unsigned i = 0; i < CK_SOP_KINDS; i++)
                out[n++] = (ck_move){MV_SOP, CK_SOP_ARG(i, t, k)};
        }
    return n;
}

static void decode(const ck_world *w, unsigned arg, unsigned *op,
                   unsigned *t, unsigned *k, uint32_t *att, uint64_t *resv)
{
    *k = arg % CK_MAX_S;
    *t = arg / CK_MAX_S % CK_MAX_T;
    *op = kinds[arg / CK_MAX_S / CK_MAX_T % CK_SOP_KINDS];
    const mon_cs *cs = &w->mon.tr[*t].cs[*k];
    *att = cs->attempt > 1 ? cs->attempt - 1 : cs->attempt + 1;
    *resv = cs->resv_id;
}

void ck_staleop_apply(ck_world *w, unsigned arg)
{
    unsigned op, t, k;
    uint32_t att;
    uint64_t resv;
    decode(w, arg, &op, &t, &k, &att, &resv);
    xfer_shard *s = w->sh[k];
    uint64_t id = t + 1u;
    xfer_resv_state before = xfer_shard_state(s, id);
    w->env.sops++;
    ck_reach_note(w, CK_R_RSTALE);
    xfer_resv_info info;
    int rc;
    uint8_t *dst = NULL;
    const uint8_t *data = NULL;
    uint32_t len = 0;
    switch (op) {
    case XFER_OP_RESERVE:
        rc = xfer_shard_reserve(s, w->env.now, id, att, CK_SLICE, &info);
        break;
    case XFER_OP_COMMIT:
        rc = xfer_shard_commit(s, w->env.now, id, att, resv);
        break;
    case XFER_OP_CANCEL:
        rc = xfer_shard_cancel(s, w->env.now, id, att, resv);
        break;
    case XFER_OP_WRITE:
        rc = xfer_shard_write_begin(s, w->env.now, id, att, resv, 0,
                                    CK_SLICE, &dst);
        break;
    case XFER_OP_EAGER: {
        static const uint8_t zeros[CK_SLICE];
        rc = xfer_shard_eager(s, w->env.now, id, att, zeros, CK_SLICE, &info);
        break;
    }
    case SOP_TAKE:
        rc = xfer_shard_take(s, w->env.now, id, resv, &data, &len);
        break;
    default:
        rc = xfer_shard_release(s, w->env.now, id, resv);
        break;
    }
    xfer_resv_state after = xfer_shard_state(s, id);
    /* an EAGER is refused by its cell whatever its attempt (a one-sided
     * shard takes none); the consumer's ops carry no attempt */
    bool any = consumer_op(op) || op == XFER_OP_EAGER;
    if (any && (rc == 0 || after != before))
        ck_monitor_fail(w, CK_I14, "a %s of id %llu (resv %llu) reached "
                        "shard %u in %s and was answered %s, leaving it "
                        "%s; a record waiting for its invalidation must "
                        "refuse it and touch nothing",
                        kind_name(op), (unsigned long long)id,
                        (unsigned long long)resv, k,
                        xfer_fsm_state_name(XFER_MACHINE_RESERVATION, before),
                        xfer_strerror(rc),
                        xfer_fsm_state_name(XFER_MACHINE_RESERVATION, after));
    else if (!any && (rc != XFER_ERR_STALE || after != before))
        ck_monitor_fail(w, CK_I14, "a %s of id %llu attempt %u (another "
                        "attempt than the record's %u) reached shard %u "
                        "in %s and was answered %s, leaving it %s; it must "
                        "be refused STALE and touch nothing",
                        kind_name(op), (unsigned long long)id, att,
                        w->mon.tr[t].cs[k].attempt, k,
                        xfer_fsm_state_name(XFER_MACHINE_RESERVATION, before),
                        xfer_strerror(rc),
                        xfer_fsm_state_name(XFER_MACHINE_RESERVATION, after));
    ck_consumer_drain_shard(w, k);
}

void ck_staleop_describe(const ck_world *w, unsigned arg, char *b, size_t n)
{
    unsigned op, t, k;
    uint32_t att;
    uint64_t resv;
    decode(w, arg, &op, &t, &k, &att, &resv);
    if (consumer_op(op))
        snprintf(b, n, "a consumer's early %s of id %u (resv %llu) reaches "
                 "shard %u (nobody hears the reply)", kind_name(op), t + 1u,
                 (unsigned long long)resv, k);
    else
        snprintf(b, n, "a STALE %s of id %u attempt %u (resv %llu) reaches "
                 "shard %u from a peer of another attempt (nobody hears the "
                 "reply)", kind_name(op), t + 1u, att,
                 (unsigned long long)resv, k);
}
