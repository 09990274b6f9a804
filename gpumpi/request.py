"""Requests: nonblocking operations and their completion (MPI_Request) (L5).

Theory of operation
===================
A :class:`Request` wraps one :class:`~gpumpi._progress.Xfer` in flight.  Blocking
calls are the nonblocking call plus :meth:`Request.Wait`.  Completing a request
copies its envelope into the caller's :class:`Status`, raises the operation's
error (if any) through the communicator's error handler, and turns the request
into ``REQUEST_NULL`` (a persistent request becomes inactive instead, ready for
``Start``).  Object requests (lowercase API) carry a ``post`` function that
unpickles the received bytes.  Multi-request calls follow MPI: completed entries
of the caller's list become ``REQUEST_NULL``; with several errors they raise
``ERR_IN_STATUS`` and every status names its request's error.
"""

from __future__ import annotations

from . import _compiled
from . import _runtime as _rt
from ._xfer import GREQ, RECV, SENT, Xfer
from .constants import ANY_TAG, PROC_NULL, UNDEFINED
from .errors import ERR_IN_STATUS, ERR_OTHER, ERR_PENDING, ERR_REQUEST, SUCCESS, Get_error_string, error
from .errors import Exception as MPIException
from ._handles import Handle, Table
from .status import Status


def _engine():
    return _rt.ENGINE


def check_status(status, call: str) -> None:
    """Raise TypeError unless ``status`` is a Status or None (checked before anything happens)."""
    if status is not None and not isinstance(status, Status):
        raise TypeError(f"{call}: status must be a Status or None ({type(status).__name__})")


def _requests(requests, call: str, cls=None) -> list:
    """The caller's requests as a list, every one a Request (``cls``: of that class), or TypeError."""
    try:
        reqs = list(requests)
    except TypeError:
        raise TypeError(f"{call}: expected a sequence of requests ({type(requests).__name__})") from None
    want = cls or Request
    for i, r in enumerate(reqs):
        if not isinstance(r, want):
            raise TypeError(f"{call}: expected a sequence of {want.__name__} objects "
                            f"(item {i} is {type(r).__name__})")
    return reqs


def _check_statuses(statuses, call: str) -> None:
    """``statuses``: None, or a sequence of Status objects (a list is grown as needed; entries
    past the end of another sequence are not filled)."""
    if statuses is None:
        return
    try:
        entries = list(statuses)
    except TypeError:
        raise TypeError(f"{call}: statuses must be a list of Status objects or None "
                        f"({type(statuses).__name__})") from None
    for i, st in enumerate(entries):
        if not isinstance(st, Status):
            raise TypeError(f"{call}: statuses must hold Status objects (item {i} is {type(st).__name__})")


_NULL_H = 0x2C000000


def _all_done(xs: list):
    """A predicate: whether every operation of ``xs`` is done.  Each pass of a wait looks on
    from the first one not done before (once done, an operation stays done), so a window of
    ``n`` requests costs ``n`` looks in all, not ``n`` per pass."""
    n = len(xs)
    i = 0

    def done() -> bool:
        nonlocal i
        while i < n and xs[i].done:
            i += 1
        return i == n

    return done


_new = object.__new__


class Request(Handle):
    """Request handle (MPI_Request)."""

    __slots__ = ("_x", "_comm", "_post", "_keep", "_value", "_h", "__weakref__")
    _hnull = _NULL_H
    _htable = Table("Request", -0x54000000)

    def __init__(self, request: "Request | None" = None) -> None:
        if request is None:
            self._x = self._comm = self._post = self._keep = self._value = None
            self._h = _NULL_H
        elif not isinstance(request, Request):
            raise TypeError(f"{type(self).__name__}: expecting a Request (got {type(request).__name__})")
        else:
            self._x, self._comm, self._post = request._x, request._comm, request._post
            self._keep, self._value, self._h = request._keep, request._value, request._hown()
        self._init_more(request)

    def _init_more(self, request) -> None:
        """Subclasses copy their own state from ``request`` (or set the null state)."""

    @classmethod
    def _of(cls, x, comm=None, post=None, keep=None) -> "Request":
        r = _new(cls)  # Handle.__new__ is object.__new__ behind a Python frame: the hot path skips it
        r._x, r._comm, r._post, r._keep, r._value = x, comm, post, keep, None
        return r  # its handle value is given on first use (_hown)

    # --- handle: one per operation; a completed (or freed) request is REQUEST_NULL
    def _hown(self) -> int:
        """This request's own handle value, given on first use (subclasses built elsewhere
        with ``__new__`` get theirs here)."""
        try:
            return self._h
        except AttributeError:
            self._h = self._htable.new()
            return self._h

    def _hval(self) -> int:
        return _NULL_H if self._x is None else self._hown()

    def _hnullify(self) -> None:
        self._x = self._keep = None
        self._h = _NULL_H

    def __bool__(self) -> bool:
        return self._x is not None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {'REQUEST_NULL' if self._x is None else 'active'}>"

    # --- completion core ------------------------------------------------------------------
    def _active(self):
        return self._x

    def _release(self) -> None:
        """After completion: a plain request becomes REQUEST_NULL."""
        self._x = None
        self._keep = None

    def _finish(self, status) -> None:
        """Write the status, release the request, raise the operation's error."""
        x = self._x
        if status is not None:
            status._fill(x.st_source, x.st_tag, x.st_nbytes, x.err, x.cancelled)
        post = self._post
        self._release()
        if x.err:
            exc = error(x.err, x.errmsg or "")
            comm = self._comm
            if comm is not None:
                comm._errh._apply(comm, exc)
            raise exc
        if post is not None and not x.cancelled:
            self._value = post(x)
        else:
            self._value = None

    def _empty(self, status) -> None:
        if status is not None:
            status._fill(-2, -1, 0)
        self._value = None

    # --- buffer API ---------------------------------------------------------------------
    def Wait(self, status: Status | None = None) -> bool:
        """Wait for completion (MPI_Wait)."""
        check_status(status, "Request.Wait")
        x = self._active()
        if x is None:
            self._empty(status)
            return True
        if not x.done:
            _engine().wait(x)
        self._finish(status)
        return True

    def Test(self, status: Status | None = None) -> bool:
        """Test for completion (MPI_Test)."""
        check_status(status, "Request.Test")
        x = self._active()
        if x is None:
            self._empty(status)
            return True
        if not x.done:
            eng = _engine()
            with eng.lock:
                if not eng.quiet():
                    eng.progress()
            if not x.done:
                return False
        self._finish(status)
        return True

    def Get_status(self, status: Status | None = None) -> bool:
        """Test for completion without freeing the request (MPI_Request_get_status)."""
        check_status(status, "Request.Get_status")
        x = self._active()
        if x is None:
            self._empty(status)
            return True
        if not x.done:
            eng = _engine()
            with eng.lock:
                eng.progress()
        if x.done and status is not None:
            status._fill(x.st_source, x.st_tag, x.st_nbytes, x.err, x.cancelled)
        return x.done

    def Cancel(self) -> None:
        """Cancel a pending request (MPI_Cancel); completion is still needed."""
        x = self._active()
        if x is None:
            raise error(ERR_REQUEST, "Request.Cancel: null request")
        if x.kind == 2:  # generalized request, or a joint operation (an object message with device parts)
            fn = getattr(x, "cancel_fn", None)
            if fn is not None:
                fn()
            else:
                self._cancel_greq(x)
            return
        _engine().cancel(x)

    def _cancel_greq(self, x) -> None:
        raise error(ERR_REQUEST, "Request.Cancel: not a generalized request")

    def Free(self) -> None:
        """Free the request (MPI_Request_free); a pending operation still completes.

        The engine keeps the operation (and through it the buffers) until it is done.
        """
        if self._x is None:
            raise error(ERR_REQUEST, "Request.Free: null request")
        self._x = None
        self._keep = None

    # --- multiple completion (buffer API) -------------------------------------------------
    @classmethod
    def Waitany(cls, requests, status: Status | None = None) -> int:
        """Wait for any request to complete (MPI_Waitany); UNDEFINED if none active."""
        reqs = _requests(requests, "Request.Waitany")
        check_status(status, "Request.Waitany")
        act = [(i, r._active()) for i, r in enumerate(reqs) if r._active() is not None]
        if not act:
            if status is not None:
                status._fill(-2, -1, 0)
            return UNDEFINED
        if not any(x.done for _, x in act):
            _engine().wait_any([x for _, x in act])
        for i, x in act:
            if x.done:
                r = reqs[i]
                try:
                    r._finish(status)
                finally:
                    _writeback(requests, i, r)
                return i
        raise AssertionError("unreachable")

    @classmethod
    def Testany(cls, requests, status: Status | None = None) -> tuple[int, bool]:
        """Test for any completed request (MPI_Testany)."""
        reqs = _requests(requests, "Request.Testany")
        check_status(status, "Request.Testany")
        act = [(i, r._active()) for i, r in enumerate(reqs) if r._active() is not None]
        if not act:
            if status is not None:
                status._fill(-2, -1, 0)
            return UNDEFINED, True
        eng = _engine()
        with eng.lock:
            eng.progress()
        for i, x in act:
            if x.done:
                r = reqs[i]
                try:
                    r._finish(status)
                finally:
                    _writeback(requests, i, r)
                return i, True
        return UNDEFINED, False

    @classmethod
    def Get_status_any(cls, requests, status: Status | None = None) -> tuple[int, bool]:
        """Like Testany, without freeing (MPI_Request_get_status_any)."""
        reqs = _requests(requests, "Request.Get_status_any")
        check_status(status, "Request.Get_status_any")
        act = [(i, r._active()) for i, r in enumerate(reqs) if r._active() is not None]
        if not act:
            if status is not None:
                status._fill(-2, -1, 0)
            return UNDEFINED, True
        eng = _engine()
        with eng.lock:
            eng.progress()
        for i, x in act:
            if x.done:
                if status is not None:
                    status._fill(x.st_source, x.st_tag, x.st_nbytes, x.err, x.cancelled)
                return i, True
        return UNDEFINED, False

    @classmethod
    def Waitall(cls, requests, statuses=None) -> bool:
        """Wait for all requests (MPI_Waitall)."""
        reqs = _requests(requests, "Request.Waitall")
        _check_statuses(statuses, "Request.Waitall")
        xs = [r._active() for r in reqs]
        eng = _engine()
        pend = [x for x in xs if x is not None and not x.done]
        if pend:
            eng.wait_until(_all_done(pend))
        _complete_many(requests, reqs, range(len(reqs)), statuses)
        return True

    @classmethod
    def Testall(cls, requests, statuses=None) -> bool:
        """Test whether all requests completed (MPI_Testall); completes them all if so."""
        reqs = _requests(requests, "Request.Testall")
        _check_statuses(statuses, "Request.Testall")
        eng = _engine()
        with eng.lock:
            eng.progress()
        if any(r._active() is not None and not r._active().done for r in reqs):
            return False
        _complete_many(requests, reqs, range(len(reqs)), statuses)
        return True

    @classmethod
    def Get_status_all(cls, requests, statuses=None) -> bool:
        """Whether all requests completed, without freeing (MPI_Request_get_status_all)."""
        reqs = _requests(requests, "Request.Get_status_all")
        _check_statuses(statuses, "Request.Get_status_all")
        eng = _engine()
        with eng.lock:
            eng.progress()
        xs = [r._active() for r in reqs]
        if any(x is not None and not x.done for x in xs):
            return False
        if statuses is not None:
            _grow(statuses, len(reqs))
            for i, x in enumerate(xs[:len(statuses)]):
                if x is None:
                    statuses[i]._fill(-2, -1, 0)
                else:
                    statuses[i]._fill(x.st_source, x.st_tag, x.st_nbytes, x.err, x.cancelled)
        return True

    @classmethod
    def Waitsome(cls, requests, statuses=None):
        """Wait for some requests (MPI_Waitsome); None if none active."""
        reqs = _requests(requests, "Request.Waitsome")
        _check_statuses(statuses, "Request.Waitsome")
        act = [r._active() for r in reqs]
        live = [x for x in act if x is not None]
        if not live:
            return None
        if not any(x.done for x in live):
            _engine().wait_any(live)
        idx = [i for i, x in enumerate(act) if x is not None and x.done]
        _complete_many(requests, reqs, idx, statuses, compact=True)
        return idx

    @classmethod
    def Testsome(cls, requests, statuses=None):
        """Test for some completed requests (MPI_Testsome); None if none active."""
        reqs = _requests(requests, "Request.Testsome")
        _check_statuses(statuses, "Request.Testsome")
        act = [r._active() for r in reqs]
        if all(x is None for x in act):
            return None
        eng = _engine()
        with eng.lock:
            eng.progress()
        idx = [i for i, x in enumerate(act) if x is not None and x.done]
        _complete_many(requests, reqs, idx, statuses, compact=True)
        return idx

    @classmethod
    def Get_status_some(cls, requests, statuses=None):
        """Indices of completed requests, without freeing (MPI_Request_get_status_some)."""
        reqs = _requests(requests, "Request.Get_status_some")
        _check_statuses(statuses, "Request.Get_status_some")
        act = [r._active() for r in reqs]
        if all(x is None for x in act):
            return None
        eng = _engine()
        with eng.lock:
            eng.progress()
        idx = [i for i, x in enumerate(act) if x is not None and x.done]
        if statuses is not None:
            _grow(statuses, len(idx))
            for k, i in enumerate(idx[:len(statuses)]):
                x = act[i]
                statuses[k]._fill(x.st_source, x.st_tag, x.st_nbytes, x.err, x.cancelled)
        return idx

    # --- object API -----------------------------------------------------------------------
    def wait(self, status: Status | None = None):
        """Wait and return the received object (None for sends)."""
        self.Wait(status)
        return self._value

    def test(self, status: Status | None = None):
        """Test; returns (flag, object or None)."""
        flag = self.Test(status)
        return flag, (self._value if flag else None)

    def get_status(self, status: Status | None = None) -> bool:
        """Test without freeing the request."""
        return self.Get_status(status)

    def cancel(self) -> None:
        """Cancel the request."""
        self.Cancel()

    @classmethod
    def get_status_any(cls, requests, status: Status | None = None) -> tuple[int, bool]:
        """Non-destructive test for the completion of any request (MPI_Request_get_status_any)."""
        return Request.Get_status_any(requests, status)

    @classmethod
    def get_status_all(cls, requests, statuses=None) -> bool:
        """Non-destructive test for the completion of all requests (MPI_Request_get_status_all)."""
        return Request.Get_status_all(requests, statuses)

    @classmethod
    def get_status_some(cls, requests, statuses=None):
        """Non-destructive test for the completion of some requests (MPI_Request_get_status_some)."""
        return Request.Get_status_some(requests, statuses)

    @classmethod
    def waitany(cls, requests, status: Status | None = None):
        """Wait for any; returns (index, object)."""
        i = cls.Waitany(requests, status)
        return i, (_value_at(requests, i) if i != UNDEFINED else None)

    @classmethod
    def testany(cls, requests, status: Status | None = None):
        """Test for any; returns (index, flag, object)."""
        saved = list(requests)
        i, flag = cls.Testany(requests, status)
        return i, flag, (saved[i]._value if flag and i != UNDEFINED else None)

    @classmethod
    def waitall(cls, requests, statuses=None) -> list:
        """Wait for all; returns the list of objects."""
        saved = list(requests)
        cls.Waitall(requests, statuses)
        return [r._value for r in saved]

    @classmethod
    def testall(cls, requests, statuses=None):
        """Test all; returns (flag, objects or None)."""
        saved = list(requests)
        flag = cls.Testall(requests, statuses)
        return flag, ([r._value for r in saved] if flag else None)

    @classmethod
    def waitsome(cls, requests, statuses=None):
        """Wait for some; returns (indices, objects) or (None, None)."""
        saved = list(requests)
        idx = cls.Waitsome(requests, statuses)
        if idx is None:
            return None, None
        return idx, [saved[i]._value for i in idx]

    @classmethod
    def testsome(cls, requests, statuses=None):
        """Test some; returns (indices, objects) or (None, None)."""
        saved = list(requests)
        idx = cls.Testsome(requests, statuses)
        if idx is None:
            return None, None
        return idx, [saved[i]._value for i in idx]


def _value_at(requests, i):
    r = requests[i]
    return r._value


def _writeback(requests, i, r) -> None:
    """Completed entries of a caller's list become REQUEST_NULL (persistent ones stay)."""
    if isinstance(requests, list) and r._x is None and not isinstance(r, Prequest):
        requests[i] = r  # the same object, now null (== REQUEST_NULL)


def _grow(statuses, n: int) -> None:
    if isinstance(statuses, list):
        while len(statuses) < n:
            statuses.append(Status())


def _complete_many(requests, reqs, idx, statuses, compact: bool = False) -> None:
    idx = list(idx)
    if statuses is not None:
        _grow(statuses, len(idx) if compact else len(reqs))
    errors = []
    for k, i in enumerate(idx):
        r = reqs[i]
        if statuses is None and type(r) is Request:  # the commonest: no status, no error, nothing to post
            x = r._x
            if x is not None and not x.err and r._post is None:
                r._x = r._keep = r._value = None  # Request._finish without a status
                continue
        j = k if compact else i
        st = None if statuses is None or j >= len(statuses) else statuses[j]
        try:
            if r._active() is None:
                r._empty(st)
            else:
                r._finish(st)
        except MPIException as e:
            errors.append((i, e))
            if st is not None:
                st.error = e.Get_error_class()
        _writeback(requests, i, r)
    if errors:
        if len(errors) == 1 and len(idx) == 1:
            raise errors[0][1]
        if statuses is not None and not compact:
            failed = {i for i, _ in errors}
            for i in range(min(len(reqs), len(statuses))):
                if i not in failed and statuses[i].error == SUCCESS and reqs[i]._x is not None:
                    statuses[i].error = ERR_PENDING
        first = errors[0][1]
        raise error(ERR_IN_STATUS, f"{len(errors)} request(s) failed; first: {first}")


class Prequest(Request):
    """Persistent request (MPI_Request from *_init): Start, Wait, Start again."""

    __slots__ = ("_start", "_inactive_x")

    @classmethod
    def _persistent(cls, start, comm=None, keep=None) -> "Prequest":
        r = cls.__new__(cls)
        r._x = None
        r._comm, r._post, r._keep, r._value = comm, None, keep, None
        r._start = start
        r._inactive_x = None
        return r

    def _init_more(self, request) -> None:
        if request is not None and request and not isinstance(request, Prequest):
            raise TypeError(f"Prequest: expecting a persistent request (got {type(request).__name__})")
        self._start = getattr(request, "_start", None)
        self._inactive_x = getattr(request, "_inactive_x", None)

    def _hval(self) -> int:
        return _NULL_H if self._start is None else self._hown()

    def _hnullify(self) -> None:
        super()._hnullify()
        self._start = None

    def __bool__(self) -> bool:
        return self._start is not None

    def _release(self) -> None:
        self._x = None  # inactive; the operation can be started again

    def Start(self) -> None:
        """Start the persistent request (MPI_Start)."""
        if self._start is None:
            raise error(ERR_REQUEST, "Prequest.Start: null or freed request")
        if self._x is not None:
            raise error(ERR_REQUEST, "Prequest.Start: request is already active (complete it first)")
        self._x = self._start()

    @classmethod
    def Startall(cls, requests) -> None:
        """Start a list of persistent requests (MPI_Startall); none starts unless all can."""
        reqs = _requests(requests, "Prequest.Startall", Prequest)
        for i, r in enumerate(reqs):
            if r._start is None:
                raise error(ERR_REQUEST, f"Prequest.Startall: null or freed request (item {i})")
            if r._x is not None:
                raise error(ERR_REQUEST, f"Prequest.Startall: request is already active (item {i}; complete it first)")
        if len({id(r) for r in reqs}) != len(reqs):
            raise error(ERR_REQUEST, "Prequest.Startall: the same request appears more than once")
        for r in reqs:
            r.Start()

    def Free(self) -> None:
        """Free the persistent request (MPI_Request_free)."""
        if self._start is None:
            raise error(ERR_REQUEST, "Prequest.Free: null request")
        self._start = None
        self._x = None
        self._keep = None


def _callback_error(exc: BaseException) -> int:
    """A user callback raised: print its traceback (as mpi4py does) and give the error code
    MPI reports for it (the MPI.Exception's, else ERR_OTHER)."""
    import traceback

    traceback.print_exception(type(exc), exc, exc.__traceback__)
    return exc.Get_error_code() if isinstance(exc, MPIException) else ERR_OTHER


class Grequest(Request):
    """Generalized request (MPI_Grequest_start / MPI_Grequest_complete)."""

    __slots__ = ("_query", "_free", "_cancel", "_args", "_kwargs", "_result")

    def _init_more(self, request) -> None:
        if request is not None and request._x is not None and not isinstance(request, Grequest):
            raise TypeError(f"Grequest: expecting a generalized request (got {type(request).__name__})")
        for name in Grequest.__slots__:
            setattr(self, name, getattr(request, name, None) if request is not None else None)
        if self._args is None:
            self._args, self._kwargs = (), {}

    @classmethod
    def Start(cls, query_fn=None, free_fn=None, cancel_fn=None, args=None, kwargs=None) -> "Grequest":
        """Create a generalized request (MPI_Grequest_start).

        ``query_fn(status, *args, **kwargs)`` fills the status when the request completes,
        ``free_fn(*args, **kwargs)`` runs after it, ``cancel_fn(completed, *args, **kwargs)``
        on ``Cancel``."""
        _rt.ensure()
        r = cls.__new__(cls)
        r._x = Xfer(GREQ)
        r._x.st_source, r._x.st_tag = -2, -1
        r._comm = r._post = r._keep = r._value = None
        r._h = cls._htable.new()
        r._query, r._free, r._cancel = query_fn, free_fn, cancel_fn
        r._args = tuple(args) if args is not None else ()
        r._kwargs = dict(kwargs) if kwargs is not None else {}
        r._result = None
        cls._htable.add(r)
        return r

    def Complete(self) -> None:
        """Mark the generalized request complete (MPI_Grequest_complete)."""
        x = self._x
        if x is None:
            raise error(ERR_REQUEST, "Grequest.Complete: null request")
        x.done = True

    def complete(self, obj=None) -> None:
        """Mark the generalized request complete; ``wait``/``test`` return ``obj``."""
        self._result = obj
        self.Complete()

    def _finish(self, status) -> None:
        x = self._x
        st = Status()
        st._fill(-2, -1, 0)
        err = SUCCESS
        if self._query is not None:
            try:
                self._query(st, *self._args, **self._kwargs)
            except BaseException as exc:  # noqa: BLE001 - a user callback: reported as MPI does
                err = _callback_error(exc)
            if self._cancel is None:
                st.cancelled = False
        x.st_source, x.st_tag, x.st_nbytes, x.cancelled = st.source, st.tag, st._nbytes, st.cancelled
        if self._free is not None:
            try:
                self._free(*self._args, **self._kwargs)
            except BaseException as exc:  # noqa: BLE001
                err = err or _callback_error(exc)
        if not err and st.error:
            err = st.error
        if err:
            x.err = err
            x.errmsg = f"Grequest: a callback failed ({Get_error_string(err)})"
        result, self._result = self._result, None
        post = (lambda _x: result) if result is not None else None
        self._post = post
        super()._finish(status)

    def _cancel_greq(self, x) -> None:
        if self._cancel is not None:
            try:
                self._cancel(x.done, *self._args, **self._kwargs)
            except BaseException as exc:  # noqa: BLE001
                code = _callback_error(exc)
                raise error(code, f"Grequest.Cancel: cancel_fn failed ({Get_error_string(code)})") from None


Request._hbase = Request
#: Null request (MPI_REQUEST_NULL).
REQUEST_NULL = Request._htable.constant(Request(), "REQUEST_NULL")


# --- completion combinators: operations made of operations --------------------------------
# Every layer above the engine composes completions with these: a send whose staging buffer
# goes back when it completes (after), an object message with device parts, a send-receive,
# a partitioned request or a collective schedule (joint + part_done, all_of).


def after(x, fn) -> None:
    """Run ``fn()`` once operation ``x`` has completed (now, if it has)."""
    if x is None or x is SENT or x.done:
        fn()
        return
    with _rt.ENGINE.lock:
        if x.done:
            fn()
        else:
            prev = x.on_done
            x.on_done = (lambda xx: (prev(xx), fn())) if prev is not None else (lambda xx: fn())


def joint(n: int) -> Xfer:
    """An Xfer that completes when ``n`` parts have called ``part_done``."""
    j = Xfer(GREQ)
    j.got = n
    j.done = n == 0
    return j


def part_done(j: Xfer, x: Xfer, status_from: bool = False) -> None:
    if x.err and not j.err:
        j.err, j.errmsg = x.err, x.errmsg
    if status_from:
        j.st_source, j.st_tag, j.st_nbytes, j.cancelled = x.st_source, x.st_tag, x.st_nbytes, x.cancelled
    j.got -= 1
    if j.got == 0:
        cb = j.on_done
        if cb is not None:
            j.on_done = None
            cb(j)
        j.done = True  # after the callback, as Engine._finish


def done_xfer(source: int = PROC_NULL, tag: int = ANY_TAG) -> Xfer:
    x = Xfer(RECV)
    x.done = True
    x.st_source, x.st_tag, x.st_nbytes = source, tag, 0
    return x


def all_of(xs, keep) -> Xfer:
    """A joint Xfer that completes when every operation of ``xs`` has; it references ``keep``
    (the memory they read), and the operations reference it until they complete."""
    j = joint(len(xs))
    j.bufs = keep
    for x in xs:
        after(x, lambda x=x: part_done(j, x))
    return j


def _install_waitall(m, python=Request.__dict__["Waitall"]) -> None:
    """Put the compiled ``Request.Waitall`` (``_gpumpi_fast``'s: a list of plain requests all
    complete without error, no statuses; every other call is handed to this module's) in
    place, or back this module's (``m`` None); see :mod:`gpumpi._compiled`."""
    if m is None:
        Request.Waitall = python
        return
    m.bind_requests(Xfer, RECV, Request, python.__func__)
    Request.Waitall = classmethod(_compiled.dressed(m.Waitall, python.__func__))


_compiled.register(_install_waitall)
