/*
 * tools/cli.c - the tools' command-line convention (cli.h): getopt_long's
 * option array and the help are built from the tool's one flag table.
 *
 * Invariant: every error path prints exactly one line on stderr, so a
 * script (and tests/tools) can rely on "one line, exit 2".
 */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef XFER_TOOLS_VERSION
#define XFER_TOOLS_VERSION "unknown"
#endif

#ifndef XFER_TOOLS_BINDIR
#define XFER_TOOLS_BINDIR "/usr/local/bin"
#endif
#ifndef XFER_TOOLS_LIBEXECDIR
#define XFER_TOOLS_LIBEXECDIR "/usr/local/libexec"
#endif

#define CLI_MAX_FLAGS 96

const char *cli_version(void)
{
    return XFER_TOOLS_VERSION;
}

/* The help text of a row from column 33, wrapped at spaces to 79. */
static void wrap(FILE *f, const char *t)
{
    enum { COL = 33, WIDTH = 79 };
    size_t at = COL;
    while (*t) {
        size_t w = strcspn(t, " ");
        if (at > COL && at + 1 + w > WIDTH) {
            fprintf(f, "\n%*s", COL - 1, "");
            at = COL;
        }
        fprintf(f, " %.*s", (int)w, t);
        at += 1 + w;
        t += w;
        t += strspn(t, " ");
    }
    fputc('\n', f);
}

void cli_help(const cli *c, FILE *f)
{
    fprintf(f, "usage: %s %s\n", c->prog, c->synopsis ? c->synopsis : "");
    if (c->intro)
        fprintf(f, "%s", c->intro);
    fprintf(f, "flags:\n");
    for (const cli_flag *fl = c->flags; fl->name; fl++) {
        char head[80];
        int n = 0;
        if (fl->s)
            n = snprintf(head, sizeof head, "-%c, ", fl->s);
        else
            n = snprintf(head, sizeof head, "    ");
        snprintf(head + n, sizeof head - (size_t)n, "--%s%s%s", fl->name,
                 fl->arg ? " " : "", fl->arg ? fl->arg : "");
        fprintf(f, "  %-30s", head);
        wrap(f, fl->help);
    }
    if (c->epilog)
        fprintf(f, "%s", c->epilog);
}

/* Text for roff: a backslash as \e, a dash as \- (a minus, which man
 * pages use for flags), and a line that would start with a control
 * character ('.' or '\'') protected by \&. */
static void roff_text(FILE *f, const char *t, size_t n)
{
    int bol = 1;
    for (size_t i = 0; i < n && t[i]; i++) {
        if (bol && (t[i] == '.' || t[i] == '\''))
            fputs("\\&", f);
        bol = t[i] == '\n';
        if (t[i] == '\\')
            fputs("\\e", f);
        else if (t[i] == '-')
            fputs("\\-", f);
        else
            fputc(t[i], f);
    }
}

/* Preformatted text (an intro or epilog keeps its columns), no fill. */
static void roff_block(FILE *f, const char *t)
{
    fputs(".nf\n", f);
    roff_text(f, t, strlen(t));
    if (*t && t[strlen(t) - 1] != '\n')
        fputc('\n', f);
    fputs(".fi\n", f);
}

static void roff_flags(FILE *f, const cli_flag *fl)
{
    for (; fl->name; fl++) {
        fputs(".TP\n", f);
        if (fl->s)
            fprintf(f, "\\fB\\-%c\\fR, ", fl->s);
        fputs("\\fB\\-\\-", f);
        roff_text(f, fl->name, strlen(fl->name));
        fputs("\\fR", f);
        if (fl->arg) {
            fputs(" \\fI", f);
            roff_text(f, fl->arg, strlen(fl->arg));
            fputs("\\fR", f);
        }
        fputc('\n', f);
        roff_text(f, fl->help, strlen(fl->help));
        fputc('\n', f);
    }
}

void cli_man(const cli *c, FILE *f)
{
    const char *syn = c->synopsis ? c->synopsis : "";
    if (strchr(c->prog, ' ')) {
        fputs(".SS \"", f);
        roff_text(f, c->prog, strlen(c->prog));
        fputs("\"\n", f);
        roff_block(f, syn);
        if (c->intro) {
            fputs(".PP\n", f);
            roff_block(f, c->intro);
        }
        fputs(".PP\nFlags:\n", f);
        roff_flags(f, c->flags);
        if (c->epilog) {
            fputs(".PP\n", f);
            roff_block(f, c->epilog);
        }
        return;
    }
    int section = c->man_section ? c->man_section : 1;
    fputs(".TH \"", f);
    for (const char *p = c->prog; *p; p++)
        fputc(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p, f);
    fprintf(f, "\" %d \"\" \"xfer %s\" \"xfer manual\"\n", section,
            cli_version());
    fputs(".SH NAME\n", f);
    roff_text(f, c->prog, strlen(c->prog));
    if (c->summary) {
        fputs(" \\- ", f);
        roff_text(f, c->summary, strlen(c->summary));
    }
    fputs("\n.SH SYNOPSIS\n", f);
    /* One synopsis line per line of the help's usage. */
    for (const char *l = syn; *l;) {
        size_t n = strcspn(l, "\n");
        fputs(".B ", f);
        roff_text(f, c->prog, strlen(c->prog));
        fputc('\n', f);
        roff_text(f, l, n);
        fputs("\n.br\n", f);
        l += n;
        l += *l == '\n';
    }
    if (c->intro) {
        fputs(".SH DESCRIPTION\n", f);
        roff_block(f, c->intro);
    }
    fputs(".SH OPTIONS\n", f);
    roff_flags(f, c->flags);
    if (c->epilog) {
        fputs(".SH NOTES\n", f);
        roff_block(f, c->epilog);
    }
}

/* The array and the short string, built once per table. */
static struct {
    const cli_flag *table;
    struct option lo[CLI_MAX_FLAGS + 2];
    char so[3 * CLI_MAX_FLAGS + 3];
} built;

static void build(const cli *c)
{
    if (built.table == c->flags)
        return;
    memset(&built, 0, sizeof built);
    built.table = c->flags;
    size_t n = 0, s = 0;
    if (c->stop_at_operand)
        built.so[s++] = '+';
    built.so[s++] = ':'; /* a missing value returns ':', not '?' */
    for (const cli_flag *fl = c->flags; fl->name; fl++, n++) {
        if (n == CLI_MAX_FLAGS)
            abort(); /* a table larger than CLI_MAX_FLAGS: raise it */
        built.lo[n] = (struct option){fl->name,
                                      fl->arg ? required_argument
                                              : no_argument,
                                      NULL, fl->key ? fl->key : fl->s};
        if (fl->s) {
            built.so[s++] = fl->s;
            if (fl->arg)
                built.so[s++] = ':';
        }
    }
    built.lo[n] = (struct option){"man", no_argument, NULL, CLI_KEY_MAN};
}

void cli_reset(void)
{
    optind = 0; /* glibc: 0 also re-initialises its internal state */
}

int cli_bad(const cli *c, const char *what, const char *arg)
{
    fprintf(stderr, "%s: bad %s '%s' (try %s --help)\n", c->prog, what,
            arg ? arg : "", c->prog);
    return 2;
}

int cli_next(const cli *c, int argc, char **argv, const char **arg)
{
    build(c);
    opterr = 0;
    int k = getopt_long(argc, argv, built.so, built.lo, NULL);
    *arg = optarg;
    if (k == -1)
        return CLI_END;
    if (k == '?' || k == ':') {
        /* A long flag is the argument getopt just stepped over; an
         * unknown short one may sit inside a cluster (-qx): name it. */
        const char *bad = argv[optind - 1];
        char shortf[3] = {'-', (char)optopt, '\0'};
        if (optopt > 0 && optopt < 128 && strncmp(bad, "--", 2) != 0)
            bad = shortf;
        fprintf(stderr, "%s: %s '%s' (try %s --help)\n", c->prog,
                k == ':' ? "missing value for" : "unknown flag", bad,
                c->prog);
        return CLI_ERR;
    }
    if (k == CLI_KEY_HELP) {
        cli_help(c, stdout);
        exit(0);
    }
    if (k == CLI_KEY_VERSION) {
        printf("%s %s\n", c->prog, cli_version());
        exit(0);
    }
    if (k == CLI_KEY_MAN) {
        cli_man(c, stdout);
        exit(0);
    }
    return k;
}

static int is_exe(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) &&
           access(path, X_OK) == 0;
}

int cli_find_program(const char *name, const char *build_sub, char *buf,
                     size_t cap)
{
    char dir[4096];
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    dir[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    const char *dirs[] = {dir, dir, XFER_TOOLS_LIBEXECDIR, XFER_TOOLS_BINDIR};
    const char *subs[] = {"", build_sub, "", ""};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        if (!subs[i])
            continue;
        snprintf(buf, cap, "%s/%s%s", dirs[i], subs[i], name);
        if (is_exe(buf))
            return 0;
    }
    snprintf(buf, cap, "%s/%s", dir, name);
    return -1;
}
