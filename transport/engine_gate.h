/*
 * engine_gate.h - the CUDA-event gate of xfer_engine_submit_gated: no op
 * of a gated transfer that reads its bytes (WRITE, EAGER) starts before
 * the transfer's event completed.  Internal to the engine (engine.c).
 *
 * Reserves go ahead while the kernel that produces the cache still runs
 * (they read no byte); a WRITE or EAGER the core starts before the event
 * completed is parked here, and started when a poll of the event (a
 * timer on the loop, every XFER_GATE_POLL_NS while anything is parked)
 * finds it complete.  The loop never blocks on the event.  Polling rather
 * than cuStreamWaitEvent on the copy stream: the gate must hold for every
 * kind of staging (a host pool filled by a kernel has no copy stream to
 * wait on) and for the test device; one cuEventQuery per parked transfer
 * per tick is the cost.  An event whose query fails (not NOT_READY) fails
 * the parked ops with XFER_ERR_COPY; an ABORT of a parked op answers it
 * ABORTED (from a deferred event, never from inside the core's step).
 */
#ifndef XFER_ENGINE_GATE_H
#define XFER_ENGINE_GATE_H

#include <stdbool.h>
#include <stdint.h>

#include "xfer/transport.h"

#define XFER_GATE_POLL_NS 100000ull /* 100 us */

enum { XFER_GATE_CUDA = 0, XFER_GATE_TESTDEV = 1 };

typedef struct xfer_gates xfer_gates;
/* Starts a parked op once its gate opened (the engine's own start). */
typedef void (*xfer_gate_start_fn)(struct xfer_engine *e,
                                   const xfer_action *a);

int xfer_gates_new(struct xfer_engine *e, xfer_gate_start_fn start,
                   xfer_gates **out);
void xfer_gates_del(xfer_gates *g);
/* Gate transfer `id` on `event` (borrowed until xfer_gates_remove). */
int xfer_gates_add(xfer_gates *g, uint64_t id, void *event, int kind);
/* The transfer ended (its COMPLETE): forget its gate.  Nothing of it can
 * be parked any more (its ops all had results). */
void xfer_gates_remove(xfer_gates *g, uint64_t id);
/* 1 when `a` (WRITE/EAGER) was parked (its gate is still closed), 0 when
 * it may start now, XFER_ERR_NOMEM: refuse it. */
int xfer_gates_hold(xfer_gates *g, const xfer_action *a);
/* True when the op `a` aborts was parked (it is answered ABORTED). */
bool xfer_gates_abort(xfer_gates *g, const xfer_action *a);
/* Gates whose event had not completed yet at their last poll, and times
 * an op was parked: for tests. */
uint64_t xfer_gates_parked_total(const xfer_gates *g);

#endif /* XFER_ENGINE_GATE_H */
