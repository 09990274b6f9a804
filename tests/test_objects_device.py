"""Lowercase (object) API with device arrays inside the objects, on the simulated device.

Device arrays in a pickled object travel as messages of their own on the communicator's
parts context (ctx + 3), through the buffer path: device to device by IPC when large.
Every test checks what arrives with ``.get()`` against NumPy expectations the receiver
computes itself from the sender's rank; the received arrays must be device arrays of the
sender's type.
"""

import threading

import numpy as np
import pytest

from gpumpi.testing import WORLD_SIZES, one_node_only, run_ranks

TRANSPORTS = {"cuda_ipc": {}, "staging": {"GPUMPI_TRANSPORTS": "device:staging"}}
BIG = 100_000  # float64: 800 KB, far above the eager limit: a rendezvous, device to device


def big_values(seed):
    return np.arange(BIG, dtype=np.float64) * 0.5 + seed * 1e6


def grid(seed):
    return (np.arange(48, dtype=np.int32) + 1000 * seed).reshape(6, 8)


def make(seed):
    """The object a rank sends: device arrays of several dtypes and shapes, an empty one, a large
    one, a non-contiguous slice, the same array twice, NumPy arrays and scalars."""
    from gpumpi.testing import SimDeviceArray

    small = SimDeviceArray.from_numpy(np.array([seed, seed + 0.25, -1.5], dtype=np.float32))
    return {
        "small": small,
        "again": small,
        "grid": SimDeviceArray.from_numpy(grid(seed)),
        "empty": SimDeviceArray.empty((0, 4), np.int16),
        "big": SimDeviceArray.from_numpy(big_values(seed)),
        "slice": SimDeviceArray.from_numpy(grid(seed))[1:5, ::3],
        "flip": SimDeviceArray.from_numpy(grid(seed))[::-1, 1::2],  # negative strides
        "list": [SimDeviceArray.from_numpy(np.full(7, seed, dtype=np.complex128)), 3, "x"],
        "host": np.arange(5000, dtype=np.int64) + seed,
        "scalar": seed,
        "text": f"from {seed}",
    }


def check(got, seed):
    """``got`` is ``make(seed)`` as received."""
    from gpumpi.testing import SimDeviceArray

    dev = {"small": np.array([seed, seed + 0.25, -1.5], dtype=np.float32), "grid": grid(seed),
           "empty": np.empty((0, 4), np.int16), "big": big_values(seed), "slice": grid(seed)[1:5, ::3],
           "flip": grid(seed)[::-1, 1::2]}
    for key, want in dev.items():
        a = got[key]
        assert type(a) is SimDeviceArray, (key, type(a))
        assert a.shape == want.shape and a.dtype == want.dtype, (key, a.shape, a.dtype)
        assert np.array_equal(a.get(), want), key
    assert got["again"] is got["small"]  # one part, and the object graph kept its sharing
    for key in ("slice", "flip"):
        assert got[key].__cuda_array_interface__["strides"] is None  # received contiguous
    head = got["list"][0]
    assert type(head) is SimDeviceArray and np.array_equal(head.get(), np.full(7, seed, dtype=np.complex128))
    assert got["list"][1:] == [3, "x"]
    assert type(got["host"]) is np.ndarray and np.array_equal(got["host"], np.arange(5000, dtype=np.int64) + seed)
    assert got["scalar"] == seed and got["text"] == f"from {seed}"


def _p2p_calls():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    nxt, prv = (c.rank + 1) % c.size, (c.rank - 1) % c.size
    obj = make(c.rank)
    st = MPI.Status()

    # isend / recv
    req = c.isend(obj, nxt, 1)
    check(c.recv(None, prv, 1, st), prv)
    assert st.Get_source() == prv and st.Get_tag() == 1
    req.wait()
    # irecv posted first / blocking send (also to self: the receive takes the parts meanwhile)
    r = c.irecv(None, prv, 2)
    c.send(obj, nxt, 2)
    check(r.wait(), prv)
    # ssend and issend
    r = c.irecv(None, prv, 3)
    c.ssend(obj, nxt, 3)
    check(r.wait(), prv)
    req = c.issend(obj, nxt, 4)
    check(c.recv(None, prv, 4), prv)
    req.wait()
    # sendrecv, both sides' parts in flight at once
    check(c.sendrecv(obj, nxt, 5, None, prv, 5), prv)
    # matched probe: the object message is matched, its parts follow on the parts context
    req = c.isend(obj, nxt, 6)
    m = c.mprobe(prv, 6, st)
    assert st.Get_source() == prv
    check(m.recv(), prv)
    req.wait()
    req = c.isend(obj, nxt, 7)
    m = None
    while m is None:
        m = c.improbe(prv, 7)
    check(m.irecv().wait(), prv)
    req.wait()
    # Waitall over a send and a receive: parts are posted when the object arrives
    reqs = [c.isend(obj, nxt, 8), c.irecv(None, prv, 8)]
    _, got = MPI.Request.waitall(reqs)
    check(got, prv)
    # buffered: the device data goes through the attached buffer, rebuilt as device arrays
    MPI.Attach_buffer(bytearray(2 * (BIG * 8 + 64 * 1024) + MPI.BSEND_OVERHEAD))
    try:
        c.bsend(obj, nxt, 9)
        check(c.recv(None, prv, 9), prv)
        c.ibsend(obj, nxt, 10).wait()
        check(c.recv(None, prv, 10), prv)
    finally:
        MPI.Detach_buffer()
    # the device bytes count against the attached buffer: too small fails whole, nothing leaves
    MPI.Attach_buffer(bytearray(64 * 1024 + MPI.BSEND_OVERHEAD))
    try:
        with pytest.raises(MPI.Exception) as info:
            c.bsend(obj, nxt, 11)
        assert info.value.Get_error_class() == MPI.ERR_BUFFER
    finally:
        MPI.Detach_buffer()
    assert not c.iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
    return c.rank


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_every_lowercase_call_moves_device_arrays(n):
    assert run_ranks(_p2p_calls, n, timeout=90) == list(range(n))


def _staged_and_overwritten():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    nxt, prv = (c.rank + 1) % c.size, (c.rank - 1) % c.size
    obj = make(c.rank)
    r = c.irecv(None, prv, 1)
    c.send(obj, nxt, 1)
    # the send has completed: the sender may reuse its device memory at once
    obj["big"].set(np.zeros(BIG))
    obj["grid"].set(np.zeros((6, 8), np.int32))
    check(r.wait(), prv)


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_send_completion_releases_the_arrays(transport):
    run_ranks(_staged_and_overwritten, 2, env=TRANSPORTS[transport], timeout=60)


def _any_source():
    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    per = 3
    if c.rank == 0:
        got = []
        st = MPI.Status()
        for _ in range(per * (c.size - 1)):
            o = c.recv(None, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
            assert st.Get_source() == o["rank"] and st.Get_tag() == o["k"]
            assert np.array_equal(o["big"].get(), big_values(10 * o["rank"] + o["k"]))
            assert np.array_equal(o["tiny"].get(), np.array([o["rank"], o["k"]], np.int64))
            got.append((o["rank"], o["k"]))
        assert sorted(got) == [(r, k) for r in range(1, c.size) for k in range(per)]
        # each sender's objects arrive in its order (non-overtaking)
        for r in range(1, c.size):
            assert [k for s, k in got if s == r] == list(range(per))
        return
    objs = [{"rank": c.rank, "k": k, "tiny": SimDeviceArray.from_numpy(np.array([c.rank, k], np.int64)),
             "big": SimDeviceArray.from_numpy(big_values(10 * c.rank + k))} for k in range(per)]
    MPI.Request.waitall([c.isend(o, 0, o["k"]) for o in objs])


@pytest.mark.parametrize("n", [2, 3, 4])
def test_any_source_with_several_senders(n):
    run_ranks(_any_source, n, timeout=60)


def _threads():
    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    nthreads = 3
    errors = []

    def sender(t):
        try:
            o = {"t": t, "rank": c.rank, "big": SimDeviceArray.from_numpy(big_values(10 * c.rank + t))}
            for peer in range(c.size):
                if peer != c.rank:
                    c.send(o, peer, t)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def receiver(t):
        try:
            for _ in range(c.size - 1):
                o = c.recv(None, MPI.ANY_SOURCE, MPI.ANY_TAG)
                assert np.array_equal(o["big"].get(), big_values(10 * o["rank"] + o["t"]))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=f, args=(t,)) for t in range(nthreads) for f in (sender, receiver)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


def test_threads_sending_and_receiving_at_once():
    run_ranks(_threads, 3, timeout=60)


def _out_of_band():
    from gpumpi import MPI
    from gpumpi import _protocol as P
    from gpumpi import _runtime as rt
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    if c.rank == 0:
        req = c.isend({"big": SimDeviceArray.from_numpy(big_values(0)), "k": 1}, 1, 3)
        c.Barrier()
        assert not req.Test()  # the part is still waiting for its receiver: the request is too
        c.Barrier()
        req.wait()
        return
    st = MPI.Status()
    c.Probe(0, 3, st)
    assert st.Get_count(MPI.BYTE) < 2048  # the object message is small: 800 KB travel beside it
    eng = rt.ENGINE
    # the part arrived before the object message, on the parts context, from its device memory
    part = eng.matcher.probe(c._ctx + 3, 0, MPI.ANY_TAG)
    assert part is not None and part.nbytes == BIG * 8 and part.flags & P.FLAG_OFFER
    assert part.segs[0] == eng.region("device", "cuda_ipc").ident  # offered through an IPC handle
    assert eng.matcher.probe(c._ctx, 0, MPI.ANY_TAG).nbytes < 2048
    c.Barrier()
    c.Barrier()
    opened = len(eng.region("device", "cuda_ipc").mem)
    o = c.recv(None, 0, 3)
    assert len(eng.region("device", "cuda_ipc").mem) == opened + 1  # copied device to device from the sender's allocation
    assert np.array_equal(o["big"].get(), big_values(0)) and o["k"] == 1
    assert eng.matcher.probe(c._ctx + 3, MPI.ANY_SOURCE, MPI.ANY_TAG) is None


def test_device_parts_travel_out_of_band():
    one_node_only(2, "CUDA IPC")
    run_ranks(_out_of_band, 2, timeout=60)


def _bcast():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    for root in range(c.size):
        obj = make(root) if c.rank == root else None
        got = c.bcast(obj, root)
        assert got is not obj  # as mpi4py: every rank, the root too, gets the object back through pickle
        check(got, root)


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_bcast_of_device_arrays(n):
    run_ranks(_bcast, n, timeout=60)


def _host_objects_unchanged():
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    c = MPI.COMM_WORLD
    nxt, prv = (c.rank + 1) % c.size, (c.rank - 1) % c.size
    obj = {"a": [1, 2.5, "x"], "arr": np.arange(10_000) + c.rank}
    req = c.isend(obj, nxt, 1)
    got = c.recv(None, prv, 1)
    req.wait()
    assert got["a"] == [1, 2.5, "x"] and np.array_equal(got["arr"], np.arange(10_000) + prv)
    # nothing was sent on the parts context
    assert rt.ENGINE.matcher.probe(c._ctx + 3, MPI.ANY_SOURCE, MPI.ANY_TAG) is None


def test_host_objects_send_no_parts():
    run_ranks(_host_objects_unchanged, 2, timeout=60)


def _cupy_objects():
    import cupy

    from gpumpi import MPI

    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"no CUDA device ({e})")

    c = MPI.COMM_WORLD
    nxt, prv = (c.rank + 1) % c.size, (c.rank - 1) % c.size
    base = cupy.arange(BIG, dtype=cupy.float64) + c.rank
    obj = {"big": base, "small": cupy.arange(3, dtype=cupy.int32) + c.rank, "slice": base[::7],
           "f": cupy.asfortranarray(cupy.arange(12.0).reshape(3, 4) + c.rank)}
    req = c.isend(obj, nxt, 1)
    got = c.recv(None, prv, 1)
    req.wait()
    want = np.arange(BIG, dtype=np.float64) + prv
    assert type(got["big"]) is cupy.ndarray and np.array_equal(got["big"].get(), want)
    assert np.array_equal(got["small"].get(), np.arange(3, dtype=np.int32) + prv)
    assert np.array_equal(got["slice"].get(), want[::7])
    assert np.array_equal(got["f"].get(), np.arange(12.0).reshape(3, 4) + prv)
    again = c.bcast(obj if c.rank == 0 else None, 0)
    assert type(again["big"]) is cupy.ndarray
    assert np.array_equal(again["big"].get(), np.arange(BIG, dtype=np.float64))


@pytest.mark.gpu
def test_cupy_arrays_in_objects():
    pytest.importorskip("cupy")  # CUDA itself is initialised in the ranks only (forked)
    run_ranks(_cupy_objects, 2, timeout=120)


def _test_does_not_wait_for_parts():
    import time

    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    big = 1 << 20  # float64: 8 MiB, far more than the ring holds: the sender must push it
    if c.rank == 1:
        req = c.isend({"big": SimDeviceArray.from_numpy(np.arange(big, dtype=np.float64))}, 0, 1)
        c.Send(np.ones(1), 0, 2)  # after the object message in the same ring
        time.sleep(1.0)  # no progress here: the staged part cannot be pushed meanwhile
        req.wait()
        return None
    r = c.irecv(None, 1, 1)
    c.Recv(np.empty(1), 1, 2)  # so the object message has arrived and its part is posted
    flag, obj = r.test()
    # MPI_Test is local: it must not wait for the part, which the sleeping sender still holds
    assert (flag, obj) == (False, None)
    got = r.wait()["big"]
    assert type(got) is SimDeviceArray and np.array_equal(got.get(), np.arange(big, dtype=np.float64))
    return flag


def test_object_test_does_not_wait_for_device_parts():
    assert run_ranks(_test_does_not_wait_for_parts, 2, env=TRANSPORTS["staging"], timeout=60)[0] is False


def _cancel_object_send_with_parts():
    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    if c.rank == 1:
        # ssend: the object message waits for a match, so it can be cancelled; its part too
        obj = {"big": SimDeviceArray.from_numpy(big_values(1)), "k": 1}
        req = c.issend(obj, 0, 1)
        req.cancel()
        st = MPI.Status()
        req.wait(st)
        assert st.Is_cancelled()
        c.Send(np.ones(1), 0, 2)
        c.send({"big": SimDeviceArray.from_numpy(big_values(2)), "k": 2}, 0, 1)
        return True
    c.Recv(np.empty(1), 1, 2)
    got = c.recv(None, 1, 1)  # the cancelled object never arrives; the next one does
    assert got["k"] == 2 and np.array_equal(got["big"].get(), big_values(2))
    assert not c.iprobe(1, MPI.ANY_TAG)
    return True


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_cancel_object_send_with_device_parts(transport):
    assert run_ranks(_cancel_object_send_with_parts, 2, env=TRANSPORTS[transport], timeout=60) == [True, True]


def _cancel_object_irecv():
    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    if c.rank == 0:
        r = c.irecv(None, 1, 7)
        r.cancel()
        st = MPI.Status()
        assert r.wait(st) is None and st.Is_cancelled()
    c.Barrier()
    if c.rank == 1:
        c.send({"big": SimDeviceArray.from_numpy(big_values(3))}, 0, 7)
    else:
        assert np.array_equal(c.recv(None, 1, 7)["big"].get(), big_values(3))
    return True


def test_cancel_object_irecv():
    assert run_ranks(_cancel_object_irecv, 2, timeout=60) == [True, True]
