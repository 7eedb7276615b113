/*
 * tests/multiproc/tcp_producer.c - a stand-alone producer for tests that
 * run it in another network namespace: N transfers over the tcp transport
 * to the shards at the given addresses, then checks what the multi-process
 * tests check: every transfer completed exactly once, the staging is free,
 * and (with --check-pools) every shard's pool is full again (STATUS).
 *
 *   tcp_producer ADDR,ADDR,... COUNT INFLIGHT SLICE [--check-pools]
 *
 * Exit 0 when all holds, 1 otherwise; prints its seed (XFER_SEED).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mp.h"
#include "testutil.h"

typedef struct prun {
    mp_producer p;
    uint32_t count, inflight, slice, submitted, completed, ok, dup;
    uint8_t *seen;
    uint32_t *free_slots, nfree;
    uint64_t rng;
} prun;

static void submit(prun *r);

static void done(void *ud, const xfer_result *res)
{
    prun *r = ud;
    if (res->id == 0 || res->id > r->count || r->seen[res->id]++)
        r->dup++;
    r->completed++;
    r->ok += res->status == 0;
    r->free_slots[r->nfree++] = (uint32_t)res->user_data;
    if (r->submitted < r->count)
        submit(r);
}

static void submit(prun *r)
{
    uint32_t slot = r->free_slots[--r->nfree];
    xfer_slice sl[XFER_MAX_SHARDS];
    for (uint16_t k = 0; k < r->p.nshards; k++) {
        sl[k].off = ((uint64_t)slot * r->p.nshards + k) * r->slice;
        sl[k].len = 1 + (uint32_t)(tu_rand(&r->rng) % r->slice);
    }
    xfer_transfer_desc d = {.id = ++r->submitted, .group = r->p.group,
                            .pool = r->p.pool, .nslices = r->p.nshards,
                            .slices = sl, .user_data = slot};
    if (xfer_engine_submit(r->p.e, &d, done, r) != 0) {
        fprintf(stderr, "tcp_producer: submit refused\n");
        exit(1);
    }
}

static bool finished(void *ud)
{
    prun *r = ud;
    return r->completed >= r->count;
}

static int check_pools(const char *const *addrs, uint16_t n)
{
    for (uint16_t k = 0; k < n; k++) {
        xfer_wire_status st = {0};
        uint64_t end = mp_now_ms() + 30000;
        while ((mp_status_addr(addrs[k], &st) != 0 || st.bytes_in_use ||
                st.live) && mp_now_ms() < end) {
            struct timespec ts = {0, 20000000};
            nanosleep(&ts, NULL);
        }
        printf("shard %u: in use %" PRIu64 " live %" PRIu64 "\n",
               (unsigned)k, st.bytes_in_use, st.live);
        if (st.bytes_in_use || st.live)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: tcp_producer ADDRS COUNT INFLIGHT SLICE "
                        "[--check-pools]\n");
        return 2;
    }
    static char buf[4096];
    const char *addrs[XFER_MAX_SHARDS];
    int n = xfer_tcp_split_addrs(argv[1], buf, sizeof buf, addrs,
                                 XFER_MAX_SHARDS);
    static prun r;
    r.count = (uint32_t)atoi(argv[2]);
    r.inflight = (uint32_t)atoi(argv[3]);
    r.slice = (uint32_t)atoi(argv[4]);
    if (n <= 0 || !r.count || !r.inflight || !r.slice) {
        fprintf(stderr, "tcp_producer: bad arguments\n");
        return 2;
    }
    r.rng = tu_seed("tcp_producer", 77);
    r.seen = calloc(r.count + 1, 1);
    r.free_slots = calloc(r.inflight, sizeof *r.free_slots);
    for (uint32_t i = 0; i < r.inflight; i++)
        r.free_slots[r.nfree++] = i;
    if (mp_producer_new_addrs(&r.p, addrs, (uint16_t)n,
                              (size_t)r.inflight * (size_t)n * r.slice,
                              20000000000ull) != 0 ||
        !mp_producer_wait_connected(&r.p, 20000)) {
        fprintf(stderr, "tcp_producer: cannot reach the shards\n");
        return 1;
    }
    for (uint32_t i = 0; i < r.inflight && r.submitted < r.count; i++)
        submit(&r);
    bool ended = mp_run_while(r.p.base, finished, &r, 600000);
    xfer_engine_stats es;
    xfer_engine_stats_get(r.p.e, &es);
    printf("tcp_producer: %u/%u completed, %u ok, %u duplicates, staging "
           "in use %" PRIu64 "\n", r.completed, r.count, r.ok, r.dup,
           es.staging_bytes_in_use);
    int bad = !ended || r.dup || es.staging_bytes_in_use ||
              r.nfree != r.inflight || !mp_producer_del(&r.p, 60000);
    for (uint32_t id = 1; id <= r.count; id++)
        bad |= r.seen[id] != 1;
    if (argc > 5 && strcmp(argv[5], "--check-pools") == 0)
        bad |= check_pools(addrs, (uint16_t)n);
    return bad ? 1 : 0;
}
