"""Optimizer updates as one kernel per parameter: Adam and AdamW (with AMSGrad).

`adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scalars)` reads the parameter, its
gradient and its moments and writes, in one pass, a packed array of `param.shape[0] * rows` leading
rows: the new parameter, the new first moment, the new second moment and (AMSGrad, `rows == 4`) the
new running maximum of the second moment, each a contiguous block of `param.size` elements in the
parameter's dtype. Packing along the first dim lets the caller take each block back with one slice
(`ember/optim/fused.py`).

The hyperparameters are a runtime array `scalars` (`SCALARS` names its slots), so a training loop
compiles one kernel per (dtypes, AMSGrad) and never one per step or learning rate. Per element, with
T the compute type (f32 for f16/bf16 parameters, else their own type) and `store(x)` a rounding to
the parameter's dtype (the identity for f32/f64):

    g = store(grad);  p = store(param * keep)               keep = 1 - lr * wd (AdamW), else 1
    g = store(g + l2 * p)  when l2 != 0                      l2 = wd (Adam's coupled decay), else 0
    m = store(b1 * exp_avg + (1 - b1) * g)
    v = store(b2 * exp_avg_sq + ((1 - b2) * g) * g)
    v = vmax = store(maximum(max_exp_avg_sq, v))             (AMSGrad; NaN wins, as NumPy's maximum)
    p - (step_size * m) / (sqrt(v) / bias2 + eps)            step_size = lr / (1 - b1^t), bias2 = sqrt(1 - b2^t)

which is the order of operations of the composed update (`ember/optim/adam.py` before this kernel),
so f32 and f64 results agree with it to the rounding of a fused multiply-add, and the stored values
are rounded where the composed ops and PyTorch round them.

Example:
    >>> p = np.ones(3, np.float32); z = np.zeros(3, np.float32)
    >>> s = scalars(np.float32, lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=True, step=1)
    >>> adam_update(p, p, z, z, None, s)[:3]        # the first step moves every weight by lr
    array([0.90000004, 0.90000004, 0.90000004], dtype=float32)
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ... import cube
from ...errors import DTypeError, ShapeError
from .common import MAX_ELEMENTS, contiguous, cube_dtype, empty, grid, position
from .elementwise import binary_op

SCALARS = ("keep", "l2", "b1", "one_minus_b1", "b2", "one_minus_b2", "bias2", "eps", "step_size")
"""The slots of the `scalars` array, in order."""


@cube.kernel
def adam_kernel(param: cube.Array, grad: cube.Array, exp_avg: cube.Array, exp_avg_sq: cube.Array,
                max_exp_avg_sq: cube.Array, scalars: cube.Array, out: cube.Array, n: cube.i32,
                T: cube.Comptime, amsgrad: cube.Comptime[bool], shifted: cube.Comptime[bool]):
    """One Adam step of element i (see the module docstring); out holds the rows p, m, v[, vmax]."""
    # Read once per cube, before the unit loop (the C target hoists uniform values, not loads under it).
    keep, l2, b1, c1, b2, c2, bias2, eps, step_size = (T(scalars[k]) for k in range(len(SCALARS)))
    i = position(n, shifted)
    if shifted or i < n:
        s = out.dtype
        p = T(s(T(param[i]) * keep))
        g = T(s(grad[i]))
        g = cube.select(l2 == T(0), g, T(s(g + l2 * p)))
        m = T(s(b1 * T(exp_avg[i]) + c1 * g))
        v = T(s(b2 * T(exp_avg_sq[i]) + c2 * g * g))
        out[n + i] = s(m)
        out[2 * n + i] = s(v)
        if amsgrad:
            v = T(s(binary_op("maximum", T(max_exp_avg_sq[i]), v)))
            out[3 * n + i] = s(v)
        out[i] = s(p - step_size * m / (cube.sqrt(v) / bias2 + eps))


@functools.lru_cache(maxsize=64)
def compute_dtype(dtype) -> np.dtype:
    """The type the update computes in for parameters of `dtype`: f32 for f16/bf16, else itself.

    Example:
        >>> compute_dtype(np.float16)
        dtype('float32')
    """
    t = cube_dtype(dtype)
    if not t.is_float:
        raise DTypeError(f"adam_update: parameters must have a float dtype, got {t.name}")
    return np.dtype(np.float32) if t.itemsize < 4 else np.dtype(t.np)


def scalars(dtype, *, lr: float, betas: tuple, eps: float, weight_decay: float, decoupled: bool,
            step: int) -> np.ndarray:
    """The `scalars` array of one Adam step (`SCALARS` order) in `compute_dtype(dtype)`; every value is
    computed in Python floats first, as the composed update computed its Python scalars.

    Example:
        >>> scalars(np.float64, lr=0.1, betas=(0.5, 0.75), eps=0.0, weight_decay=0.0, decoupled=False, step=1)
        array([1.  , 0.  , 0.5 , 0.5 , 0.75, 0.25, 0.5 , 0.  , 0.2 ])
    """
    b1, b2 = betas
    values = (1 - lr * weight_decay if decoupled else 1.0, 0.0 if decoupled else weight_decay,
              b1, 1 - b1, b2, 1 - b2, math.sqrt(1 - b2 ** step), eps, lr / (1 - b1 ** step))
    return np.array(values, dtype=compute_dtype(dtype))


def packed_shape(shape: tuple, rows: int) -> tuple:
    """The shape of the packed result for a parameter of `shape`: `rows` blocks along the first dim
    (a 0-d parameter gets `(rows,)`).

    Example:
        >>> packed_shape((4, 5), 3)
        (12, 5)
    """
    shape = tuple(shape)
    return (rows * shape[0],) + shape[1:] if shape else (rows,)


def check_shapes(param: tuple, grad: tuple, exp_avg: tuple, exp_avg_sq: tuple, max_exp_avg_sq: tuple | None,
                 scalars_: tuple) -> None:
    """Raise `ShapeError` unless operands of these shapes fit one Adam update (`max_exp_avg_sq` None:
    no AMSGrad) whose packed result the kernel can index (at most 2**31 - 1 elements; checked here, with
    the shapes, so that the op raises at the call on every device, even where it runs later).

    Example:
        >>> check_shapes((4, 5), (4, 5), (4, 5), (4, 5), None, (len(SCALARS),))
    """
    for name, shape in (("grad", grad), ("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq),
                        ("max_exp_avg_sq", max_exp_avg_sq)):
        if shape is not None and tuple(shape) != tuple(param):
            raise ShapeError("adam_update", f"{name} has shape {tuple(shape)}, the parameter {tuple(param)}")
    if tuple(scalars_) != (len(SCALARS),):
        raise ShapeError("adam_update", f"scalars must have shape ({len(SCALARS)},) (the slots {SCALARS}), "
                                        f"got {tuple(scalars_)}")
    packed = packed_shape(param, 3 if max_exp_avg_sq is None else 4)
    if math.prod(packed) > MAX_ELEMENTS:
        raise ShapeError("adam_update", f"the packed result {packed} has more than 2**31 - 1 elements "
                                        f"(kernels index with i32)")


@functools.lru_cache(maxsize=256)  # dtypes are few and hashable: the checks run once per combination
def check_dtypes(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scalars_) -> None:
    """Raise `DTypeError` unless operands of these dtypes (ember DTypes or NumPy dtypes) fit one Adam
    update: float tensors, and `scalars` in the parameter's `compute_dtype`.

    Example:
        >>> check_dtypes(np.float16, np.float16, np.float16, np.float16, None, np.float32)
    """
    want = compute_dtype(param)
    for name, dtype in (("grad", grad), ("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq),
                        ("max_exp_avg_sq", max_exp_avg_sq)):
        if dtype is not None and not cube_dtype(dtype).is_float:
            raise DTypeError(f"adam_update: {name} must have a float dtype, got {cube_dtype(dtype).name}")
    if cube_dtype(scalars_) != cube_dtype(want):
        raise DTypeError(f"adam_update: scalars must be {cube_dtype(want).name} for a {cube_dtype(param).name} "
                         f"parameter (its compute dtype), got {cube_dtype(scalars_).name}")


def _check(*arrays) -> None:
    check_shapes(*(None if a is None else a.shape for a in arrays))
    check_dtypes(*(None if a is None else a.dtype for a in arrays))


def adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scalars_):
    """The packed result of one Adam step (see the module docstring); `max_exp_avg_sq` None: no AMSGrad.
    Operands may have any layout (strided ones are copied to contiguous first).

    Example:
        >>> adam_update(p, g, m, v, None, s).shape       # p, g, m, v of shape (4, 5)
        (12, 5)
    """
    _check(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scalars_)
    amsgrad = max_exp_avg_sq is not None
    arrays = [contiguous(a) for a in (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq if amsgrad else exp_avg_sq,
                                      scalars_)]
    out = empty(packed_shape(param.shape, 4 if amsgrad else 3), param.dtype, arrays[0])
    n = int(param.size)
    if n:
        count, dim = grid(n)
        adam_kernel.launch(count, dim, *arrays, out, n, T=cube_dtype(compute_dtype(param.dtype)), amsgrad=amsgrad,
                           shifted=n >= dim.x)
    return out


def adam_reference(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scalars_) -> np.ndarray:
    """`adam_update` in NumPy, the same operations in the same order (the NumPy device and tests use it).

    Example:
        >>> adam_reference(p, g, m, v, None, s).shape    # p, g, m, v of shape (4, 5)
        (12, 5)
    """
    _check(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scalars_)
    t, s = compute_dtype(param.dtype), param.dtype
    keep, l2, b1, c1, b2, c2, bias2, eps, step_size = (t.type(x) for x in np.asarray(scalars_, t))

    def store(x):
        return x if s == t else x.astype(s).astype(t)

    with np.errstate(all="ignore"):
        p = store(param.astype(t) * keep)
        g = store(grad)
        if l2 != 0:
            g = store(g + l2 * p)
        m = store(b1 * exp_avg.astype(t) + c1 * g)
        v = store(b2 * exp_avg_sq.astype(t) + c2 * g * g)
        rows = [None, m, v]
        if max_exp_avg_sq is not None:
            v = store(np.maximum(max_exp_avg_sq.astype(t), v))
            rows.append(v)
        rows[0] = p - step_size * m / (np.sqrt(v) / bias2 + eps)
    packed = np.concatenate([r.astype(s).reshape(1, -1) for r in rows])
    return packed.reshape(packed_shape(param.shape, len(rows)))
