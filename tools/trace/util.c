/*
 * tools/trace/util.c - small helpers of xfer-trace: durations in and out,
 * op names in the lower case its prose uses, usage errors, and key lookup
 * in the JSON lines xfer writes (trace files in JSONL form, control-socket
 * snapshots).
 *
 * The JSON helpers read only the flat, self-written form: "key":value with
 * no spaces, strings without escapes.  They never trust the input: a
 * missing key or a malformed number is "absent", never a crash.
 */
#include <getopt.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "xtrace.h"

void xt_fmt_dur(char *buf, size_t len, uint64_t ns)
{
    snprintf(buf, len, "%" PRIu64 ".%06" PRIu64 "s", ns / UINT64_C(1000000000),
             ns % UINT64_C(1000000000) / 1000);
}

const char *xt_op_name(unsigned op)
{
    /* xfer_op_name() in lower case, made once per op (the tool is one
     * thread); each op has its own buffer, so two names in one printf
     * stay apart. */
    static char names[XFER_OP_COUNT_][16];
    if (op >= XFER_OP_COUNT_)
        return "?";
    if (!names[op][0]) {
        const char *n = xfer_op_name(op);
        size_t i = 0;
        for (; n[i] && i + 1 < sizeof names[op]; i++)
            names[op][i] = (char)tolower((unsigned char)n[i]);
        names[op][i] = '\0';
    }
    return names[op];
}

static bool unit_scale(const char *u, uint64_t *scale)
{
    static const struct {
        const char *name;
        uint64_t ns;
    } units[] = {{"ns", 1},
                 {"us", 1000ull},
                 {"ms", 1000000ull},
                 {"s", 1000000000ull},
                 {"", 1000000000ull},
                 {"m", 60000000000ull},
                 {"h", 3600000000000ull}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(u, units[i].name) == 0) {
            *scale = units[i].ns;
            return true;
        }
    return false;
}

bool xt_parse_dur(const char *s, uint64_t *ns)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return false;
    char *end;
    errno = 0;
    uint64_t whole = strtoull(s, &end, 10);
    if (end == s || errno)
        return false;
    uint64_t frac = 0, fdiv = 1;
    if (*end == '.') {
        for (end++; *end >= '0' && *end <= '9'; end++)
            if (fdiv < 1000000000ull) {
                frac = frac * 10 + (uint64_t)(*end - '0');
                fdiv *= 10;
            }
    }
    uint64_t scale;
    if (!unit_scale(end, &scale) || whole > UINT64_MAX / scale)
        return false;
    *ns = whole * scale + frac * scale / fdiv;
    return true;
}

int xt_args(const struct cli *c, int *argc, char ***argv)
{
    const char *arg;
    int k = cli_next(c, *argc, *argv, &arg);
    if (k != CLI_END)
        return k == CLI_ERR ? XT_USAGE : xt_usage("%s", "unexpected flag");
    *argc -= optind;
    *argv += optind;
    return 0;
}

int xt_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "xfer-trace: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (try xfer-trace --help)\n");
    return XT_USAGE;
}

static const char *json_at(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    return p ? p + strlen(pat) : NULL;
}

bool xt_json_u64(const char *line, const char *key, uint64_t *v)
{
    const char *p = json_at(line, key);
    if (!p || *p < '0' || *p > '9')
        return false;
    char *end;
    errno = 0;
    *v = strtoull(p, &end, 10);
    return errno == 0 && (*end == ',' || *end == '}' || *end == ']');
}

bool xt_json_i64(const char *line, const char *key, int64_t *v)
{
    const char *p = json_at(line, key);
    if (!p || (*p != '-' && (*p < '0' || *p > '9')))
        return false;
    char *end;
    errno = 0;
    *v = strtoll(p, &end, 10);
    return errno == 0 && (*end == ',' || *end == '}' || *end == ']');
}

bool xt_json_str(const char *line, const char *key, char *buf, size_t len)
{
    const char *p = json_at(line, key);
    if (!p || *p != '"' || len == 0)
        return false;
    p++;
    const char *q = strchr(p, '"');
    if (!q)
        return false;
    size_t n = (size_t)(q - p);
    if (n >= len)
        n = len - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return true;
}
