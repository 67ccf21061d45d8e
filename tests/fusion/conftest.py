"""Fixtures of the fusion tests: fused devices (CPU, and wgpu and cuda where they are here), skipped with
the reason where they cannot run."""

from __future__ import annotations

import pytest

import ember
import ember.debug
from conftest import DEVICES


def _fused(make):
    """The device `make()` with its fusion layer on (restored after), pending work flushed after."""
    try:
        device = make()
        backend = ember.debug.fusion_backend(device)
    except ember.DeviceUnavailableError as e:
        pytest.skip(str(e))
    if backend is None:
        pytest.skip("fusion is off ([fusion] enabled = false or EMBER_FUSION=0)")
    previous = ember.debug.set_fusion(device, True)
    yield device
    backend.flush()
    ember.debug.set_fusion(device, previous)


@pytest.fixture
def cpu() -> ember.Device:
    """`Device.cpu()` with its fusion layer on (restored after the test); pending work flushed."""
    yield from _fused(ember.Device.cpu)


# Every device whose backend stack has a fusion layer: fused kernels generated for its cube runtime.
FUSED = [("cpu", ember.Device.cpu)] + [(name, make) for name, make in DEVICES if name in ("wgpu", "cuda")]


@pytest.fixture(params=FUSED, ids=[name for name, _ in FUSED])
def fused(request) -> ember.Device:
    """Each fused device in turn: Fusion(Cube(cpu)), and Fusion(Cube(wgpu)) / Fusion(Cube(cuda)) where here."""
    yield from _fused(request.param[1])
