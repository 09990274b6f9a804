"""The array-library registry (gpumpi._backends): selection by module, type or attribute, and what
each library does in object messages and as a buffer."""

import pytest
import numpy as np

from gpumpi import _arrays, _backends
from gpumpi._backends import BACKENDS, by_module, device_kind
from gpumpi.testing import SimDeviceArray


def test_modules_select_their_library():
    assert by_module("cupy") is BACKENDS["cupy"]
    assert by_module("numba") is by_module("numba_cuda") is BACKENDS["numba"]
    for other in ("numpy", "torch", "jax", "gpumpi", ""):  # by type, by attribute, or generic
        assert by_module(other) is None
    for be in BACKENDS.values():
        for m in be.modules:
            assert by_module(m) is be


def test_every_buffer_chain_is_one_arrays_has():
    for be in BACKENDS.values():
        assert be.buffer in _arrays._CHAINS, be
    assert _arrays._CHAINS[_backends.NUMPY.buffer] is _arrays._from_ndarray
    assert _arrays._CHAINS[_backends.GENERIC.buffer] is _arrays._from_protocols
    assert _arrays._CHAINS[BACKENDS["cupy"].buffer] is _arrays._cai_first
    assert _arrays._CHAINS[BACKENDS["numba"].buffer] is _arrays._numba_first


def test_device_kind_of_types():
    assert device_kind(SimDeviceArray) == "sim"
    assert device_kind(type("Declared", (), {"__gpumpi_sim__": True, "__module__": "anywhere"})) == "sim"
    assert device_kind(type("NotSim", (), {"__gpumpi_sim__": False})) is None
    assert device_kind(np.ndarray) is None
    assert device_kind(bytearray) is None
    # numba-cuda: real device arrays export the CUDA array interface; the simulator's do not
    real = type("DeviceNDArray", (), {"__module__": "numba.cuda.cudadrv.devicearray",
                                      "__cuda_array_interface__": {}, "copy_to_host": lambda self: None})
    fake = type("FakeCUDAArray", (), {"__module__": "numba_cuda.numba.cuda.simulator.cudadrv.devicearray",
                                      "copy_to_host": lambda self: None})
    assert device_kind(real) == "numba"
    assert device_kind(fake) is None


def test_device_libraries_can_move_their_arrays():
    from gpumpi import _pickle

    assert _pickle._BACKENDS is BACKENDS  # object messages read the registry
    for name in ("sim", "cupy", "numba"):
        be = BACKENDS[name]
        assert be.name == name  # the name travels in object messages
        for op in (be.contiguous, be.empty, be.to_host, be.from_host):
            assert callable(op)
    for be in (_backends.NUMPY, _backends.GENERIC):
        assert be.empty is None and not be.is_device(np.ndarray)


def test_sim_library_round_trip():
    be = BACKENDS["sim"]
    host = np.arange(12.0).reshape(3, 4)
    d = be.from_host(SimDeviceArray, host)
    assert type(d) is SimDeviceArray and np.array_equal(be.to_host(d), host)
    e = be.empty(SimDeviceArray, (3, 4), np.float64, "C")
    assert e.shape == (3, 4) and e.dtype == np.float64
    col = d[:, 1]
    assert be.contiguous(col) == (col, "C")  # strided views go as they are: the pack kernels gather them


def test_register_converter_keeps_what_a_library_does_in_messages(monkeypatch):
    monkeypatch.setattr(_backends, "_BY_MODULE", dict(_backends._BY_MODULE))

    def loader():
        raise AssertionError("not called here")

    numba = BACKENDS["numba"]
    _backends.register_converter("numba", loader)
    be = by_module("numba")
    assert be.buffer is loader and be.name == "numba" and be.modules == ("numba",)
    assert (be.is_device, be.contiguous, be.empty, be.to_host, be.from_host) == (
        numba.is_device, numba.contiguous, numba.empty, numba.to_host, numba.from_host)
    assert by_module("numba_cuda") is numba and BACKENDS["numba"] is numba
    _backends.register_converter("fakelib", loader)
    new = by_module("fakelib")
    assert new.name == "fakelib" and new.buffer is loader and not new.is_device(object)
    assert device_kind(type("T", (), {"__module__": "fakelib.core"})) is None


def test_registry_imports_no_library():
    import subprocess
    import sys

    code = ("import sys, gpumpi._backends as B; "
            "B.device_kind(type('T', (), {'__module__': 'numba.x'})); "
            "bad = [m for m in ('numpy', 'cupy', 'numba') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)



def test_device_empty_is_the_one_device_allocator():
    from gpumpi import _device

    old = _device.device_mode()
    _device.set_device_mode("sim")
    try:
        a = _backends.device_empty((3, 4), np.float32, "t", zeros=True)
    finally:
        _device.set_device_mode(old)
    assert type(a) is SimDeviceArray and a.shape == (3, 4) and a.dtype == np.float32
    assert (a.get() == 0).all()
    b = _backends.device_empty(5, "u1", "t", kind="sim")
    assert type(b) is SimDeviceArray and b.shape == (5,) and b.dtype == np.uint8
    with pytest.raises(ValueError, match=r"t: not a device array kind \('numpy'"):
        _backends.device_empty(5, "u1", "t", kind="numpy")
