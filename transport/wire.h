/*
 * transport/wire.h - the xfer wire protocol (version 1 and its HELLO2
 * extension): pure encode and
 * decode of the frames spoken between a producer (the tcp transport), a
 * consumer scheduler, admin tools and xferd.  No I/O here.
 *
 * FRAMING.  Every frame starts with a 16-byte header, little-endian:
 *
 *     off size field
 *       0   4  magic    0x57524658, the bytes "XFRW"
 *       4   1  version  XFER_WIRE_VERSION (1); anything else is refused
 *       5   1  type     xfer_wire_type
 *       6   2  flags    0 in version 1; anything else is refused
 *       8   4  length   whole frame in bytes, header included
 *      12   4  req      request id chosen by the sender of a request; every
 *                       reply (including ERROR) echoes it; events carry 0
 *
 * Every type except WRITE and EAGER has one exact length (header + its
 * fixed body); any other length is a protocol error.  A WRITE is its
 * 32-byte fixed body followed by `len` data bytes, so its length is exactly
 * 48 + len and at most XFER_WIRE_MAX_FRAME; an EAGER is its 16-byte fixed
 * body followed by `len` data bytes (32 + len).  A receiver therefore knows from the 16 header
 * bytes alone whether a frame is acceptable and how long it is, before it
 * buffers anything: an oversize length is refused on sight.
 *
 * Reserved fields ("rsv") are sent as 0 and ignored on receipt.
 *
 * MESSAGES (body offsets from the end of the header):
 *
 *  HELLO      c->s  u16 version, u8 role, u8 rsv, u32 group, u16 shard,
 *                   u16 rsv (12).  Names the shard this connection talks
 *                   to; every op on the connection is for that shard.
 *  HELLO_ACK  s->c  u16 version, u16 shard, u32 group, u64 pool_bytes,
 *                   u64 lease_ttl_ns, u32 max_write, u32 flags (32).
 *                   flags bit 0 (XFER_WIRE_HELLO_EAGER): the shard applies
 *                   EAGER; the other bits are sent as 0 and ignored.  A
 *                   server from before the eager path sends 0 there (it
 *                   was reserved), so its producers never send EAGER.
 *  RESERVE    c->s  u64 id, u32 attempt, u32 len (16).
 *  RESERVE_OK s->c  u64 id, u32 attempt, u32 len, u64 resv_id, u64 addr,
 *                   u32 rkey, u32 rsv (40).  addr is the region's offset in
 *                   the shard pool (TCP) or its remote address (RDMA, with
 *                   rkey); the control protocol is the same for both.
 *  WRITE      c->s  u64 id, u32 attempt, u32 len, u64 resv_id, u64 off (32),
 *                   then len data bytes, landing at off inside the
 *                   reservation.  The TCP data path; RDMA moves bytes
 *                   one-sidedly and never sends WRITE.
 *  WRITE_ACK  s->c  u64 id, u32 attempt, u32 len, u64 resv_id (24): the
 *                   bytes were applied to the reservation.
 *  COMMIT, COMMIT_ACK, CANCEL, CANCEL_ACK
 *                   u64 id, u32 attempt, u32 rsv, u64 resv_id (24).  A
 *                   cancel may carry resv_id 0 (XFER_RESV_NONE): the reserve
 *                   reply never came.
 *  EVENT      s->c  u8 kind (xfer_shard_event_kind: ready / cancelled /
 *                   expired), u8 rsv, u16 shard, u32 attempt, u64 id,
 *                   u64 resv_id, u32 len, u32 rsv (32).  Sent to
 *                   subscribers, req 0.
 *  SUBSCRIBE  c->s  u64 rsv (8): stream the EVENTs of the connection's
 *                   shard to it.  Answered by SUBSCRIBE_ACK (same body).
 *  TAKE       c->s  u64 id, u32 attempt, u32 rsv, u64 resv_id (24): pin
 *                   READY data for the consumer.  TAKE_OK: u64 id,
 *                   u32 attempt, u32 len, u64 resv_id, u64 addr (32).
 *  RELEASE, RELEASE_ACK
 *                   like COMMIT: free TAKEN data.
 *  STATUS     c->s  u16 shard (0xFFFF: every hosted shard, summed),
 *                   u16 rsv, u32 rsv (8).  Needs no HELLO on a server
 *                   without a secret; with one, an authenticated HELLO2.
 *  STATUS_OK  s->c  u16 shard, u16 nshards, u32 conns, then 14 u64
 *                   counters (see xfer_wire_status) (120).
 *  ERROR      s->c  i32 code (xfer_err), u8 req_type, u8 rsv, u16 shard,
 *                   u64 id, u32 attempt, u32 rsv (24).  The answer to a
 *                   request that failed; the connection stays open.
 *  HELLO2     c->s  u16 version (2), u8 role, u8 rsv, u32 group, u16 shard,
 *                   u16 rsv, u8 session[16], u8 nonce[16] (44).  HELLO with
 *                   a session identity (the same across the client's
 *                   reconnects) and the client's challenge nonce.
 *  CHALLENGE  s->c  u8 nonce[16], u8 mac[32] (48): the server's nonce and
 *                   its proof HMAC(secret, "xfer-s" hello snonce) (below).
 *  AUTH       c->s  u8 mac[32] (32): the client's proof, same req as its
 *                   HELLO2; HELLO_ACK (or ERROR AUTH, then close) answers.
 *  STATUS_BAD c->s  u64 rsv (8): the whole server's refusals, with the
 *                   access rule of STATUS.  STATUS_BAD_OK s->c: u32 n (9),
 *                   u32 rsv, u64 bad frames by reason [9] (xfer_wire_reason
 *                   order), u64 auth_failed, conns_refused, timeouts,
 *                   writes_stalled, subs_dropped (120).
 *
 *  COMMIT_CRC c->s  u64 id, u32 attempt, u32 crc, u64 resv_id (24): a
 *                   COMMIT that carries the CRC32C (transport/crc.h) of
 *                   the reservation's bytes as the producer staged them;
 *                   the shard checksums what it holds and answers ERROR
 *                   CORRUPT, committing nothing, when the two differ
 *                   (docs/integrity.md).  Sent only to a shard whose
 *                   HELLO_ACK set XFER_WIRE_HELLO_CRC; answered COMMIT_ACK.
 *  EAGER_CRC  c->s  u64 id, u32 attempt, u32 len, u32 crc, u32 rsv (24),
 *                   then len data bytes: an EAGER with the data's CRC32C,
 *                   refused whole (CORRUPT) when the data does not match.
 *                   Same rule for sending; answered EAGER_OK.
 *                   HELLO_ACK flag bit 1 (XFER_WIRE_HELLO_CRC): the shard
 *                   checks these; a server from before integrity sends 0
 *                   there, so its producers send plain COMMIT and EAGER
 *                   and that link runs with integrity off.
 *                   EVENT's u8 after the kind is its flags: bit 0
 *                   (XFER_WIRE_EVENT_CRC) says its last u32 (rsv before)
 *                   holds the CRC32C the shard checked the region against,
 *                   for a consumer that checks again on take.
 *
 *  EAGER      c->s  u64 id, u32 attempt, u32 len (16), then len data
 *                   bytes: reserve len bytes, copy the data in and commit,
 *                   applied whole or refused whole (the eager path of
 *                   small blocks, docs/design.md 2.1).  Answered by
 *                   EAGER_OK (the body of RESERVE_OK, 40: the reservation
 *                   id, its offset, rkey 0) or ERROR.  A server that never
 *                   set XFER_WIRE_HELLO_EAGER refuses it as BAD_TYPE.
 *
 *  REFRESH    c->s  u64 id, u32 attempt, u32 rsv, u64 resv_id, u64 want_ns
 *                   (32): extend the lease of the owner's reservation by
 *                   at most want_ns from now (0: one whole lease), never
 *                   past the shard's hold cap (xfer_shard_refresh; a
 *                   stream waiting for its parts, docs/streaming.md).
 *                   Answered by REFRESH_OK: u64 id, u32 attempt, u32 rsv,
 *                   u64 resv_id, u64 granted_ns (32), the time from the
 *                   shard's now to the lease's end; or by ERROR with the
 *                   shard's code (PERM, STALE, STATE, BOUNDS at the cap,
 *                   EXPIRED, CANCELLED, NOT_FOUND).  Sent only to a shard
 *                   whose HELLO_ACK set flag bit 2 (XFER_WIRE_HELLO_REFRESH,
 *                   4); an older server refuses the type (BAD_TYPE).
 *
 * SESSIONS AND AUTHENTICATION (the v1 extension of issue 12).  A peer that
 * knows no better sends HELLO (type 1): the server, when it runs without a
 * secret, gives that connection a session of its own that ends with it;
 * with a secret it answers ERROR (XFER_ERR_AUTH) and closes.  HELLO2 names
 * the client's session.  A server without a secret answers it with
 * HELLO_ACK; one with a secret sends CHALLENGE, and the client answers
 * AUTH.  The proofs (transport/auth.h) are HMAC-SHA256 under the shared
 * secret over a label ("xfer-s" for the server, "xfer-c" for the client),
 * the HELLO2 body (role, group, shard, session and the client nonce) and
 * the server nonce; both sides check the other's proof with a
 * constant-time compare, so each proves it knows the secret to the other
 * and neither proof can be replayed under fresh nonces.  A v1 peer refuses
 * HELLO2, CHALLENGE and AUTH as an unknown type (BAD_TYPE: it closes).
 *
 * Bad input (a frame the decoder refuses, or a request that makes no sense
 * on this connection, such as an op before HELLO) closes that connection;
 * a well-formed request the shard refuses gets an ERROR with the shard's
 * code and the connection stays open.
 *
 * What must stay true: the decoder reads only inside the buffer it was
 * given, whatever the bytes; every length, offset and count is checked
 * before use; no input makes it assert or allocate.
 */
#ifndef XFER_WIRE_H
#define XFER_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define XFER_WIRE_MAGIC 0x57524658u /* "XFRW" little-endian */
#define XFER_WIRE_VERSION 1u
#define XFER_WIRE_HDR 16u
#define XFER_WIRE_WRITE_FIXED 32u
/* Largest frame: a WRITE of up to 64 MiB of data. */
#define XFER_WIRE_MAX_DATA (64u << 20)
#define XFER_WIRE_MAX_FRAME (XFER_WIRE_HDR + XFER_WIRE_WRITE_FIXED + \
                             XFER_WIRE_MAX_DATA)
/* The most data an EAGER carries: it is buffered whole before it is cut
 * (xfer_wire_frame_cut), so it stays small; larger blocks take the
 * three rounds. */
#define XFER_WIRE_MAX_EAGER (256u << 10)
/* Largest fixed-size frame (STATUS_OK); a buffer this big decodes any
 * frame but a WRITE's data. */
#define XFER_WIRE_MAX_FIXED 136u
#define XFER_WIRE_SHARD_ALL 0xFFFFu

/* Message types.  Never renumbered; 0 is invalid. */
#define XFER_WIRE_TYPES(X)                                                    \
    X(HELLO, 1, 12)                                                           \
    X(HELLO_ACK, 2, 32)                                                       \
    X(RESERVE, 3, 16)                                                         \
    X(RESERVE_OK, 4, 40)                                                      \
    X(WRITE, 5, 32)                                                           \
    X(WRITE_ACK, 6, 24)                                                       \
    X(COMMIT, 7, 24)                                                          \
    X(COMMIT_ACK, 8, 24)                                                      \
    X(CANCEL, 9, 24)                                                          \
    X(CANCEL_ACK, 10, 24)                                                     \
    X(EVENT, 11, 32)                                                          \
    X(SUBSCRIBE, 12, 8)                                                       \
    X(SUBSCRIBE_ACK, 13, 8)                                                   \
    X(TAKE, 14, 24)                                                           \
    X(TAKE_OK, 15, 32)                                                        \
    X(RELEASE, 16, 24)                                                        \
    X(RELEASE_ACK, 17, 24)                                                    \
    X(STATUS, 18, 8)                                                          \
    X(STATUS_OK, 19, 120)                                                     \
    X(ERROR, 20, 24)                                                          \
    X(HELLO2, 21, 44)                                                         \
    X(CHALLENGE, 22, 48)                                                      \
    X(AUTH, 23, 32)                                                           \
    X(STATUS_BAD, 24, 8)                                                      \
    X(STATUS_BAD_OK, 25, 120)                                                 \
    X(EAGER, 26, 16)                                                          \
    X(EAGER_OK, 27, 40)                                                       \
    X(REFRESH, 28, 32)                                                        \
    X(REFRESH_OK, 29, 32)                                                     \
    X(COMMIT_CRC, 30, 24)                                                     \
    X(EAGER_CRC, 31, 24)

typedef enum xfer_wire_type {
    XFER_WIRE_T_INVALID = 0,
#define XFER_WIRE_ENUM_(name, val, body) XFER_WIRE_T_##name = (val),
    XFER_WIRE_TYPES(XFER_WIRE_ENUM_)
#undef XFER_WIRE_ENUM_
    XFER_WIRE_T_COUNT_
} xfer_wire_type;

/* HELLO_ACK flags. */
#define XFER_WIRE_HELLO_EAGER 1u
#define XFER_WIRE_HELLO_CRC 2u /* the shard checks COMMIT_CRC/EAGER_CRC */
#define XFER_WIRE_HELLO_REFRESH 4u /* the shard grants REFRESH */

/* EVENT flags (the byte after its kind). */
#define XFER_WIRE_EVENT_CRC 1u /* the event's crc field holds the CRC32C */

/* The eager types: EAGER, and EAGER_CRC (the same op with a checksum). */
static inline int xfer_wire_is_eager(unsigned type)
{
    return type == XFER_WIRE_T_EAGER || type == XFER_WIRE_T_EAGER_CRC;
}

/* The types followed by `len` data bytes (WRITE, EAGER, EAGER_CRC). */
static inline int xfer_wire_has_data(unsigned type)
{
    return type == XFER_WIRE_T_WRITE || xfer_wire_is_eager(type);
}

/* HELLO roles. */
enum { XFER_WIRE_ROLE_PRODUCER = 1, XFER_WIRE_ROLE_CONSUMER = 2,
       XFER_WIRE_ROLE_ADMIN = 3 };

/* Why a frame was refused (counted per reason by receivers). */
#define XFER_WIRE_REASONS(X)                                                  \
    X(OK) X(BAD_MAGIC) X(BAD_VERSION) X(BAD_FLAGS) X(BAD_TYPE)                \
    X(BAD_LENGTH) X(BAD_FIELD) X(UNEXPECTED) X(TRUNCATED)

typedef enum xfer_wire_reason {
#define XFER_WIRE_ENUM_(name) XFER_WIRE_R_##name,
    XFER_WIRE_REASONS(XFER_WIRE_ENUM_)
#undef XFER_WIRE_ENUM_
    XFER_WIRE_R_COUNT_
} xfer_wire_reason;

typedef struct xfer_wire_hdr {
    uint8_t type;
    uint32_t len; /* whole frame */
    uint32_t req;
} xfer_wire_hdr;

/* What a STATUS_BAD_OK carries. */
#define XFER_WIRE_BAD_SLOTS 9u
typedef struct xfer_wire_bad {
    uint32_t n;                                /* reasons that follow */
    uint64_t by_reason[XFER_WIRE_BAD_SLOTS];
    uint64_t auth_failed, conns_refused, timeouts, writes_stalled;
    uint64_t subs_dropped;
} xfer_wire_bad;

/* The shard counters a STATUS_OK carries. */
typedef struct xfer_wire_status {
    uint16_t shard, nshards;
    uint32_t conns;
    uint64_t pool_bytes, bytes_in_use, live, tombstones;
    uint64_t reserves, refused, writes, commits, cancels, expiries;
    uint64_t bad_frames, errors_sent, events_sent, write_bytes;
} xfer_wire_status;

/*
 * One decoded message (fixed part).  Which fields mean something depends on
 * the type (see the table above); the rest are 0.  For a WRITE, `len` is the
 * data length and the data follows the fixed part in the frame.
 */
#define XFER_WIRE_SESSION 16u /* bytes of a session identity */
#define XFER_WIRE_NONCE 16u
#define XFER_WIRE_MAC 32u     /* HMAC-SHA256 */

typedef struct xfer_wire_msg {
    uint8_t type;
    uint8_t session[XFER_WIRE_SESSION]; /* HELLO2 */
    uint8_t nonce[XFER_WIRE_NONCE];     /* HELLO2 (client's), CHALLENGE */
    uint8_t mac[XFER_WIRE_MAC];         /* CHALLENGE (server's), AUTH */
    uint8_t role, kind, req_type;
    uint16_t version, shard;
    uint32_t group, attempt, len, rkey, max_write;
    uint32_t hello_flags; /* HELLO_ACK: XFER_WIRE_HELLO_* */
    /* COMMIT, EAGER, EVENT: crc_set says crc holds the CRC32C of the
     * region (xfer_wire_msg.type stays COMMIT or EAGER: a COMMIT_CRC or
     * EAGER_CRC frame decodes to its op with crc_set, and such a message
     * encodes as one; an EVENT carries it in its flags) */
    uint32_t crc;
    uint8_t crc_set;
    int32_t code;
    uint64_t id, resv_id, addr, off;
    uint64_t pool_bytes, lease_ttl_ns;
    uint64_t hold_ns; /* REFRESH: the lease asked for (0: a whole one);
                         REFRESH_OK: the time the lease now runs */
    xfer_wire_status st;
    xfer_wire_bad bad; /* STATUS_BAD_OK */
} xfer_wire_msg;

/* Result of xfer_wire_decode_hdr() when fewer than 16 bytes are given. */
#define XFER_WIRE_NEED_MORE 1

/*
 * Decode and check a header.  buf: n readable bytes (borrowed).  Returns 0
 * (*h written), XFER_WIRE_NEED_MORE (n < 16), or XFER_ERR_PROTO with
 * *reason set (bad magic, version, flags, type, or a length that is not the
 * type's).
 */
int xfer_wire_decode_hdr(const void *buf, size_t n, xfer_wire_hdr *h,
                         xfer_wire_reason *reason);

/*
 * Decode the fixed body of a frame whose header `h` was accepted.  body: n
 * readable bytes following the header; n must be at least the type's fixed
 * body size (for WRITE, only the 32-byte fixed part is read).  Checks every
 * field that has a range (roles, event kinds, a WRITE's off + len).
 * Returns 0 (*m written) or XFER_ERR_PROTO with *reason (*m untouched).
 */
/* The error a peer's ERROR frame may make us report: a code of the
 * errors list in the band peers may send (above the fatal band,
 * XFER_ERR_FATAL_BAND) as it is; a code in that band that this build does not know (a
 * newer peer's) as XFER_ERR_REMOTE; 0 for anything else (0, a positive
 * value, the fatal band, or a code only the producer itself gives: its
 * transport's CONN_LOST and ABORTED, its TIMEOUT, ABANDONED, REUSED,
 * NO_POOL and PEER_CANCELLED, a consumer's UNAVAILABLE): the frame is refused, so a shard can never make
 * a transfer report success by an ERROR, nor a code it may not send. */
int32_t xfer_wire_peer_code(int32_t code);

int xfer_wire_decode_body(const xfer_wire_hdr *h, const void *body, size_t n,
                          xfer_wire_msg *m, xfer_wire_reason *reason);

/* Decode a whole frame held in buf (header + fixed body).  Returns 0,
 * XFER_WIRE_NEED_MORE, or XFER_ERR_PROTO. */
int xfer_wire_decode(const void *buf, size_t n, xfer_wire_hdr *h,
                     xfer_wire_msg *m, xfer_wire_reason *reason);

/*
 * Encode m (type m->type) with request id req into buf (cap bytes).  For a
 * WRITE only the header and fixed part are written; the header's length
 * counts the m->len data bytes the caller sends next.  Returns the bytes
 * written, or 0 when cap is too small or m is not encodable (unknown type,
 * WRITE data over XFER_WIRE_MAX_DATA).
 */
size_t xfer_wire_encode(const xfer_wire_msg *m, uint32_t req, void *buf,
                        size_t cap);

/* The fixed body size of a type, or 0 for an unknown type. */
size_t xfer_wire_body_size(unsigned type);
/* Names for traces and tools; never NULL. */
const char *xfer_wire_type_name(unsigned type);
const char *xfer_wire_reason_name(unsigned reason);

#endif /* XFER_WIRE_H */
