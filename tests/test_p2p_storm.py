"""A storm of small mixed messages between two ranks through the compiled methods: nothing lost,
duplicated, reordered or corrupted.

Theory of operation
===================
Both ranks send and receive at once, in windows of :data:`W`: each posts the receives of the
peer's next ``W`` messages, then sends its own next ``W``, then completes everything.  Message
``i`` of a direction is a pure function of ``(seed, sender, i)`` (:func:`_spec`): an array
(8 B, a few hundred bytes, 4 KiB, within 64 bytes either side of the eager limit, or twice
it: a rendezvous) of a random dtype on the buffer communicator, or a small dict on the object
communicator; a tag of two; its first eight bytes (or the dict's ``"i"``) are ``i`` and the
rest is seeded noise.  The receiver regenerates the spec, so it knows what must arrive and
receives it in one of several ways: ``Irecv`` from the peer or ``ANY_SOURCE``, with its tag
or ``ANY_TAG``, into an array of its exact size or a larger one, as a bare array or as
``[array, MPI.BYTE]``; an object by ``irecv``.  Messages of one sender on one communicator
match in send order whatever the receive's wildcards (MPI's non-overtaking rule), so each
receive must get exactly message ``i``: its status (source, tag, count) and every byte are
checked.  ``GPUMPI_STORM_MESSAGES`` sets the number of messages in all (both directions); CI
runs a small storm, a release check 10**6.
"""

import os

import numpy as np

from gpumpi.testing import run_ranks

W = 64
MESSAGES = int(os.environ.get("GPUMPI_STORM_MESSAGES", "20000"))
DTYPES = ("u1", "i4", "f8", "i8")


def _spec(seed: int, src: int, i: int, eager: int):
    """``(kind, nbytes or None, dtype, tag, rng)`` of message ``i`` from ``src``: kind 0 an array,
    1 an object."""
    rng = np.random.default_rng([seed, src, i])
    k = int(rng.integers(0, 20))
    if k < 3:
        return 1, None, None, 3, rng
    size = (8, 8, 8, 200, 200, 4096, 4096, eager - 64, eager - 8, eager, eager + 8, eager + 64, 2 * eager, 16, 800,
            64, 1024)[k - 3]
    dt = DTYPES[int(rng.integers(0, len(DTYPES)))]
    size -= size % np.dtype(dt).itemsize
    return 0, max(size, 8), dt, int(rng.integers(1, 3)), rng


def _payload(seed: int, src: int, i: int, eager: int):
    kind, n, dt, tag, rng = _spec(seed, src, i, eager)
    if kind:
        return kind, {"i": i, "src": src, "xs": list(range(i % 9)), "s": "z" * (i % 31)}, tag
    raw = rng.integers(0, 256, n, dtype=np.uint8)
    raw[:8] = np.frombuffer(np.int64(i).tobytes(), np.uint8)
    return kind, raw.view(dt), tag


def _storm(seed: int, total: int):
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    world = MPI.COMM_WORLD
    r = world.rank
    peer = 1 - r
    B, O = world.Dup(), world.Dup()
    eager = rt.ENGINE.eager_limit
    per_dir = total // 2
    checked = 0
    for w0 in range(0, per_dir, W):
        idx = range(w0, min(w0 + W, per_dir))
        pick = np.random.default_rng([seed, 7, r, w0])
        recvs, keep, oreqs, oidx = [], [], [], []
        for i in idx:
            kind, want, tag = _payload(seed, peer, i, eager)
            if kind:
                oreqs.append(O.irecv(source=peer if pick.integers(0, 2) else MPI.ANY_SOURCE, tag=tag))
                oidx.append((i, want))
                continue
            extra = int(pick.integers(0, 2)) * int(pick.integers(1, 64)) * want.itemsize
            buf = np.full(want.nbytes + extra, 0xEE, dtype=np.uint8).view(want.dtype)
            spec = buf if pick.integers(0, 2) else [buf, MPI.BYTE]
            src = peer if pick.integers(0, 2) else MPI.ANY_SOURCE
            tg = tag if pick.integers(0, 2) else MPI.ANY_TAG
            st = MPI.Status()
            recvs.append(B.Irecv(spec, src, tg))
            keep.append((i, want, tag, buf, st))
        sends = []
        for i in idx:
            kind, out, tag = _payload(seed, r, i, eager)
            sends.append((O.isend if kind else B.Isend)(out, peer, tag))
        sts = [MPI.Status() for _ in recvs]
        MPI.Request.Waitall(recvs, sts)
        objs = MPI.Request.waitall(oreqs)
        MPI.Request.Waitall(sends)
        for (i, want, tag, buf, _), st in zip(keep, sts):
            got = (st.Get_source(), st.Get_tag(), st.Get_count(MPI.BYTE))
            assert got == (peer, tag, want.nbytes), f"message {i}: status {got}, want {(peer, tag, want.nbytes)}"
            assert np.array_equal(buf[:want.size].view(np.uint8), want.view(np.uint8)), f"message {i}: bytes differ"
            assert (buf[want.size:].view(np.uint8) == 0xEE).all(), f"message {i}: written past its end"
            checked += 1
        for (i, want), got in zip(oidx, objs):
            assert got == want, f"object message {i}: {got!r}, want {want!r}"
            checked += 1
    B.Free()
    O.Free()
    return checked, rt.ENGINE.crings is not None


def test_storm_of_mixed_messages_loses_duplicates_and_reorders_nothing():
    got = run_ranks(_storm, 2, args=(2027, MESSAGES), timeout=120 + MESSAGES // 2000,
                    env={"GPUMPI_FASTPATH": "on"})
    assert [g[0] for g in got] == [MESSAGES // 2] * 2
    from gpumpi import _compiled

    if _compiled.module() is not None:
        assert all(g[1] for g in got)  # the compiled methods were there to serve the storm
