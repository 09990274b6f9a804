# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, embedsignature=False
"""gpumpi's compiled layer (DESIGN section 20): the hot entry points' work that Python cannot do
in the time mpi4py takes for a whole call.

Theory of operation
===================
This extension module (built by ``pip install .`` when a C compiler is there; a top-level
module, so that a source checkout run in place still finds the installed build) holds
compiled replacements of pure-Python functions of gpumpi, each the same contract as the
function it replaces.  gpumpi uses one when :func:`gpumpi._compiled.module` finds this module
with the ABI it expects and ``GPUMPI_COMPILED`` does not say no; otherwise the Python function
serves (one fast path, never two running side by side).

* :func:`host_fast` replaces ``gpumpi._buffers.host_fast``: ``(address, nbytes, signature
  code)`` of a whole contiguous NumPy array, bare or as ``[array, predefined datatype]``, read
  from the array header (the offsets gpumpi._arrays checked at import), or None.  Its tables
  (dtype -> signature code, predefined datatype -> (size, code)) are gpumpi._buffers' own
  dicts, filled by its Python functions on a miss; nothing is cached here.
* :func:`Isend`, :func:`Irecv`, :func:`Waitall`, :func:`send` and :func:`recv` replace the
  methods of the same names (``gpumpi.comm.p2p.PointToPoint``, ``gpumpi.request.Request``,
  ``gpumpi.comm.objects.Objects``) for their commonest case -- a whole contiguous NumPy array
  (bare or ``[array, predefined datatype]``) or a small object's pickle, up to the eager
  limit, to or from a rank of this node (or, for ``Isend``/``Irecv``, of another node through
  the MPI library), one thread, nothing queued ahead; a list of requests all complete, no
  statuses -- and hand every other call, unchanged, to the Python method they replace
  (:func:`bind_python`), which decides and does everything as before.  :func:`drain`
  replaces the engine's ``CompiledPath._drain`` (the lazy receives' completion).
* :func:`Barrier`, :func:`Bcast`, :func:`Allreduce` and :func:`Reduce` replace
  ``gpumpi.comm.collectives``' methods where the call is of the kinds of the last one that
  ran as one compiled program
  (``gpumpi.collectives._lean``'s ``_Last`` records: the communicator, root or operation, the
  buffers' dtype or datatype and size), and run that plan's program by the C entry point of
  ``fastring.rounds`` (``_lean._run_last``, ``_start`` inline); the rest of a program that
  stops is ``_lean.resume``'s, any other call the Python method's.  The guards
  are the Python ones' (the same tests in the same order, ``gpumpi._fastpath.api`` and
  ``gpumpi._fastpath.engine``); the rings are written and read by the C entry points of
  ``gpumpi.ipc.fastring``'s and ``gpumpi.ipc.fastmpi``'s Numba code (``numba.cfunc`` builds),
  through :class:`Rings` (one per engine, which also holds the engine's long-lived state
  objects), so no Python object crosses those calls.
* The operation records (``gpumpi._xfer.Xfer``) and requests (``gpumpi.request.Request``)
  these make are the Python classes' own instances: allocated by the type's allocator and
  filled through the classes' slot offsets, every slot first copied from a template made
  by the class's own ``__init__`` (so the defaults stay in one place, the Python class).
  An instance filled here holds exactly what the Python path's would.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.buffer cimport PyBUF_READ
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc

#: the interface version gpumpi._compiled expects (bump on any change of a signature)
ABI = 4

cdef object _ndarray = None
cdef dict _fast_dt = None
cdef object _fast_dtype = None
cdef dict _fast_type = None
cdef object _fast_types = None
cdef Py_ssize_t _data_off = 0
cdef Py_ssize_t _flags_off = 0


def setup(ndarray, dict fast_dt, fast_dtype, dict fast_type, fast_types, Py_ssize_t data_off, Py_ssize_t flags_off):
    """Give the module gpumpi._buffers' tables and fillers and the checked ndarray header offsets."""
    global _ndarray, _fast_dt, _fast_dtype, _fast_type, _fast_types, _data_off, _flags_off
    _ndarray, _fast_dt, _fast_dtype, _fast_type, _fast_types = ndarray, fast_dt, fast_dtype, fast_type, fast_types
    _data_off, _flags_off = data_off, flags_off


cdef inline uint64_t _word(object a, Py_ssize_t off) noexcept:
    return (<uint64_t*>(<char*><void*>a + off))[0]


cdef int _spec(object spec, bint writable, int64_t *addr, int64_t *nbytes, int64_t *code) except -1:
    """1 and the address, bytes and signature code of the commonest point-to-point spec -- a whole
    contiguous NumPy array, bare or as ``[array, predefined datatype]`` -- or 0."""
    cdef object t = type(spec)
    cdef object a, sig, e, dt
    cdef uint64_t fl
    cdef Py_ssize_t n
    if t is _ndarray:
        a = spec
        dt = a.dtype
        sig = _fast_dt.get(id(dt), -1)
        if sig == -1:
            sig = _fast_dtype(dt)
        if sig is None:
            return 0
        n = a.nbytes
    elif (t is list or t is tuple) and len(spec) == 2:
        a, dt = spec
        if type(a) is not _ndarray:
            return 0
        e = _fast_type.get(id(dt))
        if e is None:
            if _fast_type:
                return 0
            _fast_types()
            e = _fast_type.get(id(dt))
            if e is None:
                return 0
        n = a.nbytes
        if n % <Py_ssize_t>(<tuple>e)[0]:
            return 0
        sig = (<tuple>e)[1]
    else:
        return 0
    fl = _word(a, _flags_off)
    if not fl & 3 or (writable and not fl & 0x400):  # NPY_ARRAY_C/F_CONTIGUOUS; NPY_ARRAY_WRITEABLE
        return 0
    addr[0] = <int64_t>_word(a, _data_off)
    nbytes[0] = n
    code[0] = sig
    return 1


def host_fast(spec, bint writable):
    """``(address, nbytes, signature code)`` of the commonest point-to-point spec -- a whole
    contiguous NumPy array, bare or as ``[array, predefined datatype]`` -- or None (the
    contract of ``gpumpi._buffers.host_fast``)."""
    cdef int64_t addr, n, sig
    if not _spec(spec, writable, &addr, &n, &sig):
        return None
    return (addr, n, sig)


# --- instances of gpumpi's slotted Python classes, made without their __init__ -----------------

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member
    PyObject* PyType_GenericAlloc(PyTypeObject *t, Py_ssize_t n) except NULL
    PyTypeObject PyMemberDescr_Type

cdef enum:
    _T_OBJECT_EX = 16  # structmember.h: a slot (unset: AttributeError)


cdef Py_ssize_t _slot(type cls, str name) except -1:
    """The byte offset of slot ``name`` of ``cls`` (a member descriptor of an object slot)."""
    d = cls.__dict__[name]
    if type(d) is not <object>&PyMemberDescr_Type or (<PyMemberDescrObject*>d).d_member.type != _T_OBJECT_EX:
        raise TypeError(f"_gpumpi_fast: {cls.__name__}.{name} is not an object slot")
    return (<PyMemberDescrObject*>d).d_member.offset


cdef inline void _put(object o, Py_ssize_t off, object v):
    """Set the slot at ``off`` of ``o`` to ``v`` (a new reference; the old one released)."""
    cdef PyObject** p = <PyObject**>(<char*><PyObject*>o + off)
    cdef PyObject* old = p[0]
    Py_INCREF(v)
    p[0] = <PyObject*>v
    Py_XDECREF(old)


cdef inline object _get(object o, Py_ssize_t off):
    """The slot at ``off`` of ``o`` (None when unset)."""
    cdef PyObject* v = (<PyObject**>(<char*><PyObject*>o + off))[0]
    return None if v == NULL else <object>v


cdef object _clone(object proto, Py_ssize_t *offs, Py_ssize_t n):
    """A new instance of ``type(proto)`` whose slots at ``offs`` are ``proto``'s."""
    cdef type t = type(proto)
    cdef PyObject* p = PyType_GenericAlloc(<PyTypeObject*>t, 0)
    cdef object o = <object>p  # (the cast takes a reference of its own: give back the allocator's)
    cdef Py_ssize_t i
    cdef PyObject* v
    Py_XDECREF(p)
    for i in range(n):
        v = (<PyObject**>(<char*><PyObject*>proto + offs[i]))[0]
        if v != NULL:
            Py_INCREF(<object>v)
            (<PyObject**>(<char*><PyObject*>o + offs[i]))[0] = v
    return o


# --- the ring's C entry points (gpumpi.ipc.fastring.c_entries) ---------------------------------

ctypedef int64_t (*send_fn)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t) noexcept nogil
ctypedef int64_t (*recv_fn)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                            int64_t, int64_t) noexcept nogil
ctypedef int64_t (*rounds_fn)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                               int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                               int64_t, int64_t) noexcept nogil
ctypedef int64_t (*mrecv_fn)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                             int64_t, int64_t, int64_t, int64_t) noexcept nogil

cdef enum:
    _GOT = 1  # fastring.GOT


cdef class Rings:
    """One engine's compiled path through the C entry points of ``gpumpi.ipc.fastring``: its
    out-rings' control blocks by world rank (0: none), the ring size, the eager limit, the
    addresses of the ring table and the result array (``Engine.ftab``/``fout``), the memory
    object messages are received into (``Engine.object_scratch``), and the engine's state
    objects that stay the same objects for its life (read here without an attribute lookup:
    the transport and its backlog list, the lists of pushes, direct transfers, collective
    rounds ready and lazy receives, the failed ranks, the matcher's queues by context, the
    ranks of other nodes and their frames, and the spin budgets); and the C entry point of a
    small collective's program (``fastring.rounds``), used while the engine's ``frounds`` is the
    function it was made with."""
    cdef send_fn send
    cdef recv_fn recv
    cdef send_fn msend  # gpumpi.ipc.fastmpi's (NULL: no compiled path to other nodes)
    cdef mrecv_fn mrecv
    cdef rounds_fn rounds  # a collective's compiled program (gpumpi.collectives._lean)
    cdef int64_t *ctl
    cdef Py_ssize_t nctl
    cdef readonly int64_t size, taba, outa, eager, spin_first, spin_next, saddr, scap, mtab_a, far_eager, mchunk, mdreq
    cdef readonly bint typecheck
    cdef readonly object engine, tr, backlog, pushing, direct, ready, lazy, failed, ctxq, far, farframes, smv, keep
    cdef readonly object mslots, FAR, fring, frounds

    def __cinit__(self, engine, uint64_t send_addr, uint64_t recv_addr, uint64_t rounds_addr, uint64_t far_send=0,
                  uint64_t far_recv=0):
        cdef Py_ssize_t i
        ring_ctl = self.fring = engine.fring
        self.frounds = engine.frounds  # (the rounds entry is this function's twin: replaced, the engine's is used)
        self.send = <send_fn><void*>send_addr
        self.recv = <recv_fn><void*>recv_addr
        self.rounds = <rounds_fn><void*>rounds_addr
        self.nctl = len(ring_ctl)
        self.ctl = <int64_t*>malloc(max(self.nctl, 1) * sizeof(int64_t))
        if self.ctl == NULL:
            raise MemoryError()
        for i in range(self.nctl):
            self.ctl[i] = ring_ctl[i]
        self.size, self.eager = engine.fsize, engine.eager_limit
        self.taba, self.outa = engine.ftab.ctypes.data, engine.fout.ctypes.data
        self.spin_first, self.spin_next, self.typecheck = engine.spin_first, engine.spin_next, engine.typecheck
        self.smv, self.saddr, self.scap = engine.object_scratch()
        self.engine, self.tr, self.backlog = engine, engine.tr, engine.tr.backlog
        self.pushing, self.direct, self.ready, self.lazy = engine.pushing, engine.direct, engine.ready, engine.lazy
        self.failed, self.ctxq, self.far, self.farframes = engine.failed, engine.matcher._ctx, engine.far, \
            engine.farframes
        if type(self.backlog) is not list or type(self.lazy) is not list or type(self.ctxq) is not dict:
            raise TypeError("_gpumpi_fast.Rings: the engine's state is not of the types this build reads")
        self.keep = (engine.ftab, engine.fout)
        self.msend, self.mrecv = NULL, NULL
        if far_send and far_recv and engine.mtab is not None:
            from gpumpi.ipc.base import FAR
            self.msend = <send_fn><void*>far_send
            self.mrecv = <mrecv_fn><void*>far_recv
            self.mtab_a, self.far_eager, self.mchunk, self.mdreq = engine.mtab_a, engine.far_eager, engine.mchunk, \
                engine.mdreq_a
            self.mslots, self.FAR = engine.mslots, FAR

    def __dealloc__(self):
        free(self.ctl)

    cdef inline bint busy(self):
        """``Engine._fast_clear``'s duties: frames queued, pushes, collective rounds, failed
        peers, direct transfers or lazy receives (any: a receive must take the general way)."""
        return self.tr.nbacklog or len(<list>self.pushing) or len(<list>self.ready) or len(<set>self.failed) or \
            len(<list>self.direct) or len(<list>self.lazy)

    cdef inline bint queued(self, object ctx):
        """Whether a receive is posted, or a message waits, on context ``ctx`` in the matcher."""
        cdef PyObject* q = PyDict_GetItem(<dict>self.ctxq, ctx)
        return q != NULL and ((<object>q).posted or (<object>q).unexpected)


# --- the compiled methods -----------------------------------------------------------------------

cdef object _rt = None          # gpumpi._runtime (ENGINE)
cdef object _freed = None       # gpumpi._xfer.FREED
cdef object _threads = None     # gpumpi._xfer.threads
cdef object _request = None     # gpumpi.request.Request
cdef object _sent_now = None    # the shared completed operation of an Isend done at once
cdef object _xrecv = None       # a receive Xfer as Xfer(RECV) leaves it (the template)
cdef object _rproto = None      # a Request as Request._of leaves it, before its fields (the template)
cdef object _py_isend = None, _py_irecv = None, _py_waitall = None   # the Python methods (functions)
cdef object _py_send = None, _py_recv = None
cdef object _status_cls = None, _mpiexc = None, _send_pickled = None, _load_reused = None, _mpi_failed = None
cdef int64_t _tag_ub = 0
cdef object _done = None        # the done state of an Xfer

# Xfer slot offsets: every slot (the template copy), then those set here
cdef Py_ssize_t _xoffs[64]
cdef Py_ssize_t _nx = 0
cdef Py_ssize_t _x_sig, _x_addr, _x_cap, _x_ctx, _x_src, _x_wpeer, _x_tag, _x_call, _x_result, _x_mem
cdef Py_ssize_t _x_state, _x_done, _x_sts, _x_stt, _x_stn, _x_msig, _x_err
# Request slot offsets (a new Request starts with every slot unset, as ``object.__new__`` leaves
# it: its handle, ``_h``, is given on first use)
cdef Py_ssize_t _r_x, _r_comm, _r_post, _r_keep, _r_value


cdef _xfer_slots(type xfer_cls, recv_kind):
    """The slot offsets of ``Xfer`` and its receive template."""
    global _xrecv, _nx, _x_sig, _x_addr, _x_cap, _x_ctx, _x_src, _x_wpeer, _x_tag, _x_call, _x_result, _x_mem
    global _x_state, _x_done, _x_sts, _x_stt, _x_stn, _x_msig, _x_err
    cdef Py_ssize_t i
    names = list(xfer_cls.__slots__)
    if len(names) > 64:
        raise TypeError("_gpumpi_fast: Xfer has more slots than this build knows")
    for i, n in enumerate(names):
        _xoffs[i] = _slot(xfer_cls, n)
    _nx = len(names)
    _x_sig, _x_addr, _x_cap, _x_ctx = [_slot(xfer_cls, n) for n in ("sig", "addr", "cap", "ctx")]
    _x_src, _x_wpeer, _x_tag, _x_call = [_slot(xfer_cls, n) for n in ("src", "wpeer", "tag", "call")]
    _x_result, _x_mem, _x_state, _x_done = [_slot(xfer_cls, n) for n in ("result", "mem", "state", "done")]
    _x_sts, _x_stt, _x_stn, _x_msig = [_slot(xfer_cls, n) for n in ("st_source", "st_tag", "st_nbytes", "msig")]
    _x_err = _slot(xfer_cls, "err")
    t = xfer_cls(recv_kind)
    for n in names:  # the clones share the template's values: they must be immutable
        v = getattr(t, n, None)
        if v is not None and type(v) not in (bool, int, str):
            raise TypeError(f"_gpumpi_fast: Xfer({recv_kind}).{n} is a {type(v).__name__}: clones would share it")
    _xrecv = t


cdef _request_slots(type request_cls):
    """The slot offsets of ``Request`` and its (empty) template."""
    global _request, _rproto, _r_x, _r_comm, _r_post, _r_keep, _r_value
    _r_x, _r_comm, _r_post, _r_keep, _r_value = [_slot(request_cls, n) for n in ("_x", "_comm", "_post", "_keep",
                                                                                  "_value")]
    _request = request_cls
    _rproto = object.__new__(request_cls)


def bind_p2p(rt, freed, threads, xfer_cls, recv_kind, int done_state, request_cls, sent_now, int64_t tag_ub,
             status_cls, mpiexc, send_pickled, load_reused, mpi_failed):
    """Bind the compiled point-to-point methods to gpumpi: its runtime module, freed-context set,
    thread count, ``Xfer`` class, receive kind and done state, ``Request`` class, shared
    completed send, largest tag, ``Status`` and ``MPI.Exception`` classes, the rest of an
    object send once pickled (``_fastpath.api.object_send_pickled``), the object of a message
    in reused memory (``_objects.load_reused``) and the error of a failed MPI call
    (``_xfer.mpi_failed``)."""
    global _rt, _freed, _threads, _sent_now, _tag_ub, _done
    global _status_cls, _mpiexc, _send_pickled, _load_reused, _mpi_failed
    _xfer_slots(xfer_cls, recv_kind)
    _request_slots(request_cls)
    _rt, _freed, _threads, _sent_now, _tag_ub, _done = rt, freed, threads, sent_now, tag_ub, done_state
    _status_cls, _mpiexc, _send_pickled, _load_reused, _mpi_failed = status_cls, mpiexc, send_pickled, load_reused, \
        mpi_failed


def bind_python(dict methods):
    """The Python methods (by name: ``Isend``, ``Irecv``, ``send``, ``recv``) the compiled ones
    hand the calls they do not serve to."""
    global _py_isend, _py_irecv, _py_send, _py_recv
    _py_isend = methods.get("Isend", _py_isend)
    _py_irecv = methods.get("Irecv", _py_irecv)
    _py_send = methods.get("send", _py_send)
    _py_recv = methods.get("recv", _py_recv)


def bind_requests(xfer_cls, recv_kind, request_cls, py_waitall):
    """Bind :func:`Waitall` to gpumpi: its ``Xfer`` and ``Request`` classes, the receive kind,
    and the Python ``Request.Waitall`` (its function) it hands other calls to."""
    global _py_waitall
    _xfer_slots(xfer_cls, recv_kind)
    _request_slots(request_cls)
    _py_waitall = py_waitall


cdef inline void _got(object x, int64_t *out):
    """The engine's ``_got``: complete receive ``x`` that a look took (its status at ``out``)."""
    _put(x, _x_sts, out[0])
    _put(x, _x_stt, out[1])
    _put(x, _x_stn, out[2])
    _put(x, _x_msig, out[3])
    _put(x, _x_mem, None)
    _put(x, _x_state, _done)
    _put(x, _x_done, True)


cdef inline object _new_request(object x, object comm, object keep):
    """``Request._of(x, comm, None, keep)``."""
    cdef object r = _clone(_rproto, NULL, 0)
    _put(r, _r_x, x)
    _put(r, _r_comm, comm)
    _put(r, _r_post, None)
    _put(r, _r_keep, keep)
    _put(r, _r_value, None)
    return r


def Isend(self, buf, dest, tag=0, *, stream=None):
    """Nonblocking send (MPI_Isend)."""
    cdef int64_t addr, n, sig, ctl, wp, c
    cdef Rings rg
    eng = _rt.ENGINE
    rgo = eng.crings
    if rgo is None or type(dest) is not int or type(tag) is not int:
        return _py_isend(self, buf, dest, tag, stream=stream)
    w = self._w
    ctx = self._ctx
    if not (0 <= dest < len(w) and 0 <= tag <= _tag_ub and ctx >= 0 and ctx not in _freed) or \
            not _spec(buf, False, &addr, &n, &sig):
        return _py_isend(self, buf, dest, tag, stream=stream)
    rg = <Rings>rgo
    wpo = w[dest]
    wp = wpo
    if wp >= rg.nctl or len(<set>rg.failed) or _threads():
        return _py_isend(self, buf, dest, tag, stream=stream)
    c = ctx
    bl = (<list>rg.backlog)[wp]
    if bl is None:  # a rank of this node, nothing queued for it: into its ring
        ctl = rg.ctl[wp]
        if n > rg.eager or ctl == 0 or rg.send(ctl, rg.size, self._rank, c, tag, sig, addr, n) != 1:
            return _py_isend(self, buf, dest, tag, stream=stream)
    elif bl is rg.FAR and rg.msend != NULL and n <= rg.far_eager:  # a rank of another node: one MPI message
        if rg.msend(rg.mtab_a, wp, self._rank, c, tag, sig, addr, n) != 1:
            return _py_isend(self, buf, dest, tag, stream=stream)
    else:
        return _py_isend(self, buf, dest, tag, stream=stream)
    return _new_request(_sent_now, self, buf)


def Irecv(self, buf, source=-2, tag=-1, status=None, *, stream=None):
    """Nonblocking receive (MPI_Irecv)."""
    cdef int64_t addr, n, sig, wp, rc, c, src, tg, slot
    cdef Rings rg
    eng = _rt.ENGINE
    rgo = eng.crings
    if rgo is None or status is not None or type(source) is not int or type(tag) is not int:
        return _py_irecv(self, buf, source, tag, status, stream=stream)
    w = self._w
    ctx = self._ctx
    if not (-2 <= source < len(w) and source != -1 and -1 <= tag <= _tag_ub and ctx >= 0 and ctx not in _freed) or \
            not _spec(buf, True, &addr, &n, &sig) or _threads():
        return _py_irecv(self, buf, source, tag, status, stream=stream)
    rg = <Rings>rgo
    if len(<set>rg.failed) or rg.queued(ctx):
        return _py_irecv(self, buf, source, tag, status, stream=stream)
    wpo = source if source < 0 else w[source]
    far = rg.far
    far = far and (source < 0 or wpo in far)
    if (n > rg.mchunk or rg.mrecv == NULL) if far else n > rg.eager:
        return _py_irecv(self, buf, source, tag, status, stream=stream)
    if not rg.typecheck:
        sig = 0
    x = _clone(_xrecv, _xoffs, _nx)
    _put(x, _x_sig, sig)
    _put(x, _x_addr, addr)
    _put(x, _x_cap, n)
    _put(x, _x_ctx, ctx)
    _put(x, _x_src, source)
    _put(x, _x_wpeer, wpo)
    _put(x, _x_tag, tag)
    _put(x, _x_call, "Irecv")
    _put(x, _x_result, far)
    lazy = <list>rg.lazy
    if not lazy:
        wp, c, src, tg = wpo, ctx, source, tag
        if far:  # the engine's _look of a receive another node may satisfy
            slot = rg.mslots.next_address()  # 0: no free slot, a message pushed ahead is the engine's
            rc = rg.mrecv(rg.mtab_a, rg.taba, wp, c, src, tg, sig, addr, n, -2 if slot else -1, eng.epoch, rg.outa,
                          slot)
            if rc < 0:  # (nothing done: the Python method looks again and reports the MPI library's failure)
                return _py_irecv(self, buf, source, tag, status, stream=stream)
            if rc == _c_pending:
                eng._pending(x)
                return _new_request(x, self, buf)
        else:
            rc = rg.recv(rg.taba, wp, c, src, tg, sig, addr, n, 1, eng.epoch, rg.outa)
        if rc == _GOT:
            _got(x, <int64_t*><void*>rg.outa)
            return _new_request(x, self, buf)
    _put(x, _x_mem, buf)  # the buffer spec until posted (the engine's _post_lazy parses it)
    lazy.append(x)
    return _new_request(x, self, buf)


def Waitall(cls, requests, statuses=None):
    """Wait for all requests (MPI_Waitall)."""
    cdef object r, x
    if statuses is not None or type(requests) is not list:
        return _py_waitall(cls, requests, statuses)
    for r in <list>requests:
        if type(r) is not _request:
            return _py_waitall(cls, requests, statuses)
        x = _get(r, _r_x)
        if x is None:
            continue
        if type(x) is not type(_xrecv) or _get(x, _x_done) is not True or _get(x, _x_err) != 0 or \
                _get(r, _r_post) is not None:
            return _py_waitall(cls, requests, statuses)
    for r in <list>requests:  # all complete, no error, nothing to post: Request._finish without a status
        _put(r, _r_x, None)
        _put(r, _r_keep, None)
        _put(r, _r_value, None)
    return True


# --- the engine's lazy receives (gpumpi._fastpath.engine.CompiledPath._drain) ------------------

cdef object _py_drain = None
cdef int64_t _c_pending = 4, _c_empty = 0  # gpumpi._xfer.PENDING, EMPTY


def bind_engine(xfer_cls, recv_kind, int done_state, int64_t pending, int64_t empty, py_drain):
    """Bind :func:`drain` to gpumpi: its ``Xfer`` class, receive kind and done state, the
    compiled path's result codes, and the Python ``_drain`` it hands an engine without
    compiled rings to."""
    global _done, _c_pending, _c_empty, _py_drain
    _xfer_slots(xfer_cls, recv_kind)
    _done, _c_pending, _c_empty, _py_drain = done_state, pending, empty, py_drain


cdef inline int64_t _i64(object x, Py_ssize_t off) except? -1:
    return _get(x, off)


def drain(self):
    """``CompiledPath._drain``: complete the lazy receives whose messages are next, in order; the
    look is the C entry of the ring's receive (a receive from this node) or of ``fastmpi``'s (one
    another node may satisfy: the engine's ``_look``), and a completion is written here (a
    message pushed ahead is the engine's ``_pending``)."""
    cdef Rings rg
    cdef Py_ssize_t i = 0, n
    cdef int64_t rc, epoch, slot
    cdef int64_t *out
    cdef list lazy
    rgo = self.crings
    if rgo is None:
        return _py_drain(self)
    rg = <Rings>rgo
    out = <int64_t*><void*>rg.outa
    lazy = <list>rg.lazy
    n = len(lazy)
    ctxq = <dict>rg.ctxq
    failed = <set>rg.failed
    epoch = self.epoch
    while i < n:
        x = lazy[i]
        q = ctxq.get(_get(x, _x_ctx))
        if len(failed) or q is not None and q.posted:
            break
        if q is not None and q.unexpected:
            i += 1
            if self._post_lazy(x):
                break  # posted, no message for it yet: those after it follow it into the matcher
            continue
        if _get(x, _x_result):  # a receive another node may satisfy: the engine's _look, by the C entry
            rc = -1
            if rg.mrecv != NULL:
                slot = rg.mslots.next_address()  # 0: no free slot, a message pushed ahead is the engine's
                rc = rg.mrecv(rg.mtab_a, rg.taba, _i64(x, _x_wpeer), _i64(x, _x_ctx), _i64(x, _x_src),
                              _i64(x, _x_tag), _i64(x, _x_sig), _i64(x, _x_addr), _i64(x, _x_cap),
                              -2 if slot else -1, epoch, rg.outa, slot)
                if rc == _GOT:
                    _got(x, out)
                    i += 1
                    continue
            if rc < 0:  # (no compiled path, or nothing done: the engine looks again and reports the failure)
                rc = self._look(x)
        else:
            rc = rg.recv(rg.taba, _i64(x, _x_wpeer), _i64(x, _x_ctx), _i64(x, _x_src), _i64(x, _x_tag),
                         _i64(x, _x_sig), _i64(x, _x_addr), _i64(x, _x_cap), 1, epoch, rg.outa)
            if rc == _GOT:
                _got(x, out)
                i += 1
                continue
        if rc == _GOT:
            self._got(x)
            i += 1
            continue
        if rc == _c_pending:
            self._pending(x)
            i += 1
            continue
        if rc == _c_empty:
            del lazy[:i]
            return i
        break
    del lazy[:i]
    if lazy:
        self._unlazy()
    return i


# --- object messages (gpumpi._fastpath.api.object_sending / object_receiving) -------------------

cdef object _pk = None         # gpumpi._pickle.PICKLE (MPI.pickle)
cdef object _pyd = None, _pyl = None  # pickle.dumps, pickle.loads
cdef dict _pkg = None          # gpumpi._pickle's globals (_seen_device, _sims)
cdef dict _mods = None         # sys.modules
cdef object _dev_possible = None, _default_protocol = None, _no_large = None, _large = None
cdef Py_ssize_t _foot = 0
cdef int _highest = 5
cdef Py_ssize_t _k_dumps, _k_loads, _k_proto  # the slot offsets of Pickle's _dumps, _loads, _proto


def bind_pickle(pk, dumps, loads, dict module_globals, dict modules, device_possible, default_protocol, no_large,
                large, Py_ssize_t foot, int highest):
    """Bind :func:`dumps_small` and :func:`loads_plain` to gpumpi._pickle: ``MPI.pickle``, the
    standard ``pickle.dumps``/``loads``, the module's globals (``_seen_device``, ``_sims``),
    ``sys.modules``, its ``_device_possible``, ``_default_protocol``, the buffer callback that
    refuses a large buffer and what it raises, the size of an indexed message's trailer and
    ``pickle.HIGHEST_PROTOCOL``."""
    global _pk, _pyd, _pyl, _pkg, _mods, _k_dumps, _k_loads, _k_proto, _dev_possible, _default_protocol, _no_large, _large, _foot, _highest
    _k_dumps, _k_loads, _k_proto = [_slot(type(pk), n) for n in ("_dumps", "_loads", "_proto")]
    _pk, _pyd, _pyl, _pkg, _mods = pk, dumps, loads, module_globals, modules
    _dev_possible, _default_protocol, _no_large, _large, _foot, _highest = device_possible, default_protocol, \
        no_large, large, foot, highest


cdef object _dumps(object obj):
    """``gpumpi._pickle.dumps_small``: the message of ``obj`` as one ``bytes`` by one C call, or
    None (a custom pickle, a device array possible, a large buffer inside)."""
    if _pk is None or _get(_pk, _k_dumps) is not _pyd or _get(_pk, _k_loads) is not _pyl or \
            _pkg["_seen_device"] is not False:
        return None
    s = _pkg["_sims"]  # (None: the simulated device's module not looked at yet; it may not be loaded)
    if (s or "cupy" in _mods or "numba.cuda" in _mods or s is None and "gpumpi._device.sim" in _mods) and \
            _dev_possible():
        return None
    p = _get(_pk, _k_proto)
    if p is None:
        p = _default_protocol()
    elif p < 0:
        p = _highest
    if p < 5:
        return _pyd(obj, p)
    try:
        return _pyd(obj, p, buffer_callback=_no_large)
    except _large:
        return None


cdef inline bint _plain_stream(const char *p, Py_ssize_t n) except -1:
    """``gpumpi._pickle.loads_reused``' test: message ``p[:n]`` is a plain stream for the
    standard pickle (unpickled where it lies, nothing of it kept)."""
    return n > 0 and (n < _foot or p[n - 1] != 5) and _pk is not None and _get(_pk, _k_dumps) is _pyd and \
        _get(_pk, _k_loads) is _pyl


cdef object _loads_at(char *p, Py_ssize_t n, object mv, int64_t src, object w, object ctx):
    """``gpumpi._objects.load_reused(mv[:n], src, "recv", w, ctx)`` of the message at ``p``
    (``mv``'s memory, which the caller reuses): a plain stream for the standard pickle is
    unpickled from there (``_pickle.loads_reused``' test), anything else by the Python function."""
    if _plain_stream(p, n):
        return _pyl(PyMemoryView_FromMemory(p, n, PyBUF_READ))
    return _load_reused(mv[:n], src, "recv", w, ctx)


def dumps_small(obj):
    """The compiled twin of ``gpumpi._pickle.dumps_small`` (what :func:`send` pickles with)."""
    return _dumps(obj)


def loads_plain(const unsigned char[::1] b not None):
    """What :func:`recv` makes of message ``b`` where it unpickles itself, or None where it hands
    the message to ``gpumpi._objects.load_reused``."""
    cdef Py_ssize_t n = b.shape[0]
    if _plain_stream(<const char*>&b[0] if n else NULL, n):
        return (_pyl(PyMemoryView_FromMemory(<char*>&b[0], n, PyBUF_READ)),)
    return None



def send(self, obj, dest, tag=0):
    """Send a Python object (mpi4py ``Comm.send``; MPI_Send of its pickle)."""
    cdef Rings rg
    cdef int64_t wp, n, ctl
    if type(dest) is not int or type(tag) is not int:
        return _py_send(self, obj, dest, tag)
    w = self._w
    ctx = self._ctx
    eng = _rt.ENGINE
    rgo = eng.crings
    if rgo is None or not (0 <= dest < len(w) and 0 <= tag <= _tag_ub and ctx >= 0 and ctx not in _freed):
        return _py_send(self, obj, dest, tag)
    b = _dumps(obj)
    if b is None:  # (a device array possible, a custom pickle, a large buffer inside: pickled there)
        return _py_send(self, obj, dest, tag)
    rg = <Rings>rgo
    try:
        wpo = w[dest]
        wp = wpo
        n = PyBytes_GET_SIZE(b)
        if wp < rg.nctl and not len(<set>rg.failed) and not _threads():
            bl = (<list>rg.backlog)[wp]
            if bl is None:  # a rank of this node, nothing queued for it: into its ring
                ctl = rg.ctl[wp]
                if n <= rg.eager and ctl != 0 and \
                        rg.send(ctl, rg.size, self._rank, ctx, tag, 0, <int64_t><void*>PyBytes_AS_STRING(b), n) == 1:
                    return None
            elif bl is rg.FAR and rg.msend != NULL and n <= rg.far_eager:  # another node's: one MPI message
                if rg.msend(rg.mtab_a, wp, self._rank, ctx, tag, 0, <int64_t><void*>PyBytes_AS_STRING(b), n) == 1:
                    return None  # (nothing done: the general path's send, which reports a failure of MPI)
        x = _send_pickled(w, self._rank, ctx, dest, tag, b, None, "send")
        if x is not None:
            self._wait(x, None, "send")
        return None
    except _mpiexc as e:
        return self._raise(e)


def recv(self, buf=None, source=-2, tag=-1, status=None):
    """Receive a Python object (mpi4py ``Comm.recv``; MPI_Recv of its pickle)."""
    cdef Rings rg
    cdef int64_t wp, c, src, tg, addr, cap, rc, epoch, taba, outa, budget
    cdef int64_t *out
    cdef int spins = 0
    cdef recv_fn fn
    cdef mrecv_fn mfn
    cdef int64_t mta, dq
    if buf is not None or type(source) is not int or type(tag) is not int or \
            not (status is None or type(status) is _status_cls):
        return _py_recv(self, buf, source, tag, status)
    w = self._w
    ctx = self._ctx
    eng = _rt.ENGINE
    rgo = eng.crings
    if rgo is None or not (-2 <= source < len(w) and source != -1 and -1 <= tag <= _tag_ub and ctx >= 0 and
                           ctx not in _freed) or _threads():
        return _py_recv(self, buf, source, tag, status)
    # the engine's recv_fast: a receive served by the next matching frame alone
    rg = <Rings>rgo
    if rg.busy() or rg.queued(ctx):
        return _py_recv(self, buf, source, tag, status)
    wpo = source if source < 0 else w[source]
    far = rg.far
    mv, addr, cap = rg.smv, rg.saddr, rg.scap
    wp, c, src, tg, epoch, taba, outa = wpo, ctx, source, tag, eng.epoch, rg.taba, rg.outa
    if far and (source < 0 or wpo in far):  # the engine's _recv_far: fastmpi's receive, which watches the rings too
        if rg.mrecv == NULL or cap > rg.mchunk:
            return _py_recv(self, buf, source, tag, status)
        mfn, mta, dq, budget = rg.mrecv, rg.mtab_a, rg.mdreq, rg.spin_first
        with nogil:
            rc = mfn(mta, taba, wp, c, src, tg, 0, addr, cap, budget, epoch, outa, dq)
        while rc == _c_empty:  # nothing yet: back off between short spins
            spins += 1
            eng.backoff(spins + 50)
            budget = rg.spin_next
            with nogil:
                rc = mfn(mta, taba, wp, c, src, tg, 0, addr, cap, budget, epoch, outa, dq)
        if rc == _c_pending:  # a message pushed ahead, its bytes still coming: progress meanwhile
            eng._wait_far(eng.farframes.data_request())
            rc = _GOT
        elif rc < 0:
            try:
                raise _mpi_failed("MPI_Request_get_status, MPI_Test, MPI_Start or MPI_Irecv of a receive")
            except _mpiexc as e:
                return self._raise(e)
    else:
        ff = rg.farframes
        fn = rg.recv
        budget = rg.spin_next if ff is not None else rg.spin_first
        with nogil:
            rc = fn(taba, wp, c, src, tg, 0, addr, cap, budget, epoch, outa)
        while rc == _c_empty:  # nothing yet: back off between short spins (oversubscribed cores)
            if ff is not None and ff.arrived():
                return _py_recv(self, buf, source, tag, status)  # a frame from another node: in order there
            spins += 1
            eng.backoff(spins + 50)
            if _threads():
                return _py_recv(self, buf, source, tag, status)
            budget = rg.spin_next
            with nogil:
                rc = fn(taba, wp, c, src, tg, 0, addr, cap, budget, epoch, outa)
    if rc != _GOT:
        return _py_recv(self, buf, source, tag, status)  # (nothing consumed)
    out = <int64_t*><void*>outa
    if status is not None:
        status._fill(out[0], out[1], out[2])
    try:
        return _loads_at(<char*><void*>addr, out[2], mv, out[0], w, ctx)
    except _mpiexc as e:
        return self._raise(e)


# --- small collectives (gpumpi.collectives._lean: the last plan's compiled program) --------------

cdef dict _lean = None           # gpumpi.collectives._lean's globals (ENABLED, FAR)
cdef object _last_bar = None, _last_bc = None, _last_ar = None, _last_red = None  # its _Last records
cdef object _cmap = None, _resume = None, _in_place = None, _sum = None
cdef object _py_barrier = None, _py_bcast = None, _py_allreduce = None, _py_reduce = None
cdef int64_t _np_c = 0, _np_cw = 0  # NumPy's C-contiguous flag; and with the writeable one
cdef Py_ssize_t _l_comm, _l_op, _l_root, _l_rkey, _l_skey, _l_n, _l_p, _l_ws       # _Last's slots
cdef Py_ssize_t _p_prog, _p_proga, _p_nsteps, _p_sig, _p_rtype, _p_rop, _p_cw, _p_cring, _p_cma  # _Plan's
cdef Py_ssize_t _s_cba  # _Set's
_OP_DEFAULT = object()  # Allreduce's op left out (SUM)


def bind_lean(dict module_globals, lasts, classes, cmap, resume, int64_t np_c, int64_t np_w, in_place, op_sum, rt,
              freed, threads, mpiexc, dict methods):
    """Bind :func:`Barrier`, :func:`Bcast`, :func:`Allreduce` and :func:`Reduce` to
    gpumpi.collectives._lean: its globals (``ENABLED``, ``FAR``), its ``_Last`` records of
    Barrier, Bcast, Allreduce and Reduce,
    its classes ``(_Last, _Plan, _Set)`` (their slots), ``_cmap`` and ``resume`` (the rest of a
    program that stopped), NumPy's C-contiguous and writeable flags, ``IN_PLACE``, ``SUM``, the
    runtime module, freed contexts, thread count, ``MPI.Exception`` and the Python methods."""
    global _lean, _last_bar, _last_bc, _last_ar, _last_red, _cmap, _resume, _np_c, _np_cw, _in_place, _sum, _rt, _freed
    global _threads, _mpiexc, _py_barrier, _py_bcast, _py_allreduce, _py_reduce
    global _l_comm, _l_op, _l_root, _l_rkey, _l_skey, _l_n, _l_p, _l_ws
    global _p_prog, _p_proga, _p_nsteps, _p_sig, _p_rtype, _p_rop, _p_cw, _p_cring, _p_cma, _s_cba
    last, plan, wset = classes
    _l_comm, _l_op, _l_root, _l_rkey, _l_skey, _l_n, _l_p, _l_ws = [
        _slot(last, n) for n in ("comm", "op", "root", "rkey", "skey", "n", "p", "ws")]
    _p_prog, _p_proga, _p_nsteps, _p_sig, _p_rtype, _p_rop, _p_cw, _p_cring, _p_cma = [
        _slot(plan, n) for n in ("prog", "proga", "nsteps", "sig", "rtype", "rop", "cw", "cring", "cma")]
    _s_cba = _slot(wset, "cba")
    _lean, (_last_bar, _last_bc, _last_ar, _last_red), _cmap, _resume = module_globals, lasts, cmap, resume
    _np_c, _np_cw, _in_place, _sum = np_c, np_c | np_w, in_place, op_sum
    _rt, _freed, _threads, _mpiexc = rt, freed, threads, mpiexc
    _py_barrier = methods.get("Barrier", _py_barrier)
    _py_bcast = methods.get("Bcast", _py_bcast)
    _py_allreduce = methods.get("Allreduce", _py_allreduce)
    _py_reduce = methods.get("Reduce", _py_reduce)


cdef inline bint _lean_on(object comm):
    """``_lean.ENABLED``, no rank on another node (``FAR``: the Python path asks the nodes) and
    an intracommunicator."""
    return _lean["ENABLED"] is True and _lean["FAR"] is False and not comm._inter


cdef object _same(object spec, object key, object n):
    """``_lean._same``: the array of ``spec`` if it is of kind ``key`` and ``n`` bytes, else None."""
    t = type(spec)
    if t is _ndarray:
        a = spec
        if a.dtype is not key:
            return None
    elif t is list and len(<list>spec) == 2 and (<list>spec)[1] is key:
        a = (<list>spec)[0]
        if type(a) is not _ndarray:
            return None
    else:
        return None
    return a if a.nbytes == n else None


cdef bint _run_last(object m, object comm, str call, object ra, int64_t rwant, object sa) except -1:
    """``_lean._run_last`` with ``_lean._start`` inline, the program run by the C entry point:
    False where it cannot run now (nothing done)."""
    cdef Rings rg
    cdef int64_t i, c1, tag, cma
    ws = _get(m, _l_ws)
    if ws is None:
        return False
    p = _get(m, _l_p)
    ctx = comm._ctx
    if ctx < 0 or ctx in _freed:
        comm._check(call)  # (raises)
    eng = _rt.ENGINE
    rgo = eng.crings
    if rgo is None or _get(p, _p_prog) is None or _threads():
        return False
    rg = <Rings>rgo
    if rg.rounds == NULL or eng.frounds is not rg.frounds or rg.frounds is None:
        return False
    c1 = ctx + 1
    if rg.queued(c1) or rg.tr.nbacklog or len(<list>rg.pushing) or len(<list>rg.ready) or len(<set>rg.failed):
        return False
    w = comm._w
    if _get(p, _p_cw) is not w or _get(p, _p_cring) is not rg.fring:
        _cmap(p, w, eng)
    cma = _get(p, _p_cma)
    if not cma:
        return False
    tag = comm._ctag()
    i = rg.rounds(rg.taba, cma, comm._size, _get(p, _p_proga), _get(p, _p_nsteps), 0, _get(ws, _s_cba),
                  0 if ra is None else <int64_t><void*>ra, rwant, 0 if sa is None else <int64_t><void*>sa, _np_c,
                  comm._rank, c1, tag, _get(p, _p_sig), _get(p, _p_rtype), _get(p, _p_rop), rg.spin_first, eng.epoch,
                  rg.outa)
    if i == -2:
        comm._ctag_back()
        return False
    if i >= 0:
        _resume(m, p, comm, call, ws, ra, sa, tag, i)
    return True


def Barrier(self):
    """Barrier synchronization (MPI_Barrier)."""
    if _lean_on(self) and self is _get(_last_bar, _l_comm):
        try:
            if _run_last(_last_bar, self, "Barrier", None, 0, None):
                return None
        except _mpiexc as e:
            self._raise(e)
            return None
    return _py_barrier(self)


def Bcast(self, buf, root=0, *, stream=None):
    """Broadcast data from one process to all others (MPI_Bcast)."""
    m = _last_bc
    if stream is None and type(root) is int and _lean_on(self) and self is _get(m, _l_comm) and \
            root == _get(m, _l_root):
        a = _same(buf, _get(m, _l_rkey), _get(m, _l_n))
        if a is not None:
            try:
                if _run_last(m, self, "Bcast", a, _np_c if self._rank == root else _np_cw, None):
                    return None
            except _mpiexc as e:
                self._raise(e)
                return None
    return _py_bcast(self, buf, root, stream=stream)


def Allreduce(self, sendbuf, recvbuf, op=_OP_DEFAULT, *, stream=None):
    """Reduce to all processes (MPI_Allreduce)."""
    if op is _OP_DEFAULT:
        op = _sum
    m = _last_ar
    if stream is None and _lean_on(self) and self is _get(m, _l_comm) and op is _get(m, _l_op):
        n = _get(m, _l_n)
        ra = _same(recvbuf, _get(m, _l_rkey), n)
        if ra is not None:
            skey = _get(m, _l_skey)
            if skey is None:
                sa = None
                ok = sendbuf is _in_place or sendbuf is None
            else:
                sa = _same(sendbuf, skey, n)
                ok = sa is not None
            if ok:
                try:
                    if _run_last(m, self, "Allreduce", ra, _np_cw, sa):
                        return None
                except _mpiexc as e:
                    self._raise(e)
                    return None
    return _py_allreduce(self, sendbuf, recvbuf, op, stream=stream)


def Reduce(self, sendbuf, recvbuf, op=_OP_DEFAULT, root=0, *, stream=None):
    """Reduce to root (MPI_Reduce)."""
    if op is _OP_DEFAULT:
        op = _sum
    m = _last_red
    if stream is None and type(root) is int and _lean_on(self) and self is _get(m, _l_comm) and \
            op is _get(m, _l_op) and root == _get(m, _l_root):
        ra = sa = None
        ok = True
        n = _get(m, _l_n)
        if self._rank == root:  # (the receive buffer counts at the root only)
            ra = _same(recvbuf, _get(m, _l_rkey), n)
            ok = ra is not None
        skey = _get(m, _l_skey)
        if ok and skey is not None:
            sa = _same(sendbuf, skey, n)
            ok = sa is not None
        elif ok:
            ok = sendbuf is _in_place or sendbuf is None
        if ok:
            try:
                if _run_last(m, self, "Reduce", ra, _np_cw, sa):
                    return None
            except _mpiexc as e:
                self._raise(e)
                return None
    return _py_reduce(self, sendbuf, recvbuf, op, root, stream=stream)
