"""Per-op dispatch overhead on tiny (4x4) tensors: ember on the device under test, with and without
autodiff, against NumPy itself, torch eager (with and without autograd) and tinygrad (whose time per op
includes scheduling, as it is lazy).

On the NumPy device ember does exactly NumPy's work underneath, so each ember row notes its time over
NumPy's: the cost of ember's own layers.
"""

from __future__ import annotations

import numpy as np

from .frameworks import TENSORS, Frameworks
from .harness import Row, Settings

# case: (the op on tensors of any framework in TENSORS, the op on NumPy arrays)
CASES = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "mul_scalar": (lambda a, b: a * 2.0, lambda a, b: a * 2.0),
    "exp": (lambda a, b: a.exp(), lambda a, b: np.exp(a)),
    "sum": (lambda a, b: a.sum(), lambda a, b: a.sum()),
    "matmul": (lambda a, b: a @ b, lambda a, b: a @ b),
    "reshape": (lambda a, b: a.reshape(16), lambda a, b: a.reshape(16)),
}
TRACKED = {"ember+autodiff": "ember", "torch+autograd": "torch"}


def overhead(fw: Frameworks, settings: Settings) -> list[Row]:
    host = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)

    def setup(name: str, op, requires_grad: bool = False):
        def build():
            a, b = fw.array(name, host, requires_grad), fw.array(name, host)
            return lambda: op(a, b)
        return build

    rows = []
    for case, (op, numpy_op) in CASES.items():
        impls = {"numpy": lambda numpy_op=numpy_op: (lambda: numpy_op(host, host))}
        impls.update({name: setup(name, op) for name in TENSORS})
        impls.update({label: setup(name, op, requires_grad=True) for label, name in TRACKED.items()})
        rows += _note_overhead(fw.compare("overhead", case, impls, settings))
    return rows


def _note_overhead(rows: list[Row]) -> list[Row]:
    """Note on each ember row how much longer than NumPy it took."""
    numpy_us = next((r.median_us for r in rows if r.impl == "numpy"), None)
    for r in rows:
        if r.impl.startswith("ember") and r.median_us is not None and numpy_us is not None:
            r.note = f"{r.median_us - numpy_us:+.1f} us over NumPy"
    return rows


BENCHMARKS = {"overhead": overhead}
