"""tests/python/test_auth.py - secret= and session= of xfer.Tcp,
xfer.Server and xfer.Consumer (docs/operating.md).

What must hold: with a shared secret, a producer and a consumer that know
it are served and the data arrives; a peer with another secret, or none,
is never served (HELLO2 is mutual: the peer refuses the shard's proof and
sends no op; the producer's transfer raises, no byte of it lands);
keywords of the wrong size are a ValueError before anything is made."""
import asyncio
import os

import pytest

import xfer
import xfer.xferd
from conftest import run, wait_for

SECRET = b"s3cret-of-the-shard-group-0123"


def test_auth_shared_secret_serves_producer_and_consumer():
    mem = bytearray(1 << 16)
    srv = xfer.Server([mem, bytearray(1 << 16)], secret=SECRET)
    eng = xfer.Engine(xfer.Tcp(srv.addrs, secret=SECRET,
                               session=os.urandom(16)), default_timeout=5)
    cons = xfer.Consumer(srv.addrs, buffers=srv, secret=SECRET)
    assert eng.transports[0].wait_connected(10) and cons.wait_connected(10)
    data = os.urandom(8192)
    pool = eng.register_pool(bytearray(data))

    async def go():
        assert (await eng.submit(7, pool, xfer.split(0, len(data), 2))).ok
        return await asyncio.wait_for(cons.__anext__(), 10)
    o = run(go())
    assert o.ok and o.id == 7
    assert b"".join(bytes(v) for v in o.views) == data
    o.release()
    assert srv.stats()["auth_failed"] == 0
    cons.close()
    eng.shutdown()
    srv.close()


@pytest.mark.parametrize("theirs", [None, b"another-secret-entirely!"])
def test_auth_wrong_secret_is_never_served(theirs):
    mem = bytearray(1 << 16)
    srv = xfer.Server([mem], secret=SECRET)
    tcp = xfer.Tcp(srv.addrs, secret=theirs, connect_timeout=0.5)
    eng = xfer.Engine(tcp, default_timeout=1)
    cons = xfer.Consumer(srv.addrs, buffers=srv, secret=theirs)
    assert not tcp.wait_connected(0.5) and not cons.wait_connected(0.1)
    pool = eng.register_pool(bytearray(b"\xab" * 4096))

    async def go():
        return await eng.submit(9, pool, xfer.split(0, 4096, 1))
    with pytest.raises(xfer.Error) as e:  # never reserved: no link is up
        run(go())
    print("producer saw:", e.value)
    assert not any(mem)                          # nothing landed
    assert not tcp.connected() and not cons.connected()
    # HELLO2's authentication is mutual: the shard proves it knows the
    # secret first, and a producer with no secret or another one refuses
    # that proof, so it never sends a proof of its own, or any op
    assert wait_for(lambda: tcp.stats()["hello_refused"] > 0, 5)
    assert srv.stats()["reserves"] == 0 and cons.stats()["links_up"] == 0
    print("refused:", srv.stats()["auth_failed"], tcp.stats()["hello_refused"])
    cons.close()
    eng.shutdown()
    srv.close()


def test_auth_secret_against_xferd(tmp_path):
    """The same secret in xferd's --secret-file and in xfer.Tcp."""
    f = tmp_path / "secret"
    f.write_bytes(SECRET)
    f.chmod(0o600)  # xferd refuses a secret others may read, as ssh does
    with xfer.xferd.Group(2, args=["--secret-file", str(f)]) as g:
        good = xfer.Tcp(g.addrs, secret=SECRET)
        eng = xfer.Engine(good, default_timeout=5)
        assert good.wait_connected(10)
        bad = xfer.Tcp(g.addrs, secret=b"x" * 16)
        eng2 = xfer.Engine(bad, default_timeout=1)
        pool = eng.register_pool(bytearray(os.urandom(8192)))

        async def go():
            return await eng.submit(3, pool, xfer.split(0, 8192, 2))
        assert run(go()).ok
        assert not bad.wait_connected(0.5)
        assert wait_for(lambda: bad.stats()["hello_refused"] > 0, 5)
        eng2.shutdown()
        eng.shutdown()


def test_auth_keywords_of_the_wrong_size_are_refused():
    with pytest.raises(ValueError, match="secret"):
        xfer.Tcp(["127.0.0.1:1"], secret=b"short")
    with pytest.raises(ValueError, match="session"):
        xfer.Tcp(["127.0.0.1:1"], session=b"x" * 15)
    with pytest.raises(ValueError, match="secret"):
        xfer.Server([bytearray(64)], secret=b"x" * 257)
    with pytest.raises(ValueError, match="session"):
        xfer.Consumer(["127.0.0.1:1"], session=b"x" * 17)
    with pytest.raises(TypeError):
        xfer.Tcp(["127.0.0.1:1"], secret="a str is not bytes")
