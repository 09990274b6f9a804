"""Collectives on intercommunicators, at 2-5 ranks with uneven groups, host and sim buffers.

Group A is world ranks ``[0, na)``, group B the rest.  Every collective (blocking, a
nonblocking and a persistent batch, and the lowercase object forms) is checked against a
NumPy expectation computed from the world ranks, with MPI's root rules (ROOT at the root,
PROC_NULL in the rest of its group, the root's rank in the other group) and different sizes
each way where MPI allows them.  Bad roots and IN_PLACE fail the MPI way.
"""

import numpy as np
import pytest

from gpumpi.testing import run_ranks

pytestmark = pytest.mark.timeout(180)

SPLITS = [(2, 1), (4, 1), (5, 2), (3, 2)]  # (world size, size of group A): 1+1, 1+3, 2+3, 2+1


def vals(w, k, seed=0):
    return (np.arange(k) * (w + 1) + w + 7 * seed).astype("f8")


def _mk(kind, a):
    from gpumpi.testing import SimDeviceArray

    a = np.ascontiguousarray(a, dtype="f8")
    return SimDeviceArray.from_numpy(a) if kind == "sim" else a.copy()


def _get(a):
    return a if isinstance(a, np.ndarray) else a.get()


def eq(got, want, what):
    got = _get(got)
    assert got.shape == np.shape(want) and np.array_equal(got, want), (what, got, want)


def _setup(na):
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    in_a = w.rank < na
    intra = w.Split(0 if in_a else 1, 0)
    ic = intra.Create_intercomm(0, w, na if in_a else 0)
    mine = list(range(na)) if in_a else list(range(na, w.size))
    theirs = list(range(na, w.size)) if in_a else list(range(na))
    return MPI, w, ic, in_a, mine, theirs


def _buffer_collectives(na, kind):
    MPI, w, ic, in_a, mine, theirs = _setup(na)
    me, L, R = ic.rank, ic.size, ic.remote_size
    assert (L, R) == (len(mine), len(theirs))
    my_w = w.rank
    k_me, k_them = (2, 3) if in_a else (3, 2)  # different sizes each way
    mk = lambda a: _mk(kind, a)  # noqa: E731

    ic.Barrier()
    # rooted: each group is the root group in turn, every root
    for root_in_a in (True, False):
        root_group = in_a == root_in_a
        for root in range(len(mine) if root_group else len(theirs)):
            rootw = (mine if root_group else theirs)[root]
            arg = (MPI.ROOT if me == root else MPI.PROC_NULL) if root_group else root
            # Bcast
            b = mk(vals(my_w, 4) if root_group else np.zeros(4))
            ic.Bcast(b, arg)
            eq(b, vals(my_w if root_group else rootw, 4), "Bcast")
            # Gather / Gatherv
            if root_group and arg == MPI.ROOT:
                rb = mk(np.zeros(R * 3))
                ic.Gather(None, rb, arg)
                eq(rb, np.concatenate([vals(x, 3) for x in theirs]), "Gather")
                cnt = [j + 1 for j in range(R)]
                rb = mk(np.zeros(sum(cnt)))
                ic.Gatherv(None, [rb, cnt, MPI.DOUBLE], arg)
                eq(rb, np.concatenate([vals(x, j + 1) for j, x in enumerate(theirs)]), "Gatherv")
            elif root_group:
                ic.Gather(None, None, arg)
                ic.Gatherv(None, None, arg)
            else:
                ic.Gather(mk(vals(my_w, 3)), None, arg)
                ic.Gatherv(mk(vals(my_w, me + 1)), None, arg)
            # Scatter / Scatterv
            blocks = [vals(100 * rootw + x, 3) for x in (theirs if root_group else mine)]
            if root_group and arg == MPI.ROOT:
                ic.Scatter(mk(np.concatenate(blocks)), None, arg)
                vb = [vals(100 * rootw + x, j + 1) for j, x in enumerate(theirs)]
                ic.Scatterv([mk(np.concatenate(vb)), [j + 1 for j in range(R)], MPI.DOUBLE], None, arg)
            elif root_group:
                ic.Scatter(None, None, arg)
                ic.Scatterv(None, None, arg)
            else:
                rb = mk(np.zeros(3))
                ic.Scatter(None, rb, arg)
                eq(rb, blocks[me], "Scatter")
                rb = mk(np.zeros(me + 1))
                ic.Scatterv(None, rb, arg)
                eq(rb, vals(100 * rootw + my_w, me + 1), "Scatterv")
            # Reduce (SUM and MAX)
            for op, red in ((MPI.SUM, np.sum), (MPI.MAX, np.max)):
                if root_group and arg == MPI.ROOT:
                    rb = mk(np.zeros(5))
                    ic.Reduce(None, rb, op, arg)
                    eq(rb, red([vals(x, 5) for x in theirs], axis=0), "Reduce")
                elif root_group:
                    ic.Reduce(None, None, op, arg)
                else:
                    ic.Reduce(mk(vals(my_w, 5)), None, op, arg)
    # Allgather(v), Alltoall(v/w): what arrives comes from the remote group only
    rb = mk(np.zeros(R * k_them))
    ic.Allgather(mk(vals(my_w, k_me)), rb)
    eq(rb, np.concatenate([vals(x, k_them) for x in theirs]), "Allgather")
    rb = mk(np.zeros(sum(j + 1 for j in range(R))))
    ic.Allgatherv(mk(vals(my_w, me + 1)), [rb, [j + 1 for j in range(R)], MPI.DOUBLE])
    eq(rb, np.concatenate([vals(x, j + 1) for j, x in enumerate(theirs)]), "Allgatherv")
    rb = mk(np.zeros(R * k_them))
    ic.Alltoall(mk(np.concatenate([vals(1000 * my_w + x, k_me) for x in theirs])), rb)
    eq(rb, np.concatenate([vals(1000 * x + my_w, k_them) for x in theirs]), "Alltoall")

    def f(s, r, a):  # count sent by local rank s of a group (A: a) to local rank r of the other
        return (s + 2 * r) % 3 if a else (2 * s + r) % 3 + 1

    sc = [f(me, j, in_a) for j in range(R)]
    rc = [f(j, me, not in_a) for j in range(R)]
    sbuf = np.concatenate([vals(1000 * my_w + x, c) for x, c in zip(theirs, sc)])
    want = np.concatenate([vals(1000 * x + my_w, c) for x, c in zip(theirs, rc)])
    rb = mk(np.zeros(sum(rc)))
    ic.Alltoallv([mk(sbuf), sc, MPI.DOUBLE], [rb, rc, MPI.DOUBLE])
    eq(rb, want, "Alltoallv")
    rb = mk(np.zeros(sum(rc)))
    sd = [8 * int(x) for x in np.cumsum([0] + sc[:-1])]
    rd = [8 * int(x) for x in np.cumsum([0] + rc[:-1])]
    ic.Alltoallw([mk(sbuf), sc, sd, [MPI.DOUBLE] * R], [rb, rc, rd, [MPI.DOUBLE] * R])
    eq(rb, want, "Alltoallw")
    # reductions to all
    rb = mk(np.zeros(6))
    ic.Allreduce(mk(vals(my_w, 6)), rb, MPI.SUM)
    eq(rb, np.sum([vals(x, 6) for x in theirs], axis=0), "Allreduce")
    T = 12  # |A| * rc_A == |B| * rc_B
    rc1 = T // L
    rb = mk(np.zeros(rc1))
    ic.Reduce_scatter_block(mk(vals(my_w, T)), rb, MPI.SUM)
    eq(rb, np.sum([vals(x, T) for x in theirs], axis=0)[me * rc1:(me + 1) * rc1], "Reduce_scatter_block")
    counts = [T - 2 * (L - 1)] + [2] * (L - 1)
    offs = np.cumsum([0] + counts)
    rb = mk(np.zeros(counts[me]))
    ic.Reduce_scatter(mk(vals(my_w, T)), rb, counts, MPI.SUM)
    eq(rb, np.sum([vals(x, T) for x in theirs], axis=0)[offs[me]:offs[me + 1]], "Reduce_scatter")
    # nonblocking and persistent
    rb1, rb2 = mk(np.zeros(6)), mk(np.zeros(R * k_them))
    reqs = [ic.Iallreduce(mk(vals(my_w, 6)), rb1, MPI.SUM), ic.Iallgather(mk(vals(my_w, k_me)), rb2), ic.Ibarrier()]
    MPI.Request.Waitall(reqs)
    eq(rb1, np.sum([vals(x, 6) for x in theirs], axis=0), "Iallreduce")
    eq(rb2, np.concatenate([vals(x, k_them) for x in theirs]), "Iallgather")
    sb = mk(vals(my_w, 6))
    p = ic.Allreduce_init(sb, rb1, MPI.SUM)
    for _ in range(2):
        p.Start()
        p.Wait()
        eq(rb1, np.sum([vals(x, 6) for x in theirs], axis=0), "Allreduce_init")
    p.Free()
    b = mk(vals(my_w, 3) if in_a else np.zeros(3))
    arg = (MPI.ROOT if me == 0 else MPI.PROC_NULL) if in_a else 0
    q = ic.Ibcast(b, arg)
    q.Wait()
    eq(b, vals(my_w if in_a else 0, 3), "Ibcast")
    ic.Free()
    return "ok"


@pytest.mark.parametrize("n,na", SPLITS)
@pytest.mark.parametrize("kind", ["host", "sim"])
def test_buffer_collectives(n, na, kind):
    assert run_ranks(_buffer_collectives, n, timeout=150, args=(na, kind)) == ["ok"] * n


def _object_collectives(na):
    MPI, w, ic, in_a, mine, theirs = _setup(na)
    me, R = ic.rank, ic.remote_size
    my_w = w.rank
    ic.barrier()
    for root_in_a in (True, False):
        root_group = in_a == root_in_a
        for root in range(len(mine) if root_group else len(theirs)):
            rootw = (mine if root_group else theirs)[root]
            arg = (MPI.ROOT if me == root else MPI.PROC_NULL) if root_group else root
            got = ic.bcast({"from": my_w} if arg == MPI.ROOT else None, arg)
            assert got == (None if root_group else {"from": rootw})
            got = ic.gather(("g", my_w), arg)
            assert got == ([("g", x) for x in theirs] if arg == MPI.ROOT else None)
            got = ic.scatter([(rootw, x) for x in theirs] if arg == MPI.ROOT else None, arg)
            assert got == (None if root_group else (rootw, my_w))
            got = ic.reduce(np.full(2, my_w), MPI.SUM, arg)
            if arg == MPI.ROOT:
                assert np.array_equal(got, np.full(2, sum(theirs)))
            else:
                assert got is None
            got = ic.reduce([my_w], lambda a, b: a + b, arg)  # rank order of the remote group
            assert got == (theirs if arg == MPI.ROOT else None)
    assert ic.allgather(my_w) == theirs
    assert ic.alltoall([(my_w, x) for x in theirs]) == [(x, my_w) for x in theirs]
    assert ic.allreduce(my_w, MPI.SUM) == sum(theirs)
    assert ic.allreduce([my_w], lambda a, b: a + b) == theirs
    assert R == len(theirs)
    ic.Free()
    return "ok"


@pytest.mark.parametrize("n,na", SPLITS)
def test_object_collectives(n, na):
    assert run_ranks(_object_collectives, n, timeout=120, args=(na,)) == ["ok"] * n


def _bad_input(na):
    MPI, w, ic, in_a, mine, theirs = _setup(na)
    R = ic.remote_size
    out = []
    for root in (R, -2, 1 << 20):
        for call in (lambda: ic.Bcast(np.zeros(1), root), lambda: ic.Reduce(np.zeros(1), None, MPI.SUM, root),
                     lambda: ic.bcast(1, root), lambda: ic.gather(1, root)):
            try:
                call()
                out.append("no error")
            except MPI.Exception as e:
                out.append(e.Get_error_class() == MPI.ERR_ROOT)
    for call in (lambda: ic.Allreduce(MPI.IN_PLACE, np.zeros(2)), lambda: ic.Allgather(MPI.IN_PLACE, np.zeros(R))):
        try:
            call()
            out.append("no error")
        except TypeError:
            out.append(True)
    # the communicator still works afterwards (no rank entered the failed calls)
    assert ic.allreduce(1) == R
    ic.Free()
    return all(x is True for x in out), out


@pytest.mark.parametrize("n,na", [(2, 1), (5, 2)])
def test_bad_root_and_in_place(n, na):
    for ok, out in run_ranks(_bad_input, n, timeout=60, args=(na,)):
        assert ok, out
