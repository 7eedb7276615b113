/*
 * tools/cli.h - the one command-line convention of the installed tools.
 *
 * Each tool describes its flags in one static table of cli_flag rows;
 * getopt_long's option array and short-option string, and the --help text,
 * are all built from that table, so a flag cannot exist without its help
 * line (and a later generator of man pages reads the same rows).
 *
 * The convention, kept here so every tool behaves alike:
 *   -h/--help      the usage, every flag of the table, on stdout; exit 0
 *   --version      "PROG VERSION" (the meson project version); exit 0
 *   an unknown flag, a missing or bad value: one line on stderr, exit 2
 * cli_help and cli_next handle the first two themselves (add CLI_HELP and
 * CLI_VERSION rows to the table so they are listed); the tool reports bad
 * values with cli_bad.
 */
#ifndef XFER_TOOLS_CLI_H
#define XFER_TOOLS_CLI_H

#include <stdio.h>

/* The rows every table carries: -h/--help and --version. */
#define CLI_KEY_HELP 'h'
#define CLI_KEY_VERSION 0x7f01
/* --man: in no table (so no --help line); every table answers it. */
#define CLI_KEY_MAN 0x7f02
#define CLI_HELP {"help", 'h', NULL, "print this help and exit", 0}
#define CLI_VERSION \
    {"version", 0, NULL, "print the version and exit", CLI_KEY_VERSION}

/* One flag: --name, and -s when s is set; arg: the value's name in the
 * help (--port P), NULL for a flag that takes none.  cli_next returns key,
 * or s when key is 0 (a row with both sets key to s or 0).  A table ends
 * with a row whose name is NULL and holds at most 96 rows. */
typedef struct cli_flag {
    const char *name;
    char s;
    const char *arg;
    const char *help;
    int key;
} cli_flag;

typedef struct cli {
    const char *prog;      /* "xferd" */
    const char *synopsis;  /* after "usage: PROG ", may hold newlines */
    const char *intro;     /* printed before the flags; NULL: none */
    const char *epilog;    /* printed after the flags; NULL: none */
    const cli_flag *flags; /* the table */
    /* Stop at the first argument that is not a flag (a subcommand's own
     * flags follow it) instead of permuting. */
    int stop_at_operand;
    /* The man page (cli_man): its one-line summary (NAME section; NULL:
     * none) and section (0: 1, a command; 8: a daemon). */
    const char *summary;
    int man_section;
} cli;

/* What cli_next returns besides a row's key. */
#define CLI_END (-1) /* no flag left: optind is the first operand */
#define CLI_ERR (-2) /* an unknown flag or a missing value: the line is
                        printed, exit 2 */

/* The version the build was configured with (meson project version). */
const char *cli_version(void);
/* The usage and every flag of the table, to f. */
void cli_help(const cli *c, FILE *f);
/* The man page in roff (man(7) macros), from the same table as cli_help:
 * NAME, SYNOPSIS, DESCRIPTION (intro), OPTIONS (every row), NOTES
 * (epilog).  For a subcommand (a prog with a space, "xfer-trace stuck")
 * only a subsection of its own (.SS), which the build appends to the
 * tool's page (tools/man.sh). */
void cli_man(const cli *c, FILE *f);
/* The next flag of argv (getopt_long underneath, opterr off).  Returns a
 * row's key with its value in *arg (NULL for a flag without one), CLI_END,
 * or CLI_ERR after printing one line.  --help, --version and the hidden
 * --man (cli_man; the build runs it to make the man pages) print and
 * exit(0).  Call cli_reset before parsing a second argv. */
int cli_next(const cli *c, int argc, char **argv, const char **arg);
void cli_reset(void);
/* One line "PROG: bad WHAT 'ARG' (try PROG --help)" on stderr; returns 2,
 * the exit code of a bad value. */
int cli_bad(const cli *c, const char *what, const char *arg);

/* Find the helper program `name` (xfer-bench-tcp) for the running tool:
 * next to the running executable (/proc/self/exe: the installed layout),
 * then in `build_sub` under its folder (the build tree: "bench/" for
 * bench/xfer-bench-tcp; NULL: none), then in the install's libexecdir and
 * bindir.  Writes the path into buf and returns 0, or returns -1 with
 * buf holding the first place looked at. */
int cli_find_program(const char *name, const char *build_sub, char *buf,
                     size_t cap);

#endif
