"""mpi4py's object model on gpumpi's classes (gpumpi._handles and its users).

Oracle: mpi4py 4.1.2 on MPICH (test_objmodel, test_handle, test_errhandler,
test_errorcode, test_status, test_grequest, test_info, test_group): handles with
MPICH's values, equality by handle, unhashable objects, constants that pickle by
name, ``free()`` that leaves constants alone.
"""

from __future__ import annotations

import copy
import pickle

import pytest

from gpumpi.testing import run_ranks


def _mpi():
    from gpumpi import MPI

    return MPI


NULLS = ("DATATYPE_NULL", "REQUEST_NULL", "INFO_NULL", "ERRHANDLER_NULL", "SESSION_NULL", "GROUP_NULL",
         "WIN_NULL", "OP_NULL", "FILE_NULL", "MESSAGE_NULL", "COMM_NULL")


def test_null_objects_compare_pickle_and_free_as_mpi4py():
    MPI = _mpi()
    objs = [getattr(MPI, n) for n in NULLS]
    for i, a in enumerate(objs):
        assert not a and a == type(a)() and a == type(a)(a)
        assert all(a != b for j, b in enumerate(objs) if j != i)
        assert pickle.loads(pickle.dumps(a)) is a and copy.copy(a) is a
        dup = pickle.loads(pickle.dumps(type(a)(a)))
        assert dup is not a and dup == a and type(dup) is type(a)
        with pytest.raises(TypeError):
            type(a)(1234)
        with pytest.raises(AttributeError):
            a.handle = 0
        a.free()
        assert type(a).fromhandle(a.handle) == a
    for n in NULLS:
        with pytest.raises(TypeError):
            hash(getattr(MPI, n))


def test_predefined_handles_are_mpich_values():
    MPI = _mpi()
    assert MPI.COMM_WORLD.handle == 0x44000000 and MPI.COMM_SELF.handle == 0x44000001
    assert MPI.ERRORS_RETURN.handle == 0x54000001 and MPI.SUM.toint() == 0x58000003
    assert MPI.GROUP_EMPTY.py2f() == 0x48000000 and MPI.INFO_ENV.handle == 0x5C000001
    assert MPI.Comm.fromhandle(MPI.COMM_WORLD.handle) == MPI.COMM_WORLD
    assert type(MPI.Comm.fromhandle(MPI.COMM_WORLD.handle)) is MPI.Intracomm
    assert pickle.loads(pickle.dumps(MPI.COMM_WORLD)) is MPI.COMM_WORLD
    with pytest.raises(ValueError):
        pickle.dumps(MPI.COMM_WORLD.Dup())


def test_free_leaves_constants_and_nullifies_references():
    MPI = _mpi()
    for c in (MPI.SUM, MPI.INFO_ENV, MPI.GROUP_EMPTY, MPI.COMM_SELF, MPI.MESSAGE_NO_PROC, MPI.INT):
        c.free()
        assert c
        ref = type(c)(c)
        ref.free()
        assert not ref and c
    d = MPI.COMM_SELF.Dup()
    h = d.handle
    assert MPI.Comm.fromhandle(h) == d
    d.free()
    assert not d
    with pytest.raises(MPI.Exception):
        MPI.Comm.fromhandle(h)


def test_null_objects_raise_their_familys_error_class():
    MPI = _mpi()
    with pytest.raises(MPI.Exception) as ei:
        MPI.FILE_NULL.Get_size()
    assert ei.value.Get_error_class() == MPI.ERR_FILE
    with pytest.raises(MPI.Exception) as ei:
        MPI.WIN_NULL.Get_group()
    assert ei.value.Get_error_class() == MPI.ERR_WIN
    assert MPI.SUM.Is_commutative() and not MPI.REPLACE.is_commutative


def test_exception_compares_as_its_int():
    MPI = _mpi()
    e = MPI.Exception(MPI.ERR_ARG)
    assert MPI.SUCCESS <= e <= MPI.ERR_LASTCODE and e > MPI.SUCCESS and e == MPI.ERR_ARG
    assert hash(e) == hash(MPI.ERR_ARG) and MPI.Exception(-1) == MPI.ERR_UNKNOWN


def test_user_error_classes_codes_strings():
    MPI = _mpi()
    c = MPI.Add_error_class()
    assert c > MPI.ERR_LASTCODE and MPI.COMM_WORLD.Get_attr(MPI.LASTUSEDCODE) == c
    code = MPI.Add_error_code(c)
    MPI.Add_error_string(code, "mine")
    assert MPI.Get_error_class(code) == c and MPI.Get_error_string(code) == "mine"
    with pytest.raises(MPI.Exception):
        MPI.Remove_error_class(c)  # it has a code
    with pytest.raises(MPI.Exception):
        MPI.Remove_error_code(code)  # it has a string
    MPI.Remove_error_string(code)
    MPI.Remove_error_code(code)
    MPI.Remove_error_class(c)
    with pytest.raises(MPI.Exception):
        MPI.Remove_error_class(c)
    with pytest.raises(MPI.Exception):
        MPI.Remove_error_string(0)


def _errhandlers():
    MPI = _mpi()
    comm = MPI.COMM_SELF.Dup()
    e = comm.Get_errhandler()
    assert e == MPI.ERRORS_RETURN and e is not MPI.ERRORS_RETURN
    e.Free()
    assert e == MPI.ERRHANDLER_NULL and comm.Get_errhandler() == MPI.ERRORS_RETURN
    comm.Call_errhandler(MPI.ERR_OTHER)  # ERRORS_RETURN: returns
    seen = []
    hs = [MPI.Comm.Create_errhandler(lambda c, code: seen.append((c == comm, code))) for _ in range(32)]
    with pytest.raises(RuntimeError):
        MPI.Comm.Create_errhandler(lambda c, code: None)
    comm.Set_errhandler(hs[0])
    comm.Call_errhandler(MPI.ERR_OTHER)
    assert seen == [(True, MPI.ERR_OTHER)]
    assert MPI.Errhandler.fromhandle(hs[0].handle) == hs[0]
    for h in hs:
        h.Free()
    MPI.Comm.Create_errhandler(lambda c, code: None).Free()  # the slots came back
    comm.Free()
    return True


@pytest.mark.parametrize("n", [1, 2])
def test_errhandler_references_and_user_handlers(n):
    assert run_ranks(_errhandlers, n, timeout=60) == [True] * n


def test_status_memory_and_pickle():
    MPI = _mpi()
    s = MPI.Status()
    s.source, s.tag, s.error = 11, 22, 33
    mem = s.tomemory()
    seq = list(mem)
    mem[seq.index(11)] = 111
    assert s.source == 111 and s.py2f()[MPI.F_SOURCE] == 111 and len(s.py2f()) == MPI.F_STATUS_SIZE
    s.Set_elements(MPI.BYTE, 7)
    t = pickle.loads(pickle.dumps(s))
    assert t == s and t.Get_count(MPI.BYTE) == 7
    with pytest.raises(TypeError):
        MPI.Status(123)


def test_grequest_complete_with_object_and_callback_errors(capsys):
    MPI = _mpi()
    g = MPI.Grequest.Start()
    assert MPI.Grequest.fromhandle(g.handle) == g and MPI.Request(g) == g
    with pytest.raises(TypeError):
        MPI.Prequest(g)
    g.complete(42)
    assert g.wait() == 42 and not g

    def boom(*_):
        raise ValueError(42)

    g = MPI.Grequest.Start(boom)
    g.Complete()
    with pytest.raises(MPI.Exception) as ei:
        g.Wait()
    assert ei.value.Get_error_class() == MPI.ERR_OTHER and "ValueError" in capsys.readouterr().err


def test_request_get_status_on_null_requests():
    MPI = _mpi()
    reqs = [MPI.REQUEST_NULL] * 3
    st = MPI.Status()
    st.source = 0
    assert MPI.Request.Get_status_any(reqs, st) == (MPI.UNDEFINED, True) and st.source == MPI.ANY_SOURCE
    assert MPI.Request.get_status_all(reqs) is True and MPI.Request.get_status_some(reqs) is None
    MPI.Request.Waitall(reqs, (MPI.Status(),))  # fewer statuses than requests


def test_info_references_env_and_group_compare():
    MPI = _mpi()
    a = MPI.Info.Create()
    b = MPI.Info(a)
    b["k"] = "v"
    assert a["k"] == "v" and a == b and a.Dup() != a
    env = MPI.Info.Create_env(["prog", "x"])
    assert env.Get("command") == "prog" and env.Get("argv") == "x"
    with pytest.raises(KeyError):
        MPI.INFO_NULL["k"] = "v"
    g = MPI.COMM_WORLD.Get_group()
    assert g.Compare(MPI.COMM_WORLD.Get_group()) == MPI.IDENT == MPI.Group.Compare(g, g)
    assert MPI.Compute_dims(12, 2) == [4, 3] and MPI.Compute_dims(6, [0, 3]) == [2, 3]


def test_subclasses_may_pass_the_copied_object_to_new_as_in_mpi4py():
    """mpi4py's test_subclass: ``super().__new__(cls, obj)`` in a subclass, then __init__ copies."""
    from gpumpi import MPI

    class MyInfo(MPI.Info):
        def __new__(cls, info=None):
            return super().__new__(cls, info)

    class MyRequest(MPI.Request):
        def __new__(cls, request=None):
            return super().__new__(cls, request)

    class MyIntracomm(MPI.Intracomm):
        def __new__(cls, comm=None):
            return super().__new__(cls, comm)

    info = MyInfo(MPI.INFO_ENV)
    assert type(info) is MyInfo and info == MPI.INFO_ENV
    assert type(MyRequest(MPI.REQUEST_NULL)) is MyRequest
    comm = MyIntracomm(MPI.COMM_SELF)
    clone = comm.Clone()
    assert type(clone) is MyIntracomm and clone.Compare(MPI.COMM_SELF) == MPI.CONGRUENT
    clone.Free()
