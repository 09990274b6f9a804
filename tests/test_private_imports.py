"""No module takes another module's private names (DESIGN section 5, the style guide).

What one module needs of another gets a public name (in ``__all__``), as mpi4py's
``util/pkl5.py`` reaches ``_comm_lock`` only through the facade.  Every
``from .x import _name`` of a gpumpi module that takes a non-module underscore name from
ANOTHER module is listed here; the list may only shrink: a new private import fails, and
so does an entry that no longer occurs (delete it).  Importing a module whose own name
starts with an underscore (``from . import _runtime``) is not a private name.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "gpumpi"

#: ``importer: owner.name`` -- each a debt to pay by giving ``name`` a public name
ALLOWED = {
    ": MPI._gpumpi_init",
}

#: issue 32 measured 109 at its start; at most a third may remain
LIMIT = 36


def _modname(path: pathlib.Path) -> list:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def private_imports(root: pathlib.Path = ROOT) -> list:
    """``importer: owner.name`` for every import of another gpumpi module's private name."""
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = _modname(path) if root == ROOT else list(path.relative_to(root).with_suffix("").parts)
        pkg = parts if path.name == "__init__.py" else parts[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                continue
            if node.level == 0:
                if not (node.module or "").startswith("gpumpi"):
                    continue
                base = (node.module or "").split(".")[1:]
            else:
                base = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else list(pkg)
                base = base + (node.module.split(".") if node.module else [])
            for a in node.names:
                if not a.name.startswith("_") or a.name.startswith("__"):
                    continue
                target = root.joinpath(*base, a.name)
                if target.with_suffix(".py").exists() or target.is_dir():
                    continue  # a module, not a private name
                out.append(f"{'.'.join(parts)}: {'.'.join(base)}.{a.name}")
    return out


def test_no_new_private_imports():
    found = private_imports()
    new = sorted(set(found) - ALLOWED)
    assert not new, "imports of another module's private names (give them public names):\n" + "\n".join(new)


def test_allowlist_only_shrinks():
    stale = sorted(ALLOWED - set(private_imports()))
    assert not stale, "paid debts still listed in ALLOWED (delete them):\n" + "\n".join(stale)
    assert len(ALLOWED) <= LIMIT


def test_the_scan_finds_a_private_import(tmp_path):
    (tmp_path / "a.py").write_text("_x = 1\n")
    (tmp_path / "_m.py").write_text("")
    (tmp_path / "b.py").write_text("from .a import _x\nfrom . import _m\nfrom .a import y\n")
    assert private_imports(tmp_path) == ["b: a._x"]
