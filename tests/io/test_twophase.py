"""Two-phase plans (gpumpi/io/twophase.py) against naive references: byte sets and loops."""

from __future__ import annotations

import numpy as np
import pytest

from gpumpi import MPI
from gpumpi.datatypes import flatten
from gpumpi.io import twophase as T
from gpumpi.io import view as V

from test_view import TYPES, _bytes_of


def _view(disp, et, ft):
    return V.make(disp, et, flatten.segments(et), et.Get_size(), ft, flatten.segments(ft), ft.Get_size(),
                  ft.Get_extent()[1], "native")


@pytest.mark.parametrize("name", sorted(TYPES))
def test_pieces_as_arrays_are_the_views_pieces(name):
    et, ft = TYPES[name]
    es, ts = et.Get_size(), ft.Get_size()
    for disp in (0, 12):
        v = _view(disp, et, ft)
        for p in (0, es, ts - es, 3 * ts + es):
            for n in (es, 5 * ts, 9 * ts + 2 * es):
                o, ln = T.pieces(v, p, n)
                assert _bytes_of(zip(o.tolist(), ln.tolist())) == _bytes_of(v.pieces(p, n)), (name, p, n)
                assert (o[1:] > o[:-1] + ln[:-1]).all()  # joined where they touch


def test_interleaved():
    assert not T.interleaved([(0, 10), (10, 20), None, (30, 30)])
    assert T.interleaved([(0, 10), (5, 20)])
    assert T.interleaved([(40, 50), None, (0, 41)])


def test_cut_splits_at_domain_boundaries_keeping_every_byte_in_order():
    rng = np.random.default_rng(5)
    for _ in range(50):
        lens = rng.integers(1, 40, 30)
        gaps = rng.integers(0, 20, 30)
        offs = np.cumsum(gaps + np.concatenate(([0], lens[:-1])))
        bounds = T.domains(int(offs[0]), int(offs[-1] + lens[-1]), int(rng.integers(1, 7)))
        co, cl, dom = T.cut(offs, lens, bounds)
        assert _bytes_of(zip(co.tolist(), cl.tolist())) == _bytes_of(zip(offs.tolist(), lens.tolist()))
        assert (cl > 0).all() and (np.diff(dom) >= 0).all()
        for o, n, d in zip(co, cl, dom):  # naive: each cut piece lies in its domain
            assert bounds[d] <= o and o + n <= bounds[d + 1]


def test_merged_and_byte_index():
    offs, lens = np.array([30, 0, 10, 12, 50]), np.array([5, 10, 3, 4, 1])
    mo, ml = T.merged(offs, lens)
    assert list(zip(mo.tolist(), ml.tolist())) == [(0, 16), (30, 5), (50, 1)]
    idx = T.byte_index(offs, lens, 10)
    assert idx.tolist() == [b - 10 for b in _bytes_of(zip(offs.tolist(), lens.tolist()))]
    assert T.domains(0, 10, 3).tolist() == [0, 3, 6, 10]
