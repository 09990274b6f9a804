"""The names real programs reach below mpi4py's documented API, against mpi4py's own values.

mpi4py's suite hardly touches them, yet NumPy-based libraries map ``array.dtype.char`` with
``MPI._typedict`` and C-interop code asks ``_sizeof``/``_addressof``/``_handleof``.  The
expectations come from the real mpi4py on MPICH (the ``test`` extra installs both), run in a
subprocess of its own: the tables must be equal entry for entry (by MPI name and size), the
handle values of predefined objects equal MPICH's (gpumpi hands out MPICH's values for them),
and what gpumpi cannot honestly give -- a C-level handle in memory, mpi4py's C API -- fails at
once with an error that says so.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gpumpi import MPI

REF = r"""
import json
from mpi4py import MPI
out = {}
for name in ("_typedict", "_typedict_c", "_typedict_f"):
    out[name] = {k: [v.Get_name(), v.Get_size()] for k, v in getattr(MPI, name).items()}
objs = {"COMM_SELF": MPI.COMM_SELF, "COMM_WORLD": MPI.COMM_WORLD, "COMM_NULL": MPI.COMM_NULL,
        "DOUBLE": MPI.DOUBLE, "INT": MPI.INT, "SUM": MPI.SUM, "GROUP_EMPTY": MPI.GROUP_EMPTY,
        "INFO_ENV": MPI.INFO_ENV, "ERRORS_RETURN": MPI.ERRORS_RETURN, "REQUEST_NULL": MPI.REQUEST_NULL,
        "MESSAGE_NO_PROC": MPI.MESSAGE_NO_PROC, "WIN_NULL": MPI.WIN_NULL, "SESSION_NULL": MPI.SESSION_NULL}
out["handle"] = {k: MPI._handleof(v) for k, v in objs.items()}
out["sizeof"] = {k: MPI._sizeof(v) for k, v in objs.items()}
out["sizeof_status"] = MPI._sizeof(MPI.Status)
w = MPI.Win.Create(MPI.BOTTOM, comm=MPI.COMM_SELF)
m = w.tomemory()
out["bottom_memory"] = [bool(m), len(m)]
w.Free()
out["bools"] = [bool(MPI.buffer(b"")), bool(MPI.buffer(bytearray(3)))]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def ref():
    """mpi4py + MPICH's answers (skipped without a real mpi4py)."""
    pytest.importorskip("mpi4py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUMPI_", "PMI_", "OMPI_"))}
    env.pop("PYTHONPATH", None)
    p = subprocess.run([sys.executable, "-c", REF], capture_output=True, text=True, timeout=120, env=env)
    if p.returncode != 0:
        pytest.skip(f"the real mpi4py did not run here: {p.stderr.strip()[-300:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("name", ["_typedict", "_typedict_c", "_typedict_f"])
def test_typedicts_equal_mpi4py_on_mpich(ref, name):
    mine = {k: [v.Get_name(), v.Get_size()] for k, v in getattr(MPI, name).items()}
    assert mine == ref[name]
    assert all(isinstance(v, MPI.Datatype) for v in getattr(MPI, name).values())


def test_typedict_maps_numpy_typecodes_to_types_of_their_size():
    """The use real code makes of it: ``MPI._typedict[a.dtype.char]`` for the array's element type."""
    for code in "?bhilqBHILQfdgFDG":
        dt = np.dtype(code)
        t = MPI._typedict[dt.char]
        assert t.Get_size() == dt.itemsize, code
    a = np.arange(6, dtype=np.float64)
    b = np.empty_like(a)
    MPI.COMM_SELF.Sendrecv([a, MPI._typedict[a.dtype.char]], 0, 7, [b, MPI._typedict[b.dtype.char]], 0, 7)
    assert (a == b).all()


def test_handle_values_and_sizes_equal_mpi4py_on_mpich(ref):
    objs = {k: getattr(MPI, k) for k in ref["handle"]}
    assert {k: MPI._handleof(v) for k, v in objs.items()} == ref["handle"]
    assert {k: MPI._sizeof(v) for k, v in objs.items()} == ref["sizeof"]
    assert {k: MPI._sizeof(type(v)) for k, v in objs.items()} == ref["sizeof"]
    assert MPI._sizeof(MPI.Status) == MPI._sizeof(MPI.Status()) == ref["sizeof_status"]


def test_handle_of_a_new_object_is_its_py2f_value():
    c = MPI.COMM_SELF.Dup()
    try:
        h = MPI._handleof(c)
        assert 0 <= h < 1 << 32 and h == c.py2f() & 0xFFFFFFFF  # unsigned, as mpi4py's
        assert MPI.Comm.f2py(c.py2f()) == c
    finally:
        c.Free()


def test_address_of_a_status_holds_its_fields_in_mpich_layout():
    st = MPI.Status()
    st.source, st.tag, st.error = 3, 17, MPI.ERR_OTHER
    fields = (ctypes.c_int * 5).from_address(MPI._addressof(st))
    assert list(fields)[2:] == [3, 17, MPI.ERR_OTHER]  # count_lo, count_hi_and_cancelled, source, tag, error
    fields[3] = 99  # the memory is the status's own
    assert st.tag == 99


def test_no_c_handle_in_memory_fails_at_once():
    for obj in (MPI.COMM_WORLD, MPI.INT, MPI.SUM, MPI.GROUP_EMPTY):
        with pytest.raises(NotImplementedError, match="no C API"):
            MPI._addressof(obj)
    st = MPI.Status()
    assert MPI._handleof(st) == MPI._addressof(st)  # mpi4py 4.1.2's answer for a Status
    for fn in (MPI._sizeof, MPI._addressof, MPI._handleof):
        with pytest.raises(TypeError):
            fn(None)
        with pytest.raises(TypeError):
            fn(3)


def test_a_c_extension_asking_for_the_c_api_fails_at_its_import():
    """import_mpi4py() (a C extension built on mpi4py's headers) reads ``MPI.__pyx_capi__`` first:
    there is none, so the extension's import fails at once.  (No module ``__getattr__`` makes the
    message friendlier: it would cost every ``MPI.X`` lookup CPython's specialized module-attribute
    load, measured +270 instructions per ``win.Fetch_and_op(..., MPI.SUM)``.)"""
    assert not hasattr(MPI, "__pyx_capi__")
    assert "__getattr__" not in vars(MPI)


def test_bottom_window_memory_is_false_as_mpi4pys(ref):
    w = MPI.Win.Create(MPI.BOTTOM, comm=MPI.COMM_SELF)
    m = w.tomemory()
    assert [bool(m), len(m)] == ref["bottom_memory"]
    if m:  # mpi4py's demo: freeing what Alloc_mem gave, guarded by truthiness
        MPI.Free_mem(m)
    w.Free()
    assert [bool(MPI.buffer(b"")), bool(MPI.buffer(bytearray(3)))] == ref["bools"]
    mem = MPI.Alloc_mem(16)
    assert mem
    MPI.Free_mem(mem)
    assert not mem  # released: empty


def _free_mem_of_a_window_memory():
    """mpi4py's nxtval-onesided demo: rank 0 exposes Alloc_mem memory, the others BOTTOM; at the end
    each frees ``win.tomemory()`` if it is true -- a new buffer over the same base address."""
    from gpumpi import MPI

    comm = MPI.COMM_WORLD
    mem = MPI.Alloc_mem(64) if comm.rank == 0 else MPI.BOTTOM
    win = MPI.Win.Create(mem, 4, MPI.INFO_NULL, comm)
    m = win.tomemory()
    had = bool(m)
    win.Free()
    if m:
        MPI.Free_mem(m)
    ok = had == (comm.rank == 0) and not m
    if comm.rank == 0:
        ok = ok and not mem  # the Alloc_mem buffer itself is released too
        try:
            MPI.Free_mem(MPI.buffer(bytearray(8)))  # not Alloc_mem's
            ok = False
        except MPI.Exception as e:
            ok = ok and e.Get_error_class() == MPI.ERR_ARG
        other = MPI.Alloc_mem(8)
        MPI.Free_mem(other)
        try:
            MPI.Free_mem(other)  # twice
            ok = False
        except MPI.Exception:
            pass
    return ok


@pytest.mark.parametrize("n", [1, 2, 3])
def test_free_mem_takes_any_buffer_at_the_allocated_base(n):
    from gpumpi.testing import run_ranks

    assert run_ranks(_free_mem_of_a_window_memory, n, timeout=60) == [True] * n
