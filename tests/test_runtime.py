"""The runtime under the real launcher: Abort, uncaught exceptions, singletons, NVTX, Finalize."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from gpumpi.testing import run_ranks


def _shm():
    return sorted(e for e in os.listdir("/dev/shm") if "gpumpi" in e)


def _run(tmp_path, code, n=2, timeout=60, env=None, launcher=True, extra=()):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(code))
    cmd = [sys.executable, "-m", "gpumpi", *extra, "-n", str(n), str(prog)] if launcher else [sys.executable,
                                                                                             str(prog)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    return p, time.monotonic() - t0


@pytest.mark.timeout(60)
def test_abort_ends_the_job_with_its_code(tmp_path):
    before = _shm()
    p, dt = _run(tmp_path, """
        import numpy as np
        from gpumpi import MPI
        c = MPI.COMM_WORLD
        if c.rank == 1:
            c.Abort(9)
        c.Recv(np.zeros(1), 1, 0)   # would block forever
    """, n=3)
    assert p.returncode == 9, p.stderr
    assert dt < 15
    assert _shm() == before


@pytest.mark.timeout(60)
def test_uncaught_exception_prints_once_with_rank_prefix(tmp_path):
    p, _ = _run(tmp_path, """
        from gpumpi import MPI
        if MPI.COMM_WORLD.rank == 1:
            raise ValueError("boom-from-rank-1")
        MPI.COMM_WORLD.Barrier()
    """)
    assert p.returncode == 1
    assert p.stderr.count("ValueError: boom-from-rank-1") == 1, p.stderr
    assert "[rank 1] Traceback" in p.stderr


@pytest.mark.timeout(60)
def test_blocked_peer_raises_proc_failed(tmp_path):
    p, dt = _run(tmp_path, """
        import os, sys
        import numpy as np
        from gpumpi import MPI
        c = MPI.COMM_WORLD
        if c.rank == 1:
            os._exit(4)
        try:
            c.Recv(np.zeros(1), 1, 0)
        except MPI.Exception as e:
            print("NOTICED", e.Get_error_class() == MPI.ERR_PROC_FAILED, flush=True)
            sys.exit(0)
    """)
    assert p.returncode == 4
    assert "NOTICED True" in p.stdout, (p.stdout, p.stderr)
    assert dt < 10


@pytest.mark.timeout(60)
def test_singleton_is_a_world_of_one(tmp_path):
    p, _ = _run(tmp_path, """
        import numpy as np
        from gpumpi import MPI
        c = MPI.COMM_WORLD
        a = np.arange(100000.0); b = np.empty_like(a)
        c.Sendrecv(a, 0, 1, b, 0, 1)
        assert (a == b).all()
        print("size", c.size, "rank", c.rank, c.bcast("x"))
        MPI.Finalize()
        assert MPI.Is_finalized()
    """, launcher=False)
    assert p.returncode == 0, p.stderr
    assert "size 1 rank 0 x" in p.stdout


@pytest.mark.timeout(60)
def test_nvtx_ranges_wrap_public_calls_under_a_profiler(tmp_path):
    pytest.importorskip("nvtx")
    p, _ = _run(tmp_path, """
        import numpy as np
        from gpumpi import MPI
        assert hasattr(MPI.Comm.Send, "__wrapped__"), "Send not annotated"
        b = np.zeros(3)
        MPI.COMM_WORLD.Sendrecv(np.ones(3), 0, 0, b, 0, 0)
        assert b.sum() == 3
        print("OK")
    """, launcher=False, env={"NVTX_INJECTION64_PATH": str(tmp_path / "no-such-injection.so")})
    assert p.returncode == 0, p.stderr
    assert "OK" in p.stdout


@pytest.mark.timeout(60)
def test_no_nvtx_cost_without_a_profiler(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"}
    code = "from gpumpi import MPI; print(hasattr(MPI.Comm.Send, '__wrapped__'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == "False"


def _finalize_delivers_backlog():
    import numpy as np

    from gpumpi import MPI

    c = MPI.COMM_WORLD
    # more eager bytes than a ring holds: the tail waits in the backlog until Finalize
    if c.rank == 0:
        for i in range(200):
            c.Send(np.full(8000, i % 256, np.uint8), 1, 0)
        MPI.Finalize()
        return "sent"
    import time as _t

    _t.sleep(0.3)
    for i in range(200):
        b = np.empty(8000, np.uint8)
        c.Recv(b, 0, 0)
        assert (b == i % 256).all()
    return "got"


def test_finalize_drains_outgoing_frames():
    assert run_ranks(_finalize_delivers_backlog, 2, env={"GPUMPI_RING_SIZE": "65536"}) == ["sent", "got"]


def _staged_path():
    import numpy as np

    from gpumpi import MPI

    c = MPI.COMM_WORLD
    r, n = c.rank, c.size
    assert not MPI._rt.ENGINE.region("host", "cma").ok
    for size in (100_000, 3 << 20):
        a = (np.arange(size) % 253).astype(np.uint8)
        b = np.empty(size, np.uint8)
        c.Sendrecv(a, (r + 1) % n, 0, b, (r - 1) % n, 0)
        assert (a == b).all()
        small = np.empty(size // 3, np.uint8)
        req = c.Isend(a, 1 % n, 5) if r == 0 else None
        if r == 1 % n:
            with pytest.raises(MPI.Exception) as ei:
                c.Recv(small, 0, 5)
            assert ei.value.Get_error_class() == MPI.ERR_TRUNCATE
            assert (small == a[: size // 3]).all()
        if req is not None:
            req.Wait()
        c.Barrier()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_staged_path_without_cross_memory_attach(n):
    run_ranks(_staged_path, n, env={"GPUMPI_CMA": "0"})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("handler", ["ERRORS_ARE_FATAL", "ERRORS_ABORT"])
def test_fatal_error_handler_aborts_the_job(tmp_path, handler):
    before = _shm()
    p, dt = _run(tmp_path, f"""
        import numpy as np
        from gpumpi import MPI
        c = MPI.COMM_WORLD
        c.Set_errhandler(MPI.{handler})
        if c.rank == 1:
            c.Send(np.zeros(1), 17)     # invalid rank: the handler ends the job
        c.Recv(np.zeros(1), 1, 0)       # would block forever
    """)
    assert p.returncode == 6, (p.returncode, p.stderr)  # MPI.ERR_RANK
    assert "invalid destination" in p.stderr
    assert dt < 15 and _shm() == before


def _init_and_query():
    import gpumpi
    from gpumpi import _device

    q = gpumpi.query_gpu_support()
    assert q["cuda"] is False and q["gpus"] == 0 and q["adapter"] == "sim"  # no driver on CI machines
    assert q["device_kinds"] == ["sim"] and q["transports"]["device"] == ["self", "cuda_ipc", "mpi", "staging"]
    assert q["staging"] == {"slots": 4, "slot_bytes": 8 << 20}  # the defaults
    for bad, text in (("gpu", "device must be"), (True, "device must be"), (0, "no CUDA driver")):
        try:
            gpumpi.init(bad)
        except ValueError as e:
            assert text in str(e), e
        else:
            raise AssertionError(f"gpumpi.init({bad!r}) accepted")
    gpumpi.init("sim")
    assert _device.device_mode() == "sim"
    from gpumpi import MPI

    return MPI.COMM_WORLD.Get_size()


def test_init_and_query_gpu_support():
    if _has_gpu():
        pytest.skip("a CUDA driver with GPUs is present: the gpu tests cover init there")
    assert run_ranks(_init_and_query, 2) == [2, 2]


def _has_gpu() -> bool:
    from gpumpi import _device

    return _device.cuda_driver() is not None


# --- Finalize completes this rank's part in every communication ------------------------------


def _send_then_finalize(how):
    import time as _t

    import numpy as np

    from gpumpi import MPI

    c = MPI.COMM_WORLD
    n = 1 << 17  # 1 MiB: far above the eager limit, so the receiver reads the sender's memory
    if c.rank == 1:
        a = np.arange(n, dtype=float)
        if how == "free":
            c.Isend(a, 0, 4).Free()
        elif how == "bsend":
            MPI.Attach_buffer(bytearray(a.nbytes + MPI.BSEND_OVERHEAD))
            c.Bsend(a, 0, 4)
        else:  # ibsend, request freed
            MPI.Attach_buffer(bytearray(a.nbytes + MPI.BSEND_OVERHEAD))
            c.Ibsend(a, 0, 4).Free()
        del a
        MPI.Finalize()  # the process ends right after: the message must be received by now
        return "sent"
    if c.rank == 0:
        _t.sleep(1.0)
        b = np.empty(n)
        c.Recv(b, 1, 4)
        assert (b == np.arange(n)).all()
        return "got"
    return None


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["free", "bsend", "ibsend"])
@pytest.mark.parametrize("n", [2, 3])
def test_finalize_waits_until_freed_and_buffered_sends_are_received(how, n):
    """MPI_Finalize must not return before a freed or buffered send was received (the
    receiver read a process that had exited and waited forever)."""
    assert run_ranks(_send_then_finalize, n, timeout=30, args=(how,))[:2] == ["got", "sent"]


def _unmatched_sends_do_not_hold_finalize():
    import numpy as np

    from gpumpi import MPI

    c = MPI.COMM_WORLD
    big = np.zeros(1 << 17)
    c.Isend(big, c.rank, 9).Free()  # to itself, never received
    c.Isend(big, (c.rank + 1) % c.size, 8).Free()  # to a peer that never receives it
    MPI.Finalize()
    return True


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_finalize_gives_up_sends_nobody_will_receive(n):
    """An erroneous program (a send never matched) still finalizes: the receiver finalized
    without a receive that could match it."""
    assert run_ranks(_unmatched_sends_do_not_hold_finalize, n, timeout=30) == [True] * n


@pytest.mark.timeout(60)
def test_finalize_does_not_wait_for_a_dead_receiver(tmp_path):
    p, dt = _run(tmp_path, """
        import os
        import numpy as np
        from gpumpi import MPI
        c = MPI.COMM_WORLD
        if c.rank == 0:
            os._exit(5)
        c.Isend(np.zeros(1 << 17), 0, 1).Free()
        MPI.Finalize()
        print("FINALIZED", flush=True)
    """, extra=["--grace", "20"])
    assert p.returncode == 5, p.stderr
    assert "FINALIZED" in p.stdout, (p.stdout, p.stderr)
    assert dt < 15
