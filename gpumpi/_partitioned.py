"""Partitioned point-to-point: Psend_init/Precv_init requests (MPI-4 partitioned communication) (L5).

Theory of operation
===================
Each partition travels as its own message on the communicator's partitioned context
(``ctx + 2``), prefixed with its index, so partitions may be marked ready in any order
and land in place on arrival.  A started request is a joint operation (``request.joint``)
that completes when every partition has been sent or received.  Partitioned buffers are
contiguous host memory.
"""

from __future__ import annotations

import struct

from . import _p2p
from . import _runtime as _rt
from .errors import ERR_ARG, ERR_COUNT, ERR_REQUEST, error
from .request import Prequest, joint, part_done

STANDARD = _p2p.STANDARD
_PART_IDX = struct.Struct("<Q")


def _index(v, call: str, what: str) -> int:
    if type(v) is int:
        return v
    try:
        return v.__index__()
    except AttributeError:
        raise TypeError(f"{call}: {what} must be an integer ({type(v).__name__})") from None


def partitions_of(partitions, call: str) -> int:
    p = _index(partitions, call, "partitions")
    if p < 1:
        raise error(ERR_COUNT, f"{call}: partitions must be at least 1 ({p})")
    return p


class PartRequest(Prequest):
    """Partitioned request: Pready/Pready_range/Pready_list on the sender, Parrived on the receiver.

    Each partition travels as its own message on the communicator's partitioned
    context, prefixed with its index, so partitions may be marked ready in any order.
    """

    __slots__ = ("_mem", "_nparts", "_send", "_peer", "_ptag", "_ready", "_arrived", "_joint", "_psize")

    @classmethod
    def _make(cls, mem, partitions, comm, buf, send: bool, peer=None, tag=0, start=None):
        r = cls.__new__(cls)
        r._x = None
        r._comm, r._post, r._keep, r._value = comm, None, buf, None
        r._inactive_x = None
        r._mem, r._nparts, r._send, r._peer, r._ptag = mem, partitions, send, peer, tag
        r._psize = 0 if mem is None else len(mem) // partitions
        r._ready = r._arrived = None
        r._joint = None
        r._start = start if start is not None else r._begin
        return r

    def _begin(self):
        comm = self._comm
        eng = _rt.ENGINE
        n = self._nparts
        j = joint(n)
        j.st_source, j.st_tag = (comm._rank, self._ptag) if self._send else (self._peer, self._ptag)
        self._joint = j
        if self._send:
            self._ready = [False] * n
            return j
        self._arrived = [False] * n
        ps = self._psize
        wpeer = comm._w[self._peer]
        for _ in range(n):
            x = eng.irecv(None, 0, self._peer, wpeer, self._ptag, comm._ctx + 2, "Precv_init")

            def got(xx, self=self, j=j, ps=ps):
                if not xx.err:
                    (i,) = _PART_IDX.unpack_from(xx.mem, 0)
                    self._mem[i * ps : (i + 1) * ps] = memoryview(xx.mem)[8 : 8 + ps]
                    self._arrived[i] = True
                part_done(j, xx)
                j.st_source, j.st_tag, j.st_nbytes = self._peer, self._ptag, len(self._mem)

            if x.done:
                got(x)
            else:
                x.on_done = got
        return j

    def _active_part(self, call: str):
        if self._x is None or self._joint is None:
            raise error(ERR_REQUEST, f"{call}: partitioned request is not active (call Start first)")

    def Pready(self, partition: int) -> None:
        """Mark one send partition ready (MPI_Pready)."""
        self._pready([partition], "Prequest.Pready")

    def Pready_range(self, partition_low: int, partition_high: int) -> None:
        """Mark partitions low..high (inclusive) ready (MPI_Pready_range)."""
        call = "Prequest.Pready_range"
        low, high = _index(partition_low, call, "partition_low"), _index(partition_high, call, "partition_high")
        if low > high:
            raise error(ERR_ARG, f"{call}: empty range (partition_low {low} > partition_high {high})")
        self._pready(range(low, high + 1), call)

    def Pready_list(self, partitions) -> None:
        """Mark the listed partitions ready (MPI_Pready_list)."""
        call = "Prequest.Pready_list"
        try:
            parts = list(partitions)
        except TypeError:
            raise TypeError(f"{call}: expected a sequence of partitions ({type(partitions).__name__})") from None
        self._pready(parts, call)

    def _pready(self, parts, call: str) -> None:
        if not self._send:
            raise error(ERR_REQUEST, f"{call}: not a partitioned send request")
        if self._mem is None:  # PROC_NULL
            return
        self._active_part(call)
        comm = self._comm
        eng = _rt.ENGINE
        ps = self._psize
        parts = [_index(p, call, "partition") for p in parts]
        seen = set()
        for p in parts:  # every partition is checked before any leaves
            if not 0 <= p < self._nparts:
                raise error(ERR_ARG, f"{call}: partition out of range ({p}, partitions {self._nparts})")
            if self._ready[p] or p in seen:
                raise error(ERR_ARG, f"{call}: partition already marked ready ({p})")
            seen.add(p)
        for p in parts:
            self._ready[p] = True
            bufs = [memoryview(_PART_IDX.pack(p)), self._mem[p * ps : (p + 1) * ps]]
            x = eng.isend(bufs, 8 + ps, comm._w[self._peer], comm._rank, self._ptag, comm._ctx + 2, STANDARD, call)
            j = self._joint
            if x.done:
                part_done(j, x)
            else:
                x.on_done = lambda xx, j=j: part_done(j, xx)

    def Parrived(self, partition: int) -> bool:
        """Whether a receive partition has arrived (MPI_Parrived)."""
        call = "Prequest.Parrived"
        if self._send:
            raise error(ERR_REQUEST, f"{call}: not a partitioned receive request")
        p = _index(partition, call, "partition")
        if not 0 <= p < self._nparts:
            raise error(ERR_ARG, f"{call}: partition out of range ({p}, partitions {self._nparts})")
        if self._mem is None:
            return True
        self._active_part(call)
        if not self._arrived[p]:
            eng = _rt.ENGINE
            with eng.lock:
                eng.progress()
        return self._arrived[p]

