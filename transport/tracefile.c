/*
 * transport/tracefile.c - trace files: the file sink (binary or JSON lines,
 * size-capped rotation) and the reader (see include/xfer/tracefile.h for
 * the format).
 *
 * What must stay true:
 *  - every field goes to disk little-endian, written byte by byte through
 *    the one codec (fsm/le.h), so a file reads the same on any host; the layout is the one documented in
 *    tracefile.h and changes only with XFER_TRACEFILE_VERSION;
 *  - records reach the file in the order the sinks received them, across
 *    rotations (a rotation happens between two records, never inside one);
 *  - the first I/O error is kept and reported by flush/close; after it the
 *    sink drops records instead of writing a torn file;
 *  - the reader never trusts the file: a short header, a foreign magic,
 *    another version or record size, or a partial record is
 *    XFER_ERR_FORMAT with a one-line reason, never a crash;
 *  - writer and reader allocate only through their configured allocator
 *    (stdio's own buffers excepted);
 *  - nothing here prints;
 *  - a file is created mode 0600 and never through a link (issue 24): a
 *    new name with O_CREAT|O_EXCL|O_NOFOLLOW; a name that holds a regular
 *    file of our own is replaced by a temporary file (O_EXCL, 0600) renamed
 *    over it, and rename replaces a name, never follows it; a character
 *    device or a FIFO there (/dev/null) is written as it is; anything else
 *    (a link, another user's file, a directory) is refused.
 */
#include "xfer/tracefile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* fsm_private_dep: the injected allocator with its libc default, and the
 * copy of versioned configs, shared with the pure machines. */
#include "util.h"
#include "le.h" /* fsm/: the one little-endian codec (fsm_private_dep) */
#include "xfer/fsm.h"

typedef struct tag_slot {
    xfer_tracefile *tf;
    uint8_t src;
} tag_slot;

struct xfer_tracefile {
    FILE *fp;
    char *path;
    xfer_tracefile_opts opts;
    char label[32];
    uint64_t created_ns;
    uint64_t file_bytes;   /* bytes in the current file */
    uint64_t file_records; /* records in the current file */
    uint64_t records;      /* records since open */
    uint32_t file_index, rotations, since_flush;
    int err;
    tag_slot tags[256];
};

/* ---------------------------------------------------------------------- */
/* Records (fixed layout, through the one little-endian codec, fsm/le.h)   */
/* ---------------------------------------------------------------------- */

void xfer_tracefile_encode(const xfer_trace_rec *r, uint8_t *b)
{
    xfer_le_put64(b + 0, r->seq);
    xfer_le_put64(b + 8, r->time_ns);
    xfer_le_put64(b + 16, r->id);
    xfer_le_put64(b + 24, r->arg0);
    xfer_le_put64(b + 32, r->arg1);
    xfer_le_put64(b + 40, r->arg2);
    xfer_le_put32(b + 48, r->attempt);
    xfer_le_put32(b + 52, (uint32_t)r->error);
    xfer_le_put16(b + 56, r->shard);
    b[58] = r->machine;
    b[59] = r->old_state;
    b[60] = r->event;
    b[61] = r->new_state;
    b[62] = r->verdict;
    b[63] = r->flags;
}

void xfer_tracefile_decode(const uint8_t *b, xfer_trace_rec *r)
{
    r->seq = xfer_le_get64(b + 0);
    r->time_ns = xfer_le_get64(b + 8);
    r->id = xfer_le_get64(b + 16);
    r->arg0 = xfer_le_get64(b + 24);
    r->arg1 = xfer_le_get64(b + 32);
    r->arg2 = xfer_le_get64(b + 40);
    r->attempt = xfer_le_get32(b + 48);
    r->error = (int32_t)xfer_le_get32(b + 52);
    r->shard = xfer_le_get16(b + 56);
    r->machine = b[58];
    r->old_state = b[59];
    r->event = b[60];
    r->new_state = b[61];
    r->verdict = b[62];
    r->flags = b[63];
}

/* ---------------------------------------------------------------------- */
/* Writer                                                                  */
/* ---------------------------------------------------------------------- */

static void encode_header(const xfer_tracefile *tf, uint8_t *b)
{
    memset(b, 0, XFER_TRACEFILE_HEADER_SIZE);
    memcpy(b, XFER_TRACEFILE_MAGIC, sizeof XFER_TRACEFILE_MAGIC);
    xfer_le_put16(b + 8, XFER_TRACEFILE_VERSION);
    xfer_le_put16(b + 10, XFER_TRACEFILE_HEADER_SIZE);
    xfer_le_put16(b + 12, XFER_TRACEFILE_RECORD_SIZE);
    xfer_le_put16(b + 14, tf->file_index ? XFER_TRACEFILE_F_CONTINUATION : 0);
    xfer_le_put64(b + 16, tf->created_ns);
    xfer_le_put32(b + 24, (uint32_t)getpid());
    xfer_le_put32(b + 28, tf->file_index);
    memcpy(b + 32, tf->label, sizeof tf->label);
}

/* Write n bytes to the current file, counting them; keeps the first
 * error. */
static void emit_bytes(xfer_tracefile *tf, const void *p, size_t n)
{
    if (tf->err)
        return;
    if (fwrite(p, 1, n, tf->fp) != n)
        tf->err = XFER_ERR_IO;
    tf->file_bytes += n;
}

static void write_header(xfer_tracefile *tf)
{
    if (tf->opts.format == XFER_TRACEFILE_BINARY) {
        uint8_t b[XFER_TRACEFILE_HEADER_SIZE];
        encode_header(tf, b);
        emit_bytes(tf, b, sizeof b);
        return;
    }
    char line[256];
    int n = snprintf(line, sizeof line,
                     "{\"xfer_trace\":%d,\"record_size\":%d,"
                     "\"created_ns\":%" PRIu64 ",\"pid\":%ld,"
                     "\"file_index\":%" PRIu32 ",\"label\":\"%s\"}\n",
                     XFER_TRACEFILE_VERSION, XFER_TRACEFILE_RECORD_SIZE,
                     tf->created_ns, (long)getpid(), tf->file_index,
                     tf->label);
    emit_bytes(tf, line, (size_t)n);
}

/* The label goes into JSON unescaped: keep only plain printable bytes. */
static void set_label(xfer_tracefile *tf, const char *label)
{
    const char *s = label ? label : "xfer";
    size_t j = 0;
    for (size_t i = 0; s[i] && j < sizeof tf->label - 1; i++)
        if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\')
            tf->label[j++] = s[i];
    tf->label[j] = '\0';
}

static uint64_t wall_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The bytes each version of the options and reader config holds
 * (util.h). */
static const size_t opts_lens[] = {sizeof(xfer_tracefile_opts)};
static const size_t reader_lens[] = {sizeof(xfer_tracefile_reader_config)};

void xfer_tracefile_opts_default(xfer_tracefile_opts *opts)
{
    if (opts)
        *opts = (xfer_tracefile_opts){.version = XFER_TRACEFILE_OPTS_VERSION,
                                      .format = XFER_TRACEFILE_BINARY,
                                      .keep = 1};
}

/* A copy of s through `a`, or NULL. */
static char *copy_str(const xfer_allocator *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *c = xfer_util_alloc(a, n);
    if (c)
        memcpy(c, s, n);
    return c;
}

/* Create `path` for writing, mode 0600, as the header comment says.
 * Returns the stream, or NULL with *rc XFER_ERR_PERM (a name we will not
 * replace), XFER_ERR_NOMEM or XFER_ERR_IO (errno tells why). */
static FILE *create_private(const xfer_allocator *a, const char *path,
                            int *rc)
{
    *rc = XFER_ERR_IO;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0600);
    char *tmp = NULL;
    struct stat st;
    if (fd < 0 && errno == EEXIST) {
        if (lstat(path, &st) != 0)
            goto out;
        if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
            /* /dev/null, a pipe: written, not created or truncated */
            fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
            goto out;
        }
        if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
            *rc = XFER_ERR_PERM;
            errno = EEXIST;
            goto out;
        }
        size_t n = strlen(path) + 8;
        tmp = xfer_util_alloc(a, n);
        if (!tmp) {
            *rc = XFER_ERR_NOMEM;
            goto out;
        }
        snprintf(tmp, n, "%s.XXXXXX", path);
        fd = mkstemp(tmp); /* O_EXCL, 0600 */
        if (fd >= 0)
            fcntl(fd, F_SETFD, FD_CLOEXEC);
        if (fd >= 0 && rename(tmp, path) != 0) {
            int e = errno;
            unlink(tmp);
            close(fd);
            fd = -1;
            errno = e;
        }
    }
out:
    xfer_util_free(a, tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (fd >= 0 && !f)
        close(fd);
    return f;
}

int xfer_tracefile_open(const char *path, const xfer_tracefile_opts *opts,
                        xfer_tracefile **out)
{
    xfer_tracefile_opts o;
    xfer_tracefile_opts_default(&o);
    if (!path || !*path || !out ||
        (opts && xfer_util_versioned_copy(&o, opts, opts->version, opts_lens,
                                          XFER_UTIL_NVERSIONS(opts_lens))) ||
        o.format > XFER_TRACEFILE_JSONL)
        return XFER_ERR_INVALID_ARG;
    xfer_tracefile *tf = xfer_util_calloc(&o.alloc, 1, sizeof *tf);
    if (!tf)
        return XFER_ERR_NOMEM;
    tf->opts = o;
    tf->opts.label = NULL;
    if (tf->opts.keep == 0)
        tf->opts.keep = 1;
    set_label(tf, o.label);
    tf->created_ns = tf->opts.created_ns ? tf->opts.created_ns : wall_ns();
    for (unsigned i = 0; i < 256; i++)
        tf->tags[i] = (tag_slot){tf, (uint8_t)i};
    tf->path = copy_str(&o.alloc, path);
    if (!tf->path) {
        xfer_util_free(&o.alloc, tf);
        return XFER_ERR_NOMEM;
    }
    int crc;
    tf->fp = create_private(&o.alloc, path, &crc);
    if (!tf->fp) {
        int e = errno; /* the caller reads why in errno */
        xfer_util_free(&o.alloc, tf->path);
        xfer_util_free(&o.alloc, tf);
        errno = e;
        return crc;
    }
    write_header(tf);
    if (tf->err) {
        int rc = tf->err;
        xfer_tracefile_close(tf);
        return rc;
    }
    *out = tf;
    return 0;
}

/* path.i, for rotation, through `a`. */
static char *numbered(const xfer_allocator *a, const char *path, uint32_t i)
{
    size_t n = strlen(path) + 16;
    char *s = xfer_util_alloc(a, n);
    if (s)
        snprintf(s, n, "%s.%" PRIu32, path, i);
    return s;
}

/* Shift path.i -> path.(i+1), drop the oldest, path -> path.1. */
static int shift_files(const xfer_allocator *a, const char *path,
                       uint32_t keep)
{
    for (uint32_t i = keep; i >= 1; i--) {
        char *from = i == 1 ? NULL : numbered(a, path, i - 1);
        char *to = numbered(a, path, i);
        int rc = 0;
        if (!to || (i > 1 && !from))
            rc = XFER_ERR_NOMEM;
        else if (rename(from ? from : path, to) != 0 && errno != ENOENT)
            rc = XFER_ERR_IO;
        xfer_util_free(a, from);
        xfer_util_free(a, to);
        if (rc)
            return rc;
    }
    return 0;
}

static void rotate(xfer_tracefile *tf)
{
    if (fclose(tf->fp) != 0)
        tf->err = XFER_ERR_IO;
    tf->fp = NULL;
    if (!tf->err)
        tf->err = shift_files(&tf->opts.alloc, tf->path, tf->opts.keep);
    if (!tf->err) {
        int rc;
        tf->fp = create_private(&tf->opts.alloc, tf->path, &rc);
        if (!tf->fp)
            tf->err = rc;
    }
    if (tf->err)
        return;
    tf->file_index++;
    tf->rotations++;
    tf->file_bytes = 0;
    tf->file_records = 0;
    write_header(tf);
}

static size_t format_json(const xfer_trace_rec *r, char *line, size_t len)
{
    unsigned m = r->machine;
    const char *old = "", *ev = "", *nw = "";
    if (m <= XFER_MACHINE_READINESS) {
        old = xfer_fsm_state_name(m, r->old_state);
        ev = xfer_fsm_event_name(m, r->event);
        nw = xfer_fsm_state_name(m, r->new_state);
    } else if (m == XFER_MACHINE_INPUT) {
        ev = xfer_fsm_event_name(XFER_MACHINE_TRANSFER, r->event);
    } else if (m == XFER_MACHINE_NOTE) {
        ev = xfer_note_name(r->event);
    }
    int n = snprintf(
        line, len,
        "{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 ",\"id\":%" PRIu64
        ",\"arg0\":%" PRIu64 ",\"arg1\":%" PRIu64 ",\"arg2\":%" PRIu64
        ",\"attempt\":%" PRIu32 ",\"error\":%" PRId32 ",\"shard\":%u"
        ",\"machine\":%u,\"old_state\":%u,\"event\":%u,\"new_state\":%u"
        ",\"verdict\":%u,\"src\":%u,\"m\":\"%s\",\"old\":\"%s\",\"ev\":\"%s\""
        ",\"new\":\"%s\",\"v\":\"%s\"}\n",
        r->seq, r->time_ns, r->id, r->arg0, r->arg1, r->arg2, r->attempt,
        r->error, (unsigned)r->shard, m, (unsigned)r->old_state,
        (unsigned)r->event, (unsigned)r->new_state, (unsigned)r->verdict,
        (unsigned)r->flags, xfer_machine_name(m), old, ev, nw,
        m <= XFER_MACHINE_READINESS ? xfer_verdict_name(r->verdict) : "");
    return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

int xfer_tracefile_write(xfer_tracefile *tf, const xfer_trace_rec *rec)
{
    if (!tf || !rec)
        return XFER_ERR_INVALID_ARG;
    if (tf->err)
        return tf->err;
    char line[640];
    uint8_t bin[XFER_TRACEFILE_RECORD_SIZE];
    const void *p = bin;
    size_t n = sizeof bin;
    if (tf->opts.format == XFER_TRACEFILE_BINARY) {
        xfer_tracefile_encode(rec, bin);
    } else {
        n = format_json(rec, line, sizeof line);
        p = line;
    }
    if (tf->opts.max_bytes && tf->file_records > 0 &&
        tf->file_bytes + n > tf->opts.max_bytes)
        rotate(tf);
    emit_bytes(tf, p, n);
    tf->file_records++;
    tf->records++;
    if (tf->opts.flush_every && ++tf->since_flush >= tf->opts.flush_every)
        xfer_tracefile_flush(tf);
    return tf->err;
}

static void sink_fn(void *ud, const xfer_trace_rec *rec)
{
    const tag_slot *t = ud;
    xfer_trace_rec r = *rec;
    r.flags = t->src;
    (void)xfer_tracefile_write(t->tf, &r);
}

xfer_trace_sink xfer_tracefile_sink_tagged(xfer_tracefile *tf, uint8_t src)
{
    if (!tf)
        return (xfer_trace_sink){NULL, NULL};
    return (xfer_trace_sink){sink_fn, &tf->tags[src]};
}

xfer_trace_sink xfer_tracefile_sink(xfer_tracefile *tf)
{
    return xfer_tracefile_sink_tagged(tf, 0);
}

int xfer_tracefile_flush(xfer_tracefile *tf)
{
    if (!tf)
        return XFER_ERR_INVALID_ARG;
    tf->since_flush = 0;
    if (!tf->err && tf->fp && fflush(tf->fp) != 0)
        tf->err = XFER_ERR_IO;
    return tf->err;
}

uint64_t xfer_tracefile_records(const xfer_tracefile *tf)
{
    return tf ? tf->records : 0;
}

uint32_t xfer_tracefile_rotations(const xfer_tracefile *tf)
{
    return tf ? tf->rotations : 0;
}

int xfer_tracefile_close(xfer_tracefile *tf)
{
    if (!tf)
        return 0;
    int rc = tf->err;
    if (tf->fp && fclose(tf->fp) != 0 && !rc)
        rc = XFER_ERR_IO;
    xfer_allocator a = tf->opts.alloc;
    xfer_util_free(&a, tf->path);
    xfer_util_free(&a, tf);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Reader                                                                  */
/* ---------------------------------------------------------------------- */

struct xfer_tracefile_reader {
    FILE *fp;
    xfer_tracefile_reader_config cfg;
    xfer_tracefile_info info;
    uint64_t offset; /* binary: byte offset; JSONL: line number */
    int err;
    char why[192];
    char *line;      /* through cfg.alloc */
    size_t linecap;
};

static int fail(xfer_tracefile_reader *r, int err, const char *fmt,
                uint64_t a, uint64_t b)
{
    snprintf(r->why, sizeof r->why, fmt, a, b);
    r->err = err;
    return err;
}

static int check_binary_header(xfer_tracefile_reader *r)
{
    uint8_t b[XFER_TRACEFILE_HEADER_SIZE];
    size_t got = fread(b, 1, sizeof b, r->fp);
    if (got < sizeof b)
        return fail(r, ferror(r->fp) ? XFER_ERR_IO : XFER_ERR_FORMAT,
                    "truncated header (%" PRIu64 " of %" PRIu64 " bytes)",
                    got, sizeof b);
    if (memcmp(b, XFER_TRACEFILE_MAGIC, sizeof XFER_TRACEFILE_MAGIC) != 0)
        return fail(r, XFER_ERR_FORMAT, "not an xfer trace (bad magic)", 0,
                    0);
    xfer_tracefile_info *in = &r->info;
    in->format = XFER_TRACEFILE_BINARY;
    in->version = xfer_le_get16(b + 8);
    in->record_size = xfer_le_get16(b + 12);
    in->flags = xfer_le_get16(b + 14);
    in->created_ns = xfer_le_get64(b + 16);
    in->pid = xfer_le_get32(b + 24);
    in->file_index = xfer_le_get32(b + 28);
    memcpy(in->label, b + 32, sizeof in->label - 1);
    if (in->version != XFER_TRACEFILE_VERSION)
        return fail(r, XFER_ERR_FORMAT,
                    "trace format version %" PRIu64
                    " not supported (this build reads %" PRIu64 ")",
                    in->version, XFER_TRACEFILE_VERSION);
    if (xfer_le_get16(b + 10) != XFER_TRACEFILE_HEADER_SIZE ||
        in->record_size != XFER_TRACEFILE_RECORD_SIZE)
        return fail(r, XFER_ERR_FORMAT,
                    "unexpected header/record size %" PRIu64 "/%" PRIu64,
                    xfer_le_get16(b + 10), in->record_size);
    r->offset = sizeof b;
    return 0;
}

/* "key":<integer> in a JSON line we wrote ourselves. */
static bool json_num(const char *line, const char *key, int64_t *sv,
                     uint64_t *uv)
{
    char pat[32];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p)
        return false;
    p += strlen(pat);
    char *end;
    errno = 0;
    if (*p == '-') {
        *sv = strtoll(p, &end, 10);
        *uv = (uint64_t)*sv;
    } else {
        *uv = strtoull(p, &end, 10);
        *sv = (int64_t)*uv;
    }
    return end != p && errno == 0 && (*end == ',' || *end == '}');
}

static bool json_u64(const char *line, const char *key, uint64_t *v)
{
    int64_t s;
    return json_num(line, key, &s, v);
}

/* Double the line buffer (through the reader's allocator), keeping its
 * first `used` bytes; fgets takes an int, so a line stays below 2 GiB. */
static int grow_line(xfer_tracefile_reader *r, size_t used)
{
    size_t cap = r->linecap ? 2 * r->linecap : 256;
    char *l = cap <= INT_MAX ? xfer_util_alloc(&r->cfg.alloc, cap) : NULL;
    if (!l)
        return XFER_ERR_NOMEM;
    if (used)
        memcpy(l, r->line, used);
    xfer_util_free(&r->cfg.alloc, r->line);
    r->line = l;
    r->linecap = cap;
    return 0;
}

/* The next line into r->line, its '\n' kept: 1, 0 at the end of the file,
 * or an error. */
static int read_line(xfer_tracefile_reader *r)
{
    size_t n = 0;
    for (;;) {
        if (r->linecap - n < 2 && grow_line(r, n) != 0)
            return fail(r, XFER_ERR_NOMEM, "out of memory at line %" PRIu64
                        "%.0" PRIu64, r->offset + 1, 0);
        if (!fgets(r->line + n, (int)(r->linecap - n), r->fp))
            break;
        n += strlen(r->line + n);
        if (n && r->line[n - 1] == '\n')
            break;
    }
    if (n == 0)
        return ferror(r->fp) ? fail(r, XFER_ERR_IO, "read error", 0, 0) : 0;
    r->offset++;
    if (r->line[n - 1] != '\n')
        return fail(r, XFER_ERR_FORMAT,
                    "truncated record at line %" PRIu64 "%.0" PRIu64,
                    r->offset, 0);
    return 1;
}

static int check_json_header(xfer_tracefile_reader *r)
{
    int rc = read_line(r);
    if (rc <= 0)
        return rc ? rc : fail(r, XFER_ERR_FORMAT, "empty file", 0, 0);
    uint64_t v, rs, pid = 0, idx = 0;
    const char *l = r->line;
    if (!json_u64(l, "xfer_trace", &v))
        return fail(r, XFER_ERR_FORMAT, "not an xfer trace (no header)", 0,
                    0);
    if (v != XFER_TRACEFILE_VERSION)
        return fail(r, XFER_ERR_FORMAT,
                    "trace format version %" PRIu64
                    " not supported (this build reads %" PRIu64 ")",
                    v, XFER_TRACEFILE_VERSION);
    if (!json_u64(l, "record_size", &rs) || rs != XFER_TRACEFILE_RECORD_SIZE)
        return fail(r, XFER_ERR_FORMAT, "bad record_size in header", 0, 0);
    r->info.format = XFER_TRACEFILE_JSONL;
    r->info.version = (uint16_t)v;
    r->info.record_size = (uint16_t)rs;
    json_u64(l, "created_ns", &r->info.created_ns);
    json_u64(l, "pid", &pid);
    json_u64(l, "file_index", &idx);
    r->info.pid = (uint32_t)pid;
    r->info.file_index = (uint32_t)idx;
    r->info.flags = idx ? XFER_TRACEFILE_F_CONTINUATION : 0;
    const char *lab = strstr(l, "\"label\":\"");
    if (lab) {
        lab += 9;
        size_t n = strcspn(lab, "\"");
        if (n >= sizeof r->info.label)
            n = sizeof r->info.label - 1;
        memcpy(r->info.label, lab, n);
    }
    return 0;
}

static void reader_free(xfer_tracefile_reader *r)
{
    if (r->fp)
        fclose(r->fp);
    xfer_allocator a = r->cfg.alloc;
    xfer_util_free(&a, r->line);
    xfer_util_free(&a, r);
}

void xfer_tracefile_reader_config_default(xfer_tracefile_reader_config *cfg)
{
    if (cfg)
        *cfg = (xfer_tracefile_reader_config){
            .version = XFER_TRACEFILE_READER_CONFIG_VERSION};
}

int xfer_tracefile_reader_open(const char *path, xfer_tracefile_reader **out,
                               char *why, size_t whylen)
{
    return xfer_tracefile_reader_open_config(path, NULL, out, why, whylen);
}

int xfer_tracefile_reader_open_config(const char *path,
                                      const xfer_tracefile_reader_config *cfg,
                                      xfer_tracefile_reader **out, char *why,
                                      size_t whylen)
{
    xfer_tracefile_reader_config conf;
    xfer_tracefile_reader_config_default(&conf);
    if (!path || !out ||
        (cfg && xfer_util_versioned_copy(&conf, cfg, cfg->version, reader_lens,
                                         XFER_UTIL_NVERSIONS(reader_lens))))
        return XFER_ERR_INVALID_ARG;
    xfer_tracefile_reader *r = xfer_util_calloc(&conf.alloc, 1, sizeof *r);
    if (!r)
        return XFER_ERR_NOMEM;
    r->cfg = conf;
    int rc;
    r->fp = fopen(path, "rb");
    if (!r->fp) {
        rc = fail(r, XFER_ERR_IO, "cannot open", 0, 0);
        snprintf(r->why, sizeof r->why, "cannot open: %s", strerror(errno));
    } else {
        int c = fgetc(r->fp);
        if (c == EOF)
            rc = fail(r, XFER_ERR_FORMAT, "empty file", 0, 0);
        else {
            ungetc(c, r->fp);
            rc = c == '{' ? check_json_header(r) : check_binary_header(r);
        }
    }
    if (rc) {
        if (why && whylen)
            snprintf(why, whylen, "%s", r->why);
        reader_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

const xfer_tracefile_info *
xfer_tracefile_reader_info(const xfer_tracefile_reader *r)
{
    return r ? &r->info : NULL;
}

static int next_binary(xfer_tracefile_reader *r, xfer_trace_rec *rec)
{
    uint8_t b[XFER_TRACEFILE_RECORD_SIZE];
    size_t got = fread(b, 1, sizeof b, r->fp);
    if (got == 0)
        return ferror(r->fp) ? fail(r, XFER_ERR_IO, "read error", 0, 0) : 0;
    if (got < sizeof b)
        return fail(r, ferror(r->fp) ? XFER_ERR_IO : XFER_ERR_FORMAT,
                    "truncated record at offset %" PRIu64
                    " (%" PRIu64 " of 64 bytes)",
                    r->offset, got);
    xfer_tracefile_decode(b, rec);
    r->offset += sizeof b;
    return 1;
}

static int next_json(xfer_tracefile_reader *r, xfer_trace_rec *rec)
{
    int rc = read_line(r);
    if (rc <= 0)
        return rc;
    static const char *const keys[] = {
        "seq",    "time_ns", "id",        "arg0",      "arg1",
        "arg2",   "attempt", "error",     "shard",     "machine",
        "old_state", "event", "new_state", "verdict",  "src"};
    uint64_t v[15];
    int64_t err = 0;
    for (size_t i = 0; i < 15; i++) {
        bool ok = i == 7 ? json_num(r->line, keys[i], &err, &v[i])
                         : json_u64(r->line, keys[i], &v[i]);
        if (!ok)
            return fail(r, XFER_ERR_FORMAT,
                        "malformed record at line %" PRIu64 "%.0" PRIu64,
                        r->offset, 0);
    }
    *rec = (xfer_trace_rec){
        .seq = v[0], .time_ns = v[1], .id = v[2], .arg0 = v[3],
        .arg1 = v[4], .arg2 = v[5], .attempt = (uint32_t)v[6],
        .error = (int32_t)err, .shard = (uint16_t)v[8],
        .machine = (uint8_t)v[9], .old_state = (uint8_t)v[10],
        .event = (uint8_t)v[11], .new_state = (uint8_t)v[12],
        .verdict = (uint8_t)v[13], .flags = (uint8_t)v[14]};
    return 1;
}

int xfer_tracefile_reader_next(xfer_tracefile_reader *r, xfer_trace_rec *rec)
{
    if (!r || !rec)
        return XFER_ERR_INVALID_ARG;
    if (r->err)
        return r->err;
    if (r->info.format == XFER_TRACEFILE_BINARY)
        return next_binary(r, rec);
    return next_json(r, rec);
}

const char *xfer_tracefile_reader_why(const xfer_tracefile_reader *r)
{
    return r ? r->why : "";
}

void xfer_tracefile_reader_close(xfer_tracefile_reader *r)
{
    if (r)
        reader_free(r);
}
