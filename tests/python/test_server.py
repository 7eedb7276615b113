"""tests/python/test_server.py - xfer.Server: a TP worker's own memory of
several buffer kinds served over TCP (the producer's bytes land in them,
read in place by a Consumer of the same process); the buffers held while
the server lives and let go after; a server deleted while writes stream
into it; drain.

What must hold (I3 for the worker's memory): a buffer is let go only once
the server was deleted and every connection is gone, so nothing from the
network can land in it afterwards: an mmap closed (unmapped) right after
the server went must never be written again."""
import array
import asyncio
import ctypes
import gc
import mmap
import os
import threading
import weakref

import pytest

import xfer
from conftest import run, wait_for

N = 64 * 1024


def kinds():
    ks = {"bytearray": bytearray(N), "mmap": mmap.mmap(-1, N),
          "array I": array.array("I", bytes(N)),
          "ctypes": (ctypes.c_ubyte * N)(),
          "memoryview slice": memoryview(bytearray(N + 100))[50:50 + N]}
    try:
        # numpy never frees its module state, which LeakSanitizer reports
        # at exit: not under ASan (now that tools/run installs numpy)
        if os.environ.get("XFER_SANITIZED"):
            raise ImportError
        import numpy
        ks["numpy"] = numpy.zeros(N // 8, dtype=numpy.float64)
    except ImportError:
        pass  # python3-numpy is not required
    return ks


def test_server_buffer_kinds_receive_in_place():
    ks = kinds()
    names = sorted(ks)
    nsh = len(names)
    srv = xfer.Server([ks[k] for k in names])
    eng = xfer.Engine(xfer.Tcp(srv.addrs), default_timeout=5)
    cons = xfer.Consumer(srv.addrs, buffers=srv)
    assert eng.transports[0].wait_connected(10) and cons.wait_connected(10)
    data = os.urandom(nsh * 4096)
    pool = eng.register_pool(bytearray(data))

    async def go():
        assert (await eng.submit(1, pool, xfer.split(0, len(data), nsh))).ok
        return await asyncio.wait_for(cons.__anext__(), 10)
    o = run(go())
    assert o.ok
    for k, ((shard, off, n), view) in enumerate(zip(o.regions, o.views)):
        assert shard == k and n == 4096
        want = data[k * 4096:(k + 1) * 4096]
        landed = bytes(memoryview(ks[names[k]]).cast("B")[off:off + n])
        assert landed == want, names[k]   # in the worker's own buffer
        assert bytes(view) == want        # and the consumer reads it there
    o.release()
    print("buffer kinds:", names)
    cons.close()
    eng.shutdown()
    srv.close()


def test_server_refuses_buffers_it_cannot_write():
    with pytest.raises(BufferError):
        xfer.Server([bytes(64)])                      # read-only
    with pytest.raises(BufferError):
        xfer.Server([memoryview(bytearray(64))[::2]])  # not contiguous
    with pytest.raises(ValueError):
        xfer.Server([bytearray(0)])
    with pytest.raises(ValueError):
        xfer.Server([])
    with pytest.raises(ValueError):
        xfer.Server([bytearray(8)], shards=[64])
    with pytest.raises(ValueError):
        xfer.Server([bytearray(8), bytearray(8)], shards=[1])


def test_server_holds_buffers_until_closed():
    m, ba = mmap.mmap(-1, 8192), bytearray(8192)
    srv = xfer.Server([m, ba], shards=[3, 5])
    assert srv.shards == (3, 5) and srv.port > 0
    with pytest.raises(BufferError):
        m.close()                  # an export is held
    with pytest.raises(BufferError):
        ba += b"x"                 # cannot resize
    assert srv.stats(5)["pool_bytes"] == 8192
    assert srv.stats()["pool_bytes"] == 2 * 8192
    with pytest.raises(xfer.NotFoundError):
        srv.stats(4)
    srv.close()
    assert srv.closed
    m.close()
    ba += b"x"
    with pytest.raises(xfer.ShutdownError):
        srv.stats()
    srv.close()                    # idempotent


def test_server_deleted_while_writes_stream_in():
    """The last reference to the server goes while 8 MiB transfers stream
    into its mmaps; the mmaps are unmapped the moment it is gone.  A write
    after that would fault: it never comes.  Every transfer still gets
    exactly one outcome."""
    size = 16 << 20
    maps = [mmap.mmap(-1, size) for _ in range(4)]
    holder = {"srv": xfer.Server(maps)}
    addrs = holder["srv"].addrs
    eng = xfer.Engine(xfer.Tcp(addrs), default_timeout=5,
                      cancel_op_timeout=0.2)
    assert eng.transports[0].wait_connected(10)
    pool = eng.register_pool(bytearray(os.urandom(1 << 20)) * 8)
    alive = weakref.ref(holder["srv"])
    outcomes = []

    async def go():
        ts = [eng.submit(i, pool, xfer.split(0, 8 << 20, 4))
              for i in range(1, 9)]
        await asyncio.sleep(0.002)
        # Deleted from another thread, as a worker's teardown would.
        th = threading.Thread(target=holder.clear)
        th.start()
        while th.is_alive():
            await asyncio.sleep(0.001)
        gc.collect()
        assert alive() is None
        for m in maps:
            m.close()              # unmapped: no export is left
        for t in ts:
            try:
                outcomes.append(await t)
            except xfer.Error as e:
                outcomes.append(e.result)
    run(go(), timeout=60)
    assert sorted(r.id for r in outcomes) == list(range(1, 9))
    print("outcomes:", [r.error_name for r in outcomes])
    eng.shutdown()


def test_server_drain():
    srv = xfer.Server([bytearray(1 << 20)] * 1, drain_timeout=2)
    eng = xfer.Engine(xfer.Tcp(srv.addrs), default_timeout=2)
    assert eng.transports[0].wait_connected(10)
    pool = eng.register_pool(bytearray(4096))
    assert eng.submit_wait(1, pool, [(0, 4096)]).ok
    assert srv.drained

    async def go():
        assert await srv.adrain() is True
        with pytest.raises(xfer.StateError):
            srv.drain()            # draining already
        with pytest.raises(xfer.Error) as ei:
            await eng.submit(2, pool, [(0, 4096)])   # no new reserves
        assert ei.value.result.phase == xfer.PHASE_RESERVING
    run(go())
    eng.shutdown()
    srv.close()
    with pytest.raises(xfer.ShutdownError):
        srv.drain()


def test_server_blocking_drain_and_aclose():
    srv = xfer.Server([bytearray(4096)])
    assert srv.drain() is True

    async def go():
        await srv.aclose()
        assert srv.closed
        await srv.aclose()         # idempotent
    run(go())
