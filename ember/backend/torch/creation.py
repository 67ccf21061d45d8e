"""The row of `full`. The random primitives (uniform, normal, randint) have none on purpose: their
numbers are ember's Philox stream (`ember/random.py`), the same on every device for a seed, so they run
their NumPy reference and cross to the device (the backend records them in `fallbacks`).

Example:
    >>> ROWS["full"](Aval((2,), i8), shape=(2,), value=3, dtype=i8).tolist()
    [3, 3]
"""

from __future__ import annotations

import numpy as np
import torch

from .convert import tdtype


def _full(out, *, shape, value, dtype, device: torch.device):
    scalar = np.full((), value, dtype=dtype.np)  # the reference's conversion of the value, bf16 included
    python = (float(scalar) if dtype.is_float else complex(scalar) if dtype.is_complex else bool(scalar)
              if dtype.is_bool else int(scalar))
    return torch.full(shape, python, dtype=tdtype(dtype), device=device)


ROWS = {"full": _full}
"""Primitive name -> `row(out_aval, **params, device=torch_device) -> tensor` (creation rows get the device)."""
