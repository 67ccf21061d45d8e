"""Elementwise ops on large f32 vectors: one unary op, one broadcasting binary op, and a chain (GELU
written out with tanh) that a fusing backend runs as one kernel while an eager one makes ~10 passes;
torch runs the chain eagerly and under `torch.compile` (which fuses it too)."""

from __future__ import annotations

import math

import numpy as np

from .frameworks import Frameworks, tensor_op
from .harness import Row, Settings

GELU_C = math.sqrt(2.0 / math.pi)


def unary(fw: Frameworks, settings: Settings) -> list[Row]:
    n = settings.size(1 << 20, 64)
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    return fw.compare_op("unary", f"exp, {n:,} f32", tensor_op(lambda a: a.exp(), np.exp), [x], settings)


def binary(fw: Frameworks, settings: Settings) -> list[Row]:
    rows, cols = settings.size((1024, 1024), (8, 8))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    bias = rng.standard_normal((1, cols), dtype=np.float32)
    add = lambda a, b: a + b  # noqa: E731
    return fw.compare_op("binary", f"add ({rows}, {cols}) + (1, {cols}) f32", tensor_op(add, add), [x, bias],
                         settings)


def gelu(x, tanh):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), one op at a time."""
    return 0.5 * x * (1.0 + tanh(GELU_C * (x + 0.044715 * x * x * x)))


def custom_gelu(fw: Frameworks, settings: Settings) -> list[Row]:
    n = settings.size(10_000_000, 64)
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    ops = tensor_op(lambda a: gelu(a, lambda t: t.tanh()), lambda a: gelu(a, np.tanh), compiled=True)
    return fw.compare_op("custom_gelu", f"gelu via tanh, {n:,} f32", ops, [x], settings)


BENCHMARKS = {"unary": unary, "binary": binary, "custom_gelu": custom_gelu}
