"""tests/python/test_addrs.py - shard addresses are checked when a Tcp or
a Consumer is built (issue 23, item 10): a bad entry raises ValueError
naming the entry and why, instead of a bare "invalid argument" later.
Host names are refused (not resolved) until the library resolves them."""
import pytest

import xfer

BAD = [
    # (addrs, what the message must name)
    (["127.0.0.1"], "no port"),
    (["localhost:1"], "host names"),
    (["127.0.0.1:7470", "example.com:7471"], "host names"),
    (["127.0.0.1:0"], "not 1..65535"),
    (["127.0.0.1:65536"], "not 1..65535"),
    (["127.0.0.1:x"], "not 1..65535"),
    (["::1:7470"], "no port"),          # IPv6 needs its brackets
    (["[127.0.0.1]:7470"], "numeric"),  # brackets are for IPv6 only
    (["256.0.0.1:7470"], "numeric"),
    ([], "no shard address"),
    ("127.0.0.1:1,", None),             # a trailing comma is fine
]


@pytest.mark.parametrize("cls", [xfer.Tcp, xfer.Consumer],
                         ids=["Tcp", "Consumer"])
@pytest.mark.parametrize("addrs,why", BAD, ids=[repr(b[0]) for b in BAD])
def test_addrs_refused_at_construction(cls, addrs, why):
    if why is None:
        obj = cls(addrs, connect_timeout=0.2)
        if hasattr(obj, "close"):
            obj.close()
        return
    with pytest.raises(ValueError) as e:
        cls(addrs)
    msg = str(e.value)
    assert why in msg, msg
    bad = [a for a in addrs if a not in ("127.0.0.1:7470",)]
    if bad:  # the message names the entry
        assert repr(bad[0]) in msg, msg


def test_addrs_too_many_shards():
    addrs = ["127.0.0.1:%d" % (7000 + k) for k in range(xfer.MAX_SHARDS + 1)]
    with pytest.raises(ValueError, match="at most %d" % xfer.MAX_SHARDS):
        xfer.Tcp(addrs)


def test_addrs_not_strings():
    with pytest.raises(TypeError, match=r"addrs\[0\]"):
        xfer.Tcp([7470])


@pytest.mark.parametrize("addrs", [["127.0.0.1:1"], ["[::1]:1"],
                                   "127.0.0.1:1, 127.0.0.1:2"])
def test_addrs_numeric_accepted(addrs):
    assert xfer.Tcp(addrs, connect_timeout=0.2) is not None
