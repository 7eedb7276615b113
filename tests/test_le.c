/*
 * tests/test_le.c - the little-endian codec (fsm/le.h): the byte order on
 * the page, that a bounded encoder never writes past its buffer and
 * measures what it needed, and that a bounded decoder fails sticky at its
 * end instead of reading past it.
 */
#include <check.h>
#include <string.h>

#include "le.h"
#include "testutil.h"

START_TEST(test_le_bytes_are_little_endian)
{
    uint8_t b[8];
    xfer_le_put16(b, 0x0102);
    ck_assert_uint_eq(b[0], 0x02);
    ck_assert_uint_eq(b[1], 0x01);
    xfer_le_put32(b, 0x01020304u);
    const uint8_t w32[] = {4, 3, 2, 1};
    ck_assert_mem_eq(b, w32, 4);
    xfer_le_put64(b, 0x0102030405060708ull);
    const uint8_t w64[] = {8, 7, 6, 5, 4, 3, 2, 1};
    ck_assert_mem_eq(b, w64, 8);
    ck_assert_uint_eq(xfer_le_get64(b), 0x0102030405060708ull);
    ck_assert_uint_eq(xfer_le_get32(b + 4), 0x01020304u);
    ck_assert_uint_eq(xfer_le_get16(b + 6), 0x0102);
    /* the top bit survives every width */
    xfer_le_put64(b, UINT64_MAX - 1);
    ck_assert_uint_eq(xfer_le_get64(b), UINT64_MAX - 1);
}
END_TEST

START_TEST(test_le_encoder_round_trips_through_decoder)
{
    uint8_t buf[32];
    xfer_le_enc e = xfer_le_enc_start(buf, sizeof buf);
    xfer_le_enc_u8(&e, 0xA5);
    xfer_le_enc_u16(&e, 0xBEEF);
    xfer_le_enc_u32(&e, 0xDEADBEEFu);
    xfer_le_enc_u64(&e, 0x0123456789ABCDEFull);
    xfer_le_enc_bytes(&e, "xyz", 3);
    ck_assert(xfer_le_enc_fits(&e));
    ck_assert_uint_eq(e.at, 1 + 2 + 4 + 8 + 3);
    xfer_le_dec d = xfer_le_dec_start(buf, e.at);
    ck_assert_uint_eq(xfer_le_dec_u8(&d), 0xA5);
    ck_assert_uint_eq(xfer_le_dec_u16(&d), 0xBEEF);
    ck_assert_uint_eq(xfer_le_dec_u32(&d), 0xDEADBEEFu);
    ck_assert_uint_eq(xfer_le_dec_u64(&d), 0x0123456789ABCDEFull);
    const uint8_t *p = xfer_le_dec_take(&d, 3);
    ck_assert_ptr_nonnull(p);
    ck_assert_mem_eq(p, "xyz", 3);
    ck_assert(xfer_le_dec_done(&d));
}
END_TEST

/* A write that does not fit is counted, never stored; the encoder then
 * says how many bytes the whole encoding needed. */
START_TEST(test_le_encoder_never_writes_past_its_buffer)
{
    uint8_t buf[16];
    memset(buf, 0xEE, sizeof buf);
    xfer_le_enc e = xfer_le_enc_start(buf, 6);
    xfer_le_enc_u32(&e, 1);
    xfer_le_enc_u32(&e, 2); /* 4 + 4 > 6: dropped whole */
    xfer_le_enc_u8(&e, 3);  /* after an overflow: dropped too */
    ck_assert(!xfer_le_enc_fits(&e));
    ck_assert_uint_eq(e.at, 9);
    for (size_t i = 4; i < sizeof buf; i++)
        ck_assert_uint_eq(buf[i], 0xEE);
    /* NULL with no room only measures. */
    xfer_le_enc m = xfer_le_enc_start(NULL, 0);
    xfer_le_enc_u64(&m, 7);
    xfer_le_enc_bytes(&m, buf, 5);
    ck_assert_uint_eq(m.at, 13);
    ck_assert(!xfer_le_enc_fits(&m));
    /* exactly full still fits */
    xfer_le_enc f = xfer_le_enc_start(buf, 8);
    xfer_le_enc_u64(&f, 7);
    ck_assert(xfer_le_enc_fits(&f));
}
END_TEST

START_TEST(test_le_decoder_fails_sticky_at_its_end)
{
    const uint8_t buf[5] = {1, 2, 3, 4, 5};
    xfer_le_dec d = xfer_le_dec_start(buf, sizeof buf);
    ck_assert_uint_eq(xfer_le_dec_u32(&d), 0x04030201u);
    ck_assert(xfer_le_dec_ok(&d));
    ck_assert(!xfer_le_dec_done(&d));
    ck_assert_uint_eq(xfer_le_dec_u16(&d), 0); /* one byte left: too few */
    ck_assert(!xfer_le_dec_ok(&d));
    ck_assert_uint_eq(xfer_le_dec_u8(&d), 0); /* sticky, though it fits */
    ck_assert(!xfer_le_dec_done(&d));
    ck_assert_uint_eq(d.at, 4);
    xfer_le_dec s = xfer_le_dec_start(buf, sizeof buf);
    xfer_le_dec_skip(&s, 6);
    ck_assert(!xfer_le_dec_ok(&s));
    ck_assert_ptr_null(xfer_le_dec_take(&s, 0));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("le");
    TCase *tc = tcase_create("le");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_le_bytes_are_little_endian);
    tcase_add_test(tc, test_le_encoder_round_trips_through_decoder);
    tcase_add_test(tc, test_le_encoder_never_writes_past_its_buffer);
    tcase_add_test(tc, test_le_decoder_fails_sticky_at_its_end);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
