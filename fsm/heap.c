/*
 * fsm/heap.c - binary min-heap keyed by (deadline, set order).
 *
 * Invariant: for every i > 0, key(heap[parent(i)]) <= key(heap[i]) with
 * ties ordered by `tie`; pos[heap[i]] == i + 1 for every i < n.
 */
#include "heap.h"

#include <assert.h>
#include <string.h>

#include "util.h"

int xfer_heap_init(xfer_heap *h, uint32_t cap, const xfer_allocator *a)
{
    memset(h, 0, sizeof *h);
    h->heap = xfer_util_calloc(a, cap ? cap : 1, sizeof *h->heap);
    h->pos = xfer_util_calloc(a, cap ? cap : 1, sizeof *h->pos);
    h->key = xfer_util_calloc(a, cap ? cap : 1, sizeof *h->key);
    h->tie = xfer_util_calloc(a, cap ? cap : 1, sizeof *h->tie);
    if (!h->heap || !h->pos || !h->key || !h->tie) {
        xfer_heap_clear(h, a);
        return XFER_ERR_NOMEM;
    }
    h->cap = cap;
    return 0;
}

void xfer_heap_clear(xfer_heap *h, const xfer_allocator *a)
{
    xfer_util_free(a, h->heap);
    xfer_util_free(a, h->pos);
    xfer_util_free(a, h->key);
    xfer_util_free(a, h->tie);
    memset(h, 0, sizeof *h);
}

static bool less(const xfer_heap *h, uint32_t a, uint32_t b)
{
    if (h->key[a] != h->key[b])
        return h->key[a] < h->key[b];
    return h->tie[a] < h->tie[b];
}

static void place(xfer_heap *h, uint32_t i, uint32_t slot)
{
    h->heap[i] = slot;
    h->pos[slot] = i + 1;
}

static void sift_up(xfer_heap *h, uint32_t i)
{
    uint32_t slot = h->heap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!less(h, slot, h->heap[p]))
            break;
        place(h, i, h->heap[p]);
        i = p;
    }
    place(h, i, slot);
}

static void sift_down(xfer_heap *h, uint32_t i)
{
    uint32_t slot = h->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && less(h, h->heap[c + 1], h->heap[c]))
            c++;
        if (!less(h, h->heap[c], slot))
            break;
        place(h, i, h->heap[c]);
        i = c;
    }
    place(h, i, slot);
}

void xfer_heap_set(xfer_heap *h, uint32_t slot, uint64_t deadline)
{
    assert(slot < h->cap);
    h->key[slot] = deadline;
    h->tie[slot] = h->seq++;
    if (h->pos[slot]) {
        sift_up(h, h->pos[slot] - 1);
        sift_down(h, h->pos[slot] - 1);
        return;
    }
    assert(h->n < h->cap);
    place(h, h->n, slot);
    h->n++;
    sift_up(h, h->n - 1);
}

void xfer_heap_remove(xfer_heap *h, uint32_t slot)
{
    if (slot >= h->cap || !h->pos[slot])
        return;
    uint32_t i = h->pos[slot] - 1;
    h->pos[slot] = 0;
    h->n--;
    if (i == h->n)
        return;
    uint32_t moved = h->heap[h->n];
    place(h, i, moved);
    sift_up(h, i);
    sift_down(h, h->pos[moved] - 1);
}

bool xfer_heap_contains(const xfer_heap *h, uint32_t slot)
{
    return slot < h->cap && h->pos[slot] != 0;
}

bool xfer_heap_peek(const xfer_heap *h, uint32_t *slot, uint64_t *deadline)
{
    if (h->n == 0)
        return false;
    *slot = h->heap[0];
    *deadline = h->key[h->heap[0]];
    return true;
}

uint64_t xfer_heap_min(const xfer_heap *h)
{
    return h->n ? h->key[h->heap[0]] : UINT64_MAX;
}
