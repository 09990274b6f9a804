"""The Global Arrays suite of ``gpumpi bench`` (``ga``, L6): GA's ``perf.F`` (ga4py's ``tests/perf.py``)
on :mod:`gpumpi.ga`: time per call and bandwidth of ``get``, ``put`` and ``acc`` on local and remote
sections of 1-D and 2-D ``C_DBL`` arrays, and ``read_inc`` against ``Win.Fetch_and_op``, every
result validated, and its tables.

Theory of operation
===================
The suite is ``perf.F`` under the rules of :mod:`gpumpi.bench._common`:

* ranks: exactly 4 (:data:`NRANKS`), as ``perf.F`` needs: process 0 makes every timed call;
  processes 1, 2 and 3 own the remote sections and wait in ``ga.sync`` meanwhile (GA's
  one-sided operations need no call on the target).
* arrays: a 1-D ``C_DBL`` array of :data:`N1` (1,048,576) elements, one block of 262,144 per
  process, and a square 2-D one of side :data:`N2` (1024, ga4py's port), 512 x 512 per process
  (gpumpi.ga's regular distribution; the suite checks it).  With device buffers the arrays are
  device arrays (``set_memory_dev(h, "device")``) and process 0's buffers are device arrays too
  (CuPy, or :class:`~gpumpi.testing.SimDeviceArray` on the simulated device).
* sections: a section's size is its bytes, ``8 * s * s`` for a side ``s`` of :data:`SIDES`
  (the 2-D sides of ``perf.F``; the 1-D lengths are their squares, so a 1-D and a 2-D section of
  one row have the same bytes).  Local sections lie in process 0's own block; remote ones in the
  block of process ``1 + k % 3`` for the ``k``-th section, at the same offset inside it (``perf.F``'s
  round robin over processes 1, 2, 3).  Consecutive sections are ``chunk + jump`` apart, with
  ``perf.F``'s jump (``n / (6000 (i + 1))`` elements in 1-D, ``n / (60 (i + 1))`` rows and columns
  in 2-D, for the ``i``-th size; none for the largest), as many as fit in a block.
* timing: a measurement of one operation makes ``calls`` calls, call ``c`` on section
  ``c % npatches`` (:func:`plan_calls`: by default one pass over the sections, like ``perf.F``,
  repeated to at least 20 calls; ``--quick`` 5 to 100); the first ``skip`` calls of the same
  sequence go before, untimed, ahead of the data being filled; time per call is ``MPI.Wtime``
  over the timed calls, bandwidth ``bytes / time`` in MB/s (1e6 B/s).  ``acc`` adds
  with alpha = 1.0.  Process 0's buffer is one array of a block's size, cut in slots of one
  section (section ``k`` uses slot ``k % nslots``): contiguous, ``ld = chunk``.
* data: before each measurement every process puts its own block (``perf.F``'s "everybody
  touches own data"), ``(index * 7 + seed) % 1009`` for the element's index in the array and a
  seed per measurement (:func:`fill_values`); the slots that ``put`` and ``acc`` send hold
  ``(j * 3 + seed) % 13 + 0.5`` (:func:`origin_values`).  All values are exact in float64.
* validation, after each timed loop: ``get``: up to 3 slots, each as the last call into it left
  it (:func:`get_checks`); ``put`` and ``acc``: the first, middle and last sections read back with
  ``ga.get``: ``put`` left the slot's values, ``acc`` the fill plus ``hits`` times them
  (:func:`acc_hits`).  ``read_inc`` returns ``0, 1, 2 ...`` in order and leaves the total in the
  element, as ``Fetch_and_op`` does.  The ``#wrong`` column counts the float64 (int64) values
  that differ.
* ``read_inc``: ``ga.read_inc(g, subscript, 1)`` on an element of a ``C_LONG`` array owned by
  process 1, against ``Win.Fetch_and_op(SUM, int64 1)`` + ``Flush_local`` on a window of the same
  four processes (``Win.Allocate``, passive target, ``Lock_all``), ``ratio = read_inc / Fetch_and_op``
  (the issue's target: at most :data:`TARGET_RATIO`).

Rows are keyed by ``ga`` (``"section"`` or ``"read_inc"``); ``--compare ga`` pairs gpumpi's rows with
those of GA's own C library running the same program (:mod:`gpumpi.bench._ga_ref`) by
``(ga, dim, where, chunk)`` (:func:`compare_ga_results`); where GA cannot be built or run, the
comparison is skipped with the reason.
"""

from __future__ import annotations

import bisect
import gc
import math
import os
from collections.abc import Callable, Iterable, Sequence

from ._common import (
    BUFFER_KINDS,
    DEVICE_BUFFER_KINDS,
    BenchError,
    Suite,
    check_buffer_kind,
    check_device_buffers,
    parse_size,
)
from .report import buffer_words, format_cell, fmt_ratio, ranks_words, wrong_footer, format_columns, host_words
from .report import library_version, ratio, transport_words

#: Processes of the suite (``perf.F`` needs exactly 4).
NRANKS = 4
#: Elements of the 1-D array (``perf.F``'s ``n``).
N1 = 1 << 20
#: Side of the square 2-D array (ga4py's ``perf.py``).
N2 = 1024
#: Section sides of ``perf.F``'s 2-D test; the 1-D lengths are their squares.
SIDES = (1, 3, 4, 9, 16, 24, 30, 48, 64, 91, 128, 171, 256, 353, 440, 512)
#: Section sides of ``--quick`` (1-D lengths 1, 256, 8281, 65536, 262144).
QUICK_SIDES = (1, 16, 91, 256, 512)
#: The operations of a section row, in the order they run and print.
OPS = ("get", "put", "acc")
#: Where the sections are: process 0's own block, or the blocks of processes 1, 2, 3.
WHERE = ("local", "remote")
#: The heading of each table of section rows (``perf.F``'s).
HEADINGS = {
    (1, "local"): "Local 1-D Array Section",
    (1, "remote"): "Remote 1-D Array Section",
    (2, "local"): "Local 2-D Array Section",
    (2, "remote"): "Remote 2-D Array Section",
}
#: The multiplier of ``acc``.
ALPHA = 1.0
#: The issue's target for ``read_inc``: no slower than ``Fetch_and_op`` + 20 %.
TARGET_RATIO = 1.2
#: Why mpi4py does not run this suite.
NO_MPI4PY_WHY = "the ga suite measures gpumpi.ga (ga4py's API on gpumpi's windows); use --compare ga for GA's C library"

_CALLS = {False: (20, None), True: (5, 100)}  # (fewest, most) calls of one measurement
_READ_INC_CALLS = {False: 10000, True: 1000}
_CHECKS = 3  # sections read back per measurement


# ---------------------------------------------------------------- sizes and plans


def section_bytes(side: int) -> int:
    """Bytes of a section of side ``side``: ``8 * side**2`` (a ``side**2`` 1-D section has as many)."""
    return 8 * int(side) * int(side)


def side_of(size: int) -> int:
    """The largest side whose section has at most ``size`` bytes (0 below 8 B)."""
    return math.isqrt(max(int(size), 0) // 8)


def block_side(dim: int) -> int:
    """Elements along each dimension of one process's block: 262144 (1-D), 512 (2-D)."""
    return N1 // NRANKS if dim == 1 else N2 // 2


def chunk_of(dim: int, side: int) -> int:
    """Elements along each dimension of a section: ``side**2`` in 1-D, ``side`` in 2-D (``perf.F``'s ``chunk``)."""
    return side * side if dim == 1 else side


def parse_ga_sizes(spec: str | None, quick: bool = False) -> list[int]:
    """Turn a ``--sizes`` argument of the ga suite into section sizes in bytes.

    Args:
        spec: ``"min:max"`` (the sizes of :data:`SIDES` in the range; with ``quick``, of
            :data:`QUICK_SIDES`), a comma-separated list such as ``"8,2K,512K"`` (each rounded
            down to a whole section, ``8 * s * s`` bytes), a single size, or None for every
            size of :data:`SIDES` (8 B ... 2 MiB; :data:`QUICK_SIDES` with ``quick``).
        quick: start from the ``--quick`` sizes.

    Returns:
        Sorted, de-duplicated sizes, each ``8 * s * s`` for a side ``1 <= s <= 512``.

    Raises:
        BenchError: malformed spec, a size below 8 B or above a block (2 MiB), or an empty result.
    """
    sides = QUICK_SIDES if quick else SIDES
    if spec is None or spec.strip() == "":
        chosen = list(sides)
    elif ":" in spec:
        lo_text, _, hi_text = spec.partition(":")
        lo = parse_size(lo_text) if lo_text.strip() else 0
        hi = parse_size(hi_text) if hi_text.strip() else section_bytes(SIDES[-1])
        if lo > hi:
            raise BenchError(f"bad --sizes {spec!r}: min {lo} > max {hi}")
        chosen = [s for s in sides if lo <= section_bytes(s) <= hi]
    else:
        chosen = []
        for part in spec.split(","):
            if not part.strip():
                continue
            size = parse_size(part)
            side = side_of(size)
            if side < 1:
                raise BenchError(f"--sizes {part.strip()!r}: a ga section is at least one float64 (8 B)")
            if side > SIDES[-1]:
                raise BenchError(f"--sizes {part.strip()!r}: a ga section is at most a process's block, "
                                 f"{section_bytes(SIDES[-1])} B ({SIDES[-1]} x {SIDES[-1]} float64)")  # fmt: skip
            chosen.append(side)
    sizes = sorted({section_bytes(s) for s in chosen})
    if not sizes:
        raise BenchError(f"--sizes {spec!r} selects no size")
    return sizes


def jump_of(dim: int, side: int) -> int:
    """``perf.F``'s gap between consecutive sections: ``n / (6000 (i + 1))`` elements (1-D) or
    ``n / (60 (i + 1))`` rows and columns (2-D) for the ``i``-th size of :data:`SIDES` (a side not
    in it takes the index it would have); 0 for the largest."""
    if side >= SIDES[-1]:
        return 0
    i = bisect.bisect_left(SIDES, side)
    return N1 // (6000 * (i + 1)) if dim == 1 else N2 // (60 * (i + 1))


def starts_of(dim: int, side: int) -> list[int]:
    """Offsets of the sections along one dimension of a block: ``range(0, B - chunk - jump + 1, chunk + jump)``."""
    c, j = chunk_of(dim, side), jump_of(dim, side)
    return list(range(0, block_side(dim) - c - j + 1, c + j))


def offsets_of(dim: int, side: int) -> list[tuple[int, ...]]:
    """Offsets of every section inside a block, in ``perf.F``'s order (2-D: row by row)."""
    starts = starts_of(dim, side)
    if dim == 1:
        return [(i,) for i in starts]
    return [(i, j) for i in starts for j in starts]


def plan_calls(npatches: int, *, iters: int | None = None, skip: int | None = None,
               quick: bool = False) -> tuple[int, int]:  # fmt: skip
    """The timed and warm-up calls of one measurement.

    Args:
        npatches: sections that fit in a block.
        iters: timed calls; None: one pass over the sections (``perf.F``), at least 20 calls
            (``quick``: at least 5, at most 100).
        skip: untimed calls first; None: a tenth of the timed ones, 1 to 10.
        quick: the reduced counts.

    Returns:
        ``(calls, skip)``.
    """
    if iters is None:
        fewest, most = _CALLS[bool(quick)]
        n = max(fewest, npatches)
        n = min(n, most) if most is not None else n
    else:
        n = max(1, int(iters))
    w = max(1, min(10, n // 10)) if skip is None else max(0, int(skip))
    return n, w


def plan_read_inc(*, iters: int | None = None, skip: int | None = None, quick: bool = False) -> tuple[int, int]:
    """The timed and warm-up calls of ``read_inc`` and ``Fetch_and_op``: 10000 (``quick``: 1000) and a tenth."""
    n = _READ_INC_CALLS[bool(quick)] if iters is None else max(1, int(iters))
    return n, (max(1, n // 10) if skip is None else max(0, int(skip)))


def plan_ga(sizes: Iterable[int] | None = None, *, iters: int | None = None, skip: int | None = None,
            quick: bool = False) -> list[dict]:  # fmt: skip
    """The section measurements of a run, in the order they run and print (1-D local, 1-D
    remote, 2-D local, 2-D remote; sizes increasing): one dict each with ``dim``, ``where``,
    ``side``, ``chunk``, ``jump``, ``bytes``, ``npatches``, ``calls`` and ``skip``."""
    if sizes is None:
        sides = list(QUICK_SIDES if quick else SIDES)
    else:
        sides = sorted({side_of(s) for s in sizes})
        bad = [s for s in sides if not 1 <= s <= SIDES[-1]]
        if bad:
            raise BenchError(f"ga section sizes must be 8 B ... {section_bytes(SIDES[-1])} B (sides {bad})")
    plans = []
    for dim in (1, 2):
        for where in WHERE:
            for side in sides:
                npatches = len(offsets_of(dim, side))
                calls, w = plan_calls(npatches, iters=iters, skip=skip, quick=quick)
                plans.append({"dim": dim, "where": where, "side": side, "chunk": chunk_of(dim, side),
                              "jump": jump_of(dim, side), "bytes": section_bytes(side), "npatches": npatches,
                              "calls": calls, "skip": w})  # fmt: skip
    return plans


def n_slots(dim: int, side: int) -> int:
    """Slots of one section in process 0's buffer of a block's size."""
    return max(1, block_side(dim) ** dim // (side * side))


def acc_hits(patch: int, calls: int, npatches: int) -> int:
    """How many of ``calls`` calls go to section ``patch`` (call ``c`` goes to ``c % npatches``)."""
    return len(range(patch, calls, npatches))


def get_checks(calls: int, npatches: int, nslots: int, limit: int = _CHECKS) -> list[int]:
    """The sections whose slot still holds what ``get`` brought: from the last call backwards, the
    first call into each slot (at most ``limit``)."""
    seen, out = set(), []
    for c in range(calls - 1, -1, -1):
        k = c % npatches
        s = k % nslots
        if s not in seen:
            seen.add(s)
            out.append(k)
            if len(out) == limit or len(seen) == nslots:
                break
    return out


def write_checks(calls: int, npatches: int) -> list[int]:
    """The sections read back after ``put`` and ``acc``: the first, middle and last that were written."""
    n = min(calls, npatches)
    return sorted({0, n // 2, n - 1})


def target_proc(where: str, patch: int) -> int:
    """The process that owns section ``patch``: 0 (local), else ``1 + patch % 3`` (round robin)."""
    return 0 if where == "local" else 1 + patch % (NRANKS - 1)


# ---------------------------------------------------------------- values


def fill_values(np, index, seed: int):
    """The value of elements at array ``index`` (flat, C order) before a measurement: exact small float64."""
    return ((np.asarray(index, dtype=np.int64) * 7 + seed) % 1009).astype(np.float64)


def origin_values(np, count: int, seed: int):
    """What process 0's buffer holds for ``put`` and ``acc``: ``(j * 3 + seed) % 13 + 0.5``."""
    return ((np.arange(count, dtype=np.int64) * 3 + seed) % 13).astype(np.float64) + 0.5


def flat_index(np, dim: int, lo: Sequence[int], hi: Sequence[int]):
    """The flat (C order) array indices of the section ``[lo, hi)``, shaped like it."""
    if dim == 1:
        return np.arange(lo[0], hi[0], dtype=np.int64)
    rows = np.arange(lo[0], hi[0], dtype=np.int64)[:, None]
    return rows * N2 + np.arange(lo[1], hi[1], dtype=np.int64)[None, :]


# ---------------------------------------------------------------- memory


class _Memory:
    """float64 arrays of one buffer kind (host NumPy, simulated device, CuPy), set and read through host copies."""

    __slots__ = ("cupy", "kind", "np")

    def __init__(self, np, kind: str):
        self.np, self.kind, self.cupy = np, kind, None
        if kind == "cupy":
            check_device_buffers(kind)
            import cupy

            self.cupy = cupy

    @property
    def device(self) -> bool:
        return self.kind in DEVICE_BUFFER_KINDS

    def zeros(self, n: int, dtype):
        if self.kind == "numpy":
            return self.np.zeros(n, dtype)
        if self.kind == "sim":
            from ..testing import SimDeviceArray

            return SimDeviceArray.zeros(n, dtype)
        return self.cupy.zeros(n, dtype)

    def set(self, arr, host) -> None:
        if self.kind == "numpy":
            arr[...] = host
            return
        arr.set(self.np.ascontiguousarray(host))
        if self.cupy is not None:
            self.cupy.cuda.get_current_stream().synchronize()

    def host(self, arr):
        """A host copy (NumPy) of ``arr``, whatever kind it is."""
        if hasattr(arr, "__cuda_array_interface__") and not isinstance(arr, self.np.ndarray):
            return arr.get()
        return self.np.array(arr)


def _create(ga, dims, gtype, device: bool) -> int:
    """A GA array of ``dims`` (device memory: through the handle API)."""
    if not device:
        g = ga.create(gtype, dims, "perf")
        if not g:
            raise BenchError(f"ga.create({list(dims)}) failed")
        return g
    h = ga.create_handle()
    ga.set_data(h, dims, gtype)
    ga.set_array_name(h, "perf")
    ga.set_memory_dev(h, "device")
    if not ga.allocate(h):
        raise BenchError(f"ga.allocate of a device array {list(dims)} failed")
    return h


def _blocks(ga, g, dim: int) -> list[tuple[int, ...]]:
    """Every process's block start; raises unless every block is ``block_side(dim)`` along each dimension."""
    starts = []
    want = (block_side(dim),) * dim
    for p in range(NRANKS):
        lo, hi = ga.distribution(g, p)
        shape = tuple(int(h) - int(l) for l, h in zip(lo, hi))
        if shape != want:
            raise BenchError(f"the ga suite needs {NRANKS} equal blocks of {list(want)} (process {p} owns "
                             f"{[int(x) for x in lo]} ... {[int(x) for x in hi]})")  # fmt: skip
        starts.append(tuple(int(x) for x in lo))
    return starts


# ---------------------------------------------------------------- measurements


class _Sections:
    """Process 0's sections of one plan: their bounds, their slots in the buffer, the call order."""

    __slots__ = ("bounds", "dim", "npatches", "nslots", "plan", "shape", "views")

    def __init__(self, plan: dict, starts: list, buf):
        self.plan = plan
        self.dim = dim = plan["dim"]
        c = plan["chunk"]
        self.shape = (c,) * dim
        offsets = offsets_of(dim, plan["side"])
        self.npatches = len(offsets)
        self.nslots = n_slots(dim, plan["side"])
        count = c**dim
        self.bounds, self.views = [], []
        for k, off in enumerate(offsets):
            base = starts[target_proc(plan["where"], k)]
            lo = tuple(b + o for b, o in zip(base, off))
            self.bounds.append((lo, tuple(x + c for x in lo)))
            s = k % self.nslots
            view = buf[s * count : (s + 1) * count]
            self.views.append(view if dim == 1 else view.reshape(self.shape))

    def calls(self, first: int, count: int) -> list:
        """``(lo, hi, slot view)`` of calls ``first ... first + count - 1``."""
        n = self.npatches
        return [(*self.bounds[c % n], self.views[c % n]) for c in range(first, first + count)]

    def slot(self, patch: int) -> slice:
        count = self.plan["chunk"] ** self.dim
        s = patch % self.nslots
        return slice(s * count, (s + 1) * count)


def _timed(MPI, ga, op: str, g, calls: list) -> float:
    """Seconds of ``calls`` calls of ``op`` on process 0."""
    wtime = MPI.Wtime
    if op == "get":
        get = ga.get
        t0 = wtime()
        for lo, hi, v in calls:
            get(g, lo, hi, v)
    elif op == "put":
        put = ga.put
        t0 = wtime()
        for lo, hi, v in calls:
            put(g, v, lo, hi)
    else:
        acc = ga.acc
        t0 = wtime()
        for lo, hi, v in calls:
            acc(g, v, lo, hi, ALPHA)
    return wtime() - t0


def _fill_own(ga, g, memory: _Memory, dim: int, mine: tuple, seed: int) -> None:
    """This process puts its own block: :func:`fill_values` of its indices (``perf.F``'s ``ga_fill``)."""
    np = memory.np
    lo = mine
    hi = tuple(x + block_side(dim) for x in lo)
    ga.put(g, fill_values(np, flat_index(np, dim, lo, hi), seed), lo, hi)


def _wrong(memory: _Memory, ga, g, op: str, sec: _Sections, buf, origin, calls: int, seed: int) -> int:
    """Values that differ in the sections :func:`get_checks` / :func:`write_checks` pick (process 0)."""
    np = memory.np
    plan = sec.plan
    wrong = 0
    if op == "get":
        image = memory.host(buf)
        for k in get_checks(calls, sec.npatches, sec.nslots):
            lo, hi = sec.bounds[k]
            got = image[sec.slot(k)].reshape(sec.shape)
            wrong += int(np.count_nonzero(got != fill_values(np, flat_index(np, plan["dim"], lo, hi), seed)))
        return wrong
    for k in write_checks(calls, sec.npatches):
        lo, hi = sec.bounds[k]
        got = memory.host(ga.get(g, lo, hi)).reshape(sec.shape)
        sent = origin[sec.slot(k)].reshape(sec.shape)
        if op == "put":
            want = sent
        else:
            base = fill_values(np, flat_index(np, plan["dim"], lo, hi), seed)
            want = base + ALPHA * acc_hits(k, calls, sec.npatches) * sent
        wrong += int(np.count_nonzero(got != want))
    return wrong


def _measure(MPI, ga, g, memory: _Memory, plan: dict, starts: list, buf, rank: int, op: str, seed: int) -> tuple:
    """One timed operation of one plan (collective): ``(seconds, wrong)`` on process 0, ``(0.0, 0)`` elsewhere."""
    np = memory.np
    dim, calls, skip = plan["dim"], plan["calls"], plan["skip"]
    sec = origin = None
    if rank == 0:
        sec = _Sections(plan, starts, buf)
        count = block_side(dim) ** dim
        origin = origin_values(np, count, seed) if op != "get" else None
        if origin is not None:
            memory.set(buf, origin)
        if skip:  # the first calls of the sequence, before the data is filled: nothing of them remains
            _timed(MPI, ga, op, g, sec.calls(0, skip))
        if op == "get":
            memory.set(buf, np.full(count, -1.0))  # what a missed get leaves
    ga.sync()  # process 0's warm-up calls are complete everywhere
    _fill_own(ga, g, memory, dim, starts[rank], seed)
    ga.sync()
    elapsed = _timed(MPI, ga, op, g, sec.calls(0, calls)) if rank == 0 else 0.0
    ga.sync()  # every call is complete: process 0 may read back
    if rank != 0:
        return 0.0, 0
    return elapsed, _wrong(memory, ga, g, op, sec, buf, origin, calls, seed)


def _read_inc(MPI, ga, memory: _Memory, rank: int, calls: int, skip: int) -> tuple:
    """``read_inc`` on process 1's element of a ``C_LONG`` array, then ``Fetch_and_op`` on a window
    of the same processes (collective): ``(read_inc seconds, Fetch_and_op seconds, wrong)`` on
    process 0, zeros elsewhere."""
    np = memory.np
    total = skip + calls
    gi = _create(ga, (NRANKS,), ga.C_LONG, memory.device)
    lo, _ = ga.distribution(gi, 1)
    sub = (int(lo[0]),)
    t_inc = t_fop = 0.0
    wrong = 0
    if rank == 0:
        ga.put(gi, np.zeros(1, np.int64), sub, (sub[0] + 1,))
    ga.sync()
    if rank == 0:
        read_inc = ga.read_inc
        for _ in range(skip):
            read_inc(gi, sub, 1)
        got = [0] * calls
        t0 = MPI.Wtime()
        for i in range(calls):
            got[i] = read_inc(gi, sub, 1)
        t_inc = MPI.Wtime() - t0
        wrong += sum(1 for i, v in enumerate(got) if v != skip + i)
        wrong += int(int(memory.host(ga.get(gi, sub, (sub[0] + 1,))).reshape(-1)[0]) != total)
    ga.sync()
    ga.destroy(gi)

    comm = MPI.COMM_WORLD
    device = {"memory": "device"} if memory.device else {}
    win = MPI.Win.Allocate(8, 8, comm=comm, **device)
    win.Lock_all()
    if rank == 0:
        one, res = np.ones(1, np.int64), np.zeros(1, np.int64)
        win.Put(np.zeros(1, np.int64), 1, 0)
        win.Flush(1)
        fop, flush, SUM = win.Fetch_and_op, win.Flush_local, MPI.SUM
        for _ in range(skip):
            fop(one, res, 1, 0, SUM)
            flush(1)
        got = [0] * calls
        t0 = MPI.Wtime()
        for i in range(calls):
            fop(one, res, 1, 0, SUM)
            flush(1)
            got[i] = int(res[0])
        t_fop = MPI.Wtime() - t0
        wrong += sum(1 for i, v in enumerate(got) if v != skip + i)
        fop(one, res, 1, 0, MPI.NO_OP)
        win.Flush(1)
        wrong += int(int(res[0]) != total)
    win.Unlock_all()
    comm.Barrier()
    win.Free()
    return t_inc, t_fop, wrong


def make_section_row(plan: dict, seconds: dict, wrong: int) -> dict:
    """One section row: ``<op>_us`` per call and ``<op>_MBps`` (``bytes / time``, 1e6 B/s) for each of :data:`OPS`."""
    row = {"ga": "section", "dim": plan["dim"], "where": plan["where"], "side": plan["side"], "chunk": plan["chunk"],
           "bytes": plan["bytes"], "calls": plan["calls"], "skip": plan["skip"]}  # fmt: skip
    for op in OPS:
        t = seconds.get(op)
        ok = t is not None and t > 0 and plan["calls"] > 0
        per_call = t / plan["calls"] if ok else None
        row[f"{op}_us"] = per_call * 1e6 if ok else None
        row[f"{op}_MBps"] = plan["bytes"] / per_call / 1e6 if ok else None
    row["wrong"] = int(wrong)
    row["skipped"] = None
    return row


def make_read_inc_row(calls: int, skip: int, t_inc: float | None, t_fop: float | None, wrong: int) -> dict:
    """The ``read_inc`` row: ``read_inc_us``, ``fop_us`` per call and ``ratio = read_inc / Fetch_and_op``."""
    inc = t_inc / calls * 1e6 if t_inc and calls else None
    fop = t_fop / calls * 1e6 if t_fop and calls else None
    return {"ga": "read_inc", "dim": 1, "where": "remote", "side": 1, "chunk": 1, "bytes": 8, "calls": int(calls),
            "skip": int(skip), "read_inc_us": inc, "fop_us": fop, "ratio": ratio(inc, fop), "wrong": int(wrong),
            "skipped": None}  # fmt: skip


def run_ga(
    MPI,
    sizes: Iterable[int] | None = None,
    *,
    iters: int | None = None,
    skip: int | None = None,
    quick: bool = False,
    buffer: str = "numpy",
    read_inc: bool = True,
    progress: Callable[[int, int, dict], None] | None = None,
) -> list[dict]:
    """Run ``perf.F`` on :mod:`gpumpi.ga` (see the module docstring).

    Collective over ``MPI.COMM_WORLD``, which must have exactly :data:`NRANKS` (4) ranks; imports
    (and so initialises) :mod:`gpumpi.ga`.

    Args:
        MPI: ``gpumpi.MPI`` (its ``Wtime``, and the ``Fetch_and_op`` window).
        sizes: section sizes in bytes (``8 * s * s``, :func:`parse_ga_sizes`); None: every size
            of :data:`SIDES` (:data:`QUICK_SIDES` with ``quick``).
        iters: timed calls per measurement (and of ``read_inc``); None: :func:`plan_calls`,
            :func:`plan_read_inc`.
        skip: untimed calls first; None: a tenth.
        quick: the reduced counts.
        buffer: ``"numpy"`` (host arrays and buffers), ``"sim"`` or ``"cupy"`` (device arrays and
            device buffers; bind each rank's GPU first for ``cupy``).
        read_inc: also measure ``read_inc`` against ``Fetch_and_op`` (the last row).
        progress: called on rank 0 as ``progress(index, count, row)`` after each row.

    Returns:
        On rank 0, one dict per section row (:func:`make_section_row`), then the ``read_inc``
        row (:func:`make_read_inc_row`); an empty list on other ranks.

    Raises:
        BenchError: bad buffer kind, not 4 ranks, mpi4py, or a distribution other than
            ``perf.F``'s.
    """
    check_buffer_kind(buffer, SUITE)
    if str(getattr(MPI, "__name__", "")).startswith("mpi4py"):
        raise BenchError(NO_MPI4PY_WHY)
    if buffer in DEVICE_BUFFER_KINDS:
        check_device_buffers(buffer)
    comm = MPI.COMM_WORLD
    nranks = comm.Get_size()
    if nranks != NRANKS:
        raise BenchError(f"the ga suite runs on exactly {NRANKS} ranks, as GA's perf.F (got {nranks})")
    plans = plan_ga(sizes, iters=iters, skip=skip, quick=quick)
    inc_calls, inc_skip = plan_read_inc(iters=iters, skip=skip, quick=quick)
    count = len(plans) + (1 if read_inc else 0)

    import numpy as np

    from gpumpi import ga

    rank = comm.Get_rank()
    memory = _Memory(np, buffer)
    rows: list[dict] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        index = 0
        for dim, dims in ((1, (N1,)), (2, (N2, N2))):
            mine = [p for p in plans if p["dim"] == dim]
            if not mine:
                continue
            g = _create(ga, dims, ga.C_DBL, memory.device)
            starts = _blocks(ga, g, dim)
            buf = memory.zeros(block_side(dim) ** dim, np.float64) if rank == 0 else None
            for plan in mine:
                seconds, wrong = {}, 0
                for k, op in enumerate(OPS):
                    seed = 1 + 3 * index + k
                    seconds[op], bad = _measure(MPI, ga, g, memory, plan, starts, buf, rank, op, seed)
                    wrong += bad
                gc.collect()
                if rank == 0:
                    row = make_section_row(plan, seconds, wrong)
                    rows.append(row)
                    if progress is not None:
                        progress(index, count, row)
                index += 1
            buf = None
            ga.sync()
            ga.destroy(g)
        if read_inc:
            t_inc, t_fop, wrong = _read_inc(MPI, ga, memory, rank, inc_calls, inc_skip)
            if rank == 0:
                row = make_read_inc_row(inc_calls, inc_skip, t_inc, t_fop, wrong)
                rows.append(row)
                if progress is not None:
                    progress(index, count, row)
    finally:
        if gc_was_enabled:
            gc.enable()
    return rows


# ---------------------------------------------------------------- tables


def ga_metadata(MPI, impl: str, *, nranks: int = NRANKS, buffer: str = "numpy", quick: bool = False,
                transport: str = "auto", transports_env: str | None = None, library: str | None = None,
                skipped: str | None = None) -> dict:  # fmt: skip
    """Describe a ga run: implementation (``gpumpi``, or ``ga`` for GA's C library), library
    (``MPI``'s, or ``library`` as given; ``MPI`` None and no ``library``: not run), ranks, buffers,
    array sizes; ``skipped`` the reason a run was not made."""
    if library is None:
        library = library_version(MPI) if MPI is not None else "not run"
    device = {"transport": transport, "transports_env": transports_env} if buffer in DEVICE_BUFFER_KINDS else {}
    meta = {"suite": "ga", "impl": impl, "library": library, "host": host_words(), "cpus": os.cpu_count(),
            "nranks": nranks, "buffer": buffer, "quick": bool(quick), "arrays": {"1d": [N1], "2d": [N2, N2]}, **device,
            "units": {"bytes": "B", "time": "us per call", "bandwidth": "MB/s (1e6 B/s)"}}  # fmt: skip
    if skipped:
        meta["skipped"] = skipped
    return meta


def _array_words(meta: dict | None) -> str:
    buffer = (meta or {}).get("buffer", "numpy")
    where = "device memory (set_memory_dev 'device')" if buffer in DEVICE_BUFFER_KINDS else "host memory"
    return f"C_DBL arrays [{N1}] and [{N2}, {N2}] in {where}"


def _crowded_lines(meta: dict | None) -> list[str]:
    """A warning when the ranks outnumber the CPUs: then a call that needs another process waits for a core."""
    meta = meta or {}
    cpus, nranks = meta.get("cpus"), meta.get("nranks", NRANKS)
    if cpus and cpus < nranks:
        return [f"# warning: {nranks} ranks on {cpus} CPUs: the ranks share cores; a call that needs another "
                "process to run waits for a core (GA's C library on MPI: every remote call)"]  # fmt: skip
    return []


def _method_lines() -> list[str]:
    return [
        f"# process 0 times get, put and acc (alpha = {ALPHA}) of 1-D and square sections of GA's perf.F, first in its "
        "own block (local), then round robin in the blocks of processes 1, 2, 3 (remote); sections spaced by a jump",
        "# usec: time per call; MB/s = bytes / time (1e6 B/s); buffers: one contiguous slot per section (ld = chunk); "
        "#wrong: float64 values read back that differ",
    ]


_SECTION_COLUMNS = [("bytes", ""), ("dim", ""), ("get", "(usec)"), ("get", "(MB/s)"), ("put", "(usec)"),
                    ("put", "(MB/s)"), ("acc", "(usec)"), ("acc", "(MB/s)"), ("calls", ""), ("#wrong", "")]  # fmt: skip


def _sections_of(rows: Sequence[dict]) -> list[tuple[int, str]]:
    present = {(r["dim"], r["where"]) for r in rows if r.get("ga") == "section"}
    return [key for key in HEADINGS if key in present]


def _read_inc_lines() -> list[str]:
    return [
        "# read_inc: ga.read_inc(+1) of a C_LONG element of process 1, against Win.Fetch_and_op(SUM, int64 1) + "
        "Flush_local(1) on a Win.Allocate window of the 4 processes (passive target, Lock_all)",
        f"# ratio = read_inc / Fetch_and_op (target <= {TARGET_RATIO:.2f}: "
        "read_inc no slower than Fetch_and_op + 20 %)",
    ]


def _target_line(r: dict) -> str:
    x = r.get("ratio")
    if x is None:
        return "# read_inc target: not measured"
    return f"# read_inc target (ratio <= {TARGET_RATIO:.2f}): {'met' if x <= TARGET_RATIO else 'MISSED'} ({x:.2f})"


def format_ga_table(rows: Sequence[dict], meta: dict | None = None) -> str:
    """Format ga results as ``perf.F``'s four tables (``Local 1-D Array Section`` ...) and the ``read_inc`` line.

    Args:
        rows: results of :func:`run_ga`.
        meta: the run's :func:`ga_metadata`; None prints only the tables.

    Returns:
        The text, ending with a ``# Wrong values`` footer.
    """
    out = []
    if meta:
        buffer = meta.get("buffer", "numpy")
        out.append(f"# {meta['impl']} ga (GA perf.F), {ranks_words(meta['nranks'])}, {buffer_words(buffer)}, "
                   f"{_array_words(meta)}")  # fmt: skip
        out.append(f"# MPI library: {meta.get('library', 'unknown')}")
        if buffer in DEVICE_BUFFER_KINDS:
            out.append(transport_words(meta))
        if meta.get("skipped"):
            out.append(f"# not run: {meta['skipped']}")
    out.extend(_crowded_lines(meta))
    out.extend(_method_lines())
    for dim, where in _sections_of(rows):
        out.append(f"# {HEADINGS[(dim, where)]}")
        cells = [[str(r["bytes"]), str(r["chunk"]), format_cell(r.get("get_us"), ".2f"), format_cell(r.get("get_MBps"), ".1f"),
                  format_cell(r.get("put_us"), ".2f"), format_cell(r.get("put_MBps"), ".1f"), format_cell(r.get("acc_us"), ".2f"),
                  format_cell(r.get("acc_MBps"), ".1f"), str(r.get("calls", 0)), str(r.get("wrong", 0))]
                 for r in rows if r.get("ga") == "section" and (r["dim"], r["where"]) == (dim, where)]  # fmt: skip
        out.extend(format_columns(_SECTION_COLUMNS, cells))
    inc = [r for r in rows if r.get("ga") == "read_inc"]
    if inc:
        out.extend(_read_inc_lines())
        cells = [[str(r["calls"]), format_cell(r.get("read_inc_us"), ".2f"), format_cell(r.get("fop_us"), ".2f"),
                  fmt_ratio(r.get("ratio")), str(r.get("wrong", 0))] for r in inc]  # fmt: skip
        out.extend(format_columns([("calls", ""), ("read_inc", "(usec)"), ("Fetch_and_op", "(usec)"), ("ratio", "(x)"),
                                   ("#wrong", "")], cells))  # fmt: skip
        out.append(_target_line(inc[-1]))
    out.append(wrong_footer(sum(int(r.get("wrong", 0)) for r in rows)))
    return "\n".join(out)


def _key(r: dict) -> tuple:
    return (r["ga"], r["dim"], r["where"], r["chunk"])


def compare_ga_results(rows: Sequence[dict], ref_rows: Sequence[dict]) -> list[dict]:
    """Pair two runs by ``(ga, dim, where, chunk)``; each speedup is above 1 when ``rows`` is faster.

    Args:
        rows: results of the implementation under test (gpumpi).
        ref_rows: results of the reference (GA's C library; its rows may be ``skipped``).

    Returns:
        One dict per row of ``rows``, in its order, with the row's ``ga``, ``dim``, ``where``,
        ``side``, ``chunk``, ``bytes`` and ``calls``; for each of :data:`OPS` (section rows)
        ``<op>_us``, ``ref_<op>_us``, ``<op>_MBps``, ``ref_<op>_MBps`` and ``<op>_speedup =
        ref time / time``, or (the ``read_inc`` row) the same ``_us`` and ``_speedup`` keys of
        ``read_inc`` and ``fop``; ``wrong``, ``ref_wrong`` and ``ref_skipped``.
    """
    ref = {_key(r): r for r in ref_rows}
    out = []
    for r in rows:
        o = ref.get(_key(r), {})
        m = {k: r.get(k) for k in ("ga", "dim", "where", "side", "chunk", "bytes", "calls")}
        names = OPS if r["ga"] == "section" else ("read_inc", "fop")
        for op in names:
            m[f"{op}_us"], m[f"ref_{op}_us"] = r.get(f"{op}_us"), o.get(f"{op}_us")
            if r["ga"] == "section":
                m[f"{op}_MBps"], m[f"ref_{op}_MBps"] = r.get(f"{op}_MBps"), o.get(f"{op}_MBps")
            m[f"{op}_speedup"] = ratio(o.get(f"{op}_us"), r.get(f"{op}_us"))
        m.update(wrong=int(r.get("wrong", 0)), ref_wrong=int(o.get("wrong", 0)), ref_skipped=o.get("skipped"))
        out.append(m)
    return out


def format_ga_compare_table(merged: Sequence[dict], meta: dict, ref_meta: dict) -> str:
    """Format :func:`compare_ga_results` as ``perf.F``'s four tables, each operation's time on both
    sides and its speedup, and the ``read_inc`` line.

    Args:
        merged: the paired rows.
        meta: metadata of the implementation under test.
        ref_meta: metadata of the reference implementation.
    """
    a, b = meta["impl"], ref_meta["impl"]
    if a == b:
        b = b + "'"
    buffer = meta.get("buffer", "numpy")
    out = [
        f"# {a} vs {b} ga (GA perf.F), {ranks_words(meta['nranks'])}, {buffer_words(buffer)}, {_array_words(meta)}",
        f"# {a} MPI library: {meta.get('library', 'unknown')}",
        f"# {b} library: {ref_meta.get('library', 'unknown')}",
    ]
    if ref_meta.get("buffer", "numpy") != buffer:
        out.append(f"# {b} runs on {buffer_words(ref_meta.get('buffer', 'numpy'))}")
    for side, m in ((a, meta), (b, ref_meta)):
        if m.get("skipped"):
            out.append(f"# {side} not run: {m['skipped']} (its columns are -)")
    out.extend(_crowded_lines(meta))
    out.extend(_method_lines())
    out.append(f"# x = {b} usec / {a} usec; >1 means {a} is faster; - where {b} has no such measurement")
    columns = [("bytes", ""), ("dim", "")]
    for op in OPS:
        columns += [(f"{op} {a}", "(usec)"), (f"{op} {b}", "(usec)"), ("x", "")]
    columns.append(("#wrong", ""))
    for dim, where in _sections_of(merged):
        out.append(f"# {HEADINGS[(dim, where)]}")
        cells = []
        for m in merged:
            if m["ga"] != "section" or (m["dim"], m["where"]) != (dim, where):
                continue
            line = [str(m["bytes"]), str(m["chunk"])]
            for op in OPS:
                line += [format_cell(m[f"{op}_us"], ".2f"), format_cell(m[f"ref_{op}_us"], ".2f"), fmt_ratio(m[f"{op}_speedup"])]
            cells.append([*line, str(m["wrong"] + m["ref_wrong"])])
        out.extend(format_columns(columns, cells))
    inc = [m for m in merged if m["ga"] == "read_inc"]
    if inc:
        out.extend(_read_inc_lines())
        cells = [[str(m["calls"]), format_cell(m["read_inc_us"], ".2f"), format_cell(m["ref_read_inc_us"], ".2f"),
                  fmt_ratio(m["read_inc_speedup"]), format_cell(m["fop_us"], ".2f"), format_cell(m["ref_fop_us"], ".2f"),
                  fmt_ratio(m["fop_speedup"]), str(m["wrong"] + m["ref_wrong"])] for m in inc]  # fmt: skip
        out.extend(format_columns([("calls", ""), (f"read_inc {a}", "(usec)"), (f"read_inc {b}", "(usec)"), ("x", ""),
                                   (f"Fetch_and_op {a}", "(usec)"), (f"Fetch_and_op {b}", "(usec)"), ("x", ""),
                                   ("#wrong", "")], cells))  # fmt: skip
    out.append(wrong_footer(sum(m["wrong"] + m["ref_wrong"] for m in merged)))
    return "\n".join(out)


def format_ga_progress(index: int, count: int, row: dict, impl: str = "") -> str:
    """One progress line for stderr, e.g. ``# gpumpi ga [3/21] local 1-D 2048 B (256): get 12.30 us ...``."""
    who = f"{impl} ga" if impl else "ga"
    if row.get("ga") == "read_inc":
        parts = [f"# {who} [{index + 1}/{count}] read_inc:"]
        for key, name in (("read_inc_us", "read_inc"), ("fop_us", "Fetch_and_op")):
            if row.get(key) is not None:
                parts.append(f"{name} {row[key]:.2f} us")
        if row.get("ratio") is not None:
            parts.append(f"ratio {row['ratio']:.2f}")
    else:
        parts = [f"# {who} [{index + 1}/{count}] {row['where']} {row['dim']}-D {row['bytes']} B ({row['chunk']}):"]
        for op in OPS:
            if row.get(f"{op}_us") is not None:
                parts.append(f"{op} {row[f'{op}_us']:.2f} us")
    if row.get("skipped"):
        parts.append(f"skipped ({row['skipped']})")
    if row.get("wrong"):
        parts.append(f"WRONG {row['wrong']}")
    return " ".join(parts)


SUITE = Suite(
    name="ga",
    min_ranks=NRANKS,
    ranks=NRANKS,
    buffers=BUFFER_KINDS,
    buffer_rule="runs on numpy, sim or cupy buffers",
    row_key="ga",
    parse_sizes=parse_ga_sizes,
    format_table=format_ga_table,
    format_progress=format_ga_progress,
    compare_results=compare_ga_results,
    format_compare_table=format_ga_compare_table,
)
