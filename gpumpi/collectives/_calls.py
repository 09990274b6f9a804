"""Collective calls (L5): mpi4py's buffer arguments of each collective, parsed and bound to a schedule.

Theory of operation
===================
One function per collective family turns the arguments of a call (mpi4py's rules,
``msgbuffer.pxi`` ``_p_msg_cco``: which rank parses which buffer, ``IN_PLACE``, the count
and datatype checks of the reductions) into a prepared :class:`~._execute.Coll`: the
schedule ``select`` builds for (collective, ranks, bytes, memory kind, op traits), and
the user memory behind the schedule's ``SBUF``/``RBUF``.  The blocking, nonblocking and
persistent forms in ``comm`` share these functions, so the three validate alike.

Units: data movement counts bytes of the packed stream (the type signatures of the two
sides agree, their layouts need not); reductions count the op's unit
(``op.reduce_unit``: a basic element for predefined ops, a whole datatype element for user
ops), so no split ever cuts an element.  Contiguous user memory is used in place;
non-contiguous memory is packed into a temporary at start (inputs) and unpacked at the
end (results).  The vector forms keep their blocks where they are (``Blocks``).
"""

from __future__ import annotations

from .. import _config
from .. import _runtime as _rt
from .._arrays import HOST
from .._buffers import message_simple, message_vector
from .._p2p import signature as _sig
from ..constants import PROC_NULL, ROOT, is_in_place
from ..datatypes._core import Datatype
from ..datatypes import plan as _plan
from ..errors import ERR_COUNT, ERR_TRUNCATE, ERR_TYPE, error
from ..op import Op, check_op, reduce_unit
from . import inter, select
from ..datatypes.predefined import BYTE
from ._execute import Blocks, Coll, Flat, host_array, packed_in, packed_out, raw_msg, resized_in, resized_out
from .neighbor import exchange, prefix_blocks, self_pairs, uniform_blocks
from .schedule import RBUF, SBUF, Schedule

_EMPTY = Flat(memoryview(bytearray()), 0, 0)


def _prefix(call: str) -> str:
    return f"{call}: "


def _committed(m, call: str):
    if m is not None and not m.datatype._rec.committed:
        dt = m.datatype
        raise error(ERR_TYPE, f"{call}: datatype has not been committed ({dt._rec.name or repr(dt)})")
    return m


def _simple(spec, readonly: bool, rank: int, blocks: int, call: str):
    return _committed(message_simple(spec, readonly, rank, blocks, call), call)


def _vector(spec, readonly: bool, rank: int, blocks: int, call: str):
    return _committed(message_vector(spec, readonly, rank, blocks, call), call)


def _kind(*ms) -> str:
    """The memory kind a collective runs in: a device kind if any of its buffers is on one."""
    for m in ms:
        if m is not None and m.kind != HOST:
            return m.kind
    return HOST


def _flat(m, nbytes: int) -> Flat:
    """Contiguous message ``m``: its bytes in place (``nbytes`` of them, all blocks)."""
    if m.kind == HOST:
        return Flat(host_array(m)[:nbytes], m.addr + m.lo, nbytes)
    return Flat(None, m.addr + m.lo, nbytes, m.kind)


def _bind(c: Coll, b: int, m, read: bool, write: bool) -> int:
    """Bind simple message ``m`` (all its blocks) as buffer ``b``; its packed bytes."""
    n = m.nbytes * m.blocks
    if m.contiguous or not n:
        c.bufs[b] = _flat(m, n)
    elif write:
        packed_out(c, b, m, m.count * m.blocks, None, 1, inp=read)
    else:
        packed_in(c, b, m, m.count * m.blocks, None, 1)
    return n


def _bindv(c: Coll, b: int, m, read: bool, write: bool, counts=None, displs=None, types=None) -> list:
    """Bind vector message ``m`` as buffer ``b`` (block ``i``: ``counts[i]`` elements at
    ``displs[i]`` extents, or bytes for ``types``, the per-block datatypes of ``Alltoallw``);
    the packed bytes per block."""
    if types is None:
        counts, displs, dt = m.counts, m.displs, m.datatype
        types = [dt] * len(counts)
        addrs = [m.addr + d * dt._extent for d in displs]
    else:
        addrs = [m.addr + d for d in displs]
    sizes = [c_ * t._size for c_, t in zip(counts, types)]
    if all(t._contig for t, c_ in zip(types, counts) if c_):
        starts, acc, flats = [], 0, []
        whole = host_array(m) if m.kind == HOST and m.obj is not None else None
        base = m.addr + m.lo
        for a, cnt, t, n in zip(addrs, counts, types, sizes):
            starts.append(acc)
            acc += n
            lo = _plan.plan_for(t, cnt).lo if cnt else 0
            if m.kind != HOST:
                flats.append(Flat(None, a + lo, n, m.kind))
            elif whole is not None:
                off = a + lo - base
                flats.append(Flat(whole[off:off + n], a + lo, n))
            else:  # BOTTOM: absolute addresses
                from .._arrays import raw_mem

                flats.append(Flat(raw_mem(a + lo, n, not write, None), a + lo, n))
        c.bufs[b] = Blocks(starts, sizes, flats)
        return sizes
    blocks = [(a, cnt, t) for a, cnt, t in zip(addrs, counts, types)]
    if write:
        packed_out(c, b, m, 0, blocks, 1, inp=read)
    else:
        packed_in(c, b, m, 0, blocks, 1)
    return sizes


_SCHEDS: dict = {}  # the schedules of recent calls (a schedule is never modified once built)
_SCHEDS_MAX = 512


def _schedule(coll: str, rank: int, size: int, **kw):
    """``select.build``, remembered: a program repeats the same few calls."""
    key = (coll, rank, size, *sorted(kw.items()))
    s = _SCHEDS.get(key)
    if s is None:
        algos = _config.get().coll_algorithms
        forced = next((a for c, a in algos if c == coll), None) if algos else None
        if forced is not None and not kw.get("commute", True) and (coll, forced) in select.COMMUTATIVE_ONLY:
            forced = None  # GPUMPI_COLL_ALGORITHM names an algorithm this op cannot use: the table decides
        s = select.build(coll, rank, size, algorithm=forced, **kw)
        if len(_SCHEDS) >= _SCHEDS_MAX:
            _SCHEDS.clear()
        _SCHEDS[key] = s
    return s


_NODES: dict = {}  # id(world ranks of a communicator) -> (those ranks, the node of each)


def _nodes_of(comm):
    """The node of every rank of ``comm`` when its members are on several nodes, else None
    (the selection table's ``nodes``: hierarchical schedules)."""
    eng = _rt.ENGINE
    w = comm._rw
    if eng is None or not eng.far or eng.far.isdisjoint(w):
        return None
    e = _NODES.get(id(w))
    if e is None or e[0] is not w:
        if len(_NODES) >= _SCHEDS_MAX:
            _NODES.clear()
        e = _NODES[id(w)] = (w, tuple(_rt.node_of(r) for r in w))
    return e[1]


def _coll(comm, call: str, coll: str, kind: str, sig: int = 0, op=None, dt=None, unit: int = 1, **kw) -> Coll:
    sched = _schedule(coll, comm._rank, comm._size, unit=unit, memory=kind, nodes=_nodes_of(comm), **kw)
    return Coll(comm, call, sched, unit, kind, {}, sig, op, dt)


def _sig_of(*ms) -> int:
    for m in ms:
        if m is not None:
            return _sig(m.datatype)
    return 0


def _root(comm, root, call: str) -> int:
    return comm._root(root, call)


# --- data movement -------------------------------------------------------------------------------


def barrier(comm, call: str) -> Coll:
    c = _coll(comm, call, "barrier", HOST)
    c.bufs[RBUF] = _EMPTY
    return c


def bcast(comm, buf, root, call: str) -> Coll:
    root = _root(comm, root, call)
    me = comm._rank == root
    m = _simple(buf, me, 0, 1, call)
    n = m.nbytes
    c = _coll(comm, call, "bcast", m.kind, _sig(m.datatype), root=root, n=n)
    _bind(c, RBUF, m, read=me, write=not me)
    c.keep = m
    return c


def gather(comm, v: bool, sendbuf, recvbuf, root, call: str) -> Coll:
    root = _root(comm, root, call)
    size, me = comm._size, comm._rank
    inplace = False
    r = s = None
    if me == root:
        r = _vector(recvbuf, False, root, size, call) if v else _simple(recvbuf, False, root, size, call)
        if is_in_place(sendbuf):
            inplace = True
        else:
            s = _simple(sendbuf, True, 0, 1, call)
    else:
        s = _simple(sendbuf, True, root, 1, call)
    kind = _kind(r, s)
    sig = _sig_of(r, s)
    if me == root:
        if v:
            rn = [cnt * r.datatype._size for cnt in r.counts]
        else:
            rn = r.nbytes
        n = rn[me] if v else rn  # the root's own block: what it receives from every rank
        c = _coll(comm, call, "gatherv" if v else "gather", kind, sig, root=root, n=n, inplace=inplace,
                  **({"counts": tuple(rn)} if v else {}))
        if v:
            _bindv(c, RBUF, r, read=inplace, write=True)
        else:
            _bind(c, RBUF, r, read=inplace, write=True)
        if s is not None and s.nbytes != n:
            resized_in(c, SBUF, s, s.count, n, "the root's send buffer differs from its receive block")
            s = None
    else:
        c = _coll(comm, call, "gatherv" if v else "gather", kind, sig, root=root, n=s.nbytes, inplace=False)
    if s is not None:
        _bind(c, SBUF, s, read=True, write=False)
    c.keep = (s, r, sendbuf, recvbuf)
    return c


def scatter(comm, v: bool, sendbuf, recvbuf, root, call: str) -> Coll:
    root = _root(comm, root, call)
    size, me = comm._size, comm._rank
    inplace = False
    r = s = None
    if me == root:
        s = _vector(sendbuf, True, root, size, call) if v else _simple(sendbuf, True, root, size, call)
        if is_in_place(recvbuf):
            inplace = True
        else:
            r = _simple(recvbuf, False, root, 1, call)
    else:
        r = _simple(recvbuf, False, root, 1, call)
    kind = _kind(r, s)
    sig = _sig_of(r, s)
    if me == root:
        sn = [cnt * s.datatype._size for cnt in s.counts] if v else s.nbytes
        n = sn[me] if v else sn  # the root's own block: what it sends to every rank
        c = _coll(comm, call, "scatterv" if v else "scatter", kind, sig, root=root, n=n, inplace=inplace,
                  **({"counts": tuple(sn)} if v else {}))
        if v:
            _bindv(c, SBUF, s, read=True, write=False)
        else:
            _bind(c, SBUF, s, read=True, write=False)
        if r is not None and r.nbytes != n:
            resized_out(c, RBUF, r, r.count, n, "the root's receive buffer differs from its send block")
            r = None
    else:
        c = _coll(comm, call, "scatterv" if v else "scatter", kind, sig, root=root, n=r.nbytes)
    if r is not None:
        _bind(c, RBUF, r, read=False, write=True)
    c.keep = (s, r, sendbuf, recvbuf)
    return c


def allgather(comm, v: bool, sendbuf, recvbuf, call: str) -> Coll:
    comm._check(call)
    size = comm._size
    r = _vector(recvbuf, False, 0, size, call) if v else _simple(recvbuf, False, 0, size, call)
    inplace = is_in_place(sendbuf)
    s = None if inplace else _simple(sendbuf, True, 0, 1, call)
    kind = _kind(r, s)
    if v:
        rn = tuple(cnt * r.datatype._size for cnt in r.counts)
        c = _coll(comm, call, "allgatherv", kind, _sig_of(r), counts=rn, inplace=inplace)
        _bindv(c, RBUF, r, read=inplace, write=True)
    else:
        c = _coll(comm, call, "allgather", kind, _sig_of(r), n=r.nbytes, inplace=inplace)
        _bind(c, RBUF, r, read=inplace, write=True)
    own = rn[comm._rank] if v else r.nbytes
    if s is not None and s.nbytes != own:
        resized_in(c, SBUF, s, s.count, own, "the send buffer differs from this rank's receive block")
    elif s is not None:
        _bind(c, SBUF, s, read=True, write=False)
    c.keep = (s, r)
    return c


def alltoall(comm, v: bool, sendbuf, recvbuf, call: str) -> Coll:
    comm._check(call)
    size = comm._size
    r = _vector(recvbuf, False, 0, size, call) if v else _simple(recvbuf, False, 0, size, call)
    inplace = is_in_place(sendbuf)
    s = None if inplace else (_vector(sendbuf, True, 0, size, call) if v else _simple(sendbuf, True, 0, size, call))
    kind = _kind(r, s)
    if v:
        rn = tuple(cnt * r.datatype._size for cnt in r.counts)
        sn = rn if inplace else tuple(cnt * s.datatype._size for cnt in s.counts)
        c = _coll(comm, call, "alltoallv", kind, _sig_of(r, s), scounts=sn, rcounts=rn, inplace=inplace)
        _bindv(c, RBUF, r, read=inplace, write=True)
        if s is not None:
            _bindv(c, SBUF, s, read=True, write=False)
    else:
        if s is not None and s.nbytes != r.nbytes:
            raise ValueError(f"{_prefix(call)}mismatch in send block {s.nbytes} bytes and receive block "
                             f"{r.nbytes} bytes")
        c = _coll(comm, call, "alltoall", kind, _sig_of(r, s), n=r.nbytes, inplace=inplace)
        _bind(c, RBUF, r, read=inplace, write=True)
        if s is not None:
            _bind(c, SBUF, s, read=True, write=False)
    c.keep = (s, r)
    return c


def _wspec(spec, readonly: bool, blocks: int, call: str):
    """mpi4py's ``message_vector_w``: ``(message over the buffer, counts, byte displs, types)``."""
    from .._buffers import check_array
    from ..constants import is_bottom

    if not isinstance(spec, (list, tuple)):
        raise TypeError(f"{_prefix(call)}message: expecting a list or tuple (got {type(spec).__name__})")
    nargs = len(spec)
    if nargs == 2:
        o_buf, o_types = spec
        o_counts = o_displs = None
    elif nargs == 3:
        o_buf, (o_counts, o_displs), o_types = spec
    elif nargs == 4:
        o_buf, o_counts, o_displs, o_types = spec
    else:
        raise ValueError(f"{_prefix(call)}message: expecting 2 to 4 items")
    if is_bottom(o_buf):
        if o_counts is None:
            raise ValueError(f"{_prefix(call)}message: BOTTOM requires counts")
        if o_displs is None:
            raise ValueError(f"{_prefix(call)}message: BOTTOM requires displs")
    if o_counts is None and o_displs is None:
        counts, displs = (1,) * blocks, (0,) * blocks
    else:
        counts = check_array(o_counts, blocks, call)
        displs = check_array(o_displs, blocks, call)
    if isinstance(o_types, Datatype):
        types = (o_types,) * blocks
    else:
        types = tuple(o_types)
        if len(types) != blocks:
            raise ValueError(f"{_prefix(call)}expecting {blocks} items, got {len(types)}")
        for t in types:
            if not isinstance(t, Datatype):
                raise TypeError(f"{_prefix(call)}expecting a Datatype (got {type(t).__name__})")
    for t in types:
        if t._size is None or t._rec.freed:
            raise error(ERR_TYPE, f"{call}: invalid datatype ({t!r})")
        if not t._rec.committed:
            raise error(ERR_TYPE, f"{call}: datatype has not been committed ({t._rec.name or repr(t)})")
    for cnt in counts:
        if cnt < 0:
            raise ValueError(f"{_prefix(call)}message: negative count {cnt}")
    # the buffer: parsed as bytes, so every block can be checked against it
    m = None if is_bottom(o_buf) else message_simple([o_buf, BYTE], readonly, 0, 1, call)
    if m is not None:
        for i, (cnt, d, t) in enumerate(zip(counts, displs, types)):
            if cnt:
                p = _plan.plan_for(t, cnt)
                if d + p.lo < 0 or d + p.hi > m.nbytes:
                    raise ValueError(f"{_prefix(call)}message: block {i} (count {cnt}, displacement {d} bytes) "
                                     f"needs bytes [{d + p.lo}, {d + p.hi}), buffer length {m.nbytes}")
    return m, counts, displs, types


def alltoallw(comm, sendbuf, recvbuf, call: str) -> Coll:
    comm._check(call)
    size = comm._size
    r, rc, rd, rt = _wspec(recvbuf, False, size, call)
    inplace = is_in_place(sendbuf)
    if r is None:
        r = raw_msg(HOST, 0, 0)
    if inplace:
        s, sc, sd, st = None, rc, rd, rt
    else:
        s, sc, sd, st = _wspec(sendbuf, True, size, call)
        if s is None:
            s = raw_msg(HOST, 0, 0)
    kind = _kind(r, s)
    rn = tuple(cnt * t._size for cnt, t in zip(rc, rt))
    sn = tuple(cnt * t._size for cnt, t in zip(sc, st))
    c = _coll(comm, call, "alltoallv", kind, 0, scounts=sn, rcounts=rn, inplace=inplace)
    _bindv(c, RBUF, r, read=inplace, write=True, counts=rc, displs=rd, types=rt)
    if s is not None:
        _bindv(c, SBUF, s, read=True, write=False, counts=sc, displs=sd, types=st)
    c.keep = (s, r)
    return c


# --- intercommunicators ----------------------------------------------------------------------------
# mpi4py's inter branches of ``_p_msg_cco``: rooted collectives parse by role (the root passes
# ROOT, the rest of its group PROC_NULL and parse nothing, the other group passes the root's
# rank); blocks count the REMOTE group; IN_PLACE does not exist (a None send buffer is not a
# buffer, as in mpi4py); the two groups may move different sizes each way.  ``INTER`` maps the
# intra parser's name to its inter form (``Comm._coll_prep`` picks it), schedules from
# ``collectives.inter``.


def inter_root(comm, root, call: str) -> int:
    from ..errors import ERR_ROOT

    if type(root) is not int:
        try:
            root = root.__index__()
        except AttributeError:
            raise TypeError(f"{call}: root must be an integer ({type(root).__name__})") from None
    if root in (ROOT, PROC_NULL) or 0 <= root < len(comm._w):
        return root
    raise error(ERR_ROOT, f"{call}: invalid root ({root}, remote group size {len(comm._w)}; ROOT or PROC_NULL "
                          f"in the root's group)")


def _ischedule(coll: str, comm, **kw):
    """An intercommunicator schedule of ``collectives.inter``, remembered as ``_schedule``'s."""
    rank, size, rsize = comm._rank, comm._size, len(comm._w)
    key = ("inter", coll, rank, size, rsize, *sorted(kw.items()))
    s = _SCHEDS.get(key)
    if s is None:
        s = getattr(inter, coll)(rank, size, rsize, **kw)
        if len(_SCHEDS) >= _SCHEDS_MAX:
            _SCHEDS.clear()
        _SCHEDS[key] = s
    return s


def _icoll(comm, call: str, coll: str, kind: str, sig: int = 0, op=None, dt=None, unit: int = 1, **kw) -> Coll:
    return Coll(comm, call, _ischedule(coll, comm, **kw), unit, kind, {}, sig, op, dt)


def _idle(comm, call: str) -> Coll:
    """PROC_NULL in the root's group: no part in the data movement (the call's tag is still taken)."""
    c = Coll(comm, call, Schedule(algorithm="inter_idle"), 1, HOST, {})
    c.bufs[RBUF] = _EMPTY
    return c


def barrier_inter(comm, call: str) -> Coll:
    c = _icoll(comm, call, "barrier", HOST)
    c.bufs[RBUF] = _EMPTY
    return c


def bcast_inter(comm, buf, root, call: str) -> Coll:
    root = inter_root(comm, root, call)
    if root == PROC_NULL:
        return _idle(comm, call)
    me = root == ROOT
    m = _simple(buf, me, root, 1, call)
    c = _icoll(comm, call, "bcast", m.kind, _sig(m.datatype), root=root, n=m.nbytes)
    _bind(c, RBUF, m, read=me, write=not me)
    c.keep = m
    return c


def gather_inter(comm, v: bool, sendbuf, recvbuf, root, call: str) -> Coll:
    root = inter_root(comm, root, call)
    if root == PROC_NULL:
        return _idle(comm, call)
    rsize = len(comm._w)
    if root == ROOT:
        r = _vector(recvbuf, False, root, rsize, call) if v else _simple(recvbuf, False, root, rsize, call)
        if v:
            rn = tuple(cnt * r.datatype._size for cnt in r.counts)
            c = _icoll(comm, call, "gatherv", r.kind, _sig(r.datatype), root=root, counts=rn)
            _bindv(c, RBUF, r, read=False, write=True)
        else:
            c = _icoll(comm, call, "gather", r.kind, _sig(r.datatype), root=root, n=r.nbytes)
            _bind(c, RBUF, r, read=False, write=True)
        c.keep = (r, recvbuf)
        return c
    s = _simple(sendbuf, True, root, 1, call)
    c = _icoll(comm, call, "gatherv" if v else "gather", s.kind, _sig(s.datatype), root=root, n=s.nbytes)
    _bind(c, SBUF, s, read=True, write=False)
    c.keep = (s, sendbuf)
    return c


def scatter_inter(comm, v: bool, sendbuf, recvbuf, root, call: str) -> Coll:
    root = inter_root(comm, root, call)
    if root == PROC_NULL:
        return _idle(comm, call)
    rsize = len(comm._w)
    if root == ROOT:
        s = _vector(sendbuf, True, root, rsize, call) if v else _simple(sendbuf, True, root, rsize, call)
        if v:
            sn = tuple(cnt * s.datatype._size for cnt in s.counts)
            c = _icoll(comm, call, "scatterv", s.kind, _sig(s.datatype), root=root, counts=sn)
            _bindv(c, SBUF, s, read=True, write=False)
        else:
            c = _icoll(comm, call, "scatter", s.kind, _sig(s.datatype), root=root, n=s.nbytes)
            _bind(c, SBUF, s, read=True, write=False)
        c.keep = (s, sendbuf)
        return c
    r = _simple(recvbuf, False, root, 1, call)
    c = _icoll(comm, call, "scatterv" if v else "scatter", r.kind, _sig(r.datatype), root=root, n=r.nbytes)
    _bind(c, RBUF, r, read=False, write=True)
    c.keep = (r, recvbuf)
    return c


def allgather_inter(comm, v: bool, sendbuf, recvbuf, call: str) -> Coll:
    comm._check(call)
    rsize = len(comm._w)
    r = _vector(recvbuf, False, 0, rsize, call) if v else _simple(recvbuf, False, 0, rsize, call)
    s = _simple(sendbuf, True, 0, 1, call)
    kind = _kind(r, s)
    # no signature check: this group's send type and receive type may differ (each must match
    # the other group's), and the local phases carry the send data
    if v:
        rn = tuple(cnt * r.datatype._size for cnt in r.counts)
        c = _icoll(comm, call, "allgatherv", kind, 0, n=s.nbytes, counts=rn)
        _bindv(c, RBUF, r, read=False, write=True)
    else:
        c = _icoll(comm, call, "allgather", kind, 0, n=s.nbytes, rn=r.nbytes)
        _bind(c, RBUF, r, read=False, write=True)
    _bind(c, SBUF, s, read=True, write=False)
    c.keep = (s, r)
    return c


def alltoall_inter(comm, v: bool, sendbuf, recvbuf, call: str) -> Coll:
    comm._check(call)
    rsize = len(comm._w)
    r = _vector(recvbuf, False, 0, rsize, call) if v else _simple(recvbuf, False, 0, rsize, call)
    s = _vector(sendbuf, True, 0, rsize, call) if v else _simple(sendbuf, True, 0, rsize, call)
    kind = _kind(r, s)
    if v:
        rn = tuple(cnt * r.datatype._size for cnt in r.counts)
        sn = tuple(cnt * s.datatype._size for cnt in s.counts)
        c = _icoll(comm, call, "alltoallv", kind, 0, scounts=sn, rcounts=rn)
        _bindv(c, RBUF, r, read=False, write=True)
        _bindv(c, SBUF, s, read=True, write=False)
    else:
        c = _icoll(comm, call, "alltoall", kind, 0, n=s.nbytes, rn=r.nbytes)
        _bind(c, RBUF, r, read=False, write=True)
        _bind(c, SBUF, s, read=True, write=False)
    c.keep = (s, r)
    return c


def alltoallw_inter(comm, sendbuf, recvbuf, call: str) -> Coll:
    comm._check(call)
    rsize = len(comm._w)
    r, rc, rd, rt = _wspec(recvbuf, False, rsize, call)
    s, sc, sd, st = _wspec(sendbuf, True, rsize, call)
    r = r if r is not None else raw_msg(HOST, 0, 0)
    s = s if s is not None else raw_msg(HOST, 0, 0)
    rn = tuple(cnt * t._size for cnt, t in zip(rc, rt))
    sn = tuple(cnt * t._size for cnt, t in zip(sc, st))
    c = _icoll(comm, call, "alltoallv", _kind(r, s), 0, scounts=sn, rcounts=rn)
    _bindv(c, RBUF, r, read=False, write=True, counts=rc, displs=rd, types=rt)
    _bindv(c, SBUF, s, read=True, write=False, counts=sc, displs=sd, types=st)
    c.keep = (s, r)
    return c


def _ired(comm, call: str, coll: str, op, dt, count: int, kind: str, **kw) -> Coll:
    check_op(op, dt, call)
    unit, per = reduce_unit(op, dt)
    return _icoll(comm, call, coll, kind, _sig(dt), op, dt, unit, n=count * per, commute=op._commute, **kw)


def reduce_inter(comm, sendbuf, recvbuf, op, root, call: str) -> Coll:
    root = inter_root(comm, root, call)
    op = _op_arg(op, call)
    if root == PROC_NULL:
        return _idle(comm, call)
    if root == ROOT:
        r = _simple(recvbuf, False, root, 1, call)
        c = _ired(comm, call, "reduce", op, r.datatype, r.count, r.kind, root=root)
        _bind_red(c, RBUF, r, read=False, write=True, kind=r.kind)
        c.keep = (r, recvbuf)
        return c
    s = _simple(sendbuf, True, root, 1, call)
    c = _ired(comm, call, "reduce", op, s.datatype, s.count, s.kind, root=root)
    _bind_red(c, SBUF, s, read=True, write=False, kind=s.kind)
    c.keep = (s, sendbuf)
    return c


def allreduce_inter(comm, sendbuf, recvbuf, op, call: str) -> Coll:
    comm._check(call)
    op = _op_arg(op, call)
    r = _simple(recvbuf, False, 0, 1, call)
    s = _simple(sendbuf, True, 0, 1, call)
    _chk_cro(s, r, call)
    kind = _kind(r, s)
    c = _ired(comm, call, "allreduce", op, r.datatype, r.count, kind)
    _bind_red(c, RBUF, r, read=False, write=True, kind=kind)
    _bind_red(c, SBUF, s, read=True, write=False, kind=kind)
    c.keep = (s, r)
    return c


def reduce_scatter_block_inter(comm, sendbuf, recvbuf, op, call: str) -> Coll:
    comm._check(call)
    op = _op_arg(op, call)
    r = _simple(recvbuf, False, 0, 1, call)
    s = _simple(sendbuf, True, 0, comm._size, call)  # mpi4py: blocks of the LOCAL size
    _chk_cro(s, r, call)
    kind = _kind(r, s)
    c = _ired(comm, call, "reduce_scatter_block", op, r.datatype, r.count, kind)
    _bind_red(c, RBUF, r, read=False, write=True, kind=kind)
    _bind_red(c, SBUF, s, read=True, write=False, kind=kind)
    c.keep = (s, r)
    return c


def reduce_scatter_inter(comm, sendbuf, recvbuf, recvcounts, op, call: str) -> Coll:
    from .._buffers import check_array

    comm._check(call)
    op = _op_arg(op, call)
    size, me = comm._size, comm._rank
    r = _simple(recvbuf, False, 0, 1, call)
    s = _simple(sendbuf, True, 0, 1, call)
    if recvcounts is None:
        raise TypeError(f"{call}: recvcounts is required on an intercommunicator")
    counts = tuple(check_array(recvcounts, size, call))
    total = sum(counts)
    if s.datatype is not r.datatype and s.datatype != r.datatype:
        raise ValueError(f"{_prefix(call)}mismatch in send and receive MPI datatypes")
    if s.count != total:
        raise ValueError(f"{_prefix(call)}mismatch in send count {s.count} and sum(counts) {total}")
    if r.count != counts[me]:
        raise ValueError(f"{_prefix(call)}mismatch in receive count {r.count} and counts[{me}] {counts[me]}")
    check_op(op, r.datatype, call)
    unit, per = reduce_unit(op, r.datatype)
    kind = _kind(r, s)
    c = _icoll(comm, call, "reduce_scatter", kind, _sig(r.datatype), op, r.datatype, unit,
               counts=tuple(k * per for k in counts), n=s.count * per, commute=op._commute)
    _bind_red(c, RBUF, r, read=False, write=True, kind=kind)
    _bind_red(c, SBUF, s, read=True, write=False, kind=kind)
    c.keep = (s, r)
    return c


INTER = {"barrier": barrier_inter, "bcast": bcast_inter, "gather": gather_inter, "scatter": scatter_inter,
         "allgather": allgather_inter, "alltoall": alltoall_inter, "alltoallw": alltoallw_inter,
         "reduce": reduce_inter, "allreduce": allreduce_inter, "reduce_scatter_block": reduce_scatter_block_inter,
         "reduce_scatter": reduce_scatter_inter}


# --- reductions ----------------------------------------------------------------------------------


def _op_arg(op, call: str):
    if not isinstance(op, Op):
        raise TypeError(f"{call}: op must be an Op (got {type(op).__name__})")
    return op


def _chk_cro(s, r, call: str) -> None:
    """mpi4py's ``chk_cro_args``: send and receive agree in datatype and count."""
    if s.datatype is not r.datatype and s.datatype != r.datatype:
        raise ValueError(f"{_prefix(call)}mismatch in send and receive MPI datatypes")
    if s.count != r.count:
        raise ValueError(f"{_prefix(call)}mismatch in send count {s.count} and receive count {r.count}")


def _red(comm, call: str, coll: str, op, dt, count: int, kind: str, sig: int, **kw) -> Coll:
    check_op(op, dt, call)
    unit, per = reduce_unit(op, dt)
    n = count * per
    c = _coll(comm, call, coll, kind, sig, op, dt, unit, n=n, commute=op._commute, **kw)
    return c


def _bind_red(c: Coll, b: int, m, read: bool, write: bool, kind: str) -> None:
    """Bind a reduction buffer: contiguous memory of the run's kind in place, else a packed temporary."""
    if m.kind != kind:  # host memory in a device reduction: through a temporary in device memory
        if write:
            packed_out(c, b, m, m.count * m.blocks, None, c.unit, inp=read)
        else:
            packed_in(c, b, m, m.count * m.blocks, None, c.unit)
        return
    _bind(c, b, m, read, write)


def reduce(comm, sendbuf, recvbuf, op, root, call: str) -> Coll:
    root = _root(comm, root, call)
    op = _op_arg(op, call)
    me = comm._rank == root
    inplace = False
    r = s = None
    if me:
        r = _simple(recvbuf, False, root, 1, call)
        if is_in_place(sendbuf):
            inplace = True
        else:
            s = _simple(sendbuf, True, root, 1, call)
            _chk_cro(s, r, call)
    else:
        s = _simple(sendbuf, True, root, 1, call)
    m = r if r is not None else s
    kind = _kind(r, s)
    c = _red(comm, call, "reduce", op, m.datatype, m.count, kind, _sig(m.datatype), root=root, inplace=inplace)
    if r is not None:
        _bind_red(c, RBUF, r, read=inplace, write=True, kind=kind)
    if s is not None:
        _bind_red(c, SBUF, s, read=True, write=False, kind=kind)
    c.keep = (s, r)
    return c


def allreduce(comm, sendbuf, recvbuf, op, call: str, coll: str = "allreduce") -> Coll:
    comm._check(call)
    op = _op_arg(op, call)
    r = _simple(recvbuf, False, 0, 1, call)
    inplace = is_in_place(sendbuf)
    s = None
    if not inplace:
        s = _simple(sendbuf, True, 0, 1, call)
        _chk_cro(s, r, call)
    kind = _kind(r, s)
    c = _red(comm, call, coll, op, r.datatype, r.count, kind, _sig(r.datatype), inplace=inplace)
    _bind_red(c, RBUF, r, read=inplace, write=True, kind=kind)
    if s is not None:
        _bind_red(c, SBUF, s, read=True, write=False, kind=kind)
    c.keep = (s, r)
    return c


def scan(comm, sendbuf, recvbuf, op, call: str) -> Coll:
    return allreduce(comm, sendbuf, recvbuf, op, call, "scan")


def exscan(comm, sendbuf, recvbuf, op, call: str) -> Coll:
    return allreduce(comm, sendbuf, recvbuf, op, call, "exscan")


def reduce_scatter_block(comm, sendbuf, recvbuf, op, call: str) -> Coll:
    comm._check(call)
    op = _op_arg(op, call)
    size = comm._size
    inplace = is_in_place(sendbuf)
    s = None
    if inplace:
        r = _simple(recvbuf, False, 0, size, call)
        count = r.count
    else:
        r = _simple(recvbuf, False, 0, 1, call)
        s = _simple(sendbuf, True, 0, size, call)
        _chk_cro(s, r, call)
        count = r.count
    kind = _kind(r, s)
    c = _red(comm, call, "reduce_scatter_block", op, r.datatype, count, kind, _sig(r.datatype), inplace=inplace)
    _bind_red(c, RBUF, r, read=inplace, write=True, kind=kind)
    if s is not None:
        _bind_red(c, SBUF, s, read=True, write=False, kind=kind)
    c.keep = (s, r)
    return c


def reduce_scatter(comm, sendbuf, recvbuf, recvcounts, op, call: str) -> Coll:
    from .._buffers import check_array

    comm._check(call)
    op = _op_arg(op, call)
    size, me = comm._size, comm._rank
    r = _simple(recvbuf, False, 0, 1, call)
    inplace = is_in_place(sendbuf)
    s = None if inplace else _simple(sendbuf, True, 0, 1, call)
    if recvcounts is None and not inplace:
        counts = tuple(v[0] for v in comm._allgather_ints((r.count,), call))
    elif recvcounts is None:
        raise ValueError(f"{_prefix(call)}recvcounts is required with IN_PLACE")
    else:
        counts = tuple(check_array(recvcounts, size, call))
    total = sum(counts)
    if s is not None:
        if s.datatype is not r.datatype and s.datatype != r.datatype:
            raise ValueError(f"{_prefix(call)}mismatch in send and receive MPI datatypes")
        if s.count != total:
            raise ValueError(f"{_prefix(call)}mismatch in send count {s.count} and sum(counts) {total}")
        if r.count != counts[me]:
            raise ValueError(f"{_prefix(call)}mismatch in receive count {r.count} and counts[{me}] {counts[me]}")
    elif r.count != total:
        raise ValueError(f"{_prefix(call)}mismatch in receive count {r.count} and sum(counts) {total}")
    check_op(op, r.datatype, call)
    unit, per = reduce_unit(op, r.datatype)
    sched = _schedule("reduce_scatter", me, size, counts=tuple(k * per for k in counts), commute=op._commute,
                      inplace=inplace, unit=unit, memory=_kind(r, s))
    kind = _kind(r, s)
    c = Coll(comm, call, sched, unit, kind, {}, _sig(r.datatype), op, r.datatype)
    _bind_red(c, RBUF, r, read=inplace, write=True, kind=kind)
    if s is not None:
        _bind_red(c, SBUF, s, read=True, write=False, kind=kind)
    c.keep = (s, r)
    return c


# --- neighbor collectives (mpi4py ``_p_msg_cco.for_neighbor_*``; schedules: collectives.neighbor) --


def _neighbor(comm, call: str, sched_args: tuple, sblocks, rblocks, kind: str, sig: int) -> Coll:
    """A prepared neighbor collective: the one-round schedule, and this rank's edges to itself
    whose send and receive blocks differ in size recorded as errors at completion."""
    srcs, dsts, order = sched_args
    me = comm._rank
    key = ("neighbor", me, tuple(srcs), tuple(dsts), tuple(order), tuple(sblocks), tuple(rblocks))
    sched = _SCHEDS.get(key)
    if sched is None:
        sched = exchange(me, srcs, dsts, sblocks, rblocks, order)
        if len(_SCHEDS) >= _SCHEDS_MAX:
            _SCHEDS.clear()
        _SCHEDS[key] = sched
    c = Coll(comm, call, sched, 1, kind, {}, sig)
    for j, i in self_pairs(me, srcs, dsts, order):
        ns, nr = sblocks[j][1] - sblocks[j][0], rblocks[i][1] - rblocks[i][0]
        if ns != nr:
            c.soft.append((ERR_TRUNCATE if ns > nr else ERR_COUNT,
                           f"{call}: this rank sends itself {ns} bytes (send block {j}), "
                           f"receive block {i} holds {nr}"))
    return c


def _nb_recv_read(srcs) -> bool:
    """Whether a receive buffer must be read in (kept) where it is packed: blocks from PROC_NULL
    neighbors, or no neighbors, are left as they are."""
    from ..constants import PROC_NULL

    return not srcs or PROC_NULL in srcs


def neighbor_allgather(comm, v: bool, sendbuf, recvbuf, call: str) -> Coll:
    comm._check(call)
    srcs, dsts, order = comm._nbrs()
    s = _simple(sendbuf, True, 0, 0, call)
    r = _vector(recvbuf, False, 0, len(srcs), call) if v else _simple(recvbuf, False, 0, len(srcs), call)
    kind = _kind(r, s)
    keep = _nb_recv_read(srcs)
    n = s.nbytes
    if v:
        rsizes = [cnt * r.datatype._size for cnt in r.counts]
        rblocks = prefix_blocks(rsizes)
    else:
        rblocks = uniform_blocks(len(srcs), r.nbytes)
    c = _neighbor(comm, call, (srcs, dsts, order), [(0, n)] * len(dsts), rblocks, kind, _sig_of(r, s))
    if v:
        _bindv(c, RBUF, r, read=keep, write=True)
    else:
        _bind(c, RBUF, r, read=keep, write=True)
    _bind(c, SBUF, s, read=True, write=False)
    c.keep = (s, r)
    return c


def neighbor_alltoall(comm, v: bool, sendbuf, recvbuf, call: str) -> Coll:
    comm._check(call)
    srcs, dsts, order = comm._nbrs()
    if v:
        s = _vector(sendbuf, True, 0, len(dsts), call)
        r = _vector(recvbuf, False, 0, len(srcs), call)
        sblocks = prefix_blocks([cnt * s.datatype._size for cnt in s.counts])
        rblocks = prefix_blocks([cnt * r.datatype._size for cnt in r.counts])
    else:
        s = _simple(sendbuf, True, 0, len(dsts), call)
        r = _simple(recvbuf, False, 0, len(srcs), call)
        sblocks, rblocks = uniform_blocks(len(dsts), s.nbytes), uniform_blocks(len(srcs), r.nbytes)
    kind = _kind(r, s)
    keep = _nb_recv_read(srcs)
    c = _neighbor(comm, call, (srcs, dsts, order), sblocks, rblocks, kind, _sig_of(r, s))
    if v:
        _bindv(c, RBUF, r, read=keep, write=True)
        _bindv(c, SBUF, s, read=True, write=False)
    else:
        _bind(c, RBUF, r, read=keep, write=True)
        _bind(c, SBUF, s, read=True, write=False)
    c.keep = (s, r)
    return c


def neighbor_alltoallw(comm, sendbuf, recvbuf, call: str) -> Coll:
    comm._check(call)
    srcs, dsts, order = comm._nbrs()
    r, rc, rd, rt = _wspec(recvbuf, False, len(srcs), call)
    s, sc, sd, st = _wspec(sendbuf, True, len(dsts), call)
    if r is None:
        r = raw_msg(HOST, 0, 0)
    if s is None:
        s = raw_msg(HOST, 0, 0)
    kind = _kind(r, s)
    rblocks = prefix_blocks([cnt * t._size for cnt, t in zip(rc, rt)])
    sblocks = prefix_blocks([cnt * t._size for cnt, t in zip(sc, st)])
    c = _neighbor(comm, call, (srcs, dsts, order), sblocks, rblocks, kind, 0)
    _bindv(c, RBUF, r, read=_nb_recv_read(srcs), write=True, counts=rc, displs=rd, types=rt)
    _bindv(c, SBUF, s, read=True, write=False, counts=sc, displs=sd, types=st)
    c.keep = (s, r)
    return c
