#!/bin/sh
# examples/run_hello.sh EXE - run examples/hello and check what it promises:
# it exits 0, and prints exactly one completion line, the success of
# transfer 42.  Exit 0 when it does; otherwise say what differed, exit 1.
set -u
out=$("$1")
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
    echo "run_hello: $1 exited $rc, not 0" >&2
    exit 1
fi
n=$(printf '%s\n' "$out" | grep -c '^transfer ')
if [ "$n" -ne 1 ]; then
    echo "run_hello: $n completion lines, not 1" >&2
    exit 1
fi
if ! printf '%s\n' "$out" | grep -qx 'transfer 42 done: 4 shards hold the data'; then
    echo "run_hello: transfer 42 did not report success" >&2
    exit 1
fi
exit 0
