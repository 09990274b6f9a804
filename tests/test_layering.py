"""The layering table of DESIGN section 5, enforced on the source.

Every import of a gpumpi module (module level or inside a function) must go to the
same or a lower layer; the pure core (L1) imports no third-party packages and no
I/O modules at all; nothing imports cupy or numba at module level.  Within a layer
imports still go one way only: the graph of gpumpi imports, module level and lazy
alike, has no cycle (except the ones listed in ``ALLOWED_CYCLES``).
"""

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "gpumpi"

LAYERS = {
    0: ["constants", "errors", "_config", "_version", "_handles", "_docs"],
    1: ["_matching", "_protocol", "group", "status", "info", "topology", "datatypes", "datatypes._core",
        "datatypes.predefined", "collectives", "ga._layout", "keyval", "rma.epochs", "io", "io.view"],
    2: ["_device", "_backends", "_memfd", "_arrays", "_buffers", "_membuffer", "_pickle", "_pool", "datatypes.plan",
        "datatypes.numpy_dtype", "_compiled", "io.posix", "io.twophase", "io.collective"],
    3: ["kernels"],
    4: ["ipc", "_bootstrap"],
    5: ["_progress", "_xfer", "_frames", "_failures", "_runtime", "_services", "_fastpath", "request", "_p2p", "_objects",
        "message", "_partitioned", "_commctx", "_ctxid", "_commattr", "comm", "MPI", "rma", "op", "file", "file_access", "session",
        "collectives._execute", "collectives._calls", "collectives._lower", "collectives._lean"],
    6: ["_job", "launch", "testing", "bench", "cli", "__main__", "__init__", "ga", "util", "_mpi4py", "_shim", "_shim_ga4py"],
}

#: modules L1 may not import (pure core: no clock, no environment, no processes, no arrays)
L1_FORBIDDEN = {"numpy", "cupy", "numba", "threading", "socket", "time", "os", "subprocess", "mmap", "ctypes"}
#: the one lazy exception: ``Datatype.np`` builds the NumPy dtype on first use
L1_LAZY_ALLOWED = {("datatypes._core", "numpy")}


def layer_of(mod: str) -> int:
    """Layer of a dotted module path relative to gpumpi (longest registered prefix wins)."""
    best, best_len = None, -1
    for layer, names in LAYERS.items():
        for n in names:
            if (mod == n or mod.startswith(n + ".")) and len(n) > best_len:
                best, best_len = layer, len(n)
    if best is None:
        raise AssertionError(f"module gpumpi.{mod} is not in the layering table")
    return best


def modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        yield ".".join(parts), path


def imports(mod: str, path: pathlib.Path):
    """(imported gpumpi-relative module or external top-level name, is_gpumpi, lazy, line)."""
    tree = ast.parse(path.read_text())
    pkg = mod.split(".")[:-1] if not path.name == "__init__.py" else mod.split(".")
    if mod == "__init__":
        pkg = []
    top_level = set(id(n) for n in tree.body)
    for node in ast.walk(tree):
        lazy = id(node) not in top_level
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("gpumpi."):
                    yield a.name[len("gpumpi."):], True, lazy, node.lineno
                elif a.name != "gpumpi":
                    yield a.name.split(".")[0], False, lazy, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if node.module and node.module.startswith("gpumpi"):
                    base = node.module[len("gpumpi."):] if node.module != "gpumpi" else ""
                    for a in node.names:
                        yield (f"{base}.{a.name}" if base else a.name), True, lazy, node.lineno
                elif node.module and node.module != "__future__":
                    yield node.module.split(".")[0], False, lazy, node.lineno
                continue
            base = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
            target = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{target}.{a.name}" if target else a.name
                # "from . import x" names a module; "from .mod import name" names a symbol
                yield (full if node.module is None else target), True, lazy, node.lineno


ALL = list(modules())


@pytest.mark.parametrize("mod,path", ALL, ids=[m for m, _ in ALL])
def test_imports_go_down_the_layers(mod, path):
    mine = layer_of(mod)
    for target, internal, lazy, line in imports(mod, path):
        if internal:
            assert layer_of(target) <= mine, f"gpumpi.{mod}:{line} (L{mine}) imports gpumpi.{target} (L{layer_of(target)})"
        else:
            if target in ("cupy", "numba") and not lazy:
                raise AssertionError(f"gpumpi.{mod}:{line} imports {target} at module level")
            if mine == 1 and not (lazy and (mod, target) in L1_LAZY_ALLOWED):
                assert target not in L1_FORBIDDEN, f"pure-core gpumpi.{mod}:{line} imports {target}"


def test_table_covers_every_module():
    for mod, _ in ALL:
        layer_of(mod)


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT.parent)}).stdout


def test_import_gpumpi_is_light():
    out = _fresh("import gpumpi, sys; print(sorted({'numpy','numba','cupy'} & set(sys.modules)))")
    assert out.strip() == "[]"


def test_import_mpi_loads_no_gpu_stack():
    out = _fresh("from gpumpi import MPI; import sys; print(sorted({'numba','cupy','numba.cuda'} & set(sys.modules)))")
    assert out.strip() == "[]"


# -- no import cycles --------------------------------------------------------------------------

#: strongly connected groups of modules allowed to import each other, each with why
ALLOWED_CYCLES = [
    # mpi4py's Datatype methods (Create_vector, Get_envelope, ...) live on the class in _core and
    # call the modules that build on it (lazily: those import _core at module level)
    {"datatypes._core", "datatypes.attributes", "datatypes.constructors", "datatypes.flatten",
     "datatypes.predefined"},
]


def _owner(target: str, known: set) -> str | None:
    """The module an import target names: the longest known module that is it or contains it."""
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        if name in known:
            return name
    return None


def import_graph() -> dict:
    """gpumpi module -> the gpumpi modules it imports, at module level or inside functions."""
    known = {m for m, _ in ALL}
    graph: dict = {m: set() for m in known}
    for mod, path in ALL:
        for target, internal, _, _ in imports(mod, path):
            dst = _owner(target, known) if internal else None
            if dst is not None and dst != mod:
                graph[mod].add(dst)
    return graph


def import_cycles(graph: dict) -> list:
    """The strongly connected groups of more than one module (Tarjan's depth-first search),
    each a set: the modules that reach each other through imports."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    groups: list = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def _cycle_path(graph: dict, group: set) -> str:
    """One cycle through the group, as ``a -> b -> a`` (for the failure message)."""
    start = min(group)
    prev = {start: None}
    todo = [start]
    while todo:  # breadth first from start, inside the group, until an edge leads back to it
        v = todo.pop(0)
        for w in sorted(graph[v] & group):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return " -> ".join([*reversed(path), start])
            if w not in prev:
                prev[w] = v
                todo.append(w)
    return " <-> ".join(sorted(group))


def test_cycle_finder_finds_cycles():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}}
    assert import_cycles(g) == [{"a", "b", "c"}]
    assert _cycle_path(g, {"a", "b", "c"}) == "a -> b -> c -> a"


def test_no_import_cycles():
    graph = import_graph()
    bad = [g for g in import_cycles(graph) if not any(g <= ok for ok in ALLOWED_CYCLES)]
    assert not bad, "import cycles between gpumpi modules:\n" + "\n".join(_cycle_path(graph, g) for g in bad)



# -- the API surface never reaches into the engine -----------------------------------------------

#: the API modules (validate and delegate): what they need of the running engine is a verb of
#: gpumpi._services, the compiled path is gpumpi._fastpath's
API_PACKAGES = ("comm", "rma")
#: what no API module may import, at module level or lazily
ENGINE_MODULES = {"_progress", "_runtime"}


def test_api_modules_never_import_the_engine():
    known = {m for m, _ in ALL}
    bad = []
    for mod, path in ALL:
        if not any(mod == p or mod.startswith(p + ".") for p in API_PACKAGES):
            continue
        for target, internal, _, line in imports(mod, path):
            if internal and _owner(target, known) in ENGINE_MODULES:
                bad.append(f"gpumpi.{mod}:{line} imports gpumpi.{target}")
        text = path.read_text()
        if "ENGINE" in text:
            bad.append(f"gpumpi.{mod} names ENGINE")
    assert not bad, "API modules reach into the engine:\n" + "\n".join(bad)


def test_api_check_sees_an_engine_import(tmp_path):
    """The check above is not vacuous: the API packages exist and an engine import is caught."""
    assert any(m == "comm" or m.startswith("comm.") for m, _ in ALL)
    p = tmp_path / "x.py"
    p.write_text("from .. import _runtime as _rt\n")
    assert [t for t, internal, _, _ in imports("comm.x", p) if internal] == ["_runtime"]


def test_readme_architecture_names_every_top_level_module():
    """The README's architecture table (DESIGN section 5 for this tree) names every top-level
    module and package of gpumpi, so a new one cannot land without its line."""
    text = (ROOT.parent / "README.md").read_text()
    start = text.index("### Architecture")
    section = text[start:text.index("\n### ", start + 1)]
    missing = []
    for path in sorted(ROOT.iterdir()):
        name = path.stem if path.suffix == ".py" else path.name
        if name.startswith("__") or (path.is_dir() and not (path / "__init__.py").exists()):
            continue
        if f"`{name}`" not in section and f"`{name}/" not in section and f"`{name}," not in section:
            missing.append(name)
    assert not missing, f"README architecture table lacks: {missing}"
