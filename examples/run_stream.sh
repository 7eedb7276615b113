#!/bin/sh
# examples/run_stream.sh EXE - run examples/stream and check what it
# promises: exit 0, the stream's success line, and every part back once.
set -u
out=$("$1")
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
    echo "run_stream: $1 exited $rc, not 0" >&2
    exit 1
fi
if ! printf '%s\n' "$out" | grep -qx 'stream 7 done: 8 layers on 4 shards'; then
    echo "run_stream: stream 7 did not report success" >&2
    exit 1
fi
if ! printf '%s\n' "$out" | grep -qx '8 parts came back'; then
    echo "run_stream: not every part came back once" >&2
    exit 1
fi
exit 0
