"""Fixtures of the fusion tests: a fused CPU device, skipped (with the reason) where it cannot run."""

from __future__ import annotations

import pytest

import ember
import ember.debug


@pytest.fixture
def cpu() -> ember.Device:
    """`Device.cpu()` with its fusion layer on (restored after the test); pending work flushed."""
    device = ember.Device.cpu()
    try:
        backend = ember.debug.fusion_backend(device)
    except ember.DeviceUnavailableError as e:
        pytest.skip(str(e))
    if backend is None:
        pytest.skip("fusion is off ([fusion] enabled = false or EMBER_FUSION=0)")
    previous = ember.debug.set_fusion(device, True)
    yield device
    backend.flush()
    ember.debug.set_fusion(device, previous)
