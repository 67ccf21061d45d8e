"""Integer ops at their edges on every device, fused and unfused: division and remainder by 0 and of
MIN by -1, shifts by negative counts and counts past the width, signed overflow, float to int casts of
NaN, infinities and out-of-range values.

PyTorch is the oracle where it defines the result. Where it does not, the result is ember's documented
choice: integer division and remainder by 0 give 0 (`ember.floor_divide`; PyTorch raises), float to
int casts follow `ember.dtype.float_to_int` (checked here against the rule written out in Python, and
on every device against the numpy device). C leaves all of these undefined (`INT_MIN / -1` killed the
process on the cpu device); see docs/backends.md, "Integer edge cases".
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ember
from ember.dtype import dtype_of
from conformance.oracle import INTS, check, tensors


def _edges(dtype: str, rng) -> tuple[np.ndarray, np.ndarray]:
    """Dividend and divisor pairs (3 x 7, an odd size): MIN / -1, x / 0, every sign pair, then random."""
    info = np.iinfo(dtype_of(dtype).np)
    lo, hi = int(info.min), int(info.max)
    minus = -1 if lo < 0 else hi  # an unsigned type has no -1: its largest value instead
    pairs = [(lo, minus), (lo, 0), (hi, 0), (0, 0), (lo, 1), (hi, minus), (7, 2), (-7 if lo else 9, 2),
             (7, minus), (lo, 2), (hi, 3), (-7 if lo else 200, -2 if lo else 7)]
    a = [p[0] for p in pairs] + list(rng.integers(lo, hi, 21 - len(pairs), endpoint=True))
    b = [p[1] for p in pairs] + list(rng.integers(max(lo, -9), 10, 21 - len(pairs)))
    np_dtype = dtype_of(dtype).np
    return np.array(a, np_dtype).reshape(3, 7), np.array(b, np_dtype).reshape(3, 7)


def _quotients(ta: torch.Tensor, tb: torch.Tensor) -> dict:
    """PyTorch's integer quotients and remainders where the divisor is not 0, and 0 (ember's choice) where it
    is. PyTorch's own `div(rounding_mode="trunc")` traps (SIGFPE) on i32/i64 MIN / -1: its quotient by -1 is
    PyTorch's (wrapping) negation instead."""
    zero = tb == 0
    safe = torch.where(zero, torch.ones_like(tb), tb)
    minus = tb == -1 if ta.dtype != torch.uint8 else torch.zeros_like(zero)
    trunc = torch.div(ta, torch.where(minus, torch.ones_like(tb), safe), rounding_mode="trunc")
    out = {"floor": torch.floor_divide(ta, safe), "trunc": torch.where(minus, -ta, trunc),
           "remainder": torch.remainder(ta, safe), "fmod": torch.fmod(ta, safe)}
    return {name: v.masked_fill(zero, 0) for name, v in out.items()}


@pytest.mark.parametrize("dtype", INTS)
def test_integer_division_shifts_and_overflow(dtype, device, rng):
    a, b = _edges(dtype, rng)
    (ea, ta), (eb, tb) = tensors(a, device), tensors(b, device)
    want = _quotients(ta, tb)
    # every spelling of integer division and remainder, each its own kernel (or fused block)
    check(ea // eb, want["floor"])
    check(ember.floor_divide(ea, eb), want["floor"])
    check(ember.div(ea, eb, rounding_mode="floor"), want["floor"])
    check(ember.div(ea, eb, rounding_mode="trunc"), want["trunc"])
    check(ea % eb, want["remainder"])
    check(ember.remainder(ea, eb), want["remainder"])
    check(ember.fmod(ea, eb), want["fmod"])
    # chained: the fused device runs each as one kernel, with the quotient's guards inlined mid-chain
    check((ea // eb) * eb + ea % eb, want["floor"] * tb + want["remainder"])
    check(ember.fmod(ea, eb) - ember.div(ea, eb, rounding_mode="trunc") * eb, want["fmod"] - want["trunc"] * tb)
    # operands that are no arrays: fills (scalars in a fused kernel) and a Python scalar divisor
    lo, minus = int(a[0, 0]), int(b[0, 0])
    fills = [ember.full((5,), v, dtype=dtype, device=device) for v in (lo, minus)]
    check(fills[0] // fills[1], torch.full((5,), lo, dtype=ta.dtype) // minus)
    check(fills[0] % fills[1] + ea[0, :5] // 0, torch.zeros(5, dtype=ta.dtype))

    # signed overflow wraps, as in PyTorch; a compare after the overflow must see the wrapped value
    info = np.iinfo(a.dtype)
    ends = np.array([info.max, info.min, info.min, -1 if info.min else 1, info.max, 5, info.min + 1], a.dtype)
    others = np.array([1, -1 if info.min else 1, info.min, info.min, info.max, info.max, 2], a.dtype)
    (ex, tx), (ey, ty) = tensors(ends, device), tensors(others, device)
    for fn in (lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: -x + y,
               lambda x, y: abs(x) * y, lambda x, y: (x + y) > x, lambda x, y: (x * 2) // 2 == x):
        check(fn(ex, ey), fn(tx, ty))
    check(-ex, -tx)
    check(abs(ex), abs(tx))

    # shifts by negative counts and counts from the width on: PyTorch gives 0 (<<) or the sign (>>)
    width = 8 * a.itemsize
    counts = np.array([0, 1, width - 1, width, width + 1, min(2 * width, info.max), -1, -width, 3, 5, -100, 100,
                       2, 0], np.int64)
    counts = counts[(counts >= info.min) & (counts <= info.max)].astype(a.dtype)
    values = np.resize(a.reshape(-1), counts.shape)
    (ev, tv), (ec, tc) = tensors(values, device), tensors(counts, device)
    check(ev << ec, tv << tc)
    check(ev >> ec, tv >> tc)
    check(ember.bitwise_left_shift(ev, ec), torch.bitwise_left_shift(tv, tc))
    check(ember.bitwise_right_shift(ev, ec), torch.bitwise_right_shift(tv, tc))
    check(((ev << ec) >> ec) + (ev >> ec << ec), ((tv << tc) >> tc) + (tv >> tc << tc))


SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 2.9, -2.9, 127.5, -128.5, 128.0, 255.9, 256.0, -1.0, 300.0,
           40000.0, -40000.0, 2.0 ** 31, -2.0 ** 31, -2.0 ** 31 - 4096, 2.0 ** 31 - 128, 3e9, -3e9, 2.0 ** 63,
           -2.0 ** 63, 1e20, -1e20, 3.4e38]


def _float_to_int_rule(x: float, dtype: str) -> int:
    """ember's float to int rule in plain Python (the docstring of `ember.dtype.float_to_int`)."""
    t = dtype_of(dtype)
    bits = 64 if t.itemsize == 8 else 32
    wide = math.trunc(x) if math.isfinite(x) and -2 ** (bits - 1) <= math.trunc(x) < 2 ** (bits - 1) \
        else -2 ** (bits - 1)
    wrapped = wide % 2 ** (8 * t.itemsize)
    return wrapped - 2 ** (8 * t.itemsize) if t.signed and wrapped >= 2 ** (8 * t.itemsize - 1) else wrapped


@pytest.mark.parametrize("src", ["f32", "f64"])
@pytest.mark.parametrize("dtype", INTS)
def test_float_to_int_casts_are_defined(src, dtype, device):
    x = np.array(SPECIAL, dtype_of(src).np)
    want = np.array([_float_to_int_rule(float(v), dtype) for v in x], dtype_of(dtype).np)
    reference = ember.tensor(x, device=ember.Device.numpy()).cast(dtype).numpy()
    np.testing.assert_array_equal(reference, want)
    e = ember.tensor(x, device=device)
    np.testing.assert_array_equal(e.cast(dtype).numpy(), want)
    # fused with arithmetic on both sides of the cast
    fused = ((e * 1.0).cast(dtype) + ember.zeros(len(SPECIAL), dtype=dtype, device=device)).numpy()
    np.testing.assert_array_equal(fused, want)
