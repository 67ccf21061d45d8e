"""Activations (ember.activation) against torch.nn.functional: forward over float dtypes and views,
gradients against autograd."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember
from ember import activation as A
from conformance.oracle import FLOATS, LAYOUTS, case, check, check_grad, leaf, make, sample, tensors, to_torch

ACTIVATIONS = {
    "relu": (A.relu, F.relu),
    "leaky_relu": (A.leaky_relu, F.leaky_relu),
    "leaky_relu_slope": (lambda x: A.leaky_relu(x, 0.2), lambda x: F.leaky_relu(x, 0.2)),
    "elu": (A.elu, F.elu),
    "elu_alpha": (lambda x: A.elu(x, 0.5), lambda x: F.elu(x, 0.5)),
    "selu": (A.selu, F.selu),
    "gelu": (A.gelu, F.gelu),
    "gelu_tanh": (lambda x: A.gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh")),
    "silu": (A.silu, F.silu),
    "mish": (A.mish, F.mish),
    "sigmoid": (A.sigmoid, torch.sigmoid),
    "hard_sigmoid": (A.hard_sigmoid, F.hardsigmoid),
    "hard_swish": (A.hard_swish, F.hardswish),
    "tanh": (A.tanh, torch.tanh),
    "softplus": (A.softplus, F.softplus),
    "softplus_beta": (lambda x: A.softplus(x, beta=2.0, threshold=3.0), lambda x: F.softplus(x, beta=2.0, threshold=3.0)),
    "softsign": (A.softsign, F.softsign),
    "softmax": (lambda x: A.softmax(x, dim=-1), lambda x: F.softmax(x, dim=-1)),
    "softmax_dim0": (lambda x: A.softmax(x, dim=0), lambda x: F.softmax(x, dim=0)),
    "log_softmax": (lambda x: A.log_softmax(x, dim=1), lambda x: F.log_softmax(x, dim=1)),
    "glu": (A.glu, F.glu),
    "glu_dim0": (lambda x: A.glu(x, 0), lambda x: F.glu(x, 0)),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation(name, dtype, device, rng):
    fn, tfn = ACTIVATIONS[name]
    tol = {"f16": (4e-3, 2e-3), "bf16": (3e-2, 2e-2)}.get(dtype)
    for shape in [(4, 6), (2, 3, 4)] + ([(0, 4)] if "glu" not in name else []):
        for layout in LAYOUTS:
            with case(shape=shape, layout=layout):
                e, t = make(shape, dtype, rng, device, layout, -6, 6)
                check(fn(e), tfn(t), tol=tol)
    if "glu" not in name and "softmax" not in name:
        e, t = tensors(sample((), dtype, rng, -6, 6), device)
        check(fn(e), tfn(t), tol=tol)


def test_methods_and_int_softmax(device, rng):
    e, t = tensors(sample((3, 4), "f32", rng), device)
    check(e.relu(), t.relu())
    check(e.softmax(1), t.softmax(1))
    check(e.log_softmax(0), t.log_softmax(0))
    ei, ti = tensors(sample((3, 4), "i64", rng), device)
    check(A.softmax(ei), F.softmax(ti.float(), dim=-1))  # torch refuses int softmax; ember uses the default float
    big = ember.tensor([[1000.0, 0.0, -1000.0]], device=device)
    check(A.softmax(big), F.softmax(torch.tensor([[1000.0, 0.0, -1000.0]]), dim=-1))
    check(A.log_softmax(big), F.log_softmax(torch.tensor([[1000.0, 0.0, -1000.0]]), dim=-1))


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_grad(name, dtype, device, rng):
    fn, tfn = ACTIVATIONS[name]
    x = sample((4, 6), dtype, rng, -6, 6)
    e, t = leaf(x, device)
    ev, tv = fn(e[:, ::-1]), tfn(t.flip(1))
    seed = sample(tuple(tv.shape), dtype, rng)
    grads = ev.backward(ember.tensor(seed, device=device))
    tv.backward(to_torch(seed))
    if name == "hard_sigmoid" and dtype == "f64":
        # torch's f64 hardsigmoid backward multiplies by 1/6 rounded to f32 (relative error 3e-8)
        check(e.grad(grads), t.grad, tol=(1e-7, 1e-10))
    else:
        check_grad(e.grad(grads), t.grad)


@pytest.mark.parametrize("name", ["relu", "leaky_relu", "elu", "hard_sigmoid", "hard_swish"])
def test_activation_grad_at_kinks(name, device):
    """Gradients exactly at the kinks (0, +-3) follow PyTorch's conventions."""
    fn, tfn = ACTIVATIONS[name]
    values = [-3.0, 0.0, 3.0, -1.0, 1.0]
    e, t = leaf(torch.tensor(values, dtype=torch.float32).numpy(), device)
    grads = fn(e).sum().backward()
    tfn(t).sum().backward()
    with case(values=values):
        check_grad(e.grad(grads), t.grad)
