/*
 * tools/xferd/xferd.c - the consumer daemon: hosts one or more consumer
 * shards of a group on one event loop and serves the wire protocol on TCP.
 *
 *   xferd [--addr A] [--port P] [--group G] [--shards LIST] [--pool SIZE]
 *         [--lease-ttl DUR] [--max-resv N] [--max-tombs N] [--consume]
 *         [--faults PPM[:SEED]]
 *         [--drop PPM] [--drain-timeout DUR] [--port-file PATH] [--quiet]
 *         [--ctl PATH]
 *
 * --ctl PATH opens a Unix control socket (xfer/ctl.h) answering with every
 * open reservation (`xfer-trace stuck --live PATH`).
 *
 * --faults and --drop inject seeded faults for tests: per op, a refusal or
 * an "applied but reported failed" (PPM in a million, half each), and a
 * dropped connection (--drop).
 *
 * Prints "xferd: listening on ADDR:PORT" on stdout once it serves (port 0
 * picks a free port; --port-file also writes it).  SIGTERM/SIGINT drain:
 * stop accepting, refuse new reserves, exit once no reservation is being
 * reserved or written (a second signal exits at once).  SIGUSR1 prints a
 * stats line on stderr.  A bad flag prints one line and exits 2.
 *
 * Invariant: this file only parses and wires; the daemon lives in
 * server.c.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/util.h>
#include <sys/socket.h>

#include "server.h"
#include "xfer/errors.h"

typedef struct opts {
    xd_config cfg;
    const char *port_file;
    const char *ctl_path;
} opts;

static int bad(const char *what, const char *arg)
{
    fprintf(stderr, "xferd: bad %s '%s' (try --help)\n", what,
            arg ? arg : "");
    return 2;
}

/* A number with an optional suffix scaled by the table (suffix, factor). */
static int parse_scaled(const char *s, uint64_t *out, const char *const *sfx,
                        const uint64_t *mul, uint64_t bare)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    uint64_t f = bare;
    if (*end) {
        f = 0;
        for (int i = 0; sfx[i]; i++)
            if (strcmp(end, sfx[i]) == 0)
                f = mul[i];
        if (!f)
            return -1;
    }
    if (v > UINT64_MAX / f)
        return -1;
    *out = v * f;
    return 0;
}

static int parse_size(const char *s, uint64_t *out)
{
    static const char *const sfx[] = {"K", "M", "G", "k", "m", "g", NULL};
    static const uint64_t mul[] = {1ull << 10, 1ull << 20, 1ull << 30,
                                   1ull << 10, 1ull << 20, 1ull << 30};
    return parse_scaled(s, out, sfx, mul, 1);
}

/* A duration: "250ms", "10s", "500us"; a bare number is milliseconds. */
static int parse_dur(const char *s, uint64_t *out)
{
    static const char *const sfx[] = {"ns", "us", "ms", "s", NULL};
    static const uint64_t mul[] = {1, 1000, 1000000, 1000000000};
    return parse_scaled(s, out, sfx, mul, 1000000);
}

/* "0,2,5-7": shard indexes, each < XFER_MAX_SHARDS, no duplicates. */
static int parse_shards(const char *s, xd_config *cfg)
{
    uint64_t seen = 0;
    cfg->nshards = 0;
    while (s && *s) {
        char *end;
        unsigned long a = strtoul(s, &end, 10), b = a;
        if (end == s || a >= XFER_MAX_SHARDS)
            return -1;
        if (*end == '-') {
            const char *t = end + 1;
            b = strtoul(t, &end, 10);
            if (end == t || b < a || b >= XFER_MAX_SHARDS)
                return -1;
        }
        for (unsigned long k = a; k <= b; k++) {
            if (seen & (1ull << k))
                return -1;
            seen |= 1ull << k;
            cfg->shards[cfg->nshards++] = (uint16_t)k;
        }
        if (*end != ',' && *end != '\0')
            return -1;
        s = *end ? end + 1 : end;
    }
    return cfg->nshards ? 0 : -1;
}

static int parse_u64(const char *s, uint64_t *out, uint64_t max)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end || v > max)
        return -1;
    *out = v;
    return 0;
}

static int parse_faults(const char *s, xd_config *cfg)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    char *seed = strchr(buf, ':');
    if (seed)
        *seed++ = '\0';
    uint64_t ppm, sd = 1;
    if (parse_u64(buf, &ppm, 1000000) || (seed && parse_u64(seed, &sd, UINT64_MAX)))
        return -1;
    cfg->fault_ppm = (uint32_t)ppm;
    cfg->fault_seed = sd;
    return 0;
}

static void usage(void)
{
    printf("usage: xferd [--addr A] [--port P] [--group G] [--shards LIST]\n"
           "             [--pool SIZE] [--lease-ttl DUR] [--max-resv N]\n"
           "             [--max-tombs N]\n"
           "             [--consume] [--faults PPM[:SEED]] [--drop PPM]\n"
           "             [--drain-timeout DUR] [--port-file PATH] [--quiet]\n"
           "             [--ctl PATH]\n"
           "defaults: --addr 127.0.0.1 --port 7470 --shards 0 --pool 64M\n"
           "          --lease-ttl 10s --max-resv 4096\n");
}

static int parse_one(int c, const char *arg, opts *o)
{
    uint64_t v;
    switch (c) {
    case 'a': {
        unsigned char probe[16];
        if (evutil_inet_pton(AF_INET, arg, probe) != 1 &&
            evutil_inet_pton(AF_INET6, arg, probe) != 1)
            return bad("address (numeric IPv4/IPv6 only)", arg);
        o->cfg.addr = arg;
        return 0;
    }
    case 'p':
        if (parse_u64(arg, &v, 65535))
            return bad("port", arg);
        o->cfg.port = (uint16_t)v;
        return 0;
    case 'g':
        if (parse_u64(arg, &v, UINT32_MAX))
            return bad("group", arg);
        o->cfg.group = (uint32_t)v;
        return 0;
    case 's': return parse_shards(arg, &o->cfg) ? bad("shard list", arg) : 0;
    case 'P':
        if (parse_size(arg, &o->cfg.pool_bytes) || o->cfg.pool_bytes == 0)
            return bad("pool size", arg);
        return 0;
    case 'l':
        if (parse_dur(arg, &o->cfg.lease_ttl_ns) || !o->cfg.lease_ttl_ns)
            return bad("lease TTL", arg);
        return 0;
    case 'r':
        if (parse_u64(arg, &v, 1u << 24) || v == 0)
            return bad("reservation cap", arg);
        o->cfg.max_resv = (uint32_t)v;
        return 0;
    case 't':
        if (parse_u64(arg, &v, 1u << 30) || v == 0)
            return bad("tombstone cap", arg);
        o->cfg.max_tombs = (uint32_t)v;
        return 0;
    case 'c': o->cfg.consume = true; return 0;
    case 'f': return parse_faults(arg, &o->cfg) ? bad("fault spec", arg) : 0;
    case 'D':
        if (parse_u64(arg, &v, 1000000))
            return bad("drop rate", arg);
        o->cfg.drop_ppm = (uint32_t)v;
        return 0;
    case 'd':
        return parse_dur(arg, &o->cfg.drain_timeout_ns) ? bad("duration", arg)
                                                         : 0;
    case 'F': o->port_file = arg; return 0;
    case 'C': o->ctl_path = arg; return 0;
    case 'q': o->cfg.log = NULL; return 0;
    default: return bad("flag", arg);
    }
}

static int parse(int argc, char **argv, opts *o)
{
    static const struct option lo[] = {
        {"addr", 1, 0, 'a'},      {"port", 1, 0, 'p'},
        {"group", 1, 0, 'g'},     {"shards", 1, 0, 's'},
        {"pool", 1, 0, 'P'},      {"lease-ttl", 1, 0, 'l'},
        {"max-resv", 1, 0, 'r'},  {"consume", 0, 0, 'c'},
        {"faults", 1, 0, 'f'},    {"drain-timeout", 1, 0, 'd'},
        {"port-file", 1, 0, 'F'}, {"quiet", 0, 0, 'q'},
        {"drop", 1, 0, 'D'},      {"max-tombs", 1, 0, 't'},
        {"ctl", 1, 0, 'C'},      {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (c == 'h') {
            usage();
            exit(0);
        }
        const char *arg = c == '?' || c == ':' ? argv[optind - 1] : optarg;
        int rc = parse_one(c == ':' ? '?' : c, arg, o);
        if (rc)
            return rc;
    }
    if (optind < argc)
        return bad("argument", argv[optind]);
    return 0;
}

typedef struct sigctx {
    xd_server *srv;
    struct event_base *base;
    int terms;
} sigctx;

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    sigctx *sc = arg;
    if (sig == SIGUSR1) {
        xd_server_print_stats(sc->srv, stderr);
        return;
    }
    if (++sc->terms > 1) {
        event_base_loopbreak(sc->base);
        return;
    }
    fprintf(stderr, "xferd: draining\n");
    xd_server_drain(sc->srv);
}

static int write_port_file(const char *path, uint16_t port)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "%u\n", (unsigned)port);
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

static int serve(opts *o)
{
    struct event_base *base = event_base_new();
    xd_server *srv = NULL;
    int rc = base ? xd_server_new(base, &o->cfg, &srv) : XFER_ERR_NOMEM;
    if (rc) {
        fprintf(stderr, "xferd: cannot serve on %s:%u: %s\n", o->cfg.addr,
                (unsigned)o->cfg.port, xfer_strerror(rc));
        if (base)
            event_base_free(base);
        return 1;
    }
    if (o->ctl_path && (rc = xd_server_ctl_open(srv, o->ctl_path)) != 0) {
        fprintf(stderr, "xferd: cannot open control socket %s: %s\n",
                o->ctl_path, xfer_strerror(rc));
        xd_server_del(srv);
        event_base_free(base);
        return 1;
    }
    sigctx sc = {srv, base, 0};
    struct event *sigs[3];
    const int nums[3] = {SIGTERM, SIGINT, SIGUSR1};
    for (int i = 0; i < 3; i++) {
        sigs[i] = evsignal_new(base, nums[i], on_signal, &sc);
        evsignal_add(sigs[i], NULL);
    }
    uint16_t port = xd_server_port(srv);
    if (o->port_file && write_port_file(o->port_file, port) != 0)
        fprintf(stderr, "xferd: cannot write %s\n", o->port_file);
    printf("xferd: listening on %s:%u\n", o->cfg.addr, (unsigned)port);
    fflush(stdout);
    event_base_dispatch(base);
    xd_server_print_stats(srv, stderr);
    for (int i = 0; i < 3; i++)
        event_free(sigs[i]);
    xd_server_del(srv);
    event_base_free(base);
    return 0;
}

int main(int argc, char **argv)
{
    opts o = {.cfg = {.addr = "127.0.0.1", .port = 7470,
                      .pool_bytes = 64ull << 20,
                      .lease_ttl_ns = 10000000000ull, .max_resv = 4096,
                      .shards = {0}, .nshards = 1, .log = stderr}};
    signal(SIGPIPE, SIG_IGN);
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc;
    return serve(&o);
}
