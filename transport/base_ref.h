/*
 * transport/base_ref.h - who still uses an engine-owned event_base.
 *
 * An engine created without a base makes its own (xfer_engine_base), and
 * every object of this library may be created on it: transports, servers,
 * consumers, metrics, control sockets.  A user deletes them in any order;
 * the base must outlive the last one, or that one's _del frees events on a
 * dead base (issue 23, item 1).  So the engine registers the base it made
 * here with one reference (its own); every object created on a base takes
 * one more and drops it at its _del; the base is freed at the last drop,
 * whoever drops it.
 *
 * A base the caller made is never registered: ref and unref do nothing for
 * it, and the caller keeps the rule "the base outlives every object on it".
 *
 * Any thread (one mutex guards the registry; the Python binding runs a loop
 * per thread).  Nothing here allocates except xfer_base_adopt.
 */
#ifndef XFER_TRANSPORT_BASE_REF_H
#define XFER_TRANSPORT_BASE_REF_H

struct event_base;

/* Register `base` (just made by the engine) with one reference.  Returns
 * 0 or XFER_ERR_NOMEM (then nothing is registered). */
int xfer_base_adopt(struct event_base *base);
/* One more reference on `base` if it is registered; nothing otherwise.
 * NULL ok. */
void xfer_base_ref(struct event_base *base);
/* Drop one reference; at the last, unregister and event_base_free it.  A
 * base that is not registered is left alone.  NULL ok.  Call it after the
 * caller freed its own events on the base. */
void xfer_base_unref(struct event_base *base);

#endif /* XFER_TRANSPORT_BASE_REF_H */
