"""Staging slabs (gpumpi.ipc.slab): the slot handshake alone, then under load across ranks,
and a peer that dies holding slots."""

import mmap

import numpy as np
import pytest

from gpumpi.ipc.slab import MAX_SLOTS, PAGE, Slab, check_geometry, chunk_for, slab_size
from gpumpi.testing import WORLD_SIZES, run_ranks

MiB = 1 << 20


@pytest.mark.parametrize(("nbytes", "slot", "want"), [
    (1, 8 * MiB, 65536),  # small messages: one 64 KiB chunk
    (MiB, 8 * MiB, 256 << 10),  # a quarter of the message
    (MiB + 1, 8 * MiB, (256 << 10) + PAGE),  # page-rounded up
    (16 * MiB, 8 * MiB, 4 * MiB),
    (64 * MiB, 8 * MiB, 8 * MiB),  # never more than a slot
    (MiB, 65536, 65536),
    (MiB, PAGE, PAGE),  # a slot smaller than 64 KiB bounds the chunk
])
def test_chunk_for(nbytes, slot, want):
    assert chunk_for(nbytes, slot) == want
    assert want <= slot and want % PAGE == 0


@pytest.mark.parametrize(("slots", "size"), [(0, PAGE), (MAX_SLOTS + 1, PAGE), (4, 0), (4, PAGE + 1), (4, 1000)])
def test_bad_geometry_is_refused(slots, size):
    with pytest.raises(ValueError, match="GPUMPI_STAGE"):
        check_geometry(slots, size)


def _pair(slots=3, size=PAGE):
    """The owner's and a receiver's views of one slab (as two processes map it)."""
    m = mmap.mmap(-1, slab_size(slots, size))
    return Slab(memoryview(m), slots, size), Slab(memoryview(m), slots, size), m


def test_slots_are_handed_over_and_back():
    owner, peer, _m = _pair()
    got = [owner.acquire(7) for _ in range(3)]
    assert sorted(got) == [0, 1, 2] and owner.acquire(7) == -1  # all held
    assert peer.in_use() == 3
    owner.view(1, 5)[:] = b"hello"
    assert bytes(peer.view(1, 5)) == b"hello"  # the receiver sees the owner's data
    peer.release(1)  # the receiver is done with slot 1
    assert owner.acquire(8) == 1 and owner.holder[1] == 8
    owner.unacquire(1)  # a failed copy: never handed over
    assert owner.in_use() == 2 and owner.acquire(9) == 1


def test_reclaim_takes_back_only_the_dead_peers_slots():
    owner, _peer, _m = _pair(4)
    holders = [3, 5, 3, 6]
    for p in holders:
        owner.acquire(p)
    owner.reclaim({3, 9})
    assert owner.in_use() == 2
    assert [owner.acquire(1), owner.acquire(1), owner.acquire(1)] == [0, 2, -1]


def test_view_bounds():
    owner, _peer, _m = _pair(2, PAGE)
    assert len(owner.view(1, PAGE)) == PAGE
    for k, n in ((2, 1), (-1, 1), (0, PAGE + 1), (0, -1)):
        with pytest.raises(ValueError, match="no such slot"):
            owner.view(k, n)


def _contention(per):
    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    eng = MPI._rt.ENGINE
    sizes = [300_000, 5, 1 << 20]  # several chunks each (64 KiB slots), one tiny message
    reqs, dsts = [], []
    for p in range(n):
        for k in range(per):
            dst = SimDeviceArray.zeros(sizes[k % 3] // 8 + 1)
            dsts.append((p, k, dst))
            reqs.append(c.Irecv(dst, p, k))
    srcs = []
    for p in range(n):
        for k in range(per):
            a = SimDeviceArray.from_numpy(np.arange(sizes[k % 3] // 8 + 1, dtype=np.float64) + 1000 * r + k)
            srcs.append(a)
            reqs.append(c.Isend(a, p, k))
    MPI.Request.Waitall(reqs)
    for p, k, dst in dsts:
        assert np.array_equal(dst.get(), np.arange(sizes[k % 3] // 8 + 1, dtype=np.float64) + 1000 * p + k), (p, k)
    c.Barrier()
    assert eng.staging.slabs[r].in_use() == 0  # every slot came back
    return eng.staging.stage


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_every_rank_stages_to_every_rank_through_two_slots(n):
    env = {"GPUMPI_TRANSPORTS": "device:staging", "GPUMPI_STAGE_CHUNK": "65536", "GPUMPI_STAGE_SLOTS": "2"}
    assert run_ranks(_contention, n, args=(3,), env=env, timeout=120) == [(2, 65536)] * n


def _dies_holding_slots(path):
    import os

    from gpumpi import MPI
    from gpumpi.testing import SimDeviceArray

    c = MPI.COMM_WORLD
    big = np.arange(1 << 17, dtype=np.float64)  # 1 MiB: 16 chunks of 64 KiB, 2 slots
    if c.rank == 0:
        req = c.Isend(SimDeviceArray.from_numpy(big), 1, 0)
        c.Send(np.ones(1), 1, 5)
        with pytest.raises(MPI.Exception) as ei:
            req.Wait()
        assert ei.value.Get_error_class() == MPI.ERR_PROC_FAILED
        c.Send(SimDeviceArray.from_numpy(big + 1), 2, 0)  # needs the slots rank 1 held
        with open(f"{path}.0", "w") as f:
            f.write("sent")
    elif c.rank == 1:
        c.Recv(np.empty(1), 0, 5)  # the RTS came first: this receive matches it and sends CTS
        c.Irecv(SimDeviceArray.zeros(big.size), 0, 0)
        os._exit(3)  # holding whatever slots rank 0 has handed over by now
    else:
        dst = SimDeviceArray.zeros(big.size)
        c.Recv(dst, 0, 0)
        assert np.array_equal(dst.get(), big + 1)
        with open(f"{path}.2", "w") as f:
            f.write("received")


def test_slots_held_by_a_dead_peer_are_taken_back(tmp_path):
    from gpumpi.testing import RanksFailed

    path = str(tmp_path / "out")
    env = {"GPUMPI_TRANSPORTS": "device:staging", "GPUMPI_STAGE_CHUNK": "65536", "GPUMPI_STAGE_SLOTS": "2"}
    with pytest.raises(RanksFailed) as ei:
        run_ranks(_dies_holding_slots, 3, args=(path,), env=env, timeout=60)
    assert "3" in str(ei.value)
    with open(f"{path}.0") as f0, open(f"{path}.2") as f2:
        assert (f0.read(), f2.read()) == ("sent", "received")


def test_stage_settings_are_read_and_checked():
    from gpumpi import _config

    cfg = _config._read({})
    assert (cfg.stage_chunk, cfg.stage_slots) == (8 * MiB, 4)
    cfg = _config._read({"GPUMPI_STAGE_CHUNK": "65536", "GPUMPI_STAGE_SLOTS": "7"})
    assert (cfg.stage_chunk, cfg.stage_slots) == (65536, 7)
    for env in ({"GPUMPI_STAGE_SLOTS": "0"}, {"GPUMPI_STAGE_SLOTS": "33"}, {"GPUMPI_STAGE_CHUNK": "5000"}):
        with pytest.raises(ValueError, match="GPUMPI_STAGE"):
            _config._read(env)


def test_job_segment_holds_one_slab_per_rank_after_the_rings():
    from gpumpi.ipc.jobseg import JobSegment

    seg = JobSegment.create(3, 65536, 2 * PAGE, 3)
    try:
        assert (seg.stage_slot, seg.stage_slots) == (2 * PAGE, 3)
        views = [seg.slab_view(r) for r in range(3)]
        assert all(len(v) == slab_size(3, 2 * PAGE) for v in views)
        rings_end = max(np.frombuffer(seg.ring_view(a, b), np.uint8).ctypes.data + len(seg.ring_view(a, b))
                        for a in range(3) for b in range(3))
        starts = [np.frombuffer(v, np.uint8).ctypes.data for v in views]
        assert starts[0] >= rings_end and starts[1] == starts[0] + len(views[0]) and starts[2] == starts[1] + len(views[1])
        end = starts[2] + len(views[2])
        assert end == np.frombuffer(seg.buf, np.uint8).ctypes.data + len(seg.buf)  # the last bytes of the segment
        del views
    finally:
        seg.close()
