/*
 * tools/check/net.h - the messages in flight (net.c): a sorted multiset, so
 * the moves that deliver them are numbered by the state alone.
 */
#ifndef XFER_CHECK_NET_H
#define XFER_CHECK_NET_H

#include <stdint.h>

#include "world.h"

/* Add m (copied) to the messages in flight. */
void ck_net_push(ck_world *w, const ck_msg *m);
/* Remove message i. */
void ck_net_remove(ck_world *w, unsigned i);
/* Put the messages in their canonical order (after every move). */
void ck_net_sort(ck_world *w);
/* How many entries are messages that can be delivered (all but the
 * MK_RKEY entries, which sort last): the first ck_net_pending() ones. */
unsigned ck_net_pending(const ck_world *w);
/* The latest time every message in flight must be delivered by. */
uint64_t ck_net_horizon(const ck_world *w);

#endif /* XFER_CHECK_NET_H */
