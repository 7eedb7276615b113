"""tests/python/test_tensor.py - tensors in place (issue 25 item 6): the
engine's staging pools, xfer.Server's shard buffers and what a Consumer
hands back take objects with __cuda_array_interface__ (v3), DLPack
(__dlpack__ / __dlpack_device__) and raw (pointer, nbytes, device) tuples,
as well as buffers, and never copy them.

"Without a copy" is checked twice over: the address the library registered
is the object's own data pointer, and bytes changed in the object after it
was registered are the bytes a transfer carries (producer), or bytes a
transfer wrote are in the object (shard).  The DLPack tests use numpy
(Debian's python3-numpy, >= 1.22 exports __dlpack__); the array-interface
ones use the test device's memory (xfer._testdev_alloc) where the build has
it, and a fake CUDA array where it does not (refused: no CUDA here)."""
import asyncio
import ctypes
import gc
import os
import sys

import pytest

import xfer
from conftest import run

# numpy never frees its module state, which LeakSanitizer reports at exit
# (5858 bytes for `import numpy` alone): under ASan the DLPack tests skip,
# as uvloop's do (tests/python/meson.build).
np = None
if not os.environ.get("XFER_SANITIZED"):
    try:
        import numpy as np
    except ImportError:
        pass
NO_NUMPY = np is None or not hasattr(np.ndarray, "__dlpack__")
needs_numpy = pytest.mark.skipif(NO_NUMPY, reason="numpy >= 1.22 (DLPack) "
                                  "is not there, or runs under ASan")

N = 64 * 1024
S = 2


class FakeCuda:
    """An object with __cuda_array_interface__ over a pointer it is given."""

    def __init__(self, ptr, shape, typestr="|u1", strides=None,
                 readonly=False, version=3):
        self.__cuda_array_interface__ = {
            "version": version, "shape": shape, "typestr": typestr,
            "data": (ptr, readonly), "strides": strides, "stream": None}


def rig(buffers):
    srv = xfer.Server(buffers)
    eng = xfer.Engine(xfer.Tcp(srv.addrs), default_timeout=5)
    cons = xfer.Consumer(srv.addrs, buffers=srv)
    assert eng.transports[0].wait_connected(10) and cons.wait_connected(10)
    return srv, eng, cons


def transfer(eng, cons, pool, tid, nbytes):
    async def go():
        assert (await eng.submit(tid, pool, xfer.split(0, nbytes, S))).ok
        return await asyncio.wait_for(cons.__anext__(), 10)
    return run(go())


def close(srv, eng, cons):
    cons.close()
    eng.shutdown()
    srv.close()


@needs_numpy
def test_tensor_dlpack_host_to_engine_and_server_in_place():
    shards = [np.zeros(N, dtype=np.uint8) for _ in range(S)]
    staging = np.zeros(N // 4, dtype=np.uint32)
    # What the binding takes from each: the array's own pointer, by DLPack.
    for a in shards + [staging]:
        assert xfer._memory(a, True) == (a.ctypes.data, a.nbytes, "host",
                                         "dlpack")
    srv, eng, cons = rig(shards)
    pool = eng.register_pool(staging)
    assert pool.form == "dlpack" and pool.device == "host"
    assert pool.ptr == staging.ctypes.data and pool.nbytes == staging.nbytes
    # Written after the registration: a copy made then would not see it.
    data = os.urandom(2 * 4096)
    staging.view(np.uint8)[:len(data)] = np.frombuffer(data, np.uint8)
    o = transfer(eng, cons, pool, 1, len(data))
    assert o.ok
    for k, ((shard, off, n), view) in enumerate(zip(o.regions, o.views)):
        want = data[k * 4096:(k + 1) * 4096]
        assert bytes(shards[shard][off:off + n]) == want  # in the array
        assert bytes(view) == want
    o.release()
    close(srv, eng, cons)


@needs_numpy
def test_tensor_dlpack_deleter_runs_when_let_go():
    a = np.zeros(N, dtype=np.uint8)
    before = sys.getrefcount(a)
    eng = xfer.Engine(xfer.Loop(1))
    pool = eng.register_pool(a)
    assert sys.getrefcount(a) > before      # the DLPack tensor holds it
    eng.unregister_pool(pool)
    del pool
    gc.collect()
    assert sys.getrefcount(a) == before     # its deleter ran
    eng.shutdown()


@needs_numpy
def test_tensor_dlpack_refuses_strided_and_read_only():
    a = np.arange(N, dtype=np.uint8)
    # numpy's own __dlpack__ refuses it (ValueError), or ours (BufferError)
    with pytest.raises((BufferError, ValueError), match="contiguous"):
        xfer._memory(a[::2])                       # DLPack, strided
    # A read-only array: DLPack cannot say read-only, so numpy refuses to
    # export it; staging (read only) takes its buffer, a shard refuses it.
    ro = np.zeros(64, np.uint8)
    ro.flags.writeable = False
    assert xfer._memory(ro) == (ro.ctypes.data, 64, "host", "buffer")
    with pytest.raises(BufferError):
        xfer._memory(ro, True)


def test_tensor_refuses_what_it_cannot_take_in_place():
    with pytest.raises(BufferError, match="contiguous"):
        xfer._memory(FakeCuda(1 << 40, (4, 4), "<f4", strides=(32, 4)))
    with pytest.raises(BufferError, match="read-only"):
        xfer._memory(FakeCuda(1 << 40, (16,), readonly=True), True)
    with pytest.raises(BufferError, match="typestr"):
        xfer._memory(FakeCuda(1 << 40, (16,), typestr="f"))
    with pytest.raises(BufferError, match="version"):
        xfer._memory(FakeCuda(1 << 40, (16,), version=1))
    with pytest.raises(TypeError):
        xfer._memory((1, 2))
    with pytest.raises(ValueError):
        xfer._memory((1 << 40, 16, "gpu"))
    # Contiguous strides given explicitly are fine; shape * itemsize bytes.
    assert xfer._memory(FakeCuda(1 << 40, (4, 4), "<f4", strides=(16, 4))
                        )[:2] == (1 << 40, 64)
    # DLPack's own device pair: kDLCUDA 2 -> cuda:3.
    assert xfer._memory((1 << 40, 8, (2, 3)))[2] == "cuda:3"


def test_tensor_raw_tuple_host_in_place():
    buf = (ctypes.c_ubyte * N)()
    ptr = ctypes.addressof(buf)
    srv, eng, cons = rig([(ptr, N, "host"), bytearray(N)])
    staging = bytearray(N)
    pool = eng.register_pool((ctypes.addressof(
        (ctypes.c_char * N).from_buffer(staging)), N, "cpu"))
    assert pool.form == "raw" and pool.obj is None
    data = os.urandom(2 * 4096)
    staging[:len(data)] = data
    o = transfer(eng, cons, pool, 1, len(data))
    assert o.ok
    shard, off, n = o.regions[0]
    assert shard == 0 and bytes(buf[off:off + n]) == data[:4096]
    o.release()
    close(srv, eng, cons)


@pytest.mark.skipif(xfer._mem_available("cuda"), reason="CUDA is here")
def test_tensor_device_memory_refused_without_device():
    assert xfer._mem_available("host")
    fake = FakeCuda(1 << 40, (N,))
    eng = xfer.Engine(xfer.Loop(1))
    with pytest.raises(xfer.NotSupportedError):
        eng.register_pool(fake)
    with pytest.raises(xfer.NotSupportedError):
        xfer.Server([fake])
    if not xfer._HAVE_TESTDEV:
        assert not xfer._mem_available("testdev")
        with pytest.raises(xfer.NotSupportedError):
            xfer._testdev_alloc(N)
    eng.shutdown()


@pytest.mark.skipif(not xfer._HAVE_TESTDEV, reason="no test device kind")
def test_tensor_cai_testdev_to_engine_and_server_in_place():
    """Test-device memory (PROT_NONE to everyone but its copy engine) as
    an array-interface object: the producer's staging and a shard's pool.
    The pointer registered is the object's; the bytes a transfer carried
    are read back through the copy engine, and a device region comes back
    from the consumer as a DeviceView over the pool's own memory."""
    stage = xfer._testdev_alloc(N)
    pools = [xfer._testdev_alloc(N), bytearray(N)]
    cai = stage.__cuda_array_interface__
    assert cai["version"] == 3 and cai["data"][0] == stage.ptr
    assert xfer._mem_of(stage.ptr) == "testdev"
    assert xfer._memory(stage)[:3] == (stage.ptr, N, "testdev")
    srv, eng, cons = rig(pools)
    pool = eng.register_pool(stage)
    assert pool.form == "cuda_array_interface" and pool.device == "testdev"
    assert pool.ptr == stage.ptr
    data = os.urandom(2 * 4096)
    stage.write(data)                 # after registration: no copy taken
    o = transfer(eng, cons, pool, 1, len(data))
    assert o.ok
    (s0, off0, n0), (s1, off1, n1) = o.regions
    dev_view, host_view = o.views
    assert isinstance(dev_view, xfer.DeviceView)
    assert dev_view.ptr == pools[0].ptr + off0 and dev_view.nbytes == n0
    assert dev_view.__cuda_array_interface__["data"][0] == dev_view.ptr
    assert dev_view.read() == data[:4096]
    assert pools[0].read()[off0:off0 + n0] == data[:4096]   # in the pool
    assert bytes(host_view) == data[4096:]
    o.release()
    with pytest.raises(ValueError):
        dev_view.__cuda_array_interface__     # valid until release only
    close(srv, eng, cons)


# ---------------------------------------------------------------------------
# A DLPack exporter of our own (ctypes, no numpy): it runs under ASan too,
# and it sees what the binding does with the capsule (renamed, deleter
# called exactly once) where numpy's keeps that to itself.

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManaged))
_DLManaged._fields_ = [("dl_tensor", _DLTensor),
                       ("manager_ctx", ctypes.c_void_p),
                       ("deleter", _DELETER)]

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]


class DLHost:
    """A DLPack tensor of bytes over a bytearray (shape elements of
    `itemsize` bytes, from byte `offset`), counting its deleter's calls."""

    def __init__(self, buf, offset, shape, strides=None, itemsize=1,
                 device=(1, 0)):
        self.buf, self.offset, self.device = buf, offset, device
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = ((ctypes.c_int64 * len(strides))(*strides)
                        if strides else None)
        self.itemsize = itemsize
        self.base = ctypes.addressof((ctypes.c_char * len(buf))
                                     .from_buffer(buf))
        self.live = {}      # id -> the managed struct, until deleted
        self.deleted = 0
        self.capsules = []

        def deleter(p):
            self.deleted += 1
            del self.live[ctypes.addressof(p.contents)]
        self._deleter = _DELETER(deleter)

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        m = _DLManaged()
        t = m.dl_tensor
        t.data = self.base
        t.device = _DLDevice(*self.device)
        t.ndim = len(self.shape)
        t.dtype = _DLDataType(1, 8 * self.itemsize, 1)  # kDLUInt
        t.shape = self.shape
        t.strides = self.strides
        t.byte_offset = self.offset
        m.deleter = self._deleter
        self.live[ctypes.addressof(m)] = m
        cap = _capsule_new(ctypes.addressof(m), b"dltensor", None)
        self.capsules.append(cap)
        return cap


def test_tensor_dlpack_capsule_used_and_deleted_once():
    buf = bytearray(N + 64)
    t = DLHost(buf, 64, (N // 4,), itemsize=4)
    eng = xfer.Engine(xfer.Loop(1))
    pool = eng.register_pool(t)
    assert pool.form == "dlpack"
    assert pool.ptr == t.base + 64 and pool.nbytes == N  # byte_offset
    assert _capsule_name(t.capsules[-1]) == b"used_dltensor"
    assert t.deleted == 0 and len(t.live) == 1   # held while registered
    eng.unregister_pool(pool)
    assert t.deleted == 1 and not t.live         # deleted once, at release
    del pool
    gc.collect()
    assert t.deleted == 1
    eng.shutdown()


def test_tensor_dlpack_refused_tensors_are_deleted():
    buf = bytearray(N)
    strided = DLHost(buf, 0, (16, 16), strides=(32, 1))
    with pytest.raises(BufferError, match="contiguous"):
        xfer._memory(strided)
    assert strided.deleted == 1
    # strides that are the compact ones are fine
    assert xfer._memory(DLHost(buf, 0, (16, 16), strides=(16, 1)))[1] == 256
    odd = DLHost(buf, 0, (N,), device=(4, 0))  # kDLOpenCL
    with pytest.raises(BufferError, match="kDLCPU"):
        xfer._memory(odd)
    assert odd.deleted == 0  # refused by its device, before __dlpack__


def test_tensor_dlpack_host_server_in_place():
    """A DLPack host tensor as a shard's pool: the transfer's bytes are in
    the exporter's own memory."""
    shard_mem = bytearray(N)
    t = DLHost(shard_mem, 0, (N,))
    srv, eng, cons = rig([t, bytearray(N)])
    data = os.urandom(2 * 4096)
    pool = eng.register_pool(bytearray(data))
    o = transfer(eng, cons, pool, 1, len(data))
    assert o.ok
    shard, off, n = o.regions[0]
    assert shard == 0 and bytes(shard_mem[off:off + n]) == data[:4096]
    o.release()
    close(srv, eng, cons)
    del srv, eng, cons, o
    gc.collect()
    assert t.deleted == 2 and not t.live  # the server's and the consumer's


@pytest.mark.skipif(xfer._mem_available("cuda"), reason="CUDA is here")
def test_tensor_dlpack_cuda_refused_without_device():
    t = DLHost(bytearray(N), 0, (N,), device=(2, 0))   # kDLCUDA
    assert xfer._memory(t)[2] == "cuda:0"
    eng = xfer.Engine(xfer.Loop(1))
    with pytest.raises(xfer.NotSupportedError):
        eng.register_pool(t)
    assert t.deleted == 2
    eng.shutdown()


def test_tensor_device_view_exports_dlpack_until_released():
    """A DeviceView of CUDA memory hands out a "dltensor" capsule of bytes
    over its own pointer, which keeps the view's owner alive until the
    consumer calls its deleter; one of test-device memory refuses (DLPack
    has no device type for it).  (Host memory stands in for the device here: nothing
    reads through the pointer.)"""
    class Owner:
        pass
    buf = bytearray(4096)
    base = ctypes.addressof((ctypes.c_char * 4096).from_buffer(buf))
    owner = Owner()
    before = sys.getrefcount(owner)
    v = xfer._device_view(owner, base + 16, 1024, "cuda:1")
    assert v.__dlpack_device__() == (2, 1)
    cap = v.__dlpack__(stream=None)
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    m = _DLManaged.from_address(get(cap, b"dltensor"))
    t = m.dl_tensor
    assert t.data == base + 16 and t.byte_offset == 0
    assert (t.device.device_type, t.device.device_id) == (2, 1)
    assert t.ndim == 1 and t.shape[0] == 1024 and not t.strides
    assert (t.dtype.bits, t.dtype.lanes) == (8, 1)
    assert sys.getrefcount(owner) == before + 2  # the view and the tensor
    # A consumer takes it: renamed, and its deleter called once.
    rename = ctypes.pythonapi.PyCapsule_SetName
    rename.argtypes = [ctypes.py_object, ctypes.c_char_p]
    assert rename(cap, b"used_dltensor") == 0
    m.deleter(ctypes.pointer(m))
    del cap
    assert sys.getrefcount(owner) == before + 1
    # An unused capsule frees itself (no leak under ASan).
    cap2 = v.__dlpack__()
    del cap2
    assert sys.getrefcount(owner) == before + 1
    td = xfer._device_view(owner, base, 64, "testdev")
    with pytest.raises(BufferError):
        td.__dlpack__()
    del v, td
    assert sys.getrefcount(owner) == before
