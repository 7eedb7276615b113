/*
 * tools/check/world.h - the world xfer-check explores: one producer transfer
 * core with T transfers, S consumer shards, one readiness tracker, the
 * messages in flight between them, the engine model around the core (staging
 * regions, the staging pool registry, shutdown), and the observer monitors.
 *
 * Every field that influences what can happen next is part of the encoded
 * state (ck_world_save); nothing here holds a pointer that is encoded.
 * The functions declared here are world.c's; each other file of the
 * checker has its own header.
 */
#ifndef XFER_CHECK_WORLD_H
#define XFER_CHECK_WORLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* fsm_private_dep: the engine model keeps its staging pool registry and
 * shutdown in fsm/life.h, the engine's own (plain bytes, saved with env). */
#include "life.h"
#include "reach.h"
#include "xfer/core.h"
#include "xfer/readiness.h"
#include "xfer/shard.h"

#define CK_MAX_S 6
#define CK_MAX_T 4
#define CK_MAX_MSG 48
#define CK_MAX_MOVES 224
#define CK_SAVE_MAX 16384

/* Fault classes (bits of ck_config.faults). */
#define CK_FAULTS(X)                                                          \
    X(FAIL, "fail", "an op RPC fails without being applied")                 \
    X(LOST, "lost", "an op RPC is applied but its reply is lost")            \
    X(ABORT, "abort", "ABORT actions abort ops not yet applied")             \
    X(LEASE, "lease", "shard timers (leases, tombstones) fire any time")     \
    X(DEADLINE, "deadline", "core and readiness deadlines fire any time")    \
    X(CANCEL, "cancel", "the producer's scheduler cancels a transfer")       \
    X(LATE, "late", "a late submit for an id already submitted")             \
    X(SHUTDOWN, "shutdown", "the engine shuts down")                         \
    X(CONSUMER, "consumer", "the consumer's scheduler cancels an id")        \
    X(DROP, "drop", "consumer-side messages lost or takes failing")          \
    X(CRASH, "crash", "the producer disappears (leases must reclaim)")

enum {
#define CK_F_ENUM_(n, s, d) CK_FB_##n,
    CK_FAULTS(CK_F_ENUM_)
#undef CK_F_ENUM_
    CK_FB_COUNT_
};
#define CK_F(n) (1u << CK_FB_##n)
#define CK_F_ALL ((1u << CK_FB_COUNT_) - 1u)

/* Invariants, for reporting. */
#define CK_INVARIANTS(X)                                                      \
    X(I1, "exactly once")                                                    \
    X(I2, "wait for all")                                                    \
    X(I3, "staging safety")                                                  \
    X(I4, "consumer safety")                                                 \
    X(I5, "complete rollback")                                               \
    X(I6, "no resurrection")                                                 \
    X(I7, "pre-emptive cancel")                                              \
    X(I8, "readiness")                                                       \
    X(I9, "shutdown")                                                        \
    X(I10, "determinism")                                                    \
    X(I11, "bounded memory")                                                 \
    X(I12, "errors propagate")                                               \
    X(I13, "leases reclaim")                                                 \
    X(I14, "attempts are isolated")                                          \
    X(ILLEGAL, "machine reached an ILLEGAL cell or asserted")                \
    X(LIVE, "liveness: the system did not settle")                          \
    X(E2E, "a producer success is available or flagged on the consumer")     \
    X(TIME, "timers are armed for their documented time and fire on time")  \
    X(COVER, "a shard commits a region exactly when writes that ran alone "  \
             "and ended well covered all of it")                             \
    X(RLAND, "--rdma: a one-sided write lands only in a RESERVED or *_INVAL "  \
             "region of its own reservation")                               \
    X(RREADY, "--rdma: READY bytes never change (no live rkey, no landing)") \
    X(RINVAL, "--rdma: every invalidation asked for is pending and "         \
              "completes; no rkey outlives its reservation")                 \
    X(INTEG, "--corrupt: no region whose bytes a write corrupted is ever "   \
             "available")                                                    \
    X(CREADY, "--copies: no READY while a copy into the region is in "       \
              "flight")                                                      \
    X(CFREE, "--copies: no region freed or reused under a copy into it")  \
    X(PARTS, "--parts: a part's staging is released only after its writes "  \
             "ended; a commit only once sealed and every part written on "   \
             "every shard; no part accepted after a failure or a stop")      \
    X(GONE, "--gone: no op goes to a shard whose directory entry is gone, "  \
            "and every op outstanding there fails SHARD_GONE at once")      \
    X(RFRESH, "--refresh: a shard grants exactly the refreshes of its live " \
              "reservations under their hold cap, for the documented time, " \
              "never shortening a lease or changing a state")

enum {
#define CK_I_ENUM_(n, d) CK_##n,
    CK_INVARIANTS(CK_I_ENUM_)
#undef CK_I_ENUM_
    CK_INV_COUNT_
};

typedef struct ck_config {
    unsigned S, T;
    /* World options (docs/design.md section 6), each off by default so
     * the default spaces keep their state counts. */
    unsigned writes;       /* each WRITE lands as this many writes at
                            * different offsets, in any order; 0 or 1:
                            * one write at offset 0 */
    unsigned max_dups;     /* duplicated messages (a retransmit) and
                            * replies of another attempt per path; 0:
                            * none */
    unsigned caps;         /* every record and tombstone cap of the
                            * machines; 0: T (a cap never binds) */
    bool e2e;              /* the E2E monitor (it keeps a bit of state,
                            * so it is an option: off keeps the counts) */
    bool rdma;             /* one-sided shards: a WRITE is posted at the
                            * producer and lands without the shard (while
                            * its rkey is live), the driver invalidates
                            * rkeys the shard asks for (docs/design.md
                            * section 6) */
    bool eager;            /* the eager path: the core sends one EAGER op
                            * per shard (reserve + data + commit) for
                            * every submit; off with --rdma (one-sided
                            * shards never allow it) */
    bool copies;           /* device shard pools (issue 25): a WRITE's
                            * bytes land in a bounce buffer, then a copy
                            * into the region runs as a step of its own
                            * that completes late, in any order, or fails
                            * (--faults fail); off with --rdma, --eager and
                            * --writes above 1 */
    bool defaults;         /* the machines get every timing and the cancel
                            * bound as 0, "the library default"; the
                            * monitors keep the documented values below */
    uint32_t faults;       /* CK_F_* bits */
    unsigned max_faults;   /* fail/lost/drop injections per path */
    unsigned max_cancels;  /* producer user cancels per path */
    unsigned max_lates;    /* late submits per path */
    unsigned max_ccancels; /* consumer cancels per path */
    unsigned max_expiries; /* timer fires that jump time, before liveness */
    unsigned budget;       /* disturbances of any kind per path */
    unsigned cancel_max_attempts;
    unsigned depth;        /* BFS depth bound / walk length */
    uint64_t max_delay;    /* network delay bound (ns) */
    bool liveness_all;     /* liveness phase from every state, not leaves */
    bool symmetry;
    bool transfer_symmetry; /* symmetry reduction over transfers (T >= 2) */
    bool paranoid;         /* BFS: check every delta save (slow) */
    uint64_t max_mem;      /* BFS: stop (not exhaustive) past this many
                            * bytes of queued states and visited set */
    unsigned max_corrupt;  /* --corrupt: per path, this many writes land
                            * corrupt (issue 27: integrity on, the
                            * shard's commit checks; corrupt.c); 0: off */
    unsigned parts;        /* --parts: every transfer is a stream of this
                            * many parts (issue 26; stream.c); 0: off */
    unsigned gone;         /* --gone: per path, this many directory "shard
                            * gone" events (issue 30; gone.c); 0: off */
    unsigned stale_ops;    /* --stale-ops: per path, this many ops of
                            * another attempt delivered to a record in an
                            * *_INVAL state (--rdma; staleop.c); 0: off */
    unsigned refresh;      /* --refresh: per path, this many lease
                            * refreshes of open streams reach their shards
                            * (--parts; refresh.c); 0: off */
} ck_config;

/* Timings of the modelled deployment (ns): the library's documented
 * defaults, which --defaults leaves to the machines (the monitors always
 * use these, so a default that differs is a violation). */
#define CK_LEASE_TTL (10ull * 1000000000ull)
#define CK_SHARD_TOMB_TTL (20ull * 1000000000ull)
#define CK_CORE_TOMB_TTL (60ull * 1000000000ull)
#define CK_DEADLINE (30ull * 1000000000ull)
#define CK_CANCEL_TIMEOUT (5ull * 1000000000ull)
#define CK_BACKOFF (10ull * 1000000ull)
#define CK_READY_DEADLINE (30ull * 1000000000ull)
#define CK_READY_TOMB_TTL (60ull * 1000000000ull)
#define CK_DEFAULT_CANCEL_ATTEMPTS 5u
#define CK_SLICE 256u
#define CK_MAX_WRITES 4u
#define CK_MAX_PARTS 3u /* --parts */
#define CK_POOL_BYTES (4096ull)
#define CK_POOLS 1u /* slots of the engine model's staging pool registry */

/* Message kinds in flight. */
enum {
    MK_OP = 0,   /* producer -> shard: reserve/write/commit/cancel */
    MK_RES = 1,  /* shard -> producer: the result of an op */
    MK_EV = 2,   /* shard -> readiness: ready / cancelled / expired */
    MK_RACT = 3, /* readiness -> shard: take / release / cancel */
    MK_TRES = 4, /* shard -> readiness: take result */
    /* --rdma only (so the default spaces never hold them): */
    MK_INV = 5,  /* the driver invalidates the rkey of (shard, resv_id) the
                  * shard asked for; MF_INV_DONE once it completed, and
                  * then its delivery is xfer_shard_invalidated() */
    MK_RKEY = 6  /* not a message: a live rkey of (shard, tr, resv_id),
                  * kept in the multiset so that saving, sorting and the
                  * shard symmetry cover it; it has no moves, sorts last
                  * (kind is the first byte) and sets no delivery horizon */
};
#define MF_ABORT 1u /* the core asked to abort this op */
#define MF_BEGUN 2u /* a write: begun on the shard (bytes may land) */
#define MF_PART 4u  /* one of the writes a WRITE lands as (--writes); its
                     * status: the WRITE's first error so far */
#define MF_LANDED 8u   /* --rdma: a posted write that landed; its delivery
                        * is its completion at the producer */
#define MF_ORPHAN 16u  /* --rdma: a posted write whose producer already
                        * heard (lost connection, abort): it may still
                        * land, and reports to nobody */
#define MF_COPY 64u /* --copies: a begun write whose bytes landed in the
                     * bounce buffer and whose copy into the region runs;
                     * its delivery is the copy's end */
#define MF_D2H 128u /* --copies: a WRITE still at the producer, in its
                     * device-to-host copy from staging into a bounce
                     * buffer (engine_copy.c); its delivery is the copy's
                     * end, and only then does the op go to its shard */
#define MF_INV_DONE 32u /* MK_INV: the invalidation completed (the rkey is
                         * dead); the shard has not been told yet */

typedef struct ck_msg {
    uint8_t kind, op, flags, tr; /* tr: transfer index (id - 1) */
    uint16_t shard, part; /* part: which write of a WRITE (--writes) */
    int32_t status;
    uint32_t attempt;
    uint32_t len;
    uint32_t rsv; /* 0 (ck_net_push): the hole before resv_id, named so
                   * that no padding reaches ck_net_sort's memcmp or a key */
    uint64_t resv_id, addr;
    uint64_t sent_at; /* a message is delivered within max_delay of this */
} ck_msg;
_Static_assert(sizeof(ck_msg) == 48, "ck_msg has no padding");

/* Monitor bookkeeping: producer view of one (transfer, shard). */
typedef struct mon_ps {
    uint8_t out[XFER_OP_COUNT_]; /* ops of each xfer_op_kind without a
                                  * result */
    uint8_t resv_sent;   /* a reserve was sent in this attempt */
    uint8_t cancels;     /* cancels sent in this attempt */
    uint8_t cancel_done; /* a cancel result "nothing of ours left" seen */
    uint8_t cancel_gaveup_ok; /* last cancel failed with STATE (taken) */
    uint8_t commit_ok;   /* commit (or eager op) acked */
    uint8_t commit_sent; /* a commit or an eager op was sent (consumer may
                          * hold data) */
    uint8_t op_failed;   /* reserve/write/commit failure seen */
    uint8_t abort_req;   /* ABORT seen for an op of this shard */
    uint8_t eager;       /* an eager op was sent in this attempt */
    uint8_t fly;         /* --parts: the part of the WRITE unanswered */
    uint8_t wdone;       /* --parts: bit p-1: part p's WRITE answered ok */
} mon_ps;

/* Monitor bookkeeping: the consumer view of one (transfer, shard). */
typedef struct mon_cs {
    uint64_t resv_id, addr;
    uint64_t reserved_at;
    uint32_t attempt, len;
    uint8_t live;   /* a reservation we saw created and not yet freed */
    uint8_t writes; /* writes begun and not ended */
    uint8_t taken;  /* taken by the readiness tracker */
    uint8_t ready;  /* committed on the shard */
    uint32_t cancelled_attempt; /* last attempt cancelled here (0: none) */
    uint8_t in_tomb;            /* TIME: the shard holds a tombstone of
                                 * the id, since tomb_at */
    uint8_t corrupt;            /* --corrupt: a write landed wrong in the
                                 * live region (cleared by a new one) */
    uint8_t wok;   /* COVER: parts (bit p: part p of --writes, bit 0 a
                    * whole write) written alone and ended well, none
                    * clobbered by a failed write since */
    uint8_t wside; /* COVER: writes ran side by side since the region
                    * last had none landing */
    uint64_t cancelled_at;
    uint64_t take_resv;         /* resv id a take succeeded on */
    uint64_t tomb_at;           /* the move that made the tombstone (0
                                 * while none), so a function of the
                                 * shard's state: the counts stay */
    uint64_t refreshed_to;      /* --refresh: the lease end a refresh
                                 * granted (0: none; refresh.c) */
} mon_cs;

typedef struct mon_tr {
    uint32_t attempt;   /* attempt of the open transfer */
    uint32_t last_attempt;
    uint64_t tomb_at;   /* when the producer tombstone began */
    uint64_t accepted_at;
    uint64_t ccancel_at;
    uint8_t open;       /* accepted, not completed */
    uint8_t completions;
    uint8_t tomb;       /* 1: completed, 2: pre-emptive cancel */
    uint8_t stopped;    /* stop (cancel/deadline/shutdown) before failure */
    uint8_t fail_shard, fail_phase, failed;
    uint8_t staging;    /* staging region held by the engine model */
    uint8_t ready_mask_lo, take_mask_lo; /* readiness observer (bits) */
    uint8_t available, unavailable;
    uint8_t ccancelled; /* the consumer's scheduler cancelled the id */
    uint8_t success;    /* completed with success */
    uint32_t ready_attempt;
    mon_ps ps[CK_MAX_S];
    mon_cs cs[CK_MAX_S];
} mon_tr;

typedef struct ck_mon {
    mon_tr tr[CK_MAX_T];
    uint8_t shutdown_req, shutdown_done, pool_unreg, shutdown_complete;
    uint8_t pad[4];
} ck_mon;

/* Environment and engine-model state. */
typedef struct ck_env {
    uint64_t now;
    uint64_t rng[CK_MAX_S];  /* next reservation id of each shard */
    /* engine model: the staging pool registry (fsm/life.h), here where it
     * is aligned, so it adds no padding to the saved bytes */
    xfer_life_pool pools[CK_POOLS];
    uint8_t submitted[CK_MAX_T];
    uint8_t cancels, lates, ccancels, faults, expiries;
    uint8_t shutdown, crashed, nmsg, disturb;
    xfer_life life;            /* engine model: the shutdown (fsm/life.h) */
    uint8_t staging[CK_MAX_T]; /* engine model: regions held */
    uint8_t e2e_exempt;        /* bit t: a consumer-side event or action
                                * of transfer t was dropped, or a shard's
                                * end of an attempt of it reached the
                                * tracker before any ready of that attempt
                                * (the tracker then tombstones it without
                                * a report: F3 and F4) */
    uint8_t dups;              /* duplicates and stale replies so far */
    uint8_t corrupts;          /* --corrupt: writes corrupted so far */
    /* --parts (stream.c): per transfer, the parts added so far, the
     * parts whose staging the model holds and those the core took (bit
     * p-1: part p), and the seal (1: refused, 2: taken) */
    uint8_t parts[CK_MAX_T], pheld[CK_MAX_T], ptaken[CK_MAX_T];
    uint8_t sealed[CK_MAX_T];
    /* --gone (gone.c): per shard, 1 while its directory entry is gone;
     * the events so far */
    uint8_t gone[CK_MAX_S], gones;
    uint8_t sops; /* --stale-ops: stale ops delivered so far */
    uint8_t refreshes; /* --refresh: refreshes delivered so far */
} ck_env;

/* A move of the environment. */
enum {
    MV_DELIVER = 0, MV_FAIL, MV_LOST, MV_ABORT, MV_SUBMIT, MV_LATE,
    MV_CANCEL, MV_SHUTDOWN, MV_CCANCEL, MV_FIRE_CORE, MV_FIRE_SHARD,
    MV_FIRE_READY, MV_CRASH,
    MV_DUP,   /* message arg is delivered and a copy stays in flight */
    MV_STALE, /* a reply of another attempt reaches the core: arg is
               * transfer * CK_MAX_S + shard */
    MV_CORRUPT, /* --corrupt: the landing write arg lands corrupt */
    MV_ORPHAN, /* --dups: op message arg's connection dies: the producer
                * hears CONN_LOST, the op stays in flight (MF_ORPHAN) */
    MV_PART,  /* --parts: the scheduler adds transfer arg's next part */
    MV_SEAL,  /* --parts: the scheduler seals transfer arg */
    MV_GONE,  /* --gone: shard arg's directory entry vanishes */
    MV_BACK,  /* --gone: gone shard arg registers again (a higher epoch) */
    MV_SOP,   /* --stale-ops: an op of another attempt reaches a record
               * waiting for its invalidation (staleop.h's arg) */
    MV_REFRESH, /* --refresh: the engine's lease refresh arg reaches its
                 * shard (refresh.h) */
    MV_COUNT_
};
typedef struct ck_move {
    uint8_t kind;
    uint8_t arg; /* message index, transfer index or shard */
} ck_move;

/* A violation found by a monitor. */
typedef struct ck_violation {
    int inv;  /* CK_I*, or -1 when none */
    char what[256];
} ck_violation;

/* Where trace records and step notes go while printing a counterexample. */
typedef struct ck_tracer {
    void (*rec)(void *ud, const xfer_trace_rec *r, uint8_t src);
    void (*action)(void *ud, const char *text);
    void *ud;
} ck_tracer;

typedef struct ck_src {
    struct ck_world *w;
    uint8_t src;
} ck_src;

/* The machines of a world, as bits of a mask and slots of a layout: the
 * core, shard k, the readiness tracker. */
#define CK_SLOT_CORE 0u
#define CK_SLOT_SH(k) (1u + (unsigned)(k))
#define CK_SLOT_RD (CK_MAX_S + 1u)
#define CK_SLOTS (CK_MAX_S + 2u)
#define CK_M_CORE (1u << CK_SLOT_CORE)
#define CK_M_SH(k) (1u << CK_SLOT_SH(k))
#define CK_M_RD (1u << CK_SLOT_RD)
#define CK_M_ALL ((1u << CK_SLOTS) - 1u)

/* Where each machine's blob sits inside a saved world. */
typedef struct ck_layout {
    size_t off[CK_SLOTS], len[CK_SLOTS];
} ck_layout;

typedef struct ck_world {
    const ck_config *cfg;
    xfer_core_config core_cfg;
    xfer_core *core;
    xfer_shard *sh[CK_MAX_S];
    xfer_readiness *rd;
    unsigned caps; /* the caps the machines were given */
    ck_env env;
    ck_msg msg[CK_MAX_MSG];
    ck_mon mon;
    ck_violation v;
    uint64_t out_hash; /* I10: hash of every output seen */
    const ck_tracer *tracer;
    bool in_liveness;
    uint8_t snap_out[CK_MAX_T][CK_MAX_S][XFER_OP_COUNT_]; /* ops out at
                                                           * batch start */
    ck_src srcs[CK_MAX_S + 2];
    /* where the last save or load found each machine's blob (not
     * encoded) */
    ck_layout lay;
    /* reach.h: how often each feature's events happened in the moves
     * applied to this world (summed over every state it expanded); not
     * encoded, so the state counts stay.  reach_off: count nothing (a
     * --liveness all check of a state, which several threads may run
     * more than once). */
    uint64_t reach[CK_R_COUNT_];
    bool reach_off;
} ck_world;

/* Build the world in its initial state (cfg and tr borrowed for its
 * life); 0 or an xfer_err. */
int ck_world_init(ck_world *w, const ck_config *cfg, const ck_tracer *tr);
void ck_world_free(ck_world *w);
/* The cancel attempts per shard the core was configured with. */
unsigned ck_world_cancel_attempts(const ck_world *w);
/* Encode the whole world into buf (len bytes): the bytes written, 0 when
 * it does not fit.  w->lay says where each machine's blob went. */
size_t ck_world_save(ck_world *w, uint8_t *buf, size_t len);
/* Load a whole encoding; 0 or an xfer_err. */
int ck_world_load(ck_world *w, const uint8_t *buf, size_t len);
/* Save, taking the machines outside `which` (CK_M_* bits) from `prev`
 * (laid out as pl), which must encode them as they are now.  prev NULL:
 * save every machine. */
size_t ck_world_save_some(ck_world *w, uint8_t *buf, size_t len,
                          const uint8_t *prev, const ck_layout *pl,
                          unsigned which);
/* Load the plain data of an encoding and the machines in `which`; the
 * others must already be in the state the encoding holds. */
int ck_world_load_some(ck_world *w, const uint8_t *buf, size_t len,
                       unsigned which);
/* Load an encoding into a world whose machines hold `prev` (laid out as
 * pl): only the machines whose blobs differ are loaded. */
int ck_world_load_diff(ck_world *w, const uint8_t *buf, size_t len,
                       const uint8_t *prev, const ck_layout *pl);

#endif /* XFER_CHECK_WORLD_H */
