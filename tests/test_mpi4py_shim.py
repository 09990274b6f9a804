"""Unmodified mpi4py programs on gpumpi: ``gpumpirun --mpi4py`` and ``GPUMPI_MPI4PY=1`` (gpumpi._mpi4py)."""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest

from gpumpi import _mpi4py

LAUNCHER = [sys.executable, "-m", "gpumpi.launch"]

PROG = textwrap.dedent(
    """\
    import sys
    import mpi4py
    from mpi4py import MPI
    import gpumpi.MPI
    import numpy as np
    assert MPI is gpumpi.MPI, MPI
    assert mpi4py.__gpumpi__ and mpi4py.rc.initialize is True and mpi4py.__version__ == "4.1.2"
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    buf = np.full(4, rank, dtype="i")
    out = np.empty_like(buf)
    comm.Sendrecv(buf, (rank + 1) % size, recvbuf=out, source=(rank - 1) % size)
    assert (out == (rank - 1) % size).all()
    with open(sys.argv[1] + "/out.%d" % rank, "w") as f:
        f.write(" ".join(map(str, ("ok", rank, size, mpi4py.__name__, type(mpi4py.rc).__module__))))
    """
)


def _run(argv, env=None, timeout=60):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


def test_gpumpirun_mpi4py_makes_mpi4py_gpumpi(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    p = _run([*LAUNCHER, "--mpi4py", "-n", "2", "--timeout", "50", str(prog), str(tmp_path)])
    assert p.returncode == 0, p.stderr
    outs = [(tmp_path / f"out.{r}").read_text() for r in range(2)]
    assert outs == ["ok 0 2 mpi4py mpi4py", "ok 1 2 mpi4py mpi4py"]


def test_python_dash_m_mpi4py_runs_on_gpumpi(tmp_path):
    """``python -m mpi4py prog.py`` is mpi4py's own __main__ (run.py) on top of gpumpi.MPI."""
    pytest.importorskip("mpi4py.run")  # the installed mpi4py's pure-Python modules
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    p = _run([*LAUNCHER, "--mpi4py", "-n", "2", "--timeout", "50", sys.executable, "-m", "mpi4py", str(prog),
              str(tmp_path)])
    assert p.returncode == 0, p.stderr
    assert [(tmp_path / f"out.{r}").read_text()[:4] for r in range(2)] == ["ok 0", "ok 1"]


def test_without_the_choice_mpi4py_is_the_real_one(tmp_path):
    """gpumpi never replaces mpi4py behind a user's back: without --mpi4py, import mpi4py is mpi4py."""
    real = _mpi4py.real_spec()
    if real is None:
        pytest.skip("mpi4py is not installed")
    env = {k: v for k, v in os.environ.items() if k != _mpi4py.ENV}
    p = _run([sys.executable, "-c", "import mpi4py; print(mpi4py.__file__, hasattr(mpi4py, '__gpumpi__'))"], env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [real.origin, "False"]


def test_launcher_puts_the_shim_first_and_keeps_pythonpath(monkeypatch):
    from gpumpi.launch import _env, _parse

    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    ns, cmd = _parse(["--mpi4py", "-n", "2", "prog.py"])
    assert cmd == ["prog.py"]
    assert _env(ns) == {"GPUMPI_MPI4PY": "1", "PYTHONPATH": _mpi4py.SHIM_DIR + os.pathsep + "/somewhere"}
    ns, _ = _parse(["-n", "2", "prog.py"])
    assert _env(ns) == {}


def test_ga4py_flag_puts_both_packages_first(monkeypatch):
    from gpumpi.launch import _env, _parse

    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    ns, _ = _parse(["--ga4py", "-n", "2", "prog.py"])
    assert _env(ns) == {"GPUMPI_MPI4PY": "1", "GPUMPI_GA4PY": "1",
                        "PYTHONPATH": os.pathsep.join([_mpi4py.SHIM_DIR, _mpi4py.GA4PY_DIR, "/somewhere"])}


GA4PY_PROG = """
import mpi4py
from mpi4py import MPI
from ga4py import ga, gain
import gpumpi.ga, gpumpi.ga.gain
a = gain.arange(12)
line = f"{ga is gpumpi.ga} {gain is gpumpi.ga.gain} {mpi4py.__gpumpi__} {MPI.COMM_WORLD.Get_size()} {float(a.sum())}"
a.free()
lines = MPI.COMM_WORLD.gather(line)
if MPI.COMM_WORLD.Get_rank() == 0:  # one writer: the ranks' output streams interleave
    print("|".join(lines))
"""


def test_unmodified_ga4py_program_under_the_ga4py_flag():
    cmd = [sys.executable, "-m", "gpumpi.launch", "--ga4py", "-n", "2", "--timeout", "60", sys.executable, "-c",
           GA4PY_PROG]
    p = _run(cmd)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "|".join(["True True True 2 66.0"] * 2)


def test_mpi4py_flag_alone_leaves_ga4py_unresolved():
    cmd = [sys.executable, "-m", "gpumpi.launch", "--mpi4py", "-n", "1", "--timeout", "60", sys.executable, "-c",
           "import importlib.util; s = importlib.util.find_spec('ga4py'); print(s and s.origin)"]
    p = _run(cmd)
    assert p.returncode == 0, p.stderr
    assert "_shim_ga4py" not in p.stdout  # an installed ga4py (or none), never gpumpi's


def test_env_variable_through_the_installed_pth(tmp_path):
    """GPUMPI_MPI4PY=1 in any Python (another launcher): the .pth installed beside gpumpi activates the shim."""
    pth = os.path.join(sysconfig.get_paths()["purelib"], "gpumpi-mpi4py.pth")
    if not os.path.exists(pth):
        pytest.skip("gpumpi is installed in editable mode here (no .pth); pip install . installs it")
    code = "import mpi4py; from mpi4py import MPI; print(mpi4py.__gpumpi__, MPI.__name__)"
    p = _run([sys.executable, "-c", code], env={**os.environ, "GPUMPI_MPI4PY": "1"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "gpumpi.MPI"]


@pytest.mark.parametrize("value, on", [("1", True), ("yes", True), ("0", False), ("", False), ("off", False)])
def test_enabled_reads_the_variable(monkeypatch, value, on):
    monkeypatch.setenv(_mpi4py.ENV, value)
    assert _mpi4py.enabled() is on


def test_without_mpi4py_installed_the_shim_still_gives_mpi_and_rc(monkeypatch):
    monkeypatch.setattr(_mpi4py, "real_spec", lambda: None)
    ns = {"__name__": "mpi4py_probe", "__file__": os.path.join(_mpi4py.SHIM_DIR, "mpi4py", "__init__.py")}
    try:
        _mpi4py.adopt(ns)
        rc = ns["rc"]
        assert rc.initialize is True and rc.thread_level == "multiple" and rc.irecv_bufsz == 32768
        rc(initialize=False)
        assert rc.initialize is False
        with pytest.raises(TypeError):
            rc(bogus=1)
        with pytest.raises(TypeError):
            rc.bogus = 1
        assert ns["__path__"] == [os.path.dirname(ns["__file__"])]
    finally:
        sys.modules.pop("mpi4py_probe.rc", None)


def test_real_mpi4py_is_found_past_every_gpumpi_shim(tmp_path, monkeypatch):
    """A source checkout's shim on PYTHONPATH beside an installed gpumpi's (CI runs the tests
    from the checkout): the real mpi4py is never another gpumpi shim (that recursed)."""
    import shutil

    real = _mpi4py.real_spec()
    if real is None:
        pytest.skip("mpi4py is not installed")
    other = tmp_path / "other_shim"
    shutil.copytree(_mpi4py.SHIM_DIR, other)
    monkeypatch.setattr(sys, "path", [str(other), *sys.path])
    found = _mpi4py.real_spec()
    assert found is not None and found.origin == real.origin
    assert not _mpi4py._is_shim(found) and _mpi4py._is_shim(
        importlib.machinery.PathFinder.find_spec("mpi4py", [str(other)]))
