/*
 * fsm/fault.c - fault rules: the matcher the loop transport and the shard
 * server share (fault.h), and the text form of a rule
 * (xfer_fault_rule_parse, xfer/fault.h) that xferd and the Python binding
 * read.
 *
 * What must stay true: the same rules, seed and sequence of ops give the
 * same fates (I10); a rule that does not match costs no random draw
 * unless it has a probability and everything else about it matched; the
 * parser never reads past the string's end and never writes *out unless
 * the whole rule is good.
 */
#include "fault.h"

#include <string.h>

#include "xfer/fsm.h"
#include "xfer/shard_op.h"

static uint64_t next_rand(xfer_faults *f)
{
    f->rng ^= f->rng >> 12;
    f->rng ^= f->rng << 25;
    f->rng ^= f->rng >> 27;
    return f->rng * 0x2545f4914f6cdd1dull;
}

void xfer_faults_init(xfer_faults *f, uint64_t seed)
{
    memset(f, 0, sizeof *f);
    f->rng = seed ? seed : 0x9e3779b97f4a7c15ull;
}

bool xfer_fault_rule_valid(const xfer_fault_rule *r)
{
    return r && r->kind < XFER_FAULT_COUNT_ &&
           (r->op == XFER_FAULT_ANY_OP || r->op < XFER_OP_COUNT_) &&
           r->prob_ppm <= 1000000u && r->error <= 0;
}

int xfer_faults_add(xfer_faults *f, const xfer_fault_rule *r)
{
    if (!xfer_fault_rule_valid(r))
        return XFER_ERR_INVALID_ARG;
    if (f->n == XFER_FAULT_MAX_RULES)
        return XFER_ERR_BUSY;
    f->fired[f->n] = 0;
    f->rules[f->n++] = *r;
    return 0;
}

void xfer_faults_clear(xfer_faults *f)
{
    f->n = 0;
}

static bool matches(xfer_faults *f, uint32_t i, unsigned op, uint16_t shard,
                    uint64_t id)
{
    const xfer_fault_rule *r = &f->rules[i];
    if (r->op != XFER_FAULT_ANY_OP && r->op != op)
        return false;
    if (r->shard != XFER_FAULT_ANY_SHARD && r->shard != (int16_t)shard)
        return false;
    if (r->id && r->id != id)
        return false;
    if (r->count && f->fired[i] >= r->count)
        return false;
    if (r->prob_ppm && next_rand(f) % 1000000u >= r->prob_ppm)
        return false;
    return true;
}

uint32_t xfer_faults_decide(xfer_faults *f, unsigned op, uint16_t shard,
                            uint64_t id, xfer_fault_fate *out)
{
    uint32_t fired = 0;
    *out = (xfer_fault_fate){.kind = XFER_FAULT_NONE};
    for (uint32_t i = 0; i < f->n; i++) {
        if (!matches(f, i, op, shard, id))
            continue;
        f->fired[i]++;
        fired++;
        const xfer_fault_rule *r = &f->rules[i];
        if (r->kind == XFER_FAULT_DELAY) {
            out->delay_ns += r->delay_ns;
            continue; /* a delay combines with a later rule */
        }
        out->kind = r->kind;
        out->error = r->error ? r->error : XFER_ERR_REMOTE;
        break;
    }
    return fired;
}

/* ---------------------------------------------------------------------- */
/* The text form                                                           */
/* ---------------------------------------------------------------------- */

/* A decimal number of the n bytes at s, at most max.  No sign, no
 * spaces, no empty string. */
static bool parse_u64(const char *s, size_t n, uint64_t max, uint64_t *v)
{
    uint64_t x = 0;
    if (n == 0 || n > 20)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (x > (max - d) / 10)
            return false;
        x = x * 10 + d;
    }
    *v = x;
    return true;
}

static bool word_is(const char *s, size_t n, const char *w)
{
    return strlen(w) == n && memcmp(s, w, n) == 0;
}

/* One of names[] (count entries), as its index. */
static bool parse_word(const char *s, size_t n, const char *const *names,
                       unsigned count, unsigned *v)
{
    for (unsigned i = 0; i < count; i++)
        if (word_is(s, n, names[i])) {
            *v = i;
            return true;
        }
    return false;
}

static const char *const kind_words[] = {"fail", "applied_lost", "drop",
                                         "delay"};
static const char *const op_words[] = {"reserve", "write", "commit",
                                       "cancel", "eager"};
_Static_assert(sizeof kind_words / sizeof *kind_words == XFER_FAULT_COUNT_,
               "a word per fault kind");
_Static_assert(sizeof op_words / sizeof *op_words == XFER_OP_COUNT_,
               "a word per op kind");

/* An error name without prefix ("NO_SPACE") or a negative number. */
static bool parse_error(const char *s, size_t n, int32_t *v)
{
    uint64_t x;
    if (n > 1 && s[0] == '-' && parse_u64(s + 1, n - 1, 100, &x)) {
        *v = -(int32_t)x;
        return strcmp(xfer_err_name(*v), "UNKNOWN") != 0 && *v != 0;
    }
    for (int e = -1; e >= -100; e--)
        if (strcmp(xfer_err_name(e), "UNKNOWN") != 0 &&
            word_is(s, n, xfer_err_name(e))) {
            *v = e;
            return true;
        }
    return false;
}

enum { K_ACTION, K_OP, K_SHARD, K_ID, K_COUNT, K_PPM, K_MS, K_ERROR, K_N };
static const char *const key_words[K_N] = {"action", "op", "shard", "id",
                                           "count", "ppm", "ms", "error"};

/* Apply one pair (key k, value v of vn bytes) to r. */
static bool parse_pair(unsigned k, const char *v, size_t vn,
                       xfer_fault_rule *r)
{
    uint64_t x;
    unsigned w;
    switch (k) {
    case K_ACTION:
        if (!parse_word(v, vn, kind_words, XFER_FAULT_COUNT_, &w))
            return false;
        r->kind = (uint8_t)w;
        return true;
    case K_OP:
        if (word_is(v, vn, "any")) {
            r->op = XFER_FAULT_ANY_OP;
            return true;
        }
        if (!parse_word(v, vn, op_words, XFER_OP_COUNT_, &w))
            return false;
        r->op = (uint8_t)w;
        return true;
    case K_SHARD:
        if (word_is(v, vn, "any")) {
            r->shard = XFER_FAULT_ANY_SHARD;
            return true;
        }
        if (!parse_u64(v, vn, XFER_MAX_SHARDS - 1, &x))
            return false;
        r->shard = (int16_t)x;
        return true;
    case K_ID:
        return parse_u64(v, vn, UINT64_MAX, &r->id);
    case K_COUNT:
        if (!parse_u64(v, vn, UINT32_MAX, &x))
            return false;
        r->count = (uint32_t)x;
        return true;
    case K_PPM:
        if (!parse_u64(v, vn, 1000000u, &x) || x == 0)
            return false;
        r->prob_ppm = (uint32_t)x;
        return true;
    case K_MS:
        if (!parse_u64(v, vn, 3600000u, &x))
            return false;
        r->delay_ns = x * 1000000u;
        return true;
    case K_ERROR:
        return parse_error(v, vn, &r->error);
    default:
        return false;
    }
}

int xfer_fault_rule_parse(const char *text, xfer_fault_rule *out,
                          const char **bad)
{
    if (!text || !out)
        return XFER_ERR_INVALID_ARG;
    xfer_fault_rule r = {.kind = XFER_FAULT_COUNT_, .op = XFER_FAULT_ANY_OP,
                         .shard = XFER_FAULT_ANY_SHARD};
    bool seen[K_N] = {false};
    const char *p = text, *at = text;
    int rc = XFER_ERR_INVALID_ARG;
    for (;;) {
        at = p;
        size_t n = strcspn(p, ",");
        const char *eq = memchr(p, '=', n);
        unsigned k;
        if (!eq || !parse_word(p, (size_t)(eq - p), key_words, K_N, &k) ||
            seen[k] ||
            !parse_pair(k, eq + 1, n - (size_t)(eq + 1 - p), &r))
            goto out;
        seen[k] = true;
        if (p[n] == '\0')
            break;
        p += n + 1;
    }
    at = text;
    /* what one key allows depends on another: checked once all are in */
    if (!seen[K_ACTION] ||
        (r.kind == XFER_FAULT_DELAY) != seen[K_MS] ||
        (seen[K_ERROR] && r.kind != XFER_FAULT_FAIL &&
         r.kind != XFER_FAULT_APPLIED_LOST))
        goto out;
    *out = r;
    rc = 0;
out:
    if (rc && bad)
        *bad = at;
    return rc;
}
