"""Tests for gpumpi.group.Group against the MPI-4 rules (section 7.3).

Reference semantics (naive, written from the standard):

* ``Incl(ranks)``: the listed ranks, in the listed order; ranks valid and distinct.
* ``Excl(ranks)``: the group without the listed ranks, in the original order.
* range triplet (first, last, stride): ranks ``first + k*stride`` for
  ``k = 0 .. floor((last - first) / stride)`` (empty when that is negative);
  stride may be negative but not zero; every *computed* rank must be valid.
* ``Union``: group1's members, then group2's members not in group1, in group2's order.
* ``Intersection``/``Difference``: group1's order.
* ``Translate_ranks``: rank in group2 of the same process, or UNDEFINED; PROC_NULL
  maps to PROC_NULL.
* ``Compare``: IDENT (same members, same order), SIMILAR (same members), UNEQUAL.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpumpi.constants import IDENT, PROC_NULL, SIMILAR, UNDEFINED, UNEQUAL
from gpumpi.errors import ERR_ARG, ERR_GROUP, ERR_RANK
from gpumpi.errors import Exception as MPIException
from gpumpi.group import GROUP_EMPTY, GROUP_NULL, Group

SETTINGS = settings(max_examples=150, deadline=None)


def members(g: Group) -> list[int]:
    """World ranks of a group, through the public API only."""
    world = Group._of(tuple(range(256)), 0)
    return g.Translate_ranks(list(range(g.Get_size())), world)


# --- strategies -------------------------------------------------------------------------

world_ranks = st.lists(st.integers(0, 15), unique=True, max_size=10)
me_s = st.integers(0, 15)


@st.composite
def group_and_me(draw):
    ranks = draw(world_ranks)
    me = draw(me_s)
    return ranks, me


# --- reference model --------------------------------------------------------------------


def ref_range(first, last, stride):
    count = (last - first) // stride + 1  # Python // is floor division
    return [first + k * stride for k in range(max(count, 0))]


def ref_ranges(triplets):
    out = []
    for f, l, s in triplets:
        out += ref_range(f, l, s)
    return out


def ref_rank(ranks, me):
    return ranks.index(me) if me in ranks else UNDEFINED


def ref_compare(a, b):
    if a == b:
        return IDENT
    if sorted(a) == sorted(b):
        return SIMILAR
    return UNEQUAL


def expect_err(cls, fn, *args):
    with pytest.raises(MPIException) as ei:
        fn(*args)
    assert ei.value.error_class == cls, (ei.value.error_class, cls, str(ei.value))
    return ei.value


# --- basics -----------------------------------------------------------------------------


@SETTINGS
@given(group_and_me())
def test_size_rank_members(gm):
    ranks, me = gm
    g = Group._of(tuple(ranks), me)
    assert g.Get_size() == g.size == len(ranks)
    assert g.Get_rank() == g.rank == ref_rank(ranks, me)
    assert members(g) == ranks


def test_empty_and_null():
    assert GROUP_EMPTY.Get_size() == 0
    assert GROUP_EMPTY.Get_rank() == UNDEFINED
    assert bool(GROUP_EMPTY) and not bool(GROUP_NULL)
    assert Group() == GROUP_NULL
    assert GROUP_EMPTY != GROUP_NULL


def test_dup_and_copy_constructor():
    g = Group._of((4, 2, 9), 2)
    for h in (g.Dup(), Group(g)):
        assert members(h) == [4, 2, 9]
        assert h.Get_rank() == 1
        assert Group.Compare(g, h) == IDENT
        assert h is not g


def test_free_makes_null():
    g = Group._of((1, 2), 1)
    h = g.Dup()
    g.Free()
    assert not g
    expect_err(ERR_GROUP, g.Get_size)
    assert members(h) == [1, 2]  # the duplicate is independent


# --- Incl / Excl ------------------------------------------------------------------------


@SETTINGS
@given(group_and_me(), st.data())
def test_incl(gm, data):
    ranks, me = gm
    g = Group._of(tuple(ranks), me)
    perm = data.draw(st.permutations(range(len(ranks))))
    sel = perm[: data.draw(st.integers(0, len(perm)))]
    h = g.Incl(sel)
    want = [ranks[i] for i in sel]
    assert members(h) == want
    assert h.Get_rank() == ref_rank(want, me)


@SETTINGS
@given(group_and_me(), st.data())
def test_excl(gm, data):
    ranks, me = gm
    g = Group._of(tuple(ranks), me)
    drop = data.draw(st.lists(st.integers(0, max(len(ranks) - 1, 0)), unique=True)) if ranks else []
    h = g.Excl(drop)
    want = [w for i, w in enumerate(ranks) if i not in drop]
    assert members(h) == want
    assert h.Get_rank() == ref_rank(want, me)


@pytest.mark.parametrize("bad", [[3], [-1], [0, 5], [100]])
def test_incl_excl_out_of_range(bad):
    g = Group._of((10, 11, 12), 10)
    expect_err(ERR_RANK, g.Incl, bad)
    expect_err(ERR_RANK, g.Excl, bad)


def test_incl_excl_duplicates_rejected():
    g = Group._of((10, 11, 12), 10)
    for fn in (g.Incl, g.Excl):
        with pytest.raises(MPIException) as ei:
            fn([1, 1])
        assert ei.value.error_class in (ERR_RANK, ERR_ARG)


def test_incl_empty_and_excl_all():
    g = Group._of((3, 1, 2), 1)
    assert g.Incl([]).Get_size() == 0
    assert g.Excl([0, 1, 2]).Get_size() == 0
    assert g.Excl([]).Get_size() == 3 and members(g.Excl([])) == [3, 1, 2]


# --- ranges -----------------------------------------------------------------------------


@st.composite
def triplets_for(draw, n):
    """Triplets with first/last in range and distinct computed ranks."""
    out, used = [], set()
    for _ in range(draw(st.integers(0, 4))):
        first = draw(st.integers(0, n - 1))
        last = draw(st.integers(0, n - 1))
        stride = draw(st.integers(-4, 4).filter(bool))
        r = ref_range(first, last, stride)
        if used.intersection(r):
            continue
        used.update(r)
        out.append((first, last, stride))
    return out


@SETTINGS
@given(st.integers(1, 12), me_s, st.data())
def test_range_incl_excl(n, me, data):
    ranks = list(range(100, 100 + n))
    g = Group._of(tuple(ranks), 100 + me)
    trip = data.draw(triplets_for(n))
    sel = ref_ranges(trip)
    inc = g.Range_incl(trip)
    assert members(inc) == [ranks[i] for i in sel]
    assert inc.Get_rank() == ref_rank([ranks[i] for i in sel], 100 + me)
    exc = g.Range_excl(trip)
    assert members(exc) == [w for i, w in enumerate(ranks) if i not in sel]
    # consistency with the explicit-list forms
    assert members(g.Incl(sel)) == members(inc)
    assert members(g.Excl(sel)) == members(exc)


RANGE_EXAMPLES = [
    ([(0, 7, 1)], [0, 1, 2, 3, 4, 5, 6, 7]),
    ([(0, 7, 2)], [0, 2, 4, 6]),
    ([(7, 0, -3)], [7, 4, 1]),
    ([(6, 1, -2)], [6, 4, 2]),
    ([(1, 1, 1)], [1]),
    ([(1, 1, -5)], [1]),
    ([(5, 2, 1)], []),  # first > last with positive stride: empty
    ([(2, 5, -1)], []),  # first < last with negative stride: empty
    ([(0, 3, 3), (1, 2, 1), (7, 4, -1)], [0, 3, 1, 2, 7, 6, 5, 4]),
    ([], []),
]


@pytest.mark.parametrize("trip,sel", RANGE_EXAMPLES)
def test_range_examples(trip, sel):
    g = Group._of(tuple(range(20, 28)), 20)
    assert members(g.Range_incl(trip)) == [20 + i for i in sel]
    assert members(g.Range_excl(trip)) == [20 + i for i in range(8) if i not in sel]


def test_range_errors():
    g = Group._of(tuple(range(5)), 0)
    for fn in (g.Range_incl, g.Range_excl):
        expect_err(ERR_ARG, fn, [(0, 4, 0)])  # zero stride
        expect_err(ERR_RANK, fn, [(5, 5, 1)])  # first out of range
        expect_err(ERR_RANK, fn, [(-1, 2, 1)])
        expect_err(ERR_RANK, fn, [(0, 4, 1), (2, 2, 1)])  # rank 2 twice
        expect_err(ERR_RANK, fn, [(0, 6, 1)])  # computed rank 5 is invalid
        with pytest.raises((ValueError, TypeError)):
            fn([(0, 1)])


def test_range_last_out_of_range_but_not_computed():
    """MPI-4 7.3.2: only the *computed* ranks must be valid.  (0, 5, 10) computes the
    single rank 0, which is valid even in a group of 3.  MPICH (via mpi4py) agrees:
    COMM_WORLD.Get_group().Range_incl([(0, 5, 10)]) on one process has size 1."""
    g = Group._of((7, 8, 9), 7)
    assert members(g.Range_incl([(0, 5, 10)])) == [7]
    assert members(g.Range_excl([(0, 5, 10)])) == [8, 9]
    # (2, -3, -5) computes 2 and 2 - 5 = -3: the second is invalid (MPICH refuses it too)
    with pytest.raises(MPIException):
        g.Range_incl([(2, -3, -5)])


def test_range_last_out_of_range_mpi4py_oracle():
    MPI = pytest.importorskip("mpi4py.MPI")
    wg = MPI.COMM_WORLD.Get_group()
    if wg.Get_size() != 1:
        pytest.skip("oracle written for a singleton world")
    assert wg.Range_incl([(0, 5, 10)]).Get_size() == 1
    assert Group._of((0,), 0).Range_incl([(0, 5, 10)]).Get_size() == 1


# --- set operations ---------------------------------------------------------------------


@SETTINGS
@given(world_ranks, world_ranks, me_s)
def test_set_operations(a, b, me):
    g1, g2 = Group._of(tuple(a), me), Group._of(tuple(b), me)
    union = list(a) + [r for r in b if r not in a]
    inter = [r for r in a if r in b]
    diff = [r for r in a if r not in b]
    u, i, d = Group.Union(g1, g2), Group.Intersection(g1, g2), Group.Difference(g1, g2)
    assert members(u) == union
    assert members(i) == inter
    assert members(d) == diff
    assert u.Get_rank() == ref_rank(union, me)
    assert i.Get_rank() == ref_rank(inter, me)
    assert d.Get_rank() == ref_rank(diff, me)


def test_set_operation_examples():
    # the MPICH run (4 processes) gives these for a=[3,1,0], b=[2,0,1]
    a, b = Group._of((3, 1, 0), 0), Group._of((2, 0, 1), 0)
    assert members(Group.Union(a, b)) == [3, 1, 0, 2]
    assert members(Group.Intersection(a, b)) == [1, 0]
    assert members(Group.Difference(a, b)) == [3]
    assert members(Group.Union(b, a)) == [2, 0, 1, 3]
    assert members(Group.Intersection(b, a)) == [0, 1]
    assert Group.Difference(a, a).Get_size() == 0
    assert members(Group.Union(a, GROUP_EMPTY)) == [3, 1, 0]
    assert members(Group.Union(GROUP_EMPTY, a)) == [3, 1, 0]


# --- translate / compare ----------------------------------------------------------------


@SETTINGS
@given(world_ranks, world_ranks, st.data())
def test_translate_ranks(a, b, data):
    g1, g2 = Group._of(tuple(a), 0), Group._of(tuple(b), 0)
    rs = data.draw(st.lists(st.one_of(st.just(PROC_NULL), st.integers(0, len(a) - 1)) if a else st.just(PROC_NULL)))
    want = [PROC_NULL if r == PROC_NULL else (b.index(a[r]) if a[r] in b else UNDEFINED) for r in rs]
    assert g1.Translate_ranks(rs, g2) == want
    # default: all ranks of group1
    assert g1.Translate_ranks(None, g2) == [b.index(w) if w in b else UNDEFINED for w in a]


def test_translate_ranks_examples():
    # MPICH: Incl([3,1,0]).Translate_ranks([0,1,2], Incl([2,0,1])) == [UNDEFINED, 2, 1]
    a, b = Group._of((3, 1, 0), 0), Group._of((2, 0, 1), 0)
    assert a.Translate_ranks([0, 1, 2], b) == [UNDEFINED, 2, 1]
    assert a.Translate_ranks([0, PROC_NULL], a) == [0, PROC_NULL]


def test_translate_ranks_errors():
    g = Group._of((3, 1, 0), 0)
    expect_err(ERR_RANK, g.Translate_ranks, [3], g)
    expect_err(ERR_RANK, g.Translate_ranks, [-5], g)
    expect_err(ERR_GROUP, g.Translate_ranks, [0], GROUP_NULL)
    expect_err(ERR_GROUP, GROUP_NULL.Translate_ranks, [0], g)


def test_translate_ranks_to_group_null_with_no_ranks():
    """An invalid group2 is an error regardless of the rank list (MPICH via mpi4py:
    Translate_ranks([], GROUP_NULL) raises ERR_GROUP)."""
    g = Group._of((3, 1, 0), 0)
    expect_err(ERR_GROUP, g.Translate_ranks, [], GROUP_NULL)
    expect_err(ERR_GROUP, GROUP_EMPTY.Translate_ranks, None, GROUP_NULL)


@SETTINGS
@given(world_ranks, world_ranks)
def test_compare(a, b):
    g1, g2 = Group._of(tuple(a), 0), Group._of(tuple(b), 5)
    assert Group.Compare(g1, g2) == ref_compare(a, b)
    assert Group.Compare(g1, g1) == IDENT
    rev = Group._of(tuple(reversed(a)), 0)
    assert Group.Compare(g1, rev) == (IDENT if len(a) <= 1 else SIMILAR)


def test_compare_examples():
    assert Group.Compare(Group._of((3, 1, 0), 0), Group._of((0, 1, 3), 0)) == SIMILAR
    assert Group.Compare(Group._of((3, 1), 0), Group._of((3, 1, 0), 0)) == UNEQUAL
    assert Group.Compare(GROUP_EMPTY, Group._of((), 4)) == IDENT


# --- GROUP_NULL -------------------------------------------------------------------------

NULL_CALLS = [
    ("Get_size", lambda n, g: n.Get_size()),
    ("Get_rank", lambda n, g: n.Get_rank()),
    ("Translate_ranks", lambda n, g: n.Translate_ranks([0], g)),
    ("Dup", lambda n, g: n.Dup()),
    ("Incl", lambda n, g: n.Incl([])),
    ("Excl", lambda n, g: n.Excl([])),
    ("Range_incl", lambda n, g: n.Range_incl([])),
    ("Range_excl", lambda n, g: n.Range_excl([])),
    ("Free", lambda n, g: n.Free()),
    ("Union1", lambda n, g: Group.Union(n, g)),
    ("Union2", lambda n, g: Group.Union(g, n)),
    ("Intersection1", lambda n, g: Group.Intersection(n, g)),
    ("Intersection2", lambda n, g: Group.Intersection(g, n)),
    ("Difference1", lambda n, g: Group.Difference(n, g)),
    ("Difference2", lambda n, g: Group.Difference(g, n)),
    ("Compare1", lambda n, g: Group.Compare(n, g)),
    ("Compare2", lambda n, g: Group.Compare(g, n)),
]


@pytest.mark.parametrize("name,call", NULL_CALLS, ids=[c[0] for c in NULL_CALLS])
def test_group_null_usage(name, call):
    g = Group._of((0, 1), 0)
    for null in (GROUP_NULL, Group()):
        expect_err(ERR_GROUP, call, null, g)
    assert not GROUP_NULL  # the predefined handle was not changed by Free attempts


def test_group_error_is_runtime_error():
    e = expect_err(ERR_RANK, Group._of((1,), 1).Incl, [1])
    assert isinstance(e, RuntimeError)
    assert e == ERR_RANK and int(e) == ERR_RANK
