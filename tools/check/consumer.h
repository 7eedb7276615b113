/*
 * tools/check/consumer.h - the consumer side of a move (consumer.c): an op
 * reaching a shard, a write landing, shard events reaching the readiness
 * tracker, and the tracker's take / release / cancel reaching the shards.
 */
#ifndef XFER_CHECK_CONSUMER_H
#define XFER_CHECK_CONSUMER_H

#include "world.h"

/* Ways to handle an op message. */
enum { HOW_DELIVER = 0, HOW_FAIL = 1, HOW_LOST = 2, HOW_ABORT = 3 };

/* Handle message i the way `how` says. */
void ck_consumer_deliver(ck_world *w, unsigned i, int how);
/* --dups: op message i's connection died: the producer hears CONN_LOST
 * now; the op stays in flight (MF_ORPHAN), applied when delivered, with
 * no reply. */
void ck_consumer_orphan(ck_world *w, unsigned i);
/* Turn shard k's pending events into messages to the tracker. */
void ck_consumer_drain_shard(ck_world *w, unsigned k);
/* Turn the tracker's pending actions into messages to the shards. */
void ck_consumer_drain_ready(ck_world *w);
/* The consumer application releases every region it was handed. */
void ck_consumer_release_taken(ck_world *w);

#endif /* XFER_CHECK_CONSUMER_H */
