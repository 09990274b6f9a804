"""Windows (MPI.Win) at 1-4 ranks: every creation flavor, the window attributes, groups, info,
names, error handlers, attribute caching, use after Free, and device windows on ``sim``.

Expectations come from the MPI standard and mpi4py 4.1 on MPICH (each body here also ran
unchanged under ``mpiexec`` with mpi4py, except the gpumpi extensions: device windows):

* ``Win.Create(mem)`` exposes exactly ``mem``: WIN_BASE is its address, WIN_SIZE its length in
  bytes, ``tomemory()`` a byte buffer over the same memory; ``None`` and ``BOTTOM`` give an
  empty window (0, 0, disp_unit);
* ``Allocate_shared`` segments are contiguous by default (rank i's segment starts where rank
  i-1's ends) and ``Shared_query`` gives every peer's segment as a buffer in this process;
  ``Shared_query(PROC_NULL)`` the first segment of nonzero size;
* ``Create_dynamic`` has base 0 and size 0 and is addressed by absolute addresses of attached
  memory;
* each functional check moves data with RMA and compares with NumPy values computed on the
  checking rank.
"""

import numpy as np
import pytest

from gpumpi.testing import WORLD_SIZES, device_windows_across_nodes, one_node_only, run_ranks

pytestmark = pytest.mark.timeout(120)
SIM = {"GPUMPI_DEVICE": "sim"}


def _addr(MPI, buf):
    return MPI.Get_address(buf)


def _check_attrs(MPI, win, base, size, unit, flavor):
    """The attribute views of one window agree with each other and with what was exposed."""
    got = (win.Get_attr(MPI.WIN_BASE), win.Get_attr(MPI.WIN_SIZE), win.Get_attr(MPI.WIN_DISP_UNIT))
    if base is None:  # an allocated window of size 0: any base
        got = (None,) + got[1:]
    assert got == (base, size, unit), (got, (base, size, unit), flavor)
    attrs = win.attrs
    assert type(attrs) is tuple and attrs[1:] == (size, unit) and (base is None or attrs[0] == base), attrs
    assert win.Get_attr(MPI.WIN_CREATE_FLAVOR) == win.flavor == flavor
    assert win.Get_attr(MPI.WIN_MODEL) == win.model and win.model in (MPI.WIN_SEPARATE, MPI.WIN_UNIFIED)
    mem = win.tomemory()
    assert len(mem) == size
    if size:
        assert mem.format == "B" and _addr(MPI, mem) == attrs[0]


# --- Win.Create on every kind of host memory --------------------------------------------------
def _create_on_host_memory():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    nxt, prv = (r + 1) % n, (r - 1) % n
    # numpy float64, disp_unit 8: rank r's window has 4 + r elements
    a = np.full(4 + r, -1.0)
    win = MPI.Win.Create(a, 8, MPI.INFO_NULL, c)
    _check_attrs(MPI, win, a.ctypes.data, a.nbytes, 8, MPI.WIN_FLAVOR_CREATE)
    win.Fence()
    win.Put(np.array([r + 0.5, r + 0.25]), nxt, 1)  # disp 1 counts disp_units: bytes 8..23
    win.Fence()
    expect = np.full(4 + r, -1.0)
    expect[1:3] = [prv + 0.5, prv + 0.25]
    assert np.array_equal(a, expect), a
    # the window memory seen through tomemory() is the array itself
    np.frombuffer(win.tomemory(), np.float64)[0] = 100 + r
    win.Fence()
    got = np.zeros(1)
    win.Get(got, prv, 0)
    win.Fence()
    assert got[0] == 100 + prv
    win.Free()
    assert win == MPI.WIN_NULL

    # bytearray, disp_unit 1
    b = bytearray(10 + r)
    win = MPI.Win.Create(b, comm=c)
    _check_attrs(MPI, win, _addr(MPI, b), len(b), 1, MPI.WIN_FLAVOR_CREATE)
    win.Fence()
    win.Put(bytearray([r + 1] * 3), nxt, 2)
    win.Fence()
    assert b == bytearray(2) + bytearray([prv + 1] * 3) + bytearray(5 + r), b
    win.Free()

    # MPI.Alloc_mem, disp_unit 4, viewed as int32
    m = MPI.Alloc_mem(16 + 8 * r)
    v = np.frombuffer(m, np.int32)
    v[:] = -7
    win = MPI.Win.Create(m, 4, comm=c)
    _check_attrs(MPI, win, _addr(MPI, m), 16 + 8 * r, 4, MPI.WIN_FLAVOR_CREATE)
    win.Fence()
    win.Put(np.array([r * 10 + 1, r * 10 + 2], np.int32), nxt, 1)
    win.Fence()
    expect = np.full(4 + 2 * r, -7, np.int32)
    expect[1:3] = [prv * 10 + 1, prv * 10 + 2]
    assert np.array_equal(v, expect), v
    win.Free()
    del v
    MPI.Free_mem(m)

    # no memory: None and BOTTOM with size 0 make an empty window
    for mem in (None, MPI.BOTTOM):
        win = MPI.Win.Create(mem, 1, MPI.INFO_NULL, c)
        _check_attrs(MPI, win, 0, 0, 1, MPI.WIN_FLAVOR_CREATE)
        win.Fence()
        win.Fence()
        win.Free()
    # the default communicator is COMM_SELF
    win = MPI.Win.Create(np.zeros(2))
    assert win.Get_group().Get_size() == 1
    win.Free()
    return True


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_create_on_numpy_bytearray_alloc_mem_and_no_memory(n):
    assert run_ranks(_create_on_host_memory, n, timeout=60) == [True] * n


# --- Win.Allocate -----------------------------------------------------------------------------
def _allocate():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    nxt, prv = (r + 1) % n, (r - 1) % n
    sizes = [8 * (i % 3) for i in range(n)]  # rank 0 (and 3) allocate nothing
    win = MPI.Win.Allocate(sizes[r], 8, MPI.INFO_NULL, c)
    mem = win.tomemory()
    _check_attrs(MPI, win, _addr(MPI, mem) if sizes[r] else None, sizes[r], 8, MPI.WIN_FLAVOR_ALLOCATE)
    loc = np.frombuffer(mem, np.float64)
    win.Lock(r)
    loc[:] = -1.0
    win.Unlock(r)
    c.Barrier()
    win.Fence()
    if sizes[nxt]:
        win.Put(np.array([r + 0.5]), nxt, sizes[nxt] // 8 - 1)  # the last element
    win.Fence()
    expect = np.full(sizes[r] // 8, -1.0)
    if sizes[r]:
        expect[-1] = prv + 0.5
    assert np.array_equal(loc, expect), loc
    win.Free()
    # Allocate's defaults: disp_unit 1, COMM_SELF
    win = MPI.Win.Allocate(24)
    assert win.attrs[1:] == (24, 1) and win.Get_group().Get_size() == 1
    win.Free()
    return True


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_allocate(n):
    assert run_ranks(_allocate, n, timeout=60) == [True] * n


# --- Win.Allocate_shared + Shared_query ---------------------------------------------------------
def _allocate_shared():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    nxt, prv = (r + 1) % n, (r - 1) % n
    sizes = [8 * (i + 1) for i in range(n)]
    win = MPI.Win.Allocate_shared(sizes[r], 8, MPI.INFO_NULL, c)
    _check_attrs(MPI, win, _addr(MPI, win.tomemory()), sizes[r], 8, MPI.WIN_FLAVOR_SHARED)
    segs = []
    for i in range(n):
        buf, unit = win.Shared_query(i)
        assert unit == 8 and len(buf) == sizes[i], (i, unit, len(buf))
        segs.append(buf)
    # contiguous by default: each segment starts where the previous one ends (in this process)
    for i in range(1, n):
        assert _addr(MPI, segs[i]) == _addr(MPI, segs[i - 1]) + sizes[i - 1], i
    assert _addr(MPI, segs[r]) == win.Get_attr(MPI.WIN_BASE)
    buf, unit = win.Shared_query(MPI.PROC_NULL)
    assert (_addr(MPI, buf), len(buf), unit) == (_addr(MPI, segs[0]), sizes[0], 8)
    # stores through a peer's segment are seen by its owner after Sync, Barrier, Sync
    win.Lock_all()
    np.frombuffer(segs[nxt], np.float64)[:] = 100 * r + np.arange(sizes[nxt] // 8)
    win.Sync()
    c.Barrier()
    win.Sync()
    mine = np.frombuffer(win.tomemory(), np.float64).copy()
    win.Unlock_all()
    assert np.array_equal(mine, 100 * prv + np.arange(sizes[r] // 8)), mine
    # ... and RMA on a shared window reaches the same memory
    c.Barrier()
    win.Fence()
    win.Put(np.array([-5.0 - r]), nxt, 0)
    win.Fence()
    assert np.frombuffer(segs[r], np.float64)[0] == -5.0 - prv
    win.Free()

    # a first segment of size 0: PROC_NULL names the first one that has memory
    sizes = [0 if i % 2 == 0 else 16 * i for i in range(n)]
    win = MPI.Win.Allocate_shared(sizes[r], 1, MPI.INFO_NULL, c)
    for i in range(n):
        buf, unit = win.Shared_query(i)
        assert len(buf) == sizes[i] and unit == 1
    if n > 1:
        buf, unit = win.Shared_query(MPI.PROC_NULL)
        assert len(buf) == sizes[1] and _addr(MPI, buf) == _addr(MPI, win.Shared_query(1)[0])
    win.Free()

    # alloc_shared_noncontig: segments need not be adjacent, but they still work
    info = MPI.Info.Create({"alloc_shared_noncontig": "true"})
    win = MPI.Win.Allocate_shared(64, 8, info, c)
    info.Free()
    win.Lock_all()
    np.frombuffer(win.tomemory(), np.int64)[:] = 0  # new memory has no defined contents
    win.Sync()
    c.Barrier()
    np.frombuffer(win.Shared_query(prv)[0], np.int64)[r % 8] = r + 1
    win.Sync()
    c.Barrier()
    win.Sync()
    got = np.frombuffer(win.tomemory(), np.int64).copy()
    win.Unlock_all()
    expect = np.zeros(8, np.int64)
    for s in range(n):
        if (s - 1) % n == r:
            expect[s % 8] = s + 1
    assert np.array_equal(got, expect), got
    win.Free()
    return True


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_allocate_shared_and_shared_query(n):
    one_node_only(n, "a shared window (Win.Allocate_shared)")
    assert run_ranks(_allocate_shared, n, timeout=60) == [True] * n


# --- Win.Create_dynamic + Attach / Detach -------------------------------------------------------
def _dynamic():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    nxt, prv = (r + 1) % n, (r - 1) % n
    win = MPI.Win.Create_dynamic(MPI.INFO_NULL, c)
    _check_attrs(MPI, win, 0, 0, 1, MPI.WIN_FLAVOR_DYNAMIC)
    m1 = MPI.Alloc_mem(32)
    a1 = np.frombuffer(m1, np.int32)
    a1[:] = -1
    a2 = np.full(5, -1.0)
    win.Attach(m1)
    win.Attach(a2)
    # attaching changes nothing in the window's own attributes
    _check_attrs(MPI, win, 0, 0, 1, MPI.WIN_FLAVOR_DYNAMIC)
    addrs = c.allgather((_addr(MPI, m1), _addr(MPI, a2)))
    c.Barrier()
    win.Lock(nxt, MPI.LOCK_EXCLUSIVE)
    # dynamic windows are addressed by absolute address (disp_unit 1)
    win.Put(np.array([r, r + 1], np.int32), nxt, addrs[nxt][0] + 4 * 3)
    win.Put(np.array([r + 0.5]), nxt, (addrs[nxt][1] + 8 * 4, 1, MPI.DOUBLE))
    got = np.zeros(2)
    win.Get(got, nxt, addrs[nxt][1])
    win.Unlock(nxt)
    assert np.array_equal(got, [-1.0, -1.0])
    c.Barrier()
    win.Lock(r, MPI.LOCK_SHARED)
    x1, x2 = a1.copy(), a2.copy()
    win.Unlock(r)
    assert np.array_equal(x1, [-1, -1, -1, prv, prv + 1, -1, -1, -1]), x1
    assert np.array_equal(x2, [-1, -1, -1, -1, prv + 0.5]), x2
    c.Barrier()
    win.Detach(a2)
    win.Detach(m1)
    # attach and detach in any order, many times
    m3 = MPI.Alloc_mem(16)
    for _ in range(3):
        for m in (m1, m3):
            win.Attach(m)
        for m in (m1, m3):
            win.Detach(m)
    win.Free()
    del a1
    MPI.Free_mem(m1)
    MPI.Free_mem(m3)
    return True


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_create_dynamic_attach_detach(n):
    assert run_ranks(_dynamic, n, timeout=60) == [True] * n


# --- group, info, names, error handlers ------------------------------------------------------
def _properties():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    sub = c.Split(r % 2, -r)  # reverse order within each parity: the window group is the comm's
    win = MPI.Win.Allocate(8, 1, MPI.INFO_NULL, sub)
    wg, cg = win.Get_group(), sub.Get_group()
    assert MPI.Group.Compare(wg, cg) == MPI.IDENT
    world = c.Get_group()
    assert MPI.Group.Translate_ranks(wg, list(range(wg.Get_size())), world) == sub.allgather(r)
    g = win.group
    assert type(g) is MPI.Group and win.group_size == g.Get_size() == sub.size
    assert win.group_rank == g.Get_rank() == sub.rank
    for x in (wg, cg, world, g):
        x.Free()

    info = win.Get_info()
    assert type(info) is MPI.Info
    win.Set_info(info)
    info.Free()
    hints = MPI.Info.Create({"no_locks": "false", "accumulate_ordering": "rar,raw,war,waw"})
    win.Set_info(hints)
    hints.Free()
    win.info = win.info

    assert win.Get_name() == ""
    win.Set_name("halo window")
    assert win.Get_name() == win.name == "halo window"
    win.name = "other"
    assert win.Get_name() == "other"
    assert MPI.WIN_NULL.Get_name() == "MPI_WIN_NULL"

    # mpi4py puts ERRORS_RETURN on every new window: errors raise MPI.Exception
    eh = win.Get_errhandler()
    assert eh == MPI.ERRORS_RETURN
    for h in (MPI.ERRORS_ARE_FATAL, MPI.ERRORS_RETURN):
        win.Set_errhandler(h)
        got = win.Get_errhandler()
        assert got == h
        got.Free()
    seen = []
    user = MPI.Win.Create_errhandler(lambda w, code: seen.append((w == win, MPI.Get_error_class(code))))
    win.Set_errhandler(user)
    got = win.Get_errhandler()
    assert got == user
    got.Free()
    try:
        win.Put(np.zeros(1, np.uint8), 0)  # outside an epoch: the user handler sees ERR_RMA_SYNC
    except MPI.Exception as e:
        assert e.Get_error_class() == MPI.ERR_RMA_SYNC
    assert seen == [(True, MPI.ERR_RMA_SYNC)], seen
    win.Call_errhandler(MPI.ERR_OTHER)
    assert seen[1:] == [(True, MPI.ERR_OTHER)], seen
    win.Set_errhandler(MPI.ERRORS_RETURN)
    user.Free()
    win.Call_errhandler(MPI.ERR_OTHER)  # ERRORS_RETURN: nothing happens
    with pytest.raises(MPI.Exception) as ei:
        win.Put(np.zeros(1, np.uint8), 0)
    assert ei.value.Get_error_class() == MPI.ERR_RMA_SYNC
    assert len(seen) == 2
    eh.Free()
    win.Free()
    sub.Free()
    return True


@pytest.mark.parametrize("n", [1, 3])
def test_group_info_name_errhandlers(n):
    assert run_ranks(_properties, n, timeout=60) == [True] * n


# --- attribute caching: keyvals with a delete callback run at Free ----------------------------
def _keyvals():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    log = []
    win = MPI.Win.Create(np.zeros(3), 8, MPI.INFO_NULL, c)

    def delete(w, key, value):
        # the window is still valid while its attributes are deleted
        log.append((value, w.Get_attr(MPI.WIN_SIZE), key == k1))

    k1 = MPI.Win.Create_keyval(delete_fn=delete)
    k2 = MPI.Win.Create_keyval()
    assert win.Get_attr(k1) is None
    win.Set_attr(k1, "first")
    value = {"anything": [1, 2]}
    win.Set_attr(k2, value)
    assert win.Get_attr(k1) == "first" and win.Get_attr(k2) is value
    win.Set_attr(k1, "second")  # replacing deletes the old value
    assert log == [("first", 24, True)]
    win.Delete_attr(k1)
    assert log == [("first", 24, True), ("second", 24, True)] and win.Get_attr(k1) is None
    win.Set_attr(k1, "third")
    win.Free()  # deletes the attributes left
    assert log[2:] == [("third", 24, True)], log
    MPI.Win.Free_keyval(k1)
    MPI.Win.Free_keyval(k2)
    # a keyval's callbacks run at Free on every window carrying it, once each
    log.clear()
    k3 = MPI.Win.Create_keyval(delete_fn=lambda w, key, value: log.append(value))
    ws = [MPI.Win.Allocate(8, comm=c) for _ in range(3)]
    for i, w in enumerate(ws):
        w.Set_attr(k3, i)
    for w in reversed(ws):
        w.Free()
    assert log == [2, 1, 0]
    MPI.Win.Free_keyval(k3)
    return True


@pytest.mark.parametrize("n", [1, 2])
def test_keyvals_and_delete_callbacks(n):
    assert run_ranks(_keyvals, n, timeout=60) == [True] * n


# --- a freed window is WIN_NULL, and every call on it fails with ERR_WIN -------------------
def _use_after_free():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    for make in (lambda: MPI.Win.Create(np.zeros(4), 8, comm=c), lambda: MPI.Win.Allocate(32, 8, comm=c),
                 lambda: MPI.Win.Create_dynamic(comm=c)):
        win = make()
        win.Free()
        assert win == MPI.WIN_NULL and not win
        for call in (lambda: win.Fence(), lambda: win.Put(np.zeros(1), 0), lambda: win.Lock(0),
                     lambda: win.Get_attr(MPI.WIN_SIZE), lambda: win.Free(), lambda: win.Get_group()):
            with pytest.raises(MPI.Exception) as ei:
                call()
            assert ei.value.Get_error_class() == MPI.ERR_WIN
    return True


@pytest.mark.parametrize("n", [1, 2])
def test_use_after_free_raises_err_win(n):
    assert run_ranks(_use_after_free, n, timeout=60) == [True] * n


# --- device windows on the simulated device (gpumpi extension) -------------------------------
def _device_windows():
    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    nxt, prv = (r + 1) % n, (r - 1) % n
    # Win.Create on device memory
    a = SimDeviceArray.from_numpy(np.full(8, -1.0))
    win = MPI.Win.Create(a, 8, MPI.INFO_NULL, c)
    assert win.attrs == (a.ptr, 64, 8) and win.flavor == MPI.WIN_FLAVOR_CREATE
    tm = win.tomemory()
    assert isinstance(tm, SimDeviceArray) and tm.dtype == np.uint8 and tm.nbytes == 64 and tm.ptr == a.ptr
    win.Fence()
    win.Put(np.array([r + 0.5, r + 0.25]), nxt, 2)  # host origin
    win.Put(SimDeviceArray.from_numpy(np.array([r + 0.75])), nxt, 6)  # device origin
    win.Fence()
    got_h = np.zeros(3)
    got_d = SimDeviceArray.zeros(3)
    win.Get(got_h, prv, 1)
    win.Get(got_d, prv, 5)
    win.Fence()
    expect = np.full(8, -1.0)
    expect[[2, 3, 6]] = [prv + 0.5, prv + 0.25, prv + 0.75]
    assert np.array_equal(a.get(), expect), a.get()
    pp = (prv - 1) % n  # prv's window holds what prv's predecessor put
    assert np.array_equal(got_h, [-1.0, pp + 0.5, pp + 0.25]), got_h
    assert np.array_equal(got_d.get(), [-1.0, pp + 0.75, -1.0]), got_d.get()
    win.Free()

    # Win.Allocate of device memory: by keyword and by info key
    info = MPI.Info.Create({"gpumpi_memory": "device"})
    for win in (MPI.Win.Allocate(64, 8, MPI.INFO_NULL, c, memory="device"), MPI.Win.Allocate(64, 8, info, c)):
        tm = win.tomemory()
        assert isinstance(tm, SimDeviceArray) and tm.dtype == np.uint8 and tm.nbytes == 64
        assert win.attrs == (tm.ptr, 64, 8) and win.flavor == MPI.WIN_FLAVOR_ALLOCATE
        win.Lock(r)
        tm.set((np.arange(8.0) + 10 * r).view(np.uint8))
        win.Unlock(r)
        c.Barrier()
        win.Lock(prv, MPI.LOCK_SHARED)
        got = np.zeros(4)
        win.Get(got, prv, 4)
        win.Unlock(prv)
        assert np.array_equal(got, np.arange(4.0, 8.0) + 10 * prv), got
        c.Barrier()
        win.Free()
    info.Free()
    return True


@pytest.mark.parametrize("n", [1, 2, 3])
def test_device_windows_on_sim(n):
    device_windows_across_nodes(n)
    assert run_ranks(_device_windows, n, timeout=90, env=SIM) == [True] * n
