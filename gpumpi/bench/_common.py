"""Common setup and checks of the ``gpumpi bench`` suites (L6): sizes, buffer kinds and devices,
the send and receive buffers, the pair synchronisation, the wrong-value count, the message
tags, and the :class:`Suite` record by which a suite module joins the registry.

Theory of operation
===================
Every suite is a function that takes the MPI *module* as its first argument, so the
same code measures ``gpumpi.MPI`` and ``mpi4py.MPI`` side by side.  Only the
uppercase buffer API is used (``Send``, ``Recv``, ``Isend``, ``Irecv``,
``Request.Waitall``, ``Barrier``, ``Wtime``) with ``[array, MPI.BYTE]`` buffer specs.
Ranks 0 and 1 synchronise with each other by a zero-byte ping-pong before every
timed loop (:func:`pair_sync`); the only collective is the closing ``Barrier`` of the
whole communicator.

Rules that every suite keeps:

* GB means 1e9 bytes; times come from ``MPI.Wtime`` on rank 0.
* Buffers are allocated once, at the largest size, outside every timed loop; the
  first ``skip`` iterations of each loop are warm-up and are not timed.
* Every measurement is checked: the sender's buffer holds a pattern that depends on
  the size and the sending rank (:func:`fill_pattern`), the receiver fills its buffer with
  the bitwise complement before the loop and counts the bytes that differ from the
  pattern afterwards.  Rank 1 sends its count to rank 0 (:func:`sum_wrong`); the sum
  is the ``#wrong`` column.
* Ranks other than 0 and 1 wait at the final barrier.
* Buffers: ``numpy`` (host memory), ``sim`` (simulated device memory,
  :class:`gpumpi.testing.SimDeviceArray`) or ``cupy`` (CuPy arrays on the rank's
  GPU), as :class:`HostBuffers`, :class:`DeviceBuffers` and :class:`DeviceMemory` make
  them.  Device buffers are filled and checked through host copies (``.set`` /
  ``.get``) outside the timed loops; the zero-byte synchronisation messages and
  acks stay in host memory.  Which device transport gpumpi uses is chosen by
  ``GPUMPI_TRANSPORTS`` in the ranks' environment (:func:`transports_setting`).
* The message tags of all suites are defined here, in one table, so that no two
  suites share one by accident.

Nothing heavy is imported at module import time; numpy is imported by the suites, CuPy
and gpumpi's device adapters inside the functions that use them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Buffer kinds: host NumPy arrays, simulated device memory, CuPy arrays on a GPU.
BUFFER_KINDS = ("numpy", "sim", "cupy")
#: The buffer kinds that live in (real or simulated) device memory.
DEVICE_BUFFER_KINDS = ("sim", "cupy")
#: Values of ``--transport``: gpumpi's own choice, or one device transport for every device message.
TRANSPORTS = ("auto", "cuda_ipc", "staging")
#: Messages in flight per window in the bandwidth tests (OSU's value).
WINDOW = 64
#: Largest default message size (16 MiB).
MAX_SIZE = 16 << 20
#: Bytes of receive buffer per window (``distinct_recv``) before receives reuse slots.
RECV_CAP = 64 << 20
#: Slot alignment inside the receive buffer.
ALIGN = 64

# the message tags of every suite, in one table (a new suite takes the next numbers)
TAG_LAT, TAG_BW, TAG_ACK, TAG_BIBW, _TAG_CHECK, _TAG_SYNC = 101, 102, 103, 104, 105, 106
TAG_STRIDED = 107
TAG_GO, TAG_MATRIX, TAG_STATS = 108, 109, 110
TAG_COLL_STATS = 111
TAG_OBJ = 112


class BenchError(Exception):
    """A benchmark was asked for something it cannot do (bad suite, buffer, sizes)."""


@dataclass(frozen=True)
class Suite:
    """One suite as the package sees it; each suite module ends with ``SUITE = Suite(...)``.

    Attributes:
        name: the ``NAME`` of ``gpumpi bench NAME``.
        min_ranks: the fewest ranks the suite runs on.
        buffers: the buffer kinds it runs on (from :data:`BUFFER_KINDS`).
        buffer_rule: what :func:`check_buffer_kind` says of another kind, after
            ``"the NAME suite"``.
        row_key: a key that only this suite's result rows have, by which a table of
            rows finds its suite without metadata; None for p2p, whose rows are the default.
        parse_sizes: ``parse_sizes(spec, quick=False)``: a ``--sizes`` argument as the
            list of sizes that the suite's run function takes.
        format_table: ``format_table(rows, meta=None)``: results as a table with its header.
        format_progress: ``format_progress(index, count, row, impl="")``: one stderr line.
        compare_results: ``compare_results(rows, ref_rows)``: two implementations' rows
            paired, with ratios; None when the suite measures gpumpi alone.
        format_compare_table: ``format_compare_table(merged, meta, ref_meta)``; None likewise.
        ranks: the one number of ranks the suite runs on (the ``ga`` suite's 4, as GA's
            ``perf.F``), which is also the default of ``-n``; None: any number from
            ``min_ranks`` (default 2).
    """

    name: str
    min_ranks: int
    buffers: tuple[str, ...]
    buffer_rule: str
    row_key: str | None
    parse_sizes: Callable[..., list[int]]
    format_table: Callable[..., str]
    format_progress: Callable[..., str]
    compare_results: Callable[..., list[dict]] | None = None
    format_compare_table: Callable[..., str] | None = None
    ranks: int | None = None


# ---------------------------------------------------------------- sizes


def parse_size(text: str) -> int:
    """Parse a byte count such as ``4096``, ``64K``, ``16M``, ``1G`` or ``64KiB``.

    Args:
        text: the size; suffixes K/M/G (optionally followed by ``iB`` or ``B``)
            are powers of 1024.

    Returns:
        The number of bytes.

    Raises:
        BenchError: the text is not a non-negative size.
    """
    t = text.strip()
    low = t.lower()
    for suffix in ("ib", "b"):
        if low.endswith(suffix) and len(low) > len(suffix):
            low = low[: -len(suffix)]
            break
    mult = 1
    if low and low[-1] in "kmg":
        mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[low[-1]]
        low = low[:-1]
    try:
        n = int(low, 10)
    except ValueError:
        raise BenchError(f"bad size {text!r} (expected e.g. 0, 4096, 64K, 16M)") from None
    if n < 0:
        raise BenchError(f"bad size {text!r} (negative)")
    return n * mult


def default_sizes(min_size: int = 0, max_size: int = MAX_SIZE) -> list[int]:
    """Return the OSU sweep: 0 B, then 1 B, 2 B, 4 B ... up to ``max_size``.

    Args:
        min_size: smallest size kept (0 keeps the zero-byte message).
        max_size: largest size kept.

    Returns:
        Sizes in increasing order within ``[min_size, max_size]``.
    """
    sizes = [0] if min_size <= 0 <= max_size else []
    s = 1
    while s <= max_size:
        if s >= min_size:
            sizes.append(s)
        s <<= 1
    return sizes


# ---------------------------------------------------------------- buffer kinds and devices


def check_buffer_kind(buffer: str, suite: Suite | None = None) -> None:
    """Raise :class:`BenchError` unless ``suite`` can run on ``buffer`` buffers.

    Every kind must be one of :data:`BUFFER_KINDS`, and one of ``suite.buffers`` when a
    suite is given (p2p takes every kind; pack only ``numpy``; p2p-matrix only the device
    kinds, :data:`DEVICE_BUFFER_KINDS`).  Whether CuPy and a GPU are there is
    :func:`check_device_buffers`'s question.
    """
    if buffer not in BUFFER_KINDS:
        raise BenchError(f"unknown buffer kind {buffer!r} (supported: {', '.join(BUFFER_KINDS)})")
    if suite is not None and buffer not in suite.buffers:
        raise BenchError(f"the {suite.name} suite {suite.buffer_rule} (--buffer {buffer})")


def cupy_status() -> tuple[bool, str]:
    """Whether CuPy buffers can be used here: ``(usable, reason)``.

    Usable when ``cupy`` imports, the CUDA driver initialises and at least one GPU
    is visible.  Importing CuPy and initialising CUDA happen only when the first two
    checks pass; the reason names what is missing otherwise.
    """
    import importlib.util

    if importlib.util.find_spec("cupy") is None:
        return False, "cupy is not installed: pip install gpumpi[cuda]"
    from .. import _device

    if _device.cuda_driver() is None:
        return False, "no usable CUDA driver: libcuda.so.1 missing or cuInit failed"
    try:
        from .._device import cupy_adapter

        n = cupy_adapter().device_count()
    except Exception as e:  # an ImportError or CUDA error: report it, do not crash the validation
        return False, f"CuPy/CUDA failed: {e}"
    if n < 1:
        return False, "the CUDA driver sees no GPU"
    return True, f"{n} GPU{'s' if n != 1 else ''}"


def check_device_buffers(buffer: str) -> None:
    """Raise :class:`BenchError` when ``buffer`` is ``"cupy"`` and CuPy or a GPU is missing.

    Call before launching anything: CuPy buffers need CuPy and a CUDA GPU in every rank.
    """
    if buffer != "cupy":
        return
    ok, why = cupy_status()
    if not ok:
        raise BenchError(f"--buffer cupy needs CuPy and a CUDA GPU ({why})")


def check_transport(transport: str) -> None:
    """Raise :class:`BenchError` unless ``transport`` is one of :data:`TRANSPORTS`."""
    if transport not in TRANSPORTS:
        raise BenchError(f"unknown transport {transport!r} (known: {', '.join(TRANSPORTS)})")


def transports_setting(transport: str, current: str = "") -> str:
    """The ``GPUMPI_TRANSPORTS`` value that makes gpumpi ranks use ``transport`` for device messages.

    Args:
        transport: one of :data:`TRANSPORTS`.  ``"auto"`` keeps ``current`` as it is
            (gpumpi chooses: ``cuda_ipc`` where it can, else ``staging``); a name
            replaces every ``device:`` item of ``current`` by ``device:<name>`` and
            keeps the host items.
        current: the value in the environment now (``""`` when unset).

    Returns:
        The value to put in the ranks' environment.

    Raises:
        BenchError: unknown transport.
    """
    check_transport(transport)
    if transport == "auto":
        return current
    keep = [item.strip() for item in current.replace(";", ",").split(",")]
    keep = [item for item in keep if item and not item.lower().startswith("device:")]
    return ",".join([*keep, f"device:{transport}"])


def device_count(buffer: str) -> int:
    """How many devices the adapter of ``buffer`` buffers has (``sim``: the simulated adapter's).

    Raises:
        BenchError: ``buffer`` is not a device kind, or CuPy / a GPU is missing.
    """
    if buffer not in DEVICE_BUFFER_KINDS:
        raise BenchError(f"device_count: not a device buffer kind (--buffer {buffer})")
    check_device_buffers(buffer)
    from .. import _device

    return (_device.sim_adapter() if buffer == "sim" else _device.cupy_adapter()).device_count()


# ---------------------------------------------------------------- buffers


def fill_pattern(np, size: int, rank: int):
    """The bytes that ``rank`` sends at ``size``: period 251, seeded by both."""
    base = ((np.arange(251, dtype=np.int64) * 131 + size * 7 + rank * 29 + 1) % 251).astype(np.uint8)
    return np.resize(base, size)


def slot_stride(size: int) -> int:
    return max(ALIGN, -(-size // ALIGN) * ALIGN)


def slot_count(size: int, window: int, distinct: bool) -> int:
    if not distinct:
        return 1
    return max(1, min(window, RECV_CAP // slot_stride(size)))


class DeviceMemory:
    """1-D ``uint8`` device arrays of one kind, with ``.set(host)`` / ``.get()`` and views by slicing.

    ``own``: every array is its own allocation straight from the adapter (CuPy:
    ``adapter.alloc`` wrapped as a ``cupy.ndarray``, outside CuPy's pool; sim:
    every :class:`~gpumpi.testing.SimDeviceArray` already is), freed by
    :meth:`release`.  Otherwise CuPy arrays come from CuPy's pool.
    """

    __slots__ = ("_cupy", "_raw", "adapter", "kind", "own", "stream")

    def __init__(self, kind: str, own: bool = False):
        from .. import _device

        self.kind = kind
        self.own = own
        self._raw: list[int] = []
        self.stream = None
        if kind == "sim":
            self._cupy = None
            self.adapter = _device.sim_adapter()
        elif kind == "cupy":
            check_device_buffers(kind)
            import cupy

            self._cupy = cupy
            self.adapter = _device.cupy_adapter()
        else:
            raise BenchError(f"not a device buffer kind (--buffer {kind})")

    def array(self, nbytes: int):
        if self._cupy is None or not self.own or nbytes == 0:
            from .._backends import device_empty

            return device_empty(nbytes, "u1", "bench", zeros=True, kind=self.kind)
        cp = self._cupy
        addr = self.adapter.alloc(nbytes)
        self._raw.append(addr)
        mem = cp.cuda.UnownedMemory(addr, nbytes, None, self.adapter.current_device())
        return cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))

    def sync(self) -> None:
        """Wait for the device work that ``.set`` queued (sim: runs every queued operation)."""
        if self._cupy is None:
            self.adapter.synchronize()
        else:
            self._cupy.cuda.get_current_stream().synchronize()

    def release(self) -> None:
        """Free the arrays' own allocations (the arrays must not be used afterwards)."""
        if self._raw:
            self.adapter.synchronize()
            for addr in self._raw:
                self.adapter.free(addr)
            self._raw.clear()


class HostBuffers:
    """Host send/receive buffers allocated once for the whole sweep."""

    __slots__ = ("distinct", "empty", "np", "rbuf", "sbuf")

    def __init__(self, np, sizes: Sequence[int], window: int, distinct: bool):
        self.np = np
        self.distinct = distinct
        biggest = max(sizes) if sizes else 0
        rbytes = max([slot_count(s, window, distinct) * slot_stride(s) for s in sizes] + [ALIGN])
        self.sbuf = np.zeros(max(biggest, 1), dtype=np.uint8)
        self.rbuf = np.zeros(rbytes, dtype=np.uint8)
        # touch every page now, as OSU's benchmarks do (np.zeros maps them lazily): no page is
        # first faulted in during a measurement, nor placed by what the library did meanwhile
        self.sbuf.fill(0)
        self.rbuf.fill(0)
        self.empty = np.zeros(0, dtype=np.uint8)

    def prepare_send(self, size: int, rank: int):
        if size:
            self.sbuf[:size] = fill_pattern(self.np, size, rank)
        return self.sbuf[:size]

    def recv_slots(self, size: int, nslots: int, peer: int):
        """Views of ``nslots`` receive slots, each set to the complement of the
        peer's pattern so that a missing or partial delivery is counted."""
        stride = slot_stride(size)
        grid = self.rbuf[: nslots * stride].reshape(nslots, stride)
        if size:
            grid[:, :size] = ~fill_pattern(self.np, size, peer)
        return [grid[i, :size] for i in range(nslots)]

    def count_wrong(self, slots, size: int, peer: int, used: int) -> int:
        if size == 0:
            return 0
        expected = fill_pattern(self.np, size, peer)
        return int(sum(int(self.np.count_nonzero(v != expected)) for v in slots[:used]))


class DeviceBuffers(HostBuffers):
    """Device send/receive buffers (``sim`` or ``cupy``), filled and checked through host copies."""

    __slots__ = ("mem",)

    def __init__(self, np, mem: DeviceMemory, sizes: Sequence[int], window: int, distinct: bool):
        self.np = np
        self.mem = mem
        self.distinct = distinct
        biggest = max(sizes) if sizes else 0
        rbytes = max([slot_count(s, window, distinct) * slot_stride(s) for s in sizes] + [ALIGN])
        self.sbuf = mem.array(max(biggest, 1))
        self.rbuf = mem.array(rbytes)
        self.empty = np.zeros(0, dtype=np.uint8)  # zero-byte sync messages stay on the host

    def prepare_send(self, size: int, rank: int):
        view = self.sbuf[:size]
        if size:
            view.set(fill_pattern(self.np, size, rank))
            self.mem.sync()
        return view

    def recv_slots(self, size: int, nslots: int, peer: int):
        stride = slot_stride(size)
        if size:
            image = self.np.zeros((nslots, stride), dtype=self.np.uint8)
            image[:, :size] = ~fill_pattern(self.np, size, peer)
            self.rbuf[: nslots * stride].set(image.ravel())
            self.mem.sync()
        return [self.rbuf[i * stride : i * stride + size] for i in range(nslots)]

    def count_wrong(self, slots, size: int, peer: int, used: int) -> int:
        if size == 0:
            return 0
        expected = fill_pattern(self.np, size, peer)
        return int(sum(int(self.np.count_nonzero(v.get() != expected)) for v in slots[:used]))


# ---------------------------------------------------------------- between ranks 0 and 1


def pair_sync(MPI, comm, bufs: HostBuffers, rank: int) -> None:
    """A barrier between ranks 0 and 1 only (the other ranks wait elsewhere)."""
    empty = [bufs.empty, MPI.BYTE]
    if rank == 0:
        comm.Send(empty, 1, _TAG_SYNC)
        comm.Recv(empty, 1, _TAG_SYNC)
    else:
        comm.Recv(empty, 0, _TAG_SYNC)
        comm.Send(empty, 0, _TAG_SYNC)


def sum_wrong(MPI, comm, np, rank: int, wrong: int) -> int:
    """Rank 1 reports its count of wrong bytes to rank 0; rank 0 returns the sum."""
    cell = np.zeros(1, dtype=np.int64)
    if rank == 1:
        cell[0] = wrong
        comm.Send([cell.view(np.uint8), MPI.BYTE], 0, _TAG_CHECK)
        return wrong
    comm.Recv([cell.view(np.uint8), MPI.BYTE], 1, _TAG_CHECK)
    return wrong + int(cell[0])


def pair_devices(MPI, comm, device: int) -> list[int] | None:
    """Tell rank 0 which devices ranks 0 and 1 use (for the table header).

    Collective over ranks 0 and 1 of ``comm`` (other ranks return None at once).

    Args:
        MPI: the MPI module.
        comm: a communicator of at least 2 ranks.
        device: this rank's device number.

    Returns:
        ``[device of rank 0, device of rank 1]`` on rank 0, None elsewhere.
    """
    import numpy as np

    rank = comm.Get_rank()
    cell = np.full(1, int(device), dtype=np.int64)
    if rank == 1:
        comm.Send([cell.view(np.uint8), MPI.BYTE], 0, _TAG_CHECK)
    elif rank == 0:
        comm.Recv([cell.view(np.uint8), MPI.BYTE], 1, _TAG_CHECK)
        return [int(device), int(cell[0])]
    return None
