#!/bin/sh
# examples/run_quickstart.sh SCRIPT SOURCE BUILD [PYTHON] - run one of the
# README's quick starts (examples/quickstart_c.sh or quickstart_py.sh)
# exactly as written, from a folder laid out as the source root is
# (examples/ and build/, the latter this build, whatever its name), with
# PYTHON first on PATH as python3 (and LD_PRELOAD, if set, for it alone), in a network namespace of its own
# (`unshare -rn`, loopback up) so that the fixed ports the README shows
# collide with nothing else running.  Passes when the script exits 0 and
# its output says what the README says: 8 transfers done, 8 of 8
# available (16 regions), and both shards drained holding nothing.
# Exits 77 (skipped) where a network namespace cannot be made.
set -u
script=$1 src=$2 build=$3 python=${4:-}
# Under ASan the suite preloads the sanitizer's runtime for the
# interpreter; only the interpreter gets it, not sh, unshare or ip, whose
# own leaks LeakSanitizer would report.
preload=${LD_PRELOAD-}
unset LD_PRELOAD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "run_quickstart: $*" >&2; cat "$tmp/out" >&2; exit 1; }

command -v unshare >/dev/null 2>&1 || { echo "skipped: no unshare"; exit 77; }
command -v ip >/dev/null 2>&1 || { echo "skipped: no ip(8)"; exit 77; }
unshare -rn ip link set lo up 2>/dev/null ||
    { echo "skipped: no network namespace here"; exit 77; }
ln -s "$src/examples" "$tmp/examples"
ln -s "$build" "$tmp/build"
mkdir "$tmp/bin"
if [ -n "$python" ]; then
    printf '#!/bin/sh\nLD_PRELOAD=%s exec %s "$@"\n' "$preload" \
        "$python" >"$tmp/bin/python3"
    chmod +x "$tmp/bin/python3"
fi
cd "$tmp" || exit 1
# shellcheck disable=SC2016 # $0 is the inner shell's: the script
PATH="$tmp/bin:$PATH" timeout 60 unshare -rn sh -c \
    'ip link set lo up && exec sh "$0"' "$src/examples/$script" \
    >"$tmp/out" 2>&1 || fail "$script failed"
cat "$tmp/out"
grep -qx '8 transfers done, 0 failed' "$tmp/out" ||
    fail "the producer did not report 8 done"
grep -qx '8 of 8 available' "$tmp/out" ||
    fail "the consumer did not report 8 available"
n=$(grep -c 'drained: 0 bytes held, 0 live' "$tmp/out")
[ "$n" -eq 2 ] || fail "$n of 2 shards drained holding nothing"
exit 0
