"""Convolutions (ember.nn.functional conv1d/2d/3d, conv_transpose1d/2d/3d) against PyTorch: outputs and
the gradients of input, weight and bias over a small grid of strides, paddings, dilations and groups."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember.nn import functional as F
from ops.torch_check import FLOAT_DTYPES, check_op, random

TF = torch.nn.functional
CONV = {1: (F.conv1d, TF.conv1d), 2: (F.conv2d, TF.conv2d), 3: (F.conv3d, TF.conv3d)}
TRANSPOSE = {1: (F.conv_transpose1d, TF.conv_transpose1d), 2: (F.conv_transpose2d, TF.conv_transpose2d),
             3: (F.conv_transpose3d, TF.conv_transpose3d)}
SIZE = {1: 9, 2: 7, 3: 5}

# (stride, padding, dilation, groups, kernel): strided, padded, dilated, grouped, depthwise, mixed per dim
CASES = [
    (1, 0, 1, 1, 3),
    (2, 1, 1, 1, 3),
    (1, 2, 2, 1, 3),
    (3, 1, 1, 2, 2),
    (1, 1, 1, 4, 3),
    (2, 0, 2, 2, 2),
]


def _conv_inputs(rng, nd, stride, padding, dilation, groups, kernel, dtype, batch=2, cin=4, cout=8):
    x = random(rng, (batch, cin) + (SIZE[nd],) * nd, dtype)
    w = random(rng, (cout, cin // groups) + (kernel,) * nd, dtype)
    b = random(rng, (cout,), dtype)
    return x, w, b


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_matches_torch(device, rng, nd, dtype):
    ours, theirs = CONV[nd]
    for stride, padding, dilation, groups, kernel in CASES:
        if nd == 3 and kernel == 3 and dilation == 2 and padding == 2:
            continue  # needs a larger volume than the 3-d test keeps
        x, w, b = _conv_inputs(rng, nd, stride, padding, dilation, groups, kernel, dtype)
        kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        check_op(lambda x, w, b: ours(x, w, b, **kw), lambda x, w, b: theirs(x, w, b, **kw), [x, w, b], device,
                 grads=(0, 1, 2), rng=rng)


def test_conv_per_dim_params(device, rng):
    x = random(rng, (2, 3, 8, 7))
    w = random(rng, (4, 3, 3, 2))
    kw = dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))
    check_op(lambda x, w: F.conv2d(x, w, **kw), lambda x, w: TF.conv2d(x, w, **kw), [x, w], device, grads=(0, 1))


def test_gradients_of_one_operand(device, rng):
    # Rules skip the gradients of constant operands; the tracked one must still be right.
    x, w, wt = random(rng, (2, 3, 6, 6)), random(rng, (4, 3, 3, 3)), random(rng, (3, 4, 3, 3))
    for grads in [(0,), (1,)]:
        check_op(lambda x, w: F.conv2d(x, w, stride=2), lambda x, w: TF.conv2d(x, w, stride=2), [x, w], device,
                 grads=grads, rng=rng)
        check_op(lambda x, w: F.conv_transpose2d(x, w, stride=2), lambda x, w: TF.conv_transpose2d(x, w, stride=2),
                 [x, wt], device, grads=grads, rng=rng)


@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("kernel", [3, 4])
def test_conv_string_padding(device, rng, padding, kernel):
    x = random(rng, (2, 2, 9, 8))
    w = random(rng, (3, 2, kernel, kernel - 1))
    check_op(lambda x, w: F.conv2d(x, w, padding=padding, dilation=(1, 2)),
             lambda x, w: TF.conv2d(x, w, padding=padding, dilation=(1, 2)), [x, w], device, grads=(0, 1))


def test_large_batches_go_in_slices(device, rng, monkeypatch):
    # A tiny column budget makes every sample its own slice: results and gradients must not change.
    from ember.ops import spatial
    monkeypatch.setattr(spatial, "COLUMN_BUDGET", 50)
    x, w, b = random(rng, (5, 4, 6, 6)), random(rng, (6, 2, 3, 3)), random(rng, (6,))
    kw = dict(groups=2, stride=2)
    check_op(lambda x, w, b: F.conv2d(x, w, b, **kw), lambda x, w, b: TF.conv2d(x, w, b, **kw), [x, w, b], device,
             grads=(0, 1, 2), rng=rng)
    wt = random(rng, (4, 3, 3, 3))
    check_op(lambda x, w: F.conv_transpose2d(x, w, stride=2, groups=2),
             lambda x, w: TF.conv_transpose2d(x, w, stride=2, groups=2), [x, wt], device, grads=(0, 1), rng=rng)


def test_conv_unbatched_and_empty_batch(device, rng):
    w = random(rng, (3, 2, 3))
    b = random(rng, (3,))
    check_op(F.conv1d, TF.conv1d, [random(rng, (2, 6)), w, b], device, grads=(0, 1, 2))
    check_op(F.conv1d, TF.conv1d, [random(rng, (0, 2, 6)), w, b], device, grads=(0, 1, 2))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_transpose_matches_torch(device, rng, nd, dtype):
    ours, theirs = TRANSPOSE[nd]
    # (stride, padding, output_padding, dilation, groups, kernel)
    cases = [(1, 0, 0, 1, 1, 3), (2, 1, 1, 1, 1, 3), (3, 1, 2, 1, 2, 2), (2, 0, 1, 2, 2, 3), (1, 1, 0, 2, 4, 2)]
    for stride, padding, output_padding, dilation, groups, kernel in cases:
        x = random(rng, (2, 4) + (4,) * nd, dtype)
        w = random(rng, (4, 6 // groups if 6 % groups == 0 else 2) + (kernel,) * nd, dtype)
        b = random(rng, (w.shape[1] * groups,), dtype)
        kw = dict(stride=stride, padding=padding, output_padding=output_padding, dilation=dilation, groups=groups)
        check_op(lambda x, w, b: ours(x, w, b, **kw), lambda x, w, b: theirs(x, w, b, **kw), [x, w, b], device,
                 grads=(0, 1, 2), rng=rng)


def test_conv_transpose_unbatched_and_empty_batch(device, rng):
    w = random(rng, (2, 3, 2, 2))
    for x in (random(rng, (2, 3, 4)), random(rng, (0, 2, 3, 4))):
        check_op(lambda x, w: F.conv_transpose2d(x, w, stride=2), lambda x, w: TF.conv_transpose2d(x, w, stride=2),
                 [x, w], device, grads=(0, 1))


def _bind(name: str, *inputs, **params):
    from ember.tensor import bind
    from ember.ops import registry
    return bind(registry[name], inputs, params)


def test_weight_gradient_is_differentiable(device, rng):
    # conv_weight_grad's own rule (conv_transpose for x, conv for the output gradient) against torch's
    # double backward: d/dx and d/dg of <dL/dw(x, g), c>.
    x, g, c = random(rng, (2, 2, 7, 7)), random(rng, (2, 3, 4, 4)), random(rng, (3, 2, 3, 3))
    params = dict(kernel=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1), groups=1)

    def torch_weight_grad(x, g):
        w = torch.zeros(3, 2, 3, 3, dtype=x.dtype, requires_grad=True)
        (dw,) = torch.autograd.grad(TF.conv2d(x, w, stride=2, padding=1), w, grad_outputs=g, create_graph=True)
        return dw

    check_op(lambda x, g: _bind("conv_weight_grad", x, g, **params) * ember.tensor(c, device=device),
             lambda x, g: torch_weight_grad(x, g) * torch.from_numpy(c), [x, g], device, grads=(0, 1), rng=rng)


def test_conv_transpose_negative_output_padding_crops(device, rng):
    # Gradient rules (avg_pool's with ceil_mode) use a negative output_padding to crop the output's end.
    x, w = random(rng, (2, 2, 4, 4)), random(rng, (2, 3, 3, 3))
    params = dict(stride=(2, 2), padding=(1, 1), output_padding=(-1, 0), dilation=(1, 1), groups=1)
    check_op(lambda x, w: _bind("conv_transpose", x, w, **params),
             lambda x, w: TF.conv_transpose2d(x, w, stride=2, padding=1)[:, :, :-1, :], [x, w], device, grads=(0, 1),
             rng=rng)


def test_conv_errors():
    x = ember.ones(2, 3, 8, 8)
    with pytest.raises(ember.ShapeError, match="conv2d: input of shape .* has 3 channels .* expects 4"):
        F.conv2d(x, ember.ones(5, 4, 3, 3))
    with pytest.raises(ember.ShapeError, match="groups=2 must divide"):
        F.conv2d(x, ember.ones(4, 3, 3, 3), groups=2)
    with pytest.raises(ember.ShapeError, match="smaller than the kernel's extent"):
        F.conv2d(x, ember.ones(4, 3, 5, 5), dilation=2)
    with pytest.raises(ember.ShapeError, match="weight of shape"):
        F.conv2d(x, ember.ones(4, 3, 3))
    with pytest.raises(ember.ShapeError, match="neither"):
        F.conv2d(ember.ones(8, 8), ember.ones(4, 3, 3, 3))
    with pytest.raises(ember.ShapeError, match="strided"):
        F.conv2d(x, ember.ones(4, 3, 3, 3), stride=2, padding="same")
    with pytest.raises(ember.ShapeError, match="bias of shape"):
        F.conv2d(x, ember.ones(4, 3, 3, 3), ember.ones(3))
    with pytest.raises(ember.ShapeError, match="stride must be at least 1"):
        F.conv2d(x, ember.ones(4, 3, 3, 3), stride=0)
    with pytest.raises(ember.DTypeError, match="share a dtype"):
        F.conv2d(x, ember.ones(4, 3, 3, 3, dtype="f64"))
    with pytest.raises(ember.DTypeError, match="floating-point"):
        F.conv2d(ember.ones(2, 3, 8, 8, dtype="i64"), ember.ones(4, 3, 3, 3, dtype="i64"))
    with pytest.raises(ember.ShapeError, match="output_padding .* must be smaller"):
        F.conv_transpose2d(x, ember.ones(3, 2, 3, 3), stride=2, output_padding=2)
    with pytest.raises(ember.ShapeError, match="conv_transpose.*expects 4"):
        F.conv_transpose2d(x, ember.ones(4, 2, 3, 3))


@pytest.mark.parametrize("dtype, torch_dtype", [("f16", torch.float16), ("bf16", torch.bfloat16)])
def test_half_precision_conv(device, rng, dtype, torch_dtype):
    # Half inputs accumulate in f32 and round once, like PyTorch's CPU kernels: equal within a couple of ulps
    # of the output's scale.
    from tolerances import forward
    x, w = random(rng, (2, 4, 7, 7), "f32"), random(rng, (4, 6, 3, 3), "f32")
    rtol, _ = forward(dtype)
    pairs = [(F.conv2d, TF.conv2d, w.transpose(1, 0, 2, 3)), (F.conv_transpose2d, TF.conv_transpose2d, w)]
    for ours, theirs, weight in pairs:
        weight = np.ascontiguousarray(weight)
        got = ours(ember.tensor(x, device=device).cast(dtype), ember.tensor(weight, device=device).cast(dtype),
                   padding=1, stride=2)
        want = theirs(torch.from_numpy(x).to(torch_dtype), torch.from_numpy(weight).to(torch_dtype), padding=1,
                      stride=2).float().numpy()
        assert got.dtype.name == dtype
        np.testing.assert_allclose(np.asarray(got.numpy(), np.float64), want, rtol=rtol,
                                   atol=rtol * np.abs(want).max())
