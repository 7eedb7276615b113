/*
 * tools/trace/stuck.c - `xfer-trace stuck FILE...|--live SOCK [--older-than
 * D]`: the open transfers (and, live, the open reservations of a daemon or
 * the waiting ids of a consumer) older than D, oldest first, with the
 * shards and the phase they wait on.
 *
 * Several files (the producer's, each shard server's, the consumer's) are
 * merged by time (merge.c): each open transfer then also shows, for every
 * shard, what that shard's own trace last says of the id, and what the
 * consumer's readiness machine waits for; an id the consumer still waits
 * for after the producer ended it is listed too.  So a stuck request is
 * seen from all sides at once, naming the shard it waits on.
 *
 * From a file, "now" is the time of the last record (the trace's own
 * clock), a transfer is open when it has no COMPLETE action, and a shard
 * waits while its last op has no result.  Live, the engine or xferd says
 * all of that itself in its snapshot (see include/xfer/ctl.h).  Both paths
 * print the same form; ties in age are broken by id, so output is stable.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "xtrace.h"

typedef struct item {
    uint64_t age_ns, id;
    char *text;
} item;

typedef struct items {
    item *v;
    size_t n, cap;
} items;

static int add_item(items *it, uint64_t age, uint64_t id, const char *text)
{
    if (it->n == it->cap) {
        size_t cap = it->cap ? 2 * it->cap : 64;
        item *p = realloc(it->v, cap * sizeof *p);
        if (!p)
            return -1;
        it->v = p;
        it->cap = cap;
    }
    char *t = strdup(text);
    if (!t)
        return -1;
    it->v[it->n++] = (item){age, id, t};
    return 0;
}

static int cmp_item(const void *a, const void *b)
{
    const item *x = a, *y = b;
    if (x->age_ns != y->age_ns)
        return x->age_ns > y->age_ns ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void print_items(items *it, const char *what, uint64_t older,
                        const char *where)
{
    char d[32];
    xt_fmt_dur(d, sizeof d, older);
    if (it->n)
        qsort(it->v, it->n, sizeof *it->v, cmp_item);
    printf("%zu open %s older than %s (%s)\n", it->n, what, d, where);
    for (size_t i = 0; i < it->n; i++) {
        fputs(it->v[i].text, stdout);
        free(it->v[i].text);
    }
    free(it->v);
}

static void fmt_signed(char *buf, size_t len, int64_t ns)
{
    char d[32];
    xt_fmt_dur(d, sizeof d, (uint64_t)(ns < 0 ? -ns : ns));
    snprintf(buf, len, "%s%s", ns < 0 ? "passed " : "in ", d);
}

/* ---------------------------------------------------------------------- */
/* From a file                                                             */
/* ---------------------------------------------------------------------- */

static size_t describe_xfer(const xt_xfer *x, uint64_t now, char *buf,
                            size_t len)
{
    char age[40], dl[64], list[256] = "";
    xt_fmt_dur(age, sizeof age, now - x->start_ns);
    fmt_signed(dl, sizeof dl, (int64_t)(x->deadline_ns - now));
    if (x->partial) {
        /* submitted before the file began: age is a lower bound */
        memmove(age + 9, age, strlen(age) + 1);
        memcpy(age, "at least ", 9);
        snprintf(dl, sizeof dl, "unknown: submitted before the trace begins");
    }
    unsigned waiting = 0;
    size_t at = 0;
    for (unsigned k = 0; k < x->nshards; k++)
        if (x->shards[k].open && at < sizeof list - 8)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%u",
                                   waiting++ ? "," : "", k);
    if (x->stream && waiting == 0 && !x->sealed &&
        (x->state == XFER_TRANSFER_STATE_WRITING ||
         x->state == XFER_TRANSFER_STATE_RESERVING)) {
        /* Nothing of it is at a shard: the producer owes its next part. */
        char last[40] = "never";
        if (x->parts_added)
            xt_fmt_dur(last, sizeof last, now - x->last_part_ns);
        int n = snprintf(buf, len,
                         "transfer %" PRIu64 " attempt %" PRIu32
                         ": %s for %s (deadline %s), a stream waiting for "
                         "its next part from the producer (%" PRIu32
                         " parts added, %" PRIu32 " back, the last added "
                         "%s%s), no shard owes anything\n",
                         x->id, x->attempt,
                         xfer_fsm_state_name(XFER_MACHINE_TRANSFER, x->state),
                         age, dl, x->parts_added, x->parts_back, last,
                         x->parts_added ? " ago" : "");
        return n < 0 ? 0 : (size_t)n;
    }
    if (x->stream) {
        /* a stream waiting on shards: which part count it is at */
        char tail[96];
        snprintf(tail, sizeof tail, " (stream: %" PRIu32 " parts added, %"
                 PRIu32 " back%s)", x->parts_added, x->parts_back,
                 x->sealed ? ", sealed" : "");
        if (at < sizeof list - 1)
            snprintf(list + at, sizeof list - at, "%s", tail);
    }
    int n = snprintf(buf, len,
                     "transfer %" PRIu64 " attempt %" PRIu32
                     ": %s for %s (deadline %s), waits on %u of %s%u "
                     "shards%s%s\n",
                     x->id, x->attempt,
                     xfer_fsm_state_name(XFER_MACHINE_TRANSFER, x->state), age, dl,
                     waiting, x->partial ? "at least " : "",
                     (unsigned)x->nshards, waiting ? ": " : "",
                     waiting ? list : " (timer: deadline or cancel retry)");
    return n < 0 ? 0 : (size_t)n;
}

static void describe_shards(const xt_xfer *x, uint64_t now, char *buf,
                            size_t len, size_t at)
{
    for (unsigned k = 0; k < x->nshards && at < len; k++) {
        const xt_op *op = &x->shards[k];
        if (!op->open)
            continue;
        char ago[32];
        xt_fmt_dur(ago, sizeof ago, now - op->sent_ns);
        int n = snprintf(buf + at, len - at,
                         "  shard %u: %s sent %s ago, %sno result\n", k,
                         xt_op_name(op->kind), ago,
                         op->aborted ? "abort sent, " : "");
        if (n < 0)
            return;
        at += (size_t)n;
    }
}

static int stuck_file(const char *path, uint64_t older)
{
    xt_file f;
    if (xt_load(path, &f))
        return XT_BADINPUT;
    xt_model m;
    items it = {0};
    int rc = xt_model_build(&m, &f) ? XT_BADINPUT : XT_OK;
    char buf[8192];
    for (size_t i = 0; rc == XT_OK && i < m.n; i++) {
        const xt_xfer *x = m.x[i];
        if (x->ended || f.t_last - x->start_ns < older)
            continue;
        size_t at = describe_xfer(x, f.t_last, buf, sizeof buf);
        describe_shards(x, f.t_last, buf, sizeof buf, at);
        if (add_item(&it, f.t_last - x->start_ns, x->id, buf))
            rc = XT_BADINPUT;
    }
    char where[64];
    xt_fmt_dur(where, sizeof where, f.t_last);
    char wh[96];
    snprintf(wh, sizeof wh, "trace time %s", where);
    if (rc == XT_OK)
        print_items(&it, "transfers", older, wh);
    else
        fprintf(stderr, "xfer-trace: out of memory\n");
    xt_model_free(&m);
    xt_file_free(&f);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* From several files, merged                                              */
/* ---------------------------------------------------------------------- */

typedef struct byid {
    const xt_file *f;
    size_t *pos; /* record positions sorted by (id, position) */
    size_t n;
    uint64_t shards_seen; /* shards with a reservation record */
    bool consumer_seen;   /* any readiness record */
} byid;

static const xt_file *cmp_file;

static int cmp_pos(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    uint64_t ix = cmp_file->recs[x].id, iy = cmp_file->recs[y].id;
    if (ix != iy)
        return ix < iy ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int byid_build(byid *b, const xt_file *f)
{
    memset(b, 0, sizeof *b);
    b->f = f;
    b->shards_seen = f->shards_given;
    b->pos = malloc((f->n ? f->n : 1) * sizeof *b->pos);
    if (!b->pos)
        return -1;
    for (size_t i = 0; i < f->n; i++) {
        const xfer_trace_rec *r = &f->recs[i];
        if (r->machine == XFER_MACHINE_RESERVATION &&
            r->shard < XFER_MAX_SHARDS)
            b->shards_seen |= UINT64_C(1) << r->shard;
        b->consumer_seen |= r->machine == XFER_MACHINE_READINESS;
        if (r->machine == XFER_MACHINE_RESERVATION ||
            r->machine == XFER_MACHINE_READINESS)
            b->pos[b->n++] = i;
    }
    cmp_file = f;
    qsort(b->pos, b->n, sizeof *b->pos, cmp_pos);
    return 0;
}

/* The range [*lo, *hi) of b->pos holding id's records. */
static void byid_range(const byid *b, uint64_t id, size_t *lo, size_t *hi)
{
    size_t a = 0, z = b->n;
    while (a < z) {
        size_t m = a + (z - a) / 2;
        if (b->f->recs[b->pos[m]].id < id)
            a = m + 1;
        else
            z = m;
    }
    *lo = a;
    while (a < b->n && b->f->recs[b->pos[a]].id == id)
        a++;
    *hi = a;
}

/* The last record of id from `machine` (and shard, for reservations). */
static const xfer_trace_rec *last_of(const byid *b, uint64_t id,
                                     unsigned machine, uint16_t shard)
{
    size_t lo, hi;
    byid_range(b, id, &lo, &hi);
    const xfer_trace_rec *last = NULL;
    for (size_t i = lo; i < hi; i++) {
        const xfer_trace_rec *r = &b->f->recs[b->pos[i]];
        if (r->machine == machine &&
            (machine != XFER_MACHINE_RESERVATION || r->shard == shard) &&
            r->verdict == XFER_VERDICT_TRANSITION)
            last = r;
    }
    return last;
}

static void list_mask(char *buf, size_t len, uint64_t mask)
{
    size_t at = 0;
    buf[0] = '\0';
    for (unsigned k = 0; k < 64 && at + 4 < len; k++)
        if (mask & (UINT64_C(1) << k))
            at += (size_t)snprintf(buf + at, len - at, "%s%u", at ? "," : "",
                                   k);
    if (!buf[0])
        snprintf(buf, len, "none");
}

/* What shard k's own trace last says of id. */
static size_t shard_side(const byid *b, uint64_t id, uint16_t k, uint64_t now,
                         char *buf, size_t len)
{
    if (!(b->shards_seen & (UINT64_C(1) << k)))
        return (size_t)snprintf(buf, len, "    shard %u's trace: not given\n",
                                (unsigned)k);
    const xfer_trace_rec *r = last_of(b, id, XFER_MACHINE_RESERVATION, k);
    if (!r)
        return (size_t)snprintf(buf, len,
                                "    shard %u's trace: no record of this id "
                                "(nothing reached the shard)\n",
                                (unsigned)k);
    char ago[32];
    xt_fmt_dur(ago, sizeof ago, now - r->time_ns);
    return (size_t)snprintf(
        buf, len, "    shard %u's trace: %s since %s ago (on %s)\n",
        (unsigned)k, xfer_fsm_state_name(XFER_MACHINE_RESERVATION,
                                         r->new_state),
        ago, xfer_fsm_event_name(XFER_MACHINE_RESERVATION, r->event));
}

/* What the consumer's readiness machine last says of id. */
static size_t consumer_side(const byid *b, uint64_t id, char *buf,
                            size_t len)
{
    if (!b->consumer_seen)
        return 0;
    const xfer_trace_rec *r = last_of(b, id, XFER_MACHINE_READINESS, 0);
    if (!r)
        return (size_t)snprintf(buf, len,
                                "  consumer: no ready from any shard yet\n");
    char ready[200], missing[200];
    list_mask(ready, sizeof ready, r->arg1);
    list_mask(missing, sizeof missing, r->arg2);
    return (size_t)snprintf(
        buf, len, "  consumer: %s, ready from %s, waits on %s\n",
        xfer_fsm_state_name(XFER_MACHINE_READINESS, r->new_state), ready,
        r->new_state == XFER_READY_STATE_TAKING ? "its takes" : missing);
}

static int merged_transfers(const xt_model *m, const byid *b, uint64_t now,
                            uint64_t older, items *it)
{
    char buf[16384];
    for (size_t i = 0; i < m->n; i++) {
        const xt_xfer *x = m->x[i];
        if (x->ended || now - x->start_ns < older)
            continue;
        size_t at = describe_xfer(x, now, buf, sizeof buf);
        describe_shards(x, now, buf, sizeof buf, at);
        at = strlen(buf);
        for (uint16_t k = 0; k < x->nshards && at < sizeof buf; k++)
            at += shard_side(b, x->id, k, now, buf + at, sizeof buf - at);
        if (at < sizeof buf)
            consumer_side(b, x->id, buf + at, sizeof buf - at);
        if (add_item(it, now - x->start_ns, x->id, buf))
            return -1;
    }
    return 0;
}

/* Ids the consumer still waits for whose transfer is not open on the
 * producer (ended, or not in its trace). */
static int merged_consumer(const xt_model *m, const byid *b, uint64_t now,
                           uint64_t older, items *it)
{
    char buf[8192];
    for (size_t i = 0; i < b->n;) {
        uint64_t id = b->f->recs[b->pos[i]].id;
        size_t lo, hi;
        byid_range(b, id, &lo, &hi);
        i = hi;
        const xfer_trace_rec *last = last_of(b, id, XFER_MACHINE_READINESS, 0);
        if (!last || (last->new_state != XFER_READY_STATE_WAITING &&
                      last->new_state != XFER_READY_STATE_TAKING))
            continue;
        const xt_xfer *x = xt_model_find(m, id);
        if (x && !x->ended)
            continue; /* listed with its transfer */
        uint64_t t0 = last->time_ns;
        for (size_t j = lo; j < hi; j++)
            if (b->f->recs[b->pos[j]].machine == XFER_MACHINE_READINESS) {
                t0 = b->f->recs[b->pos[j]].time_ns;
                break;
            }
        if (now - t0 < older)
            continue;
        uint64_t all = last->arg1 | last->arg2, missing = last->arg2;
        unsigned s = 0, w = 0;
        for (unsigned k = 0; k < 64; k++) {
            s = all & (UINT64_C(1) << k) ? k + 1 : s;
            w += (missing >> k) & 1;
        }
        char age[32], list[200];
        xt_fmt_dur(age, sizeof age, now - t0);
        list_mask(list, sizeof list, missing);
        size_t at = (size_t)snprintf(
            buf, sizeof buf,
            "consumer waits for %" PRIu64 " attempt %" PRIu32
            ": %s for %s, waits on %u of %u shards: %s\n  producer: %s\n",
            id, last->attempt,
            xfer_fsm_state_name(XFER_MACHINE_READINESS, last->new_state),
            age, w, s, list,
            !x ? "no record of this id"
               : x->status ? "ended, failed" : "ended, ok");
        for (uint16_t k = 0; k < s && at < sizeof buf; k++)
            at += shard_side(b, id, k, now, buf + at, sizeof buf - at);
        if (add_item(it, now - t0, id, buf))
            return -1;
    }
    return 0;
}

static int stuck_files(int n, char **paths, uint64_t older)
{
    xt_file f;
    if (xt_load_many(n, paths, &f))
        return XT_BADINPUT;
    xt_model m;
    byid b = {0}; /* freed below even when the model fails first */
    items it = {0};
    int rc = xt_model_build(&m, &f) || byid_build(&b, &f) ? XT_BADINPUT
                                                           : XT_OK;
    if (rc == XT_OK && (merged_transfers(&m, &b, f.t_last, older, &it) ||
                        merged_consumer(&m, &b, f.t_last, older, &it)))
        rc = XT_BADINPUT;
    char when[32], wh[128];
    xt_fmt_dur(when, sizeof when, f.t_last);
    snprintf(wh, sizeof wh, "trace time %s, %d traces merged", when, n);
    if (rc == XT_OK)
        print_items(&it, "transfers or consumer waits", older, wh);
    else
        fprintf(stderr, "xfer-trace: out of memory\n");
    free(b.pos);
    xt_model_free(&m);
    xt_file_free(&f);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Live, over a control socket                                             */
/* ---------------------------------------------------------------------- */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A --timeout as given: "5s", "500ms". */
static void fmt_timeout(char *buf, size_t len, uint64_t ns)
{
    if (ns % 1000000000ull == 0)
        snprintf(buf, len, "%llus", (unsigned long long)(ns / 1000000000ull));
    else
        snprintf(buf, len, "%llums",
                 (unsigned long long)((ns + 999999) / 1000000));
}

/* Milliseconds left until deadline (at least 1 while any is left). */
static int left_ms(uint64_t deadline)
{
    uint64_t now = mono_ns();
    if (now >= deadline)
        return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > 60000 ? 60000 : (int)ms;
}

/* Connect without blocking (a listener whose backlog is full, because its
 * process no longer accepts, would block connect()), within the deadline.
 * Returns the fd or -1 (one line printed). */
static int connect_live(const char *path, uint64_t deadline, uint64_t to)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        fprintf(stderr, "xfer-trace: %s: socket path too long\n", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    /* A Unix listener's full backlog answers EAGAIN at once: try again
     * every 20 ms until the deadline. */
    while (rc != 0 && fd >= 0 && e == EAGAIN && left_ms(deadline) > 0) {
        struct timespec nap = {0, 20000000};
        nanosleep(&nap, NULL);
        rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
        e = errno;
    }
    if (rc != 0 && fd >= 0 && e == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        socklen_t len = sizeof e;
        int ms;
        while ((ms = left_ms(deadline)) > 0 &&
               (rc = poll(&p, 1, ms)) < 0 && errno == EINTR)
            ;
        if (rc > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) == 0)
            rc = e ? -1 : 0;
        else
            rc = -1, e = ETIMEDOUT;
    }
    if (rc == 0)
        return fd;
    char d[32];
    fmt_timeout(d, sizeof d, to);
    if (e == ETIMEDOUT || e == EAGAIN)
        fprintf(stderr, "xfer-trace: %s: no connection within %s (the process "
                "behind it does not accept: stopped or hung?)\n", path, d);
    else if (e == ECONNREFUSED)
        fprintf(stderr, "xfer-trace: %s: nothing listens there (Connection "
                "refused): the process is gone\n", path);
    else
        fprintf(stderr, "xfer-trace: %s: cannot connect: %s\n", path,
                strerror(e));
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Read everything the socket sends until EOF, all within `to` (a peer that
 * never answers, or that trickles bytes, ends in one line at the
 * deadline).  Returns a NUL-terminated buffer or NULL (one line printed). */
static char *read_socket(const char *path, uint64_t to)
{
    uint64_t deadline = mono_ns() + to;
    int fd = connect_live(path, deadline, to);
    if (fd < 0)
        return NULL;
    size_t n = 0, cap = 65536;
    char *buf = malloc(cap);
    const char *why = "out of memory";
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int ms = left_ms(deadline), rc = 0;
        if (!buf)
            goto fail;
        if (ms > 0)
            rc = poll(&p, 1, ms);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0) {
            why = rc < 0 ? strerror(errno) : NULL;
            goto fail;
        }
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                goto fail;
            buf = nb;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got < 0) {
            why = strerror(errno);
            goto fail;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    return buf;
fail:
    if (why) {
        fprintf(stderr, "xfer-trace: %s: no complete snapshot: %s\n", path,
                why);
    } else {
        char d[32];
        fmt_timeout(d, sizeof d, to);
        fprintf(stderr, "xfer-trace: %s: no complete snapshot within %s "
                "(%zu bytes; the process does not answer: stopped or "
                "hung?)\n", path, d, n);
    }
    free(buf);
    close(fd);
    return NULL;
}

char *xt_read_socket(const char *path, uint64_t to)
{
    return read_socket(path, to);
}

static size_t live_shards(const char *line, char *buf, size_t len, size_t at)
{
    const char *p = strstr(line, "\"shards\":[");
    while (p && (p = strstr(p, "{\"shard\":")) != NULL && at < len) {
        const char *end = strchr(p, '}');
        if (!end)
            break;
        char one[512], waits[32], rv[16], wv[16], cv[16], xv[16];
        size_t n = (size_t)(end - p + 1) < sizeof one ? (size_t)(end - p + 1)
                                                      : sizeof one - 1;
        memcpy(one, p, n);
        one[n] = '\0';
        uint64_t k = 0;
        if (xt_json_str(one, "waits", waits, sizeof waits) && waits[0] &&
            xt_json_u64(one, "shard", &k) &&
            xt_json_str(one, "resv", rv, sizeof rv) &&
            xt_json_str(one, "write", wv, sizeof wv) &&
            xt_json_str(one, "commit", cv, sizeof cv) &&
            xt_json_str(one, "cancel", xv, sizeof xv)) {
            char ev[16];
            /* "eager" is there only on the eager path */
            int w = xt_json_str(one, "eager", ev, sizeof ev)
                        ? snprintf(buf + at, len - at,
                                   "  shard %" PRIu64 ": %s in flight "
                                   "(eager %s, cancel %s)\n",
                                   k, waits, ev, xv)
                        : snprintf(buf + at, len - at,
                                   "  shard %" PRIu64 ": %s in flight "
                                   "(reserve %s, write %s, commit %s, "
                                   "cancel %s)\n",
                                   k, waits, rv, wv, cv, xv);
            at += w > 0 ? (size_t)w : 0;
        }
        p = end;
    }
    return at;
}

static int live_transfer(const char *line, items *it, uint64_t older)
{
    uint64_t id, attempt, age, nshards;
    int64_t dl = 0;
    char state[32], list[256] = "";
    if (!xt_json_u64(line, "id", &id) ||
        !xt_json_u64(line, "attempt", &attempt) ||
        !xt_json_u64(line, "age_ns", &age) ||
        !xt_json_u64(line, "nshards", &nshards) ||
        !xt_json_str(line, "state", state, sizeof state) ||
        !xt_json_str(line, "waiting", list, sizeof list))
        return -1;
    xt_json_i64(line, "deadline_in_ns", &dl);
    if (age < older)
        return 0;
    char buf[8192], a[32], d[48];
    xt_fmt_dur(a, sizeof a, age);
    fmt_signed(d, sizeof d, dl);
    unsigned waiting = list[0] ? 1 : 0;
    for (const char *c = list; *c; c++)
        waiting += *c == ',';
    int n = snprintf(buf, sizeof buf,
                     "transfer %" PRIu64 " attempt %" PRIu64
                     ": %s for %s (deadline %s), waits on %u of %" PRIu64
                     " shards%s%s\n",
                     id, attempt, state, a, d, waiting, nshards,
                     waiting ? ": " : "",
                     waiting ? list : " (timer: deadline or cancel retry)");
    live_shards(line, buf, sizeof buf, n > 0 ? (size_t)n : 0);
    return add_item(it, age, id, buf);
}

static int live_reservation(const char *line, items *it, uint64_t older)
{
    uint64_t id, attempt, age, shard;
    char state[32], waits[48];
    if (!xt_json_u64(line, "id", &id) ||
        !xt_json_u64(line, "attempt", &attempt) ||
        !xt_json_u64(line, "age_ns", &age) ||
        !xt_json_u64(line, "shard", &shard) ||
        !xt_json_str(line, "state", state, sizeof state) ||
        !xt_json_str(line, "waits", waits, sizeof waits))
        return -1;
    if (age < older)
        return 0;
    char buf[512], a[32];
    xt_fmt_dur(a, sizeof a, age);
    snprintf(buf, sizeof buf,
             "reservation %" PRIu64 " attempt %" PRIu64 " on shard %" PRIu64
             ": %s for %s, waits on %s\n",
             id, attempt, shard, state, a, waits);
    return add_item(it, age, id, buf);
}

static int live_readiness(const char *line, items *it, uint64_t older)
{
    uint64_t id, attempt, age, nshards;
    char state[32], ready[256], waiting[256];
    if (!xt_json_u64(line, "id", &id) ||
        !xt_json_u64(line, "attempt", &attempt) ||
        !xt_json_u64(line, "age_ns", &age) ||
        !xt_json_u64(line, "nshards", &nshards) ||
        !xt_json_str(line, "state", state, sizeof state) ||
        !xt_json_str(line, "ready", ready, sizeof ready) ||
        !xt_json_str(line, "waiting", waiting, sizeof waiting))
        return -1;
    if (age < older)
        return 0;
    unsigned w = waiting[0] ? 1 : 0;
    for (const char *c = waiting; *c; c++)
        w += *c == ',';
    char buf[1024], a[32];
    xt_fmt_dur(a, sizeof a, age);
    snprintf(buf, sizeof buf,
             "consumer waits for %" PRIu64 " attempt %" PRIu64
             ": %s for %s, waits on %u of %" PRIu64 " shards: %s "
             "(ready from %s)\n",
             id, attempt, state, a, w, nshards, waiting[0] ? waiting : "none",
             ready[0] ? ready : "none");
    return add_item(it, age, id, buf);
}

static int parse_snapshot(char *text, items *it, uint64_t older)
{
    bool header = false, end = false;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char kind[32];
        uint64_t v;
        if (xt_json_u64(line, "xfer_ctl", &v)) {
            header = v == 1;
            continue;
        }
        if (!xt_json_str(line, "kind", kind, sizeof kind))
            return -1;
        if (strcmp(kind, "transfer") == 0 && live_transfer(line, it, older))
            return -1;
        if (strcmp(kind, "reservation") == 0 &&
            live_reservation(line, it, older))
            return -1;
        if (strcmp(kind, "readiness") == 0 && live_readiness(line, it, older))
            return -1;
        if (strcmp(kind, "end") == 0)
            end = true;
    }
    return header && end ? 0 : -1;
}

static int stuck_live(const char *sock, uint64_t older, uint64_t timeout)
{
    char *text = read_socket(sock, timeout);
    if (!text)
        return XT_BADINPUT;
    items it = {0};
    int rc = parse_snapshot(text, &it, older);
    free(text);
    if (rc) {
        fprintf(stderr, "xfer-trace: %s: malformed snapshot\n", sock);
        for (size_t i = 0; i < it.n; i++)
            free(it.v[i].text);
        free(it.v);
        return XT_BADINPUT;
    }
    char where[300];
    snprintf(where, sizeof where, "live %s", sock);
    print_items(&it, "transfers or reservations", older, where);
    return XT_OK;
}

static const cli_flag stuck_flags[] = {
    {"live", 0, "SOCK", "ask a running engine or xferd on its control socket",
     1},
    {"older-than", 0, "D", "only what has been open at least D (0)", 2},
    {"timeout", 0, "D", "--live: give up after D without a whole answer (5s)",
     3},
    CLI_HELP,
    {NULL, 0, NULL, NULL, 0}};
static const cli stuck_cli = {
    .prog = "xfer-trace stuck",
    .synopsis = "FILE...|--live SOCK [--older-than D] [--timeout D]",
    .intro = "open transfers older than D, oldest first; several files "
             "(producer, shards,\nconsumer) merge\n",
    .flags = stuck_flags};

int xt_cmd_stuck(int argc, char **argv)
{
    const char *sock = NULL, *arg;
    uint64_t older = 0, timeout = 5000000000ull;
    int k;
    while ((k = cli_next(&stuck_cli, argc, argv, &arg)) != CLI_END) {
        if (k == CLI_ERR)
            return XT_USAGE;
        if (k == 1)
            sock = arg;
        else if (k == 2 && !xt_parse_dur(arg, &older))
            return xt_usage("bad duration '%s' for --older-than", arg);
        else if (k == 3 && (!xt_parse_dur(arg, &timeout) || !timeout))
            return xt_usage("bad duration '%s' for --timeout", arg);
    }
    int nfiles = argc - optind;
    char **files = argv + optind;
    if (!nfiles == !sock)
        return xt_usage("%s", "stuck takes FILE... or --live SOCK");
    return sock          ? stuck_live(sock, older, timeout)
           : nfiles == 1 ? stuck_file(files[0], older)
                         : stuck_files(nfiles, files, older);
}
