"""The point-to-point matrix of the foundation tests over every memory pair and device transport.

Every call family (blocking, nonblocking with wildcards, synchronous, ready, buffered,
Sendrecv and its replace form, persistent, matched and immediate probes, cancel,
PROC_NULL) and every failure rule (truncation, type-signature mismatch) runs for each
(send memory, receive memory) pair of host and simulated device memory, at sizes that
take the eager path and the rendezvous path, under both device transports:

* ``cuda_ipc`` (the default: large device messages go device to device through IPC
  handles, falling back to staging where a handle cannot be opened, e.g. to self);
* ``staging`` (``GPUMPI_TRANSPORTS=device:staging``: chunks through the page-locked
  shared rings).

Expectations are NumPy arrays computed on the receiving side from the sender's rank.
The same body runs on real CuPy arrays (``gpu``-marked: skipped without a GPU).
"""

import numpy as np
import pytest

from gpumpi.testing import WORLD_SIZES, run_ranks

TRANSPORTS = {"cuda_ipc": {}, "staging": {"GPUMPI_TRANSPORTS": "device:staging", "GPUMPI_STAGE_CHUNK": "65536"}}
SIZES = [0, 5, 300_000]  # float64 elements: empty, eager, rendezvous (2.4 MB, several staging chunks)
KINDS = ("host", "device")


def values(n, seed):
    return np.arange(n, dtype=np.float64) * 3 + seed * 1e6


def _matrix(transport, backend="sim"):
    import gpumpi
    from gpumpi import MPI
    from gpumpi import _runtime as rt
    from gpumpi._device import sim_adapter

    if backend == "cupy":
        import cupy

        gpumpi.init(device="auto")
        to_device, device_type = cupy.asarray, cupy.ndarray
    else:
        from gpumpi.testing import SimDeviceArray

        to_device, device_type = SimDeviceArray.from_numpy, SimDeviceArray

    c = MPI.COMM_WORLD
    r, size = c.rank, c.size
    nxt, prv = (r + 1) % size, (r - 1) % size
    eng = rt.ENGINE
    assert eng.transports["device"] == (("mpi", "staging") if transport == "staging" else ("self", "cuda_ipc", "mpi", "staging"))

    def make(kind, data):
        return to_device(data) if kind == "device" else np.array(data)

    def read(buf):
        return buf.get() if isinstance(buf, device_type) else buf

    tag = 0
    for n in SIZES:
        for sk in KINDS:
            for rk in KINDS:
                where = (n, sk, rk, transport)
                mine, theirs = values(n, r), values(n, prv)
                tag += 10

                # blocking, with status
                src, dst = make(sk, mine), make(rk, np.zeros(n))
                st = MPI.Status()
                req = c.Isend(src, nxt, tag)
                c.Recv(dst, prv, tag, st)
                req.Wait()
                assert np.array_equal(read(dst), theirs), where
                assert (st.Get_source(), st.Get_tag(), st.Get_count(MPI.DOUBLE)) == (prv, tag, n), where

                # nonblocking, wildcard receive
                dst = make(rk, np.zeros(n))
                rq = c.Irecv(dst, MPI.ANY_SOURCE, MPI.ANY_TAG) if size == 1 else c.Irecv(dst, prv, MPI.ANY_TAG)
                sq = c.Isend(src, nxt, tag + 1)
                sts = [MPI.Status(), MPI.Status()]
                MPI.Request.Waitall([rq, sq], sts)
                assert np.array_equal(read(dst), theirs), where
                assert sts[0].Get_tag() == tag + 1 and sts[0].Get_source() == prv, where

                # synchronous and ready sends (the receive is posted first; Barrier orders it)
                dst = make(rk, np.zeros(n))
                rq = c.Irecv(dst, prv, tag + 2)
                c.Barrier()
                c.Rsend(src, nxt, tag + 2)
                rq.Wait()
                assert np.array_equal(read(dst), theirs), where
                dst = make(rk, np.zeros(n))
                rq = c.Irecv(dst, prv, tag + 3)
                c.Ssend(src, nxt, tag + 3)
                rq.Wait()
                assert np.array_equal(read(dst), theirs), where

                # Sendrecv, and Sendrecv_replace in the receive memory
                dst = make(rk, np.zeros(n))
                c.Sendrecv(src, nxt, tag + 4, dst, prv, tag + 4)
                assert np.array_equal(read(dst), theirs), where
                rep = make(rk, mine)
                c.Sendrecv_replace(rep, nxt, tag + 5, prv, tag + 5)
                assert np.array_equal(read(rep), theirs), where

                # buffered send through an attached buffer
                MPI.Attach_buffer(bytearray(8 * n + MPI.BSEND_OVERHEAD + 64))
                dst = make(rk, np.zeros(n))
                c.Bsend(src, nxt, tag + 6)
                c.Recv(dst, prv, tag + 6)
                MPI.Detach_buffer()
                assert np.array_equal(read(dst), theirs), where

                # persistent: the send buffer is read again at every Start
                dst = make(rk, np.zeros(n))
                ps, pr = c.Send_init(src, nxt, tag + 7), c.Recv_init(dst, prv, tag + 7)
                for it in range(2):
                    if sk == "device":
                        src.set(values(n, r + it))
                    else:
                        src[:] = values(n, r + it)
                    MPI.Prequest.Startall([pr, ps])
                    MPI.Request.Waitall([pr, ps])
                    assert np.array_equal(read(dst), values(n, prv + it)), (where, it)
                ps.Free()
                pr.Free()
                src = make(sk, mine)

                # matched probe, then immediate matched probe, then Iprobe + Recv
                sq = c.Isend(src, nxt, tag + 8)
                st = MPI.Status()
                msg = c.Mprobe(prv, tag + 8, st)
                assert st.Get_count(MPI.DOUBLE) == n, where
                dst = make(rk, np.zeros(n))
                msg.Recv(dst)
                sq.Wait()
                assert np.array_equal(read(dst), theirs), where
                sq = c.Isend(src, nxt, tag + 9)
                msg = None
                while msg is None:
                    msg = c.Improbe(prv, tag + 9)
                dst = make(rk, np.zeros(n))
                msg.Irecv(dst).Wait()
                sq.Wait()
                assert np.array_equal(read(dst), theirs), where

                if n:
                    # truncation: nothing past the buffer is written, the sender completes
                    small = make(rk, np.full(n + 2, -1.0))
                    sq = c.Isend(src, nxt, tag)
                    with pytest.raises(MPI.Exception) as e:
                        c.Recv(small[: n - 1], prv, tag)
                    assert e.value.Get_error_class() == MPI.ERR_TRUNCATE, where
                    sq.Wait()
                    assert (read(small)[n - 1 :] == -1).all(), where
                    # type signature mismatch: f8 received as i8 writes nothing
                    wrong = make(rk, np.full(n, 7, np.int64))
                    sq = c.Isend(src, nxt, tag + 1)
                    with pytest.raises(MPI.Exception) as e:
                        c.Recv(wrong, prv, tag + 1)
                    assert e.value.Get_error_class() == MPI.ERR_TYPE, where
                    sq.Wait()
                    assert (read(wrong) == 7).all(), where
                c.Barrier()

    # cancel of a posted device receive; PROC_NULL with device buffers
    dst = to_device(np.zeros(10))
    req = c.Irecv(dst, MPI.ANY_SOURCE, 999)
    req.Cancel()
    st = MPI.Status()
    req.Wait(st)
    assert st.Is_cancelled()
    c.Send(dst, MPI.PROC_NULL)
    c.Recv(dst, MPI.PROC_NULL, 0, st)
    assert st.Get_source() == MPI.PROC_NULL and st.Get_count(MPI.DOUBLE) == 0
    # the staging pipeline page-locked the slabs it used: its own (its sends) and the previous
    # rank's (its receives); once everyone is done, every slot has been handed back
    if transport == "staging" and backend == "sim":
        from gpumpi._progress import address_of

        c.Barrier()
        for owner in {c.rank, prv}:
            slab = eng.staging.slabs[owner]
            assert sim_adapter().host_registered(address_of(slab.data)), owner
            assert slab.in_use() == 0, (owner, slab.in_use())
    return r


@pytest.mark.parametrize("n", WORLD_SIZES)
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_p2p_matrix_over_memory_pairs(transport, n):
    assert run_ranks(_matrix, n, args=(transport,), env=TRANSPORTS[transport], timeout=120) == list(range(n))


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_p2p_matrix_on_cupy_arrays(transport, n):
    pytest.importorskip("cupy", reason="the gpu matrix needs CuPy")
    from gpumpi import query_gpu_support

    if not query_gpu_support()["gpus"]:
        pytest.skip("no CUDA GPU on this machine")
    assert run_ranks(_matrix, n, args=(transport, "cupy"), env=TRANSPORTS[transport], timeout=300) == list(range(n))
