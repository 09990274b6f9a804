"""Convert NumPy and MPI datatypes (``mpi4py.util.dtlib``) (L6).

This is the one implementation of ``mpi4py.util.dtlib`` in gpumpi: under the mpi4py
shim (``gpumpirun --mpi4py``) ``import mpi4py.util.dtlib`` gives this very module (see
:mod:`gpumpi._mpi4py`), and its functions behave as mpi4py's rule for rule:

* :func:`from_numpy_dtype` builds a struct of the fields resized to the dtype's
  itemsize for structured dtypes, a contiguous or full C-order subarray type for
  subarray dtypes, and the ``Dup`` of the predefined type of the character code
  otherwise (``S<n>``/``U<n>`` map to one ``CHAR``/``WCHAR``, as in mpi4py);
  object dtypes and non-native byte order are a ``ValueError``;
* :func:`to_numpy_dtype` goes back (predefined, pair, f90, DUP, CONTIGUOUS, full
  SUBARRAY, STRUCT and resized STRUCT, the vector and indexed families);
  anything else, and DATATYPE_NULL, is a ``ValueError``.

The datatypes returned are new: free them when done.  ``_np_dtype`` is the NumPy
dtype constructor; set to None (as mpi4py's tests do to mimic a missing NumPy),
``to_numpy_dtype`` returns the dtype specs themselves and ``from_numpy_dtype``
raises ``RuntimeError``.

gpumpi builds the datatype of a strided array view on its own (``comm.Send(a[:, 3])``):
:func:`for_array`, from :mod:`gpumpi.datatypes.numpy_dtype`, which implements both
conversions (there ``S<n>`` strings keep all ``n`` characters).
"""

from __future__ import annotations

from numpy import dtype as _np_dtype

from ..datatypes import numpy_dtype as _impl
from ..datatypes.numpy_dtype import for_array

__all__ = ["from_numpy_dtype", "to_numpy_dtype", "for_array"]


def from_numpy_dtype(dtype):
    """Convert NumPy datatype to MPI datatype (``mpi4py.util.dtlib.from_numpy_dtype``)."""
    if _np_dtype is None:
        raise RuntimeError("NumPy is not available") from None
    return _impl.from_numpy_dtype(dtype, whole_strings=False)


def to_numpy_dtype(datatype):
    """Convert MPI datatype to NumPy datatype (``mpi4py.util.dtlib.to_numpy_dtype``)."""
    return _impl.to_numpy_dtype(datatype, _np_dtype)
