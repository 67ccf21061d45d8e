"""Run one computation in ember and in PyTorch on the same random inputs; compare the outputs and the
gradients of chosen inputs.

Gradients are taken of sum(output * cotangent) with a random cotangent, so every output element carries
a distinct weight. Outputs and gradients are both compared at the gradient tolerances of the dtype (the
module ops sum many products, so even their forward results round more than an elementwise op).

Example:
    >>> check_op(lambda x, w: F.conv2d(x, w), torch.nn.functional.conv2d, [x, w], device, grads=(0, 1))
"""

from __future__ import annotations

import numpy as np
import torch

import ember
from tolerances import grad as grad_tolerance

FLOAT_DTYPES = ("f64", "f32")


def random(rng: np.random.Generator, shape, dtype: str = "f64") -> np.ndarray:
    """Uniform values in [-1, 1) of `dtype` ("f64" or "f32")."""
    return rng.uniform(-1, 1, size=shape).astype(np.float64 if dtype == "f64" else np.float32)


def _close(actual: np.ndarray, expected: np.ndarray, dtype: str, what: str) -> None:
    rtol, atol = grad_tolerance(dtype)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} but torch gives {expected.shape}"
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                               err_msg=what)


def check_op(ember_fn, torch_fn, arrays, device: ember.Device, grads=(0,), rng=None) -> None:
    """`ember_fn` on `device` equals `torch_fn` on the same inputs: output, dtype and gradients.

    `arrays` are NumPy arrays (or other arguments passed through unchanged); `grads` lists the positions
    of the float arrays whose gradients are compared. A tuple output compares its first element as the
    value and the rest exactly (indices).
    """
    rng = rng or np.random.default_rng(0)
    tracked = device.autodiff()
    e_args, t_args = [], []
    for i, a in enumerate(arrays):
        if not isinstance(a, np.ndarray):
            e_args.append(a)
            t_args.append(a)
            continue
        e = ember.tensor(a, device=tracked if i in grads else device)
        t = torch.from_numpy(a.copy())
        if i in grads:
            e = e.require_grad()
            t.requires_grad_(True)
        e_args.append(e)
        t_args.append(t)
    e_out, t_out = ember_fn(*e_args), torch_fn(*t_args)
    if isinstance(t_out, tuple):
        for k, (e_extra, t_extra) in enumerate(zip(e_out[1:], t_out[1:])):
            np.testing.assert_array_equal(e_extra.numpy(), t_extra.numpy(), err_msg=f"output {k + 1}")
        e_out, t_out = e_out[0], t_out[0]
    dtype = {torch.float64: "f64", torch.float32: "f32"}[t_out.dtype]
    assert e_out.dtype.name == dtype, f"dtype {e_out.dtype} but torch gives {dtype}"
    _close(np.asarray(e_out.numpy()), t_out.detach().numpy(), dtype, "output")
    if not grads:
        return
    cot = random(rng, t_out.shape, dtype)
    t_out.backward(torch.from_numpy(cot.copy()))
    gradients = e_out.backward(ember.tensor(cot, device=device))
    for i in grads:
        got = e_args[i].grad(gradients)
        want = t_args[i].grad
        if want is None:
            want = torch.zeros_like(t_args[i])
        assert got is not None, f"ember computed no gradient for input {i}"
        _close(np.asarray(got.numpy()), want.numpy(), dtype, f"gradient of input {i}")
