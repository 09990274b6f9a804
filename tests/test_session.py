"""Sessions (gpumpi.session): process sets, groups, handles, error handlers and buffers.

Expectations: the MPI-4.1 standard (section 11.3) and mpi4py 4.1.2 on MPICH (psets
``mpi://WORLD`` then ``mpi://SELF``; ``ERR_SESSION`` on a null session; ``ERR_ARG`` for
an unknown pset or index)."""

import pickle

import pytest

from gpumpi.testing import run_ranks

pytestmark = pytest.mark.timeout(120)


def _psets():
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    s = MPI.Session.Init()
    names = [s.Get_nth_pset(i) for i in range(s.Get_num_psets())]
    sizes = {}
    groups = {}
    for name in names:
        info = s.Get_pset_info(name)
        sizes[name] = info.Get("mpi_size")
        info.Free()
        g = s.Create_group(name)
        g2 = MPI.Group.Create_from_session_pset(s, name)
        assert MPI.Group.Compare(g, g2) == MPI.IDENT
        groups[name] = (g.Get_rank(), g.Get_size(), MPI.Group.Compare(g, w.Get_group()))
        g.Free()
        g2.Free()
    s.Finalize()
    return w.rank, w.size, names, sizes, groups


@pytest.mark.parametrize("n", [1, 2, 3])
def test_psets_groups_and_info_describe_world_and_self(n):
    for r, (rank, size, names, sizes, groups) in enumerate(run_ranks(_psets, n, timeout=60)):
        assert (rank, size) == (r, n)
        assert names == ["mpi://WORLD", "mpi://SELF"]
        assert sizes == {"mpi://WORLD": str(n), "mpi://SELF": "1"}
        assert groups["mpi://WORLD"] == (r, n, 0)  # IDENT with COMM_WORLD's group
        assert groups["mpi://SELF"][:2] == (0, 1)
        assert groups["mpi://SELF"][2] == (0 if n == 1 else 3)  # IDENT at one rank, else UNEQUAL


def test_null_and_finalized_sessions_raise_err_session():
    from gpumpi import MPI

    null = MPI.Session()
    assert not null and null == MPI.SESSION_NULL
    calls = [("Get_num_psets", ()), ("Get_nth_pset", (0,)), ("Get_info", ()), ("Get_pset_info", ("mpi://SELF",)),
             ("Create_group", ("mpi://SELF",)), ("Get_errhandler", ()), ("Set_errhandler", (MPI.ERRORS_RETURN,)),
             ("Call_errhandler", (MPI.ERR_OTHER,)), ("Finalize", ()), ("Flush_buffer", ()),
             ("Detach_buffer", ()), ("Iflush_buffer", ())]
    s = MPI.Session.Init()
    other = MPI.Session(s)
    assert s and s == other and s != MPI.SESSION_NULL
    s.Finalize()
    assert s == MPI.SESSION_NULL and other  # the other reference is stale, not null
    for obj in (null, other):
        for name, args in calls:
            with pytest.raises(MPI.Exception) as ei:
                getattr(obj, name)(*args)
            assert ei.value.Get_error_class() == MPI.ERR_SESSION, name
    null.free()  # mpi4py's safe free: nothing on a null session


def test_bad_pset_names_and_indices_raise_err_arg():
    from gpumpi import MPI

    s = MPI.Session.Init()
    for call, arg in ((s.Get_nth_pset, -1), (s.Get_nth_pset, s.Get_num_psets()), (s.Get_pset_info, "@qerty!#$"),
                      (s.Create_group, "mpi://world"), (s.Create_group, "")):
        with pytest.raises(MPI.Exception) as ei:
            call(arg)
        assert ei.value.Get_error_class() == MPI.ERR_ARG
    with pytest.raises(TypeError):
        s.Create_group(42)
    with pytest.raises(TypeError):
        s.Get_nth_pset("0")
    with pytest.raises(TypeError):
        MPI.Group.Create_from_session_pset(MPI.COMM_WORLD, "mpi://SELF")
    s.Finalize()


def test_handles_pickling_and_subclasses():
    from gpumpi import MPI

    s = MPI.Session.Init()
    assert MPI.Session.fromhandle(s.handle) == s
    assert MPI.Session.fromint(s.toint()) == s and MPI.Session.f2py(s.py2f()) == s
    assert s.toint() != MPI.SESSION_NULL.toint()
    with pytest.raises(ValueError):
        pickle.dumps(s)
    assert pickle.loads(pickle.dumps(MPI.SESSION_NULL)) is MPI.SESSION_NULL

    class MyGroup(MPI.Group):
        pass

    g = MyGroup.Create_from_session_pset(s, "mpi://SELF")
    assert type(g) is MyGroup and g.Get_size() == 1
    g.Free()
    info = s.Get_info()
    assert dict(info.items()) == {"thread_level": "MPI_THREAD_MULTIPLE", "strict_finalize": "0",
                                  "mpi_memory_alloc_kinds": "mpi,system"}  # MPICH's keys
    info.Free()
    with pytest.raises(TypeError):
        s.Get_num_psets(None)  # mpi4py: an Info (INFO_NULL), not None
    with pytest.raises(TypeError):
        MPI.Session.Init(None)
    s.free()  # finalizes
    assert not s
    with pytest.raises(TypeError):
        MPI.Session(MPI.COMM_WORLD)


def test_error_handlers():
    from gpumpi import MPI

    s = MPI.Session.Init(errhandler=MPI.ERRORS_ARE_FATAL)
    eh = s.Get_errhandler()
    assert eh == MPI.ERRORS_RETURN  # mpi4py puts rc.errors' handler on every new session
    eh.Free()
    seen = []
    user = MPI.Session.Create_errhandler(lambda obj, code: seen.append((obj == s, code)))
    s.Set_errhandler(user)
    s.Call_errhandler(MPI.ERR_OTHER)
    with pytest.raises(MPI.Exception):
        s.Get_pset_info("nope")  # goes through the handler, then raises
    assert seen == [(True, MPI.ERR_OTHER), (True, MPI.ERR_ARG)]
    with pytest.raises(MPI.Exception) as ei:
        s.Set_errhandler(MPI.ERRHANDLER_NULL)
    assert ei.value.Get_error_class() == MPI.ERR_ERRHANDLER
    comm_eh = MPI.Comm.Create_errhandler(lambda c, code: None)
    with pytest.raises(MPI.Exception) as ei:
        s.Set_errhandler(MPI.Errhandler(comm_eh))  # a communicator's handler, even through a copy
    assert ei.value.Get_error_class() == MPI.ERR_ARG
    comm_eh.Free()
    with pytest.raises(TypeError):
        s.Set_errhandler(None)
    s.Set_errhandler(MPI.ERRORS_RETURN)
    user.Free()
    more = [MPI.Session.Create_errhandler(lambda o, c: None) for _ in range(32)]
    with pytest.raises(RuntimeError):
        MPI.Session.Create_errhandler(lambda o, c: None)  # mpi4py's 32 per object kind
    for e in more:
        e.Free()
    MPI.Session.Create_errhandler(lambda o, c: None).Free()  # slots come back
    s.Finalize()


def test_buffer_attach_detach_flush():
    from gpumpi import MPI

    s = MPI.Session.Init()
    buf = MPI.Alloc_mem(1 << 12)
    s.Attach_buffer(buf)
    with pytest.raises(MPI.Exception) as ei:
        s.Attach_buffer(buf)
    assert ei.value.Get_error_class() == MPI.ERR_BUFFER
    s.Flush_buffer()
    req = s.Iflush_buffer()
    req.Wait()
    old = s.Detach_buffer()
    assert old.address == buf.address and old.nbytes == buf.nbytes
    with pytest.raises(MPI.Exception) as ei:
        s.Detach_buffer()
    assert ei.value.Get_error_class() == MPI.ERR_BUFFER
    MPI.Free_mem(buf)
    s.Attach_buffer(MPI.BUFFER_AUTOMATIC)
    assert s.Detach_buffer() == MPI.BUFFER_AUTOMATIC
    s.Attach_buffer(None)  # mpi4py: None is BUFFER_AUTOMATIC
    assert s.Detach_buffer() == MPI.BUFFER_AUTOMATIC
    s.Attach_buffer(MPI.BUFFER_AUTOMATIC)
    s.Finalize()  # detaches
