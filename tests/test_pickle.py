"""Tests for gpumpi._pickle (object messages: pickle streams, indexed for zero-copy receipt).

Expectations from the module docstring: a message is a pickle stream that plain
``pickle.loads`` reads (mpi4py's wire form), plus a trailer indexing its large payloads;
those payloads are the objects' own memory (not copies) and start at multiples of 64
bytes in the message; ``loads`` rebuilds arrays as views of the received allocation.  Device arrays (here the simulated ``SimDeviceArray``) become
placeholders and parts (``dumps_parts``) or host copies rebuilt on the device (``dumps``).
"""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumpi import _pickle
from gpumpi._pickle import (MAGIC, THRESHOLD, Pending, Pickle, alloc, dumps, dumps_parts, loads, part_nbytes,
                            parts_of)


def concat(parts) -> bytearray:
    out = bytearray()
    for p in parts:
        out += memoryview(p).cast("B")
    return out


def concat_aligned(parts, total, align=64) -> memoryview:
    """The message in a buffer whose start is ``align``-byte aligned (as a receiver's
    allocation would be)."""
    raw = np.empty(total + align, np.uint8)
    start = -raw.ctypes.data % align
    buf = raw[start : start + total]
    off = 0
    for p in parts:
        b = np.frombuffer(memoryview(p).cast("B"), np.uint8)
        buf[off : off + b.size] = b
        off += b.size
    assert off == total
    return memoryview(buf)


def addr(part) -> int:
    return np.frombuffer(memoryview(part).cast("B"), np.uint8).ctypes.data


def equal(a, b):
    """Structural equality that understands numpy arrays (dtype, shape, order, values)."""
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


DTYPES = [np.uint8, np.int16, np.int32, np.int64, np.float32, np.float64, np.complex64, np.complex128, np.bool_]


def make(dtype, n, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, n).astype(bool)
    if np.dtype(dtype).kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


# --- wire form: a pickle stream, indexed ---------------------------------------------------


def trailer(msg):
    """(stream length, seq, table length, [(header, data, length, readonly)], flags), walking
    the documented layout independently of the module."""
    msg = bytes(msg)
    assert msg.endswith(MAGIC)
    slen, seq, tlen, k, flags, magic = struct.unpack_from("<QQQII8s", msg, len(msg) - 40)
    assert magic == MAGIC and slen + tlen + 24 * k + 40 == len(msg)
    entries = []
    for i in range(k):
        hdr, data, n = struct.unpack_from("<QQQ", msg, slen + tlen + 24 * i)
        entries.append((hdr, data, n & ~(1 << 63), bool(n >> 63)))
    return slen, seq, tlen, entries, flags


def test_small_object_is_the_plain_pickle():
    obj = {"a": 1, "b": [1, 2, 3], "c": "text"}
    parts, total = dumps(obj)
    assert len(parts) == 1
    assert bytes(parts[0]) == pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)  # what mpi4py sends
    assert total == len(parts[0])
    assert loads(concat(parts)) == obj


@pytest.mark.parametrize("proto", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_pickles_of_every_protocol_are_messages(proto):
    obj = [None, 1.5, "x" * 100, (1, 2), {"k": b"v" * 70000}, np.arange(10_000.0)]
    got = loads(bytearray(pickle.dumps(obj, proto)))
    assert equal(got[:5], obj[:5]) and np.array_equal(got[5], obj[5])


def test_empty_message_is_none():
    assert loads(b"") is None
    assert loads(bytearray()) is None
    assert loads(memoryview(b"")) is None


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_large_arrays_are_segments_of_their_own_memory(dtype):
    a = make(dtype, (1 << 20) // np.dtype(dtype).itemsize + 3)  # >= 1 MiB
    b = make(dtype, 5000, seed=1)
    obj = {"meta": ("x", 3.5, None), "a": a, "nested": [b, {"again": a[:10]}]}
    parts, total = dumps(obj)
    assert len(parts) > 2
    assert total == sum(memoryview(p).nbytes for p in parts)
    # the large segments are the arrays' own memory, not copies
    addrs = {addr(p) for p in parts}
    assert a.ctypes.data in addrs
    assert (b.ctypes.data in addrs) == (b.nbytes >= THRESHOLD)
    # a is in the message once, and the index names it
    assert total < a.nbytes + b.nbytes + 64 * 4 + 4096
    slen, _seq, tlen, entries, flags = trailer(concat(parts))
    assert flags == 0 and tlen == 0 and a.nbytes in [e[2] for e in entries]
    msg = concat(parts)
    # a receiver without gpumpi (mpi4py: pickle.loads) reads it; so does the pure-Python
    # unpickler, which checks the frames
    for back in (loads(msg), pickle.loads(msg), pickle._loads(bytes(msg))):
        assert equal(back, obj)


def test_payloads_start_at_multiples_of_64():
    arrs = [make(np.float64, n, seed=n) for n in (10000, 8777, 40961, 8193)]  # all >= 64 KiB
    obj = ["odd length prefix" * 3, *arrs]
    parts, total = dumps(obj)
    msg = concat(parts)
    slen, _, _, entries, _ = trailer(msg)
    assert len(entries) == len(arrs)
    for (hdr, data, n, ro), a in zip(entries, arrs):
        assert data % 64 == 0 and n == a.nbytes and not ro
        assert msg[hdr] == pickle.BYTEARRAY8[0] and int.from_bytes(msg[hdr + 1 : data], "little") == n
        assert bytes(msg[data : data + n]) == a.tobytes()
    assert slen <= total


def test_loaded_arrays_are_aligned_views_of_the_message():
    arrs = [make(dt, 3000, seed=i) for i, dt in enumerate(DTYPES)] + [make(np.float64, 10000)]
    parts, total = dumps(arrs)
    msg = concat_aligned(parts, total)
    base = np.frombuffer(msg, np.uint8).ctypes.data
    back = loads(msg)
    for a, r in zip(arrs, back):
        assert equal(a, r)
        assert r.flags.aligned
        if a.nbytes >= THRESHOLD:
            # a view into the received allocation (one copy end to end) ...
            assert base <= r.ctypes.data < base + total
            # ... starting at a 64-byte boundary
            assert (r.ctypes.data - base) % 64 == 0
            assert r.ctypes.data % 64 == 0


def test_loaded_from_bytearray_aligned_and_writable():
    a = make(np.complex128, 100000)
    parts, _ = dumps({"a": a})
    back = loads(concat(parts))["a"]
    assert back.flags.aligned
    assert equal(back, a)
    back[0] = 0  # a view of a bytearray: writable like a normal received array
    assert back[0] == 0


def test_read_only_arrays_stay_read_only():
    a = make(np.int64, 20000)
    a.flags.writeable = False
    parts, _ = dumps([a])
    msg = concat(parts)
    (_hdr, _data, n, ro), = trailer(msg)[3]
    assert ro and n == a.nbytes
    back = loads(msg)[0]
    assert equal(back, a) and not back.flags.writeable


@pytest.mark.parametrize("device_possible", [False, True])
def test_threshold_boundary(monkeypatch, device_possible):
    monkeypatch.setattr(_pickle, "_seen_device", device_possible)
    monkeypatch.setattr(_pickle, "_device_possible", lambda: device_possible)
    at = np.zeros(THRESHOLD, np.uint8)
    below = np.zeros(THRESHOLD - 1, np.uint8)
    p_at, _ = dumps(at)
    p_below, _ = dumps(below)
    assert len(p_at) > 2 and at.ctypes.data in {addr(p) for p in p_at}
    assert bytes(concat(p_below)) == pickle.dumps(below, 5)  # in band: the plain pickle, no index
    assert equal(loads(concat(p_at)), at)
    assert equal(loads(concat(p_below)), below)


def test_fortran_and_noncontiguous_round_trip():
    base = make(np.float64, 300 * 200).reshape(300, 200)
    f = np.asfortranarray(base)
    nc = base[::3, 1::2]
    t = base.T  # F-contiguous view
    obj = {"f": f, "nc": nc, "t": t, "small_f": np.asfortranarray(base[:4, :5])}
    parts, _ = dumps(obj)
    back = loads(concat(parts))
    assert equal(back, obj)
    assert back["f"].flags.f_contiguous
    assert back["t"].flags.f_contiguous
    assert np.array_equal(back["nc"], nc)
    # the F-contiguous array travelled as its own memory
    assert f.ctypes.data in {addr(p) for p in parts}
    assert equal(pickle.loads(concat(parts)), obj)


def test_zero_size_and_scalar_arrays():
    obj = [np.zeros(0, np.float32), np.zeros((0, 5), np.int64), np.float64(3.5), np.array(7, np.int32)]
    parts, _ = dumps(obj)
    assert equal(loads(concat(parts)), obj)


def test_bytes_like_objects():
    big = bytearray(range(256)) * 300
    obj = [b"small", bytes(range(200)) * 400, big, pickle.PickleBuffer(big)]
    parts, _ = dumps(obj)
    assert big in [p for p in parts if type(p) is bytearray]  # sent from where it is
    back = loads(concat(parts))
    assert back[0] == b"small"
    assert back[1] == obj[1] and type(back[1]) is bytes
    assert back[2] == big and type(back[2]) is bytearray
    assert bytes(back[3]) == bytes(big)


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.floats(allow_nan=False),
            st.text(max_size=10),
            st.binary(max_size=20),
            st.builds(
                lambda dt, n, seed: make(dt, n, seed),
                st.sampled_from(DTYPES),
                st.sampled_from([0, 1, 7, 600, 1100, 5000, 9000, 70000]),
                st.integers(0, 5),
            ),
        ),
        lambda kids: st.one_of(
            st.lists(kids, max_size=4),
            st.tuples(kids, kids),
            st.dictionaries(st.text(max_size=5), kids, max_size=4),
        ),
        max_leaves=12,
    )
)
def test_round_trip_property(obj):
    parts, total = dumps(obj)
    assert total == sum(memoryview(p).nbytes for p in parts)
    assert equal(loads(concat(parts)), obj)
    assert equal(loads(memoryview(concat(parts))), obj)
    assert equal(loads(concat_aligned(parts, total)), obj)
    assert equal(pickle.loads(concat(parts)), obj)  # what mpi4py reads


def test_malformed_messages_raise():
    with pytest.raises(pickle.UnpicklingError):
        loads(bytearray(64))  # zeros: not a pickle
    parts, _ = dumps([np.arange(20000.0)])
    msg = concat(parts)
    slen, _, _, [(hdr, data, n, ro)], _ = trailer(msg)
    bad = bytearray(msg)
    struct.pack_into("<Q", bad, slen + 8, slen + 100)  # the payload's data offset past the stream
    with pytest.raises(ValueError, match="malformed"):
        loads(bad)
    cut = bytearray(msg[:-1]) + b"\x06"  # not the magic: a plain stream, whose trailer is ignored
    assert np.array_equal(loads(cut)[0], np.arange(20000.0))


# --- MPI.Pickle -------------------------------------------------------------------------------


def test_pickle_class_defaults_and_setters():
    p = Pickle()
    assert p.PROTOCOL == pickle.HIGHEST_PROTOCOL and p.THRESHOLD == 262144
    assert p.loads(p.dumps([1, "a"])) == [1, "a"]
    p.PROTOCOL = 2
    assert p.dumps(7) == pickle.dumps(7, 2)
    p.PROTOCOL = None
    assert p.PROTOCOL == pickle.HIGHEST_PROTOCOL
    p.THRESHOLD = 10
    assert p.THRESHOLD == 10
    p.THRESHOLD = None
    assert p.THRESHOLD == 262144
    import json

    j = Pickle(lambda o: json.dumps(o).encode(), lambda s: json.loads(bytes(s)))
    assert j.PROTOCOL is None and j.dumps([1]) == b"[1]" and j.loads(b"[1]") == [1]


def test_pickle_dumps_oob():
    from gpumpi._membuffer import buffer

    p = Pickle(threshold=1000)
    a, small = np.arange(1000.0), np.arange(10.0)
    data, bufs = p.dumps_oob({"a": a, "s": small})
    assert len(bufs) == 1 and type(bufs[0]) is buffer and bufs[0].address == a.ctypes.data
    assert len(bufs[0]) == a.nbytes
    back = p.loads_oob(data, bufs)
    assert np.array_equal(back["a"], a) and np.array_equal(back["s"], small)
    assert not bufs[0].readonly  # as the array is
    data, bufs = Pickle(protocol=2, threshold=0).dumps_oob(a)  # out of band needs protocol 5: raised to it
    assert data[1] == 5 and len(bufs) == 1


def test_messages_follow_mpi_pickle(monkeypatch):
    import json

    custom = Pickle(lambda o: json.dumps(o).encode(), lambda s: json.loads(s.tobytes()))
    monkeypatch.setattr(_pickle, "PICKLE", custom)
    parts, total = dumps({"a": [1, 2]})
    assert parts == [b'{"a": [1, 2]}'] and total == 13
    bufs, total, parts = dumps_parts([1, None])
    assert bufs == [b"[1, null]"] and parts is None
    assert loads(bytearray(b'{"b": 3}')) == {"b": 3}
    assert loads(b"") is None
    monkeypatch.setattr(_pickle, "PICKLE", Pickle(protocol=2))
    assert bytes(dumps(np.arange(3))[0][0]) == pickle.dumps(np.arange(3), 2)


# --- device arrays ------------------------------------------------------------------------


def sim(a):
    from gpumpi.testing import SimDeviceArray

    return SimDeviceArray.from_numpy(a)


def test_host_objects_same_bytes_with_or_without_a_device(monkeypatch):
    # the plain path (no device array can exist) and the device-aware pickler agree byte for byte
    objs = [{"a": [1, 2.5, "x"], "b": None}, {"arr": np.arange(3000.0), "small": np.arange(3), "t": (1, b"x")},
            {"big": np.arange(10_000.0), "f": np.asfortranarray(np.ones((100, 100)))}]
    monkeypatch.setattr(_pickle, "_seen_device", False)
    monkeypatch.setattr(_pickle, "_device_possible", lambda: False)
    plain = [(concat(dumps(o)[0]), dumps_parts(o)) for o in objs]
    monkeypatch.setattr(_pickle, "_seen_device", True)
    for o, (msg, (bufs, total, parts)) in zip(objs, plain):
        assert parts is None and concat(bufs) == msg and total == len(msg)
        dbufs, dtotal, dparts = dumps_parts(o)
        assert dparts is None and concat(dbufs) == msg and dtotal == len(msg)
        assert concat(dumps(o)[0]) == msg
        assert equal(loads(msg), o)


def test_device_arrays_become_parts():
    from gpumpi.constants import TAG_UB_VALUE
    from gpumpi.testing import SimDeviceArray

    big = sim(np.arange(100_000.0))
    small = sim(np.arange(3, dtype=np.int32))
    nc = sim(np.arange(40.0).reshape(5, 8))[::2, 1:7:2]
    empty = SimDeviceArray.empty((0, 2), np.int8)
    host = np.arange(10_000.0)
    obj = {"big": big, "small": small, "nc": nc, "again": small, "empty": empty, "host": host, "n": 1}
    bufs, total, parts = dumps_parts(obj)
    seq, arrays = parts
    assert 0 <= seq <= TAG_UB_VALUE and dumps_parts(obj)[2][0] != seq  # a new number per message
    assert len(arrays) == 4 and arrays[0] is big and arrays[1] is small and arrays[3] is empty
    # the strided view is sent as it is (the buffer path packs it on the device), received C-contiguous
    assert arrays[2] is nc and nc.__cuda_array_interface__["strides"] is not None
    msg = concat(bufs)
    assert total == len(msg) < host.nbytes + 4096  # the device bytes are not in the message
    assert trailer(msg)[1] == seq and trailer(msg)[4] == _pickle.F_PARTS
    assert host.ctypes.data in {addr(b) for b in bufs}  # host arrays still travel as their own memory
    pend = loads(msg)
    assert isinstance(pend, Pending) and pend.seq == seq
    assert parts_of(msg).seq == seq and parts_of(concat(dumps({"a": 1})[0])) is None
    assert [(s[0], s[2], s[3]) for s in pend.specs] == [
        ("sim", (100_000,), np.float64), ("sim", (3,), np.int32), ("sim", (3, 3), np.float64), ("sim", (0, 2), np.int8)]
    assert [part_nbytes(s) for s in pend.specs] == [800_000, 12, 72, 0]
    assert pend.specs[2][4] == "C"  # the strided view arrives in C order
    got = alloc(pend.specs)
    assert all(type(a) is SimDeviceArray for a in got)
    assert [(a.shape, a.dtype) for a in got] == [(a.shape, a.dtype) for a in arrays]
    for dst, src in zip(got, arrays):  # what the receiver's part messages do
        dst.set(src.get())
    back = loads(msg, got)
    assert back["big"] is got[0] and back["small"] is got[1] and back["again"] is got[1]
    assert back["nc"] is got[2] and back["empty"] is got[3]
    assert np.array_equal(back["big"].get(), np.arange(100_000.0))
    assert equal(back["host"], host) and back["n"] == 1


def test_dumps_sends_device_arrays_through_host_memory():
    from gpumpi.testing import SimDeviceArray

    obj = {"big": sim(np.arange(100_000.0)), "nc": sim(np.arange(12.0).reshape(3, 4))[:, ::2],
           "small": sim(np.arange(3, dtype=np.int16))}
    bufs, total = dumps(obj)
    assert trailer(concat(bufs))[4] == 0  # no parts
    assert 800_000 in [memoryview(b).nbytes for b in bufs]  # the host copy travels as a segment
    for back in (loads(concat(bufs)), loads(concat_aligned(bufs, total))):
        assert all(type(back[k]) is SimDeviceArray for k in obj)
        assert np.array_equal(back["big"].get(), np.arange(100_000.0))
        assert np.array_equal(back["nc"].get(), np.arange(12.0).reshape(3, 4)[:, ::2])
        assert back["small"].dtype == np.int16 and np.array_equal(back["small"].get(), np.arange(3))


def test_placeholders_need_their_arrays():
    bufs, _, parts = dumps_parts({"x": sim(np.arange(3.0))})
    with pytest.raises(ValueError, match="placeholder"):
        _pickle._part(0)
    with pytest.raises(ValueError, match="device part 0"):
        loads(concat(bufs), [])


class _Nested:
    """Pickles by pickling another object with device arrays (a pickle inside a pickle)."""

    def __reduce__(self):
        bufs, _, parts = dumps_parts({"inner": sim(np.arange(4.0))})
        assert parts is not None and len(parts[1]) == 1
        return bytes, (bytes(concat(bufs)),)


def test_nested_and_concurrent_pickling():
    import threading

    bufs, _, (seq, arrays) = dumps_parts({"n": _Nested(), "d": sim(np.arange(2.0))})
    assert len(arrays) == 1 and np.array_equal(arrays[0].get(), np.arange(2.0))
    errors = []

    def work(t):
        try:
            for i in range(50):
                a = sim(np.full(3, t * 1000 + i, dtype=np.int64))
                _, _, (s, arrs) = dumps_parts([a, {"k": a}, t])
                assert len(arrs) == 1 and arrs[0] is a
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_no_device_array_can_exist_before_a_device_does():
    import subprocess
    import sys

    code = ("import sys; from gpumpi import _pickle; _pickle.dumps_parts({'a': [1]}); "
            "print(_pickle._device_possible(), sorted({'cupy', 'numba'} & set(sys.modules))); "
            "from gpumpi.testing import SimDeviceArray; print(_pickle._device_possible()); "
            "SimDeviceArray.zeros(2); print(_pickle._device_possible())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.split() == ["False", "[]", "False", "True"]


@pytest.mark.gpu
def test_cupy_arrays_become_parts_or_host_copies():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"no CUDA device ({e})")
    a = cupy.arange(10_000, dtype=cupy.float32)
    f = cupy.asfortranarray(cupy.arange(12.0).reshape(3, 4))
    obj = {"a": a, "strided": a[::3], "f": f}
    bufs, total, (seq, arrays) = dumps_parts(obj)
    assert arrays[0] is a and arrays[2] is f and arrays[1].flags.c_contiguous
    assert total < 4096
    pend = loads(concat(bufs))
    got = alloc(pend.specs)
    assert got[2].flags.f_contiguous
    for dst, src in zip(got, arrays):
        dst[...] = src
    back = loads(concat(bufs), got)
    assert type(back["a"]) is cupy.ndarray and bool((back["strided"] == a[::3]).all())
    assert bool((back["f"] == f).all())
    host = loads(concat(dumps(obj)[0]))
    assert type(host["f"]) is cupy.ndarray and bool((host["f"] == f).all())
