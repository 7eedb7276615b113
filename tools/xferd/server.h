/*
 * tools/xferd/server.h - the xferd daemon object: consumer shards of one
 * group on one event loop, a TCP listener speaking the wire protocol
 * (transport/wire.h), subscribers for shard events, and seeded fault
 * injection for tests.  xferd.c parses flags and signals and drives it.
 */
#ifndef XFERD_SERVER_H
#define XFERD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "xfer/fsm.h"

struct event_base;
typedef struct xd_server xd_server;

typedef struct xd_config {
    const char *addr;       /* numeric IPv4/IPv6 address to bind */
    uint16_t port;          /* 0: an ephemeral port */
    uint32_t group;         /* consumer group id; HELLO must match */
    uint64_t pool_bytes;    /* per shard */
    uint64_t lease_ttl_ns;
    uint32_t max_resv;      /* live reservations per shard */
    uint32_t max_tombs;     /* tombstones per shard; 0: 4 * max_resv */
    uint16_t shards[XFER_MAX_SHARDS];
    uint16_t nshards;
    bool consume;           /* take + release every READY at once (sink) */
    uint32_t fault_ppm;     /* chance per op of a refusal or of "applied,
                               reported failed" (half each) */
    uint32_t drop_ppm;      /* chance per op of dropping the connection */
    uint64_t fault_seed;
    uint64_t drain_timeout_ns; /* 0: lease TTL */
    FILE *log;              /* traces of bad input; NULL: quiet */
} xd_config;

/* Create, bind and listen.  Returns 0 or an xfer error; *out untouched on
 * failure.  cfg copied. */
int xd_server_new(struct event_base *base, const xd_config *cfg,
                  xd_server **out);
void xd_server_del(xd_server *s);
/* The bound port (after port 0). */
uint16_t xd_server_port(const xd_server *s);
/* Stop listening, refuse new reserves, and exit the loop once no
 * reservation is RESERVED/WRITING (or the drain timeout passed). */
void xd_server_drain(xd_server *s);
bool xd_server_drained(const xd_server *s);
/* Open the Unix control socket at path (xfer/ctl.h): every open
 * reservation of every hosted shard.  Returns 0 or an xfer error. */
int xd_server_ctl_open(xd_server *s, const char *path);
/* One line of counters (every hosted shard summed, then each shard). */
void xd_server_print_stats(const xd_server *s, FILE *f);

#endif /* XFERD_SERVER_H */
