/*
 * tests/consumer/stack.h - a whole deployment inside one test process, on
 * one event base: S shard servers (xfer_server) each over its own caller
 * buffer fenced by PROT_NONE guard pages and filled with a canary, a
 * producer (engine + tcp transport) and a consumer scheduler
 * (xfer_consumer) that checks the bytes of every available id against the
 * producer's pattern and records every outcome.
 */
#ifndef XFER_TEST_STACK_H
#define XFER_TEST_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/consumer.h"
#include "xfer/server.h"
#include "xfer/tcp.h"
#include "xfer/xfer.h"

#define ST_MAX_S 8
#define ST_CANARY 0xA5

/* A buffer with a PROT_NONE page on each side: a write outside it faults. */
typedef struct st_mem {
    uint8_t *map;
    size_t map_len;
    uint8_t *buf;
    size_t len;
} st_mem;

int st_mem_new(st_mem *m, size_t len, uint8_t fill);
void st_mem_del(st_mem *m);

/* What the consumer saw for one id. */
typedef struct st_outcome {
    uint8_t n;           /* outcomes reported (must end at most 1) */
    bool available;
    bool bytes_ok;       /* available: every byte matched the pattern */
    int32_t reason;
    uint64_t missing;
    uint32_t attempt;
    xfer_region reg[ST_MAX_S];
} st_outcome;

/* What the producer saw for one id. */
typedef struct st_done {
    uint8_t n;
    xfer_result res;
} st_done;

typedef struct stack {
    struct event_base *base;
    uint16_t S;
    uint32_t slice;
    st_mem mem[ST_MAX_S];
    xfer_server *srv[ST_MAX_S];
    xfer_server_config scfg;
    uint16_t port[ST_MAX_S];
    char addr[ST_MAX_S][32];
    const char *addrs[ST_MAX_S];
    /* producer */
    xfer_engine *e;
    xfer_tcp *tcp;
    uint32_t group, pool;
    uint8_t *staging;
    uint32_t inflight;
    uint32_t eager_max_bytes; /* the producer's (0: never eager); set before
                                 st_start_producer */
    /* consumer */
    xfer_consumer *cons;
    xfer_consumer_config ccfg;
    bool auto_release;   /* release every available id in its callback */
    uint64_t max_id;
    st_outcome *out;     /* [max_id + 1] */
    st_done *done;       /* [max_id + 1] */
    uint64_t available, unavailable, twice, corrupt, completions;
    uint32_t links_up;
} stack;

/* Fill the pattern byte i of shard k of id. */
uint8_t st_pattern(uint64_t id, uint16_t k, uint32_t i);

/* Servers: S of them, shard k over mem[k] (pool bytes, canary-filled),
 * from the template (NULL: defaults); the base is made here.  Returns 0. */
int st_start_servers(stack *s, uint16_t S, size_t pool, uint64_t max_id,
                     const xfer_server_config *tmpl);
/* Stop (del) server k, or start it again on the same port and memory. */
void st_stop_server(stack *s, uint16_t k);
int st_restart_server(stack *s, uint16_t k);
/* The producer: engine + tcp to every server, inflight slices of `slice`
 * bytes per shard. */
int st_start_producer(stack *s, uint32_t slice, uint32_t inflight,
                      uint64_t deadline_ns);
/* The consumer, from the template (NULL: defaults). */
int st_start_consumer(stack *s, const xfer_consumer_config *tmpl);
/* Submit id from staging slot `slot` (pattern written first). */
int st_submit(stack *s, uint64_t id, uint32_t slot);
/* The same with the caller's CRCs (S entries; NULL: st_submit), through
 * xfer_engine_post_submit_crc when posted. */
int st_submit_crc(stack *s, uint64_t id, uint32_t slot,
                  const uint32_t *crcs, bool posted);
/* The completion callback st_submit uses (ud: the stack). */
xfer_complete_cb st_done_cb(void);
/* Run the loop until fn(ud) or timeout_ms.  True when fn held. */
bool st_run(stack *s, bool (*fn)(void *ud), void *ud, int timeout_ms);
/* Run for ms milliseconds. */
void st_spin(stack *s, int ms);
/* Every consumer link up / every producer shard connected. */
bool st_all_up(void *ud);
/* Bytes in use summed over every server. */
uint64_t st_bytes_in_use(const stack *s);
/*
 * A raw producer speaking wire frames on a blocking socket to server k
 * (HELLO as a producer done), for tests that need one shard's op at a
 * time.  st_raw_call sends m (and `data` for a WRITE), runs the loop until
 * the answer is there, and reads it into *reply.  Returns 0, -1 on a
 * socket error or no answer within 5 s.
 */
struct xfer_wire_msg;
int st_raw_connect(stack *s, uint16_t k);
/* The same with HELLO's role `role` (XFER_WIRE_ROLE_*). */
int st_raw_connect_role(stack *s, uint16_t k, uint8_t role);
int st_raw_call(stack *s, int fd, const struct xfer_wire_msg *m,
                const void *data, struct xfer_wire_msg *reply);
/* Reserve, write the pattern and (commit: true) commit id on shard k over
 * fd; *resv gets the reservation id.  Returns the first error code (0). */
int st_raw_put(stack *s, int fd, uint16_t k, uint64_t id, uint32_t attempt,
               bool commit, uint64_t *resv);

/* Tear everything down (producer shut down first). */
void st_stop(stack *s);

#endif /* XFER_TEST_STACK_H */
