/*
 * tools/check/gone.h - the --gone world mode (gone.c): the directory's
 * "shard gone" event (docs/discovery.md).  A shard's entry vanishes from
 * its group at any point: the producer's transport closes the connection
 * and fails every op it had sent or queued for that shard with
 * XFER_ERR_SHARD_GONE at once (transport/tcp.c, xfer_tcp_set_shard with
 * NULL), and fails every new op for it so, without waiting for a timeout,
 * until the shard registers again under a higher epoch.  The core rolls
 * back as after a lost connection.  Ops already on the wire may still be
 * read by the shard, which then answers nobody (as --dups's orphaned ops).
 * The monitor GONE holds the engine model to that; I1, I3, I5, I12, I13
 * and the liveness phase hold the core's reaction.
 */
#ifndef XFER_CHECK_GONE_H
#define XFER_CHECK_GONE_H

#include <stdbool.h>

#include "world.h"

/* Whether shard k's entry may vanish now (the move MV_GONE). */
bool ck_gone_may(const ck_world *w, unsigned k);
/* Whether gone shard k may register again now (the move MV_BACK). */
bool ck_gone_may_back(const ck_world *w, unsigned k);
/* Shard k's entry vanishes: its ops in flight fail SHARD_GONE at the
 * producer (and stay on the wire, orphaned), its replies in flight are
 * never read (the producer hears SHARD_GONE instead). */
void ck_gone_apply(ck_world *w, unsigned k);
/* Shard k registers again (a higher epoch): new ops go to it. */
void ck_gone_back(ck_world *w, unsigned k);
/* The engine model sends op m: true when its shard is gone, and the op
 * failed at once (a SHARD_GONE result in flight, nothing sent). */
bool ck_gone_refuse(ck_world *w, const ck_msg *m);
/* GONE, after every step (monitor.c). */
void ck_gone_monitor_global(ck_world *w);

#endif /* XFER_CHECK_GONE_H */
