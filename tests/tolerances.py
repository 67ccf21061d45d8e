"""Tolerances of the test suite, per dtype, stated once.

Forward results are compared with `rtol`/`atol` of the result's dtype. Floats that round once from an
f32 computation (f16, bf16: ember and PyTorch's CPU kernels both compute in f32 and round) may differ
by one unit in the last place when the two libraries evaluate a function in a different order, so the
half-precision tolerances are a couple of ulps. Integers and bools are exact.

Gradients go through several ops, each rounding, so they get `GRAD` (f64 and f32 only: gradients are
checked in those two dtypes).
"""

from __future__ import annotations

# dtype name -> (rtol, atol)
FORWARD = {
    "f64": (1e-10, 1e-12),
    "f32": (1e-5, 1e-6),
    "f16": (2e-3, 1e-3),      # f16 eps is 9.8e-4: two ulps
    "bf16": (1.6e-2, 1e-2),   # bf16 eps is 7.8e-3: two ulps
    "i64": (0, 0), "i32": (0, 0), "i16": (0, 0), "i8": (0, 0), "u8": (0, 0), "bool": (0, 0),
    "c128": (1e-10, 1e-12), "c64": (1e-5, 1e-6),  # as their parts' dtype (compared as complex values)
}

GRAD = {
    "f64": (1e-8, 1e-10),
    "f32": (1e-4, 1e-5),
    "c128": (1e-8, 1e-10),
    "c64": (1e-4, 1e-5),
}


def forward(dtype) -> tuple[float, float]:
    """(rtol, atol) for a forward result of `dtype` (an ember DType or its name)."""
    return FORWARD[getattr(dtype, "name", dtype)]


def grad(dtype) -> tuple[float, float]:
    """(rtol, atol) for a gradient of `dtype`."""
    return GRAD[getattr(dtype, "name", dtype)]


SECOND = {
    "f64": (1e-8, 1e-10),
    "f32": (3e-3, 1e-4),
}
"""Second derivatives (a backward walk through recorded gradient rules): twice the rounding steps of a
gradient, and products like cumprod's amplify them; checked in f64 and, on devices without it, f32."""


def second(dtype) -> tuple[float, float]:
    """(rtol, atol) for a second derivative of `dtype`."""
    return SECOND[getattr(dtype, "name", dtype)]
