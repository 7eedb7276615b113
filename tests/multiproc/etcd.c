/*
 * tests/multiproc/etcd.c - a real etcd for the directory tests (etcd.h).
 * Ports are found by binding port 0 and letting it go (a port taken in
 * between makes etcd exit, and the start fails visibly, not silently).
 */
#define _GNU_SOURCE
#include "etcd.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mp.h"

const char *etcd_binary(void)
{
    static char found[512];
    const char *env = getenv("ETCD");
    if (env && *env)
        return access(env, X_OK) == 0 ? env : NULL;
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s:/usr/bin:/usr/sbin", path ? path : "");
    char *save = NULL;
    for (char *p = strtok_r(buf, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
        snprintf(found, sizeof found, "%s/etcd", p);
        if (access(found, X_OK) == 0)
            return found;
    }
    return NULL;
}

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    uint16_t port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void cluster_arg(const etcd_cluster *c, char *out, size_t cap)
{
    size_t o = 0;
    for (int i = 0; i < c->n; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%s=http://127.0.0.1:%u",
                              i ? "," : "", c->m[i].name,
                              (unsigned)c->m[i].peer_port);
}

static int spawn(etcd_cluster *c, int i)
{
    etcd_member *m = &c->m[i];
    char data[256], cl[128], pl[128], cluster[512], log[256];
    char cert[200], key[200];
    snprintf(data, sizeof data, "%s/%s", c->dir, m->name);
    snprintf(log, sizeof log, "%s/%s.log", c->dir, m->name);
    snprintf(cert, sizeof cert, "%s/srv.pem", c->dir);
    snprintf(key, sizeof key, "%s/srv.key", c->dir);
    snprintf(cl, sizeof cl, "%s://127.0.0.1:%u", c->tls_ca[0] ? "https" : "http",
             (unsigned)m->client_port);
    snprintf(pl, sizeof pl, "http://127.0.0.1:%u", (unsigned)m->peer_port);
    cluster_arg(c, cluster, sizeof cluster);
    const char *bin = etcd_binary();
    if (!bin)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(bin, "etcd", "--name", m->name, "--data-dir", data,
              "--listen-client-urls", cl, "--advertise-client-urls", cl,
              "--listen-peer-urls", pl, "--initial-advertise-peer-urls", pl,
              "--initial-cluster", cluster, "--initial-cluster-token",
              "xfer-test", "--initial-cluster-state", "new",
              "--heartbeat-interval", "50", "--election-timeout", "500",
              "--experimental-watch-progress-notify-interval", "500ms",
              "--log-level", "warn",
              c->tls_ca[0] ? "--cert-file" : (char *)NULL, cert,
              "--key-file", key, (char *)NULL);
        _exit(127);
    }
    mp_track(pid);
    m->pid = pid;
    return 0;
}

int etcd_wait_up(const etcd_cluster *c, int i, int timeout_ms)
{
    char out[512];
    for (uint64_t end = mp_now_ms() + (uint64_t)timeout_ms;
         mp_now_ms() < end;) {
        /* A put is answered only once the member has a leader. */
        if (etcd_post(c, i, "/v3/kv/range", "{\"key\":\"AA==\"}", out,
                      sizeof out) == 200 &&
            strstr(out, "\"revision\""))
            return 0;
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* A TCP connect to member i's client port answers (TLS members). */
static int port_open(const etcd_cluster *c, int i, int timeout_ms)
{
    for (uint64_t end = mp_now_ms() + (uint64_t)timeout_ms;
         mp_now_ms() < end;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons(c->m[i].client_port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
        if (fd >= 0)
            close(fd);
        if (ok)
            return 0;
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

int etcd_start_tls(etcd_cluster *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "/tmp/xfer-etcd-XXXXXX");
    if (!mkdtemp(c->dir))
        return -1;
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && openssl req -x509 -newkey rsa:2048 -nodes -keyout "
             "ca.key -out ca.pem -days 2 -subj /CN=xfer-test-ca && "
             "openssl req -newkey rsa:2048 -nodes -keyout srv.key -out "
             "srv.csr -subj /CN=127.0.0.1 && printf 'subjectAltName=IP:"
             "127.0.0.1\\n' > ext && openssl x509 -req -in srv.csr -CA "
             "ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 "
             "-extfile ext",
             c->dir);
    char quiet[2100];
    snprintf(quiet, sizeof quiet, "(%s) >/dev/null 2>&1", cmd);
    if (system(quiet) != 0)
        return -1;
    snprintf(c->tls_ca, sizeof c->tls_ca, "%s/ca.pem", c->dir);
    c->n = 1;
    snprintf(c->m[0].name, sizeof c->m[0].name, "m0");
    c->m[0].client_port = free_port();
    c->m[0].peer_port = free_port();
    snprintf(c->endpoints, sizeof c->endpoints, "https://127.0.0.1:%u",
             (unsigned)c->m[0].client_port);
    if (spawn(c, 0) != 0 || port_open(c, 0, 20000) != 0)
        return -1;
    /* Open before it has a leader: give it the time one election takes. */
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    return 0;
}

int etcd_start(etcd_cluster *c, int n)
{
    memset(c, 0, sizeof *c);
    if (n < 1 || n > ETCD_MAX_MEMBERS)
        return -1;
    snprintf(c->dir, sizeof c->dir, "/tmp/xfer-etcd-XXXXXX");
    if (!mkdtemp(c->dir))
        return -1;
    c->n = n;
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        snprintf(c->m[i].name, sizeof c->m[i].name, "m%d", i);
        c->m[i].client_port = free_port();
        c->m[i].peer_port = free_port();
        o += (size_t)snprintf(c->endpoints + o, sizeof c->endpoints - o,
                              "%shttp://127.0.0.1:%u", i ? "," : "",
                              (unsigned)c->m[i].client_port);
    }
    for (int i = 0; i < n; i++)
        if (spawn(c, i) != 0)
            return -1;
    for (int i = 0; i < n; i++)
        if (etcd_wait_up(c, i, 20000) != 0)
            return -1;
    return 0;
}

void etcd_signal(etcd_cluster *c, int i, int sig)
{
    if (c->m[i].pid <= 0)
        return;
    kill(c->m[i].pid, sig);
    if (sig == SIGKILL || sig == SIGTERM) {
        waitpid(c->m[i].pid, NULL, 0);
        c->m[i].pid = 0;
    }
}

int etcd_restart(etcd_cluster *c, int i)
{
    char data[256];
    snprintf(data, sizeof data, "%s/%s", c->dir, c->m[i].name);
    if (c->m[i].pid > 0)
        etcd_signal(c, i, SIGKILL);
    return spawn(c, i);
}

void etcd_stop(etcd_cluster *c)
{
    for (int i = 0; i < c->n; i++) {
        if (c->m[i].pid > 0) {
            kill(c->m[i].pid, SIGCONT);
            etcd_signal(c, i, SIGKILL);
        }
    }
    if (c->dir[0]) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "etcd: could not remove %s\n", c->dir);
    }
    c->dir[0] = '\0';
}

int etcd_post(const etcd_cluster *c, int i, const char *path,
              const char *body, char *out, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(c->m[i].client_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int code = -1;
    char req[8192];
    int n = snprintf(req, sizeof req,
                     "POST %s HTTP/1.0\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     path, strlen(body), body);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        n >= (int)sizeof req || write(fd, req, (size_t)n) != n)
        goto out;
    char resp[16384];
    size_t got = 0;
    ssize_t r;
    while (got + 1 < sizeof resp &&
           (r = read(fd, resp + got, sizeof resp - 1 - got)) > 0)
        got += (size_t)r;
    resp[got] = '\0';
    if (sscanf(resp, "HTTP/%*s %d", &code) != 1)
        code = -1;
    const char *b = strstr(resp, "\r\n\r\n");
    if (out && cap) {
        snprintf(out, cap, "%s", b ? b + 4 : "");
    }
out:
    close(fd);
    return code;
}

int etcd_put(const etcd_cluster *c, int i, const char *key,
             const char *value)
{
    char k[512], v[4096], body[8192];
    EVP_EncodeBlock((unsigned char *)k, (const unsigned char *)key,
                    (int)strlen(key));
    EVP_EncodeBlock((unsigned char *)v, (const unsigned char *)value,
                    (int)strlen(value));
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"value\":\"%s\"}", k, v);
    return etcd_post(c, i, "/v3/kv/put", body, NULL, 0) == 200 ? 0 : -1;
}

int etcd_required(const char *prog)
{
    if (etcd_binary())
        return 0;
    const char *ci = getenv("CI");
    fprintf(stderr, "%s: no etcd binary (Debian's etcd-server)%s\n", prog,
            ci && *ci ? ": required in CI" : ", skipped");
    return ci && *ci ? 1 : 77;
}
