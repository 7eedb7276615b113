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
 * Memory: 24 B per ring entry + 24 B of map per entry = 48 B per tombstone
 * (owner and flags sit in the entry's padding).
 *
 * Refreshing a tombstone (a second cancel of the same id) appends a new
 * entry with a full TTL and points the map at it; the old entry stays in the
 * ring, dead (flagged XFER_TOMB_DEAD_), until it reaches the head and is
 * popped without a callback.
 * Dead entries take room until then; they are never reported or saved.
 *
 * Owners (the consumer shard's sessions, xfer_tomb_owners_init): an entry
 * may name the small integer of the session whose record or cancel made
 * it, and is then visible only to that owner unless it is marked GLOBAL;
 * owner 0 (every entry of a table without owners) is visible to everyone.
 * A table with owners counts, per owner, its holds and its entries (live
 * and dead, since a dead one takes room until it is popped) and refuses a
 * hold or an insert past the owner's quota with XFER_ERR_BUSY, so no owner
 * can take room that the others' quotas promise them.  One entry per id:
 * when a second owner tombstones an id another owner's entry holds, the
 * entry stays the first's (a cancel) or becomes the second's (a record of
 * the second ended); never everyone's, so two owners cannot block a third.
 * Only the consumer's (or owner 0's) entries block everyone.
 *
 * Saving (for the machines' saves, fsm/save.h): the live entries oldest
 * first, as a count (u32) and per entry id (u64), expiry (u64), attempt
 * (u32) and reason (u8), 21 bytes, little-endian (fsm/le.h); with owners,
 * then owner (u16) and flags (u8), 24 bytes.  A table is
 * rebuilt from that by xfer_tomb_reset and xfer_tomb_restore, never by
 * writing its fields: the entries come back in order with their expiries,
 * no dead entry, and the clock at the newest entry's birth (the owner may
 * then set a clock it saved itself, xfer_tomb_set_clock).
 */
#ifndef XFER_FSM_TOMB_H
#define XFER_FSM_TOMB_H

#include <stdbool.h>
#include <stdint.h>

#include "idmap.h"
#include "le.h"
#include "ring.h"
#include "xfer/fsm.h"

/* Entry flags. */
#define XFER_TOMB_GLOBAL 1u /* visible to every owner */
/* Made by a producer's cancel of an id it held nothing of (pre-emptive):
 * it says nothing of another session's transfer of that id, so it is
 * never told to consumers as the id's end (xfer_shard_foreach_ended). */
#define XFER_TOMB_PREEMPT 2u
#define XFER_TOMB_SAVED_FLAGS (XFER_TOMB_GLOBAL | XFER_TOMB_PREEMPT)
/* Internal: a ring entry superseded by a newer one of its id (dead).  Only
 * dead entries carry it, so find, foreach and save never show it; it lets
 * foreach and expiry tell dead from live without a probe of the map. */
#define XFER_TOMB_DEAD_ 0x80u

typedef struct xfer_tomb_entry {
    uint64_t id;
    uint64_t expires_ns;
    uint32_t attempt;
    uint16_t owner; /* who made it; 0: nobody in particular (global) */
    uint8_t reason; /* the owner's meaning: a state or an error */
    uint8_t flags;  /* XFER_TOMB_GLOBAL, XFER_TOMB_PREEMPT */
} xfer_tomb_entry;

typedef struct xfer_tomb {
    xfer_tomb_entry *ents; /* the ring's array: cap entries */
    xfer_ring ring;        /* entries, oldest first */
    uint32_t held;
    uint32_t dead;  /* ring entries superseded by a refresh */
    xfer_idmap map; /* id -> slot in ents */
    uint64_t ttl_ns, last_now;
    uint32_t *owned;     /* [nowners + 1]: holds + entries per owner */
    uint16_t nowners;    /* 0: no owners (every entry is owner 0) */
    uint32_t owner_quota; /* per owner 1..nowners */
} xfer_tomb;

/* Does e block owner `owner`?  Owner 0 (a caller that is nobody in
 * particular) sees every entry. */
static inline bool xfer_tomb_visible(const xfer_tomb_entry *e,
                                     uint16_t owner)
{
    return owner == 0 || e->owner == 0 || e->owner == owner ||
           (e->flags & XFER_TOMB_GLOBAL);
}

typedef void (*xfer_tomb_drop_fn)(void *ud, const xfer_tomb_entry *e);

/* Errors: XFER_ERR_NOMEM, XFER_ERR_INVALID_ARG. */
int xfer_tomb_init(xfer_tomb *t, uint32_t cap, uint64_t ttl_ns,
                   const xfer_allocator *a);
void xfer_tomb_clear(xfer_tomb *t, const xfer_allocator *a);
/* Give an empty table owners 1..nowners, each allowed `quota` holds and
 * entries.  Errors: XFER_ERR_NOMEM, XFER_ERR_INVALID_ARG (nowners 0, quota
 * 0, or entries already there). */
int xfer_tomb_owners_init(xfer_tomb *t, uint16_t nowners, uint32_t quota,
                          const xfer_allocator *a);
/* Holds and entries (dead ones included) counted for owner (0: those of
 * nobody in particular are not counted, 0 is returned). */
uint32_t xfer_tomb_owned(const xfer_tomb *t, uint16_t owner);

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
/* The same for `owner` (0: nobody in particular), counted against its
 * quota.  Errors: XFER_ERR_BUSY (the cap, or the owner's quota). */
int xfer_tomb_hold_by(xfer_tomb *t, uint64_t now_ns, uint16_t owner);
/* Give back a hold that will not become an entry. */
void xfer_tomb_unhold(xfer_tomb *t);
void xfer_tomb_unhold_by(xfer_tomb *t, uint16_t owner);
/* Turn a hold into an entry.  Never fails.  An id already present gets a
 * fresh entry with a full TTL (the old one becomes dead). */
void xfer_tomb_insert_held(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                           uint32_t attempt, uint8_t reason);
/* The same for the hold of `owner`, with `flags`; when the old entry of
 * the id was owner 0's or GLOBAL, the new one is GLOBAL. */
void xfer_tomb_insert_held_by(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                              uint32_t attempt, uint8_t reason,
                              uint16_t owner, uint8_t flags);
/* Insert without a hold.  Errors: XFER_ERR_BUSY (cap, nothing expired).
 * An id already present: 0, entry unchanged. */
int xfer_tomb_insert(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                     uint32_t attempt, uint8_t reason);
/* The same for `owner` with `flags`.  An id already present: 0, and the
 * entry is left as it is, except that flags (GLOBAL) are added to it.
 * Errors: XFER_ERR_BUSY (the cap, or the owner's quota). */
int xfer_tomb_insert_by(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                        uint32_t attempt, uint8_t reason, uint16_t owner,
                        uint8_t flags);
/* Mark the entry of id GLOBAL (nothing when there is none). */
void xfer_tomb_make_global(xfer_tomb *t, uint64_t id);
/* Give an id's tombstone a full TTL from now, with `attempt` and `reason`
 * (insert it when absent).  Errors: XFER_ERR_BUSY (no room even after
 * dropping expired entries: the old entry, if any, keeps its expiry but
 * takes `attempt` and `reason`). */
int xfer_tomb_refresh(xfer_tomb *t, uint64_t now_ns, uint64_t id,
                      uint32_t attempt, uint8_t reason);
/* Forget id's entry and take a hold in its place, for a new record of the
 * id (readiness: a newer attempt leaves an older one's tombstone).  The
 * oldest entry's slot becomes the hold at once, so at a cap that binds
 * this never fails; any other entry stays, dead, until it would have
 * expired, and the hold is taken like xfer_tomb_hold_by's for the entry's
 * owner.  Errors: XFER_ERR_NOT_FOUND (no entry), XFER_ERR_BUSY (no room
 * for the hold: nothing changed). */
int xfer_tomb_hold_over(xfer_tomb *t, uint64_t now_ns, uint64_t id);
/* Tombstones that are not dead entries. */
uint32_t xfer_tomb_live(const xfer_tomb *t);
/* Ring entries, dead ones included (what takes room with the holds). */
uint32_t xfer_tomb_entries(const xfer_tomb *t);
/* Every slot is taken by an entry (live or dead) or a hold: a hold or an
 * insert needs an expiry first. */
bool xfer_tomb_full(const xfer_tomb *t);
/* The latest time the table has seen (its clamp). */
uint64_t xfer_tomb_clock(const xfer_tomb *t);
/* Earliest expiry, or UINT64_MAX. */
uint64_t xfer_tomb_next_expiry(const xfer_tomb *t);
/* Visit the live (not superseded) entries, oldest first. */
void xfer_tomb_foreach(const xfer_tomb *t,
                       void (*fn)(void *ud, const xfer_tomb_entry *e),
                       void *ud);
size_t xfer_tomb_bytes_per_entry(void);

/* Forget every entry and hold; the clock goes back to 0.  Never fails. */
void xfer_tomb_reset(xfer_tomb *t);
/* Write the live entries (see the top of this file) to e (borrowed). */
void xfer_tomb_save(const xfer_tomb *t, xfer_le_enc *e);
/* The same with every id written as map(ud, id) (map NULL: as it is): the
 * machines' canonical forms that rename transfer ids (fsm/save.h). */
typedef uint64_t (*xfer_tomb_map_fn)(const void *ud, uint64_t id);
void xfer_tomb_save_map(const xfer_tomb *t, xfer_le_enc *e,
                        xfer_tomb_map_fn map, const void *ud);
/* A saved entry (borrowed) is acceptable to its owner (its reason, an id
 * that is not live). */
typedef bool (*xfer_tomb_ok_fn)(void *ud, const xfer_tomb_entry *e);
/*
 * Read saved entries from d (borrowed) without changing t: true when the
 * count fits the cap next to `holds` and every entry has a non-zero id, an
 * expiry at least the TTL and not before the previous one, and passes `ok`
 * (NULL: anything).  A duplicate id is found only by xfer_tomb_restore.
 */
bool xfer_tomb_check(const xfer_tomb *t, xfer_le_dec *d, uint32_t holds,
                     xfer_tomb_ok_fn ok, void *ud);
/*
 * Reset t and load the entries at d (checked by xfer_tomb_check), then take
 * `holds` holds (of nobody in particular: the owner charges each of them
 * with xfer_tomb_charge_hold).  Errors: XFER_ERR_FORMAT (a duplicate id,
 * or a read past the end: t is then reset).
 */
int xfer_tomb_restore(xfer_tomb *t, xfer_le_dec *d, uint32_t holds);
/* A hold of `owner` becomes nobody's in particular (no longer counted
 * against its quota): the consumer ended its record, so the tombstone
 * is the consumer's doing, not the owner's. */
void xfer_tomb_uncharge_hold(xfer_tomb *t, uint16_t owner);
/* Count one of the holds restore took for `owner` (1..nowners). */
void xfer_tomb_charge_hold(xfer_tomb *t, uint16_t owner);
/* Set the clock to a saved xfer_tomb_clock (at least the newest entry's
 * birth; returns false and changes nothing otherwise). */
bool xfer_tomb_set_clock(xfer_tomb *t, uint64_t now_ns);

#endif /* XFER_FSM_TOMB_H */
