"""Activation modules against torch.nn: outputs and input gradients on random f64 inputs (kinks avoided),
PReLU's learned slopes, SwiGLU against the same formula in torch with the same weights, reprs and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember import nn
from ember.errors import ShapeError

from .compare import DEVICE, compare, compare_module, load_from_torch

CASES = [
    (nn.ReLU(), torch.nn.ReLU()),
    (nn.LeakyReLU(0.2), torch.nn.LeakyReLU(0.2)),
    (nn.ELU(alpha=0.7), torch.nn.ELU(alpha=0.7)),
    (nn.SELU(), torch.nn.SELU()),
    (nn.GELU(), torch.nn.GELU()),
    (nn.GELU("tanh"), torch.nn.GELU("tanh")),
    (nn.SiLU(), torch.nn.SiLU()),
    (nn.Mish(), torch.nn.Mish()),
    (nn.Sigmoid(), torch.nn.Sigmoid()),
    (nn.Tanh(), torch.nn.Tanh()),
    (nn.Softplus(), torch.nn.Softplus()),
    (nn.Softplus(beta=2.0, threshold=3.0), torch.nn.Softplus(beta=2.0, threshold=3.0)),
    (nn.Softsign(), torch.nn.Softsign()),
    (nn.HardSigmoid(), torch.nn.Hardsigmoid()),
    (nn.HardSwish(), torch.nn.Hardswish()),
    (nn.Softmax(dim=1), torch.nn.Softmax(dim=1)),
    (nn.LogSoftmax(dim=0), torch.nn.LogSoftmax(dim=0)),
    (nn.GLU(), torch.nn.GLU()),
    (nn.GLU(dim=1), torch.nn.GLU(dim=1)),
]


def _away_from_kinks(rng, shape):
    x = rng.uniform(-4, 4, shape)
    # ReLU-like kinks at 0 and the hard functions' corners at +-3: keep inputs clear of them.
    for kink in (0.0, 3.0, -3.0):
        near = np.abs(x - kink) < 0.05
        x[near] += 0.1
    return x


@pytest.mark.parametrize("ours, theirs", CASES, ids=[repr(c[0]) for c in CASES])
def test_against_torch(ours, theirs, rng):
    # PyTorch's hard-sigmoid kernels use the f32 constant 1.0f / 6.0f even in f64.
    rtol = 1e-7 if isinstance(ours, (nn.HardSigmoid, nn.HardSwish)) else 1e-9
    compare(ours, theirs, [_away_from_kinks(rng, (3, 4, 2))], grad=[0], rng=rng, rtol=rtol)


def test_options_show_in_repr_and_are_checked():
    assert repr(nn.LeakyReLU(0.2)) == "LeakyReLU(negative_slope=0.2, params=0)"
    assert repr(nn.Softmax(dim=1)) == "Softmax(dim=1, params=0)"
    assert repr(nn.ReLU()) == "ReLU(params=0)"
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("fast")(ember.zeros(2))
    with pytest.raises(ShapeError, match="even size"):
        nn.GLU()(ember.zeros(2, 3))


@pytest.mark.parametrize("num, shape", [(1, (3, 4)), (4, (2, 4, 3)), (3, (5, 3)), (1, (3,)), (1, ())])
def test_prelu(num, shape, rng):
    tm = torch.nn.PReLU(num, init=0.3, dtype=torch.float64)
    with torch.no_grad():
        tm.weight.copy_(torch.tensor(rng.uniform(0.05, 0.5, num)))
    em = load_from_torch(nn.PReLU(num, dtype="f64"), tm)
    compare_module(em, tm, [_away_from_kinks(rng, shape)], rng)


def test_prelu_init_and_errors():
    p = nn.PReLU(3, init=0.1)
    np.testing.assert_allclose(p.weight.numpy(), [0.1] * 3, rtol=1e-6)
    assert repr(p) == "PReLU(num_parameters=3, params=3)"
    with pytest.raises(ShapeError, match="3 slopes need 3 channels in dim 1"):
        p(ember.zeros(2, 4))
    with pytest.raises(ShapeError, match="3 slopes need 3 channels in dim 1"):
        p(ember.zeros(3))


class TorchSwiGLU(torch.nn.Module):
    """The documented formula in torch: w3(silu(w1 x) * w2 x), Linear weights in torch's layout."""

    def __init__(self, d_in, d_hidden, d_out, bias):
        super().__init__()
        self.w1 = torch.nn.Linear(d_in, d_hidden, bias=bias, dtype=torch.float64)
        self.w2 = torch.nn.Linear(d_in, d_hidden, bias=bias, dtype=torch.float64)
        self.w3 = torch.nn.Linear(d_hidden, d_out, bias=bias, dtype=torch.float64)

    def forward(self, x):
        return self.w3(torch.nn.functional.silu(self.w1(x)) * self.w2(x))


@pytest.mark.parametrize("d_output, bias", [(None, False), (5, True)])
def test_swiglu(d_output, bias, rng):
    tm = TorchSwiGLU(4, 6, d_output or 4, bias)
    em = nn.SwiGLU(4, 6, d_output, bias=bias, dtype="f64")
    load_from_torch(em, tm)
    out = compare_module(em, tm, [rng.standard_normal((2, 3, 4))], rng)
    assert out.shape == (2, 3, d_output or 4)
    assert em.num_params() == 4 * 6 * 2 + 6 * (d_output or 4) + (2 * 6 + (d_output or 4) if bias else 0)


def test_activation_modules_have_no_state_and_work_on_autodiff():
    relu = nn.ReLU().to(DEVICE)
    assert relu.state_dict() == {} and relu.num_params() == 0
    x = ember.tensor([-1.0, 2.0], device=DEVICE).require_grad()
    assert x.grad(relu(x).sum().backward()).tolist() == [0.0, 1.0]
