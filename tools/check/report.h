/*
 * tools/check/report.h - counterexamples: printing, trace files, choice
 * lists, and the searches that produce them.
 */
#ifndef XFER_CHECK_REPORT_H
#define XFER_CHECK_REPORT_H

#include <stdio.h>

#include "world.h"

/* A path: the move index chosen in each state, then (liveness) whether the
 * liveness phase ran at its end. */
typedef struct ck_path {
    uint16_t *c;
    size_t n, cap;
    bool liveness;
} ck_path;

void ck_path_push(ck_path *p, uint16_t c);
void ck_path_free(ck_path *p);

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
    uint64_t seed;       /* random: the seed of the failing run */
    uint32_t faults;     /* the fault classes of the failing run */
} ck_outcome;

/* search.c */
int ck_bfs(const ck_config *cfg, ck_outcome *out);
int ck_random(const ck_config *cfg, uint64_t seed, uint64_t runs, bool swarm,
              ck_outcome *out);
/* Run a path; returns the violated invariant or -1.  With a tracer, every
 * step is described to it. */
int ck_run_path(const ck_config *cfg, const ck_path *p, const ck_tracer *tr,
                ck_violation *v, uint64_t *out_hash, bool modulo);
void ck_shrink(const ck_config *cfg, ck_outcome *o);

/* report.c */
void ck_report_rec(FILE *f, const xfer_trace_rec *r, uint8_t src);
/* Print the counterexample step by step and write <prefix>.trace and
 * <prefix>.choices.  `args` is the command line that reproduces cfg. */
void ck_report_cex(const ck_config *cfg, const ck_outcome *o,
                   const char *prefix, const char *args);
/* Read a choices file: its args line (into args, at most len) and path. */
int ck_read_choices(const char *file, char *args, size_t len, ck_path *p,
                    char *why, size_t whylen);

#endif /* XFER_CHECK_REPORT_H */
