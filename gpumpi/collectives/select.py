"""Linear schedules for every collective (interim: the algorithm table replaces this module)."""
from .schedule import Schedule, SBUF, RBUF, SEND, RECV, RED, COPY


def build(coll, rank, size, *, root=0, n=0, counts=None, scounts=None, rcounts=None, commute=True,
          inplace=False, unit=1, memory="host", algorithm=None):
    s = Schedule(algorithm="linear")
    r, P = rank, size
    if coll == "barrier":
        k = 1
        while k < P:
            s.add((SEND, (r + k) % P, RBUF, 0, 0), (RECV, (r - k) % P, RBUF, 0, 0))
            k <<= 1
    elif coll == "bcast":
        if r == root:
            s.add(*[(SEND, p, RBUF, 0, n) for p in range(P) if p != root])
        else:
            s.add((RECV, root, RBUF, 0, n))
    elif coll in ("gather", "gatherv"):
        if r == root:
            cs = counts if coll == "gatherv" else [n] * P
            off = [sum(cs[:i]) for i in range(P)]
            s.add(*[(RECV, p, RBUF, off[p], off[p] + cs[p]) for p in range(P) if p != root])
            if not inplace:
                s.add((COPY, SBUF, 0, RBUF, off[root], cs[root]))
        else:
            s.add((SEND, root, SBUF, 0, n))
    elif coll in ("scatter", "scatterv"):
        if r == root:
            cs = counts if coll == "scatterv" else [n] * P
            off = [sum(cs[:i]) for i in range(P)]
            s.add(*[(SEND, p, SBUF, off[p], off[p] + cs[p]) for p in range(P) if p != root])
            if not inplace:
                s.add((COPY, SBUF, off[root], RBUF, 0, cs[root]))
        else:
            s.add((RECV, root, RBUF, 0, n))
    elif coll in ("allgather", "allgatherv"):
        cs = counts if coll == "allgatherv" else [n] * P
        off = [sum(cs[:i]) for i in range(P)]
        if not inplace:
            s.add((COPY, SBUF, 0, RBUF, off[r], cs[r]))
        s.add(*[(SEND, p, RBUF, off[r], off[r] + cs[r]) for p in range(P) if p != r],
              *[(RECV, p, RBUF, off[p], off[p] + cs[p]) for p in range(P) if p != r])
    elif coll in ("alltoall", "alltoallv"):
        sc = scounts if coll == "alltoallv" else [n] * P
        rc = rcounts if coll == "alltoallv" else [n] * P
        so = [sum(sc[:i]) for i in range(P)]
        ro = [sum(rc[:i]) for i in range(P)]
        src = SBUF
        if inplace:
            t = s.new_tmp(sum(rc))
            s.add((COPY, RBUF, 0, t, 0, sum(rc)))
            src = t
            sc, so = rc, ro
        s.add((COPY, src, so[r], RBUF, ro[r], rc[r]),
              *[(SEND, p, src, so[p], so[p] + sc[p]) for p in range(P) if p != r],
              *[(RECV, p, RBUF, ro[p], ro[p] + rc[p]) for p in range(P) if p != r])
        # the local copy must come after comms (in-place aliasing): rounds run comms then locals
    elif coll in ("reduce", "allreduce", "scan", "exscan", "reduce_scatter_block", "reduce_scatter"):
        tot = n
        if coll == "reduce_scatter_block":
            tot = n * P
        if coll == "reduce_scatter":
            tot = sum(counts)
        inp = RBUF if inplace else SBUF
        acc = s.new_tmp(tot)
        t = s.new_tmp(tot)
        s.add((COPY, inp, 0, acc, 0, tot))
        # everyone sends input to 0 / all: linear allgather of inputs then local ordered reduce
        if coll in ("reduce",) and r != root:
            s.add((SEND, root, inp, 0, tot))
            return s
        if coll == "reduce":
            # root gathers from all in rank order
            res = s.new_tmp(tot)
            for p in range(P):
                if p == r:
                    s.add((COPY, inp, 0, t, 0, tot))
                else:
                    s.add((RECV, p, t, 0, tot))
                if p == 0:
                    s.add((COPY, t, 0, res, 0, tot))
                else:
                    s.add((RED, t, 0, res, 0, tot, False))
            s.add((COPY, res, 0, RBUF, 0, tot))
            return s
        # all others: everyone exchanges
        s.add(*[(SEND, p, acc, 0, tot) for p in range(P) if p != r])
        res = s.new_tmp(tot)
        upto = {"scan": r + 1, "exscan": r}.get(coll, P)
        for p in range(P):
            if p == r:
                s.add((COPY, acc, 0, t, 0, tot))
            else:
                s.add((RECV, p, t, 0, tot))
            if p >= upto:
                continue
            if p == 0:
                s.add((COPY, t, 0, res, 0, tot))
            else:
                s.add((RED, t, 0, res, 0, tot, False))
        if coll == "exscan" and r == 0:
            return s
        if coll == "reduce_scatter_block":
            s.add((COPY, res, r * n, RBUF, 0, n))
        elif coll == "reduce_scatter":
            off = sum(counts[:r])
            s.add((COPY, res, off, RBUF, 0, counts[r]))
        else:
            s.add((COPY, res, 0, RBUF, 0, tot))
    return s
