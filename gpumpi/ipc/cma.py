"""Cross-memory attach: read another process's memory in one copy (L4).

``process_vm_readv(2)`` copies straight from a peer's address space into ours
(about 9 GB/s on the development machines, one copy instead of two through a
shared staging area).  The peer must allow it: the launcher's ranks call
``prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)``, and Yama's ``ptrace_scope`` must
be 0 or 1.  When the kernel refuses (EPERM, ENOSYS), callers fall back to the
staged path; :func:`available` tells in advance whether to try.

:class:`Cma` is the ``cma`` host region transport (:mod:`gpumpi.ipc.base`): a sender
offers its segments, the receiver reads them; for large messages the sender also
writes the tail while the receiver reads the head (``WRITE``).  After a refusal it
offers nothing more, and the data is pushed through the rings instead.

A failed read means one of two things, and they must not be confused: the kernel
refuses cross-memory attach (stop using it), or the peer's process is gone (ESRCH:
it exited or died; EPERM or EFAULT from a process that is exiting, a zombie, or a
pid now owned by someone else).  The second raises :class:`~gpumpi.ipc.base.PeerGone`:
that peer is lost, cross-memory attach is not.

One-sided (windows): a member exposes private memory (a NumPy array, a dynamic window's
attached memory) by its address; the others read and write it with
``process_vm_readv``/``writev`` run by run (:class:`Remote`), the owner in place
(:class:`gpumpi.ipc.onesided.Mapped`, not atomic).  No atomic instruction reaches memory
this way, so the transport states no ``ATOMICS``: the window serializes read-modify-writes
with a lock, and the owner takes the same path.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import os

from .base import (
    HOST,
    ONE_SIDED,
    READ,
    WRITE,
    PeerGone,
    Region,
    Remote,
    decode_segments,
    encode_segments,
    register,
    skip_segments,
)

from .onesided import Mapped

_IOV_MAX = 1024


class _IOVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_libc = None
_readv = None
_writev = None


def _load():
    global _libc, _readv, _writev
    if _readv is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        for name in ("process_vm_readv", "process_vm_writev"):
            f = getattr(_libc, name)
            f.restype = ctypes.c_ssize_t
            f.argtypes = [
                ctypes.c_int,
                ctypes.POINTER(_IOVec),
                ctypes.c_ulong,
                ctypes.POINTER(_IOVec),
                ctypes.c_ulong,
                ctypes.c_ulong,
            ]
        _readv, _writev = _libc.process_vm_readv, _libc.process_vm_writev
    return _readv


def available() -> bool:
    """Whether this kernel lets a process read a peer's memory (Yama scope <= 1)."""
    if not hasattr(os, "process_vm_readv") and not _has_symbol():
        return False
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip()) <= 1
    except (OSError, ValueError):
        return True


def _has_symbol() -> bool:
    try:
        _load()
        return True
    except (OSError, AttributeError):
        return False


def allow_peers() -> None:
    """Let any process of this user read our memory (PR_SET_PTRACER_ANY), where Yama exists."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(0x59616D61, ctypes.c_ulong(-1 & 0xFFFFFFFFFFFFFFFF), 0, 0, 0)
    except (OSError, AttributeError):
        return


_one_local = _IOVec()
_one_remote = _IOVec()
_p_local = ctypes.pointer(_one_local)
_p_remote = ctypes.pointer(_one_remote)


def read(pid: int, remote: list, local_addr: int, nbytes: int) -> int:
    """Copy ``nbytes`` from the peer's segments ``[(addr, len), ...]`` to ``local_addr``.

    Returns 0 on success or the errno that stopped it (the caller falls back).
    Callers serialise calls (the progress engine holds its lock).
    """
    f = _load()
    if len(remote) == 1 and remote[0][1] >= nbytes:
        # one segment (the common case): reuse preallocated iovecs, loop on short reads
        a = remote[0][0]
        done = 0
        while done < nbytes:
            _one_local.iov_base = local_addr + done
            _one_local.iov_len = _one_remote.iov_len = nbytes - done
            _one_remote.iov_base = a + done
            got = f(pid, _p_local, 1, _p_remote, 1, 0)
            if got < 0:
                return ctypes.get_errno() or 1
            if got == 0:
                return 5
            done += got
        return 0
    done = 0
    seg = 0
    skip = 0  # bytes of remote[seg] already read
    while done < nbytes:
        rem = []
        want = 0
        i = seg
        first = skip
        while i < len(remote) and len(rem) < _IOV_MAX and done + want < nbytes:
            a, n = remote[i]
            take = min(n - first, nbytes - done - want)
            if take > 0:
                rem.append((a + first, take))
                want += take
            first = 0
            i += 1
        if not rem:
            break
        riov = (_IOVec * len(rem))(*[(a, n) for a, n in rem])
        liov = (_IOVec * 1)((local_addr + done, want))
        got = f(pid, liov, 1, riov, len(rem), 0)
        if got < 0:
            return ctypes.get_errno() or 1
        if got == 0:
            return 5  # EIO: peer mapping vanished
        # advance (seg, skip) by got bytes
        done += got
        left = got
        while left > 0:
            a, n = remote[seg]
            avail = n - skip
            if left >= avail:
                left -= avail
                seg += 1
                skip = 0
            else:
                skip += left
                left = 0
    return 0


def write(pid: int, local: list, skip: int, remote_addr: int, nbytes: int) -> int:
    """Copy ``nbytes`` of our segments ``[(addr, len), ...]``, from byte ``skip`` of their
    concatenation, to the peer's ``remote_addr``.  Returns 0 or the errno that stopped it."""
    _load()
    f = _writev
    iov = skip_segments(local, skip)
    done = 0
    seg = 0
    while done < nbytes and seg < len(iov):
        chunk = []
        want = 0
        i = seg
        while i < len(iov) and len(chunk) < _IOV_MAX and done + want < nbytes:
            a, n = iov[i]
            take = min(n, nbytes - done - want)
            chunk.append((a, take))
            want += take
            i += 1
        liov = (_IOVec * len(chunk))(*chunk)
        riov = (_IOVec * 1)((remote_addr + done, want))
        got = f(pid, liov, len(chunk), riov, 1, 0)
        if got < 0:
            return ctypes.get_errno() or 1
        if got == 0:
            return 5
        done += got
        left = got
        while left > 0:  # drop what was written from the front of iov
            a, n = iov[seg]
            if left >= n:
                left -= n
                seg += 1
            else:
                iov[seg] = (a + left, n - left)
                left = 0
    return 0 if done >= nbytes else 5


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` no longer runs: it does not exist, is a zombie (or dead), or the
    pid now belongs to another user.  (Only a process that exists and runs can be read.)"""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return True  # the pid was reused by another user's process
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"Z", b"X", b"x")


@register
class Cma(Region):
    """Host regions read and written with cross-memory attach (one copy, peer to peer)."""

    name, memory, caps = "cma", HOST, READ | WRITE | ONE_SIDED

    def __init__(self, world) -> None:
        self.rank = world.rank
        self.pid = world.pid
        self.near = getattr(world, "near", None)  # cross-memory attach reaches the processes of this node only
        self.ok = bool(world.cfg.cma) and available()
        self.proven = False  # a plain read has worked: splitting (both sides copy) is safe

    def reaches(self, peer: int) -> bool:
        return self.ok and (self.near is None or self.near(peer))

    def offer(self, peer: int, src):
        return encode_segments(src) if self.ok else None

    def take(self, peer: int, body, dst, nbytes: int, skip: int = 0) -> bool:
        segs = decode_segments(body)
        if skip:
            segs = skip_segments(segs, skip)
        pid = self.pid(peer)
        errno = read(pid, segs, dst, nbytes) if nbytes else 0
        if errno == 0:
            self.proven = True
            return True
        if errno == _errno.ESRCH or process_gone(pid):  # EPERM, EFAULT from an exiting process too
            raise PeerGone(peer, f"process_vm_readv of pid {pid}: {os.strerror(errno)}")
        if not self.proven:
            self.ok = False  # the kernel refused: push through the rings from now on
        return False

    def write(self, peer: int, src, skip: int, addr: int, nbytes: int) -> int:
        return write(self.pid(peer), src, skip, addr, nbytes)

    def expose(self, mem):
        return mem[0] if self.ok else None

    def attach(self, peer: int, desc, stream_of=None):
        if peer == self.rank:
            return Mapped(peer, desc, False)  # the others cannot use the CPU's atomics: neither may we
        return CmaRemote(peer, desc, self.pid(peer))


class CmaRemote(Remote):
    """A peer's private memory, read and written with cross-memory attach (not atomic)."""

    def __init__(self, peer: int, base: int, pid: int) -> None:
        super().__init__(peer, base)
        self.pid = pid

    def _failed(self, errno: int, what: str):
        if errno == _errno.ESRCH or process_gone(self.pid):
            return PeerGone(self.peer, f"{what} of pid {self.pid}: {os.strerror(errno)}")
        return OSError(errno, f"{what} of rank {self.peer}'s memory: {os.strerror(errno)}")

    def read(self, segs, dst: int) -> None:
        n = sum(ln for _a, ln in segs)
        e = read(self.pid, segs, dst, n) if n else 0
        if e:
            raise self._failed(e, "process_vm_readv")

    def write(self, src: int, segs) -> None:
        for a, ln in segs:
            e = write(self.pid, [(src, ln)], 0, a, ln)
            if e:
                raise self._failed(e, "process_vm_writev")
            src += ln
