"""tests/python/test_cancel.py - cancel from Python in every phase of the
transfer machine (held there by delay rules of the loop transport), and
what asyncio's own cancellation (Task.cancel, wait_for) does to a
transfer: it ends the transfer and resumes the task only once no write
reads its staging memory."""
import asyncio

import pytest

import xfer
from conftest import loop_engine, run, wait_for

S = 4
SLICE = 1024
HOLD = 0.25          # seconds a delay rule holds a phase


def setup(**kw):
    e, tp = loop_engine(**kw)
    pool = e.register_pool(bytearray(S * SLICE))
    return e, tp, pool


def sl():
    return xfer.split(0, S * SLICE, S)


async def reach(e, tid, state):
    for _ in range(2000):
        if e.state(tid) == state:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("transfer %d never reached %s (now %s)" %
                         (tid, state, e.state(tid)))


def cancel_in(e, pool, state):
    """Submit id 1, cancel it once it is in `state`; its outcome."""
    async def go():
        t = e.submit(1, pool, sl())
        await reach(e, 1, state)
        assert t.cancel() is False and not t.cancelled()
        t.cancel()                    # idempotent
        try:
            return await t
        except xfer.Error as exc:
            return exc
    return run(go())


def test_cancel_in_reserving():
    e, tp, pool = setup(faults=[xfer.Fault("delay", op="reserve",
                                              delay=HOLD)])
    out = cancel_in(e, pool, "RESERVING")
    assert isinstance(out, xfer.CancelledError)
    assert out.result.phase == xfer.PHASE_RESERVING
    assert tp.received(1) == [None] * S
    assert wait_for(lambda: tp.stats()["shard_bytes_in_use"] == 0)
    e.shutdown()


def test_cancel_in_writing_releases_staging_only_after_the_writes():
    e, tp, pool = setup(write_time=HOLD)
    seen = {}

    async def go():
        t = e.submit(1, pool, sl())
        await reach(e, 1, "WRITING")
        seen["during"] = e.stats()["staging_bytes_in_use"]
        t.cancel()
        try:
            await t
        except xfer.CancelledError as exc:
            seen["after"] = e.stats()["staging_bytes_in_use"]
            return exc
    out = run(go())
    assert out.result.phase == xfer.PHASE_WRITING
    assert seen == {"during": S * SLICE, "after": 0}   # I3
    assert tp.received(1) == [None] * S
    e.shutdown()


def test_cancel_in_completing_lets_the_commits_finish():
    e, tp, pool = setup(faults=[xfer.Fault("delay", op="commit",
                                              delay=HOLD)])
    out = cancel_in(e, pool, "COMPLETING")
    assert isinstance(out, xfer.Result) and out.ok   # every commit acked
    assert None not in tp.received(1)
    e.shutdown()


def test_cancel_in_cancelling_keeps_the_first_outcome():
    e, tp, pool = setup(faults=[
        xfer.Fault("fail", op="write", shard=1),
        xfer.Fault("delay", op="cancel", delay=HOLD)])
    out = cancel_in(e, pool, "CANCELLING")
    assert isinstance(out, xfer.RemoteError)
    assert out.result.phase == xfer.PHASE_WRITING
    assert out.result.shards == (1,)
    e.shutdown()


def test_cancel_when_tombstoned_or_before_submit():
    e, tp, pool = setup()

    async def go():
        t = e.submit(1, pool, sl())
        r = await t
        assert t.cancel() is False      # done: nothing to cancel
        e.cancel(1)                     # a tombstoned id: no effect
        with pytest.raises(xfer.CancelledError) as again:
            await e.submit(1, pool, sl())   # the id is tombstoned
        e.cancel(2)                     # unknown: a pre-emptive tombstone
        with pytest.raises(xfer.CancelledError) as pre:
            await e.submit(2, pool, sl())
        return r, again.value, pre.value
    r, again, pre = run(go())
    assert r.ok
    for exc in (again, pre):
        assert exc.result.phase == xfer.PHASE_SUBMIT
        assert exc.result.attempt == 0 and exc.result.shards == ()
    assert e.state(1) == e.state(2) == "TOMBSTONED"
    e.shutdown()


def test_cancel_task_resumes_after_the_transfer_ended():
    """Task.cancel() on a task awaiting a transfer in WRITING: the task's
    CancelledError comes only once the transfer is tombstoned and its
    staging memory released."""
    e, tp, pool = setup(write_time=HOLD)
    seen = {}

    async def awaiter():
        try:
            await e.submit(1, pool, sl())
        except asyncio.CancelledError:
            seen["state"] = e.state(1)
            seen["staging"] = e.stats()["staging_bytes_in_use"]
            raise

    async def go():
        task = asyncio.ensure_future(awaiter())
        await reach(e, 1, "WRITING")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    run(go())
    assert seen == {"state": "TOMBSTONED", "staging": 0}
    st = e.stats()
    assert st["cancelled"] == 1 and st["py_delivered"] == 1
    e.shutdown()


def test_cancel_wait_for_timeout_gives_the_engine_outcome():
    e, tp, pool = setup(faults=[xfer.Fault("delay", op="reserve",
                                           delay=HOLD)])

    async def go():
        with pytest.raises(xfer.CancelledError) as ei:
            await asyncio.wait_for(e.submit(1, pool, sl()), 0.02)
        return ei.value
    exc = run(go())
    assert exc.result.phase == xfer.PHASE_RESERVING
    assert e.stats()["live"] == 0
    e.shutdown()
