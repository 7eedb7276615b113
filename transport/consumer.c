/*
 * transport/consumer.c - the consumer client's lifecycle (xfer/consumer.h):
 * the config, the readiness tracker, one link per shard, the thread-safe
 * mailbox (the engine's, transport/mailbox.c), and the deferred event that
 * delivers outcomes.
 *
 * What must stay true (STYLE.md 6): no user callback runs inside a call
 * the user made.  Outcomes are queued by consumer_ready.c and delivered
 * here, from one deferred event, in the order they were decided; an
 * available record becomes HELD before its callback runs, so the callback
 * may release it at once.
 */
#include "base_ref.h"
#include "consumer_int.h"

#include <stddef.h>
#include <string.h>

#include <event2/event.h>

#include "util.h" /* fsm_private_dep: the injected allocator */
#include "xfer/dir.h"
#include "xfer/mem.h"

void xfer_consumer_config_default(xfer_consumer_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->version = XFER_CONSUMER_CONFIG_VERSION;
    cfg->max_ids = 65536;
    cfg->max_tombstones = 4 * 65536;
    cfg->ready_deadline_ns = 30000000000ull;
    cfg->tombstone_ttl_ns = 60000000000ull;
    cfg->connect_timeout_ns = 2000000000ull;
    cfg->reconnect_min_ns = 10000000ull;
    cfg->reconnect_max_ns = 1000000000ull;
    cfg->mailbox_cap = 65536;
    cfg->request_timeout_ns = 5000000000ull;
}

/* The bytes each version of xfer_consumer_config holds (fsm/util.h). */
static const size_t config_lens[] = {
    offsetof(xfer_consumer_config, request_timeout_ns),
    offsetof(xfer_consumer_config, integrity),
    sizeof(xfer_consumer_config)};

void *xfer_consumer_calloc(const xfer_consumer *c, size_t n, size_t size)
{
    return xfer_util_calloc(&c->cfg.alloc, n, size);
}

void xfer_consumer_free(const xfer_consumer *c, void *p)
{
    xfer_util_free(&c->cfg.alloc, p);
}

uint64_t xfer_consumer_now(const xfer_consumer *c)
{
    return c->cfg.clock(c->cfg.clock_ud);
}

void xfer_consumer_kick(xfer_consumer *c)
{
    event_active(c->deferred, EV_TIMEOUT, 0);
}

/* ---------------------------------------------------------------------- */
/* Delivery                                                                */
/* ---------------------------------------------------------------------- */

/* Every link owes nothing and no outcome waits: the close is over. */
static bool flushed(const xfer_consumer *c)
{
    if (c->dq_head != XFER_CREC_NONE)
        return false;
    for (uint16_t k = 0; k < c->cfg.nshards; k++)
        if (!xfer_consumer_link_idle(&c->links[k]))
            return false;
    return true;
}

/* The close's callback is the last thing the consumer does in this turn:
 * it may delete the consumer. */
static void on_deferred(evutil_socket_t fd, short what, void *arg)
{
    xfer_consumer *c = arg;
    xfer_consumer_rec r;
    const xfer_region *regions;
    while (!c->closing && xfer_consumer_pop(c, &r, &regions)) {
        if (r.available)
            c->cfg.available(c->cfg.ud, r.id, r.attempt, regions,
                             c->cfg.nshards);
        else
            c->cfg.unavailable(c->cfg.ud, r.id, r.reason, r.missing);
    }
    if (!c->closing || c->close_done)
        return;
    xfer_consumer_drop_queued(c);
    if (!flushed(c))
        return;
    c->close_done = true;
    event_del(c->close_timer);
    c->closed(c->closed_ud, 0, 0);
}

void xfer_consumer_close_check(xfer_consumer *c)
{
    if (c->closing && !c->close_done && flushed(c))
        xfer_consumer_kick(c);
}

/* The close's timeout: the shards that still owe an answer are named. */
static void on_close_timeout(evutil_socket_t fd, short what, void *arg)
{
    xfer_consumer *c = arg;
    if (c->close_done)
        return;
    uint64_t owing = 0;
    for (uint16_t k = 0; k < c->cfg.nshards; k++)
        if (!xfer_consumer_link_idle(&c->links[k]))
            owing |= UINT64_C(1) << k;
    c->close_done = true;
    c->closed(c->closed_ud, XFER_ERR_TIMEOUT, owing);
}

int xfer_consumer_close(xfer_consumer *c, uint64_t timeout_ns,
                        xfer_consumer_closed_fn done, void *ud)
{
    if (!c || !done)
        return XFER_ERR_INVALID_ARG;
    if (c->closing)
        return XFER_ERR_SHUTDOWN;
    if (!c->close_timer) {
        c->close_timer = evtimer_new(c->base, on_close_timeout, c);
        if (!c->close_timer)
            return XFER_ERR_IO;
    }
    if (timeout_ns) {
        struct timeval tv = xfer_timer_delay(timeout_ns);
        if (evtimer_add(c->close_timer, &tv) != 0)
            return XFER_ERR_IO;
    }
    xfer_consumer_ready_close(c);
    c->closing = true;
    c->closed = done;
    c->closed_ud = ud;
    /* Checked from the loop, never inside this call. */
    xfer_consumer_kick(c);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Mailbox                                                                 */
/* ---------------------------------------------------------------------- */

static void on_mail(void *ud, xfer_mail *m)
{
    xfer_consumer *c = ud;
    int rc = 0;
    switch (m->kind) {
    case XFER_MAIL_EXPECT:
        rc = xfer_consumer_do_expect(c, m->id, m->arg);
        break;
    case XFER_MAIL_CANCEL:
        rc = xfer_consumer_do_cancel(c, m->id);
        break;
    case XFER_MAIL_RELEASE:
        rc = xfer_consumer_do_release(c, m->id);
        break;
    default:
        rc = XFER_ERR_INTERNAL;
        break;
    }
    if (rc)
        c->st.mail_refused++;
}

static int post(xfer_consumer *c, uint8_t kind, uint64_t id, uint64_t arg)
{
    if (!c || id == 0)
        return XFER_ERR_INVALID_ARG;
    xfer_mail m = {.kind = kind, .id = id, .arg = arg};
    return xfer_mailbox_post(c->mailbox, &m);
}

int xfer_consumer_post_expect(xfer_consumer *c, uint64_t id,
                              uint64_t deadline_ns)
{
    return post(c, XFER_MAIL_EXPECT, id, deadline_ns);
}

int xfer_consumer_post_cancel(xfer_consumer *c, uint64_t id)
{
    return post(c, XFER_MAIL_CANCEL, id, 0);
}

int xfer_consumer_post_release(xfer_consumer *c, uint64_t id)
{
    return post(c, XFER_MAIL_RELEASE, id, 0);
}

/* ---------------------------------------------------------------------- */
/* Public calls                                                            */
/* ---------------------------------------------------------------------- */

int xfer_consumer_expect(xfer_consumer *c, uint64_t id, uint64_t deadline_ns)
{
    if (!c || id == 0)
        return XFER_ERR_INVALID_ARG;
    return xfer_consumer_do_expect(c, id, deadline_ns);
}

int xfer_consumer_cancel(xfer_consumer *c, uint64_t id)
{
    if (!c || id == 0)
        return XFER_ERR_INVALID_ARG;
    c->st.user_cancels++;
    return xfer_consumer_do_cancel(c, id);
}

int xfer_consumer_release(xfer_consumer *c, uint64_t id)
{
    if (!c || id == 0)
        return XFER_ERR_INVALID_ARG;
    return xfer_consumer_do_release(c, id);
}

bool xfer_consumer_connected(const xfer_consumer *c, uint16_t k)
{
    return c && k < c->cfg.nshards && c->links[k].state == XFER_CLINK_UP;
}

/* ---------------------------------------------------------------------- */
/* New and del                                                             */
/* ---------------------------------------------------------------------- */

static int take_config(xfer_consumer *c, const xfer_consumer_config *cfg)
{
    xfer_consumer_config *k = &c->cfg;
    memset(k, 0, sizeof *k); /* a version 1 config: the rest defaults */
    if (xfer_util_versioned_copy(k, cfg, cfg->version, config_lens,
                                 XFER_UTIL_NVERSIONS(config_lens)) ||
        !k->base || (!k->addrs && !k->dir) || !k->available ||
        !k->unavailable || k->nshards == 0 ||
        k->nshards > XFER_MAX_SHARDS ||
        (k->dir && (!k->dir_group || strlen(k->dir_group) >= 64)))
        return XFER_ERR_INVALID_ARG;
    if (k->dir) {
        strcpy(c->dir_group, k->dir_group);
        k->dir_group = c->dir_group;
        if (k->group == 0)
            k->group = xfer_dir_group_id(c->dir_group);
    }
    k->version = XFER_CONSUMER_CONFIG_VERSION;
    k->addrs = NULL; /* copied into the links */
    k->pools = NULL; /* copied below */
    if (k->integrity >= XFER_INTEGRITY_COUNT_)
        return XFER_ERR_INVALID_ARG;
    if (cfg->version >= 3 && cfg->integrity == XFER_INTEGRITY_CONSUMER &&
        cfg->pools) {
        /* the check reads the pool with the CPU: device memory (a TP
         * worker's own GPU buffer) would fault, so it is refused here
         * rather than at the first take */
        for (uint16_t i = 0; i < k->nshards; i++)
            if (xfer_mem_of(cfg->pools[i]).kind != XFER_MEM_HOST)
                return XFER_ERR_NOT_SUPPORTED;
        for (uint16_t i = 0; i < k->nshards; i++)
            c->pools[i] = (uint8_t *)cfg->pools[i];
        c->check = true;
    }
    if (!k->max_ids)
        k->max_ids = 65536;
    if (!k->max_tombstones)
        k->max_tombstones = 4 * k->max_ids;
    if (!k->ready_deadline_ns)
        k->ready_deadline_ns = 30000000000ull;
    if (!k->tombstone_ttl_ns)
        k->tombstone_ttl_ns = 60000000000ull;
    if (!k->connect_timeout_ns)
        k->connect_timeout_ns = 2000000000ull;
    if (!k->reconnect_min_ns)
        k->reconnect_min_ns = 10000000ull;
    if (!k->reconnect_max_ns)
        k->reconnect_max_ns = 1000000000ull;
    if (!k->mailbox_cap)
        k->mailbox_cap = 65536;
    if (!k->request_timeout_ns)
        k->request_timeout_ns = 5000000000ull;
    if (!k->clock)
        k->clock = xfer_clock_monotonic;
    return 0;
}

static void on_deferred(evutil_socket_t fd, short what, void *arg);

static int make_loop(xfer_consumer *c)
{
    int rc = xfer_timer_init(&c->timer, c->base, xfer_consumer_on_timer, c);
    c->deferred = event_new(c->base, -1, 0, on_deferred, c);
    if (rc || !c->deferred)
        return XFER_ERR_IO;
    return xfer_mailbox_new(c->base, c->cfg.mailbox_cap, &c->cfg.alloc, on_mail, c,
                            &c->mailbox);
}

int xfer_consumer_new(const xfer_consumer_config *cfg, xfer_consumer **out)
{
    if (!cfg || !out)
        return XFER_ERR_INVALID_ARG;
    xfer_consumer *c = xfer_util_calloc(&cfg->alloc, 1, sizeof *c);
    if (!c)
        return XFER_ERR_NOMEM;
    int rc = take_config(c, cfg);
    if (rc) {
        xfer_util_free(&cfg->alloc, c);
        return rc;
    }
    c->base = cfg->base;
    xfer_base_ref(c->base); /* dropped by xfer_consumer_del: base_ref.h */
    rc = xfer_auth_client_init(cfg->secret, cfg->secret_len, cfg->session,
                               c->secret, &c->secret_len, c->session);
    c->cfg.secret = NULL; /* copied */
    if (!rc)
        rc = xfer_consumer_ready_init(c);
    if (!rc)
        rc = make_loop(c);
    for (uint16_t k = 0; !rc && k < c->cfg.nshards; k++)
        rc = xfer_consumer_link_init(c, k, cfg->addrs ? cfg->addrs[k] : NULL);
    if (!rc && c->cfg.dir) {
        rc = xfer_dir_watch(c->cfg.dir, c->dir_group, xfer_consumer_on_member,
                            c);
        c->watching = rc == 0;
    }
    if (rc) {
        xfer_consumer_del(c);
        return rc;
    }
    *out = c;
    return 0;
}

void xfer_consumer_del(xfer_consumer *c)
{
    if (!c)
        return;
    if (c->watching)
        xfer_dir_unwatch(c->cfg.dir, c->dir_group, xfer_consumer_on_member,
                         c);
    for (uint16_t k = 0; k < c->cfg.nshards; k++)
        xfer_consumer_link_clear(&c->links[k]);
    xfer_mailbox_del(c->mailbox);
    xfer_timer_clear(&c->timer);
    if (c->deferred)
        event_free(c->deferred);
    if (c->close_timer)
        event_free(c->close_timer);
    xfer_consumer_ready_clear(c);
    struct event_base *base = c->base;
    xfer_allocator a = c->cfg.alloc;
    xfer_util_free(&a, c);
    xfer_base_unref(base); /* last: the base may go with it */
}
