"""Intercommunicators (L5): two groups, point-to-point and collectives addressing the
remote one; Create_intercomm, Create_from_groups, Merge, Dup/Idup/Split/Create.

Theory of operation
===================
Point-to-point ranks and collectives address the remote group, ``Get_size`` and
``Get_rank`` the local one.  Each intercommunicator has a private intracommunicator of
its local group on the context block after its own; the local phases of collectives run
on it.  Creation swaps the groups between two leaders over a peer communicator, then all
agree on a context id.
"""

from __future__ import annotations

import struct
import zlib

import numpy as _np

from .. import _ctxid
from .. import keyval as _keyval
from ..collectives import _calls
from ..collectives import _execute as _coll_exec
from ..collectives import _lower
from .. import _p2p
from .._services import (FREED, SENT, world_rank)
from ..constants import (
    COMM_TYPE_SHARED,
    CONGRUENT,
    IDENT,
    SIMILAR,
    UNDEFINED,
    UNEQUAL,
)
from ..errors import (
    ERR_ARG,
    ERR_COMM,
    ERR_GROUP,
    ERR_RANK,
    Errhandler,
    error,
)
from ..errors import Exception as MPIException
from ..group import Group
from ..op import MAX as _MAX
from ..request import Request, all_of, joint, part_done
from .common import CLASSES, GROUP_TAGS, comm_world, idup_tag, info_arg, \
    info_items, int_arg
from .base import Comm
from .intra import Intracomm

__all__ = ["Intercomm"]


class Intercomm(Comm):
    """Intercommunicator (MPI_Comm of two groups).

    Point-to-point ranks and collectives address the REMOTE group (``_w``); ``Get_size`` and
    ``Get_rank`` are about the local group (``_rw``).  ``_local`` is a private
    intracommunicator of the local group (the context block after the intercommunicator's):
    the local phases of collectives run on it, and the intercommunicator's collective tags
    are its tags, so the two never cross."""

    __slots__ = ("_local",)
    _inter = True

    def _init_from(self, comm) -> None:
        if isinstance(comm, Comm) and comm._ctx >= 0 and not isinstance(comm, Intercomm):
            raise TypeError(f"Intercomm: expecting an intercommunicator (got {type(comm).__name__})")
        super()._init_from(comm)

    def _set_null(self) -> None:
        super()._set_null()
        self._local = None

    def _copy_from(self, comm: "Comm") -> None:
        super()._copy_from(comm)
        self._local = comm._local

    def _ctag(self) -> int:
        return self._local._ctag()

    def Is_inter(self) -> bool:
        """Return whether this is an intercommunicator: always (MPI_Comm_test_inter)."""
        self._check("Comm.Is_inter")
        return True

    is_inter = property(Is_inter)

    # --- queries --------------------------------------------------------------------------
    def Get_remote_size(self) -> int:
        """Number of processes of the remote group (MPI_Comm_remote_size)."""
        self._check("Intercomm.Get_remote_size")
        return len(self._w)

    def Get_remote_group(self) -> Group:
        """The remote group (MPI_Comm_remote_group)."""
        self._check("Intercomm.Get_remote_group")
        return Group._of(self._w, self._rw[self._rank])

    remote_size = property(Get_remote_size)
    remote_group = property(Get_remote_group)

    def Compare(self, comm: "Comm") -> int:
        """IDENT, CONGRUENT, SIMILAR or UNEQUAL (MPI_Comm_compare): both groups compared."""
        self._check("Comm.Compare")
        comm._check("Comm.Compare")
        if not isinstance(comm, Intercomm):
            return UNEQUAL
        if self._ctx == comm._ctx:
            return IDENT
        if self._rw == comm._rw and self._w == comm._w:
            return CONGRUENT
        if set(self._rw) == set(comm._rw) and set(self._w) == set(comm._w):
            return SIMILAR
        return UNEQUAL

    # --- lifecycle ------------------------------------------------------------------------
    def Free(self) -> None:
        """Free the intercommunicator (MPI_Comm_free) and its private local communicator."""
        lc = self._local
        super().Free()
        if lc is not None and lc._ctx >= 0 and lc._ctx not in FREED:
            lc.Free()

    def _agree(self, kind: int, call: str, nblocks: int = 2) -> int:
        """A fresh context id agreed by both groups (the key, as Intracomm._agree's: parent
        context, kind of creation -- 5 and up on intercommunicators -- and the call's tag)."""
        return _ctxid.allocate(lambda v: _lower.allmax_inter(self, v, call), (self._ctx, 4 + kind, self._ctag()),
                               nblocks)

    def Dup(self, info=None) -> "Intercomm":
        """Duplicate the intercommunicator (MPI_Comm_dup): same groups, a new context."""
        try:
            self._check("Comm.Dup")
            info_arg(info, "Comm.Dup")
            ctx = self._agree(1, "Comm.Dup")
            c = _new_inter(ctx, self._rw, self._w, self._rw[self._rank], self._errh)
            c._info = dict(self._info or {}) if info is None else info_items(info)
            _keyval.on_dup(self, c, "Comm.Dup")  # attribute copy callbacks (frees c if one fails)
            return c
        except MPIException as e:
            self._raise(e)

    Clone = Dup

    def Idup(self, info=None) -> tuple:
        """Nonblocking duplicate (MPI_Comm_idup; with ``info``: MPI_Comm_idup_with_info).

        Returns ``(comm, request)``; ``comm`` is usable once ``request`` completes.  Each
        agreement attempt is two nonblocking maxima at once: over the local group (on the
        private local communicator) and across (an intercommunicator allreduce gives each
        group the other's maximum), so the call never waits for the other ranks."""
        call = "Comm.Idup"
        try:
            self._check(call)
            info_arg(info, call)
            c = Intercomm.__new__(Intercomm)
            c._set_null()
            t = self._ctag()  # in call order on every rank of both groups
            s1, r1, s2, r2 = (_np.zeros(1, _np.int64) for _ in range(4))
            local = _calls.allreduce(self._local, s1, r1, _MAX, call)
            across = _calls.INTER["allreduce"](self, s2, r2, _MAX, call)
            j = joint(1)
            j.st_source, j.st_tag, j.st_nbytes = -1, -1, 0

            def start_max(values, attempt):
                s1[0] = s2[0] = values[0]
                local.tag = across.tag = idup_tag(t, attempt)
                x = all_of([_coll_exec.start(local), _coll_exec.start(across)], None)
                return x, lambda: (max(int(r1[0]), int(r2[0])),)

            def done(ctx, err, errmsg):
                if not err:
                    try:
                        _new_inter(ctx, self._rw, self._w, self._rw[self._rank], self._errh, c)
                        c._info = dict(self._info or {}) if info is None else info_items(info)
                        _keyval.on_dup(self, c, "Comm.Dup")
                    except MPIException as e:  # a copy callback failed: the request fails
                        j.err, j.errmsg = e.Get_error_class(), str(e)
                else:
                    j.err, j.errmsg = err, errmsg
                part_done(j, j)

            _ctxid.Allocation(start_max, (self._ctx, 9, t), done, nblocks=2).start()
            return c, Request._of(j, self, None, (local, across, s1, r1, s2, r2))
        except MPIException as e:
            self._raise(e)

    def Idup_with_info(self, info) -> tuple:
        """Nonblocking duplicate with new info hints (MPI_Comm_idup_with_info)."""
        info_arg(info, "Comm.Idup_with_info", none_ok=False)
        return self.Idup(info)

    def Dup_with_info(self, info) -> "Intercomm":
        """Duplicate with new info hints (MPI_Comm_dup_with_info)."""
        info_arg(info, "Comm.Dup_with_info", none_ok=False)
        return self.Dup(info)

    def Split(self, color: int = 0, key: int = 0) -> "Intercomm":
        """Split both groups by color (MPI_Comm_split): the local ranks of one color, ordered by
        key, joined with the remote ranks of the same color; COMM_NULL for UNDEFINED or a color
        the other group does not have."""
        return self._split_checked(color, key)

    def _split(self, color: int, key: int, call: str) -> "Intercomm":
        mine = _lower.allgather(self._local, (color, key), call)
        theirs = _lower.allgather_inter(self, (color, key), call)
        ctx = self._agree(2, call)
        if color == UNDEFINED:
            return Intercomm()
        local = [self._rw[r] for _, r in sorted((k, r) for r, (c, k) in enumerate(mine) if c == color)]
        remote = [self._w[r] for _, r in sorted((k, r) for r, (c, k) in enumerate(theirs) if c == color)]
        if not remote:
            return Intercomm()
        return _new_inter(ctx, local, remote, self._rw[self._rank], self._errh)

    def Split_type(self, split_type: int, key: int = 0, info=None) -> "Intercomm":
        """Split both groups by node (MPI_Comm_split_type): COMM_TYPE_SHARED joins the ranks of
        each group that share this node's memory with those of the other group on it
        (gpumpi's ranks all run on one node: the bootstrap has no multi-node mode yet);
        UNDEFINED gives COMM_NULL."""
        try:
            call = "Comm.Split_type"
            self._check(call)
            split_type, key = int_arg(split_type, call, "split_type"), int_arg(key, call, "key")
            info_arg(info, call)
            if split_type == UNDEFINED:
                return self._split(UNDEFINED, key, call)
            if split_type != COMM_TYPE_SHARED:
                raise NotImplementedError(f"{call}: split type {split_type} is not supported on intercommunicators "
                                          f"(COMM_TYPE_SHARED and UNDEFINED are)")
            return self._split(0, key, call)  # one color: the bootstrap runs every rank on one node
        except MPIException as e:
            self._raise(e)

    def Create(self, group: Group) -> "Intercomm":
        """The intercommunicator of a subgroup of each group (MPI_Comm_create): every process
        passes a subgroup of its local group; COMM_NULL outside it, or when either is empty."""
        try:
            call = "Comm.Create"
            self._check(call)
            if not isinstance(group, Group):
                raise TypeError(f"{call}: expecting a Group (got {type(group).__name__})")
            group._check(call)
            mine = tuple(group._ranks)
            if not set(mine) <= set(self._rw):
                raise error(ERR_GROUP, f"{call}: the group is not a subgroup of the local group ({list(mine)})")
            theirs = _lower.allgather_inter(self, mine, call)[0]
            ctx = self._agree(3, call)
            me = self._rw[self._rank]
            if me not in mine or not theirs:
                return Intercomm()
            return _new_inter(ctx, mine, theirs, me, self._errh)
        except MPIException as e:
            self._raise(e)

    def Merge(self, high: bool = False) -> Intracomm:
        """Merge both groups into one intracommunicator (MPI_Intercomm_merge): the group that
        passes ``high=False`` comes first (equal values: the group holding the lower world rank)."""
        try:
            call = "Intercomm.Merge"
            self._check(call)
            high = bool(high)
            rhigh = bool(_lower.allgather_inter(self, high, call)[0])
            ctx = self._agree(4, call, nblocks=1)
            local_first = high < rhigh or (high == rhigh and self._rw[0] < self._w[0])
            return self._new(ctx, self._rw + self._w if local_first else self._w + self._rw)
        except MPIException as e:
            self._raise(e)

    @classmethod
    def Create_from_groups(cls, local_group, local_leader: int, remote_group, remote_leader: int,
                           stringtag: str = "org.mpi4py", info=None, errhandler=None) -> "Intercomm":
        """An intercommunicator of two disjoint groups without a parent communicator
        (MPI_Intercomm_create_from_groups): collective over both groups' members, who pass the
        same ``stringtag``.  The leaders are checked for range; the members of both groups
        agree on the context directly, so the leaders play no further part."""
        call = "Intercomm.Create_from_groups"
        for what, g in (("local_group", local_group), ("remote_group", remote_group)):
            if not isinstance(g, Group):
                raise TypeError(f"{call}: {what} must be a Group (got {type(g).__name__})")
        if not isinstance(stringtag, str):
            raise TypeError(f"{call}: stringtag must be a str ({type(stringtag).__name__})")
        info_arg(info, call)
        if errhandler is not None and not isinstance(errhandler, Errhandler):
            raise TypeError(f"{call}: expecting an Errhandler or None (got {type(errhandler).__name__})")
        world = comm_world()
        try:
            local_group._check(call)
            remote_group._check(call)
            for what, g, ld in (("local", local_group, local_leader), ("remote", remote_group, remote_leader)):
                ld = int_arg(ld, call, f"{what}_leader")
                if not 0 <= ld < len(g._ranks):
                    raise error(ERR_RANK, f"{call}: invalid {what} leader ({ld}, group size {len(g._ranks)})")
            me = world_rank()
            if me not in local_group._index:
                raise error(ERR_GROUP, f"{call}: the calling process is not in the local group "
                                       f"(world rank {me})")
            both = set(local_group._ranks) & set(remote_group._ranks)
            if both:
                raise error(ERR_GROUP, f"{call}: the groups overlap (world ranks {sorted(both)})")
            h = zlib.crc32(stringtag.encode())
            members = sorted(set(local_group._ranks) | set(remote_group._ranks))
            ctx, _ = world._agree(call, (), nblocks=2, members=members, tag=-(GROUP_TAGS + (h & 0x1FFFFFFF)),
                                  key=(-1, 3, h))
            c = _new_inter(ctx, local_group._ranks, remote_group._ranks, me,
                           world._errh if errhandler is None else Errhandler(errhandler))
            c._info = info_items(info)
            return c
        except MPIException as e:
            world._raise(e)


def _new_inter(ctx: int, local, remote, me: int, errh, c: "Intercomm | None" = None) -> Intercomm:
    """An intercommunicator on context block ``ctx``, its local communicator on ``ctx + 4``
    (``c``: the object to set up, as Idup's, made before its context was agreed)."""
    c = Intercomm.__new__(Intercomm) if c is None else c
    c._setup(ctx, local, me, remote=remote)
    lc = Intracomm.__new__(Intracomm)
    lc._setup(ctx + 4, local, me)
    c._local = lc
    c._errh = errh
    return c


def _leader_swap(peer_comm, rl: int, tag: int, values, call: str) -> tuple:
    """The leaders of Create_intercomm swap integer tuples over ``peer_comm`` (its point-to-point
    context, ``tag``), sized by the message."""
    wpeer = peer_comm._w[rl]
    r = _p2p.recv_bytes(None, rl, wpeer, tag, peer_comm._ctx, call)
    s = _p2p.send_bytes(memoryview(struct.pack(f"<{len(values)}q", *values)), wpeer, peer_comm._rank, tag,
                        peer_comm._ctx, call)
    peer_comm._cwait([x for x in (s, r) if x is not None and x is not SENT])
    data = bytes(r.mem)
    return struct.unpack(f"<{len(data) // 8}q", data)


def _intercomm_create(local: Intracomm, leader: int, peer_comm, remote_leader, tag: int, call: str) -> Intercomm:
    """MPI_Intercomm_create (Intracomm.Create_intercomm): the leaders swap their groups, the
    local groups learn the other group from their leader, then both agree on a context."""
    me = local._rw[local._rank]
    is_leader = local._rank == leader
    hdr = bad = None
    if is_leader:
        try:
            if not isinstance(peer_comm, Comm):
                raise TypeError(f"{call}: peer_comm must be a Comm (got {type(peer_comm).__name__})")
            peer_comm._check(call)
            rl = peer_comm._peer(remote_leader, call, "remote leader")
            if peer_comm._w[rl] in local._rw:
                raise error(ERR_COMM, f"{call}: the remote leader (rank {rl} of peer_comm) is in the local group")
            got = _leader_swap(peer_comm, rl, tag, (local._ctx,) + local._rw, call)
            hdr = (0, "", got[0], got[1:])
        except MPIException as e:
            hdr = (e.Get_error_class(), str(e), 0, ())
        except TypeError as e:
            hdr, bad = (ERR_ARG, str(e), 0, ()), e
    hdr = _lower.bcast(local, hdr, leader, call)  # the whole local group fails alike
    code, msg, rctx, remote = hdr
    if bad is not None:
        raise bad
    if code:
        raise error(code, msg)
    if set(remote) & set(local._rw):
        raise error(ERR_COMM, f"{call}: the local and remote groups overlap (world ranks "
                              f"{sorted(set(remote) & set(local._rw))})")

    def allmax(values):
        v = _lower.allreduce(local, tuple(values), _lower._tmax, call)
        if is_leader:
            v = _lower._tmax(v, _leader_swap(peer_comm, rl, tag, v, call))
        return _lower.bcast(local, v, leader, call)

    ctx = _ctxid.allocate(allmax, (min(local._ctx, rctx), 3, max(local._ctx, rctx), tag), nblocks=2)
    return _new_inter(ctx, local._rw, remote, me, local._errh)


Comm._hbase = Comm
#: Null communicator (MPI_COMM_NULL).


Intercomm.create_from_leaders = staticmethod(_intercomm_create)
CLASSES["inter"] = Intercomm
