"""Per-op overhead on tiny tensors: ember on the NumPy backend against NumPy itself and torch eager,
with and without autodiff.

ember's own overhead is its time minus NumPy's for the same op (the NumPy backend does exactly the NumPy
work underneath), reported as the `ember overhead` rows.
"""

from __future__ import annotations

import numpy as np

from .harness import Row, median_us, peer

NAME = "overhead"
CASES = {
    "add": (lambda a, b: a + b),
    "mul_scalar": (lambda a, b: a * 2.0),
    "exp": (lambda a, b: a.exp() if hasattr(a, "exp") and not isinstance(a, np.ndarray) else np.exp(a)),
    "sum": (lambda a, b: a.sum()),
    "matmul": (lambda a, b: a @ b),
    "reshape": (lambda a, b: a.reshape(16)),
}


def run(device: str, peers: list[str], inner: int = 2000) -> list[Row]:
    import ember
    rows: list[Row] = []
    host = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    plain = ember.Device(device)
    tracked = plain.autodiff()
    x, y = ember.tensor(host, device=plain), ember.tensor(host, device=plain)
    xg, yg = ember.tensor(host, device=tracked).require_grad(), ember.tensor(host, device=tracked)
    torch = peer("torch") if "torch" in peers else None
    for case, fn in CASES.items():
        numpy_us = median_us(lambda: fn(host, host), inner)
        ember_us = median_us(lambda: fn(x, y), inner)
        grad_us = median_us(lambda: fn(xg, yg), inner)
        rows += [Row(NAME, case, "numpy", numpy_us), Row(NAME, case, "ember", ember_us),
                 Row(NAME, case, "ember+autodiff", grad_us),
                 Row(NAME, case, "ember overhead", ember_us - numpy_us),
                 Row(NAME, case, "ember+autodiff overhead", grad_us - numpy_us)]
        if torch is not None:
            ta, tb = torch.from_numpy(host.copy()), torch.from_numpy(host.copy())
            tg = ta.clone().requires_grad_(True)
            rows += [Row(NAME, case, "torch", median_us(lambda: fn(ta, tb), inner)),
                     Row(NAME, case, "torch+autograd", median_us(lambda: fn(tg, tb), inner))]
    return rows
