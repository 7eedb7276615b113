#!/bin/sh
# tests/multiproc/demo_etcd.sh DEMO XFERD TRACE - `xfer-demo --tcp --etcd`
# against a real etcd on free loopback ports (what `tools/run demo --tcp
# --etcd` runs): the shards register there, the producer finds them by
# group, and shard 2's kill -9 must be noticed through its lease (the demo
# fails otherwise) before it restarts.  Passes on the demo's PASS.  No
# etcd binary: 77 (skipped), except in CI, where tools/run installs it.
set -u
demo=$1 xferd=$2 trace=$3
if ! command -v etcd >/dev/null 2>&1; then
    echo "demo_etcd: no etcd (Debian's etcd-server)" >&2
    [ -n "${CI:-}" ] && exit 1
    exit 77
fi
tmp=$(mktemp -d)
epid=
cleanup() {
    [ -n "$epid" ] && kill -9 "$epid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
cport=$(port) pport=$(port)
url=http://127.0.0.1:$cport
etcd --name demo --data-dir "$tmp/etcd" --listen-client-urls "$url" \
    --advertise-client-urls "$url" \
    --listen-peer-urls "http://127.0.0.1:$pport" \
    --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "demo=http://127.0.0.1:$pport" \
    --log-level warn >"$tmp/etcd.out" 2>&1 &
epid=$!
"$demo" --tcp --etcd "$url" --xferd "$xferd" --quiet --transfers 1500 \
    --seed 7 --trace "$trace"
