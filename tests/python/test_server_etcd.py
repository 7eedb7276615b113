"""tests/python/test_server_etcd.py - xfer.Server registering its shards
in etcd (etcd=, etcd_group=, etcd_ttl=: xfer_server_register), against a
real etcd started here on loopback (Debian's etcd-server; skipped without
it, required in CI).

What must hold: the entries appear under /xfer/groups/<group>/<shard>
with the server's port; drain() removes them before it returns; close()
without drain() leaves them until their lease expires; a group number
that is not the name's is refused."""
import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import urllib.request

import pytest

import xfer
from conftest import wait_for

ETCD = shutil.which("etcd")
if not ETCD and os.environ.get("CI"):
    raise RuntimeError("etcd (etcd-server) is required in CI")
pytestmark = pytest.mark.skipif(not ETCD, reason="no etcd binary")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def etcd():
    """One etcd member on free loopback ports; its client URL."""
    d = tempfile.mkdtemp(prefix="xfer-py-etcd-")
    cp, pp = free_port(), free_port()
    cl, pl = "http://127.0.0.1:%d" % cp, "http://127.0.0.1:%d" % pp
    p = subprocess.Popen(
        [ETCD, "--name", "s", "--data-dir", d + "/data",
         "--listen-client-urls", cl, "--advertise-client-urls", cl,
         "--listen-peer-urls", pl, "--initial-advertise-peer-urls", pl,
         "--initial-cluster", "s=" + pl],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def healthy():
        try:
            with urllib.request.urlopen(cl + "/health", timeout=1) as r:
                return b"true" in r.read()
        except OSError:
            return False
    try:
        assert wait_for(healthy, 30.0)
        yield cl
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


def entry(url, key):
    """The JSON value at key in etcd, or None."""
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()})
    req = urllib.request.Request(url + "/v3/kv/range", data=body.encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        kvs = json.load(r).get("kvs")
    return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None


def test_server_etcd_registers_and_drain_leaves(etcd):
    srv = xfer.Server([bytearray(4096), bytearray(4096)], etcd=etcd,
                      etcd_group="pyg", etcd_ttl=2)
    try:
        assert wait_for(lambda: entry(etcd, "/xfer/groups/pyg/1") is not None)
        for k in range(2):
            e = entry(etcd, "/xfer/groups/pyg/%d" % k)
            assert e["shard"] == k and e["port"] == srv.port
            assert e["addr"] == "127.0.0.1" and e["transports"] == 1
        assert srv.drain() is True
        assert entry(etcd, "/xfer/groups/pyg/0") is None
        assert entry(etcd, "/xfer/groups/pyg/1") is None
    finally:
        srv.close()


def test_server_etcd_close_leaves_entry_to_lease(etcd):
    srv = xfer.Server([bytearray(4096)], etcd=etcd, etcd_group="pyc",
                      etcd_ttl=2, advertise="localhost")
    assert wait_for(lambda: entry(etcd, "/xfer/groups/pyc/0") is not None)
    assert entry(etcd, "/xfer/groups/pyc/0")["addr"] == "localhost"
    srv.close()
    assert entry(etcd, "/xfer/groups/pyc/0") is not None  # no goodbye
    assert wait_for(lambda: entry(etcd, "/xfer/groups/pyc/0") is None, 15.0)


def test_server_etcd_group_number_must_match(etcd):
    with pytest.raises(xfer.Error):
        xfer.Server([bytearray(4096)], etcd=etcd, etcd_group="pyx", group=7)
