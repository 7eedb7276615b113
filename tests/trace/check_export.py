#!/usr/bin/env python3
"""Check an `xfer-trace export` file: valid JSON, in the Chrome trace-event
form, with one process per transfer (named), a thread per shard, balanced
B/E slices except the open ones expected, and both counters.

usage: check_export.py OUT.json NTRANSFERS NSHARDS [OPEN_ID:SHARD ...]
NTRANSFERS "-": any number (then only the form and the balance of slices
and the tracks of the OPEN ids are checked).
OPEN_ID:SHARD names a transfer that never ended and the shard whose op is
still open; every other transfer must have every slice closed.
"""
import json
import sys


def fail(msg):
    print("check_export: " + msg)
    sys.exit(1)


def main():
    path, nshards = sys.argv[1], int(sys.argv[3])
    ntransfers = None if sys.argv[2] == "-" else int(sys.argv[2])
    open_ops = {}
    for spec in sys.argv[4:]:
        tid, shard = spec.split(":")
        open_ops.setdefault(int(tid), set()).add(int(shard))
    with open(path) as f:
        doc = json.load(f)  # raises on invalid JSON
    evs = doc["traceEvents"]
    if not isinstance(evs, list) or not evs:
        fail("no traceEvents")
    procs, threads, counters = {}, {}, {}
    depth = {}
    for e in evs:
        for key in ("ph", "pid"):
            if key not in e:
                fail("event without %s: %r" % (key, e))
        ph, pid = e["ph"], e["pid"]
        if ph != "M" and not isinstance(e.get("ts"), (int, float)):
            fail("event without numeric ts: %r" % e)
        if ph == "M" and e["name"] == "process_name":
            procs[pid] = e["args"]["name"]
        elif ph == "M" and e["name"] == "thread_name":
            threads[(pid, e["tid"])] = e["args"]["name"]
        elif ph == "C":
            counters.setdefault(e["name"], []).append(e["args"])
        elif ph == "B":
            depth[(pid, e["tid"])] = depth.get((pid, e["tid"]), 0) + 1
        elif ph == "E":
            key = (pid, e["tid"])
            if depth.get(key, 0) <= 0:
                fail("E without B on %r" % (key,))
            depth[key] -= 1
    xfers = {pid: name for pid, name in procs.items()
             if name.startswith("transfer ")}
    if ntransfers is not None and len(xfers) != ntransfers:
        fail("%d transfer tracks, expected %d" % (len(xfers), ntransfers))
    by_id = {}
    for pid, name in xfers.items():
        by_id[int(name.split()[1])] = pid
        if threads.get((pid, 0)) != "transfer":
            fail("%s has no transfer thread" % name)
        for k in range(nshards):
            if threads.get((pid, k + 1)) != "shard %d" % k:
                fail("%s has no child track for shard %d" % (name, k))
    for xid in open_ops:
        if xid not in by_id:
            fail("no track for open transfer %d" % xid)
    for xid, pid in by_id.items():
        want_open = open_ops.get(xid, set())
        top = depth.get((pid, 0), 0)
        if want_open and top != 2:
            fail("transfer %d: %d open slices on its track, expected 2"
                 % (xid, top))
        if not want_open and top != 0:
            fail("transfer %d ended but has %d open slices" % (xid, top))
        for k in range(nshards):
            d = depth.get((pid, k + 1), 0)
            if d != (1 if k in want_open else 0):
                fail("transfer %d shard %d: %d open slices" % (xid, k, d))
    for name in ("staging bytes in use", "writes in flight"):
        if name not in counters:
            fail("no counter '%s'" % name)
    writes = counters["writes in flight"][-1]["writes"]
    want_writes = sum(1 for x in open_ops.values() for _ in x)
    if writes != want_writes:
        fail("writes in flight ends at %d, expected %d" % (writes, want_writes))
    print("check_export: ok: %d events, %d transfer tracks" %
          (len(evs), len(xfers)))


if __name__ == "__main__":
    main()
