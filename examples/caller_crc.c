/*
 * examples/caller_crc.c - a producer that already has the CRC32C of each
 * slice (docs/integrity.md, "Caller CRCs"): it passes them with the
 * submit, and the library reads none of its staging for a checksum.  The
 * shards (here four in-process ones, the loop transport) check each CRC
 * against their own region before the data becomes READY.
 *
 * Transfer 1 carries the right CRCs and succeeds.  Transfer 2 carries one
 * wrong CRC, for shard 3: the shard refuses the commit, the transfer
 * fails XFER_ERR_CORRUPT naming shard 3, and nothing of it is READY.
 * Exit status: 0 when both did just that.
 *
 * The CRCs here come from a plain loop over the bytes; a real producer
 * has them from wherever it made the data (a GPU kernel, its cache).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <xfer/loop.h>
#include <xfer/xfer.h>

#define NSHARDS 4
#define SLICE 4096

static uint8_t staging[2 * NSHARDS * SLICE];
static int ok_1, corrupt_2;

/* CRC32C (Castagnoli, reflected 0x82F63B78): "123456789" -> E3069283. */
static uint32_t crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int b = 0; b < 8; b++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

static void done(void *ud, const xfer_result *r)
{
    (void)ud;
    printf("transfer %llu: %s (shard %u)\n", (unsigned long long)r->id,
           r->status ? xfer_strerror(r->status) : "ok",
           r->status ? r->first_failed_shard : 0);
    ok_1 += r->id == 1 && r->status == 0;
    corrupt_2 += r->id == 2 && r->status == XFER_ERR_CORRUPT &&
                 r->first_failed_shard == 3;
}

static void stopped(void *ud)
{
    event_base_loopbreak(ud);
}

static void idle(void *ud)
{
    xfer_engine *e = ud;
    xfer_engine_shutdown(e, stopped, xfer_engine_base(e));
}

/* Submit transfer id from the id-th half of staging, with the slices'
 * CRCs; `wrong`: the shard whose CRC is spoilt (NSHARDS: none). */
static int submit(xfer_engine *e, uint32_t group, uint32_t pool,
                  uint64_t id, unsigned wrong)
{
    xfer_slice slices[NSHARDS];
    uint32_t crcs[NSHARDS];
    for (unsigned k = 0; k < NSHARDS; k++) {
        uint64_t off = ((id - 1) * NSHARDS + k) * SLICE;
        slices[k] = (xfer_slice){.off = off, .len = SLICE};
        crcs[k] = crc32c(staging + off, SLICE) ^ (k == wrong ? 1u : 0u);
    }
    xfer_transfer_desc d = {.id = id, .group = group, .pool = pool,
                            .nslices = NSHARDS, .slices = slices,
                            .timeout_ns = 2000000000u};
    /* crcs is copied: the producer reads no staging for a checksum */
    return xfer_engine_submit_crc(e, &d, crcs, done, NULL);
}

int main(void)
{
    xfer_engine *e = NULL;
    xfer_loop *shards = NULL;
    uint32_t group, pool;
    int rc = xfer_engine_new(NULL, &e);
    if (rc)
        goto out;
    xfer_loop_config lc;
    xfer_loop_config_default(&lc);
    lc.nshards = NSHARDS;
    lc.shard.pool_bytes = 1 << 20;
    rc = xfer_loop_new(xfer_engine_base(e), &lc, &shards);
    if (rc)
        goto out;
    rc = xfer_engine_add_group(e, xfer_loop_transport(shards), &group);
    if (rc)
        goto out;
    for (size_t i = 0; i < sizeof staging; i++)
        staging[i] = (uint8_t)(i * 7 + 1);
    rc = xfer_engine_register_pool(e, staging, sizeof staging, &pool);
    if (rc)
        goto out;
    if ((rc = submit(e, group, pool, 1, NSHARDS)) != 0 ||
        (rc = submit(e, group, pool, 2, 3)) != 0 ||
        (rc = xfer_engine_on_idle(e, idle, e)) != 0)
        goto out;
    if (event_base_dispatch(xfer_engine_base(e)) < 0)
        rc = XFER_ERR_IO;
out:
    if (rc)
        fprintf(stderr, "caller_crc: %s\n", xfer_strerror(rc));
    xfer_engine_del(e);
    xfer_loop_del(shards);
    return rc || !ok_1 || !corrupt_2 ? 1 : 0;
}
