"""Run an ember module and its PyTorch twin (same weights, copied) and compare outputs and gradients.

A *layout* maps each ember parameter name to a function of the torch parameters (by name) giving that
parameter, e.g. `lambda t: t["in_proj_weight"][:8]` for an attention's query weight. Layout functions
are linear (slices, concatenations), so applied to torch's gradients they give the gradients ember
should have. Everything runs in f64 so tolerances stay tight.

Example:
    >>> check(module, torch_module, {"weight": lambda t: t["weight"], ...}, [x], lambda m, x: m(x))
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

import ember

DEVICE = ember.Device.cpu().autodiff()
Layout = dict[str, Callable[[dict], torch.Tensor]]


def copy_weights(module: ember.nn.Module, torch_module: torch.nn.Module, layout: Layout) -> None:
    """Set every parameter of `module` from `torch_module` through `layout` (all must be covered)."""
    params = dict(module.named_parameters())
    assert set(params) == set(layout), f"layout covers {sorted(layout)}, module has {sorted(params)}"
    source = dict(torch_module.named_parameters())
    for name, fn in layout.items():
        params[name].set(ember.tensor(fn(source).detach().numpy(), device=DEVICE))


def leaves(value) -> list:
    """The tensors of a nested tuple/list output, in order (None skipped)."""
    if isinstance(value, (tuple, list)):
        return [x for item in value for x in leaves(item)]
    return [] if value is None else [value]


def assert_close(e, t, rtol: float, atol: float, what: str) -> None:
    expected = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    assert tuple(e.shape) == tuple(expected.shape), f"{what}: shape {e.shape} != {expected.shape}"
    np.testing.assert_allclose(np.asarray(e.numpy(), np.float64), expected, rtol=rtol, atol=atol, err_msg=what)


def check(module, torch_module, layout: Layout, inputs: list, ember_call: Callable, torch_call: Callable,
          grad_inputs=(), rtol: float = 1e-9, atol: float = 1e-10, seed: int = 0) -> list:
    """Copy weights, run both, and compare every output, the gradients of `inputs[i]` for i in
    `grad_inputs`, and the gradient of every parameter. Inputs are NumPy arrays (or other values passed
    through as they are). Returns the ember outputs as a flat list.
    """
    torch_module = torch_module.double()
    module.to(DEVICE)
    copy_weights(module, torch_module, layout)
    e_in = [_ember(x, i in grad_inputs) for i, x in enumerate(inputs)]
    t_in = [_torch(x, i in grad_inputs) for i, x in enumerate(inputs)]
    e_out, t_out = leaves(ember_call(module, *e_in)), leaves(torch_call(torch_module, *t_in))
    assert len(e_out) == len(t_out), f"{len(e_out)} ember outputs, {len(t_out)} torch outputs"
    for i, (e, t) in enumerate(zip(e_out, t_out)):
        assert_close(e, t, rtol, atol, f"output {i}")
    rng = np.random.default_rng(seed)
    cots = [rng.standard_normal(tuple(t.shape)) for t in t_out]
    e_loss = sum(((e * ember.tensor(c, device=DEVICE)).sum() for e, c in zip(e_out, cots)), start=0.0)
    t_loss = sum((t * torch.tensor(c)).sum() for t, c in zip(t_out, cots))
    grads = e_loss.backward()
    t_loss.backward()
    for i in grad_inputs:
        assert_close(e_in[i].grad(grads), t_in[i].grad, rtol, atol, f"gradient of input {i}")
    torch_grads = {n: p.grad if p.grad is not None else torch.zeros_like(p)
                   for n, p in torch_module.named_parameters()}
    for name, param in module.named_parameters():
        g = param.grad(grads)
        expected = layout[name](torch_grads)
        if g is None:
            assert not expected.abs().max() > 0, f"no gradient for {name}"
            continue
        assert_close(g, expected, rtol, atol, f"gradient of {name}")
    return e_out


def mha_layout(e: int, separate: bool = False) -> dict:
    """ember MultiHeadAttention names -> torch nn.MultiheadAttention parameters (rows of the packed ones)."""
    if separate:
        w = {"query": lambda t: t["q_proj_weight"], "key": lambda t: t["k_proj_weight"],
             "value": lambda t: t["v_proj_weight"]}
    else:
        w = {name: (lambda t, i=i: t["in_proj_weight"][i * e:(i + 1) * e])
             for i, name in enumerate(("query", "key", "value"))}
    layout = {f"{name}.weight": fn for name, fn in w.items()}
    layout.update({f"{name}.bias": (lambda t, i=i: t["in_proj_bias"][i * e:(i + 1) * e])
                   for i, name in enumerate(("query", "key", "value"))})
    layout["output.weight"] = lambda t: t["out_proj.weight"]
    layout["output.bias"] = lambda t: t["out_proj.bias"]
    return layout


def _ember(x, requires_grad: bool):
    if not isinstance(x, np.ndarray):
        return x
    t = ember.tensor(x, device=DEVICE)
    return t.require_grad() if requires_grad else t


def _torch(x, requires_grad: bool):
    if not isinstance(x, np.ndarray):
        return x
    return torch.tensor(x, requires_grad=requires_grad)
