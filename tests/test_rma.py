"""One-sided operations (MPI.Win) against a NumPy model of every window, at 1-4 ranks.

Every creation flavor (Create on numpy and on Alloc_mem, Allocate, Allocate_shared,
Create_dynamic, and on ``sim`` device memory Create and Allocate) runs every operation (Put,
Get, Accumulate with every predefined op, Get_accumulate and Fetch_and_op with REPLACE and
NO_OP too, Compare_and_swap, Rput, Rget, Raccumulate, Rget_accumulate) in the synchronization
modes MPI allows it in (Fence, post-start-complete-wait, Lock exclusive and shared, Lock_all
with Flush; the request-based forms only in passive-target epochs).

How a case runs (each rank is the origin for its successor ``nxt`` and the target of its
predecessor ``prv``; at one rank both are itself):

1. every rank writes its known initial pattern ``T0(rank)`` into its own window (inside a lock
   on itself), then a barrier;
2. the epoch opens, the origin issues one operation with datatypes at origin and at target
   (basic, vector, indexed, subarray, resized, struct of one basic type; the pair of types
   rotates with the case number so that every pair appears), the epoch closes;
3. the target compares its whole window with a NumPy model: ``T0(rank)`` with the operation
   of its origin applied element by element (the k-th basic element at the origin pairs with
   the k-th at the target); the origin compares what it fetched with ``T0(nxt)``.  In Lock_all
   mode the origin also reads the target back after ``Flush`` inside the epoch.

Elements are float64 (disp_unit 8: displacements count elements) and int32 (disp_unit 1:
displacements count bytes); values are small integers and halves, so every sum and product is
exact whatever the order.  The first flavor (Allocate) runs every operation in every mode;
the other flavors take the modes in turn, one per operation.
"""

import numpy as np
import pytest

from gpumpi.testing import device_windows_across_nodes, one_node_only, run_ranks

pytestmark = pytest.mark.timeout(180)

W = 48  # elements in every window
E = 12  # basic elements moved by every datatype case
MODES = ("fence", "pscw", "lock_excl", "lock_shared", "lock_all")
PASSIVE = ("lock_excl", "lock_shared", "lock_all")
OPS_F = ("SUM", "PROD", "MAX", "MIN", "REPLACE")
OPS_I = ("SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR", "REPLACE")


# --- datatypes: an MPI constructor and the element offsets NumPy computes for it -------------
# name -> (count for E elements, offsets of one instance in elements, extent in elements)
SPECS = {
    "basic": (12, [0], 1),
    "vector": (2, [0, 1, 4, 5, 8, 9], 10),  # Create_vector(3, 2, 4)
    "indexed": (2, [0, 1, 3, 7, 8, 9], 10),  # Create_indexed([2, 1, 3], [0, 3, 7])
    "subarray": (2, [6, 7, 8, 11, 12, 13], 20),  # 4x5 array, 2x3 block at (1, 1)
    "resized": (6, [0, 1], 3),  # contiguous(2) resized to an extent of 3 elements
    "struct": (4, [0, 1, 3], 4),  # struct: 2 elements at 0, 1 at 3, of one basic type
}
NAMES = list(SPECS)


def _make_types(MPI, base):
    isz = base.Get_size()
    made = {
        "basic": base,
        "vector": base.Create_vector(3, 2, 4),
        "indexed": base.Create_indexed([2, 1, 3], [0, 3, 7]),
        "subarray": base.Create_subarray([4, 5], [2, 3], [1, 1]),
        "resized": base.Create_contiguous(2).Create_resized(0, 3 * isz),
        "struct": MPI.Datatype.Create_struct([2, 1], [0, 3 * isz], [base, base]),
    }
    for name, t in made.items():
        if name != "basic":
            t.Commit()
    return made


def _index(name):
    count, offs, ext = SPECS[name]
    return np.concatenate([np.array(offs) + j * ext for j in range(count)])


def _pair(p):
    """Origin, target and result datatypes of case ``p``: all 36 (origin, target) pairs in turn."""
    return NAMES[p % 6], NAMES[(p // 6 + p) % 6], NAMES[(p + 3) % 6]


# --- the model ----------------------------------------------------------------------------------
def _t0(rank, dt):
    v = (np.arange(W) * 7 + rank * 3) % 11 - 5
    return (v * 0.5).astype(dt) if dt == np.float64 else v.astype(dt)


def _o(rank, p, dt):
    v = (np.arange(W) * 5 + rank + p) % 9 - 4
    return (v * 0.25).astype(dt) if dt == np.float64 else v.astype(dt)


def _apply(op, t, o):
    """MPI's predefined op, element-wise, on the target value t and the origin value o."""
    if op == "SUM":
        return t + o
    if op == "PROD":
        return t * o
    if op == "MAX":
        return np.maximum(t, o)
    if op == "MIN":
        return np.minimum(t, o)
    if op == "LAND":
        return ((t != 0) & (o != 0)).astype(t.dtype)
    if op == "LOR":
        return ((t != 0) | (o != 0)).astype(t.dtype)
    if op == "LXOR":
        return ((t != 0) ^ (o != 0)).astype(t.dtype)
    if op == "BAND":
        return t & o
    if op == "BOR":
        return t | o
    if op == "BXOR":
        return t ^ o
    if op == "REPLACE":
        return o.copy()
    if op == "NO_OP":
        return t.copy()
    raise AssertionError(op)


def _apply_loc(op, t, o):
    """MAXLOC / MINLOC on (value, index) pairs, arrays of shape (k, 2)."""
    out = t.copy()
    for i in range(len(t)):
        (tv, ti), (ov, oi) = t[i], o[i]
        better = ov > tv if op == "MAXLOC" else ov < tv
        if better:
            out[i] = o[i]
        elif ov == tv:
            out[i] = (tv, min(ti, oi))
    return out


def _cases(dt):
    ops = OPS_F if dt == np.float64 else OPS_I
    cases = [("put", None), ("get", None)]
    cases += [("acc", op) for op in ops]
    cases += [("gacc", op) for op in ops + ("NO_OP",)]
    cases += [("fao", op) for op in ops + ("NO_OP",)]
    if dt != np.float64:  # compare-and-swap takes integer types only
        cases += [("cas", "hit"), ("cas", "miss"), ("accloc", "MAXLOC"), ("accloc", "MINLOC")]
    cases += [("rput", None), ("rget", None), ("racc", ops[len(ops) // 2]), ("rgacc", ops[-1])]
    return cases


# --- windows of every flavor, with a local view -----------------------------------------------
class Local:
    """The calling rank's own window memory: read() gives a NumPy copy, write() stores."""

    def __init__(self, read, write):
        self.read, self.write = read, write


def _host_view(a):
    def write(v):
        a[:] = v

    return Local(lambda: a.copy(), write)


def _make_window(MPI, c, flavor, dt, du):
    """(window, Local, disp(rank, element) -> target displacement, things to keep alive)."""
    isz = np.dtype(dt).itemsize
    keep = []
    if flavor == "create-numpy":
        a = np.zeros(W, dt)
        win = MPI.Win.Create(a, du, MPI.INFO_NULL, c)
        loc = _host_view(a)
    elif flavor == "create-allocmem":
        m = MPI.Alloc_mem(W * isz)
        keep.append(m)
        win = MPI.Win.Create(m, du, MPI.INFO_NULL, c)
        loc = _host_view(np.frombuffer(m, dt))
    elif flavor in ("allocate", "shared"):
        make = MPI.Win.Allocate if flavor == "allocate" else MPI.Win.Allocate_shared
        win = make(W * isz, du, MPI.INFO_NULL, c)
        loc = _host_view(np.frombuffer(win.tomemory(), dt))
    elif flavor == "dynamic":
        a = np.zeros(W, dt)
        win = MPI.Win.Create_dynamic(MPI.INFO_NULL, c)
        win.Attach(a)
        keep.append(a)
        loc = _host_view(a)
        addrs = c.allgather(MPI.Get_address(a))
        return win, loc, (lambda rank, e: addrs[rank] + e * isz), keep
    elif flavor == "create-sim":
        from gpumpi.testing import SimDeviceArray

        d = SimDeviceArray.zeros(W, dt)
        keep.append(d)
        win = MPI.Win.Create(d, du, MPI.INFO_NULL, c)
        loc = Local(d.get, d.set)
    elif flavor == "allocate-sim":
        win = MPI.Win.Allocate(W * isz, du, MPI.INFO_NULL, c, memory="device")
        tm = win.tomemory()
        loc = Local(lambda: tm.get().view(dt), lambda v: tm.set(np.ascontiguousarray(v, dt).view(np.uint8)))
    else:
        raise AssertionError(flavor)
    scale = isz // du
    return win, loc, (lambda rank, e: e * scale), keep


# --- one run: every case of one element type on one flavor ------------------------------------
def _run_cases(MPI, c, flavor, dt, every_mode):
    r, n = c.rank, c.size
    nxt, prv = (r + 1) % n, (r - 1) % n
    base = MPI.DOUBLE if dt == np.float64 else MPI.INT
    du = 8 if dt == np.float64 else 1
    types = _make_types(MPI, base)
    win, loc, disp, keep = _make_window(MPI, c, flavor, dt, du)
    world = c.Get_group()
    g_origin, g_target = world.Incl([prv]), world.Incl([nxt])
    sim = flavor.endswith("-sim")
    if sim:
        from gpumpi.testing import SimDeviceArray
    done = []
    p = 0
    for ci, (kind, op) in enumerate(_cases(dt)):
        allowed = PASSIVE if kind.startswith("r") else MODES
        modes = MODES if every_mode else (allowed[ci % len(allowed)],)
        for mode in modes:
            if kind.startswith("r") and mode not in PASSIVE:
                continue  # request-based operations are for passive-target epochs only
            p += 1
            on_device = sim and p % 2 == 1  # origin and result buffers on the device, every other case

            def mk(a):
                return SimDeviceArray.from_numpy(a) if on_device else a.copy()

            def rd(b):
                return b.get() if on_device else b

            oname, tname, rname = _pair(p)
            d = 1 + p % 4  # target displacement in elements
            what = (flavor, np.dtype(dt).name, kind, op, mode, oname, tname, d)
            # 1. every window to its initial pattern
            win.Lock(r, MPI.LOCK_EXCLUSIVE)
            loc.write(_t0(r, dt))
            win.Unlock(r)
            c.Barrier()
            # the model of my window (my origin is prv) and of my target's (for fetched values)
            model = _t0(r, dt)
            t_before = _t0(nxt, dt)
            o_mine, o_prv = _o(r, p, dt), _o(prv, p, dt)
            oi, ti, ri = _index(oname), _index(tname) + d, _index(rname)
            tspec = (disp(nxt, d), SPECS[tname][0], types[tname])
            ospec_count, ospec_type = SPECS[oname][0], types[oname]
            rspec_count, rspec_type = SPECS[rname][0], types[rname]
            sentinel = np.full(W, -99, dt)
            checks = []  # (got, expected) pairs the origin checks after the epoch
            # 2. the epoch
            if mode == "fence":
                win.Fence(MPI.MODE_NOPRECEDE)
            elif mode == "pscw":
                win.Post(g_origin)
                win.Start(g_target)
            elif mode == "lock_excl":
                win.Lock(nxt, MPI.LOCK_EXCLUSIVE)
            elif mode == "lock_shared":
                win.Lock(nxt, MPI.LOCK_SHARED)
            else:
                win.Lock_all()
            if kind in ("put", "rput"):
                ob = mk(o_mine)
                if kind == "put":
                    win.Put([ob, ospec_count, ospec_type], nxt, tspec)
                else:
                    win.Rput([ob, ospec_count, ospec_type], nxt, tspec).Wait()
                model[_index(tname) + d] = o_prv[oi]
                t_after = t_before.copy()
                t_after[ti] = o_mine[oi]
            elif kind in ("get", "rget"):
                gb = mk(sentinel)
                expect = sentinel.copy()
                expect[oi] = t_before[ti]
                if kind == "get":
                    win.Get([gb, ospec_count, ospec_type], nxt, tspec)
                    checks.append((lambda gb=gb: rd(gb), expect))
                else:
                    win.Rget([gb, ospec_count, ospec_type], nxt, tspec).Wait()
                    got = rd(gb)  # complete at the origin as soon as the request is
                    assert np.array_equal(got, expect), (what, got, expect)
                t_after = t_before
            elif kind in ("acc", "racc"):
                ob = mk(o_mine)
                mop = getattr(MPI, op)
                if kind == "acc":
                    win.Accumulate([ob, ospec_count, ospec_type], nxt, tspec, mop)
                else:
                    win.Raccumulate([ob, ospec_count, ospec_type], nxt, tspec, mop).Wait()
                model[ti] = _apply(op, model[ti], o_prv[oi])
                t_after = t_before.copy()
                t_after[ti] = _apply(op, t_before[ti], o_mine[oi])
            elif kind in ("gacc", "rgacc"):
                ob, rb = mk(o_mine), mk(sentinel)
                mop = getattr(MPI, op)
                args = ([ob, ospec_count, ospec_type], [rb, rspec_count, rspec_type], nxt, tspec, mop)
                expect = sentinel.copy()
                expect[ri] = t_before[ti]
                if kind == "gacc":
                    win.Get_accumulate(*args)
                    checks.append((lambda rb=rb: rd(rb), expect))
                else:
                    win.Rget_accumulate(*args).Wait()
                    got = rd(rb)
                    assert np.array_equal(got, expect), (what, got, expect)
                model[ti] = _apply(op, model[ti], o_prv[oi])
                t_after = t_before.copy()
                t_after[ti] = _apply(op, t_before[ti], o_mine[oi])
            elif kind == "fao":
                ob, rb = mk(o_mine[:1]), mk(sentinel[:1])
                win.Fetch_and_op(ob, rb, nxt, disp(nxt, d), getattr(MPI, op))
                checks.append((lambda rb=rb: rd(rb), t_before[d : d + 1]))
                model[d : d + 1] = _apply(op, model[d : d + 1], o_prv[:1])
                t_after = t_before.copy()
                t_after[d : d + 1] = _apply(op, t_before[d : d + 1], o_mine[:1])
            elif kind == "cas":
                hit = op == "hit"
                ob, rb = mk(o_mine[:1]), mk(sentinel[:1])
                cb = mk(t_before[d : d + 1] + (0 if hit else 1))
                win.Compare_and_swap(ob, cb, rb, nxt, disp(nxt, d))
                checks.append((lambda rb=rb: rd(rb), t_before[d : d + 1]))
                prv_hit = hit  # every rank runs the same case
                if prv_hit:
                    model[d] = o_prv[0]
                t_after = t_before.copy()
                if hit:
                    t_after[d] = o_mine[0]
            elif kind == "accloc":
                # (value, index) pairs of int32: three pairs at element d (even: pairs stay aligned)
                e0 = 2 * (d // 2)
                pairs = mk(o_mine[:6])
                win.Accumulate([pairs, 3, MPI.INT_INT], nxt, (disp(nxt, e0), 3, MPI.INT_INT), getattr(MPI, op))
                model[e0 : e0 + 6] = _apply_loc(op, model[e0 : e0 + 6].reshape(3, 2), o_prv[:6].reshape(3, 2)).ravel()
                t_after = t_before.copy()
                t_after[e0 : e0 + 6] = _apply_loc(op, t_before[e0 : e0 + 6].reshape(3, 2),
                                                  o_mine[:6].reshape(3, 2)).ravel()
            else:
                raise AssertionError(kind)
            if mode == "fence":
                win.Fence(MPI.MODE_NOSUCCEED)
            elif mode == "pscw":
                win.Complete()
                win.Wait()
            elif mode in ("lock_excl", "lock_shared"):
                win.Unlock(nxt)
            else:
                win.Flush(nxt)
                for fetched, expect in checks:  # Flush completes the operations at the origin too
                    got = fetched()
                    assert np.array_equal(got, expect), (what, "after Flush", got, expect)
                back = np.full(W, -99, dt)
                win.Get([back, W, base], nxt, (disp(nxt, 0), W, base))
                win.Flush(nxt)
                assert np.array_equal(back, t_after), (what, "read back after Flush", back, t_after)
                win.Unlock_all()
            # 3. the checks
            for fetched, expect in checks:
                got = fetched()
                assert np.array_equal(got, expect), (what, got, expect)
            if mode in PASSIVE:
                c.Barrier()  # my origin's epoch is over
                win.Lock(r, MPI.LOCK_SHARED)
                mine = loc.read()
                win.Unlock(r)
            else:
                mine = loc.read()  # Fence and Wait complete the epoch at the target
            assert np.array_equal(mine, model), (what, mine, model)
            done.append((kind, op, mode))
            c.Barrier()
    win.Free()
    for x in (world, g_origin, g_target):
        x.Free()
    for name, t in types.items():
        if name != "basic":
            t.Free()
    del keep
    return done


def _flavor_body(flavor, every_mode):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    return {np.dtype(dt).name: _run_cases(MPI, c, flavor, dt, every_mode) for dt in (np.float64, np.int32)}


def _check_coverage(got, every_mode):
    for kinds in got:
        assert kinds == got[0]  # every rank ran the same cases
    for dtname, done in got[0].items():
        dt = np.dtype(dtname).type
        ran_ops = {(k, o) for k, o, _ in done}
        assert ran_ops == set(_cases(dt)), dtname
        if every_mode:
            for k, o in _cases(dt):
                modes = {m for kk, oo, m in done if (kk, oo) == (k, o)}
                assert modes == set(PASSIVE if k.startswith("r") else MODES), (k, o, modes)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_allocate_every_operation_in_every_mode(n):
    got = run_ranks(_flavor_body, n, timeout=150, args=("allocate", True))
    _check_coverage(got, True)


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("flavor", ["create-numpy", "create-allocmem", "shared", "dynamic"])
def test_host_flavors(flavor, n):
    if flavor == "shared":
        one_node_only(n, "a shared window (Win.Allocate_shared)")
    got = run_ranks(_flavor_body, n, timeout=120, args=(flavor, False))
    _check_coverage(got, False)


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("flavor", ["create-numpy", "shared"])
def test_host_flavors_every_mode_at_two_ranks(flavor, n):
    if flavor == "shared":
        one_node_only(n, "a shared window (Win.Allocate_shared)")
    got = run_ranks(_flavor_body, n, timeout=150, args=(flavor, True))
    _check_coverage(got, True)


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("flavor", ["create-sim", "allocate-sim"])
def test_device_windows_on_sim(flavor, n):
    device_windows_across_nodes(n)
    got = run_ranks(_flavor_body, n, timeout=150, args=(flavor, False), env={"GPUMPI_DEVICE": "sim"})
    _check_coverage(got, False)


# --- PROC_NULL targets: no-ops in every mode ---------------------------------------------------
def _proc_null():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    a = np.arange(8.0)
    win = MPI.Win.Create(a, 8, MPI.INFO_NULL, c)
    res = np.full(8, -1.0)
    win.Fence()
    win.Put(np.zeros(8), MPI.PROC_NULL)
    win.Get(res, MPI.PROC_NULL)
    win.Accumulate(np.zeros(8), MPI.PROC_NULL, op=MPI.SUM)
    win.Get_accumulate(np.zeros(8), res, MPI.PROC_NULL)
    win.Fence()
    win.Lock_all()
    win.Fetch_and_op(np.zeros(1), res[:1], MPI.PROC_NULL)
    win.Compare_and_swap(np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64), MPI.PROC_NULL)
    win.Rput(np.zeros(8), MPI.PROC_NULL).Wait()
    win.Rget(res, MPI.PROC_NULL).Wait()
    win.Unlock_all()
    win.Free()
    assert np.array_equal(a, np.arange(8.0)) and np.array_equal(res, np.full(8, -1.0))
    return True


@pytest.mark.parametrize("n", [1, 2])
def test_proc_null_targets_do_nothing(n):
    assert run_ranks(_proc_null, n, timeout=60) == [True] * n
