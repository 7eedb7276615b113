/*
 * tools/check/refresh.h - the --refresh world option (refresh.c): the
 * engine refreshes an open stream's reservations (issue 26's lease
 * refresh, docs/streaming.md), and each refresh reaches its shard in
 * whatever state the reservation is in by then.  The monitor RFRESH holds
 * the shard's answer to what xfer/shard.h documents.  Issue 30 item 2.
 */
#ifndef XFER_CHECK_REFRESH_H
#define XFER_CHECK_REFRESH_H

#include <stdbool.h>
#include <stddef.h>

#include "world.h"

/* The longest a refresh may hold a reservation: the shard's documented
 * default hold cap (xfer_shard_config.max_hold_ms 0: six leases). */
#define CK_MAX_HOLD (6ull * CK_LEASE_TTL)

/* The MV_REFRESH moves enabled now, into out; how many.  Its arg: the
 * transfer times CK_MAX_S plus the shard. */
unsigned ck_refresh_moves(const ck_world *w, ck_move *out);
/* The refresh arg names reaches its shard; RFRESH when the answer is not
 * the documented one. */
void ck_refresh_apply(ck_world *w, unsigned arg);
/* The refresh arg names, for a counterexample. */
void ck_refresh_describe(const ck_world *w, unsigned arg, char *b, size_t n);
/* When the lease of (transfer, shard) c runs out, as the monitors know it:
 * the reserve's lease, or a later end a refresh granted. */
uint64_t ck_refresh_lease_end(const mon_cs *c);

#endif /* XFER_CHECK_REFRESH_H */
