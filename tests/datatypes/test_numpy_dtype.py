"""NumPy dtype conversions against mpi4py.util.dtlib, and datatypes for strided array views."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpumpi import datatypes as D
from gpumpi.constants import COMBINER_DUP, COMBINER_RESIZED
from gpumpi.datatypes import Datatype, flatten, plan
from gpumpi.datatypes.numpy_dtype import for_array, from_numpy_dtype, to_numpy_dtype

MPI = pytest.importorskip("mpi4py.MPI")
dtlib = pytest.importorskip("mpi4py.util.dtlib")

SCALARS = ["b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "f", "d", "g", "F", "D", "G", "?", "e",
           "i1", "u2", "i4", "u8", "f4", "c8"]


def _layout(t):
    return (t.size, t.lb, t.extent, t.true_lb, t.true_extent, t.combiner)


@st.composite
def dtypes(draw, depth=2):
    kind = draw(st.sampled_from(["scalar", "scalar", "struct", "subarray"] if depth else ["scalar"]))
    if kind == "scalar":
        return np.dtype(draw(st.sampled_from(SCALARS)))
    if kind == "subarray":
        shape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
        return np.dtype((draw(dtypes(depth - 1)), shape))
    n = draw(st.integers(1, 4))
    fields = [(f"x{i}", draw(dtypes(depth - 1))) for i in range(n)]
    style = draw(st.sampled_from(["packed", "aligned", "offsets"]))
    if style == "packed":
        return np.dtype(fields)
    if style == "aligned":
        return np.dtype(fields, align=True)
    offsets, pos = [], 0
    for _, f in fields:
        pos += draw(st.integers(0, 5))
        offsets.append(pos)
        pos += f.itemsize
    return np.dtype({"names": [nm for nm, _ in fields], "formats": [f for _, f in fields], "offsets": offsets,
                     "itemsize": pos + draw(st.integers(0, 7))})


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(dtypes())
def test_from_and_to_numpy_dtype_match_dtlib(dtype):
    ours, ref = from_numpy_dtype(dtype), dtlib.from_numpy_dtype(dtype)
    assert _layout(ours) == _layout(ref)
    assert ours.Get_envelope() == ref.Get_envelope()
    assert to_numpy_dtype(ours) == dtlib.to_numpy_dtype(ref)
    assert to_numpy_dtype(ours).itemsize == dtype.itemsize
    ref.Free()


@pytest.mark.parametrize("make", [
    lambda M: M.DOUBLE,
    lambda M: M.DOUBLE_INT,
    lambda M: M.SHORT_INT,
    lambda M: M.LONG_DOUBLE_INT,
    lambda M: M.INT.Dup(),
    lambda M: M.INT.Create_contiguous(3),
    lambda M: M.DOUBLE.Create_subarray([2, 3], [2, 3], [0, 0]),
    lambda M: M.DOUBLE.Create_subarray([2, 3], [2, 3], [0, 0], order=M.ORDER_F),
    lambda M: M.DOUBLE.Create_vector(3, 2, 4),
    lambda M: M.DOUBLE.Create_hvector(3, 2, 20),
    lambda M: M.DOUBLE.Create_hvector(1, 2, 20),
    lambda M: M.INT.Create_indexed([1, 2], [0, 5]),
    lambda M: M.INT.Create_hindexed([1, 2], [0, 6]),
    lambda M: M.INT.Create_indexed_block(2, [0, 5]),
    lambda M: M.INT.Create_hindexed_block(2, [1, 9]),
    lambda M: M.Datatype.Create_struct([1, 2], [0, 8], [M.INT, M.DOUBLE]),
    lambda M: M.Datatype.Create_struct([1, 2], [1, 9], [M.CHAR, M.FLOAT]).Create_resized(0, 20),
    lambda M: M.Datatype.Create_f90_real(6, 30),
])
def test_to_numpy_dtype_matches_dtlib(make):
    from gpumpi import constants

    class G:
        pass

    for k in dir(constants):
        if k.isupper():
            setattr(G, k, getattr(constants, k))
    for k in D.__all__:
        setattr(G, k, getattr(D, k))
    assert to_numpy_dtype(make(G)) == dtlib.to_numpy_dtype(make(MPI))


def test_conversion_errors_and_strings():
    with pytest.raises(ValueError, match="object entries"):
        from_numpy_dtype(object)
    with pytest.raises(ValueError, match="non-native byteorder"):
        from_numpy_dtype(">f8" if np.little_endian else "<f8")
    with pytest.raises(ValueError, match="null MPI datatype"):
        to_numpy_dtype(D.DATATYPE_NULL)
    with pytest.raises(ValueError, match="cannot convert subarray"):
        to_numpy_dtype(D.DOUBLE.Create_subarray([4], [2], [1]))
    with pytest.raises(ValueError, match="cannot convert MPI datatype"):
        to_numpy_dtype(D.DOUBLE.Create_resized(0, 16))
    s5 = from_numpy_dtype("S5")  # dtlib gives one CHAR here; five is what the dtype holds
    assert s5.size == 5 and s5.extent == 5 and s5.Get_contents()[3] == [D.CHAR]
    assert from_numpy_dtype("U3").size == 12
    e = from_numpy_dtype("f8")
    assert e.combiner == COMBINER_DUP and e.Get_contents()[3] == [D.DOUBLE]
    r = from_numpy_dtype(np.dtype("i1,f8", align=True))
    assert r.combiner == COMBINER_RESIZED and r.Get_extent() == (0, 16)


# -- datatypes for strided views ----------------------------------------------------------------------


def _pack_view(root: np.ndarray, view: np.ndarray):
    dt, count, off = for_array(view)
    assert dt.committed
    base = root.__array_interface__["data"][0]
    origin = view.__array_interface__["data"][0] + off
    mem = memoryview(root.reshape(-1).view(np.uint8))
    lo = base - origin  # type offset o lives at root byte (origin - base) + o
    return dt, count, off, mem, lo


@st.composite
def views(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim)))
    dtype = draw(st.sampled_from(["f8", "i4", "i2", "u1", "c16", np.dtype("i4,f8"), np.dtype("i1,f8", align=True)]))
    root = np.zeros(shape, dtype=dtype)
    root.view(np.uint8).reshape(-1)[:] = np.arange(root.nbytes, dtype=np.int64) % 251
    index = []
    for n in shape:
        start = draw(st.integers(0, n - 1))
        step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
        stop = draw(st.integers(-1, n)) if step < 0 else draw(st.integers(start, n))
        if step < 0 and stop >= start:
            stop = -1
        index.append(slice(start, None if stop == -1 and step < 0 else stop, step))
    view = root[tuple(index)]
    if draw(st.booleans()) and view.ndim > 1:
        view = view.transpose(draw(st.permutations(range(view.ndim))))
    return root, view


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(views())
def test_for_array_moves_exactly_the_view(rv):
    root, view = rv
    dt, count, _, mem, lo = _pack_view(root, view)
    packed = plan.pack(mem, lo, dt, count)
    keep = _field_bytes(root.dtype)  # padding inside structured items is not data
    items = np.ascontiguousarray(view).reshape(-1).view(np.uint8).reshape(-1, root.itemsize)
    assert bytes(packed) == items[:, keep].tobytes()
    # and back: the same type and offset unpack exactly the view's elements of a twin array
    target = _blank(root)
    plan.unpack(packed, memoryview(target.reshape(-1).view(np.uint8)), lo, dt, count)
    expect = _blank(root)
    _assign_view(expect, root, view)
    t = target.reshape(-1).view(np.uint8).reshape(-1, root.itemsize)
    e = expect.reshape(-1).view(np.uint8).reshape(-1, root.itemsize)
    assert (t[:, keep] == e[:, keep]).all() and not t[:, ~keep].any()


def _field_bytes(dtype) -> np.ndarray:
    keep = np.zeros(dtype.itemsize, bool)
    for o, b in flatten.typemap(from_numpy_dtype(dtype)):
        keep[o:o + b.size] = True
    return keep


def _blank(like: np.ndarray) -> np.ndarray:
    """A zeroed array like ``like``, padding bytes included (``zeros_like`` leaves those alone)."""
    return np.frombuffer(bytearray(like.nbytes), dtype=like.dtype).reshape(like.shape)


def _assign_view(dest: np.ndarray, root: np.ndarray, view: np.ndarray) -> None:
    """Copy the view's elements into the same positions of ``dest`` (a fresh array like root)."""
    offset = view.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    twin = np.ndarray(view.shape, dtype=view.dtype, buffer=dest, offset=offset, strides=view.strides)
    twin[...] = view


def test_for_array_examples():
    a = np.arange(60, dtype=np.float64).reshape(5, 12)
    dt, count, off = for_array(a[:, 3])
    assert (count, off) == (5, 0) and (dt.size, dt.lb, dt.extent) == (8, 0, 96)
    dt, count, off = for_array(a)
    assert dt is D.DOUBLE and count == 60 and off == 0
    dt, count, off = for_array(a[::-1, ::-1])
    assert count == 1 and off == -(a.nbytes - 8) and dt.size == a.nbytes
    assert isinstance(flatten.canonical(dt), flatten.Strided)
    cube = np.zeros((4, 5, 6), dtype=np.int32)
    dt, count, off = for_array(cube[:, 2, :])  # a face of a 3-D array
    assert (count, off, dt.size, dt.extent) == (4, 0, 24, 120)
    dt, count, off = for_array(cube[:, :, 0])
    assert count == 20 and flatten.canonical(dt, count) == flatten.Strided(0, 4, (20,), (24,))  # rows tile
    assert for_array(np.zeros(0))[1] == 0
    with pytest.raises(TypeError):
        for_array([1, 2, 3])
    st_ = np.zeros(4, dtype=np.dtype("i4,f8"))[::2]
    dt, count, off = for_array(st_)
    assert count == 2 and dt.size == 12 and dt.extent == 24
    assert Datatype.Commit(dt) is dt
