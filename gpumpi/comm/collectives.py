"""Collective communication of ``Comm`` (L5): buffer collectives in their blocking,
nonblocking and persistent forms, and the lowercase object collectives.

Theory of operation
===================
Every collective is a schedule (``gpumpi.collectives``): ``_calls`` validates and
prepares the call, and one executor (``collectives._execute``) runs it blocking,
nonblocking or persistent.  Small calls in a tight loop (``Barrier``, ``Bcast``,
``Reduce``, ``Allreduce`` of plain arrays) first try the compiled path of
``collectives._lean``.  On an intercommunicator the inter form of the same parser runs
(``_calls.INTER``); object collectives run ``collectives._lower``.
"""

from __future__ import annotations



from .. import _commctx
from ..collectives import _calls
from ..collectives import _execute as _coll_exec
from ..collectives import _lean
from ..collectives import _lower
from .. import _p2p
from ..errors import (
    ERR_ROOT,
    error,
)
from ..errors import Exception as MPIException
from ..op import SUM, Op
from ..request import Prequest, Request

from .common import info_arg

STANDARD, SYNCHRONOUS, READY, BUFFERED = _p2p.STANDARD, _p2p.SYNCHRONOUS, _p2p.READY, _p2p.BUFFERED
_msg = _p2p.msg

__all__ = ["Collectives"]


class Collectives:
    """Collective communication of ``Comm`` (L5): buffer collectives in their blocking,"""

    __slots__ = ()

    # --- collectives (schedules in gpumpi.collectives, one executor for all three forms) -------
    def _root(self, root, call: str) -> int:
        if type(root) is not int:
            try:
                root = root.__index__()
            except AttributeError:
                raise TypeError(f"{call}: root must be an integer ({type(root).__name__})") from None
        if not 0 <= root < self._size:
            raise error(ERR_ROOT, f"{call}: invalid root ({root}, communicator size {self._size})")
        return root

    def _coll_prep(self, prep, call: str, args, stream=None):
        """Validate and prepare a collective call (its tag is taken once the arguments are
        valid: a rank whose arguments fail has not entered the collective, as in MPI)."""
        self._check(call)
        if self._inter:  # the inter form of the same parser (mpi4py's inter branches)
            prep = _calls.INTER[prep.__name__]
        c = prep(self, *args, call)
        if stream is not None:
            _coll_exec.set_stream(c, stream, call)
        return c

    def _coll_block(self, prep, call: str, *args, stream=None) -> None:
        try:
            _coll_exec.wait(self._coll_prep(prep, call, args, stream))
        except MPIException as e:
            self._raise(e)

    def _coll_req(self, prep, call: str, *args, stream=None) -> Request:
        try:
            c = self._coll_prep(prep, call, args, stream)
            return Request._of(_coll_exec.start(c), self, None, c)
        except MPIException as e:
            self._raise(e)

    def _coll_init(self, prep, call: str, *args, info=None, stream=None) -> Prequest:
        try:
            info_arg(info, call)
            c = self._coll_prep(prep, call, args, stream)
            return Prequest._persistent(lambda c=c: _coll_exec.start(c), self, c)
        except MPIException as e:
            self._raise(e)

    def Barrier(self) -> None:
        """Barrier synchronization (MPI_Barrier)."""
        if _lean.ENABLED and not self._inter:  # small calls in a tight loop (collectives._lean)
            try:
                if _lean.barrier(self):
                    return
            except MPIException as e:
                self._raise(e)
                return
        return self._coll_block(_calls.barrier, "Barrier")

    def Bcast(self, buf, root: int = 0, *, stream=None) -> None:
        """Broadcast data from one process to all others (MPI_Bcast)."""
        if stream is None and _lean.ENABLED and not self._inter:
            try:
                if _lean.bcast(self, buf, root):
                    return
            except MPIException as e:
                self._raise(e)
                return
        return self._coll_block(_calls.bcast, "Bcast", buf, root, stream=stream)

    def Gather(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> None:
        """Gather data to one process from all processes (MPI_Gather)."""
        return self._coll_block(_calls.gather, "Gather", False, sendbuf, recvbuf, root, stream=stream)

    def Gatherv(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> None:
        """Gather varying amounts of data to one process (MPI_Gatherv)."""
        return self._coll_block(_calls.gather, "Gatherv", True, sendbuf, recvbuf, root, stream=stream)

    def Scatter(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> None:
        """Scatter data from one process to all processes (MPI_Scatter)."""
        return self._coll_block(_calls.scatter, "Scatter", False, sendbuf, recvbuf, root, stream=stream)

    def Scatterv(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> None:
        """Scatter varying amounts of data from one process (MPI_Scatterv)."""
        return self._coll_block(_calls.scatter, "Scatterv", True, sendbuf, recvbuf, root, stream=stream)

    def Allgather(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Gather data from all processes to all processes (MPI_Allgather)."""
        if stream is None and _lean.ENABLED and not self._inter:
            try:
                if _lean.allgather(self, sendbuf, recvbuf):
                    return
            except MPIException as e:
                self._raise(e)
                return
        return self._coll_block(_calls.allgather, "Allgather", False, sendbuf, recvbuf, stream=stream)

    def Allgatherv(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Gather varying amounts of data from all processes to all (MPI_Allgatherv)."""
        return self._coll_block(_calls.allgather, "Allgatherv", True, sendbuf, recvbuf, stream=stream)

    def Alltoall(self, sendbuf, recvbuf, *, stream=None) -> None:
        """All-to-all scatter/gather (MPI_Alltoall)."""
        if stream is None and _lean.ENABLED and not self._inter:
            try:
                if _lean.alltoall(self, sendbuf, recvbuf):
                    return
            except MPIException as e:
                self._raise(e)
                return
        return self._coll_block(_calls.alltoall, "Alltoall", False, sendbuf, recvbuf, stream=stream)

    def Alltoallv(self, sendbuf, recvbuf, *, stream=None) -> None:
        """All-to-all with varying counts and displacements (MPI_Alltoallv)."""
        return self._coll_block(_calls.alltoall, "Alltoallv", True, sendbuf, recvbuf, stream=stream)

    def Alltoallw(self, sendbuf, recvbuf, *, stream=None) -> None:
        """All-to-all with varying counts, byte displacements and datatypes (MPI_Alltoallw)."""
        return self._coll_block(_calls.alltoallw, "Alltoallw", sendbuf, recvbuf, stream=stream)

    def Reduce(self, sendbuf, recvbuf, op: Op = SUM, root: int = 0, *, stream=None) -> None:
        """Reduce to root (MPI_Reduce)."""
        if stream is None and _lean.ENABLED and not self._inter:
            try:
                if _lean.reduce(self, sendbuf, recvbuf, op, root):
                    return
            except MPIException as e:
                self._raise(e)
                return
        return self._coll_block(_calls.reduce, "Reduce", sendbuf, recvbuf, op, root, stream=stream)

    def Allreduce(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> None:
        """Reduce to all processes (MPI_Allreduce)."""
        if stream is None and _lean.ENABLED and not self._inter:
            try:
                if _lean.allreduce(self, sendbuf, recvbuf, op):
                    return
            except MPIException as e:
                self._raise(e)
                return
        return self._coll_block(_calls.allreduce, "Allreduce", sendbuf, recvbuf, op, stream=stream)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> None:
        """Reduce, then scatter equal blocks of the result (MPI_Reduce_scatter_block)."""
        return self._coll_block(_calls.reduce_scatter_block, "Reduce_scatter_block", sendbuf, recvbuf, op, stream=stream)

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op: Op = SUM, *, stream=None) -> None:
        """Reduce, then scatter blocks of the result by counts (MPI_Reduce_scatter)."""
        return self._coll_block(_calls.reduce_scatter, "Reduce_scatter", sendbuf, recvbuf, recvcounts, op, stream=stream)

    def Ibarrier(self) -> Request:
        """Nonblocking barrier synchronization (MPI_Ibarrier)."""
        return self._coll_req(_calls.barrier, "Ibarrier")

    def Ibcast(self, buf, root: int = 0, *, stream=None) -> Request:
        """Nonblocking broadcast data from one process to all others (MPI_Ibcast)."""
        return self._coll_req(_calls.bcast, "Ibcast", buf, root, stream=stream)

    def Igather(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> Request:
        """Nonblocking gather data to one process from all processes (MPI_Igather)."""
        return self._coll_req(_calls.gather, "Igather", False, sendbuf, recvbuf, root, stream=stream)

    def Igatherv(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> Request:
        """Nonblocking gather varying amounts of data to one process (MPI_Igatherv)."""
        return self._coll_req(_calls.gather, "Igatherv", True, sendbuf, recvbuf, root, stream=stream)

    def Iscatter(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> Request:
        """Nonblocking scatter data from one process to all processes (MPI_Iscatter)."""
        return self._coll_req(_calls.scatter, "Iscatter", False, sendbuf, recvbuf, root, stream=stream)

    def Iscatterv(self, sendbuf, recvbuf, root: int = 0, *, stream=None) -> Request:
        """Nonblocking scatter varying amounts of data from one process (MPI_Iscatterv)."""
        return self._coll_req(_calls.scatter, "Iscatterv", True, sendbuf, recvbuf, root, stream=stream)

    def Iallgather(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking gather data from all processes to all processes (MPI_Iallgather)."""
        return self._coll_req(_calls.allgather, "Iallgather", False, sendbuf, recvbuf, stream=stream)

    def Iallgatherv(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking gather varying amounts of data from all processes to all (MPI_Iallgatherv)."""
        return self._coll_req(_calls.allgather, "Iallgatherv", True, sendbuf, recvbuf, stream=stream)

    def Ialltoall(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking all-to-all scatter/gather (MPI_Ialltoall)."""
        return self._coll_req(_calls.alltoall, "Ialltoall", False, sendbuf, recvbuf, stream=stream)

    def Ialltoallv(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking all-to-all with varying counts and displacements (MPI_Ialltoallv)."""
        return self._coll_req(_calls.alltoall, "Ialltoallv", True, sendbuf, recvbuf, stream=stream)

    def Ialltoallw(self, sendbuf, recvbuf, *, stream=None) -> Request:
        """Nonblocking all-to-all with varying counts, byte displacements and datatypes (MPI_Ialltoallw)."""
        return self._coll_req(_calls.alltoallw, "Ialltoallw", sendbuf, recvbuf, stream=stream)

    def Ireduce(self, sendbuf, recvbuf, op: Op = SUM, root: int = 0, *, stream=None) -> Request:
        """Nonblocking reduce to root (MPI_Ireduce)."""
        return self._coll_req(_calls.reduce, "Ireduce", sendbuf, recvbuf, op, root, stream=stream)

    def Iallreduce(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> Request:
        """Nonblocking reduce to all processes (MPI_Iallreduce)."""
        return self._coll_req(_calls.allreduce, "Iallreduce", sendbuf, recvbuf, op, stream=stream)

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op: Op = SUM, *, stream=None) -> Request:
        """Nonblocking reduce, then scatter equal blocks of the result (MPI_Ireduce_scatter_block)."""
        return self._coll_req(_calls.reduce_scatter_block, "Ireduce_scatter_block", sendbuf, recvbuf, op, stream=stream)

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op: Op = SUM, *, stream=None) -> Request:
        """Nonblocking reduce, then scatter blocks of the result by counts (MPI_Ireduce_scatter)."""
        return self._coll_req(_calls.reduce_scatter, "Ireduce_scatter", sendbuf, recvbuf, recvcounts, op, stream=stream)

    def Barrier_init(self, info=None) -> Prequest:
        """Persistent barrier synchronization (MPI_Barrier_init)."""
        return self._coll_init(_calls.barrier, "Barrier_init", info=info)

    def Bcast_init(self, buf, root: int = 0, info=None, *, stream=None) -> Prequest:
        """Persistent broadcast data from one process to all others (MPI_Bcast_init)."""
        return self._coll_init(_calls.bcast, "Bcast_init", buf, root, info=info, stream=stream)

    def Gather_init(self, sendbuf, recvbuf, root: int = 0, info=None, *, stream=None) -> Prequest:
        """Persistent gather data to one process from all processes (MPI_Gather_init)."""
        return self._coll_init(_calls.gather, "Gather_init", False, sendbuf, recvbuf, root, info=info, stream=stream)

    def Gatherv_init(self, sendbuf, recvbuf, root: int = 0, info=None, *, stream=None) -> Prequest:
        """Persistent gather varying amounts of data to one process (MPI_Gatherv_init)."""
        return self._coll_init(_calls.gather, "Gatherv_init", True, sendbuf, recvbuf, root, info=info, stream=stream)

    def Scatter_init(self, sendbuf, recvbuf, root: int = 0, info=None, *, stream=None) -> Prequest:
        """Persistent scatter data from one process to all processes (MPI_Scatter_init)."""
        return self._coll_init(_calls.scatter, "Scatter_init", False, sendbuf, recvbuf, root, info=info, stream=stream)

    def Scatterv_init(self, sendbuf, recvbuf, root: int = 0, info=None, *, stream=None) -> Prequest:
        """Persistent scatter varying amounts of data from one process (MPI_Scatterv_init)."""
        return self._coll_init(_calls.scatter, "Scatterv_init", True, sendbuf, recvbuf, root, info=info, stream=stream)

    def Allgather_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent gather data from all processes to all processes (MPI_Allgather_init)."""
        return self._coll_init(_calls.allgather, "Allgather_init", False, sendbuf, recvbuf, info=info, stream=stream)

    def Allgatherv_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent gather varying amounts of data from all processes to all (MPI_Allgatherv_init)."""
        return self._coll_init(_calls.allgather, "Allgatherv_init", True, sendbuf, recvbuf, info=info, stream=stream)

    def Alltoall_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent all-to-all scatter/gather (MPI_Alltoall_init)."""
        return self._coll_init(_calls.alltoall, "Alltoall_init", False, sendbuf, recvbuf, info=info, stream=stream)

    def Alltoallv_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent all-to-all with varying counts and displacements (MPI_Alltoallv_init)."""
        return self._coll_init(_calls.alltoall, "Alltoallv_init", True, sendbuf, recvbuf, info=info, stream=stream)

    def Alltoallw_init(self, sendbuf, recvbuf, info=None, *, stream=None) -> Prequest:
        """Persistent all-to-all with varying counts, byte displacements and datatypes (MPI_Alltoallw_init)."""
        return self._coll_init(_calls.alltoallw, "Alltoallw_init", sendbuf, recvbuf, info=info, stream=stream)

    def Reduce_init(self, sendbuf, recvbuf, op: Op = SUM, root: int = 0, info=None, *, stream=None) -> Prequest:
        """Persistent reduce to root (MPI_Reduce_init)."""
        return self._coll_init(_calls.reduce, "Reduce_init", sendbuf, recvbuf, op, root, info=info, stream=stream)

    def Allreduce_init(self, sendbuf, recvbuf, op: Op = SUM, info=None, *, stream=None) -> Prequest:
        """Persistent reduce to all processes (MPI_Allreduce_init)."""
        return self._coll_init(_calls.allreduce, "Allreduce_init", sendbuf, recvbuf, op, info=info, stream=stream)

    def Reduce_scatter_block_init(self, sendbuf, recvbuf, op: Op = SUM, info=None, *, stream=None) -> Prequest:
        """Persistent reduce, then scatter equal blocks of the result (MPI_Reduce_scatter_block_init)."""
        return self._coll_init(_calls.reduce_scatter_block, "Reduce_scatter_block_init", sendbuf, recvbuf, op, info=info, stream=stream)

    def Reduce_scatter_init(self, sendbuf, recvbuf, recvcounts=None, op: Op = SUM, info=None, *, stream=None) -> Prequest:
        """Persistent reduce, then scatter blocks of the result by counts (MPI_Reduce_scatter_init)."""
        return self._coll_init(_calls.reduce_scatter, "Reduce_scatter_init", sendbuf, recvbuf, recvcounts, op, info=info, stream=stream)

    # --- lowercase (object) collectives: gpumpi.collectives._lower --------------------------
    def _ocoll(self, fn, call: str, *args):
        try:
            self._check(call)
            if self._inter:  # MPICH's inter algorithms on objects (_lower.INTER)
                fn = _lower.INTER[call]
                if call == "bcast":
                    with _commctx.lock(self, "bcast"):
                        return fn(self, *args, call)
            return fn(self, *args, call)
        except MPIException as e:
            self._raise(e)

    def barrier(self) -> None:
        """Barrier synchronization (MPI_Barrier; same as Barrier)."""
        self.Barrier()

    def bcast(self, obj=None, root: int = 0):
        """Broadcast a Python object from root (MPI_Bcast of its pickle)."""
        def bcast(c, o, r, call):
            with _commctx.lock(c, "bcast"):  # as mpi4py: threads sharing the communicator take turns
                return _lower.bcast(c, o, r, call)

        return self._ocoll(bcast, "bcast", obj, root)

    def gather(self, sendobj, root: int = 0):
        """Gather Python objects to root, a list in rank order there (MPI_Gather of pickles)."""
        return self._ocoll(_lower.gather, "gather", sendobj, root)

    def scatter(self, sendobj, root: int = 0):
        """Scatter a sequence of Python objects from root (MPI_Scatter of pickles)."""
        return self._ocoll(_lower.scatter, "scatter", sendobj, root)

    def allgather(self, sendobj):
        """Gather Python objects from all, a list in rank order on every rank (MPI_Allgather of pickles)."""
        return self._ocoll(_lower.allgather, "allgather", sendobj)

    def alltoall(self, sendobj):
        """Send item ``j`` of a sequence to rank ``j``, receive one from each (MPI_Alltoall of pickles)."""
        return self._ocoll(_lower.alltoall, "alltoall", sendobj)

    def reduce(self, sendobj, op=SUM, root: int = 0):
        """Reduce Python objects to root with ``op`` (an Op or a callable), in rank order (MPI_Reduce)."""
        return self._ocoll(_lower.reduce, "reduce", sendobj, op, root)

    def allreduce(self, sendobj, op=SUM):
        """Reduce Python objects to all with ``op`` (an Op or a callable), in rank order (MPI_Allreduce)."""
        return self._ocoll(_lower.allreduce, "allreduce", sendobj, op)


_lean.compiled_methods(Collectives, ("Barrier", "Bcast", "Allreduce", "Reduce"))
