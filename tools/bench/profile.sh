#!/usr/bin/env bash
# tools/bench/profile.sh - where the CPU of a transfer goes, producer and
# shard servers separately: the numbers of docs/perf.md, rerunnable.
#
#   tools/bench/profile.sh BUILD_DIR [--inflight N] [--seconds S]
#                          [--part xfer|wire] [--out DIR] [--no-record]
#   (or: tools/run profile [same flags], which builds build-release first)
#
# Runs `xfer-bench-tcp --only PART --inflight N` (default xfer, 64, 4 s)
# twice with a profiler attached to the bench (the producer) and to every
# xferd for the whole figure (--pause-ms lets it attach first; --warmup 0,
# so every transfer counted is one of the figure's):
#   1. perf stat --per-thread: syscalls by kind, context switches, task
#      clock; printed per transfer, the producer and the 4 xferd summed;
#   2. perf record -e cpu-clock (this VM has no hardware counters: check
#      with `perf stat -e instructions true`): the top symbols of the
#      producer and of xferd, self time, and the split by DSO.
# PART wire is the minimal C producer of the bench (no engine) against the
# same xferd.  Profilers slow what they watch, so absolute rates here are
# lower than the bench's; the counts per transfer are what to read.
# Outputs are kept in DIR (default ${TMPDIR:-/tmp}/xfer-profile).
set -euo pipefail

B=${1:?usage: profile.sh BUILD_DIR [--inflight N] [--seconds S] [--part P] [--out DIR] [--no-record]}
shift
N=64 S=4 PART=xfer OUT=${TMPDIR:-/tmp}/xfer-profile RECORD=1
while [ $# -gt 0 ]; do
    case "$1" in
    --inflight) N=$2; shift 2 ;;
    --seconds) S=$2; shift 2 ;;
    --part) PART=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-record) RECORD=0; shift ;;
    *) echo "profile.sh: bad argument '$1'" >&2; exit 2 ;;
    esac
done
BENCH=$B/tools/bench/xfer-bench-tcp
[ -x "$BENCH" ] || { echo "profile.sh: no $BENCH (build first)" >&2; exit 2; }
command -v perf >/dev/null || { echo "profile.sh: perf missing (apt-get install linux-perf)" >&2; exit 2; }
mkdir -p "$OUT"

SYSCALLS="read readv write writev recvfrom sendto recvmsg sendmsg epoll_wait
          epoll_pwait epoll_ctl ioctl futex clock_gettime gettimeofday
          openat close getpid"
EVENTS="task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter"
for s in $SYSCALLS; do EVENTS="$EVENTS,syscalls:sys_enter_$s"; done

# start_bench TAG: the bench in the background; sets BPID and PIDS.
start_bench() {
    "$BENCH" --only "$PART" --inflight "$N" --seconds "$S" --warmup 0 \
        --verbose --pause-ms 1500 >"$OUT/$1.out" 2>"$OUT/$1.err" &
    BPID=$!
    for _ in $(seq 200); do
        grep -q '^pids:' "$OUT/$1.err" 2>/dev/null && break
        sleep 0.05
    done
    PIDS=$(sed -n 's/^pids: bench \([0-9]*\) xferd \(.*\)$/\1 \2/p' "$OUT/$1.err" | tr ' ' ',')
    [ -n "$PIDS" ] || { echo "profile.sh: the bench did not start:" >&2; cat "$OUT/$1.err" >&2; exit 1; }
}

# units TAG: transfers the figure completed.
units() {
    sed -n 's/^figure [a-z0-9-]* [0-9]* in flight: \([0-9]*\) units ok.*/\1/p' "$OUT/$1.err" | head -1
}

echo "profile: $PART, $N in flight, $S s; outputs in $OUT"

# 1. Counts.
start_bench stat
perf stat --per-thread -x, -e "$EVENTS" -p "$PIDS" -o "$OUT/stat.csv" &
PERF=$!
wait "$BPID" || true
kill -INT "$PERF" 2>/dev/null || true
wait "$PERF" 2>/dev/null || true
U=$(units stat)
[ -n "$U" ] && [ "$U" -gt 0 ] || { echo "profile.sh: no units counted" >&2; cat "$OUT/stat.err" >&2; exit 1; }
echo
echo "per transfer ($U transfers; producer = the bench process, shards = 4 xferd summed)"
awk -F, -v u="$U" '
    /^#/ || NF < 4 { next }
    {
        comm = $1; sub(/-[0-9]+$/, "", comm)
        who = comm ~ /^xferd/ ? "shards" : "producer"
        v = $2; ev = $4
        if (v ~ /not/) next
        sub(/^syscalls:sys_enter_/, "", ev); sub(/^raw_syscalls:sys_enter$/, "all syscalls", ev)
        sum[ev, who] += v; evs[ev] = 1
    }
    END {
        printf "  %-18s %12s %12s\n", "", "producer", "shards"
        n = split("all syscalls,read,readv,write,writev,recvfrom,sendto,recvmsg,sendmsg,epoll_wait,epoll_pwait,epoll_ctl,ioctl,futex,clock_gettime,gettimeofday,openat,close,getpid,context-switches,cpu-migrations", order, ",")
        for (i = 1; i <= n; i++) {
            e = order[i]
            if (!(e in evs)) continue
            p = sum[e, "producer"] / u; s = sum[e, "shards"] / u
            if (p < 0.005 && s < 0.005) continue
            printf "  %-18s %12.2f %12.2f\n", e, p, s
        }
        printf "  %-18s %12.2f %12.2f   (us of CPU, task-clock)\n", "CPU us", \
            sum["task-clock", "producer"] * 1000 / u, sum["task-clock", "shards"] * 1000 / u
    }' "$OUT/stat.csv"

[ "$RECORD" = 1 ] || exit 0

# 2. Where the CPU goes.
start_bench record
perf record -q -F 1999 -e cpu-clock -p "$PIDS" -o "$OUT/perf.data" 2>"$OUT/record.log" &
PERF=$!
wait "$BPID" || true
kill -INT "$PERF" 2>/dev/null || true
wait "$PERF" 2>/dev/null || true
echo
echo "CPU samples by process and DSO, % of all samples (producer: xfer-bench-tcp)"
perf report -i "$OUT/perf.data" --sort comm,dso --no-children --stdio \
    2>/dev/null | grep -v '^#' | grep -v '^$' | sed -n '1,14p' | sed 's/^/  /'
for comm in xfer-bench-tcp xferd; do
    echo
    echo "$comm: top symbols, self time, % of that process's samples"
    perf report -i "$OUT/perf.data" --comm "$comm" --sort dso,sym \
        --no-children --percentage relative --stdio 2>/dev/null |
        grep -v '^#' | grep -v '^$' | sed -n '1,30p' | sed 's/^/  /'
done
