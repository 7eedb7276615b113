#!/bin/sh
# examples/run_discovery.sh XFERD DISCOVERY - docs/discovery.md's example:
# a real etcd on free loopback ports, two xferd registering shards 0 and 1
# of group "kv" (lease 2 s), `xferd --members` listing them as etcd sees
# them, and examples/discovery.c sending 8 transfers found by group name.
# Passes when all 8 succeed and both xferd drain holding nothing (their
# entries leave etcd first).  Without an etcd binary: 77 (skipped), except
# in CI, where tools/run installs Debian's etcd-server.
set -u
xferd=$1 discovery=$2
if ! command -v etcd >/dev/null 2>&1; then
    echo "run_discovery: no etcd (Debian's etcd-server)" >&2
    [ -n "${CI:-}" ] && exit 1
    exit 77
fi
tmp=$(mktemp -d)
pids=
cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "run_discovery: $*" >&2; tail -n 20 "$tmp"/*.out >&2; exit 1; }
port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
cport=$(port) pport=$(port)
url=http://127.0.0.1:$cport
etcd --name ex --data-dir "$tmp/etcd" --listen-client-urls "$url" \
    --advertise-client-urls "$url" \
    --listen-peer-urls "http://127.0.0.1:$pport" \
    --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "ex=http://127.0.0.1:$pport" \
    --log-level warn >"$tmp/etcd.out" 2>&1 &
pids="$pids $!"
for k in 0 1; do
    "$xferd" --port 0 --shard "$k" --group kv --etcd "$url" --etcd-ttl 2 \
        --pool 1M --consume >"$tmp/xferd$k.out" 2>&1 &
    pids="$pids $!"
    eval "xpid$k=$!"
done
members=
for _ in $(seq 1 100); do
    members=$("$xferd" --etcd "$url" --group kv --members 2>/dev/null)
    case $members in *": 2 members"*) break ;; esac
    sleep 0.1
done
case $members in *": 2 members"*) ;; *) fail "shards not registered" ;; esac
echo "$members"
"$discovery" 8 2 kv "$url" >"$tmp/discovery.out" 2>&1 ||
    fail "the producer failed"
grep -q "^8 transfers done, 0 failed$" "$tmp/discovery.out" ||
    fail "not 8 transfers done"
# shellcheck disable=SC2154 # set by eval above
for p in $xpid0 $xpid1; do
    kill -TERM "$p"
    wait "$p" || fail "xferd $p did not drain cleanly"
done
grep -h "xferd stats: all" "$tmp"/xferd*.out | grep -v " in_use=0 " &&
    fail "a shard still holds bytes"
echo "run_discovery: 8 transfers through etcd, shards empty"
