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

#include "crc.h"
#include "server_rdma.h"
#include "xfer/integrity.h"

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
    uint32_t got = xfer_crc32c(0, xfer_shard_pool_base(hs->sh) + r->off,
                               r->len);
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
