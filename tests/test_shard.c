/*
 * tests/test_shard.c - the consumer shard (fsm/shard.c): the reservation
 * machine driven directly through its public calls.
 *
 * Scenarios check one rule each (leases, deferred frees, cancels, TAKEN,
 * pre-emptive cancel, attempt isolation, idempotent reserve, bad writes,
 * caps, tombstones, events); a seeded random walk checks the memory
 * invariants after every call; a twin run checks save/load; the coverage
 * test drives every non-ILLEGAL cell of XFER_RESV_TABLE.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "le.h"
#include "save.h"
#include "testutil.h"
#include "xfer/core.h"
#include "xfer/shard.h"

#define MS 1000000ull
#define LEASE (100 * MS)
#define TTTL (300 * MS)
#define ALIGN 64u
#define BAD_RESV 0xbadbadbadull

/* ---------------------------------------------------------------------- */
/* Harness                                                                 */
/* ---------------------------------------------------------------------- */

static xfer_shard_config base_cfg(void)
{
    xfer_shard_config c;
    xfer_shard_config_default(&c);
    c.pool_bytes = 64 * 1024;
    c.max_reservations = 16;
    c.max_tombstones = 64;
    c.lease_ttl_ns = LEASE;
    c.tombstone_ttl_ns = TTTL;
    c.align = ALIGN;
    c.shard_index = 3;
    return c;
}

static xfer_shard *mk_cfg(xfer_shard_config c)
{
    xfer_shard *s = NULL;
    ck_assert_int_eq(xfer_shard_new(&c, &s), 0);
    ck_assert_ptr_nonnull(s);
    return s;
}

static xfer_shard *mk(void)
{
    return mk_cfg(base_cfg());
}

static xfer_shard_stats stats(const xfer_shard *s)
{
    xfer_shard_stats st;
    xfer_shard_stats_get(s, &st);
    return st;
}

static uint64_t rnd(uint32_t len)
{
    uint64_t l = len ? len : 1;
    return (l + ALIGN - 1) / ALIGN * ALIGN;
}

static xfer_resv_info reserve_ok(xfer_shard *s, uint64_t now, uint64_t id,
                                 uint32_t attempt, uint32_t len)
{
    xfer_resv_info info;
    ck_assert_int_eq(xfer_shard_reserve(s, now, id, attempt, len, &info), 0);
    ck_assert_uint_ne(info.resv_id, XFER_RESV_NONE);
    ck_assert_uint_eq(info.len, len);
    return info;
}

static uint8_t *begin_ok(xfer_shard *s, uint64_t now, uint64_t id,
                         uint32_t attempt, const xfer_resv_info *i)
{
    uint8_t *dst = NULL;
    ck_assert_int_eq(xfer_shard_write_begin(s, now, id, attempt, i->resv_id,
                                            0, i->len, &dst),
                     0);
    ck_assert_ptr_eq(dst, xfer_shard_pool_base(s) + i->addr);
    return dst;
}

/* Write every byte of the reservation in one write that ends ok, as the
 * transports do, so that a commit finds it whole (shard.h). */
static void write_whole(xfer_shard *s, uint64_t now, uint64_t id,
                        uint32_t attempt, const xfer_resv_info *i)
{
    begin_ok(s, now, id, attempt, i);
    ck_assert_int_eq(xfer_shard_write_end(s, now, id, i->resv_id, true), 0);
}

static void same_info(const xfer_resv_info *a, const xfer_resv_info *b)
{
    ck_assert_uint_eq(a->resv_id, b->resv_id);
    ck_assert_uint_eq(a->addr, b->addr);
    ck_assert_uint_eq(a->len, b->len);
}

/* Pending events of a kind (-1: any) for an id (0: any). */
static size_t count_events(const xfer_shard *s, int kind, uint64_t id)
{
    size_t n, c = 0;
    const xfer_shard_event *e = xfer_shard_events(s, &n);
    for (size_t i = 0; i < n; i++)
        if ((kind < 0 || e[i].kind == kind) && (id == 0 || e[i].id == id))
            c++;
    return c;
}

static size_t save_into(const xfer_shard *s, uint8_t **buf)
{
    size_t need = 0, got = 0;
    ck_assert_int_eq(xfer_shard_save(s, NULL, 0, &need), XFER_ERR_TOO_SMALL);
    *buf = malloc(need ? need : 1);
    ck_assert_ptr_nonnull(*buf);
    ck_assert_int_eq(xfer_shard_save(s, *buf, need, &got), 0);
    ck_assert_uint_eq(got, need);
    return need;
}

/* True when the two shards encode to the same bytes. */
static bool same_state(const xfer_shard *a, const xfer_shard *b)
{
    uint8_t *x, *y;
    size_t nx = save_into(a, &x), ny = save_into(b, &y);
    bool same = nx == ny && memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    return same;
}

/* ---------------------------------------------------------------------- */
/* Leases                                                                  */
/* ---------------------------------------------------------------------- */

START_TEST(test_shard_lease_expiry_frees_idle_reservation)
{
    xfer_shard *s = mk();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 1000);
    xfer_resv_info b = reserve_ok(s, 10 * MS, 2, 1, 100);
    write_whole(s, 20 * MS, 2, 1, &b);
    ck_assert_int_eq(xfer_shard_commit(s, 20 * MS, 2, 1, b.resv_id), 0);
    xfer_shard_events_clear(s);
    ck_assert_uint_eq(stats(s).bytes_in_use, rnd(1000) + rnd(100));
    ck_assert_uint_eq(xfer_shard_next_deadline(s), LEASE);

    xfer_shard_on_timer(s, LEASE - 1);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_RESERVED);
    ck_assert_uint_eq(count_events(s, -1, 0), 0);

    xfer_shard_on_timer(s, LEASE);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_EXPIRED);
    ck_assert_uint_eq(stats(s).bytes_in_use, rnd(100));
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_EXPIRED, 1), 1);
    size_t n;
    const xfer_shard_event *e = xfer_shard_events(s, &n);
    ck_assert_uint_eq(e[0].resv_id, a.resv_id);
    ck_assert_uint_eq(e[0].attempt, 1);
    ck_assert_uint_eq(e[0].shard, 3);
    ck_assert_uint_eq(xfer_shard_next_deadline(s), LEASE + 10 * MS);
    xfer_shard_events_clear(s);

    /* READY leases run too: committed data nobody takes is reclaimed. */
    xfer_shard_on_timer(s, LEASE + 10 * MS);
    ck_assert_int_eq(xfer_shard_state(s, 2), XFER_RESV_STATE_EXPIRED);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_EXPIRED, 2), 1);
    ck_assert_uint_eq(stats(s).bytes_in_use, 0);
    ck_assert_uint_eq(stats(s).expiries, 2);
    ck_assert_uint_eq(stats(s).live, 0);
    ck_assert_uint_eq(stats(s).tombstones, 2);
    /* A late write or commit for an expired reservation is refused. */
    uint8_t *dst;
    ck_assert_int_eq(xfer_shard_write_begin(s, LEASE + 11 * MS, 1, 1,
                                            a.resv_id, 0, 1, &dst),
                     XFER_ERR_EXPIRED);
    ck_assert_int_eq(xfer_shard_commit(s, LEASE + 11 * MS, 1, 1, a.resv_id),
                     XFER_ERR_EXPIRED);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_lease_expiry_during_write_is_deferred)
{
    xfer_shard *s = mk();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 4096);
    uint8_t *d1 = begin_ok(s, 1, 1, 1, &a);
    uint8_t *d2 = begin_ok(s, 2, 1, 1, &a);
    xfer_shard_on_timer(s, LEASE);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_EXPIRE_PENDING);
    ck_assert_uint_eq(stats(s).bytes_in_use, 4096);
    ck_assert_uint_eq(count_events(s, -1, 0), 0);
    ck_assert_uint_eq(xfer_shard_next_deadline(s), UINT64_MAX);
    /* The region is still pinned: a new reservation never gets it. */
    xfer_resv_info b = reserve_ok(s, LEASE, 2, 1, 4096);
    ck_assert(b.addr >= a.addr + 4096 || b.addr + 4096 <= a.addr);
    memset(d1, 0xab, 4096); /* a write landing late is still safe */
    ck_assert_int_eq(xfer_shard_write_end(s, LEASE + 1, 1, a.resv_id, true),
                     XFER_ERR_EXPIRED);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_EXPIRE_PENDING);
    ck_assert_uint_eq(stats(s).bytes_in_use, 2 * 4096);
    memset(d2, 0xcd, 4096);
    ck_assert_int_eq(xfer_shard_write_end(s, LEASE + 2, 1, a.resv_id, false),
                     XFER_ERR_EXPIRED);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_EXPIRED);
    ck_assert_uint_eq(stats(s).bytes_in_use, 4096);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_EXPIRED, 1), 1);
    ck_assert_uint_eq(stats(s).deferred_frees, 1);
    /* A third write_end for it is not a write in flight. */
    ck_assert_int_eq(xfer_shard_write_end(s, LEASE + 3, 1, a.resv_id, true),
                     XFER_ERR_NOT_FOUND);
    xfer_shard_del(s);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Cancel                                                                  */
/* ---------------------------------------------------------------------- */

/* Device pools (issue 25): a copy into the region holds it as its write
 * does.  No commit while it runs, a cancel meanwhile frees only at the
 * copy's end, copy_end ends the write, and the count is per record and
 * bounded by the writes in flight. */
START_TEST(test_shard_copy_holds_region_until_it_ends)
{
    xfer_shard *s = mk();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 512);
    xfer_resv_info b = reserve_ok(s, 0, 2, 1, 512);
    /* no write in flight: no copy to count */
    ck_assert_int_eq(xfer_shard_copy_begin(s, 1, 1, a.resv_id),
                     XFER_ERR_STATE);
    ck_assert_int_eq(xfer_shard_copy_end(s, 1, 1, a.resv_id, true),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_copy_begin(s, 1, 3, a.resv_id),
                     XFER_ERR_NOT_FOUND);
    begin_ok(s, 1, 1, 1, &a);
    ck_assert_int_eq(xfer_shard_copy_begin(s, 2, 1, b.resv_id),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_copy_begin(s, 2, 1, a.resv_id), 0);
    ck_assert_uint_eq(xfer_shard_copies(s, 1), 1);
    ck_assert_uint_eq(xfer_shard_copies(s, 2), 0);
    /* one write, one copy */
    ck_assert_int_eq(xfer_shard_copy_begin(s, 2, 1, a.resv_id),
                     XFER_ERR_STATE);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_WRITING);
    ck_assert_int_ne(xfer_shard_commit(s, 3, 1, 1, a.resv_id), 0);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_READY, 1), 0);
    ck_assert_int_eq(xfer_shard_copy_end(s, 4, 1, a.resv_id, true), 0);
    ck_assert_uint_eq(xfer_shard_copies(s, 1), 0);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_RESERVED);
    ck_assert_int_eq(xfer_shard_commit(s, 5, 1, 1, a.resv_id), 0);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_READY, 1), 1);
    /* b: cancelled under its copy, freed when the copy ends (failed) */
    begin_ok(s, 6, 2, 1, &b);
    ck_assert_int_eq(xfer_shard_copy_begin(s, 6, 2, b.resv_id), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, 7, 2, 1, XFER_RESV_NONE), 0);
    ck_assert_int_eq(xfer_shard_state(s, 2), XFER_RESV_STATE_CANCEL_PENDING);
    ck_assert_uint_eq(stats(s).bytes_in_use, 1024);
    ck_assert_int_eq(xfer_shard_copy_end(s, 8, 2, b.resv_id, false),
                     XFER_ERR_CANCELLED);
    ck_assert_int_eq(xfer_shard_state(s, 2), XFER_RESV_STATE_CANCELLED);
    ck_assert_uint_eq(stats(s).bytes_in_use, 512);
    ck_assert_int_eq(xfer_shard_copy_end(s, 9, 2, b.resv_id, true),
                     XFER_ERR_NOT_FOUND);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_cancel_during_write_is_deferred)
{
    xfer_shard *s = mk();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 512);
    begin_ok(s, 1, 1, 1, &a);
    ck_assert_int_eq(xfer_shard_cancel(s, 2, 1, 1, XFER_RESV_NONE), 0);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_CANCEL_PENDING);
    ck_assert_uint_eq(stats(s).bytes_in_use, 512);
    ck_assert_uint_eq(count_events(s, -1, 0), 0);
    /* Nothing new lands or commits meanwhile; a repeated cancel is ok. */
    uint8_t *dst;
    ck_assert_int_eq(xfer_shard_write_begin(s, 3, 1, 1, a.resv_id, 0, 1,
                                            &dst),
                     XFER_ERR_CANCELLED);
    ck_assert_int_eq(xfer_shard_commit(s, 3, 1, 1, a.resv_id),
                     XFER_ERR_CANCELLED);
    ck_assert_int_eq(xfer_shard_cancel(s, 3, 1, 1, a.resv_id), 0);
    xfer_resv_info again;
    ck_assert_int_eq(xfer_shard_reserve(s, 3, 1, 1, 512, &again),
                     XFER_ERR_STATE);
    /* The lease firing meanwhile changes nothing. */
    xfer_shard_on_timer(s, LEASE);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_CANCEL_PENDING);
    ck_assert_uint_eq(stats(s).bytes_in_use, 512);
    ck_assert_int_eq(xfer_shard_write_end(s, LEASE + 1, 1, a.resv_id, true),
                     XFER_ERR_CANCELLED);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_CANCELLED);
    ck_assert_uint_eq(stats(s).bytes_in_use, 0);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_CANCELLED, 1), 1);
    ck_assert_uint_eq(count_events(s, -1, 0), 1);
    ck_assert_uint_eq(stats(s).deferred_frees, 1);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_cancel_frees_reserved_and_ready_at_once)
{
    xfer_shard *s = mk();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 100);
    xfer_resv_info b = reserve_ok(s, 0, 2, 1, 200);
    write_whole(s, 1, 2, 1, &b);
    ck_assert_int_eq(xfer_shard_commit(s, 1, 2, 1, b.resv_id), 0);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_READY, 2), 1);
    xfer_shard_events_clear(s);
    ck_assert_int_eq(xfer_shard_cancel(s, 2, 1, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_CANCELLED);
    ck_assert_uint_eq(stats(s).bytes_in_use, rnd(200));
    ck_assert_int_eq(xfer_shard_cancel(s, 3, 2, 1, XFER_RESV_NONE), 0);
    ck_assert_int_eq(xfer_shard_state(s, 2), XFER_RESV_STATE_CANCELLED);
    ck_assert_uint_eq(stats(s).bytes_in_use, 0);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_CANCELLED, 1), 1);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_CANCELLED, 2), 1);
    /* Cancelling again is acknowledged and changes nothing. */
    ck_assert_int_eq(xfer_shard_cancel(s, 4, 2, 1, b.resv_id), 0);
    ck_assert_uint_eq(count_events(s, -1, 0), 2);
    ck_assert_uint_eq(stats(s).cancels, 2);
    ck_assert_uint_eq(xfer_shard_next_deadline(s), 2 + TTTL);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_taken_memory_survives_cancel_and_lease)
{
    xfer_shard *s = mk();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 300);
    uint8_t pattern[300];
    for (int i = 0; i < 300; i++)
        pattern[i] = (uint8_t)(i * 7);
    ck_assert_int_eq(xfer_shard_write(s, 1, 1, 1, a.resv_id, 0, pattern,
                                      300),
                     0);
    ck_assert_int_eq(xfer_shard_commit(s, 2, 1, 1, a.resv_id), 0);
    const uint8_t *data;
    uint32_t len;
    ck_assert_int_eq(xfer_shard_take(s, 3, 1, a.resv_id, &data, &len), 0);
    ck_assert_uint_eq(len, 300);
    ck_assert_int_eq(memcmp(data, pattern, 300), 0);
    ck_assert_uint_eq(xfer_shard_next_deadline(s), UINT64_MAX);
    ck_assert_int_eq(xfer_shard_cancel(s, 4, 1, 1, a.resv_id),
                     XFER_ERR_STATE);
    ck_assert_int_eq(xfer_shard_cancel(s, 4, 1, 1, XFER_RESV_NONE),
                     XFER_ERR_STATE);
    xfer_shard_on_timer(s, 100 * LEASE);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_TAKEN);
    ck_assert_uint_eq(stats(s).bytes_in_use, rnd(300));
    /* Nothing else was handed the region. */
    xfer_resv_info b = reserve_ok(s, 100 * LEASE, 2, 1, 300);
    ck_assert_uint_ne(b.addr, a.addr);
    ck_assert_int_eq(memcmp(data, pattern, 300), 0);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_CANCELLED, 0) +
                          count_events(s, XFER_SHARD_EV_EXPIRED, 0),
                      0);
    ck_assert_int_eq(xfer_shard_release(s, 100 * LEASE, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_DONE);
    ck_assert_uint_eq(stats(s).bytes_in_use, rnd(300));
    ck_assert_uint_eq(stats(s).releases, 1);
    ck_assert_int_eq(xfer_shard_cancel(s, 100 * LEASE, 1, 1, a.resv_id),
                     XFER_ERR_STATE);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_preemptive_cancel_refuses_later_reserve)
{
    xfer_shard *s = mk();
    ck_assert_int_eq(xfer_shard_cancel(s, 5, 7, 1, XFER_RESV_NONE), 0);
    ck_assert_int_eq(xfer_shard_state(s, 7), XFER_RESV_STATE_CANCELLED);
    ck_assert_uint_eq(stats(s).tombstones, 1);
    xfer_resv_info info = {0};
    ck_assert_int_eq(xfer_shard_reserve(s, 6, 7, 1, 64, &info),
                     XFER_ERR_CANCELLED);
    ck_assert_int_eq(xfer_shard_reserve(s, 6, 7, 2, 64, &info),
                     XFER_ERR_CANCELLED);
    ck_assert_uint_eq(info.resv_id, 0); /* untouched */
    ck_assert_uint_eq(stats(s).bytes_in_use, 0);
    ck_assert_uint_eq(stats(s).live, 0);
    ck_assert_uint_eq(count_events(s, -1, 0), 0);
    ck_assert_uint_eq(stats(s).refused, 2);
    /* With a reservation id the producer once had: same. */
    ck_assert_int_eq(xfer_shard_cancel(s, 7, 8, 3, 0x1234), 0);
    ck_assert_int_eq(xfer_shard_state(s, 8), XFER_RESV_STATE_CANCELLED);
    ck_assert_int_eq(xfer_shard_reserve(s, 8, 8, 3, 64, &info),
                     XFER_ERR_CANCELLED);
    xfer_shard_del(s);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Attempts, idempotence, bad input                                        */
/* ---------------------------------------------------------------------- */

/* Bring id 1 of attempt 2 into state st (RESERVED, WRITING, READY,
 * TAKEN, CANCEL_PENDING or EXPIRE_PENDING). */
static xfer_resv_info setup_state(xfer_shard *s, unsigned st)
{
    xfer_resv_info b = reserve_ok(s, 0, 1, 2, 256);
    const uint8_t *data;
    uint32_t len;
    if (st == XFER_RESV_STATE_WRITING || st == XFER_RESV_STATE_CANCEL_PENDING ||
        st == XFER_RESV_STATE_EXPIRE_PENDING)
        begin_ok(s, 1, 1, 2, &b);
    if (st == XFER_RESV_STATE_READY || st == XFER_RESV_STATE_TAKEN) {
        write_whole(s, 1, 1, 2, &b);
        ck_assert_int_eq(xfer_shard_commit(s, 1, 1, 2, b.resv_id), 0);
    }
    if (st == XFER_RESV_STATE_TAKEN)
        ck_assert_int_eq(xfer_shard_take(s, 2, 1, b.resv_id, &data, &len),
                         0);
    if (st == XFER_RESV_STATE_CANCEL_PENDING)
        ck_assert_int_eq(xfer_shard_cancel(s, 2, 1, 2, b.resv_id), 0);
    if (st == XFER_RESV_STATE_EXPIRE_PENDING)
        xfer_shard_on_timer(s, LEASE);
    ck_assert_int_eq(xfer_shard_state(s, 1), st);
    return b;
}

static const unsigned live_states[] = {
    XFER_RESV_STATE_RESERVED, XFER_RESV_STATE_WRITING,        XFER_RESV_STATE_READY,
    XFER_RESV_STATE_TAKEN,    XFER_RESV_STATE_CANCEL_PENDING, XFER_RESV_STATE_EXPIRE_PENDING};

START_TEST(test_shard_attempt_isolation)
{
    unsigned st = live_states[_i];
    xfer_shard *s = mk();
    xfer_resv_info b = setup_state(s, st);
    uint8_t *before;
    size_t nbefore = save_into(s, &before);
    xfer_shard_stats st0 = stats(s);
    uint64_t now = LEASE / 2;
    uint8_t *dst;
    xfer_resv_info info;
    /* Attempt 1 never touches attempt 2's record, in any state. */
    ck_assert_int_eq(xfer_shard_cancel(s, now, 1, 1, XFER_RESV_NONE),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_cancel(s, now, 1, 1, b.resv_id),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_cancel(s, now, 1, 2, BAD_RESV),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_cancel(s, now, 1, 3, BAD_RESV),
                     XFER_ERR_STALE);
    ck_assert_int_eq(
        xfer_shard_write_begin(s, now, 1, 1, b.resv_id, 0, 1, &dst),
        XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_commit(s, now, 1, 1, b.resv_id),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_commit(s, now, 1, 2, BAD_RESV),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_reserve(s, now, 1, 1, 256, &info),
                     XFER_ERR_STALE);
    uint8_t *after;
    size_t nafter = save_into(s, &after);
    ck_assert_uint_eq(nbefore, nafter);
    ck_assert_int_eq(memcmp(before, after, nafter), 0);
    ck_assert_uint_eq(stats(s).bytes_in_use, st0.bytes_in_use);
    ck_assert_uint_eq(stats(s).stale, st0.stale + 8);
    ck_assert_int_eq(xfer_shard_state(s, 1), st);
    free(before);
    free(after);
    xfer_shard_del(s);
}
END_TEST

/* Attempt 0 is the consumer scheduler's cancel of the id: it ends whatever
 * attempt holds the id (deferred during a write), except TAKEN data; on an
 * unknown id it leaves a tombstone that refuses every later reserve. */
START_TEST(test_shard_consumer_cancel_any_attempt)
{
    unsigned st = live_states[_i];
    xfer_shard *s = mk();
    setup_state(s, st);
    int rc = xfer_shard_cancel(s, LEASE / 2, 1, 0, XFER_RESV_NONE);
    if (st == XFER_RESV_STATE_TAKEN) {
        ck_assert_int_eq(rc, XFER_ERR_STATE);
        ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_TAKEN);
    } else {
        ck_assert_int_eq(rc, 0);
        unsigned now_st = xfer_shard_state(s, 1);
        if (st == XFER_RESV_STATE_WRITING || st == XFER_RESV_STATE_CANCEL_PENDING)
            ck_assert_int_eq(now_st, XFER_RESV_STATE_CANCEL_PENDING);
        else if (st == XFER_RESV_STATE_EXPIRE_PENDING)
            ck_assert_int_eq(now_st, XFER_RESV_STATE_EXPIRE_PENDING);
        else
            ck_assert_int_eq(now_st, XFER_RESV_STATE_CANCELLED);
    }
    xfer_resv_info info;
    ck_assert_int_eq(xfer_shard_cancel(s, LEASE / 2, 9, 0, XFER_RESV_NONE),
                     0);
    ck_assert_int_eq(xfer_shard_reserve(s, LEASE / 2, 9, 5, 64, &info),
                     XFER_ERR_CANCELLED);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_reserve_idempotent_per_attempt)
{
    xfer_shard *s = mk();
    xfer_resv_info a = reserve_ok(s, 0, 1, 4, 1000);
    xfer_resv_info again = reserve_ok(s, 1, 1, 4, 1000);
    same_info(&a, &again);
    begin_ok(s, 2, 1, 4, &a);
    again = reserve_ok(s, 3, 1, 4, 1000);
    same_info(&a, &again);
    ck_assert_uint_eq(stats(s).live, 1);
    ck_assert_uint_eq(stats(s).bytes_in_use, rnd(1000));
    ck_assert_uint_eq(stats(s).reserves, 1);
    xfer_resv_info other = {0};
    ck_assert_int_eq(xfer_shard_reserve(s, 4, 1, 5, 1000, &other),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_reserve(s, 4, 1, 3, 1000, &other),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_reserve(s, 4, 1, 4, 999, &other),
                     XFER_ERR_INVALID_ARG);
    ck_assert_uint_eq(other.resv_id, 0);
    ck_assert_int_eq(xfer_shard_write_end(s, 5, 1, a.resv_id, true), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 6, 1, 4, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_reserve(s, 7, 1, 4, 1000, &other),
                     XFER_ERR_STATE);
    /* Commit is acked again in READY and TAKEN; refused while writing. */
    ck_assert_int_eq(xfer_shard_commit(s, 8, 1, 4, a.resv_id), 0);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_READY, 1), 1);
    xfer_resv_info c = reserve_ok(s, 9, 2, 1, 64);
    begin_ok(s, 9, 2, 1, &c);
    ck_assert_int_eq(xfer_shard_commit(s, 9, 2, 1, c.resv_id),
                     XFER_ERR_STATE);
    ck_assert_int_eq(xfer_shard_state(s, 2), XFER_RESV_STATE_WRITING);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_bad_writes_change_nothing)
{
    xfer_shard *s = mk();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 100);
    uint8_t *before;
    size_t nbefore = save_into(s, &before);
    uint8_t *dst = (uint8_t *)&dst;
    uint8_t *const sentinel = dst;
    ck_assert_int_eq(xfer_shard_write_begin(s, 1, 1, 1, a.resv_id, 100, 1,
                                            &dst),
                     XFER_ERR_BOUNDS);
    ck_assert_int_eq(xfer_shard_write_begin(s, 1, 1, 1, a.resv_id, 1, 100,
                                            &dst),
                     XFER_ERR_BOUNDS);
    ck_assert_int_eq(xfer_shard_write_begin(s, 1, 1, 1, a.resv_id,
                                            UINT64_MAX - 5, 10, &dst),
                     XFER_ERR_BOUNDS);
    ck_assert_int_eq(xfer_shard_write_begin(s, 1, 1, 1, BAD_RESV, 0, 1,
                                            &dst),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_write_begin(s, 1, 1, 1, XFER_RESV_NONE, 0,
                                            1, &dst),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_write_begin(s, 1, 99, 1, a.resv_id, 0, 1,
                                            &dst),
                     XFER_ERR_NOT_FOUND);
    ck_assert_ptr_eq(dst, sentinel);
    /* write_end without a matching write_begin never reaches the table. */
    ck_assert_int_eq(xfer_shard_write_end(s, 1, 1, a.resv_id, true),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_write_end(s, 1, 99, a.resv_id, true),
                     XFER_ERR_NOT_FOUND);
    ck_assert_int_eq(xfer_shard_commit(s, 1, 99, 1, a.resv_id),
                     XFER_ERR_NOT_FOUND);
    const uint8_t *data;
    uint32_t len;
    ck_assert_int_eq(xfer_shard_take(s, 1, 1, a.resv_id, &data, &len),
                     XFER_ERR_STATE);
    ck_assert_int_eq(xfer_shard_release(s, 1, 1, a.resv_id),
                     XFER_ERR_STATE);
    ck_assert_int_eq(xfer_shard_write(s, 1, 1, 1, a.resv_id, 0, NULL, 5),
                     XFER_ERR_INVALID_ARG);
    uint8_t *after;
    size_t nafter = save_into(s, &after);
    ck_assert_uint_eq(nbefore, nafter);
    ck_assert_int_eq(memcmp(before, after, nafter), 0);
    ck_assert_uint_eq(stats(s).writes, 0);
    ck_assert_uint_eq(stats(s).illegal, 0);
    /* A write exactly to the end is fine. */
    ck_assert_int_eq(xfer_shard_write_begin(s, 2, 1, 1, a.resv_id, 99, 1,
                                            &dst),
                     0);
    ck_assert_ptr_eq(dst, xfer_shard_pool_base(s) + a.addr + 99);
    free(before);
    free(after);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_invalid_arguments)
{
    xfer_shard_config c = base_cfg();
    xfer_shard *s = (xfer_shard *)&c;
    xfer_shard *const sentinel = s;
    c.pool_bytes = 0;
    ck_assert_int_eq(xfer_shard_new(&c, &s), XFER_ERR_INVALID_ARG);
    c = base_cfg();
    c.align = 48;
    ck_assert_int_eq(xfer_shard_new(&c, &s), XFER_ERR_INVALID_ARG);
    c = base_cfg();
    c.pool_bytes = 32; /* smaller than the alignment */
    ck_assert_int_eq(xfer_shard_new(&c, &s), XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_new(NULL, &s), XFER_ERR_INVALID_ARG);
    ck_assert_ptr_eq(s, sentinel);
    c = base_cfg();
    ck_assert_int_eq(xfer_shard_new(&c, NULL), XFER_ERR_INVALID_ARG);

    s = mk();
    xfer_resv_info info;
    uint8_t *dst;
    const uint8_t *data;
    uint32_t len;
    ck_assert_int_eq(xfer_shard_reserve(s, 0, 0, 1, 1, &info),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_reserve(s, 0, 1, 1, 1, NULL),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_reserve(NULL, 0, 1, 1, 1, &info),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_write_begin(s, 0, 1, 1, 1, 0, 1, NULL),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_take(s, 0, 1, 1, &data, NULL),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_cancel(s, 0, 0, 1, 0), XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_write_begin(s, 0, 0, 1, 1, 0, 1, &dst),
                     XFER_ERR_INVALID_ARG);
    (void)len;
    ck_assert_uint_eq(stats(s).live, 0);
    ck_assert_uint_eq(stats(s).tombstones, 0);
    xfer_shard_del(s);
    xfer_shard_del(NULL);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Caps and tombstones                                                     */
/* ---------------------------------------------------------------------- */

START_TEST(test_shard_pool_flood_then_room_again)
{
    xfer_shard_config c = base_cfg();
    c.pool_bytes = 8 * 1024;
    xfer_shard *s = mk_cfg(c);
    xfer_resv_info r[8];
    xfer_resv_info x;
    for (uint64_t id = 1; id <= 8; id++)
        r[id - 1] = reserve_ok(s, 0, id, 1, 1024);
    for (uint64_t id = 9; id <= 12; id++)
        ck_assert_int_eq(xfer_shard_reserve(s, 0, id, 1, 1, &x),
                         XFER_ERR_NO_SPACE);
    ck_assert_uint_eq(stats(s).bytes_in_use, 8 * 1024);
    ck_assert_uint_eq(stats(s).live, 8);
    ck_assert_int_eq(xfer_shard_state(s, 9), XFER_RESV_STATE_NONE);
    /* Freeing two neighbours makes room for one double-size region. */
    ck_assert_int_eq(xfer_shard_cancel(s, 1, 3, 1, r[2].resv_id), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, 1, 4, 1, r[3].resv_id), 0);
    x = reserve_ok(s, 2, 9, 1, 2048);
    ck_assert_uint_eq(x.addr, r[2].addr);
    /* Leases free the rest. */
    xfer_shard_on_timer(s, LEASE);
    ck_assert_uint_eq(stats(s).bytes_in_use, 2048);
    ck_assert_int_eq(xfer_shard_reserve(s, LEASE, 10, 1, 6 * 1024, &x),
                     XFER_ERR_NO_SPACE); /* 6 KiB free, in two pieces */
    x = reserve_ok(s, LEASE, 10, 1, 4096);
    ck_assert_uint_eq(x.addr, 4096);
    ck_assert_uint_eq(stats(s).bytes_in_use, 6 * 1024);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_reservation_cap_busy)
{
    xfer_shard_config c = base_cfg();
    c.max_reservations = 4;
    xfer_shard *s = mk_cfg(c);
    xfer_resv_info r[4], x;
    for (uint64_t id = 1; id <= 4; id++)
        r[id - 1] = reserve_ok(s, 0, id, 1, 64);
    ck_assert_int_eq(xfer_shard_reserve(s, 0, 5, 1, 64, &x), XFER_ERR_BUSY);
    ck_assert_int_eq(xfer_shard_state(s, 5), XFER_RESV_STATE_NONE);
    ck_assert_uint_eq(stats(s).bytes_in_use, 4 * 64);
    ck_assert_int_eq(xfer_shard_cancel(s, 1, 1, 1, r[0].resv_id), 0);
    reserve_ok(s, 1, 5, 1, 64);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_tombstone_cap_never_evicts_young)
{
    xfer_shard_config c = base_cfg();
    c.max_reservations = 2;
    c.max_tombstones = 4;
    xfer_shard *s = mk_cfg(c);
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 64);
    xfer_resv_info b = reserve_ok(s, 0, 2, 1, 64);
    ck_assert_int_eq(xfer_shard_cancel(s, 10, 1, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, 10, 2, 1, b.resv_id), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, 20, 3, 1, XFER_RESV_NONE), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, 20, 4, 1, XFER_RESV_NONE), 0);
    ck_assert_uint_eq(stats(s).tombstones, 4);
    xfer_resv_info x;
    uint64_t young = 10 + TTTL - 1;
    ck_assert_int_eq(xfer_shard_reserve(s, young, 5, 1, 64, &x),
                     XFER_ERR_BUSY);
    ck_assert_int_eq(xfer_shard_cancel(s, young, 6, 1, XFER_RESV_NONE),
                     XFER_ERR_BUSY);
    for (uint64_t id = 1; id <= 4; id++)
        ck_assert_int_eq(xfer_shard_state(s, id), XFER_RESV_STATE_CANCELLED);
    ck_assert_int_eq(xfer_shard_state(s, 5), XFER_RESV_STATE_NONE);
    ck_assert_int_eq(xfer_shard_state(s, 6), XFER_RESV_STATE_NONE);
    ck_assert_uint_eq(stats(s).live, 0);
    ck_assert_uint_eq(stats(s).bytes_in_use, 0);
    /* After the TTL of the oldest two, room again (without on_timer). */
    reserve_ok(s, 10 + TTTL, 5, 1, 64);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_NONE);
    ck_assert_int_eq(xfer_shard_state(s, 2), XFER_RESV_STATE_NONE);
    ck_assert_int_eq(xfer_shard_state(s, 3), XFER_RESV_STATE_CANCELLED);
    ck_assert_int_eq(xfer_shard_cancel(s, 10 + TTTL, 6, 1, XFER_RESV_NONE),
                     0);
    /* Now full again: 5 holds one slot, 3, 4 and 6 the others. */
    ck_assert_int_eq(xfer_shard_cancel(s, 10 + TTTL, 7, 1, XFER_RESV_NONE),
                     XFER_ERR_BUSY);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_tombstones_expire_after_ttl)
{
    xfer_shard_config c = base_cfg();
    tu_trace tr = {0};
    c.trace = tu_trace_sink(&tr);
    xfer_shard *s = mk_cfg(c);
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 64);
    ck_assert_int_eq(xfer_shard_cancel(s, 50, 1, 1, a.resv_id), 0);
    ck_assert_uint_eq(xfer_shard_next_deadline(s), 50 + TTTL);
    xfer_shard_on_timer(s, 50 + TTTL - 1);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_CANCELLED);
    xfer_shard_on_timer(s, 50 + TTTL);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_NONE);
    ck_assert_uint_eq(stats(s).tombstones, 0);
    ck_assert_uint_eq(xfer_shard_next_deadline(s), UINT64_MAX);
    const xfer_trace_rec *last = &tr.recs[tr.n - 1];
    ck_assert_uint_eq(last->event, XFER_RESV_EVENT_TOMB_EXPIRE);
    ck_assert_uint_eq(last->old_state, XFER_RESV_STATE_CANCELLED);
    ck_assert_uint_eq(last->new_state, XFER_RESV_STATE_NONE);
    ck_assert_uint_eq(last->verdict, XFER_VERDICT_TRANSITION);
    /* The id is free for a new life. */
    xfer_resv_info b = reserve_ok(s, 50 + TTTL, 1, 2, 64);
    ck_assert_uint_ne(b.resv_id, a.resv_id);
    tu_trace_free(&tr);
    xfer_shard_del(s);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Events, trace, foreach                                                  */
/* ---------------------------------------------------------------------- */

START_TEST(test_shard_event_list_is_bounded)
{
    xfer_shard_config c = base_cfg();
    c.max_reservations = 4; /* 20 events fit */
    xfer_shard *s = mk_cfg(c);
    uint64_t id = 1;
    int rc = 0;
    /* Nobody drains the events: commit and cancel refuse, never grow. */
    while (rc == 0 && id < 100) {
        xfer_resv_info a = reserve_ok(s, 0, id, 1, 64);
        write_whole(s, 0, id, 1, &a);
        rc = xfer_shard_commit(s, 0, id, 1, a.resv_id);
        if (rc == 0)
            rc = xfer_shard_cancel(s, 0, id, 1, a.resv_id);
        id++;
    }
    ck_assert_int_eq(rc, XFER_ERR_BUSY);
    size_t n;
    xfer_shard_events(s, &n);
    ck_assert_uint_eq(n, 20);
    uint64_t last = id - 1;
    ck_assert(xfer_shard_state(s, last) == XFER_RESV_STATE_RESERVED ||
              xfer_shard_state(s, last) == XFER_RESV_STATE_READY);
    /* Leases wait too: the timer leaves them due. */
    xfer_shard_on_timer(s, LEASE);
    ck_assert(xfer_shard_state(s, last) != XFER_RESV_STATE_EXPIRED);
    ck_assert_uint_le(xfer_shard_next_deadline(s), LEASE);
    xfer_shard_events_clear(s);
    xfer_shard_on_timer(s, LEASE);
    ck_assert_int_eq(xfer_shard_state(s, last), XFER_RESV_STATE_EXPIRED);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_EXPIRED, last), 1);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_trace_one_record_per_call)
{
    xfer_shard_config c = base_cfg();
    tu_trace tr = {0};
    c.trace = tu_trace_sink(&tr);
    xfer_shard *s = mk_cfg(c);
    xfer_resv_info a = reserve_ok(s, 7, 1, 2, 100);
    ck_assert_uint_eq(tr.n, 1);
    const xfer_trace_rec *r = &tr.recs[0];
    ck_assert_uint_eq(r->machine, XFER_MACHINE_RESERVATION);
    ck_assert_uint_eq(r->seq, 0);
    ck_assert_uint_eq(r->time_ns, 7);
    ck_assert_uint_eq(r->id, 1);
    ck_assert_uint_eq(r->attempt, 2);
    ck_assert_uint_eq(r->shard, 3);
    ck_assert_uint_eq(r->old_state, XFER_RESV_STATE_NONE);
    ck_assert_uint_eq(r->event, XFER_RESV_EVENT_RESERVE);
    ck_assert_uint_eq(r->new_state, XFER_RESV_STATE_RESERVED);
    ck_assert_uint_eq(r->arg0, a.resv_id);
    ck_assert_uint_eq(r->arg1, a.addr);
    ck_assert_uint_eq(r->arg2, 100);
    ck_assert_int_eq(r->error, 0);
    ck_assert_int_eq(xfer_shard_commit(s, 8, 1, 1, a.resv_id),
                     XFER_ERR_STALE);
    ck_assert_uint_eq(tr.n, 2);
    ck_assert_int_eq(tr.recs[1].error, XFER_ERR_STALE);
    ck_assert_uint_eq(tr.recs[1].seq, 1);
    ck_assert_uint_eq(tr.recs[1].new_state, XFER_RESV_STATE_RESERVED);
    uint8_t *dst;
    ck_assert_int_eq(xfer_shard_write_begin(s, 9, 1, 2, a.resv_id, 10, 20,
                                            &dst),
                     0);
    ck_assert_uint_eq(tr.n, 3);
    ck_assert_uint_eq(tr.recs[2].arg1, 10);
    ck_assert_uint_eq(tr.recs[2].arg2, 20);
    ck_assert_uint_eq(tu_trace_count(&tr, XFER_MACHINE_RESERVATION, -1), 3);
    tu_trace_free(&tr);
    xfer_shard_del(s);
}
END_TEST

typedef struct seen {
    uint64_t id[16];
    unsigned st[16];
    int n;
} seen;

static void collect(void *ud, uint64_t id, uint32_t attempt,
                    xfer_resv_state st, uint64_t since_ns)
{
    seen *v = ud;
    ck_assert_int_lt(v->n, 16);
    v->id[v->n] = id;
    v->st[v->n++] = st;
}

START_TEST(test_shard_foreach_order)
{
    xfer_shard *s = mk();
    const uint64_t ids[] = {30, 10, 50, 20, 40};
    xfer_resv_info r[5];
    for (int i = 0; i < 5; i++)
        r[i] = reserve_ok(s, (uint64_t)i, ids[i], 1, 64);
    ck_assert_int_eq(xfer_shard_cancel(s, 10, 50, 1, r[2].resv_id), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, 11, 30, 1, r[0].resv_id), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, 12, 5, 1, XFER_RESV_NONE), 0);
    seen v = {0};
    xfer_shard_foreach(s, collect, &v);
    /* live by id, then tombstones oldest first */
    const uint64_t want[] = {10, 20, 40, 50, 30, 5};
    ck_assert_int_eq(v.n, 6);
    for (int i = 0; i < 6; i++)
        ck_assert_uint_eq(v.id[i], want[i]);
    ck_assert_uint_eq(v.st[0], XFER_RESV_STATE_RESERVED);
    ck_assert_uint_eq(v.st[5], XFER_RESV_STATE_CANCELLED);
    xfer_shard_del(s);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Allocation failure                                                      */
/* ---------------------------------------------------------------------- */

START_TEST(test_shard_alloc_failure_each_allocation)
{
    xfer_shard_config c = base_cfg();
    long k;
    for (k = 0; k < 100; k++) {
        tu_alloc ta;
        tu_alloc_init(&ta, k);
        c.alloc = tu_allocator(&ta);
        xfer_shard *s = (xfer_shard *)&ta;
        int rc = xfer_shard_new(&c, &s);
        if (rc == 0) {
            ck_assert_ptr_ne(s, (xfer_shard *)&ta);
            /* From here on nothing may allocate: every call works with
             * an allocator that fails. */
            ta.fail_after = ta.calls;
            xfer_resv_info a = reserve_ok(s, 0, 1, 1, 128);
            begin_ok(s, 1, 1, 1, &a);
            ck_assert_int_eq(xfer_shard_cancel(s, 2, 1, 1, a.resv_id), 0);
            ck_assert_int_eq(xfer_shard_cancel(s, 2, 9, 1, 0), 0);
            ck_assert_int_eq(xfer_shard_write_end(s, 3, 1, a.resv_id, true),
                             XFER_ERR_CANCELLED);
            xfer_shard_on_timer(s, 10 * TTTL);
            ck_assert_int_eq(ta.failures, 0);
            xfer_shard_del(s);
            ck_assert_int_eq(ta.live, 0);
            break;
        }
        ck_assert_int_eq(rc, XFER_ERR_NOMEM);
        ck_assert_ptr_eq(s, (xfer_shard *)&ta);
        ck_assert_int_eq(ta.live, 0);
    }
    ck_assert_int_gt(k, 5); /* every allocation was failed once */
    ck_assert_int_lt(k, 100);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* One-sided shards (RDMA): nothing is freed or published before the     */
/* rkey's invalidation completed                                           */
/* ---------------------------------------------------------------------- */

static xfer_shard *mk_one_sided(void)
{
    xfer_shard_config c = base_cfg();
    c.one_sided = true;
    return mk_cfg(c);
}

/* The one pending invalidation request is for (id, attempt, resv); the
 * list is cleared, as a driver does. */
static void asked_once(xfer_shard *s, uint64_t id, uint32_t attempt,
                       uint64_t resv)
{
    size_t n;
    const xfer_shard_inval *q = xfer_shard_invalidations(s, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(q[0].id, id);
    ck_assert_uint_eq(q[0].attempt, attempt);
    ck_assert_uint_eq(q[0].resv_id, resv);
    xfer_shard_invalidations_clear(s);
}

static size_t asked(const xfer_shard *s)
{
    size_t n;
    xfer_shard_invalidations(s, &n);
    return n;
}

START_TEST(test_shard_one_sided_commit_ready_only_after_invalidation)
{
    xfer_shard *s = mk_one_sided();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 256);
    ck_assert_uint_eq(asked(s), 0); /* a reserve asks nothing */
    ck_assert_int_eq(xfer_shard_commit(s, 1, 1, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_COMMIT_INVAL);
    ck_assert_uint_eq(count_events(s, -1, 0), 0); /* no READY yet */
    asked_once(s, 1, 1, a.resv_id);
    /* The commit is applied: a repeat is acked and asks nothing more; the
     * data cannot be taken before it is READY. */
    ck_assert_int_eq(xfer_shard_commit(s, 2, 1, 1, a.resv_id), 0);
    ck_assert_uint_eq(asked(s), 0);
    const uint8_t *data;
    uint32_t len;
    ck_assert_int_eq(xfer_shard_take(s, 2, 1, a.resv_id, &data, &len),
                     XFER_ERR_STATE);
    ck_assert_int_eq(xfer_shard_invalidated(s, 3, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_READY);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_READY, 1), 1);
    ck_assert_uint_eq(count_events(s, -1, 0), 1);
    ck_assert_int_eq(xfer_shard_take(s, 4, 1, a.resv_id, &data, &len), 0);
    ck_assert_uint_eq(len, 256);
    /* READY data was invalidated already: the release frees at once. */
    ck_assert_int_eq(xfer_shard_release(s, 5, 1, a.resv_id), 0);
    ck_assert_uint_eq(stats(s).bytes_in_use, 0);
    ck_assert_uint_eq(asked(s), 0);
    ck_assert_uint_eq(stats(s).illegal, 0);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_one_sided_cancel_frees_only_after_invalidation)
{
    xfer_shard_config c = base_cfg();
    c.one_sided = true;
    c.pool_bytes = 4096; /* room for one region only */
    xfer_shard *s = mk_cfg(c);
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 4096);
    ck_assert_int_eq(xfer_shard_cancel(s, 1, 1, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_CANCEL_INVAL);
    asked_once(s, 1, 1, a.resv_id);
    /* The region is still held: a write may still land in it. */
    ck_assert_uint_eq(stats(s).bytes_in_use, 4096);
    ck_assert_uint_eq(count_events(s, -1, 0), 0);
    xfer_resv_info b;
    ck_assert_int_eq(xfer_shard_reserve(s, 2, 2, 1, 4096, &b),
                     XFER_ERR_NO_SPACE);
    /* Everything else is refused or acked; nothing moves. */
    ck_assert_int_eq(xfer_shard_cancel(s, 2, 1, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 2, 1, 1, a.resv_id),
                     XFER_ERR_CANCELLED);
    ck_assert_int_eq(xfer_shard_reserve(s, 2, 1, 1, 4096, &b),
                     XFER_ERR_STATE); /* held, as in CANCEL_PENDING */
    xfer_shard_on_timer(s, LEASE); /* the lease firing changes nothing */
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_CANCEL_INVAL);
    ck_assert_uint_eq(asked(s), 0);
    ck_assert_int_eq(xfer_shard_invalidated(s, LEASE, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_CANCELLED);
    ck_assert_uint_eq(stats(s).bytes_in_use, 0);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_CANCELLED, 1), 1);
    reserve_ok(s, LEASE, 2, 1, 4096); /* the room is back */
    ck_assert_uint_eq(stats(s).illegal, 0);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_one_sided_lease_expiry_waits_for_invalidation)
{
    xfer_shard *s = mk_one_sided();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 100);
    xfer_shard_on_timer(s, LEASE);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_EXPIRE_INVAL);
    ck_assert_uint_eq(stats(s).bytes_in_use, rnd(100));
    ck_assert_uint_eq(count_events(s, -1, 0), 0);
    asked_once(s, 1, 1, a.resv_id);
    /* No lease is left to fire, and the tombstone is not there yet. */
    ck_assert_uint_eq(xfer_shard_next_deadline(s), UINT64_MAX);
    ck_assert_int_eq(xfer_shard_cancel(s, LEASE, 1, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_invalidated(s, 2 * LEASE, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_EXPIRED);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_EXPIRED, 1), 1);
    ck_assert_uint_eq(stats(s).bytes_in_use, 0);
    ck_assert_uint_eq(xfer_shard_next_deadline(s), 2 * LEASE + TTTL);
    xfer_shard_del(s);
}
END_TEST

/* A cancel or a lease expiry while the commit's invalidation runs: the
 * commit is never published, one invalidation serves, and the region is
 * freed when it completes. */
START_TEST(test_shard_one_sided_cancel_or_expiry_during_commit_inval)
{
    for (int expiry = 0; expiry < 2; expiry++) {
        xfer_shard *s = mk_one_sided();
        xfer_resv_info a = reserve_ok(s, 0, 1, 1, 64);
        ck_assert_int_eq(xfer_shard_commit(s, 1, 1, 1, a.resv_id), 0);
        asked_once(s, 1, 1, a.resv_id);
        if (expiry) {
            xfer_shard_on_timer(s, LEASE);
            ck_assert_int_eq(xfer_shard_state(s, 1),
                             XFER_RESV_STATE_EXPIRE_INVAL);
        } else {
            /* the consumer scheduler's cancel (attempt 0) */
            ck_assert_int_eq(xfer_shard_cancel(s, 2, 1, 0, XFER_RESV_NONE),
                             0);
            ck_assert_int_eq(xfer_shard_state(s, 1),
                             XFER_RESV_STATE_CANCEL_INVAL);
        }
        ck_assert_uint_eq(asked(s), 0);
        ck_assert_uint_eq(count_events(s, -1, 0), 0);
        ck_assert_int_eq(xfer_shard_invalidated(s, LEASE, 1, a.resv_id), 0);
        ck_assert_int_eq(xfer_shard_state(s, 1),
                         expiry ? XFER_RESV_STATE_EXPIRED
                                : XFER_RESV_STATE_CANCELLED);
        ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_READY, 1), 0);
        ck_assert_uint_eq(count_events(s, -1, 1), 1);
        ck_assert_uint_eq(stats(s).bytes_in_use, 0);
        xfer_shard_del(s);
    }
}
END_TEST

/* A two-sided write into a one-sided shard (a TCP producer): a cancel
 * during it is deferred as ever, and the last write end starts the
 * invalidation instead of freeing. */
START_TEST(test_shard_one_sided_deferred_cancel_then_invalidation)
{
    xfer_shard *s = mk_one_sided();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 512);
    begin_ok(s, 1, 1, 1, &a);
    ck_assert_int_eq(xfer_shard_cancel(s, 2, 1, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_CANCEL_PENDING);
    ck_assert_uint_eq(asked(s), 0);
    ck_assert_int_eq(xfer_shard_write_end(s, 3, 1, a.resv_id, true),
                     XFER_ERR_CANCELLED);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_CANCEL_INVAL);
    ck_assert_uint_eq(stats(s).bytes_in_use, 512);
    asked_once(s, 1, 1, a.resv_id);
    ck_assert_int_eq(xfer_shard_invalidated(s, 4, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_CANCELLED);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_CANCELLED, 1), 1);
    ck_assert_uint_eq(stats(s).bytes_in_use, 0);
    xfer_shard_del(s);
}
END_TEST

/* An invalidation nobody waits for is refused and changes nothing (and
 * never reaches an ILLEGAL cell). */
START_TEST(test_shard_one_sided_stray_invalidation_refused)
{
    xfer_shard *s = mk_one_sided();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 64);
    xfer_resv_info b = reserve_ok(s, 0, 2, 1, 64);
    ck_assert_int_eq(xfer_shard_commit(s, 0, 2, 1, b.resv_id), 0);
    ck_assert_int_eq(xfer_shard_invalidated(s, 1, 9, 1), XFER_ERR_NOT_FOUND);
    ck_assert_int_eq(xfer_shard_invalidated(s, 1, 1, a.resv_id),
                     XFER_ERR_STALE); /* RESERVED: nothing was asked */
    ck_assert_int_eq(xfer_shard_invalidated(s, 1, 2, BAD_RESV),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_invalidated(s, 1, 0, 1),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_invalidated(NULL, 1, 1, 1),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_RESERVED);
    ck_assert_int_eq(xfer_shard_state(s, 2), XFER_RESV_STATE_COMMIT_INVAL);
    ck_assert_int_eq(xfer_shard_invalidated(s, 1, 2, b.resv_id), 0);
    ck_assert_int_eq(xfer_shard_invalidated(s, 1, 2, b.resv_id),
                     XFER_ERR_STALE); /* READY now: once only */
    ck_assert_uint_eq(stats(s).illegal, 0);
    ck_assert_uint_eq(stats(s).stale, 3);
    xfer_shard_del(s);
}
END_TEST

/* A two-sided shard never asks, and a version-1 config is two-sided
 * whatever byte its padding holds where one_sided now lives. */
START_TEST(test_shard_one_sided_off_by_default_and_in_version_1)
{
    for (int v1 = 0; v1 < 2; v1++) {
        xfer_shard_config c = base_cfg();
        ck_assert(!c.one_sided);
        if (v1) {
            c.version = 1;
            memset(&c.one_sided, 0xff, sizeof c.one_sided);
        }
        xfer_shard *s = mk_cfg(c);
        xfer_resv_info a = reserve_ok(s, 0, 1, 1, 64);
        write_whole(s, 0, 1, 1, &a); /* two-sided: commit needs it */
        ck_assert_int_eq(xfer_shard_commit(s, 0, 1, 1, a.resv_id), 0);
        ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_READY);
        ck_assert_uint_eq(asked(s), 0);
        ck_assert_ptr_nonnull(xfer_shard_events(s, NULL));
        xfer_shard_del(s);
    }
}
END_TEST

/* The request list is bounded by the reservation cap and never fails,
 * even when a driver forgets to clear it. */
START_TEST(test_shard_one_sided_request_list_bounded)
{
    xfer_shard_config c = base_cfg();
    c.one_sided = true;
    c.max_reservations = 4;
    c.max_tombstones = 1024;
    xfer_shard *s = mk_cfg(c);
    uint64_t id = 1;
    for (int round = 0; round < 50; round++) {
        for (int k = 0; k < 4; k++, id++) {
            xfer_resv_info a = reserve_ok(s, 0, id, 1, 64);
            ck_assert_int_eq(xfer_shard_cancel(s, 0, id, 1, a.resv_id), 0);
            ck_assert_uint_le(asked(s), 4);
            size_t n;
            const xfer_shard_inval *q = xfer_shard_invalidations(s, &n);
            ck_assert_uint_eq(q[n - 1].id, id); /* the newest is there */
            ck_assert_int_eq(xfer_shard_invalidated(s, 0, id, a.resv_id),
                             0);
        }
        xfer_shard_events_clear(s);
    }
    ck_assert_uint_eq(stats(s).live, 0);
    ck_assert_uint_eq(stats(s).illegal, 0);
    xfer_shard_del(s);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Seeded random walk                                                      */
/* ---------------------------------------------------------------------- */

#define NID 6
#define MAXW 32

typedef struct mwrite {
    uint64_t id, resv, pool_off; /* pool_off: where the bytes land */
    uint32_t len;
} mwrite;

/* What the test knows about one id. */
typedef struct mid {
    xfer_resv_info info; /* from the last successful reserve */
    uint32_t attempt;
    bool known;
    uint8_t *snap; /* TAKEN: the bytes at take time */
    uint32_t snap_len;
    uint8_t *written; /* [info.len]: 1 where a completed write landed */
} mid;

typedef struct world {
    uint64_t now, rng;
    mid m[NID + 1];
    mwrite w[MAXW];
    unsigned nw;
    /* One-sided walks: which ids hold an rkey that may still let a write
     * in (given at reserve, gone at invalidation), and the invalidation
     * requests the test's "driver" took from the shard. */
    bool one_sided;
    bool rkey[NID + 1];
    xfer_shard_inval q[NID * 4];
    unsigned nq;
} world;

/* C_INVAL and C_OSW (an invalidation, a one-sided write) only in
 * one-sided walks: a two-sided walk draws from the kinds before them. */
enum { C_RESERVE, C_WBEGIN, C_WEND, C_COMMIT, C_CANCEL, C_TAKE, C_RELEASE,
       C_TIMER, C_CLEAR, C_INVAL, C_OSW, C_COUNT };

typedef struct call {
    int kind;
    uint64_t id, resv, off, now;
    uint32_t attempt, len;
    bool ok;
    bool alone;  /* C_WBEGIN: end it (ok) at once, as a transport does */
    unsigned wi; /* C_WEND: index into world.w */
} call;

typedef struct result {
    int rc;
    xfer_resv_info info;
    uint64_t dst_off, data_off;
    uint32_t len;
} result;

static uint64_t pick(world *w, uint64_t n)
{
    return tu_rand(&w->rng) % n;
}

/* Mostly the right attempt and reservation id, sometimes a wrong one. */
static void aim(world *w, call *c)
{
    const mid *m = &w->m[c->id];
    uint64_t r = pick(w, 10);
    c->attempt = m->known && r < 7 ? m->attempt : 1 + (uint32_t)pick(w, 3);
    r = pick(w, 10);
    c->resv = m->known && r < 8 ? m->info.resv_id
              : r < 9          ? XFER_RESV_NONE
                               : 1 + pick(w, 3);
}

static call gen(world *w)
{
    call c = {.kind = (int)pick(w, w->one_sided ? C_COUNT : C_INVAL),
              .now = w->now};
    c.id = 1 + pick(w, NID);
    aim(w, &c);
    switch (c.kind) {
    case C_RESERVE:
        c.len = (uint32_t)pick(w, 2500);
        if (w->m[c.id].known && pick(w, 2))
            c.len = w->m[c.id].info.len;
        break;
    case C_WBEGIN:
        if (w->nw == MAXW) {
            c.kind = C_CLEAR;
            break;
        }
        c.len = (uint32_t)pick(w, 600);
        c.off = pick(w, 4) ? pick(w, 600) : pick(w, 4000);
        if (w->m[c.id].known && pick(w, 2)) { /* the whole region, */
            c.off = 0;
            c.len = w->m[c.id].info.len;
            c.alone = true; /* ended before another write of it begins */
        }
        break;
    case C_WEND:
        if (w->nw == 0) {
            c.kind = C_CLEAR;
            break;
        }
        c.wi = (unsigned)pick(w, w->nw);
        c.id = w->w[c.wi].id;
        c.resv = w->w[c.wi].resv;
        c.ok = pick(w, 4) != 0;
        break;
    case C_TIMER:
        c.now = w->now + pick(w, LEASE / 3);
        break;
    case C_INVAL:
        /* mostly a request the shard made, sometimes a stray one */
        if (w->nq && pick(w, 8)) {
            c.wi = (unsigned)pick(w, w->nq);
            c.id = w->q[c.wi].id;
            c.resv = w->q[c.wi].resv_id;
        }
        break;
    case C_OSW:
        if (!w->rkey[c.id])
            c.kind = C_CLEAR;
        break;
    default:
        break;
    }
    return c;
}

static void fill(uint8_t *p, uint32_t len, uint64_t salt)
{
    for (uint32_t i = 0; i < len; i++)
        p[i] = (uint8_t)(salt + i);
}

static result apply(xfer_shard *s, const world *w, const call *c)
{
    result r = {0};
    uint8_t *dst = NULL;
    const uint8_t *data = NULL;
    uint8_t *base = xfer_shard_pool_base(s);
    switch (c->kind) {
    case C_RESERVE:
        r.rc = xfer_shard_reserve(s, c->now, c->id, c->attempt, c->len,
                                  &r.info);
        break;
    case C_WBEGIN:
        r.rc = xfer_shard_write_begin(s, c->now, c->id, c->attempt, c->resv,
                                      c->off, c->len, &dst);
        if (r.rc == 0) {
            r.dst_off = (uint64_t)(dst - base);
            fill(dst, c->len, c->id);
        }
        if (r.rc == 0 && c->alone)
            r.rc = xfer_shard_write_end(s, c->now, c->id, c->resv, true);
        break;
    case C_WEND:
        /* The bytes land until the write ends. */
        fill(base + w->w[c->wi].pool_off, w->w[c->wi].len, c->now);
        r.rc = xfer_shard_write_end(s, c->now, c->id, c->resv, c->ok);
        break;
    case C_COMMIT:
        r.rc = xfer_shard_commit(s, c->now, c->id, c->attempt, c->resv);
        break;
    case C_CANCEL:
        r.rc = xfer_shard_cancel(s, c->now, c->id, c->attempt, c->resv);
        break;
    case C_TAKE:
        r.rc = xfer_shard_take(s, c->now, c->id, c->resv, &data, &r.len);
        r.data_off = r.rc == 0 ? (uint64_t)(data - base) : 0;
        break;
    case C_RELEASE:
        r.rc = xfer_shard_release(s, c->now, c->id, c->resv);
        break;
    case C_TIMER:
        xfer_shard_on_timer(s, c->now);
        break;
    case C_CLEAR:
        xfer_shard_events_clear(s);
        break;
    case C_INVAL:
        r.rc = xfer_shard_invalidated(s, c->now, c->id, c->resv);
        break;
    case C_OSW:
        /* a one-sided write lands whole, unseen by the shard */
        fill(base + w->m[c->id].info.addr, w->m[c->id].info.len, c->now);
        break;
    default:
        ck_abort();
    }
    return r;
}

/* A write of the current reservation of m ended: its bytes are written
 * (ok) or garbage (not ok). */
static void mark_written(mid *m, const mwrite *wr, bool ok)
{
    if (!m->known || wr->resv != m->info.resv_id || !m->written)
        return;
    uint64_t at = wr->pool_off - m->info.addr;
    for (uint32_t i = 0; i < wr->len && at + i < m->info.len; i++)
        m->written[at + i] = ok;
}

/* One-sided walks: take the shard's new invalidation requests, as a
 * driver does after every call. */
static void take_requests(world *w, xfer_shard *s)
{
    size_t n;
    const xfer_shard_inval *q = xfer_shard_invalidations(s, &n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_lt(w->nq, sizeof w->q / sizeof w->q[0]);
        w->q[w->nq++] = q[i];
    }
    xfer_shard_invalidations_clear(s);
}

/* Update the test's knowledge from what the shard answered. */
static void learn(world *w, xfer_shard *s, const call *c, const result *r)
{
    mid *m = &w->m[c->id];
    w->now = c->now;
    if (c->kind == C_WEND) {
        /* A write in flight always ends, whatever became of its record. */
        ck_assert(r->rc == 0 || r->rc == XFER_ERR_CANCELLED ||
                  r->rc == XFER_ERR_EXPIRED);
        mark_written(m, &w->w[c->wi], c->ok);
        w->w[c->wi] = w->w[--w->nw];
        return;
    }
    if (r->rc != 0)
        return;
    if (c->kind == C_INVAL) {
        /* the rkey is gone; so is the request (a stray call that
         * succeeded answered one) */
        w->rkey[c->id] = false;
        for (unsigned i = 0; i < w->nq; i++)
            if (w->q[i].id == c->id) {
                w->q[i] = w->q[--w->nq];
                break;
            }
        return;
    }
    if (c->kind == C_COMMIT && !w->one_sided &&
        xfer_shard_state(s, c->id) == XFER_RESV_STATE_READY) {
        /* Committed: every byte came from a completed write of it (a
         * one-sided shard cannot see the RDMA writes: its commit is the
         * producer's word). */
        for (uint32_t i = 0; i < m->info.len; i++)
            ck_assert_uint_eq(m->written[i], 1);
    }
    if (c->kind == C_RESERVE) {
        if (!m->known || m->info.resv_id != r->info.resv_id) {
            free(m->written);
            m->written = calloc(r->info.len ? r->info.len : 1, 1);
        }
        m->info = r->info;
        m->attempt = c->attempt;
        m->known = true;
        w->rkey[c->id] = w->one_sided;
    } else if (c->kind == C_WBEGIN && c->alone) {
        mwrite done = {c->id, c->resv, r->dst_off, c->len};
        mark_written(m, &done, true);
    } else if (c->kind == C_WBEGIN) {
        ck_assert_uint_lt(w->nw, MAXW);
        w->w[w->nw++] = (mwrite){c->id, c->resv, r->dst_off, c->len};
    } else if (c->kind == C_TAKE) {
        m->snap = malloc(r->len ? r->len : 1);
        memcpy(m->snap, xfer_shard_pool_base(s) + r->data_off, r->len);
        m->snap_len = r->len;
    } else if (c->kind == C_RELEASE) {
        free(m->snap);
        m->snap = NULL;
    }
}

static bool live_state(unsigned st)
{
    return (st >= XFER_RESV_STATE_RESERVED &&
            st <= XFER_RESV_STATE_EXPIRE_PENDING) ||
           st == XFER_RESV_STATE_COMMIT_INVAL ||
           st == XFER_RESV_STATE_CANCEL_INVAL ||
           st == XFER_RESV_STATE_EXPIRE_INVAL;
}

/* Where a one-sided write may still land: the region is held and is
 * neither READY nor TAKEN (I4 over RDMA). */
static bool rkey_state(unsigned st)
{
    return st == XFER_RESV_STATE_RESERVED || st == XFER_RESV_STATE_WRITING ||
           st == XFER_RESV_STATE_CANCEL_PENDING ||
           st == XFER_RESV_STATE_EXPIRE_PENDING ||
           st == XFER_RESV_STATE_COMMIT_INVAL ||
           st == XFER_RESV_STATE_CANCEL_INVAL ||
           st == XFER_RESV_STATE_EXPIRE_INVAL;
}

static unsigned writes_of(const world *w, uint64_t id)
{
    unsigned n = 0;
    for (unsigned i = 0; i < w->nw; i++)
        n += w->w[i].id == id;
    return n;
}

static bool overlap(const xfer_resv_info *a, const xfer_resv_info *b)
{
    return a->addr < b->addr + rnd(b->len) && b->addr < a->addr + rnd(a->len);
}

/* The memory invariants, checked after every call. */
static void check_world(const world *w, const xfer_shard *s)
{
    uint64_t sum = 0;
    uint32_t live = 0;
    for (uint64_t id = 1; id <= NID; id++) {
        unsigned st = xfer_shard_state(s, id);
        const mid *m = &w->m[id];
        unsigned nw = writes_of(w, id);
        /* I4: never freed (nor READY/TAKEN) while a write may land. */
        if (nw > 0)
            ck_assert(st == XFER_RESV_STATE_WRITING ||
                      st == XFER_RESV_STATE_CANCEL_PENDING ||
                      st == XFER_RESV_STATE_EXPIRE_PENDING);
        if (st == XFER_RESV_STATE_WRITING)
            ck_assert_uint_gt(nw, 0);
        /* One-sided: never freed, READY or TAKEN while its rkey lives. */
        if (w->rkey[id])
            ck_assert(rkey_state(st));
        /* TAKEN belongs to the consumer until it releases it. */
        if (m->snap) {
            ck_assert_int_eq(st, XFER_RESV_STATE_TAKEN);
            ck_assert_int_eq(memcmp(xfer_shard_pool_base(s) + m->info.addr,
                                    m->snap, m->snap_len),
                             0);
        }
        if (!live_state(st))
            continue;
        ck_assert(m->known);
        live++;
        sum += rnd(m->info.len);
        for (uint64_t j = id + 1; j <= NID; j++)
            if (live_state(xfer_shard_state(s, j)))
                ck_assert(!overlap(&m->info, &w->m[j].info));
    }
    xfer_shard_stats st = stats(s);
    ck_assert_uint_eq(st.bytes_in_use, sum);
    ck_assert_uint_eq(st.live, live);
    ck_assert_uint_eq(st.illegal, 0);
}

static xfer_shard_config walk_cfg(void)
{
    xfer_shard_config c = base_cfg();
    c.pool_bytes = 8 * 1024; /* NO_SPACE happens */
    c.max_reservations = 5;  /* BUSY happens */
    c.max_tombstones = 8;    /* so does the tombstone cap */
    return c;
}

static void world_free(world *w)
{
    for (int i = 0; i <= NID; i++) {
        free(w->m[i].snap);
        free(w->m[i].written);
    }
}

START_TEST(test_shard_random_ops_keep_memory_invariants)
{
    enum { OPS = 20000 };
    uint64_t seed = tu_seed("test_shard_random_ops_keep_memory_invariants",
                            0x5eed0001);
    world w = {.rng = seed};
    xfer_shard *s = mk_cfg(walk_cfg());
    int hits[C_COUNT] = {0};
    for (int i = 0; i < OPS; i++) {
        call c = gen(&w);
        result r = apply(s, &w, &c);
        learn(&w, s, &c, &r);
        hits[c.kind] += r.rc == 0;
        check_world(&w, s);
    }
    /* The walk did reach the interesting places. */
    xfer_shard_stats st = stats(s);
    ck_assert_uint_gt(st.deferred_frees, 0);
    ck_assert_uint_gt(st.takes, 0);
    ck_assert_uint_gt(st.releases, 0);
    ck_assert_uint_gt(st.expiries, 0);
    ck_assert_uint_gt(st.stale, 0);
    for (int k = 0; k < C_INVAL; k++) /* the two-sided kinds */
        ck_assert_int_gt(hits[k], 0);
    world_free(&w);
    xfer_shard_del(s);
}
END_TEST

/* The same walk on a one-sided shard, with one-sided writes landing
 * whenever an rkey lives and invalidations answered in any order: no
 * region is freed, READY or TAKEN while its rkey may let a write in. */
START_TEST(test_shard_one_sided_random_ops_keep_memory_invariants)
{
    enum { OPS = 20000 };
    uint64_t seed = tu_seed(
        "test_shard_one_sided_random_ops_keep_memory_invariants", 0x5eed0003);
    world w = {.rng = seed, .one_sided = true};
    xfer_shard_config c = walk_cfg();
    c.one_sided = true;
    xfer_shard *s = mk_cfg(c);
    int hits[C_COUNT] = {0};
    for (int i = 0; i < OPS; i++) {
        call cl = gen(&w);
        result r = apply(s, &w, &cl);
        learn(&w, s, &cl, &r);
        take_requests(&w, s);
        hits[cl.kind] += r.rc == 0;
        check_world(&w, s);
    }
    xfer_shard_stats st = stats(s);
    ck_assert_uint_gt(st.deferred_frees, 0);
    ck_assert_uint_gt(st.takes, 0);
    ck_assert_uint_gt(st.releases, 0);
    ck_assert_uint_gt(st.expiries, 0);
    for (int k = 0; k < C_COUNT; k++)
        ck_assert_int_gt(hits[k], 0);
    ck_assert_uint_eq(st.illegal, 0);
    world_free(&w);
    xfer_shard_del(s);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Save and load                                                           */
/* ---------------------------------------------------------------------- */

static void load_from(xfer_shard *dst, const xfer_shard *src)
{
    uint8_t *buf;
    size_t n = save_into(src, &buf);
    ck_assert_int_eq(xfer_shard_load(dst, buf, n), 0);
    free(buf);
    ck_assert(same_state(src, dst));
}

/* The copies in flight are part of the saved record: a twin loaded from a
 * shard with one holds the region for it, and a shard whose write has no
 * copy saves apart from it. */
START_TEST(test_shard_copy_count_saved)
{
    xfer_shard *s = mk(), *t = mk(), *u = mk();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 512);
    begin_ok(s, 1, 1, 1, &a);
    load_from(u, s); /* the write, no copy yet */
    ck_assert_int_eq(xfer_shard_copy_begin(s, 2, 1, a.resv_id), 0);
    ck_assert(!same_state(s, u));
    load_from(t, s);
    ck_assert_uint_eq(xfer_shard_copies(t, 1), 1);
    ck_assert_int_ne(xfer_shard_commit(t, 3, 1, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_copy_end(t, 4, 1, a.resv_id, true), 0);
    ck_assert_int_eq(xfer_shard_state(t, 1), XFER_RESV_STATE_RESERVED);
    xfer_shard_del(u);
    xfer_shard_del(t);
    xfer_shard_del(s);
}
END_TEST

static void same_events(const xfer_shard *a, const xfer_shard *b)
{
    size_t na, nb;
    const xfer_shard_event *ea = xfer_shard_events(a, &na);
    const xfer_shard_event *eb = xfer_shard_events(b, &nb);
    ck_assert_uint_eq(na, nb);
    for (size_t i = 0; i < na; i++) {
        ck_assert_uint_eq(ea[i].kind, eb[i].kind);
        ck_assert_uint_eq(ea[i].id, eb[i].id);
        ck_assert_uint_eq(ea[i].resv_id, eb[i].resv_id);
        ck_assert_uint_eq(ea[i].attempt, eb[i].attempt);
        ck_assert_uint_eq(ea[i].len, eb[i].len);
    }
}

/* A shard with every live state, tied leases, tombstones and events:
 * live 11, 21, 31 RESERVED (one deadline), 10 EXPIRE_PENDING, 12 and 90
 * WRITING, 40 READY, 50 TAKEN, 60 CANCEL_PENDING; tombstones 30, 20
 * EXPIRED, 70 CANCELLED, 80 pre-emptive; five events pending. */
static xfer_shard *varied_shard(void)
{
    xfer_shard *s = mk();
    xfer_resv_info r;
    const uint64_t first[] = {30, 10, 20}, tied[] = {31, 11, 21};
    for (int i = 0; i < 3; i++)
        reserve_ok(s, 0, first[i], 1, 100 + (uint32_t)i);
    r = reserve_ok(s, 0, 10, 1, 101);
    begin_ok(s, 0, 10, 1, &r);
    begin_ok(s, 0, 10, 1, &r);
    r = reserve_ok(s, 1, 90, 1, 64);
    begin_ok(s, 1, 90, 1, &r);
    xfer_shard_on_timer(s, LEASE); /* 30, 20 EXPIRED; 10 EXPIRE_PENDING */
    for (int i = 0; i < 3; i++)
        reserve_ok(s, LEASE, tied[i], 1, 64);
    uint64_t t = LEASE + 1;
    r = reserve_ok(s, t, 40, 2, 500);
    write_whole(s, t, 40, 2, &r);
    ck_assert_int_eq(xfer_shard_commit(s, t, 40, 2, r.resv_id), 0);
    r = reserve_ok(s, t, 50, 1, 64);
    write_whole(s, t, 50, 1, &r);
    ck_assert_int_eq(xfer_shard_commit(s, t, 50, 1, r.resv_id), 0);
    const uint8_t *d;
    uint32_t n;
    ck_assert_int_eq(xfer_shard_take(s, t, 50, r.resv_id, &d, &n), 0);
    r = reserve_ok(s, t, 60, 1, 64);
    begin_ok(s, t, 60, 1, &r);
    ck_assert_int_eq(xfer_shard_cancel(s, t, 60, 1, 0), 0);
    r = reserve_ok(s, t, 70, 1, 64);
    ck_assert_int_eq(xfer_shard_cancel(s, t, 70, 1, r.resv_id), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, t, 80, 3, 0), 0);
    r = reserve_ok(s, t, 12, 1, 64);
    begin_ok(s, t, 12, 1, &r);
    ck_assert_uint_eq(stats(s).live, 9);
    ck_assert_uint_eq(count_events(s, -1, 0), 5);
    return s;
}

/* Where a saved shard's fields sit (fsm/shard_save.c, save_record): a
 * header (magic 4, fingerprint 8, rng 8, count 4), then the records in id
 * order, 76 bytes each: id 8, attempt 4, resv 8, off 8, len 4, state 1,
 * writes 4, covered 4, woff 4, wlen 4, ... */
enum {
    SAVED_REC0 = 24,
    SAVED_REC_LEN = 76,
    REC_WRITES = 33,
    REC_COVERED = 37,
    REC_WOFF = 41,
    REC_WLEN = 45
};

/* A saved record whose one write in flight (a solo write: its range is
 * kept) would reach past the region is refused by the load, both when its
 * length runs past the end and when its offset does: a forged or damaged
 * save never makes a write range the machine could not have.  The range
 * that ends exactly at the region's end loads. */
START_TEST(test_shard_load_refuses_write_range_past_region)
{
    xfer_shard *s = mk();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 256);
    uint8_t *dst = NULL;
    ck_assert_int_eq(xfer_shard_write_begin(s, 1, 1, 1, a.resv_id, 64, 64,
                                            &dst), 0);
    uint8_t *buf;
    size_t need = save_into(s, &buf);
    uint8_t *woff = buf + SAVED_REC0 + REC_WOFF;
    uint8_t *wlen = buf + SAVED_REC0 + REC_WLEN;
    ck_assert_uint_eq(xfer_le_get32(woff), 64);
    ck_assert_uint_eq(xfer_le_get32(wlen), 64);
    xfer_shard *t = mk();
    xfer_le_put32(wlen, 192); /* [64, 256): to the end exactly */
    ck_assert_int_eq(xfer_shard_load(t, buf, need), 0);
    xfer_le_put32(wlen, 193); /* one past the end */
    ck_assert_int_eq(xfer_shard_load(t, buf, need), XFER_ERR_FORMAT);
    xfer_le_put32(woff, 257); /* starts past the end, no length */
    xfer_le_put32(wlen, 0);
    ck_assert_int_eq(xfer_shard_load(t, buf, need), XFER_ERR_FORMAT);
    xfer_shard_del(t);
    xfer_shard_del(s);
    free(buf);
}
END_TEST

/* A saved READY record must be whole: written over every byte, no write
 * in flight, no write range kept.  A save forged to say one byte short
 * of covered is refused by the load, as is one with a write left in it
 * or a range kept.  And a record waiting to be freed keeps nothing. */
START_TEST(test_shard_load_refuses_ready_record_not_whole)
{
    xfer_shard *s = mk();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 256);
    write_whole(s, 1, 1, 1, &a);
    ck_assert_int_eq(xfer_shard_commit(s, 2, 1, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_READY);
    uint8_t *buf;
    size_t need = save_into(s, &buf);
    uint8_t *bad = malloc(need);
    ck_assert_ptr_nonnull(bad);
    ck_assert_uint_eq(xfer_le_get32(buf + SAVED_REC0 + REC_COVERED), 256);
    xfer_shard *t = mk();
    ck_assert_int_eq(xfer_shard_load(t, buf, need), 0);
    const size_t at[] = {REC_COVERED, REC_WRITES, REC_WOFF};
    const uint32_t val[] = {255, 1, 8};
    for (int i = 0; i < 3; i++) {
        memcpy(bad, buf, need);
        xfer_le_put32(bad + SAVED_REC0 + at[i], val[i]);
        ck_assert_msg(xfer_shard_load(t, bad, need) == XFER_ERR_FORMAT,
                      "forged field %d loaded", i);
    }
    free(buf);
    free(bad);
    /* A record waiting to be freed (CANCEL_PENDING, its write still in
     * flight) keeps nothing written: a save that says 8 bytes are is
     * refused. */
    xfer_resv_info b = reserve_ok(s, 3, 2, 1, 256);
    begin_ok(s, 3, 2, 1, &b);
    ck_assert_int_eq(xfer_shard_cancel(s, 4, 2, 1, b.resv_id), 0);
    ck_assert_int_eq(xfer_shard_state(s, 2), XFER_RESV_STATE_CANCEL_PENDING);
    need = save_into(s, &buf);
    ck_assert_int_eq(xfer_shard_load(t, buf, need), 0);
    /* id 2 is the second record */
    uint8_t *covered = buf + SAVED_REC0 + SAVED_REC_LEN + REC_COVERED;
    ck_assert_uint_eq(xfer_le_get32(covered), 0);
    xfer_le_put32(covered, 8);
    ck_assert_int_eq(xfer_shard_load(t, buf, need), XFER_ERR_FORMAT);
    xfer_shard_del(t);
    xfer_shard_del(s);
    free(buf);
}
END_TEST

START_TEST(test_shard_save_load_roundtrip)
{
    xfer_shard *a = mk();
    /* Ties among leases: loaded shards must pop them in the same order. */
    const uint64_t order[] = {30, 10, 20, 25};
    for (int i = 0; i < 4; i++)
        reserve_ok(a, 0, order[i], 1, 64);
    xfer_shard *b = mk();
    load_from(b, a);
    xfer_shard_on_timer(a, LEASE);
    xfer_shard_on_timer(b, LEASE);
    same_events(a, b);
    size_t n;
    const xfer_shard_event *e = xfer_shard_events(a, &n);
    ck_assert_uint_eq(n, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(e[i].id, order[i]);
    ck_assert(same_state(a, b));
    xfer_shard_del(a);
    xfer_shard_del(b);

    /* Every state at once; save -> load -> save is the identity. */
    a = varied_shard();
    b = mk();
    load_from(b, a);
    same_events(a, b);
    ck_assert_uint_eq(stats(b).bytes_in_use, stats(a).bytes_in_use);
    ck_assert_uint_eq(stats(b).live, stats(a).live);
    ck_assert_uint_eq(stats(b).tombstones, stats(a).tombstones);
    ck_assert_uint_eq(xfer_shard_next_deadline(b),
                      xfer_shard_next_deadline(a));
    /* The loaded shard answers the next ops like the original. */
    xfer_shard *ab[2] = {a, b};
    xfer_resv_info info[2];
    int rc[2];
    for (int k = 0; k < 2; k++) {
        xfer_shard_events_clear(ab[k]);
        rc[k] = xfer_shard_reserve(ab[k], LEASE + 2, 100, 1, 64, &info[k]);
        ck_assert_int_eq(rc[k], 0);
    }
    same_info(&info[0], &info[1]);
    for (int k = 0; k < 2; k++) {
        rc[k] = xfer_shard_write_end(ab[k], LEASE + 3, 10, 0, true);
        xfer_shard_on_timer(ab[k], 2 * LEASE); /* 90, then 31, 11, 21 */
    }
    ck_assert_int_eq(rc[0], rc[1]);
    same_events(a, b);
    ck_assert(same_state(a, b));
    for (uint64_t t = 2 * LEASE; t < 10 * TTTL; t += LEASE / 2) {
        xfer_shard_on_timer(a, t);
        xfer_shard_on_timer(b, t);
        same_events(a, b);
        ck_assert(same_state(a, b));
    }
    xfer_shard_del(a);
    xfer_shard_del(b);
}
END_TEST

static uint64_t counter_rng(void *ud)
{
    return ++*(uint64_t *)ud;
}

/* Shards of a group are interchangeable: with the same injected ids, the
 * same history encodes alike whatever the shard index, and a state moves
 * between shards (the model checker's symmetry reduction relies on it). */
START_TEST(test_shard_save_ignores_shard_index)
{
    uint64_t ctr[2] = {0, 0};
    xfer_shard *s[2];
    for (int k = 0; k < 2; k++) {
        xfer_shard_config c = base_cfg();
        c.shard_index = (uint16_t)(k + 1);
        c.rng = (xfer_rng){counter_rng, &ctr[k]};
        s[k] = mk_cfg(c);
        xfer_resv_info a = reserve_ok(s[k], 0, 5, 1, 64);
        ck_assert_uint_eq(a.resv_id, 1);
        write_whole(s[k], 1, 5, 1, &a);
        ck_assert_int_eq(xfer_shard_commit(s[k], 1, 5, 1, a.resv_id), 0);
    }
    ck_assert(same_state(s[0], s[1]));
    load_from(s[1], s[0]);
    size_t n;
    const xfer_shard_event *e = xfer_shard_events(s[1], &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(e[0].shard, 2); /* events carry the loader's index */
    xfer_shard_del(s[0]);
    xfer_shard_del(s[1]);
}
END_TEST

START_TEST(test_shard_load_rejects_bad_input)
{
    xfer_shard *a = varied_shard();
    xfer_shard *b = mk();
    reserve_ok(b, 0, 7, 1, 64);
    uint8_t *good, *before;
    size_t n = save_into(a, &good);
    size_t nb = save_into(b, &before);
    /* Every truncation and a flipped magic are refused; b unchanged. */
    for (size_t cut = 0; cut < n; cut += 7)
        ck_assert_int_eq(xfer_shard_load(b, good, cut), XFER_ERR_FORMAT);
    good[0] ^= 1;
    ck_assert_int_eq(xfer_shard_load(b, good, n), XFER_ERR_FORMAT);
    good[0] ^= 1;
    /* Records that break an invariant: the first record (id 10,
     * EXPIRE_PENDING) with no write in flight, or with a bad state. */
    uint8_t *bad = malloc(n);
    memcpy(bad, good, n);
    const size_t rec0 = 4 + 8 + 8 + 4, state_at = rec0 + 32;
    ck_assert_uint_eq(bad[rec0], 10);
    ck_assert_uint_eq(bad[state_at], XFER_RESV_STATE_EXPIRE_PENDING);
    memset(bad + state_at + 1, 0, 4); /* writes = 0 */
    ck_assert_int_eq(xfer_shard_load(b, bad, n), XFER_ERR_FORMAT);
    memcpy(bad, good, n);
    bad[state_at] = 99;
    ck_assert_int_eq(xfer_shard_load(b, bad, n), XFER_ERR_FORMAT);
    memcpy(bad, good, n);
    bad[state_at] = XFER_RESV_STATE_TAKEN; /* TAKEN with a lease and writes */
    ck_assert_int_eq(xfer_shard_load(b, bad, n), XFER_ERR_FORMAT);
    /* Trailing garbage. */
    uint8_t *longer = malloc(n + 1);
    memcpy(longer, good, n);
    longer[n] = 0;
    ck_assert_int_eq(xfer_shard_load(b, longer, n + 1), XFER_ERR_FORMAT);
    free(longer);
    uint8_t *now;
    size_t nn = save_into(b, &now);
    ck_assert_uint_eq(nn, nb);
    ck_assert_int_eq(memcmp(now, before, nb), 0);
    ck_assert_int_eq(xfer_shard_load(b, NULL, 0), XFER_ERR_INVALID_ARG);
    /* Another configuration is refused. */
    xfer_shard_config c = base_cfg();
    c.lease_ttl_ns = 2 * LEASE;
    xfer_shard *other = mk_cfg(c);
    ck_assert_int_eq(xfer_shard_load(other, good, n), XFER_ERR_FORMAT);
    free(good);
    free(before);
    free(bad);
    free(now);
    xfer_shard_del(a);
    xfer_shard_del(b);
    xfer_shard_del(other);
}
END_TEST

static void same_requests(const xfer_shard *a, const xfer_shard *b)
{
    size_t na, nb;
    const xfer_shard_inval *qa = xfer_shard_invalidations(a, &na);
    const xfer_shard_inval *qb = xfer_shard_invalidations(b, &nb);
    ck_assert_uint_eq(na, nb);
    for (size_t i = 0; i < na; i++) {
        ck_assert_uint_eq(qa[i].id, qb[i].id);
        ck_assert_uint_eq(qa[i].resv_id, qb[i].resv_id);
        ck_assert_uint_eq(qa[i].attempt, qb[i].attempt);
    }
}

/* One-sided twins: the requests pending at a save come back with the
 * load (the list is cleared only every few steps here, so saves hold
 * some), and both shards go on alike. */
START_TEST(test_shard_one_sided_save_load_twin_behaves_alike)
{
    enum { OPS = 6000, EVERY = 40 };
    uint64_t seed = tu_seed(
        "test_shard_one_sided_save_load_twin_behaves_alike", 0x5eed0004);
    world w = {.rng = seed, .one_sided = true};
    xfer_shard_config c = walk_cfg();
    c.one_sided = true;
    xfer_shard *a = mk_cfg(c);
    xfer_shard *b = mk_cfg(c);
    size_t saved_with_requests = 0;
    for (int i = 0; i < OPS; i++) {
        if (i % EVERY == 0) {
            saved_with_requests += asked(a) > 0;
            load_from(b, a);
        }
        call cl = gen(&w);
        result ra = apply(a, &w, &cl);
        result rb = apply(b, &w, &cl);
        ck_assert_int_eq(ra.rc, rb.rc);
        same_info(&ra.info, &rb.info);
        learn(&w, a, &cl, &ra);
        same_events(a, b);
        same_requests(a, b);
        ck_assert(same_state(a, b));
        if (i % 3 == 0) {
            take_requests(&w, a);
            xfer_shard_invalidations_clear(b);
        }
    }
    ck_assert_uint_gt(saved_with_requests, 0);
    world_free(&w);
    xfer_shard_del(a);
    xfer_shard_del(b);
}
END_TEST

START_TEST(test_shard_save_load_twin_behaves_alike)
{
    enum { OPS = 6000, EVERY = 40 };
    uint64_t seed =
        tu_seed("test_shard_save_load_twin_behaves_alike", 0x5eed0002);
    world w = {.rng = seed};
    xfer_shard *a = mk_cfg(walk_cfg());
    xfer_shard *b = mk_cfg(walk_cfg());
    for (int i = 0; i < OPS; i++) {
        if (i % EVERY == 0)
            load_from(b, a);
        call c = gen(&w);
        result ra = apply(a, &w, &c);
        result rb = apply(b, &w, &c);
        ck_assert_int_eq(ra.rc, rb.rc);
        same_info(&ra.info, &rb.info);
        ck_assert_uint_eq(ra.dst_off, rb.dst_off);
        ck_assert_uint_eq(ra.data_off, rb.data_off);
        ck_assert_uint_eq(ra.len, rb.len);
        learn(&w, a, &c, &ra);
        same_events(a, b);
        ck_assert(same_state(a, b));
    }
    world_free(&w);
    xfer_shard_del(a);
    xfer_shard_del(b);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Transition coverage                                                     */
/* ---------------------------------------------------------------------- */

/* Hit every event on id without moving it: a stale reservation id (or
 * another attempt, for reserve) where the cell would otherwise act. */
static void probe(xfer_shard *s, uint64_t now, uint64_t id, uint32_t attempt)
{
    unsigned st = xfer_shard_state(s, id);
    xfer_resv_info info;
    uint8_t *dst;
    const uint8_t *data;
    uint32_t len;
    ck_assert_int_ne(st, XFER_RESV_STATE_NONE);
    ck_assert_int_ne(xfer_shard_reserve(s, now, id, attempt + 100, 64, &info),
                     0);
    static const uint8_t bytes[64];
    /* An eager op of an id held in any state, or tombstoned, is refused
     * whole, for its own attempt too. */
    ck_assert_int_ne(xfer_shard_eager(s, now, id, attempt, bytes, 64, &info),
                     0);
    ck_assert_int_ne(
        xfer_shard_write_begin(s, now, id, attempt, BAD_RESV, 0, 1, &dst), 0);
    xfer_shard_commit(s, now, id, attempt, BAD_RESV);
    xfer_shard_cancel(s, now, id, attempt, BAD_RESV);
    ck_assert_int_ne(xfer_shard_take(s, now, id, BAD_RESV, &data, &len), 0);
    ck_assert_int_ne(xfer_shard_release(s, now, id, BAD_RESV), 0);
    ck_assert_int_ne(
        xfer_shard_refresh(s, now, id, attempt, BAD_RESV, 0, NULL), 0);
    ck_assert_int_eq(xfer_shard_state(s, id), st);
}

/* The NONE row and one id through RESERVED, WRITING, READY, TAKEN, DONE. */
static void coverage_lifecycle(xfer_shard *s)
{
    uint8_t *dst;
    const uint8_t *data;
    uint32_t len;
    /* NONE row */
    ck_assert_int_eq(xfer_shard_write_begin(s, 0, 99, 1, 1, 0, 1, &dst),
                     XFER_ERR_NOT_FOUND);
    ck_assert_int_eq(xfer_shard_commit(s, 0, 99, 1, 1), XFER_ERR_NOT_FOUND);
    ck_assert_int_eq(xfer_shard_take(s, 0, 99, 1, &data, &len),
                     XFER_ERR_NOT_FOUND);
    ck_assert_int_eq(xfer_shard_release(s, 0, 99, 1), XFER_ERR_NOT_FOUND);
    ck_assert_int_eq(xfer_shard_refresh(s, 0, 99, 1, 1, 0, NULL),
                     XFER_ERR_NOT_FOUND);
    ck_assert_int_eq(xfer_shard_cancel(s, 0, 98, 1, 0), 0);
    /* id 1: RESERVED, WRITING, READY, TAKEN, DONE */
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 64);
    probe(s, 0, 1, 1);
    begin_ok(s, 0, 1, 1, &a);
    probe(s, 0, 1, 1);
    ck_assert_int_eq(xfer_shard_write_end(s, 0, 1, a.resv_id, false), 0);
    begin_ok(s, 0, 1, 1, &a);
    ck_assert_int_eq(xfer_shard_write_end(s, 0, 1, a.resv_id, true), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 0, 1, 1, a.resv_id), 0);
    probe(s, 0, 1, 1);
    ck_assert_int_eq(xfer_shard_take(s, 0, 1, a.resv_id, &data, &len), 0);
    probe(s, 0, 1, 1);
    ck_assert_int_eq(xfer_shard_release(s, 0, 1, a.resv_id), 0);
    probe(s, 0, 1, 1);
}

/* Cancels, leases and the deferred frees; then every tombstone expires. */
static void coverage_endings(xfer_shard *s)
{
    /* cancel in RESERVED (id 2), READY (id 3), WRITING (id 4) */
    xfer_resv_info b = reserve_ok(s, 0, 2, 1, 64);
    ck_assert_int_eq(xfer_shard_cancel(s, 0, 2, 1, b.resv_id), 0);
    probe(s, 0, 2, 1);
    b = reserve_ok(s, 0, 3, 1, 64);
    write_whole(s, 0, 3, 1, &b);
    ck_assert_int_eq(xfer_shard_commit(s, 0, 3, 1, b.resv_id), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, 0, 3, 1, 0), 0);
    xfer_resv_info c = reserve_ok(s, 0, 4, 1, 64);
    begin_ok(s, 0, 4, 1, &c);
    begin_ok(s, 0, 4, 1, &c);
    ck_assert_int_eq(xfer_shard_cancel(s, 0, 4, 1, 0), 0);
    probe(s, 0, 4, 1);
    /* leases: WRITING (5), RESERVED (6), READY (7), CANCEL_PENDING (4) */
    xfer_resv_info d = reserve_ok(s, 0, 5, 1, 64);
    begin_ok(s, 0, 5, 1, &d);
    begin_ok(s, 0, 5, 1, &d);
    reserve_ok(s, 0, 6, 1, 64);
    b = reserve_ok(s, 0, 7, 1, 64);
    write_whole(s, 0, 7, 1, &b);
    ck_assert_int_eq(xfer_shard_commit(s, 0, 7, 1, b.resv_id), 0);
    xfer_shard_events_clear(s);
    xfer_shard_on_timer(s, LEASE);
    ck_assert_int_eq(xfer_shard_state(s, 5), XFER_RESV_STATE_EXPIRE_PENDING);
    ck_assert_int_eq(xfer_shard_state(s, 6), XFER_RESV_STATE_EXPIRED);
    ck_assert_int_eq(xfer_shard_state(s, 7), XFER_RESV_STATE_EXPIRED);
    probe(s, LEASE, 5, 1);
    probe(s, LEASE, 6, 1);
    /* the deferred frees */
    ck_assert_int_eq(xfer_shard_write_end(s, LEASE, 4, c.resv_id, true),
                     XFER_ERR_CANCELLED);
    ck_assert_int_eq(xfer_shard_write_end(s, LEASE, 4, c.resv_id, false),
                     XFER_ERR_CANCELLED);
    ck_assert_int_eq(xfer_shard_write_end(s, LEASE, 5, d.resv_id, true),
                     XFER_ERR_EXPIRED);
    ck_assert_int_eq(xfer_shard_write_end(s, LEASE, 5, d.resv_id, false),
                     XFER_ERR_EXPIRED);
    /* every tombstone kind expires */
    xfer_shard_on_timer(s, LEASE + TTTL);
    ck_assert_uint_eq(stats(s).tombstones, 0);
    ck_assert_uint_eq(stats(s).live, 0);
    ck_assert_uint_eq(stats(s).bytes_in_use, 0);
}

/* The one-sided rows (on a one-sided shard): each *_INVAL state probed,
 * entered every way, and left by its invalidation. */
static void coverage_one_sided(xfer_shard *s)
{
    /* COMMIT_INVAL (10), then READY */
    xfer_resv_info a = reserve_ok(s, 0, 10, 1, 64);
    ck_assert_int_eq(xfer_shard_commit(s, 0, 10, 1, a.resv_id), 0);
    probe(s, 0, 10, 1);
    ck_assert_int_eq(xfer_shard_commit(s, 0, 10, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_invalidated(s, 0, 10, a.resv_id), 0);
    /* CANCEL_INVAL from RESERVED (11) and from COMMIT_INVAL (12) */
    xfer_resv_info b = reserve_ok(s, 0, 11, 1, 64);
    ck_assert_int_eq(xfer_shard_cancel(s, 0, 11, 1, b.resv_id), 0);
    probe(s, 0, 11, 1);
    ck_assert_int_eq(xfer_shard_cancel(s, 0, 11, 1, b.resv_id), 0);
    xfer_resv_info c = reserve_ok(s, 0, 12, 1, 64);
    ck_assert_int_eq(xfer_shard_commit(s, 0, 12, 1, c.resv_id), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, 0, 12, 1, c.resv_id), 0);
    /* EXPIRE_INVAL from RESERVED (13) and from COMMIT_INVAL (14); the
     * leases of CANCEL_INVAL records (11, 12) fire on them unheeded */
    xfer_resv_info d = reserve_ok(s, 0, 13, 1, 64);
    xfer_resv_info e = reserve_ok(s, 0, 14, 1, 64);
    ck_assert_int_eq(xfer_shard_commit(s, 0, 14, 1, e.resv_id), 0);
    xfer_shard_events_clear(s);
    xfer_shard_on_timer(s, LEASE);
    ck_assert_int_eq(xfer_shard_state(s, 11), XFER_RESV_STATE_CANCEL_INVAL);
    ck_assert_int_eq(xfer_shard_state(s, 13), XFER_RESV_STATE_EXPIRE_INVAL);
    ck_assert_int_eq(xfer_shard_state(s, 14), XFER_RESV_STATE_EXPIRE_INVAL);
    probe(s, LEASE, 13, 1);
    ck_assert_int_eq(xfer_shard_cancel(s, LEASE, 13, 1, d.resv_id), 0);
    const uint64_t ids[] = {11, 12, 13, 14};
    const uint64_t resv[] = {b.resv_id, c.resv_id, d.resv_id, e.resv_id};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(xfer_shard_invalidated(s, LEASE, ids[i], resv[i]),
                         0);
    xfer_shard_on_timer(s, 2 * LEASE + TTTL);
    ck_assert_uint_eq(stats(s).live, 0);
    ck_assert_uint_eq(stats(s).bytes_in_use, 0);
}

/* ---------------------------------------------------------------------- */
/* The eager path: reserve + data + commit in one step                     */
/* ---------------------------------------------------------------------- */

/* Applied whole: READY at once with one READY event naming the
 * reservation it hands back, the bytes in the pool, takeable as if
 * reserved, written and committed. */
static void eager_apply(xfer_shard *s)
{
    uint8_t src[100];
    for (unsigned i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 7 + 1);
    xfer_shard_events_clear(s);
    xfer_shard_stats before = stats(s);
    xfer_resv_info info;
    ck_assert_int_eq(xfer_shard_eager(s, 5, 40, 2, src, sizeof src, &info), 0);
    ck_assert_uint_ne(info.resv_id, XFER_RESV_NONE);
    ck_assert_uint_eq(info.len, sizeof src);
    ck_assert_int_eq(xfer_shard_state(s, 40), XFER_RESV_STATE_READY);
    size_t n;
    const xfer_shard_event *ev = xfer_shard_events(s, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(ev[0].kind, XFER_SHARD_EV_READY);
    ck_assert_uint_eq(ev[0].id, 40);
    ck_assert_uint_eq(ev[0].attempt, 2);
    ck_assert_uint_eq(ev[0].resv_id, info.resv_id);
    ck_assert_uint_eq(ev[0].len, sizeof src);
    xfer_shard_events_clear(s);
    ck_assert_uint_eq(stats(s).live, before.live + 1);
    ck_assert_uint_eq(stats(s).bytes_in_use,
                      before.bytes_in_use + rnd(sizeof src));
    ck_assert_uint_eq(stats(s).commits, before.commits + 1);
    const uint8_t *data;
    uint32_t len;
    ck_assert_int_eq(xfer_shard_take(s, 6, 40, info.resv_id, &data, &len), 0);
    ck_assert_uint_eq(len, sizeof src);
    ck_assert_int_eq(memcmp(data, src, sizeof src), 0);
    ck_assert_int_eq(xfer_shard_release(s, 7, 40, info.resv_id), 0);
}

START_TEST(test_shard_eager_applies_whole)
{
    xfer_shard *s = mk();
    eager_apply(s);
    /* A cancel of the producer's attempt frees an eager READY record as
     * it frees a committed one. */
    xfer_resv_info info;
    static const uint8_t z[64];
    ck_assert_int_eq(xfer_shard_eager(s, 8, 41, 1, z, 64, &info), 0);
    ck_assert_int_eq(xfer_shard_cancel(s, 9, 41, 1, XFER_RESV_NONE), 0);
    ck_assert_int_eq(xfer_shard_state(s, 41), XFER_RESV_STATE_CANCELLED);
    ck_assert_uint_eq(stats(s).live, 0);
    ck_assert_uint_eq(stats(s).bytes_in_use, 0);
    xfer_shard_del(s);
}
END_TEST

/* Nothing is held after a refusal: no record, no tombstone, no event, no
 * pool bytes; the same id reserves normally afterwards. */
static void refused_whole(xfer_shard *s, uint64_t id, int want, size_t evs)
{
    static const uint8_t z[128];
    xfer_resv_info info;
    xfer_shard_stats before = stats(s);
    ck_assert_int_eq(xfer_shard_eager(s, 10, id, 1, z, 128, &info), want);
    ck_assert_int_eq(xfer_shard_state(s, id), XFER_RESV_STATE_NONE);
    ck_assert_uint_eq(stats(s).live, before.live);
    ck_assert_uint_eq(stats(s).tombstones, before.tombstones);
    ck_assert_uint_eq(stats(s).bytes_in_use, before.bytes_in_use);
    ck_assert_uint_eq(count_events(s, -1, 0), evs);
}

START_TEST(test_shard_eager_refused_whole)
{
    /* the pool has no room */
    xfer_shard_config c = base_cfg();
    c.pool_bytes = 64;
    xfer_shard *s = mk_cfg(c);
    refused_whole(s, 50, XFER_ERR_NO_SPACE, 0);
    xfer_shard_del(s);
    /* one-sided shards never allow it */
    c = base_cfg();
    c.one_sided = true;
    s = mk_cfg(c);
    refused_whole(s, 51, XFER_ERR_NOT_SUPPORTED, 0);
    reserve_ok(s, 11, 51, 1, 64);
    xfer_shard_del(s);
    /* the event list is full (the driver did not drain it) */
    s = mk();
    static const uint8_t z[64];
    xfer_resv_info info;
    for (uint64_t id = 60; id < 76; id++) {
        ck_assert_int_eq(xfer_shard_eager(s, 1, id, 1, z, 64, &info), 0);
        ck_assert_int_eq(xfer_shard_cancel(s, 2, id, 1, info.resv_id), 0);
    }
    size_t full = count_events(s, -1, 0);
    refused_whole(s, 80, XFER_ERR_BUSY, full);
    xfer_shard_events_clear(s);
    reserve_ok(s, 12, 80, 1, 64);
    /* held by another attempt, by the same, or tombstoned */
    ck_assert_int_eq(xfer_shard_eager(s, 12, 80, 2, z, 64, &info),
                     XFER_ERR_STALE);
    ck_assert_int_eq(xfer_shard_eager(s, 12, 80, 1, z, 64, &info),
                     XFER_ERR_STATE);
    ck_assert_int_eq(xfer_shard_state(s, 80), XFER_RESV_STATE_RESERVED);
    ck_assert_int_eq(xfer_shard_cancel(s, 13, 81, 1, XFER_RESV_NONE), 0);
    ck_assert_int_eq(xfer_shard_eager(s, 13, 81, 1, z, 64, &info),
                     XFER_ERR_CANCELLED);
    ck_assert_int_eq(xfer_shard_eager(NULL, 13, 82, 1, z, 64, &info),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_eager(s, 13, 0, 1, z, 64, &info),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_eager(s, 13, 82, 1, NULL, 64, &info),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_eager(s, 13, 82, 1, z, 64, NULL),
                     XFER_ERR_INVALID_ARG);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_transition_coverage)
{
    xfer_shard_config cfg = base_cfg();
    tu_trace tr = {0};
    cfg.trace = tu_trace_sink(&tr);
    xfer_shard *s = mk_cfg(cfg);
    coverage_lifecycle(s);
    coverage_endings(s);
    eager_apply(s);
    xfer_shard_config ocfg = base_cfg();
    ocfg.one_sided = true;
    xfer_shard *os = mk_cfg(ocfg); /* the one-sided rows */
    coverage_one_sided(os);
    xfer_shard_stats st = stats(s);
    int missing = 0;
    for (unsigned i = 0; i < XFER_RESV_STATE_COUNT_; i++)
        for (unsigned e = 0; e < XFER_RESV_EVENT_COUNT_; e++) {
            unsigned v = xfer_fsm_verdict(XFER_MACHINE_RESERVATION, i, e);
            uint64_t hits = xfer_shard_cell_hits(s, i, e) +
                            xfer_shard_cell_hits(os, i, e);
            if (v == XFER_VERDICT_ILLEGAL) {
                ck_assert_uint_eq(hits, 0);
                continue;
            }
            if (hits == 0) {
                printf("cell not hit: %s x %s (%s)\n",
                       xfer_fsm_state_name(XFER_MACHINE_RESERVATION, i),
                       xfer_fsm_event_name(XFER_MACHINE_RESERVATION, e),
                       xfer_fsm_handler_name(XFER_MACHINE_RESERVATION, i, e));
                missing++;
            }
        }
    fflush(stdout);
    ck_assert_int_eq(missing, 0);
    ck_assert_uint_eq(st.illegal, 0);
    ck_assert_uint_eq(stats(os).illegal, 0);
    xfer_shard_del(os);
    ck_assert_uint_eq(tu_trace_count(&tr, XFER_MACHINE_RESERVATION,
                                     XFER_VERDICT_ILLEGAL),
                      0);
    /* Every step is traced, with one sequence. */
    for (size_t i = 0; i < tr.n; i++)
        ck_assert_uint_eq(tr.recs[i].seq, i);
    tu_trace_free(&tr);
    xfer_shard_del(s);
}
END_TEST


/* ---------------------------------------------------------------------- */
/* Commits need every byte written; owners (issue 12)                      */
/* ---------------------------------------------------------------------- */

static int write_part(xfer_shard *s, uint64_t now, uint64_t id,
                      uint32_t attempt, const xfer_resv_info *i, uint64_t off,
                      uint32_t len, bool ok)
{
    uint8_t *dst = NULL;
    int rc = xfer_shard_write_begin(s, now, id, attempt, i->resv_id, off, len,
                                    &dst);
    if (rc == 0)
        rc = xfer_shard_write_end(s, now, id, i->resv_id, ok);
    return rc;
}

START_TEST(test_shard_commit_needs_every_byte_written)
{
    xfer_shard *s = mk();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 256);
    /* Nothing written: refused, and the reservation stays as it was. */
    ck_assert_int_eq(xfer_shard_commit(s, 1, 1, 1, a.resv_id),
                     XFER_ERR_INCOMPLETE);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_RESERVED);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_READY, 1), 0);
    /* A part, then the rest: whole. */
    ck_assert_int_eq(write_part(s, 2, 1, 1, &a, 0, 100, true), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 3, 1, 1, a.resv_id),
                     XFER_ERR_INCOMPLETE);
    ck_assert_int_eq(write_part(s, 4, 1, 1, &a, 100, 156, true), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 5, 1, 1, a.resv_id), 0);
    ck_assert_uint_eq(count_events(s, XFER_SHARD_EV_READY, 1), 1);

    /* A failed write makes garbage of what it touched, and after. */
    xfer_resv_info b = reserve_ok(s, 10, 2, 1, 256);
    write_whole(s, 11, 2, 1, &b);
    ck_assert_int_eq(write_part(s, 12, 2, 1, &b, 50, 10, false), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 13, 2, 1, b.resv_id),
                     XFER_ERR_INCOMPLETE);
    ck_assert_int_eq(write_part(s, 14, 2, 1, &b, 50, 206, true), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 15, 2, 1, b.resv_id), 0);

    /* Writes side by side mark nothing, even when both end ok; a failed
     * one beside another unmarks everything. */
    xfer_resv_info c = reserve_ok(s, 20, 3, 1, 128);
    begin_ok(s, 21, 3, 1, &c);
    begin_ok(s, 21, 3, 1, &c);
    ck_assert_int_eq(xfer_shard_write_end(s, 22, 3, c.resv_id, true), 0);
    ck_assert_int_eq(xfer_shard_write_end(s, 22, 3, c.resv_id, true), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 23, 3, 1, c.resv_id),
                     XFER_ERR_INCOMPLETE);
    write_whole(s, 24, 3, 1, &c);
    begin_ok(s, 25, 3, 1, &c);
    begin_ok(s, 25, 3, 1, &c);
    ck_assert_int_eq(xfer_shard_write_end(s, 26, 3, c.resv_id, true), 0);
    ck_assert_int_eq(xfer_shard_write_end(s, 26, 3, c.resv_id, false), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 27, 3, 1, c.resv_id),
                     XFER_ERR_INCOMPLETE);

    /* Out of order (issue 24): the tail first, then the head, is whole. */
    xfer_resv_info d = reserve_ok(s, 30, 4, 1, 200);
    ck_assert_int_eq(write_part(s, 31, 4, 1, &d, 100, 100, true), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 32, 4, 1, d.resv_id),
                     XFER_ERR_INCOMPLETE);
    ck_assert_int_eq(write_part(s, 33, 4, 1, &d, 0, 100, true), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 35, 4, 1, d.resv_id), 0);

    /* A reservation of no bytes has nothing to write. */
    xfer_resv_info e = reserve_ok(s, 40, 5, 1, 0);
    ck_assert_int_eq(xfer_shard_commit(s, 41, 5, 1, e.resv_id), 0);
    xfer_shard_del(s);
}
END_TEST

/* Issue 24 class 7: writes land at any offset, in any order, overlapping
 * or not; COMMIT is INCOMPLETE only while a byte is missing; the set of
 * written ranges is bounded (a write past the cap is refused, the shard
 * goes on), and survives a save and a load. */
START_TEST(test_shard_coverage_is_a_bounded_set_of_ranges)
{
    xfer_shard *s = mk();
    const uint32_t n = XFER_SHARD_MAX_FRAGMENTS;
    uint32_t len = 16 * (2 * n + 2);
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, len);
    /* Every other 16-byte block from the end backwards: n fragments past
     * an empty prefix (block 2k+1 for k = n .. 1). */
    for (uint32_t k = n; k >= 1; k--)
        ck_assert_int_eq(write_part(s, 1, 1, 1, &a, 16 * (2 * k + 1), 16,
                                    true), 0);
    /* One more disjoint range would make n + 1: refused, nothing held. */
    uint8_t *dst = NULL;
    ck_assert_int_eq(xfer_shard_write_begin(s, 2, 1, 1, a.resv_id, 16 * 2 + 4,
                                            4, &dst),
                     XFER_ERR_BUSY);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_RESERVED);
    /* Overlapping a fragment is fine (no new one). */
    ck_assert_int_eq(write_part(s, 3, 1, 1, &a, 16 * 3 - 8, 24, true), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 4, 1, 1, a.resv_id),
                     XFER_ERR_INCOMPLETE);

    /* The set survives a save and a load into a fresh shard. */
    size_t need = 0;
    ck_assert_int_eq(xfer_shard_save(s, NULL, 0, &need), XFER_ERR_TOO_SMALL);
    uint8_t *buf = malloc(need);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(xfer_shard_save(s, buf, need, &need), 0);
    xfer_shard *t = mk();
    ck_assert_int_eq(xfer_shard_load(t, buf, need), 0);
    size_t need2 = 0;
    uint8_t *buf2 = malloc(need);
    ck_assert_int_eq(xfer_shard_save(t, buf2, need, &need2), 0);
    ck_assert_uint_eq(need2, need);
    ck_assert_mem_eq(buf, buf2, need);
    /* A fragment section that breaks its rules is refused. */
    buf[need - 1] ^= 0xff;
    xfer_shard *u = mk();
    ck_assert_int_eq(xfer_shard_load(u, buf, need), XFER_ERR_FORMAT);
    xfer_shard_del(u);
    free(buf);
    free(buf2);

    /* In both shards: fill the even blocks in reverse (each closes a
     * gap), and only the last byte missing keeps it INCOMPLETE. */
    xfer_shard *both[2] = {s, t};
    for (int w = 0; w < 2; w++) {
        xfer_shard *x = both[w];
        for (uint32_t k = n; k >= 1; k--)
            ck_assert_int_eq(write_part(x, 5, 1, 1, &a, 16 * (2 * k), 16,
                                        true), 0);
        ck_assert_int_eq(write_part(x, 6, 1, 1, &a, 1, 31, true), 0);
        ck_assert_int_eq(xfer_shard_commit(x, 7, 1, 1, a.resv_id),
                         XFER_ERR_INCOMPLETE);
        ck_assert_int_eq(write_part(x, 8, 1, 1, &a, 0, 1, true), 0);
        ck_assert_int_eq(xfer_shard_commit(x, 9, 1, 1, a.resv_id), 0);
    }
    xfer_shard_del(t);

    /* A failed write cuts from its offset on, fragments included. */
    xfer_resv_info b = reserve_ok(s, 20, 2, 1, 64);
    ck_assert_int_eq(write_part(s, 21, 2, 1, &b, 48, 16, true), 0);
    ck_assert_int_eq(write_part(s, 22, 2, 1, &b, 0, 16, true), 0);
    ck_assert_int_eq(write_part(s, 23, 2, 1, &b, 8, 4, false), 0);
    ck_assert_int_eq(write_part(s, 24, 2, 1, &b, 16, 32, true), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 25, 2, 1, b.resv_id),
                     XFER_ERR_INCOMPLETE);
    ck_assert_int_eq(write_part(s, 26, 2, 1, &b, 8, 56, true), 0);
    ck_assert_int_eq(xfer_shard_commit(s, 27, 2, 1, b.resv_id), 0);
    xfer_shard_del(s);
}
END_TEST

static xfer_shard_config owners_cfg(void)
{
    xfer_shard_config c = base_cfg();
    c.max_owners = 4;
    c.max_reservations = 16; /* 4 each */
    c.max_tombstones = 64;   /* 16 each */
    return c;
}

static xfer_resv_info reserve_by_ok(xfer_shard *s, uint64_t now,
                                    uint16_t owner, uint64_t id,
                                    uint32_t attempt, uint32_t len)
{
    xfer_resv_info info;
    ck_assert_int_eq(
        xfer_shard_reserve_by(s, now, owner, id, attempt, len, &info), 0);
    return info;
}

START_TEST(test_shard_owner_may_not_touch_another_owners_record)
{
    xfer_shard *s = mk_cfg(owners_cfg());
    xfer_resv_info a = reserve_by_ok(s, 0, 1, 7, 1, 64), info;
    uint8_t *dst = NULL;
    /* Owner 2 knows everything about it, and may do nothing with it. */
    ck_assert_int_eq(xfer_shard_reserve_by(s, 1, 2, 7, 1, 64, &info),
                     XFER_ERR_PERM);
    ck_assert_int_eq(xfer_shard_write_begin_by(s, 1, 2, 7, 1, a.resv_id, 0,
                                               64, &dst),
                     XFER_ERR_PERM);
    ck_assert_int_eq(xfer_shard_commit_by(s, 1, 2, 7, 1, a.resv_id),
                     XFER_ERR_PERM);
    ck_assert_int_eq(xfer_shard_cancel_by(s, 1, 2, 7, 1, a.resv_id),
                     XFER_ERR_PERM);
    ck_assert_int_eq(xfer_shard_cancel_by(s, 1, 2, 7, 1, XFER_RESV_NONE),
                     XFER_ERR_PERM);
    ck_assert_int_eq(xfer_shard_state(s, 7), XFER_RESV_STATE_RESERVED);
    ck_assert_ptr_null(dst);
    /* Its owner may; so may nobody in particular (the plain calls). */
    ck_assert_int_eq(xfer_shard_write_begin_by(s, 2, 1, 7, 1, a.resv_id, 0,
                                               64, &dst),
                     0);
    ck_assert_int_eq(xfer_shard_write_end(s, 2, 7, a.resv_id, true), 0);
    ck_assert_int_eq(xfer_shard_commit_by(s, 3, 1, 7, 1, a.resv_id), 0);
    /* The consumer's cancel (attempt 0) reaches every owner's record. */
    xfer_resv_info b = reserve_by_ok(s, 4, 1, 8, 1, 64);
    ck_assert_int_eq(xfer_shard_cancel_by(s, 5, 3, 8, 0, XFER_RESV_NONE), 0);
    ck_assert_int_eq(xfer_shard_state(s, 8), XFER_RESV_STATE_CANCELLED);
    (void)b;
    ck_assert_uint_eq(stats(s).illegal, 0);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_tombstone_blocks_only_its_maker)
{
    xfer_shard *s = mk_cfg(owners_cfg());
    xfer_resv_info info;
    /* A producer's pre-emptive cancel blocks that producer only. */
    ck_assert_int_eq(xfer_shard_cancel_by(s, 0, 2, 5, 1, XFER_RESV_NONE), 0);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 1, 2, 5, 1, 64, &info),
                     XFER_ERR_CANCELLED);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 1, 2, 5, 2, 64, &info),
                     XFER_ERR_CANCELLED); /* every attempt of its own */
    xfer_resv_info a = reserve_by_ok(s, 2, 1, 5, 1, 64);
    /* Its end by its owner's cancel: the one tombstone of the id is now
     * owner 1's, never everyone's (two owners cannot block a third). */
    ck_assert_int_eq(xfer_shard_cancel_by(s, 3, 1, 5, 1, a.resv_id), 0);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 4, 1, 5, 2, 64, &info),
                     XFER_ERR_CANCELLED);
    reserve_by_ok(s, 4, 3, 5, 1, 64);
    /* Two owners' cancels of one unknown id block neither a third. */
    ck_assert_int_eq(xfer_shard_cancel_by(s, 4, 1, 50, 1, XFER_RESV_NONE),
                     0);
    ck_assert_int_eq(xfer_shard_cancel_by(s, 4, 2, 50, 1, XFER_RESV_NONE),
                     0);
    reserve_by_ok(s, 4, 3, 50, 1, 64);
    /* A reservation ended by its owner's cancel, or by its lease, blocks
     * only its owner. */
    xfer_resv_info b = reserve_by_ok(s, 5, 1, 6, 1, 64);
    ck_assert_int_eq(xfer_shard_cancel_by(s, 6, 1, 6, 1, b.resv_id), 0);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 7, 1, 6, 2, 64, &info),
                     XFER_ERR_CANCELLED);
    reserve_by_ok(s, 7, 2, 6, 1, 64);
    reserve_by_ok(s, 8, 1, 9, 1, 64);
    xfer_shard_on_timer(s, 8 + LEASE);
    ck_assert_int_eq(xfer_shard_state(s, 9), XFER_RESV_STATE_EXPIRED);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 9 + LEASE, 1, 9, 2, 64, &info),
                     XFER_ERR_CANCELLED);
    reserve_by_ok(s, 9 + LEASE, 2, 9, 1, 64);
    /* The consumer's cancel blocks everyone, and so does a release. */
    uint64_t t = 10 + LEASE;
    ck_assert_int_eq(xfer_shard_cancel_by(s, t, 3, 10, 0, XFER_RESV_NONE), 0);
    for (uint16_t o = 1; o <= 4; o++)
        ck_assert_int_eq(xfer_shard_reserve_by(s, t, o, 10, 1, 64, &info),
                         XFER_ERR_CANCELLED);
    ck_assert_int_eq(xfer_shard_reserve(s, t, 10, 1, 64, &info),
                     XFER_ERR_CANCELLED);
    xfer_resv_info c = reserve_by_ok(s, t, 1, 11, 1, 64);
    write_whole(s, t, 11, 1, &c);
    ck_assert_int_eq(xfer_shard_commit_by(s, t, 1, 11, 1, c.resv_id), 0);
    const uint8_t *data;
    uint32_t len;
    ck_assert_int_eq(xfer_shard_take(s, t, 11, c.resv_id, &data, &len), 0);
    ck_assert_int_eq(xfer_shard_release(s, t, 11, c.resv_id), 0);
    ck_assert_int_eq(xfer_shard_reserve_by(s, t, 2, 11, 1, 64, &info),
                     XFER_ERR_CANCELLED);
    /* A producer's tombstone a consumer then cancels blocks everyone. */
    ck_assert_int_eq(xfer_shard_cancel_by(s, t, 2, 12, 1, XFER_RESV_NONE), 0);
    ck_assert_int_eq(xfer_shard_cancel_by(s, t, 3, 12, 0, XFER_RESV_NONE), 0);
    ck_assert_int_eq(xfer_shard_reserve_by(s, t, 1, 12, 1, 64, &info),
                     XFER_ERR_CANCELLED);
    /* Nobody in particular (the plain calls) sees every tombstone. */
    ck_assert_int_eq(xfer_shard_cancel_by(s, t, 2, 13, 1, XFER_RESV_NONE), 0);
    ck_assert_int_eq(xfer_shard_reserve(s, t, 13, 1, 64, &info),
                     XFER_ERR_CANCELLED);
    xfer_shard_del(s);
}
END_TEST

static xfer_shard_owner_use use_of(const xfer_shard *s, uint16_t owner)
{
    xfer_shard_owner_use u;
    ck_assert_int_eq(xfer_shard_owner_get(s, owner, &u), 0);
    return u;
}

START_TEST(test_shard_owner_quota_busy_for_itself_only)
{
    xfer_shard_config cfg = owners_cfg();
    xfer_shard *s = mk_cfg(cfg);
    xfer_resv_info info;
    /* Reservations: owner 1 takes its 4, then is refused; owner 2 is not. */
    for (uint64_t id = 1; id <= 4; id++)
        reserve_by_ok(s, 0, 1, id, 1, 64);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 0, 1, 5, 1, 64, &info),
                     XFER_ERR_BUSY);
    for (uint64_t id = 11; id <= 14; id++)
        reserve_by_ok(s, 0, 2, id, 1, 64);
    ck_assert_uint_eq(use_of(s, 1).live, 4);
    ck_assert_uint_eq(use_of(s, 1).bytes, 4 * rnd(64));
    ck_assert_uint_eq(use_of(s, 1).tombstones, 4); /* one slot per record */
    /* Bytes: a quarter of the pool each. */
    ck_assert_int_eq(xfer_shard_reserve_by(s, 0, 3, 21, 1, 16 * 1024 + 1,
                                           &info),
                     XFER_ERR_BUSY);
    reserve_by_ok(s, 0, 3, 21, 1, 16 * 1024 - 4 * 64);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 0, 3, 22, 1, 64, &info), 0);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 0, 3, 23, 1, 4 * 64, &info),
                     XFER_ERR_BUSY);
    /* Tombstones: owner 4 floods cancels of ids it never used until its
     * quota (16) is spent; everyone else keeps room. */
    uint64_t id = 100;
    int rc = 0;
    while ((rc = xfer_shard_cancel_by(s, 1, 4, id, 1, 0)) == 0)
        id++;
    ck_assert_int_eq(rc, XFER_ERR_BUSY);
    ck_assert_uint_eq(id - 100, 16);
    ck_assert_uint_eq(use_of(s, 4).tombstones, 16);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 1, 4, 30, 1, 64, &info),
                     XFER_ERR_BUSY); /* no slot left for its own record */
    ck_assert_int_eq(xfer_shard_cancel_by(s, 1, 1, 200, 1, 0), 0);
    ck_assert_int_eq(xfer_shard_cancel_by(s, 1, 2, 201, 1, 0), 0);
    /* Ending a record gives its bytes back but keeps its slot (now a
     * tombstone) until that expires. */
    ck_assert_int_eq(xfer_shard_cancel_by(s, 1, 1, 1, 1, 0), 0);
    ck_assert_uint_eq(use_of(s, 1).live, 3);
    ck_assert_uint_eq(use_of(s, 1).bytes, 3 * rnd(64));
    ck_assert_uint_eq(use_of(s, 1).tombstones, 5); /* 3 records, 2 tombs */
    /* Room comes back as the owner's tombstones expire. */
    xfer_shard_on_timer(s, 1 + TTTL);
    ck_assert_uint_eq(use_of(s, 4).tombstones, 0);
    reserve_by_ok(s, 2 + TTTL, 4, 30, 1, 64);
    ck_assert_int_eq(xfer_shard_owner_get(s, 0, &(xfer_shard_owner_use){0}),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_owner_get(s, 5, &(xfer_shard_owner_use){0}),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_shard_reserve_by(s, 0, 5, 1, 1, 64, &info),
                     XFER_ERR_INVALID_ARG);
    xfer_shard_del(s);
}
END_TEST

START_TEST(test_shard_save_load_with_owners)
{
    xfer_shard_config cfg = owners_cfg();
    xfer_shard *a = mk_cfg(cfg), *b = mk_cfg(cfg);
    xfer_resv_info r1 = reserve_by_ok(a, 0, 1, 1, 1, 64);
    xfer_resv_info r2 = reserve_by_ok(a, 0, 2, 2, 1, 100);
    write_whole(a, 1, 2, 1, &r2);
    begin_ok(a, 1, 1, 1, &r1); /* one write in flight, alone */
    ck_assert_int_eq(xfer_shard_cancel_by(a, 2, 3, 9, 0, 0), 0);
    ck_assert_int_eq(xfer_shard_cancel_by(a, 2, 2, 8, 1, 0), 0);
    load_from(b, a);
    ck_assert(same_state(a, b));
    for (uint16_t o = 1; o <= 4; o++) {
        xfer_shard_owner_use ua = use_of(a, o), ub = use_of(b, o);
        ck_assert_uint_eq(ua.live, ub.live);
        ck_assert_uint_eq(ua.bytes, ub.bytes);
        ck_assert_uint_eq(ua.tombstones, ub.tombstones);
    }
    /* Both answer alike: the write ends ok and completes the region; the
     * scoped tombstone still blocks only owner 2. */
    xfer_shard *ab[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        xfer_resv_info info;
        ck_assert_int_eq(xfer_shard_write_end(ab[k], 3, 1, r1.resv_id, true),
                         0);
        ck_assert_int_eq(xfer_shard_commit_by(ab[k], 3, 1, 1, 1, r1.resv_id),
                         0);
        ck_assert_int_eq(xfer_shard_commit_by(ab[k], 3, 2, 2, 1, r2.resv_id),
                         0);
        ck_assert_int_eq(xfer_shard_reserve_by(ab[k], 3, 2, 8, 1, 64, &info),
                         XFER_ERR_CANCELLED);
        ck_assert_int_eq(xfer_shard_reserve_by(ab[k], 3, 1, 8, 1, 64, &info),
                         0);
    }
    ck_assert(same_state(a, b));
    xfer_shard_del(a);
    xfer_shard_del(b);
}
END_TEST


/* ---------------------------------------------------------------------- */
/* Lease refresh                                                           */
/* ---------------------------------------------------------------------- */

/* A refreshed reservation outlives its first lease by as many refreshes as
 * come, RESERVED or WRITING, and is still whole to write and commit. */
START_TEST(test_shard_refresh_keeps_reservation_past_lease)
{
    xfer_shard *s = mk();
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 64);
    uint64_t granted = 0, now = 0;
    for (int i = 0; i < 5; i++) { /* to 2.5 leases: below the 6-lease cap */
        now += LEASE / 2;
        xfer_shard_on_timer(s, now);
        ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_RESERVED);
        ck_assert_int_eq(
            xfer_shard_refresh(s, now, 1, 1, a.resv_id, 0, &granted), 0);
        ck_assert_uint_eq(granted, LEASE);
        ck_assert_uint_eq(xfer_shard_next_deadline(s), now + LEASE);
    }
    /* while a write is in flight too */
    begin_ok(s, now, 1, 1, &a);
    ck_assert_int_eq(xfer_shard_refresh(s, now + 1, 1, 1, a.resv_id, 0,
                                        &granted),
                     0);
    ck_assert_int_eq(xfer_shard_write_end(s, now + 1, 1, a.resv_id, true), 0);
    xfer_shard_on_timer(s, now + LEASE);
    ck_assert_int_eq(xfer_shard_commit(s, now + LEASE, 1, 1, a.resv_id), 0);
    xfer_shard_stats st = stats(s);
    ck_assert_uint_eq(st.refreshes, 6);
    ck_assert_uint_eq(st.expiries, 0);
    /* without a refresh the lease ends as before */
    xfer_resv_info b = reserve_ok(s, now, 2, 1, 64);
    xfer_shard_on_timer(s, now + LEASE);
    ck_assert_int_eq(xfer_shard_state(s, 2), XFER_RESV_STATE_EXPIRED);
    ck_assert_int_eq(
        xfer_shard_refresh(s, now + LEASE, 2, 1, b.resv_id, 0, &granted),
        XFER_ERR_EXPIRED);
    xfer_shard_del(s);
}
END_TEST

/* The grant: never more than asked, never more than a lease from now,
 * never shorter than what runs, never past the hold cap; at the cap it is
 * refused BOUNDS and the lease then ends. */
START_TEST(test_shard_refresh_bounded_by_want_and_cap)
{
    xfer_shard_config c = base_cfg();
    c.max_hold_ms = (uint32_t)(3 * LEASE / MS); /* 300 ms */
    xfer_shard *s = mk_cfg(c);
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 64);
    uint64_t g = 0;
    /* asks for less than what already runs: nothing shortened */
    ck_assert_int_eq(xfer_shard_refresh(s, 10 * MS, 1, 1, a.resv_id,
                                        5 * MS, &g),
                     0);
    ck_assert_uint_eq(g, LEASE - 10 * MS);
    ck_assert_uint_eq(xfer_shard_next_deadline(s), LEASE);
    /* asks for more than a lease: one lease */
    ck_assert_int_eq(xfer_shard_refresh(s, 50 * MS, 1, 1, a.resv_id,
                                        10 * LEASE, &g),
                     0);
    ck_assert_uint_eq(g, LEASE);
    /* asks for part of one: that part */
    ck_assert_int_eq(xfer_shard_refresh(s, 100 * MS, 1, 1, a.resv_id,
                                        70 * MS, &g),
                     0);
    ck_assert_uint_eq(g, 70 * MS);
    /* near the cap: up to it, then refused */
    ck_assert_int_eq(xfer_shard_refresh(s, 160 * MS, 1, 1, a.resv_id, 0, &g),
                     0);
    ck_assert_uint_eq(g, LEASE);
    ck_assert_int_eq(xfer_shard_refresh(s, 250 * MS, 1, 1, a.resv_id, 0, &g),
                     0);
    ck_assert_uint_eq(g, 50 * MS);
    ck_assert_uint_eq(xfer_shard_next_deadline(s), 3 * LEASE);
    ck_assert_int_eq(xfer_shard_refresh(s, 260 * MS, 1, 1, a.resv_id, 0, &g),
                     XFER_ERR_BOUNDS);
    ck_assert_uint_eq(xfer_shard_next_deadline(s), 3 * LEASE);
    xfer_shard_on_timer(s, 3 * LEASE);
    ck_assert_int_eq(xfer_shard_state(s, 1), XFER_RESV_STATE_EXPIRED);
    xfer_shard_stats st = stats(s);
    ck_assert_uint_eq(st.refreshes, 5);
    ck_assert_uint_eq(st.refreshes_refused, 1);
    /* a cap below the lease is refused at creation */
    xfer_shard *bad = NULL;
    c.max_hold_ms = (uint32_t)(LEASE / MS) - 1;
    ck_assert_int_eq(xfer_shard_new(&c, &bad), XFER_ERR_INVALID_ARG);
    xfer_shard_del(s);
}
END_TEST

/* Refused whole: another owner (PERM), another attempt or reservation
 * (STALE), a committed record (STATE); the lease is left as it ran. */
START_TEST(test_shard_refresh_refused_changes_nothing)
{
    xfer_shard *s = mk_cfg(owners_cfg());
    xfer_resv_info a = reserve_by_ok(s, 0, 1, 7, 1, 64);
    uint64_t g = 77;
    ck_assert_int_eq(
        xfer_shard_refresh_by(s, 50 * MS, 2, 7, 1, a.resv_id, 0, &g),
        XFER_ERR_PERM);
    ck_assert_int_eq(
        xfer_shard_refresh_by(s, 50 * MS, 1, 7, 2, a.resv_id, 0, &g),
        XFER_ERR_STALE);
    ck_assert_int_eq(
        xfer_shard_refresh_by(s, 50 * MS, 1, 7, 1, BAD_RESV, 0, &g),
        XFER_ERR_STALE);
    ck_assert_uint_eq(g, 77);
    ck_assert_uint_eq(xfer_shard_next_deadline(s), LEASE);
    xfer_shard_on_timer(s, LEASE);
    ck_assert_int_eq(xfer_shard_state(s, 7), XFER_RESV_STATE_EXPIRED);
    /* committed: the READY lease is the consumer's, not the producer's */
    xfer_resv_info b = reserve_by_ok(s, LEASE, 1, 8, 1, 64);
    uint8_t *dst = NULL;
    ck_assert_int_eq(xfer_shard_write_begin_by(s, LEASE, 1, 8, 1, b.resv_id,
                                               0, 64, &dst),
                     0);
    ck_assert_int_eq(xfer_shard_write_end(s, LEASE, 8, b.resv_id, true), 0);
    ck_assert_int_eq(xfer_shard_commit_by(s, LEASE, 1, 8, 1, b.resv_id), 0);
    ck_assert_int_eq(
        xfer_shard_refresh_by(s, LEASE + 1, 1, 8, 1, b.resv_id, 0, &g),
        XFER_ERR_STATE);
    xfer_shard_stats st = stats(s);
    ck_assert_uint_eq(st.refreshes, 0);
    ck_assert_uint_eq(st.refreshes_refused, 4);
    xfer_shard_del(s);
}
END_TEST

/* A version 2 config's tail padding is not read as a hold cap, and the
 * stats of version 1 stop before the refresh counters. */
START_TEST(test_shard_refresh_config_and_stats_versions)
{
    xfer_shard_config c = base_cfg();
    c.version = 2;
    c.max_hold_ms = 1; /* garbage a version 2 caller left there */
    xfer_shard *s = mk_cfg(c);
    xfer_resv_info a = reserve_ok(s, 0, 1, 1, 64);
    uint64_t g = 0;
    xfer_shard_on_timer(s, 5 * LEASE);
    ck_assert_int_eq(xfer_shard_refresh(s, 5 * LEASE, 1, 1, a.resv_id, 0, &g),
                     XFER_ERR_EXPIRED);
    a = reserve_ok(s, 5 * LEASE, 2, 1, 64);
    ck_assert_int_eq(
        xfer_shard_refresh(s, 5 * LEASE + 1, 2, 1, a.resv_id, 0, &g), 0);
    ck_assert_uint_eq(g, LEASE);
    xfer_shard_stats st;
    memset(&st, 0xab, sizeof st);
    ck_assert_int_eq(xfer_shard_stats_get_versioned(s, 1, &st), 0);
    ck_assert_uint_eq(st.refreshes, 0xababababababababull);
    ck_assert_int_eq(xfer_shard_stats_get_versioned(s, 2, &st), 0);
    ck_assert_uint_eq(st.refreshes, 1);
    xfer_shard_del(s);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("shard");
    TCase *tc = tcase_create("rules");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_shard_lease_expiry_frees_idle_reservation);
    tcase_add_loop_test(tc, test_shard_consumer_cancel_any_attempt, 0, 6);
    tcase_add_test(tc, test_shard_lease_expiry_during_write_is_deferred);
    tcase_add_test(tc, test_shard_cancel_during_write_is_deferred);
    tcase_add_test(tc, test_shard_copy_holds_region_until_it_ends);
    tcase_add_test(tc, test_shard_copy_count_saved);
    tcase_add_test(tc, test_shard_cancel_frees_reserved_and_ready_at_once);
    tcase_add_test(tc, test_shard_taken_memory_survives_cancel_and_lease);
    tcase_add_test(tc, test_shard_preemptive_cancel_refuses_later_reserve);
    tcase_add_loop_test(tc, test_shard_attempt_isolation, 0,
                        (int)(sizeof live_states / sizeof live_states[0]));
    tcase_add_test(tc, test_shard_reserve_idempotent_per_attempt);
    tcase_add_test(tc, test_shard_bad_writes_change_nothing);
    tcase_add_test(tc, test_shard_invalid_arguments);
    tcase_add_test(tc, test_shard_pool_flood_then_room_again);
    tcase_add_test(tc, test_shard_reservation_cap_busy);
    tcase_add_test(tc, test_shard_tombstone_cap_never_evicts_young);
    tcase_add_test(tc, test_shard_tombstones_expire_after_ttl);
    tcase_add_test(tc, test_shard_event_list_is_bounded);
    tcase_add_test(tc, test_shard_trace_one_record_per_call);
    tcase_add_test(tc, test_shard_foreach_order);
    tcase_add_test(tc, test_shard_eager_applies_whole);
    tcase_add_test(tc, test_shard_eager_refused_whole);
    tcase_add_test(tc, test_shard_transition_coverage);
    tcase_add_test(tc, test_shard_commit_needs_every_byte_written);
    tcase_add_test(tc, test_shard_coverage_is_a_bounded_set_of_ranges);
    tcase_add_test(tc, test_shard_owner_may_not_touch_another_owners_record);
    tcase_add_test(tc, test_shard_tombstone_blocks_only_its_maker);
    tcase_add_test(tc, test_shard_owner_quota_busy_for_itself_only);
    tcase_add_test(tc, test_shard_save_load_with_owners);
    tcase_add_test(tc, test_shard_refresh_keeps_reservation_past_lease);
    tcase_add_test(tc, test_shard_refresh_bounded_by_want_and_cap);
    tcase_add_test(tc, test_shard_refresh_refused_changes_nothing);
    tcase_add_test(tc, test_shard_refresh_config_and_stats_versions);
    suite_add_tcase(s, tc);

    TCase *model = tcase_create("model");
    tcase_set_timeout(model, 120);
    tcase_add_test(model, test_shard_random_ops_keep_memory_invariants);
    tcase_add_test(model, test_shard_save_load_roundtrip);
    tcase_add_test(model, test_shard_load_refuses_write_range_past_region);
    tcase_add_test(model, test_shard_load_refuses_ready_record_not_whole);
    tcase_add_test(model, test_shard_load_rejects_bad_input);
    tcase_add_test(model, test_shard_save_ignores_shard_index);
    tcase_add_test(model, test_shard_save_load_twin_behaves_alike);
    tcase_add_test(model,
                   test_shard_one_sided_random_ops_keep_memory_invariants);
    tcase_add_test(model, test_shard_one_sided_save_load_twin_behaves_alike);
    suite_add_tcase(s, model);

    TCase *os = tcase_create("one_sided");
    tcase_set_timeout(os, 60);
    tcase_add_test(os,
                   test_shard_one_sided_commit_ready_only_after_invalidation);
    tcase_add_test(os,
                   test_shard_one_sided_cancel_frees_only_after_invalidation);
    tcase_add_test(os,
                   test_shard_one_sided_lease_expiry_waits_for_invalidation);
    tcase_add_test(os,
                   test_shard_one_sided_cancel_or_expiry_during_commit_inval);
    tcase_add_test(os,
                   test_shard_one_sided_deferred_cancel_then_invalidation);
    tcase_add_test(os, test_shard_one_sided_stray_invalidation_refused);
    tcase_add_test(os, test_shard_one_sided_off_by_default_and_in_version_1);
    tcase_add_test(os, test_shard_one_sided_request_list_bounded);
    suite_add_tcase(s, os);

    TCase *fault = tcase_create("fault");
    tcase_set_timeout(fault, 60);
    tcase_add_test(fault, test_shard_alloc_failure_each_allocation);
    suite_add_tcase(s, fault);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
