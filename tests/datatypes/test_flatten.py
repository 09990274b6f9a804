"""The canonical form: equal to the naive typemap, construction-independent, merged."""

from __future__ import annotations

import itertools

import dtgen
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpumpi import datatypes as D
from gpumpi.constants import ORDER_C, ORDER_F, UNDEFINED
from gpumpi.datatypes import Datatype, flatten
from gpumpi.datatypes.flatten import Blocks, Contiguous, Strided

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))


def form_bytes(f) -> list:
    """Byte offsets of a canonical form, in packing order (an independent reading of the form)."""
    if isinstance(f, Contiguous):
        return list(range(f.start, f.start + f.nbytes))
    if isinstance(f, Strided):
        out = []
        for idx in itertools.product(*(range(c) for c in f.counts)):
            o = f.start + sum(i * s for i, s in zip(idx, f.strides))
            out += range(o, o + f.blocklen)
        return out
    return [o + k for o, n in zip(f.offsets, f.lengths) for k in range(n)]


def runs_of(byte_offsets) -> tuple[list, list]:
    offs, lens = [], []
    for b in byte_offsets:
        if offs and offs[-1] + lens[-1] == b:
            lens[-1] += 1
        else:
            offs.append(b)
            lens.append(1)
    return offs, lens


@SETTINGS
@given(dtgen.specs(depth=3), st.integers(0, 3))
def test_canonical_form_equals_naive_typemap_walk(spec, count):
    t = dtgen.build(spec, D)
    want = flatten.typemap_bytes(t, count)
    f = flatten.canonical(t, count)
    assert form_bytes(f) == want, spec
    assert f.nbytes == len(want) == count * t.size
    # the form is a function of the byte stream: classifying the merged list gives the same form
    g = flatten.classify_runs(*runs_of(want))
    assert type(g) is type(f) and g == f, (spec, f, g)
    if isinstance(f, Strided):
        assert 1 <= len(f.counts) <= 3 and all(c >= 2 for c in f.counts)
    if isinstance(f, Blocks):
        offs, lens = f.offsets, f.lengths
        assert all(offs[i] + lens[i] != offs[i + 1] for i in range(len(offs) - 1)), "runs are merged"


@SETTINGS
@given(dtgen.specs(depth=3))
def test_segments_and_contiguity(spec):
    t = dtgen.build(spec, D)
    want = flatten.typemap_bytes(t, 1)
    assert [o + k for o, n in t.segments for k in range(n)] == want
    contiguous_bytes = want == list(range(t.lb, t.lb + t.size)) and t.size == t.extent
    assert t.is_contiguous == contiguous_bytes, spec


def _equivalents(ext: int, count: int, bl: int, stride: int, old):
    """Seven or eight constructions of ``count`` blocks of ``bl`` elements at ``stride`` elements."""
    disps = [i * stride for i in range(count)]
    yield old.Create_vector(count, bl, stride)
    yield old.Create_hvector(count, bl, stride * ext)
    yield old.Create_indexed([bl] * count, disps)
    yield old.Create_hindexed([bl] * count, [d * ext for d in disps])
    yield old.Create_indexed_block(bl, disps)
    yield Datatype.Create_struct([bl] * count, [d * ext for d in disps], [old] * count)
    yield Datatype.Create_struct([1] * (count * bl), [d * ext + j * ext for d in disps for j in range(bl)],
                                 [old] * (count * bl))
    if stride >= bl:  # the same blocks as the first columns of a count x stride array
        yield old.Create_subarray([count, stride], [count, bl], [0, 0])


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(-9, 9), st.sampled_from(["DOUBLE", "INT", "SHORT_INT"]),
       st.integers(1, 3))
def test_vector_subarray_indexed_hindexed_struct_reach_the_same_form(count, bl, stride, name, n):
    old = getattr(D, name)
    types = list(_equivalents(old.extent, count, bl, stride, old))
    one = {repr(flatten.canonical(t, 1)) for t in types}
    assert len(one) == 1, one
    # resized to one common extent, n elements of each also agree
    ext = max(abs(t.extent) for t in types) + 8
    many = {repr(flatten.canonical(t.Create_resized(t.lb, ext), n)) for t in types}
    assert len(many) == 1, many


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3).flatmap(
    lambda sizes: st.tuples(st.just(sizes),
                            st.tuples(*[st.integers(1, s) for s in sizes]),
                            st.sampled_from([ORDER_C, ORDER_F]))))
def test_subarray_equals_nested_vectors(args):
    sizes, subsizes, order = args
    starts = [s - ss for s, ss in zip(sizes, subsizes)]  # flush to the far corner
    sub = D.DOUBLE.Create_subarray(sizes, list(subsizes), starts, order=order)
    dims = list(range(len(sizes)))
    if order == ORDER_F:
        dims.reverse()
    # nested hvectors, innermost dimension first, shifted to the first element
    t = D.DOUBLE
    stride = 8
    strides = {}
    for d in reversed(dims):
        strides[d] = stride
        stride *= sizes[d]
    for d in reversed(dims):
        t = t.Create_hvector(subsizes[d], 1, strides[d])
    first = sum(starts[d] * strides[d] for d in dims)
    h = t.Create_hindexed([1], [first])
    s = Datatype.Create_struct([1], [first], [t])
    assert flatten.canonical(sub) == flatten.canonical(h) == flatten.canonical(s)
    f = flatten.canonical(sub)
    assert isinstance(f, (Contiguous, Strided))


def test_named_examples():
    assert flatten.canonical(D.DOUBLE, 4) == Contiguous(0, 32)
    assert flatten.canonical(D.DOUBLE.Create_vector(3, 1, 2)) == Strided(0, 8, (3,), (16,))
    assert flatten.canonical(D.DOUBLE.Create_vector(3, 2, 2)) == Contiguous(0, 48)
    assert flatten.canonical(D.DOUBLE.Create_vector(3, 1, -2)) == Strided(0, 8, (3,), (-16,))
    sub = D.INT.Create_subarray([4, 5, 6], [2, 3, 4], [1, 1, 1])
    assert flatten.canonical(sub) == Strided(4 * (30 + 6 + 1), 16, (2, 3), (120, 24))
    assert flatten.canonical(sub, 2) == Strided(148, 16, (2, 2, 3), (480, 120, 24))
    s = Datatype.Create_struct([1, 1], [0, 8], [D.INT, D.DOUBLE])  # int, hole, double; extent 16
    assert flatten.canonical(s, 3) == Blocks([0, 8, 24, 40], [4, 12, 12, 8])  # doubles run into the next ints
    assert flatten.canonical(D.DOUBLE.Create_contiguous(0)) == Contiguous(0, 0)
    # four dimensions: a grid, but not the 3-D Strided form
    pair = D.BYTE.Create_vector(2, 1, 2).Create_resized(0, 5)  # bytes 0 and 2 of 5
    four = pair.Create_subarray([3, 3, 3], [2, 2, 2], [0, 0, 0])
    f = flatten.canonical(four)
    assert isinstance(f, Blocks) and flatten.pure_grid(f.node) == (0, 1, (2, 2, 2, 2), (45, 15, 5, 2))
    assert len(f) == 16
    # a grid whose rows touch is merged into a block list
    touch = D.BYTE.Create_vector(2, 1, 2).Create_resized(0, 3).Create_contiguous(2)
    assert flatten.canonical(touch) == Blocks([0, 2, 5], [1, 2, 1])


def test_repr_and_lazy_blocks():
    t = Datatype.Create_struct([1, 1], [0, 8], [D.INT, D.DOUBLE]).Create_contiguous(1000)
    f = flatten.canonical(t)
    assert f._offsets is None and f.nbytes == 12000  # classified without listing the runs
    assert len(f) == 1001 and "more" in repr(f)  # each double runs into the next element's int


def test_signature_and_elements():
    s = Datatype.Create_struct([1, 1, 2], [0, 8, 16], [D.INT, D.DOUBLE, D.SHORT])
    assert flatten.signature(s) == [(D.INT, 1), (D.DOUBLE, 1), (D.SHORT, 2)]
    assert flatten.signature(D.SHORT_INT.Create_contiguous(2)) == [(D.SHORT, 1), (D.INT, 1)] * 2
    assert flatten.signature(D.DOUBLE.Create_vector(1000, 3, 5)) == [(D.DOUBLE, 3000)]
    assert flatten.signature(Datatype.Create_f90_real(6, 30)) == [(D.REAL4, 1)]
    # MPICH: full basic elements, UNDEFINED when the bytes stop inside one
    want = {0: 0, 1: UNDEFINED, 4: 1, 5: UNDEFINED, 12: 2, 14: 3, 16: 4, 20: 5, 30: 7, 32: 8, 48: 12}
    assert {n: flatten.elements_in(s, n) for n in want} == want
    assert flatten.elements_in(D.INT.Create_contiguous(0), 0) == 0
    assert flatten.elements_in(D.INT.Create_contiguous(0), 12) == UNDEFINED
    assert s._elements_in(30) == 7


def test_typemap_walk_details():
    assert flatten.typemap(D.SHORT_INT) == [(0, D.SHORT), (4, D.INT)]
    assert flatten.typemap(D.LONG_DOUBLE_INT) == [(0, D.LONG_DOUBLE), (16, D.INT)]
    d = D.INT.Create_darray(4, 3, [4, 5], [121, 122], [-49767, 2], [2, 2])
    # coords (1, 1): rows 2-3, columns 2-3 (cyclic(2) over 2 processes)
    assert [o // 4 for o, _ in flatten.typemap(d)] == [12, 13, 17, 18]
    f = D.INT.Create_darray(4, 3, [4, 5], [121, 122], [-49767, 2], [2, 2], order=ORDER_F)
    # Fortran order: element (i, j) at i + 4 j; first index fastest
    assert [o // 4 for o, _ in flatten.typemap(f)] == [2 + 4 * 2, 3 + 4 * 2, 2 + 4 * 3, 3 + 4 * 3]


@pytest.mark.parametrize("offs,lens,want", [
    ([0, 8, 16], [8, 8, 8], Contiguous(0, 24)),
    ([0, 16, 32, 100, 116, 132], [8] * 6, Strided(0, 8, (2, 3), (100, 16))),
    ([0, 16, 100, 116, 200, 216, 1000, 1016, 1100, 1116, 1200, 1216], [8] * 12,
     Strided(0, 8, (2, 3, 2), (1000, 100, 16))),
    ([0, 16, 40], [8, 8, 8], Blocks([0, 16, 40], [8, 8, 8])),
    ([0, 16], [8, 4], Blocks([0, 16], [8, 4])),
    ([5, 0, 7], [2, 0, 1], Contiguous(5, 3)),
])
def test_classify_runs(offs, lens, want):
    assert flatten.classify_runs(offs, lens) == want


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(dtgen.specs(depth=2), st.integers(1, 3), st.integers(-3, 3), st.integers(-40, 40), st.integers(1, 6),
       st.booleans())
def test_evenly_spaced_blocks_take_the_shortcut_to_the_same_tree(old_spec, bl, start, step, n, in_bytes):
    """``_regular`` (one comparison) builds the tree ``seq`` reaches block by block."""
    old = dtgen.build(old_spec, D)
    disps = [start + i * step for i in range(n)]
    t = (old.Create_hindexed_block(bl, disps) if in_bytes else old.Create_indexed_block(bl, disps))
    unit = 1 if in_bytes else old.extent
    block = flatten.rep(bl, old.extent, flatten.tree(old))
    assert flatten.tree(t) == flatten.seq(flatten.shift(block, d * unit) for d in disps)
    t2 = (old.Create_hindexed([bl] * n, disps) if in_bytes else old.Create_indexed([bl] * n, disps))
    assert flatten.tree(t2) == flatten.tree(t)


def test_sig_name_knows_every_predefined_code_once_any_code_is_known(monkeypatch):
    """The names were learnt only while none was known, so after one local type's code a peer's
    f8 read as 'code 13419' in ERR_TYPE messages."""
    monkeypatch.setattr(flatten, "_SIG_NAMES", {})
    monkeypatch.setattr(flatten, "_SIG_SCANNED", [])
    flatten._SIG_NAMES[flatten._code_of("i4")] = "i4"  # this process has used INT only
    assert flatten.sig_name(flatten._code_of("f8")) == "f8"
    assert flatten.sig_name(flatten._code_of("i4")) == "i4"
    assert flatten.sig_name(7) == "code 7"
