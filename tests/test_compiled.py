"""The compiled layer (gpumpi._compiled, csrc/_gpumpi_fast.pyx): its switch, and each compiled
function against its Python twin and NumPy's own account of the arrays.

The module is built by ``pip install .`` where a C compiler is there; without it these tests
skip, unless ``GPUMPI_EXPECT_COMPILED=1`` (CI) says it must have been built.
"""

import os
import sys
import types

import numpy as np
import pytest

from gpumpi import _buffers, _compiled
from gpumpi.datatypes.flatten import sigcode
from gpumpi.testing import run_ranks


def _compiled_module():
    m = _compiled.module()
    if m is None:
        if os.environ.get("GPUMPI_EXPECT_COMPILED") == "1":
            pytest.fail("_gpumpi_fast was not built (or is stale): pip install . should have built it")
        pytest.skip("the compiled layer is not built here (no C compiler when gpumpi was installed?)")
    return m


def _specs(MPI):
    base = np.arange(24, dtype=np.int32).reshape(4, 6)
    ro = np.arange(5.0)
    ro.flags.writeable = False
    swapped = np.arange(4, dtype=">i4")
    return [
        np.zeros(1, np.uint8), np.arange(10.0), np.zeros((3, 4), order="F"), base, base[:, ::2], base[1:], base.T,
        ro, np.empty(0), swapped, np.zeros(3, dtype=[("a", "i4"), ("b", "f8")]), np.arange(6, dtype=np.complex64),
        np.array([True, False]), np.arange(7, dtype=np.int64),
        [np.arange(8, dtype=np.int32), MPI.INT], (np.arange(8, dtype=np.int32), MPI.BYTE),
        [np.arange(9, dtype=np.uint8), MPI.INT],  # 9 bytes: not a whole number of INTs
        [np.arange(4.0), MPI.DOUBLE], [base[:, ::2], MPI.INT], [ro, MPI.DOUBLE], [np.arange(4.0), MPI.SHORT_INT], [np.arange(4.0), MPI.DOUBLE.Create_contiguous(2)],
        [np.arange(4.0)], [np.arange(4.0), MPI.DOUBLE, 1], (np.arange(3),), [[1, 2], MPI.INT], b"bytes",
        bytearray(8), memoryview(bytearray(8)), 3, None, "text", [None, MPI.INT],
    ]


def _independent(spec, writable: bool, MPI):
    """What host_fast must answer, from NumPy's attributes and the datatype's signature code."""
    if isinstance(spec, np.ndarray):
        a, dt = spec, None
    elif type(spec) in (list, tuple) and len(spec) == 2 and type(spec[0]) is np.ndarray:
        a, dt = spec
    else:
        return None
    if not (a.flags.c_contiguous or a.flags.f_contiguous) or (writable and not a.flags.writeable):
        return None
    if dt is None:
        if not (a.dtype.isbuiltin == 1 and a.dtype.isnative):
            return None
        from gpumpi._arrays import lookup_dtype

        try:
            code = sigcode(lookup_dtype(a.dtype))
        except (KeyError, BufferError, ValueError, TypeError):
            return None
        return None if code is None else (a.ctypes.data, a.nbytes, code)
    if not (isinstance(dt, MPI.Datatype) and dt.is_predefined and dt.Get_size() and dt.Get_size() == dt.Get_extent()[1]
            and not dt.Get_extent()[0]) or a.nbytes % dt.Get_size():
        return None
    return a.ctypes.data, a.nbytes, sigcode(dt)


@pytest.mark.parametrize("writable", [False, True])
def test_host_fast_is_its_python_twin(writable):
    from gpumpi import MPI

    m = _compiled_module()
    assert _compiled.apply(True)
    try:
        py = _compiled.python_twin("host_fast")
        for spec in _specs(MPI):
            want = _independent(spec, writable, MPI)
            assert py(spec, writable) == want, spec
            assert m.host_fast(spec, writable) == want, spec
    finally:
        _compiled.apply(True)


def test_the_switch_installs_one_twin_everywhere():
    from gpumpi._fastpath import api

    m = _compiled_module()
    try:
        assert _compiled.apply(False) is False and not _compiled.active()
        assert _buffers.host_fast is api.host_fast is _compiled.python_twin("host_fast")
        assert _compiled.apply(True) is True and _compiled.active()
        assert _buffers.host_fast is api.host_fast is m.host_fast
    finally:
        _compiled.apply(True)


def test_a_stale_build_is_not_used(monkeypatch):
    monkeypatch.setitem(sys.modules, "_gpumpi_fast", types.SimpleNamespace(ABI=_compiled.ABI - 1))
    assert _compiled.module() is None
    try:
        assert _compiled.apply(True) is False
        assert _buffers.host_fast is _compiled.python_twin("host_fast")
    finally:
        monkeypatch.undo()
        _compiled.apply(True)


def _which():
    from gpumpi import MPI, _compiled

    c = MPI.COMM_WORLD
    a = np.arange(5.0) + c.rank
    b = np.empty(5)
    c.Sendrecv(a, (c.rank + 1) % c.size, 0, b, (c.rank - 1) % c.size, 0)
    assert np.array_equal(b, np.arange(5.0) + (c.rank - 1) % c.size)
    return _compiled.active()


@pytest.mark.parametrize("setting", ["0", "1"])
def test_gpumpi_compiled_chooses_at_initialisation(setting):
    if setting == "1":
        _compiled_module()
    assert run_ranks(_which, 2, timeout=60, env={"GPUMPI_COMPILED": setting}) == [setting == "1"] * 2
