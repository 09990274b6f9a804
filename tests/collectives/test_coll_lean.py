"""The lean path of blocking Barrier/Bcast/Allreduce/Reduce/Allgather/Alltoall (collectives._lean) against the executor.

The lean path must send exactly the executor's messages, so that ranks on either path meet
in one call: the engine calls of a run of collectives are recorded on every rank with the
lean path on and with it off, and must be the same lists.  Then mixes at 2, 3 and 4 ranks
(rank 0 on the executor and the rest lean, and the reverse; a rank whose buffer the lean
path does not take) are checked against NumPy; receive errors (truncation, count, type)
must be the executor's on the rank at fault while the others complete; a dead peer fails
the call instead of hanging.
"""

import os

import numpy as np
import pytest

from gpumpi.testing import RanksFailed, one_node_only, run_ranks

pytestmark = pytest.mark.timeout(120)

SIZES = (0, 1, 7, 300, 5000)  # elements; 300 float64: more than one unit per rank everywhere; 5000: 20-40 KB
OPS = {"SUM": np.add, "PROD": np.multiply, "MAX": np.maximum, "MIN": np.minimum, "BXOR": np.bitwise_xor}
TYPES = {"f8": ("SUM", "PROD", "MAX", "MIN"), "i4": ("SUM", "MAX", "BXOR"), "f4": ("SUM", "MIN")}


def vals(rank, count, dt, seed=0):
    g = np.random.default_rng([seed, rank, count])
    return g.integers(-3, 4, count).astype(dt)


def _counting():
    """Count the runs of the lean path and of the executor on this rank."""
    from gpumpi.collectives import _execute, _lean

    n = {"lean": 0, "exec": 0}
    run, start = _lean._go, _execute.Run.start

    def lean_run(*a):
        n["lean"] += 1
        return run(*a)

    def exec_start(self):
        n["exec"] += 1
        return start(self)

    _lean._go = lean_run
    _execute.Run.start = exec_start
    return n


def _calls(c, MPI, seed=0):
    """A run of blocking collectives on ``c``; returns what each produced (to compare with NumPy)."""
    size, rank = c.size, c.rank
    out = []
    c.Barrier()
    for count in SIZES:
        for dt, ops in TYPES.items():
            for root in range(size):
                buf = vals(root, count, dt, seed) if rank == root else np.full(count, 99, dt)
                c.Bcast(buf, root)
                assert np.array_equal(buf, vals(root, count, dt, seed)), (count, dt, root)
            for name in ops:
                op = getattr(MPI, name)
                want = vals(0, count, dt, seed)
                for p in range(1, size):
                    want = OPS[name](want, vals(p, count, dt, seed))
                got = np.full(count, 77, dt)
                c.Allreduce(vals(rank, count, dt, seed), got, op)
                assert np.array_equal(got, want), (count, dt, name, got, want)
                got = vals(rank, count, dt, seed).reshape(1, -1) if count else vals(rank, 0, dt, seed)
                c.Allreduce(MPI.IN_PLACE, [got, {"f8": MPI.DOUBLE, "i4": MPI.INT, "f4": MPI.FLOAT}[dt]], op)
                assert np.array_equal(got.ravel(), want), (count, dt, name, "IN_PLACE")
                out.append(got.ravel().tolist())
                for root in range(size):  # Reduce: the receive buffer counts at the root only
                    got = np.full(count, 55, dt) if rank == root else None
                    c.Reduce(vals(rank, count, dt, seed), got, op, root)
                    if rank == root:
                        assert np.array_equal(got, want), (count, dt, name, root, got, want)
                        got = vals(rank, count, dt, seed)
                    c.Reduce(MPI.IN_PLACE if rank == root else vals(rank, count, dt, seed), got, op, root)
                    if rank == root:
                        assert np.array_equal(got, want), (count, dt, name, root, "IN_PLACE")
            # Allgather and Alltoall: every rank's block, in rank order (NumPy's concatenation); above
            # the lean path's size (a receive buffer of size blocks) they are the executor's anyway
            from gpumpi.collectives._lean import MAX_BYTES

            if count * size * np.dtype(dt).itemsize > MAX_BYTES:
                continue
            want = np.concatenate([vals(p, count, dt, seed) for p in range(size)])
            got = np.full(count * size, 33, dt)
            c.Allgather(vals(rank, count, dt, seed), got)
            assert np.array_equal(got, want), (count, dt, "Allgather", got, want)
            got = np.full(count * size, 44, dt)
            got[rank * count:(rank + 1) * count] = vals(rank, count, dt, seed)
            c.Allgather(MPI.IN_PLACE, got)
            assert np.array_equal(got, want), (count, dt, "Allgather IN_PLACE")
            out.append(got.tolist())
            sent = [vals(rank * size + p, count, dt, seed) for p in range(size)]  # block p goes to rank p
            got = np.full(count * size, 22, dt)
            c.Alltoall(np.concatenate(sent), got)
            want = np.concatenate([vals(p * size + rank, count, dt, seed) for p in range(size)])
            assert np.array_equal(got, want), (count, dt, "Alltoall", got, want)
        c.Barrier()
    return out


def _at(addr: int, shape):
    """A copy of the int64 array of ``shape`` at address ``addr``."""
    import ctypes

    n = int(np.prod(shape))
    return np.frombuffer((ctypes.c_int64 * n).from_address(addr), np.int64).reshape(shape).copy()


def _record(lean: bool):
    """The messages of ``_calls`` on this rank, as the engine is asked for them (the general
    calls, and the compiled ones that served): (what, peer, tag, context, bytes, signature)."""
    from gpumpi import MPI
    from gpumpi import _runtime as rt
    from gpumpi.collectives import _lean

    _lean.ENABLED = lean
    n = _counting()
    eng = rt.ENGINE
    log = []
    fast = [0, 0]  # compiled sends and receives; compiled programs that served
    isend, irecv, send_fast, recv_fast = eng.isend, eng.irecv, eng.send_fast, eng.recv_fast

    def rec_isend(bufs, nbytes, wpeer, src, tag, ctx, mode, call, addrs=None, sig=0):
        assert mode == 0 and call in ("Barrier", "Bcast", "Allreduce", "Reduce", "Allgather", "Alltoall"), (mode, call)
        log.append(("send", wpeer, src, tag, ctx, nbytes, sig))
        return isend(bufs, nbytes, wpeer, src, tag, ctx, mode, call, addrs, sig)

    def rec_send_fast(wpeer, src, ctx, tag, addr, nbytes, sig):
        done = send_fast(wpeer, src, ctx, tag, addr, nbytes, sig)
        if done:
            log.append(("send", wpeer, src, tag, ctx, nbytes, sig))
            fast[0] += 1
        return done

    def rec_irecv(mem, cap, source, wpeer, tag, ctx, call, addr=None, sig=0, *rest):
        log.append(("recv", source, wpeer, tag, ctx, cap, sig))
        return irecv(mem, cap, source, wpeer, tag, ctx, call, addr, sig, *rest)

    def rec_recv_fast(source, wpeer, tag, ctx, addr, cap, sig):
        got = recv_fast(source, wpeer, tag, ctx, addr, cap, sig)
        if got is not None:
            log.append(("recv", source, wpeer, tag, ctx, cap, sig))
            fast[0] += 1
        return got

    def rec_frounds(tab, cmapa, csize, proga, nsteps, i0, bufs, rarr, rwant, sarr, swant, src, ctx, tag, sig, rtype,
                    rop, budget, epoch, o):
        # a compiled program (fastring.rounds, arrays by address): the sends and receives of the steps it did
        i = eng_frounds(tab, cmapa, csize, proga, nsteps, i0, bufs, rarr, rwant, sarr, swant, src, ctx, tag, sig,
                        rtype, rop, budget, epoch, o)
        if i == -2:  # an array's flags refused: nothing done
            return i
        prog = _at(proga, (nsteps, F.STEP))
        cmap = _at(cmapa, (2, csize))
        for row in prog[i0:nsteps if i < 0 else i]:
            kind, peer, n = int(row[0]), int(row[1]), int(row[4])
            if kind == F.SEND:
                log.append(("send", int(cmap[1, peer]), src, tag, ctx, n, sig))
            elif kind == F.RECV:
                log.append(("recv", peer, int(cmap[1, peer]), tag, ctx, n, 0))
            fast[0] += kind in (F.SEND, F.RECV)
        fast[1] += i < 0 or i > i0  # a program that got somewhere
        return i

    from gpumpi.ipc import fastring as F

    eng.isend, eng.irecv, eng.send_fast, eng.recv_fast = rec_isend, rec_irecv, rec_send_fast, rec_recv_fast
    c = MPI.COMM_WORLD
    c.Barrier()  # the compiled path is on from here (GPUMPI_FASTPATH=on compiles it on first use)
    eng_frounds = eng.frounds
    if eng_frounds is not None:
        eng.frounds = rec_frounds
    log.clear()
    fast[:] = [0, 0]
    out = _calls(c, MPI)
    del eng.isend, eng.irecv, eng.send_fast, eng.recv_fast
    if eng_frounds is not None:
        eng.frounds = eng_frounds
    # a run on the executor uses the engine in no other way (the lean path, by its plans)
    assert (n["lean"] > 0) == lean and (n["exec"] > 0) != lean, n
    return log, out, fast


@pytest.mark.parametrize("fastpath", ["on", "off"])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_same_messages_as_the_executor(n, fastpath):
    one_node_only(n, "the compiled collectives (the node's rings)")
    _same_messages(n, {"GPUMPI_FASTPATH": fastpath})  # the lean path's sends and receives by the compiled calls, or not


def test_same_messages_above_the_eager_limit():
    one_node_only(4, "the compiled collectives (the node's rings)")
    # messages above a lowered eager limit: the lean rounds' general sends (rendezvous) in the mix
    _same_messages(3, {"GPUMPI_FASTPATH": "on", "GPUMPI_EAGER_LIMIT": "4096"})


def _same_messages(n, env):
    fastpath = env["GPUMPI_FASTPATH"]
    lean = run_ranks(_record, n, args=(True,), env=env)
    general = run_ranks(_record, n, args=(False,), env=env)
    for r in range(n):
        assert lean[r][1] == general[r][1]
        assert len(lean[r][0]) == len(general[r][0]) and lean[r][0] == general[r][0], r
        assert general[r][2] == [0, 0] and (lean[r][2][0] > 0) == (n > 1 and fastpath == "on"), (lean[r][2], general[r][2])
        assert (lean[r][2][1] > 0) == (n > 1 and fastpath == "on"), lean[r][2]  # compiled rounds served


def _mixed(general_ranks):
    from gpumpi import MPI
    from gpumpi.collectives import _lean

    c = MPI.COMM_WORLD
    _lean.ENABLED = c.rank not in general_ranks
    n = _counting()
    _calls(c, MPI, seed=c.size)
    used = n["lean"] > 0, n["exec"] > 0
    # a second communicator (its own context and tags), and a rank whose buffers the lean
    # path does not take (a derived datatype, a strided view) while the others' it does
    d = c.Dup()
    _lean.ENABLED = True
    k = 5
    want = sum(vals(p, k, "f8", 9) for p in range(c.size))
    dbl5 = MPI.DOUBLE.Create_contiguous(k).Commit()
    got = np.zeros(k)
    if c.rank == 0:
        d.Allreduce([vals(0, k, "f8", 9), 1, dbl5], [got, 1, dbl5], MPI.SUM)
    else:
        d.Allreduce(vals(c.rank, k, "f8", 9), got, MPI.SUM)
    assert np.array_equal(got, want)
    for root in range(c.size):
        got = np.zeros(k)
        if c.rank == 0:
            d.Reduce([vals(0, k, "f8", 9), 1, dbl5], [got, 1, dbl5], MPI.SUM, root)
        else:
            d.Reduce(vals(c.rank, k, "f8", 9), got, MPI.SUM, root)
        assert np.array_equal(got, want if c.rank == root else np.zeros(k)), (root, got)
    wide = np.zeros(2 * k)
    buf = wide[::2] if c.rank == c.size - 1 else np.zeros(k)
    if c.rank == 0:
        buf[:] = want
    d.Bcast(buf, 0)
    assert np.array_equal(buf, want)
    d.Barrier()
    dbl5.Free()
    d.Free()
    return used, c.rank not in general_ranks


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("who", ["rank0_general", "rank0_lean"])
def test_lean_and_executor_ranks_meet_in_one_call(n, who):
    one_node_only(n, "the compiled collectives' path (collectives._lean: a communicator over several nodes takes the general one)")
    general = {0} if who == "rank0_general" else set(range(1, n))
    for used, lean in run_ranks(_mixed, n, args=(general,), env={"GPUMPI_FASTPATH": "on"}):
        assert used == (lean, not lean)


def _receive_errors(lean0):
    """Rank 1's buffer disagrees with the others'; only rank 1 fails, with the executor's text."""
    from gpumpi import MPI
    from gpumpi.collectives import _lean

    c = MPI.COMM_WORLD
    _lean.ENABLED = lean0 if c.rank == 0 else True
    got = []
    for what, mine in (("short", np.zeros(3)), ("long", np.zeros(5)), ("type", np.zeros(4, "i8"))):
        buf = mine if c.rank == 1 else np.arange(4.0)
        try:
            c.Bcast(buf, 0)
            got.append(None)
        except MPI.Exception as e:
            got.append((what, e.Get_error_class(), str(e)))
        r = mine if c.rank == 1 else np.zeros(4)
        s = np.ones(len(mine), mine.dtype) if c.rank == 1 else np.ones(4)
        try:
            c.Allreduce(s, r, MPI.SUM)
            got.append(None)
        except MPI.Exception as e:
            got.append((what, e.Get_error_class(), str(e)))
        r = mine if c.rank == 1 else np.zeros(4)
        try:  # to rank 1: its receives are the ones at fault
            c.Reduce(s, r, MPI.SUM, 1)
            got.append(None)
        except MPI.Exception as e:
            got.append((what, e.Get_error_class(), str(e)))
        c.Barrier()
    return got


@pytest.mark.parametrize("fastpath", ["on", "off"])
@pytest.mark.parametrize("n", [2, 3])
def test_receive_errors_are_the_executors(n, fastpath):
    one_node_only(n, "the compiled collectives' path (collectives._lean: a communicator over several nodes takes the general one)")
    from gpumpi import MPI

    per_mode = []
    for lean in (True, False):
        res = run_ranks(_receive_errors, n, args=(lean,), env={"GPUMPI_FASTPATH": fastpath})
        per_mode.append(res)
    for r in range(n):
        assert per_mode[0][r] == per_mode[1][r]
    bad = per_mode[0][1]  # Bcast, Allreduce, Reduce of each case on rank 1
    assert [b[1] for b in bad] == [MPI.ERR_TRUNCATE] * 3 + [MPI.ERR_COUNT] * 3 + [MPI.ERR_TYPE] * 3, bad
    for r in range(n):
        if r != 1:  # the root and other ranks complete their Bcast, and their sends of Reduce
            assert per_mode[0][r][0::3] == [None] * 3 and per_mode[0][r][2::3] == [None] * 3, per_mode[0][r]


def _peer_dies(path):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    c.Barrier()
    if c.rank == 1:
        os._exit(3)
    res = []
    for f in (c.Barrier, lambda: c.Allreduce(np.ones(1), np.zeros(1), MPI.SUM),
              lambda: c.Bcast(np.zeros(1), 1)):
        try:
            f()
            res.append("completed")
        except MPI.Exception as e:
            res.append(str(e.Get_error_class()))
    with open(path, "w") as fh:
        fh.write(" ".join(res))


@pytest.mark.parametrize("fastpath", ["on", "off"])
def test_dead_peer_fails_the_call(tmp_path, fastpath):
    one_node_only(2, "a dead peer failing the call (under an MPI launcher a failure aborts the job)")
    from gpumpi import MPI

    path = tmp_path / "rank0"
    with pytest.raises(RanksFailed):
        run_ranks(_peer_dies, 2, timeout=30, args=(str(path),), env={"GPUMPI_FASTPATH": fastpath})
    assert path.read_text().split() == [str(MPI.ERR_PROC_FAILED)] * 3


def _pairs_and_logicals():
    """Reductions without a ufunc of their own (MINLOC/MAXLOC on contiguous pair types: the
    reducer's bytes path) and logical operations on bool, on the lean path, against NumPy."""
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    n = _counting()
    size, rank = c.size, c.rank
    for count in (1, 5):
        vals_ = [np.random.default_rng([p, count]).integers(-2, 3, count) for p in range(size)]
        allv = np.array(vals_)  # (rank, element)
        for name, pick in (("MINLOC", np.argmin), ("MAXLOC", np.argmax)):
            idx = pick(allv, axis=0)  # the lowest rank among equal values
            for dt, mpit in ((np.int32, MPI.INT_INT), (np.float32, MPI.FLOAT_INT)):
                send = np.zeros(count, [("v", dt), ("i", np.int32)])
                send["v"], send["i"] = vals_[rank], rank
                got = np.zeros_like(send)
                c.Allreduce([send, mpit], [got, mpit], getattr(MPI, name))
                assert np.array_equal(got["v"], allv[idx, np.arange(count)]), (name, dt)
                assert np.array_equal(got["i"], idx), (name, dt, got, idx)
        flags = [v > 0 for v in vals_]
        for name, f in (("LAND", np.logical_and), ("LOR", np.logical_or), ("LXOR", np.logical_xor)):
            want = flags[0]
            for p in range(1, size):
                want = f(want, flags[p])
            got = np.zeros(count, bool)
            c.Allreduce(flags[rank], got, getattr(MPI, name))
            assert np.array_equal(got, want), name
    return n["lean"], n["exec"]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_pair_types_and_logical_operations(n):
    one_node_only(n, "the compiled collectives' path (collectives._lean: a communicator over several nodes takes the general one)")
    for lean, executor in run_ranks(_pairs_and_logicals, n):
        assert lean == 2 * 2 * 2 + 2 * 3 and executor == 0


def _argument_errors(lean):
    """Calls the executor refuses: the lean path leaves them to it, so the error is its own
    (class, type and text), and no tag is taken (the next collective lines up)."""
    from gpumpi import MPI
    from gpumpi.collectives import _lean

    _lean.ENABLED = lean
    c = MPI.COMM_WORLD
    ro = np.zeros(2)
    ro.flags.writeable = False
    d = c.Dup()
    d2 = MPI.Intracomm(d)
    d.Free()
    bad = [
        lambda: c.Bcast(np.zeros(2), c.size),
        lambda: c.Bcast(np.zeros(2), -1),
        lambda: c.Bcast(ro, (c.rank + 1) % c.size) if c.size > 1 else c.Bcast(ro, 1),
        lambda: c.Allreduce(np.zeros(2), np.zeros(3), MPI.SUM),
        lambda: c.Allreduce([np.zeros(2), MPI.INT], [np.zeros(2), MPI.DOUBLE], MPI.SUM),
        lambda: c.Allreduce(np.zeros(2), ro, MPI.SUM),
        lambda: c.Allreduce(np.zeros(2), np.zeros(2), MPI.OP_NULL),
        lambda: c.Allreduce(np.zeros(2), np.zeros(2), np.add),
        lambda: c.Allreduce(np.zeros(2), np.zeros(2), MPI.BAND),
        lambda: c.Allreduce([np.zeros(3, np.uint8), MPI.DOUBLE], np.zeros(3, np.uint8), MPI.SUM),
        lambda: d2.Barrier(),
        lambda: d2.Bcast(np.zeros(2), 0),
        lambda: d2.Allreduce(np.zeros(2), np.zeros(2), MPI.SUM),
        lambda: MPI.COMM_NULL.Barrier(),
        lambda: MPI.COMM_NULL.Allreduce(np.zeros(2), np.zeros(2), MPI.SUM),
        lambda: c.Reduce(np.zeros(2), np.zeros(2), MPI.SUM, c.size),
        lambda: c.Reduce(np.zeros(2), np.zeros(2), MPI.SUM, -1),
        lambda: c.Reduce(np.zeros(2), np.zeros(2), MPI.OP_NULL, 0),
        lambda: c.Reduce(np.zeros(2), np.zeros(2), np.add, 0),
        lambda: c.Reduce(np.zeros(2), np.zeros(2), MPI.BAND, 0),
        lambda: d2.Reduce(np.zeros(2), np.zeros(2), MPI.SUM, 0),
        lambda: MPI.COMM_NULL.Reduce(np.zeros(2), np.zeros(2), MPI.SUM, 0),
    ]
    got = []
    for f in bad:
        try:
            f()
            got.append(None)
        except Exception as e:  # noqa: BLE001
            cls = e.Get_error_class() if isinstance(e, MPI.Exception) else None
            got.append((type(e).__name__, cls, str(e)))
        r = np.zeros(1)
        c.Allreduce(np.array([c.rank + 1.0]), r, MPI.SUM)  # still lined up
        assert r[0] == c.size * (c.size + 1) / 2
    return got


@pytest.mark.parametrize("n", [1, 2])
def test_argument_errors_are_the_executors(n):
    lean = run_ranks(_argument_errors, n, args=(True,))
    general = run_ranks(_argument_errors, n, args=(False,))
    assert lean == general
    assert all(g is not None for g in lean[0]), lean[0]


def _repeated():
    """Allreduce called again and again with arguments of one kind (the compiled call of
    _lean._Last, which skips parsing), and with what an array or spec may change between
    calls: every result against NumPy, every error the executor's."""
    from gpumpi import MPI
    from gpumpi.collectives import _lean

    c = MPI.COMM_WORLD
    n, r = c.size, c.rank
    d = c.Dup()
    rev = c.Split(0, n - 1 - r)  # the ranks the other way round: another world map
    went = {"go": 0, "calls": 0, "python": 0}
    go, run_last = _lean._go, _lean._run_last

    def counting_go(*a):
        went["go"] += 1
        return go(*a)

    def counting_run_last(*a):  # the Python twin of the compiled methods' path
        went["python"] += 1
        return run_last(*a)

    _lean._go, _lean._run_last = counting_go, counting_run_last
    for _ in range(100):  # Barrier's last plan likewise
        went["calls"] += 1
        c.Barrier()

    def check(comm, s, rb, want, op=MPI.SUM):
        went["calls"] += 1
        comm.Allreduce(s, rb, op)
        got = rb[0] if type(rb) is list else rb
        assert np.array_equal(got, want) and got.dtype == want.dtype, (got, want)

    base = [np.arange(3.0) + p for p in range(n)]
    total = np.sum(base, axis=0)
    a, b = base[r].copy(), np.zeros(3)
    for _ in range(300):
        check(c, a, b, total)
    for comm in (d, c, rev, d, rev, c):  # other communicators: each its own world map
        check(comm, a, np.full(3, -1.0), total)
    check(c, base[r] * 2, np.zeros(3), total * 2)  # other arrays of the same kind
    b2 = np.zeros(3)
    a2 = a.copy()
    a2.dtype = np.int64  # changed in place: another kind
    check(c, a2, b2.view(np.int64), np.sum([x.view(np.int64) for x in base], axis=0))
    for _ in range(3):
        check(c, a, b, total)
    check(c, a, b, np.maximum.reduce(base), MPI.MAX)  # another operation
    specs = [a, MPI.DOUBLE], [np.zeros(3), MPI.DOUBLE]
    for _ in range(3):
        check(c, *specs, total)
    specs[1][0] = np.full(3, 5.0)  # the list's array replaced
    check(c, *specs, total)
    inplace = base[r].copy()
    for k in range(3):
        c.Allreduce(MPI.IN_PLACE, inplace, MPI.SUM)
        assert np.array_equal(inplace, total * n ** k), (k, inplace)
    ro = np.zeros(3)
    ro.flags.writeable = False
    errors = []
    for _ in range(2):
        check(c, a, b, total)
        try:  # the same kind as the last call's, but read-only: the executor's error
            c.Allreduce(a, ro, MPI.SUM)
            errors.append(None)
        except Exception as e:  # noqa: BLE001
            errors.append((type(e).__name__, str(e)))
        check(c, a, b, total)
        rs = a.copy()
        rs.flags.writeable = False  # a read-only send buffer is fine
        check(c, rs, b, total)
    for root in [0] * 50 + list(range(n)) + [n - 1] * 3:  # Bcast likewise (its root is part of the kind)
        for comm in (c, c, rev, c):
            went["calls"] += 1
            x = np.arange(4, dtype=np.int32) * (root + 1) if comm.rank == root else np.zeros(4, np.int32)
            comm.Bcast(x, root)
            assert np.array_equal(x, np.arange(4, dtype=np.int32) * (root + 1)), (root, x)
    for root in [0] * 20 + list(range(n)) * 2:  # Reduce likewise (root and role are part of the kind)
        for comm in (c, c, c, rev):
            went["calls"] += 1
            got = np.full(3, -1.0) if comm.rank == root else None
            comm.Reduce(a, got, MPI.SUM, root)
            assert comm.rank != root or np.array_equal(got, total), (root, got)
        for comm in (c, c, c, rev):
            went["calls"] += 1
            got = a.copy()
            comm.Reduce(MPI.IN_PLACE if comm.rank == root else a, got, MPI.SUM, root)
            assert comm.rank != root or np.array_equal(got, total), (root, got)
    spec = [np.zeros(4, np.int32), MPI.INT]
    for k in range(3):
        if r == 0:
            spec[0] = np.full(4, k, np.int32)  # the list's array replaced
        c.Bcast(spec, 0)
        assert np.array_equal(spec[0], np.full(4, k)), spec
    ro4 = np.zeros(4, np.int32)
    ro4.flags.writeable = False
    for _ in range(3):  # a read-only buffer is fine at the root (the others' are writable)
        got = ro4 if r == 0 else np.ones(4, np.int32)
        c.Bcast(got, 0)
        assert not got.any(), got
    d.Free()
    for _ in range(3):  # the remembered communicator, freed: the executor's error, on either twin
        rev.Bcast(ro4 if rev.rank == 0 else np.ones(4, np.int32), 0)
        rev.Barrier()
    rev.Free()
    for call in (lambda: rev.Bcast(ro4, 0), rev.Barrier):
        try:
            call()
            errors.append(None)
        except MPI.Exception as e:
            errors.append((e.Get_error_class() == MPI.ERR_COMM, str(e)))
    _lean._go, _lean._run_last = go, run_last
    return went, errors


@pytest.mark.parametrize("compiled", ["1", "0"])  # the compiled layer's Barrier/Bcast/Allreduce, or the Python twins
@pytest.mark.parametrize("n", [1, 2, 3])
def test_repeated_calls_take_the_remembered_path_and_stay_right(n, compiled):
    one_node_only(n, "the compiled collectives (the node's rings)")
    from gpumpi import _compiled

    out = run_ranks(_repeated, n, env={"GPUMPI_FASTPATH": "on", "GPUMPI_COMPILED": compiled})
    for went, errors in out:
        assert errors[0] is not None and errors[0] == errors[1], errors
        assert errors[-2:] == [(True, "Bcast: invalid communicator (COMM_NULL)"),
                               (True, "Barrier: invalid communicator (COMM_NULL)")], errors
        if n > 1:  # most calls skipped the parsing and _go altogether
            assert went["go"] < went["calls"] // 2, went
            if compiled == "1" and _compiled.module() is not None:  # and were the compiled methods' alone
                assert went["python"] < went["calls"] // 10, went
            else:
                assert went["python"] > went["calls"] // 2, went
