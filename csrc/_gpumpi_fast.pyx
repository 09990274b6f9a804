# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, embedsignature=False
"""gpumpi's compiled layer (DESIGN section 20): the hot entry points' work that Python cannot do
in the time mpi4py takes for a whole call.

Theory of operation
===================
This extension module (built by ``pip install .`` when a C compiler is there; a top-level
module, so that a source checkout run in place still finds the installed build) holds
compiled replacements of pure-Python functions of gpumpi, each the same contract as the
function it replaces.  gpumpi uses one when :func:`gpumpi._compiled.module` finds this module
with the ABI it expects and ``GPUMPI_COMPILED`` does not say no; otherwise the Python function
serves (one fast path, never two running side by side).

* :func:`host_fast` replaces ``gpumpi._buffers.host_fast``: ``(address, nbytes, signature
  code)`` of a whole contiguous NumPy array, bare or as ``[array, predefined datatype]``, read
  from the array header (the offsets gpumpi._arrays checked at import), or None.  Its tables
  (dtype -> signature code, predefined datatype -> (size, code)) are gpumpi._buffers' own
  dicts, filled by its Python functions on a miss; nothing is cached here.
"""

from libc.stdint cimport uint64_t

#: the interface version gpumpi._compiled expects (bump on any change of a signature)
ABI = 1

cdef object _ndarray = None
cdef dict _fast_dt = None
cdef object _fast_dtype = None
cdef dict _fast_type = None
cdef object _fast_types = None
cdef Py_ssize_t _data_off = 0
cdef Py_ssize_t _flags_off = 0


def setup(ndarray, dict fast_dt, fast_dtype, dict fast_type, fast_types, Py_ssize_t data_off, Py_ssize_t flags_off):
    """Give the module gpumpi._buffers' tables and fillers and the checked ndarray header offsets."""
    global _ndarray, _fast_dt, _fast_dtype, _fast_type, _fast_types, _data_off, _flags_off
    _ndarray, _fast_dt, _fast_dtype, _fast_type, _fast_types = ndarray, fast_dt, fast_dtype, fast_type, fast_types
    _data_off, _flags_off = data_off, flags_off


cdef inline uint64_t _word(object a, Py_ssize_t off) noexcept:
    return (<uint64_t*>(<char*><void*>a + off))[0]


def host_fast(spec, bint writable):
    """``(address, nbytes, signature code)`` of the commonest point-to-point spec -- a whole
    contiguous NumPy array, bare or as ``[array, predefined datatype]`` -- or None (the
    contract of ``gpumpi._buffers.host_fast``)."""
    cdef object t = type(spec)
    cdef object a, sig, e, dt
    cdef uint64_t fl
    cdef Py_ssize_t n
    if t is _ndarray:
        a = spec
        dt = a.dtype
        sig = _fast_dt.get(id(dt), -1)
        if sig == -1:
            sig = _fast_dtype(dt)
        if sig is None:
            return None
        n = a.nbytes
    elif (t is list or t is tuple) and len(spec) == 2:
        a, dt = spec
        if type(a) is not _ndarray:
            return None
        e = _fast_type.get(id(dt))
        if e is None:
            if _fast_type:
                return None
            _fast_types()
            e = _fast_type.get(id(dt))
            if e is None:
                return None
        n = a.nbytes
        if n % <Py_ssize_t>(<tuple>e)[0]:
            return None
        sig = (<tuple>e)[1]
    else:
        return None
    fl = _word(a, _flags_off)
    if not fl & 3 or (writable and not fl & 0x400):  # NPY_ARRAY_C/F_CONTIGUOUS; NPY_ARRAY_WRITEABLE
        return None
    return (_word(a, _data_off), n, sig)
