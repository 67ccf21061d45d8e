"""The leaf and panel kernels of `ember.linalg`'s blocked factorizations (blocked.py) and their launchers.

Each takes batches of C-contiguous matrices (flat, with the block's offset), a cube per matrix; steps
every unit needs (a pivot search, a reflector's norm) are computed by every unit alike, and steps are
separated by barriers. On the C target a cube is one unit (`lanes`): its loops `range(lo + u, hi,
units)` then run along contiguous rows, which gcc vectorizes; panels whose steps go down columns (LU,
QR) work on their transpose. LAPACK's conventions are kept where torch reports them: 1-based pivots,
the first zero pivot or failing minor as `info`, reflectors with beta = -sign(alpha) * norm (larfg).

- `lu_panel`: partial pivoting (the first largest |a_ik|, as idamax) on a panel of columns;
- `cholesky_leaf`: U^T U of a diagonal block from its upper triangle;
- `triangular_leaf`: X = A^-1 X by substitution (lower or upper, unit diagonal or not);
- `qr_panel` and `t_factor`: Householder reflectors of a panel and its compact-WY T (larft);
- `dot` / `partial_dot`: dot products in vectorizable partial sums.

Example:
    >>> lu, piv, info = x.copy(), np.zeros((1, 2), np.int32), np.zeros(1, np.int32)
    >>> lu_panel(lu, np.empty((1, 2, 2)), piv, info, 0, 2)        # x = [[[0., 1.], [2., 3.]]]
    >>> piv.tolist(), info.tolist()
    ([[2, 2]], [0])
"""

from __future__ import annotations

import numpy as np

from .. import cube
from ..errors import DTypeError
from ..kernels.common import assign, empty
from ..kernels.reduce import block_reduce
from ..cube.kernel import launch_runtime

DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
LANES = 16  # partial sums per unit of `dot`


def check_dtype(op: str, dtype) -> None:
    """`DTypeError` naming `op` unless `dtype` is f32 or f64 (torch.linalg refuses half precision too)."""
    if np.dtype(dtype) not in DTYPES:
        raise DTypeError(f"linalg.{op}: needs float32 or float64 matrices, got {np.dtype(dtype)}")


def lanes(x, wide: int) -> int:
    """Units per cube of a leaf kernel on x's runtime: 1 on the C target, where gcc then vectorizes each
    loop along a row (the kernels' `range(lo + u, hi, units)` loops), `wide` on GPUs."""
    return 1 if launch_runtime(x).target == "cpu" else wide


@cube.function
def partial_dot(x, xa, y, ya, n, part, parts):
    """The sum of x[xa + i] * y[ya + i] over part `part` of `parts` of i < n (runs of `LANES` in turn), in
    `LANES` partial sums: one vector on the C target, where a single running sum would not vectorize."""
    T = x.dtype
    step = LANES * parts
    full = n - n % step
    acc = tuple(T(0) for _ in range(LANES))
    for i in range(part * LANES, full, step):
        acc = tuple(acc[l] + x[xa + i + l] * y[ya + i + l] for l in range(LANES))
    s = acc[0]
    for l in cube.unroll(range(1, LANES)):
        s = s + acc[l]
    for i in range(full + part, n, parts):
        s = s + x[xa + i] * y[ya + i]
    return s


@cube.function
def dot(x, xa, y, ya, n, units):
    """The sum of x[xa + i] * y[ya + i] for i < n, shared by the cube's units (each sums its part), for all."""
    return block_reduce("sum", partial_dot(x, xa, y, ya, n, cube.UNIT_POS, units), units)


@cube.function
def subtract_rows(x, xa, lo, hi, count, v, v0, f, f0, fs, n, units):
    """x[xa + r] -= the sum over l < count of v[v0 + l n + r] f[f0 + l fs], for r in [lo, hi) (the cube's
    units sharing r): a vector's update by the rows of a panel (labrd's and latrd's small products)."""
    for l in range(0, count):
        g = f[f0 + l * fs]
        for r in range(lo + cube.UNIT_POS, hi, units):
            x[xa + r] = x[xa + r] - v[v0 + l * n + r] * g


@cube.function
def transposed_product(out, oa, r0, c0, v, va, a, a0, n, units):
    """out[oa + c] = the sum over r in [r0, n) of v[va + r] a[a0 + r n + c] for c in [c0, n), 0 below c0 (the
    cube's units sharing c): a panel column's A^T v (labrd's Y columns, latrd's W columns)."""
    for c in range(cube.UNIT_POS, n, units):
        out[oa + c] = out.dtype(0)
    cube.sync_units()
    for r in range(r0, n):
        vr = v[va + r]
        for c in range(c0 + cube.UNIT_POS, n, units):
            out[oa + c] = out[oa + c] + vr * a[a0 + r * n + c]


@cube.function
def panel_dots(out, at, count, v, v0, y, y0, length, n, units):
    """out[at + l] = the dot of v[v0 + l n:] and y[y0:] over `length` elements, for l < count (unit 0 writes)."""
    for l in range(0, count):
        t = dot(v, v0 + l * n, y, y0, length, units)
        if cube.UNIT_POS == 0:
            out[at + l] = t


# ---- LU with partial pivoting ------------------------------------------------------------------------
@cube.kernel
def lu_panel_kernel(a: cube.Array, t: cube.Array, piv: cube.Array[cube.i32], info: cube.Array[cube.i32],
                    m: cube.i32, ld: cube.i32, stride: cube.i32, k0: cube.i32, w: cube.i32, kmax: cube.i32,
                    t_stride: cube.i32, units: cube.Comptime[int]):
    """LU with partial pivoting of rows [k0, m), columns [k0, k0 + w) of each matrix (a cube each), worked
    on as its transpose in t (w rows of m - k0, so that every step runs along contiguous rows):
    interchanges within those columns, pivots (1-based rows) into piv[:, k0:k0 + w], the first zero
    pivot (1-based) into info where info is still 0."""
    T = a.dtype
    u = cube.UNIT_POS
    b = cube.CUBE_POS
    base = b * stride + k0 * ld + k0
    rows = m - k0
    tb = b * t_stride
    for j in range(0, w):
        for i in range(u, rows, units):
            t[tb + j * rows + i] = a[base + i * ld + j]
    cube.sync_units()
    bad = cube.i32(0)
    for k in range(0, w):
        tk = tb + k * rows
        p = k
        best = cube.abs(t[tk + k])
        for i in range(k + 1, rows):
            v = cube.abs(t[tk + i])
            p = cube.select(v > best, i, p)
            best = cube.select(v > best, v, best)
        cube.sync_units()
        for j in range(u, w, units):
            x = t[tb + j * rows + k]
            t[tb + j * rows + k] = t[tb + j * rows + p]
            t[tb + j * rows + p] = x
        if u == 0:
            piv[b * kmax + k0 + k] = k0 + p + 1
        cube.sync_units()
        pivot = t[tk + k]
        bad = cube.select((pivot == T(0)) and (bad == 0), k0 + k + 1, bad)
        inv = cube.select(pivot == T(0), T(0), T(1) / cube.select(pivot == T(0), T(1), pivot))
        for i in range(k + 1 + u, rows, units):
            t[tk + i] = t[tk + i] * inv
        cube.sync_units()
        for j in range(k + 1, w):
            f = t[tb + j * rows + k]
            for i in range(k + 1 + u, rows, units):
                t[tb + j * rows + i] = t[tb + j * rows + i] - f * t[tk + i]
        cube.sync_units()
    for i in range(u, rows, units):
        for j in range(0, w):
            a[base + i * ld + j] = t[tb + j * rows + i]
    if u == 0:
        old = info[b]
        info[b] = cube.select(old == 0, bad, old)


def lu_panel(x, t, piv, info, k0: int, w: int) -> None:
    """`lu_panel_kernel` on columns [k0, k0 + w) of each matrix of x (count, m, n); t (count, >= w, m) is
    its scratch."""
    count, m, n = x.shape
    units = lanes(x, 64)
    lu_panel_kernel.launch(cube.CubeCount(count), cube.CubeDim(units), x.reshape(-1), t.reshape(-1),
                           piv.reshape(-1), info.reshape(-1), m, n, m * n, k0, w, piv.shape[-1],
                           t.shape[1] * t.shape[2], units=units)


def zero(x) -> None:
    assign(x, np.zeros((), x.dtype))


def transposed(x):
    """x with its last two dims swapped (a view, NumPy or device array)."""
    axes = list(range(x.ndim))
    axes[-2:] = axes[:-3:-1]
    return x.transpose(*axes)


# ---- Cholesky ----------------------------------------------------------------------------------------
@cube.kernel
def cholesky_kernel(a: cube.Array, info: cube.Array[cube.i32], n: cube.i32, ld: cube.i32, stride: cube.i32,
                    k0: cube.i32, units: cube.Comptime[int]):
    """U^T U of rows and columns [k0, k0 + n) of each matrix (a cube each) from their upper triangle, the
    lower one zeroed; the order (from the matrix's first row) of the first minor that is not positive
    definite into info where info is still 0."""
    T = a.dtype
    u = cube.UNIT_POS
    b = cube.CUBE_POS
    base = b * stride + k0 * ld + k0
    bad = cube.i32(0)
    for k in range(0, n):
        d = a[base + k * ld + k]
        bad = cube.select((not (d > T(0))) and (bad == 0), k0 + k + 1, bad)
        sd = cube.sqrt(cube.select(bad == 0, d, T(1)))
        r = cube.select(bad == 0, T(1) / sd, T(0))
        cube.sync_units()
        for j in range(k + 1 + u, n, units):
            a[base + k * ld + j] = a[base + k * ld + j] * r
        if u == 0:
            a[base + k * ld + k] = cube.select(bad == 0, sd, d)
        cube.sync_units()
        for i in range(k + 1, n):
            uki = a[base + k * ld + i]
            for j in range(i + u, n, units):
                a[base + i * ld + j] = a[base + i * ld + j] - uki * a[base + k * ld + j]
        cube.sync_units()
    for i in range(1, n):
        for j in range(u, i, units):
            a[base + i * ld + j] = T(0)
    if u == 0:
        old = info[b]
        info[b] = cube.select(old == 0, bad, old)


def cholesky_leaf(x, info, k0: int, n: int) -> None:
    """`cholesky_kernel` on rows and columns [k0, k0 + n) of each matrix of x (count, N, N)."""
    count, rows, ld = x.shape
    units = lanes(x, 64)
    cholesky_kernel.launch(cube.CubeCount(count), cube.CubeDim(units), x.reshape(-1), info.reshape(-1), n, ld,
                           rows * ld, k0, units=units)


# ---- triangular solve --------------------------------------------------------------------------------
@cube.kernel
def triangular_kernel(a: cube.Array, x: cube.Array, n: cube.i32, k: cube.i32, a_at: cube.i32, a_rs: cube.i32,
                      a_cs: cube.i32, a_stride: cube.i32, x_at: cube.i32, x_ld: cube.i32, x_stride: cube.i32,
                      lower: cube.Comptime[bool], unit: cube.Comptime[bool], tile: cube.Comptime[int],
                      units: cube.Comptime[int]):
    """X = A^-1 X by substitution, row by row (each row of X then updates the rows after it), for X (n x k
    at x_at, rows x_ld apart) and triangular A (n x n at a_at, strides a_rs, a_cs); cube (matrix, tile of
    `tile` columns), its units sharing the columns."""
    c0 = cube.CUBE_POS_Y * tile
    c1 = cube.min(c0 + tile, k)
    u = cube.UNIT_POS
    abase = cube.CUBE_POS_X * a_stride + a_at
    xbase = cube.CUBE_POS_X * x_stride + x_at
    for step in range(0, n):
        i = step if lower else n - 1 - step
        if not unit:
            d = a[abase + i * a_rs + i * a_cs]
            for j in range(c0 + u, c1, units):
                x[xbase + i * x_ld + j] = x[xbase + i * x_ld + j] / d
        lo = i + 1 if lower else 0
        hi = n if lower else i
        for r in range(lo, hi):
            f = a[abase + r * a_rs + i * a_cs]
            for j in range(c0 + u, c1, units):
                x[xbase + r * x_ld + j] = x[xbase + r * x_ld + j] - f * x[xbase + i * x_ld + j]


def triangular_leaf(a, x, lower: bool, unit: bool) -> None:
    """`triangular_kernel` for blocks a (n x n) and x (n x k, not transposed) of two batches (`blocks.Block`)."""
    n, k = x.rows, x.cols
    units = lanes(x.x, 64)
    tile = 256 if units == 1 else units
    a_rs, a_cs = a.strides
    triangular_kernel.launch(cube.CubeCount(x.count, -(-k // tile)), cube.CubeDim(units), a.flat, x.flat, n, k,
                             a.offset, a_rs, a_cs, a.stride, x.offset, x.ld, x.stride, lower=bool(lower),
                             unit=bool(unit), tile=tile, units=units)


# ---- Householder QR ----------------------------------------------------------------------------------
@cube.function
def householder(alpha, sigma):
    """(beta, tau, scale) of the reflector H = I - tau v v^T with H [alpha; x] = [beta; 0], v = [1; x * scale],
    from sigma = |x|^2: LAPACK's larfg (beta = -sign(alpha) |[alpha; x]|; H = I when x = 0)."""
    T = alpha.dtype
    norm = cube.sqrt(alpha * alpha + sigma)
    flat = sigma == T(0)
    beta = cube.select(flat, alpha, cube.select(alpha >= T(0), -norm, norm))
    tau = cube.select(flat, T(0), (beta - alpha) / cube.select(flat, T(1), beta))
    scale = cube.select(flat, T(0), T(1) / cube.select(flat, T(1), alpha - beta))
    return beta, tau, scale


@cube.function
def reflect(x, xa, at, n, units):
    """(beta, tau) of the reflector taking x[xa + at:xa + n] to beta e_1 (`householder`), whose v (but its
    leading 1) is written over x[xa + at + 1:xa + n]; x[xa + at] is left to the caller."""
    beta, tau, scale = householder(x[xa + cube.min(at, n - 1)], dot(x, xa + at + 1, x, xa + at + 1, n - at - 1, units))
    for r in range(at + 1 + cube.UNIT_POS, n, units):
        x[xa + r] = x[xa + r] * scale
    return beta, tau


@cube.kernel
def qr_panel_kernel(a: cube.Array, vs: cube.Array, taus: cube.Array, m: cube.i32, n: cube.i32, kmax: cube.i32,
                    k0: cube.i32, w: cube.i32, units: cube.Comptime[int]):
    """Householder QR of columns [k0, k0 + w) (rows from k0) of each matrix (a cube each), worked on as
    rows k0 .. k0 + w - 1 of vs (count, kmax, m), which end up holding the reflectors (v_k = 1, zeros
    before it), their taus in taus (count, kmax); R's part in place (zeros below the diagonal)."""
    T = a.dtype
    u = cube.UNIT_POS
    base = cube.CUBE_POS * m * n
    vb = cube.CUBE_POS * kmax * m
    for j in range(0, w):
        for i in range(k0 + u, m, units):
            vs[vb + (k0 + j) * m + i] = a[base + i * n + k0 + j]
    cube.sync_units()
    for k in range(k0, k0 + w):
        vk = vb + k * m
        for i in range(k0 + u, k, units):
            a[base + i * n + k] = vs[vk + i]
        for i in range(k + 1 + u, m, units):
            a[base + i * n + k] = T(0)
        beta, tau = reflect(vs, vk, k, m, units)
        cube.sync_units()
        for i in range(u, k, units):
            vs[vk + i] = T(0)
        if u == 0:
            a[base + k * n + k] = beta
            vs[vk + k] = T(1)
            taus[cube.CUBE_POS * kmax + k] = tau
        cube.sync_units()
        for j in range(k + 1, k0 + w):
            f = tau * dot(vs, vk + k, vs, vb + j * m + k, m - k, units)
            for i in range(k + u, m, units):
                vs[vb + j * m + i] = vs[vb + j * m + i] - f * vs[vk + i]
            cube.sync_units()


def qr_panel(r, vs, taus, k0: int, w: int) -> None:
    """`qr_panel_kernel` on columns [k0, k0 + w) of each matrix of r (count, m, n)."""
    count, m, n = r.shape
    units = lanes(r, 64)
    qr_panel_kernel.launch(cube.CubeCount(count), cube.CubeDim(units), r.reshape(-1), vs.reshape(-1),
                           taus.reshape(-1), m, n, vs.shape[1], k0, w, units=units)


@cube.kernel
def t_factor_kernel(s: cube.Array, taus: cube.Array, t: cube.Array, w: cube.i32, kmax: cube.i32, k0: cube.i32,
                    units: cube.Comptime[int]):
    """T (w x w, upper) with H_k0 ... H_(k0+w-1) = I - V T V^T from S = V^T V (count, w, w) and the taus
    (LAPACK's larft, forward and columnwise: T[:i, i] = -tau_i T[:i, :i] S[:i, i]); a cube per matrix."""
    T = t.dtype
    u = cube.UNIT_POS
    b = cube.CUBE_POS
    base = b * w * w
    for i in range(0, w):
        tau = taus[b * kmax + k0 + i]
        for j in range(u, w, units):
            acc = T(0)
            for l in range(j, i):
                acc = acc + t[base + j * w + l] * s[base + l * w + i]
            t[base + j * w + i] = cube.select(j < i, -tau * acc, cube.select(j == i, tau, T(0)))
        cube.sync_units()


def t_factor(s, taus, k0: int, w: int):
    """`t_factor_kernel`: the (count, w, w) T of reflectors [k0, k0 + w) from S = V^T V."""
    count = s.shape[0]
    t = empty((count, w, w), s.dtype, s)
    units = lanes(s, 32)
    t_factor_kernel.launch(cube.CubeCount(count), cube.CubeDim(units), s.reshape(-1), taus.reshape(-1),
                           t.reshape(-1), w, taus.shape[-1], k0, units=units)
    return t
