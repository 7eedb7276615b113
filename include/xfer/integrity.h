/*
 * xfer/integrity.h - end-to-end integrity (docs/integrity.md): a CRC32C
 * per slice, computed by the producer from its staging after the gate,
 * carried in COMMIT and EAGER, checked by the shard before READY and,
 * when asked, by the consumer on take.
 *
 * The mode is set per group: on the shard servers of the group
 * (xfer_server_config.integrity), on the producer's transport
 * (xfer_tcp_config / xfer_rdma_config .integrity) and on the consumer
 * (xfer_consumer_config.integrity).  A link checks when both its ends
 * have it on: a shard that checks says so in HELLO_ACK, and a producer
 * that computes sends its CRC only to such a shard.  A peer from before
 * integrity (or with it off) leaves that link unchecked and working.
 */
#ifndef XFER_INTEGRITY_H
#define XFER_INTEGRITY_H

#include "xfer/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum xfer_integrity {
    XFER_INTEGRITY_DEFAULT = 0,  /* a zeroed config: the default below */
    XFER_INTEGRITY_OFF = 1,      /* no checksum computed or checked */
    XFER_INTEGRITY_SHARD = 2,    /* the shard checks before READY */
    XFER_INTEGRITY_CONSUMER = 3, /* the shard, and the consumer on take */
    XFER_INTEGRITY_COUNT_
} xfer_integrity;

/* What XFER_INTEGRITY_DEFAULT means (chosen by measurement: docs/perf.md,
 * "Integrity"). */
#define XFER_INTEGRITY_DEFAULT_MODE XFER_INTEGRITY_SHARD

/* "default", "off", "shard", "consumer"; "?" out of range.  Any thread. */
XFER_API const char *xfer_integrity_name(unsigned mode);

#ifdef __cplusplus
}
#endif
#endif /* XFER_INTEGRITY_H */
