/*
 * examples/stream.c - a streamed transfer: a simulated prefill produces
 * its KV cache layer by layer, in paged blocks scattered over a staging
 * buffer, and sends each layer as soon as it exists into one reservation
 * per shard, committed once after the last layer (docs/streaming.md shows
 * this file).
 *
 *  1. open the stream with each shard's size: the reserves go out now;
 *  2. every millisecond a layer is "computed" and added as a part: per
 *     shard, its blocks (xfer_range: staging offset -> reservation
 *     offset), gathered into the layer's place in the reservation;
 *  3. each part's callback says its staging may be reused;
 *  4. after the last layer, seal: the commits go out once every part's
 *     writes succeeded, and the transfer's one completion follows.
 * Exit status: 0 when the stream succeeded and every part came back once.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <xfer/loop.h>
#include <xfer/stream.h>
#include <xfer/xfer.h>

#define NSHARDS 4
#define LAYERS 8
#define BLOCKS 4    /* paged blocks per layer and shard */
#define BLOCK 1024  /* bytes of a block */
#define LAYER (BLOCKS * BLOCK)

static uint8_t staging[LAYERS * NSHARDS * LAYER];
static xfer_engine *engine;
static uint32_t pool;
static struct event *tick;
static int layer, released, failures;

/* Where block b of layer l for shard k sits in staging: anywhere the
 * producer's allocator put it (here: the blocks of a layer in reverse). */
static uint64_t block_at(int l, int k, int b)
{
    return ((uint64_t)(l * NSHARDS + k) * BLOCKS + (BLOCKS - 1 - b)) * BLOCK;
}

/* Once per accepted part, from the loop: its buffers are ours again. */
static void part_back(void *ud, uint64_t id, uint32_t part, int status)
{
    (void)ud;
    (void)id;
    (void)part;
    released++;
    if (status != 0)
        failures++;
}

/* One layer is ready: send it as a part, seal after the last. */
static void produce(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    xfer_range r[NSHARDS * BLOCKS];
    int n = 0;
    memset(&staging[(size_t)layer * NSHARDS * LAYER], layer + 1,
           (size_t)NSHARDS * LAYER); /* the "computation" */
    for (int k = 0; k < NSHARDS; k++)
        for (int b = 0; b < BLOCKS; b++)
            r[n++] = (xfer_range){.staging_off = block_at(layer, k, b),
                                  .pool = pool, .len = BLOCK,
                                  .resv_off = (uint32_t)(layer * LAYER +
                                                         b * BLOCK),
                                  .shard = (uint16_t)k};
    xfer_part_desc d = {.id = 7, .ranges = r, .nranges = (uint32_t)n,
                        .cb = part_back};
    if (xfer_engine_stream_part(engine, &d, NULL) != 0) {
        failures++; /* refused: the stream failed; its completion says why */
        return;
    }
    if (++layer == LAYERS) {
        xfer_engine_stream_seal(engine, 7);
        return;
    }
    struct timeval ms = {0, 1000};
    evtimer_add(tick, &ms);
}

static void stopped(void *ud)
{
    event_base_loopbreak(ud);
}

/* The stream's one completion, after the commits (or the failure). */
static void done(void *ud, const xfer_result *r)
{
    if (r->status == 0)
        printf("stream %llu done: %d layers on %d shards\n",
               (unsigned long long)r->id, LAYERS, NSHARDS);
    else
        printf("stream %llu failed in phase %s: %s\n",
               (unsigned long long)r->id, xfer_phase_name(r->phase),
               xfer_strerror(r->status));
    if (r->status != 0)
        failures++;
    xfer_engine_shutdown(engine, stopped, ud);
}

int main(void)
{
    xfer_loop *loop = NULL;
    uint32_t group;
    if (xfer_engine_new(NULL, &engine) != 0)
        return 1;
    struct event_base *base = xfer_engine_base(engine);
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = NSHARDS;
    lc.shard.pool_bytes = 1 << 20;
    if (xfer_loop_new(base, &lc, &loop) != 0 ||
        xfer_engine_add_group(engine, xfer_loop_transport(loop), &group) ||
        xfer_engine_register_pool(engine, staging, sizeof staging, &pool))
        return 1;
    uint32_t lens[NSHARDS];
    for (int k = 0; k < NSHARDS; k++)
        lens[k] = LAYERS * LAYER;
    xfer_stream_desc d = {.id = 7, .group = group, .nshards = NSHARDS,
                          .lens = lens};
    if (xfer_engine_stream_open(engine, &d, done, base) != 0)
        return 1;
    tick = evtimer_new(base, produce, NULL);
    struct timeval ms = {0, 1000};
    evtimer_add(tick, &ms);
    event_base_dispatch(base);
    event_free(tick);
    xfer_engine_del(engine);
    xfer_loop_del(loop);
    printf("%d parts came back\n", released);
    return failures == 0 && released == LAYERS ? 0 : 1;
}
