"""Tests for gpumpi.info.Info, with mpi4py's ``MPI.Info`` (MPICH) as the oracle.

Each operation sequence is applied to a gpumpi Info and an mpi4py Info and the
observable results (returned values, keys in order, raised exception type and
MPI error class) are compared.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumpi.constants import MAX_INFO_KEY, MAX_INFO_VAL
from gpumpi.errors import ERR_INFO, ERR_INFO_KEY, ERR_INFO_NOKEY, ERR_INFO_VALUE
from gpumpi.errors import Exception as MPIException
from gpumpi.info import INFO_ENV, INFO_NULL, Info

MPI = pytest.importorskip("mpi4py.MPI")


def outcome(fn):
    """('ok', value) or ('err', exception kind, MPI error class or None)."""
    try:
        return ("ok", fn())
    except KeyError:
        return ("err", "KeyError", None)
    except (MPIException, MPI.Exception) as e:
        return ("err", "MPI", e.Get_error_class())
    except TypeError:
        return ("err", "TypeError", None)


def state(i):
    return ("null",) if not i else (i.Get_nkeys(), [i.Get_nthkey(n) for n in range(i.Get_nkeys())], i.items())


# --- constants --------------------------------------------------------------------------


def test_limits_match_mpich():
    assert MAX_INFO_KEY == MPI.MAX_INFO_KEY
    assert MAX_INFO_VAL == MPI.MAX_INFO_VAL


# --- random operation sequences ---------------------------------------------------------

keys = st.sampled_from(["a", "b", "c", "host", "x_y", "k" * 10])
vals = st.text(alphabet="abcxyz019 =,", max_size=12)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("Set"), keys, vals),
        st.tuples(st.just("Get"), keys),
        st.tuples(st.just("Delete"), keys),
        st.tuples(st.just("Get_nkeys")),
        st.tuples(st.just("Get_nthkey"), st.integers(-1, 7)),
        st.tuples(st.just("getitem"), keys),
        st.tuples(st.just("setitem"), keys, vals),
        st.tuples(st.just("delitem"), keys),
        st.tuples(st.just("contains"), keys),
        st.tuples(st.just("get"), keys),
        st.tuples(st.just("pop"), keys),
        st.tuples(st.just("pop_default"), keys),
        st.tuples(st.just("len")),
        st.tuples(st.just("iter")),
        st.tuples(st.just("keys")),
        st.tuples(st.just("values")),
        st.tuples(st.just("items")),
        st.tuples(st.just("update"), st.dictionaries(keys, vals, max_size=3)),
        st.tuples(st.just("dup")),
    ),
    max_size=25,
)


def apply(info, op):
    name, *args = op
    if name == "Set":
        return outcome(lambda: info.Set(*args))
    if name == "Get":
        return outcome(lambda: info.Get(*args))
    if name == "Delete":
        return outcome(lambda: info.Delete(*args))
    if name == "Get_nkeys":
        return outcome(info.Get_nkeys)
    if name == "Get_nthkey":
        return outcome(lambda: info.Get_nthkey(*args))
    if name == "getitem":
        return outcome(lambda: info[args[0]])
    if name == "setitem":
        return outcome(lambda: info.__setitem__(*args))
    if name == "delitem":
        return outcome(lambda: info.__delitem__(*args))
    if name == "contains":
        return outcome(lambda: args[0] in info)
    if name == "get":
        return outcome(lambda: info.get(args[0], "DEFAULT"))
    if name == "pop":
        return outcome(lambda: info.pop(args[0]))
    if name == "pop_default":
        return outcome(lambda: info.pop(args[0], "DEFAULT"))
    if name == "len":
        return outcome(lambda: len(info))
    if name == "iter":
        return outcome(lambda: list(info))
    if name == "keys":
        return outcome(lambda: list(info.keys()))
    if name == "values":
        return outcome(lambda: list(info.values()))
    if name == "items":
        return outcome(lambda: list(info.items()))
    if name == "update":
        return outcome(lambda: info.update(args[0]))
    if name == "dup":
        return outcome(lambda: info.Dup().items())
    raise AssertionError(name)


def _nthkey_out_of_range(op, info):
    return op[0] == "Get_nthkey" and not 0 <= op[1] < info.Get_nkeys()


def _missing_del(op, info):
    return op[0] == "delitem" and op[1] not in info


@settings(max_examples=150, deadline=None)
@given(ops)
def test_operation_sequences_match_mpi4py(seq):
    g, m = Info.Create(), MPI.Info.Create()
    try:
        for op in seq:
            # two known divergences have their own tests below; keep this property
            # focused on everything else
            if _nthkey_out_of_range(op, m) or _missing_del(op, m):
                continue
            assert apply(g, op) == apply(m, op), op
            assert state(g) == state(m)
    finally:
        m.Free()


# --- explicit behaviour -----------------------------------------------------------------


def test_set_get_overwrite_keeps_position():
    i = Info.Create()
    i.Set("a", "1")
    i.Set("b", "2")
    i.Set("a", "3")
    assert i.Get("a") == "3"
    assert [i.Get_nthkey(n) for n in range(i.Get_nkeys())] == ["a", "b"]
    assert i.Get("zz") is None


def test_create_with_items_and_dup_independent():
    i = Info.Create({"x": "1", "y": "2"})
    assert i.items() == [("x", "1"), ("y", "2")]
    j = i.Dup()
    j["x"] = "9"
    assert i["x"] == "1" and j["x"] == "9"
    assert j != i and j == j
    c = i.copy()
    assert isinstance(c, Info) and c.items() == i.items() and c is not i


def test_delete_missing_key_error_class():
    i = Info.Create()
    with pytest.raises(MPIException) as e:
        i.Delete("nope")
    assert e.value.Get_error_class() == ERR_INFO_NOKEY
    with pytest.raises(MPI.Exception) as ref:
        MPI.Info.Create().Delete("nope")
    assert ref.value.Get_error_class() == MPI.ERR_INFO_NOKEY == ERR_INFO_NOKEY


@pytest.mark.parametrize("key,cls", [("", ERR_INFO_KEY), ("k" * (MAX_INFO_KEY + 1), ERR_INFO_KEY)])
def test_invalid_keys(key, cls):
    i = Info.Create()
    with pytest.raises(MPIException) as e:
        i.Set(key, "v")
    assert e.value.Get_error_class() == cls
    m = MPI.Info.Create()
    with pytest.raises(MPI.Exception) as ref:
        m.Set(key, "v")
    assert ref.value.Get_error_class() == cls
    m.Free()
    assert i.Get_nkeys() == 0  # nothing stored


def test_key_and_value_length_limits():
    i = Info.Create()
    i.Set("k" * MAX_INFO_KEY, "v")  # exactly the limit is fine (MPICH too)
    i.Set("v", "x" * MAX_INFO_VAL)
    assert i.Get("v") == "x" * MAX_INFO_VAL
    with pytest.raises(MPIException) as e:
        i.Set("w", "x" * (MAX_INFO_VAL + 1))
    assert e.value.Get_error_class() == ERR_INFO_VALUE
    assert "w" not in i


def test_nthkey_out_of_range_error_class_matches_mpi4py():
    """MPICH raises ERR_ARG for an out-of-range index in MPI_Info_get_nthkey
    (mpi4py: Info.Create().Get_nthkey(5) -> error class 12); the index is not a key."""
    i = Info.Create({"a": "1"})
    m = MPI.Info.Create()
    m.Set("a", "1")
    try:
        for n in (1, 5, -1):
            got, ref = outcome(lambda: i.Get_nthkey(n)), outcome(lambda: m.Get_nthkey(n))
            assert ref[:2] == ("err", "MPI")
            assert got == ref, n
    finally:
        m.Free()


def test_delitem_missing_key_raises_keyerror():
    """Mapping protocol (as mpi4py): ``del info[k]`` for a missing key raises KeyError."""
    i = Info.Create({"a": "1"})
    with pytest.raises(KeyError):
        del i["nope"]
    m = MPI.Info.Create()
    with pytest.raises(KeyError):
        del m["nope"]
    m.Free()


def test_getitem_missing_key_raises_keyerror():
    with pytest.raises(KeyError):
        Info.Create()["nope"]


# --- INFO_NULL --------------------------------------------------------------------------


def test_info_null_basics():
    assert not INFO_NULL and not Info()
    assert Info() == INFO_NULL and INFO_NULL == Info()
    assert Info.Create() != INFO_NULL
    assert Info.Create() != Info.Create()
    assert len(INFO_NULL) == 0
    assert "a" not in INFO_NULL
    assert list(INFO_NULL) == [] and INFO_NULL.keys() == [] and INFO_NULL.items() == []
    assert INFO_NULL.values() == []
    assert INFO_NULL.get("a", 7) == 7
    # mpi4py agrees on all of the above
    n = MPI.INFO_NULL
    assert len(n) == 0 and "a" not in n and list(n) == [] and n.get("a", 7) == 7


@pytest.mark.parametrize(
    "call",
    [
        lambda n: n.Get_nkeys(),
        lambda n: n.Get_nthkey(0),
        lambda n: n.Get("a"),
        lambda n: n.Set("a", "b"),
        lambda n: n.Delete("a"),
        lambda n: n.Dup(),
        lambda n: n.Free(),
    ],
    ids=["Get_nkeys", "Get_nthkey", "Get", "Set", "Delete", "Dup", "Free"],
)
def test_info_null_methods_raise(call):
    # MPI-4: an invalid info handle is ERR_INFO (MPICH reports ERR_ARG; both are MPI errors)
    with pytest.raises(MPIException) as e:
        call(INFO_NULL)
    assert e.value.Get_error_class() == ERR_INFO
    with pytest.raises(MPI.Exception):
        call(MPI.INFO_NULL)
    assert not INFO_NULL  # still null


def test_free():
    i = Info.Create({"a": "1"})
    i.Free()
    assert not i and i == INFO_NULL
    with pytest.raises(MPIException):
        i.Get("a")


def test_info_env():
    assert INFO_ENV
    assert set(INFO_ENV.keys()) <= {"command", "argv", "maxprocs", "soft", "host", "arch", "wdir", "file", "thread_level"}


def test_errors_are_runtime_errors():
    with pytest.raises(RuntimeError):
        Info.Create().Delete("x")


def test_info_null_getitem_raises_keyerror_like_mpi4py():
    """mpi4py: ``MPI.INFO_NULL['a']`` and ``del MPI.INFO_NULL['a']`` raise KeyError (a null
    info behaves as an empty mapping for the Python mapping protocol)."""
    with pytest.raises(KeyError):
        MPI.INFO_NULL["a"]
    with pytest.raises(KeyError):
        INFO_NULL["a"]
