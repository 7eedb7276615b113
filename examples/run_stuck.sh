#!/bin/sh
# examples/run_stuck.sh STUCK XFER-TRACE - run examples/stuck and check what
# docs/trace.md promises: once it says the trace is flushed, `xfer-trace
# stuck --older-than 1s` on the file of the running process names
# transfer 8, in WRITING, waiting on shard 1 alone; SIGTERM then ends
# transfer 8 with the shutdown and the program exits 0.  Exit 0 when all
# of that holds; otherwise say what differed, exit 1.
set -u
dir=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
fail() {
    echo "run_stuck: $*" >&2
    cat "$dir/out" >&2
    exit 1
}
"$1" "$dir/trace.xtr" >"$dir/out" 2>&1 &
pid=$!
i=0
until grep -q '^trace flushed' "$dir/out"; do
    i=$((i + 1))
    [ "$i" -le 600 ] || fail "no 'trace flushed' line in 60 s"
    kill -0 "$pid" 2>/dev/null || fail "stuck exited early"
    sleep 0.1
done
"$2" stuck --older-than 1s "$dir/trace.xtr" >"$dir/stuck" ||
    fail "xfer-trace stuck exited $?"
cat "$dir/stuck"
grep -q '^1 open transfers older than 1' "$dir/stuck" ||
    fail "xfer-trace did not find exactly one transfer older than 1s"
grep -q '^transfer 8 attempt [0-9]*: WRITING for .*waits on 1 of 4 shards: 1$' \
    "$dir/stuck" || fail "xfer-trace did not name transfer 8 waiting on shard 1"
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
cat "$dir/out"
[ "$rc" -eq 0 ] || fail "stuck exited $rc after SIGTERM, not 0"
grep -q '^transfer 8: .*shut' "$dir/out" ||
    fail "transfer 8 did not end with the shutdown"
exit 0
