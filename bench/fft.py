"""FFTs: rfft of 2^20 real points and of a prime length near it (1048573: Bluestein's case), and a batch
of 1024 1024-point complex FFTs, against torch.fft on the same machine (and numpy.fft)."""

from __future__ import annotations

import numpy as np

from .frameworks import Frameworks
from .harness import Row, Settings


def _rfft(fw: Frameworks, settings: Settings, n: int, label: str) -> list[Row]:
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    ops = {"numpy": lambda a: np.fft.rfft(a), "ember": lambda a: fw.modules["ember"].signal.rfft(a),
           "torch": lambda a: fw.modules["torch"].fft.rfft(a)}
    return fw.compare_op("fft", f"rfft, {label} ({n}) f32", ops, [x], settings)


def fft(fw: Frameworks, settings: Settings) -> list[Row]:
    """rfft at 2^20 and at the prime 1048573; 1024 batched 1024-point c64 FFTs."""
    n = settings.size(1 << 20, 64)
    prime = settings.size(1048573, 61)
    rows = _rfft(fw, settings, n, "2^20") + _rfft(fw, settings, prime, "prime")
    rng = np.random.default_rng(1)
    b, m = settings.size(1024, 8), settings.size(1024, 16)
    z = (rng.standard_normal((b, m)) + 1j * rng.standard_normal((b, m))).astype(np.complex64)
    ops = {"numpy": lambda a: np.fft.fft(a), "ember": lambda a: fw.modules["ember"].signal.fft(a),
           "torch": lambda a: fw.modules["torch"].fft.fft(a)}
    return rows + fw.compare_op("fft", f"fft, batch {b} x {m} c64", ops, [z], settings)


BENCHMARKS = {"fft": fft}
