"""Tests for gpumpi.errors: MPI.Exception semantics, error classes and strings,
user error classes/codes, pickling, and error handlers.

Oracle: mpi4py's ``MPI.Exception`` (MPICH) for the int/eq/bool/hash semantics.
"""

from __future__ import annotations

import pickle

import pytest

from gpumpi import errors as E
from gpumpi.errors import (
    ERR_ARG,
    ERR_GROUP,
    ERR_OTHER,
    ERR_PROC_FAILED,
    ERR_RANK,
    ERR_TIMEOUT,
    ERR_TRUNCATE,
    ERR_UNKNOWN,
    ERRHANDLER_NULL,
    ERRORS_ABORT,
    ERRORS_ARE_FATAL,
    ERRORS_RETURN,
    SUCCESS,
    Errhandler,
    ProcFailedError,
    TimeoutError,
    TruncateError,
    error,
)
from gpumpi.errors import Exception as MPIException

CLASS_NAMES = sorted(n for n in dir(E) if n.startswith("ERR_") and n != "ERR_LASTCODE")
# classes whose numeric value is the same in gpumpi and MPICH (the oracle)
SHARED = ["SUCCESS", "ERR_RANK", "ERR_TRUNCATE", "ERR_ARG", "ERR_OTHER", "ERR_GROUP", "ERR_TAG", "ERR_COMM"]


def _mpi():
    return pytest.importorskip("mpi4py.MPI")


# --- Exception semantics vs mpi4py ------------------------------------------------------


@pytest.mark.parametrize("name", SHARED)
def test_exception_semantics_match_mpi4py(name):
    MPI = _mpi()
    c = getattr(E, name)
    assert c == getattr(MPI, name)
    g, m = MPIException(c), MPI.Exception(c)
    assert int(g) == int(m) == c
    assert (g == c) == (m == c) is True
    assert (c == g) == (c == m) is True
    assert (g != c) == (m != c) is False
    assert (g == c + 1) == (m == c + 1) is False
    assert (g != c + 1) == (m != c + 1) is True
    assert bool(g) == bool(m) == (c != SUCCESS)
    assert (hash(g) == hash(c)) == (hash(m) == hash(c)) is True
    assert g.Get_error_code() == m.Get_error_code() == c
    assert g.Get_error_class() == m.Get_error_class() == c
    assert g.error_code == m.error_code and g.error_class == m.error_class
    assert repr(g) == repr(m)
    assert isinstance(g, RuntimeError) and isinstance(m, RuntimeError)
    assert (g == MPIException(c)) is True and (g != MPIException(c)) is False
    assert [1, 2, 3][MPIException(1)] == 2  # __index__


def test_default_exception_is_success():
    MPI = _mpi()
    g, m = MPIException(), MPI.Exception()
    assert int(g) == int(m) == SUCCESS
    assert not g and not m


def test_exception_comparison_with_non_ints():
    e = MPIException(ERR_RANK)
    assert (e == "x") is False
    assert (e != "x") is True
    assert (e == None) is False  # noqa: E711


@pytest.mark.parametrize("name", ["ERR_RANK", "ERR_TRUNCATE", "ERR_ARG", "ERR_OTHER", "ERR_GROUP", "ERR_TAG"])
def test_error_strings_match_mpich(name):
    MPI = _mpi()
    c = getattr(E, name)
    assert E.Get_error_string(c) == MPI.Get_error_string(getattr(MPI, name)).strip()
    assert str(MPIException(c)) == str(MPI.Exception(getattr(MPI, name))).strip()


def test_message_overrides_string():
    e = MPIException(ERR_RANK, "Comm.Send: invalid rank (7, size 4)")
    assert str(e) == e.Get_error_string() == e.error_string == "Comm.Send: invalid rank (7, size 4)"
    assert e == ERR_RANK  # the message does not change the code
    assert str(MPIException(ERR_RANK)) == E.Get_error_string(ERR_RANK)


# --- classes and strings ----------------------------------------------------------------


@pytest.mark.parametrize("name", CLASS_NAMES)
def test_every_class_has_a_string_and_is_its_own_class(name):
    c = getattr(E, name)
    s = E.Get_error_string(c)
    assert isinstance(s, str) and s
    assert s != E.Get_error_string(10**6 + 12345)  # not the unknown-code fallback
    assert E.Get_error_class(c) == c
    assert MPIException(c).Get_error_class() == c


def test_class_values_distinct():
    vals = {}
    for n in CLASS_NAMES + ["SUCCESS"]:
        vals.setdefault(getattr(E, n), []).append(n)
    dup = {v: ns for v, ns in vals.items() if len(ns) > 1}
    assert not dup, dup
    assert SUCCESS == 0
    assert all(0 < getattr(E, n) <= E.ERR_LASTCODE for n in CLASS_NAMES)


def test_unknown_codes():
    s = E.Get_error_string(987654)
    assert isinstance(s, str) and "987654" in s
    assert E.Get_error_class(-5) == ERR_UNKNOWN
    assert E.Get_error_class(999) == ERR_UNKNOWN


def test_user_error_classes_codes_strings():
    c1 = E.Add_error_class()
    c2 = E.Add_error_class()
    assert c1 != c2
    predefined = {getattr(E, n) for n in CLASS_NAMES} | {SUCCESS}
    assert c1 not in predefined and c2 not in predefined
    assert E.Get_error_class(c1) == c1
    assert E.Get_error_string(c1) == ""  # MPICH also gives '' for a fresh class
    k1 = E.Add_error_code(c1)
    k2 = E.Add_error_code(c1)
    k3 = E.Add_error_code(ERR_RANK)  # codes may be added to predefined classes
    assert len({c1, c2, k1, k2, k3}) == 5
    assert E.Get_error_class(k1) == E.Get_error_class(k2) == c1
    assert E.Get_error_class(k3) == ERR_RANK
    assert MPIException(k1).Get_error_class() == c1
    assert MPIException(k1) == k1 and MPIException(k1) != c1
    E.Add_error_string(k1, "my failure")
    E.Add_error_string(c2, "my class")
    assert E.Get_error_string(k1) == "my failure"
    assert E.Get_error_string(c2) == "my class"
    assert str(MPIException(k1)) == "my failure"
    E.Add_error_string(k1, "changed")  # may be replaced
    assert E.Get_error_string(k1) == "changed"


def test_user_error_errors():
    with pytest.raises(MPIException) as e:
        E.Add_error_string(ERR_RANK, "not allowed on predefined codes")
    assert e.value.Get_error_class() == ERR_ARG
    assert E.Get_error_string(ERR_RANK) == "Invalid rank"  # unchanged
    with pytest.raises(MPIException) as e:
        E.Add_error_code(10**7 + 3)  # no such class
    assert e.value.Get_error_class() == ERR_ARG


# --- subclasses and the error() factory -------------------------------------------------


@pytest.mark.parametrize(
    "cls,code", [(TruncateError, ERR_TRUNCATE), (ProcFailedError, ERR_PROC_FAILED), (TimeoutError, ERR_TIMEOUT)]
)
def test_subclasses(cls, code):
    e = cls("boom")
    assert isinstance(e, MPIException) and isinstance(e, RuntimeError)
    assert e == code and int(e) == code and e.Get_error_class() == code
    assert str(e) == "boom"
    f = error(code, "via factory")
    assert type(f) is cls and f == code and str(f) == "via factory"
    assert cls(ierr=ERR_OTHER) == ERR_OTHER


def test_error_factory_plain():
    e = error(ERR_GROUP, "Group.Incl: null group")
    assert type(e) is MPIException and e == ERR_GROUP and str(e) == "Group.Incl: null group"


def test_except_mpi_exception_catches_subclasses():
    with pytest.raises(MPIException):
        raise TruncateError("x")


# --- pickling ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        MPIException(ERR_RANK),
        MPIException(ERR_RANK, "Comm.Send: bad rank (9)"),
        MPIException(),
        TruncateError("Recv: message truncated (100 > 10)"),
        ProcFailedError("peer 3 died"),
        TimeoutError(),
        error(ERR_ARG, "x"),
    ],
    ids=repr,
)
def test_pickle_round_trip(exc):
    for proto in range(2, pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(exc, protocol=proto))
        assert type(back) is type(exc)
        assert int(back) == int(exc) and back == exc
        assert str(back) == str(exc)
        assert back.Get_error_class() == exc.Get_error_class()


def test_pickle_user_code():
    c = E.Add_error_class()
    k = E.Add_error_code(c)
    back = pickle.loads(pickle.dumps(MPIException(k, "user")))
    assert back == k and back.Get_error_class() == c and str(back) == "user"


# --- error handlers ---------------------------------------------------------------------


def test_errhandler_equality():
    assert ERRORS_RETURN == Errhandler(ERRORS_RETURN)
    assert ERRORS_RETURN != ERRORS_ARE_FATAL
    assert ERRORS_ARE_FATAL != ERRORS_ABORT
    assert ERRHANDLER_NULL == Errhandler()
    assert not ERRHANDLER_NULL and not Errhandler()
    assert ERRORS_RETURN and ERRORS_ARE_FATAL and ERRORS_ABORT
    # handles are unhashable, as mpi4py's (test_objmodel.testHash)
    with pytest.raises(TypeError):
        hash(ERRORS_RETURN)
    assert (ERRORS_RETURN == 3) is False
    MPI = _mpi()
    # mpi4py agrees on the same relations
    assert MPI.ERRORS_RETURN == MPI.Errhandler(MPI.ERRORS_RETURN)
    assert MPI.ERRORS_RETURN != MPI.ERRORS_ARE_FATAL
    assert MPI.ERRHANDLER_NULL == MPI.Errhandler() and not MPI.ERRHANDLER_NULL


def test_user_errhandler_equality():
    def f(obj, code):
        pass

    def g(obj, code):
        pass

    # each creation is a new handle, as MPI_Comm_create_errhandler; a reference to it is equal
    a, b, c = Errhandler._make("user", f), Errhandler._make("user", f), Errhandler._make("user", g)
    assert a != b and a != c and a != ERRORS_RETURN
    assert Errhandler(a) == a and Errhandler.fromhandle(Errhandler(a).handle) == a


def test_errors_return_raises_the_same_exception():
    exc = MPIException(ERR_RANK, "x")
    with pytest.raises(MPIException) as ei:
        ERRORS_RETURN._apply(object(), exc)
    assert ei.value is exc
    with pytest.raises(MPIException) as ei:
        Errhandler(ERRORS_RETURN)._apply(None, exc)
    assert ei.value is exc


def test_user_handler_called_then_raises():
    calls = []
    obj = object()
    h = Errhandler._make("user", lambda o, code: calls.append((o, code)))
    exc = TruncateError("Recv: truncated")
    with pytest.raises(TruncateError) as ei:
        h._apply(obj, exc)
    assert ei.value is exc
    assert calls == [(obj, ERR_TRUNCATE)]
    assert type(calls[0][1]) is int


def test_user_handler_receives_code_not_class():
    c = E.Add_error_class()
    k = E.Add_error_code(c)
    seen = []
    h = Errhandler._make("user", lambda o, code: seen.append(code))
    with pytest.raises(MPIException):
        h._apply("comm", MPIException(k))
    assert seen == [k]


def test_user_handler_exception_propagates():
    def boom(o, code):
        raise ValueError("handler failed")

    h = Errhandler._make("user", boom)
    with pytest.raises(ValueError):
        h._apply(None, MPIException(ERR_ARG))


def test_free_user_handler():
    h = Errhandler._make("user", lambda o, c: None)
    h2 = Errhandler(h)
    h.Free()
    assert not h and h == ERRHANDLER_NULL
    assert h2  # a copy is not freed
    ERRORS_RETURN.Free()  # predefined handlers stay usable
    assert ERRORS_RETURN and ERRORS_RETURN != ERRHANDLER_NULL
    with pytest.raises(MPIException):
        ERRORS_RETURN._apply(None, MPIException(ERR_ARG))


@pytest.mark.parametrize("handler", [ERRORS_ARE_FATAL, ERRORS_ABORT], ids=["fatal", "abort"])
def test_fatal_handlers_call_abort_hook(handler):
    got = []
    old = E._abort_hook[0]
    E.set_abort_hook(lambda code, msg: got.append((code, msg)))
    try:
        with pytest.raises(MPIException):  # the hook returned (test hook), so it raises
            handler._apply(None, TruncateError("Recv: truncated (10 > 4)"))
        with pytest.raises(MPIException):
            handler._apply(None, MPIException(SUCCESS))
    finally:
        E._abort_hook[0] = old
    assert got[0][0] == ERR_TRUNCATE
    assert "Recv: truncated (10 > 4)" in got[0][1]
    assert got[1][0] != 0  # an abort never exits with status 0


def test_null_errhandler_is_err_errhandler_and_families_travel_with_copies():
    """MPICH: a null handler given to Set_errhandler is ERR_ERRHANDLER; a session refuses a
    communicator's user handler (ERR_ARG), whichever reference to it is passed."""
    from gpumpi import MPI

    c = MPI.COMM_SELF.Dup()
    with pytest.raises(MPIException) as ei:
        c.Set_errhandler(MPI.ERRHANDLER_NULL)
    assert ei.value.Get_error_class() == E.ERR_ERRHANDLER
    with pytest.raises(TypeError):
        c.Call_errhandler("x")  # an integer, as mpi4py's C int
    comm_eh = MPI.Comm.Create_errhandler(lambda comm, code: None)
    assert Errhandler(comm_eh)._family == "Comm"
    assert Errhandler.fromhandle(comm_eh.handle)._family == "Comm"
    s = MPI.Session.Init()
    with pytest.raises(MPIException) as ei:
        s.Set_errhandler(Errhandler.fromhandle(comm_eh.handle))
    assert ei.value.Get_error_class() == ERR_ARG
    c.Set_errhandler(comm_eh)  # (MPICH lets a communicator take any family's handler)
    c.Set_errhandler(ERRORS_RETURN)
    comm_eh.Free()
    s.Finalize()
    c.Free()
