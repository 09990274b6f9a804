"""Algorithm selection for collectives (L1): the table, and ``build``.

Theory of operation
===================
``build(coll, rank, size, ...)`` returns the :class:`~.schedule.Schedule` of one rank.  The
algorithm is either forced (``algorithm=``: a name from ``ALGORITHMS[coll]``; a
``ValueError`` names the choices when it is unknown or cannot serve the call, e.g. ring
for a non-commutative operation) or the first row of ``TABLE`` for ``coll`` whose
condition holds and whose algorithm serves the call.

Every rank must pick the same algorithm, so a condition may only read what all ranks
agree on: the size, the op's commutativity and the message size in bytes (``n *
unit``, or the sum of ``counts``; the vector forms of gather/scatter and alltoallv, where
a rank does not know the others' counts, have one algorithm each).  Not ``inplace``
(root-only for rooted collectives) and not ``memory``: MPI lets ranks pass different
memory kinds to one collective, so no row reads it yet (``Ctx.memory`` is there for a
row that a collective agreement on the kind would allow).

The rows follow MPICH's default cutoffs (``MPIR_CVAR_*``, MPICH 3/4 "auto" selection):

* bcast: binomial below 12 KiB (``BCAST_SHORT_MSG_SIZE``) or below 8 ranks
  (``BCAST_MIN_PROCS``); scatter + ring allgather above (MPICH's long-message bcast).
* gather/scatter: binomial (MPICH's only intra algorithm for them); the v forms linear.
* allgather: total bytes (``n * size``) below 80 KiB (``ALLGATHER_SHORT/LONG_MSG_SIZE``):
  recursive doubling on powers of two, Bruck otherwise (both ``log2`` rounds; recursive
  doubling without the fold's two extra rounds); ring above.  allgatherv: ring.
* alltoall: Bruck for blocks of at most 256 bytes (``ALLTOALL_SHORT_MSG_SIZE``) on 8 or
  more ranks (``ALLTOALL_MIN_PROCS``), where latency dominates; pairwise otherwise.
* reduce: Rabenseifner above 2 KiB (``REDUCE_SHORT_MSG_SIZE``) when every one of the ``p``
  pieces gets a unit (``n >= p``); binomial otherwise.
* allreduce: recursive doubling up to 2 KiB (``ALLREDUCE_SHORT_MSG_SIZE``) or when
  ``n < p``; above, ring for long messages (512 KiB and up) on sizes that are not powers
  of two (no fold: the fold costs the folded ranks two extra full-size transfers) and on
  up to 4 ranks (the same volume in few rounds, and its first round copies only the input
  blocks a later step reads, the reduced one fused with its reduction: measured at 2 ranks,
  16 MiB float64), Rabenseifner otherwise.  Ring needs a commutative op; non-commutative ops take
  Rabenseifner, which keeps rank order.  ``reduce_bcast`` is only ever forced.
* reduce_scatter(_block): non-commutative ops or total at most 2 KiB: reduce to rank 0
  + scatterv (``log2 size + 1`` latencies against ``size - 1``); commutative above:
  pairwise (MPICH's long-message choice, ``REDUCE_SCATTER_LONG_MSG_SIZE``); ``ring`` is
  forced only (same volume as pairwise, but each step waits on the previous one).
* scan/exscan: recursive doubling; barrier: dissemination.
* On a communicator over several nodes with more than one rank on some node (``nodes``, an
  MPI launcher's job), barrier, bcast, reduce and allreduce are hierarchical
  (:mod:`.hier`: inside each node, then among one leader per node), as MPICH's SMP-aware
  collectives (``MPIR_CVAR_ENABLE_SMP_COLLECTIVES``, on by default, no size limit); reduce and
  allreduce need a commutative operation or every node's ranks contiguous (rank order).
"""

from __future__ import annotations

from . import (allgather, allreduce, alltoall, barrier, bcast, gather, hier, reduce, reduce_scatter,
               reduce_scatter_block, scan, scatter)
from ._common import pof2_floor
from .schedule import Schedule

__all__ = ["ALGORITHMS", "TABLE", "Ctx", "build", "algorithm_of", "COLLECTIVES"]

KIB = 1024

#: the builder of every (collective, algorithm)
_BUILDERS = {
    "barrier": {"dissemination": barrier.dissemination, "hierarchical": hier.barrier},
    "bcast": {"binomial": bcast.binomial, "scatter_allgather": bcast.scatter_allgather,
              "hierarchical": hier.bcast},
    "gather": {"binomial": gather.binomial, "linear": gather.linear},
    "gatherv": {"linear": gather.linear_v},
    "scatter": {"binomial": scatter.binomial, "linear": scatter.linear},
    "scatterv": {"linear": scatter.linear_v},
    "allgather": {"recursive_doubling": allgather.recursive_doubling, "bruck": allgather.bruck,
                  "ring": allgather.ring},
    "allgatherv": {"ring": allgather.ring_v},
    "alltoall": {"pairwise": alltoall.pairwise, "bruck": alltoall.bruck},
    "alltoallv": {"pairwise": alltoall.pairwise_v},
    "reduce": {"binomial": reduce.binomial, "rabenseifner": reduce.rabenseifner, "hierarchical": hier.reduce},
    "allreduce": {"recursive_doubling": allreduce.recursive_doubling, "rabenseifner": allreduce.rabenseifner,
                  "ring": allreduce.ring, "reduce_bcast": allreduce.reduce_bcast,
                  "hierarchical": hier.allreduce},
    "reduce_scatter_block": {"pairwise": reduce_scatter_block.pairwise, "ring": reduce_scatter_block.ring,
                             "reduce_scatterv": reduce_scatter_block.reduce_scatterv},
    "reduce_scatter": {"pairwise": reduce_scatter.pairwise, "ring": reduce_scatter.ring,
                       "reduce_scatterv": reduce_scatter.reduce_scatterv},
    "scan": {"recursive_doubling": scan.recursive_doubling},
    "exscan": {"recursive_doubling": scan.recursive_doubling_ex},
}

COLLECTIVES = tuple(_BUILDERS)

#: the algorithms of every collective, by name
ALGORITHMS = {coll: tuple(algs) for coll, algs in _BUILDERS.items()}

#: (collective, algorithm) that need a commutative operation
COMMUTATIVE_ONLY = {("allreduce", "ring"), ("reduce_scatter", "ring"), ("reduce_scatter", "pairwise"),
                     ("reduce_scatter_block", "ring"), ("reduce_scatter_block", "pairwise")}


class Ctx:
    """What a selection condition may read (the same at every rank).

    ``bytes``: the message size (``n * unit``; the input, ``sum(counts) * unit``, for
    reduce_scatter; one block for the rooted and all-to-all collectives), ``total``: all
    blocks (``bytes * size`` for gather/scatter/allgather/alltoall), ``p``: the largest
    power of two not above ``size``, ``pof2``: whether ``size`` is one, ``nn``: the number of
    nodes the ranks are on, ``contig``: whether every node's ranks are contiguous.
    """

    __slots__ = ("size", "n", "bytes", "total", "commute", "memory", "p", "pof2", "nn", "contig")

    def __init__(self, size, n, bytes_, total, commute, memory, nodes=None):
        self.size, self.n, self.bytes, self.total = size, n, bytes_, total
        self.commute, self.memory = commute, memory
        self.p = pof2_floor(size)
        self.pof2 = self.p == size
        self.nn = len(set(nodes)) if nodes else 1
        self.contig = hier.contiguous(nodes) if nodes else True

    def __repr__(self):
        return (f"Ctx(size={self.size}, n={self.n}, bytes={self.bytes}, total={self.total}, "
                f"commute={self.commute}, memory={self.memory!r}, nodes={self.nn})")


def _always(c):
    return True


def _smp(c):
    """Ranks on several nodes, some node with more than one (MPICH's SMP-aware collectives)."""
    return 1 < c.nn < c.size


#: (collective, condition, algorithm): the first row whose condition holds (and whose
#: algorithm serves the call) wins.  See the module docstring for the reasoning.
TABLE = (
    ("barrier", _smp, "hierarchical"),
    ("barrier", _always, "dissemination"),
    ("bcast", _smp, "hierarchical"),
    ("bcast", lambda c: c.bytes < 12 * KIB or c.size < 8, "binomial"),
    ("bcast", _always, "scatter_allgather"),
    ("gather", _always, "binomial"),
    ("gatherv", _always, "linear"),
    ("scatter", _always, "binomial"),
    ("scatterv", _always, "linear"),
    ("allgather", lambda c: c.total < 80 * KIB and c.pof2, "recursive_doubling"),
    ("allgather", lambda c: c.total < 80 * KIB, "bruck"),
    ("allgather", _always, "ring"),
    ("allgatherv", _always, "ring"),
    ("alltoall", lambda c: c.bytes <= 256 and c.size >= 8, "bruck"),
    ("alltoall", _always, "pairwise"),
    ("alltoallv", _always, "pairwise"),
    ("reduce", _smp, "hierarchical"),
    ("reduce", lambda c: c.bytes > 2 * KIB and c.n >= c.p, "rabenseifner"),
    ("reduce", _always, "binomial"),
    ("allreduce", _smp, "hierarchical"),
    ("allreduce", lambda c: c.bytes <= 2 * KIB or c.n < c.p, "recursive_doubling"),
    ("allreduce", lambda c: c.commute and (not c.pof2 or c.size <= 4) and c.bytes >= 512 * KIB, "ring"),
    ("allreduce", _always, "rabenseifner"),
    ("reduce_scatter_block", lambda c: not c.commute or c.bytes <= 2 * KIB, "reduce_scatterv"),
    ("reduce_scatter_block", _always, "pairwise"),
    ("reduce_scatter", lambda c: not c.commute or c.bytes <= 2 * KIB, "reduce_scatterv"),
    ("reduce_scatter", _always, "pairwise"),
    ("scan", _always, "recursive_doubling"),
    ("exscan", _always, "recursive_doubling"),
)

def _flat(coll: str, rank: int, size: int, **kw) -> Schedule:
    """The table's schedule for a group of one node (a phase of a hierarchical schedule)."""
    return build(coll, rank, size, **kw)


_ROOTED = {"bcast", "gather", "gatherv", "scatter", "scatterv", "reduce"}


def _ctx(coll, size, n, counts, scounts, rcounts, commute, unit, memory, nodes=None):
    if coll in ("allgatherv", "reduce_scatter"):
        units = sum(counts) if counts is not None else 0
        return Ctx(size, units, units * unit, units * unit, commute, memory, nodes)
    if coll == "alltoallv":
        units = sum(rcounts) if rcounts is not None else 0
        return Ctx(size, units, units * unit, units * unit, commute, memory, nodes)
    if coll == "reduce_scatter_block":
        return Ctx(size, n * size, n * size * unit, n * size * unit, commute, memory, nodes)
    return Ctx(size, n, n * unit, n * unit * size, commute, memory, nodes)


def _serves(coll, name, commute, nodes=None) -> bool:
    if name == "hierarchical" and coll in ("reduce", "allreduce") and not commute:
        return not nodes or hier.contiguous(nodes)  # rank order only when every node's ranks are contiguous
    return commute or (coll, name) not in COMMUTATIVE_ONLY


def algorithm_of(coll: str, size: int, *, n: int = 0, counts=None, scounts=None, rcounts=None,
                 commute: bool = True, unit: int = 1, memory: str = "host", algorithm=None, nodes=None) -> str:
    """The name of the algorithm ``build`` uses for these arguments (reports, ``gpumpi bench``);
    ``nodes``: the node of every rank, for a communicator over several nodes."""
    if coll not in _BUILDERS:
        raise ValueError(f"collective selection: unknown collective ({coll!r}; known: {', '.join(COLLECTIVES)})")
    if nodes is not None and len(nodes) != size:
        raise ValueError(f"{coll}: nodes must name the node of every rank ({len(nodes)} for size {size})")
    if algorithm is not None:
        if algorithm not in _BUILDERS[coll]:
            raise ValueError(f"{coll}: unknown algorithm ({algorithm!r}; choices: {', '.join(ALGORITHMS[coll])})")
        if not _serves(coll, algorithm, commute, nodes):
            ok = [a for a in ALGORITHMS[coll] if _serves(coll, a, commute, nodes)]
            why = " or every node's ranks contiguous" if algorithm == "hierarchical" else ""
            raise ValueError(f"{coll}: algorithm {algorithm!r} needs a commutative operation{why} "
                             f"(choices for this op: {', '.join(ok)})")
        return algorithm
    c = _ctx(coll, size, n, counts, scounts, rcounts, commute, unit, memory, nodes)
    for row_coll, cond, name in TABLE:
        if row_coll == coll and cond(c) and _serves(coll, name, commute, nodes):
            return name
    raise AssertionError(f"{coll}: no row of the selection table serves {c!r}")  # the table ends in _always rows


def build(coll: str, rank: int, size: int, *, root: int = 0, n: int = 0, counts=None, scounts=None,
          rcounts=None, commute: bool = True, inplace: bool = False, unit: int = 1, memory: str = "host",
          algorithm=None, nodes=None) -> Schedule:
    """The schedule of ``rank`` for one collective call (MPI_<coll>'s algorithm choice).

    ``n``: units per block (``bcast``, ``reduce``, ``allreduce``, ``scan``, ``exscan``: the whole
    buffer; gatherv/scatterv: this rank's count), ``counts``: per-rank counts (gatherv and
    scatterv at the root, allgatherv, reduce_scatter), ``scounts``/``rcounts``: alltoallv,
    ``commute``: the op's commutativity, ``unit``: bytes per unit (selection only),
    ``memory``: "host", "sim" or "device", ``algorithm``: a name from ``ALGORITHMS[coll]``,
    ``nodes``: the node of every rank (a tuple; None: one node).
    """
    name = algorithm_of(coll, size, n=n, counts=counts, scounts=scounts, rcounts=rcounts, commute=commute,
                        unit=unit, memory=memory, algorithm=algorithm, nodes=nodes)
    fn = _BUILDERS[coll][name]
    kw = {}
    if name == "hierarchical":
        kw["nodes"] = tuple(nodes) if nodes else (0,) * size
        kw["flat"] = _flat
    if coll in _ROOTED:
        kw["root"] = root
    if coll == "barrier":
        return fn(rank, size, **kw)
    if coll in ("allgatherv", "reduce_scatter"):
        kw["counts"] = counts
    elif coll == "alltoallv":
        kw["scounts"], kw["rcounts"] = scounts, rcounts
    else:
        kw["n"] = n
        if coll in ("gatherv", "scatterv"):
            kw["counts"] = counts
    if coll in ("reduce", "allreduce", "reduce_scatter_block", "reduce_scatter", "scan", "exscan"):
        kw["commute"] = commute
    if coll != "bcast":
        kw["inplace"] = inplace
    return fn(rank, size, **kw)
