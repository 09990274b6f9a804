"""Point-to-point with derived datatypes over real processes, at 1-4 ranks.

Every body sends around a ring (rank r to r+1, receives from r-1), so one rank
talks to itself.  Expectations are NumPy slices of the sender's data, computed on
the receiving side; bytes a receive type does not touch must keep their sentinel.
Sizes cover eager messages and rendezvous ones (packed data above 64 KiB).
"""

import numpy as np
import pytest

from gpumpi.testing import WORLD_SIZES, run_ranks


def _peers(c):
    return (c.rank + 1) % c.size, (c.rank - 1) % c.size


def values(shape, seed, dtype=np.float64):
    return (np.arange(int(np.prod(shape)), dtype=np.int64) * 7 + seed * 1000).astype(dtype).reshape(shape)


def _columns():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    for rows, cols in ((5, 4), (20000, 3)):  # 40 B and 160 KB of packed data
        col = MPI.DOUBLE.Create_vector(rows, 1, cols).Commit()
        a = values((rows, cols), c.rank)
        want = values((rows, cols), prv)
        # derived on both sides: column 1 of a into column 2 of b
        b = np.full((rows, cols), -1.0)
        req = c.Isend([a[:, 1:], 1, col], nxt, 1)
        st = MPI.Status()
        c.Recv([b[:, 2:], 1, col], prv, 1, st)
        req.Wait()
        assert np.array_equal(b[:, 2], want[:, 1])
        assert (b[:, :2] == -1).all()
        assert st.Get_count(MPI.DOUBLE) == rows and st.Get_count(col) == 1 and st.Get_elements(col) == rows
        # derived send, contiguous receive; contiguous send, derived receive
        flat = np.zeros(rows)
        req = c.Isend([a, 1, col], nxt, 2)
        c.Recv(flat, prv, 2)
        req.Wait()
        assert np.array_equal(flat, want[:, 0])
        b[:] = -1
        req = c.Isend(np.ascontiguousarray(a[:, 2]), nxt, 3)
        c.Recv([b, 1, col], prv, 3)
        req.Wait()
        assert np.array_equal(b[:, 0], want[:, 2]) and (b[:, 1:] == -1).all()
        col.Free()


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_matrix_columns(n):
    run_ranks(_columns, n, timeout=60)


def _strided_views():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    for rows in (6, 30000):
        a = values((rows, 4), c.rank)
        want = values((rows, 4), prv)
        b = np.full((rows, 4), -1.0)
        # a column, a reversed column, every other row of a block: no hand-built type
        reqs = [c.Isend(a[:, 3], nxt, 1), c.Isend(a[::-1, 0], nxt, 2), c.Isend(a[::2, 1:3], nxt, 3)]
        c.Recv(b[:, 0], prv, 1)
        c.Recv([b[::-1, 1], MPI.DOUBLE], prv, 2)
        got = np.zeros(((rows + 1) // 2, 2))
        st = MPI.Status()
        c.Recv(got, prv, 3, st)
        MPI.Request.Waitall(reqs)
        assert np.array_equal(b[:, 0], want[:, 3])
        assert np.array_equal(b[:, 1], want[:, 0])
        assert np.array_equal(got, want[::2, 1:3])
        assert (b[:, 2:] == -1).all()
        assert st.Get_count(MPI.DOUBLE) == got.size
        # object of the same view into a strided receive of another shape
        dst = np.full((2, rows), -1.0)
        req = c.Isend(a[:, 2], nxt, 4)
        c.Recv(dst[1, :], prv, 4)  # contiguous row
        req.Wait()
        assert np.array_equal(dst[1], want[:, 2]) and (dst[0] == -1).all()


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_strided_array_views_need_no_datatype(n):
    run_ranks(_strided_views, n, timeout=60)


def _faces():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    shape = (6, 7, 8)
    for order, npo in ((MPI.ORDER_C, "C"), (MPI.ORDER_FORTRAN, "F")):
        grid = np.asfortranarray(values(shape, c.rank)) if npo == "F" else values(shape, c.rank)
        want = values(shape, prv)
        for axis in range(3):
            sub = list(shape)
            sub[axis] = 1
            hi = [0, 0, 0]
            hi[axis] = shape[axis] - 1
            top = MPI.DOUBLE.Create_subarray(shape, sub, hi, order).Commit()
            bottom = MPI.DOUBLE.Create_subarray(shape, sub, [0, 0, 0], order).Commit()
            halo = np.full(shape, -1.0, order=npo)
            req = c.Isend([grid, 1, top], nxt, axis)
            c.Recv([halo, 1, bottom], prv, axis)
            req.Wait()
            idx_top = [slice(None)] * 3
            idx_top[axis] = slice(shape[axis] - 1, None)
            idx_bot = [slice(None)] * 3
            idx_bot[axis] = slice(0, 1)
            assert np.array_equal(halo[tuple(idx_bot)], want[tuple(idx_top)]), (npo, axis)
            rest = [slice(None)] * 3
            rest[axis] = slice(1, None)
            assert (halo[tuple(rest)] == -1).all()
            top.Free()
            bottom.Free()


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_faces_of_3d_grid(n):
    run_ranks(_faces, n, timeout=60)


def _structs():
    from gpumpi import MPI
    from gpumpi.util import dtlib

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    dt = np.dtype([("a", "i1"), ("b", "f8"), ("c", "i4")], align=True)  # 7 + 4 padding bytes
    t = dtlib.from_numpy_dtype(dt).Commit()
    assert t.size == 13 and t.extent == dt.itemsize == 24
    for n in (3, 9000):
        src = np.zeros(n, dt)
        src["a"] = np.arange(n) % 100 + c.rank
        src["b"] = np.arange(n) * 0.5 + c.rank
        src["c"] = -np.arange(n) - c.rank
        dst = np.frombuffer(bytearray(b"\xee" * (n * 24)), dt)  # padding starts as 0xee
        req = c.Isend([src, t], nxt, 5)
        st = MPI.Status()
        c.Recv([dst, t], prv, 5, st)
        req.Wait()
        assert np.array_equal(dst["a"], np.arange(n) % 100 + prv)
        assert np.array_equal(dst["b"], np.arange(n) * 0.5 + prv)
        assert np.array_equal(dst["c"], -np.arange(n) - prv)
        raw = dst.view(np.uint8).reshape(n, 24)
        assert (raw[:, 1:8] == 0xEE).all() and (raw[:, 20:24] == 0xEE).all(), "padding was written"
        assert st.Get_count(t) == n and st.Get_elements(t) == 3 * n and st.Get_count(MPI.BYTE) == 13 * n
    # partial struct streams: 14 bytes are one whole struct (13) and the next i1; 17 bytes
    # end inside a basic element (Get_elements is UNDEFINED, as MPICH)
    for nbytes, elements in ((14, 4), (17, MPI.UNDEFINED)):
        req = c.Isend(np.arange(nbytes, dtype=np.uint8), nxt, 6)
        st = MPI.Status()
        dst = np.zeros(2, dt)
        c.Recv([dst, t], prv, 6, st)
        req.Wait()
        assert st.Get_count(t) == MPI.UNDEFINED and st.Get_count(MPI.BYTE) == nbytes
        assert st.Get_elements(t) == elements
        assert dst["a"][0] == 0 and dst["a"][1] == 13 and dst["c"][1] == 0
        assert dst["b"][0] == np.frombuffer(bytes(range(1, 9)), np.float64)[0]


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_structs_with_padding(n):
    run_ranks(_structs, n, timeout=60)


def _darray_gather():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    n = c.size
    gsizes = [8, 9]
    glob = values(gsizes, 42)
    parts = []
    for r in range(n):
        t = MPI.DOUBLE.Create_darray(n, r, gsizes, [MPI.DISTRIBUTE_BLOCK, MPI.DISTRIBUTE_CYCLIC],
                                     [MPI.DISTRIBUTE_DFLT_DARG, 2], [n, 1]).Commit()
        parts.append(t)
    # every rank sends its own blocks of the global array, packed, to rank 0
    mine = parts[c.rank]
    req = c.Isend([glob, 1, mine], 0, 9)
    if c.rank == 0:
        out = np.full(gsizes, -1.0)
        for r in range(n):
            c.Recv([out, 1, parts[r]], r, 9)
        assert np.array_equal(out, glob)
    req.Wait()


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_darray_blocks_reassemble(n):
    run_ranks(_darray_gather, n, timeout=60)


def _bottom():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)

    def struct_over(xs):
        addrs = [MPI.Get_address(x) for x in xs]
        types = [MPI.INT, MPI.DOUBLE, MPI.BYTE.Create_vector(3, 1, 2)]
        return MPI.Datatype.Create_struct([3, 2, 1], addrs, types).Commit()

    i = np.arange(3, dtype=np.int32) + 10 * c.rank
    d = np.arange(2, dtype=np.float64) + 0.5 + c.rank
    u = np.arange(6, dtype=np.uint8) + c.rank
    ri, rd, ru = np.zeros(3, np.int32), np.zeros(2), np.full(6, 0xFF, np.uint8)
    st_send, st_recv = struct_over([i, d, u]), struct_over([ri, rd, ru])
    req = c.Isend([MPI.BOTTOM, 1, st_send], nxt, 4)
    st = MPI.Status()
    c.Recv([MPI.BOTTOM, 1, st_recv], prv, 4, st)
    req.Wait()
    assert np.array_equal(ri, np.arange(3) + 10 * prv)
    assert np.array_equal(rd, np.arange(2) + 0.5 + prv)
    assert np.array_equal(ru[::2], np.arange(6)[::2] + prv) and (ru[1::2] == 0xFF).all()
    assert st.Get_count(MPI.BYTE) == 12 + 16 + 3 and st.Get_elements(st_recv) == 8
    assert MPI.Aint_diff(MPI.Get_address(d), MPI.Get_address(i)) == d.ctypes.data - i.ctypes.data


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_bottom_with_absolute_addresses(n):
    run_ranks(_bottom, n, timeout=60)


def _mismatch_and_truncation():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    # type signature mismatch: doubles received as ints; nothing is written, the sender completes
    for size in (4, 20000):
        got = np.full(size * 2, 7, np.int32)
        req = c.Isend(np.ones(size), nxt, 1)
        with pytest.raises(MPI.Exception) as info:
            c.Recv(got, prv, 1)
        req.Wait()
        assert info.value.Get_error_class() == MPI.ERR_TYPE
        assert "type signature mismatch" in str(info.value) and "f8" in str(info.value)
        assert (got == 7).all()
    # same representation under other names matches; bytes match anything
    req = c.Isend([np.arange(4, dtype=np.int32), MPI.INT32_T], nxt, 2)
    got = np.zeros(4, np.int32)
    c.Recv([got, MPI.INT], prv, 2)
    req.Wait()
    assert np.array_equal(got, np.arange(4))
    req = c.Isend(np.arange(16, dtype=np.uint8), nxt, 3)
    c.Recv([got, MPI.INT], prv, 3)
    req.Wait()
    assert np.array_equal(got, np.arange(16, dtype=np.uint8).view(np.int32))
    # truncation with a derived receive type
    col = MPI.DOUBLE.Create_vector(4, 1, 3).Commit()
    b = np.full((4, 3), -1.0)
    req = c.Isend(np.arange(5.0), nxt, 4)
    with pytest.raises(MPI.Exception) as info:
        c.Recv([b, 1, col], prv, 4)
    req.Wait()
    assert info.value.Get_error_class() == MPI.ERR_TRUNCATE
    # a short message fills only the leading elements
    b[:] = -1
    req = c.Isend(np.arange(3.0) + 1, nxt, 5)
    st = MPI.Status()
    c.Recv([b, 1, col], prv, 5, st)
    req.Wait()
    assert np.array_equal(b[:, 0], [1, 2, 3, -1]) and (b[:, 1:] == -1).all()
    assert st.Get_count(col) == MPI.UNDEFINED and st.Get_elements(col) == 3 and st.Get_count(MPI.DOUBLE) == 3


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_signature_mismatch_and_truncation(n):
    run_ranks(_mismatch_and_truncation, n, timeout=60)


def _other_calls():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    nxt, prv = _peers(c)
    rows = 3000
    col = MPI.DOUBLE.Create_vector(rows, 1, 4).Commit()
    # persistent requests restarted with new data: non-contiguous data is packed at every Start
    a = np.zeros((rows, 4))
    b = np.full((rows, 4), -1.0)
    s = c.Send_init([a, 1, col], nxt, 1)
    r = c.Recv_init([b[:, 1:], 1, col], prv, 1)
    for it in range(3):
        a[:] = values((rows, 4), c.rank + it)
        MPI.Prequest.Startall([r, s])
        MPI.Request.Waitall([r, s])
        assert np.array_equal(b[:, 1], values((rows, 4), prv + it)[:, 0])
    assert (b[:, [0, 2, 3]] == -1).all()
    s.Free()
    r.Free()
    # Sendrecv_replace through a column
    m = values((rows, 4), c.rank)
    c.Sendrecv_replace([m[:, 2:], 1, col], nxt, 2, prv, 2)
    assert np.array_equal(m[:, 2], values((rows, 4), prv)[:, 2])
    assert np.array_equal(m[:, 3], values((rows, 4), c.rank)[:, 3])
    # matched probe, then receive with a derived type
    req = c.Isend(np.ascontiguousarray(values((rows, 4), c.rank)[:, 0]), nxt, 3)
    st = MPI.Status()
    msg = c.Mprobe(prv, 3, st)
    assert st.Get_count(col) == 1
    b[:] = -1
    msg.Recv([b, 1, col])
    req.Wait()
    assert np.array_equal(b[:, 0], values((rows, 4), prv)[:, 0]) and (b[:, 1:] == -1).all()
    # Bcast of a column from the last rank
    root = c.size - 1
    m = values((rows, 4), c.rank)
    c.Bcast([m[:, 1:], 1, col], root)
    assert np.array_equal(m[:, 1], values((rows, 4), root)[:, 1])
    assert np.array_equal(m[:, 0], values((rows, 4), c.rank)[:, 0])
    # Bsend packs into the attached buffer
    MPI.Attach_buffer(bytearray(rows * 8 + MPI.BSEND_OVERHEAD))
    c.Bsend([m, 1, col], nxt, 4)
    flat = np.zeros(rows)
    c.Recv(flat, prv, 4)
    MPI.Detach_buffer()
    assert np.array_equal(flat, values((rows, 4), prv)[:, 0])
    # partitioned calls need contiguous data
    with pytest.raises(NotImplementedError, match="partitioned communication needs contiguous data"):
        c.Psend_init([m, 1, col], 2, nxt, 5)


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_persistent_replace_probe_bcast_with_derived_types(n):
    run_ranks(_other_calls, n, timeout=60)


# -- random nested types over the wire ---------------------------------------------------------------

import pathlib  # noqa: E402
import sys  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent / "datatypes"))
import dtgen  # noqa: E402


def _random_types(specs):
    """Rank 0 sends each type from a random buffer; rank 1 receives it as bytes and with the
    same type into a guarded buffer.  Reference: the naive type-map walk."""
    from gpumpi import MPI
    from gpumpi import datatypes as D
    from gpumpi.datatypes import flatten

    c = MPI.COMM_WORLD
    for i, (spec, count) in enumerate(specs):
        t = dtgen.build(spec, D).Commit()
        tm = flatten.typemap_bytes(t, count)
        if len(set(tm)) != len(tm):
            continue  # overlapping entries: receiving into them is erroneous
        lo = min(tm, default=0)
        base = 16 - min(lo, 0)
        n = base + max(max(tm, default=0) + 1, count * max(t.extent, 0)) + 16
        src = np.random.default_rng(i).integers(0, 256, n, dtype=np.uint8)
        packed = src[[base + o for o in tm]] if tm else np.zeros(0, np.uint8)
        # type offset o lives at buf[base + o]: BOTTOM and a type moved to the absolute
        # address of buf[base] say exactly that (negative offsets included)
        if c.rank == 0:
            for _ in range(2):
                c.Send([MPI.BOTTOM, count, t.Create_hindexed([1], [src.ctypes.data + base]).Commit()]
                       if t.size else [src[base:], count, t], 1, i)
        elif c.rank == 1:
            got = np.zeros(len(tm), np.uint8)
            st_ = MPI.Status()
            c.Recv(got, 0, i, st_)
            assert got.tobytes() == packed.tobytes(), spec
            assert st_.Get_count(t) == (count if t.size else 0)
            dst = np.full(n, 0xA5, np.uint8)
            if t.size:
                c.Recv([MPI.BOTTOM, count, t.Create_hindexed([1], [dst.ctypes.data + base]).Commit()], 0, i)
            else:
                c.Recv([dst[base:], count, t], 0, i)
            want = np.full(n, 0xA5, np.uint8)
            want[[base + o for o in tm]] = packed
            assert dst.tobytes() == want.tobytes(), spec


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(dtgen.specs(depth=3), st.integers(1, 3)), min_size=4, max_size=8))
def test_random_nested_types_over_the_wire(specs):
    run_ranks(_random_types, 2, timeout=60, args=(specs,))


# --- bad input is refused before anything moves --------------------------------------------


def _uncommitted_types_are_refused():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    pair = MPI.DOUBLE.Create_contiguous(2)  # never committed
    a = np.arange(8.0)
    for call in (lambda: c.Send([a, 2, pair], (r + 1) % n, 3), lambda: c.Isend([a, 2, pair], (r + 1) % n, 3),
                 lambda: c.Ssend([a, 2, pair], (r + 1) % n, 3), lambda: c.Send_init([a, 2, pair], (r + 1) % n, 3),
                 lambda: c.Recv([a, 2, pair], (r - 1) % n, 3), lambda: c.Irecv([a, 2, pair], (r - 1) % n, 3),
                 lambda: c.Bcast([a, 2, pair], 0)):
        with pytest.raises(MPI.Exception) as info:
            call()
        assert info.value.Get_error_class() == MPI.ERR_TYPE
        assert "not been committed" in str(info.value)
    c.Barrier()
    assert not c.Iprobe(MPI.ANY_SOURCE, 3)  # nothing was sent
    c.Barrier()
    pair.Commit()
    c.Send([a, 2, pair], (r + 1) % n, 3)
    b = np.zeros(8)
    c.Recv([b, 2, pair], (r - 1) % n, 3)
    assert (b[:4] == a[:4]).all()
    pair.Free()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_uncommitted_datatypes_raise_err_type(n):
    """MPICH refuses an uncommitted derived type (ERR_TYPE); gpumpi sent it."""
    run_ranks(_uncommitted_types_are_refused, n, timeout=60)
