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


def load_from_torch(module, torch_module):
    """Copy a torch module's state into an ember module by name and layout as they are (through
    `load_state_dict`, strict); moves the module to the autodiff device. Returns the module."""
    state = {}
    for name, value in torch_module.state_dict().items():
        array = value.detach().numpy()
        state[name] = ember.tensor(array, device=DEVICE.inner)
    report = module.load_state_dict(state)
    assert report.ok, report
    return module.to(DEVICE)


def compare_module(module, torch_module, inputs: list, rng: np.random.Generator, grad_inputs: bool = True,
                   rtol: float = 1e-9, atol: float = 1e-11):
    """Run both modules on `inputs`; compare outputs, input gradients and every parameter's gradient
    (matched by name, in the same layout). Returns the ember output."""
    torch_module.zero_grad()  # torch accumulates .grad across calls
    e_in = [to_ember(a, grad_inputs and a.dtype.kind == "f") for a in inputs]
    t_in = [to_torch(a, grad_inputs and a.dtype.kind == "f") for a in inputs]
    e_out, t_out = module(*e_in), torch_module(*t_in)
    assert_close(e_out, t_out, rtol, atol)
    cot = rng.standard_normal(tuple(t_out.shape))
    grads = (e_out * to_ember(cot)).sum().backward()
    (t_out * torch.tensor(cot, dtype=t_out.dtype)).sum().backward()
    if grad_inputs:
        for i, (e, t) in enumerate(zip(e_in, t_in)):
            if t.requires_grad:
                assert_close(e.grad(grads), t.grad, rtol, atol, what=f"gradient of input {i}")
    t_params = dict(torch_module.named_parameters())
    names = [n for n, _ in module.named_parameters()]
    assert sorted(names) == sorted(t_params), (names, list(t_params))
    for name, p in module.named_parameters():
        assert_close(p.grad(grads), t_params[name].grad, rtol, atol, what=f"gradient of {name}")
    return e_out
