"""A custom op: fused matmul + bias + ReLU as one cube kernel, with its gradient (`@ember.backend_extension`).

`matmul_bias_relu(x, w, b)` is relu(x @ w + b) for x of shape (*, k), w (k, n) and b (n,), like a
`Linear` layer of weight `w.T` followed by a ReLU, but the bias and the ReLU are applied to the matmul's accumulators
in registers: the pre-activation never goes to memory. The kernel is the library matmul's register
tiling (`ember.kernels.matmul`: a cube computes `rows` x `units` outputs, one column per unit,
`rows` accumulators each, through the library's `fma_step`) with a bias-and-ReLU epilogue.

Its gradient is composed from ember ops: with g the output gradient masked where the output is 0,
dx = g @ w.T, dw = x.T @ g and db = g summed over rows. On `Device.numpy()` (no cube target) the op runs
its NumPy reference.

    python -m ember.examples.custom_op      # checks the kernel against (x @ w + b).relu(), prints both

Example:
    >>> x, w, b = (ember.randn(*s, device=ember.Device.cpu()) for s in [(8, 32), (32, 16), (16,)])
    >>> matmul_bias_relu(x, w, b).shape
    (8, 16)
"""

from __future__ import annotations

import math

import numpy as np

import ember
from ember import cube
from ember.kernels.common import check_size, cube_dtype, empty
from ember.kernels.layout import element_strides
from ember.kernels.matmul import DEFAULT_TILE, fma_step
from ember.errors import DTypeError, ShapeError


@cube.kernel
def matmul_bias_relu_kernel(x: cube.Array, w: cube.Array, bias: cube.Array, out: cube.Array, m: cube.i32,
                            n: cube.i32, k: cube.i32, sxm: cube.i32, sxk: cube.i32, swk: cube.i32, swn: cube.i32,
                            sb: cube.i32, T: cube.Comptime, rows: cube.Comptime[int], units: cube.Comptime[int],
                            w_unit_n: cube.Comptime[bool], depth: cube.Comptime[int]):
    # As in the library matmul, the last tile along each axis is shifted back to end at the edge (the
    # host guarantees m >= rows and n >= units): overlapping tiles write the same values twice.
    m0 = cube.min(cube.CUBE_POS_X * rows, m - rows)
    col = cube.min(cube.CUBE_POS_Y * units, n - units) + cube.UNIT_POS_X
    w_col = col * (1 if w_unit_n else swn)
    acc = tuple(T(0) for _ in range(rows))
    k_main = k - k % depth
    for k0 in range(0, k_main, depth):
        for kk in cube.unroll(range(depth)):
            acc = fma_step(x, w, acc, 0, m0, w_col, k0 + kk, sxm, sxk, swk, T, rows)
    for kk in range(k_main, k):
        acc = fma_step(x, w, acc, 0, m0, w_col, kk, sxm, sxk, swk, T, rows)
    b = T(bias[col * sb])
    for r in cube.unroll(range(rows)):
        v = acc[r] + b
        out[(m0 + r) * n + col] = out.dtype(cube.select(v <= T(0), T(0), v))  # NaN stays NaN, as in relu


def _shape(x: tuple, w: tuple, b: tuple) -> tuple:
    """relu(x @ w + b) has shape (*x[:-1], w[1]); raises `ShapeError` naming all three shapes."""
    if len(x) < 1 or len(w) != 2 or len(b) != 1 or x[-1] != w[0] or b[0] != w[1]:
        raise ShapeError("matmul_bias_relu", f"needs x (*, k), w (k, n) and b (n,), got x {x}, w {w} and "
                                             f"b {b}")
    return x[:-1] + (w[1],)


def _dtype(x, w, b):
    """The inputs' common floating dtype."""
    if not (x is w is b) or not x.is_float:
        raise DTypeError(f"matmul_bias_relu: needs x, w and b of one floating dtype, got {x}, {w} and {b}")
    return x


def _reference(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """relu(x @ w + b) in NumPy (f16/bf16 computed in f32): the oracle, and the op on Device.numpy()."""
    acc = np.float32 if x.dtype.itemsize < 4 else x.dtype
    y = x.astype(acc) @ w.astype(acc) + b.astype(acc)
    return np.where(y <= 0, 0, y).astype(x.dtype)


def _backward(grad: ember.Tensor, out: ember.Tensor, x: ember.Tensor, w: ember.Tensor, b: ember.Tensor):
    """Gradients of relu(x @ w + b): the ReLU masks the output gradient, then it is a matmul's."""
    g = grad.masked_fill(out <= 0, 0)
    m, (k, n) = math.prod(x.shape[:-1]), w.shape
    g2 = g.reshape(m, n)
    return g @ w.T, x.reshape(m, k).T @ g2, g2.sum(0)


@ember.backend_extension(shape=_shape, dtype=_dtype, backward=_backward, reference=_reference)
def matmul_bias_relu(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """relu(x @ w + b) as one cube kernel (see the module docstring), on the arrays of any cube runtime.

    Example:
        >>> matmul_bias_relu(x, w, b)          # x, w, b ember tensors on Device.cpu()
    """
    k, n = w.shape
    m = math.prod(x.shape[:-1])
    x2 = x.reshape(m, k)
    out = empty((m, n), x.dtype, x, w, b)  # on the inputs' runtime (NumPy on the CPU, else device memory)
    check_size("matmul_bias_relu", x2, w, b, out)
    if out.size:
        t = cube_dtype(x.dtype)
        tile = DEFAULT_TILE
        rows, units = min(tile.rows, m), min(tile.units, n)
        (sxm, sxk), (swk, swn), (sb,) = element_strides(x2), element_strides(w), element_strides(b)
        count = cube.CubeCount(-(-m // rows), -(-n // units))
        matmul_bias_relu_kernel.launch(count, cube.CubeDim(units), x2, w, b, out, m, n, k, sxm, sxk, swk, swn,
                                       sb, T=cube.f32 if t.itemsize < 4 else t, rows=rows, units=units,
                                       w_unit_n=swn == 1, depth=tile.depth)
    return out.reshape(x.shape[:-1] + (n,))


def main() -> None:
    """Run the op on random inputs on Device.cpu() and compare it with (x @ w + b).relu()."""
    device = ember.Device.cpu()
    x, w, b = (ember.randn(*s, device=device) for s in [(64, 256), (256, 128), (128,)])
    fused, composed = matmul_bias_relu(x, w, b), (x @ w + b).relu()
    error = float((fused - composed).abs().max())
    print(f"matmul_bias_relu on {device!r}: output {fused.shape}, max difference from (x @ w + b).relu() "
          f"{error:.2e}")


if __name__ == "__main__":
    main()
