/*
 * tools/check/seen.c - the sharded visited set of the BFS (see seen.h):
 * open addressing over 128-bit keys, 16 bytes a bucket, one table per
 * shard, claimed without locks.
 *
 * What must stay true:
 *  - a key lives in exactly one shard (the top byte of key[1]), while the
 *    bucket comes from key[0]; a bucket holds key[0] and either key[1] (a
 *    put) or a claim word: a top byte that is neither the shard's nor 0,
 *    the owning entry's (parent, move) and key[1]'s low 16 bits; no word
 *    of a key stored is 0 (norm), so (0, 0) is an empty bucket and a
 *    bucket whose first word is set and second is 0 is being claimed;
 *  - a bucket goes from empty to a key once and for good (linear probing
 *    with no deletes): a claim places a new key by a compare-and-swap of
 *    the first word (0 to key[0]) and then stores its claim word, so two
 *    claims of one key meet in one bucket; an owner is changed by a
 *    compare-and-swap of the claim word, so each displaced owner is named
 *    to exactly one claim; a claim that loses writes nothing;
 *  - the owner of a key is the lowest entry that claimed it, independent
 *    of the order of the claims, and an entry of an earlier level is lower
 *    than any of a later one (node ids grow with the depth): no key is
 *    rewritten after its level, and a claim reads no other entry;
 *  - a table is replaced only by a thread that has stopped the others:
 *    each waits at the start of its next claim (park) or has left the
 *    phase, so nothing reads a table while it grows, and the tables and
 *    their sizes are plain memory;
 *  - a shard's count is short by fewer than CK_SEEN_FLUSH new keys per
 *    claiming thread, and a claim makes room while the count and that
 *    slack would pass three quarters of the table: a table is never full.
 *    One thread's puts take no part in any of this.
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

/* A key's word as stored: never 0, the mark of an empty word. */
static uint64_t norm(uint64_t w)
{
    return w ? w : 1;
}

/* A claimed key: its bucket's second word holds a top byte that is
 * neither the shard's nor 0, the owner's (parent, move) in 40 bits and
 * key[1]'s low 16 bits. */
#define LOW_BITS 16
#define LOW_MASK ((UINT64_C(1) << LOW_BITS) - 1)
#define CLAIM_TAG_BITS 40

static uint64_t claim_tag(const ck_seen_ref *e)
{
    return CK_SEEN_TAG(e->parent, e->move);
}

static uint64_t claim_word(unsigned h, const ck_seen_ref *e)
{
    unsigned top = h == 0xffu ? 0x01u : h ^ 0xffu;
    return ((uint64_t)top << 56) | (claim_tag(e) << LOW_BITS) |
           (norm(e->key[1]) & LOW_MASK);
}

static bool is_claim(uint64_t w1, unsigned h)
{
    return (unsigned)(w1 >> 56) != h;
}

static uint64_t tag_of(uint64_t w1)
{
    return (w1 >> LOW_BITS) & ((UINT64_C(1) << CLAIM_TAG_BITS) - 1);
}

/* Whether second word w1 of a bucket of shard h whose first word is key's
 * holds key: itself, or claimed (key[1]'s low bits: 88 bits with key[0]
 * and the shard). */
static bool holds(uint64_t w1, unsigned h, uint64_t k1)
{
    return w1 == k1 || (is_claim(w1, h) && (w1 & LOW_MASK) == (k1 & LOW_MASK));
}

/* The bucket of key (k0, k1) in shard h's table: the one that holds it, or
 * the empty one where it goes.  No claim runs meanwhile. */
static uint64_t *find(const ck_seen_table *t, unsigned h, uint64_t k0,
                      uint64_t k1)
{
    for (size_t i = k0 & t->mask;; i = (i + 1) & t->mask) {
        uint64_t *b = &t->k[2 * i];
        if (b[0] == 0 || (b[0] == k0 && holds(b[1], h, k1)))
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

/* No claim runs meanwhile. */
static void grow(ck_seen *s, ck_seen_table *t)
{
    size_t mask = 2 * (t->mask + 1) - 1;
    uint64_t *k = table_new(mask + 1);
    for (size_t i = 0; i <= t->mask; i++) {
        const uint64_t *b = &t->k[2 * i];
        if (b[0] == 0)
            continue;
        size_t j = b[0] & mask;
        while (k[2 * j])
            j = (j + 1) & mask;
        k[2 * j] = b[0];
        k[2 * j + 1] = b[1];
    }
    free(t->k);
    atomic_fetch_add(&s->bytes, 16 * (uint64_t)(t->mask + 1));
    t->k = k;
    t->mask = mask;
}

/* How many new keys a shard's count may lack: fewer than CK_SEEN_FLUSH
 * per claiming thread. */
static uint64_t slack_of(const ck_seen *s)
{
    return (uint64_t)s->nloc * CK_SEEN_FLUSH;
}

/* Whether a shard holding n keys, short by at most `slack`, lacks room
 * for one more in a table of mask + 1 buckets. */
static bool over(uint64_t n, uint64_t slack, size_t mask)
{
    return 4 * (n + slack + 1) > 3 * ((uint64_t)mask + 1);
}

static void relax(unsigned *spins)
{
    if (++*spins % 128 == 0)
        sched_yield(); /* for a thread a loaded machine descheduled */
#if defined(__x86_64__) || defined(__i386__)
    else
        __builtin_ia32_pause();
#endif
}

/* Wait while a thread grows a table.  Counted as parked from before the
 * first look at stop to after the last: a thread that sees stop clear and
 * then set again after it stopped counting parks again before it touches
 * a table, so the grower never counts one that is claiming. */
static void park(ck_seen *s)
{
    unsigned spins = 0;
    do {
        atomic_fetch_add(&s->parked, 1);
        while (atomic_load(&s->stop))
            relax(&spins);
        atomic_fetch_sub(&s->parked, 1);
    } while (atomic_load(&s->stop));
}

/* Room in shard h for one more key: stop the other threads (or wait for
 * the one that stopped them first), count the shard exactly, and grow its
 * table while the count and the slack would pass three quarters. */
static void make_room(ck_seen *s, unsigned h)
{
    ck_seen_table *t = &s->tab[h];
    uint64_t slack = slack_of(s);
    for (;;) {
        unsigned clear = 0;
        if (atomic_compare_exchange_strong(&s->stop, &clear, 1))
            break;
        park(s);
        if (!over(atomic_load(&s->sh[h].n), slack, t->mask))
            return; /* the other thread grew it */
    }
    unsigned spins = 0;
    while (atomic_load(&s->parked) + 1 < s->nloc)
        relax(&spins);
    uint64_t n = atomic_load_explicit(&s->sh[h].n, memory_order_relaxed);
    for (unsigned i = 0; i < s->nloc; i++) {
        n += s->loc[i].added[h];
        s->loc[i].added[h] = 0;
    }
    atomic_store_explicit(&s->sh[h].n, n, memory_order_relaxed);
    while (over(n, slack, t->mask))
        grow(s, t);
    atomic_store(&s->stop, 0);
}

void ck_seen_prefetch(const ck_seen *s, const uint64_t key[2])
{
    const ck_seen_table *t = &s->tab[shard_of(key)];
    __builtin_prefetch(&t->k[2 * (norm(key[0]) & t->mask)]);
}

int ck_seen_init(ck_seen *s)
{
    unsigned i;
    memset(s, 0, sizeof *s);
    for (i = 0; i < CK_SEEN_SHARDS; i++) {
        ck_seen_table *t = &s->tab[i];
        t->mask = INIT_BUCKETS - 1;
        atomic_init(&s->sh[i].n, 0);
        t->k = calloc(2 * INIT_BUCKETS, sizeof *t->k);
        if (!t->k)
            goto out_free;
    }
    atomic_init(&s->stop, 0);
    atomic_init(&s->parked, 0);
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
    uint64_t k0 = norm(key[0]), k1 = norm(key[1]);
    uint64_t n = atomic_load_explicit(&s->sh[h].n, memory_order_relaxed);
    if (over(n, 0, t->mask))
        grow(s, t);
    uint64_t *b = find(t, h, k0, k1);
    if (b[0])
        return false;
    b[0] = k0;
    b[1] = k1;
    atomic_store_explicit(&s->sh[h].n, n + 1, memory_order_relaxed);
    return true;
}

/* The integer square root of x. */
static uint64_t isqrt(uint64_t x)
{
    uint64_t r = 0;
    for (uint64_t bit = UINT64_C(1) << 31; bit; bit >>= 1)
        if ((r + bit) * (r + bit) <= x)
            r += bit;
    return r;
}

void ck_seen_begin(ck_seen *s, ck_seen_local *loc, unsigned n,
                   uint64_t expect)
{
    s->loc = loc;
    s->nloc = n;
    atomic_store(&s->stop, 0);
    atomic_store(&s->parked, 0);
    /* Room for a shard's share of the keys expected, and two standard
     * deviations more: a table grown here, on one thread, does not stop
     * the others during the phase. */
    uint64_t e = expect / CK_SEEN_SHARDS;
    uint64_t more = e + 2 * isqrt(e), slack = slack_of(s);
    for (unsigned h = 0; h < CK_SEEN_SHARDS; h++) {
        uint64_t have = atomic_load_explicit(&s->sh[h].n,
                                             memory_order_relaxed);
        while (over(have + more, slack, s->tab[h].mask))
            grow(s, &s->tab[h]);
    }
}

void ck_seen_leave(ck_seen *s)
{
    atomic_fetch_add(&s->parked, 1);
}

void ck_seen_end(ck_seen *s)
{
    for (unsigned i = 0; i < s->nloc; i++)
        for (unsigned h = 0; h < CK_SEEN_SHARDS; h++) {
            atomic_fetch_add_explicit(&s->sh[h].n, s->loc[i].added[h],
                                      memory_order_relaxed);
            s->loc[i].added[h] = 0;
        }
    s->loc = NULL;
    s->nloc = 0;
}

/* The words of a bucket that other threads claim in. */
static uint64_t load_word(uint64_t *w)
{
    return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

static bool cas_word(uint64_t *w, uint64_t *expect, uint64_t v)
{
    return __atomic_compare_exchange_n(w, expect, v, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}

bool ck_seen_claim(ck_seen *s, ck_seen_local *me, const ck_seen_ref *e,
                   uint64_t *displaced)
{
    unsigned h = shard_of(e->key);
    ck_seen_table *t = &s->tab[h];
    ck_seen_shard *sh = &s->sh[h];
    uint64_t k0 = norm(e->key[0]), k1 = norm(e->key[1]);
    *displaced = CK_SEEN_NONE;
    if (atomic_load_explicit(&s->stop, memory_order_relaxed))
        park(s);
    if (over(atomic_load_explicit(&sh->n, memory_order_relaxed),
             slack_of(s), t->mask))
        make_room(s, h);
    for (size_t i = k0 & t->mask;; i = (i + 1) & t->mask) {
        uint64_t *b = &t->k[2 * i];
        uint64_t w0 = load_word(&b[0]);
        if (w0 == 0 && cas_word(&b[0], &w0, k0)) {
            __atomic_store_n(&b[1], claim_word(h, e), __ATOMIC_RELEASE);
            if (++me->added[h] == CK_SEEN_FLUSH) {
                atomic_fetch_add_explicit(&sh->n, CK_SEEN_FLUSH,
                                          memory_order_relaxed);
                me->added[h] = 0;
            }
            return true;
        }
        if (w0 != k0)
            continue; /* another key's (w0 is what the swap found) */
        uint64_t w1;
        unsigned spins = 0;
        while ((w1 = load_word(&b[1])) == 0)
            relax(&spins); /* a claim is placing it */
        if (!holds(w1, h, k1))
            continue;
        while (is_claim(w1, h) && claim_tag(e) < tag_of(w1))
            if (cas_word(&b[1], &w1, claim_word(h, e))) {
                *displaced = tag_of(w1);
                return true;
            }
        return false;
    }
}

uint64_t ck_seen_count(const ck_seen *s)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < CK_SEEN_SHARDS; i++)
        n += atomic_load_explicit(&s->sh[i].n, memory_order_relaxed);
    return n;
}

uint64_t ck_seen_bytes(const ck_seen *s)
{
    return atomic_load(&s->bytes);
}
