/*
 * tools/check/seen.h - the visited set of the breadth-first search
 * (seen.c): 128-bit state keys, split into shards that each have a lock,
 * so that the threads of one level insert at the same time.
 *
 * Each key carries a tag: the level it was found in (the top 16 bits) and
 * the position in that level of the move that found it (the rest).  While
 * a level is expanded, a key found again in the same level keeps the
 * lowest tag, whichever thread got there first; so once the level is done,
 * the owner of a key is exactly the move a one-thread search would have
 * found it with.
 */
#ifndef XFER_CHECK_SEEN_H
#define XFER_CHECK_SEEN_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CK_SEEN_SHARDS 256u
#define CK_SEEN_TAG(level, pos) (((uint64_t)(level) << 48) | (uint64_t)(pos))

typedef struct ck_seen_shard {
    pthread_mutex_t mu;
    uint64_t *k; /* 3 words per bucket: the key, its tag; key (0,0) empty */
    size_t mask, n;
} ck_seen_shard;

typedef struct ck_seen {
    ck_seen_shard sh[CK_SEEN_SHARDS];
    _Atomic uint64_t bytes; /* of all the tables */
    bool unlocked;          /* one thread only: claims take no lock */
} ck_seen;

/* 0, or -1 when out of memory (nothing to free then).  `shared`: claims
 * may come from several threads at once. */
int ck_seen_init(ck_seen *s, bool shared);
void ck_seen_free(ck_seen *s);
/* Record key (copied) as found by tag; true when tag now owns it (the key
 * is new, or was found before only in the same level by a higher tag).
 * Any thread; aborts when out of memory. */
bool ck_seen_claim(ck_seen *s, const uint64_t key[2], uint64_t tag);
/* Whether tag owns key.  Only while no claim runs (between levels). */
bool ck_seen_owns(const ck_seen *s, const uint64_t key[2], uint64_t tag);
/* Keys held (exact only while no claim runs); bytes of the tables (any
 * time). */
uint64_t ck_seen_count(const ck_seen *s);
uint64_t ck_seen_bytes(const ck_seen *s);

#endif /* XFER_CHECK_SEEN_H */
