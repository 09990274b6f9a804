"""mpi4py's own test suite on gpumpi: no module of the CI set may pass fewer tests than expected.json says.

Each (module, world size) of ``expected.json``'s ``ci`` list runs mpi4py 4.1.2's
``test_<module>.py`` under ``gpumpirun --mpi4py`` (see ``run.py``) and must

* pass at least the recorded ``gpumpi`` count (counts only ever go up: raise them with
  ``python tests/conformance/run.py --write`` when a change makes more tests pass),
* end without a crash or a hang, and
* fail no test without a one-line reason in the module's ``reasons`` (fnmatch patterns
  on test ids).

The modules of ``ci_4`` run at 4 ranks too, those of ``ci_mpiexec`` at 4 ranks under MPICH's
``mpiexec`` in 2 pretend nodes (``--mpiexec 2``, the ``gpumpi-mpiexec2`` counts); ``ci_sizes`` names modules CI runs at fewer sizes.  The modules of ``ci_sim`` run again with ``GPUMPI_DEVICE=sim`` at 2 and 3 ranks, where the suite's
fake-GPU (CUDA array interface) arrays are simulated device memory, against the
``gpumpi-sim`` counts.  The sdist comes from PyPI through pip, once (cached).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

import pytest

_spec = importlib.util.spec_from_file_location(
    "gpumpi_conformance_run", os.path.join(os.path.dirname(__file__), "run.py")
)
run = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = run  # its dataclasses look their module up
_spec.loader.exec_module(run)

EXPECTED = run.load_expected()
SIZES = (1, 2, 3)


@pytest.fixture(scope="module")
def testdir():
    return run.fetch()


def _check(testdir, module, n, device, nodes=None):
    which = run.key(False, device, nodes)
    want = EXPECTED["modules"].get(module, {}).get(which, {}).get(str(n))
    assert want is not None, f"expected.json has no {which} count for {module} at {n} ranks"
    r = run.run_module(testdir, module, n, device=device, timeout=run.MODULE_TIMEOUT,
                       skip_patterns=run.not_run(EXPECTED, module, n), nodes=nodes)
    failing = "\n".join(f"  {o} {t}: {why}" for t, (o, why) in sorted(r.failures().items()))
    assert not r.broke, f"test_{module} at {n} ranks crashed or hung: {r.broke}\n{failing}"
    assert r.count >= want, f"test_{module} at {n} ranks: {r.count} passed < {want} expected; failing:\n{failing}"
    loose = run.unexplained(r, EXPECTED)
    assert not loose, f"test_{module} at {n} ranks: failures with no reason in expected.json:\n" + "\n".join(loose)


#: modules CI runs at fewer world sizes (the runner still checks every size by hand): rank-independent
#: ones (util_dtlib converts types and never communicates) and variants of a module that runs at 3
#: ranks (cco_nb_buf and cco_pr_buf are cco_buf's calls, nonblocking and persistent), for CI's budget
CI_SIZES = EXPECTED.get("ci_sizes", {})


def _ci_cases(modules):
    return [(m, n) for m in modules for n in SIZES if n in CI_SIZES.get(m, SIZES)]


@pytest.mark.parametrize("module,n", _ci_cases(EXPECTED["ci"]))
def test_mpi4py_module(testdir, module, n):
    _check(testdir, module, n, None)


#: world sizes of the simulated-device lane in CI: device memory between ranks (the runner still
#: checks 1 rank by hand; the main lane runs every module at 1 rank), for CI's budget
SIM_SIZES = (2, 3)


@pytest.mark.parametrize("n", SIM_SIZES)
@pytest.mark.parametrize("module", EXPECTED.get("ci_sim", []))
def test_mpi4py_module_on_simulated_device(testdir, module, n):
    _check(testdir, module, n, "sim")


@pytest.mark.parametrize("module", EXPECTED.get("ci_4", []))
def test_mpi4py_module_at_four_ranks(testdir, module):
    """Intercommunicator and topology modules also at 4 ranks (uneven groups, 2-D grids)."""
    _check(testdir, module, 4, None)


@pytest.mark.mpi
@pytest.mark.parametrize("module", EXPECTED.get("ci_mpiexec", []))
def test_mpi4py_module_under_mpiexec_on_two_nodes(testdir, module):
    """gpumpi under MPICH's mpiexec, 4 ranks in 2 pretend nodes (every pair of nodes through the
    ``mpi`` transport, windows through MPI RMA, hierarchical collectives): the ``gpumpi-mpiexec2``
    counts, which equal gpumpirun's at 4 ranks (the whole suite: ``run.py -n 4 --mpiexec 2``)."""
    if shutil.which("mpiexec", path=os.path.dirname(sys.executable)) is None and shutil.which("mpiexec") is None:
        pytest.skip("needs mpiexec (pip install mpich mpi4py)")
    _check(testdir, module, 4, None, nodes=2)


def test_expectations_never_exceed_the_reference():
    """An expectation above MPICH's count would be a typo (or a test that cannot fail)."""
    for module, entry in EXPECTED["modules"].items():
        ref = entry.get("mpich", {})
        for which in ("gpumpi", "gpumpi-sim"):
            for n, count in entry.get(which, {}).items():
                if n in ref:
                    assert count <= ref[n] or module in EXPECTED.get("beyond_mpich", {}), (module, which, n)


def test_every_reason_is_one_line():
    for module, entry in EXPECTED["modules"].items():
        for pattern, why in entry.get("reasons", {}).items():
            assert why.strip() and "\n" not in why, (module, pattern)
