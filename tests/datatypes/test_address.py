"""Absolute addresses: Get_address, Aint_add/Aint_diff, and struct types built from them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpumpi.datatypes.plan as plan
from gpumpi._arrays import raw_mem
from gpumpi.constants import BOTTOM
from gpumpi.datatypes import DOUBLE, INT, SHORT, Aint_add, Aint_diff, Datatype, Get_address, flatten

MPI = pytest.importorskip("mpi4py.MPI")


def test_get_address_matches_mpi4py():
    a = np.arange(10.0)
    b = bytearray(8)
    for x in (a, a[2:], a.reshape(2, 5), b"abc", b, memoryview(b)[3:], np.zeros(0), np.zeros((3, 4), order="F")):
        assert Get_address(x) == MPI.Get_address(x)
    assert Get_address(a[3:]) - Get_address(a) == 24
    assert Get_address(BOTTOM) == Get_address(None) == 0 == MPI.Get_address(MPI.BOTTOM)
    with pytest.raises(BufferError):
        Get_address(a[::2])
    with pytest.raises(TypeError):
        Get_address(3)


@settings(max_examples=100, deadline=None)
@given(st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1))
def test_aint_arithmetic_matches_mpi4py(x, y):
    assert Aint_add(x, y) == MPI.Aint_add(x, y)
    assert Aint_diff(x, y) == MPI.Aint_diff(x, y)


def test_aint_arguments():
    assert Aint_add(2**63 - 1, 1) == -2**63  # wraps like MPI_Aint
    assert Aint_add(1.5, 1) == MPI.Aint_add(1.5, 1) == 2
    with pytest.raises(OverflowError):
        Aint_add(2**63, 1)
    with pytest.raises(TypeError, match="Aint_add: base must be an integer"):
        Aint_add("1", 1)


def _struct_of_arrays(arrays, types):
    addrs = [Get_address(a) for a in arrays]
    t = Datatype.Create_struct([a.size for a in arrays], addrs, types).Commit()
    return t, addrs


def _absolute_mem(arrays):
    """A memoryview over address space from the lowest to the highest byte the arrays use."""
    lo = min(Get_address(a) for a in arrays)
    hi = max(Get_address(a) + a.nbytes for a in arrays)
    return raw_mem(lo, hi - lo, False, arrays), lo


def test_struct_of_separate_arrays_from_bottom():
    x = np.arange(5, dtype=np.float64)
    y = np.arange(7, dtype=np.int32) * 3
    z = np.arange(3, dtype=np.int16) - 9
    t, addrs = _struct_of_arrays((x, y, z), (DOUBLE, INT, SHORT))
    assert t.true_lb == min(addrs) and t.size == x.nbytes + y.nbytes + z.nbytes
    mem, lo = _absolute_mem((x, y, z))
    packed = plan.pack(mem, lo, t, 1)  # type offsets are addresses: BOTTOM is offset 0
    assert bytes(packed) == x.tobytes() + y.tobytes() + z.tobytes()
    # MPICH moves the same bytes from MPI_BOTTOM
    r = MPI.Datatype.Create_struct([a.size for a in (x, y, z)], addrs, [MPI.DOUBLE, MPI.INT, MPI.SHORT]).Commit()
    got = bytearray(t.size)
    MPI.COMM_SELF.Sendrecv([MPI.BOTTOM, 1, r], 0, 0, [got, MPI.BYTE], 0, 0)
    assert bytes(got) == bytes(packed)
    r.Free()
    # and unpack scatters back into the three arrays
    x2, y2, z2 = np.zeros_like(x), np.zeros_like(y), np.zeros_like(z)
    t2, _ = _struct_of_arrays((x2, y2, z2), (DOUBLE, INT, SHORT))
    mem2, lo2 = _absolute_mem((x2, y2, z2))
    plan.unpack(packed, mem2, lo2, t2, 1)
    assert (x2 == x).all() and (y2 == y).all() and (z2 == z).all()


def test_relative_displacements_from_addresses():
    """The classic use: displacements as Aint_diff of field addresses against the base."""
    rec = np.zeros(4, dtype=np.dtype([("a", "i4"), ("b", "f8")], align=True))
    base = Get_address(rec)
    da = Aint_diff(Get_address(rec[:1]), base)
    db = Aint_diff(Aint_add(base, rec.dtype.fields["b"][1]), base)
    t = Datatype.Create_struct([1, 1], [da, db], [INT, DOUBLE]).Create_resized(0, rec.itemsize).Commit()
    rec["a"] = np.arange(4)
    rec["b"] = np.arange(4) * 0.5
    packed = plan.pack(memoryview(rec.view(np.uint8).reshape(-1)), 0, t, 4)
    want = b"".join(np.int32(i).tobytes() + np.float64(i * 0.5).tobytes() for i in range(4))
    assert bytes(packed) == want
    assert [o for o, _ in flatten.typemap(t)] == [0, 8]
