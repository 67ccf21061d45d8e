"""Optimizer updates as one kernel per parameter: Adam and AdamW (with AMSGrad).

`adam_update(param, grad, moments, scalars, amsgrad=, first=)` reads the parameter, its gradient and its
moments and writes, in one pass, a packed array of `param.shape[0] * rows` leading rows: the new
parameter, the new first moment, the new second moment and (AMSGrad, `rows == 4`) the new running
maximum of the second moment, each a contiguous block of `param.size` elements in the parameter's dtype.
`moments` is the previous step's packed array (rows 1.. read; not read at all when `first=True`);
an `out=` packed array is written over (docs/cube.md, "The kernel library").

The hyperparameters are a runtime array `scalars` (`SCALARS` names its slots), so a training loop
compiles one kernel per (dtypes, AMSGrad, first step), never one per step or learning rate. Per
element, with T the compute type (f32 for f16/bf16 parameters) and `store(x)` a rounding to the
parameter's dtype, in the composed update's order of operations (docs/training.md, "The fused Adam
update", has the formula and why):

    m = store(b1 * exp_avg + (1 - b1) * g);  v = store(b2 * exp_avg_sq + ((1 - b2) * g) * g)
    p - (step_size * m) / (sqrt(v) / bias2 + eps)       step_size = lr / (1 - b1^t), bias2 = sqrt(1 - b2^t)

Example:
    >>> p = np.ones(3, np.float32)
    >>> s = scalars(np.float32, lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=True, step=1)
    >>> adam_update(p, p, p, s, amsgrad=False, first=True)[:3]   # the first step moves every weight by lr
    array([0.90000004, 0.90000004, 0.90000004], dtype=float32)
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .. import cube
from ..errors import DTypeError, ShapeError
from ..ops.elementwise import maximum_kernel
from ..cube.runtime.arguments import DeviceArray
from .common import MAX_ELEMENTS, contiguous, cube_dtype, empty, grid, position

PER_UNIT = 4
"""Positions per unit of the unshifted kernel (`adam_kernel`), CUBE_DIM apart."""
SCALARS = ("keep", "l2", "b1", "one_minus_b1", "b2", "one_minus_b2", "bias2", "eps", "step_size")
"""The slots of the `scalars` array, in order."""


@cube.function
def adam_element(param, grad, moments, out, i, n, keep, l2, b1, c1, b2, c2, bias2, eps, step_size, T, amsgrad, first):
    """One Adam step of element i (see the module docstring): out's rows p, m, v[, vmax] at i."""
    s = out.dtype
    p = T(s(T(param[i]) * keep))
    g = T(s(grad[i]))
    g = cube.select(l2 == T(0), g, T(s(g + l2 * p)))
    if first:
        m = T(s(c1 * g))
        v = T(s(c2 * g * g))
    else:
        m = T(s(b1 * T(moments[n + i]) + c1 * g))
        v = T(s(b2 * T(moments[2 * n + i]) + c2 * g * g))
    out[n + i] = s(m)
    out[2 * n + i] = s(v)
    if amsgrad:
        if not first:
            v = T(s(maximum_kernel(T(moments[3 * n + i]), v)))
        out[3 * n + i] = s(v)
    out[i] = s(p - step_size * m / (cube.sqrt(v) / bias2 + eps))


@cube.kernel
def adam_kernel(param: cube.Array, grad: cube.Array, moments: cube.Array, scalars: cube.Array, out: cube.Array,
                n: cube.i32, T: cube.Comptime, amsgrad: cube.Comptime[bool], first: cube.Comptime[bool],
                shifted: cube.Comptime[bool]):
    """One Adam step of element i (see the module docstring); out holds the rows p, m, v[, vmax], and
    `moments` the previous step's (not read on the first step).

    Unshifted (written over the moments), a cube wholly inside n runs unguarded and only the last one
    tests each unit: on the C target the uniform branch is lifted out of the unit loop, whose guarded
    form gcc vectorizes with masked loads and stores, 3.4x slower on Zen 4 (docs/cube.md, "Kernel
    figures")."""
    # Read once per cube, before the unit loop (the C target hoists uniform values, not loads under it).
    keep, l2, b1, c1, b2, c2, bias2, eps, step_size = (T(scalars[k]) for k in range(len(SCALARS)))
    if shifted:
        adam_element(param, grad, moments, out, position(n, shifted), n, keep, l2, b1, c1, b2, c2, bias2, eps,
                     step_size, T, amsgrad, first)
    else:
        base = cube.CUBE_POS * cube.CUBE_DIM * PER_UNIT
        if base + cube.CUBE_DIM * PER_UNIT <= n:
            for r in range(PER_UNIT):
                adam_element(param, grad, moments, out, base + r * cube.CUBE_DIM + cube.UNIT_POS, n, keep, l2, b1,
                             c1, b2, c2, bias2, eps, step_size, T, amsgrad, first)
        else:
            for r in range(PER_UNIT):
                i = base + r * cube.CUBE_DIM + cube.UNIT_POS
                if i < n:
                    adam_element(param, grad, moments, out, i, n, keep, l2, b1, c1, b2, c2, bias2, eps, step_size, T,
                                 amsgrad, first)


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


def rows(amsgrad: bool) -> int:
    """The blocks of a packed result: the parameter, exp_avg, exp_avg_sq and, with AMSGrad, max_exp_avg_sq.

    Example:
        >>> rows(amsgrad=True)
        4
    """
    return 4 if amsgrad else 3


def check_shapes(param: tuple, grad: tuple, moments: tuple, scalars_: tuple, amsgrad: bool, first: bool) -> None:
    """Raise `ShapeError` unless operands of these shapes fit one Adam update (`moments`: the previous
    packed result, not checked on the first step) whose packed result the kernel can index (at most
    2**31 - 1 elements; checked here, with the shapes, so that the op raises at the call on every device,
    even where it runs later).

    Example:
        >>> check_shapes((4, 5), (4, 5), (12, 5), (len(SCALARS),), amsgrad=False, first=False)
    """
    param = tuple(param)
    packed = packed_shape(param, rows(amsgrad))
    if tuple(grad) != param:
        raise ShapeError("adam_update", f"grad has shape {tuple(grad)}, the parameter {param}")
    if not first and tuple(moments) != packed:
        raise ShapeError("adam_update", f"moments (the previous packed result) has shape {tuple(moments)}; a "
                                        f"parameter of shape {param} needs {packed}")
    if tuple(scalars_) != (len(SCALARS),):
        raise ShapeError("adam_update", f"scalars must have shape ({len(SCALARS)},) (the slots {SCALARS}), "
                                        f"got {tuple(scalars_)}")
    if math.prod(packed) > MAX_ELEMENTS:
        raise ShapeError("adam_update", f"the packed result {packed} has more than 2**31 - 1 elements "
                                        f"(kernels index with i32)")


@functools.lru_cache(maxsize=256)  # dtypes are few and hashable: the checks run once per combination
def check_dtypes(param, grad, moments, scalars_, first: bool) -> None:
    """Raise `DTypeError` unless operands of these dtypes (ember DTypes or NumPy dtypes) fit one Adam
    update: a float parameter and gradient, moments in the parameter's dtype (not checked on the first
    step), and `scalars` in the parameter's `compute_dtype`.

    Example:
        >>> check_dtypes(np.float16, np.float32, np.float16, np.float32, False)
    """
    want = compute_dtype(param)
    if not cube_dtype(grad).is_float:
        raise DTypeError(f"adam_update: grad must have a float dtype, got {cube_dtype(grad).name}")
    if not first and cube_dtype(moments) != cube_dtype(param):
        raise DTypeError(f"adam_update: moments (the previous packed result) must be {cube_dtype(param).name}, "
                         f"the parameter's dtype, got {cube_dtype(moments).name}")
    if cube_dtype(scalars_) != cube_dtype(want):
        raise DTypeError(f"adam_update: scalars must be {cube_dtype(want).name} for a {cube_dtype(param).name} "
                         f"parameter (its compute dtype), got {cube_dtype(scalars_).name}")


def _check(param, grad, moments, scalars_, amsgrad: bool, first: bool) -> None:
    check_shapes(param.shape, grad.shape, moments.shape, scalars_.shape, amsgrad, first)
    check_dtypes(param.dtype, grad.dtype, moments.dtype, scalars_.dtype, first)


def adam_update(param, grad, moments, scalars_, *, amsgrad: bool, first: bool, out=None):
    """The packed result of one Adam step (see the module docstring): `moments` is the previous step's
    packed result (not read when `first`). Operands may have any layout (strided ones are copied to
    contiguous first). `out`: an array the result may be written over, taken when it is `moments`
    itself, C-contiguous, of the result's shape and dtype, and `param` is its first row or apart from
    it (else the result is a new array): the caller vouches that no one else reads `moments` after.

    Example:
        >>> adam_update(p, g, previous, s, amsgrad=False, first=False).shape   # p, g of shape (4, 5)
        (12, 5)
        >>> adam_update(p, g, previous, s, amsgrad=False, first=False, out=previous) is previous
        True
    """
    _check(param, grad, moments, scalars_, amsgrad, first)
    arrays = [contiguous(a) for a in (param, grad, grad if first else moments, scalars_)]
    shape = packed_shape(param.shape, rows(amsgrad))
    # Written over `out` when it may be: element i is read whole before it is written (the module docstring).
    if first or out is not moments or arrays[2] is not moments or moments.dtype != param.dtype \
            or tuple(moments.shape) != shape or not _first_row_or_apart(arrays[0], moments):
        out = empty(shape, param.dtype, arrays[0])
    n = int(param.size)
    if n:
        count, dim = grid(n)
        # A shifted launch computes a few positions twice; over a donated `out` the second pass would
        # read the moments the first one wrote, so writing over the input takes the bounds-tested form.
        shifted = n >= dim.x and out is not moments
        if not shifted:
            count, dim = grid(n, dim.x * PER_UNIT)[0], dim
        adam_kernel.launch(count, dim, *arrays, out, n, T=cube_dtype(compute_dtype(param.dtype)), amsgrad=amsgrad,
                           first=first, shifted=shifted)
    return out


def _first_row_or_apart(param, moments) -> bool:
    """Whether `param` is the first row of the packed `moments` (the optimizer's parameter) or in other
    memory: then writing the new rows over `moments` never writes an element another unit reads."""
    if isinstance(moments, DeviceArray):
        return param.owner is not moments or param.offset == moments.offset
    return param.base is not moments.base or param.ctypes.data == moments.ctypes.data


def adam_reference(param, grad, moments, scalars_, *, amsgrad: bool, first: bool) -> np.ndarray:
    """`adam_update` in NumPy, the same operations in the same order (the NumPy device and tests use it).

    Example:
        >>> adam_reference(p, g, previous, s, amsgrad=False, first=False).shape    # p, g of shape (4, 5)
        (12, 5)
    """
    _check(param, grad, moments, scalars_, amsgrad, first)
    t, s = compute_dtype(param.dtype), param.dtype
    keep, l2, b1, c1, b2, c2, bias2, eps, step_size = (t.type(x) for x in np.asarray(scalars_, t))
    n = param.size
    old = None if first else np.asarray(moments).reshape(-1).astype(t)

    def store(x):
        return x if s == t else x.astype(s).astype(t)

    with np.errstate(all="ignore"):
        p = store(param.astype(t).reshape(-1) * keep)
        g = store(grad.reshape(-1))
        if l2 != 0:
            g = store(g + l2 * p)
        m = store(c1 * g if first else b1 * old[n:2 * n] + c1 * g)
        v = store(c2 * g * g if first else b2 * old[2 * n:3 * n] + c2 * g * g)
        packed = [None, m, v]
        if amsgrad:
            if not first:
                v = store(np.maximum(old[3 * n:], v))
            packed.append(v)
        packed[0] = p - step_size * m / (np.sqrt(v) / bias2 + eps)
    return np.concatenate([r.astype(s) for r in packed]).reshape(packed_shape(param.shape, len(packed)))
