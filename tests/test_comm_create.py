"""Communicator creation (gpumpi.comm, gpumpi._ctxid) at 1-5 ranks: Dup, Idup, Split,
Split_type, Create, Create_group, Create_from_group, Compare; context ids under threads and
storms; bad input and the error class MPI gives it."""

import pytest

from gpumpi.testing import expected_nodes, run_ranks

pytestmark = pytest.mark.timeout(180)
SIZES = [1, 2, 3, 4, 5]


# --- the constructors, checked against the MPI rule for each ------------------------------
def _constructors():
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    r, n = w.rank, w.size
    out = {}
    d = w.Dup()
    out["dup"] = (MPI.Comm.Compare(w, d), d.rank, d.size)
    c, req = w.Idup()
    req.Wait()
    out["idup"] = (MPI.Comm.Compare(w, c), c.allreduce(r))
    s = w.Split(r % 2, n - r)  # by parity, in reverse rank order
    out["split"] = (s.size, s.rank, s.allgather(r))
    g = w.Get_group()
    sub = g.Incl([x for x in range(n) if x % 2 == 0])
    cc = w.Create(sub)
    out["create"] = None if cc == MPI.COMM_NULL else (cc.size, cc.rank, cc.allgather(r))
    mine = g.Incl([x for x in range(n) if x % 2 == r % 2])  # disjoint groups, one per parity (MPI-2.2)
    cd = w.Create(mine)
    out["create_disjoint"] = (cd.size, cd.allgather(r))
    cd.Free()
    mine.Free()
    if r % 2 == 0:
        cg = w.Create_group(sub, tag=7)
        out["create_group"] = (cg.size, cg.rank, cg.allgather(r))
        cg.Free()
    rev = g.Incl(list(reversed(range(n))))
    cf = MPI.Intracomm.Create_from_group(rev, "gpumpi.test")
    out["from_group"] = (MPI.Comm.Compare(w, cf), cf.rank, cf.allgather(r))
    st = w.Split_type(MPI.COMM_TYPE_SHARED, key=-r)
    out["shared"] = (st.size, st.rank)
    out["undefined"] = w.Split_type(MPI.UNDEFINED) == MPI.COMM_NULL
    info = MPI.Info.Create()
    out["unguided"] = w.Split_type(MPI.COMM_TYPE_HW_UNGUIDED, info=info) == MPI.COMM_NULL
    info.Set("mpi_hw_resource_type", "mpi_shared_memory")
    hg = w.Split_type(MPI.COMM_TYPE_HW_GUIDED, info=info)
    out["guided"] = hg.size
    info.Set("mpi_hw_resource_type", "no-such-resource")
    out["guided_unknown"] = w.Split_type(MPI.COMM_TYPE_HW_GUIDED, info=info) == MPI.COMM_NULL
    info.Free()
    hints = MPI.Info.Create({"gpumpi_test": "yes"})
    di = w.Dup_with_info(hints)
    got = di.Get_info()
    out["info"] = (got.Get("gpumpi_test"), d.Get_info().Get("gpumpi_test"))
    got.Free()
    hints.Free()
    for x in (d, c, s, cf, st, hg, di) + ((cc,) if cc != MPI.COMM_NULL else ()):
        x.Free()
    g.Free()
    sub.Free()
    rev.Free()
    return out


@pytest.mark.parametrize("n", SIZES)
def test_constructors_follow_the_mpi_rules(n):
    from gpumpi.constants import CONGRUENT, SIMILAR

    got = run_ranks(_constructors, n, timeout=120)
    evens = [x for x in range(n) if x % 2 == 0]
    for r, out in enumerate(got):
        assert out["dup"] == (CONGRUENT, r, n)
        assert out["idup"] == (CONGRUENT, n * (n - 1) // 2)
        mine = [x for x in range(n) if x % 2 == r % 2]
        order = sorted(mine, key=lambda x: n - x)  # key n - x: highest rank first
        assert out["split"] == (len(mine), order.index(r), order)
        assert out["create_disjoint"] == (len(mine), mine)
        if r % 2 == 0:
            assert out["create"] == (len(evens), evens.index(r), evens)
            assert out["create_group"] == (len(evens), evens.index(r), evens)
        else:
            assert out["create"] is None
        rev = list(reversed(range(n)))
        assert out["from_group"] == (SIMILAR if n > 1 else CONGRUENT, rev.index(r), rev)
        node = expected_nodes(n)
        mates = [x for x in range(n) if node[x] == node[r]]  # one node under run_ranks
        assert out["shared"] == (len(mates), len(mates) - 1 - mates.index(r))  # key -r reverses the order
        assert out["undefined"] and out["guided_unknown"]
        assert out["unguided"] == (len(set(node)) == 1)  # the next level below the job: none on one node
        assert out["guided"] == len(mates)
        assert out["info"] == ("yes", None)


# --- context ids: threads creating on overlapping communicators at once ----------------------
def _threads(rounds):
    import threading

    from gpumpi import MPI

    w = MPI.COMM_WORLD
    r, n = w.rank, w.size
    # two overlapping communicators: ranks 0..n-2 and 1..n-1 (the middle ranks are in both)
    a = w.Split(0 if r < n - 1 else MPI.UNDEFINED, r)
    b = w.Split(0 if r > 0 else MPI.UNDEFINED, r)
    made = {}

    def storm(name, comm):
        ctxs = []
        for i in range(rounds):
            if i % 3 == 0:
                c = comm.Dup()
            elif i % 3 == 1:
                c, req = comm.Idup()
                req.Wait()
            else:
                c = comm.Split(0, -comm.rank)
            # the new communicator carries its own traffic only: every member sends its
            # (name, round) and must receive the same from all
            got = c.allgather((name, i, c.rank))
            assert [g[:2] for g in got] == [(name, i)] * c.size, got
            ctxs.append(c._ctx)
            c.Free()
        made[name] = ctxs

    ts = [threading.Thread(target=storm, args=(nm, cm)) for nm, cm in (("a", a), ("b", b)) if cm != MPI.COMM_NULL]
    for t in ts:
        t.start()
    for t in ts:
        t.join(100)
    assert not any(t.is_alive() for t in ts), "a creation thread hung"
    for c in (a, b):
        if c != MPI.COMM_NULL:
            c.Free()
    return made


@pytest.mark.parametrize("n", [3, 4])
def test_concurrent_creations_on_overlapping_communicators_never_share_a_context_id(n):
    rounds = 24
    got = run_ranks(_threads, n, timeout=150, args=(rounds,))
    for r, made in enumerate(got):
        assert len(made) == (1 if r in (0, n - 1) else 2)
        ids = [x for v in made.values() for x in v]
        assert len(ids) == len(set(ids)), (r, made)  # distinct in every process
        assert all(len(v) == rounds for v in made.values())


# --- storms: hundreds of communicators created and freed --------------------------------------
def _storm(count):
    import os

    from gpumpi import MPI
    from gpumpi import _runtime as rt

    w = MPI.COMM_WORLD
    eng = rt.ENGINE
    shm = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    before = len(eng.matcher._ctx)
    ids = []
    for i in range(count):
        c = w.Dup() if i % 2 else w.Split(w.rank % 2, i)
        c.Barrier()
        ids.append(c._ctx)
        c.Free()
    w.Barrier()
    after = len(eng.matcher._ctx)
    shm2 = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    return ids, before, after, sorted(shm2 - shm)


@pytest.mark.parametrize("n", [2, 4])
def test_split_dup_storm_leaks_no_context_state_or_shared_memory(n):
    count = 200
    got = run_ranks(_storm, n, timeout=150, args=(count,))
    for ids, before, after, new_shm in got:
        assert len(set(ids)) == count and ids == sorted(ids)  # fresh ids, never reused
        assert after <= before + 2  # the freed contexts' queues are gone (world may add its own)
        assert new_shm == []


# --- Idup never waits for the other ranks --------------------------------------------------------
def _idup_then_p2p():
    import numpy as np

    from gpumpi import MPI

    w = MPI.COMM_WORLD
    r = w.rank
    buf = np.zeros(4)
    if r == 0:
        c, req = w.Idup()  # the other rank has not called Idup yet: this must not block
        w.Send(np.arange(4.0), 1, 5)
        req.Wait()
    else:
        w.Recv(buf, 0, 5)
        c, req = w.Idup()
        req.Wait()
    # a collective issued while an Idup is in flight keeps its place in the call order
    c2, req2 = w.Idup()
    total = w.allreduce(r + 1)
    req2.Wait()
    res = (c.allreduce(r), c2.allreduce(1), total, buf.tolist())
    c.Free()
    c2.Free()
    return res


def test_idup_is_nonblocking_and_keeps_the_collective_order():
    got = run_ranks(_idup_then_p2p, 2, timeout=60)
    assert got[0][:3] == (1, 2, 3) and got[1] == (1, 2, 3, [0.0, 1.0, 2.0, 3.0])


# --- bad input ----------------------------------------------------------------------------------
def _bad():
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    r, n = w.rank, w.size
    res = {}

    def cls(fn):
        try:
            fn()
        except MPI.Exception as e:
            return e.Get_error_class()
        except (TypeError, ValueError) as e:
            return type(e).__name__
        return "no error"

    res["split_negative_color"] = cls(lambda: w.Split(-5))
    res["split_undefined"] = w.Split(MPI.UNDEFINED, r) == MPI.COMM_NULL  # collective, no communicator
    res["group_bad_rank"] = cls(lambda: w.Get_group().Incl([n]))
    res["split_type_bad"] = cls(lambda: w.Split_type(12345))
    g = MPI.COMM_SELF.Get_group()
    if n > 1 and r == 0:
        # a group that is not a subgroup of the communicator's (COMM_SELF of another rank)
        res["create_group_not_member"] = cls(lambda: w.Create_group(w.Get_group().Incl([1])))
    res["create_group_not_a_group"] = cls(lambda: w.Create_group("nope"))
    res["create_group_bad_tag"] = cls(lambda: w.Create_group(w.Get_group(), tag=-3))
    c = w.Dup()
    c2 = MPI.Intracomm(c)  # a second handle on the same communicator
    c.Free()
    res["freed"] = cls(lambda: c.Dup())
    res["freed_copy"] = cls(lambda: c2.Split(0))
    res["free_world"] = cls(lambda: w.Free())
    res["dup_info_type"] = cls(lambda: w.Dup_with_info(None))
    g.Free()
    w.Barrier()
    return res


@pytest.mark.parametrize("n", [1, 2, 3])
def test_bad_input_raises_the_mpi_error_class(n):
    from gpumpi.errors import ERR_ARG, ERR_COMM, ERR_GROUP, ERR_RANK, ERR_TAG

    got = run_ranks(_bad, n, timeout=60)
    for r, res in enumerate(got):
        assert res["split_negative_color"] == ERR_ARG
        assert res["split_undefined"] is True
        assert res["group_bad_rank"] == ERR_RANK
        assert res["split_type_bad"] == ERR_ARG
        assert res["create_group_not_a_group"] == "TypeError"
        assert res["create_group_bad_tag"] == ERR_TAG
        assert res["freed"] == ERR_COMM and res["freed_copy"] == ERR_COMM
        assert res["free_world"] == ERR_COMM
        assert res["dup_info_type"] == "TypeError"
        if n > 1 and r == 0:
            assert res["create_group_not_member"] == ERR_GROUP


def _dups_keep_topology():
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    cart = w.Create_cart([w.size], [True])
    d1 = cart.Dup()
    d2, req = cart.Idup()
    req.Wait()
    d3 = MPI.Intracomm(cart).Dup()  # through a plain Intracomm handle
    res = [type(d1).__name__, type(d2).__name__, d3.Get_topology() == MPI.CART,
           d2.Shift(0, 1) == cart.Shift(0, 1)]
    for c in (d1, d2, d3, cart):
        c.Free()
    return res


@pytest.mark.parametrize("n", [1, 3])
def test_every_duplicate_keeps_the_topology(n):
    for res in run_ranks(_dups_keep_topology, n, timeout=60):
        assert res == ["Cartcomm", "Cartcomm", True, True]


def _disconnect_one_sided():
    """distwq's exit: workers Disconnect the communicator their broker never disconnects (it only
    drops it).  MPICH frees without a barrier; so must gpumpi, or the workers hang."""
    from gpumpi import MPI

    world = MPI.COMM_WORLD
    me = world.Get_rank()
    sub = world.Dup()
    got = sub.bcast(me * 10 if me == 0 else None, root=0)
    if me == 0:
        keep = sub  # the "broker": never disconnects, never frees
    else:
        sub.Disconnect()
        keep = None
    world.Barrier()  # reached by everyone: nobody waits in Disconnect for the broker
    try:
        MPI.COMM_WORLD.Disconnect()
        refused = False
    except MPI.Exception as e:
        refused = e.Get_error_class() == MPI.ERR_COMM
    return got == 0 and refused and (keep is not None) == (me == 0)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_disconnect_frees_without_waiting_for_the_others_as_mpich(n):
    assert run_ranks(_disconnect_one_sided, n, timeout=60) == [True] * n
