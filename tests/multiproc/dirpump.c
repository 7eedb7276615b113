/*
 * tests/multiproc/dirpump.c - the directory tests' producer.  See
 * dirpump.h.
 */
#include "dirpump.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "mp.h"

static void pump_done(void *ud, const xfer_result *res)
{
    dir_pump *u = ud;
    if (res->id < u->seen_cap && u->seen[res->id]++)
        u->dup++;
    u->done++;
    u->free_slots[u->nfree++] = (uint32_t)res->user_data;
    if (res->status == 0) {
        u->ok++;
        u->since_ok++;
        return;
    }
    if (u->failed < 3 || getenv("DIR_TCP_VERBOSE"))
        fprintf(stderr, "transfer %llu failed: %s (shards 0x%llx, "
                "phase %u)\n", (unsigned long long)res->id,
                xfer_strerror(res->status),
                (unsigned long long)res->failed_shards,
                (unsigned)res->phase);
    u->failed++;
    if (res->status == XFER_ERR_SHARD_GONE)
        u->gone++;
    else if (u->mark && res->id >= u->mark)
        u->late_other++;
}

/* At most 4 a tick (800/s): the shards' tombstones (2 lease TTLs) stay
 * far below their cap. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    dir_pump *u = arg;
    for (int n = 0; n < 4 && !u->stop && u->nfree &&
                    u->next_id + 1 < u->seen_cap; n++) {
        uint32_t slot = u->free_slots[--u->nfree];
        xfer_slice sl[XFER_MAX_SHARDS];
        for (uint16_t k = 0; k < u->nshards; k++) {
            sl[k].off = ((uint64_t)slot * u->nshards + k) * u->slice;
            sl[k].len = u->slice;
        }
        xfer_transfer_desc d = {.id = ++u->next_id, .group = u->group,
                                .pool = u->pool, .nslices = u->nshards,
                                .slices = sl, .user_data = slot};
        ck_assert_int_eq(xfer_engine_submit(u->e, &d, pump_done, u), 0);
        u->submitted++;
    }
}

static void on_log(void *ud, const char *line)
{
    fprintf(stderr, "producer dir: %s\n", line);
}

void dir_pump_new(dir_pump *u, const char *eps, uint16_t nshards,
                  uint32_t slice)
{
    memset(u, 0, sizeof *u);
    signal(SIGPIPE, SIG_IGN);
    u->nshards = nshards;
    u->slice = slice;
    u->base = event_base_new();
    ck_assert_ptr_nonnull(u->base);
    xfer_dir_config dc;
    xfer_dir_config_default(&dc);
    dc.endpoints = eps;
    dc.request_timeout_ns = 1000000000ull;
    dc.reconnect_min_ns = 50000000ull;
    dc.reconnect_max_ns = 500000000ull;
    dc.log = on_log;
    ck_assert_int_eq(xfer_dir_new(u->base, &dc, &u->dir), 0);
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.base = u->base;
    ec.core.default_deadline_ns = 5000000000ull;
    ck_assert_int_eq(xfer_engine_new(&ec, &u->e), 0);
    u->staging = calloc((size_t)DIR_PUMP_SLOTS * nshards, slice);
    ck_assert_ptr_nonnull(u->staging);
    for (uint32_t i = 0; i < DIR_PUMP_SLOTS; i++)
        u->free_slots[u->nfree++] = i;
    u->seen_cap = 1u << 20;
    u->seen = calloc(u->seen_cap, 1);
    u->tick = event_new(u->base, -1, EV_PERSIST, on_tick, u);
}

void dir_pump_attach(dir_pump *u, xfer_transport t)
{
    ck_assert_int_eq(xfer_engine_add_group(u->e, t, &u->group), 0);
    ck_assert_int_eq(xfer_engine_register_pool(
                         u->e, u->staging,
                         (size_t)DIR_PUMP_SLOTS * u->nshards * u->slice,
                         &u->pool),
                     0);
}

void dir_pump_start(dir_pump *u)
{
    u->stop = false;
    struct timeval tv = {0, 5000};
    event_add(u->tick, &tv);
}

static bool pump_idle(void *ud)
{
    return ((dir_pump *)ud)->nfree == DIR_PUMP_SLOTS;
}

void dir_pump_stop(dir_pump *u)
{
    u->stop = true;
    ck_assert(mp_run_while(u->base, pump_idle, u, 20000));
    event_del(u->tick);
}

void dir_pump_run_ms(dir_pump *u, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_base_loopexit(u->base, &tv);
    event_base_dispatch(u->base);
}

static void on_shut(void *ud)
{
    ((dir_pump *)ud)->shut = true;
}

void dir_pump_shutdown(dir_pump *u)
{
    ck_assert_int_eq(xfer_engine_shutdown(u->e, on_shut, u), 0);
    ck_assert(mp_run_until(u->base, &u->shut, 20000));
    xfer_engine_del(u->e);
    u->e = NULL;
}

void dir_pump_free(dir_pump *u)
{
    xfer_dir_del(u->dir);
    event_free(u->tick);
    event_base_loop(u->base, EVLOOP_NONBLOCK);
    event_base_free(u->base);
    free(u->staging);
    free(u->seen);
}
