"""The symmetric eigendecomposition of `ember.linalg` (arrays in, arrays out, any cube runtime): Householder
tridiagonalization, then the implicit QL/QR iteration on the tridiagonal (LAPACK's syev path).

1. The lower triangle is mirrored into a full symmetric matrix (`symmetrize_kernel`).
2. `tridiagonalize`: Q^T A Q = T in panels of `PANEL` columns (LAPACK's latrd: a cube per matrix runs
   the panel's steps, its matrix-vector products included, keeping the panel's updates in W), the
   rest of the matrix updated by two matmuls, A -= V W^T + W V^T; Q is built from its reflectors
   as a QR's Q is (blocked.Reflectors).
3. LAPACK's steqr: QL or QR sweeps (from the end with the smaller diagonal entry) with Wilkinson's
   shift, 2 x 2 blocks solved directly, a cube per matrix doing the scalar work and logging the
   rotations, which `rotations.Log` applies to Z^T (starting from Q^T) in turn.
4. The eigenvalues are sorted, ascending, and the eigenvectors are the columns of Z.

Example:
    >>> w, v = eigh(np.array([[2.0, 0.0], [1.0, 2.0]]))      # from the lower triangle
    >>> w.tolist()
    [1.0, 3.0]
"""

from __future__ import annotations

import math

import numpy as np

from .. import cube
from ..kernels.common import assign, contiguous, empty
from . import blocked
from .blocks import Block, gemm_update, transposed_copy
from .kernels import dot, lanes, panel_dots, reflect, subtract_rows, transposed_product
from .rotations import STATE, Log, iterate, log, rotation, sort

PANEL = 32  # columns per tridiagonalization panel


@cube.kernel
def symmetrize_kernel(a: cube.Array, x: cube.Array, n: cube.i32, units: cube.Comptime[int]):
    """x[i, j] = a[max(i, j), min(i, j)] for each (n, n) matrix: cube (matrix, row i)."""
    b = cube.CUBE_POS_X
    i = cube.CUBE_POS_Y
    for j in range(cube.UNIT_POS, n, units):
        x[(b * n + i) * n + j] = a[(b * n + cube.max(i, j)) * n + cube.min(i, j)]


@cube.kernel
def tridiag_panel_kernel(a: cube.Array, vs: cube.Array, wt: cube.Array, taus: cube.Array, d: cube.Array,
                         e: cube.Array, n: cube.i32, p: cube.i32, nb: cube.i32, width: cube.Comptime[int],
                         units: cube.Comptime[int]):
    """Steps p .. p + nb - 1 of the tridiagonalization of each symmetric (n, n) matrix of a (both triangles
    held; a cube each; latrd, lower): reflector j as row j of vs (1 at j + 1), its tau in taus, the
    tridiagonal in d, e; row i of wt is W's column i, with which the rest of the matrix (not written
    here) is updated afterwards: A -= V W^T + W V^T."""
    T = a.dtype
    u = cube.UNIT_POS
    b = cube.CUBE_POS
    A = b * n * n
    W = b * width * n
    tmp = cube.shared(T, 2 * width)
    for i in range(0, nb):
        j = p + i
        vj = A + j * n
        # column j from the diagonal down, with the panel's updates: a[j:, j] - V W[j]^T - W V[j]^T
        for r in range(u, n, units):
            vs[vj + r] = cube.select(r < j, T(0), a[A + r * n + j])
        cube.sync_units()
        subtract_rows(vs, vj, j, n, i, vs, A + p * n, wt, W + j, n, n, units)
        subtract_rows(vs, vj, j, n, i, wt, W, vs, A + p * n + j, n, n, units)
        cube.sync_units()
        below = j + 1 < n
        diagonal = vs[vj + j]
        beta, tau = reflect(vs, vj, j + 1, n, units)
        tau = cube.select(below, tau, T(0))
        if u == 0:
            d[b * n + j] = diagonal
            taus[b * n + j] = tau
            vs[vj + j] = T(0)
            if below:
                vs[vj + j + 1] = T(1)
                e[b * n + j] = beta
        cube.sync_units()
        # W's column i: tau (A[j+1:, j+1:] v - V (W^T v) - W (V^T v)), then w -= (tau / 2) (w . v) v
        wi = W + i * n
        transposed_product(wt, wi, j + 1, j + 1, vs, vj, a, A, n, units)
        panel_dots(tmp, 0, i, wt, W + j + 1, vs, vj + j + 1, n - j - 1, n, units)
        panel_dots(tmp, width, i, vs, A + p * n + j + 1, vs, vj + j + 1, n - j - 1, n, units)
        cube.sync_units()
        subtract_rows(wt, wi, j + 1, n, i, vs, A + p * n, tmp, 0, 1, n, units)
        subtract_rows(wt, wi, j + 1, n, i, wt, W, tmp, width, 1, n, units)
        for c in range(j + 1 + u, n, units):
            wt[wi + c] = wt[wi + c] * tau
        cube.sync_units()
        half = T(-0.5) * tau * dot(wt, wi + j + 1, vs, vj + j + 1, n - j - 1, units)
        for c in range(j + 1 + u, n, units):
            wt[wi + c] = wt[wi + c] + half * vs[vj + c]
        cube.sync_units()


def tridiagonalize(x):
    """Q^T x Q = T for the symmetric x (count, n, n), destroyed: (d, e, Q's `blocked.Reflectors`), d (count, n)
    T's diagonal, e (count, n) its subdiagonal (the last entry unused)."""
    count, n, _ = x.shape
    vs, taus = empty((count, n, n), x.dtype, x), empty((count, n), x.dtype, x)
    d, e = empty((count, n), x.dtype, x), empty((count, n), x.dtype, x)
    assign(e, np.zeros((), x.dtype))
    wt = empty((count, PANEL, n), x.dtype, x)
    units = lanes(x, 64)
    for p in range(0, n, PANEL):
        nb = min(PANEL, n - p)
        tridiag_panel_kernel.launch(cube.CubeCount(count), cube.CubeDim(units), x.reshape(-1), vs.reshape(-1),
                                    wt.reshape(-1), taus.reshape(-1), d.reshape(-1), e.reshape(-1), n, p, nb,
                                    width=PANEL, units=units)
        q = p + nb
        if q < n:
            rest = Block(x, q, q, n - q, n - q)
            gemm_update(rest, Block(vs, p, q, nb, n - q).T, Block(wt, 0, q, nb, n - q))
            gemm_update(rest, Block(wt, 0, q, nb, n - q).T, Block(vs, p, q, nb, n - q))
    reflectors = blocked.Reflectors(vs, taus, shift=1)
    for k0 in range(0, n - 1, blocked.QR_BLOCK):
        reflectors.add(k0, min(blocked.QR_BLOCK, n - 1 - k0))
    return d, e, reflectors


# ---- the tridiagonal's eigenvalues -----------------------------------------------------------------------
@cube.function
def symmetric_eig2(a, b, c):
    """(rt1, rt2, cs, sn) of [[a, b], [b, c]] (LAPACK's laev2): rt1 the eigenvalue of larger |.|, (cs, sn) its
    unit eigenvector."""
    T = a.dtype
    sm = a + c
    df = a - c
    adf = cube.abs(df)
    tb = b + b
    ab = cube.abs(tb)
    acmx = cube.select(cube.abs(a) > cube.abs(c), a, c)
    acmn = cube.select(cube.abs(a) > cube.abs(c), c, a)
    big = cube.max(adf, ab)
    small = cube.min(adf, ab)
    ratio = small / cube.select(big == T(0), T(1), big)
    rt = big * cube.sqrt(T(1) + ratio * ratio)
    rt1 = cube.select(sm < T(0), T(0.5) * (sm - rt), cube.select(sm > T(0), T(0.5) * (sm + rt), T(0.5) * rt))
    rt1s = cube.select(rt1 == T(0), T(1), rt1)
    rt2 = cube.select(sm == T(0), T(-0.5) * rt, (acmx / rt1s) * acmn - (b / rt1s) * b)
    sgn1 = cube.select(sm < T(0), T(-1), T(1))
    cs = cube.select(df >= T(0), df + rt, df - rt)
    sgn2 = cube.select(df >= T(0), T(1), T(-1))
    ct = -tb / cube.select(cs == T(0), T(1), cs)
    sn_a = T(1) / cube.sqrt(T(1) + ct * ct)
    tn = -cs / cube.select(tb == T(0), T(1), tb)
    cs_b = T(1) / cube.sqrt(T(1) + tn * tn)
    wide = cube.abs(cs) > ab
    cs1 = cube.select(wide, ct * sn_a, cube.select(ab == T(0), T(1), cs_b))
    sn1 = cube.select(wide, sn_a, cube.select(ab == T(0), T(0), tn * cs_b))
    swap = sgn1 == sgn2
    return rt1, rt2, cube.select(swap, -sn1, cs1), cube.select(swap, cs1, sn1)


@cube.kernel
def steqr_kernel(d: cube.Array, e: cube.Array, st: cube.Array[cube.i32], consts: cube.Array,
                 planes: cube.Array[cube.i32], rot: cube.Array, counts: cube.Array[cube.i32], n: cube.i32,
                 cap: cube.i32, steps: cube.i32):
    """Up to `steps` passes of steqr's main loop on each tridiagonal (d, e) (a cube each, one unit's scalar
    work), logging the sweeps' rotations (at most `cap`, then it stops) for `rotations.rotate_kernel`.
    st holds l1, l, lend, lsv, lendsv, phase (0: find the next block), the sweep count and the status."""
    T = d.dtype
    b = cube.CUBE_POS
    D = b * n
    S = b * STATE
    eps = consts[0]
    safmin = consts[1]
    eps2 = eps * eps
    l1 = st[S]
    l = st[S + 1]
    lend = st[S + 2]
    lsv = st[S + 3]
    lendsv = st[S + 4]
    phase = st[S + 5]
    jtot = st[S + 6]
    status = st[S + STATE - 1]
    nmaxit = 30 * n
    count = cube.i32(0)
    full = cube.i32(0)
    for step in range(0, steps):
        m = cube.i32(0)
        found = cube.i32(0)
        hit = found == 1
        if (status == 0) and (full == 0):
            if phase == 0:
                if l1 > n - 1:
                    status = cube.i32(1)
                else:
                    if l1 > 0:
                        e[D + l1 - 1] = T(0)
                    m = n - 1
                    for mm in range(l1, n - 1):
                        tst = cube.abs(e[D + mm])
                        small = tst <= cube.sqrt(cube.abs(d[D + mm])) * cube.sqrt(cube.abs(d[D + mm + 1])) * eps
                        hit = (found == 0) and small
                        if hit:
                            e[D + mm] = T(0)
                        m = cube.select(hit, mm, m)
                        found = cube.select(hit, cube.i32(1), found)
                    l = l1
                    lsv = l1
                    lend = m
                    lendsv = m
                    l1 = m + 1
                    if lend != l:
                        if cube.abs(d[D + lend]) < cube.abs(d[D + l]):
                            lend = lsv
                            l = lendsv
                        phase = cube.i32(1)
            else:
                ql = lend > l
                m = lend
                for t in range(0, cube.select(ql, lend - l, l - lend)):
                    mm = cube.select(ql, l + t, l - t)
                    nb = cube.select(ql, mm + 1, mm - 1)
                    ee = e[D + cube.select(ql, mm, mm - 1)]
                    hit = (found == 0) and (ee * ee <= (eps2 * cube.abs(d[D + mm])) * cube.abs(d[D + nb]) + safmin)
                    m = cube.select(hit, mm, m)
                    found = cube.select(hit, cube.i32(1), found)
                if m != lend:
                    e[D + cube.select(ql, m, m - 1)] = T(0)
                p = d[D + l]
                step_to = cube.select(ql, cube.i32(1), cube.i32(-1))
                if m == l:
                    l = l + step_to
                    phase = cube.select((ql and (l > lend)) or ((not ql) and (l < lend)), cube.i32(0), phase)
                elif m == l + step_to:
                    lo = cube.min(l, m)
                    rt1, rt2, c2, s2 = symmetric_eig2(d[D + lo], e[D + lo], d[D + lo + 1])
                    if count + 1 > cap:
                        full = cube.i32(1)
                    else:
                        log(planes, rot, b, cap, count, lo, (c2, s2))
                        count = count + 1
                        d[D + lo] = rt1
                        d[D + lo + 1] = rt2
                        e[D + lo] = T(0)
                        l = l + 2 * step_to
                        phase = cube.select((ql and (l > lend)) or ((not ql) and (l < lend)), cube.i32(0), phase)
                elif jtot == nmaxit:
                    status = cube.i32(2)
                elif count + cube.abs(m - l) > cap:
                    full = cube.i32(1)
                else:
                    jtot = jtot + 1
                    el = e[D + cube.select(ql, l, l - 1)]
                    g = (d[D + l + step_to] - p) / (T(2) * el)
                    r = cube.sqrt(g * g + T(1))
                    g = d[D + m] - p + el / (g + cube.select(g >= T(0), r, -r))
                    s = T(1)
                    c = T(1)
                    p = T(0)
                    if ql:
                        for t in range(0, m - l):
                            iq = m - 1 - t
                            fq = s * e[D + iq]
                            bq = c * e[D + iq]
                            cq, sq, rq = rotation(g, fq)
                            if iq != m - 1:
                                e[D + iq + 1] = rq
                            g = d[D + iq + 1] - p
                            r = (d[D + iq] - g) * sq + T(2) * cq * bq
                            p = sq * r
                            d[D + iq + 1] = g + p
                            g = cq * r - bq
                            c = cq
                            s = sq
                            log(planes, rot, b, cap, count + t, iq, (cq, -sq))
                        d[D + l] = d[D + l] - p
                        e[D + l] = g
                    else:
                        for i in range(m, l):
                            f = s * e[D + i]
                            bb = c * e[D + i]
                            c1, s1, r1 = rotation(g, f)
                            if i != m:
                                e[D + i - 1] = r1
                            g = d[D + i] - p
                            r = (d[D + i + 1] - g) * s1 + T(2) * c1 * bb
                            p = s1 * r
                            d[D + i] = g + p
                            g = c1 * r - bb
                            c = c1
                            s = s1
                            log(planes, rot, b, cap, count + i - m, i, (c1, s1))
                        d[D + l] = d[D + l] - p
                        e[D + l - 1] = g
                    count = count + cube.abs(m - l)
    st[S] = l1
    st[S + 1] = l
    st[S + 2] = lend
    st[S + 3] = lsv
    st[S + 4] = lendsv
    st[S + 5] = phase
    st[S + 6] = jtot
    st[S + STATE - 1] = status
    counts[b] = count


def tridiagonal_eigh(d, e, z) -> None:
    """Diagonalize each tridiagonal (d, e) in place by steqr's sweeps, their rotations applied to the rows of
    z (1, count, n, n) = [Z^T]; d ends up holding the eigenvalues, unsorted."""
    count, n = d.shape
    consts = empty((2,), d.dtype, d)
    assign(consts, np.array([np.finfo(d.dtype).eps, np.finfo(d.dtype).tiny], d.dtype))
    st = empty((count, STATE), np.int32, d)
    assign(st, np.zeros((), np.int32))
    rotations = Log(count, 1, n, d)

    def step(steps: int) -> None:
        steqr_kernel.launch(cube.CubeCount(count), cube.CubeDim(1), d.reshape(-1), e.reshape(-1), st.reshape(-1),
                            consts, rotations.planes.reshape(-1), rotations.rot.reshape(-1), rotations.counts, n,
                            rotations.cap, steps)

    iterate(step, rotations, st, z, "eigh")


def eigh(a):
    """(eigenvalues ascending, eigenvectors as columns) of the symmetric matrices given by the lower
    triangles of a (..., n, n) batch."""
    a = contiguous(a)
    *batch, n, _ = a.shape
    batch = tuple(batch)
    count = math.prod(batch)
    if not (count and n):
        return empty(batch + (n,), a.dtype, a), empty(batch + (n, n), a.dtype, a)
    x = empty((count, n, n), a.dtype, a)
    units = lanes(a, 64)
    symmetrize_kernel.launch(cube.CubeCount(count, n), cube.CubeDim(units), a.reshape(-1), x.reshape(-1), n,
                             units=units)
    d, e, reflectors = tridiagonalize(x)
    z = empty((1, count, n, n), a.dtype, a)
    transposed_copy(reflectors.q(n, n), out=z[0])
    tridiagonal_eigh(d, e, z)
    w, out = sort(d, z, svd=False)
    return w.reshape(batch + (n,)), transposed_copy(out[0]).reshape(batch + (n, n))
