/*
 * fsm/idmap.c - open addressing, linear probing over buckets that hold key
 * and value together, backward-shift delete.
 *
 * Invariant: every key sits at or after its home bucket (cyclically, over
 * nb buckets) with no empty bucket in between, so a probe stops at the
 * first empty bucket; n <= cap < nb, so there always is one.  A full
 * bucket's `home` is its key's home.  The home of
 * an id is a line chosen by its run (id >> XFER_IDMAP_RUN_BITS) plus its
 * place in the run: a line holds a run's ids in order, and probing walks on
 * into the next line only on a collision of runs.
 */
#include "idmap.h"

#include <assert.h>
#include <string.h>

#include "util.h" /* the injected allocator */

#define LINE 64u /* the alignment of the bucket array */

_Static_assert(sizeof(xfer_idmap_bucket) * XFER_IDMAP_RUN == LINE,
               "a run of ids fills one cache line");

int xfer_idmap_init(xfer_idmap *m, uint32_t cap, const xfer_allocator *a)
{
    memset(m, 0, sizeof *m);
    if (cap == 0 || cap > (1u << 30))
        return XFER_ERR_INVALID_ARG;
    /* 1.5 buckets per entry (load <= 2/3), in whole lines; always more
     * buckets than entries. */
    uint64_t nb = (uint64_t)cap + (cap + 1) / 2;
    nb = (nb + XFER_IDMAP_RUN - 1) & ~(uint64_t)(XFER_IDMAP_RUN - 1);
    void *raw = xfer_util_calloc(a, 1, nb * sizeof *m->b + LINE - 1);
    if (!raw)
        return XFER_ERR_NOMEM;
    m->raw = raw;
    m->b = (xfer_idmap_bucket *)(((uintptr_t)raw + LINE - 1) &
                                 ~(uintptr_t)(LINE - 1));
    m->nb = (uint32_t)nb;
    m->cap = cap;
    return 0;
}

void xfer_idmap_clear(xfer_idmap *m, const xfer_allocator *a)
{
    xfer_util_free(a, m->raw);
    memset(m, 0, sizeof *m);
}

uint32_t xfer_idmap_home(const xfer_idmap *m, uint64_t id)
{
    /* Fibonacci hashing of the run: frac(run / phi), whose points for
     * any window of consecutive runs are spread almost evenly (the three
     * distance theorem), so the runs of the ids in flight seldom share a
     * line; its high half times the line count picks a line in
     * [0, lines) without a power-of-two size. */
    uint64_t lines = m->nb >> XFER_IDMAP_RUN_BITS;
    uint64_t h = ((id >> XFER_IDMAP_RUN_BITS) * 0x9e3779b97f4a7c15ull) >> 32;
    uint32_t line = (uint32_t)((h * lines) >> 32);
    return (line << XFER_IDMAP_RUN_BITS) |
           (uint32_t)(id & (XFER_IDMAP_RUN - 1));
}

/* The bucket of id (true), or the empty bucket where it would go, probing
 * from its home h. */
static bool find_from(const xfer_idmap *m, uint64_t id, uint32_t h,
                      uint32_t *at)
{
    uint32_t i = h;
    for (;;) {
        uint64_t k = m->b[i].key;
        if (k == id || k == 0) {
            *at = i;
            return k == id;
        }
        if (++i == m->nb)
            i = 0;
    }
}

static bool find(const xfer_idmap *m, uint64_t id, uint32_t *at)
{
    return find_from(m, id, xfer_idmap_home(m, id), at);
}

bool xfer_idmap_get(const xfer_idmap *m, uint64_t id, uint32_t *val)
{
    uint32_t at;
    if (id == 0 || id > m->max_id || !m->b || !find(m, id, &at))
        return false;
    *val = m->b[at].val;
    return true;
}

void xfer_idmap_put(xfer_idmap *m, uint64_t id, uint32_t val)
{
    uint32_t at, h = xfer_idmap_home(m, id);
    assert(id != 0);
    if (!find_from(m, id, h, &at)) {
        assert(m->n < m->cap);
        m->b[at].key = id;
        m->b[at].home = h;
        m->n++;
        if (id > m->max_id)
            m->max_id = id;
    }
    m->b[at].val = val;
}

/* Empty bucket i (full), pulling later members of its probe run into the
 * hole when their home does not lie cyclically in (hole, j]. */
static void erase(xfer_idmap *m, uint32_t i)
{
    uint32_t j = i;
    for (;;) {
        if (++j == m->nb)
            j = 0;
        if (!m->b[j].key)
            break;
        uint32_t h = m->b[j].home;
        bool stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
        if (stays)
            continue;
        m->b[i] = m->b[j];
        i = j;
    }
    m->b[i] = (xfer_idmap_bucket){0};
    m->n--;
}

bool xfer_idmap_del(xfer_idmap *m, uint64_t id)
{
    uint32_t at;
    if (id == 0 || id > m->max_id || !m->b || !find(m, id, &at))
        return false;
    erase(m, at);
    return true;
}

bool xfer_idmap_del_if(xfer_idmap *m, uint64_t id, uint32_t val)
{
    uint32_t at;
    if (id == 0 || id > m->max_id || !m->b || !find(m, id, &at) ||
        m->b[at].val != val)
        return false;
    erase(m, at);
    return true;
}

void xfer_idmap_reset(xfer_idmap *m)
{
    if (m->b)
        memset(m->b, 0, (size_t)m->nb * sizeof *m->b);
    m->n = 0;
    m->max_id = 0;
}

size_t xfer_idmap_bytes_per_entry(void)
{
    return sizeof(xfer_idmap_bucket) * 3 / 2;
}
