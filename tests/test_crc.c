/*
 * tests/test_crc.c - CRC32C (transport/crc.c): the standard check value
 * through ISA-L's convention, chaining through the seed, lengths that are
 * not multiples of any word, and the combine that joins parts checksummed
 * apart, each against a bitwise reference written from the definition.
 * Randomised cases print their seed and take one from XFER_SEED.
 */
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "crc.h"
#include "testutil.h"

/* The definition, one bit at a time: reflected 0x1EDC6F41, init and final
 * inversion. */
static uint32_t ref_crc(uint32_t seed, const uint8_t *p, size_t n)
{
    uint32_t c = ~seed;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int b = 0; b < 8; b++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

START_TEST(test_crc_check_value)
{
    /* the CRC-32C check value (RFC 3720 B.4 polynomial; "123456789") */
    ck_assert_uint_eq(xfer_crc32c(0, "123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(xfer_crc32c(0, NULL, 0), 0u);
    /* RFC 3720 B.4: 32 bytes of zeros, 32 of 0xFF */
    uint8_t z[32] = {0}, f[32];
    memset(f, 0xFF, sizeof f);
    ck_assert_uint_eq(xfer_crc32c(0, z, sizeof z), 0x8A9136AAu);
    ck_assert_uint_eq(xfer_crc32c(0, f, sizeof f), 0x62A8AB43u);
}
END_TEST

START_TEST(test_crc_matches_reference_and_chains)
{
    uint64_t rng = tu_seed("test_crc_matches_reference_and_chains", 27);
    enum { N = 5000 };
    uint8_t *buf = malloc(N);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < N; i++)
        buf[i] = (uint8_t)tu_rand(&rng);
    for (int round = 0; round < 200; round++) {
        size_t off = (size_t)(tu_rand(&rng) % 64);
        size_t n = (size_t)(tu_rand(&rng) % (N - 64));
        size_t cut = n ? (size_t)(tu_rand(&rng) % n) : 0;
        uint32_t whole = xfer_crc32c(0, buf + off, n);
        ck_assert_uint_eq(whole, ref_crc(0, buf + off, n));
        uint32_t a = xfer_crc32c(0, buf + off, cut);
        ck_assert_uint_eq(xfer_crc32c(a, buf + off + cut, n - cut), whole);
    }
    free(buf);
}
END_TEST

START_TEST(test_crc_combine_joins_parts)
{
    uint64_t rng = tu_seed("test_crc_combine_joins_parts", 26);
    enum { N = 70000 };
    uint8_t *buf = malloc(N);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < N; i++)
        buf[i] = (uint8_t)tu_rand(&rng);
    for (int round = 0; round < 200; round++) {
        size_t n = (size_t)(tu_rand(&rng) % N);
        size_t cut = n ? (size_t)(tu_rand(&rng) % (n + 1)) : 0;
        uint32_t a = xfer_crc32c(0, buf, cut);
        uint32_t b = xfer_crc32c(0, buf + cut, n - cut);
        ck_assert_uint_eq(xfer_crc32c_combine(a, b, n - cut),
                          xfer_crc32c(0, buf, n));
    }
    /* an empty second part changes nothing; an empty first part is B */
    uint32_t c = xfer_crc32c(0, buf, 100);
    ck_assert_uint_eq(xfer_crc32c_combine(c, 0, 0), c);
    ck_assert_uint_eq(xfer_crc32c_combine(0, c, 100), c);
    /* three parts, joined left to right, as a stream's would be */
    uint32_t p1 = xfer_crc32c(0, buf, 1000);
    uint32_t p2 = xfer_crc32c(0, buf + 1000, 4096);
    uint32_t p3 = xfer_crc32c(0, buf + 5096, 3);
    uint32_t j = xfer_crc32c_combine(xfer_crc32c_combine(p1, p2, 4096), p3, 3);
    ck_assert_uint_eq(j, xfer_crc32c(0, buf, 5099));
    free(buf);
}
END_TEST

START_TEST(test_crc_one_bit_flip_detected)
{
    /* a single flipped bit anywhere in 1 MiB changes the CRC (CRC32C
     * detects every burst shorter than 32 bits) */
    enum { N = 1 << 20 };
    uint8_t *buf = calloc(1, N);
    ck_assert_ptr_nonnull(buf);
    uint32_t good = xfer_crc32c(0, buf, N);
    for (size_t bit = 0; bit < (size_t)N * 8; bit += 8 * 4099 + 3) {
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        ck_assert_uint_ne(xfer_crc32c(0, buf, N), good);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    ck_assert_uint_eq(xfer_crc32c(0, buf, N), good);
    free(buf);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("crc");
    TCase *tc = tcase_create("crc");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_crc_check_value);
    tcase_add_test(tc, test_crc_matches_reference_and_chains);
    tcase_add_test(tc, test_crc_combine_joins_parts);
    tcase_add_test(tc, test_crc_one_bit_flip_detected);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
