/*
 * tools/trace/main.c - xfer-trace: read a trace file (or a live engine or
 * xferd over its control socket) and answer "which shard, in which phase,
 * since when?".  This file only dispatches to the commands.
 *
 * Exit codes: 0 done, 1 replay divergence, 2 bad usage, 3 bad input.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

#include "xtrace.h"

static const cli_flag flags[] = {CLI_HELP, CLI_VERSION,
                                 {NULL, 0, NULL, NULL, 0}};

static const cli trace_cli = {
    .prog = "xfer-trace",
    .summary = "read xfer trace files and live control sockets",
    .synopsis = "[flags] COMMAND ...",
    .intro =
        "commands (each takes --help):\n"
        "  summary FILE                     counts per final state, error, "
        "shard\n"
        "  stuck FILE...|--live SOCK [--older-than D] [--timeout D]\n"
        "                                   open transfers older than D, "
        "oldest first;\n"
        "                                   several files (producer, shards, "
        "consumer) merge\n"
        "  show ID FILE...                  timeline of one transfer, "
        "merged over files\n"
        "  replay FILE                      re-run the recorded inputs "
        "through the core\n"
        "  export --perfetto|--chrome FILE -o OUT.json\n"
        "                                   Chrome trace-event JSON\n"
        "  dot [transfer|reservation|readiness]\n"
        "                                   state diagram (Graphviz)\n"
        "  members --ctl SOCK | --etcd URLS --group G [--timeout D]\n"
        "                                   a group's members as a process's "
        "directory\n"
        "                                   knows them, or as etcd has them "
        "now\n",
    .epilog = "durations: 500ms, 2s, 1.5s, 100us, 2m\n"
              "exit: 0 ok, 1 replay divergence, 2 bad usage, 3 bad input\n",
    .flags = flags,
    .stop_at_operand = 1};

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"summary", xt_cmd_summary}, {"stuck", xt_cmd_stuck},
                {"show", xt_cmd_show},       {"replay", xt_cmd_replay},
                {"export", xt_cmd_export},   {"dot", xt_cmd_dot},
                {"members", xt_cmd_members}};
    const char *arg;
    for (int k; (k = cli_next(&trace_cli, argc, argv, &arg)) != CLI_END;)
        if (k == CLI_ERR)
            return XT_USAGE;
    if (optind >= argc)
        return xt_usage("%s", "missing command");
    const char *cmd = argv[optind];
    if (strcmp(cmd, "help") == 0) {
        cli_help(&trace_cli, stdout);
        return XT_OK;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(cmd, cmds[i].name) == 0) {
            /* the command parses from its own name on (cli_next) */
            int n = argc - optind;
            char **v = argv + optind;
            cli_reset();
            return cmds[i].fn(n, v);
        }
    return xt_usage("unknown command '%s'", cmd);
}
