"""Helpers of the bench tests: running the ``gpumpi`` command outside any job, the markers for
tests that need ``mpiexec`` and mpi4py or the gpumpi launcher, a communicator that corrupts what it
receives, and the probe for CuPy and a GPU (asked of a subprocess, so that the test process never
initialises CUDA: ``run_ranks`` forks).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from gpumpi import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIEXEC = cli.find_mpiexec()
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None
needs_mpiexec = pytest.mark.skipif(
    MPIEXEC is None or not HAVE_MPI4PY, reason="mpiexec or mpi4py not found (pip install mpi4py mpich)"
)
needs_launcher = pytest.mark.skipif(not cli.gpumpi_launcher_available(), reason="gpumpi.launch is missing")


def host_env():
    """This environment without a job's variables, with this checkout first on ``PYTHONPATH``."""
    env = dict(os.environ)
    for name in cli.JOB_ENV_VARS:
        env.pop(name, None)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def device_env(**extra):
    """:func:`host_env` without ``GPUMPI_TRANSPORTS`` and ``GPUMPI_DEVICE`` either, plus ``extra``."""
    env = dict(os.environ)
    for name in (*cli.JOB_ENV_VARS, "GPUMPI_TRANSPORTS", "GPUMPI_DEVICE"):
        env.pop(name, None)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def run(cmd, timeout=180):
    """Run ``cmd`` in the repository root under :func:`host_env`."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=host_env(), cwd=ROOT)


def run_bench(*argv, timeout=120, **extra):
    """Run ``python -m gpumpi.cli bench *argv`` in the repository root under :func:`device_env`."""
    cmd = [sys.executable, "-m", "gpumpi.cli", "bench", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=device_env(**extra), cwd=ROOT)


def corrupting_mpi(tag):
    """``gpumpi.MPI`` with a ``COMM_WORLD`` whose ``Recv`` flips the first byte of every device
    message of ``tag``."""
    import types

    from gpumpi import MPI as real

    class Comm:
        def __init__(self, c):
            self._c = c

        def __getattr__(self, name):
            return getattr(self._c, name)

        def Recv(self, buf, source, tag_=0, status=None):
            self._c.Recv(buf, source, tag_, status)
            if tag_ == tag and buf[0].size:
                host = buf[0].get()
                host[0] ^= 0xFF
                buf[0].set(host)

    return types.SimpleNamespace(COMM_WORLD=Comm(real.COMM_WORLD), BYTE=real.BYTE, Wtime=real.Wtime,
                                 Request=real.Request)  # fmt: skip


def gpu_or_skip():
    """The number of GPUs CuPy sees; skips the test without CuPy and a GPU."""
    code = "from gpumpi import bench; ok, why = bench.cupy_status(); print(ok); print(why)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=device_env(),
                         cwd=ROOT)  # fmt: skip
    ok, why = (out.stdout.splitlines() + ["False", out.stderr.strip()])[:2]
    if ok != "True":
        pytest.skip(f"needs CuPy and a CUDA GPU ({why})")
    return int(why.split()[0])
