"""gpumpi.util.dtlib is mpi4py.util.dtlib: the same results as mpi4py's own module, and the module
``import mpi4py.util.dtlib`` gives under the shim (one implementation)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpumpi import MPI as G
from gpumpi.util import dtlib

MPI = pytest.importorskip("mpi4py.MPI")
ref = pytest.importorskip("mpi4py.util.dtlib")

SPECS = ["i", "d", "S5", "U3", "c", "?", "e", "g", "G", "i,d", ("i,d", True), "b,d,h", ("b,d,h", True),
         ("f8", (2, 3)), ("i4", 5), [("a", "i"), ("b", ("d", 2))], {"names": ["x", "y"], "formats": ["h", "d"],
                                                                    "offsets": [2, 16], "itemsize": 32}]


def _dtype(spec):
    return np.dtype(*spec) if isinstance(spec, tuple) and isinstance(spec[1], bool) else np.dtype(spec)


def _layout(t):
    return (t.size, t.lb, t.extent, t.true_lb, t.true_extent, t.combiner, t.Get_envelope())


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conversions_match_mpi4py(spec):
    dt = _dtype(spec)
    ours, theirs = dtlib.from_numpy_dtype(dt), ref.from_numpy_dtype(dt)
    try:
        assert _layout(ours) == _layout(theirs)
        assert dtlib.to_numpy_dtype(ours) == ref.to_numpy_dtype(theirs)
    finally:
        ours.Free()
        theirs.Free()


def test_strings_map_to_one_character_as_in_mpi4py():
    t = dtlib.from_numpy_dtype("S5")
    assert t.combiner == G.COMBINER_DUP and t.size == 1 and dtlib.to_numpy_dtype(t) == np.dtype("S1")
    t.Free()


def test_without_numpy_specs_come_back_as_in_mpi4py(monkeypatch):
    monkeypatch.setattr(dtlib, "_np_dtype", None)
    monkeypatch.setattr(ref, "_np_dtype", None)

    def both(make):
        ours, theirs = make(G), make(MPI)
        try:
            return dtlib.to_numpy_dtype(ours), ref.to_numpy_dtype(theirs)
        finally:
            for t in (ours, theirs):
                if not t.is_predefined:
                    t.Free()

    for make in (lambda M: M.DOUBLE, lambda M: M.DOUBLE_INT, lambda M: M.INT.Create_contiguous(7),
                 lambda M: M.Datatype.Create_struct([1, 2], [0, 8], [M.INT, M.DOUBLE]),
                 lambda M: M.SHORT.Create_vector(2, 3, 4), lambda M: M.FLOAT.Create_subarray([2, 3], [2, 3], [0, 0]),
                 lambda M: M.Datatype.Create_struct([1], [0], [M.INT]).Create_resized(0, 16)):
        ours, theirs = both(make)
        assert ours == theirs
    assert dtlib.to_numpy_dtype(G.INT.Create_contiguous(7)) == ("i", (7,))
    with pytest.raises(RuntimeError, match="NumPy is not available"):
        dtlib.from_numpy_dtype("i")


def test_conversions_leave_the_argument_whole():
    # dtlib frees what decode returns: the type converted must stay usable afterwards
    inner = G.INT.Create_contiguous(2)
    t = G.Datatype.Create_struct([1, 1], [0, 16], [inner, G.DOUBLE]).Create_resized(0, 32)
    for _ in range(3):
        assert dtlib.to_numpy_dtype(t).itemsize == 32
    assert inner.size == 8 and t.decode()[1] == "RESIZED"
    for x in (t, inner):
        x.Free()


def test_failures_as_mpi4py():
    for bad in (">i" if np.little_endian else "<i", "O", "V"):
        with pytest.raises(ValueError):
            dtlib.from_numpy_dtype(np.dtype(bad))
    for t in (G.DATATYPE_NULL, G.INT.Create_resized(0, 32), G.INT.Create_subarray([2], [1], [0])):
        with pytest.raises(ValueError):
            dtlib.to_numpy_dtype(t)


def test_mpi4py_util_dtlib_is_gpumpi_util_dtlib_under_the_shim(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(
        """\
        import mpi4py.util.dtlib as a
        from mpi4py.util import dtlib as b
        from mpi4py.util.dtlib import from_numpy_dtype
        import mpi4py.util, gpumpi.util.dtlib, sys
        assert a is b is mpi4py.util.dtlib is sys.modules["mpi4py.util.dtlib"] is gpumpi.util.dtlib
        assert from_numpy_dtype is gpumpi.util.dtlib.from_numpy_dtype
        assert a.__name__ == a.__spec__.name == "gpumpi.util.dtlib"
        import importlib.util, os
        pkl5 = importlib.util.find_spec("mpi4py.util.pkl5").origin  # the rest is mpi4py's own
        assert os.path.dirname(pkl5) == os.path.dirname(mpi4py.util.__file__) != os.path.dirname(a.__file__)
        print("ok")
        """))
    p = subprocess.run([sys.executable, "-m", "gpumpi.launch", "--mpi4py", "-n", "1", "--timeout", "50", str(prog)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "ok" in p.stdout
