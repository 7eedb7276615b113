/*
 * tests/enginetest.c - see enginetest.h.
 */
#include "enginetest.h"

#include <check.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

static int outstanding_submits;

uint8_t et_pattern(uint64_t id, uint16_t shard, uint32_t i)
{
    return (uint8_t)(id * 37 + shard * 101 + i);
}

static void on_done(void *ud, const xfer_result *r)
{
    et_env *v = ud;
    ck_assert_uint_lt(r->id, ET_MAXID);
    v->ncb[r->id]++;
    v->res[r->id] = *r;
    v->total_cb++;
    outstanding_submits--;
}

/* The consumer: take ready data, check every byte, release it. */
static void on_event(void *ud, const xfer_shard_event *ev)
{
    et_env *v = ud;
    if (ev->kind != XFER_SHARD_EV_READY || !v->consumer_takes)
        return;
    xfer_shard *s = xfer_loop_shard(v->l, ev->shard);
    const uint8_t *data;
    uint32_t len;
    uint64_t now = xfer_engine_now(v->e);
    if (xfer_shard_take(s, now, ev->id, ev->resv_id, &data, &len) != 0)
        return;
    v->taken++;
    for (uint32_t i = 0; i < len; i++)
        v->bad_bytes += data[i] != et_pattern(ev->id, ev->shard, i);
    ck_assert_int_eq(xfer_shard_release(s, now, ev->id, ev->resv_id), 0);
}

void et_init(et_env *v, const et_opts *o)
{
    memset(v, 0, sizeof *v);
    outstanding_submits = 0;
    v->consumer_takes = 1;
    xfer_engine_config ec;
    xfer_engine_config_default(&ec);
    ec.core.max_transfers = 256;
    ec.core.max_tombstones = 4096;
    ec.core.tombstone_ttl_ns = 2000 * ET_MS;
    /* The loop's shards lease for 1 s (or o->lease_ns, less) and deliver
     * in the same process. */
    ec.core.consumer_lease_ns = 1000 * ET_MS;
    ec.core.net_margin_ns = 1000 * ET_MS;
    ec.core.cancel_op_timeout_ns = 200 * ET_MS;
    ec.core.cancel_backoff_ns = 2 * ET_MS;
    ec.core.cancel_max_attempts = 3;
    ec.core.alloc = o->core_alloc;
    ec.core.eager_max_bytes = o->eager_max_bytes;
    ec.mailbox_cap = o->mailbox_cap;
    if (o->max_transfers == ET_DEFAULT)
        ec.core.max_transfers = ec.core.max_tombstones = 0;
    else if (o->max_transfers)
        ec.core.max_transfers = o->max_transfers;
    ck_assert_int_eq(xfer_engine_new(&ec, &v->e), 0);
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = ET_S;
    lc.alloc = o->loop_alloc;
    lc.seed = o->seed;
    lc.write_ns = o->write_ns;
    lc.on_event = o->on_event ? o->on_event : on_event;
    lc.on_event_ud = v;
    lc.shard.pool_bytes = ET_SLOTS * ET_BLK * 4;
    lc.shard.max_reservations = 512;
    lc.shard.lease_ttl_ns = o->lease_ns ? o->lease_ns : 1000 * ET_MS;
    lc.shard.tombstone_ttl_ns = 2000 * ET_MS;
    ck_assert_int_eq(xfer_loop_new(xfer_engine_base(v->e), &lc, &v->l), 0);
    for (size_t i = 0; i < o->nrules; i++)
        ck_assert_int_eq(xfer_loop_add_rule(v->l, &o->rules[i]), 0);
    ck_assert_int_eq(xfer_engine_register_pool(v->e, v->staging,
                                               sizeof v->staging, &v->pool),
                     0);
    ck_assert_int_eq(xfer_engine_add_group(v->e, xfer_loop_transport(v->l),
                                           &v->group),
                     0);
}

void et_free(et_env *v)
{
    xfer_engine_del(v->e);
    xfer_loop_del(v->l);
}

int et_submit(et_env *v, uint64_t id, uint64_t timeout_ns)
{
    return et_submit_crc(v, id, timeout_ns, NULL);
}

int et_submit_crc(et_env *v, uint64_t id, uint64_t timeout_ns,
                  const uint32_t *crcs)
{
    uint32_t slot = (uint32_t)(id % ET_SLOTS);
    xfer_slice sl[ET_S];
    for (uint16_t k = 0; k < ET_S; k++) {
        size_t off = ((size_t)slot * ET_S + k) * ET_BLK;
        sl[k] = (xfer_slice){off, ET_BLK};
        for (uint32_t i = 0; i < ET_BLK; i++)
            v->staging[off + i] = et_pattern(id, k, i);
    }
    xfer_transfer_desc d = {.id = id, .group = v->group, .pool = v->pool,
                            .nslices = ET_S, .slices = sl,
                            .timeout_ns = timeout_ns, .user_data = id};
    int rc = crcs ? xfer_engine_submit_crc(v->e, &d, crcs, on_done, v)
                  : xfer_engine_submit(v->e, &d, on_done, v);
    if (rc == 0)
        outstanding_submits++;
    return rc;
}

/* The library's monotonic clock, in ms. */
static double wall_ms(void)
{
    return (double)xfer_clock_monotonic(NULL) / 1e6;
}

static void tick(evutil_socket_t fd, short what, void *arg)
{
}

bool et_run(et_env *v, bool (*pred)(et_env *), int max_ms)
{
    struct event_base *b = xfer_engine_base(v->e);
    struct event *t = event_new(b, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 2000};
    event_add(t, &tv);
    double end = wall_ms() + max_ms;
    while (!(pred && pred(v)) && wall_ms() < end)
        event_base_loop(b, EVLOOP_ONCE);
    event_free(t);
    return pred ? pred(v) : true;
}

void et_run_for(et_env *v, int ms)
{
    et_run(v, NULL, ms);
}

bool et_all_done(et_env *v)
{
    return outstanding_submits == 0;
}

uint64_t et_shard_bytes(et_env *v)
{
    uint64_t sum = 0;
    for (uint16_t k = 0; k < ET_S; k++) {
        xfer_shard_stats st;
        xfer_shard_stats_get(xfer_loop_shard(v->l, k), &st);
        sum += st.bytes_in_use;
    }
    return sum;
}
