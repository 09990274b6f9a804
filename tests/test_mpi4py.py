"""gpumpi.MPI under the mpi4py shim honours ``mpi4py.rc`` at import, as mpi4py.MPI does.

Each case is a one-rank job (``gpumpirun --mpi4py``) that sets ``mpi4py.rc`` before
``from mpi4py import MPI`` and prints what MPI reports.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("mpi4py")  # the shim runs the installed mpi4py's own __init__ (its rc)


def _job(code: str) -> str:
    cmd = [sys.executable, "-m", "gpumpi.launch", "--mpi4py", "-n", "1", "--timeout", "60",
           sys.executable, "-c", code]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=True).stdout.strip()


@pytest.mark.parametrize("level,code", [("single", 0), ("funneled", 1), ("serialized", 2), ("multiple", 3)])
def test_thread_level(level, code):
    out = _job(f"import mpi4py; mpi4py.rc.thread_level = {level!r}\n"
               "from mpi4py import MPI; print(MPI.Query_thread(), MPI.Is_thread_main(), MPI.Is_initialized())")
    assert out == f"{code} True True"


def test_threads_false_requires_single():
    out = _job("import mpi4py; mpi4py.rc.threads = False\nfrom mpi4py import MPI; print(MPI.Query_thread())")
    assert out == "0"


def test_initialize_false_leaves_init_to_the_program():
    out = _job("import mpi4py; mpi4py.rc.initialize = False\n"
               "from mpi4py import MPI; a = MPI.Is_initialized()\n"
               "p = MPI.Init_thread(MPI.THREAD_SERIALIZED)\n"
               "print(a, MPI.Is_initialized(), p, MPI.Query_thread(), MPI.COMM_WORLD.Get_size())")
    assert out == "False True 2 2 1"


def test_default_is_thread_multiple():
    assert _job("from mpi4py import MPI; print(MPI.Query_thread())") == "3"
