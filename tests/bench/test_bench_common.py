"""Tests of what the bench suites share (gpumpi/bench/_common.py): sizes, buffer kinds, transports,
CuPy detection, and the pattern and sentinel that count wrong bytes."""

from __future__ import annotations

import pytest

from gpumpi import bench
from gpumpi.bench import _common


def test_parse_size_suffixes():
    assert _common.parse_size("0") == 0
    assert _common.parse_size("4096") == 4096
    assert _common.parse_size("64K") == 64 << 10
    assert _common.parse_size("64KiB") == 64 << 10
    assert _common.parse_size("16M") == 16 << 20
    assert _common.parse_size("1g") == 1 << 30
    assert _common.parse_size("8B") == 8
    for bad in ("x", "-1", "1.5M", ""):
        with pytest.raises(bench.BenchError):
            _common.parse_size(bad)


def test_default_sizes_is_osu_sweep():
    sizes = _common.default_sizes()
    assert sizes[:4] == [0, 1, 2, 4]
    assert sizes[-1] == 16 << 20
    assert len(sizes) == 1 + 25
    assert _common.default_sizes(3, 40) == [4, 8, 16, 32]
    assert _common.default_sizes(0, 0) == [0]


def test_check_buffer_kind():
    for kind in ("numpy", "sim", "cupy"):
        bench.check_buffer_kind(kind)
    with pytest.raises(bench.BenchError, match=r"unknown buffer kind 'bogus' \(supported: numpy, sim, cupy\)"):
        bench.check_buffer_kind("bogus")
    with pytest.raises(bench.BenchError, match="unknown buffer kind 'numba'"):
        bench.check_buffer_kind("numba")


def test_buffer_kinds_per_suite():
    for kind in ("numpy", "sim", "cupy"):
        bench.check_buffer_kind(kind, "p2p")
    bench.check_buffer_kind("numpy", "pack")
    for kind in ("sim", "cupy"):
        bench.check_buffer_kind(kind, "p2p-matrix")
        with pytest.raises(bench.BenchError, match=f"pack suite runs on host numpy buffers only \\(--buffer {kind}\\)"):
            bench.check_buffer_kind(kind, "pack")
    with pytest.raises(bench.BenchError, match="measures device buffers: use --buffer sim or cupy"):
        bench.check_buffer_kind("numpy", "p2p-matrix")


def test_transports_setting():
    assert _common.transports_setting("auto") == ""
    assert _common.transports_setting("auto", "host:shm") == "host:shm"
    assert _common.transports_setting("staging") == "device:staging"
    assert _common.transports_setting("cuda_ipc", "host:shm") == "host:shm,device:cuda_ipc"
    # the chosen device transport replaces every device item, host items stay
    assert _common.transports_setting("staging", "device:cuda_ipc; host:shm,Device:staging") == "host:shm,device:staging"
    with pytest.raises(bench.BenchError, match=r"unknown transport 'nvlink' \(known: auto, cuda_ipc, staging\)"):
        _common.transports_setting("nvlink")


def test_cupy_status_names_what_is_missing():
    bench.check_device_buffers("sim")
    bench.check_device_buffers("numpy")
    if __import__("importlib").util.find_spec("cupy") is not None:
        pytest.skip("cupy is installed (and cupy_status would initialise CUDA in this process)")
    assert bench.cupy_status() == (False, "cupy is not installed: pip install gpumpi[cuda]")
    with pytest.raises(bench.BenchError, match=r"^--buffer cupy needs CuPy and a CUDA GPU \(cupy is not installed"):
        bench.check_device_buffers("cupy")


def test_pattern_and_sentinel_differ_everywhere():
    np = pytest.importorskip("numpy")
    bufs = _common.HostBuffers(np, [0, 1, 1000, 4096], window=4, distinct=True)
    for size in (1, 1000, 4096):
        sent = bufs.prepare_send(size, 0)
        slots = bufs.recv_slots(size, 4, 0)
        assert bufs.count_wrong(slots, size, 0, 4) == 4 * size  # untouched slots are all wrong
        for v in slots:
            v[:] = sent
        assert bufs.count_wrong(slots, size, 0, 4) == 0
        slots[2][size // 2] ^= 1
        assert bufs.count_wrong(slots, size, 0, 4) == 1
    # the patterns of the two ranks, and of different sizes, differ
    assert not np.array_equal(_common.fill_pattern(np, 64, 0), _common.fill_pattern(np, 64, 1))
    assert not np.array_equal(_common.fill_pattern(np, 64, 0), _common.fill_pattern(np, 128, 0)[:64])
