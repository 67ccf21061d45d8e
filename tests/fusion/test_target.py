"""The fusion hooks (`ember/backend/fusion/target.py`): `Fusion(inner)` runs its fused plans through
`inner.fusion_target()`, and refuses a backend without one."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend.cube import CubeBackend
from ember.backend.fusion import Fusion
from ember.backend.numpy import NumpyBackend
from ember.cube.runtime.cpu import cpu_runtime
from ember.dtype import f32
from ember.errors import DeviceError
from ember.ops import registry
from ember.ops.primitive import Aval


def test_a_backend_without_fusion_hooks_cannot_be_decorated():
    with pytest.raises(DeviceError, match="numpy.*fusion_target"):
        Fusion(NumpyBackend())


@pytest.mark.parametrize("shape", [(0,), (7,), (3, 5)])
def test_the_fused_kernels_run_through_the_target(shape):
    """A fused exp-then-mul block calls the target's `run_elementwise`, and its result is NumPy's."""
    backend = Fusion(CubeBackend(cpu_runtime()))
    calls = []
    run = backend.target.run_elementwise
    backend.target.run_elementwise = lambda *args: calls.append(args[1]) or run(*args)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    h = backend.from_host(x)
    y = backend.execute(registry["exp"], [h], {}, Aval(shape, f32))
    z = backend.execute(registry["mul"], [y, h], {}, Aval(shape, f32))
    np.testing.assert_allclose(backend.to_host(z), np.exp(x) * x, rtol=1e-6)
    assert calls == [shape]
