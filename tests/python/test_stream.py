"""tests/python/test_stream.py - Engine.stream() (issue 26 item 7): an
`async with` whose body writes parts and whose exit seals and awaits the
outcome; an exception inside cancels the stream and propagates once it
ended.  Bytes are checked where a consumer reads them: xfer.Server
buffers, over TCP, through an xfer.Consumer."""
import asyncio
import gc
import os

import pytest

import xfer
from conftest import loop_engine, run

S = 4
LAYERS = 4
BLOCKS = 4
BLK = 256
LAYER = BLOCKS * BLK


def layer_ranges(l, base=0):
    """Layer l's blocks, lying in reverse order in staging, gathered into
    the layer's place of each shard's reservation."""
    r = []
    for k in range(S):
        for b in range(BLOCKS):
            off = base + ((l * S + k) * BLOCKS + (BLOCKS - 1 - b)) * BLK
            r.append((k, off, BLK, l * LAYER + b * BLK))
    return r


def test_stream_layers_land_and_consumer_reads_every_byte():
    bufs = [bytearray(1 << 20) for _ in range(S)]
    srv = xfer.Server(bufs)
    eng = xfer.Engine(xfer.Tcp(srv.addrs), default_timeout=5)
    cons = xfer.Consumer(srv.addrs, buffers=srv)
    assert eng.transports[0].wait_connected(10) and cons.wait_connected(10)
    staging = bytearray(os.urandom(LAYERS * S * LAYER))
    pool = eng.register_pool(staging)

    def want(k):
        out = bytearray()
        for l in range(LAYERS):
            for b in range(BLOCKS):
                off = ((l * S + k) * BLOCKS + (BLOCKS - 1 - b)) * BLK
                out += staging[off:off + BLK]
        return bytes(out)

    async def go():
        async with eng.stream(9, [LAYERS * LAYER] * S) as st:
            for l in range(LAYERS):
                st.write(pool, layer_ranges(l))
                await asyncio.sleep(0.001)  # the next layer is computed
        assert st.transfer.done() and st.transfer.result().ok
        return await asyncio.wait_for(cons.__anext__(), 10)
    o = run(go())
    assert o.ok and o.id == 9
    for k, view in enumerate(o.views):
        assert bytes(view) == want(k)
    o.release()
    cons.close()
    eng.shutdown()
    srv.close()


def test_stream_exception_cancels_and_propagates():
    e, tp = loop_engine()
    pool = e.register_pool(bytearray(LAYERS * S * LAYER))

    class Boom(Exception):
        pass

    async def go():
        st = e.stream(10, [LAYERS * LAYER] * S, timeout=5)
        with pytest.raises(Boom):
            async with st:
                st.write(pool, layer_ranges(0))
                raise Boom()
        # the stream ended (cancelled), every staging byte is back
        assert st.transfer.done()
        with pytest.raises(xfer.CancelledError):
            st.transfer.result()
        assert e.stats()["staging_bytes_in_use"] == 0
        # a part after the end is refused at once
        with pytest.raises(xfer.Error):
            st.write(pool, layer_ranges(1))
    run(go())
    e.shutdown()


def test_stream_incomplete_fails_at_seal():
    """A stream sealed with a byte missing fails (the shard refuses the
    commit INCOMPLETE): the consumer never sees half a transfer."""
    e, tp = loop_engine()
    pool = e.register_pool(bytearray(LAYERS * S * LAYER))

    async def go():
        with pytest.raises(xfer.Error) as ex:
            async with e.stream(11, [LAYERS * LAYER] * S, timeout=5) as st:
                st.write(pool, layer_ranges(0))  # layers 1..3 never come
        assert ex.value.result.phase == xfer.PHASE_COMPLETING
    run(go())
    e.shutdown()


def test_stream_part_futures_release_in_order_before_outcome():
    """Issue 26 item 3: Stream.write returns a future per part that
    resolves to the part number once the part's staging is released, in
    part order and before the stream's outcome; a buffer overwritten right
    after its part's future resolved leaves the landed bytes as written."""
    bufs = [bytearray(1 << 20) for _ in range(S)]
    srv = xfer.Server(bufs)
    eng = xfer.Engine(xfer.Tcp(srv.addrs), default_timeout=5)
    cons = xfer.Consumer(srv.addrs, buffers=srv)
    assert eng.transports[0].wait_connected(10) and cons.wait_connected(10)
    staging = bytearray(os.urandom(LAYERS * S * LAYER))
    sent = bytes(staging)
    pool = eng.register_pool(staging)
    events = []

    def want(k):
        out = bytearray()
        for l in range(LAYERS):
            for b in range(BLOCKS):
                off = ((l * S + k) * BLOCKS + (BLOCKS - 1 - b)) * BLK
                out += sent[off:off + BLK]
        return bytes(out)

    async def go():
        async with eng.stream(12, [LAYERS * LAYER] * S) as st:
            st.transfer.add_done_callback(lambda f: events.append("end"))
            parts = []
            for l in range(LAYERS):
                f = st.write(pool, layer_ranges(l))
                f.add_done_callback(lambda f: events.append(f.result()))
                parts.append(f)
            for l, f in enumerate(parts):
                assert await asyncio.wait_for(f, 10) == l + 1
                # the layer's staging is ours again: reuse it at once
                lo = l * S * LAYER
                staging[lo:lo + S * LAYER] = bytes(S * LAYER)
        return await asyncio.wait_for(cons.__anext__(), 10)
    o = run(go(), 30)
    assert o.ok and o.id == 12
    assert events == [1, 2, 3, 4, "end"]
    for k, view in enumerate(o.views):
        assert bytes(view) == want(k)
    o.release()
    cons.close()
    eng.shutdown()
    srv.close()


def test_stream_part_future_raises_when_stream_cancelled():
    """A part still in flight when the body raises is released with the
    stream's status: its future raises CancelledError (never hangs), and
    a failed part's future nobody awaits logs no "never retrieved"."""
    e, tp = loop_engine(write_time=0.25)
    pool = e.register_pool(bytearray(LAYERS * S * LAYER))
    logged = []

    class Boom(Exception):
        pass

    async def go():
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, ctx: logged.append(ctx))
        st = e.stream(13, [LAYERS * LAYER] * S, timeout=5)
        with pytest.raises(Boom):
            async with st:
                f = st.write(pool, layer_ranges(0))
                ignored = st.write(pool, layer_ranges(1))
                assert not f.done()
                raise Boom()
        assert ignored.done() and f.done()
        with pytest.raises(xfer.CancelledError) as ex:
            await asyncio.wait_for(f, 10)
        assert ex.value.result.id == 13
        del ignored
        gc.collect()
        await asyncio.sleep(0)
    run(go(), 30)
    assert logged == []
    e.shutdown()
