#!/bin/sh
# tests/check/expect_unreached.sh - run xfer-check on a world where a
# feature the arguments ask for cannot be reached (or a mutant that stops
# reaching it), and require that every invariant held, that it exits 3,
# and that it names the feature in the line given.
#
#   expect_unreached.sh CHECKER LINE [xfer-check args...]
set -u
checker=$1 line=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$checker" "$@" > "$tmp"/out 2>&1
rc=$?
cat "$tmp"/out
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" -eq 3 ] || fail "exit $rc, expected 3 (a feature never reached)"
grep -q '^all invariants held' "$tmp"/out || fail "no 'all invariants held'"
grep -q '^reached ' "$tmp"/out || fail "no counts printed"
grep -qxF "$line" "$tmp"/out || fail "no line: $line"
echo "ok: exit 3, $line"
