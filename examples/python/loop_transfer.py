"""examples/python/loop_transfer.py - the smallest check that an installed
xfer package works: one transfer through the loop transport (4 shards in
this process, no network), its data compared with what the shards'
consumer received.  It prints where xfer was imported from.

    python3 loop_transfer.py

Exit status 0 when the transfer succeeded and every shard holds its slice.
"""
import asyncio
import os
import zlib

import xfer


async def main():
    staging = bytearray(os.urandom(64 * 1024))
    slices = xfer.split(0, len(staging), 4)
    async with xfer.Engine(xfer.Loop(4)) as engine:
        pool = engine.register_pool(staging)
        result = await engine.submit(1, pool, slices)
        received = engine.transports[0].received(1)
    assert result.ok, result
    expect = [(n, zlib.crc32(staging[o:o + n])) for o, n in slices]
    assert [tuple(r) for r in received] == expect, (received, expect)
    print("xfer %s: transfer %d ok, %d bytes over 4 shards"
          % (xfer.__file__, result.id, len(staging)))


asyncio.run(main())
