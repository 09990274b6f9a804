"""Global Arrays collective operations, what they share: checks, matching two patches, owner computes (L6).

Theory of operation
===================
Every collective operation (the ``ops_*`` modules) is collective over the group of the
array(s) it names (they must all be on one group): every member calls it with the same
arguments.  Arguments are checked before any communication, identically on every member, so a
bad call raises everywhere.  The implicit syncs of GA (Manual §6.4) open and close each
operation: ``enter_op`` / ``leave_op`` (:mod:`gpumpi.ga.synchronization`): ``sync_in`` /
``sync_out`` for arrays on the default group, a flush plus a barrier of the array's own group
otherwise; both honour ``mask_sync``.

Owner computes.  Each process computes the part of the destination patch it owns
(``local_patch``, :mod:`gpumpi.ga.local_data`) and writes it through the view of its own
memory; the source elements that match it come from ``fetch`` (one-sided gets, plain copies
where the owner's memory is mapped here: :mod:`gpumpi.ga.transfers`).  Elements of two
patches match by their position in C order: element ``k`` of ``op(A[alo:ahi])`` goes with
element ``k`` of ``B[blo:bhi]``, so patches may differ in shape as long as they hold as many
elements.  ``op`` is nothing or, with ``trans``/``ta``/``tb``, the transpose of the patch: its
dimensions in reverse order (NumPy's ``.T``; GA's copy_patch reverses the indices the same
way), dimensions of extent 1 not counting.  Where the two patches, without their unit
dimensions, have the same logical shape the matching elements form a box of the source and
one fetch brings them (then a transpose if one side is transposed); otherwise the
destination's linear indices are mapped to source subscripts and ``gather`` brings them
element by element (correct, and slow, like GA's scatter fallback).  :func:`elementwise` is
that pattern for operations whose output element depends on the matching input elements.

Aliasing.  When an operation reads an array it also writes (``add(A, B, A)`` on different
patches, ``copy`` between disjoint patches of one array, ``symmetrize``, a matrix product into
one of its factors), every process first fetches everything it needs, then the group barriers
(:func:`barrier`), then everyone writes.  GA's own restrictions stay: ``copy`` and
``transpose`` from an array into itself (overlapping patches) raise :class:`GAError`.

Type rules.  Scalars (``fill``, ``scale``, ``add_constant``, ``alpha``/``beta``...) are
converted to the array's type (a float into an integer array truncates, as C does); a complex
scalar for a real array is a ``TypeError`` (:func:`as_scalar`).  Operands must have one type
(``TypeError``) and as many elements (``ValueError``).  Messages read
``"<call>: <problem> (<values>)"``.

Choices where GA's source, its manual and ga4py differ, are silent, or fall short (each
``ops_*`` module lists its own):

* arrays and patches of different shapes but as many elements match in C order everywhere,
  whole-array forms included (the manual's rule; GA's core reshapes in Fortran order, and its
  whole-array ``GA_Copy`` wants equal shapes);
* the arrays of one operation must live on one processor group (GA also copies between nested
  groups).
"""

from __future__ import annotations

import numpy as np

from ._layout import patch_size
from .buffers import patch_bounds, to_host, xp_of
from .groups import group_comm
from .handles import arr
from .local_data import local_patch
from .state import C_CHAR, C_DBL, C_DCPL, C_FLOAT, C_INT, C_LDBL, C_LDCPL, C_LONG, C_LONGLONG, C_SCPL
from .synchronization import enter_op, leave_op
from .transfers import fetch, gather

__all__ = [
    "FLOATING", "NUMERIC", "Patch",
    "arrays_of", "as_scalar", "as_xp", "barrier", "check_sizes", "elementwise", "fetch_as", "finish_writes",
    "matched", "op_patch", "patches_given", "same_type", "type_name",
]


# --- helpers -------------------------------------------------------------------------------------
_TYPE_NAMES = {C_CHAR: "C_CHAR", C_INT: "C_INT", C_LONG: "C_LONG", C_FLOAT: "C_FLOAT", C_DBL: "C_DBL",
               C_LDBL: "C_LDBL", C_SCPL: "C_SCPL", C_DCPL: "C_DCPL", C_LDCPL: "C_LDCPL", C_LONGLONG: "C_LONGLONG"}
#: the element types GA's typed calls (dot, gop) dispatch on
NUMERIC = tuple(np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64, np.complex64, np.complex128))
FLOATING = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def type_name(a) -> str:
    """GA's name of ``a``'s type (``C_DBL``...), for messages."""
    return _TYPE_NAMES.get(a.gtype, str(a.dtype))


def as_xp(x, xp):
    """``x`` as an array of the array module ``xp``."""
    if xp is np:
        return to_host(x)
    return xp.asarray(x)


def finish_writes(xp) -> None:
    """Writes through a device view are complete before anyone else reads them."""
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def fetch_as(a, lo, hi, xp):
    """The patch ``[lo, hi)`` of ``a`` as a new array of ``xp`` (one-sided gets)."""
    return as_xp(fetch(a, tuple(lo), tuple(hi)), xp)


def arrays_of(call: str, *handles):
    """The arrays behind ``handles``, checked to live on one processor group."""
    arrs = [arr(h, call) for h in handles]
    g = arrs[0].group
    for x in arrs[1:]:
        if x.group is not g:
            raise ValueError(f"{call}: the arrays live on different processor groups "
                             f"({', '.join(str(y.group.handle) for y in arrs)})")
    return arrs


def same_type(call: str, *arrs) -> None:
    """TypeError unless the arrays have one type."""
    if any(x.dtype != arrs[0].dtype for x in arrs[1:]):
        raise TypeError(f"{call}: the arrays differ in type ({', '.join(type_name(x) for x in arrs)})")


def as_scalar(a, value, call: str, what: str, default=None):
    """``value`` as a NumPy scalar of ``a``'s type (``default`` for None; no default: ValueError)."""
    if value is None:
        if default is None:
            raise ValueError(f"{call}: {what} required (None)")
        value = default
    try:
        v = np.asarray(value)
    except Exception:
        raise TypeError(f"{call}: {what} must be a number ({value!r})") from None
    if v.size != 1:
        raise ValueError(f"{call}: {what} must be a scalar ({value!r})")
    if v.dtype.kind not in "biufc":
        raise TypeError(f"{call}: {what} must be a number ({value!r})")
    if v.dtype.kind == "c" and a.dtype.kind != "c":
        raise TypeError(f"{call}: complex {what} for a {type_name(a)} array ({value!r})")
    with np.errstate(invalid="ignore", over="ignore"):
        return v.reshape(()).astype(a.dtype)[()]


def barrier(a) -> None:
    """Between the reads and the writes of an operation whose output aliases an input."""
    group_comm(a).Barrier()


def patches_given(*bounds) -> bool:
    """Whether any patch bound was given (else: the whole-array form)."""
    return any(b is not None for b in bounds)


# -- matching the elements of two patches
class Patch:
    """A patch of an array with its ``op``: ``axes`` are the patch's dimensions of extent other
    than 1 in the order of ``op(patch)`` (reversed for a transpose), ``lshape`` their extents."""

    __slots__ = ("a", "lo", "hi", "axes", "lshape", "size")

    def __init__(self, a, lo, hi, trans: bool, call: str) -> None:
        self.a, self.lo, self.hi = a, tuple(lo), tuple(hi)
        axes = [d for d, (l, h) in enumerate(zip(lo, hi)) if h - l != 1]
        if trans:
            axes.reverse()
        self.axes = axes
        self.lshape = tuple(hi[d] - lo[d] for d in axes)
        self.size = patch_size(lo, hi)


def op_patch(a, lo, hi, trans, call: str) -> Patch:
    """The checked patch ``[lo, hi)`` of ``a`` with its ``op`` (``trans``: the transpose)."""
    lo, hi = patch_bounds(a, lo, hi, call)
    return Patch(a, lo, hi, bool(trans), call)


def check_sizes(call: str, *patches) -> None:
    """ValueError unless the patches hold as many elements."""
    if any(p.size != patches[0].size for p in patches[1:]):
        raise ValueError(f"{call}: the patches differ in element count ({', '.join(str(p.size) for p in patches)})")


def matched(dst: Patch, plo, phi, src: Patch, xp):
    """The elements of ``src`` that match the sub-box ``[plo, phi)`` of ``dst``'s patch, as an
    array of ``xp`` shaped like the sub-box (module docstring: matching by C-order position)."""
    sub = tuple(h - l for l, h in zip(plo, phi))
    if dst.lshape == src.lshape:  # one box of src, its axes permuted
        blo, bhi = list(src.lo), [l + 1 for l in src.lo]
        for dd, sd in zip(dst.axes, src.axes):
            blo[sd] = src.lo[sd] + plo[dd] - dst.lo[dd]
            bhi[sd] = src.lo[sd] + phi[dd] - dst.lo[dd]
        v = fetch_as(src.a, blo, bhi, xp)
        ss = sorted(src.axes)
        v = v.reshape(tuple(bhi[d] - blo[d] for d in ss))
        v = v.transpose([ss.index(d) for d in src.axes])  # the order of op(src)
        ds = sorted(dst.axes)
        v = v.transpose([dst.axes.index(d) for d in ds])  # the order of dst's dimensions
        return v.reshape(sub)
    grids = np.meshgrid(*[np.arange(l, h, dtype=np.int64) for l, h in zip(plo, phi)], indexing="ij")
    if dst.axes:
        k = np.ravel_multi_index([grids[d] - dst.lo[d] for d in dst.axes], dst.lshape)
    else:
        k = np.zeros(sub, np.int64)
    subs = np.empty(k.shape + (src.a.ndim,), np.int64)
    for d in range(src.a.ndim):
        subs[..., d] = src.lo[d]
    if src.axes:
        for sd, c in zip(src.axes, np.unravel_index(k, src.lshape)):
            subs[..., sd] += c
    vals = gather(src.a.handle, subs.reshape(-1, src.a.ndim))
    return as_xp(vals.reshape(sub), xp)


# -- owner computes
def elementwise(call: str, out, out_lo, out_hi, srcs, fn) -> None:
    """``out[patch] = fn(*matched sources)`` by the owners of ``out``'s patch. ``srcs`` are
    :class:`Patch` es; ``fn`` gets their matched values and the array module."""
    a = out.a
    enter_op(a)
    got = local_patch(a, out_lo, out_hi)
    xp = xp_of(a)
    res = None
    if got is not None:
        view, plo, phi = got
        res = fn(*[matched(out, plo, phi, s, xp) for s in srcs], xp)
    if any(s.a is a for s in srcs):
        barrier(a)
    if got is not None:
        got[0][...] = res
        finish_writes(xp)
    leave_op(a)
