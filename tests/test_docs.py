"""Docstrings of gpumpi.MPI by mpi4py's rules (its test_doc), and their signature-first form (gpumpi._docs)."""

from __future__ import annotations

import textwrap
import types

import pytest

from gpumpi import MPI
from gpumpi._docs import embed_signatures

_CALLABLES = (types.FunctionType, types.MethodType, property)


def _walk(obj, out: dict, namespace: str | None, seen: set, reached: list) -> None:
    """mpi4py's test_doc ``getdocstr``, with a visited set (its own has none: see the xfail below)."""
    name = getattr(obj, "__name__", None)
    if name is None or name in ("__builtin__", "builtins"):
        return
    if namespace:
        name = f"{namespace}.{name}"
    if type(obj) in (types.ModuleType, type):
        if obj in seen or (isinstance(obj, types.ModuleType) and obj is not MPI):
            reached.append(name)  # where mpi4py's walk never ends
            return
        seen.add(obj)
        out[name] = obj.__doc__
        for value in vars(obj).values():
            if isinstance(value, (classmethod, staticmethod)):
                value = value.__get__(obj)
            _walk(value, out, name, seen, reached)
    elif type(obj) in _CALLABLES:
        doc = obj.__doc__
        if doc is not None:
            _, nl, doc = doc.partition("\n")
            if nl and doc.startswith("\n"):
                doc = textwrap.dedent(doc[1:])
        out[name] = doc


def _problems(docs: dict) -> list[str]:
    bad = []
    for k, doc in docs.items():
        name = k.split(".")[-1]
        if name in ("py2f", "f2py") or (not doc and name.startswith("_")):
            continue
        if not doc or not doc.strip():
            bad.append(f"{k}: missing or empty")
            continue
        if doc.startswith("\n") != doc.endswith(" "):
            bad.append(f"{k}: mismatch start and end whitespace")
        if doc.replace(" ", "").endswith("\n\n"):
            bad.append(f"{k}: too many newlines at the end")
        text = doc.strip()
        if text[0] == text[0].lower():
            bad.append(f"{k}: starts with lowercase")
        if not text.endswith(".") or not text.partition("\n")[0].endswith("."):
            bad.append(f"{k}: summary or text does not end with '.'")
    return bad


def test_every_public_docstring_follows_mpi4py_rules():
    docs: dict = {}
    _walk(MPI, docs, None, set(), [])
    assert len(docs) > 500
    assert _problems(docs) == []


@pytest.mark.xfail(strict=True, reason="gpumpi.MPI holds module objects (_os, _rt, sys through errors' star "
                                       "export...) and classes name themselves in _hbase: mpi4py's test_doc "
                                       "walks them without end (RecursionError)")
def test_mpi4py_test_doc_walk_terminates():
    docs: dict = {}
    reached: list = []
    _walk(MPI, docs, None, set(), reached)
    assert reached == []


def test_signatures_come_first_as_in_mpi4py():
    # methods a class gathers from bases of its own (gpumpi.comm's faces), decorated ones included
    assert MPI.Comm.Send.__doc__.startswith("Send(self, buf, dest: int, tag: int = 0, *, stream=None) -> None\n\n")
    assert MPI.Comm.Irecv.__doc__.startswith("Irecv(self, buf, source: int = -2, tag: int = -1, *, stream=None)")
    assert MPI.Comm.Barrier.__doc__ == "Barrier(self) -> None\n\nBarrier synchronization (MPI_Barrier)."
    assert MPI.Comm.bcast.__doc__.startswith("bcast(self, obj=None, root: int = 0)\n\n")
    assert MPI.Datatype.Get_size.__doc__.startswith("Get_size(self) -> int\n\nReturn the number of bytes")
    assert MPI.Comm.rank.__doc__ == "rank: int\n\nRank of this process (MPI_Comm_rank)."
    assert MPI.Datatype.Create_struct.__doc__.startswith("Create_struct(cls, blocklengths, displacements, datatypes)")
    assert "MPI_Type_create_struct" in MPI.Datatype.Create_struct.__doc__


def test_embedding_is_idempotent_and_joins_the_summary():
    def f(x: int) -> int:
        """Do a thing that needs a summary
        on two lines (MPI_Thing).

        More text.
        """
        return x

    class C:
        def m(self):
            """One line."""

        alias = m

        @property
        def p(self) -> int:
            """A property."""
            return 1

    f.__module__ = C.__module__ = "gpumpi.fake"
    C.m.__module__ = "gpumpi.fake"
    ns = {"f": f, "C": C}
    embed_signatures(ns)
    first = (f.__doc__, C.m.__doc__, C.p.__doc__)
    embed_signatures(ns)
    assert (f.__doc__, C.m.__doc__, C.p.__doc__) == first
    assert f.__doc__ == "f(x: int) -> int\n\nDo a thing that needs a summary on two lines (MPI_Thing).\n\nMore text."
    assert C.m.__doc__ == "m(self)\n\nOne line." and C.alias is C.m
    assert C.p.__doc__ == "p: int\n\nA property."
