"""tests/python/test_engine.py - the producer API from Python: submit and
await, the blocking and callback variants, results, errors, pools and
groups, the GIL, and which loop a completion reaches."""
import asyncio
import os
import threading
import time
import zlib

import pytest

import xfer
from conftest import loop_engine, run, wait_for

S = 4
SLICE = 4096


def fill(buf, tag):
    for i in range(len(buf)):
        buf[i] = (i * 31 + tag) & 0xFF


def test_engine_submit_lands_the_bytes_on_every_shard():
    e, tp = loop_engine()
    staging = bytearray(S * SLICE)
    fill(staging, 7)
    pool = e.register_pool(staging)

    async def go():
        return await e.submit(5, pool, xfer.split(0, len(staging), S),
                              user_data=99)
    r = run(go())
    assert isinstance(r, xfer.Result)
    assert (r.ok, r.status, r.id, r.attempt, r.user_data) == \
        (True, 0, 5, 1, 99)
    assert (r.phase, r.shards, r.first_failed_shard) == (0, (), None)
    got = tp.received(5)
    for k in range(S):
        part = bytes(staging[k * SLICE:(k + 1) * SLICE])
        assert got[k] == (SLICE, zlib.crc32(part))
    e.shutdown()
    assert e.closed and not pool.registered


def test_engine_failed_transfer_raises_its_class_with_the_result():
    e, tp = loop_engine(faults=[xfer.Fault("fail", op="write", shard=2,
                                           error=xfer.NoSpaceError)])
    pool = e.register_pool(bytearray(S * SLICE))

    async def go():
        with pytest.raises(xfer.NoSpaceError) as ei:
            await e.submit(1, pool, xfer.split(0, S * SLICE, S))
        return ei.value
    exc = run(go())
    assert isinstance(exc, xfer.Error) and exc.code == xfer.NoSpaceError.code
    assert exc.name == "NO_SPACE"
    r = exc.result
    assert (r.id, r.status, r.phase, r.phase_name) == \
        (1, xfer.NoSpaceError.code, xfer.PHASE_WRITING, "writing")
    assert r.shards == (2,) and r.first_failed_shard == 2
    assert not r.consumer_may_hold
    assert tp.received(1) == [None] * S   # failed before COMPLETING
    e.shutdown()


def test_engine_synchronous_refusals_raise_and_never_complete():
    e, tp = loop_engine()
    pool = e.register_pool(bytearray(S * SLICE))
    other, _ = loop_engine()
    other_pool = other.register_pool(bytearray(16))

    async def go():
        with pytest.raises(ValueError):
            e.submit(0, pool, xfer.split(0, S, S))            # id 0
        with pytest.raises(ValueError):
            e.submit(1, pool, xfer.split(0, S, 3))            # 3 slices
        with pytest.raises(ValueError):
            e.submit(1, pool, [(0, 8)] * 3 + [(S * SLICE, 1)])  # outside
        with pytest.raises(TypeError):
            e.submit(1, other_pool, xfer.split(0, 4, S))
        with pytest.raises(xfer.NotFoundError):
            e.submit(1, pool, xfer.split(0, 4, S), group=3)
        with pytest.raises(TypeError):
            e.submit(1, pool, xfer.split(0, 4, S), bogus=1)
    run(go())
    with pytest.raises(RuntimeError):          # no running asyncio loop
        e.submit(1, pool, xfer.split(0, 4, S))
    st = e.stats()
    assert st["py_submits"] == 0 and st["submitted"] == 0
    e.shutdown()
    other.shutdown()
    with pytest.raises(xfer.ShutdownError):
        e.submit_wait(2, pool, xfer.split(0, 4, S))
    with pytest.raises(xfer.ShutdownError):
        e.register_pool(bytearray(8))


def test_engine_error_classes_cover_every_code():
    codes = {c for c, _, _ in xfer._xfer.error_codes()}
    assert codes == set(xfer.errors)
    assert xfer.errors[xfer.BusyError.code] is xfer.BusyError
    assert issubclass(xfer.TimeoutError, TimeoutError)
    assert issubclass(xfer.ConnLostError, ConnectionError)
    assert issubclass(xfer.InvalidArgError, ValueError)
    e = xfer.BusyError(xfer.BusyError.code)
    assert (e.code, e.name, e.result) == (-3, "BUSY", None)
    assert str(e) == xfer.strerror(-3)


def test_engine_blocking_variant_waits_without_the_gil():
    """A thread that only counts keeps counting while the main thread is
    blocked in submit_wait on a transfer held up for 300 ms: the wait does
    not hold the GIL."""
    e, tp = loop_engine(faults=[xfer.Fault("delay", op="reserve",
                                           delay=0.3)])
    pool = e.register_pool(bytearray(S * SLICE))
    counts, stop = [0], threading.Event()

    def counter():
        while not stop.is_set():
            counts[0] += 1

    th = threading.Thread(target=counter)
    th.start()
    time.sleep(0.01)
    before = counts[0]
    r = e.submit_wait(1, pool, xfer.split(0, S * SLICE, S))
    during = counts[0] - before
    stop.set()
    th.join()
    assert r.ok and r.id == 1
    assert during > 1000, "the counting thread was starved: %d" % during
    with pytest.raises(xfer.CancelledError) as ei:
        e.cancel(2)
        e.submit_wait(2, pool, xfer.split(0, S * SLICE, S))
    assert ei.value.result.phase == xfer.PHASE_SUBMIT
    e.shutdown()


def test_engine_blocking_wait_interrupted_cancels_its_transfer():
    """A KeyboardInterrupt while blocked in submit_wait leaves the wait:
    the transfer is cancelled, its ticket freed by the loop when it ends
    (ASan checks that), and the engine goes on."""
    import _thread
    e, tp = loop_engine(faults=[xfer.Fault("delay", op="reserve", id=1,
                                           delay=0.5)])
    pool = e.register_pool(bytearray(S * SLICE))
    timer = threading.Timer(0.05, _thread.interrupt_main)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        e.submit_wait(1, pool, xfer.split(0, S * SLICE, S))
    timer.join()
    assert wait_for(lambda: e.stats()["live"] == 0)
    st = e.stats()
    assert st["py_wait_abandoned"] == 1 and st["cancelled"] == 1
    assert e.submit_wait(2, pool, xfer.split(0, S * SLICE, S)).ok
    e.shutdown()


def test_engine_callback_variant_runs_on_its_thread():
    e, tp = loop_engine()
    pool = e.register_pool(bytearray(S * SLICE))
    got, done = [], threading.Event()

    def cb(r):
        got.append((r.id, r.ok, threading.get_ident()))
        if len(got) == 20:
            done.set()

    for i in range(1, 21):
        e.submit_callback(i, pool, xfer.split(0, S * SLICE, S), cb)
    assert done.wait(10)
    assert sorted(g[0] for g in got) == list(range(1, 21))
    assert all(g[1] for g in got)
    assert len({g[2] for g in got}) == 1
    assert got[0][2] != threading.get_ident()
    e.shutdown()
    assert len(got) == 20


def test_engine_completions_reach_the_loop_that_awaited_them():
    """Two threads, each with its own asyncio loop, share one engine: each
    transfer resolves on the loop that awaited it."""
    e, tp = loop_engine()
    pool = e.register_pool(bytearray(S * SLICE))
    seen = {}

    def worker(base):
        async def go():
            me = threading.get_ident()
            ts = [e.submit(base + i, pool, xfer.split(0, S * SLICE, S))
                  for i in range(50)]
            where = []
            for t in ts:
                t.add_done_callback(
                    lambda f: where.append(threading.get_ident()))
            rs = await asyncio.gather(*ts)
            await asyncio.sleep(0)
            return me, where, rs
        seen[base] = run(go())

    ths = [threading.Thread(target=worker, args=(b,)) for b in (100, 200)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(30)
    for base in (100, 200):
        me, where, rs = seen[base]
        assert [r.id for r in rs] == [base + i for i in range(50)]
        assert where == [me] * 50
    assert e.stats()["py_channels"] == 2
    e.shutdown()


def test_engine_call_soon_mode_delivers_the_same():
    e, tp = loop_engine(notify="call_soon")
    pool = e.register_pool(bytearray(S * SLICE))

    async def go():
        ts = [e.submit(i, pool, xfer.split(0, S * SLICE, S))
              for i in range(1, 201)]
        return await asyncio.gather(*ts)
    rs = run(go())
    assert [r.id for r in rs] == list(range(1, 201)) and all(r.ok for r in rs)
    st = e.stats()
    assert st["py_delivered"] == st["py_submits"] == 200
    e.shutdown()


def test_engine_pools_and_groups():
    e, tp = loop_engine()
    a = bytearray(S * SLICE)
    p = e.register_pool(a)
    assert (p.id, p.nbytes, p.registered, p.obj is a) == (0, len(a), True,
                                                          True)
    with pytest.raises(BufferError):
        a.extend(b"x")           # held: the bytearray cannot move
    with pytest.raises(ValueError):
        e.register_pool(bytearray(0))
    with pytest.raises(TypeError):
        e.register_pool(12)
    two = xfer.Loop(2)
    g = e.add_group(two)
    assert g == 1 and two.group == 1
    with pytest.raises(ValueError):
        e.add_group(two)         # attached already

    async def go():
        return await e.submit(9, p, xfer.split(0, 2 * SLICE, 2), group=1)
    assert run(go()).ok
    assert two.received(9)[1] is not None
    e.unregister_pool(p)
    assert not p.registered
    a.extend(b"x")               # let go: it may move again
    with pytest.raises(xfer.NotFoundError):
        e.unregister_pool(p)
    assert e.state(9) == "TOMBSTONED" and e.state(77) == "NEW"
    assert e.idle()
    st = e.stats()
    assert (st["pools"], st["groups"], st["succeeded"]) == (0, 2, 1)
    e.shutdown()
    st = e.stats()               # the last figures, after shutdown
    assert st["succeeded"] == 1
    with pytest.raises(xfer.ShutdownError):
        two.stats()


def test_engine_unregister_waits_for_no_live_transfer():
    e, tp = loop_engine(faults=[xfer.Fault("delay", op="commit",
                                           delay=0.2)])
    p = e.register_pool(bytearray(S * SLICE))

    async def go():
        t = e.submit(1, p, xfer.split(0, S * SLICE, S))
        await asyncio.sleep(0.05)
        with pytest.raises(xfer.BusyError):
            e.unregister_pool(p)  # a live transfer reads it
        assert p.registered
        await t
        e.unregister_pool(p)
    run(go())
    assert not p.registered
    e.shutdown()


@pytest.mark.skipif(os.environ.get("XFER_SANITIZED") == "1",
                    reason="uvloop never frees its module state, which "
                           "LeakSanitizer reports at exit")
def test_engine_on_uvloop():
    uvloop = pytest.importorskip("uvloop")
    e, tp = loop_engine()
    pool = e.register_pool(bytearray(S * SLICE))

    async def go():
        assert type(asyncio.get_running_loop()).__module__.startswith(
            "uvloop")
        ts = [e.submit(i, pool, xfer.split(0, S * SLICE, S))
              for i in range(1, 101)]
        return await asyncio.gather(*ts)
    loop = uvloop.new_event_loop()
    try:
        rs = loop.run_until_complete(asyncio.wait_for(go(), 60))
    finally:
        loop.close()
    assert [r.id for r in rs] == list(range(1, 101)) and all(r.ok for r in rs)
    e.shutdown()


def test_engine_eager_small_blocks_take_one_op_per_shard():
    """eager_max_bytes: slices that fit go as one EAGER op per shard
    (a rule failing every reserve never fires) and lands whole; a bigger
    one takes the three rounds (and meets that rule)."""
    e, tp = loop_engine(eager_max_bytes=SLICE,
                        faults=[xfer.Fault("fail", op="reserve")])
    staging = bytearray(2 * S * SLICE)
    fill(staging, 3)
    pool = e.register_pool(staging)
    r = e.submit_wait(4, pool, xfer.split(0, S * SLICE, S))
    assert r.ok
    got = tp.received(4)
    for k in range(S):
        part = bytes(staging[k * SLICE:(k + 1) * SLICE])
        assert got[k] == (SLICE, zlib.crc32(part))
    with pytest.raises(xfer.Error) as ei:
        e.submit_wait(5, pool, xfer.split(0, 2 * S * SLICE, S))
    assert ei.value.result.phase == xfer.PHASE_RESERVING
    e.shutdown()


def test_engine_eager_failure_is_a_completing_failure():
    """A refused EAGER on one shard fails the transfer in COMPLETING with
    consumer_may_hold set, as a failed commit does (op "eager" in a
    Fault); without eager_max_bytes the same rule never fires."""
    rule = [xfer.Fault("fail", op="eager", shard=1)]
    e, tp = loop_engine(eager_max_bytes=SLICE, faults=rule)
    pool = e.register_pool(bytearray(S * SLICE))
    with pytest.raises(xfer.Error) as ei:
        e.submit_wait(6, pool, xfer.split(0, S * SLICE, S))
    r = ei.value.result
    assert (r.phase, r.consumer_may_hold) == (xfer.PHASE_COMPLETING, True)
    assert 1 in r.shards
    e.shutdown()
    plain, _ = loop_engine(faults=rule)
    pool = plain.register_pool(bytearray(S * SLICE))
    assert plain.submit_wait(6, pool, xfer.split(0, S * SLICE, S)).ok
    plain.shutdown()
