/*
 * tools/check/seen.c - the sharded visited set of the BFS (see seen.h):
 * open addressing over 128-bit keys, 16 bytes a bucket, one table and one
 * lock per shard.
 *
 * What must stay true: a key lives in exactly one shard (the top byte of
 * key[1]), while the bucket comes from key[0]; a bucket holds key[0] and
 * either key[1] (a put) or a claim word: a top byte that is not the
 * shard's, the owning entry's (parent, move) and key[1]'s low 16 bits; a
 * claim holds its shard's lock for the whole probe, insert or change of
 * owner, and a table grows under that lock (a spinlock, held for one
 * probe; a waiter yields its core now and then, for a holder that a
 * loaded machine descheduled or one that is growing its table); the
 * owner of a key is the lowest entry that claimed it, independent of the
 * order of the claims, and an entry of an earlier level is lower than
 * any of a later one (node ids grow with the depth).  A claim reads no
 * other entry and no key is ever rewritten after its level: the caller
 * learns which entry a claim displaced.  One thread's puts take no lock.
 * A prefetch only reads the table's address and size (atomically: a
 * claim may be growing it).
 */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "seen.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define INIT_BUCKETS 256u
#define HUGE_PAGE (UINT64_C(2) << 20)

static unsigned shard_of(const uint64_t key[2])
{
    return (unsigned)(key[1] >> 56);
}

/* A claimed key: its bucket's second word holds a top byte that is not
 * the shard's, the owner's (parent, move) in 40 bits and key[1]'s low 16
 * bits. */
#define LOW_BITS 16
#define LOW_MASK ((UINT64_C(1) << LOW_BITS) - 1)
#define CLAIM_TAG_BITS 40

static uint64_t claim_tag(const ck_seen_ref *e)
{
    return CK_SEEN_TAG(e->parent, e->move);
}

static uint64_t claim_word(unsigned h, const ck_seen_ref *e)
{
    return ((uint64_t)(h ^ 0xffu) << 56) | (claim_tag(e) << LOW_BITS) |
           (e->key[1] & LOW_MASK);
}

static bool is_claim(uint64_t w1, unsigned h)
{
    return (unsigned)(w1 >> 56) != h;
}

static uint64_t tag_of(uint64_t w1)
{
    return (w1 >> LOW_BITS) & ((UINT64_C(1) << CLAIM_TAG_BITS) - 1);
}

/* Whether bucket (w0, w1) of shard h holds key: itself, or claimed
 * (key[0] and key[1]'s low bits: 88 bits with the shard). */
static bool holds(uint64_t w0, uint64_t w1, unsigned h, const uint64_t key[2])
{
    return w0 == key[0] &&
           (w1 == key[1] ||
            (is_claim(w1, h) && (w1 & LOW_MASK) == (key[1] & LOW_MASK)));
}

/* The bucket of key in shard h's table: the one that holds it, or the
 * empty one where it goes. */
static uint64_t *find(const ck_seen_table *t, unsigned h, const uint64_t key[2])
{
    for (size_t i = key[0] & t->mask;; i = (i + 1) & t->mask) {
        uint64_t *b = &t->k[2 * i];
        if ((b[0] == 0 && b[1] == 0) || holds(b[0], b[1], h, key))
            return b;
    }
}

/* A zeroed table of `buckets` buckets (a power of two), zeroed here by
 * writing it: calloc's fresh pages would be read
 * first (the probes of grow and claim) as the kernel's shared zero page,
 * then written, and that write fault flushes the page from the TLB of
 * every core the search runs on (2.8 % of a two-thread search at S = 1,
 * budget 6, against nothing on one thread).  A table of 2 MB or more asks
 * for huge pages too, where the kernel lends them on request: a probe is
 * a random access. */
static uint64_t *table_new(size_t buckets)
{
    size_t n = 16 * buckets;
    uint64_t *k = n < HUGE_PAGE ? malloc(n) : aligned_alloc(HUGE_PAGE, n);
    if (!k)
        abort();
#ifdef MADV_HUGEPAGE
    if (n >= HUGE_PAGE)
        (void)madvise(k, n, MADV_HUGEPAGE); /* a hint: may be refused */
#endif
    memset(k, 0, n);
    return k;
}

static void grow(ck_seen *s, ck_seen_table *t)
{
    size_t mask = 2 * (t->mask + 1) - 1;
    uint64_t *k = table_new(mask + 1);
    for (size_t i = 0; i <= t->mask; i++) {
        const uint64_t *b = &t->k[2 * i];
        if (b[0] == 0 && b[1] == 0)
            continue;
        size_t j = b[0] & mask;
        while (k[2 * j] || k[2 * j + 1])
            j = (j + 1) & mask;
        k[2 * j] = b[0];
        k[2 * j + 1] = b[1];
    }
    free(t->k);
    atomic_fetch_add(&s->bytes, 16 * (uint64_t)(t->mask + 1));
    /* Atomic for ck_seen_prefetch, which reads them without the lock. */
    __atomic_store_n(&t->k, k, __ATOMIC_RELAXED);
    __atomic_store_n(&t->mask, mask, __ATOMIC_RELAXED);
}

/* Test and test-and-set: a waiter reads the line until it looks free. */
static void lock(ck_seen_shard *t)
{
    unsigned spins = 0;
    while (atomic_exchange_explicit(&t->busy, true, memory_order_acquire)) {
        while (atomic_load_explicit(&t->busy, memory_order_relaxed)) {
            if (++spins % 128 == 0)
                sched_yield();
#if defined(__x86_64__) || defined(__i386__)
            else
                __builtin_ia32_pause();
#endif
        }
    }
}

static void unlock(ck_seen_shard *t)
{
    atomic_store_explicit(&t->busy, false, memory_order_release);
}

void ck_seen_prefetch(const ck_seen *s, const uint64_t key[2])
{
    const ck_seen_table *t = &s->tab[shard_of(key)];
    const uint64_t *k = __atomic_load_n(&t->k, __ATOMIC_RELAXED);
    size_t mask = __atomic_load_n(&t->mask, __ATOMIC_RELAXED);
    /* A table growing meanwhile makes this a useless hint, never a
     * fault: a prefetch does not trap. */
    __builtin_prefetch(&k[2 * (key[0] & mask)]);
}

int ck_seen_init(ck_seen *s)
{
    unsigned i;
    memset(s, 0, sizeof *s);
    for (i = 0; i < CK_SEEN_SHARDS; i++) {
        ck_seen_table *t = &s->tab[i];
        t->mask = INIT_BUCKETS - 1;
        atomic_init(&s->sh[i].busy, false);
        t->k = calloc(2 * INIT_BUCKETS, sizeof *t->k);
        if (!t->k)
            goto out_free;
    }
    atomic_store(&s->bytes, 16ull * INIT_BUCKETS * CK_SEEN_SHARDS);
    return 0;
out_free:
    while (i-- > 0)
        free(s->tab[i].k);
    return -1;
}

void ck_seen_free(ck_seen *s)
{
    for (unsigned i = 0; i < CK_SEEN_SHARDS; i++)
        free(s->tab[i].k);
    memset(s, 0, sizeof *s);
}

bool ck_seen_put(ck_seen *s, const uint64_t key[2])
{
    unsigned h = shard_of(key);
    ck_seen_table *t = &s->tab[h];
    ck_seen_shard *l = &s->sh[h];
    if (4 * (l->n + 1) > 3 * (t->mask + 1))
        grow(s, t);
    uint64_t *b = find(t, h, key);
    if (b[0] || b[1])
        return false;
    b[0] = key[0];
    b[1] = key[1];
    l->n++;
    return true;
}

bool ck_seen_claim(ck_seen *s, const ck_seen_ref *e, uint64_t *displaced)
{
    unsigned h = shard_of(e->key);
    ck_seen_table *t = &s->tab[h];
    ck_seen_shard *l = &s->sh[h];
    bool mine = false;
    *displaced = CK_SEEN_NONE;
    lock(l);
    if (4 * (l->n + 1) > 3 * (t->mask + 1))
        grow(s, t);
    uint64_t *b = find(t, h, e->key);
    if (b[0] == 0 && b[1] == 0) {
        b[0] = e->key[0];
        b[1] = claim_word(h, e);
        l->n++;
        mine = true;
    } else if (is_claim(b[1], h) && claim_tag(e) < tag_of(b[1])) {
        *displaced = tag_of(b[1]);
        b[1] = claim_word(h, e);
        mine = true;
    }
    unlock(l);
    return mine;
}

uint64_t ck_seen_count(const ck_seen *s)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < CK_SEEN_SHARDS; i++)
        n += s->sh[i].n;
    return n;
}

uint64_t ck_seen_bytes(const ck_seen *s)
{
    return atomic_load(&s->bytes);
}
