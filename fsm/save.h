/*
 * fsm/save.h - the declared save, load and canonical form of the three
 * machines of fsm/ (the transfer core, a consumer shard, the readiness
 * tracker): how the model checker (tools/check), replay and the tests read
 * a machine's state and put it back, without its private headers.
 *
 * Not public API (it is reached through fsm_private_dep and not exported),
 * but a contract all the same:
 *  - A save holds exactly the dynamic state that decides what the machine
 *    does next, and nothing that does not (counters, stats, cells_hit,
 *    trace sequence numbers, slot numbers, heap insertion counters, the
 *    bytes in a shard's pool).  It is canonical: two machines that behave
 *    alike save to the same bytes.  A machine built with the same config
 *    and loaded from a save answers every input as the saved one would.
 *  - Every save opens with XFER_SAVE_HDR bytes: 'X', the machine's letter
 *    (xfer_save_machine), 'S', and the format version of that machine
 *    (XFER_*_SAVE_VERSION); a load refuses any other machine or version.
 *    Integers are little-endian (fsm/le.h).
 *  - A save into a buffer that cannot hold the state fails with
 *    XFER_ERR_TOO_SMALL and the size it needs, and writes nothing past the
 *    buffer; it never truncates.  buf may be NULL with len 0 to ask the size.
 *  - The canonical form (xfer_core_canon, xfer_readiness_canon) is what
 *    symmetry reduction over shards needs: the shards of a group are
 *    interchangeable, so the machine's state is split into one part that
 *    names no shard (every shard-indexed datum taken out: per-shard
 *    records, mask bits, shard references) and, per shard k, a part with
 *    everything about shard k, written without k.  Renaming the shards of a
 *    machine by a permutation p leaves the first part as it is and moves
 *    part k to part p[k]; so two machines are one another renamed exactly
 *    when their first parts are equal and their per-shard parts are equal
 *    as multisets.  A shard's own save names no shard (its index is
 *    config), so it is its own canonical form.
 *  - Symmetry over transfers: a canonical form may also rename transfer
 *    ids (xfer_canon.ids, xfer_shard_canon).  It is then the canonical
 *    form the machine would give had every id been renamed in its whole
 *    history: each id written through the map, and whatever is ordered by
 *    id (records) ordered by the renamed ids; what is ordered by time or
 *    by arrival (timers, tombstones, events) keeps its order.  So two
 *    machines are one another with ids renamed by p exactly when the form
 *    of one renamed by p equals the form of the other.
 *
 * Thread: a save or a load runs on the thread that drives the machine; a
 * save uses the machine's scratch space (shard, tracker), so two saves of
 * one machine must not run at once.  Every pointer is borrowed.
 */
#ifndef XFER_FSM_SAVE_H
#define XFER_FSM_SAVE_H

#include <stddef.h>
#include <stdint.h>

#include "xfer/core.h"
#include "xfer/readiness.h"
#include "xfer/shard.h"

/* The letters of the machines in the second byte of a save. */
typedef enum xfer_save_machine {
    XFER_SAVE_CORE = 'C',
    XFER_SAVE_SHARD = 'H',
    XFER_SAVE_READINESS = 'R',
} xfer_save_machine;

/* The format versions written (and the only ones loaded). */
#define XFER_CORE_SAVE_VERSION 4      /* 1: raw structs, records past 256 dropped;
                                         2: no eager fields;
                                         3: no streams */
#define XFER_SHARD_SAVE_VERSION 3      /* 1: no written prefix, no owners; 2: no copies in flight */
#define XFER_READINESS_SAVE_VERSION 2 /* 1: no deferred consumer cancel */
#define XFER_SAVE_HDR 4

/* Read the header of a save: 0 with *machine and *version set, or
 * XFER_ERR_FORMAT (shorter than a header, or not a save). */
int xfer_save_peek(const uint8_t *buf, size_t len, xfer_save_machine *machine,
                   unsigned *version);

/*
 * Save a machine into buf (len bytes): 0 with *need the bytes written, or
 * XFER_ERR_TOO_SMALL with *need the bytes the save takes (nothing written
 * past len), XFER_ERR_INVALID_ARG (a NULL machine or need).  The core also
 * refuses with XFER_ERR_STATE while its action list is not empty (drain it
 * first: actions are output, not state).
 */
int xfer_core_save(const xfer_core *core, uint8_t *buf, size_t len,
                   size_t *need);
int xfer_shard_save(const xfer_shard *s, uint8_t *buf, size_t len,
                    size_t *need);
int xfer_readiness_save(const xfer_readiness *r, uint8_t *buf, size_t len,
                        size_t *need);

/*
 * Replace the dynamic state of a machine, created with the same config as
 * the saved one, by the save in buf (len bytes).  Counters and stats are
 * kept.  Errors: XFER_ERR_INVALID_ARG (NULL), XFER_ERR_FORMAT (another
 * machine, version or config, bad bytes, or a state that breaks one of the
 * machine's invariants).  On XFER_ERR_FORMAT the machine is unchanged,
 * except for two tombstones with one id, found only while loading: it is
 * then left empty (as if new).
 */
int xfer_core_load(xfer_core *core, const uint8_t *buf, size_t len);
int xfer_shard_load(xfer_shard *s, const uint8_t *buf, size_t len);
int xfer_readiness_load(xfer_readiness *r, const uint8_t *buf, size_t len);

/*
 * A renaming of transfer ids: from[i] is written as to[i] (i < n), every
 * other id as it is.  to[] must be a permutation of from[] (the ids are
 * distinct), so the renaming is a bijection and the order of renamed ids
 * is well defined.  A zeroed map renames nothing.
 */
#define XFER_CANON_MAX_IDS 4
typedef struct xfer_canon_ids {
    unsigned n;
    uint64_t from[XFER_CANON_MAX_IDS], to[XFER_CANON_MAX_IDS];
} xfer_canon_ids;

/* id renamed by m (NULL: no renaming). */
static inline uint64_t xfer_canon_ids_map(const xfer_canon_ids *m,
                                          uint64_t id)
{
    for (unsigned i = 0; m && i < m->n && i < XFER_CANON_MAX_IDS; i++)
        if (m->from[i] == id)
            return m->to[i];
    return id;
}

/*
 * Where a canonical form goes: the caller's buffer of nshards + 1 parts of
 * `stride` bytes each; part 0 names no shard, part 1 + k is about shard k.
 * On return len[i] is the bytes of part i (what it needs, on
 * XFER_ERR_TOO_SMALL).  ids (borrowed, NULL: none) renames transfer ids.
 */
typedef struct xfer_canon {
    uint8_t *buf;
    size_t stride;
    size_t len[XFER_MAX_SHARDS + 1];
    const xfer_canon_ids *ids;
} xfer_canon;

/* Part i of a canonical form. */
static inline const uint8_t *xfer_canon_part(const xfer_canon *c, unsigned i)
{
    return c->buf + (size_t)i * c->stride;
}

/*
 * The canonical form of a core whose live transfers all span the shards
 * 0..nshards-1 of one group (1 <= nshards <= the core's max_shards), or of
 * a tracker (its own nshards).  Errors: XFER_ERR_INVALID_ARG (NULL, a bad
 * nshards), XFER_ERR_STATE (a live transfer with another shard count; a
 * pending action, which names a shard in an order that a split would
 * lose), XFER_ERR_TOO_SMALL (a part longer than the stride; len[] says
 * how long).
 */
int xfer_core_canon(const xfer_core *core, uint16_t nshards, xfer_canon *out);
int xfer_readiness_canon(const xfer_readiness *r, xfer_canon *out);

/*
 * A shard's save with its transfer ids renamed by ids (NULL: the save
 * itself), into buf as xfer_shard_save: what the shard would save had
 * every id been renamed in its history.  It is a canonical form, not a
 * save to load (its records may name ids the shard never saw).
 */
int xfer_shard_canon(const xfer_shard *s, const xfer_canon_ids *ids,
                     uint8_t *buf, size_t len, size_t *need);

#endif /* XFER_FSM_SAVE_H */
