"""Fixtures shared by the core test suite.

`DEVICES` is the list every conformance test runs over. A new backend joins the suite by adding its
device here (e.g. `ember.Device.cuda(0)` behind an availability check); nothing else changes. Tests
that take the `device` fixture run once per entry, with ids "numpy", "cpu", ...

The helpers that make random inputs per dtype and compare ember tensors with PyTorch tensors live in
`tests/conformance/oracle.py`; tolerances per dtype in `tests/tolerances.py`.
"""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import ember
import ember.debug
from ember.backend.cube.backend import UnsupportedDTypeError
from ember.cube.runtime.wgpu import wgpu_available


def _torch_cuda_here() -> bool:
    """Whether torch is installed with a CUDA (or ROCm) GPU it can use."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# The devices of the conformance suite (id, constructor). Add a backend here and it runs everything.
DEVICES = [
    ("numpy", ember.Device.numpy),
    ("cpu", ember.Device.cpu),
    ("cpu-unfused", ember.Device.cpu),  # the same device with fusion switched off (see UNFUSED)
]
if os.environ.get("EMBER_TEST_WGPU", "1") != "0" and wgpu_available()[0]:
    # Cube(wgpu) on the best adapter (lavapipe in CI). A test reaching a dtype its kernels cannot hold
    # is skipped with the backend's reason (see pytest_pyfunc_call): counted as skipped, never passed.
    DEVICES.append(("wgpu", ember.Device.wgpu))
    DEVICES.append(("wgpu-unfused", ember.Device.wgpu))
if os.environ.get("EMBER_TEST_TORCH", "1") != "0":
    # ember's primitives run by torch ops (Device.torch): on the CPU here, on the GPU where torch has
    # one (scripts/gpu_check.sh runs the suites with -k torch-cuda). EMBER_TEST_TORCH=0 leaves them out.
    DEVICES.append(("torch-cpu", lambda: ember.Device.torch("cpu")))
    if _torch_cuda_here():
        DEVICES.append(("torch-cuda", lambda: ember.Device.torch("cuda:0")))
if os.environ.get("EMBER_TEST_REMOTE"):
    # Device.remote to an `ember serve` server whose ticket this names: tests/remote/test_conformance.py
    # starts a cpu server and runs a named subset of the conformance suite here with -k remote.
    DEVICES.append(("remote", lambda: ember.Device.remote(os.environ["EMBER_TEST_REMOTE"])))
# Entries that run with `ember.debug.set_fusion(device, False)` for the test, so the suite checks
# the fused and the unfused Cube backends alike.
UNFUSED = {"cpu-unfused", "wgpu-unfused"}


def _gpu_here() -> bool:
    """A CUDA GPU, its driver and NVRTC (scripts/gpu_check.sh runs the suite there with -k cuda)."""
    from ember.cube.runtime.cuda import cuda_available
    from ember.cube.runtime.nvrtc import nvrtc_available
    return cuda_available()[0] and nvrtc_available()[0]


if _gpu_here():
    DEVICES.append(("cuda", lambda: ember.Device.cuda(0)))

# One hypothesis profile for the whole suite: modest example counts keep CI short on two cores, and no
# deadline, since shared CI machines make timings meaningless. HYPOTHESIS_PROFILE picks another
# registered profile (e.g. "thorough" for a long local run).
settings.register_profile("thorough", max_examples=500, deadline=None)
settings.register_profile("ember", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ember"))


@pytest.fixture(params=DEVICES, ids=[name for name, _ in DEVICES])
def device(request) -> ember.Device:
    """Each device of `DEVICES` in turn (without autodiff; use `device.autodiff()` for gradients)."""
    name, make = request.param
    device = make()
    if name not in UNFUSED or ember.debug.fusion_backend(device) is None:
        yield device
        return
    previous = ember.debug.set_fusion(device, False)
    try:
        yield device
    finally:
        ember.debug.set_fusion(device, previous)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """A test that reaches a dtype its device's kernels cannot hold (f64 on wgpu, ...) is skipped with
    the backend's message, which names the dtype and the adapter."""
    try:
        return (yield)
    except UnsupportedDTypeError as e:
        pytest.skip(f"unsupported dtype: {e}")


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A NumPy generator seeded from the test's id: fresh inputs per test, reproducible per run."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
