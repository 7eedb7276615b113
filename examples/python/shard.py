"""examples/python/shard.py - one shard of a consumer group: a
tensor-parallel worker that serves its own buffer over TCP, so the
producer's bytes land where its model reads them.

    python3 shard.py SHARD PORT

Prints "shard SHARD listening on PORT"; on SIGTERM it drains (no new
transfers; waits until nothing is being written), prints what it still
holds and exits 0.
"""
import signal
import sys

import xfer

shard, port = int(sys.argv[1]), int(sys.argv[2])
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])  # sigwait below
memory = bytearray(1 << 20)             # the worker's own memory
server = xfer.Server([memory], shards=[shard], port=port)
print("shard %d listening on %d" % (shard, server.port), flush=True)
signal.sigwait([signal.SIGTERM])
clean = server.drain()
st = server.stats()
print("drained: %d bytes held, %d live" % (st["bytes_in_use"], st["live"]))
server.close()                          # the memory is ours again
sys.exit(0 if clean else 1)
