/*
 * tools/trace/dot.c - `xfer-trace dot [transfer|reservation|readiness]`:
 * the state diagram of a machine in Graphviz dot, generated from its
 * X-macro table by xfer_fsm_dot (so the picture never drifts from the
 * code).
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "xtrace.h"

static const cli_flag xt_cmd_dot_flags[] = {CLI_HELP, {NULL, 0, NULL, NULL, 0}};
static const cli xt_cmd_dot_cli = {.prog = "xfer-trace dot", .synopsis = "[transfer|reservation|readiness]",
                           .intro = "a machine's state diagram (Graphviz)\n",
                           .flags = xt_cmd_dot_flags};

int xt_cmd_dot(int argc, char **argv)
{
    if (xt_args(&xt_cmd_dot_cli, &argc, &argv))
        return XT_USAGE;
    if (argc > 1)
        return xt_usage("unexpected argument '%s'", argv[1]);
    const char *want = argc ? argv[0]
                            : xfer_machine_name(XFER_MACHINE_TRANSFER);
    /* the machines with a table are the first ones of xfer_machine */
    unsigned m = XFER_MACHINE_TRANSFER;
    while (m <= XFER_MACHINE_READINESS && strcmp(want, xfer_machine_name(m)))
        m++;
    if (m > XFER_MACHINE_READINESS)
        return want[0] == '-' ? xt_usage("unknown flag '%s'", want)
                              : xt_usage("unknown machine '%s' (transfer, "
                                         "reservation or readiness)", want);
    int need = xfer_fsm_dot(m, NULL, 0);
    char *buf = need > 0 ? malloc((size_t)need + 1) : NULL;
    if (!buf || xfer_fsm_dot(m, buf, (size_t)need + 1) != need) {
        fprintf(stderr, "xfer-trace: cannot draw %s\n", want);
        free(buf);
        return XT_BADINPUT;
    }
    fputs(buf, stdout);
    free(buf);
    return XT_OK;
}
