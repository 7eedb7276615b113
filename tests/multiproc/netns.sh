#!/bin/sh
# Producer and 4 shards in two network namespaces joined by a veth pair,
# with packet loss injected by nftables (or tc netem when nft is missing).
# Asserts what the loopback tests assert: every transfer completes exactly
# once, the producer staging is free, every shard pool is full again.
# Exits 77 (skipped) where network namespaces are not permitted.
# Usage: netns.sh XFERD TCP_PRODUCER
# Only addresses created inside the two namespaces are used (10.231.0.0/30).
set -u
xferd=$1; producer=$2
tag=xf$$
pns=${tag}p; cns=${tag}c
work=$(mktemp -d "${TMPDIR:-/tmp}/xfer-netns.XXXXXX")
pids=""

cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    ip netns del "$pns" 2>/dev/null
    ip netns del "$cns" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

skip() { echo "netns: skipped: $1"; exit 77; }

[ "$(id -u)" = 0 ] || skip "not root"
command -v ip >/dev/null 2>&1 || skip "no ip(8)"
ip netns add "$pns" 2>/dev/null || skip "ip netns add not permitted"
ip netns add "$cns" 2>/dev/null || skip "ip netns add not permitted"
ip link add "${tag}a" type veth peer name "${tag}b" 2>/dev/null ||
    skip "veth not permitted"
ip link set "${tag}a" netns "$pns" && ip link set "${tag}b" netns "$cns" ||
    skip "cannot move veth"
ip -n "$pns" addr add 10.231.0.1/30 dev "${tag}a"
ip -n "$cns" addr add 10.231.0.2/30 dev "${tag}b"
for ns in "$pns" "$cns"; do
    ip -n "$ns" link set lo up
done
ip -n "$pns" link set "${tag}a" up
ip -n "$cns" link set "${tag}b" up

loss="none"
if command -v nft >/dev/null 2>&1 &&
    ip netns exec "$cns" nft -f - 2>/dev/null <<NFT
table inet xferloss {
    chain in {
        type filter hook input priority 0; policy accept;
        iifname "${tag}b" numgen random mod 100 < 2 drop
    }
}
NFT
then
    loss="nftables: 2% of packets into the shards dropped"
elif command -v tc >/dev/null 2>&1 &&
    ip netns exec "$pns" tc qdisc add dev "${tag}a" root netem loss 2% \
        2>/dev/null; then
    loss="tc netem: 2% loss"
fi
echo "netns: loss injection: $loss"

addrs=""
for k in 0 1 2 3; do
    ip netns exec "$cns" "$xferd" --addr 10.231.0.2 --port 0 \
        --port-file "$work/port$k" --shards "$k" --pool 64M \
        --lease-ttl 5s --consume --quiet --insecure \
        >"$work/xferd$k.log" 2>&1 &
    pids="$pids $!"
done
for k in 0 1 2 3; do
    i=0
    while [ ! -s "$work/port$k" ] && [ $i -lt 500 ]; do
        sleep 0.02; i=$((i + 1))
    done
    [ -s "$work/port$k" ] || { echo "netns: xferd $k did not start"; exit 1; }
    addrs="$addrs${addrs:+,}10.231.0.2:$(cat "$work/port$k")"
done
echo "netns: shards at $addrs"
timeout 600 ip netns exec "$pns" "$producer" "$addrs" 2000 64 65536 \
    --check-pools
rc=$?
echo "netns: producer exit $rc"
exit $rc
