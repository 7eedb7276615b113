/*
 * tests/test_save.c - the declared save API of the three machines
 * (fsm/save.h): every machine's save round-trips through load into a
 * machine that then behaves alike; the core keeps every record (version 1
 * dropped those past 256); a buffer too small is an error with the size
 * needed and nothing written past it; the canonical form of a machine
 * equals that of a hand-built copy with its shards renamed, part for
 * renamed part, and with its transfer ids renamed (xfer_canon.ids,
 * xfer_shard_canon) to that of a copy whose history used the renamed ids;
 * and a save names its machine and version.
 */
#include <check.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "save.h"
#include "testutil.h"

#define MS 1000000ull
#define NS3 3

/* Shard k of machine A is shard PERM[k] of machine B. */
static const uint16_t PERM[NS3] = {2, 0, 1};

/* ---------------------------------------------------------------------- */
/* Helpers                                                                 */
/* ---------------------------------------------------------------------- */

/* A machine's save in a buffer of its own (freed by the caller). */
typedef int (*save_fn)(const void *m, uint8_t *buf, size_t len, size_t *need);

static int core_save(const void *m, uint8_t *b, size_t n, size_t *need)
{
    return xfer_core_save(m, b, n, need);
}

static int shard_save(const void *m, uint8_t *b, size_t n, size_t *need)
{
    return xfer_shard_save(m, b, n, need);
}

static int rd_save(const void *m, uint8_t *b, size_t n, size_t *need)
{
    return xfer_readiness_save(m, b, n, need);
}

static uint8_t *save_all(save_fn fn, const void *m, size_t *len)
{
    size_t need = 0, got = 0;
    ck_assert_int_eq(fn(m, NULL, 0, &need), XFER_ERR_TOO_SMALL);
    uint8_t *buf = malloc(need);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(fn(m, buf, need, &got), 0);
    ck_assert_uint_eq(got, need);
    *len = need;
    return buf;
}

/* The two machines save to the same bytes. */
static void same_save(save_fn fn, const void *a, const void *b)
{
    size_t na, nb;
    uint8_t *x = save_all(fn, a, &na), *y = save_all(fn, b, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_mem_eq(x, y, na);
    free(x);
    free(y);
}

/* A buffer one byte short: TOO_SMALL, the full size, nothing past it. */
static void too_small(save_fn fn, const void *m)
{
    size_t need = 0, n2 = 0, n3 = 0;
    ck_assert_int_eq(fn(m, NULL, 0, &need), XFER_ERR_TOO_SMALL);
    ck_assert_uint_gt(need, XFER_SAVE_HDR);
    uint8_t *buf = malloc(need + 8);
    memset(buf, 0xEE, need + 8);
    ck_assert_int_eq(fn(m, buf, need - 1, &n2), XFER_ERR_TOO_SMALL);
    ck_assert_uint_eq(n2, need);
    for (size_t i = need - 1; i < need + 8; i++)
        ck_assert_uint_eq(buf[i], 0xEE);
    ck_assert_int_eq(fn(m, buf, need, &n3), 0);
    ck_assert_uint_eq(n3, need);
    ck_assert_uint_eq(buf[need], 0xEE);
    ck_assert_int_eq(fn(NULL, buf, need, &n3), XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(fn(m, buf, need, NULL), XFER_ERR_INVALID_ARG);
    free(buf);
}

/* Canonical forms: equal rests, and part k of a is part PERM[k] of b. */
static void same_renamed(const xfer_canon *a, const xfer_canon *b)
{
    ck_assert_uint_eq(a->len[0], b->len[0]);
    ck_assert_mem_eq(xfer_canon_part(a, 0), xfer_canon_part(b, 0), a->len[0]);
    for (unsigned k = 0; k < NS3; k++) {
        unsigned j = 1u + PERM[k];
        ck_assert_uint_eq(a->len[1 + k], b->len[j]);
        ck_assert_uint_gt(a->len[1 + k], 0);
        ck_assert_mem_eq(xfer_canon_part(a, 1 + k), xfer_canon_part(b, j),
                         a->len[1 + k]);
    }
}

/* Part i of a differs from part j of b. */
static bool part_differs(const xfer_canon *a, unsigned i, const xfer_canon *b,
                         unsigned j)
{
    return a->len[i] != b->len[j] ||
           memcmp(xfer_canon_part(a, i), xfer_canon_part(b, j), a->len[i]);
}

/* ---------------------------------------------------------------------- */
/* The core                                                                */
/* ---------------------------------------------------------------------- */

static xfer_core *mk_core(uint32_t max_transfers, uint16_t max_shards)
{
    xfer_core_config cfg = {.version = XFER_CORE_CONFIG_VERSION,
                            .max_transfers = max_transfers,
                            .max_tombstones = 4 * max_transfers,
                            .tombstone_ttl_ns = 1000 * MS,
                            .consumer_lease_ns = 500 * MS,
                            .net_margin_ns = 500 * MS,
                            .default_deadline_ns = 500 * MS,
                            .cancel_op_timeout_ns = 100 * MS,
                            .cancel_backoff_ns = 10 * MS,
                            .cancel_max_attempts = 3,
                            .max_shards = max_shards};
    xfer_core *c = NULL;
    ck_assert_int_eq(xfer_core_new(&cfg, &c), 0);
    xfer_core_actions_clear(c);
    return c;
}

static uint32_t attempt;

/* Submit id over NS3 shards; shard k's slice is `slice[k]`. */
static void c_submit(xfer_core *c, uint64_t now, uint64_t id,
                     const xfer_slice *slice)
{
    xfer_submit_args a = {.id = id, .group = 1, .nshards = NS3, .pool = 0,
                          .slices = slice, .user_data = id};
    ck_assert_int_eq(xfer_core_submit(c, now, &a), 0);
    size_t n;
    const xfer_action *act = xfer_core_actions(c, &n);
    ck_assert_uint_gt(n, 0);
    attempt = act[0].attempt;
    xfer_core_actions_clear(c);
}

static void c_reserved(xfer_core *c, uint64_t now, uint64_t id, uint16_t k,
                       int32_t status, uint64_t resv_id)
{
    xfer_shard_result r = {.id = id, .attempt = attempt, .shard = k,
                           .op = XFER_OP_RESERVE, .status = status,
                           .resv_id = status ? 0 : resv_id,
                           .remote_addr = status ? 0 : 64 * resv_id};
    ck_assert_int_eq(xfer_core_on_result(c, now, &r), 0);
    xfer_core_actions_clear(c);
}

/*
 * The same history on a core whose shard k is called map[k]: transfer 1
 * waits for one reserve after one failed (first failure on a shard),
 * transfer 2 has every reserve answered with a per-shard reservation id
 * (so it writes), id 3 is tombstoned before it was ever seen.
 */
static void core_history(xfer_core *c, const uint16_t *map, uint64_t salt)
{
    static const xfer_slice by_shard[NS3] = {{0, 64}, {64, 128}, {192, 32}};
    xfer_slice sl[NS3];
    for (unsigned k = 0; k < NS3; k++)
        sl[map[k]] = by_shard[k];
    c_submit(c, 10, 1, sl);
    c_reserved(c, 11, 1, map[0], 0, 100);
    c_reserved(c, 12, 1, map[1], XFER_ERR_NO_SPACE, 0);
    c_submit(c, 13, 2, sl);
    for (unsigned k = 0; k < NS3; k++)
        c_reserved(c, 14, 2, map[k], 0, 200 + k + (k == 2 ? salt : 0));
    ck_assert_int_eq(xfer_core_cancel(c, 15, 3), 0);
    xfer_core_actions_clear(c);
}

static const uint16_t IDENTITY[NS3] = {0, 1, 2};

START_TEST(test_save_core_round_trip)
{
    xfer_core *a = mk_core(8, NS3), *b = mk_core(8, NS3);
    core_history(a, IDENTITY, 0);
    size_t n;
    uint8_t *buf = save_all(core_save, a, &n);
    ck_assert_int_eq(xfer_core_load(b, buf, n), 0);
    same_save(core_save, a, b);
    ck_assert_int_eq(xfer_core_state(b, 3), XFER_TRANSFER_STATE_TOMBSTONED);
    ck_assert_uint_eq(xfer_core_next_deadline(b), xfer_core_next_deadline(a));
    /* Both answer the next inputs alike: the last reserve of transfer 1,
     * then every timer. */
    xfer_core *m[2] = {a, b};
    xfer_action acts[2][64];
    size_t na[2];
    for (int i = 0; i < 2; i++) {
        xfer_shard_result r = {.id = 1, .attempt = 1, .shard = 2,
                               .op = XFER_OP_RESERVE, .resv_id = 9,
                               .remote_addr = 64};
        ck_assert_int_eq(xfer_core_on_result(m[i], 20, &r), 0);
        xfer_core_on_timer(m[i], 600 * MS);
        const xfer_action *x = xfer_core_actions(m[i], &na[i]);
        ck_assert_uint_le(na[i], 64);
        memcpy(acts[i], x, na[i] * sizeof *x);
        xfer_core_actions_clear(m[i]);
    }
    ck_assert_uint_eq(na[0], na[1]);
    ck_assert_uint_gt(na[0], 3);
    ck_assert_mem_eq(acts[0], acts[1], na[0] * sizeof acts[0][0]);
    same_save(core_save, a, b);
    /* A save with pending actions is refused: they are output. */
    static const xfer_slice sl[NS3] = {{0, 1}, {1, 1}, {2, 1}};
    xfer_submit_args s = {.id = 50, .nshards = NS3, .slices = sl};
    ck_assert_int_eq(xfer_core_submit(a, 700 * MS, &s), 0);
    size_t need;
    ck_assert_int_eq(xfer_core_save(a, buf, n, &need), XFER_ERR_STATE);
    free(buf);
    xfer_core_del(a);
    xfer_core_del(b);
}
END_TEST

/* Version 1 wrote the header of 300 records and then none of them. */
START_TEST(test_save_core_keeps_every_record)
{
    enum { N = 300 };
    xfer_core *a = mk_core(N, 1), *b = mk_core(N, 1);
    static const xfer_slice one = {0, 8};
    for (uint64_t id = 1; id <= N; id++) {
        xfer_submit_args s = {.id = id, .nshards = 1, .slices = &one,
                              .deadline_ns = 1000 * MS + (id % 7) * MS};
        ck_assert_int_eq(xfer_core_submit(a, id, &s), 0);
        xfer_core_actions_clear(a);
    }
    size_t n;
    uint8_t *buf = save_all(core_save, a, &n);
    ck_assert_int_eq(xfer_core_load(b, buf, n), 0);
    same_save(core_save, a, b);
    xfer_core_stats st;
    xfer_core_stats_get(b, &st);
    ck_assert_uint_eq(st.live, N);
    ck_assert_int_eq(xfer_core_state(b, N), XFER_TRANSFER_STATE_RESERVING);
    /* The deadlines fire in the same order on both. */
    xfer_core_on_timer(a, 1003 * MS);
    xfer_core_on_timer(b, 1003 * MS);
    size_t na, nb;
    const xfer_action *x = xfer_core_actions(a, &na);
    const xfer_action *y = xfer_core_actions(b, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_uint_gt(na, 0);
    ck_assert_mem_eq(x, y, na * sizeof *x);
    free(buf);
    xfer_core_del(a);
    xfer_core_del(b);
}
END_TEST

START_TEST(test_save_core_canon_matches_renamed_copy)
{
    xfer_core *a = mk_core(8, NS3), *b = mk_core(8, NS3);
    xfer_core *c = mk_core(8, NS3);
    core_history(a, IDENTITY, 0);
    core_history(b, PERM, 0);
    core_history(c, IDENTITY, 5); /* shard 2 got another resv id */
    static uint8_t fa[4][1024], fb[4][1024], fc[4][1024];
    xfer_canon ca = {.buf = &fa[0][0], .stride = 1024};
    xfer_canon cb = {.buf = &fb[0][0], .stride = 1024};
    xfer_canon cc = {.buf = &fc[0][0], .stride = 1024};
    ck_assert_int_eq(xfer_core_canon(a, NS3, &ca), 0);
    ck_assert_int_eq(xfer_core_canon(b, NS3, &cb), 0);
    ck_assert_int_eq(xfer_core_canon(c, NS3, &cc), 0);
    same_renamed(&ca, &cb);
    /* The parts tell the shards apart, and the saves name them. */
    ck_assert(part_differs(&ca, 1, &ca, 2));
    ck_assert(part_differs(&ca, 2, &ca, 3));
    size_t na, nb;
    uint8_t *sa = save_all(core_save, a, &na), *sb = save_all(core_save, b, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert(memcmp(sa, sb, na) != 0);
    /* Another state is no renaming of a: shard 2's part matches none. */
    ck_assert_mem_eq(xfer_canon_part(&ca, 0), xfer_canon_part(&cc, 0),
                     ca.len[0]);
    for (unsigned k = 1; k <= NS3; k++)
        ck_assert(part_differs(&cc, 3, &ca, k));
    /* A part that does not fit the stride: TOO_SMALL and its size. */
    xfer_canon tiny = {.buf = &fc[0][0], .stride = 16};
    ck_assert_int_eq(xfer_core_canon(a, NS3, &tiny), XFER_ERR_TOO_SMALL);
    ck_assert_uint_eq(tiny.len[0], ca.len[0]);
    ck_assert_uint_eq(tiny.len[1], ca.len[1]);
    /* Transfers over another number of shards cannot be split so. */
    ck_assert_int_eq(xfer_core_canon(a, 2, &ca), XFER_ERR_STATE);
    ck_assert_int_eq(xfer_core_canon(a, 0, &ca), XFER_ERR_INVALID_ARG);
    free(sa);
    free(sb);
    xfer_core_del(a);
    xfer_core_del(b);
    xfer_core_del(c);
}
END_TEST

/*
 * Symmetry over transfers: the history of core_history with the ids x, y,
 * z = id[0..2], every id given the same slices and user data (so only the
 * ids tell the transfers apart).
 */
static void core_ids_history(xfer_core *c, const uint64_t *id, uint64_t salt)
{
    static const xfer_slice sl[NS3] = {{0, 64}, {64, 128}, {192, 32}};
    xfer_submit_args a = {.group = 1, .nshards = NS3, .slices = sl,
                          .user_data = 42};
    xfer_transfer_view v;
    a.id = id[0];
    ck_assert_int_eq(xfer_core_submit(c, 10, &a), 0);
    xfer_core_actions_clear(c);
    ck_assert(xfer_core_view(c, id[0], &v));
    attempt = v.attempt;
    c_reserved(c, 11, id[0], 0, 0, 100);
    c_reserved(c, 12, id[0], 1, XFER_ERR_NO_SPACE, 0);
    a.id = id[1];
    ck_assert_int_eq(xfer_core_submit(c, 13, &a), 0);
    xfer_core_actions_clear(c);
    ck_assert(xfer_core_view(c, id[1], &v));
    attempt = v.attempt;
    for (uint16_t k = 0; k < NS3; k++)
        c_reserved(c, 14, id[1], k, 0, 200 + k + (k == 2 ? salt : 0));
    ck_assert_int_eq(xfer_core_cancel(c, 15, id[2]), 0);
    xfer_core_actions_clear(c);
}

/* The renaming 1 -> 2 -> 3 -> 1 (or its first n pairs of another list). */
static xfer_canon_ids cycle_ids(const uint64_t *from, unsigned n)
{
    xfer_canon_ids m = {.n = n};
    for (unsigned i = 0; i < n; i++) {
        m.from[i] = from[i];
        m.to[i] = from[(i + 1) % n];
    }
    return m;
}

/* Equal canonical forms, part for part (no shard renamed). */
static void same_form(const xfer_canon *a, const xfer_canon *b, unsigned parts)
{
    for (unsigned i = 0; i < parts; i++) {
        ck_assert_uint_eq(a->len[i], b->len[i]);
        ck_assert_mem_eq(xfer_canon_part(a, i), xfer_canon_part(b, i),
                         a->len[i]);
    }
}

START_TEST(test_save_core_canon_renames_transfer_ids)
{
    static const uint64_t ida[3] = {1, 2, 3}, idb[3] = {2, 3, 1};
    xfer_core *a = mk_core(8, NS3), *b = mk_core(8, NS3);
    xfer_core *c = mk_core(8, NS3);
    core_ids_history(a, ida, 0);
    core_ids_history(b, idb, 0); /* a with every id renamed by the cycle */
    core_ids_history(c, ida, 5); /* another state: one resv id differs */
    xfer_canon_ids ren = cycle_ids(ida, 3);
    static uint8_t fa[4][1024], fb[4][1024], fc[4][1024];
    xfer_canon ca = {.buf = &fa[0][0], .stride = 1024, .ids = &ren};
    xfer_canon cb = {.buf = &fb[0][0], .stride = 1024};
    xfer_canon cc = {.buf = &fc[0][0], .stride = 1024, .ids = &ren};
    ck_assert_int_eq(xfer_core_canon(a, NS3, &ca), 0);
    ck_assert_int_eq(xfer_core_canon(b, NS3, &cb), 0);
    ck_assert_int_eq(xfer_core_canon(c, NS3, &cc), 0);
    /* a renamed is b: records in renamed-id order, timers and the
     * tombstone (of id 3, renamed 1) renamed. */
    same_form(&ca, &cb, NS3 + 1);
    /* Without the renaming they differ: the forms name the ids. */
    ca.ids = NULL;
    ck_assert_int_eq(xfer_core_canon(a, NS3, &ca), 0);
    ck_assert(part_differs(&ca, 0, &cb, 0));
    /* Another state renamed is not b. */
    ck_assert(part_differs(&cc, 3, &cb, 3));
    /* A map that renames nothing is no map. */
    xfer_canon_ids none = {.n = 0};
    static uint8_t fn[4][1024];
    xfer_canon cn = {.buf = &fn[0][0], .stride = 1024, .ids = &none};
    ck_assert_int_eq(xfer_core_canon(a, NS3, &cn), 0);
    same_form(&ca, &cn, NS3 + 1);
    xfer_core_del(a);
    xfer_core_del(b);
    xfer_core_del(c);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The shard                                                               */
/* ---------------------------------------------------------------------- */

/* Reservation ids from a counter per shard, as the model checker draws
 * them, so that they do not depend on the shard's index. */
static uint64_t counters[4];

static uint64_t count_up(void *ud)
{
    return ++*(uint64_t *)ud;
}

static xfer_shard *mk_shard(uint16_t index)
{
    xfer_shard_config c = {.version = XFER_SHARD_CONFIG_VERSION,
                           .pool_bytes = 4096, .max_reservations = 8,
                           .lease_ttl_ns = 100 * MS, .shard_index = index,
                           .rng = {count_up, &counters[index]}};
    xfer_shard *s = NULL;
    ck_assert_int_eq(xfer_shard_new(&c, &s), 0);
    return s;
}

/* Reservations in every live state, a tombstone and a pending event. */
static void shard_history(xfer_shard *s)
{
    xfer_resv_info r1, r2, r3;
    ck_assert_int_eq(xfer_shard_reserve(s, 1, 1, 1, 100, &r1), 0);
    ck_assert_int_eq(xfer_shard_reserve(s, 2, 2, 1, 200, &r2), 0);
    ck_assert_int_eq(xfer_shard_reserve(s, 3, 3, 1, 50, &r3), 0);
    uint8_t *dst;
    ck_assert_int_eq(xfer_shard_write_begin(s, 4, 2, 1, r2.resv_id, 0, 10,
                                            &dst), 0);
    static const uint8_t bytes[50];
    ck_assert_int_eq(xfer_shard_write(s, 5, 3, 1, r3.resv_id, 0, bytes, 50),
                     0); /* a commit needs the region written */
    ck_assert_int_eq(xfer_shard_commit(s, 5, 3, 1, r3.resv_id), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, 6, 1, 1, r1.resv_id), 0);
}

/* shard_history with the ids x, y, z = id[0..2]. */
static void shard_ids_history(xfer_shard *s, const uint64_t *id, bool extra)
{
    xfer_resv_info r1, r2, r3;
    ck_assert_int_eq(xfer_shard_reserve(s, 1, id[0], 1, 100, &r1), 0);
    ck_assert_int_eq(xfer_shard_reserve(s, 2, id[1], 1, 200, &r2), 0);
    ck_assert_int_eq(xfer_shard_reserve(s, 3, id[2], 1, 50, &r3), 0);
    uint8_t *dst;
    ck_assert_int_eq(xfer_shard_write_begin(s, 4, id[1], 1, r2.resv_id, 0,
                                            10, &dst), 0);
    static const uint8_t bytes[50];
    ck_assert_int_eq(xfer_shard_write(s, 5, id[2], 1, r3.resv_id, 0, bytes,
                                      50), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 5, id[2], 1, r3.resv_id), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, 6, id[0], 1, r1.resv_id), 0);
    if (extra)
        ck_assert_int_eq(xfer_shard_write_end(s, 7, id[1], r2.resv_id, true),
                         0);
}

START_TEST(test_save_shard_canon_renames_transfer_ids)
{
    static const uint64_t ida[3] = {1, 2, 3}, idb[3] = {2, 3, 1};
    counters[0] = counters[1] = counters[2] = 0;
    xfer_shard *a = mk_shard(0), *b = mk_shard(1), *c = mk_shard(2);
    shard_ids_history(a, ida, false);
    shard_ids_history(b, idb, false);
    shard_ids_history(c, ida, true);
    xfer_canon_ids ren = cycle_ids(ida, 3);
    size_t nb, na = 0, nc = 0, n0 = 0;
    uint8_t *sb = save_all(shard_save, b, &nb);
    static uint8_t fa[2048], fc[2048], f0[2048];
    ck_assert_int_eq(xfer_shard_canon(a, &ren, fa, sizeof fa, &na), 0);
    ck_assert_uint_eq(na, nb);
    ck_assert_mem_eq(fa, sb, nb); /* a renamed is b's save */
    /* No renaming: the save itself, which differs from b's. */
    ck_assert_int_eq(xfer_shard_canon(a, NULL, f0, sizeof f0, &n0), 0);
    size_t ns;
    uint8_t *sa = save_all(shard_save, a, &ns);
    ck_assert_uint_eq(n0, ns);
    ck_assert_mem_eq(f0, sa, ns);
    ck_assert(memcmp(sa, sb, nb) != 0);
    /* Another state renamed is not b. */
    ck_assert_int_eq(xfer_shard_canon(c, &ren, fc, sizeof fc, &nc), 0);
    ck_assert(nc != nb || memcmp(fc, sb, nb) != 0);
    /* Too small: the size it needs. */
    ck_assert_int_eq(xfer_shard_canon(a, &ren, fc, 8, &nc),
                     XFER_ERR_TOO_SMALL);
    ck_assert_uint_eq(nc, nb);
    free(sa);
    free(sb);
    xfer_shard_del(a);
    xfer_shard_del(b);
    xfer_shard_del(c);
}
END_TEST

START_TEST(test_save_shard_round_trip)
{
    xfer_shard *a = mk_shard(0), *b = mk_shard(2);
    shard_history(a);
    size_t n;
    uint8_t *buf = save_all(shard_save, a, &n);
    ck_assert_int_eq(xfer_shard_load(b, buf, n), 0);
    same_save(shard_save, a, b);
    ck_assert_int_eq(xfer_shard_state(b, 1), XFER_RESV_STATE_CANCELLED);
    ck_assert_int_eq(xfer_shard_state(b, 2), XFER_RESV_STATE_WRITING);
    ck_assert_int_eq(xfer_shard_state(b, 3), XFER_RESV_STATE_READY);
    /* The same history on another index saves alike: a shard's save names
     * no shard (it is its own canonical form). */
    xfer_shard *c = mk_shard(1);
    shard_history(c);
    same_save(shard_save, a, c);
    /* Both end the write and expire alike. */
    ck_assert_int_eq(xfer_shard_write_end(a, 7, 2, 2, true), 0);
    ck_assert_int_eq(xfer_shard_write_end(b, 7, 2, 2, true), 0);
    xfer_shard_on_timer(a, 1000 * MS);
    xfer_shard_on_timer(b, 1000 * MS);
    same_save(shard_save, a, b);
    ck_assert_int_eq(xfer_shard_state(b, 2), XFER_RESV_STATE_EXPIRED);
    free(buf);
    xfer_shard_del(a);
    xfer_shard_del(b);
    xfer_shard_del(c);
}
END_TEST

/* Alignment 1: free extents of a single byte, between reservations and
 * at the end of the pool, save and load like any other (tools/mutate: a
 * load that refused a 1-byte extent passed every net before this). */
START_TEST(test_save_shard_one_byte_free_extents)
{
    xfer_shard_config c = {.version = XFER_SHARD_CONFIG_VERSION,
                           .pool_bytes = 16, .align = 1,
                           .max_reservations = 8, .lease_ttl_ns = 100 * MS,
                           .rng = {count_up, &counters[3]}};
    xfer_shard *a = NULL, *b = NULL;
    ck_assert_int_eq(xfer_shard_new(&c, &a), 0);
    ck_assert_int_eq(xfer_shard_new(&c, &b), 0);
    xfer_resv_info r1, r2, r3;
    ck_assert_int_eq(xfer_shard_reserve(a, 1, 1, 1, 7, &r1), 0);
    ck_assert_int_eq(xfer_shard_reserve(a, 1, 2, 1, 1, &r2), 0);
    ck_assert_int_eq(xfer_shard_reserve(a, 1, 3, 1, 7, &r3), 0);
    ck_assert_int_eq(xfer_shard_cancel(a, 2, 2, 1, r2.resv_id), 0);
    /* free now: byte 7 (between 1 and 3) and byte 15 (the end) */
    size_t n;
    uint8_t *buf = save_all(shard_save, a, &n);
    ck_assert_int_eq(xfer_shard_load(b, buf, n), 0);
    same_save(shard_save, a, b);
    xfer_resv_info r4;
    ck_assert_int_eq(xfer_shard_reserve(b, 3, 4, 1, 2, &r4),
                     XFER_ERR_NO_SPACE); /* no 2 free bytes side by side */
    ck_assert_int_eq(xfer_shard_reserve(b, 3, 5, 1, 1, &r4), 0);
    free(buf);
    xfer_shard_del(a);
    xfer_shard_del(b);
}
END_TEST

/* Owners and one-sided shards in one save format (version 2): */
static xfer_shard *mk_owned(uint16_t index, bool one_sided)
{
    xfer_shard_config c = {.version = XFER_SHARD_CONFIG_VERSION,
                           .pool_bytes = 4096, .max_reservations = 8,
                           .lease_ttl_ns = 100 * MS, .shard_index = index,
                           .rng = {count_up, &counters[index]},
                           .one_sided = one_sided, .max_owners = 2,
                           .owner_max_reservations = 3};
    xfer_shard *s = NULL;
    ck_assert_int_eq(xfer_shard_new(&c, &s), 0);
    return s;
}

/* Owner 1: id 1 half written, id 3 committed; owner 2: id 2 reserved, a
 * tombstone of id 4 that only it sees, id 5 cancelled by the consumer. */
static void owned_history(xfer_shard *s)
{
    static const uint8_t bytes[100];
    xfer_resv_info r1, r2, r3, r5;
    ck_assert_int_eq(xfer_shard_reserve_by(s, 1, 1, 1, 1, 100, &r1), 0);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 1, 2, 2, 1, 200, &r2), 0);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 1, 1, 3, 1, 100, &r3), 0);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 1, 2, 5, 1, 64, &r5), 0);
    ck_assert_int_eq(xfer_shard_write(s, 2, 1, 1, r1.resv_id, 0, bytes, 50),
                     0);
    ck_assert_int_eq(xfer_shard_write(s, 2, 3, 1, r3.resv_id, 0, bytes, 100),
                     0);
    ck_assert_int_eq(xfer_shard_commit_by(s, 3, 1, 3, 1, r3.resv_id), 0);
    ck_assert_int_eq(xfer_shard_cancel_by(s, 3, 2, 4, 1, XFER_RESV_NONE), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, 3, 5, 0, XFER_RESV_NONE), 0);
}

/* What the loaded shard must still know: whose records are whose, what
 * is written of them, whom a tombstone blocks, and the quotas. */
static void owned_behaviour(xfer_shard *s)
{
    xfer_shard_owner_use u;
    ck_assert_int_eq(xfer_shard_owner_get(s, 1, &u), 0);
    ck_assert_uint_eq(u.live, 2);
    ck_assert_int_eq(xfer_shard_owner_get(s, 2, &u), 0);
    ck_assert_uint_eq(u.live, 1); /* id 2; id 5 is gone */
    xfer_resv_info r;
    /* owner 2's tombstone blocks owner 2, not owner 1 */
    ck_assert_int_ne(xfer_shard_reserve_by(s, 4, 2, 4, 1, 8, &r), 0);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 4, 1, 4, 1, 8, &r), 0);
    /* owner 1 is at its quota of 3 now */
    ck_assert_int_eq(xfer_shard_reserve_by(s, 4, 1, 6, 1, 8, &r),
                     XFER_ERR_BUSY);
}

START_TEST(test_save_shard_owners_and_one_sided_round_trip)
{
    for (int one = 0; one < 2; one++) {
        for (unsigned i = 0; i < 4; i++)
            counters[i] = 0;
        xfer_shard *a = mk_owned(0, one), *b = mk_owned(2, one);
        owned_history(a);
        size_t na = 0, nb = 0;
        const xfer_shard_inval *q = xfer_shard_invalidations(a, &na);
        ck_assert_uint_eq(na, one ? 2 : 0); /* ids 3 and 5 */
        size_t n;
        uint8_t *buf = save_all(shard_save, a, &n);
        ck_assert_uint_eq(buf[3], XFER_SHARD_SAVE_VERSION);
        ck_assert_int_eq(xfer_shard_load(b, buf, n), 0);
        same_save(shard_save, a, b);
        (void)xfer_shard_invalidations(b, &nb);
        ck_assert_uint_eq(nb, na);
        /* another owner's commit is refused; the half-written id 1 is
         * INCOMPLETE on a two-sided shard */
        ck_assert_int_eq(xfer_shard_state(b, 1), XFER_RESV_STATE_RESERVED);
        xfer_resv_info r1;
        ck_assert_int_eq(xfer_shard_reserve_by(b, 4, 1, 1, 1, 100, &r1), 0);
        ck_assert_int_eq(xfer_shard_commit_by(b, 4, 2, 1, 1, r1.resv_id),
                         XFER_ERR_PERM);
        if (!one) {
            ck_assert_int_eq(xfer_shard_commit_by(b, 4, 1, 1, 1, r1.resv_id),
                             XFER_ERR_INCOMPLETE);
            ck_assert_int_eq(xfer_shard_state(b, 3),
                             XFER_RESV_STATE_READY);
        } else {
            ck_assert_int_eq(xfer_shard_state(b, 3),
                             XFER_RESV_STATE_COMMIT_INVAL);
            ck_assert_int_eq(xfer_shard_state(b, 5),
                             XFER_RESV_STATE_CANCEL_INVAL);
            /* both answer the same invalidations alike */
            uint64_t ids[2] = {q[0].id, q[1].id}, rv[2] = {q[0].resv_id,
                                                           q[1].resv_id};
            for (int k = 0; k < 2; k++) {
                ck_assert_int_eq(xfer_shard_invalidated(a, 4, ids[k], rv[k]),
                                 0);
                ck_assert_int_eq(xfer_shard_invalidated(b, 4, ids[k], rv[k]),
                                 0);
            }
            xfer_shard_invalidations_clear(a);
            xfer_shard_invalidations_clear(b);
            ck_assert_int_eq(xfer_shard_state(b, 3), XFER_RESV_STATE_READY);
            /* the consumer's cancel leaves a tombstone everyone sees */
            xfer_resv_info r;
            ck_assert_int_ne(xfer_shard_reserve_by(b, 4, 1, 5, 1, 8, &r), 0);
        }
        /* the same history and calls again on a: they still save alike */
        ck_assert_int_eq(xfer_shard_reserve_by(a, 4, 1, 1, 1, 100, &r1), 0);
        ck_assert_int_eq(xfer_shard_commit_by(a, 4, 2, 1, 1, r1.resv_id),
                         XFER_ERR_PERM);
        if (!one)
            ck_assert_int_eq(
                xfer_shard_commit_by(a, 4, 1, 1, 1, r1.resv_id),
                XFER_ERR_INCOMPLETE);
        same_save(shard_save, a, b);
        owned_behaviour(b);
        free(buf);
        xfer_shard_del(a);
        xfer_shard_del(b);
    }
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The readiness tracker                                                   */
/* ---------------------------------------------------------------------- */

static xfer_readiness *mk_rd(void)
{
    xfer_readiness_config c = {.version = XFER_READINESS_CONFIG_VERSION,
                               .nshards = NS3, .max_records = 8,
                               .max_tombstones = 32,
                               .deadline_ns = 100 * MS,
                               .tombstone_ttl_ns = 200 * MS};
    xfer_readiness *r = NULL;
    ck_assert_int_eq(xfer_readiness_new(&c, &r), 0);
    return r;
}

/* The same history on a tracker whose shard k is called map[k]: id 5 ready
 * on two shards, id 6 on one, id 7 on all three with one take answered ok
 * and one failed, id 8 cancelled by the consumer before it was seen. */
static void rd_history(xfer_readiness *r, const uint16_t *map)
{
    ck_assert_int_eq(xfer_readiness_on_ready(r, 1, 5, 1, map[0], 50), 0);
    ck_assert_int_eq(xfer_readiness_on_ready(r, 2, 5, 1, map[2], 52), 0);
    ck_assert_int_eq(xfer_readiness_on_ready(r, 3, 6, 1, map[1], 61), 0);
    for (unsigned k = 0; k < NS3; k++)
        ck_assert_int_eq(
            xfer_readiness_on_ready(r, 4, 7, 2, map[k], 70 + k), 0);
    xfer_readiness_actions_clear(r);
    ck_assert_int_eq(xfer_readiness_on_take_result(r, 5, 7, map[0], 0), 0);
    ck_assert_int_eq(xfer_readiness_on_take_result(r, 5, 7, map[1],
                                                   XFER_ERR_CONN_LOST), 0);
    ck_assert_int_eq(xfer_readiness_cancel(r, 6, 8), 0);
    xfer_readiness_actions_clear(r);
}

static size_t find_u64s(const uint8_t *buf, size_t n, const uint64_t *v,
                        size_t nv)
{
    uint8_t want[32];
    for (size_t i = 0; i < nv; i++)
        for (unsigned b = 0; b < 8; b++)
            want[8 * i + b] = (uint8_t)(v[i] >> (8 * b));
    for (size_t at = 0; at + 8 * nv <= n; at++)
        if (!memcmp(buf + at, want, 8 * nv))
            return at;
    return SIZE_MAX;
}

/* A save no history could have made is refused: a WAITING record whose
 * every shard reported ready (it would be TAKING).  The bytes are found as
 * put_record writes them: the id, then 18 bytes on the ready mask; the
 * reservation ids per shard side by side.  (tools/mutate: a get_record
 * whose WAITING test let this through passed every net before.) */
START_TEST(test_save_readiness_load_refuses_impossible_record)
{
    xfer_readiness *a = mk_rd(), *b = mk_rd();
    rd_history(a, IDENTITY);
    size_t n;
    uint8_t *buf = save_all(rd_save, a, &n);
    const uint64_t id5[] = {5};
    size_t rec = find_u64s(buf, n, id5, 1);
    ck_assert_uint_ne(rec, SIZE_MAX);
    ck_assert_uint_eq(buf[rec + 12], XFER_READY_STATE_WAITING);
    ck_assert_uint_eq(buf[rec + 18], 0x5); /* shards 0 and 2 ready */
    const uint64_t resv5[] = {50, XFER_RESV_NONE, 52};
    size_t rs = find_u64s(buf, n, resv5, 3);
    ck_assert_uint_ne(rs, SIZE_MAX);
    /* as saved it loads */
    ck_assert_int_eq(xfer_readiness_load(b, buf, n), 0);
    /* shard 1 ready too, with its reservation: every shard ready */
    buf[rec + 18] = 0x7;
    buf[rs + 8] = 51;
    ck_assert_int_eq(xfer_readiness_load(b, buf, n), XFER_ERR_FORMAT);
    free(buf);
    xfer_readiness_del(a);
    xfer_readiness_del(b);
}
END_TEST

START_TEST(test_save_readiness_round_trip)
{
    xfer_readiness *a = mk_rd(), *b = mk_rd();
    rd_history(a, IDENTITY);
    size_t n;
    uint8_t *buf = save_all(rd_save, a, &n);
    ck_assert_int_eq(xfer_readiness_load(b, buf, n), 0);
    same_save(rd_save, a, b);
    ck_assert_int_eq(xfer_readiness_state(b, 7), XFER_READY_STATE_TAKING);
    ck_assert_int_eq(xfer_readiness_state(b, 8), XFER_READY_STATE_UNAVAILABLE);
    /* Both answer the last take and the deadlines alike. */
    xfer_readiness *m[2] = {a, b};
    xfer_ready_action acts[2][32];
    size_t na[2];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(xfer_readiness_on_take_result(m[i], 7, 7, 2, 0), 0);
        xfer_readiness_on_timer(m[i], 150 * MS);
        const xfer_ready_action *x = xfer_readiness_actions(m[i], &na[i]);
        ck_assert_uint_le(na[i], 32);
        memcpy(acts[i], x, na[i] * sizeof *x);
        xfer_readiness_actions_clear(m[i]);
    }
    ck_assert_uint_eq(na[0], na[1]);
    ck_assert_uint_gt(na[0], 2);
    ck_assert_mem_eq(acts[0], acts[1], na[0] * sizeof acts[0][0]);
    same_save(rd_save, a, b);
    free(buf);
    xfer_readiness_del(a);
    xfer_readiness_del(b);
}
END_TEST

START_TEST(test_save_readiness_canon_matches_renamed_copy)
{
    xfer_readiness *a = mk_rd(), *b = mk_rd();
    rd_history(a, IDENTITY);
    rd_history(b, PERM);
    static uint8_t fa[4][512], fb[4][512];
    xfer_canon ca = {.buf = &fa[0][0], .stride = 512};
    xfer_canon cb = {.buf = &fb[0][0], .stride = 512};
    ck_assert_int_eq(xfer_readiness_canon(a, &ca), 0);
    ck_assert_int_eq(xfer_readiness_canon(b, &cb), 0);
    same_renamed(&ca, &cb);
    ck_assert(part_differs(&ca, 1, &ca, 2));
    ck_assert(part_differs(&ca, 2, &ca, 3));
    size_t na, nb;
    uint8_t *sa = save_all(rd_save, a, &na), *sb = save_all(rd_save, b, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert(memcmp(sa, sb, na) != 0);
    /* Pending actions name shards in an order a split would lose. */
    ck_assert_int_eq(xfer_readiness_cancel(a, 9, 6), 0);
    ck_assert_int_eq(xfer_readiness_canon(a, &ca), XFER_ERR_STATE);
    free(sa);
    free(sb);
    xfer_readiness_del(a);
    xfer_readiness_del(b);
}
END_TEST

/* rd_history with the ids 5, 6, 7, 8 called id[0..3]. */
static void rd_ids_history(xfer_readiness *r, const uint64_t *id, bool extra)
{
    ck_assert_int_eq(xfer_readiness_on_ready(r, 1, id[0], 1, 0, 50), 0);
    ck_assert_int_eq(xfer_readiness_on_ready(r, 2, id[0], 1, 2, 52), 0);
    ck_assert_int_eq(xfer_readiness_on_ready(r, 3, id[1], 1, 1, 61), 0);
    for (uint16_t k = 0; k < NS3; k++)
        ck_assert_int_eq(
            xfer_readiness_on_ready(r, 4, id[2], 2, k, 70 + k), 0);
    xfer_readiness_actions_clear(r);
    ck_assert_int_eq(xfer_readiness_on_take_result(r, 5, id[2], 0, 0), 0);
    ck_assert_int_eq(xfer_readiness_on_take_result(r, 5, id[2], 1,
                                                   XFER_ERR_CONN_LOST), 0);
    ck_assert_int_eq(xfer_readiness_cancel(r, 6, id[3]), 0);
    if (extra)
        ck_assert_int_eq(xfer_readiness_on_ready(r, 7, id[1], 1, 2, 62), 0);
    xfer_readiness_actions_clear(r);
}

START_TEST(test_save_readiness_canon_renames_transfer_ids)
{
    static const uint64_t ida[4] = {5, 6, 7, 8}, idb[4] = {6, 7, 8, 5};
    xfer_readiness *a = mk_rd(), *b = mk_rd(), *c = mk_rd();
    rd_ids_history(a, ida, false);
    rd_ids_history(b, idb, false);
    rd_ids_history(c, ida, true);
    xfer_canon_ids ren = cycle_ids(ida, 4);
    static uint8_t fa[4][512], fb[4][512], fc[4][512];
    xfer_canon ca = {.buf = &fa[0][0], .stride = 512, .ids = &ren};
    xfer_canon cb = {.buf = &fb[0][0], .stride = 512};
    xfer_canon cc = {.buf = &fc[0][0], .stride = 512, .ids = &ren};
    ck_assert_int_eq(xfer_readiness_canon(a, &ca), 0);
    ck_assert_int_eq(xfer_readiness_canon(b, &cb), 0);
    ck_assert_int_eq(xfer_readiness_canon(c, &cc), 0);
    same_form(&ca, &cb, NS3 + 1); /* records, deadlines, tombstone */
    ca.ids = NULL;
    ck_assert_int_eq(xfer_readiness_canon(a, &ca), 0);
    ck_assert(part_differs(&ca, 0, &cb, 0));
    bool differs = false;
    for (unsigned i = 0; i <= NS3; i++)
        differs |= part_differs(&cc, i, &cb, i);
    ck_assert(differs);
    xfer_readiness_del(a);
    xfer_readiness_del(b);
    xfer_readiness_del(c);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Every machine                                                           */
/* ---------------------------------------------------------------------- */

START_TEST(test_save_too_small_buffer_is_an_error)
{
    xfer_core *c = mk_core(8, NS3);
    xfer_shard *s = mk_shard(0);
    xfer_readiness *r = mk_rd();
    core_history(c, IDENTITY, 0);
    shard_history(s);
    rd_history(r, IDENTITY);
    too_small(core_save, c);
    too_small(shard_save, s);
    too_small(rd_save, r);
    xfer_core_del(c);
    xfer_shard_del(s);
    xfer_readiness_del(r);
}
END_TEST

START_TEST(test_save_header_names_machine_and_version)
{
    xfer_core *c = mk_core(8, NS3), *c2 = mk_core(8, NS3);
    xfer_shard *s = mk_shard(0);
    xfer_readiness *r = mk_rd();
    size_t nc, ns, nr;
    uint8_t *bc = save_all(core_save, c, &nc);
    uint8_t *bs = save_all(shard_save, s, &ns);
    uint8_t *br = save_all(rd_save, r, &nr);
    xfer_save_machine m;
    unsigned v;
    ck_assert_int_eq(xfer_save_peek(bc, nc, &m, &v), 0);
    ck_assert_int_eq(m, XFER_SAVE_CORE);
    ck_assert_uint_eq(v, XFER_CORE_SAVE_VERSION);
    ck_assert_int_eq(xfer_save_peek(bs, ns, &m, &v), 0);
    ck_assert_int_eq(m, XFER_SAVE_SHARD);
    ck_assert_uint_eq(v, XFER_SHARD_SAVE_VERSION);
    ck_assert_int_eq(xfer_save_peek(br, nr, &m, &v), 0);
    ck_assert_int_eq(m, XFER_SAVE_READINESS);
    ck_assert_uint_eq(v, XFER_READINESS_SAVE_VERSION);
    ck_assert_int_eq(xfer_save_peek(bc, 3, &m, &v), XFER_ERR_FORMAT);
    /* Another machine's save, or another version, is refused. */
    ck_assert_int_eq(xfer_core_load(c2, bs, ns), XFER_ERR_FORMAT);
    ck_assert_int_eq(xfer_shard_load(s, br, nr), XFER_ERR_FORMAT);
    ck_assert_int_eq(xfer_readiness_load(r, bc, nc), XFER_ERR_FORMAT);
    bc[3]++;
    ck_assert_int_eq(xfer_save_peek(bc, nc, &m, &v), 0);
    ck_assert_uint_eq(v, XFER_CORE_SAVE_VERSION + 1);
    ck_assert_int_eq(xfer_core_load(c2, bc, nc), XFER_ERR_FORMAT);
    bc[3]--;
    ck_assert_int_eq(xfer_core_load(c2, bc, nc), 0);
    /* A core of another config is refused too. */
    xfer_core *other = mk_core(16, NS3);
    ck_assert_int_eq(xfer_core_load(other, bc, nc), XFER_ERR_FORMAT);
    free(bc);
    free(bs);
    free(br);
    xfer_core_del(c);
    xfer_core_del(c2);
    xfer_core_del(other);
    xfer_shard_del(s);
    xfer_readiness_del(r);
}
END_TEST

/* Every truncation and every flipped byte of a core's save: a load either
 * refuses it, leaving the core as it was, or takes a state that saves back
 * to the same bytes. */
/* A stream on a core whose shard k is map[k]: open 7 over NS3 shards,
 * part 1 (one range per shard) before the reserves answered, every
 * reserve answered (part 1's writes go out), then part 2 (two ranges on
 * shard map[0], not joinable) waiting behind part 1. */
static void stream_history(xfer_core *c, const uint16_t *map)
{
    static const uint32_t by_shard[NS3] = {100, 80, 60};
    uint32_t lens[NS3];
    for (unsigned k = 0; k < NS3; k++)
        lens[map[k]] = by_shard[k];
    xfer_open_args o = {.id = 7, .group = 1, .nshards = NS3, .lens = lens,
                        .user_data = 7};
    ck_assert_int_eq(xfer_core_open(c, 20, &o), 0);
    size_t n;
    attempt = xfer_core_actions(c, &n)[0].attempt;
    xfer_core_actions_clear(c);
    xfer_range r1[NS3];
    for (unsigned k = 0; k < NS3; k++)
        r1[k] = (xfer_range){.staging_off = 1000 + 100 * k, .pool = 3,
                             .len = 10 + k, .resv_off = 0, .shard = map[k]};
    ck_assert_int_eq(xfer_core_part(c, 21, 7, r1, NS3, NULL), 0);
    xfer_core_actions_clear(c);
    for (unsigned k = 0; k < NS3; k++)
        c_reserved(c, 22, 7, map[k], 0, 300 + k);
    xfer_range r2[2] = {
        {.staging_off = 5000, .pool = 3, .len = 5, .resv_off = 40,
         .shard = map[0]},
        {.staging_off = 6000, .pool = 3, .len = 5, .resv_off = 20,
         .shard = map[0]}};
    ck_assert_int_eq(xfer_core_part(c, 23, 7, r2, 2, NULL), 0);
    xfer_core_actions_clear(c);
}

/* A core with a live stream saves, loads and canonicalises (the model
 * checker explores streams through them): the loaded core saves the same
 * bytes and answers the same inputs alike (part 1's writes, the seal,
 * part 2's writes, the commits); a copy with its shards renamed has the
 * renamed canonical form; every cut or flipped save is refused or loads
 * to exactly what it says. */
START_TEST(test_save_core_stream_round_trip)
{
    xfer_core *a = mk_core(8, NS3), *b = mk_core(8, NS3);
    xfer_core *p = mk_core(8, NS3);
    stream_history(a, IDENTITY);
    stream_history(p, PERM);
    size_t n;
    uint8_t *buf = save_all(core_save, a, &n);
    ck_assert_int_eq(xfer_core_load(b, buf, n), 0);
    same_save(core_save, a, b);
    static uint8_t fa[4][2048], fp[4][2048];
    xfer_canon ca = {.buf = &fa[0][0], .stride = 2048};
    xfer_canon cp = {.buf = &fp[0][0], .stride = 2048};
    ck_assert_int_eq(xfer_core_canon(a, NS3, &ca), 0);
    ck_assert_int_eq(xfer_core_canon(p, NS3, &cp), 0);
    same_renamed(&ca, &cp);
    /* Shard 0 holds part 2's runs: its part differs from the others. */
    ck_assert(part_differs(&ca, 1, &ca, 2));
    xfer_core *m[2] = {a, b};
    xfer_action acts[2][64];
    size_t na[2];
    for (int i = 0; i < 2; i++) {
        na[i] = 0;
        /* Part 1's writes are in flight on every shard. */
        for (uint16_t k = 0; k < NS3; k++) {
            xfer_shard_result r = {.id = 7, .attempt = attempt, .shard = k,
                                   .op = XFER_OP_WRITE};
            ck_assert_int_eq(xfer_core_on_result(m[i], 30, &r), 0);
        }
        for (int round = 0; round < 6; round++) {
            if (round == 1)
                ck_assert_int_eq(xfer_core_seal(m[i], 31, 7), 0);
            size_t k;
            const xfer_action *x = xfer_core_actions(m[i], &k);
            xfer_action got[16];
            ck_assert_uint_le(k, 16);
            memcpy(got, x, k * sizeof *x);
            ck_assert_uint_le(na[i] + k, 64);
            memcpy(acts[i] + na[i], got, k * sizeof *x);
            na[i] += k;
            xfer_core_actions_clear(m[i]);
            for (size_t j = 0; j < k; j++)
                if (got[j].kind == XFER_ACT_WRITE) {
                    xfer_shard_result r = {.id = 7, .attempt = got[j].attempt,
                                           .shard = got[j].shard,
                                           .op = XFER_OP_WRITE};
                    ck_assert_int_eq(xfer_core_on_result(m[i], 32, &r), 0);
                }
        }
    }
    ck_assert_uint_eq(na[0], na[1]);
    ck_assert_uint_gt(na[0], 0);
    ck_assert_mem_eq(acts[0], acts[1], na[0] * sizeof acts[0][0]);
    /* Part 2's two runs, the part releases and the commits went out. */
    size_t writes = 0, releases = 0, commits = 0;
    for (size_t j = 0; j < na[0]; j++) {
        writes += acts[0][j].kind == XFER_ACT_WRITE;
        releases += acts[0][j].kind == XFER_ACT_RELEASE_PART;
        commits += acts[0][j].kind == XFER_ACT_COMMIT;
    }
    ck_assert_uint_eq(writes, 2);
    ck_assert_uint_eq(releases, 2);
    ck_assert_uint_eq(commits, NS3);
    ck_assert_int_eq(xfer_core_state(b, 7), xfer_core_state(a, 7));
    same_save(core_save, a, b);
    /* Hostile saves of a stream: cut anywhere or one byte flipped. */
    uint8_t *bad = malloc(n);
    size_t nb;
    uint8_t *before = save_all(core_save, b, &nb);
    for (size_t cut = 0; cut < n; cut++)
        ck_assert_int_eq(xfer_core_load(b, buf, cut), XFER_ERR_FORMAT);
    for (size_t i = 0; i < n; i++) {
        memcpy(bad, buf, n);
        bad[i] ^= 0x40;
        int rc = xfer_core_load(b, bad, n);
        if (rc == 0) {
            size_t got;
            uint8_t *now = save_all(core_save, b, &got);
            ck_assert_uint_eq(got, n);
            ck_assert_mem_eq(now, bad, n);
            free(now);
        } else {
            ck_assert_int_eq(rc, XFER_ERR_FORMAT);
        }
        ck_assert_int_eq(xfer_core_load(b, before, nb), 0);
    }
    free(bad);
    free(before);
    free(buf);
    xfer_core_del(a);
    xfer_core_del(b);
    xfer_core_del(p);
}
END_TEST

START_TEST(test_save_core_load_rejects_bad_input)
{
    xfer_core *a = mk_core(8, NS3), *b = mk_core(8, NS3);
    core_history(a, IDENTITY, 0);
    size_t n, nb;
    uint8_t *good = save_all(core_save, a, &n);
    c_submit(b, 1, 9, (const xfer_slice[NS3]){{0, 1}, {1, 1}, {2, 1}});
    uint8_t *before = save_all(core_save, b, &nb);
    uint8_t *bad = malloc(n);
    for (size_t cut = 0; cut < n; cut++)
        ck_assert_int_eq(xfer_core_load(b, good, cut), XFER_ERR_FORMAT);
    for (size_t i = 0; i < n; i++) {
        memcpy(bad, good, n);
        bad[i] ^= 0x40;
        int rc = xfer_core_load(b, bad, n);
        size_t m;
        uint8_t *now = save_all(core_save, b, &m);
        if (rc == 0) {
            ck_assert_uint_eq(m, n);
            ck_assert_mem_eq(now, bad, n);
            ck_assert_int_eq(xfer_core_load(b, before, nb), 0);
        } else {
            ck_assert_int_eq(rc, XFER_ERR_FORMAT);
            ck_assert_uint_eq(m, nb);
            ck_assert_mem_eq(now, before, nb);
        }
        free(now);
    }
    ck_assert_int_eq(xfer_core_load(NULL, good, n), XFER_ERR_INVALID_ARG);
    free(good);
    free(before);
    free(bad);
    xfer_core_del(a);
    xfer_core_del(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("save");
    TCase *tc = tcase_create("save");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_save_core_round_trip);
    tcase_add_test(tc, test_save_core_keeps_every_record);
    tcase_add_test(tc, test_save_core_canon_matches_renamed_copy);
    tcase_add_test(tc, test_save_core_canon_renames_transfer_ids);
    tcase_add_test(tc, test_save_shard_canon_renames_transfer_ids);
    tcase_add_test(tc, test_save_readiness_canon_renames_transfer_ids);
    tcase_add_test(tc, test_save_shard_round_trip);
    tcase_add_test(tc, test_save_shard_one_byte_free_extents);
    tcase_add_test(tc, test_save_shard_owners_and_one_sided_round_trip);
    tcase_add_test(tc, test_save_readiness_round_trip);
    tcase_add_test(tc, test_save_readiness_load_refuses_impossible_record);
    tcase_add_test(tc, test_save_readiness_canon_matches_renamed_copy);
    tcase_add_test(tc, test_save_too_small_buffer_is_an_error);
    tcase_add_test(tc, test_save_header_names_machine_and_version);
    tcase_add_test(tc, test_save_core_load_rejects_bad_input);
    tcase_add_test(tc, test_save_core_stream_round_trip);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
