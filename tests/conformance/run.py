"""mpi4py's own test suite, module by module, on gpumpi (or, with ``--ref``, on mpi4py + MPICH).

Theory of operation
===================
mpi4py's ``test/`` folder is the measure of gpumpi's drop-in promise.  This runner

* fetches the mpi4py sdist of :data:`MPI4PY_VERSION` with pip (``pip download
  --no-binary``) once, into a cache folder (``$GPUMPI_CONFORMANCE_CACHE``, default
  ``~/.cache/gpumpi/conformance``), and unpacks its ``test/`` folder there;
* runs one test module at a time at a given world size: on gpumpi as
  ``gpumpirun --mpi4py -n N python driver.py ...`` (``mpi4py`` resolves to gpumpi), on
  the reference as ``mpiexec -n N python driver.py ...`` with the real mpi4py + MPICH of
  the ``test`` extra; with ``--mpiexec K``, gpumpi under that same ``mpiexec`` (``mpi4py``
  resolves to gpumpi's shim, gpumpi's bootstrap loads the real mpi4py beside it) with the
  ranks in K pretend nodes, so every pair of nodes talks through the ``mpi`` transport;
* reads back what every rank recorded (``driver.py`` writes one flushed JSON line per
  test), so a crash or a hang still counts every finished test; the test in flight is
  named, and the module is resumed after it (up to :data:`MAX_RESUMES` times) so one
  broken test does not hide the rest of its module;
* counts a test as passed when it passed on every rank.

``expected.json`` holds, per module and world size, the count gpumpi must reach
(``gpumpi``), the reference count (``mpich``), the count on simulated device buffers
(``sim``), and a one-line reason for every test mpi4py + MPICH passes and gpumpi may
not yet.  ``--check`` fails on any count below its expectation, so coverage only goes
up; ``--write`` records new counts (never lower ones: raise them as areas land).

Usage::

    python tests/conformance/run.py -n 1 2 3 --modules p2p_obj status   # print a table
    python tests/conformance/run.py --ci --check                         # what CI checks
    python tests/conformance/run.py --all -n 2 --ref --write             # reference counts
    python tests/conformance/run.py --ci --device sim --check            # on device buffers
    python tests/conformance/run.py -n 4 --mpiexec 2 --check             # mpiexec, 2 pretend nodes
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field

MPI4PY_VERSION = "4.1.2"
HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "driver.py")
EXPECTED = os.path.join(HERE, "expected.json")
MAX_RESUMES = 8
MODULE_TIMEOUT = 120.0  # seconds per run of one module (a hang costs this much once)


def cache_dir() -> str:
    return os.environ.get("GPUMPI_CONFORMANCE_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "gpumpi", "conformance"
    )


def fetch(version: str = MPI4PY_VERSION) -> str:
    """The path of mpi4py ``version``'s ``test/`` folder, downloading the sdist once."""
    root = os.path.join(cache_dir(), f"mpi4py-{version}")
    testdir = os.path.join(root, "test")
    if os.path.isfile(os.path.join(testdir, "mpiunittest.py")):
        return testdir
    os.makedirs(cache_dir(), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        # only mpi4py itself from source: ``--no-binary :all:`` builds its build requirements from
        # source too (Cython: minutes of CI) just to read its metadata
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", "mpi4py",
               "-d", tmp, f"mpi4py=={version}"]
        subprocess.run(cmd, check=True)
        (sdist,) = [f for f in os.listdir(tmp) if f.endswith((".tar.gz", ".zip"))]
        with tarfile.open(os.path.join(tmp, sdist)) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"mpi4py-{version}/test/")]
            tar.extractall(tmp, members=members)  # noqa: S202  (the sdist pip just verified)
        staged = os.path.join(tmp, f"mpi4py-{version}")
        if not os.path.isdir(root):
            os.replace(staged, root)
    return testdir


def all_modules(testdir: str) -> list[str]:
    return sorted(f[5:-3] for f in os.listdir(testdir) if f.startswith("test_") and f.endswith(".py"))


@dataclass
class ModuleResult:
    module: str
    n: int
    passed: set = field(default_factory=set)
    outcomes: dict = field(default_factory=dict)  # test id -> (outcome, why) of the worst rank
    broke: list = field(default_factory=list)  # (test id or None, "crash ..."/"hang")
    seconds: float = 0.0

    @property
    def count(self) -> int:
        return len(self.passed)

    def failures(self) -> dict:
        return {t: ow for t, ow in self.outcomes.items() if ow[0] not in ("ok", "skip")}


_RANK_ORDER = {"ok": 0, "skip": 1, "xfail": 1, "xpass": 2, "fail": 3, "error": 4, "hang": 5, "broke": 6}


def _read(outdir: str, n: int):
    """Per rank: ordered outcomes {id: (outcome, why)}, the test in flight (or None), ended?"""
    ranks = []
    for r in range(n):
        outcomes, inflight, ended = {}, None, False
        path = os.path.join(outdir, f"rank{r}.jsonl")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue  # a line cut by a crash
                    if "start" in ev:
                        inflight = ev["start"]
                    elif "end" in ev:
                        ended, inflight = True, None
                    else:
                        prev = outcomes.get(ev["id"])
                        if prev is None or _RANK_ORDER[ev["outcome"]] > _RANK_ORDER[prev[0]]:
                            outcomes[ev["id"]] = (ev["outcome"], ev.get("why", ""))
                        if ev["id"] == inflight and "sub" not in ev and ev["outcome"] != "hang":
                            inflight = None  # (the watchdog's "hang" leaves the test in flight)
        ranks.append((outcomes, inflight, ended))
    return ranks


def _command(testdir: str, module: str, n: int, outdir: str, skipfile: str, ref: bool, timeout: float,
             nodes: int | None = None):
    drv = [sys.executable, DRIVER, testdir, module, outdir, skipfile]
    if ref or nodes is not None:
        mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
        if mpiexec is None:
            raise SystemExit("run.py --ref/--mpiexec: no mpiexec (pip install mpich mpi4py: the 'test' extra)")
        return [mpiexec, "-n", str(n), *drv]
    return [sys.executable, "-m", "gpumpi.launch", "--mpi4py", "-n", str(n), "--timeout", str(timeout), *drv]


def _env(ref: bool, device: str | None, nodes: int | None = None) -> dict:
    env = dict(os.environ)
    env.pop("GPUMPI_MPI4PY", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if nodes is not None:  # gpumpi under MPICH's mpiexec: mpi4py is gpumpi's shim, K pretend nodes
        from gpumpi._mpi4py import SHIM_DIR

        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join([SHIM_DIR, *parts])
        env["GPUMPI_SIM_NODES"] = str(nodes)
    # mpi4py's suite runs on the compiled small-message path from the first message (by default
    # it starts after 256, which most of these short tests never reach)
    env.setdefault("GPUMPI_FASTPATH", "on")
    if device:
        env["GPUMPI_DEVICE"] = device
    if ref:  # the real mpi4py: never the shim
        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and not p.endswith("_shim")]
        env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def not_run(expected: dict, module: str, n: int) -> list[str]:
    """The fnmatch patterns of ``module``'s tests expected.json says not to run at ``n`` ranks."""
    return [e["pattern"] for e in expected["modules"].get(module, {}).get("skip", []) if n in e.get("n", (n,))]


def run_module(testdir: str, module: str, n: int, *, ref: bool = False, device: str | None = None,
               timeout: float = MODULE_TIMEOUT, log=None, skip_patterns=(), nodes: int | None = None) -> ModuleResult:
    """Run ``test_<module>`` at ``n`` ranks, resuming after tests that crash or hang."""
    res = ModuleResult(module, n)
    t0 = time.monotonic()
    skip: set[str] = set(skip_patterns)
    with tempfile.TemporaryDirectory(prefix=f"m4p-{module}-{n}-") as tmp:
        for attempt in range(MAX_RESUMES + 1):
            outdir = os.path.join(tmp, f"run{attempt}")
            os.mkdir(outdir)
            skipfile = os.path.join(tmp, f"skip{attempt}")
            with open(skipfile, "w", encoding="utf-8") as f:
                f.write("\n".join(sorted(skip)))
            cmd = _command(testdir, module, n, outdir, skipfile, ref, timeout, nodes)
            proc = subprocess.Popen(cmd, cwd=testdir, env=_env(ref, device, nodes), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                tail, _ = proc.communicate(timeout=timeout + 30)
                hung = False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                tail, _ = proc.communicate()
                hung = True
            ranks = _read(outdir, n)
            ids = list(dict.fromkeys(t for outcomes, _i, _e in ranks for t in outcomes))
            for t in ids:
                per = [outcomes.get(t, ("broke", "not run on every rank")) for outcomes, _i, _e in ranks]
                worst = max(per, key=lambda ow: _RANK_ORDER[ow[0]])
                res.outcomes[t] = worst
                if all(ow[0] == "ok" for ow in per):
                    res.passed.add(t)
            if all(ended for _o, _i, ended in ranks) and proc.returncode == 0:
                break
            inflight = next((i for _o, i, _e in ranks if i), None)
            watchdog = any(o.get(inflight, ("",))[0] == "hang" for o, _i, _e in ranks)
            why = "hang" if hung or watchdog or proc.returncode == 124 else f"exit {proc.returncode}"
            text = tail.decode(errors="replace").strip().splitlines()[-1:] if tail else []
            res.broke.append((inflight, why + (f": {text[0][:200]}" if text else "")))
            if inflight is None:
                break  # died outside any test (import, set-up, teardown)
            res.outcomes[inflight] = ("broke", why)
            skip |= set(ids) | {inflight}
            if log:
                log(f"  {module} @{n}: {inflight} {why}; resuming")
    res.seconds = time.monotonic() - t0
    return res


# --- expectations --------------------------------------------------------------------------
def load_expected(path: str = EXPECTED) -> dict:
    if not os.path.exists(path):
        return {"mpi4py": MPI4PY_VERSION, "ci": [], "modules": {}}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def save_expected(data: dict, path: str = EXPECTED) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")


def key(ref: bool, device: str | None, nodes: int | None = None) -> str:
    if ref:
        return "mpich"
    base = "gpumpi" if nodes is None else f"gpumpi-mpiexec{nodes}"
    return f"{base}-{device}" if device else base


def reason_for(expected: dict, module: str, test_id: str) -> str | None:
    """The recorded reason a test of ``module`` may fail on gpumpi (patterns are fnmatch globs on ids)."""
    import fnmatch

    for pattern, why in expected["modules"].get(module, {}).get("reasons", {}).items():
        if fnmatch.fnmatchcase(test_id, pattern) or fnmatch.fnmatchcase(test_id, f"test_{module}.{pattern}"):
            return why
    return None


def unexplained(r: ModuleResult, expected: dict) -> list[str]:
    """Tests that failed, erred, crashed or hung in ``r`` with no reason in expected.json."""
    out = [f"{o} {t}: {why}" for t, (o, why) in sorted(r.failures().items()) if reason_for(expected, r.module, t) is None]
    out += [f"BROKE {t}: {why}" for t, why in r.broke if t is None]
    return out


def check(results: list[ModuleResult], expected: dict, which: str) -> list[str]:
    """Every count below its expectation, as lines (empty: all met)."""
    bad = []
    for r in results:
        want = expected["modules"].get(r.module, {}).get(which, {}).get(str(r.n))
        if want is not None and r.count < want:
            lost = sorted(t for t, ow in r.failures().items())[:20]
            bad.append(f"{r.module} @{r.n}: {r.count} passed < {want} expected; failing: {lost}")
    return bad


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, nargs="+", default=[1, 2, 3], help="world sizes (default 1 2 3)")
    p.add_argument("--modules", nargs="+", help="modules (without test_), default: the CI set")
    p.add_argument("--all", action="store_true", help="every module of the suite")
    p.add_argument("--ref", action="store_true", help="run on real mpi4py + MPICH (mpiexec)")
    p.add_argument("--device", help="GPUMPI_DEVICE for the ranks (sim: device buffers on the simulator)")
    p.add_argument("--mpiexec", type=int, metavar="K",
                   help="run gpumpi under MPICH's mpiexec, the ranks in K pretend nodes (GPUMPI_SIM_NODES)")
    p.add_argument("--check", action="store_true", help="exit 1 on any count below expected.json")
    p.add_argument("--write", action="store_true", help="raise expected.json's counts to these results")
    p.add_argument("--prune", action="store_true",
                   help="with --write: drop the reasons no failure of these runs matches (modules run at 1, 2 and 3 ranks)")
    p.add_argument("--timeout", type=float, default=MODULE_TIMEOUT)
    p.add_argument("-j", type=int, default=1, help="modules run at once")
    p.add_argument("-v", action="store_true", help="list every failing test")
    ns = p.parse_args(argv)
    testdir = fetch()
    expected = load_expected()
    mods = all_modules(testdir) if ns.all else (ns.modules or expected["ci"])
    if ns.mpiexec is not None and (ns.ref or ns.mpiexec < 1):
        p.error("--mpiexec K: K >= 1, and not with --ref")
    which = key(ns.ref, ns.device, ns.mpiexec)
    jobs = [(m, n) for m in mods for n in ns.n]
    t0 = time.monotonic()
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    with concurrent.futures.ThreadPoolExecutor(max(1, ns.j)) as ex:
        futs = [ex.submit(run_module, testdir, m, n, ref=ns.ref, device=ns.device, timeout=ns.timeout, log=log,
                          skip_patterns=not_run(expected, m, n), nodes=ns.mpiexec) for m, n in jobs]
        results = [f.result() for f in futs]
    by = collections.defaultdict(dict)
    for r in results:
        by[r.module][r.n] = r
    print(f"{'module':<20}" + "".join(f"{'n=' + str(n):>16}" for n in ns.n))
    for m in mods:
        cells = []
        for n in ns.n:
            r = by[m][n]
            ref = expected["modules"].get(m, {}).get("mpich", {}).get(str(n))
            cells.append(f"{r.count:>6}/{ref if ref is not None else '?':<5}{'!' if r.broke else ' '}{r.seconds:>3.0f}s")
        print(f"{m:<20}" + "".join(f"{c:>16}" for c in cells))
        if ns.v:
            for n in ns.n:
                r = by[m][n]
                for t, (o, why) in sorted(r.failures().items()):
                    known = reason_for(expected, m, t)
                    print(f"    @{n} {o:<5} {t}: {why}" + (f"  [{known}]" if known else "  [NO REASON]"))
                for t, why in r.broke:
                    print(f"    @{n} BROKE {t}: {why}")
    print(f"({len(jobs)} runs in {time.monotonic() - t0:.0f}s; cells: passed/mpich, ! = a crash or hang)")
    if ns.write:
        for r in results:
            entry = expected["modules"].setdefault(r.module, {}).setdefault(which, {})
            entry[str(r.n)] = max(r.count, entry.get(str(r.n), 0)) if which != "mpich" else r.count
        if ns.prune and not ns.ref and not ns.device:
            for m in mods:
                if sorted(by[m]) != [1, 2, 3]:
                    continue
                reasons = expected["modules"].get(m, {}).get("reasons", {})
                failed = [t for r in by[m].values() for t in list(r.failures()) + [t for t, _ in r.broke if t]]
                for pattern in list(reasons):
                    if not any(reason_for({"modules": {m: {"reasons": {pattern: "x"}}}}, m, t) for t in failed):
                        del reasons[pattern]
        save_expected(expected)
    if ns.check:
        bad = check(results, expected, which)
        for line in bad:
            print("BELOW EXPECTATION:", line)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
