/*
 * tools/check/copies.h - the --copies world mode (copies.c): shard pools
 * in device memory, where a WRITE's bytes land in a bounce buffer and a
 * copy into the region ends the write, and the monitors CREADY and CFREE.
 * The moves themselves are consumer.c's (a copy is the tail of a write on
 * the shard): a begun write's delivery starts its copy (MF_COPY), the
 * copy's delivery ends it ok, its MV_FAIL ends it failed (XFER_ERR_COPY),
 * its MV_LOST ends it ok with the reply lost.
 */
#ifndef XFER_CHECK_COPIES_H
#define XFER_CHECK_COPIES_H

#include <stdbool.h>
#include <stdint.h>

#include "world.h"

/* CREADY and CFREE after every step (monitor.c). */
void ck_copies_monitor_global(ck_world *w);
/* Whether a copy into shard `shard`'s region of transfer `tr` is in
 * flight (--copies): COVER leaves a commit then to CREADY. */
bool ck_copies_into(const ck_world *w, unsigned tr, unsigned shard);

#endif /* XFER_CHECK_COPIES_H */
