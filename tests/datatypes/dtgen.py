"""Random datatype specifications for the datatype tests, buildable in gpumpi and in mpi4py.

A *spec* is a nested tuple naming a constructor and its arguments; :func:`build` turns
it into a datatype of either library, so one hypothesis example can be compared
number for number (and byte for byte) with MPICH.  Sizes stay small: the tests walk
the naive typemap and pack real buffers.
"""

from __future__ import annotations

import types

from hypothesis import strategies as st

import gpumpi.constants as _constants
import gpumpi.datatypes as _datatypes

#: gpumpi's datatype names plus the MPI constants, shaped like ``mpi4py.MPI`` for :func:`build`
G = types.SimpleNamespace(**{k: v for k, v in vars(_constants).items() if k.isupper()},
                          **{k: getattr(_datatypes, k) for k in _datatypes.__all__})

# basic types for leaves; FLOAT16_T/WCHAR/pairs are fine natively (MPICH's external32 rejects them)
BASIC = ["BYTE", "CHAR", "SHORT", "INT", "UNSIGNED", "LONG", "FLOAT", "DOUBLE", "LONG_DOUBLE", "C_BOOL",
         "INT64_T", "C_COMPLEX", "C_DOUBLE_COMPLEX", "FLOAT16_T", "WCHAR", "DOUBLE_INT", "SHORT_INT",
         "FLOAT_INT", "LONG_DOUBLE_INT", "INT_INT"]
PLAIN = [n for n in BASIC if not n.endswith("_INT")]  # no pair types
EXT32_BASIC = ["BYTE", "CHAR", "SHORT", "INT", "UNSIGNED", "LONG", "FLOAT", "DOUBLE", "LONG_DOUBLE", "C_BOOL",
               "INT64_T", "C_COMPLEX", "C_DOUBLE_COMPLEX", "UNSIGNED_LONG", "LONG_LONG"]

ORDER_C, ORDER_F = 56, 57
BLOCK, CYCLIC, NONE, DFLT = 121, 122, 123, -49767

small = st.integers(0, 3)


def leaves(names=BASIC):
    named = st.sampled_from(names).map(lambda n: ("named", n))
    if names is not BASIC:
        return named
    f90 = st.one_of(
        st.sampled_from([1, 3, 5, 10]).map(lambda r: ("f90i", r)),
        st.sampled_from([(6, 30), (15, 300)]).map(lambda pr: ("f90r",) + pr),
        st.sampled_from([(6, 30), (15, 300)]).map(lambda pr: ("f90c",) + pr),
    )
    return st.one_of(named, named, named, f90)


@st.composite
def subarray_args(draw):
    ndims = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 4)) for _ in range(ndims)]
    subsizes = [draw(st.integers(0, s)) for s in sizes]
    if draw(st.integers(0, 4)):  # mostly non-empty
        subsizes = [max(1, s) for s in subsizes]
    starts = [draw(st.integers(0, s - ss)) for s, ss in zip(sizes, subsizes)]
    order = draw(st.sampled_from([ORDER_C, ORDER_F]))
    return sizes, subsizes, starts, order


@st.composite
def darray_args(draw):
    ndims = draw(st.integers(1, 3))
    gsizes, distribs, dargs, psizes = [], [], [], []
    for _ in range(ndims):
        g = draw(st.integers(1, 6))
        dist = draw(st.sampled_from([BLOCK, CYCLIC, NONE]))
        p = 1 if dist == NONE else draw(st.integers(1, 3))
        if dist == BLOCK:
            need = -(-g // p)
            darg = draw(st.sampled_from([DFLT, need, need + 1]))
        elif dist == CYCLIC:
            darg = draw(st.sampled_from([DFLT, 1, 2, 3]))
        else:
            darg = DFLT
        gsizes.append(g)
        distribs.append(dist)
        dargs.append(darg)
        psizes.append(p)
    size = 1
    for p in psizes:
        size *= p
    rank = draw(st.integers(0, size - 1))
    order = draw(st.sampled_from([ORDER_C, ORDER_F]))
    return size, rank, gsizes, distribs, dargs, psizes, order


def _lists(k, elems):
    return st.lists(elems, min_size=k, max_size=k)


@st.composite
def specs(draw, depth=3, names=BASIC, resized=True, arrays=True, exclude=()):
    """A random spec of nesting depth up to ``depth`` (depth 0: a basic type), without ``exclude`` kinds."""
    if depth == 0:
        return draw(leaves(names))
    kinds = ["dup", "contig", "vector", "hvector", "indexed", "hindexed", "iblock", "hiblock", "struct"]
    if resized:
        kinds.append("resized")
    if arrays:
        kinds += ["subarray", "darray"]
    kinds = [k for k in kinds if k not in exclude]
    kind = draw(st.sampled_from(kinds + ["leaf"]))
    sub = specs(depth - 1, names, resized, arrays, exclude)
    if kind == "leaf":
        return draw(leaves(names))
    if kind == "dup":
        return ("dup", draw(sub))
    if kind == "contig":
        return ("contig", draw(small), draw(sub))
    if kind == "vector":
        return ("vector", draw(small), draw(small), draw(st.integers(-4, 4)), draw(sub))
    if kind == "hvector":
        return ("hvector", draw(small), draw(small), draw(st.integers(-48, 48)), draw(sub))
    if kind in ("indexed", "hindexed"):
        k = draw(st.integers(0, 3))
        rng = st.integers(-4, 6) if kind == "indexed" else st.integers(-40, 60)
        return (kind, draw(_lists(k, small)), draw(_lists(k, rng)), draw(sub))
    if kind in ("iblock", "hiblock"):
        k = draw(st.integers(0, 3))
        rng = st.integers(-4, 6) if kind == "iblock" else st.integers(-40, 60)
        return (kind, draw(small), draw(_lists(k, rng)), draw(sub))
    if kind == "struct":
        k = draw(st.integers(0, 3))
        return ("struct", draw(_lists(k, small)), draw(_lists(k, st.integers(-40, 60))),
                [draw(st.one_of(sub, leaves(names))) for _ in range(k)])
    if kind == "resized":
        return ("resized", draw(st.integers(-16, 16)), draw(st.integers(-8, 48)), draw(sub))
    if kind == "subarray":
        return ("subarray", *draw(subarray_args()), draw(sub))
    return ("darray", *draw(darray_args()), draw(sub))


def build(spec, M):
    """Build ``spec`` with the datatype namespace ``M`` (``gpumpi.datatypes`` or ``mpi4py.MPI``)."""
    kind = spec[0]
    if kind == "named":
        return getattr(M, spec[1])
    if kind == "f90i":
        return M.Datatype.Create_f90_integer(spec[1])
    if kind == "f90r":
        return M.Datatype.Create_f90_real(spec[1], spec[2])
    if kind == "f90c":
        return M.Datatype.Create_f90_complex(spec[1], spec[2])
    if kind == "struct":
        return M.Datatype.Create_struct(spec[1], spec[2], [build(s, M) for s in spec[3]])
    old = build(spec[-1], M)
    args = spec[1:-1]
    return {
        "dup": lambda: old.Dup(),
        "contig": lambda: old.Create_contiguous(*args),
        "vector": lambda: old.Create_vector(*args),
        "hvector": lambda: old.Create_hvector(*args),
        "indexed": lambda: old.Create_indexed(*args),
        "hindexed": lambda: old.Create_hindexed(*args),
        "iblock": lambda: old.Create_indexed_block(*args),
        "hiblock": lambda: old.Create_hindexed_block(*args),
        "resized": lambda: old.Create_resized(*args),
        "subarray": lambda: old.Create_subarray(*args),
        "darray": lambda: old.Create_darray(*args),
    }[kind]()


def depth(spec) -> int:
    kind = spec[0]
    if kind in ("named", "f90i", "f90r", "f90c"):
        return 0
    if kind == "struct":
        return 1 + max((depth(s) for s in spec[3]), default=0)
    return 1 + depth(spec[-1])


LAYOUT = ("size", "lb", "extent", "true_lb", "true_extent")


def layout(t) -> tuple:
    return tuple(getattr(t, a) for a in LAYOUT)
