#!/usr/bin/env bash
# tools/gpu/check.sh [BUILD] - the GPU check of issue 25, as one prepared
# script for a lent GPU machine (no package registry there, no meson):
#   1. the suite `cuda` (BUILD/tests/cuda/test_cuda: device staging and
#      device pools over TCP, every byte read back from the device);
#   2. xfer-gpu-bench (BUILD/tests/cuda/xfer-gpu-bench): device-to-device
#      transfers over TCP through 4 shard servers with cuMemAlloc'd pools,
#      every byte of its check transfers verified, GB/s at 64 KiB, 1 MiB and
#      16 MiB next to the host-memory path and pinned cuMemcpy D2H / H2D
#      of the same run, and the target as PASS/FAIL.
#   (between them) tests/cuda/test_torch.py with the machine's python3
#      (3.12, torch, CuPy) and the binding built for 3.12 here: torch CUDA
#      tensors as staging and shard pools, no copy, by the array interface,
#      DLPack and a raw tuple, and the consumer's DeviceView read in place.
# Fits in 5 minutes (each step has a timeout: 90 s + 60 s + 140 s; in
# practice each takes seconds).
#
# Built here by `tools/run gpu-check` (which then runs this script, and
# on a machine without a GPU stops with one line and exit 77).  What to
# carry to the GPU machine: the build folder alone (BUILD, default
# build-gpu): the two programs link libevent and check statically, CUDA is
# loaded with dlopen from the machine's driver, and the shared libraries
# they and the extension need beyond glibc (>= 2.34) and libxfer (in
# BUILD, found through the extension's $ORIGIN rpath) are copied into
# BUILD/gpu-libs (libsubunit; libcrypto for libxfer).  On the GPU machine: `tools/gpu/check.sh build-gpu`.
#
# Exit: 0 all passed; 1 a test or the target failed; 2 not built; 77 no
# CUDA driver or device (one line).
set -uo pipefail
cd "$(dirname "$0")/../.."
b=${1:-build-gpu}
t=$b/tests/cuda/test_cuda
bench=$b/tests/cuda/xfer-gpu-bench
for f in "$t" "$bench"; do
    if [ ! -x "$f" ]; then
        echo "gpu-check: $f is not built: run tools/run gpu-check on the build machine" >&2
        exit 2
    fi
done
out=$(mktemp)
libs=$(mktemp -d)
trap 'rm -rf "$out" "$libs"' EXIT
# Only the carried libraries the machine lacks: its own libcrypto (say)
# may be newer than ours, and Python's ssl module built against it.
for f in "$b"/gpu-libs/*.so*; do
    [ -e "$f" ] || continue
    if ! ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$(basename "$f") "; then
        ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$libs/"
    fi
done
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

timeout 90 "$t" >"$out" 2>&1
rc=$?
if [ "$rc" -eq 77 ]; then
    echo "gpu-check: $(head -n 1 "$out")"
    exit 77
fi
echo "gpu-check: suite cuda"
cat "$out"
if [ "$rc" -ne 0 ]; then
    echo "gpu-check: suite cuda FAILED (exit $rc)"
    exit 1
fi

# The binding with torch tensors (the machine's python3, 3.12, with torch
# and CuPy; the extension built for 3.12 here).
if [ -d "$b/python/xfer" ]; then
    echo "gpu-check: python tensors (tests/cuda/test_torch.py)"
    PYTHONPATH=$b/python timeout 60 "${GPU_PYTHON:-python3}" \
        tests/cuda/test_torch.py
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
        echo "gpu-check: python tensors FAILED (exit $rc)"
        exit 1
    fi
else
    echo "gpu-check: python tensors skipped: the binding was not built (no Python 3.12 on the build machine)"
fi

echo "gpu-check: xfer-gpu-bench" >&2
timeout 140 "$bench"
rc=$?
case "$rc" in
0) echo "gpu-check: PASS" ;;
77) exit 77 ;;
*) echo "gpu-check: FAIL (exit $rc)"; exit 1 ;;
esac
