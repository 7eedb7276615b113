/*
 * tests/trace/test_tracefile.c - the trace file format: round trips of
 * both forms, the exact little-endian layout, rotation, and the errors a
 * reader gives for a missing, empty, truncated, foreign or wrong-version
 * file.  Randomised records take their seed from XFER_SEED (printed).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "xfer/tracefile.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/xfer-tf-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static xfer_trace_rec random_rec(uint64_t *rng, uint64_t seq)
{
    xfer_trace_rec r = {
        .seq = seq, .time_ns = tu_rand(rng), .id = tu_rand(rng),
        .arg0 = tu_rand(rng), .arg1 = tu_rand(rng), .arg2 = tu_rand(rng),
        .attempt = (uint32_t)tu_rand(rng), .error = -(int32_t)(seq % 22),
        .shard = (uint16_t)tu_rand(rng), .machine = (uint8_t)(seq % 7),
        .old_state = (uint8_t)tu_rand(rng), .event = (uint8_t)tu_rand(rng),
        .new_state = (uint8_t)tu_rand(rng), .verdict = (uint8_t)(seq % 4)};
    return r;
}

/* The default options in `format`. */
static xfer_tracefile_opts opts_in(uint8_t format)
{
    xfer_tracefile_opts o;
    xfer_tracefile_opts_default(&o);
    o.format = format;
    return o;
}

/* Write n random records with `opts`, read them back, compare. */
static void round_trip(uint8_t format)
{
    uint64_t rng = tu_seed("test_tracefile_round_trip", 7);
    char p[128];
    path_of(p, sizeof p, "rt.trace");
    xfer_tracefile_opts o = opts_in(format);
    o.label = "rt";
    xfer_tracefile *tf;
    ck_assert_int_eq(xfer_tracefile_open(p, &o, &tf), 0);
    xfer_trace_sink sink = xfer_tracefile_sink_tagged(tf, 5);
    enum { N = 1000 };
    static xfer_trace_rec want[N];
    for (uint64_t i = 0; i < N; i++) {
        want[i] = random_rec(&rng, i);
        sink.fn(sink.ud, &want[i]);
        want[i].flags = 5;
    }
    ck_assert_uint_eq(xfer_tracefile_records(tf), N);
    ck_assert_int_eq(xfer_tracefile_close(tf), 0);
    xfer_tracefile_reader *rd;
    ck_assert_int_eq(xfer_tracefile_reader_open(p, &rd, NULL, 0), 0);
    const xfer_tracefile_info *in = xfer_tracefile_reader_info(rd);
    ck_assert_uint_eq(in->format, format);
    ck_assert_uint_eq(in->version, XFER_TRACEFILE_VERSION);
    ck_assert_str_eq(in->label, "rt");
    ck_assert_uint_eq(in->pid, (uint32_t)getpid());
    xfer_trace_rec got;
    for (size_t i = 0; i < N; i++) {
        ck_assert_int_eq(xfer_tracefile_reader_next(rd, &got), 1);
        ck_assert_mem_eq(&got, &want[i], sizeof got);
    }
    ck_assert_int_eq(xfer_tracefile_reader_next(rd, &got), 0);
    xfer_tracefile_reader_close(rd);
}

START_TEST(test_tracefile_round_trip_binary)
{
    round_trip(XFER_TRACEFILE_BINARY);
}
END_TEST

START_TEST(test_tracefile_round_trip_jsonl)
{
    round_trip(XFER_TRACEFILE_JSONL);
}
END_TEST

START_TEST(test_tracefile_layout_is_little_endian)
{
    xfer_trace_rec r = {.seq = 0x0102030405060708ull, .error = -2,
                        .shard = 0x0a0b, .machine = 3, .flags = 9};
    uint8_t b[64];
    xfer_tracefile_encode(&r, b);
    ck_assert_uint_eq(b[0], 0x08);
    ck_assert_uint_eq(b[7], 0x01);
    ck_assert_uint_eq(b[52], 0xfe);
    ck_assert_uint_eq(b[55], 0xff);
    ck_assert_uint_eq(b[56], 0x0b);
    ck_assert_uint_eq(b[57], 0x0a);
    ck_assert_uint_eq(b[58], 3);
    ck_assert_uint_eq(b[63], 9);
    char p[128];
    path_of(p, sizeof p, "hdr.trace");
    xfer_tracefile_opts o = opts_in(XFER_TRACEFILE_BINARY);
    o.created_ns = 0x1122334455667788ull;
    xfer_tracefile *tf;
    ck_assert_int_eq(xfer_tracefile_open(p, &o, &tf), 0);
    ck_assert_int_eq(xfer_tracefile_close(tf), 0);
    FILE *f = fopen(p, "rb");
    uint8_t h[80];
    ck_assert_uint_eq(fread(h, 1, sizeof h, f), 64);
    fclose(f);
    ck_assert_mem_eq(h, "XFERTRC\0", 8);
    ck_assert_uint_eq(h[8], 1);
    ck_assert_uint_eq(h[9], 0);
    ck_assert_uint_eq(h[12], 64);
    ck_assert_uint_eq(h[16], 0x88);
    ck_assert_uint_eq(h[23], 0x11);
    ck_assert_str_eq((char *)h + 32, "xfer");
}
END_TEST

static uint64_t count_file(const char *p, uint64_t *first_seq,
                           uint32_t *index)
{
    xfer_tracefile_reader *rd;
    ck_assert_int_eq(xfer_tracefile_reader_open(p, &rd, NULL, 0), 0);
    *index = xfer_tracefile_reader_info(rd)->file_index;
    xfer_trace_rec r;
    uint64_t n = 0, prev = 0;
    while (xfer_tracefile_reader_next(rd, &r) == 1) {
        if (n == 0)
            *first_seq = r.seq;
        else
            ck_assert_uint_eq(r.seq, prev + 1);
        prev = r.seq;
        n++;
    }
    xfer_tracefile_reader_close(rd);
    return n;
}

START_TEST(test_tracefile_rotation_keeps_order)
{
    char p[128], p1[140], p2[140], p3[140];
    path_of(p, sizeof p, "rot.trace");
    snprintf(p1, sizeof p1, "%s.1", p);
    snprintf(p2, sizeof p2, "%s.2", p);
    snprintf(p3, sizeof p3, "%s.3", p);
    /* header + 10 records per file */
    xfer_tracefile_opts o = opts_in(XFER_TRACEFILE_BINARY);
    o.max_bytes = 64 + 10 * 64;
    o.keep = 2;
    xfer_tracefile *tf;
    ck_assert_int_eq(xfer_tracefile_open(p, &o, &tf), 0);
    for (uint64_t i = 0; i < 45; i++) {
        xfer_trace_rec r = {.seq = i};
        ck_assert_int_eq(xfer_tracefile_write(tf, &r), 0);
    }
    ck_assert_uint_eq(xfer_tracefile_rotations(tf), 4);
    ck_assert_int_eq(xfer_tracefile_close(tf), 0);
    ck_assert_int_ne(access(p3, F_OK), 0);
    uint64_t s0, s1, s2;
    uint32_t i0, i1, i2;
    ck_assert_uint_eq(count_file(p2, &s2, &i2), 10);
    ck_assert_uint_eq(count_file(p1, &s1, &i1), 10);
    ck_assert_uint_eq(count_file(p, &s0, &i0), 5);
    ck_assert_uint_eq(s2, 20);
    ck_assert_uint_eq(s1, 30);
    ck_assert_uint_eq(s0, 40);
    ck_assert_uint_eq(i2, 2);
    ck_assert_uint_eq(i1, 3);
    ck_assert_uint_eq(i0, 4);
}
END_TEST

/* Open `p` for reading and expect error `err` with a reason. */
static void expect_open_error(const char *p, int err, const char *part)
{
    xfer_tracefile_reader *rd = (xfer_tracefile_reader *)&rd;
    char why[200] = "";
    ck_assert_int_eq(xfer_tracefile_reader_open(p, &rd, why, sizeof why),
                     err);
    ck_assert_ptr_eq(rd, (xfer_tracefile_reader *)&rd);
    ck_assert_msg(strstr(why, part) != NULL, "why '%s' lacks '%s'", why,
                  part);
}

static void write_good(const char *p, uint8_t format, int nrec)
{
    xfer_tracefile_opts o = opts_in(format);
    xfer_tracefile *tf;
    ck_assert_int_eq(xfer_tracefile_open(p, &o, &tf), 0);
    for (int i = 0; i < nrec; i++) {
        xfer_trace_rec r = {.seq = (uint64_t)i, .id = 7};
        ck_assert_int_eq(xfer_tracefile_write(tf, &r), 0);
    }
    ck_assert_int_eq(xfer_tracefile_close(tf), 0);
}

static void truncate_by(const char *p, long n)
{
    FILE *f = fopen(p, "rb+");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fclose(f);
    ck_assert_int_eq(truncate(p, len - n), 0);
}

START_TEST(test_tracefile_missing_empty_foreign)
{
    char p[128];
    path_of(p, sizeof p, "nope.trace");
    expect_open_error(p, XFER_ERR_IO, "cannot open");
    FILE *f = fopen(p, "wb");
    fclose(f);
    expect_open_error(p, XFER_ERR_FORMAT, "empty");
    f = fopen(p, "wb");
    fputs("hello, this is not a trace file at all, but long enough....."
          "......",
          f);
    fclose(f);
    expect_open_error(p, XFER_ERR_FORMAT, "bad magic");
    write_good(p, XFER_TRACEFILE_BINARY, 0);
    truncate_by(p, 10);
    expect_open_error(p, XFER_ERR_FORMAT, "truncated header");
}
END_TEST

START_TEST(test_tracefile_wrong_version)
{
    char p[128];
    path_of(p, sizeof p, "v2.trace");
    write_good(p, XFER_TRACEFILE_BINARY, 3);
    FILE *f = fopen(p, "rb+");
    fseek(f, 8, SEEK_SET);
    fputc(2, f);
    fclose(f);
    expect_open_error(p, XFER_ERR_FORMAT, "version 2");
    f = fopen(p, "wb");
    fputs("{\"xfer_trace\":9,\"record_size\":64}\n", f);
    fclose(f);
    expect_open_error(p, XFER_ERR_FORMAT, "version 9");
}
END_TEST

static void expect_truncated(const char *p)
{
    xfer_tracefile_reader *rd;
    ck_assert_int_eq(xfer_tracefile_reader_open(p, &rd, NULL, 0), 0);
    xfer_trace_rec r;
    ck_assert_int_eq(xfer_tracefile_reader_next(rd, &r), 1);
    ck_assert_int_eq(xfer_tracefile_reader_next(rd, &r), 1);
    ck_assert_int_eq(xfer_tracefile_reader_next(rd, &r), XFER_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(xfer_tracefile_reader_why(rd), "truncated"));
    ck_assert_int_eq(xfer_tracefile_reader_next(rd, &r), XFER_ERR_FORMAT);
    xfer_tracefile_reader_close(rd);
}

START_TEST(test_tracefile_truncated_record)
{
    char p[128];
    path_of(p, sizeof p, "trunc.trace");
    write_good(p, XFER_TRACEFILE_BINARY, 3);
    truncate_by(p, 1);
    expect_truncated(p);
    write_good(p, XFER_TRACEFILE_JSONL, 3);
    truncate_by(p, 5);
    expect_truncated(p);
}
END_TEST

START_TEST(test_tracefile_bad_args_and_io_error)
{
    xfer_tracefile *tf = (xfer_tracefile *)&tf;
    ck_assert_int_eq(xfer_tracefile_open(NULL, NULL, &tf),
                     XFER_ERR_INVALID_ARG);
    xfer_tracefile_opts bad = opts_in(7);
    ck_assert_int_eq(xfer_tracefile_open("/tmp/x", &bad, &tf),
                     XFER_ERR_INVALID_ARG);
    ck_assert_int_eq(xfer_tracefile_open("/nonexistent/dir/x", NULL, &tf),
                     XFER_ERR_IO);
    ck_assert_ptr_eq(tf, (xfer_tracefile *)&tf);
    ck_assert_int_eq(xfer_tracefile_close(NULL), 0);
    ck_assert(xfer_tracefile_sink(NULL).fn == NULL);
    xfer_tracefile_reader_close(NULL);
    if (access("/dev/full", W_OK) != 0)
        return;
    ck_assert_int_eq(xfer_tracefile_open("/dev/full", NULL, &tf), 0);
    xfer_trace_rec r = {0};
    for (int i = 0; i < 200; i++)
        (void)xfer_tracefile_write(tf, &r);
    ck_assert_int_eq(xfer_tracefile_close(tf), XFER_ERR_IO);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tracefile");
    TCase *tc = tcase_create("tracefile");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_tracefile_round_trip_binary);
    tcase_add_test(tc, test_tracefile_round_trip_jsonl);
    tcase_add_test(tc, test_tracefile_layout_is_little_endian);
    tcase_add_test(tc, test_tracefile_rotation_keeps_order);
    tcase_add_test(tc, test_tracefile_missing_empty_foreign);
    tcase_add_test(tc, test_tracefile_wrong_version);
    tcase_add_test(tc, test_tracefile_truncated_record);
    tcase_add_test(tc, test_tracefile_bad_args_and_io_error);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
