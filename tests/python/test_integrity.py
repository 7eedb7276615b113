"""tests/python/test_integrity.py - caller-supplied CRCs (issue 27,
docs/integrity.md): submit(..., crcs=) and Stream.crcs against real xferd
processes over TCP.  The right CRCs commit checked and the producer
computes none (every CRC it sent was the caller's); a wrong one fails the
transfer CorruptError naming its shard."""
import os

import pytest

import xfer
import xfer.xferd
from conftest import run

S = 3
SLICE = 4096


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = _table()


def crc32c(data):
    """CRC32C (Castagnoli), the standard value ("123456789" -> E3069283)."""
    c = 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ _T[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def test_crc32c_reference():
    assert crc32c(b"123456789") == 0xE3069283


@pytest.fixture
def shards():
    with xfer.xferd.Group(S, lease_ttl="2s") as g:
        yield g


def make_engine(g):
    tcp = xfer.Tcp(g.addrs)
    e = xfer.Engine(tcp, default_timeout=5)
    assert tcp.wait_connected(10), "shards never connected"
    staging = bytearray(os.urandom(4 * S * SLICE))
    return e, tcp, staging, e.register_pool(staging)


def slice_crcs(staging, off):
    return [crc32c(staging[off + k * SLICE:off + (k + 1) * SLICE])
            for k in range(S)]


def test_submit_crcs_checked_and_wrong_one_corrupt(shards):
    e, tcp, staging, pool = make_engine(shards)
    # a wrong CRC for shard 1: CorruptError naming it, nothing kept
    bad = slice_crcs(staging, 0)
    bad[1] ^= 0x40
    with pytest.raises(xfer.CorruptError) as ei:
        e.submit_wait(1, pool, xfer.split(0, S * SLICE, S), crcs=bad)
    assert ei.value.result.first_failed_shard == 1
    # the right ones, awaited and blocking: both commit
    good = slice_crcs(staging, S * SLICE)

    async def go():
        return await e.submit(2, pool, xfer.split(S * SLICE, S * SLICE, S),
                              crcs=good)
    assert run(go()).ok
    good = slice_crcs(staging, 2 * S * SLICE)
    assert e.submit_wait(3, pool, xfer.split(2 * S * SLICE, S * SLICE, S),
                         crcs=good).ok
    st = tcp.stats()
    assert st["crcs_given"] == 3 * S
    assert st["crcs_sent"] == st["crcs_given"]  # none read from staging
    with pytest.raises(ValueError):
        e.submit_wait(4, pool, xfer.split(0, S * SLICE, S), crcs=good[:2])
    e.shutdown()


def test_stream_crcs_at_seal(shards):
    e, tcp, staging, pool = make_engine(shards)

    async def one(id, crcs):
        async with e.stream(id, [SLICE] * S) as st:
            st.write(pool, [(k, k * SLICE, SLICE, 0) for k in range(S)])
            st.crcs = crcs
        return st.transfer.result()
    bad = slice_crcs(staging, 0)
    bad[2] ^= 1
    with pytest.raises(xfer.CorruptError) as ei:
        run(one(5, bad))
    assert ei.value.result.first_failed_shard == 2
    assert run(one(6, slice_crcs(staging, 0))).ok
    assert tcp.stats()["crcs_given"] == 2 * S
    e.shutdown()
