"""The origin's side of an RMA operation: its bytes packed and unpacked, its types checked (L5).

Theory of operation
===================
An operation names an origin buffer (mpi4py's buffer spec, parsed by :mod:`gpumpi._buffers`)
and a target datatype; the window runtimes (:mod:`gpumpi.rma.local`, :mod:`gpumpi.rma.mpi`)
move *packed* bytes: a host ``uint8`` array in the order of the type signature.  This module
turns an origin message into those bytes (:func:`origin_packed`: no copy for a contiguous
host message; device and simulated device memory synchronized first) and scatters fetched
bytes back into a result message (:func:`origin_unpack`), and holds the type rules every
path shares, the near path of :mod:`gpumpi.rma.near` included: the signatures of origin and
target must be made of the same basic types (:func:`check_signatures`, off with
``GPUMPI_TYPECHECK=0``), an accumulate takes a predefined operation that MPI defines for
the type (:func:`check_acc_types`, cached on the target type's record), and
``Compare_and_swap`` takes one integer, logical or byte element (:func:`cas_dtype`).
Nothing here reaches a target.
"""

from __future__ import annotations

import numpy as np

from .. import _services
from ..datatypes.plan import plan_for
from ..errors import ERR_OP, ERR_TYPE, error
from ..errors import Exception as MPIException

__all__ = ["check_signatures", "origin_packed", "origin_unpack", "check_acc_types", "cas_dtype"]

_U8 = np.dtype(np.uint8)


def _sim_sync() -> None:
    from .. import _device

    _device.adapter_for("sim").synchronize()


def check_signatures(a, b, call: str, what: str = "origin") -> None:
    """``ERR_TYPE`` when two datatypes of one basic type each are made of different basic types
    (``DOUBLE`` against ``INT64_T``: the same size, another signature); 1-byte types match anything,
    as in point-to-point, and ``GPUMPI_TYPECHECK=0`` turns the check off."""
    ab, bb = a._basic, b._basic
    if ab is None or bb is None or ab is bb or ab._size == 1 or bb._size == 1 or not _services.typecheck():
        return
    from ..kernels.reduce import named_basic

    if named_basic(ab) is not named_basic(bb):
        raise error(ERR_TYPE, f"{call}: {what} and target datatypes are made of different basic types "
                              f"({ab!r} and {bb!r})")


def origin_packed(msg) -> np.ndarray:
    """The origin message's bytes, packed, as a host ``uint8`` array (no copy for a contiguous
    host message)."""
    n = msg.nbytes
    if not n:
        return np.empty(0, _U8)
    kind = msg.kind
    if kind == "device":
        from .. import _device

        ad = _device.adapter_for("device")
        span = np.empty(msg.span, _U8)
        ad.stream_synchronize(ad.current_stream())
        ad.memcpy(span.ctypes.data, msg.addr + msg.lo, msg.span)
        ad.synchronize()
        if msg.contiguous:
            return span[:n]
        return _pack(memoryview(span), msg)
    if kind == "sim":
        _sim_sync()
    if msg.contiguous:
        return np.frombuffer(msg.mem, _U8, n)
    return _pack(msg.mem, msg)


def _pack(mem, msg) -> np.ndarray:
    out = np.empty(msg.nbytes, _U8)
    plan_for(msg.datatype, msg.count).pack_into(mem, msg.lo, out)
    return out


def origin_unpack(msg, packed: np.ndarray, nbytes: int) -> None:
    """Scatter ``nbytes`` packed bytes into the origin (result) message."""
    if not nbytes:
        return
    kind = msg.kind
    if kind == "device":
        from .. import _device

        ad = _device.adapter_for("device")
        span = np.empty(msg.span, _U8)
        if not msg.contiguous:
            ad.memcpy(span.ctypes.data, msg.addr + msg.lo, msg.span)
            ad.synchronize()
            plan_for(msg.datatype, msg.count).unpack_from(packed, memoryview(span), msg.lo, nbytes)
        else:
            span[:nbytes] = packed[:nbytes]
        ad.stream_synchronize(ad.current_stream())
        ad.memcpy(msg.addr + msg.lo, span.ctypes.data, msg.span if not msg.contiguous else nbytes)
        ad.synchronize()
        return
    if kind == "sim":
        _sim_sync()
    if msg.contiguous:
        np.frombuffer(msg.mem, _U8, nbytes)[:] = packed[:nbytes]
        return
    plan_for(msg.datatype, msg.count).unpack_from(packed, msg.mem, msg.lo, nbytes)


def check_acc_types(otype, ttype, op, call: str):
    """Validate an accumulate's operation and types: ``(reducer, element dtype or None)``
    (cached on the target type's record per operation and origin type)."""
    key = ("rma", getattr(op, "_h", None), otype._handle)
    cache = ttype._rec.cache
    hit = cache.get(key)
    if hit is not None and not ttype._rec.freed and not otype._rec.freed:
        return hit
    hit = cache[key] = _check_acc_types(otype, ttype, op, call)
    return hit


def _check_acc_types(otype, ttype, op, call: str):
    from ..kernels import reduce as K
    from ..op import Op

    if not isinstance(op, Op):
        raise TypeError(f"{call}: expecting an Op (got {type(op).__name__})")
    if op._rec is not None:
        raise error(ERR_OP, f"{call}: only predefined operations may be used in RMA accumulates ({op!r})")
    if op._h == 0x18000000:
        raise error(ERR_OP, f"{call}: invalid operation (OP_NULL)")
    name = op._name
    ob, tb = otype._basic, ttype._basic
    if name != "NO_OP" and otype._size and ttype._size and (ob is None or tb is None or
                                                             K.named_basic(ob) is not K.named_basic(tb)):
        raise error(ERR_TYPE, f"{call}: origin and target datatypes must be made of the same predefined type "
                              f"({otype!r}, {ttype!r})")
    red = K.resolve(name, ttype, call)
    dtype = red.dtype
    if dtype is None and tb is not None and name in ("REPLACE", "NO_OP"):
        try:
            dtype = K.resolve("SUM", ttype, call).dtype
        except Exception:
            try:
                dtype = K.resolve("BOR", ttype, call).dtype
            except Exception:
                dtype = None
    if dtype is not None and (dtype.kind not in "biuf" or dtype.itemsize not in (1, 2, 4, 8)):
        dtype = None
    return red, dtype


def cas_dtype(datatype, call: str):
    """The element type of Compare_and_swap: integer, logical or byte types only (MPI)."""
    from ..kernels import reduce as K

    for name in ("BOR", "LOR"):
        try:
            dt = K.resolve(name, datatype, call).dtype
        except MPIException:
            continue
        if dt is not None and dt.itemsize in (1, 2, 4, 8) and datatype._nbasic == 1:
            return dt
    raise error(ERR_TYPE, f"{call}: Compare_and_swap takes one integer, logical or byte element ({datatype!r})")
