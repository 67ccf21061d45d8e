"""Pooling (max, average, adaptive; 1-d, 2-d and one 3-d case) against PyTorch: outputs, indices and
input gradients over kernels, strides, paddings, dilations, ceil_mode and the divisor options."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember.nn import functional as F
from ops.torch_check import FLOAT_DTYPES, check_op, random

TF = torch.nn.functional
MAX = {1: (F.max_pool1d, TF.max_pool1d), 2: (F.max_pool2d, TF.max_pool2d), 3: (F.max_pool3d, TF.max_pool3d)}
AVG = {1: (F.avg_pool1d, TF.avg_pool1d), 2: (F.avg_pool2d, TF.avg_pool2d), 3: (F.avg_pool3d, TF.avg_pool3d)}
ADAPTIVE_AVG = {1: (F.adaptive_avg_pool1d, TF.adaptive_avg_pool1d), 2: (F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d)}
ADAPTIVE_MAX = {1: (F.adaptive_max_pool1d, TF.adaptive_max_pool1d), 2: (F.adaptive_max_pool2d, TF.adaptive_max_pool2d)}

# (kernel, stride, padding, dilation, ceil_mode)
MAX_CASES = [(2, None, 0, 1, False), (3, 2, 1, 1, False), (3, 2, 1, 1, True), (2, 3, 1, 2, True), (3, 1, 0, 2, False)]
# (kernel, stride, padding, ceil_mode, count_include_pad)
AVG_CASES = [(2, None, 0, False, True), (3, 2, 1, False, True), (3, 2, 1, True, False), (4, 3, 2, True, True),
             (3, 2, 1, True, True)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("nd", [1, 2])
def test_max_pool_matches_torch(device, rng, nd, dtype):
    ours, theirs = MAX[nd]
    for kernel, stride, padding, dilation, ceil_mode in MAX_CASES:
        x = random(rng, (2, 3) + (9,) * nd, dtype)
        kw = dict(stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode, return_indices=True)
        check_op(lambda x: ours(x, kernel, **kw), lambda x: theirs(x, kernel, **kw), [x], device, rng=rng)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("nd", [1, 2])
def test_avg_pool_matches_torch(device, rng, nd, dtype):
    ours, theirs = AVG[nd]
    for kernel, stride, padding, ceil_mode, include in AVG_CASES:
        x = random(rng, (2, 3) + (10,) * nd, dtype)
        kw = dict(stride=stride, padding=padding, ceil_mode=ceil_mode, count_include_pad=include)
        check_op(lambda x: ours(x, kernel, **kw), lambda x: theirs(x, kernel, **kw), [x], device, rng=rng)


def test_pool_per_dim_params_divisor_and_3d(device, rng):
    x = random(rng, (2, 2, 9, 8))
    kw = dict(stride=(2, 1), padding=(1, 0), ceil_mode=True, divisor_override=3)
    check_op(lambda x: F.avg_pool2d(x, (3, 2), **kw), lambda x: TF.avg_pool2d(x, (3, 2), **kw), [x], device)
    kw = dict(stride=(1, 2), dilation=(2, 1), return_indices=True)
    check_op(lambda x: F.max_pool2d(x, (2, 3), **kw), lambda x: TF.max_pool2d(x, (2, 3), **kw), [x], device)
    v = random(rng, (1, 2, 5, 6, 7))
    check_op(lambda x: F.max_pool3d(x, 2, ceil_mode=True), lambda x: TF.max_pool3d(x, 2, ceil_mode=True), [v], device)
    check_op(lambda x: F.avg_pool3d(x, 3, 2, 1), lambda x: TF.avg_pool3d(x, 3, 2, 1), [v], device)


def test_pool_unbatched_empty_batch_and_ties(device, rng):
    x = random(rng, (3, 8, 8))
    check_op(lambda x: F.max_pool2d(x, 2), lambda x: TF.max_pool2d(x, 2), [x], device)
    check_op(lambda x: F.avg_pool1d(x, 3), lambda x: TF.avg_pool1d(x, 3), [x[0]], device)
    empty = random(rng, (0, 3, 8, 8))
    check_op(lambda x: F.max_pool2d(x, 2), lambda x: TF.max_pool2d(x, 2), [empty], device)
    check_op(lambda x: F.avg_pool2d(x, 2), lambda x: TF.avg_pool2d(x, 2), [empty], device)
    # Equal values (and -inf everywhere) pick the first position, so the gradient lands there.
    ties = np.array([[[1.0, 1.0, 0.0, -np.inf, -np.inf]]])
    check_op(lambda x: F.max_pool1d(x, 2, 2, 1, return_indices=True),
             lambda x: TF.max_pool1d(x, 2, 2, 1, return_indices=True), [ties], device)
    # NaN wins over numbers and propagates to the output (its index is PyTorch's: the last NaN).
    nans = np.array([[[np.nan, 1.0, np.nan, 2.0, 0.5, 3.0]]])
    y, index = F.max_pool1d(ember.tensor(nans, device=device), 3, return_indices=True)
    want, want_index = TF.max_pool1d(torch.from_numpy(nans), 3, return_indices=True)
    np.testing.assert_array_equal(y.numpy(), want.numpy())
    np.testing.assert_array_equal(index.numpy(), want_index.numpy())


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_adaptive_pools_match_torch(device, rng, dtype):
    cases = [((2, 3, 10), 4, 1), ((2, 3, 10), 10, 1), ((2, 3, 7), 3, 1), ((2, 3, 13, 9), (3, 4), 2),
             ((2, 3, 13, 9), (5, None), 2), ((3, 6, 5), (4, 7), 2), ((0, 2, 6, 6), 3, 2)]
    for shape, size, nd in cases:
        x = random(rng, shape, dtype)
        avg = ADAPTIVE_AVG[nd]
        mx = ADAPTIVE_MAX[nd]
        check_op(lambda x: avg[0](x, size), lambda x: avg[1](x, size), [x], device, rng=rng)
        check_op(lambda x: mx[0](x, size, True), lambda x: mx[1](x, size, True), [x], device, rng=rng)


def test_adaptive_max_pool_ties_pick_the_row_major_first(device, rng):
    # Few distinct values make ties within most windows; the winner (and so the gradient) is PyTorch's.
    x = np.round(random(rng, (2, 3, 11, 9)))
    check_op(lambda x: F.adaptive_max_pool2d(x, (4, 5), return_indices=True),
             lambda x: TF.adaptive_max_pool2d(x, (4, 5), return_indices=True), [x], device)


@pytest.mark.parametrize("kernel, stride, padding, dilation, ceil_mode",
                         [(2, 2, 0, 1, False), (2, 3, 1, 2, True), (3, 2, 1, 1, False)])
def test_max_pool_grad_and_its_gradient(device, rng, kernel, stride, padding, dilation, ceil_mode):
    # max_pool's input gradient as a primitive (windows apart, padded, overlapping) and its own rule
    # (a gather at the winners) against torch's double backward: d/dg of <dL/dx(x, g), c>.
    from ember.tensor import bind
    from ember.ops import registry
    x, c = random(rng, (2, 3, 9, 8)), random(rng, (2, 3, 9, 8))
    kw = dict(stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
    g = random(rng, tuple(TF.max_pool2d(torch.from_numpy(x), kernel, **kw).shape))
    params = {k: (v, v) if k != "ceil_mode" else v for k, v in dict(kernel=kernel, **kw).items()}

    def torch_grad(x, g):
        x = x.detach().requires_grad_(True)
        (dx,) = torch.autograd.grad(TF.max_pool2d(x, kernel, **kw), x, grad_outputs=g, create_graph=True)
        return dx * torch.from_numpy(c)

    check_op(lambda x, g: bind(registry["max_pool_grad"], (x, g), params) * ember.tensor(c, device=device),
             torch_grad, [x, g], device, grads=(1,), rng=rng)


def test_max_pool_of_integers(device, rng):
    x = rng.integers(-50, 50, size=(2, 3, 9, 8))
    y, index = F.max_pool2d(ember.tensor(x, device=device), 3, 2, 1, ceil_mode=True, return_indices=True)
    want, want_index = TF.max_pool2d(torch.from_numpy(x), 3, 2, 1, ceil_mode=True, return_indices=True)
    assert y.dtype.name == "i64"
    np.testing.assert_array_equal(y.numpy(), want.numpy())
    np.testing.assert_array_equal(index.numpy(), want_index.numpy())


def test_pool_errors():
    x = ember.ones(1, 2, 6, 6)
    with pytest.raises(ember.ShapeError, match="padding .* at most half of kernel"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(ember.ShapeError, match="smaller than the kernel's extent"):
        F.avg_pool2d(x, 7)
    with pytest.raises(ember.ShapeError, match="max_pool1d: input of shape .* neither"):
        F.max_pool1d(x, 2)
    with pytest.raises(ember.ShapeError, match="kernel_size must be an int or 2 ints"):
        F.max_pool2d(x, (2, 2, 2))
    with pytest.raises(ember.ShapeError, match="divisor_override must be non-zero"):
        F.avg_pool2d(x, 2, divisor_override=0)
    with pytest.raises(ember.DTypeError, match="floating-point"):
        F.avg_pool2d(ember.ones(1, 2, 6, 6, dtype="i64"), 2)
    with pytest.raises(ember.ShapeError, match="output_size must hold positive ints"):
        F.adaptive_avg_pool2d(x, (0, 2))
    with pytest.raises(ember.ShapeError, match="output_size must be an int or 2 sizes"):
        F.adaptive_max_pool2d(x, (1, 2, 3))
