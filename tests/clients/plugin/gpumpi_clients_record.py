"""pytest plugin of the client corpus: every rank records each test's outcome as it ends.

Theory of operation
===================
``run.py`` runs a client project's own pytest suite on every rank of a job with
``-p gpumpi_clients_record`` and ``GPUMPI_CLIENTS_OUT`` naming a folder.  Each rank (from
``GPUMPI_RANK``, or the ``PMI_RANK``/``PMIX_RANK``/``OMPI_COMM_WORLD_RANK`` of other
launchers; 0 when there is none) appends one flushed JSON line per event to
``rank<r>.jsonl`` there:

* ``{"start": id}`` when a test begins, so a hang or a crash names the test in flight;
* ``{"id": id, "outcome": o, "why": w}`` for each phase that decides an outcome (``ok``,
  ``skip``, ``xfail``, ``xpass``, ``fail``, ``error``; the reader keeps the worst);
* ``{"done": id}`` when its teardown ended, and ``{"end": exitstatus}`` when the session did.

Nothing is imported from MPI here: the plugin must not change when or how the project
initializes it.  Failing tests do not make the rank exit 1: the session's status "tests
failed" becomes 0, because the outcomes are on disk already and a nonzero exit makes
launchers (gpumpirun, MPICH's) tear down the ranks still running, which would lose their
records; every other status (interrupted, internal or usage error, nothing collected) is
kept.
"""

from __future__ import annotations

import json
import os

_RANK_VARS = ("GPUMPI_RANK", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK")


def _rank() -> int:
    for var in _RANK_VARS:
        value = os.environ.get(var)
        if value and value.isdigit():
            return int(value)
    return 0


def _why(report) -> str:
    text = getattr(report, "longreprtext", "") or ""
    if report.skipped and isinstance(report.longrepr, tuple):
        text = str(report.longrepr[2])
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    # pytest's "E   SomeError: message" line says most; else the last line
    picked = next((ln for ln in lines if ln.startswith("E ")), lines[-1] if lines else "")
    return picked[:300]


class Recorder:
    def __init__(self, path: str):
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed at session end)

    def _write(self, **event) -> None:
        self._f.write(json.dumps(event) + "\n")
        self._f.flush()

    def pytest_runtest_logstart(self, nodeid, location):
        self._write(start=nodeid)

    def pytest_runtest_logreport(self, report):
        xfail = hasattr(report, "wasxfail")
        if report.when == "call":
            if report.passed:
                outcome = "xpass" if xfail else "ok"
            elif report.skipped:
                outcome = "xfail" if xfail else "skip"
            else:
                outcome = "fail"
        elif report.failed:
            outcome = "error"
        elif report.skipped:
            outcome = "xfail" if xfail else "skip"
        else:
            return
        self._write(id=report.nodeid, outcome=outcome, why="" if outcome == "ok" else _why(report))

    def pytest_runtest_logfinish(self, nodeid, location):
        self._write(done=nodeid)

    def pytest_collectreport(self, report):
        if report.failed:
            self._write(id=report.nodeid or "<collection>", outcome="error", why="collection: " + _why(report))

    def pytest_sessionfinish(self, session, exitstatus):
        self._write(end=int(exitstatus))
        self._f.close()
        if int(exitstatus) == 1:  # tests failed: recorded; let the other ranks finish theirs
            session.exitstatus = 0


def pytest_configure(config):
    out = os.environ.get("GPUMPI_CLIENTS_OUT")
    if out and not config.pluginmanager.has_plugin("gpumpi_clients_recorder"):
        config.pluginmanager.register(Recorder(os.path.join(out, f"rank{_rank()}.jsonl")), "gpumpi_clients_recorder")
