"""A lone elementwise op on `Device.cpu()` is one generated kernel, fused or not: broadcast and strided
operands are read through their layouts inside it, not copied to full size first
(`backend/cube/lowering._elementwise`; narrow dtypes, widened by the cast kernel first, are not
counted here: the conformance suite checks their values)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.debug
from ember.cube.runtime import cpu as cpu_module


@pytest.fixture(params=["fused", "unfused"])
def cpu(request):
    device = ember.Device.cpu()
    previous = ember.debug.set_fusion(device, request.param == "fused")
    yield device
    ember.debug.set_fusion(device, previous)


CASES = [  # (ember's op, NumPy's, a's shape, b's shape, dtype, transpose b)
    (lambda a, b: a + b, np.add, (3, 1, 5), (4, 5), np.float32, False),
    (lambda a, b: a * b, np.multiply, (7, 3), (7, 3), np.int32, True),         # b a transposed view
    (lambda a, b: a < b, np.less, (2, 9), (9,), np.float64, False),
    (lambda a, b: a - b, np.subtract, (5, 1), (1, 13), np.int64, False),
    (lambda a, b: a | b, np.bitwise_or, (3, 4, 1), (1, 5), np.bool_, True),
    (lambda a, b: ember.maximum(a, b), np.maximum, (4, 6), (1,), np.float64, False),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_a_lone_elementwise_op_is_one_launch(cpu, rng, monkeypatch, case):
    fn, reference, sa, sb, dtype, transpose = CASES[case]
    x = (rng.standard_normal(sa) * 20).astype(dtype)
    y = (rng.standard_normal(sb[::-1] if transpose else sb) * 20).astype(dtype)
    a, b = ember.tensor(x, device=cpu), ember.tensor(y, device=cpu)
    if transpose:
        b, y = b.T, y.T
    launches = []  # every kernel the CPU runtime runs: a first run, or a replay of a captured step
    runtime, replay = cpu_module.cpu_runtime(), cpu_module.BoundLaunch.replay
    monkeypatch.setattr(runtime, "run", lambda compiled, count, args, run=runtime.run: (
        launches.append(compiled), run(compiled, count, args))[1])
    monkeypatch.setattr(cpu_module.BoundLaunch, "replay", lambda self, arrays: (
        launches.append(self), replay(self, arrays))[1])
    got = fn(a, b).numpy()
    np.testing.assert_array_equal(got, reference(x, y))
    assert len(launches) == 1, launches
