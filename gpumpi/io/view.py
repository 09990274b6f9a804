"""File views (L1 pure core): where the bytes of a view's data stream lie in a file.

Theory of operation
===================
A view (MPI_File_set_view) is a displacement ``disp``, an elementary type ``etype`` and a
``filetype``.  The file, as this process sees it, is the filetype tiled from ``disp`` (copy
``k`` at ``disp + k * extent``); only the bytes its typemap covers are visible, and those
bytes in typemap order are the view's *data stream*.  An offset counted in etypes is the
stream position ``offset * esize``.

:class:`View` maps a stream range ``[p, p + n)`` to the file pieces ``(file offset, length)``
it occupies, in stream order, adjacent pieces merged.  It does so by bisection in the
cumulative lengths of the filetype's merged byte runs (``flatten.segments``: the flattening
messages use), so a call costs one step per piece, never per element.  :meth:`View.stream_at`
is the inverse used for ``SEEK_END``: how many stream bytes lie before a file offset.

The rules of MPI are checked here once (:func:`make`): the filetype's runs are non-negative
and in nondecreasing order (MPI: "the displacements ... must be non-negative and
monotonically nondecreasing"), its size is a whole number of etypes and not zero, and the
etype has no negative displacement.  Nothing here touches a file or imports NumPy.
"""

from __future__ import annotations

import bisect

__all__ = ["View", "ViewError", "make"]


class ViewError(ValueError):
    """A view MPI does not allow (the caller raises it as ``MPI.Exception``); ``argument``:
    the displacement is wrong (MPI_ERR_ARG), else a type (MPI_ERR_TYPE)."""

    def __init__(self, message: str, argument: bool = False) -> None:
        super().__init__(message)
        self.argument = argument


class View:
    """A file view: ``disp`` (bytes), ``etype``/``filetype`` (datatype objects, kept for
    ``Get_view``), ``datarep``; ``esize`` the etype's size; ``runs`` the filetype's merged
    ``(offset, length)`` runs; ``cum`` their cumulative lengths; ``tsize``/``textent`` the
    filetype's size and extent."""

    __slots__ = ("disp", "etype", "filetype", "datarep", "esize", "offs", "lens", "cum", "tsize", "textent")

    def __init__(self, disp: int, etype, filetype, datarep: str, esize: int, runs, textent: int) -> None:
        self.disp, self.etype, self.filetype, self.datarep, self.esize = disp, etype, filetype, datarep, esize
        self.offs = [o for o, _ in runs]
        self.lens = [n for _, n in runs]
        cum, t = [0], 0
        for n in self.lens:
            t += n
            cum.append(t)
        self.cum, self.tsize, self.textent = cum, t, textent

    @property
    def contiguous(self) -> bool:
        """Whether the stream is the file from ``disp`` on, byte for byte."""
        return len(self.offs) == 1 and self.offs[0] == 0 and self.lens[0] == self.textent

    def pieces(self, pos: int, n: int) -> list:
        """The file pieces ``[(offset, length), ...]`` of stream bytes ``[pos, pos + n)``."""
        if n <= 0:
            return []
        if self.contiguous:
            return [(self.disp + pos, n)]
        out: list = []
        tsize, ext, offs, lens, cum = self.tsize, self.textent, self.offs, self.lens, self.cum
        k, r = divmod(pos, tsize)
        i = bisect.bisect_right(cum, r) - 1
        within = r - cum[i]
        left = n
        nruns = len(offs)
        while left > 0:
            if i == 0 and within == 0 and left >= tsize:  # whole copies: one comprehension each
                whole = left // tsize
                base = self.disp + k * ext
                runs = [(base + j * ext + o, m) for j in range(whole) for o, m in zip(offs, lens)]
                if out and runs and out[-1][0] + out[-1][1] == runs[0][0]:
                    out[-1] = (out[-1][0], out[-1][1] + runs.pop(0)[1])
                if offs[0] + ext == offs[-1] + lens[-1]:  # copies that touch: merge across the seams
                    runs = _merged(runs)
                out.extend(runs)
                k += whole
                left -= whole * tsize
                continue
            take = min(lens[i] - within, left)
            o = self.disp + k * ext + offs[i] + within
            if out and out[-1][0] + out[-1][1] == o:
                out[-1] = (out[-1][0], out[-1][1] + take)
            else:
                out.append((o, take))
            left -= take
            within = 0
            i += 1
            if i == nruns:
                i, k = 0, k + 1
        return out

    def byte_offset(self, offset: int) -> int:
        """The absolute file offset of etype ``offset`` (MPI_File_get_byte_offset)."""
        pos = offset * self.esize
        if self.contiguous:
            return self.disp + pos
        k, r = divmod(pos, self.tsize)
        i = bisect.bisect_right(self.cum, r) - 1
        return self.disp + k * self.textent + self.offs[i] + (r - self.cum[i])

    def stream_at(self, fileoff: int) -> int:
        """How many stream bytes lie before file offset ``fileoff``."""
        rel = fileoff - self.disp
        if rel <= 0:
            return 0
        if self.contiguous:
            return rel
        ext, first, end = self.textent, self.offs[0], self.offs[-1] + self.lens[-1]
        k = (rel - end) // ext + 1 if rel >= end else 0  # copies wholly before fileoff
        got = k * self.tsize
        while k * ext + first < rel:  # (a copy's data may reach past its extent: the next may start in it)
            r = rel - k * ext
            for o, n in zip(self.offs, self.lens):
                if o >= r:
                    break
                got += min(n, r - o)
            k += 1
        return got


def _merged(runs: list) -> list:
    """``runs`` with adjacent ones joined."""
    out: list = []
    for o, n in runs:
        if out and out[-1][0] + out[-1][1] == o:
            out[-1] = (out[-1][0], out[-1][1] + n)
        else:
            out.append((o, n))
    return out


def make(disp: int, etype, esegs, esize: int, filetype, fsegs, tsize: int, textent: int, datarep: str) -> View:
    """The view of ``filetype`` (merged runs ``fsegs``, size ``tsize``, extent ``textent``) over
    etype (runs ``esegs``, size ``esize``) from ``disp``; raises :class:`ViewError` where MPI
    forbids it."""
    if disp < 0:
        raise ViewError(f"negative displacement ({disp})", argument=True)
    if esize <= 0:
        raise ViewError(f"the etype has no data (size {esize})")
    if any(o < 0 for o, _ in esegs):
        raise ViewError("the etype has a negative displacement")
    if tsize <= 0:
        raise ViewError(f"the filetype has no data (size {tsize})")
    if tsize % esize:
        raise ViewError(f"the filetype is not made of etypes (size {tsize}, etype size {esize})")
    end = 0
    for o, n in fsegs:
        if o < end:
            raise ViewError("the filetype's displacements are negative or not in nondecreasing order")
        end = o + n
    first = fsegs[0][0] if fsegs else 0
    if textent <= 0 or textent + first < end:  # (the next copy would start before this one's data ends)
        raise ViewError(f"the filetype's extent ({textent}) makes its copies overlap (data from {first} to {end})")
    return View(disp, etype, filetype, datarep, esize, fsegs, textent)
