"""The file system calls of MPI-IO (L2): the one module that opens, reads, writes, sizes,
syncs, locks and deletes files.

Theory of operation
===================
Every access of ``MPI.File`` ends here as positioned reads and writes of a list of pieces
(``os.preadv``/``os.pwritev`` would gather several, but a piece is usually one long run, so
:func:`read_at`/:func:`write_at` loop over ``os.pread``/``os.pwrite`` until the piece is
done, or, reading, until the end of the file).  Atomic mode's byte-range locks are
``fcntl`` locks over the range an access touches (:func:`locked`).  Many close pieces are
read by one call over their span and copied out (:func:`read_sieved`, ROMIO's data
sieving).  An ``OSError`` becomes
``MPI.Exception`` with the error class MPI names for its cause (:func:`failed`), its message
``"<call>: <what> (<path>: <strerror>)"``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os

from ..errors import (ERR_ACCESS, ERR_BAD_FILE, ERR_FILE_EXISTS, ERR_IO, ERR_NO_SPACE, ERR_NO_SUCH_FILE,
                      ERR_QUOTA, ERR_READ_ONLY, error)

__all__ = ["allocate", "close", "delete", "failed", "locked", "open_file", "read_at", "read_sieved", "size", "sync",
           "truncate", "write_at"]

_CLASSES = {
    errno.ENOENT: ERR_NO_SUCH_FILE, errno.EEXIST: ERR_FILE_EXISTS, errno.EACCES: ERR_ACCESS,
    errno.EPERM: ERR_ACCESS, errno.EROFS: ERR_READ_ONLY, errno.ENOSPC: ERR_NO_SPACE, errno.EDQUOT: ERR_QUOTA,
    errno.ENAMETOOLONG: ERR_BAD_FILE, errno.EISDIR: ERR_BAD_FILE, errno.ENOTDIR: ERR_BAD_FILE,
    errno.ELOOP: ERR_BAD_FILE,
}


def failed(e: OSError, call: str, what: str, path: str = ""):
    """``MPI.Exception`` of the error class MPI gives the cause of ``e``."""
    where = f"{path}: " if path else ""
    return error(_CLASSES.get(e.errno, ERR_IO), f"{call}: {what} ({where}{e.strerror or e})")


def open_file(path: str, read: bool, write: bool, create: bool, excl: bool, call: str) -> int:
    """A descriptor of ``path`` opened for reading and/or writing (created, exclusively)."""
    flags = (os.O_RDWR if write else os.O_RDONLY) if read else os.O_WRONLY
    if create:
        flags |= os.O_CREAT
    if excl:
        flags |= os.O_EXCL
    try:
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as e:
        raise failed(e, call, "cannot open the file", path) from None


def close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def delete(path: str, call: str) -> None:
    try:
        os.unlink(path)
    except OSError as e:
        raise failed(e, call, "cannot delete the file", path) from None


def size(fd: int, call: str) -> int:
    try:
        return os.fstat(fd).st_size
    except OSError as e:
        raise failed(e, call, "cannot size the file") from None


def truncate(fd: int, n: int, call: str) -> None:
    try:
        os.ftruncate(fd, n)
    except OSError as e:
        raise failed(e, call, f"cannot set the size to {n}") from None


def allocate(fd: int, n: int, call: str) -> None:
    """Storage for the first ``n`` bytes (the size grows to ``n``, never shrinks)."""
    try:
        if os.fstat(fd).st_size >= n:
            return
        try:
            os.posix_fallocate(fd, 0, n)
        except OSError as e:  # file systems without fallocate: extend the size
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            os.ftruncate(fd, n)
    except OSError as e:
        raise failed(e, call, f"cannot preallocate {n} bytes") from None


def sync(fd: int, call: str) -> None:
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno != errno.EINVAL:  # (special files such as /dev/null cannot sync: nothing to do)
            raise failed(e, call, "cannot sync the file") from None


def read_at(fd: int, mv: memoryview, pieces, call: str) -> int:
    """Read the file pieces ``[(offset, length), ...]`` one after another into ``mv`` (bytes);
    the bytes read (fewer at the end of the file: the rest of ``mv`` is left as it was)."""
    got = 0
    try:
        for off, n in pieces:
            end = got + n
            while got < end:
                k = os.preadv(fd, [mv[got:end]], off)
                if k == 0:
                    return got
                got += k
                off += k
    except OSError as e:
        raise failed(e, call, f"cannot read {n} bytes at offset {off}") from None
    return got


def write_at(fd: int, mv: memoryview, pieces, call: str) -> int:
    """Write ``mv`` over the file pieces ``[(offset, length), ...]`` in order; the bytes written."""
    done = 0
    try:
        for off, n in pieces:
            end = done + n
            while done < end:
                k = os.pwritev(fd, [mv[done:end]], off)
                done += k
                off += k
    except OSError as e:
        raise failed(e, call, f"cannot write {n} bytes at offset {off}") from None
    return done


#: data sieving (ROMIO's ``romio_ds_read``): groups of at least ``_SIEVE_PIECES`` pieces within
#: ``_SIEVE_CHUNK`` bytes (ROMIO's ``ind_rd_buffer_size``), whose span is at most ``_SIEVE_RATIO``
#: times their bytes (plus 64 KiB), are read by one call into one reused buffer and copied out
_SIEVE_PIECES, _SIEVE_RATIO, _SIEVE_CHUNK = 8, 4, 4 << 20


def read_sieved(fd: int, mem, pieces, call: str) -> int:
    """:func:`read_at` of the pieces into ``mem``; where many lie close together, a read of
    each chunk of their span into one staging buffer and a strided copy (or a copy per piece)
    out of it.  The bytes read, as :func:`read_at` counts them."""
    if len(pieces) < _SIEVE_PIECES:
        return read_at(fd, mem, pieces, call)
    import numpy as np

    dst = np.frombuffer(mem, np.uint8)
    stage = None
    done = i = 0
    npieces = len(pieces)
    while i < npieces:
        lo = pieces[i][0]
        j, data = i, 0
        while j < npieces and pieces[j][0] + pieces[j][1] - lo <= _SIEVE_CHUNK and (j == i or pieces[j][0] >
                                                                                   pieces[j - 1][0]):
            data += pieces[j][1]
            j += 1
        hi = pieces[j - 1][0] + pieces[j - 1][1]
        if j - i < _SIEVE_PIECES or hi - lo > _SIEVE_RATIO * data + 65536:  # (j == i: a piece above a chunk)
            j = max(j, i + 1)
            got = read_at(fd, memoryview(dst[done:]), pieces[i:j], call)
            done += got
            if got < sum(n for _, n in pieces[i:j]):
                return done
            i = j
            continue
        if stage is None:
            stage = np.empty(_SIEVE_CHUNK, np.uint8)
        got = read_at(fd, memoryview(stage)[:hi - lo], [(lo, hi - lo)], call)
        group = pieces[i:j]
        n0, stride = group[0][1], group[1][0] - group[0][0]
        if got == hi - lo and all(n == n0 for _, n in group) and \
                all(b[0] - a[0] == stride for a, b in zip(group, group[1:])):  # a grid: one copy
            k = len(group)
            src = np.lib.stride_tricks.as_strided(stage, (k, n0), (stride, 1))
            dst[done:done + k * n0].reshape(k, n0)[:] = src
            done += k * n0
            i = j
            continue
        end = lo + got  # (the end of the file, where it came first)
        for o, n in group:
            m = min(n, end - o)
            if m <= 0:
                return done
            dst[done:done + m] = stage[o - lo:o - lo + m]
            done += m
            if m < n:
                return done
        i = j
    return done


@contextlib.contextmanager
def locked(fd: int, pieces, exclusive: bool, call: str):
    """Hold an ``fcntl`` byte-range lock over the range the pieces span (atomic mode)."""
    if not pieces:
        yield
        return
    lo = min(o for o, _ in pieces)
    hi = max(o + n for o, n in pieces)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, hi - lo, lo, os.SEEK_SET)
    except OSError as e:
        raise failed(e, call, f"cannot lock bytes {lo}..{hi}") from None
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.lockf(fd, fcntl.LOCK_UN, hi - lo, lo, os.SEEK_SET)
