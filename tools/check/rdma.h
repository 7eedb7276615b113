/*
 * tools/check/rdma.h - the --rdma world mode (rdma.c): one-sided shards,
 * posted writes that land without the shard, the driver's rkeys and
 * invalidations, and the monitors RLAND, RREADY and RINVAL.
 */
#ifndef XFER_CHECK_RDMA_H
#define XFER_CHECK_RDMA_H

#include <stdbool.h>
#include <stdint.h>

#include "world.h"

/* A reserve of m (an op message) succeeded with info: the driver binds the
 * reservation's rkey (once per reservation). */
void ck_rdma_reserved(ck_world *w, const ck_msg *m,
                      const xfer_resv_info *info);
/* A posted WRITE m reached its shard the way `how` (HOW_*) says: it lands,
 * completes, fails or is orphaned.  True when the producer hears now, with
 * *status. */
bool ck_rdma_write(ck_world *w, const ck_msg *m, int how, int32_t *status);
/* An op reaching its shard: counts (reach RSTALE) an op of another
 * attempt that finds the id's reservation waiting for its invalidation. */
void ck_rdma_op_seen(ck_world *w, const ck_msg *m);
/* Turn shard k's invalidation requests into driver work (MK_INV). */
void ck_rdma_drain_shard(ck_world *w, unsigned k);
/* An MK_INV m is delivered: the invalidation completes (the rkey dies), or
 * the shard is told that it did. */
void ck_rdma_inval(ck_world *w, const ck_msg *m);
/* Whether the rkey of resv_id on shard k is live. */
bool ck_rdma_rkey_live(const ck_world *w, unsigned k, uint64_t resv_id);

/* Monitors, called by monitor.c: a shard event (RREADY), after every step
 * (RINVAL), at the end of a path (RINVAL). */
void ck_rdma_monitor_event(ck_world *w, const xfer_shard_event *e);
void ck_rdma_monitor_global(ck_world *w);
void ck_rdma_monitor_final(ck_world *w);

#endif /* XFER_CHECK_RDMA_H */
