"""`@ember.backend_extension` and its shipped example, `matmul_bias_relu` (one fused cube kernel): forward
and gradients against the composed reference (x @ w + b).relu() on the same device and against PyTorch,
on every device of the suite; errors for bad shapes, dtypes, devices and rules."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import ember
import ember.debug
from ember import cube
from ember.kernels.common import contiguous, empty, grid
from ember.errors import DeviceError, DTypeError, EmberError, ShapeError
from ember.examples.custom_op import matmul_bias_relu
from ember.extension import cube_target
from ops.torch_check import check_op, random
from tolerances import grad as grad_tolerance

# (x shape, n): a plain batch, a 0-size batch, batch dims with n past one tile of units (128),
# k = 1, and k = 0 (the output is relu(b)).
SHAPES = [((5, 7), 3), ((0, 4), 6), ((2, 3, 8), 130), ((17, 1), 9), ((3, 0), 4)]


def _inputs(rng, x_shape, n, dtype):
    k = x_shape[-1]
    return [random(rng, x_shape, dtype), random(rng, (k, n), dtype), random(rng, (n,), dtype)]


def _composed(x, w, b):
    return (x @ w + b).relu()


@pytest.mark.parametrize("x_shape,n", SHAPES)
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_forward_and_gradients_match_torch(device, rng, x_shape, n, dtype):
    check_op(matmul_bias_relu, lambda x, w, b: torch.relu(x @ w + b), _inputs(rng, x_shape, n, dtype), device,
             grads=(0, 1, 2), rng=rng)


@pytest.mark.parametrize("x_shape,n", SHAPES)
def test_forward_and_gradients_match_the_composed_reference(device, rng, x_shape, n):
    arrays = _inputs(rng, x_shape, n, "f32")
    results = []
    for fn in (matmul_bias_relu, _composed):
        tracked = device.autodiff()
        x, w, b = (ember.tensor(a, device=tracked).require_grad() for a in arrays)
        y = fn(x, w, b)
        cot = ember.tensor(np.random.default_rng(1).uniform(-1, 1, y.shape).astype(np.float32), device=device)
        grads = y.backward(cot)
        results.append([y.numpy()] + [t.grad(grads).numpy() for t in (x, w, b)])
    rtol, atol = grad_tolerance("f32")
    for what, got, want in zip(["output", "dx", "dw", "db"], *results):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def test_relu_edge_zero_and_nan_follow_relu(device):
    # A pre-activation of exactly 0 gives 0 and no gradient; NaN stays NaN, as in (x @ w + b).relu().
    x = ember.tensor([[1.0], [0.0], [np.nan]], device=device.autodiff()).require_grad()
    w = ember.tensor([[2.0, -1.0]], device=device.autodiff())
    b = ember.tensor([0.0, 1.0], device=device.autodiff())
    y = matmul_bias_relu(x, w, b)
    np.testing.assert_array_equal(y.numpy(), [[2.0, 0.0], [0.0, 1.0], [np.nan, np.nan]])
    np.testing.assert_array_equal(x.grad(y.backward(ember.ones(3, 2, device=device))).numpy()[:2], [[2.0], [-1.0]])


def test_bad_shapes_name_all_shapes(device):
    x, w, b = ember.ones(4, 5, device=device), ember.ones(6, 3, device=device), ember.ones(3, device=device)
    with pytest.raises(ShapeError, match=r"matmul_bias_relu.*\(4, 5\).*\(6, 3\)"):
        matmul_bias_relu(x, w, b)
    with pytest.raises(ShapeError, match=r"\(4, 5\).*\(5, 3\).*\(4,\)"):
        matmul_bias_relu(x, ember.ones(5, 3, device=device), ember.ones(4, device=device))


def test_mixed_or_integer_dtypes_are_refused(device):
    x, w = ember.ones(2, 3, device=device), ember.ones(3, 4, device=device)
    with pytest.raises(DTypeError, match="f32, f32 and f64"):
        matmul_bias_relu(x, w, ember.ones(4, dtype=ember.f64, device=device))
    with pytest.raises(DTypeError, match="floating"):
        matmul_bias_relu(*(t.cast(ember.i32) for t in (x, w, ember.ones(4, device=device))))


def test_call_errors_name_the_op(device):
    x = ember.ones(2, 3, device=device)
    with pytest.raises(TypeError, match="matmul_bias_relu: takes 3 tensor inputs, got 2"):
        matmul_bias_relu(x, x)
    with pytest.raises(TypeError, match="input 2 must be an ember Tensor"):
        matmul_bias_relu(x, ember.ones(3, 4, device=device), np.ones(4, np.float32))
    with pytest.raises(TypeError, match=r"unknown param\(s\) \['alpha'\]"):
        matmul_bias_relu(x, ember.ones(3, 4, device=device), ember.ones(4, device=device), alpha=1.0)


# ---- an op without reference or backward, with a param ----------------------------------------------------

@cube.kernel
def scale_kernel(x: cube.Array, out: cube.Array, factor: cube.Comptime[float]):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        out[i] = x[i] * x.dtype(factor)


def scale(x: np.ndarray, *, factor: float) -> np.ndarray:
    x = contiguous(x)
    out = empty(x.shape, x.dtype, x)
    scale_kernel.launch(*grid(x.size), x.reshape(-1), out.reshape(-1), factor=factor)
    return out


ext_test_scale = ember.backend_extension(shape=lambda x, **_: x, name="ext_test_scale")(scale)
ext_test_scale_pure = ember.backend_extension(shape=lambda x, **_: x, name="ext_test_scale_pure", pure=True)(scale)


@ember.backend_extension(shape=lambda x: x, reference=lambda x: x[:1])
def ext_test_wrong_shape(x: np.ndarray) -> np.ndarray:
    return x[:1]


def test_an_op_without_reference_runs_only_where_there_is_a_cube_target(device, rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    x = ember.tensor(a, device=device)
    if cube_target(device) is None:
        with pytest.raises(DeviceError, match=f"ext_test_scale: {re.escape(repr(device))} has no cube target"):
            ext_test_scale(x, factor=3.0)
        return
    np.testing.assert_allclose(ext_test_scale(x, factor=3.0).numpy(), a * 3, rtol=1e-6)
    np.testing.assert_allclose(ext_test_scale(x[:, 1:3], factor=3.0).numpy(), a[:, 1:3] * 3, rtol=1e-6)


def test_a_pure_op_is_recorded_into_the_fused_block_and_replays_with_its_own_params(rng):
    """`pure=True`: the fusion decorator records the op as an inner step (no flush at the call, one
    block with the chains around it, replayed with each call's param); without it the op is a sync point."""
    device = ember.Device.cpu()
    backend = ember.debug.fusion_backend(device)
    if backend is None:
        pytest.skip("fusion is off ([fusion] enabled = false or EMBER_FUSION=0)")
    previous = ember.debug.set_fusion(device, True)
    try:
        for factor in (3.0, -0.5):
            a = rng.standard_normal((4, 0 if factor < 0 else 6)).astype(np.float32)  # an empty one too
            x = ember.tensor(a, device=device)
            before = backend.stats()
            y = ext_test_scale_pure((x * 2.0).exp(), factor=factor) + 1.0
            assert backend.stats()["pending"] == 4 and backend.stats()["flushes"] == before["flushes"]
            np.testing.assert_allclose(y.numpy(), np.exp(a * 2) * factor + 1, rtol=1e-6)
            assert backend.stats()["flushes"] == before["flushes"] + 1
        ext_test_scale(x.exp(), factor=2.0)  # not declared pure: its input is made concrete first
        assert backend.stats()["pending"] == 0
    finally:
        backend.flush()
        ember.debug.set_fusion(device, previous)


def test_an_op_without_backward_names_itself_when_a_gradient_reaches_it():
    device = ember.Device.cpu()
    x = ember.ones(2, device=device.autodiff()).require_grad()
    with pytest.raises(EmberError, match="ext_test_scale: has no gradient; pass backward="):
        ext_test_scale(x, factor=2.0).sum().backward()


def test_outputs_that_break_the_shape_rule_are_refused(device):
    with pytest.raises(EmberError, match=r"ext_test_wrong_shape: its (forward|reference) returned \(1, 2\)"):
        ext_test_wrong_shape(ember.ones(3, 2, device=device)).numpy()


def test_a_cube_backend_runs_the_kernel_not_a_fallback(device):
    from ember.backend.cube import CubeBackend
    from ember.backend.cube.lowering import TABLE
    backend = device.backend
    while backend is not None and not isinstance(backend, CubeBackend):
        backend = getattr(backend, "inner", None)
    assert (backend is None) == (cube_target(device) is None)
    y = matmul_bias_relu(ember.ones(2, 3, device=device), ember.ones(3, 4, device=device),
                         ember.ones(4, device=device))
    np.testing.assert_array_equal(y.numpy(), np.full((2, 4), 4.0))
    assert "matmul_bias_relu" in TABLE
    if backend is not None:
        assert "matmul_bias_relu" not in backend.fallbacks


def test_registering_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="'matmul_bias_relu' is already registered"):
        ember.backend_extension(shape=lambda x: x, name="matmul_bias_relu")(lambda x: x)


def test_the_rules_answer_once_per_shapes_and_params_and_errors_recur():
    """`Extension._infer` remembers what the shape and dtype rules said for given input shapes, dtypes and
    params (an optimizer calls its update op on the same shapes every step); a rule that raises is asked
    again, and raises again, at every call."""
    asked = []

    def rule(x, *, factor):
        asked.append((x, factor))
        if factor < 0:
            raise ShapeError("ext_test_counted", f"factor {factor} must not be negative")
        return x

    counted = ember.backend_extension(shape=rule, name="ext_test_counted", reference=lambda x, *, factor: x * factor)(scale)
    x = ember.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=ember.Device.numpy())
    for _ in range(3):
        np.testing.assert_array_equal(counted(x, factor=2.0).numpy(), x.numpy() * 2)
    np.testing.assert_array_equal(counted(x[:1], factor=2.0).numpy(), x.numpy()[:1] * 2)
    np.testing.assert_array_equal(counted(x, factor=3.0).numpy(), x.numpy() * 3)
    assert asked == [((2, 3), 2.0), ((1, 3), 2.0), ((2, 3), 3.0)]
    for _ in range(2):
        with pytest.raises(ShapeError, match="factor -1.0 must not be negative"):
            counted(x, factor=-1.0)
    assert asked[-2:] == [((2, 3), -1.0), ((2, 3), -1.0)]
