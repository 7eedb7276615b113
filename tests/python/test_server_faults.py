"""tests/python/test_server_faults.py - fault rules over real sockets from
Python (issue 23 item 6): xfer.Server takes the Loop's rules (xfer.Fault,
or xferd --fault's text form), and a producer over TCP sees a real shard
failure; Engine.view(id) shows a live transfer per shard (reserve, write,
commit, cancel sub-states and cancels sent); Loop.stats(shard) and
Server.stats(shard) count per shard.

Nothing here asserts a time: a delay is observed as an order (the other
shards' commits acknowledged, shard 1's held, the transfer waiting)."""
import pytest

import xfer
from conftest import loop_engine, run, wait_for

N = 64 * 1024


def tcp_pair(faults):
    srv = xfer.Server([bytearray(1 << 20) for _ in range(4)], faults=faults)
    eng = xfer.Engine(xfer.Tcp(srv.addrs), default_timeout=30)
    assert eng.transports[0].wait_connected(10)
    return srv, eng


def empty(srv):
    return all(srv.stats(k)["live"] == 0 and srv.stats(k)["bytes_in_use"] == 0
               for k in range(4))


def test_server_faults_write_fail_names_shard_2():
    srv, eng = tcp_pair(["op=write,shard=2,action=fail"])
    pool = eng.register_pool(bytearray(b"\x5a" * 4 * N))

    async def go(i):
        return await eng.submit(i, pool, xfer.split(0, 4 * N, 4))
    with pytest.raises(xfer.RemoteError) as e:
        run(go(7))
    r = e.value.result
    assert r.phase == xfer.PHASE_WRITING and r.phase_name == "writing"
    assert r.shards == (2,) and r.first_failed_shard == 2
    assert not r.consumer_may_hold
    assert wait_for(lambda: empty(srv))
    fired = [srv.stats(k)["rules_fired"] for k in range(4)]
    assert fired == [0, 0, 1, 0]
    assert [srv.stats(k)["commits"] for k in range(4)] == [0, 0, 0, 0]
    # cleared: the next transfer lands
    srv.clear_faults()
    assert run(go(8)).ok
    eng.shutdown()
    srv.close()


def test_server_faults_commit_delay_holds_shard_1():
    srv, eng = tcp_pair([xfer.Fault("delay", op="commit", shard=1,
                                    delay=2.0)])
    pool = eng.register_pool(bytearray(4 * N))
    seen = {}

    async def go():
        t = eng.submit(11, pool, xfer.split(0, 4 * N, 4))

        def held():
            v = eng.view(11)
            if v is None or v["state"] != "COMPLETING":
                return False
            seen["view"] = v
            seen["s1"] = srv.stats(1)
            return [s["commit"] for s in v["shards"]] == \
                ["ACKED", "PENDING", "ACKED", "ACKED"]
        ok = wait_for(held, 10)
        return ok, await t
    ok, res = run(go())
    assert ok and res.ok
    v, s1 = seen["view"], seen["s1"]
    assert v["pending"] == 1 and v["id"] == 11
    assert all(s["reserve"] == "OK" and s["write"] == "DONE"
               for s in v["shards"])
    # while the producer waited, shard 1 held its commit, unapplied
    assert s1["commits"] == 0 and s1["delayed_now"] == 1
    s1 = srv.stats(1)
    assert s1["commits"] == 1 and s1["ops_delayed"] == 1
    assert s1["delayed_now"] == 0 and s1["rules_fired"] == 1
    assert srv.stats(0)["ops_delayed"] == 0
    assert eng.view(11) is None   # ended
    eng.shutdown()
    srv.close()


def test_server_faults_rules_are_validated():
    srv = xfer.Server([bytearray(4096)])
    with pytest.raises(ValueError):
        srv.add_fault("op=write,shard=2,action=explode")
    with pytest.raises(ValueError):
        srv.add_fault("nonsense")
    with pytest.raises(ValueError):
        srv.add_fault("fail", shard=64)
    for _ in range(64):
        srv.add_fault("fail", op="cancel", id=99)
    with pytest.raises(xfer.BusyError):
        srv.add_fault("fail")
    srv.clear_faults()
    srv.add_fault("fail")
    srv.close()
    with pytest.raises(xfer.Error):
        srv.add_fault("fail")


def test_fault_parse_is_xferds_form():
    f = xfer.Fault.parse("op=commit,shard=1,action=delay,ms=200")
    assert f == xfer.Fault("delay", op="commit", shard=1, delay=0.2)
    f = xfer.Fault.parse("action=applied_lost,id=7,count=2,ppm=250000,"
                         "error=NO_SPACE")
    assert (f.kind, f.op, f.shard, f.id, f.count, f.prob) == \
        ("applied_lost", None, None, 7, 2, 0.25)
    assert f.error == xfer.NoSpaceError.code
    for bad in ["", "action=fail,ms=3", "action=delay", "op=write",
                "action=fail,shard=x"]:
        with pytest.raises(ValueError):
            xfer.Fault.parse(bad)


def test_engine_view_shows_cancel_per_shard():
    # shard 0's write fails; shard 2's cancel is held, so the rollback is
    # seen half done: CANCELLING, shard 2's cancel pending, the others ok
    eng, tp = loop_engine(faults=[
        xfer.Fault("fail", op="write", shard=0),
        xfer.Fault("delay", op="cancel", shard=2, delay=2.0)],
        cancel_op_timeout=30, lease_ttl=10)
    pool = eng.register_pool(bytearray(4 * N))
    assert eng.view(5) is None    # never submitted
    seen = {}

    async def go():
        t = eng.submit(5, pool, xfer.split(0, 4 * N, 4))

        def half():
            v = eng.view(5)
            if v is None or v["state"] != "CANCELLING":
                return False
            seen["v"] = v
            return [s["cancel"] for s in v["shards"]] == \
                ["OK", "OK", "PENDING", "OK"]
        ok = wait_for(half, 10)
        try:
            await t
        except xfer.RemoteError as e:
            return ok, e.result
    ok, r = run(go())
    assert ok
    v = seen["v"]
    sh = v["shards"]
    assert sh[0]["write"] == "FAILED"
    assert [s["write"] for s in sh[1:]] == ["DONE"] * 3
    assert all(s["reserve"] == "OK" and s["commit"] == "NONE" for s in sh)
    assert [s["cancel_attempts"] for s in sh] == [1, 1, 1, 1]
    assert v["pending"] == 1 and v["attempt"] >= 1
    assert r.phase == xfer.PHASE_WRITING and r.shards == (0,)
    # per-shard stats of the loop's shards: each reserved once, cancelled
    for k in range(4):
        st = tp.stats(k)
        assert st["reserves"] == 1 and st["cancels"] == 1
        assert st["live"] == 0 and st["commits"] == 0
    assert tp.stats(0)["writes"] == 0 and tp.stats(1)["writes"] == 1
    with pytest.raises(LookupError):
        tp.stats(4)
    assert "faults_fired" in tp.stats()
    eng.shutdown()
