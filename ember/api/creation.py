"""Creating tensors: from data, constants, ranges and random streams.

`device=None` means `Device.default()`; `dtype=None` means PyTorch's choice (f32 for floats, i64 for
ints, bool for bools, the array's own dtype for NumPy input).

Example:
    >>> ember.zeros(2, 3).shape
    (2, 3)
    >>> ember.arange(0, 1, 0.25).tolist()
    [0.0, 0.25, 0.5, 0.75]
"""

from __future__ import annotations

import math

import numpy as np

from ..device import Device
from ..dtype import DType, bool_, complex_of, default_float, dtype_of, i64
from ..errors import DTypeError, ShapeError
from ..limits import check_size
from ..random import stream_of
from ..tensor import from_host
from ..ops import registry
from ._common import Tensor, apply, create_on, shape_arg


def _device(device) -> Device:
    return Device.default() if device is None else Device(device)


def from_numpy(array: np.ndarray, device=None) -> Tensor:
    """A tensor over a NumPy array; on the NumPy and CPU devices it shares the array's memory.

    Example:
        >>> ember.from_numpy(np.ones((2, 2), np.float32)).dtype
        f32
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(array).__name__}")
    return from_host(array, _device(device))


def tensor(data, dtype=None, device=None) -> Tensor:
    """A new tensor holding a copy of `data` (nested lists, scalars, NumPy arrays or tensors).

    Example:
        >>> ember.tensor([[1, 2], [3, 4]], dtype="f32").dtype
        f32
    """
    if isinstance(data, Tensor):
        out = data.to(_device(device) if device is not None else data.device).detach()
        return out.cast(dtype) if dtype is not None else out
    if isinstance(data, (np.ndarray, np.generic)):  # NumPy scalars keep their dtype, as in PyTorch
        array = np.array(data, copy=True)
        inferred = dtype_of(array.dtype)
    else:
        array, inferred = _from_python(data)
    target = dtype_of(dtype) if dtype is not None else inferred
    # np.ascontiguousarray would turn a 0-d array into a 1-d one; astype(order="C") keeps the rank.
    return from_numpy(array.astype(target.np, order="C"), device)


def _from_python(data) -> tuple[np.ndarray, DType]:
    if isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in _flat(data)):
        data = _nested_lists(data)
    try:
        array = np.asarray(data)
    except ValueError:  # NumPy refuses ragged nested sequences
        raise ShapeError("tensor", "nested sequences have unequal lengths (a tensor needs a regular shape)") from None
    if array.dtype == object:
        raise TypeError("ember.tensor: data must be numbers or (nested) sequences of numbers of equal length")
    kind = array.dtype.kind
    if kind == "b":
        return array, bool_
    if kind in "iu":
        return array, i64
    if kind == "f":
        return array, default_float()
    if kind == "c":  # Python complex numbers: the complex dtype of the default float (torch's c64)
        return array, complex_of(default_float())
    raise DTypeError(f"ember.tensor: unsupported data of dtype {array.dtype}")


def _flat(data):
    for x in data:
        if isinstance(x, (list, tuple)):
            yield from _flat(x)
        else:
            yield x


def _nested_lists(data):
    return [_nested_lists(x) if isinstance(x, (list, tuple)) else (x.tolist() if isinstance(x, Tensor) else x)
            for x in data]


def full(shape, fill_value, dtype=None, device=None) -> Tensor:
    """A tensor of `shape` filled with `fill_value`.

    Example:
        >>> ember.full((2,), 7).tolist()
        [7, 7]
    """
    if dtype is None:
        dtype = (bool_ if isinstance(fill_value, bool) else i64 if isinstance(fill_value, int)
                 else complex_of(default_float()) if isinstance(fill_value, complex) else default_float())
    return _constant("full", (shape,), fill_value, dtype, device)


def _constant(op: str, shape: tuple, value, dtype, device) -> Tensor:
    """`value` in `shape` (given as the creation ops take it: `(2, 3)` or `((2, 3),)`), its size checked
    under the name `op` before anything is allocated (`check_size`)."""
    shape, dtype = shape_arg(shape, op), dtype_of(dtype)
    check_size(op, shape, dtype)
    return create_on(_device(device), "full", shape=shape, value=value, dtype=dtype)


def zeros(*shape, dtype=None, device=None) -> Tensor:
    """A tensor of zeros. Example: `ember.zeros(2, 3)`."""
    return _constant("zeros", shape, 0, dtype or default_float(), device)


def ones(*shape, dtype=None, device=None) -> Tensor:
    """A tensor of ones. Example: `ember.ones(2, 3, dtype="i32")`."""
    return _constant("ones", shape, 1, dtype or default_float(), device)


def empty(*shape, dtype=None, device=None) -> Tensor:
    """A tensor whose contents are unspecified; ember gives zeros so no stale data can leak."""
    return _constant("empty", shape, 0, dtype or default_float(), device)


def arange(start, end=None, step=1, dtype=None, device=None) -> Tensor:
    """Values from `start` (inclusive) to `end` (exclusive) by `step`.

    Example:
        >>> ember.arange(5).tolist()
        [0, 1, 2, 3, 4]
    """
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if dtype is None:
        dtype = i64 if all(isinstance(v, int) for v in (start, end, step)) else default_float()
    dtype = dtype_of(dtype)
    if any(isinstance(v, int) and type(v) is not int and not isinstance(v, bool) for v in (start, end, step)):
        # a traced size (ONNX export, `ember.backend.capture.SymInt`): device ops whose size keeps its formula
        count = max(0, -((start - end) // step))
        ramp = full((count,), step, dtype=dtype, device=device).cumsum(0)
        return ramp + (start - step) if start != step else ramp
    count = max(0, math.ceil((end - start) / step))
    check_size("arange", (count,), dtype)
    values = start + np.arange(count, dtype=np.float64 if dtype.is_float else np.int64) * step
    return from_numpy(values.astype(dtype.np), device)


def linspace(start: float, end: float, steps: int, dtype=None, device=None) -> Tensor:
    """`steps` evenly spaced values from `start` to `end`, both included.

    Example:
        >>> ember.linspace(0, 1, 3).tolist()
        [0.0, 0.5, 1.0]
    """
    if steps < 0:
        raise ShapeError("linspace", f"steps must be non-negative, got {steps}")
    dtype = dtype_of(dtype) if dtype is not None else default_float()
    check_size("linspace", (steps,), dtype)
    return from_numpy(np.linspace(start, end, steps).astype(dtype.np), device)


def eye(n: int, m: int | None = None, dtype=None, device=None) -> Tensor:
    """The identity matrix of `n` rows and `m` (default `n`) columns."""
    dtype = dtype_of(dtype) if dtype is not None else default_float()
    check_size("eye", shape_arg((n, n if m is None else m), "eye"), dtype)
    return from_numpy(np.eye(n, m, dtype=dtype.np), device)


# ---- random ----------------------------------------------------------------------------------------

def _random(op: str, name: str, shape, dtype: DType, device, **params) -> Tensor:
    """Samples of the random primitive `name` for the creation op `op`, its size checked before the
    device's random stream moves on."""
    device, shape = _device(device), shape_arg(shape, op)
    check_size(op, shape, dtype)
    seed, offset = stream_of(device).take(math.prod(shape))
    return create_on(device, name, shape=shape, dtype=dtype, seed=seed, offset=offset, **params)


def _float_dtype(dtype) -> DType:
    dtype = dtype_of(dtype) if dtype is not None else default_float()
    if not dtype.is_float:
        raise DTypeError(f"random floats need a float dtype, got {dtype}")
    return dtype


def rand(*shape, dtype=None, device=None) -> Tensor:
    """Uniform samples in [0, 1) from the device's random stream. Example: `ember.rand(2, 3)`."""
    return _random("rand", "uniform", shape, _float_dtype(dtype), device, low=0.0, high=1.0)


def uniform(*shape, low: float = 0.0, high: float = 1.0, dtype=None, device=None) -> Tensor:
    """Uniform samples in [low, high). Example: `ember.uniform(3, low=-1, high=1)`."""
    return _random("uniform", "uniform", shape, _float_dtype(dtype), device, low=float(low), high=float(high))


def randn(*shape, dtype=None, device=None) -> Tensor:
    """Standard normal samples. Example: `ember.randn(2, 3)`."""
    return _random("randn", "normal", shape, _float_dtype(dtype), device, mean=0.0, std=1.0)


def normal(*shape, mean: float = 0.0, std: float = 1.0, dtype=None, device=None) -> Tensor:
    """Normal samples with `mean` and `std`. Example: `ember.normal(3, mean=1, std=0.1)`."""
    return _random("normal", "normal", shape, _float_dtype(dtype), device, mean=float(mean), std=float(std))


def randint(low: int, high: int | None = None, size=(), dtype=None, device=None) -> Tensor:
    """Integers uniform in [low, high) (`randint(high, size=...)` starts at 0).

    Example:
        >>> ember.randint(0, 10, (3,)).dtype
        i64
    """
    if high is None:
        low, high = 0, low
    if high <= low:
        raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
    return _random("randint", "randint", (size,), dtype_of(dtype) if dtype is not None else i64, device,
                   low=int(low), high=int(high))


def bernoulli(p: Tensor) -> Tensor:
    """Draws of 1 with probability `p` (elementwise), in the dtype of `p`.

    Example:
        >>> ember.bernoulli(ember.full((4,), 0.5))
    """
    u = rand(*p.shape, dtype=p.dtype if p.dtype.is_float else None, device=p.device)
    return (u < p).cast(p.dtype)


# ---- *_like and new_* ------------------------------------------------------------------------------

def zeros_like(x: Tensor, dtype=None) -> Tensor:
    """Zeros of the shape, dtype and device of `x`."""
    return _constant("zeros_like", (x.shape,), 0, dtype or x.dtype, x.device)


def ones_like(x: Tensor, dtype=None) -> Tensor:
    """Ones of the shape, dtype and device of `x`."""
    return _constant("ones_like", (x.shape,), 1, dtype or x.dtype, x.device)


def full_like(x: Tensor, fill_value, dtype=None) -> Tensor:
    """`fill_value` in the shape, dtype and device of `x`."""
    return _constant("full_like", (x.shape,), fill_value, dtype or x.dtype, x.device)


def empty_like(x: Tensor, dtype=None) -> Tensor:
    """Like `empty`, in the shape, dtype and device of `x`."""
    return zeros_like(x, dtype)


def rand_like(x: Tensor, dtype=None) -> Tensor:
    """Uniform [0, 1) samples in the shape of `x`."""
    return rand(*x.shape, dtype=dtype or x.dtype, device=x.device)


def randn_like(x: Tensor, dtype=None) -> Tensor:
    """Standard normal samples in the shape of `x`."""
    return randn(*x.shape, dtype=dtype or x.dtype, device=x.device)


def randint_like(x: Tensor, low: int, high: int | None = None, dtype=None) -> Tensor:
    """Random integers in the shape of `x`."""
    return randint(low, high, x.shape, dtype=dtype or x.dtype, device=x.device)


def new_zeros(x: Tensor, *shape) -> Tensor:
    """Zeros of `shape` with the dtype and device of `x`. Example: `x.new_zeros(2, 2)`."""
    return _constant("new_zeros", shape, 0, x.dtype, x.device)


def new_ones(x: Tensor, *shape) -> Tensor:
    """Ones of `shape` with the dtype and device of `x`. Example: `x.new_ones(2, 2)`."""
    return _constant("new_ones", shape, 1, x.dtype, x.device)


def new_tensor(x: Tensor, data, dtype=None) -> Tensor:
    """A copy of `data` on the device of `x`, of `dtype` (by default the dtype of `x`, as in PyTorch).

    Example:
        >>> ember.zeros(2).new_tensor([1, 2]).tolist()
        [1.0, 2.0]
    """
    return tensor(data, dtype=x.dtype if dtype is None else dtype, device=x.device)


def new_full(x: Tensor, shape, fill_value) -> Tensor:
    """`fill_value` in `shape` with the dtype and device of `x`."""
    return _constant("new_full", (shape,), fill_value, x.dtype, x.device)


METHODS = {
    "zeros_like": zeros_like, "ones_like": ones_like, "full_like": full_like, "new_zeros": new_zeros,
    "new_ones": new_ones, "new_tensor": new_tensor, "new_full": new_full,
}


def randperm(n: int, *, dtype=None, device=None) -> Tensor:
    """A random permutation of 0 .. n-1 from the device's random stream (the same for a seed on every
    device).

    Example:
        >>> sorted(ember.randperm(4).tolist())
        [0, 1, 2, 3]
    """
    if n < 0:
        raise ValueError(f"randperm: n must be non-negative, got {n}")
    return _random("randperm", "randperm", (n,), dtype_of(dtype) if dtype is not None else i64, device)


def multinomial(probs: Tensor, num_samples: int, replacement: bool = False) -> Tensor:
    """`num_samples` category indices per row of the 1-d or 2-d `probs` (non-negative weights, not
    necessarily summing to 1), drawn with or without replacement from the device's random stream
    (the same for a seed on every device). The result is i64 of shape `probs.shape[:-1] + (num_samples,)`.

    Example:
        >>> ember.multinomial(ember.tensor([0.0, 1.0, 0.0]), 2, replacement=True).tolist()
        [1, 1]
    """
    if num_samples <= 0:
        raise ValueError(f"multinomial: num_samples must be positive, got {num_samples}")
    registry["multinomial"].infer(probs._aval, num_samples=num_samples, replacement=replacement,
                                  seed=0, offset=0)
    host = np.asarray(probs.numpy(), np.float64)
    if not np.isfinite(host).all() or (host < 0).any():
        raise ValueError("multinomial: probabilities must be finite and non-negative")
    sums = host.reshape(-1, host.shape[-1]).sum(axis=1)
    nonzero = (host.reshape(-1, host.shape[-1]) > 0).sum(axis=1)
    if (sums <= 0).any():
        raise ValueError("multinomial: every row of probabilities must have a positive sum")
    if not replacement and (nonzero < num_samples).any():
        raise ValueError(f"multinomial: cannot draw {num_samples} samples without replacement from a row "
                         f"with {int(nonzero.min())} non-zero probabilities")
    count = math.prod(probs.shape[:-1]) * max(num_samples, probs.shape[-1])
    seed, offset = stream_of(probs.device).take(count)
    return apply("multinomial", probs, num_samples=int(num_samples), replacement=bool(replacement),
                 seed=seed, offset=offset)


METHODS.update({"multinomial": multinomial})
