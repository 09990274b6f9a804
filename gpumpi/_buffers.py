"""Buffer specifications (L2): mpi4py's message grammar, parsed into :class:`Msg` / :class:`MsgV`.

Theory of operation
===================
Uppercase calls describe memory with mpi4py's buffer specs (``msgbuffer.pxi``)::

    BufSpec  : buf | [buf, count] | [buf, datatype] | [buf, count, datatype]
             | [buf, (count, displ), datatype] | [buf, count, displ, datatype]
             | [BOTTOM, count, datatype]
    BufSpecV : buf | [buf, counts] | [buf, (counts, displs)] | [buf, datatype]
             | [buf, counts, datatype] | [buf, (counts, displs), datatype]
             | [buf, counts, displs, datatype]

``datatype`` is a :class:`Datatype` or a type string (``'d'``, ``'i4'``, ``'<f8'``);
without one it is inferred from the buffer's element format.  ``displ`` counts
datatype extents.  Without a count, ``count = (nbytes - displ*extent) / extent``,
divided by ``blocks`` (the number of per-process blocks in a collective).  In the
simple form ``(count, displ)`` may be a tuple or a list; in the vector form only a
tuple is ``(counts, displs)`` (a two-item list is ``counts``).  ``counts=None``
splits the buffer as evenly as possible, remainder to the low ranks; a scalar
count is replicated; ``displs=None`` is the prefix sum of counts; an integer
``displs`` is a stride.  ``None`` and ``BOTTOM`` as ``buf`` mean absolute
addresses and need an explicit datatype.  A ``PROC_NULL`` peer skips parsing.

Errors are mpi4py's: ``ValueError``/``TypeError``/``BufferError``/``KeyError`` with
mpi4py's text (``"message: negative count -1"``) after a ``"<call>: "`` prefix, and
``MPI.Exception(ERR_TYPE)`` for a null or freed datatype.  Unlike mpi4py, a
message must lie inside its buffer: a count (or count and displacement) that
reaches past either end is a ``ValueError``, so no call reads or writes
memory it was not given.

A message touches the bytes ``[addr + lo, addr + lo + span)``: ``addr`` is MPI's
buffer pointer (buffer start + ``displ*extent``), element ``i`` sits at
``addr + i*extent``, and ``lo`` is 0 unless the datatype reaches below its
origin.  ``mem`` is a memoryview of exactly those bytes (host and sim memory).

Non-contiguous arrays need no hand-built type: a strided NumPy view, or a
non-contiguous device array (CAI: CuPy, numba, :class:`~gpumpi.testing.SimDeviceArray`
slices; DLPack: PyTorch, JAX), is a message of its elements in C order under an
automatic derived datatype (``numpy_dtype.for_array``), whatever its memory kind;
with an explicit derived datatype it is a pointer to its first element and the
type must stay within the view's span.  Only the simple form takes them: vector
specs and multi-block collectives need contiguous buffers (``BufferError``).

The common case, ``comm.Send(a, dest)`` with a contiguous NumPy array, takes a
fast path that reads the array header and builds only the :class:`Msg`; its
:class:`~gpumpi._arrays.BufferView` (``Msg.view``) is built if someone asks.
"""

from __future__ import annotations

import operator

import numpy as np

from ._arrays import (
    DATATYPE_BY_DTYPE_ID,
    DEVICE,
    HOST,
    NP_WRITEABLE,
    PEEK_DATA,
    PEEK_FLAGS,
    PEEK_OK,
    BufferView,
    NotABufferError,
    StridedView,
    raw_mem,
    strided_nd,
    as_buffer,
    datatype_of,
    lookup_dtype,
    nd_bytes,
)
from .constants import BOTTOM, PROC_NULL
from .datatypes._core import PREDEFINED_COMBINERS, Datatype
from .datatypes.flatten import sigcode
from .datatypes.predefined import lookup_typecode
from .errors import ERR_TYPE, error

__all__ = ["Msg", "MsgV", "message_simple", "message_vector", "host_fast", "asdatatype", "is_integral", "extent_for"]

_id = id
_ndarray = np.ndarray


class _Message:
    __slots__ = ()

    @property
    def view(self) -> BufferView | None:
        """The buffer (None for BOTTOM); built on first use for fast-path messages."""
        v = self._view
        if v is None and self.obj is not None:
            v = self._view = as_buffer(self.obj, True)
        return v

    @property
    def device(self) -> int | None:
        """The device ordinal of the memory (its own device, which may not be the current one;
        None for host memory)."""
        return None if self.kind == HOST else self.view.device

    @property
    def mem(self) -> memoryview | None:
        """Memoryview of the bytes ``[addr + lo, addr + lo + span)`` (host and sim memory)."""
        m = self._mem
        if m is None:
            v, obj = self._view, self.obj
            if v is not None:
                if v.kind == DEVICE:
                    return None
                whole, base = v.mem, v.addr
            elif obj is None:  # absolute addresses (BOTTOM)
                m = self._mem = raw_mem(self.addr + self.lo, self.span, False, None)
                return m
            else:  # an ndarray parsed straight from its header
                whole, base = nd_bytes(obj), None
            span = self.span
            if span == len(whole):  # the message spans its whole buffer
                m = whole
            else:
                if base is None:
                    base = PEEK_DATA[_id(obj) >> 3]
                off = self.addr + self.lo - base
                m = whole[off:off + span]
            self._mem = m
        return m


class Msg(_Message):
    """A parsed simple buffer spec (``BufSpec``/``BufSpecB``).

    ``obj`` owner kept alive (None for BOTTOM); ``view`` its BufferView; ``addr`` MPI's
    buffer pointer; ``count`` elements per block; ``datatype``; ``nbytes`` packed bytes
    per block (``count * datatype.size``); ``blocks`` (1 unless a collective passed more);
    ``lo``/``span`` the touched bytes ``[addr + lo, addr + lo + span)`` over all blocks,
    block ``i`` starting at ``addr + i * count * extent``; ``kind`` 'host'/'sim'/'device'
    and ``device`` (the ordinal); ``contiguous`` (one copy moves the message); ``mem``
    those bytes (None on a device).
    """

    __slots__ = ("obj", "_view", "addr", "count", "datatype", "nbytes", "span", "lo", "blocks", "kind",
                 "contiguous", "_mem")

    def __repr__(self) -> str:
        return (f"<Msg {self.kind} addr={self.addr:#x} count={self.count} datatype={self.datatype!r} "
                f"nbytes={self.nbytes} blocks={self.blocks}>")


class MsgV(_Message):
    """A parsed vector buffer spec (``BufSpecV``).

    As :class:`Msg`, except: ``addr`` is the buffer start; block ``i`` has ``counts[i]``
    elements from ``addr + displs[i] * extent``; ``nbytes`` is the packed total
    ``sum(counts) * datatype.size``; ``blocks`` is the number of blocks.
    """

    __slots__ = ("obj", "_view", "addr", "counts", "displs", "datatype", "nbytes", "span", "lo", "blocks",
                 "kind", "contiguous", "_mem")

    def __repr__(self) -> str:
        return (f"<MsgV {self.kind} addr={self.addr:#x} counts={self.counts} displs={self.displs} "
                f"datatype={self.datatype!r}>")


def _prefix(call: str) -> str:
    return f"{call}: " if call else ""


def asdatatype(o_type, call: str) -> Datatype:
    if isinstance(o_type, Datatype):
        return o_type
    return lookup_typecode(o_type, call)




def is_integral(ob) -> bool:
    """mpi4py's ``is_integral``: an index that is not a sized sequence."""
    tp = type(ob)
    if not hasattr(tp, "__index__"):
        return False
    if not hasattr(tp, "__getitem__") or issubclass(tp, dict):
        return True
    try:
        len(ob)
    except Exception:
        pass
    else:
        return False
    try:
        operator.index(ob)
    except Exception:
        return False
    return True




def _index(value, call: str) -> int:
    try:
        return operator.index(value)
    except TypeError as exc:
        raise TypeError(f"{_prefix(call)}{exc}") from None


def check_array(ob, n: int, call: str) -> tuple:
    values = tuple(_index(ob[i], call) for i in range(len(ob)))
    if len(values) != n:
        raise ValueError(f"{_prefix(call)}expecting {n} items, got {len(values)}")
    return values


def _basic(o_buf, o_type, readonly: bool, call: str, strided: bool = False):
    """Owner, view (None: BOTTOM, or not built yet), address, length, kind, datatype (``message_basic``).

    ``strided``: a non-contiguous CAI/DLPack array comes back as ``(obj, StridedView, ...)``
    with datatype None, for :func:`_strided_message`; else it is a BufferError.
    """
    if o_buf is None or o_buf is BOTTOM:
        return None, None, 0, 0, HOST, asdatatype(o_type, call)
    if type(o_buf) is _ndarray and PEEK_OK:
        i = _id(o_buf) >> 3
        fl = PEEK_FLAGS[i]
        if fl & 3 and (readonly or fl & NP_WRITEABLE):  # 3: NP_C_CONTIGUOUS | NP_F_CONTIGUOUS
            if o_type is None:
                datatype = DATATYPE_BY_DTYPE_ID.get(_id(o_buf.dtype)) or lookup_dtype(o_buf.dtype, call)
            elif type(o_type) is Datatype:
                datatype = o_type
            else:
                datatype = asdatatype(o_type, call)
            return o_buf, None, PEEK_DATA[i], o_buf.nbytes, HOST, datatype
    view = as_buffer(o_buf, readonly, call, strided)
    if view.__class__ is StridedView:
        return view.obj, view, view.addr, view.nbytes, view.kind, None
    datatype = datatype_of(view, call) if o_type is None else asdatatype(o_type, call)
    return view.obj, view, view.addr, view.nbytes, view.kind, datatype


def _invalid(datatype: Datatype, call: str):
    if datatype._size is None:
        raise error(ERR_TYPE, f"{_prefix(call)}invalid datatype (MPI_DATATYPE_NULL)")
    raise error(ERR_TYPE, f"{_prefix(call)}datatype has been freed ({datatype._handle:#x})")


def extent_for(datatype: Datatype, what: str, call: str) -> int:
    """The extent, checked usable for ``what`` (raising mpi4py's errors otherwise)."""
    extent = datatype._extent
    if extent is not None and extent > 0 and not datatype._rec.freed:
        return extent
    if datatype._size is None:
        raise ValueError(f"{_prefix(call)}message: cannot {what}, datatype is null")
    if datatype._rec.freed:
        _invalid(datatype, call)
    lb = datatype._lb
    raise ValueError(f"{_prefix(call)}message: cannot {what}, datatype extent {extent} "
                     f"(lb:{lb}, ub:{lb + extent})")




def _bounds(datatype: Datatype, start: int, n: int) -> tuple[int, int]:
    """Byte range ``[lo, hi)`` touched by ``n > 0`` elements whose first origin is ``start``."""
    if datatype._contig:
        lo = start + datatype._lb
        return lo, lo + n * datatype._extent
    step = (n - 1) * datatype._extent
    lo = start + datatype._true_lb + (step if step < 0 else 0)
    hi = start + datatype._true_lb + datatype._true_extent + (step if step > 0 else 0)
    return lo, hi


def _check_bottom(datatype: Datatype, count: int, call: str) -> None:
    if datatype._combiner in PREDEFINED_COMBINERS or datatype._true_lb <= 0:
        raise ValueError(f"{_prefix(call)}message: BOTTOM buffer needs a datatype built from absolute "
                         f"addresses (got {datatype._rec.name or repr(datatype)}, count {count}, "
                         f"true lb {datatype._true_lb})")


def _top_level(spec, readonly: bool, call: str, strided: bool = False):
    """A bare ``buf`` spec: anything but a buffer is mpi4py's TypeError."""
    if spec is None or spec is BOTTOM:
        raise TypeError(f"{_prefix(call)}message: expecting buffer or list/tuple")
    try:
        return _basic(spec, None, readonly, call, strided)
    except NotABufferError:
        raise TypeError(f"{_prefix(call)}message: expecting buffer or list/tuple") from None


def message_simple(spec, readonly: bool, rank: int, blocks: int = 1, call: str = "") -> Msg | None:
    """Parse a simple buffer spec (mpi4py ``message_simple``); None when ``rank`` is PROC_NULL.

    ``readonly`` false requires writable memory; ``blocks`` > 1 divides an inferred
    count into that many per-process blocks (an explicit count is per block).
    """
    if rank == PROC_NULL:
        return None
    if type(spec) is _ndarray and PEEK_OK and blocks < 2:
        i = _id(spec) >> 3
        fl = PEEK_FLAGS[i]
        if fl & 3 and (readonly or fl & NP_WRITEABLE):  # 3: NP_C_CONTIGUOUS | NP_F_CONTIGUOUS
            datatype = DATATYPE_BY_DTYPE_ID.get(_id(spec.dtype))
            if datatype is not None:
                nbytes = spec.nbytes
                m = Msg()
                m.obj = spec
                m._view = m._mem = None
                m.addr = PEEK_DATA[i]
                m.count = nbytes // datatype._extent
                m.datatype = datatype
                m.nbytes = m.span = nbytes
                m.lo = 0
                m.blocks = 1
                m.kind = HOST
                m.contiguous = True
                return m
    return _message_simple(spec, readonly, blocks, call)


_FAST_DT: dict = {}  # id(builtin NumPy dtype) -> signature code, or None: not for host_fast
_FAST_TYPE: dict = {}  # id(predefined Datatype) -> (size, signature code), for types with size == extent


def _fast_dtype(dtype):
    code = None
    if dtype.isbuiltin == 1 and dtype.isnative:  # builtin dtypes live forever: their id is theirs
        try:
            code = sigcode(lookup_dtype(dtype))
        except (KeyError, BufferError, ValueError, TypeError):
            code = None
        _FAST_DT[id(dtype)] = code
    return code


def fast_dtypes() -> dict:
    """The table of :func:`host_fast`: id(builtin NumPy dtype) -> signature code (None: not for it)."""
    return _FAST_DT


def fast_datatypes() -> dict:
    """The table of :func:`host_fast`: id(predefined Datatype) -> (size, signature code)."""
    return _FAST_TYPE


def _fast_types() -> None:
    from .datatypes import predefined

    for name in predefined.PREDEFINED_NAMES:
        dt = getattr(predefined, name)
        if isinstance(dt, Datatype) and dt._size and dt._size == dt._extent and not dt._lb:
            _FAST_TYPE[id(dt)] = (dt._size, sigcode(dt))  # predefined types live forever


def host_fast(spec, writable: bool):
    """``(address, nbytes, signature code)`` of the commonest point-to-point spec -- a whole
    contiguous NumPy array, bare or as ``[array, predefined datatype]`` -- read from the array
    header with a dict lookup or two (the cached plan of the two spec shapes the fast path
    serves); None for anything else, which :func:`message_simple` parses (and reports)."""
    t = type(spec)
    if t is _ndarray:
        a = spec
        sig = _FAST_DT.get(id(a.dtype), -1)
        if sig == -1:
            sig = _fast_dtype(a.dtype)
        if sig is None:
            return None
        n = a.nbytes
    elif (t is list or t is tuple) and len(spec) == 2:
        a, dt = spec
        if type(a) is not _ndarray:
            return None
        e = _FAST_TYPE.get(id(dt))
        if e is None:
            if _FAST_TYPE:
                return None
            _fast_types()
            e = _FAST_TYPE.get(id(dt))
            if e is None:
                return None
        n = a.nbytes
        if n % e[0]:
            return None
        sig = e[1]
    else:
        return None
    if not PEEK_OK:
        return None
    i = _id(a) >> 3
    fl = PEEK_FLAGS[i]
    if not fl & 3 or (writable and not fl & NP_WRITEABLE):  # 3: NP_C_CONTIGUOUS | NP_F_CONTIGUOUS
        return None
    return PEEK_DATA[i], n, sig


def _strided(a) -> bool:
    """A NumPy array view that is neither C- nor Fortran-contiguous."""
    return isinstance(a, _ndarray) and not (a.flags.c_contiguous or a.flags.f_contiguous)


def _layout(sv: StridedView):
    """A NumPy array with ``sv``'s dtype, shape and strides, for :func:`for_array`; its data is
    never read (device memory has no host address), so it is built over one dummy element."""
    obj = sv.obj
    if isinstance(obj, _ndarray) and obj.shape == sv.shape and obj.strides == sv.strides:
        return obj
    return np.lib.stride_tricks.as_strided(np.empty(1, sv.format), sv.shape, sv.strides, writeable=False)


def _strided_message(sv: StridedView, o_count, o_displ, o_type, readonly: bool, blocks: int, call: str) -> Msg:
    """A strided array view (NumPy, or CAI/DLPack on any memory kind) as a message.

    Without a datatype, or with a predefined one of the element's size, the message is the
    view's elements in C order under an automatic datatype (``numpy_dtype.for_array``):
    no hand-built type needed; ``count`` may then only be the number of elements and
    ``displ`` only 0.  With a derived datatype the view is a pointer to its first element,
    as in C (``[a[:, 1:], 1, column]``): the type lays out memory from there, and every
    byte it touches must lie within the view's span of memory.
    """
    shape, strides = sv.shape, sv.strides
    size = 1
    for n in shape:
        size *= n
    if blocks > 1:
        raise BufferError(f"{_prefix(call)}buffer is not contiguous (shape {shape}, strides {strides}): "
                          f"collectives need contiguous buffers or an explicit datatype")
    if not readonly and sv.readonly:
        raise BufferError(f"{_prefix(call)}buffer is not writable (read-only {type(sv.obj).__name__})")
    first = sv.addr
    given = None if o_type is None else asdatatype(o_type, call)
    if given is not None and (given._combiner not in PREDEFINED_COMBINERS or given._size != sv.itemsize):
        if given._size is None or given._rec.freed:
            _invalid(given, call)
        if o_count is None:
            raise ValueError(f"{_prefix(call)}message: a non-contiguous array (shape {shape}, strides "
                             f"{strides}) with datatype {given._rec.name or repr(given)} needs an explicit count")
        count = _index(o_count, call)
        if count < 0:
            raise ValueError(f"{_prefix(call)}message: negative count {count}")
        offset = 0
        if o_displ is not None:
            displ = _index(o_displ, call)
            if displ < 0:
                raise ValueError(f"{_prefix(call)}message: negative displacement {displ}")
            offset = displ * given._extent if displ else 0
        vlo, vhi = sv.lo, sv.lo + sv.span
        lo = hi = offset
        if count:
            lo, hi = _bounds(given, offset, count)
            if lo < vlo or hi > vhi:
                raise ValueError(f"{_prefix(call)}message: count {count} of datatype "
                                 f"{given._rec.name or repr(given)} needs bytes [{lo}, {hi}) from the first "
                                 f"element, the array view spans [{vlo}, {vhi})")
        datatype, addr = given, first + offset
        lo -= offset
    else:
        if o_displ is not None and _index(o_displ, call) != 0:
            raise ValueError(f"{_prefix(call)}message: a non-contiguous array takes no displacement "
                             f"({_index(o_displ, call)})")
        if o_count is not None and _index(o_count, call) != size:
            raise ValueError(f"{_prefix(call)}message: a non-contiguous array moves all its {size} elements "
                             f"(count {_index(o_count, call)})")
        from .datatypes.numpy_dtype import for_array

        datatype, count, start = for_array(_layout(sv))
        addr = first + start
        lo, hi = _bounds(datatype, 0, count) if count else (0, 0)
    m = Msg()
    m.obj = sv.obj
    m._view = sv
    m.addr = addr
    m.count = count
    m.datatype = datatype
    m.nbytes = count * datatype._size
    m.lo, m.span = lo, hi - lo
    m.blocks = 1
    m.kind = sv.kind
    m.contiguous = datatype._contig
    m._mem = None if sv.kind == DEVICE else raw_mem(addr + lo, m.span, readonly, sv.obj)
    return m


def _message_simple(spec, readonly: bool, blocks: int, call: str) -> Msg:
    o_count = o_displ = o_type = None
    if isinstance(spec, (list, tuple)):
        nargs = len(spec)
        if nargs == 2:
            o_buf, o_count = spec
            if isinstance(o_count, (Datatype, str)):
                o_count, o_type = None, o_count
            elif isinstance(o_count, (tuple, list)):
                o_count, o_displ = o_count
        elif nargs == 3:
            o_buf, o_count, o_type = spec
            if isinstance(o_count, (tuple, list)):
                o_count, o_displ = o_count
        elif nargs == 4:
            o_buf, o_count, o_displ, o_type = spec
        else:
            raise ValueError(f"{_prefix(call)}message: expecting 2 to 4 items")
        if _strided(o_buf):
            return _strided_message(strided_nd(o_buf, True, call), o_count, o_displ, o_type, readonly,
                                    blocks, call)
        obj, view, baddr, length, kind, datatype = _basic(o_buf, o_type, readonly, call, True)
    else:
        o_buf = spec
        if _strided(spec):
            return _strided_message(strided_nd(spec, True, call), None, None, None, readonly, blocks, call)
        obj, view, baddr, length, kind, datatype = _top_level(spec, readonly, call, True)
    if datatype is None:  # a non-contiguous CAI/DLPack array
        return _strided_message(view, o_count, o_displ, o_type, readonly, blocks, call)
    bsize = length

    offset = 0
    if o_displ is not None:
        displ = _index(o_displ, call)
        if displ < 0:
            raise ValueError(f"{_prefix(call)}message: negative displacement {displ}")
        if displ > 0:
            extent = extent_for(datatype, "handle displacement", call)
            if displ * extent > length:
                raise ValueError(f"{_prefix(call)}message: displacement {displ} out of bounds, "
                                 f"number of datatype entries {length // extent}")
            offset = displ * extent
            length -= offset
    if o_count is not None:
        count = _index(o_count, call)
        if count < 0:
            raise ValueError(f"{_prefix(call)}message: negative count {count}")
        if count > 0 and o_buf is None:
            raise ValueError(f"{_prefix(call)}message: buffer is None but count is {count}")
    elif length > 0:
        extent = extent_for(datatype, "infer count", call)
        if length % extent:
            lb = datatype._lb
            raise ValueError(f"{_prefix(call)}message: cannot infer count, buffer length {length} is not a "
                             f"multiple of datatype extent {extent} (lb:{lb}, ub:{lb + extent})")
        count = length // extent
        if blocks > 1:
            if count % blocks:
                raise ValueError(f"{_prefix(call)}message: cannot infer count, number of entries {count} "
                                 f"is not a multiple of required number of blocks {blocks}")
            count //= blocks
    else:
        count = 0
    if datatype._size is None or datatype._rec.freed:
        _invalid(datatype, call)

    nblocks = blocks if blocks > 1 else 1
    lo = span = 0
    if count:
        lo, hi = _bounds(datatype, offset, count * nblocks)
        if obj is None:
            _check_bottom(datatype, count, call)
        elif lo < 0 or hi > bsize:
            what = f"{count} x {nblocks} blocks" if nblocks > 1 else f"count {count}"
            raise ValueError(f"{_prefix(call)}message: buffer too small for {what} of datatype "
                             f"{datatype._rec.name or repr(datatype)} (needs bytes [{lo}, {hi}), "
                             f"buffer length {bsize})")
        span = hi - lo
        lo -= offset
    m = Msg()
    m.obj = obj
    m._view = view
    m.addr = baddr + offset
    m.count = count
    m.datatype = datatype
    m.nbytes = count * datatype._size
    m.span = span
    m.lo = lo
    m.blocks = nblocks
    m.kind = kind
    m.contiguous = datatype._contig
    m._mem = None
    return m


def message_vector(spec, readonly: bool, rank: int, blocks: int, call: str = "") -> MsgV | None:
    """Parse a vector buffer spec (mpi4py ``message_vector``); None when ``rank`` is PROC_NULL.

    ``blocks`` is the number of per-process blocks (the communicator size).
    """
    if rank == PROC_NULL:
        return None
    o_counts = o_displs = o_type = None
    if isinstance(spec, (list, tuple)):
        nargs = len(spec)
        if nargs == 2:
            o_buf, o_counts = spec
            if isinstance(o_counts, (Datatype, str)):
                o_counts, o_type = None, o_counts
            elif isinstance(o_counts, tuple):
                o_counts, o_displs = o_counts
        elif nargs == 3:
            o_buf, o_counts, o_type = spec
            if isinstance(o_counts, tuple):
                o_counts, o_displs = o_counts
        elif nargs == 4:
            o_buf, o_counts, o_displs, o_type = spec
        else:
            raise ValueError(f"{_prefix(call)}message: expecting 2 to 4 items")
        obj, view, baddr, bsize, kind, datatype = _basic(o_buf, o_type, readonly, call)
    else:
        o_buf = spec
        obj, view, baddr, bsize, kind, datatype = _top_level(spec, readonly, call)

    if o_counts is None:
        csize = 0
        if bsize > 0:
            extent = extent_for(datatype, "infer count", call)
            if bsize % extent:
                lb = datatype._lb
                raise ValueError(f"{_prefix(call)}message: cannot infer count, buffer length {bsize} is not a "
                                 f"multiple of datatype extent {extent} (lb:{lb}, ub:{lb + extent})")
            csize = bsize // extent
        q, r = divmod(csize, blocks) if blocks > 0 else (0, 0)
        counts = tuple(q + (i < r) for i in range(blocks))
    elif is_integral(o_counts):
        counts = (_index(o_counts, call),) * blocks
    else:
        counts = check_array(o_counts, blocks, call)
    if o_displs is None:
        acc, displs = 0, []
        for c in counts:
            displs.append(acc)
            acc += c
        displs = tuple(displs)
    elif is_integral(o_displs):
        stride = _index(o_displs, call)
        displs = tuple(stride * i for i in range(blocks))
    else:
        displs = check_array(o_displs, blocks, call)
    for c in counts:
        if c < 0:
            raise ValueError(f"{_prefix(call)}message: negative count {c}")
    if datatype._size is None or datatype._rec.freed:
        _invalid(datatype, call)

    lo = hi = 0
    extent = datatype._extent
    first = True
    for i, (c, d) in enumerate(zip(counts, displs)):
        if not c:
            continue
        if o_buf is None:
            raise ValueError(f"{_prefix(call)}message: buffer is None but count is {c}")
        blo, bhi = _bounds(datatype, d * extent, c)
        if obj is not None and (blo < 0 or bhi > bsize):
            raise ValueError(f"{_prefix(call)}message: block {i} (count {c}, displacement {d}) of datatype "
                             f"{datatype._rec.name or repr(datatype)} needs bytes [{blo}, {bhi}), "
                             f"buffer length {bsize}")
        lo, hi = (blo, bhi) if first else (min(lo, blo), max(hi, bhi))
        first = False
    if obj is None and not first:
        _check_bottom(datatype, max(counts), call)
    m = MsgV()
    m.obj = obj
    m._view = view
    m.addr = baddr
    m.counts = counts
    m.displs = displs
    m.datatype = datatype
    m.nbytes = sum(counts) * datatype._size
    m.span = hi - lo
    m.lo = lo
    m.blocks = blocks
    m.kind = kind
    m.contiguous = datatype._contig
    m._mem = None
    return m


#: public names of the fillers, for the compiled twin of :func:`host_fast` (gpumpi._compiled)
fast_dtype, fast_datatypes_fill = _fast_dtype, _fast_types
