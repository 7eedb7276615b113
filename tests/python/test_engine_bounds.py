"""tests/python/test_engine_bounds.py - issue 23 items 4, 5 and 7 from
Python: Engine.cancel raises BusyError when the loop refuses it (as
Consumer.cancel does), shutdown() and the garbage collector never wait
past the shutdown deadline for a shard that does not answer its cancels
(what is left completes once, AbandonedError), and each status names its
cause."""
import gc
import threading

import pytest

import xfer
from conftest import loop_engine, wait_for

S = 2
SLICE = 256


def sl():
    return xfer.split(0, S * SLICE, S)


def test_engine_cancel_refused_raises_busy():
    e, tp = loop_engine(nshards=S, max_transfers=4, max_tombstones=4)
    for i in range(1, 5):
        e.cancel(i)                 # four tombstones fill the table
    with pytest.raises(xfer.BusyError):
        e.cancel(77)                # refused on the loop: the caller sees it
    assert e.state(77) == "NEW"     # no tombstone was made
    assert e.stats()["cancels_refused"] == 1
    e.shutdown()


def test_engine_cancel_accepted_returns_none():
    e, tp = loop_engine(nshards=S)
    assert e.cancel(5) is None
    assert e.state(5) == "TOMBSTONED"
    e.shutdown()


def stuck_engine(**kw):
    """An engine whose transfers fail a write on shard 0 and whose cancels
    shard 1 never answers (only an abort ends them); without a deadline a
    cancel round would last an hour."""
    faults = [xfer.Fault("fail", op="write", shard=0),
              xfer.Fault("drop", op="cancel", shard=1)]
    return loop_engine(nshards=S, faults=faults, cancel_op_timeout=3600,
                       default_timeout=3600, **kw)


def test_shutdown_deadline_abandons_what_is_left():
    e, tp = stuck_engine(shutdown_timeout=0.2)
    pool = e.register_pool(bytearray(S * SLICE))
    got = []
    for i in (1, 2, 3):
        e.submit_callback(i, pool, sl(), got.append)
    assert wait_for(lambda: all(e.state(i) == "CANCELLING" for i in (1, 2, 3)))
    e.shutdown()                     # returns: the deadline passed
    assert wait_for(lambda: len(got) == 3)
    assert sorted(r.id for r in got) == [1, 2, 3]        # each once
    for r in got:
        assert r.status == xfer.AbandonedError.code
        assert r.rollback_failed == 1 << 1                # left to shard 1


def test_gc_of_a_stuck_engine_does_not_block():
    e, tp = stuck_engine(shutdown_timeout=5.0)
    pool = e.register_pool(bytearray(S * SLICE))
    got, done = [], threading.Event()

    def cb(r):
        got.append(r)
        done.set()
    e.submit_callback(1, pool, sl(), cb)
    assert wait_for(lambda: e.state(1) == "CANCELLING")
    e.cycle = e                      # only the collector can reach it now
    del e, pool, tp
    collected = threading.Event()

    def collect():
        gc.collect()
        collected.set()
    th = threading.Thread(target=collect)
    th.start()
    th.join(60)
    # The finalizer did not wait for the shutdown: the transfer ends only
    # at the deadline, after the collector returned.
    assert collected.is_set()
    assert not done.is_set()
    assert done.wait(60)
    assert [r.id for r in got] == [1]
    assert got[0].status == xfer.AbandonedError.code
    assert issubclass(xfer.AbandonedError, xfer.ShutdownError)


def test_status_causes_are_distinct_classes():
    e, tp = loop_engine(nshards=S)
    pool = e.register_pool(bytearray(S * SLICE))
    assert e.submit_wait(1, pool, sl()).status == 0
    with pytest.raises(xfer.ReusedError):   # finished recently
        e.submit_wait(1, pool, sl())
    e.cancel(2)
    with pytest.raises(xfer.CancelledError) as ei:   # cancelled before
        e.submit_wait(2, pool, sl())
    assert type(ei.value) is xfer.CancelledError
    codes = {xfer.CancelledError.code, xfer.ReusedError.code,
             xfer.PeerCancelledError.code, xfer.ExpiredError.code,
             xfer.AbandonedError.code, xfer.NoPoolError.code,
             xfer.NotFoundError.code}
    assert len(codes) == 7
    # the refinements still read as the older, broader class
    assert issubclass(xfer.ReusedError, xfer.CancelledError)
    assert issubclass(xfer.PeerCancelledError, xfer.CancelledError)
    assert issubclass(xfer.NoPoolError, LookupError)
    e.shutdown()
