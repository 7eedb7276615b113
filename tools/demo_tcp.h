/*
 * tools/demo_tcp.h - what `xfer-demo --tcp` needs around the library: a
 * consumer group of real xferd processes (one shard each, pools in shared
 * memory) on loopback ephemeral ports, a tcp transport connected to all of
 * them, STATUS queries for their pools, killing and restarting one, and a
 * reliable end for every child.
 *
 * Every child dies with the demo (PR_SET_PDEATHSIG) and demo_tcp_stop
 * SIGTERMs and reaps each one.  Loop thread only (one thread).
 */
#ifndef XFER_DEMO_TCP_H
#define XFER_DEMO_TCP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "xfer/rdma.h"
#include "xfer/tcp.h"

struct event_base;
struct xfer_wire_status;
typedef struct demo_tcp demo_tcp;

typedef struct demo_tcp_config {
    const char *xferd;    /* path of the xferd binary; borrowed until
                             demo_tcp_start returns */
    uint16_t nshards;     /* one xferd per shard, 1..XFER_MAX_SHARDS */
    uint64_t pool_bytes;  /* per shard (--pool) */
    uint32_t max_resv;    /* --max-resv */
    uint32_t max_tombs;   /* --max-tombs */
    uint64_t lease_ttl_ms; /* --lease-ttl; also bounds demo_tcp_stop */
    uint32_t fault_ppm;   /* xferd k gets --faults fault_ppm:seed+k */
    uint32_t drop_ppm;    /* --drop */
    uint64_t seed;
    const char *shm;      /* --shm NAME (copied): a consumer process reads
                             the pools; NULL: private pools, each xferd
                             taking and releasing ready data itself
                             (--consume: a sink, for benchmarks) */
    const char *trace;    /* shard k traces to TRACE.shard<k> (copied);
                             NULL: none */
    uint64_t take_grace_ms; /* --take-grace */
    bool rdma;            /* xferd --rdma (demo_tcp_connect_rdma) */
    uint8_t integrity;    /* xferd --integrity (xfer_integrity); 0: none
                             given, the library default */
    const char *etcd;     /* xferd --etcd ETCD --etcd-ttl 2 --group 0
                             (copied): the shards register there
                             (docs/discovery.md); NULL: not */
} demo_tcp_config;

/*
 * Find xferd for the binary started as argv0 (borrowed): <dir>/xferd/xferd
 * (the build tree), else <dir>/xferd (an install), where <dir> is argv0's
 * folder (or /proc/self/exe's when argv0 has no '/').  Writes the path into
 * buf (cap bytes).  Returns 0, or XFER_ERR_NOT_FOUND with buf holding the
 * first candidate (for the message).
 */
int demo_tcp_find_xferd(const char *argv0, char *buf, size_t cap);

/* The port an xferd wrote to its --port-file `path` (borrowed): 0 and
 * *port set, or -1 (no file yet, or no port in it). */
int demo_tcp_read_port(const char *path, uint16_t *port);

/*
 * Spawn the xferd children (--shm or --consume, --quiet, the caps, lease
 * and faults of cfg; stdout to /dev/null, stderr to a log in a private temp folder,
 * removed once every child listens) and wait until each listens.  cfg
 * copied.  On failure every child started is
 * stopped, *out stays untouched and err (cap bytes) holds one line saying
 * why.  Returns 0, XFER_ERR_INVALID_ARG, XFER_ERR_NOMEM, XFER_ERR_NOT_FOUND
 * (no executable at cfg->xferd) or XFER_ERR_IO (fork, or a child that died
 * or never listened).
 */
int demo_tcp_start(const demo_tcp_config *cfg, demo_tcp **out, char *err,
                   size_t cap);

/*
 * Make a tcp transport on base (borrowed; must outlive the transport) to the
 * children, shard k at child k, and run base until every connection is up
 * or timeout_ms passed.  *out (the caller then owns it: xfer_tcp_del)
 * untouched on failure, with one line in err.  Returns 0, what
 * xfer_tcp_new returned, XFER_ERR_NOMEM or XFER_ERR_CONN_LOST (not
 * connected in time).
 */
int demo_tcp_connect(const demo_tcp *t, struct event_base *base,
                     uint64_t timeout_ms, xfer_tcp **out, char *err,
                     size_t cap);

/* demo_tcp_connect with the RDMA transport (xfer/rdma.h): each shard's
 * control connection and its rdmacm connection, to children started with
 * cfg.rdma.  Same errors, and what xfer_rdma_new returned. */
int demo_tcp_connect_rdma(const demo_tcp *t, struct event_base *base,
                          uint64_t timeout_ms, xfer_rdma **out, char *err,
                          size_t cap);

/*
 * Ask every child for STATUS and sum their bytes in use into *bytes.
 * Blocking, about a millisecond on loopback, at most 1 s per child.
 * Returns 0, or XFER_ERR_IO when a child did not answer (*bytes then
 * counts only those that did).
 */
int demo_tcp_bytes_in_use(const demo_tcp *t, uint64_t *bytes);

/*
 * Ask child k for STATUS (every shard it hosts, summed) into *st.
 * Blocking, at most 1 s.  Returns 0, or XFER_ERR_IO when it did not answer
 * (*st then untouched).
 */
int demo_tcp_status(const demo_tcp *t, uint16_t k,
                    struct xfer_wire_status *st);

/*
 * Kill child k with SIGKILL, reap it, and start it again on the same port
 * and shared-memory name (its stale objects are replaced); its trace goes
 * to TRACE.shard<k>-restart.  Waits until it listens.  Returns 0 or
 * XFER_ERR_IO with one line in err.
 */
int demo_tcp_kill_restart(demo_tcp *t, uint16_t k, char *err, size_t cap);
/* The two halves of it: the kill (reaped), and the restart later. */
int demo_tcp_kill(demo_tcp *t, uint16_t k, char *err, size_t cap);
int demo_tcp_restart(demo_tcp *t, uint16_t k, char *err, size_t cap);

/* demo_tcp_connect with the shards found through the directory: the
 * transport follows group "0" on `dir` (borrowed: outlives *out). */
struct xfer_dir;
int demo_tcp_connect_dir(const demo_tcp *t, struct event_base *base,
                         struct xfer_dir *dir, uint64_t timeout_ms,
                         xfer_tcp **out, char *err, size_t cap);

/* Child k's pid (0 once reaped) and its "127.0.0.1:port" (borrowed: lives
 * as long as t), for k below the nshards of demo_tcp_start. */
pid_t demo_tcp_pid(const demo_tcp *t, uint16_t k);
const char *demo_tcp_addr(const demo_tcp *t, uint16_t k);

/*
 * SIGTERM every child, reap it (xferd drains: bounded by lease TTL + 2 s,
 * then SIGKILL), free.  NULL ok.  Returns how many children did not exit
 * 0 on their own (a crash, a sanitizer report, or the SIGKILL).
 */
int demo_tcp_stop(demo_tcp *t);

/* The bytes the producer stages for (id, shard k, byte i), which the
 * consumer process checks in place. */
static inline uint8_t demo_pattern(uint64_t seed, uint64_t id, uint16_t k,
                                   uint32_t i)
{
    return (uint8_t)(id * 131u + k * 31u + i * 7u + seed * 17u);
}

#endif /* XFER_DEMO_TCP_H */
