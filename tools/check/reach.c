/*
 * tools/check/reach.c - what a search reached: the counts of reach.h, which
 * of them a configuration asks for, and the report that fails a run that
 * never reached what it asked for.
 *
 * What must stay true: a count is the same for every number of BFS threads
 * (each state of a level is expanded once, every move of it applied once,
 * whichever thread does it; search.c sums the workers' counts), and none
 * is part of the saved state.
 */
#include "reach.h"

#include <inttypes.h>
#include <stdio.h>

#include "world.h"

#define CK_R_SAME_(n, s, d) \
    _Static_assert((int)CK_R_##n == (int)CK_FB_##n, "reach and fault order differ");
CK_FAULTS(CK_R_SAME_)
#undef CK_R_SAME_

static const char *const names[] = {
#define N_(n, s, d, m) s,
    CK_REACHES(N_)
#undef N_
};
static const char *const never[] = {
#define M_(n, s, d, m) m,
    CK_REACHES(M_)
#undef M_
};

void ck_reach_note(ck_world *w, unsigned r)
{
    if (r < CK_R_COUNT_ && !w->reach_off &&
        (!w->in_liveness || r == CK_R_E2E))
        w->reach[r]++;
}

/* A fault class's own bound (0: the class cannot happen). */
static unsigned class_bound(const ck_config *c, unsigned r)
{
    switch (r) {
    case CK_R_FAIL:
    case CK_R_LOST:
    case CK_R_DROP:
        return c->max_faults;
    case CK_R_LEASE:
    case CK_R_DEADLINE:
        return c->max_expiries;
    case CK_R_CANCEL:
        return c->max_cancels;
    case CK_R_LATE:
        return c->max_lates;
    case CK_R_CONSUMER:
        return c->max_ccancels;
    default: /* abort follows a fault; shutdown, crash: the budget alone */
        return c->max_faults + c->max_cancels + c->max_expiries + 1;
    }
}

bool ck_reach_wanted(const ck_config *c, unsigned r)
{
    if (r < CK_FB_COUNT_)
        return (c->faults & (1u << r)) && c->budget > 0 &&
               class_bound(c, r) > 0;
    switch (r) {
    case CK_R_EAGER:
        return c->eager;
    case CK_R_WRITE2:
        return c->writes > 1;
    case CK_R_DUP:
    case CK_R_STALE:
    case CK_R_ORPHAN:
        return c->max_dups > 0;
    case CK_R_CAP:
        return c->caps > 0 && c->caps < c->T;
    case CK_R_RLAND:
    case CK_R_RINVAL:
        return c->rdma;
    case CK_R_RSTALE:
        /* Asked for by --stale-ops alone: in no other world does an id
         * get a new attempt while an op of an older one is in flight (its
         * tombstones outlive every message; tests/check/FINDINGS.md). */
        return c->stale_ops > 0;
    case CK_R_COPY:
    case CK_R_D2H:
        return c->copies;
    case CK_R_COPYFAIL:
        return c->copies && (c->faults & (1u << CK_FB_FAIL)) &&
               c->budget > 0 && c->max_faults > 0;
    case CK_R_E2E:
        return c->e2e;
    case CK_R_CORRUPT:
    case CK_R_CREFUSED:
        return c->max_corrupt > 0;
    case CK_R_GONE:
    case CK_R_GFAILED:
    case CK_R_BACK:
        return c->gone > 0;
    case CK_R_PADDED:
    case CK_R_PRELEASED:
        return c->parts > 0;
    case CK_R_RFGRANTED:
        return c->refresh > 0;
    case CK_R_RFREFUSED:
        /* a refresh finds its reservation gone only after a lease or a
         * consumer's cancel ended it under an open stream */
        return c->refresh > 0 && c->budget > 0 &&
               (c->faults & (CK_F(LEASE) | CK_F(CONSUMER)));
    case CK_R_PREFUSED:
        /* a failure or a stop needs a fault class that makes one */
        return c->parts > 0 && c->budget > 0 &&
               (c->faults & (CK_F(FAIL) | CK_F(CANCEL) | CK_F(DEADLINE) |
                             CK_F(SHUTDOWN)));
    default:
        return false;
    }
}

/* The option that asks for r, as the command line spells it. */
static void option(const ck_config *c, unsigned r, char *b, size_t n)
{
    if (r < CK_FB_COUNT_)
        snprintf(b, n, "--faults %s", names[r]);
    else if (r == CK_R_WRITE2)
        snprintf(b, n, "--writes %u", c->writes);
    else if (r == CK_R_DUP || r == CK_R_STALE || r == CK_R_ORPHAN)
        snprintf(b, n, "--dups %u", c->max_dups);
    else if (r == CK_R_CAP)
        snprintf(b, n, "--caps %u", c->caps);
    else if (r == CK_R_RSTALE)
        snprintf(b, n, "--stale-ops %u", c->stale_ops);
    else if (r == CK_R_RFGRANTED || r == CK_R_RFREFUSED)
        snprintf(b, n, "--refresh %u", c->refresh);
    else if (r == CK_R_RLAND || r == CK_R_RINVAL)
        snprintf(b, n, "--rdma");
    else if (r == CK_R_CORRUPT || r == CK_R_CREFUSED)
        snprintf(b, n, "--corrupt %u", c->max_corrupt);
    else if (r == CK_R_COPYFAIL)
        snprintf(b, n, "--copies --faults fail");
    else if (r == CK_R_D2H)
        snprintf(b, n, "--copies");
    else if (r >= CK_R_GONE && r <= CK_R_BACK)
        snprintf(b, n, "--gone %u", c->gone);
    else if (r >= CK_R_PADDED && r <= CK_R_PRELEASED)
        snprintf(b, n, "--parts %u", c->parts);
    else
        snprintf(b, n, "--%s", names[r]);
}

bool ck_reach_report(const ck_config *c, const uint64_t *n)
{
    bool ok = true, any = false;
    printf("reached (events over the explored transitions):");
    for (unsigned r = 0; r < CK_R_COUNT_; r++)
        if (ck_reach_wanted(c, r) || n[r]) {
            printf("%s %s %" PRIu64, any ? "," : "", names[r], n[r]);
            any = true;
        }
    printf("%s\n", any ? "" : " none asked for");
    for (unsigned r = 0; r < CK_R_COUNT_; r++)
        if (ck_reach_wanted(c, r) && n[r] == 0) {
            char o[64];
            option(c, r, o, sizeof o);
            printf("UNREACHED %s: %s\n", o, never[r]);
            ok = false;
        }
    return ok;
}
