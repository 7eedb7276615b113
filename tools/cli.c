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

/* The array and the short string, built once per table. */
static struct {
    const cli_flag *table;
    struct option lo[CLI_MAX_FLAGS + 1];
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
