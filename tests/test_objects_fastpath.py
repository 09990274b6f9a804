"""Object messages on the compiled small-message path (gpumpi._fastpath.api's object part), at 1-4 ranks.

``send``/``isend``/``recv``/``sendrecv`` of a small object write and read its pickle by the
compiled ring calls.  Each body checks that the compiled path really carried what it should
(the general receive path counts what it serves) and that what it must not serve -- a large
object, a buffer given to ``recv``, a message with device parts, a custom ``MPI.pickle``,
mpi4py's wire form either way, other threads -- arrives exactly as through the general path.
Expectations are the objects themselves (``==``) and NumPy's.
"""

import os
import pickle
import threading

import numpy as np
import pytest

from gpumpi.testing import WORLD_SIZES, run_ranks

ON = {"GPUMPI_FASTPATH": "on"}


def _counting(eng, ctx: int, verb: str = "irecv") -> list:
    """The tags of the receives (``verb`` "isend": the sends) on context ``ctx`` the general
    path serves from now on (the compiled path, either twin, never calls the engine's verb)."""
    used = []
    general = getattr(eng, verb)

    def counted(*a, **k):
        if a[5] == ctx:
            used.append(a[4])
        return general(*a, **k)

    setattr(eng, verb, counted)
    return used


def _ring_objects(device_aware: bool):
    from gpumpi import MPI, _pickle
    from gpumpi import _runtime as rt

    if device_aware:  # as once a device library is loaded: the device-aware pickler makes the stream
        _pickle._seen_device = True
    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    nxt, prv = (r + 1) % n, (r - 1) % n
    c.Barrier()
    eng = rt.ENGINE
    saved, saved_send = eng.irecv, eng.isend
    used = _counting(eng, c._ctx)
    sent = _counting(eng, c._ctx, "isend")
    try:
        for i in range(300):
            obj = {"i": i, "from": r, "xs": list(range(i % 13)), "s": "x" * (i % 50), "f": i / 7}
            st = MPI.Status()
            if i % 3 == 0:
                got = c.sendrecv(obj, nxt, i % 4, None, prv, i % 4, st)
            elif i % 3 == 1:
                req = c.isend(obj, nxt, i % 4)
                got = c.recv(None, MPI.ANY_SOURCE if n <= 2 else prv, MPI.ANY_TAG, st)
                req.wait()
            else:
                c.send(obj, nxt, i % 4)
                got = c.recv(None, prv, i % 4, st)
            assert got == {"i": i, "from": prv, "xs": list(range(i % 13)), "s": "x" * (i % 50), "f": i / 7}
            size = len(pickle.dumps(got, pickle.HIGHEST_PROTOCOL))
            assert (st.Get_source(), st.Get_tag(), st.Get_count(MPI.BYTE)) == (prv, i % 4, size)
    finally:
        eng.irecv, eng.isend = saved, saved_send
    assert eng.frecv is not None
    assert len(used) <= 30, f"{len(used)} of 300 object receives took the general path"
    assert len(sent) <= 30, f"{len(sent)} of 300 object sends took the general path"
    return r


@pytest.mark.parametrize("n, device_aware, compiled", [(n, d, "1") for n in WORLD_SIZES for d in (False, True)] +
                         [(2, False, "0"), (3, True, "0")])  # (the compiled layer's twins, or the Python ones)
def test_small_objects_take_the_compiled_path(n, device_aware, compiled):
    assert run_ranks(_ring_objects, n, args=(device_aware,), timeout=90,
                     env=dict(ON, GPUMPI_COMPILED=compiled)) == list(range(n))


def _declined():
    """What the compiled path leaves to the general one arrives as the general one delivers it."""
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    c = MPI.COMM_WORLD
    r = c.rank
    big = {"a": np.arange(200_000.0), "b": bytes(range(256)) * 400}  # far above the eager limit
    if r == 0:
        c.send(big, 1, 1)
        c.send({"k": 1}, 1, 2)  # received with a buffer argument
        c.send(["x"] * 3, 1, 3)  # received by Recv + pickle.loads
        c.Send([pickle.dumps((1, "two", 3.0)), MPI.BYTE], 1, 4)  # mpi4py's wire form, sent as bytes
        c.Send([b"", MPI.BYTE], 1, 5)  # an empty message is None
        c.ssend({"sync": True}, 1, 6)  # synchronous: general
        req = c.isend(list(range(1000)), 1, 7)
        req.wait()
        return "sent"
    if r != 1:
        return "idle"
    eng = rt.ENGINE
    got = c.recv(None, 0, 1)
    assert got["b"] == bytes(range(256)) * 400 and np.array_equal(got["a"], np.arange(200_000.0))
    with pytest.warns(UserWarning, match="deprecated"):
        assert c.recv(bytearray(64), 0, 2) == {"k": 1}
    st = MPI.Status()
    c.Probe(0, 3, st)
    buf = bytearray(st.Get_count(MPI.BYTE))
    c.Recv([buf, MPI.BYTE], 0, 3)
    assert pickle.loads(buf) == ["x"] * 3
    assert c.recv(None, 0, 4) == (1, "two", 3.0)
    st = MPI.Status()
    assert c.recv(None, 0, 5, st) is None and st.Get_count(MPI.BYTE) == 0
    assert c.recv(None, 0, 6) == {"sync": True}
    assert c.irecv(source=0, tag=7).wait() == list(range(1000))
    assert (eng.frecv is not None) == (os.environ["GPUMPI_FASTPATH"] == "on")  # "auto": not after so few
    return "checked"


@pytest.mark.parametrize("fast", ["on", "auto", "off"])
def test_declined_objects_keep_the_general_semantics(fast):
    assert run_ranks(_declined, 3, timeout=90, env={"GPUMPI_FASTPATH": fast}) == ["sent", "checked", "idle"]


def _bad_input():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    n = c.size
    for call in (lambda: c.send(1, n, 0), lambda: c.send(1, 0, -5), lambda: c.isend(1, n + 3, 0),
                 lambda: c.recv(None, n, 0), lambda: c.recv(None, 0, -7),
                 lambda: c.sendrecv(1, n, 0, None, 0, 0), lambda: c.sendrecv(1, 0, 0, None, n + 1, 0)):
        with pytest.raises(MPI.Exception) as ei:
            call()
        assert ei.value.Get_error_class() in (MPI.ERR_RANK, MPI.ERR_TAG), ei.value
    with pytest.raises(TypeError, match="pickle"):
        c.send(threading.Lock(), 0, 0)  # not picklable (pickle.dumps raises TypeError): nothing sent
    c.send("after", c.rank, 9)
    assert c.recv(None, c.rank, 9) == "after"  # nothing stale in the way
    return c.rank


@pytest.mark.parametrize("compiled", ["1", "0"])  # the compiled layer's twins, or the Python ones
@pytest.mark.parametrize("n", [1, 2])
def test_bad_input_gets_the_general_errors(n, compiled):
    assert run_ranks(_bad_input, n, timeout=60, env=dict(ON, GPUMPI_COMPILED=compiled)) == list(range(n))


def _device_parts():
    """A message with device parts (sim device) read from reused memory, as the compiled receive
    hands it over (``_objects.load_reused``): its parts are received after it, as the general
    path's ``load`` does.  (The compiled receive meets the parts' frames first and declines, so
    the message is built and its parts sent here, to this rank.)"""
    from gpumpi import MPI, _objects, _p2p, _pickle
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_SELF
    obj = {"d": SimDeviceArray.from_numpy(np.arange(12.0).reshape(3, 4)), "t": "x", "h": np.arange(5)}
    bufs, n, parts = _pickle.dumps_parts(obj)
    assert parts is not None
    seq, arrays = parts
    xs = [_p2p.isend(_p2p.msg(a, True, 0, "send"), c._w[0], 0, seq, c._ctx | 3, _p2p.STANDARD, "send")
          for a in arrays]
    reused = bytearray(b"".join(bytes(b) for b in bufs))
    got = _objects.load_reused(memoryview(reused), 0, "recv", c._w, c._ctx)
    reused[:] = bytes(len(reused))  # the memory is reused: nothing received may depend on it
    assert all(x.done for x in xs)
    assert type(got["d"]) is SimDeviceArray and got["t"] == "x" and np.array_equal(got["h"], np.arange(5))
    assert np.array_equal(got["d"].get(), np.arange(12.0).reshape(3, 4))
    return "checked"


def test_a_message_with_device_parts_read_from_reused_memory():
    assert run_ranks(_device_parts, 1, timeout=90, env=ON) == ["checked"]


def _threads():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    peer = 1 - r
    out = {}

    def worker(k):
        for i in range(100):
            c.send((k, i), peer, 10 + k)
            out.setdefault(k, []).append(c.recv(None, peer, 10 + k))

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(out[k] == [(k, i) for i in range(100)] for k in range(3))
    return r


def test_threads_share_object_messages():
    assert run_ranks(_threads, 2, timeout=90, env=ON) == [0, 1]


def _indexed_eager():
    """With an eager limit above pickle's out-of-band threshold, an indexed message (a large array
    inside) is eager: what it unpickles to must not view the reused receive memory."""
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    c = MPI.COMM_WORLD
    r = c.rank
    assert rt.ENGINE.eager_limit > 200_000  # (capped by the ring size)
    if r == 0:
        for k in range(3):
            c.send({"a": np.arange(20_000.0) + k}, 1, 1)
        c.send("small", 1, 2)
        return "sent"
    got = [c.recv(None, 0, 1) for _ in range(3)]
    assert c.recv(None, 0, 2) == "small"
    for k in range(3):
        assert np.array_equal(got[k]["a"], np.arange(20_000.0) + k) and got[k]["a"].flags.writeable
    return "checked"


def test_indexed_eager_messages_do_not_view_the_reused_memory():
    env = dict(ON, GPUMPI_EAGER_LIMIT=str(1 << 20))
    assert run_ranks(_indexed_eager, 2, timeout=90, env=env) == ["sent", "checked"]


def _lowercase_collectives():
    """The lowercase collectives' blocking messages take the compiled path too (on the collective
    context); their results are the objects, as every rank computes them itself."""
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    c.Barrier()
    eng = rt.ENGINE
    saved, fast = eng.irecv, eng.recv_fast
    used = _counting(eng, c._ctx + 1)
    took = []

    def counted_fast(source, wpeer, tag, ctx, *a):
        o = fast(source, wpeer, tag, ctx, *a)
        if o is not None and ctx == c._ctx + 1:
            took.append(tag)
        return o

    eng.recv_fast = counted_fast
    try:
        for i in range(200):
            root = i % n
            got = c.bcast({"i": i, "root": root, "xs": [root] * (i % 7)} if r == root else None, root)
            assert got == {"i": i, "root": root, "xs": [root] * (i % 7)}
            assert c.gather((r, i), root) == ([(p, i) for p in range(n)] if r == root else None)
            assert c.reduce(r + i, MPI.SUM, root) == (sum(range(n)) + n * i if r == root else None)
    finally:
        eng.irecv, eng.recv_fast = saved, fast
    return len(used), len(took)


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_lowercase_collectives_take_the_compiled_path(n):
    counts = run_ranks(_lowercase_collectives, n, timeout=90, env=ON)
    took = [t for _general, t in counts]
    if n > 1:  # every rank received by the compiled path, most of the blocking receives in all
        assert min(took) > 0 and sum(took) >= 100 * (n - 1), counts
