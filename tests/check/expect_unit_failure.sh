#!/bin/sh
# tests/check/expect_unit_failure.sh - run a Check test program built on a
# mutant library and require that it fails, and that the named test is
# among its failures (Check prints "file:line:F:case:TEST:..." or
# ":E:" for a test that crashed or timed out), so a mutant is not counted
# caught by a test that broke for another reason.
#
#   expect_unit_failure.sh PROGRAM TEST
set -u
prog=$1 name=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$prog" > "$tmp"/out 2>&1
rc=$?
cat "$tmp"/out
[ "$rc" -ne 0 ] || { echo "FAIL: $prog passed on the mutant"; exit 1; }
grep -Eq ":[FE]:[^:]*:$name:" "$tmp"/out ||
  { echo "FAIL: $name did not fail"; exit 1; }
echo "ok: $name fails on the mutant (exit $rc)"
