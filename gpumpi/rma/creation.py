"""Windows made and freed: ``Win``'s creation face, and what every reference to a window shares (L5).

Theory of operation
===================
``Win.Create`` (existing memory), ``Allocate`` (gpumpi's memory: a memfd mapped here, or device
memory), ``Allocate_shared`` (one segment for all members, in rank order) and
``Create_dynamic`` (memory attached later) are collective over the communicator (default
``COMM_SELF``).  Each checks its arguments, makes the :class:`State` every reference to the new
window shares, describes the memory this process exposes (:func:`_describe`: host memory with
the memfd :func:`gpumpi._memfd.find` finds for it, if any, or device memory with its adapter)
and hands that to the runtime, which has the transports expose it, exchanges the members'
descriptions and reaches every member's memory (:meth:`gpumpi.rma.local.Window.setup`).  A
communicator with members on several nodes (an MPI launcher's job; the engine's far ranks,
:func:`gpumpi._services.far_ranks`) gets the runtime across nodes,
:class:`gpumpi.rma.mpi.Window`, instead of the node's shared memory; a shared window cannot
span nodes.  ``Free`` (collective) deletes the attributes, waits at a barrier until every
member is done with every other member's memory, then releases the runtime and the private
communicator.  ``Attach``/``Detach`` publish a dynamic window's memory in its attach table.

The functions whose names are ``Win``'s methods (``Create``, ``Allocate``, ``Allocate_shared``,
``Create_dynamic``, ``Attach``, ``Detach``, ``Free``) are that: :class:`gpumpi.rma.win.Win` names
each in its body (the first four as classmethods), so they are ``Win``'s own attributes as
mpi4py's are (its docs walk and :func:`gpumpi._docs.embed_signatures` read ``vars(Win)``).
"""

from __future__ import annotations

import operator
import os

import numpy as np

from .. import _memfd, _services
from .._arrays import as_buffer
from ..constants import BOTTOM, WIN_FLAVOR_ALLOCATE, WIN_FLAVOR_CREATE, WIN_FLAVOR_DYNAMIC, WIN_FLAVOR_SHARED
from ..errors import ERR_ARG, ERR_COMM, ERR_DISP, ERR_RMA_FLAVOR, ERR_RMA_SHARED, ERR_SIZE, ERRORS_RETURN, error
from ..info import INFO_NULL, Info
from ..keyval import on_free
from .local import Window as LocalWindow

__all__ = ["State", "int_arg", "info_dict", "Create", "Allocate", "Allocate_shared", "Create_dynamic", "Attach",
           "Detach", "Free", "keep_memory"]


class State:
    """What every reference to one window shares (``h``: its handle value)."""

    __slots__ = ("h", "rt", "base", "size", "unit", "flavor", "name", "errh", "info", "attrs", "mem", "keep",
                 "freed", "ucomm", "near")

    def __init__(self, h: int) -> None:
        self.h = h
        self.rt = None
        self.base = self.size = 0
        self.unit = 1
        self.flavor = WIN_FLAVOR_CREATE
        self.name = ""
        self.errh = ERRORS_RETURN
        self.info = None
        self.attrs: dict = {}
        self.mem = None  # what tomemory() returns for device windows (an array of bytes)
        self.keep = None  # the exposed memory's owner, kept alive
        self.freed = False
        self.ucomm = None
        self.near: dict = {}  # the runtime's Window.near once made: the near path's targets


def int_arg(value, call: str, what: str) -> int:
    """``value`` as an int (``operator.index``); ``TypeError`` naming ``call`` and ``what`` otherwise."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{call}: {what} must be an integer ({type(value).__name__})") from None


def info_dict(info, call: str):
    """The hints of ``info`` as a dict (empty for ``INFO_NULL`` or None)."""
    if info is None or info is INFO_NULL:
        return {}
    if not isinstance(info, Info):
        raise TypeError(f"{call}: info must be an Info ({type(info).__name__})")
    return dict(info.items()) if info else {}


def _spans_nodes(comm) -> bool:
    """Whether ``comm`` has members on several nodes (an MPI launcher's job): such a window is
    carried by the MPI library's RMA (:mod:`gpumpi.rma.mpi`) instead of the node's shared memory."""
    far = _services.far_ranks()
    return bool(far and not far.isdisjoint(comm._rw))


def _comm_arg(comm, call: str):
    from ..comm import Comm, Intercomm

    if not isinstance(comm, Comm):
        raise TypeError(f"{call}: expecting an Intracomm (got {type(comm).__name__})")
    if comm._ctx < 0:
        raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
    if isinstance(comm, Intercomm) or comm._w != comm._rw:
        raise error(ERR_COMM, f"{call}: windows need an intracommunicator")
    return comm


def _self():
    from ..comm import Comm

    return Comm._htable.find(0x44000001)


def _make(cls, comm, flavor: int, local, st: State, call: str):
    """The new window of class ``cls``: its runtime made over a duplicate of ``comm`` and set up
    with ``local`` (this process's description, see :func:`_describe`)."""
    W = None
    dup = comm.Dup()
    try:
        if _spans_nodes(comm):
            from . import mpi

            W = mpi.Window(dup, flavor)
        else:
            W = LocalWindow(dup, flavor)
        W.setup(local, call)
    except BaseException:
        if W is not None:
            W.close()
        dup.Free()
        raise
    st.rt = W
    st.near = W.near
    st.flavor = flavor
    st.ucomm = comm
    w = cls.__new__(cls)
    w._st = st
    cls._htable.add(w)
    return w


def _unit(disp_unit, call: str) -> int:
    u = int_arg(disp_unit, call, "disp_unit")
    if u <= 0:
        raise error(ERR_DISP, f"{call}: disp_unit must be positive ({u})")
    return u


def Create(cls, memory, disp_unit: int = 1, info=INFO_NULL, comm=None) -> "Win":  # noqa: F821
    """Create a window of existing memory (MPI_Win_create): host or device memory, or
    ``BOTTOM``/None for none.  Collective over ``comm`` (default COMM_SELF)."""
    call = "Win.Create"
    comm = _comm_arg(_self() if comm is None else comm, call)
    unit = _unit(disp_unit, call)
    st = State(cls._htable.new())
    st.info = info_dict(info, call)
    st.unit = unit
    if memory is None or memory is BOTTOM:
        local = ("none", 0, unit, None)
    else:
        v = as_buffer(memory, False, call)
        st.base, st.size, st.keep = v.addr, v.nbytes, v.obj
        local = _describe(v, unit, call)
        if v.kind != "host":
            st.mem = _bytes_of(memory)
    return _make(cls, comm, WIN_FLAVOR_CREATE, local, st, call)


def Allocate(cls, size: int, disp_unit: int = 1, info=INFO_NULL, comm=None,
             memory: str | None = None) -> "Win":  # noqa: F821
    """Create a window of new memory (MPI_Win_allocate): shared host memory, or device memory
    with ``memory="device"`` (or the info key ``gpumpi_memory=device``); gpumpi extension."""
    return _allocate(cls, size, disp_unit, info, comm, memory, False, "Win.Allocate")


def Allocate_shared(cls, size: int, disp_unit: int = 1, info=INFO_NULL, comm=None) -> "Win":  # noqa: F821
    """Create a window of shared memory every member loads and stores directly
    (MPI_Win_allocate_shared): one contiguous segment, rank order; see :meth:`Shared_query`."""
    return _allocate(cls, size, disp_unit, info, comm, None, True, "Win.Allocate_shared")


def _allocate(cls, size, disp_unit, info, comm, memory, shared: bool, call: str):
    comm = _comm_arg(_self() if comm is None else comm, call)
    n = int_arg(size, call, "size")
    if n < 0:
        raise error(ERR_SIZE, f"{call}: negative size ({n})")
    unit = _unit(disp_unit, call)
    st = State(cls._htable.new())
    st.info = info_dict(info, call)
    st.unit = unit
    kind = memory if memory is not None else st.info.get("gpumpi_memory", "host")
    if kind not in ("host", "device"):
        raise ValueError(f"{call}: memory must be 'host' or 'device' ({kind!r})")
    if shared and kind != "host":
        raise error(ERR_ARG, f"{call}: shared windows are host memory")
    if shared and _spans_nodes(comm):
        nodes = sorted({_services.node_of(r) for r in comm._rw})
        raise error(ERR_RMA_SHARED, f"{call}: the members of a shared window must share memory, and this "
                                    f"communicator's are on several nodes ({nodes}); use "
                                    f"Split_type(COMM_TYPE_SHARED)")
    if kind == "device":
        arr = _device_array(n, call)
        v = as_buffer(arr, False, call)
        st.base, st.size, st.mem, st.keep = v.addr, n, arr, arr
        local = _describe(v, unit, call) if n else ("none", 0, unit, None)
        return _make(cls, comm, WIN_FLAVOR_ALLOCATE, local, st, call)
    if not shared:
        length = _memfd.round_pages(n)
        fd, addr = _memfd.create_mapped(call, "gpumpi-win", length)
        st.base, st.size = addr, n
        try:
            w = _make(cls, comm, WIN_FLAVOR_ALLOCATE, ("host", n, unit, (addr, n, (fd, 0, length))), st, call)
        except BaseException:
            _memfd.unmap(addr, length)
            raise
        finally:
            os.close(fd)
        w._st.rt.maps.append((addr, length))
        return w
    # shared: one segment made by the lowest rank, in rank order, mapped by all
    sizes = comm.allgather(n)
    total = _memfd.round_pages(sum(sizes))
    offs = np.concatenate(([0], np.cumsum(sizes)[:-1])).tolist() if sizes else [0]
    if comm._rank == 0:
        fd, addr = _memfd.create_mapped(call, "gpumpi-win-shared", total)
        desc = (os.getpid(), fd)
    else:
        fd = addr = None
        desc = None
    pid, rfd = comm.bcast(desc, 0)
    try:
        if comm._rank != 0:
            fd = _memfd.open_peer(pid, rfd)
            addr = _memfd.map_shared(call, total, fd)
        comm.Barrier()
        base = addr + offs[comm._rank]
        st.base, st.size = base, n
        # every member's memory is in the one file: the members reach it through their own mapping of
        # it (the shm transport finds the file registered here)
        _memfd.register(addr, total, fd)
        try:
            w = _make(cls, comm, WIN_FLAVOR_SHARED, ("host", n, unit, (base, n, (fd, offs[comm._rank], total))), st,
                      call)
        finally:
            _memfd.unregister(addr)
    except BaseException:
        if addr is not None:
            _memfd.unmap(addr, total)
        raise
    finally:
        if fd is not None:
            os.close(fd)
    w._st.rt.maps.append((addr, total))
    return w


def Create_dynamic(cls, info=INFO_NULL, comm=None) -> "Win":  # noqa: F821
    """Create a window to which memory is attached later (MPI_Win_create_dynamic); target
    displacements are absolute addresses (``MPI.Get_address``)."""
    call = "Win.Create_dynamic"
    comm = _comm_arg(_self() if comm is None else comm, call)
    st = State(cls._htable.new())
    st.info = info_dict(info, call)
    return _make(cls, comm, WIN_FLAVOR_DYNAMIC, ("dyn", 0, 1, None), st, call)


def Attach(self, memory) -> None:
    """Attach memory to a dynamic window (MPI_Win_attach)."""
    call = "Win.Attach"
    st = self._check(call)
    if st.flavor != WIN_FLAVOR_DYNAMIC:
        raise error(ERR_RMA_FLAVOR, f"{call}: only dynamic windows take attached memory (flavor {st.flavor})")
    v = as_buffer(memory, False, call)
    if v.kind != "host":
        raise NotImplementedError(f"{call}: gpumpi attaches host memory only to dynamic windows "
                                  f"({v.kind} memory given); expose device memory with Win.Create")
    if v.nbytes:
        st.rt.attach(v.addr, v.nbytes, call)


def Detach(self, memory) -> None:
    """Detach memory from a dynamic window (MPI_Win_detach)."""
    call = "Win.Detach"
    st = self._check(call)
    if st.flavor != WIN_FLAVOR_DYNAMIC:
        raise error(ERR_RMA_FLAVOR, f"{call}: only dynamic windows have attached memory (flavor {st.flavor})")
    v = as_buffer(memory, True, call)
    if v.nbytes:
        st.rt.detach(v.addr, call)


def Free(self) -> None:
    """Free the window (MPI_Win_free); collective.  Attributes are deleted first."""
    call = "Win.Free"
    st = self._check(call)
    W = st.rt
    W.epochs.free(call)
    on_free(self)
    W.comm.Barrier()  # every member is done with every other member's memory
    W.close()
    W.comm.Free()
    st.freed = True
    st.keep = st.mem = None
    self._st = None


def keep_memory(win) -> None:
    """Have ``win``'s ``Free`` leave every mapping this process made for it in place, until the
    process ends: views of the memory outlive the window.  Global Arrays' ``destroy`` frees an
    array whose accesses were not released (GA's rule), and the views those accesses gave must
    not dangle."""
    win._check("keep_memory").rt.keep_memory = True


# -- what this process exposes ----------------------------------------------------------------------

def _describe(v, unit: int, call: str) -> tuple:
    """What this process exposes, for the window's peers (see :meth:`gpumpi.rma.local.Window.setup`)."""
    if not v.nbytes:
        return ("none", 0, unit, None)
    if v.kind == "host":  # memory of a memfd (MPI.Alloc_mem) is mapped by the peers, other memory read by them
        return ("host", v.nbytes, unit, (v.addr, v.nbytes, _memfd.find(v.addr, v.nbytes)))
    from .. import _device

    return ("device", v.nbytes, unit, (_device.adapter_for(v.kind if v.kind == "sim" else "device"), v.addr, v.nbytes))


def _bytes_of(a):
    """The device array ``a``'s memory as a 1-D device array of bytes (what ``tomemory`` gives)."""
    if getattr(type(a), "__gpumpi_sim__", False):
        return type(a)._view(a._arr.reshape(-1).view(np.uint8), a._mem)
    return a.reshape(-1).view(np.uint8)


def _device_array(n: int, call: str):
    from .._backends import device_empty

    return device_empty(n, np.uint8, call, zeros=True)
