#!/bin/sh
# tools/check/bench_threads.sh - the plain BFS (one thread) against the
# parallel BFS (two threads) in states per CPU second, measured in the
# same run (issue 30 item 5).
#
#   tools/check/bench_threads.sh XFER_CHECK ROUNDS [xfer-check arguments]
#
# Runs the space ROUNDS times on one thread and on two, alternating (so a
# change in the machine's load hits both alike), prints every run's
# figure and the median of each, and the ratio parallel / plain.  The
# figure is xfer-check's own "states per CPU second" (distinct states over
# the CPU seconds of the process, every thread): the cost of a state on a
# core, whatever the wall time.  Default space: S = 2, every fault, budget
# 2 (0.53 M states).  Exit 0 after printing; 2 on a bad argument; 1 when a
# run fails or the two disagree on the count of states.
set -u
if [ $# -lt 2 ] || [ ! -x "$1" ]; then
    echo "usage: bench_threads.sh XFER_CHECK ROUNDS [xfer-check args]" >&2
    exit 2
fi
bin=$1
rounds=$2
shift 2
case $rounds in
'' | *[!0-9]*) echo "bench_threads.sh: ROUNDS must be a number" >&2; exit 2 ;;
esac
[ $# -gt 0 ] || set -- --shards 2 --faults all --budget 2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
r=1
while [ "$r" -le "$rounds" ]; do
    for t in 1 2; do
        if ! "$bin" "$@" --threads "$t" >"$tmp/out" 2>&1; then
            echo "bench_threads.sh: xfer-check $* --threads $t failed:" >&2
            tail -5 "$tmp/out" >&2
            exit 1
        fi
        states=$(sed -n 's/^states \([0-9]*\) distinct.*/\1/p' "$tmp/out")
        rate=$(sed -n 's/.* \([0-9]*\) states per CPU second.*/\1/p' \
            "$tmp/out")
        echo "round $r threads $t: $states states, $rate states per CPU second"
        echo "$rate" >>"$tmp/rate$t"
        echo "$states" >>"$tmp/states"
    done
    r=$((r + 1))
done
if [ "$(sort -u "$tmp/states" | wc -l)" -ne 1 ]; then
    echo "bench_threads.sh: the runs disagree on the count of states" >&2
    exit 1
fi
median() {
    sort -n "$1" | awk '{v[NR] = $1} END {
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
m1=$(median "$tmp/rate1")
m2=$(median "$tmp/rate2")
awk -v a="$m1" -v b="$m2" 'BEGIN {
    printf "median states per CPU second: plain BFS (1 thread) %d, parallel BFS (2 threads) %d, parallel / plain %.3f\n", a, b, b / a }'
