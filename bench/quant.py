"""Products with quantized weights: `F.quant_linear` (weight-only w8a16, w4a16, nf4: the weight's codes
dequantized in the kernel's loop) and `F.int_linear` (int8 x int8 -> int32), each against the dense
product of the same shape in torch and NumPy (f32 on the CPU, and torch's bf16 there too; bf16 activations
and weights on CUDA).

Shapes are M x K x N (x (M, K) times a (N, K) weight), from `EMBER_BENCH_QUANT` and `EMBER_BENCH_INT`
(comma-separated, e.g. `1x4096x14336,16x4096x14336,4096x4096x14336`, the issue's H200 shapes); by
default 1x4096x4096, 16x4096x4096 and 256x1024x1024 (`--large`: the H200 shapes) and 1024^3 int8
(`--large`: also 2048^3).

Example:
    >>> EMBER_BENCH_QUANT=1x4096x14336 python -m bench quant_matmul --device cuda --peers torch
"""

from __future__ import annotations

import os

import numpy as np

from .frameworks import Frameworks
from .harness import Row, Settings

SCHEMES = {"w8a16": ("int8", 0), "w4a16": ("int4", 32), "nf4": ("nf4", 64)}
"""label -> (code, block; 0: one scale per output channel)."""
H200 = "1x4096x14336,16x4096x14336,4096x4096x14336"


def _shapes(variable: str, default: str, large: str, settings: Settings, tiny: str) -> list[tuple[int, int, int]]:
    text = tiny if settings.tiny else os.environ.get(variable) or (large if settings.large else default)
    return [tuple(int(d) for d in item.split("x")) for item in text.split(",") if item]


def _parts(rng, code: str, block: int, n: int, k: int):
    per = 8 // (8 if code == "int8" else 4)
    block = block or k
    values = rng.integers(0, 256, (n, -(-k // per)), dtype=np.uint8)
    scales = rng.uniform(0.001, 0.01, (n, -(-k // block))).astype(np.float32)
    return values, scales, block


def quant_matmul(fw: Frameworks, settings: Settings) -> list[Row]:
    import ember
    from ember.nn import functional as F
    rows = []
    half = fw.torch_device == "cuda"
    for m, k, n in _shapes("EMBER_BENCH_QUANT", "1x4096x4096,16x4096x4096,256x1024x1024", H200, settings,
                           "1x64x48,20x64x48"):
        rng = np.random.default_rng(m + k + n)
        x = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((n, k), dtype=np.float32) * np.float32(0.01)
        impls = {}
        for label, (code, block) in SCHEMES.items():
            values, scales, block = _parts(rng, code, block, n, k)

            def setup(code=code, block=block, values=values, scales=scales):
                ex = ember.tensor(x, device=fw.device)
                ex = ex.cast("bf16") if half else ex
                ev, es = ember.tensor(values, device=fw.device), ember.tensor(scales, device=fw.device)
                return lambda: F.quant_linear(ex, ev, es, code=code, block=block, in_features=k, out_features=n)
            impls[f"ember {label}"] = setup
        impls["torch"] = lambda: _torch_dense(fw, x, w, half)
        if not half:  # the CPU: torch's bf16 product too (oneDNN's AVX-512 bf16 where the CPU has it)
            impls["torch bf16"] = lambda: _torch_dense(fw, x, w, True)
        impls["numpy"] = lambda: (lambda: x @ w.T)
        dtype = "bf16" if half else "f32"
        rows += fw.compare("quant_matmul", f"{m}x{k} @ ({n}x{k}).T, x {dtype}", impls, settings,
                           notes={"torch": f"dense {dtype} weight", "torch bf16": "dense bf16 x and weight",
                                  "numpy": "dense f32 weight"})
    return rows


def _torch_dense(fw: Frameworks, a: np.ndarray, b: np.ndarray, half: bool):
    torch = fw.modules["torch"]
    ta = torch.from_numpy(a).to(fw.torch_device)
    tb = torch.from_numpy(b).to(fw.torch_device)
    if half:
        ta, tb = ta.bfloat16(), tb.bfloat16()
    return lambda: ta @ tb.T


def int_matmul(fw: Frameworks, settings: Settings) -> list[Row]:
    import ember
    from ember.nn import functional as F
    rows = []
    for m, k, n in _shapes("EMBER_BENCH_INT", "1024x1024x1024", "1024x1024x1024,2048x2048x2048", settings,
                           "20x64x48"):
        rng = np.random.default_rng(m + k + n)
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (n, k), dtype=np.int8)
        af, bf = a.astype(np.float32), b.astype(np.float32)

        def setup():
            ea, eb = ember.tensor(a, device=fw.device), ember.tensor(b, device=fw.device)
            return lambda: F.int_linear(ea, eb)
        impls = {"ember int8": setup, "torch": lambda: _torch_dense(fw, af, bf, False),
                 "numpy": lambda: (lambda: af @ bf.T)}
        rows += fw.compare("int_matmul", f"{m}x{k} @ ({n}x{k}).T int8 -> int32", impls, settings,
                           notes={"torch": "f32 matmul", "numpy": "f32 matmul"})
    return rows


BENCHMARKS = {"quant_matmul": quant_matmul, "int_matmul": int_matmul}
