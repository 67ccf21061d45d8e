"""The SVD of `ember.linalg` (arrays in, arrays out, any cube runtime): Householder bidiagonalization, then
the implicit-shift QR iteration on the bidiagonal (LAPACK's gesvd path), as cube kernels and matmuls.

1. Tall matrices are QR-factored first (blocked.qr) and the square R goes on; wide ones are transposed.
2. `bidiagonalize`: Q^T A P = B, upper bidiagonal, in panels of `PANEL` columns (LAPACK's labrd: a
   cube per matrix runs the panel's steps, its matrix-vector products included, and keeps the
   panel's updates in X and Y), the rest of the matrix updated by two matmuls, A -= V Y^T + X U^T.
   Q and P are built from their reflectors as a QR's Q is (blocked.Reflectors).
3. `bidiagonal_svd`: LAPACK's bdsqr (Demmel and Kahan): shifted or zero-shift QR sweeps chasing
   the bulge from the larger end, relative-accuracy convergence tests, a cube per matrix doing the
   scalar work and logging each sweep's rotations; a second kernel applies the logged rotations to
   U^T and V^T (rows j, j + 1 of each), a cube per strip of `STRIP` columns, which stays in cache
   across the whole log. They take turns until every matrix has converged.
4. The singular values are made positive (the sign goes into V) and sorted, descending.

Example:
    >>> u, s, vh = svd(np.array([[3.0, 0.0], [4.0, 5.0]]), full=False)
    >>> np.round(s, 6).tolist()
    [6.708204, 2.236068]
"""

from __future__ import annotations

import math

import numpy as np

from .. import cube
from ..kernels.common import assign, contiguous, copy_as, empty
from ..kernels.matmul import tuned_matmul
from . import blocked
from .blocks import Block, gemm_update, transposed_copy
from .kernels import lanes, panel_dots, partial_dot, reflect, subtract_rows, transposed, transposed_product
from .rotations import STATE, Log, iterate, log, rotation, sort

PANEL = 32  # columns per bidiagonalization panel


# ---- bidiagonalization ---------------------------------------------------------------------------------
@cube.kernel
def bidiag_panel_kernel(a: cube.Array, vq: cube.Array, vp: cube.Array, yt: cube.Array, xt: cube.Array,
                        tq: cube.Array, tp: cube.Array, d: cube.Array, e: cube.Array, n: cube.i32, p: cube.i32,
                        nb: cube.i32, width: cube.Comptime[int], units: cube.Comptime[int]):
    """Steps p .. p + nb - 1 of the bidiagonalization of each (n, n) matrix of a (a cube each; labrd): left
    reflector j as row j of vq (1 at j), right reflector j as row j of vp (1 at j + 1), their taus in tq,
    tp, the bidiagonal in d, e; row i of yt and xt are Y's and X's columns, with which the rest of the
    matrix (not written here) is updated afterwards: A -= V Y^T + X U^T."""
    T = a.dtype
    u = cube.UNIT_POS
    b = cube.CUBE_POS
    A = b * n * n
    Y = b * width * n
    X = b * width * n
    tmp = cube.shared(T, 2 * width)
    for i in range(0, nb):
        j = p + i
        rj = A + j * n  # row j of vq and of vp
        # column j, with the panel's updates: a[j:, j] - V Y[j]^T - X U[:, j]
        for r in range(u, n, units):
            vq[rj + r] = cube.select(r < j, T(0), a[A + r * n + j])
        cube.sync_units()
        subtract_rows(vq, rj, j, n, i, vq, A + p * n, yt, Y + j, n, n, units)
        subtract_rows(vq, rj, j, n, i, xt, X, vp, A + p * n + j, n, n, units)
        cube.sync_units()
        beta, tau = reflect(vq, rj, j, n, units)
        if u == 0:
            vq[rj + j] = T(1)
            d[b * n + j] = beta
            tq[b * n + j] = tau
        cube.sync_units()
        # Y's column i: tau (A[j:, j+1:]^T v - Y (V^T v) - U^T (X^T v))
        yi = Y + i * n
        transposed_product(yt, yi, j, j + 1, vq, rj, a, A, n, units)
        panel_dots(tmp, 0, i, vq, A + p * n + j, vq, rj + j, n - j, n, units)
        panel_dots(tmp, width, i, xt, X + j, vq, rj + j, n - j, n, units)
        cube.sync_units()
        subtract_rows(yt, yi, j + 1, n, i, yt, Y, tmp, 0, 1, n, units)
        subtract_rows(yt, yi, j + 1, n, i, vp, A + p * n, tmp, width, 1, n, units)
        for c in range(j + 1 + u, n, units):
            yt[yi + c] = yt[yi + c] * tau
        cube.sync_units()
        # row j, with the panel's updates: a[j, j+1:] - Y[j+1:] V[j]^T - U^T X[j]^T
        for c in range(u, n, units):
            vp[rj + c] = cube.select(c <= j, T(0), a[A + j * n + c])
        cube.sync_units()
        subtract_rows(vp, rj, j + 1, n, i + 1, yt, Y, vq, A + p * n + j, n, n, units)
        subtract_rows(vp, rj, j + 1, n, i, vp, A + p * n, xt, X + j, n, n, units)
        cube.sync_units()
        right = j + 1 < n
        beta, tau = reflect(vp, rj, j + 1, n, units)
        tau = cube.select(right, tau, T(0))
        if u == 0:
            tp[b * n + j] = tau
            if right:
                vp[rj + j + 1] = T(1)
                e[b * n + j] = beta
        cube.sync_units()
        # X's column i: tau (A[j+1:, j+1:] u - V (Y^T u) - X (U u))
        xi = X + i * n
        for r in range(u, n, units):
            xt[xi + r] = T(0)
        cube.sync_units()
        for r in range(j + 1 + u, n, units):
            xt[xi + r] = partial_dot(a, A + r * n + j + 1, vp, rj + j + 1, n - j - 1, 0, 1)
        panel_dots(tmp, 0, i + 1, yt, Y + j + 1, vp, rj + j + 1, n - j - 1, n, units)
        panel_dots(tmp, width, i, vp, A + p * n + j + 1, vp, rj + j + 1, n - j - 1, n, units)
        cube.sync_units()
        subtract_rows(xt, xi, j + 1, n, i + 1, vq, A + p * n, tmp, 0, 1, n, units)
        subtract_rows(xt, xi, j + 1, n, i, xt, X, tmp, width, 1, n, units)
        for r in range(j + 1 + u, n, units):
            xt[xi + r] = xt[xi + r] * tau
        cube.sync_units()


def bidiagonalize(x):
    """Q^T x P = B for x (count, n, n), destroyed: (d, e, Q's and P's `blocked.Reflectors`), d (count, n)
    B's diagonal, e (count, n) its superdiagonal (the last entry unused)."""
    count, n, _ = x.shape
    vq, vp = empty((count, n, n), x.dtype, x), empty((count, n, n), x.dtype, x)
    tq, tp = empty((count, n), x.dtype, x), empty((count, n), x.dtype, x)
    d, e = empty((count, n), x.dtype, x), empty((count, n), x.dtype, x)
    assign(e, np.zeros((), x.dtype))
    yt, xt = empty((count, PANEL, n), x.dtype, x), empty((count, PANEL, n), x.dtype, x)
    units = lanes(x, 64)
    for p in range(0, n, PANEL):
        nb = min(PANEL, n - p)
        bidiag_panel_kernel.launch(cube.CubeCount(count), cube.CubeDim(units), x.reshape(-1), vq.reshape(-1),
                                   vp.reshape(-1), yt.reshape(-1), xt.reshape(-1), tq.reshape(-1), tp.reshape(-1),
                                   d.reshape(-1), e.reshape(-1), n, p, nb, width=PANEL, units=units)
        q = p + nb
        if q < n:
            rest = Block(x, q, q, n - q, n - q)
            gemm_update(rest, Block(vq, p, q, nb, n - q).T, Block(yt, 0, q, nb, n - q))
            gemm_update(rest, Block(xt, 0, q, nb, n - q).T, Block(vp, p, q, nb, n - q))
    left, right = blocked.Reflectors(vq, tq), blocked.Reflectors(vp, tp, shift=1)
    for reflectors, k in ((left, n), (right, n - 1)):
        for k0 in range(0, k, blocked.QR_BLOCK):
            reflectors.add(k0, min(blocked.QR_BLOCK, k - k0))
    return d, e, left, right


# ---- the bidiagonal's SVD ------------------------------------------------------------------------------
@cube.function
def smallest_singular_value(f, g, h):
    """The smaller singular value of [[f, g], [0, h]] (LAPACK's las2)."""
    T = f.dtype
    fa = cube.abs(f)
    ga = cube.abs(g)
    ha = cube.abs(h)
    lo = cube.min(fa, ha)
    hi = cube.max(fa, ha)
    hi1 = cube.select(hi == T(0), T(1), hi)
    ga1 = cube.select(ga == T(0), T(1), ga)
    s = T(1) + lo / hi1
    t = (hi - lo) / hi1
    au = (ga / hi1) * (ga / hi1)
    below = lo * (T(2) / (cube.sqrt(s * s + au) + cube.sqrt(t * t + au)))
    av = hi / ga1
    c = T(1) / (cube.sqrt(T(1) + (s * av) * (s * av)) + cube.sqrt(T(1) + (t * av) * (t * av)))
    above = cube.select(av == T(0), (lo * hi) / ga1, T(2) * (lo * c) * av)
    return cube.select(lo == T(0), T(0), cube.select(ga < hi, below, above))


@cube.kernel
def bdsqr_start_kernel(d: cube.Array, e: cube.Array, st: cube.Array[cube.i32], thresh: cube.Array,
                       consts: cube.Array, n: cube.i32, maxit: cube.i32):
    """bdsqr's threshold (relative accuracy: tol times an estimate of the smallest singular value) and the
    start of the iteration, per matrix (a cube each)."""
    T = d.dtype
    b = cube.CUBE_POS
    tol = consts[2]
    mu = cube.abs(d[b * n])
    smin = mu
    for i in range(1, n):
        mu = cube.abs(d[b * n + i]) * (mu / cube.select(mu == T(0), T(1), mu + cube.abs(e[b * n + i - 1])))
        smin = cube.min(smin, mu)
    thresh[b] = cube.max(tol * smin / cube.sqrt(T(n)), T(6) * T(n) * T(n) * consts[1])
    st[b * STATE] = n - 1
    st[b * STATE + 1] = -1
    st[b * STATE + 2] = -1
    st[b * STATE + 3] = 0
    st[b * STATE + 4] = 0
    st[b * STATE + 5] = maxit
    st[b * STATE + STATE - 1] = cube.select(n <= 1, cube.i32(1), cube.i32(0))


@cube.kernel
def bdsqr_kernel(d: cube.Array, e: cube.Array, st: cube.Array[cube.i32], thresh: cube.Array, consts: cube.Array,
                 planes: cube.Array[cube.i32], rot: cube.Array, counts: cube.Array[cube.i32], n: cube.i32,
                 cap: cube.i32, steps: cube.i32):
    """Up to `steps` passes of bdsqr's main loop on each bidiagonal (d, e) (a cube each, one unit's scalar
    work), logging the sweeps' rotations (at most `cap`, then it stops) for `rotate_kernel`."""
    T = d.dtype
    b = cube.CUBE_POS
    D = b * n
    S = b * STATE
    eps = consts[0]
    tol = consts[2]
    small = thresh[b]
    m = st[S]
    oldll = st[S + 1]
    oldm = st[S + 2]
    idir = st[S + 3]
    it = st[S + 4]
    maxit = st[S + 5]
    count = cube.i32(0)
    full = cube.i32(0)
    for step in range(0, steps):
        if (m > 0) and (it <= maxit) and (full == 0):
            # the block [ll, m] of nonzero e: below the last e[l] <= thresh
            ll = cube.i32(-1)
            found = cube.i32(0)
            smax = cube.abs(d[D + m])
            for t in range(0, m):
                l = m - 1 - t
                abse = cube.abs(e[D + l])
                hit = (found == 0) and (abse <= small)
                ll = cube.select(hit, l, ll)
                smax = cube.select((found == 0) and (not hit), cube.max(smax, cube.max(cube.abs(d[D + l]), abse)), smax)
                found = cube.select(hit, cube.i32(1), found)
            if found == 1:
                e[D + ll] = T(0)
            if (found == 1) and (ll == m - 1):
                m = m - 1
            else:
                ll = ll + 1
                if (ll > oldm) or (m < oldll):
                    idir = cube.select(cube.abs(d[D + ll]) >= cube.abs(d[D + m]), cube.i32(1), cube.i32(2))
                split = cube.i32(0)
                sminl = T(0)
                mu = T(0)
                el = T(0)
                hit = found == 2
                if idir == 1:
                    if cube.abs(e[D + m - 1]) <= tol * cube.abs(d[D + m]):
                        e[D + m - 1] = T(0)
                        split = cube.i32(1)
                    mu = cube.abs(d[D + ll])
                    sminl = mu
                    for l in range(ll, m):
                        el = cube.abs(e[D + l])
                        hit = (split == 0) and (el <= tol * mu)
                        if hit:
                            e[D + l] = T(0)
                        split = cube.select(hit, cube.i32(1), split)
                        mu = cube.abs(d[D + l + 1]) * (mu / (mu + el))
                        sminl = cube.min(sminl, mu)
                else:
                    if cube.abs(e[D + ll]) <= tol * cube.abs(d[D + ll]):
                        e[D + ll] = T(0)
                        split = cube.i32(1)
                    mu = cube.abs(d[D + m])
                    sminl = mu
                    for t in range(0, m - ll):
                        l = m - 1 - t
                        el = cube.abs(e[D + l])
                        hit = (split == 0) and (el <= tol * mu)
                        if hit:
                            e[D + l] = T(0)
                        split = cube.select(hit, cube.i32(1), split)
                        mu = cube.abs(d[D + l]) * (mu / (mu + el))
                        sminl = cube.min(sminl, mu)
                if (split == 0) and (count + m - ll > cap):
                    full = cube.i32(1)
                if (split == 0) and (full == 0):
                    oldll = ll
                    oldm = m
                    forward = idir == 1
                    sll = cube.select(forward, cube.abs(d[D + ll]), cube.abs(d[D + m]))
                    shift = smallest_singular_value(cube.select(forward, d[D + m - 1], d[D + ll]),
                                                    cube.select(forward, e[D + m - 1], e[D + ll]),
                                                    cube.select(forward, d[D + m], d[D + ll + 1]))
                    ratio = shift / cube.select(sll > T(0), sll, T(1))
                    zero = (T(n) * tol * (sminl / smax) <= cube.max(eps, T(0.01) * tol)) or (
                        (sll > T(0)) and (ratio * ratio < eps))
                    it = it + m - ll
                    if zero and forward:
                        cs = T(1)
                        oldcs = T(1)
                        oldsn = T(0)
                        for i in range(ll, m):
                            c1, s1, r1 = rotation(d[D + i] * cs, e[D + i])
                            if i > ll:
                                e[D + i - 1] = oldsn * r1
                            c2, s2, r2 = rotation(oldcs * r1, d[D + i + 1] * s1)
                            d[D + i] = r2
                            log(planes, rot, b, cap, count + i - ll, i, (c2, s2, c1, s1))
                            cs = c1
                            oldcs = c2
                            oldsn = s2
                        h = d[D + m] * cs
                        d[D + m] = h * oldcs
                        e[D + m - 1] = cube.select(cube.abs(h * oldsn) <= small, T(0), h * oldsn)
                    if zero and (not forward):
                        cs = T(1)
                        oldcs = T(1)
                        oldsn = T(0)
                        for t in range(0, m - ll):
                            i = m - t
                            c1, s1, r1 = rotation(d[D + i] * cs, e[D + i - 1])
                            if i < m:
                                e[D + i] = oldsn * r1
                            c2, s2, r2 = rotation(oldcs * r1, d[D + i - 1] * s1)
                            d[D + i] = r2
                            log(planes, rot, b, cap, count + t, i - 1, (c1, -s1, c2, -s2))
                            cs = c1
                            oldcs = c2
                            oldsn = s2
                        h = d[D + ll] * cs
                        d[D + ll] = h * oldcs
                        e[D + ll] = cube.select(cube.abs(h * oldsn) <= small, T(0), h * oldsn)
                    if (not zero) and forward:
                        first = d[D + ll]
                        f = (cube.abs(first) - shift) * (cube.select(first >= T(0), T(1), T(-1)) + shift / first)
                        g = e[D + ll]
                        for i in range(ll, m):
                            cr, sr, r1 = rotation(f, g)
                            if i > ll:
                                e[D + i - 1] = r1
                            di = d[D + i]
                            ei = e[D + i]
                            dn = d[D + i + 1]
                            f = cr * di + sr * ei
                            ei1 = cr * ei - sr * di
                            g = sr * dn
                            dn1 = cr * dn
                            cl, sl, r2 = rotation(f, g)
                            d[D + i] = r2
                            f = cl * ei1 + sl * dn1
                            d[D + i + 1] = cl * dn1 - sl * ei1
                            e[D + i] = ei1
                            if i < m - 1:
                                g = sl * e[D + i + 1]
                                e[D + i + 1] = cl * e[D + i + 1]
                            log(planes, rot, b, cap, count + i - ll, i, (cl, sl, cr, sr))
                        e[D + m - 1] = cube.select(cube.abs(f) <= small, T(0), f)
                    if (not zero) and (not forward):
                        last = d[D + m]
                        f = (cube.abs(last) - shift) * (cube.select(last >= T(0), T(1), T(-1)) + shift / last)
                        g = e[D + m - 1]
                        for t in range(0, m - ll):
                            i = m - t
                            cr, sr, r1 = rotation(f, g)
                            if i < m:
                                e[D + i] = r1
                            di = d[D + i]
                            ep = e[D + i - 1]
                            dp = d[D + i - 1]
                            f = cr * di + sr * ep
                            ep1 = cr * ep - sr * di
                            g = sr * dp
                            dp1 = cr * dp
                            cl, sl, r2 = rotation(f, g)
                            d[D + i] = r2
                            f = cl * ep1 + sl * dp1
                            d[D + i - 1] = cl * dp1 - sl * ep1
                            e[D + i - 1] = ep1
                            if i > ll + 1:
                                g = sl * e[D + i - 2]
                                e[D + i - 2] = cl * e[D + i - 2]
                            log(planes, rot, b, cap, count + t, i - 1, (cr, -sr, cl, -sl))
                        e[D + ll] = cube.select(cube.abs(f) <= small, T(0), f)
                    count = count + m - ll
    st[S] = m
    st[S + 1] = oldll
    st[S + 2] = oldm
    st[S + 3] = idir
    st[S + 4] = it
    st[S + STATE - 1] = cube.select(m <= 0, cube.i32(1), cube.select(it > maxit, cube.i32(2), cube.i32(0)))
    counts[b] = count


def bidiagonal_svd(d, e, x) -> None:
    """Diagonalize each bidiagonal (d, e) in place by bdsqr's QR sweeps, their rotations applied to the rows of
    x (2, count, n, n) = [U^T, V^T]; d ends up holding the singular values with signs, unsorted."""
    count, n = d.shape
    eps = float(np.finfo(d.dtype).eps)
    consts = empty((3,), d.dtype, d)
    assign(consts, np.array([eps, np.finfo(d.dtype).tiny, max(10.0, min(100.0, eps ** -0.125)) * eps], d.dtype))
    st = empty((count, STATE), np.int32, d)
    thresh = empty((count,), d.dtype, d)
    bdsqr_start_kernel.launch(cube.CubeCount(count), cube.CubeDim(1), d.reshape(-1), e.reshape(-1), st.reshape(-1),
                              thresh, consts, n, min(6 * n * n, 2**31 - 1))
    rotations = Log(count, 2, n, d)

    def step(steps: int) -> None:
        bdsqr_kernel.launch(cube.CubeCount(count), cube.CubeDim(1), d.reshape(-1), e.reshape(-1), st.reshape(-1),
                            thresh, consts, rotations.planes.reshape(-1), rotations.rot.reshape(-1), rotations.counts,
                            n, rotations.cap, steps)

    iterate(step, rotations, st, x, "svd")


def square_svd(x):
    """(U^T, S descending, V^T) of each (n, n) matrix of x (count, n, n), which is destroyed."""
    count, n, _ = x.shape
    d, e, left, right = bidiagonalize(x)
    uv = empty((2, count, n, n), x.dtype, x)
    transposed_copy(left.q(n, n), out=uv[0])
    transposed_copy(right.q(n, n), out=uv[1])
    bidiagonal_svd(d, e, uv)
    s, out = sort(d, uv, svd=True)
    return out[0], s, out[1]


def svd(a, full: bool):
    """(U, S, Vh) of a (..., m, n) batch: U (..., m, k) or (..., m, m) when `full`, S (..., k) descending,
    Vh (..., k, n) or (..., n, n), k = min(m, n)."""
    *batch, m, n = a.shape
    batch = tuple(batch)
    if m < n:
        u, s, vh = svd(transposed_copy(a), full)
        return transposed_copy(vh), s, transposed_copy(u)
    count = math.prod(batch)
    a3 = contiguous(a).reshape(count, m, n)
    if not (count and n):
        q = blocked.qr(a3, complete=full)[0]
        return (q.reshape(batch + q.shape[1:]), empty(batch + (n,), a.dtype, a),
                empty(batch + (n, n), a.dtype, a))
    if m > n:
        q, r = blocked.qr(a3, complete=full)
        uo, s, vh = square_svd(contiguous(r[:, :n, :]))
        u = q if full else empty((count, m, n), a.dtype, a)
        assign(u[:, :, :n], tuned_matmul(q[:, :, :n], transposed(uo)))
    else:
        uo, s, vh = square_svd(copy_as(a3, a.dtype))
        u = transposed_copy(uo)
    return u.reshape(batch + u.shape[1:]), s.reshape(batch + (n,)), vh.reshape(batch + (n, n))
