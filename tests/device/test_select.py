"""Adapter selection, the device mode and the simulator switch (gpumpi._device itself).

Without a CUDA driver the active adapter is the simulated one; the device mode
'sim' forces it everywhere.  The simulator switch is tested in fresh interpreters,
as numba reads it once per process.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from gpumpi import _device
from gpumpi._device import DEVICE, SIM, adapter, adapter_for, sim_adapter

no_driver = pytest.mark.skipif(_device.cuda_driver() is not None, reason="a CUDA driver is present")


def test_adapter_is_sim_without_driver_or_in_sim_mode():
    if _device.cuda_driver() is None:
        assert adapter() is sim_adapter()
    old = _device.device_mode()
    try:
        _device.set_device_mode("sim")
        assert adapter() is sim_adapter()
        assert adapter().name == "sim"
    finally:
        _device.set_device_mode(old)


def test_adapter_for_memory_kinds():
    assert adapter_for(SIM) is sim_adapter()
    assert adapter_for(DEVICE) is adapter()
    old = _device.device_mode()
    try:
        _device.set_device_mode("sim")
        assert adapter_for(DEVICE) is sim_adapter()
    finally:
        _device.set_device_mode(old)
    with pytest.raises(ValueError, match=r"^adapter_for: no device adapter for 'host' memory"):
        adapter_for("host")


def test_device_mode_round_trip_and_refusal():
    old = _device.device_mode()
    try:
        for mode in ("sim", "none", "auto"):
            _device.set_device_mode(mode)
            assert _device.device_mode() == mode
        with pytest.raises(ValueError, match=r"^set_device_mode: unknown mode 'gpu'"):
            _device.set_device_mode("gpu")
        assert _device.device_mode() == "auto"
    finally:
        _device.set_device_mode(old)


def test_forked_child_gets_fresh_adapters():
    parent = sim_adapter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        ok = parent._detached and sim_adapter() is not parent and not sim_adapter()._detached
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sim_adapter() is parent and not parent._detached


def _fresh(code: str, **env) -> str:
    e = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    e.update(env)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=60, env=e)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


@no_driver
def test_use_simulator_sets_the_switch_before_numba_cuda_only():
    code = """
        import os, sys
        from gpumpi import _device
        _device.use_simulator()
        print(os.environ.get("NUMBA_ENABLE_CUDASIM"))
    """
    assert _fresh(code) == "1"
    assert _fresh(code, NUMBA_ENABLE_CUDASIM="0") == "0"  # the user's choice stands
    late = """
        import os, sys, types
        sys.modules["numba.cuda"] = types.ModuleType("numba.cuda")  # already imported: too late to switch
        from gpumpi import _device
        _device.use_simulator()
        print(os.environ.get("NUMBA_ENABLE_CUDASIM"))
    """
    assert _fresh(late) == "None"


@no_driver
def test_use_simulator_applies_after_numba_itself_was_imported():
    # numba reads NUMBA_ENABLE_CUDASIM when it is imported (a collected test module importing
    # numba did that in CI): numba.cuda imported later must still come up as the simulator
    pytest.importorskip("numba.cuda")
    code = """
        import numba
        from gpumpi import _device
        _device.use_simulator()
        from numba.cuda.core import config
        from gpumpi.kernels import pack
        print(config.ENABLE_CUDASIM, pack._is_sim())
    """
    assert _fresh(code) == "1 True"


def test_importing_the_device_package_stays_light():
    out = _fresh("""
        import sys
        import gpumpi._backends, gpumpi._device, gpumpi._memfd
        print(sorted({"numpy", "numba", "cupy"} & set(sys.modules)))
    """)
    assert out == "[]"
