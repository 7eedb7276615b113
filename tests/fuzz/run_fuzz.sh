#!/bin/sh
# Run a libFuzzer binary for a bounded time on a scratch copy of the
# checked-in seed corpus (the checked-in corpus is never modified).
# Usage: run_fuzz.sh FUZZER CORPUS_DIR SECONDS
set -eu
fuzzer=$(readlink -f "$1"); corpus=$(readlink -f "$2"); secs=${3:-30}
work=$(mktemp -d "${TMPDIR:-/tmp}/xfer-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
cp "$corpus"/* "$work"/
cd "$work"
exec_rc=0
"$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "$work" || exec_rc=$?
exit $exec_rc
