/*
 * transport/shm.c - shard pools in POSIX shared memory (xfer/shm.h): the
 * serving process creates "/NAME.k" and unlinks it at close; a consumer
 * maps it read-only.
 *
 * What must stay true:
 *  - an object whose creator is alive is never replaced or unlinked by
 *    another create (XFER_ERR_EXISTS); one of another user (or one we may
 *    not even open) is never used or replaced (XFER_ERR_PERM: a squatter
 *    is named as such, not as a live xferd); one of ours whose creator is
 *    dead (kill -9) or whose header is not ours is replaced;
 *  - a creator unlinks only the object it made: if the name now holds
 *    another object (another generation), it is left alone;
 *  - a mapping is checked before use: the header's magic, version, sizes
 *    and the object's real size, so a short or foreign object is refused,
 *    never read past its end.
 */
#include "xfer/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h" /* fsm_private_dep: the injected allocator */

#define MAGIC "XFERSHM"
#define VERSION 1u

struct xfer_shm {
    xfer_allocator alloc;
    uint8_t *map;      /* header + pool */
    size_t map_len;
    uint64_t pool_bytes, generation;
    int owner;         /* created here: unlink at close */
    char path[XFER_SHM_NAME_MAX + 16];
};

/* The header's fields (host byte order). */
typedef struct hdr {
    char magic[8];
    uint32_t version, header_size;
    uint64_t pool_bytes;
    uint32_t pid;
    uint16_t shard, rsv;
    uint64_t created_ns, generation;
} hdr;

_Static_assert(sizeof(hdr) == 48, "the shm header layout of xfer/shm.h");

static int make_path(const char *name, uint16_t shard, char *buf, size_t cap)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > XFER_SHM_NAME_MAX || shard >= XFER_MAX_SHARDS)
        return XFER_ERR_INVALID_ARG;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
            return XFER_ERR_INVALID_ARG;
    }
    snprintf(buf, cap, "/%s.%u", name, (unsigned)shard);
    return 0;
}

static bool header_ok(const hdr *h, size_t size)
{
    return memcmp(h->magic, MAGIC, sizeof MAGIC) == 0 &&
           h->version == VERSION && h->header_size == XFER_SHM_HEADER &&
           h->pool_bytes <= SIZE_MAX - XFER_SHM_HEADER &&
           size >= XFER_SHM_HEADER + h->pool_bytes;
}

/* Does pid name a running process?  A zombie (killed, not yet reaped:
 * common when the parent is a container's pid 1) is not running. */
static bool running(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno != EPERM)
        return false;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true; /* no /proc: trust kill() */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

/* Is the object at path one a live process serves?  A header we cannot
 * read, or one whose pid does not exist, is stale. */
static bool held_by_live(const char *path)
{
    int fd = shm_open(path, O_RDONLY, 0);
    if (fd < 0)
        return false;
    struct stat st;
    hdr h;
    bool live = false;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof h &&
        pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
        header_ok(&h, (size_t)st.st_size) && h.pid != 0)
        live = running((pid_t)h.pid);
    close(fd);
    return live;
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Is the object at path another user's?  One we may not open (its mode
 * shuts us out, or a link: shm_open never follows one) is not ours. */
static bool foreign(const char *path)
{
    int fd = shm_open(path, O_RDONLY, 0);
    if (fd < 0)
        return errno == EACCES || errno == EPERM || errno == ELOOP;
    struct stat st;
    bool other = fstat(fd, &st) != 0 || st.st_uid != geteuid();
    close(fd);
    return other;
}

/* Create the object exclusively, replacing a stale one of ours once. */
static int open_new(const char *path)
{
    for (int tries = 0; tries < 2; tries++) {
        int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0)
            return fd;
        if (errno != EEXIST)
            return XFER_ERR_IO;
        if (foreign(path))
            return XFER_ERR_PERM;
        if (held_by_live(path))
            return XFER_ERR_EXISTS;
        shm_unlink(path);
    }
    return XFER_ERR_EXISTS;
}

static xfer_shm *new_handle(const xfer_allocator *alloc, const char *path)
{
    xfer_allocator a = alloc ? *alloc : (xfer_allocator){0};
    xfer_shm *m = xfer_util_calloc(&a, 1, sizeof *m);
    if (!m)
        return NULL;
    m->alloc = a;
    snprintf(m->path, sizeof m->path, "%s", path);
    return m;
}

int xfer_shm_create(const char *name, uint16_t shard, uint64_t pool_bytes,
                    const xfer_allocator *alloc, xfer_shm **out)
{
    char path[XFER_SHM_NAME_MAX + 16];
    if (!out || pool_bytes == 0 || pool_bytes > SIZE_MAX - XFER_SHM_HEADER ||
        make_path(name, shard, path, sizeof path) != 0)
        return XFER_ERR_INVALID_ARG;
    int fd = open_new(path);
    if (fd < 0)
        return fd;
    int rc = XFER_ERR_NOMEM;
    xfer_shm *m = new_handle(alloc, path);
    if (!m)
        goto out_unlink;
    m->map_len = XFER_SHM_HEADER + (size_t)pool_bytes;
    rc = XFER_ERR_IO;
    if (ftruncate(fd, (off_t)m->map_len) != 0)
        goto out_unlink;
    void *p = mmap(NULL, m->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                   0);
    if (p == MAP_FAILED)
        goto out_unlink;
    m->map = p;
    m->owner = 1;
    m->pool_bytes = pool_bytes;
    memset(m->map + XFER_SHM_HEADER, 0, (size_t)pool_bytes);
    hdr h = {.magic = MAGIC, .version = VERSION,
             .header_size = XFER_SHM_HEADER, .pool_bytes = pool_bytes,
             .pid = (uint32_t)getpid(), .shard = shard,
             .created_ns = realtime_ns()};
    h.generation = h.created_ns ^ ((uint64_t)h.pid << 40) ^ (uint64_t)shard;
    m->generation = h.generation;
    memcpy(m->map, &h, sizeof h);
    close(fd);
    *out = m;
    return 0;
out_unlink:
    shm_unlink(path);
    close(fd);
    if (m)
        xfer_util_free(&m->alloc, m);
    return rc;
}

int xfer_shm_map(const char *name, uint16_t shard,
                 const xfer_allocator *alloc, xfer_shm **out)
{
    char path[XFER_SHM_NAME_MAX + 16];
    if (!out || make_path(name, shard, path, sizeof path) != 0)
        return XFER_ERR_INVALID_ARG;
    int fd = shm_open(path, O_RDONLY, 0);
    if (fd < 0)
        return errno == ENOENT ? XFER_ERR_NOT_FOUND : XFER_ERR_IO;
    struct stat st;
    xfer_shm *m = NULL;
    int rc = XFER_ERR_IO;
    if (fstat(fd, &st) != 0)
        goto out;
    rc = XFER_ERR_FORMAT;
    if ((size_t)st.st_size < XFER_SHM_HEADER)
        goto out;
    rc = XFER_ERR_IO;
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        goto out;
    hdr h;
    memcpy(&h, p, sizeof h);
    rc = header_ok(&h, (size_t)st.st_size) ? XFER_ERR_NOMEM : XFER_ERR_FORMAT;
    m = rc == XFER_ERR_NOMEM ? new_handle(alloc, path) : NULL;
    if (!m) {
        munmap(p, (size_t)st.st_size);
        goto out;
    }
    m->map = p;
    m->map_len = (size_t)st.st_size;
    m->pool_bytes = h.pool_bytes;
    m->generation = h.generation;
    *out = m;
    rc = 0;
out:
    close(fd);
    return rc;
}

void *xfer_shm_pool(const xfer_shm *m)
{
    return m ? m->map + XFER_SHM_HEADER : NULL;
}

uint64_t xfer_shm_len(const xfer_shm *m)
{
    return m ? m->pool_bytes : 0;
}

uint64_t xfer_shm_generation(const xfer_shm *m)
{
    return m ? m->generation : 0;
}

/* Does the name still hold the object of this generation? */
static bool still_ours(const xfer_shm *m)
{
    int fd = shm_open(m->path, O_RDONLY, 0);
    if (fd < 0)
        return false;
    hdr h;
    bool ours = pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
                h.generation == m->generation &&
                (pid_t)h.pid == getpid();
    close(fd);
    return ours;
}

void xfer_shm_close(xfer_shm *m)
{
    if (!m)
        return;
    if (m->owner && still_ours(m))
        shm_unlink(m->path);
    if (m->map)
        munmap(m->map, m->map_len);
    xfer_allocator a = m->alloc;
    xfer_util_free(&a, m);
}

int xfer_shm_unlink(const char *name, uint16_t shard)
{
    char path[XFER_SHM_NAME_MAX + 16];
    if (make_path(name, shard, path, sizeof path) != 0)
        return XFER_ERR_INVALID_ARG;
    if (shm_unlink(path) == 0)
        return 0;
    return errno == ENOENT ? XFER_ERR_NOT_FOUND : XFER_ERR_IO;
}
