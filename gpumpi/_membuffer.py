"""``MPI.buffer`` (alias ``MPI.memory``): a byte buffer over host memory, as mpi4py's (L2).

Theory of operation
===================
mpi4py's ``buffer`` is a C type that holds one ``Py_buffer`` and re-exports it: a flat,
unformatted run of bytes (``format`` ``"B"``, ``itemsize`` 1) over memory it allocated
(``allocate``), over another object's buffer (``buffer(obj)``, ``frombuffer``) or over a
raw address (``fromaddress``).  Python 3.11 gives pure-Python classes no way to export
the buffer protocol, so here the class is a one-dimensional ``uint8`` NumPy array
subclass: NumPy exports the memory, with the right address, length and read-only flag,
and wraps foreign memory without copying.  The subclass restores mpi4py's behaviour where
NumPy's differs: items are ``int``, slices are buffers (step 1 only), assignment of an
integer to a slice fills it, comparison is identity, truth is non-emptiness.

What NumPy cannot do is give memory back while the object is alive: ``release`` (which in
mpi4py drops the exported memory and leaves an empty buffer) raises NotImplementedError.
Device memory (CUDA array interface, DLPack) is not wrapped: such objects raise
NotImplementedError, as mpi4py's buffer over device memory is not CPU-accessible anyway.
"""

from __future__ import annotations

import ctypes

import numpy as np

_U8 = np.dtype(np.uint8)


def _host_view(obj, writable: bool, call: str) -> memoryview:
    """A flat byte memoryview of ``obj``'s buffer (C or Fortran contiguous)."""
    try:
        mv = memoryview(obj)
    except TypeError:
        if hasattr(obj, "__cuda_array_interface__") or hasattr(obj, "__dlpack__"):
            raise NotImplementedError(
                f"{call}: device memory (CUDA array interface / DLPack) is not supported "
                f"by gpumpi's MPI.buffer ({type(obj).__name__})") from None
        raise
    if writable and mv.readonly:
        raise BufferError(f"{call}: object is not writable ({type(obj).__name__})")
    if not mv.contiguous:
        raise BufferError(f"{call}: buffer is not contiguous ({type(obj).__name__})")
    if mv.ndim != 1 or mv.format != "B":
        mv = mv.cast("B") if mv.c_contiguous else _raw(mv)
    return mv


def _raw(mv: memoryview) -> memoryview:
    import pickle

    return pickle.PickleBuffer(mv).raw()  # Fortran order: the bytes in memory order


class buffer(np.ndarray):  # noqa: N801  (mpi4py's name)
    """Buffer: a flat run of bytes exposing the buffer protocol (mpi4py ``MPI.buffer``)."""

    def __new__(cls, buf=None):
        """Wrap ``buf``'s memory (read-only if it is), or an empty buffer without argument."""
        if buf is None:
            return _make(np.empty(0, _U8), None)
        return _make(np.frombuffer(_host_view(buf, False, "buffer"), _U8), buf)

    def __array_finalize__(self, obj) -> None:
        if obj is not None and "_obj" not in self.__dict__:
            self._obj = getattr(obj, "_obj", None)

    @staticmethod
    def allocate(nbytes: int, clear: bool = False) -> "buffer":
        """Allocate ``nbytes`` bytes of host memory (zeroed when ``clear``)."""
        size = int(nbytes)
        if size < 0:
            raise ValueError(f"buffer.allocate: expecting non-negative size ({size})")
        mem = bytearray(size)  # always zeroed: ``clear`` costs nothing more
        return _make(np.frombuffer(mem, _U8), None)

    @staticmethod
    def frombuffer(obj, readonly: bool = False) -> "buffer":
        """Buffer over the memory of buffer-like ``obj`` (writable unless ``readonly``)."""
        a = np.frombuffer(_host_view(obj, not readonly, "buffer.frombuffer"), _U8)
        return _make(a, obj, readonly)

    @staticmethod
    def fromaddress(address: int, nbytes: int, readonly: bool = False) -> "buffer":
        """Buffer over ``nbytes`` bytes of host memory at ``address`` (no owner is kept)."""
        size = int(nbytes)
        addr = int(address)
        if size < 0:
            raise ValueError(f"buffer.fromaddress: expecting non-negative buffer length ({size})")
        if size > 0 and addr == 0:
            raise ValueError("buffer.fromaddress: expecting non-NULL address")
        if size == 0:
            return _make(np.empty(0, _U8), None, readonly)
        a = np.frombuffer((ctypes.c_ubyte * size).from_address(addr), _U8)
        return _make(a, None, readonly)

    # --- properties --------------------------------------------------------------------
    @property
    def address(self) -> int:
        """Buffer address."""
        return self.__array_interface__["data"][0] if self.size else 0

    @property
    def obj(self):
        """Object exposing the buffer (None for allocated or address buffers)."""
        return self.__dict__.get("_obj")

    @property
    def readonly(self) -> bool:
        """Whether the buffer is read-only."""
        return not self.flags.writeable

    @property
    def format(self) -> str:
        """Format of each element (always ``"B"``)."""
        return "B"

    # --- memoryview methods --------------------------------------------------------------
    def cast(self, format: str, shape=...) -> memoryview:  # noqa: A002
        """Cast to a memoryview with a new format or shape (``memoryview.cast``)."""
        mv = memoryview(self)
        return mv.cast(format) if shape is Ellipsis else mv.cast(format, shape)

    def tobytes(self, order=None) -> bytes:
        """The bytes of the buffer."""
        return np.ndarray.tobytes(self)

    def toreadonly(self) -> "buffer":
        """A read-only buffer over the same memory."""
        a = self.view(np.ndarray)
        a = a.view()
        a.flags.writeable = False
        return _make(a, self.obj if self.obj is not None else self, True)

    def release(self) -> None:
        """Release the exported memory (mpi4py ``buffer.release``): not possible here."""
        raise NotImplementedError(
            "buffer.release: a gpumpi buffer keeps its memory while the object lives "
            "(NumPy-backed); drop the last reference instead")

    # --- sequence interface ----------------------------------------------------------------
    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    __hash__ = object.__hash__

    def __getitem__(self, item):
        a = self.view(np.ndarray)
        if isinstance(item, slice):
            start, stop, step = item.indices(a.size)
            if step != 1:
                raise IndexError("buffer: slice with step not supported")
            return _make(a[start:max(start, stop)], self, self.readonly)
        try:
            i = item.__index__()
        except AttributeError:
            raise TypeError(f"buffer: index must be integer or slice ({type(item).__name__})") from None
        if i < 0:
            i += a.size
        if not 0 <= i < a.size:
            raise IndexError(f"buffer: index out of range ({item}, length {a.size})")
        return int(a[i])

    def __setitem__(self, item, value) -> None:
        if self.readonly:
            raise TypeError("buffer: buffer is read-only")
        a = self.view(np.ndarray)
        if isinstance(item, slice):
            start, stop, step = item.indices(a.size)
            if step != 1:
                raise IndexError("buffer: slice with step not supported")
            dst = a[start:max(start, stop)]
            if hasattr(value, "__index__"):
                dst[...] = value.__index__() & 0xFF
                return
            src = np.frombuffer(_host_view(value, False, "buffer"), _U8)
            if src.size != dst.size:
                raise ValueError(f"buffer: slice length does not match buffer ({dst.size} != {src.size})")
            dst[...] = src
            return
        try:
            i = item.__index__()
        except AttributeError:
            raise TypeError(f"buffer: index must be integer or slice ({type(item).__name__})") from None
        if i < 0:
            i += a.size
        if not 0 <= i < a.size:
            raise IndexError(f"buffer: index out of range ({item}, length {a.size})")
        a[i] = int(value) & 0xFF

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.buffer object at {id(self):#x}, {self.size} bytes>"

    __str__ = __repr__

    def __reduce__(self):
        return (_rebuild, (np.ndarray.tobytes(self), self.readonly))

    def __reduce_ex__(self, protocol):
        return self.__reduce__()


def _rebuild(data: bytes, readonly: bool) -> buffer:
    b = buffer.allocate(len(data))
    b[:] = data
    if readonly:
        b.flags.writeable = False
    return b


def _make(a: np.ndarray, obj, readonly: bool | None = None) -> buffer:
    b = a.view(buffer)
    b._obj = obj
    if readonly is not None and readonly:
        b.flags.writeable = False
    return b


#: Backward compatibility alias (mpi4py ``MPI.memory``).
memory = buffer
