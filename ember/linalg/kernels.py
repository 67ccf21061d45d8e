"""The cube kernels of `ember.linalg` and their host functions (arrays in, arrays out, any cube runtime).

Every kernel takes a batch of C-contiguous matrices, one cube per matrix (or per matrix and column block),
its units sharing the columns; steps that every unit needs (a pivot search, a reflector's norm, a
rotation) are computed by every unit alike (uniform work: once per cube on the C target), and the steps
are separated by barriers. LAPACK's conventions are kept where torch reports them: 1-based pivots, the
first zero pivot or failing minor as `info`, Householder reflectors with beta = -sign(alpha) * norm.

- `lu_factor(a)`: (LU, pivots, info), partial pivoting (the first largest |a_ik|, as LAPACK's idamax).
- `cholesky(a)`: (L, info), from the lower triangle.
- `solve_triangular(a, b, lower, unit)`: a unit per column of b (forward / back substitution).
- `qr(a, complete)`: (Q, R), Householder.
- `jacobi_svd(a, full)` / `jacobi_eigh(a)`: one-sided (Hestenes) Jacobi in round-robin rounds (a cube
  per pair of columns); eigh runs it on the lower triangle shifted to be positive semidefinite.

Example:
    >>> lu, piv, info = lu_factor(np.array([[0.0, 1.0], [2.0, 3.0]]))
    >>> piv.tolist(), info.tolist()
    ([2, 2], 0)
"""

from __future__ import annotations

import math

import numpy as np

from .. import cube
from ..errors import DTypeError
from ..kernels.common import assign, contiguous, copy_as, empty
from ..kernels.reduce import block_reduce

DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
MAX_SWEEPS = 40  # Jacobi sweeps before giving up (quadratic convergence: usually 6-12)


def units_for(n: int) -> int:
    """Units per cube for matrices of `n` columns: two classes, so few specializations are compiled."""
    return 32 if n <= 32 else 128


def check_dtype(op: str, dtype) -> None:
    """`DTypeError` naming `op` unless `dtype` is f32 or f64 (torch.linalg refuses half precision too)."""
    if np.dtype(dtype) not in DTYPES:
        raise DTypeError(f"linalg.{op}: needs float32 or float64 matrices, got {np.dtype(dtype)}")


# ---- LU with partial pivoting ------------------------------------------------------------------------
@cube.kernel
def lu_kernel(a: cube.Array, piv: cube.Array[cube.i32], info: cube.Array[cube.i32], m: cube.i32, n: cube.i32,
              units: cube.Comptime[int]):
    T = a.dtype
    u = cube.UNIT_POS
    base = cube.CUBE_POS * m * n
    kmax = cube.min(m, n)
    bad = cube.i32(0)
    for k in range(0, kmax):
        p = k
        best = cube.abs(a[base + k * n + k])
        for i in range(k + 1, m):
            v = cube.abs(a[base + i * n + k])
            p = cube.select(v > best, i, p)
            best = cube.select(v > best, v, best)
        cube.sync_units()
        for jb in range(0, n, units):
            j = jb + u
            if j < n:
                x = a[base + k * n + j]
                a[base + k * n + j] = a[base + p * n + j]
                a[base + p * n + j] = x
        if u == 0:
            piv[cube.CUBE_POS * kmax + k] = p + 1
        cube.sync_units()
        pivot = a[base + k * n + k]
        bad = cube.select((pivot == T(0)) and (bad == 0), k + 1, bad)
        inv = cube.select(pivot == T(0), T(0), T(1) / cube.select(pivot == T(0), T(1), pivot))
        for i in range(k + 1, m):
            lik = a[base + i * n + k] * inv
            for jb in range(k + 1, n, units):
                j = jb + u
                if j < n:
                    a[base + i * n + j] = a[base + i * n + j] - lik * a[base + k * n + j]
        cube.sync_units()
        for ib in range(k + 1, m, units):
            i = ib + u
            if i < m:
                a[base + i * n + k] = a[base + i * n + k] * inv
        cube.sync_units()
    if u == 0:
        info[cube.CUBE_POS] = bad


def lu_factor(a):
    """(LU, pivots, info) of a (..., m, n) batch: LU packs unit-lower L and U, pivots are 1-based i32
    (row i was swapped with row pivots[i] - 1), info the first zero pivot (1-based; 0: none)."""
    lu = copy_as(a, a.dtype)
    *batch, m, n = lu.shape
    count = math.prod(batch)
    piv = empty(tuple(batch) + (min(m, n),), np.int32, lu)
    info = empty(tuple(batch), np.int32, lu)
    if count:
        if m and n:
            lu_kernel.launch(cube.CubeCount(count), cube.CubeDim(units_for(n)), lu.reshape(-1), piv.reshape(-1),
                             info.reshape(-1), m, n, units=units_for(n))
        else:
            _zero(info)
    return lu, piv, info


def _zero(x) -> None:
    assign(x, np.zeros((), x.dtype))


def transposed(x):
    """x with its last two dims swapped (a view, NumPy or device array)."""
    axes = list(range(x.ndim))
    axes[-2:] = axes[:-3:-1]
    return x.transpose(*axes)


# ---- Cholesky ----------------------------------------------------------------------------------------
@cube.kernel
def cholesky_kernel(a: cube.Array, info: cube.Array[cube.i32], n: cube.i32, units: cube.Comptime[int]):
    T = a.dtype
    u = cube.UNIT_POS
    base = cube.CUBE_POS * n * n
    bad = cube.i32(0)
    for k in range(0, n):
        d = a[base + k * n + k]
        bad = cube.select((not (d > T(0))) and (bad == 0), k + 1, bad)
        sd = cube.sqrt(cube.select(bad == 0, d, T(1)))
        r = cube.select(bad == 0, T(1) / sd, T(0))
        for ib in range(k + 1, n, units):
            i = ib + u
            if i < n:
                a[base + i * n + k] = a[base + i * n + k] * r
        cube.sync_units()
        if u == 0:
            a[base + k * n + k] = cube.select(bad == 0, sd, d)
        for i in range(k + 1, n):
            lik = a[base + i * n + k]
            for jb in range(k + 1, i + 1, units):
                j = jb + u
                if j <= i:
                    a[base + i * n + j] = a[base + i * n + j] - lik * a[base + j * n + k]
        cube.sync_units()
    for i in range(0, n):
        for jb in range(i + 1, n, units):
            j = jb + u
            if j < n:
                a[base + i * n + j] = T(0)
    if u == 0:
        info[cube.CUBE_POS] = bad


def cholesky(a):
    """(L, info) of a (..., n, n) batch from its lower triangle; info is the order of the first leading
    minor that is not positive definite (0: none), and L is valid only where info is 0."""
    chol = copy_as(a, a.dtype)
    *batch, n, _ = chol.shape
    info = empty(tuple(batch), np.int32, chol)
    if math.prod(batch):
        if n:
            cholesky_kernel.launch(cube.CubeCount(math.prod(batch)), cube.CubeDim(units_for(n)), chol.reshape(-1),
                                   info.reshape(-1), n, units=units_for(n))
        else:
            _zero(info)
    return chol, info


# ---- triangular solve --------------------------------------------------------------------------------
@cube.kernel
def triangular_kernel(a: cube.Array, x: cube.Array, n: cube.i32, k: cube.i32, lower: cube.Comptime[bool],
                      unit: cube.Comptime[bool], units: cube.Comptime[int]):
    T = x.dtype
    col = cube.CUBE_POS_X * units + cube.UNIT_POS
    abase = cube.CUBE_POS_Y * n * n
    xbase = cube.CUBE_POS_Y * n * k + col
    if col < k:
        for step in range(0, n):
            i = step if lower else n - 1 - step
            s = x[xbase + i * k]
            lo = 0 if lower else i + 1
            hi = i if lower else n
            for l in range(lo, hi):
                s = s - a[abase + i * n + l] * x[xbase + l * k]
            if unit:
                x[xbase + i * k] = s
            else:
                x[xbase + i * k] = s / a[abase + i * n + i]


def solve_triangular(a, b, lower: bool, unit: bool):
    """X with a @ X = b for (..., n, n) triangular `a` (its other triangle is not read) and (..., n, k) `b`
    of the same batch shape; a zero on the diagonal gives infinities, as LAPACK's trtrs would refuse."""
    a, x = contiguous(a), copy_as(b, b.dtype)
    *batch, n, k = x.shape
    count = math.prod(batch)
    if count and n and k:
        units = units_for(k)
        triangular_kernel.launch(cube.CubeCount(-(-k // units), count), cube.CubeDim(units), a.reshape(-1),
                                 x.reshape(-1), n, k, lower=bool(lower), unit=bool(unit), units=units)
    return x


# ---- Householder QR ----------------------------------------------------------------------------------
@cube.function
def rotate_pair(a, p, q, n, cs, sn, u, units):
    """The Givens rotation of the runs a[p:p+n] and a[q:q+n] by (cs, sn), `units` lanes from lane u."""
    for ib in range(0, n, units):
        i = ib + u
        if i < n:
            x = a[p + i]
            y = a[q + i]
            a[p + i] = cs * x - sn * y
            a[q + i] = sn * x + cs * y


@cube.function
def apply_reflector(x, xbase, vs, vbase, tau, row0, m, col0, ncols, width, units):
    """x[row0:m, col0:ncols] -= tau v (v^T x[row0:m, col0:ncols]) for x of `width` columns, v = vs[vbase:]."""
    T = x.dtype
    for jb in range(col0, ncols, units):
        j = jb + cube.UNIT_POS
        jc = cube.min(j, ncols - 1)
        dot = T(0)
        for i in range(row0, m):
            dot = dot + vs[vbase + i] * x[xbase + i * width + jc]
        f = tau * dot
        for i in range(row0, m):
            value = x[xbase + i * width + jc] - f * vs[vbase + i]
            if j < ncols:
                x[xbase + i * width + j] = value


@cube.kernel
def qr_kernel(a: cube.Array, q: cube.Array, vs: cube.Array, taus: cube.Array, m: cube.i32, n: cube.i32,
              kq: cube.i32, units: cube.Comptime[int]):
    T = a.dtype
    u = cube.UNIT_POS
    kmax = cube.min(m, n)
    base = cube.CUBE_POS * m * n
    vbase0 = cube.CUBE_POS * kmax * m
    for k in range(0, kmax):
        alpha = a[base + k * n + k]
        sigma = T(0)
        for i in range(k + 1, m):
            sigma = sigma + a[base + i * n + k] * a[base + i * n + k]
        norm = cube.sqrt(alpha * alpha + sigma)
        flat = sigma == T(0)
        beta = cube.select(flat, alpha, cube.select(alpha >= T(0), -norm, norm))
        tau = cube.select(flat, T(0), (beta - alpha) / cube.select(flat, T(1), beta))
        scale = cube.select(flat, T(0), T(1) / cube.select(flat, T(1), alpha - beta))
        vbase = vbase0 + k * m
        cube.sync_units()
        for ib in range(0, m, units):
            i = ib + u
            if i < m:
                vs[vbase + i] = cube.select(i < k, T(0), cube.select(i == k, T(1), a[base + i * n + k] * scale))
                if i > k:
                    a[base + i * n + k] = T(0)
        if u == 0:
            taus[cube.CUBE_POS * kmax + k] = tau
            a[base + k * n + k] = beta
        cube.sync_units()
        apply_reflector(a, base, vs, vbase, tau, k, m, k + 1, n, n, units)
        cube.sync_units()
    qbase = cube.CUBE_POS * m * kq
    for i in range(0, m):
        for jb in range(0, kq, units):
            j = jb + u
            if j < kq:
                q[qbase + i * kq + j] = cube.select(i == j, T(1), T(0))
    cube.sync_units()
    for kk in range(0, kmax):
        k = kmax - 1 - kk
        apply_reflector(q, qbase, vs, vbase0 + k * m, taus[cube.CUBE_POS * kmax + k], k, m, k, kq, kq, units)
        cube.sync_units()


def qr(a, complete: bool):
    """(Q, R) of a (..., m, n) batch: Q (..., m, k) with k = min(m, n), or (..., m, m) when `complete`;
    R (..., k, n) or (..., m, n). R's diagonal has LAPACK's signs (beta = -sign(alpha) * norm)."""
    r = copy_as(a, a.dtype)
    *batch, m, n = r.shape
    kmax = min(m, n)
    kq = m if complete else kmax
    count = math.prod(batch)
    q = empty(tuple(batch) + (m, kq), r.dtype, r)
    if count and m:
        vs = empty((count * max(kmax, 1) * m,), r.dtype, r)
        taus = empty((count * max(kmax, 1),), r.dtype, r)
        qr_kernel.launch(cube.CubeCount(count), cube.CubeDim(units_for(max(n, kq))), r.reshape(-1), q.reshape(-1),
                         vs, taus, m, n, kq, units=units_for(max(n, kq)))
    return q, (r if complete else r[..., :kmax, :])


# ---- one-sided Jacobi --------------------------------------------------------------------------------
@cube.kernel
def jacobi_round_kernel(w: cube.Array, v: cube.Array, pairs: cube.Array[cube.i32], flags: cube.Array[cube.i32],
                        r: cube.i32, c: cube.i32, npairs: cube.i32, at: cube.i32, tol: cube.f32,
                        units: cube.Comptime[int]):
    """One round: cube (x, y) orthogonalizes columns pairs[at + x] of matrix y (rows of w: columns of
    length r; rows of v: the rotations so far); flags[y * npairs + x] says whether it rotated."""
    T = w.dtype
    u = cube.UNIT_POS
    p = pairs[2 * (at + cube.CUBE_POS_X)]
    q = pairs[2 * (at + cube.CUBE_POS_X) + 1]
    real = q < c
    qc = cube.min(q, c - 1)
    wp = cube.CUBE_POS_Y * c * r + p * r
    wq = cube.CUBE_POS_Y * c * r + qc * r
    sa = T(0)
    sb = T(0)
    sg = T(0)
    for ib in range(0, r, units):
        i = cube.min(ib + u, r - 1)
        live = ib + u < r
        x = cube.select(live, w[wp + i], T(0))
        y = cube.select(live, w[wq + i], T(0))
        sa = sa + x * x
        sb = sb + y * y
        sg = sg + x * y
    alpha = block_reduce("sum", sa, units)
    beta = block_reduce("sum", sb, units)
    gamma = block_reduce("sum", sg, units)
    rotate = real and (cube.abs(gamma) > T(tol) * cube.sqrt(alpha * beta)) and (gamma != T(0))
    zeta = (beta - alpha) / (T(2) * cube.select(gamma == T(0), T(1), gamma))
    t = cube.select(zeta >= T(0), T(1), T(-1)) / (cube.abs(zeta) + cube.sqrt(T(1) + zeta * zeta))
    cs = T(1) / cube.sqrt(T(1) + t * t)
    sn = cs * t
    if rotate:
        rotate_pair(w, wp, wq, r, cs, sn, u, units)
        rotate_pair(v, cube.CUBE_POS_Y * c * c + p * c, cube.CUBE_POS_Y * c * c + qc * c, c, cs, sn, u, units)
    if u == 0:
        flags[cube.CUBE_POS_Y * npairs + cube.CUBE_POS_X] = cube.select(rotate, cube.i32(1), cube.i32(0))


@cube.kernel
def jacobi_finish_kernel(w: cube.Array, v: cube.Array, shift: cube.Array, s: cube.Array, so: cube.Array,
                         uo: cube.Array, vo: cube.Array, r: cube.i32, c: cube.i32, eig: cube.Comptime[bool],
                         units: cube.Comptime[int]):
    """Column norms as singular values (descending) or, with `eig`, norms less `shift` as eigenvalues
    (ascending); vo's columns are v's rows in that order, uo's the normalized columns of w (unless eig)."""
    T = w.dtype
    u = cube.UNIT_POS
    b = cube.CUBE_POS
    for jb in range(0, c, units):
        j = jb + u
        if j < c:
            acc = T(0)
            for i in range(0, r):
                acc = acc + w[b * c * r + j * r + i] * w[b * c * r + j * r + i]
            s[b * c + j] = cube.sqrt(acc)
    cube.sync_units()
    for jb in range(0, c, units):
        j = jb + u
        jc = cube.min(j, c - 1)
        sj = s[b * c + jc]
        rank = cube.i32(0)
        for i in range(0, c):
            si = s[b * c + i]
            ahead = (si < sj) if eig else (si > sj)
            rank = rank + cube.select(ahead or ((si == sj) and (i < jc)), cube.i32(1), cube.i32(0))
        if j < c:
            so[b * c + rank] = (sj - shift[b]) if eig else sj
            for i in range(0, c):
                vo[b * c * c + i * c + rank] = v[b * c * c + jc * c + i]
            if not eig:
                inv = cube.select(sj == T(0), T(0), T(1) / cube.select(sj == T(0), T(1), sj))
                for i in range(0, r):
                    uo[b * r * c + i * c + rank] = w[b * c * r + jc * r + i] * inv


def _rounds(c: int) -> np.ndarray:
    """Round-robin pairs of c columns (a dummy column c when c is odd): (c' - 1) rounds of c' / 2 pairs,
    each column once per round, every pair once per sweep."""
    n = c + (c % 2)
    others = list(range(1, n))
    rounds = []
    for _ in range(n - 1):
        order = [0] + others
        rounds.append([sorted((order[i], order[n - 1 - i])) for i in range(n // 2)])
        others = others[-1:] + others[:-1]
    return np.asarray(rounds, np.int32).reshape(-1, 2)


def _jacobi(w, r: int, c: int):
    """Orthogonalize the c rows (length r) of each matrix of w in place; the rotations, as rows of v."""
    count = w.shape[0]
    v = empty((count, c, c), w.dtype, w)
    assign(v, np.eye(c, dtype=w.dtype))
    if c < 2 or not count or not r:
        return v
    pairs = _rounds(c)
    npairs = (c + c % 2) // 2
    rounds = len(pairs) // npairs
    pairs_dev = _like(pairs, w)
    flags = empty((count, npairs), np.int32, w)
    tol = float(np.finfo(w.dtype).eps) * max(1.0, math.sqrt(r))
    units = units_for(r)
    for _ in range(MAX_SWEEPS):
        rotated = 0
        for k in range(rounds):
            jacobi_round_kernel.launch(cube.CubeCount(npairs, count), cube.CubeDim(units), w.reshape(-1),
                                       v.reshape(-1), pairs_dev, flags, r, c, npairs, k * npairs, tol, units=units)
            rotated += int(np.asarray(_host(flags)).sum())
        if not rotated:
            break
    return v


def _like(x: np.ndarray, like):
    """The NumPy array `x` on `like`'s runtime."""
    from ..cube.runtime.arguments import DeviceArray
    return like.runtime.to_device(x) if isinstance(like, DeviceArray) else x


def _host(x) -> np.ndarray:
    from ..cube.runtime.arguments import DeviceArray
    return x.numpy() if isinstance(x, DeviceArray) else x


def jacobi_svd(a, full: bool):
    """(U, S, Vh) of a (..., m, n) batch: U (..., m, k) or (..., m, m) when `full`, S descending."""
    a = contiguous(a)
    *batch, m, n = a.shape
    count = math.prod(batch)
    tall = m >= n
    r, c = (m, n) if tall else (n, m)
    a3 = a.reshape(count, m, n)
    w = copy_as(transposed(a3) if tall else a3, a.dtype)
    v = _jacobi(w, r, c)
    norms = empty((count, c), a.dtype, a)
    s = empty((count, c), a.dtype, a)
    uo = empty((count, r, c), a.dtype, a)
    vo = empty((count, c, c), a.dtype, a)
    if count and c:
        units = units_for(c)
        jacobi_finish_kernel.launch(cube.CubeCount(count), cube.CubeDim(units), w.reshape(-1), v.reshape(-1),
                                    s, norms.reshape(-1), s.reshape(-1), uo.reshape(-1), vo.reshape(-1), r, c,
                                    eig=False, units=units)
    # U's columns from w / s lose orthogonality where s is tiny and are zero where it is 0: a Householder
    # QR of them keeps the good columns (up to sign) and completes the rest (and U to m x m when `full`).
    uq, ur = qr(uo, complete=full and r > c)
    uq = _signs(uq, ur)
    uq = uq.reshape(tuple(batch) + uq.shape[1:])
    s = s.reshape(tuple(batch) + (c,))
    vo = vo.reshape(tuple(batch) + (c, c))
    if tall:
        return uq, s, contiguous(transposed(vo))
    return vo, s, contiguous(transposed(uq))


@cube.kernel
def signs_kernel(q: cube.Array, rr: cube.Array, m: cube.i32, kq: cube.i32, n: cube.i32, kr: cube.i32):
    """q[:, j] *= sign(rr[j, j]) (sign(0) = 1) for j < min(kr, n), per matrix (cube y)."""
    T = q.dtype
    i = cube.ABSOLUTE_POS_X
    if i < m * kq:
        j = i % kq
        b = cube.CUBE_POS_Y
        jc = cube.min(j, kr - 1)
        d = rr[b * kr * n + jc * n + jc]
        flip = (j < kr) and (d < T(0))
        q[b * m * kq + i] = cube.select(flip, -q[b * m * kq + i], q[b * m * kq + i])


def _signs(q, r):
    """Q with each column j < min(k, n) multiplied by the sign of R[j, j]."""
    r = contiguous(r)
    count, m, kq = q.shape
    kr, n = r.shape[-2:]
    if count and m * kq and kr and n:
        signs_kernel.launch(cube.CubeCount(-(-(m * kq) // 256), count), cube.CubeDim(256), q.reshape(-1),
                            r.reshape(-1), m, kq, n, min(kr, n))
    return q


@cube.kernel
def eigh_prepare_kernel(a: cube.Array, w: cube.Array, shift: cube.Array, n: cube.i32, units: cube.Comptime[int]):
    """w = tril(a) + tril(a, -1)^T + shift I with shift = max row |.| sum (>= every |eigenvalue|)."""
    T = a.dtype
    u = cube.UNIT_POS
    base = cube.CUBE_POS * n * n
    best = T(0)
    for ib in range(0, n, units):
        i = cube.min(ib + u, n - 1)
        acc = T(0)
        for j in range(0, n):
            acc = acc + cube.abs(a[base + cube.max(i, j) * n + cube.min(i, j)])
        best = cube.max(best, acc)
    c = block_reduce("max", best, units)
    for i in range(0, n):
        for jb in range(0, n, units):
            j = jb + u
            if j < n:
                w[base + i * n + j] = a[base + cube.max(i, j) * n + cube.min(i, j)] + cube.select(i == j, c, T(0))
    if u == 0:
        shift[cube.CUBE_POS] = c


def jacobi_eigh(a):
    """(eigenvalues ascending, eigenvectors as columns) of the symmetric matrices given by the lower
    triangles of a (..., n, n) batch: Jacobi on the matrix shifted to be positive semidefinite, whose
    singular values are its eigenvalues."""
    a = contiguous(a)
    *batch, n, _ = a.shape
    count = math.prod(batch)
    w = empty((count, n, n), a.dtype, a)
    shift = empty((count,), a.dtype, a)
    norms = empty((count, n), a.dtype, a)
    vals = empty((count, n), a.dtype, a)
    vecs = empty((count, n, n), a.dtype, a)
    if count and n:
        units = units_for(n)
        eigh_prepare_kernel.launch(cube.CubeCount(count), cube.CubeDim(units), a.reshape(-1), w.reshape(-1), shift,
                                   n, units=units)
        v = _jacobi(w, n, n)
        jacobi_finish_kernel.launch(cube.CubeCount(count), cube.CubeDim(units), w.reshape(-1), v.reshape(-1), shift,
                                    norms.reshape(-1), vals.reshape(-1), vals.reshape(-1), vecs.reshape(-1), n, n,
                                    eig=True, units=units)
    return vals.reshape(tuple(batch) + (n,)), vecs.reshape(tuple(batch) + (n, n))
