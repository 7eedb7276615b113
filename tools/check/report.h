/*
 * tools/check/report.h - what a violation leaves behind (report.c): the
 * counterexample printed step by step, the trace file xfer-trace reads,
 * and the choices file that --replay runs again.
 */
#ifndef XFER_CHECK_REPORT_H
#define XFER_CHECK_REPORT_H

#include <stddef.h>

#include "path.h"
#include "search.h"
#include "world.h"

/* Print the counterexample of o step by step (replaying it with a tracer)
 * and write <prefix>.trace and <prefix>.choices.  `args` is the command
 * line that reproduces cfg. */
void ck_report_cex(const ck_config *cfg, const ck_outcome *o,
                   const char *prefix, const char *args);
/* Read a choices file: its args line (into args, at most len bytes) and
 * its path (appended to p).  0, or an xfer_err with why (whylen bytes)
 * saying what was wrong. */
int ck_report_read_choices(const char *file, char *args, size_t len,
                           ck_path *p, char *why, size_t whylen);

#endif /* XFER_CHECK_REPORT_H */
