/*
 * tools/check/search.c - the ways of exploring the world: exhaustive
 * breadth-first search over canonical states, seeded random / swarm walks,
 * and shrinking a failing walk.
 *
 * What must stay true:
 *  - BFS visits states in order of depth and stops at the first violation,
 *    so its counterexample is a shortest one (up to the symmetry of shards);
 *  - a state is expanded from its saved encoding, and a counterexample is
 *    rebuilt by replaying move indices from the initial state (path.c), so
 *    what is printed is exactly what the machines do;
 *  - every move runs under the guard (guard.c): an assertion inside a
 *    machine is reported as a violation of its own kind instead of killing
 *    the checker;
 *  - the BFS gives the same counts, verdict and counterexample on any
 *    number of threads: the states of a level, their node ids and order
 *    are those one thread finds (the lowest (parent, move) owns a state,
 *    seen.h), and the lowest violation of a level wins, with the counts
 *    one thread has when it stops there.  Threads share only the visited
 *    set (claimed without locks, seen.h), the counters they take work
 *    from and the lowest violation tag (atomics); each writes its own
 *    chunks of the next level and their entries, and notes the entries
 *    its claims displaced; between levels one thread marks those dead
 *    (each found by its (parent, move): a job's entries are in that
 *    order) and numbers the states (up to 88 of a key's 128 bits tell
 *    claimed keys apart: seen.h);
 *  - on one thread the BFS is the plain one: keys put without a lock or
 *    an entry, a level in one buffer, a node numbered when it is found,
 *    so it costs what a search written for one thread costs.
 */
#include "search.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "canon.h"
#include "guard.h"
#include "level.h"
#include "monitor.h"
#include "path.h"
#include "seen.h"
#include "step.h"
#include "world.h"
#include "xfer/xfer.h"

/* The library's monotonic clock, in seconds (for rates). */
static double now_s(void)
{
    return (double)xfer_clock_monotonic(NULL) / 1e9;
}

/* CPU seconds of the process, all threads (the rate per core). */
static double cpu_s(void)
{
    return (double)clock() / CLOCKS_PER_SEC;
}

/* ---------------------------------------------------------------------- */
/* Breadth-first search, level by level on one or more threads             */
/* ---------------------------------------------------------------------- */

/* States per chunk on several threads: a chunk's delta chain starts from
 * nothing, so any thread decodes it alone; small enough to share a level
 * out evenly, large enough that the full first state costs little.  On
 * one thread a level is one chunk, as it is one buffer in a plain BFS. */
#define CHUNK_STATES 1024u
_Static_assert(CK_MAX_MOVES <= CK_SEEN_MOVES, "a claim holds a move in 8 bits");
#define NO_TAG UINT64_MAX

typedef struct node {
    uint32_t parent;
    uint16_t move;
    uint16_t depth;
} node;

/* States of one level, in the order found.  On several threads, e[i] is
 * state i's entry in the visited set until the level is numbered; then
 * dead[i] says that state i was found first by a move earlier in the
 * order (on another thread, later in time): it stays in the chain as the
 * base of the next, and is not expanded. */
typedef struct lchunk {
    ck_level lv;     /* lv.first: node id of the first live state */
    ck_seen_ref *e;  /* one per state (several threads), else NULL */
    uint8_t *dead;   /* NULL: none */
    size_t live;
} lchunk;

typedef struct clist {
    lchunk **v;
    size_t n, cap;
} clist;

/* What expanding one chunk of the current level gave. */
typedef struct job {
    clist out; /* the chunks of the next level, in order */
    size_t lo, hi; /* once gathered: b->next.v[lo, hi) */
    uint64_t transitions, leaves;
    bool bounded;
} job;

/* The first violation one thread found. */
typedef struct viol {
    uint64_t tag;
    size_t job;
    int inv;
    char what[256];
    uint32_t id;   /* the node the path leads to */
    uint16_t last; /* then this move, or UINT16_MAX */
    bool liveness;
} viol;

struct bfs;

typedef struct worker {
    struct bfs *b;
    unsigned idx;
    ck_world w;
    ck_lreader rd;
    uint8_t *tmp, *tmp2;
    ck_layout pl;        /* layout of the state being expanded */
    const uint8_t *held; /* the encoding the machines hold, or NULL */
    ck_layout hl;        /* its layout */
    ck_parts pp, cp;     /* its cached hashes; a child's */
    uint8_t *scratch;    /* several threads: where the next chunk is */
    size_t scratch_cap;  /* built (close_chunk) */
    job counts;          /* of the chunk being expanded (not shared, so
                          * no cache line bounces between threads) */
    uint64_t *gone;      /* several threads: the entries this thread's */
    size_t ngone, gcap;  /* claims displaced in this level (their tags) */
    viol v;
    pthread_t th;
} worker;

typedef struct bfs {
    const ck_config *cfg;
    ck_outcome *out;
    unsigned nthreads;
    bool shared; /* claims by entry (several threads), not plain puts */
    ck_seen seen;
    ck_seen_local *loc; /* several threads: each one's part of seen */
    node *nodes;
    size_t nn, ncap;
    clist cur, next;
    uint64_t prev_live; /* states of the level before cur */
    job *jobs;
    size_t njobs;
    uint16_t depth;
    uint8_t *spare;               /* one thread: the buffer of the level */
    size_t spare_cap;             /* before last, to hold the next one */
    uint64_t fixed_mem;           /* this level, nodes: known at its start */
    _Atomic size_t at;            /* the next job or chunk to take */
    _Atomic uint64_t vtag;        /* the lowest violation tag so far */
    _Atomic uint64_t queued_mem;  /* bytes of the next level so far */
    _Atomic uint64_t peak_mem;
    _Atomic bool oom;
    worker *wk;
} bfs;

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        abort();
    return p;
}

static void clist_push(clist *l, lchunk *c)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = c;
}

static void chunk_free(lchunk *c)
{
    ck_level_free(&c->lv);
    free(c->e);
    free(c->dead);
    free(c);
}

static void clist_clear(clist *l)
{
    for (size_t i = 0; i < l->n; i++)
        chunk_free(l->v[i]);
    l->n = 0;
}

/* Room for n more nodes. */
static void nodes_reserve(bfs *b, size_t n)
{
    if (b->nn + n <= b->ncap)
        return;
    while (b->nn + n > b->ncap)
        b->ncap = b->ncap ? 2 * b->ncap : 4096;
    b->nodes = xrealloc(b->nodes, b->ncap * sizeof *b->nodes);
}

/* The path to node id (then `last` if not UINT16_MAX). */
static void path_to(const bfs *b, uint32_t id, uint16_t last, bool liveness,
                    ck_path *p)
{
    size_t len = 0;
    for (uint32_t i = id; i != UINT32_MAX; i = b->nodes[i].parent)
        len++;
    len--; /* the root has no move */
    p->n = 0;
    for (size_t i = 0; i < len; i++)
        ck_path_push(p, 0);
    size_t at = len;
    for (uint32_t i = id; b->nodes[i].parent != UINT32_MAX;
         i = b->nodes[i].parent)
        p->c[--at] = b->nodes[i].move;
    if (last != UINT16_MAX)
        ck_path_push(p, last);
    p->liveness = liveness;
}

/* A violation at tag (job j): kept when it is the thread's lowest, and
 * published so that every thread stops past it.  Always true. */
static bool found(worker *k, uint64_t tag, size_t j, uint32_t id,
                  uint16_t last, bool liveness)
{
    if (tag < k->v.tag) {
        k->v = (viol){tag, j, k->w.v.inv, {0}, id, last, liveness};
        memcpy(k->v.what, k->w.v.what, sizeof k->v.what);
    }
    uint64_t t = atomic_load(&k->b->vtag);
    while (tag < t && !atomic_compare_exchange_weak(&k->b->vtag, &t, tag))
        ;
    return true;
}

static void check_len(size_t len)
{
    if (len > CK_SAVE_MAX) {
        fprintf(stderr, "xfer-check: state larger than %d bytes\n",
                CK_SAVE_MAX);
        abort();
    }
}

/* --paranoid: the delta save and the cached hashes must match a full
 * save and hashes computed from scratch (checks ck_step_touches). */
static void paranoid(worker *k, size_t len, const uint64_t key[2])
{
    ck_layout l = k->w.lay;
    size_t n = ck_world_save(&k->w, k->tmp2, CK_SAVE_MAX);
    uint64_t k2[2];
    check_len(n);
    ck_canon_parts(&k->cp, &k->w, k->tmp2, CK_M_ALL);
    ck_canon_key(&k->w, &k->cp, k->tmp2, n, k2);
    if (n != len || memcmp(k->tmp, k->tmp2, n) || k2[0] != key[0] ||
        k2[1] != key[1]) {
        fprintf(stderr, "xfer-check: --paranoid: a move touched a machine "
                "ck_step_touches() did not name\n");
        abort();
    }
    k->w.lay = l;
}

/* A chunk takes no more states: give back the memory it will not use
 * (one thread keeps its one buffer a level whole, to reuse it two levels
 * on, as a plain BFS does, not to touch fresh pages for every level; on
 * several, close_chunk already did, but for the root). */
static void seal(const bfs *b, lchunk *c)
{
    free(c->lv.prev);
    c->lv.prev = NULL;
    if (!b->shared)
        return;
    c->lv.buf = xrealloc(c->lv.buf, c->lv.len);
    c->lv.cap = c->lv.len;
}

/* One thread: the level expanded last is done; keep its buffer. */
static void keep_spare(bfs *b)
{
    if (b->shared || b->cur.n == 0)
        return;
    ck_level *l = &b->cur.v[0]->lv;
    free(b->spare);
    b->spare = l->buf;
    b->spare_cap = l->cap;
    l->buf = NULL;
    l->cap = 0;
}

/* Bytes of a chunk's entries. */
static uint64_t entry_bytes(const lchunk *c)
{
    return c->e ? CHUNK_STATES * sizeof *c->e : 0;
}

/* A chunk of j's output with room for one more state (one chunk on one
 * thread). */
/* Several threads: chunk c (built in k's scratch buffer) takes no more
 * states; it gets a buffer of its exact length and the scratch goes back
 * to k.  So a chunk's memory is one allocation of one size, never grown
 * or shrunk in place, which left holes that a level after it could not
 * fill (peak RSS 36 % above the base at S = 2 budget 3). */
static void close_chunk(worker *k, lchunk *c)
{
    uint8_t *own = xrealloc(NULL, c->lv.len);
    memcpy(own, c->lv.buf, c->lv.len);
    free(k->scratch);
    k->scratch = c->lv.buf;
    k->scratch_cap = c->lv.cap;
    c->lv.buf = own;
    c->lv.cap = c->lv.len;
    free(c->lv.prev);
    c->lv.prev = NULL;
    atomic_fetch_add(&k->b->queued_mem, c->lv.cap + entry_bytes(c));
}

static lchunk *out_chunk(worker *k, job *j)
{
    bfs *b = k->b;
    lchunk *c = j->out.n ? j->out.v[j->out.n - 1] : NULL;
    if (c && (!b->shared || c->lv.n < CHUNK_STATES))
        return c;
    if (c)
        close_chunk(k, c);
    c = calloc(1, sizeof *c);
    if (!c)
        abort();
    if (b->shared) {
        c->e = xrealloc(NULL, CHUNK_STATES * sizeof *c->e);
        c->lv.buf = k->scratch;
        c->lv.cap = k->scratch_cap;
        k->scratch = NULL;
        k->scratch_cap = 0;
    } else if (b->spare) {
        c->lv.buf = b->spare;
        c->lv.cap = b->spare_cap;
        b->spare = NULL;
    }
    clist_push(&j->out, c);
    return c;
}

/* Whether move m from node id finds key first in this search (so far):
 * on one thread the key is new, and the state gets its node now; on
 * several, the move's entry owns the key (seen.h).  The chunk the state
 * goes into is *cp. */
static bool take(worker *k, size_t ji, const uint64_t key[2], uint32_t id,
                 unsigned m, lchunk **cp)
{
    bfs *b = k->b;
    if (!b->shared) {
        if (!ck_seen_put(&b->seen, key))
            return false;
        *cp = out_chunk(k, &b->jobs[ji]);
        nodes_reserve(b, 1);
        if ((*cp)->lv.n == 0)
            (*cp)->lv.first = (uint32_t)b->nn;
        b->nodes[b->nn++] = (node){id, (uint16_t)m, (uint16_t)(b->depth + 1)};
        return true;
    }
    lchunk *c = *cp = out_chunk(k, &b->jobs[ji]);
    ck_seen_ref *e = &c->e[c->lv.n];
    uint64_t gone;
    *e = (ck_seen_ref){{key[0], key[1]}, id, (uint16_t)m, 0};
    if (!ck_seen_claim(&b->seen, &b->loc[k->idx], e, &gone))
        return false;
    if (gone != CK_SEEN_NONE) {
        if (k->ngone == k->gcap) {
            k->gcap = k->gcap ? 2 * k->gcap : 256;
            k->gone = xrealloc(k->gone, k->gcap * sizeof *k->gone);
        }
        k->gone[k->ngone++] = gone;
    }
    return true;
}

/* The child just made by move m from the state in blob (node id): save
 * it (only the machines in `dirty` afresh), key it, load the state in
 * blob back, and queue the child if this move finds it first.  The load
 * runs while the visited set's bucket for the key is fetched; with
 * --liveness all the child is checked first, and the load comes last.
 * true on a violation (nothing loaded back then). */
static bool child(worker *k, size_t ji, const uint8_t *blob, size_t blen,
                  unsigned dirty, uint32_t id, unsigned m)
{
    bfs *b = k->b;
    size_t len = ck_world_save_some(&k->w, k->tmp, CK_SAVE_MAX, blob, &k->pl,
                                    dirty);
    uint64_t key[2];
    lchunk *c;
    check_len(len);
    ck_canon_parts_copy(&k->cp, &k->pp, b->cfg->S);
    ck_canon_parts(&k->cp, &k->w, k->tmp, dirty);
    ck_canon_key(&k->w, &k->cp, k->tmp, len, key);
    if (b->cfg->paranoid)
        paranoid(k, len, key);
    ck_layout lay = k->w.lay; /* the child's, for its queued copy */
    if (!b->cfg->liveness_all) {
        ck_seen_prefetch(&b->seen, key);
        if (ck_world_load_some(&k->w, blob, blen, dirty))
            abort();
        if (take(k, ji, key, id, m, &c))
            ck_level_add(&c->lv, c->lv.first + (uint32_t)c->lv.n, k->tmp,
                         len, &lay, b->cfg->S, b->cfg->paranoid);
        return false;
    }
    if (take(k, ji, key, id, m, &c)) {
        ck_level_add(&c->lv, c->lv.first + (uint32_t)c->lv.n, k->tmp, len,
                     &lay, b->cfg->S, b->cfg->paranoid);
        k->w.reach_off = true; /* a claim may be displaced: not counted */
        bool ok = ck_guard_liveness(&k->w);
        k->w.reach_off = false;
        if (!ok)
            return found(k, CK_SEEN_TAG(id, m), ji, id, (uint16_t)m, true);
        dirty = CK_M_ALL; /* liveness moved every machine */
    }
    if (ck_world_load_some(&k->w, blob, blen, dirty))
        abort();
    return false;
}

/* Expand one state (node id) of job ji; true on a violation.  The state
 * is loaded once; after each move only the plain data and the machines
 * the move touched are loaded back. */
static bool expand(worker *k, size_t ji, const uint8_t *blob, size_t blen,
                   uint32_t id)
{
    bfs *b = k->b;
    job *j = &k->counts; /* the job's, summed when the chunk is done */
    ck_move mv[CK_MAX_MOVES];
    if (ck_world_load_diff(&k->w, blob, blen, k->held, &k->hl))
        abort();
    k->pl = k->w.lay;
    k->held = NULL; /* a leaf's liveness phase moves every machine */
    unsigned n = ck_step_moves(&k->w, mv);
    if (n == 0 || b->depth >= b->cfg->depth) {
        j->leaves++;
        j->bounded |= n > 0;
        if (!ck_guard_liveness(&k->w))
            return found(k, CK_SEEN_TAG(id, 0), ji, id, UINT16_MAX, true);
        return false;
    }
    ck_canon_prime(&k->pp, &k->w, blob);
    for (unsigned m = 0; m < n; m++) {
        unsigned dirty = ck_step_touches(&k->w, mv[m]);
        ck_guard_apply(&k->w, mv[m]);
        j->transitions++;
        if (k->w.v.inv >= 0)
            return found(k, CK_SEEN_TAG(id, m), ji, id, (uint16_t)m, false);
        if (child(k, ji, blob, blen, dirty, id, m))
            return true;
    }
    k->held = blob;
    k->hl = k->pl;
    return false;
}

/* Bytes held by the search structures (queued states, visited set, the
 * node tree) as far as one thread sees them; the machines and buffers are
 * small and fixed. */
static uint64_t bfs_mem(bfs *b, const lchunk *open)
{
    return b->fixed_mem + b->ncap * sizeof(node) + ck_seen_bytes(&b->seen) +
           atomic_load(&b->queued_mem) +
           (open && open->lv.prev ? open->lv.cap + entry_bytes(open) : 0);
}

/* The peak memory so far, and the bound. */
static void check_mem(bfs *b, const job *j)
{
    uint64_t m = bfs_mem(b, j->out.n ? j->out.v[j->out.n - 1] : NULL);
    uint64_t p = atomic_load(&b->peak_mem);
    while (m > p && !atomic_compare_exchange_weak(&b->peak_mem, &p, m))
        ;
    if (b->cfg->max_mem && m > b->cfg->max_mem)
        atomic_store(&b->oom, true);
}

/* Expand the live states of chunk ji of the current level; stops at a
 * violation, past a lower one found elsewhere, or at the memory bound
 * (checked every 1024 states, as a plain BFS does). */
static void expand_chunk(worker *k, size_t ji)
{
    bfs *b = k->b;
    const lchunk *c = b->cur.v[ji];
    job *j = &b->jobs[ji];
    uint32_t id = c->lv.first;
    ck_lreader_start(&k->rd, &c->lv);
    k->held = NULL; /* another chunk's state */
    k->counts = (job){0};
    for (size_t i = 0; i < c->lv.n; i++) {
        size_t blen;
        const uint8_t *blob = ck_lreader_next(&k->rd, &blen);
        if (c->dead && c->dead[i]) {
            k->held = NULL; /* the reader's buffer is about to be reused */
            continue;
        }
        if (CK_SEEN_TAG(id, 0) > atomic_load(&b->vtag))
            break;
        if (expand(k, ji, blob, blen, id++))
            break;
        if ((i & 1023) == 0) {
            check_mem(b, j);
            if (atomic_load(&b->oom))
                break;
        }
    }
    j->transitions = k->counts.transitions;
    j->leaves = k->counts.leaves;
    j->bounded = k->counts.bounded;
    if (b->shared && j->out.n)
        close_chunk(k, j->out.v[j->out.n - 1]);
}

/* Phase one, on each thread: take chunks of the level in order. */
static void *expand_phase(void *arg)
{
    worker *k = arg;
    bfs *b = k->b;
    for (;;) {
        size_t ji = atomic_fetch_add(&b->at, 1);
        if (ji >= b->cur.n || atomic_load(&b->oom))
            break;
        expand_chunk(k, ji);
        check_mem(b, &b->jobs[ji]);
    }
    if (b->shared)
        ck_seen_leave(&b->seen); /* the others may grow a table now */
    return NULL;
}

/* The entry of the next level that tag (CK_SEEN_TAG) names: its
 * parent is a state of the current level's chunk ji, found by node id,
 * and job ji's entries are in (parent, move) order, as it found them. */
static ck_seen_ref *entry_of(bfs *b, uint64_t tag)
{
    uint32_t parent = (uint32_t)(tag >> 8);
    size_t lo = 0, hi = b->cur.n;
    while (hi - lo > 1) { /* the last chunk whose first id <= parent */
        size_t mid = lo + (hi - lo) / 2;
        if (b->cur.v[mid]->lv.first <= parent)
            lo = mid;
        else
            hi = mid;
    }
    const job *j = &b->jobs[lo];
    for (size_t ci = j->lo; ci < j->hi; ci++) {
        lchunk *c = b->next.v[ci];
        size_t n = c->lv.n;
        if (n == 0 || CK_SEEN_TAG(c->e[n - 1].parent,
                                        c->e[n - 1].move) < tag)
            continue;
        size_t a = 0, z = n - 1; /* the first entry whose tag >= tag */
        while (a < z) {
            size_t mid = a + (z - a) / 2;
            if (CK_SEEN_TAG(c->e[mid].parent, c->e[mid].move) < tag)
                a = mid + 1;
            else
                z = mid;
        }
        if (CK_SEEN_TAG(c->e[a].parent, c->e[a].move) == tag)
            return &c->e[a];
        break;
    }
    abort(); /* a claim displaced an entry that no job recorded */
}

/* Several threads, once the level is expanded: mark dead every entry a
 * lower claim displaced (few: only claims that raced out of order). */
static void mark_displaced(bfs *b)
{
    for (unsigned t = 0; t < b->nthreads; t++) {
        worker *k = &b->wk[t];
        for (size_t i = 0; i < k->ngone; i++)
            entry_of(b, k->gone[i])->dead = 1;
        k->ngone = 0;
    }
}

/* Run fn on every worker, each on its own thread (the first on this one),
 * and wait for all. */
static void run_phase(bfs *b, void *(*fn)(void *))
{
    atomic_store(&b->at, 0);
    for (unsigned t = 1; t < b->nthreads; t++)
        if (pthread_create(&b->wk[t].th, NULL, fn, &b->wk[t]) != 0)
            abort();
    fn(&b->wk[0]);
    for (unsigned t = 1; t < b->nthreads; t++)
        pthread_join(b->wk[t].th, NULL);
}

/* The next level, in the order of the jobs that found it. */
static void gather(bfs *b)
{
    for (size_t ji = 0; ji < b->cur.n; ji++) {
        job *j = &b->jobs[ji];
        j->lo = b->next.n;
        j->hi = b->next.n + j->out.n;
        for (size_t i = 0; i < j->out.n; i++) {
            seal(b, j->out.v[i]);
            clist_push(&b->next, j->out.v[i]);
        }
        free(j->out.v);
        j->out = (clist){0};
    }
}

/* Number the live states of the next level in order (several threads:
 * one thread numbered them as it found them) and record their moves;
 * drop the chunks nobody owns a state of.  How many are live. */
static uint64_t number(bfs *b)
{
    uint64_t live = 0;
    size_t keep = 0;
    for (size_t i = 0; i < b->next.n; i++) {
        lchunk *c = b->next.v[i];
        if (c->e) {
            c->live = 0;
            for (size_t s = 0; s < c->lv.n; s++)
                c->live += !c->e[s].dead;
        } else {
            c->live = c->lv.n;
        }
        if (c->live == 0) {
            chunk_free(c);
            continue;
        }
        live += c->live;
        b->next.v[keep++] = c;
        if (!c->e)
            continue;
        nodes_reserve(b, c->live);
        c->lv.first = (uint32_t)b->nn;
        if (c->live < c->lv.n && !(c->dead = calloc(c->lv.n, 1)))
            abort();
        for (size_t s = 0; s < c->lv.n; s++) {
            if (c->e[s].dead) {
                c->dead[s] = 1;
                continue;
            }
            b->nodes[b->nn++] = (node){c->e[s].parent, c->e[s].move,
                                       (uint16_t)(b->depth + 1)};
        }
        free(c->e);
        c->e = NULL;
    }
    b->next.n = keep;
    return live;
}

/* The lowest violation of the level, with the counts a one-thread search
 * has when it stops there: the jobs before it whole, its own up to it,
 * the states owned by a tag up to it (on one thread, every state queued:
 * it stopped there). */
static void settle_violation(bfs *b, const viol *v)
{
    ck_outcome *o = b->out;
    for (size_t ji = 0; ji <= v->job; ji++) {
        job *j = &b->jobs[ji];
        o->transitions += j->transitions;
        o->leaves += j->leaves;
        o->bounded |= j->bounded;
        for (size_t i = j->lo; i < j->hi; i++) {
            const lchunk *c = b->next.v[i];
            if (!c->e) {
                o->states += c->lv.n;
                continue;
            }
            for (size_t s = 0; s < c->lv.n; s++)
                o->states += !c->e[s].dead &&
                             CK_SEEN_TAG(c->e[s].parent, c->e[s].move) <=
                                 v->tag;
        }
    }
    o->inv = v->inv;
    memcpy(o->what, v->what, sizeof o->what);
    path_to(b, v->id, v->last, v->liveness, &o->path);
}

static uint64_t level_states(const clist *l)
{
    uint64_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        n += l->v[i]->live;
    return n;
}

/* How many states the next level may have: the current one's, grown as
 * it grew from the one before, but at most four times (the first levels
 * grow faster, but are small), so that a guess never asks for tables far
 * beyond what the level itself takes. */
static uint64_t next_guess(bfs *b)
{
    uint64_t cur = level_states(&b->cur);
    uint64_t prev = b->prev_live ? b->prev_live : cur;
    if (prev == 0 || cur >= 4 * prev)
        return 4 * cur;
    return (uint64_t)((double)cur * (double)cur / (double)prev);
}

/* Expand one level into b->next; true on a violation (settled in out). */
static bool bfs_level(bfs *b)
{
    b->njobs = b->cur.n;
    b->jobs = xrealloc(b->jobs, b->njobs * sizeof *b->jobs);
    memset(b->jobs, 0, b->njobs * sizeof *b->jobs);
    b->fixed_mem = 0;
    for (size_t i = 0; i < b->cur.n; i++)
        b->fixed_mem += b->cur.v[i]->lv.cap;
    atomic_store(&b->queued_mem, 0);
    for (unsigned t = 0; t < b->nthreads; t++)
        b->wk[t].v.tag = NO_TAG;
    if (b->shared)
        ck_seen_begin(&b->seen, b->loc, b->nthreads, next_guess(b));
    run_phase(b, expand_phase);
    if (b->shared)
        ck_seen_end(&b->seen);
    const viol *v = NULL;
    for (unsigned t = 0; t < b->nthreads; t++)
        if (b->wk[t].v.tag != NO_TAG && (!v || b->wk[t].v.tag < v->tag))
            v = &b->wk[t].v;
    gather(b);
    /* The violation's counts need the dead entries too. */
    if (b->shared)
        mark_displaced(b);
    if (v)
        settle_violation(b, v);
    for (size_t ji = 0; !v && ji < b->njobs; ji++) {
        b->out->transitions += b->jobs[ji].transitions;
        b->out->leaves += b->jobs[ji].leaves;
        b->out->bounded |= b->jobs[ji].bounded;
    }
    if (v || atomic_load(&b->oom))
        return v != NULL;
    b->prev_live = level_states(&b->cur);
    b->out->states += number(b);
    return false;
}

static int worker_init(bfs *b, worker *k, unsigned idx)
{
    k->b = b;
    k->idx = idx;
    k->v.tag = NO_TAG;
    if (ck_world_init(&k->w, b->cfg, NULL))
        return -1;
    k->tmp = malloc(CK_SAVE_MAX);
    k->tmp2 = malloc(CK_SAVE_MAX);
    if (!k->tmp || !k->tmp2 || ck_lreader_init(&k->rd))
        abort();
    return 0;
}

static void worker_free(worker *k)
{
    free(k->gone);
    ck_lreader_free(&k->rd);
    free(k->scratch);
    free(k->tmp);
    free(k->tmp2);
    ck_world_free(&k->w);
}

/* Level 0: the initial state, node 0. */
static void add_root(bfs *b)
{
    worker *k = &b->wk[0];
    size_t len = ck_world_save(&k->w, k->tmp, CK_SAVE_MAX);
    uint64_t key[2];
    check_len(len);
    ck_canon_parts(&k->pp, &k->w, k->tmp, CK_M_ALL);
    ck_canon_key(&k->w, &k->pp, k->tmp, len, key);
    ck_seen_put(&b->seen, key);
    lchunk *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    ck_level_add(&c->lv, 0, k->tmp, len, &k->w.lay, b->cfg->S,
                 b->cfg->paranoid);
    c->live = 1;
    seal(b, c);
    clist_push(&b->cur, c);
    nodes_reserve(b, 1);
    b->nodes[b->nn++] = (node){UINT32_MAX, 0, 0};
    b->out->states = 1;
}

static uint64_t level_bytes(const clist *l)
{
    uint64_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        n += l->v[i]->lv.len;
    return n;
}

static void bfs_free(bfs *b)
{
    clist_clear(&b->cur);
    clist_clear(&b->next);
    free(b->cur.v);
    free(b->next.v);
    for (unsigned t = 0; t < b->nthreads; t++)
        worker_free(&b->wk[t]);
    free(b->wk);
    free(b->loc);
    free(b->jobs);
    free(b->nodes);
    free(b->spare);
    ck_seen_free(&b->seen);
    free(b);
}

static int bfs_run(const ck_config *cfg, unsigned threads, bool shared,
                   ck_outcome *out)
{
    /* Aligned for the visited set's shards (a cache line each). */
    bfs *b = aligned_alloc(_Alignof(bfs), sizeof *b);
    int rc = -1;
    out->inv = -1;
    if (!b)
        abort();
    memset(b, 0, sizeof *b);
    b->cfg = cfg;
    b->out = out;
    b->nthreads = threads;
    b->shared = shared;
    if (ck_seen_init(&b->seen))
        abort();
    b->wk = calloc(b->nthreads, sizeof *b->wk);
    b->loc = aligned_alloc(_Alignof(ck_seen_local),
                           b->nthreads * sizeof *b->loc);
    if (!b->wk || !b->loc)
        abort();
    memset(b->loc, 0, b->nthreads * sizeof *b->loc);
    ck_guard_install();
    for (unsigned t = 0; t < b->nthreads; t++)
        if (worker_init(b, &b->wk[t], t))
            goto out_free;
    atomic_store(&b->vtag, NO_TAG);
    double t0 = now_s(), c0 = cpu_s();
    add_root(b);
    bool bad = false;
    for (uint16_t d = 0; b->cur.n && !bad && !out->out_of_memory; d++) {
        out->depth = b->depth = d;
        bad = bfs_level(b);
        out->out_of_memory = atomic_load(&b->oom);
        if (now_s() - t0 > 10 && !out->out_of_memory && !bad) {
            uint64_t n = level_states(&b->next);
            fprintf(stderr, "xfer-check: depth %u done, %" PRIu64 " states, "
                    "next level %" PRIu64 " (%.0f B each queued), %.0f s\n",
                    d, out->states, n,
                    n ? (double)level_bytes(&b->next) / n : 0.0,
                    now_s() - t0);
        }
        keep_spare(b);
        clist_clear(&b->cur);
        clist t = b->cur;
        b->cur = b->next;
        b->next = t;
    }
    if (out->out_of_memory)
        out->states = ck_seen_count(&b->seen);
    for (unsigned t = 0; t < b->nthreads; t++)
        for (unsigned r = 0; r < CK_R_COUNT_; r++)
            out->reach[r] += b->wk[t].w.reach[r];
    out->mem_bytes = atomic_load(&b->peak_mem);
    out->secs = now_s() - t0;
    out->cpu_secs = cpu_s() - c0;
    rc = out->inv;
out_free:
    bfs_free(b);
    return rc;
}

int ck_search_bfs(const ck_config *cfg, unsigned threads, ck_outcome *out)
{
    return bfs_run(cfg, threads ? threads : 1, threads > 1, out);
}

int ck_search_bfs_shared(const ck_config *cfg, unsigned threads,
                         ck_outcome *out)
{
    return bfs_run(cfg, threads ? threads : 1, true, out);
}

/* ---------------------------------------------------------------------- */
/* Random and swarm walks                                                  */
/* ---------------------------------------------------------------------- */

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct walker {
    ck_config rc;
    ck_world w, w2;
    uint8_t *blob0, *b1, *b2;
    size_t len0;
} walker;

/* One walk from the initial state; the path it took is left in *p. */
static void walk(walker *k, uint64_t *s, ck_path *p)
{
    ck_move mv[CK_MAX_MOVES];
    ck_world_load(&k->w, k->blob0, k->len0);
    p->n = 0;
    unsigned stop = (rnd(s) & 3) == 0 ? (unsigned)(rnd(s) % k->rc.depth)
                                       : k->rc.depth;
    for (unsigned i = 0; i < stop && k->w.v.inv < 0; i++) {
        unsigned n = ck_step_moves(&k->w, mv);
        if (n == 0)
            break;
        unsigned c = (unsigned)(rnd(s) % n);
        ck_path_push(p, (uint16_t)c);
        ck_guard_apply(&k->w, mv[c]);
    }
    p->liveness = k->w.v.inv < 0;
    if (p->liveness)
        ck_guard_liveness(&k->w);
}

/* I10: the same choices on a fresh copy give the same outputs and state. */
static void same_again(walker *k, const ck_path *p)
{
    ck_move mv[CK_MAX_MOVES];
    ck_world_load(&k->w2, k->blob0, k->len0);
    for (size_t i = 0; i < p->n && k->w2.v.inv < 0; i++) {
        unsigned n = ck_step_moves(&k->w2, mv);
        ck_guard_apply(&k->w2, mv[p->c[i] % (n ? n : 1)]);
    }
    if (p->liveness)
        ck_guard_liveness(&k->w2);
    size_t l1 = ck_world_save(&k->w, k->b1, CK_SAVE_MAX);
    size_t l2 = ck_world_save(&k->w2, k->b2, CK_SAVE_MAX);
    if (k->w.out_hash != k->w2.out_hash || l1 != l2 ||
        memcmp(k->b1, k->b2, l1) != 0)
        ck_monitor_fail(&k->w, CK_I10, "the same %zu choices gave different "
                        "outputs or states on a second run", p->n);
}

static void walker_free(walker *k)
{
    ck_world_free(&k->w);
    ck_world_free(&k->w2);
    free(k->blob0);
    free(k->b1);
    free(k->b2);
}

int ck_search_random(const ck_config *cfg, uint64_t seed, uint64_t runs,
                     bool swarm, ck_outcome *out)
{
    static walker k;
    memset(&k, 0, sizeof k);
    k.rc = *cfg;
    out->inv = -1;
    ck_guard_install();
    if (ck_world_init(&k.w, &k.rc, NULL) || ck_world_init(&k.w2, &k.rc, NULL))
        return -1;
    k.blob0 = malloc(CK_SAVE_MAX);
    k.b1 = malloc(CK_SAVE_MAX);
    k.b2 = malloc(CK_SAVE_MAX);
    k.len0 = ck_world_save(&k.w, k.blob0, CK_SAVE_MAX);
    double t0 = now_s();
    ck_path p = {0};
    for (uint64_t r = 0; r < runs; r++) {
        uint64_t s = seed + r * 0x100000001ull, s0 = s;
        k.rc.faults = swarm ? cfg->faults & (uint32_t)rnd(&s) : cfg->faults;
        walk(&k, &s, &p);
        out->runs++;
        out->steps += p.n;
        if (k.w.v.inv < 0)
            same_again(&k, &p);
        if (k.w.v.inv >= 0) {
            out->inv = k.w.v.inv;
            memcpy(out->what, k.w.v.what, sizeof out->what);
            out->seed = s0;
            out->faults = k.rc.faults;
            out->path = p;
            p = (ck_path){0};
            break;
        }
    }
    out->secs = now_s() - t0;
    memcpy(out->reach, k.w.reach, sizeof out->reach);
    ck_path_free(&p);
    walker_free(&k);
    return out->inv;
}

/* ---------------------------------------------------------------------- */
/* Shrinking a failing walk                                                */
/* ---------------------------------------------------------------------- */

/* Replay with indices taken modulo the moves offered; rewrite the path to
 * the indices really used, cut after the violating step. */
static int normalize(const ck_config *cfg, ck_path *p, ck_violation *v)
{
    static ck_world w;
    ck_move mv[CK_MAX_MOVES];
    if (ck_world_init(&w, cfg, NULL))
        return -1;
    size_t i = 0;
    for (; i < p->n && w.v.inv < 0; i++) {
        unsigned n = ck_step_moves(&w, mv);
        if (n == 0)
            break;
        p->c[i] %= n;
        ck_guard_apply(&w, mv[p->c[i]]);
    }
    p->n = i;
    p->liveness = w.v.inv < 0;
    if (p->liveness)
        ck_guard_liveness(&w);
    *v = w.v;
    ck_world_free(&w);
    return v->inv;
}

void ck_search_shrink(const ck_config *cfg, ck_outcome *o)
{
    ck_violation v;
    uint64_t h;
    unsigned budget = 4000;
    ck_path cand = {0};
    for (size_t chunk = o->path.n / 2; chunk >= 1 && budget; chunk /= 2) {
        for (size_t i = 0; i + chunk <= o->path.n && budget; budget--) {
            cand.n = 0;
            for (size_t j = 0; j < o->path.n; j++)
                if (j < i || j >= i + chunk)
                    ck_path_push(&cand, o->path.c[j]);
            cand.liveness = true;
            if (ck_path_run(cfg, &cand, NULL, &v, &h, true) == o->inv) {
                ck_path t = o->path;
                o->path = cand;
                cand = t;
            } else {
                i += chunk;
            }
        }
    }
    ck_path_free(&cand);
    if (normalize(cfg, &o->path, &v) == o->inv)
        memcpy(o->what, v.what, sizeof o->what);
}
