/*
 * tools/demo_consumer.h - the consumer-scheduler process of `xfer-demo
 * --tcp`: xfer_consumer connected to the S xferd --shm shards, mapping
 * their pools, checking every byte of every available transfer against
 * the producer's seeded pattern, releasing it, and cancelling a seeded
 * share of ids itself; and the producer's side of it: start it, tell it
 * the producer is done, read its per-id report.
 *
 * The child is this same executable run as `xfer-demo --consumer-role
 * ...`; it writes "up" on stdout once every link is up, then, after
 * "done" on stdin and once every id has its outcome and nothing is held,
 * one line per id and an END line, and exits 0 (1 when it saw a second
 * outcome for an id, a corrupt byte, or could not finish).
 */
#ifndef XFER_DEMO_CONSUMER_H
#define XFER_DEMO_CONSUMER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What the consumer process saw for one id. */
typedef struct demo_outcome {
    uint8_t n;          /* outcomes reported (1 expected) */
    uint8_t available;
    uint8_t verified;   /* available and every byte matched */
    uint8_t cancelled;  /* the consumer cancelled it (the cancel said 0) */
    int32_t reason;     /* unavailable: the xfer_err */
} demo_outcome;

typedef struct demo_consumer_report {
    demo_outcome *out;  /* [transfers + 1] */
    uint64_t available, unavailable, verified, corrupt, cancels;
    uint64_t held_bytes, twice, unreported;
    uint64_t by_reason[5]; /* timeout, cancelled, expired, conn_lost, take */
    int exit_status;
} demo_consumer_report;

typedef struct demo_consumer_config {
    const char *self;        /* this executable */
    uint16_t nshards;
    const char *const *addrs; /* shard k at addrs[k] */
    const char *shm;
    uint32_t transfers;
    uint32_t block;
    uint64_t seed;
    uint32_t cancel_ppm;
    const char *trace;       /* NULL: none */
} demo_consumer_config;

typedef struct demo_consumer demo_consumer;

/* The child's main (argv after "--consumer-role"). */
int demo_consumer_main(int argc, char **argv);

/* Start the child and wait (at most 10 s) for its "up".  cfg copied.
 * Returns 0, or XFER_ERR_IO with one line in err. */
int demo_consumer_start(const demo_consumer_config *cfg, demo_consumer **out,
                        char *err, size_t cap);
/* Tell it the producer is done, read its report into *r (r->out
 * allocated, free it), and reap it (at most timeout_ms).  Returns 0 or
 * XFER_ERR_IO (no complete report; err says why). */
int demo_consumer_finish(demo_consumer *c, uint64_t timeout_ms,
                         demo_consumer_report *r, char *err, size_t cap);
/* Kill the child if it still runs, free.  NULL ok. */
void demo_consumer_stop(demo_consumer *c);

#endif /* XFER_DEMO_CONSUMER_H */
