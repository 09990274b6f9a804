"""MPI-IO (gpumpi/file.py) at 1-4 ranks, on host and simulated device buffers: every access
family's bytes in the file against NumPy's layout of the same data, a checkpoint written
through subarray views and read back on another decomposition, MPI's errors for bad input,
and files written by gpumpi read by mpi4py + MPICH (ROMIO) with the same view, and back."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpumpi.testing import WORLD_SIZES, SimDeviceArray, run_ranks

KINDS = ("host", "sim")


def _buf(a, kind):
    return SimDeviceArray.from_numpy(a) if kind == "sim" else a


def _get(b, kind):
    return b.get() if kind == "sim" else b


def _families(path, kind):
    """Each family writes its records; the file must hold exactly NumPy's arrangement of them."""
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    rec = 5  # int32 elements per record

    def mine(k):
        return np.arange(rec, dtype=np.int32) + 1000 * r + 100 * k

    f = MPI.File.Open(c, path, MPI.MODE_RDWR | MPI.MODE_CREATE)
    f.Set_view(0, MPI.INT)
    st = MPI.Status()
    # explicit offsets (blocking, nonblocking, collective, split), then the individual pointer
    f.Write_at(r * rec, _buf(mine(0), kind), st)
    assert st.Get_count(MPI.INT) == rec
    f.Iwrite_at((n + r) * rec, _buf(mine(1), kind)).Wait()
    f.Write_at_all((2 * n + r) * rec, _buf(mine(2), kind))
    f.Write_at_all_begin((3 * n + r) * rec, _buf(mine(3), kind))
    f.Write_at_all_end(None)
    f.Seek((4 * n + r) * rec)
    f.Write(_buf(mine(4), kind))
    assert f.Get_position() == (4 * n + r + 1) * rec
    f.Seek((5 * n + r) * rec, MPI.SEEK_SET)
    f.Write_all(_buf(mine(5), kind))
    # ordered: rank order from the shared pointer, which all moved past
    f.Seek_shared(6 * n * rec)
    f.Write_ordered(_buf(mine(6), kind))
    assert f.Get_position_shared() == 7 * n * rec
    f.Sync()
    c.Barrier()
    want = np.concatenate([np.arange(rec, dtype=np.int32) + 1000 * p + 100 * k for k in range(7) for p in range(n)])
    got = np.fromfile(path, dtype=np.int32)
    assert np.array_equal(got, want), (got, want)
    assert f.Get_size() == want.nbytes
    # reads: every family, into fresh buffers (one element more: it must stay untouched)
    for k, read in enumerate([
        lambda b: f.Read_at(r * rec, b),
        lambda b: f.Iread_at((n + r) * rec, b).Wait(),
        lambda b: f.Read_at_all((2 * n + r) * rec, b),
        lambda b: (f.Read_at_all_begin((3 * n + r) * rec, b), f.Read_at_all_end(b)),
        lambda b: (f.Seek((4 * n + r) * rec), f.Read(b)),
        lambda b: (f.Seek((5 * n + r) * rec), f.Iread_all(b).Wait()),
    ]):
        b = _buf(np.full(rec + 1, -1, np.int32), kind)
        read([b, rec, MPI.INT])
        assert np.array_equal(_get(b, kind), np.append(mine(k), -1)), (k, _get(b, kind))
    f.Seek_shared(6 * n * rec)
    b = _buf(np.zeros(rec, np.int32), kind)
    f.Read_ordered(b)
    assert np.array_equal(_get(b, kind), mine(6))
    # the shared pointer, independently: each rank's record lands once, somewhere in the block
    c.Barrier()
    f.Seek_shared(0)
    f.Set_size(0)
    f.Write_shared(_buf(mine(7), kind))
    f.Sync()
    c.Barrier()
    recs = np.fromfile(path, dtype=np.int32).reshape(n, rec)
    assert sorted(x[0] for x in recs) == [1000 * p + 700 for p in range(n)]
    assert all(np.array_equal(x, np.arange(rec, dtype=np.int32) + x[0]) for x in recs)
    # past the end: a short read, the rest untouched
    b = _buf(np.full(3 * rec, -1, np.int32), kind)
    f.Read_at((n - 1) * rec, b, st)
    assert st.Get_count(MPI.INT) == rec
    assert np.array_equal(_get(b, kind)[rec:], np.full(2 * rec, -1, np.int32))
    f.Close()
    assert f == MPI.FILE_NULL
    return True


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_every_access_family_writes_and_reads_numpys_layout(tmp_path, n, kind):
    path = str(tmp_path / "families.bin")
    env = {"GPUMPI_DEVICE": "sim"} if kind == "sim" else None
    assert run_ranks(_families, n, args=(path, kind), timeout=120, env=env) == [True] * n


def _checkpoint(path, kind):
    """A block-distributed 2-D array written through subarray views, read back by the ranks the
    other way round, through a darray view, and by a strided (vector) memory type."""
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    rows, cols = 3 * n, 7
    full = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols) * 0.5
    sub = MPI.DOUBLE.Create_subarray([rows, cols], [3, cols], [3 * r, 0]).Commit()
    f = MPI.File.Open(c, path, MPI.MODE_CREATE | MPI.MODE_WRONLY)
    f.Set_view(16, MPI.DOUBLE, sub)
    f.Write_all(_buf(np.ascontiguousarray(full[3 * r:3 * r + 3]), kind))
    f.Close()
    c.Barrier()
    with open(path, "rb") as fh:
        raw = fh.read()
    assert len(raw) == 16 + full.nbytes and raw[:16] == bytes(16)
    assert np.array_equal(np.frombuffer(raw[16:], np.float64).reshape(rows, cols), full)
    f = MPI.File.Open(c, path, MPI.MODE_RDONLY)
    other = n - 1 - r  # another rank's block
    sub2 = MPI.DOUBLE.Create_subarray([rows, cols], [3, cols], [3 * other, 0]).Commit()
    f.Set_view(16, MPI.DOUBLE, sub2)
    b = _buf(np.zeros((3, cols)), kind)
    f.Read_all(b)
    assert np.array_equal(_get(b, kind), full[3 * other:3 * other + 3])
    cyc = MPI.DOUBLE.Create_darray(n, r, [rows, cols], [MPI.DISTRIBUTE_CYCLIC, MPI.DISTRIBUTE_NONE],
                                   [1, MPI.DISTRIBUTE_DFLT_DARG], [n, 1]).Commit()
    f.Set_view(16, MPI.DOUBLE, cyc)
    b = _buf(np.zeros((3, cols)), kind)
    f.Read_all(b)
    assert np.array_equal(_get(b, kind), full[r::n])
    # a strided memory type: every other element of a row
    f.Set_view(16, MPI.DOUBLE)
    col = MPI.DOUBLE.Create_vector(4, 1, 2).Commit()
    m = np.full(8, -1.0)
    f.Read_at(r * cols, [m, 1, col])
    assert np.array_equal(m[::2], full.ravel()[r * cols:r * cols + 4]) and (m[1::2] == -1).all()
    f.Close()
    for t in (sub, sub2, cyc, col):
        t.Free()
    return True


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_checkpoint_through_subarray_views_reads_back_on_another_decomposition(tmp_path, n, kind):
    path = str(tmp_path / "ckpt.bin")
    env = {"GPUMPI_DEVICE": "sim"} if kind == "sim" else None
    assert run_ranks(_checkpoint, n, args=(path, kind), timeout=120, env=env) == [True] * n


def _errors(path):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    got = {}

    def cls_of(fn):
        try:
            fn()
        except MPI.Exception as e:
            return e.Get_error_class()
        return None

    S, R = MPI.COMM_SELF, MPI.MODE_RDONLY
    got["two access modes"] = cls_of(lambda: MPI.File.Open(S, path, R | MPI.MODE_RDWR))
    got["rdonly+create"] = cls_of(lambda: MPI.File.Open(S, path, R | MPI.MODE_CREATE))
    got["rdwr+sequential"] = cls_of(lambda: MPI.File.Open(S, path, MPI.MODE_RDWR | MPI.MODE_SEQUENTIAL))
    got["missing"] = cls_of(lambda: MPI.File.Open(S, path + ".none", R))
    got["delete missing"] = cls_of(lambda: MPI.File.Delete(path + ".none"))
    f = MPI.File.Open(c, path, MPI.MODE_RDWR | MPI.MODE_CREATE)
    c.Barrier()
    got["excl exists"] = cls_of(lambda: MPI.File.Open(S, path, MPI.MODE_WRONLY | MPI.MODE_CREATE | MPI.MODE_EXCL))
    data = np.arange(4, dtype=np.int32)
    got["negative offset"] = cls_of(lambda: f.Write_at(-1, data))
    got["bad whence"] = cls_of(lambda: f.Seek(0, 12345))
    got["negative pointer"] = cls_of(lambda: f.Seek(-1))
    half = MPI.SHORT.Create_contiguous(3).Commit()
    got["filetype not of etypes"] = cls_of(lambda: f.Set_view(0, MPI.INT, half))
    got["datarep"] = cls_of(lambda: f.Set_view(0, MPI.INT, MPI.INT, "no-such-rep"))
    f.Set_view(0, MPI.INT)
    got["not a whole etype"] = cls_of(lambda: f.Write_at(0, np.zeros(3, np.int8)))
    got["negative size"] = cls_of(lambda: f.Set_size(-5))
    f.Write_at(c.rank * 4, data)  # (nothing above wrote anything)
    f.Close()
    f = MPI.File.Open(c, path, R)
    got["write read-only"] = cls_of(lambda: f.Write_at(0, data))
    seen = []
    f.Set_errhandler(MPI.File.Create_errhandler(lambda fh, code: seen.append(code)))
    got["user handler"] = cls_of(lambda: f.Write_at(0, data))
    got["user handler called"] = MPI.Get_error_class(seen[0]) if seen else None
    f.Close()
    got["closed"] = cls_of(lambda: f.Get_size())
    got["size after errors"] = os.path.getsize(path) == 16 * c.size
    half.Free()
    return got


@pytest.mark.parametrize("n", [1, 2])
def test_bad_input_gets_mpis_error_class_and_loses_nothing(tmp_path, n):
    from gpumpi import MPI

    want = {
        "two access modes": MPI.ERR_AMODE, "rdonly+create": MPI.ERR_AMODE, "rdwr+sequential": MPI.ERR_AMODE,
        "missing": MPI.ERR_NO_SUCH_FILE, "delete missing": MPI.ERR_NO_SUCH_FILE, "excl exists": MPI.ERR_FILE_EXISTS,
        "negative offset": MPI.ERR_ARG, "bad whence": MPI.ERR_ARG, "negative pointer": MPI.ERR_ARG,
        "filetype not of etypes": MPI.ERR_TYPE, "datarep": MPI.ERR_UNSUPPORTED_DATAREP,
        "not a whole etype": MPI.ERR_TYPE, "negative size": MPI.ERR_ARG, "write read-only": MPI.ERR_ACCESS,
        "user handler": MPI.ERR_ACCESS, "user handler called": MPI.ERR_ACCESS, "closed": MPI.ERR_FILE,
        "size after errors": True,
    }
    for got in run_ranks(_errors, n, args=(str(tmp_path / "errors.bin"),), timeout=60):
        assert got == want


def test_register_datarep_takes_a_name_once():
    from gpumpi import MPI

    MPI.Register_datarep("gpumpi-test-rep", None, None, lambda dt: dt.extent)
    with pytest.raises(MPI.Exception) as ei:
        MPI.Register_datarep("gpumpi-test-rep", None, None, lambda dt: dt.extent)
    assert ei.value.Get_error_class() == MPI.ERR_DUP_DATAREP
    with pytest.raises(MPI.Exception) as ei:
        MPI.Register_datarep("external32", None, None, lambda dt: dt.extent)
    assert ei.value.Get_error_class() == MPI.ERR_DUP_DATAREP


# --- interoperability with mpi4py + MPICH (ROMIO) -------------------------------------------------

_INTEROP = textwrap.dedent("""
    import sys
    import numpy as np
    if sys.argv[1] == "gpumpi":
        from gpumpi import MPI
    else:
        from mpi4py import MPI
    path, mode, rep = sys.argv[2], sys.argv[3], sys.argv[4]
    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    ft = MPI.INT.Create_vector(6, 2, 2 * n).Commit()  # from 8 * r: rank r owns pairs r, r + n, ... of the file
    mine = np.arange(12, dtype=np.int32) * 10 + r
    if mode == "write":
        f = MPI.File.Open(c, path, MPI.MODE_CREATE | MPI.MODE_WRONLY)
        f.Set_view(8 * r, MPI.INT, ft, rep)
        f.Write_all(mine)
        f.Close()
    else:
        f = MPI.File.Open(c, path, MPI.MODE_RDONLY)
        f.Set_view(8 * r, MPI.INT, ft, rep)
        got = np.zeros(12, np.int32)
        f.Read_all(got)
        f.Close()
        assert np.array_equal(got, mine), (r, got, mine)
    ft.Free()
    print("ok", r, flush=True)
""")


def _mpiexec():
    exe = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(exe):
        pytest.skip("MPICH's mpiexec (the test extra's mpich) is not installed")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("mpi4py is not installed")
    return exe


def _run(exe, impl, path, mode, rep, script, n=2):
    if impl == "gpumpi":
        cmd = [sys.executable, "-m", "gpumpi", "-n", str(n), sys.executable, script, impl, path, mode, rep]
    else:
        cmd = [exe, "-n", str(n), sys.executable, script, impl, path, mode, rep]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.count("ok") == n, (cmd, p.stdout, p.stderr)


@pytest.mark.parametrize("rep", ["native", "external32"])
@pytest.mark.parametrize("writer,reader", [("gpumpi", "mpi4py"), ("mpi4py", "gpumpi")])
def test_files_written_with_a_view_read_back_by_the_other_library(tmp_path, writer, reader, rep):
    exe = _mpiexec()
    script = str(tmp_path / "interop.py")
    with open(script, "w") as fh:
        fh.write(_INTEROP)
    path = str(tmp_path / f"{writer}-{rep}.bin")
    _run(exe, writer, path, "write", rep, script)
    _run(exe, reader, path, "read", rep, script)
    raw = np.fromfile(path, dtype=">i4" if rep == "external32" else np.int32)
    want = np.zeros(2 * 2 * 6, np.int32)  # the file as both ranks' views lay it out
    for r in range(2):
        for k in range(6):
            for j in range(2):
                want[r * 2 + k * 4 + j] = (2 * k + j) * 10 + r
    assert np.array_equal(raw, want), raw


def _sieving(path):
    """Reads of many close pieces (one read of their span, then copies): a grid and an irregular
    layout, whole and cut by the end of the file, against NumPy's indexing of the file's bytes."""
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    data = np.arange(4000, dtype=np.int32)
    if r == 0:
        data.tofile(path)
    c.Barrier()
    grid = MPI.INT.Create_vector(50, 3, 7).Commit()
    irregular = MPI.INT.Create_indexed([1, 4, 2, 3, 1, 5, 2, 2, 3, 1], [0, 3, 9, 14, 20, 23, 31, 35, 40, 47]).Commit()
    f = MPI.File.Open(c, path, MPI.MODE_RDONLY)
    st = MPI.Status()
    for ft, lens, disps in ((grid, [3] * 50, [7 * k for k in range(50)]),
                            (irregular, [1, 4, 2, 3, 1, 5, 2, 2, 3, 1], [0, 3, 9, 14, 20, 23, 31, 35, 40, 47])):
        ext = ft.Get_extent()[1] // 4
        idx = np.concatenate([np.arange(d, d + n) for d, n in zip(disps, lens)])
        for disp in (4 * r, 4000 * 4 - 4 * (ext + 5)):  # the second view runs past the end of the file
            f.Set_view(disp, MPI.INT, ft)
            want_idx = np.concatenate([idx + k * ext for k in range(3)]) + disp // 4
            want_idx = want_idx[want_idx < 4000]
            stop = np.argmax(np.diff(want_idx) < 0) if (np.diff(want_idx) < 0).any() else len(want_idx)
            b = np.full(3 * len(idx) + 1, -1, np.int32)
            f.Read_all([b, 3 * len(idx), MPI.INT], st)
            n = st.Get_count(MPI.INT)
            assert n == min(len(want_idx), stop), (n, len(want_idx))
            assert np.array_equal(b[:n], data[want_idx[:n]]) and (b[n:] == -1).all()
    f.Close()
    grid.Free()
    irregular.Free()
    return True


@pytest.mark.parametrize("n", [1, 2])
def test_reads_of_many_close_pieces_are_sieved_and_exact(tmp_path, n):
    assert run_ranks(_sieving, n, args=(str(tmp_path / "sieve.bin"),), timeout=60) == [True] * n


def _dies_in_a_collective_write(path, out):
    """Rank 1 dies between two collective writes: the first is intact everywhere; the survivors'
    second either completes or fails with ERR_PROC_FAILED (it may need the dead rank: two-phase
    exchanges), never waits, and leaves its region whole or untouched; Close fails likewise."""
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    f = MPI.File.Open(c, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
    f.Set_view(0, MPI.INT)
    f.Write_at_all(r * 100, np.full(100, r, np.int32))
    c.Barrier()
    if r == 1:
        os._exit(7)  # (between its two writes)
    try:
        f.Write_at_all(300 + r * 100, np.full(100, 10 + r, np.int32))
        res = "wrote "
    except MPI.Exception as e:
        res = f"{e.Get_error_class()} "
    try:
        f.Close()
        res += "closed"
    except MPI.Exception as e:
        res += str(e.Get_error_class())
        try:  # the descriptor is closed all the same: the file says so
            f.Get_size()
        except MPI.Exception as e2:
            res += f" {e2.Get_error_class()}"
    with open(f"{out}.{r}", "w") as fh:
        fh.write(res)


def test_a_rank_dying_in_a_collective_write_leaves_the_others_regions_intact(tmp_path):
    from gpumpi import MPI
    from gpumpi.testing import RanksFailed, one_node_only

    one_node_only(3, "a dead peer failing the call (under an MPI launcher a failure aborts the job)")
    path, out = str(tmp_path / "dying.bin"), str(tmp_path / "result")
    with pytest.raises(RanksFailed):
        run_ranks(_dies_in_a_collective_write, 3, timeout=60, args=(path, out))
    got = np.fromfile(path, dtype=np.int32)
    assert (got[:300] == np.repeat([0, 1, 2], 100)).all()  # the first write, everyone's
    for r in (0, 2):
        wrote, closed = open(f"{out}.{r}").read().split(" ", 1)
        region = got[300 + r * 100:400 + r * 100]
        assert wrote in ("wrote", str(MPI.ERR_PROC_FAILED))
        assert (region == 10 + r).all() if wrote == "wrote" else (region == 0).all() or (region == 10 + r).all()
        assert closed == f"{MPI.ERR_PROC_FAILED} {MPI.ERR_FILE}"


def _device_chunks(path):
    """Device buffers move through host staging a chunk at a time (here 1000 bytes), never as a
    whole-array host copy: through a subarray view, and up to the end of the file."""
    from gpumpi import MPI, _pool
    from gpumpi import file_access

    file_access.CHUNK = 1000
    asked = []
    get = _pool.HOST.get
    _pool.HOST.get = lambda n: asked.append(n) or get(n)
    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    full = np.arange(40 * n * 30, dtype=np.float64).reshape(40 * n, 30)
    sub = MPI.DOUBLE.Create_subarray([40 * n, 30], [40, 30], [40 * r, 0]).Commit()
    cols = MPI.DOUBLE.Create_subarray([40 * n, 30], [40 * n, 15], [0, 15 * (r % 2)]).Commit()
    f = MPI.File.Open(c, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
    f.Set_view(0, MPI.DOUBLE, sub)
    f.Write_all(SimDeviceArray.from_numpy(np.ascontiguousarray(full[40 * r:40 * r + 40])))
    f.Sync()
    c.Barrier()
    assert np.array_equal(np.fromfile(path, np.float64).reshape(full.shape), full)
    f.Set_view(0, MPI.DOUBLE, cols)
    b = SimDeviceArray.zeros((40 * n, 15))
    f.Read_all(b)
    assert np.array_equal(b.get(), full[:, 15 * (r % 2):15 * (r % 2) + 15])
    f.Set_view(0, MPI.DOUBLE)
    st = MPI.Status()
    tail = SimDeviceArray.from_numpy(np.full(500, -1.0))
    f.Read_at(full.size - 100, tail, st)  # 100 elements left in the file
    assert st.Get_count(MPI.DOUBLE) == 100
    assert np.array_equal(tail.get()[:100], full.ravel()[-100:]) and (tail.get()[100:] == -1).all()
    f.Close()
    sub.Free()
    cols.Free()
    assert max(asked) <= 1024, max(asked)  # (the pool's size class of 1000 bytes)
    return True


@pytest.mark.parametrize("n", [1, 2, 3])
def test_device_buffers_are_staged_in_chunks(tmp_path, n):
    assert run_ranks(_device_chunks, n, args=(str(tmp_path / "chunks.bin"),), timeout=60,
                     env={"GPUMPI_DEVICE": "sim"}) == [True] * n


def _two_phase(path, hint):
    """Collective access whose ranges interleave: element-cyclic and column-block views, a rank
    with nothing to write, every hint; the file against NumPy, and which path served."""
    from gpumpi import MPI
    from gpumpi.io import collective

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    used = {"write": 0, "read": 0}
    for name in ("write", "read"):
        real = getattr(collective, name)
        setattr(collective, name, lambda *a, real=real, name=name: used.__setitem__(name, used[name] + 1) or real(*a))
    info = MPI.Info.Create({"romio_cb_write": hint, "romio_cb_read": hint})
    f = MPI.File.Open(c, path, MPI.MODE_CREATE | MPI.MODE_RDWR, info)
    count = 1000
    cyc = MPI.INT.Create_resized(0, 4 * n).Commit()  # one int of every n
    f.Set_view(4 * r, MPI.INT, cyc)
    mine = np.arange(count, dtype=np.int32) * n + r
    f.Write_all(mine)
    f.Sync()
    c.Barrier()
    assert np.array_equal(np.fromfile(path, np.int32), np.arange(count * n, dtype=np.int32))
    back = np.zeros(count, np.int32)
    f.Seek(0)
    f.Read_all(back)
    assert np.array_equal(back, mine)
    # column blocks of a (rows, 4n) array; the last rank writes and reads nothing
    rows = 37
    full = np.arange(rows * 4 * n, dtype=np.float64).reshape(rows, 4 * n)
    colv = MPI.DOUBLE.Create_subarray([rows, 4 * n], [rows, 4], [0, 4 * r]).Commit()
    c.Barrier()
    f.Set_size(0)
    f.Set_view(0, MPI.DOUBLE, colv)
    empty = r == n - 1 and n > 1
    f.Write_all(np.zeros((0, 4)) if empty else np.ascontiguousarray(full[:, 4 * r:4 * r + 4]))
    f.Sync()
    c.Barrier()
    got = np.fromfile(path, np.float64)
    if n > 1:
        want = full.copy()
        want[:, 4 * (n - 1):] = 0  # never written: a hole, zeros (or the end of the file)
        assert np.array_equal(got, want.ravel()[:len(got)]) and len(got) >= rows * 4 * n - 4
    else:
        assert np.array_equal(got, full.ravel())
    b = np.full((rows, 4), -1.0)
    st = MPI.Status()
    f.Seek(0)
    f.Read_all(b, st)
    if not empty:
        assert np.array_equal(b, full[:, 4 * r:4 * r + 4]) and st.Get_count(MPI.DOUBLE) == rows * 4
    f.Close()
    cyc.Free()
    colv.Free()
    return used


@pytest.mark.parametrize("hint", ["automatic", "enable", "disable"])
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_interleaved_collective_access_goes_two_phase(tmp_path, n, hint):
    for used in run_ranks(_two_phase, n, args=(str(tmp_path / "2p.bin"), hint), timeout=90):
        two_phase = hint == "enable" or (hint == "automatic" and n > 1)
        assert (used["write"] > 0 and used["read"] > 0) == two_phase, used


def _one_rank_wrong(path):
    """A collective call whose arguments fail on one process only: it raises its error, the
    others raise ERR_OTHER; nobody waits, and the file goes on."""
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    f = MPI.File.Open(c, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
    got = []
    half = MPI.SHORT.Create_contiguous(3).Commit()
    for call in (lambda: f.Set_view(0, MPI.INT, half if r == 0 else MPI.INT),
                 lambda: f.Set_view(0, MPI.INT),  # (everyone agrees again)
                 lambda: f.Write_at_all(-1 if r == 0 else 0, np.zeros(4, np.int32)),
                 lambda: f.Read_all(np.zeros(3, np.int8) if r == 0 else np.zeros(4, np.int32))):
        try:
            call()
            got.append(None)
        except MPI.Exception as e:
            got.append(e.Get_error_class())
    f.Write_at_all(4 * r, np.full(4, r, np.int32))
    f.Close()
    half.Free()
    return got


def test_one_processs_bad_arguments_fail_the_collective_everywhere(tmp_path):
    from gpumpi import MPI

    path = str(tmp_path / "one.bin")
    got = run_ranks(_one_rank_wrong, 3, args=(path,), timeout=60)
    assert got[0] == [MPI.ERR_TYPE, None, MPI.ERR_ARG, MPI.ERR_TYPE]
    assert got[1] == got[2] == [MPI.ERR_OTHER, None, MPI.ERR_OTHER, MPI.ERR_OTHER]
    assert np.array_equal(np.fromfile(path, np.int32), np.repeat(np.arange(3, dtype=np.int32), 4))
