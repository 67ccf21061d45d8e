"""Helpers shared by the conformance suite and the core tests: random inputs per dtype, and comparison
of an ember tensor with a PyTorch tensor (values, shape, and dtype: ember's dtype must be the one
PyTorch gives).

PyTorch is the independent oracle: inputs are made once in NumPy, handed to both libraries, and the
results compared. bf16 crosses through f32 (exact), as `torch.from_numpy` cannot read `ml_dtypes`.

Example:
    >>> e, t = make((2, 3), "f32", rng, Device.numpy())
    >>> check(e.exp(), t.exp())
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

import ember
from ember.dtype import dtype_of
from tolerances import forward, grad as grad_tolerance

FLOATS = ("f64", "f32", "f16", "bf16")
INTS = ("i64", "i32", "i16", "i8", "u8")
ALL = FLOATS + INTS + ("bool",)
COMPLEXES = ("c64", "c128")
SIGNED = ("i64", "i32", "i16", "i8")

TORCH_DTYPE = {
    "f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "u8": torch.uint8,
    "bool": torch.bool, "c64": torch.complex64, "c128": torch.complex128,
}
EMBER_NAME = {v: k for k, v in TORCH_DTYPE.items()}

# Awkward shapes every elementwise op sees: 0-d, 0-size, a vector, matrices, a 3-d block.
SHAPES = [(), (0,), (2, 0, 3), (7,), (3, 4), (2, 3, 5)]
# Broadcast pairs: scalar with tensor, row with column, leading dims, size-1 against 0-size.
BROADCAST_PAIRS = [((), (3, 4)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((2, 1, 5), (3, 1)),
                   ((1,), (0,)), ((2, 0), (1, 1))]
# How an input is laid out: ember makes the view with its own ops, torch with the same ops.
LAYOUTS = ("contiguous", "transposed", "strided", "flipped")


def sample(shape, dtype: str, rng: np.random.Generator, low=None, high=None) -> np.ndarray:
    """Random values of `dtype` in [low, high) (defaults: [-3, 3) for floats, small ints, fair bools)."""
    shape = tuple(shape)
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    np_dtype = dtype_of(dtype).np
    if dtype in COMPLEXES:
        lo = -3.0 if low is None else low
        hi = 3.0 if high is None else high
        return (rng.uniform(lo, hi, size=shape) + 1j * rng.uniform(lo, hi, size=shape)).astype(np_dtype)
    if dtype in FLOATS:
        lo = -3.0 if low is None else low
        hi = 3.0 if high is None else high
        return np.asarray(rng.uniform(lo, hi, size=shape)).astype(np_dtype)
    lo = (0 if dtype == "u8" else -20) if low is None else low
    hi = 40 if high is None else high
    return np.asarray(rng.integers(lo, hi, size=shape)).astype(np_dtype)


def to_torch(array: np.ndarray) -> torch.Tensor:
    """A torch tensor with the values and (mapped) dtype of a NumPy array, bf16 included."""
    array = np.asarray(array)
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.astype(np.float32).copy()).to(torch.bfloat16)
    return torch.from_numpy(np.array(array, copy=True))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A torch tensor's values as NumPy (bf16 as `ml_dtypes.bfloat16`)."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.resolve_conj().resolve_neg().numpy()


def tensors(array: np.ndarray, device) -> tuple[ember.Tensor, torch.Tensor]:
    """The same values as an ember tensor on `device` and a torch tensor."""
    return ember.tensor(array, device=device), to_torch(array)


def make(shape, dtype: str, rng, device, layout: str = "contiguous", low=None, high=None):
    """A random (ember, torch) pair of `shape`, laid out as `layout` on both sides.

    `transposed` swaps the last two dims of a base tensor, `strided` takes every other element of the
    last dim, `flipped` reverses the last dim (ember with a negative step, torch with `flip`). Shapes
    of fewer dims than a layout needs come back contiguous.
    """
    shape = tuple(shape)
    if layout == "contiguous" or not shape:
        return tensors(sample(shape, dtype, rng, low, high), device)
    if layout == "transposed" and len(shape) >= 2:
        e, t = tensors(sample(shape[:-2] + (shape[-1], shape[-2]), dtype, rng, low, high), device)
        return e.transpose(-1, -2), t.transpose(-1, -2)
    if layout == "strided":
        e, t = tensors(sample(shape[:-1] + (2 * shape[-1],), dtype, rng, low, high), device)
        return e[..., ::2], t[..., ::2]
    if layout == "flipped":
        e, t = tensors(sample(shape, dtype, rng, low, high), device)
        return e[..., ::-1], t.flip(-1)
    return tensors(sample(shape, dtype, rng, low, high), device)


def check(actual: ember.Tensor, expected: torch.Tensor, tol=None, check_dtype: bool = True) -> None:
    """`actual` equals `expected` in shape, dtype (PyTorch's) and values (within the dtype's tolerance)."""
    assert isinstance(actual, ember.Tensor), f"expected an ember Tensor, got {type(actual).__name__}"
    assert isinstance(expected, torch.Tensor)
    want_dtype = EMBER_NAME[expected.dtype]
    if check_dtype:
        assert actual.dtype.name == want_dtype, f"dtype {actual.dtype} but torch gives {want_dtype}"
    assert actual.shape == tuple(expected.shape), f"shape {actual.shape} but torch gives {tuple(expected.shape)}"
    got = np.asarray(actual.numpy())
    want = to_numpy(expected)
    rtol, atol = tol if tol is not None else forward(want_dtype)
    if want_dtype in COMPLEXES:
        np.testing.assert_allclose(got.astype(np.complex128), want.astype(np.complex128), rtol=rtol, atol=atol,
                                   equal_nan=True)
    elif want_dtype in FLOATS:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def check_grad(actual, expected: torch.Tensor | None, dtype: str | None = None) -> None:
    """A gradient from ember equals torch's (None on the torch side means zeros or unreached)."""
    assert actual is not None, "ember computed no gradient where torch did"
    if expected is None:
        np.testing.assert_array_equal(np.asarray(actual.numpy()), 0)
        return
    check(actual, expected, tol=grad_tolerance(dtype or EMBER_NAME[expected.dtype]))


def leaf(array: np.ndarray, device):
    """(ember leaf tracked on `device.autodiff()`, torch leaf with requires_grad), same values."""
    e = ember.tensor(array, device=device.autodiff()).require_grad()
    t = to_torch(array).requires_grad_(True)
    return e, t


class case:
    """Context manager naming the case of a loop inside one test, so a failure says which one failed.

    Example:
        >>> for shape in SHAPES:
        ...     with case(shape=shape):
        ...         check(...)
    """

    def __init__(self, **info) -> None:
        self.info = ", ".join(f"{k}={v!r}" for k, v in info.items())

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is not None and issubclass(kind, AssertionError):
            raise AssertionError(f"[{self.info}] {value}") from None
        return False


def away_from_zero(array: np.ndarray, gap: float = 0.5) -> np.ndarray:
    """Float values pushed at least `gap` from zero (divisors), keeping their dtype."""
    f = array.astype(np.float64)
    return np.where(f < 0, f - gap, f + gap).astype(array.dtype)
