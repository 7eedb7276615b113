"""tests/cuda/test_torch.py - the Python binding's tensors in place on a
real GPU (issue 25 item 6), run by tools/gpu/check.sh with the GPU
machine's own Python 3.12 (torch and CuPy there) and the binding built for
3.12 here (build-gpu/python).  A plain script (no pytest there): each check
asserts; exit 0 all passed, 1 a check failed, 77 with one line where torch,
CUDA or the binding is missing.

What it checks, with torch CUDA tensors:
 - a staging tensor (__cuda_array_interface__) and a shard pool tensor are
   registered at their own data pointers, no copy: bytes written into the
   staging tensor after registration arrive in the pool tensor;
 - the same with DLPack (a wrapper exposing only __dlpack__ and
   __dlpack_device__) and with a raw (pointer, nbytes, "cuda:0") tuple;
 - what the consumer hands back for a device pool is an xfer.DeviceView
   that torch (DLPack) and CuPy (the array interface) read in place.
"""
import asyncio
import os
import sys


def skip(why):
    print("SKIP: %s" % why)
    sys.exit(77)


try:
    import torch
except ImportError:
    skip("no torch")
if not torch.cuda.is_available():
    skip("torch sees no CUDA device")
try:
    import xfer
except ImportError as e:
    skip("the binding is not importable (%s)" % e)
if not xfer._mem_available("cuda:0"):
    skip("this libxfer cannot register CUDA memory")
try:
    import cupy
except ImportError:
    cupy = None

N = 1 << 20
S = 2


class DLOnly:
    """A tensor seen through DLPack alone."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None, **kw):
        return self.t.__dlpack__(stream=stream) if stream is not None \
            else self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def one_round(name, wrap):
    dev = torch.device("cuda:0")
    pools = [torch.zeros(N, dtype=torch.uint8, device=dev) for _ in range(S)]
    staging = torch.zeros(N, dtype=torch.uint8, device=dev)
    srv = xfer.Server([wrap(p) for p in pools])
    eng = xfer.Engine(xfer.Tcp(srv.addrs), default_timeout=10)
    cons = xfer.Consumer(srv.addrs, buffers=srv)
    assert eng.transports[0].wait_connected(10) and cons.wait_connected(10)
    pool = eng.register_pool(wrap(staging))
    assert pool.ptr == staging.data_ptr(), (name, pool.ptr)
    assert pool.device == "cuda:0", (name, pool.device)
    data = torch.randint(0, 256, (2 * 65536,), dtype=torch.uint8)
    staging[:data.numel()].copy_(data.to(dev))  # after registration
    torch.cuda.synchronize()

    async def go():
        r = await eng.submit(1, pool, xfer.split(0, data.numel(), S))
        assert r.ok, (name, r)
        return await asyncio.wait_for(cons.__anext__(), 20)
    o = asyncio.run(go())
    assert o.ok, name
    for k, ((shard, off, n), view) in enumerate(zip(o.regions, o.views)):
        want = data[k * 65536:(k + 1) * 65536]
        got = pools[shard][off:off + n].cpu()   # in the pool tensor
        assert torch.equal(got, want), (name, k)
        assert isinstance(view, xfer.DeviceView), (name, type(view))
        assert view.ptr == pools[shard].data_ptr() + off, name
        assert torch.equal(torch.from_dlpack(view).cpu(), want), name
        if cupy is not None:
            c = cupy.asarray(view)
            assert c.data.ptr == view.ptr, name
            assert bytes(cupy.asnumpy(c)) == bytes(want.numpy()), name
    o.release()
    cons.close()
    eng.shutdown()
    srv.close()
    print("torch %s: ok" % name)


def main():
    one_round("__cuda_array_interface__", lambda t: t)
    one_round("DLPack", DLOnly)
    one_round("raw tuple", lambda t: (t.data_ptr(), t.numel(), "cuda:0"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
