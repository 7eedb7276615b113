/*
 * xfer/rdma.h - the RDMA transport (producer side) and the RDMA side of the
 * shard server.  Built when the library was configured with libibverbs and
 * librdmacm (meson option `rdma`); without them every call here answers
 * XFER_ERR_NOT_SUPPORTED.
 *
 * Control stays on TCP: the transport keeps one control connection per
 * shard (xfer/tcp.h, the same wire protocol), and next to it one rdmacm RC
 * connection to the same address and port (rdmacm ports are their own
 * space).  A shard's ops go out only while both are up.  Data moves by
 * one-sided RDMA WRITE from the staging pool (registered at pool_added)
 * into the reserved region (the reserve reply's address and rkey), split
 * at the port's max_msg_sz.  A WRITE result is delivered only when the
 * completion of its last work request was polled (I3).  A lost CM
 * connection, a QP in error or a lost TCP connection takes both down: the
 * shard's outstanding ops fail (XFER_ERR_CONN_LOST, posted writes once
 * their flush completions were polled) and both reconnect.
 *
 * By group name (docs/discovery.md): set tcp.dir and tcp.dir_group instead
 * of tcp.addrs, as for the TCP transport.  The control connections follow
 * the group exactly as xfer_tcp_new's do, and only entries whose
 * transports include XFER_DIR_RDMA are used (the RC connection goes to
 * the address and port of the entry).  A shard whose entry vanished is
 * gone at once: its reserves and commits, its waiting writes and (once
 * their flushes are polled) its posted writes fail XFER_ERR_SHARD_GONE;
 * a shard registered at a new address is reconnected there.
 *
 * The server (xfer_server_new_rdma) gives each reservation its own rkey
 * over exactly the region: a type 2 memory window bound through the
 * reserving producer's QP where the device has them, else its own memory
 * registration (xfer_server_rdma_windows says which); a free, a commit or
 * a lease expiry first kills it (window: local invalidation, completion
 * polled, dealloc; registration: deregistration), so a write that comes
 * later fails at the producer (remote access error) and lands nothing.
 *
 * Threads: like xfer/tcp.h, everything on the loop thread of `base`.
 */
#ifndef XFER_RDMA_H
#define XFER_RDMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/errors.h"
#include "xfer/server.h"
#include "xfer/tcp.h"
#include "xfer/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;
typedef struct xfer_rdma xfer_rdma;

#define XFER_RDMA_CONFIG_VERSION 1
typedef struct xfer_rdma_config {
    uint32_t version;        /* XFER_RDMA_CONFIG_VERSION */
    xfer_tcp_config tcp;     /* the control connections (nshards, addrs,
                                group, ...); tcp.alloc serves every
                                allocation of the transport */
    uint32_t max_send_wr;    /* work requests posted per shard at once;
                                0: 256 */
    uint32_t cm_timeout_ms;  /* address and route resolution; 0: 2000 */
} xfer_rdma_config;

/* Write the version and every default into *cfg (tcp: its own defaults).
 * NULL ok. */
XFER_API void xfer_rdma_config_default(xfer_rdma_config *cfg);

/*
 * Open the first RDMA device, its PD and CQ, and start the control
 * connections on `base` (as xfer_tcp_new's: a caller's base must outlive
 * the transport; an engine's own base is held until xfer_rdma_del).  cfg
 * copied.  *out untouched on failure.
 * Errors: XFER_ERR_INVALID_ARG (NULL, unknown version, a bad tcp config),
 * XFER_ERR_NOT_SUPPORTED (no RDMA device, or a build without RDMA),
 * XFER_ERR_NOMEM, XFER_ERR_IO (a verbs or rdmacm call failed).
 */
XFER_API int xfer_rdma_new(struct event_base *base,
                           const xfer_rdma_config *cfg, xfer_rdma **out);
/* Close every connection, deregister what is still registered, free.
 * NULL ok.  After xfer_engine_del (no op outstanding) or if never
 * attached, freed now; while still attached, it keeps serving the engine
 * and xfer_engine_del's detach frees it (do not use `r` after this call
 * either way). */
XFER_API void xfer_rdma_del(xfer_rdma *r);
/* The ops table + self for xfer_engine_add_group(). */
XFER_API xfer_transport xfer_rdma_transport(xfer_rdma *r);

#define XFER_RDMA_STATS_VERSION 2
typedef struct xfer_rdma_stats {
    uint64_t cm_connects, cm_failures, cm_losses;
    uint64_t writes, writes_ok, writes_failed, writes_aborted;
    uint64_t wrs_posted, wcs_polled, wcs_flushed, wcs_access_err;
    uint64_t bytes_written;
    uint64_t pools_registered, reg_failures;
    uint32_t mrs_live;       /* staging registrations held now */
    uint32_t wrs_outstanding;/* posted, completion not yet polled */
    /* Version 2 (issue 25): staging pools in CUDA device memory, by the
     * path their registration took (docs/gpu-edges.md): a DMA-BUF, or a
     * plain registration through nvidia-peermem; and those refused (no
     * path, or test-device memory), counted in reg_failures too. */
    uint64_t pools_dmabuf, pools_peermem, pools_device_refused;
} xfer_rdma_stats;

/* Counters: the fields of stats version `version` are copied into *st
 * (borrowed), nothing past them is written.  Call it through the macro.
 * Errors: XFER_ERR_INVALID_ARG (NULL, unknown version; *st untouched). */
XFER_API int xfer_rdma_stats_get_versioned(const xfer_rdma *r,
                                           uint32_t version,
                                           xfer_rdma_stats *st);
#define xfer_rdma_stats_get(r, st)                                          \
    xfer_rdma_stats_get_versioned((r), XFER_RDMA_STATS_VERSION, (st))
/* True when shard's control and RDMA connections are both up. */
XFER_API bool xfer_rdma_connected(const xfer_rdma *r, uint16_t shard);
/* True when the transport was created from a group (tcp.dir) and shard
 * has no usable entry in it (none, or one whose transports lack
 * XFER_DIR_RDMA): its ops fail with XFER_ERR_SHARD_GONE.  False for a
 * static address list, NULL or a shard out of range. */
XFER_API bool xfer_rdma_gone(const xfer_rdma *r, uint16_t shard);
/* Test hook: take shard's connections down as if the network lost them. */
XFER_API void xfer_rdma_drop(xfer_rdma *r, uint16_t shard);

/*
 * Is there an RDMA device?  0 when there is; otherwise
 * XFER_ERR_NOT_SUPPORTED with one line saying why in why[cap] (always
 * NUL-terminated when cap > 0).  why borrowed.
 */
XFER_API int xfer_rdma_probe(char *why, size_t cap);

/* ---------------------------------------------------------------------- */
/* The shard server over RDMA                                              */
/* ---------------------------------------------------------------------- */

#define XFER_SERVER_RDMA_CONFIG_VERSION 1
typedef struct xfer_server_rdma_config {
    uint32_t version;        /* XFER_SERVER_RDMA_CONFIG_VERSION */
    uint16_t port;           /* rdmacm port; 0: the TCP port bound */
} xfer_server_rdma_config;

XFER_API void xfer_server_rdma_config_default(xfer_server_rdma_config *cfg);

/*
 * xfer_server_new, with the shards also written one-sidedly: an rdmacm
 * listener on cfg->addr (rcfg->port), a PD on that device, and an rkey
 * per reservation: a type 2 memory window where the device has them,
 * else a registration (its address in RESERVE_OK stays the region's
 * offset in the pool; rkey nonzero).
 * Plain TCP producers are served as before.  rcfg NULL: defaults.
 * Errors: those of xfer_server_new, XFER_ERR_NOT_SUPPORTED (no device, a
 * build without RDMA), XFER_ERR_IO (an rdmacm or verbs call failed).
 */
XFER_API int xfer_server_new_rdma(const xfer_server_config *cfg,
                                  const xfer_server_rdma_config *rcfg,
                                  xfer_server **out);
/* The rdmacm port bound (0 without RDMA). */
XFER_API uint16_t xfer_server_rdma_port(const xfer_server *s);
/* Which per-reservation rkeys s gives: true, type 2 memory windows bound
 * through the reserving producer's QP (the device reports
 * IBV_DEVICE_MEM_WINDOW_TYPE_2B); false, a registration per reservation
 * (no type 2 windows), or no RDMA.  The start also logs it
 * ("rdma: per-reservation rkeys via ..."). */
XFER_API bool xfer_server_rdma_windows(const xfer_server *s);

#ifdef __cplusplus
}
#endif
#endif /* XFER_RDMA_H */
