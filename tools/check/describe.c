/*
 * tools/check/describe.c - how a move of the environment and a machine
 * step read in a counterexample: one line each, in the words docs/check.md's
 * "Reading a counterexample" uses.
 *
 * What must stay true: describing reads the world and never changes it.
 */
#include "describe.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>

#include "xfer/core.h"
#include "xfer/readiness.h"
#include "xfer/shard.h"

#include "rdma.h"
#include "staleop.h"
#include "refresh.h"

/* A shard event's name in the lower case a counterexample reads
 * ("ready"), into buf. */
static const char *event_word(unsigned kind, char *buf, size_t len)
{
    const char *n = xfer_shard_event_name(kind);
    size_t i = 0;
    for (; n[i] && i + 1 < len; i++)
        buf[i] = (char)tolower((unsigned char)n[i]);
    buf[i] = '\0';
    return buf;
}

static const char *st(int32_t s)
{
    return s == 0 ? "ok" : xfer_err_name(s);
}

static void describe_msg(const ck_msg *m, const char *verb, char *b,
                         size_t n)
{
    unsigned id = m->tr + 1u;
    char word[16];
    switch (m->kind) {
    case MK_OP:
        if (m->op == XFER_OP_WRITE && (m->flags & MF_COPY))
            snprintf(b, n, "%s end of the %scopy into the device region of "
                     "shard %u (id %u att %" PRIu32 ", resv %" PRIu64 ")",
                     verb, (m->flags & MF_ORPHAN) ? "orphaned " : "",
                     m->shard, id, m->attempt, m->resv_id);
        else if (m->op == XFER_OP_WRITE && (m->flags & MF_ORPHAN))
            snprintf(b, n, "%s orphaned one-sided WRITE (id %u att %" PRIu32
                     ", resv %" PRIu64 ") to shard %u: it lands if the rkey "
                     "is live", verb, id, m->attempt, m->resv_id, m->shard);
        else if (m->op == XFER_OP_WRITE && (m->flags & MF_LANDED))
            snprintf(b, n, "%s completion of the one-sided WRITE that landed "
                     "on shard %u (id %u att %" PRIu32 ")", verb, m->shard,
                     id, m->attempt);
        else if (m->op == XFER_OP_WRITE && (m->flags & MF_BEGUN))
            snprintf(b, n, "%s end of the WRITE%s landing on shard %u (id "
                     "%u att %" PRIu32 ")", verb,
                     (m->flags & MF_PART) ? " part" : "", m->shard, id,
                     m->attempt);
        else if (m->op == XFER_OP_WRITE && (m->flags & MF_PART))
            snprintf(b, n, "%s WRITE part %u (id %u, att %" PRIu32 ", resv %"
                     PRIu64 ")%s producer -> shard %u", verb, m->part, id,
                     m->attempt, m->resv_id,
                     (m->flags & MF_ABORT) ? " [abort asked]" : "", m->shard);
        else
            snprintf(b, n, "%s %s(id %u, att %" PRIu32 ", resv %" PRIu64
                     ")%s producer -> shard %u", verb, xfer_op_name(m->op), id,
                     m->attempt, m->resv_id,
                     (m->flags & MF_ABORT) ? " [abort asked]" : "", m->shard);
        break;
    case MK_RES:
        snprintf(b, n, "%s %s result %s (id %u, att %" PRIu32 ", resv %"
                 PRIu64 ") shard %u -> producer", verb, xfer_op_name(m->op),
                 st(m->status), id, m->attempt, m->resv_id, m->shard);
        break;
    case MK_EV:
        snprintf(b, n, "%s event %s(id %u, att %" PRIu32 ") shard %u -> "
                 "readiness", verb, event_word(m->op, word, sizeof word), id,
                 m->attempt, m->shard);
        break;
    case MK_RACT:
        snprintf(b, n, "%s %s(id %u, resv %" PRIu64 ") readiness -> shard "
                 "%u", verb, xfer_ready_action_name(m->op), id, m->resv_id,
                 m->shard);
        break;
    case MK_INV:
        if (m->flags & MF_INV_DONE)
            snprintf(b, n, "%s INVALIDATED(id %u, resv %" PRIu64 ") driver "
                     "-> shard %u", verb, id, m->resv_id, m->shard);
        else
            snprintf(b, n, "%s: the invalidation of id %u's rkey (resv %"
                     PRIu64 ") on shard %u completes", verb, id, m->resv_id,
                     m->shard);
        break;
    case MK_RKEY:
        snprintf(b, n, "live rkey of id %u (resv %" PRIu64 ") on shard %u",
                 id, m->resv_id, m->shard);
        break;
    default:
        snprintf(b, n, "%s take result %s (id %u) shard %u -> readiness",
                 verb, st(m->status), id, m->shard);
        break;
    }
}

void ck_describe_move(const ck_world *w, ck_move mv, char *b, size_t n)
{
    static const char *const verbs[] = {
        "deliver", "FAIL (not applied)", "LOSE REPLY (applied)", "ABORT"};
    if (mv.kind <= MV_ABORT) {
        const ck_msg *m = &w->msg[mv.arg];
        const char *verb = verbs[mv.kind];
        if (m->kind != MK_OP && mv.kind == MV_FAIL)
            verb = "DROP";
        /* --rdma: a posted write's delivery is its landing */
        if (w->cfg->rdma && m->kind == MK_OP && m->op == XFER_OP_WRITE &&
            !(m->flags & (MF_LANDED | MF_ORPHAN)) && mv.kind == MV_DELIVER)
            verb = ck_rdma_rkey_live(w, m->shard, m->resv_id)
                       ? "LAND (one-sided, rkey live)"
                       : "deliver (rkey dead: REMOTE)";
        describe_msg(m, verb, b, n);
        return;
    }
    switch (mv.kind) {
    case MV_SUBMIT:
        snprintf(b, n, "scheduler submits id %u", mv.arg + 1u);
        break;
    case MV_LATE:
        snprintf(b, n, "scheduler submits id %u again (late ready)",
                 mv.arg + 1u);
        break;
    case MV_CANCEL:
        snprintf(b, n, "scheduler cancels id %u", mv.arg + 1u);
        break;
    case MV_SHUTDOWN:
        snprintf(b, n, "engine shutdown");
        break;
    case MV_CCANCEL:
        snprintf(b, n, "consumer scheduler cancels id %u", mv.arg + 1u);
        break;
    case MV_FIRE_CORE:
        snprintf(b, n, "core timer fires at %" PRIu64 " ns",
                 xfer_core_next_deadline(w->core));
        break;
    case MV_FIRE_SHARD:
        snprintf(b, n, "shard %u timer fires at %" PRIu64 " ns (lease / "
                 "tombstone)", mv.arg, xfer_shard_next_deadline(w->sh[mv.arg]));
        break;
    case MV_FIRE_READY:
        snprintf(b, n, "readiness timer fires at %" PRIu64 " ns",
                 xfer_readiness_next_deadline(w->rd));
        break;
    case MV_DUP:
        describe_msg(&w->msg[mv.arg], "RETRANSMIT (delivered, a copy stays "
                     "in flight)", b, n);
        break;
    case MV_CORRUPT:
        describe_msg(&w->msg[mv.arg], "LANDS CORRUPT (its bytes differ "
                     "from the producer's)", b, n);
        break;
    case MV_ORPHAN:
        describe_msg(&w->msg[mv.arg], "CONNECTION DIES (the producer hears "
                     "CONN_LOST; the op stays in flight, may still be "
                     "applied, answers nobody)", b, n);
        break;
    case MV_PART:
        snprintf(b, n, "scheduler adds part %u of id %u", w->env.parts[mv.arg] + 1u,
                 mv.arg + 1u);
        break;
    case MV_SEAL:
        snprintf(b, n, "scheduler seals id %u", mv.arg + 1u);
        break;
    case MV_GONE:
        snprintf(b, n, "SHARD %u GONE (its directory entry vanishes: the "
                 "producer fails its ops there SHARD_GONE; ops on the wire "
                 "may still be applied, answering nobody)", mv.arg);
        break;
    case MV_SOP:
        ck_staleop_describe(w, mv.arg, b, n);
        break;
    case MV_REFRESH:
        ck_refresh_describe(w, mv.arg, b, n);
        break;
    case MV_BACK:
        snprintf(b, n, "shard %u registers again (a higher epoch)", mv.arg);
        break;
    case MV_STALE:
        snprintf(b, n, "a reply of another attempt for id %u reaches the "
                 "producer from shard %u", mv.arg / CK_MAX_S + 1u,
                 mv.arg % CK_MAX_S);
        break;
    default:
        snprintf(b, n, "the producer crashes");
        break;
    }
}

void ck_describe_rec(FILE *f, const xfer_trace_rec *r, uint8_t src)
{
    char who[16];
    if (src == 0)
        snprintf(who, sizeof who, "core");
    else if (src <= CK_MAX_S)
        snprintf(who, sizeof who, "shard%u", src - 1u);
    else
        snprintf(who, sizeof who, "ready");
    switch (r->machine) {
    case XFER_MACHINE_TRANSFER:
    case XFER_MACHINE_RESERVATION:
    case XFER_MACHINE_READINESS:
        fprintf(f, "      %-6s id %" PRIu64 " att %" PRIu32 ": %s --%s--> %s "
                "[%s]%s%s\n", who, r->id, r->attempt,
                xfer_fsm_state_name(r->machine, r->old_state),
                xfer_fsm_event_name(r->machine, r->event),
                xfer_fsm_state_name(r->machine, r->new_state),
                xfer_verdict_name(r->verdict), r->error ? " " : "",
                r->error ? xfer_err_name(r->error) : "");
        break;
    case XFER_MACHINE_ACTION: {
        fprintf(f, "      %-6s action %s id %" PRIu64 " att %" PRIu32, who,
                xfer_action_name(r->event), r->id, r->attempt);
        if (r->shard != XFER_SHARD_NONE)
            fprintf(f, " shard %u", r->shard);
        if (r->event == XFER_ACT_COMPLETE)
            fprintf(f, " status %s phase %u failed_shards 0x%" PRIx64,
                    st(r->error), r->new_state, r->arg2);
        fprintf(f, "\n");
        break;
    }
    case XFER_MACHINE_NOTE:
        fprintf(f, "      %-6s note %s id %" PRIu64 "\n", who,
                xfer_note_name(r->event), r->id);
        break;
    default:
        break;
    }
}
