/*
 * tests/multiproc/mp.h - helpers for multi-process tests: start xferd
 * processes on ephemeral loopback ports, kill them (always, even when a
 * test fails: PR_SET_PDEATHSIG plus an atexit sweep), and speak raw wire
 * frames to them (status queries, hand-made bad input).
 */
#ifndef XFER_TEST_MP_H
#define XFER_TEST_MP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire.h"

struct event_base;

typedef struct mp_proc {
    pid_t pid;
    uint16_t port;
    char log[256]; /* its stderr */
} mp_proc;

/* Start xferd (path from $XFERD) with `args` (NULL-terminated) plus
 * --port PORT (0: ephemeral) and wait until it listens.  Returns 0. */
int mp_xferd(mp_proc *p, uint16_t port, const char *const *args);
/* Send sig and reap.  Returns the wait status. */
int mp_kill(mp_proc *p, int sig);
/* Kill every process started here (SIGKILL). */
void mp_kill_all(void);
/* Register a pid forked elsewhere, so mp_kill_all reaps it too. */
void mp_track(pid_t pid);

/* A blocking client socket to 127.0.0.1:port with a receive timeout. */
int mp_connect(uint16_t port);
int mp_send(int fd, const void *buf, size_t n);
/* Encode and send m (for WRITE, followed by `data`). */
int mp_send_msg(int fd, const xfer_wire_msg *m, uint32_t req,
                const void *data);
/* Receive one frame.  Returns 0, -1 on EOF/timeout/bad frame. */
int mp_recv_msg(int fd, xfer_wire_hdr *h, xfer_wire_msg *m);
/* True when the peer closed the connection (EOF within the timeout). */
bool mp_closed(int fd);
/* HELLO for shard on group 0 and expect HELLO_ACK. */
int mp_hello(int fd, uint16_t shard);
/* The same with HELLO's role `role` (XFER_WIRE_ROLE_*). */
int mp_hello_role(int fd, uint16_t shard, uint8_t role);
/* STATUS of every shard of the daemon on port (summed). */
int mp_status(uint16_t port, xfer_wire_status *st);
/* Poll until the daemon's bytes_in_use is 0 and live is 0, or timeout_ms
 * passed.  Returns 0 when it got there. */
int mp_wait_pool_free(uint16_t port, int timeout_ms, xfer_wire_status *st);

/* Run the loop until *flag becomes true or timeout_ms passes.  Returns
 * true when the flag was set. */
bool mp_run_until(struct event_base *base, const volatile bool *flag,
                  int timeout_ms);
/* Run the loop until fn(ud) holds or timeout_ms passes. */
bool mp_run_while(struct event_base *base, bool (*fn)(void *ud), void *ud,
                  int timeout_ms);
uint64_t mp_now_ms(void);

#endif /* XFER_TEST_MP_H */

/* ---------------------------------------------------------------------- */
/* A producer: engine + tcp transport to n xferd, one staging pool.       */
/* ---------------------------------------------------------------------- */

#include "xfer/tcp.h"
#include "xfer/xfer.h"

typedef struct mp_producer {
    struct event_base *base;
    xfer_engine *e;
    xfer_tcp *tcp;
    uint32_t group, pool;
    uint8_t *staging;
    size_t staging_len;
    uint16_t nshards;
    volatile bool shut;
} mp_producer;

/* addrs[k] ("ip:port") serves shard k. */
int mp_producer_new_addrs(mp_producer *p, const char *const *addrs,
                          uint16_t n, size_t staging_len,
                          uint64_t deadline_ns);
/* The same, authenticating with `secret` (xfer_tcp_config.secret). */
int mp_producer_new_secret(mp_producer *p, const char *const *addrs,
                           uint16_t n, size_t staging_len,
                           uint64_t deadline_ns, const void *secret,
                           size_t secret_len);
/* STATUS (every shard summed) of the daemon at "ip:port". */
int mp_status_addr(const char *addr, xfer_wire_status *st);
/* ports[k] serves shard k.  deadline_ns: default transfer timeout. */
int mp_producer_new(mp_producer *p, const uint16_t *ports, uint16_t n,
                    size_t staging_len, uint64_t deadline_ns);
/* Wait until every shard connection is up. */
bool mp_producer_wait_connected(mp_producer *p, int timeout_ms);
/* Shut the engine down (every transfer ends), then free everything.
 * Returns true when shutdown completed and the pool was unregistered. */
bool mp_producer_del(mp_producer *p, int timeout_ms);
