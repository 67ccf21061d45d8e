"""Square f32 matrix products, alone and with the epilogue a fusing backend folds into the kernel
(`relu(x @ w + b)`). The plain products also time the cube kernel alone and the autotuned matmul (BLAS
or a cube tile, whichever the autotuner picked) on host arrays, whatever `--device` is."""

from __future__ import annotations

import numpy as np

from .frameworks import Frameworks, OnHost, tensor_op
from .harness import Row, Settings


def _sizes(settings: Settings) -> list[int]:
    if settings.tiny:
        return [8]
    return [1024, 2048] + ([4096] if settings.large else [])


def _operands(n: int, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(n)
    # Scaled so products stay near unit size whatever n is.
    return [(rng.standard_normal(s, dtype=np.float32) / np.float32(n ** 0.25)) for s in shapes]


def matmul(fw: Frameworks, settings: Settings) -> list[Row]:
    rows = []
    for n in _sizes(settings):
        mul = lambda a, b: a @ b  # noqa: E731
        hosts = _operands(n, (n, n), (n, n))
        rows += fw.compare_op("matmul", f"{n}x{n} @ {n}x{n} f32", {**tensor_op(mul, mul), **cube_rows(*hosts)},
                              hosts, settings)
    return rows


def cube_rows(a: np.ndarray, b: np.ndarray) -> dict:
    """The cube kernel alone (default tile) and the autotuned matmul the Cube(cpu) backend runs, labelled
    with the autotuner's choice for this shape (timed now if the cache has no decision yet); none without
    a C compiler."""
    from ember import cube
    if not cube.cpu_available()[0]:
        return {}
    from ember.kernels.matmul import matmul_tuner, tuned_matmul
    from ember.kernels.matmul import matmul as cube_matmul
    choice = matmul_tuner().choose(a, b)
    return {"ember cube kernel alone": OnHost(cube_matmul), f"ember autotuned ({choice})": OnHost(tuned_matmul)}


def matmul_fused(fw: Frameworks, settings: Settings) -> list[Row]:
    # One size only: the epilogue's share of the time is what this case is about, and the 2048 matmul
    # itself is in `matmul`.
    n = settings.size(1024, 8)
    ops = tensor_op(lambda x, w, b: (x @ w + b).relu(), lambda x, w, b: np.maximum(x @ w + b, 0))
    ops["ember custom_op"] = _custom_op  # the same op as one fused cube kernel (@ember.backend_extension)
    return fw.compare_op("matmul_fused", f"relu(x @ w + b), {n}x{n} f32", ops,
                         _operands(n, (n, n), (n, n), (n,)), settings)


def _custom_op(x, w, b):
    """`ember.examples.custom_op.matmul_bias_relu`: on a device without a cube target, its NumPy reference."""
    from ember.examples.custom_op import matmul_bias_relu
    return matmul_bias_relu(x, w, b)


BENCHMARKS = {"matmul": matmul, "matmul_fused": matmul_fused}
