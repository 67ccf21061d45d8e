"""`unfold` and `fold` against PyTorch's F.unfold/F.fold: outputs and gradients over kernels, strides,
paddings and dilations, unbatched and empty inputs, and the shape errors."""

from __future__ import annotations

import pytest
import torch

import ember
from ember.nn import functional as F
from ops.torch_check import FLOAT_DTYPES, check_op, random

TF = torch.nn.functional
# (kernel, dilation, padding, stride)
CASES = [(2, 1, 0, 1), (3, 1, 1, 2), ((2, 3), (2, 1), (1, 0), (1, 2)), (3, 2, 2, 3)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_unfold_matches_torch(device, rng, dtype):
    for kernel, dilation, padding, stride in CASES:
        kw = dict(dilation=dilation, padding=padding, stride=stride)
        x = random(rng, (2, 3, 7, 8), dtype)
        check_op(lambda x: F.unfold(x, kernel, **kw), lambda x: TF.unfold(x, kernel, **kw), [x], device, rng=rng)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_fold_matches_torch(device, rng, dtype):
    for kernel, dilation, padding, stride in CASES:
        kw = dict(dilation=dilation, padding=padding, stride=stride)
        windows = TF.unfold(torch.zeros(1, 1, 7, 8), kernel, **kw).shape
        cols = random(rng, (2, 2 * windows[1], windows[2]), dtype)
        check_op(lambda c: F.fold(c, (7, 8), kernel, **kw), lambda c: TF.fold(c, (7, 8), kernel, **kw), [cols], device,
                 rng=rng)


def test_unfold_fold_unbatched_and_empty(device, rng):
    check_op(lambda x: F.unfold(x, 2), lambda x: TF.unfold(x, 2), [random(rng, (3, 4, 5))], device)
    check_op(lambda x: F.unfold(x, 2), lambda x: TF.unfold(x, 2), [random(rng, (0, 3, 4, 5))], device)
    check_op(lambda c: F.fold(c, 4, 2), lambda c: TF.fold(c, 4, 2), [random(rng, (8, 9))], device)


def test_unfold_fold_errors():
    with pytest.raises(ember.ShapeError, match="unfold: input of shape .* neither"):
        F.unfold(ember.ones(2, 3, 4, 4, 4), 2)
    with pytest.raises(ember.ShapeError, match="smaller than the kernel's extent"):
        F.unfold(ember.ones(1, 1, 3, 3), 4)
    with pytest.raises(ember.ShapeError, match="multiple of 4 and dim 2 must be 9"):
        F.fold(ember.ones(1, 4, 8), (4, 4), 2)
    with pytest.raises(ember.ShapeError, match="multiple of 4"):
        F.fold(ember.ones(1, 6, 9), (4, 4), 2)
