"""Buffer collectives of Comm/Intracomm on host memory, at 1-5 ranks, against NumPy.

Every collective in its three forms (blocking; I* with several requests outstanding and
completed in reverse or any order; *_init started three times with new contents, and
Startall), sizes 0, 1, a count no rank count divides and ~1 MiB (rendezvous), the
dtypes each op is defined for, IN_PLACE wherever the standard allows it, every root,
the vector forms with irregular counts and displacements, derived datatypes, MAXLOC and
MINLOC on pair types, and non-commutative user operations (rank order must hold).
Every rank computes the expected result itself from the other ranks' inputs (which
are a function of the rank and a seed), so the tests hold for any correct algorithm.
"""

import zlib

import numpy as np
import pytest

from gpumpi.testing import run_ranks

pytestmark = pytest.mark.timeout(120)

NS = [1, 2, 3, 4, 5]
SMALL = (0, 1, 7)  # 7: divisible by no rank count from 2 to 5
BIG = 131_072  # float64: 1 MiB, a rendezvous on every message


# --- inputs and the independent expectations ------------------------------------------------------


def vals(rank, count, dt, seed=0):
    """Rank ``rank``'s input: small integers (products of five stay exact), zeros included."""
    g = np.random.default_rng([seed, rank, count])
    dt = np.dtype(dt)
    if dt == np.bool_:
        return g.integers(0, 2, count).astype(bool)
    if dt.kind == "u":
        return g.integers(0, 256, count).astype(dt)
    if dt.kind == "c":
        return (g.integers(-3, 4, count) + 1j * g.integers(-3, 4, count)).astype(dt)
    return g.integers(-3, 4, count).astype(dt)


def _logical(f):
    return lambda a, b: f(a, b).astype(a.dtype)


UFUNC = {
    "SUM": np.add, "PROD": np.multiply, "MAX": np.maximum, "MIN": np.minimum,
    "LAND": _logical(np.logical_and), "LOR": _logical(np.logical_or), "LXOR": _logical(np.logical_xor),
    "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor,
}

# (numpy dtype, MPI datatype name or None for the type mpi4py infers, ops defined for it by MPI)
ARITH = ("SUM", "PROD", "MAX", "MIN")
LOGIC = ("LAND", "LOR", "LXOR")
BITS = ("BAND", "BOR", "BXOR")
TYPES = [
    ("f8", None, ARITH),
    ("f4", None, ARITH),
    ("i4", None, ARITH + LOGIC + BITS),
    ("i8", None, ARITH + LOGIC + BITS),
    ("u1", "UINT8_T", ARITH + LOGIC + BITS),  # 'B' is MPI_BYTE to mpi4py: bitwise ops only
    ("u1", None, BITS),
    ("c16", None, ("SUM", "PROD")),
    ("?", None, LOGIC),
]


def fold(name, xs):
    """``x0 op x1 op ... op xk`` in rank order."""
    f = UFUNC[name]
    acc = xs[0].copy()
    for x in xs[1:]:
        acc = f(acc, x).astype(acc.dtype)
    return acc


def msg(MPI, a, tname):
    return a if tname is None else [a, getattr(MPI, tname)]


def eq(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    assert np.array_equal(got, want), (what, got[:20], want[:20])


# --- blocking data movement ---------------------------------------------------------------------------


def _data_movement(sizes, dtypes):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    for dt in dtypes:
        for k in sizes:
            seed = k + 1
            mine = vals(r, k, dt, seed)
            every = [vals(p, k, dt, seed) for p in range(n)]
            what = (dt, k)
            c.Barrier()
            for root in range(n):
                # Bcast
                b = mine.copy() if r == root else np.zeros(k, dt)
                c.Bcast(b, root)
                eq(b, every[root], ("Bcast",) + what + (root,))
                # Gather, and IN_PLACE at the root
                for inplace in (False, True):
                    rb = np.zeros(n * k, dt) if r == root else None
                    sb = mine
                    if r == root and inplace:
                        rb[r * k:(r + 1) * k] = mine
                        sb = MPI.IN_PLACE
                    c.Gather(sb, rb, root)
                    if r == root:
                        eq(rb, np.concatenate(every), ("Gather", inplace) + what + (root,))
                # Scatter, and IN_PLACE at the root
                table = [vals(p, k, dt, seed + 100 + root) for p in range(n)]
                for inplace in (False, True):
                    sb = np.concatenate(table) if r == root else None
                    rb = np.zeros(k, dt)
                    if r == root and inplace:
                        rb = MPI.IN_PLACE
                    c.Scatter(sb, rb, root)
                    if rb is MPI.IN_PLACE:
                        eq(sb, np.concatenate(table), ("Scatter in place",) + what + (root,))
                    else:
                        eq(rb, table[r], ("Scatter", inplace) + what + (root,))
            # Allgather, and IN_PLACE
            for inplace in (False, True):
                rb = np.zeros(n * k, dt)
                sb = mine
                if inplace:
                    rb[r * k:(r + 1) * k] = mine
                    sb = MPI.IN_PLACE
                c.Allgather(sb, rb)
                eq(rb, np.concatenate(every), ("Allgather", inplace) + what)
            # Alltoall, and IN_PLACE: block p of rank q's input goes to rank p, slot q
            rows = [vals(p, n * k, dt, seed + 7) for p in range(n)]
            want = np.concatenate([rows[q][r * k:(r + 1) * k] for q in range(n)])
            for inplace in (False, True):
                rb = np.zeros(n * k, dt)
                sb = rows[r].copy()
                if inplace:
                    rb[:] = sb
                    sb = MPI.IN_PLACE
                c.Alltoall(sb, rb)
                eq(rb, want, ("Alltoall", inplace) + what)
    return True


@pytest.mark.parametrize("n", NS)
def test_data_movement_every_root_size_dtype_and_in_place(n):
    dts = ["f8", "f4", "i4", "i8", "u1", "c16", "?"]
    assert run_ranks(_data_movement, n, timeout=90, args=(SMALL, dts)) == [True] * n


@pytest.mark.parametrize("n", [2, 3, 5])
def test_data_movement_one_mebibyte(n):
    assert run_ranks(_data_movement, n, timeout=90, args=((BIG,), ["f8"])) == [True] * n


# --- vector forms -----------------------------------------------------------------------------------


def _layout(n, seed, reverse=False):
    """Irregular counts (zeros included) and displacements with gaps, optionally reversed."""
    counts = [(3 * p + seed) % 4 for p in range(n)]  # 0..3
    displs, at = [0] * n, 1
    order = range(n - 1, -1, -1) if reverse else range(n)
    for p in order:
        displs[p] = at
        at += counts[p] + 2  # a gap of 2 after every block
    return counts, displs, at + 1


def _vector_forms():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    FILL = -7.0
    for seed in range(4):
        for reverse in (False, True):
            counts, displs, span = _layout(n, seed, reverse)
            what = (seed, reverse, counts, displs)
            every = [vals(p, counts[p], "f8", seed) for p in range(n)]

            def placed(blocks):
                out = np.full(span, FILL)
                for p in range(n):
                    out[displs[p]:displs[p] + counts[p]] = blocks[p]
                return out

            for root in range(n):
                # Gatherv (and IN_PLACE)
                for inplace in (False, True):
                    rb = np.full(span, FILL) if r == root else None
                    sb = every[r]
                    if r == root and inplace:
                        rb[displs[r]:displs[r] + counts[r]] = every[r]
                        sb = MPI.IN_PLACE
                    c.Gatherv(sb, [rb, counts, displs, MPI.DOUBLE] if r == root else None, root)
                    if r == root:
                        eq(rb, placed(every), ("Gatherv", inplace, root) + what)
                # Scatterv (and IN_PLACE)
                table = [vals(p, counts[p], "f8", seed + 50 + root) for p in range(n)]
                for inplace in (False, True):
                    sb = [placed(table), counts, displs, MPI.DOUBLE] if r == root else None
                    rb = np.full(counts[r], FILL)
                    if r == root and inplace:
                        c.Scatterv(sb, MPI.IN_PLACE, root)
                        eq(sb[0], placed(table), ("Scatterv in place", root) + what)
                    else:
                        c.Scatterv(sb, rb, root)
                        eq(rb, table[r], ("Scatterv", inplace, root) + what)
            # Allgatherv (and IN_PLACE)
            for inplace in (False, True):
                rb = np.full(span, FILL)
                sb = every[r]
                if inplace:
                    rb[displs[r]:displs[r] + counts[r]] = every[r]
                    sb = MPI.IN_PLACE
                c.Allgatherv(sb, [rb, counts, displs, MPI.DOUBLE])
                eq(rb, placed(every), ("Allgatherv", inplace) + what)
            # Alltoallv: rank q sends sc(q)[p] items to p; the receive layout is its own
            def scounts(q):
                return [(q + 2 * p + seed) % 3 for p in range(n)]

            sc = scounts(r)
            rc = [scounts(q)[r] for q in range(n)]
            sd = [sum(sc[p + 1:]) + 3 * (n - 1 - p) for p in range(n)] if reverse else \
                [sum(sc[:p]) + p for p in range(n)]
            rd = [sum(rc[:p]) + 2 * p + 1 for p in range(n)]
            if reverse:
                rd = [sum(rc[p + 1:]) + (n - 1 - p) for p in range(n)]
            src = [vals(q * 100 + p, scounts(q)[p], "f8", seed + 9) for q in range(n) for p in range(n)]
            sbuf = np.full(max([d + k for d, k in zip(sd, sc)] + [1]), FILL)
            for p in range(n):
                sbuf[sd[p]:sd[p] + sc[p]] = src[r * n + p]
            rspan = max([d + k for d, k in zip(rd, rc)] + [1]) + 1
            rb = np.full(rspan, FILL)
            c.Alltoallv([sbuf, sc, sd, MPI.DOUBLE], [rb, rc, rd, MPI.DOUBLE])
            want = np.full(rspan, FILL)
            for q in range(n):
                want[rd[q]:rd[q] + rc[q]] = src[q * n + r]
            eq(rb, want, ("Alltoallv", sc, sd, rc, rd) + what)
            # Alltoallv IN_PLACE: the same counts both ways (counts symmetric: c(q, p) == c(p, q))
            sym = [(r + p + seed) % 3 for p in range(n)]
            ip_d = [sum(sym[:p]) + p for p in range(n)]
            ip = np.full(sum(sym) + n + 1, FILL)
            for p in range(n):
                ip[ip_d[p]:ip_d[p] + sym[p]] = vals(r * 100 + p, sym[p], "f8", seed + 11)
            want = ip.copy()
            for p in range(n):
                want[ip_d[p]:ip_d[p] + sym[p]] = vals(p * 100 + r, sym[p], "f8", seed + 11)
            c.Alltoallv(MPI.IN_PLACE, [ip, sym, ip_d, MPI.DOUBLE])
            eq(ip, want, ("Alltoallv in place", sym) + what)
            # Alltoallw: per-pair datatypes (DOUBLE or INT), byte displacements
            def wc(q, p):  # items rank q sends to rank p
                return (q + p + seed) % 3

            def wtype(q, p):  # the pair (q, p) uses one datatype on both sides
                return (q + p) % 2

            stypes = [(MPI.DOUBLE, MPI.INT)[wtype(r, p)] for p in range(n)]
            snps = [("f8", "i4")[wtype(r, p)] for p in range(n)]
            wsc = [wc(r, p) for p in range(n)]
            wsd, at = [], 8 if reverse else 0
            for p in range(n):
                wsd.append(at)
                at += wsc[p] * 8 + 8
            sraw = np.zeros(at + 8, np.uint8)
            for p in range(n):
                a = vals(r * 100 + p, wsc[p], snps[p], seed + 13)
                sraw[wsd[p]:wsd[p] + a.nbytes] = a.view(np.uint8)
            wrc = [wc(q, r) for q in range(n)]
            wrd, at = [0] * n, 4
            for q in (range(n - 1, -1, -1) if reverse else range(n)):
                wrd[q] = at
                at += wrc[q] * 8 + 4
            rraw = np.zeros(at + 4, np.uint8)
            want = rraw.copy()
            for q in range(n):
                a = vals(q * 100 + r, wrc[q], snps[q], seed + 13)
                want[wrd[q]:wrd[q] + a.nbytes] = a.view(np.uint8)
            c.Alltoallw([sraw, wsc, wsd, stypes], [rraw, wrc, wrd, stypes])
            eq(rraw, want, ("Alltoallw", wsc, wsd, wrc, wrd) + what)
    return True


@pytest.mark.parametrize("n", NS)
def test_vector_forms_irregular_counts_gaps_zero_counts_and_reversed_displacements(n):
    assert run_ranks(_vector_forms, n, timeout=90) == [True] * n


# --- reductions ---------------------------------------------------------------------------------------


def _rs_counts(n, k):
    """Reduce_scatter's irregular counts (zeros included), ``k`` scaling the sizes."""
    return [((p * 5 + 3) % 4) * k for p in range(n)]


def _reductions(sizes, types):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    for dt, tname, ops in types:
        for opname in ops:
            op = getattr(MPI, opname)
            for k in sizes:
                seed = zlib.crc32(f"{dt}{tname}{opname}{k}".encode()) % 1000
                every = [vals(p, k, dt, seed) for p in range(n)]
                total = fold(opname, every) if k else np.zeros(0, dt)
                what = (dt, tname, opname, k)
                M = lambda a: msg(MPI, a, tname)  # noqa: E731
                for inplace in (False, True):
                    # Reduce at every root
                    for root in range(n):
                        rb = np.zeros(k, dt)
                        sb = every[r]
                        if inplace and r == root:
                            rb[:] = every[r]
                            sb = MPI.IN_PLACE
                        c.Reduce(sb if sb is MPI.IN_PLACE else M(sb), M(rb), op, root)
                        if r == root:
                            eq(rb, total, ("Reduce", inplace, root) + what)
                    # Allreduce
                    rb = np.zeros(k, dt)
                    sb = every[r]
                    if inplace:
                        rb[:] = every[r]
                        sb = MPI.IN_PLACE
                    c.Allreduce(sb if sb is MPI.IN_PLACE else M(sb), M(rb), op)
                    eq(rb, total, ("Allreduce", inplace) + what)
                    # Scan, Exscan
                    prefix = [fold(opname, every[:q + 1]) if k else every[q][:0] for q in range(n)]
                    for name in ("Scan", "Exscan"):
                        rb = np.zeros(k, dt)
                        sb = every[r]
                        if inplace:
                            rb[:] = every[r]
                            sb = MPI.IN_PLACE
                        getattr(c, name)(sb if sb is MPI.IN_PLACE else M(sb), M(rb), op)
                        if name == "Scan":
                            eq(rb, prefix[r], ("Scan", inplace) + what)
                        elif r > 0:  # rank 0's Exscan result is undefined
                            eq(rb, prefix[r - 1], ("Exscan", inplace) + what)
                    # Reduce_scatter_block: k items per rank
                    blocks = [vals(p, n * k, dt, seed + 1) for p in range(n)]
                    full = fold(opname, blocks) if k else np.zeros(0, dt)
                    if inplace:
                        rb = blocks[r].copy()
                        c.Reduce_scatter_block(MPI.IN_PLACE, M(rb), op)
                        eq(rb[:k], full[r * k:(r + 1) * k], ("Reduce_scatter_block", inplace) + what)
                    else:
                        rb = np.zeros(k, dt)
                        c.Reduce_scatter_block(M(blocks[r]), M(rb), op)
                        eq(rb, full[r * k:(r + 1) * k], ("Reduce_scatter_block", inplace) + what)
                    # Reduce_scatter: irregular counts
                    rc = _rs_counts(n, k)
                    tot = sum(rc)
                    lo = sum(rc[:r])
                    ins = [vals(p, tot, dt, seed + 2) for p in range(n)]
                    full = fold(opname, ins) if tot else np.zeros(0, dt)
                    if inplace:
                        rb = ins[r].copy()
                        c.Reduce_scatter(MPI.IN_PLACE, M(rb), rc, op)
                        eq(rb[:rc[r]], full[lo:lo + rc[r]], ("Reduce_scatter", inplace, rc) + what)
                    else:
                        rb = np.zeros(rc[r], dt)
                        c.Reduce_scatter(M(ins[r]), M(rb), rc, op)
                        eq(rb, full[lo:lo + rc[r]], ("Reduce_scatter", inplace, rc) + what)
                        rb = np.zeros(rc[r], dt)
                        c.Reduce_scatter(M(ins[r]), M(rb), None, op)  # counts from every rank's recvbuf
                        eq(rb, full[lo:lo + rc[r]], ("Reduce_scatter counts=None", rc) + what)
    return True


@pytest.mark.parametrize("n", NS)
def test_reductions_every_op_dtype_size_root_and_in_place(n):
    assert run_ranks(_reductions, n, timeout=110, args=(SMALL, TYPES)) == [True] * n


@pytest.mark.parametrize("n", [2, 3, 5])
def test_reductions_one_mebibyte(n):
    types = [("f8", None, ("SUM", "MAX")), ("i4", None, ("BXOR",))]
    assert run_ranks(_reductions, n, timeout=40, args=((BIG,), types)) == [True] * n


def _pairs():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    kinds = [
        (MPI.DOUBLE_INT, np.dtype([("v", "f8"), ("i", "i4")], align=True)),
        (MPI.TWOINT, np.dtype([("v", "i4"), ("i", "i4")])),
    ]
    for mt, sdt in kinds:
        assert sdt.itemsize == mt.Get_extent()[1], (sdt, mt.Get_extent())
        for k in (0, 1, 9):
            # values with many ties (0..2), the index a function of the rank
            def of(p):
                a = np.zeros(k, sdt)
                a["v"] = vals(p, k, "i4", 3) % 3
                a["i"] = (p * 7) % n + 10 * np.arange(k) if k else 0
                return a

            every = [of(p) for p in range(n)]
            for opname in ("MAXLOC", "MINLOC"):
                want = np.zeros(k, sdt)
                for j in range(k):
                    cand = [(e["v"][j], e["i"][j]) for e in every]
                    best = max(v for v, _ in cand) if opname == "MAXLOC" else min(v for v, _ in cand)
                    want["v"][j] = best
                    want["i"][j] = min(i for v, i in cand if v == best)  # ties: the lower index
                op = getattr(MPI, opname)
                for root in range(n):
                    rb = np.zeros(k, sdt)
                    c.Reduce([every[r], mt], [rb, mt], op, root)
                    if r == root:
                        assert rb.tolist() == want.tolist(), (opname, mt, k, root, rb, want)
                rb = np.zeros(k, sdt)
                c.Allreduce([every[r], mt], [rb, mt], op)
                assert rb.tolist() == want.tolist(), (opname, mt, k, rb, want)
                rb = every[r].copy()
                c.Allreduce(MPI.IN_PLACE, [rb, mt], op)
                assert rb.tolist() == want.tolist(), (opname, mt, k, "in place")
                rb = np.zeros(k, sdt)
                c.Scan([every[r], mt], [rb, mt], op)
                pre = every[:r + 1]
                for j in range(k):
                    cand = [(e["v"][j], e["i"][j]) for e in pre]
                    best = max(v for v, _ in cand) if opname == "MAXLOC" else min(v for v, _ in cand)
                    assert rb["v"][j] == best and rb["i"][j] == min(i for v, i in cand if v == best), \
                        (opname, mt, k, "Scan", j, rb, pre)
    return True


@pytest.mark.parametrize("n", NS)
def test_maxloc_minloc_on_pair_types_ties_take_the_lower_index(n):
    assert run_ranks(_pairs, n, timeout=60) == [True] * n


# --- derived datatypes ----------------------------------------------------------------------------------


def _derived():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    vec = MPI.DOUBLE.Create_vector(3, 1, 2).Commit()  # doubles 0, 2, 4; extent 5
    idx = MPI.DOUBLE.Create_indexed([2, 1], [0, 3]).Commit()  # doubles 0, 1, 3; extent 4
    rsz = MPI.DOUBLE.Create_resized(0, 16).Commit()  # every other double
    shapes = {"vector": (vec, [0, 2, 4], 5), "indexed": (idx, [0, 1, 3], 4), "resized": (rsz, [0], 2)}

    def where(name, count):
        _, pos, ext = shapes[name]
        return np.array([i * ext + p for i in range(count) for p in pos], dtype=np.intp)

    def spread(name, count, data, fill=-1.0):
        _, pos, ext = shapes[name]
        out = np.full(max(count * ext, 1), fill)
        out[where(name, count)] = data
        return out

    for sname in shapes:
        for rname in shapes:
            st, rt = shapes[sname][0], shapes[rname][0]
            per_s, per_r = len(shapes[sname][1]), len(shapes[rname][1])
            # one message of 6 doubles: as counts of each type (per item: 3, 3, 1 doubles)
            k = 6
            cs, cr = k // per_s, k // per_r
            mine = vals(r, k, "f8", 21)
            every = [vals(p, k, "f8", 21) for p in range(n)]
            what = (sname, rname)
            for root in range(n):
                # Bcast: the root sends with the send type, the others receive with the receive type
                if r == root:
                    b = spread(sname, cs, mine)
                    c.Bcast([b, cs, st], root)
                    eq(b, spread(sname, cs, mine), ("Bcast root",) + what)
                else:
                    b = spread(rname, cr, np.zeros(k))
                    c.Bcast([b, cr, rt], root)
                    eq(b[where(rname, cr)], every[root], ("Bcast",) + what)
                    eq(b, spread(rname, cr, every[root]), ("Bcast gaps",) + what)
                # Gather
                rb = spread(rname, n * cr, np.zeros(n * k)) if r == root else None
                c.Gather([spread(sname, cs, mine), cs, st], [rb, cr, rt] if r == root else None, root)
                if r == root:
                    eq(rb, spread(rname, n * cr, np.concatenate(every)), ("Gather",) + what)
                # Scatter
                sb = spread(sname, n * cs, np.concatenate(every)) if r == root else None
                rb = spread(rname, cr, np.zeros(k))
                c.Scatter([sb, cs, st] if r == root else None, [rb, cr, rt], root)
                eq(rb, spread(rname, cr, every[r]), ("Scatter",) + what)
            # Allgather
            rb = spread(rname, n * cr, np.zeros(n * k))
            c.Allgather([spread(sname, cs, mine), cs, st], [rb, cr, rt])
            eq(rb, spread(rname, n * cr, np.concatenate(every)), ("Allgather",) + what)
            # Alltoall
            rows = [vals(p, n * k, "f8", 22) for p in range(n)]
            rb = spread(rname, n * cr, np.zeros(n * k))
            c.Alltoall([spread(sname, n * cs, rows[r]), cs, st], [rb, cr, rt])
            want = np.concatenate([rows[q][r * k:(r + 1) * k] for q in range(n)])
            eq(rb, spread(rname, n * cr, want), ("Alltoall",) + what)
        # reductions: the same derived type both sides
        t = shapes[sname][0]
        per = len(shapes[sname][1])
        cnt = 6 // per
        total = fold("SUM", every)
        for root in range(n):
            rb = spread(sname, cnt, np.zeros(6))
            c.Reduce([spread(sname, cnt, every[r]), cnt, t], [rb, cnt, t], MPI.SUM, root)
            if r == root:
                eq(rb, spread(sname, cnt, total), ("Reduce", sname, root))
        rb = spread(sname, cnt, np.zeros(6))
        c.Allreduce([spread(sname, cnt, every[r]), cnt, t], [rb, cnt, t], MPI.MAX)
        eq(rb, spread(sname, cnt, fold("MAX", every)), ("Allreduce", sname))
        rb = spread(sname, cnt, every[r])
        c.Allreduce(MPI.IN_PLACE, [rb, cnt, t], MPI.SUM)
        eq(rb, spread(sname, cnt, total), ("Allreduce in place", sname))
        rb = spread(sname, cnt, np.zeros(6))
        c.Scan([spread(sname, cnt, every[r]), cnt, t], [rb, cnt, t], MPI.SUM)
        eq(rb, spread(sname, cnt, fold("SUM", every[:r + 1])), ("Scan", sname))
        blocks = [vals(p, 6 * n, "f8", 23) for p in range(n)]
        rb = spread(sname, cnt, np.zeros(6))
        c.Reduce_scatter_block([spread(sname, n * cnt, blocks[r]), cnt, t], [rb, cnt, t], MPI.SUM)
        eq(rb, spread(sname, cnt, fold("SUM", blocks)[6 * r:6 * (r + 1)]), ("Reduce_scatter_block", sname))
    for t in (vec, idx, rsz):
        t.Free()
    return True


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_derived_datatypes_as_send_and_receive_types(n):
    assert run_ranks(_derived, n, timeout=90) == [True] * n


# --- user operations ----------------------------------------------------------------------------------


def _matmul(inbuf, inoutbuf, datatype):
    a = np.frombuffer(inbuf, "f8").reshape(-1, 2, 2)
    b = np.frombuffer(inoutbuf, "f8").reshape(-1, 2, 2)
    b[:] = a @ b  # inoutvec = invec op inoutvec, invec from the lower ranks


def mats(p, k, seed):
    return vals(p, 4 * k, "f8", seed).reshape(k, 2, 2) % 3 - 1  # entries -1..1: products stay exact


def chain(ms):
    out = ms[0].copy()
    for m in ms[1:]:
        out = out @ m
    return out


def _noncommutative():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    op = MPI.Op.Create(_matmul, commute=False)
    mat = MPI.DOUBLE.Create_contiguous(4).Commit()
    for k in (1, 5, 2000):  # 2000 matrices: 64 KB, more than one eager message
        every = [mats(p, k, k) for p in range(n)]
        total = chain(every)
        M = lambda a, cnt=k: [a, cnt, mat]  # noqa: E731
        for root in range(n):
            for inplace in (False, True):
                rb = np.zeros((k, 2, 2))
                sb = M(every[r])
                if inplace and r == root:
                    rb[:] = every[r]
                    sb = MPI.IN_PLACE
                c.Reduce(sb, M(rb), op, root)
                if r == root:
                    eq(rb, total, ("Reduce", k, root, inplace))
        for inplace in (False, True):
            rb = np.zeros((k, 2, 2))
            sb = M(every[r])
            if inplace:
                rb[:] = every[r]
                sb = MPI.IN_PLACE
            c.Allreduce(sb, M(rb), op)
            eq(rb, total, ("Allreduce", k, inplace))
            rb = np.zeros((k, 2, 2))
            if inplace:
                rb[:] = every[r]
            c.Scan(sb, M(rb), op)
            eq(rb, chain(every[:r + 1]), ("Scan", k, inplace))
            rb = np.zeros((k, 2, 2))
            if inplace:
                rb[:] = every[r]
            c.Exscan(sb, M(rb), op)
            if r:
                eq(rb, chain(every[:r]), ("Exscan", k, inplace))
        blocks = [mats(p, n * k, k + 1) for p in range(n)]
        full = chain(blocks)
        rb = np.zeros((k, 2, 2))
        c.Reduce_scatter_block(M(blocks[r]), M(rb), op)  # count: per block
        eq(rb, full[r * k:(r + 1) * k], ("Reduce_scatter_block", k))
        rc = [((p * 5 + 3) % 4) * k for p in range(n)]
        ins = [mats(p, sum(rc), k + 2) for p in range(n)]
        full = chain(ins) if sum(rc) else np.zeros((0, 2, 2))
        lo = sum(rc[:r])
        rb = np.zeros((rc[r], 2, 2))
        c.Reduce_scatter(M(ins[r], sum(rc)), M(rb, rc[r]), rc, op)
        eq(rb, full[lo:lo + rc[r]], ("Reduce_scatter", k, rc))
        # nonblocking and persistent forms keep the order too
        rb = np.zeros((k, 2, 2))
        c.Iallreduce(M(every[r]), M(rb), op).Wait()
        eq(rb, total, ("Iallreduce", k))
        sb = every[r].copy()
        rb = np.zeros((k, 2, 2))
        p = c.Scan_init(M(sb), M(rb), op)
        for it in range(3):
            ms = [mats(q, k, 100 + it) for q in range(n)]
            sb[:] = ms[r]
            p.Start()
            p.Wait()
            eq(rb, chain(ms[:r + 1]), ("Scan_init", k, it))
        p.Free()
    op.Free()
    mat.Free()
    return True


@pytest.mark.parametrize("n", NS)
def test_noncommutative_user_op_keeps_rank_order(n):
    assert run_ranks(_noncommutative, n, timeout=90) == [True] * n


def _elementwise():
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    # (a+1)(b+1)-1: commutative and associative; first/last: associative, not commutative
    cases = [
        (MPI.Op.Create_elementwise(lambda a, b: a * b + a + b, True), lambda xs: np.prod([x + 1 for x in xs], 0) - 1),
        (MPI.Op.Create_elementwise(lambda a, b: a, False), lambda xs: xs[0]),
        (MPI.Op.Create_elementwise(lambda a, b: b, False), lambda xs: xs[-1]),
    ]
    for op, ref in cases:
        for dt in ("f8", "i8"):
            for k in (0, 1, 7):
                every = [vals(p, k, dt, 31) % 2 for p in range(n)]  # 0/1: products stay small
                rb = np.zeros(k, dt)
                c.Allreduce(every[r], rb, op)
                eq(rb, ref(every).astype(dt) if k else every[r], ("Allreduce", op, dt, k))
                for root in range(n):
                    rb = np.zeros(k, dt)
                    c.Reduce(every[r], rb, op, root)
                    if r == root:
                        eq(rb, ref(every).astype(dt) if k else every[r], ("Reduce", op, dt, k, root))
                rb = np.zeros(k, dt)
                c.Scan(every[r], rb, op)
                eq(rb, ref(every[:r + 1]).astype(dt) if k else every[r], ("Scan", op, dt, k))
    for op, _ in cases:
        op.Free()
    return True


@pytest.mark.parametrize("n", [1, 3])
def test_create_elementwise_ops(n):
    assert run_ranks(_elementwise, n, timeout=90) == [True] * n


# --- barrier ----------------------------------------------------------------------------------------


def _barrier(path):
    import os
    import time

    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    for it in range(3):
        if r == it % n:
            time.sleep(0.05)  # the late rank: nobody may leave the barrier before it arrived
        with open(os.path.join(path, f"{it}.{r}"), "w"):
            pass
        if it == 0:
            c.Barrier()
        elif it == 1:
            c.Ibarrier().Wait()
        else:
            p = c.Barrier_init()
            MPI.Prequest.Startall([p])
            p.Wait()
            p.Free()
        assert sorted(os.listdir(path)) == sorted(f"{j}.{p}" for j in range(it + 1) for p in range(n)), it
        c.Barrier()
    b = c.Barrier_init()
    for _ in range(3):
        b.Start()
        b.Wait()
    b.Free()
    return True


@pytest.mark.parametrize("n", NS)
def test_barrier_lets_nobody_out_before_everyone_arrived(n, tmp_path):
    assert run_ranks(_barrier, n, timeout=60, args=(str(tmp_path),)) == [True] * n


# --- nonblocking and persistent forms ------------------------------------------------------------------


def _cases(MPI, c, k):
    """One case per collective: ``(name, args, fill(it), check(it))``; ``fill`` writes iteration
    ``it``'s inputs into the same buffers (persistent requests keep them), ``check`` asserts."""
    r, n = c.rank, c.size
    cases = []

    def add(name, args, fill, check):
        cases.append((name, args, fill, check))

    def v(p, cnt, it, tag, dt="f8"):
        return vals(p * 1000 + tag, cnt, dt, it)

    root = n - 1
    b = np.zeros(k)
    add("Bcast", (b, root), lambda it: b.__setitem__(slice(None), v(root, k, it, 1) if r == root else 0),
        lambda it: eq(b, v(root, k, it, 1), "Bcast"))
    gs, gr = np.zeros(k), np.zeros(n * k)
    add("Gather", (gs, gr, 0), lambda it: (gs.__setitem__(slice(None), v(r, k, it, 2)), gr.fill(0)),
        lambda it: r != 0 or eq(gr, np.concatenate([v(p, k, it, 2) for p in range(n)]), "Gather"))
    ss, sr = np.zeros(n * k), np.zeros(k)
    sroot = n // 2
    add("Scatter", (ss, sr, sroot), lambda it: ss.__setitem__(slice(None), v(sroot, n * k, it, 3)),
        lambda it: eq(sr, v(sroot, n * k, it, 3)[r * k:(r + 1) * k], "Scatter"))
    ags, agr = np.zeros(k), np.zeros(n * k)
    add("Allgather", (ags, agr), lambda it: ags.__setitem__(slice(None), v(r, k, it, 4)),
        lambda it: eq(agr, np.concatenate([v(p, k, it, 4) for p in range(n)]), "Allgather"))
    a2s, a2r = np.zeros(n * k), np.zeros(n * k)
    add("Alltoall", (a2s, a2r), lambda it: a2s.__setitem__(slice(None), v(r, n * k, it, 5)),
        lambda it: eq(a2r, np.concatenate([v(q, n * k, it, 5)[r * k:(r + 1) * k] for q in range(n)]), "Alltoall"))
    counts, displs, span = _layout(n, 1, reverse=True)
    counts = [x * k for x in counts]
    displs = [sum(counts[p + 1:]) + 2 * (n - p) for p in range(n)]
    span = max(d + x for d, x in zip(displs, counts)) + 1
    gvs, gvr = np.zeros(counts[r]), np.full(span, -1.0)

    def placed(blocks):
        out = np.full(span, -1.0)
        for p in range(n):
            out[displs[p]:displs[p] + counts[p]] = blocks[p]
        return out

    add("Gatherv", (gvs, [gvr, counts, displs, MPI.DOUBLE], 0),
        lambda it: gvs.__setitem__(slice(None), v(r, counts[r], it, 6)),
        lambda it: r != 0 or eq(gvr, placed([v(p, counts[p], it, 6) for p in range(n)]), "Gatherv"))
    svs, svr = np.full(span, -1.0), np.zeros(counts[r])
    add("Scatterv", ([svs, counts, displs, MPI.DOUBLE], svr, sroot),
        lambda it: svs.__setitem__(slice(None), placed([v(p, counts[p], it, 7) for p in range(n)])),
        lambda it: eq(svr, v(r, counts[r], it, 7), "Scatterv"))
    avs, avr = np.zeros(counts[r]), np.full(span, -1.0)
    add("Allgatherv", (avs, [avr, counts, displs, MPI.DOUBLE]),
        lambda it: avs.__setitem__(slice(None), v(r, counts[r], it, 8)),
        lambda it: eq(avr, placed([v(p, counts[p], it, 8) for p in range(n)]), "Allgatherv"))
    # Alltoallv / Alltoallw: c(q, p) = (q + 2p) % 3 * k items from q to p
    sc = [(r + 2 * p) % 3 * k for p in range(n)]
    rc = [(q + 2 * r) % 3 * k for q in range(n)]
    sd = [sum(sc[:p]) + p for p in range(n)]
    rd = [sum(rc[p + 1:]) + (n - p) for p in range(n)]
    avvs, avvr = np.zeros(sum(sc) + n), np.zeros(sum(rc) + n + 1)

    def a2v_fill(it):
        for p in range(n):
            avvs[sd[p]:sd[p] + sc[p]] = v(r * 10 + p, sc[p], it, 9)
        avvr.fill(0)

    def a2v_check(it):
        want = np.zeros_like(avvr)
        for q in range(n):
            want[rd[q]:rd[q] + rc[q]] = v(q * 10 + r, rc[q], it, 9)
        eq(avvr, want, "Alltoallv")

    add("Alltoallv", ([avvs, sc, sd, MPI.DOUBLE], [avvr, rc, rd, MPI.DOUBLE]), a2v_fill, a2v_check)
    aws, awr = np.zeros(sum(sc) + n), np.zeros(sum(rc) + n + 1)

    def a2w_fill(it):
        for p in range(n):
            aws[sd[p]:sd[p] + sc[p]] = v(r * 10 + p, sc[p], it, 10)
        awr.fill(0)

    def a2w_check(it):
        want = np.zeros_like(awr)
        for q in range(n):
            want[rd[q]:rd[q] + rc[q]] = v(q * 10 + r, rc[q], it, 10)
        eq(awr, want, "Alltoallw")

    add("Alltoallw", ([aws, sc, [8 * d for d in sd], [MPI.DOUBLE] * n],
                      [awr, rc, [8 * d for d in rd], [MPI.DOUBLE] * n]), a2w_fill, a2w_check)
    # reductions
    rroot = 1 % n
    rs, rr = np.zeros(k, "i4"), np.zeros(k, "i4")
    add("Reduce", (rs, rr, MPI.SUM, rroot), lambda it: (rs.__setitem__(slice(None), v(r, k, it, 11, "i4")), rr.fill(0)),
        lambda it: r != rroot or eq(rr, fold("SUM", [v(p, k, it, 11, "i4") for p in range(n)]), "Reduce"))
    ars, arr = np.zeros(k), np.zeros(k)
    add("Allreduce", (ars, arr, MPI.MAX), lambda it: ars.__setitem__(slice(None), v(r, k, it, 12)),
        lambda it: eq(arr, fold("MAX", [v(p, k, it, 12) for p in range(n)]), "Allreduce"))
    rbs, rbr = np.zeros(n * k, "i8"), np.zeros(k, "i8")
    add("Reduce_scatter_block", (rbs, rbr, MPI.BXOR),
        lambda it: rbs.__setitem__(slice(None), v(r, n * k, it, 13, "i8")),
        lambda it: eq(rbr, fold("BXOR", [v(p, n * k, it, 13, "i8") for p in range(n)])[r * k:(r + 1) * k],
                      "Reduce_scatter_block"))
    rsc = _rs_counts(n, k)
    lo = sum(rsc[:r])
    rss, rsr = np.zeros(sum(rsc)), np.zeros(rsc[r])
    add("Reduce_scatter", (rss, rsr, rsc, MPI.SUM),
        lambda it: rss.__setitem__(slice(None), v(r, sum(rsc), it, 14)),
        lambda it: eq(rsr, fold("SUM", [v(p, sum(rsc), it, 14) for p in range(n)])[lo:lo + rsc[r]],
                      "Reduce_scatter"))
    scs, scr = np.zeros(k, "i4"), np.zeros(k, "i4")
    add("Scan", (scs, scr, MPI.PROD), lambda it: scs.__setitem__(slice(None), v(r, k, it, 15, "i4")),
        lambda it: eq(scr, fold("PROD", [v(p, k, it, 15, "i4") for p in range(r + 1)]), "Scan"))
    exs, exr = np.zeros(k), np.zeros(k)
    add("Exscan", (exs, exr, MPI.SUM), lambda it: exs.__setitem__(slice(None), v(r, k, it, 16)),
        lambda it: r == 0 or eq(exr, fold("SUM", [v(p, k, it, 16) for p in range(r)]), "Exscan"))
    add("Barrier", (), lambda it: None, lambda it: None)
    return cases


def _nonblocking(sizes):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r = c.rank
    for k in sizes:
        cases = _cases(MPI, c, k)
        for it, how in enumerate(("waitall reversed", "waitany", "testall", "wait, rank-dependent order")):
            for _, _, fill, _ in cases:
                fill(it)
            reqs = [getattr(c, "I" + name[0].lower() + name[1:])(*args) for name, args, _, _ in cases]
            if how == "waitall reversed":
                MPI.Request.Waitall(reqs[::-1])
            elif how == "waitany":
                left = list(reqs)
                done = 0
                while done < len(reqs):
                    i = MPI.Request.Waitany(left)
                    assert i != MPI.UNDEFINED and not left[i], (k, i)
                    done += 1
                assert MPI.Request.Waitany(left) == MPI.UNDEFINED
            elif how == "testall":
                while not MPI.Request.Testall(reqs):
                    pass
            else:
                order = list(range(len(reqs)))
                order = order[r % len(order):] + order[:r % len(order)]
                for i in (order if r % 2 else order[::-1]):
                    reqs[i].Wait()
            for name, _, _, check in cases:
                check(it)
    return True


@pytest.mark.parametrize("n", NS)
def test_nonblocking_many_outstanding_completed_in_any_order(n):
    assert run_ranks(_nonblocking, n, timeout=60, args=((0, 1, 7),)) == [True] * n


def _persistent(sizes):
    from gpumpi import MPI

    c = MPI.COMM_WORLD
    for k in sizes:
        cases = _cases(MPI, c, k)
        reqs = [getattr(c, name + "_init")(*args) for name, args, _, _ in cases]
        for it in range(3):
            for _, _, fill, _ in cases:
                fill(it)  # new contents in the same buffers
            if it < 2:
                for p in reqs:
                    p.Start()
                for p in reqs[::-1]:
                    p.Wait()
            else:
                MPI.Prequest.Startall(reqs)
                MPI.Request.Waitall(reqs)
            for name, _, _, check in cases:
                check(it)
        for p in reqs:
            p.Free()
    return True


@pytest.mark.parametrize("n", NS)
def test_persistent_started_three_times_with_new_contents_and_startall(n):
    assert run_ranks(_persistent, n, timeout=60, args=((0, 1, 7),)) == [True] * n


def _nonblocking_and_persistent(sizes):
    return _nonblocking(sizes) and _persistent(sizes)


@pytest.mark.parametrize("n", [2, 3])
def test_nonblocking_and_persistent_one_mebibyte(n):
    assert run_ranks(_nonblocking_and_persistent, n, timeout=45, args=((BIG // 4,),)) == [True] * n
