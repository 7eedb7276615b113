/*
 * fsm/tomb.h - a bounded tombstone table: id -> (attempt, reason), each entry
 * living exactly `ttl_ns` from its insertion.
 *
 * Entries sit in a FIFO ring.  Because every entry gets the same TTL and the
 * table clamps time to be monotonic, ring order is expiry order, so expiry
 * pops from the head in O(1) and nothing expired is ever stranded behind an
 * entry that expires later.  Lookup is O(1) through an idmap.
 *
 * The cap counts entries plus "holds": a live record takes a hold when it is
 * created, and its end turns the hold into an entry without any check, so a
 * transfer can always be tombstoned.  At the cap, an entry younger than its
 * TTL is never evicted: inserting or holding returns XFER_ERR_BUSY.
 * Memory: 24 B per ring entry + 24 B of map per entry = 48 B per tombstone.
 *
 * Refreshing a tombstone (a second cancel of the same id) appends a new
 * entry with a full TTL and points the map at it; the old entry stays in the
 * ring, dead, until it reaches the head and is popped without a callback.
 * Dead entries take room until then; they are never reported or saved.
 */
#ifndef XFER_FSM_TOMB_H
#define XFER_FSM_TOMB_H

#include <stdbool.h>
#include <stdint.h>

#include "idmap.h"
#include "xfer/fsm.h"

typedef struct xfer_tomb_entry {
    uint64_t id;
    uint64_t expires_ns;
    uint32_t attempt;
    uint8_t reason; /* the owner's meaning: a state or an error */
} xfer_tomb_entry;

typedef struct xfer_tomb {
    xfer_tomb_entry *ring;
    uint32_t head, n, cap, held;
    uint32_t dead;  /* ring entries superseded by a refresh */
    xfer_idmap map; /* id -> ring index */
    uint64_t ttl_ns, last_now;
} xfer_tomb;

typedef void (*xfer_tomb_drop_fn)(void *ud, const xfer_tomb_entry *e);

/* Errors: XFER_ERR_NOMEM, XFER_ERR_INVALID_ARG. */
int xfer_tomb_init(xfer_tomb *t, uint32_t cap, uint64_t ttl_ns,
                   const xfer_allocator *a);
void xfer_tomb_clear(xfer_tomb *t, const xfer_allocator *a);

/* Drop every entry expired at now_ns (at most `max`; 0 = no limit), calling
 * drop for each.  Returns how many were dropped. */
uint32_t xfer_tomb_expire(xfer_tomb *t, uint64_t now_ns, uint32_t max,
                          xfer_tomb_drop_fn drop, void *ud);
/* The entry for id, or NULL.  Valid until the next mutating call. */
const xfer_tomb_entry *xfer_tomb_find(const xfer_tomb *t, uint64_t id);
/* Reserve room for a live record's future tombstone.  Drops expired entries
 * first (without a callback: use xfer_tomb_expire for that).
 * Errors: XFER_ERR_BUSY. */
int xfer_tomb_hold(xfer_tomb *t, uint64_t now_ns);
/* Give back a hold that will not become an entry. */
void xfer_tomb_unhold(xfer_tomb *t);
/* Turn a hold into an entry.  Never fails.  An id already present gets a
 * fresh entry with a full TTL (the old one becomes dead). */
void xfer_tomb_insert_held(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                           uint32_t attempt, uint8_t reason);
/* Insert without a hold.  Errors: XFER_ERR_BUSY (cap, nothing expired).
 * An id already present: 0, entry unchanged. */
int xfer_tomb_insert(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                     uint32_t attempt, uint8_t reason);
/* Give an id's tombstone a full TTL from now (insert it when absent).
 * Errors: XFER_ERR_BUSY (no room even after dropping expired entries: the
 * old entry, if any, keeps its expiry). */
int xfer_tomb_refresh(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                      uint32_t attempt, uint8_t reason);
/* Tombstones that are not dead entries. */
uint32_t xfer_tomb_live(const xfer_tomb *t);
/* Earliest expiry, or UINT64_MAX. */
uint64_t xfer_tomb_next_expiry(const xfer_tomb *t);
/* Visit the live (not superseded) entries, oldest first. */
void xfer_tomb_foreach(const xfer_tomb *t,
                       void (*fn)(void *ud, const xfer_tomb_entry *e),
                       void *ud);
size_t xfer_tomb_bytes_per_entry(void);

#endif /* XFER_FSM_TOMB_H */
