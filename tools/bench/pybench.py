#!/usr/bin/env python3
"""tools/bench/pybench.py - xfer driven from Python (asyncio) against 4 xferd
shard processes, next to the pure-Python reference of the same 3-round
protocol (tools/bench/pyref.py: uvloop + msgpack where Debian has them)
measured in the same run.

Each figure is a closed loop of N workers (N in flight), each running
0-byte transfers (reserve, write, commit on every shard) back to back for
--seconds: one driver for both sides (awaiting Engine.submit, or pyref's
transfer()), on the same kind of asyncio loop (uvloop when importable).  The binding is measured twice: completions woken through an
eventfd the asyncio loop watches (notify="fd", the default) and through
call_soon_threadsafe from the engine's loop thread (notify="call_soon"),
which says which of the two is faster.

For every figure: transfers/s, p50 and p99 latency, CPU per transfer of
every process involved (this process, whose engine thread is the xfer
producer, plus the 4 shard processes), and the ratio to the reference.

    pybench.py [--seconds 2] [--inflight 1,64] [--runs 1] [--stdlib]
               [--xferd PATH] [--smoke]

--runs N reports the median of N runs of each figure.  --smoke runs a few
hundred transfers per figure and checks only the counts (a suite test);
no time is ever asserted.  tools/run bench python runs it on the release
build.  Exit status: 0, 1 when a figure lost or failed transfers, 2 for a
bad flag.
"""
import argparse
import asyncio
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pyref  # noqa: E402  (the reference, imported, not copied)

import xfer  # noqa: E402
import xfer.xferd  # noqa: E402

NSHARDS = 4


def cpu_s(pids):
    return sum(pyref.cpu_s(p) for p in pids)


def busy_line():
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    return "load average %s (2 vCPUs here: a busy machine skews rates)" % (
        " ".join(load))


# --------------------------------------------------------------------------
# The closed loop, the same for both sides
# --------------------------------------------------------------------------

async def closed_loop(start, inflight, seconds, max_units, first_id):
    """inflight workers, each awaiting start(id) back to back (a transfer
    succeeded unless it returned False or raised xfer.Error).  Returns
    (done, failed, secs, sorted latencies in ns, next id)."""
    state = {"id": first_id, "started": 0, "done": 0, "failed": 0}
    lat = []
    now = time.monotonic_ns
    stop = now() + int(seconds * 1e9)

    async def worker():
        while now() < stop and (not max_units or
                                state["started"] < max_units):
            state["started"] += 1
            tid = state["id"]
            state["id"] += 1
            t0 = now()
            try:
                ok = await start(tid)
            except xfer.Error:
                ok = False
            if ok is False:
                state["failed"] += 1
            else:
                state["done"] += 1
                lat.append(now() - t0)

    t0 = now()
    await asyncio.gather(*[worker() for _ in range(inflight)])
    secs = (now() - t0) / 1e9
    lat.sort()
    return state["done"], state["failed"], secs, lat, state["id"]


class XferSide:
    """One Engine per notify mode over the same 4 xferd processes."""

    def __init__(self, addrs, notify, first_id):
        self.engine = xfer.Engine(
            xfer.Tcp(addrs), notify=notify, default_timeout=30,
            tombstone_ttl=30, max_tombstones=1 << 22)  # >= lease + margin
        if not self.engine.transports[0].wait_connected(10):
            raise RuntimeError("the xferd shards never connected")
        self.pool = self.engine.register_pool(bytearray(4096))
        self.next_id = first_id   # the shards are shared: ids must differ

    def run(self, loop, inflight, seconds, max_units):
        submit, pool, slices = (self.engine.submit, self.pool,
                               [(0, 0)] * NSHARDS)
        done, failed, secs, lat, self.next_id = loop.run_until_complete(
            closed_loop(lambda tid: submit(tid, pool, slices), inflight,
                        seconds, max_units, self.next_id))
        return done, failed, secs, lat

    def close(self):
        self.engine.shutdown()


class RefSide:
    """pyref's producer (its 3-round transfer) on this process's loop, to
    pyref's own 4 shard processes."""

    def __init__(self, loop, stdlib):
        _, self.pack, self.unpack, self.loop_name, self.codec = \
            pyref.choose(stdlib)
        self.procs, ports = pyref.start_shards(NSHARDS, stdlib)
        self.conns = loop.run_until_complete(
            pyref.connect(loop, ports, self.pack, self.unpack))
        self.next_id = 1

    def pids(self):
        return [p.pid for p in self.procs]

    def run(self, loop, inflight, seconds, max_units):
        conns, transfer = self.conns, pyref.transfer
        done, failed, secs, lat, self.next_id = loop.run_until_complete(
            closed_loop(lambda tid: transfer(conns, tid, b""), inflight,
                        seconds, max_units, self.next_id))
        return done, failed, secs, lat

    def close(self):
        for c in self.conns:
            c.tr.close()
        for p in self.procs:
            p.kill()
            p.wait()


# --------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------

def measure(side, loop, pids, inflight, seconds, max_units):
    c0, w0 = cpu_s(pids), time.monotonic()
    done, failed, secs, lat = side.run(loop, inflight, seconds, max_units)
    cpu = cpu_s(pids) - c0
    return {"done": done, "failed": failed, "rate": done / secs if secs else 0,
            "p50": pyref.pct_us(lat, 0.5), "p99": pyref.pct_us(lat, 0.99),
            "cpu_us": cpu * 1e6 / done if done else 0.0,
            "wall": time.monotonic() - w0}


def median_fig(figs):
    out = dict(figs[0])
    for k in ("rate", "p50", "p99", "cpu_us"):
        out[k] = statistics.median(f[k] for f in figs)
    out["done"] = sum(f["done"] for f in figs)
    out["failed"] = sum(f["failed"] for f in figs)
    return out


def line(name, n, f, ref=None):
    s = "  %-26s %3d in flight: %8.0f transfers/s  p50 %7.1f us  p99 " \
        "%7.1f us  CPU %6.1f us/transfer" % (name, n, f["rate"], f["p50"],
                                             f["p99"], f["cpu_us"])
    if ref:
        s += "  | %.2fx the rate, %.2fx the p50" % (
            f["rate"] / ref["rate"] if ref["rate"] else 0,
            f["p50"] / ref["p50"] if ref["p50"] else 0)
    if f["failed"]:
        s += "  (%d failed)" % f["failed"]
    return s


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--inflight", default="1,64")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--stdlib", action="store_true",
                    help="stdlib asyncio and json for the reference, and "
                         "stdlib asyncio for the binding")
    ap.add_argument("--xferd", default=None)
    ap.add_argument("--smoke", action="store_true")
    try:
        a = ap.parse_args(argv)
        a.inflight = [int(x) for x in a.inflight.split(",")]
        if a.seconds <= 0 or a.runs < 1 or min(a.inflight) < 1:
            raise ValueError
    except (ValueError, SystemExit) as e:
        if isinstance(e, SystemExit) and e.code == 0:
            raise
        print("pybench: bad arguments (see --help)", file=sys.stderr)
        sys.exit(2)
    return a


def main(argv):
    a = parse(argv)
    new_loop, _, _, loop_name, _ = pyref.choose(a.stdlib)
    loop = new_loop()
    asyncio.set_event_loop(loop)
    units = 300 if a.smoke else 0
    seconds = 60.0 if a.smoke else a.seconds
    shards = xfer.xferd.Group(
        NSHARDS, xferd=a.xferd, pool="64M", lease_ttl="1s",
        args=["--max-resv", "65536", "--max-tombs", str(1 << 20)])
    sides, bad = {}, 0
    try:
        sides["fd"] = XferSide(shards.addrs, "fd", 1)
        sides["call_soon"] = XferSide(shards.addrs, "call_soon", 1 << 40)
        ref = sides["ref"] = RefSide(loop, a.stdlib)
        xpids = [os.getpid()] + [p.pid for p in shards.procs]
        rpids = [os.getpid()] + ref.pids()
        print("pybench: 4 xferd shard processes; the binding on %s; the "
              "reference: pyref.py on %s + %s, 4 shard processes" % (
                  loop_name, ref.loop_name, ref.codec))
        print("  " + busy_line())
        for n in a.inflight:
            figs = {k: [] for k in ("ref", "fd", "call_soon")}
            for _ in range(a.runs):   # interleaved: the same load for all
                for k in ("ref", "fd", "call_soon"):
                    pids = rpids if k == "ref" else xpids
                    figs[k].append(measure(sides[k], loop, pids, n, seconds,
                                           units))
            m = {k: median_fig(v) for k, v in figs.items()}
            print(line("python reference", n, m["ref"]))
            print(line("xfer binding (fd)", n, m["fd"], m["ref"]))
            print(line("xfer binding (call_soon)", n, m["call_soon"],
                       m["ref"]))
            print("  %3d in flight: fd delivers %.2fx the rate of call_soon"
                  % (n, m["fd"]["rate"] / m["call_soon"]["rate"]
                     if m["call_soon"]["rate"] else 0))
            for k, f in m.items():
                want = units * a.runs if units else f["done"]
                if f["failed"] or f["done"] != want:
                    print("pybench: %s at %d in flight: %d done, %d failed, "
                          "%d wanted" % (k, n, f["done"], f["failed"], want),
                          file=sys.stderr)
                    bad = 1
        print("  " + busy_line())
    finally:
        for s in sides.values():
            s.close()
        shards.stop()
        loop.close()
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
