/*
 * tools/demo_agree.h - do the producer and the consumer process of `xfer-demo
 * --tcp` agree on every transfer?  The rules (the issue's, docs/design.md
 * section 2.1):
 *  - every id has exactly one outcome on each side (an id the producer
 *    refused at submit has none there, and ends unavailable on the
 *    consumer at its deadline);
 *  - a transfer the producer reports done, and the consumer did not
 *    cancel, is available to the consumer with every byte right, unless
 *    the killed shard took it down: unavailable with CONN_LOST (its link
 *    was lost while it waited) or EXPIRED (its ready was emitted while no
 *    consumer link was up, and the other shards' leases ran out);
 *  - a transfer that failed before COMPLETING is never available;
 *  - one that failed in COMPLETING ("the consumer may hold it") is either,
 *    never both (the one-outcome rule).
 */
#ifndef XFER_DEMO_AGREE_H
#define XFER_DEMO_AGREE_H

#include <stdbool.h>
#include <stdint.h>

#include "demo_consumer.h"

/* What the producer saw for one id. */
typedef struct demo_produced {
    uint8_t completions;
    uint8_t phase;     /* xfer_phase of a failure */
    uint8_t may_hold;
    int32_t status;
} demo_produced;

typedef struct demo_agreement {
    uint64_t done_available, done_lost_conn, done_lost_expired;
    uint64_t done_cancelled;  /* done, then cancelled by the consumer */
    uint64_t done_bad;        /* done, not cancelled, yet unavailable
                                 for another reason: a violation */
    uint64_t early_available; /* failed before COMPLETING, yet available:
                                 a violation */
    uint64_t may_hold_available, may_hold_unavailable;
    uint64_t producer_not_once, consumer_not_once; /* violations */
    uint64_t unverified;      /* available with a wrong byte: a violation */
    uint64_t first_bad_id;    /* 0: none */
} demo_agreement;

/* Compare ids 1..n.  Both arrays are borrowed. */
void demo_agree(const demo_produced *p, const demo_consumer_report *r,
                uint32_t n, demo_agreement *a);
/* True when no rule was broken. */
bool demo_agreed(const demo_agreement *a);

#endif /* XFER_DEMO_AGREE_H */
