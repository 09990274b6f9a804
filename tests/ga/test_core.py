"""gpumpi.ga's runtime (ga.state, groups, synchronization, handles, inquiry, transfers, local_data,
mirrored): GA's classic checks (test.F / ga4py test.py / testc.c) at 1-5 ranks, every element
type, regular / irregular / ghost / group layouts, both transfer paths (direct copies into mapped
memory, and the window's datatype path), the simulated device, and bad input.  Expectations are
NumPy computations on a replicated model of the array."""

import numpy as np
import pytest

from gpumpi.testing import device_windows_across_nodes, expected_nodes, run_ranks

NRANKS = [1, 2, 3, 4, 5]
TYPES = ["C_INT", "C_LONG", "C_LONGLONG", "C_FLOAT", "C_DBL", "C_SCPL", "C_DCPL"]


def _values(dt, shape, seed):
    rng = np.random.default_rng(seed)
    v = rng.integers(-50, 50, shape)
    if np.dtype(dt).kind == "c":
        return (v + 1j * rng.integers(-50, 50, shape)).astype(dt)
    return v.astype(dt)


def _classic(layout: str, direct: bool):
    """GA's test.F sequence on one array per type; returns the number of checks done."""
    from gpumpi import ga
    from gpumpi.ga import handles

    handles.DIRECT = direct
    me, n = ga.nodeid(), ga.nnodes()
    checks = 0
    dims = (9, 7)
    for tname in TYPES:
        gt = getattr(ga, tname)
        dt = ga.dtype(gt)
        if layout == "regular":
            g = ga.create(gt, dims, "A", chunk=[2, -1])
        elif layout == "irregular":
            g = ga.create_irreg(gt, dims, [3, 1] if n >= 3 else [n, 1], [0, 2, 7][: min(3, n)] + [0])
        else:
            g = ga.create_ghosts(gt, dims, [1, 2], "A")
        assert g and ga.inquire(g)[0] == gt and list(ga.inquire_dims(g)) == list(dims)
        # zero through access (every process its own block)
        loc = ga.access(g)
        lo, hi = ga.distribution(g)
        if loc is not None:
            assert loc.shape == tuple(hi - lo)
            loc[...] = 0
            ga.release_update(g)
        else:
            assert (lo == -1).all() and (hi == -1).all()
        ga.sync()
        model = np.zeros(dims, dt)
        assert (ga.get(g) == model).all()
        ga.sync()  # (every check read before anyone writes: GA orders a get and a put only by sync)
        # disjoint put: row i by process i % n
        for i in range(dims[0]):
            row = _values(dt, (1, dims[1]), 100 + i)
            model[i] = row[0]
            if i % n == me:
                ga.put(g, row, (i, 0), (i + 1, dims[1]))
        ga.sync()
        assert (ga.get(g) == model).all()
        # random gets, flat and shaped buffers
        rng = np.random.default_rng(me)
        for _ in range(6):
            lo = rng.integers(0, dims, 2)
            hi = lo + rng.integers(0, np.array(dims) - lo + 1)
            got = ga.get(g, lo, hi)
            assert got.shape == tuple(hi - lo) and (got == model[lo[0]:hi[0], lo[1]:hi[1]]).all()
            flat = np.empty(int(np.prod(hi - lo)), dt)
            assert ga.get(g, lo, hi, flat) is flat
            assert (flat.reshape(tuple(hi - lo)) == model[lo[0]:hi[0], lo[1]:hi[1]]).all()
        # one element with lo alone
        assert ga.get(g, (2, 3))[0, 0] == model[2, 3]
        ga.sync()
        # overlapping accumulate from every process (alpha), and a disjoint one
        x = _values(dt, (4, 5), 7)
        ga.acc(g, x, (3, 1), (7, 6), alpha=2)
        model[3:7, 1:6] += (2 * n * x).astype(dt)
        mine = _values(dt, (1, 3), 50 + me)
        if me < dims[0]:
            ga.acc(g, mine, (me, 4), (me + 1, 7))
        for r in range(min(n, dims[0])):
            model[r, 4:7] += _values(dt, (1, 3), 50 + r)[0]
        ga.sync()
        got = ga.get(g)
        assert (got == model).all(), (tname, layout, got - model)
        checks += 4
        ga.destroy(g)
    return checks


@pytest.mark.parametrize("n", NRANKS)
@pytest.mark.parametrize("layout", ["regular", "irregular", "ghosts"])
def test_classic_sequence_every_type(n, layout):
    assert run_ranks(_classic, n, args=(layout, True), timeout=120) == [4 * len(TYPES)] * n


@pytest.mark.parametrize("n", [1, 3])
def test_classic_sequence_through_the_window_datatype_path(n):
    assert run_ranks(_classic, n, args=("ghosts", False), timeout=120) == [4 * len(TYPES)] * n


def _counters_locks_regions(direct: bool):
    from gpumpi import ga
    from gpumpi.ga import groups, handles

    handles.DIRECT = direct
    me, n = ga.nodeid(), ga.nnodes()
    out = {}
    # read_inc: every process hits every counter; totals and old values exact
    for gt in (ga.C_INT, ga.C_LONG, ga.C_LONGLONG):
        c = ga.create(gt, (n + 2,))
        loc = ga.access(c)
        if loc is not None:
            loc[...] = 0
            ga.release_update(c)
        ga.sync()
        olds = [ga.read_inc(c, (k,), k + 1) for k in range(n + 2) for _ in range(3)]
        ga.sync()
        assert list(ga.get(c)) == [3 * n * (k + 1) for k in range(n + 2)]
        assert all(v % (k + 1) == 0 for v, k in zip(olds, [k for k in range(n + 2) for _ in range(3)]))
        allold = groups.default_comm().allgather(olds)
        for k in range(n + 2):
            seen = sorted(o[3 * k + j] for o in allold for j in range(3))
            assert seen == [(k + 1) * i for i in range(3 * n)]  # every old value once: atomic
        ga.destroy(c)
    # lock + fence critical section (test.F): column j of a 2-D array gets +1 from everyone
    a = ga.create(ga.C_DBL, (4, n + 1))
    if me == 0:
        ga.put(a, np.zeros((4, n + 1)))
    ga.sync()
    assert ga.create_mutexes(2) and not ga.create_mutexes(1)
    for j in range(n + 1):
        ga.lock(j % 2)
        col = ga.get(a, (0, j), (4, j + 1))
        ga.init_fence()
        ga.put(a, col + 1, (0, j), (4, j + 1))
        ga.fence()
        ga.unlock(j % 2)
    ga.sync()
    assert (ga.get(a) == n).all()
    with pytest.raises(ga.GAError, match="not locked"):
        ga.unlock(0)
    ga.lock(1)
    with pytest.raises(ga.GAError, match="already locked"):
        ga.lock(1)
    ga.unlock(1)
    ga.sync()
    assert ga.destroy_mutexes()
    # locate_region covers a patch exactly, and locate agrees with distribution
    m, procs = ga.locate_region(a, (1, 0), (4, n + 1))
    cover = np.zeros((4, n + 1), int)
    for (plo, phi), p in zip(m, procs):
        lo, hi = ga.distribution(a, p)
        assert (lo <= plo).all() and (phi <= hi).all()
        cover[plo[0]:phi[0], plo[1]:phi[1]] += 1
        assert ga.locate(a, plo) == p
    assert (cover[1:] == 1).all() and (cover[:1] == 0).all()
    assert ga.locate(a, (4, 0)) == -1
    # scatter / gather / scatter_acc with repeated subscripts
    subs = np.array([[i % 4, (3 * i) % (n + 1)] for i in range(11)])
    vals = np.arange(11, dtype=float) + 100 * me
    if me == 0:
        ga.put(a, np.zeros((4, n + 1)))
    ga.sync()
    ga.scatter_acc(a, vals, subs, 0.5)
    ga.sync()
    expect = np.zeros((4, n + 1))
    for r in range(n):
        np.add.at(expect, (subs[:, 0], subs[:, 1]), 0.5 * (np.arange(11) + 100 * r))
    assert np.allclose(ga.get(a), expect)
    got = ga.gather(a, subs.reshape(-1))
    assert np.allclose(got, expect[subs[:, 0], subs[:, 1]])
    ga.sync()
    uniq = np.array([[0, 0], [3, n], [2, 1 % (n + 1)]])
    if me == n - 1:
        ga.scatter(a, [7.0, 8.0, 9.0], uniq)
    expect[uniq[:, 0], uniq[:, 1]] = [7, 8, 9]
    ga.sync()
    assert np.allclose(ga.get(a), expect)
    # periodic and strided patches
    b = ga.create(ga.C_LONG, (5, 6))
    full = np.arange(30, dtype=np.int64).reshape(5, 6)
    if me == 0:
        ga.put(b, full)
    ga.sync()
    rows, cols = np.arange(-2, 2) % 5, np.arange(4, 9) % 6
    assert (ga.periodic_get(b, (-2, 4), (2, 9)) == full[np.ix_(rows, cols)]).all()
    assert (ga.strided_get(b, (0, 1), (5, 6), (2, 2)) == full[0:5:2, 1:6:2]).all()
    ga.sync()
    if me == 0:
        ga.periodic_put(b, -np.ones((4, 5), np.int64), (-2, 4), (2, 9))
        ga.strided_put(b, np.full((3, 3), 5, np.int64), (0, 0), (5, 6), (2, 2))
    full[np.ix_(rows, cols)] = -1
    full[0:5:2, 0:6:2] = 5
    ga.sync()
    ga.periodic_acc(b, np.ones((2, 2), np.int64), (4, 5), (6, 7))
    full[np.ix_([4, 0], [5, 0])] += n
    ga.strided_acc(b, np.ones((2, 3), np.int64), (1, 0), (5, 6), (2, 2), 3)
    full[1:5:2, 0:6:2] += 3 * n
    ga.sync()
    assert (ga.get(b) == full).all()
    # nonblocking forms complete at once; handles are retired by nbwait once
    h1 = ga.nbput(b, full[:1], (0, 0), (1, 6)) if me == 0 else ga.nbacc(b, np.zeros((1, 6), np.int64), (0, 0), (1, 6))
    buf, h2 = ga.nbget(b, (0, 0), (2, 2))
    ga.nbwait(h1)
    ga.nbwait(h2)
    with pytest.raises(ga.GAError):
        ga.nbwait(h2)
    ga.sync()
    out["checks"] = 1
    for h in (a, b):
        ga.destroy(h)
    return out


@pytest.mark.parametrize("n", NRANKS)
def test_read_inc_locks_regions_scatter_periodic_strided(n):
    assert run_ranks(_counters_locks_regions, n, args=(True,), timeout=120) == [{"checks": 1}] * n


def test_counters_and_friends_through_the_datatype_path():
    assert run_ranks(_counters_locks_regions, 3, args=(False,), timeout=120) == [{"checks": 1}] * 3


def _bad_input():
    from gpumpi import ga

    me, n = ga.nodeid(), ga.nnodes()
    g = ga.create(ga.C_DBL, (6, 4))
    f = ga.create(ga.C_FLOAT, (3,))
    errors = []

    def expect(exc, match, fn, *args, **kw):
        with pytest.raises(exc, match=match):
            fn(*args, **kw)
        errors.append(match)

    expect(ValueError, "put", ga.put, g, np.zeros((2, 2)), (5, 3), (7, 5))  # out of bounds
    expect(ValueError, "get", ga.get, g, (0, 0), (6, 5))
    expect(ValueError, "get", ga.get, g, None, (1, 1))  # hi without lo
    expect(ValueError, "acc", ga.acc, g, np.zeros(3), (0, 0), (2, 2))  # wrong buffer size
    expect(TypeError, "read_inc", ga.read_inc, f, (0,))  # read_inc needs integers
    expect(TypeError, "get", ga.get, g, (0, 0), (1, 1), np.zeros((1, 1), np.float32))  # wrong dtype
    expect(TypeError, "acc", ga.acc, g, np.zeros((1, 1)), (0, 0), (1, 1), 1j)  # complex alpha, real array
    expect(ValueError, "locate", ga.locate, g, (1,))
    expect(ga.GAError, "fence", ga.fence)
    ga.sync()
    ga.destroy(g)
    expect(ga.GAError, "invalid array handle", ga.get, g)
    expect(ga.GAError, "invalid array handle", ga.put, g, np.zeros((1, 1)), (0, 0), (1, 1))
    expect(ga.GAError, "invalid array handle", ga.destroy, g)
    ga.destroy(f)
    h = ga.create_handle()
    expect(ga.GAError, "not allocated", ga.get, h)
    expect(ga.GAError, "no data description", ga.allocate, h)
    ga.set_data(h, (4,), ga.C_INT)
    assert ga.allocate(h)
    expect(ga.GAError, "already allocated", ga.set_data, h, (5,), ga.C_INT)
    ga.destroy(h)
    return len(errors)



def _ga_rules_for_access():
    """GA's rules, as GA's own tutorials rely on them: ``destroy`` frees an array whose accesses
    were not released (``pnga_destroy`` does not look; readinc.answer and srumma.answer do it) --
    with a warning here, and the views stay readable; a release without an access does nothing
    (``pnga_release`` is empty; ga4py's returns on a process that owns no data)."""
    import warnings

    from gpumpi import ga

    me = ga.nodeid()
    g = ga.create(ga.C_DBL, (ga.nnodes() * 3 + 1, 4), "A")
    ga.release(g)  # no access: nothing happens, at every process
    loc = ga.access(g)
    if loc is not None:
        lo, _hi = ga.distribution(g)
        loc[...] = me + 0.5 + np.arange(loc.size).reshape(loc.shape)
        ga.release_update(g)
        loc = ga.access(g)  # left outstanding on purpose
    ga.release(g)  # releases the one outstanding access (or nothing)
    loc = ga.access(g)
    ga.sync()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ga.destroy(g)  # every process, access outstanding or not: nobody hangs
    warned = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    ok = ga.valid_handle(g) is False
    # a negative node is this process's (ARMCI)
    mine = sum(ga.cluster_nodeid(p) == ga.cluster_nodeid() for p in range(ga.nnodes()))
    ok = ok and ga.cluster_nprocs(-1) == ga.cluster_nprocs(ga.cluster_nodeid()) == mine
    if loc is not None:  # the view outlives the array: still this process's values
        ok = ok and len(warned) == 1 and "not released" in warned[0]
        ok = ok and bool((loc == me + 0.5 + np.arange(loc.size).reshape(loc.shape)).all())
    else:
        ok = ok and not warned
    ga.sync()
    return ok


def test_zip_gives_slices_numpy_takes_as_an_index():
    """ga4py's programs index with it (``a[ga.zip(lo, hi)]``); a list of slices is no index since NumPy 1.23."""
    from gpumpi import ga

    a = np.arange(20).reshape(4, 5)
    assert ga.zip((1, 2), (3, 5)) == (slice(1, 3), slice(2, 5))
    assert (a[ga.zip((1, 2), (3, 5))] == a[1:3, 2:5]).all()


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_destroy_with_accesses_outstanding_and_release_without_one_follow_ga(n):
    assert run_ranks(_ga_rules_for_access, n, timeout=60) == [True] * n


@pytest.mark.parametrize("n", [1, 2])
def test_bad_input_raises_clear_errors_and_loses_nothing(n):
    res = run_ranks(_bad_input, n, timeout=60)
    assert len(set(res)) == 1 and res[0] >= 14


def _groups_and_mirrors():
    from gpumpi import ga

    me, n = ga.nodeid(), ga.nnodes()
    first = list(range((n + 1) // 2))
    p = ga.pgroup_create(first)
    assert ga.pgroup_nnodes(p) == len(first)
    assert ga.pgroup_nodeid(p) == (me if me in first else -1)
    res = {}
    if me in first:
        g = ga.create(ga.C_DBL, (5, 3), pgroup=p)
        assert ga.get_pgroup(g) == p and ga.get_pgroup_size(g) == len(first)
        if ga.pgroup_nodeid(p) == 0:
            ga.put(g, np.arange(15.0).reshape(5, 3))
        ga.pgroup_sync(p)
        res["group_get"] = bool((ga.get(g) == np.arange(15.0).reshape(5, 3)).all())
        ga.pgroup_set_default(p)
        assert ga.nodeid() == first.index(me) and ga.nnodes() == len(first)
        h = ga.create(ga.C_INT, (4,))  # on the default group now
        assert ga.get_pgroup(h) == p
        ga.destroy(h)
        ga.destroy(g)
        ga.pgroup_set_default(-1)
    assert ga.nnodes() == n
    sub = ga.pgroup_split(ga.pgroup_get_world(), 2 if n > 1 else 1)
    assert ga.pgroup_nnodes(sub) == (-(-n // 2) if me < -(-n // 2) else n - -(-n // 2)) if n > 1 else 1
    assert ga.pgroup_absolute_id(sub, 0) == (0 if me < -(-n // 2) or n == 1 else -(-n // 2))
    # mirrored arrays: one node here, so the node's copy is the array and merge sums one copy
    m = ga.create(ga.C_DBL, (6,), pgroup=ga.pgroup_get_mirror())
    assert ga.is_mirrored(m)
    if me == 0:
        ga.put(m, np.arange(6.0))
    ga.sync()
    ga.merge_mirrored(m)
    res["mirror"] = ga.get(m).tolist()
    d = ga.create(ga.C_DBL, (2, 3))
    ga.merge_distr_patch(m, (0,), (6,), d, (0, 0), (2, 3))
    res["distr"] = ga.get(d).tolist()
    # the nodes: one under gpumpirun; GPUMPI_SIM_NODES=k contiguous blocks under mpiexec
    import os

    k = min(int(os.environ.get("GPUMPI_SIM_NODES") or 0), n) or 1
    nodes = [r * k // n for r in range(n)]
    assert ga.cluster_nnodes() == k and ga.cluster_nodeid() == nodes[me]
    for node in range(k):
        members = [r for r in range(n) if nodes[r] == node]
        assert ga.cluster_nprocs(node) == len(members)
        assert [ga.cluster_procid(node, i) for i in range(len(members))] == members
    ga.sync()
    ga.destroy(m)
    ga.destroy(d)
    return res


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_processor_groups_default_group_and_mirrored_arrays(n):
    res = run_ranks(_groups_and_mirrors, n, timeout=120)
    for r, got in enumerate(res):
        if r < (n + 1) // 2:
            assert got["group_get"]
        assert got["mirror"] == list(np.arange(6.0))
        # after merge_mirrored every node's copy holds the sum: merging again adds one per node
        assert got["distr"] == (len(set(expected_nodes(n))) * np.arange(6.0)).reshape(2, 3).tolist()


def _device():
    from gpumpi import ga

    me, n = ga.nodeid(), ga.nnodes()
    out = []
    for gt in (ga.C_DBL, ga.C_INT, ga.C_DCPL):
        h = ga.create_handle()
        ga.set_data(h, (7, 5), gt)
        ga.set_ghosts(h, (1, 1))
        ga.set_memory_dev(h, "device")
        assert ga.allocate(h) and ga.memory_kind(h) == "device"
        dt = ga.dtype(gt)
        loc = ga.access(h)
        if loc is not None:
            assert hasattr(loc, "__cuda_array_interface__")  # a device array
            ga.release(h)
        model = np.zeros((7, 5), dt)
        if me == 0:
            ga.put(h, model)
        ga.sync()
        x = _values(dt, (3, 4), 3)
        if me == n - 1:
            ga.put(h, x, (2, 1), (5, 5))
        model[2:5, 1:5] = x
        ga.sync()
        ga.acc(h, np.ones((7, 5), dt), None, None, 2)
        model += 2 * n
        ga.sync()
        got = ga.get(h)
        out.append(bool((got.get() == model).all()))
        buf = np.empty((2, 2), dt)
        ga.get(h, (5, 3), (7, 5), buf)
        out.append(bool((buf == model[5:7, 3:5]).all()))
        if dt.kind == "i":
            ga.sync()
            olds = [ga.read_inc(h, (6, 4), 1) for _ in range(3)]
            ga.sync()
            out.append(int(ga.get(h, (6, 4)).get()[0, 0]) == model[6, 4] + 3 * n and len(olds) == 3)
        ga.sync()
        ga.destroy(h)
    return out


@pytest.mark.parametrize("n", [1, 3])
def test_device_arrays_on_the_simulated_device(n):
    device_windows_across_nodes(n)
    res = run_ranks(_device, n, timeout=120, env={"GPUMPI_DEVICE": "sim"})
    assert all(all(r) and len(r) == 7 for r in res), res


def _strided_buffers(memory: str, direct: bool):
    """get into (and put/acc from) a view that is not C-contiguous, on every transfer path: the
    elements land in the view and nowhere else."""
    from gpumpi import ga
    from gpumpi.ga import handles
    from gpumpi.testing import SimDeviceArray

    handles.DIRECT = direct
    me, n = ga.nodeid(), ga.nnodes()
    h = ga.create_handle()
    ga.set_data(h, (8, 8), ga.C_DBL)
    ga.set_memory_dev(h, memory)
    ga.allocate(h)
    full = np.arange(64.0).reshape(8, 8)
    if me == 0:
        ga.put(h, full)
    ga.sync()
    big = np.full((4, 9), -1.0)
    if memory == "device":
        dbig = SimDeviceArray.from_numpy(big)
        ga.get(h, (4, 4), (6, 6), dbig[1:3, 5:7])
        got = dbig.get()
    else:
        ga.get(h, (4, 4), (6, 6), big[1:3, 5:7])
        got = big
    expect = np.full((4, 9), -1.0)
    expect[1:3, 5:7] = full[4:6, 4:6]
    ok = bool((got == expect).all())
    ga.sync()
    if me == n - 1:
        ga.put(h, full.T[2:5, 1:3], (0, 0), (3, 2))  # a transposed (Fortran-ordered) view
    ga.sync()
    ok = ok and bool((np.asarray(ga.get(h, (0, 0), (3, 2)).get() if memory == "device" else
                                 ga.get(h, (0, 0), (3, 2))) == full.T[2:5, 1:3]).all())
    ga.sync()
    ga.destroy(h)
    return ok


@pytest.mark.parametrize("memory, direct", [("host", True), ("host", False), ("device", True)])
def test_buffers_that_are_views_on_every_path(memory, direct):
    device_windows_across_nodes(3 if memory == "device" else 1)
    env = {"GPUMPI_DEVICE": "sim"} if memory == "device" else None
    assert run_ranks(_strided_buffers, 3, args=(memory, direct), timeout=60, env=env) == [True] * 3
