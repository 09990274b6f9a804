"""Shareable memory (gpumpi._memfd): memfd creation, sealing, raw mappings, opening through /proc."""

import ctypes
import fcntl
import os

import pytest

from gpumpi import _memfd
from gpumpi._memfd import PAGE
from gpumpi.ipc.jobseg import JobSegment

SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def test_round_pages():
    assert [_memfd.round_pages(n) for n in (0, 1, PAGE, PAGE + 1)] == [PAGE, PAGE, PAGE, 2 * PAGE]


def test_create_is_sized_sealed_and_close_on_exec():
    fd = _memfd.create("gpumpi-test", 3 * PAGE)
    try:
        assert os.fstat(fd).st_size == 3 * PAGE
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS == SEALS
        assert not os.get_inheritable(fd)
        with pytest.raises(PermissionError):  # sealed: no one can shrink it under a mapping
            os.ftruncate(fd, PAGE)
    finally:
        os.close(fd)


def test_create_unsealed_and_inheritable():
    fd = _memfd.create("gpumpi-test", PAGE, cloexec=False, seal=False)
    try:
        assert os.get_inheritable(fd)
        os.ftruncate(fd, 2 * PAGE)  # resizable
        assert os.fstat(fd).st_size == 2 * PAGE
    finally:
        os.close(fd)


def test_job_segment_memfd_stays_inheritable_and_unsealed():
    seg = JobSegment.create(2, 0)
    try:
        assert os.get_inheritable(seg.fd)  # ranks inherit it across exec
        assert not fcntl.fcntl(seg.fd, fcntl.F_GET_SEALS) & (fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    finally:
        seg.close()


def test_create_mapped_and_open_peer_share_the_bytes():
    fd, addr = _memfd.create_mapped("map", "gpumpi-test", PAGE)
    try:
        ctypes.memmove(addr, b"shared!", 7)
        mine = _memfd.open_peer(os.getpid(), fd)  # through /proc, as a peer would
        try:
            assert os.fstat(mine).st_size == PAGE
            other = _memfd.map_shared("map", PAGE, mine)
        finally:
            os.close(mine)
        assert ctypes.string_at(other, 7) == b"shared!"
        ctypes.memmove(other + 100, b"back", 4)
        assert ctypes.string_at(addr + 100, 4) == b"back"
        _memfd.unmap(other, PAGE)
    finally:
        _memfd.unmap(addr, PAGE)
        os.close(fd)
    assert _memfd.peer_path(12, 34) == "/proc/12/fd/34"
    with pytest.raises(FileNotFoundError):
        _memfd.open_peer(os.getpid(), fd)  # closed: gone


def test_anonymous_mappings_and_map_errors():
    addr = _memfd.map_anonymous("alloc", 2 * PAGE)
    try:
        ctypes.memset(addr, 7, 2 * PAGE)
        assert ctypes.string_at(addr + 2 * PAGE - 1, 1) == b"\x07"
    finally:
        _memfd.unmap(addr, 2 * PAGE)
    fd = _memfd.create("gpumpi-test", PAGE)
    try:
        with pytest.raises(OSError, match=r"^\[Errno \d+\] ipc_open: mmap failed: .* \(0 bytes\)"):
            _memfd.map_shared("ipc_open", 0, fd)
    finally:
        os.close(fd)
