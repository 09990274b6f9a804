"""Collectives given bad input: a clear error on the rank(s) at fault, and nobody hangs.

Invalid roots (ERR_ROOT) in the blocking, nonblocking and persistent forms; operations
not defined for the datatype (ERR_OP); an op that is not an Op (TypeError); send and
receive buffers of a reduction that disagree (ValueError, as mpi4py); null and freed
communicators (ERR_COMM); uncommitted datatypes (ERR_TYPE); a receive buffer too small
on one rank (that rank gets ERR_TRUNCATE, the others complete); a collective request
cannot be cancelled; a nonblocking collective progresses on a rank that only tests.
After every refused call the next collective must still line up on all ranks.
"""

import numpy as np
import pytest

from gpumpi.testing import expected_nodes, one_node_only, run_ranks

pytestmark = pytest.mark.timeout(120)


def _raises(MPI, cls, f, start=None):
    """``f()`` raises MPI.Exception of class ``cls`` whose message starts with ``start``."""
    with pytest.raises(MPI.Exception) as info:
        f()
    assert info.value.Get_error_class() == cls, (start, info.value.Get_error_class(), str(info.value))
    if start is not None:
        assert str(info.value).startswith(start + ":"), (start, str(info.value))
    return str(info.value)


def _lined_up(c):
    got = np.zeros(c.size, "i")
    c.Allgather(np.array([c.rank], "i"), got)
    assert got.tolist() == list(range(c.size))


def _bad_roots():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    n = c.size
    a, b = np.zeros(4), np.zeros(4 * n)
    calls = {
        "Bcast": lambda root: c.Bcast(a, root),
        "Gather": lambda root: c.Gather(a, b, root),
        "Gatherv": lambda root: c.Gatherv(a, [b, [4] * n, [4 * p for p in range(n)], MPI.DOUBLE], root),
        "Scatter": lambda root: c.Scatter(b, a, root),
        "Scatterv": lambda root: c.Scatterv([b, [4] * n, [4 * p for p in range(n)], MPI.DOUBLE], a, root),
        "Reduce": lambda root: c.Reduce(a, np.zeros(4), MPI.SUM, root),
    }
    for name, f in calls.items():
        for root in (-1, n, 2 ** 31):
            for form, call in ((name, f), ("I" + name[0].lower() + name[1:], None), (name + "_init", None)):
                if call is None:
                    meth = getattr(c, form)

                    def call(root, meth=meth, form=form, name=name):
                        import inspect

                        fn = calls[name]
                        # the same arguments, through the other form's method
                        src = inspect.getsource(fn)
                        expr = src.split("lambda root:")[1].strip().rstrip(",")
                        expr = expr.replace(f"c.{name}(", "meth(", 1)
                        return eval(expr, {"c": c, "meth": meth, "a": a, "b": b, "n": n, "MPI": MPI,
                                           "np": np, "root": root})
                msg = _raises(MPI, MPI.ERR_ROOT, lambda: call(root), form)
                assert str(root) in msg, msg
    _lined_up(c)
    return True


@pytest.mark.parametrize("n", [1, 3])
def test_invalid_root_is_err_root_in_every_form(n):
    assert run_ranks(_bad_roots, n, timeout=60) == [True] * n


def _bad_ops():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    n = c.size
    z = np.ones(3, "c16")
    f = np.ones(3, "f8")
    for buf, op in ((z, MPI.MAX), (z, MPI.MIN), (z, MPI.BAND), (f, MPI.BAND), (f, MPI.BXOR),
                    (f, MPI.MAXLOC), (np.ones(3, "?"), MPI.SUM)):
        for name, call in (
            ("Allreduce", lambda: c.Allreduce(buf, np.zeros_like(buf), op)),
            ("Reduce", lambda: c.Reduce(buf, np.zeros_like(buf), op, 0)),
            ("Iallreduce", lambda: c.Iallreduce(buf, np.zeros_like(buf), op)),
            ("Allreduce_init", lambda: c.Allreduce_init(buf, np.zeros_like(buf), op)),
            ("Scan", lambda: c.Scan(buf, np.zeros_like(buf), op)),
            ("Exscan", lambda: c.Exscan(buf, np.zeros_like(buf), op)),
            ("Reduce_scatter_block", lambda: c.Reduce_scatter_block(np.tile(buf, n), np.zeros_like(buf), op)),
            ("Reduce_scatter", lambda: c.Reduce_scatter(np.tile(buf, n), np.zeros_like(buf), [3] * n, op)),
        ):
            _raises(MPI, MPI.ERR_OP, call, name)
    for bad in ("sum", np.add, None, 5, lambda a, b: a + b):
        for name, call in (
            ("Allreduce", lambda: c.Allreduce(f, np.zeros(3), bad)),
            ("Reduce", lambda: c.Reduce(f, np.zeros(3), bad, 0)),
            ("Ireduce", lambda: c.Ireduce(f, np.zeros(3), bad, 0)),
            ("Scan_init", lambda: c.Scan_init(f, np.zeros(3), bad)),
        ):
            with pytest.raises(TypeError) as info:
                call()
            assert str(info.value).startswith(name + ":"), str(info.value)
    # a freed user op and OP_NULL
    op = MPI.Op.Create(lambda a, b, t: None, True)
    op2 = MPI.Op(op)
    op.Free()
    _raises(MPI, MPI.ERR_OP, lambda: c.Allreduce(f, np.zeros(3), op2), "Allreduce")
    _raises(MPI, MPI.ERR_OP, lambda: c.Allreduce(f, np.zeros(3), MPI.OP_NULL), "Allreduce")
    _lined_up(c)
    return True


@pytest.mark.parametrize("n", [1, 2])
def test_op_not_defined_for_the_type_is_err_op_and_a_non_op_is_a_type_error(n):
    assert run_ranks(_bad_ops, n, timeout=60) == [True] * n


def _mismatch():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    n = c.size
    cases = [
        ("Allreduce", lambda: c.Allreduce(np.ones(3), np.zeros(4))),
        ("Allreduce", lambda: c.Allreduce(np.ones(3), np.zeros(3, "i8"))),
        ("Allreduce", lambda: c.Allreduce([np.ones(3), MPI.DOUBLE], [np.zeros(6, "f4"), MPI.FLOAT])),
        ("Reduce", lambda: c.Reduce(np.ones(3), np.zeros(2), MPI.SUM, 0) if c.rank == 0 else
         (_ for _ in ()).throw(ValueError("Reduce: (only the root checks)"))),
        ("Iallreduce", lambda: c.Iallreduce(np.ones(3), np.zeros(4))),
        ("Allreduce_init", lambda: c.Allreduce_init(np.ones(3, "i4"), np.zeros(3, "i8"))),
        ("Scan", lambda: c.Scan(np.ones(3), np.zeros(2))),
        ("Exscan", lambda: c.Exscan(np.ones(3), np.zeros(3, "f4"))),
        ("Reduce_scatter_block", lambda: c.Reduce_scatter_block(np.ones(3 * n), np.zeros(2))),
        ("Reduce_scatter_block", lambda: c.Reduce_scatter_block(np.ones(3 * n), np.zeros(3, "i8"))),
        ("Reduce_scatter", lambda: c.Reduce_scatter(np.ones(3 * n), np.zeros(2), [3] * n)),
        ("Reduce_scatter", lambda: c.Reduce_scatter(np.ones(3 * n + 1), np.zeros(3), [3] * n)),
        ("Reduce_scatter", lambda: c.Reduce_scatter(np.ones(3 * n), np.zeros(3, "f4"), [3] * n)),
    ]
    for name, call in cases:
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value).startswith(name + ":"), (name, str(info.value))
    _lined_up(c)
    return True


@pytest.mark.parametrize("n", [1, 3])
def test_reduction_send_and_receive_mismatch_is_a_value_error(n):
    assert run_ranks(_mismatch, n, timeout=60) == [True] * n


def _bad_comms(stale_only):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    d = c.Dup()
    d.Free()
    stale = MPI.Intracomm(c.Dup())
    other = MPI.Comm(stale)
    other.Free()  # ``stale`` is another reference to the freed communicator
    a = np.zeros(2)
    for comm in ((stale,) if stale_only else (MPI.COMM_NULL, d)):
        for name, call in (
            ("Barrier", lambda: comm.Barrier()),
            ("Bcast", lambda: comm.Bcast(a, 0)),
            ("Allreduce", lambda: comm.Allreduce(a, np.zeros(2))),
            ("Iallreduce", lambda: comm.Iallreduce(a, np.zeros(2))),
            ("Allgather_init", lambda: comm.Allgather_init(a, np.zeros(2 * c.size))),
            ("Alltoallw", lambda: comm.Alltoallw([a, MPI.DOUBLE], [np.zeros(2 * c.size), MPI.DOUBLE])),
            ("Reduce_scatter", lambda: comm.Reduce_scatter(a, np.zeros(2), None)),
        ):
            if not hasattr(comm, name):
                continue
            _raises(MPI, MPI.ERR_COMM, call, name)
        for name, call in (("bcast", lambda: comm.bcast(1, 0)), ("allreduce", lambda: comm.allreduce(1))):
            if hasattr(comm, name):
                _raises(MPI, MPI.ERR_COMM, call, name)
    _lined_up(c)
    return True


@pytest.mark.parametrize("n", [1, 3])
def test_null_and_freed_communicators_are_err_comm(n):
    assert run_ranks(_bad_comms, n, timeout=60, args=(False,)) == [True] * n


@pytest.mark.parametrize("n", [1, 3])
def test_another_reference_to_a_freed_communicator_is_err_comm(n):
    """As a stale reference to a freed Op is ERR_OP: the handle is gone from the table."""
    assert run_ranks(_bad_comms, n, timeout=60, args=(True,)) == [True] * n


def _uncommitted():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    n = c.size
    vec = MPI.DOUBLE.Create_vector(2, 1, 2)  # not committed
    a = np.zeros(3 * n)
    for name, call in (
        ("Bcast", lambda: c.Bcast([a, 1, vec], 0)),
        ("Ibcast", lambda: c.Ibcast([a, 1, vec], 0)),
        ("Allreduce", lambda: c.Allreduce([np.ones(3), 1, vec], [a, 1, vec])),
        ("Allgather", lambda: c.Allgather([np.ones(3), 1, vec], [np.zeros(3 * n), 1, vec])),
        ("Gather_init", lambda: c.Gather_init([np.ones(3), 1, vec], [np.zeros(3 * n), 1, vec], 0)),
        ("Alltoallw", lambda: c.Alltoallw([np.ones(3 * n), [1] * n, [0] * n, [vec] * n],
                                          [np.zeros(3 * n), [1] * n, [0] * n, [vec] * n])),
    ):
        _raises(MPI, MPI.ERR_TYPE, call, name)
    vec.Free()
    _lined_up(c)
    return True


@pytest.mark.parametrize("n", [1, 3])
def test_uncommitted_datatype_is_err_type(n):
    assert run_ranks(_uncommitted, n, timeout=60) == [True] * n


def _too_small(name, bad, root, count):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    small = count // 2
    try:
        if name == "Bcast":
            buf = np.arange(count, dtype="d") if r == root else np.zeros(small if r == bad else count)
            c.Bcast(buf, root)
            ok = np.array_equal(buf, np.arange(count, dtype="d"))
        elif name == "Ibcast":
            buf = np.arange(count, dtype="d") if r == root else np.zeros(small if r == bad else count)
            c.Ibcast(buf, root).Wait()
            ok = np.array_equal(buf, np.arange(count, dtype="d"))
        elif name == "Gather":  # the root's receive blocks are too small
            rb = np.zeros(n * small) if r == root else None
            c.Gather(np.full(count, float(r)), rb, root)
            ok = True
        elif name == "Scatter":  # rank ``bad``'s receive buffer is too small
            sb = np.repeat(np.arange(n, dtype="d"), count) if r == root else None
            rb = np.zeros(small if r == bad else count)
            c.Scatter(sb, rb, root)
            ok = np.array_equal(rb, np.full(count, float(r)))
        else:
            raise AssertionError(name)
    except MPI.Exception as e:
        return e.Get_error_class(), str(e)
    return "ok" if ok else "wrong data"


@pytest.mark.parametrize("name", ["Bcast", "Ibcast", "Gather", "Scatter"])
@pytest.mark.parametrize("count", [4, 20_000])  # eager and rendezvous
def test_receive_buffer_too_small_on_one_rank_is_err_truncate_there_only(name, count):
    from gpumpi import MPI

    n = 3
    # on several nodes a broadcast is hierarchical: a node leader relays, and a leader whose buffer
    # is too small passes on what it has, so its members fail too (with an error, never wrong data)
    relays = len(set(expected_nodes(n))) > 1 and name in ("Bcast", "Ibcast")
    for root in range(n):
        bad = root if name == "Gather" else (root + 1) % n
        got = run_ranks(_too_small, n, timeout=30, args=(name, bad, root, count))
        for r, res in enumerate(got):
            if r == bad:
                assert res[0] == MPI.ERR_TRUNCATE, (name, root, bad, res)
                assert res[1].startswith(name + ":"), res
            elif relays and res != "ok":
                assert res[0] in (MPI.ERR_TRUNCATE, MPI.ERR_OTHER, MPI.ERR_COUNT) and res[1].startswith(name + ":"), res
            else:
                assert res == "ok", (name, root, bad, r, res)


def _no_cancel():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    a, b = np.ones(3) * c.rank, np.zeros(3)
    for req in (c.Iallreduce(a, b), c.Ibarrier(), c.Allreduce_init(a, b)):
        if isinstance(req, MPI.Prequest):
            req.Start()
        with pytest.raises(MPI.Exception):
            req.Cancel()
        st = MPI.Status()
        req.Wait(st)
        assert not st.Is_cancelled()
        if isinstance(req, MPI.Prequest):
            req.Free()
    assert b.tolist() == [sum(range(c.size))] * 3
    return True


@pytest.mark.parametrize("n", [1, 3])
def test_a_collective_request_cannot_be_cancelled(n):
    assert run_ranks(_no_cancel, n, timeout=60) == [True] * n


def _progress(spinner, big):
    import time

    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    k = 100_000 if big else 5
    a, b = np.full(k, r + 1.0), np.zeros(k)
    g = np.zeros(n * k)
    reqs = [c.Iallreduce(a, b), c.Iallgather(a, g), c.Ibarrier()]
    if r == spinner or spinner < 0:
        # compute first (no MPI call at all), then only Test: the collectives must finish
        t = time.monotonic()
        x = 0
        while time.monotonic() - t < 0.05:
            x += 1
        deadline = time.monotonic() + 20
        while not all(q.Test() for q in reqs):
            assert time.monotonic() < deadline, "the collectives never completed under Test"
    else:
        MPI.Request.Waitall(reqs)
    assert np.array_equal(b, np.full(k, n * (n + 1) / 2))
    assert np.array_equal(g, np.repeat(np.arange(1.0, n + 1), k))
    return True


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("spinner", [0, 1, -1])  # -1: every rank only tests
@pytest.mark.parametrize("big", [False, True])
def test_nonblocking_collective_progresses_on_a_rank_that_only_tests(n, spinner, big):
    assert run_ranks(_progress, n, timeout=30, args=(spinner, big)) == [True] * n


def _user_op_raises():
    from gpumpi import MPI

    c = MPI.COMM_WORLD

    def op_fn(a, b, dt):  # raises on rank 1 only
        if c.rank == 1:
            raise ZeroDivisionError("boom")
        np.frombuffer(b, "d")[:] += np.frombuffer(a, "d")

    op = MPI.Op.Create(op_fn, True)
    try:
        c.Allreduce(np.ones(4), np.zeros(4), op)
        res = "ok"
    except MPI.Exception as e:
        res = (e.Get_error_class(), str(e))
    op.Free()
    _lined_up(c)
    return res


def test_a_user_op_that_raises_fails_its_rank_only_and_hangs_nobody():
    # which ranks apply the op is the flat schedule's (hierarchical: rank 1 of nodes [0, 0, 1] only sends)
    one_node_only(3, "the flat allreduce schedule (rank 1 applies the op)")
    from gpumpi import MPI

    got = run_ranks(_user_op_raises, 3, timeout=60)
    assert got[1][0] == MPI.ERR_OTHER and "ZeroDivisionError: boom" in got[1][1], got
    assert got[0] == got[2] == "ok", got  # rank 1 still sent its part: the others complete
