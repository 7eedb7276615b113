/*
 * xfer/errors.h - the one error space of xfer.
 *
 * Every error is generated from XFER_ERRNO_MAP, so the enum and the strings
 * never drift apart.  Codes are negative, stable and never renumbered: a new
 * error gets a new number at the end of its band.  Codes at or below
 * XFER_ERR_FATAL_BAND mean the object that returned them is unusable.
 */
#ifndef XFER_ERRORS_H
#define XFER_ERRORS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the exported API (the library builds with -fvisibility=hidden). */
#if defined(__GNUC__) || defined(__clang__)
#define XFER_API __attribute__((visibility("default")))
#else
#define XFER_API
#endif

/* X(name, value, message) */
#define XFER_ERRNO_MAP(X)                                                     \
    X(OK,            0, "success")                                            \
    X(INVALID_ARG,  -1, "invalid argument")                                   \
    X(NOMEM,        -2, "out of memory")                                      \
    X(BUSY,         -3, "table or queue full")                                \
    X(CANCELLED,    -4, "transfer cancelled or id tombstoned")                \
    X(EXISTS,       -5, "id already in use")                                  \
    X(NOT_FOUND,    -6, "no such id")                                         \
    X(SHUTDOWN,     -7, "engine is shutting down")                            \
    X(TIMEOUT,      -8, "deadline passed")                                    \
    X(REMOTE,       -9, "shard refused the operation")                        \
    X(NO_SPACE,    -10, "shard pool has no room")                             \
    X(IO,          -11, "transport i/o error")                                \
    X(CONN_LOST,   -12, "connection to shard lost")                           \
    X(PROTO,       -13, "protocol violation by peer")                         \
    X(ABORTED,     -14, "operation aborted")                                  \
    X(EXPIRED,     -15, "lease expired")                                      \
    X(STALE,       -16, "stale attempt or reservation id")                    \
    X(STATE,       -17, "operation not valid in this state")                  \
    X(BOUNDS,      -18, "offset or length outside the reservation")           \
    X(UNAVAILABLE, -19, "not every shard became ready")                       \
    X(NOT_SUPPORTED, -20, "not supported by this build or device")            \
    X(FORMAT,      -21, "bad file format or version")                         \
    X(TOO_SMALL,   -22, "buffer too small for the result")                    \
    X(PERM,        -23, "not permitted: another session's, or not this role's") \
    X(AUTH,        -24, "peer authentication failed")                         \
    X(INCOMPLETE,  -25, "not every byte of the reservation was written")      \
    X(ABANDONED,   -26, "shutdown deadline passed: left to the shards' leases") \
    X(REUSED,      -27, "id finished recently (tombstoned); use a new id")   \
    X(NO_POOL,     -28, "no such staging pool or group")                      \
    X(PEER_CANCELLED, -29, "cancelled on the shard, by a consumer or the shard") \
    X(COPY,        -30, "device copy failed")                                 \
    X(CORRUPT,    -31, "checksum mismatch: data corrupt")                     \
    X(SHARD_GONE,  -32, "shard left its group")                               \
    X(INTERNAL,   -100, "internal error (bug in xfer)")

#define XFER_ERR_FATAL_BAND (-100)

typedef enum xfer_err {
#define XFER_ERR_ENUM_(name, value, msg) XFER_ERR_##name = (value),
    XFER_ERRNO_MAP(XFER_ERR_ENUM_)
#undef XFER_ERR_ENUM_
    XFER_ERR_MIN_ = -101
} xfer_err;

/* XFER_OK is the usual spelling of success. */
#define XFER_OK XFER_ERR_OK

/*
 * xfer_strerror - a static, human-readable message for an error code.
 * Never returns NULL; unknown codes give "unknown error".  Any thread.
 */
XFER_API const char *xfer_strerror(int err);

/*
 * xfer_err_name - the enum name without prefix ("BUSY"), or "UNKNOWN".
 * Never returns NULL.  Any thread.
 */
XFER_API const char *xfer_err_name(int err);

#ifdef __cplusplus
}
#endif
#endif /* XFER_ERRORS_H */
