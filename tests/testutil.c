/*
 * tests/testutil.c - see testutil.h.
 */
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

uint64_t tu_seed(const char *test_name, uint64_t fallback)
{
    const char *env = getenv("XFER_SEED");
    uint64_t seed = fallback;
    if (env && *env)
        seed = strtoull(env, NULL, 0);
    printf("%s: seed %" PRIu64 " (set XFER_SEED to repeat)\n", test_name,
           seed);
    fflush(stdout);
    return seed;
}

uint32_t tu_crc32c(const void *buf, size_t n)
{
    const uint8_t *p = buf;
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int b = 0; b < 8; b++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

uint64_t tu_rand(uint64_t *state)
{
    uint64_t x = *state ? *state : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}

static void *ta_alloc(void *ud, size_t size)
{
    tu_alloc *ta = ud;
    ta->calls++;
    if (ta->fail_after >= 0 && ta->calls > ta->fail_after &&
        (!ta->fail_once || ta->calls == ta->fail_after + 1)) {
        ta->failures++;
        return NULL;
    }
    void *p = malloc(size ? size : 1);
    if (p)
        ta->live++;
    return p;
}

static void ta_free(void *ud, void *p)
{
    tu_alloc *ta = ud;
    if (!p)
        return;
    ta->live--;
    free(p);
}

void tu_alloc_init(tu_alloc *ta, long fail_after)
{
    memset(ta, 0, sizeof *ta);
    ta->fail_after = fail_after;
}

xfer_allocator tu_allocator(tu_alloc *ta)
{
    return (xfer_allocator){.alloc = ta_alloc, .free = ta_free, .ud = ta};
}

static void trace_fn(void *ud, const xfer_trace_rec *rec)
{
    tu_trace *t = ud;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        xfer_trace_rec *r = realloc(t->recs, cap * sizeof *r);
        if (!r)
            abort();
        t->recs = r;
        t->cap = cap;
    }
    t->recs[t->n++] = *rec;
}

xfer_trace_sink tu_trace_sink(tu_trace *t)
{
    return (xfer_trace_sink){.fn = trace_fn, .ud = t};
}

void tu_trace_free(tu_trace *t)
{
    free(t->recs);
    memset(t, 0, sizeof *t);
}

size_t tu_trace_count(const tu_trace *t, int machine, int verdict)
{
    size_t c = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->recs[i].machine == machine &&
            (verdict < 0 || t->recs[i].verdict == verdict))
            c++;
    return c;
}
