"""Every schedule builder of gpumpi.collectives, run on the process-free simulator.

Each collective has one checker that builds the schedules of all ranks, runs them with
``schedule.simulate`` and compares every buffer with an expectation computed directly
from the inputs (Python lists).  Elements name their origin (``"r3e1;"``: rank 3, element
1), so a misplaced block shows where it came from.  Reductions run with two operations:

* ``NONCOMM``: string concatenation, associative but not commutative, so the result is
  right only if the ranks are combined in rank order;
* ``COMM``: multiset union (sorted tuples), commutative, for the algorithms that need it
  (every contribution must still appear exactly once).

Both raise on ``None``, the simulator's content of an unwritten temporary.  Buffers a
collective leaves undefined (a non-root's ``RBUF`` in reduce, ``SBUF`` with ``inplace``,
rank 0's ``RBUF`` in exscan) are left out, so touching them raises.
"""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumpi.collectives import select
from gpumpi.collectives.schedule import (COPY, RBUF, RECV, RED, SBUF, SEND, Schedule, ScheduleError,
                                         simulate)

SIZES = list(range(1, 10)) + [13, 16]


def counts_n(size):
    return sorted({0, 1, 3, max(size - 1, 0), size + 1, 17})


def roots(size):
    return range(size) if size <= 9 else sorted({0, 1, size // 2, size - 1})


class NonComm:
    """Concatenation: right only in rank order."""

    commute = False

    @staticmethod
    def make(rank, i):
        return f"r{rank}e{i};"

    @staticmethod
    def op(a, b):
        return [x + y for x, y in zip(a, b)]

    @classmethod
    def expect(cls, ranks, i):
        return "".join(cls.make(k, i) for k in ranks)


class Comm:
    """Multiset union: order-free, every contribution exactly once."""

    commute = True

    @staticmethod
    def make(rank, i):
        return (f"r{rank}e{i}",)

    @staticmethod
    def op(a, b):
        return [tuple(sorted(x + y)) for x, y in zip(a, b)]

    @classmethod
    def expect(cls, ranks, i):
        return tuple(sorted(cls.make(k, i)[0] for k in ranks))


GARBAGE = "?"


def run(size, make, bufs, op=None):
    scheds = [make(r) for r in range(size)]
    for s in scheds:
        assert isinstance(s, Schedule)
    return simulate(scheds, bufs, op=op)


def block(rank, n, tag=""):
    return [f"{tag}r{rank}e{i};" for i in range(n)]


# --------------------------------------------------------------------------- checkers

def check_barrier(size, make):
    out = run(size, make, [{RBUF: []} for _ in range(size)])
    for r in range(size):
        for st_ in make(r).steps():
            assert st_[0] in (SEND, RECV) and st_[3] == st_[4] == 0
    assert all(o[RBUF] == [] for o in out)
    # every rank hears (directly or not) from every other: the dissemination closure
    if size > 1:
        heard = [{r} for r in range(size)]
        for rnd in range(max(len(make(r).rounds) for r in range(size))):
            new = [set(h) for h in heard]
            for r in range(size):
                for st_ in make(r).rounds[rnd]:
                    if st_[0] == RECV:
                        new[r] |= heard[st_[1]]
            heard = new
        assert all(h == set(range(size)) for h in heard)


def check_bcast(size, make, root, n):
    data = block(root, n)
    bufs = [{RBUF: list(data) if r == root else [GARBAGE] * n} for r in range(size)]
    out = run(size, make, bufs)
    assert all(o[RBUF] == data for o in out)


def check_gather(size, make, root, counts, inplace):
    offs = list(itertools.accumulate([0] + counts))
    bufs = []
    for r in range(size):
        b = {}
        if not (inplace and r == root):
            b[SBUF] = block(r, counts[r])
        if r == root:
            b[RBUF] = [GARBAGE] * offs[-1]
            if inplace:
                b[RBUF][offs[r]:offs[r + 1]] = block(r, counts[r])
        bufs.append(b)
    out = run(size, make, bufs)
    assert out[root][RBUF] == sum((block(i, counts[i]) for i in range(size)), [])
    for r in range(size):
        if SBUF in bufs[r]:
            assert out[r][SBUF] == block(r, counts[r])


def check_scatter(size, make, root, counts, inplace):
    src = sum((block(i, counts[i], "to") for i in range(size)), [])
    bufs = []
    for r in range(size):
        b = {}
        if r == root:
            b[SBUF] = list(src)
        if not (inplace and r == root):
            b[RBUF] = [GARBAGE] * counts[r]
        bufs.append(b)
    out = run(size, make, bufs)
    for r in range(size):
        if RBUF in bufs[r]:
            assert out[r][RBUF] == block(r, counts[r], "to"), r
    assert out[root][SBUF] == src


def check_allgather(size, make, counts, inplace):
    offs = list(itertools.accumulate([0] + counts))
    full = sum((block(i, counts[i]) for i in range(size)), [])
    bufs = []
    for r in range(size):
        b = {RBUF: [GARBAGE] * offs[-1]}
        if inplace:
            b[RBUF][offs[r]:offs[r + 1]] = block(r, counts[r])
        else:
            b[SBUF] = block(r, counts[r])
        bufs.append(b)
    out = run(size, make, bufs)
    for r in range(size):
        assert out[r][RBUF] == full, r


def check_alltoall(size, make, scounts, rcounts, inplace):
    """``scounts[r][j]``: units rank r sends to j (must equal ``rcounts[j][r]``)."""
    def sblock(r, j, k):
        return [f"{r}>{j}e{i};" for i in range(k)]

    bufs = []
    for r in range(size):
        data = sum((sblock(r, j, scounts[r][j]) for j in range(size)), [])
        if inplace:
            bufs.append({RBUF: data})
        else:
            bufs.append({SBUF: data, RBUF: [GARBAGE] * sum(rcounts[r])})
    out = run(size, make, bufs)
    for r in range(size):
        assert out[r][RBUF] == sum((sblock(j, r, rcounts[r][j]) for j in range(size)), []), r


def _inputs(fl, r, n):
    return [fl.make(r, i) for i in range(n)]


def check_reduce(size, make, root, n, inplace, fl):
    bufs = []
    for r in range(size):
        if r == root:
            bufs.append({RBUF: _inputs(fl, r, n)} if inplace else {SBUF: _inputs(fl, r, n), RBUF: [GARBAGE] * n})
        else:
            bufs.append({SBUF: _inputs(fl, r, n)})  # no RBUF: a non-root's must not be touched
    out = run(size, make, bufs, fl.op)
    assert out[root][RBUF] == [fl.expect(range(size), i) for i in range(n)]


def check_allreduce(size, make, n, inplace, fl):
    bufs = [{RBUF: _inputs(fl, r, n)} if inplace else {SBUF: _inputs(fl, r, n), RBUF: [GARBAGE] * n}
            for r in range(size)]
    out = run(size, make, bufs, fl.op)
    want = [fl.expect(range(size), i) for i in range(n)]
    for r in range(size):
        assert out[r][RBUF] == want, r


def check_reduce_scatter(size, make, counts, inplace, fl):
    offs = list(itertools.accumulate([0] + counts))
    total = offs[-1]
    bufs = [{RBUF: _inputs(fl, r, total)} if inplace else {SBUF: _inputs(fl, r, total), RBUF: [GARBAGE] * counts[r]}
            for r in range(size)]
    out = run(size, make, bufs, fl.op)
    for r in range(size):
        want = [fl.expect(range(size), i) for i in range(offs[r], offs[r + 1])]
        assert out[r][RBUF][:counts[r]] == want, r


def check_scan(size, make, n, inplace, fl, exclusive):
    bufs = []
    for r in range(size):
        if inplace:
            bufs.append({RBUF: _inputs(fl, r, n)})
        elif exclusive and r == 0:
            bufs.append({SBUF: _inputs(fl, r, n)})  # rank 0's RBUF is undefined in exscan
        else:
            bufs.append({SBUF: _inputs(fl, r, n), RBUF: [GARBAGE] * n})
    out = run(size, make, bufs, fl.op)
    for r in range(size):
        if exclusive and r == 0:
            if inplace:
                assert out[0][RBUF] == _inputs(fl, 0, n)  # untouched
            continue
        upto = range(r) if exclusive else range(r + 1)
        assert out[r][RBUF] == [fl.expect(upto, i) for i in range(n)], r


# --------------------------------------------------------------------------- per algorithm

def algs(coll):
    return select.ALGORITHMS[coll]


def mk(coll, alg, size, **kw):
    return lambda r: select.build(coll, r, size, algorithm=alg, **kw)


@pytest.mark.parametrize("size", SIZES + [32])
def test_barrier(size):
    check_barrier(size, mk("barrier", "dissemination", size))


@pytest.mark.parametrize("alg", algs("bcast"))
@pytest.mark.parametrize("size", SIZES)
def test_bcast(alg, size):
    for n in counts_n(size):
        for root in roots(size):
            check_bcast(size, mk("bcast", alg, size, root=root, n=n), root, n)


@pytest.mark.parametrize("coll", ["gather", "scatter"])
@pytest.mark.parametrize("size", SIZES)
def test_gather_scatter(coll, size):
    check = check_gather if coll == "gather" else check_scatter
    for alg in algs(coll):
        for n in counts_n(size):
            for root in roots(size):
                for inplace in (False, True):
                    def make(r, alg=alg, n=n, root=root, inplace=inplace):
                        return select.build(coll, r, size, algorithm=alg, root=root, n=n,
                                            inplace=inplace and r == root)
                    check(size, make, root, [n] * size, inplace)


def count_patterns(size):
    return [[0] * size, [3] * size, [i % 3 for i in range(size)], [(5 * i + 2) % 7 for i in range(size)],
            [17 if i == size - 1 else 0 for i in range(size)]]


@pytest.mark.parametrize("coll", ["gatherv", "scatterv"])
@pytest.mark.parametrize("size", SIZES)
def test_gatherv_scatterv(coll, size):
    check = check_gather if coll == "gatherv" else check_scatter
    for counts in count_patterns(size):
        for root in roots(size):
            for inplace in (False, True):
                def make(r, counts=counts, root=root, inplace=inplace):
                    return select.build(coll, r, size, root=root, n=counts[r], counts=counts if r == root else None,
                                        inplace=inplace and r == root)
                check(size, make, root, counts, inplace)


@settings(max_examples=60)
@given(st.data())
def test_vector_forms_random(data):
    size = data.draw(st.integers(1, 7))
    counts = data.draw(st.lists(st.integers(0, 5), min_size=size, max_size=size))
    root = data.draw(st.integers(0, size - 1))
    inplace = data.draw(st.booleans())

    def g(r):
        return select.build("gatherv", r, size, root=root, n=counts[r], counts=counts if r == root else None,
                            inplace=inplace and r == root)

    def s(r):
        return select.build("scatterv", r, size, root=root, n=counts[r], counts=counts if r == root else None,
                            inplace=inplace and r == root)

    check_gather(size, g, root, counts, inplace)
    check_scatter(size, s, root, counts, inplace)
    check_allgather(size, mk("allgatherv", "ring", size, counts=counts, inplace=inplace), counts, inplace)
    mat = data.draw(st.lists(st.lists(st.integers(0, 4), min_size=size, max_size=size), min_size=size,
                             max_size=size))
    if inplace:  # in place, every rank sends what it receives: the matrix is symmetric
        mat = [[mat[min(i, j)][max(i, j)] for j in range(size)] for i in range(size)]
    rc = [[mat[j][r] for j in range(size)] for r in range(size)]
    check_alltoall(size, lambda r: select.build("alltoallv", r, size, scounts=mat[r], rcounts=rc[r],
                                                inplace=inplace), mat, rc, inplace)
    for alg in algs("reduce_scatter"):
        check_reduce_scatter(size, mk("reduce_scatter", alg, size, counts=counts, inplace=inplace), counts,
                             inplace, Comm)
    check_reduce_scatter(size, mk("reduce_scatter", "reduce_scatterv", size, counts=counts, inplace=inplace,
                                  commute=False), counts, inplace, NonComm)


@pytest.mark.parametrize("alg", algs("allgather"))
@pytest.mark.parametrize("size", SIZES + [32])
def test_allgather(alg, size):
    for n in counts_n(size):
        for inplace in (False, True):
            check_allgather(size, mk("allgather", alg, size, n=n, inplace=inplace), [n] * size, inplace)


@pytest.mark.parametrize("size", SIZES)
def test_allgatherv(size):
    for counts in count_patterns(size):
        for inplace in (False, True):
            check_allgather(size, mk("allgatherv", "ring", size, counts=counts, inplace=inplace), counts, inplace)


@pytest.mark.parametrize("alg", algs("alltoall"))
@pytest.mark.parametrize("size", SIZES + [32])
def test_alltoall(alg, size):
    for n in counts_n(size):
        for inplace in (False, True):
            mat = [[n] * size for _ in range(size)]
            check_alltoall(size, mk("alltoall", alg, size, n=n, inplace=inplace), mat, mat, inplace)


@pytest.mark.parametrize("size", SIZES)
def test_alltoallv(size):
    for pattern in range(3):
        mat = [[(3 * i + 5 * j + pattern) % (4 + pattern) for j in range(size)] for i in range(size)]
        rc = [[mat[j][r] for j in range(size)] for r in range(size)]
        check_alltoall(size, lambda r: select.build("alltoallv", r, size, scounts=mat[r], rcounts=rc[r]),
                       mat, rc, False)
        sym = [[mat[min(i, j)][max(i, j)] for j in range(size)] for i in range(size)]
        check_alltoall(size, lambda r: select.build("alltoallv", r, size, rcounts=sym[r], inplace=True),
                       sym, sym, True)


def flavours(coll, alg):
    """(flavour, commute) pairs an algorithm must pass: every one with Comm, order-keeping ones with NonComm."""
    out = [(Comm, True)]
    if select._serves(coll, alg, False):
        out.append((NonComm, False))
    return out


@pytest.mark.parametrize("alg", algs("reduce"))
@pytest.mark.parametrize("size", SIZES)
def test_reduce(alg, size):
    for fl, commute in flavours("reduce", alg):
        for n in counts_n(size):
            for root in roots(size):
                for inplace in (False, True):
                    def make(r, n=n, root=root, inplace=inplace):
                        return select.build("reduce", r, size, algorithm=alg, root=root, n=n, commute=commute,
                                            inplace=inplace and r == root)
                    check_reduce(size, make, root, n, inplace, fl)


@pytest.mark.parametrize("alg", algs("allreduce"))
@pytest.mark.parametrize("size", SIZES + [32])
def test_allreduce(alg, size):
    for fl, commute in flavours("allreduce", alg):
        for n in counts_n(size):
            for inplace in (False, True):
                check_allreduce(size, mk("allreduce", alg, size, n=n, commute=commute, inplace=inplace),
                                n, inplace, fl)


@pytest.mark.parametrize("alg", algs("reduce_scatter_block"))
@pytest.mark.parametrize("size", SIZES)
def test_reduce_scatter_block(alg, size):
    for fl, commute in flavours("reduce_scatter_block", alg):
        for n in counts_n(size):
            for inplace in (False, True):
                make = mk("reduce_scatter_block", alg, size, n=n, commute=commute, inplace=inplace)
                check_reduce_scatter(size, make, [n] * size, inplace, fl)


@pytest.mark.parametrize("alg", algs("reduce_scatter"))
@pytest.mark.parametrize("size", SIZES)
def test_reduce_scatter(alg, size):
    for fl, commute in flavours("reduce_scatter", alg):
        for counts in count_patterns(size):
            for inplace in (False, True):
                make = mk("reduce_scatter", alg, size, counts=counts, commute=commute, inplace=inplace)
                check_reduce_scatter(size, make, counts, inplace, fl)


@pytest.mark.parametrize("coll", ["scan", "exscan"])
@pytest.mark.parametrize("size", SIZES + [32])
def test_scan(coll, size):
    for fl, commute in ((Comm, True), (NonComm, False)):
        for n in counts_n(size):
            for inplace in (False, True):
                check_scan(size, mk(coll, "recursive_doubling", size, n=n, commute=commute, inplace=inplace),
                           n, inplace, fl, coll == "exscan")


# --------------------------------------------------------------------------- properties of the builders

def all_calls(size):
    """(coll, algorithm, kwargs) for one rank-independent argument set per algorithm."""
    counts = [(3 * i + 1) % 4 for i in range(size)]
    for coll, names in select.ALGORITHMS.items():
        for alg in names:
            kw = {}
            if coll in ("allgatherv", "reduce_scatter"):
                kw["counts"] = counts
            elif coll == "alltoallv":
                kw["scounts"] = kw["rcounts"] = [2] * size
            elif coll in ("gatherv", "scatterv"):
                kw["counts"] = [2] * size
                kw["n"] = 2
            elif coll != "barrier":
                kw["n"] = 5
            if coll in ("bcast", "gather", "scatter", "gatherv", "scatterv", "reduce"):
                kw["root"] = size - 1
            yield coll, alg, kw


@pytest.mark.parametrize("size", [1, 2, 5, 8])
def test_deterministic_and_pure(size):
    for coll, alg, kw in all_calls(size):
        for r in range(size):
            a = select.build(coll, r, size, algorithm=alg, **dict(kw))
            b = select.build(coll, r, size, algorithm=alg, **dict(kw))
            assert a.rounds == b.rounds and a.tmp == b.tmp and a.algorithm == b.algorithm == alg, (coll, alg)
            for rnd in a.rounds:
                assert rnd and all(isinstance(s_, tuple) for s_ in rnd)
                for s_ in rnd:
                    if s_[0] in (SEND, RECV):
                        assert 0 <= s_[1] < size and s_[1] != r
                    elif s_[0] in (RED, COPY):
                        assert s_[5] > 0  # no empty local steps


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8])
def test_send_buffer_is_read_only(size):
    for coll, alg, kw in all_calls(size):
        for r in range(size):
            for s_ in select.build(coll, r, size, algorithm=alg, **dict(kw)).steps():
                if s_[0] == RECV:
                    assert s_[2] != SBUF, (coll, alg, s_)
                elif s_[0] in (RED, COPY):
                    assert s_[3] != SBUF, (coll, alg, s_)


def _user_ranges(s_):
    if s_[0] in (SEND, RECV):
        return [(s_[2], s_[3], s_[4])]
    return [(s_[1], s_[2], s_[2] + s_[5]), (s_[3], s_[4], s_[4] + s_[5])]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("inplace", [False, True])
def test_vector_forms_keep_blocks(size, inplace):
    """Builders of gatherv/scatterv/allgatherv/alltoallv never cross or split a block of SBUF or RBUF."""
    for pattern in count_patterns(size):
        offs = list(itertools.accumulate([0] + pattern))
        sym = [[pattern[max(i, j)] for j in range(size)] for i in range(size)]
        for r in range(size):
            calls = [("gatherv", dict(root=0, n=pattern[r], counts=pattern, inplace=inplace and r == 0),
                      {SBUF: [0, pattern[r]], RBUF: offs}),
                     ("scatterv", dict(root=0, n=pattern[r], counts=pattern, inplace=inplace and r == 0),
                      {SBUF: offs, RBUF: [0, pattern[r]]}),
                     ("allgatherv", dict(counts=pattern, inplace=inplace), {SBUF: [0, pattern[r]], RBUF: offs})]
            so = list(itertools.accumulate([0] + sym[r]))
            calls.append(("alltoallv", dict(scounts=sym[r], rcounts=sym[r], inplace=inplace), {SBUF: so, RBUF: so}))
            for coll, kw, blocks in calls:
                if coll in ("gatherv", "scatterv") and r != 0:
                    kw["counts"] = None
                for s_ in select.build(coll, r, size, **kw).steps():
                    for b, lo, hi in _user_ranges(s_):
                        if b in blocks and hi > lo:
                            edges = blocks[b]
                            assert any(edges[i] <= lo and hi <= edges[i + 1] for i in range(len(edges) - 1)), \
                                (coll, r, s_)


def test_no_zero_messages_outside_barrier():
    for size in (1, 3, 4, 7):
        for coll, alg, kw in all_calls(size):
            if coll == "barrier":
                continue
            for r in range(size):
                for s_ in select.build(coll, r, size, algorithm=alg, **dict(kw)).steps():
                    if s_[0] in (SEND, RECV):
                        assert s_[4] > s_[3], (coll, alg, s_)
            z = dict(kw)
            for key in ("n",):
                if key in z:
                    z[key] = 0
            for key in ("counts", "scounts", "rcounts"):
                if key in z:
                    z[key] = [0] * size
            for r in range(size):
                assert select.build(coll, r, size, algorithm=alg, **z).rounds == [], (coll, alg)


# --------------------------------------------------------------------------- selection

GRID_BYTES = [0, 1, 64, 256, 257, 2048, 2049, 12 * 1024, 80 * 1024, 512 * 1024, 4 << 20]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 8, 9, 16, 64, 100])
def test_select_table_grid(size):
    for coll in select.COLLECTIVES:
        for nbytes, commute in itertools.product(GRID_BYTES, (True, False)):
            unit = 8
            n = nbytes // unit
            kw = dict(n=n, commute=commute, unit=unit)
            if coll in ("allgatherv", "reduce_scatter", "gatherv", "scatterv"):
                kw["counts"] = [n] * size
            if coll == "alltoallv":
                kw["scounts"] = kw["rcounts"] = [n] * size
            name = select.algorithm_of(coll, size, **kw)
            assert name in select.ALGORITHMS[coll]
            assert select._serves(coll, name, commute)
            assert select.build(coll, 0, size, **kw).algorithm == name


def test_select_picks_mpich_like():
    a = select.algorithm_of
    assert a("bcast", 16, n=100) == "binomial"
    assert a("bcast", 4, n=1 << 20) == "binomial"
    assert a("bcast", 16, n=1 << 20) == "scatter_allgather"
    assert a("allgather", 8, n=8) == "recursive_doubling"
    assert a("allgather", 7, n=8) == "bruck"
    assert a("allgather", 8, n=1 << 20) == "ring"
    assert a("alltoall", 8, n=256) == "bruck"
    assert a("alltoall", 8, n=257) == "pairwise"
    assert a("alltoall", 4, n=8) == "pairwise"
    assert a("allreduce", 8, n=256, unit=8) == "recursive_doubling"
    assert a("allreduce", 8, n=4096, unit=8) == "rabenseifner"
    assert a("allreduce", 7, n=1 << 20, unit=8) == "ring"
    assert a("allreduce", 7, n=1 << 20, unit=8, commute=False) == "rabenseifner"
    assert a("reduce", 8, n=4096, unit=8) == "rabenseifner"
    assert a("reduce", 8, n=4, unit=8) == "binomial"
    assert a("reduce_scatter", 4, counts=[1 << 16] * 4, commute=False) == "reduce_scatterv"
    assert a("reduce_scatter_block", 4, n=1 << 16) == "pairwise"


@pytest.mark.parametrize("size", [2, 5, 8])
def test_select_end_to_end(size):
    """The table's own choices (forced to the large-message rows by a large unit) compute the right thing."""
    for unit in (1, 1 << 20):
        n = size + 1
        check_bcast(size, lambda r: select.build("bcast", r, size, root=1, n=n, unit=unit), 1, n)
        check_allgather(size, lambda r: select.build("allgather", r, size, n=n, unit=unit), [n] * size, False)
        mat = [[n] * size] * size
        check_alltoall(size, lambda r: select.build("alltoall", r, size, n=n, unit=unit), mat, mat, False)
        for fl in (Comm, NonComm):
            c = fl.commute
            check_reduce(size, lambda r: select.build("reduce", r, size, root=size - 1, n=n, unit=unit, commute=c),
                         size - 1, n, False, fl)
            check_allreduce(size, lambda r: select.build("allreduce", r, size, n=n, unit=unit, commute=c),
                            n, False, fl)
            check_reduce_scatter(size, lambda r: select.build("reduce_scatter_block", r, size, n=n, unit=unit,
                                                              commute=c), [n] * size, False, fl)


def test_select_errors():
    with pytest.raises(ValueError, match="unknown collective"):
        select.build("allscatter", 0, 2)
    with pytest.raises(ValueError, match="choices: recursive_doubling, rabenseifner, ring, reduce_bcast"):
        select.build("allreduce", 0, 2, n=4, algorithm="tree")
    with pytest.raises(ValueError, match="needs a commutative operation"):
        select.build("allreduce", 0, 2, n=4, commute=False, algorithm="ring")
    with pytest.raises(ValueError, match="needs a commutative operation"):
        select.build("reduce_scatter", 0, 2, counts=[1, 1], commute=False, algorithm="pairwise")
    with pytest.raises(ValueError, match="counts required"):
        select.build("gatherv", 0, 2, n=1)
    with pytest.raises(ValueError, match="one entry per rank"):
        select.build("allgatherv", 0, 3, counts=[1, 2])
    with pytest.raises(ValueError, match="negative count"):
        select.build("bcast", 0, 2, n=-1)
    with pytest.raises(ValueError, match="root outside"):
        select.build("reduce", 0, 2, n=1, root=2)
    with pytest.raises(ValueError, match="own block"):
        select.build("alltoallv", 0, 2, scounts=[1, 1], rcounts=[2, 1])


# --------------------------------------------------------------------------- the simulator's own checks

def test_simulate_rejects_round_hazards():
    good = Schedule([[(SEND, 1, RBUF, 0, 2), (RECV, 1, RBUF, 2, 4)]])
    peer = Schedule([[(RECV, 0, RBUF, 0, 2), (SEND, 0, RBUF, 2, 4)]])
    simulate([good, peer], [{RBUF: [1, 2, 3, 4]}, {RBUF: [5, 6, 7, 8]}])
    bad = Schedule([[(SEND, 1, RBUF, 0, 2), (RECV, 1, RBUF, 1, 3)]])
    with pytest.raises(ScheduleError, match="also sends from"):
        simulate([bad, peer], [{RBUF: [1, 2, 3, 4]}, {RBUF: [5, 6, 7, 8]}])
    with pytest.raises(ScheduleError, match="does not have"):
        simulate([Schedule([[(SEND, 1, RBUF, 0, 1)]]), Schedule([[(RECV, 0, RBUF, 0, 1)]])], [{}, {RBUF: [0]}])
    with pytest.raises(ScheduleError, match="deadlock"):
        simulate([Schedule([[(RECV, 1, RBUF, 0, 1)]]), Schedule([[(RECV, 0, RBUF, 0, 1)]])],
                 [{RBUF: [0]}, {RBUF: [0]}])
    with pytest.raises(ScheduleError, match="overlapping"):
        simulate([Schedule([[(COPY, RBUF, 0, RBUF, 1, 2)]])], [{RBUF: [1, 2, 3]}])
    with pytest.raises(TypeError):  # a temporary read before it is written
        s0 = Schedule([[(RED, 2, 0, RBUF, 0, 1, True)]], tmp=(1,))
        simulate([s0], [{RBUF: ["a"]}], op=NonComm.op)


# --------------------------------------------------------------------------- the shape of the algorithms

def shape(coll, size, **kw):
    """(most communication rounds at a rank, most units a rank sends)."""
    rounds = sent = 0
    for r in range(size):
        s = select.build(coll, r, size, **kw)
        rounds = max(rounds, sum(1 for rd in s.rounds if any(x[0] in (SEND, RECV) for x in rd)))
        sent = max(sent, sum(x[4] - x[3] for x in s.steps() if x[0] == SEND))
    return rounds, sent


def log2c(size):
    return (size - 1).bit_length()


@pytest.mark.parametrize("size", [2, 4, 8, 16])
def test_shape_power_of_two(size):
    n = 64 * size
    assert shape("barrier", size, algorithm="dissemination")[0] == log2c(size)
    assert shape("allreduce", size, n=n, algorithm="recursive_doubling") == (log2c(size), n * log2c(size))
    assert shape("allreduce", size, n=n, algorithm="rabenseifner") == (2 * log2c(size), 2 * n * (size - 1) // size)
    assert shape("allreduce", size, n=n, algorithm="ring") == (2 * (size - 1), 2 * n * (size - 1) // size)
    assert shape("allgather", size, n=n, algorithm="recursive_doubling") == (log2c(size), n * (size - 1))
    assert shape("allgather", size, n=n, algorithm="bruck") == (log2c(size), n * (size - 1))
    assert shape("alltoall", size, n=n, algorithm="bruck") == (log2c(size), n * size // 2 * log2c(size))
    assert shape("alltoall", size, n=n, algorithm="pairwise") == (size - 1, n * (size - 1))
    assert shape("scan", size, n=n)[0] == log2c(size)
    # scatter-allgather moves at most 2n through a rank, the binomial root n per child
    assert shape("bcast", size, n=n, algorithm="scatter_allgather")[1] <= 2 * n
    assert shape("reduce", size, n=n, algorithm="rabenseifner")[1] <= 2 * n


@pytest.mark.parametrize("size", [3, 5, 6, 7, 12, 13])
def test_shape_other_sizes(size):
    n = 60 * size
    p = 1 << (size.bit_length() - 1)
    assert shape("barrier", size, algorithm="dissemination")[0] == log2c(size)
    # the fold: two more rounds, one more full-size message
    assert shape("allreduce", size, n=n, algorithm="recursive_doubling")[0] == log2c(p) + 2
    assert shape("allgather", size, n=n, algorithm="bruck")[0] == log2c(size)
    assert shape("alltoall", size, n=n, algorithm="bruck")[0] == log2c(size)
    assert shape("allreduce", size, n=n, algorithm="ring")[1] <= 2 * n
