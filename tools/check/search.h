/*
 * tools/check/search.h - the ways of exploring the world (search.c):
 * exhaustive breadth-first search over canonical states, seeded random and
 * swarm walks, and shrinking a failing walk.
 */
#ifndef XFER_CHECK_SEARCH_H
#define XFER_CHECK_SEARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "path.h"
#include "world.h"

/* What a search found. */
typedef struct ck_outcome {
    int inv;             /* -1: every invariant held */
    char what[256];
    ck_path path;        /* the counterexample */
    uint64_t states, transitions, leaves, runs, steps;
    unsigned depth;
    bool bounded;        /* the depth bound cut some paths */
    bool out_of_memory;  /* BFS stopped at the memory bound */
    uint64_t mem_bytes;  /* BFS: peak memory of the search structures */
    double secs;
    double cpu_secs;     /* BFS: CPU time of the process, every thread */
    uint64_t seed;       /* random: the seed of the failing run */
    uint32_t faults;     /* the fault classes of the failing run */
    /* reach.h: each feature's events over every explored transition (and
     * the E2E verdicts at the end of every path); when no violation
     * stopped the search, the same for every number of threads */
    uint64_t reach[CK_R_COUNT_];
} ck_outcome;

/* Exhaustive BFS on `threads` threads (0 means 1: the plain BFS, a set
 * of keys and one buffer per level, nodes numbered as found); the violated
 * invariant (shortest counterexample in out->path) or -1.  Everything in
 * out but secs and mem_bytes is the same for every number of threads,
 * unless the memory bound stopped the search.  cfg is borrowed until
 * return. */
int ck_search_bfs(const ck_config *cfg, unsigned threads, ck_outcome *out);
/* The same search, always through the shared visited set of the parallel
 * BFS (entries claimed, the displaced ones marked dead between levels),
 * even on one thread: ck_search_bfs runs it for threads above 1, and the
 * benchmark on one thread, to show what the sharing costs apart from the
 * second core. */
int ck_search_bfs_shared(const ck_config *cfg, unsigned threads,
                         ck_outcome *out);
/* `runs` seeded random walks (swarm: each with a random subset of the
 * fault classes); the violated invariant or -1. */
int ck_search_random(const ck_config *cfg, uint64_t seed, uint64_t runs,
                     bool swarm, ck_outcome *out);
/* Shrink the failing path of o to a shorter one with the same
 * violation. */
void ck_search_shrink(const ck_config *cfg, ck_outcome *o);

#endif /* XFER_CHECK_SEARCH_H */
