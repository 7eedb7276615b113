/*
 * xfer/tracefile.h - trace files: a sink that writes trace records to a
 * file (compact binary or JSON lines, with size-capped rotation) and a
 * reader for both forms.  xfer-trace reads what these sinks write.
 *
 * Binary format, version 1 (all integers little-endian, written field by
 * field, never as a struct dump):
 *
 *   header, 64 bytes:
 *     0  magic        8 bytes "XFERTRC\0"
 *     8  version      u16  = 1 (XFER_TRACEFILE_VERSION)
 *    10  header_size  u16  = 64
 *    12  record_size  u16  = 64
 *    14  flags        u16  bit 0: continuation (file_index > 0; the
 *                          records before it were rotated away)
 *    16  created_ns   u64  wall-clock (CLOCK_REALTIME) time of creation
 *    24  pid          u32  process that wrote the file
 *    28  file_index   u32  0 for the first file of a run, +1 per rotation
 *    32  label        32 bytes, NUL-padded text (opts.label)
 *
 *   records, 64 bytes each, in the order the sink received them:
 *     0 seq u64 | 8 time_ns u64 | 16 id u64 | 24 arg0 u64 | 32 arg1 u64 |
 *    40 arg2 u64 | 48 attempt u32 | 52 error i32 | 56 shard u16 |
 *    58 machine u8 | 59 old_state u8 | 60 event u8 | 61 new_state u8 |
 *    62 verdict u8 | 63 src u8
 *
 * `src` is the emitter tag of the sink that wrote the record (0 for
 * xfer_tracefile_sink, `src` for xfer_tracefile_sink_tagged), so records of
 * several emitters (the transfer core, shards, readiness trackers) sharing
 * one file can be told apart; the reader returns it in xfer_trace_rec.flags
 * (which emitters leave 0).  A file whose size is not header + n * 64 ends
 * in a truncated record.  Readers reject another major version.
 *
 * JSON lines format: a first line
 *   {"xfer_trace":1,"record_size":64,"created_ns":N,"pid":N,
 *    "file_index":N,"label":"..."}
 * then one object per record with the numeric fields under their struct
 * names ("seq","time_ns","id","arg0","arg1","arg2","attempt","error",
 * "shard","machine","old_state","event","new_state","verdict","src") plus
 * names for people ("m","old","ev","new","v").  u64 values are written as
 * plain integers (exact in this reader; JavaScript loses precision above
 * 2^53).
 *
 * Rotation: with max_bytes > 0, a write that would make the file larger
 * than max_bytes first renames path -> path.1 (path.1 -> path.2 ... up to
 * path.<keep>, the oldest dropped) and starts a new file with a fresh
 * header (file_index + 1).  Write order is kept across files: read
 * path.<keep> ... path.1, path.
 *
 * Threads: a tracefile and its sinks are used by one thread at a time (the
 * thread that drives the emitters, e.g. the engine's loop).  The library
 * never prints: I/O errors are remembered and returned by flush/close.
 */
#ifndef XFER_TRACEFILE_H
#define XFER_TRACEFILE_H

#include <stddef.h>
#include <stdint.h>

#include "xfer/errors.h"
#include "xfer/fsm.h"
#include "xfer/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define XFER_TRACEFILE_VERSION 1
#define XFER_TRACEFILE_HEADER_SIZE 64
#define XFER_TRACEFILE_RECORD_SIZE 64
#define XFER_TRACEFILE_MAGIC "XFERTRC"
/* Header flags. */
#define XFER_TRACEFILE_F_CONTINUATION 0x1u

typedef enum xfer_tracefile_format {
    XFER_TRACEFILE_BINARY = 0,
    XFER_TRACEFILE_JSONL = 1
} xfer_tracefile_format;

/*
 * Options of a trace file sink; copied at open.  Start from
 * xfer_tracefile_opts_default() and set what differs.  `version` says
 * which layout the caller was built with (docs/design.md section 4.1; it
 * is not the file format's XFER_TRACEFILE_VERSION): xfer_tracefile_open()
 * reads only the fields of that version.  Zero fields take defaults too.
 */
#define XFER_TRACEFILE_OPTS_VERSION 1
typedef struct xfer_tracefile_opts {
    uint32_t version;    /* XFER_TRACEFILE_OPTS_VERSION */
    uint8_t format;      /* xfer_tracefile_format; default BINARY */
    uint64_t max_bytes;  /* rotate before a file would pass this; 0 (the
                            default): never */
    uint32_t keep;       /* rotated files kept (path.1..path.keep);
                            default 1 (0 means 1) */
    uint32_t flush_every; /* flush after this many records; 0 (the
                             default): when the buffer fills, and at
                             flush/close */
    uint64_t created_ns; /* header creation time; 0 (the default):
                            CLOCK_REALTIME now */
    const char *label;   /* header label (copied, at most 31 bytes kept);
                            NULL (the default): "xfer" */
    xfer_allocator alloc; /* every allocation of the sink (stdio's own
                             buffers excepted); zeroed (the default):
                             libc */
} xfer_tracefile_opts;

/* Write version 1 and every default above into *opts.  `opts` borrowed;
 * NULL is ignored. */
XFER_API void xfer_tracefile_opts_default(xfer_tracefile_opts *opts);

typedef struct xfer_tracefile xfer_tracefile;

/* The header of a trace file, as read back. */
typedef struct xfer_tracefile_info {
    uint8_t format;  /* xfer_tracefile_format */
    uint16_t version, record_size, flags;
    uint64_t created_ns;
    uint32_t pid, file_index;
    char label[32];  /* NUL-terminated */
} xfer_tracefile_info;

/*
 * xfer_tracefile_open - create `path` (mode 0600) and write its header.
 * Never through a link: a new name is created with O_EXCL|O_NOFOLLOW; a
 * regular file of the caller's effective uid already there is replaced
 * (a temporary file in the same directory renamed over it); a character
 * device or a FIFO (/dev/null) is written as it is; anything else at
 * `path` (a symlink, another user's file, a directory) is refused; rotation renames, which never follows a link either.  `path`
 * is copied; `opts` is copied (NULL: the defaults, binary and
 * unbounded).  On success writes *out and returns 0; on failure *out is
 * untouched.
 * Errors: XFER_ERR_INVALID_ARG (NULL path/out, an opts version this
 * library does not know, bad format), XFER_ERR_NOMEM, XFER_ERR_PERM
 * (something other than our own regular file is at `path`), XFER_ERR_IO
 * (cannot create or write the file; errno tells why).
 */
XFER_API int xfer_tracefile_open(const char *path,
                                 const xfer_tracefile_opts *opts,
                                 xfer_tracefile **out);

/*
 * xfer_tracefile_sink - a sink writing every record into `tf` with emitter
 * tag 0; xfer_tracefile_sink_tagged uses tag `src`.  `tf` is retained by
 * the sink until xfer_tracefile_close: close the file only after every
 * emitter using the sink is gone.  A NULL tf gives a sink with fn NULL
 * (tracing off).
 */
XFER_API xfer_trace_sink xfer_tracefile_sink(xfer_tracefile *tf);
XFER_API xfer_trace_sink xfer_tracefile_sink_tagged(xfer_tracefile *tf,
                                                    uint8_t src);

/*
 * xfer_tracefile_write - append one record (`rec` borrowed; its `flags`
 * byte is written as the emitter tag).  The sinks call this.
 * Returns 0 or the first I/O error seen (XFER_ERR_IO); after an error
 * nothing more is written.
 */
XFER_API int xfer_tracefile_write(xfer_tracefile *tf,
                                  const xfer_trace_rec *rec);

/* Flush buffered records to the file.  Returns 0 or XFER_ERR_IO (the first
 * error seen since open). */
XFER_API int xfer_tracefile_flush(xfer_tracefile *tf);

/* Records written since open (across rotations) and rotations done. */
XFER_API uint64_t xfer_tracefile_records(const xfer_tracefile *tf);
XFER_API uint32_t xfer_tracefile_rotations(const xfer_tracefile *tf);

/*
 * xfer_tracefile_close - flush, close and free.  Accepts NULL (returns 0).
 * Returns 0 or XFER_ERR_IO when any write, flush or rotation failed since
 * open (records after the error were dropped).
 */
XFER_API int xfer_tracefile_close(xfer_tracefile *tf);

/* ------------------------------------------------------------------------ */
/* Reader                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct xfer_tracefile_reader xfer_tracefile_reader;

/*
 * Configuration of a reader; copied at open.  Versioned like the options
 * above.
 */
#define XFER_TRACEFILE_READER_CONFIG_VERSION 1
typedef struct xfer_tracefile_reader_config {
    uint32_t version;     /* XFER_TRACEFILE_READER_CONFIG_VERSION */
    xfer_allocator alloc; /* every allocation of the reader (stdio's own
                             buffers excepted); zeroed (the default):
                             libc */
} xfer_tracefile_reader_config;

/* Write version 1 and every default above into *cfg.  `cfg` borrowed;
 * NULL is ignored. */
XFER_API void
xfer_tracefile_reader_config_default(xfer_tracefile_reader_config *cfg);

/*
 * xfer_tracefile_reader_open_config - open a trace file of either format
 * (told apart by its first byte) and check its header.  `path` borrowed;
 * `cfg` copied (NULL: the defaults).  When `why` is not NULL, a one-line
 * reason for a failure is written there (at most whylen bytes,
 * NUL-terminated).  *out untouched on failure.
 * Errors: XFER_ERR_INVALID_ARG (NULL path/out, a config version this
 * library does not know), XFER_ERR_IO (missing or unreadable file),
 * XFER_ERR_FORMAT (empty, short or bad header, bad magic, another version
 * or record size), XFER_ERR_NOMEM.
 *
 * xfer_tracefile_reader_open - the same with the default config.
 */
XFER_API int
xfer_tracefile_reader_open_config(const char *path,
                                  const xfer_tracefile_reader_config *cfg,
                                  xfer_tracefile_reader **out, char *why,
                                  size_t whylen);
XFER_API int xfer_tracefile_reader_open(const char *path,
                                        xfer_tracefile_reader **out,
                                        char *why, size_t whylen);

/* The header read by open (borrowed, valid until close). */
XFER_API const xfer_tracefile_info *
xfer_tracefile_reader_info(const xfer_tracefile_reader *r);

/*
 * xfer_tracefile_reader_next - read the next record into *rec (the emitter
 * tag in rec->flags).  Returns 1 when a record was read, 0 at the end of
 * the file, XFER_ERR_FORMAT for a truncated or malformed record (the
 * records before it were good), XFER_ERR_IO for a read error,
 * XFER_ERR_NOMEM when a JSON line does not fit in memory.  After an error
 * every further call returns the same error.
 */
XFER_API int xfer_tracefile_reader_next(xfer_tracefile_reader *r,
                                        xfer_trace_rec *rec);

/* A one-line description of the last error of open/next (never NULL; ""
 * when none). */
XFER_API const char *xfer_tracefile_reader_why(const xfer_tracefile_reader *r);

/* Close and free.  Accepts NULL. */
XFER_API void xfer_tracefile_reader_close(xfer_tracefile_reader *r);

/*
 * Encode / decode one record in the binary layout above (64 bytes; `buf`
 * borrowed).  For tools and tests that patch files.
 */
XFER_API void xfer_tracefile_encode(const xfer_trace_rec *rec, uint8_t *buf);
XFER_API void xfer_tracefile_decode(const uint8_t *buf, xfer_trace_rec *rec);

#ifdef __cplusplus
}
#endif
#endif /* XFER_TRACEFILE_H */
