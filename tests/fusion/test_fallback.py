"""A block whose fused kernels cannot run falls back to op-by-op execution on the inner backend, once
per plan: a target limit (`unfusable`, e.g. WGSL's missing 64-bit tanh) quietly, a fusion bug
(`fallbacks`) with a warning."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.debug
from ember.backend.cube.fused import target as target_module


def chain(x):
    return ((x * 2.0 + 1.0).tanh() - x).sum(dim=-1)


def expected(h):
    return (np.tanh(h * 2.0 + 1.0) - h).sum(axis=-1)


def test_broken_fused_kernel_warns_once_and_runs_op_by_op(fused, rng, monkeypatch):
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("injected codegen failure")

    monkeypatch.setattr(target_module, "run_elementwise", broken)
    monkeypatch.setattr(target_module, "run_reduction", broken)
    backend = ember.debug.fusion_backend(fused)
    backend.plans.clear()
    before = backend.stats()["fallbacks"]
    h = rng.standard_normal((4, 33)).astype(np.float32)
    try:
        with pytest.warns(RuntimeWarning, match="injected codegen failure"):
            first = chain(ember.tensor(h, device=fused)).numpy()
        tried = len(calls)
        second = chain(ember.tensor(h, device=fused)).numpy()  # a replay goes op by op at once
    finally:
        backend.plans.clear()  # the plan remembers its failure: later tests must not replay it
    assert tried >= 1 and len(calls) == tried
    assert backend.stats()["fallbacks"] == before + 2
    np.testing.assert_allclose(first, expected(h), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second, first, rtol=0, atol=0)


def test_unfusable_on_wgsl_runs_op_by_op_quietly(fused, rng, recwarn):
    if fused.kind != "wgpu":
        pytest.skip("a WGSL target limit: only the wgpu device has it")
    backend = ember.debug.fusion_backend(fused)
    before = backend.stats()
    h = rng.standard_normal((3, 70))
    for _ in range(2):  # the second run replays the plan marked unfusable
        got = chain(ember.tensor(h, device=fused)).numpy()
        np.testing.assert_allclose(got, expected(h), rtol=1e-12, atol=1e-12)
    after = backend.stats()
    assert after["unfusable"] == before["unfusable"] + 2 and after["fallbacks"] == before["fallbacks"]
    assert not [w for w in recwarn if "fused kernel failed" in str(w.message)]


@pytest.mark.parametrize("kind", ["cpu", "wgpu"])
def test_ember_fusion_0_leaves_the_plain_cube_backend(kind, monkeypatch):
    from ember import settings
    from ember.backend.cube import CubeBackend
    from ember.backend.fusion import Fusion
    from ember.dispatch import build_backend
    make = getattr(ember.Device, kind)
    if not settings.settings().get("fusion", "enabled"):
        pytest.skip("fusion is off in this environment")
    try:
        assert isinstance(build_backend(make()), Fusion)
        monkeypatch.setenv("EMBER_FUSION", "0")
        settings.reload()
        assert type(build_backend(make())) is CubeBackend
    except ember.DeviceUnavailableError as e:
        pytest.skip(str(e))
    finally:
        monkeypatch.delenv("EMBER_FUSION", raising=False)
        settings.reload()
