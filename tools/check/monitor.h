/*
 * tools/check/monitor.h - the observer monitors of invariants I1-I14
 * (monitor.c).  Each ck_monitor_* call reports one thing that crossed an
 * interface; ck_monitor_fail records the first violation of a path.
 */
#ifndef XFER_CHECK_MONITOR_H
#define XFER_CHECK_MONITOR_H

#include <stdbool.h>
#include <stdint.h>

#include "world.h"

/* The name ("I5") and description of an invariant (CK_I*); "?" past the
 * list. */
const char *ck_monitor_inv_name(unsigned inv);
const char *ck_monitor_inv_desc(unsigned inv);

void ck_monitor_fail(ck_world *w, int inv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ck_monitor_batch(ck_world *w);
void ck_monitor_action(ck_world *w, const xfer_action *a);
void ck_monitor_submit(ck_world *w, unsigned tr, int rc, bool late);
void ck_monitor_cancel(ck_world *w, unsigned tr, int rc,
                       xfer_transfer_state before);
void ck_monitor_core_timer(ck_world *w);
void ck_monitor_shutdown(ck_world *w);
void ck_monitor_ccancel(ck_world *w, unsigned tr);
void ck_monitor_result_in(ck_world *w, const ck_msg *m);
void ck_monitor_shard_op(ck_world *w, const ck_msg *m, int rc,
                         const xfer_resv_info *info);
void ck_monitor_write_end(ck_world *w, const ck_msg *m, bool ok, int rc);
/* --copies: a copy into a region ended (COVER's write end). */
void ck_monitor_copy_end(ck_world *w, const ck_msg *m, bool ok, int rc);
void ck_monitor_shard_event(ck_world *w, const xfer_shard_event *e);
void ck_monitor_ready_action(ck_world *w, const xfer_ready_action *a);
void ck_monitor_take_result(ck_world *w, unsigned tr, unsigned k, int rc,
                            uint64_t resv_id);
void ck_monitor_ready_event_in(ck_world *w, const ck_msg *m);
void ck_monitor_release(ck_world *w, unsigned tr, unsigned k, int rc);
void ck_monitor_consumer_cancel_applied(ck_world *w, const ck_msg *m, int rc);
void ck_monitor_staging(ck_world *w, unsigned tr, bool release);
void ck_monitor_pool_unregistered(ck_world *w);
void ck_monitor_shutdown_complete(ck_world *w);
/* I14: a producer cancel reached its shard (and its events were drained);
 * `before` is the monitors' view of that (transfer, shard) before it. */
void ck_monitor_cancel_done(ck_world *w, const ck_msg *m,
                            const mon_cs *before);
void ck_monitor_global(ck_world *w);
void ck_monitor_shard_timer(ck_world *w, unsigned k);
void ck_monitor_final(ck_world *w);

#endif /* XFER_CHECK_MONITOR_H */
