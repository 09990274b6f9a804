"""The near path of MPI.Win: Fetch_and_op, Compare_and_swap, Put, Get and Flush(_local) to a
locked target whose window memory this process maps (``Win.Allocate``) take one compiled call
(gpumpi/rma/near.py, "the near path"); everything else takes the general path.  These tests hold the
near path to the same results and the same errors as the general one:

* every op and element type MPI defines for Fetch_and_op, bare arrays and ``[array, T]`` /
  ``(array, T)`` specs, leaves the target and the result as NumPy computes them;
* Compare_and_swap swaps exactly when the target equals ``compare``; Put/Get move the bytes;
* arguments the near path does not take (misaligned or out-of-range targets, unaligned or
  read-only or 2-element arrays, mixed datatypes, non-int ranks, no epoch, a freed window)
  give the general path's result or error and leave the window as it was;
* which targets the near path admits follows the lock epochs exactly (Lock, Lock_all,
  Unlock, Unlock_all, failed Locks), at 1 and 2 ranks.

Expected values come from NumPy arithmetic on arrays of the element type (so integers wrap).
"""

import numpy as np
import pytest

from gpumpi.testing import one_node_only, run_ranks

pytestmark = pytest.mark.timeout(120)

SLOTS = 160  # 8-byte slots in every window (disp_unit 8)
INTS = ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8"]
FLOATS = ["f4", "f8"]
MPI_NAME = {"i1": "INT8_T", "u1": "UINT8_T", "i2": "INT16_T", "u2": "UINT16_T", "i4": "INT32_T",
            "u4": "UINT32_T", "i8": "INT64_T", "u8": "UINT64_T", "f4": "FLOAT", "f8": "DOUBLE"}
OPS_I = ["SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR", "REPLACE", "NO_OP"]
OPS_F = ["SUM", "PROD", "MAX", "MIN", "REPLACE", "NO_OP"]  # MPI: no logical or bitwise ops on floats
CASES = [(op, t) for t in INTS for op in OPS_I] + [(op, t) for t in FLOATS for op in OPS_F]


def ref(op, old, v, dt):
    """``old op v`` as an element of ``dt``, by NumPy."""
    a, b = np.array([old], dt), np.array([v], dt)
    with np.errstate(over="ignore", invalid="ignore"):
        r = {"SUM": np.add, "PROD": np.multiply, "MAX": np.maximum, "MIN": np.minimum,
             "LAND": np.logical_and, "LOR": np.logical_or, "LXOR": np.logical_xor, "BAND": np.bitwise_and,
             "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}.get(op)
        out = b if op == "REPLACE" else a if op == "NO_OP" else r(a, b)
    return out.astype(dt)[0]


def start(rank, k, dt):
    """The initial element of slot ``k`` of ``rank``'s window: small, with negatives and zeros."""
    v = (rank * 7 + k * 3) % 9 - (0 if np.dtype(dt).kind == "u" else 3)
    return np.dtype(dt).type(v * (2 if k % 5 == 0 else 1))


def value(k, dt):
    """The origin element of case ``k`` (including 0 and, for integers, a wrapping product)."""
    v = [0, 2, 3, -1, 1, 100][k % 6]
    if np.dtype(dt).kind == "u" and v < 0:
        v = 250
    return np.array([v]).astype(dt)[0]


def _slot(mem, k, dt):
    return mem[8 * k: 8 * k + np.dtype(dt).itemsize].view(dt)


def _near_results(mode):
    from gpumpi import MPI
    from gpumpi.rma.near import NEAR

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    nxt, prv = (r + 1) % n, (r - 1) % n
    win = MPI.Win.Allocate(SLOTS * 8, 8, MPI.INFO_NULL, c)
    mem = np.frombuffer(win.tomemory(), np.uint8)
    base = len(CASES)  # then one Compare_and_swap slot per integer type
    win.Lock(r)
    for k, (op, t) in enumerate(CASES):
        _slot(mem, k, t)[0] = start(r, k, t)
    for j, t in enumerate(INTS):
        _slot(mem, base + j, t)[0] = start(r, 0, t)
    win.Unlock(r)
    c.Barrier()
    assert win._st.near == {}
    if mode == "lock_all":
        win.Lock_all()
        assert sorted(win._st.near) == list(range(n))
    else:
        win.Lock(nxt, MPI.LOCK_SHARED)
        assert sorted(win._st.near) == [nxt]
    fetched = []
    for k, (op, t) in enumerate(CASES):
        dt = np.dtype(t)
        T = getattr(MPI, MPI_NAME[t])
        o, res = np.array([value(k, dt)], dt), np.full(1, 99, dt)
        form = k % 3 if t != "u1" else 1 + k % 2  # a bare uint8 array is MPI.BYTE, which takes no arithmetic
        origin, result = [(o, res), ([o, T], [res, T]), ((o, T), (res, T))][form]
        win.Fetch_and_op(origin, result, nxt, k, getattr(MPI, op))
        if k % 4 == 0:
            win.Flush_local(nxt)
        fetched.append(res[0])
    win.Flush(nxt)
    # Compare_and_swap: a hit and a miss per integer type, in slots after the Fetch_and_op cases
    cas = []
    for j, t in enumerate(INTS):
        dt = np.dtype(t)
        T = getattr(MPI, MPI_NAME[t])
        k = base + j
        res = np.zeros(1, dt)
        want = start(nxt, 0, t)  # what the target slot holds
        win.Compare_and_swap([np.array([42], dt), T], [np.array([want], dt), T], [res, T], nxt, k)
        hit = res[0]
        win.Compare_and_swap(np.array([7], dt), np.array([want], dt), res, nxt, k)  # now 42: a miss
        cas.append((hit, res[0]))
    # Put then Get of 3 int32 at slot 150 (24 bytes at disp 150 * 8)
    put = np.array([5, -6, 7], np.int32) + r
    win.Put([put, MPI.INT32_T], nxt, 150)
    win.Flush(nxt)
    back = np.zeros(3, np.int32)
    win.Get(back, nxt, 150)
    win.Flush_local(nxt)
    typed = [(op, t) for k, (op, t) in enumerate(CASES) if (k % 3 if t != "u1" else 1)]
    near_used = (all(NEAR.fops.get((id(getattr(MPI, op)), id(getattr(MPI, MPI_NAME[t])))) for op, t in typed)
                 and all(NEAR.cass.get(id(getattr(MPI, MPI_NAME[t]))) for t in INTS))
    if mode == "lock_all":
        win.Unlock_all()
    else:
        win.Unlock(nxt)
    assert win._st.near == {}
    c.Barrier()
    # the target's side: my window as my predecessor's operations left it
    win.Lock(r)
    bad = []
    for k, (op, t) in enumerate(CASES):
        want = ref(op, start(r, k, t), value(k, t), t)
        got = _slot(mem, k, t)[0]
        if not (got == want or (np.isnan(got) and np.isnan(want))):
            bad.append(f"{op} {t} slot {k}: {got!r}, expected {want!r}")
    for j, t in enumerate(INTS):
        if _slot(mem, base + j, t)[0] != 42:
            bad.append(f"Compare_and_swap {t}: target holds {_slot(mem, base + j, t)[0]!r}, expected 42")
    got_put = mem[150 * 8: 150 * 8 + 12].view(np.int32).copy()
    win.Unlock(r)
    c.Barrier()
    win.Free()
    for k, (op, t) in enumerate(CASES):
        if fetched[k] != start(nxt, k, t):
            bad.append(f"{op} {t} case {k}: fetched {fetched[k]!r}, expected {start(nxt, k, t)!r}")
    return bad, cas, [int(x) for x in back], [int(x) for x in got_put], near_used, prv


@pytest.mark.parametrize("mode, n", [("lock", 1), ("lock_all", 2), ("lock", 2)])
def test_near_path_results_match_numpy(mode, n):
    one_node_only(n, "the near path (window memory mapped here)")
    got = run_ranks(_near_results, n, timeout=100, args=(mode,))
    for r, (bad, cas, back, got_put, near_used, prv) in enumerate(got):
        assert not bad, "\n".join(bad)
        for t, (hit, miss) in zip(INTS, cas):
            assert hit == start((r + 1) % n, 0, t) and miss == 42, (t, hit, miss)
        assert back == [5 + r, -6 + r, 7 + r]
        assert got_put == [5 + prv, -6 + prv, 7 + prv]
        assert near_used  # the cases above did take the near path


def _outcome(MPI, call):
    try:
        call()
    except MPI.Exception as e:
        return f"MPI.Exception class {e.Get_error_class()}"
    except Exception as e:  # noqa: BLE001 - the type is the outcome compared
        return type(e).__name__
    return "ok"


def _refusals(flavor):
    """Arguments the near path does not take, on a window it serves (``allocate``) and on one it
    never serves (``create``: private NumPy memory, the general path): the outcomes, and the
    window afterwards."""
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    nxt = (r + 1) % n
    if flavor == "allocate":
        win = MPI.Win.Allocate(8 * 8, 8, MPI.INFO_NULL, c)
        mem = np.frombuffer(win.tomemory(), np.int64)
    else:
        mem = np.zeros(8, np.int64)
        win = MPI.Win.Create(mem, 8, MPI.INFO_NULL, c)
    win.Lock(r)
    mem[:] = np.arange(8) + 100 * r
    win.Unlock(r)
    c.Barrier()

    def i8(v=0):
        return np.array([v], np.int64)

    ro = i8()
    ro.flags.writeable = False
    user = MPI.Op.Create(lambda a, b, t: None, True)
    sum_copy = MPI.Op(MPI.SUM)
    sum_copy.free()  # a freed reference to SUM: OP_NULL
    out = {}
    win.Lock(nxt, MPI.LOCK_EXCLUSIVE)
    near = sorted(win._st.near)
    # calls that succeed first: the near path remembers them, and the calls below reuse that
    win.Fetch_and_op(i8(0), i8(), nxt, 1)  # SUM of 0 (LONG arrays): changes nothing
    win.Compare_and_swap(i8(1), i8(-5), i8(), nxt, 1)  # slot 1 is not -5: no swap
    for what, call in [
        ("Fetch_and_op at disp 8", lambda: win.Fetch_and_op(i8(1), i8(), nxt, 8)),
        ("Fetch_and_op at disp -1", lambda: win.Fetch_and_op(i8(1), i8(), nxt, -1)),
        ("Compare_and_swap at disp 8", lambda: win.Compare_and_swap(i8(1), i8(), i8(), nxt, 8)),
        ("Fetch_and_op at rank size", lambda: win.Fetch_and_op(i8(1), i8(), n, 0)),
        ("Fetch_and_op at rank 1.0", lambda: win.Fetch_and_op(i8(1), i8(), float(nxt), 0)),
        ("Fetch_and_op at disp 1.0", lambda: win.Fetch_and_op(i8(1), i8(), nxt, 1.0)),
        ("Fetch_and_op into a read-only result", lambda: win.Fetch_and_op(i8(1), ro, nxt, 0)),
        ("Fetch_and_op of 2 elements", lambda: win.Fetch_and_op(np.ones(2, np.int64), np.zeros(2, np.int64), nxt)),
        ("Fetch_and_op INT64_T into LONG", lambda: win.Fetch_and_op([i8(1), MPI.INT64_T], i8(), nxt, 0)),
        ("Fetch_and_op of int64 as DOUBLE", lambda: win.Fetch_and_op([i8(1), MPI.DOUBLE], [i8(), MPI.DOUBLE], nxt)),
        ("Fetch_and_op BOR on DOUBLE", lambda: win.Fetch_and_op(np.ones(1), np.zeros(1), nxt, 0, MPI.BOR)),
        ("Fetch_and_op with a user op", lambda: win.Fetch_and_op(i8(1), i8(), nxt, 0, user)),
        ("Fetch_and_op with a freed SUM", lambda: win.Fetch_and_op(i8(1), i8(), nxt, 0, sum_copy)),
        ("Fetch_and_op with an op that is a type", lambda: win.Fetch_and_op(i8(1), i8(), nxt, 0, MPI.INT)),
        ("Compare_and_swap on DOUBLE", lambda: win.Compare_and_swap(np.ones(1), np.zeros(1), np.zeros(1), nxt)),
        ("Compare_and_swap into a read-only result", lambda: win.Compare_and_swap(i8(1), i8(), ro, nxt)),
        ("Compare_and_swap LONG, INT64_T", lambda: win.Compare_and_swap(i8(1), [i8(), MPI.INT64_T], i8(), nxt)),
        ("Put past the end", lambda: win.Put(np.zeros(2, np.int64), nxt, 7)),
        ("Put at disp -1", lambda: win.Put(i8(), nxt, -1)),
        ("Put with a bad type pair", lambda: win.Put([np.zeros(3, np.uint8), MPI.INT], nxt, 0)),
        ("Get into a read-only array", lambda: win.Get(ro, nxt, 0)),
        ("Get past the end", lambda: win.Get(np.zeros(9, np.int64), nxt)),
        ("Flush at rank size", lambda: win.Flush_local(n)),
    ]:
        out[what] = _outcome(MPI, call)
    # the general path's results where the near path declines
    got = {}
    res = i8(-1)
    win.Fetch_and_op(i8(5), res, np.int64(nxt), np.int64(2))  # NumPy integers for rank and disp
    got["numpy ints"] = int(res[0])
    raw = np.zeros(17, np.uint8)
    u = np.frombuffer(raw.data, np.int64, 1, 1)  # an unaligned origin
    u[0] = 3
    win.Fetch_and_op(u, res, nxt, 3)
    got["unaligned origin"] = int(res[0])
    z = np.array(0, np.int64)  # 0-d result and origin: one element each
    win.Fetch_and_op(np.array(4, np.int64), z, nxt, 4)
    got["0-d"] = int(z)
    win.Compare_and_swap(np.array([9], np.int64)[:1], np.array([6 + 100 * nxt]), res, nxt, 6)  # compare: LONG
    got["cas"] = int(res[0])
    win.Unlock(nxt)
    left = sorted(win._st.near)
    for what, call in [
        ("Fetch_and_op after Unlock", lambda: win.Fetch_and_op(i8(1), i8(), nxt, 0)),
        ("Compare_and_swap after Unlock", lambda: win.Compare_and_swap(i8(1), i8(), i8(), nxt, 0)),
        ("Put after Unlock", lambda: win.Put(i8(), nxt, 0)),
        ("Get after Unlock", lambda: win.Get(i8(), nxt, 0)),
        ("Flush_local after Unlock", lambda: win.Flush_local(nxt)),
        ("Flush after Unlock", lambda: win.Flush(nxt)),
        ("Lock at rank size", lambda: win.Lock(n)),
    ]:
        out[what] = _outcome(MPI, call)
    left_after_bad_lock = sorted(win._st.near)
    win.Fence()  # a fence epoch: the general path
    res2 = i8(-1)
    win.Fetch_and_op(i8(7), res2, nxt, 5)
    win.Fence()
    got["fence"] = int(res2[0])
    c.Barrier()
    win.Lock(r)
    mine = mem.tolist()
    win.Unlock(r)
    c.Barrier()
    other = MPI.Win(win)
    win.Free()
    out["Fetch_and_op on a freed window"] = _outcome(MPI, lambda: other.Fetch_and_op(i8(1), i8(), nxt, 0))
    out["Flush_local on a freed window"] = _outcome(MPI, lambda: other.Flush_local(nxt))
    user.Free()
    return out, got, mine, near, left, left_after_bad_lock


@pytest.mark.parametrize("n", [1, 2])
def test_near_path_refusals_match_the_general_path(n):
    one_node_only(n, "the near path (window memory mapped here)")
    near = run_ranks(_refusals, n, timeout=100, args=("allocate",))
    general = run_ranks(_refusals, n, timeout=100, args=("create",))
    for r in range(n):
        out, got, mine, admitted, left, left_bad = near[r]
        g_out, g_got, g_mine, g_admitted, _, _ = general[r]
        assert admitted == [(r + 1) % n] and g_admitted == []  # mapped memory only
        assert left == [] and left_bad == []
        assert out == g_out, {k: (out[k], g_out[k]) for k in out if out[k] != g_out[k]}
        assert got == g_got
        assert mine == g_mine
        prv = (r - 1) % n
        # independently: the classes MPI names, and the window's values
        assert out["Fetch_and_op at disp 8"] == out["Put past the end"] == f"MPI.Exception class {MPI_ERR('RMA_RANGE')}"
        assert out["Fetch_and_op at rank size"] == f"MPI.Exception class {MPI_ERR('RANK')}"
        assert out["Fetch_and_op at rank 1.0"] == out["Fetch_and_op at disp 1.0"] == "TypeError"
        assert out["Fetch_and_op of 2 elements"] == out["Fetch_and_op INT64_T into LONG"] == "ValueError"
        assert out["Fetch_and_op BOR on DOUBLE"] == out["Fetch_and_op with a user op"] == \
            f"MPI.Exception class {MPI_ERR('OP')}"
        assert out["Compare_and_swap on DOUBLE"] == f"MPI.Exception class {MPI_ERR('TYPE')}"
        for what in ("Fetch_and_op after Unlock", "Compare_and_swap after Unlock", "Put after Unlock",
                     "Get after Unlock", "Flush_local after Unlock", "Flush after Unlock"):
            assert out[what] == f"MPI.Exception class {MPI_ERR('RMA_SYNC')}", what
        assert out["Fetch_and_op on a freed window"] == f"MPI.Exception class {MPI_ERR('WIN')}"
        base = 100 * r
        assert got == {"numpy ints": 2 + 100 * ((r + 1) % n), "unaligned origin": 3 + 100 * ((r + 1) % n),
                       "0-d": 4 + 100 * ((r + 1) % n), "cas": 6 + 100 * ((r + 1) % n),
                       "fence": 5 + 100 * ((r + 1) % n)}
        want = [base + k for k in range(8)]
        want[0] += 1  # int64 1 and slot 0 read as doubles (denormals): their sum's bits are the integer sum
        want[2] += 5
        want[3] += 3
        want[4] += 4
        want[6] = 9
        want[5] += 7
        assert mine == want, (mine, want, prv)


def MPI_ERR(name):
    from gpumpi import MPI

    return getattr(MPI, "ERR_" + name)


def _misaligned(count):
    """Every rank adds 1 ``count`` times to int64s and an int32 at misaligned addresses of rank 0's
    window (disp_unit 1), by Fetch_and_op, Accumulate and Compare_and_swap loops, and by an
    Accumulate of a type with one aligned and one misaligned element while Fetch_and_op adds to
    each of the two alone; checks what it fetched; rank 0 returns the totals."""
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    win = MPI.Win.Allocate(64 if c.rank == 0 else 0, 1, MPI.INFO_NULL, c)
    two = MPI.INT64_T.Create_hindexed([1, 1], [32, 44]).Commit()  # bytes 32..39 and 44..51
    win.Lock_all()
    one64, one32, ones = np.ones(1, np.int64), np.ones(1, np.int32), np.ones(2, np.int64)
    seen = []
    for i in range(count):
        res = np.zeros(1, np.int64)
        win.Fetch_and_op(one64, res, 0, 4, MPI.SUM)  # bytes 4..11: not a multiple of 8
        seen.append(int(res[0]))
        win.Accumulate([one32, MPI.INT32_T], 0, (13, 1, MPI.INT32_T), MPI.SUM)  # bytes 13..16
        while True:  # a Compare_and_swap increment of the int64 at bytes 20..27
            cur = np.zeros(1, np.int64)
            win.Get_accumulate(one64, cur, 0, 20, MPI.NO_OP)
            old = np.zeros(1, np.int64)
            win.Compare_and_swap(cur + 1, cur, old, 0, 20)
            if old[0] == cur[0]:
                break
        win.Accumulate([ones, MPI.INT64_T], 0, (0, 1, two), MPI.SUM)
        win.Fetch_and_op(one64, res, 0, 32 if i % 2 else 44, MPI.SUM)
    win.Unlock_all()
    two.Free()
    c.Barrier()
    out = None
    if c.rank == 0:
        win.Lock(0)
        mem = np.frombuffer(win.tomemory(), np.uint8)
        out = (int(mem[4:12].view(np.int64)[0]), int(mem[13:17].view(np.int32)[0]),
               int(mem[20:28].view(np.int64)[0]), int(mem[32:40].view(np.int64)[0]),
               int(mem[44:52].view(np.int64)[0]))
        win.Unlock(0)
    c.Barrier()
    win.Free()
    return out, seen


@pytest.mark.parametrize("n", [1, 2])
def test_misaligned_elements_are_atomic(n):
    """MPI puts no alignment rule on displacements: an element at a misaligned address of mapped
    memory takes the accumulate lock instead of an instruction, and stays atomic; the aligned
    elements of the same call keep their instruction (which every other origin of them uses)."""
    count = 300
    got = run_ranks(_misaligned, n, timeout=100, args=(count,))
    half = count // 2
    assert got[0][0] == (count * n, count * n, count * n, (count + half) * n, (count + count - half) * n)
    fetched = sorted(v for _, seen in got for v in seen)
    assert fetched == list(range(count * n))


def _two_windows():
    """Alternating windows, targets and types: the near path's memory of the last call never
    carries over to another window, target or epoch.  Window 0 has disp_unit 8, window 1
    disp_unit 4 (its int64 at byte 12 is misaligned: the general path)."""
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    wins = [MPI.Win.Allocate(64, 8, MPI.INFO_NULL, c), MPI.Win.Allocate(64, 4, MPI.INFO_NULL, c)]
    for w in wins:
        w.Lock_all()
    res = np.zeros(1, np.int64)
    for i in range(6):
        for k, w in enumerate(wins):
            for t in range(n):
                w.Fetch_and_op(np.array([1 + k], np.int64), res, t, 1 if k == 0 else 3, MPI.SUM)
                w.Compare_and_swap(np.array([i + 1], np.int64), np.array([i], np.int64), res, t, 6)
    for k, w in enumerate(wins):
        w.Unlock_all()
        w.Lock_all()  # a new epoch: the same targets again
        w.Fetch_and_op(np.ones(1, np.int64), res, r, 7 if k == 0 else 10, MPI.SUM)
        w.Unlock_all()
    c.Barrier()
    out = []
    for w in wins:
        w.Lock(r)
        out.append(np.frombuffer(w.tomemory(), np.uint8).copy())
        w.Unlock(r)
    c.Barrier()
    for w in wins:
        w.Free()
    return out


@pytest.mark.parametrize("n", [1, 2])
def test_alternating_windows_targets_and_epochs(n):
    got = run_ranks(_two_windows, n, timeout=100)
    for a, b in got:
        want = np.zeros(64, np.uint8)
        v = want.view(np.int64)
        # window 0: every rank adds 1 to slot 1 six times; the Compare_and_swap chain i -> i + 1 for
        # i = 0..5 from every rank ends at 6 whatever the interleaving; slot 7: one add of the owner
        v[1], v[6], v[7] = 6 * n, 6, 1
        assert np.array_equal(a, want), a.view(np.int64)
        want = np.zeros(64, np.uint8)
        want[12:20].view(np.int64)[0] = 12 * n  # 2 six times from every rank, at byte 12
        want[24:32].view(np.int64)[0] = 6  # disp 6 * 4
        want[40:48].view(np.int64)[0] = 1  # disp 10 * 4
        assert np.array_equal(b, want), b


ACC_CASES = [(op, t) for t in INTS for op in OPS_I if op != "NO_OP"] + \
            [(op, t) for t in FLOATS for op in OPS_F if op != "NO_OP"]


def _accumulate_near(n_elems):
    """Accumulate of ``n_elems``-element arrays by every rank into every rank's window (Lock_all),
    each case in its own run of slots, three times: the target holds what NumPy computes; every
    origin spec the near path takes was served by it; what it refuses (NO_OP, out of range,
    misaligned, a strided origin) gets the general path's result or error."""
    from gpumpi import MPI
    from gpumpi.rma.near import NEAR

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    per = 8 * n_elems  # bytes per case: n_elems slots of 8 bytes
    win = MPI.Win.Allocate(len(ACC_CASES) * per + 64, 8, MPI.INFO_NULL, c)
    mem = np.frombuffer(win.tomemory(), np.uint8)
    win.Lock(r)
    for k, (op, t) in enumerate(ACC_CASES):
        dt = np.dtype(t)
        mem[k * per: k * per + n_elems * dt.itemsize].view(dt)[:] = [start(r, k + i, t) for i in range(n_elems)]
    win.Unlock(r)
    c.Barrier()
    calls = {}
    opname = {id(getattr(MPI, o)): o for o in OPS_I}
    win.Lock_all()
    for k, (op, t) in enumerate(ACC_CASES):  # first use makes the entries; count the compiled calls
        NEAR.accs.pop((id(getattr(MPI, op)), id(getattr(MPI, MPI_NAME[t]))), None)
    for rep in range(3):
        for k, (op, t) in enumerate(ACC_CASES):
            dt = np.dtype(t)
            T = getattr(MPI, MPI_NAME[t])
            o = np.array([value(k + i + rep, dt) for i in range(n_elems)], dt)
            origin = [o, T] if (t == "u1" or k % 2) else o  # a bare uint8 array is MPI.BYTE: no arithmetic
            for tgt in range(n):
                win.Accumulate(origin, tgt, k * per // 8, getattr(MPI, op))
        for key, e in list(NEAR.accs.items()):  # count the compiled calls from the next round on
            if e and not isinstance(e[0], _Counting):
                NEAR.accs[key] = (_Counting(e[0], calls, (opname[key[0]], e[3].str[1:])),) + e[1:]
        win.Flush_all()
    errors = []
    for f in (lambda: win.Accumulate(np.zeros(1), 0, 0, MPI.NO_OP),  # the general path's error
              lambda: win.Accumulate(np.zeros(4), 0, len(ACC_CASES) * per // 8 + 6, MPI.SUM)):  # past the end
        try:
            f()
            errors.append(None)
        except Exception as e:  # noqa: BLE001
            errors.append(type(e).__name__)
    win.Unlock_all()
    c.Barrier()
    # misaligned (displacement unit 1, odd offset) and Fortran-order origins: the general path, right results
    win2 = MPI.Win.Allocate(64, 1, MPI.INFO_NULL, c)
    m2 = np.frombuffer(win2.tomemory(), np.uint8)
    win2.Lock(r)
    m2[:] = 0
    win2.Unlock(r)
    c.Barrier()
    win2.Lock_all()
    win2.Accumulate(np.array([1.5, 2.5]), 0, 3, MPI.SUM)
    win2.Accumulate(np.asfortranarray(np.arange(4, dtype=np.int32).reshape(2, 2)), 0, 40, MPI.SUM)  # not C order
    win2.Unlock_all()
    c.Barrier()
    odd = strided = None
    if r == 0:
        win2.Lock(0)
        odd = np.frombuffer(m2[3:19].tobytes(), np.float64).tolist()
        strided = np.frombuffer(m2[40:56].tobytes(), np.int32).tolist()
        win2.Unlock(0)
    c.Barrier()
    win2.Free()
    win.Lock(r)
    bad = []
    for k, (op, t) in enumerate(ACC_CASES):
        dt = np.dtype(t)
        got = mem[k * per: k * per + n_elems * dt.itemsize].view(dt)
        for i in range(n_elems):
            want = start(r, k + i, t)
            for rep in range(3):
                for _ in range(n):  # every rank adds the same value in a round: any order, one result
                    want = ref(op, want, value(k + i + rep, dt), t)
            if not (got[i] == want or (np.isnan(got[i]) and np.isnan(want))):
                bad.append(f"{op} {t} case {k}[{i}]: {got[i]!r}, expected {want!r}")
    win.Unlock(r)
    c.Barrier()
    win.Free()
    return bad, sorted(calls.items()), errors, odd, strided


class _Counting:
    """A compiled near-path function that counts its calls (per case key) and forwards them."""

    def __init__(self, fn, calls, key):
        self.fn, self.calls, self.key = fn, calls, key

    def __call__(self, *a):
        self.calls[self.key] = self.calls.get(self.key, 0) + 1
        return self.fn(*a)


@pytest.mark.parametrize("n, n_elems", [(1, 1), (2, 3), (3, 1)])
def test_accumulate_near_path_matches_numpy_and_the_general_path(n, n_elems):
    one_node_only(n, "the near path (window memory mapped here)")
    for bad, calls, errors, odd, strided in run_ranks(_accumulate_near, n, args=(n_elems,)):
        assert not bad, bad[:10]
        # every case was served by the compiled call once warm (a bare array's datatype is known
        # after its first call, which the general path serves): the last round, to every target
        assert len(calls) == len(ACC_CASES) and all(v >= n for _, v in calls), calls
        assert errors[0] is not None and errors[1] is not None, errors
        if odd is not None:
            assert odd == [1.5 * n, 2.5 * n] and strided == [0, 2 * n, 1 * n, 3 * n], (odd, strided)  # memory order
