"""Autodiff overhead: forward and backward of a 10-op chain on tiny tensors, where the time is almost all
graph recording and the backward walk rather than arithmetic."""

from __future__ import annotations

import numpy as np

from .frameworks import Frameworks
from .harness import Row, Settings


def chain(x, w):
    """Ten ops every framework spells alike; the result is a scalar to differentiate."""
    h = x * w
    h = h + 1.0
    h = h.tanh()
    h = h * h
    h = h - 0.5
    h = h.exp()
    h = h / 2.0
    h = h.sigmoid()
    h = h * x
    return h.sum()


def autodiff(fw: Frameworks, settings: Settings) -> list[Row]:
    shape = (4, 4)
    rng = np.random.default_rng(0)
    x_host, w_host = rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32)

    def ember_setup():
        x, w = fw.array("ember", x_host, requires_grad=True), fw.array("ember", w_host)
        return lambda: chain(x, w).backward()

    def torch_setup():
        x, w = fw.array("torch", x_host, requires_grad=True), fw.array("torch", w_host)

        def step():
            x.grad = None  # torch accumulates into .grad; each step starts from none, like ember's
            chain(x, w).backward()
            return x.grad
        return step

    def tinygrad_setup():
        x, w = fw.array("tinygrad", x_host), fw.array("tinygrad", w_host)

        def step():
            x.grad = w.grad = None  # tinygrad accumulates into .grad too
            chain(x, w).backward()
            return x.grad  # lazy until `finish` realizes it
        return step

    return fw.compare("autodiff", f"10-op chain fwd+bwd, {shape[0]}x{shape[1]} f32",
                      {"numpy": "NumPy has no autodiff", "ember": ember_setup, "torch": torch_setup,
                       "tinygrad": tinygrad_setup}, settings)


BENCHMARKS = {"autodiff": autodiff}
