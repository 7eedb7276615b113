/*
 * tests/consumer/prom.c - the exposition parser of prom.h.  It keeps one
 * table of families (name, type, help seen, samples seen, closed) and the
 * samples, and checks histograms once the whole text is read.
 */
#include "prom.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct family {
    char name[128];
    char type[16];
    bool help, typed, sampled, closed;
} family;

typedef struct parser {
    prom *p;
    family *f;
    size_t nf, capf;
    int line;
    family *current;
} parser;

static int fail(parser *ps, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(ps->p->err, sizeof ps->p->err, "line %d: ", ps->line);
    va_start(ap, fmt);
    vsnprintf(ps->p->err + n, sizeof ps->p->err - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static bool name_ok(const char *s, bool label)
{
    if (!*s || isdigit((unsigned char)*s))
        return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_' ||
              (!label && *s == ':')))
            return false;
    return true;
}

static family *find_family(parser *ps, const char *name, bool create)
{
    for (size_t i = 0; i < ps->nf; i++)
        if (strcmp(ps->f[i].name, name) == 0)
            return &ps->f[i];
    if (!create)
        return NULL;
    if (ps->nf == ps->capf) {
        ps->capf = ps->capf ? 2 * ps->capf : 64;
        ps->f = realloc(ps->f, ps->capf * sizeof *ps->f);
    }
    family *f = &ps->f[ps->nf++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    return f;
}

/* Enter family f's group: a family whose group ended cannot come back. */
static int enter(parser *ps, family *f)
{
    if (ps->current == f)
        return 0;
    if (f->closed)
        return fail(ps, "family %s split into two groups", f->name);
    if (ps->current)
        ps->current->closed = true;
    ps->current = f;
    return 0;
}

static int comment(parser *ps, char *line)
{
    char kw[8], name[128];
    int used = 0;
    if (sscanf(line, "# %7s %127s %n", kw, name, &used) < 2)
        return 0; /* a plain comment */
    bool help = strcmp(kw, "HELP") == 0, type = strcmp(kw, "TYPE") == 0;
    if (!help && !type)
        return 0;
    if (!name_ok(name, false))
        return fail(ps, "bad metric name '%s'", name);
    family *f = find_family(ps, name, true);
    if (enter(ps, f))
        return -1;
    if (help) {
        if (f->help)
            return fail(ps, "second HELP for %s", name);
        f->help = true;
        return 0;
    }
    const char *t = line + used;
    if (f->typed)
        return fail(ps, "second TYPE for %s", name);
    if (f->sampled)
        return fail(ps, "TYPE for %s after its samples", name);
    if (strcmp(t, "counter") && strcmp(t, "gauge") && strcmp(t, "histogram") &&
        strcmp(t, "summary") && strcmp(t, "untyped"))
        return fail(ps, "bad type '%s'", t);
    if (strcmp(t, "counter") == 0 &&
        (strlen(name) < 6 || strcmp(name + strlen(name) - 6, "_total")))
        return fail(ps, "counter %s does not end in _total", name);
    snprintf(f->type, sizeof f->type, "%s", t);
    f->typed = true;
    return 0;
}

/* Parse {k="v",...} at *s into out (canonical form). */
static int labels(parser *ps, const char **s, char *out, size_t cap)
{
    const char *q = *s + 1;
    size_t at = 0;
    out[0] = '\0';
    while (*q != '}') {
        char key[64];
        size_t k = 0;
        while (*q && *q != '=' && k < sizeof key - 1)
            key[k++] = *q++;
        key[k] = '\0';
        if (*q++ != '=' || !name_ok(key, true) || *q++ != '"')
            return fail(ps, "bad label near '%s'", key);
        at += (size_t)snprintf(out + at, cap - at, "%s%s=\"", at ? "," : "",
                               key);
        while (*q && *q != '"') {
            if (*q == '\\') {
                q++;
                if (*q != '\\' && *q != '"' && *q != 'n')
                    return fail(ps, "bad escape in label %s", key);
            }
            if (at + 2 < cap)
                out[at++] = *q;
            q++;
        }
        if (*q++ != '"')
            return fail(ps, "unterminated label value");
        at += (size_t)snprintf(out + at, cap - at, "\"");
        if (*q == ',')
            q++;
        else if (*q != '}')
            return fail(ps, "bad label list");
    }
    *s = q + 1;
    return 0;
}

/* The family a sample name belongs to (histogram suffixes stripped). */
static family *owner(parser *ps, const char *name)
{
    family *f = find_family(ps, name, false);
    if (f)
        return f;
    static const char *const sfx[] = {"_bucket", "_sum", "_count"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(name), m = strlen(sfx[i]);
        if (n > m && strcmp(name + n - m, sfx[i]) == 0) {
            char base[128];
            snprintf(base, sizeof base, "%.*s", (int)(n - m), name);
            f = find_family(ps, base, false);
            if (f && strcmp(f->type, "histogram") == 0)
                return f;
        }
    }
    return find_family(ps, name, true);
}

static int sample(parser *ps, const char *line)
{
    prom_sample s;
    memset(&s, 0, sizeof s);
    size_t k = 0;
    const char *q = line;
    while (*q && *q != '{' && *q != ' ' && k < sizeof s.name - 1)
        s.name[k++] = *q++;
    if (!name_ok(s.name, false))
        return fail(ps, "bad sample name '%s'", s.name);
    if (*q == '{' && labels(ps, &q, s.labels, sizeof s.labels))
        return -1;
    if (*q++ != ' ')
        return fail(ps, "no value for %s", s.name);
    char *end;
    if (strncmp(q, "+Inf", 4) == 0) {
        s.value = INFINITY;
        end = (char *)q + 4;
    } else {
        s.value = strtod(q, &end);
        if (end == q)
            return fail(ps, "bad value for %s", s.name);
    }
    if (*end == ' ')
        strtoll(end + 1, &end, 10); /* a timestamp */
    if (*end)
        return fail(ps, "trailing bytes after %s", s.name);
    family *f = owner(ps, s.name);
    if (enter(ps, f))
        return -1;
    f->sampled = true;
    if (strcmp(f->type, "counter") == 0 && !(s.value >= 0))
        return fail(ps, "counter %s is negative", s.name);
    prom *p = ps->p;
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].name, s.name) && !strcmp(p->s[i].labels, s.labels))
            return fail(ps, "duplicate series %s{%s}", s.name, s.labels);
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->s = realloc(p->s, p->cap * sizeof *p->s);
    }
    p->s[p->n++] = s;
    return 0;
}

/* The labels without le="...", and le's value. */
static void split_le(const char *labels, char *rest, size_t cap, double *le,
                     bool *has)
{
    const char *at = strstr(labels, "le=\"");
    *has = at != NULL;
    if (!at) {
        snprintf(rest, cap, "%s", labels);
        return;
    }
    const char *v = at + 4, *e = strchr(v, '"');
    *le = strncmp(v, "+Inf", 4) == 0 ? INFINITY : strtod(v, NULL);
    size_t pre = (size_t)(at - labels);
    if (pre && labels[pre - 1] == ',')
        pre--;
    snprintf(rest, cap, "%.*s%s", (int)pre, labels,
             e && e[1] == ',' && pre == 0 ? e + 2 : e ? e + 1 : "");
}

static int check_histogram(parser *ps, const family *f)
{
    prom *p = ps->p;
    char bucket[160], sum[160], count[160];
    snprintf(bucket, sizeof bucket, "%s_bucket", f->name);
    snprintf(sum, sizeof sum, "%s_sum", f->name);
    snprintf(count, sizeof count, "%s_count", f->name);
    for (size_t i = 0; i < p->n; i++) {
        if (strcmp(p->s[i].name, count))
            continue;
        const char *series = p->s[i].labels;
        double last_le = -INFINITY, last_v = 0, inf = -1;
        bool seen_sum = false;
        for (size_t j = 0; j < p->n; j++) {
            char rest[256];
            double le = 0;
            bool has;
            if (!strcmp(p->s[j].name, sum) && !strcmp(p->s[j].labels, series))
                seen_sum = true;
            if (strcmp(p->s[j].name, bucket))
                continue;
            split_le(p->s[j].labels, rest, sizeof rest, &le, &has);
            if (!has || strcmp(rest, series))
                continue;
            if (!(le > last_le) || p->s[j].value < last_v)
                return fail(ps, "%s{%s}: buckets not cumulative in le order",
                            f->name, series);
            last_le = le;
            last_v = p->s[j].value;
            if (isinf(le))
                inf = p->s[j].value;
        }
        if (inf < 0 || inf != p->s[i].value || !seen_sum)
            return fail(ps, "%s{%s}: +Inf bucket, _sum or _count wrong",
                        f->name, series);
    }
    return 0;
}

int prom_parse(const char *text, prom *p)
{
    memset(p, 0, sizeof *p);
    parser ps = {.p = p};
    char *copy = strdup(text), *save = NULL;
    int rc = 0;
    for (char *line = strtok_r(copy, "\n", &save); line && !rc;
         line = strtok_r(NULL, "\n", &save)) {
        ps.line++;
        if (line[0] == '#')
            rc = comment(&ps, line);
        else if (line[0])
            rc = sample(&ps, line);
    }
    for (size_t i = 0; !rc && i < ps.nf; i++) {
        if (!ps.f[i].typed || !ps.f[i].help)
            rc = fail(&ps, "family %s lacks HELP or TYPE", ps.f[i].name);
        else if (!strcmp(ps.f[i].type, "histogram"))
            rc = check_histogram(&ps, &ps.f[i]);
    }
    if (!rc && p->n == 0)
        rc = fail(&ps, "no samples");
    free(ps.f);
    free(copy);
    return rc;
}

void prom_free(prom *p)
{
    free(p->s);
    memset(p, 0, sizeof *p);
}

double prom_get(const prom *p, const char *name, const char *labels,
                bool *found)
{
    *found = false;
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].name, name) && !strcmp(p->s[i].labels, labels)) {
            *found = true;
            return p->s[i].value;
        }
    return 0;
}

double prom_sum(const prom *p, const char *name, const char *part)
{
    double v = 0;
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].name, name) && strstr(p->s[i].labels, part))
            v += p->s[i].value;
    return v;
}
