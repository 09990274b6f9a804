"""One rank of one mpi4py test module (run by ``run.py`` under ``gpumpirun --mpi4py`` or ``mpiexec``).

``python driver.py TESTDIR MODULE OUTDIR [SKIPFILE]`` imports mpi4py (the shim or the
real one), loads ``test_MODULE`` from mpi4py's ``test/`` folder as mpi4py's own
``main.py`` does, and runs it with a result object that appends one JSON line per event
to ``OUTDIR/rank<R>.jsonl`` and flushes it at once: ``{"start": id}`` before each test,
``{"id": id, "outcome": ...}`` after it.  A crash or a hang therefore still leaves every
finished test on disk, and the test in flight is the last ``start`` without an outcome.
Tests named in SKIPFILE (one id or fnmatch pattern per line) are not run: the runner's
resume after a crash, and the tests expected.json says not to run.

A watchdog ends the rank (exit status 3) when one test runs longer than
``GPUMPI_CONFORMANCE_TEST_TIMEOUT`` seconds (default 60), after recording it as
``"hang"``: a hung test costs that long, not the whole module's time limit.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import threading
import time
import traceback
import unittest


class Recorder(unittest.TestResult):
    def __init__(self, out):
        super().__init__()
        self.out = out

    def _emit(self, **fields):
        self.out.write(json.dumps(fields) + "\n")
        self.out.flush()

    current: tuple | None = None  # (test id, monotonic start) of the test in flight

    def startTest(self, test):
        super().startTest(test)
        self._emit(start=test.id())
        self.current = (test.id(), time.monotonic())

    def stopTest(self, test):
        self.current = None
        super().stopTest(test)

    def _why(self, err):
        kind, value, _tb = err
        line = f"{kind.__name__}: {value}".splitlines()
        return (line[0] if line else kind.__name__)[:300]

    def addSuccess(self, test):
        self._emit(id=test.id(), outcome="ok")

    def addFailure(self, test, err):
        self._emit(id=test.id(), outcome="fail", why=self._why(err), tb="".join(traceback.format_exception(*err))[-2000:])

    def addError(self, test, err):
        self._emit(id=test.id(), outcome="error", why=self._why(err), tb="".join(traceback.format_exception(*err))[-2000:])

    def addSkip(self, test, reason):
        self._emit(id=test.id(), outcome="skip", why=str(reason)[:300])

    def addExpectedFailure(self, test, err):
        self._emit(id=test.id(), outcome="xfail")

    def addUnexpectedSuccess(self, test):
        self._emit(id=test.id(), outcome="xpass")

    def addSubTest(self, test, subtest, err):
        if err is not None:
            kind = "fail" if issubclass(err[0], test.failureException) else "error"
            self._emit(id=test.id(), outcome=kind, sub=str(subtest.id()), why=self._why(err),
                       tb="".join(traceback.format_exception(*err))[-2000:])


def _flatten(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _flatten(t)
        else:
            yield t


def _load(name: str) -> unittest.TestSuite:
    """Load a test module as mpi4py's main.py does by default (no --cupy, no --numba).

    main.py hides CuPy and Numba from the suite (``sys.modules[...] = None``) unless asked
    for them; they are hidden here only while the test modules import, so that gpumpi can
    still load Numba for its own pack kernels.
    """
    hidden = {m: sys.modules.get(m) for m in ("cupy", "numba")}
    for m in hidden:
        sys.modules[m] = None
    try:
        return unittest.defaultTestLoader.loadTestsFromName(name)
    finally:
        for m, mod in hidden.items():
            if mod is None:
                sys.modules.pop(m, None)
            else:
                sys.modules[m] = mod


def _watchdog(result: Recorder, limit: float) -> None:
    while True:
        time.sleep(min(1.0, limit / 4))
        cur = result.current
        if cur is not None and time.monotonic() - cur[1] > limit and result.current is cur:
            result._emit(id=cur[0], outcome="hang", why=f"still running after {limit:g} s")
            os._exit(3)


def main(argv: list[str]) -> int:
    testdir, module, outdir = argv[:3]
    skip = set()
    if len(argv) > 3 and argv[3]:
        with open(argv[3], encoding="utf-8") as f:
            skip = [line.strip() for line in f if line.strip()]
    sys.dont_write_bytecode = True
    sys.path.insert(0, testdir)
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    with open(os.path.join(outdir, f"rank{rank}.jsonl"), "a", encoding="utf-8") as out:
        result = Recorder(out)
        try:
            suite = _load(f"test_{module}")
        except Exception:  # the module does not import (a missing name): one error, and a count of 0
            err = sys.exc_info()
            result._emit(id=f"test_{module}.<import>", outcome="error", why=result._why(err),
                         tb="".join(traceback.format_exception(*err))[-2000:])
            suite = unittest.TestSuite()
        exact = set(skip)
        patterns = [s for s in skip if any(c in s for c in "*?[")]
        tests = [t for t in _flatten(suite)
                 if t.id() not in exact and not any(fnmatch.fnmatchcase(t.id(), p) for p in patterns)]
        limit = float(os.environ.get("GPUMPI_CONFORMANCE_TEST_TIMEOUT", "60"))
        threading.Thread(target=_watchdog, args=(result, limit), daemon=True).start()
        unittest.TestSuite(tests).run(result)
        result._emit(end=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
