"""The collectives suite of ``gpumpi bench`` (``coll``, L6): nccl-tests-style time, algorithm
bandwidth and bus bandwidth of ``Allreduce``, ``Bcast``, ``Reduce``, ``Allgather``,
``Reduce_scatter_block``, ``Alltoall`` and ``Barrier``, every result validated, and its tables.

Theory of operation
===================
The suite follows NVIDIA's nccl-tests (``doc/PERFORMANCE.md``, ``src/common.cu``) under the
rules of :mod:`gpumpi.bench._common`, with every rank taking part:

* sizes: ``size`` is nccl-tests' byte count of one rank's whole buffer: the reduced
  array of ``Allreduce``/``Reduce``, the broadcast array, the *gathered* array of
  ``Allgather``, the array *before* scattering of ``Reduce_scatter_block`` and the
  send array of ``Alltoall``.  It is rounded down to whole elements, and to ``n``
  equal blocks where the collective splits the array among the ``n`` ranks
  (:func:`plan_count`); a requested size that rounds to one already measured is
  measured once.  ``count`` is ``size`` in elements.
* time: every rank times ``iters`` calls after ``skip`` untimed ones and a
  ``Barrier`` (device buffers are synchronised before the clock stops) and divides by
  ``iters``; ``time`` is the average over the ranks, as nccl-tests' default ``-a 1``,
  and ``tmax`` the slowest rank.  ``algbw = size / time`` and ``busbw = algbw *
  factor`` with nccl-tests' factors (:func:`busbw_factor`), GB = 1e9 B.
* validation: every input is filled with small integers that depend on the rank,
  the element and (``Alltoall``) the destination (:func:`fill`), so that every
  result is exact in every type and in every reduction order (:func:`check_exact`
  refuses a type, op and rank count whose result could overflow); receive buffers
  start from a sentinel that no result can equal (NaN, or the type's largest
  integer).  After the timed loop each rank counts the elements of its result that
  differ from NumPy's expectation (:func:`expected`); ``#wrong`` is the sum over the
  ranks (``Reduce``: the root's result only; ``Barrier`` moves no data).
* statistics travel to rank 0 by point-to-point messages, so the suite needs no
  collective but the one it measures (and ``Barrier``).

Default iteration counts are OSU's for collectives (1000 after 100 warm-up up to
8 KiB, 100 after 10 above), scaled down so that one measurement moves at most about
1 GiB per rank (``--quick``: fewer, 128 MiB).  ``Barrier`` is measured once, not per size.

Buffers may be ``numpy``, ``sim`` or ``cupy``.  The calls go through the mpi4py API of
the MPI module given (gpumpi or mpi4py), or, with ``backend="nccl"``, through CuPy's
NCCL binding (``cupy.cuda.nccl.NcclCommunicator``) on CuPy buffers, one GPU per rank,
with gpumpi carrying the unique id, the barriers and the statistics.  Rows are keyed by
``coll``; ``--compare`` pairs two runs by (coll, size) (:func:`compare_coll_results`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Sequence

from ._common import (
    TAG_COLL_STATS,
    BUFFER_KINDS,
    DEVICE_BUFFER_KINDS,
    MAX_SIZE,
    BenchError,
    Suite,
    check_buffer_kind,
    check_device_buffers,
    default_sizes,
    parse_size,
)
from .report import REF_HOST_WHY, buffer_words, format_cell, fmt_ratio, ranks_words, wrong_footer, format_columns, ratio
from .report import library_version, transport_words

#: The collectives of the suite, in the order they run and print.
COLLS = ("allreduce", "bcast", "reduce", "allgather", "reduce_scatter", "alltoall", "barrier")
#: The MPI call each collective measures.
MPI_NAMES = {
    "allreduce": "Allreduce", "bcast": "Bcast", "reduce": "Reduce", "allgather": "Allgather",
    "reduce_scatter": "Reduce_scatter_block", "alltoall": "Alltoall", "barrier": "Barrier",
}  # fmt: skip
#: The collectives that reduce (``--op`` applies to them).
REDUCING = ("allreduce", "reduce", "reduce_scatter")
#: The collectives that take ``--root``.
ROOTED = ("bcast", "reduce")
#: The collectives whose array is split into one block per rank (sizes round to ``n`` blocks).
SPLIT = ("allgather", "reduce_scatter", "alltoall")
#: The collectives CuPy's NCCL binding has.
NCCL_COLLS = ("allreduce", "bcast", "reduce", "allgather", "reduce_scatter")
#: Element types (``--dtype``), with their MPI datatype names.
DTYPES = {
    "float64": "DOUBLE", "float32": "FLOAT", "int8": "INT8_T", "uint8": "UINT8_T", "int16": "INT16_T",
    "uint16": "UINT16_T", "int32": "INT32_T", "uint32": "UINT32_T", "int64": "INT64_T", "uint64": "UINT64_T",
}  # fmt: skip
#: Reduction operations (``--op``).
OPS = ("sum", "prod", "max", "min")
#: Smallest size of the default sweep (one float64).
MIN_SIZE = 8
#: Sizes of the ``--quick`` sweep.
QUICK_SIZES = (8, 1 << 10, 64 << 10, 1 << 20, 16 << 20)
#: Sizes above this use the "large" iteration counts (OSU's threshold).
LARGE_MESSAGE = 8192

_DEFAULT_ITERS, _QUICK_ITERS = ((1000, 100), (100, 10)), ((100, 10), (20, 2))
_BUDGET, _QUICK_BUDGET = 1 << 30, 128 << 20
# exact integers in a float's significand
_FLOAT_EXACT = {"float32": 1 << 24, "float64": 1 << 53}
# the NCCL names of the types and operations (cupy.cuda.nccl constants)
_NCCL_TYPES = {"float64": "NCCL_FLOAT64", "float32": "NCCL_FLOAT32", "int8": "NCCL_INT8", "uint8": "NCCL_UINT8",
               "int32": "NCCL_INT32", "uint32": "NCCL_UINT32", "int64": "NCCL_INT64", "uint64": "NCCL_UINT64"}  # fmt: skip
_NCCL_OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN"}


# ---------------------------------------------------------------- options


def parse_ops(spec: str | None) -> list[str]:
    """Turn an ``--ops`` argument into collectives, in the suite's order.

    Args:
        spec: comma-separated names from :data:`COLLS` (``reduce_scatter`` may also be
            written ``reduce-scatter`` or ``reduce_scatter_block``), or None / ``"all"``
            for every collective.

    Raises:
        BenchError: an unknown name, or none.
    """
    if spec is None or spec.strip().lower() in ("", "all"):
        return list(COLLS)
    names = set()
    for part in spec.split(","):
        name = part.strip().lower().replace("-", "_")
        if not name:
            continue
        name = "reduce_scatter" if name == "reduce_scatter_block" else name
        if name not in COLLS:
            raise BenchError(f"unknown collective {part.strip()!r} in --ops (known: {', '.join(COLLS)})")
        names.add(name)
    if not names:
        raise BenchError(f"--ops {spec!r} selects no collective")
    return [c for c in COLLS if c in names]


def parse_coll_sizes(spec: str | None, quick: bool = False) -> list[int]:
    """Turn a ``--sizes`` argument of the coll suite into sizes in bytes.

    Args:
        spec: ``"min:max"`` (powers of two in the range; empty sides mean
            :data:`MIN_SIZE` and 16 MiB; with ``quick``, :data:`QUICK_SIZES` in the
            range), a comma-separated list such as ``"8,1K,64K"``, a single size, or
            None for 8 B ... 16 MiB (:data:`QUICK_SIZES` with ``quick``).
        quick: start from the ``--quick`` sizes.

    Returns:
        Sorted, de-duplicated sizes.

    Raises:
        BenchError: malformed spec or an empty result.
    """
    if spec is None or spec.strip() == "":
        sizes = list(QUICK_SIZES) if quick else default_sizes(MIN_SIZE, MAX_SIZE)
    elif ":" in spec:
        lo_text, _, hi_text = spec.partition(":")
        lo = parse_size(lo_text) if lo_text.strip() else MIN_SIZE
        hi = parse_size(hi_text) if hi_text.strip() else MAX_SIZE
        if lo > hi:
            raise BenchError(f"bad --sizes {spec!r}: min {lo} > max {hi}")
        sizes = [s for s in QUICK_SIZES if lo <= s <= hi] if quick else default_sizes(lo, hi)
    else:
        sizes = [parse_size(part) for part in spec.split(",") if part.strip()]
    sizes = sorted(set(sizes))
    if not sizes:
        raise BenchError(f"--sizes {spec!r} selects no size")
    return sizes


def check_dtype(dtype: str) -> None:
    """Raise :class:`BenchError` unless ``dtype`` is one of :data:`DTYPES`."""
    if dtype not in DTYPES:
        raise BenchError(f"unknown --dtype {dtype!r} (known: {', '.join(DTYPES)})")


def check_op(op: str) -> None:
    """Raise :class:`BenchError` unless ``op`` is one of :data:`OPS`."""
    if op not in OPS:
        raise BenchError(f"unknown --op {op!r} (known: {', '.join(OPS)})")


def check_root(root: int, nranks: int) -> None:
    """Raise :class:`BenchError` unless ``0 <= root < nranks``."""
    if not 0 <= int(root) < nranks:
        raise BenchError(f"--root {root} is not a rank of {ranks_words(nranks)}")


def _limit(dtype: str) -> tuple[int, int]:
    """The exact integers a type holds: ``(lowest, highest)``, the highest kept for the sentinel."""
    if dtype in _FLOAT_EXACT:
        m = _FLOAT_EXACT[dtype]
        return -m, m
    unsigned = dtype.startswith("uint")
    bits = int(dtype[4:] if unsigned else dtype[3:])
    if unsigned:
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _signed(dtype: str) -> bool:
    return not dtype.startswith("u")


def result_bound(op: str, dtype: str, nranks: int) -> int:
    """The largest magnitude a reduction of :func:`fill`'s values over ``nranks`` ranks can reach."""
    if op == "sum":
        return nranks * (5 if _signed(dtype) else 10)
    if op == "prod":
        return 1 << (-(-nranks // 7))  # a 2 from one rank in 7, at most
    return 96


def check_exact(op: str, dtype: str, nranks: int) -> None:
    """Raise :class:`BenchError` when ``op`` over ``nranks`` ranks of :func:`fill`'s values could
    leave the exact integers of ``dtype`` (the result would not be checkable)."""
    check_op(op)
    check_dtype(dtype)
    lo, hi = _limit(dtype)
    bound = result_bound(op, dtype, nranks)
    if bound >= hi or (_signed(dtype) and -bound < lo):  # unsigned values are never negative
        raise BenchError(
            f"--op {op} --dtype {dtype} over {ranks_words(nranks)} can reach {bound}, beyond what "
            f"{dtype} holds exactly: the results could not be validated (use a wider --dtype)"
        )


# ---------------------------------------------------------------- plans


def busbw_factor(coll: str, nranks: int) -> float | None:
    """nccl-tests' bus-bandwidth factor of ``coll`` on ``nranks`` ranks (None for ``barrier``).

    ``allreduce``: 2(n-1)/n; ``reduce_scatter``, ``allgather``, ``alltoall``: (n-1)/n;
    ``bcast``, ``reduce``: 1.
    """
    n = int(nranks)
    if coll == "allreduce":
        return 2 * (n - 1) / n
    if coll in SPLIT:
        return (n - 1) / n
    if coll in ROOTED:
        return 1.0
    if coll == "barrier":
        return None
    raise BenchError(f"busbw_factor: unknown collective {coll!r} (known: {', '.join(COLLS)})")


def plan_count(coll: str, size: int, itemsize: int, nranks: int) -> tuple[int, int]:
    """The element counts of one measurement: ``(count, block)``.

    ``count`` is the whole array in elements (``size`` rounded down, to ``nranks``
    equal blocks for :data:`SPLIT` collectives) and ``block`` the elements of one rank's
    block (``count // nranks``; ``count`` for the others).  ``barrier``: ``(0, 0)``.
    """
    if coll == "barrier":
        return 0, 0
    elems = int(size) // int(itemsize)
    if coll in SPLIT:
        block = elems // nranks
        return block * nranks, block
    return elems, elems


def plan_sizes(coll: str, sizes: Iterable[int], itemsize: int, nranks: int) -> list[tuple[int, int, int]]:
    """The measurements of ``coll`` over ``sizes``: ``(size, count, block)`` with ``size`` the
    bytes actually moved, each once, in increasing order (``barrier``: one, of 0 bytes)."""
    if coll == "barrier":
        return [(0, 0, 0)]
    seen, out = set(), []
    for s in sorted(int(x) for x in sizes):
        count, block = plan_count(coll, s, itemsize, nranks)
        if count not in seen:
            seen.add(count)
            out.append((count * itemsize, count, block))
    return out


def plan_coll_iterations(
    size: int, *, iters: int | None = None, skip: int | None = None, quick: bool = False
) -> tuple[int, int]:
    """The timed and warm-up calls of one measurement.

    Args:
        size: bytes of the measurement.
        iters: timed calls; None picks OSU's 1000 (100 above :data:`LARGE_MESSAGE`
            bytes, scaled down so that one measurement moves at most 1 GiB, at least 5;
            ``quick``: 100, 20, 128 MiB, at least 2).
        skip: warm-up calls; None means a tenth of the timed ones (at least 1).
        quick: the reduced counts.

    Returns:
        ``(iters, skip)``.
    """
    if iters is None:
        (small, _), (large, _) = _QUICK_ITERS if quick else _DEFAULT_ITERS
        if size > LARGE_MESSAGE:
            budget, floor = (_QUICK_BUDGET, 2) if quick else (_BUDGET, 5)
            n = max(floor, min(large, budget // size))
        else:
            n = small
    else:
        n = max(1, int(iters))
    w = max(1, n // 10) if skip is None else max(0, int(skip))
    return n, w


# ---------------------------------------------------------------- values


def _data(np, dtype: str, src, block, index):
    v = (index * 7 + src * 13 + block * 5 + 1) % 97
    return v - 48 if _signed(dtype) else v


def _reduced_values(np, dtype: str, op: str, rank: int, index):
    """Rank ``rank``'s contribution at global element ``index`` (int64)."""
    if op == "sum":
        v = (index + 3 * rank) % 11
        return v - 5 if _signed(dtype) else v
    if op == "prod":
        k = (index + 2 * rank) % 7
        v = np.where(k == 0, 2, 1)
        return np.where(k == 3, -1, v) if _signed(dtype) else v
    v = (index * 7 + rank * 13) % 97
    return v - 48 if _signed(dtype) else v


def fill(np, coll: str, dtype: str, op: str, rank: int, nranks: int, block: int, root: int = 0):
    """What ``rank`` sends in one measurement, as a NumPy array of ``dtype``.

    Values are small integers (exact in every type, :func:`check_exact`):
    reductions take ``op``-dependent values of (rank, global element); ``bcast`` the
    root's (root, element) values (other ranks: None, their buffer is the receive
    buffer); ``allgather`` (rank, element); ``alltoall`` (rank, destination, element).
    ``block`` is :func:`plan_count`'s.
    """
    idx = np.arange(block, dtype=np.int64)
    if coll in ("allreduce", "reduce"):
        return _reduced_values(np, dtype, op, rank, idx).astype(dtype)
    if coll == "reduce_scatter":
        return _reduced_values(np, dtype, op, rank, np.arange(block * nranks, dtype=np.int64)).astype(dtype)
    if coll == "bcast":
        return _data(np, dtype, root, 0, idx).astype(dtype) if rank == root else None
    if coll == "allgather":
        return _data(np, dtype, rank, 0, idx).astype(dtype)
    if coll == "alltoall":
        return np.concatenate([_data(np, dtype, rank, j, idx) for j in range(nranks)]).astype(dtype)
    raise BenchError(f"fill: no data for {coll!r}")


def expected(np, coll: str, dtype: str, op: str, rank: int, nranks: int, block: int, root: int = 0):
    """The result ``rank`` must hold after one call (None when it holds none: ``reduce``
    off the root, ``barrier``), computed with NumPy from :func:`fill`'s formulas."""
    idx = np.arange(block, dtype=np.int64)
    if coll in REDUCING:
        if coll == "reduce" and rank != root:
            return None
        if coll == "reduce_scatter":
            idx = idx + rank * block
        ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
        acc = _reduced_values(np, dtype, op, 0, idx).astype(np.int64)
        for r in range(1, nranks):
            acc = ufunc(acc, _reduced_values(np, dtype, op, r, idx))
        return acc.astype(dtype)
    if coll == "bcast":
        return _data(np, dtype, root, 0, idx).astype(dtype)
    if coll == "allgather":
        return np.concatenate([_data(np, dtype, r, 0, idx) for r in range(nranks)]).astype(dtype)
    if coll == "alltoall":
        return np.concatenate([_data(np, dtype, r, rank, idx) for r in range(nranks)]).astype(dtype)
    return None


def sentinel(np, dtype: str):
    """The value receive buffers start from: NaN, or the type's largest integer (no result reaches it)."""
    if dtype in _FLOAT_EXACT:
        return np.dtype(dtype).type(np.nan)
    return np.iinfo(np.dtype(dtype)).max


def count_wrong(np, got, want) -> int:
    """Elements of ``got`` that differ from ``want`` (NaN never equals anything)."""
    if want is None:
        return 0
    return int(np.count_nonzero(~(np.asarray(got) == want)))


# ---------------------------------------------------------------- buffers and backends


class _CollBuffers:
    """One send and one receive array of ``dtype`` with room for the largest measurement, in
    host memory, simulated device memory or CuPy arrays; filled and read through host copies."""

    __slots__ = ("cupy", "kind", "np", "rbuf", "sbuf")

    def __init__(self, np, kind: str, dtype: str, elems: int):
        self.np, self.kind, self.cupy = np, kind, None
        n = max(int(elems), 1)
        if kind == "numpy":
            self.sbuf, self.rbuf = np.zeros(n, dtype), np.zeros(n, dtype)
        elif kind == "sim":
            from ..testing import SimDeviceArray

            self.sbuf, self.rbuf = SimDeviceArray.zeros(n, dtype), SimDeviceArray.zeros(n, dtype)
        else:
            check_device_buffers(kind)
            import cupy

            self.cupy = cupy
            self.sbuf, self.rbuf = cupy.zeros(n, dtype), cupy.zeros(n, dtype)

    def put(self, view, host) -> None:
        if self.kind == "numpy":
            view[...] = host
        else:
            view.set(host)

    def fetch(self, view):
        return view if self.kind == "numpy" else view.get()

    def sync(self) -> None:
        """Wait for the device's queued work (numpy: nothing)."""
        if self.kind == "sim":
            from .. import _device

            _device.sim_adapter().synchronize()
        elif self.cupy is not None:
            self.cupy.cuda.get_current_stream().synchronize()


def _mpi_call(MPI, comm, coll: str, sview, rview, dtype: str, op: str, root: int, rank: int) -> Callable[[], None]:
    """One call of ``coll`` through the mpi4py API, bound once (buffer specs ``[array, type]``)."""
    if coll == "barrier":
        return comm.Barrier
    t = getattr(MPI, DTYPES[dtype])
    s, r = [sview, t], [rview, t]
    mop = getattr(MPI, op.upper())
    if coll == "allreduce":
        f = comm.Allreduce
        return lambda: f(s, r, mop)
    if coll == "bcast":
        f = comm.Bcast
        return lambda: f(r, root)
    if coll == "reduce":
        f, rr = comm.Reduce, (r if rank == root else None)
        return lambda: f(s, rr, mop, root)
    if coll == "allgather":
        f = comm.Allgather
        return lambda: f(s, r)
    if coll == "reduce_scatter":
        f = comm.Reduce_scatter_block
        return lambda: f(s, r, mop)
    f = comm.Alltoall
    return lambda: f(s, r)


def nccl_status() -> tuple[bool, str]:
    """Whether ``--compare nccl`` can run here: ``(usable, reason)``.

    Usable when CuPy buffers are (:func:`~gpumpi.bench._common.cupy_status`) and
    ``cupy.cuda.nccl`` imports with ``available`` true; the reason names what is missing.
    """
    from ._common import cupy_status

    ok, why = cupy_status()
    if not ok:
        return False, why
    try:
        from cupy.cuda import nccl
    except ImportError as e:
        return False, f"cupy.cuda.nccl does not import ({e})"
    if not getattr(nccl, "available", False):
        return False, "CuPy was built without NCCL (cupy.cuda.nccl.available is False)"
    return True, why


def check_nccl(nranks: int, ops: Sequence[str] = COLLS, dtype: str = "float64") -> None:
    """Raise :class:`BenchError` unless NCCL can run ``ops`` of ``dtype`` on ``nranks`` ranks here:
    CuPy with NCCL, a GPU per rank (NCCL refuses two ranks on one GPU), a type NCCL has."""
    ok, why = nccl_status()
    if not ok:
        raise BenchError(f"nccl needs CuPy with NCCL and a CUDA GPU ({why})")
    ngpus = int(why.split()[0])
    if ngpus < nranks:
        raise BenchError(f"nccl needs one GPU per rank ({ranks_words(nranks)}, {ngpus} GPU{'s' if ngpus != 1 else ''})")
    if dtype not in _NCCL_TYPES:
        raise BenchError(f"nccl has no {dtype} (--dtype {', '.join(_NCCL_TYPES)})")
    if not any(c in NCCL_COLLS for c in ops):
        raise BenchError(f"nccl runs none of --ops {','.join(ops)} (it runs {', '.join(NCCL_COLLS)})")


class _Nccl:
    """CuPy's NCCL communicator over the ranks of ``comm`` (its unique id broadcast by ``comm``)."""

    __slots__ = ("comm", "nccl", "stream")

    def __init__(self, MPI, comm, np):
        from cupy.cuda import Stream, nccl

        # NCCL_UNIQUE_ID_BYTES C chars, signed or not by platform: int16 carries either exactly
        uid = np.zeros(128, dtype=np.int16)
        if comm.Get_rank() == 0:
            uid[:] = nccl.get_unique_id()
        comm.Bcast([uid.view(np.uint8), MPI.BYTE], 0)
        self.nccl = nccl
        self.comm = nccl.NcclCommunicator(comm.Get_size(), tuple(int(x) for x in uid), comm.Get_rank())
        self.stream = Stream(non_blocking=True)

    def call(self, coll: str, sview, rview, count: int, block: int, dtype: str, op: str, root: int):
        # the documented signatures of NcclCommunicator (cupy.cuda.nccl): pointers, counts, enums, stream
        c, nccl, st = self.comm, self.nccl, self.stream.ptr
        t = getattr(nccl, _NCCL_TYPES[dtype])
        o = getattr(nccl, _NCCL_OPS[op])
        s, r = sview.data.ptr, rview.data.ptr
        if coll == "allreduce":
            return lambda: c.allReduce(s, r, count, t, o, st)
        if coll == "bcast":
            return lambda: c.bcast(r, count, t, root, st)
        if coll == "reduce":
            return lambda: c.reduce(s, r, count, t, o, root, st)
        if coll == "allgather":
            return lambda: c.allGather(s, r, block, t, st)
        if coll == "reduce_scatter":
            return lambda: c.reduceScatter(s, r, block, t, o, st)
        raise BenchError(f"nccl: CuPy's NCCL binding has no {MPI_NAMES[coll]} (it runs {', '.join(NCCL_COLLS)})")

    def sync(self) -> None:
        self.stream.synchronize()

    def close(self) -> None:
        self.comm.destroy()


# ---------------------------------------------------------------- measurements


def _views(bufs: _CollBuffers, coll: str, count: int, block: int, nranks: int):
    """The (send, receive) views of one measurement."""
    if coll in ("allreduce", "reduce", "bcast"):
        return bufs.sbuf[:count], bufs.rbuf[:count]
    if coll == "allgather":
        return bufs.sbuf[:block], bufs.rbuf[:count]
    if coll == "reduce_scatter":
        return bufs.sbuf[:count], bufs.rbuf[:block]
    return bufs.sbuf[:count], bufs.rbuf[:count]  # alltoall; barrier (empty)


def _gather_stats(MPI, comm, np, rank: int, nranks: int, mine) -> list | None:
    """Every rank's ``mine`` (float64 values) on rank 0, by point-to-point messages; None elsewhere."""
    cell = np.asarray(mine, dtype=np.float64)
    if rank != 0:
        comm.Send([cell.view(np.uint8), MPI.BYTE], 0, TAG_COLL_STATS)
        return None
    out = [cell.copy()]
    for r in range(1, nranks):
        other = np.empty_like(cell)
        comm.Recv([other.view(np.uint8), MPI.BYTE], r, TAG_COLL_STATS)
        out.append(other)
    return out


def _measure(MPI, comm, np, bufs, call, sync, plan, coll, dtype, op, root, rank, nranks, n, w):
    size, count, block = plan
    sview, rview = _views(bufs, coll, count, block, nranks)
    if coll != "barrier":
        data = fill(np, coll, dtype, op, rank, nranks, block, root)
        if coll == "bcast":
            rlen = count
            bufs.put(rview, data if data is not None else np.full(rlen, sentinel(np, dtype), dtype=dtype))
        else:
            bufs.put(sview, data)
            bufs.put(rview, np.full(len(rview), sentinel(np, dtype), dtype=dtype))
        bufs.sync()
    fn = call(coll, sview, rview, count, block)
    wtime = MPI.Wtime
    for _ in range(w):
        fn()
    sync()
    comm.Barrier()  # after the warm-up, as nccl-tests: the ranks start the timed calls together
    t0 = wtime()
    for _ in range(n):
        fn()
    sync()
    elapsed = wtime() - t0
    want = expected(np, coll, dtype, op, rank, nranks, block, root)
    wrong = count_wrong(np, bufs.fetch(rview), want) if want is not None else 0
    return elapsed / n, wrong


def run_coll(
    MPI,
    sizes: Iterable[int] | None = None,
    *,
    ops: Sequence[str] = COLLS,
    dtype: str = "float64",
    op: str = "sum",
    root: int = 0,
    iters: int | None = None,
    skip: int | None = None,
    quick: bool = False,
    buffer: str = "numpy",
    backend: str = "mpi",
    comm=None,
    progress: Callable[[int, int, dict], None] | None = None,
) -> list[dict]:
    """Run the nccl-tests-style collectives suite (see the module docstring).

    Collective over ``comm``: every rank calls it and takes part in every measurement.

    Args:
        MPI: the MPI module to measure (``gpumpi.MPI`` or ``mpi4py.MPI``); with
            ``backend="nccl"``, gpumpi's, which carries NCCL's unique id, the
            barriers and the statistics.
        sizes: sizes in bytes (nccl-tests' whole-array byte counts); None means 8 B ...
            16 MiB (:data:`QUICK_SIZES` with ``quick``).
        ops: collectives from :data:`COLLS`.
        dtype: element type, from :data:`DTYPES`.
        op: reduction of ``allreduce``, ``reduce`` and ``reduce_scatter``, from :data:`OPS`.
        root: root of ``bcast`` and ``reduce``.
        iters: timed calls per measurement; None picks OSU-style counts
            (:func:`plan_coll_iterations`).
        skip: warm-up calls per measurement; None means a tenth of ``iters``.
        quick: reduced iteration counts.
        buffer: ``"numpy"``, ``"sim"`` or ``"cupy"`` (CuPy arrays on the current
            device: bind each rank's GPU first).
        backend: ``"mpi"`` (``MPI``'s collectives) or ``"nccl"`` (CuPy's NCCL
            binding on ``cupy`` buffers; collectives of :data:`NCCL_COLLS` only).
        comm: communicator (default ``MPI.COMM_WORLD``).
        progress: called on rank 0 as ``progress(index, count, row)`` after each measurement.

    Returns:
        On rank 0, one dict per measurement with keys ``coll``, ``size`` (bytes),
        ``count`` (elements), ``type``, ``redop`` (``"none"`` for collectives that do
        not reduce), ``root`` (-1 for unrooted ones), ``time_us`` (per call, average
        over the ranks), ``time_max_us`` (slowest rank), ``algbw_GBps``,
        ``busbw_GBps`` (None for ``barrier``), ``wrong`` (elements that differ from
        the expected result, all ranks), ``iters`` and ``skip``.  An empty list on
        other ranks.

    Raises:
        BenchError: bad buffer kind, collective, type, op, root or backend; a
            result that could not be exact (:func:`check_exact`); NCCL asked for
            without CuPy, NCCL or ``cupy`` buffers.
    """
    check_buffer_kind(buffer, SUITE)
    ops = parse_ops(",".join(ops))
    check_dtype(dtype)
    check_op(op)
    if comm is None:
        comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    check_root(root, nranks)
    if any(c in REDUCING for c in ops):
        check_exact(op, dtype, nranks)
    if backend not in ("mpi", "nccl"):
        raise BenchError(f"unknown backend {backend!r} (known: mpi, nccl)")
    if backend == "nccl":
        if buffer != "cupy":
            raise BenchError(f"nccl runs on cupy buffers (--buffer {buffer})")
        check_nccl(nranks, ops, dtype)
        ops = [c for c in ops if c in NCCL_COLLS]
    sizes = list(QUICK_SIZES if quick else default_sizes(MIN_SIZE, MAX_SIZE)) if sizes is None else [int(s) for s in sizes]
    if any(s < 0 for s in sizes):
        raise BenchError("sizes must be >= 0")

    import numpy as np

    itemsize = np.dtype(dtype).itemsize
    plans = [(c, p) for c in ops for p in plan_sizes(c, sizes, itemsize, nranks)]
    elems = max([p[1] for _, p in plans] + [1])
    bufs = _CollBuffers(np, buffer, dtype, elems)
    nccl = _Nccl(MPI, comm, np) if backend == "nccl" else None
    rows: list[dict] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if nccl is None:
            sync = bufs.sync

            def call(c, s, r, count, block):
                return _mpi_call(MPI, comm, c, s, r, dtype, op, root, rank)
        else:
            sync = nccl.sync

            def call(c, s, r, count, block):
                return nccl.call(c, s, r, count, block, dtype, op, root)

        for index, (coll, plan) in enumerate(plans):
            n, w = plan_coll_iterations(plan[0], iters=iters, skip=skip, quick=quick)
            if coll == "barrier" and iters is None:
                n, w = (_QUICK_ITERS if quick else _DEFAULT_ITERS)[0]
            t, wrong = _measure(MPI, comm, np, bufs, call, sync, plan, coll, dtype, op, root, rank, nranks, n, w)
            stats = _gather_stats(MPI, comm, np, rank, nranks, [t, wrong])
            gc.collect()
            if stats is None:
                continue
            times = [float(s[0]) for s in stats]
            row = make_row(coll, plan[0], plan[1], dtype, op, root, nranks, times,
                           sum(int(s[1]) for s in stats), n, w)  # fmt: skip
            rows.append(row)
            if progress is not None:
                progress(index, len(plans), row)
    finally:
        if gc_was_enabled:
            gc.enable()
        if nccl is not None:
            nccl.close()
    comm.Barrier()
    return rows


def make_row(coll: str, size: int, count: int, dtype: str, op: str, root: int, nranks: int,
             times: Sequence[float], wrong: int, iters: int, skip: int) -> dict:  # fmt: skip
    """One result row from every rank's seconds per call (``times``): average and slowest in
    microseconds, ``algbw = size / average`` and ``busbw = algbw * busbw_factor`` in GB/s."""
    avg = sum(times) / len(times)
    factor = busbw_factor(coll, nranks)
    algbw = size / avg / 1e9 if avg > 0 and size > 0 else None
    return {
        "coll": coll,
        "size": size,
        "count": count,
        "type": dtype if coll != "barrier" else "none",
        "redop": op if coll in REDUCING else "none",
        "root": root if coll in ROOTED else -1,
        "time_us": avg * 1e6,
        "time_max_us": max(times) * 1e6,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * factor if algbw is not None and factor is not None else None,
        "wrong": int(wrong),
        "iters": iters,
        "skip": skip,
    }


# ---------------------------------------------------------------- tables


def coll_metadata(MPI, impl: str, *, nranks: int, buffer: str = "numpy", ops: Sequence[str] = COLLS,
                  dtype: str = "float64", op: str = "sum", root: int = 0, transport: str = "auto",
                  transports_env: str | None = None, devices=None) -> dict:  # fmt: skip
    """Describe a coll run (:func:`~gpumpi.bench.report.metadata`'s counterpart): implementation
    (``"gpumpi"``, ``"mpi4py"`` or ``"nccl"``), MPI library, ranks, buffers, ops, type, op, root."""
    base = {"suite": "coll", "impl": impl, "library": library_version(MPI), "nranks": nranks, "buffer": buffer}
    if impl == "nccl":
        base["library"] = _nccl_version()
    device = {"transport": transport, "transports_env": transports_env, "devices": devices} if buffer in DEVICE_BUFFER_KINDS else {}
    return {**base, "ops": list(ops), "dtype": dtype, "op": op, "root": root, **device,
            "units": {"size": "B", "time": "us", "bandwidth": "GB/s (1e9 B/s)"}}  # fmt: skip


def nccl_version_words(code: int) -> str:
    """``"NCCL 2.21.5"`` from an ``ncclGetVersion`` code (nccl.h's ``NCCL_VERSION(X, Y, Z)``:
    ``X*1000 + Y*100 + Z`` up to 2.8, ``X*10000 + Y*100 + Z`` from 2.9)."""
    v = int(code)
    major, rest = (v // 10000, v % 10000) if v >= 10000 else (v // 1000, v % 1000)
    return f"NCCL {major}.{rest // 100}.{rest % 100}"


def _nccl_version() -> str:
    from cupy.cuda import nccl

    return nccl_version_words(nccl.get_version()) + " (cupy.cuda.nccl)"


def _colls_of(rows: Sequence[dict]) -> list[str]:
    present = {r["coll"] for r in rows}
    return [c for c in COLLS if c in present]


def _factor_words(coll: str) -> str:
    return {"allreduce": "busbw = algbw * 2(n-1)/n", "bcast": "busbw = algbw", "reduce": "busbw = algbw",
            "barrier": "no data: time only"}.get(coll, "busbw = algbw * (n-1)/n")  # fmt: skip


def _method_lines(rows: Sequence[dict], meta: dict | None) -> list[str]:
    nranks = (meta or {}).get("nranks")
    per = f", then averaged over the {nranks} ranks" if nranks else ", then averaged over the ranks"
    return [
        f"# time: per call on each rank (Wtime over the timed calls after warm-up){per}; tmax: the slowest rank",
        "# size: one rank's whole array (Allgather: gathered; Reduce_scatter_block: before scattering; "
        "Alltoall: sent); algbw = size / time; GB = 1e9 B",
        "# #wrong: elements that differ from the expected result after the timed calls, all ranks",
    ]


def _block_head(coll: str) -> str:
    return f"# {MPI_NAMES[coll]}: {_factor_words(coll)}"


def _key_cells(r: dict) -> list[str]:
    return [str(r["size"]), str(r["count"]), str(r["type"]), str(r["redop"]), str(r["root"])]


_KEY_COLUMNS = [("size", "(B)"), ("count", "(elements)"), ("type", ""), ("redop", ""), ("root", "")]


def format_coll_table(rows: Sequence[dict], meta: dict | None = None) -> str:
    """Format coll results as nccl-tests-style tables, one per collective, with a header.

    Args:
        rows: results of :func:`run_coll`.
        meta: the run's :func:`coll_metadata`; None prints only the tables.

    Returns:
        The text, ending with ``# Avg bus bandwidth`` and ``# Wrong values`` footers.
    """
    out = []
    if meta:
        buffer = meta.get("buffer", "numpy")
        out.append(f"# {meta['impl']} coll, {ranks_words(meta['nranks'])}, {buffer_words(buffer)}")
        out.append(f"# MPI library: {meta.get('library', 'unknown')}")
        if buffer in DEVICE_BUFFER_KINDS and meta.get("impl") != "nccl":
            out.append(transport_words(meta))
    out.extend(_method_lines(rows, meta))
    columns = [*_KEY_COLUMNS, ("time", "(us)"), ("tmax", "(us)"), ("algbw", "(GB/s)"), ("busbw", "(GB/s)"),
               ("#wrong", "")]  # fmt: skip
    for coll in _colls_of(rows):
        out.append(_block_head(coll))
        cells = [
            [*_key_cells(r), format_cell(r.get("time_us"), ".2f"), format_cell(r.get("time_max_us"), ".2f"),
             format_cell(r.get("algbw_GBps"), ".4f"), format_cell(r.get("busbw_GBps"), ".4f"), str(r.get("wrong", 0))]
            for r in rows if r["coll"] == coll
        ]  # fmt: skip
        out.extend(format_columns(columns, cells))
    out.append(_avg_busbw(rows, "busbw_GBps"))
    out.append(wrong_footer(sum(int(r.get("wrong", 0)) for r in rows)))
    return "\n".join(out)


def _avg_busbw(rows: Sequence[dict], key: str, who: str = "") -> str:
    vals = [r[key] for r in rows if r.get(key) is not None]
    label = f"# Avg bus bandwidth{' ' + who if who else ''}"
    return f"{label} : {format_cell(sum(vals) / len(vals), '.4f') if vals else '-'} GB/s"


def _key(r: dict) -> tuple:
    return (r["coll"], r["size"])


def compare_coll_results(rows: Sequence[dict], ref_rows: Sequence[dict]) -> list[dict]:
    """Pair two runs by (collective, size); the speedup is above 1 when ``rows`` is faster.

    Args:
        rows: results of the implementation under test (e.g. gpumpi).
        ref_rows: results of the reference (e.g. mpi4py, or NCCL, which runs a subset).

    Returns:
        One dict per row of ``rows``, in its order: the key columns, ``time_us`` /
        ``ref_time_us``, ``time_max_us`` / ``ref_time_max_us``, ``busbw_GBps`` /
        ``ref_busbw_GBps``, ``speedup = ref time / time`` (None where the reference has
        no such row), ``wrong`` and ``ref_wrong``.
    """
    ref = {_key(r): r for r in ref_rows}
    out = []
    for r in rows:
        o = ref.get(_key(r), {})
        out.append(
            {
                "coll": r["coll"], "size": r["size"], "count": r["count"], "type": r["type"], "redop": r["redop"],
                "root": r["root"],
                "time_us": r.get("time_us"), "ref_time_us": o.get("time_us"),
                "time_max_us": r.get("time_max_us"), "ref_time_max_us": o.get("time_max_us"),
                "busbw_GBps": r.get("busbw_GBps"), "ref_busbw_GBps": o.get("busbw_GBps"),
                "speedup": ratio(o.get("time_us"), r.get("time_us")),
                "wrong": int(r.get("wrong", 0)), "ref_wrong": int(o.get("wrong", 0)),
            }
        )  # fmt: skip
    return out


def format_coll_compare_table(merged: Sequence[dict], meta: dict, ref_meta: dict) -> str:
    """Format :func:`compare_coll_results` as one table per collective.

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
    if buf == ref_buf:
        buffers = buffer_words(buf)
    else:
        buffers = f"{a} on {buffer_words(buf)}, {b} on {buffer_words(ref_buf)}"
    out = [
        f"# {a} vs {b} coll, {ranks_words(meta['nranks'])}, {buffers}",
        f"# {a} MPI library: {meta.get('library', 'unknown')}",
        f"# {b} MPI library: {ref_meta.get('library', 'unknown')}",
    ]
    for side, m, other in ((a, meta, ref_buf), (b, ref_meta, buf)):
        kind = m.get("buffer", "numpy")
        if kind in DEVICE_BUFFER_KINDS and m.get("impl") != "nccl":
            out.append(transport_words(m).replace("# device transport", f"# {side} device transport", 1))
        if kind != other and other in REF_HOST_WHY and kind == "numpy" and m.get("impl") == "mpi4py":
            out.append(f"# {side} ran on host numpy buffers: {REF_HOST_WHY[other]}; "
                       "the ratios compare device with host collectives")  # fmt: skip
    out.extend(_method_lines(merged, meta))
    out.append(f"# speedup = {b} time / {a} time (the busbw ratio too); >1 means {a} is better; "
               f"- where {b} has no such measurement")  # fmt: skip
    columns = [*_KEY_COLUMNS, (f"time {a}", "(us)"), (f"time {b}", "(us)"), (f"busbw {a}", "(GB/s)"),
               (f"busbw {b}", "(GB/s)"), ("speedup", "(x)"), ("#wrong", "")]  # fmt: skip
    for coll in _colls_of(merged):
        out.append(_block_head(coll))
        cells = [
            [*_key_cells(m), format_cell(m["time_us"], ".2f"), format_cell(m["ref_time_us"], ".2f"), format_cell(m["busbw_GBps"], ".4f"),
             format_cell(m["ref_busbw_GBps"], ".4f"), fmt_ratio(m["speedup"]), str(m["wrong"] + m["ref_wrong"])]
            for m in merged if m["coll"] == coll
        ]  # fmt: skip
        out.extend(format_columns(columns, cells))
    out.append(_avg_busbw(merged, "busbw_GBps", a))
    out.append(_avg_busbw(merged, "ref_busbw_GBps", b))
    out.append(wrong_footer(sum(m["wrong"] + m["ref_wrong"] for m in merged)))
    return "\n".join(out)


def format_coll_progress(index: int, count: int, row: dict, impl: str = "") -> str:
    """One progress line for stderr, e.g. ``# mpi4py coll [3/40] allreduce 65536 B: time 12.30 us ...``."""
    who = f"{impl} coll" if impl else "coll"
    parts = [f"# {who} [{index + 1}/{count}] {row['coll']} {row['size']} B:"]
    if row.get("time_us") is not None:
        parts.append(f"time {row['time_us']:.2f} us")
    if row.get("busbw_GBps") is not None:
        parts.append(f"busbw {row['busbw_GBps']:.4f} GB/s")
    if row.get("wrong"):
        parts.append(f"WRONG {row['wrong']}")
    return " ".join(parts)


SUITE = Suite(
    name="coll",
    min_ranks=1,
    buffers=BUFFER_KINDS,
    buffer_rule="runs on numpy, sim or cupy buffers",
    row_key="coll",
    parse_sizes=parse_coll_sizes,
    format_table=format_coll_table,
    format_progress=format_coll_progress,
    compare_results=compare_coll_results,
    format_compare_table=format_coll_compare_table,
)
