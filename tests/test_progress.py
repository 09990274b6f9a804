"""The progress engine's handling of peers whose process is gone (gpumpi._progress)."""

import subprocess
import sys

import numpy as np
import pytest

from gpumpi.testing import one_node_only, run_ranks

pytestmark = pytest.mark.timeout(90)


def _read_from_a_vanished_sender():
    from gpumpi import MPI
    from gpumpi.ipc import cma

    c = MPI.COMM_WORLD
    eng = MPI._rt.ENGINE
    n = 1 << 17
    if c.rank == 1:
        c.Isend(np.arange(n, dtype=float), 0, 4).Free()
        return None  # Finalize gives the send up once rank 0 finalized without it
    if not eng.region("host", "cma").ok or not cma.available():
        pytest.skip("cross-memory attach is not available here")
    # rank 1's process as rank 0 will find it: gone (an exited, reaped process)
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    eng.world._pids[1] = p.pid
    with pytest.raises(MPI.Exception) as ei:
        c.Recv(np.empty(n), 1, 4)
    assert ei.value.Get_error_class() == MPI.ERR_PROC_FAILED, ei.value
    assert "rank 1" in str(ei.value)
    # the peer is lost, cross-memory attach is not
    assert eng.region("host", "cma").ok
    assert 1 in eng.failed
    with pytest.raises(MPI.Exception) as ei:
        c.Send(np.zeros(1), 1, 5)
    assert ei.value.Get_error_class() == MPI.ERR_PROC_FAILED
    return "failed fast"


def test_a_sender_whose_process_is_gone_fails_the_receive_at_once():
    """Reading an exited sender's memory (ESRCH) fails the receive with ERR_PROC_FAILED; it
    used to turn cross-memory attach off and wait for a push that never came."""
    one_node_only(2, "cross-memory attach (and gpumpirun's failure handling)")
    assert run_ranks(_read_from_a_vanished_sender, 2, timeout=30) == ["failed fast", None]


def _unexpected_bursts():
    """Bursts of eager messages that all arrive before their receives (unexpected), received by
    Recv, Irecv, Mprobe/Mrecv and a truncating Recv: every payload intact although the engine
    reuses the buffers it copies unexpected payloads into (Engine._hold/_unhold)."""
    from gpumpi import MPI
    from gpumpi import _runtime as rt

    c = MPI.COMM_WORLD
    eng = rt.ENGINE
    n, k = 16384, 40
    pay = lambda rnd, i: (np.arange(n, dtype=np.uint32) * 7 + rnd * 1000 + i).astype(np.uint8)  # noqa: E731
    held = []
    for rnd in range(4):
        if c.rank == 0:
            for i in range(k):
                c.Send(pay(rnd, i), 1, tag=i)
            c.Barrier()
        else:
            c.Barrier()  # every message is in (the eager sends completed): all unexpected now
            got = np.empty(n, np.uint8)
            for i in range(k):
                if rnd == 0:
                    c.Recv(got, 0, tag=i)
                elif rnd == 1:
                    c.Irecv(got, 0, tag=i).Wait()
                elif rnd == 2:
                    c.Mprobe(0, i).Recv(got)
                else:
                    if i % 2:
                        small = np.empty(n // 2, np.uint8)
                        with pytest.raises(MPI.Exception) as e:
                            c.Recv(small, 0, tag=i)
                        assert e.value.Get_error_class() == MPI.ERR_TRUNCATE
                        assert np.array_equal(small, pay(rnd, i)[:n // 2])
                        continue
                    c.Recv(got, 0, tag=i)
                assert np.array_equal(got, pay(rnd, i)), (rnd, i)
            held.append(eng.held_bytes)
    return held


def test_unexpected_payload_buffers_are_reused_and_never_mixed_up():
    held = run_ranks(_unexpected_bursts, 2)[1]
    assert held[0] > 0 and max(held) <= 16 << 20, held  # the buffers came back to the engine
