#!/bin/sh
# examples/quickstart_py.sh - the README's quick start in Python, as
# written there: two shard processes (examples/python/shard.py), the
# consumer's scheduler (consumer.py) and a producer (producer.py) over TCP
# on 127.0.0.1:7480 and 7481, with the package from the build tree.  Run
# it from the source root after `tools/run build`.  The suite runs it
# (examples/run_quickstart.sh) in a network namespace of its own.
# Exit status 0 when every part did.
set -e
# A part that failed leaves no process behind.
trap 'kill ${s0-} ${s1-} ${c-} 2>/dev/null || :' EXIT
export PYTHONPATH=build/python
python3 examples/python/shard.py 0 7480 & s0=$!
python3 examples/python/shard.py 1 7481 & s1=$!
python3 examples/python/consumer.py 8 127.0.0.1:7480 127.0.0.1:7481 & c=$!
python3 examples/python/producer.py 8 127.0.0.1:7480 127.0.0.1:7481
wait $c
kill $s0 $s1; wait $s0; wait $s1
