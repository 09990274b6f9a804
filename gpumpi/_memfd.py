"""Shareable memory: memfd files, mapped at raw addresses and opened from other processes (L2).

Theory of operation
===================
A memfd (``memfd_create``) is an anonymous file: it has no name in ``/dev/shm``,
so nothing is left behind whatever dies, and it lives as long as a descriptor or
a mapping holds it.  Another process reaches it in one of two ways:

* by inheriting the descriptor (the job segment: :mod:`gpumpi.ipc.jobseg`
  creates it inheritable and unsealed, and maps it with Python's ``mmap``);
* by opening the creator's descriptor as ``/proc/<pid>/fd/<fd>``
  (:func:`open_peer`): the simulated device (:mod:`gpumpi._device.sim`) names
  each allocation and each interprocess event that way.  It needs ptrace read
  access to the creator (``PTRACE_MODE_READ_FSCREDS``: same user, creator
  dumpable, no LSM refusal, same pid namespace).

The steps, one function each:

* :func:`create`: ``memfd_create`` (close-on-exec unless asked otherwise),
  sized with ``ftruncate``, and sealed against shrinking and growing
  (``F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL``: no peer can shrink the file
  under the creator's mapping, which would be ``SIGBUS``, nor grow it) unless
  ``seal=False``; the descriptor is closed again if a step fails;
* :func:`round_pages`: a request sized to whole pages (at least one);
* :func:`map_shared` / :func:`map_anonymous`: libc ``mmap`` of a descriptor
  (``MAP_SHARED``) or of private anonymous memory.  The address is a plain int
  and no Python buffer export pins the mapping, so :func:`unmap` always can;
  such memory is read and written through ``ctypes`` at its address;
* :func:`create_mapped`: :func:`create` and :func:`map_shared` together,
  ``(fd, address)``;
* :func:`open_peer`: another process's memfd, opened read-write and
  close-on-exec through ``/proc``.  Its errors are those of ``os.open``
  (``FileNotFoundError`` or ``ProcessLookupError``: the process or descriptor
  is gone; ``PermissionError``: no ptrace read access), for the caller to name;
  the caller checks the size (``os.fstat``) and maps it.

Each live memfd holds one descriptor in its creator, so ``RLIMIT_NOFILE`` bounds
how many can be live at once.  ``MPI.Alloc_mem`` and window memory come from
here (DESIGN section 7: buffers in gpumpi shared memory are reached straight
through the mapping).  :func:`register` records such a mapping (address, length,
descriptor) so that :func:`find` can tell whether given memory is shareable and
how a peer opens it: ``Win.Create`` on ``Alloc_mem`` memory is then mapped by its
peers (real atomics) instead of reached by cross-memory attach.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os

__all__ = ["PAGE", "round_pages", "create", "map_shared", "map_anonymous", "unmap", "create_mapped", "open_peer",
           "peer_path", "register", "unregister", "find", "file_key", "mapping_of"]

PAGE = mmap.PAGESIZE

_libc: list = []
_MAP_FAILED = ctypes.c_void_p(-1).value


def _lib():
    if not _libc:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                             ctypes.c_long]
        lib.munmap.restype = ctypes.c_int
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc.append(lib)
    return _libc[0]


def round_pages(n: int) -> int:
    """``n`` bytes rounded up to whole pages, at least one page."""
    return max(PAGE, (n + PAGE - 1) // PAGE * PAGE)


def create(name: str, length: int, *, cloexec: bool = True, seal: bool = True) -> int:
    """A new memfd of ``length`` bytes (zero-filled): its descriptor.

    ``cloexec``: close-on-exec (False: children started with exec inherit it);
    ``seal``: sealed against shrinking and growing, and against further seals.
    """
    flags = (os.MFD_CLOEXEC if cloexec else 0) | (os.MFD_ALLOW_SEALING if seal else 0)
    fd = os.memfd_create(name, flags)
    try:
        os.ftruncate(fd, length)
        if seal:  # no peer can shrink the file under the exporter's mapping (SIGBUS), nor grow it
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _map(call: str, length: int, fd: int | None) -> int:
    if fd is None:
        flags, fd = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1
    else:
        flags = mmap.MAP_SHARED
    addr = _lib().mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE, flags, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"{call}: mmap failed: {os.strerror(err)} ({length} bytes)")
    return addr


def map_shared(call: str, length: int, fd: int) -> int:
    """Map ``length`` bytes of ``fd`` shared, read-write: the address (``OSError`` naming ``call``)."""
    return _map(call, length, fd)


def map_anonymous(call: str, length: int) -> int:
    """Map ``length`` bytes of private anonymous memory, read-write: the address."""
    return _map(call, length, None)


def unmap(addr: int, length: int) -> None:
    """Unmap what :func:`map_shared` or :func:`map_anonymous` mapped."""
    _lib().munmap(addr, length)


def create_mapped(call: str, name: str, length: int) -> tuple[int, int]:
    """A new sealed memfd of ``length`` bytes, mapped shared: ``(fd, address)``."""
    fd = create(name, length)
    try:
        return fd, map_shared(call, length, fd)
    except BaseException:
        os.close(fd)
        raise


def peer_path(pid: int, fd: int) -> str:
    """Where another process's descriptor ``fd`` can be opened: ``/proc/<pid>/fd/<fd>``."""
    return f"/proc/{pid}/fd/{fd}"


def open_peer(pid: int, fd: int) -> int:
    """Open process ``pid``'s descriptor ``fd`` (read-write, close-on-exec): a descriptor of our own.

    Raises what ``os.open`` raises: ``FileNotFoundError`` / ``ProcessLookupError``
    when the process or the descriptor is gone, ``PermissionError`` without ptrace
    read access to ``pid``.
    """
    return os.open(peer_path(pid, fd), os.O_RDWR | os.O_CLOEXEC)


# --- shareable mappings of this process: address -> (length, fd) ----------------------------------
_shared: dict[int, tuple[int, int]] = {}


def register(addr: int, length: int, fd: int) -> None:
    """Record that ``[addr, addr + length)`` maps memfd ``fd`` from its offset 0."""
    _shared[addr] = (length, fd)


def unregister(addr: int) -> None:
    _shared.pop(addr, None)


def file_key(fd: int) -> tuple:
    """What names the file behind descriptor ``fd`` in every process: ``(device, inode)``."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def mapping_of(key: tuple):
    """``(address, length)`` of a registered mapping of the file ``key`` (:func:`file_key`), or None:
    a peer's memory in a file this process maps already is reached through that mapping."""
    for base, (length, fd) in _shared.items():
        try:
            if file_key(fd) == key:
                return base, length
        except OSError:
            continue
    return None


def find(addr: int, nbytes: int):
    """``(fd, offset, file length)`` of the registered mapping holding ``[addr, addr + nbytes)``, or None."""
    for base, (length, fd) in _shared.items():
        if base <= addr and addr + nbytes <= base + length:
            return fd, addr - base, length
    return None
