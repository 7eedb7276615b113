#!/bin/sh
# Golden-trace test of xfer-trace: generate a seeded trace, run every
# command on it, and compare the output with tests/trace/golden/.  Also:
# replay catches a modified record; export gives valid JSON with the
# expected tracks; bad files and bad flags give one line and the right
# exit code.
#
# usage: golden.sh XFER_TRACE GEN SCENARIO GOLDEN_DIR CHECK_EXPORT_PY
#        NSHARDS SHOW_IDS [OPEN_ID:SHARD ...]
# SHOW_IDS: comma-separated ids whose `show` output is golden.
# SCENARIO: the generator's name (core, loop); it is run as
# `GEN [--format jsonl] FILE`.  XFER_UPDATE_GOLDEN=1 rewrites the golden
# files instead of comparing.
set -u
xt=$1; gen=$2; name=$3; golden=$4; check=$5; nshards=$6; show_ids=$7
shift 7
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
xt=$(abs "$xt"); gen=$(abs "$gen"); check=$(abs "$check")
tmp=$(mktemp -d /tmp/xfer-golden-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0

bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# compare NAME: $tmp/out vs golden/NAME.txt.  With
# XFER_GOLDEN_NORMALIZE_TIMES=1 every time is replaced by <T> first (for
# scenarios run by the engine, whose clock reads are not part of the
# contract).
compare() {
    if [ "${XFER_GOLDEN_NORMALIZE_TIMES:-0}" = 1 ]; then
        sed 's/[0-9][0-9]*\.[0-9]\{6\}s/<T>/g' "$tmp/out" >"$tmp/out.n"
        mv "$tmp/out.n" "$tmp/out"
    fi
    if [ "${XFER_UPDATE_GOLDEN:-0}" = 1 ]; then
        cp "$tmp/out" "$golden/$1.txt"; echo "updated $1.txt"; return
    fi
    if ! diff -u "$golden/$1.txt" "$tmp/out"; then bad "$1 differs"; fi
}

# run EXPECTED_RC GOLDEN_NAME ARGS...: run xfer-trace in $tmp
run() {
    want=$1; gname=$2; shift 2
    (cd "$tmp" && "$xt" "$@") >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq "$want" ] || bad "xfer-trace $* exited $rc, expected $want: $(cat "$tmp/err")"
    [ -z "$gname" ] || compare "$gname"
}

# one_line_error EXPECTED_RC ARGS...: exactly one line on stderr
one_line_error() {
    want=$1; shift
    (cd "$tmp" && "$xt" "$@") >/dev/null 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq "$want" ] || bad "xfer-trace $* exited $rc, expected $want"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || bad "xfer-trace $*: stderr is not one line: $(cat "$tmp/err")"
}

(cd "$tmp" && "$gen" "$name.xtr" && "$gen" --format jsonl "$name.jsonl") \
    2>/dev/null || { echo "FAIL: generator"; exit 1; }

run 0 "$name.summary" summary "$name.xtr"
run 0 "$name.stuck" stuck "$name.xtr"
run 0 "$name.stuck-1s" stuck "$name.xtr" --older-than 1s
run 0 "$name.stuck-1h" stuck --older-than 1h "$name.xtr"
run 0 "$name.replay" replay "$name.xtr"
run 0 "$name.replay" replay "$name.jsonl"
run 0 "$name.stuck" stuck "$name.jsonl"
for id in $(echo "$show_ids" | tr ',' ' '); do
    run 0 "$name.show-$id" show "$id" "$name.xtr"
done
for m in transfer reservation readiness; do run 0 "dot-$m" dot "$m"; done

# replay catches a flipped new_state: patch the tenth state-changing
# TRANSFER record of a copy (byte 58 machine, 59 old, 61 new state)
python3 - "$tmp/$name.xtr" "$tmp/flipped.xtr" <<'PY' || bad "cannot make a flipped copy"
import sys
data = bytearray(open(sys.argv[1], "rb").read())
seen = 0
for off in range(64, len(data) - 63, 64):
    if data[off + 58] == 0 and data[off + 59] != data[off + 61]:
        seen += 1
        if seen == 10:
            data[off + 61] = (data[off + 61] + 1) % 6
            break
else:
    sys.exit(1)
open(sys.argv[2], "wb").write(data)
PY
run 1 "$name.replay-flipped" replay flipped.xtr
grep -q "divergence" "$tmp/out" || bad "replay did not report the divergence"

# export: valid JSON with the expected tracks
run 0 "" export --perfetto "$name.xtr" -o out.json
ntx=$(sed -n 's/^transfers: \([0-9]*\) submitted.*/\1/p' \
      "$golden/$name.summary.txt")
python3 "$check" "$tmp/out.json" "$ntx" "$nshards" "$@" || bad "exported JSON"
run 0 "" export --chrome "$name.jsonl" -o out2.json
python3 "$check" "$tmp/out2.json" "$ntx" "$nshards" "$@" >/dev/null ||
    bad "chrome export of the jsonl form"

# a rotated trace (34 records a file, 4 old files kept): xfer-trace reads
# rot.xtr.4 .. rot.xtr, which start mid-run, after the submit of the stuck
# transfer 8 but before its writes; it must still be found stuck, and
# replay must refuse (no CONFIG)
if [ "$name" = core ]; then
    (cd "$tmp" && "$gen" --max-bytes 2240 --keep 4 rot.xtr) 2>/dev/null ||
        bad "rotating generator"
    run 0 "$name.stuck-rotated" stuck rot.xtr
    run 0 "" export --chrome rot.xtr -o rot.json
    python3 "$check" "$tmp/rot.json" - "$nshards" "$@" >/dev/null ||
        bad "export of a rotated trace"
    one_line_error 3 replay rot.xtr
fi

# bad input: one clear line, exit 3; bad usage: one line, exit 2
one_line_error 3 summary missing.xtr
head -c 1000 "$tmp/$name.xtr" >"$tmp/trunc.xtr"
one_line_error 3 summary trunc.xtr
one_line_error 3 replay trunc.xtr
cp "$tmp/$name.xtr" "$tmp/v2.xtr"
printf '\002' | dd of="$tmp/v2.xtr" bs=1 seek=8 conv=notrunc 2>/dev/null
one_line_error 3 stuck v2.xtr
grep -q "version 2" "$tmp/err" || bad "wrong version not named: $(cat "$tmp/err")"
one_line_error 3 show 1 v2.xtr
one_line_error 2 stuck "$name.xtr" --older-than 5parsecs
one_line_error 2 summary --frobnicate "$name.xtr"
one_line_error 2 export "$name.xtr" -o x.json
one_line_error 2 dot petri-net
one_line_error 3 stuck --live "$tmp/no-such.sock"
one_line_error 2 stuck --live
one_line_error 2 nosuchcommand

if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "golden $name: ok"
