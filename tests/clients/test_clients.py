"""Real programs on gpumpi in CI: the quick pure-Python projects of the client corpus, unmodified.

Each project of ``expected.json``'s ``ci`` list (published mpi4py clients whose own test
suites run in seconds: see ``projects.json``) runs its tests under ``gpumpirun --mpi4py``
at each of ``ci_sizes`` through ``run.py`` and must

* pass at least the recorded ``gpumpi`` count (raise it with ``run.py --write``),
* end every job cleanly (no crash, no hang, no failure at exit), and
* fail no test without a one-line reason in the project's ``reasons``.

The projects come from PyPI through pip, once (cached in ``$GPUMPI_CLIENTS_CACHE``); where
pip cannot reach an index the tests skip, saying so.  The whole corpus (C extensions,
dask, FFTs, MPICH reference) runs by hand: ``python tests/clients/run.py --all -n 2 3 --check``.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

_spec = importlib.util.spec_from_file_location("gpumpi_clients_run", os.path.join(os.path.dirname(__file__), "run.py"))
run = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = run  # its dataclasses look their module up
_spec.loader.exec_module(run)

PROJECTS = run.load_projects()
EXPECTED = run.load_expected()


def _cases():
    return [(p, n) for p in EXPECTED["ci"] for n in run.sizes_for(PROJECTS[p], EXPECTED["ci_sizes"])]


@pytest.mark.parametrize("project,n", _cases())
def test_client_project(project, n):
    want = EXPECTED["projects"].get(project, {}).get("gpumpi", {}).get(str(n))
    assert want is not None, f"expected.json has no gpumpi count for {project} at {n} ranks"
    r = run.run_project(project, PROJECTS[project], n)
    if r.unavailable:
        pytest.skip(f"{project} {PROJECTS[project]['version']} unavailable here: {r.unavailable}")
    failing = "\n".join(f"  {o} {t}: {why}" for t, (o, why) in sorted(r.failures().items()))
    assert not r.broke, f"{project} at {n} ranks crashed, hung or exited uncleanly: {r.broke}\n{failing}"
    assert r.count >= want, f"{project} at {n} ranks: {r.count} passed < {want} expected; failing:\n{failing}"
    loose = run.unexplained(r, EXPECTED)
    assert not loose, f"{project} at {n} ranks: failures with no reason in expected.json:\n" + "\n".join(loose)


def test_expectations_never_exceed_the_reference():
    """A gpumpi count above MPICH's would be a typo (or a test that cannot fail)."""
    for project, entry in EXPECTED["projects"].items():
        ref = entry.get("mpich", {})
        for n, count in entry.get("gpumpi", {}).items():
            if n in ref:
                assert count <= ref[n], (project, n, count, ref[n])


def test_every_project_is_described_and_every_reason_is_one_line():
    for name, spec in PROJECTS.items():
        for key in ("version", "category", "exercises", "runs"):
            assert spec.get(key), (name, key)
        for r in spec["runs"]:
            assert r["mode"] in ("pytest", "script", "serial"), (name, r)
    for project, entry in EXPECTED["projects"].items():
        assert project in PROJECTS, project
        for pattern, why in entry.get("reasons", {}).items():
            assert why.strip() and "\n" not in why, (project, pattern)


def test_recording_plugin_and_reader(tmp_path):
    """Offline: the plugin records each test's worst phase per rank and turns "tests failed" into
    exit 0; the reader names the worst outcome and keeps passes only from clean jobs."""
    import subprocess

    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_fail(): assert 0, 'boom'\n"
        "@pytest.mark.skip(reason='no')\n"
        "def test_skip(): pass\n"
        "@pytest.fixture\n"
        "def bad():\n    yield\n    raise RuntimeError('teardown')\n"
        "def test_teardown(bad): pass\n")
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, GPUMPI_CLIENTS_OUT=str(out), GPUMPI_RANK="1",
               PYTHONPATH=os.pathsep.join([run.PLUGIN_DIR, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", run.PLUGIN,
                           "test_x.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (rank0, inflight0, ended0), (rank1, inflight1, ended1) = run._read(str(out), 2)
    assert (rank0, inflight0, ended0) == ({}, None, False)  # rank 0 never ran: nothing recorded
    assert ended1 and inflight1 is None
    assert {t.split("::")[1]: o for t, (o, _w) in rank1.items()} == {
        "test_ok": "ok", "test_fail": "fail", "test_skip": "skip", "test_teardown": "error"}
    assert "boom" in rank1["test_x.py::test_fail"][1]
