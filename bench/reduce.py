"""Reductions of a (4096, 4096) f32 matrix: sums over its rows and its columns (and the columns of a
bias gradient's (128, 512)), then the two reduce-then-broadcast patterns a fusing backend should run in one or two passes (softmax and layer norm)."""

from __future__ import annotations

import numpy as np

from .frameworks import Frameworks, OnHost
from .harness import Row, Settings

EPS = 1e-5


def _matrix(settings: Settings) -> np.ndarray:
    n = settings.size(4096, 16)
    return np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)


def _label(x: np.ndarray) -> str:
    return f"({x.shape[0]}, {x.shape[1]}) f32"


def _sum_over(dim: int) -> dict:
    return {"numpy": lambda a: a.sum(axis=dim), "ember": lambda a: a.sum(dim=dim), "torch": lambda a: a.sum(dim=dim),
            "tinygrad": lambda a: a.sum(axis=dim)}


def reduce(fw: Frameworks, settings: Settings) -> list[Row]:
    """Sums over the contiguous dim (rows) and over the strided dim (columns: also at a bias gradient's
    size, (128, 512) over dim 0)."""
    x = _matrix(settings)
    bias_grad = np.random.default_rng(1).standard_normal((settings.size(128, 4), settings.size(512, 16)),
                                                         dtype=np.float32)
    return (fw.compare_op("reduce", f"sum over dim 1, {_label(x)}", _sum_over(1), [x], settings)
            + fw.compare_op("reduce", f"sum over dim 0, {_label(x)}", _sum_over(0), [x], settings)
            + fw.compare_op("reduce", f"sum over dim 0, {_label(bias_grad)}", _sum_over(0), [bias_grad], settings))


def numpy_softmax(a: np.ndarray) -> np.ndarray:
    """softmax along the last axis, shifted by the row maximum like every library does."""
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax(fw: Frameworks, settings: Settings) -> list[Row]:
    x = _matrix(settings)
    ops = {"numpy": numpy_softmax, "ember": lambda a: a.softmax(-1),
           "torch": lambda a: fw.modules["torch"].softmax(a, -1), "tinygrad": lambda a: a.softmax(-1),
           **kernel_row("softmax", lambda kernels, a: kernels.softmax(a))}
    return fw.compare_op("softmax", f"last dim, {_label(x)}", ops, [x], settings)


def numpy_layer_norm(a: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """(a - mean) / sqrt(var + eps) * weight + bias along the last axis."""
    mean = a.mean(axis=-1, keepdims=True)
    centered = a - mean
    var = (centered * centered).mean(axis=-1, keepdims=True)
    return centered / np.sqrt(var + EPS) * weight + bias


def layer_norm(fw: Frameworks, settings: Settings) -> list[Row]:
    x = _matrix(settings)
    rng = np.random.default_rng(1)
    weight, bias = rng.standard_normal(x.shape[-1:], dtype=np.float32), rng.standard_normal(x.shape[-1:],
                                                                                             dtype=np.float32)
    shape = x.shape[-1:]

    def ember_op(a, w, b):
        from ember.nn import functional as F
        return F.layer_norm(a, shape, w, b, EPS)

    ops = {"numpy": numpy_layer_norm, "ember": ember_op,
           "torch": lambda a, w, b: fw.modules["torch"].nn.functional.layer_norm(a, shape, w, b, EPS),
           "tinygrad": lambda a, w, b: a.layernorm(axis=-1, eps=EPS) * w + b,
           **kernel_row("layer_norm", lambda kernels, a, w, b: kernels.layer_norm(a, w, b, EPS))}
    return fw.compare_op("layer_norm", f"last dim with weight and bias, {_label(x)}", ops, [x, weight, bias],
                         settings)


def kernel_row(name: str, call) -> dict:
    """{"ember cube kernel": the op as one kernel of the cube library on host arrays}, or {} without a C
    compiler. ember's `softmax` and `layer_norm` compose primitives (max, exp, sum, ...), which a device
    runs one kernel each unless a fusing backend merges them; this row is the one-kernel figure."""
    from ember import cube
    if not cube.cpu_available()[0]:
        return {}
    from ember import kernels
    return {"ember cube kernel": OnHost(lambda *arrays: call(kernels, *arrays))}


BENCHMARKS = {"reduce": reduce, "softmax": softmax, "layer_norm": layer_norm}
