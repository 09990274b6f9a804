"""The compiled layer (gpumpi._compiled, csrc/_gpumpi_fast.pyx): its switch, and each compiled
function against its Python twin and NumPy's own account of the arrays.

The module is built by ``pip install .`` where a C compiler is there; without it these tests
skip, unless ``GPUMPI_EXPECT_COMPILED=1`` (CI) says it must have been built.
"""

import os
import pickle
import sys
import types

import numpy as np
import pytest

from gpumpi import _buffers, _compiled
from gpumpi.datatypes.flatten import sigcode
from gpumpi.testing import run_ranks


def _compiled_module():
    m = _compiled.module()
    if m is None:
        if os.environ.get("GPUMPI_EXPECT_COMPILED") == "1":
            pytest.fail("_gpumpi_fast was not built (or is stale): pip install . should have built it")
        pytest.skip("the compiled layer is not built here (no C compiler when gpumpi was installed?)")
    return m


def _specs(MPI):
    base = np.arange(24, dtype=np.int32).reshape(4, 6)
    ro = np.arange(5.0)
    ro.flags.writeable = False
    swapped = np.arange(4, dtype=">i4")
    return [
        np.zeros(1, np.uint8), np.arange(10.0), np.zeros((3, 4), order="F"), base, base[:, ::2], base[1:], base.T,
        ro, np.empty(0), swapped, np.zeros(3, dtype=[("a", "i4"), ("b", "f8")]), np.arange(6, dtype=np.complex64),
        np.array([True, False]), np.arange(7, dtype=np.int64),
        [np.arange(8, dtype=np.int32), MPI.INT], (np.arange(8, dtype=np.int32), MPI.BYTE),
        [np.arange(9, dtype=np.uint8), MPI.INT],  # 9 bytes: not a whole number of INTs
        [np.arange(4.0), MPI.DOUBLE], [base[:, ::2], MPI.INT], [ro, MPI.DOUBLE], [np.arange(4.0), MPI.SHORT_INT], [np.arange(4.0), MPI.DOUBLE.Create_contiguous(2)],
        [np.arange(4.0)], [np.arange(4.0), MPI.DOUBLE, 1], (np.arange(3),), [[1, 2], MPI.INT], b"bytes",
        bytearray(8), memoryview(bytearray(8)), 3, None, "text", [None, MPI.INT],
    ]


def _independent(spec, writable: bool, MPI):
    """What host_fast must answer, from NumPy's attributes and the datatype's signature code."""
    if isinstance(spec, np.ndarray):
        a, dt = spec, None
    elif type(spec) in (list, tuple) and len(spec) == 2 and type(spec[0]) is np.ndarray:
        a, dt = spec
    else:
        return None
    if not (a.flags.c_contiguous or a.flags.f_contiguous) or (writable and not a.flags.writeable):
        return None
    if dt is None:
        if not (a.dtype.isbuiltin == 1 and a.dtype.isnative):
            return None
        from gpumpi._arrays import lookup_dtype

        try:
            code = sigcode(lookup_dtype(a.dtype))
        except (KeyError, BufferError, ValueError, TypeError):
            return None
        return None if code is None else (a.ctypes.data, a.nbytes, code)
    if not (isinstance(dt, MPI.Datatype) and dt.is_predefined and dt.Get_size() and dt.Get_size() == dt.Get_extent()[1]
            and not dt.Get_extent()[0]) or a.nbytes % dt.Get_size():
        return None
    return a.ctypes.data, a.nbytes, sigcode(dt)


@pytest.mark.parametrize("writable", [False, True])
def test_host_fast_is_its_python_twin(writable):
    from gpumpi import MPI

    m = _compiled_module()
    assert _compiled.apply(True)
    try:
        py = _compiled.python_twin("host_fast")
        for spec in _specs(MPI):
            want = _independent(spec, writable, MPI)
            assert py(spec, writable) == want, spec
            assert m.host_fast(spec, writable) == want, spec
    finally:
        _compiled.apply(True)


def test_the_switch_installs_one_twin_everywhere():
    from gpumpi._fastpath import api

    m = _compiled_module()
    try:
        assert _compiled.apply(False) is False and not _compiled.active()
        assert _buffers.host_fast is api.host_fast is _compiled.python_twin("host_fast")
        assert _compiled.apply(True) is True and _compiled.active()
        assert _buffers.host_fast is api.host_fast is m.host_fast
    finally:
        _compiled.apply(True)


def test_a_stale_build_is_not_used(monkeypatch):
    monkeypatch.setitem(sys.modules, "_gpumpi_fast", types.SimpleNamespace(ABI=_compiled.ABI - 1))
    assert _compiled.module() is None
    try:
        assert _compiled.apply(True) is False
        assert _buffers.host_fast is _compiled.python_twin("host_fast")
    finally:
        monkeypatch.undo()
        _compiled.apply(True)


def _which():
    from gpumpi import MPI, _compiled

    c = MPI.COMM_WORLD
    a = np.arange(5.0) + c.rank
    b = np.empty(5)
    c.Sendrecv(a, (c.rank + 1) % c.size, 0, b, (c.rank - 1) % c.size, 0)
    assert np.array_equal(b, np.arange(5.0) + (c.rank - 1) % c.size)
    return _compiled.active()


@pytest.mark.parametrize("setting", ["0", "1"])
def test_gpumpi_compiled_chooses_at_initialisation(setting):
    if setting == "1":
        _compiled_module()
    assert run_ranks(_which, 2, timeout=60, env={"GPUMPI_COMPILED": setting}) == [setting == "1"] * 2


_UNSET = "<unset>"


def _slots(o, names):
    return {n: getattr(o, n, _UNSET) for n in names}


def _methods_leave_what_the_python_ones_leave():
    """Rank 1 receives by the compiled Irecv and by its Python twin, a message already there and
    one not yet sent, and rank 0 sends by both Isends: every slot of the operation and of the
    request is the same (a buffer's address aside), and Waitall (both twins) completes them."""
    import gc
    import time

    from gpumpi import MPI, _compiled
    from gpumpi import _runtime as rt
    from gpumpi._xfer import Xfer
    from gpumpi.request import Request

    c = MPI.COMM_WORLD
    r = c.rank
    eng = rt.ENGINE
    other = 1 - r
    c.Sendrecv(np.zeros(1), other, 0, np.zeros(1), other, 0)  # (GPUMPI_FASTPATH=on: the compiled path is on at once)
    assert eng.crings is not None
    m = _compiled.module()
    twins = {"compiled": True, "python": False}
    states = {}
    for name, on in twins.items():
        _compiled.apply(on)
        assert (type(c).Isend is m.Isend) is on and (type(c).Irecv is m.Irecv) is on
        c.Barrier()  # (rank 1 does nothing more before the receives: the messages stay in the ring)
        if r == 0:
            out = [np.full(3, k, "i4") for k in range(2)]
            sends = [c.Isend(b, 1, 7) for b in out]
            states[name] = []
            for q, b in zip(sends, out):
                rq = _slots(q, Request.__slots__[:-1])
                assert rq["_comm"] is c and rq["_keep"] is b and rq["_x"].done
                rq["_keep"] = rq["_comm"] = "checked"
                states[name].append(rq)
            MPI.Request.Waitall(sends)
            c.Barrier()
            c.Send(np.full(3, 9, "i4"), 1, 8)  # (after rank 1 posted its receive for it)
            c.Barrier()
            continue
        while not eng.tr.arrived():  # the two messages are in the ring before the receives
            time.sleep(0.01)
        time.sleep(0.05)
        bufs = [np.zeros(3, "i4") for _ in range(3)]
        here = [c.Irecv(b, 0, 7) for b in bufs[:2]]
        later = c.Irecv(bufs[2], 0, 8)
        reqs = here + [later]
        seen = []
        for q, b in zip(reqs, bufs):
            x = _slots(q._x, Xfer.__slots__)
            assert x["addr"] == b.ctypes.data
            x["addr"] = "the buffer's"
            if x["mem"] is b:
                x["mem"] = "the buffer"
            rq = _slots(q, Request.__slots__[:-1])
            assert rq["_comm"] is c and rq["_keep"] is b and rq["_x"] is q._x
            rq["_x"] = rq["_keep"] = rq["_comm"] = "checked"
            seen.append((x, rq))
        states[name] = seen
        c.Barrier()
        MPI.Request.Waitall(reqs)
        assert [b.tolist() for b in bufs] == [[0] * 3, [1] * 3, [9] * 3]
        assert all(q == MPI.REQUEST_NULL for q in reqs)
        c.Barrier()
    _compiled.apply(True)
    assert states["compiled"] == states["python"], (states["compiled"], states["python"])
    if r == 1:
        x, _ = states["compiled"][0]
        assert x["done"] is True and x["state"] is not _UNSET and x["st_nbytes"] == 12
        x, _ = states["compiled"][2]
        assert x["done"] is False and x["mem"] == "the buffer"
    # no reference leaks: a thousand rounds leave the buffers' reference counts and the number of
    # objects where they were
    a = np.zeros(4, "i8")
    before = (sys.getrefcount(a), sys.getrefcount(c))
    gc.collect()
    objs = len(gc.get_objects())
    for k in range(1000):
        if r == 0:
            MPI.Request.Waitall([c.Isend(a, 1, 3)])
        else:
            MPI.Request.Waitall([c.Irecv(a, 0, 3)])
    gc.collect()
    assert (sys.getrefcount(a), sys.getrefcount(c)) == before
    assert len(gc.get_objects()) - objs < 50
    return "same"


def test_compiled_methods_are_their_python_twins():
    _compiled_module()
    assert run_ranks(_methods_leave_what_the_python_ones_leave, 2, timeout=90,
                     env={"GPUMPI_FASTPATH": "on", "GPUMPI_COMPILED": "1"}) == ["same"] * 2


def test_the_object_pickle_is_its_python_twin(monkeypatch):
    """The compiled send's pickle is ``_pickle.dumps_small``'s (the same bytes, or None in the
    same cases) and the compiled recv unpickles in place exactly the messages
    ``_pickle.loads_reused`` does, whatever MPI.pickle and the process hold."""
    from gpumpi import MPI, _pickle

    m = _compiled_module()
    assert _compiled.apply(True)
    pk = MPI.pickle
    saved = (pk._dumps, pk._loads, pk._proto)
    small = {"seq": 3, "data": b"x" * 8, "a": np.arange(4.0)}
    large = {"a": np.zeros(_pickle.THRESHOLD // 8 + 1)}

    def both(obj):
        want = _pickle.dumps_small(obj)
        assert m.dumps_small(obj) == want
        return want

    monkeypatch.setattr(_pickle, "_seen_device", False)  # a process where no device array can exist
    monkeypatch.setattr(_pickle, "_sims", set())
    for name in ("cupy", "numba.cuda"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    try:
        b = both(small)
        assert b == pickle.dumps(small, pk.PROTOCOL)
        assert m.loads_plain(b)[0]["seq"] == 3 and np.array_equal(m.loads_plain(b)[0]["a"], small["a"])
        assert both(large) is None  # a large buffer: the indexed message, by the Python pickler
        bufs, total, parts = _pickle.dumps_parts(large)
        msg = b"".join(bytes(x) for x in bufs)
        assert parts is None and len(msg) == total and msg.endswith(_pickle.MAGIC)
        assert m.loads_plain(msg) is None and m.loads_plain(b"") is None  # (load_reused's, as loads_reused copies)
        for proto in (2, 4, -1):
            pk.PROTOCOL = proto
            assert both(small) == pickle.dumps(small, pickle.HIGHEST_PROTOCOL if proto < 0 else proto)
            assert both(large) is None if proto >= 5 or proto < 0 else both(large) is not None
        pk.PROTOCOL = None
        pk.__init__(lambda o, *a, **k: pickle.dumps(o, *a, **k), pickle.loads)  # a custom pickle: MPI.pickle's calls
        assert both(small) is None and m.loads_plain(b) is None
        pk.__init__()
        assert both(small) == b
        monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))  # a device array can exist now
        assert both(small) is None and _pickle._seen_device
        monkeypatch.delitem(sys.modules, "cupy")
        assert both(small) is None  # (once seen, always: an array made then may still be about)
        monkeypatch.setattr(_pickle, "_seen_device", False)
        assert both(small) == b
        monkeypatch.setattr(_pickle, "_sims", {object()})  # a simulated device made
        assert both(small) is None and _pickle._seen_device
    finally:
        pk._dumps, pk._loads, pk._proto = saved
