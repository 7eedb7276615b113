/*
 * transport/backoff.c - exponential, capped, jittered reconnect delays
 * (backoff.h says what must stay true).
 */
#include <stddef.h>

#include "backoff.h"

void xfer_backoff_init(xfer_backoff *b, const uint8_t *seed, size_t n)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++)
        s = (s ^ seed[i]) * 0x100000001b3ull;
    *b = (xfer_backoff){.rng = s ? s : 1};
}

void xfer_backoff_up(xfer_backoff *b, uint64_t now_ns)
{
    b->up_at_ns = now_ns ? now_ns : 1;
}

static uint64_t next_rand(xfer_backoff *b)
{
    uint64_t x = b->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b->rng = x;
    return x;
}

uint64_t xfer_backoff_lost(xfer_backoff *b, uint64_t now_ns,
                           uint64_t min_ns, uint64_t max_ns)
{
    bool stayed = b->up_at_ns && now_ns - b->up_at_ns >= max_ns;
    b->up_at_ns = 0;
    if (stayed) {
        b->cur_ns = 0;
        return 0;
    }
    if (min_ns == 0)
        min_ns = 1;
    if (max_ns < min_ns)
        max_ns = min_ns;
    uint64_t cur = b->cur_ns == 0 ? min_ns
                   : b->cur_ns > max_ns / 2 ? max_ns
                                            : 2 * b->cur_ns;
    b->cur_ns = cur;
    uint64_t half = cur / 2;
    return cur - half + next_rand(b) % (half + 1);
}
