"""Intercommunicators: creation, queries, Dup/Split/Create/Merge, Free, and point-to-point
addressing the remote group, at 2-5 ranks with uneven groups; bad leaders fail the MPI way."""

import numpy as np
import pytest

from gpumpi.testing import run_ranks

pytestmark = pytest.mark.timeout(180)

SPLITS = [(2, 1), (4, 1), (5, 2), (4, 3)]  # (world size, size of group A = world ranks [0, na))


def _make(na, leader_last=False):
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    in_a = w.rank < na
    mine = list(range(na)) if in_a else list(range(na, w.size))
    theirs = list(range(na, w.size)) if in_a else list(range(na))
    intra = w.Split(0 if in_a else 1, 0)
    # leaders: rank 0 of each group, or the last one; the remote leader as a rank of the peer (world)
    ll = len(mine) - 1 if leader_last else 0
    rl = theirs[-1] if leader_last else theirs[0]
    ic = intra.Create_intercomm(ll, w, rl, tag=7)
    return MPI, w, intra, ic, in_a, mine, theirs


def _creation(na, leader_last):
    MPI, w, intra, ic, in_a, mine, theirs = _make(na, leader_last)
    assert type(ic) is MPI.Intercomm and ic.Is_inter() and ic.is_inter and not ic.is_intra
    assert (ic.size, ic.rank, ic.remote_size) == (len(mine), mine.index(w.rank), len(theirs))
    wg = w.Get_group()
    assert ic.Get_group().Translate_ranks(list(range(ic.size)), wg) == mine
    rg = ic.Get_remote_group()
    assert rg.Translate_ranks(list(range(rg.size)), wg) == theirs and rg.rank == MPI.UNDEFINED
    assert ic.remote_group.size == len(theirs)
    assert MPI.Comm.fromint(ic.toint()) == ic and type(MPI.Comm.fromint(ic.toint())) is MPI.Intercomm
    with pytest.raises(TypeError):
        MPI.Intercomm(intra)
    with pytest.raises(TypeError):
        MPI.Intracomm(ic)
    # Compare and Dup
    d = ic.Dup()
    assert type(d) is MPI.Intercomm
    assert (ic.Compare(ic), ic.Compare(d), ic.Compare(intra)) == (MPI.IDENT, MPI.CONGRUENT, MPI.UNEQUAL)
    assert d.allgather(w.rank) == theirs
    # Merge: the group passing high=False first; equal: the group of the lower world rank first
    m = ic.Merge(not in_a)
    assert (m.size, m.rank) == (w.size, w.rank) and type(m) is MPI.Intracomm
    assert m.allgather(w.rank) == list(range(w.size))
    m2 = d.Merge(in_a)  # A high: B first
    assert m2.rank == (w.rank - na if not in_a else w.rank + w.size - na)
    m3 = ic.Merge(True)
    assert m3.rank == w.rank
    # Split by parity of the world rank: the odd (even) ranks of A with the odd (even) ranks of B
    s = ic.Split(w.rank % 2, -w.rank)
    lm = sorted((x for x in mine if x % 2 == w.rank % 2), reverse=True)
    rm = sorted((x for x in theirs if x % 2 == w.rank % 2), reverse=True)
    if rm:
        assert (s.size, s.rank, s.remote_size) == (len(lm), lm.index(w.rank), len(rm))
        assert s.allgather(w.rank) == rm
        s.Free()
    else:
        assert s == MPI.COMM_NULL
    assert ic.Split(MPI.UNDEFINED) == MPI.COMM_NULL
    t = ic.Split_type(MPI.COMM_TYPE_SHARED)
    assert ic.Compare(t) == MPI.CONGRUENT
    t.Free()
    # Create: the first rank of each group only
    g = ic.Get_group().Incl([0])
    c = ic.Create(g)
    if ic.rank == 0:
        assert (c.size, c.remote_size) == (1, 1) and c.allgather(w.rank) == [theirs[0]]
        c.Free()
    else:
        assert c == MPI.COMM_NULL
    for x in (m, m2, m3, d, ic, intra):
        x.Free()
    with pytest.raises(MPI.Exception):
        ic.Get_remote_size()
    return "ok"


@pytest.mark.parametrize("n,na", SPLITS)
def test_creation_and_queries(n, na):
    assert run_ranks(_creation, n, timeout=120, args=(na, n == 5)) == ["ok"] * n


def _p2p(na):
    MPI, w, intra, ic, in_a, mine, theirs = _make(na)
    R = ic.remote_size
    me = ic.rank
    # every rank sends its world rank to every remote rank, tag = receiver's rank
    reqs = [ic.Isend(np.array([w.rank], "i"), j, tag=j) for j in range(R)]
    got = {}
    for _ in range(R):
        st = MPI.Status()
        b = np.zeros(1, "i")
        ic.Recv(b, MPI.ANY_SOURCE, me, st)
        got[st.Get_source()] = int(b[0])
    MPI.Request.Waitall(reqs)
    assert got == {j: theirs[j] for j in range(R)}  # sources are remote ranks
    # objects, probe, persistent, partitioned: rank 0 of each group with the remote rank 0
    if me == 0:
        ic.send({"w": w.rank}, 0, tag=3)
        st = MPI.Status()
        assert ic.probe(0, 3, st) and st.Get_source() == 0
        assert ic.recv(None, 0, 3) == {"w": theirs[0]}
        ic.Send(np.full(3, w.rank, "d"), 0, 4)
        m = ic.Mprobe(0, 4)
        b = np.zeros(3)
        m.Recv(b)
        assert (b == theirs[0]).all()
        sb, rb = np.full(4, w.rank, "d"), np.zeros(4)
        ps, pr = ic.Send_init(sb, 0, 5), ic.Recv_init(rb, 0, 5)
        for _ in range(2):
            MPI.Prequest.Startall([pr, ps])
            MPI.Request.Waitall([pr, ps])
            assert (rb == theirs[0]).all()
        ps.Free()
        pr.Free()
        sb, rb = np.full(4, w.rank, "d"), np.zeros(4)
        ps, pr = ic.Psend_init(sb, 2, 0, 6), ic.Precv_init(rb, 2, 0, 6)
        pr.Start()
        ps.Start()
        ps.Pready_range(0, 1)
        MPI.Request.Waitall([ps, pr])
        assert (rb == theirs[0]).all()
        ps.Free()
        pr.Free()
        v = ic.sendrecv(w.rank, 0, 8, None, 0, 8)
        assert v == theirs[0]
    # an out-of-range destination is ERR_RANK against the REMOTE size
    with pytest.raises(MPI.Exception) as e:
        ic.Send(np.zeros(1), R, 0)
    assert e.value.Get_error_class() == MPI.ERR_RANK
    ic.Barrier()
    ic.Free()
    intra.Free()
    return "ok"


@pytest.mark.parametrize("n,na", SPLITS)
def test_point_to_point_addresses_the_remote_group(n, na):
    assert run_ranks(_p2p, n, timeout=120, args=(na,)) == ["ok"] * n


def _bad(case):
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    na = 1
    in_a = w.rank < na
    intra = w.Split(0 if in_a else 1, 0)
    try:
        if case == "local_leader":
            intra.Create_intercomm(intra.size, w, na if in_a else 0)
        elif case == "remote_leader":
            intra.Create_intercomm(0, w, w.size)
        elif case == "overlap":
            w.Create_intercomm(0, w, 1)
        elif case == "tag":
            intra.Create_intercomm(0, w, na if in_a else 0, tag=-5)
    except MPI.Exception as e:
        return e.Get_error_class()
    return None


@pytest.mark.parametrize("case,code", [("local_leader", "ERR_RANK"), ("remote_leader", "ERR_RANK"),
                                       ("overlap", "ERR_COMM"), ("tag", "ERR_TAG")])
def test_bad_leaders_fail_every_rank(case, code):
    from gpumpi import MPI

    assert run_ranks(_bad, 3, timeout=60, args=(case,)) == [getattr(MPI, code)] * 3


def _from_groups():
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    r, n = w.rank, w.size
    g = w.Get_group()
    low, high = g.Range_incl([(0, n // 2 - 1, 1)]), g.Range_incl([(n // 2, n - 1, 1)])
    mine, other = (low, high) if r < n // 2 else (high, low)
    ic = MPI.Intercomm.Create_from_groups(mine, 0, other, other.Get_size() - 1, "gpumpi.test.groups")
    # an intercommunicator allreduce gives each group the sum over the OTHER group
    res = (ic.Get_rank(), ic.Get_size(), ic.Get_remote_size(), ic.allreduce(r))
    try:
        MPI.Intercomm.Create_from_groups(mine, 0, mine, 0, "gpumpi.test.overlap")
    except MPI.Exception as e:
        res += (e.Get_error_class(),)
    ic.Free()
    for x in (g, low, high):
        x.Free()
    return res


@pytest.mark.parametrize("n", [2, 3, 5])
def test_create_from_groups_joins_two_halves_without_a_parent(n):
    from gpumpi.errors import ERR_GROUP

    got = run_ranks(_from_groups, n, timeout=60)
    h = n // 2
    for r, res in enumerate(got):
        lo = r < h
        size, rsize = (h, n - h) if lo else (n - h, h)
        other_sum = sum(range(h, n)) if lo else sum(range(h))
        assert res == (r if lo else r - h, size, rsize, other_sum, ERR_GROUP), (r, res)


def _inter_idup():
    import numpy as np

    from gpumpi import MPI

    w = MPI.COMM_WORLD
    r, n = w.rank, w.size
    half = w.Split(int(r >= n // 2), r)
    ic = half.Create_intercomm(0, w, n // 2 if r < n // 2 else 0, tag=3)
    # the low group's leader Idups, then blocks in a send to a rank of the other group that
    # has not called Idup yet: a nonblocking duplicate must not wait for it
    buf = np.zeros(2)
    if r == 0:
        d, req = ic.Idup()
        ic.Send(np.array([1.0, 2.0]), 0, tag=9)
        req.Wait()
    elif r == n // 2:
        ic.Recv(buf, 0, tag=9)
        d, req = ic.Idup()
        req.Wait()
    else:
        d, req = ic.Idup()
        req.Wait()
    res = (MPI.Comm.Compare(ic, d), d.Get_remote_size(), d.allreduce(r), buf.tolist())
    for c in (d, ic, half):
        c.Free()
    return res


@pytest.mark.parametrize("n", [2, 3, 5])
def test_intercomm_idup_is_nonblocking(n):
    from gpumpi.constants import CONGRUENT

    got = run_ranks(_inter_idup, n, timeout=60)
    h = n // 2
    for r, res in enumerate(got):
        lo = r < h
        other = sum(range(h, n)) if lo else sum(range(h))
        assert res[:3] == (CONGRUENT, n - h if lo else h, other), (r, res)
        if r == h:
            assert res[3] == [1.0, 2.0]


def _plain_handles():
    from gpumpi import MPI

    w = MPI.COMM_WORLD
    r, n = w.rank, w.size
    half = w.Split(int(r >= n // 2), r)
    ic = half.Create_intercomm(0, w, n // 2 if r < n // 2 else 0, tag=4)
    plain = MPI.Comm(w)
    d = plain.Dup()
    s = plain.Split(r % 2, r)
    res = (MPI.Comm(ic).Is_inter(), plain.Is_inter(), type(d).__name__, MPI.Comm.Compare(w, d), s.size)
    for c in (d, s, ic, half):
        c.Free()
    return res


@pytest.mark.parametrize("n", [2, 3])
def test_plain_comm_handles_tell_inter_from_intra_and_duplicate(n):
    from gpumpi.constants import CONGRUENT

    for r, res in enumerate(run_ranks(_plain_handles, n, timeout=60)):
        assert res == (True, False, "Comm", CONGRUENT, len([x for x in range(n) if x % 2 == r % 2])), (r, res)
