/*
 * tools/trace/main.c - xfer-trace: read a trace file (or a live engine or
 * xferd over its control socket) and answer "which shard, in which phase,
 * since when?".  This file only dispatches to the commands.
 *
 * Exit codes: 0 done, 1 replay divergence, 2 bad usage, 3 bad input.
 */
#include <stdio.h>
#include <string.h>

#include "xtrace.h"

static const char usage_text[] =
    "usage: xfer-trace COMMAND ...\n"
    "  summary FILE                     counts per final state, error, "
    "shard\n"
    "  stuck FILE...|--live SOCK [--older-than D]\n"
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
    "durations: 500ms, 2s, 1.5s, 100us, 2m\n"
    "exit: 0 ok, 1 replay divergence, 2 bad usage, 3 bad input\n";

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"summary", xt_cmd_summary}, {"stuck", xt_cmd_stuck},
                {"show", xt_cmd_show},       {"replay", xt_cmd_replay},
                {"export", xt_cmd_export},   {"dot", xt_cmd_dot}};
    if (argc < 2)
        return xt_usage("%s", "missing command");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(usage_text, stdout);
        return XT_OK;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(argv[1], cmds[i].name) == 0)
            return cmds[i].fn(argc - 2, argv + 2);
    return xt_usage("unknown command '%s'", argv[1]);
}
