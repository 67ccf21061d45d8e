"""Helpers every tensor-level module shares: binding primitives, promotion and scalar operands."""

from __future__ import annotations

import operator

import numpy as np

from ..dtype import FLOAT, DType, default_float, dtype_of, result_type
from ..errors import ShapeError
from ..ops import registry
from ..tensor import Tensor, bind, create, scalar_like

__all__ = ["apply", "create_on", "promote", "scalar_like", "to_tensor_like", "shape_arg", "Tensor",
           "registry", "result_type", "default_float", "dtype_of"]


def apply(name: str, *inputs: Tensor, **params) -> Tensor:
    """Bind the primitive called `name` to tensor inputs."""
    return bind(registry[name], inputs, params)


def create_on(device, name: str, **params) -> Tensor:
    """Run the creation primitive called `name` on `device`."""
    return create(device, registry[name], params)


def to_tensor_like(value, like: Tensor, dtype: DType) -> Tensor:
    """`value` (a tensor or a Python scalar) as a tensor of `dtype` on the device of `like`."""
    if isinstance(value, Tensor):
        return value if value._aval.dtype is dtype else value.cast(dtype)
    if isinstance(value, (bool, int, float, complex, np.number, np.bool_)):
        return scalar_like(value, dtype, like._device)
    raise TypeError(f"expected a tensor or a Python scalar, got {type(value).__name__}")


def promote(*operands, float_only: bool = False) -> tuple[Tensor, ...]:
    """Operands (tensors and scalars, at least one tensor) as tensors of their PyTorch result dtype."""
    first = operands[0]
    if len(operands) == 2 and type(first) is Tensor:
        # The common cases, decided without the general rule: same-dtype tensors, and a float
        # tensor with a Python number.
        other = operands[1]
        dtype = first._aval.dtype
        kind = type(other)
        if kind is Tensor:
            if other._aval.dtype is dtype and (not float_only or dtype.category >= FLOAT):
                return first, other
        elif (kind is float or kind is int) and dtype.category >= FLOAT:
            return first, scalar_like(other, dtype, first._device)
    elif len(operands) == 2 and type(operands[1]) is Tensor and type(first) in (float, int):
        # A Python number with a float tensor on the right (`0.9 * m`, `1 - x`): the tensor's dtype.
        other = operands[1]
        dtype = other._aval.dtype
        if dtype.is_inexact:
            return scalar_like(first, dtype, other._device), other
    like = next(x for x in operands if isinstance(x, Tensor))
    plain = [x.item() if isinstance(x, (np.number, np.bool_)) else x for x in operands]
    dtype = result_type(*plain)
    if float_only and not dtype.is_inexact:
        dtype = default_float()
    return tuple(to_tensor_like(x, like, dtype) for x in plain)


def as_size(n) -> int:
    """`n` as a size: an int as it is (a traced size keeps its formula: `ember.backend.capture.SymInt`),
    anything else through `operator.index` (NumPy integers; TypeError for floats).

    Example:
        >>> as_size(np.int64(3))
        3
    """
    return n if isinstance(n, int) and not isinstance(n, bool) else operator.index(n)


def shape_arg(shape, op: str) -> tuple[int, ...]:
    """Accept `f(2, 3)`, `f((2, 3))` and `f([2, 3])` alike; `ShapeError` naming `op` for a size that is
    not an integer or is negative.

    Example:
        >>> shape_arg(((2, 3),), "zeros")
        (2, 3)
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    try:
        out = tuple(as_size(n) for n in shape)
    except TypeError:
        raise ShapeError(op, f"sizes must be integers, got shape {tuple(shape)}") from None
    if min(out, default=0) < 0:
        raise ShapeError(op, f"negative dimension in shape {out}")
    return out
