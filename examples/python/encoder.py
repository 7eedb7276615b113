"""examples/python/encoder.py - an encoder that pushes its outputs to a
consumer group of 4 tensor-parallel shards over TCP, from asyncio.

Each encoder output is written into one registered staging buffer (no
copy on the way out), cut into one slice per shard and pushed as one
transfer; the scheduler awaits each outcome.  Request 3 is aborted by the
scheduler while its transfer runs (a cancel), request 4 is larger than a
shard's pool (a failure): both roll back on every shard, and every
request gets exactly one outcome.

    python3 encoder.py [ADDR,ADDR,ADDR,ADDR]   # default: 4 local xferd

Exit status 0 when every outcome is what this comment says.
"""
import asyncio
import os
import sys

import xfer
import xfer.xferd

SHARDS = 4
OUTPUT = 1 << 20        # bytes of one encoder output (all shards)
SHARD_POOL = "4M"       # each shard's pool: request 4 does not fit


async def push(engine, pool, staging, req, nbytes):
    off = (req - 1) * OUTPUT
    staging[off:off + nbytes] = os.urandom(nbytes)   # the encoder's output
    transfer = engine.submit(req, pool, xfer.split(off, nbytes, SHARDS))
    if req == 3:
        transfer.cancel()           # the scheduler aborts this request
    try:
        await transfer
        return req, "ok"
    except xfer.Error as e:         # e.result: phase, shards, flags
        return req, "%s in %s" % (e.name, e.result.phase_name)


async def main(addrs):
    engine = xfer.Engine(xfer.Tcp(addrs), default_timeout=10)
    staging = bytearray(24 * OUTPUT)
    pool = engine.register_pool(staging)    # held until the engine stops
    sizes = {1: OUTPUT, 2: OUTPUT, 3: OUTPUT, 4: 20 * OUTPUT}
    outcomes = await asyncio.gather(
        *[push(engine, pool, staging, r, n) for r, n in sizes.items()])
    await engine.aclose()           # every transfer ended, pool let go
    for req, what in outcomes:
        print("request %d: %s" % (req, what))
    return dict(outcomes)


def check(got):
    return (got[1] == got[2] == "ok" and got[4] == "NO_SPACE in reserving"
            and got[3] in ("CANCELLED in reserving", "CANCELLED in writing",
                           "ok"))   # "ok": it had committed already


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(0 if check(asyncio.run(main(sys.argv[1].split(",")))) else 1)
    with xfer.xferd.Group(SHARDS, pool=SHARD_POOL) as shards:
        sys.exit(0 if check(asyncio.run(main(shards.addrs))) else 1)
