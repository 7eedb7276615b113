/*
 * tests/multiproc/dirpump.h - a producer that finds its shards through
 * etcd, for the directory tests of every transport (test_dir_tcp,
 * tests/rdma/test_dir_rdma): an engine on its own base, a directory
 * client, a staging pool of DIR_PUMP_SLOTS slots, and a refill every
 * 5 ms of at most 4 transfers (a gone shard fails transfers at once: a
 * resubmit from the completion would spin).  Every completion is counted
 * per id, so a test can check each transfer completed exactly once.  The
 * transport is the test's: dir_pump_attach adds it.
 */
#ifndef XFER_TEST_DIRPUMP_H
#define XFER_TEST_DIRPUMP_H

#include <stdbool.h>
#include <stdint.h>

#include "xfer/dir.h"
#include "xfer/xfer.h"

#define DIR_PUMP_SLOTS 16

typedef struct dir_pump {
    struct event_base *base;
    xfer_engine *e;
    xfer_dir *dir;
    uint16_t nshards;
    uint32_t slice;
    uint32_t group, pool;
    uint8_t *staging;
    uint32_t free_slots[DIR_PUMP_SLOTS], nfree;
    uint64_t next_id, submitted, done, ok, failed, gone, dup;
    uint64_t since_ok;       /* successes since the counter was zeroed */
    uint64_t mark;           /* nonzero: ids from here on were submitted
                                while a shard was gone */
    uint64_t late_other;     /* of those, failed with another status */
    uint8_t *seen;           /* completions per id */
    uint64_t seen_cap;
    bool stop;
    struct event *tick;
    volatile bool shut;
} dir_pump;

/* The base, the directory on etcd at `eps` (borrowed), the engine
 * (default deadline 5 s), staging for nshards x slice bytes per slot. */
void dir_pump_new(dir_pump *u, const char *eps, uint16_t nshards,
                  uint32_t slice);
/* Add transport t as the pump's group, then register the staging pool. */
void dir_pump_attach(dir_pump *u, xfer_transport t);
void dir_pump_start(dir_pump *u);
/* Stop submitting and run until every transfer completed (20 s). */
void dir_pump_stop(dir_pump *u);
void dir_pump_run_ms(dir_pump *u, int ms);
/* Shut the engine down and delete it; the caller then deletes its
 * transport and calls dir_pump_free (the directory outlives the
 * transport that follows it). */
void dir_pump_shutdown(dir_pump *u);
void dir_pump_free(dir_pump *u);

#endif
