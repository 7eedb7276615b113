/*
 * tools/trace/stuck.c - `xfer-trace stuck FILE|--live SOCK [--older-than
 * D]`: the open transfers (and, live, the open reservations of a daemon)
 * older than D, oldest first, with the shards and the phase they wait on.
 *
 * From a file, "now" is the time of the last record (the trace's own
 * clock), a transfer is open when it has no COMPLETE action, and a shard
 * waits while its last op has no result.  Live, the engine or xferd says
 * all of that itself in its snapshot (see include/xfer/ctl.h).  Both paths
 * print the same form; ties in age are broken by id, so output is stable.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

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
/* Live, over a control socket                                             */
/* ---------------------------------------------------------------------- */

/* Read everything the socket sends until EOF (5 s without data: give
 * up).  Returns a NUL-terminated buffer or NULL (error printed). */
static char *read_socket(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        fprintf(stderr, "xfer-trace: %s: socket path too long\n", path);
        return NULL;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        fprintf(stderr, "xfer-trace: %s: cannot connect: %s\n", path,
                strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    size_t n = 0, cap = 65536;
    char *buf = malloc(cap);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (!buf || poll(&p, 1, 5000) <= 0)
            goto fail;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                goto fail;
            buf = nb;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            goto fail;
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    return buf;
fail:
    fprintf(stderr, "xfer-trace: %s: no complete snapshot from the socket\n",
            path);
    free(buf);
    close(fd);
    return NULL;
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
            int w = snprintf(buf + at, len - at,
                             "  shard %" PRIu64 ": %s in flight (reserve %s, "
                             "write %s, commit %s, cancel %s)\n",
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
        if (strcmp(kind, "end") == 0)
            end = true;
    }
    return header && end ? 0 : -1;
}

static int stuck_live(const char *sock, uint64_t older)
{
    char *text = read_socket(sock);
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

int xt_cmd_stuck(int argc, char **argv)
{
    const char *file = NULL, *sock = NULL;
    uint64_t older = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--older-than") == 0) {
            if (i + 1 >= argc || !xt_parse_dur(argv[i + 1], &older))
                return xt_usage("bad duration '%s' for --older-than",
                                i + 1 < argc ? argv[i + 1] : "");
            i++;
        } else if (strcmp(argv[i], "--live") == 0) {
            if (i + 1 >= argc)
                return xt_usage("%s", "--live needs a socket path");
            sock = argv[++i];
        } else if (argv[i][0] == '-') {
            return xt_usage("unknown flag '%s'", argv[i]);
        } else if (!file) {
            file = argv[i];
        } else {
            return xt_usage("unexpected argument '%s'", argv[i]);
        }
    }
    if (!file == !sock)
        return xt_usage("%s", "stuck takes one FILE or --live SOCK");
    return sock ? stuck_live(sock, older) : stuck_file(file, older);
}
