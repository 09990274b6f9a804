"""MPI.Op: creation, freeing, handles, queries, calls on Python objects, Reduce_local, and the
element-wise extension, on host and simulated device memory (expectations from NumPy)."""

import os
import pickle

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before anything imports numba.cuda

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from gpumpi import MPI  # noqa: E402
from gpumpi.op import check_op, reduce_packed, reduce_unit  # noqa: E402
from gpumpi.testing import SimDeviceArray  # noqa: E402

PREDEFINED = [MPI.MAX, MPI.MIN, MPI.SUM, MPI.PROD, MPI.LAND, MPI.BAND, MPI.LOR, MPI.BOR, MPI.LXOR, MPI.BXOR,
              MPI.MAXLOC, MPI.MINLOC, MPI.REPLACE, MPI.NO_OP]


def mysum(a, b, dt):
    x = np.frombuffer(a, dt.np if dt is not None else "i4")
    y = np.frombuffer(b, x.dtype)
    y += x


def lefty(a, b, dt):
    """Non-commutative: inout = 2*in + inout (so the order of the operands shows)."""
    x = np.frombuffer(a, "f8")
    y = np.frombuffer(b, "f8")
    y[:] = 2 * x + y


def halfsum(a, b):
    return a + b / 2


@pytest.fixture(autouse=True)
def _free_user_ops():
    yield
    from gpumpi import op as opmod

    assert all(s is None for s in opmod._slots[1:]), "a test left user ops alive"


def test_constructor_and_predefined_queries():
    op = MPI.Op()
    assert not op and op == MPI.OP_NULL and op.is_predefined
    for p in PREDEFINED:
        assert p and p.is_predefined and MPI.Op(p) == p
    assert all(p.Is_commutative() == p.is_commutative for p in PREDEFINED)
    assert MPI.SUM.is_commutative and not MPI.REPLACE.Is_commutative()
    with pytest.raises(MPI.Exception) as info:
        MPI.OP_NULL.Is_commutative()
    assert info.value.Get_error_class() == MPI.ERR_OP


def test_create_free_and_handles():
    op = MPI.Op.Create(mysum, True)
    other = MPI.Op.Create(mysum, False)
    assert op and not op.is_predefined and op.Is_commutative() and not other.is_commutative
    assert op != other and op.handle != other.handle and op.toint() != MPI.SUM.toint()
    assert MPI.Op.fromhandle(op.handle) == op and MPI.Op.f2py(op.py2f()) == op
    copy = MPI.Op(op)
    op.Free()
    assert op == MPI.OP_NULL and not op
    with pytest.raises(MPI.Exception) as info:
        copy.Is_commutative()  # a reference to the freed handle
    assert info.value.Get_error_class() == MPI.ERR_OP
    with pytest.raises(MPI.Exception):
        op.Free()  # OP_NULL
    with pytest.raises(MPI.Exception) as info:
        MPI.SUM.Free()
    assert info.value.Get_error_class() == MPI.ERR_OP and "SUM" in str(info.value)
    other.free()
    assert not other
    with pytest.raises(AttributeError):
        MPI.Op.Create(42)


def test_registry_holds_32_user_ops():
    ops = [MPI.Op.Create(mysum) for _ in range(32)]
    with pytest.raises(RuntimeError):
        MPI.Op.Create(mysum)
    ops[5].Free()
    ops[5] = MPI.Op.Create_elementwise(halfsum)
    for o in ops:
        o.Free()


def test_call_on_python_objects():
    assert MPI.MIN(2, 3) == 2 and MPI.MAX(2, 3) == 3 and MPI.SUM(2, 3) == 5 and MPI.PROD(2, 3) == 6
    assert MPI.LAND(1, 0) is False and MPI.LOR(0, 2) is True and MPI.LXOR(1, 1) is False
    assert (MPI.BAND(6, 3), MPI.BOR(6, 3), MPI.BXOR(6, 3)) == (2, 7, 5)
    assert MPI.REPLACE(2, 3) == 3 and MPI.NO_OP(2, 3) == 2
    assert MPI.MAXLOC((1, 5), (1, 2)) == (1, 2) and MPI.MINLOC((0, 5), (1, 2)) == (0, 5)
    x = [1]
    assert MPI.MAX(x, [1]) is x
    with pytest.raises(TypeError):
        MPI.OP_NULL()
    with pytest.raises(ValueError):
        MPI.OP_NULL(None, None)
    op = MPI.Op.Create(lambda a, b, dt: (a, b, dt))
    assert op(1, 2) == (1, 2, None)
    with pytest.raises(ValueError):
        MPI.Op.fromhandle(op.handle)(1, 2)  # as mpi4py: fromhandle does not carry the function
    op.Free()
    e = MPI.Op.Create_elementwise(halfsum)
    assert e(1.0, 4.0) == 3.0
    e.Free()


def test_pickling():
    for p in PREDEFINED + [MPI.OP_NULL]:
        assert pickle.loads(pickle.dumps(p)) is p
        c = pickle.loads(pickle.dumps(MPI.Op(p)))
        assert c == p and c is not p
    for commute in (True, False):
        op = MPI.Op.Create(mysum, commute)
        clone = pickle.loads(pickle.dumps(op))
        assert clone != op and clone.Is_commutative() == commute
        a, b = np.arange(3, dtype="i4"), np.ones(3, dtype="i4")
        clone(a, b)
        assert list(b) == [1, 2, 3]
        with pytest.raises(ValueError):
            MPI.Op.fromint(op.toint()).__reduce__()
        op.Free()
        clone.Free()


# -- Reduce_local ----------------------------------------------------------------------------------


@pytest.mark.parametrize("typecode", ["i", "l", "f", "d", "g", "F", "D", "b", "H"])
def test_reduce_local_predefined(typecode):
    for op, ref in ((MPI.SUM, np.add), (MPI.PROD, np.multiply), (MPI.MAX, np.maximum), (MPI.MIN, np.minimum)):
        if typecode in "FD" and op in (MPI.MAX, MPI.MIN):
            with pytest.raises(MPI.Exception):
                op.Reduce_local(np.ones(3, typecode), np.ones(3, typecode))
            continue
        s = np.arange(1, 6).astype(typecode)
        r = np.arange(5).astype(typecode)
        want = ref(s, r)
        op.Reduce_local(s, r)
        assert np.array_equal(r, want)


def test_reduce_local_errors():
    s, r = np.arange(3, dtype="i4"), np.arange(3, dtype="i4")
    with pytest.raises(ValueError, match="count"):
        MPI.SUM.Reduce_local([s, 2, MPI.INT], [r, 3, MPI.INT])
    with pytest.raises(ValueError, match="datatypes"):
        MPI.SUM.Reduce_local([s, 1, MPI.INT], [r, 1, MPI.SHORT])
    with pytest.raises(MPI.Exception) as info:
        MPI.OP_NULL.Reduce_local(s, r)
    assert info.value.Get_error_class() == MPI.ERR_OP
    with pytest.raises(MPI.Exception) as info:
        MPI.SUM.Reduce_local(MPI.IN_PLACE, r)
    assert info.value.Get_error_class() == MPI.ERR_BUFFER
    with pytest.raises(MPI.Exception) as info:
        MPI.MAXLOC.Reduce_local(s, r)
    assert info.value.Get_error_class() == MPI.ERR_OP
    with pytest.raises(BufferError):
        MPI.SUM.Reduce_local(s, r.view().setflags(write=False) or np.frombuffer(bytes(12), "i4"))
    assert list(r) == [0, 1, 2]


def test_reduce_local_user_ops_and_noncontiguous_types():
    # mpi4py's testCreateMany: BYTE with a Python function on bytearrays
    def mybor(a, b, dt):
        assert dt == MPI.BYTE and len(a) == len(b)
        for i in range(len(a)):
            b[i] = a[i] | b[i]

    op = MPI.Op.Create(mybor)
    b1, b2 = bytearray([2] * 3), bytearray([4] * 3)
    op.Reduce_local([b1, MPI.BYTE], [b2, MPI.BYTE])
    assert list(b2) == [6, 6, 6] and list(b1) == [2, 2, 2]
    op.Free()
    # a user op on a strided type sees the data in the type's layout, holes untouched
    vec = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
    seen = []

    def vsum(a, b, dt):
        seen.append((len(a), dt == vec))
        x = np.frombuffer(a, "f8")
        y = np.frombuffer(b, "f8")
        y += x  # holes included: they are not the user's memory

    op = MPI.Op.Create(vsum)
    s = np.arange(8.0)
    r = np.full(8, 10.0)
    op.Reduce_local([s, 2, vec], [r, 2, vec])
    assert seen == [(2 * vec.extent, True)]
    # two items of extent 3 doubles: elements at 0, 2 and 3, 5
    assert list(r) == [10, 10, 12, 13, 10, 15, 10, 10]
    # and predefined ops on the same type reduce element-wise, holes untouched
    MPI.SUM.Reduce_local([s, 2, vec], [r, 2, vec])
    assert list(r) == [10, 10, 14, 16, 10, 20, 10, 10]
    op.Free()
    vec.Free()


def test_non_commutative_user_op_takes_in_as_left():
    op = MPI.Op.Create(lefty, commute=False)
    a, b = np.array([1.0, 2.0]), np.array([10.0, 20.0])
    reduce_packed(op, MPI.DOUBLE, 2, a.view(np.uint8), b.view(np.uint8), "host")
    assert list(b) == [12.0, 24.0]
    assert reduce_unit(op, MPI.DOUBLE) == (8, 1)
    op.Free()


def test_reduce_local_on_sim_memory():
    s = SimDeviceArray.from_numpy(np.arange(1, 6, dtype="f8"))
    r = SimDeviceArray.from_numpy(np.arange(5, dtype="f8"))
    MPI.PROD.Reduce_local(s, r)
    assert np.array_equal(r.get(), np.arange(5) * np.arange(1, 6))
    # host in, device inout; and a strided type on the device
    MPI.SUM.Reduce_local(np.ones(5), r)
    assert np.array_equal(r.get(), np.arange(5) * np.arange(1, 6) + 1)
    vec = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
    d = SimDeviceArray.from_numpy(np.zeros(4))
    MPI.SUM.Reduce_local([np.arange(4.0), 1, vec], [d, 1, vec])
    assert list(d.get()) == [0.0, 0.0, 2.0, 0.0]
    vec.Free()
    # a Python user function on device data runs on host copies
    op = MPI.Op.Create(lefty)
    a = SimDeviceArray.from_numpy(np.array([1.0, 2.0]))
    b = SimDeviceArray.from_numpy(np.array([10.0, 20.0]))
    op.Reduce_local(a, b)
    assert list(b.get()) == [12.0, 24.0]
    op.Free()


# -- the element-wise extension ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["host", "sim"])
def test_elementwise(kind):
    op = MPI.Op.Create_elementwise(halfsum)
    check_op(op, MPI.DOUBLE, "x")
    vec = MPI.FLOAT.Create_contiguous(3).Commit()
    assert reduce_unit(op, vec) == (4, 3)
    for dt, npdt in ((MPI.DOUBLE, "f8"), (vec, "f4"), (MPI.INT, "i4")):
        a = np.arange(12).astype(npdt)
        b = (np.arange(12) * 4).astype(npdt)
        want = np.array([halfsum(x, y) for x, y in zip(a, b)]).astype(npdt)
        n = 12 if dt is not vec else 4
        units = reduce_unit(op, dt)[1] * n
        if kind == "host":
            reduce_packed(op, dt, units, a.view(np.uint8), b.view(np.uint8), "host")
            got = b
        else:
            da, db = SimDeviceArray.from_numpy(a), SimDeviceArray.from_numpy(b)
            reduce_packed(op, dt, units, da.ptr, db.ptr, "sim")
            got = db.get()
        assert np.array_equal(got, want), (dt, got, want)
    with pytest.raises(MPI.Exception) as info:
        check_op(op, MPI.DOUBLE_INT, "x")
    assert info.value.Get_error_class() == MPI.ERR_OP
    s, r = np.arange(4.0), np.ones(4)
    op.Reduce_local(s, r)
    assert list(r) == [0.5, 1.5, 2.5, 3.5]
    op.Free()
    vec.Free()


def test_elementwise_on_sim_runs_the_generated_kernel():
    op = MPI.Op.Create_elementwise(halfsum)
    elem = op._rec.elem

    def no_host(*args):
        raise AssertionError("the generated device kernel should have run")

    elem._host = no_host  # the compiled host loop: must not be used for small sim data
    a = SimDeviceArray.from_numpy(np.arange(6.0))
    b = SimDeviceArray.from_numpy(np.full(6, 2.0))
    reduce_packed(op, MPI.DOUBLE, 6, a.ptr, b.ptr, "sim")
    assert list(b.get()) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    op.Free()


def test_reduce_local_device_in_host_inout():
    vec = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
    s = SimDeviceArray.from_numpy(np.arange(6.0))
    r = np.full(6, 1.0)
    MPI.SUM.Reduce_local([s, 2, vec], [r, 2, vec])
    assert list(r) == [1.0, 1.0, 3.0, 4.0, 1.0, 6.0]
    MPI.MAX.Reduce_local(SimDeviceArray.from_numpy(np.arange(6.0)), r)
    assert list(r) == [1.0, 1.0, 3.0, 4.0, 4.0, 6.0]
    vec.Free()
