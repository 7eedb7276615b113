"""tests/python/test_stream.py - Engine.stream() (issue 26 item 7): an
`async with` whose body writes parts and whose exit seals and awaits the
outcome; an exception inside cancels the stream and propagates once it
ended.  Bytes are checked where a consumer reads them: xfer.Server
buffers, over TCP, through an xfer.Consumer."""
import asyncio
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
