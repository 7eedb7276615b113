#!/bin/sh
# tests/check/expect_same.sh - run one xfer-check BFS on one thread and on
# two, and require the same result: the same printed counts (states,
# transitions, depth, leaves), the same verdict and exit status, and for a
# violation the same counterexample, step by step, and the same choices
# file.  Only the line with the time and rates, and the file names, may
# differ.
#
#   expect_same.sh CHECKER OUTPREFIX [xfer-check args...]
set -u
checker=$1 out=$2
shift 2
mkdir -p "$(dirname "$out")"
fail() { echo "FAIL: $*"; exit 1; }
for t in 1 2; do
    rm -f "$out".t$t.choices
    "$checker" "$@" --threads $t --out "$out".t$t > "$out".t$t.log 2>/dev/null
    echo $? > "$out".t$t.rc
    grep -v '^time \|^trace: \|^choices: ' "$out".t$t.log > "$out".t$t.cmp
done
cat "$out".t2.log
grep -q '^states [0-9]* distinct, transitions [0-9]*, depth [0-9]*' \
    "$out".t1.log || fail "no counts printed"
grep -q '(2 threads' "$out".t2.log || fail "--threads 2 did not say so"
cmp -s "$out".t1.rc "$out".t2.rc ||
    fail "exit status $(cat "$out".t1.rc) on one thread, $(cat "$out".t2.rc) on two"
diff "$out".t1.cmp "$out".t2.cmp || fail "one and two threads printed different results"
if [ -f "$out".t1.choices ]; then
    [ -f "$out".t2.choices ] || fail "no choices file on two threads"
    tail -n +2 "$out".t1.choices > "$out".t1.cc
    tail -n +2 "$out".t2.choices > "$out".t2.cc
    cmp -s "$out".t1.cc "$out".t2.cc || fail "different counterexample paths"
fi
echo "ok: the same on one thread and on two ($(grep '^states' "$out".t1.log))"
