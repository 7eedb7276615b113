"""examples/python/connector.py - an encoder-cache connector over TCP: an
encoder process pushes its outputs to a consumer group of 4
tensor-parallel worker processes, and the consumer's scheduler awaits
them, hands each worker its part, and releases it.

    encoder  --xfer.Engine-->  worker 0..3 (xfer.Server over its memory)
                                   ^ check (offset, length)
    scheduler (xfer.Consumer) -----+  readiness, then release

Each worker serves its own buffer (on a GPU worker, the memory the model
reads), so the encoder's bytes land where they are used, with no copy and
no daemon.  The scheduler learns where each request's bytes are, tells
every worker, and each worker checks every byte of its part.  Request 3 is
aborted by the scheduler before the encoder sends it (a cancel: the
encoder's transfer fails and rolls back); request 4 is larger than a
worker's memory (a failure: it never arrives, and the scheduler's deadline
gives it an outcome anyway).  Every request gets exactly one outcome on
each side.

    python3 connector.py

Exit status 0 when every outcome is what this comment says.
"""
import asyncio
import multiprocessing
import random
import sys

import xfer

SHARDS = 4
OUTPUT = 1 << 20         # bytes of one encoder output (all shards)
MEMORY = 4 << 20         # each worker's buffer: request 4 does not fit
SIZES = {1: OUTPUT, 2: OUTPUT, 3: OUTPUT, 4: 20 * OUTPUT}


def encoder_output(req):
    return random.Random(req).randbytes(SIZES[req])


def worker(shard, pipe):
    """A TP worker: serves shard `shard` over its own memory, and checks
    the part of each request the scheduler hands it."""
    memory = bytearray(MEMORY)
    server = xfer.Server([memory], shards=[shard])
    pipe.send(server.port)
    for req, off, n in iter(pipe.recv, None):
        want = xfer.split(0, SIZES[req], SHARDS)[shard]
        part = encoder_output(req)[want[0]:want[0] + want[1]]
        pipe.send(n == want[1] and memory[off:off + n] == part)
    server.close()


async def scheduler(addrs, workers, start_encoder):
    """The consumer scheduler: one outcome per request."""
    got = {}
    async with xfer.Consumer(addrs) as consumer:
        await consumer.wait_up()
        consumer.expect(3)
        consumer.cancel(3)                     # aborted before it was sent
        start_encoder()
        for req in (1, 2, 4):                  # an outcome, whatever comes
            consumer.expect(req, timeout=5)
        async for outcome in consumer:
            if outcome.ok:                     # every shard's part is in place
                for (shard, off, n), pipe in zip(outcome.regions, workers):
                    pipe.send((outcome.id, off, n))
                checked = all(pipe.recv() for pipe in workers)
                outcome.release()              # the workers are done with it
                got[outcome.id] = "ok" if checked else "corrupt"
            else:
                got[outcome.id] = outcome.name
            if len(got) == len(SIZES):
                break
    return got


async def push(engine, pool, staging, req, off):
    staging[off:off + SIZES[req]] = encoder_output(req)
    try:
        await engine.submit(req, pool, xfer.split(off, SIZES[req], SHARDS))
        return req, "ok"
    except xfer.Error as e:
        return req, "%s in %s" % (e.name, e.result.phase_name)


async def encode(addrs):
    async with xfer.Engine(xfer.Tcp(addrs), default_timeout=10) as engine:
        staging = bytearray(sum(SIZES.values()))
        pool = engine.register_pool(staging)
        offs = [sum(list(SIZES.values())[:i]) for i in range(len(SIZES))]
        return dict(await asyncio.gather(
            *[push(engine, pool, staging, r, o) for r, o in zip(SIZES, offs)]))


def encoder(addrs, pipe):
    """The encoder process: pushes every output, reports the outcomes."""
    pipe.send(asyncio.run(encode(addrs)))


def main():
    mp = multiprocessing.get_context("spawn")
    pipes = [mp.Pipe() for _ in range(SHARDS)]
    procs = [mp.Process(target=worker, args=(k, pipes[k][1]))
             for k in range(SHARDS)]
    for p in procs:
        p.start()
    workers = [mine for mine, _ in pipes]
    addrs = ["127.0.0.1:%d" % w.recv() for w in workers]
    enc_pipe, theirs = mp.Pipe()
    enc = mp.Process(target=encoder, args=(addrs, theirs))
    consumed = asyncio.run(scheduler(addrs, workers, enc.start))
    produced = enc_pipe.recv()
    for w in workers:
        w.send(None)
    for p in procs + [enc]:
        p.join()
    for req in SIZES:
        print("request %d: encoder %s, scheduler %s" % (
            req, produced[req], consumed[req]))
    return (produced[1] == produced[2] == "ok" and
            consumed[1] == consumed[2] == "ok" and
            produced[3] == "PEER_CANCELLED in reserving" and
            consumed[3] == "CANCELLED" and
            produced[4] == "NO_SPACE in reserving" and
            consumed[4] == "TIMEOUT")


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
