"""Fused results equal unfused ones (and the NumPy reference device) on random inputs.

Every expression mixes several elementwise ops, broadcasting, a cast to another dtype and a
reduction, so each run goes through generated kernels, on every fused device (CPU, and wgpu where an
adapter is here); `fallbacks` and `unfusable` stay 0 (no fused kernel failed or was refused by its
target and was replaced by the op-by-op path).
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.debug
from conformance.oracle import sample
from tolerances import forward

# The last two run line by line (a last dim of at least codegen.MIN_ROW with a broadcast operand).
SHAPES = [((3, 4), (4,)), ((2, 1, 5), (3, 1)), ((0, 3), (3,)), ((), (5,)), ((1,), (0,)), ((7,), ()),
          ((6, 70), (6, 1)), ((70,), (2, 3, 1))]


def float_expr(a, b):
    y = ((a * b + 1.0).tanh() - a).where(a > b, b.abs() * 0.5)
    spread = ((a - b) * 0.5).exp().sum(dim=-1) if y.ndim else y  # fuse-on-read of a broadcast
    return y, (y * y).sum(dim=-1) if y.ndim else y, y.cast("f64") * 2, spread


def int_expr(a, b):
    y = (a * b + a - 3).maximum(b).where(a != b, a - b)
    return y, (y * 2).sum(dim=-1) if y.ndim else y, (y.cast("f32") * 0.01).exp()


def bool_expr(a, b):
    y = (a & b) | ~a
    return y, y.cast("i32").sum(dim=-1) if y.ndim else y, y.cast("f32") + 1.0


EXPRS = {"f32": float_expr, "f64": float_expr, "f16": float_expr, "bf16": float_expr,
         "i32": int_expr, "i64": int_expr, "u8": int_expr, "bool": bool_expr}


def run(device, expr, hosts):
    """The expression's outputs as (f64 array, dtype name) pairs."""
    tensors = [ember.tensor(h, device=device) for h in hosts]
    return [(t.numpy().astype(np.float64), t.dtype.name) for t in expr(*tensors)]


@pytest.mark.parametrize("dtype", list(EXPRS))
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_fused_equals_unfused_and_reference(fused, rng, dtype, shapes):
    hosts = [sample(s, dtype, rng, *((0, 9) if dtype == "u8" else ())) for s in shapes]
    expr = EXPRS[dtype]
    backend = ember.debug.fusion_backend(fused)
    before = backend.stats()
    got = run(fused, expr, hosts)
    ember.debug.set_fusion(fused, False)
    try:
        unfused = run(fused, expr, hosts)
    finally:
        ember.debug.set_fusion(fused, True)
    reference = run(ember.Device.numpy(), expr, hosts)
    after = backend.stats()
    assert after["fallbacks"] == before["fallbacks"]
    if not (fused.kind == "wgpu" and dtype == "f64"):  # Vulkan has no 64-bit tanh: see test_fallback.py
        assert after["unfusable"] == before["unfusable"]
    for (f, name), (u, _), (r, _) in zip(got, unfused, reference):
        assert f.shape == u.shape == r.shape
        # An output is as exact as the looser of its dtype and the one it was computed in. Fused
        # chains keep f16/bf16 intermediates in f32 (rounding only when stored), so they may differ
        # from the op-by-op results by the rounding of each intermediate.
        rtol, atol = (3e-2, 3e-2) if dtype in ("f16", "bf16") else map(max, forward(name), forward(dtype))
        np.testing.assert_allclose(f, u, rtol=rtol, atol=atol)
        np.testing.assert_allclose(f, r, rtol=rtol, atol=atol)
