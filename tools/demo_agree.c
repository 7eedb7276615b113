/*
 * tools/demo_agree.c - the cross-process check of demo_agree.h: one pass
 * over the ids, counting each kind of agreement and each violation.
 */
#include "demo_agree.h"

#include <string.h>

#include "xfer/core.h"

static void bad(demo_agreement *a, uint64_t *count, uint64_t id)
{
    (*count)++;
    if (!a->first_bad_id)
        a->first_bad_id = id;
}

static void done_one(demo_agreement *a, const demo_outcome *o, uint64_t id)
{
    if (o->available) {
        a->done_available++;
        return;
    }
    if (o->cancelled)
        a->done_cancelled++;
    else if (o->reason == XFER_ERR_CONN_LOST)
        a->done_lost_conn++;
    else if (o->reason == XFER_ERR_EXPIRED)
        a->done_lost_expired++;
    else
        bad(a, &a->done_bad, id);
}

void demo_agree(const demo_produced *p, const demo_consumer_report *r,
                uint32_t n, demo_agreement *a)
{
    memset(a, 0, sizeof *a);
    for (uint64_t id = 1; id <= n; id++) {
        const demo_produced *x = &p[id];
        const demo_outcome *o = &r->out[id];
        if (x->completions > 1)
            bad(a, &a->producer_not_once, id);
        if (o->n != 1) {
            bad(a, &a->consumer_not_once, id);
            continue;
        }
        if (o->available && !o->verified)
            bad(a, &a->unverified, id);
        if (x->completions != 1)
            continue; /* refused at submit: the consumer's deadline */
        if (x->status == 0) {
            done_one(a, o, id);
        } else if (x->phase == XFER_PHASE_RESERVING ||
                   x->phase == XFER_PHASE_WRITING ||
                   x->phase == XFER_PHASE_SUBMIT) {
            if (o->available)
                bad(a, &a->early_available, id);
        } else if (o->available) {
            a->may_hold_available++;
        } else {
            a->may_hold_unavailable++;
        }
    }
}

bool demo_agreed(const demo_agreement *a)
{
    return a->done_bad == 0 && a->early_available == 0 &&
           a->producer_not_once == 0 && a->consumer_not_once == 0 &&
           a->unverified == 0;
}
