/*
 * tests/test_errors.c - the one error space (xfer/errors.h, fsm/errors.c):
 * every code of XFER_ERRNO_MAP has a distinct value, negative except OK,
 * its own message and its name; codes outside the list are "unknown"; the
 * fatal band holds exactly the codes at or below XFER_ERR_FATAL_BAND, and
 * the ordinary codes count down from -1 without a gap (a new error takes
 * the next number at the end of its band).  Public API only.
 */
#include <check.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include "testutil.h"
#include "xfer/errors.h"

typedef struct err_entry {
    const char *name;
    int value;
    const char *msg;
} err_entry;

static const err_entry E[] = {
#define X_(name, value, msg) {#name, (value), (msg)},
    XFER_ERRNO_MAP(X_)
#undef X_
};
#define NE (sizeof E / sizeof E[0])

static bool listed(int v)
{
    for (size_t i = 0; i < NE; i++)
        if (E[i].value == v)
            return true;
    return false;
}

START_TEST(test_errors_codes_distinct_and_negative)
{
    ck_assert_int_eq(XFER_OK, 0);
    ck_assert_int_eq(E[0].value, XFER_ERR_OK);
    ck_assert_str_eq(E[0].name, "OK");
    for (size_t i = 1; i < NE; i++) {
        ck_assert_int_lt(E[i].value, 0);
        ck_assert_int_gt(E[i].value, XFER_ERR_MIN_); /* the enum's floor */
        for (size_t j = 0; j < i; j++) {
            ck_assert_int_ne(E[i].value, E[j].value);
            ck_assert_str_ne(E[i].name, E[j].name);
        }
    }
}
END_TEST

START_TEST(test_errors_every_code_has_message_and_name)
{
    for (size_t i = 0; i < NE; i++) {
        const char *msg = xfer_strerror(E[i].value);
        ck_assert_ptr_nonnull(msg);
        ck_assert_str_eq(msg, E[i].msg);
        ck_assert_uint_gt(strlen(msg), 0);
        ck_assert_str_ne(msg, "unknown error");
        ck_assert_str_eq(xfer_err_name(E[i].value), E[i].name);
        for (size_t j = 0; j < i; j++)
            ck_assert_str_ne(msg, E[j].msg);
    }
    ck_assert_str_eq(xfer_strerror(XFER_ERR_BUSY), "table or queue full");
    ck_assert_str_eq(xfer_err_name(XFER_ERR_INTERNAL), "INTERNAL");
}
END_TEST

START_TEST(test_errors_unknown_codes)
{
    const int probes[] = {1, 2, 100, INT_MAX, INT_MIN, XFER_ERR_MIN_,
                          XFER_ERR_INTERNAL + 1, XFER_ERR_INTERNAL - 1};
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        ck_assert(!listed(probes[i]));
        ck_assert_str_eq(xfer_strerror(probes[i]), "unknown error");
        ck_assert_str_eq(xfer_err_name(probes[i]), "UNKNOWN");
    }
    /* every unlisted value between the floor and 0 */
    for (int v = XFER_ERR_MIN_; v < 0; v++)
        if (!listed(v)) {
            ck_assert_str_eq(xfer_strerror(v), "unknown error");
            ck_assert_str_eq(xfer_err_name(v), "UNKNOWN");
        }
}
END_TEST

START_TEST(test_errors_fatal_band)
{
    ck_assert_int_le(XFER_ERR_INTERNAL, XFER_ERR_FATAL_BAND);
    ck_assert_int_gt(XFER_ERR_FATAL_BAND, XFER_ERR_MIN_);
    int ordinary = 0;
    for (size_t i = 1; i < NE; i++) {
        bool fatal = E[i].value <= XFER_ERR_FATAL_BAND;
        /* INTERNAL is the only fatal code today: a new one needs a test */
        ck_assert_int_eq(fatal, !strcmp(E[i].name, "INTERNAL"));
        ordinary += !fatal;
    }
    /* the ordinary band is -1 .. its lowest code, no gaps (a code
     * allocated to work not merged yet would be listed as allocated) */
    int lowest = 0, gaps = 0;
    for (size_t i = 1; i < NE; i++)
        if (E[i].value > XFER_ERR_FATAL_BAND && E[i].value < lowest)
            lowest = E[i].value;
    for (int v = -1; v >= lowest; v--) {
        bool allocated = false;
        ck_assert(listed(v) || allocated);
        gaps += !listed(v);
    }
    ck_assert_int_eq(-lowest - gaps, ordinary);
    ck_assert_int_lt(lowest, XFER_ERR_OK);
    ck_assert_int_gt(lowest, XFER_ERR_FATAL_BAND);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("errors");
    TCase *tc = tcase_create("errors");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_errors_codes_distinct_and_negative);
    tcase_add_test(tc, test_errors_every_code_has_message_and_name);
    tcase_add_test(tc, test_errors_unknown_codes);
    tcase_add_test(tc, test_errors_fatal_band);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
