"""The reference of ``gpumpi bench ga --compare ga`` (L6): GA's own C library, built once from the
``globalarrays`` source package with MPICH's ``mpicc``, running a C port of the suite's program.

Theory of operation
===================
:func:`reference_document` makes the ``ga`` run of a comparison in the outer ``gpumpi`` process,
one step after another, each a subprocess with a time limit; the first step that fails ends it
with a document whose ``skipped`` says why (one line), never an exception, so a machine without
the sources, a compiler or ``mpiexec`` still gets gpumpi's table:

1. GA: ``GPUMPI_GA_PREFIX`` (an installed GA: ``include/ga.h``, ``lib/libga.*``), else the
   install in ``<cache>/ga-<version>`` (:func:`cache_dir`: ``~/.cache/gpumpi`` or
   ``GPUMPI_CACHE``), else built there: the sdist ``globalarrays-<version>.tar.gz`` found in
   ``<cache>/sdist`` or fetched by ``pip download globalarrays --no-binary globalarrays`` (which reads
   pip's own cache first), unpacked, configured with ``./configure CC=mpicc --disable-f77
   --enable-cxx=no`` where the sources have a ``configure`` script, else with CMake (the
   ``globalarrays`` 5.7 sdist carries GA's git tree: no ``configure`` without autotools), and
   installed; the log is ``<prefix>/build.log``.
2. The program: :data:`PERF_C` (the suite's ``perf.F`` with its sections, slots, fill values and
   checks, :mod:`gpumpi.bench.ga`), compiled by ``mpicc`` against that GA, once per source.
3. The run: ``mpiexec -n 4`` (next to ``sys.executable`` first, as the ``gpumpi`` command finds
   it), the plans on the command line, one result line per row on stdout, made into the suite's
   rows by the suite's own row functions.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterable

from . import ga as suite

#: The PyPI source package of GA's C library.
SDIST = "globalarrays"
#: ``configure`` arguments of the autotools build (CC and the prefix are added).
CONFIGURE_ARGS = ("--disable-f77", "--enable-cxx=no")
#: CMake arguments of the CMake build (compiler and prefix are added).
CMAKE_ARGS = ("-DENABLE_FORTRAN=OFF", "-DENABLE_CXX=OFF", "-DENABLE_BLAS=OFF", "-DCMAKE_BUILD_TYPE=Release")
#: Seconds each kind of step may take.
TIMEOUTS = {"download": 180, "configure": 900, "build": 1800, "install": 300, "compile": 120, "run": 1200}


class Skip(Exception):
    """A step of the reference failed: the message is the one-line reason."""


def cache_dir() -> str:
    """Where GA's sources and builds are kept: ``$GPUMPI_CACHE`` or ``~/.cache/gpumpi``."""
    return os.path.expanduser(os.environ.get("GPUMPI_CACHE") or os.path.join("~", ".cache", "gpumpi"))


def _tool(name: str) -> str | None:
    here = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    return shutil.which(name)


def _run(cmd: list[str], step: str, log: str | None = None, cwd: str | None = None, timeout: float | None = None,
         env: dict | None = None) -> str:  # fmt: skip
    """Run one step; its output goes to ``log`` (appended) and is returned; :class:`Skip` on failure."""
    limit = timeout or TIMEOUTS.get(step.split()[0], 600)
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=limit, env=env,
                             stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise Skip(f"{step} took more than {limit:.0f} s") from None
    except OSError as e:
        raise Skip(f"{step}: {e}") from None
    text = (out.stdout or "") + (out.stderr or "")
    if log is not None:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"$ {' '.join(cmd)}\n{text}\n")
    if out.returncode != 0:
        last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "no output")
        where = f" (log: {log})" if log else ""
        raise Skip(f"{step} failed with status {out.returncode}: {last[:200]}{where}")
    return out.stdout or ""


# ---------------------------------------------------------------- GA itself


def _installed(prefix: str) -> bool:
    lib = os.path.join(prefix, "lib")
    return os.path.isfile(os.path.join(prefix, "include", "ga.h")) and os.path.isdir(lib) and any(
        f.startswith("libga.") for f in os.listdir(lib))  # fmt: skip


def find_sdist(log: Callable[[str], None]) -> str:
    """The path of a ``globalarrays`` sdist: one in ``<cache>/sdist``, else one ``pip download`` fetches there."""
    folder = os.path.join(cache_dir(), "sdist")
    os.makedirs(folder, exist_ok=True)

    def present():
        names = sorted(f for f in os.listdir(folder) if f.startswith(f"{SDIST}-") and f.endswith((".tar.gz", ".tgz")))
        return os.path.join(folder, names[-1]) if names else None

    path = present()
    if path is None:
        log(f"# ga: pip download {SDIST} (source) into {folder}")
        cmd = [sys.executable, "-m", "pip", "download", SDIST, "--no-binary", SDIST, "--no-deps", "-d", folder,
               "--timeout", "30", "--retries", "1", "--disable-pip-version-check"]  # fmt: skip
        _run(cmd, f"pip download {SDIST}", timeout=TIMEOUTS["download"])
        path = present()
    if path is None:
        raise Skip(f"pip download {SDIST} left no .tar.gz sdist in {folder}")
    return path


def sdist_version(path: str) -> str:
    """``5.7.1b0`` of ``globalarrays-5.7.1b0.tar.gz``."""
    name = os.path.basename(path)
    return re.sub(r"\.(tar\.gz|tgz)$", "", name)[len(SDIST) + 1 :]


def _source_root(folder: str) -> str:
    """The folder of GA's sources (the one with ``global/src``) under ``folder``, at most 3 levels down."""
    for root, dirs, _files in os.walk(folder):
        if os.path.isdir(os.path.join(root, "global", "src")) and os.path.isdir(os.path.join(root, "ma")):
            return root
        if root[len(folder) :].count(os.sep) >= 2:
            dirs[:] = []
    raise Skip(f"no GA sources (global/src) in the {SDIST} sdist")


def _unpack(sdist: str, folder: str) -> str:
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    try:
        with tarfile.open(sdist) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(folder, filter="data")
            else:  # Python before 3.11.4 / 3.10.12
                tar.extractall(folder)  # noqa: S202 -- our cache, our download
    except (OSError, tarfile.TarError) as e:
        raise Skip(f"cannot unpack {sdist}: {e}") from None
    return _source_root(folder)


def build_ga(sdist: str, prefix: str, log: Callable[[str], None]) -> None:
    """Configure, build and install GA from ``sdist`` into ``prefix``: autotools where the sources have
    ``configure``, else CMake; :class:`Skip` where neither can."""
    mpicc = _tool("mpicc")
    if mpicc is None:
        raise Skip(f"no mpicc next to {sys.executable} or on PATH (pip install mpich)")
    os.makedirs(prefix, exist_ok=True)
    logfile = os.path.join(prefix, "build.log")
    src = _unpack(sdist, os.path.join(prefix, "src"))
    jobs = str(max(1, min(8, os.cpu_count() or 1)))
    log(f"# ga: building Global Arrays from {os.path.basename(sdist)} into {prefix} (once; log {logfile})")
    if os.path.isfile(os.path.join(src, "configure")):
        _run(["./configure", f"CC={mpicc}", *CONFIGURE_ARGS, f"--prefix={prefix}"], "configure", logfile, src)
        _run(["make", f"-j{jobs}"], "build (make)", logfile, src)
        _run(["make", "install"], "install (make install)", logfile, src)
        return
    cmake = shutil.which("cmake")
    if cmake is None:
        raise Skip(f"the {SDIST} sources have no configure script (autotools would make it) and cmake is not installed")
    _drop_fortran_test(src)
    build = os.path.join(prefix, "build")
    _run([cmake, "-S", src, "-B", build, f"-DCMAKE_C_COMPILER={mpicc}", f"-DCMAKE_INSTALL_PREFIX={prefix}",
          *CMAKE_ARGS], "configure (cmake)", logfile)  # fmt: skip
    _run([cmake, "--build", build, "--target", "ga", "armci", "comex", "-j", jobs], "build (cmake --build)", logfile)
    _run([cmake, "--install", build], "install (cmake --install)", logfile)


def _drop_fortran_test(src: str) -> None:
    """GA 5.7's ``ma/CMakeLists.txt`` builds a Fortran test (``testf.x``) even with Fortran off: drop it."""
    path = os.path.join(src, "ma", "CMakeLists.txt")
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    keep = [line for line in lines if "testf.x" not in line]
    if keep != lines:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(keep)


def ensure_ga(log: Callable[[str], None]) -> str:
    """The prefix of an installed GA: ``GPUMPI_GA_PREFIX``, the cached build, or a new build."""
    given = os.environ.get("GPUMPI_GA_PREFIX")
    if given:
        if not _installed(given):
            raise Skip(f"GPUMPI_GA_PREFIX={given} has no include/ga.h and lib/libga.*")
        return given
    sdist = find_sdist(log)
    prefix = os.path.join(cache_dir(), f"ga-{sdist_version(sdist)}")
    if not _installed(prefix):
        build_ga(sdist, prefix, log)
        if not _installed(prefix):
            raise Skip(f"the GA build left no include/ga.h and lib/libga.* in {prefix}")
    return prefix


# ---------------------------------------------------------------- the program


def ensure_program(prefix: str) -> str:
    """The compiled :data:`PERF_C` for the GA in ``prefix`` (compiled once per source and prefix)."""
    mpicc = _tool("mpicc")
    if mpicc is None:
        raise Skip(f"no mpicc next to {sys.executable} or on PATH (pip install mpich)")
    digest = hashlib.sha256((PERF_C + prefix + mpicc).encode()).hexdigest()[:12]
    folder = os.path.join(cache_dir(), "ga-perf")
    os.makedirs(folder, exist_ok=True)
    exe = os.path.join(folder, f"perf_ga-{digest}")
    if os.path.isfile(exe):
        return exe
    source = exe + ".c"
    with open(source, "w", encoding="utf-8") as f:
        f.write(PERF_C)
    lib = os.path.join(prefix, "lib")
    libs = [f"-l{name}" for name in ("ga", "armci", "comex")
            if any(f.startswith(f"lib{name}.") for f in os.listdir(lib))]  # fmt: skip
    _run([mpicc, "-O2", "-o", exe, source, f"-I{os.path.join(prefix, 'include')}", f"-L{lib}",
          f"-Wl,-rpath,{lib}", *libs, "-lm", "-lpthread"], "compile (mpicc)")  # fmt: skip
    return exe


def _plan_arg(p: dict) -> str:
    where = 0 if p["where"] == "local" else 1
    return ":".join(str(x) for x in (p["dim"], where, p["side"], p["chunk"], p["jump"], p["calls"], p["skip"]))


def parse_output(text: str, plans: list[dict]) -> tuple[list[dict], str]:
    """The rows and the library line of the program's output (:class:`Skip` where a row is missing)."""
    by_key = {(p["dim"], p["where"], p["chunk"]): p for p in plans}
    rows, library = [], "Global Arrays (C)"
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "library":
            library = " ".join(parts[1:])
        elif parts[0] == "section" and len(parts) == 9:
            dim, where, chunk = int(parts[1]), ("local", "remote")[int(parts[2])], int(parts[3])
            plan = by_key.get((dim, where, chunk))
            if plan is None:
                raise Skip(f"the GA program printed a section it was not asked for: {line.strip()}")
            seconds = dict(zip(suite.OPS, (float(x) for x in parts[5:8])))
            rows.append(suite.make_section_row(plan, seconds, int(parts[8])))
        elif parts[0] == "read_inc" and len(parts) == 6:
            calls, skip = int(parts[1]), int(parts[2])
            rows.append(suite.make_read_inc_row(calls, skip, float(parts[3]), float(parts[4]), int(parts[5])))
    got = len([r for r in rows if r["ga"] == "section"])
    if got != len(plans):
        raise Skip(f"the GA program printed {got} section rows for {len(plans)} sections")
    return rows, library


def run_program(exe: str, plans: list[dict], inc: tuple[int, int], timeout: float | None = None) -> tuple[list, str]:
    """Run the program on :data:`~gpumpi.bench.ga.NRANKS` processes: ``(rows, library)``."""
    mpiexec = _tool("mpiexec")
    if mpiexec is None:
        raise Skip(f"no mpiexec next to {sys.executable} or on PATH (pip install mpich)")
    cmd = [mpiexec, "-n", str(suite.NRANKS), exe, str(inc[0]), str(inc[1]), *(_plan_arg(p) for p in plans)]
    out = _run(cmd, "run (mpiexec -n 4)", timeout=timeout or TIMEOUTS["run"])
    return parse_output(out, plans)


def reference_document(sizes: Iterable[int] | None = None, *, iters: int | None = None, skip: int | None = None,
                       quick: bool = False, log: Callable[[str], None] | None = None) -> dict:  # fmt: skip
    """The ``ga`` run of ``--compare ga``: GA's C library on the suite's plans.

    Args:
        sizes, iters, skip, quick: as :func:`~gpumpi.bench.ga.run_ga` takes them.
        log: called with one line per long step (building GA); None: silent.

    Returns:
        A results document (``impl`` ``"ga"``, host buffers); where a step fails, one with no
        results and ``skipped``, the one-line reason.  Never raises.
    """
    say = log or (lambda line: None)
    try:
        plans = suite.plan_ga(sizes, iters=iters, skip=skip, quick=quick)
        inc = suite.plan_read_inc(iters=iters, skip=skip, quick=quick)
        prefix = ensure_ga(say)
        exe = ensure_program(prefix)
        rows, library = run_program(exe, plans, inc)
    except Skip as e:
        return {**suite.ga_metadata(None, "ga", quick=quick, skipped=str(e)), "results": []}
    except Exception as e:  # noqa: BLE001 -- whatever it is, the comparison is skipped, not the run
        return {**suite.ga_metadata(None, "ga", quick=quick, skipped=f"{type(e).__name__}: {e}"), "results": []}
    return {**suite.ga_metadata(None, "ga", quick=quick, library=library), "results": rows}


#: The C program: the suite's measurements on GA's C API (``NGA_Get``/``NGA_Put``/``NGA_Acc`` with
#: ``ld = chunk``, ``NGA_Read_inc``) and ``MPI_Fetch_and_op``.  Arguments: read_inc calls and
#: skip, then one ``dim:where:side:chunk:jump:calls:skip`` per measurement; prints ``library ...``,
#: ``section dim where chunk calls get_s put_s acc_s wrong`` and ``read_inc calls skip inc_s fop_s wrong``.
PERF_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ga.h"
#include "macdecls.h"

#define NR 4
#define N1 1048576
#define N2 1024
enum { GET, PUT, ACC };

typedef struct { int dim, where, side, chunk, jump, calls, skip; } plan_t;

static int me;
static int starts[NR][2];

static double fillv(long idx, int seed) { return (double)((idx * 7 + seed) % 1009); }
static double origv(long j, int seed) { return (double)((j * 3 + seed) % 13) + 0.5; }
static int bside(int dim) { return dim == 1 ? N1 / NR : N2 / 2; }
static long belems(int dim) { return dim == 1 ? (long)bside(1) : (long)bside(2) * bside(2); }

static int nstarts(const plan_t *p) {
    int n = 0;
    for (int i = 0; i <= bside(p->dim) - p->chunk - p->jump; i += p->chunk + p->jump) n++;
    return n;
}
static long npatches(const plan_t *p) { long n = nstarts(p); return p->dim == 1 ? n : n * n; }
static long nslots(const plan_t *p) {
    long n = belems(p->dim) / ((long)p->side * p->side);
    return n < 1 ? 1 : n;
}

/* section k: its bounds (inclusive, as GA's C API takes them) */
static void bounds(const plan_t *p, long k, int lo[2], int hi[2]) {
    int proc = p->where == 0 ? 0 : 1 + (int)(k % (NR - 1));
    int step = p->chunk + p->jump, ns = nstarts(p);
    int off[2] = {0, 0};
    if (p->dim == 1) off[0] = (int)k * step;
    else { off[0] = (int)(k / ns) * step; off[1] = (int)(k % ns) * step; }
    for (int d = 0; d < p->dim; d++) { lo[d] = starts[proc][d] + off[d]; hi[d] = lo[d] + p->chunk - 1; }
}
static long gindex(const plan_t *p, const int lo[2], long e) {
    if (p->dim == 1) return lo[0] + e;
    return (long)(lo[0] + e / p->chunk) * N2 + lo[1] + e % p->chunk;
}

static void calls(int g, const plan_t *p, int op, long first, long count, double *buf) {
    long np = npatches(p), ns = nslots(p), cnt = (long)p->side * p->side;
    int ld[1] = {p->chunk}, lo[2], hi[2];
    double alpha = 1.0;
    for (long c = first; c < first + count; c++) {
        long k = c % np;
        double *v = buf + (k % ns) * cnt;
        bounds(p, k, lo, hi);
        if (op == GET) NGA_Get(g, lo, hi, v, ld);
        else if (op == PUT) NGA_Put(g, lo, hi, v, ld);
        else NGA_Acc(g, lo, hi, v, ld, &alpha);
    }
}

static long hits(long k, long calls_, long np) { return k >= calls_ ? 0 : (calls_ - k + np - 1) / np; }

static long check(int g, const plan_t *p, int op, double *buf, double *tmp, int seed) {
    long np = npatches(p), ns = nslots(p), cnt = (long)p->side * p->side, wrong = 0;
    int lo[2], hi[2], ld[1] = {p->chunk};
    if (op == GET) {
        char *seen = calloc((size_t)ns, 1);
        long found = 0, nseen = 0;
        for (long c = p->calls - 1; c >= 0 && found < 3 && nseen < ns; c--) {
            long k = c % np, s = k % ns;
            if (seen[s]) continue;
            seen[s] = 1; nseen++; found++;
            bounds(p, k, lo, hi);
            for (long e = 0; e < cnt; e++) wrong += buf[s * cnt + e] != fillv(gindex(p, lo, e), seed);
        }
        free(seen);
        return wrong;
    }
    long n = p->calls < np ? p->calls : np, ks[3] = {0, n / 2, n - 1};
    for (int i = 0; i < 3; i++) {
        long k = ks[i];
        if ((i == 1 && k == ks[0]) || (i == 2 && (k == ks[1] || k == ks[0]))) continue;
        bounds(p, k, lo, hi);
        NGA_Get(g, lo, hi, tmp, ld);
        double *sent = buf + (k % ns) * cnt;
        for (long e = 0; e < cnt; e++) {
            double want = op == PUT ? sent[e] : fillv(gindex(p, lo, e), seed) + 1.0 * hits(k, p->calls, np) * sent[e];
            wrong += tmp[e] != want;
        }
    }
    return wrong;
}

static double measure(int g, const plan_t *p, int op, int seed, double *buf, double *tmp, long *wrong) {
    long count = belems(p->dim);
    double t = 0.0;
    if (me == 0) {
        if (op != GET) for (long j = 0; j < count; j++) buf[j] = origv(j, seed);
        calls(g, p, op, 0, p->skip, buf);
        if (op == GET) for (long j = 0; j < count; j++) buf[j] = -1.0;
    }
    GA_Sync();
    int lo[2], hi[2], ld[1] = {bside(p->dim)};
    for (int d = 0; d < p->dim; d++) { lo[d] = starts[me][d]; hi[d] = lo[d] + bside(p->dim) - 1; }
    for (long e = 0; e < count; e++)
        tmp[e] = fillv(p->dim == 1 ? lo[0] + e : (long)(lo[0] + e / bside(2)) * N2 + lo[1] + e % bside(2), seed);
    NGA_Put(g, lo, hi, tmp, ld);
    GA_Sync();
    if (me == 0) {
        double t0 = MPI_Wtime();
        calls(g, p, op, 0, p->calls, buf);
        t = MPI_Wtime() - t0;
    }
    GA_Sync();
    if (me == 0) *wrong += check(g, p, op, buf, tmp, seed);
    return t;
}

static int create(int dim) {
    int dims[2] = {dim == 1 ? N1 : N2, N2};
    int g = NGA_Create(C_DBL, dim, dims, "perf", NULL);
    if (!g) GA_Error("NGA_Create failed", 0);
    for (int p = 0; p < NR; p++) {
        int lo[2], hi[2];
        NGA_Distribution(g, p, lo, hi);
        for (int d = 0; d < dim; d++) {
            if (hi[d] - lo[d] + 1 != bside(dim)) GA_Error("perf: the blocks are not perf.F's", p);
            starts[p][d] = lo[d];
        }
    }
    return g;
}

static void read_inc(long n, long w) {
    int dims[1] = {NR}, lo[1], hi[1];
    long wrong = 0, total = n + w, *got = malloc(sizeof(long) * (size_t)(n > 0 ? n : 1));
    double t_inc = 0.0, t_fop = 0.0;
    int g = NGA_Create(C_LONG, 1, dims, "inc", NULL);
    NGA_Distribution(g, 1, lo, hi);
    if (me == 0) { long zero = 0; NGA_Put(g, lo, lo, &zero, NULL); }
    GA_Sync();
    if (me == 0) {
        for (long i = 0; i < w; i++) NGA_Read_inc(g, lo, 1);
        double t0 = MPI_Wtime();
        for (long i = 0; i < n; i++) got[i] = NGA_Read_inc(g, lo, 1);
        t_inc = MPI_Wtime() - t0;
        for (long i = 0; i < n; i++) wrong += got[i] != w + i;
        long last = -1;
        NGA_Get(g, lo, lo, &last, NULL);
        wrong += last != total;
    }
    GA_Sync();
    GA_Destroy(g);
    long *base, one = 1, res = 0, zero = 0;
    MPI_Win win;
    MPI_Win_allocate(8, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    MPI_Win_lock_all(0, win);
    if (me == 0) {
        MPI_Put(&zero, 1, MPI_INT64_T, 1, 0, 1, MPI_INT64_T, win);
        MPI_Win_flush(1, win);
        for (long i = 0; i < w; i++) {
            MPI_Fetch_and_op(&one, &res, MPI_INT64_T, 1, 0, MPI_SUM, win);
            MPI_Win_flush_local(1, win);
        }
        double t0 = MPI_Wtime();
        for (long i = 0; i < n; i++) {
            MPI_Fetch_and_op(&one, &res, MPI_INT64_T, 1, 0, MPI_SUM, win);
            MPI_Win_flush_local(1, win);
            got[i] = res;
        }
        t_fop = MPI_Wtime() - t0;
        for (long i = 0; i < n; i++) wrong += got[i] != w + i;
        MPI_Fetch_and_op(&one, &res, MPI_INT64_T, 1, 0, MPI_NO_OP, win);
        MPI_Win_flush(1, win);
        wrong += res != total;
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    free(got);
    if (me == 0) printf("read_inc %ld %ld %.9e %.9e %ld\n", n, w, t_inc, t_fop, wrong);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    GA_Initialize();
    MA_init(C_DBL, 1000000, 1000000);
    me = GA_Nodeid();
    if (GA_Nnodes() != NR) GA_Error("perf: needs exactly 4 processes", GA_Nnodes());
    if (me == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(lib, &len);
        char *nl = strchr(lib, '\n');
        if (nl) *nl = 0;
        printf("library Global Arrays %d.%d.%d (C) on %s\n", GA_VERSION_MAJOR, GA_VERSION_MINOR, GA_VERSION_PATCH, lib);
    }
    int nplans = argc - 3;
    plan_t *plans = calloc((size_t)(nplans > 0 ? nplans : 1), sizeof(plan_t));
    for (int i = 0; i < nplans; i++) {
        plan_t *p = &plans[i];
        if (sscanf(argv[3 + i], "%d:%d:%d:%d:%d:%d:%d", &p->dim, &p->where, &p->side, &p->chunk, &p->jump, &p->calls,
                   &p->skip) != 7) GA_Error("perf: bad plan", i);
    }
    double *buf = malloc(sizeof(double) * (size_t)belems(1)), *tmp = malloc(sizeof(double) * (size_t)belems(1));
    int index = 0;
    for (int dim = 1; dim <= 2; dim++) {
        int g = 0;
        for (int i = 0; i < nplans; i++) {
            plan_t *p = &plans[i];
            if (p->dim != dim) continue;
            if (!g) g = create(dim);
            double t[3];
            long wrong = 0;
            for (int op = GET; op <= ACC; op++) t[op] = measure(g, p, op, 1 + 3 * index + op, buf, tmp, &wrong);
            if (me == 0) printf("section %d %d %d %d %.9e %.9e %.9e %ld\n", p->dim, p->where, p->chunk, p->calls, t[0],
                                t[1], t[2], wrong);
            index++;
        }
        if (g) { GA_Sync(); GA_Destroy(g); }
    }
    long n = atol(argv[1]), w = atol(argv[2]);
    if (n > 0) read_inc(n, w);
    fflush(stdout);
    free(buf); free(tmp); free(plans);
    GA_Terminate();
    MPI_Finalize();
    return 0;
}
"""
