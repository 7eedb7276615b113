/*
 * tests/rdma/fabric/mr.c - memory registration and memory windows: the
 * key table, ibv_reg_mr / ibv_dereg_mr, ibv_alloc_mw / ibv_dealloc_mw /
 * ibv_bind_mw, the execution of bind and local-invalidate WRs, and the
 * checks every local SGE and every remote access goes through.
 *
 * MRs and MWs share one key space, as an HCA's memory keys do: a key is
 * (slot index << 8 | 8-bit tag).  An MR's lkey and rkey are its key; an
 * MW's rkey is whatever its last bind chose (same index, a tag the caller
 * picks, usually ibv_inc_rkey of the previous one).  Released slots are
 * reused in FIFO order and their MR tag moves on, so a stale key is
 * refused rather than landing in the slot's next owner.
 *
 * What must stay true:
 *  - a remote write lands only through a valid key of the target QP's PD,
 *    with REMOTE_WRITE granted, wholly inside the registered (MR) or bound
 *    (MW) range; a type 2 window only through the QP it was bound on;
 *  - a window is bound at most once until invalidated (type 2); once its
 *    invalidation or dealloc took effect its rkey lets nothing through;
 *  - an MR with windows bound to it cannot be deregistered (EBUSY), so a
 *    bound window never points at freed registration state.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fab.h"

#define KEY_MAX_INDEX (1u << 24)

/* ---- the key table ---------------------------------------------------- */

static int keys_grow(void)
{
    uint32_t cap = fab_g.capkeys ? fab_g.capkeys * 2 : 256;
    if (cap > KEY_MAX_INDEX)
        return -1;
    fab_key *k = realloc(fab_g.keys, cap * sizeof *k);
    if (!k)
        return -1;
    fab_g.keys = k;
    uint32_t *f = malloc(cap * sizeof *f);
    if (!f)
        return -1;
    /* Re-lay the free FIFO from its head. */
    for (uint32_t i = 0; i < fab_g.free_n; i++)
        f[i] = fab_g.free_keys[(fab_g.free_head + i) % fab_g.capkeys];
    free(fab_g.free_keys);
    fab_g.free_keys = f;
    fab_g.free_head = 0;
    memset(k + fab_g.capkeys, 0, (cap - fab_g.capkeys) * sizeof *k);
    fab_g.capkeys = cap;
    return 0;
}

/* A slot for obj, or 0 when the device is full (max_mr) or memory is. */
static uint32_t key_alloc(uint8_t kind, void *obj)
{
    uint32_t i;
    if (fab_g.keys_used >= fab_g.opts.max_mr)
        return 0;
    if (fab_g.free_n) {
        i = fab_g.free_keys[fab_g.free_head];
        fab_g.free_head = (fab_g.free_head + 1) % fab_g.capkeys;
        fab_g.free_n--;
    } else {
        if (fab_g.nkeys == 0)
            fab_g.nkeys = 1; /* key 0 is never handed out */
        if (fab_g.nkeys >= fab_g.capkeys && keys_grow() < 0)
            return 0;
        i = fab_g.nkeys++;
    }
    fab_g.keys[i].kind = kind;
    fab_g.keys[i].gen++;
    fab_g.keys[i].obj = obj;
    fab_g.keys_used++;
    return i;
}

static void key_free(uint32_t i)
{
    fab_g.keys[i].kind = FAB_KEY_FREE;
    fab_g.keys[i].obj = NULL;
    fab_g.free_keys[(fab_g.free_head + fab_g.free_n) % fab_g.capkeys] = i;
    fab_g.free_n++;
    fab_g.keys_used--;
}

static const fab_key *key_at(uint32_t key)
{
    uint32_t i = key >> 8;
    if (i == 0 || i >= fab_g.nkeys || fab_g.keys[i].kind == FAB_KEY_FREE)
        return NULL;
    return &fab_g.keys[i];
}

static fab_mr *mr_lookup(uint32_t key)
{
    const fab_key *k = key_at(key);
    if (!k || k->kind != FAB_KEY_MR || (k->gen & 0xff) != (key & 0xff))
        return NULL;
    return k->obj;
}

fab_mw *fab_mw_lookup(uint32_t index, uint32_t gen)
{
    if (index == 0 || index >= fab_g.nkeys)
        return NULL;
    const fab_key *k = &fab_g.keys[index];
    return k->kind == FAB_KEY_MW && k->gen == gen ? k->obj : NULL;
}

/* Is [addr, addr + len) inside [base, base + size)? */
static bool inside(uint64_t addr, uint64_t len, uint64_t base, uint64_t size)
{
    return addr >= base && len <= size && addr - base <= size - len;
}

/* ---- memory regions --------------------------------------------------- */

#define MR_ACCESS                                                            \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                      \
     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |                     \
     IBV_ACCESS_MW_BIND | IBV_ACCESS_HUGETLB | IBV_ACCESS_OPTIONAL_RANGE)

static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t len,
                          uint64_t iova, unsigned access)
{
    int err = 0;
    fab_mr *m = NULL;
    fab_enter();
    if (!pd || !addr || len == 0 || (access & ~(unsigned)MR_ACCESS) ||
        ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
         !(access & IBV_ACCESS_LOCAL_WRITE))) {
        err = EINVAL;
        goto out;
    }
    if (fab_fault_fires(&fab_g.nth_reg, fab_g.opts.reg_fail) ||
        !(m = calloc(1, sizeof *m))) {
        err = ENOMEM;
        goto out;
    }
    uint32_t i = key_alloc(FAB_KEY_MR, m);
    if (!i) {
        err = ENOMEM;
        goto out_free;
    }
    m->pd = fab_pd_of(pd);
    m->pd->users++;
    m->iova = iova;
    m->access = access;
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = len;
    m->mr.handle = i;
    m->mr.lkey = m->mr.rkey = i << 8 | (fab_g.keys[i].gen & 0xff);
    fab_g.ctr.mrs_live++;
    fab_g.ctr.mrs_created++;
    goto out;
out_free:
    free(m);
    m = NULL;
out:
    if (err)
        fab_g.ctr.reg_failed++;
    fab_exit();
    if (err)
        errno = err;
    return m ? &m->mr : NULL;
}

/* verbs.h turns these names into macros over the exported functions. */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

FAB_API struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr,
                                  size_t length, int access)
{
    return reg(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

FAB_API struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr,
                                       size_t length, uint64_t iova,
                                       int access)
{
    return reg(pd, addr, length, iova, (unsigned)access);
}

FAB_API struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
                                        size_t length, uint64_t iova,
                                        unsigned int access)
{
    return reg(pd, addr, length, iova, access);
}

/* A dma-buf MR: the fabric maps the fd (a memfd in the tests, standing
 * for a GPU's dma-buf) and serves the mapping as the MR's memory, so a
 * write through its rkey lands in the fd's pages, as on a device. */
FAB_API struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
                                         size_t length, uint64_t iova,
                                         int fd, int access)
{
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t page = pg > 0 ? (uint64_t)pg : 4096;
    uint64_t lo = offset & ~(page - 1);
    size_t maplen = (size_t)(offset - lo) + length;
    if (fd < 0 || length == 0) {
        errno = EINVAL;
        return NULL;
    }
    void *map = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                     (off_t)lo);
    if (map == MAP_FAILED)
        return NULL;
    struct ibv_mr *mr = reg(pd, (uint8_t *)map + (offset - lo), length, iova,
                            (unsigned)access);
    if (!mr) {
        int err = errno;
        munmap(map, maplen);
        errno = err;
        return NULL;
    }
    fab_mr *m = FAB_OF(mr, fab_mr, mr);
    m->map = map;
    m->maplen = maplen;
    return mr;
}

FAB_API int ibv_dereg_mr(struct ibv_mr *mr)
{
    int r = 0;
    fab_enter();
    fab_mr *m = FAB_OF(mr, fab_mr, mr);
    if (m->windows) {
        fab_g.ctr.destroy_busy++;
        r = EBUSY;
    } else {
        key_free(mr->handle);
        m->pd->users--;
        if (m->map)
            munmap(m->map, m->maplen);
        free(m);
        fab_g.ctr.mrs_live--;
        fab_g.ctr.mrs_destroyed++;
    }
    fab_exit();
    return r;
}

/* ---- memory windows --------------------------------------------------- */

struct ibv_mw *fab_mw_alloc(struct ibv_pd *pd, enum ibv_mw_type type)
{
    int err = 0;
    fab_mw *w = NULL;
    fab_enter();
    if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
        err = EINVAL;
    } else if (type == IBV_MW_TYPE_2 && !fab_g.opts.mw_type2) {
        err = EOPNOTSUPP;
    } else if (!(w = calloc(1, sizeof *w)) ||
               !(w->index = key_alloc(FAB_KEY_MW, w))) {
        free(w);
        w = NULL;
        err = ENOMEM;
    } else {
        w->gen = fab_g.keys[w->index].gen;
        w->pd = fab_pd_of(pd);
        w->pd->users++;
        w->mw.context = pd->context;
        w->mw.pd = pd;
        w->mw.rkey = w->index << 8 | (w->gen & 0xff);
        w->mw.handle = w->index;
        w->mw.type = type;
        fab_g.ctr.mws_live++;
        fab_g.ctr.mws_created++;
    }
    fab_exit();
    if (err)
        errno = err;
    return w ? &w->mw : NULL;
}

static void mw_unbind(fab_mw *w)
{
    if (w->bound) {
        w->bound = false;
        w->mr->windows--;
        w->mr = NULL;
    }
}

int fab_mw_dealloc(struct ibv_mw *mw)
{
    fab_enter();
    fab_mw *w = FAB_OF(mw, fab_mw, mw);
    mw_unbind(w); /* the rkey dies here, synchronously */
    key_free(w->index);
    w->pd->users--;
    free(w);
    fab_g.ctr.mws_live--;
    fab_g.ctr.mws_destroyed++;
    fab_exit();
    return 0;
}

/* ibv_bind_mw (type 1): a bind WR on qp with the next tag of the key. */
int fab_mw_bind(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mb)
{
    fab_enter();
    fab_mw *w = FAB_OF(mw, fab_mw, mw);
    const struct ibv_mw_bind_info *bi = &mb->bind_info;
    fab_bind b = {
        .mw_index = w->index,
        .mw_gen = w->gen,
        .type = IBV_MW_TYPE_1,
        .new_rkey = ibv_inc_rkey(mw->rkey),
        .mr_lkey = bi->mr ? bi->mr->lkey : 0,
        .addr = bi->addr,
        .len = bi->length,
        .access = bi->mw_access_flags,
    };
    int r = fab_qp_post_bind(fab_qp_of(qp), mb->wr_id, mb->send_flags, &b);
    if (r == 0)
        mw->rkey = b.new_rkey;
    fab_exit();
    return r;
}

/* Would binding b over mr be allowed (the window w already checked)? */
static bool bind_ok(const fab_mw *w, const fab_mr *m, const fab_bind *b)
{
    const unsigned remote = IBV_ACCESS_REMOTE_WRITE |
                            IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (!m || m->pd != w->pd || !(m->access & IBV_ACCESS_MW_BIND) ||
        b->len == 0 || !inside(b->addr, b->len, m->iova, m->mr.length))
        return false;
    if (b->access & ~remote)
        return false;
    if ((b->access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(m->access & IBV_ACCESS_LOCAL_WRITE))
        return false;
    if (w->mw.type == IBV_MW_TYPE_2)
        return !w->bound && (b->new_rkey >> 8) == w->index;
    return true;
}

enum ibv_wc_status fab_mr_exec_bind(fab_qp *qp, const fab_bind *b)
{
    fab_mw *w = fab_mw_lookup(b->mw_index, b->mw_gen);
    bool fault = fab_fault_fires(&fab_g.nth_bind, fab_g.opts.bind_fail);
    if (fault || !w || w->pd != qp->pd || w->mw.type != b->type)
        goto fail;
    if (b->type == IBV_MW_TYPE_1 && b->mr_lkey == 0 && b->len == 0) {
        mw_unbind(w);
        fab_g.ctr.binds++;
        return IBV_WC_SUCCESS;
    }
    fab_mr *m = mr_lookup(b->mr_lkey);
    if (!bind_ok(w, m, b))
        goto fail;
    mw_unbind(w); /* type 1 may be re-bound in place */
    w->bound = true;
    w->key = b->new_rkey;
    w->mr = m;
    m->windows++;
    w->addr = b->addr;
    w->len = b->len;
    w->access = b->access;
    w->qpn = qp->qp.qp_num;
    fab_g.ctr.binds++;
    return IBV_WC_SUCCESS;
fail:
    fab_g.ctr.bind_errors++;
    return IBV_WC_MW_BIND_ERR;
}

enum ibv_wc_status fab_mr_exec_inval(fab_qp *qp, uint32_t rkey)
{
    const fab_key *k = key_at(rkey);
    fab_mw *w = k && k->kind == FAB_KEY_MW ? k->obj : NULL;
    if (!w || w->mw.type != IBV_MW_TYPE_2 || !w->bound || w->key != rkey ||
        w->pd != qp->pd) {
        fab_g.ctr.inval_errors++;
        return IBV_WC_MW_BIND_ERR;
    }
    mw_unbind(w);
    fab_g.ctr.invalidations++;
    return IBV_WC_SUCCESS;
}

/* ---- access checks ---------------------------------------------------- */

int fab_mr_remote(const fab_qp *qp, uint64_t raddr, uint32_t rkey,
                  uint64_t len, uint8_t **host)
{
    const fab_key *k = key_at(rkey);
    if (!k)
        return FAB_REJ_NO_KEY;
    if (k->kind == FAB_KEY_MR) {
        const fab_mr *m = k->obj;
        if ((k->gen & 0xff) != (rkey & 0xff))
            return FAB_REJ_STALE_KEY;
        if (m->pd != qp->pd)
            return FAB_REJ_PD;
        if (!(m->access & IBV_ACCESS_REMOTE_WRITE))
            return FAB_REJ_ACCESS;
        if (!inside(raddr, len, m->iova, m->mr.length))
            return FAB_REJ_BOUNDS;
        *host = (uint8_t *)m->mr.addr + (raddr - m->iova);
        return FAB_REJ_OK;
    }
    const fab_mw *w = k->obj;
    if (!w->bound || w->key != rkey)
        return FAB_REJ_STALE_KEY;
    if (w->pd != qp->pd)
        return FAB_REJ_PD;
    if (w->mw.type == IBV_MW_TYPE_2 && w->qpn != qp->qp.qp_num)
        return FAB_REJ_WRONG_QP;
    if (!(w->access & IBV_ACCESS_REMOTE_WRITE))
        return FAB_REJ_ACCESS;
    if (!inside(raddr, len, w->addr, w->len))
        return FAB_REJ_BOUNDS;
    *host = (uint8_t *)w->mr->mr.addr + (raddr - w->mr->iova);
    return FAB_REJ_OK;
}

enum ibv_wc_status fab_mr_local(const fab_pd *pd, const struct ibv_sge *sge,
                                uint32_t n, bool need_write, uint8_t **host,
                                uint64_t *total)
{
    uint64_t t = 0;
    for (uint32_t i = 0; i < n; i++) {
        host[i] = NULL;
        if (sge[i].length == 0)
            continue;
        const fab_mr *m = mr_lookup(sge[i].lkey);
        if (!m || m->pd != pd ||
            (need_write && !(m->access & IBV_ACCESS_LOCAL_WRITE)) ||
            !inside(sge[i].addr, sge[i].length, m->iova, m->mr.length))
            return IBV_WC_LOC_PROT_ERR;
        host[i] = (uint8_t *)m->mr.addr + (sge[i].addr - m->iova);
        t += sge[i].length;
    }
    *total = t;
    return IBV_WC_SUCCESS;
}
