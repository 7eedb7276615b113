/*
 * fsm/shard_priv.h - what the parts of the consumer shard share:
 * fsm/shard.c (the reservation machine), fsm/shard_save.c (its save and
 * load for the model checker) and fsm/shard_check.c (its integrity
 * verdict).  The shard struct, the live record, the
 * scratch entry behind the sorted views, and the few helpers both call.
 *
 * Only those files include it; the model checker and the tests reach
 * save and load through save.h, and everyone else through xfer/shard.h.
 * Nothing here is exported from the library (hidden visibility).
 */
#ifndef XFER_FSM_SHARD_PRIV_H
#define XFER_FSM_SHARD_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include "heap.h"
#include "idmap.h"
#include "pool.h"
#include "tomb.h"
#include "xfer/shard.h"

#define XFER_SHARD_NO_LEASE UINT32_MAX /* rank of a record without a lease */

/* Record flags. */
#define XFER_SHARD_F_MULTI 1u    /* writes ran next to each other since the
                                    record last had none in flight */
#define XFER_SHARD_F_CONSUMER 2u /* CANCEL_PENDING by the consumer's cancel:
                                    its tombstone blocks everyone */

/* One live reservation.  state NONE marks a free slot.  What completed
 * writes covered (shard.h says how) is a set of ranges: the prefix
 * [0, covered) and nfrag fragments frag[i] = {start, end} past it, sorted,
 * each starting after a gap (start > covered, start > the previous end)
 * and ending inside the region; a write that closes the gap after the
 * prefix folds the fragments it reaches into it.  woff and wlen: the range
 * of the one write in flight (writes > 0, no F_MULTI), else 0. */
typedef struct xfer_shard_resv {
    uint64_t id, resv_id, off, created_ns;
    uint32_t attempt, len, writes;
    uint32_t covered, woff, wlen;
    uint32_t copies; /* of the writes, those whose copy into the region (a
                      * device pool) is in flight: <= writes */
    uint16_t owner; /* 0: nobody in particular */
    uint8_t state;
    uint8_t flags;  /* XFER_SHARD_F_* */
    uint8_t nfrag;  /* fragments past the prefix, <= XFER_SHARD_MAX_FRAGMENTS */
    uint32_t frag[XFER_SHARD_MAX_FRAGMENTS][2];
} xfer_shard_resv;

/* What one owner holds (index 1..max_owners of xfer_shard.use). */
typedef struct xfer_shard_use {
    uint32_t live;
    uint64_t bytes;
} xfer_shard_use;

/* Scratch entry for sorting records (save, load, foreach). */
typedef struct xfer_shard_sort_ent {
    uint64_t k1, k2;
    uint32_t slot, rank;
} xfer_shard_sort_ent;

struct xfer_shard {
    xfer_shard_config cfg;   /* defaults applied */
    xfer_shard_resv *recs;   /* max_reservations slots */
    uint32_t *free_slots;    /* stack of free slot numbers */
    uint32_t nfree, live;
    xfer_shard_sort_ent *scratch; /* max_reservations entries */
    xfer_idmap ids;          /* id -> slot */
    xfer_heap leases;        /* slot -> lease deadline */
    xfer_tomb tombs;         /* reason: xfer_resv_state */
    xfer_pool pool;
    uint8_t *mem;            /* pool base */
    void *mem_block;         /* what we allocated for it, or NULL */
    xfer_shard_event *evs;
    uint32_t nev, ev_cap, ev_reserved;
    xfer_shard_use *use;     /* [max_owners + 1], or NULL without owners */
    xfer_shard_inval *invals; /* one-sided: invalidations asked for */
    uint32_t ninval;          /* at most max_reservations */
    uint64_t rng_state;      /* internal splitmix64 when no rng injected */
    uint64_t seq;            /* trace sequence */
    xfer_shard_stats st;     /* counters */
    uint64_t cells_hit[XFER_RESV_STATE_COUNT_][XFER_RESV_EVENT_COUNT_];
};

/* A one-sided record waiting for its rkey's invalidation. */
static inline bool xfer_shard_is_inval(unsigned st)
{
    return st == XFER_RESV_STATE_COMMIT_INVAL ||
           st == XFER_RESV_STATE_CANCEL_INVAL ||
           st == XFER_RESV_STATE_EXPIRE_INVAL;
}

/* The hold cap of a refreshed reservation (xfer_shard_config.max_hold_ms;
 * 0: six leases). */
static inline uint64_t xfer_shard_hold_ns(const xfer_shard *s)
{
    if (s->cfg.max_hold_ms)
        return (uint64_t)s->cfg.max_hold_ms * 1000000ull;
    return s->cfg.lease_ttl_ns > UINT64_MAX / 6 ? UINT64_MAX
                                                : 6 * s->cfg.lease_ttl_ns;
}

/* A state only a tombstone holds: the record has ended. */
static inline bool xfer_shard_is_tomb(unsigned st)
{
    return st == XFER_RESV_STATE_CANCELLED || st == XFER_RESV_STATE_EXPIRED ||
           st == XFER_RESV_STATE_DONE;
}

/*
 * qsort comparator for xfer_shard_sort_ent: by k1, then k2 (slot and rank
 * are ignored).  a and b are borrowed.
 */
int xfer_shard_cmp_ent(const void *a, const void *b);

/*
 * Fill s->scratch with the live slots sorted by id and return how many.
 * Each entry's k1 is the record's id, k2 its lease deadline and rank its
 * position among leases with the same deadline (the heap pops those in set
 * order), XFER_SHARD_NO_LEASE for none.  s is borrowed; its scratch array
 * is overwritten, so this is not reentrant (foreach, save and load share
 * it).
 */
uint32_t xfer_shard_sorted_live(const xfer_shard *s);

/*
 * Mark every record slot free, slot 0 handed out first; live becomes 0.
 * Touches only recs, free_slots, nfree and live: the id map, leases, pool
 * and tombstones are the caller's to reset.  s is borrowed.
 */
void xfer_shard_reset_slots(xfer_shard *s);

#endif /* XFER_FSM_SHARD_PRIV_H */
