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
 *    the checker.
 */
#include "search.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "guard.h"
#include "level.h"
#include "monitor.h"
#include "path.h"
#include "step.h"
#include "world.h"
#include "xfer/xfer.h"

/* The library's monotonic clock, in seconds (for rates). */
static double now_s(void)
{
    return (double)xfer_clock_monotonic(NULL) / 1e9;
}

/* ---------------------------------------------------------------------- */
/* Visited set: open addressing over 128-bit keys                          */
/* ---------------------------------------------------------------------- */

typedef struct vset {
    uint64_t *k; /* 2 per bucket; (0,0) empty */
    size_t mask, n;
} vset;

static void vs_init(vset *s, size_t buckets)
{
    s->mask = buckets - 1;
    s->n = 0;
    s->k = calloc(2 * buckets, sizeof *s->k);
    if (!s->k)
        abort();
}

static bool vs_put_raw(vset *s, const uint64_t key[2])
{
    size_t i = key[0] & s->mask;
    for (;; i = (i + 1) & s->mask) {
        uint64_t *b = &s->k[2 * i];
        if (b[0] == 0 && b[1] == 0) {
            b[0] = key[0];
            b[1] = key[1];
            s->n++;
            return true;
        }
        if (b[0] == key[0] && b[1] == key[1])
            return false;
    }
}

/* Insert; true when the key is new. */
static bool vs_put(vset *s, const uint64_t key[2])
{
    if (4 * (s->n + 1) > 3 * (s->mask + 1)) {
        vset big;
        vs_init(&big, 2 * (s->mask + 1));
        for (size_t i = 0; i <= s->mask; i++)
            if (s->k[2 * i] || s->k[2 * i + 1])
                vs_put_raw(&big, &s->k[2 * i]);
        free(s->k);
        *s = big;
    }
    return vs_put_raw(s, key);
}

/* ---------------------------------------------------------------------- */
/* Breadth-first search                                                    */
/* ---------------------------------------------------------------------- */

typedef struct node {
    uint32_t parent;
    uint16_t move;
    uint16_t depth;
} node;

typedef struct bfs {
    const ck_config *cfg;
    ck_world w;
    vset seen;
    node *nodes;
    size_t nn, ncap;
    ck_level cur, next;
    ck_lreader rd;
    uint8_t *tmp, *tmp2;
    ck_layout pl;     /* layout of the state being expanded */
    const uint8_t *held; /* the encoding the machines hold, or NULL */
    ck_layout hl;     /* its layout */
    ck_parts pp, cp;  /* its cached hashes; a child's */
    ck_outcome *out;
} bfs;

static uint32_t add_node(bfs *b, uint32_t parent, uint16_t move, uint16_t d)
{
    if (b->nn == b->ncap) {
        b->ncap = b->ncap ? 2 * b->ncap : 4096;
        b->nodes = realloc(b->nodes, b->ncap * sizeof *b->nodes);
        if (!b->nodes)
            abort();
    }
    b->nodes[b->nn] = (node){parent, move, d};
    return (uint32_t)b->nn++;
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

static bool found(bfs *b, uint32_t id, uint16_t last, bool liveness)
{
    b->out->inv = b->w.v.inv;
    memcpy(b->out->what, b->w.v.what, sizeof b->out->what);
    path_to(b, id, last, liveness, &b->out->path);
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
static void paranoid(bfs *b, size_t len, const uint64_t key[2])
{
    ck_layout l = b->w.lay;
    size_t n = ck_world_save(&b->w, b->tmp2, CK_SAVE_MAX);
    uint64_t k2[2];
    check_len(n);
    ck_canon_parts(&b->cp, &b->w, b->tmp2, CK_M_ALL);
    ck_canon_key(&b->w, &b->cp, b->tmp2, n, k2);
    if (n != len || memcmp(b->tmp, b->tmp2, n) || k2[0] != key[0] ||
        k2[1] != key[1]) {
        fprintf(stderr, "xfer-check: --paranoid: a move touched a machine "
                "ck_step_touches() did not name\n");
        abort();
    }
    b->w.lay = l;
}

/* The child just made by a move from the state in blob: save it (only the
 * machines in `dirty` afresh), key it, queue it if new.  true on a
 * violation; *dirty grows to every machine if liveness ran. */
static bool child(bfs *b, const uint8_t *blob, unsigned *dirty, uint32_t id,
                  unsigned m, uint16_t depth)
{
    size_t len = ck_world_save_some(&b->w, b->tmp, CK_SAVE_MAX, blob, &b->pl,
                                    *dirty);
    uint64_t key[2];
    check_len(len);
    ck_canon_parts_copy(&b->cp, &b->pp, b->cfg->S);
    ck_canon_parts(&b->cp, &b->w, b->tmp, *dirty);
    ck_canon_key(&b->w, &b->cp, b->tmp, len, key);
    if (b->cfg->paranoid)
        paranoid(b, len, key);
    if (!vs_put(&b->seen, key))
        return false;
    uint32_t c = add_node(b, id, (uint16_t)m, depth + 1);
    ck_level_add(&b->next, c, b->tmp, len, &b->w.lay, b->cfg->S,
                 b->cfg->paranoid);
    if (!b->cfg->liveness_all)
        return false;
    *dirty = CK_M_ALL;
    return !ck_guard_liveness(&b->w) && found(b, c, UINT16_MAX, true);
}

/* Expand state i of the current level; true on a violation.  The state is
 * loaded once; after each move only the plain data and the machines the
 * move touched are loaded back. */
static bool expand(bfs *b, size_t i, uint16_t depth)
{
    size_t blen;
    const uint8_t *blob = ck_lreader_next(&b->rd, &blen);
    uint32_t id = b->cur.first + (uint32_t)i;
    ck_move mv[CK_MAX_MOVES];
    if (ck_world_load_diff(&b->w, blob, blen, b->held, &b->hl))
        abort();
    b->pl = b->w.lay;
    b->held = NULL; /* a leaf's liveness phase moves every machine */
    unsigned n = ck_step_moves(&b->w, mv);
    if (n == 0 || depth >= b->cfg->depth) {
        b->out->leaves++;
        b->out->bounded |= n > 0;
        if (!ck_guard_liveness(&b->w))
            return found(b, id, UINT16_MAX, true);
        return false;
    }
    ck_canon_prime(&b->pp, &b->w, blob);
    for (unsigned m = 0; m < n; m++) {
        unsigned dirty = ck_step_touches(&b->w, mv[m]);
        ck_guard_apply(&b->w, mv[m]);
        b->out->transitions++;
        if (b->w.v.inv >= 0)
            return found(b, id, (uint16_t)m, false);
        if (child(b, blob, &dirty, id, m, depth))
            return true;
        if (ck_world_load_some(&b->w, blob, blen, dirty))
            abort();
    }
    b->held = blob;
    b->hl = b->pl;
    return false;
}

/* Bytes held by the search structures (queued states, visited set, the
 * node tree); the machines and buffers are small and fixed. */
static uint64_t bfs_mem(const bfs *b)
{
    const ck_level *l[2] = {&b->cur, &b->next};
    uint64_t m = (b->seen.mask + 1) * 16 + b->ncap * sizeof(node);
    for (unsigned i = 0; i < 2; i++)
        m += l[i]->cap;
    return m;
}

/* Expand one level; true on a violation.  Stops early (out_of_memory)
 * when the structures pass cfg->max_mem. */
static bool bfs_level(bfs *b, uint16_t d)
{
    ck_lreader_start(&b->rd, &b->cur);
    for (size_t i = 0; i < b->cur.n; i++) {
        if (expand(b, i, d))
            return true;
        if ((i & 1023) != 0)
            continue;
        uint64_t m = bfs_mem(b);
        if (m > b->out->mem_bytes)
            b->out->mem_bytes = m;
        if (b->cfg->max_mem && m > b->cfg->max_mem) {
            b->out->out_of_memory = true;
            return false;
        }
    }
    return false;
}

int ck_search_bfs(const ck_config *cfg, ck_outcome *out)
{
    static bfs b;
    memset(&b, 0, sizeof b);
    b.cfg = cfg;
    b.out = out;
    out->inv = -1;
    ck_guard_install();
    if (ck_world_init(&b.w, cfg, NULL))
        return -1;
    b.tmp = malloc(CK_SAVE_MAX);
    b.tmp2 = malloc(CK_SAVE_MAX);
    if (!b.tmp || !b.tmp2 || ck_lreader_init(&b.rd))
        abort();
    vs_init(&b.seen, 1u << 16);
    double t0 = now_s();
    size_t len = ck_world_save(&b.w, b.tmp, CK_SAVE_MAX);
    uint64_t key[2];
    check_len(len);
    ck_canon_parts(&b.pp, &b.w, b.tmp, CK_M_ALL);
    ck_canon_key(&b.w, &b.pp, b.tmp, len, key);
    vs_put(&b.seen, key);
    ck_level_add(&b.cur, add_node(&b, UINT32_MAX, 0, 0), b.tmp, len, &b.w.lay,
                 cfg->S, cfg->paranoid);
    bool bad = false;
    for (uint16_t d = 0; b.cur.n && !bad && !out->out_of_memory; d++) {
        out->depth = d;
        bad = bfs_level(&b, d);
        if (now_s() - t0 > 10 && !out->out_of_memory)
            fprintf(stderr, "xfer-check: depth %u done, %zu states, next "
                    "level %zu (%.0f B each queued), %.0f s\n", d, b.seen.n,
                    b.next.n, b.next.n ? (double)b.next.len / b.next.n : 0.0,
                    now_s() - t0);
        ck_level t = b.cur;
        b.held = NULL; /* its buffer is about to be reused */
        b.cur = b.next;
        b.next = t;
        ck_level_clear(&b.next);
    }
    out->states = b.seen.n;
    out->secs = now_s() - t0;
    ck_level_free(&b.cur);
    ck_level_free(&b.next);
    ck_lreader_free(&b.rd);
    free(b.seen.k);
    free(b.nodes);
    free(b.tmp);
    free(b.tmp2);
    ck_world_free(&b.w);
    return out->inv;
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
