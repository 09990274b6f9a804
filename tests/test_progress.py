"""The progress engine's handling of peers whose process is gone (gpumpi._progress)."""

import subprocess
import sys

import numpy as np
import pytest

from gpumpi.testing import run_ranks

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
    assert run_ranks(_read_from_a_vanished_sender, 2, timeout=30) == ["failed fast", None]
