"""gpumpi.MPI under the mpi4py shim (``gpumpirun --mpi4py``, gpumpi._mpi4py).

It honours ``mpi4py.rc`` at import, as mpi4py.MPI does (one-rank jobs that set
``mpi4py.rc`` before ``from mpi4py import MPI`` and print what MPI reports), and the
installed ``mpi4py.util.pkl5`` runs on it, at 1-3 ranks.
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


@pytest.mark.parametrize("errors,handler", [("exception", "ERRORS_RETURN"), ("default", "ERRORS_ARE_FATAL"),
                                            ("fatal", "ERRORS_ARE_FATAL"), ("abort", "ERRORS_ABORT")])
def test_rc_errors_sets_the_error_handler_of_the_predefined_communicators(errors, handler):
    out = _job(f"import mpi4py; mpi4py.rc.errors = {errors!r}\n"
               "from mpi4py import MPI\n"
               "print(*(c.Get_errhandler() == getattr(MPI, h) for c in (MPI.COMM_WORLD, MPI.COMM_SELF)\n"
               f"      for h in ({handler!r},)))")
    assert out == "True True"


def test_rc_errors_fatal_ends_the_job_on_an_error():
    cmd = [sys.executable, "-m", "gpumpi.launch", "--mpi4py", "-n", "1", "--timeout", "60", sys.executable, "-c",
           "import mpi4py; mpi4py.rc.errors = 'fatal'\nfrom mpi4py import MPI\n"
           "MPI.COMM_WORLD.Send(b'x', dest=5)\nprint('survived')"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert p.returncode != 0 and "survived" not in p.stdout, (p.returncode, p.stdout, p.stderr)


def test_rc_finalize_false_leaves_finalize_to_the_program():
    code = "import mpi4py; mpi4py.rc.finalize = False\nfrom mpi4py import MPI\n"
    assert _job(code + "MPI.Finalize(); print(MPI.Is_finalized())") == "True"
    cmd = [sys.executable, "-m", "gpumpi.launch", "--mpi4py", "-n", "1", "--timeout", "60", sys.executable, "-c",
           code + "print('exiting')"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert p.returncode != 0 and "without calling MPI_Finalize" in p.stderr, (p.returncode, p.stderr)


def test_rc_environment_variables_win_and_are_written_back():
    """mpi4py's demo init-fini/test_3.py: ``MPI4PY_RC_*`` set before the import override rc."""
    out = _job("import os\n"
               "os.environ.update(MPI4PY_RC_INITIALIZE='false', MPI4PY_RC_FINALIZE='true',\n"
               "                  MPI4PY_RC_THREADS='off', MPI4PY_RC_THREAD_LEVEL='Single',\n"
               "                  MPI4PY_RC_IRECV_BUFSZ='2048')\n"
               "from mpi4py import rc, MPI\n"
               "print(MPI.Is_initialized(), MPI.Is_finalized(), rc.initialize, rc.finalize, rc.threads,\n"
               "      rc.thread_level, rc.irecv_bufsz)")
    assert out == "False False False True False single 2048"


def test_rc_unexpected_values_warn_in_mpi4pys_words():
    """mpi4py's demo init-fini/test_6.py: every option set to a bad value warns once, named, and
    the defaults hold (so the import still initialises, at THREAD_MULTIPLE)."""
    out = _job("import warnings\nfrom mpi4py import rc\n"
               "names = sorted(a for a in dir(rc) if not a.startswith('_'))\n"
               "for a in names: setattr(rc, a, -123456789)\n"
               "with warnings.catch_warnings(record=True) as w:\n"
               "    warnings.simplefilter('always')\n"
               "    from mpi4py import MPI\n"
               "print(len(names), MPI.Query_thread())\n"
               "print(*sorted(str(x.message) for x in w), sep='\\n')")
    lines = out.splitlines()
    names = ["errors", "fast_reduce", "finalize", "initialize", "irecv_bufsz", "recv_mprobe", "thread_level",
             "threads"]
    assert lines[0] == "8 3"
    assert lines[1:] == [f"mpi4py.rc.{n}: unexpected value -123456789" for n in names]


PKL5 = """\
import numpy as np
from mpi4py import MPI
from mpi4py.util import pkl5

c = pkl5.Intracomm(MPI.COMM_WORLD)  # through Comm.__new__(cls, comm)
assert c == MPI.COMM_WORLD and type(c) is pkl5.Intracomm
r, n = c.rank, c.size
dst, src = (r + 1) % n, (r - 1) % n
big = np.arange(200_000.0) + r
s = c.isend({"r": r, "a": big}, dst, 3)
got = c.recv(None, src, 3)
s.wait()
assert got["r"] == src and np.array_equal(got["a"], np.arange(200_000.0) + src)
s = c.issend([r, big], dst, 4)
m = c.mprobe(src, 4)
assert m and m.recv()[0] == src and not m
m.free()
s.wait()
assert c.gather(r, root=0) == (list(range(n)) if r == 0 else None)
assert c.scatter([i * 10 for i in range(n)] if r == 0 else None, root=0) == r * 10
assert c.allgather(r) == list(range(n))
assert c.alltoall([(r, i) for i in range(n)]) == [(i, r) for i in range(n)]
print("ok")
"""


@pytest.mark.parametrize("n", [1, 2, 3])
def test_mpi4py_util_pkl5(n):
    cmd = [sys.executable, "-m", "gpumpi.launch", "--mpi4py", "-n", str(n), "--timeout", "60",
           sys.executable, "-c", PKL5]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("ok") == n  # every rank got to the end (their lines may interleave)
