"""Reduction kernels through the executor's interface (``gpumpi.op``: check_op, reduce_unit,
reduce_packed), on host memory and on simulated device memory.

Expectations are computed element by element with Python numbers (a naive reference),
from small operands so that nothing overflows; which (op, type) pairs are defined is
restated here from MPI-4.1 section 6.9.2 and MPICH's extensions, independently of the
table in ``gpumpi.kernels.reduce``.
"""

import numpy as np
import pytest

from gpumpi import MPI
from gpumpi._device import sim_adapter
from gpumpi.op import check_op, reduce_packed, reduce_unit
from gpumpi.testing import SimDeviceArray

# (type name, NumPy dtype of its elements, class); classes as MPI-4.1 6.9.2 (+ MPICH's extras)
TYPES = [
    ("SIGNED_CHAR", "i1", "int"), ("UNSIGNED_CHAR", "u1", "uint"), ("SHORT", "i2", "int"),
    ("UNSIGNED_SHORT", "u2", "uint"), ("INT", "i4", "int"), ("UNSIGNED", "u4", "uint"), ("LONG", "i8", "int"),
    ("UNSIGNED_LONG", "u8", "uint"), ("LONG_LONG", "i8", "int"), ("UNSIGNED_LONG_LONG", "u8", "uint"),
    ("INT8_T", "i1", "int"), ("INT16_T", "i2", "int"), ("INT32_T", "i4", "int"), ("INT64_T", "i8", "int"),
    ("UINT8_T", "u1", "uint"), ("UINT16_T", "u2", "uint"), ("UINT32_T", "u4", "uint"), ("UINT64_T", "u8", "uint"),
    ("CHAR", "i1", "int"), ("INTEGER", "i4", "fint"), ("AINT", "i8", "int"), ("OFFSET", "i8", "int"),
    ("COUNT", "i8", "int"), ("INTEGER1", "i1", "fint"), ("INTEGER8", "i8", "fint"),
    ("FLOAT", "f4", "float"), ("DOUBLE", "f8", "float"), ("LONG_DOUBLE", "g", "float"), ("REAL", "f4", "float"),
    ("DOUBLE_PRECISION", "f8", "float"), ("REAL8", "f8", "float"), ("FLOAT16_T", "f2", "float"),
    ("C_BOOL", "?", "bool"), ("CXX_BOOL", "?", "bool"), ("LOGICAL", "i4", "logical"),
    ("C_FLOAT_COMPLEX", "c8", "complex"), ("C_DOUBLE_COMPLEX", "c16", "complex"),
    ("C_LONG_DOUBLE_COMPLEX", "G", "complex"), ("DOUBLE_COMPLEX", "c16", "complex"), ("COMPLEX", "c8", "complex"),
    ("BYTE", "u1", "byte"), ("WCHAR", None, "none"), ("PACKED", None, "none"),
]
# logical operations: C integers and logicals, not Fortran integers nor floating point (MPICH 5
# refuses LAND on INTEGER, INTEGER8, REAL and DOUBLE with ERR_OP; takes AINT, OFFSET, COUNT)
VALID = {
    "MAX": {"int", "uint", "fint", "float"}, "MIN": {"int", "uint", "fint", "float"},
    "SUM": {"int", "uint", "fint", "float", "complex"}, "PROD": {"int", "uint", "fint", "float", "complex"},
    "LAND": {"int", "uint", "bool", "logical"}, "LOR": {"int", "uint", "bool", "logical"},
    "LXOR": {"int", "uint", "bool", "logical"},
    "BAND": {"int", "uint", "fint", "byte"}, "BOR": {"int", "uint", "fint", "byte"},
    "BXOR": {"int", "uint", "fint", "byte"},
    "MAXLOC": set(), "MINLOC": set(),
}
PAIRS = [("FLOAT_INT", "f4"), ("DOUBLE_INT", "f8"), ("LONG_INT", "i8"), ("INT_INT", "i4"), ("SHORT_INT", "i2"),
         ("LONG_DOUBLE_INT", "g")]


def reference(op, x, y):
    """``x op y`` for one element (x the in operand, y the inout), in Python numbers."""
    if op == "SUM":
        return x + y
    if op == "PROD":
        return x * y
    if op == "MAX":
        return max(x, y)
    if op == "MIN":
        return min(x, y)
    if op == "LAND":
        return int(bool(x) and bool(y))
    if op == "LOR":
        return int(bool(x) or bool(y))
    if op == "LXOR":
        return int(bool(x) != bool(y))
    if op == "BAND":
        return int(x) & int(y)
    if op == "BOR":
        return int(x) | int(y)
    if op == "BXOR":
        return int(x) ^ int(y)
    raise AssertionError(op)


def operands(cls, dtype, n, seed):
    rng = np.random.default_rng(seed)
    if cls == "bool":
        return rng.integers(0, 2, n).astype(dtype)
    if cls in ("uint", "byte"):
        return rng.integers(0, 11, n).astype(dtype)
    if cls == "complex":
        return (rng.integers(-4, 5, n) + 1j * rng.integers(-4, 5, n)).astype(dtype)
    v = rng.integers(-5, 6, n)
    if cls == "logical":
        v = rng.integers(0, 2, n) * rng.integers(1, 3, n)  # Fortran logicals: 0 false, nonzero true
    return v.astype(dtype)


def expected(op, cls, a, b):
    def num(v):
        if cls == "complex":
            return complex(v)
        if cls == "float":
            return float(v)
        return int(v)
    return np.array([reference(op, num(x), num(y)) for x, y in zip(a, b)]).astype(b.dtype)


CASES = [(op, name, dt, cls) for op in VALID for name, dt, cls in TYPES if cls in VALID[op]]
INVALID = [(op, name) for op in VALID for name, _, cls in TYPES if cls not in VALID[op]]


@pytest.fixture
def no_memcpy():
    """Record every memcpy of the simulated adapter: sim reductions must not stage through it."""
    ad = sim_adapter()
    calls = []
    real = ad.memcpy

    def memcpy(dst, src, n, stream=None):
        calls.append((dst, src, n))
        return real(dst, src, n, stream)

    ad.memcpy = memcpy
    yield calls
    del ad.memcpy
    assert not calls, calls


@pytest.mark.parametrize("op,name,dt,cls", CASES, ids=[f"{o}-{n}" for o, n, _, _ in CASES])
def test_predefined_host(op, name, dt, cls):
    datatype = getattr(MPI, name)
    o = getattr(MPI, op)
    check_op(o, datatype, "test")
    a = operands(cls, dt, 37, 1)
    b = operands(cls, dt, 37, 2)
    want = expected(op, cls, a, b)
    unit, per = reduce_unit(o, datatype)
    assert (unit, per) == (np.dtype(dt).itemsize, 1)
    a0 = a.copy()
    reduce_packed(o, datatype, len(a), a.view(np.uint8), b.view(np.uint8), "host")
    assert np.array_equal(b, want)
    assert np.array_equal(a, a0)  # the in operand is never written


@pytest.mark.parametrize("op,name,dt,cls", CASES, ids=[f"{o}-{n}" for o, n, _, _ in CASES])
def test_predefined_sim(op, name, dt, cls, no_memcpy):
    datatype = getattr(MPI, name)
    o = getattr(MPI, op)
    a = operands(cls, dt, 37, 3)
    b = operands(cls, dt, 37, 4)
    want = expected(op, cls, a, b)
    da, db = SimDeviceArray.from_numpy(a), SimDeviceArray.from_numpy(b)
    reduce_packed(o, datatype, len(a), da.ptr, db.ptr, "sim")
    assert np.array_equal(db.get(), want)
    assert np.array_equal(da.get(), a)


@pytest.mark.parametrize("op,name", INVALID, ids=[f"{o}-{n}" for o, n in INVALID])
def test_undefined_combinations_raise_err_op(op, name):
    with pytest.raises(MPI.Exception) as info:
        check_op(getattr(MPI, op), getattr(MPI, name), "Comm.Allreduce")
    assert info.value.Get_error_class() == MPI.ERR_OP
    msg = str(info.value)
    assert op in msg and getattr(MPI, name).Get_name() in msg and msg.startswith("Comm.Allreduce: ")


def test_mpi4py_skip_rules_hold():
    # test_cco_buf's skip_op: MPICH reduces neither bool with arithmetic nor complex with MAX/MIN
    for op in (MPI.SUM, MPI.PROD, MPI.MAX, MPI.MIN):
        with pytest.raises(MPI.Exception):
            check_op(op, MPI.C_BOOL, "x")
    for t in (MPI.C_FLOAT_COMPLEX, MPI.C_DOUBLE_COMPLEX, MPI.C_LONG_DOUBLE_COMPLEX):
        for op in (MPI.MAX, MPI.MIN):
            with pytest.raises(MPI.Exception):
                check_op(op, t, "x")
        check_op(MPI.SUM, t, "x")


def test_check_op_errors():
    with pytest.raises(TypeError):
        check_op("SUM", MPI.INT, "x")
    with pytest.raises(MPI.Exception) as info:
        check_op(MPI.OP_NULL, MPI.INT, "x")
    assert info.value.Get_error_class() == MPI.ERR_OP
    for op in (MPI.SUM, MPI.MAX, MPI.BAND):
        for pair, _ in PAIRS:
            with pytest.raises(MPI.Exception):
                check_op(op, getattr(MPI, pair), "x")
    for t in (MPI.INT, MPI.DOUBLE):
        for op in (MPI.MAXLOC, MPI.MINLOC):
            with pytest.raises(MPI.Exception):
                check_op(op, t, "x")
    mixed = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.DOUBLE, MPI.INT]).Commit()
    with pytest.raises(MPI.Exception):
        check_op(MPI.SUM, mixed, "x")
    check_op(MPI.REPLACE, mixed, "x")
    check_op(MPI.NO_OP, mixed, "x")
    mixed.Free()


# -- pair types ----------------------------------------------------------------------------------------


def packed_pairs(vdt, values, idx):
    vdt = np.dtype(vdt)
    pdt = np.dtype({"names": ["v", "i"], "formats": [vdt, "i4"], "offsets": [0, vdt.itemsize],
                    "itemsize": vdt.itemsize + 4})
    p = np.zeros(len(values), pdt)
    p["v"], p["i"] = values, idx
    return p


def loc_reference(op, a, b):
    out = []
    for (u, i), (v, j) in zip(zip(a["v"], a["i"]), zip(b["v"], b["i"])):
        better = u > v if op == "MAXLOC" else u < v
        if better:
            out.append((u, i))
        elif u == v:
            out.append((v, min(i, j)))
        else:
            out.append((v, j))
    return out


PAIR_CASES = [(op, name, vdt) for op in ("MAXLOC", "MINLOC") for name, vdt in PAIRS]


def pair_operands(vdt, n, seed):
    rng = np.random.default_rng(seed)
    values = rng.integers(-3, 4, n)  # few distinct values: many ties
    return packed_pairs(vdt, values.astype(vdt), rng.integers(0, 50, n))


@pytest.mark.parametrize("op,name,vdt", PAIR_CASES)
@pytest.mark.parametrize("kind", ["host", "sim"])
def test_pairs(op, name, vdt, kind, no_memcpy):
    datatype = getattr(MPI, name)
    o = getattr(MPI, op)
    check_op(o, datatype, "x")
    unit, per = reduce_unit(o, datatype)
    assert (unit, per) == (datatype.size, 1) and unit == np.dtype(vdt).itemsize + 4  # packed: no padding
    a, b = pair_operands(vdt, 41, 5), pair_operands(vdt, 41, 6)
    want = loc_reference(op, a, b)
    if kind == "host":
        reduce_packed(o, datatype, len(a), a.view(np.uint8), b.view(np.uint8), "host")
        got = b
    else:
        da, db = SimDeviceArray.from_numpy(a.view(np.uint8)), SimDeviceArray.from_numpy(b.view(np.uint8))
        reduce_packed(o, datatype, len(a), da.ptr, db.ptr, "sim")
        got = db.get().view(a.dtype)
    assert [(v, i) for v, i in zip(got["v"], got["i"])] == want


@pytest.mark.parametrize("kind", ["host", "sim"])
def test_ties_go_to_the_lower_index(kind, no_memcpy):
    a = packed_pairs("f8", [1.0, 5.0, 5.0, 2.0], [7, 3, 9, 0])
    b = packed_pairs("f8", [1.0, 5.0, 5.0, 2.0], [2, 8, 4, 0])
    for op in (MPI.MAXLOC, MPI.MINLOC):
        x, y = a.copy(), b.copy()
        if kind == "host":
            reduce_packed(op, MPI.DOUBLE_INT, 4, x.view(np.uint8), y.view(np.uint8), "host")
        else:
            dx, dy = SimDeviceArray.from_numpy(x.view(np.uint8)), SimDeviceArray.from_numpy(y.view(np.uint8))
            reduce_packed(op, MPI.DOUBLE_INT, 4, dx.ptr, dy.ptr, "sim")
            y = dy.get().view(a.dtype)
        assert list(y["i"]) == [2, 3, 4, 0]
        assert list(y["v"]) == [1.0, 5.0, 5.0, 2.0]


# -- derived types, REPLACE/NO_OP, sizes ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["host", "sim"])
def test_derived_types_of_one_basic_type(kind, no_memcpy):
    vec = MPI.DOUBLE.Create_vector(3, 2, 5).Commit()
    assert reduce_unit(MPI.SUM, vec) == (8, 6)
    a = np.arange(12, dtype="f8")  # two items, packed
    b = np.ones(12)
    want = a + b
    pairs = MPI.DOUBLE_INT.Create_contiguous(2).Commit()
    assert reduce_unit(MPI.MINLOC, pairs) == (12, 2)
    pa, pb = pair_operands("f8", 6, 7), pair_operands("f8", 6, 8)
    pwant = loc_reference("MINLOC", pa, pb)
    if kind == "host":
        reduce_packed(MPI.SUM, vec, 12, a.view(np.uint8), b.view(np.uint8), "host")
        reduce_packed(MPI.MINLOC, pairs, 6, pa.view(np.uint8), pb.view(np.uint8), "host")
        got, pgot = b, pb
    else:
        da, db = SimDeviceArray.from_numpy(a), SimDeviceArray.from_numpy(b)
        reduce_packed(MPI.SUM, vec, 12, da.ptr, db.ptr, "sim")
        dpa, dpb = SimDeviceArray.from_numpy(pa.view(np.uint8)), SimDeviceArray.from_numpy(pb.view(np.uint8))
        reduce_packed(MPI.MINLOC, pairs, 6, dpa.ptr, dpb.ptr, "sim")
        got, pgot = db.get(), dpb.get().view(pa.dtype)
    assert np.array_equal(got, want)
    assert [(v, i) for v, i in zip(pgot["v"], pgot["i"])] == pwant
    vec.Free()
    pairs.Free()


@pytest.mark.parametrize("kind", ["host", "sim"])
def test_replace_and_no_op(kind, no_memcpy):
    mixed = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.DOUBLE, MPI.SHORT]).Commit()
    for dt in (MPI.INT, mixed, MPI.DOUBLE_INT):
        unit, per = reduce_unit(MPI.REPLACE, dt)
        n = 3 * per
        a = np.arange(n * unit, dtype=np.uint8)
        b = np.full(n * unit, 200, np.uint8)
        for op, want in ((MPI.NO_OP, b.copy()), (MPI.REPLACE, a.copy())):
            if kind == "host":
                reduce_packed(op, dt, n, a, b, "host")
                got = b
            else:
                da, db = SimDeviceArray.from_numpy(a), SimDeviceArray.from_numpy(b)
                reduce_packed(op, dt, n, da.ptr, db.ptr, "sim")
                got = db.get()
            assert np.array_equal(got, want)
    mixed.Free()


@pytest.mark.parametrize("kind", ["host", "sim"])
def test_zero_units(kind, no_memcpy):
    for op, dt in ((MPI.SUM, MPI.DOUBLE), (MPI.MAXLOC, MPI.DOUBLE_INT), (MPI.REPLACE, MPI.INT)):
        if kind == "host":
            reduce_packed(op, dt, 0, np.empty(0, np.uint8), np.empty(0, np.uint8), "host")
        else:
            x = SimDeviceArray(1, "f8")
            reduce_packed(op, dt, 0, x.ptr, x.ptr, "sim")


def test_sim_large_reduction_uses_mapped_memory(no_memcpy):
    from gpumpi.kernels import reduce as K

    n = K.SIM_KERNEL_MAX + 5
    a = np.arange(n, dtype="i8")
    b = np.arange(n, dtype="i8") * 3
    da, db = SimDeviceArray.from_numpy(a), SimDeviceArray.from_numpy(b)
    reduce_packed(MPI.SUM, MPI.LONG, n, da.ptr, db.ptr, "sim")
    assert np.array_equal(db.get(), a * 4)


def test_sim_runs_after_queued_stream_work(no_memcpy):
    # a copy queued on the stream (not yet run) fills the inout operand; the reduction sees it
    ad = sim_adapter()
    del ad.memcpy  # this test queues its own copy
    a = SimDeviceArray.from_numpy(np.ones(8))
    b = SimDeviceArray.from_numpy(np.zeros(8))
    src = np.full(8, 5.0)
    ad.memcpy(b.ptr, src.ctypes.data, 64, ad.current_stream())
    reduce_packed(MPI.SUM, MPI.DOUBLE, 8, a.ptr, b.ptr, "sim")
    assert np.array_equal(b.get(), np.full(8, 6.0))
    ad.memcpy = lambda *args, **kw: no_memcpy.append(args)


def test_misaligned_sim_operands(no_memcpy):
    a = np.arange(9 * 8, dtype=np.uint8)
    b = np.zeros(9 * 8, np.uint8)
    da, db = SimDeviceArray.from_numpy(a), SimDeviceArray.from_numpy(b)
    # 8 doubles starting one byte into each allocation: the kernels must not load them misaligned
    reduce_packed(MPI.SUM, MPI.DOUBLE, 8, da.ptr + 1, db.ptr + 1, "sim")
    want = a[1:65].view("f8") + b[1:65].view("f8")
    assert np.array_equal(db.get()[1:65].view("f8"), want)


def test_host_reduction_is_cached_per_type():
    vec = MPI.INT.Create_contiguous(4).Commit()
    reduce_unit(MPI.SUM, vec)
    assert ("reduce", "SUM") in vec._rec.cache
    vec.Free()


def test_small_sim_reductions_run_the_device_kernels(monkeypatch, no_memcpy):
    from gpumpi.kernels import reduce as K

    red = K.resolve("SUM", MPI.INT, "x")

    def no_host(src, dst):
        raise AssertionError("the simulator kernel should have run")

    monkeypatch.setattr(red, "host", no_host)
    a = SimDeviceArray.from_numpy(np.arange(10, dtype="i4"))
    b = SimDeviceArray.from_numpy(np.arange(10, dtype="i4"))
    reduce_packed(MPI.SUM, MPI.INT, 10, a.ptr, b.ptr, "sim")
    assert np.array_equal(b.get(), np.arange(10) * 2)
    assert K._DEV is not None and K._DEV[1]  # numba.cuda is the simulator here
