/*
 * tests/hostile/raw.c - the raw-socket client and the /proc readings the
 * hostile tests share (raw.h).
 */
#include "raw.h"

#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rawwire.h"

uint32_t hr_req = 100;

xfer_wire_msg hr_call(int fd, const xfer_wire_msg *m, const void *data)
{
    xfer_wire_hdr h;
    xfer_wire_msg r;
    uint32_t q = hr_req++;
    ck_assert_int_eq(tw_send_msg(fd, m, q, data), 0);
    ck_assert_int_eq(tw_recv_msg(fd, &h, &r), 0);
    ck_assert_uint_eq(h.req, q);
    return r;
}

int32_t hr_code_of(const xfer_wire_msg *r)
{
    return r->type == XFER_WIRE_T_ERROR ? r->code : 0;
}

xfer_wire_msg hr_reserve(int fd, uint64_t id, uint32_t len)
{
    xfer_wire_msg m = {.type = XFER_WIRE_T_RESERVE, .id = id, .attempt = 1,
                       .len = len};
    return hr_call(fd, &m, NULL);
}

int32_t hr_op(int fd, uint8_t type, uint64_t id, uint32_t attempt,
              uint64_t resv)
{
    xfer_wire_msg m = {.type = type, .id = id, .attempt = attempt,
                       .resv_id = resv};
    xfer_wire_msg r = hr_call(fd, &m, NULL);
    return hr_code_of(&r);
}

double hr_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* fields after comm */
    unsigned long ut = 0, st = 0;
    ck_assert_int_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u "
                            "%*u %lu %lu", &ut, &st), 2);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

long hr_rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kib) == 1)
            break;
    fclose(f);
    return kib;
}
