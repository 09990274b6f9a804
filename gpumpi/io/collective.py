"""Two-phase collective reads and writes (L2): the exchange and the aggregators' accesses.

Theory of operation
===================
Every process of the file's communicator calls :func:`write` or :func:`read` with its pieces
(``offs``/``lens``, int64, in stream order, which is file order) and its packed data stream
(``data``, bytes).  The plan is ``gpumpi.io.twophase``'s: ``naggr`` aggregators (ranks spread
over the communicator) each own one contiguous domain of ``[lo, hi)``, the union of all
ranges.  Because a process's pieces are in file order, what it exchanges with aggregator
``a`` is one contiguous slice of its stream, so the data moves with one ``Alltoallv`` on the
stream itself (no packing), after one ``Alltoall`` of counts and one ``Alltoallv`` of the
pieces' offsets and lengths.

Write: an aggregator places what it received in a buffer spanning its received pieces
(slice copies for long pieces, one scattered index for many short ones) and writes the
merged runs, so holes in between keep what the file had.  Read: an aggregator reads the
merged runs of the pieces asked of it (the whole span at once where it is dense), gathers
each asker's bytes in its order and sends them back with one ``Alltoallv``; bytes past the end
of the file come back as zeros and the asker counts only what lies before it.

The communicator is the caller's (``comm``: mpi4py's API); nothing here imports the engine.
"""

from __future__ import annotations

import numpy as np

from ..datatypes.predefined import BYTE, INT64_T
from . import posix
from . import twophase as T

__all__ = ["aggregators", "read", "write"]

_I8 = np.int64
_SLICES = 256  # mean piece length (bytes) from which pieces are copied one slice each


def aggregators(size: int, naggr: int) -> list:
    """The ranks of ``naggr`` aggregators spread over ``size`` ranks."""
    naggr = max(1, min(size, naggr))
    return [a * size // naggr for a in range(naggr)]


def _exchange_pieces(comm, offs, lens, ranges, naggr: int):
    """The plan's exchange of pieces: bytes this rank sends to and receives from each rank, the
    pieces it aggregates (offsets, lengths: by sender, in order) and their count per sender,
    and its own pieces cut at the domains ``(offs, lens, aggregator rank)``."""
    size = comm.Get_size()
    lo = min(r[0] for r in ranges if r is not None)
    hi = max(r[1] for r in ranges if r is not None)
    aggs = aggregators(size, naggr)
    bounds = T.domains(lo, hi, len(aggs))
    co, cl, dom = T.cut(offs, lens, bounds)
    npieces = np.zeros(size, _I8)
    nbytes = np.zeros(size, _I8)
    ranks = np.asarray(aggs, _I8)[dom] if len(dom) else np.zeros(0, _I8)
    np.add.at(npieces, ranks, 1)
    np.add.at(nbytes, ranks, cl)
    counts = np.zeros(2 * size, _I8)
    counts[0::2], counts[1::2] = npieces, nbytes
    got = np.zeros(2 * size, _I8)
    comm.Alltoall([counts, 2, INT64_T], [got, 2, INT64_T])
    rpieces, rbytes = got[0::2], got[1::2]
    meta = np.empty(2 * len(co), _I8)
    meta[0::2], meta[1::2] = co, cl
    rmeta = np.empty(2 * int(rpieces.sum()), _I8)
    sdispl = np.concatenate(([0], np.cumsum(2 * npieces)[:-1]))
    rdispl = np.concatenate(([0], np.cumsum(2 * rpieces)[:-1]))
    comm.Alltoallv([meta, (2 * npieces, sdispl), INT64_T], [rmeta, (2 * rpieces, rdispl), INT64_T])
    return nbytes, rbytes, rmeta[0::2].copy(), rmeta[1::2].copy(), rpieces, (co, cl, ranks)


def _displ(counts):
    return np.concatenate(([0], np.cumsum(counts)[:-1])).astype(_I8)


def write(comm, fd: int, data: np.ndarray, offs, lens, ranges, naggr: int, call: str) -> int:
    """Two-phase write of this rank's ``data`` (bytes, stream order) over its pieces; collective.
    Returns the bytes of ``data``."""
    sbytes, rbytes, ro, rl, _, _ = _exchange_pieces(comm, offs, lens, ranges, naggr)
    recv = np.empty(int(rbytes.sum()), np.uint8)
    comm.Alltoallv([data, (sbytes, _displ(sbytes)), BYTE], [recv, (rbytes, _displ(rbytes)), BYTE])
    if len(ro):
        dlo = int(ro.min())
        span = np.zeros(int((ro + rl).max()) - dlo, np.uint8)
        if len(recv) >= _SLICES * len(ro):
            pos = 0
            for o, n in zip(ro.tolist(), rl.tolist()):
                span[o - dlo:o - dlo + n] = recv[pos:pos + n]
                pos += n
        else:
            span[T.byte_index(ro, rl, dlo)] = recv
        mo, ml = T.merged(ro, rl)
        mv = memoryview(span)
        for o, n in zip(mo.tolist(), ml.tolist()):
            posix.write_at(fd, mv[o - dlo:o - dlo + n], [(o, n)], call)
    return int(data.nbytes)


def read(comm, fd: int, dest: np.ndarray, offs, lens, ranges, naggr: int, call: str) -> int:
    """Two-phase read of this rank's pieces into ``dest`` (bytes, stream order); collective.
    Returns the bytes read (those before the end of the file, up to the first piece it cuts)."""
    mine, _, ro, rl, rpieces, (co, cl, cranks) = _exchange_pieces(comm, offs, lens, ranges, naggr)
    eof = posix.size(fd, call)
    # bytes before the end of the file: a prefix in file order, so a prefix of each slice
    valid = np.minimum(rl, np.maximum(eof - ro, 0))
    sends = np.zeros(len(rpieces), _I8)  # to each asker, in its order
    np.add.at(sends, np.repeat(np.arange(len(rpieces)), rpieces), valid)
    out = np.zeros(int(valid.sum()), np.uint8)
    if len(ro) and len(out):
        ro, rl = ro[valid > 0], valid[valid > 0]
        dlo = int(ro.min())
        span = np.zeros(int((ro + rl).max()) - dlo, np.uint8)
        mo, ml = T.merged(ro, rl)
        mv = memoryview(span)
        if len(span) <= 4 * int(ml.sum()) + 65536:  # dense: the whole span at once
            posix.read_at(fd, mv, [(dlo, len(span))], call)
        else:
            for o, n in zip(mo.tolist(), ml.tolist()):
                posix.read_at(fd, mv[o - dlo:o - dlo + n], [(o, n)], call)
        if len(out) >= _SLICES * len(ro):
            pos = 0
            for o, n in zip(ro.tolist(), rl.tolist()):
                out[pos:pos + n] = span[o - dlo:o - dlo + n]
                pos += n
        else:
            out[:] = span[T.byte_index(ro, rl, dlo)]
    have = np.zeros(comm.Get_size(), _I8)  # what comes back from each aggregator
    np.add.at(have, cranks, np.minimum(cl, np.maximum(eof - co, 0)))
    comm.Alltoallv([out, (sends, _displ(sends)), BYTE], [dest, (have, _displ(mine)), BYTE])
    return int(have.sum())
