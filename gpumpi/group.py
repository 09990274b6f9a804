"""Process groups (MPI_Group), pure (L1).

Theory of operation
===================
A group is an ordered tuple of *world* ranks plus the calling process's world
rank.  Group rank ``i`` is ``ranks[i]``; every operation (incl, excl, ranges, set
operations, translation, comparison) is arithmetic on these tuples, following
MPI-4 section 7.3.  Set operations keep the order the standard prescribes: union
is the first group followed by the members of the second not in the first;
intersection and difference keep the first group's order.
"""

from __future__ import annotations

from .constants import IDENT, PROC_NULL, SIMILAR, UNDEFINED, UNEQUAL
from .errors import ERR_ARG, ERR_GROUP, ERR_RANK, error
from ._handles import Handle, Table

_NULL_H = 0x08000000
_EMPTY_H = 0x48000000


class Group(Handle):
    """Group of processes (MPI_Group)."""

    __slots__ = ("_ranks", "_me", "_index", "_null", "_h", "__weakref__")
    _hnull = _NULL_H
    _htable = Table("Group", -0x78000000)

    def __init__(self, group: "Group | None" = None) -> None:
        if group is None:
            self._set((), -1, null=True)
        elif not isinstance(group, Group):
            raise TypeError(f"Group: expecting a Group (got {type(group).__name__})")
        else:
            self._set(group._ranks, group._me, group._null, group._h)

    def _set(self, ranks, me: int, null: bool = False, handle: int | None = None) -> None:
        self._ranks = tuple(ranks)
        self._me = me
        self._index = {r: i for i, r in enumerate(self._ranks)}
        self._null = null
        if handle is None:
            # as MPICH, every empty group is GROUP_EMPTY
            handle = _NULL_H if null else _EMPTY_H if not self._ranks else self._htable.new()
        self._h = handle

    @classmethod
    def _of(cls, ranks, me: int) -> "Group":
        g = cls.__new__(cls)
        g._set(ranks, me)
        cls._htable.add(g)
        return g

    def _check(self, call: str) -> None:
        if self._null:
            raise error(ERR_GROUP, f"{call}: null group")

    # --- handle: two groups are equal when they are the same handle (MPI_Group_compare
    # tells IDENT/SIMILAR/UNEQUAL for the members)
    def _hval(self) -> int:
        return self._h

    def _hnullify(self) -> None:
        self._set((), -1, null=True)

    def __bool__(self) -> bool:
        return not self._null

    def __repr__(self) -> str:
        return "<Group GROUP_NULL>" if self._null else f"<Group size={len(self._ranks)}>"

    # --- queries ------------------------------------------------------------------------
    def Get_size(self) -> int:
        """Number of processes in the group (MPI_Group_size)."""
        self._check("Group.Get_size")
        return len(self._ranks)

    def Get_rank(self) -> int:
        """Rank of this process in the group, or UNDEFINED (MPI_Group_rank)."""
        self._check("Group.Get_rank")
        return self._index.get(self._me, UNDEFINED)

    size = property(Get_size)
    rank = property(Get_rank)

    def Translate_ranks(self, ranks=None, group: "Group | None" = None) -> list[int]:
        """Ranks of ``ranks`` (of self) in ``group`` (MPI_Group_translate_ranks)."""
        self._check("Group.Translate_ranks")
        if group is not None:
            group._check("Group.Translate_ranks")
        if ranks is None:
            ranks = range(len(self._ranks))
        out = []
        for r in ranks:
            r = int(r)
            if r == PROC_NULL:
                out.append(PROC_NULL)
                continue
            if not 0 <= r < len(self._ranks):
                raise error(ERR_RANK, f"Group.Translate_ranks: rank out of range ({r}, size {len(self._ranks)})")
            if group is None:
                out.append(r)
            else:
                out.append(group._index.get(self._ranks[r], UNDEFINED))
        return out

    def Compare(self, group: "Group") -> int:
        """IDENT, SIMILAR or UNEQUAL (MPI_Group_compare).

        ``g1.Compare(g2)`` and, as in mpi4py, ``Group.Compare(g1, g2)``."""
        group1, group2 = self, group
        for g in (group1, group2):
            if not isinstance(g, Group):
                raise TypeError(f"Group.Compare: expecting a Group (got {type(g).__name__})")
            g._check("Group.Compare")
        if group1._ranks == group2._ranks:
            return IDENT
        if set(group1._ranks) == set(group2._ranks):
            return SIMILAR
        return UNEQUAL

    # --- constructors -------------------------------------------------------------------
    def Dup(self) -> "Group":
        """Duplicate the group (MPI_Group_dup in spirit)."""
        self._check("Group.Dup")
        return Group._of(self._ranks, self._me)

    def _ranks_arg(self, ranks, call: str) -> list[int]:
        out = [int(r) for r in ranks]
        n = len(self._ranks)
        for r in out:
            if not 0 <= r < n:
                raise error(ERR_RANK, f"{call}: rank out of range ({r}, size {n})")
        if len(set(out)) != len(out):
            raise error(ERR_RANK, f"{call}: ranks are not distinct ({out})")
        return out

    def Incl(self, ranks) -> "Group":
        """Group of the listed ranks, in that order (MPI_Group_incl)."""
        self._check("Group.Incl")
        rs = self._ranks_arg(ranks, "Group.Incl")
        return Group._of([self._ranks[r] for r in rs], self._me)

    def Excl(self, ranks) -> "Group":
        """Group without the listed ranks (MPI_Group_excl)."""
        self._check("Group.Excl")
        drop = set(self._ranks_arg(ranks, "Group.Excl"))
        return Group._of([w for i, w in enumerate(self._ranks) if i not in drop], self._me)

    def _expand(self, ranges, call: str) -> list[int]:
        out: list[int] = []
        n = len(self._ranks)
        for rng in ranges:
            try:
                first, last, stride = (int(x) for x in rng)
            except (TypeError, ValueError):
                raise ValueError(f"{call}: each range must be (first, last, stride) ({rng!r})") from None
            if stride == 0:
                raise error(ERR_ARG, f"{call}: zero stride in range ({first}, {last}, {stride})")
            if (last - first) * stride < 0:
                continue
            # only the ranks a range produces must be valid (MPI-4 section 7.3.2)
            produced = range(first, last + (1 if stride > 0 else -1), stride)
            for r in (produced[0], produced[-1]):
                if not 0 <= r < n:
                    raise error(ERR_RANK, f"{call}: rank out of range ({r}, size {n}, range {tuple(rng)})")
            out.extend(produced)
        if len(set(out)) != len(out):
            raise error(ERR_RANK, f"{call}: ranges name a rank twice ({list(ranges)})")
        return out

    def Range_incl(self, ranks) -> "Group":
        """Group of the ranks in (first, last, stride) triplets (MPI_Group_range_incl)."""
        self._check("Group.Range_incl")
        return Group._of([self._ranks[r] for r in self._expand(ranks, "Group.Range_incl")], self._me)

    def Range_excl(self, ranks) -> "Group":
        """Group without the ranks in (first, last, stride) triplets (MPI_Group_range_excl)."""
        self._check("Group.Range_excl")
        drop = set(self._expand(ranks, "Group.Range_excl"))
        return Group._of([w for i, w in enumerate(self._ranks) if i not in drop], self._me)

    @classmethod
    def Union(cls, group1: "Group", group2: "Group") -> "Group":
        """Members of group1, then those of group2 not in group1 (MPI_Group_union)."""
        group1._check("Group.Union")
        group2._check("Group.Union")
        s = set(group1._ranks)
        return Group._of(list(group1._ranks) + [r for r in group2._ranks if r not in s], group1._me)

    @classmethod
    def Intersection(cls, group1: "Group", group2: "Group") -> "Group":
        """Members of group1 also in group2, in group1's order (MPI_Group_intersection)."""
        group1._check("Group.Intersection")
        group2._check("Group.Intersection")
        s = set(group2._ranks)
        return Group._of([r for r in group1._ranks if r in s], group1._me)

    @classmethod
    def Difference(cls, group1: "Group", group2: "Group") -> "Group":
        """Members of group1 not in group2 (MPI_Group_difference)."""
        group1._check("Group.Difference")
        group2._check("Group.Difference")
        s = set(group2._ranks)
        return Group._of([r for r in group1._ranks if r not in s], group1._me)

    Intersect = Intersection

    @classmethod
    def Create_from_session_pset(cls, session, pset_name: str) -> "Group":
        """Create a group from a session process set (MPI_Group_from_session_pset).

        ``session`` is a :class:`gpumpi.session.Session`; ``pset_name`` one of its process
        sets (``"mpi://WORLD"``, ``"mpi://SELF"``)."""
        make = getattr(type(session), "_group", None)
        if make is None:
            raise TypeError(f"Group.Create_from_session_pset: expecting a Session (got {type(session).__name__})")
        return make(session, pset_name, "Group.Create_from_session_pset", cls)

    def Free(self) -> None:
        """Free the group (MPI_Group_free)."""
        self._check("Group.Free")
        self._set((), -1, null=True)


Group._hbase = Group
#: Null group (MPI_GROUP_NULL).
GROUP_NULL = Group._htable.constant(Group(), "GROUP_NULL")
#: The group with no members (MPI_GROUP_EMPTY).
GROUP_EMPTY = Group._htable.constant(Group._of((), -1), "GROUP_EMPTY")
