"""mpi4py's buffer-spec grammar: message_simple / message_vector against hand-computed layouts and mpi4py."""

import array
import ctypes

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpumpi import datatypes as D
from gpumpi._arrays import HOST, SIM, as_buffer
from gpumpi._buffers import Msg, MsgV, message_simple, message_vector
from gpumpi.constants import BOTTOM, COMBINER_NAMED, PROC_NULL
from gpumpi.datatypes._core import Datatype, next_handle
from gpumpi.errors import ERR_TYPE
from gpumpi.errors import Exception as MPIException


class FakeCAI:
    def __init__(self, a):
        self.a = a

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.a.ctypes.data, False), "typestr": self.a.dtype.str, "shape": self.a.shape,
                "strides": None, "version": 3}


def check_msg(m, base, *, offset, count, datatype, span=None, lo=0, blocks=1):
    """``base`` is the buffer's first byte address; the message starts ``offset`` bytes in."""
    assert isinstance(m, Msg)
    assert m.addr == base + offset
    assert m.count == count and m.datatype == datatype and m.blocks == blocks
    assert m.nbytes == count * datatype.size
    assert m.span == (count * blocks * datatype.extent if span is None else span)
    assert m.lo == lo
    assert m.contiguous == datatype.is_contiguous
    assert len(m.mem) == m.span
    if m.span:
        assert ctypes.string_at(m.addr + m.lo, m.span) == m.mem.tobytes()


A10 = np.arange(10, dtype="i4")


# -- spec forms, hand-computed ---------------------------------------------------------------

def test_bare_numpy_fast_path():
    a = np.arange(10, dtype="i4")
    m = message_simple(a, True, 0, call="Send")
    check_msg(m, a.ctypes.data, offset=0, count=10, datatype=D.INT)
    assert m.obj is a and m.kind == HOST
    v = m.view  # built on demand, equal to what as_buffer gives
    assert (v.addr, v.nbytes, v.readonly, v.obj) == (a.ctypes.data, 40, False, a)
    assert message_simple(a, False, 0).count == 10
    f = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    check_msg(message_simple(f, False, 0), f.ctypes.data, offset=0, count=6, datatype=D.DOUBLE)
    z = np.array(1.5, dtype="f4")
    check_msg(message_simple(z, True, 0), z.ctypes.data, offset=0, count=1, datatype=D.FLOAT)


def test_fast_and_general_paths_agree():
    for dtype in ("i1", "u2", "i4", "l", "q", "f4", "f8", "c16", "?", "g", "e"):
        a = np.zeros(6, dtype)
        fast = message_simple(a, True, 0)
        slow = message_simple([a, 6, lookup(dtype)], True, 0)
        blocks = message_simple(a, True, 0, blocks=2)
        assert (fast.addr, fast.count, fast.datatype, fast.nbytes, fast.span) == (
            slow.addr, slow.count, slow.datatype, slow.nbytes, slow.span)
        assert (blocks.count, blocks.blocks, blocks.span) == (3, 2, fast.span)


def lookup(dtype):
    from gpumpi._arrays import lookup_dtype

    return lookup_dtype(np.dtype(dtype))


@pytest.mark.parametrize("spec,offset,count,datatype", [
    ([A10, 3], 0, 3, D.INT),
    ([A10, D.INT], 0, 10, D.INT),
    ([A10, "i"], 0, 10, D.INT),
    ([A10, "<i4"], 0, 10, D.INT32_T),
    ([A10, D.BYTE], 0, 40, D.BYTE),
    ([A10, D.DOUBLE], 0, 5, D.DOUBLE),
    ([A10, 2, D.DOUBLE], 0, 2, D.DOUBLE),
    ([A10, (2, 3), D.INT], 12, 2, D.INT),
    ([A10, [2, 3], D.INT], 12, 2, D.INT),
    ([A10, (2, 3)], 12, 2, D.INT),
    ([A10, [2, 3]], 12, 2, D.INT),
    ([A10, (None, 3), D.INT], 12, 7, D.INT),
    ([A10, (None, 10), D.INT], 40, 0, D.INT),
    ([A10, 2, 3, D.INT], 12, 2, D.INT),
    ([A10, None, 1, D.DOUBLE], 8, 4, D.DOUBLE),
    ((A10, 2, D.INT), 0, 2, D.INT),
    ([A10, np.int64(4), D.INT], 0, 4, D.INT),
    ([A10, True, D.INT], 0, 1, D.INT),
    ([A10, 0, D.INT], 0, 0, D.INT),
])
def test_simple_forms(spec, offset, count, datatype):
    m = message_simple(spec, False, 0, call="Recv")
    check_msg(m, A10.ctypes.data, offset=offset, count=count, datatype=datatype)
    assert np.frombuffer(m.mem, dtype="u1").tobytes() == A10.tobytes()[offset:offset + m.span]


def test_derived_contiguous_type():
    a = np.arange(8, dtype="i4")
    c = D.INT.Create_contiguous(4)
    check_msg(message_simple([a, 1, c], True, 0), a.ctypes.data, offset=0, count=1, datatype=c)
    check_msg(message_simple([a, c], True, 0), a.ctypes.data, offset=0, count=2, datatype=c)
    check_msg(message_simple([a, (1, 1), c], True, 0), a.ctypes.data, offset=16, count=1, datatype=c)


def test_pair_type_touches_true_extent_only():
    buf = np.zeros(44, dtype="u1")  # 2 DOUBLE_INT extents (32) + 12: room for 3 elements' data
    m = message_simple([buf, 3, D.DOUBLE_INT], True, 0)
    check_msg(m, buf.ctypes.data, offset=0, count=3, datatype=D.DOUBLE_INT, span=44)
    assert not m.contiguous and m.nbytes == 36
    with pytest.raises(ValueError, match="not a multiple of datatype extent 16"):
        message_simple([buf, D.DOUBLE_INT], True, 0)
    with pytest.raises(ValueError, match=r"buffer too small for count 3 of datatype MPI_DOUBLE_INT"):
        message_simple([buf[:43], 3, D.DOUBLE_INT], True, 0)


def test_other_buffer_kinds():
    ba = bytearray(range(16))
    m = message_simple(ba, False, 0, call="Recv")
    assert (m.count, m.datatype, m.kind) == (16, D.BYTE, HOST)
    assert m.mem.tobytes() == bytes(range(16))
    arr = array.array("d", [1.0, 2.0, 3.0])
    m = message_simple([arr, (1, 1)], True, 0)
    assert (m.count, m.datatype, m.addr) == (1, D.DOUBLE, arr.buffer_info()[0] + 8)
    m = message_simple([b"abcdef", 2, "i2"], True, 0)
    assert (m.count, m.datatype, m.mem.tobytes()) == (2, D.INT16_T, b"abcd")
    a = np.arange(4.0)
    m = message_simple(FakeCAI(a), False, 0)
    if m.kind == SIM:
        assert m.count == 4 and m.datatype is D.DOUBLE and m.mem.tobytes() == a.tobytes()
        m.mem[:8] = np.float64(7).tobytes()
        assert a[0] == 7


def test_proc_null_skips_parsing():
    assert message_simple(object(), True, PROC_NULL) is None
    assert message_simple([A10, -5], False, PROC_NULL) is None
    assert message_vector(object(), True, PROC_NULL, 3) is None


def test_blocks_divide_inferred_counts():
    a = np.arange(12, dtype="f8")
    m = message_simple(a, True, 0, blocks=4, call="Scatter")
    check_msg(m, a.ctypes.data, offset=0, count=3, datatype=D.DOUBLE, blocks=4)
    m = message_simple([a, 2, D.DOUBLE], True, 0, blocks=3)  # explicit count is per block
    check_msg(m, a.ctypes.data, offset=0, count=2, datatype=D.DOUBLE, blocks=3)
    with pytest.raises(ValueError, match=r"^Gather: message: cannot infer count, number of entries 12 is not a "
                                         r"multiple of required number of blocks 5"):
        message_simple(a, False, 0, blocks=5, call="Gather")
    with pytest.raises(ValueError, match=r"^Gather: message: buffer too small for 4 x 4 blocks"):
        message_simple([a, 4, D.DOUBLE], False, 0, blocks=4, call="Gather")
    assert message_simple(a, True, 0, blocks=0).count == 12  # mpi4py passes 0 for "no blocks"


# -- BOTTOM / None -------------------------------------------------------------------------

def test_bottom_and_none_buffers():
    for buf in (None, BOTTOM):
        m = message_simple([buf, 0, D.INT], True, 0)
        assert (m.view, m.obj, m.addr, m.count, m.nbytes, m.span, m.mem.tobytes()) == (None, None, 0, 0, 0, 0, b"")
        m = message_simple([buf, D.INT], True, 0)
        assert m.count == 0
        with pytest.raises(KeyError, match="cannot map None to MPI datatype"):
            message_simple([buf, 0], True, 0)
    with pytest.raises(ValueError, match=r"^Send: message: buffer is None but count is 2"):
        message_simple([None, 2, D.INT], True, 0, call="Send")
    with pytest.raises(ValueError, match=r"^Send: message: BOTTOM buffer needs a datatype built from absolute "
                                         r"addresses \(got MPI_INT, count 2"):
        message_simple([BOTTOM, 2, D.INT], True, 0, call="Send")
    with pytest.raises(ValueError, match="absolute addresses"):
        message_simple([BOTTOM, 1, D.INT.Create_contiguous(2)], True, 0)
    for spec in (None, BOTTOM):
        with pytest.raises(TypeError, match="message: expecting buffer or list/tuple"):
            message_simple(spec, True, 0)


def _absolute_type(a):
    """A derived type whose one block sits at the absolute address of ``a`` (as hindexed will build)."""
    addr = a.ctypes.data
    return Datatype._make(handle=next_handle(), name="", size=a.nbytes, lb=addr, extent=a.nbytes,
                          true_lb=addr, true_extent=a.nbytes, segs=((addr, a.nbytes),), combiner=9,
                          basic=D.INT, nbasic=a.size)


def test_bottom_with_absolute_addresses():
    a = np.arange(4, dtype="i4")
    t = _absolute_type(a)
    m = message_simple([BOTTOM, 1, t], True, 0)
    assert (m.addr, m.lo, m.span, m.view, m.obj) == (0, a.ctypes.data, 16, None, None)
    assert m.mem.tobytes() == a.tobytes()
    mv = message_vector([BOTTOM, ([1], [0]), t], True, 0, 1)
    assert (mv.lo, mv.span, mv.mem.tobytes()) == (a.ctypes.data, 16, a.tobytes())


# -- errors, with types and texts as mpi4py ------------------------------------------------

@pytest.mark.parametrize("spec,exc,text", [
    (5, TypeError, "message: expecting buffer or list/tuple"),
    ({}, TypeError, "message: expecting buffer or list/tuple"),
    ([A10], ValueError, "message: expecting 2 to 4 items"),
    ([], ValueError, "message: expecting 2 to 4 items"),
    ([A10, 1, 2, 3, 4], ValueError, "message: expecting 2 to 4 items"),
    ([A10, -1], ValueError, "message: negative count -1"),
    ([A10, (2, -1), D.INT], ValueError, "message: negative displacement -1"),
    ([A10, (1, 11), D.INT], ValueError, "message: displacement 11 out of bounds, number of datatype entries 10"),
    ([A10, 2.0], TypeError, "'float' object cannot be interpreted as an integer"),
    ([A10, (1, 1.0), D.INT], TypeError, "'float' object cannot be interpreted as an integer"),
    ([A10, "zz"], KeyError, "cannot map 'zz' to MPI datatype"),
    ([A10, 2, 5], KeyError, "cannot map 5 to MPI datatype"),
    ([np.zeros(3, "u1"), D.INT], ValueError,
     "message: cannot infer count, buffer length 3 is not a multiple of datatype extent 4 (lb:0, ub:4)"),
    ([A10, D.DATATYPE_NULL], ValueError, "message: cannot infer count, datatype is null"),
    ([A10, (0, 2), D.DATATYPE_NULL], ValueError, "message: cannot handle displacement, datatype is null"),
    ([A10, D.INT.Create_contiguous(0)], ValueError, "message: cannot infer count, datatype extent 0"),
    ([A10, 11, D.INT], ValueError, "message: buffer too small for count 11 of datatype MPI_INT "
                                   "(needs bytes [0, 44), buffer length 40)"),
    ([A10, (3, 8), D.INT], ValueError, "message: buffer too small for count 3 of datatype MPI_INT"),
    (np.zeros(3, ">f8"), BufferError, "format string '>d' with non-native byte order"),
    (np.zeros(3, "i4,f8"), KeyError, "cannot map 'T{"),
    (np.zeros(3, "U3"), KeyError, "cannot map '3w' to MPI datatype"),
    (np.zeros(3, object), KeyError, "cannot map 'O' to MPI datatype"),
    ([np.arange(6.0)[::2], "i"], ValueError, "message: a non-contiguous array (shape (3,), strides (16,)) with datatype MPI_INT needs an explicit count"),
    (memoryview(bytearray(8))[::2], BufferError, "buffer is not contiguous"),
])
def test_simple_errors_name_the_call(spec, exc, text):
    with pytest.raises(exc) as info:
        message_simple(spec, True, 0, call="Send")
    msg = info.value.args[0]
    assert msg.startswith("Send: ") and text in msg
    with pytest.raises(exc) as info:
        message_simple(spec, True, 0)
    assert info.value.args[0].startswith(text[:10])  # no call: mpi4py's own text


def test_writability_is_required_for_receives():
    ro = np.arange(4.0)
    ro.flags.writeable = False
    for spec in (ro, [ro, D.DOUBLE], b"abcd", [b"abcd", D.BYTE], memoryview(b"abcd")):
        with pytest.raises(BufferError, match="^Recv: buffer is not writable"):
            message_simple(spec, False, 0, call="Recv")
        assert message_simple(spec, True, 0, call="Send").view.readonly


def test_null_and_freed_datatypes_are_mpi_errors():
    for spec in ([A10, 2, D.DATATYPE_NULL], [A10, 0, D.DATATYPE_NULL], [A10, (2, 0), D.DATATYPE_NULL]):
        with pytest.raises(MPIException) as info:
            message_simple(spec, True, 0, call="Send")
        assert info.value.Get_error_class() == ERR_TYPE and str(info.value).startswith("Send: ")
    c = D.INT.Create_contiguous(2)
    alias = Datatype(c)
    c.Free()
    with pytest.raises(MPIException, match="freed") as info:
        message_simple([A10, 1, alias], True, 0, call="Send")
    assert info.value.Get_error_class() == ERR_TYPE


# -- mpi4py as the oracle for which specs are accepted ---------------------------------------

ORACLE_CASES = {
    "bare": lambda: np.arange(10, dtype="i4"),
    "count": lambda: [np.arange(10, dtype="i4"), 3],
    "neg": lambda: [np.arange(10, dtype="i4"), -1],
    "type": lambda: [np.arange(10, dtype="i4"), "d"],
    "cd_tuple": lambda: [np.arange(10, dtype="i4"), (2, 3), "i"],
    "cd_list": lambda: [np.arange(10, dtype="i4"), [2, 3], "i"],
    "cd_none": lambda: [np.arange(10, dtype="i4"), (None, 4), "i"],
    "four": lambda: [np.arange(10, dtype="i4"), 2, 3, "i"],
    "displ_end": lambda: [np.arange(10, dtype="i4"), (0, 10), "i"],
    "displ_out": lambda: [np.arange(10, dtype="i4"), (0, 11), "i"],
    "notmult": lambda: [np.zeros(3, "u1"), "i"],
    "pair16": lambda: [np.zeros(16, "u1"), "d", ],
    "bytes": lambda: b"abcd",
    "bytearray": lambda: bytearray(8),
    "array": lambda: array.array("d", [1, 2]),
    "bigendian": lambda: np.zeros(3, ">f8"),
    "struct": lambda: np.zeros(3, "i4,f8"),
    "none0": lambda: [None, 0, "i"],
    "none2": lambda: [None, 2, "i"],
    "bottom_notype": lambda: [BOTTOM, 0],
    "top_none": lambda: None,
    "int": lambda: 5,
    "one": lambda: [np.zeros(2)],
    "float16": lambda: np.zeros(3, "f2"),
    "complex": lambda: np.zeros(2, "c8"),
    "empty": lambda: np.zeros(0),
    "cast": lambda: memoryview(bytearray(16)).cast("d"),
    "noncontig_mv": lambda: memoryview(bytearray(8))[::2],
    "badcode": lambda: [np.zeros(2), "zz"],
    "floatcount": lambda: [np.zeros(2), 1.5],
}


def _mpi4py_outcome(MPI, spec, readonly):
    if isinstance(spec, list):
        spec = [MPI.BOTTOM if item is BOTTOM else item for item in spec]
    comm = MPI.COMM_SELF
    try:
        if readonly:
            req = comm.Isend(spec, 0, tag=11)
            status = MPI.Status()
            comm.Recv(bytearray(1 << 12), 0, 11, status)
            req.Wait()
            return status.Get_count(MPI.BYTE)
        req = comm.Irecv(spec, 0, tag=12)
        req.Cancel()
        req.Wait()
        return "ok"
    except (TypeError, ValueError, KeyError, BufferError) as exc:
        return type(exc)


def _our_outcome(spec, readonly):
    try:
        m = message_simple(spec, readonly, 0, call="Send" if readonly else "Recv")
        return m.nbytes if readonly else "ok"
    except (TypeError, ValueError, KeyError, BufferError) as exc:
        return type(exc)


@pytest.mark.parametrize("case", sorted(ORACLE_CASES))
@pytest.mark.parametrize("readonly", [True, False])
def test_accepts_and_rejects_like_mpi4py(case, readonly):
    MPI = pytest.importorskip("mpi4py.MPI")
    spec = ORACLE_CASES[case]
    assert _our_outcome(spec(), readonly) == _mpi4py_outcome(MPI, spec(), readonly)


# -- count/displacement inference (hypothesis) -------------------------------------------------

TYPES = [D.BYTE, D.INT, D.DOUBLE, D.DOUBLE_INT, D.SHORT_INT, D.INT.Create_contiguous(3),
         D.SHORT_INT.Create_contiguous(2)]


@given(nbytes=st.integers(0, 200), t=st.sampled_from(TYPES), count=st.none() | st.integers(0, 60),
       displ=st.none() | st.integers(0, 30), blocks=st.integers(0, 4), form=st.sampled_from(["tuple", "list", "four"]))
def test_inference_and_bounds(nbytes, t, count, displ, blocks, form):
    buf = np.zeros(nbytes, dtype="u1")
    base = buf.ctypes.data
    if displ is None:
        spec = [buf, count, t] if count is not None else [buf, t]
    elif form == "four":
        spec = [buf, count, displ, t]
    else:
        spec = [buf, (count, displ) if form == "tuple" else [count, displ], t]
    ext, nb = t.extent, max(blocks, 1)
    # independent expectation
    offset = 0
    expect_error = None
    if displ:
        if displ * ext > nbytes:
            expect_error = "out of bounds"
        offset = displ * ext
    exp_count = count
    if expect_error is None and count is None:
        rest = nbytes - offset
        if rest % ext:
            expect_error = "not a multiple of datatype extent"
        elif (rest // ext) % nb:
            expect_error = "required number of blocks"
        else:
            exp_count = rest // ext // nb
    if expect_error is None and exp_count:
        end = offset + (exp_count * nb - 1) * ext + t.true_lb + t.true_extent
        if end > nbytes:
            expect_error = "buffer too small"
    if expect_error:
        with pytest.raises(ValueError, match=expect_error):
            message_simple(spec, True, 0, blocks=blocks, call="Bcast")
        return
    m = message_simple(spec, True, 0, blocks=blocks, call="Bcast")
    assert m.addr == base + offset and m.count == exp_count and m.nbytes == exp_count * t.size
    span = (exp_count * nb - 1) * ext + t.true_extent if exp_count else 0
    assert m.span == span and m.lo == 0 and m.blocks == nb
    assert m.mem.tobytes() == buf.tobytes()[offset:offset + span]


# -- vector specs ----------------------------------------------------------------------------

B12 = np.arange(12, dtype="i4")


def check_vmsg(m, counts, displs, datatype=D.INT):
    assert isinstance(m, MsgV)
    assert m.counts == tuple(counts) and m.displs == tuple(displs) and m.datatype == datatype
    assert m.addr == B12.ctypes.data and m.nbytes == sum(counts) * datatype.size
    used = [(d * datatype.extent, (d + c) * datatype.extent) for c, d in zip(counts, displs) if c]
    lo = min((u[0] for u in used), default=0)
    hi = max((u[1] for u in used), default=0)
    assert (m.lo, m.span) == (lo, hi - lo)
    assert m.mem.tobytes() == B12.tobytes()[lo:hi]


@pytest.mark.parametrize("spec,blocks,counts,displs", [
    (B12, 3, (4, 4, 4), (0, 4, 8)),
    (B12, 5, (3, 3, 2, 2, 2), (0, 3, 6, 8, 10)),  # remainder to the low ranks
    ([B12, D.INT], 5, (3, 3, 2, 2, 2), (0, 3, 6, 8, 10)),
    ([B12, 2], 3, (2, 2, 2), (0, 2, 4)),  # scalar count replicated
    ([B12, (2, 4)], 3, (2, 2, 2), (0, 4, 8)),  # tuple: (counts, displs); int displs is a stride
    ([B12, [2, 4]], 2, (2, 4), (0, 2)),  # a list is counts, not (counts, displs)
    ([B12, ([1, 2, 3], [9, 0, 4])], 3, (1, 2, 3), (9, 0, 4)),
    ([B12, [1, 2, 3], D.INT], 3, (1, 2, 3), (0, 1, 3)),
    ([B12, ([1, 2, 3], None), "i"], 3, (1, 2, 3), (0, 1, 3)),
    ([B12, (3, 3), D.INT], 4, (3, 3, 3, 3), (0, 3, 6, 9)),
    ([B12, [1, 0, 3], [0, 99, 5], D.INT], 3, (1, 0, 3), (0, 99, 5)),  # zero-count blocks are not checked
    ([B12, np.array([2, 2]), np.array([0, 10]), "i"], 2, (2, 2), (0, 10)),
    ([B12, 0, D.INT], 3, (0, 0, 0), (0, 0, 0)),
])
def test_vector_forms(spec, blocks, counts, displs):
    check_vmsg(message_vector(spec, True, 0, blocks, "Scatterv"), counts, displs)


def test_vector_tuple_list_quirk_in_three_item_form():
    m = message_vector([B12, ([2, 2], [0, 6]), D.INT], True, 0, 2)
    assert m.counts == (2, 2) and m.displs == (0, 6)
    with pytest.raises((TypeError, ValueError)):  # a list pair is counts: [[2, 2], [0, 6]] is no count list
        message_vector([B12, [[2, 2], [0, 6]], D.INT], True, 0, 2)


def test_vector_other_datatypes_and_kinds():
    a = np.zeros(8, "f8")
    m = message_vector([a, D.DOUBLE_INT], True, 0, 2)  # 64 bytes, extent 16 -> 4 entries
    assert m.counts == (2, 2) and m.displs == (0, 2) and m.span == 60 and m.nbytes == 48
    m = message_vector(FakeCAI(np.zeros(6, "f4")), False, 0, 3)
    assert m.counts == (2, 2, 2) and m.datatype is D.FLOAT


@pytest.mark.parametrize("spec,blocks,exc,text", [
    ([B12, [1, 2]], 3, ValueError, "expecting 3 items, got 2"),
    ([B12, ([1, 2, 3], [0, 1])], 3, ValueError, "expecting 3 items, got 2"),
    ([B12, [1, -2, 3]], 3, ValueError, "message: negative count -2"),
    ([B12, ([4, 4, 4], [0, 4, 9])], 3, ValueError, "message: block 2 (count 4, displacement 9) of datatype "
                                                  "MPI_INT needs bytes [36, 52), buffer length 48"),
    ([B12, ([1, 1], [0, -1])], 2, ValueError, "block 1 (count 1, displacement -1)"),
    ([np.zeros(3, "u1"), D.INT], 2, ValueError, "cannot infer count, buffer length 3 is not a multiple"),
    ([B12, D.DATATYPE_NULL], 2, ValueError, "cannot infer count, datatype is null"),
    ([B12, 1, 2, 3, 4], 2, ValueError, "message: expecting 2 to 4 items"),
    (7, 2, TypeError, "message: expecting buffer or list/tuple"),
    ([None, [1, 1], D.INT], 2, ValueError, "message: buffer is None but count is 1"),
    ([BOTTOM, ([1, 1], [0, 1]), D.INT], 2, ValueError, "BOTTOM buffer needs a datatype built from absolute"),
    ([B12, [1.5, 1]], 2, TypeError, "cannot be interpreted as an integer"),
])
def test_vector_errors_name_the_call(spec, blocks, exc, text):
    with pytest.raises(exc) as info:
        message_vector(spec, True, 0, blocks, "Gatherv")
    assert info.value.args[0].startswith("Gatherv: ") and text in info.value.args[0]


def test_vector_null_datatype_with_counts_is_mpi_error():
    with pytest.raises(MPIException) as info:
        message_vector([B12, [1, 1], D.DATATYPE_NULL], True, 0, 2, "Gatherv")
    assert info.value.Get_error_class() == ERR_TYPE


def test_vector_bottom_and_none_without_counts():
    m = message_vector([None, D.INT], False, 0, 3)
    assert m.counts == (0, 0, 0) and m.view is None and m.span == 0


@given(n=st.integers(0, 50), blocks=st.integers(1, 7))
def test_vector_even_split(n, blocks):
    a = np.zeros(n, "i2")
    m = message_vector(a, True, 0, blocks)
    assert sum(m.counts) == n and max(m.counts) - min(m.counts) <= 1
    assert list(m.counts) == sorted(m.counts, reverse=True)
    assert all(m.displs[i + 1] == m.displs[i] + m.counts[i] for i in range(blocks - 1))


def test_named_types_are_predefined_combiner():
    assert D.INT.combiner == COMBINER_NAMED
    assert as_buffer(B12, True).nbytes == 48


@pytest.mark.parametrize("a", [
    np.arange(6, dtype="i4"),
    np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    np.arange(4, dtype="c16"),
    np.arange(3).astype("M8[s]"),
    np.array(2.0),
    np.zeros(0, "f4"),
])
@pytest.mark.parametrize("writable", [True, False])
def test_message_mem_is_the_array_bytes(a, writable):
    a = a.copy(order="K")
    a.flags.writeable = writable
    m = message_simple(a, True, 0)
    assert m.mem.tobytes() == a.tobytes(order="A") and m.mem.readonly is not writable
    assert m.mem is m.mem  # built once
    if writable and a.size:
        m.mem[:1] = b"\xff"
        assert a.tobytes(order="A")[0] == 0xFF
    sub = message_simple([a, (a.size // 2, 1), D.BYTE], True, 0) if a.nbytes > 1 else None
    if sub is not None:
        assert sub.mem.tobytes() == a.tobytes(order="A")[1:1 + a.size // 2]


def test_object_arrays_move_their_pointer_bytes_with_an_explicit_type():
    objs = np.array([object(), object()])
    m = message_simple([objs, D.BYTE], True, 0)
    assert m.count == objs.nbytes and m.mem.tobytes() == ctypes.string_at(objs.ctypes.data, objs.nbytes)
