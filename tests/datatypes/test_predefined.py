"""Predefined datatypes and the Datatype basics, checked against mpi4py on MPICH."""

import pickle
import subprocess
import sys

import pytest

from gpumpi import datatypes as D
from gpumpi.constants import COMBINER_CONTIGUOUS, COMBINER_DUP, COMBINER_NAMED
from gpumpi.datatypes import DATATYPE_NULL, Datatype
from gpumpi.errors import ERR_COUNT, ERR_TYPE
from gpumpi.errors import Exception as MPIException

MPI = pytest.importorskip("mpi4py.MPI")

MPI_NAMES = sorted(n for n in dir(MPI) if isinstance(getattr(MPI, n), MPI.Datatype))
NAMED = [n for n in MPI_NAMES if getattr(MPI, n)]
NULL = [n for n in MPI_NAMES if not getattr(MPI, n)]
LAYOUT = ("size", "lb", "extent", "ub", "true_lb", "true_extent", "true_ub", "typestr", "typechar", "name",
          "is_named", "is_predefined", "combiner", "handle")


def _tocode(t):
    try:
        return t.tocode()
    except ValueError:
        return None


def test_every_mpi4py_datatype_name_exists():
    assert [n for n in MPI_NAMES if not hasattr(D, n)] == []
    assert set(MPI_NAMES) <= set(D.PREDEFINED_NAMES)


@pytest.mark.parametrize("name", NAMED)
def test_layout_and_names_match_mpi4py(name):
    ours, ref = getattr(D, name), getattr(MPI, name)
    assert {a: getattr(ours, a) for a in LAYOUT} == {a: getattr(ref, a) for a in LAYOUT}
    assert ours.Get_size() == ref.Get_size()
    assert ours.Get_extent() == ref.Get_extent()
    assert ours.Get_true_extent() == ref.Get_true_extent()
    assert ours.Get_name() == ref.Get_name()
    assert ours.Get_envelope() == ref.Get_envelope() == (0, 0, 0, 0, COMBINER_NAMED)
    assert _tocode(ours) == _tocode(ref)
    assert ours.toint() == ref.toint() and ours.py2f() == ref.py2f()
    assert ours._align == MPI._typealign(ref)
    assert ours.decode() == (ours, "NAMED", {})
    assert ours.Is_named() and ours.Is_predefined() and ours.committed


@pytest.mark.parametrize("name", NULL)
def test_names_mpich_lacks_are_datatype_null(name):
    assert getattr(D, name) is DATATYPE_NULL
    assert not getattr(D, name)


def test_pair_type_layouts():
    # DOUBLE_INT: double at 0, int at 8 -> size 12, extent 16; SHORT_INT has a hole
    assert (D.DOUBLE_INT.size, D.DOUBLE_INT.extent, D.DOUBLE_INT.true_extent) == (12, 16, 12)
    assert D.DOUBLE_INT.segments == ((0, 12),) and not D.DOUBLE_INT.is_contiguous
    assert D.SHORT_INT.segments == ((0, 2), (4, 4)) and not D.SHORT_INT.is_contiguous
    assert D.FLOAT_INT.is_contiguous and D.TWOINT is D.INT_INT
    for name in ("FLOAT_INT", "DOUBLE_INT", "LONG_INT", "INT_INT", "SHORT_INT", "LONG_DOUBLE_INT"):
        t = getattr(D, name)
        npd = t.np
        assert npd.itemsize == t.extent
        assert npd.names == ("f0", "f1")
        off = npd.fields["f1"][1]
        assert off + 4 == t.true_extent  # the int comes last and ends the true extent
        assert npd.fields["f0"][0].itemsize + 4 == t.size


def test_equality_follows_mpi4py_handles():
    for a in MPI_NAMES:
        for b in MPI_NAMES:
            assert (getattr(D, a) == getattr(D, b)) == (getattr(MPI, a) == getattr(MPI, b)), (a, b)
    assert D.INT != D.SIGNED_CHAR and D.INT == D.SIGNED_INT
    assert D.INT != 4 and not (D.INT == "i")
    assert len({t.handle for t in (D.INT, D.SIGNED_INT, D.INT32_T)}) == 2


def test_datatypes_are_unhashable_as_in_mpi4py():
    for t in (D.FLOAT, D.DATATYPE_NULL, D.INT_INT, D.INT.Create_contiguous(2), D.Datatype(D.DOUBLE)):
        with pytest.raises(TypeError, match="unhashable"):
            hash(t)
    with pytest.raises(TypeError):
        {D.INT}  # noqa: B018
    assert D.FLOAT32_T in [D.FLOAT] and D.INT not in [D.FLOAT]  # equality still goes by handle


def test_typecode_and_typealign_match_mpi4py():
    # MPI._typecode / MPI._typealign: the private helpers mpi4py.util.dtlib is built on
    from gpumpi import MPI as G

    def kinds(M):
        base = [getattr(M, n) for n in MPI_NAMES]
        return [*base, *(t.Dup() for t in base if t), M.INT.Dup().Dup(), M.INT.Create_contiguous(2),
                M.DOUBLE_INT.Dup(), M.Datatype.Create_struct([1, 1], [0, 8], [M.INT, M.DOUBLE]),
                M.Datatype.Create_f90_integer(3), M.Datatype.Create_f90_real(15, 300),
                M.Datatype.Create_f90_complex(6, 30), M.INT.Create_resized(0, 8), M.Datatype.Match_size(
                    M.TYPECLASS_REAL, 2)]

    ours, ref = kinds(G), kinds(MPI)
    assert [G._typecode(t) for t in ours] == [MPI._typecode(t) for t in ref]
    assert [G._typealign(t) for t in ours] == [MPI._typealign(t) for t in ref]
    t = G.INT.Dup()
    t.Free()
    assert G._typecode(t) is None and G._typealign(t) is None
    with pytest.raises(TypeError, match="_typecode: expecting a Datatype"):
        G._typecode("i")


def test_typedicts_match_mpi4py():
    for ours, ref in ((D.TypeDict, MPI._typedict), (D.TypeDictC, MPI._typedict_c), (D.TypeDictF, MPI._typedict_f)):
        assert ours.keys() == ref.keys()
        assert {k: v.handle for k, v in ours.items()} == {k: v.handle for k, v in ref.items()}


@pytest.mark.parametrize("code", sorted(MPI._typedict))
def test_fromcode_matches_mpi4py(code):
    assert Datatype.fromcode(code).handle == MPI.Datatype.fromcode(code).handle


def test_typecode_lookups():
    assert D.lookup_typecode("<f8") is D.DOUBLE
    assert D.lookup_typecode("=i4") is D.INT32_T
    assert D.lookup_typecode("|u1") is D.UINT8_T
    assert D.lookup_typecode("d") is D.DOUBLE
    with pytest.raises(KeyError, match=r"Send: cannot map '>f8' to MPI datatype"):
        D.lookup_typecode(">f8", "Send")
    with pytest.raises(KeyError, match="cannot map 'zz' to MPI datatype"):
        D.lookup_typecode("zz")
    with pytest.raises(ValueError, match="cannot map code 'zz' to MPI datatype"):
        Datatype.fromcode("zz")
    with pytest.raises(ValueError, match="cannot map to character code"):
        D.DOUBLE_INT.tocode()


def test_lookup_format_follows_getdatatype():
    assert D.lookup_format("B") is D.BYTE  # the byte format is BYTE, not UNSIGNED_CHAR
    assert D.lookup_format("<B") is D.UNSIGNED_CHAR
    assert D.lookup_format("@d") is D.DOUBLE and D.lookup_format("<d") is D.DOUBLE
    assert D.lookup_format("Zd") is D.C_DOUBLE_COMPLEX and D.lookup_format("w") is D.WCHAR
    with pytest.raises(BufferError, match=r"Recv: format string '>d' with non-native byte order"):
        D.lookup_format(">d", "Recv")
    with pytest.raises(KeyError, match="cannot map 'T{i:f0:}' to MPI datatype"):
        D.lookup_format("T{i:f0:}")


def _raises_type_error(fn, what=""):
    with pytest.raises(MPIException) as info:
        fn()
    assert info.value.Get_error_class() == ERR_TYPE
    assert what in str(info.value)


def test_datatype_null_behaviour_matches_mpich():
    null = DATATYPE_NULL
    assert not null and null == MPI_null_like() and repr(null) == "<Datatype MPI_DATATYPE_NULL>"
    assert null.Get_name() == "MPI_DATATYPE_NULL" == MPI.DATATYPE_NULL.Get_name()
    assert null.typestr == "" and null.typechar == ""
    assert null.is_predefined is MPI.DATATYPE_NULL.is_predefined is True
    for op in (null.Get_size, null.Get_extent, null.Get_true_extent, null.Dup, null.Commit, null.Free,
               null.Get_envelope, null.Get_contents, null.decode, lambda: null.size, lambda: null.extent,
               lambda: null.is_named, lambda: null.combiner, lambda: null.Create_contiguous(2),
               lambda: null.Set_name("x")):
        _raises_type_error(op, "MPI_DATATYPE_NULL")
    null.free()  # safe free does nothing
    with pytest.raises(ValueError, match="cannot map to character code or type string"):
        null.tocode()  # mpi4py: a ValueError, not an MPI error


def MPI_null_like():
    return Datatype()


def test_predefined_commit_free_and_names():
    assert D.INT.Commit() is D.INT
    _raises_type_error(D.INT.Free, "cannot free a predefined datatype (MPI_INT)")
    D.INT.free()  # safe free leaves predefined types alone
    assert D.INT.size == 4
    try:
        D.INT.Set_name("my int")  # MPICH lets predefined types be renamed
        assert D.INT.name == "my int" and D.SIGNED_INT.name == "my int"
    finally:
        D.INT.name = "MPI_INT"
    with pytest.raises(MPIException) as info:
        D.INT.Get_contents()
    assert info.value.Get_error_class() == ERR_TYPE


def test_dup_matches_mpi4py():
    for name in ("INT", "DOUBLE_INT", "C_BOOL", "LONG_LONG"):
        ours, ref = getattr(D, name).Dup(), getattr(MPI, name).Dup()
        try:
            layout = ("size", "lb", "extent", "true_lb", "true_extent", "typestr", "typechar", "name",
                      "is_named", "is_predefined", "combiner")
            assert {a: getattr(ours, a) for a in layout} == {a: getattr(ref, a) for a in layout}
            assert ours.Get_envelope() == ref.Get_envelope() == (0, 0, 0, 1, COMBINER_DUP)
            assert _tocode(ours) == _tocode(ref)
            assert ours != getattr(D, name) and ours.Get_contents() == ([], [], [], [getattr(D, name)])
            assert ours.decode() == (getattr(D, name), "DUP", {})
            assert ours.Dup().typestr == ours.typestr
        finally:
            ref.Free()


@pytest.mark.parametrize("name,count", [("INT", 4), ("INT", 0), ("DOUBLE_INT", 3), ("SHORT_INT", 3),
                                        ("BYTE", 7), ("LONG_DOUBLE_INT", 2)])
def test_create_contiguous_matches_mpi4py(name, count):
    ours, ref = getattr(D, name).Create_contiguous(count), getattr(MPI, name).Create_contiguous(count)
    try:
        layout = ("size", "lb", "extent", "true_lb", "true_extent", "typestr", "typechar", "name", "is_named",
                  "is_predefined", "combiner")
        assert {a: getattr(ours, a) for a in layout} == {a: getattr(ref, a) for a in layout}
        assert ours.Get_envelope() == ref.Get_envelope() == (0, 0, 1, 1, COMBINER_CONTIGUOUS)
        assert ours.Get_contents() == ([], [], [count], [getattr(D, name)])
        assert ours.decode() == (getattr(D, name), "CONTIGUOUS", {"count": count})
        with pytest.raises(ValueError):
            ours.tocode()
    finally:
        ref.Free()


def test_contiguous_layout_details():
    c = D.INT.Create_contiguous(4).Commit()
    assert c.is_contiguous and c.segments == ((0, 16),) and c.basic is D.INT and c.nbasic == 4
    assert c.np.itemsize == 16 and c.np.subdtype[1] == (4,) and c.committed
    s = D.SHORT_INT.Create_contiguous(2)
    assert s.segments == ((0, 2), (4, 6), (12, 4)) and not s.is_contiguous
    assert s.np.itemsize == 16 and s.basic is D.SHORT_INT and s.nbasic == 2
    cc = c.Create_contiguous(3)
    assert (cc.size, cc.extent, cc.segments, cc.nbasic) == (48, 48, ((0, 48),), 12)
    empty = D.DOUBLE.Create_contiguous(0)
    assert empty.is_contiguous and empty.segments == () and empty.size == 0
    assert not c.Is_named() and not c.Is_predefined()
    with pytest.raises(MPIException) as info:
        D.INT.Create_contiguous(-1)
    assert info.value.Get_error_class() == ERR_COUNT and "Create_contiguous" in str(info.value)
    with pytest.raises(TypeError, match="Create_contiguous: count must be an integer"):
        D.INT.Create_contiguous(2.0)


def test_free_derived_and_copies():
    c = D.INT.Create_contiguous(2)
    alias = Datatype(c)
    assert alias == c and alias is not c and alias.handle == c.handle
    c.Set_name("pair of ints")
    assert alias.name == "pair of ints"  # names live with the handle
    c.Free()
    assert c == DATATYPE_NULL and not c
    _raises_type_error(lambda: alias.size, "freed")
    alias.free()  # already freed through another object: nothing to do


def test_handles_and_pickle():
    assert Datatype.fromhandle(MPI.DOUBLE_INT.handle) is D.DOUBLE_INT
    assert Datatype.fromint(D.DOUBLE_INT.toint()) is D.DOUBLE_INT
    assert Datatype.f2py(D.INT.py2f()) is D.INT
    assert pickle.loads(pickle.dumps(D.INT)) is D.INT
    assert pickle.loads(pickle.dumps(DATATYPE_NULL)) is DATATYPE_NULL
    c = D.DOUBLE.Create_contiguous(3)
    assert Datatype.fromhandle(c.handle) == c
    r = pickle.loads(pickle.dumps(c))
    assert (r.size, r.extent, r.combiner, r.Get_contents()[2]) == (24, 24, COMBINER_CONTIGUOUS, [3])
    d = pickle.loads(pickle.dumps(D.INT.Dup()))
    assert d.combiner == COMBINER_DUP and d.Get_contents()[3] == [D.INT]
    with pytest.raises(MPIException):
        Datatype.fromhandle(12345)


def test_value_index_matches_mpi4py():
    for value in ("FLOAT", "DOUBLE", "LONG", "INT", "SHORT", "LONG_DOUBLE", "CHAR"):
        for index in ("INT", "LONG"):
            ours = Datatype.Get_value_index(getattr(D, value), getattr(D, index))
            ref = MPI.Datatype.Get_value_index(getattr(MPI, value), getattr(MPI, index))
            assert ours.handle == ref.handle, (value, index)


def test_numpy_dtypes_of_basic_types():
    import numpy as np

    for name in NAMED:
        t = getattr(D, name)
        assert t.np.itemsize == t.extent, name
    assert D.WCHAR.np == np.dtype("U1") and D.CHAR.np == np.dtype("S1")
    assert D.C_BOOL.np == np.dtype(bool) and D.LONG_DOUBLE.np == np.longdouble
    assert D.C_LONG_DOUBLE_COMPLEX.np == np.clongdouble and D.BYTE.np == np.uint8


def test_set_name_truncates_like_mpich():
    d = D.INT.Dup()
    d.Set_name("x" * 200)
    assert len(d.name) == 127
    with pytest.raises(TypeError):
        d.Set_name(5)


def test_datatypes_import_no_numpy():
    code = "import sys, gpumpi.datatypes as d; d.INT.Create_contiguous(3); assert 'numpy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
