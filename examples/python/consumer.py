"""examples/python/consumer.py - the consumer's scheduler: waits until
every shard's part of ids 1..N is in place, hands it on, releases it.

    python3 consumer.py N ADDR...      # shard k at the k-th ADDR

Every id gets exactly one outcome: Available (with one region per
shard: shard, offset, length in that shard's memory) or Unavailable.
Exit status 0 when all N were available.
"""
import sys

import xfer

n, addrs = int(sys.argv[1]), sys.argv[2:]
available = 0
with xfer.Consumer(addrs) as consumer:  # leaving it: every release is sent
    for i in range(1, n + 1):
        try:
            consumer.expect(i, timeout=10)  # an outcome even if none comes
        except xfer.ExistsError:            # a shard reported it already
            pass
    for _ in range(n):
        outcome = consumer.get(timeout=20)
        if outcome.ok:
            print("id %d: %s" % (outcome.id, outcome.regions))
            available += 1
            outcome.release()           # the shards may reuse the memory
        else:
            print("id %d: %s" % (outcome.id, outcome.name))
print("%d of %d available" % (available, n))
sys.exit(0 if available == n else 1)
