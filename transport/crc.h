/*
 * transport/crc.h - CRC32C (Castagnoli, the iSCSI polynomial 0x1EDC6F41,
 * reflected), the checksum of end-to-end integrity (docs/integrity.md):
 * the producer computes one per slice, the shard checks it before READY,
 * the consumer may check it again on take.
 *
 * The values are the standard CRC32C ("123456789" -> 0xE3069283): initial
 * value all ones, final inversion, so a seed of 0 starts a checksum and
 * the CRC of a buffer fed in pieces equals the CRC of the whole:
 *
 *     xfer_crc32c(xfer_crc32c(0, a, na), b, nb) == xfer_crc32c(0, ab, na + nb)
 *
 * Pure computation, any thread.  Not API.
 */
#ifndef XFER_CRC_H
#define XFER_CRC_H

#include <stddef.h>
#include <stdint.h>

/* The CRC32C of buf[0, len) continuing from `seed` (the CRC of what came
 * before, 0 for nothing).  buf borrowed; NULL only with len 0. */
uint32_t xfer_crc32c(uint32_t seed, const void *buf, size_t len);

/* The CRC32C of the concatenation A B, from crc_a = CRC(A), crc_b = CRC(B)
 * and len_b = |B|, without the bytes: for parts checksummed apart (the
 * parts of a streamed transfer, written in any order) and joined in
 * offset order.  O(log len_b). */
uint32_t xfer_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#endif /* XFER_CRC_H */
