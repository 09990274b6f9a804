"""File views (gpumpi/io/view.py) against a naive reference: the file offsets of a view's data
stream listed one byte at a time from the filetype's typemap (``flatten.typemap_bytes``, the
constructor definitions interpreted element by element), tiled from the displacement."""

from __future__ import annotations

import itertools

import pytest

from gpumpi import MPI
from gpumpi.datatypes import flatten
from gpumpi.io import view as V


def _types():
    d, i = MPI.DOUBLE, MPI.INT
    out = {
        "byte": (MPI.BYTE, MPI.BYTE),
        "int": (i, i),
        "contig": (i, i.Create_contiguous(7)),
        "vector": (i, i.Create_vector(4, 1, 2)),
        "vector-blocks": (d, d.Create_vector(3, 2, 5)),
        "hvector": (i, i.Create_hvector(4, 1, 8)),
        "indexed-resized": (i, i.Create_indexed([1, 1, 1], [1, 3, 5]).Create_resized(0, 28)),
        "indexed-block": (d, d.Create_indexed_block(2, [0, 3, 9])),
        "hindexed": (i, i.Create_hindexed([2, 1], [4, 20])),
        "struct": (i, MPI.Datatype.Create_struct([1, 1, 1], [0, 8, 16], [i, i, i])),
        "subarray": (d, d.Create_subarray([6, 5], [2, 3], [2, 1])),
        "subarray-F": (i, i.Create_subarray([4, 6], [3, 2], [1, 3], order=MPI.ORDER_FORTRAN)),
        "darray-cyclic": (i, i.Create_darray(3, 1, [9, 4], [MPI.DISTRIBUTE_CYCLIC, MPI.DISTRIBUTE_NONE],
                                               [1, MPI.DISTRIBUTE_DFLT_DARG], [3, 1])),
        "darray-block": (d, d.Create_darray(2, 1, [6, 3], [MPI.DISTRIBUTE_BLOCK, MPI.DISTRIBUTE_BLOCK],
                                              [MPI.DISTRIBUTE_DFLT_DARG] * 2, [2, 1])),
        "resized-gap": (MPI.SHORT, MPI.SHORT.Create_contiguous(3).Create_resized(0, 16)),
    }
    for et, ft in out.values():
        for t in (et, ft):
            if not t.is_predefined:
                t.Commit()
    return out


TYPES = _types()


def _view(disp, et, ft, rep="native"):
    return V.make(disp, et, flatten.segments(et), et.Get_size(), ft, flatten.segments(ft), ft.Get_size(),
                  ft.Get_extent()[1], rep)


def _naive(disp, ft, pos, n):
    """The file offset of every stream byte in [pos, pos + n)."""
    one = flatten.typemap_bytes(ft, 1)
    ext = ft.Get_extent()[1]
    out = []
    for p in range(pos, pos + n):
        k, r = divmod(p, len(one))
        out.append(disp + k * ext + one[r])
    return out


def _bytes_of(pieces):
    return [o + j for o, n in pieces for j in range(n)]


@pytest.mark.parametrize("name", sorted(TYPES))
def test_pieces_are_the_typemap_tiled_from_the_displacement(name):
    et, ft = TYPES[name]
    esize = et.Get_size()
    for disp in (0, 3, 64):
        v = _view(disp, et, ft)
        tsize = ft.Get_size()
        for pos, n in itertools.product(range(0, 3 * tsize + 1, esize), (0, esize, 3 * esize, tsize + esize,
                                                                       4 * tsize)):
            pieces = v.pieces(pos, n)
            assert _bytes_of(pieces) == _naive(disp, ft, pos, n), (name, disp, pos, n)
            assert all(b[0] + b[1] < c[0] for b, c in zip(pieces, pieces[1:])), pieces  # merged, in order
        for off in range(0, 3 * tsize // esize):
            assert v.byte_offset(off) == _naive(disp, ft, off * esize, 1)[0]


@pytest.mark.parametrize("name", sorted(TYPES))
def test_stream_at_counts_the_stream_bytes_before_a_file_offset(name):
    et, ft = TYPES[name]
    v = _view(5, et, ft)
    pos = _naive(5, ft, 0, 4 * ft.Get_size())
    for fileoff in range(0, 5 + 4 * ft.Get_extent()[1] + 3):
        want = sum(1 for p in pos if p < fileoff)
        if want < len(pos):
            assert v.stream_at(fileoff) == want, (name, fileoff)


def test_what_mpi_forbids_is_refused():
    i = MPI.INT
    with pytest.raises(V.ViewError, match="negative displacement"):
        _view(-1, i, i)
    backwards = i.Create_hindexed([1, 1], [8, 0]).Commit()
    with pytest.raises(V.ViewError, match="nondecreasing"):
        _view(0, i, backwards)
    half = MPI.SHORT.Create_contiguous(3).Commit()  # 6 bytes: not a whole number of INTs
    with pytest.raises(V.ViewError, match="not made of etypes"):
        _view(0, i, half)
    overlap = i.Create_contiguous(4).Create_resized(0, 8).Commit()  # copies would overlap
    with pytest.raises(V.ViewError, match="extent"):
        _view(0, i, overlap)
    empty = i.Create_contiguous(0).Commit()
    with pytest.raises(V.ViewError, match="no data"):
        _view(0, i, empty)
    for t in (backwards, half, overlap, empty):
        t.Free()
