"""Convolution and pooling on image batches (NCHW f32): the conv layer of a small CNN at batch 64, and
2x2 max pooling of its output."""

from __future__ import annotations

import numpy as np

from .frameworks import Frameworks
from .harness import Row, Settings


def conv2d(fw: Frameworks, settings: Settings) -> list[Row]:
    n, c_in, c_out, hw = settings.size((64, 32, 64, 28), (2, 3, 4, 6))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c_in, hw, hw), dtype=np.float32)
    w = rng.standard_normal((c_out, c_in, 3, 3), dtype=np.float32) / np.float32(3 * c_in ** 0.5)
    b = rng.standard_normal(c_out, dtype=np.float32)

    def ember_op(x, w, b):
        from ember.nn import functional as F
        return F.conv2d(x, w, b, padding=1)

    ops = {"numpy": "NumPy has no convolution", "ember": ember_op,
           "torch": lambda x, w, b: fw.modules["torch"].nn.functional.conv2d(x, w, b, padding=1),
           "tinygrad": lambda x, w, b: x.conv2d(w, b, padding=1)}
    return fw.compare_op("conv2d", f"{n}x{c_in}x{hw}x{hw}, {c_in}->{c_out} 3x3 pad 1", ops, [x, w, b], settings)


def numpy_max_pool2d(x: np.ndarray) -> np.ndarray:
    """2x2 max pooling with stride 2 as a reshape and a max (H and W even)."""
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def max_pool2d(fw: Frameworks, settings: Settings) -> list[Row]:
    shape = settings.size((64, 64, 28, 28), (2, 4, 6, 6))
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)

    def ember_op(x):
        from ember.nn import functional as F
        return F.max_pool2d(x, 2)

    ops = {"numpy": numpy_max_pool2d, "ember": ember_op,
           "torch": lambda x: fw.modules["torch"].nn.functional.max_pool2d(x, 2),
           "tinygrad": lambda x: x.max_pool2d(2)}
    return fw.compare_op("max_pool2d", "x".join(map(str, shape)) + ", 2x2 stride 2", ops, [x], settings)


BENCHMARKS = {"conv2d": conv2d, "max_pool2d": max_pool2d}
