"""Lowercase (object) collectives (L5): ``bcast``, ``gather``, ``scatter``, ``allgather``,
``alltoall``, ``reduce``, ``allreduce``, ``scan``, ``exscan``.

Theory of operation
===================
Objects travel as gpumpi's object messages (``_objects``: mpi4py's pickle stream; arrays
inside it out of band, device arrays device to device as parts of their own) on the
communicator's collective context, one tag per call (taken in call order, as every
rank calls collectives in the same order).  The message sizes are not known in advance,
so these are point-to-point algorithms over dynamically sized receives, as mpi4py's own
(``msgpickle.pxi``): a binomial tree for ``bcast``; linear ``gather``/``scatter`` (the
root posts all its receives/sends at once); ``allgather`` and ``alltoall`` by every rank
posting its sends and receives at once; ``reduce`` by mpi4py's binomial tree to rank 0
in rank order (``op(lower, higher)``), then to the root; ``allreduce`` as reduce + bcast;
``scan``/``exscan`` by mpi4py's recursive doubling.  Results are copies, as in mpi4py
(the root of a ``bcast`` gets the object back through pickle, a one-rank ``reduce`` a
copy).

The array fast path: where both operands of a reduction step are arrays of the same
dtype, shape and memory (NumPy, or device arrays: CuPy, Numba, simulated) and ``op`` is a
predefined arithmetic or logical ``Op``, the step runs ``op.reduce_packed`` on their
memory -- a device kernel for device arrays, which never leave the device -- instead
of calling ``op(x, y)`` on Python objects.
"""

from __future__ import annotations

from .. import _objects
from .. import _pickle
from .. import _runtime as _rt
from .._fastpath.api import object_recv, object_send
from .._xfer import SENT
from ..constants import PROC_NULL, ROOT
from ._calls import inter_root



# --- messages ------------------------------------------------------------------------------------


def _isend(comm, obj, dest: int, tag: int, call: str):
    x = object_send(comm._w, comm._rank, comm._ctx + 1, dest, tag, obj, call)  # the compiled path first
    return SENT if x is None else x


def _irecv(comm, src: int, tag: int, call: str):
    return _objects.irecv(src, tag, comm._w, comm._ctx + 1, call, True)


def _load(comm, x, call: str):
    comm._cwait([x])
    return _objects.load(x, call, comm._w, comm._ctx + 1)


def _send(comm, obj, dest: int, tag: int, call: str) -> None:
    comm._cwait([_isend(comm, obj, dest, tag, call)])


def _recv(comm, src: int, tag: int, call: str):
    got = object_recv(comm._w, comm._ctx + 1, src, tag, None, call)  # the compiled path first
    return got[0] if got is not None else _load(comm, _irecv(comm, src, tag, call), call)


def _sendrecv(comm, obj, peer: int, tag: int, call: str):
    r = _irecv(comm, peer, tag, call)
    s = _isend(comm, obj, peer, tag, call)
    comm._cwait([s])
    return _load(comm, r, call)


def _copy(obj):
    bufs, _n = _pickle.dumps(obj)
    return _pickle.loads(bytearray(b"".join(bufs)))


# --- data movement -------------------------------------------------------------------------------


def bcast(comm, obj, root: int, call: str, tag=None):
    root = comm._root(root, call)
    if tag is None:  # given: a local phase of an intercommunicator call (the call's tag)
        tag = comm._ctag()  # once the arguments are valid (collectives._execute.Coll)
    n, r = comm._size, comm._rank
    rel = (r - root) % n
    if rel == 0:
        got = _copy(obj)
    mask = 1
    while mask < n:  # receive from the parent
        if rel & mask:
            got = _recv(comm, (rel - mask + root) % n, tag, call)
            break
        mask <<= 1
    mask >>= 1
    xs = []
    payload = obj if rel == 0 else got
    while mask > 0:  # forward to the children
        if rel + mask < n:
            xs.append(_isend(comm, payload, (rel + mask + root) % n, tag, call))
        mask >>= 1
    comm._cwait(xs)
    return got


def gather(comm, obj, root: int, call: str, tag=None):
    root = comm._root(root, call)
    tag = comm._ctag() if tag is None else tag
    n, r = comm._size, comm._rank
    if r != root:
        _send(comm, obj, root, tag, call)
        return None
    xs = [None if p == r else _irecv(comm, p, tag, call) for p in range(n)]
    return [_copy(obj) if p == r else _load(comm, xs[p], call) for p in range(n)]


def _items(obj, n: int, call: str) -> list:
    """The ``n`` items of a scatter/alltoall send object, as mpi4py: None is ``[None] * n``."""
    items = [None] * n if obj is None else list(obj)
    if len(items) != n:
        raise ValueError(f"{call}: expecting {n} items, got {len(items)}")
    return items


def scatter(comm, obj, root: int, call: str, tag=None):
    root = comm._root(root, call)
    n, r = comm._size, comm._rank
    items = _items(obj, n, call) if r == root else None
    tag = comm._ctag() if tag is None else tag
    if r != root:
        return _recv(comm, root, tag, call)
    xs = [_isend(comm, items[p], p, tag, call) for p in range(n) if p != r]
    comm._cwait(xs)
    return _copy(items[r])


def allgather(comm, obj, call: str):
    tag = comm._ctag()
    n, r = comm._size, comm._rank
    rs = [None if p == r else _irecv(comm, p, tag, call) for p in range(n)]
    ss = [_isend(comm, obj, p, tag, call) for p in range(n) if p != r]
    comm._cwait(ss)
    return [_copy(obj) if p == r else _load(comm, rs[p], call) for p in range(n)]


def alltoall(comm, obj, call: str):
    n, r = comm._size, comm._rank
    items = _items(obj, n, call)
    tag = comm._ctag()
    rs = [None if p == r else _irecv(comm, p, tag, call) for p in range(n)]
    ss = [_isend(comm, items[p], p, tag, call) for p in range(n) if p != r]
    comm._cwait(ss)
    return [_copy(items[r]) if p == r else _load(comm, rs[p], call) for p in range(n)]


# --- reductions ----------------------------------------------------------------------------------


def _apply(op, x, y):
    """``x op y`` (``x`` from the lower ranks): the array fast path where it applies, else
    ``op(x, y)`` as mpi4py calls it."""
    from ..op import Op

    if isinstance(op, Op):
        z = _array_step(op, x, y)
        if z is not None:
            return z
    return op(x, y)


_FAST = {"SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR"}


def _array_step(op, x, y):
    """``x op y`` on the arrays' memory (module docstring), or None where it does not apply."""
    import numpy as np

    from .. import _backends
    from .._arrays import HOST, as_buffer, datatype_of

    if getattr(op, "_name", None) not in _FAST or type(x) is not type(y):
        return None
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or dtype is None or shape != getattr(y, "shape", None) or dtype != getattr(y, "dtype", None):
        return None
    try:
        vx, vy = as_buffer(x, True), as_buffer(y, True)
        dt = datatype_of(vy)
    except Exception:  # noqa: BLE001 - not a contiguous array gpumpi reads: op(x, y) decides
        return None
    if vx.kind != vy.kind or vx.nbytes != vy.nbytes:
        return None
    from ..op import check_op, reduce_packed, reduce_unit

    try:
        check_op(op, dt, "reduce")
    except Exception:  # noqa: BLE001 - not defined for the type: op(x, y) decides, as in mpi4py
        return None
    unit, _per = reduce_unit(op, dt)
    nunits = vy.nbytes // unit
    if vy.kind == HOST:
        if type(y) is not np.ndarray:
            return None
        z = np.array(y, copy=True, order="C")
        reduce_packed(op, dt, nunits, np.frombuffer(vx.mem, np.uint8), z.reshape(-1).view(np.uint8), HOST)
        return z
    name = _backends.device_kind(type(y))
    if name is None:
        return None
    z = _backends.BACKENDS[name].empty(type(y), shape, dtype, "C")
    vz = as_buffer(z, False)
    from .. import _device

    ad = _device.adapter_for(vy.kind)
    s = _rt.ENGINE.copy_stream(ad)
    ad.memcpy(vz.addr, vy.addr, vy.nbytes, s)
    ad.stream_synchronize(s)
    reduce_packed(op, dt, nunits, vx.addr, vz.addr, vy.kind, s)
    return z


def reduce(comm, obj, op, root: int, call: str, tag=None):
    root = comm._root(root, call)
    tag = comm._ctag() if tag is None else tag
    n, r = comm._size, comm._rank
    result = _copy(obj)
    mask = 1
    while mask < n:
        if mask & r:
            _send(comm, result, r & ~mask, tag, call)
            break
        peer = r | mask
        if peer < n:
            result = _apply(op, result, _recv(comm, peer, tag, call))
        mask <<= 1
    if root != 0:
        if r == 0:
            _send(comm, result, root, tag, call)
        elif r == root:
            result = _recv(comm, 0, tag, call)
    return result if r == root else None


def allreduce(comm, obj, op, call: str):
    return bcast(comm, reduce(comm, obj, op, 0, call), 0, call)


# --- intercommunicators -----------------------------------------------------------------------------
# MPICH's inter algorithms (as collectives.inter) on objects.  A call takes ONE tag from the
# intercommunicator's sequence, in both groups alike; its local phases run the intra functions
# above on the private local communicator (``comm._local``) with that same tag, so both groups
# stay in step whatever each group does locally.  Leaders are local rank 0.  Root rules: ROOT
# at the root, PROC_NULL in the rest of its group (they return None), the root's rank in the
# other group.


def _ileader_swap(comm, obj, tag: int, call: str):
    r = _irecv(comm, 0, tag, call)
    s = _isend(comm, obj, 0, tag, call)
    comm._cwait([s])
    return _load(comm, r, call)


def _ilocal_bcast(comm, obj, tag: int, call: str):
    lc = comm._local
    return obj if lc._size == 1 else bcast(lc, obj, 0, call, tag)


def bcast_inter(comm, obj, root: int, call: str):
    root = inter_root(comm, root, call)
    tag = comm._ctag()
    if root == ROOT:
        _send(comm, obj, 0, tag, call)
        return None
    if root == PROC_NULL:
        return None
    got = _recv(comm, root, tag, call) if comm._rank == 0 else None
    return _ilocal_bcast(comm, got, tag, call)


def gather_inter(comm, obj, root: int, call: str):
    root = inter_root(comm, root, call)
    tag = comm._ctag()
    if root == ROOT:
        return _recv(comm, 0, tag, call)
    if root == PROC_NULL:
        return None
    lc = comm._local
    items = [obj] if lc._size == 1 else gather(lc, obj, 0, call, tag)
    if comm._rank == 0:
        _send(comm, items, root, tag, call)
    return None


def scatter_inter(comm, obj, root: int, call: str):
    root = inter_root(comm, root, call)
    if root == ROOT:
        items = _items(obj, len(comm._w), call)
    tag = comm._ctag()
    if root == ROOT:
        _send(comm, items, 0, tag, call)
        return None
    if root == PROC_NULL:
        return None
    lc = comm._local
    got = _recv(comm, root, tag, call) if comm._rank == 0 else None
    if lc._size == 1:
        return got[0]
    return scatter(lc, got, 0, call, tag)


def allgather_inter(comm, obj, call: str):
    tag = comm._ctag()
    lc = comm._local
    items = [obj] if lc._size == 1 else gather(lc, obj, 0, call, tag)
    got = _ileader_swap(comm, items, tag, call) if comm._rank == 0 else None
    return _ilocal_bcast(comm, got, tag, call)


def alltoall_inter(comm, obj, call: str):
    n = len(comm._w)
    items = _items(obj, n, call)
    tag = comm._ctag()
    rs = [_irecv(comm, p, tag, call) for p in range(n)]
    ss = [_isend(comm, items[p], p, tag, call) for p in range(n)]
    comm._cwait(ss)
    return [_load(comm, x, call) for x in rs]


def reduce_inter(comm, obj, op, root: int, call: str):
    root = inter_root(comm, root, call)
    tag = comm._ctag()
    if root == ROOT:
        return _recv(comm, 0, tag, call)
    if root == PROC_NULL:
        return None
    lc = comm._local
    v = obj if lc._size == 1 else reduce(lc, obj, op, 0, call, tag)
    if comm._rank == 0:
        _send(comm, v, root, tag, call)
    return None


def allreduce_inter(comm, obj, op, call: str):
    tag = comm._ctag()
    lc = comm._local
    v = obj if lc._size == 1 else reduce(lc, obj, op, 0, call, tag)
    got = _ileader_swap(comm, v, tag, call) if comm._rank == 0 else None
    return _ilocal_bcast(comm, got, tag, call)


def _tmax(a, b):
    return tuple(max(x, y) for x, y in zip(a, b))


def allmax_inter(comm, values: tuple, call: str) -> tuple:
    """The element-wise maximum of ``values`` over BOTH groups (context-id agreement of the
    creations on an intercommunicator): local reduce, leaders swap and combine, local bcast."""
    tag = comm._ctag()
    lc = comm._local
    v = tuple(values) if lc._size == 1 else reduce(lc, tuple(values), _tmax, 0, call, tag)
    if comm._rank == 0:
        v = _tmax(v, _ileader_swap(comm, v, tag, call))
    return _ilocal_bcast(comm, v, tag, call)


def barrier_inter(comm, call: str):
    comm.Barrier()


#: the intercommunicator form of each lowercase collective, by name (``Comm._ocoll``)
INTER = {"barrier": barrier_inter, "bcast": bcast_inter, "gather": gather_inter, "scatter": scatter_inter,
         "allgather": allgather_inter, "alltoall": alltoall_inter, "reduce": reduce_inter,
         "allreduce": allreduce_inter}


def scan(comm, obj, op, call: str, exclusive: bool = False):
    tag = comm._ctag()
    n, r = comm._size, comm._rank
    result = _copy(obj)
    partial = result
    have = False  # exscan: whether result holds anything yet
    mask = 1
    while mask < n:
        peer = r ^ mask
        if peer < n:
            got = _sendrecv(comm, partial, peer, tag, call)
            if r > peer:
                partial = _apply(op, got, partial)
                if not exclusive:
                    result = _apply(op, got, result)
                elif not have:
                    result, have = got, True
                else:
                    result = _apply(op, got, result)
            else:
                partial = _apply(op, partial, got)
        mask <<= 1
    if exclusive and r == 0:
        return None
    return result


# --- neighbor collectives (topology communicators) -----------------------------------------------


def _neighbor(comm, items, call: str) -> list:
    """Item ``j`` to outgoing neighbor ``j``; a list with the item from each incoming neighbor
    (None from ``PROC_NULL``).  Receives are posted in the topology's matching order
    (``collectives.neighbor``); an edge to this process itself is a copy."""

    srcs, dsts, order = comm._nbrs()
    tag = comm._ctag()
    me = comm._rank
    mine = [items[j] for j, d in enumerate(dsts) if d == me]
    out = [None] * len(srcs)
    rs = []
    k = 0
    for i in order:
        s = srcs[i]
        if s == PROC_NULL:
            continue
        if s == me:
            if k >= len(mine):
                raise ValueError(f"{call}: more edges to this process from itself than from it to itself")
            out[i] = _copy(mine[k])
            k += 1
        else:
            rs.append((i, _irecv(comm, s, tag, call)))
    ss = [_isend(comm, items[j], d, tag, call) for j, d in enumerate(dsts) if d != PROC_NULL and d != me]
    comm._cwait(ss)
    for i, x in rs:
        out[i] = _load(comm, x, call)
    return out


def neighbor_allgather(comm, obj, call: str) -> list:
    return _neighbor(comm, [obj] * len(comm._nbrs()[1]), call)


def neighbor_alltoall(comm, obj, call: str) -> list:
    return _neighbor(comm, _items(obj, len(comm._nbrs()[1]), call), call)
