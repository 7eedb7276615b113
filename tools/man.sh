#!/bin/sh
# tools/man.sh TOOL [COMMAND...] - TOOL's man page on stdout: `TOOL --man`
# (the page cli_man writes from the tool's flag table, the one --help
# prints), then for each COMMAND (xfer-trace's subcommands) a COMMANDS
# section with `TOOL COMMAND --man`'s subsection.  meson runs it at build
# time (tools/meson.build: man pages), so a flag's man line comes from the
# same row as its --help line.
set -eu
# A sanitizer build's tool: the page is what matters, not a leak report.
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
export ASAN_OPTIONS
tool=$1
shift
"$tool" --man
if [ $# -gt 0 ]; then
    echo ".SH COMMANDS"
    for c in "$@"; do
        "$tool" "$c" --man
    done
fi
