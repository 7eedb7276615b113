#!/bin/sh
# tests/check/expect_exit.sh - run xfer-check and require an exit status
# (and, for status 2, a one-line complaint on stderr; for status 0, no
# "not exhaustive": an exhaustive run must have finished its space).
#
#   expect_exit.sh STATUS CHECKER [args...]
set -u
want=$1 checker=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$checker" "$@" > "$tmp"/out 2> "$tmp"/err
rc=$?
cat "$tmp"/out "$tmp"/err
[ "$rc" -eq "$want" ] || { echo "FAIL: exit $rc, expected $want"; exit 1; }
if [ "$want" -eq 0 ] && grep -qi "not exhaustive" "$tmp"/out; then
  echo "FAIL: the search did not finish its space"; exit 1
fi
if [ "$want" -eq 2 ]; then
  [ "$(wc -l < "$tmp"/err)" -eq 1 ] || { echo "FAIL: not one line"; exit 1; }
fi
echo "ok: exit $rc"
