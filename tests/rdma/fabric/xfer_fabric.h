/*
 * tests/rdma/fabric/xfer_fabric.h - the test-side controls of the software
 * verbs fabric: device knobs, injected faults, counters, and a link cut.
 *
 * Code under test never includes this header: it calls the ordinary
 * libibverbs and librdmacm API (<infiniband/verbs.h>, <rdma/rdma_cma.h>)
 * and is linked against the fabric (xfer_fabric_dep) instead of
 * -libverbs -lrdmacm.  Tests use this header to shape the simulated device
 * and to read what happened on it.  A child process that cannot call these
 * functions takes the same options from the environment:
 *
 *   XFER_FABRIC_FAULTS=max_msg_sz=4096,mw2=0,write_access_err=3,seed=7
 *   XFER_FABRIC_COUNTERS=/path/file   (counters written there at exit)
 *
 * parsed at the process's first fabric call.  Every function here may be
 * called from any thread; all of them are cheap.
 */
#ifndef XFER_FABRIC_H
#define XFER_FABRIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rdma_cm_id;

/*
 * Device knobs and faults.  A fault field names the Nth event of its kind
 * (1-based) counted in this process from the moment the options were set;
 * 0 turns it off; each fires once.
 */
typedef struct xfer_fabric_opts {
    uint32_t max_msg_sz;     /* port max_msg_sz; a longer WR completes
                                with IBV_WC_LOC_LEN_ERR (default 1 GiB) */
    bool mw_type2;           /* type 2 memory windows (default on); off:
                                ibv_alloc_mw(IBV_MW_TYPE_2) fails with
                                EOPNOTSUPP and the device caps say so */
    uint32_t max_mr;         /* MRs + MWs alive at once (default 65536);
                                past it reg_mr / alloc_mw fail, ENOMEM */
    uint32_t cq_delay_us;    /* every completion reaches its CQ this late */
    uint32_t cq_jitter_us;   /* plus a seeded random 0..jitter */
    uint32_t write_delay_us; /* a WRITE/SEND waits this long in the send
                                queue before its source is read and sent */
    uint64_t seed;           /* for the jitter (default 1) */
    /* faults */
    uint64_t write_access_err; /* Nth RDMA WRITE: the responder refuses it
                                  as a remote access error (lands nothing;
                                  both QPs go to error, as on RC) */
    uint64_t write_qp_err;     /* Nth RDMA WRITE: half of it lands, then
                                  the sender's QP goes to error and every
                                  posted WR is flushed (IBV_EVENT_QP_FATAL) */
    uint64_t write_cut;        /* Nth RDMA WRITE: sent, then the link is
                                  cut: it may land, its ack is lost */
    uint64_t write_corrupt;    /* Nth RDMA WRITE: lands with one bit of
                                  its middle byte flipped, and completes
                                  with success (silent corruption) */
    uint64_t write_phantom;    /* Nth RDMA WRITE: lands nothing, and
                                  completes with success all the same */
    uint64_t reg_fail;         /* Nth ibv_reg_mr*: NULL, errno ENOMEM */
    uint64_t bind_fail;        /* Nth MW bind: IBV_WC_MW_BIND_ERR */
} xfer_fabric_opts;

/* The defaults above (no faults). */
void xfer_fabric_default_opts(xfer_fabric_opts *o);

/* Parse "key=value,key=value" (the XFER_FABRIC_FAULTS syntax; keys are the
 * field names, mw2 for mw_type2) over *o.  spec (may be NULL) and err are
 * borrowed; *o is changed only on success.  Returns 0, or -1 with one
 * line in err (err may be NULL). */
int xfer_fabric_parse_opts(const char *spec, xfer_fabric_opts *o, char *err,
                           size_t errlen);

/* The options in force (copied out), and a new set (copied in; restarts
 * every Nth count).
 * max_msg_sz and mw_type2 are read by each later query and alloc_mw. */
void xfer_fabric_get_opts(xfer_fabric_opts *o);
void xfer_fabric_set_opts(const xfer_fabric_opts *o);

/*
 * Counters of this process.  *_live are objects alive now; the others
 * count events since the process started (or xfer_fabric_reset).  Writes
 * are counted where they land (the responder); rej_* are writes the
 * responder refused, by reason.
 */
#define XFER_FABRIC_COUNTERS(X)                                              \
    X(contexts_live)   /* device contexts (rdmacm's own included) */         \
    X(pds_live)                                                              \
    X(mrs_live) X(mrs_created) X(mrs_destroyed) X(reg_failed)                \
    X(mws_live) X(mws_created) X(mws_destroyed)                              \
    X(binds) X(bind_errors)        /* MW binds done / refused */             \
    X(invalidations) X(inval_errors) /* IBV_WR_LOCAL_INV done / refused */   \
    X(channels_live) X(cqs_live) X(qps_live)                                 \
    X(cm_channels_live) X(cm_ids_live)                                       \
    X(wrs_posted)      /* send + recv WRs accepted by post_* */              \
    X(wrs_completed)   /* retired with success (signaled or not) */          \
    X(wrs_failed)      /* completed with an error other than flush */        \
    X(wrs_flushed)     /* completed with IBV_WC_WR_FLUSH_ERR */              \
    X(wrs_dropped)     /* still posted when their QP was destroyed */        \
    X(cqes) X(cq_overflows) /* CQEs queued; queued past the CQ's size */     \
    X(writes_sent) X(writes_landed) X(bytes_landed)                          \
    X(writes_mangled)  /* landed wrong on purpose (write_corrupt/phantom) */ \
    X(sends_landed)    /* SEND / WRITE_WITH_IMM that consumed a recv */      \
    X(rej_no_key)      /* rkey names no MR or MW */                          \
    X(rej_stale_key)   /* MW not bound, invalidated, or another key tag */   \
    X(rej_wrong_qp)    /* type 2 MW bound through another QP */              \
    X(rej_pd) X(rej_access) X(rej_bounds) X(rej_injected)                    \
    X(rej_qp_state)    /* arrived at a QP in error or gone: dropped */       \
    X(cq_events) X(cq_events_acked)                                          \
    X(cm_events) X(cm_events_acked)                                          \
    X(async_events) X(async_events_acked)                                    \
    X(connections)     /* ESTABLISHED delivered */                           \
    X(rejects) X(disconnects) X(links_cut)                                   \
    X(destroy_busy)    /* a destroy refused (EBUSY) or leaked: objects or   \
                          unacked events still attached */

typedef struct xfer_fabric_counters {
#define XFER_FABRIC_FIELD(n) uint64_t n;
    XFER_FABRIC_COUNTERS(XFER_FABRIC_FIELD)
#undef XFER_FABRIC_FIELD
} xfer_fabric_counters;

/* A consistent snapshot, copied into *c. */
void xfer_fabric_counters_get(xfer_fabric_counters *c);
/* "name value" lines to f (borrowed); returns 0 or -1 (errno from
 * stdio). */
int xfer_fabric_counters_print(FILE *f, const xfer_fabric_counters *c);
/* Read a file written by xfer_fabric_counters_print (a child's
 * XFER_FABRIC_COUNTERS file; path borrowed) into *c.  Returns 0, or -1 if
 * it cannot be read or a line is not a known counter. */
int xfer_fabric_counters_load(const char *path, xfer_fabric_counters *c);

/* When nothing of the fabric is alive in this process: zero the counters
 * and restore the default options (then XFER_FABRIC_FAULTS), returning 0.
 * Otherwise -1 (errno EBUSY) and nothing changes.  A test calls it first,
 * which also proves the previous test cleaned up. */
int xfer_fabric_reset(void);

/* Cut the link under a connected id (borrowed; NULL: every link of this
 * process), as a cable pull would: both ends see
 * RDMA_CM_EVENT_DISCONNECTED, both QPs go to error, the WR on the wire
 * completes with IBV_WC_RETRY_EXC_ERR and the rest are flushed; a message
 * already sent may still land.  The cut happens on the fabric's thread,
 * just after this returns.  Returns the number of link ends of this
 * process cut (a link between two ids of one process has two). */
int xfer_fabric_cut(struct rdma_cm_id *id);

#ifdef __cplusplus
}
#endif

#endif /* XFER_FABRIC_H */
