"""`grid_sample` and `affine_grid` (ember/nn/functional/sampling.py) against PyTorch: every mode, padding mode
and align_corners on 4-d and 5-d inputs of odd shapes, f32 and f64, with the gradients w.r.t. the input,
the grid and theta. Cases are grouped in a few tests so the suite stays cheap."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import ember
from ember.nn import functional as F
from tolerances import grad as grad_tolerance
from conformance.oracle import case, check, check_grad, leaf, sample

# (input shape, grid shape): odd sizes, a batch of 2, 5-d with a depth; the last one samples no points
# A source coordinate is computed in a few roundings (and may fuse into FMAs), and an ulp of it moves
# the output by the image's slope times that ulp: f32 outputs get the gradient tolerance.
TOL = {"f32": grad_tolerance("f32"), "f64": None}
SHAPES = [((2, 3, 5, 7), (2, 3, 4, 2)), ((1, 2, 3, 4, 5), (1, 2, 3, 2, 3)), ((2, 1, 3, 2), (2, 0, 3, 2))]


def _grad_seed(shape, dtype, rng, device):
    s = sample(shape, dtype, rng)
    return ember.tensor(s, device=device.autodiff()), torch.from_numpy(s)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample(mode, device, rng):
    cases = itertools.product(SHAPES, ("zeros", "border", "reflection"), (False, True))
    for i, ((x_shape, g_shape), padding, align) in enumerate(cases):
        dtype = ("f32", "f64")[i % 2]
        with case(x=x_shape, grid=g_shape, padding=padding, align_corners=align, dtype=dtype):
            ex, tx = leaf(sample(x_shape, dtype, rng), device)
            eg, tg = leaf(sample(g_shape, dtype, rng, -1.4, 1.4), device)  # some points fall outside
            ey = F.grid_sample(ex, eg, mode=mode, padding_mode=padding, align_corners=align)
            ty = TF.grid_sample(tx, tg, mode=mode, padding_mode=padding, align_corners=align)
            check(ey, ty, tol=TOL[dtype])
            es, ts = _grad_seed(ty.shape, dtype, rng, device)
            grads = (ey * es).sum().backward()
            (ty * ts).sum().backward()
            check_grad(ex.grad(grads), tx.grad)
            if mode == "bilinear":
                check_grad(eg.grad(grads), tg.grad)
            else:  # the output is piecewise constant in the grid: nothing reaches it (torch: zeros)
                assert eg.grad(grads) is None and not tg.grad.any()


def test_grid_sample_reflection_far_outside(device, rng):
    """Points several widths outside reflect back and forth; a size-1 dim with align_corners maps to 0."""
    for x_shape, align in (((1, 2, 4, 3), False), ((1, 2, 4, 3), True), ((1, 1, 1, 3), True)):
        with case(x=x_shape, align_corners=align):
            ex, tx = leaf(sample(x_shape, "f64", rng), device)
            eg, tg = leaf(sample((1, 5, 3, 2), "f64", rng, -7.0, 7.0), device)
            ey = F.grid_sample(ex, eg, padding_mode="reflection", align_corners=align)
            ty = TF.grid_sample(tx, tg, padding_mode="reflection", align_corners=align)
            check(ey, ty)
            grads = ey.sum().backward()
            ty.sum().backward()
            check_grad(ex.grad(grads), tx.grad)
            check_grad(eg.grad(grads), tg.grad)


@pytest.mark.filterwarnings("ignore:Since version 1.3.0")  # torch notes unit-size grids changed in 1.3
def test_affine_grid(device, rng):
    for i, (size, align) in enumerate(itertools.product([(2, 3, 5, 4), (1, 2, 3, 1, 4), (3, 1, 1, 6)],
                                                        (False, True))):
        dtype = ("f32", "f64")[i % 2]
        nd = len(size) - 2
        with case(size=size, align_corners=align, dtype=dtype):
            e_theta, t_theta = leaf(sample((size[0], nd, nd + 1), dtype, rng), device)
            e_grid = F.affine_grid(e_theta, size, align_corners=align)
            t_grid = TF.affine_grid(t_theta, list(size), align_corners=align)
            check(e_grid, t_grid, tol=TOL[dtype])
            es, ts = _grad_seed(t_grid.shape, dtype, rng, device)
            grads = (e_grid * es).sum().backward()
            (t_grid * ts).sum().backward()
            check_grad(e_theta.grad(grads), t_theta.grad)


def test_identity_transform_reproduces_the_input(rng):
    """affine_grid of the identity, sampled with the same align_corners, reads every pixel back."""
    x = ember.tensor(sample((2, 3, 5, 7), "f64", rng))
    theta = ember.tensor(np.tile(np.eye(2, 3), (2, 1, 1)))
    for align in (False, True):
        y = F.grid_sample(x, F.affine_grid(theta, x.shape, align_corners=align), align_corners=align)
        np.testing.assert_allclose(y.numpy(), x.numpy(), rtol=1e-12, atol=1e-12)


def test_errors_name_the_call():
    x, grid = ember.zeros(1, 2, 3, 3), ember.zeros(1, 2, 2, 2)
    with pytest.raises(ember.ShapeError, match="grid_sample.*unknown mode 'bicubic'"):
        F.grid_sample(x, grid, mode="bicubic")
    with pytest.raises(ember.ShapeError, match="grid_sample.*unknown padding_mode"):
        F.grid_sample(x, grid, padding_mode="wrap")
    with pytest.raises(ember.ShapeError, match=r"grid_sample: grid of shape \(1, 2, 2, 3\)"):
        F.grid_sample(x, ember.zeros(1, 2, 2, 3))
    with pytest.raises(ember.ShapeError, match=r"grid_sample: input must be"):
        F.grid_sample(ember.zeros(2, 3, 3), grid)
    with pytest.raises(ember.DTypeError, match="grid_sample: input and grid"):
        F.grid_sample(x, grid.cast("f64"))
    with pytest.raises(ember.ShapeError, match=r"affine_grid: theta of shape \(1, 2, 3\) for size"):
        F.affine_grid(ember.zeros(1, 2, 3), (1, 1, 2, 2, 2))
    with pytest.raises(ember.ShapeError, match="affine_grid: size must be"):
        F.affine_grid(ember.zeros(1, 2, 3), (1, 2))
