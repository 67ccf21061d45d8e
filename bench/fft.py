"""FFTs: rfft of 2^20 real points and of a prime length near it (1048573: Bluestein's case), and a batch
of 1024 1024-point complex FFTs, against torch.fft on the same machine (and numpy.fft), each case on one
thread and on all of the machine's.

The thread count is set for the process's OpenMP (`omp_set_num_threads`: ember's C kernels and torch's
CPU ops share one libgomp) and for torch (`torch.set_num_threads`, which MKL's FFTs follow); numpy.fft
(pocketfft) runs on one thread either way. Both are restored after each case.
"""

from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager

import numpy as np

from .frameworks import Frameworks
from .harness import Row, Settings


@contextmanager
def threads(fw: Frameworks, count: int):
    """Within the block, OpenMP and torch use `count` threads."""
    gomp = ctypes.CDLL("libgomp.so.1")  # the one already loaded, by its soname, when torch or ember loaded it
    torch = fw.modules.get("torch")
    before, torch_before = gomp.omp_get_max_threads(), torch.get_num_threads() if torch else None
    gomp.omp_set_num_threads(count)
    if torch:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        gomp.omp_set_num_threads(before)
        if torch:
            torch.set_num_threads(torch_before)


def _counts() -> list[int]:
    return sorted({1, os.cpu_count() or 1})


def _label(count: int) -> str:
    return "1 thread" if count == 1 else f"{count} threads"


def _rfft(fw: Frameworks, settings: Settings, n: int, label: str, count: int) -> list[Row]:
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    ops = {"numpy": lambda a: np.fft.rfft(a), "ember": lambda a: fw.modules["ember"].signal.rfft(a),
           "torch": lambda a: fw.modules["torch"].fft.rfft(a)}
    return fw.compare_op("fft", f"rfft, {label} ({n}) f32, {_label(count)}", ops, [x], settings)


def fft(fw: Frameworks, settings: Settings) -> list[Row]:
    """rfft at 2^20 and at the prime 1048573; 1024 batched 1024-point c64 FFTs; on 1 thread and on all."""
    n = settings.size(1 << 20, 64)
    prime = settings.size(1048573, 61)
    b, m = settings.size(1024, 8), settings.size(1024, 16)
    rng = np.random.default_rng(1)
    z = (rng.standard_normal((b, m)) + 1j * rng.standard_normal((b, m))).astype(np.complex64)
    ops = {"numpy": lambda a: np.fft.fft(a), "ember": lambda a: fw.modules["ember"].signal.fft(a),
           "torch": lambda a: fw.modules["torch"].fft.fft(a)}
    rows: list[Row] = []
    for count in _counts():
        with threads(fw, count):
            rows += _rfft(fw, settings, n, "2^20", count) + _rfft(fw, settings, prime, "prime", count)
            rows += fw.compare_op("fft", f"fft, batch {b} x {m} c64, {_label(count)}", ops, [z], settings)
    return rows


BENCHMARKS = {"fft": fft}
