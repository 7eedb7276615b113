/*
 * tools/trace/dot.c - `xfer-trace dot [transfer|reservation|readiness]`:
 * the state diagram of a machine in Graphviz dot, generated from its
 * X-macro table by xfer_fsm_dot (so the picture never drifts from the
 * code).
 */
#include <stdlib.h>
#include <string.h>

#include "xtrace.h"

int xt_cmd_dot(int argc, char **argv)
{
    static const struct {
        const char *name;
        unsigned machine;
    } names[] = {{"transfer", XFER_MACHINE_TRANSFER},
                 {"reservation", XFER_MACHINE_RESERVATION},
                 {"readiness", XFER_MACHINE_READINESS}};
    if (argc > 1)
        return xt_usage("unexpected argument '%s'", argv[1]);
    const char *want = argc ? argv[0] : "transfer";
    size_t i = 0;
    while (i < 3 && strcmp(want, names[i].name) != 0)
        i++;
    if (i == 3)
        return want[0] == '-' ? xt_usage("unknown flag '%s'", want)
                              : xt_usage("unknown machine '%s' (transfer, "
                                         "reservation or readiness)", want);
    int need = xfer_fsm_dot(names[i].machine, NULL, 0);
    char *buf = need > 0 ? malloc((size_t)need + 1) : NULL;
    if (!buf || xfer_fsm_dot(names[i].machine, buf, (size_t)need + 1) != need) {
        fprintf(stderr, "xfer-trace: cannot draw %s\n", want);
        free(buf);
        return XT_BADINPUT;
    }
    fputs(buf, stdout);
    free(buf);
    return XT_OK;
}
