"""Run the same computation in ember and in PyTorch and compare outputs and gradients.

Inputs are NumPy arrays handed to both libraries (f64 for tight tolerances). Gradients are compared for
the argument positions in `grad`; a non-scalar output is first contracted with a random tensor so every
output element carries a distinct cotangent.

Example:
    >>> compare(ember_fn, torch_fn, [x, t], grad=[0], rng=rng)
"""

from __future__ import annotations

import numpy as np
import torch

import ember

DEVICE = ember.Device.cpu().autodiff()


def to_ember(value, requires_grad: bool = False):
    """A NumPy array as an ember tensor on the autodiff device (other values pass through)."""
    if not isinstance(value, np.ndarray):
        return value
    t = ember.tensor(value, device=DEVICE)
    return t.require_grad() if requires_grad else t


def to_torch(value, requires_grad: bool = False):
    """A NumPy array as a torch tensor (other values pass through)."""
    if not isinstance(value, np.ndarray):
        return value
    return torch.tensor(value, requires_grad=requires_grad)


def assert_close(e, t, rtol: float = 1e-9, atol: float = 1e-11, what: str = "output") -> None:
    """An ember tensor equals a torch tensor in shape and values."""
    expected = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    assert tuple(e.shape) == tuple(expected.shape), f"{what}: shape {e.shape} != {expected.shape}"
    np.testing.assert_allclose(np.asarray(e.numpy(), np.float64), expected, rtol=rtol, atol=atol, err_msg=what)


def compare(ember_fn, torch_fn, args: list, grad=(), rng: np.random.Generator | None = None,
            rtol: float = 1e-9, atol: float = 1e-11):
    """Call both functions on `args`; check the output and the gradients of `args[i]` for i in `grad`.

    Returns the ember output.
    """
    e_args = [to_ember(a, i in grad) for i, a in enumerate(args)]
    t_args = [to_torch(a, i in grad) for i, a in enumerate(args)]
    e_out, t_out = ember_fn(*e_args), torch_fn(*t_args)
    assert_close(e_out, t_out, rtol, atol)
    if grad:
        rng = rng or np.random.default_rng(0)
        cot = rng.standard_normal(tuple(t_out.shape))
        grads = (e_out * to_ember(cot)).sum().backward()
        (t_out * torch.tensor(cot, dtype=t_out.dtype)).sum().backward()
        for i in grad:
            e_grad = e_args[i].grad(grads)
            assert e_grad is not None, f"no gradient for argument {i}"
            assert_close(e_grad, t_args[i].grad, rtol, atol, what=f"gradient of argument {i}")
    return e_out
