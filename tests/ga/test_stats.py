"""GA_Print_stats (gpumpi.ga.stats): the counts of creates, destroys and one-sided calls, the
processes each call touched and the bytes it moved (all, and those of other processes' blocks),
at 1-4 ranks; expectations from the array's distribution (``ga.distribution``), computed apart
from the transfer code, and GA's printed layout (``pnga_print_stats``)."""

import io

import numpy as np
import pytest

from gpumpi.testing import run_ranks


def _body():
    from gpumpi import ga
    from gpumpi.ga import stats

    me, n = ga.nodeid(), ga.nnodes()
    calls0, procs0, bytes0, remote0 = (list(x) for x in (stats.CALLS, stats.PROCS, stats.BYTES, stats.REMOTE))
    dims = (4 * n + 1, 3)
    g = ga.create(ga.C_DBL, dims, "A")
    owners, mine, mine_col0 = 0, 0, 0
    for p in range(n):
        lo, hi = ga.distribution(g, p)
        if lo[0] >= 0:
            owners += 1
            if p == me:
                mine = int(np.prod(np.asarray(hi) - np.asarray(lo)))
                mine_col0 = int(hi[0] - lo[0]) if lo[1] == 0 else 0
    total = dims[0] * dims[1]
    if me == 0:
        ga.put(g, np.ones(dims))  # the whole array: every owner
    ga.sync()
    got = ga.get(g)  # every rank, the whole array
    ga.sync()  # (GA orders a get and an acc of another process only by sync)
    ga.acc(g, np.ones(dims), alpha=2.0)
    ga.sync()
    c = ga.create(ga.C_INT, (1,), "counter")
    lo, _ = ga.distribution(c, me)
    owns_counter = lo[0] == 0
    ga.read_inc(c, (0,))
    subs = [(k, 0) for k in range(dims[0])]
    vals = ga.gather(g, subs)
    ga.sync()
    ga.destroy(c)
    ga.destroy(g)
    d = lambda now, then: [a - b for a, b in zip(now, then)]  # noqa: E731
    calls, procs = d(stats.CALLS, calls0), d(stats.PROCS, procs0)
    nbytes, remote = d(stats.BYTES, bytes0), d(stats.REMOTE, remote0)
    S = stats
    ok = {
        "values": bool((got == 1).all() and (vals == 1 + 2 * n).all()),
        "calls": calls == [2, 2, 1, 1 if me == 0 else 0, 1, 0, 1, 1],
        "procs": procs[S.GET] == owners and procs[S.PUT] == (owners if me == 0 else 0) and procs[S.ACC] == owners,
        "bytes": nbytes[S.GET] == 8 * total and nbytes[S.ACC] == 8 * total and nbytes[S.READ_INC] == 4
        and nbytes[S.GATHER] == 8 * dims[0] and nbytes[S.PUT] == (8 * total if me == 0 else 0),
        "remote": remote[S.GET] == 8 * (total - mine) and remote[S.ACC] == 8 * (total - mine)
        and remote[S.READ_INC] == (0 if owns_counter else 4) and remote[S.GATHER] == 8 * (dims[0] - mine_col0),
    }
    out = io.StringIO()
    ga.print_stats(out)
    text = out.getvalue().splitlines()
    ok["printed"] = (text[1].split() == ["GA", "Statistics", "for", "process", str(me)]
                     and text[4].split()[:2] == ["create", "destroy"]
                     and text[5].startswith("calls: ") and text[6].startswith("number of processes/call ")
                     and text[7].startswith("bytes total:") and len(text[7].split()) == 8
                     and text[9].startswith("Max memory consumed for GA by this process: "))
    return ok


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_print_stats_counts_what_the_calls_moved(n):
    for res in run_ranks(_body, n, timeout=90):
        assert all(res.values()), res
