#!/bin/sh
# examples/quickstart_c.sh - the README's quick start in C, as written
# there (its block is a copy of the lines below): two shard processes
# (examples/server.c), the consumer's scheduler (examples/consumer.c) and
# a producer (examples/producer.c) over TCP on 127.0.0.1:7470 and 7471.
# Run it from the source root after `tools/run build`.  The suite runs it
# (examples/run_quickstart.sh) in a network namespace of its own, so its
# fixed ports meet nobody's.  Exit status 0 when every part did.
set -e
# A part that failed leaves no process behind.
trap 'kill ${s0-} ${s1-} ${c-} 2>/dev/null || :' EXIT
cd build/examples
./server 0 7470 & s0=$!      # shard 0: a TP worker serving its own buffer
./server 1 7471 & s1=$!      # shard 1
./consumer 8 127.0.0.1:7470 127.0.0.1:7471 & c=$!   # the scheduler: ids 1..8
./producer 8 127.0.0.1:7470 127.0.0.1:7471          # 8 transfers, 4 KiB a shard
wait $c                      # 8 of 8 available, each released
kill $s0 $s1; wait $s0; wait $s1    # the workers drain and exit
