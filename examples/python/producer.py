"""examples/python/producer.py - the producer: N transfers of 4 KiB per
shard from one registered staging buffer, each completing once.

    python3 producer.py N ADDR...      # shard k at the k-th ADDR

Exit status 0 when every transfer succeeded.
"""
import sys

import xfer

n, addrs = int(sys.argv[1]), sys.argv[2:]
tcp = xfer.Tcp(addrs)
with xfer.Engine(tcp, default_timeout=10) as engine:
    staging = bytearray(b"x" * 4096 * len(addrs))
    pool = engine.register_pool(staging)    # no copy; held until closed
    tcp.wait_connected()                    # before that, CONN_LOST
    ok = 0
    for i in range(1, n + 1):
        try:
            engine.submit_wait(i, pool, xfer.split(0, len(staging), len(addrs)))
            ok += 1
        except xfer.Error as e:             # e.result: phase, shards
            print("transfer %d: %s" % (i, e.name))
print("%d transfers done, %d failed" % (ok, n - ok))
sys.exit(0 if ok == n else 1)
