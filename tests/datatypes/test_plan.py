"""Host pack/unpack plans, Pack/Unpack and external32, checked against the typemap and MPICH."""

from __future__ import annotations

import dtgen
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpumpi import datatypes as D
from gpumpi.constants import UNDEFINED
from gpumpi.datatypes import Datatype, flatten, plan
from gpumpi.errors import ERR_ARG, ERR_BUFFER, ERR_COMM, ERR_COUNT, ERR_TRUNCATE, ERR_TYPE, ERR_UNSUPPORTED_DATAREP
from gpumpi.errors import Exception as MPIException

MPI = pytest.importorskip("mpi4py.MPI")

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
GUARD = 0xA5


class _Comm:
    """Stands in for a communicator: Pack only needs something comm-like and not null."""

    def Get_size(self):
        return 1


COMM = _Comm()


def _frame(t, count, seed=0):
    """A random buffer holding ``count`` elements of ``t``: ``(buf, base, touched byte offsets)``.

    Type offset ``o`` lives at ``buf[base + o]``; 32 guard bytes lie on either side.
    """
    tm = flatten.typemap_bytes(t, count)
    lo = min(tm, default=0)
    hi = max(tm, default=0) + 1
    base = 32 - min(lo, 0)
    n = base + max(hi, count * max(t.extent, 0)) + 32
    buf = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    return buf, base, tm


def _mask_long_double(t, count, data) -> bytes:
    """Zero the 6 padding bytes of every x87 long double in a packed stream (MPICH may copy
    long doubles through the FPU, which writes zeros there)."""
    a = np.frombuffer(bytes(data), np.uint8).copy()
    lanes = {D.LONG_DOUBLE._handle: 1, D.C_LONG_DOUBLE_COMPLEX._handle: 2}
    pos = 0
    for _ in range(count):
        for b, n in flatten.signature(t):
            k = lanes.get(b._handle, 0)
            for _ in range(n):
                for j in range(k):
                    a[pos + 16 * j + 10: pos + 16 * j + 16] = 0
                pos += b.size
    return a.tobytes()


# -- pack / unpack against the typemap -------------------------------------------------------------


@SETTINGS
@given(dtgen.specs(depth=3), st.integers(0, 3), st.integers(0, 2**32 - 1))
def test_pack_unpack_round_trip_keeps_guards(spec, count, seed):
    t = dtgen.build(spec, D).Commit()
    src, base, tm = _frame(t, count, seed)
    packed = plan.pack(memoryview(src), -base, t, count)
    assert bytes(packed) == src[np.array(tm, dtype=np.intp) + base].tobytes() if tm else len(packed) == 0
    dst = np.full_like(src, GUARD)
    plan.unpack(packed, memoryview(dst), -base, t, count)
    touched = np.zeros(len(src), bool)
    touched[np.array(tm, dtype=np.intp) + base] = True
    assert (dst[~touched] == GUARD).all(), "bytes the type does not touch are left alone"
    if len(set(tm)) == len(tm):
        assert (dst[touched] == src[touched]).all()


@SETTINGS
@given(dtgen.specs(depth=3), st.integers(1, 3), st.data())
def test_partial_unpack_writes_exactly_the_leading_bytes(spec, count, data):
    t = dtgen.build(spec, D).Commit()
    src, base, tm = _frame(t, count)
    if len(set(tm)) != len(tm):
        return
    nbytes = data.draw(st.integers(0, len(tm)))
    packed = plan.pack(memoryview(src), -base, t, count)
    dst = np.full_like(src, GUARD)
    plan.unpack(packed[:nbytes], memoryview(dst), -base, t, count, nbytes)
    want = np.full_like(src, GUARD)
    idx = np.array(tm[:nbytes], dtype=np.intp) + base
    want[idx] = src[idx]
    assert (dst == want).all()


@SETTINGS
@given(dtgen.specs(depth=3), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_pack_equals_mpich_pack(spec, count, seed):
    t, r = dtgen.build(spec, D).Commit(), dtgen.build(spec, MPI).Commit()
    if t.extent <= 0 or t.size == 0:
        return
    src, base, tm = _frame(t, count, seed)
    ours = plan.pack(memoryview(src), -base, t, count)
    ref = bytearray(count * t.size)
    assert r.Pack(memoryview(src)[base: base + count * t.extent], ref, 0, MPI.COMM_SELF) == len(ref)
    assert _mask_long_double(t, count, ours) == _mask_long_double(t, count, ref), spec
    if len(set(tm)) == len(tm):
        a, b = np.zeros_like(src), np.zeros_like(src)
        plan.unpack(ref, memoryview(a), -base, t, count)
        r.Unpack(bytes(ref), 0, memoryview(b)[base: base + count * t.extent], MPI.COMM_SELF)
        assert a.tobytes() == b.tobytes()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(dtgen.specs(depth=3, names=dtgen.PLAIN, exclude=("struct", "darray")), st.integers(0, 5),
       st.integers(0, 2**32 - 1))
def test_elements_in_matches_mpich_get_elements(spec, extra, seed):
    """MPI_Get_elements on whole and partial messages.  MPICH's Get_elements answers UNDEFINED
    for structs holding pair types and aborts (SIGFPE or an assertion) on FLOAT_INT, on many
    structs and darrays and on zero-size types, so those are checked on fixed examples below."""
    t, r = dtgen.build(spec, D).Commit(), dtgen.build(spec, MPI).Commit()
    if t.size == 0:
        return
    for nbytes in {0, t.size, 2 * t.size, t.size + extra, max(0, t.size - extra), seed % (3 * t.size + 1)}:
        s = MPI.Status()
        s.Set_elements(MPI.BYTE, nbytes)
        assert plan.elements_in(t, nbytes) == s.Get_elements(r), (spec, nbytes)


@pytest.mark.parametrize("make", [
    lambda M: M.Datatype.Create_struct([1, 1, 2], [0, 8, 16], [M.INT, M.DOUBLE, M.SHORT]),
    lambda M: M.Datatype.Create_struct([1, 1], [0, 8], [M.INT, M.DOUBLE]),
    lambda M: M.DOUBLE_INT.Create_contiguous(2),
    lambda M: M.SHORT_INT.Create_vector(2, 1, 2),
])
def test_elements_in_structs_and_pairs_match_mpich(make):
    t, r = make(dtgen.G).Commit(), make(MPI).Commit()
    for nbytes in range(0, 3 * t.size + 1):
        s = MPI.Status()
        s.Set_elements(MPI.BYTE, nbytes)
        assert plan.elements_in(t, nbytes) == s.Get_elements(r), nbytes


def test_mpich_struct_pair_elements_quirk():
    s = Datatype.Create_struct([1], [0], [D.DOUBLE_INT]).Commit()
    r = MPI.Datatype.Create_struct([1], [0], [MPI.DOUBLE_INT]).Commit()
    st_ = MPI.Status()
    st_.Set_elements(MPI.BYTE, 12)
    assert st_.Get_elements(r) == UNDEFINED  # MPICH
    assert plan.elements_in(s, 12) == 2 == plan.elements_in(D.DOUBLE_INT, 12)  # a double and an int


# -- the MPI methods --------------------------------------------------------------------------------


@SETTINGS
@given(dtgen.specs(depth=2, resized=False), st.integers(1, 3), st.integers(0, 7), st.integers(0, 2**32 - 1))
def test_pack_unpack_methods_match_mpi4py(spec, count, position, seed):
    t, r = dtgen.build(spec, D).Commit(), dtgen.build(spec, MPI).Commit()
    if t.extent <= 0 or t.true_lb < 0 or t.true_lb + t.true_extent > t.extent:
        return  # Pack reads from the buffer start: only types inside their extent
    src = np.random.default_rng(seed).integers(0, 256, count * t.extent, dtype=np.uint8)
    size = t.Pack_size(count, COMM)
    assert size == r.Pack_size(count, MPI.COMM_SELF)
    ours, ref = bytearray(position + size + 3), bytearray(position + size + 3)
    assert t.Pack(src, ours, position, COMM) == r.Pack(src, ref, position, MPI.COMM_SELF) == position + size
    assert _mask_long_double(t, count, ours[position:position + size]) == \
        _mask_long_double(t, count, ref[position:position + size])
    a, b = np.zeros_like(src), np.zeros_like(src)
    assert t.Unpack(ref, position, a, COMM) == r.Unpack(bytes(ref), position, b, MPI.COMM_SELF)
    tm = flatten.typemap_bytes(t, count)
    if len(set(tm)) == len(tm):
        assert a.tobytes() == b.tobytes()


def _ext32_reference(t, count, src, base) -> bytes:
    """external32 of each basic element in turn, converted by MPICH one element at a time."""
    out = bytearray()
    for i in range(count):
        for o, b in flatten.typemap(t):
            ref = getattr(MPI, _NAMES[b._handle])
            one = bytearray(ref.Pack_external_size("external32", 1))
            off = base + i * t.extent + o
            ref.Pack_external("external32", src[off: off + b.size], one, 0)
            out += one
    return bytes(out)


_NAMES = {getattr(D, n)._handle: n for n in dtgen.EXT32_BASIC}


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(dtgen.EXT32_BASIC).flatmap(
    lambda n: dtgen.specs(names=[n], resized=False, exclude=("struct", "darray"))),
       st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_pack_external_equals_mpich(spec, count, seed):
    """Types of one basic type: MPICH's external32 aborts on mixed types and darrays, and walks
    negative extents differently from its own Pack (mixed and resized types: next test)."""
    t, r = dtgen.build(spec, D).Commit(), dtgen.build(spec, MPI).Commit()
    if t.extent <= 0 or t.size == 0:
        return
    assert t.Pack_external_size("external32", count) == r.Pack_external_size("external32", count)
    src, base, tm = _frame(t, count, seed)
    ours = plan.external32_pack(memoryview(src), -base, t, count)
    ref = bytearray(r.Pack_external_size("external32", count))
    assert r.Pack_external("external32", memoryview(src)[base: base + count * t.extent], ref, 0) == len(ref)
    assert bytes(ours) == bytes(ref), spec
    if len(set(tm)) == len(tm):
        a, b = np.zeros_like(src), np.zeros_like(src)
        plan.external32_unpack(bytes(ref), memoryview(a), -base, t, count)
        r.Unpack_external("external32", bytes(ref), 0, memoryview(b)[base: base + count * t.extent])
        assert a.tobytes() == b.tobytes()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(dtgen.specs(depth=3, names=dtgen.EXT32_BASIC), st.integers(1, 2), st.integers(0, 2**32 - 1))
@example(spec=("struct", [0, 1, 1], [0, 0, 0],  # numpy's fancy indexing gave a non-C-ordered copy
               [("named", "BYTE"), ("named", "LONG"), ("dup", ("dup", ("named", "BYTE")))]), count=2, seed=0)
def test_pack_external_of_mixed_types_converts_each_element(spec, count, seed):
    t = dtgen.build(spec, D).Commit()
    if len(flatten.typemap(t)) * count > 120:
        return  # the reference converts element by element
    src, base, tm = _frame(t, count, seed)
    ours = plan.external32_pack(memoryview(src), -base, t, count)
    assert bytes(ours) == _ext32_reference(t, count, src, base)
    assert len(ours) == t.Pack_external_size("external32", count)
    if len(set(tm)) != len(tm):
        return  # overlapping elements: unpacking them is erroneous
    back = np.full_like(src, GUARD)
    plan.external32_unpack(bytes(ours), memoryview(back), -base, t, count)
    again = plan.external32_pack(memoryview(back), -base, t, count)
    assert bytes(again) == bytes(ours)


def test_external32_values():
    a = np.array([1, -1, 2**40 + 5], dtype=np.int64)
    out = bytearray(12)
    assert D.LONG.Pack_external("external32", a, out, 0) == 12
    assert out.hex() == "00000001ffffffff00000005"  # 4-byte LONG, low bits as MPICH
    back = np.zeros(3, np.int64)
    D.LONG.Unpack_external("external32", out, 0, back)
    assert back.tolist() == [1, -1, 5]
    ld = np.array([1.0, -2.5], dtype=np.longdouble)
    out = bytearray(32)
    D.LONG_DOUBLE.Pack_external("external32", ld, out, 0)
    assert out.hex() == "3fff" + "00" * 14 + "c0004" + "0" * 27
    back = np.zeros(2, np.longdouble)
    D.LONG_DOUBLE.Unpack_external("external32", out, 0, back)
    assert back.tolist() == [1.0, -2.5]
    pair = np.zeros(1, dtype=np.dtype([("v", "f8"), ("i", "i4")], align=True))
    pair["v"], pair["i"] = 1.5, 7
    out = bytearray(D.DOUBLE_INT.Pack_external_size("external32", 1))
    assert len(out) == 12  # a double and an int; MPICH reports 1 here
    D.DOUBLE_INT.Pack_external("external32", pair, out, 0)
    assert out.hex() == "3ff8000000000000" + "00000007"
    w = np.array([65, 0x1F600], dtype=np.uint32)
    out = bytearray(4)
    D.WCHAR.Pack_external("external32", w, out, 0)
    assert out.hex() == "0041f600"


def test_pack_errors():
    v = D.DOUBLE.Create_vector(2, 1, 2)
    buf = bytearray(64)
    for call in (lambda: v.Pack(buf, bytearray(64), 0, COMM), lambda: v.Pack_size(1, COMM),
                 lambda: v.Unpack(bytearray(64), 0, buf, COMM),
                 lambda: v.Pack_external("external32", buf, bytearray(64), 0)):
        with pytest.raises(MPIException) as info:
            call()
        assert info.value.Get_error_class() == ERR_TYPE and "not been committed" in str(info.value)
    assert v.Pack_external_size("external32", 2) == 32  # MPICH does not ask for a commit here
    v.Commit()
    checks = [
        (lambda: v.Pack(buf, bytearray(4), 0, COMM), ERR_TRUNCATE),
        (lambda: v.Pack(buf, bytearray(64), -1, COMM), ERR_ARG),
        (lambda: v.Unpack(bytearray(8), 0, buf, COMM), ERR_TRUNCATE),
        (lambda: v.Pack_size(-1, COMM), ERR_COUNT),
        (lambda: v.Pack_external("native", buf, bytearray(64), 0), ERR_UNSUPPORTED_DATAREP),
        (lambda: v.Pack_external_size("internal", 1), ERR_UNSUPPORTED_DATAREP),
        (lambda: v.Pack(buf, bytearray(64), 0, _NullComm()), ERR_COMM),
        (lambda: D.DATATYPE_NULL.Pack(buf, bytearray(64), 0, COMM), ERR_TYPE),
    ]
    for call, cls in checks:
        with pytest.raises(MPIException) as info:
            call()
        assert info.value.Get_error_class() == cls, (cls, str(info.value))
    with pytest.raises(TypeError, match="comm must be a Comm"):
        v.Pack(buf, bytearray(64), 0, None)
    with pytest.raises(ZeroDivisionError):
        D.DOUBLE.Create_resized(0, 0).Commit().Pack(buf, bytearray(64), 0, COMM)
    below = D.DOUBLE.Create_hindexed([1], [-8]).Create_resized(0, 16).Commit()  # reaches 8 bytes below
    with pytest.raises(ValueError, match="inbuf too small"):
        below.Pack(bytearray(32), bytearray(64), 0, COMM)
    with pytest.raises(ValueError, match="outbuf too small"):
        below.Unpack(bytearray(64), 0, bytearray(32), COMM)
    with pytest.raises(MPIException) as info:
        D.DOUBLE.Create_resized(0, -8).Commit().Pack(buf, bytearray(64), 0, COMM)
    assert info.value.Get_error_class() == ERR_COUNT

    class DeviceView:
        kind = "device"

    with pytest.raises(MPIException) as info:
        plan._host_mem(DeviceView(), "inbuf", "Datatype.Pack")
    assert info.value.Get_error_class() == ERR_BUFFER


class _NullComm(_Comm):
    def __bool__(self):
        return False


def test_plans_are_cached_and_pick_the_right_copy():
    c = D.DOUBLE.Create_contiguous(4).Commit()
    p = plan.plan_for(c, 3)
    assert p.kind == "contig" and p is plan.plan_for(c, 3) and p._index is None
    v = D.DOUBLE.Create_vector(100, 2, 5).Commit()
    assert plan.plan_for(v, 1).kind == "strided" and plan.plan_for(v, 1).shape == (100, 16)
    assert plan.plan_for(v, 2).kind == "gather"  # element 0's last block runs into element 1's first
    w = v.Create_resized(0, 4000).Commit()
    assert plan.plan_for(w, 3).shape == (300, 16) and plan.plan_for(w, 3).strides == (40,)
    s = Datatype.Create_struct([1, 1], [0, 8], [D.INT, D.DOUBLE]).Commit()
    g = plan.plan_for(s, 5)
    assert g.kind == "gather" and g.word == 4
    src = np.arange(5 * 16, dtype=np.uint8)
    plan.pack(memoryview(src), 0, s, 5)
    assert g._index is not None and g._index.dtype == np.intp
    four = D.BYTE.Create_vector(2, 1, 2).Create_resized(0, 5).Create_subarray([3, 3, 3], [2, 2, 2], [0, 0, 0])
    assert plan.plan_for(four.Commit(), 1).kind == "strided"  # any number of grid dimensions
    for count in range(40):
        plan.plan_for(v, count)
    assert len(v._rec.cache["plans"]) <= 16
    with pytest.raises(ValueError, match="memory does not cover"):
        plan.pack(memoryview(bytearray(10)), 0, v, 1)


def test_elements_in_partial_pair_types():
    assert plan.elements_in(D.DOUBLE_INT, 12) == 2
    assert plan.elements_in(D.SHORT_INT, 8) == 3
    assert plan.elements_in(D.DOUBLE, 10) == UNDEFINED
