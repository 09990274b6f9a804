"""Real programs on gpumpi: third-party mpi4py clients' own test suites (or, with ``--ref``, on mpi4py + MPICH).

Theory of operation
===================
mpi4py's test suite (``tests/conformance``) checks the API call by call; the client corpus
checks what users run: published packages built on mpi4py, unmodified, through their own
tests.  ``projects.json`` names each project with

* ``version`` (pinned) and the PyPI distribution (the key, or ``dist``); ``deps``: the pinned
  requirements it needs beyond this venv, installed with ``--no-deps`` so nothing of the venv
  (numpy, mpi4py, pytest) is shadowed; ``system``: C headers it builds against and
  ``commands``: programs it needs on PATH, each with how to get it (a project whose
  prerequisite is missing is skipped, saying why);
* ``copy``: folders of its sdist (its tests) to copy beside the install, ``env``: its
  environment, ``sizes``: the world sizes it runs at (default: those asked for; ``"serial"``
  for suites that launch their MPI jobs themselves), ``note``: what is left out and why;
* ``runs``: jobs, each ``mode`` ``pytest`` (its pytest on every rank under the launcher),
  ``script`` (a test script on every rank; the job passes when it exits 0) or ``serial`` (one
  pytest process whose tests run ``mpirun``/``mpiexec`` themselves: on gpumpi a stand-in
  ``mpirun``/``mpiexec`` that runs ``gpumpirun --mpi4py``, on the reference MPICH's), with
  ``args`` (``{n}`` is the world size; ``args_by_n`` replaces them at some sizes) and a
  ``timeout`` in seconds.

The runner fetches each project once into a cache (``$GPUMPI_CLIENTS_CACHE``, default
``~/.cache/gpumpi/clients``): ``pip download --no-deps --no-binary NAME NAME==VER`` (only the
project itself from source: ``--no-binary :all:`` would build numpy too), ``pip install
--target <cache>/<name>-<ver>/site --no-deps`` of the sdist and ``deps`` (build dependencies
come through pip's build isolation), the ``copy`` folders, and an empty ``pytest.ini`` that
makes the folder pytest's root.  A marker file records what was installed; a changed entry
reinstalls.

Each pytest job runs as ``gpumpirun --mpi4py -n N python -m pytest -p no:cacheprovider -q
-p gpumpi_clients_record ...`` (``mpiexec -n N ...`` with ``--ref``).  The recording plugin
(``plugin/gpumpi_clients_record.py``) writes one flushed JSON line per test and rank, so a
crash or a hang still counts every finished test and names the one in flight.  A test passes
when it passed on every rank *and* its job ended cleanly: a job that hangs or fails after
its tests (at exit, in ``MPI_Finalize``) counts none of them, so such a bug cannot hide.

``expected.json`` holds per project and world size the count gpumpi must reach (``gpumpi``),
the reference count (``mpich``), and a one-line reason (fnmatch patterns on test ids, or on
``<job: args>`` for a job that broke outside any test) for every test MPICH passes and
gpumpi does not.  ``--check`` fails on any count below its
expectation, so coverage only goes up; ``--write`` records new counts (gpumpi's never lower).

Usage::

    python tests/clients/run.py --all -n 2 3 --check          # the whole corpus on gpumpi
    python tests/clients/run.py --all -n 2 3 --ref --write    # the reference counts
    python tests/clients/run.py --projects mpi-list -n 2 -v   # one project, failures listed
    python tests/clients/run.py --ci --check                  # what CI checks (test_clients.py)
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import importlib.util
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

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECTS = os.path.join(HERE, "projects.json")
EXPECTED = os.path.join(HERE, "expected.json")
PLUGIN_DIR = os.path.join(HERE, "plugin")
PLUGIN = "gpumpi_clients_record"
HEADER_DIRS = ("/usr/include", "/usr/local/include", "/opt/homebrew/include")


def cache_dir() -> str:
    return os.environ.get("GPUMPI_CLIENTS_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "gpumpi", "clients")


def load_projects(path: str = PROJECTS) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)["projects"]


def venv_bin() -> str:
    return os.path.dirname(sys.executable)


# --- prerequisites and installation ------------------------------------------------------------
class Unavailable(Exception):
    """A project cannot run here (a prerequisite is missing or pip cannot fetch it); says why."""


def missing_prerequisites(spec: dict) -> list[str]:
    """What ``spec`` needs that this machine lacks, one line each (empty: nothing)."""
    out = []
    dirs = [d for d in os.environ.get("CPATH", "").split(os.pathsep) if d] + list(HEADER_DIRS)
    for header, how in spec.get("system", {}).items():
        if not any(os.path.exists(os.path.join(d, header)) for d in dirs):
            out.append(f"no {header} ({how})")
    path = os.pathsep.join([venv_bin(), os.environ.get("PATH", "")])
    for command, how in spec.get("commands", {}).items():
        if shutil.which(command, path=path) is None:
            out.append(f"no {command} on PATH ({how})")
    return out


def _pip(args: list[str], log) -> None:
    env = dict(os.environ, PATH=os.pathsep.join([venv_bin(), os.environ.get("PATH", "")]))
    env.pop("PYTHONPATH", None)  # pip's build backends see a plain venv
    proc = subprocess.run([sys.executable, "-m", "pip", *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip() and "is ignored: it is neither" not in ln]
        raise Unavailable(f"pip {args[0]} failed (exit {proc.returncode}): " + " | ".join(lines[-4:])[:600])


def install(name: str, spec: dict, log=None) -> str:
    """The project's folder in the cache (``site/`` and its tests), fetching and installing it once."""
    version = spec["version"]
    root = os.path.join(cache_dir(), f"{name}-{version}")
    stamp = {"version": version, "deps": spec.get("deps", []), "copy": spec.get("copy", {})}
    marker = os.path.join(root, ".installed.json")
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as f:
            if json.load(f) == stamp:
                return root
    missing = missing_prerequisites(spec)
    if missing:
        raise Unavailable("; ".join(missing))
    dist = spec.get("dist", name)
    os.makedirs(cache_dir(), exist_ok=True)
    if log:
        log(f"installing {dist}=={version} into {root}")
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=f".{name}-") as tmp:
        dl = os.path.join(tmp, "dl")
        _pip(["download", "-q", "--timeout", "30", "--retries", "2", "--no-deps", "--no-binary", dist, "-d", dl, f"{dist}=={version}"], log)
        (sdist,) = [f for f in os.listdir(dl) if f.endswith((".tar.gz", ".zip", ".tar.bz2"))]
        staged = os.path.join(tmp, "project")
        os.mkdir(staged)
        _pip(["install", "-q", "--no-deps", "--target", os.path.join(staged, "site"),
              os.path.join(dl, sdist), *spec.get("deps", [])], log)
        if spec.get("copy"):
            src = os.path.join(tmp, "src")
            with tarfile.open(os.path.join(dl, sdist)) as tar:
                tar.extractall(src)  # noqa: S202  (the sdist pip just fetched and built)
            (top,) = os.listdir(src)
            for frm, to in spec["copy"].items():
                shutil.copytree(os.path.join(src, top, frm), os.path.join(staged, to))
        with open(os.path.join(staged, "pytest.ini"), "w", encoding="utf-8") as f:
            f.write("[pytest]\n")  # the project folder is pytest's root: no ini above it applies
        with open(os.path.join(staged, ".installed.json"), "w", encoding="utf-8") as f:
            json.dump(stamp, f)
        if os.path.isdir(root):
            shutil.rmtree(root)
        os.replace(staged, root)
    return root


# --- running --------------------------------------------------------------------------------
@dataclass
class Result:
    project: str
    n: object  # int, or "serial"
    passed: set = field(default_factory=set)
    outcomes: dict = field(default_factory=dict)  # test id -> (outcome, why) of the worst rank
    broke: list = field(default_factory=list)  # (test in flight or "<job: args>", why): crashes, hangs, dirty exits
    seconds: float = 0.0
    unavailable: str | None = None

    @property
    def count(self) -> int:
        return len(self.passed)

    def failures(self) -> dict:
        return {t: ow for t, ow in self.outcomes.items() if ow[0] not in ("ok", "skip", "xfail")}


_RANK_ORDER = {"ok": 0, "skip": 1, "xfail": 1, "xpass": 2, "fail": 3, "error": 4, "hang": 5, "broke": 6}


def _read(outdir: str, n: int):
    """Per rank: {id: (outcome, why)} (worst phase), the test in flight (or None), ended?"""
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
                    elif "done" in ev:
                        inflight = None
                    elif "end" in ev:
                        ended = True
                    else:
                        prev = outcomes.get(ev["id"])
                        if prev is None or _RANK_ORDER[ev["outcome"]] > _RANK_ORDER[prev[0]]:
                            outcomes[ev["id"]] = (ev["outcome"], ev.get("why", ""))
        ranks.append((outcomes, inflight, ended))
    return ranks


def gpumpi_path() -> str:
    """The folder gpumpi is imported from here: the ranks use the same one."""
    spec = importlib.util.find_spec("gpumpi")
    if spec is None or not spec.origin:
        raise SystemExit("run.py: gpumpi is not importable (pip install -e . or PYTHONPATH=<repo>)")
    return os.path.dirname(os.path.dirname(spec.origin))


def _mpiexec() -> str:
    found = shutil.which("mpiexec", path=venv_bin()) or shutil.which("mpiexec")
    if found is None:
        raise SystemExit("run.py --ref: no mpiexec (pip install mpich mpi4py: the 'test' extra)")
    return found


def _wrapper_dir(tmp: str) -> str:
    """A folder with ``mpirun``/``mpiexec`` that run ``gpumpirun --mpi4py`` (serial suites on gpumpi)."""
    d = os.path.join(tmp, "bin")
    os.makedirs(d, exist_ok=True)
    for name in ("mpirun", "mpiexec"):
        path = os.path.join(d, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(f'#!/bin/sh\n# {name} for a serial suite on gpumpi\nexec "{sys.executable}" -m gpumpi.launch --mpi4py "$@"\n')
        os.chmod(path, 0o755)
    return d


def _env(root: str, spec: dict, ref: bool, outdir: str, wrappers: str | None) -> dict:
    env = dict(os.environ)
    for var in ("GPUMPI_MPI4PY", "NUMBA_ENABLE_CUDASIM", "PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        env.pop(var, None)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if ref:  # the real mpi4py: never gpumpi's shim
        parts = [p for p in parts if not p.endswith("_shim")]
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(root, "site"), PLUGIN_DIR, gpumpi_path(), *parts])
    bins = [os.path.join(root, "site", "bin")] + ([wrappers] if wrappers else []) + [venv_bin()]
    env["PATH"] = os.pathsep.join([*bins, env.get("PATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["GPUMPI_CLIENTS_OUT"] = outdir
    env.update(spec.get("env", {}))
    return env


def _args(run: dict, n) -> list[str]:
    args = run.get("args_by_n", {}).get(str(n), run["args"])
    return [a.replace("{n}", str(n)) for a in args]


def _command(run: dict, n, ref: bool, timeout: float) -> list[str]:
    args = _args(run, n)
    if run["mode"] == "script":
        prog = [sys.executable, *args]
    else:
        prog = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-p", PLUGIN, *args]
    if run["mode"] == "serial":
        return prog
    if ref:
        return [_mpiexec(), "-n", str(n), *prog]
    return [sys.executable, "-m", "gpumpi.launch", "--mpi4py", "-n", str(n), "--timeout", str(timeout), *prog]


def _telling_line(text: str) -> list[str]:
    """The output line that best says why a job failed (an error over the launcher's last word)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("E ") or ("Error" in ln and not ln.startswith(("gpumpirun:", "="))):
            return [ln[2:].strip() if ln.startswith("E ") else ln]
    return lines[-1:]


def _one_run(res: Result, root: str, spec: dict, run: dict, ref: bool, tmp: str, k: int, log) -> None:
    n = res.n
    nranks = 1 if run["mode"] == "serial" else n
    timeout = float(run.get("timeout", 300))
    outdir = os.path.join(tmp, f"run{k}")
    os.mkdir(outdir)
    wrappers = _wrapper_dir(tmp) if run["mode"] == "serial" and not ref else None
    proc = subprocess.Popen(_command(run, n, ref, timeout), cwd=root, env=_env(root, spec, ref, outdir, wrappers),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout + 30)
        hung = proc.returncode == 124  # gpumpirun --timeout
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        hung = True
    finally:
        try:  # the job's leftovers (a serial suite's own mpirun jobs, a stuck rank)
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    text = out.decode(errors="replace")
    with open(os.path.join(tmp, f"run{k}.log"), "w", encoding="utf-8") as f:
        f.write(text)
    tail = _telling_line(text)
    label = " ".join(_args(run, n))
    if run["mode"] == "script":
        tid = label
        if proc.returncode == 0 and not hung:
            res.outcomes[tid] = ("ok", "")
            res.passed.add(tid)
        else:
            why = "hang" if hung else f"exit {proc.returncode}"
            res.outcomes[tid] = ("hang" if hung else "fail", why + (f": {tail[0][:200]}" if tail else ""))
        return
    ranks = _read(outdir, nranks)
    ids = list(dict.fromkeys(t for outcomes, _i, _e in ranks for t in outcomes))
    clean = not hung and proc.returncode == 0 and all(ended for _o, _i, ended in ranks)
    why = "hang" if hung else f"exit {proc.returncode}"
    if not clean:
        inflight = next((i for _o, i, _e in ranks if i), None)
        if inflight is None and all(ended for _o, _i, ended in ranks):
            why += " after every rank's session ended (at exit or MPI finalize)"
        res.broke.append((inflight or f"<job: {label}>", why + (f": {tail[0][:200]}" if tail else "")))
        if log:
            log(f"  {res.project} @{n}: {label}: {res.broke[-1][1]}")
        if inflight is not None:
            res.outcomes[inflight] = ("hang" if hung else "broke", why)
    for t in ids:
        per = [outcomes.get(t, ("broke", "not run on every rank")) for outcomes, _i, _e in ranks]
        worst = max(per, key=lambda ow: _RANK_ORDER[ow[0]])
        if worst[0] == "ok" and not clean:
            worst = ("broke", f"passed on every rank, but the job did not end cleanly ({why})")
        if t in res.outcomes and _RANK_ORDER[res.outcomes[t][0]] >= _RANK_ORDER[worst[0]]:
            continue
        res.outcomes[t] = worst
        if worst[0] == "ok":
            res.passed.add(t)


def run_project(name: str, spec: dict, n, *, ref: bool = False, log=None, keep: str | None = None) -> Result:
    """Run ``name``'s test jobs at world size ``n`` (``"serial"``: its suite launches its own jobs)."""
    res = Result(name, n)
    t0 = time.monotonic()
    try:
        root = install(name, spec, log)
        missing = missing_prerequisites(spec)
        if missing:
            raise Unavailable("; ".join(missing))
    except Unavailable as e:
        res.unavailable = str(e)
        return res
    with tempfile.TemporaryDirectory(prefix=f"clients-{name}-{n}-") as tmp:
        for k, run in enumerate(spec["runs"]):
            _one_run(res, root, spec, run, ref, tmp, k, log)
        if keep:
            dest = os.path.join(keep, f"{name}.{'mpich' if ref else 'gpumpi'}.{n}")
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(tmp, dest, ignore=shutil.ignore_patterns("bin"))
    res.seconds = time.monotonic() - t0
    return res


def sizes_for(spec: dict, asked: list) -> list:
    """The world sizes a project runs at among those ``asked`` (a serial suite: once, as "serial")."""
    own = spec.get("sizes")
    if own == ["serial"]:
        return ["serial"]
    return [n for n in asked if own is None or n in own]


# --- expectations -------------------------------------------------------------------------------
def load_expected(path: str = EXPECTED) -> dict:
    if not os.path.exists(path):
        return {"ci": [], "ci_sizes": [2, 3], "projects": {}}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def save_expected(data: dict, path: str = EXPECTED) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")


def reason_for(expected: dict, project: str, test_id: str) -> str | None:
    """The recorded reason a test of ``project`` may fail on gpumpi (fnmatch patterns on ids)."""
    for pattern, why in expected["projects"].get(project, {}).get("reasons", {}).items():
        if fnmatch.fnmatchcase(test_id, pattern):
            return why
    return None


def unexplained(r: Result, expected: dict) -> list[str]:
    """Failures, crashes and hangs of ``r`` that no reason in expected.json covers."""
    out = [f"{o} {t}: {why}" for t, (o, why) in sorted(r.failures().items())
           if reason_for(expected, r.project, t) is None]
    out += [f"BROKE {t}: {why}" for t, why in r.broke if reason_for(expected, r.project, t) is None]
    return out


def check(results: list[Result], expected: dict, which: str) -> list[str]:
    """Every count below its expectation, as lines (empty: all met)."""
    bad = []
    for r in results:
        want = expected["projects"].get(r.project, {}).get(which, {}).get(str(r.n))
        if r.unavailable:
            continue  # reported in the table; a skip, not a regression
        if want is not None and r.count < want:
            lost = sorted(r.failures())[:20]
            bad.append(f"{r.project} @{r.n}: {r.count} passed < {want} expected; failing: {lost}; broke: {r.broke}")
    return bad


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, nargs="+", default=[2, 3], help="world sizes (default 2 3)")
    p.add_argument("--projects", nargs="+", help="projects (names in projects.json)")
    p.add_argument("--all", action="store_true", help="every project of the corpus")
    p.add_argument("--ci", action="store_true", help="the CI subset (expected.json's ci list)")
    p.add_argument("--ref", action="store_true", help="run on the real mpi4py + MPICH (mpiexec)")
    p.add_argument("--check", action="store_true", help="exit 1 on any count below expected.json")
    p.add_argument("--write", action="store_true", help="record these counts in expected.json (gpumpi's only upward)")
    p.add_argument("--keep", metavar="DIR", help="keep each job's output and per-rank records under DIR")
    p.add_argument("-v", action="store_true", help="list every failing test")
    ns = p.parse_args(argv)
    projects = load_projects()
    expected = load_expected()
    names = list(projects) if ns.all else (ns.projects or (expected["ci"] if ns.ci else None))
    if not names:
        p.error("name --projects, or --all, or --ci")
    unknown = [m for m in names if m not in projects]
    if unknown:
        p.error(f"not in projects.json: {unknown} (known: {sorted(projects)})")
    which = "mpich" if ns.ref else "gpumpi"
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    t0 = time.monotonic()
    results = []
    for name in names:
        for n in sizes_for(projects[name], ns.n):
            r = run_project(name, projects[name], n, ref=ns.ref, log=log, keep=ns.keep)
            results.append(r)
            log(f"{name} @{n}: " + (f"SKIPPED: {r.unavailable}" if r.unavailable else
                                   f"{r.count} passed, {len(r.failures())} not ({r.seconds:.0f}s)"))
    by = collections.defaultdict(dict)
    for r in results:
        by[r.project][r.n] = r
    cols = list(dict.fromkeys(n for r in results for n in [r.n]))
    print(f"{'project':<12}{'version':<10}" + "".join(f"{'n=' + str(n):>20}" for n in cols))
    for name in names:
        cells = []
        for n in cols:
            r = by[name].get(n)
            if r is None:
                cells.append("-")
                continue
            if r.unavailable:
                cells.append("skipped")
                continue
            ref = expected["projects"].get(name, {}).get("mpich" if not ns.ref else "gpumpi", {}).get(str(n))
            cells.append(f"{r.count:>5}/{ref if ref is not None else '?':<5}{'!' if r.broke else ' '}{r.seconds:>5.0f}s")
        print(f"{name:<12}{projects[name]['version']:<10}" + "".join(f"{c:>20}" for c in cells))
        for n in cols:
            r = by[name].get(n)
            if r is not None and r.unavailable:
                print(f"    skipped: {r.unavailable}")
            if r is None or not ns.v:
                continue
            for t, (o, why) in sorted(r.failures().items()):
                known = reason_for(expected, name, t)
                print(f"    @{n} {o:<5} {t}: {why[:200]}" + (f"  [{known}]" if known else "  [NO REASON]"))
            for t, why in r.broke:
                print(f"    @{n} BROKE {t}: {why[:300]}")
    other = "gpumpi" if ns.ref else "mpich"
    print(f"({len(results)} runs in {time.monotonic() - t0:.0f}s; cells: passed/{other}, ! = a crash, hang or dirty exit)")
    if ns.write:
        for r in results:
            if r.unavailable:
                continue
            entry = expected["projects"].setdefault(r.project, {}).setdefault(which, {})
            entry[str(r.n)] = r.count if ns.ref else max(r.count, entry.get(str(r.n), 0))
        save_expected(expected)
    if ns.check:
        bad = check(results, expected, which)
        for line in bad:
            print("BELOW EXPECTATION:", line)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
