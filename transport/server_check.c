/*
 * transport/server_check.c - the shard server's end-to-end integrity
 * (docs/integrity.md): a COMMIT_CRC's region, or an EAGER_CRC's data, is
 * checksummed (CRC32C, transport/crc.h) and judged by the shard
 * (xfer_shard_check) before the commit; a mismatch answers
 * XFER_ERR_CORRUPT and commits nothing, so the producer rolls back as for
 * any failed commit and no region whose bytes differ from the producer's
 * staging is ever READY.  The CRC a region passed with is kept with its
 * record (server_events.c) and sent in its READY events, for a consumer
 * that checks again on take.
 *
 * What must stay true:
 *  - only a region the asking session reserved, of the attempt and
 *    reservation the COMMIT names, still RESERVED, is checksummed; any
 *    other COMMIT is left to the shard, which refuses it (PERM, STALE,
 *    STATE...), so a peer cannot make the server read another session's
 *    region, nor make one READY with a checksum of its choosing;
 *  - over RDMA the region's rkey is dead before its bytes are read
 *    (xfer_server_rdma_seal), so the bytes checked are the bytes that
 *    stay; a write that never landed, or landed wrong, is found here;
 *  - every check is counted (crc_checked), every mismatch counted
 *    (corrupt), logged and traced (the shard's NOTE CORRUPT).
 */
#include "server_int.h"

#include <stdio.h>
#include <string.h>

#include "crc.h"
#include "server_rdma.h"
#include "xfer/integrity.h"

/* ---------------------------------------------------------------------- */
/* Integrity at landing (issue 27)                                         */
/* ---------------------------------------------------------------------- */

/* A TCP write into a host pool of a checking shard keeps the CRC of its
 * bytes, taken from the pool as each chunk lands (server_conn.c calls
 * xfer_server_check_landed after every recv into the pool), so the
 * COMMIT's check needs no second, cache-cold pass over the region.  What
 * that CRC stands for: the bytes this write put into the pool, as they
 * were when they arrived.  A later write over the same bytes (an
 * overlap), or a write that began and failed (its bytes are whatever
 * part of it landed), would change them behind the kept CRC: either
 * makes the record's runs bad and its COMMIT reads the region whole, as
 * before.  A one-sided (RDMA) server and a device pool are not kept:
 * their writes are not seen (RDMA) or land through a copy that the
 * read-back checks (device). */
void xfer_server_check_write_begin(xfer_server_conn *c)
{
    const xfer_server *s = c->srv;
    c->wcrc = 0;
    c->wcrc_len = 0;
    c->wcrc_on = s->cfg.integrity != XFER_INTEGRITY_OFF && c->dst &&
                 c->wm.len > 0 && !s->shards[c->hosted].cp && !s->one_sided;
}

void xfer_server_check_crc_more(xfer_server_conn *c)
{
    c->wcrc = xfer_crc32c(c->wcrc, c->dst + c->wcrc_len,
                          c->wgot - c->wcrc_len);
    c->wcrc_len = c->wgot;
}

/* Join run i + 1 into run i (adjacent). */
static void join_next(xfer_server_resv *r, uint32_t i)
{
    xfer_server_run *a = &r->runs[i], *b = &r->runs[i + 1];
    a->crc = xfer_crc32c_combine(a->crc, b->crc, b->len);
    a->len += b->len;
    memmove(b, b + 1, (r->nruns - i - 2) * sizeof *b);
    r->nruns--;
}

/* The run [off, off + len) with crc joins r's sorted, disjoint runs. */
static void add_run(xfer_server_resv *r, uint64_t off, uint32_t len,
                    uint32_t crc)
{
    uint64_t end = off + len;
    uint32_t i = 0;
    while (i < r->nruns && r->runs[i].off < off)
        i++;
    if (end > r->len ||
        (i > 0 && r->runs[i - 1].off + (uint64_t)r->runs[i - 1].len > off) ||
        (i < r->nruns && r->runs[i].off < end)) {
        r->runs_bad = true; /* an overlap: read the region whole */
        return;
    }
    /* one slot to spare: the run goes in, then joins its neighbours */
    memmove(&r->runs[i + 1], &r->runs[i], (r->nruns - i) * sizeof r->runs[0]);
    r->runs[i] = (xfer_server_run){.off = (uint32_t)off, .len = len,
                                   .crc = crc};
    r->nruns++;
    if (i + 1 < r->nruns && r->runs[i + 1].off == end)
        join_next(r, i);
    if (i > 0 && r->runs[i - 1].off + (uint64_t)r->runs[i - 1].len == off)
        join_next(r, i - 1);
    if (r->nruns > XFER_SERVER_RUNS)
        r->runs_bad = true; /* too many gaps to keep: read it whole */
}

void xfer_server_check_write_end(xfer_server_hosted *hs,
                                 const xfer_wire_msg *m, uint32_t crc,
                                 bool ok)
{
    xfer_server_resv *r = xfer_server_track_find(hs, m->id);
    if (!r || r->resv_id != m->resv_id || r->runs_bad)
        return;
    if (ok)
        add_run(r, m->off, m->len, crc);
    else
        r->runs_bad = true;
}

/* ---------------------------------------------------------------------- */
/* The checks                                                              */
/* ---------------------------------------------------------------------- */

/* A device pool (issue 25) is never dereferenced here: its COMMIT is
 * checked over a read-back (xfer_server_check_device, started by
 * server_copy.c's xfer_server_copy_readback), never by
 * xfer_server_check_commit. */
static bool checking(const xfer_server *s, const xfer_wire_msg *m)
{
    return m->crc_set && s->cfg.integrity != XFER_INTEGRITY_OFF;
}

static int32_t judge(xfer_server_conn *c, xfer_server_hosted *hs,
                     const xfer_wire_msg *m, uint32_t got)
{
    xfer_server *s = c->srv;
    hs->crc_checked++;
    int32_t rc = xfer_shard_check(hs->sh, xfer_server_now(s), m->id,
                                  m->attempt, m->crc, got);
    if (rc == XFER_ERR_CORRUPT) {
        char line[128];
        hs->corrupt++;
        snprintf(line, sizeof line,
                 "shard %u id %llu: checksum mismatch (sent %08x, "
                 "holds %08x), not committed",
                 (unsigned)hs->index, (unsigned long long)m->id,
                 (unsigned)m->crc, (unsigned)got);
        xfer_server_log(s, c->serial, line);
    }
    return rc;
}

xfer_server_resv *xfer_server_check_region(xfer_server_conn *c,
                                           xfer_server_hosted *hs,
                                           const xfer_wire_msg *m)
{
    if (!checking(c->srv, m))
        return NULL;
    xfer_server_resv *r = xfer_server_track_find(hs, m->id);
    if (!r || r->resv_id != m->resv_id || r->attempt != m->attempt ||
        r->owner != c->owner ||
        xfer_shard_state(hs->sh, m->id) != XFER_RESV_STATE_RESERVED)
        return NULL; /* not a commit the shard would apply: its refusal */
    return r;
}

int32_t xfer_server_check_commit(xfer_server_conn *c, xfer_server_hosted *hs,
                                 const xfer_wire_msg *m)
{
    xfer_server *s = c->srv;
    xfer_server_resv *r = xfer_server_check_region(c, hs, m);
    if (!r || hs->cp)
        return 0; /* a device region is checked by its read-back */
    if (s->one_sided && xfer_server_rdma_seal(s->rdma, hs, m->id,
                                              m->resv_id) != 0)
        return XFER_ERR_REMOTE; /* a write may still land: no verdict */
    uint32_t got;
    if (!s->one_sided && !r->runs_bad && r->nruns == 1 &&
        r->runs[0].off == 0 && r->runs[0].len == r->len)
        got = r->runs[0].crc; /* the writes' CRCs, taken as they landed */
    else
        got = xfer_crc32c(0, xfer_shard_pool_base(hs->sh) + r->off, r->len);
    int32_t rc = judge(c, hs, m, got);
    if (rc == 0) {
        r->crc = m->crc;
        r->crc_set = true;
    }
    return rc;
}

int32_t xfer_server_check_device(xfer_server_conn *c, xfer_server_hosted *hs,
                                 const xfer_wire_msg *m, const uint8_t *bytes,
                                 uint32_t len)
{
    xfer_server_resv *r = xfer_server_check_region(c, hs, m);
    if (!r || r->len != len)
        return 0; /* freed or reused meanwhile: the shard refuses it */
    int32_t rc = judge(c, hs, m, xfer_crc32c(0, bytes, len));
    if (rc == 0) {
        r->crc = m->crc;
        r->crc_set = true;
    }
    return rc;
}

int32_t xfer_server_check_eager(xfer_server_conn *c, xfer_server_hosted *hs,
                                const xfer_wire_msg *m, const uint8_t *data)
{
    if (!checking(c->srv, m))
        return 0;
    return judge(c, hs, m, xfer_crc32c(0, data, m->len));
}

void xfer_server_check_keep(xfer_server_hosted *hs, const xfer_wire_msg *m)
{
    xfer_server_resv *r = xfer_server_track_find(hs, m->id);
    if (r && m->crc_set) {
        r->crc = m->crc;
        r->crc_set = true;
    }
}

void xfer_server_check_event(xfer_server_hosted *hs, xfer_wire_msg *ev)
{
    const xfer_server_resv *r = xfer_server_track_find(hs, ev->id);
    if (ev->kind == XFER_SHARD_EV_READY && r && r->crc_set &&
        r->resv_id == ev->resv_id) {
        ev->crc = r->crc;
        ev->crc_set = 1;
    }
}
