"""Object (lowercase) messages over real processes, at 1-4 ranks: mpi4py's wire form.

A ``send`` is a pickle stream that ``Recv`` + ``pickle.loads`` reads, and ``recv`` reads a
pickle sent as bytes by ``Send`` (an empty message is None), as between mpi4py ranks;
``recv``/``irecv`` take mpi4py's receive buffer argument; ``MPI.pickle`` decides the
serialisation; matched object receives; the lock table and private contexts of
mpi4py's pure-Python layers.
"""

import pickle
import warnings

import numpy as np
import pytest

from gpumpi.testing import WORLD_SIZES, run_ranks

OBJS = [None, 0, -7, 2**70, 1.5, 1 + 2j, "text", b"raw", [1, (2, 3)], {"k": [None, 1.0]},
        np.arange(10, dtype="i4"), np.arange(100_000.0), {"big": bytes(100_000), "f": np.ones((300, 400), order="F")}]


def same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _wire_compatible():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    dst, src = (r + 1) % n, (r - 1) % n
    # bytes pickled by hand, sent with Send: recv and irecv read them; an empty message is None
    for obj in OBJS:
        s = c.Isend([MPI.pickle.dumps(obj), "B"], dst, 1)
        assert same(c.recv(None, src, 1), obj)
        s.Wait()
        s = c.Isend([MPI.pickle.dumps(obj), MPI.BYTE], dst, 2)
        assert same(c.irecv(source=src, tag=2).wait(), obj)
        s.Wait()
    s = c.Isend([None, 0, "B"], dst, 3)
    st = MPI.Status()
    assert c.recv(None, src, 3, st) is None and st.Get_count(MPI.BYTE) == 0
    s.Wait()
    s = c.Isend([None, 0, "B"], dst, 3)
    assert c.irecv(source=src, tag=3).wait() is None
    s.Wait()
    # send(obj) received as bytes (Probe for the size, Recv) and unpickled by pickle.loads
    for obj in OBJS:
        s = c.isend(obj, dst, 4)
        st = MPI.Status()
        c.Probe(src, 4, st)
        buf = bytearray(st.Get_count(MPI.BYTE))
        c.Recv([buf, MPI.BYTE], src, 4)
        assert same(pickle.loads(buf), obj)
        s.wait()
    # and matched: Mprobe + Message.Recv of the bytes
    s = c.isend(OBJS[-1], dst, 5)
    st = MPI.Status()
    m = c.Mprobe(src, 5, st)
    buf = bytearray(st.Get_count(MPI.BYTE))
    m.Recv([buf, MPI.BYTE])
    assert same(pickle.loads(buf), OBJS[-1])
    s.wait()


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_wire_form_is_mpi4py_s(n):
    run_ranks(_wire_compatible, n, timeout=90)


def _recv_buffer_argument():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    dst, src = (r + 1) % n, (r - 1) % n
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="deprecated"):
            c.recv(bytearray(0), MPI.PROC_NULL)
        warnings.simplefilter("ignore")
        assert c.recv(bytearray(0), MPI.PROC_NULL) is None
        s = c.isend("42", dst, 0)
        assert c.recv(128, src, 0) == "42"  # an int: that many bytes
        s.wait()
        s = c.isend([42], dst, 0)
        buf = bytearray(128)
        assert c.recv(buf, src, 0) == [42]  # a buffer: received there
        assert pickle.loads(buf) == [42]
        s.wait()
        s = c.isend(list(range(100)), dst, 0)
        with pytest.raises(MPI.Exception) as e:
            c.recv(8, src, 0)
        assert e.value.Get_error_class() == MPI.ERR_TRUNCATE
        s.wait()
        with pytest.raises(BufferError):
            c.recv(b"read-only", src, 0)
        with pytest.raises(ValueError):
            c.recv(-1, src, 0)
        s = c.isend({"a": 1}, dst, 7)
        assert c.sendrecv(None, MPI.PROC_NULL, 0, 64, src, 7) == {"a": 1}
        s.wait()
    # irecv: no warning; an int or a buffer bounds the message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = c.isend("x" * 10, dst, 1)
        assert c.irecv(64, src, 1).wait() == "x" * 10
        s.wait()
        buf = bytearray(100)
        s = c.isend(b"y", dst, 1)
        assert c.irecv(buf, src, 1).wait() == b"y"
        s.wait()
        s = c.isend("z" * 1000, dst, 1)
        with pytest.raises(MPI.Exception) as e:
            c.irecv(16, src, 1).wait()
        assert e.value.Get_error_class() == MPI.ERR_TRUNCATE
        s.wait()
        big = np.arange(300_000.0)  # a message above the eager limit, into a buffer of its size and more
        s = c.isend(big, dst, 2)
        st = MPI.Status()
        c.Probe(src, 2, st)
        got = c.irecv(bytearray(st.Get_count(MPI.BYTE) + 100), src, 2).wait()
        assert np.array_equal(got, big)
        s.wait()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_recv_buffer_argument(n):
    run_ranks(_recv_buffer_argument, n, timeout=90)


def _custom_pickle():
    import json

    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    dst, src = (r + 1) % n, (r - 1) % n
    MPI.pickle.__init__(lambda o: json.dumps(o).encode(), lambda s: json.loads(s.tobytes().decode()))
    try:
        s = c.isend({"r": r}, dst, 0)
        st = MPI.Status()
        c.Probe(src, 0, st)
        buf = bytearray(st.Get_count(MPI.BYTE))
        c.Recv(buf, src, 0)
        assert json.loads(buf) == {"r": src}  # the message is the JSON text
        s.wait()
        s = c.isend([r, None], dst, 1)
        assert c.recv(None, src, 1) == [src, None]
        s.wait()
        assert c.bcast({"root": r} if r == 0 else None) == {"root": 0}
    finally:
        MPI.pickle.__init__()
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        MPI.pickle.__init__(protocol=proto)
        s = c.isend((proto, np.arange(20_000.0)), dst, 2)
        st = MPI.Status()
        c.Probe(src, 2, st)
        buf = bytearray(st.Get_count(MPI.BYTE))
        c.Recv(buf, src, 2)
        assert buf[0] == 0x80 and buf[1] == proto if proto >= 2 else True
        assert pickle.loads(buf)[0] == proto
        s.wait()
    MPI.pickle.__init__()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_messages_follow_mpi_pickle(n):
    run_ranks(_custom_pickle, n, timeout=60)


def _messages():
    from gpumpi import MPI

    noproc = MPI.MESSAGE_NO_PROC
    assert noproc and noproc.recv() is None and noproc  # the predefined handle stays NO_PROC
    assert noproc.irecv().wait() is None and noproc
    m = MPI.Message(MPI.MESSAGE_NO_PROC)
    assert m == noproc and m.recv() is None and m == MPI.MESSAGE_NULL  # a copy is consumed
    m = MPI.Message(MPI.MESSAGE_NO_PROC)
    req = m.irecv()
    assert m == MPI.MESSAGE_NULL and req != MPI.REQUEST_NULL
    req.wait()
    assert req == MPI.REQUEST_NULL
    m = MPI.MESSAGE_NO_PROC
    m.Recv([None, 0, MPI.BYTE])
    assert m == MPI.MESSAGE_NO_PROC
    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    dst, src = (r + 1) % n, (r - 1) % n
    assert MPI.Message.iprobe(c, src, 9) is None and MPI.Message.Iprobe(c, src, 9) is None
    c.Barrier()  # every rank looked before anyone sends
    s = c.isend({"from": r}, dst, 9)
    m = MPI.Message.probe(c, src, 9)
    assert type(m) is MPI.Message and m and m.recv() == {"from": src} and not m
    s.wait()
    s = c.isend([r], dst, 9)
    m = None
    while m is None:
        m = MPI.Message.iprobe(c, src, 9)
    assert m.irecv().wait() == [src]
    s.wait()
    s = c.Isend(np.full(3, r, "i"), dst, 9)
    st = MPI.Status()
    m = MPI.Message.Probe(c, src, 9, st)
    got = np.empty(3, "i")
    m.Recv(got)
    assert (got == src).all() and st.Get_source() == src
    s.Wait()
    assert type(MPI.Message.Probe(c, MPI.PROC_NULL)) is MPI.Message


@pytest.mark.parametrize("n", [1, 2, 3])
def test_matched_object_messages(n):
    run_ranks(_messages, n, timeout=60)


def _comm_locks_and_contexts():
    import threading

    from gpumpi import MPI

    c = MPI.COMM_WORLD.Dup()
    table = MPI._comm_lock_table(c)
    assert isinstance(table, dict) and "bcast" not in table
    c.bcast(None, root=0)
    assert isinstance(table["bcast"], type(threading.Lock()))
    lk = MPI._comm_lock(c, "send")
    assert lk is MPI._comm_lock(c, "send") is table["send"]
    assert MPI._comm_lock_table(MPI.Comm(c)) is table  # a copy of the handle: the same communicator
    dup, tag = MPI._commctx_intra(c)
    dup2, tag2 = MPI._commctx_intra(c)
    assert dup is dup2 and tag2 == tag + 1 and dup != c and dup.Get_size() == c.Get_size()
    assert MPI.Comm.Compare(dup, c) == MPI.CONGRUENT
    # layered point-to-point on the private duplicate does not match the user's messages
    r, n = c.rank, c.size
    s1 = c.isend("user", (r + 1) % n, tag)
    s2 = dup.isend("private", (r + 1) % n, tag)
    assert dup.recv(None, (r - 1) % n, tag) == "private"
    assert c.recv(None, (r - 1) % n, tag) == "user"
    MPI.Request.waitall([s1, s2])
    with pytest.raises(TypeError, match="intercommunicator"):  # mpi4py's typed argument
        MPI._commctx_inter(c)
    c.Free()
    assert not dup  # freed with its communicator
    c2 = MPI.COMM_WORLD.Dup()
    assert "bcast" not in MPI._comm_lock_table(c2)
    c2.Free()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_comm_locks_and_contexts(n):
    run_ranks(_comm_locks_and_contexts, n, timeout=60)

