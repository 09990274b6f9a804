"""Parallel files (MPI_File): MPI-IO on host and device buffers (L5).

Theory of operation
===================
``File`` validates a call and reduces it to one form: *this process's data stream bytes
``[pos, pos + n)`` of its view, to or from a contiguous staging of the buffer*.  The view
(``gpumpi.io.view``, pure) turns the range into file pieces; ``gpumpi.io.posix`` reads or
writes them (the only module with file system calls).  The buffer side is the message
path's own (``_p2p.outgoing``/``incoming``): a contiguous host buffer is read into or
written from in place; a non-contiguous datatype is packed or unpacked by the datatype
plans; device memory (CuPy, ``__cuda_array_interface__``, the simulated device) goes
through host staging and the device adapter.  The data representation ``external32``
converts the packed stream with the datatype's external32 plan (sizes must be the native
ones: see ``file_access.codec``); ``native`` and ``internal`` are the bytes as they are.

The access families differ only in where ``pos`` comes from:

* explicit offsets (``*_at``): the offset given, in etypes;
* the individual pointer (``Read``, ``Write``, ``Seek``...): this process's position, moved
  by the etypes accessed;
* the shared pointer (``*_shared``, ``*_ordered``): one int64 in an RMA window of the file's
  communicator (rank 0's memory), moved atomically by ``Fetch_and_op``; the ordered calls
  take their offsets in rank order from one exclusive scan and move it once (rank 0).

Collective calls (``*_all``, ``*_ordered``, their split ``_begin``/``_end`` forms) run the
same accesses (each process's pieces are its own; MPI does not order the processes of a
collective access), and nonblocking calls complete before they return a request (MPI lets
an operation complete at any time before its wait).  Atomic mode holds an ``fcntl``
byte-range lock over the range an access spans.  ``Open`` duplicates the communicator (the
file's collectives never meet the user's messages) and checks that every process passed
the same access mode; its failures, and every file's by default, go to the error handler
of ``FILE_NULL`` (``ERRORS_RETURN`` unless set), as MPI says.
"""

from __future__ import annotations

import os

from . import _p2p
from . import file_access as _io
from ._handles import Handle, Table
from .constants import (ANY_SOURCE, ANY_TAG, DISPLACEMENT_CURRENT, LOCK_SHARED, MODE_APPEND, MODE_CREATE,
                        MODE_DELETE_ON_CLOSE, MODE_EXCL, MODE_RDONLY, MODE_RDWR, MODE_SEQUENTIAL, MODE_UNIQUE_OPEN,
                        MODE_WRONLY, SEEK_CUR, SEEK_END, SEEK_SET)
from .datatypes import flatten
from .datatypes._core import Datatype
from .datatypes.plan import external_plan
from .datatypes.predefined import BYTE
from .errors import (ERR_AMODE, ERR_ARG, ERR_BAD_FILE, ERR_COMM, ERR_DUP_DATAREP, ERR_ERRHANDLER,
                     ERR_FILE, ERR_NO_SUCH_FILE, ERR_NOT_SAME, ERR_OTHER, ERR_TYPE, ERR_UNSUPPORTED_DATAREP,
                     ERR_UNSUPPORTED_OPERATION, ERRORS_RETURN, Errhandler, error)
from .errors import Exception as MPIException
from .group import Group
from .info import INFO_NULL, Info
from .io import posix
from .io import view as _view
from .op import SUM
from .request import Request, done_xfer
from .status import Status

__all__ = ["FILE_NULL", "File", "Register_datarep"]

_NULL_H = 0
_MODES = (MODE_RDONLY | MODE_RDWR | MODE_WRONLY | MODE_CREATE | MODE_EXCL | MODE_DELETE_ON_CLOSE | MODE_UNIQUE_OPEN
          | MODE_SEQUENTIAL | MODE_APPEND)
#: the data representations gpumpi reads and writes itself
_DATAREPS = ("native", "internal", "external32")
#: user data representations (MPI_Register_datarep): name -> (read_fn, write_fn, extent_fn)
_USER_DATAREPS: dict = {}
#: ROMIO's hints, reported by Get_info with these defaults until set
_HINTS = {"cb_buffer_size": "16777216", "romio_cb_read": "automatic", "romio_cb_write": "automatic",
          "romio_no_indep_rw": "false", "romio_cb_pfr": "disable", "romio_cb_fr_types": "aar",
          "romio_cb_fr_alignment": "1", "romio_cb_ds_threshold": "0", "romio_cb_alltoall": "automatic",
          "ind_rd_buffer_size": "4194304", "ind_wr_buffer_size": "524288", "romio_ds_read": "automatic",
          "romio_ds_write": "automatic", "striping_factor": "0", "striping_unit": "0"}
_STATE_DEFAULT = [ERRORS_RETURN]  # the error handler of FILE_NULL: new files start with it


class _State:
    __slots__ = ("h", "fd", "path", "amode", "comm", "hints", "atomic", "view", "pos", "shared", "errh", "split",
                 "closed")


def _comm_arg(comm, call: str):
    from .comm.base import Comm

    if not isinstance(comm, Comm):
        raise TypeError(f"{call}: expecting a communicator (got {type(comm).__name__})")
    if not comm:
        raise error(ERR_COMM, f"{call}: invalid communicator (COMM_NULL)")
    if comm.Is_inter():
        raise error(ERR_COMM, f"{call}: an intercommunicator cannot open a file")
    return comm


def _path(filename, call: str) -> str:
    try:
        p = os.fsdecode(os.fspath(filename))
    except TypeError:
        raise TypeError(f"{call}: filename must be str, bytes or a path ({type(filename).__name__})") from None
    if not p or "\0" in p:
        raise error(ERR_BAD_FILE, f"{call}: invalid file name ({filename!r})")
    return p


def _amode(amode, call: str) -> int:
    a = _int(amode, call, "amode")
    access = a & (MODE_RDONLY | MODE_RDWR | MODE_WRONLY)
    if a & ~_MODES or access not in (MODE_RDONLY, MODE_RDWR, MODE_WRONLY):
        raise error(ERR_AMODE, f"{call}: invalid access mode ({a:#x}): exactly one of MODE_RDONLY, MODE_RDWR, "
                               f"MODE_WRONLY, and no unknown bits")
    if access == MODE_RDONLY and a & (MODE_CREATE | MODE_EXCL):
        raise error(ERR_AMODE, f"{call}: MODE_RDONLY with MODE_CREATE or MODE_EXCL ({a:#x})")
    if access == MODE_RDWR and a & MODE_SEQUENTIAL:
        raise error(ERR_AMODE, f"{call}: MODE_RDWR with MODE_SEQUENTIAL ({a:#x})")
    return a


def _int(v, call: str, what: str) -> int:
    if type(v) is int:
        return v
    try:
        return v.__index__()
    except AttributeError:
        raise TypeError(f"{call}: {what} must be an integer ({type(v).__name__})") from None


def _datatype(dt, call: str, what: str) -> Datatype:
    if not isinstance(dt, Datatype):
        raise TypeError(f"{call}: {what} must be a Datatype ({type(dt).__name__})")
    if not dt:
        raise error(ERR_TYPE, f"{call}: {what} is DATATYPE_NULL")
    dt._check(call)
    if not dt._rec.committed:
        raise error(ERR_TYPE, f"{call}: {what} has not been committed ({dt!r})")
    return dt


def _extent32(dt: Datatype, call: str) -> int:
    ep = external_plan(dt)
    if ep.esize != dt._size:
        raise NotImplementedError(f"{call}: external32 with types whose external32 size differs from the native "
                                  f"one ({dt!r}) is not supported")
    return dt._extent


class File(Handle):
    """File I/O context (MPI_File)."""

    __slots__ = ("_st", "__weakref__")
    _hnull = _NULL_H
    _htable = Table("File", -0x40000000)

    def __init__(self, file: File | None = None) -> None:
        if file is None:
            self._st = None
        elif not isinstance(file, File):
            raise TypeError(f"File: expecting a File (got {type(file).__name__})")
        else:
            self._st = file._st

    def _hval(self) -> int:
        st = self._st
        return _NULL_H if st is None else st.h

    def _hnullify(self) -> None:
        self._st = None

    def _hfree(self) -> None:
        self.Close()

    def __repr__(self) -> str:
        st = self._st
        return "<File FILE_NULL>" if st is None else f"<File {st.path!r} amode={st.amode:#x}>"

    # -- checks and errors ---------------------------------------------------------------------
    def _check(self, call: str) -> _State:
        st = self._st
        if st is None:
            raise error(ERR_FILE, f"{call}: invalid file (FILE_NULL)")
        if st.closed:
            raise error(ERR_FILE, f"{call}: the file has been closed (through another reference)")
        return st

    def _raise(self, exc: MPIException):
        st = self._st
        errh = _STATE_DEFAULT[0] if st is None else st.errh
        errh._apply(self, exc)
        raise exc

    def _no_sequential(self, st: _State, call: str) -> None:
        if st.amode & MODE_SEQUENTIAL:
            raise error(ERR_UNSUPPORTED_OPERATION, f"{call}: not allowed on a file opened MODE_SEQUENTIAL")

    # -- opening and closing -------------------------------------------------------------------
    @classmethod
    def Open(cls, comm, filename, amode: int = MODE_RDONLY, info: Info = INFO_NULL) -> File:
        """Open a file on every process of ``comm`` (MPI_File_open); collective."""
        call = "File.Open"
        try:
            comm = _comm_arg(comm, call)
            path = _path(filename, call)
            a = _amode(amode, call)
            if info is not None and not isinstance(info, Info):
                raise TypeError(f"{call}: info must be an Info ({type(info).__name__})")
            if len(set(comm.allgather(a))) != 1:
                raise error(ERR_NOT_SAME, f"{call}: the processes passed different access modes ({a:#x} here)")
            read, write = not a & MODE_WRONLY, not a & MODE_RDONLY
            fd, err = -1, None
            if comm.Get_rank() == 0:  # the creator first, so that MODE_EXCL fails for the others' open alone
                try:
                    fd = posix.open_file(path, read, write, bool(a & MODE_CREATE), bool(a & MODE_EXCL), call)
                except MPIException as e:
                    err = (e.Get_error_class(), str(e))
            first = comm.bcast(err, 0)
            if first is not None:
                raise error(*first)
            if comm.Get_rank() != 0:
                try:
                    fd = posix.open_file(path, read, write, False, False, call)
                except MPIException as e:
                    err = (e.Get_error_class(), str(e))
            errs = [e for e in comm.allgather(err) if e is not None]
            if errs:
                if fd >= 0:
                    posix.close(fd)
                raise error(*errs[0])
            dup = comm.Dup()
            from .rma.win import Win

            shared = Win.Allocate(8 if dup.Get_rank() == 0 else 0, 8, comm=dup)
            if dup.Get_rank() == 0:
                shared.tomemory().cast("q")[0] = 0
            dup.Barrier()
        except MPIException as e:
            return FILE_NULL._raise(e)
        st = _State()
        st.h, st.fd, st.path, st.amode, st.comm, st.shared = cls._htable.new(), fd, path, a, dup, shared
        st.hints = dict(_HINTS, cb_nodes=str(dup.Get_size()))
        if info:
            st.hints.update(dict(info.items()))
        st.atomic, st.pos, st.split, st.closed, st.errh = False, 0, None, False, Errhandler(_STATE_DEFAULT[0])
        st.view = _view.make(0, BYTE, ((0, 1),), 1, BYTE, ((0, 1),), 1, 1, "native")
        f = cls.__new__(cls)
        f._st = st
        cls._htable.add(f)
        if a & MODE_APPEND:  # both pointers start at the end of the file
            end = posix.size(fd, call)
            st.pos = end
            if dup.Get_rank() == 0:
                shared.tomemory().cast("q")[0] = end
            dup.Barrier()
        return f

    def Close(self) -> None:
        """Close the file (MPI_File_close); collective.  The object becomes FILE_NULL."""
        call = "File.Close"
        try:
            st = self._check(call)
            if st.split is not None:
                raise error(ERR_OTHER, f"{call}: a split collective access is still in progress")
            c = st.comm
            try:
                c.Barrier()  # every process's accesses are done
                st.shared.Free()
            finally:  # (a failed peer: this process's descriptor is closed all the same)
                posix.close(st.fd)
                st.closed = True
            if st.amode & MODE_DELETE_ON_CLOSE and c.Get_rank() == 0:
                try:
                    posix.delete(st.path, call)
                except MPIException as e:
                    if e.Get_error_class() != ERR_NO_SUCH_FILE:  # (deleted already: nothing to do)
                        raise
            c.Barrier()
            c.Free()
        except MPIException as e:
            return self._raise(e)
        self._st = None

    @classmethod
    def Delete(cls, filename, info: Info = INFO_NULL) -> None:
        """Delete a file (MPI_File_delete)."""
        call = "File.Delete"
        try:
            path = _path(filename, call)
            posix.delete(path, call)
        except MPIException as e:
            return FILE_NULL._raise(e)

    # -- queries -------------------------------------------------------------------------------
    def Get_size(self) -> int:
        """The file's size in bytes (MPI_File_get_size)."""
        try:
            return posix.size(self._check("File.Get_size").fd, "File.Get_size")
        except MPIException as e:
            return self._raise(e)

    @property
    def size(self) -> int:
        """Size (in bytes)."""
        return self.Get_size()

    def Set_size(self, size: int) -> None:
        """Resize the file (MPI_File_set_size): truncate or extend; collective."""
        call = "File.Set_size"
        try:
            st = self._check(call)
            n = _int(size, call, "size")
            if n < 0:
                raise error(ERR_ARG, f"{call}: negative size ({n})")
            _io.writable(st, call)
            self._no_sequential(st, call)
            sizes = st.comm.allgather(n)
            if len(set(sizes)) != 1:
                raise error(ERR_NOT_SAME, f"{call}: the processes passed different sizes ({sizes})")
            if st.comm.Get_rank() == 0:
                posix.truncate(st.fd, n, call)
            st.comm.Barrier()
        except MPIException as e:
            return self._raise(e)

    def Preallocate(self, size: int) -> None:
        """Storage for the first ``size`` bytes (MPI_File_preallocate): the file grows, never shrinks; collective."""
        call = "File.Preallocate"
        try:
            st = self._check(call)
            n = _int(size, call, "size")
            if n < 0:
                raise error(ERR_ARG, f"{call}: negative size ({n})")
            _io.writable(st, call)
            self._no_sequential(st, call)
            if st.comm.Get_rank() == 0:
                posix.allocate(st.fd, n, call)
            st.comm.Barrier()
        except MPIException as e:
            return self._raise(e)

    def Get_group(self) -> Group:
        """The group of the communicator the file was opened on (MPI_File_get_group)."""
        c = self._check("File.Get_group").comm
        return c.Get_group()

    @property
    def group(self) -> Group:
        """Group."""
        return self.Get_group()

    @property
    def group_size(self) -> int:
        """Group size."""
        return self._check("File.group_size").comm.Get_size()

    @property
    def group_rank(self) -> int:
        """Group rank."""
        return self._check("File.group_rank").comm.Get_rank()

    def Get_amode(self) -> int:
        """The access mode the file was opened with (MPI_File_get_amode)."""
        return self._check("File.Get_amode").amode

    @property
    def amode(self) -> int:
        """Access mode."""
        return self.Get_amode()

    def Set_info(self, info: Info) -> None:
        """Set hints (MPI_File_set_info): ROMIO's keys are kept and reported back; collective."""
        call = "File.Set_info"
        st = self._check(call)
        if not isinstance(info, Info):
            raise TypeError(f"{call}: expecting an Info (got {type(info).__name__})")
        if info:
            st.hints.update(dict(info.items()))

    def Get_info(self) -> Info:
        """A new info object with the hints in use (MPI_File_get_info)."""
        return Info.Create(self._check("File.Get_info").hints)

    @property
    def info(self) -> Info:
        """Hints."""
        return self.Get_info()

    @info.setter
    def info(self, info: Info) -> None:
        self.Set_info(info)

    def Set_atomicity(self, flag: bool) -> None:
        """Atomic mode on or off (MPI_File_set_atomicity): byte-range locks around every access; collective."""
        st = self._check("File.Set_atomicity")
        st.atomic = bool(flag)

    def Get_atomicity(self) -> bool:
        """Whether atomic mode is on (MPI_File_get_atomicity)."""
        return self._check("File.Get_atomicity").atomic

    @property
    def atomicity(self) -> bool:
        """Atomicity."""
        return self.Get_atomicity()

    @atomicity.setter
    def atomicity(self, flag: bool) -> None:
        self.Set_atomicity(flag)

    def Sync(self) -> None:
        """Write the file's data to storage (MPI_File_sync); collective."""
        call = "File.Sync"
        try:
            st = self._check(call)
            posix.sync(st.fd, call)
            st.comm.Barrier()
        except MPIException as e:
            return self._raise(e)

    # -- error handling ------------------------------------------------------------------------
    def Get_errhandler(self) -> Errhandler:
        """A new reference to the file's error handler (MPI_File_get_errhandler)."""
        st = self._st
        return Errhandler(_STATE_DEFAULT[0] if st is None else self._check("File.Get_errhandler").errh)

    def Set_errhandler(self, errhandler: Errhandler) -> None:
        """Set the file's error handler (MPI_File_set_errhandler).

        On FILE_NULL: the handler new files start with, and ``Open``/``Delete`` failures use.
        """
        call = "File.Set_errhandler"
        if not isinstance(errhandler, Errhandler):
            raise TypeError(f"{call}: expecting an Errhandler (got {type(errhandler).__name__})")
        if not errhandler:
            raise error(ERR_ERRHANDLER, f"{call}: null error handler ({errhandler!r})")
        if self._st is None:
            _STATE_DEFAULT[0] = Errhandler(errhandler)
            return
        self._check(call).errh = Errhandler(errhandler)

    @classmethod
    def Create_errhandler(cls, errhandler_fn) -> Errhandler:
        """Create a file error handler ``fn(file, errorcode)`` (MPI_File_create_errhandler)."""
        return Errhandler._user(errhandler_fn, "File", "File.Create_errhandler")

    def Call_errhandler(self, errorcode: int) -> None:
        """Invoke the file's error handler (MPI_File_call_errhandler)."""
        call = "File.Call_errhandler"
        st = self._st
        errh = _STATE_DEFAULT[0] if st is None else self._check(call).errh
        errh.call(self, _int(errorcode, call, "errorcode"))

    # -- views ---------------------------------------------------------------------------------
    def Set_view(self, disp: int = 0, etype: Datatype = BYTE, filetype: Datatype | None = None,
                 datarep: str = "native", info: Info = INFO_NULL) -> None:
        """Set the file view (MPI_File_set_view); both file pointers go to its start; collective."""
        call = "File.Set_view"
        st = self._check(call)
        v = err = None
        try:
            v = self._view_of(st, disp, etype, filetype, datarep, call)
        except Exception as e:  # noqa: BLE001 - told to the others first (nobody waits for this process)
            err = e
        try:
            failed = st.comm.allgather(err is not None)  # (also: nobody still reads the old shared pointer)
            if err is not None:
                raise err
            if any(failed):
                raise error(ERR_OTHER, f"{call}: the view of another process of the file failed")
            if v is DISPLACEMENT_CURRENT:  # the shared pointer's byte position, as rank 0 sees it
                d = st.comm.bcast(st.view.byte_offset(self._shared_get()) if st.comm.Get_rank() == 0 else None, 0)
                v = self._view_of(st, d, etype, filetype, datarep, call)
            st.view, st.pos = v, 0
            if st.comm.Get_rank() == 0:
                self._shared_set(0)
            st.comm.Barrier()
        except MPIException as e:
            return self._raise(e)

    def _view_of(self, st: _State, disp, etype, filetype, datarep, call: str):
        """The view these arguments make (or DISPLACEMENT_CURRENT: its displacement is to be agreed)."""
        d = _int(disp, call, "disp")
        et = _datatype(etype, call, "etype")
        ft = et if filetype is None else _datatype(filetype, call, "filetype")
        if not isinstance(datarep, str):
            raise TypeError(f"{call}: datarep must be a str ({type(datarep).__name__})")
        if datarep not in _DATAREPS:
            if datarep in _USER_DATAREPS:
                raise NotImplementedError(f"{call}: user data representations ({datarep!r}) are registered "
                                          f"but not read or written by gpumpi yet")
            raise error(ERR_UNSUPPORTED_DATAREP, f"{call}: unknown data representation ({datarep!r})")
        if d == DISPLACEMENT_CURRENT:
            if not st.amode & MODE_SEQUENTIAL:
                raise error(ERR_ARG, f"{call}: DISPLACEMENT_CURRENT needs a file opened MODE_SEQUENTIAL")
            return DISPLACEMENT_CURRENT
        if datarep == "external32":
            _extent32(et, call)
            _extent32(ft, call)
        try:
            return _view.make(d, et, flatten.segments(et), et._size, ft, flatten.segments(ft), ft._size,
                              ft._extent, datarep)
        except _view.ViewError as e:
            raise error(ERR_ARG if e.argument else ERR_TYPE, f"{call}: {e}") from None

    def Get_view(self) -> tuple[int, Datatype, Datatype, str]:
        """The view: ``(disp, etype, filetype, datarep)`` (MPI_File_get_view).

        Derived types come back as new references (duplicates) the caller frees.
        """
        v = self._check("File.Get_view").view

        def ref(dt):
            return dt if dt.is_predefined else dt.Dup().Commit()

        return v.disp, ref(v.etype), ref(v.filetype), v.datarep

    def Get_byte_offset(self, offset: int) -> int:
        """The absolute byte position of view offset ``offset`` (MPI_File_get_byte_offset)."""
        call = "File.Get_byte_offset"
        try:
            st = self._check(call)
            o = _int(offset, call, "offset")
            if o < 0:
                raise error(ERR_ARG, f"{call}: negative offset ({o})")
            return st.view.byte_offset(o)
        except MPIException as e:
            return self._raise(e)

    def Get_type_extent(self, datatype: Datatype) -> int:
        """The extent of ``datatype`` in the file's data representation (MPI_File_get_type_extent)."""
        call = "File.Get_type_extent"
        st = self._check(call)
        if not isinstance(datatype, Datatype):
            raise TypeError(f"{call}: datatype must be a Datatype ({type(datatype).__name__})")
        datatype._check(call)
        return _extent32(datatype, call) if st.view.datarep == "external32" else datatype._extent

    # -- pointers ------------------------------------------------------------------------------
    def Seek(self, offset: int, whence: int = SEEK_SET) -> None:
        """Move the individual file pointer (MPI_File_seek)."""
        call = "File.Seek"
        try:
            st = self._check(call)
            self._no_sequential(st, call)
            st.pos = self._whence(st, _int(offset, call, "offset"), whence, st.pos, call)
        except MPIException as e:
            return self._raise(e)

    def Get_position(self) -> int:
        """The individual file pointer, in etypes of the view (MPI_File_get_position)."""
        return self._check("File.Get_position").pos

    def Seek_shared(self, offset: int, whence: int = SEEK_SET) -> None:
        """Move the shared file pointer (MPI_File_seek_shared); collective, same arguments everywhere."""
        call = "File.Seek_shared"
        try:
            st = self._check(call)
            o = _int(offset, call, "offset")
            args = st.comm.allgather((o, whence))
            if len(set(args)) != 1:
                raise error(ERR_NOT_SAME, f"{call}: the processes passed different arguments ({args})")
            st.comm.Barrier()
            if st.comm.Get_rank() == 0:
                self._shared_set(self._whence(st, o, whence, self._shared_get(), call))
            st.comm.Barrier()
        except MPIException as e:
            return self._raise(e)

    def Get_position_shared(self) -> int:
        """The shared file pointer, in etypes of the view (MPI_File_get_position_shared)."""
        try:
            self._check("File.Get_position_shared")
            return self._shared_get()
        except MPIException as e:
            return self._raise(e)

    def _whence(self, st: _State, offset: int, whence, cur: int, call: str) -> int:
        w = _int(whence, call, "whence")
        if w == SEEK_SET:
            pos = offset
        elif w == SEEK_CUR:
            pos = cur + offset
        elif w == SEEK_END:
            v = st.view
            pos = -(-v.stream_at(posix.size(st.fd, call)) // v.esize) + offset
        else:
            raise error(ERR_ARG, f"{call}: invalid whence ({w})")
        if pos < 0:
            raise error(ERR_ARG, f"{call}: the pointer would be negative ({pos})")
        return pos

    def _shared_op(self, add: int) -> int:
        """Fetch the shared pointer and add ``add`` to it, atomically (a lock epoch on rank 0)."""
        import numpy as np

        w = self._st.shared
        res = np.zeros(1, np.int64)
        w.Lock(0, LOCK_SHARED)
        try:
            w.Fetch_and_op(np.array([add], np.int64), res, 0, 0, SUM)
        finally:
            w.Unlock(0)
        return int(res[0])

    def _shared_get(self) -> int:
        return self._shared_op(0)

    def _shared_set(self, value: int) -> None:
        """Set the shared pointer (rank 0, between barriers: nobody else touches it)."""
        self._st.shared.tomemory().cast("q")[0] = value

    # -- the one access ------------------------------------------------------------------------
    def _done(self, n: int, status) -> int:
        if status is not None:
            if not isinstance(status, Status):
                raise TypeError(f"status must be a Status ({type(status).__name__})")
            status._fill(ANY_SOURCE, ANY_TAG, n)
        return n

    def _request(self, n: int) -> Request:
        x = done_xfer(ANY_SOURCE, ANY_TAG)
        x.st_nbytes = n
        return Request._of(x)

    # explicit offsets
    def _at(self, call: str, offset, buf, write: bool, coll: bool = False) -> int:
        st = self._check(call)
        self._no_sequential(st, call)
        return (_io.collective if coll else _io.access)(st, buf, _int(offset, call, "offset"), write, call)

    def Read_at(self, offset: int, buf, status: Status | None = None) -> None:
        """Read at an explicit offset (MPI_File_read_at)."""
        try:
            self._done(self._at("File.Read_at", offset, buf, False), status)
        except MPIException as e:
            return self._raise(e)

    def Write_at(self, offset: int, buf, status: Status | None = None) -> None:
        """Write at an explicit offset (MPI_File_write_at)."""
        try:
            self._done(self._at("File.Write_at", offset, buf, True), status)
        except MPIException as e:
            return self._raise(e)

    def Read_at_all(self, offset: int, buf, status: Status | None = None) -> None:
        """Collective read at explicit offsets (MPI_File_read_at_all)."""
        try:
            self._done(self._at("File.Read_at_all", offset, buf, False, True), status)
        except MPIException as e:
            return self._raise(e)

    def Write_at_all(self, offset: int, buf, status: Status | None = None) -> None:
        """Collective write at explicit offsets (MPI_File_write_at_all)."""
        try:
            self._done(self._at("File.Write_at_all", offset, buf, True, True), status)
        except MPIException as e:
            return self._raise(e)

    def Iread_at(self, offset: int, buf) -> Request:
        """Nonblocking read at an explicit offset (MPI_File_iread_at)."""
        try:
            return self._request(self._at("File.Iread_at", offset, buf, False))
        except MPIException as e:
            return self._raise(e)

    def Iwrite_at(self, offset: int, buf) -> Request:
        """Nonblocking write at an explicit offset (MPI_File_iwrite_at)."""
        try:
            return self._request(self._at("File.Iwrite_at", offset, buf, True))
        except MPIException as e:
            return self._raise(e)

    def Iread_at_all(self, offset: int, buf) -> Request:
        """Nonblocking collective read at explicit offsets (MPI_File_iread_at_all)."""
        try:
            return self._request(self._at("File.Iread_at_all", offset, buf, False, True))
        except MPIException as e:
            return self._raise(e)

    def Iwrite_at_all(self, offset: int, buf) -> Request:
        """Nonblocking collective write at explicit offsets (MPI_File_iwrite_at_all)."""
        try:
            return self._request(self._at("File.Iwrite_at_all", offset, buf, True, True))
        except MPIException as e:
            return self._raise(e)

    # the individual pointer
    def _ind(self, call: str, buf, write: bool, coll: bool = False) -> int:
        st = self._check(call)
        self._no_sequential(st, call)
        n = (_io.collective if coll else _io.access)(st, buf, st.pos, write, call)
        st.pos += n // st.view.esize
        return n

    def Read(self, buf, status: Status | None = None) -> None:
        """Read at the individual file pointer (MPI_File_read)."""
        try:
            self._done(self._ind("File.Read", buf, False), status)
        except MPIException as e:
            return self._raise(e)

    def Write(self, buf, status: Status | None = None) -> None:
        """Write at the individual file pointer (MPI_File_write)."""
        try:
            self._done(self._ind("File.Write", buf, True), status)
        except MPIException as e:
            return self._raise(e)

    def Read_all(self, buf, status: Status | None = None) -> None:
        """Collective read at the individual file pointers (MPI_File_read_all)."""
        try:
            self._done(self._ind("File.Read_all", buf, False, True), status)
        except MPIException as e:
            return self._raise(e)

    def Write_all(self, buf, status: Status | None = None) -> None:
        """Collective write at the individual file pointers (MPI_File_write_all)."""
        try:
            self._done(self._ind("File.Write_all", buf, True, True), status)
        except MPIException as e:
            return self._raise(e)

    def Iread(self, buf) -> Request:
        """Nonblocking read at the individual file pointer (MPI_File_iread)."""
        try:
            return self._request(self._ind("File.Iread", buf, False))
        except MPIException as e:
            return self._raise(e)

    def Iwrite(self, buf) -> Request:
        """Nonblocking write at the individual file pointer (MPI_File_iwrite)."""
        try:
            return self._request(self._ind("File.Iwrite", buf, True))
        except MPIException as e:
            return self._raise(e)

    def Iread_all(self, buf) -> Request:
        """Nonblocking collective read at the individual file pointers (MPI_File_iread_all)."""
        try:
            return self._request(self._ind("File.Iread_all", buf, False, True))
        except MPIException as e:
            return self._raise(e)

    def Iwrite_all(self, buf) -> Request:
        """Nonblocking collective write at the individual file pointers (MPI_File_iwrite_all)."""
        try:
            return self._request(self._ind("File.Iwrite_all", buf, True, True))
        except MPIException as e:
            return self._raise(e)

    # the shared pointer
    def _sh(self, call: str, buf, write: bool) -> int:
        st = self._check(call)
        m = _p2p.msg(buf, write, 0, call)
        k = m.nbytes // st.view.esize
        return _io.access(st, buf, self._shared_op(k), write, call)

    def Read_shared(self, buf, status: Status | None = None) -> None:
        """Read at the shared file pointer (MPI_File_read_shared)."""
        try:
            self._done(self._sh("File.Read_shared", buf, False), status)
        except MPIException as e:
            return self._raise(e)

    def Write_shared(self, buf, status: Status | None = None) -> None:
        """Write at the shared file pointer (MPI_File_write_shared)."""
        try:
            self._done(self._sh("File.Write_shared", buf, True), status)
        except MPIException as e:
            return self._raise(e)

    def Iread_shared(self, buf) -> Request:
        """Nonblocking read at the shared file pointer (MPI_File_iread_shared)."""
        try:
            return self._request(self._sh("File.Iread_shared", buf, False))
        except MPIException as e:
            return self._raise(e)

    def Iwrite_shared(self, buf) -> Request:
        """Nonblocking write at the shared file pointer (MPI_File_iwrite_shared)."""
        try:
            return self._request(self._sh("File.Iwrite_shared", buf, True))
        except MPIException as e:
            return self._raise(e)

    def _ordered(self, call: str, buf, write: bool) -> int:
        """The ordered access: offsets in rank order from the shared pointer, moved once by all."""
        st = self._check(call)
        m = _p2p.msg(buf, write, 0, call)
        k = m.nbytes // st.view.esize
        counts = st.comm.allgather(k)
        r = st.comm.Get_rank()
        base = st.comm.bcast(self._shared_op(sum(counts)) if r == 0 else None, 0)
        return _io.access(st, buf, base + sum(counts[:r]), write, call)

    def Read_ordered(self, buf, status: Status | None = None) -> None:
        """Collective read at the shared file pointer, in rank order (MPI_File_read_ordered)."""
        try:
            self._done(self._ordered("File.Read_ordered", buf, False), status)
        except MPIException as e:
            return self._raise(e)

    def Write_ordered(self, buf, status: Status | None = None) -> None:
        """Collective write at the shared file pointer, in rank order (MPI_File_write_ordered)."""
        try:
            self._done(self._ordered("File.Write_ordered", buf, True), status)
        except MPIException as e:
            return self._raise(e)

    # split collectives: the access at _begin, its status at _end (one at a time per file)
    def _begin(self, call: str, fn, *args) -> None:
        try:
            st = self._check(call)
            if st.split is not None:
                raise error(ERR_OTHER, f"{call}: another split collective access ({st.split[0]}) is in progress")
            st.split = (call.replace("_begin", ""), fn(*args))
        except MPIException as e:
            return self._raise(e)

    def _end(self, call: str, buf, status) -> None:
        try:
            st = self._check(call)
            want = call.replace("_end", "")
            if st.split is None or st.split[0] != want:
                raise error(ERR_OTHER, f"{call}: no {want}_begin in progress")
            n = st.split[1]
            st.split = None
            self._done(n, status)
        except MPIException as e:
            return self._raise(e)

    def Read_at_all_begin(self, offset: int, buf) -> None:
        """Start a split collective read at explicit offsets (MPI_File_read_at_all_begin)."""
        self._begin("File.Read_at_all_begin", self._at, "File.Read_at_all_begin", offset, buf, False, True)

    def Read_at_all_end(self, buf, status: Status | None = None) -> None:
        """Complete a split collective read at explicit offsets (MPI_File_read_at_all_end)."""
        self._end("File.Read_at_all_end", buf, status)

    def Write_at_all_begin(self, offset: int, buf) -> None:
        """Start a split collective write at explicit offsets (MPI_File_write_at_all_begin)."""
        self._begin("File.Write_at_all_begin", self._at, "File.Write_at_all_begin", offset, buf, True, True)

    def Write_at_all_end(self, buf, status: Status | None = None) -> None:
        """Complete a split collective write at explicit offsets (MPI_File_write_at_all_end)."""
        self._end("File.Write_at_all_end", buf, status)

    def Read_all_begin(self, buf) -> None:
        """Start a split collective read (MPI_File_read_all_begin)."""
        self._begin("File.Read_all_begin", self._ind, "File.Read_all_begin", buf, False, True)

    def Read_all_end(self, buf, status: Status | None = None) -> None:
        """Complete a split collective read (MPI_File_read_all_end)."""
        self._end("File.Read_all_end", buf, status)

    def Write_all_begin(self, buf) -> None:
        """Start a split collective write (MPI_File_write_all_begin)."""
        self._begin("File.Write_all_begin", self._ind, "File.Write_all_begin", buf, True, True)

    def Write_all_end(self, buf, status: Status | None = None) -> None:
        """Complete a split collective write (MPI_File_write_all_end)."""
        self._end("File.Write_all_end", buf, status)

    def Read_ordered_begin(self, buf) -> None:
        """Start a split collective ordered read (MPI_File_read_ordered_begin)."""
        self._begin("File.Read_ordered_begin", self._ordered, "File.Read_ordered_begin", buf, False)

    def Read_ordered_end(self, buf, status: Status | None = None) -> None:
        """Complete a split collective ordered read (MPI_File_read_ordered_end)."""
        self._end("File.Read_ordered_end", buf, status)

    def Write_ordered_begin(self, buf) -> None:
        """Start a split collective ordered write (MPI_File_write_ordered_begin)."""
        self._begin("File.Write_ordered_begin", self._ordered, "File.Write_ordered_begin", buf, True)

    def Write_ordered_end(self, buf, status: Status | None = None) -> None:
        """Complete a split collective ordered write (MPI_File_write_ordered_end)."""
        self._end("File.Write_ordered_end", buf, status)


File._hbase = File

#: Null file (MPI_FILE_NULL).
FILE_NULL = File._htable.constant(File(), "FILE_NULL")


def Register_datarep(datarep: str, read_fn, write_fn, extent_fn) -> None:
    """Register a user data representation (MPI_Register_datarep).

    The name is taken (a second registration is ``ERR_DUP_DATAREP``); views with it are not
    read or written yet (``Set_view`` raises ``NotImplementedError``).
    """
    call = "Register_datarep"
    if not isinstance(datarep, str):
        raise TypeError(f"{call}: datarep must be a str ({type(datarep).__name__})")
    if not callable(extent_fn):
        raise TypeError(f"{call}: extent_fn must be callable")
    if datarep in _DATAREPS or datarep in _USER_DATAREPS:
        raise error(ERR_DUP_DATAREP, f"{call}: the data representation {datarep!r} exists already")
    _USER_DATAREPS[datarep] = (read_fn, write_fn, extent_fn)
