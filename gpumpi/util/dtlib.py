"""NumPy dtype <-> MPI datatype conversion (``mpi4py.util.dtlib``) (L6).

``from_numpy_dtype(dtype)`` builds a datatype for any NumPy dtype (structured, aligned
and padded ones included; subarray fields; native byte order), ``to_numpy_dtype(datatype)``
goes the other way.  gpumpi also builds datatypes for strided array views on its own
(``comm.Send(a[:, 3])``); see :func:`gpumpi.datatypes.numpy_dtype.for_array`.
"""

from ..datatypes.numpy_dtype import for_array, from_numpy_dtype, to_numpy_dtype

__all__ = ["from_numpy_dtype", "to_numpy_dtype", "for_array"]
