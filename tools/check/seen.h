/*
 * tools/check/seen.h - the visited set of the breadth-first search
 * (seen.c): 128-bit state keys, 16 bytes a bucket, split into 256 shards
 * that each have a table.
 *
 * On one thread a search only puts keys (ck_seen_put), as a plain set.
 * On several threads, every key found is claimed by the entry
 * (ck_seen_ref) of the move that found it: the lowest (parent, move)
 * that claims a key owns it, whichever thread got there first.  The key's
 * bucket holds key[0] and a claim word: the owner's (parent, move) and
 * key[1]'s low 16 bits, behind a top byte that is not the shard's (a real
 * key's always is).  So a claim compares (parent, move) without reading
 * another entry (most claims of a level find a key claimed earlier in
 * it: 58 % at S = 1 budget 6, 70 % at S = 2 budget 3), and a key of an
 * earlier level needs no rewriting: its parent's node id, and so its
 * (parent, move), is below any of this level's.  A claim that takes a key
 * from a higher entry of this level names it, for the caller to mark it
 * dead.  Then the owner of every key is the move a one-thread search
 * finds it with.
 *
 * Claims take no lock: a new key is placed by a compare-and-swap on its
 * bucket's first word, an owner changed by one on the second, and a
 * claim that loses (most of them) writes nothing.  A table grows while
 * every other claiming thread waits at the start of a claim (seen.c), so
 * a claim's only write to memory another thread uses is its bucket's.
 *
 * A claimed key is told apart by 88 of its 128 bits (key[0], the shard
 * and key[1]'s low 16 bits): two states that share those but not the
 * rest would count as one, with a chance near n^2 / 2^89 for n states
 * (1e-11 for 60 million), against n^2 / 2^129 for the keys themselves
 * (the one-thread search compares all 128).  A zero word of a key is
 * stored as 1 (zero marks an empty bucket): keys (0, x) and (1, x) are
 * one, as are (x, 0) and (x, 1), a chance of 2^-64 a pair of states.
 */
#ifndef XFER_CHECK_SEEN_H
#define XFER_CHECK_SEEN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CK_SEEN_SHARDS 256u

/* A state found in the level being built (24 bytes): its key, the move
 * that found it (below CK_SEEN_MOVES), and whether a lower move took the
 * key (the search marks it). */
#define CK_SEEN_MOVES 256u
#define CK_SEEN_NONE UINT64_MAX
typedef struct ck_seen_ref {
    uint64_t key[2];
    uint32_t parent; /* node id of the state the move was made from */
    uint16_t move;
    uint8_t dead;
} ck_seen_ref;

/* The order of the moves of one level: by parent, then by move (a move
 * below CK_SEEN_MOVES); 40 bits, as a claim word holds it and as
 * ck_seen_claim names a displaced entry. */
#define CK_SEEN_TAG(parent, move)                                           \
    (((uint64_t)(parent) << 8) | (uint64_t)(move))

/* A shard's table: read by every probe and prefetch, written only when it
 * grows (while no other thread claims), so the cores keep shared copies
 * of these lines (4 KB in all). */
typedef struct ck_seen_table {
    uint64_t *k; /* 2 words per bucket: a key (or a reference); (0,0) empty */
    size_t mask;
} ck_seen_table;

/* A shard's count, in a cache line of its own: keys in the table but for
 * those a claiming thread has not added yet (fewer than CK_SEEN_FLUSH
 * each), so a thread writes it once every CK_SEEN_FLUSH new keys of the
 * shard. */
#define CK_SEEN_FLUSH 16u
typedef struct ck_seen_shard {
    _Alignas(64) _Atomic uint64_t n;
} ck_seen_shard;

/* One claiming thread's part, 64-byte aligned: its new keys of each
 * shard not yet in the shard's count. */
typedef struct ck_seen_local {
    _Alignas(64) uint16_t added[CK_SEEN_SHARDS];
} ck_seen_local;

/* 64-byte aligned (aligned_alloc, or a member of such a struct). */
typedef struct ck_seen {
    ck_seen_table tab[CK_SEEN_SHARDS];
    ck_seen_shard sh[CK_SEEN_SHARDS];
    /* The claiming threads of this phase (ck_seen_begin).  stop: a
     * thread is growing a table and the others wait (1), read by every
     * claim and written only around a growth; parked: the threads
     * waiting, or done with the phase. */
    _Alignas(64) _Atomic unsigned stop;
    _Alignas(64) _Atomic unsigned parked;
    ck_seen_local *loc;
    unsigned nloc;
    _Atomic uint64_t bytes; /* of all the tables */
} ck_seen;

/* 0, or -1 when out of memory (nothing to free then). */
int ck_seen_init(ck_seen *s);
void ck_seen_free(ck_seen *s);
/* One thread only, no claim pending: insert key (copied); true when it
 * is new.  Aborts when out of memory. */
bool ck_seen_put(ck_seen *s, const uint64_t key[2]);
/* A phase of claims by n threads, whose parts are loc[0..n-1] (zeroed
 * by the caller once, 64-byte aligned, kept until ck_seen_end), expected
 * to add about `expect` keys: one thread, before the others start.  The
 * tables grow for those keys now; beyond them, a table grows while the
 * other threads wait. */
void ck_seen_begin(ck_seen *s, ck_seen_local *loc, unsigned n,
                   uint64_t expect);
/* A thread of the phase (the one whose part is me): claim e's key for e.
 * True when e now owns it: the key is new, or was held by a higher
 * entry, whose CK_SEEN_TAG goes to *displaced (else CK_SEEN_NONE).
 * Nothing of e is kept.  Aborts when out of memory. */
bool ck_seen_claim(ck_seen *s, ck_seen_local *me, const ck_seen_ref *e,
                   uint64_t *displaced);
/* A thread of the phase claims no more in it (every thread must, for the
 * others to grow a table). */
void ck_seen_leave(ck_seen *s);
/* One thread, once every thread has left: the counts are exact again. */
void ck_seen_end(ck_seen *s);
/* Any thread, any time: start fetching the bucket where key's probe
 * begins, so that the work done before its put or claim hides the miss. */
void ck_seen_prefetch(const ck_seen *s, const uint64_t key[2]);
/* Keys held (exact outside a phase of claims); bytes of the tables (any
 * time). */
uint64_t ck_seen_count(const ck_seen *s);
uint64_t ck_seen_bytes(const ck_seen *s);

#endif /* XFER_CHECK_SEEN_H */
