/*
 * tools/check/reach.h - what a search reached (reach.c): for every world
 * option and fault class, how often its events happened over the explored
 * transitions, so that a mode that never reaches what it names fails
 * instead of passing (issue 30, item 4(b)).
 *
 * The counts live in ck_world beside the state, never in it: no save,
 * load, key or move reads them, so the state counts stay.  Events of the
 * liveness phase are not counted (with --liveness all it runs from a
 * state once per claim, which on several threads is not a fixed number);
 * the E2E monitor's verdict at the end of a path is, once per leaf.
 */
#ifndef XFER_CHECK_REACH_H
#define XFER_CHECK_REACH_H

#include <stdbool.h>
#include <stdint.h>

/* name, what it counts, and the line printed when a run that asked for it
 * never reached it (after the option's name). */
#define CK_REACHES(X)                                                         \
    X(FAIL, "fail", "op RPCs failed unapplied", "no op RPC ever failed")      \
    X(LOST, "lost", "op replies lost", "no op reply was ever lost")           \
    X(ABORT, "abort", "ops aborted", "no op was ever aborted")                \
    X(LEASE, "lease", "shard timers fired early",                             \
      "no shard timer ever fired early")                                      \
    X(DEADLINE, "deadline", "core and tracker deadlines fired early",         \
      "no core or tracker deadline ever fired early")                         \
    X(CANCEL, "cancel", "producer cancels", "no producer cancel was made")    \
    X(LATE, "late", "late submits", "no late submit was made")                \
    X(SHUTDOWN, "shutdown", "engine shutdowns", "the engine never shut down") \
    X(CONSUMER, "consumer", "consumer cancels the tracker took",              \
      "the tracker never took a consumer cancel")                             \
    X(DROP, "drop", "consumer-side messages lost or takes failed",            \
      "no consumer-side message was ever lost")                               \
    X(CRASH, "crash", "producer crashes", "the producer never crashed")      \
    X(EAGER, "eager", "eager ops a shard applied",                            \
      "no eager op was ever taken")                                           \
    X(WRITE2, "writes", "later writes of a WRITE landed",                     \
      "no second write of a WRITE ever landed")                               \
    X(DUP, "dup", "events delivered twice",                                   \
      "no message was ever delivered twice")                                  \
    X(STALE, "stale", "replies of another attempt",                           \
      "no reply of another attempt ever reached the producer")                \
    X(CAP, "cap", "refusals at a cap (BUSY)",                                 \
      "no machine ever refused at its cap")                                   \
    X(RLAND, "rland", "one-sided writes landed",                              \
      "no one-sided write ever landed")                                       \
    X(RINVAL, "rinval", "rkey invalidations completed",                       \
      "no rkey invalidation ever completed")                                  \
    X(COPY, "copies", "copies into a device region begun",                   \
      "no copy into a device region ever began")                            \
    X(D2H, "d2h", "device-to-host copies of staging ended",                 \
      "no device-to-host copy of staging ever ended")                       \
    X(COPYFAIL, "copyfail", "copies failed (either direction)",             \
      "no copy ever failed")                                                \
    X(E2E, "e2e", "successes held to E2E at a path's end",                    \
      "no producer success was ever checked")                                 \
    X(CORRUPT, "corrupt", "corruptions injected",                             \
      "no write ever landed corrupt")                                         \
    X(CREFUSED, "crefused", "corrupt commits refused (CORRUPT)",              \
      "no shard ever refused a corrupt commit")                                \
    X(ORPHAN, "orphan", "ops applied after their connection died",         \
      "no op ever reached its shard after its connection died")              \
    X(RSTALE, "rstale", "ops of another attempt at a reservation waiting "    \
      "for its invalidation",                                                 \
      "no op of another attempt ever reached a reservation waiting for its "  \
      "invalidation")                                                         \
    X(PADDED, "padded", "stream parts the core took",                         \
      "no part was ever taken")                                               \
    X(PREFUSED, "prefused", "parts refused after a failure or a stop",        \
      "no part was ever refused after a failure or a stop")                   \
    X(PRELEASED, "preleased", "parts' staging released (RELEASE_PART)",       \
      "no part's staging was ever released")                               \
    X(GONE, "gone", "directory shard-gone events",                            \
      "no shard's directory entry ever vanished")                             \
    X(GFAILED, "gfailed", "ops failed SHARD_GONE at the producer",            \
      "no op ever failed SHARD_GONE")                                         \
    X(BACK, "back", "gone shards registered again",                           \
      "no gone shard ever registered again")                                  \
    X(RFGRANTED, "refresh", "lease refreshes a shard granted",                \
      "no shard ever granted a lease refresh")                                \
    X(RFREFUSED, "rfrefused", "lease refreshes a shard refused",              \
      "no shard ever refused a lease refresh")

enum {
#define CK_R_ENUM_(n, s, d, m) CK_R_##n,
    CK_REACHES(CK_R_ENUM_)
#undef CK_R_ENUM_
    CK_R_COUNT_
};
_Static_assert(CK_R_FAIL == 0 && CK_R_CRASH == 10,
               "the fault classes come first, in CK_FAULTS' order");

struct ck_world;
struct ck_config;

/* One event r in w (not in the liveness phase, nor while w->reach_off). */
void ck_reach_note(struct ck_world *w, unsigned r);
/* Whether cfg asks for r: its option is on, and for a fault class the
 * budget and the class's own bound leave room for one. */
bool ck_reach_wanted(const struct ck_config *cfg, unsigned r);
/* Print the counts (those wanted or nonzero) on one line, then one line
 * for each wanted count that is 0; true when every wanted one is not. */
bool ck_reach_report(const struct ck_config *cfg, const uint64_t *n);

#endif /* XFER_CHECK_REACH_H */
