"""The one-sided suite of ``gpumpi bench`` (``rma``, L6): OSU-style ``Put``/``Get`` latency and
bandwidth, ``Accumulate`` bandwidth, and ``Fetch_and_op``/``Compare_and_swap`` time per operation
under passive-target synchronisation, every result validated, and its tables.

Theory of operation
===================
The suite follows the OSU one-sided benchmarks (``osu_put_latency``, ``osu_get_latency``,
``osu_put_bw``, ``osu_get_bw``, ``osu_acc_latency``, ``osu_fop_latency``,
``osu_cas_latency``, each in their ``-s flush`` form) under the rules of
:mod:`gpumpi.bench._common`:

* ranks: rank 0 is the origin and rank 1 the target, on a two-rank communicator split
  off ``comm`` (ranks above 1 wait at the closing ``Barrier`` of ``comm``).  One window
  of the same size on both ranks serves the whole sweep: ``Win.Allocate`` (default), or
  ``Win.Create`` on ``MPI.Alloc_mem`` memory (``window="create"``); with device buffers
  (gpumpi only) ``Win.Allocate(..., memory="device")`` or ``Win.Create`` on a device
  array, and the origin buffers are device arrays too.
* epochs: every measurement is one ``Lock(1, LOCK_SHARED)`` ... ``Unlock(1)`` epoch of
  rank 0; rank 1 makes no MPI call meanwhile (truly passive).  A ``Barrier`` of the two
  ranks comes before and after, and the target fills and reads its own window memory
  in a ``Lock``/``Unlock`` epoch on itself, so its local accesses and the origin's
  operations are ordered in either memory model.
* ``put_lat``/``get_lat``: ``Put`` (``Get``) of ``size`` bytes at displacement 0 then
  ``Flush(1)``; ``time`` is one pair.
* ``put_bw``/``get_bw``/``acc_bw``: a window of :data:`~gpumpi.bench._common.WINDOW`
  (64) operations then one ``Flush(1)``; ``time`` is the window's time over 64, and
  ``bw = size * 64 * iters / t`` in MB/s (1e6 B/s, OSU's unit).  Operation ``j`` uses
  slot ``j % nslots`` on both sides, where slots of ``size`` bytes (64-byte aligned)
  fill at most :data:`~gpumpi.bench._common.RECV_CAP` bytes (:func:`plan_slots`).
  ``acc_bw`` accumulates (``SUM``) arrays of float64: its size is rounded down to
  whole elements.
* ``fop_rate``/``cas_rate``: one ``Fetch_and_op`` (``SUM`` of 1 into an int64 counter)
  or ``Compare_and_swap`` (``i`` for ``i + 1``) then ``Flush_local(1)``, after which the
  fetched value may be read; ``time`` is one pair (OSU's ``osu_fop_latency`` and
  ``osu_cas_latency``; 1 / time is the rate).
* validation, after each timed loop: a put leaves in the target slot the pattern of
  :func:`~gpumpi.bench._common.fill_pattern` seeded by the slot (the target started from
  its complement); a get leaves the target's pattern in the origin slot (likewise);
  an accumulate leaves ``(skip + iters) * hits * value`` in each float64 of a slot,
  exact in float64 (:func:`acc_expected`); ``Fetch_and_op`` fetches ``0, 1, 2 ...``
  in order and leaves the total in the counter, as ``Compare_and_swap`` does.  The
  ``#wrong`` column counts bytes (put/get), float64 elements (acc) or int64 values
  (fop/cas) that differ, both ranks summed.

Default iteration counts are OSU's (10000 for latencies and atomics, 100 windows for
bandwidths, a tenth of that untimed first), scaled down above 8 KiB so that one
measurement moves at most about 1 GiB (``--quick``: 1000/20, 128 MiB).  Sizes are 8 B ...
1 MiB in steps of x4 (:func:`rma_default_sizes`).

Rows are keyed by ``rma`` (the test); ``--compare`` pairs two runs by (test, size)
(:func:`compare_rma_results`).  pip's MPICH is not CUDA-aware, so mpi4py has no device
windows: its rows of a device-buffer run are ``skipped`` with the reason
(:func:`skipped_rows`) instead of being measured on other memory.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Sequence

from ._common import (
    ALIGN,
    BUFFER_KINDS,
    DEVICE_BUFFER_KINDS,
    RECV_CAP,
    WINDOW,
    BenchError,
    Suite,
    DeviceMemory,
    fill_pattern,
    slot_stride,
    sum_wrong,
    check_buffer_kind,
    check_device_buffers,
    parse_size,
)
from .report import buffer_words, format_cell, fmt_ratio, ranks_words, wrong_footer, format_columns, library_version, ratio
from .report import transport_words

#: The tests of the suite, in the order they run and print.
TESTS = ("put_lat", "get_lat", "put_bw", "get_bw", "acc_bw", "fop_rate", "cas_rate")
#: The tests that take a size.
SIZED = ("put_lat", "get_lat", "put_bw", "get_bw", "acc_bw")
#: The tests that issue a window of :data:`~gpumpi.bench._common.WINDOW` operations per flush.
BANDWIDTH = ("put_bw", "get_bw", "acc_bw")
#: The atomic tests: one int64 per operation.
ATOMIC = ("fop_rate", "cas_rate")
#: What each test times, as the table headers say it.
CALLS = {
    "put_lat": "Put + Flush(1) (osu_put_latency -s flush)",
    "get_lat": "Get + Flush(1) (osu_get_latency -s flush)",
    "put_bw": f"{WINDOW} x Put + Flush(1) (osu_put_bw -s flush)",
    "get_bw": f"{WINDOW} x Get + Flush(1) (osu_get_bw -s flush)",
    "acc_bw": f"{WINDOW} x Accumulate(SUM, float64) + Flush(1)",
    "fop_rate": "Fetch_and_op(SUM, int64 +1) + Flush_local(1) (osu_fop_latency)",
    "cas_rate": "Compare_and_swap(int64) + Flush_local(1) (osu_cas_latency)",
}
#: Window flavors (``--window``): ``Win.Allocate``, or ``Win.Create`` on ``MPI.Alloc_mem`` memory.
WINDOW_KINDS = ("allocate", "create")
#: Smallest size of the default sweep (one float64).
MIN_SIZE = 8
#: Largest size of the default sweep.
MAX_RMA_SIZE = 1 << 20
#: Sizes of the ``--quick`` sweep.
QUICK_SIZES = (8, 1 << 10, 64 << 10, 1 << 20)
#: Sizes above this use fewer iterations (OSU's threshold).
LARGE_MESSAGE = 8192
#: Bytes of one atomic operation (an int64).
ATOMIC_SIZE = 8
#: Why mpi4py has no device windows here.
NO_DEVICE_WHY = {
    "sim": "mpi4py cannot take gpumpi's simulated device memory",
    "cupy": "pip's MPICH is not CUDA-aware: mpi4py cannot expose or move device memory",
}

_DEFAULT_ITERS = {"lat": 10000, "bw": 100, "atomic": 10000}
_QUICK_ITERS = {"lat": 1000, "bw": 20, "atomic": 1000}
_BUDGET, _QUICK_BUDGET = 1 << 30, 128 << 20


# ---------------------------------------------------------------- options


def parse_rma_ops(spec: str | None) -> list[str]:
    """Turn an ``--ops`` argument of the rma suite into tests, in the suite's order.

    Args:
        spec: comma-separated names from :data:`TESTS` (``-`` for ``_`` is accepted), or
            None / ``"all"`` for every test.

    Raises:
        BenchError: an unknown name, or none.
    """
    if spec is None or spec.strip().lower() in ("", "all"):
        return list(TESTS)
    names = set()
    for part in spec.split(","):
        name = part.strip().lower().replace("-", "_")
        if not name:
            continue
        if name not in TESTS:
            raise BenchError(f"unknown rma test {part.strip()!r} in --ops (known: {', '.join(TESTS)})")
        names.add(name)
    if not names:
        raise BenchError(f"--ops {spec!r} selects no rma test")
    return [t for t in TESTS if t in names]


def check_window_kind(window: str) -> None:
    """Raise :class:`BenchError` unless ``window`` is one of :data:`WINDOW_KINDS`."""
    if window not in WINDOW_KINDS:
        raise BenchError(f"unknown rma window {window!r} (--window {'|'.join(WINDOW_KINDS)})")


def rma_default_sizes(min_size: int = MIN_SIZE, max_size: int = MAX_RMA_SIZE) -> list[int]:
    """Sizes from ``min_size`` up by x4 steps, and ``max_size`` itself: 8, 32 ... 512 KiB, 1 MiB.

    A ``min_size`` of 0 keeps 0 and goes on from 1.
    """
    sizes = [0] if min_size <= 0 <= max_size else []
    s = max(int(min_size), 1)
    while s <= max_size:
        sizes.append(s)
        s *= 4
    if max_size >= max(min_size, 1) and max_size not in sizes:
        sizes.append(max_size)
    return sizes


def parse_rma_sizes(spec: str | None, quick: bool = False) -> list[int]:
    """Turn a ``--sizes`` argument of the rma suite into sizes in bytes.

    Args:
        spec: ``"min:max"`` (x4 steps from min, and max; empty sides mean
            :data:`MIN_SIZE` and :data:`MAX_RMA_SIZE`; with ``quick``, the
            :data:`QUICK_SIZES` in the range), a comma-separated list such as
            ``"8,1K,64K"``, a single size, or None for 8 B ... 1 MiB
            (:data:`QUICK_SIZES` with ``quick``).
        quick: start from the ``--quick`` sizes.

    Returns:
        Sorted, de-duplicated sizes (``fop_rate`` and ``cas_rate`` ignore them).

    Raises:
        BenchError: malformed spec or an empty result.
    """
    if spec is None or spec.strip() == "":
        sizes = list(QUICK_SIZES) if quick else rma_default_sizes()
    elif ":" in spec:
        lo_text, _, hi_text = spec.partition(":")
        lo = parse_size(lo_text) if lo_text.strip() else MIN_SIZE
        hi = parse_size(hi_text) if hi_text.strip() else MAX_RMA_SIZE
        if lo > hi:
            raise BenchError(f"bad --sizes {spec!r}: min {lo} > max {hi}")
        sizes = [s for s in QUICK_SIZES if lo <= s <= hi] if quick else rma_default_sizes(lo, hi)
    else:
        sizes = [parse_size(part) for part in spec.split(",") if part.strip()]
    sizes = sorted(set(sizes))
    if not sizes:
        raise BenchError(f"--sizes {spec!r} selects no size")
    return sizes


# ---------------------------------------------------------------- plans


def plan_rma(tests: Sequence[str], sizes: Iterable[int]) -> list[tuple[str, int]]:
    """The measurements of a run: ``(test, size)`` in the suite's order, each once.

    ``acc_bw`` sizes are rounded down to whole float64 (a size below 8 B gives no row);
    ``fop_rate`` and ``cas_rate`` have one row each, of :data:`ATOMIC_SIZE` bytes.
    """
    ordered = sorted({int(s) for s in sizes})
    plans: list[tuple[str, int]] = []
    for t in TESTS:
        if t not in tests:
            continue
        if t in ATOMIC:
            plans.append((t, ATOMIC_SIZE))
        elif t == "acc_bw":
            seen = []
            for s in ordered:
                b = s // 8 * 8
                if b and b not in seen:
                    seen.append(b)
            plans.extend((t, b) for b in seen)
        else:
            plans.extend((t, s) for s in ordered)
    return plans


def ops_per_iteration(test: str) -> int:
    """Operations per timed iteration: :data:`~gpumpi.bench._common.WINDOW` for a bandwidth test, else 1."""
    return WINDOW if test in BANDWIDTH else 1


def plan_rma_iterations(
    test: str, size: int, *, iters: int | None = None, skip: int | None = None, quick: bool = False
) -> tuple[int, int]:
    """The timed and warm-up iterations of one measurement.

    Args:
        test: one of :data:`TESTS`.
        size: bytes per operation.
        iters: timed iterations; None picks OSU's 10000 (latencies, atomics) or 100
            windows (bandwidths), scaled down above :data:`LARGE_MESSAGE` bytes so that
            one measurement moves at most 1 GiB, at least 5 (``quick``: 1000 or 20,
            128 MiB, at least 2).
        skip: untimed iterations first; None means a tenth of the timed ones (at least 1).
        quick: the reduced counts.

    Returns:
        ``(iters, skip)``.
    """
    if test not in TESTS:
        raise BenchError(f"plan_rma_iterations: unknown rma test {test!r} (known: {', '.join(TESTS)})")
    if iters is None:
        kind = "bw" if test in BANDWIDTH else "atomic" if test in ATOMIC else "lat"
        n = (_QUICK_ITERS if quick else _DEFAULT_ITERS)[kind]
        if size > LARGE_MESSAGE:
            budget, floor = (_QUICK_BUDGET, 2) if quick else (_BUDGET, 5)
            n = max(floor, min(n, budget // (size * ops_per_iteration(test))))
    else:
        n = max(1, int(iters))
    w = max(1, n // 10) if skip is None else max(0, int(skip))
    return n, w


def plan_slots(test: str, size: int) -> int:
    """Slots of one measurement on each side: ``min(64, RECV_CAP // stride)`` for a bandwidth test, else 1."""
    if test not in BANDWIDTH:
        return 1
    return max(1, min(WINDOW, RECV_CAP // slot_stride(size)))


def window_bytes(plans: Sequence[tuple[str, int]]) -> int:
    """Bytes of the window (on each rank) that serves every measurement of ``plans``."""
    need = ALIGN
    for test, size in plans:
        need = max(need, plan_slots(test, size) * slot_stride(size) if test in BANDWIDTH else size)
    return need


def slot_hits(slot: int, nslots: int, window: int = WINDOW) -> int:
    """How many of a window's ``window`` operations use ``slot`` (operation ``j`` uses ``j % nslots``)."""
    return len(range(slot, window, nslots))


def acc_values(np, count: int, slot: int):
    """What the origin accumulates from ``slot``: ``count`` small integers as float64 (1 ... 5)."""
    return ((np.arange(count, dtype=np.int64) * 3 + slot) % 5 + 1).astype(np.float64)


def acc_expected(np, count: int, slot: int, nslots: int, total: int, window: int = WINDOW):
    """The float64 values of ``slot`` at the target after ``total`` windows of ``SUM``
    accumulates into zeros: ``total * hits * value``, exact (well below 2**53)."""
    return acc_values(np, count, slot) * float(total * slot_hits(slot, nslots, window))


def _slot_seed(slot: int) -> int:
    return 2 + slot  # ranks 0 and 1 seed the latency tests' patterns


# ---------------------------------------------------------------- memory


class _Memory:
    """Arrays of one buffer kind (host NumPy, simulated device, CuPy), filled and read through host copies."""

    __slots__ = ("dev", "kind", "np")

    def __init__(self, np, kind: str):
        self.np, self.kind = np, kind
        self.dev = DeviceMemory(kind, own=True) if kind in DEVICE_BUFFER_KINDS else None

    def zeros(self, n: int, dtype):
        n = max(int(n), 1)
        if self.kind == "numpy":
            return self.np.zeros(n, dtype)
        if self.kind == "sim":
            from ..testing import SimDeviceArray

            return SimDeviceArray.zeros(n, dtype)
        return self.dev._cupy.zeros(n, dtype)

    def bytes(self, n: int):
        """A 1-D uint8 array for a window (device kinds: the adapter's own allocation)."""
        if self.kind == "numpy":
            return self.np.zeros(max(int(n), 1), self.np.uint8)
        return self.dev.array(max(int(n), 1))

    def put(self, view, host) -> None:
        if self.kind == "numpy":
            view[...] = host
        else:
            view.set(self.np.ascontiguousarray(host))
            self.dev.sync()

    def get(self, view):
        return view.copy() if self.kind == "numpy" else view.get()

    def release(self) -> None:
        if self.dev is not None:
            self.dev.release()


class _Window:
    """The suite's window on the two ranks of ``pair``, ``nbytes`` on each, and its local memory."""

    __slots__ = ("alloc", "device_array", "mem", "win")

    def __init__(self, MPI, pair, memory: _Memory, kind: str, nbytes: int):
        self.alloc = self.device_array = None
        device = memory.kind in DEVICE_BUFFER_KINDS
        if kind == "allocate":
            if device:
                self.win = MPI.Win.Allocate(nbytes, 1, MPI.INFO_NULL, pair, memory="device")
            else:
                self.win = MPI.Win.Allocate(nbytes, 1, MPI.INFO_NULL, pair)
            local = self.win.tomemory()
            self.mem = local if device else memory.np.frombuffer(local, dtype=memory.np.uint8)
        elif device:
            self.device_array = memory.bytes(nbytes)
            self.win = MPI.Win.Create(self.device_array, 1, MPI.INFO_NULL, pair)
            self.mem = self.device_array
        else:
            self.alloc = MPI.Alloc_mem(nbytes)
            self.win = MPI.Win.Create(self.alloc, 1, MPI.INFO_NULL, pair)
            self.mem = memory.np.frombuffer(self.alloc, dtype=memory.np.uint8)

    def free(self, MPI) -> None:
        self.mem = None
        self.win.Free()
        if self.alloc is not None:
            MPI.Free_mem(self.alloc)
            self.alloc = None


# ---------------------------------------------------------------- measurements


def _target_image(np, test: str, size: int, nslots: int, count: int):
    """What rank 1 writes into its window before a measurement: ``(offset, bytes)`` pieces."""
    if test in ATOMIC:
        return [(0, np.zeros(1, np.int64).view(np.uint8))]
    if test == "put_lat":
        return [(0, ~fill_pattern(np, size, 0))]
    if test == "get_lat":
        return [(0, fill_pattern(np, size, 1))]
    stride = slot_stride(size)
    if test == "acc_bw":
        return [(k * stride, np.zeros(count, np.float64).view(np.uint8)) for k in range(nslots)]
    flip = test == "put_bw"
    return [(k * stride, ~fill_pattern(np, size, _slot_seed(k)) if flip else fill_pattern(np, size, _slot_seed(k)))
            for k in range(nslots)]  # fmt: skip


def _target_wrong(np, test: str, size: int, nslots: int, count: int, total: int, got) -> int:
    """What rank 1 counts wrong in its window after a measurement (``got``: the window's bytes)."""
    if test in ATOMIC:
        return int(got[:8].view(np.int64)[0] != total)
    if test == "put_lat":
        return int(np.count_nonzero(got[:size] != fill_pattern(np, size, 0)))
    stride = slot_stride(size)
    wrong = 0
    for k in range(nslots):
        piece = got[k * stride : k * stride + (count * 8 if test == "acc_bw" else size)]
        if test == "acc_bw":
            wrong += int(np.count_nonzero(piece.view(np.float64) != acc_expected(np, count, k, nslots, total)))
        elif test == "put_bw":
            wrong += int(np.count_nonzero(piece != fill_pattern(np, size, _slot_seed(k))))
    return wrong


def _target_side(MPI, win: _Window, memory: _Memory, test: str, size: int, nslots: int, count: int,
                 total: int, pair) -> int:  # fmt: skip
    np = memory.np
    me = 1
    win.win.Lock(me, MPI.LOCK_EXCLUSIVE)
    for offset, data in _target_image(np, test, size, nslots, count):
        if len(data):
            memory.put(win.mem[offset : offset + len(data)], data)
    win.win.Unlock(me)
    pair.Barrier()  # the window is ready
    pair.Barrier()  # the origin's epoch is over
    if test in ("get_lat", "get_bw"):
        return 0
    extent = 8 if test in ATOMIC else (nslots - 1) * slot_stride(size) + size
    win.win.Lock(me, MPI.LOCK_SHARED)
    got = memory.get(win.mem[:extent]) if extent else np.zeros(0, np.uint8)
    win.win.Unlock(me)
    return _target_wrong(np, test, size, nslots, count, total, got)


class _Origin:
    """Rank 0's buffers, allocated once for the sweep: a byte array of slots (put, get), a float64
    array of slots (acc), and an int64 array for the atomic tests: the operand 1, then per
    operation a compare value, a new value and a result cell."""

    __slots__ = ("acc", "atom", "bytes", "memory")

    def __init__(self, memory: _Memory, plans: Sequence[tuple[str, int]], natomic: int):
        np = memory.np
        self.memory = memory
        data = [p for p in plans if p[0] not in ATOMIC and p[0] != "acc_bw"]
        acc = [p for p in plans if p[0] == "acc_bw"]
        self.bytes = memory.bytes(window_bytes(data))
        self.acc = memory.zeros(window_bytes(acc) // 8 if acc else 1, np.float64)
        self.atom = memory.zeros(3 * natomic + 1 if natomic else 1, np.int64)


def _origin_fill(np, origin: _Origin, test: str, size: int, nslots: int, count: int, total: int):
    """Fill rank 0's buffers for a measurement; returns the views the timed loop uses."""
    memory, stride = origin.memory, slot_stride(size)
    if test in ATOMIC:
        host = np.zeros(3 * total + 1, np.int64)
        host[0] = 1  # Fetch_and_op's operand
        host[1 : total + 1] = np.arange(total)  # Compare_and_swap's compare values
        host[total + 1 : 2 * total + 1] = np.arange(1, total + 1)  # ... and new values
        host[2 * total + 1 :] = -1  # results: no fetched value is negative
        memory.put(origin.atom[: 3 * total + 1], host)
        a = origin.atom

        def cells(first):  # one int64 view per operation
            return [a[first + i : first + i + 1] for i in range(total)]

        return a, cells(1), cells(total + 1), cells(2 * total + 1)
    if test == "acc_bw":
        per = stride // 8
        host = np.zeros(nslots * per, np.float64)
        for k in range(nslots):
            host[k * per : k * per + count] = acc_values(np, count, k)
        memory.put(origin.acc[: nslots * per], host)
        return [origin.acc[k * per : k * per + count] for k in range(nslots)]
    if test in ("put_lat", "get_lat"):
        data = fill_pattern(np, size, 0) if test == "put_lat" else ~fill_pattern(np, size, 1)
        if size:
            memory.put(origin.bytes[:size], data)
        return [origin.bytes[:size]]
    host = np.zeros((nslots, stride), np.uint8)
    for k in range(nslots):
        p = fill_pattern(np, size, _slot_seed(k))
        host[k, :size] = p if test == "put_bw" else ~p
    memory.put(origin.bytes[: nslots * stride], host.ravel())
    return [origin.bytes[k * stride : k * stride + size] for k in range(nslots)]


def _origin_wrong(np, origin: _Origin, test: str, size: int, nslots: int, total: int) -> int:
    memory = origin.memory
    if test in ATOMIC:
        got = memory.get(origin.atom[2 * total + 1 : 3 * total + 1])
        return int(np.count_nonzero(got != np.arange(total)))
    if test == "get_lat":
        return int(np.count_nonzero(memory.get(origin.bytes[:size]) != fill_pattern(np, size, 1))) if size else 0
    if test == "get_bw":
        stride = slot_stride(size)
        got = memory.get(origin.bytes[: nslots * stride]).reshape(nslots, stride)
        return sum(int(np.count_nonzero(got[k, :size] != fill_pattern(np, size, _slot_seed(k)))) for k in range(nslots))
    return 0


def _timed(MPI, win, test: str, views, n: int, w: int, nslots: int, size: int) -> float:
    """Rank 0's epoch of one measurement: ``w`` untimed then ``n`` timed iterations; seconds."""
    wtime, flush, flush_local, SUM = MPI.Wtime, win.Flush, win.Flush_local, MPI.SUM
    target = 1
    win.Lock(target, MPI.LOCK_SHARED)
    t0 = wtime()
    if test == "fop_rate":
        fop, one = win.Fetch_and_op, [views[0][0:1], MPI.INT64_T]
        results = [[r, MPI.INT64_T] for r in views[3]]
        for i, r in enumerate(results):
            if i == w:
                t0 = wtime()
            fop(one, r, target, 0, SUM)
            flush_local(target)
    elif test == "cas_rate":
        cas, t = win.Compare_and_swap, MPI.INT64_T
        calls = [([new, t], [old, t], [r, t]) for old, new, r in zip(views[1], views[2], views[3])]
        for i, (o, c, r) in enumerate(calls):
            if i == w:
                t0 = wtime()
            cas(o, c, r, target, 0)
            flush_local(target)
    elif test == "acc_bw":
        acc, stride = win.Accumulate, slot_stride(size)
        calls = [([views[j % nslots], MPI.DOUBLE], (j % nslots) * stride) for j in range(WINDOW)]
        for i in range(n + w):
            if i == w:
                t0 = wtime()
            for o, d in calls:
                acc(o, target, d, SUM)
            flush(target)
    elif test in BANDWIDTH:
        op, stride = (win.Put if test == "put_bw" else win.Get), slot_stride(size)
        calls = [([views[j % nslots], MPI.BYTE], (j % nslots) * stride) for j in range(WINDOW)]
        for i in range(n + w):
            if i == w:
                t0 = wtime()
            for o, d in calls:
                op(o, target, d)
            flush(target)
    else:
        op, spec = (win.Put if test == "put_lat" else win.Get), [views[0], MPI.BYTE]
        for i in range(n + w):
            if i == w:
                t0 = wtime()
            op(spec, target, 0)
            flush(target)
    elapsed = wtime() - t0
    win.Unlock(target)
    return elapsed


def _measure(MPI, pair, rank: int, win: _Window, memory: _Memory, origin: _Origin | None, test: str, size: int,
             n: int, w: int) -> tuple[float, int]:  # fmt: skip
    """One measurement on ranks 0 and 1: ``(seconds of the timed iterations on rank 0, wrong on this rank)``."""
    np = memory.np
    nslots = plan_slots(test, size)
    count = size // 8 if test == "acc_bw" else 0
    total = n + w
    if rank == 1:
        return 0.0, _target_side(MPI, win, memory, test, size, nslots, count, total, pair)
    views = _origin_fill(np, origin, test, size, nslots, count, total)
    pair.Barrier()  # the target's window is ready
    elapsed = _timed(MPI, win.win, test, views, n, w, nslots, size)
    pair.Barrier()  # the epoch is over: the target may read its window
    return elapsed, _origin_wrong(np, origin, test, size, nslots, total)


def make_row(test: str, size: int, elapsed: float, iters: int, skip: int, wrong: int) -> dict:
    """One result row: ``time_us`` per operation and, for a bandwidth test, ``bw_MBps``
    (``size * ops * iters / elapsed`` in 1e6 B/s)."""
    ops = ops_per_iteration(test)
    ok = elapsed > 0 and iters > 0
    return {
        "rma": test,
        "size": int(size),
        "time_us": elapsed / (iters * ops) * 1e6 if ok else None,
        "bw_MBps": size * ops * iters / elapsed / 1e6 if ok and test in BANDWIDTH and size else None,
        "wrong": int(wrong),
        "iters": int(iters),
        "skip": int(skip),
        "ops_per_iter": ops,
        "skipped": None,
    }


def skipped_rows(plans: Sequence[tuple[str, int]], reason: str) -> list[dict]:
    """The rows of measurements that were not made, each with ``skipped = reason``."""
    return [{"rma": t, "size": s, "time_us": None, "bw_MBps": None, "wrong": 0, "iters": 0, "skip": 0,
             "ops_per_iter": ops_per_iteration(t), "skipped": reason} for t, s in plans]  # fmt: skip


def device_skip_reason(impl: str, buffer: str) -> str | None:
    """Why ``impl`` cannot run the suite on ``buffer`` windows (None when it can): mpi4py on
    pip's MPICH has no device windows."""
    if buffer in DEVICE_BUFFER_KINDS and impl == "mpi4py":
        return NO_DEVICE_WHY[buffer]
    return None


def run_rma(
    MPI,
    sizes: Iterable[int] | None = None,
    *,
    tests: Sequence[str] = TESTS,
    window: str = "allocate",
    iters: int | None = None,
    skip: int | None = None,
    quick: bool = False,
    buffer: str = "numpy",
    comm=None,
    progress: Callable[[int, int, dict], None] | None = None,
) -> list[dict]:
    """Run the OSU-style one-sided suite, rank 0 the origin and rank 1 the target (see the module docstring).

    Collective over ``comm``: every rank calls it; ranks above 1 only wait at the closing barrier.

    Args:
        MPI: the MPI module to measure (``gpumpi.MPI`` or ``mpi4py.MPI``).
        sizes: sizes in bytes; None means 8 B ... 1 MiB in x4 steps (:data:`QUICK_SIZES`
            with ``quick``).  ``fop_rate`` and ``cas_rate`` ignore them.
        tests: which of :data:`TESTS` to run.
        window: ``"allocate"`` (``Win.Allocate``) or ``"create"`` (``Win.Create`` on
            ``MPI.Alloc_mem`` memory, or on a device array).
        iters: timed iterations per measurement; None picks OSU-style counts
            (:func:`plan_rma_iterations`).
        skip: untimed iterations first; None means a tenth of ``iters``.
        quick: reduced iteration counts.
        buffer: ``"numpy"`` (host window and buffers), ``"sim"`` or ``"cupy"`` (device
            window and device origin buffers: gpumpi's extension, so gpumpi only; bind
            each rank's GPU first for ``cupy``).
        comm: communicator (default ``MPI.COMM_WORLD``); needs at least 2 ranks.
        progress: called on rank 0 as ``progress(index, count, row)`` after each measurement.

    Returns:
        On rank 0, one dict per measurement with keys ``rma`` (the test), ``size``
        (bytes per operation), ``time_us`` (per operation), ``bw_MBps`` (bandwidth
        tests, else None), ``wrong`` (both ranks), ``iters``, ``skip``,
        ``ops_per_iter`` and ``skipped`` (None).  An empty list on other ranks.

    Raises:
        BenchError: bad buffer kind, test or window flavor, fewer than 2 ranks, or
            device buffers on an MPI that is not gpumpi's.
    """
    check_buffer_kind(buffer, SUITE)
    check_window_kind(window)
    tests = parse_rma_ops(",".join(tests))
    if buffer in DEVICE_BUFFER_KINDS:
        if str(getattr(MPI, "__name__", "")).startswith("mpi4py"):
            raise BenchError(f"the rma suite on {buffer} windows: {NO_DEVICE_WHY[buffer]}")
        check_device_buffers(buffer)
    if comm is None:
        comm = MPI.COMM_WORLD
    nranks = comm.Get_size()
    if nranks < 2:
        raise BenchError(f"the rma suite needs at least 2 ranks (got {nranks})")
    sizes = list(QUICK_SIZES if quick else rma_default_sizes()) if sizes is None else [int(s) for s in sizes]
    if any(s < 0 for s in sizes):
        raise BenchError("sizes must be >= 0")
    plans = plan_rma(tests, sizes)
    rank = comm.Get_rank()
    rows: list[dict] = []
    pair = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
    if rank > 1:
        comm.Barrier()
        return rows

    import numpy as np

    counts = [plan_rma_iterations(t, s, iters=iters, skip=skip, quick=quick) for t, s in plans]
    natomic = max([n + w for (t, _), (n, w) in zip(plans, counts) if t in ATOMIC] + [0])
    nbytes = window_bytes(plans)
    memory = _Memory(np, buffer)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:  # no collective cleanup on an error: the other rank would wait for it forever
        win = _Window(MPI, pair, memory, window, nbytes)
        origin = _Origin(memory, plans, natomic) if rank == 0 else None
        for index, ((test, size), (n, w)) in enumerate(zip(plans, counts)):
            elapsed, wrong = _measure(MPI, pair, rank, win, memory, origin, test, size, n, w)
            wrong = sum_wrong(MPI, pair, np, rank, wrong)
            gc.collect()
            if rank == 0:
                row = make_row(test, size, elapsed, n, w, wrong)
                rows.append(row)
                if progress is not None:
                    progress(index, len(plans), row)
    finally:
        if gc_was_enabled:
            gc.enable()
    win.free(MPI)
    origin = None
    memory.release()
    pair.Free()
    comm.Barrier()
    return rows


# ---------------------------------------------------------------- tables


def rma_metadata(MPI, impl: str, *, nranks: int, buffer: str = "numpy", window: str = "allocate",
                 tests: Sequence[str] = TESTS, transport: str = "auto", transports_env: str | None = None,
                 skipped: str | None = None) -> dict:  # fmt: skip
    """Describe an rma run (:func:`~gpumpi.bench.report.metadata`'s counterpart): implementation,
    MPI library (``MPI`` None: not run), ranks, buffers, window flavor, tests; ``skipped`` the
    reason a run was not made."""
    library = library_version(MPI) if MPI is not None else "not run"
    device = {"transport": transport, "transports_env": transports_env} if buffer in DEVICE_BUFFER_KINDS else {}
    meta = {"suite": "rma", "impl": impl, "library": library, "nranks": nranks, "buffer": buffer, "window": window,
            "ops": list(tests), **device, "units": {"size": "B", "time": "us", "bandwidth": "MB/s (1e6 B/s)"}}  # fmt: skip
    if skipped:
        meta["skipped"] = skipped
    return meta


_WINDOW_WORDS = {"allocate": "Win.Allocate", "create": "Win.Create on Alloc_mem memory"}


def _window_words(meta: dict | None) -> str:
    meta = meta or {}
    kind = meta.get("window", "allocate")
    words = _WINDOW_WORDS.get(kind, str(kind))
    if meta.get("buffer", "numpy") in DEVICE_BUFFER_KINDS:
        words = "Win.Allocate(memory='device')" if kind == "allocate" else "Win.Create on a device array"
    return f"window: {words}"


def _tests_of(rows: Sequence[dict]) -> list[str]:
    present = {r["rma"] for r in rows}
    return [t for t in TESTS if t in present]


def _method_lines() -> list[str]:
    return [
        "# rank 0 (origin) -> rank 1 (target), passive target: one Lock(1, LOCK_SHARED) epoch per measurement; "
        "the target makes no MPI call during it",
        f"# time: per operation (bw: a window of {WINDOW} operations and its Flush, over {WINDOW}); "
        f"bw = size * {WINDOW} * iters / t; MB = 1e6 B",
        "# #wrong: bytes (put/get), float64 elements (acc), int64 values (fop/cas) that differ from the expected, "
        "both ranks",
    ]


_COLUMNS = [("size", "(B)"), ("time", "(us)"), ("bw", "(MB/s)"), ("#wrong", "")]


def format_rma_table(rows: Sequence[dict], meta: dict | None = None) -> str:
    """Format rma results as OSU-style tables, one per test, with a header.

    Args:
        rows: results of :func:`run_rma`.
        meta: the run's :func:`rma_metadata`; None prints only the tables.

    Returns:
        The text, ending with a ``# Wrong values`` footer.
    """
    out = []
    if meta:
        buffer = meta.get("buffer", "numpy")
        out.append(f"# {meta['impl']} rma, {ranks_words(meta['nranks'])}, {buffer_words(buffer)}, {_window_words(meta)}")
        out.append(f"# MPI library: {meta.get('library', 'unknown')}")
        if buffer in DEVICE_BUFFER_KINDS:
            out.append(transport_words(meta))
        if meta.get("skipped"):
            out.append(f"# not run: {meta['skipped']}")
    out.extend(_method_lines())
    for test in _tests_of(rows):
        out.append(f"# {test}: {CALLS[test]}")
        cells = [[str(r["size"]), format_cell(r.get("time_us"), ".2f"), format_cell(r.get("bw_MBps"), ".2f"), str(r.get("wrong", 0))]
                 for r in rows if r["rma"] == test]  # fmt: skip
        out.extend(format_columns(_COLUMNS, cells))
    out.append(wrong_footer(sum(int(r.get("wrong", 0)) for r in rows)))
    return "\n".join(out)


def _key(r: dict) -> tuple:
    return (r["rma"], r["size"])


def compare_rma_results(rows: Sequence[dict], ref_rows: Sequence[dict]) -> list[dict]:
    """Pair two runs by (test, size); the speedup is above 1 when ``rows`` is faster.

    Args:
        rows: results of the implementation under test (e.g. gpumpi).
        ref_rows: results of the reference (e.g. mpi4py; its rows may be ``skipped``).

    Returns:
        One dict per row of ``rows``, in its order: ``rma``, ``size``, ``time_us`` /
        ``ref_time_us``, ``bw_MBps`` / ``ref_bw_MBps``, ``speedup = ref time / time``
        (None where the reference has no measurement), ``wrong``, ``ref_wrong`` and
        ``ref_skipped`` (the reference's reason, or None).
    """
    ref = {_key(r): r for r in ref_rows}
    out = []
    for r in rows:
        o = ref.get(_key(r), {})
        out.append({
            "rma": r["rma"], "size": r["size"],
            "time_us": r.get("time_us"), "ref_time_us": o.get("time_us"),
            "bw_MBps": r.get("bw_MBps"), "ref_bw_MBps": o.get("bw_MBps"),
            "speedup": ratio(o.get("time_us"), r.get("time_us")),
            "wrong": int(r.get("wrong", 0)), "ref_wrong": int(o.get("wrong", 0)),
            "ref_skipped": o.get("skipped"),
        })  # fmt: skip
    return out


def format_rma_compare_table(merged: Sequence[dict], meta: dict, ref_meta: dict) -> str:
    """Format :func:`compare_rma_results` as one table per test.

    Args:
        merged: the paired rows.
        meta: metadata of the implementation under test.
        ref_meta: metadata of the reference implementation.

    Returns:
        The text.
    """
    a, b = meta["impl"], ref_meta["impl"]
    if a == b:
        b = b + "'"
    buf, ref_buf = meta.get("buffer", "numpy"), ref_meta.get("buffer", "numpy")
    buffers = buffer_words(buf) if buf == ref_buf else f"{a} on {buffer_words(buf)}, {b} on {buffer_words(ref_buf)}"
    out = [
        f"# {a} vs {b} rma, {ranks_words(meta['nranks'])}, {buffers}, {_window_words(meta)}",
        f"# {a} MPI library: {meta.get('library', 'unknown')}",
        f"# {b} MPI library: {ref_meta.get('library', 'unknown')}",
    ]
    if buf in DEVICE_BUFFER_KINDS:
        out.append(transport_words(meta).replace("# device transport", f"# {a} device transport", 1))
    for side, m in ((a, meta), (b, ref_meta)):
        if m.get("skipped"):
            out.append(f"# {side} not run: {m['skipped']} (its columns are -)")
    out.extend(_method_lines())
    out.append(f"# speedup = {b} time / {a} time (= the bw ratio); >1 means {a} is better; "
               f"- where {b} has no such measurement")  # fmt: skip
    columns = [("size", "(B)"), (f"time {a}", "(us)"), (f"time {b}", "(us)"), ("speedup", "(x)"),
               (f"bw {a}", "(MB/s)"), (f"bw {b}", "(MB/s)"), ("#wrong", "")]  # fmt: skip
    for test in _tests_of(merged):
        out.append(f"# {test}: {CALLS[test]}")
        cells = [[str(m["size"]), format_cell(m["time_us"], ".2f"), format_cell(m["ref_time_us"], ".2f"), fmt_ratio(m["speedup"]),
                  format_cell(m["bw_MBps"], ".2f"), format_cell(m["ref_bw_MBps"], ".2f"), str(m["wrong"] + m["ref_wrong"])]
                 for m in merged if m["rma"] == test]  # fmt: skip
        out.extend(format_columns(columns, cells))
    out.append(wrong_footer(sum(m["wrong"] + m["ref_wrong"] for m in merged)))
    return "\n".join(out)


def format_rma_progress(index: int, count: int, row: dict, impl: str = "") -> str:
    """One progress line for stderr, e.g. ``# mpi4py rma [3/30] put_lat 65536 B: time 12.30 us ...``."""
    who = f"{impl} rma" if impl else "rma"
    parts = [f"# {who} [{index + 1}/{count}] {row['rma']} {row['size']} B:"]
    if row.get("skipped"):
        parts.append(f"skipped ({row['skipped']})")
    if row.get("time_us") is not None:
        parts.append(f"time {row['time_us']:.2f} us")
    if row.get("bw_MBps") is not None:
        parts.append(f"bw {row['bw_MBps']:.2f} MB/s")
    if row.get("wrong"):
        parts.append(f"WRONG {row['wrong']}")
    return " ".join(parts)


SUITE = Suite(
    name="rma",
    min_ranks=2,
    buffers=BUFFER_KINDS,
    buffer_rule="runs on numpy, sim or cupy buffers",
    row_key="rma",
    parse_sizes=parse_rma_sizes,
    format_table=format_rma_table,
    format_progress=format_rma_progress,
    compare_results=compare_rma_results,
    format_compare_table=format_rma_compare_table,
)
