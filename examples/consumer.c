/*
 * examples/consumer.c - a consumer scheduler: it waits until every shard
 * of a request's cache is in place, pins it, hands it on, and releases it.
 *
 *   consumer N ADDR...   the shards of group 0 at ADDR ("127.0.0.1:PORT"),
 *                        shard k at the k-th; expects ids 1..N
 *
 * The order it keeps:
 *  1. start from xfer_consumer_config_default(), name the loop, the
 *     shards' addresses and two callbacks, and create the consumer (it
 *     connects, subscribes and reconnects by itself);
 *  2. expect the ids it schedules, each with a deadline, so that every one
 *     gets exactly one outcome even if no shard ever reports it;
 *  3. available(id, regions): every shard's data is taken (pinned) and
 *     stays put until xfer_consumer_release(id); region k is {shard k,
 *     offset, length} in that shard's memory (examples/server.c's buffer,
 *     or with xferd --shm NAME the object xfer_shm_map(NAME, k) maps);
 *     unavailable(id, reason, shards): it will never be, and the shards
 *     that never reported are named;
 *  4. once every id has its outcome, close: xfer_consumer_close() sends
 *     what was accepted and not yet sent (the releases just made), and
 *     its callback runs once every shard answered; then leave the loop
 *     and xfer_consumer_del() (del alone would drop those releases, and
 *     the data would stay pinned for the servers' take grace period).
 * A request aborted on this side: xfer_consumer_cancel(id) (every shard
 * drops it, and the producer's commit fails).
 * Exit status: 0 when every id was available.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>
#include <xfer/consumer.h>

typedef struct sched {
    struct event_base *base;
    xfer_consumer *c;
    unsigned expected, outcomes, available;
    int closed; /* the close's status */
} sched;

/* Every shard answered every release: nothing is left pinned. */
static void closed(void *ud, int status, uint64_t shards)
{
    sched *s = ud;
    if (status)
        fprintf(stderr, "consumer: close: %s (shards 0x%llx)\n",
                xfer_strerror(status), (unsigned long long)shards);
    s->closed = status;
    event_base_loopbreak(s->base);
}

/* The last outcome: deliver the releases, then stop. */
static void outcome(sched *s)
{
    if (++s->outcomes == s->expected &&
        xfer_consumer_close(s->c, 5000000000ull, closed, s) != 0)
        event_base_loopbreak(s->base);
}

/* From the loop, once per id: every region is pinned for us. */
static void available(void *ud, uint64_t id, uint32_t attempt,
                      const xfer_region *regions, uint16_t n)
{
    (void)attempt;
    sched *s = ud;
    for (uint16_t k = 0; k < n; k++)
        printf("id %llu shard %u: %u bytes at offset %llu\n",
               (unsigned long long)id, (unsigned)regions[k].shard,
               (unsigned)regions[k].len,
               (unsigned long long)regions[k].offset);
    /* ... hand the regions to the model, then: */
    xfer_consumer_release(s->c, id);
    s->available++;
    outcome(s);
}

static void unavailable(void *ud, uint64_t id, int32_t reason,
                        uint64_t shards)
{
    sched *s = ud;
    printf("id %llu unavailable: %s (shards 0x%llx never reported)\n",
           (unsigned long long)id, xfer_strerror(reason),
           (unsigned long long)shards);
    outcome(s);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: consumer N ADDR...\n");
        return 2;
    }
    sched s = {.expected = (unsigned)atoi(argv[1])};
    int rc = XFER_ERR_NOMEM;
    signal(SIGPIPE, SIG_IGN);
    s.base = event_base_new();
    if (!s.base)
        goto out;
    xfer_consumer_config cfg;
    xfer_consumer_config_default(&cfg);
    cfg.base = s.base;
    cfg.nshards = (uint16_t)(argc - 2);
    cfg.addrs = (const char *const *)argv + 2;
    cfg.available = available;
    cfg.unavailable = unavailable;
    cfg.ud = &s;
    rc = xfer_consumer_new(&cfg, &s.c);
    if (rc)
        goto out;
    uint64_t deadline = xfer_consumer_now(s.c) + 10000000000ull; /* 10 s */
    for (uint64_t id = 1; id <= s.expected && !rc; id++)
        rc = xfer_consumer_expect(s.c, id, deadline);
    if (!rc && s.expected)
        event_base_dispatch(s.base);
out:
    if (rc)
        fprintf(stderr, "consumer: %s\n", xfer_strerror(rc));
    xfer_consumer_del(s.c);
    if (s.base)
        event_base_free(s.base);
    printf("%u of %u available\n", s.available, s.expected);
    return rc || s.closed || s.available != s.expected ? 1 : 0;
}
