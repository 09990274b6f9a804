"""MPI.buffer (gpumpi._membuffer): mpi4py's flat byte buffer, over NumPy."""

from __future__ import annotations

import ctypes
import pickle

import numpy as np
import pytest

from gpumpi._membuffer import buffer, memory


def test_allocate_and_properties():
    b = buffer.allocate(10)
    assert type(b) is buffer and memory is buffer
    assert len(b) == b.nbytes == 10 and b.itemsize == 1 and b.format == "B"
    assert not b.readonly and b.obj is None and b.address != 0
    assert b.tobytes() == bytes(10) and buffer.allocate(3, clear=True).tobytes() == bytes(3)
    mv = memoryview(b)
    assert mv.format == "B" and mv.nbytes == 10 and not mv.readonly
    assert bool(b) and not buffer.allocate(0) and not buffer()
    with pytest.raises(ValueError):
        buffer.allocate(-1)


def test_items_slices_and_identity():
    b = buffer.allocate(8)
    b[0] = 255
    b[1:3] = 7
    b[4:8] = b"abcd"
    assert b[0] == 255 and type(b[0]) is int and b[-1] == ord("d")
    assert b.tobytes() == b"\xff\x07\x07\x00abcd"
    s = b[4:6]
    assert type(s) is buffer and s.tobytes() == b"ab" and s.address == b.address + 4
    s[0] = ord("z")
    assert b[4] == ord("z")
    with pytest.raises(IndexError):
        b[8]
    with pytest.raises(IndexError):
        b[::2]
    with pytest.raises(ValueError):
        b[0:2] = b"abc"
    with pytest.raises(TypeError):
        b["x"]
    other = buffer.allocate(8)
    assert b == b and b != other and not (b == other) and {b: 1}[b] == 1  # identity, as mpi4py


def test_wrapping_other_memory():
    a = np.arange(4, dtype="i4")
    b = buffer(a)
    assert b.obj is a and b.address == a.ctypes.data and len(b) == 16 and not b.readonly
    b[0] = 9
    assert a[0] == 9
    ro = buffer(b"xyz")
    assert ro.readonly
    with pytest.raises(TypeError):
        ro[0] = 1
    assert buffer.frombuffer(b"abc", readonly=True).tobytes() == b"abc"
    with pytest.raises(BufferError):
        buffer.frombuffer(b"abc")
    raw = (ctypes.c_char * 5).from_buffer(bytearray(b"hello"))
    f = buffer.fromaddress(ctypes.addressof(raw), 5)
    assert f.tobytes() == b"hello" and f.obj is None
    assert buffer.fromaddress(0, 0).nbytes == 0
    with pytest.raises(ValueError):
        buffer.fromaddress(0, 4)
    r = b.toreadonly()
    assert r.readonly and r.address == b.address and not b.readonly
    assert b.cast("i").tolist() == [9, 1, 2, 3]
    assert pickle.loads(pickle.dumps(b)).tobytes() == b.tobytes()
    with pytest.raises(NotImplementedError, match="release"):
        b.release()


def test_device_objects_are_refused_clearly():
    class CAI:
        __cuda_array_interface__ = {"shape": (1,), "typestr": "<f8", "data": (0, False), "version": 3}

    with pytest.raises(NotImplementedError, match="device memory"):
        buffer(CAI())
