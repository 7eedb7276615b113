/*
 * transport/crc.c - CRC32C through Intel's ISA-L (Debian's libisal), which
 * selects the CPU's fastest path at run time (SSE4.2 crc32 and PCLMUL
 * folding on x86, the CRC extension on arm64) and falls back to a table:
 * a kept library, not a hand-written loop (docs/design.md, "Integrity").
 *
 * ISA-L's crc32_iscsi(buf, len, init) neither inverts its initial value
 * nor its result: the standard CRC32C of a buffer is
 * ~crc32_iscsi(buf, len, ~0).  Feeding a standard CRC back as `seed`
 * therefore means passing ~seed in and inverting the result, which makes
 * xfer_crc32c chain (crc.h).  ISA-L takes an int length, so a buffer
 * longer than INT_MAX goes in pieces.
 *
 * Combining (no bytes, only the two CRCs and the second length) is the
 * GF(2) polynomial method of zlib's crc32_combine (Mark Adler), for the
 * Castagnoli polynomial: CRC(A B) = CRC(A) * x^(8 |B|) mod P  xor  CRC(B),
 * with x^(8 |B|) built from the squares x^(2^k) mod P.  ISA-L has no
 * combine, and zlib's is for the other polynomial.
 */
#include "crc.h"

#include <limits.h>

#include <isa-l/crc.h>

#define CRC32C_POLY 0x82F63B78u /* 0x1EDC6F41 reflected */

uint32_t xfer_crc32c(uint32_t seed, const void *buf, size_t len)
{
    uint32_t c = ~seed;
    const unsigned char *p = buf;
    while (len > 0) {
        size_t n = len > (size_t)INT_MAX ? (size_t)INT_MAX : len;
        /* ISA-L's prototype is not const-correct; it only reads */
        c = crc32_iscsi((unsigned char *)p, (int)n, c);
        p += n;
        len -= n;
    }
    return ~c;
}

/* a * b mod P, both reflected polynomials (bit 31 is x^0). */
static uint32_t mult_mod(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

/* x^(n * 2^k) mod P. */
static uint32_t x2n_mod(uint64_t n, unsigned k)
{
    uint32_t p = 1u << 31; /* x^0 */
    uint32_t sq = 1u << 30; /* x^1, squared k times below */
    for (unsigned i = 0; i < k; i++)
        sq = mult_mod(sq, sq);
    while (n) {
        if (n & 1)
            p = mult_mod(sq, p);
        n >>= 1;
        sq = mult_mod(sq, sq);
    }
    return p;
}

uint32_t xfer_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
    /* bytes -> bits: x^(8 len_b) = x^(len_b * 2^3) */
    return mult_mod(x2n_mod(len_b, 3), crc_a) ^ crc_b;
}
