"""tests/python/conftest.py - what every test of the Python binding shares.

meson runs each test file with Debian's interpreter and `-m pytest`, with
PYTHONPATH at build/python (the package as built) and $XFERD at the
build's xferd.  Waiting is always bounded (a test that would hang fails
with a timeout instead), and no assertion is about time.
"""
import asyncio
import gc
import os
import random
import sys

import pytest

import xfer


@pytest.fixture
def seed(request):
    """A seed for a randomised test: $XFER_SEED, else a fresh one; printed
    so that a failure can be rerun."""
    s = int(os.environ.get("XFER_SEED") or random.randrange(1, 1 << 31))
    print("\n%s: seed %d (XFER_SEED=%d reruns it)" % (request.node.name, s, s),
          file=sys.stderr)
    return s


def run(coro, timeout=60.0):
    """Run coro on a fresh asyncio loop, bounded by timeout seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def loop_engine(nshards=4, faults=(), seed=0, write_time=None, **kw):
    """An engine over nshards in-process shards, with short cancel timers
    so that fault runs end quickly."""
    kw.setdefault("cancel_op_timeout", 0.05)
    kw.setdefault("cancel_backoff", 0.002)
    kw.setdefault("cancel_max_attempts", 3)
    tp = xfer.Loop(nshards, seed=seed, write_time=write_time, faults=faults,
                   lease_ttl=kw.pop("lease_ttl", 1.0))
    return xfer.Engine(tp, **kw), tp


def wait_for(pred, timeout=10.0):
    """Poll pred() until it holds (True) or timeout seconds pass (False)."""
    import time
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            return False
        time.sleep(0.002)
    return True


@pytest.fixture(autouse=True)
def collect():
    """Collect garbage after each test, so that an engine a test dropped
    shuts down inside that test and not in the next one."""
    yield
    gc.collect()
