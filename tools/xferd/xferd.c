/*
 * tools/xferd/xferd.c - the consumer daemon: hosts one or more consumer
 * shards of a group on one event loop and serves the wire protocol on TCP.
 *
 *   xferd [--addr A] [--port P] [--group G] [--shards LIST] [--pool SIZE]
 *         [--lease-ttl DUR] [--max-hold DUR] [--max-resv N] [--max-tombs N]
 *         [--consume]
 *         [--faults PPM[:SEED]] [--fault RULE]...
 *         [--drop PPM] [--drain-timeout DUR] [--port-file PATH] [--quiet]
 *         [--ctl PATH] [--shm NAME] [--trace FILE] [--take-grace DUR]
 *         [--secret-file PATH] [--insecure] [--max-sessions N]
 *         [--session-grace DUR] [--session-max-resv N]
 *         [--session-max-bytes SIZE] [--session-max-tombs N]
 *         [--hello-timeout DUR] [--header-timeout DUR] [--idle-timeout DUR]
 *         [--write-timeout DUR] [--max-conns N] [--out-max SIZE]
 *         [--rdma] [--write-min-rate SIZE] [--max-peer-sessions N]
 *         [--peer-max-resv N] [--peer-max-bytes SIZE] [--peer-max-tombs N]
 *         [--etcd URLS [--etcd-ttl SECS] [--advertise A] [--etcd-user U]
 *          [--etcd-password-file PATH] [--etcd-ca/-cert/-key PATH]]
 *
 * --etcd URLS registers every hosted shard in etcd under --group (a
 * number or a name) with a lease of --etcd-ttl seconds kept alive
 * (docs/discovery.md): producers created from the group name find it
 * there.  A drain removes the entries first; a crash leaves them to the
 * lease.
 *
 * --write-min-rate SIZE (bytes/s, default 64K): a streamed WRITE slower
 * than this over a --write-timeout window ends failed.
 * --max-peer-sessions N (default max-sessions / 16): sessions one peer
 * address may hold, those in their grace period included.
 * --peer-max-resv/-bytes/-tombs: what the sessions of one peer address
 * hold together per shard (default half of each cap).
 *
 * --secret-file PATH: peers authenticate with HELLO2's challenge-response
 * (HMAC-SHA256 under the file's bytes, 16..256; a file group or others
 * may read or write is refused, as ssh refuses such keys).  Without it only a
 * loopback address may be bound, unless --insecure; either way the
 * missing authentication is printed at start.  The session flags bound
 * what one peer session may hold per shard (docs/operating.md,
 * "Bounds and quotas").
 *
 * --rdma also serves the shards over RDMA (xfer/rdma.h): an rdmacm
 * listener on the same address and port, and a registration of its own
 * for every reservation, so producers of the RDMA transport write into the
 * pools one-sidedly (TCP producers are served as before).  Without an RDMA
 * device, or in a build without RDMA, it prints one line saying so and
 * exits 1.
 *
 * --ctl PATH opens a Unix control socket (xfer/ctl.h) answering with every
 * open reservation (`xfer-trace stuck --live PATH`), and with --etcd the
 * directory's state and registration (`xfer-trace members --ctl PATH`).
 *
 * --pool-mem host|testdev|cuda:N (issue 25; docs/gpu.md): the memory kind
 * of every pool: host (the default), the test device (xfer/testdev.h;
 * tests only: such a pool is process-local), or CUDA device memory on
 * ordinal N (cuMemAlloc through the driver, loaded at run time).  Writes
 * into a device pool land in host bounce buffers and are copied in; a
 * kind this machine does not have is one line and exit 1.  Not with
 * --shm.  --testdev-delay DUR (tests): every copy into a testdev pool
 * completes DUR late, so a test can kill the daemon mid-copy.
 *
 * --shm NAME puts shard k's pool in the POSIX shared-memory object
 * /NAME.k (xfer/shm.h), which consumer processes on the host map to read
 * taken data in place; it is unlinked at exit, and a stale one left by a
 * crashed xferd is replaced at start.  --trace FILE writes every step of
 * every hosted shard, tagged as that shard (xfer-trace merges it with the
 * producer's and the consumer's files).  The trace and --port-file are
 * created mode 0600 and never through a link (one planted there is left
 * alone and the file refused).  --take-grace DUR: how long taken
 * data of a consumer session with no connection stays taken (default 30s).
 * --metrics ADDR:PORT serves the Prometheus exposition of the shards on
 * http://ADDR:PORT/metrics (port 0: a free one, printed on stdout),
 * bounded by --metrics-max-header SIZE (8K), --metrics-max-body SIZE (1K),
 * --metrics-max-conns N (64) and --metrics-idle-timeout DUR (10s).
 *
 * --faults and --drop inject seeded faults for tests: per op, a refusal or
 * an "applied but reported failed" (PPM in a million, half each), and a
 * dropped connection (--drop).  --fault RULE (repeatable, tried in order)
 * adds a fault rule (xfer/fault.h, as the loop transport's) on the
 * producers' ops: "op=write,shard=2,action=fail",
 * "op=commit,shard=1,action=delay,ms=200", with the keys action
 * (fail|applied_lost|drop|delay), op, shard, id, count, ppm, ms and error
 * (xfer_fault_rule_parse); its probabilities draw from --faults' SEED.
 *
 * Prints "xferd: listening on ADDR:PORT" on stdout once it serves (with
 * --rdma, after "xferd: rdma on ADDR:PORT ..."; port 0
 * picks a free port; --port-file also writes it).  SIGTERM/SIGINT drain:
 * close the listener, refuse new reserves, and exit once no reservation is
 * left at all (READY data taken and released or ended by its lease), or
 * --drain-timeout after nothing was reserved or written any more (a
 * second signal exits at once).  SIGUSR1 prints a
 * stats line on stderr.  A bad flag prints one line and exits 2.
 *
 * Invariant: this file only parses flags, handles signals and provides
 * the pools; the server is the library's xfer_server (xfer/server.h).
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/util.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "xfer/ctl.h"
#include "xfer/dir.h"
#include "xfer/errors.h"
#include "xfer/metrics.h"
#include "xfer/rdma.h"
#include "xfer/server.h"
#include "xfer/shm.h"
#include "xfer/testdev.h"
#include "xfer/tracefile.h"

#include "cli.h"

/* What the flags ask for; the server config is filled from it. */
typedef struct xd_config {
    const char *addr;
    uint16_t port;
    uint32_t group;
    uint64_t pool_bytes;       /* per shard */
    uint64_t lease_ttl_ns;
    uint64_t max_hold_ns;      /* 0: the server's default (6 leases) */
    uint32_t max_resv, max_tombs;
    uint16_t shards[XFER_MAX_SHARDS];
    uint16_t nshards;
    bool consume;
    uint32_t fault_ppm, drop_ppm;
    uint64_t fault_seed;
    xfer_fault_rule rules[XFER_FAULT_MAX_RULES]; /* --fault, in order */
    uint32_t nrules;
    uint64_t drain_timeout_ns;
    uint64_t take_grace_ns;    /* 0: the server's default */
    bool quiet;
    uint8_t integrity;  /* --integrity; 0: the library default */
    /* issue 12: authentication, sessions, quotas (0: the defaults) */
    uint8_t secret[256];
    size_t secret_len;         /* 0: no --secret-file */
    bool insecure;
    uint64_t max_sessions, session_grace_ns;
    uint64_t session_resv, session_bytes, session_tombs;
    /* timeouts and caps (0: the defaults) */
    uint64_t hello_to, header_to, idle_to, write_to;
    uint64_t max_conns, out_max;
    bool rdma;                 /* --rdma */
    /* issue 24: the write rate floor, sessions per peer (0: defaults) */
    uint64_t write_min_rate, peer_sessions;
    uint64_t peer_resv, peer_bytes, peer_tombs;
} xd_config;

typedef struct opts {
    xd_config cfg;
    const char *port_file;
    const char *ctl_path;
    const char *shm;           /* --shm NAME: pools in /NAME.<shard> */
    xfer_mem pool_mem;         /* --pool-mem */
    uint64_t testdev_delay;    /* --testdev-delay */
    const char *trace;         /* --trace FILE */
    const char *metrics_addr;  /* --metrics ADDR:PORT */
    uint16_t metrics_port;
    /* --metrics-max-header, -max-body, -max-conns, -idle-timeout (0: the
     * defaults of xfer/metrics.h) */
    uint64_t m_header, m_body, m_conns, m_idle;
    /* issue 28: the directory (docs/discovery.md) */
    const char *group_name;    /* --group as given ("0" by default) */
    const char *etcd;          /* --etcd URLS: register the shards */
    const char *advertise;     /* --advertise A: the address registered */
    uint64_t etcd_ttl;         /* --etcd-ttl SECS (10) */
    const char *etcd_user, *etcd_ca, *etcd_cert, *etcd_key;
    char etcd_password[256];   /* --etcd-password-file */
    bool members;              /* --members: list and exit */
} opts;

static const cli xferd_cli;

/* The reason of a library error: the OS's own (errno, which the library
 * keeps for XFER_ERR_IO) rather than "transport i/o error".  Call it
 * before anything else can change errno. */
static const char *reason(int rc)
{
    return rc == XFER_ERR_IO && errno ? strerror(errno) : xfer_strerror(rc);
}

static int bad(const char *what, const char *arg)
{
    return cli_bad(&xferd_cli, what, arg);
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

/* "127.0.0.1:9100" or "[::1]:9100"; the address must be numeric. */
static int parse_metrics(const char *s, opts *o)
{
    static char addr[64];
    const char *colon = s ? strrchr(s, ':') : NULL;
    uint64_t port;
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof addr ||
        parse_u64(colon + 1, &port, 65535))
        return -1;
    const char *a = s;
    size_t n = (size_t)(colon - s);
    if (s[0] == '[' && colon[-1] == ']') {
        a++;
        n -= 2;
    }
    memcpy(addr, a, n);
    addr[n] = '\0';
    unsigned char probe[16];
    if (evutil_inet_pton(AF_INET, addr, probe) != 1 &&
        evutil_inet_pton(AF_INET6, addr, probe) != 1)
        return -1;
    o->metrics_addr = addr;
    o->metrics_port = (uint16_t)port;
    return 0;
}

/* Every flag, its value and its help: getopt_long's options and --help
 * are both built from this table (tools/cli.h). */
static const cli_flag flags[] = {
    {"addr", 0, "A", "numeric IPv4/IPv6 address to bind (127.0.0.1)", 'a'},
    {"port", 0, "P", "TCP port, 0: a free one (7470)", 'p'},
    {"group", 0, "G", "the group: a number, or a name ([A-Za-z0-9._-], "
     "its number is its FNV-1a hash) (0)", 'g'},
    {"shards", 0, "LIST", "shard indexes hosted, e.g. 0,2,5-7 (0)", 's'},
    {"shard", 0, "K", "the same as --shards K", 's'},
    {"etcd", 0, "URLS", "register the shards in etcd: http(s)://host:port,"
     "... (docs/discovery.md)", 1101},
    {"etcd-ttl", 0, "SECS", "lease of the registration (10)", 1102},
    {"members", 0, NULL, "with --etcd: print the group's members as etcd "
     "sees them and exit (serves nothing)", 1109},
    {"advertise", 0, "A", "address registered in etcd (--addr)", 1103},
    {"etcd-user", 0, "USER", "etcd user (password from --etcd-password-file)",
     1104},
    {"etcd-password-file", 0, "PATH", "etcd password: the file's first line",
     1105},
    {"etcd-ca", 0, "PATH", "CA file for https etcd endpoints", 1106},
    {"etcd-cert", 0, "PATH", "client certificate for etcd (PEM)", 1107},
    {"etcd-key", 0, "PATH", "client key for etcd (PEM)", 1108},
    {"pool", 0, "SIZE", "pool bytes per shard, K/M/G suffix (64M)", 'P'},
    {"lease-ttl", 0, "DUR", "reservation lease (10s)", 'l'},
    {"max-hold", 0, "DUR",
     "longest a producer's refreshes hold a reservation (6 x lease)", 'H'},
    {"max-resv", 0, "N", "reservations per shard (4096)", 'r'},
    {"max-tombs", 0, "N", "tombstones per shard (4 x max-resv)", 't'},
    {"consume", 0, NULL, "take and release every READY at once (a sink)",
     'c'},
    {"faults", 0, "PPM[:SEED]", "tests: per op, refuse or fail-after-apply",
     'f'},
    {"drop", 0, "PPM", "tests: per op, drop the connection", 'D'},
    {"drain-timeout", 0, "DUR", "drain waits this long (lease TTL)", 'd'},
    {"port-file", 0, "PATH", "write the bound port to PATH", 'F'},
    {"quiet", 0, NULL, "no log lines", 'q'},
    {"ctl", 0, "PATH",
     "Unix control socket (xfer-trace stuck --live, members --ctl)", 'C'},
    {"shm", 0, "NAME", "pools in POSIX shared memory /NAME.<shard>", 'S'},
    {"trace", 0, "FILE", "trace every step of every shard to FILE", 'T'},
    {"take-grace", 0, "DUR", "taken data of a gone session kept (30s)",
     'G'},
    {"metrics", 0, "ADDR:PORT", "Prometheus exposition on /metrics", 'M'},
    {"secret-file", 0, "PATH", "HELLO2 secret, 16..256 bytes of PATH", 'K'},
    {"insecure", 0, NULL, "allow a non-loopback address without a secret",
     'I'},
    {"max-sessions", 0, "N", "peer sessions (1024)", 1001},
    {"session-grace", 0, "DUR", "a session without a connection is kept",
     1002},
    {"session-max-resv", 0, "N", "reservations per session and shard",
     1003},
    {"session-max-bytes", 0, "SIZE", "bytes per session and shard", 1004},
    {"session-max-tombs", 0, "N", "tombstones per session and shard", 1005},
    {"hello-timeout", 0, "DUR", "close a connection without HELLO (5s)",
     1006},
    {"header-timeout", 0, "DUR", "close a frame begun, not finished (10s)",
     1007},
    {"idle-timeout", 0, "DUR", "close a connection idle this long (300s)",
     1008},
    {"write-timeout", 0, "DUR", "fail a WRITE receiving nothing (10s)",
     1009},
    {"max-conns", 0, "N", "connections (4096)", 1010},
    {"out-max", 0, "SIZE", "replies queued, all connections (64M)", 1011},
    {"rdma", 0, NULL, "also serve the shards over RDMA (rdmacm)", 'R'},
    {"fault", 0, "RULE",
     "tests, repeatable, tried in order: a fault rule on producers' ops, "
     "KEY=VALUE,...: action=fail|applied_lost|drop|delay (required), "
     "op=reserve|write|commit|cancel|eager|any, shard=N|any, id=N, "
     "count=N (fire at most N times), ppm=N (chance in a million, from "
     "--faults' SEED), ms=N (delay), error=NAME (fail, applied_lost; "
     "REMOTE); e.g. op=write,shard=2,action=fail", 1012},
    {"metrics-max-header", 0, "SIZE",
     "metrics: request line and headers (8K)", 1241},
    {"metrics-max-body", 0, "SIZE", "metrics: a request body (1K)", 1242},
    {"metrics-max-conns", 0, "N", "metrics: open connections (64)", 1243},
    {"metrics-idle-timeout", 0, "DUR",
     "metrics: close a connection idle this long (10s)", 1244},
    {"write-min-rate", 0, "SIZE",
     "a WRITE receiving less per second over a write-timeout window fails "
     "(64K)", 1024},
    {"max-peer-sessions", 0, "N", "sessions per peer address "
     "(max-sessions / 16)", 1025},
    {"peer-max-resv", 0, "N", "reservations per peer address and shard "
     "(half the cap, at least the session quota)", 1026},
    {"peer-max-bytes", 0, "SIZE", "bytes per peer address and shard "
     "(half the pool, at least the session quota)", 1027},
    {"peer-max-tombs", 0, "N", "tombstones per peer address and shard "
     "(half the cap, at least the session quota)", 1028},
    {"pool-mem", 0, "KIND", "pool memory: host, testdev, cuda:N (host)",
     1029},
    {"testdev-delay", 0, "DUR", "tests: copies into testdev pools are late",
     1030},
    {"integrity", 0, "off|shard|consumer", "CRC32C of every region checked "
     "before READY (shard), and offered to consumers that check on take "
     "(consumer: the same here) (shard)", 1031},
    CLI_HELP,
    CLI_VERSION,
    {NULL, 0, NULL, NULL, 0}};

static const cli xferd_cli = {
    .prog = "xferd",
    .summary = "the xfer shard server: hosts consumer shards of a group over TCP",
    .man_section = 8,
    .synopsis = "[flags]",
    .intro = "hosts consumer shards of a group and serves them on TCP; "
             "SIGTERM drains,\nSIGUSR1 prints stats.  DUR: 250ms, 10s, "
             "500us (bare: ms).\n",
    .flags = flags};

/* --secret-file PATH: the shared secret is the file's bytes (one
 * trailing newline dropped), never a flag's value (ps would show it).  As
 * ssh does with its keys, a file that group or others may read or write,
 * or that neither we nor root own, is refused with one line of its own
 * (returns -2); -1: unreadable, or not 16 to 256 bytes. */
static int read_secret(const char *path, xd_config *cfg)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f)
        return -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || (st.st_mode & 077) ||
        (st.st_uid != geteuid() && st.st_uid != 0)) {
        fprintf(stderr, "xferd: refusing secret file %s: mode %04o, owner "
                "uid %u: it must not be readable or writable by group or "
                "others, and be ours or root's (chmod 600 it)\n", path,
                (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
        fclose(f);
        return -2;
    }
    uint8_t buf[sizeof cfg->secret + 2];
    size_t n = fread(buf, 1, sizeof buf, f);
    int err = ferror(f);
    fclose(f);
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (err || n < 16 || n > sizeof cfg->secret)
        return -1;
    memcpy(cfg->secret, buf, n);
    memset(buf, 0, sizeof buf);
    cfg->secret_len = n;
    return 0;
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
    case 'g': {
        /* A number, or a name whose HELLO number both sides derive. */
        size_t n = strlen(arg);
        if (n == 0 || n >= XFER_DIR_GROUP_MAX ||
            strspn(arg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789._-") != n ||
            (strspn(arg, "0123456789") == n &&
             parse_u64(arg, &v, UINT32_MAX)))
            return bad("group", arg);
        o->cfg.group = xfer_dir_group_id(arg);
        o->group_name = arg;
        return 0;
    }
    case 1101: o->etcd = arg; return 0;
    case 1102:
        return parse_u64(arg, &o->etcd_ttl, 3600) || !o->etcd_ttl
                   ? bad("etcd lease TTL (seconds)", arg) : 0;
    case 1103: o->advertise = arg; return 0;
    case 1104: o->etcd_user = arg; return 0;
    case 1105: {
        FILE *f = fopen(arg, "r");
        bool ok = f && fgets(o->etcd_password, sizeof o->etcd_password, f);
        if (f)
            fclose(f);
        if (!ok)
            return bad("etcd password file", arg);
        o->etcd_password[strcspn(o->etcd_password, "\r\n")] = '\0';
        return 0;
    }
    case 1106: o->etcd_ca = arg; return 0;
    case 1107: o->etcd_cert = arg; return 0;
    case 1108: o->etcd_key = arg; return 0;
    case 1109: o->members = true; return 0;
    case 's': return parse_shards(arg, &o->cfg) ? bad("shard list", arg) : 0;
    case 'P':
        if (parse_size(arg, &o->cfg.pool_bytes) || o->cfg.pool_bytes == 0)
            return bad("pool size", arg);
        return 0;
    case 'l':
        if (parse_dur(arg, &o->cfg.lease_ttl_ns) || !o->cfg.lease_ttl_ns)
            return bad("lease TTL", arg);
        return 0;
    case 'H':
        if (parse_dur(arg, &o->cfg.max_hold_ns) || !o->cfg.max_hold_ns)
            return bad("hold cap", arg);
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
    case 'S': {
        if (!arg || !*arg || strlen(arg) > XFER_SHM_NAME_MAX ||
            strspn(arg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789_.-") != strlen(arg))
            return bad("shm name ([A-Za-z0-9_.-], at most 200)", arg);
        o->shm = arg;
        return 0;
    }
    case 'T': o->trace = arg; return 0;
    case 'M': return parse_metrics(arg, o) ? bad("metrics address "
                                                 "(ADDR:PORT)", arg)
                                           : 0;
    case 'G':
        if (parse_dur(arg, &o->cfg.take_grace_ns) || !o->cfg.take_grace_ns)
            return bad("take grace", arg);
        return 0;
    case 'q': o->cfg.quiet = true; return 0;
    case 'K': {
        int r = read_secret(arg, &o->cfg);
        return r == -2 ? 2 : r ? bad("secret file (16 to 256 bytes)", arg) : 0;
    }
    case 'I': o->cfg.insecure = true; return 0;
    case 1001:
        return parse_u64(arg, &o->cfg.max_sessions, 65535) ||
                       !o->cfg.max_sessions
                   ? bad("session cap", arg)
                   : 0;
    case 1002:
        return parse_dur(arg, &o->cfg.session_grace_ns)
                   ? bad("session grace", arg)
                   : 0;
    case 1003:
        return parse_u64(arg, &o->cfg.session_resv, 1u << 24)
                   ? bad("session reservation quota", arg)
                   : 0;
    case 1004:
        return parse_size(arg, &o->cfg.session_bytes)
                   ? bad("session byte quota", arg)
                   : 0;
    case 1005:
        return parse_u64(arg, &o->cfg.session_tombs, 1u << 30)
                   ? bad("session tombstone quota", arg)
                   : 0;
    case 1006: return parse_dur(arg, &o->cfg.hello_to) || !o->cfg.hello_to
                          ? bad("HELLO timeout", arg) : 0;
    case 1007: return parse_dur(arg, &o->cfg.header_to) || !o->cfg.header_to
                          ? bad("header timeout", arg) : 0;
    case 1008: return parse_dur(arg, &o->cfg.idle_to) || !o->cfg.idle_to
                          ? bad("idle timeout", arg) : 0;
    case 1009: return parse_dur(arg, &o->cfg.write_to) || !o->cfg.write_to
                          ? bad("write timeout", arg) : 0;
    case 1010:
        return parse_u64(arg, &o->cfg.max_conns, UINT32_MAX) ||
                       !o->cfg.max_conns
                   ? bad("connection cap", arg)
                   : 0;
    case 1011: return parse_size(arg, &o->cfg.out_max) || !o->cfg.out_max
                          ? bad("output cap", arg) : 0;
    case 'R': o->cfg.rdma = true; return 0;
    case 1012:
        if (o->cfg.nrules == XFER_FAULT_MAX_RULES)
            return bad("fault rule (at most 64)", arg);
        return xfer_fault_rule_parse(arg, &o->cfg.rules[o->cfg.nrules++],
                                     NULL)
                   ? bad("fault rule", arg)
                   : 0;
    case 1241: return parse_size(arg, &o->m_header) || !o->m_header ||
                          o->m_header > UINT32_MAX
                          ? bad("metrics header cap", arg) : 0;
    case 1242: return parse_size(arg, &o->m_body) || !o->m_body ||
                          o->m_body > UINT32_MAX
                          ? bad("metrics body cap", arg) : 0;
    case 1243: return parse_u64(arg, &o->m_conns, UINT32_MAX) || !o->m_conns
                          ? bad("metrics connection cap", arg) : 0;
    case 1244: return parse_dur(arg, &o->m_idle) || !o->m_idle
                          ? bad("metrics idle timeout", arg) : 0;
    case 1024: return parse_size(arg, &o->cfg.write_min_rate) ||
                          !o->cfg.write_min_rate
                          ? bad("write rate floor (bytes/s)", arg) : 0;
    case 1025:
        return parse_u64(arg, &o->cfg.peer_sessions, 65535) ||
                       !o->cfg.peer_sessions
                   ? bad("sessions per peer", arg)
                   : 0;
    case 1026:
        return parse_u64(arg, &o->cfg.peer_resv, 1u << 24)
                   ? bad("peer reservation quota", arg)
                   : 0;
    case 1027:
        return parse_size(arg, &o->cfg.peer_bytes)
                   ? bad("peer byte quota", arg)
                   : 0;
    case 1028:
        return parse_u64(arg, &o->cfg.peer_tombs, 1u << 30)
                   ? bad("peer tombstone quota", arg)
                   : 0;
    case 1029:
        return xfer_mem_parse(arg, &o->pool_mem)
                   ? bad("pool memory kind (host, testdev, cuda:N)", arg)
                   : 0;
    case 1030:
        return parse_dur(arg, &o->testdev_delay) ? bad("duration", arg) : 0;
    case 1031:
        for (unsigned m = XFER_INTEGRITY_OFF; m < XFER_INTEGRITY_COUNT_; m++)
            if (!strcmp(arg, xfer_integrity_name(m))) {
                o->cfg.integrity = (uint8_t)m;
                return 0;
            }
        return bad("integrity mode (off, shard or consumer)", arg);
    default: return bad("flag", arg);
    }
}

static int parse(int argc, char **argv, opts *o)
{
    const char *arg;
    int c;
    while ((c = cli_next(&xferd_cli, argc, argv, &arg)) != CLI_END) {
        if (c == CLI_ERR)
            return 2;
        int rc = parse_one(c, arg, o);
        if (rc)
            return rc;
    }
    if (optind < argc)
        return bad("argument", argv[optind]);
    return 0;
}

typedef struct xferd {
    opts *o;
    struct event_base *base;
    xfer_server *srv;
    xfer_ctl *ctl;
    void *mem[XFER_MAX_SHARDS];     /* the pools, one per shard */
    xfer_shm *shm[XFER_MAX_SHARDS]; /* --shm: the objects holding them */
    xfer_tracefile *tf;             /* --trace */
    xfer_metrics *metrics;          /* --metrics */
    struct event *flush_ev;         /* flushes the trace 10 times a second */
    struct event *empty_ev;         /* after the drain: waits for empty */
    xfer_dir *dir;                  /* --etcd: the server's directory
                                       client (xfer_server_dir) */
    uint64_t empty_deadline;
    int terms;
} xferd;

static void print_stats(const xferd *d, FILE *f)
{
    for (int i = -1; i < (int)xfer_server_nshards(d->srv); i++) {
        uint16_t idx = i < 0 ? XFER_SHARD_NONE
                             : xfer_server_shard_index(d->srv, (uint16_t)i);
        xfer_server_stats st;
        if (xfer_server_stats_get(d->srv, idx, &st) != 0)
            continue;
        if (i < 0)
            fprintf(f, "xferd stats: all");
        else
            fprintf(f, "xferd stats: shard=%u", (unsigned)idx);
        fprintf(f,
                " pool=%" PRIu64 " in_use=%" PRIu64 " live=%" PRIu64
                " tombstones=%" PRIu64 " reserves=%" PRIu64
                " refused=%" PRIu64 " writes=%" PRIu64 " commits=%" PRIu64
                " cancels=%" PRIu64 " expiries=%" PRIu64 " events=%" PRIu64
                " conns=%u bad_frames=%" PRIu64 " errors_sent=%" PRIu64
                " faults=%" PRIu64 " subs_dropped=%" PRIu64 "\n",
                st.pool_bytes, st.bytes_in_use, st.live, st.tombstones,
                st.reserves, st.refused, st.writes, st.commits, st.cancels,
                st.expiries, st.events_sent, st.conns, st.bad_frames,
                st.errors_sent, st.faults, st.subs_dropped);
    }
    fflush(f);
}

static void log_line(void *ud, const char *line)
{
    fprintf(stderr, "xferd: %s\n", line);
    fflush(stderr);
}

/* Nothing is reserved or written any more: wait until READY and TAKEN
 * data are gone too (taken and released, or ended by lease or grace:
 * subscribers get those events), or drain-timeout more passed; then let
 * the last replies go out and leave the loop. */
static void on_empty_tick(evutil_socket_t fd, short what, void *ud)
{
    xferd *d = ud;
    uint64_t now = xfer_clock_monotonic(NULL);
    if (!xfer_server_empty(d->srv) && now < d->empty_deadline)
        return;
    event_del(d->empty_ev);
    struct timeval flush = {0, 100000};
    event_base_loopexit(d->base, &flush);
}

static void drained(void *ud, bool clean)
{
    xferd *d = ud;
    const xd_config *c = &d->o->cfg;
    d->empty_deadline = xfer_clock_monotonic(NULL) +
                        (c->drain_timeout_ns ? c->drain_timeout_ns
                                             : c->lease_ttl_ns);
    d->empty_ev = event_new(d->base, -1, EV_PERSIST, on_empty_tick, d);
    struct timeval tick = {0, 20000};
    if (!d->empty_ev || event_add(d->empty_ev, &tick) != 0) {
        struct timeval flush = {0, 100000};
        event_base_loopexit(d->base, &flush);
    }
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    xferd *d = arg;
    if (sig == SIGUSR1) {
        print_stats(d, stderr);
        return;
    }
    if (++d->terms > 1) {
        event_base_loopbreak(d->base);
        return;
    }
    fprintf(stderr, "xferd: draining\n");
    /* Registered (--etcd): the server leaves its group first, so
     * producers stop sending here before the listener closes. */
    xfer_server_drain(d->srv, drained, d);
}

/* --port-file PATH: a temporary file beside it (mkstemp: O_EXCL, 0600,
 * never through a link) renamed over PATH; rename replaces the name and
 * never follows it.  A PATH that holds anything but a regular file of
 * ours (a link planted there, another user's file) is left alone: -1,
 * errno EEXIST. */
static int write_port_file(const char *path, uint16_t port)
{
    struct stat st;
    if (lstat(path, &st) == 0 &&
        (!S_ISREG(st.st_mode) || st.st_uid != geteuid())) {
        errno = EEXIST;
        return -1;
    }
    char tmp[4096], line[16];
    if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int)sizeof tmp)
        return -1;
    int fd = mkstemp(tmp);
    if (fd < 0)
        return -1;
    int n = snprintf(line, sizeof line, "%u\n", (unsigned)port);
    int rc = write(fd, line, (size_t)n) == n ? 0 : -1;
    if (close(fd) != 0)
        rc = -1;
    if (!rc)
        rc = rename(tmp, path);
    if (rc)
        unlink(tmp);
    return rc;
}

/* Device pools (--pool-mem): the test device's allocator, or cuMemAlloc
 * through the CUDA driver, loaded here as the library loads it (dlopen,
 * never linked: an xferd without CUDA still starts). */
static struct {
    void *h;
    int (*alloc)(unsigned long long *p, size_t n);
    int (*free)(unsigned long long p);
} cu;

static int cuda_load(int ordinal)
{
    if (cu.h)
        return 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return -1;
    int (*init)(unsigned) = NULL, (*get)(int *, int) = NULL;
    int (*retain)(void **, int) = NULL, (*cur)(void *) = NULL;
    *(void **)&init = dlsym(h, "cuInit");
    *(void **)&get = dlsym(h, "cuDeviceGet");
    *(void **)&retain = dlsym(h, "cuDevicePrimaryCtxRetain");
    *(void **)&cur = dlsym(h, "cuCtxSetCurrent");
    *(void **)&cu.alloc = dlsym(h, "cuMemAlloc_v2");
    *(void **)&cu.free = dlsym(h, "cuMemFree_v2");
    int dev = 0;
    void *ctx = NULL;
    if (!init || !get || !retain || !cur || !cu.alloc || !cu.free ||
        init(0) != 0 || get(&dev, ordinal) != 0 || retain(&ctx, dev) != 0 ||
        cur(ctx) != 0)
        return -1;
    cu.h = h;
    return 0;
}

static void dev_free(xfer_mem m, void *p)
{
    if (!p)
        return;
    if (m.kind == XFER_MEM_TESTDEV)
        xfer_testdev_free(p);
    else if (cu.h)
        cu.free((unsigned long long)(uintptr_t)p);
}

static int make_dev_pools(xferd *d, size_t len)
{
    const xd_config *c = &d->o->cfg;
    xfer_mem m = d->o->pool_mem;
    if (d->o->shm) {
        fprintf(stderr, "xferd: --pool-mem %s cannot be shared memory "
                "(--shm)\n", xfer_mem_kind_name(m.kind));
        return XFER_ERR_INVALID_ARG;
    }
    if (xfer_mem_available(m) != 0 ||
        (m.kind == XFER_MEM_CUDA && cuda_load(m.device) != 0)) {
        fprintf(stderr, "xferd: --pool-mem %s:%d: not available on this "
                "machine or in this build\n", xfer_mem_kind_name(m.kind),
                (int)m.device);
        return XFER_ERR_NOT_SUPPORTED;
    }
    if (m.kind == XFER_MEM_TESTDEV && d->o->testdev_delay) {
        xfer_testdev_rule r = {.dir = XFER_TESTDEV_H2D,
                               .delay_ns = d->o->testdev_delay};
        xfer_testdev_add_rule(&r);
    }
    for (uint16_t i = 0; i < c->nshards; i++) {
        int rc = XFER_ERR_NOMEM;
        if (m.kind == XFER_MEM_TESTDEV) {
            rc = xfer_testdev_alloc(len, &d->mem[i]);
        } else {
            unsigned long long p = 0;
            if (cu.alloc(&p, len) == 0) {
                d->mem[i] = (void *)(uintptr_t)p;
                rc = 0;
            }
        }
        if (rc) {
            fprintf(stderr, "xferd: cannot allocate %" PRIu64
                    " bytes of %s memory per shard\n", c->pool_bytes,
                    xfer_mem_kind_name(m.kind));
            return rc;
        }
    }
    return 0;
}

/* The pools: with --shm, one POSIX shared-memory object per shard
 * (xfer/shm.h: created here, a stale one of a crashed run replaced,
 * unlinked at exit); else page-aligned private memory.  Either way faulted
 * in now, as a registered (pinned) pool would be, so no write pays for
 * first-touch page faults. */
static int make_pools(xferd *d)
{
    const xd_config *c = &d->o->cfg;
    size_t len = (size_t)((c->pool_bytes + 4095) & ~(uint64_t)4095);
    if (d->o->pool_mem.kind != XFER_MEM_HOST)
        return make_dev_pools(d, len);
    for (uint16_t i = 0; i < c->nshards; i++) {
        if (d->o->shm) {
            int rc = xfer_shm_create(d->o->shm, c->shards[i], c->pool_bytes,
                                     NULL, &d->shm[i]);
            if (rc == XFER_ERR_PERM) { /* Linux: shm objects live there */
                char dev[XFER_SHM_NAME_MAX + 32];
                struct stat st;
                snprintf(dev, sizeof dev, "/dev/shm/%s.%u", d->o->shm,
                         (unsigned)c->shards[i]);
                if (lstat(dev, &st) != 0)
                    st.st_uid = (uid_t)-1;
                fprintf(stderr, "xferd: cannot create shared memory /%s.%u:"
                        " the name is held by uid %d, not by us (uid %u): "
                        "never used or replaced; remove it or choose another"
                        " --shm name\n", d->o->shm, (unsigned)c->shards[i],
                        (int)st.st_uid, (unsigned)geteuid());
                return rc;
            }
            if (rc) {
                fprintf(stderr, "xferd: cannot create shared memory /%s.%u:"
                        " %s\n", d->o->shm, (unsigned)c->shards[i],
                        rc == XFER_ERR_EXISTS
                            ? "another live xferd serves it"
                            : xfer_strerror(rc));
                return rc;
            }
            d->mem[i] = xfer_shm_pool(d->shm[i]);
            continue;
        }
        void *p = aligned_alloc(4096, len);
        if (!p) {
            fprintf(stderr, "xferd: cannot allocate %" PRIu64
                    " bytes per shard\n", c->pool_bytes);
            return XFER_ERR_NOMEM;
        }
        d->mem[i] = p;
        memset(p, 0, len);
    }
    return 0;
}

static void free_pools(xferd *d)
{
    for (uint16_t i = 0; i < XFER_MAX_SHARDS; i++) {
        if (d->shm[i])
            xfer_shm_close(d->shm[i]);
        else if (d->o->pool_mem.kind == XFER_MEM_HOST)
            free(d->mem[i]);
        else
            dev_free(d->o->pool_mem, d->mem[i]);
    }
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    xfer_tracefile_flush(arg);
}

/* --trace FILE: one file for every hosted shard, each tagged as its shard
 * (XFER_TRACE_SRC_SHARD), flushed often so a kill -9 loses little.  The
 * label names the shards ("xferd shards 0,1"), so xfer-trace knows whose
 * trace it is even when nothing reached them. */
static int open_trace(xferd *d)
{
    char label[32];
    size_t at = (size_t)snprintf(label, sizeof label, "xferd shards ");
    for (uint16_t i = 0; i < d->o->cfg.nshards && at < sizeof label; i++)
        at += (size_t)snprintf(label + at, sizeof label - at, "%s%u",
                               i ? "," : "", (unsigned)d->o->cfg.shards[i]);
    xfer_tracefile_opts to;
    xfer_tracefile_opts_default(&to);
    to.format = XFER_TRACEFILE_BINARY;
    to.label = label;
    errno = 0;
    int rc = xfer_tracefile_open(d->o->trace, &to, &d->tf);
    if (rc) {
        fprintf(stderr, "xferd: cannot open trace %s: %s\n", d->o->trace,
                rc == XFER_ERR_PERM ? "something other than a regular file "
                                      "of ours is there (a link?), left "
                                      "alone"
                                    : reason(rc));
        return rc;
    }
    xfer_tracefile_flush(d->tf); /* the header, so the file says whose */
    d->flush_ev = event_new(d->base, -1, EV_PERSIST, on_flush, d->tf);
    struct timeval tv = {0, 100000};
    if (!d->flush_ev || event_add(d->flush_ev, &tv) != 0)
        return XFER_ERR_NOMEM;
    return 0;
}

static int start_server(xferd *d)
{
    const xd_config *c = &d->o->cfg;
    xfer_server_shard sh[XFER_MAX_SHARDS];
    for (uint16_t i = 0; i < c->nshards; i++)
        sh[i] = (xfer_server_shard){
            .index = c->shards[i], .base = d->mem[i], .len = c->pool_bytes,
            .trace = xfer_tracefile_sink_tagged(
                d->tf, (uint8_t)XFER_TRACE_SRC_SHARD(c->shards[i]))};
    xfer_server_config sc;
    xfer_server_config_default(&sc);
    sc.base = d->base;
    sc.addr = c->addr;
    sc.port = c->port;
    sc.group = c->group;
    sc.nshards = c->nshards;
    sc.shards = sh;
    sc.max_reservations = c->max_resv;
    sc.max_tombstones = c->max_tombs ? c->max_tombs : 4 * c->max_resv;
    sc.lease_ttl_ns = c->lease_ttl_ns;
    sc.max_hold_ns = c->max_hold_ns;
    sc.tombstone_ttl_ns = 2 * c->lease_ttl_ns;
    sc.drain_timeout_ns = c->drain_timeout_ns ? c->drain_timeout_ns
                                              : c->lease_ttl_ns;
    sc.take_grace_ns = c->take_grace_ns;
    sc.consume = c->consume;
    xfer_mem mems[XFER_MAX_SHARDS];
    for (uint16_t i = 0; i < c->nshards; i++)
        mems[i] = d->o->pool_mem;
    sc.shard_mem = mems;
    sc.integrity = c->integrity;
    sc.fault_ppm = c->fault_ppm;
    sc.drop_ppm = c->drop_ppm;
    sc.fault_seed = c->fault_seed;
    sc.log = c->quiet ? NULL : log_line;
    sc.secret = c->secret_len ? c->secret : NULL;
    sc.secret_len = c->secret_len;
    sc.insecure = c->insecure;
    sc.max_sessions = (uint16_t)c->max_sessions;
    sc.session_grace_ns = c->session_grace_ns;
    sc.session_max_reservations = (uint32_t)c->session_resv;
    sc.session_max_bytes = c->session_bytes;
    sc.session_max_tombstones = (uint32_t)c->session_tombs;
    sc.hello_timeout_ns = c->hello_to;
    sc.header_timeout_ns = c->header_to;
    sc.idle_timeout_ns = c->idle_to;
    sc.write_timeout_ns = c->write_to;
    sc.max_conns = (uint32_t)c->max_conns;
    sc.out_max_bytes = c->out_max;
    sc.write_min_rate = c->write_min_rate;
    sc.max_peer_sessions = (uint16_t)c->peer_sessions;
    sc.peer_max_reservations = (uint32_t)c->peer_resv;
    sc.peer_max_bytes = c->peer_bytes;
    sc.peer_max_tombstones = (uint32_t)c->peer_tombs;
    int rc = c->rdma ? xfer_server_new_rdma(&sc, NULL, &d->srv)
                     : xfer_server_new(&sc, &d->srv);
    for (uint32_t i = 0; rc == 0 && i < c->nrules; i++)
        rc = xfer_server_add_rule(d->srv, &c->rules[i]);
    return rc;
}

/* --metrics ADDR:PORT: the server's Prometheus exposition on /metrics. */
static int start_metrics(xferd *d)
{
    xfer_metrics_config mc;
    xfer_metrics_config_default(&mc);
    mc.base = d->base;
    errno = 0;
    mc.max_header_bytes = (uint32_t)d->o->m_header;
    mc.max_body_bytes = (uint32_t)d->o->m_body;
    mc.max_conns = (uint32_t)d->o->m_conns;
    mc.idle_timeout_ns = d->o->m_idle;
    int rc = xfer_metrics_new(&mc, &d->metrics);
    if (!rc)
        rc = xfer_metrics_add_server(d->metrics, d->srv);
    if (!rc && d->dir)
        rc = xfer_metrics_add_dir(d->metrics, d->dir);
    if (!rc)
        rc = xfer_metrics_listen(d->metrics, d->o->metrics_addr,
                                 d->o->metrics_port);
    if (rc) {
        fprintf(stderr, "xferd: cannot serve metrics on %s:%u: %s\n",
                d->o->metrics_addr, (unsigned)d->o->metrics_port,
                reason(rc));
        return rc;
    }
    printf("xferd: metrics on http://%s:%u/metrics\n", d->o->metrics_addr,
           (unsigned)xfer_metrics_port(d->metrics));
    return 0;
}

static int start_dir(xferd *d);

static int setup(xferd *d)
{
    const opts *o = d->o;
    char why[160];
    if (o->cfg.rdma && xfer_rdma_probe(why, sizeof why) != 0) {
        fprintf(stderr, "xferd: --rdma: %s\n", why);
        return XFER_ERR_NOT_SUPPORTED;
    }
    int rc = make_pools(d);
    if (rc)
        return rc;
    d->base = event_base_new();
    if (!d->base)
        return XFER_ERR_NOMEM;
    if (o->trace && (rc = open_trace(d)) != 0)
        return rc;
    errno = 0;
    rc = start_server(d);
    if (rc == XFER_ERR_AUTH) {
        fprintf(stderr, "xferd: refusing to serve %s without --secret-file "
                "(peers could not be authenticated; --insecure to allow)\n",
                o->cfg.addr);
        return rc;
    }
    if (rc) {
        fprintf(stderr, "xferd: cannot serve on %s:%u: %s\n", o->cfg.addr,
                (unsigned)o->cfg.port, reason(rc));
        return rc;
    }
    errno = 0;
    if (o->ctl_path &&
        (rc = xfer_server_ctl_open(d->srv, o->ctl_path, &d->ctl)) != 0) {
        fprintf(stderr, "xferd: cannot open control socket %s: %s\n",
                o->ctl_path, rc == XFER_ERR_EXISTS
                                 ? "a file that is not a socket is there"
                                 : reason(rc));
        return rc;
    }
    if (o->etcd && (rc = start_dir(d)) != 0)
        return rc;
    if (d->dir && d->ctl)
        xfer_ctl_set_dir(d->ctl, d->dir); /* xfer-trace members --ctl */
    return o->metrics_addr ? start_metrics(d) : 0;
}

/* --etcd: one entry per hosted shard under one lease, registered by the
 * server itself (xfer_server_register).  The epoch is the start time in
 * microseconds (CLOCK_REALTIME): it grows at every start without a round
 * trip to etcd before serving, and only a clock stepped back between two
 * starts could make it shrink.  The address is --advertise, else --addr
 * as given (a wildcard too: the operator's choice). */
static void dir_config(const opts *o, xfer_dir_config *dc);

static int start_dir(xferd *d)
{
    const opts *o = d->o;
    xfer_dir_config dc;
    dir_config(o, &dc);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t epoch =
        (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000;
    const char *group = o->group_name ? o->group_name : "0";
    int rc = xfer_server_register(d->srv, &dc, group,
                                  o->advertise ? o->advertise : o->cfg.addr,
                                  epoch);
    if (rc)
        fprintf(stderr, "xferd: --etcd %s: cannot register in etcd: %s\n",
                o->etcd, xfer_strerror(rc));
    else
        printf("xferd: registering group %s in etcd (epoch %llu)\n", group,
               (unsigned long long)epoch);
    d->dir = xfer_server_dir(d->srv);
    return rc;
}

static void teardown(xferd *d)
{
    if (d->ctl)
        xfer_ctl_set_dir(d->ctl, NULL); /* the ctl borrows the server's dir */
    xfer_metrics_del(d->metrics); /* before the server: it reads d->dir */
    xfer_ctl_close(d->ctl);
    xfer_server_del(d->srv);
    if (d->flush_ev)
        event_free(d->flush_ev);
    if (d->empty_ev)
        event_free(d->empty_ev);
    if (d->base)
        event_base_free(d->base);
    if (xfer_tracefile_close(d->tf) != 0)
        fprintf(stderr, "xferd: writing the trace %s failed\n", d->o->trace);
    free_pools(d);
}

static void dir_config(const opts *o, xfer_dir_config *dc)
{
    xfer_dir_config_default(dc);
    dc->endpoints = o->etcd;
    dc->lease_ttl_s = o->etcd_ttl ? (uint32_t)o->etcd_ttl : 10;
    dc->user = o->etcd_user;
    dc->password = o->etcd_password[0] ? o->etcd_password : NULL;
    dc->ca_file = o->etcd_ca;
    dc->cert_file = o->etcd_cert;
    dc->key_file = o->etcd_key;
    dc->log = o->cfg.quiet ? NULL : log_line;
}

static void member_seen(void *ud, const char *group, uint16_t shard,
                        const xfer_dir_entry *e)
{
}

/* --members: the group as etcd sees it now (what a producer created from
 * the group name would use), one line per member; exit 1 when etcd did
 * not answer within 5 s. */
static int list_members(const opts *o)
{
    const char *group = o->group_name ? o->group_name : "0";
    struct event_base *base = event_base_new();
    xfer_dir_config dc;
    dir_config(o, &dc);
    xfer_dir *dir = NULL;
    int rc = base ? xfer_dir_new(base, &dc, &dir) : XFER_ERR_NOMEM;
    if (!rc)
        rc = xfer_dir_watch(dir, group, member_seen, NULL);
    xfer_dir_state st = {0};
    for (int i = 0; rc == 0 && i < 100 && st.revision == 0; i++) {
        struct timeval tv = {0, 50000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
        xfer_dir_state_get(dir, &st);
    }
    int status = 1;
    if (rc || st.revision == 0) {
        fprintf(stderr, "xferd: --members: etcd at %s did not answer\n",
                o->etcd);
        goto out;
    }
    printf("group %s (hello group %u) at etcd revision %lld: %u member%s\n",
           group, (unsigned)xfer_dir_group_id(group), (long long)st.revision,
           (unsigned)st.members, st.members == 1 ? "" : "s");
    for (uint16_t k = 0; k < 64; k++) {
        xfer_dir_entry e;
        if (xfer_dir_member(dir, group, k, &e) != 0)
            continue;
        printf("shard %u %s:%u transports%s%s epoch %llu\n", (unsigned)k,
               e.addr, (unsigned)e.port,
               e.transports & XFER_DIR_TCP ? " tcp" : "",
               e.transports & XFER_DIR_RDMA ? " rdma" : "",
               (unsigned long long)e.epoch);
    }
    status = 0;
out:
    xfer_dir_del(dir);
    if (base)
        event_base_free(base);
    return status;
}

static int serve(opts *o)
{
    xferd d = {.o = o};
    int status = 1;
    if (setup(&d) != 0)
        goto out;
    struct event *sigs[3];
    const int nums[3] = {SIGTERM, SIGINT, SIGUSR1};
    for (int i = 0; i < 3; i++) {
        sigs[i] = evsignal_new(d.base, nums[i], on_signal, &d);
        evsignal_add(sigs[i], NULL);
    }
    uint16_t port = xfer_server_port(d.srv);
    if (o->port_file && write_port_file(o->port_file, port) != 0)
        fprintf(stderr, "xferd: cannot write %s: %s\n", o->port_file,
                errno == EEXIST ? "not a regular file of ours, left alone"
                                : strerror(errno));
    if (!o->cfg.secret_len)
        fprintf(stderr, "xferd: INSECURE: no --secret-file, peers are not "
               "authenticated%s\n",
               o->cfg.insecure ? " (--insecure)" : " (loopback only)");
    if (o->cfg.rdma)
        printf("xferd: rdma on %s:%u (rdmacm; per-reservation rkeys via "
               "%s)\n",
               o->cfg.addr, (unsigned)xfer_server_rdma_port(d.srv),
               xfer_server_rdma_windows(d.srv)
                   ? "type-2 memory windows"
                   : "registrations: device has no type-2 windows");
    printf("xferd: listening on %s:%u\n", o->cfg.addr, (unsigned)port);
    fflush(stdout);
    event_base_dispatch(d.base);
    print_stats(&d, stderr);
    for (int i = 0; i < 3; i++)
        event_free(sigs[i]);
    status = 0;
out:
    teardown(&d);
    return status;
}

int main(int argc, char **argv)
{
    opts o = {.cfg = {.addr = "127.0.0.1", .port = 7470,
                      .pool_bytes = 64ull << 20,
                      .lease_ttl_ns = 10000000000ull, .max_resv = 4096,
                      .shards = {0}, .nshards = 1}};
    signal(SIGPIPE, SIG_IGN);
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc;
    if (o.members) {
        if (!o.etcd)
            return bad("--members without --etcd", "--members");
        return list_members(&o);
    }
    return serve(&o);
}
