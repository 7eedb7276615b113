/*
 * engine_copy.h - the producer's copy step: WRITE and EAGER ops whose
 * staging is device memory go out of pinned host bounce buffers, filled by
 * a device-to-host copy started when the core starts the op.  Internal to
 * the engine (engine.c).
 *
 * An op of a device pool lives here from its start until its result:
 *   COPYING  the D2H copy into its bounce buffer is in flight;
 *   WAITING  no bounce room yet (budget), queued in start order;
 *   SENT     the transport has the op, reading the bounce buffer;
 * and its bounce buffer is returned only when the transport's result for
 * it came (the transport let go of the bytes) or when its copy ended
 * without the op ever being sent.  So the staging region (released by the
 * core only after every write's result, I3) is held until its copy and
 * every write it fed have ended, and a bounce buffer is never reused under
 * a transport that may still read it.
 *
 * A failed copy fails its op (XFER_ERR_COPY, on its shard, in its phase:
 * the core rolls it back as any failed write); an abort during COPYING or
 * WAITING is answered XFER_ERR_ABORTED once the copy ended (never while
 * the copy still writes the bounce buffer).  Copies of several ops run
 * while earlier ops' bounce buffers are on the socket: the bounce budget
 * (xfer_engine_config.copy_budget_bytes, at least one op) keeps several
 * in flight, which is the double buffering of the TCP path.
 */
#ifndef XFER_ENGINE_COPY_H
#define XFER_ENGINE_COPY_H

#include <stdbool.h>
#include <stdint.h>

#include "copy.h"
#include "xfer/transport.h"

typedef struct xfer_ecopy xfer_ecopy;

/* budget: the bounce bytes held at once (at least one op's). */
int xfer_ecopy_new(struct xfer_engine *e, uint64_t budget, xfer_ecopy **out);
/* Teardown: no op may be held any more (the engine's transfers ended). */
void xfer_ecopy_del(xfer_ecopy *ec);

/* Take op `a` (WRITE or EAGER) whose staging bytes are at `dev` in memory
 * served by copy engine `cp`, for transport `tp`.  0: its result will be
 * delivered (xfer_engine_deliver) exactly once.  Else nothing follows. */
int xfer_ecopy_start(xfer_ecopy *ec, xfer_copy *cp, const xfer_action *a,
                     const void *dev, xfer_transport tp);
/* An ABORT for op (id, attempt, shard): true when the op is here and not
 * yet SENT (the abort is then this module's); false: forward it. */
bool xfer_ecopy_abort(xfer_ecopy *ec, const xfer_action *a);
/* Every result passes here before the core: the bounce buffer of a SENT
 * op it answers is returned. */
void xfer_ecopy_on_result(xfer_ecopy *ec, const xfer_shard_result *r);

/* Ops held (any state), and bounce bytes in use: for stats and tests. */
uint64_t xfer_ecopy_held(const xfer_ecopy *ec);
/* Copies that failed, since creation. */
uint64_t xfer_ecopy_failed(const xfer_ecopy *ec);

#endif /* XFER_ENGINE_COPY_H */
