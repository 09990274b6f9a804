"""The distribution math of Global Arrays (gpumpi.ga._layout), against brute force."""

import itertools
import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumpi.ga import _layout
from gpumpi.ga._layout import (MAX_DIM, Layout, check_patch, intersect, irregular, patch_size, periodic_pieces,
                               regular, strided_shape)

SETTINGS = settings(max_examples=150, deadline=None)


# --- independent references ------------------------------------------------------------------


def brute_grid(dims, nprocs, chunk):
    """The regular grid by trying every factor tuple: min (largest block volume, sum of block
    extents, lexicographically largest p)."""
    maxblk = [max(1, n // c) if c > 0 else n for n, c in zip(dims, chunk)]
    best = None
    for p in itertools.product(*(range(1, min(m, nprocs) + 1) for m in maxblk)):
        if math.prod(p) > nprocs:
            continue
        b = [-(-n // k) for n, k in zip(dims, p)]
        key = (math.prod(b), sum(b), tuple(-k for k in p))
        if best is None or key < best[0]:
            best = (key, b)
    return best[1]


def owner_map(layout):
    """An int array of dims: the owner of every element, -1 where nobody; fails on double owners."""
    own = np.full(layout.dims, -1, dtype=np.int64)
    for p in range(layout.nprocs):
        lo, hi = layout.distribution(p)
        if not layout.owns(p):
            assert lo == hi == (-1,) * layout.ndim
            assert layout.local_shape(p) == (0,) * layout.ndim
            assert layout.proc_topology(p) == (-1,) * layout.ndim
            continue
        sl = tuple(slice(a, b) for a, b in zip(lo, hi))
        assert (own[sl] == -1).all(), f"process {p} overlaps another block"
        own[sl] = p
        assert layout.local_shape(p) == tuple(b - a for a, b in zip(lo, hi))
    return own


@st.composite
def layouts(draw):
    ndim = draw(st.integers(1, 4))
    dims = tuple(draw(st.lists(st.integers(1, 12), min_size=ndim, max_size=ndim)))
    nprocs = draw(st.integers(1, 9))
    if draw(st.booleans()):
        chunk = tuple(draw(st.lists(st.integers(-1, 14), min_size=ndim, max_size=ndim)))
    else:
        chunk = None
    return regular(dims, nprocs, chunk), chunk


@st.composite
def irregular_layouts(draw):
    ndim = draw(st.integers(1, 3))
    dims = tuple(draw(st.lists(st.integers(1, 10), min_size=ndim, max_size=ndim)))
    block, mp = [], []
    for n in dims:
        cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=3))) if n > 1 else []
        block.append(len(cuts) + 1)
        mp += [0] + cuts
    nprocs = math.prod(block) + draw(st.integers(0, 3))
    return irregular(dims, nprocs, block, mp)


def any_layout():
    return st.one_of(layouts().map(lambda t: t[0]), irregular_layouts())


@st.composite
def layout_and_patch(draw):
    lay = draw(any_layout())
    lo, hi = [], []
    for n in lay.dims:
        a = draw(st.integers(0, n))
        b = draw(st.integers(a, n))
        lo.append(a)
        hi.append(b)
    return lay, tuple(lo), tuple(hi)


# --- examples ----------------------------------------------------------------------------------


def test_regular_examples():
    lay = regular((100, 100), 4)
    assert lay.grid == (2, 2) and lay.starts == ((0, 50), (0, 50))
    assert regular((10,), 4).starts == ((0, 3, 6, 9),)
    lay = regular((1000,), 4, chunk=(400,))
    assert lay.starts == ((0, 500),) and lay.local_shape(0) == (500,) and lay.local_shape(1) == (500,)
    assert not lay.owns(2) and not lay.owns(3)
    lay = regular((5,), 8)
    assert lay.grid == (5,) and [lay.local_shape(p) for p in range(8)] == [(1,)] * 5 + [(0,)] * 3
    assert [lay.owns(p) for p in range(8)] == [True] * 5 + [False] * 3
    assert lay.distribution(6) == ((-1,), (-1,))
    assert regular((100, 100), 1).grid == (1, 1)
    # a chunk larger than the extent: one block along it
    assert regular((10, 100), 4, chunk=(20, -1)).grid == (1, 4)
    # chunk None and chunk of -1s / 0s are the same
    assert regular((37, 11), 6, chunk=(-1, 0)) == regular((37, 11), 6)
    # ties on volume and surface: the earlier dimension gets the larger factor
    assert regular((100, 100), 2).grid == (2, 1)
    assert regular((100, 100), 3).starts == ((0, 34, 68), (0,))


def test_regular_accepts_numpy_integers():
    lay = regular(np.array([6, 4]), np.int64(4), chunk=np.array([1, 1]))
    assert lay.dims == (6, 4) and type(lay.dims[0]) is int and type(lay.nprocs) is int
    assert lay == regular((6, 4), 4)


def test_layout_small_2d():
    lay = regular((4, 6), 6)
    assert lay.grid == (2, 3)
    assert lay.coords(4) == (1, 1) and lay.proc_of((1, 1)) == 4
    assert lay.distribution(4) == ((2, 2), (4, 4))
    assert lay.block((0, 2)) == ((0, 4), (2, 6))
    assert lay.locate((3, 5)) == 5 and lay.locate((0, 0)) == 0
    assert lay.locate((4, 0)) == -1 and lay.locate((0, -1)) == -1
    assert lay.locate_region((1, 1), (3, 3)) == [
        (0, (1, 1), (2, 2)), (1, (1, 2), (2, 3)), (3, (2, 1), (3, 2)), (4, (2, 2), (3, 3))]
    assert lay.locate_region((1, 1), (1, 3)) == []
    assert lay.locate_region((0, 0), (4, 6))[-1] == (5, (2, 4), (4, 6))


def test_irregular_example():
    lay = irregular((10, 5), 7, (3, 2), (0, 2, 7, 0, 1))
    assert lay.grid == (3, 2) and lay.starts == ((0, 2, 7), (0, 1))
    assert lay.distribution(3) == ((2, 1), (7, 5))
    assert lay.distribution(6) == ((-1, -1), (-1, -1))
    assert lay.locate((9, 0)) == 4 and lay.locate((1, 4)) == 1


def test_regular_large_is_fast():
    _layout._regular.cache_clear()  # time the search, not the cache
    t0 = time.perf_counter()
    cases = [((10**6,) * 7, 1024), ((999983, 524287, 1000, 7, 1, 13, 10**6), 1000), ((1,) * 7, 1024),
             ((10**6, 3), 1023), ((12345, 67890, 13579), 997)]
    for dims, nprocs in cases:
        lay = regular(dims, nprocs)
        assert lay.nblocks <= nprocs
    assert regular((10**6,) * 7, 1024).grid == (4, 4, 4, 2, 2, 2, 2)
    assert regular((1024, 1024), 1024).grid == (32, 32)
    assert time.perf_counter() - t0 < 2.0


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("args,kw,call", [
    (((4, 4), 4), {"chunk": (4,)}, "create"),
    (((4, 0), 4), {}, "create"),
    (((), 4), {}, "create"),
    (((2,) * (MAX_DIM + 1), 4), {}, "create"),
    (((4,), 0), {}, "create"),
])
def test_regular_errors(args, kw, call):
    with pytest.raises(ValueError, match=f"^{call}: "):
        regular(*args, **kw)


def test_regular_error_message():
    with pytest.raises(ValueError) as ei:
        regular((4, 4), 4, chunk=(4,))
    assert str(ei.value) == "create: chunk must have one entry per dimension (chunk [4], 2 dimensions)"


def test_non_integers_are_type_errors():
    with pytest.raises(TypeError, match="^create: "):
        regular((4.0, 4), 4)
    with pytest.raises(TypeError, match="^locate: "):
        regular((4,), 1).locate((1.5,))


@pytest.mark.parametrize("dims,nprocs,block,mp", [
    ((10, 5), 6, (3,), (0, 2, 7)),                    # block length
    ((10, 5), 6, (3, 2), (0, 2, 7, 0)),               # map length
    ((10, 5), 5, (3, 2), (0, 2, 7, 0, 1)),            # prod(block) > nprocs
    ((10, 5), 6, (3, 2), (1, 2, 7, 0, 1)),            # first start not 0
    ((10, 5), 6, (3, 2), (0, 7, 2, 0, 1)),            # not increasing
    ((10, 5), 6, (3, 2), (0, 2, 2, 0, 1)),            # not strictly increasing
    ((10, 5), 6, (3, 2), (0, 2, 10, 0, 1)),           # start at the extent
    ((10, 5), 6, (3, 0), (0, 2, 7)),                  # no block along a dim
    ((2, 5), 6, (3, 1), (0, 1, 2, 0)),                # more blocks than elements
    ((10, 0), 6, (3, 1), (0, 2, 7, 0)),               # zero extent
])
def test_irregular_errors(dims, nprocs, block, mp):
    with pytest.raises(ValueError, match="^create_irreg: "):
        irregular(dims, nprocs, block, mp)


def test_layout_checks_its_structure():
    with pytest.raises(ValueError, match="^Layout: "):
        Layout((10,), 4, (2,), ((0, 10),))
    with pytest.raises(ValueError, match="^Layout: "):
        Layout((10,), 1, (2,), ((0, 5),))


def test_proc_and_coords_errors():
    lay = regular((4, 6), 8)
    with pytest.raises(ValueError, match="^proc_topology: "):
        lay.coords(8)
    with pytest.raises(ValueError, match="^distribution: "):
        lay.distribution(-1)
    with pytest.raises(ValueError, match="^local_shape: "):
        lay.local_shape(9)
    with pytest.raises(ValueError, match="^proc_of: "):
        lay.proc_of((lay.grid[0], 0))
    with pytest.raises(ValueError, match="^block: "):
        lay.block((0,))
    with pytest.raises(ValueError, match="^locate: "):
        lay.locate((0,))


@pytest.mark.parametrize("lo,hi", [((0, 0), (5, 6)), ((-1, 0), (2, 2)), ((0, 0), (2,)), ((0, 0, 0), (1, 1, 1))])
def test_locate_region_errors(lo, hi):
    with pytest.raises(ValueError, match="^locate_region: "):
        regular((4, 6), 4).locate_region(lo, hi)


def test_check_patch():
    assert check_patch("get", (4, 6), None, None) == ((0, 0), (4, 6))
    assert check_patch("get", (4, 6), np.array([1, 2]), [np.int32(3), 6]) == ((1, 2), (3, 6))
    assert check_patch("get", (4, 6), (2, 2), (2, 3)) == ((2, 2), (2, 3))
    lo, hi = check_patch("get", (4, 6), [1, 2], None)
    assert type(lo) is tuple and type(lo[0]) is int and hi == (4, 6)
    for lo, hi in [((0,), None), (None, (1, 2, 3)), ((-1, 0), None), (None, (5, 6)), ((2, 2), (1, 3))]:
        with pytest.raises(ValueError, match="^put: "):
            check_patch("put", (4, 6), lo, hi)


# --- properties of the distributions ---------------------------------------------------------


@SETTINGS
@given(layouts())
def test_regular_grid_matches_brute_force(lc):
    lay, chunk = lc
    chunk = chunk or (0,) * lay.ndim
    b = brute_grid(lay.dims, lay.nprocs, chunk)
    assert lay.starts == tuple(tuple(range(0, n, k)) for n, k in zip(lay.dims, b))


@SETTINGS
@given(layouts())
def test_regular_chunk_minimum_and_grid(lc):
    lay, chunk = lc
    assert lay.nblocks == math.prod(lay.grid) <= lay.nprocs
    assert lay.grid == tuple(len(s) for s in lay.starts)
    for d, (n, s) in enumerate(zip(lay.dims, lay.starts)):
        ext = [b - a for a, b in zip(s, s[1:] + (n,))]
        assert all(e >= 1 for e in ext)
        if chunk is not None and 0 < chunk[d] <= n:
            assert all(e >= chunk[d] for e in ext[:-1]), (chunk, s)
        # GA's rule: equal blocks, the last one no longer than the others
        assert len(set(ext[:-1])) <= 1 and ext[-1] <= ext[0]


@SETTINGS
@given(any_layout())
def test_blocks_tile_the_array(lay):
    own = owner_map(lay)
    assert (own >= 0).all()
    assert [lay.owns(p) for p in range(lay.nprocs)] == [p < lay.nblocks for p in range(lay.nprocs)]
    for p in range(lay.nblocks):
        c = lay.coords(p)
        assert lay.proc_topology(p) == c and lay.proc_of(c) == p
        assert lay.block(c) == lay.distribution(p)
    # row-major numbering: the last grid dimension varies fastest
    assert [lay.coords(p) for p in range(lay.nblocks)] == list(itertools.product(*(range(g) for g in lay.grid)))


@SETTINGS
@given(any_layout(), st.data())
def test_locate_matches_brute_force(lay, data):
    own = owner_map(lay)
    for idx in itertools.product(*(range(n) for n in lay.dims)):
        assert lay.locate(idx) == own[idx]
    bad = list(data.draw(st.tuples(*(st.integers(-3, n + 3) for n in lay.dims))))
    d = data.draw(st.integers(0, lay.ndim - 1))
    bad[d] = data.draw(st.sampled_from([-1, -5, lay.dims[d], lay.dims[d] + 2]))
    assert lay.locate(tuple(bad)) == -1


@SETTINGS
@given(layout_and_patch())
def test_locate_region_covers_the_patch(lp):
    lay, lo, hi = lp
    pieces = lay.locate_region(lo, hi)
    own = owner_map(lay)
    count = np.zeros(lay.dims, dtype=np.int64)
    procs = [p for p, _, _ in pieces]
    assert len(set(procs)) == len(procs)
    # in row-major order of the blocks, which is process order
    assert procs == sorted(procs)
    for p, plo, phi in pieces:
        assert all(a < b for a, b in zip(plo, phi)), "empty piece"
        dlo, dhi = lay.distribution(p)
        assert all(dl <= a and b <= dh for a, b, dl, dh in zip(plo, phi, dlo, dhi))
        sl = tuple(slice(a, b) for a, b in zip(plo, phi))
        assert (own[sl] == p).all()
        count[sl] += 1
    expect = np.zeros(lay.dims, dtype=np.int64)
    expect[tuple(slice(a, b) for a, b in zip(lo, hi))] = 1
    assert (count == expect).all()
    assert sum(patch_size(a, b) for _, a, b in pieces) == patch_size(lo, hi)
    if patch_size(lo, hi) == 0:
        assert pieces == []


# --- periodic patches --------------------------------------------------------------------------


@st.composite
def periodic_cases(draw):
    ndim = draw(st.integers(1, 3))
    dims = tuple(draw(st.lists(st.integers(1, 7), min_size=ndim, max_size=ndim)))
    lo, hi = [], []
    for n in dims:
        length = draw(st.integers(0, n))
        a = draw(st.integers(-n, 2 * n - length))
        lo.append(a)
        hi.append(a + length)
    return dims, tuple(lo), tuple(hi)


def fill_from_pieces(a, lo, hi, pieces):
    buf = np.full(tuple(h - l for l, h in zip(lo, hi)), -1, dtype=a.dtype)
    seen = np.zeros(buf.shape, dtype=np.int64)
    for plo, phi, boff in pieces:
        src = tuple(slice(x, y) for x, y in zip(plo, phi))
        dst = tuple(slice(o, o + (y - x)) for o, x, y in zip(boff, plo, phi))
        buf[dst] = a[src]
        seen[dst] += 1
    return buf, seen


@SETTINGS
@given(periodic_cases())
def test_periodic_pieces_match_wrapped_indexing(case):
    dims, lo, hi = case
    a = np.arange(math.prod(dims)).reshape(dims)
    expect = a[np.ix_(*(np.arange(l, h) % n for l, h, n in zip(lo, hi, dims)))]
    pieces = periodic_pieces(dims, lo, hi)
    assert len(pieces) <= 2 ** len(dims)
    for plo, phi, boff in pieces:
        assert all(0 <= x < y <= n for x, y, n in zip(plo, phi, dims))
        assert all(o >= 0 for o in boff)
    buf, seen = fill_from_pieces(a, lo, hi, pieces)
    assert (seen == 1).all()
    assert (buf == expect).all()
    if patch_size(lo, hi) == 0:
        assert pieces == []


def test_periodic_manual_example():
    # the GA manual's 5x5 example (1-based inclusive [0:3, 5:7]): 0-based half-open lo=(-1, 4) hi=(3, 7)
    pieces = periodic_pieces((5, 5), (-1, 4), (3, 7))
    assert len(pieces) == 4
    assert pieces == [((4, 4), (5, 5), (0, 0)), ((4, 0), (5, 2), (0, 1)),
                      ((0, 4), (3, 5), (1, 0)), ((0, 0), (3, 2), (1, 1))]
    assert periodic_pieces((5, 5), (1, 1), (3, 4)) == [((1, 1), (3, 4), (0, 0))]


@pytest.mark.parametrize("lo,hi", [
    ((-6, 0), (-1, 5)),   # too far below
    ((0, 6), (2, 11)),    # too far above
    ((-1, 0), (5, 5)),    # longer than the array
    ((2, 0), (1, 5)),     # hi below lo
    ((0,), (5,)),         # wrong length
])
def test_periodic_errors(lo, hi):
    with pytest.raises(ValueError, match="^periodic: "):
        periodic_pieces((5, 5), lo, hi)


# --- small helpers -------------------------------------------------------------------------------


def test_strided_shape():
    assert strided_shape((0,), (10,), (3,)) == (4,)        # 0 3 6 9
    assert strided_shape((1, 2), (10, 3), (3, 5)) == (3, 1)  # 1 4 7 ; 2
    assert strided_shape((4,), (4,), (2,)) == (0,)
    assert strided_shape((0, 0), (6, 7), (1, 7)) == (6, 1)
    assert strided_shape((0,), (10,), (3,)) == (len(range(0, 10, 3)),)
    for lo, hi, skip in [((0,), (5,), (0,)), ((0,), (5,), (-1,)), ((3,), (1,), (1,)), ((0, 0), (5,), (1, 1))]:
        with pytest.raises(ValueError, match="^strided: "):
            strided_shape(lo, hi, skip)


def test_intersect_and_patch_size():
    assert intersect((0, 0), (4, 4), (2, 1), (6, 3)) == ((2, 1), (4, 3))
    assert intersect((0, 0), (4, 4), (4, 0), (6, 3)) is None   # touching, not overlapping
    assert intersect((0,), (4,), (1,), (2,)) == ((1,), (2,))
    assert intersect((0, 0), (4, 4), (1, 1), (1, 3)) is None   # empty patch
    with pytest.raises(ValueError, match="^intersect: "):
        intersect((0, 0), (4, 4), (0,), (1,))
    assert patch_size((1, 2), (4, 6)) == 12
    assert patch_size((1, 2), (1, 6)) == 0
    assert patch_size((3,), (1,)) == 0
    assert patch_size((), ()) == 1
