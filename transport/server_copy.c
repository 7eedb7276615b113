/*
 * server_copy.c - shard pools in device memory (xfer_server_config's
 * shard_mem): a WRITE into a device shard lands in a host bounce buffer
 * first, then a host-to-device copy moves it into the pool, and only when
 * that copy completed does the write end on the shard and its WRITE_ACK
 * go.  Nothing here dereferences the pool.
 *
 * The write stays in flight on the shard (xfer_shard_write_begin ..
 * xfer_shard_copy_begin .. _copy_end) from its head until its copy ended,
 * the shard counting the copy as the record's, so the reservation
 * machine's rules for a write in flight hold for the copy too: a cancel
 * or a lease expiry meanwhile is deferred until it ended, and the region
 * is freed or reused only after (I4); a commit, hence READY, can only
 * follow the WRITE_ACK, which follows the copy.  A failed copy ends the
 * write failed and answers XFER_ERR_COPY: the producer rolls back as for
 * any failed write.
 *
 * What must stay true: a landing (a copy into the pool) outlives its
 * connection (the connection may close while the copy runs: the write
 * still ends on the shard when the copy does, unanswered); xfer_server_del
 * waits for every copy (xfer_copy_del) before the shards go.  The EAGER
 * path is not offered for a device shard (its reserve, copy and commit
 * are one step of the shard, which would write the pool directly): its
 * HELLO_ACK leaves XFER_WIRE_HELLO_EAGER out.
 */
#include <stdlib.h>

#include "copy.h"
#include "server_int.h"
#include "testdev_int.h"

/* One copy into a device pool, from a finished WRITE's bounce buffer. */
typedef struct landing {
    xfer_list_node link; /* on srv->landing */
    xfer_server *srv;
    xfer_server_conn *c; /* NULL once the connection closed */
    int hosted;
    uint32_t req;
    xfer_wire_msg m;
    uint8_t *bounce;
    int32_t wrc;
    uint8_t fault;
    bool counted; /* the shard counts this copy (xfer_shard_copy_begin) */
    int32_t werr;
    bool readback; /* a COMMIT's read-back (device to host), not a WRITE */
    uint32_t blen; /* the bounce buffer's length */
} landing;

bool xfer_server_copy_device(const xfer_server *s, int hosted)
{
    return hosted >= 0 && s->shards[hosted].cp != NULL;
}

/* Whether [base, base+len) is memory of kind `mem` (never read). */
static bool mem_is(const void *base, uint64_t len, xfer_mem mem)
{
    if (mem.kind == XFER_MEM_TESTDEV)
        return xfer_testdev_contains(base, (size_t)len);
    xfer_mem a = xfer_mem_of(base);
    xfer_mem b = xfer_mem_of((const uint8_t *)base + len - 1);
    return a.kind == mem.kind && a.device == mem.device &&
           b.kind == mem.kind && b.device == mem.device;
}

int xfer_server_copy_init(xfer_server *s, const xfer_mem *mem)
{
    for (uint16_t i = 0; mem && i < s->cfg.nshards; i++) {
        xfer_mem m = mem[i];
        if (m.kind == XFER_MEM_HOST) {
            if (m.device != 0)
                return XFER_ERR_INVALID_ARG;
            continue;
        }
        int rc = xfer_mem_available(m);
        /* over RDMA a device pool is registered through DMA-BUF
         * (server_rdma.c, issue 25 item 5): not built yet */
        if (rc == 0 && s->one_sided)
            rc = XFER_ERR_NOT_SUPPORTED;
        if (rc)
            return rc;
        if (!mem_is(s->shard_cfg[i].base, s->shard_cfg[i].len, m))
            return XFER_ERR_INVALID_ARG;
        s->shards[i].mem = m;
        rc = xfer_copy_new(s->base, m, &s->shards[i].cp);
        if (rc)
            return rc;
    }
    return 0;
}

void xfer_server_copy_clear(xfer_server *s)
{
    /* first no copy may run or report any more; then every bounce buffer
     * goes back to the copy engine that made it, which frees them all */
    for (uint16_t i = 0; i < s->cfg.nshards; i++)
        xfer_copy_quiesce(s->shards[i].cp);
    while (s->landing.head) {
        landing *l = XFER_LIST_ITEM(s->landing.head, landing, link);
        xfer_list_remove(&s->landing, &l->link);
        xfer_copy_bounce_put(s->shards[l->hosted].cp, l->bounce, l->blen);
        free(l);
    }
    for (uint16_t i = 0; i < s->cfg.nshards; i++) {
        xfer_copy_del(s->shards[i].cp);
        s->shards[i].cp = NULL;
    }
}

int xfer_server_copy_begin(xfer_server_conn *c, uint8_t *dev)
{
    xfer_copy *cp = c->srv->shards[c->hosted].cp;
    uint8_t *b = xfer_copy_bounce_get(cp, c->wm.len);
    if (!b)
        return XFER_ERR_NOMEM;
    c->dst = b;
    c->wdev = dev;
    return 0;
}

void xfer_server_copy_abandon(xfer_server_conn *c)
{
    if (!c->wdev)
        return;
    xfer_copy_bounce_put(c->srv->shards[c->hosted].cp, c->dst, c->wm.len);
    c->wdev = NULL;
}

/* The copy of l ended (loop thread): the write ends on the shard, ok only
 * when the copy was, and its answer goes if its connection is still up. */
static void landed(void *ud, int status)
{
    landing *l = ud;
    xfer_server *s = l->srv;
    xfer_server_batch_begin(s);
    xfer_server_hosted *hs = &s->shards[l->hosted];
    uint64_t now = xfer_server_now(s);
    int erc = l->counted ? xfer_shard_copy_end(hs->sh, now, l->m.id,
                                               l->m.resv_id, status == 0)
                         : xfer_shard_write_end(hs->sh, now, l->m.id,
                                                l->m.resv_id, status == 0);
    if (status == 0)
        hs->write_bytes += l->m.len;
    else
        hs->copies_failed++;
    int32_t rc = l->wrc ? l->wrc : status ? XFER_ERR_COPY : erc;
    if (l->fault == XFER_SERVER_F_APPLIED_LOST && rc == 0)
        rc = l->werr;
    if (l->c && l->fault != XFER_SERVER_F_LOST)
        xfer_server_req_answer(l->c, l->req, &l->m, XFER_WIRE_T_WRITE_ACK,
                               rc);
    xfer_list_remove(&s->landing, &l->link);
    xfer_copy_bounce_put(hs->cp, l->bounce, l->blen);
    free(l);
    xfer_server_flush_all(s);
    xfer_server_batch_end(s);
}

/* A COMMIT's read-back ended (loop thread): the bytes that landed are
 * checksummed and judged, then the commit applies and is answered; a
 * failed read-back answers XFER_ERR_COPY and commits nothing.  A
 * connection gone meanwhile gets no answer and nothing is committed (its
 * producer's deadline, or the lease, ends the region). */
static void read_back(void *ud, int status)
{
    landing *l = ud;
    xfer_server *s = l->srv;
    xfer_server_batch_begin(s);
    xfer_server_hosted *hs = &s->shards[l->hosted];
    if (l->c && !l->c->closing && !l->c->doomed) {
        int32_t rc = status ? XFER_ERR_COPY
                            : xfer_server_check_device(l->c, hs, &l->m,
                                                       l->bounce, l->blen);
        xfer_server_req_commit_end(l->c, l->req, &l->m, l->fault, l->werr,
                                   rc);
    }
    xfer_list_remove(&s->landing, &l->link);
    xfer_copy_bounce_put(hs->cp, l->bounce, l->blen);
    free(l);
    xfer_server_flush_all(s);
    xfer_server_batch_end(s);
}

bool xfer_server_copy_readback(xfer_server_conn *c, uint32_t req,
                               const xfer_wire_msg *m, uint8_t fault,
                               int32_t err)
{
    xfer_server *s = c->srv;
    xfer_server_hosted *hs = &s->shards[c->hosted];
    if (!hs->cp)
        return false;
    xfer_server_resv *r = xfer_server_check_region(c, hs, m);
    if (!r)
        return false; /* unchecked, or the shard refuses it anyway */
    landing *l = calloc(1, sizeof *l);
    uint8_t *b = l ? xfer_copy_bounce_get(hs->cp, r->len) : NULL;
    int rc = XFER_ERR_NOMEM;
    if (b) {
        *l = (landing){.srv = s, .c = c, .hosted = c->hosted, .req = req,
                       .m = *m, .bounce = b, .fault = fault, .werr = err,
                       .readback = true, .blen = r->len};
        rc = xfer_copy_start(hs->cp, true, b,
                             xfer_shard_pool_base(hs->sh) + r->off, r->len,
                             read_back, l);
    }
    if (rc) {
        /* no verdict without the bytes: nothing is committed */
        if (b)
            xfer_copy_bounce_put(hs->cp, b, r->len);
        free(l);
        xfer_server_req_commit_end(c, req, m, fault, err,
                                   rc == XFER_ERR_NOMEM ? rc : XFER_ERR_COPY);
        return true;
    }
    xfer_list_push_back(&s->landing, &l->link);
    return true; /* not counted in copies: those are host -> device */
}

bool xfer_server_copy_land(xfer_server_conn *c)
{
    if (!c->wdev)
        return false;
    xfer_server *s = c->srv;
    xfer_server_hosted *hs = &s->shards[c->hosted];
    landing *l = calloc(1, sizeof *l);
    int rc = XFER_ERR_NOMEM;
    if (l) {
        *l = (landing){.srv = s, .c = c, .hosted = c->hosted, .req = c->wreq,
                       .m = c->wm, .bounce = c->dst, .wrc = c->wrc,
                       .fault = c->wfault, .werr = c->werr,
                       .blen = c->wm.len};
        rc = xfer_copy_start(hs->cp, false, c->dst, c->wdev, c->wm.len,
                             landed, l);
    }
    if (rc) {
        /* the copy never started: the write ends failed now */
        free(l);
        xfer_shard_write_end(hs->sh, xfer_server_now(s), c->wm.id,
                             c->wm.resv_id, false);
        xfer_copy_bounce_put(hs->cp, c->dst, c->wm.len);
        xfer_server_req_answer(c, c->wreq, &c->wm, XFER_WIRE_T_WRITE_ACK,
                               rc == XFER_ERR_NOMEM ? rc : XFER_ERR_COPY);
    } else {
        /* the shard counts the copy into the region: its write stays in
         * flight until copy_end, and READY or a free only after (the
         * write was begun at its head and not ended, so this holds) */
        l->counted = xfer_shard_copy_begin(hs->sh, xfer_server_now(s),
                                           c->wm.id, c->wm.resv_id) == 0;
        xfer_list_push_back(&s->landing, &l->link);
        hs->copies++;
    }
    c->in_write = false;
    c->dst = NULL;
    c->wdev = NULL;
    xfer_server_flush_all(s);
    return true;
}

void xfer_server_copy_conn_gone(xfer_server_conn *c)
{
    for (xfer_list_node *n = c->srv->landing.head; n; n = n->next) {
        landing *l = XFER_LIST_ITEM(n, landing, link);
        if (l->c == c)
            l->c = NULL;
    }
}
