"""tests/python/test_consumer.py - xfer.Consumer: one outcome per id on
each side under the server's seeded fault mix (and agreement between the
producer's outcomes and the consumer's, every byte checked in place);
release and view lifetime; the consumer's own cancel; a consumer dropped
or closed while it holds taken data; shared-memory pools of xferd --shm,
a shard restarted under them; waiting without losing an outcome.

The world is one process: an xfer.Server hosting 4 shards over 4
bytearrays (its own loop thread), an Engine over TCP to it, and a
Consumer reading the Server's buffers in place (buffers=server)."""
import asyncio
import gc
import os
import random
import threading
import weakref

import pytest

import xfer
import xfer.xferd
from conftest import run, wait_for

S = 4
SLICE = 1024


def world(pool_bytes=1 << 20, lease_ttl=2.0, take_grace=None, **srv_kw):
    srv = xfer.Server([bytearray(pool_bytes) for _ in range(S)],
                      lease_ttl=lease_ttl, take_grace=take_grace, **srv_kw)
    cons = xfer.Consumer(srv.addrs, buffers=srv)
    eng = xfer.Engine(xfer.Tcp(srv.addrs), default_timeout=2,
                      cancel_op_timeout=0.2, cancel_backoff=0.005)
    assert eng.transports[0].wait_connected(10), "producer never connected"
    assert cons.wait_connected(10), "consumer never connected"
    return srv, eng, cons


def close_all(*objs):
    for o in objs:
        o.shutdown() if isinstance(o, xfer.Engine) else o.close()


def staged(n, seed=0):
    """A staging buffer with n transfers of S * SLICE distinct bytes."""
    rng = random.Random(seed)
    buf = bytearray(rng.randbytes((n + 1) * S * SLICE))
    return buf, (lambda tid: xfer.split(tid * S * SLICE, S * SLICE, S))


def data_of(buf, tid):
    return bytes(buf[tid * S * SLICE:(tid + 1) * S * SLICE])


def taken_now(srv):
    return srv.stats()["taken_now"]


async def next_outcome(cons, timeout=10):
    return await asyncio.wait_for(cons.__anext__(), timeout)


# --------------------------------------------------------------------------
# Faults: one outcome per id on each side, and the two sides agree
# --------------------------------------------------------------------------

def agree(ids, produced, consumed, cancelled):
    """The rules of tools/demo_agree.c: done means available (every byte
    checked) unless this consumer cancelled it; failed before COMPLETING
    means never available; a failure in COMPLETING or later may go either
    way.  Returns the counts of each case."""
    counts = {}
    for tid in ids:
        r, (kind, what) = produced[tid], consumed[tid]
        if r.ok:
            assert kind == "available" or (tid in cancelled and
                                           what == "CANCELLED"), (tid, what)
            case = "done, " + (kind if kind == "available" else "cancelled")
        elif r.phase in (xfer.PHASE_RESERVING, xfer.PHASE_WRITING,
                         xfer.PHASE_SUBMIT):
            assert kind == "unavailable", (tid, r, what)
            case = "failed early, unavailable"
        else:
            case = "failed late, " + kind
        if kind == "available":
            assert what == "bytes ok", (tid, what)
        counts[case] = counts.get(case, 0) + 1
    return counts


def test_consumer_faults_one_outcome_each_side_and_agreement(seed):
    rng = random.Random(seed)
    srv, eng, cons = world(fault_ppm=10000, drop_ppm=400, fault_seed=seed)
    n = 400
    staging, sl = staged(n, seed)
    pool = eng.register_pool(staging)
    ids = list(range(1, n + 1))
    for tid in ids:
        cons.expect(tid, timeout=60)   # pulled in once the producer is done
    produced, consumed, cancelled = {}, {}, set()
    to_cancel = set(rng.sample(ids, n // 10))

    async def consume():
        async for o in cons:
            assert o.id not in consumed, "two outcomes for %d" % o.id
            if o.ok:
                with o:
                    got = b"".join(bytes(v) for v in o.views)
                consumed[o.id] = ("available", "bytes ok" if
                                  got == data_of(staging, o.id) else
                                  "bytes differ")
            else:
                consumed[o.id] = ("unavailable", o.name)
            if len(consumed) == n:
                return

    async def produce(tid, sem):
        async with sem:
            t = eng.submit(tid, pool, sl(tid))
            if tid in to_cancel:
                await asyncio.sleep(rng.uniform(0, 0.004))
                try:
                    cons.cancel(tid)
                    cancelled.add(tid)
                except xfer.StateError:
                    pass            # available already: released instead
            try:
                produced[tid] = await t
            except xfer.Error as e:
                produced[tid] = e.result

    async def go():
        sem = asyncio.Semaphore(32)
        reader = asyncio.ensure_future(consume())
        await asyncio.gather(*[produce(t, sem) for t in ids])
        for tid in ids:          # what never became ready ends soon now
            if tid not in consumed:
                try:
                    cons.expect(tid, timeout=1.0)
                except (xfer.ExistsError, xfer.CancelledError):
                    pass         # its outcome is on its way
        await reader
    run(go(), timeout=120)

    assert sorted(produced) == ids and sorted(consumed) == ids
    counts = agree(ids, produced, consumed, cancelled)
    print("agreement:", dict(sorted(counts.items())),
          "consumer cancels:", len(cancelled))
    assert counts.get("done, available", 0) > n // 3
    assert sum(v for k, v in counts.items() if k.startswith("failed")) > 0
    assert cancelled
    st = cons.stats()
    assert st["available"] + st["unavailable"] == n
    assert st["py_popped"] == n and st["py_queued"] == 0
    assert st["py_held"] == 0 and st["py_dropped"] == 0
    assert st["held"] == 0
    sst = srv.stats()
    assert sst["faults"] > 0, "the fault mix never fired"
    assert wait_for(lambda: taken_now(srv) == 0, 10)
    # Whatever a rollback left reserved, leases free (lease_ttl 2 s).
    assert wait_for(lambda: srv.stats()["bytes_in_use"] == 0, 15)
    close_all(cons, eng, srv)


# --------------------------------------------------------------------------
# Release and the views' lifetime
# --------------------------------------------------------------------------

def test_consumer_views_in_place_and_released():
    srv, eng, cons = world()
    staging, sl = staged(4)
    pool = eng.register_pool(staging)

    async def go():
        assert (await eng.submit(1, pool, sl(1))).ok
        o = await next_outcome(cons)
        assert o.ok and o.id == 1 and o.nbytes == S * SLICE
        views = o.views
        assert all(v.readonly for v in views)
        # In place: each view reads the Server's buffer at its region.
        for (shard, off, n), v in zip(o.regions, views):
            assert bytes(v) == bytes(srv.buffers[shard][off:off + n])
        assert b"".join(bytes(v) for v in views) == data_of(staging, 1)
        assert taken_now(srv) == S
        exporter = views[0].obj
        o.release()
        assert o.released
        for v in views:
            with pytest.raises(ValueError):
                v[0]                     # released with the outcome
        with pytest.raises(ValueError):
            o.views
        with pytest.raises(BufferError):
            memoryview(exporter)         # no new view after release
        assert wait_for(lambda: taken_now(srv) == 0, 5)
        assert o.given_back
        o.release()                      # idempotent
    run(go())
    close_all(cons, eng, srv)


def test_consumer_derived_view_delays_the_give_back():
    """A slice of a view keeps the data pinned after release(): the shards
    get it back only when the slice is gone, so its bytes never change
    under it."""
    srv, eng, cons = world()
    staging, sl = staged(4)
    pool = eng.register_pool(staging)

    async def go():
        await eng.submit(2, pool, sl(2))
        o = await next_outcome(cons)
        part = o.views[1][100:200]
        want = data_of(staging, 2)[SLICE + 100:SLICE + 200]
        o.release()
        await asyncio.sleep(0.1)
        assert not o.given_back and taken_now(srv) == S
        assert bytes(part) == want       # still the data that arrived
        del part
        assert o.given_back
        assert wait_for(lambda: taken_now(srv) == 0, 5)
    run(go())
    close_all(cons, eng, srv)


def test_consumer_available_dropped_is_released():
    srv, eng, cons = world()
    staging, sl = staged(4)
    pool = eng.register_pool(staging)

    async def go():
        await eng.submit(3, pool, sl(3))
        o = await next_outcome(cons)
        view = o.views[2]
        del o                            # no release(): the view holds it
        gc.collect()
        await asyncio.sleep(0.05)
        assert taken_now(srv) == S
        assert bytes(view) == data_of(staging, 3)[2 * SLICE:3 * SLICE]
        del view                         # the last reference: given back
        assert wait_for(lambda: taken_now(srv) == 0, 5)
        assert cons.stats()["py_held"] == 0
    run(go())
    close_all(cons, eng, srv)


def test_consumer_release_by_id():
    srv, eng, cons = world()
    staging, sl = staged(4)
    pool = eng.register_pool(staging)

    async def go():
        await eng.submit(4, pool, sl(4))
        o = await next_outcome(cons)
        cons.release(4)
        assert o.released
        with pytest.raises(xfer.NotFoundError):
            cons.release(4)
        assert wait_for(lambda: taken_now(srv) == 0, 5)
    run(go())
    close_all(cons, eng, srv)


# --------------------------------------------------------------------------
# The consumer's own cancel
# --------------------------------------------------------------------------

def test_consumer_cancel_before_the_data_fails_the_producer():
    srv, eng, cons = world()
    staging, sl = staged(8)
    pool = eng.register_pool(staging)

    async def go():
        cons.expect(5, timeout=30)
        cons.cancel(5)                   # the request was aborted here
        o = await next_outcome(cons)
        assert not o.ok and o.id == 5 and o.name == "CANCELLED"
        assert isinstance(o.error, xfer.CancelledError)
        cons.cancel(5)                   # idempotent
        with pytest.raises(xfer.Error) as ei:
            await eng.submit(5, pool, sl(5))
        # The shards refuse or cancel it: it rolls back, never available.
        assert not ei.value.result.ok
        # Unknown ids leave a tombstone: a later transfer of it fails too.
        cons.cancel(6)
        with pytest.raises(xfer.Error):
            await eng.submit(6, pool, sl(6))
        # After an available outcome, cancel is refused: release it.
        assert (await eng.submit(7, pool, sl(7))).ok
        o = await next_outcome(cons)
        assert o.ok and o.id == 7
        with pytest.raises(xfer.StateError):
            cons.cancel(7)
        o.release()
        with pytest.raises(asyncio.TimeoutError):
            await next_outcome(cons, 0.3)   # 5 and 6 got one outcome each
        st = cons.stats()
        assert st["user_cancels"] == 4 and st["available"] == 1
        assert st["unavailable_cancelled"] == 1
        assert wait_for(lambda: srv.stats()["bytes_in_use"] == 0, 10)
    run(go())
    close_all(cons, eng, srv)


def test_consumer_expect_times_out_once():
    srv, eng, cons = world()

    async def go():
        t0 = cons.now()
        cons.expect(11, timeout=0.2)
        cons.expect(12, deadline=t0 + 0.3)
        got = [await next_outcome(cons), await next_outcome(cons)]
        assert [(o.id, o.name, o.shards) for o in got] == \
            [(11, "TIMEOUT", (0, 1, 2, 3)), (12, "TIMEOUT", (0, 1, 2, 3))]
        with pytest.raises(xfer.CancelledError):
            cons.expect(11)              # it had its outcome: tombstoned
    run(go())
    with pytest.raises(ValueError):
        cons.expect(0)
    close_all(cons, eng, srv)


# --------------------------------------------------------------------------
# Waiting: blocking, cancelled waiters, the end of the iteration
# --------------------------------------------------------------------------

def test_consumer_cancelled_waiter_loses_no_outcome():
    srv, eng, cons = world()
    staging, sl = staged(4)
    pool = eng.register_pool(staging)

    async def go():
        with pytest.raises(asyncio.TimeoutError):
            await next_outcome(cons, 0.05)   # the waiter gives up
        await eng.submit(1, pool, sl(1))
        o = await next_outcome(cons)
        assert o.ok and o.id == 1
        o.release()
    run(go())
    close_all(cons, eng, srv)


def test_consumer_blocking_get_and_close_from_another_thread():
    srv, eng, cons = world()
    staging, sl = staged(4)
    pool = eng.register_pool(staging)
    with pytest.raises(TimeoutError):
        cons.get(timeout=0.05)
    eng.submit_wait(1, pool, sl(1))
    o = cons.get(timeout=10)
    assert o.ok and bytes(o.views[0]) == data_of(staging, 1)[:SLICE]
    o.release()
    errors = []

    def blocked():
        try:
            cons.get()
        except xfer.Error as e:
            errors.append(e)
    th = threading.Thread(target=blocked)
    th.start()
    wait_for(lambda: False, 0.1)
    cons.close()                      # wakes the blocked get
    th.join(10)
    assert not th.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], xfer.ShutdownError)
    close_all(eng, srv)


def test_consumer_iteration_ends_on_close():
    srv, eng, cons = world()

    async def go():
        async def iterate():
            return [o async for o in cons]
        task = asyncio.ensure_future(iterate())
        await asyncio.sleep(0.05)
        await cons.aclose()
        assert await asyncio.wait_for(task, 5) == []
        assert cons.closed
        with pytest.raises(xfer.ShutdownError):
            cons.expect(1)
    run(go())
    close_all(eng, srv)


# --------------------------------------------------------------------------
# A consumer dropped or closed while it holds taken data
# --------------------------------------------------------------------------

def test_consumer_dropped_with_taken_data_stays_open_while_held():
    """An Available keeps its consumer open: the views stay right and the
    release still reaches the shards after the last user reference to
    the consumer is gone."""
    srv, eng, cons = world()
    staging, sl = staged(4)
    pool = eng.register_pool(staging)
    eng.submit_wait(1, pool, sl(1))
    o = cons.get(timeout=10)
    alive = weakref.ref(cons)
    del cons
    gc.collect()
    assert alive() is not None and not alive().closed
    assert b"".join(bytes(v) for v in o.views) == data_of(staging, 1)
    o.release()
    assert wait_for(lambda: taken_now(srv) == 0, 5)
    del o
    gc.collect()
    assert alive() is None               # then it closed and went
    close_all(eng, srv)


def test_consumer_closed_with_taken_and_queued_data_gives_it_back():
    srv, eng, cons = world()
    staging, sl = staged(8)
    pool = eng.register_pool(staging)
    for tid in (1, 2, 3):
        eng.submit_wait(tid, pool, sl(tid))
    held = cons.get(timeout=10)          # 2 and 3 stay queued, unpopped
    view = held.views[0]
    assert wait_for(lambda: taken_now(srv) == 3 * S, 5)
    cons.close()
    with pytest.raises(ValueError):
        view[0]                          # its views were released
    assert held.released and held.given_back
    assert wait_for(lambda: taken_now(srv) == 0, 5)
    assert srv.stats()["grace_released"] == 0   # released, not timed out
    held.release()                       # harmless after the close
    close_all(eng, srv)


def test_consumer_deleted_with_queued_data_gives_it_back():
    srv, eng, cons = world()
    staging, sl = staged(8)
    pool = eng.register_pool(staging)
    for tid in (1, 2):
        eng.submit_wait(tid, pool, sl(tid))
    assert wait_for(lambda: taken_now(srv) == 2 * S, 5)
    alive = weakref.ref(cons)
    del cons
    gc.collect()
    assert alive() is None
    assert wait_for(lambda: taken_now(srv) == 0, 5)
    assert srv.stats()["grace_released"] == 0
    close_all(eng, srv)


# --------------------------------------------------------------------------
# xferd --shm: the pools mapped in place; a shard restarted under them
# --------------------------------------------------------------------------

def test_consumer_shm_pools_and_a_restarted_shard():
    name = "xfer-pytest-%d" % os.getpid()
    with xfer.xferd.Group(S, shm=name, pool="4M", lease_ttl="2s") as g:
        cons = xfer.Consumer(g.addrs, shm=name, reconnect_max=0.05)
        tcp = xfer.Tcp(g.addrs)
        eng = xfer.Engine(tcp, default_timeout=2, cancel_op_timeout=0.2)
        assert tcp.wait_connected(10) and cons.wait_connected(10)
        staging, sl = staged(8, seed=3)
        pool = eng.register_pool(staging)

        async def go():
            assert (await eng.submit(1, pool, sl(1))).ok
            before = await next_outcome(cons)
            assert b"".join(bytes(v) for v in before.views) == \
                data_of(staging, 1)
            g.restart(2)                 # a new /name.2 under the old one
            assert wait_for(lambda: tcp.connected() and cons.connected(), 10)
            # The outcome taken before still reads its own mapping.
            assert bytes(before.views[2]) == \
                data_of(staging, 1)[2 * SLICE:3 * SLICE]
            before.release()
            for slot in range(2, 6):     # new data lands in the new object
                tid = await push(slot)
                while True:              # earlier attempts' outcomes first
                    o = await next_outcome(cons)
                    if o.ok:
                        assert b"".join(bytes(v) for v in o.views) == \
                            data_of(staging, o.id % 100), o
                        o.release()
                        if o.id == tid:
                            break
            return True

        async def push(slot):
            """slot's data under id slot, else slot + 100, ... until a
            transfer of it succeeds (the link may just be coming back)."""
            for tid in range(slot, 2000, 100):
                try:
                    if (await eng.submit(tid, pool, sl(slot))).ok:
                        return tid
                except xfer.Error:
                    await asyncio.sleep(0.05)
            raise AssertionError("slot %d never went through" % slot)
        assert run(go(), timeout=60)
        cons.close()
        eng.shutdown()
    with pytest.raises(ValueError):
        xfer.Consumer(["127.0.0.1:1"] * S, shm="bad/name")


# --------------------------------------------------------------------------
# Bad arguments
# --------------------------------------------------------------------------

def test_consumer_bad_arguments():
    with pytest.raises(ValueError):
        xfer.Consumer([])
    with pytest.raises(xfer.InvalidArgError):
        xfer.Consumer(["not an address"])
    with pytest.raises(ValueError):
        xfer.Consumer(["127.0.0.1:1"] * 2, buffers=[bytearray(8)])
    with pytest.raises(ValueError):
        xfer.Consumer(["127.0.0.1:1"], shm="x", buffers=[bytearray(8)])


def test_consumer_cancel_before_connected_reaches_every_shard():
    """Issue 23 items 2 and 4: a cancel made before the consumer's links
    are up is delivered when they are, cancel_shards() says which shards
    acknowledged it, and the producer's transfer of the id fails."""
    srv = xfer.Server([bytearray(1 << 20) for _ in range(S)])
    eng = xfer.Engine(xfer.Tcp(srv.addrs), default_timeout=2)
    assert eng.transports[0].wait_connected(10)
    cons = xfer.Consumer(srv.addrs, buffers=srv)
    cons.cancel(5)                       # no link is up yet
    with pytest.raises(xfer.NotFoundError):
        cons.cancel_shards(6)
    assert wait_for(lambda: cons.cancel_shards(5)[0] == list(range(S)))
    assert cons.cancel_shards(5)[1] == []
    staging, sl = staged(8)
    pool = eng.register_pool(staging)

    async def go():
        with pytest.raises(xfer.Error) as ei:
            await eng.submit(5, pool, sl(5))
        assert not ei.value.result.ok
    run(go())
    close_all(cons, eng, srv)


def test_consumer_release_then_close_leaves_shards_empty():
    """Issue 23 item 3: releases made just before close reach the shards;
    close() returns the shards that did not answer ([] here)."""
    srv, eng, cons = world()
    staging, sl = staged(8)
    pool = eng.register_pool(staging)

    async def go():
        for tid in range(1, 5):
            assert (await eng.submit(tid, pool, sl(tid))).ok
        for _ in range(4):
            o = await next_outcome(cons)
            assert o.ok
            o.release()
    run(go())
    assert cons.close(timeout=5) == []
    assert cons.closed
    assert srv.stats()["bytes_in_use"] == 0
    assert taken_now(srv) == 0
    close_all(eng, srv)
