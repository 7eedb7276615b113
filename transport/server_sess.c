/*
 * transport/server_sess.c - the shard server's sessions: HELLO, HELLO2 and
 * its AUTH bind a connection to a hosted shard, a role and a session, whose
 * number is the owner of its records on every hosted shard (xfer/shard.h,
 * "Owners").
 *
 * A HELLO2 names its session (16 bytes the client drew from the OS CSPRNG
 * at creation and keeps across reconnects); a v1 HELLO gets a session of
 * its own, drawn here and never sent, so it ends with its connection.  A
 * session without a connection is kept session_grace_ns, so a reconnect
 * finds its records still its own; then its slot is free, and is given to
 * a new session only once no hosted shard holds a record or tombstone of
 * its number, so no session ever inherits another's.  The take grace is a
 * session's too (server_events.c): TAKEN data of a consumer session whose
 * last connection went is released take_grace_ns later, unless a
 * connection of that session comes back first and so owns it again.
 *
 * What must stay true:
 *  - with a secret, no request but AUTH is served before the client's
 *    proof checked out (CRYPTO_memcmp), and a v1 HELLO or a bad proof is
 *    answered with ERROR (XFER_ERR_AUTH) and the connection closes;
 *  - a session keeps the role of its first HELLO: another role answers
 *    XFER_ERR_PERM and closes;
 *  - a full session table, or a new session of a peer address that holds
 *    max_peer_sessions (bound, in grace, or not yet clean), answers
 *    XFER_ERR_BUSY and closes, and touches no other session; a session
 *    that already exists is never refused for its peer's bound.
 */
#include "server_int.h"

#include <string.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

int xfer_server_sess_init(xfer_server *s)
{
    s->sess = xfer_server_calloc(s, s->cfg.max_sessions, sizeof *s->sess);
    if (!s->sess)
        return XFER_ERR_NOMEM;
    for (uint16_t i = 0; i < s->cfg.max_sessions; i++)
        s->sess[i].ring_next = s->sess[i].ring_prev = i;
    return 0;
}

/* Take slot i out of its peer's ring. */
static void ring_leave(xfer_server *s, uint16_t i)
{
    xfer_server_sess *e = &s->sess[i];
    s->sess[e->ring_prev].ring_next = e->ring_next;
    s->sess[e->ring_next].ring_prev = e->ring_prev;
    e->ring_next = e->ring_prev = i;
}

/* Put slot i (alone) into the ring of slot j. */
static void ring_join(xfer_server *s, uint16_t i, uint16_t j)
{
    xfer_server_sess *e = &s->sess[i], *f = &s->sess[j];
    e->ring_next = f->ring_next;
    e->ring_prev = j;
    s->sess[f->ring_next].ring_prev = i;
    f->ring_next = i;
}

void xfer_server_sess_clear(xfer_server *s)
{
    xfer_server_free(s, s->sess);
    s->sess = NULL;
}

/* No hosted shard holds anything of owner `owner`. */
static bool owner_clean(const xfer_server *s, uint16_t owner)
{
    for (uint16_t i = 0; i < s->cfg.nshards; i++) {
        xfer_shard_owner_use u;
        if (xfer_shard_owner_get(s->shards[i].sh, owner, &u) != 0 ||
            u.live || u.tombstones)
            return false;
    }
    return true;
}

/* End the sessions whose grace period is over. */
static void sweep(xfer_server *s, uint64_t now)
{
    for (uint16_t i = 0; i < s->cfg.max_sessions; i++) {
        xfer_server_sess *e = &s->sess[i];
        if (e->used && e->conns == 0 &&
            (e->own || now - e->gone_ns >= s->cfg.session_grace_ns)) {
            e->used = false;
            xfer_server_track_disown(s, (uint16_t)(i + 1));
        }
    }
}

/* Session slots that count against `peer`: bound or in their grace, or
 * free but not clean yet (what the session left still holds the shards),
 * so a client cannot cycle sessions past its bound either. */
static uint32_t peer_sessions(const xfer_server *s, const uint8_t *peer,
                              int *any)
{
    uint32_t n = 0;
    *any = -1;
    for (uint16_t i = 0; i < s->cfg.max_sessions; i++) {
        const xfer_server_sess *e = &s->sess[i];
        if (memcmp(e->peer, peer, sizeof e->peer) == 0 &&
            (e->used || !owner_clean(s, (uint16_t)(i + 1)))) {
            n++;
            *any = i;
        }
    }
    return n;
}

int32_t xfer_server_peer_room(xfer_server_conn *c, xfer_server_hosted *hs,
                              uint32_t len, bool record)
{
    xfer_server *s = c->srv;
    const xfer_server_config *k = &s->cfg;
    uint16_t self = (uint16_t)(c->owner - 1);
    if (!c->owner || s->sess[self].ring_next == self)
        return 0; /* the peer's only session: its own quota is the bound */
    uint64_t live = 0, bytes = 0, tombs = 0;
    uint16_t i = self;
    do {
        uint16_t next = s->sess[i].ring_next;
        xfer_shard_owner_use u;
        if (xfer_shard_owner_get(hs->sh, (uint16_t)(i + 1), &u) == 0) {
            live += u.live;
            bytes += u.bytes;
            tombs += u.tombstones;
        }
        /* a slot that holds nothing any more no longer speaks for the
         * peer: drop it from the ring as we pass */
        if (i != self && !s->sess[i].used &&
            owner_clean(s, (uint16_t)(i + 1)))
            ring_leave(s, i);
        i = next;
    } while (i != self);
    uint64_t half = s->shard_cfg[hs - s->shards].len / 2;
    uint64_t peer_bytes = k->peer_max_bytes ? k->peer_max_bytes
                          : k->session_max_bytes > half ? k->session_max_bytes
                                                        : half;
    uint64_t size = ((uint64_t)len + 63) & ~(uint64_t)63;
    bool over = tombs + 1 > k->peer_max_tombstones ||
                (record && (live + 1 > k->peer_max_reservations ||
                            bytes + size > peer_bytes));
    return over ? XFER_ERR_BUSY : 0;
}

/* The owner number of session `token`, made when new; 0 when the table is
 * full or its peer holds max_peer_sessions already (*rc BUSY), or the
 * session has another role (*rc PERM). */
static uint16_t bind_session(xfer_server *s, const uint8_t *token, uint8_t role,
                     bool own, const uint8_t *peer, int32_t *rc)
{
    sweep(s, xfer_server_now(s));
    int free_slot = -1;
    for (uint16_t i = 0; i < s->cfg.max_sessions; i++) {
        xfer_server_sess *e = &s->sess[i];
        if (!e->used) {
            if (free_slot < 0 && owner_clean(s, (uint16_t)(i + 1)))
                free_slot = i;
            continue;
        }
        if (own || e->own || memcmp(e->token, token, sizeof e->token) != 0)
            continue;
        if (e->role != role) {
            *rc = XFER_ERR_PERM;
            return 0;
        }
        if (e->conns++ == 0) /* back within its grace: its takes again */
            xfer_server_track_adopt(s, (uint16_t)(i + 1));
        return (uint16_t)(i + 1);
    }
    int mate;
    if (free_slot < 0 ||
        peer_sessions(s, peer, &mate) >= s->cfg.max_peer_sessions) {
        s->sess_refused++;
        *rc = XFER_ERR_BUSY;
        return 0;
    }
    xfer_server_sess *e = &s->sess[free_slot];
    ring_leave(s, (uint16_t)free_slot); /* whatever peer it spoke for */
    *e = (xfer_server_sess){.conns = 1, .role = role, .used = true,
                            .own = own, .ring_next = (uint16_t)free_slot,
                            .ring_prev = (uint16_t)free_slot};
    memcpy(e->token, token, sizeof e->token);
    memcpy(e->peer, peer, sizeof e->peer);
    if (mate >= 0 && mate != free_slot)
        ring_join(s, (uint16_t)free_slot, (uint16_t)mate);
    return (uint16_t)(free_slot + 1);
}

void xfer_server_sess_unbind(xfer_server_conn *c)
{
    if (!c->owner)
        return;
    xfer_server_sess *e = &c->srv->sess[c->owner - 1];
    if (--e->conns == 0) {
        e->gone_ns = xfer_server_now(c->srv);
        xfer_server_track_orphan(c->srv, c->owner);
    }
    c->owner = 0;
}

/* Refuse c's HELLO with `code` and close c once the ERROR is out. */
static bool refuse(xfer_server_conn *c, uint32_t req, const xfer_wire_msg *m,
                   int32_t code)
{
    xfer_server_req_error(c, req, m->type, m, code);
    c->closing = true;
    xfer_server_conn_stop_reading(c);
    return false;
}

/* The HELLO (or HELLO2) m is good: bind its session and answer. */
static bool admit(xfer_server_conn *c, uint32_t req, const xfer_wire_msg *m,
                  bool own)
{
    xfer_server *s = c->srv;
    int idx = xfer_server_find_shard(s, m->shard);
    int32_t rc = 0;
    c->owner = bind_session(s, m->session, m->role, own, c->peer, &rc);
    if (!c->owner)
        return refuse(c, req, m, rc);
    c->hosted = idx;
    c->role = m->role;
    xfer_wire_msg a = {.type = XFER_WIRE_T_HELLO_ACK,
                       .version = m->type == XFER_WIRE_T_HELLO2 ? 2 : 1,
                       .shard = m->shard, .group = s->cfg.group,
                       .pool_bytes = s->shard_cfg[idx].len,
                       .lease_ttl_ns = s->cfg.lease_ttl_ns,
                       .max_write = XFER_WIRE_MAX_DATA,
                       /* two-sided shards apply EAGER (one-sided ones
                        * cannot publish READY in the same step) */
                       .hello_flags =
                           (s->one_sided || xfer_server_copy_device(s, idx)
                                ? 0u
                                : XFER_WIRE_HELLO_EAGER) |
                           /* a device shard checks a read-back of the
                            * region (server_copy.c, docs/integrity.md) */
                           (s->cfg.integrity != XFER_INTEGRITY_OFF
                                ? XFER_WIRE_HELLO_CRC
                                : 0u) |
                           /* every hosted shard grants lease refreshes */
                           XFER_WIRE_HELLO_REFRESH};
    xfer_server_conn_send(c, &a, req);
    return true;
}

/* What is wrong with a HELLO or HELLO2 before any session is looked at. */
static int32_t check_hello(const xfer_server *s, const xfer_wire_msg *m)
{
    uint16_t want = m->type == XFER_WIRE_T_HELLO2 ? 2 : XFER_WIRE_VERSION;
    if (xfer_server_find_shard(s, m->shard) < 0)
        return XFER_ERR_NOT_FOUND;
    if (m->group != s->cfg.group)
        return XFER_ERR_INVALID_ARG;
    if (m->version != want)
        return XFER_ERR_NOT_SUPPORTED;
    if (m->type == XFER_WIRE_T_HELLO && s->cfg.secret)
        return XFER_ERR_AUTH; /* no session, no proof */
    return 0;
}

static bool on_hello2(xfer_server_conn *c, uint32_t req,
                      const xfer_wire_msg *m)
{
    xfer_server *s = c->srv;
    if (!s->cfg.secret)
        return admit(c, req, m, false);
    xfer_wire_msg ch = {.type = XFER_WIRE_T_CHALLENGE};
    if (xfer_auth_random(c->snonce, sizeof c->snonce) != 0)
        return refuse(c, req, m, XFER_ERR_IO);
    memcpy(ch.nonce, c->snonce, sizeof ch.nonce);
    xfer_auth_proof(s->cfg.secret, s->cfg.secret_len, true, m, c->snonce,
                    ch.mac);
    c->hello = *m;
    c->hello_req = req;
    c->await_auth = true;
    xfer_server_conn_send(c, &ch, req);
    return true;
}

static bool on_auth(xfer_server_conn *c, const xfer_wire_msg *m)
{
    xfer_server *s = c->srv;
    uint8_t want[XFER_WIRE_MAC];
    xfer_auth_proof(s->cfg.secret, s->cfg.secret_len, false, &c->hello,
                    c->snonce, want);
    c->await_auth = false;
    bool ok = xfer_auth_equal(m->mac, want);
    if (!ok) {
        s->auth_failed++;
        xfer_server_log(s, c->serial, "authentication failed, closed");
        return refuse(c, c->hello_req, &c->hello, XFER_ERR_AUTH);
    }
    return admit(c, c->hello_req, &c->hello, false);
}

bool xfer_server_sess_hello(xfer_server_conn *c, const xfer_wire_hdr *h,
                            const xfer_wire_msg *m)
{
    if (h->type == XFER_WIRE_T_AUTH)
        return on_auth(c, m);
    int32_t rc = check_hello(c->srv, m);
    if (rc) {
        if (rc == XFER_ERR_AUTH)
            c->srv->auth_failed++;
        return refuse(c, h->req, m, rc);
    }
    if (h->type == XFER_WIRE_T_HELLO2)
        return on_hello2(c, h->req, m);
    xfer_wire_msg v1 = *m; /* a session of its own, never sent */
    if (xfer_auth_random(v1.session, sizeof v1.session) != 0)
        return refuse(c, h->req, m, XFER_ERR_IO);
    return admit(c, h->req, &v1, true);
}
