"""tests/python/test_faults.py - exactly one outcome per submit (I1) under
the loop transport's seeded fault mix, with random cancels and all three
ways to wait (asyncio, blocking threads, callbacks) at once; and the
outcomes agree with what the shards' consumer received."""
import asyncio
import random
import threading
import zlib

import xfer
from conftest import loop_engine, run, wait_for

S = 4
SLICE = 512
N_ASYNC, N_WAIT, N_CB = 600, 120, 200     # 920 ids: < 1024 kept by received


def fault_mix(rng):
    """Every kind of fault, on every op, at rates that make each happen
    many times in a run."""
    mix = []
    for op in ("reserve", "write", "commit", "cancel"):
        mix += [xfer.Fault("fail", op=op, prob=rng.uniform(0.005, 0.03)),
                xfer.Fault("applied_lost", op=op,
                           prob=rng.uniform(0.005, 0.03)),
                xfer.Fault("delay", op=op, prob=0.05, delay=0.002)]
    mix.append(xfer.Fault("drop", prob=0.004))  # ended by deadlines
    return mix


def pattern(tid):
    return bytes((tid * 7 + i) & 0xFF for i in range(S * SLICE))


def test_faults_exactly_one_outcome_per_submit(seed):
    rng = random.Random(seed)
    e, tp = loop_engine(faults=fault_mix(rng), seed=seed,
                        write_time=0.0005, lease_ttl=0.3,
                        default_timeout=0.25)
    nslots = N_ASYNC + N_WAIT + N_CB + 1
    staging = bytearray(nslots * S * SLICE)
    for tid in range(1, nslots):
        staging[tid * S * SLICE:(tid + 1) * S * SLICE] = pattern(tid)
    pool = e.register_pool(staging)
    outcomes = {}      # id -> [status, ...]; each must have exactly one
    lock = threading.Lock()

    def record(r):
        with lock:
            outcomes.setdefault(r.id, []).append(r)

    def sl(tid):
        return xfer.split(tid * S * SLICE, S * SLICE, S)

    def waiter(ids):
        for tid in ids:
            try:
                record(e.submit_wait(tid, pool, sl(tid)))
            except xfer.Error as exc:
                record(exc.result)

    cb_done = threading.Event()

    def cb(r):
        record(r)
        with lock:
            if sum(1 for i in cb_ids if i in outcomes) == len(cb_ids):
                cb_done.set()

    ids = list(range(1, nslots))
    rng.shuffle(ids)
    async_ids = ids[:N_ASYNC]
    wait_ids = ids[N_ASYNC:N_ASYNC + N_WAIT]
    cb_ids = ids[N_ASYNC + N_WAIT:]
    cancels = set(rng.sample(ids, len(ids) // 10))

    async def one(tid):
        if tid in cancels and rng.random() < 0.2:
            e.cancel(tid)            # before its submit: pre-emptive
        t = e.submit(tid, pool, sl(tid))
        if tid in cancels:
            await asyncio.sleep(rng.uniform(0, 0.01))
            t.cancel()
        try:
            record(await t)
        except xfer.Error as exc:
            assert exc.result.id == tid
            record(exc.result)

    async def go():
        sem = asyncio.Semaphore(64)

        async def bounded(tid):
            async with sem:
                await one(tid)
        await asyncio.gather(*[bounded(t) for t in async_ids])

    ths = [threading.Thread(target=waiter, args=(wait_ids[i::3],))
           for i in range(3)]
    for th in ths:
        th.start()
    for tid in cb_ids:
        e.submit_callback(tid, pool, sl(tid), cb)
    run(go(), timeout=120)
    for th in ths:
        th.join(60)
    assert cb_done.wait(60)

    assert sorted(outcomes) == sorted(ids)
    multi = {i: v for i, v in outcomes.items() if len(v) != 1}
    assert not multi, "ids with more than one outcome: %s" % multi
    kinds = {}
    for tid, (r,) in outcomes.items():
        kinds[r.error_name] = kinds.get(r.error_name, 0) + 1
        got = tp.received(tid)
        if r.ok:
            whole = pattern(tid)
            assert got == [(SLICE, zlib.crc32(whole[k * SLICE:(k + 1) *
                                                    SLICE]))
                           for k in range(S)], tid
        elif r.phase != xfer.PHASE_COMPLETING:
            # A failure before COMPLETING: the consumer never had it.
            assert got == [None] * S, (tid, r)
    print("outcomes:", dict(sorted(kinds.items())))
    assert kinds.get("OK", 0) > len(ids) // 2
    assert len(kinds) >= 3          # successes, and failures of 2+ kinds

    st = e.stats()
    assert st["submitted"] == st["completed"]
    assert st["live"] == 0 and st["staging_bytes_in_use"] == 0
    assert st["py_submits"] == len(ids)
    assert st["completions_delivered"] == len(ids)
    assert st["py_delivered"] == len(async_ids) + len(cb_ids)
    assert st["py_unclaimed"] == 0 and st["py_delivery_errors"] == 0
    # Every shard byte comes back: rollbacks, or leases for what a failed
    # cancel left behind.
    assert wait_for(lambda: tp.stats()["shard_bytes_in_use"] == 0, 10)
    e.shutdown()
    assert not pool.registered
