#!/usr/bin/env python3
"""tools/bench/pyref.py - the pure-Python reference for xfer's TCP bench.

What a Python connector of the same protocol does: a producer that runs
each transfer as three sequential fan-outs to every shard (reserve, write,
commit; a cancel to every reserved shard when one fails) and shard servers
that keep a reservation table over a byte pool.  Written the way a careful
Python engineer would write it: asyncio Protocols (not streams), one
future per request, the producer's fan-outs awaited with gather, each
server answering everything one read brought with one write.  uvloop and
msgpack are used when importable (Debian: python3-uvloop, python3-msgpack),
else stdlib asyncio and json; --stdlib forces the latter.  The shards keep
no leases and no tombstones, so they do less work than xferd.

Frame: u32 meta length, u32 data length (little-endian), the meta (a
msgpack or JSON list), then the data bytes.  Meta lists:
    [RESERVE, req, id, attempt, len]      -> [RESERVE_OK, req, resv, addr]
    [WRITE, req, id, attempt, resv, off]  -> [WRITE_ACK, req]   (+ data)
    [COMMIT, req, id, attempt, resv]      -> [COMMIT_ACK, req]
    [CANCEL, req, id, attempt, resv]      -> [CANCEL_ACK, req]
    any request refused                   -> [ERROR, req, code]

Usage:
    pyref.py shard --port-file F [--port 0] [--pool BYTES] [--watch-stdin]
                   [--stdlib]
    pyref.py producer --ports P,P,... [--stdlib]
        prints "ready loop=L codec=C" once connected, then answers each
        stdin line "run INFLIGHT SECONDS MAX_UNITS SLICE" with
        "result done=N failed=F secs=S p50_us=X p99_us=Y"; "quit" ends it.
    pyref.py run [--shards 4] [--inflight 1,64] [--seconds 2] [--stdlib]
        standalone: starts the shards itself and prints the figures.

xfer-bench tcp starts the shards and the producer as separate processes and
reads their CPU from /proc; other benchmarks (the Python binding's) import
this file and call start_shards(), connect() and closed_loop().
"""
import argparse
import asyncio
import os
import struct
import subprocess
import sys
import tempfile
import time

RESERVE, RESERVE_OK, WRITE, WRITE_ACK, COMMIT, COMMIT_ACK, CANCEL, \
    CANCEL_ACK, ERROR = range(1, 10)
ERR_STATE, ERR_BUSY, ERR_PROTO = -1, -2, -3
HDR = struct.Struct("<II")
FREE, RESERVED = 0, 1


def choose(stdlib):
    """(loop factory, pack, unpack, loop name, codec name)."""
    new_loop, loop_name = asyncio.new_event_loop, "asyncio"
    pack, unpack, codec = None, None, "json"
    if not stdlib:
        try:
            import uvloop
            new_loop, loop_name = uvloop.new_event_loop, "uvloop"
        except ImportError:
            pass
        try:
            import msgpack
            pack, unpack, codec = msgpack.packb, msgpack.unpackb, "msgpack"
        except ImportError:
            pass
    if pack is None:
        import json
        dumps = json.dumps

        def pack(m):
            return dumps(m, separators=(",", ":")).encode()
        unpack = json.loads
    return new_loop, pack, unpack, loop_name, codec


def frames(buf, unpack):
    """Yield (meta, data) for every whole frame in buf; drop them from buf."""
    off, n = 0, len(buf)
    while n - off >= 8:
        mlen, dlen = HDR.unpack_from(buf, off)
        end = off + 8 + mlen + dlen
        if end > n:
            break
        meta = unpack(bytes(buf[off + 8:off + 8 + mlen]))
        data = bytes(buf[off + 8 + mlen:end]) if dlen else b""
        off = end
        yield meta, data
    del buf[:off]


# --------------------------------------------------------------------------
# The shard server
# --------------------------------------------------------------------------

class Shard:
    """A reservation table over a byte pool (bump allocation, wraps)."""

    def __init__(self, pool_bytes):
        self.pool = bytearray(pool_bytes)
        self.used = 0
        self.bump = 0
        self.next_resv = 1
        self.resv = {}  # id -> [attempt, resv_id, addr, len, state]

    def reserve(self, tid, attempt, n):
        r = self.resv.get(tid)
        if r is not None:
            if r[0] == attempt and r[4] == RESERVED:
                return r  # idempotent
            return None
        if n > len(self.pool) - self.used:
            return None
        if self.bump + n > len(self.pool):
            self.bump = 0
        r = [attempt, self.next_resv, self.bump, n, RESERVED]
        self.next_resv += 1
        self.bump += n
        self.used += n
        self.resv[tid] = r
        return r

    def find(self, tid, attempt, resv_id):
        r = self.resv.get(tid)
        if r is None or r[0] != attempt or r[1] != resv_id:
            return None
        return r

    def free(self, tid, r):
        del self.resv[tid]
        self.used -= r[3]

    def handle(self, m, data):
        """The reply meta list for request m (with its data)."""
        t, req = m[0], m[1]
        if t == RESERVE:
            r = self.reserve(m[2], m[3], m[4])
            return [RESERVE_OK, req, r[1], r[2]] if r else [ERROR, req,
                                                            ERR_BUSY]
        r = self.find(m[2], m[3], m[4]) if t in (WRITE, COMMIT, CANCEL) \
            else None
        if t == CANCEL:
            if r is not None:
                self.free(m[2], r)
            return [CANCEL_ACK, req]
        if r is None:
            return [ERROR, req, ERR_STATE]
        if t == WRITE:
            off = m[5]
            if off + len(data) > r[3]:
                return [ERROR, req, ERR_PROTO]
            a = r[2] + off
            self.pool[a:a + len(data)] = data
            return [WRITE_ACK, req]
        # COMMIT: ready, and taken and released at once by the consumer
        # (what xferd --consume does).
        self.free(m[2], r)
        return [COMMIT_ACK, req]


class ShardProtocol(asyncio.Protocol):
    def __init__(self, shard, pack, unpack):
        self.shard, self.pack, self.unpack = shard, pack, unpack
        self.buf = bytearray()
        self.tr = None

    def connection_made(self, transport):
        self.tr = transport

    def data_received(self, data):
        self.buf += data
        out = []
        pack = self.pack
        for m, d in frames(self.buf, self.unpack):
            meta = pack(self.shard.handle(m, d))
            out.append(HDR.pack(len(meta), 0))
            out.append(meta)
        if out:
            self.tr.write(b"".join(out))


def serve_shard(args):
    new_loop, pack, unpack, _, _ = choose(args.stdlib)
    loop = new_loop()
    shard = Shard(args.pool)
    server = loop.run_until_complete(loop.create_server(
        lambda: ShardProtocol(shard, pack, unpack), "127.0.0.1", args.port))
    port = server.sockets[0].getsockname()[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.rename(tmp, args.port_file)
    if args.watch_stdin:
        fd = sys.stdin.fileno()
        loop.add_reader(fd, lambda: os.read(fd, 4096) or loop.stop())
    loop.run_forever()


# --------------------------------------------------------------------------
# The producer
# --------------------------------------------------------------------------

class Conn(asyncio.Protocol):
    """One shard connection: requests out, futures resolved by replies."""

    def __init__(self, loop, pack, unpack):
        self.loop, self.pack, self.unpack = loop, pack, unpack
        self.pending = {}
        self.next_req = 1
        self.buf = bytearray()
        self.tr = None

    def connection_made(self, transport):
        self.tr = transport

    def call(self, m, data=b""):
        req = self.next_req
        self.next_req += 1
        m[1] = req
        fut = self.loop.create_future()
        self.pending[req] = fut
        meta = self.pack(m)
        self.tr.write(HDR.pack(len(meta), len(data)) + meta + data)
        return fut

    def data_received(self, data):
        self.buf += data
        for m, _ in frames(self.buf, self.unpack):
            fut = self.pending.pop(m[1], None)
            if fut is not None and not fut.done():
                fut.set_result(m)

    def connection_lost(self, exc):
        for fut in self.pending.values():
            if not fut.done():
                fut.set_result([ERROR, 0, ERR_PROTO])
        self.pending.clear()


async def connect(loop, ports, pack, unpack):
    conns = []
    for p in ports:
        _, c = await loop.create_connection(
            lambda: Conn(loop, pack, unpack), "127.0.0.1", p)
        conns.append(c)
    return conns


async def transfer(conns, tid, data):
    """One transfer; True when every shard committed."""
    gather = asyncio.gather
    rs = await gather(*[c.call([RESERVE, 0, tid, 1, len(data)])
                        for c in conns])
    ok = all(r[0] == RESERVE_OK for r in rs)
    if ok:
        ws = await gather(*[c.call([WRITE, 0, tid, 1, r[2], 0], data)
                            for c, r in zip(conns, rs)])
        ok = all(w[0] == WRITE_ACK for w in ws)
    if ok:
        cs = await gather(*[c.call([COMMIT, 0, tid, 1, r[2]])
                            for c, r in zip(conns, rs)])
        ok = all(x[0] == COMMIT_ACK for x in cs)
    if not ok:  # roll back every shard that reserved
        await gather(*[c.call([CANCEL, 0, tid, 1, r[2]])
                       for c, r in zip(conns, rs) if r[0] == RESERVE_OK])
    return ok


async def closed_loop(conns, inflight, seconds, max_units=0, slice_bytes=0,
                      first_id=1):
    """inflight workers, each running transfers back to back.  Returns
    (done, failed, secs, sorted latencies in ns, next id)."""
    state = {"id": first_id, "started": 0, "done": 0, "failed": 0}
    lat = []
    data = bytes(slice_bytes)
    stop = time.monotonic_ns() + int(seconds * 1e9)
    now = time.monotonic_ns

    async def worker():
        while now() < stop and (not max_units or
                                state["started"] < max_units):
            state["started"] += 1
            tid = state["id"]
            state["id"] += 1
            t0 = now()
            if await transfer(conns, tid, data):
                state["done"] += 1
                lat.append(now() - t0)
            else:
                state["failed"] += 1

    t0 = now()
    await asyncio.gather(*[worker() for _ in range(inflight)])
    secs = (now() - t0) / 1e9
    lat.sort()
    return state["done"], state["failed"], secs, lat, state["id"]


def pct_us(lat, q):
    return lat[min(len(lat) - 1, int(len(lat) * q))] / 1e3 if lat else 0.0


def result_line(done, failed, secs, lat):
    return "result done=%d failed=%d secs=%.6f p50_us=%.1f p99_us=%.1f" % (
        done, failed, secs, pct_us(lat, 0.5), pct_us(lat, 0.99))


def produce(args):
    new_loop, pack, unpack, loop_name, codec = choose(args.stdlib)
    loop = new_loop()
    asyncio.set_event_loop(loop)
    ports = [int(p) for p in args.ports.split(",")]
    conns = loop.run_until_complete(connect(loop, ports, pack, unpack))
    print("ready loop=%s codec=%s" % (loop_name, codec), flush=True)
    next_id = 1
    for line in sys.stdin:
        w = line.split()
        if not w or w[0] == "quit":
            break
        if w[0] != "run" or len(w) != 5:
            print("error bad command", flush=True)
            continue
        done, failed, secs, lat, next_id = loop.run_until_complete(
            closed_loop(conns, int(w[1]), float(w[2]), int(w[3]), int(w[4]),
                        next_id))
        print(result_line(done, failed, secs, lat), flush=True)


# --------------------------------------------------------------------------
# Standalone
# --------------------------------------------------------------------------

def start_shards(n, stdlib=False, pool=64 << 20, timeout=10.0):
    """Start n shard processes; returns ([Popen], [port]).  Each exits when
    its stdin (a pipe held by the returned Popen) closes, so none outlives
    the caller; the caller may also kill them."""
    d = tempfile.mkdtemp(prefix="xfer-pyref-")
    procs, files = [], []
    for k in range(n):
        pf = os.path.join(d, "shard-%d.port" % k)
        cmd = [sys.executable, os.path.abspath(__file__), "shard",
               "--port-file", pf, "--pool", str(pool), "--watch-stdin"]
        if stdlib:
            cmd.append("--stdlib")
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE))
        files.append(pf)
    ports, end = [], time.monotonic() + timeout
    for pf in files:
        while not os.path.exists(pf):
            if time.monotonic() > end:
                for p in procs:
                    p.kill()
                raise RuntimeError("a shard did not listen in time")
            time.sleep(0.005)
        with open(pf) as f:
            ports.append(int(f.read()))
        os.unlink(pf)
    os.rmdir(d)
    return procs, ports


def cpu_s(pid):
    """utime + stime of a process in seconds (/proc, clock ticks)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def standalone(args):
    procs, ports = start_shards(args.shards, args.stdlib)
    try:
        new_loop, pack, unpack, loop_name, codec = choose(args.stdlib)
        loop = new_loop()
        asyncio.set_event_loop(loop)
        conns = loop.run_until_complete(connect(loop, ports, pack, unpack))
        print("pyref: %d shard processes, %s + %s" % (args.shards,
                                                      loop_name, codec))
        for n in [int(x) for x in args.inflight.split(",")]:
            pids = [os.getpid()] + [p.pid for p in procs]
            c0 = sum(cpu_s(p) for p in pids)
            done, failed, secs, lat, _ = loop.run_until_complete(
                closed_loop(conns, n, args.seconds))
            cpu = sum(cpu_s(p) for p in pids) - c0
            print("  %3d in flight: %8.0f transfers/s  p50 %7.1f us  p99 "
                  "%7.1f us  CPU %6.1f us/transfer%s" % (
                      n, done / secs, pct_us(lat, 0.5), pct_us(lat, 0.99),
                      cpu * 1e6 / done if done else 0,
                      "  (%d failed)" % failed if failed else ""))
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("shard")
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--port-file", required=True)
    s.add_argument("--pool", type=int, default=64 << 20)
    s.add_argument("--watch-stdin", action="store_true",
                   help="exit when stdin reaches its end (the parent died)")
    p = sub.add_parser("producer")
    p.add_argument("--ports", required=True)
    r = sub.add_parser("run")
    r.add_argument("--shards", type=int, default=4)
    r.add_argument("--inflight", default="1,64")
    r.add_argument("--seconds", type=float, default=2.0)
    for x in (s, p, r):
        x.add_argument("--stdlib", action="store_true",
                       help="stdlib asyncio and json even when uvloop and "
                            "msgpack are importable")
    args = ap.parse_args()
    {"shard": serve_shard, "producer": produce, "run": standalone}[
        args.cmd](args)


if __name__ == "__main__":
    main()
