"""Cross entropy of logit rows against class indices, in one read of the logits.

`cross_entropy(x, target)` takes logits (R, C) and an index per row (R,) and gives (R, 2) in the
accumulator dtype (f32 for f16/bf16): each row's negative log likelihood `logsumexp(x_r) - x_r[y_r]`
and, beside it, the logsumexp itself, which is all the gradient needs besides x:
`d/dx = softmax(x) * (g_nll + g_lse) - onehot(y) * g_nll`.

One cube per row. Each unit walks the row in strides of the cube's units (coalesced on GPU targets)
keeping an online maximum and a sum of exp(x - maximum), rescaled when the maximum grows (the online
softmax of Milakov and Gimelshein, 2018); the units' pairs are then combined through shared memory.
The logits are read once: on the GPT step's (8192, 50257) f32 logits, against three passes of the
softmax kernel plus a written log-softmax before. Rows of -inf (every class blocked) give a logsumexp
of -inf and a NaN loss, as PyTorch's. Targets must be in range: the callers check them
(`nn.loss.classification`); the kernel does not.

Example:
    >>> cross_entropy(np.zeros((1, 4), np.float32), np.array([2], np.int32))
    array([[1.3862944, 1.3862944]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from .. import cube
from ..errors import DTypeError, ShapeError
from .common import check_size, contiguous, cube_dtype, empty, unit_rows
from .reduce import accumulator, block_reduce, row_units


@cube.function
def online_fold(m, s, v, T):
    """(max, sum of exp(x - max)) of a unit's elements so far with `v` folded in; -inf stays -inf."""
    big = cube.max(m, v)
    blocked = big == T(-np.inf)
    return big, cube.select(blocked, s, s * cube.exp(m - big) + cube.exp(v - big))


@cube.kernel
def cross_entropy_kernel(x: cube.Array, target: cube.Array, out: cube.Array, n: cube.i32, ld: cube.i32,
                         T: cube.Comptime, units: cube.Comptime[int]):
    row = cube.CUBE_POS
    base = row * ld
    m = T(-np.inf)
    s = T(0)
    for k in range(cube.UNIT_POS, n, units):
        m, s = online_fold(m, s, T(x[base + k]), T)
    top = block_reduce("max", m, units)
    total = block_reduce("sum", cube.select(m == T(-np.inf), T(0), s * cube.exp(m - top)), units)
    lse = top + cube.log(total)
    if cube.UNIT_POS == 0:
        out[2 * row] = lse - T(x[base + cube.i32(target[row])])
        out[2 * row + 1] = lse


def check_operands(op: str, x: tuple, target: tuple) -> tuple:
    """The (R, 2) result shape of logits `x` (R, C) against targets (R,), or ShapeError naming both."""
    if len(x) != 2 or tuple(target) != (x[0],):
        raise ShapeError(op, f"needs logits (R, C) and one target per row (R,), got {tuple(x)} and {tuple(target)}")
    if x[1] == 0 and x[0]:
        raise ShapeError(op, f"needs at least one class, got logits of shape {tuple(x)}")
    return (x[0], 2)


def check_dtypes(op: str, x, target) -> None:
    """DTypeError unless the logits are float and the targets integers."""
    tx, tt = cube_dtype(x), cube_dtype(target)
    if not tx.is_float or not tt.is_int:
        raise DTypeError(f"{op} needs float logits and integer targets, got {tx.name} and {tt.name}")


def cross_entropy(x, target) -> np.ndarray:
    """(R, 2): each row's `logsumexp(x_r) - x_r[target_r]` and `logsumexp(x_r)`, in the accumulator dtype.

    Example:
        >>> cross_entropy(np.log(np.array([[1.0, 3.0]], np.float32)), np.array([1]))[0, 0]   # -log(3/4)
        0.2876821
    """
    check_dtypes("cross_entropy", x.dtype, target.dtype)
    shape = check_operands("cross_entropy", x.shape, target.shape)
    check_size("cross_entropy", x)
    t = accumulator("sum", cube_dtype(x.dtype))
    (x, ld), target = unit_rows(x), contiguous(target)  # padded rows (a large cuBLAS product's) read in place
    out = empty(shape, t.np, x, target)
    if out.size:
        units = row_units(x.shape[1], t, x)
        cross_entropy_kernel.launch(cube.CubeCount(x.shape[0]), cube.CubeDim(units), x, target, out, x.shape[1],
                                    ld, T=t, units=units)
    return out
