"""MPI.buffer (mpi4py's raw memory object), MPI.Alloc_mem/Free_mem, Iflush_buffer."""

import array
import ctypes
import pickle

import numpy as np
import pytest

from gpumpi import MPI
from gpumpi._arrays import as_buffer, datatype_of
from gpumpi.testing import run_ranks


def test_empty_buffer():
    b = MPI.buffer()
    assert (b.address, b.obj, b.nbytes, b.readonly, b.format, b.itemsize, len(b)) == (0, None, 0, False, "B", 1, 0)
    b[:] = 0
    b[:] = MPI.buffer()
    m = memoryview(b)
    assert (m.format, m.ndim, m.shape, m.readonly, m.tobytes()) == ("B", 1, (0,), False, b"")
    assert MPI.memory is MPI.buffer


@pytest.mark.parametrize("obj", [None, 0, 0.0, [], ()])
def test_not_a_buffer(obj):
    with pytest.raises(TypeError):
        MPI.buffer(obj)
    with pytest.raises(TypeError):
        MPI.buffer.frombuffer(obj)


def test_views_of_objects():
    b = MPI.buffer(b"abc")
    assert b.obj == b"abc" and b.readonly and b.nbytes == 3
    with pytest.raises(TypeError, match="read-only"):
        b[:] = 0
    ba = bytearray(b"\1\2\3")
    b = MPI.buffer(ba)
    assert not b.readonly and b.address == as_buffer(ba, True).addr
    with pytest.raises(ValueError, match="slice length does not match"):
        b[0:1] = b[1:3]
    b[1:] = array.array("B", [7, 7])
    b[0] = 9
    assert ba == bytearray(b"\x09\x07\x07") and b[-1] == 7 and b.tobytes() == b"\x09\x07\x07"
    with pytest.raises(IndexError):
        b[3]
    with pytest.raises(IndexError):
        b[::2]
    with pytest.raises(TypeError):
        b[None]
    with pytest.raises(NotImplementedError):
        del b[0]
    ro = MPI.buffer.frombuffer(ba, readonly=True)
    assert ro.readonly and memoryview(ro).readonly and ro.address == b.address
    t = b.toreadonly()
    assert t.readonly and t.obj is ba and t.address == b.address
    b.release()
    assert (b.address, b.nbytes, b.readonly, b.obj) == (0, 0, False, None)


def test_fromaddress_allocate_cast():
    a = array.array("B", [1, 2, 3])
    addr, n = a.buffer_info()
    b = MPI.buffer.fromaddress(addr, n)
    b[:] = 5
    assert list(a) == [5, 5, 5]
    with pytest.raises(ValueError):
        MPI.buffer.fromaddress(addr, -1)
    with pytest.raises(ValueError):
        MPI.buffer.fromaddress(0, 1)
    for size in (0, 1, 24):
        c = MPI.buffer.allocate(size, True)
        assert c.nbytes == size and c.address != 0 and memoryview(c.obj).nbytes == size
    with pytest.raises(ValueError):
        MPI.buffer.allocate(-1)
    with pytest.raises(TypeError):
        MPI.buffer.allocate(None)
    m = c.cast("i", (2, 3))
    m[1, 2] = 42
    assert c.cast("i")[5] == 42
    with pytest.raises(ValueError):
        pickle.dumps(c)


def test_device_memory_is_not_cpu_accessible():
    a = np.arange(4, dtype="i4")

    class CAI:
        __cuda_array_interface__ = {"data": (a.ctypes.data, False), "typestr": "<i4", "shape": (4,), "version": 3}

    b = MPI.buffer.frombuffer(CAI())
    assert b.address == a.ctypes.data and b.nbytes == 16
    for f in (lambda: b.cast("i"), lambda: b.tobytes(), lambda: b[0], lambda: b.__setitem__(0, 1)):
        with pytest.raises(BufferError, match="not accessible from the CPU"):
            f()
    v = as_buffer(b, True, "Send")  # gpumpi's calls still see its memory kind
    assert v.kind != "host" and v.addr == a.ctypes.data


def test_buffer_as_message_and_alloc_mem():
    mem = MPI.Alloc_mem(16)
    assert type(mem) is MPI.buffer and mem.address != 0 and len(mem) == 16 and not mem.readonly
    mem[:] = 3
    v = as_buffer(mem, False, "Recv")
    assert v.addr == mem.address and v.nbytes == 16 and datatype_of(v) is datatype_of(as_buffer(bytearray(1), True))
    arr = np.frombuffer(mem, np.uint8)  # a view taken before Free_mem keeps the memory alive
    MPI.Free_mem(mem)
    assert (mem.address, mem.nbytes, mem.readonly) == (0, 0, False)
    assert arr.sum() == 48
    with pytest.raises(MPI.Exception):
        MPI.Free_mem(mem)
    with pytest.raises(BufferError):
        MPI.Attach_buffer(MPI.buffer(b"abc"))
    assert ctypes.sizeof(ctypes.c_char) == 1


def _iflush_waits_for_buffered_sends():
    c = MPI.COMM_WORLD
    me, n = c.rank, c.size
    big = 200_000  # rendezvous: the buffered copy leaves only when the peer receives
    buf = MPI.Alloc_mem(big + MPI.BSEND_OVERHEAD)
    MPI.Attach_buffer(buf)
    c.Bsend(np.ones(big, np.uint8), (me + 1) % n, 1)
    from gpumpi import _p2p

    pool = _p2p._bsend["pool"]
    req = MPI.Iflush_buffer()
    # before this rank enters the barrier no peer can have received its message (each
    # receives only after the barrier): the flush cannot be complete yet.  (Testing after
    # the barrier raced with a fast peer whose receive finished the flush.)
    assert pool.live == 1
    assert not req.Test(), "Iflush_buffer completed while a buffered message was still in the buffer"
    c.Barrier()
    got = np.zeros(big, np.uint8)
    c.Recv(got, (me - 1) % n, 1)
    req.Wait()
    assert pool.live == 0 and got.all()
    assert MPI.Detach_buffer() is buf
    MPI.Iflush_buffer().Wait()  # nothing attached: complete at once
    MPI.Free_mem(buf)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_iflush_buffer(n):
    run_ranks(_iflush_waits_for_buffered_sends, n, timeout=60)
