/*
 * transport/dir_watch.c - watched groups of the directory (xfer/dir.h):
 * read a group's members (range over its prefix), then follow it with a
 * streaming watch from the next revision; entries are validated here.
 *
 * What must stay true:
 *  - an entry is hostile input: a key or value that does not parse, or a
 *    field out of range, is ignored with one log line, never asserted;
 *  - a member is replaced only by an entry of an epoch at least its own,
 *    and the highest epoch seen for a shard is remembered even after the
 *    shard left, so an old server's late re-registration is never used;
 *  - after a lost stream the group is read again whole and only the
 *    differences are reported: a member that vanished meanwhile is
 *    reported gone, one that is unchanged is not reported again;
 *  - while etcd is unreachable nothing is reported gone: the last known
 *    membership stays in force.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <json-c/json.h>
#include <openssl/rand.h>

#include "dir_int.h"
#include "timer.h"

/* ---------------------------------------------------------------------- */
/* Entries                                                                 */
/* ---------------------------------------------------------------------- */

int xfer_dir_group_ok(const char *g)
{
    if (!g || !*g || strlen(g) >= XFER_DIR_GROUP_MAX)
        return XFER_ERR_INVALID_ARG;
    for (const char *p = g; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' ||
              *p == '-'))
            return XFER_ERR_INVALID_ARG;
    return 0;
}

static bool addr_ok(const char *a)
{
    size_t n = strlen(a);
    if (n == 0 || n >= XFER_DIR_ADDR_MAX)
        return false;
    for (const char *p = a; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' ||
              *p == ':' || *p == '_'))
            return false;
    return true;
}

int xfer_dir_entry_json(const xfer_dir_entry *e, char *out, size_t cap)
{
    if (!addr_ok(e->addr))
        return XFER_ERR_INVALID_ARG;
    int n = snprintf(out, cap,
                     "{\"shard\":%u,\"addr\":\"%s\",\"port\":%u,"
                     "\"transports\":%u,\"epoch\":%llu}",
                     (unsigned)e->shard, e->addr, (unsigned)e->port,
                     (unsigned)e->transports, (unsigned long long)e->epoch);
    return n > 0 && (size_t)n < cap ? 0 : XFER_ERR_INVALID_ARG;
}

static bool int_field(json_object *o, const char *f, int64_t lo, int64_t hi,
                      int64_t *v)
{
    json_object *x;
    if (!json_object_object_get_ex(o, f, &x) ||
        !json_object_is_type(x, json_type_int))
        return false;
    errno = 0;
    *v = json_object_get_int64(x);
    return *v >= lo && *v <= hi;
}

/* Parse a member's value into *e; NULL when fine, else why not. */
static const char *parse_value(const char *v, size_t n, xfer_dir_entry *e)
{
    const char *why = "not a JSON object";
    json_tokener *tok = json_tokener_new_ex(4);
    if (!tok)
        return "out of memory";
    json_object *o = json_tokener_parse_ex(tok, v, (int)n);
    if (!o || json_tokener_get_parse_end(tok) != n ||
        !json_object_is_type(o, json_type_object))
        goto out;
    int64_t shard, port, tr, epoch;
    json_object *a;
    why = "bad or missing field";
    if (!int_field(o, "shard", 0, DIR_MAX_SHARDS - 1, &shard) ||
        !int_field(o, "port", 1, 65535, &port) ||
        !int_field(o, "transports", 1, XFER_DIR_TCP | XFER_DIR_RDMA, &tr) ||
        !int_field(o, "epoch", 1, INT64_MAX, &epoch) ||
        !json_object_object_get_ex(o, "addr", &a) ||
        !json_object_is_type(a, json_type_string) ||
        !addr_ok(json_object_get_string(a)))
        goto out;
    memset(e, 0, sizeof *e);
    e->shard = (uint16_t)shard;
    e->port = (uint16_t)port;
    e->transports = (uint32_t)tr;
    e->epoch = (uint64_t)epoch;
    strcpy(e->addr, json_object_get_string(a));
    why = NULL;
out:
    if (o)
        json_object_put(o);
    json_tokener_free(tok);
    return why;
}

/* Printable form of hostile bytes for a log line. */
static void clean(const char *s, size_t n, char *out, size_t cap)
{
    size_t j = 0;
    for (size_t i = 0; i < n && j + 5 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\')
            out[j++] = (char)ch;
        else
            j += (size_t)snprintf(out + j, cap - j, "\\x%02x", ch);
    }
    out[j] = '\0';
}

/* The shard of `key` under w's prefix, or -1 when it is not "<digits>". */
static int key_shard(const dir_watch *w, const char *key, size_t n)
{
    size_t pl = strlen(w->prefix);
    if (n <= pl || n > pl + 2 || memcmp(key, w->prefix, pl))
        return -1;
    int k = 0;
    for (size_t i = pl; i < n; i++) {
        if (key[i] < '0' || key[i] > '9')
            return -1;
        k = k * 10 + (key[i] - '0');
    }
    if ((n == pl + 2 && key[pl] == '0') || k >= DIR_MAX_SHARDS)
        return -1;
    return k;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

/* True the first time (group, key, why) is ignored at modification
 * revision `modrev`: log it then only, so a hostile or stale entry costs
 * one line, not one per read of its group (a put of it again is a new
 * revision, and is logged).
 * Past DIR_MAX_LOGGED remembered entries, one line says the rest are
 * only counted. */
static bool first_time(dir_watch *w, const char *key, size_t n,
                       const char *why, int64_t modrev)
{
    xfer_dir *d = w->d;
    uint64_t h = fnv(14695981039346656037ull, w->group, strlen(w->group));
    h = fnv(fnv(fnv(h, key, n), why, strlen(why)), &modrev, sizeof modrev);
    for (uint32_t i = 0; i < d->nlogged && i < DIR_MAX_LOGGED; i++)
        if (d->logged[i] == h)
            return false;
    if (d->nlogged < DIR_MAX_LOGGED) {
        d->logged[d->nlogged++] = h;
        return true;
    }
    if (d->nlogged == DIR_MAX_LOGGED) {
        d->nlogged++;
        xfer_dir_logf(d, "dir: %u ignored entries logged; further ones are "
                      "only counted", (unsigned)DIR_MAX_LOGGED);
    }
    return false;
}

static void bad_entry(dir_watch *w, const char *key, size_t n,
                      const char *why, int64_t modrev)
{
    char k[200];
    w->d->st.bad_entries++;
    if (!first_time(w, key, n, why, modrev))
        return;
    clean(key, n, k, sizeof k);
    xfer_dir_logf(w->d, "dir: ignored entry %s of group %s: %s", k, w->group,
                  why);
}

static void report(dir_watch *w, int k, const xfer_dir_entry *e)
{
    w->fn(w->ud, w->group, (uint16_t)k, e);
}

/* A kv of the group (from a range or a PUT event).  `seen` collects the
 * shards present (for a range). */
static void on_kv(dir_watch *w, json_object *kv, uint64_t *seen)
{
    json_object *kj, *vj;
    char key[DIR_KEY_MAX + 64], val[DIR_VALUE_MAX + 8];
    size_t kn = 0, vn = 0;
    int64_t modrev = 0;
    xfer_dir_i64(kv, "mod_revision", &modrev); /* 0 when absent */
    if (!json_object_object_get_ex(kv, "key", &kj) ||
        !json_object_is_type(kj, json_type_string) ||
        xfer_dir_unb64(json_object_get_string(kj), key, sizeof key, &kn)) {
        bad_entry(w, "?", 1, "key not base64 or too long", modrev);
        return;
    }
    int k = key_shard(w, key, kn);
    if (k < 0 || k >= DIR_MAX_SHARDS) {
        bad_entry(w, key, kn, "key is not <prefix><group>/<shard below 64>",
                  modrev);
        return;
    }
    const char *why = "value not base64 or too long";
    xfer_dir_entry e;
    if (!json_object_object_get_ex(kv, "value", &vj) ||
        !json_object_is_type(vj, json_type_string) ||
        xfer_dir_unb64(json_object_get_string(vj), val, sizeof val, &vn) ||
        vn > DIR_VALUE_MAX || (why = parse_value(val, vn, &e)) != NULL) {
        bad_entry(w, key, kn, why, modrev);
        return;
    }
    if (e.shard != k) {
        bad_entry(w, key, kn, "value names another shard", modrev);
        return;
    }
    if (e.epoch < w->epoch[k]) {
        char stale[48];
        snprintf(stale, sizeof stale, "stale %llu",
                 (unsigned long long)e.epoch);
        w->d->st.stale_entries++;
        if (first_time(w, key, kn, stale, modrev))
            xfer_dir_logf(w->d,
                      "dir: ignored entry of group %s shard %d: epoch %llu "
                      "below the known %llu",
                      w->group, k, (unsigned long long)e.epoch,
                      (unsigned long long)w->epoch[k]);
        if (seen && (w->have >> k & 1))
            *seen |= 1ull << k; /* the known one stays */
        return;
    }
    if (seen)
        *seen |= 1ull << k;
    w->epoch[k] = e.epoch;
    bool same = (w->have >> k & 1) &&
                !memcmp(&w->members[k], &e, sizeof e);
    w->members[k] = e;
    w->have |= 1ull << k;
    if (!same) {
        w->since[k] = xfer_dir_now();
        report(w, k, &w->members[k]);
    }
}

static void gone(dir_watch *w, int k)
{
    if (!(w->have >> k & 1))
        return;
    w->have &= ~(1ull << k);
    report(w, k, NULL);
}

static void note_revision(dir_watch *w, json_object *o)
{
    json_object *h;
    int64_t rev;
    if (!json_object_object_get_ex(o, "header", &h) ||
        !xfer_dir_i64(h, "revision", &rev))
        return;
    if (rev > w->rev)
        w->rev = rev;
    if (rev > w->d->st.revision)
        w->d->st.revision = rev;
}

/* ---------------------------------------------------------------------- */
/* The stream                                                              */
/* ---------------------------------------------------------------------- */

static void start(dir_watch *w);

/* The stream brought something: it is alive for another timeout. */
static void idle_arm(dir_watch *w)
{
    uint64_t to = w->d->cfg.watch_timeout_ns;
    if (to == UINT64_MAX)
        return;
    struct timeval tv = xfer_timer_delay(to);
    evtimer_add(w->idle_ev, &tv);
}

static void retry(dir_watch *w)
{
    uint64_t delay = xfer_backoff_lost(&w->bo, xfer_dir_now(),
                                       w->d->cfg.reconnect_min_ns,
                                       w->d->cfg.reconnect_max_ns);
    struct timeval tv = xfer_timer_delay(delay ? delay
                                               : w->d->cfg.reconnect_min_ns);
    evtimer_add(w->retry_ev, &tv);
}

static void on_event_msg(dir_watch *w, json_object *msg)
{
    json_object *res, *evs;
    if (!json_object_object_get_ex(msg, "result", &res) ||
        !json_object_is_type(res, json_type_object))
        return; /* an error message: the stream ends, and is restarted */
    note_revision(w, res);
    w->d->st.connected = true;
    if (!json_object_object_get_ex(res, "events", &evs) ||
        !json_object_is_type(evs, json_type_array))
        return;
    size_t n = json_object_array_length(evs);
    for (size_t i = 0; i < n; i++) {
        json_object *ev = json_object_array_get_idx(evs, i), *t, *kv, *kj;
        w->d->st.events++;
        if (!json_object_object_get_ex(ev, "kv", &kv))
            continue;
        if (json_object_object_get_ex(ev, "type", &t) &&
            json_object_is_type(t, json_type_string) &&
            !strcmp(json_object_get_string(t), "DELETE")) {
            char key[DIR_KEY_MAX + 64];
            size_t kn;
            int k;
            if (json_object_object_get_ex(kv, "key", &kj) &&
                json_object_is_type(kj, json_type_string) &&
                !xfer_dir_unb64(json_object_get_string(kj), key, sizeof key,
                                &kn) &&
                (k = key_shard(w, key, kn)) >= 0)
                gone(w, k);
            continue;
        }
        on_kv(w, kv, NULL);
    }
}

static void on_chunk(struct evhttp_request *req, void *arg)
{
    dir_watch *w = arg;
    idle_arm(w);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    char *p = (char *)evbuffer_pullup(in, (ssize_t)n);
    size_t off = 0;
    while (off < n) {
        json_object *o = json_tokener_parse_ex(w->tok, p + off,
                                               (int)(n - off));
        size_t used = json_tokener_get_parse_end(w->tok);
        off += used ? used : n - off;
        if (!o) {
            w->msg_bytes += used;
            if (json_tokener_get_error(w->tok) != json_tokener_continue ||
                w->msg_bytes > DIR_MSG_MAX) {
                /* Garbage or an unbounded message: read the group again. */
                json_tokener_reset(w->tok);
                w->msg_bytes = 0;
                xfer_dir_logf(w->d, "dir: bad watch message on group %s",
                              w->group);
                break;
            }
            continue;
        }
        w->msg_bytes = 0;
        if (json_object_is_type(o, json_type_object))
            on_event_msg(w, o);
        json_object_put(o);
    }
    evbuffer_drain(in, n);
}

/* The stream ended (etcd closed it, the member died, an error): read the
 * group again after the backoff. */
static void on_stream_end(struct evhttp_request *req, void *arg)
{
    dir_watch *w = arg;
    evtimer_del(w->idle_ev);
    w->req = NULL;
    w->streaming = false;
    xfer_dir_failover(w->d);
    retry(w);
}

/* Nothing on the stream for watch_timeout_ns, not even a progress
 * notification: whatever holds it (a hung member, a half-open
 * connection, a proxy) will not bring the next change.  Drop the
 * connection (evhttp_connection_free calls no callback) and read the
 * group again after the backoff, as after a stream that ended. */
static void on_idle(evutil_socket_t fd, short what, void *arg)
{
    dir_watch *w = arg;
    w->d->st.watch_timeouts++;
    xfer_dir_logf(w->d, "dir: watch of group %s silent for %llu ms, "
                  "reconnecting", w->group,
                  (unsigned long long)(w->d->cfg.watch_timeout_ns / 1000000));
    if (w->conn)
        evhttp_connection_free(w->conn);
    w->conn = NULL;
    w->req = NULL;
    w->streaming = false;
    xfer_dir_failover(w->d);
    retry(w);
}

static void open_stream(dir_watch *w)
{
    const char *pre = w->prefix;
    size_t pl = strlen(pre);
    char end[DIR_KEY_MAX];
    memcpy(end, pre, pl + 1);
    end[pl - 1]++; /* '/' + 1: every key under the prefix */
    char *k = xfer_dir_b64(pre, pl), *e = xfer_dir_b64(end, pl);
    json_object *b = json_object_new_object(), *cr = json_object_new_object();
    char rev[24];
    snprintf(rev, sizeof rev, "%lld", (long long)(w->rev + 1));
    if (k && e && b && cr) {
        json_object_object_add(cr, "key", json_object_new_string(k));
        json_object_object_add(cr, "range_end", json_object_new_string(e));
        json_object_object_add(cr, "start_revision",
                               json_object_new_string(rev));
        /* etcd then sends an empty result at its progress interval, so
         * a quiet stream is told from a dead one (on_idle). */
        json_object_object_add(cr, "progress_notify",
                               json_object_new_boolean(1));
        json_object_object_add(b, "create_request", cr);
        cr = NULL;
    }
    free(k);
    free(e);
    json_object_put(cr);
    if (w->conn)
        evhttp_connection_free(w->conn);
    w->conn = xfer_dir_connect(w->d);
    struct evhttp_request *req =
        w->conn ? evhttp_request_new(on_stream_end, w) : NULL;
    if (!req) {
        json_object_put(b);
        retry(w);
        return;
    }
    /* The stream is quiet while nothing changes: no HTTP read timeout
     * on it; a silent stream is noticed by on_idle, which counts on
     * etcd's progress notifications. */
    evhttp_connection_set_timeout(w->conn, -1);
    evhttp_connection_set_max_body_size(w->conn, -1);
    evhttp_request_set_chunked_cb(req, on_chunk);
    xfer_dir_add_auth(w->d, req);
    const char *s = json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN);
    evbuffer_add(evhttp_request_get_output_buffer(req), s, strlen(s));
    json_object_put(b);
    json_tokener_reset(w->tok);
    w->msg_bytes = 0;
    if (evhttp_make_request(w->conn, req, EVHTTP_REQ_POST, "/v3/watch")) {
        retry(w);
        return;
    }
    w->req = req;
    w->streaming = true;
    idle_arm(w);
}

static void on_range(struct xfer_dir *d, json_object *o, void *arg)
{
    dir_watch *w = arg;
    json_object *kvs;
    if (!o) {
        retry(w);
        return;
    }
    xfer_backoff_up(&w->bo, xfer_dir_now());
    note_revision(w, o);
    uint64_t seen = 0;
    if (json_object_object_get_ex(o, "kvs", &kvs) &&
        json_object_is_type(kvs, json_type_array)) {
        size_t n = json_object_array_length(kvs);
        for (size_t i = 0; i < n; i++)
            on_kv(w, json_object_array_get_idx(kvs, i), &seen);
    }
    for (int k = 0; k < DIR_MAX_SHARDS; k++)
        if (!(seen >> k & 1))
            gone(w, k);
    open_stream(w);
}

static void start(dir_watch *w)
{
    if (xfer_dir_need_auth(w->d)) {
        retry(w);
        return;
    }
    const char *pre = w->prefix;
    size_t pl = strlen(pre);
    char end[DIR_KEY_MAX];
    memcpy(end, pre, pl + 1);
    end[pl - 1]++;
    char *k = xfer_dir_b64(pre, pl), *e = xfer_dir_b64(end, pl);
    json_object *b = json_object_new_object();
    if (k && e && b) {
        json_object_object_add(b, "key", json_object_new_string(k));
        json_object_object_add(b, "range_end", json_object_new_string(e));
    }
    free(k);
    free(e);
    if (xfer_dir_post(w->d, "/v3/kv/range", b, on_range, w) != 0)
        retry(w);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    start(arg);
}

void xfer_dir_watch_free(dir_watch *w)
{
    if (!w)
        return;
    if (w->conn)
        evhttp_connection_free(w->conn); /* drops the stream, no cb */
    if (w->retry_ev)
        event_free(w->retry_ev);
    if (w->idle_ev)
        event_free(w->idle_ev);
    if (w->tok)
        json_tokener_free(w->tok);
    free(w);
}

int xfer_dir_watch(xfer_dir *d, const char *group, xfer_dir_member_fn fn,
                   void *ud)
{
    if (!d || !fn || xfer_dir_group_ok(group) != 0)
        return XFER_ERR_INVALID_ARG;
    for (uint32_t i = 0; i < d->nwatches; i++)
        if (!strcmp(d->watches[i]->group, group) &&
            d->watches[i]->fn == fn && d->watches[i]->ud == ud)
            return XFER_ERR_EXISTS;
    if (d->nwatches == DIR_MAX_WATCHES)
        return XFER_ERR_BUSY;
    dir_watch *w = calloc(1, sizeof *w);
    if (!w)
        return XFER_ERR_NOMEM;
    w->d = d;
    w->fn = fn;
    w->ud = ud;
    strcpy(w->group, group);
    snprintf(w->prefix, sizeof w->prefix, "%s%s/", d->cfg.prefix, group);
    uint8_t seed[16];
    RAND_bytes(seed, sizeof seed);
    xfer_backoff_init(&w->bo, seed, sizeof seed);
    w->tok = json_tokener_new_ex(8);
    w->retry_ev = evtimer_new(d->base, on_retry, w);
    w->idle_ev = evtimer_new(d->base, on_idle, w);
    if (!w->tok || !w->retry_ev || !w->idle_ev) {
        xfer_dir_watch_free(w);
        return XFER_ERR_NOMEM;
    }
    d->watches[d->nwatches++] = w;
    struct timeval now = {0, 0};
    evtimer_add(w->retry_ev, &now); /* starts on the loop */
    return 0;
}

int xfer_dir_member(const xfer_dir *d, const char *group, uint16_t shard,
                    xfer_dir_entry *e)
{
    if (!d || !group || !e || shard >= DIR_MAX_SHARDS)
        return XFER_ERR_INVALID_ARG;
    for (uint32_t i = 0; i < d->nwatches; i++) {
        const dir_watch *w = d->watches[i];
        if (strcmp(w->group, group))
            continue;
        if (!(w->have >> shard & 1))
            return XFER_ERR_NOT_FOUND;
        *e = w->members[shard];
        return 0;
    }
    return XFER_ERR_NOT_FOUND;
}

int xfer_dir_members_get(const xfer_dir *d, xfer_dir_member_info *out,
                         size_t cap, size_t *n, size_t *total)
{
    if (!d || (!out && cap))
        return XFER_ERR_INVALID_ARG;
    size_t w = 0, all = 0;
    for (uint32_t i = 0; i < d->nwatches; i++) {
        const dir_watch *x = d->watches[i];
        bool first = true;
        for (uint32_t j = 0; j < i && first; j++)
            first = strcmp(d->watches[j]->group, x->group) != 0;
        if (!first)
            continue; /* the group's first watch answers for it */
        for (int k = 0; k < DIR_MAX_SHARDS; k++) {
            if (!(x->have >> k & 1))
                continue;
            all++;
            if (w == cap)
                continue;
            memset(&out[w], 0, sizeof out[w]);
            strcpy(out[w].group, x->group);
            out[w].e = x->members[k];
            out[w].since_ns = x->since[k];
            w++;
        }
    }
    if (n)
        *n = w;
    if (total)
        *total = all;
    return 0;
}

int xfer_dir_unwatch(xfer_dir *d, const char *group, xfer_dir_member_fn fn,
                     void *ud)
{
    if (!d || !group)
        return XFER_ERR_NOT_FOUND;
    for (uint32_t i = 0; i < d->nwatches; i++) {
        dir_watch *w = d->watches[i];
        if (strcmp(w->group, group) || w->fn != fn || w->ud != ud)
            continue;
        /* A range request of this watch may be in flight: it is told the
         * watch is gone through its argument. */
        xfer_dir_forget_arg(d, w);
        xfer_dir_watch_free(w);
        d->watches[i] = d->watches[--d->nwatches];
        return 0;
    }
    return XFER_ERR_NOT_FOUND;
}
