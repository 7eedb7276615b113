/*
 * tools/check/monitor.h - the observer monitors of invariants I1-I14
 * (monitor.c).  Each ck_mon_* call reports one thing that crossed an
 * interface; ck_mon_fail records the first violation of a path.
 */
#ifndef XFER_CHECK_MONITOR_H
#define XFER_CHECK_MONITOR_H

#include <stdbool.h>
#include <stdint.h>

#include "world.h"

/* The name ("I5") and description of an invariant (CK_I*); "?" past the
 * list. */
const char *ck_mon_inv_name(unsigned inv);
const char *ck_mon_inv_desc(unsigned inv);

void ck_mon_fail(ck_world *w, int inv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ck_mon_batch(ck_world *w);
void ck_mon_action(ck_world *w, const xfer_action *a);
void ck_mon_submit(ck_world *w, unsigned tr, int rc, bool late);
void ck_mon_cancel(ck_world *w, unsigned tr, int rc,
                   xfer_transfer_state before);
void ck_mon_core_timer(ck_world *w);
void ck_mon_shutdown(ck_world *w);
void ck_mon_ccancel(ck_world *w, unsigned tr);
void ck_mon_result_in(ck_world *w, const ck_msg *m);
void ck_mon_shard_op(ck_world *w, const ck_msg *m, int rc,
                     const xfer_resv_info *info);
void ck_mon_write_end(ck_world *w, const ck_msg *m, int rc);
void ck_mon_shard_event(ck_world *w, const xfer_shard_event *e);
void ck_mon_ready_action(ck_world *w, const xfer_ready_action *a);
void ck_mon_take_result(ck_world *w, unsigned tr, unsigned k, int rc,
                        uint64_t resv_id);
void ck_mon_ready_event_in(ck_world *w, const ck_msg *m);
void ck_mon_release(ck_world *w, unsigned tr, unsigned k, int rc);
void ck_mon_consumer_cancel_applied(ck_world *w, const ck_msg *m, int rc);
void ck_mon_staging(ck_world *w, unsigned tr, bool release);
void ck_mon_pool_unregistered(ck_world *w);
void ck_mon_shutdown_complete(ck_world *w);
void ck_mon_global(ck_world *w);
void ck_mon_shard_timer(ck_world *w, unsigned k);
void ck_mon_final(ck_world *w);

#endif /* XFER_CHECK_MONITOR_H */
