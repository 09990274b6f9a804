"""Attribute caching (gpumpi.keyval): the generic store on a toy family, then communicators and
datatypes through MPI.  Expectations are mpi4py 4.1.2 on MPICH (attrimpl.pxi) and the MPI
standard's rules (copy on dup in setting order, delete newest first, COMM_SELF at Finalize)."""

import pytest

from gpumpi.constants import KEYVAL_INVALID
from gpumpi.errors import ERR_ARG, ERR_KEYVAL, ERR_OTHER
from gpumpi.errors import Exception as MPIException
from gpumpi.keyval import Kind
from gpumpi.testing import run_ranks

pytestmark = pytest.mark.timeout(120)


# -- the generic store on a toy family -----------------------------------------------------------


class Obj:
    """A toy handle family: objects naming one handle share ``rec``."""

    def __init__(self, rec=None):
        self.rec = {} if rec is None else rec
        self.null = False

    def __bool__(self):
        return not self.null


def _kind(predefined=(), first=1000):
    refs = []

    def wrap(o):
        ref = Obj(o.rec)
        refs.append(ref)
        return ref

    def nullify(ref):
        ref.null = True

    k = Kind("Toy", first, attrs_of=lambda o: o.rec, wrap=wrap, nullify=nullify, predefined=predefined)
    return k, refs


def test_copy_in_setting_order_delete_newest_first_replacement_keeps_place():
    kind, _ = _kind()
    log = []
    keys = [kind.create_keyval(lambda o, k, v: (log.append(("copy", v)), v)[1],
                               lambda o, k, v: log.append(("del", v))) for _ in range(3)]
    a = Obj()
    for i, k in enumerate(keys):
        kind.set_attr(a, k, f"v{i}")
    kind.set_attr(a, keys[0], "v0b")  # replaced in place: its old value deleted first
    assert log == [("del", "v0")]
    b = Obj()
    log.clear()
    kind.copy_all(a, b, "Toy.Dup")
    assert log == [("copy", "v0b"), ("copy", "v1"), ("copy", "v2")]
    log.clear()
    kind.delete_all(b)
    assert log == [("del", "v2"), ("del", "v1"), ("del", "v0b")] and b.rec == {}


def test_copy_fn_forms():
    kind, _ = _kind()
    val = [1, 2]
    k_true = kind.create_keyval(copy_fn=True)
    k_false = kind.create_keyval(copy_fn=False)
    k_none = kind.create_keyval()
    k_skip = kind.create_keyval(copy_fn=lambda o, k, v: NotImplemented)
    k_none_value = kind.create_keyval(copy_fn=lambda o, k, v: None)  # None is a value to store
    a, b = Obj(), Obj()
    for k in (k_true, k_false, k_none, k_skip, k_none_value):
        kind.set_attr(a, k, val)
    kind.copy_all(a, b, "Toy.Dup")
    assert kind.get_attr(b, k_true) is val
    assert set(b.rec) == {k_true, k_none_value} and b.rec[k_none_value][1] is None


def test_callbacks_get_a_fresh_reference_nulled_afterwards():
    kind, refs = _kind()
    seen = []
    k = kind.create_keyval(copy_fn=lambda o, kv, v: (seen.append((bool(o), o.rec is a.rec, kv)), v)[1])
    a = Obj()
    kind.set_attr(a, k, 1)
    kind.copy_all(a, Obj(), "Toy.Dup")
    assert seen == [(True, True, k)]
    assert refs and all(r.null for r in refs) and a  # only the callback's reference is nulled


def test_nopython_values_are_c_pointers():
    kind, _ = _kind()
    k = kind.create_keyval(copy_fn=lambda o, kv, v: v + 1, nopython=True)
    a, b = Obj(), Obj()
    kind.set_attr(a, k, -1)
    assert kind.get_attr(a, k) == 2**64 - 1  # PyLong_FromVoidPtr reads it back unsigned
    kind.set_attr(a, k, 0)
    assert kind.get_attr(a, k) == 0
    kind.copy_all(a, b, "Toy.Dup")
    assert kind.get_attr(b, k) == 1
    for bad, exc in (("1", TypeError), (1.0, TypeError), (2**64, OverflowError), (-(2**63) - 1, OverflowError)):
        with pytest.raises(exc):
            kind.set_attr(a, k, bad)
    assert kind.get_attr(a, k) == 0  # a rejected value leaves the old one
    bad_copy = kind.create_keyval(copy_fn=lambda o, kv, v: "not an int", nopython=True)
    kind.set_attr(a, bad_copy, 5)
    with pytest.raises(MPIException) as ei:
        kind.copy_all(a, Obj(), "Toy.Dup")
    assert ei.value.Get_error_class() == ERR_OTHER


def test_callback_exceptions_are_printed_and_coded_as_mpi4py(capsys):
    kind, _ = _kind()
    log = []

    def boom(o, k, v):
        log.append(v)
        raise ValueError("boom")

    def mpi_boom(o, k, v):
        raise MPIException(ERR_ARG)

    k = kind.create_keyval(copy_fn=boom, delete_fn=boom)
    a = Obj()
    kind.set_attr(a, k, "x")
    kind.set_attr(a, k, "y")  # replacement: the delete error is only printed
    assert "ValueError: boom" in capsys.readouterr().err and kind.get_attr(a, k) == "y"
    b = Obj()
    with pytest.raises(MPIException) as ei:
        kind.copy_all(a, b, "Toy.Dup")
    assert ei.value.Get_error_class() == ERR_OTHER and "ValueError" in str(ei.value)
    assert b.rec == {} and "Traceback" in capsys.readouterr().err
    with pytest.raises(MPIException) as ei:
        kind.delete_attr(a, k)  # Delete_attr raises, and the value is gone all the same
    assert ei.value.Get_error_class() == ERR_OTHER and kind.get_attr(a, k) is None
    kind.set_attr(a, k, "z")
    kind.delete_all(a)  # a free only prints
    assert log == ["x", "y", "y", "z"] and a.rec == {}
    assert capsys.readouterr().err.count("ValueError: boom") == 2
    k2 = kind.create_keyval(delete_fn=mpi_boom)
    kind.set_attr(a, k2, 1)
    with pytest.raises(MPIException) as ei:
        kind.delete_attr(a, k2)
    assert ei.value.Get_error_class() == ERR_ARG  # an MPI.Exception keeps its code


def test_copy_failure_drops_what_was_copied_without_deleting_it(capsys):
    kind, _ = _kind()
    deleted = []
    ok = kind.create_keyval(copy_fn=True, delete_fn=lambda o, k, v: deleted.append(v))
    bad = kind.create_keyval(copy_fn=lambda o, k, v: 1 / 0)
    a, b = Obj(), Obj()
    kind.set_attr(a, ok, 1)
    kind.set_attr(a, bad, 2)
    with pytest.raises(MPIException):
        kind.copy_all(a, b, "Toy.Dup")
    assert b.rec == {} and deleted == []  # as MPICH: dropped, no delete callbacks
    assert "ZeroDivisionError" in capsys.readouterr().err


def test_keyval_errors():
    kind, _ = _kind(predefined=(7,))
    other, _ = _kind(first=5000)
    a = Obj()
    for call in (lambda: kind.get_attr(a, KEYVAL_INVALID), lambda: kind.set_attr(a, KEYVAL_INVALID, 1),
                 lambda: kind.delete_attr(a, KEYVAL_INVALID), lambda: kind.free_keyval(KEYVAL_INVALID),
                 lambda: kind.get_attr(a, 12345), lambda: kind.set_attr(a, 7, 1),
                 lambda: kind.delete_attr(a, 7), lambda: kind.free_keyval(7)):
        with pytest.raises(MPIException) as ei:
            call()
        assert ei.value.Get_error_class() == ERR_KEYVAL
    assert kind.get_attr(a, 7, lambda k: ("predefined", k)) == ("predefined", 7)
    assert kind.get_attr(a, 7.5, lambda k: k) == 7  # floats truncate, as mpi4py's C int arguments
    with pytest.raises(TypeError):
        kind.get_attr(a, "7")
    with pytest.raises(OverflowError):
        kind.get_attr(a, 2**40)
    with pytest.raises(TypeError):
        kind.create_keyval(copy_fn=42)
    k = kind.create_keyval(delete_fn=lambda o, kv, v: a.rec.setdefault("deleted", v))
    kind.set_attr(a, k, "kept")
    assert kind.free_keyval(k) == KEYVAL_INVALID
    with pytest.raises(MPIException) as ei:
        kind.set_attr(a, k, 1)  # a freed keyval cannot be set
    assert ei.value.Get_error_class() == ERR_KEYVAL
    with pytest.raises(MPIException):
        kind.free_keyval(k)  # nor freed twice
    assert kind.get_attr(a, k) == "kept"  # values attached stay readable
    kind.delete_attr(a, k)  # and deletable, with their callback
    assert a.rec == {"deleted": "kept"}
    other_k = other.create_keyval()
    with pytest.raises(MPIException) as ei:
        kind.get_attr(a, other_k)  # another family's keyval
    assert ei.value.Get_error_class() == ERR_KEYVAL


# -- communicators and datatypes, in this process (a world of one) ---------------------------------


def test_comm_dup_copies_free_deletes_and_references_share():
    from gpumpi import MPI

    log = []
    k = MPI.Comm.Create_keyval(lambda o, kv, v: (log.append(("copy", type(o).__name__, o.Get_size(), v)), v * 2)[1],
                               lambda o, kv, v: log.append(("del", v)))
    c = MPI.COMM_WORLD.Dup()
    c.Set_attr(k, 21)
    assert MPI.Comm(c).Get_attr(k) == 21  # another reference to the handle sees it
    d = c.Dup()
    assert d.Get_attr(k) == 42 and log == [("copy", "Intracomm", 1, 21)]
    d.Free()
    assert log[-1] == ("del", 42)
    split = c.Split(0, 0)
    assert split.Get_attr(k) is None  # only Dup copies attributes
    split.Free()
    c.Free()
    assert log[-1] == ("del", 21)
    assert MPI.Comm.Free_keyval(k) == MPI.KEYVAL_INVALID


def test_comm_predefined_keyvals_and_errors():
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    assert w.Get_attr(MPI.TAG_UB) >= 32767
    assert w.Get_attr(MPI.IO) in (MPI.ANY_SOURCE, MPI.PROC_NULL, 0)
    assert w.Get_attr(MPI.WTIME_IS_GLOBAL) in (0, 1)
    assert w.Get_attr(MPI.APPNUM) == 0 and w.Get_attr(MPI.UNIVERSE_SIZE) == w.Get_size()
    assert w.Get_attr(MPI.LASTUSEDCODE) >= 0
    assert w.Get_attr(0x64400003) == MPI.PROC_NULL  # MPICH's MPI_HOST
    for call in (lambda: w.Set_attr(MPI.TAG_UB, 1), lambda: w.Delete_attr(MPI.TAG_UB),
                 lambda: MPI.Comm.Free_keyval(MPI.TAG_UB), lambda: w.Get_attr(MPI.KEYVAL_INVALID)):
        with pytest.raises(MPI.Exception) as ei:
            call()
        assert ei.value.Get_error_class() == MPI.ERR_KEYVAL
    tk = MPI.Datatype.Create_keyval()
    with pytest.raises(MPI.Exception) as ei:
        w.Get_attr(tk)  # a datatype keyval on a communicator
    assert ei.value.Get_error_class() == MPI.ERR_KEYVAL
    ck = MPI.Comm.Create_keyval()
    with pytest.raises(MPI.Exception) as ei:
        MPI.INT.Get_attr(ck)
    assert ei.value.Get_error_class() == MPI.ERR_KEYVAL
    with pytest.raises(MPI.Exception) as ei:
        MPI.COMM_NULL.Get_attr(ck)
    assert ei.value.Get_error_class() == MPI.ERR_COMM
    MPI.Comm.Free_keyval(ck)
    MPI.Datatype.Free_keyval(tk)


def test_comm_errors_go_through_the_error_handler_callback_errors_do_not(capsys):
    from gpumpi import MPI

    c = MPI.COMM_SELF.Dup()
    seen = []
    eh = MPI.Comm.Create_errhandler(lambda comm, code: seen.append(code))
    c.Set_errhandler(eh)
    with pytest.raises(MPI.Exception):
        c.Set_attr(MPI.KEYVAL_INVALID, 1)
    assert seen == [MPI.ERR_KEYVAL]
    k = MPI.Comm.Create_keyval(delete_fn=lambda *a: 1 / 0)
    c.Set_attr(k, 1)
    with pytest.raises(MPI.Exception) as ei:
        c.Delete_attr(k)  # raised after MPI returned, as mpi4py: not through the handler
    assert ei.value.Get_error_class() == MPI.ERR_OTHER and seen == [MPI.ERR_KEYVAL]
    assert "ZeroDivisionError" in capsys.readouterr().err
    c.Set_errhandler(MPI.ERRORS_RETURN)
    eh.Free()
    c.Free()
    MPI.Comm.Free_keyval(k)


def test_comm_dup_copy_failure_frees_the_new_communicator(capsys):
    from gpumpi import MPI

    c = MPI.COMM_SELF.Dup()
    k = MPI.Comm.Create_keyval(copy_fn=lambda *a: 1 / 0)
    c.Set_attr(k, "v")
    live = len(MPI.Comm._htable.live)
    with pytest.raises(MPI.Exception) as ei:
        c.Dup()
    assert ei.value.Get_error_class() == MPI.ERR_OTHER
    assert "ZeroDivisionError" in capsys.readouterr().err
    assert len(MPI.Comm._htable.live) == live  # the half-made duplicate was freed
    c.Delete_attr(k)
    c.Free()
    MPI.Comm.Free_keyval(k)


def test_comm_attr_copy_delete_communicator_values():
    """mpi4py's testAttrCopyDelete: values that are communicators, duplicated and freed by the callbacks."""
    from gpumpi import MPI

    cls = MPI.Intracomm
    k = cls.Create_keyval(copy_fn=lambda o, kv, v: cls.Dup(v), delete_fn=lambda o, kv, v: cls.Free(v))
    obj = MPI.COMM_WORLD.Dup()
    dup1 = obj.Dup()
    obj.Set_attr(k, dup1)
    obj2 = obj.Dup()
    dup2 = obj2.Get_attr(k)
    assert dup2 != dup1 and dup2 != MPI.COMM_NULL
    obj2.Free()
    assert dup2 == MPI.COMM_NULL
    obj.Delete_attr(k)
    assert dup1 == MPI.COMM_NULL
    obj.Free()
    MPI.Comm.Free_keyval(k)


def test_datatype_attributes_share_the_store(capsys):
    from gpumpi import MPI

    log = []
    k = MPI.Datatype.Create_keyval(copy_fn=True, delete_fn=lambda o, kv, v: log.append((o.Get_size(), v)))
    t = MPI.INT.Dup()
    t.Set_attr(k, "a")
    u = t.Dup()
    assert u.Get_attr(k) == "a"
    u.Free()
    t.Free()
    assert log == [(4, "a"), (4, "a")]
    MPI.Datatype.Free_keyval(k)


# -- several ranks ---------------------------------------------------------------------------------


def _dup_on_ranks():
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    log = []
    k = MPI.Comm.Create_keyval(lambda o, kv, v: (log.append(("copy", o.Get_rank(), v)), v + [o.Get_size()])[1],
                               lambda o, kv, v: log.append(("del", v)))
    k2 = MPI.Comm.Create_keyval(copy_fn=True, nopython=True)
    c = w.Dup()
    c.Set_attr(k, [w.rank])
    c.Set_attr(k2, -w.rank)
    d = c.Dup()
    got = (d.Get_attr(k), d.Get_attr(k2))
    d.Barrier()  # the duplicate works
    d.Free()
    c.Free()
    return got, log


@pytest.mark.parametrize("n", [2, 3])
def test_dup_copies_on_every_rank(n):
    for r, ((val, ival), log) in enumerate(run_ranks(_dup_on_ranks, n, timeout=60)):
        assert val == [r, n] and ival == (-r) & (2**64 - 1)
        assert log == [("copy", r, [r]), ("del", [r, n]), ("del", [r])]


def _finalize_order():
    from gpumpi import MPI

    out = []
    keys = [MPI.Comm.Create_keyval(delete_fn=lambda o, kv, v: out.append((o.Get_name(), v, MPI.Is_finalized())))
            for _ in range(3)]
    MPI.COMM_WORLD.Set_attr(keys[0], "w0")
    for i, k in enumerate(keys):
        MPI.COMM_SELF.Set_attr(k, f"s{i}")
    MPI.COMM_SELF.Set_attr(keys[0], "s0b")  # replacing keeps its place
    out.clear()  # (the replaced value's delete)
    MPI.Finalize()
    return out  # (run_ranks brings results back outside MPI)


def test_finalize_deletes_comm_self_newest_first_then_comm_world():
    (out,) = run_ranks(_finalize_order, 1, timeout=60)
    assert out == [("MPI_COMM_SELF", "s2", False), ("MPI_COMM_SELF", "s1", False),
                   ("MPI_COMM_SELF", "s0b", False), ("MPI_COMM_WORLD", "w0", False)]


def _inherited(ctx_attrs):
    from gpumpi import MPI

    c = MPI.COMM_WORLD.Dup()
    return MPI.COMM_WORLD.Get_attr(ctx_attrs[0]), c.Get_attr(ctx_attrs[1])


def test_forked_ranks_do_not_inherit_the_parents_attributes():
    from gpumpi import MPI

    kw, kc = MPI.Comm.Create_keyval(), MPI.Comm.Create_keyval()
    MPI.COMM_WORLD.Set_attr(kw, "parent's world")
    c = MPI.COMM_WORLD.Dup()  # a context a rank's first Dup may get again
    c.Set_attr(kc, "parent's comm")
    try:
        assert run_ranks(_inherited, 2, timeout=60, args=((kw, kc),)) == [(None, None), (None, None)]
    finally:
        MPI.COMM_WORLD.Delete_attr(kw)
        c.Free()
