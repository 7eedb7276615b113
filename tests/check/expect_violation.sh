#!/bin/sh
# tests/check/expect_violation.sh - run a (mutant) xfer-check and require
# that it exits 1 naming the expected invariant with a counterexample, that
# it wrote a trace file, and that --replay of the choices file it wrote
# reproduces the same violation.
#
#   expect_violation.sh CHECKER INVARIANT OUTPREFIX [xfer-check args...]
set -u
checker=$1 inv=$2 out=$3
shift 3
mkdir -p "$(dirname "$out")"
rm -f "$out".trace "$out".choices
"$checker" "$@" --out "$out" > "$out".log 2>&1
rc=$?
cat "$out".log
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" -eq 1 ] || fail "xfer-check exited $rc, expected 1 (a violation)"
grep -q "^VIOLATION $inv " "$out".log || fail "no VIOLATION $inv reported"
grep -q "^counterexample: [0-9]* steps" "$out".log || fail "no counterexample"
grep -q "=> $inv:" "$out".log || fail "the printed replay did not end in $inv"
[ -s "$out".trace ] || fail "no trace file $out.trace"
[ -s "$out".choices ] || fail "no choices file $out.choices"
"$checker" --replay "$out".choices --out "$out".replay > "$out".replay.log 2>&1
rc=$?
[ "$rc" -eq 1 ] || { cat "$out".replay.log; fail "--replay exited $rc"; }
grep -q "^VIOLATION $inv " "$out".replay.log || fail "--replay did not reproduce $inv"
echo "ok: $inv found and replayed"
