"""CupyAdapter against the installed CuPy's API, without a GPU.

The real-device code in :mod:`gpumpi._device.cuda` only runs on a GPU; these tests check, wherever
``cupy`` imports (with or without a driver), that what it calls exists with the signature,
argument order, constants and error behaviour it assumes.  The names are read from
``gpumpi/_device/cuda.py`` itself, so a new call is checked as soon as it is written.
"""

import ast
import inspect
import pathlib
import re

import pytest

cupy = pytest.importorskip("cupy", reason="cupy is not installed (pip install gpumpi[cuda]): "
                                          "the CuPy API checks need it, not a GPU")

from gpumpi._device import cuda as gcuda  # noqa: E402

rt = cupy.cuda.runtime
SRC = pathlib.Path(gcuda.__file__).read_text()
TREE = ast.parse(SRC)

# cuda_runtime_api.h / driver_types.h / cuda.h values
CUDA_HEADERS = {
    "memcpyDefault": 4,  # cudaMemcpyDefault
    "eventDisableTiming": 2,  # cudaEventDisableTiming
    "eventInterprocess": 4,  # cudaEventInterprocess
    "hostAllocPortable": 1,  # cudaHostAllocPortable
    "cudaIpcMemLazyEnablePeerAccess": 1,
    "streamLegacy": 1,  # cudaStreamLegacy, CAI v3 stream 1
    "streamPerThread": 2,  # cudaStreamPerThread, CAI v3 stream 2
}
GPUMPI_CONSTANTS = {  # gpumpi's own literals for what CuPy does not export
    "_cudaErrorNotReady": 600,
    "_CUDA_ERROR_INVALID_VALUE": 1,
    "_CUDA_ERROR_INVALID_CONTEXT": 201,
    "_CU_POINTER_ATTRIBUTE_MEMORY_TYPE": 2,
    "_CU_POINTER_ATTRIBUTE_IS_MANAGED": 8,
    "_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL": 9,
    "_CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE": 10,
    "_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR": 11,
    "_CU_POINTER_ATTRIBUTE_RANGE_SIZE": 12,
    "_CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE": 17,
    "_CU_MEMORYTYPE_HOST": 1,
    "_CU_MEMORYTYPE_DEVICE": 2,
    "_CU_MEMORYTYPE_UNIFIED": 4,
    "HANDLE_SIZE": 64,  # CUDA_IPC_HANDLE_SIZE
}


def _is_rt(node) -> bool:
    """``self._rt``, ``_rt`` or ``runtime`` (the runtime module handed to _destroy_cuda_event)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "_rt" and isinstance(node.value, ast.Name) and node.value.id == "self"
    return isinstance(node, ast.Name) and node.id in ("_rt", "runtime")


def _rt_names() -> set:
    return {n.attr for n in ast.walk(TREE) if isinstance(n, ast.Attribute) and _is_rt(n.value)}


def _cupy_cuda_names() -> set:
    """``self._cupy.cuda.<name>``."""
    out = set()
    for n in ast.walk(TREE):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "cuda":
            v = n.value.value
            if isinstance(v, ast.Attribute) and v.attr == "_cupy":
                out.add(n.attr)
    return out


def _rt_calls():
    """``(runtime function name, [argument expressions])`` of every runtime call in _device/cuda.py:
    ``self._call(what, self._rt.f, *args)`` and direct ``self._rt.f(*args)`` / ``runtime.f(*args)``."""
    for n in ast.walk(TREE):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        if isinstance(f, ast.Attribute) and f.attr == "_call" and len(n.args) >= 2:
            g = n.args[1]
            if isinstance(g, ast.Attribute) and _is_rt(g.value):
                yield g.attr, n.args[2:], n
        elif isinstance(f, ast.Attribute) and _is_rt(f.value):
            yield f.attr, n.args, n


_SIG = re.compile(r"^(\w+)\((.*)\)")


def _cupy_params(name: str) -> list:
    """``[(type, name, has_default)]`` from the Cython signature line of ``rt.<name>.__doc__``."""
    doc = (getattr(rt, name).__doc__ or "").strip().splitlines()
    m = _SIG.match(doc[0]) if doc else None
    assert m and m.group(1) == name, f"no signature line in cupy.cuda.runtime.{name}.__doc__ ({doc[:1]})"
    params = []
    for p in filter(None, (s.strip() for s in m.group(2).split(","))):
        decl, _, default = p.partition("=")
        words = decl.split()
        params.append((" ".join(words[:-1]), words[-1], bool(default)))
    return params


def test_every_runtime_name_exists():
    names = _rt_names()
    assert {"memcpyAsync", "eventQuery", "launchHostFunc", "CUDARuntimeError"} <= names  # the parser works
    missing = sorted(n for n in names if not hasattr(rt, n))
    assert not missing, f"cupy {cupy.__version__}: cupy.cuda.runtime has no {missing}"


def test_every_cupy_cuda_name_exists():
    names = _cupy_cuda_names()
    assert {"Stream", "get_current_stream"} <= names
    missing = sorted(n for n in names if not hasattr(cupy.cuda, n))
    assert not missing, f"cupy {cupy.__version__}: cupy.cuda has no {missing}"


def test_constants_have_the_cuda_header_values():
    used = _rt_names()
    for name, value in CUDA_HEADERS.items():
        assert getattr(rt, name) == value, f"cupy.cuda.runtime.{name} = {getattr(rt, name)}, CUDA says {value}"
    # every runtime constant gpumpi reads is one of them
    consts = {n for n in used if not callable(getattr(rt, n))}
    assert consts <= set(CUDA_HEADERS), f"add {sorted(consts - set(CUDA_HEADERS))} to CUDA_HEADERS"
    for name, value in GPUMPI_CONSTANTS.items():
        assert getattr(gcuda, name) == value, (f"gpumpi._device.cuda.{name} = {getattr(gcuda, name)}, "
                                               f"CUDA says {value}")
    # cudaHostRegisterPortable = 1: CuPy exports no name for it, gpumpi passes the literal
    flags = [args[2] for name, args, _ in _rt_calls() if name == "hostRegister"]
    assert flags and all(isinstance(f, ast.Constant) and f.value == 1 for f in flags)


def test_runtime_calls_match_cupy_signatures():
    """Argument count within CuPy's (required, total), and streams, events, copy kinds and
    callbacks in the positions CuPy's parameters name them."""
    seen = set()
    for name, args, node in _rt_calls():
        if not callable(getattr(rt, name, None)) or isinstance(getattr(rt, name), type):
            continue
        seen.add(name)
        params = _cupy_params(name)
        required = sum(1 for _, _, d in params if not d)
        where = f"gpumpi/_device/cuda.py:{node.lineno} {name}({', '.join(ast.unparse(a) for a in args)})"
        assert not node.keywords, f"{where}: keyword arguments"
        assert required <= len(args) <= len(params), f"{where}: cupy takes {params}"
        for (ptype, pname, _), a in zip(params, args):
            text = ast.unparse(a)
            if pname == "stream":
                assert "_sptr(" in text, f"{where}: a stream handle belongs in {pname!r}"
            elif pname == "event":
                assert text == "ptr" or text.endswith(".ptr"), f"{where}: an event handle belongs in {pname!r}"
            elif pname == "kind":
                assert "memcpy" in text, f"{where}: a cudaMemcpyKind belongs in {pname!r}"
            elif pname == "callback":
                assert isinstance(a, (ast.Name, ast.Lambda)), f"{where}: a callable belongs in {pname!r}"
    assert {"memcpyAsync", "eventRecord", "streamWaitEvent", "launchHostFunc", "eventQuery",
            "eventDestroy", "ipcOpenMemHandle"} <= seen  # the walker found the calls


def test_runtime_errors_raise_except_event_query():
    """Runtime calls raise CUDARuntimeError (which CupyAdapter._call catches); eventQuery
    returns the status instead (0 done, cudaErrorNotReady pending, else an error)."""
    assert issubclass(rt.CUDARuntimeError, RuntimeError)
    assert rt.CUDARuntimeError(600).status == 600
    try:
        n = rt.getDeviceCount()
    except rt.CUDARuntimeError as exc:  # no driver or no device: the failure is a status
        st = rt.eventQuery(0)
        assert type(st) is int and st == exc.status
        with pytest.raises(rt.CUDARuntimeError):
            rt.eventCreateWithFlags(rt.eventDisableTiming)
        return
    if n < 1:
        pytest.skip("the CUDA driver sees no device")
    e = rt.eventCreateWithFlags(rt.eventDisableTiming)
    try:
        assert rt.eventQuery(e) == 0
    finally:
        rt.eventDestroy(e)


def test_ipc_handles_are_64_bytes_objects():
    """CuPy copies an IPC handle into the 64-byte struct before calling CUDA: exactly 64 bytes,
    of type bytes (hence gpumpi's bytes(handle) and length check)."""
    for f in (lambda h: rt.ipcOpenMemHandle(h, rt.cudaIpcMemLazyEnablePeerAccess), rt.ipcOpenEventHandle):
        with pytest.raises(IndexError):
            f(bytes(gcuda.HANDLE_SIZE - 1))
        with pytest.raises(IndexError):
            f(bytes(gcuda.HANDLE_SIZE + 1))
        with pytest.raises(TypeError):
            f(bytearray(gcuda.HANDLE_SIZE))


def _bare_adapter(runtime=rt):
    """A CupyAdapter that skips __init__ (which needs a CUDA driver)."""
    a = gcuda.CupyAdapter.__new__(gcuda.CupyAdapter)
    a._cupy, a._rt = cupy, runtime
    return a


def test_streams():
    params = inspect.signature(cupy.cuda.Stream.__init__).parameters
    assert "non_blocking" in params  # stream_create: cupy.cuda.Stream(non_blocking=True)
    a = _bare_adapter()
    assert a._sptr(cupy.cuda.Stream.null) == 0
    assert a._sptr(cupy.cuda.Stream.ptds) == rt.streamPerThread
    assert a._sptr(7) == 7
    if hasattr(cupy.cuda.Stream, "__cuda_stream__"):  # the CUDA stream protocol is a method
        assert cupy.cuda.Stream.ptds.__cuda_stream__() == (0, rt.streamPerThread)

    class Proto:
        def __cuda_stream__(self):
            return (0, 12345)

    assert a._sptr(Proto()) == 12345
    with pytest.raises(TypeError, match="not a CUDA stream"):
        a.check_stream(object())


def test_launch_host_func_callback():
    """CuPy's trampoline calls ``callback(arg)`` with the int ``arg``; an exception must not
    reach it, and a non-callable is refused up front (as SimAdapter does)."""
    calls = []

    class Runtime:
        CUDARuntimeError = rt.CUDARuntimeError

        def launchHostFunc(self, stream, callback, arg):
            assert type(stream) is int and type(arg) is int
            calls.append(stream)
            callback(arg)  # what runtime.pyx _HostFnFunc does

    a = _bare_adapter(Runtime())
    ran = []
    a.launch_host_func(5, lambda: ran.append(1))
    assert ran == [1] and calls == [5]

    def boom():
        raise ValueError("in a host function")

    a.launch_host_func(5, boom)  # printed, not raised into CuPy's C callback
    with pytest.raises(TypeError, match="launch_host_func: fn must be callable"):
        a.launch_host_func(5, 3)
    assert calls == [5, 5]


def test_unowned_memory_wraps_raw_pointers():
    """bench's CuPy buffers: UnownedMemory(ptr, size, owner, device_id) and MemoryPointer(mem, offset)
    (with an explicit device id neither calls CUDA)."""
    mem = cupy.cuda.UnownedMemory(0x10000, 256, None, 0)
    p = cupy.cuda.MemoryPointer(mem, 16)
    assert (mem.ptr, mem.size, mem.device_id, p.ptr) == (0x10000, 256, 0, 0x10010)
    a = cupy.ndarray((256,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(mem, 0))
    assert a.data.ptr == 0x10000 and a.nbytes == 256
