/*
 * fsm/idmap.c - open addressing, linear probing, backward-shift delete.
 *
 * Invariant: every key sits at or after its home bucket with no empty bucket
 * in between (so a probe stops at the first empty bucket), and the load
 * never exceeds 1/2.
 */
#include "idmap.h"

#include <assert.h>
#include <string.h>

#include "util.h"

int xfer_idmap_init(xfer_idmap *m, uint32_t cap, const xfer_allocator *a)
{
    memset(m, 0, sizeof *m);
    if (cap == 0 || cap > (1u << 30))
        return XFER_ERR_INVALID_ARG;
    uint32_t buckets = 2;
    while (buckets < 2 * cap)
        buckets <<= 1;
    m->keys = xfer_util_calloc(a, buckets, sizeof *m->keys);
    m->vals = xfer_util_calloc(a, buckets, sizeof *m->vals);
    if (!m->keys || !m->vals) {
        xfer_idmap_clear(m, a);
        return XFER_ERR_NOMEM;
    }
    m->mask = buckets - 1;
    m->cap = cap;
    return 0;
}

void xfer_idmap_clear(xfer_idmap *m, const xfer_allocator *a)
{
    xfer_util_free(a, m->keys);
    xfer_util_free(a, m->vals);
    memset(m, 0, sizeof *m);
}

static uint32_t home(const xfer_idmap *m, uint64_t id)
{
    return (uint32_t)xfer_util_mix64(id) & m->mask;
}

static bool find(const xfer_idmap *m, uint64_t id, uint32_t *at)
{
    uint32_t i = home(m, id);
    while (m->keys[i]) {
        if (m->keys[i] == id) {
            *at = i;
            return true;
        }
        i = (i + 1) & m->mask;
    }
    *at = i;
    return false;
}

bool xfer_idmap_get(const xfer_idmap *m, uint64_t id, uint32_t *val)
{
    uint32_t at;
    if (id == 0 || id > m->max_id || !m->keys || !find(m, id, &at))
        return false;
    *val = m->vals[at];
    return true;
}

void xfer_idmap_put(xfer_idmap *m, uint64_t id, uint32_t val)
{
    uint32_t at;
    assert(id != 0);
    if (!find(m, id, &at)) {
        assert(m->n < m->cap);
        m->keys[at] = id;
        m->n++;
        if (id > m->max_id)
            m->max_id = id;
    }
    m->vals[at] = val;
}

bool xfer_idmap_del(xfer_idmap *m, uint64_t id)
{
    uint32_t i;
    if (id == 0 || id > m->max_id || !m->keys || !find(m, id, &i))
        return false;
    /* Backward shift: pull later members of the probe run into the hole
     * when their home bucket does not lie cyclically in (hole, j]. */
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & m->mask;
        if (!m->keys[j])
            break;
        uint32_t h = home(m, m->keys[j]);
        bool stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
        if (stays)
            continue;
        m->keys[i] = m->keys[j];
        m->vals[i] = m->vals[j];
        i = j;
    }
    m->keys[i] = 0;
    m->n--;
    return true;
}

void xfer_idmap_reset(xfer_idmap *m)
{
    if (m->keys)
        memset(m->keys, 0, ((size_t)m->mask + 1) * sizeof *m->keys);
    m->n = 0;
    m->max_id = 0;
}

size_t xfer_idmap_bytes_per_entry(void)
{
    return 2 * (sizeof(uint64_t) + sizeof(uint32_t));
}
