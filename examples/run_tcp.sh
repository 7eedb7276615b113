#!/bin/sh
# examples/run_tcp.sh SERVER CONSUMER PRODUCER - docs/consumer.md's deployment:
# two TP workers serving their own buffers (examples/server.c, shards 0
# and 1), the consumer scheduler (examples/consumer.c) expecting ids 1..8,
# and the producer (examples/producer.c) sending them.  Passes when the
# producer's 8 transfers succeed, the consumer reports all 8 available
# (16 regions) and releases them, closes (every release delivered), and
# both workers drain holding nothing and exit 0 on SIGTERM.
set -u
server=$1 consumer=$2 producer=$3
tmp=$(mktemp -d)
pids=
cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "run_tcp: $*" >&2; cat "$tmp"/*.out >&2; exit 1; }

addrs=
for k in 0 1; do
    "$server" "$k" >"$tmp/server$k.out" 2>&1 &
    pids="$pids $!"
    eval "spid$k=$!"
    port=
    for _ in $(seq 1 100); do
        port=$(sed -n 's/^shard [0-9]* listening on \([0-9]*\)$/\1/p' \
               "$tmp/server$k.out")
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || fail "server $k did not listen"
    addrs="$addrs 127.0.0.1:$port"
done
# shellcheck disable=SC2086 # addrs are words
"$consumer" 8 $addrs >"$tmp/consumer.out" 2>&1 &
cpid=$!
pids="$pids $cpid"
sleep 0.3 # subscribed (a late subscriber would still see what is ready)
# shellcheck disable=SC2086
"$producer" 8 $addrs >"$tmp/producer.out" 2>&1 || fail "producer failed"
wait "$cpid" || fail "consumer failed"
cat "$tmp/producer.out" "$tmp/consumer.out"
grep -qx '8 transfers done, 0 failed' "$tmp/producer.out" ||
    fail "producer did not report 8 done"
grep -qx '8 of 8 available' "$tmp/consumer.out" ||
    fail "consumer did not report 8 available"
n=$(grep -c '^id [0-9]* shard [01]: 4096 bytes at offset ' "$tmp/consumer.out")
[ "$n" -eq 16 ] || fail "$n regions reported, not 16"
for k in 0 1; do
    eval "p=\$spid$k"
    kill -TERM "$p"
    wait "$p" || fail "server $k did not drain and exit 0"
    # The consumer closed before it exited: every release reached the
    # worker, which holds nothing (issue 23 item 3).
    grep -qx 'drained: 0 bytes held, 0 live' "$tmp/server$k.out" ||
        fail "server $k still holds data after the consumer closed"
done
pids=
exit 0
