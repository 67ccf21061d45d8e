"""The shared test problem: a 2-layer MLP regression, in ember and in PyTorch with the same weights.

ember's `Linear` stores its weight as PyTorch's does, (out, in), so the copies and the comparisons take
the tensors as they are. Everything is f64 so trajectories agree tightly.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

import ember
from ember.nn import Linear, Module

DEVICE = ember.Device.cpu().autodiff()
NAMES = ("l1.weight", "l1.bias", "l2.weight", "l2.bias")


class MLP(Module):
    """`l2(tanh(l1(x)))`, 4 -> 8 -> 2."""

    def __init__(self) -> None:
        self.l1 = Linear(4, 8, device=DEVICE, dtype=ember.f64)
        self.l2 = Linear(8, 2, device=DEVICE, dtype=ember.f64)

    def forward(self, x):
        return self.l2(self.l1(x).tanh())


def make_pair(seed: int = 0) -> tuple[MLP, torch.nn.Module, dict[str, torch.Tensor]]:
    """An ember MLP, a PyTorch MLP with the same weights, and the PyTorch params by ember name."""
    rng = np.random.default_rng(seed)
    model = MLP()
    torch_model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).double()
    named = {"l1.weight": torch_model[0].weight, "l1.bias": torch_model[0].bias,
             "l2.weight": torch_model[2].weight, "l2.bias": torch_model[2].bias}
    for name, p in model.named_parameters():
        value = rng.normal(size=p.shape) * 0.7
        p.set(ember.from_numpy(value, DEVICE.inner))
        with torch.no_grad():
            named[name].copy_(torch.from_numpy(value))
    return model, torch_model, named


def batch(seed: int = 1, n: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    return x, np.stack([np.sin(x[:, 0] + x[:, 1]), x[:, 2] * x[:, 3]], axis=1)


def ember_loss_and_grads(model: MLP, x: np.ndarray, y: np.ndarray):
    """The mean squared error on (x, y) and its `Gradients`."""
    out = model(ember.from_numpy(x, DEVICE.inner))
    loss = ((out - ember.from_numpy(y, DEVICE.inner)) ** 2).mean()
    return loss, loss.backward()


def ember_grads(model: MLP, x: np.ndarray, y: np.ndarray):
    """The `Gradients` of the mean squared error on (x, y)."""
    return ember_loss_and_grads(model, x, y)[1]


def torch_backward(torch_model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> None:
    """Accumulate the gradient of the same loss into PyTorch's `.grad`."""
    out = torch_model(torch.from_numpy(x))
    ((out - torch.from_numpy(y)) ** 2).mean().backward()


def assert_same(model: MLP, named: dict[str, torch.Tensor], step: int, rtol: float = 1e-9, atol: float = 1e-11) -> None:
    for name, p in model.named_parameters():
        np.testing.assert_allclose(p.numpy(), named[name].detach().numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"{name} after step {step}")


def compare_with_torch(make_ember: Callable, make_torch: Callable, steps: int = 50, seed: int = 0,
                       rtol: float = 1e-9, atol: float = 1e-11) -> MLP:
    """Train both copies `steps` steps (a new batch each step) and compare every parameter after each.

    `make_ember(model)` builds the ember optimizer; `make_torch(named)` the PyTorch one from the
    PyTorch parameters keyed by ember name.
    """
    model, torch_model, named = make_pair(seed)
    opt, torch_opt = make_ember(model), make_torch(named)
    for step in range(steps):
        x, y = batch(seed=100 + step)
        opt.step(ember_grads(model, x, y))
        torch_opt.zero_grad()
        torch_backward(torch_model, x, y)
        torch_opt.step()
        assert_same(model, named, step, rtol, atol)
    return model
