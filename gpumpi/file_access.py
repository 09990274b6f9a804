"""MPI-IO's accesses (L5): a ``File``'s data stream bytes to or from a buffer.

Theory of operation
===================
Every access of ``gpumpi.file.File`` comes here as *this process's data stream bytes
``[pos, pos + n)`` of its view, to or from a buffer* (:func:`access`).  The view
(``gpumpi.io.view``) turns the range into file pieces; ``gpumpi.io.posix`` reads or writes
them.  The buffer side is the message path's own (``_p2p.outgoing``/``incoming``); a
contiguous device buffer moves in staged chunks (:func:`device_access`); ``external32``
converts the packed stream (:func:`codec`).  Collective calls go through :func:`collective`,
which decides with one ``Allgather`` whether the processes' pieces go two-phase
(``gpumpi.io.collective``) or each process makes its own :func:`access`.
"""

from __future__ import annotations

from . import _device, _p2p, _pool
from .datatypes.plan import external_plan
from .datatypes.predefined import INT64_T
from .errors import ERR_ACCESS, ERR_ARG, ERR_OTHER, ERR_TYPE, error
from .constants import MODE_RDONLY, MODE_WRONLY
from .io import collective as _two_phase
from .io import posix
from .io import twophase
from .io import view as _view

__all__ = ["CB_PIECES", "CB_SMALL", "CHUNK", "access", "codec", "collective", "device_access", "int_hint",
           "readable", "writable"]

#: pieces of one process from which an interleaved collective access goes two-phase ("automatic")
CB_PIECES = 64
#: the mean piece (bytes) under which an interleaved collective access goes two-phase ("automatic"):
#: larger pieces are written and read faster by each process itself (measured: 16 KiB pieces of
#: column blocks, 2 ranks, 256 MiB: independent 4.4-4.5 GB/s, two-phase 2.2-3.0)
CB_SMALL = 4096
#: bytes of device memory staged through the host per copy
CHUNK = 8 << 20


class _Landed:
    """What ``_p2p.incoming``'s completion reads of a finished receive: the bytes that arrived."""

    __slots__ = ("st_nbytes", "cancelled", "ondev")

    def __init__(self, n: int) -> None:
        self.st_nbytes, self.cancelled, self.ondev = n, False, False


def int_hint(value, default: int) -> int:
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return default


def codec(v: _view.View, m, call: str):
    """The external32 plan of message ``m``'s datatype under view ``v``, or None (native)."""
    if v.datarep != "external32" or m is None:
        return None
    ep = external_plan(m.datatype)
    if ep.esize != m.datatype._size:
        raise NotImplementedError(f"{call}: external32 with types whose external32 size differs from the native "
                                  f"one ({m.datatype!r}: {ep.esize} vs {m.datatype._size} bytes) is not supported")
    return ep


def readable(st, call: str) -> None:
    if st.amode & MODE_WRONLY:
        raise error(ERR_ACCESS, f"{call}: the file was opened MODE_WRONLY ({st.path})")


def writable(st, call: str) -> None:
    if st.amode & MODE_RDONLY:
        raise error(ERR_ACCESS, f"{call}: the file was opened MODE_RDONLY ({st.path})")


def access(st, buf, pos: int, write: bool, call: str) -> int:
    """Move ``buf`` to or from the view's data stream from etype ``pos``: the bytes moved."""
    if pos < 0:
        raise error(ERR_ARG, f"{call}: negative offset ({pos})")
    if write:
        writable(st, call)
    else:
        readable(st, call)
    m = _p2p.msg(buf, write, 0, call)
    v = st.view
    n = m.nbytes
    if n % v.esize:
        raise error(ERR_TYPE, f"{call}: the buffer's {n} bytes are not a whole number of etypes "
                              f"(etype size {v.esize})")
    if not n:
        return 0
    ep = codec(v, m, call)
    if ep is None and m.contiguous and _p2p.on_device(m):  # device memory: in staged chunks
        return device_access(st, m, pos * v.esize, write, call)
    pieces = v.pieces(pos * v.esize, n)
    if write:
        mem, _, release = _p2p.outgoing(m, call)
        try:
            if ep is not None:
                import numpy as np

                mem = memoryview(ep.encode(np.frombuffer(mem, np.uint8), m.count))
            if st.atomic:
                with posix.locked(st.fd, pieces, True, call):
                    return posix.write_at(st.fd, mem, pieces, call)
            return posix.write_at(st.fd, mem, pieces, call)
        finally:
            if release is not None:
                release()
    mem, _, post, _ = _p2p.incoming(m, call)
    got = 0
    try:
        if ep is not None:
            import numpy as np

            raw = np.zeros(n, np.uint8)
            got = _read(st, memoryview(raw), pieces, call)
            whole = got // m.datatype._size if m.datatype._size else 0
            if whole:
                mem[:whole * m.datatype._size] = ep.decode(raw[:whole * m.datatype._size], whole)
            got = whole * m.datatype._size
        else:
            got = _read(st, mem, pieces, call)
    finally:
        if post is not None:
            post(_Landed(got))
    return got

def collective(st, buf, pos: int, write: bool, call: str) -> int:
    """A collective access: two-phase (``gpumpi.io.collective``) where the processes' ranges
    interleave, one has at least :data:`CB_PIECES` pieces and they average under
    :data:`CB_SMALL` bytes (ROMIO's hints
    ``romio_cb_write``/``romio_cb_read``: ``enable``, ``disable``, ``automatic``: this test),
    every process's buffer is host memory and the view's data are native;
    else each process's own :func:`access`.  A process whose arguments fail tells the
    others (they raise too: nobody waits for it)."""
    err = m = offs = lens = None
    rng, able = None, False
    try:
        if pos < 0:
            raise error(ERR_ARG, f"{call}: negative offset ({pos})")
        (writable if write else readable)(st, call)
        m = _p2p.msg(buf, write, 0, call)
        v, n = st.view, m.nbytes
        if n % v.esize:
            raise error(ERR_TYPE, f"{call}: the buffer's {n} bytes are not a whole number of etypes "
                                  f"(etype size {v.esize})")
        able = v.datarep != "external32" and not _p2p.on_device(m) and not st.atomic
        if able and n:
            offs, lens = twophase.pieces(v, pos * v.esize, n)
            rng = (int(offs[0]), int(offs[-1] + lens[-1]))
    except Exception as e:  # noqa: BLE001 - shared with the others first, then raised here
        err = e
    import numpy as np

    mine = np.array([err is not None, able, -1 if rng is None else rng[0], -1 if rng is None else rng[1],
                     0 if offs is None else len(offs), 0 if offs is None else int(lens.sum())], np.int64)
    every = np.empty((st.comm.Get_size(), 6), np.int64)
    st.comm.Allgather([mine, 6, INT64_T], [every, 6, INT64_T])
    if err is not None:
        raise err
    if every[:, 0].any():
        raise error(ERR_OTHER, f"{call}: the arguments of another process of the file failed")
    hint = st.hints.get("romio_cb_write" if write else "romio_cb_read", "automatic")
    ranges = [None if lo < 0 else (int(lo), int(hi)) for lo, hi in every[:, 2:4].tolist()]
    if not every[:, 1].all() or hint == "disable" or all(r is None for r in ranges) or \
            (hint != "enable" and (every[:, 4].max() < CB_PIECES or every[:, 5].sum() >= CB_SMALL * every[:, 4].sum()
                                   or not twophase.interleaved(ranges))):
        return access(st, buf, pos, write, call)

    naggr = int_hint(st.hints.get("cb_nodes"), st.comm.Get_size())
    if offs is None:
        offs = lens = np.zeros(0, np.int64)
    if write:
        mem, _, release = _p2p.outgoing(m, call)
        try:
            return _two_phase.write(st.comm, st.fd, np.frombuffer(mem, np.uint8), offs, lens, ranges, naggr, call)
        finally:
            if release is not None:
                release()
    mem, _, post, _ = _p2p.incoming(m, call)
    got = 0
    try:
        got = _two_phase.read(st.comm, st.fd, np.frombuffer(mem, np.uint8), offs, lens, ranges, naggr, call)
    finally:
        if post is not None:
            post(_Landed(got))
    return got

def device_access(st, m, p: int, write: bool, call: str) -> int:
    """A contiguous device buffer to or from stream bytes ``[p, p + m.nbytes)``, through one
    host staging buffer of at most :data:`CHUNK` bytes a copy (never the whole array on the
    host), each copy ordered after the work queued on the device's current stream."""
    v, n = st.view, m.nbytes
    ad = _device.adapter_for(m.kind)
    s = ad.current_stream()
    stage = _pool.HOST.get(min(CHUNK, n))
    base = m.addr + m.lo
    done = 0
    lock = posix.locked(st.fd, v.pieces(p, n), write, call) if st.atomic else None
    try:
        if lock is not None:
            lock.__enter__()
        while done < n:
            k = min(CHUNK, n - done)
            pieces = v.pieces(p + done, k)
            mv = memoryview(stage)[:k]
            if write:
                ad.memcpy(stage.ctypes.data, base + done, k, s)
                ad.stream_synchronize(s)
                done += posix.write_at(st.fd, mv, pieces, call)
                continue
            got = posix.read_sieved(st.fd, mv, pieces, call)
            if got:
                ad.memcpy(base + done, stage.ctypes.data, got, s)
                ad.stream_synchronize(s)
            done += got
            if got < k:  # the end of the file
                break
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)
        _pool.HOST.put(stage)
    return done

def _read(st, mem, pieces, call: str) -> int:
    if st.atomic:
        with posix.locked(st.fd, pieces, False, call):
            return posix.read_sieved(st.fd, mem, pieces, call)
    return posix.read_sieved(st.fd, mem, pieces, call)
