"""``MPI.buffer``: mpi4py's raw memory buffer object (L2).

Theory of operation
===================
:class:`buffer` is mpi4py's ``MPI.buffer`` (alias ``MPI.memory``): a 1-D view of
raw bytes -- of any object gpumpi takes as a buffer (buffer protocol, DLPack,
CUDA array interface, through :func:`gpumpi._arrays.as_buffer`), of an address
and a length, or of memory it allocates -- that exports the buffer protocol
itself (format ``'B'``), is indexed and sliced as bytes, and can be released.
``MPI.Alloc_mem`` returns one.

Python 3.11 gives pure-Python classes no way to export the buffer protocol, so a
buffer *is* a one-dimensional ``uint8`` NumPy array (a subclass of
``numpy.ndarray``) over the memory; its own API (``address``, ``obj``,
``nbytes``, ``readonly``, ``format``, ``itemsize``, ``len``, indexing,
``cast``, ``tobytes``, ``toreadonly``, ``release``) is mpi4py's, with mpi4py's
errors, not NumPy's.  The NumPy part is what ``memoryview(buf)`` and
``numpy.asarray(buf)`` see.  One difference stays: ``release()`` drops the
object's own hold on the memory (address 0, no bytes), but a memoryview or array
of the bytes taken *before* the release keeps aliasing them, as with any NumPy
view; mpi4py's release invalidates only the buffer object too.

Memory that is not host-addressable in mpi4py's terms (anything behind the CUDA
array interface or DLPack of a CUDA device, simulated device memory included) is
kept with its address and size, but reading or writing it through the buffer
(``[]``, ``cast``, ``tobytes``) is a ``BufferError``, as mpi4py's
``check_cpu_accessible``.
"""

from __future__ import annotations

import ctypes
import operator

import numpy as np

from ._arrays import HOST, BufferView, NotABufferError, as_buffer

__all__ = ["buffer"]

_u8 = np.dtype(np.uint8)


def _raw(addr: int, nbytes: int):
    """A writable ctypes array over ``nbytes`` bytes at ``addr`` (never read here)."""
    return (ctypes.c_ubyte * nbytes).from_address(addr)


class buffer(np.ndarray):
    """Buffer: raw memory as bytes (mpi4py ``MPI.buffer``).

    ``buffer(obj)`` views the memory of a buffer-like object (read-only unless the
    object's memory is writable); ``buffer()`` is empty (address 0)."""

    def __new__(cls, *args):
        if len(args) > 1:
            raise TypeError(f"buffer() takes at most 1 argument ({len(args)} given)")
        if not args:
            return cls._make(None, 0, 0, False, HOST, None)
        return cls._from_object(args[0], None)

    @classmethod
    def _make(cls, obj, addr: int, nbytes: int, readonly: bool, kind: str, keep) -> buffer:
        if nbytes:
            raw = _raw(addr, nbytes)
            raw._keep = keep  # the memory's owner lives as long as the bytes are aliased
            self = np.ndarray.__new__(cls, (nbytes,), _u8, buffer=raw)
        else:
            self = np.ndarray.__new__(cls, (0,), _u8)
        if readonly:
            self.flags.writeable = False
        self._obj, self._addr, self._nbytes, self._ro, self._kind = obj, addr, nbytes, bool(readonly), kind
        self._keep = keep
        return self

    @classmethod
    def _from_object(cls, obj, readonly: bool | None, call: str = "buffer") -> buffer:
        try:
            v = as_buffer(obj, True if readonly is None else readonly, call)
        except NotABufferError as exc:
            raise TypeError(f"{call}: expecting a buffer-like object (got {type(obj).__name__})") from exc
        ro = v.readonly if readonly is None else readonly
        return cls._make(obj, v.addr, v.nbytes, ro, v.kind, v)

    def __array_finalize__(self, parent) -> None:
        # NumPy-made views (ufunc results, reshapes) are plain memory of their parent
        if not hasattr(self, "_addr"):
            self._obj = parent
            self._addr = self.__array_interface__["data"][0] if self.size else 0
            self._nbytes = self.nbytes_np
            self._ro = not self.flags.writeable
            self._kind = HOST
            self._keep = None

    @property
    def nbytes_np(self) -> int:
        return np.ndarray.nbytes.__get__(self)

    # -- constructors ------------------------------------------------------------------------
    @staticmethod
    def allocate(nbytes: int, clear: bool = False) -> buffer:
        """Allocate ``nbytes`` bytes of host memory (zeroed with ``clear``)."""
        size = operator.index(nbytes)
        if size < 0:
            raise ValueError(f"buffer.allocate: expecting non-negative size ({size})")
        # one byte at least: an allocation has an address even when empty (as malloc(0) may)
        mem = (np.zeros if clear else np.empty)(max(size, 1), np.uint8)[:size]
        return buffer._make(mem, mem.ctypes.data, size, False, HOST, mem)

    @staticmethod
    def frombuffer(obj, readonly: bool = False) -> buffer:
        """Buffer over a buffer-like object's memory (writable unless ``readonly``)."""
        return buffer._from_object(obj, bool(readonly), "buffer.frombuffer")

    @staticmethod
    def fromaddress(address: int, nbytes: int, readonly: bool = False) -> buffer:
        """Buffer over ``nbytes`` bytes at ``address`` (the caller vouches for the memory)."""
        addr = operator.index(address)
        size = operator.index(nbytes)
        if size < 0:
            raise ValueError(f"buffer.fromaddress: expecting non-negative buffer length ({size})")
        if size > 0 and addr == 0:
            raise ValueError("buffer.fromaddress: expecting non-NULL address")
        return buffer._make(None, addr, size, bool(readonly), HOST, None)

    # -- properties --------------------------------------------------------------------------
    @property
    def address(self) -> int:
        """Buffer address."""
        return self._addr

    @property
    def obj(self):
        """Object exposing the buffer (None for addresses and empty buffers)."""
        return self._obj

    @property
    def nbytes(self) -> int:  # noqa: D401
        """Buffer size (in bytes)."""
        return self._nbytes

    @property
    def readonly(self) -> bool:
        """Buffer is read-only."""
        return self._ro

    @property
    def format(self) -> str:
        """Format of each element (``'B'``)."""
        return "B"

    @property
    def itemsize(self) -> int:
        """Size (in bytes) of each element (1)."""
        return 1

    # -- methods -----------------------------------------------------------------------------
    def _cpu(self, call: str) -> None:
        if self._kind != HOST:
            raise BufferError(f"buffer.{call}: memory is not accessible from the CPU ({self._kind} memory)")

    def cast(self, format: str, shape=...) -> memoryview:
        """Cast to a memoryview with a new format (and shape)."""
        self._cpu("cast")
        mv = memoryview(self)
        return mv.cast(format) if shape is Ellipsis else mv.cast(format, shape)

    def tobytes(self, order: str | None = None) -> bytes:
        """The bytes of the buffer."""
        self._cpu("tobytes")
        return ctypes.string_at(self._addr, self._nbytes) if self._nbytes else b""

    def toreadonly(self) -> buffer:
        """A read-only buffer over the same memory and object."""
        return buffer._make(self._obj, self._addr, self._nbytes, True, self._kind, self)

    def release(self) -> None:
        """Release the memory the buffer refers to: it becomes empty (see the module notes)."""
        self._obj, self._addr, self._nbytes, self._ro, self._kind, self._keep = None, 0, 0, False, HOST, None

    # -- sequence ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._nbytes

    def __bool__(self) -> bool:
        return self._nbytes > 0  # as mpi4py's (a sequence): an empty buffer, a BOTTOM window's memory, is false

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    __hash__ = object.__hash__

    def __delitem__(self, item):
        raise NotImplementedError("buffer: deleting items is not supported")

    def _slice(self, item) -> tuple[int, int]:
        start, stop, step = item.indices(self._nbytes)
        if step != 1:
            raise IndexError("buffer: slice with step not supported")
        return start, max(0, stop - start)

    def _index(self, item) -> int:
        try:
            i = operator.index(item)
        except TypeError:
            raise TypeError(f"buffer: index must be integer or slice (got {type(item).__name__})") from None
        if i < 0:
            i += self._nbytes
        if not 0 <= i < self._nbytes:
            raise IndexError(f"buffer: index out of range ({item}, length {self._nbytes})")
        return i

    def __getitem__(self, item):
        self._cpu("__getitem__")
        if isinstance(item, slice):
            start, n = self._slice(item)
            return buffer._make(self, self._addr + start, n, self._ro, self._kind, self)
        i = self._index(item)
        return ctypes.c_ubyte.from_address(self._addr + i).value

    def __setitem__(self, item, value) -> None:
        self._cpu("__setitem__")
        if self._ro:
            raise TypeError("buffer: buffer is read-only")
        if isinstance(item, slice):
            start, n = self._slice(item)
            if not isinstance(value, np.ndarray) and hasattr(type(value), "__index__"):
                ctypes.memset(self._addr + start, operator.index(value) & 0xFF, n)
                return
            v = as_buffer(value, True, "buffer.__setitem__")
            if v.nbytes != n:
                raise ValueError(f"buffer: slice length does not match buffer ({n} != {v.nbytes})")
            if n:
                src = v.mem
                if src is None:
                    raise BufferError("buffer.__setitem__: source memory is not accessible from the CPU")
                ctypes.memmove(self._addr + start, (ctypes.c_char * n).from_buffer_copy(src), n)
            return
        i = self._index(item)
        v = operator.index(value)
        if not 0 <= v <= 255:
            raise OverflowError(f"buffer: value out of range for a byte ({v})")
        ctypes.c_ubyte.from_address(self._addr + i).value = v

    def __gpumpi_buffer__(self, readonly: bool, call: str):
        """The BufferView gpumpi's buffer calls take of this buffer (its memory kind kept)."""
        if self._ro and not readonly:
            raise BufferError(f"{call + ': ' if call else ''}buffer is not writable (read-only buffer)")
        keep = self._keep
        device = keep.device if isinstance(keep, BufferView) else None
        return BufferView(self, self._addr, self._nbytes, self._ro, "B", 1, self._kind, device)

    def __repr__(self) -> str:
        return f"<buffer address={self._addr:#x} nbytes={self._nbytes} readonly={self._ro}>"

    __str__ = __repr__

    def __reduce__(self):
        raise ValueError("buffer: cannot pickle a memory buffer")


memory = buffer  # mpi4py's backward-compatible alias
