"""The parts of GA gain's documented surface that gpumpi's gain does not implement.

Each name exists and raises ``NotImplementedError("gain.<name>: ... (gpumpi)")`` when called
(or, for properties, when read), so a ported program fails at the call that needs the feature,
with its name.  Most of them are also ``NotImplementedError`` in GA's own gain
(``core.pyx``); the rest (``flat``/``flatiter``, ``mask_sync``) rely on views or on switching
off the syncs that keep gpumpi's collective calls correct.
"""

from __future__ import annotations

from .core import ndarray

__all__ = ["NDARRAY_METHODS", "NDARRAY_PROPERTIES", "MODULE_FUNCTIONS", "flatiter", "mask_sync"]

#: ndarray methods that raise
NDARRAY_METHODS = (
    "argmax", "argmin", "argsort", "byteswap", "choose", "compress", "cumprod", "cumsum", "dump", "dumps",
    "getfield", "itemset", "newbyteorder", "nonzero", "put", "repeat", "resize", "searchsorted", "setfield",
    "setflags", "sort", "take", "tofile", "tostring", "trace", "view", "__reduce__", "__reduce_ex__",
)
#: ndarray properties that raise when read
NDARRAY_PROPERTIES = ("flat", "flags", "ctypes", "data")
#: module functions that raise
MODULE_FUNCTIONS = ("flatiter", "mask_sync")

_WHY = {
    "__reduce__": "pickling a distributed array",
    "__reduce_ex__": "pickling a distributed array",
    "flat": "flat iterators (views of a distributed array)",
    "flags": "memory flags (there is no single memory)",
    "ctypes": "ctypes access (there is no single memory)",
    "data": "the data buffer (there is no single memory; use access())",
    "view": "views of a distributed array",
    "resize": "resizing a distributed array in place",
}


def _raiser(name: str):
    why = _WHY.get(name, "not implemented")

    def method(self, *args, **kwargs):
        raise NotImplementedError(f"gain.ndarray.{name}: {why} (gpumpi)")
    method.__name__ = name
    method.__doc__ = f"Not implemented in gpumpi's gain: raises ``NotImplementedError`` ({why})."
    return method


for _name in NDARRAY_METHODS:
    setattr(ndarray, _name, _raiser(_name))
for _name in NDARRAY_PROPERTIES:
    _r = _raiser(_name)
    setattr(ndarray, _name, property(_r, lambda self, value, _r=_r: _r(self), doc=_r.__doc__))


class flatiter:
    """gain's flat iterator over a distributed array: not implemented (a view), raises on creation."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("gain.flatiter: flat iterators (views of a distributed array) (gpumpi)")


def mask_sync(*args, **kwargs):
    """gain's switch that turns off its syncs: not implemented (gpumpi's collective calls need
    them to be correct); raises ``NotImplementedError``."""
    raise NotImplementedError("gain.mask_sync: switching off the syncs of collective calls (gpumpi)")
